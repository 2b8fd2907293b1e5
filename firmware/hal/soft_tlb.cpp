#include "hal/soft_tlb.h"

namespace hal::soft_tlb {

void grow(uint64_t base, uint64_t bytes, uint32_t rounds) {
  for (uint32_t r = 0; r < rounds; ++r) {
    for (uint64_t a = base; a < base + bytes; a += kPage) (void)*reinterpret_cast<volatile const uint8_t*>(a);
    // In M-mode sfence.vma flushes QEMU's TLB (and lets it resize).
    __asm__ volatile("sfence.vma" ::: "memory");
  }
}

}  // namespace hal::soft_tlb
