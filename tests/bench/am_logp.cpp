// am_logp: the LogP parameters of AM-2 (amudp.h) short requests, measured as
// Culler et al. did (1996), with ping latency and throughput against the
// network depth, and medium and bulk bandwidth. Two processes, ranks 0 and 1:
//
//   am_logp pong --rendezvous DIR [--idle-timeout S]
//   am_logp ping --rendezvous DIR [--json FILE] [--quick] [--args LIST]
//       [--sections LIST] [--medium-sizes LIST] [--bulk-sizes LIST]
//       [--depths LIST] [--depth-args N] [--bursts N]
//       [--iters N] [--samples N] [--burst M] [--g-len N]
//       [--poll-yield N] [--poll-sleep-us US] [--no-floors]
//
// Each does AM_Init with the transport of $ULNIC_AM_TRANSPORT (udp, vipl,
// native; on a NIC transport, on the node of $ULNIC_NODE) and allocates its
// main endpoint (network depth AMUDP_MAX_NETWORKDEPTH, halved until the
// transport grants it); for the depth section, last, one more endpoint per
// depth 1, 2, 4, 8, 16 (AM_SetExpectedResources). Each endpoint sits in a
// bundle of its own (a poll looks at one endpoint). The names travel through
// DIR: each rank writes DIR/<rank>.main (DIR/<rank>.depths) and waits for the
// other's. Endpoint k of one rank maps endpoint k of the other at index 0,
// one tag for all.
//
// The pong side polls and answers: short requests with a reply carrying the
// same arguments, mediums (each payload checked byte for byte) and Longs
// with an empty reply, and the ping side's control requests (which endpoint
// to poll, a check of the segment, quit). The ping side measures, for
// AM_Request0 .. 4 (--args; each with its reply):
//   RTT/2  a ping-pong: the request, then AM_Poll until its reply has run;
//   o_s    the time of a burst of M requests (M = --burst, 16, within the
//          credits) divided by M, the pong side replying meanwhile;
//   o_r    M requests, a sleep long enough for their replies to be waiting
//          (doubled while some are not), then one AM_Poll timed, divided by
//          the replies it ran (those the requests' own polls had not run:
//          a request polls once before it sends);
//   g      a burst of --g-len requests back to back (a request waits for a
//          credit when all are out), its time divided by its length;
//   L      RTT/2 - o_s - o_r.
// Then (sections medium, bulk, depth): MB/s of AM_RequestI (64 B .. 4 KiB)
// and of AM_RequestXfer into the pong side's segment (4 KiB .. 1 MiB),
// bursts of requests (--bursts N a row, after one warm-up; 7, --quick 3;
// every medium payload checked; each bulk row followed by
// one more transfer of another pattern that the pong side checks byte for
// byte); RTT/2 and messages/s of AM_Request0 per network depth (--depths:
// only these of 1, 2, 4, 8, 16; --depth-args N: AM_RequestN instead, 0..4,
// its reply carrying the same arguments). Every
// reply's arguments are checked. A returned message, a wrong byte, a reply
// that never comes (30 s) or a library call that never returns (45 s) ends
// the run with exit status 1; exit status 3: the transport is not available
// (AM_Init failed). tests/bench/am_logp.py runs it.
#include <sys/stat.h>

#include <fstream>
#include <thread>

#include "logp_common.h"

#include <amudp.h>

namespace {

using namespace bench;
using logp::Backoff;
using logp::Counts;

constexpr int kEndpoints = 6;  // main, then depths 1, 2, 4, 8, 16
constexpr int kDepths[kEndpoints] = {AMUDP_MAX_NETWORKDEPTH, 1, 2, 4, 8, 16};  // asked for
constexpr tag_t kTag = 0x4c6f6750414d32;  // "LogPAM2"
constexpr uint32_t kSegBytes = AMUDP_MAX_LONG;
constexpr int kExitUnavailable = 3;

enum : handler_t {
  kPing = 1,    // kPing + n: a short request with n arguments (0..4)
  kPong = 10,   // kPong + n: its reply
  kMedium = 20, kLong, kAck, kSelect, kMakeDepths, kCheck, kChecked, kQuit,
};

uint8_t pattern(uint32_t seed, uint64_t i) { return uint8_t(((i * 2654435761u) >> 11) ^ (i >> 7) ^ (seed * 37)); }
int32_t arg(int32_t a0, int i) { return i == 0 ? a0 : a0 ^ (0x5a5a0000 + i); }

void check(int rc, const char* what) {
  if (rc != AM_OK) die(std::string(what) + " -> " + std::to_string(rc));
}

struct State {
  eb_t eb[kEndpoints] = {};
  ep_t ep[kEndpoints] = {};
  int depth[kEndpoints] = {};       // granted (0: the transport carries no such depth)
  int cur = 0;                      // the endpoint in use (ping) / polled (pong)
  uint64_t sent = 0, replies = 0;   // ping: requests sent, replies run
  uint64_t bad_args = 0;            // ping: replies whose arguments were wrong
  uint64_t handled = 0;             // pong: requests answered
  uint64_t bad_mediums = 0;         // pong: medium payloads that differed
  int checked_ok = -1, checked_bad_mediums = -1;  // ping: the last kChecked
  bool quit = false, want_depths = false;  // pong: asked to quit / to make the depth endpoints
  std::string dir;                  // the rendezvous directory
  double exchange_s = 120;          // how long to wait there for the other rank
  std::string phase = "set-up";     // ping: what it measures (for a report)
  logp::Watchdog watchdog;          // ping: ends a run stuck inside the library
  std::vector<uint8_t> seg, expect, src_a, src_b;
  Backoff backoff;
} g;

// ---------------------------------------------------------------- handlers

void returned(int status, op_t opcode, void*) {
  die("a message came back: status " + std::to_string(status) + ", opcode " + std::to_string(opcode));
}

// pong side
void ping0(void* t) { ++g.handled, check(AM_Reply0(t, kPong + 0), "AM_Reply0"); }
void ping1(void* t, int a) { ++g.handled, check(AM_Reply1(t, kPong + 1, a), "AM_Reply1"); }
void ping2(void* t, int a, int b) { ++g.handled, check(AM_Reply2(t, kPong + 2, a, b), "AM_Reply2"); }
void ping3(void* t, int a, int b, int c) { ++g.handled, check(AM_Reply3(t, kPong + 3, a, b, c), "AM_Reply3"); }
void ping4(void* t, int a, int b, int c, int d) {
  ++g.handled, check(AM_Reply4(t, kPong + 4, a, b, c, d), "AM_Reply4");
}
void on_medium(void* t, void* buf, size_t n, int) {
  ++g.handled;
  if (std::memcmp(buf, g.expect.data(), n) != 0) ++g.bad_mediums;
  check(AM_Reply0(t, kAck), "AM_Reply0 (medium)");
}
void on_long(void* t, void*, size_t, int) { ++g.handled, check(AM_Reply0(t, kAck), "AM_Reply0 (long)"); }
void on_select(void* t, int k) {
  ++g.handled;
  g.cur = std::clamp(k, 0, kEndpoints - 1);
  check(AM_Reply0(t, kAck), "AM_Reply0 (select)");
}
void on_depths(void* t) {
  g.want_depths = true, ++g.handled;
  check(AM_Reply0(t, kAck), "AM_Reply0 (depths)");
}
// The first `len` bytes of the segment hold pattern(seed)?
void on_check(void* t, int len, int seed) {
  int ok = 1;
  ++g.handled;
  for (int i = 0; i < len && ok; ++i) ok = g.seg[size_t(i)] == pattern(uint32_t(seed), uint64_t(i));
  check(AM_Reply2(t, kChecked, ok, int(g.bad_mediums)), "AM_Reply2 (check)");
}
void on_quit(void* t) {
  g.quit = true, ++g.handled;
  check(AM_Reply0(t, kAck), "AM_Reply0 (quit)");
}

// ping side
void set_phase(const std::string& p) {
  g.phase = p;
  g.watchdog.phase(p);
}

void got(std::initializer_list<int> a) {
  int k = 0;
  for (int v : a) g.bad_args += v != arg(*a.begin(), k++);
  ++g.replies;
  g.watchdog.tick();
}
void pong0(void*) { got({}); }
void pong1(void*, int a) { got({a}); }
void pong2(void*, int a, int b) { got({a, b}); }
void pong3(void*, int a, int b, int c) { got({a, b, c}); }
void pong4(void*, int a, int b, int c, int d) { got({a, b, c, d}); }
void on_ack(void*) { ++g.replies, g.watchdog.tick(); }
void on_checked(void*, int ok, int bad) {
  g.checked_ok = ok, g.checked_bad_mediums = bad;
  ++g.replies;
}

// ------------------------------------------------------------------ set-up

bool operator==(const en_t& a, const en_t& b) { return std::memcmp(&a, &b, sizeof a) == 0; }

std::string hex(const en_t& e) {
  static const char digits[] = "0123456789abcdef";
  std::string s;
  const auto* p = reinterpret_cast<const uint8_t*>(&e);
  for (size_t i = 0; i < sizeof e; ++i) s += digits[p[i] >> 4], s += digits[p[i] & 15];
  return s;
}

en_t unhex(const std::string& s) {
  en_t e{};
  if (s.size() != 2 * sizeof e) die("bad endpoint name '" + s + "'");
  auto* p = reinterpret_cast<uint8_t*>(&e);
  for (size_t i = 0; i < sizeof e; ++i) p[i] = uint8_t(std::stoul(s.substr(2 * i, 2), nullptr, 16));
  return e;
}

// Writes our names to DIR/<rank>.<what> (atomically), reads the other rank's.
std::vector<en_t> exchange(const std::string& what, int rank, const std::vector<en_t>& ours) {
  const std::string mine = g.dir + "/" + std::to_string(rank) + "." + what;
  {
    std::ofstream f(mine + ".tmp");
    for (const en_t& e : ours) f << hex(e) << "\n";
    if (!f) die("cannot write " + mine);
  }
  if (std::rename((mine + ".tmp").c_str(), mine.c_str()) != 0) die("cannot rename " + mine);
  const std::string theirs = g.dir + "/" + std::to_string(1 - rank) + "." + what;
  auto start = Clock::now();
  struct stat st{};
  while (::stat(theirs.c_str(), &st) != 0) {
    if (seconds_since(start) > g.exchange_s) die("the other rank's names did not come (" + theirs + ")");
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  std::ifstream f(theirs);
  std::vector<en_t> names;
  for (std::string line; std::getline(f, line);) names.push_back(unhex(line));
  if (names.size() != ours.size()) die("the other rank has " + std::to_string(names.size()) + " endpoints");
  return names;
}

// Endpoints first..last-1, each in a bundle of its own, named to the other
// rank through DIR/<rank>.<what>, mapped at index 0 (the same k on both
// sides), given their depth. A depth endpoint the transport cannot make, or
// whose depth it refuses (AM_ERR_RESOURCE), is left out (depth 0): a zero
// name tells the other side. The main endpoint (k = 0) halves its depth
// until the transport grants one.
void make_endpoints(int rank, int first, int last, const char* what) {
  std::vector<en_t> names(size_t(last - first));
  for (int k = first; k < last; ++k) {
    check(AM_AllocateBundle(AM_SEQ, &g.eb[k]), "AM_AllocateBundle");
    int rc = AM_AllocateEndpoint(g.eb[k], &g.ep[k], &names[size_t(k - first)]);
    if (rc == AM_ERR_RESOURCE && k > 0) {
      g.ep[k] = nullptr, names[size_t(k - first)] = en_t{};
      continue;
    }
    check(rc, ("AM_AllocateEndpoint (endpoint " + std::to_string(k) + ")").c_str());
    ep_t e = g.ep[k];
    check(AM_SetTag(e, kTag), "AM_SetTag");
    check(AM_SetHandler(e, 0, returned), "AM_SetHandler");
    if (rank == 1) {
      check(AM_SetHandler(e, kPing + 0, ping0), "AM_SetHandler");
      check(AM_SetHandler(e, kPing + 1, ping1), "AM_SetHandler");
      check(AM_SetHandler(e, kPing + 2, ping2), "AM_SetHandler");
      check(AM_SetHandler(e, kPing + 3, ping3), "AM_SetHandler");
      check(AM_SetHandler(e, kPing + 4, ping4), "AM_SetHandler");
      check(AM_SetHandler(e, kMedium, on_medium), "AM_SetHandler");
      check(AM_SetHandler(e, kLong, on_long), "AM_SetHandler");
      check(AM_SetHandler(e, kSelect, on_select), "AM_SetHandler");
      check(AM_SetHandler(e, kMakeDepths, on_depths), "AM_SetHandler");
      check(AM_SetHandler(e, kCheck, on_check), "AM_SetHandler");
      check(AM_SetHandler(e, kQuit, on_quit), "AM_SetHandler");
    } else {
      check(AM_SetHandler(e, kPong + 0, pong0), "AM_SetHandler");
      check(AM_SetHandler(e, kPong + 1, pong1), "AM_SetHandler");
      check(AM_SetHandler(e, kPong + 2, pong2), "AM_SetHandler");
      check(AM_SetHandler(e, kPong + 3, pong3), "AM_SetHandler");
      check(AM_SetHandler(e, kPong + 4, pong4), "AM_SetHandler");
      check(AM_SetHandler(e, kAck, on_ack), "AM_SetHandler");
      check(AM_SetHandler(e, kChecked, on_checked), "AM_SetHandler");
    }
  }
  if (rank == 1 && first == 0) {
    g.seg.assign(kSegBytes, 0);
    check(AM_SetSeg(g.ep[0], g.seg.data(), g.seg.size()), "AM_SetSeg");
  }
  const std::vector<en_t> peer = exchange(what, rank, names);
  for (int k = first; k < last; ++k) {
    if (!g.ep[k] || peer[size_t(k - first)] == en_t{}) continue;
    check(AM_Map(g.ep[k], 0, peer[size_t(k - first)], kTag), "AM_Map");
    int d = kDepths[k], rc;
    while ((rc = AM_SetExpectedResources(g.ep[k], 1, d)) == AM_ERR_RESOURCE && k == 0 && d > 1) d /= 2;
    if (rc != AM_OK && (k == 0 || rc != AM_ERR_RESOURCE)) check(rc, "AM_SetExpectedResources");
    g.depth[k] = rc == AM_OK ? d : 0;
  }
}

// DIR/<rank>.who: our pid and node ($ULNIC_NODE; -1 over UDP), written
// before our names, so the other rank has it once it has those: the ping
// meters where the depth section's CPU went (CpuMeter).
void write_who(int rank, bool on_nic) {
  const char* node = std::getenv("ULNIC_NODE");
  const std::string mine = g.dir + "/" + std::to_string(rank) + ".who";
  {
    std::ofstream f(mine + ".tmp");
    f << ::getpid() << " " << (on_nic ? std::atoi(node && *node ? node : "0") : -1) << "\n";
    if (!f) die("cannot write " + mine);
  }
  if (std::rename((mine + ".tmp").c_str(), mine.c_str()) != 0) die("cannot rename " + mine);
}

// The depth and bulk sections' meter: both ranks and, on a NIC transport, both NICs.
CpuMeter meter() {
  CpuMeter cpu;
  long pid = 0, node = -1, my_node = -1;
  std::ifstream f(g.dir + "/1.who"), mine(g.dir + "/0.who");
  long ignored = 0;
  f >> pid >> node;
  mine >> ignored >> my_node;
  cpu.add("host_client", ::getpid());
  cpu.add("host_server", pid_t(pid));
  if (my_node >= 0) cpu.add("nic_client", node_qemu_pid(uint32_t(my_node)));
  if (node >= 0) cpu.add("nic_server", node_qemu_pid(uint32_t(node)));
  return cpu;
}

void init(int rank) {
  int rc = AM_Init();
  if (rc != AM_OK) {
    const char* t = std::getenv("ULNIC_AM_TRANSPORT");
    std::printf("%s: transport %s not available: AM_Init -> %d\n", program.c_str(), t && *t ? t : "udp", rc);
    std::exit(kExitUnavailable);
  }
  write_who(rank, std::string(AMX_TransportName()) != "udp");
  make_endpoints(rank, 0, 1, "main");
}

// -------------------------------------------------------------- pong side

int pong(double idle_s) {
  g.expect.resize(AMUDP_MAX_MEDIUM);
  for (size_t i = 0; i < g.expect.size(); ++i) g.expect[i] = pattern(1, i);
  auto last = Clock::now();
  Clock::time_point quit_at{};
  uint64_t loops = 0, seen = 0;
  uint32_t idle = 0;
  // Polls the selected endpoint, every 256th time all of them; lingers 1 s
  // after quit (a reply lost on UDP is asked for again).
  for (;;) {
    const bool all = (++loops & 255) == 0;
    for (int k = 0, cur = g.cur; k < kEndpoints; ++k)
      if (g.ep[k] && (all || k == cur)) check(AM_Poll(g.eb[k]), "AM_Poll");
    if (g.want_depths) g.want_depths = false, make_endpoints(1, 1, kEndpoints, "depths");
    if (g.handled != seen) {
      seen = g.handled, idle = 0, last = Clock::now();
    } else if (++idle > g.backoff.yield) {
      if (g.backoff.sleep_ns) logp::sleep_us(g.backoff.sleep_ns / 1e3);
      else ::sched_yield();
    }
    if (g.quit && quit_at == Clock::time_point{}) quit_at = Clock::now();
    if (g.quit && seconds_since(quit_at) > 1.0) break;
    if ((loops & 0xfff) == 0 && seconds_since(last) > idle_s) die("nothing came for " + fmt("%.0f", idle_s) + " s");
  }
  std::printf("%s: medium payloads checked, %" PRIu64 " wrong\n", program.c_str(), g.bad_mediums);
  check(AM_Terminate(), "AM_Terminate");
  return g.bad_mediums ? 1 : 0;
}

// -------------------------------------------------------------- ping side

void poll_cur() { check(AM_Poll(g.eb[g.cur]), "AM_Poll"); }

// Waits until every request sent has its reply.
void drain(const char* what = "reply") {
  const Backoff& b = g.backoff;
  if (!spin_until([] { poll_cur(); return g.replies >= g.sent; }, b.yield, b.sleep_ns, b.limit_s))
    die(std::string("no ") + what + " after " + fmt("%.0f", b.limit_s) + " s (" + g.phase + ", endpoint " +
        std::to_string(g.cur) + ": " + std::to_string(g.sent - g.replies) + " of " + std::to_string(g.sent) +
        " requests unanswered)");
}

void request(int n, int32_t a0) {
  ep_t e = g.ep[g.cur];
  int rc = AM_OK;
  switch (n) {
    case 0: rc = AM_Request0(e, 0, kPing + 0); break;
    case 1: rc = AM_Request1(e, 0, kPing + 1, a0); break;
    case 2: rc = AM_Request2(e, 0, kPing + 2, a0, arg(a0, 1)); break;
    case 3: rc = AM_Request3(e, 0, kPing + 3, a0, arg(a0, 1), arg(a0, 2)); break;
    default: rc = AM_Request4(e, 0, kPing + 4, a0, arg(a0, 1), arg(a0, 2), arg(a0, 3)); break;
  }
  check(rc, "AM_Request");
  ++g.sent;
  g.watchdog.tick();
}

// A control request on the main endpoint, waited for.
void control(handler_t h, int a = 0, int b = 0) {
  const int was = g.cur;
  g.cur = 0;
  if (h == kQuit || h == kMakeDepths) check(AM_Request0(g.ep[0], 0, h), "AM_Request0 (control)");
  else if (h == kSelect) check(AM_Request1(g.ep[0], 0, h, a), "AM_Request1 (select)");
  else check(AM_Request2(g.ep[0], 0, h, a, b), "AM_Request2 (check)");
  ++g.sent;
  drain("control reply");
  g.cur = h == kSelect ? a : was;
}

// One-way latencies (RTT/2, us) of ping-pongs with n arguments.
std::vector<double> rtt_half(int n, int warmup, int iters) {
  std::vector<double> v;
  for (int i = 0; i < warmup + iters; ++i) {
    auto t0 = Clock::now();
    request(n, int32_t(g.sent));
    drain();
    if (i >= warmup) v.push_back(us_between(t0, Clock::now()) / 2);
  }
  return v;
}

logp::Params logp_of(int n, const Counts& c, Stats& or_batch) {
  logp::Params p;
  const std::string req = "AM_Request" + std::to_string(n);
  set_phase(req + " RTT");
  p.rtt_half = summarize(rtt_half(n, c.warmup, c.rtt_iters));
  set_phase(req + " o_s");
  std::vector<double> os, orr, batch, gap;
  for (int s = 0; s < c.samples; ++s) {  // o_s: a burst of M requests
    drain();
    auto t0 = Clock::now();
    for (int m = 0; m < c.burst; ++m) request(n, int32_t(g.sent));
    os.push_back(us_between(t0, Clock::now()) / c.burst);
  }
  drain();
  set_phase(req + " o_r");
  // o_r: the replies of M requests waiting (those the requests' own polls
  // have not run), one AM_Poll timed, divided by the replies it ran
  double delay = std::max(50.0, 4 * p.rtt_half.median);
  for (int s = 0, tries = 0; s < c.samples && tries < 4 * c.samples; ++tries) {
    drain();
    for (int m = 0; m < c.burst; ++m) request(n, int32_t(g.sent));
    logp::sleep_us(delay);
    const uint64_t waiting = g.sent - g.replies;
    auto t0 = Clock::now();
    poll_cur();
    double us = us_between(t0, Clock::now());
    const uint64_t ran = waiting - (g.sent - g.replies);
    if (ran > 0 && ran == waiting) orr.push_back(us / double(ran)), batch.push_back(double(ran)), ++s;
    else if (ran < waiting) delay = std::min(2 * delay, 20000.0);
  }
  drain();
  if (orr.empty()) die("o_r: the replies were never all waiting");
  set_phase(req + " g");
  for (int b = 0; b < c.g_bursts; ++b) {  // g: a long burst
    auto t0 = Clock::now();
    for (int m = 0; m < c.g_len; ++m) request(n, int32_t(g.sent));
    drain();
    gap.push_back(us_between(t0, Clock::now()) / c.g_len);
  }
  p.os = summarize(os);
  p.orr = summarize(orr);
  p.g = summarize(gap);
  p.derive_L();
  or_batch = summarize(batch);
  return p;
}

Stats poll_empty(int samples) {
  drain();
  std::vector<double> v;
  for (int s = 0; s < samples; ++s) {
    auto t0 = Clock::now();
    poll_cur();
    v.push_back(us_between(t0, Clock::now()));
  }
  return summarize(v);
}

struct DepthRow {
  int depth;
  Stats oneway_us, msgs_per_s;
  CpuMeter cpu;  // over the rate bursts
  double msgs = 0;
};

DepthRow depth_row(int k, const Counts& c, int nargs) {
  control(kSelect, k);
  set_phase("depth " + std::to_string(g.depth[k]));
  DepthRow r{g.depth[k], summarize(rtt_half(nargs, c.warmup / 2, c.rtt_iters / 2)), {}, meter()};
  std::vector<double> rate;
  r.cpu.start();
  r.msgs = double(c.g_bursts) * c.g_len;
  for (int b = 0; b < c.g_bursts; ++b) {
    auto t0 = Clock::now();
    for (int m = 0; m < c.g_len; ++m) request(nargs, int32_t(g.sent));
    drain();
    rate.push_back(c.g_len / seconds_since(t0));
  }
  r.cpu.stop();
  r.msgs_per_s = summarize(rate);
  control(kSelect, 0);
  return r;
}

struct BwRow {
  uint32_t size;
  Stats bytes_per_s;
  uint64_t per_burst;
  bool verified;
  CpuMeter cpu;  // over the measured bursts
};

// Bursts of one kind of transfer (medium or long) of `size` bytes.
BwRow bandwidth(bool medium, uint32_t size, int bursts, uint64_t burst_bytes) {
  auto send = [&](const std::vector<uint8_t>& src, int seed) {
    void* p = const_cast<uint8_t*>(src.data());
    check(medium ? AM_RequestI1(g.ep[0], 0, kMedium, p, int(size), seed)
                 : AM_RequestXfer1(g.ep[0], 0, 0, kLong, p, int(size), seed),
          medium ? "AM_RequestI1" : "AM_RequestXfer1");
    ++g.sent;
  };
  set_phase(std::string(medium ? "medium " : "bulk ") + size_name(size));
  BwRow r{size, {}, std::max<uint64_t>(medium ? 64 : 8, burst_bytes / size), false, meter()};
  std::vector<double> bps;
  for (int b = -1; b < bursts; ++b) {  // one warm-up burst
    if (b == 0) r.cpu.start();
    auto t0 = Clock::now();
    for (uint64_t m = 0; m < r.per_burst; ++m) send(g.src_a, 1);
    drain();
    if (b >= 0) bps.push_back(double(r.per_burst * size) / seconds_since(t0));
  }
  r.cpu.stop();
  r.bytes_per_s = summarize(bps);
  if (!medium) send(g.src_b, 2), drain();  // the last transfer, another pattern
  control(kCheck, medium ? 0 : int(size), 2);
  r.verified = g.checked_ok == 1 && g.checked_bad_mediums == 0;
  return r;
}

void usage() {
  std::fprintf(stderr,
               "usage: am_logp pong --rendezvous DIR [--idle-timeout S] [--poll-yield N] [--poll-sleep-us US]\n"
               "       am_logp ping --rendezvous DIR [--json FILE] [--quick] [--args 0,1,2,3,4]\n"
               "              [--sections rtt,logp,depth,medium,bulk] [--medium-sizes LIST] [--bulk-sizes LIST]\n"
               "              [--bursts N (medium, bulk: bursts a row; 7, quick 3)]\n"
               "              [--depths 1,2,4,8,16] [--depth-args N]\n"
               "              [--iters N] [--samples N] [--burst M] [--g-len N] [--poll-yield N]\n"
               "              [--poll-sleep-us US] [--no-floors]\n"
               "The transport: $ULNIC_AM_TRANSPORT (udp, vipl, native); a NIC's node: $ULNIC_NODE.\n");
  std::exit(2);
}

std::vector<int> int_list(const std::string& s) {
  std::vector<int> v;
  std::stringstream ss(s);
  for (std::string x; std::getline(ss, x, ',');)
    if (!x.empty()) v.push_back(std::clamp(std::atoi(x.c_str()), 0, 4));
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) usage();
  const std::string mode = argv[1];
  if (mode != "ping" && mode != "pong") usage();
  program = "am_logp " + mode;
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  Counts c;
  std::string dir, json, sections = "rtt,logp,depth,medium,bulk", medium_sizes = "64,256,1K,4K",
                         bulk_sizes = "4K,16K,64K,256K,1M";
  std::vector<int> nargs = {0, 1, 2, 3, 4};
  std::string depths = "1,2,4,8,16";
  int depth_args = 0;
  int bw_bursts = 0;  // 0: 7 (3 with --quick)
  bool floors = true;
  const bool quick = logp::has_flag(argc, argv, 2, "--quick");
  if (quick) c.quick(), medium_sizes = "256,4K", bulk_sizes = "4K,64K,1M";
  double idle_s = 600;
  for (int i = 2; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&] { return next_arg(argc, argv, i, usage); };
    if (logp::common_option(argc, argv, i, usage, g.backoff, c)) continue;
    if (a == "--rendezvous") dir = next();
    else if (a == "--json") json = next();
    else if (a == "--quick") continue;  // (read above)
    else if (a == "--args") nargs = int_list(next());
    else if (a == "--sections") sections = next();
    else if (a == "--medium-sizes") medium_sizes = next();
    else if (a == "--bulk-sizes") bulk_sizes = next();
    else if (a == "--depths") depths = next();
    else if (a == "--depth-args") depth_args = std::clamp(std::atoi(next().c_str()), 0, 4);
    else if (a == "--bursts") bw_bursts = std::max(1, std::atoi(next().c_str()));
    else if (a == "--no-floors") floors = false;
    else if (a == "--idle-timeout") idle_s = std::atof(next().c_str());
    else usage();
  }
  if (dir.empty()) usage();
  auto has = [&](const char* s) {
    return ("," + sections + ",").find(std::string(",") + s + ",") != std::string::npos;
  };

  g.dir = dir;
  if (mode == "pong") {
    g.exchange_s = idle_s;
    init(1);
    return pong(idle_s);
  }

  Machine m = machine_facts();
  print_machine(m);
  HostFloors fl;
  std::vector<uint32_t> msizes = parse_sizes(has("medium") ? medium_sizes : "none"),
                        bsizes = parse_sizes(has("bulk") ? bulk_sizes : "none");
  for (uint32_t s : msizes)
    if (s > AMUDP_MAX_MEDIUM) die("medium sizes go up to " + std::to_string(AMUDP_MAX_MEDIUM));
  for (uint32_t s : bsizes)
    if (s > kSegBytes) die("bulk sizes go up to " + size_name(kSegBytes));
  // The floors first, while the pong side waits for our names (asleep).
  if (floors) fl = host_floors("floors (host only, this run)", msizes, bsizes, quick ? 5000 : 20000, quick ? 3 : 7);

  init(0);
  g.watchdog.start(g.backoff.limit_s + 15);
  g.src_a.resize(kSegBytes);
  g.src_b.resize(kSegBytes);
  for (size_t i = 0; i < kSegBytes; ++i) g.src_a[i] = pattern(1, i), g.src_b[i] = pattern(2, i);
  const char* transport = AMX_TransportName();
  std::printf("transport %s; main endpoint depth %d; o_s/o_r bursts of %d; g bursts of %d\n", transport,
              g.depth[0], c.burst, c.g_len);
  if (c.burst > g.depth[0]) die("--burst is more than the main endpoint's depth");

  Json j;
  j.begin_object().str("benchmark", "am_logp").str("transport", transport);
  j.begin_object("params");
  logp::counts_json(j, g.backoff, c);
  j.boolean("quick", quick).str("sections", sections).num("main_depth", g.depth[0]).end_object();
  machine_json(j, m, "clock_ns");
  if (floors) {
    j.begin_object("floors");
    pingpong_json(j, fl.pp);
    memcpy_json(j, fl.mc, false, true);
    j.end_object();
  }

  j.begin_array("short");
  for (int n : nargs) {
    j.begin_object().num("args", n);
    if (has("logp")) {
      Stats batch;
      logp::Params p = logp_of(n, c, batch);
      logp::print_head(("AM_Request" + std::to_string(n) + " with its reply: LogP").c_str());
      logp::print_params(p);
      logp::print_row("  (replies per o_r poll)", batch, "%12.0f");
      logp::params_json(j, p).stats("or_replies_per_poll", batch);
    } else if (has("rtt")) {
      set_phase("AM_Request" + std::to_string(n) + " RTT");
      Stats r = summarize(rtt_half(n, c.warmup, c.rtt_iters));
      logp::print_head(("AM_Request" + std::to_string(n) + " ping-pong").c_str());
      logp::print_row("  RTT/2, us", r);
      j.stats("rtt_half_us", r);
    }
    j.end_object();
  }
  j.end_array();
  if (has("logp")) {
    Stats e = poll_empty(c.samples * 10);
    logp::print_row("AM_Poll, nothing there", e);
    j.stats("poll_empty_us", e);
  }

  bool verified = g.bad_args == 0;
  for (bool medium : {true, false}) {
    const auto& sizes = medium ? msizes : bsizes;
    if (sizes.empty()) continue;
    logp::print_head(medium ? "AM_RequestI bandwidth, MB/s (1e6 B/s per burst)"
                            : "AM_RequestXfer into the segment, MB/s (1e6 B/s per burst)");
    j.begin_array(medium ? "medium" : "bulk");
    for (uint32_t s : sizes) {
      const int bursts = bw_bursts ? bw_bursts : quick ? 3 : 7;
      BwRow r = bandwidth(medium, s, bursts, uint64_t(quick ? 2 : 8) << (medium ? 18 : 20));
      verified = verified && r.verified;
      logp::print_row("  " + size_name(s) + (r.verified ? "" : " NOT VERIFIED"), scaled(r.bytes_per_s, 1e-6),
                      "%12.1f");
      std::printf("           %s\n", r.cpu.shares_line(m.nproc).c_str());
      j.begin_object().num("size", s).num("per_burst", double(r.per_burst)).stats("bytes_per_s", r.bytes_per_s);
      r.cpu.shares_json(j);
      j.boolean("verified", r.verified).end_object();
    }
    j.end_array();
  }
  // Last: the depth endpoints are made now (idle endpoints may cost a
  // transport something: a listener each over VIPL).
  if (has("depth")) {
    set_phase("making the depth endpoints");
    control(kMakeDepths);
    make_endpoints(0, 1, kEndpoints, "depths");
    logp::print_head(("AM_Request" + std::to_string(depth_args) +
                      " against the network depth (one endpoint per depth)").c_str());
    j.begin_array("depth");
    for (int k = 1; k < kEndpoints; ++k) {
      if (("," + depths + ",").find("," + std::to_string(kDepths[k]) + ",") == std::string::npos) continue;
      if (!g.depth[k]) {
        std::printf("  depth %d: left out (the transport has no such endpoint or depth: AM_ERR_RESOURCE)\n",
                    kDepths[k]);
        continue;
      }
      DepthRow r = depth_row(k, c, depth_args);
      logp::print_row("  depth " + std::to_string(r.depth) + ": RTT/2, us", r.oneway_us);
      logp::print_row("           msgs/s", r.msgs_per_s, "%12.0f");
      std::printf("           %s\n", r.cpu.line(r.msgs, m.nproc).c_str());
      j.begin_object().num("depth", r.depth).num("args", depth_args).stats("oneway_us", r.oneway_us);
      j.stats("msgs_per_s", r.msgs_per_s);
      r.cpu.json(j, r.msgs);
      j.end_object();
    }
    j.end_array();
  }

  control(kQuit);
  check(AM_Terminate(), "AM_Terminate");
  if (g.bad_args) std::printf("%" PRIu64 " replies had wrong arguments\n", g.bad_args);
  std::printf("data verified (reply arguments, medium payloads, last bulk transfers): %s\n", verified ? "yes" : "NO");
  j.num("requests", double(g.sent)).num("bad_reply_args", double(g.bad_args)).boolean("verified", verified);
  j.end_object();
  if (!json.empty()) write_json(j, json);
  return verified ? 0 : 1;
}
