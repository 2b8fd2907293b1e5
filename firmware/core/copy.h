// The NIC's copy loop (DESIGN §7.3: 64-bit loads and stores, four to a
// turn). memcpy (core/mem.cpp) runs it, and the data path inlines it: the
// link copies a 4 KiB packet at a time, and under TCG the return from a call
// costs a lookup of the next translation block. Written in assembly so that
// the compiler cannot turn it back into a call to memcpy.
#pragma once

#include <stddef.h>
#include <stdint.h>

namespace core {

[[gnu::always_inline]] inline void copy_bytes(void* dst, const void* src, size_t n) {
  auto* d = static_cast<uint8_t*>(dst);
  auto* s = static_cast<const uint8_t*>(src);
  if (((uintptr_t(d) | uintptr_t(s)) & 7) == 0) {
    if (n >= 32) {
      size_t blocks = n / 32;
      // The loop starts on a 64-byte boundary, so it never straddles a
      // page: QEMU chains a translation block to itself only within one
      // guest page, and a loop across a page boundary went back to QEMU's
      // block lookup every turn -- a sender's 4 KiB packet copies ran ~10x
      // slower when unrelated code moved the inlined loop over a boundary
      // (measured, issue 19: VMMC 1 MiB one-way 4.7 -> 0.5 GB/s).
      __asm__ volatile(
          ".balign 64\n"
          "1:\n\t"
          "ld t0, 0(%[s])\n\t"
          "ld t1, 8(%[s])\n\t"
          "ld t2, 16(%[s])\n\t"
          "ld t3, 24(%[s])\n\t"
          "sd t0, 0(%[d])\n\t"
          "sd t1, 8(%[d])\n\t"
          "sd t2, 16(%[d])\n\t"
          "sd t3, 24(%[d])\n\t"
          "addi %[s], %[s], 32\n\t"
          "addi %[d], %[d], 32\n\t"
          "addi %[b], %[b], -1\n\t"
          "bnez %[b], 1b"
          : [d] "+r"(d), [s] "+r"(s), [b] "+r"(blocks)
          :
          : "t0", "t1", "t2", "t3", "memory");
      n %= 32;
    }
    for (; n >= 8; n -= 8, d += 8, s += 8) {
      uint64_t w;
      __asm__ volatile("ld %0, 0(%1)" : "=r"(w) : "r"(s) : "memory");
      __asm__ volatile("sd %0, 0(%1)" ::"r"(w), "r"(d) : "memory");
    }
  }
  for (; n; --n, ++d, ++s) {
    uint8_t b;
    __asm__ volatile("lbu %0, 0(%1)" : "=r"(b) : "r"(s) : "memory");
    __asm__ volatile("sb %0, 0(%1)" ::"r"(b), "r"(d) : "memory");
  }
}

}  // namespace core
