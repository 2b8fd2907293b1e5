// The NIC's priority on the host, kept by its node daemon (board/node.h,
// nic_priority). A NIC is hardware: the host may be slow to serve it, never
// to run it. But a NIC that outranks the host's processes all the time keeps
// the process it has just woken off that CPU for as long as it spins, and
// every small message pays for it (one-way 26-67 us at the ordinary
// priority, 263-321 us at nice -10, measured back to back on a quiet 2-core
// machine). So QEMU runs at the ordinary priority, and the guard raises it
// only while the host starves it: every kWindow it reads each QEMU thread's
// scheduler statistics (/proc/PID/task/TID/schedstat: time on a CPU, time
// runnable but waiting for one); a thread that waited most of two windows
// in a row and ran next to nothing -- a vCPU that has work but no CPU, not
// one that spins or sleeps -- starts a boost: every thread and the session's
// autogroup go to the boost nice for a hold time, then back. A starvation
// that comes back soon after a boost ended doubles the next hold (up to
// kHoldMax), so a host that stays overloaded keeps its NICs boosted almost
// all the time; a minute without one resets it.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace ulnic::daemon {

// One thread's share of one window.
struct ThreadShare {
  std::chrono::nanoseconds ran{0}, waited{0};
};

// The decision, without the clock or /proc: unit-tested (tests/host).
class GuardPolicy {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr std::chrono::milliseconds kWindow{100};
  static constexpr int kStarvedWindows = 2;    // in a row
  static constexpr double kWaitedShare = 0.75;  // of the window, at least
  static constexpr double kRanShare = 0.10;     // of the window, at most
  static constexpr std::chrono::seconds kHoldMin{2}, kHoldMax{64}, kRecurWithin{10}, kCalmAfter{60};

  enum class Action { kNone, kBoost, kUnboost };

  // A window of `length` ended at `now` with these threads' shares.
  Action step(Clock::time_point now, std::chrono::nanoseconds length, const std::vector<ThreadShare>& threads);
  // The guard found QEMU already boosted (its daemon was restarted).
  void adopt_boost(Clock::time_point now);

  bool boosted() const { return boosted_; }
  std::chrono::nanoseconds hold() const { return hold_; }
  uint64_t boosts() const { return boosts_; }

 private:
  bool boosted_ = false;
  int starved_in_row_ = 0;
  std::chrono::nanoseconds hold_ = kHoldMin;
  Clock::time_point until_{}, last_end_{};
  bool ended_once_ = false;
  uint64_t boosts_ = 0;
};

// The thread in ulnicd that applies GuardPolicy to one QEMU process.
class PriorityGuard {
 public:
  using Log = std::function<void(const std::string&)>;
  ~PriorityGuard() { stop(); }
  // Starts watching `qemu`; `boost_nice` is the nice value of a boost.
  void start(pid_t qemu, int boost_nice, Log log);
  void stop();

 private:
  void run();
  // Sets these threads' nice and, if `autogroup`, the session's autogroup's;
  // false if not permitted.
  bool set_nice(int nice, const std::vector<std::string>& tids, bool autogroup);

  pid_t pid_ = 0;
  int boost_nice_ = 0;
  Log log_;
  GuardPolicy policy_;
  std::map<std::string, std::pair<uint64_t, uint64_t>> last_;  // tid -> (ran ns, waited ns)
  std::thread thread_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
};

}  // namespace ulnic::daemon
