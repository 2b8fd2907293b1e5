// virt's test/finisher device (sifive_test at 0x10_0000): ends QEMU with an
// exit status. Used by firmware tests and by fatal-halt paths under test.
#pragma once

#include <stdint.h>

#include "hal/mmio.h"

namespace hal::finisher {

constexpr uintptr_t kBase = 0x10'0000;
constexpr uint32_t kPass = 0x5555;  // QEMU exits 0
constexpr uint32_t kFail = 0x3333;  // QEMU exits with (value >> 16)

[[noreturn]] inline void exit(uint32_t code) {
  mmio_write32(kBase, code == 0 ? kPass : (code << 16) | kFail);
  for (;;) {
  }
}

}  // namespace hal::finisher
