// vmmc_bench: the figures of Princeton's VMMC papers (latency, bandwidth,
// send overhead, the short/long crossover) on ulnic's VMMC, beside floors
// measured in the same run.
//
//   vmmc_bench serve --peer N [--bulk BYTES] [--idle-timeout S]
//       (on the receiving node) exports "vmmcb.<node>" (control area, ping
//       areas, a bulk area of BYTES, default 8 MiB + 4 KiB), imports the
//       client's export and obeys the commands the client sends it through
//       VMMC itself (a notifying send into the control area; one notifying
//       reply each). Echoes every notifying send into its ping area from the
//       notification handler. Exits on the client's "quit" (or after
//       --idle-timeout seconds without a command, default 900).
//   vmmc_bench client --peer N [--out DIR | --json FILE] [--quick]
//       [--lat-sizes LIST] [--iters N] [--warmup N] [--lat-seconds S]
//       [--bw-sizes LIST] [--inflight K] [--win-ms MS] [--windows N]
//       [--measure-ms MS] [--ovh-sizes LIST] [--ovh-samples N]
//       [--poll-yield N] [--poll-sleep-us US]
//       [--no-floors] [--no-counters] [--skip SECTIONS]
//       (on the sending node) measures, in one run:
//   0. floors (host only): a two-process shared-memory ping-pong and memcpy
//      bandwidth per size (bench_common.h), and the NIC's own node-local copy
//      bandwidth per size: kOpCopy through a second ulnic::Nic on this node
//      (its own slot), --inflight copies in flight, reaped with Nic::wait;
//   1. one-way latency = RTT/2 of a ping-pong, per size:
//        notify: vmmc_send_async(VMMC_NOTIFY) into the server's ping area;
//                the server's notification handler answers with a notifying
//                send of the same bytes; the client's vmmc_wait runs its
//                handler (the ping's completion is reaped after the pong);
//        poll:   VMMC's deliberate-update ping-pong: no notifications; the
//                last word of each message is a sequence number and each
//                side polls the last word of the message in its own buffer:
//                --poll-yield looks (default 50) back to back, then one look
//                per nanosleep(--poll-sleep-us, default 20; 0: sched_yield
//                instead). On 2 cores two hosts that spin (even yielding)
//                starve the NICs' vCPU threads: spin+yield ran ~300 us
//                one-way here, napping polls ~50 us;
//   2. bandwidth per size, --inflight vmmc_send_async in flight (fewer above
//      4 MiB: at most 32 MiB in flight), completion by vmmc_send_wait in
//      posting order: one-way (client -> server) and bidirectional (both at
//      once). Bytes are counted per window of time: completed bytes as a
//      function of time (linear between completions) read at the window
//      boundaries. One-way and the NIC copy floor: after a warm-up (>= one
//      window and K + 1 completions) windows of max(--win-ms, 4 x the time
//      between completions), about --measure-ms of them (3 .. --windows).
//      Bidirectional: both processes use the same boundaries from a start
//      time in the command (one machine, one CLOCK_MONOTONIC), windows of
//      max(--win-ms, 8 sends at the one-way rate), and the two directions
//      are summed per window. MB/s = 1e6 B/s. Each row is verified: one send
//      of a pattern into a zeroed area, checked by the receiver byte for
//      byte (and the bytes after it still zero); bidirectional rows check
//      the server -> client direction too;
//   3. send overhead per call: time inside vmmc_send (synchronous: returns
//      once the receiving NIC placed every byte) and inside vmmc_send_async
//      (posting only; bursts of --inflight, reaped outside the timing);
//   4. the short/long crossover: 128 B (inline in the send queue) against
//      129 B (fetched by the NIC from registered memory), interleaved in one
//      loop (a notification ping-pong and a vmmc_send per turn), beside the
//      same pairs taken from the sweeps of 1 and 3.
// LIST: comma-separated sizes with optional K/M suffix ("4,64,4K,1M") or
// "none"; SECTIONS: comma-separated of lat,poll,bw,bidir,ovh,cross,nic.
// Both processes find their node as every libulnic program does
// ($ULNIC_RUNTIME_DIR, $ULNIC_CLUSTER, $ULNIC_NODE). Prints min/median/max
// tables and writes JSON (DIR/vmmc_bench.json). A program, not a test;
// tests/bench/vmmc_bench.py starts a private cluster, runs it and plots.
#include <sched.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "bench_common.h"
#include "ulnic/nic.h"
#include "ulnic/vmmc.h"

namespace abi = ulnic::abi;

namespace {

using namespace bench;

// ------------------------------------------------------- the export layout

// Each side exports one buffer laid out alike:
constexpr uint64_t kCtrl = 0;                    // server: commands; client: replies
constexpr uint64_t kCtrlBytes = 4096;
constexpr uint64_t kLatMax = 64u << 10;          // largest ping-pong message
constexpr uint64_t kNote = kCtrlBytes;           // notification ping-pong
constexpr uint64_t kPoll = kNote + kLatMax;      // polling ping-pong
constexpr uint64_t kBulk = kPoll + kLatMax;      // bandwidth, verification, overhead
constexpr uint64_t kGuard = 64;                  // checked-zero bytes after a verified send
constexpr uint32_t kMaxWindows = 64;
constexpr uint32_t kMagic = 0x564d4342;          // "VMCB"
constexpr uint32_t kStop = 0x80000000u;          // poll ping-pong: the last message

enum Op : uint32_t { kOpHello = 1, kOpPoll, kOpPrep, kOpVerify, kOpBidir, kOpQuit };

// Client -> server, into the server's control area (inline: <= 128 bytes).
struct Cmd {
  uint32_t magic = 0, seq = 0, op = 0, size = 0;
  uint32_t inflight = 0, nwin = 0;  // kOpPoll: inflight = spins before backing off, nwin = nanosleep ns
  uint64_t arg = 0;    // kOpPoll: first sequence number; kOpVerify: pattern seed
  int64_t t0_ns = 0;   // kOpBidir: start, steady_clock nanoseconds (one machine, one clock)
  int64_t win_ns = 0;  // kOpBidir: window length
};
static_assert(sizeof(Cmd) <= VMMC_SHORT_MAX);

// Server -> client, into the client's control area.
struct Reply {
  uint32_t magic, seq, status, nbound;  // status 0 = ok
  uint64_t a, b;                        // per op (see the server)
  double bound[kMaxWindows + 1];        // kOpBidir: completed bytes at the window boundaries
};

uint8_t pattern(uint64_t seed, uint64_t i) { return uint8_t(((i * 2654435761u) >> 11) ^ (i >> 7) ^ seed); }

int64_t ns_of(Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}
Clock::time_point tp_of(int64_t ns) { return Clock::time_point(std::chrono::nanoseconds(ns)); }

// ------------------------------------------------------------ this process

struct Side {
  bool serving = false;
  vmmc_endpoint* ep = nullptr;
  uint32_t node = 0, peer_node = 0;
  uint8_t* inbox = nullptr;       // our export
  size_t inbox_len = 0;
  vmmc_proxy_t peer = 0;          // the peer's export
  size_t peer_len = 0;
  uint8_t* src = nullptr;         // bulk source: pattern(seed)
  size_t src_len = 0;
  uint64_t seed = 0;
  uint8_t* msg = nullptr;         // ping messages and replies (slot heap)
  // What the notification handler saw.
  uint64_t ctrl_notes = 0, pongs = 0, other_notes = 0, echoes = 0;
  std::deque<vmmc_send_id> pending;  // asynchronous sends not yet reaped
  uint64_t wait_io_as_timeout = 0;   // see wait_events
};
Side g;

void vcheck(int st, const char* what) {
  if (st != VMMC_OK) die(std::string(what) + ": " + vmmc_strerror(st));
}

// Reaps finished asynchronous sends from the front of `pending` (no waiting).
void reap_pending() {
  while (!g.pending.empty()) {
    int st = vmmc_send_done(g.ep, g.pending.front());
    if (st == VMMC_PENDING) return;
    vcheck(st, "asynchronous send");
    g.pending.pop_front();
  }
}

void drain_pending() {
  while (!g.pending.empty()) {
    vcheck(vmmc_send_wait(g.ep, g.pending.front()), "asynchronous send");
    g.pending.pop_front();
  }
}

// Runs inside vmmc_poll / vmmc_wait.
void on_note(void*, void*, size_t offset, size_t length, uint32_t) {
  if (offset == kCtrl) {
    ++g.ctrl_notes;
  } else if (offset >= kNote && offset < kPoll) {
    if (g.serving) {
      // The notification ping-pong: the handler answers at once.
      vmmc_send_id id = 0;
      vcheck(vmmc_send_async(g.ep, g.inbox + offset, g.peer + offset, length, VMMC_NOTIFY, &id), "echo");
      g.pending.push_back(id);
      ++g.echoes;
    } else {
      ++g.pongs;
    }
  } else {
    ++g.other_notes;
  }
}

// vmmc_wait, except that a wait that ends in -VMMC_ERR_IO at (within 2 ms
// of) its timeout counts as -VMMC_ERR_TIMEOUT: Endpoint::wait truncates the
// time left to whole milliseconds, Nic::wait_ready then gives up before the
// deadline and vmmc_wait reports that as an I/O error (a library bug).
int wait_events(int timeout_ms) {
  auto start = Clock::now();
  int r = vmmc_wait(g.ep, timeout_ms);
  if (r == -VMMC_ERR_IO && timeout_ms >= 0 && seconds_since(start) * 1000 >= timeout_ms - 2) {
    ++g.wait_io_as_timeout;
    return -VMMC_ERR_TIMEOUT;
  }
  return r;
}

uint32_t load32(const uint8_t* p) { return __atomic_load_n(reinterpret_cast<const uint32_t*>(p), __ATOMIC_ACQUIRE); }

void open_endpoint(uint64_t bulk) {
  vcheck(vmmc_open(nullptr, -1, &g.ep), "vmmc_open");
  g.node = uint32_t(vmmc_node(g.ep));
  g.inbox_len = kBulk + bulk;
  g.inbox = static_cast<uint8_t*>(vmmc_alloc(g.ep, g.inbox_len));
  if (!g.inbox) die("slot heap too small for a " + size_name(g.inbox_len) + " export (cluster up --slot-size 64)");
  std::memset(g.inbox, 0, g.inbox_len);
  g.src_len = bulk;
  g.src = static_cast<uint8_t*>(vmmc_alloc(g.ep, g.src_len));
  g.msg = static_cast<uint8_t*>(vmmc_alloc(g.ep, kLatMax + sizeof(Reply) + 4096));
  if (!g.src || !g.msg) die("slot heap too small for a " + size_name(g.src_len) + " source");
  g.seed = 0x40 + g.node;
  for (size_t i = 0; i < g.src_len; ++i) g.src[i] = pattern(g.seed, i);
  std::memset(g.msg, 0, kLatMax + sizeof(Reply) + 4096);
  std::string mine = "vmmcb." + std::to_string(g.node), theirs = "vmmcb." + std::to_string(g.peer_node);
  vcheck(vmmc_export(g.ep, mine.c_str(), g.inbox, g.inbox_len, nullptr, 0, on_note, nullptr), "export");
  vcheck(vmmc_import(g.ep, int(g.peer_node), theirs.c_str(), 60000, &g.peer, &g.peer_len),
         ("import " + theirs + " from node " + std::to_string(g.peer_node)).c_str());
  if (g.peer_len < kBulk + 4096) die("the peer's export is too small");
  // Warm the user-managed TLB with the whole source first (later sends of
  // any size hit this registration) and check the path end to end.
  vcheck(vmmc_send(g.ep, g.src, g.peer + kBulk, std::min(g.src_len, g.peer_len - kBulk), 0), "warm-up send");
}

// ------------------------------------------------ bandwidth: windows of time

// Completed bytes as a function of time, linear between completions, read at
// the window boundaries t0 + win * (k + 1), k = 0 .. nwin.
struct Meter {
  Clock::time_point t0;
  double win = 0;
  uint32_t nwin = 0;
  std::vector<double> bound;
  Clock::time_point t_prev;
  double b_prev = 0;

  Meter(Clock::time_point start, double win_s, uint32_t n, Clock::time_point prev, double prev_bytes)
      : t0(start), win(win_s), nwin(n), t_prev(prev), b_prev(prev_bytes) {}
  Clock::time_point boundary(uint32_t k) const {
    return t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(win * (k + 1)));
  }
  Clock::time_point end() const { return boundary(nwin); }
  void add(Clock::time_point t, double bytes) {
    while (bound.size() <= nwin && boundary(uint32_t(bound.size())) <= t) {
      Clock::time_point b = boundary(uint32_t(bound.size()));
      double span = std::chrono::duration<double>(t - t_prev).count();
      double frac = span > 0 ? std::chrono::duration<double>(b - t_prev).count() / span : 1;
      bound.push_back(b_prev + (bytes - b_prev) * std::clamp(frac, 0.0, 1.0));
    }
    t_prev = t;
    b_prev = bytes;
  }
};

// How a stream cuts time into windows.
struct Windows {
  double win = 0.1;        // seconds; adaptive: the shortest window
  uint32_t nwin = 8;       // adaptive: the most windows
  double measure_s = 0.8;  // adaptive: aim for about this much measured time
  bool fixed = false;      // fixed: boundaries at start + win * (k + 1), k = 0 .. nwin
};

struct StreamResult {
  std::vector<double> bound;  // completed bytes at the window boundaries
  double win = 0;             // the window used
  uint64_t posted = 0, done = 0, failed = 0;
  int first_status = 0;
  double warm_s = 0;          // start -> first boundary
  double drain_s = 0;         // last boundary -> last completion
};

// `inflight` operations of `size` bytes kept in flight from `start` until the
// last window boundary, then drained. post() posts one; reap() waits for the
// oldest and returns its status (0 = ok).
// Adaptive windows: warm-up lasts at least w.win and K + 1 completions; the
// window is then max(w.win, 4 x the mean time between completions so far) and
// there are measure_s / window of them (3 .. w.nwin), so a window always
// spans several completions. Fixed windows: as given (both sides of a
// bidirectional run use the same boundaries).
StreamResult stream(uint32_t size, uint32_t inflight, Clock::time_point start, const Windows& w,
                    const std::function<void()>& post, const std::function<int()>& reap) {
  std::this_thread::sleep_until(start);
  StreamResult r;
  for (uint32_t i = 0; i < inflight; ++i, ++r.posted) post();
  double bytes = 0;
  auto take = [&] {
    int st = reap();
    ++r.done;
    if (st != 0) {
      if (!r.failed++) r.first_status = st;
    } else {
      bytes += size;
    }
  };
  std::unique_ptr<Meter> m;
  if (w.fixed) {
    m = std::make_unique<Meter>(start, w.win, w.nwin, start, 0.0);
  } else {
    Clock::time_point first{}, now{};
    uint64_t done_first = 0;
    for (;;) {
      take();
      now = Clock::now();
      if (r.done == 1) first = now, done_first = 1;
      if (r.done > inflight && std::chrono::duration<double>(now - start).count() >= w.win) break;
      post();
      ++r.posted;
    }
    double per_op = std::chrono::duration<double>(now - first).count() / double(r.done - done_first);
    double win = std::max(w.win, 4 * per_op);
    uint32_t nwin = std::clamp<uint32_t>(uint32_t(w.measure_s / win), 3, std::max<uint32_t>(3, w.nwin));
    // Boundary 0 is now (a completion): t0 = now - win.
    m = std::make_unique<Meter>(now - std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(win)),
                                win, nwin, now, bytes);
    m->add(now, bytes);
    post();
    ++r.posted;
  }
  bool posting = true;
  while (r.done < r.posted) {
    take();
    auto now = Clock::now();
    m->add(now, bytes);
    if (posting && now >= m->end()) posting = false;
    if (posting) {
      post();
      ++r.posted;
    }
    if (!posting && r.done == r.posted) r.drain_s = std::chrono::duration<double>(now - m->end()).count();
  }
  while (m->bound.size() <= m->nwin) m->bound.push_back(bytes);  // (cannot happen: operations outlive the end)
  r.bound = m->bound;
  r.win = m->win;
  r.warm_s = std::chrono::duration<double>(m->boundary(0) - start).count();
  return r;
}

// Per-window rates (bytes/s) from boundary values.
std::vector<double> window_rates(const std::vector<double>& bound, double win) {
  std::vector<double> v;
  for (size_t k = 0; k + 1 < bound.size(); ++k) v.push_back((bound[k + 1] - bound[k]) / win);
  return v;
}

uint32_t inflight_for(uint32_t size, uint32_t inflight) {
  return std::clamp<uint32_t>(uint32_t((32ull << 20) / size), 2, inflight);
}

StreamResult vmmc_stream(uint32_t size, uint32_t inflight, Clock::time_point start, const Windows& w) {
  std::deque<vmmc_send_id> ids;
  const uint8_t* src = size <= VMMC_SHORT_MAX ? g.msg : g.src;
  if (src == g.msg) std::memcpy(g.msg, g.src, size);
  auto post = [&] {
    vmmc_send_id id = 0;
    vcheck(vmmc_send_async(g.ep, src, g.peer + kBulk, size, 0, &id), "vmmc_send_async");
    ids.push_back(id);
  };
  auto reap = [&] {
    int st = vmmc_send_wait(g.ep, ids.front());
    ids.pop_front();
    return st;
  };
  return stream(size, inflight, start, w, post, reap);
}

// ---------------------------------------------------------------- the server

void reply(const Cmd& c, uint32_t status, uint64_t a = 0, uint64_t b = 0, const std::vector<double>& bound = {}) {
  auto* r = reinterpret_cast<Reply*>(g.msg + kLatMax);
  std::memset(r, 0, sizeof *r);
  r->magic = kMagic;
  r->seq = c.seq;
  r->status = status;
  r->a = a;
  r->b = b;
  r->nbound = uint32_t(std::min<size_t>(bound.size(), kMaxWindows + 1));
  for (uint32_t k = 0; k < r->nbound; ++k) r->bound[k] = bound[k];
  size_t n = offsetof(Reply, bound) + sizeof(double) * r->nbound;
  vcheck(vmmc_send(g.ep, r, g.peer + kCtrl, n, VMMC_NOTIFY), "reply");
}

// Checks [kBulk, kBulk + size) == pattern(seed) and the guard bytes after it
// still zero. Returns the number of bad bytes; `first` the first bad offset.
uint64_t verify_bulk(uint32_t size, uint64_t seed, uint64_t& first) {
  uint64_t bad = 0;
  first = ~0ull;
  const uint8_t* p = g.inbox + kBulk;
  for (uint64_t i = 0; i < size; ++i)
    if (p[i] != pattern(seed, i) && !bad++) first = i;
  for (uint64_t i = size; i < size + kGuard && kBulk + i < g.inbox_len; ++i)
    if (p[i] != 0 && !bad++) first = i;
  return bad;
}

void zero_bulk(uint32_t size) {
  std::memset(g.inbox + kBulk, 0, std::min<uint64_t>(uint64_t(size) + kGuard, g.inbox_len - kBulk));
}

int serve(uint32_t peer, uint64_t bulk, double idle_timeout) {
  g.serving = true;
  bench::program = "vmmc_bench serve";
  g.peer_node = peer;
  open_endpoint(bulk);
  std::printf("vmmc_bench serve: node %d, export vmmcb.%u (%s), imported vmmcb.%u from node %u\n", vmmc_node(g.ep),
              g.node, size_name(g.inbox_len).c_str(), peer, peer);
  std::fflush(stdout);
  const auto* cmd = reinterpret_cast<const Cmd*>(g.inbox + kCtrl);
  uint64_t consumed = 0;
  for (;;) {
    auto idle_since = Clock::now();
    while (g.ctrl_notes == consumed) {
      int r = wait_events(500);
      reap_pending();
      if (r == -VMMC_ERR_TIMEOUT && seconds_since(idle_since) > idle_timeout) die("no command for too long");
      if (r < 0 && r != -VMMC_ERR_TIMEOUT) die(std::string("vmmc_wait: ") + vmmc_strerror(r));
    }
    ++consumed;
    Cmd c;
    std::memcpy(&c, cmd, sizeof c);
    if (c.magic != kMagic) die("bad command in the control area");
    drain_pending();
    switch (c.op) {
      case kOpHello:
        reply(c, 0, uint64_t(::getpid()), g.inbox_len);
        break;
      case kOpPoll: {
        // Deliberate-update ping-pong: poll the last word of the message.
        if (c.nwin) ::prctl(PR_SET_TIMERSLACK, 1ul);  // nanosleep back-off: as short as the kernel can
        const uint8_t* flag = g.inbox + kPoll + c.size - 4;
        uint32_t expected = uint32_t(c.arg);
        uint64_t answered = 0, status = 0;
        for (;;) {
          if (!spin_until([&] { return (load32(flag) & ~kStop) == expected; }, c.inflight, c.nwin, 10)) {
            status = 1;  // the client went quiet
            break;
          }
          if (load32(flag) & kStop) break;
          vmmc_send_id id = 0;
          vcheck(vmmc_send_async(g.ep, g.inbox + kPoll, g.peer + kPoll, c.size, 0, &id), "poll pong");
          g.pending.push_back(id);
          reap_pending();
          ++answered;
          ++expected;
        }
        drain_pending();
        reply(c, uint32_t(status), answered);
        break;
      }
      case kOpPrep:
        zero_bulk(c.size);
        reply(c, 0);
        break;
      case kOpVerify: {
        uint64_t first = 0, bad = verify_bulk(c.size, c.arg, first);
        reply(c, bad ? 1 : 0, bad, first);
        break;
      }
      case kOpBidir: {
        zero_bulk(c.size);
        Windows w;
        w.fixed = true;
        w.win = double(c.win_ns) * 1e-9;
        w.nwin = c.nwin;
        StreamResult s = vmmc_stream(c.size, c.inflight, tp_of(c.t0_ns), w);
        reply(c, s.failed ? 2 : 0, s.done, s.failed, s.bound);
        break;
      }
      case kOpQuit:
        reply(c, 0, g.wait_io_as_timeout);
        std::printf("vmmc_bench serve: done (%" PRIu64 " notified echoes)\n", g.echoes);
        vmmc_close(g.ep);
        return 0;
      default:
        die("unknown command " + std::to_string(c.op));
    }
  }
}

// ---------------------------------------------------------------- the client

uint32_t g_cmd_seq = 0;

uint32_t post_cmd(Cmd c) {
  c.magic = kMagic;
  c.seq = ++g_cmd_seq;
  vcheck(vmmc_send(g.ep, &c, g.peer + kCtrl, sizeof c, VMMC_NOTIFY), "command");
  return c.seq;
}

Reply await_reply(uint32_t seq, double limit_s = 120) {
  const auto* r = reinterpret_cast<const Reply*>(g.inbox + kCtrl);
  auto start = Clock::now();
  for (;;) {
    // One reply (one notification) per command, in order: once the seq-th
    // notification ran, every byte of reply `seq` is in place.
    if (g.ctrl_notes >= seq && load32(reinterpret_cast<const uint8_t*>(&r->seq)) == seq) {
      Reply out;
      std::memcpy(&out, r, sizeof out);
      if (out.magic != kMagic) die("bad reply in the control area");
      return out;
    }
    int w = wait_events(500);
    if (w < 0 && w != -VMMC_ERR_TIMEOUT) die(std::string("vmmc_wait: ") + vmmc_strerror(w));
    if (seconds_since(start) > limit_s) die("the server did not answer command " + std::to_string(seq));
  }
}

Reply call(Cmd c, double limit_s = 120) { return await_reply(post_cmd(c), limit_s); }

// ---- NIC firmware counters (`ulnic node status --json`, both nodes at once)

const char* const kCounterKeys[] = {"link_tx_data", "link_retransmits", "link_duplicates", "link_out_of_order",
                                    "vmmc_sends", "vmmc_notifications", "events_dropped", "wfi", "ext_wakeups",
                                    "timer_wakeups", "slot_wakeups", "host_rings", "copy_bytes"};

struct Probe {
  bool enabled = true;
  int qemu_pid[2] = {0, 0};

  // Both nodes' status at once (each call waits up to a heartbeat period).
  std::pair<std::string, std::string> status() const {
    FILE* a = start_node_status(g.node);
    FILE* b = start_node_status(g.peer_node);
    std::string ta = finish_node_status(a), tb = finish_node_status(b);
    return {ta, tb};
  }
  CounterPair snap() const {
    CounterPair c;
    if (!enabled) return c;
    auto [a, b] = status();
    c.self = only(parse_counters(a), kCounterKeys);
    c.peer = only(parse_counters(b), kCounterKeys);
    return c;
  }
  // Rows run back to back: the snapshot that ends a row starts the next
  // (each snapshot costs up to a heartbeat period).
  CounterPair last;
  bool have_last = false;
  void mark() {
    if (!have_last) last = snap(), have_last = true;
  }
  CounterPair since_mark() {
    CounterPair now = snap();
    CounterPair d = CounterPair::delta(last, now);
    last = now;
    return d;
  }
};

uint64_t ctr(const std::map<std::string, uint64_t>& m, const char* k) { return m.count(k) ? m.at(k) : 0; }
std::string retx_cell(const CounterPair& c) {
  if (!c.self.count("link_retransmits")) return "-";
  return std::to_string(ctr(c.self, "link_retransmits") + ctr(c.peer, "link_retransmits"));
}

// ---- results

Stats stats_of_bound(const std::vector<double>& bound, double win) { return summarize(window_rates(bound, win)); }

double overall_of(const std::vector<double>& bound, double win) {
  return bound.size() > 1 ? (bound.back() - bound.front()) / (win * double(bound.size() - 1)) : 0;
}

struct Lat {
  std::string mode;  // "notify" or "poll"
  uint32_t size = 0;
  Stats oneway_us, rtt_us;
  uint64_t bad = 0;  // pongs whose bytes differed from the ping
  double ratio = 0;  // median one-way / floor one-way median
  CounterPair counters;
};

struct Bw {
  std::string mode;  // "oneway", "bidir", "nic_copy"
  uint32_t size = 0, inflight = 0;
  Stats bps;                 // per window (bidir: both directions together)
  double overall_bps = 0;    // over all measured windows
  Stats fwd_bps, rev_bps;    // bidir: client -> server, server -> client
  uint64_t ops = 0, failed = 0;
  double drain_s = 0, warm_s = 0;
  double cross_core_gbps = 0;  // the machine's cross-core copy rate, just before the row
  double win_s = 0;          // the window used
  uint32_t nwin = 0;
  bool verified = true;
  std::string verify_note;
  CounterPair counters;
  CpuMeter cpu;  // over the stream (warm-up and drain included)

  // The figures of one stream with adaptive windows.
  void take(const StreamResult& sr) {
    bps = stats_of_bound(sr.bound, sr.win);
    overall_bps = overall_of(sr.bound, sr.win);
    win_s = sr.win;
    nwin = uint32_t(sr.bound.size() - 1);
    warm_s = sr.warm_s;
    ops = sr.done;
    failed = sr.failed;
    drain_s = sr.drain_s;
  }
};

struct Ovh {
  uint32_t size = 0;
  Stats sync_us, async_us;
};

void usage() {
  std::fprintf(stderr,
               "usage: vmmc_bench serve --peer N [--bulk BYTES] [--idle-timeout S]\n"
               "       vmmc_bench client --peer N [--out DIR | --json FILE] [--quick]\n"
               "              [--lat-sizes LIST] [--iters N] [--warmup N] [--lat-seconds S]\n"
               "              [--bw-sizes LIST] [--inflight K] [--win-ms MS] [--windows N] [--measure-ms MS]\n"
               "              [--ovh-sizes LIST] [--ovh-samples N] [--poll-yield N] [--poll-sleep-us US]\n"
               "              [--no-floors] [--no-counters] [--skip lat,poll,bw,bidir,ovh,cross,nic]\n"
               "LIST: sizes with optional K/M suffix, comma-separated (\"4,64,4K\"), or none.\n"
               "Both attach to $ULNIC_CLUSTER/$ULNIC_NODE ($ULNIC_RUNTIME_DIR); start a cluster first:\n"
               "  ulnic cluster up -n 2 -c CLUSTER --slot-size 64\n"
               "then: ULNIC_NODE=1 vmmc_bench serve --peer 0 &  ULNIC_NODE=0 vmmc_bench client --peer 1\n");
  std::exit(2);
}

int client(int argc, char** argv) {
  std::string json_path, out_dir;
  std::vector<uint32_t> lat_sizes = {4, 16, 64, 128, 129, 256, 1024, 4096, 8192};
  std::vector<uint32_t> bw_sizes = {4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1u << 20, 4u << 20, 8u << 20};
  std::vector<uint32_t> ovh_sizes = {4, 16, 64, 128, 129, 256, 1024, 4096, 8192, 65536, 1u << 20};
  int iters = 1000, warmup = 50, ovh_samples = 400;
  double lat_seconds = 3, win_ms = 100, measure_ms = 800;
  uint32_t inflight = 8, windows = 8, poll_yield = 50, poll_sleep_ns = 20000;
  bool floors = true, counters = true, quick = false;
  bool lat_sizes_set = false, bw_sizes_set = false, ovh_sizes_set = false;
  std::string skip;
  uint32_t peer = 1;
  bool have_peer = false;
  for (int i = 2; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&] { return next_arg(argc, argv, i, usage); };
    if (a == "--peer") peer = uint32_t(std::stoul(next())), have_peer = true;
    else if (a == "--json") json_path = next();
    else if (a == "--out") out_dir = next();
    else if (a == "--quick") quick = true;
    else if (a == "--lat-sizes") lat_sizes = parse_sizes(next()), lat_sizes_set = true;
    else if (a == "--bw-sizes") bw_sizes = parse_sizes(next()), bw_sizes_set = true;
    else if (a == "--ovh-sizes") ovh_sizes = parse_sizes(next()), ovh_sizes_set = true;
    else if (a == "--iters") iters = std::max(1, std::atoi(next().c_str()));
    else if (a == "--warmup") warmup = std::max(0, std::atoi(next().c_str()));
    else if (a == "--lat-seconds") lat_seconds = std::max(0.05, std::atof(next().c_str()));
    else if (a == "--inflight") inflight = uint32_t(std::clamp(std::atoi(next().c_str()), 1, 64));
    else if (a == "--win-ms") win_ms = std::clamp(std::atof(next().c_str()), 5.0, 5000.0);
    else if (a == "--measure-ms") measure_ms = std::clamp(std::atof(next().c_str()), 10.0, 60000.0);
    else if (a == "--windows") windows = uint32_t(std::clamp(std::atoi(next().c_str()), 1, int(kMaxWindows)));
    else if (a == "--ovh-samples") ovh_samples = std::max(1, std::atoi(next().c_str()));
    else if (a == "--poll-yield") poll_yield = uint32_t(std::max(0, std::atoi(next().c_str())));
    else if (a == "--poll-sleep-us") poll_sleep_ns = uint32_t(std::clamp(std::atof(next().c_str()), 0.0, 1000.0) * 1000);
    else if (a == "--no-floors") floors = false;
    else if (a == "--no-counters") counters = false;
    else if (a == "--skip") skip = "," + next() + ",";
    else usage();
  }
  if (!have_peer) usage();
  if (quick) {
    // A smoke run: a few seconds, every section, fewer sizes and samples.
    if (!lat_sizes_set) lat_sizes = {4, 128, 129, 4096};
    if (!bw_sizes_set) bw_sizes = {64, 4096, 65536, 1u << 20};
    if (!ovh_sizes_set) ovh_sizes = {4, 128, 129, 4096, 65536};
    iters = std::min(iters, 60);
    warmup = std::min(warmup, 10);
    ovh_samples = std::min(ovh_samples, 60);
    lat_seconds = std::min(lat_seconds, 0.5);
    win_ms = std::min(win_ms, 30.0);
    measure_ms = std::min(measure_ms, 120.0);
    windows = std::min<uint32_t>(windows, 4);
  }
  auto run = [&](const char* s) { return skip.find("," + std::string(s) + ",") == std::string::npos; };
  for (uint32_t s : lat_sizes)
    if (s < 4 || s > kLatMax) die("latency sizes must be 4 B .. 64 KiB");
  if (json_path.empty()) json_path = out_dir.empty() ? "vmmc_bench.json" : out_dir + "/vmmc_bench.json";
  if (!out_dir.empty()) std::filesystem::create_directories(out_dir);
  const double win = win_ms / 1000;
  Windows adaptive;
  adaptive.win = win;
  adaptive.nwin = windows;
  adaptive.measure_s = measure_ms / 1000;
  const auto run_start = Clock::now();
  std::setvbuf(stdout, nullptr, _IOLBF, 0);

  // ---- attach, export, import; the server answers hello
  uint64_t bw_max = 4096;
  for (uint32_t s : bw_sizes) bw_max = std::max<uint64_t>(bw_max, s);
  for (uint32_t s : ovh_sizes) bw_max = std::max<uint64_t>(bw_max, s);
  g.peer_node = peer;
  open_endpoint(bw_max + 4096);
  Reply hello = call(Cmd{.op = kOpHello});
  const int server_pid = int(hello.a);
  const uint64_t server_bulk = hello.b - kBulk;
  while (!bw_sizes.empty() && bw_sizes.back() + kGuard > server_bulk) {
    std::printf("note: dropping %s: the server's bulk area is %s (vmmc_bench serve --bulk)\n",
                size_name(bw_sizes.back()).c_str(), size_name(server_bulk).c_str());
    bw_sizes.pop_back();
  }
  while (!ovh_sizes.empty() && ovh_sizes.back() > server_bulk) ovh_sizes.pop_back();

  // The NIC's own copy limit: a second attachment (its own slot) on this node.
  std::unique_ptr<ulnic::Nic> cnic;
  uint8_t* csrc = nullptr;
  uint32_t ckey = 0;
  uint64_t cdist = 0;
  if (floors && run("nic")) {
    auto opened = ulnic::Nic::open();
    if (!opened) die("second attachment for the NIC copy floor: " + opened.error().message);
    cnic = std::move(*opened);
    cdist = bw_max + 4096 + 320;  // destination after the source, not a power-of-two distance
    const uint64_t len = cdist + bw_max + 4096;
    csrc = static_cast<uint8_t*>(cnic->alloc(len, 4096));
    if (!csrc) die("slot heap too small for the NIC copy floor (" + size_name(len) + ")");
    for (uint64_t i = 0; i < len; ++i) csrc[i] = uint8_t(i * 13 + 5);
    auto mr = cnic->register_memory(csrc, len, abi::kAccessLocal);
    if (!mr) die("register the NIC copy buffers: " + mr.error().message);
    ckey = mr->key;
  }

  Probe probe;
  probe.enabled = counters;
  {
    auto [a, b] = probe.status();  // the QEMUs' pids, for the CPU shares
    probe.qemu_pid[0] = status_pid(a);
    probe.qemu_pid[1] = status_pid(b);
  }
  // CPU use over the run (the machine has 2 cores; who had them?)
  const std::vector<int> cpu_pids = {server_pid, probe.qemu_pid[0], probe.qemu_pid[1]};
  const CpuSnap cpu0 = cpu_snap(cpu_pids);
  Machine m = machine_facts();
  std::printf("vmmc_bench: node %u -> node %u (server pid %d, export %s), %u in flight, windows >= %.0f ms,"
              " ~%.0f ms measured per row%s\n",
              g.node, peer, server_pid, size_name(hello.b).c_str(), inflight, win_ms, measure_ms,
              quick ? " (quick)" : "");
  print_machine(m);
  note_cpus(m, 4,
            " for two host processes and two NICs' vCPU threads: every figure sits beside a floor\n"
            "      from this run; the NIC copy floor and the VMMC figures see the same machine");

  // ---- 0. floors
  HostFloors host;
  const PingPong& pp = host.pp;
  std::map<uint64_t, MemcpyFloor>& mc = host.mc;
  std::map<uint32_t, Bw> ncopy;
  if (floors) {
    host = host_floors("0. floors, host only", lat_sizes, bw_sizes, quick ? 5000 : 20000, quick ? 9 : 31, false);
    if (cnic) {
      // kOpCopy, this node, `inflight` in flight, one destination.
      for (uint32_t s : bw_sizes) {
        // One verified copy first.
        std::memset(csrc + cdist, 0, s + kGuard);
        abi::SqEntry e{};
        e.opcode = abi::kOpCopy;
        e.length = s;
        e.src_slot = cnic->slot();
        e.dst_slot = uint16_t(cnic->slot());
        e.src_key = e.dst_key = ckey;
        e.src_addr = reinterpret_cast<uint64_t>(csrc);
        e.dst_addr = reinterpret_cast<uint64_t>(csrc + cdist);
        auto c = cnic->run(e);
        if (!c || c->status != abi::kCqOk) die("NIC copy of " + size_name(s) + " failed");
        Bw r;
        r.mode = "nic_copy";
        r.size = s;
        r.inflight = inflight_for(s, inflight);
        bool zero_after = true;
        for (uint32_t i = 0; i < kGuard; ++i) zero_after &= csrc[cdist + s + i] == 0;
        r.verified = std::memcmp(csrc, csrc + cdist, s) == 0 && zero_after;
        auto post = [&] {
          abi::SqEntry* q = cnic->next_sqe();
          if (!q) die("NIC copy: send queue full");
          *q = e;
          cnic->submit();
        };
        auto reap = [&] {
          auto cq = cnic->wait(std::chrono::milliseconds(30000));
          if (!cq) die("NIC copy: " + cq.error().message);
          return int(cq->status);
        };
        auto t0 = Clock::now() + std::chrono::milliseconds(2);
        r.take(stream(s, r.inflight, t0, adaptive, post, reap));
        ncopy[s] = r;
      }
    }
    std::printf("%-10s%12s%10s%10s%6s%12s%10s%10s%6s%10s\n", "size", "memcpy MB/s", "median", "max", "", "NIC copy min",
                "median", "max", "K", "win");
    for (auto& [s, f] : mc) {
      std::printf("%-10s%12.0f%10.0f%10.0f%6s", size_name(s).c_str(), f.gbps.min * 1e3, f.gbps.median * 1e3,
                  f.gbps.max * 1e3, "");
      if (ncopy.count(uint32_t(s))) {
        const Bw& r = ncopy[uint32_t(s)];
        std::printf("%12.1f%10.1f%10.1f%6u%10s%s", r.bps.min / 1e6, r.bps.median / 1e6, r.bps.max / 1e6, r.inflight,
                    (fmt("%.0f", r.win_s * 1e3) + "x" + std::to_string(r.nwin)).c_str(), r.verified ? "" : "  DATA WRONG");
      }
      std::printf("\n");
    }
    if (cnic) std::printf("   (NIC copy: kOpCopy slot -> same slot on node %u, reaped with Nic::wait; MB/s = 1e6 B/s)\n",
                          g.node);
  }
  auto ncopy_median = [&](uint32_t s) { return ncopy.count(s) ? ncopy[s].bps.median : 0.0; };
  auto memcpy_median = [&](uint32_t s) { return mc.count(s) ? mc[s].gbps.median * 1e9 : 0.0; };

  // ---- 1. latency
  std::vector<Lat> lat;
  uint32_t poll_seq = 0;
  auto fill_msg = [&](uint32_t size, uint32_t i) {
    for (uint32_t k = 0; k < size; ++k) g.msg[k] = pattern(i, k);
  };
  // One notification ping-pong round trip of `s` bytes (us); the ping's
  // completion is reaped after the pong, outside the timing.
  auto notify_rtt = [&](uint32_t s, uint32_t i, uint64_t& bad) {
    fill_msg(s, i);
    const uint64_t base = g.pongs;
    vmmc_send_id id = 0;
    auto t0 = Clock::now();
    vcheck(vmmc_send_async(g.ep, g.msg, g.peer + kNote, s, VMMC_NOTIFY, &id), "ping");
    while (g.pongs == base) {
      int w = wait_events(10000);
      if (w < 0) die(std::string("notification ping-pong: no pong: ") + vmmc_strerror(w));
    }
    auto t1 = Clock::now();
    vcheck(vmmc_send_wait(g.ep, id), "ping completion");
    if (std::memcmp(g.inbox + kNote, g.msg, s) != 0) ++bad;
    return us_between(t0, t1);
  };
  for (uint32_t s : lat_sizes) {
    for (int mode = 0; mode < 2; ++mode) {
      if (!run(mode == 0 ? "lat" : "poll")) continue;
      Lat l;
      l.mode = mode == 0 ? "notify" : "poll";
      l.size = s;
      probe.mark();
      std::vector<double> rtt;
      auto start = Clock::now();
      if (mode == 0) {
        for (int i = 0; i < warmup + iters; ++i) {
          double us = notify_rtt(s, uint32_t(i), l.bad);
          if (i >= warmup) rtt.push_back(us);
          if (i >= warmup && seconds_since(start) > lat_seconds) break;
        }
      } else {
        const uint32_t first = poll_seq + 1;
        if (poll_sleep_ns) ::prctl(PR_SET_TIMERSLACK, 1ul);
        uint32_t seq_cmd =
            post_cmd(Cmd{.op = kOpPoll, .size = s, .inflight = poll_yield, .nwin = poll_sleep_ns, .arg = first});
        const uint8_t* flag = g.inbox + kPoll + s - 4;
        auto set_flag = [&](uint32_t v) { std::memcpy(g.msg + s - 4, &v, 4); };
        for (int i = 0; i < warmup + iters; ++i) {
          fill_msg(s, uint32_t(i));
          const uint32_t seq = ++poll_seq;
          set_flag(seq);
          vmmc_send_id id = 0;
          auto t0 = Clock::now();
          vcheck(vmmc_send_async(g.ep, g.msg, g.peer + kPoll, s, 0, &id), "poll ping");
          if (!spin_until([&] { return load32(flag) == seq; }, poll_yield, poll_sleep_ns, 10))
            die("polling ping-pong: no pong within 10 s (size " + size_name(s) + ")");
          auto t1 = Clock::now();
          vcheck(vmmc_send_wait(g.ep, id), "poll ping completion");
          if (std::memcmp(g.inbox + kPoll, g.msg, s) != 0) ++l.bad;
          if (i >= warmup) rtt.push_back(us_between(t0, t1));
          if (i >= warmup && seconds_since(start) > lat_seconds) break;
        }
        set_flag(++poll_seq | kStop);
        vcheck(vmmc_send(g.ep, g.msg, g.peer + kPoll, s, 0), "poll stop");
        Reply r = await_reply(seq_cmd);
        if (r.status) die("polling ping-pong: the server saw no ping for 10 s");
      }
      l.counters = probe.since_mark();
      l.rtt_us = summarize(rtt);
      for (double& x : rtt) x /= 2;
      l.oneway_us = summarize(rtt);
      if (floors && pp.oneway_us.median > 0) l.ratio = l.oneway_us.median / pp.oneway_us.median;
      lat.push_back(l);
    }
  }
  if (!lat.empty()) {
    std::printf("\n== 1. one-way latency = ping-pong RTT / 2, us (notify: the receiver's handler answers; poll: each\n"
                "      side polls the last word of the message in its own buffer: %u looks, then one per %s)\n",
                poll_yield, poll_sleep_ns ? (fmt("%.0f", poll_sleep_ns / 1e3) + " us nanosleep").c_str() : "sched_yield");
    if (floors) std::printf("   floor: shared-memory ping-pong one-way median %.3f us\n", pp.oneway_us.median);
    std::printf("%-10s%-8s%7s%10s%10s%10s%12s%7s%6s%8s\n", "size", "mode", "n", "min", "median", "max", "med/floor",
                "path", "bad", "retx");
    for (const Lat& l : lat)
      std::printf("%-10s%-8s%7zu%10.1f%10.1f%10.1f%12.0f%7s%6" PRIu64 "%8s\n", size_name(l.size).c_str(),
                  l.mode.c_str(), l.oneway_us.n, l.oneway_us.min, l.oneway_us.median, l.oneway_us.max, l.ratio,
                  l.size <= VMMC_SHORT_MAX ? "inline" : "DMA", l.bad, retx_cell(l.counters).c_str());
    std::printf("   (bad: pongs whose bytes differed from the ping; retx: link retransmissions, both NICs, during"
                " the row)\n");
  }

  // ---- 2. bandwidth
  std::vector<Bw> bw;
  uint64_t verify_failed = 0;
  for (uint32_t s : bw_sizes) {
    for (int mode = 0; mode < 2; ++mode) {
      if (!run(mode == 0 ? "bw" : "bidir")) continue;
      Bw r;
      r.mode = mode == 0 ? "oneway" : "bidir";
      r.size = s;
      r.inflight = inflight_for(s, inflight);
      if (floors) r.cross_core_gbps = cross_core_floor(0.2);
      probe.mark();
      r.cpu.add("host_client", ::getpid());
      r.cpu.add("host_server", server_pid);
      r.cpu.add("nic_client", probe.qemu_pid[0]);
      r.cpu.add("nic_server", probe.qemu_pid[1]);
      r.cpu.start();
      if (mode == 0) {
        r.take(vmmc_stream(s, r.inflight, Clock::now() + std::chrono::milliseconds(1), adaptive));
        r.cpu.stop();
        r.fwd_bps = r.bps;
      } else {
        zero_bulk(s);
        auto t0 = Clock::now() + std::chrono::milliseconds(30);  // time for the server to wake and zero its area
        // Fixed windows, the same on both sides: long enough for several
        // sends per direction at the one-way rate.
        Windows w;
        w.fixed = true;
        w.win = win;
        for (const Bw& o : bw)
          if (o.mode == "oneway" && o.size == s && o.bps.median > 0) w.win = std::max(win, 8.0 * s / o.bps.median);
        w.nwin = std::clamp<uint32_t>(uint32_t(adaptive.measure_s / w.win), 3, std::max<uint32_t>(3, windows));
        uint32_t seq = post_cmd(Cmd{.op = kOpBidir, .size = s, .inflight = r.inflight, .nwin = w.nwin,
                                    .t0_ns = ns_of(t0), .win_ns = int64_t(w.win * 1e9)});
        StreamResult sr = vmmc_stream(s, r.inflight, t0, w);
        const double win = w.win;
        r.win_s = w.win;
        r.nwin = w.nwin;
        r.warm_s = w.win;
        Reply rep = await_reply(seq);
        std::vector<double> sb(rep.bound, rep.bound + rep.nbound);
        if (sb.size() != sr.bound.size()) die("bidirectional: the server measured another number of windows");
        std::vector<double> both(sb.size());
        for (size_t k = 0; k < sb.size(); ++k) both[k] = sb[k] + sr.bound[k];
        r.bps = stats_of_bound(both, win);
        r.overall_bps = overall_of(both, win);
        r.fwd_bps = stats_of_bound(sr.bound, win);
        r.rev_bps = stats_of_bound(sb, win);
        r.ops = sr.done + rep.a;
        r.failed = sr.failed + rep.b;
        r.drain_s = sr.drain_s;
        r.cpu.stop();
        // Server -> client: the server drained before it answered.
        uint64_t first = 0, bad = verify_bulk(s, 0x40 + peer, first);
        if (bad) {
          r.verified = false;
          r.verify_note = "server->client: " + std::to_string(bad) + " bad bytes, first at " + std::to_string(first);
        }
      }
      // Client -> server: one send into a zeroed area, checked by the server.
      call(Cmd{.op = kOpPrep, .size = s});
      vcheck(vmmc_send(g.ep, s <= VMMC_SHORT_MAX ? g.msg : g.src, g.peer + kBulk, s, 0), "verification send");
      Reply v = call(Cmd{.op = kOpVerify, .size = s, .arg = g.seed});
      if (v.status) {
        r.verified = false;
        r.verify_note += (r.verify_note.empty() ? "" : "; ") + std::string("client->server: ") +
                         std::to_string(v.a) + " bad bytes, first at " + std::to_string(v.b);
      }
      if (!r.verified) ++verify_failed;
      r.counters = probe.since_mark();
      bw.push_back(r);
    }
  }
  if (!bw.empty()) {
    std::printf("\n== 2. bandwidth, MB/s (1e6 B/s) per window (win: its length x count, after a warm-up);\n"
                "      vmmc_send_async with K in flight, vmmc_send_wait in order; bidir: both directions at once,\n"
                "      summed per window (the same windows on both sides)\n");
    std::printf("%-10s%-7s%3s%10s%9s%9s%9s%9s%9s%9s%11s%7s%8s\n", "size", "mode", "K", "win", "min", "median",
                "max", "c->s", "s->c", "/memcpy", "/NIC copy", "retx", "xcore");
    for (const Bw& r : bw) {
      double mcb = memcpy_median(r.size), ncb = ncopy_median(r.size);
      std::printf("%-10s%-7s%3u%10s%9.2f%9.2f%9.2f%9.2f%9s%9s%11s%7s%8s%s\n", size_name(r.size).c_str(),
                  r.mode.c_str(), r.inflight, (fmt("%.0f", r.win_s * 1e3) + "x" + std::to_string(r.nwin)).c_str(),
                  r.bps.min / 1e6, r.bps.median / 1e6, r.bps.max / 1e6, r.fwd_bps.median / 1e6,
                  r.mode == "bidir" ? fmt("%.2f", r.rev_bps.median / 1e6).c_str() : "-",
                  mcb > 0 ? fmt("%.4f", r.bps.median / mcb).c_str() : "-",
                  ncb > 0 ? fmt("%.4f", r.bps.median / ncb).c_str() : "-",
                  retx_cell(r.counters).c_str(), r.cross_core_gbps > 0 ? fmt("%.1f", r.cross_core_gbps).c_str() : "-",
                  r.verified ? "" : ("  NOT VERIFIED: " + r.verify_note).c_str());
    }
    std::printf("   (win: window ms x windows; c->s, s->c: medians per direction; /memcpy, /NIC copy: median over the\n"
                "    same size's floor median; bidir over one NIC's local copy rate; retx: link retransmissions, both\n"
                "    NICs, during the row; xcore: GB/s of the machine's cross-core copy just before the row (bench_common.h:\n"
                "    ~20 usual here, ~2 for minutes at a time); every row verified unless it says otherwise)\n");
    std::printf("   where the CPU went over each row's stream (a part near 1 was busy or spinning: a NIC polls between\n"
                "   bursts):\n");
    for (const Bw& r : bw)
      std::printf("   %-9s %-6s %s\n", size_name(r.size).c_str(), r.mode.c_str(), r.cpu.shares_line(m.nproc).c_str());
  }

  // ---- 3. send overhead
  std::vector<Ovh> ovh;
  if (run("ovh")) {
    for (uint32_t s : ovh_sizes) {
      Ovh o;
      o.size = s;
      const uint8_t* src = s <= VMMC_SHORT_MAX ? g.msg : g.src;
      std::vector<double> sync, async;
      auto start = Clock::now();
      for (int i = 0; i < ovh_samples + 10; ++i) {
        auto t0 = Clock::now();
        vcheck(vmmc_send(g.ep, src, g.peer + kBulk, s, 0), "vmmc_send");
        auto t1 = Clock::now();
        if (i >= 10) sync.push_back(us_between(t0, t1));
        if (i >= 20 && seconds_since(start) > lat_seconds) break;
      }
      const uint32_t k = inflight_for(s, inflight);
      start = Clock::now();
      for (int i = 0; int(async.size()) < ovh_samples;) {
        std::vector<vmmc_send_id> ids(k);
        for (uint32_t j = 0; j < k; ++j, ++i) {
          auto t0 = Clock::now();
          vcheck(vmmc_send_async(g.ep, src, g.peer + kBulk, s, 0, &ids[j]), "vmmc_send_async");
          auto t1 = Clock::now();
          if (i >= int(k)) async.push_back(us_between(t0, t1));  // the first burst warms up
        }
        for (vmmc_send_id id : ids) vcheck(vmmc_send_wait(g.ep, id), "vmmc_send_async completion");
        if (async.size() >= 20 && seconds_since(start) > lat_seconds) break;
      }
      o.sync_us = summarize(sync);
      o.async_us = summarize(async);
      ovh.push_back(o);
    }
    std::printf("\n== 3. send overhead: time inside the call, us (sync: vmmc_send, returns once the receiver's NIC\n"
                "      placed every byte; async: vmmc_send_async, posting only, bursts of K, reaped outside)\n");
    std::printf("%-10s%7s%10s%10s%10s%7s%10s%10s%10s%7s\n", "size", "n", "sync min", "median", "max", "n",
                "async min", "median", "max", "path");
    for (const Ovh& o : ovh)
      std::printf("%-10s%7zu%10.1f%10.1f%10.1f%7zu%10.2f%10.2f%10.2f%7s\n", size_name(o.size).c_str(), o.sync_us.n,
                  o.sync_us.min, o.sync_us.median, o.sync_us.max, o.async_us.n, o.async_us.min, o.async_us.median,
                  o.async_us.max, o.size <= VMMC_SHORT_MAX ? "inline" : "DMA");
  }

  // ---- 4. crossover: 128 B inline vs 129 B DMA
  struct Cross {
    std::string what;
    Stats a, b;  // 128 B, 129 B
  };
  std::vector<Cross> cross;
  if (run("cross")) {
    // Interleaved, so both sizes see the same machine: 128, 129, 128, ...
    // each turn one notification ping-pong and one synchronous send.
    std::vector<double> pp[2], sy[2];
    uint64_t bad = 0;
    auto start = Clock::now();
    for (int i = 0; i < 2 * (warmup + iters); ++i) {
      const uint32_t s = i & 1 ? 129 : 128;
      double rtt = notify_rtt(s, uint32_t(i), bad);
      auto t0 = Clock::now();
      vcheck(vmmc_send(g.ep, g.msg, g.peer + kBulk, s, 0), "vmmc_send");
      double us = us_between(t0, Clock::now());
      if (i < 2 * warmup) continue;
      pp[i & 1].push_back(rtt / 2);
      sy[i & 1].push_back(us);
      if ((i & 1) && seconds_since(start) > 2 * lat_seconds) break;
    }
    if (bad) die("crossover: " + std::to_string(bad) + " pongs differed from their pings");
    cross.push_back({"interleaved: one-way, notify", summarize(pp[0]), summarize(pp[1])});
    cross.push_back({"interleaved: vmmc_send (sync)", summarize(sy[0]), summarize(sy[1])});
  }
  for (const char* mode : {"notify", "poll"}) {
    const Lat *a = nullptr, *b = nullptr;
    for (const Lat& l : lat)
      if (l.mode == mode) {
        if (l.size == 128) a = &l;
        if (l.size == 129) b = &l;
      }
    if (a && b) cross.push_back({std::string("section 1: one-way, ") + mode, a->oneway_us, b->oneway_us});
  }
  {
    const Ovh *a = nullptr, *b = nullptr;
    for (const Ovh& o : ovh) {
      if (o.size == 128) a = &o;
      if (o.size == 129) b = &o;
    }
    if (a && b) {
      cross.push_back({"section 3: vmmc_send (sync)", a->sync_us, b->sync_us});
      cross.push_back({"section 3: vmmc_send_async", a->async_us, b->async_us});
    }
  }
  if (!cross.empty()) {
    std::printf("\n== 4. short/long crossover: 128 B (inline in the send queue) vs 129 B (the NIC fetches it), us\n");
    std::printf("%-31s%6s%9s%9s%9s%9s%9s%9s%10s\n", "", "n", "128 min", "median", "max", "129 min", "median", "max",
                "med diff");
    for (const Cross& c : cross)
      std::printf("%-31s%6zu%9.2f%9.2f%9.1f%9.2f%9.2f%9.1f%+10.2f\n", c.what.c_str(), std::min(c.a.n, c.b.n),
                  c.a.min, c.a.median, c.a.max, c.b.min, c.b.median, c.b.max, c.b.median - c.a.median);
    std::printf("   (interleaved: 128 and 129 alternate in one loop; section rows: from the sweeps above)\n");
  }

  // ---- the end: the server quits
  const uint64_t server_wait_io = call(Cmd{.op = kOpQuit}).a;
  const double runtime = seconds_since(run_start);
  const CpuShare cs = cpu_share(cpu0, cpu_snap(cpu_pids), false);  // the client alone, not its status queries
  const double cpu_self = cs.self, cpu_srv = cs.procs[0], cpu_q0 = cs.procs[1], cpu_q1 = cs.procs[2];
  const double cpu_other = cs.others;
  const bool verified = verify_failed == 0 &&
                        std::all_of(lat.begin(), lat.end(), [](const Lat& l) { return l.bad == 0; }) &&
                        std::all_of(ncopy.begin(), ncopy.end(), [](auto& kv) { return kv.second.verified; });
  std::printf("\nverification: %s\n", verified ? "every pong, every bandwidth row and every NIC copy checked, all ok"
                                              : "FAILED (see NOT VERIFIED / bad above)");
  if (g.wait_io_as_timeout + server_wait_io)
    std::printf("library: vmmc_wait(timeout) returned -VMMC_ERR_IO at its timeout %" PRIu64 " times in the client, %"
                PRIu64 " in the server (counted as timeouts; see wait_events)\n",
                g.wait_io_as_timeout, server_wait_io);
  std::printf("total runtime %.1f s; CPU over the run, %% of one CPU (of %ld): client %.0f, server %.0f, QEMU node %u"
              " %.0f, QEMU node %u %.0f, everything else %.0f\n",
              runtime, m.nproc, cpu_self, cpu_srv, g.node, cpu_q0, peer, cpu_q1, cpu_other);

  // ---- JSON
  Json j;
  j.begin_object();
  j.str("benchmark", "vmmc_bench").num("runtime_s", runtime).boolean("verified", verified).boolean("quick", quick);
  machine_json(j, m, "clock_ns");
  j.begin_object("cpu_over_run_pct")
      .num("client", cpu_self)
      .num("server", cpu_srv)
      .num("qemu_client_node", cpu_q0)
      .num("qemu_server_node", cpu_q1)
      .num("everything_else", cpu_other)
      .end_object();
  j.begin_object("library_anomalies")
      .num("vmmc_wait_io_error_at_timeout_client", double(g.wait_io_as_timeout))
      .num("vmmc_wait_io_error_at_timeout_server", double(server_wait_io))
      .end_object();
  j.begin_object("params")
      .num("node", g.node)
      .num("peer", peer)
      .num("iters", iters)
      .num("warmup", warmup)
      .num("lat_seconds", lat_seconds)
      .num("inflight", inflight)
      .num("win_ms", win_ms)
      .num("measure_ms", measure_ms)
      .num("windows", windows)
      .num("ovh_samples", ovh_samples)
      .num("poll_yield", poll_yield)
      .num("poll_sleep_ns", poll_sleep_ns)
      .num("short_max", VMMC_SHORT_MAX)
      .end_object();
  if (floors) {
    j.begin_object("floors");
    pingpong_json(j, pp);
    memcpy_json(j, mc, false, true);
    j.begin_array("nic_copy");
    for (auto& [s, r] : ncopy)
      j.begin_object()
          .num("size", s)
          .num("inflight", r.inflight)
          .num("window_s", r.win_s)
          .num("windows", r.nwin)
          .stats("bytes_per_s", r.bps)
          .num("overall_bytes_per_s", r.overall_bps)
          .num("ops", double(r.ops))
          .num("failed", double(r.failed))
          .boolean("verified", r.verified)
          .end_object();
    j.end_array();
    j.end_object();
  }
  j.begin_array("latency");
  for (const Lat& l : lat) {
    j.begin_object()
        .str("mode", l.mode)
        .num("size", l.size)
        .boolean("inline", l.size <= VMMC_SHORT_MAX)
        .stats("oneway_us", l.oneway_us)
        .stats("rtt_us", l.rtt_us)
        .num("bad", double(l.bad))
        .num("ratio_median_to_floor_oneway", l.ratio);
    counters_json(j, l.counters, "client_nic", "server_nic");
    j.end_object();
  }
  j.end_array();
  j.begin_array("bandwidth");
  for (const Bw& r : bw) {
    double mcb = memcpy_median(r.size), ncb = ncopy_median(r.size);
    j.begin_object()
        .str("mode", r.mode)
        .num("size", r.size)
        .num("inflight", r.inflight)
        .stats("bytes_per_s", r.bps)
        .num("overall_bytes_per_s", r.overall_bps)
        .stats("client_to_server_bytes_per_s", r.fwd_bps);
    if (r.mode == "bidir") j.stats("server_to_client_bytes_per_s", r.rev_bps);
    j.num("ops", double(r.ops))
        .num("failed", double(r.failed))
        .num("window_s", r.win_s)
        .num("windows", r.nwin)
        .num("warm_s", r.warm_s)
        .num("drain_s", r.drain_s)
        .num("memcpy_bytes_per_s_median", mcb)
        .num("nic_copy_bytes_per_s_median", ncb)
        .num("ratio_to_memcpy", mcb > 0 ? r.bps.median / mcb : 0)
        .num("ratio_to_nic_copy", ncb > 0 ? r.bps.median / ncb : 0)
        .num("cross_core_gbps", r.cross_core_gbps);
    r.cpu.shares_json(j);
    j.boolean("verified", r.verified)
        .str("verify_note", r.verify_note);
    counters_json(j, r.counters, "client_nic", "server_nic");
    j.end_object();
  }
  j.end_array();
  j.begin_array("overhead");
  for (const Ovh& o : ovh)
    j.begin_object()
        .num("size", o.size)
        .boolean("inline", o.size <= VMMC_SHORT_MAX)
        .stats("sync_us", o.sync_us)
        .stats("async_us", o.async_us)
        .end_object();
  j.end_array();
  j.begin_array("crossover");
  for (const Cross& c : cross)
    j.begin_object()
        .str("what", c.what)
        .stats("us_128", c.a)
        .stats("us_129", c.b)
        .num("median_128", c.a.median)
        .num("median_129", c.b.median)
        .num("min_128", c.a.min)
        .num("min_129", c.b.min)
        .end_object();
  j.end_array();
  j.end_object();
  write_json(j, json_path);
  vmmc_close(g.ep);
  return verified ? 0 : 1;
}

int serve_main(int argc, char** argv) {
  uint32_t peer = 0;
  bool have_peer = false;
  uint64_t bulk = (8u << 20) + 4096;
  double idle = 900;
  for (int i = 2; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--peer" && i + 1 < argc) peer = uint32_t(std::stoul(argv[++i])), have_peer = true;
    else if (a == "--bulk" && i + 1 < argc) bulk = std::max<uint64_t>(std::stoull(argv[++i], nullptr, 0), 8192);
    else if (a == "--idle-timeout" && i + 1 < argc) idle = std::max(1.0, std::atof(argv[++i]));
    else usage();
  }
  if (!have_peer) usage();
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  return serve(peer, bulk, idle);
}

}  // namespace

int main(int argc, char** argv) {
  bench::program = "vmmc_bench";
  return serve_or_client(argc, argv, serve_main, client, usage);
}
