// Shared by am_logp and vipl_logp: the LogP parameters of one kind of small
// message (Culler, Liu, Martin and Yoshikawa, "LogP performance assessment of
// fast network interfaces", IEEE Micro 1996), how the programs wait for a
// message (the poll back-off), and the command-line bits both take.
#pragma once

#include <cmath>
#include <functional>
#include <mutex>
#include <thread>

#include "bench_common.h"

namespace bench::logp {

// How a side waits: `yield` looks back to back, then one look per
// nanosleep(sleep_ns) (0: sched_yield). On a 2-core machine two spinning
// processes starve the NICs' QEMU vCPUs (see vipl_bench); and a side that
// spins where the other would run delays the other's answer by the spin.
struct Backoff {
  uint32_t yield = 20, sleep_ns = 0;
  double limit_s = 30;  // a message that never comes ends the run
};

// Waits until done() holds, calling look() before each test; dies after
// b.limit_s naming `what`.
template <class Look, class Done>
void wait_for(const Backoff& b, const char* what, Look look, Done done) {
  if (!spin_until([&] { look(); return done(); }, b.yield, b.sleep_ns, b.limit_s))
    die(std::string("no ") + what + " after " + fmt("%.0f", b.limit_s) + " s");
}

// Ends the process (exit status 1, naming the phase) when tick() has not
// been called for limit_s seconds: a library call that never returns fails
// the run as a reply that never comes does.
class Watchdog {
 public:
  void phase(const std::string& p) {
    std::lock_guard<std::mutex> hold(m_);
    phase_ = p;
  }
  void tick() { ticks_.fetch_add(1, std::memory_order_relaxed); }
  // Runs on the watchdog's thread before it ends the process: what the
  // program can say about where it stuck (diagnostics; the stuck thread is
  // not stopped meanwhile).
  void on_stall(std::function<void()> f) { on_stall_ = std::move(f); }
  void start(double limit_s) {
    std::thread([this, limit_s] {
      uint64_t last = ~uint64_t(0);
      auto since = Clock::now();
      for (;;) {
        std::this_thread::sleep_for(std::chrono::seconds(1));
        if (uint64_t t = ticks_.load(std::memory_order_relaxed); t != last) last = t, since = Clock::now();
        else if (seconds_since(since) > limit_s) {
          std::lock_guard<std::mutex> hold(m_);
          std::fprintf(stderr, "%s: no progress for %.0f s (%s): stuck in a library call\n", program.c_str(), limit_s,
                       phase_.c_str());
          if (on_stall_) on_stall_();
          std::fflush(stderr);
          std::_Exit(1);
        }
      }
    }).detach();
  }

 private:
  std::mutex m_;
  std::string phase_ = "set-up";
  std::atomic<uint64_t> ticks_{0};
  std::function<void()> on_stall_;
};

inline void sleep_us(double us) {
  const timespec t{time_t(us / 1e6), long(std::fmod(us, 1e6) * 1e3)};
  ::nanosleep(&t, nullptr);
}

// The five parameters, us. L = RTT/2 - o_s - o_r, from the same statistic of
// each (its min from the three mins, and so on).
struct Params {
  Stats rtt_half, os, orr, g, L;
  void derive_L() {
    L.min = rtt_half.min - os.min - orr.min;
    L.median = rtt_half.median - os.median - orr.median;
    L.max = rtt_half.max - os.max - orr.max;
    L.mean = rtt_half.mean - os.mean - orr.mean;
    L.n = rtt_half.n;
  }
};

inline void print_head(const char* title) {
  std::printf("\n== %s\n%-22s%12s%12s%12s%8s\n", title, "", "min", "median", "max", "n");
}

inline void print_row(const std::string& name, const Stats& s, const char* f = "%12.2f") {
  std::printf("%-22s%s%s%s%8zu\n", name.c_str(), fmt(f, s.min).c_str(), fmt(f, s.median).c_str(),
              fmt(f, s.max).c_str(), s.n);
}

inline void print_params(const Params& p) {
  print_row("  RTT/2, us", p.rtt_half);
  print_row("  o_s, us", p.os);
  print_row("  o_r, us", p.orr);
  print_row("  g, us", p.g);
  print_row("  L, us (derived)", p.L);
}

inline Json& params_json(Json& j, const Params& p) {
  return j.stats("rtt_half_us", p.rtt_half).stats("os_us", p.os).stats("or_us", p.orr).stats("g_us", p.g)
      .stats("L_us", p.L);
}

// Counts of a run, quick or not.
struct Counts {
  int rtt_iters = 2000, warmup = 100;  // ping-pongs per figure
  int samples = 200;                   // o_s and o_r bursts
  int burst = 16;                      // M: messages of an o_s / o_r burst (within the credits)
  int g_bursts = 10, g_len = 4000;     // g: bursts of this many messages
  void quick() { rtt_iters = 300, warmup = 30, samples = 40, g_bursts = 4, g_len = 1000; }
};

// Whether argv[from..] holds `flag`: --quick is looked for before the other
// options are read, so that what it sets are defaults the explicit ones
// override wherever they stand (`--bulk-sizes 1M --quick` measured the quick
// sizes, not 1 MiB).
inline bool has_flag(int argc, char** argv, int from, const char* flag) {
  for (int i = from; i < argc; ++i)
    if (std::string(argv[i]) == flag) return true;
  return false;
}

// Options both programs take: true if argv[i] was one (i moves on past its value).
inline bool common_option(int argc, char** argv, int& i, void (*usage)(), Backoff& b, Counts& c) {
  const std::string a = argv[i];
  auto num = [&] { return std::atof(next_arg(argc, argv, i, usage).c_str()); };
  if (a == "--poll-yield") b.yield = uint32_t(std::max(0.0, num()));
  else if (a == "--poll-sleep-us") b.sleep_ns = uint32_t(std::clamp(num(), 0.0, 1000.0) * 1000);
  else if (a == "--iters") c.rtt_iters = std::max(1, int(num()));
  else if (a == "--samples") c.samples = std::max(1, int(num()));
  else if (a == "--burst") c.burst = std::max(1, int(num()));
  else if (a == "--g-len") c.g_len = std::max(1, int(num()));
  else return false;
  return true;
}

inline void counts_json(Json& j, const Backoff& b, const Counts& c) {
  j.num("poll_yield", b.yield).num("poll_sleep_ns", b.sleep_ns).num("rtt_iters", c.rtt_iters)
      .num("warmup", c.warmup).num("samples", c.samples).num("burst", c.burst).num("g_bursts", c.g_bursts)
      .num("g_len", c.g_len);
}

}  // namespace bench::logp
