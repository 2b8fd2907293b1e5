// The host side of ULNIC_NIC_AFFINITY=node (pin.h).
#include "pin.h"

#include <pthread.h>
#include <sched.h>

#include <cstdlib>
#include <cstring>
#include <mutex>

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
