#include "hal/clint.h"

#include "hal/mmio.h"

namespace hal::clint {
namespace {

enum Reg : uintptr_t {
  kMtimecmp0 = 0x4000,  // hart 0 compare
  kMtime = 0xbff8,      // free-running counter
};

}  // namespace

// The `time` CSR reads the same counter as mtime (QEMU's ACLINT installs it
// as the hart's rdtime source) without an MMIO access: under TCG a device
// read leaves the translated code and takes QEMU's global lock, and the
// send path reads the clock for every packet.
uint64_t now() {
  uint64_t t;
  __asm__ volatile("csrr %0, time" : "=r"(t));
  return t;
}

void set_deadline(uint64_t when) { mmio_write64(kBase + kMtimecmp0, when); }

void clear_deadline() { mmio_write64(kBase + kMtimecmp0, ~0ull); }

bool deadline_passed() { return now() >= mmio_read64(kBase + kMtimecmp0); }

}  // namespace hal::clint
