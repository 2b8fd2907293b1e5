// The kernel's struct sched_attr (SCHED_ATTR_SIZE_VER1) and the calling
// thread's sched_getattr/sched_setattr. glibc wraps neither before 2.41, and
// <linux/sched/types.h> redefines glibc's struct sched_param in C++.
#pragma once

#include <sys/syscall.h>
#include <unistd.h>

#include <cstdint>

namespace ulnic {

struct SchedAttr {
  uint32_t size = sizeof(SchedAttr);
  uint32_t sched_policy = 0;  // SCHED_OTHER
  uint64_t sched_flags = 0;
  int32_t sched_nice = 0;
  uint32_t sched_priority = 0;
  uint64_t sched_runtime = 0;  // SCHED_OTHER: the thread's slice (Linux >= 6.12), ns
  uint64_t sched_deadline = 0, sched_period = 0;
  uint32_t sched_util_min = 0, sched_util_max = 0;
};
static_assert(sizeof(SchedAttr) == 56);
constexpr uint64_t kSchedFlagResetOnFork = 0x01;  // SCHED_FLAG_RESET_ON_FORK

inline bool get_sched_attr(SchedAttr& a) {
  a = SchedAttr{};
  return ::syscall(SYS_sched_getattr, 0, &a, sizeof a, 0) == 0;
}
inline bool set_sched_attr(const SchedAttr& a) { return ::syscall(SYS_sched_setattr, 0, &a, 0) == 0; }

}  // namespace ulnic
