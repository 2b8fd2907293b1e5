// vipl_alltoall: one process per node of an N-node cluster; every pair of
// nodes connects one VI pair through VIPL 1.0 (libvipl), both send each other
// messages and RDMA writes, each receiver checks every byte, and all
// disconnect cleanly. Exit 0 only if everything arrived and verified.
//
//   vipl_alltoall --node I --nodes N [--messages K] [--rdma W] [--window S]
//                 [--reliability unreliable|delivery|reception] [--timeout SEC]
//
// Per pair (a < b): node a is the server (VipConnectWait / VipConnectAccept),
// node b the client (VipNSGetHostByName("node<a>"), VipConnectRequest); the
// discriminator names the pair, "a2a.<a>.<b>". Each node first connects as a
// client to every lower node (ascending), then serves every higher one
// (ascending): no cycle of waits. Every VI has all its receives posted before
// it connects (K + 6 of them, one CQ for every work queue of the NIC).
//
// What each node sends each peer, in this order on the VI (at most S in flight):
//   INFO   where its RDMA target for that peer is (address, memory handle);
//   K data messages of varied sizes (1 B .. 20000 B: one and several MTUs,
//          4095/4096/4097), gathered from 1 .. 5 data segments (every 16th
//          from 16, the most a descriptor takes) at scattered places; every
//          other one carries immediate data (type, sender, sequence number);
//          the receives scatter them into 1 .. 3 segments;
//   W RDMA writes (1 B .. 64 KiB + 3) into disjoint places of the peer's
//          target (64-byte gaps that must stay zero), gathered from 1 .. 3
//          segments; the last with immediate data, which completes a receive
//          at the peer as VIP_STATUS_OP_REMOTE_RDMA_WRITE: every write is then
//          in place and checked;
//   FIN    once every message and write completed: the counts;
//   ACK    (server only) once the client's FIN arrived.
// Every byte is pattern(sender, receiver, sequence number, offset). The ACK is
// the pair's last message, so its sender disconnects: the server, once the
// client's FIN came and its own FIN and ACK completed. The client, once the
// server's FIN and ACK came and its own FIN completed, waits for that (its
// spare receives come back flushed, the VI goes to Error, VIP_ERROR_CONN_LOST)
// and then calls VipDisconnect. (The other way round, the server's ACK could
// complete flushed: its receiver may disconnect before the sending NIC hears
// that it arrived.) Both destroy the VI.
// The last line says "vipl_alltoall node I: OK ..." or "... FAILED ...".
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "vipl.h"

namespace {

using Clock = std::chrono::steady_clock;

// ---------------------------------------------------------------- limits

constexpr uint32_t kMaxMsg = 20000;           // largest data message
constexpr uint32_t kRecvSlot = 24576;         // one receive buffer (segments with gaps)
constexpr uint32_t kSendSlot = 80u << 10;     // one in-flight message's scattered pieces
constexpr uint32_t kRdmaArea = 256u << 10;    // RDMA target per peer
constexpr uint32_t kDescStride = 320;         // control + 16 segments (288), 64-aligned
constexpr uint32_t kSpareRecvs = 6;           // receives beyond those a peer sends
constexpr uint32_t kGap = 64;                 // zero bytes between RDMA targets
constexpr uint32_t kMagic = 0x41324121;
constexpr uint32_t kRdmaSeq = 0x80000;        // sequence numbers of RDMA writes

const uint32_t kSizes[] = {1,    4,    63,    64,    65,    100,   512,   1000, 1500, 4095,
                           4096, 4097, 5000,  8192,  9001,  12288, 16384, kMaxMsg, 3, 2048};
const uint32_t kRdmaSizes[] = {1, 100, 4096, 4097, 9000, 30000, 65539, 777, 8192, 12345, 2, 40000};

enum Type : uint32_t { kInfo = 1, kData = 2, kRdmaImm = 3, kFin = 4, kAck = 5 };

uint32_t imm_of(Type t, uint32_t src, uint32_t seq) { return (uint32_t(t) << 28) | ((src & 0xff) << 20) | (seq & 0xfffff); }

uint8_t pattern(uint32_t src, uint32_t dst, uint32_t seq, uint64_t i) {
  uint64_t x = i * 0x9E3779B97F4A7C15ull ^ (uint64_t(seq) << 40) ^ (uint64_t(src) << 56) ^ (uint64_t(dst) << 48);
  x ^= x >> 29;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 32;
  return uint8_t(x);
}

uint32_t msg_size(uint32_t src, uint32_t dst, uint32_t seq) {
  return kSizes[(seq + src * 3 + dst * 7) % (sizeof kSizes / sizeof *kSizes)];
}
uint32_t msg_segments(uint32_t seq, uint32_t size) {
  uint32_t n = seq % 16 == 5 ? 16 : 1 + seq % 5;
  return std::min(n, size);
}
uint32_t rdma_size(uint32_t src, uint32_t dst, uint32_t w) {
  return kRdmaSizes[(w + src + dst * 5) % (sizeof kRdmaSizes / sizeof *kRdmaSizes)];
}
// Offset of RDMA write w in the receiver's target for this sender.
uint64_t rdma_offset(uint32_t src, uint32_t dst, uint32_t w) {
  uint64_t off = 8;
  for (uint32_t k = 0; k < w; ++k) off += rdma_size(src, dst, k) + kGap + (k % 7);
  return off;
}

// Splits `size` into n uneven pieces (each >= 1 byte).
std::vector<uint32_t> pieces(uint32_t size, uint32_t n) {
  std::vector<uint32_t> len(n, size / n);
  len.back() += size % n;
  for (uint32_t p = 0; p + 1 < n; p += 2) {
    uint32_t delta = len[p + 1] / 3;
    len[p] += delta;
    len[p + 1] -= delta;
  }
  return len;
}

struct Info {
  uint32_t magic, src, dst, rdma_len;
  uint64_t rdma_addr;
  uint32_t rdma_mh, pad;
};
struct Fin {
  uint32_t magic, src, dst, data_msgs;
  uint32_t rdma_writes, pad;
  uint64_t data_bytes, rdma_bytes;
};

const char* rc_name(VIP_RETURN r) {
  static const char* const names[] = {"VIP_SUCCESS",         "VIP_NOT_DONE",          "VIP_INVALID_PARAMETER",
                                      "VIP_ERROR_RESOURCE",  "VIP_TIMEOUT",           "VIP_REJECT",
                                      "VIP_INVALID_RELIABILITY_LEVEL", "VIP_INVALID_MTU", "VIP_INVALID_QOS",
                                      "VIP_INVALID_PTAG",    "VIP_INVALID_RDMAREAD",  "VIP_DESCRIPTOR_ERROR",
                                      "VIP_INVALID_STATE",   "VIP_ERROR_NAMESERVICE", "VIP_NO_MATCH",
                                      "VIP_NOT_REACHABLE",   "VIP_ERROR_NOT_SUPPORTED"};
  return unsigned(r) < sizeof names / sizeof *names ? names[r] : "VIP_(unknown)";
}

// ---------------------------------------------------------------- state

uint32_t g_node = 0, g_nodes = 0, g_k = 64, g_w = 8, g_window = 8;
double g_timeout = 240;
VIP_RELIABILITY_LEVEL g_level = VIP_SERVICE_RELIABLE_DELIVERY;
uint64_t g_failures = 0;
std::map<int, uint64_t> g_async;  // VIP_ERROR_CODE -> count
Clock::time_point g_start;

void say(const char* f, ...) {
  char buf[1024];
  va_list ap;
  va_start(ap, f);
  std::vsnprintf(buf, sizeof buf, f, ap);
  va_end(ap);
  std::printf("vipl_alltoall node %u: %s\n", g_node, buf);
  std::fflush(stdout);
}

void fail(const char* f, ...) {
  char buf[1024];
  va_list ap;
  va_start(ap, f);
  std::vsnprintf(buf, sizeof buf, f, ap);
  va_end(ap);
  ++g_failures;
  std::fprintf(stderr, "vipl_alltoall node %u: FAIL: %s\n", g_node, buf);
  std::printf("vipl_alltoall node %u: FAIL: %s\n", g_node, buf);
  std::fflush(stdout);
}

[[noreturn]] void die(const char* f, ...) {
  char buf[1024];
  va_list ap;
  va_start(ap, f);
  std::vsnprintf(buf, sizeof buf, f, ap);
  va_end(ap);
  std::fprintf(stderr, "vipl_alltoall node %u: FATAL: %s\n", g_node, buf);
  std::printf("vipl_alltoall node %u: FAILED: %s\n", g_node, buf);
  std::fflush(stdout);
  std::exit(1);
}

void check(VIP_RETURN r, const char* what) {
  if (r != VIP_SUCCESS) die("%s: %s", what, rc_name(r));
}

std::string status_text(uint32_t st) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "0x%x", st);
  return buf;
}

bool done_ok(const VIP_DESCRIPTOR* d) {
  return (d->CS.Status & VIP_STATUS_DONE) && !(d->CS.Status & VIP_STATUS_ERROR_MASK);
}
bool flushed(const VIP_DESCRIPTOR* d) { return d->CS.Status & VIP_STATUS_DESC_FLUSHED_ERROR; }

uint64_t addr_of(const void* p) { return uint64_t(reinterpret_cast<uintptr_t>(p)); }
uint8_t* ptr_of(uint64_t a) { return reinterpret_cast<uint8_t*>(uintptr_t(a)); }

VIP_DESCRIPTOR_SEGMENT* segs(VIP_DESCRIPTOR* d) { return d->DS; }

// Registered memory: a fresh anonymous mapping, registered whole.
struct Region {
  uint8_t* p = nullptr;
  size_t len = 0;
  VIP_MEM_HANDLE mh = 0;
};

VIP_NIC_HANDLE g_nic = nullptr;
VIP_PROTECTION_HANDLE g_ptag = nullptr;
VIP_CQ_HANDLE g_cq = nullptr;
VIP_NIC_ATTRIBUTES g_attrs{};
Region g_desc_mem, g_send_mem, g_recv_mem;
std::vector<VIP_DESCRIPTOR*> g_free;

Region make_region(size_t len, bool rdma_write, const char* what) {
  Region r;
  r.len = (len + 4095) & ~size_t(4095);
  void* m = ::mmap(nullptr, r.len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) die("mmap %s: %s", what, std::strerror(errno));
  r.p = static_cast<uint8_t*>(m);
  std::memset(r.p, 0, r.len);
  VIP_MEM_ATTRIBUTES a{};
  a.Ptag = g_ptag;
  a.EnableRdmaWrite = rdma_write ? VIP_TRUE : VIP_FALSE;
  a.EnableRdmaRead = VIP_FALSE;
  VIP_RETURN rc = VipRegisterMem(g_nic, r.p, r.len, &a, &r.mh);
  if (rc != VIP_SUCCESS) die("VipRegisterMem(%s, %zu bytes): %s", what, r.len, rc_name(rc));
  return r;
}

VIP_DESCRIPTOR* take_desc() {
  if (g_free.empty()) die("out of descriptor slots");
  VIP_DESCRIPTOR* d = g_free.back();
  g_free.pop_back();
  std::memset(d, 0, kDescStride);
  return d;
}
void give_desc(VIP_DESCRIPTOR* d) { g_free.push_back(d); }

// ---------------------------------------------------------------- peers

struct Sent {
  Type type;
  uint32_t seq;
};

struct Peer {
  uint32_t id = 0;
  bool server = false;  // we are the server of this pair
  VIP_VI_HANDLE vi = nullptr;
  Region rdma;          // our RDMA target for this peer's writes
  uint8_t* send_slots = nullptr;  // g_window slots of kSendSlot
  // send side
  uint32_t next_data = 0, next_rdma = 0, posted = 0;
  bool info_posted = false, fin_posted = false, ack_posted = false;
  bool fin_done = false, ack_done = false;
  std::deque<Sent> in_flight;
  uint64_t data_bytes_sent = 0, rdma_bytes_sent = 0;
  // from the peer
  bool got_info = false, got_rdma_imm = false, got_fin = false, got_ack = false;
  uint64_t peer_rdma = 0;
  uint32_t peer_rdma_len = 0;
  VIP_MEM_HANDLE peer_mh = 0;
  uint32_t data_rx = 0;
  uint64_t data_bytes_rx = 0, rdma_bytes_checked = 0;
  uint32_t receives_taken = 0;
  // teardown
  bool tearing = false, destroyed = false, remote_gone = false;
  uint32_t flushed_recvs = 0;
};

std::vector<Peer> g_peers;

Peer* peer_of(VIP_VI_HANDLE vi) {
  for (Peer& p : g_peers)
    if (p.vi == vi) return &p;
  return nullptr;
}

// ---------------------------------------------------------------- receives

// Receive buffer variants: 1, 2 or 3 segments with 128-byte gaps; kMaxMsg in all.
void post_recv(Peer& p, uint32_t index) {
  VIP_DESCRIPTOR* d = take_desc();
  uint8_t* buf = g_recv_mem.p + (uint64_t(p.id) * (g_k + kSpareRecvs) + index) * kRecvSlot;
  std::vector<uint32_t> cuts;
  switch (index % 3) {
    case 0: cuts = {kMaxMsg}; break;
    case 1: cuts = {5000, kMaxMsg - 5000}; break;
    default: cuts = {1000, 8000, kMaxMsg - 9000}; break;
  }
  d->CS.Control = VIP_CONTROL_OP_SENDRECV;
  d->CS.SegCount = VIP_UINT16(cuts.size());
  d->CS.Length = kMaxMsg;
  uint64_t at = 0;
  for (size_t k = 0; k < cuts.size(); ++k) {
    segs(d)[k].Local.Data.AddressBits = addr_of(buf + at);
    segs(d)[k].Local.Handle = g_recv_mem.mh;
    segs(d)[k].Local.Length = cuts[k];
    at += cuts[k] + 128;
  }
  VIP_RETURN rc = VipPostRecv(p.vi, d, g_desc_mem.mh);
  if (rc != VIP_SUCCESS) die("VipPostRecv (node %u): %s", p.id, rc_name(rc));
}

// The first `len` bytes of a scattered receive, checked against the pattern;
// returns the number of bad bytes.
uint64_t check_scattered(VIP_DESCRIPTOR* d, uint32_t len, uint32_t src, uint32_t seq, uint64_t& first_bad) {
  uint64_t bad = 0, off = 0;
  first_bad = ~0ull;
  for (uint32_t k = 0; k < d->CS.SegCount && off < len; ++k) {
    const uint8_t* b = ptr_of(segs(d)[k].Local.Data.AddressBits);
    uint32_t n = std::min<uint64_t>(segs(d)[k].Local.Length, len - off);
    for (uint32_t i = 0; i < n; ++i)
      if (b[i] != pattern(src, g_node, seq, off + i) && !bad++) first_bad = off + i;
    off += n;
  }
  if (off < len) bad += len - off;  // more bytes than the buffers hold (cannot happen: Length says so)
  return bad;
}

// Reads a small message (INFO, FIN) out of a scattered receive.
template <class T>
bool read_small(VIP_DESCRIPTOR* d, T& out) {
  if (d->CS.Length != sizeof(T)) return false;
  uint8_t tmp[sizeof(T)];
  uint64_t off = 0;
  for (uint32_t k = 0; k < d->CS.SegCount && off < sizeof(T); ++k) {
    uint32_t n = std::min<uint64_t>(segs(d)[k].Local.Length, sizeof(T) - off);
    std::memcpy(tmp + off, ptr_of(segs(d)[k].Local.Data.AddressBits), n);
    off += n;
  }
  std::memcpy(&out, tmp, sizeof(T));
  return true;
}

// Every RDMA write of peer p in our target, and the gaps still zero.
uint64_t check_rdma_area(const Peer& p, uint64_t& bytes) {
  uint64_t bad = 0, first = ~0ull;
  bytes = 0;
  const uint8_t* t = p.rdma.p;
  uint64_t end_prev = 0;
  for (uint32_t w = 0; w < g_w; ++w) {
    const uint64_t off = rdma_offset(p.id, g_node, w), n = rdma_size(p.id, g_node, w);
    for (uint64_t i = end_prev; i < off; ++i)
      if (t[i] != 0 && !bad++) first = i;
    for (uint64_t i = 0; i < n; ++i)
      if (t[off + i] != pattern(p.id, g_node, kRdmaSeq + w, i) && !bad++) first = off + i;
    end_prev = off + n;
    bytes += n;
  }
  for (uint64_t i = end_prev; i < p.rdma.len; ++i)
    if (t[i] != 0 && !bad++) first = i;
  if (bad) fail("RDMA target of node %u: %" PRIu64 " bad bytes, first at offset %" PRIu64, p.id, bad, first);
  return bad;
}

void on_receive(Peer& p, VIP_DESCRIPTOR* d) {
  ++p.receives_taken;
  const uint32_t st = d->CS.Status;
  if (flushed(d)) {
    ++p.flushed_recvs;
    if (p.server || !p.got_fin || !p.got_ack)
      fail("a receive from node %u came back flushed before the exchange finished (status %s): connection lost",
           p.id, status_text(st).c_str());
    p.remote_gone = true;
    give_desc(d);
    return;
  }
  if (!done_ok(d)) {
    fail("a receive from node %u completed with status %s", p.id, status_text(st).c_str());
    give_desc(d);
    return;
  }
  const uint32_t op = st & VIP_STATUS_OP_MASK;
  const bool has_imm = st & VIP_STATUS_IMMEDIATE;
  const uint32_t imm = d->CS.ImmediateData;
  Type type = kData;
  uint32_t seq = p.data_rx;
  if (has_imm) {
    type = Type(imm >> 28);
    seq = imm & 0xfffff;
    if (((imm >> 20) & 0xff) != (p.id & 0xff))
      fail("immediate data 0x%x from node %u names node %u", imm, p.id, (imm >> 20) & 0xff);
  }
  if (op == VIP_STATUS_OP_REMOTE_RDMA_WRITE) {
    if (!has_imm || type != kRdmaImm || seq != kRdmaSeq + g_w - 1) {
      fail("an RDMA-write completion from node %u without the expected immediate data (status %s, imm 0x%x)", p.id,
           status_text(st).c_str(), imm);
    } else {
      // Every write of this peer came before this one on the VI: all in place.
      uint64_t bytes = 0;
      check_rdma_area(p, bytes);
      p.rdma_bytes_checked = bytes;
      p.got_rdma_imm = true;
    }
    give_desc(d);
    return;
  }
  if (op != VIP_STATUS_OP_RECEIVE) {
    fail("a receive from node %u completed with op bits 0x%x (status %s)", p.id, op, status_text(st).c_str());
    give_desc(d);
    return;
  }
  switch (type) {
    case kInfo: {
      Info in{};
      if (p.got_info || !read_small(d, in) || in.magic != kMagic || in.src != p.id || in.dst != g_node) {
        fail("bad INFO from node %u (length %u)", p.id, d->CS.Length);
        break;
      }
      p.peer_rdma = in.rdma_addr;
      p.peer_mh = in.rdma_mh;
      p.peer_rdma_len = in.rdma_len;
      p.got_info = true;
      break;
    }
    case kData: {
      if (seq != p.data_rx) {
        fail("data message %u from node %u arrived when %u was next", seq, p.id, p.data_rx);
        p.data_rx = seq;
      }
      if (has_imm != (seq % 2 == 1))
        fail("data message %u from node %u: immediate data %s", seq, p.id, has_imm ? "unexpected" : "missing");
      if (!p.got_info) fail("data message %u from node %u came before its INFO", seq, p.id);
      const uint32_t want = msg_size(p.id, g_node, seq);
      if (d->CS.Length != want) {
        fail("data message %u from node %u: %u bytes, sent %u", seq, p.id, d->CS.Length, want);
      } else {
        uint64_t first = 0, bad = check_scattered(d, want, p.id, seq, first);
        if (bad)
          fail("data message %u from node %u (%u bytes, %u receive segments): %" PRIu64 " bad bytes, first at %" PRIu64,
               seq, p.id, want, d->CS.SegCount, bad, first);
        p.data_bytes_rx += want;
      }
      ++p.data_rx;
      break;
    }
    case kFin: {
      Fin f{};
      if (p.got_fin || !read_small(d, f) || f.magic != kMagic || f.src != p.id || f.dst != g_node) {
        fail("bad FIN from node %u", p.id);
        break;
      }
      p.got_fin = true;
      if (f.data_msgs != g_k || p.data_rx != g_k || f.data_bytes != p.data_bytes_rx)
        fail("FIN from node %u: it sent %u messages (%" PRIu64 " bytes), %u arrived (%" PRIu64 " bytes), %u expected",
             p.id, f.data_msgs, f.data_bytes, p.data_rx, p.data_bytes_rx, g_k);
      if (f.rdma_writes != g_w || (g_w && !p.got_rdma_imm))
        fail("FIN from node %u: %u RDMA writes said, %u expected, immediate completion %s", p.id, f.rdma_writes, g_w,
             p.got_rdma_imm ? "seen" : "missing");
      uint64_t bytes = 0;
      check_rdma_area(p, bytes);  // again: nothing may have changed since
      if (bytes != f.rdma_bytes) fail("FIN from node %u: RDMA byte counts differ", p.id);
      break;
    }
    case kAck:
      if (p.server || p.got_ack) fail("unexpected ACK from node %u", p.id);
      p.got_ack = true;
      break;
    default:
      fail("receive from node %u with immediate type %u", p.id, uint32_t(type));
  }
  give_desc(d);
}

// ---------------------------------------------------------------- sends

uint8_t* slot_for(Peer& p) { return p.send_slots + uint64_t(p.posted % g_window) * kSendSlot; }

void post(Peer& p, VIP_DESCRIPTOR* d, Sent what) {
  VIP_RETURN rc = VipPostSend(p.vi, d, g_desc_mem.mh);
  if (rc != VIP_SUCCESS) die("VipPostSend to node %u: %s", p.id, rc_name(rc));
  p.in_flight.push_back(what);
  ++p.posted;
}

// A send of one small struct, with immediate data.
template <class T>
void post_small(Peer& p, Type type, const T& body) {
  uint8_t* buf = slot_for(p);
  std::memcpy(buf, &body, sizeof body);
  VIP_DESCRIPTOR* d = take_desc();
  d->CS.Control = VIP_CONTROL_OP_SENDRECV | VIP_CONTROL_IMMEDIATE;
  d->CS.SegCount = 1;
  d->CS.Length = sizeof body;
  d->CS.ImmediateData = imm_of(type, g_node, 0);
  segs(d)[0].Local.Data.AddressBits = addr_of(buf);
  segs(d)[0].Local.Handle = g_send_mem.mh;
  segs(d)[0].Local.Length = sizeof body;
  post(p, d, {type, 0});
}

// Lays the logical bytes of (seq, size) out as `n` pieces at scattered places
// of the slot and points data segments [first, first + n) of d at them.
void gather(VIP_DESCRIPTOR* d, uint32_t first, uint8_t* slot, uint32_t dst, uint32_t seq, uint32_t size, uint32_t n) {
  std::vector<uint32_t> len = pieces(size, n);
  uint64_t at = 40, off = 0;
  for (uint32_t k = 0; k < n; ++k) {
    uint8_t* b = slot + at;
    for (uint32_t i = 0; i < len[k]; ++i) b[i] = pattern(g_node, dst, seq, off + i);
    segs(d)[first + k].Local.Data.AddressBits = addr_of(b);
    segs(d)[first + k].Local.Handle = g_send_mem.mh;
    segs(d)[first + k].Local.Length = len[k];
    off += len[k];
    at += len[k] + 64 + 8 * (k % 3);  // gaps: the pieces are not contiguous
  }
  if (at > kSendSlot) die("send slot overflow");
}

void post_data(Peer& p) {
  const uint32_t seq = p.next_data++;
  const uint32_t size = msg_size(g_node, p.id, seq), n = msg_segments(seq, size);
  VIP_DESCRIPTOR* d = take_desc();
  const bool imm = seq % 2 == 1;
  d->CS.Control = VIP_CONTROL_OP_SENDRECV | (imm ? VIP_CONTROL_IMMEDIATE : 0);
  d->CS.SegCount = VIP_UINT16(n);
  d->CS.Length = size;
  d->CS.ImmediateData = imm ? imm_of(kData, g_node, seq) : 0;
  gather(d, 0, slot_for(p), p.id, seq, size, n);
  p.data_bytes_sent += size;
  post(p, d, {kData, seq});
}

void post_rdma(Peer& p) {
  const uint32_t w = p.next_rdma++;
  const uint32_t size = rdma_size(g_node, p.id, w), n = std::min<uint32_t>(1 + w % 3, size);
  const uint64_t off = rdma_offset(g_node, p.id, w);
  if (off + size > p.peer_rdma_len) die("RDMA layout does not fit node %u's target", p.id);
  VIP_DESCRIPTOR* d = take_desc();
  const bool imm = w + 1 == g_w;
  d->CS.Control = VIP_CONTROL_OP_RDMAWRITE | (imm ? VIP_CONTROL_IMMEDIATE : 0);
  d->CS.SegCount = VIP_UINT16(1 + n);
  d->CS.Length = size;
  d->CS.ImmediateData = imm ? imm_of(kRdmaImm, g_node, kRdmaSeq + w) : 0;
  segs(d)[0].Remote.Data.AddressBits = p.peer_rdma + off;
  segs(d)[0].Remote.Handle = p.peer_mh;
  gather(d, 1, slot_for(p), p.id, kRdmaSeq + w, size, n);
  p.rdma_bytes_sent += size;
  post(p, d, {kRdmaImm, kRdmaSeq + w});
}

void on_send_done(Peer& p, VIP_DESCRIPTOR* d) {
  if (p.in_flight.empty()) {
    fail("a send completion on node %u's VI with nothing in flight", p.id);
    give_desc(d);
    return;
  }
  Sent s = p.in_flight.front();
  p.in_flight.pop_front();
  if (!done_ok(d)) {
    fail("send (type %u, seq 0x%x) to node %u completed with status %s", uint32_t(s.type), s.seq, p.id,
         status_text(d->CS.Status).c_str());
  } else {
    const uint32_t op = d->CS.Status & VIP_STATUS_OP_MASK;
    const uint32_t want = (d->CS.Control & VIP_CONTROL_OP_MASK) == VIP_CONTROL_OP_RDMAWRITE ? VIP_STATUS_OP_RDMA_WRITE
                                                                                           : VIP_STATUS_OP_SEND;
    if (op != want) fail("a send to node %u completed with op bits 0x%x, not 0x%x", p.id, op, want);
  }
  if (s.type == kFin) p.fin_done = true;
  if (s.type == kAck) p.ack_done = true;
  give_desc(d);
}

// Posts what may go now (at most g_window in flight).
bool pump(Peer& p) {
  bool any = false;
  if (p.tearing) return false;
  while (p.in_flight.size() < g_window) {
    if (!p.info_posted) {
      Info in{kMagic, g_node, p.id, uint32_t(p.rdma.len), addr_of(p.rdma.p), p.rdma.mh, 0};
      post_small(p, kInfo, in);
      p.info_posted = true;
    } else if (p.next_data < g_k && (p.next_data <= p.next_rdma * g_k / std::max<uint32_t>(g_w, 1) || !p.got_info ||
                                     p.next_rdma >= g_w)) {
      post_data(p);
    } else if (p.got_info && p.next_rdma < g_w) {
      post_rdma(p);
    } else if (p.server && p.got_fin && !p.ack_posted) {
      post_small(p, kAck, uint64_t(kMagic));
      p.ack_posted = true;
    } else if (p.next_data == g_k && p.next_rdma == g_w && !p.fin_posted && p.in_flight.empty()) {
      Fin f{kMagic, g_node, p.id, g_k, g_w, 0, p.data_bytes_sent, p.rdma_bytes_sent};
      post_small(p, kFin, f);
      p.fin_posted = true;
    } else {
      break;
    }
    any = true;
  }
  return any;
}

// ---------------------------------------------------------------- connections

struct NetAddr {
  alignas(8) uint8_t raw[sizeof(VIP_NET_ADDRESS) + 2 + 64] = {};
  VIP_NET_ADDRESS* get() { return reinterpret_cast<VIP_NET_ADDRESS*>(raw); }
  void set_discriminator(const std::string& s) {
    get()->DiscriminatorLen = VIP_UINT16(s.size());
    std::memcpy(get()->HostAddress + get()->HostAddressLen, s.data(), s.size());
  }
};

NetAddr own_addr(const std::string& disc) {
  NetAddr a;
  a.get()->HostAddressLen = g_attrs.NicAddressLen;
  std::memcpy(a.get()->HostAddress, g_attrs.LocalNicAddress, g_attrs.NicAddressLen);
  a.set_discriminator(disc);
  return a;
}

std::string discriminator(uint32_t a, uint32_t b) {
  return "a2a." + std::to_string(std::min(a, b)) + "." + std::to_string(std::max(a, b));
}

void connect_peer(Peer& p) {
  const std::string disc = discriminator(g_node, p.id);
  NetAddr local = own_addr(disc);
  VIP_VI_ATTRIBUTES ra{};
  if (p.server) {
    NetAddr remote;
    VIP_CONN_HANDLE conn = nullptr;
    VIP_RETURN rc = VipConnectWait(g_nic, local.get(), VIP_ULONG(g_timeout * 1000), remote.get(), &ra, &conn);
    if (rc != VIP_SUCCESS) die("VipConnectWait(%s): %s", disc.c_str(), rc_name(rc));
    const uint32_t from = remote.get()->HostAddress[0] | (uint32_t(remote.get()->HostAddress[1]) << 8);
    if (remote.get()->HostAddressLen != 2 || from != p.id)
      fail("VipConnectWait(%s): the request came from node %u", disc.c_str(), from);
    if (remote.get()->DiscriminatorLen != disc.size() ||
        std::memcmp(remote.get()->HostAddress + remote.get()->HostAddressLen, disc.data(), disc.size()) != 0)
      fail("VipConnectWait(%s): the remote address carries another discriminator", disc.c_str());
    if (ra.ReliabilityLevel != g_level) fail("VipConnectWait(%s): the requester's VI has another level", disc.c_str());
    rc = VipConnectAccept(conn, p.vi);
    if (rc != VIP_SUCCESS) die("VipConnectAccept(%s): %s", disc.c_str(), rc_name(rc));
  } else {
    NetAddr remote;
    std::string host = "node" + std::to_string(p.id);
    VIP_RETURN rc = VipNSGetHostByName(g_nic, host.data(), remote.get(), 0);
    if (rc != VIP_SUCCESS) die("VipNSGetHostByName(%s): %s", host.c_str(), rc_name(rc));
    remote.set_discriminator(disc);
    auto start = Clock::now();
    for (;;) {
      rc = VipConnectRequest(p.vi, local.get(), remote.get(), 20000, &ra);
      if (rc == VIP_SUCCESS) break;
      const double el = std::chrono::duration<double>(Clock::now() - start).count();
      if ((rc == VIP_NO_MATCH || rc == VIP_NOT_REACHABLE) && el < g_timeout) {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        continue;
      }
      die("VipConnectRequest(%s) to node %u: %s", disc.c_str(), p.id, rc_name(rc));
    }
    if (ra.ReliabilityLevel != g_level) fail("VipConnectRequest(%s): the server's VI has another level", disc.c_str());
  }
  VIP_VI_STATE st{};
  VIP_VI_ATTRIBUTES a{};
  VIP_BOOLEAN se, re;
  check(VipQueryVi(p.vi, &st, &a, &se, &re), "VipQueryVi");
  if (st != VIP_STATE_CONNECTED) fail("the VI to node %u is in state %d after connecting", p.id, int(st));
}

VIP_VI_STATE state_of(VIP_VI_HANDLE vi) {
  VIP_VI_STATE st{};
  VIP_VI_ATTRIBUTES a{};
  VIP_BOOLEAN se, re;
  check(VipQueryVi(vi, &st, &a, &se, &re), "VipQueryVi");
  return st;
}

// VipDisconnect (the server: first; the client: after the server's arrived),
// the flushed spares, VipDestroyVi.
void teardown(Peer& p) {
  p.tearing = true;
  VIP_RETURN rc = VipDisconnect(p.vi);
  if (rc != VIP_SUCCESS) fail("VipDisconnect (node %u): %s", p.id, rc_name(rc));
  if (state_of(p.vi) != VIP_STATE_IDLE) fail("the VI to node %u is not Idle after VipDisconnect", p.id);
  // What the peer sends us: INFO, K messages, the RDMA write with immediate
  // data (if any), FIN, and to a client the ACK.
  const uint32_t spares = kSpareRecvs - 2 - (g_w > 0) - (p.server ? 0 : 1);
  auto start = Clock::now();
  for (;;) {
    VIP_DESCRIPTOR* d = nullptr;
    while (VipRecvDone(p.vi, &d) == VIP_SUCCESS) {
      if (!flushed(d)) fail("a receive of node %u's VI completed with status %s at teardown", p.id,
                            status_text(d->CS.Status).c_str());
      ++p.flushed_recvs;
      ++p.receives_taken;
      give_desc(d);
    }
    while (VipSendDone(p.vi, &d) == VIP_SUCCESS) {
      fail("a send to node %u was still in flight at teardown (status %s)", p.id, status_text(d->CS.Status).c_str());
      give_desc(d);
    }
    rc = VipDestroyVi(p.vi);
    if (rc == VIP_SUCCESS) break;
    if (rc != VIP_INVALID_STATE || std::chrono::duration<double>(Clock::now() - start).count() > 5)
      die("VipDestroyVi (node %u) after VipDisconnect: %s", p.id, rc_name(rc));
    if (VipRecvWait(p.vi, 10, &d) == VIP_SUCCESS) {
      if (!flushed(d)) fail("a receive of node %u's VI completed with status %s at teardown", p.id,
                            status_text(d->CS.Status).c_str());
      ++p.flushed_recvs;
      ++p.receives_taken;
      give_desc(d);
    }
  }
  if (p.flushed_recvs != spares)
    fail("node %u's VI: %u receives came back flushed, %u were spare", p.id, p.flushed_recvs, spares);
  p.destroyed = true;
}

void on_async_error(VIP_PVOID, VIP_ERROR_DESCRIPTOR* e) { ++g_async[int(e->ErrorCode)]; }

void usage() {
  std::fprintf(stderr,
               "usage: vipl_alltoall --node I --nodes N [--messages K] [--rdma W] [--window S]\n"
               "                     [--reliability unreliable|delivery|reception] [--timeout SEC]\n"
               "Every node of an N-node cluster ($ULNIC_CLUSTER, $ULNIC_RUNTIME_DIR) runs one, at once.\n");
  std::exit(2);
}

}  // namespace

int main(int argc, char** argv) {
  bool have_node = false, have_nodes = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) usage();
      return argv[++i];
    };
    if (a == "--node") g_node = uint32_t(std::stoul(next())), have_node = true;
    else if (a == "--nodes") g_nodes = uint32_t(std::stoul(next())), have_nodes = true;
    else if (a == "--messages") g_k = uint32_t(std::stoul(next()));
    else if (a == "--rdma") g_w = uint32_t(std::stoul(next()));
    else if (a == "--window") g_window = std::max<uint32_t>(1, uint32_t(std::stoul(next())));
    else if (a == "--timeout") g_timeout = std::max(5.0, std::atof(next().c_str()));
    else if (a == "--reliability") {
      std::string v = next();
      if (v == "unreliable") g_level = VIP_SERVICE_UNRELIABLE;
      else if (v == "delivery") g_level = VIP_SERVICE_RELIABLE_DELIVERY;
      else if (v == "reception") g_level = VIP_SERVICE_RELIABLE_RECEPTION;
      else usage();
    } else usage();
  }
  if (!have_node || !have_nodes || g_nodes < 2 || g_node >= g_nodes || g_nodes > 64) usage();
  if (g_k + kSpareRecvs > 250 || g_k >= (1u << 19) || g_w > 200) die("--messages at most 244, --rdma at most 200");
  g_start = Clock::now();

  // ---- NIC, ptag, memory, CQ
  const std::string dev = "nic" + std::to_string(g_node);
  check(VipOpenNic(dev.c_str(), &g_nic), ("VipOpenNic(" + dev + ")").c_str());
  check(VipQueryNic(g_nic, &g_attrs), "VipQueryNic");
  if (g_attrs.NicAddressLen != 2 || g_attrs.LocalNicAddress[0] != (g_node & 0xff))
    fail("VipQueryNic: the local address is not node %u", g_node);
  if (g_attrs.MaxSegmentsPerDesc < 16) die("MaxSegmentsPerDesc is %lu; this program needs 16", g_attrs.MaxSegmentsPerDesc);
  check(VipErrorCallback(g_nic, nullptr, on_async_error), "VipErrorCallback");
  check(VipCreatePtag(g_nic, &g_ptag), "VipCreatePtag");
  const uint32_t npeers = g_nodes - 1;
  const uint32_t ndesc = g_nodes * (g_k + kSpareRecvs + g_window + 4) + 16;
  g_desc_mem = make_region(uint64_t(ndesc) * kDescStride, false, "descriptors");
  for (uint32_t k = ndesc; k-- > 0;) g_free.push_back(reinterpret_cast<VIP_DESCRIPTOR*>(g_desc_mem.p + uint64_t(k) * kDescStride));
  g_send_mem = make_region(uint64_t(g_nodes) * g_window * kSendSlot, false, "send buffers");
  g_recv_mem = make_region(uint64_t(g_nodes) * (g_k + kSpareRecvs) * kRecvSlot, false, "receive buffers");
  const VIP_ULONG cq_entries = VIP_ULONG(npeers) * 2 * 256;
  check(VipCreateCQ(g_nic, cq_entries, &g_cq), "VipCreateCQ");

  g_peers.resize(npeers);
  {
    uint32_t k = 0;
    for (uint32_t j = 0; j < g_nodes; ++j) {
      if (j == g_node) continue;
      Peer& p = g_peers[k++];
      p.id = j;
      p.server = g_node < j;
      uint64_t need = rdma_offset(j, g_node, g_w) + 64;
      if (need > kRdmaArea) die("RDMA layout larger than the target area");
      p.rdma = make_region(kRdmaArea, true, "RDMA target");
      p.send_slots = g_send_mem.p + uint64_t(j) * g_window * kSendSlot;
      VIP_VI_ATTRIBUTES va{};
      va.ReliabilityLevel = g_level;
      va.MaxTransferSize = g_attrs.MaxTransferSize;
      va.Ptag = g_ptag;
      va.EnableRdmaWrite = VIP_TRUE;
      va.EnableRdmaRead = VIP_FALSE;
      check(VipCreateVi(g_nic, &va, g_cq, g_cq, &p.vi), "VipCreateVi");
      for (uint32_t r = 0; r < g_k + kSpareRecvs; ++r) post_recv(p, r);
    }
  }

  // ---- connect: as a client to every lower node, then as the server of every higher one
  for (Peer& p : g_peers)
    if (!p.server) connect_peer(p);
  for (Peer& p : g_peers)
    if (p.server) connect_peer(p);
  say("connected to %u peers (%s VIs; %u messages and %u RDMA writes each way per pair)", npeers,
      g_level == VIP_SERVICE_UNRELIABLE ? "unreliable" : g_level == VIP_SERVICE_RELIABLE_DELIVERY ? "reliable delivery"
                                                                                                  : "reliable reception",
      g_k, g_w);

  // ---- exchange
  uint64_t cq_entries_seen = 0;
  auto finished = [] {
    for (const Peer& p : g_peers)
      if (!p.destroyed) return false;
    return true;
  };
  while (!finished()) {
    for (Peer& p : g_peers) pump(p);
    // Completions, in order, through the CQ.
    VIP_VI_HANDLE vi = nullptr;
    VIP_BOOLEAN recv = VIP_FALSE;
    VIP_RETURN rc = VipCQWait(g_cq, 50, &vi, &recv);
    while (rc == VIP_SUCCESS) {
      ++cq_entries_seen;
      Peer* p = peer_of(vi);
      if (!p) {
        fail("VipCQWait named a VI that is not ours");
      } else if (!p->tearing) {
        VIP_DESCRIPTOR* d = nullptr;
        VIP_RETURN r = recv ? VipRecvDone(vi, &d) : VipSendDone(vi, &d);
        if (r == VIP_SUCCESS) {
          if (recv) on_receive(*p, d);
          else on_send_done(*p, d);
        } else {
          fail("a CQ entry for node %u's %s queue, but Vip%sDone says %s", p->id, recv ? "receive" : "send",
               recv ? "Recv" : "Send", rc_name(r));
        }
      }
      rc = VipCQDone(g_cq, &vi, &recv);
    }
    if (rc != VIP_NOT_DONE && rc != VIP_TIMEOUT) die("VipCQWait/VipCQDone: %s", rc_name(rc));
    // Disconnects.
    for (Peer& p : g_peers) {
      if (p.tearing) continue;
      const bool sent_all = p.fin_posted && p.fin_done && p.in_flight.empty();
      if (p.server && sent_all && p.got_fin && p.ack_posted && p.ack_done) {
        teardown(p);
      } else if (!p.server && sent_all && p.got_fin && p.got_ack) {
        if (!p.remote_gone && state_of(p.vi) == VIP_STATE_ERROR) p.remote_gone = true;
        if (p.remote_gone) teardown(p);
      }
    }
    if (std::chrono::duration<double>(Clock::now() - g_start).count() > g_timeout) {
      for (const Peer& p : g_peers)
        say("stuck: node %u: info %d/%d, data %u/%u sent %u/%u received, rdma %u/%u, fin %d/%d/%d, ack %d/%d/%d, "
            "in flight %zu, remote gone %d, torn down %d",
            p.id, p.info_posted, p.got_info, p.next_data, g_k, p.data_rx, g_k, p.next_rdma, g_w, p.fin_posted,
            p.fin_done, p.got_fin, p.ack_posted, p.ack_done, p.got_ack, p.in_flight.size(), p.remote_gone,
            p.destroyed);
      die("not finished after %.0f s", g_timeout);
    }
  }

  // ---- close
  VIP_VI_HANDLE vi = nullptr;
  VIP_BOOLEAN recv = VIP_FALSE;
  while (VipCQDone(g_cq, &vi, &recv) == VIP_SUCCESS) {
    // Entries of torn-down VIs, if the library keeps them (their flushed
    // descriptors were taken with VipRecvDone at teardown).
  }
  check(VipDestroyCQ(g_cq), "VipDestroyCQ");
  for (Peer& p : g_peers) check(VipDeregisterMem(g_nic, p.rdma.p, p.rdma.mh), "VipDeregisterMem");
  for (Region* r : {&g_desc_mem, &g_send_mem, &g_recv_mem}) check(VipDeregisterMem(g_nic, r->p, r->mh), "VipDeregisterMem");
  check(VipDestroyPtag(g_nic, g_ptag), "VipDestroyPtag");
  check(VipCloseNic(g_nic), "VipCloseNic");

  // Passive sides see VIP_ERROR_CONN_LOST once per VI whose server disconnected.
  uint32_t clients = 0;
  uint64_t data_rx = 0, bytes_rx = 0, rdma_rx = 0, bytes_tx = 0;
  for (const Peer& p : g_peers) {
    clients += !p.server;
    data_rx += p.data_rx;
    bytes_rx += p.data_bytes_rx;
    rdma_rx += p.rdma_bytes_checked;
    bytes_tx += p.data_bytes_sent + p.rdma_bytes_sent;
  }
  uint64_t other_async = 0;
  for (auto& [code, n] : g_async)
    if (code != VIP_ERROR_CONN_LOST) other_async += n;
  if (other_async) fail("%" PRIu64 " asynchronous errors other than VIP_ERROR_CONN_LOST", other_async);
  if (g_async[VIP_ERROR_CONN_LOST] != clients)
    fail("VIP_ERROR_CONN_LOST reported %" PRIu64 " times; %u VIs were disconnected by their server (SEMANTICS.md:"
         " once each)", g_async[VIP_ERROR_CONN_LOST], clients);
  const double secs = std::chrono::duration<double>(Clock::now() - g_start).count();
  if (g_failures) {
    say("FAILED: %" PRIu64 " problems (see above)", g_failures);
    return 1;
  }
  say("OK: all verified: %" PRIu64 " messages (%" PRIu64 " bytes) and %u x %u RDMA writes (%" PRIu64
      " bytes) from %u peers; %" PRIu64 " bytes sent; %" PRIu64 " CQ entries; disconnected cleanly in %.1f s",
      data_rx, bytes_rx, npeers, g_w, rdma_rx, npeers, bytes_tx, cq_entries_seen, secs);
  return 0;
}
