#include "hal/imsic.h"

#include "hal/cpu.h"

namespace hal::imsic {
namespace {

// Indirect CSR access (AIA): miselect selects, mireg reads/writes.
enum Csr : uint32_t { kMiselect = 0x350, kMireg = 0x351, kMtopei = 0x35c };
// miselect values for the interrupt file (AIA spec, "IMSIC register space").
enum Reg : uint64_t {
  kEidelivery = 0x70,
  kEithreshold = 0x72,
  kEip0 = 0x80,
  kEie0 = 0xc0,
};

void write_reg(Reg r, uint64_t v) {
  __asm__ volatile("csrw 0x350, %0\n csrw 0x351, %1" ::"r"(uint64_t(r)), "r"(v) : "memory");
}
uint64_t read_reg(Reg r) {
  uint64_t v;
  __asm__ volatile("csrw 0x350, %1\n csrr %0, 0x351" : "=r"(v) : "r"(uint64_t(r)) : "memory");
  return v;
}

}  // namespace

void init(uint32_t count) {
  if (count > kMaxIdentity) count = kMaxIdentity;
  write_reg(kEidelivery, 1);   // deliver interrupts from this file
  write_reg(kEithreshold, 0);  // no priority threshold
  uint64_t mask = count == 63 ? ~1ull : ((1ull << (count + 1)) - 2);  // identities 1..count
  write_reg(kEie0, mask);
  HAL_CSR_SET(mie, kMieMEIE);
}

uint32_t claim() {
  uint64_t v;
  // Reading with a write of zero claims: the top identity's pending bit clears.
  __asm__ volatile("csrrw %0, 0x35c, zero" : "=r"(v)::"memory");
  return uint32_t(v >> 16) & 0x7ff;
}

uint64_t pending() { return read_reg(kEip0); }

}  // namespace hal::imsic
