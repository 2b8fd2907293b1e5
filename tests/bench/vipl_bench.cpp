// vipl_bench: perftest-style figures for VIPL 1.0 (libvipl) on ulnic, beside
// floors measured in the same run. Two processes on two nodes, as vmmc_bench.
//
//   vipl_bench serve --peer N [--node K] [--idle-timeout S]
//       (on the receiving node) opens nic<K>, accepts the client's VIs
//       ("viplb.ctl", "viplb.data", and on request "viplb.idle.<k>") and
//       obeys the commands the client sends over the control VI: echoes
//       pings, polls its RDMA target, keeps receives posted and grants
//       credits for the send-bandwidth streams, checks verification
//       transfers byte for byte. Exits on the client's "quit" (or after
//       --idle-timeout seconds without a command, default 900).
//   vipl_bench client --peer N [--node K] [--out DIR | --json FILE] [--quick]
//       [--lat-sizes LIST] [--iters N] [--warmup N] [--lat-seconds S]
//       [--bw-sizes LIST] [--inflight K] [--win-ms MS] [--windows N] [--measure-ms MS]
//       [--idle LIST] [--idle-sizes LIST] [--idle-modes wait,poll]
//       [--reliability unreliable|delivery|reception]
//       [--poll-yield N] [--poll-sleep-us US] [--no-floors] [--no-counters] [--skip SECTIONS]
//       (on the sending node) measures, in one run:
//   0. floors (host only): a two-process shared-memory ping-pong and memcpy
//      bandwidth per size (bench_common.h);
//   1. one-way latency = RTT / 2 of a ping-pong over one connected VI pair,
//      4 B .. 64 KiB:
//        send/wait:  VipPostSend; the peer's VipRecvWait returns the ping,
//                    it reposts its receive and posts the same bytes back;
//                    the client's VipRecvWait takes the pong;
//        send/poll:  the same, completions polled with VipRecvDone: --poll-yield
//                    looks back to back (default 50), then one look per
//                    nanosleep(--poll-sleep-us, default 20; 0: sched_yield).
//                    On 2 cores two spinning processes starve the NICs' vCPUs;
//        rdma/poll:  VIP_CONTROL_OP_RDMAWRITE into the peer's registered
//                    target; each side polls the last byte of its own target
//                    (a tag that changes every message; same back-off) and
//                    writes the bytes back.
//      Each pong is compared with its ping (bad: pongs that differed).
//      Send completions are reaped after the pong, outside the timing;
//   2. bandwidth per size, 4 B .. 8 MiB, a window of --inflight descriptors
//      outstanding (fewer above 2 MiB: at most 32 MiB in flight), completions
//      reaped with VipSendWait in posting order:
//        send:  VipPostSend into receives the server keeps posted (128, all
//               in one 8 MiB buffer); on reliable VIs a send that finds no
//               receive breaks the connection, so the server grants credits
//               over the control VI (every 32 receives reposted) and the
//               client never has more sends out than receives granted;
//        rdma:  VIP_CONTROL_OP_RDMAWRITE into the server's 8 MiB target.
//      After a warm-up (>= --win-ms and K + 1 completions) windows of
//      max(--win-ms, K completions) each, about --measure-ms of them
//      (3 .. --windows); MB/s = 1e6 B/s per window. Each row is verified: one
//      transfer of a pattern into a zeroed area, checked by the server byte
//      for byte (and the guard bytes after it still zero);
//   3. idle VIs: send one-way latency (--idle-modes x --idle-sizes) with N
//      idle VIs open and connected on the same NIC handles (N of --idle,
//      default 1,16,63; the control VI is one of them, so N + 1 VIs per NIC,
//      at most MaxVI = 64; each idle VI has a receive posted). --idle-rounds
//      rounds (default 3) visit the levels ascending, then descending, and so
//      on (VIs connected and torn down as needed), --idle-seconds per row;
//      each level's samples are pooled and its median set against the
//      lowest level's: the NIC's cost of scanning VIs must not grow with
//      idle ones.
// LIST: comma-separated sizes with optional K/M suffix ("4,64,4K,1M") or
// "none"; SECTIONS: comma-separated of lat,poll,rdma,bw,rdmabw,idle.
// Both processes attach as libvipl programs do ($ULNIC_RUNTIME_DIR,
// $ULNIC_CLUSTER; --node defaults to $ULNIC_NODE). Prints min/median/max
// tables and writes JSON (DIR/vipl_bench.json). A completion that never comes
// (a pong within 10 s, a bandwidth completion within 30 s) ends the run with
// a report on stderr: the descriptors still out and their Status, the slot's
// rings as this process maps them (SQ/CQ head and tail, sq_dormant), whether
// one more post moves them, and both NICs' `ulnic node status`. A program,
// not a test; tests/bench/vipl_bench.py starts a private cluster, runs it and
// plots.
#include <sched.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <filesystem>
#include <map>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "bench_common.h"
#include "vipl.h"

namespace {

using namespace bench;

// ------------------------------------------------------------ the arena

// Each process registers one arena (EnableRdmaWrite), laid out alike:
constexpr uint64_t kLatMax = 64u << 10;     // largest ping-pong message
constexpr uint64_t kBwMax = 8u << 20;       // largest bandwidth transfer
constexpr uint64_t kGuard = 64;             // checked-zero bytes after a verified transfer
constexpr uint32_t kDescs = 1024;           // descriptor slots
constexpr uint32_t kDescStride = 64;        // VIP_DESCRIPTOR: control + 2 segments
constexpr uint32_t kCtlSlots = 16;          // control receives posted / send buffers
constexpr uint32_t kCtlBytes = 256;
constexpr uint32_t kMaxIdle = 62;           // extra idle VIs (the control VI is one more)
constexpr uint32_t kServerRecvs = 128;      // receives the server keeps posted on the data VI
constexpr uint32_t kCreditEvery = 32;       // the server grants credits every this many reposts
constexpr uint32_t kMaxWindows = 64;

constexpr uint64_t kOffDesc = 0;
constexpr uint64_t kOffCtlRx = kOffDesc + uint64_t(kDescs) * kDescStride;
constexpr uint64_t kOffCtlTx = kOffCtlRx + kCtlSlots * kCtlBytes;
constexpr uint64_t kOffIdle = kOffCtlTx + kCtlSlots * kCtlBytes;  // one receive buffer per idle VI
constexpr uint64_t kOffLatTx = (kOffIdle + 64 * kCtlBytes + 4095) & ~uint64_t(4095);
constexpr uint64_t kOffLatRx = kOffLatTx + kLatMax + 4096;
constexpr uint64_t kOffRdmaLat = kOffLatRx + kLatMax + 4096;
constexpr uint64_t kOffBulk = kOffRdmaLat + kLatMax + 4096;
constexpr uint64_t kBulkLen = kBwMax + 4096;
constexpr uint64_t kArenaLen = kOffBulk + kBulkLen;

constexpr uint32_t kMagic = 0x5650424d;  // "VPBM"

// ------------------------------------------------------ control messages

enum Op : uint32_t { kHello = 1, kLat, kStop, kSendBw, kPrep, kVerify, kIdleUp, kIdleDown, kCredit, kQuit };
enum Mode : uint32_t { kSendWait = 0, kSendPoll = 1, kRdmaPoll = 2, kSendBwMode = 3, kRdmaBwMode = 4 };

const char* mode_name(uint32_t m) {
  switch (m) {
    case kSendWait: return "send/wait";
    case kSendPoll: return "send/poll";
    case kRdmaPoll: return "rdma/poll";
    case kSendBwMode: return "send";
    case kRdmaBwMode: return "rdma";
  }
  return "?";
}

struct Msg {
  uint32_t magic = 0, seq = 0, op = 0, status = 0;
  uint32_t mode = 0, size = 0, yield = 0, sleep_ns = 0;
  uint64_t a = 0, b = 0, c = 0, d = 0;
  // kHello: the sender's RDMA targets and their memory handle
  uint64_t rdma_lat = 0, bulk = 0, bulk_len = 0;
  uint32_t mh = 0, level = 0;
};
static_assert(sizeof(Msg) <= kCtlBytes);

uint8_t pattern(uint64_t seed, uint64_t i) { return uint8_t(((i * 2654435761u) >> 11) ^ (i >> 7) ^ (seed * 37)); }
uint8_t tag_of(uint64_t seq) { return uint8_t(seq % 255 + 1); }

// --------------------------------------------------------- VIPL helpers

const char* rc_name(VIP_RETURN r) {
  static const char* const names[] = {"VIP_SUCCESS",
                                      "VIP_NOT_DONE",
                                      "VIP_INVALID_PARAMETER",
                                      "VIP_ERROR_RESOURCE",
                                      "VIP_TIMEOUT",
                                      "VIP_REJECT",
                                      "VIP_INVALID_RELIABILITY_LEVEL",
                                      "VIP_INVALID_MTU",
                                      "VIP_INVALID_QOS",
                                      "VIP_INVALID_PTAG",
                                      "VIP_INVALID_RDMAREAD",
                                      "VIP_DESCRIPTOR_ERROR",
                                      "VIP_INVALID_STATE",
                                      "VIP_ERROR_NAMESERVICE",
                                      "VIP_NO_MATCH",
                                      "VIP_NOT_REACHABLE",
                                      "VIP_ERROR_NOT_SUPPORTED"};
  return unsigned(r) < sizeof names / sizeof *names ? names[r] : "VIP_(unknown)";
}

void vcheck(VIP_RETURN r, const std::string& what) {
  if (r != VIP_SUCCESS) die(what + ": " + rc_name(r));
}

std::string status_text(uint32_t st) {
  static const std::pair<uint32_t, const char*> bits[] = {
      {VIP_STATUS_DONE, "DONE"},
      {VIP_STATUS_FORMAT_ERROR, "FORMAT"},
      {VIP_STATUS_PROTECTION_ERROR, "PROTECTION"},
      {VIP_STATUS_LENGTH_ERROR, "LENGTH"},
      {VIP_STATUS_PARTIAL_ERROR, "PARTIAL"},
      {VIP_STATUS_DESC_FLUSHED_ERROR, "FLUSHED"},
      {VIP_STATUS_TRANSPORT_ERROR, "TRANSPORT"},
      {VIP_STATUS_RDMA_PROT_ERROR, "RDMA_PROT"},
      {VIP_STATUS_REMOTE_DESC_ERROR, "REMOTE_DESC"},
      {VIP_STATUS_IMMEDIATE, "IMMEDIATE"}};
  char buf[32];
  std::snprintf(buf, sizeof buf, "0x%x", st);
  std::string s = buf;
  for (auto& [bit, name] : bits)
    if (st & bit) s += std::string(" ") + name;
  return s;
}

bool done_ok(const VIP_DESCRIPTOR* d) {
  return (d->CS.Status & VIP_STATUS_DONE) && !(d->CS.Status & VIP_STATUS_ERROR_MASK);
}
bool flushed(const VIP_DESCRIPTOR* d) { return d->CS.Status & VIP_STATUS_DESC_FLUSHED_ERROR; }

uint64_t addr_of(const void* p) { return uint64_t(reinterpret_cast<uintptr_t>(p)); }
uint8_t* ptr_of(uint64_t a) { return reinterpret_cast<uint8_t*>(uintptr_t(a)); }

// A network address: the node id (2 bytes, little-endian) then the discriminator.
struct NetAddr {
  alignas(8) uint8_t raw[sizeof(VIP_NET_ADDRESS) + 2 + 64] = {};
  VIP_NET_ADDRESS* get() { return reinterpret_cast<VIP_NET_ADDRESS*>(raw); }
  void set_discriminator(const std::string& d) {
    VIP_NET_ADDRESS* a = get();
    a->DiscriminatorLen = VIP_UINT16(d.size());
    std::memcpy(a->HostAddress + a->HostAddressLen, d.data(), d.size());
  }
};

NetAddr make_addr(uint32_t node, const std::string& disc) {
  NetAddr n;
  VIP_NET_ADDRESS* a = n.get();
  a->HostAddressLen = 2;
  a->HostAddress[0] = VIP_UINT8(node & 0xff);
  a->HostAddress[1] = VIP_UINT8(node >> 8);
  n.set_discriminator(disc);
  return n;
}

// ------------------------------------------------------------ this process

struct Side {
  bool serving = false;
  uint32_t node = 0, peer = 0;
  VIP_NIC_HANDLE nic = nullptr;
  VIP_NIC_ATTRIBUTES attrs{};
  VIP_PROTECTION_HANDLE ptag = nullptr;
  VIP_RELIABILITY_LEVEL level = VIP_SERVICE_RELIABLE_DELIVERY;
  uint8_t* arena = nullptr;
  VIP_MEM_HANDLE mh = 0;
  std::vector<VIP_DESCRIPTOR*> free_descs;
  VIP_VI_HANDLE ctl = nullptr, data = nullptr;
  std::vector<VIP_VI_HANDLE> idle;
  uint32_t ctl_next = 0, ctl_out = 0;
  uint64_t seed = 0;
  // The peer's RDMA targets (kHello).
  uint64_t peer_rdma_lat = 0, peer_bulk = 0, peer_bulk_len = 0;
  VIP_MEM_HANDLE peer_mh = 0;
  // What the error callback saw, by VIP_ERROR_CODE; and library behaviour
  // worth reporting (not fatal to the run).
  std::map<int, uint64_t> async_errors;
  std::vector<std::string> anomalies;
} g;

uint8_t* at(uint64_t off) { return g.arena + off; }

void on_async_error(VIP_PVOID, VIP_ERROR_DESCRIPTOR* e) { ++g.async_errors[int(e->ErrorCode)]; }

void anomaly(const std::string& what) {
  for (const auto& a : g.anomalies)
    if (a == what) return;
  g.anomalies.push_back(what);
  std::fprintf(stderr, "%s: note: %s\n", program.c_str(), what.c_str());
}

VIP_DESCRIPTOR* take_desc() {
  if (g.free_descs.empty()) die("out of descriptor slots");
  VIP_DESCRIPTOR* d = g.free_descs.back();
  g.free_descs.pop_back();
  return d;
}
void give_desc(VIP_DESCRIPTOR* d) { g.free_descs.push_back(d); }

// A send or receive of one segment (for a receive, `len` is the buffer's size).
void set_local(VIP_DESCRIPTOR* d, const void* buf, uint32_t len) {
  std::memset(d, 0, sizeof *d);
  d->CS.Control = VIP_CONTROL_OP_SENDRECV;
  d->CS.SegCount = 1;
  d->CS.Length = len;
  d->DS[0].Local.Data.AddressBits = addr_of(buf);
  d->DS[0].Local.Handle = g.mh;
  d->DS[0].Local.Length = len;
}

void set_rdma(VIP_DESCRIPTOR* d, const void* buf, uint32_t len, uint64_t remote, VIP_MEM_HANDLE remote_mh) {
  std::memset(d, 0, sizeof *d);
  d->CS.Control = VIP_CONTROL_OP_RDMAWRITE;
  d->CS.SegCount = 2;
  d->CS.Length = len;
  d->DS[0].Remote.Data.AddressBits = remote;
  d->DS[0].Remote.Handle = remote_mh;
  d->DS[1].Local.Data.AddressBits = addr_of(buf);
  d->DS[1].Local.Handle = g.mh;
  d->DS[1].Local.Length = len;
}

void post_recv(VIP_VI_HANDLE vi, void* buf, uint32_t cap, const char* what) {
  VIP_DESCRIPTOR* d = take_desc();
  set_local(d, buf, cap);
  vcheck(VipPostRecv(vi, d, g.mh), what);
}

// Reposts a completed receive descriptor into the same buffer.
void repost_recv(VIP_VI_HANDLE vi, VIP_DESCRIPTOR* d, const char* what) {
  uint8_t* buf = ptr_of(d->DS[0].Local.Data.AddressBits);
  uint32_t cap = d->DS[0].Local.Length;
  set_local(d, buf, cap);
  vcheck(VipPostRecv(vi, d, g.mh), what);
}

// Reaps finished sends of `vi` (no waiting); dies on a failed one.
uint32_t reap_sends(VIP_VI_HANDLE vi, const char* what) {
  uint32_t n = 0;
  for (;;) {
    VIP_DESCRIPTOR* d = nullptr;
    VIP_RETURN r = VipSendDone(vi, &d);
    if (r == VIP_NOT_DONE) return n;
    vcheck(r, std::string(what) + ": VipSendDone");
    if (!done_ok(d)) die(std::string(what) + ": a send completed with status " + status_text(d->CS.Status));
    give_desc(d);
    ++n;
  }
}

// Waits for the oldest send of `vi`; dies on failure.
void wait_send(VIP_VI_HANDLE vi, const char* what) {
  VIP_DESCRIPTOR* d = nullptr;
  vcheck(VipSendWait(vi, 30000, &d), std::string(what) + ": VipSendWait");
  if (!done_ok(d)) die(std::string(what) + ": completed with status " + status_text(d->CS.Status));
  give_desc(d);
}

uint8_t load8(const uint8_t* p) { return __atomic_load_n(p, __ATOMIC_ACQUIRE); }

// ------------------------------------------------------------ control VI

uint8_t* ctl_tx(uint32_t k) { return at(kOffCtlTx + uint64_t(k % kCtlSlots) * kCtlBytes); }

// Takes back the oldest control send (waiting up to 30 s for it if `wait`);
// false if it is not done (VipSendWait never says so: it times out).
bool reap_ctl_send(bool wait) {
  VIP_DESCRIPTOR* d = nullptr;
  VIP_RETURN r = wait ? VipSendWait(g.ctl, 30000, &d) : VipSendDone(g.ctl, &d);
  if (r == VIP_NOT_DONE) return false;
  vcheck(r, "control send completion");
  if (!done_ok(d)) die("a control send completed with status " + status_text(d->CS.Status));
  give_desc(d);
  --g.ctl_out;
  return true;
}

void reap_ctl_sends(bool wait_all) {
  while (g.ctl_out > 0 && reap_ctl_send(wait_all)) {
  }
}

void ctl_send(Msg m) {
  m.magic = kMagic;
  reap_ctl_sends(false);
  while (g.ctl_out >= kCtlSlots - 1) reap_ctl_send(true);
  uint8_t* buf = ctl_tx(g.ctl_next++);
  std::memcpy(buf, &m, sizeof m);
  VIP_DESCRIPTOR* d = take_desc();
  set_local(d, buf, sizeof m);
  vcheck(VipPostSend(g.ctl, d, g.mh), "control send");
  ++g.ctl_out;
}

// One control message if one came (timeout_ms 0: only looks).
bool ctl_take(Msg& out, VIP_ULONG timeout_ms) {
  VIP_DESCRIPTOR* d = nullptr;
  VIP_RETURN r = timeout_ms ? VipRecvWait(g.ctl, timeout_ms, &d) : VipRecvDone(g.ctl, &d);
  if (r == VIP_NOT_DONE || r == VIP_TIMEOUT) return false;
  vcheck(r, "control receive");
  if (!done_ok(d)) die("a control receive completed with status " + status_text(d->CS.Status));
  const uint8_t* buf = ptr_of(d->DS[0].Local.Data.AddressBits);
  std::memcpy(&out, buf, sizeof out);
  if (d->CS.Length != sizeof(Msg) || out.magic != kMagic)
    die("bad control message (" + std::to_string(d->CS.Length) + " bytes)");
  repost_recv(g.ctl, d, "repost a control receive");
  return true;
}

uint32_t g_cmd_seq = 0;

uint32_t post_cmd(Msg m) {
  m.seq = ++g_cmd_seq;
  ctl_send(m);
  return m.seq;
}

// The reply to command `seq` (credits that come first are dropped).
Msg await_reply(uint32_t seq, uint32_t op, double limit_s = 120) {
  auto start = Clock::now();
  for (;;) {
    Msg r;
    if (ctl_take(r, 500)) {
      if (r.op == kCredit) continue;
      if (r.seq != seq || r.op != op)
        die("unexpected control message (op " + std::to_string(r.op) + ", seq " + std::to_string(r.seq) +
            "; waiting for op " + std::to_string(op) + ", seq " + std::to_string(seq) + ")");
      reap_ctl_sends(false);
      return r;
    }
    if (seconds_since(start) > limit_s) die("the server did not answer command " + std::to_string(seq));
  }
}

Msg call(Msg m, double limit_s = 120) { return await_reply(post_cmd(m), m.op, limit_s); }

void reply(const Msg& c, uint32_t status, uint64_t a = 0, uint64_t b = 0, uint64_t cc = 0, uint64_t d = 0) {
  Msg r;
  r.seq = c.seq;
  r.op = c.op;
  r.status = status;
  r.a = a;
  r.b = b;
  r.c = cc;
  r.d = d;
  ctl_send(r);
}

// ------------------------------------------------------ NIC, VIs, connections

uint32_t env_node() {
  const char* n = std::getenv("ULNIC_NODE");
  return n && *n ? uint32_t(std::strtoul(n, nullptr, 10)) : 0;
}

void open_nic() {
  const std::string name = "nic" + std::to_string(g.node);
  vcheck(VipOpenNic(name.c_str(), &g.nic), "VipOpenNic(" + name + ") (is the cluster up? $ULNIC_CLUSTER)");
  vcheck(VipQueryNic(g.nic, &g.attrs), "VipQueryNic");
  vcheck(VipErrorCallback(g.nic, nullptr, on_async_error), "VipErrorCallback");
  vcheck(VipCreatePtag(g.nic, &g.ptag), "VipCreatePtag");
  if (g.attrs.MaxRegisterBlockBytes < kArenaLen)
    die("the slot heap is too small for a " + size_name(kArenaLen) + " registration (MaxRegisterBlockBytes " +
        std::to_string(g.attrs.MaxRegisterBlockBytes) + "; cluster up --slot-size 64)");
  void* m = ::mmap(nullptr, kArenaLen, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) die(std::string("mmap the arena: ") + std::strerror(errno));
  g.arena = static_cast<uint8_t*>(m);
  std::memset(g.arena, 0, kArenaLen);
  VIP_MEM_ATTRIBUTES ma{};
  ma.Ptag = g.ptag;
  ma.EnableRdmaWrite = VIP_TRUE;
  ma.EnableRdmaRead = VIP_FALSE;
  vcheck(VipRegisterMem(g.nic, g.arena, kArenaLen, &ma, &g.mh), "VipRegisterMem (" + size_name(kArenaLen) + ")");
  for (uint32_t k = kDescs; k-- > 0;)
    g.free_descs.push_back(reinterpret_cast<VIP_DESCRIPTOR*>(at(kOffDesc + uint64_t(k) * kDescStride)));
  // The bulk area: the client's source pattern (the server's is overwritten).
  g.seed = 0x40 + g.node;
  uint8_t* bulk = at(kOffBulk);
  for (uint64_t i = 0; i < kBulkLen; ++i) bulk[i] = pattern(g.seed, i);
}

VIP_VI_HANDLE make_vi(VIP_RELIABILITY_LEVEL level) {
  VIP_VI_ATTRIBUTES a{};
  a.ReliabilityLevel = level;
  a.MaxTransferSize = g.attrs.MaxTransferSize;
  a.QoS = nullptr;
  a.Ptag = g.ptag;
  a.EnableRdmaWrite = VIP_TRUE;
  a.EnableRdmaRead = VIP_FALSE;
  VIP_VI_HANDLE vi = nullptr;
  vcheck(VipCreateVi(g.nic, &a, nullptr, nullptr, &vi), "VipCreateVi");
  return vi;
}

// Client side: VipConnectRequest to the peer's discriminator `disc`; retries
// while the server is not there yet (VIP_NO_MATCH, VIP_NOT_REACHABLE).
void connect_client(VIP_VI_HANDLE vi, const std::string& disc, double limit_s = 120) {
  NetAddr local = make_addr(g.node, disc), remote;
  std::string host = "node" + std::to_string(g.peer);
  vcheck(VipNSGetHostByName(g.nic, host.data(), remote.get(), 0), "VipNSGetHostByName(" + host + ")");
  if (remote.get()->HostAddressLen != 2 || remote.get()->HostAddress[0] != (g.peer & 0xff))
    anomaly("VipNSGetHostByName(node" + std::to_string(g.peer) + ") gave another host address");
  remote.set_discriminator(disc);
  auto start = Clock::now();
  for (;;) {
    VIP_VI_ATTRIBUTES ra{};
    VIP_RETURN r = VipConnectRequest(vi, local.get(), remote.get(), 10000, &ra);
    if (r == VIP_SUCCESS) {
      if (ra.ReliabilityLevel != g.level) anomaly("VipConnectRequest: the remote attributes name another level");
      return;
    }
    if ((r == VIP_NO_MATCH || r == VIP_NOT_REACHABLE || r == VIP_TIMEOUT) && seconds_since(start) < limit_s) {
      // VIP_NO_MATCH comes at once (the server is between two ConnectWaits):
      // ask again soon, or the pause is what the connect times measure.
      std::this_thread::sleep_for(std::chrono::milliseconds(r == VIP_NO_MATCH ? 1 : 100));
      continue;
    }
    die("VipConnectRequest(" + disc + "): " + rc_name(r));
  }
}

// Server side: waits for a request on `disc`, makes a VI of the requester's
// reliability level, lets `prepare` post its receives, accepts.
template <class F>
VIP_VI_HANDLE accept_server(const std::string& disc, F prepare, VIP_ULONG timeout_ms = 120000) {
  NetAddr local = make_addr(g.node, disc), remote;
  VIP_VI_ATTRIBUTES ra{};
  VIP_CONN_HANDLE conn = nullptr;
  vcheck(VipConnectWait(g.nic, local.get(), timeout_ms, remote.get(), &ra, &conn), "VipConnectWait(" + disc + ")");
  if (remote.get()->HostAddressLen != 2 || remote.get()->HostAddress[0] != (g.peer & 0xff))
    anomaly("VipConnectWait: the requester's address is not the peer's node");
  g.level = ra.ReliabilityLevel;
  VIP_VI_HANDLE vi = make_vi(ra.ReliabilityLevel);
  prepare(vi);
  vcheck(VipConnectAccept(conn, vi), "VipConnectAccept(" + disc + ")");
  return vi;
}

VIP_VI_STATE vi_state(VIP_VI_HANDLE vi) {
  VIP_VI_STATE st{};
  VIP_VI_ATTRIBUTES a{};
  VIP_BOOLEAN se = 0, re = 0;
  vcheck(VipQueryVi(vi, &st, &a, &se, &re), "VipQueryVi");
  return st;
}

// Takes every completed descriptor of vi; counts those neither ok nor flushed.
uint32_t drain_vi(VIP_VI_HANDLE vi, uint32_t& bad) {
  uint32_t n = 0;
  for (int q = 0; q < 2; ++q)
    for (;;) {
      VIP_DESCRIPTOR* d = nullptr;
      VIP_RETURN r = q ? VipRecvDone(vi, &d) : VipSendDone(vi, &d);
      if (r != VIP_SUCCESS) break;
      if (!done_ok(d) && !flushed(d)) ++bad;
      give_desc(d);
      ++n;
    }
  return n;
}

// Waits (up to limit_s) until the peer's disconnect reached vi: a posted
// receive comes back flushed, or VipQueryVi says Error.
bool await_remote_disconnect(VIP_VI_HANDLE vi, double limit_s) {
  auto start = Clock::now();
  while (seconds_since(start) < limit_s) {
    VIP_DESCRIPTOR* d = nullptr;
    VIP_RETURN r = VipRecvWait(vi, 50, &d);
    if (r == VIP_SUCCESS) {
      bool f = flushed(d);
      if (!f && !done_ok(d)) anomaly("a receive completed with status " + status_text(d->CS.Status) + " at teardown");
      give_desc(d);
      if (f) return true;
    }
    if (vi_state(vi) == VIP_STATE_ERROR) return true;
  }
  return false;
}

// VipDisconnect, take the flushed descriptors, VipDestroyVi.
void teardown_vi(VIP_VI_HANDLE vi, const std::string& what) {
  VIP_RETURN r = VipDisconnect(vi);
  if (r != VIP_SUCCESS) anomaly("VipDisconnect(" + what + "): " + rc_name(r));
  uint32_t bad = 0;
  auto start = Clock::now();
  for (;;) {
    drain_vi(vi, bad);
    r = VipDestroyVi(vi);
    if (r == VIP_SUCCESS) break;
    if (r != VIP_INVALID_STATE || seconds_since(start) > 5)
      die("VipDestroyVi(" + what + ") after VipDisconnect: " + rc_name(r) + " (state " +
          std::to_string(int(vi_state(vi))) + ")");
    VIP_DESCRIPTOR* d = nullptr;
    if (VipRecvWait(vi, 10, &d) == VIP_SUCCESS) {
      if (!done_ok(d) && !flushed(d)) ++bad;
      give_desc(d);
    }
  }
  if (seconds_since(start) > 0.5)
    anomaly("VipDestroyVi(" + what + ") was refused (VIP_INVALID_STATE) for " + fmt("%.1f", seconds_since(start)) +
            " s after VipDisconnect");
  if (bad) anomaly(std::to_string(bad) + " descriptor(s) of " + what + " completed with errors other than flushed");
}

// ---------------------------------------------------------------- the server

void serve_latency(const Msg& c) {
  const uint32_t s = c.size;
  uint8_t* target = at(kOffRdmaLat);
  if (c.mode == kRdmaPoll) std::memset(target, 0, s + kGuard);
  if (c.mode != kSendWait && c.sleep_ns) ::prctl(PR_SET_TIMERSLACK, 1ul);
  reply(c, 0);
  uint64_t answered = 0, bad = 0, pending = 0;
  uint64_t seq = c.a;
  Msg stop;
  bool stopped = false;
  uint32_t looks = 0;
  auto stop_came = [&] {
    if ((++looks & 255) != 0) return false;
    if (!ctl_take(stop, 0)) return false;
    return stopped = true;
  };
  for (;;) {
    if (c.mode == kRdmaPoll) {
      const uint8_t want = tag_of(seq);
      const uint8_t* flag = target + s - 1;
      if (!spin_until([&] { return load8(flag) == want || stop_came(); }, c.yield, c.sleep_ns, 1e9)) break;
      if (stopped) break;
      VIP_DESCRIPTOR* d = take_desc();
      set_rdma(d, target, s, g.peer_rdma_lat, g.peer_mh);
      vcheck(VipPostSend(g.data, d, g.mh), "RDMA pong");
      ++seq;
    } else {
      VIP_DESCRIPTOR* rd = nullptr;
      VIP_RETURN r = VIP_NOT_DONE;
      if (c.mode == kSendWait) {
        for (;;) {
          r = VipRecvWait(g.data, 20, &rd);
          if (r != VIP_TIMEOUT) break;
          looks = 255;
          if (stop_came()) break;
        }
      } else {
        spin_until([&] { return (r = VipRecvDone(g.data, &rd)) != VIP_NOT_DONE || stop_came(); }, c.yield,
                   c.sleep_ns, 1e9);
      }
      if (stopped) break;
      vcheck(r, "ping receive");
      if (!done_ok(rd)) die("a ping completed with status " + status_text(rd->CS.Status));
      const uint32_t len = rd->CS.Length;
      if (len != s) ++bad;
      uint8_t* buf = ptr_of(rd->DS[0].Local.Data.AddressBits);
      repost_recv(g.data, rd, "repost a ping receive");  // before the pong: the next ping needs it
      VIP_DESCRIPTOR* d = take_desc();
      set_local(d, buf, len);
      vcheck(VipPostSend(g.data, d, g.mh), "pong");
    }
    ++pending;
    pending -= reap_sends(g.data, "pong");
    ++answered;
  }
  for (; pending > 0; --pending) wait_send(g.data, "pong");
  if (!stopped) die("latency: the client went quiet");
  reply(stop, 0, answered, bad);
}

void serve_send_bw(const Msg& c) {
  const uint32_t s = c.size, every = c.c ? uint32_t(c.c) : kCreditEvery;
  reply(c, 0, kServerRecvs);
  uint64_t got = 0, bad = 0, bytes = 0, reposted = 0, stop_total = ~0ull;
  uint32_t first_bad = 0;
  Msg stop;
  Clock::time_point stop_at{};
  while (got < stop_total) {
    VIP_DESCRIPTOR* rd = nullptr;
    VIP_RETURN r = VipRecvWait(g.data, 20, &rd);
    if (r == VIP_SUCCESS) {
      ++got;
      if (!done_ok(rd) || rd->CS.Length != s) {
        if (!bad++) first_bad = rd->CS.Status;
      } else {
        bytes += rd->CS.Length;
      }
      repost_recv(g.data, rd, "repost a bandwidth receive");
      if (++reposted % every == 0) {
        Msg cr;
        cr.op = kCredit;
        cr.a = reposted;
        ctl_send(cr);
      }
      continue;
    }
    if (r != VIP_TIMEOUT) vcheck(r, "bandwidth receive");
    if (stop_total == ~0ull) {
      if (ctl_take(stop, 0)) {
        if (stop.op != kStop) die("send bandwidth: unexpected command " + std::to_string(stop.op));
        stop_total = stop.a;
        stop_at = Clock::now();
      }
    } else if (seconds_since(stop_at) > 10) {
      break;  // the client sent more than arrived: say so
    }
  }
  reply(stop, got == stop_total ? 0 : 1, got, bad, bytes, first_bad);
}

// Checks bulk[0, size) == pattern(seed) and the guard bytes after it zero.
uint64_t verify_bulk(uint32_t size, uint64_t seed, uint64_t& first) {
  uint64_t bad = 0;
  first = ~0ull;
  const uint8_t* p = at(kOffBulk);
  for (uint64_t i = 0; i < size; ++i)
    if (p[i] != pattern(seed, i) && !bad++) first = i;
  for (uint64_t i = size; i < size + kGuard && i < kBulkLen; ++i)
    if (p[i] != 0 && !bad++) first = i;
  return bad;
}

void serve_verify(const Msg& c) {
  uint32_t status = 0;
  uint64_t len = 0;
  if (c.mode == kSendBwMode) {
    VIP_DESCRIPTOR* rd = nullptr;
    vcheck(VipRecvWait(g.data, 10000, &rd), "verification receive");
    len = rd->CS.Length;
    if (!done_ok(rd) || len != c.size) status = 2;
    repost_recv(g.data, rd, "repost the verification receive");
  }
  uint64_t first = 0, bad = verify_bulk(c.size, c.a, first);
  // An RDMA write's completion at the sender says the data was placed only
  // on reliable reception: look again for a while before calling it bad.
  auto start = Clock::now();
  while (bad && c.mode == kRdmaBwMode && seconds_since(start) < 1) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    bad = verify_bulk(c.size, c.a, first);
  }
  const double late_ms = seconds_since(start) * 1e3;
  reply(c, bad ? 1 : status, bad, first, len, uint64_t(late_ms >= 5 ? late_ms : 0));
}

void serve_idle_up(const Msg& c) {
  const uint32_t want = uint32_t(std::min<uint64_t>(c.a, kMaxIdle));
  auto t0 = Clock::now();
  while (g.idle.size() < want) {
    const uint32_t k = uint32_t(g.idle.size());
    g.idle.push_back(accept_server("viplb.idle." + std::to_string(k), [&](VIP_VI_HANDLE vi) {
      post_recv(vi, at(kOffIdle + uint64_t(k) * kCtlBytes), kCtlBytes, "idle VI receive");
    }));
  }
  reply(c, 0, g.idle.size(), uint64_t(seconds_since(t0) * 1e6));
}

// Disconnects and destroys the idle VIs from the last down to c.a of them.
void serve_idle_down(const Msg& c) {
  const uint64_t want = std::min<uint64_t>(c.a, g.idle.size());
  while (g.idle.size() > want) {
    teardown_vi(g.idle.back(), "idle VI " + std::to_string(g.idle.size() - 1));
    g.idle.pop_back();
  }
  reply(c, 0, g.idle.size());
}

int serve(double idle_timeout) {
  g.serving = true;
  program = "vipl_bench serve";
  open_nic();
  std::printf("vipl_bench serve: node %u (%s), arena %s, waiting for node %u\n", g.node, g.attrs.Name,
              size_name(kArenaLen).c_str(), g.peer);
  std::fflush(stdout);
  g.ctl = accept_server("viplb.ctl", [](VIP_VI_HANDLE vi) {
    for (uint32_t k = 0; k < kCtlSlots; ++k) post_recv(vi, at(kOffCtlRx + uint64_t(k) * kCtlBytes), kCtlBytes, "control receive");
  }, VIP_ULONG(idle_timeout * 1000));
  g.data = accept_server("viplb.data", [](VIP_VI_HANDLE vi) {
    for (uint32_t k = 0; k < kServerRecvs; ++k) post_recv(vi, at(kOffBulk), uint32_t(kBulkLen), "data receive");
  });
  for (;;) {
    Msg c;
    auto idle_since = Clock::now();
    while (!ctl_take(c, 500)) {
      if (seconds_since(idle_since) > idle_timeout) die("no command for too long");
    }
    reap_ctl_sends(false);
    switch (c.op) {
      case kHello:
        g.peer_rdma_lat = c.rdma_lat;
        g.peer_bulk = c.bulk;
        g.peer_bulk_len = c.bulk_len;
        g.peer_mh = c.mh;
        {
          Msg r;
          r.seq = c.seq;
          r.op = c.op;
          r.a = uint64_t(::getpid());
          r.rdma_lat = addr_of(at(kOffRdmaLat));
          r.bulk = addr_of(at(kOffBulk));
          r.bulk_len = kBulkLen;
          r.mh = g.mh;
          r.level = g.level;
          ctl_send(r);
        }
        break;
      case kLat:
        serve_latency(c);
        break;
      case kSendBw:
        serve_send_bw(c);
        break;
      case kPrep:
        std::memset(at(kOffBulk), 0, std::min<uint64_t>(uint64_t(c.size) + kGuard, kBulkLen));
        reply(c, 0);
        break;
      case kVerify:
        serve_verify(c);
        break;
      case kIdleUp:
        serve_idle_up(c);
        break;
      case kIdleDown:
        serve_idle_down(c);
        break;
      case kQuit: {
        uint64_t conn_lost_before = g.async_errors[VIP_ERROR_CONN_LOST];
        reply(c, 0);
        reap_ctl_sends(true);
        // The client disconnects first; then we bring our VIs back to Idle.
        bool seen_data = await_remote_disconnect(g.data, 10), seen_ctl = await_remote_disconnect(g.ctl, 10);
        if (!seen_data || !seen_ctl) anomaly("the client's VipDisconnect did not reach this side within 10 s");
        teardown_vi(g.data, "data VI");
        teardown_vi(g.ctl, "control VI");
        uint64_t lost = g.async_errors[VIP_ERROR_CONN_LOST] - conn_lost_before;
        if (lost != 2)
          anomaly("VIP_ERROR_CONN_LOST reported " + std::to_string(lost) + " times for the 2 VIs the client"
                  " disconnected");
        vcheck(VipDeregisterMem(g.nic, g.arena, g.mh), "VipDeregisterMem");
        vcheck(VipDestroyPtag(g.nic, g.ptag), "VipDestroyPtag");
        vcheck(VipCloseNic(g.nic), "VipCloseNic");
        std::printf("vipl_bench serve: done\n");
        for (const auto& a : g.anomalies) std::printf("vipl_bench serve: library: %s\n", a.c_str());
        return 0;
      }
      default:
        die("unknown command " + std::to_string(c.op));
    }
  }
}

// ---------------------------------------------------------------- the client

struct Lat {
  uint32_t mode = 0, size = 0;
  uint32_t idle = 1;        // idle connected VIs beside the measured one
  Stats oneway_us, rtt_us;
  std::vector<double> oneway;  // the samples
  uint64_t bad = 0;
  double ratio = 0;         // median one-way / floor one-way median
  double ratio_idle = 0;    // idle section: median / the N = 1 median
  std::vector<double> round_medians;  // idle section: each round's median
};

struct Bw {
  uint32_t mode = 0, size = 0, inflight = 0;
  Stats bps;
  double overall_bps = 0, win_s = 0, warm_s = 0;
  uint32_t nwin = 0;
  uint64_t ops = 0, failed = 0, credit_waits = 0;
  uint32_t first_status = 0;
  bool verified = true;
  std::string verify_note;
  double verify_late_ms = 0;
  CpuMeter cpu;  // over the whole row (its warm-up and verification too)
};

// A completion that never came: what both NICs say (firmware counters,
// slot state), on stderr, for the report.
void stall_report() {
  // The descriptors not in the free pool, by op and Status (in slot order).
  std::vector<bool> is_free(kDescs, false);
  for (VIP_DESCRIPTOR* d : g.free_descs)
    is_free[size_t((reinterpret_cast<uint8_t*>(d) - at(kOffDesc)) / kDescStride)] = true;
  std::map<std::string, uint32_t> by;
  for (uint32_t k = 0; k < kDescs; ++k) {
    if (is_free[k]) continue;
    auto* d = reinterpret_cast<const VIP_DESCRIPTOR*>(at(kOffDesc + uint64_t(k) * kDescStride));
    uint32_t st = __atomic_load_n(&d->CS.Status, __ATOMIC_ACQUIRE);
    ++by[std::string((d->CS.Control & VIP_CONTROL_OP_MASK) == VIP_CONTROL_OP_RDMAWRITE ? "rdma-write" : "send/recv") +
         " status " + status_text(st)];
  }
  std::fprintf(stderr, "%s: stalled; descriptors posted and not yet taken back:\n", program.c_str());
  for (auto& [k, n] : by) std::fprintf(stderr, "  %3u x %s\n", n, k.c_str());
  VIP_VI_STATE st{};
  VIP_VI_ATTRIBUTES a{};
  VIP_BOOLEAN se = 0, re = 0;
  VipQueryVi(g.data, &st, &a, &se, &re);
  std::fprintf(stderr, "  data VI: state %d, send queue empty %d, receive queue empty %d\n", int(st), se, re);
  // The slot's rings as the process sees them: every shared mapping at file
  // offset 0 that starts with a slot header.
  if (FILE* maps = std::fopen("/proc/self/maps", "r")) {
    char line[512];
    while (std::fgets(line, sizeof line, maps)) {
      unsigned long lo = 0, hi = 0, off = 0;
      char perms[8] = {};
      if (std::sscanf(line, "%lx-%lx %7s %lx", &lo, &hi, perms, &off) != 4 || off != 0 || perms[3] != 's') continue;
      if (hi - lo < sizeof(ulnic::abi::SlotHeader)) continue;
      auto* h = reinterpret_cast<const ulnic::abi::SlotHeader*>(lo);
      if (h->magic != ulnic::abi::kSlotMagic) continue;
      auto* base = reinterpret_cast<const uint8_t*>(lo);
      auto* sq = reinterpret_cast<const ulnic::abi::RingControl*>(base + h->layout.sq_offset);
      auto* cq = reinterpret_cast<const ulnic::abi::RingControl*>(base + h->layout.cq_offset);
      std::fprintf(stderr,
                   "  slot %u of node %u: SQ tail %u head %u (capacity %u), CQ tail %u head %u (capacity %u),"
                   " sq_dormant %u, state %u, completions %" PRIu64 "\n",
                   h->slot_index, h->node_id, __atomic_load_n(&sq->tail, __ATOMIC_ACQUIRE),
                   __atomic_load_n(&sq->head, __ATOMIC_ACQUIRE), h->layout.sq_capacity,
                   __atomic_load_n(&cq->tail, __ATOMIC_ACQUIRE), __atomic_load_n(&cq->head, __ATOMIC_ACQUIRE),
                   h->layout.cq_capacity, __atomic_load_n(&h->nic.sq_dormant, __ATOMIC_ACQUIRE),
                   __atomic_load_n(&h->nic.state, __ATOMIC_ACQUIRE), h->nic.completions);
    }
    std::fclose(maps);
  }
  // One more post (a receive: harmless) rings the doorbell if the NIC
  // stopped watching the SQ: do the stuck sends move then?
  post_recv(g.data, at(kOffLatRx), uint32_t(kLatMax), "diagnostic receive");
  VIP_DESCRIPTOR* d = nullptr;
  VIP_RETURN rc = VipSendWait(g.data, 3000, &d);
  std::fprintf(stderr, "  after one more post (a receive): the oldest send %s\n",
               rc == VIP_SUCCESS ? ("completed, status " + status_text(d->CS.Status)).c_str()
                                 : (std::string("still not done: ") + rc_name(rc)).c_str());
  std::fprintf(stderr, "the NICs' status:\n");
  for (uint32_t n : {g.node, g.peer}) {
    std::string st = node_status_json(n);
    std::fprintf(stderr, "--- node %u\n%s\n", n, st.c_str());
  }
}

uint32_t inflight_for(uint32_t size, uint32_t inflight) {
  return std::clamp<uint32_t>(uint32_t((32ull << 20) / size), 2, inflight);
}

struct LatParams {
  int warmup = 50, iters = 2000;
  double seconds = 2;
  uint32_t yield = 50, sleep_ns = 20000;
};

uint64_t g_tag_seq = 0;

Lat run_latency(uint32_t mode, uint32_t s, const LatParams& p) {
  Lat l;
  l.mode = mode;
  l.size = s;
  uint8_t* tx = at(kOffLatTx);
  uint8_t* rx = at(kOffLatRx);
  uint8_t* target = at(kOffRdmaLat);
  if (mode == kRdmaPoll) std::memset(target, 0, s + kGuard);
  if (mode != kSendWait && p.sleep_ns) ::prctl(PR_SET_TIMERSLACK, 1ul);
  Msg cmd;
  cmd.op = kLat;
  cmd.mode = mode;
  cmd.size = s;
  cmd.yield = p.yield;
  cmd.sleep_ns = p.sleep_ns;
  cmd.a = g_tag_seq + 1;
  call(cmd);
  std::vector<double> rtt;
  uint64_t sent = 0;
  auto start = Clock::now();
  for (int i = 0; i < p.warmup + p.iters; ++i, ++sent) {
    for (uint32_t k = 0; k < s; ++k) tx[k] = pattern(uint64_t(i) + 7 * s, k);
    double us = 0;
    if (mode == kRdmaPoll) {
      const uint8_t want = tag_of(++g_tag_seq);
      tx[s - 1] = want;
      VIP_DESCRIPTOR* d = take_desc();
      set_rdma(d, tx, s, g.peer_rdma_lat, g.peer_mh);
      const uint8_t* flag = target + s - 1;
      auto t0 = Clock::now();
      vcheck(VipPostSend(g.data, d, g.mh), "RDMA ping");
      if (!spin_until([&] { return load8(flag) == want; }, p.yield, p.sleep_ns, 10)) {
        stall_report();
        die("RDMA ping-pong: no pong within 10 s (size " + size_name(s) + ")");
      }
      auto t1 = Clock::now();
      us = us_between(t0, t1);
      if (std::memcmp(target, tx, s) != 0) ++l.bad;
    } else {
      VIP_DESCRIPTOR* d = take_desc();
      set_local(d, tx, s);
      VIP_DESCRIPTOR* rd = nullptr;
      VIP_RETURN r = VIP_NOT_DONE;
      auto t0 = Clock::now();
      vcheck(VipPostSend(g.data, d, g.mh), "ping");
      if (mode == kSendWait) {
        r = VipRecvWait(g.data, 10000, &rd);
      } else {
        spin_until([&] { return (r = VipRecvDone(g.data, &rd)) != VIP_NOT_DONE; }, p.yield, p.sleep_ns, 10);
      }
      auto t1 = Clock::now();
      if (r == VIP_NOT_DONE || r == VIP_TIMEOUT) {
        stall_report();
        die("send ping-pong: no pong within 10 s (size " + size_name(s) + ")");
      }
      vcheck(r, "pong receive");
      us = us_between(t0, t1);
      if (!done_ok(rd)) die("a pong completed with status " + status_text(rd->CS.Status));
      if (rd->CS.Length != s || std::memcmp(rx, tx, s) != 0) ++l.bad;
      repost_recv(g.data, rd, "repost a pong receive");
    }
    wait_send(g.data, "ping");
    if (i >= p.warmup) rtt.push_back(us);
    if (i >= p.warmup + 10 && seconds_since(start) > p.seconds) {
      ++sent;
      break;
    }
  }
  Msg stop;
  stop.op = kStop;
  Msg r = call(stop);
  if (r.a != sent)
    die(std::string(mode_name(mode)) + " ping-pong: the server answered " + std::to_string(r.a) + " of " +
        std::to_string(sent) + " pings");
  l.bad += r.b;  // pings the server received with the wrong length
  l.rtt_us = summarize(rtt);
  for (double& x : rtt) x /= 2;
  l.oneway_us = summarize(rtt);
  l.oneway = std::move(rtt);
  return l;
}

struct BwParams {
  uint32_t inflight = 16;
  double win_s = 0.1, measure_s = 0.8;
  uint32_t windows = 8;
};

Bw run_bandwidth(uint32_t mode, uint32_t s, const BwParams& p) {
  Bw r;
  r.mode = mode;
  r.size = s;
  const uint32_t K = r.inflight = inflight_for(s, p.inflight);
  const bool send = mode == kSendBwMode;
  uint64_t limit = ~0ull, avail = 0;
  if (send) {
    Msg cmd;
    cmd.op = kSendBw;
    cmd.size = s;
    cmd.c = kCreditEvery;
    avail = call(cmd).a;
    limit = avail;
  }
  auto pump_credits = [&](VIP_ULONG wait_ms) {
    bool got = false;
    Msg c;
    while (ctl_take(c, got ? 0 : wait_ms)) {
      if (c.op != kCredit) die("send bandwidth: unexpected control message " + std::to_string(c.op));
      limit = std::max(limit, avail + c.a);
      got = true;
    }
    return got;
  };
  uint8_t* src = at(kOffBulk);
  // One transfer of s bytes from src: a send, or an RDMA write into the peer's bulk area.
  auto post_bulk = [&](const char* what) {
    VIP_DESCRIPTOR* d = take_desc();
    if (send) set_local(d, src, s);
    else set_rdma(d, src, s, g.peer_bulk, g.peer_mh);
    vcheck(VipPostSend(g.data, d, g.mh), what);
  };
  uint64_t posted = 0, done = 0, win_ops = 0, in_win = 0;
  uint32_t nwin = 0;
  int phase = 0;  // 0 warm-up, 1 measuring, 2 draining
  std::vector<double> wins;
  std::vector<uint64_t> win_counts;
  const auto start = Clock::now();
  Clock::time_point t_first{}, win_start{}, meas_start{}, meas_end{};
  for (;;) {
    if (send) pump_credits(0);
    while (phase < 2 && posted - done < K && posted < limit) {
      post_bulk(send ? "bandwidth send" : "bandwidth RDMA write");
      ++posted;
    }
    if (posted == done) {
      if (phase == 2) break;
      ++r.credit_waits;  // every receive granted is in use: wait for credit
      if (!pump_credits(10000)) die("send bandwidth: no credit from the server for 10 s");
      continue;
    }
    VIP_DESCRIPTOR* d = nullptr;
    if (VIP_RETURN rc = VipSendWait(g.data, 30000, &d); rc != VIP_SUCCESS) {
      stall_report();
      die(std::string(send ? "bandwidth send completion" : "bandwidth RDMA write completion") + " (" +
          size_name(s) + ", " + std::to_string(done) + " of " + std::to_string(posted) + " posted completed, VI state " +
          std::to_string(int(vi_state(g.data))) + "): " + rc_name(rc));
    }
    const auto now = Clock::now();
    if (!done_ok(d) && !r.failed++) r.first_status = d->CS.Status;
    give_desc(d);
    ++done;
    if (phase == 0) {
      if (done == 1) t_first = now;
      if (done > K && done >= 2 && std::chrono::duration<double>(now - start).count() >= p.win_s) {
        const double per_op = std::chrono::duration<double>(now - t_first).count() / double(done - 1);
        // Windows of at least K completions and --win-ms; about --measure-ms of them.
        win_ops = K;
        nwin = std::clamp<uint32_t>(uint32_t(p.measure_s / std::max(p.win_s, double(K) * per_op)), 3,
                                    std::max<uint32_t>(3, p.windows));
        phase = 1;
        win_start = meas_start = now;
        r.warm_s = std::chrono::duration<double>(now - start).count();
      }
    } else if (phase == 1) {
      // A window closes after win_ops completions and at least --win-ms.
      const double w = std::chrono::duration<double>(now - win_start).count();
      if (++in_win >= win_ops && w >= p.win_s) {
        wins.push_back(w);
        win_counts.push_back(in_win);
        win_start = meas_end = now;
        r.ops += in_win;
        in_win = 0;
        if (wins.size() >= nwin) phase = 2;
      }
    }
  }
  std::vector<double> bps;
  for (size_t k = 0; k < wins.size(); ++k) bps.push_back(double(win_counts[k]) * s / wins[k]);
  r.bps = summarize(bps);
  const double meas = std::chrono::duration<double>(meas_end - meas_start).count();
  r.overall_bps = meas > 0 ? double(r.ops) * s / meas : 0;
  r.win_s = wins.empty() ? 0 : summarize(wins).median;
  r.nwin = uint32_t(wins.size());
  if (send) {
    Msg stop;
    stop.op = kStop;
    stop.a = posted;
    Msg sr = call(stop, 60);
    if (sr.status || sr.a != posted || sr.b) {
      r.verified = false;
      r.verify_note = "the server took " + std::to_string(sr.a) + " of " + std::to_string(posted) + " sends, " +
                      std::to_string(sr.b) + " bad (first status " + status_text(uint32_t(sr.d)) + ")";
    }
  }
  if (r.failed) {
    r.verified = false;
    r.verify_note += (r.verify_note.empty() ? "" : "; ") + std::to_string(r.failed) + " completions failed (first " +
                     status_text(r.first_status) + ")";
  }
  // Verification: one transfer of the pattern into a zeroed area.
  Msg prep;
  prep.op = kPrep;
  prep.size = s;
  call(prep);
  post_bulk("verification transfer");
  wait_send(g.data, "verification transfer");
  Msg v;
  v.op = kVerify;
  v.mode = mode;
  v.size = s;
  v.a = g.seed;
  Msg vr = call(v, 60);
  r.verify_late_ms = double(vr.d);
  if (vr.status) {
    r.verified = false;
    r.verify_note += (r.verify_note.empty() ? "" : "; ") + std::to_string(vr.a) + " bad bytes, first at " +
                     std::to_string(vr.b) + (vr.status == 2 ? ", receive length " + std::to_string(vr.c) : "");
  }
  return r;
}

void idle_up(uint32_t extras, double& connect_us_per_vi) {
  const uint32_t have = uint32_t(g.idle.size());
  if (extras <= have) return;
  Msg m;
  m.op = kIdleUp;
  m.a = extras;
  const uint32_t seq = post_cmd(m);
  auto t0 = Clock::now();
  for (uint32_t k = have; k < extras; ++k) {
    VIP_VI_HANDLE vi = make_vi(g.level);
    post_recv(vi, at(kOffIdle + uint64_t(k) * kCtlBytes), kCtlBytes, "idle VI receive");
    connect_client(vi, "viplb.idle." + std::to_string(k));
    g.idle.push_back(vi);
  }
  const double us = seconds_since(t0) * 1e6;
  Msg r = await_reply(seq, kIdleUp);
  if (r.a != extras) die("the server has " + std::to_string(r.a) + " idle VIs, not " + std::to_string(extras));
  connect_us_per_vi = us / double(extras - have);
  for (VIP_VI_HANDLE vi : g.idle)
    if (vi_state(vi) != VIP_STATE_CONNECTED) die("an idle VI is not connected");
}

// Down to `extras` idle VIs: the server disconnects the last ones first (ours
// go to Error, their receives come back flushed), then we tear ours down.
void idle_down(uint32_t extras) {
  if (g.idle.size() <= extras) return;
  const uint64_t lost_before = g.async_errors[VIP_ERROR_CONN_LOST];
  Msg m;
  m.op = kIdleDown;
  m.a = extras;
  if (call(m).a != extras) die("the server did not get down to " + std::to_string(extras) + " idle VIs");
  const size_t n = g.idle.size() - extras;
  uint32_t not_seen = 0;
  for (size_t k = extras; k < g.idle.size(); ++k)
    if (!await_remote_disconnect(g.idle[k], 5)) ++not_seen;
  if (not_seen) anomaly(std::to_string(not_seen) + " idle VIs saw no sign of the server's VipDisconnect within 5 s");
  while (g.idle.size() > extras) {
    teardown_vi(g.idle.back(), "idle VI " + std::to_string(g.idle.size() - 1));
    g.idle.pop_back();
  }
  const uint64_t lost = g.async_errors[VIP_ERROR_CONN_LOST] - lost_before;
  if (lost != n)
    anomaly("VIP_ERROR_CONN_LOST reported " + std::to_string(lost) + " times for " + std::to_string(n) +
            " VIs the server disconnected");
}

// ---- NIC firmware counters and CPU shares (`ulnic node status --json`)

struct Probe {
  bool enabled = true;
  std::pair<std::string, std::string> status() const {
    FILE* a = start_node_status(g.node);
    FILE* b = start_node_status(g.peer);
    std::string ta = finish_node_status(a), tb = finish_node_status(b);
    return {ta, tb};
  }
};

void usage() {
  std::fprintf(stderr,
               "usage: vipl_bench serve --peer N [--node K] [--idle-timeout S]\n"
               "       vipl_bench client --peer N [--node K] [--out DIR | --json FILE] [--quick]\n"
               "              [--lat-sizes LIST] [--iters N] [--warmup N] [--lat-seconds S]\n"
               "              [--bw-sizes LIST] [--inflight K] [--win-ms MS] [--windows N] [--measure-ms MS]\n"
               "              [--idle LIST] [--idle-sizes LIST] [--idle-modes wait,poll] [--idle-rounds R] [--idle-seconds S]\n"
               "              [--reliability unreliable|delivery|reception]\n"
               "              [--poll-yield N] [--poll-sleep-us US] [--no-floors] [--no-counters]\n"
               "              [--skip lat,poll,rdma,bw,rdmabw,idle]\n"
               "LIST: sizes with optional K/M suffix, comma-separated (\"4,64,4K\"), or none.\n"
               "Both open nic<K> of $ULNIC_CLUSTER ($ULNIC_RUNTIME_DIR; K defaults to $ULNIC_NODE); first:\n"
               "  ulnic cluster up -n 2 -c CLUSTER --slot-size 64\n"
               "then: ULNIC_NODE=1 vipl_bench serve --peer 0 &  ULNIC_NODE=0 vipl_bench client --peer 1\n");
  std::exit(2);
}

std::vector<uint32_t> parse_list(const std::string& text) {
  std::vector<uint32_t> out;
  size_t i = 0;
  while (i <= text.size()) {
    size_t j = text.find(',', i);
    if (j == std::string::npos) j = text.size();
    if (j > i) out.push_back(uint32_t(std::strtoul(text.substr(i, j - i).c_str(), nullptr, 10)));
    i = j + 1;
  }
  return out;
}

int client(int argc, char** argv) {
  std::string json_path, out_dir, skip, idle_modes_text = "wait,poll";
  std::vector<uint32_t> lat_sizes = {4, 16, 64, 256, 1024, 4096, 16384, 65536};
  std::vector<uint32_t> bw_sizes = {4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1u << 20, 4u << 20, 8u << 20};
  std::vector<uint32_t> idle_levels = {1, 16, 63};
  std::vector<uint32_t> idle_sizes = {4, 4096};
  LatParams lp;
  BwParams bp;
  double win_ms = 100, measure_ms = 800, idle_seconds = 0.6;
  uint32_t idle_rounds = 3;
  bool floors = true, counters = true, quick = false;
  bool lat_set = false, bw_set = false, idle_sizes_set = false;
  bool have_peer = false;
  for (int i = 2; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&] { return next_arg(argc, argv, i, usage); };
    if (a == "--peer") g.peer = uint32_t(std::stoul(next())), have_peer = true;
    else if (a == "--node") g.node = uint32_t(std::stoul(next()));
    else if (a == "--json") json_path = next();
    else if (a == "--out") out_dir = next();
    else if (a == "--quick") quick = true;
    else if (a == "--lat-sizes") lat_sizes = parse_sizes(next()), lat_set = true;
    else if (a == "--bw-sizes") bw_sizes = parse_sizes(next()), bw_set = true;
    else if (a == "--idle") idle_levels = parse_list(next());
    else if (a == "--idle-sizes") idle_sizes = parse_sizes(next()), idle_sizes_set = true;
    else if (a == "--idle-modes") idle_modes_text = next();
    else if (a == "--idle-rounds") idle_rounds = uint32_t(std::clamp(std::atoi(next().c_str()), 1, 20));
    else if (a == "--idle-seconds") idle_seconds = std::max(0.05, std::atof(next().c_str()));
    else if (a == "--iters") lp.iters = std::max(1, std::atoi(next().c_str()));
    else if (a == "--warmup") lp.warmup = std::max(0, std::atoi(next().c_str()));
    else if (a == "--lat-seconds") lp.seconds = std::max(0.05, std::atof(next().c_str()));
    else if (a == "--inflight") bp.inflight = uint32_t(std::clamp(std::atoi(next().c_str()), 1, 64));
    else if (a == "--win-ms") win_ms = std::clamp(std::atof(next().c_str()), 5.0, 5000.0);
    else if (a == "--measure-ms") measure_ms = std::clamp(std::atof(next().c_str()), 10.0, 60000.0);
    else if (a == "--windows") bp.windows = uint32_t(std::clamp(std::atoi(next().c_str()), 3, int(kMaxWindows)));
    else if (a == "--poll-yield") lp.yield = uint32_t(std::max(0, std::atoi(next().c_str())));
    else if (a == "--poll-sleep-us") lp.sleep_ns = uint32_t(std::clamp(std::atof(next().c_str()), 0.0, 1000.0) * 1000);
    else if (a == "--reliability") {
      std::string v = next();
      if (v == "unreliable") g.level = VIP_SERVICE_UNRELIABLE;
      else if (v == "delivery") g.level = VIP_SERVICE_RELIABLE_DELIVERY;
      else if (v == "reception") g.level = VIP_SERVICE_RELIABLE_RECEPTION;
      else usage();
    } else if (a == "--no-floors") floors = false;
    else if (a == "--no-counters") counters = false;
    else if (a == "--skip") skip = "," + next() + ",";
    else usage();
  }
  if (!have_peer) usage();
  if (quick) {
    // A smoke run: a few seconds, every section, fewer sizes and samples.
    if (!lat_set) lat_sizes = {4, 4096, 65536};
    if (!bw_set) bw_sizes = {64, 65536, 1u << 20};
    if (!idle_sizes_set) idle_sizes = {4};
    lp.iters = std::min(lp.iters, 100);
    lp.warmup = std::min(lp.warmup, 10);
    lp.seconds = std::min(lp.seconds, 0.3);
    idle_seconds = 0.2;
    idle_rounds = std::min<uint32_t>(idle_rounds, 2);
    win_ms = std::min(win_ms, 30.0);
    measure_ms = std::min(measure_ms, 120.0);
    bp.windows = std::min<uint32_t>(bp.windows, 4);
  }
  bp.win_s = win_ms / 1000;
  bp.measure_s = measure_ms / 1000;
  std::vector<uint32_t> idle_modes;
  if (idle_modes_text.find("wait") != std::string::npos) idle_modes.push_back(kSendWait);
  if (idle_modes_text.find("poll") != std::string::npos) idle_modes.push_back(kSendPoll);
  auto run = [&](const char* s) { return skip.find("," + std::string(s) + ",") == std::string::npos; };
  for (uint32_t s : lat_sizes)
    if (s < 4 || s > kLatMax) die("latency sizes must be 4 B .. 64 KiB");
  for (uint32_t s : idle_sizes)
    if (s < 4 || s > kLatMax) die("idle-VI sizes must be 4 B .. 64 KiB");
  for (uint32_t s : bw_sizes)
    if (s > kBwMax) die("bandwidth sizes must be at most 8 MiB");
  for (uint32_t n : idle_levels)
    if (n < 1 || n > kMaxIdle + 1) die("--idle: 1 .. 63 idle VIs (the control VI is one; MaxVI is 64)");
  std::sort(idle_levels.begin(), idle_levels.end());
  if (json_path.empty()) json_path = out_dir.empty() ? "vipl_bench.json" : out_dir + "/vipl_bench.json";
  if (!out_dir.empty()) std::filesystem::create_directories(out_dir);
  const auto run_start = Clock::now();
  std::setvbuf(stdout, nullptr, _IOLBF, 0);

  // ---- open, connect, hello
  open_nic();
  if (g.attrs.MaxVI < 64) anomaly("MaxVI is " + std::to_string(g.attrs.MaxVI) + ", not 64");
  g.ctl = make_vi(g.level);
  for (uint32_t k = 0; k < kCtlSlots; ++k) post_recv(g.ctl, at(kOffCtlRx + uint64_t(k) * kCtlBytes), kCtlBytes, "control receive");
  auto tc = Clock::now();
  connect_client(g.ctl, "viplb.ctl");
  const double connect_first_ms = seconds_since(tc) * 1e3;
  g.data = make_vi(g.level);
  for (int k = 0; k < 2; ++k) post_recv(g.data, at(kOffLatRx), uint32_t(kLatMax), "pong receive");
  tc = Clock::now();
  connect_client(g.data, "viplb.data");
  const double connect_data_ms = seconds_since(tc) * 1e3;
  Msg hello;
  hello.op = kHello;
  hello.rdma_lat = addr_of(at(kOffRdmaLat));
  hello.bulk = addr_of(at(kOffBulk));
  hello.bulk_len = kBulkLen;
  hello.mh = g.mh;
  Msg h = call(hello);
  const int server_pid = int(h.a);
  g.peer_rdma_lat = h.rdma_lat;
  g.peer_bulk = h.bulk;
  g.peer_bulk_len = h.bulk_len;
  g.peer_mh = h.mh;
  if (h.level != g.level) anomaly("the server's VIs got another reliability level than the client asked for");

  Probe probe;
  probe.enabled = counters;
  int qemu_pid[2] = {0, 0};
  Counters c0_self, c0_peer;
  {
    auto [a, b] = probe.status();
    qemu_pid[0] = status_pid(a);
    qemu_pid[1] = status_pid(b);
    if (counters) c0_self = parse_counters(a), c0_peer = parse_counters(b);
  }
  const std::vector<int> cpu_pids = {server_pid, qemu_pid[0], qemu_pid[1]};
  const CpuSnap cpu0 = cpu_snap(cpu_pids);
  Machine m = machine_facts();
  const char* level_name = g.level == VIP_SERVICE_UNRELIABLE        ? "unreliable"
                           : g.level == VIP_SERVICE_RELIABLE_DELIVERY ? "reliable delivery"
                                                                      : "reliable reception";
  std::printf("vipl_bench: node %u (%s) -> node %u (server pid %d), %s VIs, %u in flight, windows >= %.0f ms,"
              " ~%.0f ms measured per row%s\n",
              g.node, g.attrs.Name, g.peer, server_pid, level_name, bp.inflight, win_ms, measure_ms,
              quick ? " (quick)" : "");
  std::printf("connect: first VI %.1f ms, data VI %.1f ms (VipConnectRequest)\n", connect_first_ms, connect_data_ms);
  print_machine(m);
  note_cpus(m, 4,
            " for two host processes and two NICs' vCPU threads: every figure sits beside a floor\n"
            "      from this run");

  // ---- 0. floors
  HostFloors host;
  if (floors) host = host_floors("0. floors, host only", lat_sizes, bw_sizes, quick ? 5000 : 20000, quick ? 9 : 31);
  const PingPong& pp = host.pp;
  std::map<uint64_t, MemcpyFloor>& mc = host.mc;
  auto memcpy_median = [&](uint32_t s) { return mc.count(s) ? mc[s].gbps.median * 1e9 : 0.0; };
  auto floor_ratio = [&](const Lat& l) {
    return floors && pp.oneway_us.median > 0 ? l.oneway_us.median / pp.oneway_us.median : 0.0;
  };

  // ---- 1. latency
  std::vector<Lat> lat;
  for (uint32_t s : lat_sizes) {
    for (uint32_t mode : {kSendWait, kSendPoll, kRdmaPoll}) {
      if (!run(mode == kSendWait ? "lat" : mode == kSendPoll ? "poll" : "rdma")) continue;
      Lat l = run_latency(mode, s, lp);
      l.ratio = floor_ratio(l);
      lat.push_back(l);
    }
  }
  if (!lat.empty()) {
    std::printf("\n== 1. one-way latency = ping-pong RTT / 2, us (send/wait: VipRecvWait; send/poll: VipRecvDone;\n"
                "      rdma/poll: RDMA write, each side polls the last byte of its target; polls: %u looks, then one"
                " per %s)\n",
                lp.yield, lp.sleep_ns ? (fmt("%.0f", lp.sleep_ns / 1e3) + " us nanosleep").c_str() : "sched_yield");
    if (floors) std::printf("   floor: shared-memory ping-pong one-way median %.3f us\n", pp.oneway_us.median);
    std::printf("%-10s%-11s%7s%10s%10s%10s%12s%6s\n", "size", "mode", "n", "min", "median", "max", "med/floor",
                "bad");
    for (const Lat& l : lat)
      std::printf("%-10s%-11s%7zu%10.1f%10.1f%10.1f%12.0f%6" PRIu64 "\n", size_name(l.size).c_str(),
                  mode_name(l.mode), l.oneway_us.n, l.oneway_us.min, l.oneway_us.median, l.oneway_us.max, l.ratio,
                  l.bad);
    std::printf("   (bad: pongs whose bytes differed from the ping)\n");
  }

  // ---- 2. bandwidth
  std::vector<Bw> bw;
  uint64_t verify_failed = 0;
  for (uint32_t s : bw_sizes) {
    for (uint32_t mode : {kSendBwMode, kRdmaBwMode}) {
      if (!run(mode == kSendBwMode ? "bw" : "rdmabw")) continue;
      CpuMeter cpu;
      cpu.add("host_client", ::getpid());
      cpu.add("host_server", server_pid);
      cpu.add("nic_client", qemu_pid[0]);
      cpu.add("nic_server", qemu_pid[1]);
      cpu.start();
      Bw r = run_bandwidth(mode, s, bp);
      cpu.stop();
      r.cpu = cpu;
      if (!r.verified) ++verify_failed;
      bw.push_back(r);
    }
  }
  if (!bw.empty()) {
    std::printf("\n== 2. bandwidth, MB/s (1e6 B/s) per window (win: median length x count, after a warm-up);\n"
                "      K descriptors outstanding, VipSendWait in order; send: into receives the server keeps posted"
                " (credits)\n");
    std::printf("%-10s%-6s%3s%10s%9s%9s%9s%10s%10s%9s\n", "size", "mode", "K", "win", "min", "median", "max",
                "overall", "/memcpy", "ops");
    for (const Bw& r : bw) {
      double mcb = memcpy_median(r.size);
      std::printf("%-10s%-6s%3u%10s%9.2f%9.2f%9.2f%10.2f%10s%9" PRIu64 "%s\n", size_name(r.size).c_str(),
                  mode_name(r.mode), r.inflight,
                  (fmt("%.0f", r.win_s * 1e3) + "x" + std::to_string(r.nwin)).c_str(), r.bps.min / 1e6,
                  r.bps.median / 1e6, r.bps.max / 1e6, r.overall_bps / 1e6,
                  mcb > 0 ? fmt("%.4f", r.bps.median / mcb).c_str() : "-", r.ops,
                  r.verified ? "" : ("  NOT VERIFIED: " + r.verify_note).c_str());
    }
    std::printf("   (/memcpy: median over the same size's memcpy floor median; every row verified unless it says"
                " otherwise)\n");
    std::printf("   where the CPU went over each row (a part near 1 was busy or spinning: a NIC polls between bursts):\n");
    for (const Bw& r : bw)
      std::printf("   %-9s %-5s %s\n", size_name(r.size).c_str(), mode_name(r.mode), r.cpu.shares_line(m.nproc).c_str());
  }

  // ---- 3. idle VIs, in rounds: each round visits every level (ascending,
  // then descending, alternately), so machine drift falls on all alike; a
  // level's samples from every round are pooled.
  std::vector<Lat> idle;
  std::vector<std::pair<uint32_t, double>> connect_us;  // idle level -> connect time per VI
  if (run("idle") && !idle_levels.empty() && !idle_modes.empty() && !idle_sizes.empty()) {
    LatParams ip = lp;
    ip.seconds = idle_seconds;
    std::map<std::tuple<uint32_t, uint32_t, uint32_t>, Lat> pool;  // (N, mode, size)
    for (uint32_t round = 0; round < idle_rounds; ++round) {
      std::vector<uint32_t> order = idle_levels;
      if (round % 2) std::reverse(order.begin(), order.end());
      for (uint32_t n : order) {
        if (n - 1 > g.idle.size()) {
          double per_vi = 0;
          idle_up(n - 1, per_vi);
          connect_us.push_back({n, per_vi});
        } else {
          idle_down(n - 1);
        }
        for (uint32_t s : idle_sizes)
          for (uint32_t mode : idle_modes) {
            Lat l = run_latency(mode, s, ip);
            Lat& p = pool[{n, mode, s}];
            p.idle = n;
            p.mode = mode;
            p.size = s;
            p.bad += l.bad;
            p.round_medians.push_back(l.oneway_us.median);
            p.oneway.insert(p.oneway.end(), l.oneway.begin(), l.oneway.end());
          }
      }
    }
    idle_down(0);
    for (auto& [key, l] : pool) {
      l.oneway_us = summarize(l.oneway);
      std::vector<double> rtt = l.oneway;
      for (double& x : rtt) x *= 2;
      l.rtt_us = summarize(rtt);
      l.ratio = floor_ratio(l);
      idle.push_back(l);
    }
    // Each level against the lowest level of the same mode and size.
    for (Lat& l : idle) {
      const Lat& b = pool[{idle_levels.front(), l.mode, l.size}];
      l.ratio_idle = b.oneway_us.median > 0 ? l.oneway_us.median / b.oneway_us.median : 0;
    }
    std::sort(idle.begin(), idle.end(), [](const Lat& a, const Lat& b) {
      return std::tie(a.size, a.mode, a.idle) < std::tie(b.size, b.mode, b.idle);
    });
    std::printf("\n== 3. idle VIs: send one-way latency with N idle VIs connected beside the measured one, us\n"
                "      (the control VI is one of the N; %u rounds over the levels, samples pooled; ratio: median over\n"
                "      the N = %u median; rounds: each round's median)\n",
                idle_rounds, idle_levels.front());
    std::printf("%-8s%-10s%-11s%7s%10s%10s%10s%9s%6s   %s\n", "N idle", "size", "mode", "n", "min", "median", "max",
                "ratio", "bad", "rounds");
    for (const Lat& l : idle) {
      std::string rounds;
      for (double m : l.round_medians) rounds += fmt(" %.0f", m);
      std::printf("%-8u%-10s%-11s%7zu%10.1f%10.1f%10.1f%9.3f%6" PRIu64 "  %s\n", l.idle, size_name(l.size).c_str(),
                  mode_name(l.mode), l.oneway_us.n, l.oneway_us.min, l.oneway_us.median, l.oneway_us.max,
                  l.ratio_idle, l.bad, rounds.c_str());
    }
    double worst = 0;
    for (auto& [n, us] : connect_us) worst = std::max(worst, us);
    if (!connect_us.empty())
      std::printf("   connecting idle VIs: at most %.2f ms per VI (VipConnectRequest, one after another)\n", worst / 1e3);
    const uint32_t top = idle_levels.back();
    for (const Lat& l : idle)
      if (l.idle == top && top != idle_levels.front())
        std::printf("   idle-VI ratio, %s %s: median with %u idle / with %u idle = %.3f\n", mode_name(l.mode),
                    size_name(l.size).c_str(), top, idle_levels.front(), l.ratio_idle);
  }

  // ---- the end: the server quits; we disconnect first
  const CpuShare cs = cpu_share(cpu0, cpu_snap(cpu_pids), false);
  Msg q;
  q.op = kQuit;
  call(q);
  reap_ctl_sends(true);
  teardown_vi(g.data, "data VI");
  teardown_vi(g.ctl, "control VI");
  vcheck(VipDeregisterMem(g.nic, g.arena, g.mh), "VipDeregisterMem");
  vcheck(VipDestroyPtag(g.nic, g.ptag), "VipDestroyPtag");
  const double runtime = seconds_since(run_start);
  Counters c1_self, c1_peer;
  if (counters) {
    auto [a, b] = probe.status();
    c1_self = parse_counters(a);
    c1_peer = parse_counters(b);
  }
  const Counters d_self = counter_delta(c0_self, c1_self), d_peer = counter_delta(c0_peer, c1_peer);
  vcheck(VipCloseNic(g.nic), "VipCloseNic");

  const bool verified = verify_failed == 0 &&
                        std::all_of(lat.begin(), lat.end(), [](const Lat& l) { return l.bad == 0; }) &&
                        std::all_of(idle.begin(), idle.end(), [](const Lat& l) { return l.bad == 0; });
  std::printf("\nverification: %s\n", verified ? "every pong and every bandwidth row checked, all ok"
                                              : "FAILED (see NOT VERIFIED / bad above)");
  uint64_t unexpected = 0;
  for (auto& [code, n] : g.async_errors)
    if (code != VIP_ERROR_CONN_LOST) unexpected += n;
  if (unexpected) anomaly(std::to_string(unexpected) + " asynchronous errors other than VIP_ERROR_CONN_LOST");
  for (const auto& a : g.anomalies) std::printf("library: %s\n", a.c_str());
  if (counters && !d_self.empty()) {
    auto ctr = [](const Counters& c, const char* k) { return c.count(k) ? c.at(k) : 0; };
    std::printf("NIC counters over the run: link_tx_data %" PRIu64 " / %" PRIu64 ", link_retransmits %" PRIu64
                " / %" PRIu64 " (node %u / node %u)\n",
                ctr(d_self, "link_tx_data"), ctr(d_peer, "link_tx_data"), ctr(d_self, "link_retransmits"),
                ctr(d_peer, "link_retransmits"), g.node, g.peer);
  }
  std::printf("total runtime %.1f s; CPU over the run, %% of one CPU (of %ld): client %.0f, server %.0f, QEMU node %u"
              " %.0f, QEMU node %u %.0f, everything else %.0f, stolen by the hypervisor %.0f\n",
              runtime, m.nproc, cs.self, cs.procs[0], g.node, cs.procs[1], g.peer, cs.procs[2], cs.others, cs.steal);

  // ---- JSON
  Json j;
  j.begin_object();
  j.str("benchmark", "vipl_bench").num("runtime_s", runtime).boolean("verified", verified).boolean("quick", quick);
  machine_json(j, m, "clock_ns");
  j.begin_object("cpu_over_run_pct")
      .num("client", cs.self)
      .num("server", cs.procs[0])
      .num("qemu_client_node", cs.procs[1])
      .num("qemu_server_node", cs.procs[2])
      .num("everything_else", cs.others)
      .num("steal", cs.steal)
      .end_object();
  j.begin_object("params")
      .num("node", g.node)
      .num("peer", g.peer)
      .str("nic", g.attrs.Name)
      .str("reliability", level_name)
      .num("iters", lp.iters)
      .num("warmup", lp.warmup)
      .num("lat_seconds", lp.seconds)
      .num("idle_seconds", idle_seconds)
      .num("idle_rounds", idle_rounds)
      .num("inflight", bp.inflight)
      .num("win_ms", win_ms)
      .num("measure_ms", measure_ms)
      .num("windows", bp.windows)
      .num("poll_yield", lp.yield)
      .num("poll_sleep_ns", lp.sleep_ns)
      .num("server_receives", kServerRecvs)
      .num("credit_every", kCreditEvery)
      .num("max_vi", double(g.attrs.MaxVI))
      .num("connect_first_ms", connect_first_ms)
      .num("connect_data_ms", connect_data_ms)
      .end_object();
  if (floors) {
    j.begin_object("floors");
    pingpong_json(j, pp);
    memcpy_json(j, mc, false, true);
    j.end_object();
  }
  auto lat_json = [&](const Lat& l) {
    j.begin_object()
        .str("mode", mode_name(l.mode))
        .num("size", l.size)
        .num("idle_vis", l.idle)
        .stats("oneway_us", l.oneway_us)
        .stats("rtt_us", l.rtt_us)
        .num("bad", double(l.bad))
        .num("ratio_median_to_floor_oneway", l.ratio);
  };
  j.begin_array("latency");
  for (const Lat& l : lat) {
    lat_json(l);
    j.end_object();
  }
  j.end_array();
  j.begin_array("bandwidth");
  for (const Bw& r : bw) {
    double mcb = memcpy_median(r.size);
    j.begin_object()
        .str("mode", mode_name(r.mode))
        .num("size", r.size)
        .num("inflight", r.inflight)
        .stats("bytes_per_s", r.bps)
        .num("overall_bytes_per_s", r.overall_bps)
        .num("ops", double(r.ops))
        .num("failed", double(r.failed))
        .num("window_s", r.win_s)
        .num("windows", r.nwin)
        .num("warm_s", r.warm_s)
        .num("credit_waits", double(r.credit_waits))
        .num("memcpy_bytes_per_s_median", mcb)
        .num("ratio_to_memcpy", mcb > 0 ? r.bps.median / mcb : 0)
        .boolean("verified", r.verified)
        .str("verify_note", r.verify_note)
        .num("verify_late_ms", r.verify_late_ms);
    r.cpu.shares_json(j);
    j.end_object();
  }
  j.end_array();
  j.begin_object("idle_vis");
  j.num("baseline_idle", idle_levels.empty() ? 0 : idle_levels.front()).num("rounds", idle_rounds).num("seconds_per_row", idle_seconds);
  j.begin_array("rows");
  for (const Lat& l : idle) {
    lat_json(l);
    j.num("ratio_to_baseline", l.ratio_idle).begin_array("round_medians_us");
    for (double m : l.round_medians) j.num(nullptr, m);
    j.end_array().end_object();
  }
  j.end_array();
  j.begin_array("connect_us_per_vi");
  for (auto& [n, us] : connect_us) j.begin_object().num("idle_vis", n).num("us", us).end_object();
  j.end_array();
  j.end_object();
  j.begin_object("async_errors");
  for (auto& [code, n] : g.async_errors) j.num(std::to_string(code).c_str(), double(n));
  j.end_object();
  j.begin_array("library_anomalies");
  for (const auto& a : g.anomalies) j.str(nullptr, a);
  j.end_array();
  if (counters) {
    j.begin_object("counters").counters("client_nic", d_self).counters("server_nic", d_peer).end_object();
  }
  j.end_object();
  write_json(j, json_path);
  return verified ? 0 : 1;
}

int serve_main(int argc, char** argv) {
  bool have_peer = false;
  double idle = 900;
  for (int i = 2; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--peer" && i + 1 < argc) g.peer = uint32_t(std::stoul(argv[++i])), have_peer = true;
    else if (a == "--node" && i + 1 < argc) g.node = uint32_t(std::stoul(argv[++i]));
    else if (a == "--idle-timeout" && i + 1 < argc) idle = std::max(1.0, std::atof(argv[++i]));
    else usage();
  }
  if (!have_peer) usage();
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  return serve(idle);
}

}  // namespace

int main(int argc, char** argv) {
  bench::program = "vipl_bench";
  g.node = env_node();
  return serve_or_client(argc, argv, serve_main, client, usage);
}
