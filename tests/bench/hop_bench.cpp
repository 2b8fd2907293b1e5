// hop_bench: where the one-way latency of one small message goes, hop by hop,
// for VMMC, VIPL, native AM and FM on a two-node cluster, beside host-only
// floors measured in the same run (tests/bench/hop_bench.py runs it all).
//
//   hop_bench floors [--json FILE] [--quick] [--node N]
//   hop_bench vmmc|vipl|am|fm|unet [--json FILE] [--iters N] [--warmup N]
//             [--styles wait,poll] [--client-node N] [--server-node N] [--ping-only]
//   hop_bench vmmc|vipl|fm|unet --rate [--json FILE] [--quick] [--depth D] [--msgs N]
//             [--samples S] [--credit-every K] [--styles wait,poll] [--client-node N] [--server-node N]
//             [--bytes N (unet: 8 .. 65536, default 40)]
//
// floors: a two-process shared-memory ping-pong and a blocking eventfd
// ping-pong (one-way = RTT / 2; bench_common.h), and host -> spinning NIC ->
// host: a kOpNop posted on node N (default 0) through a Nic of our own, its
// completion spin-polled (Nic::next_sqe / submit / poll), round trip.
//
// A protocol: the process forks; the parent is the client on --client-node
// (default 0), the child the server on --server-node (default 1), each with
// ULNIC_NODE set to its node. Per wait style ("wait": the API's blocking wait
// on both sides; "poll": a tight loop on its non-blocking call, no sleeps and
// no yields here) the client sends --warmup + --iters pings, one at a time,
// and the server answers each from where it sees it:
//   vmmc  64 B vmmc_send_async(VMMC_NOTIFY) into the server's export; the
//         server's notification handler sends the same bytes back the same
//         way; wait = vmmc_wait, poll = vmmc_poll until the handler ran (the
//         ping's completion is reaped after the pong, outside the time);
//   vipl  one reliable-delivery VI pair, 64 B VipPostSend into preposted
//         receives, echoed; wait = VipRecvWait, poll = VipRecvDone;
//   am    native AM (AMX_SetTransport("native")): AM_Request4 (16 B of
//         arguments), AM_Reply4 of the same from the handler; wait =
//         AM_SetEventMask(AM_NOTEMPTY) + AM_WaitSema, then AM_Poll; poll =
//         AM_Poll until the reply handler ran;
//   fm    16 B FM_begin_message / FM_send_piece / FM_end_message, the same
//         16 B back from the handler; wait = FM_wait then FM_extract, poll =
//         FM_extract;
//   unet  40 B unet_send_inline on a channel each way (in the send queue and
//         in the receive descriptor: no buffer), echoed; wait = unet_recv_wait,
//         poll = unet_recv.
// Both messages of a round are traced (ulnic/trace.h; the pong too unless
// --ping-only): ulnic::trace::arm() just before the send call (FM: before
// FM_end_message, which posts the packet; the time t0 is taken before
// FM_begin_message). Each process opens one more Nic on its node and
// calibrates its NIC's clock on it (trace::sync_clock, 200 NOPs; again, up
// to 4 passes, while the error is above 2 us) before and after each style's
// rounds, one side after the other; a stamp is converted
// with the offset interpolated between the two. The hops of a message from
// the side that sends it (A) to the side that receives it (B):
//   1 post -> NIC    t0 (A's host, just before the send call) -> tx_seen
//   2 sending NIC    tx_seen -> tx_sent (last packet in the fabric ring)
//   3 fabric         tx_sent (A's NIC clock) -> rx_seen (B's NIC clock; if
//                    NIC B slept, its wake-up is in here)
//   4 receiving NIC  rx_seen -> rx_done (data, CQ / ring entry / event written)
//   5 NIC -> host    rx_done -> B saw the message: entry of the handler that
//                    runs inside the wait / poll call (VMMC, AM, FM; the
//                    server answers from there), return of VipRecvWait /
//                    VipRecvDone (VIPL)
// Their sum is the message's one-way time on the host clock (t0 -> seen),
// which no clock calibration touches; RTT/2 is half of the client's t0 -> it
// saw the pong, which is the ping's one-way time + the server's turnaround
// (seen -> its reply's t0) + the pong's one-way time. The k-th message of a
// style moves tx_seq at its sender and rx_seq at its receiver to base + k + 1
// (a NIC stamps rx just after it delivered, so a host may see a message a few
// us before rx_seq moves): each side reads its stamps after each round
// (the client once the pong is in; the server after its answer, waiting
// with a few looks and then sched_yield, 200 us at most, for its ping's rx
// stamps) and files them under the round their sequence number names. A
// message whose stamps no read saw under its own number (a later message
// overwrote them first, or they never came) is dropped from the hops and
// counted, and if a style's sequence words did not move by exactly one per
// round, none of its stamps are used. RTT/2 and the one-way times use every
// measured round.
// Each pong must carry the ping's bytes back (the round's number and a
// pattern of it); one that does not ends the run (exit status 1). No
// progress for 30 s (a call that never returns, a side that died) ends it
// too. Prints min / median / p99 per hop and writes JSON.
//
// --rate (vmmc, vipl, fm, unet): the message rate of small messages pipelined,
// nothing traced and no clock calibrated. Per style the client streams
// --samples runs (10; --quick 4) of --msgs messages (4000; --quick 1000),
// after one run as a warm-up, each message sent as a ping is (VMMC: into
// slot i mod 64 of the server's export, from slot i mod 64 of its own
// buffer, so that no message overwrites one the server has not taken yet),
// with at most --depth (16) messages out that the server has not
// acknowledged: the server takes each message from where it sees it (the
// handler; VipRecvWait / VipRecvDone), checks its bytes (its number, seen
// once, and the pattern of it; a wrong, repeated or out-of-range message
// ends the run, exit status 1) and counts it, and every --credit-every (4)
// messages, and at the end of a run, sends the count back in an 8-byte
// message of the protocol (VMMC: a notifying inline send into the client's
// export, slot k mod 64; VIPL: a send; FM: a message to the client's
// handler). A message counts once the server has it: a run's rate is its
// messages over the time from its first send to the acknowledgement of its
// last. wait / poll as above (on both sides). Prints msgs/s min / median /
// max per style and writes JSON.
#include <sys/mman.h>
#include <sys/wait.h>

#include <deque>
#include <filesystem>
#include <memory>
#include <new>

#include <amudp.h>
#include <fm.h>
#include <unet.h>

#include "logp_common.h"
#include "ulnic/nic.h"
#include "ulnic/trace.h"
#include "ulnic/vmmc.h"
#include "vipl.h"

namespace {

using namespace bench;
namespace abi = ulnic::abi;
namespace trace = ulnic::trace;

constexpr double kLimitS = 30;            // no progress for this long ends the run
constexpr int kLimitMs = int(kLimitS * 1000);
constexpr uint32_t kMaxBytes = 64;        // the largest message (VMMC, VIPL)
constexpr int kCalSamples = 200;          // NOPs per clock calibration
constexpr int64_t kCalGoodNs = 2000;      // a calibration this close is kept
constexpr int64_t kStampWaitNs = 200'000;  // at most, for a round's own stamps
constexpr uint32_t kRing = 64;            // --rate: VMMC message / acknowledgement slots per export
constexpr uint32_t kMaxDepth = 24;        // --rate: the most messages out (VIPL: 32 receives posted)

enum Who { kClient = 0, kServer = 1 };
const char* const kHops[] = {"post_to_nic", "nic_tx", "fabric", "nic_rx", "to_host"};
const char* const kHopTitle[] = {"1 post -> NIC", "2 sending NIC", "3 fabric", "4 receiving NIC", "5 NIC -> host"};

// ------------------------------------------------ what the two sides share

struct Cal {  // one calibration of a node's clock
  int64_t offset_ns = 0, error_ns = 0, at_ns = 0;
};

// One side's view of one round: its message (sent_ns: just before the send
// call; its NIC's tx stamps) and the other side's (seen_ns: when it saw it;
// its NIC's rx stamps).
struct Rec {
  int64_t sent_ns, seen_ns;
  uint64_t tx_seen, tx_sent, rx_seen, rx_done;
  uint32_t tx_filed, rx_filed;  // the stamps are there (Filing)
};

// A MAP_SHARED page set up before the fork; both sides' Rec records follow it.
struct Shared {
  std::atomic<uint32_t> step[2];  // meet(): how far each side has come
  std::atomic<uint32_t> failed;   // a side died
  Cal cal[2][2][2];               // [style][side][before, after]
  uint64_t moved[2][2][2];        // [style][side][tx, rx]: how far the sequence words moved
  en_t am_name[2];                // AM: each side's endpoint name
  unet_addr unet[2];              // U-Net: each side's endpoint address
};

struct Process {
  Who who = kClient;
  uint32_t node = 0, peer = 1;
  Shared* sh = nullptr;
  Rec* recs = nullptr;                  // [style][side][round]
  bool trace_pong = true;
  uint32_t steps = 0;
  std::unique_ptr<ulnic::Nic> cal_nic;  // the calibration Nic (nothing else on it)
  pid_t server = 0;                     // client: the server's pid
  std::atomic<bool> server_done{false};  // client: it exited with status 0
  bool clean = false;                   // reached the end
  std::string fm_dir;                   // FM: the job directory
  logp::Watchdog watchdog;
  bool rate = false;                    // --rate: nothing traced; arrivals go to rate_arrival
  uint32_t unet_bytes = UNET_INLINE_MAX;  // U-Net --rate --bytes: its messages' size
} g;

// --rate: one style's messages at either side.
struct RateCount {
  uint32_t bytes = 0;           // a message's
  uint64_t total = 0;           // messages in the style, warm-up run included
  uint64_t count = 0;           // server: distinct messages checked
  uint64_t acked = 0;           // client: the server's latest count
  std::vector<uint8_t> seen;    // server: by message number
} tally;

// At exit: a side that did not reach the end tells the other; the client
// removes the FM job directory.
void at_exit() {
  if (!g.clean && g.sh) g.sh->failed.store(1);
  std::error_code ignored;
  if (g.who == kClient && !g.fm_dir.empty()) std::filesystem::remove_all(g.fm_dir, ignored);
}

// Both sides at the next step: ours published, then naps until the other's is there.
void meet() {
  const uint32_t k = ++g.steps;
  g.sh->step[g.who].store(k, std::memory_order_release);
  const auto start = Clock::now();
  while (g.sh->step[1 - g.who].load(std::memory_order_acquire) < k) {
    if (g.sh->failed.load()) die("the other side failed");
    if (seconds_since(start) > kLimitS) die("the other side did not come to step " + std::to_string(k));
    logp::sleep_us(100);
  }
}

// Client: a thread that waits for the server process; a server that fails
// ends the client at once (a thread, not SIGCHLD: a signal would interrupt
// the libraries' waits).
void watch_server() {
  std::thread([] {
    int st = 0;
    while (::waitpid(g.server, &st, 0) < 0 && errno == EINTR) {
    }
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
      std::fprintf(stderr, "%s: the server process failed (wait status %d)\n", program.c_str(), st);
      std::fflush(stderr);
      std::_Exit(1);
    }
    g.server_done.store(true);
  }).detach();
}

// --------------------------------------------------------------- clocks

// sync_clock, again (up to 4 times in all) while its error is above
// kCalGoodNs: on a busy machine every NOP of a pass may wait for a CPU.
Cal calibrate() {
  Cal best{0, INT64_MAX, 0};
  for (int k = 0; k < 4 && best.error_ns > kCalGoodNs; ++k) {
    auto s = trace::sync_clock(*g.cal_nic, kCalSamples);
    if (!s) die("sync_clock: " + s.error().message);
    if (s->error_ns < best.error_ns) best = Cal{s->offset_ns, s->error_ns, trace::monotonic_ns()};
  }
  return best;
}

// The client calibrates node A, then the server node B (one NIC clock at a time).
void calibrate_in_turn(Cal (&cal)[2][2], int when) {
  for (Who turn : {kClient, kServer}) {
    if (turn == g.who) cal[g.who][when] = calibrate();
    meet();
  }
}

// The clock at host time t: the offset interpolated between two calibrations.
trace::ClockSync clock_at(const Cal (&c)[2], int64_t t) {
  const double span = double(c[1].at_ns - c[0].at_ns);
  const double f = span > 0 ? std::clamp(double(t - c[0].at_ns) / span, 0.0, 1.0) : 0.0;
  return {c[0].offset_ns + int64_t(f * double(c[1].offset_ns - c[0].offset_ns)),
          std::max(c[0].error_ns, c[1].error_ns)};
}

// --------------------------------------------------------------- stamps

// The stamps of the protocol's slot: of this process's Nics on our node other
// than the calibration Nic, the one with the most traced traffic.
abi::SlotTrace proto_stamps() {
  abi::SlotTrace best{};
  bool any = false;
  for (const trace::Stamps& s : trace::read_all())
    if (s.node == g.node && s.slot != g.cal_nic->slot() &&
        (!any || s.t.tx_seq + s.t.rx_seq > best.tx_seq + best.rx_seq))
      best = s.t, any = true;
  if (!any) die("the protocol has no Nic open on node " + std::to_string(g.node));
  return best;
}

// Where a side's stamps go: its k-th traced message of a style moves tx_seq
// (its sender's slot) and rx_seq (its receiver's slot) from the style's base
// to base + k + 1; the stamps beside sequence number n are those of message
// n - base - 1. Each read files them under that round (once), so a read that
// comes late -- after the next message overwrote them -- files the next
// round's stamps, never the wrong ones, and a round whose stamps no read saw
// stays unfiled.
struct Filing {
  bool tx_on = false, rx_on = false;  // this side's messages / the other side's are traced
  uint64_t tx_base = 0, rx_base = 0;

  void file(Rec* recs, uint32_t rounds, const abi::SlotTrace& t) const {
    if (tx_on && t.tx_seq > tx_base && t.tx_seq - tx_base <= rounds) {
      Rec& r = recs[t.tx_seq - tx_base - 1];
      if (!r.tx_filed) r.tx_seen = t.tx_seen, r.tx_sent = t.tx_sent, r.tx_filed = 1;
    }
    if (rx_on && t.rx_seq > rx_base && t.rx_seq - rx_base <= rounds) {
      Rec& r = recs[t.rx_seq - rx_base - 1];
      if (!r.rx_filed) r.rx_seen = t.rx_seen, r.rx_done = t.rx_done, r.rx_filed = 1;
    }
  }
};

// The stamps once those of round i are there (the tx stamps only if want_tx):
// a few looks back to back, then sched_yield between looks (the NIC that
// writes them may need this CPU); whatever they are after kStampWaitNs.
abi::SlotTrace await_stamps(const Filing& f, uint32_t i, bool want_tx) {
  const int64_t start = trace::monotonic_ns();
  for (uint32_t looks = 0;; ++looks) {
    const abi::SlotTrace t = proto_stamps();
    const bool tx = !want_tx || !f.tx_on || t.tx_seq >= f.tx_base + i + 1;
    const bool rx = !f.rx_on || t.rx_seq >= f.rx_base + i + 1;
    if ((tx && rx) || trace::monotonic_ns() - start > kStampWaitNs) return t;
    if (looks < 20) cpu_relax();
    else ::sched_yield();
  }
}

// ------------------------------------------------------------- messages

// Bytes [at, at + n) of ping i's pattern, at p.
void fill_pattern(uint8_t* p, uint32_t n, uint32_t i, uint32_t at) {
  for (uint32_t k = 0; k < n; ++k) p[k] = uint8_t(i * 131 + (at + k) * 7 + (i >> 8));
}

// Ping i: its number, then a pattern of it.
void fill_ping(uint8_t* p, uint32_t n, uint32_t i) {
  fill_pattern(p, n, i, 0);
  std::memcpy(p, &i, std::min<uint32_t>(n, 4));
}

uint32_t number_of(const uint8_t* p) {
  uint32_t i;
  std::memcpy(&i, p, 4);
  return i;
}

// The last message a handler (or a receive) saw, and when; the server's
// answer to it: when it began to send it.
struct Arrival {
  uint64_t count = 0;
  // Server, rounds: the ping due next. Checked at each arrival: AM and FM
  // answer from the handler, so the client's next ping may come within the
  // same poll (FM_extract runs every handler for what arrives meanwhile)
  // and the step sees only the last.
  uint32_t next_ping = 0;
  int64_t at_ns = 0, answer_ns = 0;
  uint32_t len = 0;
  uint8_t data[kMaxBytes] = {};
} got;

// --rate: the server checks and counts a message (its number in range and
// seen for the first time, its bytes the pattern of it); the client takes
// the server's count from an acknowledgement.
void rate_arrival(const uint8_t* p, size_t len) {
  if (g.who == kClient) {
    uint64_t v = 0;
    if (len != sizeof v) die("an acknowledgement of " + std::to_string(len) + " bytes, not 8");
    std::memcpy(&v, p, sizeof v);
    if (v > tally.total) die("an acknowledgement of " + std::to_string(v) + " messages: more than were sent");
    tally.acked = std::max(tally.acked, v);
    return;
  }
  const uint32_t i = len >= 4 ? number_of(p) : ~0u;
  if (len != tally.bytes || i >= tally.total || tally.seen[i])
    die("message " + std::to_string(i) + " (" + std::to_string(len) + " bytes) " +
        (len != tally.bytes ? "has the wrong length" : i >= tally.total ? "was never sent" : "came twice"));
  uint8_t want[kMaxBytes];
  for (uint32_t at = 0; at < tally.bytes; at += kMaxBytes) {  // U-Net --bytes: up to 64 KiB
    const uint32_t n = std::min(kMaxBytes, tally.bytes - at);
    if (at) fill_pattern(want, n, i, at);
    else fill_ping(want, n, i);
    if (std::memcmp(p + at, want, n) != 0) die("message " + std::to_string(i) + " does not carry its bytes");
  }
  tally.seen[i] = 1;
  ++tally.count;
}

void arrived(int64_t at_ns, const void* data, size_t len) {
  got.at_ns = at_ns;
  got.len = uint32_t(std::min<size_t>(len, kMaxBytes));
  std::memcpy(got.data, data, got.len);
  ++got.count;
  if (g.rate) return rate_arrival(static_cast<const uint8_t*>(data), len);
  if (g.who == kServer) {
    if (got.len < 4 || number_of(got.data) != got.next_ping)
      die("ping " + std::to_string(got.next_ping) + " expected, got " +
          std::to_string(got.len >= 4 ? number_of(got.data) : 0));
    ++got.next_ping;
  }
}

void check_pong(uint32_t i, uint32_t n) {
  uint8_t want[kMaxBytes];
  fill_ping(want, n, i);
  if (got.len != n || std::memcmp(got.data, want, n) != 0)
    die("the pong of ping " + std::to_string(i) + " does not carry the ping's " + std::to_string(n) +
        " bytes back (" + std::to_string(got.len) + " bytes came)");
}

// Whether this side's messages are traced: the client's pings, the server's pongs unless --ping-only.
bool traced() { return !g.rate && (g.who == kClient || g.trace_pong); }

// Arms the trace for the next data descriptor (if ours are traced); t0.
int64_t start_send() {
  if (traced()) trace::arm();
  return trace::monotonic_ns();
}

// One round's times at one side: just before its send call, when it saw the other's message.
struct Times {
  int64_t sent_ns = 0, seen_ns = 0;
};

// ------------------------------------------------------------ protocols

// A protocol's two sides. The round is the same for all four: the client
// sends ping i and runs its receive step until the pong arrived; the server
// runs its receive step until ping i arrived and answers it (VMMC, AM and FM
// from the handler that runs inside the step, VIPL after it).
class Proto {
 public:
  virtual ~Proto() = default;
  virtual uint32_t bytes() const = 0;
  // Opens on our node; afterwards the other side can be reached.
  virtual void open() = 0;
  // Reaps what is still in flight (before both sides close).
  virtual void quiesce() {}
  virtual void close() = 0;

  // Client: ping i out, its pong in.
  Times ping(uint32_t i, bool wait) {
    const int64_t t0 = send_ping(i);
    until_arrival(wait);
    const int64_t t1 = got.at_ns;
    after_pong();
    check_pong(i, bytes());
    return {t0, t1};
  }
  // Server: waits for ping i (arrived() checks the order) and answers it
  // (answer() for the last arrival; AM and FM answered in the handler).
  Times pong(uint32_t i, bool wait) {
    while (got.next_ping <= i) step(wait);
    answer();
    return {got.answer_ns, got.at_ns};
  }

 protected:
  // Client: sends ping i (its bytes: fill_ping) -> t0, just before the send call.
  virtual int64_t send_ping(uint32_t i) = 0;
  // One blocking wait (wait) or one non-blocking poll; a message that came goes through arrived().
  virtual void step(bool wait) = 0;
  // Client: after the pong came (outside the time).
  virtual void after_pong() {}
  // Server: after the step that brought the ping (sets got.answer_ns if it answers here).
  virtual void answer() {}

 public:
  // --rate: client: message i out (as a ping); server: its count back, 8 bytes.
  void send_message(uint32_t i) { send_ping(i); }
  virtual void send_count(uint64_t) { die("--rate: vmmc, vipl or fm"); }
  // --rate: reaps what completed of our sends (no waiting).
  virtual void reap() {}
  // --rate: one step (as in the rounds).
  void look(bool wait) { step(wait); }

 private:
  void until_arrival(bool wait) {
    for (const uint64_t n0 = got.count; got.count == n0;) step(wait);
  }
};

// ---- VMMC

void vmmc_ok(int st, const char* what) {
  if (st != VMMC_OK) die(std::string(what) + ": " + vmmc_strerror(st));
}

class Vmmc final : public Proto {
 public:
  uint32_t bytes() const override { return 64; }

  void open() override {
    vmmc_ok(vmmc_open(nullptr, int(g.node), &ep_), "vmmc_open");
    inbox_ = static_cast<uint8_t*>(vmmc_alloc(ep_, 4096));
    msg_ = static_cast<uint8_t*>(vmmc_alloc(ep_, 4096));
    if (!inbox_ || !msg_) die("vmmc_alloc: slot heap exhausted");
    const std::string mine = "hop." + std::to_string(g.node), theirs = "hop." + std::to_string(g.peer);
    vmmc_ok(vmmc_export(ep_, mine.c_str(), inbox_, 4096, nullptr, 0, on_note, this), "vmmc_export");
    size_t len = 0;
    vmmc_ok(vmmc_import(ep_, int(g.peer), theirs.c_str(), 20000, &peer_, &len), "vmmc_import");
  }

  void quiesce() override {
    for (; !sends_.empty(); sends_.pop_front()) vmmc_ok(vmmc_send_wait(ep_, sends_.front()), "a send");
  }

  void close() override { vmmc_close(ep_); }

  void send_count(uint64_t count) override {  // into slot k mod 64 of the client's export
    const uint64_t at = (counts_++ % kRing) * bytes();
    std::memcpy(msg_ + at, &count, sizeof count);
    vmmc_send_id id = 0;
    vmmc_ok(vmmc_send_async(ep_, msg_ + at, peer_ + at, sizeof count, VMMC_NOTIFY, &id), "vmmc_send_async (count)");
    sends_.push_back(id);
  }

  void reap() override {
    for (int st; !sends_.empty() && (st = vmmc_send_done(ep_, sends_.front())) != VMMC_PENDING; sends_.pop_front())
      vmmc_ok(st, "a send");
  }

 protected:
  int64_t send_ping(uint32_t i) override {
    const uint64_t at = g.rate ? uint64_t(i % kRing) * bytes() : 0;  // --rate: slot i mod 64
    fill_ping(msg_ + at, bytes(), i);
    vmmc_send_id id = 0;
    const int64_t t0 = start_send();
    vmmc_ok(vmmc_send_async(ep_, msg_ + at, peer_ + at, bytes(), VMMC_NOTIFY, &id), "vmmc_send_async");
    sends_.push_back(id);
    return t0;
  }

  void step(bool wait) override {
    const int r = wait ? vmmc_wait(ep_, kLimitMs) : vmmc_poll(ep_);
    if (r < 0) die(std::string(wait ? "vmmc_wait: " : "vmmc_poll: ") + vmmc_strerror(-r));
  }

  void after_pong() override { quiesce(); }

  void answer() override { reap(); }  // (it went from the handler) reaps the echoes that completed

 private:
  // Runs inside vmmc_wait / vmmc_poll; the server echoes from here.
  static void on_note(void* self, void* data, size_t, size_t len, uint32_t) {
    arrived(trace::monotonic_ns(), data, len);
    if (g.who != kServer || g.rate) return;
    auto* v = static_cast<Vmmc*>(self);
    vmmc_send_id id = 0;
    got.answer_ns = start_send();
    vmmc_ok(vmmc_send_async(v->ep_, data, v->peer_, len, VMMC_NOTIFY, &id), "echo");
    v->sends_.push_back(id);
  }

  vmmc_endpoint* ep_ = nullptr;
  uint8_t *inbox_ = nullptr, *msg_ = nullptr;
  vmmc_proxy_t peer_ = 0;
  std::deque<vmmc_send_id> sends_;  // not reaped yet
  uint64_t counts_ = 0;             // --rate: counts sent (server)
};

// ---- VIPL

void vip_ok(VIP_RETURN rc, const std::string& what) {
  if (rc != VIP_SUCCESS) die(what + " -> VIP_RETURN " + std::to_string(int(rc)));
}

std::atomic<bool> vipl_closing{false};
std::atomic<int> vipl_errors{0};

void on_vipl_error(VIP_PVOID, VIP_ERROR_DESCRIPTOR* e) {
  if (vipl_closing && e->ErrorCode == VIP_ERROR_CONN_LOST) return;  // the other side hung up at the end
  ++vipl_errors;
  std::fprintf(stderr, "%s: VIPL asynchronous error %d\n", program.c_str(), int(e->ErrorCode));
}

class Vipl final : public Proto {
  static constexpr uint32_t kRecvs = 32, kSends = 32, kBuf = 256;  // --rate: up to kMaxDepth out
  struct Mem {  // one registration
    VIP_DESCRIPTOR rx[kRecvs], tx[kSends];
    uint8_t rx_buf[kRecvs][kBuf], tx_buf[kSends][kBuf];
  };

 public:
  uint32_t bytes() const override { return 64; }

  void open() override {
    const std::string dev = "nic" + std::to_string(g.node);
    vip_ok(VipOpenNic(dev.c_str(), &nic_), "VipOpenNic(" + dev + ")");
    vip_ok(VipErrorCallback(nic_, nullptr, on_vipl_error), "VipErrorCallback");
    vip_ok(VipNSInit(nic_, nullptr), "VipNSInit");
    vip_ok(VipCreatePtag(nic_, &ptag_), "VipCreatePtag");
    void* m = ::mmap(nullptr, sizeof(Mem), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) die("mmap");
    m_ = static_cast<Mem*>(m);
    VIP_MEM_ATTRIBUTES ma{};
    ma.Ptag = ptag_;
    vip_ok(VipRegisterMem(nic_, m_, sizeof(Mem), &ma, &mh_), "VipRegisterMem");
    VIP_VI_ATTRIBUTES va{};
    va.ReliabilityLevel = VIP_SERVICE_RELIABLE_DELIVERY;
    va.MaxTransferSize = kBuf;
    va.Ptag = ptag_;
    vip_ok(VipCreateVi(nic_, &va, nullptr, nullptr, &vi_), "VipCreateVi");
    for (VIP_DESCRIPTOR& d : m_->tx) idle_tx_.push_back(&d);
    for (VIP_DESCRIPTOR& d : m_->rx) post_recv(&d);
    // Peer to peer: both sides ask, with the same discriminator.
    std::vector<uint8_t> here = address(g.node), there = address(g.peer);
    VIP_VI_ATTRIBUTES remote{};
    vip_ok(VipConnectPeerRequest(vi_, net(here), net(there), 20000), "VipConnectPeerRequest");
    vip_ok(VipConnectPeerWait(vi_, &remote), "VipConnectPeerWait");
  }

  void quiesce() override {
    while (idle_tx_.size() < kSends) {
      VIP_DESCRIPTOR* d = nullptr;
      vip_ok(VipSendWait(vi_, kLimitMs, &d), "VipSendWait");
      idle_tx_.push_back(done(d, "a send"));
    }
    vipl_closing = true;  // from here on the other side may hang up
  }

  void close() override {
    VipDisconnect(vi_);
    if (vipl_errors) die(std::to_string(vipl_errors) + " VIPL asynchronous errors");
  }

  void send_count(uint64_t count) override {
    VIP_DESCRIPTOR* d = free_send(sizeof count);
    std::memcpy(buf_of(d), &count, sizeof count);
    vip_ok(VipPostSend(vi_, d, mh_), "VipPostSend (count)");
  }

 protected:
  int64_t send_ping(uint32_t i) override {
    VIP_DESCRIPTOR* d = free_send(bytes());
    fill_ping(buf_of(d), bytes(), i);
    const int64_t t0 = start_send();
    vip_ok(VipPostSend(vi_, d, mh_), "VipPostSend");
    return t0;
  }

  // The next receive (VipRecvWait, or VipRecvDone until it has one) into `got`; reposted.
  void step(bool wait) override {
    VIP_DESCRIPTOR* d = nullptr;
    VIP_RETURN rc;
    if (wait) rc = VipRecvWait(vi_, kLimitMs, &d);
    else while ((rc = VipRecvDone(vi_, &d)) == VIP_NOT_DONE) {}
    const int64_t at = trace::monotonic_ns();
    vip_ok(rc, wait ? "VipRecvWait" : "VipRecvDone");
    arrived(at, buf_of(done(d, "a receive")), d->CS.Length);
    post_recv(d);
  }

  void answer() override {  // the echo
    VIP_DESCRIPTOR* d = free_send(got.len);
    std::memcpy(buf_of(d), got.data, got.len);
    got.answer_ns = start_send();
    vip_ok(VipPostSend(vi_, d, mh_), "VipPostSend (echo)");
  }

 private:
  uint8_t* buf_of(VIP_DESCRIPTOR* d) {
    return d >= m_->tx && d < m_->tx + kSends ? m_->tx_buf[d - m_->tx] : m_->rx_buf[d - m_->rx];
  }

  // One local segment: the descriptor's buffer, len bytes.
  void describe(VIP_DESCRIPTOR* d, uint32_t len) {
    *d = VIP_DESCRIPTOR{};
    d->CS.Control = VIP_CONTROL_OP_SENDRECV;
    d->CS.SegCount = 1;
    d->CS.Length = d->DS[0].Local.Length = len;
    d->DS[0].Local.Data.Address = buf_of(d);
    d->DS[0].Local.Handle = mh_;
  }

  void post_recv(VIP_DESCRIPTOR* d) {
    describe(d, kBuf);
    vip_ok(VipPostRecv(vi_, d, mh_), "VipPostRecv");
  }

  // A send descriptor whose last send completed, described for len bytes.
  VIP_DESCRIPTOR* free_send(uint32_t len) {
    for (VIP_DESCRIPTOR* d = nullptr; VipSendDone(vi_, &d) == VIP_SUCCESS;) idle_tx_.push_back(done(d, "a send"));
    if (idle_tx_.empty()) {
      VIP_DESCRIPTOR* d = nullptr;
      vip_ok(VipSendWait(vi_, kLimitMs, &d), "VipSendWait");
      idle_tx_.push_back(done(d, "a send"));
    }
    VIP_DESCRIPTOR* d = idle_tx_.back();
    idle_tx_.pop_back();
    describe(d, len);
    return d;
  }

  static VIP_DESCRIPTOR* done(VIP_DESCRIPTOR* d, const char* what) {
    if (!(d->CS.Status & VIP_STATUS_DONE) || (d->CS.Status & VIP_STATUS_ERROR_MASK))
      die(std::string(what) + " completed with status " + std::to_string(d->CS.Status));
    return d;
  }

  // node<n>'s address from the name service, with the discriminator "hop" after it.
  std::vector<uint8_t> address(uint32_t n) {
    static const char kDisc[] = "hop";
    std::vector<uint8_t> raw(sizeof(VIP_NET_ADDRESS) + 64, 0);
    std::string host = "node" + std::to_string(n);
    vip_ok(VipNSGetHostByName(nic_, host.data(), net(raw), 0), "VipNSGetHostByName(" + host + ")");
    VIP_NET_ADDRESS* a = net(raw);
    a->DiscriminatorLen = VIP_UINT16(sizeof kDisc - 1);
    std::memcpy(a->HostAddress + a->HostAddressLen, kDisc, a->DiscriminatorLen);
    return raw;
  }
  static VIP_NET_ADDRESS* net(std::vector<uint8_t>& raw) { return reinterpret_cast<VIP_NET_ADDRESS*>(raw.data()); }

  VIP_NIC_HANDLE nic_ = nullptr;
  VIP_PROTECTION_HANDLE ptag_ = nullptr;
  VIP_MEM_HANDLE mh_ = 0;
  VIP_VI_HANDLE vi_ = nullptr;
  Mem* m_ = nullptr;
  std::vector<VIP_DESCRIPTOR*> idle_tx_;
};

// ---- native AM

constexpr tag_t kAmTag = 0x686f7062656e6368;  // "hopbench"
enum : handler_t { kAmPing = 1, kAmPong = 2 };

void am_ok(int rc, const char* what) {
  if (rc != AM_OK) die(std::string(what) + " -> " + std::to_string(rc));
}

class Am final : public Proto {
 public:
  uint32_t bytes() const override { return 16; }

  void open() override {
    am_ok(AMX_SetTransport("native"), "AMX_SetTransport(native)");
    am_ok(AM_Init(), "AM_Init (native)");
    am_ok(AM_AllocateBundle(AM_SEQ, &eb_), "AM_AllocateBundle");
    am_ok(AM_AllocateEndpoint(eb_, &ep_, &g.sh->am_name[g.who]), "AM_AllocateEndpoint");
    am_ok(AM_SetTag(ep_, kAmTag), "AM_SetTag");
    am_ok(AM_SetHandler(ep_, 0, returned), "AM_SetHandler");
    am_ok(g.who == kServer ? AM_SetHandler(ep_, kAmPing, on_ping) : AM_SetHandler(ep_, kAmPong, on_pong),
          "AM_SetHandler");
    meet();  // both names are in the shared page
    am_ok(AM_Map(ep_, 0, g.sh->am_name[1 - g.who], kAmTag), "AM_Map");
    am_ok(AM_SetExpectedResources(ep_, 1, 4), "AM_SetExpectedResources");
  }

  void close() override { am_ok(AM_Terminate(), "AM_Terminate"); }

 protected:
  int64_t send_ping(uint32_t i) override {
    int32_t a[4];
    fill_ping(reinterpret_cast<uint8_t*>(a), bytes(), i);
    const int64_t t0 = start_send();
    am_ok(AM_Request4(ep_, 0, kAmPing, a[0], a[1], a[2], a[3]), "AM_Request4");
    return t0;
  }

  void step(bool wait) override {
    if (wait) {
      am_ok(AM_SetEventMask(eb_, AM_NOTEMPTY), "AM_SetEventMask");
      am_ok(AM_WaitSema(eb_), "AM_WaitSema");
    }
    am_ok(AM_Poll(eb_), "AM_Poll");
  }

 private:
  static void arrived4(int a, int b, int c, int d) {
    const int64_t at = trace::monotonic_ns();
    const int32_t v[4] = {a, b, c, d};
    arrived(at, v, sizeof v);
  }
  static void on_ping(void* token, int a, int b, int c, int d) {
    arrived4(a, b, c, d);
    got.answer_ns = start_send();
    am_ok(AM_Reply4(token, kAmPong, a, b, c, d), "AM_Reply4");
  }
  static void on_pong(void*, int a, int b, int c, int d) { arrived4(a, b, c, d); }
  static void returned(int status, op_t opcode, void*) {
    die("a message came back: status " + std::to_string(status) + ", opcode " + std::to_string(opcode));
  }

  eb_t eb_ = nullptr;
  ep_t ep_ = nullptr;
};

// ---- FM

enum : FM_ULONG { kFmPing = 1, kFmPong = 2 };
constexpr FM_ULONG kFmWaitUs = 10000;

class Fm final : public Proto {
 public:
  uint32_t bytes() const override { return 16; }

  void open() override {
    ::setenv("ULNIC_FM_RANK", g.who == kServer ? "1" : "0", 1);
    ::setenv("ULNIC_FM_NPROCS", "2", 1);
    ::setenv("ULNIC_FM_DIR", g.fm_dir.c_str(), 1);
    if (FM_register_handler(kFmPing, on_ping) != kFmPing || FM_register_handler(kFmPong, on_pong) != kFmPong)
      die("FM_register_handler failed");
    if (FM_initialize() != 0) die("FM_initialize failed");
  }

  void close() override {
    if (FM_finalize() != 0) die(std::string("FM_finalize: ") + std::strerror(errno));
  }
  void send_count(uint64_t count) override { send(kClient, kFmPong, &count, sizeof count); }

 protected:
  int64_t send_ping(uint32_t i) override {
    uint8_t m[16];
    fill_ping(m, bytes(), i);
    return send(kServer, kFmPing, m, bytes());
  }

  void step(bool wait) override {
    if (wait) FM_wait(kFmWaitUs);
    FM_extract(~FM_ULONG(0));
  }

 private:
  // One message of one piece -> t0 (before FM_begin_message; the trace is
  // armed before FM_end_message, which posts the packet).
  static int64_t send(FM_ULONG dest, FM_ULONG handler, const void* data, uint32_t len) {
    const int64_t t0 = trace::monotonic_ns();
    FM_stream* s = FM_begin_message(dest, len, handler);
    if (!s || FM_send_piece(s, data, len) != 0) die(std::string("sending a message: ") + std::strerror(errno));
    if (traced()) trace::arm();
    if (FM_end_message(s) != 0) die(std::string("FM_end_message: ") + std::strerror(errno));
    return t0;
  }
  static void receive(FM_stream* s) {
    const int64_t at = trace::monotonic_ns();
    uint8_t m[kMaxBytes];
    arrived(at, m, FM_receive(m, s, sizeof m));
  }
  static int on_ping(FM_stream* s, unsigned sender) {
    receive(s);
    if (!g.rate) got.answer_ns = send(sender, kFmPong, got.data, got.len);  // from the handler
    return FM_CONTINUE;
  }
  static int on_pong(FM_stream* s, unsigned) {
    receive(s);
    return FM_CONTINUE;
  }
};

// ---- U-Net

constexpr uint32_t kUnetTag = 0x686f70;  // a side's rx tag: this + its Who
constexpr uint32_t kUnetBuffers = 64;    // free buffers posted (messages longer than a descriptor holds)

void unet_ok(int st, const char* what) {
  if (st != UNET_OK) die(std::string(what) + ": " + unet_strerror(st));
}

// One channel each way. Rounds: 40 B (UNET_INLINE_MAX) messages, inline in
// the send queue and in the receive descriptor; the server answers after the
// step that brought the ping. --rate --bytes N: messages of N bytes (longer
// than 128: sent from slot i mod 64 of the segment's upper half, received
// into free buffers in its lower half, each pushed again once checked).
class Unet final : public Proto {
 public:
  uint32_t bytes() const override { return g.unet_bytes; }

  void open() override {
    buf_ = (std::max(bytes(), 4096u) + 4095) & ~4095u;
    unet_attr a{nullptr, int(g.node), size_t(2) * kRing * buf_, 256, kUnetBuffers, nullptr, 0};  // no U-Net/MM segment
    unet_ok(unet_endpoint_create(&a, &ep_), "unet_endpoint_create");
    seg_ = static_cast<uint8_t*>(unet_segment(ep_, nullptr));
    unet_ok(unet_endpoint_addr(ep_, &g.sh->unet[g.who]), "unet_endpoint_addr");
    if (bytes() > UNET_INLINE_MAX)
      for (uint32_t k = 0; k < kUnetBuffers; ++k)
        unet_ok(unet_free_push(ep_, size_t(k) * buf_, buf_), "unet_free_push");
    meet();  // both addresses are in the shared page (and both channels are made before the first ping)
    unet_ok(unet_channel_create(ep_, g.sh->unet[1 - g.who], kUnetTag + (1 - g.who), kUnetTag + g.who, &ch_),
            "unet_channel_create");
  }

  void quiesce() override { unet_ok(unet_send_wait(ep_, kLimitMs), "a send"); }
  void close() override { unet_ok(unet_endpoint_destroy(ep_), "unet_endpoint_destroy"); }
  void send_count(uint64_t count) override { unet_ok(unet_send_inline(ep_, ch_, &count, sizeof count), "the count"); }

 protected:
  int64_t send_ping(uint32_t i) override {
    if (bytes() <= UNET_SEND_INLINE_MAX) {
      uint8_t m[UNET_SEND_INLINE_MAX];
      fill_ping(m, bytes(), i);
      const int64_t t0 = start_send();
      unet_ok(unet_send_inline(ep_, ch_, m, bytes()), "unet_send_inline");
      return t0;
    }
    const size_t at = (kRing + i % kRing) * size_t(buf_);  // the upper half
    fill_ping(seg_ + at, bytes(), i);
    const int64_t t0 = start_send();
    unet_ok(unet_send(ep_, ch_, at, bytes()), "unet_send");
    return t0;
  }

  void step(bool wait) override {
    unet_rx_desc d;
    const int st = wait ? unet_recv_wait(ep_, &d, kLimitMs) : unet_recv(ep_, &d);
    if (st == UNET_ERR_EMPTY && !wait) return;
    unet_ok(st, wait ? "unet_recv_wait" : "unet_recv");
    arrived(trace::monotonic_ns(), d.data, d.length);
    if (!(d.flags & UNET_RX_INLINE)) unet_ok(unet_free_push(ep_, d.offset, d.buf_len), "unet_free_push");
  }

  void answer() override {
    if (g.rate) return;
    got.answer_ns = start_send();
    unet_ok(unet_send_inline(ep_, ch_, got.data, got.len), "the pong");
  }

 private:
  unet_endpoint* ep_ = nullptr;
  unet_channel ch_ = 0;
  uint8_t* seg_ = nullptr;
  uint32_t buf_ = 0;
};

std::unique_ptr<Proto> make_proto(const std::string& name) {
  if (name == "vmmc") return std::make_unique<Vmmc>();
  if (name == "vipl") return std::make_unique<Vipl>();
  if (name == "am") return std::make_unique<Am>();
  if (name == "fm") return std::make_unique<Fm>();
  if (name == "unet") return std::make_unique<Unet>();
  return nullptr;
}

// --------------------------------------------------------------- results

struct Dist {
  Stats s;
  double p99 = 0;
};

Dist dist(const std::vector<double>& v) { return {summarize(v), quantile(v, 0.99)}; }

Json& dist_json(Json& j, const char* key, const Dist& d) {
  return j.begin_object(key)
      .num("min", d.s.min)
      .num("median", d.s.median)
      .num("p99", d.p99)
      .num("max", d.s.max)
      .num("mean", d.s.mean)
      .num("n", double(d.s.n))
      .end_object();
}

// One direction of the rounds of a style: the hops of its messages.
struct Dir {
  uint32_t used = 0;                        // messages with consistent stamps
  std::map<std::string, uint64_t> dropped;  // messages without stamps, by side
  Dist oneway, hop[5];
  double hop_median_sum = 0;
};

// from / to: the records of the sending / receiving side; counted: the
// sequence words moved by one per round at both (else Filing's count is off
// and no stamp of the style is used).
Dir direction(const Rec* from, const Rec* to, const Cal (&cf)[2], const Cal (&ct)[2], uint32_t warmup,
              uint32_t rounds, bool counted) {
  Dir d;
  std::vector<double> oneway, hop[5];
  for (uint32_t i = warmup; i < rounds; ++i) {
    const Rec &a = from[i], &b = to[i];
    oneway.push_back(double(b.seen_ns - a.sent_ns) / 1e3);
    if (!counted) {
      ++d.dropped["sequence_count_off"];
      continue;
    }
    if (!a.tx_filed || !b.rx_filed) {
      if (!a.tx_filed) ++d.dropped["sender_stamps_not_seen"];
      if (!b.rx_filed) ++d.dropped["receiver_stamps_not_seen"];
      continue;
    }
    const trace::ClockSync ca = clock_at(cf, a.sent_ns), cb = clock_at(ct, b.seen_ns);
    const int64_t t[6] = {a.sent_ns, trace::host_ns(ca, a.tx_seen), trace::host_ns(ca, a.tx_sent),
                          trace::host_ns(cb, b.rx_seen), trace::host_ns(cb, b.rx_done), b.seen_ns};
    for (int h = 0; h < 5; ++h) hop[h].push_back(double(t[h + 1] - t[h]) / 1e3);
  }
  d.used = uint32_t(hop[0].size());
  d.oneway = dist(oneway);
  for (int h = 0; h < 5; ++h) d.hop_median_sum += (d.hop[h] = dist(hop[h])).s.median;
  return d;
}

struct Row {
  std::string style;
  uint32_t measured = 0;
  Dist rtt_half, turnaround;  // the client's RTT / 2; the server's seen -> its reply's t0
  Dir ping, pong;
  bool pong_traced = false;
  Cal cal[2][2];
};

// recs: [side][round] of one style; moved: [side][tx, rx].
Row combine(const std::string& style, const Rec* recs, uint32_t warmup, uint32_t rounds, const Cal (&cal)[2][2],
            const uint64_t (&moved)[2][2]) {
  const Rec *client = recs, *server = recs + rounds;
  Row r;
  r.style = style;
  r.measured = rounds - warmup;
  std::copy(&cal[0][0], &cal[0][0] + 4, &r.cal[0][0]);
  std::vector<double> rtt, turn;
  for (uint32_t i = warmup; i < rounds; ++i) {
    rtt.push_back(double(client[i].seen_ns - client[i].sent_ns) / 2e3);
    turn.push_back(double(server[i].sent_ns - server[i].seen_ns) / 1e3);
  }
  r.rtt_half = dist(rtt);
  r.turnaround = dist(turn);
  r.ping = direction(client, server, cal[kClient], cal[kServer], warmup, rounds,
                     moved[kClient][0] == rounds && moved[kServer][1] == rounds);
  r.pong_traced = g.trace_pong;
  if (g.trace_pong)
    r.pong = direction(server, client, cal[kServer], cal[kClient], warmup, rounds,
                       moved[kServer][0] == rounds && moved[kClient][1] == rounds);
  return r;
}

std::string cell(const Dist& d) {
  return fmt("%.2f", d.s.median) + " [" + fmt("%.2f", d.s.min) + " .. " + fmt("%.2f", d.p99) + "]";
}

std::string drops(const Dir& d) {
  std::string s = std::to_string(d.used) + " used";
  for (auto& [why, n] : d.dropped) s += ", " + why + " " + std::to_string(n);
  return s;
}

void print_rows(const std::string& proto, const std::vector<Row>& rows) {
  std::printf("\n== %s: one-way latency by hop, us: median [min .. p99]; ping = client (node A) -> server (node B)\n",
              proto.c_str());
  for (const Row& r : rows) {
    std::printf("%s/%s: %u rounds; RTT/2 %s; server turnaround %s\n", proto.c_str(), r.style.c_str(), r.measured,
                cell(r.rtt_half).c_str(), cell(r.turnaround).c_str());
    std::printf("  %-24s%-32s%s\n", "", "ping", r.pong_traced ? "pong" : "pong (not traced)");
    auto line = [&](const char* name, const Dist& a, const Dist& b) {
      std::printf("  %-24s%-32s%s\n", name, cell(a).c_str(), r.pong_traced ? cell(b).c_str() : "-");
    };
    for (int h = 0; h < 5; ++h) line(kHopTitle[h], r.ping.hop[h], r.pong.hop[h]);
    std::printf("  %-24s%-32s%s\n", "sum of hop medians", fmt("%.2f", r.ping.hop_median_sum).c_str(),
                r.pong_traced ? fmt("%.2f", r.pong.hop_median_sum).c_str() : "-");
    line("one-way (t0 -> seen)", r.ping.oneway, r.pong.oneway);
    std::printf("  %-24s%-32s%s\n", "stamps", drops(r.ping).c_str(), r.pong_traced ? drops(r.pong).c_str() : "-");
    std::printf("  clock calibration error (half the shortest NOP round trip), us: node A %.2f / %.2f, node B "
                "%.2f / %.2f (before / after); offset drift A %+.2f, B %+.2f\n",
                r.cal[0][0].error_ns / 1e3, r.cal[0][1].error_ns / 1e3, r.cal[1][0].error_ns / 1e3,
                r.cal[1][1].error_ns / 1e3, (r.cal[0][1].offset_ns - r.cal[0][0].offset_ns) / 1e3,
                (r.cal[1][1].offset_ns - r.cal[1][0].offset_ns) / 1e3);
  }
}

void cal_json(Json& j, const char* key, const Cal (&c)[2]) {
  j.begin_object(key);
  for (int k = 0; k < 2; ++k)
    j.begin_object(k ? "after" : "before")
        .num("offset_ns", double(c[k].offset_ns))
        .num("error_ns", double(c[k].error_ns))
        .end_object();
  j.num("drift_ns", double(c[1].offset_ns - c[0].offset_ns)).end_object();
}

void dir_json(Json& j, const char* key, const Dir& d) {
  j.begin_object(key).num("used", d.used).counters("dropped", d.dropped);
  dist_json(j, "oneway_us", d.oneway);
  j.begin_object("hops_us");
  for (int h = 0; h < 5; ++h) dist_json(j, kHops[h], d.hop[h]);
  j.end_object().num("hop_median_sum_us", d.hop_median_sum).end_object();
}

void rows_json(Json& j, const std::string& proto, uint32_t bytes, const std::vector<Row>& rows) {
  j.begin_array("rows");
  for (const Row& r : rows) {
    j.begin_object().str("protocol", proto).str("style", r.style).num("bytes", bytes).num("measured", r.measured);
    dist_json(j, "rtt_half_us", r.rtt_half);
    dist_json(j, "turnaround_us", r.turnaround);
    dir_json(j, "ping", r.ping);
    if (r.pong_traced) dir_json(j, "pong", r.pong);
    j.begin_object("clock");
    cal_json(j, "node_a", r.cal[kClient]);
    cal_json(j, "node_b", r.cal[kServer]);
    j.end_object().end_object();
  }
  j.end_array();
}

// ------------------------------------------------------------------ modes

struct Options {
  std::string json;
  int iters = 3000, warmup = -1;
  bool quick = false;
  std::vector<std::string> styles = {"wait", "poll"};
  bool trace_pong = true;
  uint32_t client_node = 0, server_node = 1;
  bool rate = false;  // --rate
  uint32_t depth = 16, credit_every = 4, rate_msgs = 4000;
  int rate_samples = 10;
};

int run_floors(const Options& o) {
  program = "hop_bench floors";
  const int n = o.quick ? 300 : 3000;
  Machine m = machine_facts();
  print_machine(m);
  PingPong pp = pingpong_floor(2000, o.quick ? 5000 : 20000);
  EventfdPingPong efd = eventfd_floor(n, 0, 0);
  auto nic = ulnic::Nic::open(ulnic::NicOptions{"", int(o.client_node), ""});
  if (!nic) die("open node " + std::to_string(o.client_node) + ": " + nic.error().message);
  std::vector<double> nop;
  for (int i = 0; i < 200 + n; ++i) {
    abi::SqEntry* e = (*nic)->next_sqe();
    if (!e) die("send queue full");
    e->opcode = abi::kOpNop;
    e->user_data = uint64_t(i);
    const auto t0 = Clock::now();
    (*nic)->submit();
    const abi::CqEntry c = spin_cq(**nic, "NOP", int(kLimitS));
    const auto t1 = Clock::now();
    if (c.status != abi::kCqOk) die("a NOP failed");
    if (i >= 200) nop.push_back(us_between(t0, t1));
  }
  const Dist d = dist(nop);
  const Stats efd_oneway = scaled(efd.busy_rtt_us, 0.5);
  std::printf("\n== floors (host only, and one spinning NIC), us: min / median / max\n");
  std::printf("  %-44s%9.3f%9.3f%9.3f\n", "shared-memory ping-pong, one-way", pp.oneway_us.min, pp.oneway_us.median,
              pp.oneway_us.max);
  std::printf("  %-44s%9.3f%9.3f%9.3f\n", "blocking eventfd ping-pong, one-way", efd_oneway.min, efd_oneway.median,
              efd_oneway.max);
  std::printf("  %-44s%9.3f%9.3f%9.3f  (p99 %.3f)\n", "NOP post -> spinning NIC -> poll, round trip", d.s.min,
              d.s.median, d.s.max, d.p99);
  Json j;
  j.begin_object().str("benchmark", "hop_bench floors");
  machine_json(j, m, "clock_now_ns");
  j.begin_object("floors");
  pingpong_json(j, pp);
  j.begin_object("eventfd_pingpong").stats("rtt_us", efd.busy_rtt_us).stats("oneway_us", efd_oneway).end_object();
  dist_json(j, "nic_nop_rtt_us", d);
  j.num("nic_node", o.client_node).end_object().end_object();
  if (!o.json.empty()) write_json(j, o.json);
  return 0;
}

// One style's rounds, on either side: its records in recs[side][round].
// The client's stamps are all there once the pong is (its ping's long
// before; the pong's a few us after the client saw it). The server waits
// only for its ping's rx stamps after answering; its pong's tx stamps are
// filed by whichever later read sees them (the NIC may take the answer from
// the send queue after the server looked).
void run_style(Proto& p, int style, bool wait, uint32_t rounds) {
  Rec* mine = g.recs + (size_t(style) * 2 + g.who) * rounds;
  std::memset(mine, 0, sizeof(Rec) * rounds);
  got.next_ping = 0;
  calibrate_in_turn(g.sh->cal[style], 0);
  const abi::SlotTrace base = proto_stamps();
  const Filing f{traced(), g.who == kServer || g.trace_pong, base.tx_seq, base.rx_seq};
  meet();
  for (uint32_t i = 0; i < rounds; ++i) {
    const Times t = g.who == kClient ? p.ping(i, wait) : p.pong(i, wait);
    mine[i].sent_ns = t.sent_ns, mine[i].seen_ns = t.seen_ns;
    f.file(mine, rounds, await_stamps(f, i, g.who == kClient));
    g.watchdog.tick();
  }
  meet();
  const abi::SlotTrace end = await_stamps(f, rounds - 1, true);  // the last messages are all through
  f.file(mine, rounds, end);
  g.sh->moved[style][g.who][0] = end.tx_seq - base.tx_seq;
  g.sh->moved[style][g.who][1] = end.rx_seq - base.rx_seq;
  calibrate_in_turn(g.sh->cal[style], 1);
}

// Both sides of a protocol's run: the shared page with `nrecs` Rec records
// after it, the fork (the client here, the server in the child), each side
// on its node with ULNIC_NODE set and a watchdog, the calibration Nic (if
// `calibrated`), the protocol open and both sides met. -> the protocol.
std::unique_ptr<Proto> open_sides(const std::string& proto, const Options& o, size_t nrecs, bool calibrated,
                                  const Machine& m, const std::string& what) {
  const size_t bytes = sizeof(Shared) + sizeof(Rec) * nrecs;
  void* mem = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (mem == MAP_FAILED) die(std::string("mmap: ") + std::strerror(errno));
  g.sh = new (mem) Shared();
  g.recs = reinterpret_cast<Rec*>(static_cast<char*>(mem) + sizeof(Shared));
  g.trace_pong = o.trace_pong;
  if (proto == "fm") {
    std::string tmpl = (std::filesystem::temp_directory_path() / "hop_bench-fm-XXXXXX").string();
    if (!::mkdtemp(tmpl.data())) die(std::string("mkdtemp: ") + std::strerror(errno));
    g.fm_dir = tmpl;
  }
  std::fflush(stdout);
  std::fflush(stderr);
  const pid_t child = fork_child();
  g.who = child == 0 ? kServer : kClient;
  g.node = g.who == kClient ? o.client_node : o.server_node;
  g.peer = g.who == kClient ? o.server_node : o.client_node;
  program = "hop_bench " + proto + (g.who == kClient ? " client" : " server");
  if (g.who == kClient) g.server = child, watch_server();
  ::setenv("ULNIC_NODE", std::to_string(g.node).c_str(), 1);
  std::atexit(at_exit);
  g.watchdog.start(kLimitS);
  g.watchdog.phase("open");

  if (calibrated) {
    auto cal = ulnic::Nic::open(ulnic::NicOptions{"", int(g.node), ""});
    if (!cal) die("open node " + std::to_string(g.node) + " (calibration Nic): " + cal.error().message);
    g.cal_nic = std::move(*cal);
  }
  std::unique_ptr<Proto> p = make_proto(proto);
  p->open();
  meet();
  if (g.who == kClient) {
    print_machine(m);
    std::printf("%s: client on node %u, server on node %u, %u B %s\n", proto.c_str(), g.node, g.peer, p->bytes(),
                what.c_str());
  }
  return p;
}

// Both sides: what is in flight reaped, both met, the protocol closed. The
// server returns false; the client true once the server ended well.
bool close_sides(Proto& p) {
  g.watchdog.phase("close");
  p.quiesce();
  meet();
  p.close();
  g.clean = true;
  g.cal_nic.reset();
  if (g.who == kServer) return false;
  const auto start = Clock::now();  // the server's end (watch_server ends us if it failed)
  while (!g.server_done.load()) {
    if (seconds_since(start) > kLimitS) die("the server did not end");
    logp::sleep_us(10'000);
  }
  return true;
}

// The document's head: benchmark, protocol, message bytes, nodes.
Json& head_json(Json& j, const char* benchmark, const std::string& proto, uint32_t bytes) {
  j.begin_object().str("benchmark", benchmark).str("protocol", proto).num("bytes", bytes);
  return j.num("client_node", g.node).num("server_node", g.peer);
}

int run_proto(const std::string& proto, const Options& o) {
  if (o.styles.empty() || o.styles.size() > 2) die("--styles: one or two of wait, poll");
  // At least 1000 unmeasured rounds: the first pass over a fresh slot's
  // rings touches pages QEMU has not mapped yet (~13 us each on a VM:
  // docs/platform.md), and native AM's first 300 rounds on a new cluster
  // took 138 us RTT/2 against 26 after them.
  const uint32_t warmup = uint32_t(o.warmup >= 0 ? o.warmup : std::max(1000, o.iters / 10));
  const uint32_t rounds = warmup + uint32_t(o.iters);
  const Machine m = machine_facts();
  std::unique_ptr<Proto> p =
      open_sides(proto, o, 2 * rounds * o.styles.size(), true, m,
                 "pings, " + std::to_string(rounds) + " rounds per style (" + std::to_string(warmup) + " warm-up)");
  std::vector<Row> rows;
  for (size_t s = 0; s < o.styles.size(); ++s) {
    g.watchdog.phase(proto + "/" + o.styles[s]);
    run_style(*p, int(s), o.styles[s] == "wait", rounds);
    if (g.who == kClient)
      rows.push_back(combine(o.styles[s], g.recs + s * 2 * rounds, warmup, rounds, g.sh->cal[s], g.sh->moved[s]));
  }
  if (!close_sides(*p)) return 0;
  print_rows(proto, rows);
  Json j;
  head_json(j, "hop_bench", proto, p->bytes());
  j.begin_object("params").num("iters", o.iters).num("warmup", warmup).num("cal_samples", kCalSamples);
  j.boolean("pong_traced", o.trace_pong).end_object();
  machine_json(j, m, "clock_now_ns");
  rows_json(j, proto, p->bytes(), rows);
  j.boolean("verified", true).end_object();
  if (!o.json.empty()) write_json(j, o.json);
  return 0;
}

// --rate, one style at either side: the client's runs' msgs/s (the first run,
// the warm-up, left out); the server checks and acknowledges.
// `cpu` (client) measures the measured runs' CPU: both hosts, both NICs.
std::vector<double> rate_style(Proto& p, const Options& o, bool wait, CpuMeter& cpu) {
  const uint64_t run = o.rate_msgs;
  tally = RateCount{};
  tally.bytes = p.bytes();
  tally.total = run * uint64_t(o.rate_samples + 1);
  if (g.who == kServer) tally.seen.assign(tally.total, 0);
  meet();
  std::vector<double> rates;
  if (g.who == kServer) {
    for (uint64_t told = 0; told < tally.total;) {
      p.look(wait);
      if (tally.count >= told + o.credit_every || (tally.count > told && tally.count % run == 0))
        p.send_count(told = tally.count);
      p.reap();
      g.watchdog.tick();
    }
  } else {
    uint64_t sent = 0;
    for (uint64_t end = run; end <= tally.total; end += run) {
      if (end == 2 * run) cpu.start();
      const auto t0 = Clock::now();
      while (tally.acked < end) {
        while (sent < end && sent - tally.acked < o.depth) p.send_message(uint32_t(sent++));
        p.reap();
        if (tally.acked < end) p.look(wait);
        g.watchdog.tick();
      }
      if (end > run) rates.push_back(double(run) / seconds_since(t0));
    }
    cpu.stop();
  }
  meet();
  return rates;
}

int run_rate(const std::string& proto, const Options& o) {
  if (o.styles.empty() || o.styles.size() > 2) die("--styles: one or two of wait, poll");
  if (proto == "am") die("--rate: vmmc, vipl, fm or unet (native AM's rate: am_logp's depth section)");
  g.rate = true;
  const Machine m = machine_facts();
  std::unique_ptr<Proto> p = open_sides(
      proto, o, 0, false, m,
      "messages, depth " + std::to_string(o.depth) + " (acknowledged every " + std::to_string(o.credit_every) +
          "), " + std::to_string(o.rate_samples) + " runs of " + std::to_string(o.rate_msgs) + " per style after a "
          "warm-up run");
  struct RateRow {
    std::string style;
    Stats st;
    CpuMeter cpu;
  };
  std::vector<RateRow> rows;
  for (const std::string& style : o.styles) {
    g.watchdog.phase(proto + "/rate/" + style);
    CpuMeter cpu;
    cpu.add("host_client", ::getpid());
    cpu.add("host_server", g.server);
    cpu.add("nic_client", node_qemu_pid(g.node));
    cpu.add("nic_server", node_qemu_pid(g.peer));
    Stats st = summarize(rate_style(*p, o, style == "wait", cpu));
    rows.push_back({style, st, cpu});
  }
  if (!close_sides(*p)) return 0;
  const double measured = double(o.rate_msgs) * o.rate_samples;  // the CPU meter's stretch
  std::printf("\n== %s: message rate, %u B messages, depth %u, msgs/s (each counted once the server checked it)\n",
              proto.c_str(), p->bytes(), o.depth);
  std::printf("  %-8s%12s%12s%12s%6s\n", "style", "min", "median", "max", "n");
  for (const RateRow& r : rows)
    std::printf("  %-8s%12.0f%12.0f%12.0f%6zu\n    %s\n", r.style.c_str(), r.st.min, r.st.median, r.st.max, r.st.n,
                r.cpu.line(measured, m.nproc).c_str());
  Json j;
  head_json(j, "hop_bench rate", proto, p->bytes());
  j.begin_object("params").num("depth", o.depth).num("credit_every", o.credit_every).num("msgs_per_run", o.rate_msgs);
  j.num("runs", o.rate_samples).num("warmup_runs", 1).end_object();
  machine_json(j, m, "clock_now_ns");
  j.begin_array("rows");
  for (const RateRow& r : rows) {
    j.begin_object().str("protocol", proto).str("style", r.style).num("bytes", p->bytes()).num("depth", o.depth)
        .stats("msgs_per_s", r.st);
    r.cpu.json(j, measured);
    j.end_object();
  }
  j.end_array().boolean("verified", true).end_object();
  if (!o.json.empty()) write_json(j, o.json);
  return 0;
}

void usage() {
  std::fprintf(stderr,
               "usage: hop_bench floors [--json FILE] [--quick] [--node N]\n"
               "       hop_bench vmmc|vipl|am|fm|unet [--json FILE] [--iters N] [--warmup N] [--styles wait,poll]\n"
               "                 [--client-node N] [--server-node N] [--ping-only]\n"
               "       hop_bench vmmc|vipl|fm|unet --rate [--json FILE] [--quick] [--depth D] [--msgs N]\n"
               "                 [--samples S] [--credit-every K] [--styles wait,poll] [--client-node N] [--server-node N]\n"
               "                 [--bytes N (unet: 8 .. 65536)]\n"
               "On a running cluster ($ULNIC_CLUSTER, $ULNIC_RUNTIME_DIR); tests/bench/hop_bench.py brings one up.\n");
  std::exit(2);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) usage();
  const std::string mode = argv[1];
  program = "hop_bench " + mode;
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  Options o;
  int msgs = 0, samples = 0;
  for (int i = 2; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&] { return next_arg(argc, argv, i, usage); };
    if (a == "--json") o.json = next();
    else if (a == "--quick") o.quick = true, o.iters = 300;
    else if (a == "--iters") o.iters = std::max(1, std::atoi(next().c_str()));
    else if (a == "--warmup") o.warmup = std::max(0, std::atoi(next().c_str()));
    else if (a == "--node" || a == "--client-node") o.client_node = uint32_t(std::atoi(next().c_str()));
    else if (a == "--server-node") o.server_node = uint32_t(std::atoi(next().c_str()));
    else if (a == "--ping-only") o.trace_pong = false;
    else if (a == "--rate") o.rate = true;
    else if (a == "--depth") o.depth = uint32_t(std::clamp(std::atoi(next().c_str()), 1, int(kMaxDepth)));
    else if (a == "--credit-every") o.credit_every = uint32_t(std::max(1, std::atoi(next().c_str())));
    else if (a == "--msgs") msgs = std::max(1, std::atoi(next().c_str()));
    else if (a == "--samples") samples = std::max(1, std::atoi(next().c_str()));
    else if (a == "--bytes") g.unet_bytes = uint32_t(std::clamp(std::atoi(next().c_str()), 8, UNET_MESSAGE_MAX));
    else if (a == "--styles") {
      o.styles.clear();
      std::stringstream ss(next());
      for (std::string s; std::getline(ss, s, ',');)
        if (s == "wait" || s == "poll") o.styles.push_back(s);
        else usage();
    } else usage();
  }
  if (o.quick) o.rate_msgs = 1000, o.rate_samples = 4;
  if (msgs) o.rate_msgs = uint32_t(msgs);
  if (samples) o.rate_samples = samples;
  o.credit_every = std::min(o.credit_every, o.depth);
  if (mode == "floors") return run_floors(o);
  if (!make_proto(mode)) usage();
  if (g.unet_bytes != UNET_INLINE_MAX && (mode != "unet" || !o.rate)) usage();  // --bytes: U-Net's --rate only
  return o.rate ? run_rate(mode, o) : run_proto(mode, o);
}
