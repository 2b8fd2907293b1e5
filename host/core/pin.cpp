// The host side of ULNIC_NIC_AFFINITY=node (pin.h).
#include "pin.h"

#include <pthread.h>
#include <sched.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <mutex>

#include "ulnic/trace.h"

namespace ulnic::detail {

// Where the cluster pinned the NIC's QEMU to one CPU (ULNIC_NIC_AFFINITY=node
// at its start; emulator/board/node.h, nic_cpu), the thread that attaches
// runs there too: the NIC and the process it wakes share that CPU, every
// wake-up is local, and a process that blocks hands its CPU straight to the
// NIC. Per thread; threads it starts later inherit it, a child it forks
// does not (it gets the affinity from before the pin back: a program that
// attaches and then forks workers for other nodes, or a ping-pong partner,
// must not be squeezed onto this CPU). Left alone: a thread whose affinity
// is already one CPU or leaves out the NIC's (someone chose it: taskset,
// mpirun's binding), and every thread with ULNIC_AFFINITY=off. A thread that
// attaches to a second NIC on another CPU gets its own affinity back and is
// not pinned again.
namespace {
struct NicPin {
  int cpu = -1;
  bool given_up = false;
  cpu_set_t before{};
};
thread_local NicPin nic_pin;

bool off() {
  const char* v = std::getenv("ULNIC_AFFINITY");
  return v && std::strcmp(v, "off") == 0;
}

void unpin_in_child() {
  if (nic_pin.cpu >= 0) (void)::sched_setaffinity(0, sizeof nic_pin.before, &nic_pin.before);
  nic_pin = NicPin{};
}

}  // namespace

void follow_nic_cpu(int32_t cpu) {
  NicPin& pin = nic_pin;
  if (cpu < 0 || cpu >= CPU_SETSIZE || pin.given_up || pin.cpu == cpu) return;
  if (off()) return;
  if (pin.cpu >= 0) {  // pinned to another NIC's CPU
    (void)::sched_setaffinity(0, sizeof pin.before, &pin.before);
    pin.cpu = -1;
    pin.given_up = true;
    return;
  }
  cpu_set_t now;
  if (::sched_getaffinity(0, sizeof now, &now) != 0 || CPU_COUNT(&now) < 2 || !CPU_ISSET(cpu, &now)) {
    pin.given_up = true;
    return;
  }
  static std::once_flag atfork;
  std::call_once(atfork, [] { (void)::pthread_atfork(nullptr, nullptr, unpin_in_child); });
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(cpu, &one);
  if (::sched_setaffinity(0, sizeof one, &one) != 0) return;
  pin.cpu = cpu;
  pin.before = now;
}

// A NIC rings a process that sleeps on it from its QEMU vCPU thread. On a
// 2-CPU VM both CPUs are then usually busy (the two NICs spin for their
// conversation), and Linux queues the woken thread on the CPU it slept on:
// if that is not the ringing NIC's, it waits ~30-80 us for the hypervisor's
// IPI and for the vCPU there to give way; on the NIC's own CPU it runs
// within a few microseconds (docs/platform.md). So a thread goes to sleep on
// the CPU its NIC's vCPU last ran on: if it runs elsewhere, its affinity is
// narrowed to that CPU (the kernel moves it there at once) and given back
// straight away (a running thread stays where it is). It is never left
// pinned: awake, it is the kernel's to place (a thread that computes must
// not be held on a crowded CPU), and QEMU's threads are never pinned by it.
// In a ping-pong a thread wakes where it sleeps, so it moves only when the
// kernel moved it or the vCPU: on a 2-vCPU VM small messages of every
// protocol went from 61-128 to 22-27 us one way (RTT/2; hop_bench, 2000
// rounds each, the same hour); pinned while asleep (two affinity changes
// per sleep) 28-37, left pinned 23-35.
namespace {
struct NearNic {
  const void* nic = nullptr;
  int32_t cpu = -1;
  int64_t looked_ns = 0;
};
thread_local NearNic near_nic;
constexpr int64_t kLookEveryNs = 1'000'000;  // /proc/TID/stat costs ~3 us here; a vCPU moves every few ms at most
}  // namespace

int32_t last_cpu(int stat_fd) {
  char buf[1024];
  const ssize_t n = stat_fd < 0 ? -1 : ::pread(stat_fd, buf, sizeof buf - 1, 0);
  if (n <= 0) return -1;
  buf[n] = '\0';
  // "pid (comm) state ..." -- comm may hold spaces and parentheses: count
  // the fields after its last ')', which ends field 2.
  const char* p = std::strrchr(buf, ')');
  if (!p) return -1;
  int field = 2;
  for (; *p && field < 39; ++p)
    if (*p == ' ') ++field;
  if (field != 39 || *p < '0' || *p > '9') return -1;
  return int32_t(std::strtol(p, nullptr, 10));
}

bool sleep_near_nic(const void* nic, int stat_fd) {
  if (stat_fd < 0 || nic_pin.cpu >= 0 || off()) return false;
  NearNic& n = near_nic;
  const int64_t now = trace::monotonic_ns();
  if (n.nic != nic || now - n.looked_ns >= kLookEveryNs) n = NearNic{nic, last_cpu(stat_fd), now};
  if (n.cpu < 0 || n.cpu >= CPU_SETSIZE || ::sched_getcpu() == n.cpu) return false;
  cpu_set_t mine;
  if (::sched_getaffinity(0, sizeof mine, &mine) != 0 || CPU_COUNT(&mine) < 2 || !CPU_ISSET(n.cpu, &mine))
    return false;
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(n.cpu, &one);
  if (::sched_setaffinity(0, sizeof one, &one) != 0) return false;
  (void)::sched_setaffinity(0, sizeof mine, &mine);
  return true;
}

AwayFromNic::AwayFromNic() {
  if (nic_pin.cpu < 0) return;
  cpu_set_t others = nic_pin.before;
  CPU_CLR(nic_pin.cpu, &others);
  if (CPU_COUNT(&others) == 0) return;
  moved_ = ::sched_setaffinity(0, sizeof others, &others) == 0;
}

AwayFromNic::~AwayFromNic() {
  if (!moved_) return;
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(nic_pin.cpu, &one);
  (void)::sched_setaffinity(0, sizeof one, &one);
}

}  // namespace ulnic::detail
