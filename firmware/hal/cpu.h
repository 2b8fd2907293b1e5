// RV64 machine-mode CPU helpers: CSRs, fences, sleep.
#pragma once

#include <stdint.h>

#define HAL_CSR_READ(csr)                               \
  ({                                                    \
    uint64_t v_;                                        \
    __asm__ volatile("csrr %0, " #csr : "=r"(v_));      \
    v_;                                                 \
  })
#define HAL_CSR_WRITE(csr, v) __asm__ volatile("csrw " #csr ", %0" ::"rK"(uint64_t(v)) : "memory")
#define HAL_CSR_SET(csr, v) __asm__ volatile("csrs " #csr ", %0" ::"rK"(uint64_t(v)) : "memory")
#define HAL_CSR_CLEAR(csr, v) __asm__ volatile("csrc " #csr ", %0" ::"rK"(uint64_t(v)) : "memory")

namespace hal {

// mstatus / mie / mip bits used by the firmware.
constexpr uint64_t kMstatusMIE = 1u << 3;
constexpr uint64_t kMieMTIE = 1u << 7;   // machine timer
constexpr uint64_t kMieMEIE = 1u << 11;  // machine external (IMSIC)
constexpr uint64_t kMcauseInterrupt = 1ull << 63;

// Sleep until an interrupt enabled in mie is pending. Global interrupts stay
// off (mstatus.MIE = 0): WFI still wakes on a pending enabled interrupt, and
// the loop polls its sources afterwards, so no handler runs on the fast path.
inline void wait_for_interrupt() { __asm__ volatile("wfi" ::: "memory"); }

// Named by what the other side does with them (STYLE: no bare fences).
// Before publishing an index that a host or peer will acquire.
inline void to_host_barrier() { __asm__ volatile("fence rw, w" ::: "memory"); }
// After reading an index a host or peer published, before reading its data.
inline void from_host_barrier() { __asm__ volatile("fence r, rw" ::: "memory"); }
// Device register writes must not pass earlier memory accesses (and vice versa).
inline void io_barrier() { __asm__ volatile("fence iorw, iorw" ::: "memory"); }
// A full fence: the dormancy handshakes with hosts and peers are
// Dekker-style (each side stores its flag, then loads the other's), which
// needs store->load order.
inline void full_barrier() { __asm__ volatile("fence rw, rw" ::: "memory"); }

[[noreturn]] inline void park_forever() {
  HAL_CSR_CLEAR(mstatus, kMstatusMIE);
  HAL_CSR_WRITE(mie, 0);
  for (;;) wait_for_interrupt();
}

}  // namespace hal
