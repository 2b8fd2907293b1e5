#include "hal/clint.h"

#include "hal/mmio.h"

namespace hal::clint {
namespace {

enum Reg : uintptr_t {
  kMtimecmp0 = 0x4000,  // hart 0 compare
  kMtime = 0xbff8,      // free-running counter
};

}  // namespace

uint64_t now() { return mmio_read64(kBase + kMtime); }

void set_deadline(uint64_t when) { mmio_write64(kBase + kMtimecmp0, when); }

void clear_deadline() { mmio_write64(kBase + kMtimecmp0, ~0ull); }

bool deadline_passed() { return now() >= mmio_read64(kBase + kMtimecmp0); }

}  // namespace hal::clint
