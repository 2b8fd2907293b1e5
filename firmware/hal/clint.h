// CLINT of QEMU's virt machine: mtime (10 MHz) and hart 0's mtimecmp.
#pragma once

#include <stdint.h>

namespace hal::clint {

constexpr uintptr_t kBase = 0x200'0000;
constexpr uint64_t kTicksPerUs = 10;  // virt's RISCV_ACLINT_DEFAULT_TIMEBASE_FREQ = 10 MHz

uint64_t now();
inline uint64_t ticks_to_us(uint64_t t) { return t / kTicksPerUs; }
inline uint64_t us_to_ticks(uint64_t us) { return us * kTicksPerUs; }

// Raise the machine timer interrupt (mip.MTIP) at `when` (mtime ticks).
void set_deadline(uint64_t when);
// No timer wake-up until set_deadline() is called again.
void clear_deadline();
bool deadline_passed();

}  // namespace hal::clint
