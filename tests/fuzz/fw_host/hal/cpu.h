// Host stand-in for firmware/hal/cpu.h in the firmware's fuzz build
// (tests/fuzz): the same names, with host fences, no CSRs and no sleep. The
// fuzz build puts this folder before firmware/ on the include path.
#pragma once

#include <stdint.h>

#define HAL_CSR_READ(csr) uint64_t(0)
#define HAL_CSR_WRITE(csr, v) ((void)(v))
#define HAL_CSR_SET(csr, v) ((void)(v))
#define HAL_CSR_CLEAR(csr, v) ((void)(v))

namespace hal {

constexpr uint64_t kMstatusMIE = 1u << 3;
constexpr uint64_t kMieMTIE = 1u << 7;
constexpr uint64_t kMieMEIE = 1u << 11;
constexpr uint64_t kMcauseInterrupt = 1ull << 63;

inline void wait_for_interrupt() {}
inline void to_host_barrier() { __atomic_thread_fence(__ATOMIC_RELEASE); }
inline void from_host_barrier() { __atomic_thread_fence(__ATOMIC_ACQUIRE); }
inline void io_barrier() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
inline void full_barrier() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
[[noreturn]] inline void park_forever() { __builtin_trap(); }

}  // namespace hal
