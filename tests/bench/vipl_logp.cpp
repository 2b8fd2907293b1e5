// vipl_logp: the LogP parameters of raw VIPL sends (vipl.h), measured as
// am_logp measures AM-2 short requests, so that tests/bench/am_logp.py can
// print what AM costs over raw VIPL. Two processes on two nodes:
//
//   vipl_logp pong --peer N [--idle-timeout S] [--poll-yield N] [--poll-sleep-us US]
//   vipl_logp ping --peer N [--json FILE] [--quick] [--size B]
//       [--iters N] [--samples N] [--burst M] [--g-len N] [--poll-yield N] [--poll-sleep-us US]
//
// Each opens nic<$ULNIC_NODE> and connects one reliable-delivery VI pair
// ("logp"); each side keeps 64 receives posted, and the ping side never has
// more than 64 requests out (a reply means the pong side reposted that
// request's receive first, so no send finds its receive missing). The pong
// side echoes each message: VipRecvDone polled, the receive reposted, the
// bytes copied into a send buffer and VipPostSend. A message is --size bytes
// (default 16, the user data of AM_Request4): its number, then a pattern.
// The ping side measures:
//   RTT/2  VipPostSend, then VipRecvDone polled until the echo is there;
//   o_s    the time of M VipPostSend calls in a burst (M = --burst, 16) / M;
//   o_r    M requests, a sleep long enough for their echoes to be waiting
//          (doubled while some are not), then VipRecvDone until it says
//          VIP_NOT_DONE, each echo checked and its receive reposted: time / M;
//   g      a burst of --g-len sends, at most 64 out, / its length;
//   L      RTT/2 - o_s - o_r.
// Send completions are reaped (VipSendDone) outside the timed parts where
// they can be. Every echo is checked byte for byte; a wrong one, a failed
// descriptor or an echo that never comes (30 s) ends with exit status 1.
#include <sys/mman.h>

#include <thread>

#include "logp_common.h"
#include "vipl.h"

namespace {

using namespace bench;
using logp::Backoff;
using logp::Counts;

constexpr uint32_t kW = 64;  // receives posted per side; requests out at most
constexpr uint32_t kMaxSize = 4096;
constexpr uint64_t kQuit = ~uint64_t(0);
const std::string kDisc = "logp";

struct Region {  // registered as one block; page-aligned (descriptors need 64)
  VIP_DESCRIPTOR rx[kW], tx[kW];
  uint8_t rx_buf[kW][kMaxSize], tx_buf[kW][kMaxSize];
};

struct State {
  uint32_t node = 0, peer = 1, size = 16;
  VIP_NIC_HANDLE nic = nullptr;
  VIP_NIC_ATTRIBUTES attrs{};
  VIP_PROTECTION_HANDLE ptag = nullptr;
  VIP_MEM_HANDLE mh = 0;
  VIP_VI_HANDLE vi = nullptr;
  Region* r = nullptr;
  std::vector<VIP_DESCRIPTOR*> free_tx;
  uint64_t sent = 0, replies = 0, bad = 0;
  std::atomic<bool> finished{false};
  std::atomic<int> async_errors{0};
  Backoff backoff;
} g;

uint8_t pattern(uint64_t i) { return uint8_t(((i * 2654435761u) >> 11) ^ (i >> 7) ^ 0x5a); }

void vcheck(VIP_RETURN rc, const std::string& what) {
  if (rc != VIP_SUCCESS) die(what + " -> VIP_RETURN " + std::to_string(int(rc)));
}

void check_done(const VIP_DESCRIPTOR* d, const char* what) {
  if (!(d->CS.Status & VIP_STATUS_DONE) || (d->CS.Status & VIP_STATUS_ERROR_MASK))
    die(std::string(what) + " completed with status " + std::to_string(d->CS.Status));
}

void on_async_error(VIP_PVOID, VIP_ERROR_DESCRIPTOR* e) {
  if (g.finished && e->ErrorCode == VIP_ERROR_CONN_LOST) return;  // the other side hung up at the end
  ++g.async_errors;
  std::fprintf(stderr, "%s: asynchronous error %d\n", program.c_str(), int(e->ErrorCode));
}

void set_local(VIP_DESCRIPTOR* d, void* buf, uint32_t len) {
  std::memset(d, 0, sizeof *d);
  d->CS.Control = VIP_CONTROL_OP_SENDRECV;
  d->CS.SegCount = 1;
  d->CS.Length = len;
  d->DS[0].Local.Data.Address = buf;
  d->DS[0].Local.Handle = g.mh;
  d->DS[0].Local.Length = len;
}

void post_recv(uint32_t i) {
  set_local(&g.r->rx[i], g.r->rx_buf[i], kMaxSize);
  vcheck(VipPostRecv(g.vi, &g.r->rx[i], g.mh), "VipPostRecv");
}

// Takes finished sends back (no waiting).
void reap_sends() {
  for (VIP_DESCRIPTOR* d = nullptr; VipSendDone(g.vi, &d) == VIP_SUCCESS;) {
    check_done(d, "a send");
    g.free_tx.push_back(d);
  }
}

// Posts `len` bytes of tx_buf (filled by `fill`); waits for a send descriptor if none is free.
template <class Fill>
void send(uint32_t len, Fill fill) {
  if (g.free_tx.empty()) reap_sends();
  if (g.free_tx.empty()) {
    VIP_DESCRIPTOR* d = nullptr;
    vcheck(VipSendWait(g.vi, 30000, &d), "VipSendWait");
    check_done(d, "a send");
    g.free_tx.push_back(d);
  }
  VIP_DESCRIPTOR* d = g.free_tx.back();
  g.free_tx.pop_back();
  uint8_t* buf = g.r->tx_buf[d - g.r->tx];
  fill(buf);
  set_local(d, buf, len);
  vcheck(VipPostSend(g.vi, d, g.mh), "VipPostSend");
}

// One look for a receive: its index, or -1.
int take_recv() {
  VIP_DESCRIPTOR* d = nullptr;
  VIP_RETURN rc = VipRecvDone(g.vi, &d);
  if (rc == VIP_NOT_DONE) return -1;
  vcheck(rc, "VipRecvDone");
  check_done(d, "a receive");
  return int(d - g.r->rx);
}

void open_nic() {
  const char* n = std::getenv("ULNIC_NODE");
  g.node = n && *n ? uint32_t(std::atoi(n)) : 0;
  const std::string name = "nic" + std::to_string(g.node);
  vcheck(VipOpenNic(name.c_str(), &g.nic), "VipOpenNic(" + name + ") (is the cluster up? $ULNIC_CLUSTER)");
  vcheck(VipQueryNic(g.nic, &g.attrs), "VipQueryNic");
  vcheck(VipErrorCallback(g.nic, nullptr, on_async_error), "VipErrorCallback");
  vcheck(VipNSInit(g.nic, nullptr), "VipNSInit");
  vcheck(VipCreatePtag(g.nic, &g.ptag), "VipCreatePtag");
  void* m = ::mmap(nullptr, sizeof(Region), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) die("mmap");
  g.r = static_cast<Region*>(m);
  VIP_MEM_ATTRIBUTES ma{};
  ma.Ptag = g.ptag;
  vcheck(VipRegisterMem(g.nic, g.r, sizeof(Region), &ma, &g.mh), "VipRegisterMem");
  for (uint32_t i = 0; i < kW; ++i) {
    g.free_tx.push_back(&g.r->tx[i]);
    for (uint32_t k = 8; k < kMaxSize; ++k) g.r->tx_buf[i][k] = pattern(k);
  }
  VIP_VI_ATTRIBUTES a{};
  a.ReliabilityLevel = VIP_SERVICE_RELIABLE_DELIVERY;
  a.MaxTransferSize = std::min<VIP_ULONG>(kMaxSize, g.attrs.MaxTransferSize);
  a.Ptag = g.ptag;
  vcheck(VipCreateVi(g.nic, &a, nullptr, nullptr, &g.vi), "VipCreateVi");
  for (uint32_t i = 0; i < kW; ++i) post_recv(i);
}

// A network address: host (ours, or node<peer> by name) then the discriminator.
std::vector<uint8_t> address(bool remote) {
  std::vector<uint8_t> raw(sizeof(VIP_NET_ADDRESS) + g.attrs.NicAddressLen + g.attrs.MaxDiscriminatorLen + 64);
  auto* a = reinterpret_cast<VIP_NET_ADDRESS*>(raw.data());
  if (remote) {
    std::string host = "node" + std::to_string(g.peer);
    vcheck(VipNSGetHostByName(g.nic, host.data(), a, 0), "VipNSGetHostByName(" + host + ")");
  } else {
    std::memcpy(a->HostAddress, g.attrs.LocalNicAddress, g.attrs.NicAddressLen);
  }
  a->HostAddressLen = g.attrs.NicAddressLen;
  a->DiscriminatorLen = VIP_UINT16(kDisc.size());
  std::memcpy(a->HostAddress + a->HostAddressLen, kDisc.data(), kDisc.size());
  return raw;
}

void connect(bool requester, double limit_s) {
  auto local = address(false);
  auto* la = reinterpret_cast<VIP_NET_ADDRESS*>(local.data());
  VIP_VI_ATTRIBUTES ra{};
  if (!requester) {
    auto remote = address(false);
    VIP_CONN_HANDLE conn = nullptr;
    vcheck(VipConnectWait(g.nic, la, VIP_ULONG(limit_s * 1000), reinterpret_cast<VIP_NET_ADDRESS*>(remote.data()),
                          &ra, &conn),
           "VipConnectWait");
    vcheck(VipConnectAccept(conn, g.vi), "VipConnectAccept");
    return;
  }
  auto remote = address(true);
  for (auto start = Clock::now();;) {
    VIP_RETURN rc = VipConnectRequest(g.vi, la, reinterpret_cast<VIP_NET_ADDRESS*>(remote.data()), 10000, &ra);
    if (rc == VIP_SUCCESS) return;
    if ((rc != VIP_NO_MATCH && rc != VIP_NOT_REACHABLE && rc != VIP_TIMEOUT) || seconds_since(start) > limit_s)
      vcheck(rc, "VipConnectRequest");
    std::this_thread::sleep_for(std::chrono::milliseconds(rc == VIP_NO_MATCH ? 1 : 50));  // NO_MATCH comes at once
  }
}

// --------------------------------------------------------------- pong side

int pong(double idle_s) {
  open_nic();
  connect(false, idle_s);
  for (;;) {
    int i = -1;
    if (!spin_until([&] { return (i = take_recv()) >= 0; }, g.backoff.yield, g.backoff.sleep_ns, idle_s))
      die("nothing came for " + fmt("%.0f", idle_s) + " s");
    const uint32_t len = g.r->rx[i].CS.Length;
    uint64_t seq;
    std::memcpy(&seq, g.r->rx_buf[i], 8);
    if (seq == kQuit) g.finished = true;  // the ping side may hang up as soon as the echo is there
    // the receive is reposted before the echo goes: the echo is the ping side's credit
    send(len, [&](uint8_t* buf) { std::memcpy(buf, g.r->rx_buf[i], len), post_recv(uint32_t(i)); });
    if (seq == kQuit) break;
  }
  while (g.free_tx.size() < kW) {  // the last echoes are out
    VIP_DESCRIPTOR* d = nullptr;
    vcheck(VipSendWait(g.vi, 30000, &d), "VipSendWait");
    g.free_tx.push_back(d);
  }
  std::printf("%s: echoed until quit\n", program.c_str());
  return g.async_errors ? 1 : 0;
}

// --------------------------------------------------------------- ping side

void request() {
  if (g.sent - g.replies >= kW) die("more than " + std::to_string(kW) + " requests out");
  const uint64_t seq = g.sent++;
  send(g.size, [&](uint8_t* buf) { std::memcpy(buf, &seq, 8); });
}

// One look for an echo: checked against what was sent, its receive reposted.
bool take_reply() {
  int i = take_recv();
  if (i < 0) return false;
  const uint8_t* b = g.r->rx_buf[i];
  uint64_t seq;
  std::memcpy(&seq, b, 8);
  // VIs are ordered: echo k answers request k.
  if (g.r->rx[i].CS.Length != g.size || seq != g.replies || std::memcmp(b + 8, g.r->tx_buf[0] + 8, g.size - 8) != 0)
    ++g.bad;
  post_recv(uint32_t(i));
  ++g.replies;
  return true;
}

void drain() {
  logp::wait_for(g.backoff, "echo", [] { take_reply(); }, [] { return g.replies >= g.sent; });
  reap_sends();
}

logp::Params measure(const Counts& c) {
  logp::Params p;
  std::vector<double> rtt, os, orr, gap;
  for (int i = 0; i < c.warmup + c.rtt_iters; ++i) {
    auto t0 = Clock::now();
    request();
    drain();  // (reaps the send after the echo is in; drain() ends with reap_sends)
    if (i >= c.warmup) rtt.push_back(us_between(t0, Clock::now()) / 2);
  }
  p.rtt_half = summarize(rtt);
  for (int s = 0; s < c.samples; ++s) {
    drain();
    auto t0 = Clock::now();
    for (int m = 0; m < c.burst; ++m) request();
    os.push_back(us_between(t0, Clock::now()) / c.burst);
  }
  double delay = std::max(50.0, 4 * p.rtt_half.median);
  for (int s = 0, tries = 0; s < c.samples && tries < 4 * c.samples; ++tries) {
    drain();
    for (int m = 0; m < c.burst; ++m) request();
    const uint64_t before = g.replies;
    logp::sleep_us(delay);
    auto t0 = Clock::now();
    while (take_reply()) {
    }
    double us = us_between(t0, Clock::now());
    if (g.replies - before == uint64_t(c.burst)) orr.push_back(us / c.burst), ++s;
    else delay = std::min(2 * delay, 20000.0);
  }
  drain();
  if (orr.empty()) die("o_r: the echoes were never all waiting");
  for (int b = 0; b < c.g_bursts; ++b) {
    auto t0 = Clock::now();
    for (int m = 0; m < c.g_len; ++m) {
      while (g.sent - g.replies >= kW) take_reply();
      request();
    }
    drain();
    gap.push_back(us_between(t0, Clock::now()) / c.g_len);
  }
  p.os = summarize(os), p.orr = summarize(orr), p.g = summarize(gap);
  p.derive_L();
  return p;
}

void usage() {
  std::fprintf(stderr,
               "usage: vipl_logp pong --peer N [--idle-timeout S] [--poll-yield N] [--poll-sleep-us US]\n"
               "       vipl_logp ping --peer N [--json FILE] [--quick] [--size B] [--iters N] [--samples N]\n"
               "              [--burst M] [--g-len N] [--poll-yield N] [--poll-sleep-us US]\n"
               "Both open nic<$ULNIC_NODE> of $ULNIC_CLUSTER ($ULNIC_RUNTIME_DIR).\n");
  std::exit(2);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) usage();
  const std::string mode = argv[1];
  if (mode != "ping" && mode != "pong") usage();
  program = "vipl_logp " + mode;
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  Counts c;
  std::string json;
  const bool quick = logp::has_flag(argc, argv, 2, "--quick");  // (its counts are defaults: see has_flag)
  if (quick) c.quick();
  double idle_s = 600;
  for (int i = 2; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&] { return next_arg(argc, argv, i, usage); };
    if (logp::common_option(argc, argv, i, usage, g.backoff, c)) continue;
    if (a == "--peer") g.peer = uint32_t(std::atoi(next().c_str()));
    else if (a == "--json") json = next();
    else if (a == "--quick") continue;  // (read above)
    else if (a == "--size") g.size = uint32_t(std::clamp(std::atoi(next().c_str()), 8, int(kMaxSize)));
    else if (a == "--idle-timeout") idle_s = std::atof(next().c_str());
    else usage();
  }
  if (c.burst > int(kW)) die("--burst is at most " + std::to_string(kW));
  if (mode == "pong") return pong(idle_s);

  Machine m = machine_facts();
  print_machine(m);
  open_nic();
  connect(true, 120);
  std::printf("VIPL nic%u -> node%u, one reliable-delivery VI pair, %u B messages, %u receives posted a side\n",
              g.node, g.peer, g.size, kW);
  logp::Params p = measure(c);
  logp::print_head(("raw VIPL send/receive, " + size_name(g.size) + ": LogP").c_str());
  logp::print_params(p);
  // quit: one more request the pong side echoes, then exits
  // (the pong side exits once its echo is delivered: a lost connection from then on is expected)
  g.finished = true;
  const uint64_t seq = kQuit;
  send(g.size, [&](uint8_t* buf) { std::memcpy(buf, &seq, 8); });
  logp::wait_for(g.backoff, "quit echo", [] {}, [] { return take_recv() >= 0; });
  VipDisconnect(g.vi);
  const bool verified = g.bad == 0 && g.async_errors == 0;
  std::printf("data verified (every echo, byte for byte): %s\n", verified ? "yes" : "NO");

  Json j;
  j.begin_object().str("benchmark", "vipl_logp").begin_object("params");
  logp::counts_json(j, g.backoff, c);
  j.boolean("quick", quick).num("size", g.size).num("receives_posted", kW).end_object();
  machine_json(j, m, "clock_ns");
  j.begin_object("logp");
  logp::params_json(j, p).end_object();
  j.num("messages", double(g.sent)).num("bad_echoes", double(g.bad)).num("async_errors", g.async_errors);
  j.boolean("verified", verified).end_object();
  if (!json.empty()) write_json(j, json);
  return verified ? 0 : 1;
}
