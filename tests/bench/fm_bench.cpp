// fm_bench: Fast Messages 2.x (host/fm/include/fm.h) one-way bandwidth and
// ping-pong latency, the same through the MPI-like layer over it (fm_mp.h),
// and the times of the Split-C style global-memory operations (fm_gm.h).
// One process is one FM rank; the job comes from the environment
// (ULNIC_FM_RANK, ULNIC_FM_NPROCS = 2, ULNIC_FM_DIR, ULNIC_NODE, ...). Rank 1
// serves, rank 0 measures, prints its tables and writes --json. One layer
// per job (MP and GM each call FM_initialize in their init):
//
//   fm_bench fm     [--json FILE] [--quick] [--bw-sizes LIST] [--lat-sizes LIST]
//                   [--reps N] [--rep-bytes B] [--max-msgs N] [--iters N]
//   fm_bench mp     (the same options)
//   fm_bench gm     [--json FILE] [--quick] [--gm-sizes LIST] [--outstanding K]
//                   [--samples N]
//   fm_bench floors [--json FILE] [--quick] [--bw-sizes LIST] [--lat-sizes LIST]
//                   (host only, no FM: the shared-memory ping-pong and memcpy)
//
// Rank 1 takes the mode, --json (its own counters) and --idle-timeout S;
// everything else it learns from rank 0's messages.
//
// fm: a repetition streams M messages of one size (FM_begin_message,
//     FM_send_piece, FM_end_message), then a small END message; rank 1's
//     data handler FM_receive's each whole message into one buffer, its END
//     handler answers with an ACK (what came), so a repetition's time is end
//     to end: bytes / (first begin .. ACK handled). After sending the ACK
//     rank 1 checks the last message byte for byte (outside the time).
//     Latency: a PING of the size, answered from the handler with a PONG of
//     the same bytes; one-way = RTT / 2. Waiting: FM_extract, then FM_wait.
// mp: the same through MP: rank 1 keeps a window of W (16) MP_Irecv posted
//     (a ring over the whole run: each completed receive is posted again for
//     the message W later), sends the ACK with MP_Send when a repetition's
//     M messages are in; rank 0 sends windows of W MP_Isend, MP_Waitall, and
//     MP_Recv's the ACK. Latency: MP_Send / MP_Recv ping-pong. M is the same
//     as in fm for a size, so the two are comparable (the driver alternates
//     fm and mp jobs and reports MP / FM).
// gm: rank 1 exposes a region (a control word, an area to read, an area to
//     write) and serves inside gm_barrier / gm_all_store_sync; rank 0 times
//     gm_read and gm_write one by one, and gm_get / gm_put (K issued, then
//     gm_sync) and gm_store (K issued, then gm_all_store_sync) amortized over
//     K, per operation; 8 B with the scalar calls (gm_read_i64, ...). Every
//     value read is checked, and what was written is read back and checked.
//
// A reply that never comes (30 s) or a library call that does not return
// (45 s without progress, with the phase named) ends the run, exit 1; a
// stuck call first prints FM's counters and `ulnic node status`.
// tests/bench/fm_bench.py runs it on a private two-node cluster.
#include <fm.h>
#include <fm_gm.h>
#include <fm_mp.h>

#include <cstdlib>
#include <filesystem>

#include "logp_common.h"

namespace {

using namespace bench;

constexpr uint32_t kMagic = 0x464d4231;  // "FMB1"
constexpr double kReplyLimitS = 30;
constexpr FM_ULONG kWaitUs = 10000;
constexpr FM_ULONG kAll = ~FM_ULONG(0);
constexpr uint32_t kWindow = 16;  // MP: receives posted / sends per MP_Waitall

uint8_t pattern(uint64_t i, uint32_t seed = 0) {
  return uint8_t((i * 0x9e3779b1u) >> 13 ^ (i >> 9) ^ (seed * 0x6b));
}

void fill(uint8_t* p, size_t n, uint32_t seed) {
  for (size_t i = 0; i < n; ++i) p[i] = pattern(i, seed);
}

// Where p[0..n) differs from the pattern (offset `from` onwards): the first
// offset, or -1.
int64_t differs(const uint8_t* p, size_t n, uint32_t seed, uint64_t from = 0) {
  for (size_t i = 0; i < n; ++i)
    if (p[i] != pattern(from + i, seed)) return int64_t(i);
  return -1;
}

logp::Watchdog watchdog;
std::string phase = "set-up";

void set_phase(const std::string& p) {
  phase = p;
  watchdog.phase(p);
  watchdog.tick();
}

// Before a stuck run ends: this process's FM counters (read from the
// watchdog's thread while the stuck call sleeps: a diagnostic, not exact)
// and the NIC's state as `ulnic node status --json` sees it (links too), so
// a hang says whether packets were left uncompleted on the NIC or never
// arrived.
void report_stall() {
  FM_stats st{};
  FM_get_stats(&st);
  std::fprintf(stderr,
               "%s: FM at the stall: packets sent %llu received %llu in flight %llu, credit packets %llu/%llu, "
               "credit waits %llu, bad %llu, send errors %llu, lost %llu, handlers yielded %llu\n",
               program.c_str(), st.packets_sent, st.packets_received, st.in_flight, st.credit_packets_sent,
               st.credit_packets_received, st.credit_waits, st.bad_packets, st.send_errors, st.lost_packets,
               st.handler_yields);
  std::error_code ec;
  auto dir = std::filesystem::read_symlink("/proc/self/exe", ec).parent_path();
  const char* node = std::getenv("ULNIC_NODE");
  std::string cmd = (dir / "ulnic").string() + " node status --json -n " + (node ? node : "0") + " 1>&2";
  std::fflush(stderr);
  if (std::system(cmd.c_str()) != 0) std::fprintf(stderr, "%s: `%s` failed\n", program.c_str(), cmd.c_str());
}

// A run's counts.
struct Plan {
  std::vector<uint32_t> bw_sizes, lat_sizes, gm_sizes;
  int reps = 5, warm = 1;                // bandwidth repetitions per size (+ warm-up)
  uint64_t rep_bytes = 2u << 20;         // a repetition's bytes, at least ...
  uint32_t min_msgs = kWindow, max_msgs = 4096;  // ... within these message counts
  int iters = 300, lat_warm = 30;        // ping-pongs per size
  uint32_t outstanding = 32;             // gm: K split-phase operations per sync
  int gm_samples = 30;                   // gm: samples per operation and size
  void quick() {
    reps = 3, rep_bytes = 1u << 20, max_msgs = 1024, iters = 100, lat_warm = 10, gm_samples = 6;
  }
  // Messages per repetition for a size: a multiple of the MP window.
  uint32_t msgs(uint32_t size) const {
    uint64_t m = std::clamp<uint64_t>((rep_bytes + size - 1) / size, min_msgs, max_msgs);
    return uint32_t((m + kWindow - 1) / kWindow * kWindow);
  }
};

struct BwRow {
  uint32_t size = 0, msgs = 0;
  std::vector<double> bps;  // bytes per second, one per repetition
  bool verified = false;
  CpuMeter cpu;  // over the measured repetitions (none if rank 1 did not say who it is)
};

// Rank 1's pid and node ($ULNIC_NODE), in its first answer of a bandwidth
// row: rank 0 meters where the row's CPU went (CpuMeter).
struct Who {
  int32_t pid = 0, node = -1;
};
Who me() {
  const char* node = std::getenv("ULNIC_NODE");
  return Who{int32_t(::getpid()), node && *node ? std::atoi(node) : 0};
}
// Rank 0 and rank 1 (`peer`) and both NICs, started after the warm-up.
void start_meter(BwRow& r, const Who& peer) {
  if (peer.pid <= 0) return;
  const Who self = me();
  r.cpu.add("host_client", self.pid);
  r.cpu.add("host_server", peer.pid);
  r.cpu.add("nic_client", node_qemu_pid(uint32_t(self.node)));
  r.cpu.add("nic_server", node_qemu_pid(uint32_t(peer.node)));
  r.cpu.start();
}

struct LatRow {
  uint32_t size = 0;
  std::vector<double> oneway_us;
  bool verified = false;
};

void sample_array(Json& j, const char* key, const std::vector<double>& v) {
  j.begin_array(key);
  for (double x : v) j.num(nullptr, x);
  j.end_array();
}

void print_bw_head(const char* layer) {
  std::printf("\n== %s one-way bandwidth, MB/s (1e6 B/s per repetition)\n%-10s%8s%12s%12s%12s%6s\n", layer, "size",
              "msgs", "min", "median", "max", "n");
}

void print_bw(const BwRow& r) {
  Stats s = scaled(summarize(r.bps), 1e-6);
  std::printf("%-10s%8u%12.2f%12.2f%12.2f%6zu%s\n", size_name(r.size).c_str(), r.msgs, s.min, s.median, s.max, s.n,
              r.verified ? "" : "  NOT VERIFIED");
  if (std::string cpu = r.cpu.shares_line(::sysconf(_SC_NPROCESSORS_ONLN)); !cpu.empty())
    std::printf("          %s\n", cpu.c_str());
}

void print_lat_head(const char* layer) {
  std::printf("\n== %s ping-pong, one-way latency (RTT/2), us\n%-10s%12s%12s%12s%6s\n", layer, "size", "min",
              "median", "max", "n");
}

void print_lat(const LatRow& r) {
  Stats s = summarize(r.oneway_us);
  std::printf("%-10s%12.2f%12.2f%12.2f%6zu%s\n", size_name(r.size).c_str(), s.min, s.median, s.max, s.n,
              r.verified ? "" : "  NOT VERIFIED");
}

void rows_json(Json& j, const std::vector<BwRow>& bw, const std::vector<LatRow>& lat) {
  j.begin_array("bandwidth");
  for (const BwRow& r : bw) {
    j.begin_object().num("size", r.size).num("msgs_per_rep", r.msgs).stats("bytes_per_s", summarize(r.bps));
    sample_array(j, "samples_bytes_per_s", r.bps);
    r.cpu.shares_json(j);
    j.boolean("verified", r.verified).end_object();
  }
  j.end_array().begin_array("latency");
  for (const LatRow& r : lat) {
    j.begin_object().num("size", r.size).stats("oneway_us", summarize(r.oneway_us));
    sample_array(j, "samples_oneway_us", r.oneway_us);
    j.boolean("verified", r.verified).end_object();
  }
  j.end_array();
}

// The layers' counters, taken just before their finalize (which may reset them).
struct Counters {
  FM_stats fm{};
  MP_Stats mp{};
  gm_stats gm{};
} counters;

void fm_stats_json(Json& j) {
  const FM_stats& s = counters.fm;
  j.begin_object("fm_stats")
      .num("packets_sent", double(s.packets_sent))
      .num("packets_received", double(s.packets_received))
      .num("credit_packets_sent", double(s.credit_packets_sent))
      .num("credit_packets_received", double(s.credit_packets_received))
      .num("credit_waits", double(s.credit_waits))
      .num("bad_packets", double(s.bad_packets))
      .num("send_errors", double(s.send_errors))
      .num("handler_yields", double(s.handler_yields))
      .num("max_live_handlers", double(s.max_live_handlers))
      .end_object();
}

void mp_stats_json(Json& j) {
  const MP_Stats& s = counters.mp;
  j.begin_object("mp_stats")
      .num("eager_sent", double(s.eager_sent))
      .num("rendezvous_sent", double(s.rendezvous_sent))
      .num("direct", double(s.direct))
      .num("unexpected", double(s.unexpected))
      .num("staged_bytes", double(s.staged_bytes))
      .num("truncated", double(s.truncated))
      .num("bad_packets", double(s.bad_packets))
      .end_object();
}

int rank_from_env() {
  const char* r = std::getenv("ULNIC_FM_RANK");
  if (!r || (std::string(r) != "0" && std::string(r) != "1")) die("ULNIC_FM_RANK must be 0 or 1 (a two-rank job)");
  return std::atoi(r);
}

// ================================================================ raw FM

enum : FM_ULONG { kHData = 1, kHEnd, kHAck, kHPing, kHPong, kHQuit };

struct EndMsg {
  uint32_t magic, rep;
  uint64_t msgs, bytes;  // what the sender sent in the repetition
};
struct AckMsg {
  uint32_t magic, rep;
  uint64_t msgs, bytes;       // what came in the repetition
  uint64_t checked, bad;      // messages checked byte for byte so far, wrong among them
  Who who;                    // rank 1
};

struct FmState {
  std::vector<uint8_t> buf, ping, src;
  // rank 1
  uint64_t rep_msgs = 0, rep_bytes = 0, last_len = 0, checked = 0, bad = 0;
  bool verify_pending = false, ack_pending = false, pong_pending = false, quit = false;
  unsigned peer = 0;
  uint64_t pong_len = 0;
  AckMsg ack{};
  // rank 0
  uint64_t acks = 0, pongs = 0;
} fm;

// One message from `buf`, outside handlers (FM_begin_message may block).
void fm_send(FM_ULONG dest, FM_ULONG handler, const void* buf, FM_ULONG len) {
  FM_stream* s = FM_begin_message(dest, len, handler);
  if (!s) die("FM_begin_message -> NULL outside a handler (" + phase + ")");
  if (FM_send_piece(s, buf, len) != 0) die("FM_send_piece failed (" + phase + ")");
  if (FM_end_message(s) != 0) die("FM_end_message failed (" + phase + ")");
}

// Inside a handler: false if the credits are not there now.
bool fm_try_send(FM_ULONG dest, FM_ULONG handler, const void* buf, FM_ULONG len) {
  FM_stream* s = FM_begin_message(dest, len, handler);
  if (!s) return false;
  if (FM_send_piece(s, buf, len) != 0 || FM_end_message(s) != 0) die("FM_send_piece / FM_end_message in a handler");
  return true;
}

// rank 1's handlers
int on_data(FM_stream* s, unsigned) {
  const FM_ULONG n = FM_receive(fm.buf.data(), s, fm.buf.size());
  ++fm.rep_msgs;
  fm.rep_bytes += n;
  fm.last_len = n;
  return FM_CONTINUE;
}

// Answers at once if it can; returns FM_QUIT so that nothing overwrites the
// buffer before the main loop has checked the last message.
int on_end(FM_stream* s, unsigned sender) {
  EndMsg e{};
  if (FM_receive(&e, s, sizeof e) != sizeof e || e.magic != kMagic) die("a bad END message");
  fm.verify_pending = fm.rep_msgs > 0;
  fm.ack = AckMsg{kMagic, e.rep, fm.rep_msgs, fm.rep_bytes, fm.checked, fm.bad, me()};
  fm.rep_msgs = fm.rep_bytes = 0;
  fm.peer = sender;
  fm.ack_pending = !fm_try_send(sender, kHAck, &fm.ack, sizeof fm.ack);
  watchdog.tick();
  return FM_QUIT;
}

int on_ping(FM_stream* s, unsigned sender) {
  fm.pong_len = FM_receive(fm.ping.data(), s, fm.ping.size());
  fm.peer = sender;
  fm.pong_pending = !fm_try_send(sender, kHPong, fm.ping.data(), fm.pong_len);
  watchdog.tick();
  return FM_CONTINUE;
}

int on_quit(FM_stream*, unsigned) {
  fm.quit = true;
  return FM_QUIT;
}

// rank 0's handlers
int on_ack(FM_stream* s, unsigned) {
  if (FM_receive(&fm.ack, s, sizeof fm.ack) != sizeof fm.ack || fm.ack.magic != kMagic) die("a bad ACK message");
  ++fm.acks;
  watchdog.tick();
  return FM_QUIT;
}

int on_pong(FM_stream* s, unsigned) {
  fm.pong_len = FM_receive(fm.buf.data(), s, fm.buf.size());
  ++fm.pongs;
  watchdog.tick();
  return FM_QUIT;
}

void fm_register(FM_ULONG id, FM_handler* h) {
  if (FM_register_handler(id, h) != id) die("FM_register_handler(" + std::to_string(id) + ") failed");
}

// Extracts until done(); between looks asleep in FM_wait.
template <class Done>
void fm_wait_until(Done done, const char* what) {
  auto start = Clock::now();
  for (;;) {
    FM_extract(kAll);
    if (done()) return;
    if (!FM_wait(kWaitUs) && seconds_since(start) > kReplyLimitS)
      die(std::string("no ") + what + " after " + fmt("%.0f", kReplyLimitS) + " s (" + phase + ")");
  }
}

// The last message of a repetition, checked after its ACK left.
void fm_verify_last() {
  fm.verify_pending = false;
  ++fm.checked;
  if (differs(fm.buf.data(), fm.last_len, 1) >= 0) ++fm.bad;
}

int fm_serve(double idle_s) {
  auto last = Clock::now();
  while (!fm.quit) {
    const FM_ULONG n = FM_extract(kAll);
    if (fm.ack_pending) {  // sending may extract (and overwrite the buffer): check first
      if (fm.verify_pending) fm_verify_last();
      fm.ack.checked = fm.checked, fm.ack.bad = fm.bad;
      fm_send(fm.peer, kHAck, &fm.ack, sizeof fm.ack);
      fm.ack_pending = false;
    }
    if (fm.verify_pending) fm_verify_last();
    if (fm.pong_pending) {
      fm_send(fm.peer, kHPong, fm.ping.data(), fm.pong_len);
      fm.pong_pending = false;
    }
    if (n > 0) last = Clock::now();
    else if (!FM_wait(kWaitUs) && seconds_since(last) > idle_s)
      die("nothing came for " + fmt("%.0f", idle_s) + " s");
  }
  return 0;
}

BwRow fm_bandwidth(const Plan& p, uint32_t size) {
  BwRow r{size, p.msgs(size), {}, true, {}};
  set_phase("FM bandwidth " + size_name(size));
  for (int rep = 0; rep < p.warm + p.reps; ++rep) {
    if (rep == p.warm && rep > 0) start_meter(r, fm.ack.who);
    const uint64_t want = fm.acks + 1;
    auto t0 = Clock::now();
    for (uint32_t m = 0; m < r.msgs; ++m) fm_send(1, kHData, fm.src.data(), size);
    EndMsg e{kMagic, uint32_t(rep), r.msgs, uint64_t(r.msgs) * size};
    fm_send(1, kHEnd, &e, sizeof e);
    fm_wait_until([&] { return fm.acks >= want; }, "ACK");
    const double s = seconds_since(t0);
    watchdog.tick();
    if (fm.ack.rep != e.rep || fm.ack.msgs != e.msgs || fm.ack.bytes != e.bytes) r.verified = false;
    if (rep >= p.warm) r.bps.push_back(double(e.bytes) / s);
  }
  r.cpu.stop();
  return r;
}

LatRow fm_latency(const Plan& p, uint32_t size) {
  LatRow r{size, {}, false};
  set_phase("FM ping-pong " + size_name(size));
  auto once = [&] {
    const uint64_t want = fm.pongs + 1;
    auto t0 = Clock::now();
    fm_send(1, kHPing, fm.src.data(), size);
    fm_wait_until([&] { return fm.pongs >= want; }, "PONG");
    return us_between(t0, Clock::now()) / 2;
  };
  for (int i = 0; i < p.lat_warm + p.iters; ++i) {
    double us = once();
    if (i >= p.lat_warm) r.oneway_us.push_back(us);
  }
  std::memset(fm.buf.data(), 0, size);  // one more, checked
  once();
  r.verified = fm.pong_len == size && differs(fm.buf.data(), size, 1) < 0;
  return r;
}

int fm_main(int rank, const Plan& p, const std::string& json, double idle_s) {
  const uint32_t max = std::max(p.bw_sizes.empty() ? 0 : p.bw_sizes.back(),
                                p.lat_sizes.empty() ? 0 : p.lat_sizes.back());
  fm.buf.assign(std::max<uint32_t>(max, 1u << 20), 0);
  fm.ping.assign(fm.buf.size(), 0);
  if (rank == 1) {
    fm_register(kHData, on_data);
    fm_register(kHEnd, on_end);
    fm_register(kHPing, on_ping);
    fm_register(kHQuit, on_quit);
  } else {
    fm_register(kHAck, on_ack);
    fm_register(kHPong, on_pong);
    fm.src.resize(fm.buf.size());
    fill(fm.src.data(), fm.src.size(), 1);
  }
  set_phase("FM_initialize");
  if (FM_initialize() != 0) die("FM_initialize failed");
  if (rank == 1) {
    int rc = fm_serve(idle_s);
    set_phase("FM_finalize");
    FM_get_stats(&counters.fm);
    if (FM_finalize() != 0) die("FM_finalize failed");
    std::printf("%s: %" PRIu64 " messages checked byte for byte, %" PRIu64 " wrong\n", program.c_str(), fm.checked,
                fm.bad);
    if (!json.empty()) {
      Json j;
      j.begin_object().str("mode", "fm").num("rank", 1);
      fm_stats_json(j);
      write_json(j.num("checked", double(fm.checked)).num("bad", double(fm.bad)).end_object(), json);
    }
    return rc;
  }

  std::vector<BwRow> bw;
  std::vector<LatRow> lat;
  bool ok = true;
  if (!p.lat_sizes.empty()) print_lat_head("FM");
  for (uint32_t s : p.lat_sizes) {
    lat.push_back(fm_latency(p, s));
    print_lat(lat.back());
    ok = ok && lat.back().verified;
  }
  if (!p.bw_sizes.empty()) print_bw_head("FM");
  for (uint32_t s : p.bw_sizes) {
    bw.push_back(fm_bandwidth(p, s));
    print_bw(bw.back());
    ok = ok && bw.back().verified;
  }
  // The last ACK says how many of rank 1's checks failed.
  set_phase("FM final check");
  EndMsg e{kMagic, 0xffffffffu, 0, 0};
  const uint64_t want = fm.acks + 1;
  fm_send(1, kHEnd, &e, sizeof e);
  fm_wait_until([&] { return fm.acks >= want; }, "final ACK");
  const AckMsg last = fm.ack;
  ok = ok && last.bad == 0;
  std::printf("rank 1 checked %" PRIu64 " messages byte for byte: %" PRIu64 " wrong\n", last.checked, last.bad);
  fm_send(1, kHQuit, &e, 0);
  set_phase("FM_finalize");
  FM_get_stats(&counters.fm);
  if (FM_finalize() != 0) die("FM_finalize failed");

  std::printf("data verified (ACK counts, pongs, rank 1's checks): %s\n", ok ? "yes" : "NO");
  Json j;
  j.begin_object().str("benchmark", "fm_bench").str("mode", "fm").num("rank", 0);
  j.begin_object("params").num("reps", p.reps).num("warm", p.warm).num("rep_bytes", double(p.rep_bytes));
  j.num("iters", p.iters).num("lat_warm", p.lat_warm).end_object();
  rows_json(j, bw, lat);
  fm_stats_json(j);
  j.num("rank1_checked", double(last.checked)).num("rank1_bad", double(last.bad)).boolean("verified", ok);
  if (!json.empty()) write_json(j.end_object(), json);
  return ok ? 0 : 1;
}

// ================================================================ MP

enum : int { kTCtrl = 1, kTReady, kTData, kTAck, kTPing, kTPong, kTDone };
enum : uint32_t { kOpBw = 1, kOpPing, kOpQuit };

struct Ctrl {
  uint32_t magic, op;
  uint32_t size, msgs, reps;  // kOpBw: repetitions of msgs messages; kOpPing: reps ping-pongs
  Who who;                    // rank 1's ready: rank 1
};
struct MpAck {
  uint32_t magic, rep;
  uint64_t msgs, bytes, errors;
};
struct MpDone {
  uint32_t magic, pad;
  uint64_t checked, bad, errors;
};

void mp_check(int rc, const char* what) {
  if (rc != MP_SUCCESS) die(std::string(what) + " -> " + std::to_string(rc) + " (" + phase + ")");
}

struct MpServer {
  std::vector<uint8_t> bufs;
  uint64_t checked = 0, bad = 0, errors = 0;
};

// rank 1: the ring of kWindow receives over reps x msgs messages.
void mp_serve_bw(MpServer& m, const Ctrl& c) {
  const uint64_t total = uint64_t(c.msgs) * c.reps;
  const uint32_t w = uint32_t(std::min<uint64_t>(kWindow, total));
  m.bufs.resize(size_t(kWindow) * c.size);
  std::vector<MP_Request> req(w, MP_REQUEST_NULL);
  auto buf = [&](uint64_t j) { return m.bufs.data() + size_t(j % w) * c.size; };
  for (uint32_t k = 0; k < w; ++k) mp_check(MP_Irecv(buf(k), c.size, 0, kTData, &req[k]), "MP_Irecv");
  Ctrl ready = c;
  ready.who = me();
  mp_check(MP_Send(&ready, sizeof ready, 0, kTReady), "MP_Send (ready)");
  uint64_t bytes = 0, errs = 0;
  for (uint64_t j = 0; j < total; ++j) {
    MP_Status st{};
    mp_check(MP_Wait(&req[j % w], &st), "MP_Wait (receive)");
    bytes += st.count;
    errs += st.error != MP_SUCCESS;
    const bool rep_end = (j + 1) % c.msgs == 0;
    if (!rep_end && j + w < total) mp_check(MP_Irecv(buf(j + w), c.size, 0, kTData, &req[j % w]), "MP_Irecv");
    if (!rep_end) continue;
    MpAck a{kMagic, uint32_t(j / c.msgs), c.msgs, bytes, errs};
    mp_check(MP_Send(&a, sizeof a, 0, kTAck), "MP_Send (ack)");
    watchdog.tick();
    m.errors += errs;
    bytes = errs = 0;
    ++m.checked;  // the last message, after its ACK left, before its buffer is posted again
    if (differs(buf(j), st.count, 1) >= 0 || st.count != c.size) ++m.bad;
    if (j + w < total) mp_check(MP_Irecv(buf(j + w), c.size, 0, kTData, &req[j % w]), "MP_Irecv");
  }
}

void mp_serve_ping(MpServer& m, const Ctrl& c) {
  m.bufs.resize(std::max<size_t>(m.bufs.size(), c.size));
  for (uint32_t i = 0; i < c.reps; ++i) {
    MP_Status st{};
    mp_check(MP_Recv(m.bufs.data(), c.size, 0, kTPing, &st), "MP_Recv (ping)");
    m.errors += st.error != MP_SUCCESS;
    mp_check(MP_Send(m.bufs.data(), st.count, 0, kTPong), "MP_Send (pong)");
    watchdog.tick();
  }
}

int mp_serve() {
  MpServer m;
  for (;;) {
    Ctrl c{};
    MP_Status st{};
    set_phase("rank 1: waiting for a control message");
    mp_check(MP_Recv(&c, sizeof c, 0, kTCtrl, &st), "MP_Recv (control)");
    if (c.magic != kMagic) die("a bad control message");
    if (c.op == kOpQuit) break;
    set_phase("rank 1: " + std::string(c.op == kOpBw ? "bandwidth " : "ping-pong ") + size_name(c.size));
    if (c.op == kOpBw) mp_serve_bw(m, c);
    else mp_serve_ping(m, c);
  }
  MpDone d{kMagic, 0, m.checked, m.bad, m.errors};
  mp_check(MP_Send(&d, sizeof d, 0, kTDone), "MP_Send (done)");
  std::printf("%s: %" PRIu64 " messages checked byte for byte, %" PRIu64 " wrong, %" PRIu64 " receive errors\n",
              program.c_str(), m.checked, m.bad, m.errors);
  return m.bad || m.errors ? 1 : 0;
}

BwRow mp_bandwidth(const Plan& p, uint32_t size, const std::vector<uint8_t>& src) {
  BwRow r{size, p.msgs(size), {}, true, {}};
  set_phase("MP bandwidth " + size_name(size));
  Ctrl c{kMagic, kOpBw, size, r.msgs, uint32_t(p.warm + p.reps), {}};
  mp_check(MP_Send(&c, sizeof c, 1, kTCtrl), "MP_Send (control)");
  Ctrl ready{};
  mp_check(MP_Recv(&ready, sizeof ready, 1, kTReady, nullptr), "MP_Recv (ready)");
  MP_Request req[kWindow];
  for (uint32_t rep = 0; rep < c.reps; ++rep) {
    if (int(rep) == p.warm) start_meter(r, ready.who);
    auto t0 = Clock::now();
    for (uint32_t m = 0; m < r.msgs; m += kWindow) {
      for (uint32_t k = 0; k < kWindow; ++k) mp_check(MP_Isend(src.data(), size, 1, kTData, &req[k]), "MP_Isend");
      mp_check(MP_Waitall(int(kWindow), req, nullptr), "MP_Waitall");
      watchdog.tick();
    }
    MpAck a{};
    MP_Status st{};
    mp_check(MP_Recv(&a, sizeof a, 1, kTAck, &st), "MP_Recv (ack)");
    const double s = seconds_since(t0);
    const uint64_t bytes = uint64_t(r.msgs) * size;
    if (a.magic != kMagic || a.rep != rep || a.msgs != r.msgs || a.bytes != bytes || a.errors) r.verified = false;
    if (int(rep) >= p.warm) r.bps.push_back(double(bytes) / s);
  }
  r.cpu.stop();
  return r;
}

LatRow mp_latency(const Plan& p, uint32_t size, const std::vector<uint8_t>& src, std::vector<uint8_t>& dst) {
  LatRow r{size, {}, false};
  set_phase("MP ping-pong " + size_name(size));
  Ctrl c{kMagic, kOpPing, size, 0, uint32_t(p.lat_warm + p.iters + 1), {}};
  mp_check(MP_Send(&c, sizeof c, 1, kTCtrl), "MP_Send (control)");
  MP_Status st{};
  auto once = [&] {
    auto t0 = Clock::now();
    mp_check(MP_Send(src.data(), size, 1, kTPing), "MP_Send (ping)");
    mp_check(MP_Recv(dst.data(), size, 1, kTPong, &st), "MP_Recv (pong)");
    watchdog.tick();
    return us_between(t0, Clock::now()) / 2;
  };
  for (int i = 0; i < p.lat_warm + p.iters; ++i) {
    double us = once();
    if (i >= p.lat_warm) r.oneway_us.push_back(us);
  }
  std::memset(dst.data(), 0, size);  // one more, checked
  once();
  r.verified = st.count == size && st.error == MP_SUCCESS && differs(dst.data(), size, 1) < 0;
  return r;
}

int mp_main(int rank, const Plan& p, const std::string& json) {
  set_phase("MP_Init");
  mp_check(MP_Init(), "MP_Init");
  int r = -1, n = 0;
  mp_check(MP_Comm_rank(&r), "MP_Comm_rank");
  mp_check(MP_Comm_size(&n), "MP_Comm_size");
  if (r != rank || n != 2) die("MP says rank " + std::to_string(r) + " of " + std::to_string(n));
  if (rank == 1) {
    int rc = mp_serve();
    set_phase("MP_Finalize");
    FM_get_stats(&counters.fm);
    MP_Get_stats(&counters.mp);
    mp_check(MP_Finalize(), "MP_Finalize");
    if (!json.empty()) {
      Json j;
      j.begin_object().str("mode", "mp").num("rank", 1);
      fm_stats_json(j);
      mp_stats_json(j);
      write_json(j.end_object(), json);
    }
    return rc;
  }
  const uint32_t max = std::max(p.bw_sizes.empty() ? 0 : p.bw_sizes.back(),
                                p.lat_sizes.empty() ? 0 : p.lat_sizes.back());
  std::vector<uint8_t> src(std::max<uint32_t>(max, 64)), dst(src.size());
  fill(src.data(), src.size(), 1);
  const size_t eager = MP_Eager_limit();
  std::printf("MP eager limit %zu B (rendezvous above)\n", eager);
  std::vector<BwRow> bw;
  std::vector<LatRow> lat;
  bool ok = true;
  if (!p.lat_sizes.empty()) print_lat_head("MP");
  for (uint32_t s : p.lat_sizes) {
    lat.push_back(mp_latency(p, s, src, dst));
    print_lat(lat.back());
    ok = ok && lat.back().verified;
  }
  if (!p.bw_sizes.empty()) print_bw_head("MP");
  for (uint32_t s : p.bw_sizes) {
    bw.push_back(mp_bandwidth(p, s, src));
    print_bw(bw.back());
    ok = ok && bw.back().verified;
  }
  set_phase("MP final check");
  Ctrl q{kMagic, kOpQuit, 0, 0, 0, {}};
  mp_check(MP_Send(&q, sizeof q, 1, kTCtrl), "MP_Send (quit)");
  MpDone d{};
  mp_check(MP_Recv(&d, sizeof d, 1, kTDone, nullptr), "MP_Recv (done)");
  ok = ok && d.magic == kMagic && d.bad == 0 && d.errors == 0;
  std::printf("rank 1 checked %" PRIu64 " messages byte for byte: %" PRIu64 " wrong, %" PRIu64 " receive errors\n",
              d.checked, d.bad, d.errors);
  set_phase("MP_Finalize");
  FM_get_stats(&counters.fm);
  MP_Get_stats(&counters.mp);
  mp_check(MP_Finalize(), "MP_Finalize");
  std::printf("data verified (ACK counts, pongs, rank 1's checks): %s\n", ok ? "yes" : "NO");
  Json j;
  j.begin_object().str("benchmark", "fm_bench").str("mode", "mp").num("rank", 0);
  j.begin_object("params").num("reps", p.reps).num("warm", p.warm).num("rep_bytes", double(p.rep_bytes));
  j.num("iters", p.iters).num("lat_warm", p.lat_warm).num("window", kWindow).num("eager_limit", double(eager));
  j.end_object();
  rows_json(j, bw, lat);
  fm_stats_json(j);
  mp_stats_json(j);
  j.num("rank1_checked", double(d.checked)).num("rank1_bad", double(d.bad)).num("rank1_errors", double(d.errors));
  if (!json.empty()) write_json(j.boolean("verified", ok).end_object(), json);
  return ok ? 0 : 1;
}

// ================================================================ GM

// Rank 1's region: a control block, the area rank 0 reads (pattern 1), the
// area it writes into (pattern 2 and 3, alternately per size).
struct GmCtrl {
  uint32_t magic, op, count, pad;
};
enum : uint32_t { kGmPhase = 1, kGmStores, kGmQuit };
constexpr size_t kCtrlBytes = 4096;

struct GmRegion {
  std::vector<uint8_t> mem;
  size_t area = 0;
  uint8_t* read_area() { return mem.data() + kCtrlBytes; }
  uint8_t* write_area() { return mem.data() + kCtrlBytes + area; }
  // How many `size` units fit in an area.
  uint32_t area_units(uint32_t size) const { return uint32_t(std::max<size_t>(1, area / size)); }
};

void gm_check(int rc, const char* what) {
  if (rc != 0) die(std::string(what) + " -> " + std::to_string(rc) + " (errno " + std::strerror(errno) + ", " +
                   phase + ")");
}

int gm_serve(GmRegion& g) {
  auto* ctrl = reinterpret_cast<volatile GmCtrl*>(g.mem.data());
  for (;;) {
    set_phase("rank 1: gm_barrier");
    gm_check(gm_barrier(), "gm_barrier");
    if (ctrl->magic != kMagic) die("a bad control block");
    const uint32_t op = ctrl->op, count = ctrl->count;
    if (op == kGmQuit) break;
    if (op == kGmStores) {
      set_phase("rank 1: gm_all_store_sync");
      for (uint32_t i = 0; i < count; ++i) {
        gm_check(gm_all_store_sync(), "gm_all_store_sync");
        watchdog.tick();
      }
    }
  }
  return 0;
}

struct GmRow {
  std::string op;
  uint32_t size = 0, per_sample = 1;  // operations per sample (amortized: K)
  std::vector<double> us;             // per operation
  bool verified = true;
};

struct GmClient {
  GmRegion& g;
  gm_ptr peer_ctrl, peer_read, peer_write;
  std::vector<uint8_t> local, src;
  uint32_t seed = 2;

  // The next phase: rank 1 learns it at the barrier.
  void phase_begin(uint32_t op, uint32_t count) {
    GmCtrl c{kMagic, op, count, 0};
    gm_check(gm_write(peer_ctrl, &c, sizeof c), "gm_write (control)");
    gm_check(gm_barrier(), "gm_barrier");
  }

  // Reads rank 1's write area back: `n` bytes starting at `bytes` intervals.
  bool check_written(uint32_t size, uint32_t count) {
    std::vector<uint8_t> back(size_t(size) * count);
    gm_check(gm_read(back.data(), peer_write, back.size()), "gm_read (check)");
    for (uint32_t k = 0; k < count; ++k)
      if (differs(back.data() + size_t(k) * size, size, seed, uint64_t(k) * size) >= 0) return false;
    return true;
  }

  GmRow blocking(const std::string& op, uint32_t size, int n) {
    GmRow r{op, size, 1, {}, true};
    set_phase("GM " + op + " " + size_name(size));
    phase_begin(kGmPhase, 0);
    const bool read = op == "read";
    const bool scalar = size == 8;
    for (int i = -2; i < n; ++i) {
      const uint32_t k = uint32_t(i + 2) % g.area_units(size);
      gm_ptr rp = gm_offset(read ? peer_read : peer_write, ptrdiff_t(k) * size);
      auto t0 = Clock::now();
      if (read && scalar) {
        int64_t v = gm_read_i64(rp);
        std::memcpy(local.data(), &v, 8);
      } else if (read) {
        gm_check(gm_read(local.data(), rp, size), "gm_read");
      } else if (scalar) {
        int64_t v;
        std::memcpy(&v, src.data() + size_t(k) * size, 8);
        gm_write_i64(rp, v);
      } else {
        gm_check(gm_write(rp, src.data() + size_t(k) * size, size), "gm_write");
      }
      const double us = us_between(t0, Clock::now());
      watchdog.tick();
      if (i >= 0) r.us.push_back(us);
      if (read && differs(local.data(), size, 1, uint64_t(k) * size) >= 0) r.verified = false;
    }
    if (!read) r.verified = check_written(size, std::min<uint32_t>(uint32_t(n + 2), g.area_units(size)));
    return r;
  }

  GmRow split(const std::string& op, uint32_t size, uint32_t k_ops, int n) {
    GmRow r{op, size, k_ops, {}, true};
    set_phase("GM " + op + " " + size_name(size));
    const bool get = op == "get", store = op == "store";
    phase_begin(store ? kGmStores : kGmPhase, uint32_t(n + 1));
    const bool scalar = size == 8;
    for (int i = -1; i < n; ++i) {
      if (get) std::memset(local.data(), 0, size_t(k_ops) * size);
      auto t0 = Clock::now();
      for (uint32_t k = 0; k < k_ops; ++k) {
        const size_t off = size_t(k) * size;
        if (get) {
          gm_ptr rp = gm_offset(peer_read, ptrdiff_t(off));
          if (scalar) gm_get_i64(reinterpret_cast<int64_t*>(local.data() + off), rp);
          else gm_check(gm_get(local.data() + off, rp, size), "gm_get");
          continue;
        }
        gm_ptr wp = gm_offset(peer_write, ptrdiff_t(off));
        if (scalar) {
          int64_t v;
          std::memcpy(&v, src.data() + off, 8);
          if (store) gm_store_i64(wp, v);
          else gm_put_i64(wp, v);
        } else if (store) {
          gm_check(gm_store(wp, src.data() + off, size), "gm_store");
        } else {
          gm_check(gm_put(wp, src.data() + off, size), "gm_put");
        }
      }
      if (store) gm_check(gm_all_store_sync(), "gm_all_store_sync");
      else gm_check(gm_sync(), "gm_sync");
      const double us = us_between(t0, Clock::now()) / k_ops;
      watchdog.tick();
      if (i >= 0) r.us.push_back(us);
      if (get && differs(local.data(), size_t(k_ops) * size, 1) >= 0) r.verified = false;
    }
    if (!get) r.verified = check_written(size, k_ops);
    return r;
  }
};

void print_gm(const GmRow& r) {
  Stats s = summarize(r.us);
  std::printf("%-8s%-10s%6u%12.2f%12.2f%12.2f%6zu%s\n", r.op.c_str(), size_name(r.size).c_str(), r.per_sample, s.min,
              s.median, s.max, s.n, r.verified ? "" : "  NOT VERIFIED");
}

int gm_main(int rank, const Plan& p, const std::string& json) {
  GmRegion g;
  const uint32_t max = p.gm_sizes.empty() ? 8 : p.gm_sizes.back();
  g.area = size_t(max) * p.outstanding;
  g.mem.assign(kCtrlBytes + 2 * g.area, 0);
  fill(g.read_area(), g.area, 1);
  set_phase("gm_init");
  gm_check(gm_init(), "gm_init");
  if (gm_mynode() != unsigned(rank) || gm_nodes() != 2)
    die("GM says node " + std::to_string(gm_mynode()) + " of " + std::to_string(gm_nodes()));
  gm_check(gm_expose(g.mem.data(), g.mem.size()), "gm_expose");
  uint64_t all[2] = {0, 0};
  set_phase("gm_allgather");
  gm_check(gm_allgather(uint64_t(uintptr_t(g.mem.data())), all), "gm_allgather");
  if (rank == 1) {
    int rc = gm_serve(g);
    set_phase("gm_finalize");
    FM_get_stats(&counters.fm);
    gm_get_stats(&counters.gm);
    gm_check(gm_finalize(), "gm_finalize");
    const gm_stats& s = counters.gm;
    std::printf("%s: served %llu requests, refused %llu, store acks sent %llu, deferred replies %llu\n",
                program.c_str(), s.served, s.refused, s.store_acks_sent, s.deferred);
    if (!json.empty()) {
      Json j;
      j.begin_object().str("mode", "gm").num("rank", 1);
      fm_stats_json(j);
      j.begin_object("gm_stats").num("served", double(s.served)).num("refused", double(s.refused));
      j.num("store_acks_sent", double(s.store_acks_sent)).num("deferred", double(s.deferred)).end_object();
      write_json(j.end_object(), json);
    }
    return rc;
  }
  auto* base = reinterpret_cast<void*>(uintptr_t(all[1]));
  GmClient c{g, gm_global(1, base), gm_global(1, static_cast<char*>(base) + kCtrlBytes),
             gm_global(1, static_cast<char*>(base) + kCtrlBytes + g.area), {}, {}, 2};
  c.local.assign(g.area, 0);
  c.src.assign(g.area, 0);

  std::vector<GmRow> rows;
  bool ok = true;
  std::printf("\n== GM operations, us per operation (split-phase: K issued, then one sync; per K)\n");
  std::printf("%-8s%-10s%6s%12s%12s%12s%6s\n", "op", "size", "K", "min", "median", "max", "n");
  for (uint32_t s : p.gm_sizes) {
    const int n_block = std::max(4, p.gm_samples * (s <= 4096 ? 10 : 2));
    for (const char* op : {"read", "write", "get", "put", "store"}) {
      const std::string o = op;
      if (o == "write" || o == "put" || o == "store") {  // each writes another pattern than the last: a miss shows
        c.seed = c.seed == 2 ? 3 : 2;
        fill(c.src.data(), c.src.size(), c.seed);
      }
      GmRow r = o == "read" || o == "write" ? c.blocking(o, s, n_block) : c.split(o, s, p.outstanding, p.gm_samples);
      print_gm(r);
      ok = ok && r.verified;
      rows.push_back(std::move(r));
    }
  }
  set_phase("GM quit");
  c.phase_begin(kGmQuit, 0);
  set_phase("gm_finalize");
  FM_get_stats(&counters.fm);
  gm_get_stats(&counters.gm);
  gm_check(gm_finalize(), "gm_finalize");
  const gm_stats& st = counters.gm;
  std::printf("data verified (every value read, every area written read back): %s\n", ok ? "yes" : "NO");
  Json j;
  j.begin_object().str("benchmark", "fm_bench").str("mode", "gm").num("rank", 0);
  j.begin_object("params").num("outstanding", p.outstanding).num("samples", p.gm_samples).end_object();
  j.begin_array("gm");
  for (const GmRow& r : rows) {
    j.begin_object().str("op", r.op).num("size", r.size).num("ops_per_sample", r.per_sample);
    j.stats("us_per_op", summarize(r.us));
    sample_array(j, "samples_us_per_op", r.us);
    j.boolean("verified", r.verified).end_object();
  }
  j.end_array();
  fm_stats_json(j);
  j.begin_object("gm_stats").num("reads", double(st.reads)).num("writes", double(st.writes));
  j.num("gets", double(st.gets)).num("puts", double(st.puts)).num("stores", double(st.stores));
  j.num("store_acks_received", double(st.store_acks_received)).num("deferred", double(st.deferred)).end_object();
  if (!json.empty()) write_json(j.boolean("verified", ok).end_object(), json);
  return ok ? 0 : 1;
}

// ================================================================ floors

int floors_main(const Plan& p, bool quick, const std::string& json) {
  Machine m = machine_facts();
  print_machine(m);
  HostFloors fl = host_floors("floors (host only, this run)", p.lat_sizes, p.bw_sizes, quick ? 5000 : 20000,
                              quick ? 3 : 7);
  Json j;
  j.begin_object().str("benchmark", "fm_bench").str("mode", "floors");
  machine_json(j, m, "clock_ns");
  j.begin_object("floors");
  pingpong_json(j, fl.pp);
  memcpy_json(j, fl.mc, false, true);
  j.end_object();
  if (!json.empty()) write_json(j.end_object(), json);
  return 0;
}

void usage() {
  std::fprintf(stderr,
               "usage: fm_bench fm|mp [--json FILE] [--quick] [--bw-sizes LIST] [--lat-sizes LIST] [--reps N]\n"
               "              [--rep-bytes B] [--max-msgs N] [--iters N]\n"
               "       fm_bench gm [--json FILE] [--quick] [--gm-sizes LIST] [--outstanding K] [--samples N]\n"
               "       fm_bench floors [--json FILE] [--quick] [--bw-sizes LIST] [--lat-sizes LIST]\n"
               "       rank 1 (ULNIC_FM_RANK=1): fm_bench fm|mp|gm [--json FILE] [--idle-timeout S]\n"
               "The job: ULNIC_FM_RANK, ULNIC_FM_NPROCS=2, ULNIC_FM_DIR, ULNIC_NODE (fm.h). Sizes: 16,4K,1M.\n");
  std::exit(2);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) usage();
  const std::string mode = argv[1];
  if (mode != "fm" && mode != "mp" && mode != "gm" && mode != "floors") usage();
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  Plan p;
  bool quick = false;
  std::string json, bw = "16,64,256,1K,4K,4232,4256,16K,64K,256K,1M", lat = "16,64,256,1K,4K,4256,16K,64K",
                    gms = "8,64,4K,64K";
  double idle_s = 300;
  int reps = 0, iters = 0, samples = 0;
  for (int i = 2; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&] { return next_arg(argc, argv, i, usage); };
    auto num = [&] { return std::atof(next().c_str()); };
    if (a == "--json") json = next();
    else if (a == "--quick") quick = true;
    else if (a == "--bw-sizes") bw = next();
    else if (a == "--lat-sizes") lat = next();
    else if (a == "--gm-sizes") gms = next();
    else if (a == "--reps") reps = std::max(1, int(num()));
    else if (a == "--rep-bytes") p.rep_bytes = uint64_t(std::max(1.0, num()));
    else if (a == "--max-msgs") p.max_msgs = uint32_t(std::max(double(kWindow), num()));
    else if (a == "--iters") iters = std::max(1, int(num()));
    else if (a == "--outstanding") p.outstanding = uint32_t(std::clamp(num(), 1.0, 1024.0));
    else if (a == "--samples") samples = std::max(1, int(num()));
    else if (a == "--idle-timeout") idle_s = num();
    else usage();
  }
  if (quick) p.quick();
  if (reps) p.reps = reps;
  if (iters) p.iters = iters;
  if (samples) p.gm_samples = samples;
  p.bw_sizes = parse_sizes(bw);
  p.lat_sizes = parse_sizes(lat);
  p.gm_sizes = parse_sizes(gms);
  if (mode == "floors") {
    program = "fm_bench floors";
    return floors_main(p, quick, json);
  }
  const int rank = rank_from_env();
  program = "fm_bench " + mode + " rank " + std::to_string(rank);
  watchdog.on_stall(report_stall);
  watchdog.start(45);
  if (mode == "fm") return fm_main(rank, p, json, idle_s);
  if (mode == "mp") return mp_main(rank, p, json);
  return gm_main(rank, p, json);
}
