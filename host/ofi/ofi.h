// libulnic-fi: a libfabric provider on the NIC's native AM endpoints
// (host/ofi/README.md). Internals shared by its files.
//
// Objects: a fabric; a domain = one ulnic::Nic (one slot of the node's NIC)
// and one lock, which every call of the domain's objects takes (the Nic is
// not thread-safe); an endpoint = one AM endpoint of the slot (a receive
// ring in the slot heap); AVs, CQs and MRs are host-side tables.
//
// Wire protocol, one AM request message per packet (WireHdr first):
//   kEager  header + the whole message (up to kEagerMax bytes);
//   kEagerFrag one fragment of an eager message of kEagerMax < len <=
//            kFragMsgMax bytes (Domain::eager_max decides which go so): its
//            offset in `rid`, a multiple of kEagerMax, kEagerMax bytes (the
//            last: what is left) after the header; all of a message's
//            fragments carry its seq, len, tag, data and flags;
//   kRts    header: a message of `len` bytes waits at the sender (rendezvous);
//   kCts    the receiver registered its buffer (key, addr): put `len` bytes there;
//   kFin    the sender's put is complete (or failed): the receive is done;
//   kReadReq fi_read: put `len` bytes from our (key, data) to the reader's
//            (rid: its key, tag: its address); sid: the reader's operation;
//   kReadDone the put of a kReadReq is complete (or refused / failed);
//   kWriteData fi_writedata: our put of `len` bytes at `tag` (the target's
//            address) is complete; `data` is its remote CQ data.
//   kEagerLong an eager message of `len` bytes (kEagerMax < len <=
//            kFragMsgMax), or with kWireChunk chunk `chunk` of a streamed
//            one, whose bytes (the Long's) the NIC placed in our segment, in
//            the lane we granted its sender: they take [rid, rid + key + n)
//            of the lane's byte stream (`key` bytes skipped so they do not
//            wrap), i.e. lane offset (rid + key) % lane size;
//   kLaneReq  the sender asks for a lane of our segment;
//   kLaneGrant our lane for it: at segment offset `data`, `len` bytes (0: none
//            to give), generation `sid`;
//   kCredit  the receiver has taken the first `len` bytes of the lane's
//            stream (generation `sid`): the sender may reuse them;
//   kLaneRelease the sender's endpoint closes: its lane (generation `sid`)
//            is free for another sender.
//   kProbe   nothing: its sender waits for us and asks its NIC whether we
//            are still there (the message's verdict); ignored.
// kEager, kEagerFrag, kEagerLong and kRts carry `seq`, the sender endpoint's message number to this
// receiver endpoint: the NIC refuses a message when the receiving ring is
// full (the sender resends it later), so messages can arrive out of order,
// and the receiver puts them back in order before it matches them.
#pragma once

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>
#include <rdma/fi_tagged.h>
#include <rdma/providers/fi_log.h>
#include <rdma/providers/fi_prov.h>

#include <atomic>
#include <cstdint>
#include <deque>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "ulnic/abi/am.h"
#include "ulnic/nic.h"

namespace ulnic::ofi {

namespace abi = ::ulnic::abi;

extern fi_provider g_prov;
#define ULNIC_WARN(subsys, ...) FI_WARN(&::ulnic::ofi::g_prov, subsys, __VA_ARGS__)
#define ULNIC_INFO(subsys, ...) FI_INFO(&::ulnic::ofi::g_prov, subsys, __VA_ARGS__)

constexpr uint32_t kProvVersion = FI_VERSION(0, 1);
constexpr uint32_t kApiVersion = FI_VERSION(1, 17);

// An endpoint's address (fi_getname, fi_av_insert): everything a sender
// needs, so no name service is involved. The tag is random per endpoint:
// the NIC admits only requests that carry it.
struct Addr {
  uint16_t node;
  uint16_t slot;
  uint8_t ep;
  uint8_t version;  // kAddrVersion
  uint16_t zero;
  uint64_t tag;
};
static_assert(sizeof(Addr) == 16);
constexpr uint8_t kAddrVersion = 1;
inline uint64_t addr_id(uint32_t node, uint32_t slot, uint32_t ep) {
  return uint64_t(node) << 32 | uint64_t(slot) << 8 | ep;
}
inline uint64_t addr_id(const Addr& a) { return addr_id(a.node, a.slot, a.ep); }

enum WireKind : uint8_t {
  kEager = 1, kRts = 2, kCts = 3, kFin = 4, kReadReq = 5, kReadDone = 6, kWriteData = 7, kEagerFrag = 8,
  kEagerLong = 9, kLaneReq = 10, kLaneGrant = 11, kCredit = 12, kLaneRelease = 13, kProbe = 14
};
// kWireChunk: a kEagerLong that is chunk `chunk` (kChunkBytes each) of a
// message of `len` bytes (kEagerMax < len <= kStreamMax) streamed through
// the lane: no rendezvous, the receiver copies each chunk out.
enum WireFlags : uint8_t { kWireTagged = 1, kWireData = 2, kWireFailed = 4, kWireChunk = 8 };
struct WireHdr {
  uint32_t magic;  // kWireMagic
  uint8_t kind;    // WireKind
  uint8_t flags;   // WireFlags
  uint16_t chunk;  // kEagerLong with kWireChunk: the chunk's index
  uint32_t seq;    // kEager/kRts: message number from the sending endpoint to this one
  uint32_t key;    // kCts: the receive buffer's memory key
  uint64_t len;    // kEager: payload bytes that follow; kRts: message bytes; kCts: bytes to put
  uint64_t tag;
  uint64_t data;   // remote CQ data; kCts: the receive buffer's address
  uint64_t sid;    // kRts/kCts/kFin: the sender's operation
  uint64_t rid;    // kCts/kFin: the receiver's operation; kEagerFrag: the fragment's offset
  uint64_t src_tag;  // the sending endpoint's tag: what a reply must carry, and its incarnation
};
static_assert(sizeof(WireHdr) == 64);
constexpr uint32_t kWireMagic = 0x4f464955;  // "UIFO"

constexpr uint32_t kEagerMax = abi::kAmMaxMessage - sizeof(WireHdr);  // payload of an eager message
// Eager messages in fragments: at most kMaxFrags ring entries each. Messages
// up to Domain::eager_max (FI_ULNIC_EAGER_SIZE, default kDefaultEagerSize)
// go so, larger ones by rendezvous; a receiver takes either up to kFragMsgMax.
constexpr uint32_t kMaxFrags = 16;
constexpr size_t kFragMsgMax = size_t(kMaxFrags) * kEagerMax;
constexpr size_t kDefaultEagerSize = size_t(64) << 10;
static_assert(kDefaultEagerSize <= kFragMsgMax);
// Lanes: an endpoint's segment (the AM endpoint's, where the NIC places a
// Long's bytes) is cut into lanes of kLaneBytes, each granted to one sender,
// which sends an eager message above kEagerMax as one Long into it (one NIC
// operation, as native AM's AM_RequestXfer) while the receiver's credits
// leave it room, else in fragments. min(kMaxLanes, slot / 16 / kLaneBytes).
constexpr size_t kLaneBytes = size_t(1) << 20;
// Messages above the eager size up to kStreamMax go as a stream of
// kChunkBytes Longs through the sender's lane (one that holds a chunk),
// each chunk when the credits leave it room: one trip instead of the
// rendezvous's four, for a copy on each side. Larger ones, or before the
// lane is granted: rendezvous. 256 KiB chunks against 64 KiB (MPI windows
// of 8 MiB and ping-pongs, 2 vCPUs, six interleaved pairs): 1 MiB windows
// 1328-1702 MB/s against 679-1674, 1 MiB RTT/2 1.8-2.3 ms against 2.2-2.7;
// 64 KiB eager messages (fewer staging buffers now) 1307-1822 against
// 1050-1795 in five of the pairs, 502 in the sixth.
constexpr size_t kChunkBytes = size_t(256) << 10;
constexpr size_t kStreamMax = size_t(1) << 20;
static_assert(kStreamMax / kChunkBytes <= 32 && kChunkBytes >= kFragMsgMax);
constexpr uint32_t kMaxLanes = 8;
constexpr uint32_t kLongBufs = 16;  // per endpoint: staging for Longs in flight (a chunk or an eager message)
constexpr size_t kLongBufBytes = (abi::am_send_bytes(sizeof(WireHdr), kChunkBytes) + 63) & ~size_t(63);
constexpr size_t kMaxMsg = abi::kMaxCopyBytes;   // one put
constexpr uint32_t kRingEntries = 256;           // per endpoint (power of 2)
constexpr uint32_t kSendBufs = 64;               // per endpoint, registered, in the slot heap
constexpr size_t kBufBytes = (sizeof(abi::AmPrefix) + abi::kAmMaxMessage + 63) & ~size_t(63);
constexpr size_t kMaxPendingPerPeer = 1024;      // out-of-order messages kept per sender
constexpr size_t kMaxUnexpectedBytes = 64u << 20;  // beyond: the ring is left full (senders retry)
constexpr uint32_t kMaxEndpoints = abi::kMaxAmEndpoints;
constexpr size_t kCqDataSize = 8;
constexpr int64_t kRetryNs = 200'000;  // a refused message waits this long before it goes again
// Peers that operations of ours wait for are probed this often (kProbe): a
// peer that is gone fails them (ep.cpp, peer_gone) within about two periods
// of the application's CQ reads.
constexpr int64_t kProbeNs = 1'000'000'000;
constexpr int kAutoSliceMs = 50;  // FI_PROGRESS_AUTO: the progress thread's longest sleep

// Provider errors (prov_errno of an error completion, fi_cq_strerror):
// NIC statuses (abi::CqStatus) as they are, ours above them.
enum ProvErr : int {
  kErrTruncated = 1000,     // the message was longer than the receive buffer
  kErrRemoteFailed = 1001,  // the sender's put failed: the buffer holds part of the message
  kErrRegister = 1002,      // the NIC would not register the buffer
  kErrCanceled = 1003,      // fi_cancel
  kErrReadRefused = 1004,   // fi_read: no MR of the target's with FI_REMOTE_READ covers the range
};
const char* prov_strerror(int prov_errno);

struct Domain;
struct Ep;
struct Av;

// Every object's struct fid: its class, the application's context, its ops.
inline void init_fid(fid& f, size_t fclass, void* context, fi_ops* ops) {
  f.fclass = fclass;
  f.context = context;
  f.ops = ops;
}

struct Fabric {
  fid_fabric fid;
};

// A completion waiting in a CQ (error or not).
struct Completion {
  fi_cq_tagged_entry e{};
  fi_addr_t src = FI_ADDR_NOTAVAIL;
  int err = 0;  // positive FI_E*: an error entry
  int prov_errno = 0;
  size_t olen = 0;
  std::string err_text;
};

struct Cq {
  fid_cq fid;
  Domain* dom;
  fi_cq_format format;
  fi_wait_obj wait;
  std::deque<Completion> done, errors;
  std::string last_err;  // err_data of the last fi_cq_readerr (valid until the next read)
  bool signaled = false;
  size_t entry_size() const;
};

// A completion counter (fi_cntr): every operation of the kinds it is bound
// for (FI_SEND, FI_RECV, FI_WRITE, FI_READ) counts once when it ends,
// whether or not it makes a CQ entry. Under the domain's lock.
struct Cntr {
  fid_cntr fid;
  Domain* dom;
  uint64_t value = 0, errors = 0;
  int binds = 0;  // endpoint bindings: a bound counter does not close
};

struct Mr {
  fid_mr fid;
  Domain* dom;
  MemRegion region;  // local access and remote write: a desc as a rendezvous's destination
  MemRegion rma{};   // without FI_REMOTE_WRITE: a local-only registration, whose key fi_mr_key gives
  uint64_t access = 0;
};

struct Av {
  fid_av fid;
  Domain* dom;
  fi_av_type type;
  std::vector<Addr> addrs;
  std::vector<bool> live;
  std::unordered_map<uint64_t, fi_addr_t> by_id;  // addr_id -> fi_addr (FI_SOURCE)
  const Addr* lookup(fi_addr_t a) const {
    return a < addrs.size() && live[a] ? &addrs[a] : nullptr;
  }
};

// A posted receive.
struct Recv {
  uint64_t id = 0;
  void* buf = nullptr;
  size_t len = 0;
  Mr* desc = nullptr;
  fi_addr_t src = FI_ADDR_UNSPEC;
  uint64_t src_id = 0;  // addr_id of src (directed receives only)
  bool directed = false;
  bool tagged = false;
  uint64_t tag = 0, ignore = 0;
  void* context = nullptr;
  bool completion = true;
  bool discard = false;  // FI_DISCARD: the message is dropped, not truncated (its completion says 0 bytes)
};

// A message that arrived (in order), waiting for a receive (unexpected) or
// being matched.
struct Message {
  uint8_t kind = 0, flags = 0;
  Addr src{};  // from the NIC (node, slot, endpoint) and the header (tag)
  uint64_t src_id = 0;
  uint64_t len = 0, tag = 0, data = 0, sid = 0;
  std::vector<uint8_t> payload;  // kEager
};

// A send in progress.
struct Send {
  uint64_t id = 0;
  Addr dst{};
  const uint8_t* buf = nullptr;  // rendezvous and fragments: the application's buffer
  size_t len = 0;
  Mr* desc = nullptr;
  bool tagged = false;
  uint64_t tag = 0, data = 0;
  bool has_data = false;
  void* context = nullptr;
  bool completion = true;
  bool rendezvous = false;
  // In fragments (kEagerFrag) or chunks (`stream`): its header, the bytes
  // posted so far and the pieces the NIC has not completed; it completes
  // when all are done.
  bool stream = false;
  WireHdr frag_hdr{};
  uint64_t frag_next = 0;
  uint32_t frags_out = 0;
  MemRegion reg{};  // the source, registered for the put (none with `desc`)
  uint8_t* bounce = nullptr;  // ... or a copy of it in the slot heap (register_or_bounce)
  uint64_t put_len = 0;
  uint64_t rid = 0;     // the receiver's operation (from its CTS)
  uint32_t rkey = 0;    // ... its buffer's key and address
  uint64_t raddr = 0;
  bool cts = false;     // the CTS came
};

// A receive in the middle of a rendezvous (after its CTS).
struct RndvRecv {
  Recv r;
  Message m;
  uint64_t n = 0;   // bytes asked for (min of the message and the buffer)
  MemRegion reg{};  // the buffer, registered (none with the receive's desc)
  uint8_t* bounce = nullptr;  // ... or the slot-heap buffer the data lands in first
  bool cts_sent = false;
};

// What a NIC descriptor was for (its user_data indexes Domain::posts).
enum PostKind : uint8_t { kPostMsg = 1, kPostPut = 2, kPostWrite = 3, kPostReadPut = 4 };
struct Post {
  Ep* ep = nullptr;
  PostKind kind = kPostMsg;
  uint8_t wire = 0;     // WireKind of a message
  int buf = -1;         // send buffer of a message
  int long_buf = -1;    // ... or Long staging buffer (kEagerLong)
  uint64_t op = 0;      // Send id (kEager, kRts, put), RndvRecv id (kCts), RmaOp id (write, kReadReq),
                        // ServedRead id (read put)
  abi::SqEntry sqe{};   // to post it again after a refusal (kCqAmCongestion)
  Addr dst{};           // a message's destination (peer_gone when the NIC says it is gone)
};

// An fi_write / fi_read of ours.
struct RmaOp {
  uint64_t id = 0;
  bool read = false;
  uint64_t peer_id = 0;      // addr_id of the target
  Addr dst{};                // ... the target
  uint64_t raddr = 0;        // ... and the address there
  bool has_data = false;     // fi_writedata: remote CQ data, sent once the put is done
  uint64_t data = 0;
  uint8_t* buf = nullptr;    // the application's buffer
  size_t len = 0;
  MemRegion reg{};           // ... registered for the NIC (none with a desc)
  uint8_t* bounce = nullptr; // ... or its stand-in in the slot heap
  void* context = nullptr;
  bool completion = true;
};

// A peer's fi_read we serve: the put back, then kReadDone.
struct ServedRead {
  Addr peer{};
  uint64_t sid = 0;             // the reader's operation
  uint64_t src = 0, len = 0;    // our bytes
  uint32_t src_key = 0, dst_key = 0;
  uint64_t dst_addr = 0;
};

// An eager message arriving in fragments (kEagerFrag): its payload fills
// in as they come (the NIC may refuse one for a full ring, which the sender
// resends later, so they come in any order).
struct Partial {
  Message m;          // kind kEager once whole
  uint32_t have = 0;  // bit i: fragment i is in
};

// A message arriving as a stream of chunks (kWireChunk). Once it is next in
// order and a posted receive matches it, the receive is bound and chunks go
// straight into its buffer (later messages may be matched meanwhile);
// until then they are kept in m.payload, and a whole one with no receive
// becomes an unexpected message.
struct Stream {
  Message m;
  Recv r;
  bool bound = false;
  uint32_t have = 0;  // bit i: chunk i is in
};

struct PeerRx {
  uint64_t incarnation = 0;  // the sender endpoint's tag: a new process on its slot starts over
  uint32_t expected = 0;
  std::map<uint32_t, Stream> streams;    // by seq: streamed messages not all in
  int lane = -1;             // the lane of our segment it has (Ep::lanes), if any
  std::map<uint32_t, Message> early;     // arrived ahead of `expected`
  std::map<uint32_t, Partial> partial;   // by seq: messages whose fragments are not all in
};

// A lane of our segment, granted to one sender (receiver side). Its bytes
// are a stream: the sender reserves ranges in order, the NIC places them,
// and we free each when we have copied its message out (in any order: the
// NIC may refuse one for a full ring and take a later one first).
struct LaneRx {
  bool used = false;
  uint64_t gen = 0;
  uint64_t freed = 0;               // the stream's first `freed` bytes are ours again
  uint64_t reported = 0;            // ... as far as the sender knows (kCredit)
  std::map<uint64_t, uint64_t> done;  // ranges [first, second) taken beyond `freed`
};

// Our lane at a receiver (sender side), per (addr_id, tag).
struct LaneTx {
  Addr dst{};
  bool asked = false, granted = false;
  uint64_t off = 0, size = 0, gen = 0;
  uint64_t head = 0;      // the stream's bytes reserved so far
  uint64_t credited = 0;  // ... of which the receiver has freed this many
};

struct Ep {
  fid_ep fid;
  Domain* dom;
  fi_ep_type type;
  uint64_t caps;
  uint64_t tx_op_flags, rx_op_flags;
  uint8_t index;  // AM endpoint in the slot
  uint64_t tag;
  bool enabled = false;
  Cq* tx_cq = nullptr;
  Cq* rx_cq = nullptr;
  bool tx_selective = false, rx_selective = false;
  Cntr *send_cntr = nullptr, *recv_cntr = nullptr, *write_cntr = nullptr, *read_cntr = nullptr;
  Av* av = nullptr;
  uint8_t* ring = nullptr;
  MemRegion ring_mr;
  uint64_t ring_consumed = 0;
  uint8_t* bufs = nullptr;
  MemRegion bufs_mr;
  std::vector<int> free_bufs;
  uint8_t* longs = nullptr;  // kLongBufs staging buffers for kEagerLong (none: no Longs sent)
  MemRegion longs_mr;
  std::vector<int> free_longs;
  uint8_t* segment = nullptr;  // lanes for senders' Longs (none: no lane granted)
  MemRegion seg_mr;
  std::vector<LaneRx> lanes;
  uint64_t lane_gen = 0;
  std::map<std::pair<uint64_t, uint64_t>, LaneTx> lanes_tx;  // by (addr_id, tag) of the receiver
  // Per destination endpoint and incarnation (addr_id, tag): a restarted
  // peer on the same slot and endpoint has a new tag and counts from 0.
  std::map<std::pair<uint64_t, uint64_t>, uint32_t> tx_seq;
  std::unordered_map<uint64_t, PeerRx> rx;        // per source addr_id
  std::list<Recv> posted_msg, posted_tagged;
  std::list<Message> unexpected_msg, unexpected_tagged;
  std::map<uint64_t, Message> claimed;  // set aside by FI_PEEK | FI_CLAIM, by id (in the fi_context)
  size_t unexpected_bytes = 0;
  std::map<uint64_t, Send> sends;                // by id
  std::map<uint64_t, RndvRecv> rndv;             // by id
  std::deque<uint64_t> rndv_waiting;             // RndvRecv ids whose CTS waits (no buffer / registration)
  std::deque<uint64_t> cts_waiting;              // Send ids whose put waits (registration / SQ room)
  std::deque<uint64_t> frags_waiting;            // Send ids with fragments to post (buffers / SQ room)
  std::deque<std::pair<Addr, WireHdr>> ctl_backlog;  // control messages waiting for a buffer
  std::map<uint64_t, RmaOp> rma;                 // our writes and reads, by id
  std::map<uint64_t, ServedRead> serving;        // peers' reads whose put is in flight, by id
  std::deque<ServedRead> reads_waiting;          // ... waiting for SQ room
  int64_t next_probe_ns = 0;                     // when the peers we wait for are probed next (kProbeNs)
  Addr self() const;
};

// A bounce buffer in the slot heap, registered with the NIC and kept for the
// next operation once its own ended well (a registration cache: registering
// and deregistering are a NIC round trip each, four per rendezvous).
struct Bounce {
  uint8_t* buf = nullptr;
  MemRegion reg{};    // the whole buffer: reg.length is its capacity, a power of two
  uint64_t peer = 0;  // remote-writable: the one peer (addr_id) its key went to; 0 if local only
};

struct Domain {
  fid_domain fid;
  Fabric* fabric;
  std::mutex mu;
  std::unique_ptr<Nic> nic;
  // FI_PROGRESS_AUTO, when the hints asked for it: a thread of the domain's
  // own runs progress whenever the NIC has something for the slot (and at
  // least every kAutoSliceMs), so rendezvous steps, served reads and copies
  // into receive buffers go on while the application computes.
  std::thread progress_thread;
  std::atomic<bool> stop_progress{false};
  std::vector<Ep*> eps;
  std::vector<Cq*> cqs;
  std::vector<Cntr*> cntrs;
  std::map<uint64_t, Post> posts;      // NIC descriptors in flight, by user_data
  // Posts refused for congestion (user_data, when to post again: steady
  // clock ns), in the order refused. A receiver that does not poll would
  // otherwise have its NIC refuse our messages as fast as we resend them.
  std::deque<std::pair<uint64_t, int64_t>> retry;
  uint64_t next_user_data = 1;
  uint64_t next_op = 1;
  std::vector<Mr*> mrs;                // live fi_mr_reg registrations (descs are checked against it)
  std::deque<Bounce> idle;             // bounce buffers kept registered, oldest first
  size_t idle_bytes = 0;
  uint64_t bounce_hits = 0, bounce_misses = 0;
  uint64_t sent[5] = {};  // messages sent: eager in one entry, as a Long in a lane, in fragments, by rendezvous,
                          // streamed in chunks
  size_t eager_max = kDefaultEagerSize;  // larger messages go by rendezvous (FI_ULNIC_EAGER_SIZE)
  Ep* ep_at[kMaxEndpoints] = {};
};

// objects.cpp
int fabric_open(fi_fabric_attr* attr, fid_fabric** fabric, void* context);
// Progress: NIC completions, arrivals, retries. Under dom.mu. True if it did anything.
bool progress(Domain& d);
void cq_push(Cq* cq, Completion c);
bool mr_covers(Domain& d, Mr* mr, const void* p, size_t n);
// ep.cpp
int ep_open(fid_domain* domain, fi_info* info, fid_ep** ep, void* context);
bool ep_progress(Ep& ep);
void ep_nic_done(Ep& ep, Post& post, const abi::CqEntry& c);
// Drops the oldest kept bounce buffer (deregistered, freed) to make room in
// the slot heap; false if none is kept.
bool drop_idle_bounce(Domain& d);
// getinfo.cpp
int getinfo(uint32_t version, const char* node, const char* service, uint64_t flags, const fi_info* hints,
            fi_info** info);

}  // namespace ulnic::ofi
