// A thread that sleeps on its NIC goes to sleep on the CPU the NIC's vCPU
// last ran on (host/core/pin.h, sleep_near_nic): reading where a thread last
// ran, when a sleeper is moved, and that it is never left pinned.
#include <gtest/gtest.h>
#include <sched.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdio>
#include <string>
#include <thread>

#include "core/pin.h"

namespace {

// A file holding `text`, open for reading at offset 0 (last_cpu preads).
int stat_file(const std::string& text) {
  int fd = ::memfd_create("stat", MFD_CLOEXEC);
  EXPECT_GE(fd, 0);
  EXPECT_EQ(::write(fd, text.data(), text.size()), ssize_t(text.size()));
  return fd;
}

// "pid (comm) " then fields 3..52, field k holding k, except field 39.
std::string stat_line(const std::string& comm, const std::string& field39) {
  std::string s = "4242 (" + comm + ")";
  for (int k = 3; k <= 52; ++k) s += " " + (k == 39 ? field39 : std::to_string(k));
  return s + "\n";
}

cpu_set_t affinity() {
  cpu_set_t s;
  CPU_ZERO(&s);
  EXPECT_EQ(::sched_getaffinity(0, sizeof s, &s), 0);
  return s;
}

bool only(const cpu_set_t& s, int cpu) { return CPU_COUNT(&s) == 1 && CPU_ISSET(cpu, &s); }

// The first two CPUs this process may use, or {-1, -1}.
std::pair<int, int> two_cpus() {
  cpu_set_t s = affinity();
  int a = -1;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &s)) {
      if (a < 0) a = c;
      else return {a, c};
    }
  return {-1, -1};
}

// Runs `f` on a fresh thread: pin.cpp's state is per thread.
template <typename F>
void on_new_thread(F f) {
  std::thread t(f);
  t.join();
}

TEST(FollowNic, LastCpuIsField39CountedAfterTheLastParenthesis) {
  int fd = stat_file(stat_line("CPU 0/TCG", "7"));
  EXPECT_EQ(ulnic::detail::last_cpu(fd), 7);
  ::close(fd);
  // A command name with spaces and parentheses of its own.
  fd = stat_file(stat_line("a) b (c) 9 9", "13"));
  EXPECT_EQ(ulnic::detail::last_cpu(fd), 13);
  ::close(fd);
}

TEST(FollowNic, LastCpuOfAShortOrBadLineIsUnknown) {
  int fd = stat_file("4242 (x) R 1 2 3\n");
  EXPECT_EQ(ulnic::detail::last_cpu(fd), -1);
  ::close(fd);
  fd = stat_file(stat_line("x", "-"));
  EXPECT_EQ(ulnic::detail::last_cpu(fd), -1);
  ::close(fd);
  fd = stat_file("no parenthesis at all");
  EXPECT_EQ(ulnic::detail::last_cpu(fd), -1);
  ::close(fd);
  EXPECT_EQ(ulnic::detail::last_cpu(-1), -1);
}

TEST(FollowNic, LastCpuOfARealThreadIsACpuItMayUse) {
  FILE* f = std::fopen("/proc/thread-self/stat", "r");
  ASSERT_NE(f, nullptr);
  const int cpu = ulnic::detail::last_cpu(::fileno(f));
  std::fclose(f);
  ASSERT_GE(cpu, 0);
  cpu_set_t s = affinity();
  EXPECT_TRUE(CPU_ISSET(cpu, &s));
}

// A stat file whose field 39 says `cpu`.
int nic_on(int cpu) { return stat_file(stat_line("CPU 0/TCG", std::to_string(cpu))); }

// Narrows the affinity to `cpu` and gives it back: the thread then runs there.
void go_to(int cpu) {
  const cpu_set_t all = affinity();
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(cpu, &one);
  ASSERT_EQ(::sched_setaffinity(0, sizeof one, &one), 0);
  ASSERT_EQ(::sched_setaffinity(0, sizeof all, &all), 0);
}

TEST(FollowNic, ASleeperGoesWhereItsNicRanAndKeepsItsAffinity) {
  auto [a, b] = two_cpus();
  if (b < 0) GTEST_SKIP() << "one CPU: nothing to follow";
  const cpu_set_t before = affinity();
  const int on_b = nic_on(b);
  int moved = 0, there = 0;
  on_new_thread([&] {
    for (int i = 0; i < 20; ++i) {
      int nic = 0;  // a new NIC each turn: looked up anew
      go_to(a);
      moved += ulnic::detail::sleep_near_nic(&nic, on_b);
      there += ::sched_getcpu() == b;
      cpu_set_t now = affinity();
      EXPECT_TRUE(CPU_EQUAL(&now, &before)) << "left pinned";
    }
  });
  ::close(on_b);
  // Each turn starts on a and goes to b (unless the kernel moved the thread
  // there first); only a preemption between two calls could move it off b
  // again before it looks (not 20 times).
  EXPECT_GT(moved, 0);
  EXPECT_GT(there, 0);
}

TEST(FollowNic, ASleeperIsLeftAloneWhereItsNicIsUnknownOrOutOfReach) {
  auto [a, b] = two_cpus();
  if (b < 0) GTEST_SKIP() << "one CPU: nothing to follow";
  int nic1 = 0, nic2 = 0, nic3 = 0, nic4 = 0;
  const int unknown = stat_file("4242 (x) R 1\n"), on_b = nic_on(b), beyond = nic_on(CPU_SETSIZE + 5);
  on_new_thread([&] {
    go_to(a);
    EXPECT_FALSE(ulnic::detail::sleep_near_nic(&nic1, unknown));
    EXPECT_FALSE(ulnic::detail::sleep_near_nic(&nic2, beyond));
    EXPECT_FALSE(ulnic::detail::sleep_near_nic(&nic3, -1));  // the daemon named no thread
    // A thread that chose one CPU itself (taskset, mpirun's binding), not b.
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(a, &one);
    ASSERT_EQ(::sched_setaffinity(0, sizeof one, &one), 0);
    EXPECT_FALSE(ulnic::detail::sleep_near_nic(&nic4, on_b));
    EXPECT_TRUE(only(affinity(), a));
    EXPECT_EQ(::sched_getcpu(), a);
  });
  ::close(unknown);
  ::close(on_b);
  ::close(beyond);
}

TEST(FollowNic, AThreadPinnedToItsNicsCpuAtAttachStaysThere) {
  auto [a, b] = two_cpus();
  if (b < 0) GTEST_SKIP() << "one CPU: nothing to follow";
  int nic = 0;
  const int on_b = nic_on(b);
  on_new_thread([&] {
    ulnic::detail::follow_nic_cpu(a);  // ULNIC_NIC_AFFINITY=node: QEMU on a
    ASSERT_TRUE(only(affinity(), a));
    EXPECT_FALSE(ulnic::detail::sleep_near_nic(&nic, on_b));
    EXPECT_TRUE(only(affinity(), a));
  });
  ::close(on_b);
}

}  // namespace
