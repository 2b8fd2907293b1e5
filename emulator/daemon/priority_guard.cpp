#include "daemon/priority_guard.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>

namespace ulnic::daemon {

GuardPolicy::Action GuardPolicy::step(Clock::time_point now, std::chrono::nanoseconds length,
                                      const std::vector<ThreadShare>& threads) {
  bool starved = false;
  if (length.count() > 0)
    for (const ThreadShare& t : threads)
      starved |= t.waited.count() >= kWaitedShare * double(length.count()) &&
                 t.ran.count() <= kRanShare * double(length.count());
  starved_in_row_ = starved ? starved_in_row_ + 1 : 0;
  if (boosted_) {
    if (now < until_) return Action::kNone;
    boosted_ = false;
    ended_once_ = true;
    last_end_ = now;
    starved_in_row_ = 0;  // windows of the boost say nothing about the host without it
    return Action::kUnboost;
  }
  if (starved_in_row_ < kStarvedWindows) return Action::kNone;
  starved_in_row_ = 0;
  const auto since_end = now - last_end_;
  if (ended_once_ && since_end <= kRecurWithin) hold_ = std::min<std::chrono::nanoseconds>(2 * hold_, kHoldMax);
  else if (!ended_once_ || since_end >= kCalmAfter) hold_ = kHoldMin;
  boosted_ = true;
  until_ = now + hold_;
  ++boosts_;
  return Action::kBoost;
}

void GuardPolicy::adopt_boost(Clock::time_point now) {
  boosted_ = true;
  until_ = now + hold_;
}

namespace {
// (time on a CPU, time runnable and waiting), ns; false if the thread is gone.
bool read_schedstat(pid_t pid, const std::string& tid, uint64_t& ran, uint64_t& waited) {
  std::string path = "/proc/" + std::to_string(pid) + "/task/" + tid + "/schedstat";
  FILE* f = std::fopen(path.c_str(), "re");
  if (!f) return false;
  unsigned long long r = 0, w = 0;
  bool ok = std::fscanf(f, "%llu %llu", &r, &w) == 2;
  std::fclose(f);
  ran = r, waited = w;
  return ok;
}

std::vector<std::string> threads_of(pid_t pid) {
  std::vector<std::string> tids;
  std::string dir = "/proc/" + std::to_string(pid) + "/task";
  if (DIR* d = ::opendir(dir.c_str())) {
    while (dirent* e = ::readdir(d))
      if (e->d_name[0] >= '0' && e->d_name[0] <= '9') tids.emplace_back(e->d_name);
    ::closedir(d);
  }
  return tids;
}

std::string ms(std::chrono::nanoseconds t) { return std::to_string(t.count() / 1'000'000) + " ms"; }
}  // namespace

void PriorityGuard::start(pid_t qemu, int boost_nice, Log log) {
  pid_ = qemu;
  boost_nice_ = boost_nice;
  log_ = std::move(log);
  errno = 0;
  int now_nice = ::getpriority(PRIO_PROCESS, id_t(qemu));
  if (errno == 0 && now_nice < 0) {
    // A daemon before us boosted it and was killed: end that boost in time.
    policy_.adopt_boost(GuardPolicy::Clock::now());
    log_("QEMU found at nice " + std::to_string(now_nice) + ": taken as a boost");
  }
  thread_ = std::thread([this] { run(); });
}

void PriorityGuard::stop() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

bool PriorityGuard::set_nice(int nice, const std::vector<std::string>& tids, bool autogroup) {
  for (const std::string& tid : tids)
    if (::setpriority(PRIO_PROCESS, id_t(std::stoul(tid)), nice) != 0 && (errno == EPERM || errno == EACCES))
      return false;
  if (!autogroup) return true;
  std::string path = "/proc/" + std::to_string(pid_) + "/autogroup";
  int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return true;  // no autogroups: the threads' nice is what counts
  std::string text = std::to_string(nice) + "\n";
  ssize_t n = ::write(fd, text.data(), text.size());
  int err = errno;
  ::close(fd);
  return n >= 0 || (err != EPERM && err != EACCES);
}

void PriorityGuard::run() {
  using Clock = GuardPolicy::Clock;
  Clock::time_point last = Clock::now();
  std::unique_lock lock(mu_);
  for (;;) {
    if (cv_.wait_for(lock, GuardPolicy::kWindow, [this] { return stop_; })) return;
    const Clock::time_point now = Clock::now();
    std::vector<ThreadShare> shares;
    ThreadShare worst;
    std::map<std::string, std::pair<uint64_t, uint64_t>> seen;
    const std::vector<std::string> tids = threads_of(pid_);
    for (const std::string& tid : tids) {
      uint64_t ran = 0, waited = 0;
      if (!read_schedstat(pid_, tid, ran, waited)) continue;
      seen[tid] = {ran, waited};
      auto it = last_.find(tid);
      // A new thread, or a tid reused by one: no window for it yet.
      if (it == last_.end() || ran < it->second.first || waited < it->second.second) continue;
      ThreadShare s{std::chrono::nanoseconds(ran - it->second.first),
                    std::chrono::nanoseconds(waited - it->second.second)};
      if (s.waited > worst.waited) worst = s;
      shares.push_back(s);
    }
    last_ = std::move(seen);
    const auto length = std::chrono::duration_cast<std::chrono::nanoseconds>(now - last);
    last = now;
    switch (policy_.step(now, length, shares)) {
      case GuardPolicy::Action::kBoost:
        if (!set_nice(boost_nice_, tids, true)) {
          log_("the host starves the NIC, but this user may not raise its priority (nice " +
               std::to_string(boost_nice_) + "): not guarding it");
          return;
        }
        log_("the host starves the NIC (a QEMU thread waited " + ms(worst.waited) + " and ran " + ms(worst.ran) +
             " of " + ms(length) + "): nice " + std::to_string(boost_nice_) + " for " +
             std::to_string(std::chrono::duration_cast<std::chrono::seconds>(policy_.hold()).count()) + " s (boost " +
             std::to_string(policy_.boosts()) + ")");
        break;
      case GuardPolicy::Action::kUnboost:
        set_nice(0, tids, true);
        log_("boost over: nice 0");
        break;
      case GuardPolicy::Action::kNone:
        // Threads QEMU starts during a boost get the boost too (the
        // autogroup is the session's: set once).
        if (policy_.boosted()) set_nice(boost_nice_, tids, false);
        break;
    }
  }
}

}  // namespace ulnic::daemon
