// AM over VIPL (the AMVIA design, Begel, Buonadonna, Culler, Gay 1998): one
// reliable VI per pair of endpoints that talk, small messages as VI sends
// into receives posted ahead, and Long payloads written by RDMA straight
// into the destination's segment, followed by the message that runs the
// handler (a VI keeps the order of its descriptors, so the data is in place
// when the message arrives). Neither waits for the other: a Long's payload
// is copied into a bounce ring (AM_RequestXfer's source may be reused when
// it returns), and up to kWrites of a VI's RDMA writes are in flight, each
// span given back when the NIC completes its write.
//
// Resources are reserved so that nothing ever waits on a peer's goodwill,
// and a reply never fails for want of them: for the deepest peer pair a VI
// can carry (k = kMaxDepth credits) a VI posts 3k+2 receives (k requests
// in, k replies in, k refusals of our replies -- each frees a credit the
// peer may use again before we poll -- the greeting and a spare) and owns
// 2k+2 send descriptors (k requests, k replies, two control messages) plus
// kWrites for its Long payloads' RDMA writes and one for its RDMA reads; a
// send waits for a descriptor of its own VI, which the NIC frees without
// anyone's help. A post the NIC cannot take
// yet (its queue is full) is tried again, not taken for a broken VI.
//
// A medium larger than a receive buffer's room (kInlineMedium) goes the
// AMVIA way for bulk data, but pulled: the sender keeps the payload in a
// staging slot of its own that belongs to the message's credit (request
// instance i, or the reply to instance i: nothing else can use it until
// that credit comes back), and sends the message with the slot's address;
// the receiver RDMA-reads the payload before it hands the message on, so
// the handler sees one whole medium. The staging slots of a peer are
// allocated at its first large medium.
//
// Connections: every endpoint has a listener thread blocked in
// VipConnectWait on the endpoint's own discriminator (libvipl releases its
// lock while it sleeps); a sender connects on its first message to a peer
// (VipConnectRequest, in the sender's thread). Each side greets the other on
// a new VI with its name and segment; every later packet repeats the
// segment (generation, address, length, memory handle), so a sender's view
// of a peer's segment is as fresh as the last packet from it. A Long whose
// bounds that view refuses is sent unplaced; one placed into a segment the
// receiver has since replaced is refused by the receiver (SEMANTICS.md).
//
// An endpoint's name: host = NIC node, id = pid, index = endpoint number.
#include <vipl.h>
#include <vipl_layer.h>

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "am_internal.h"
#include "staging_ring.h"
#include "ulnic/nic.h"

namespace ulnic::am {
namespace {

constexpr int kMaxDepth = 16;              // credits a VI is provisioned for
constexpr int kRecvs = 3 * kMaxDepth + 2;  // requests + replies + refusals in, greeting, spare
constexpr int kSends = 2 * kMaxDepth + 2;  // requests + replies out, two control messages
constexpr int kWrites = 8;                 // a VI's Long payloads in flight (RDMA writes)
// The bounce ring Long payloads are copied into, per endpoint: two of the
// largest in flight at once (a 1 MiB Xfer is copied while the one before
// it is written), or kWrites of 256 KiB per VI.
constexpr size_t kBounceBytes = 2 * AMUDP_MAX_LONG;
constexpr uint32_t kMagicVi = 0x49564D41;  // "AMVI"
// How long a live peer's process may leave us waiting: for its listener to
// take a connection (the peer's NIC answers VIP_NO_MATCH meanwhile), and for
// its greeting after the connection (a peer that dies breaks the VI first,
// which ends that wait). It was 5 s, which a loaded 2-core host exceeds: in
// issue 20's stress (two CPU burners, two test groups at once) processes
// and NICs went unscheduled for 1-20 s, and a ring token between two live
// ranks came back EUNREACHABLE. It is counted on our NIC's running time as
// well as the wall clock (peer_deadline): a host that stopped the whole VM
// for 52 s (issue 20's stress) left every wall-clock wait over at once. A
// connection request is also asked again until the peer's NIC has answered
// kConnectAnswers times, so a requester left unscheduled still gives the
// peer its chances.
constexpr int kPeerWaitMs = 30000;
constexpr uint32_t kConnectAnswers = 1000;

// Every VI message starts with this: who sends, its segment as of now, and
// (a large medium) where the receiver reads the payload from.
struct ViHeader {
  uint32_t magic;
  uint32_t greeting;    // 1: nothing follows
  uint32_t seg_gen;
  uint32_t seg_len;
  uint64_t seg_addr;
  uint32_t seg_handle;
  uint32_t medium_handle;  // the staging slot's memory handle
  uint64_t medium_addr;    // its address; the payload is PacketHeader::nbytes long
  uint64_t reserved;
  en_t sender;
};
static_assert(sizeof(ViHeader) == 64);

constexpr size_t kBuffer = 4352;  // ViHeader + PacketHeader + 16 args + kInlineMedium, 64-aligned
constexpr size_t kInlineMedium = kBuffer - sizeof(ViHeader) - sizeof(PacketHeader) - 4 * kMaxArgs;
constexpr size_t kStageSlot = 64 << 10;  // one large medium's staging (>= AMUDP_MAX_MEDIUM)
static_assert(AMUDP_MAX_MEDIUM <= kStageSlot);
constexpr size_t kSlot = sizeof(VIP_DESCRIPTOR) + 64 + kBuffer;  // descriptor (RDMA: 2 segments) + buffer

struct Nic {
  VIP_NIC_HANDLE handle = nullptr;
  VIP_NIC_ATTRIBUTES attrs{};
  VIP_PROTECTION_HANDLE ptag = nullptr;
  uint16_t node = 0;
  // Fault injection for tests: $ULNIC_AM_VIPL_ACCEPT_DELAY_MS, how long the
  // listener sleeps between accepting a connection and greeting the peer
  // (and handing the VI over): a listener thread descheduled that long.
  useconds_t accept_delay_us = 0;
};
Nic nic;

// kPeerWaitMs from now, on the wall clock and on our NIC's running time
// (or until the node's daemon is gone: ulnic::NicDeadline).
ulnic::NicDeadline peer_deadline() {
  return ulnic::NicDeadline(*ulnic_vipl_core(nic.handle), std::chrono::milliseconds(kPeerWaitMs));
}

// Registered memory from the slot: page-aligned, so registration moves
// nothing but these pages.
struct Region {
  uint8_t* base = nullptr;
  size_t len = 0;
  VIP_MEM_HANDLE handle = 0;
  bool allocate(size_t bytes, bool rdma_write, bool rdma_read = false) {
    len = (bytes + 4095) & ~size_t(4095);
    void* p = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return false;
    base = static_cast<uint8_t*>(p);
    VIP_MEM_ATTRIBUTES a{nic.ptag, rdma_write ? VIP_TRUE : VIP_FALSE, rdma_read ? VIP_TRUE : VIP_FALSE};
    if (VipRegisterMem(nic.handle, base, VIP_ULONG(len), &a, &handle) != VIP_SUCCESS) {
      munmap(base, len);
      base = nullptr;
      return false;
    }
    return true;
  }
  void release() {
    if (!base) return;
    VipDeregisterMem(nic.handle, base, handle);
    munmap(base, len);
    base = nullptr;
  }
};

struct Conn {
  VIP_VI_HANDLE vi = nullptr;
  en_t peer{};
  bool named = false;     // peer known (client side from the start)
  bool broken = false;
  bool greeted = false;   // a packet from the peer has told us its segment
  // The peer's segment as its last packet said.
  uint32_t seg_gen = 0, seg_len = 0, seg_handle = 0;
  uint64_t seg_addr = 0;
  Region mem;             // kRecvs + kSends + 1 + kWrites slots
  std::deque<VIP_DESCRIPTOR*> posted;  // its receives, in the order posted (and completed)
  std::vector<VIP_DESCRIPTOR*> free_sends;
  VIP_DESCRIPTOR* rdma = nullptr;  // its RDMA reads (one at a time, waited for)
  // Its Long payloads' RDMA writes: the slots after `rdma`, each holding
  // its bounce span (by ticket) until the NIC completes it.
  StagingRing* bounce = nullptr;   // the endpoint's
  std::vector<int> free_writes;
  uint64_t write_span[kWrites] = {};
  VIP_DESCRIPTOR* slot(int i) const { return reinterpret_cast<VIP_DESCRIPTOR*>(mem.base + size_t(i) * kSlot); }
  VIP_DESCRIPTOR* write_slot(int w) const { return slot(kRecvs + kSends + 1 + w); }
  // The write `d` is (-1: not one of them).
  int write_of(const VIP_DESCRIPTOR* d) const {
    const ptrdiff_t at = reinterpret_cast<const uint8_t*>(d) - reinterpret_cast<const uint8_t*>(write_slot(0));
    return at >= 0 && at < ptrdiff_t(kWrites * kSlot) ? int(at / ptrdiff_t(kSlot)) : -1;
  }
  uint8_t* buffer(VIP_DESCRIPTOR* d) const { return reinterpret_cast<uint8_t*>(d) + sizeof(VIP_DESCRIPTOR) + 64; }
};

struct SegReg {
  uint32_t gen;
  void* addr;
  VIP_MEM_HANDLE handle;
};

// On pages of its own (as ulnic::Nic): the listener thread writes it while
// the main thread may register memory (AM_SetSeg), which moves whole pages
// into the slot and loses a write made meanwhile to a neighbour on them.
struct alignas(4096) ViplEndpoint {
  VIP_CQ_HANDLE cq = nullptr;
  std::vector<uint8_t> disc;
  std::mutex mu;                        // guards `accepted` and `seg_*` (listener thread)
  std::vector<std::unique_ptr<Conn>> accepted;
  uint32_t seg_gen = 0, seg_len = 0, seg_handle = 0;
  uint64_t seg_addr = 0;
  std::vector<std::unique_ptr<Conn>> conns;   // main thread from here on
  std::map<VIP_VI_HANDLE, Conn*> by_vi;
  std::map<en_t, Conn*> by_name;
  std::vector<SegReg> segs;             // kept registered until the endpoint goes
  Region bounce;                        // RDMA source for Long payloads (kBounceBytes) ...
  StagingRing bounce_ring{kBounceBytes};  // ... taken in spans, one per write in flight
  Region pulled;                        // RDMA read target for large mediums
  std::map<en_t, std::unique_ptr<Region>> stages;  // by peer: 2 x kMaxDepth staging slots
  std::vector<VIP_VI_HANDLE> stash;     // receive completions taken from the CQ, not yet served
  // ... taken by a wait on VIs the listener had not handed over yet: a
  // wait looks at them again (a greeting among them wakes no one).
  std::vector<VIP_VI_HANDLE> unseen;
  std::thread listener;
  std::atomic<bool> stop{false};
};

ViplEndpoint& state(Endpoint& ep) { return *static_cast<ViplEndpoint*>(ep.transport_state); }

std::vector<uint8_t> discriminator(uint32_t pid, uint16_t index) {
  std::vector<uint8_t> d = {'A', 'M', 0, 0, 0, 0, 0, 0};
  std::memcpy(&d[2], &pid, 4);
  std::memcpy(&d[6], &index, 2);
  return d;
}

std::vector<uint8_t> address(uint16_t node, const std::vector<uint8_t>& disc) {
  std::vector<uint8_t> a(sizeof(VIP_NET_ADDRESS) + 2 + disc.size());
  auto* na = reinterpret_cast<VIP_NET_ADDRESS*>(a.data());
  na->HostAddressLen = 2;
  na->DiscriminatorLen = VIP_UINT16(disc.size());
  std::memcpy(na->HostAddress, &node, 2);
  std::memcpy(na->HostAddress + 2, disc.data(), disc.size());
  return a;
}

void fill_header(ViplEndpoint& s, const Endpoint& ep, ViHeader& h, bool greeting) {
  std::lock_guard hold(s.mu);
  h = ViHeader{kMagicVi, greeting ? 1u : 0u, s.seg_gen, s.seg_len, s.seg_addr, s.seg_handle, 0, 0, 0, ep.name};
}

void post_recv(Conn& c, VIP_DESCRIPTOR* d) {
  std::memset(&d->CS, 0, sizeof d->CS);
  d->CS.SegCount = 1;
  d->CS.Length = kBuffer;
  d->DS[0].Local.Data.Address = c.buffer(d);
  d->DS[0].Local.Handle = c.mem.handle;
  d->DS[0].Local.Length = kBuffer;
  c.posted.push_back(d);
  VipPostRecv(c.vi, d, c.mem.handle);
}

// A VI with its buffers and receives posted (not yet connected).
std::unique_ptr<Conn> new_conn(ViplEndpoint& s) {
  auto c = std::make_unique<Conn>();
  VIP_VI_ATTRIBUTES a{};
  a.ReliabilityLevel = VIP_SERVICE_RELIABLE_DELIVERY;
  a.MaxTransferSize = AMUDP_MAX_LONG;
  a.Ptag = nic.ptag;
  a.EnableRdmaWrite = VIP_TRUE;
  a.EnableRdmaRead = VIP_TRUE;
  if (!c->mem.allocate(size_t(kRecvs + kSends + 1 + kWrites) * kSlot, false)) return nullptr;
  if (VipCreateVi(nic.handle, &a, nullptr, s.cq, &c->vi) != VIP_SUCCESS) {
    c->mem.release();
    return nullptr;
  }
  for (int i = 0; i < kRecvs; i++) post_recv(*c, c->slot(i));
  for (int i = kRecvs; i < kRecvs + kSends; i++) c->free_sends.push_back(c->slot(i));
  c->rdma = c->slot(kRecvs + kSends);
  c->bounce = &s.bounce_ring;
  for (int w = kWrites - 1; w >= 0; w--) c->free_writes.push_back(w);
  return c;
}

void destroy_conn(Conn& c) {
  if (c.vi) {
    VipDisconnect(c.vi);
    VIP_DESCRIPTOR* d;
    while (VipRecvDone(c.vi, &d) == VIP_SUCCESS) {}
    while (VipSendDone(c.vi, &d) == VIP_SUCCESS) {}
    VipDestroyVi(c.vi);
  }
  c.mem.release();
}

// A send descriptor that is free again: back to its pool, with a write's
// bounce span (the RDMA read's is its operation's, which waits for it).
void recycle(Conn& c, VIP_DESCRIPTOR* d) {
  if (d == c.rdma) return;
  if (int w = c.write_of(d); w >= 0) {
    c.bounce->give(c.write_span[w]);
    c.free_writes.push_back(w);
  } else {
    c.free_sends.push_back(d);
  }
}

// A send descriptor the NIC has finished with.
void finished(Conn& c, VIP_DESCRIPTOR* d) {
  if (d->CS.Status & VIP_STATUS_ERROR_MASK) c.broken = true;
  recycle(c, d);
}

// Takes back the send descriptors the NIC has finished with.
void reap_sends(Conn& c) {
  VIP_DESCRIPTOR* d;
  while (VipSendDone(c.vi, &d) == VIP_SUCCESS) finished(c, d);
}

// A free send descriptor; waits for one (the NIC completes sends on its own).
VIP_DESCRIPTOR* take_send(Conn& c) {
  for (;;) {
    if (!c.free_sends.empty()) {
      VIP_DESCRIPTOR* d = c.free_sends.back();
      c.free_sends.pop_back();
      return d;
    }
    if (c.broken) return nullptr;
    VIP_DESCRIPTOR* d;
    if (VipSendWait(c.vi, 1000, &d) == VIP_SUCCESS) finished(c, d);
  }
}

// Posts a send descriptor. A NIC whose queue is full for now
// (VIP_ERROR_RESOURCE) gets it again once it has taken others: want of room
// is never a failure. Anything else breaks the VI.
bool post_send(Conn& c, VIP_DESCRIPTOR* d) {
  for (;;) {
    VIP_RETURN rc = VipPostSend(c.vi, d, c.mem.handle);
    if (rc == VIP_SUCCESS) return true;
    if (rc != VIP_ERROR_RESOURCE || c.broken) break;
    reap_sends(c);
    usleep(100);
  }
  recycle(c, d);
  c.broken = true;
  return false;
}

bool post_message(Conn& c, const ViHeader& vh, const void* head, size_t head_len, const void* payload,
                  size_t payload_len) {
  reap_sends(c);
  VIP_DESCRIPTOR* d = take_send(c);
  if (!d) return false;
  uint8_t* b = c.buffer(d);
  std::memcpy(b, &vh, sizeof vh);
  if (head_len) std::memcpy(b + sizeof vh, head, head_len);
  if (payload_len) std::memcpy(b + sizeof vh + head_len, payload, payload_len);
  auto len = VIP_UINT32(sizeof vh + head_len + payload_len);
  std::memset(&d->CS, 0, sizeof d->CS);
  d->CS.Control = VIP_CONTROL_OP_SENDRECV;
  d->CS.SegCount = 1;
  d->CS.Length = len;
  d->DS[0].Local.Data.Address = b;
  d->DS[0].Local.Handle = c.mem.handle;
  d->DS[0].Local.Length = len;
  return post_send(c, d);
}

// An RDMA descriptor: `n` bytes between local memory and the peer's.
void rdma_desc(VIP_DESCRIPTOR* d, VIP_ULONG op, uint64_t remote, VIP_MEM_HANDLE remote_handle, void* local,
               VIP_MEM_HANDLE local_handle, size_t n) {
  std::memset(&d->CS, 0, sizeof d->CS);
  d->CS.Control = op;
  d->CS.SegCount = 2;
  d->CS.Length = VIP_UINT32(n);
  d->DS[0].Remote.Data.AddressBits = remote;
  d->DS[0].Remote.Handle = remote_handle;
  d->DS[0].Remote.Reserved = 0;
  d->DS[1].Local.Data.Address = local;
  d->DS[1].Local.Handle = local_handle;
  d->DS[1].Local.Length = VIP_UINT32(n);
}

// An RDMA read of the peer's memory, waited for: the local bytes may be
// read when it returns true.
bool rdma_read(Conn& c, uint64_t remote, VIP_MEM_HANDLE remote_handle, void* local, VIP_MEM_HANDLE local_handle,
               size_t n) {
  reap_sends(c);
  VIP_DESCRIPTOR* d = c.rdma;
  rdma_desc(d, VIP_CONTROL_OP_RDMAREAD, remote, remote_handle, local, local_handle, n);
  if (!post_send(c, d)) return false;
  // Sends complete in order: wait until this one has, recycling the rest.
  for (;;) {
    VIP_DESCRIPTOR* done;
    if (VipSendWait(c.vi, 1000, &done) != VIP_SUCCESS) {
      if (c.broken) return false;
      continue;
    }
    finished(c, done);
    if (done == d) return !(done->CS.Status & VIP_STATUS_ERROR_MASK);
  }
}

// Waits for one of the endpoint's RDMA writes to complete: this VI's if it
// has any in flight (they complete in order), else another's.
bool await_write(ViplEndpoint& s, Conn& c) {
  Conn* on = &c;
  if (c.free_writes.size() == kWrites)
    for (auto& o : s.conns)
      if (o->free_writes.size() < kWrites) on = o.get();
  if (on->free_writes.size() == kWrites) return false;  // none in flight (cannot be: the ring is full)
  VIP_DESCRIPTOR* d;
  if (VipSendWait(on->vi, 1000, &d) == VIP_SUCCESS) finished(*on, d);
  return true;
}

// Writes a Long payload into the peer's segment from a span of the bounce
// ring, without waiting for it: the message that follows on this VI
// arrives after the bytes are in place. The span and the descriptor are
// free again when the NIC completes the write (finished).
bool rdma_write(ViplEndpoint& s, Conn& c, uint32_t offset, const void* src, size_t n) {
  reap_sends(c);
  while (c.free_writes.empty()) {
    if (c.broken) return false;
    VIP_DESCRIPTOR* d;
    if (VipSendWait(c.vi, 1000, &d) == VIP_SUCCESS) finished(c, d);
  }
  size_t at;
  uint64_t ticket;
  while (!s.bounce_ring.take(n, at, ticket)) {
    for (auto& o : s.conns) reap_sends(*o);
    if (s.bounce_ring.take(n, at, ticket)) break;
    if (c.broken || !await_write(s, c)) return false;
  }
  std::memcpy(s.bounce.base + at, src, n);
  const int w = c.free_writes.back();
  c.free_writes.pop_back();
  c.write_span[w] = ticket;
  VIP_DESCRIPTOR* d = c.write_slot(w);
  rdma_desc(d, VIP_CONTROL_OP_RDMAWRITE, c.seg_addr + offset, c.seg_handle, s.bounce.base + at, s.bounce.handle, n);
  return post_send(c, d);
}

// The staging slot of a large medium: the message's credit's own (request
// instance i, or the reply to the peer's instance i).
uint8_t* stage_slot(ViplEndpoint& s, const en_t& peer, const PacketHeader& h, VIP_MEM_HANDLE& handle) {
  auto& r = s.stages[peer];
  if (!r) {
    r = std::make_unique<Region>();
    if (!r->allocate(2 * kMaxDepth * kStageSlot, false, true)) {
      s.stages.erase(peer);
      return nullptr;
    }
  }
  handle = r->handle;
  size_t slot = (h.kind == Kind::kRequest ? 0 : kMaxDepth) + h.instance;
  return r->base + slot * kStageSlot;
}

void adopt(ViplEndpoint& s, std::unique_ptr<Conn> c) {
  s.by_vi[c->vi] = c.get();
  if (c->named) s.by_name[c->peer] = c.get();
  s.conns.push_back(std::move(c));
}

void adopt_accepted(ViplEndpoint& s) {
  std::vector<std::unique_ptr<Conn>> got;
  {
    std::lock_guard hold(s.mu);
    got.swap(s.accepted);
  }
  for (auto& c : got) adopt(s, std::move(c));
}

// The transport's own VipSendDone / VipRecvDone / VipCQDone calls are no
// program waiting (vipl_layer.h): AM_Poll reports the program's polls
// (vipl_polled). Every entry point below holds one.
struct QuietPolls {
  QuietPolls() { ulnic_vipl_quiet_polls(1); }
  ~QuietPolls() { ulnic_vipl_quiet_polls(0); }
  QuietPolls(const QuietPolls&) = delete;
  QuietPolls& operator=(const QuietPolls&) = delete;
};

// The listener: accepts every connection to this endpoint's discriminator
// and greets the peer with this endpoint's name and segment. It waits
// without a timeout: a ConnectWait that times out must cancel its listen
// on the NIC, and the cancel queues behind the process's own sends while
// the thread holds libvipl's lock (a stall of up to libvipl's 10 s NIC
// timeout). vipl_close wakes it by connecting to it.
void listen_loop(Endpoint* ep) {
  QuietPolls quiet;
  ViplEndpoint& s = state(*ep);
  std::vector<uint8_t> local = address(nic.node, s.disc);
  std::vector<uint8_t> remote(sizeof(VIP_NET_ADDRESS) + 2 + 64);
  for (;;) {
    VIP_CONN_HANDLE conn;
    VIP_VI_ATTRIBUTES ra;
    auto* r = reinterpret_cast<VIP_NET_ADDRESS*>(remote.data());
    r->HostAddressLen = 2;
    r->DiscriminatorLen = 64;
    VIP_RETURN rc = VipConnectWait(nic.handle, reinterpret_cast<VIP_NET_ADDRESS*>(local.data()), VIP_INFINITE, r,
                                   &ra, &conn);
    if (s.stop.load()) {
      if (rc == VIP_SUCCESS) VipConnectReject(conn);
      return;
    }
    if (rc != VIP_SUCCESS) {
      usleep(10000);  // the NIC refused the listen (its table is full): try again soon
      continue;
    }
    std::unique_ptr<Conn> c = new_conn(s);
    if (!c || VipConnectAccept(conn, c->vi) != VIP_SUCCESS) {
      if (c) destroy_conn(*c);
      else VipConnectReject(conn);
      continue;
    }
    if (nic.accept_delay_us) usleep(nic.accept_delay_us);
    ViHeader vh;
    fill_header(s, *ep, vh, true);
    post_message(*c, vh, nullptr, 0, nullptr, 0);
    std::lock_guard hold(s.mu);
    s.accepted.push_back(std::move(c));
  }
}

// VipConnectRequest as VIPL clients call it: a request for which the peer's
// NIC finds no ConnectWait (its listener is between two, or not started yet)
// is VIP_NO_MATCH at once, so ask again shortly (kPeerWaitMs,
// kConnectAnswers). Each request waits for the NICs' answer without a
// deadline of its own: the link says VIP_NOT_REACHABLE if the peer is gone,
// judged by the rounds it left unanswered while this NIC ran, not by the
// clock. A 5 s clock here failed a connection to a live peer when the host
// left NICs and processes unscheduled that long (issue 20's stress, under
// two CPU burners: off the CPU for 1-20 s, while no link gave a peer up).
VIP_RETURN request(VIP_VI_HANDLE vi, std::vector<uint8_t>& local, std::vector<uint8_t>& remote,
                   VIP_VI_ATTRIBUTES* ra) {
  const ulnic::NicDeadline deadline = peer_deadline();
  for (uint32_t answers = 1;; ++answers) {
    VIP_RETURN rc = VipConnectRequest(vi, reinterpret_cast<VIP_NET_ADDRESS*>(local.data()),
                                      reinterpret_cast<VIP_NET_ADDRESS*>(remote.data()), VIP_INFINITE, ra);
    if (rc != VIP_NO_MATCH || (answers >= kConnectAnswers && deadline.passed())) return rc;
    usleep(1000);
  }
}

// Wakes the listener for good: a connection request it rejects.
void stop_listener(Endpoint& ep) {
  ViplEndpoint& s = state(ep);
  s.stop = true;
  VIP_VI_ATTRIBUTES a{};
  a.ReliabilityLevel = VIP_SERVICE_RELIABLE_DELIVERY;
  a.MaxTransferSize = AMUDP_MAX_LONG;
  a.Ptag = nic.ptag;
  VIP_VI_HANDLE vi;
  if (VipCreateVi(nic.handle, &a, nullptr, nullptr, &vi) == VIP_SUCCESS) {
    std::vector<uint8_t> local = address(nic.node, s.disc);
    VIP_VI_ATTRIBUTES ra;
    (void)request(vi, local, local, &ra);
    VipDestroyVi(vi);
  }
  s.listener.join();
}

Conn* connect_to(Endpoint& ep, const en_t& dest) {
  ViplEndpoint& s = state(ep);
  std::unique_ptr<Conn> c = new_conn(s);
  if (!c) return nullptr;
  std::vector<uint8_t> local = address(nic.node, s.disc);
  std::vector<uint8_t> remote = address(uint16_t(dest.host), discriminator(dest.id, dest.index));
  VIP_VI_ATTRIBUTES ra;
  if (request(c->vi, local, remote, &ra) != VIP_SUCCESS) {
    destroy_conn(*c);
    return nullptr;
  }
  c->peer = dest;
  c->named = true;
  ViHeader vh;
  fill_header(s, ep, vh, true);
  post_message(*c, vh, nullptr, 0, nullptr, 0);
  Conn* raw = c.get();
  adopt(s, std::move(c));
  return raw;
}

void forget(ViplEndpoint& s, Conn& c) {
  if (c.named) {
    auto it = s.by_name.find(c.peer);
    if (it != s.by_name.end() && it->second == &c) s.by_name.erase(it);
  }
}

// A large medium's payload, read from the sender's staging slot and
// appended to its message: the core sees one whole medium. False if the VI
// broke (the message is lost with it).
bool pull_medium(ViplEndpoint& s, Conn& c, const ViHeader& vh, std::vector<uint8_t>& msg) {
  PacketHeader h;
  if (msg.size() < sizeof h) return false;
  std::memcpy(&h, msg.data(), sizeof h);
  if (h.category != Category::kMedium || h.nbytes > AMUDP_MAX_MEDIUM) return false;  // not ours
  if (!rdma_read(c, vh.medium_addr, vh.medium_handle, s.pulled.base, s.pulled.handle, h.nbytes))
    return false;
  msg.insert(msg.end(), s.pulled.base, s.pulled.base + h.nbytes);
  return true;
}

// One receive completion on `vi`: greeting, AM packet, or a broken VI.
// False if it could not be served yet (stashed for a later poll).
bool receive(Endpoint& ep, VIP_VI_HANDLE vi) {
  ViplEndpoint& s = state(ep);
  auto it = s.by_vi.find(vi);
  if (it == s.by_vi.end()) {
    adopt_accepted(s);
    it = s.by_vi.find(vi);
    if (it == s.by_vi.end()) {
      // A VI the listener has accepted but not handed over yet (the peer
      // was quick): look again at the next poll.
      s.stash.push_back(vi);
      return false;
    }
  }
  Conn& c = *it->second;
  VIP_DESCRIPTOR* d;
  if (VipRecvDone(vi, &d) != VIP_SUCCESS) return true;
  if (auto at = std::find(c.posted.begin(), c.posted.end(), d); at != c.posted.end()) c.posted.erase(at);
  if (d->CS.Status & VIP_STATUS_ERROR_MASK) {  // flushed: the connection is gone
    if (!c.broken) {
      c.broken = true;
      forget(s, c);
      if (c.named) peer_unreachable(ep, c.peer);
    }
    return true;
  }
  const uint8_t* b = c.buffer(d);
  uint32_t len = d->CS.Length;
  ViHeader vh;
  if (len >= sizeof vh && (std::memcpy(&vh, b, sizeof vh), vh.magic == kMagicVi)) {
    if (!c.named) {  // the peer's first packet names it
      c.peer = vh.sender;
      c.named = true;
      if (!s.by_name.count(c.peer)) s.by_name[c.peer] = &c;
    }
    c.greeted = true;
    c.seg_gen = vh.seg_gen;
    c.seg_len = vh.seg_len;
    c.seg_addr = vh.seg_addr;
    c.seg_handle = vh.seg_handle;
    if (!vh.greeting) {
      // Copy out before reposting: the handler may run long, and the
      // buffer must be back on the queue for the credits to hold.
      std::vector<uint8_t> msg(b + sizeof vh, b + len);
      post_recv(c, d);
      if (vh.medium_addr && !pull_medium(s, c, vh, msg)) return true;
      deliver(ep, c.peer, msg.data(), msg.size());
      return true;
    }
  }
  post_recv(c, d);
  return true;
}

// ---- the ops

int vipl_start() {
  const char* n = std::getenv("ULNIC_NODE");
  std::string device = std::string("nic") + (n && *n ? n : "0");
  if (VipOpenNic(reinterpret_cast<const VIP_CHAR*>(device.c_str()), &nic.handle) != VIP_SUCCESS) {
    std::fprintf(stderr, "AM vipl: cannot open %s (is a cluster up? ULNIC_CLUSTER/ULNIC_NODE)\n", device.c_str());
    return AM_ERR_RESOURCE;
  }
  VipQueryNic(nic.handle, &nic.attrs);
  // Connection loss shows as flushed receives (receive() reports it to the
  // core); the asynchronous report would only repeat it on stderr.
  VipErrorCallback(nic.handle, nullptr, [](VIP_PVOID, VIP_ERROR_DESCRIPTOR*) {});
  std::memcpy(&nic.node, nic.attrs.LocalNicAddress, 2);
  if (const char* d = std::getenv("ULNIC_AM_VIPL_ACCEPT_DELAY_MS"); d && *d)
    nic.accept_delay_us = useconds_t(std::clamp(std::strtol(d, nullptr, 10), 0l, 10000l) * 1000);
  if (VipCreatePtag(nic.handle, &nic.ptag) != VIP_SUCCESS) {
    VipCloseNic(nic.handle);
    return AM_ERR_RESOURCE;
  }
  return AM_OK;
}

void vipl_stop() {
  VipDestroyPtag(nic.handle, nic.ptag);
  VipCloseNic(nic.handle);
  nic = {};
}

int vipl_open(Endpoint& ep, en_t& name) {
  QuietPolls quiet;
  auto s = std::make_unique<ViplEndpoint>();
  if (VipCreateCQ(nic.handle, 4096, &s->cq) != VIP_SUCCESS) return AM_ERR_RESOURCE;
  if (!s->bounce.allocate(kBounceBytes, false) || !s->pulled.allocate(kStageSlot, false)) {
    s->bounce.release();
    VipDestroyCQ(s->cq);
    return AM_ERR_RESOURCE;
  }
  name = en_t{};
  name.host = nic.node;
  name.id = uint32_t(getpid());
  name.index = uint16_t(ep.index);
  name.transport = AMX_TRANSPORT_VIPL;
  ep.name = name;
  s->disc = discriminator(name.id, name.index);
  s->seg_gen = ep.seg_gen;
  ep.transport_state = s.release();
  state(ep).listener = std::thread(listen_loop, &ep);
  return AM_OK;
}

void vipl_close(Endpoint& ep) {
  QuietPolls quiet;
  ViplEndpoint* s = &state(ep);
  stop_listener(ep);
  adopt_accepted(*s);
  for (auto& c : s->conns) destroy_conn(*c);
  for (SegReg& r : s->segs) VipDeregisterMem(nic.handle, r.addr, r.handle);
  s->bounce.release();
  s->pulled.release();
  for (auto& [peer, r] : s->stages) r->release();
  VipDestroyCQ(s->cq);
  delete s;
  ep.transport_state = nullptr;
}

// Until the peer's first packet has said where its segment is (a Long is
// placed there), taking what arrives meanwhile. Its listener posts the
// greeting right after accepting the connection, but may be descheduled
// for a while: the wait is bounded by time, not by polls (it was 5000
// polls, which a poll that kept finding our own listener's VI not yet
// handed over ran through in milliseconds: the Long went unplaced and came
// back EBADSEGOFF). False if the VI broke or no greeting came in time.
bool await_greeting(Endpoint& ep, Conn& c) {
  const ulnic::NicDeadline deadline = peer_deadline();
  while (!c.greeted && !c.broken) {
    if (deadline.passed()) return false;
    if (lib().transport->poll(ep, kPollBudget) == 0) usleep(100);
  }
  return !c.broken;
}

int vipl_send(Endpoint& ep, const en_t& dest, void* head, size_t head_len, const void* payload,
              size_t payload_len) {
  QuietPolls quiet;
  ViplEndpoint& s = state(ep);
  adopt_accepted(s);
  auto it = s.by_name.find(dest);
  Conn* c = it != s.by_name.end() ? it->second : connect_to(ep, dest);
  if (!c || c->broken) return EUNREACHABLE;
  auto* h = static_cast<PacketHeader*>(head);
  if (h->category == Category::kLong && payload_len) {
    if (!await_greeting(ep, *c)) return EUNREACHABLE;
    if (c->seg_gen && c->seg_addr && uint64_t(h->offset) + payload_len <= c->seg_len) {
      if (!rdma_write(s, *c, h->offset, payload, payload_len)) return EUNREACHABLE;
      h->placed = c->seg_gen;
    } else {
      h->placed = kNotPlaced;
    }
    payload_len = 0;
  }
  ViHeader vh;
  fill_header(s, ep, vh, false);
  if (h->category == Category::kMedium && payload_len > kInlineMedium) {
    VIP_MEM_HANDLE handle = 0;
    uint8_t* slot = stage_slot(s, dest, *h, handle);
    if (!slot) return EUNREACHABLE;
    std::memcpy(slot, payload, payload_len);
    vh.medium_addr = reinterpret_cast<uint64_t>(slot);
    vh.medium_handle = handle;
    payload_len = 0;
  }
  return post_message(*c, vh, head, head_len, payload, payload_len) ? 0 : EUNREACHABLE;
}

int vipl_poll(Endpoint& ep, int budget) {
  QuietPolls quiet;
  ViplEndpoint& s = state(ep);
  adopt_accepted(s);
  s.stash.insert(s.stash.end(), s.unseen.begin(), s.unseen.end());
  s.unseen.clear();
  int n = 0;
  for (size_t waiting = s.stash.size(); n < budget && waiting; waiting--) {
    VIP_VI_HANDLE vi = s.stash.front();
    s.stash.erase(s.stash.begin());
    if (receive(ep, vi)) n++;
  }
  VIP_VI_HANDLE vi;
  VIP_BOOLEAN is_recv;
  while (n < budget && VipCQDone(s.cq, &vi, &is_recv) == VIP_SUCCESS)
    if (receive(ep, vi)) n++;
  return n;
}

// What a receive completion on `vi` a wait took is: the next receive of
// its VI (they complete in the order posted) holds a greeting (the peer's
// name and segment, no AM message), or anything else; or its VI is not
// ours yet (the listener has not handed it over).
enum class Arrival { kGreeting, kOther, kUnseen };
Arrival arrival(ViplEndpoint& s, VIP_VI_HANDLE vi) {
  adopt_accepted(s);
  auto it = s.by_vi.find(vi);
  if (it == s.by_vi.end()) return Arrival::kUnseen;
  const Conn& c = *it->second;
  if (c.posted.empty()) return Arrival::kOther;
  VIP_DESCRIPTOR* d = c.posted.front();
  const uint32_t status = __atomic_load_n(&d->CS.Status, __ATOMIC_ACQUIRE);
  if (!(status & VIP_STATUS_DONE) || (status & VIP_STATUS_ERROR_MASK) || d->CS.Length < sizeof(ViHeader))
    return Arrival::kOther;
  ViHeader vh;
  std::memcpy(&vh, c.buffer(d), sizeof vh);
  return vh.magic == kMagicVi && vh.greeting ? Arrival::kGreeting : Arrival::kOther;
}

// A completion a wait took: true if it is an AM message (or may be one),
// stashed for the next poll. A greeting is taken here, as a poll would
// take it (it runs no handler): AM_WaitSema fires for messages.
bool wakes(Endpoint& ep, VIP_VI_HANDLE vi) {
  ViplEndpoint& s = state(ep);
  switch (arrival(s, vi)) {
    case Arrival::kUnseen:
      s.unseen.push_back(vi);
      return false;
    case Arrival::kGreeting:
      (void)receive(ep, vi);
      return false;
    case Arrival::kOther:
      break;
  }
  s.stash.push_back(vi);
  return true;
}

bool vipl_wait(Bundle& eb, int timeout_ms) {
  QuietPolls quiet;
  if (eb.endpoints.empty()) {
    if (timeout_ms > 0) usleep(useconds_t(timeout_ms) * 1000);
    return false;
  }
  for (Endpoint* ep : eb.endpoints)
    if (!state(*ep).stash.empty()) return true;
  // One endpoint: block on its CQ. Several, or completions on VIs not
  // handed over yet: look at each in turn, briefly.
  auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms < 0 ? 1ll << 40 : timeout_ms);
  do {
    for (Endpoint* ep : eb.endpoints) {
      ViplEndpoint& s = state(*ep);
      std::vector<VIP_VI_HANDLE> unseen;
      unseen.swap(s.unseen);
      bool woke = false;
      for (VIP_VI_HANDLE vi : unseen) woke |= wakes(*ep, vi);
      if (woke) return true;
      const bool brief = eb.endpoints.size() > 1 || !s.unseen.empty();
      const VIP_ULONG slice = brief ? 1 : timeout_ms < 0 ? VIP_INFINITE : VIP_ULONG(timeout_ms);
      VIP_VI_HANDLE vi;
      VIP_BOOLEAN is_recv;
      if (VipCQWait(s.cq, slice, &vi, &is_recv) == VIP_SUCCESS && wakes(*ep, vi)) return true;
    }
  } while (Clock::now() < deadline);
  return false;
}

// A new segment: registered for RDMA writes under the endpoint's ptag, and
// announced in every packet from now on. Old registrations stay (a write
// aimed at one may still be in flight); they go with the endpoint. (A new
// tag needs nothing: the library checks tags.)
int vipl_endpoint_changed(Endpoint& ep) {
  QuietPolls quiet;
  ViplEndpoint& s = state(ep);
  if (ep.seg_gen == s.seg_gen) return AM_OK;
  VIP_MEM_HANDLE handle = 0;
  if (ep.seg && ep.seg_len) {
    VIP_MEM_ATTRIBUTES a{nic.ptag, VIP_TRUE, VIP_FALSE};
    if (VipRegisterMem(nic.handle, ep.seg, VIP_ULONG(ep.seg_len), &a, &handle) != VIP_SUCCESS)
      return AM_ERR_RESOURCE;
    s.segs.push_back(SegReg{ep.seg_gen, ep.seg, handle});
  }
  std::lock_guard hold(s.mu);
  s.seg_gen = ep.seg_gen;
  s.seg_len = uint32_t(ep.seg_len);
  s.seg_addr = reinterpret_cast<uint64_t>(ep.seg);
  s.seg_handle = handle;
  return AM_OK;
}

// AM_Poll found something or not: the program's poll, counted as its own
// VipCQDone's would be.
void vipl_polled(bool found) {
  if (nic.handle) ulnic_vipl_polled(nic.handle, found);
}

// A medium of any size is one packet to the core (the large ones are pulled
// by RDMA read, above).
const Transport kVipl = {
    "vipl", AMX_TRANSPORT_VIPL, /*reliable=*/true,
    uint32_t(sizeof(PacketHeader) + 4 * kMaxArgs + AMUDP_MAX_MEDIUM), /*window=*/1, kMaxDepth, /*places_long=*/true,
    /*probes=*/false,  // a broken connection returns them (vipl_poll)
    vipl_start, vipl_stop, vipl_open, vipl_close, vipl_send, vipl_poll, vipl_wait, vipl_endpoint_changed,
    vipl_polled,
};

}  // namespace

const Transport* vipl_transport() { return &kVipl; }

}  // namespace ulnic::am
