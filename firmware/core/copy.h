// The NIC's copy loop (DESIGN §7.3: 64-bit loads and stores, four to a
// turn). memcpy (core/mem.cpp) runs it, and the data path inlines it: the
// link copies a 4 KiB packet at a time, and under TCG the return from a call
// costs a lookup of the next translation block. Written in assembly so that
// the compiler cannot turn it back into a call to memcpy.
//
// Source and destination need not be aligned, only alike: bytes are copied
// until both are 8-byte aligned (or, where they differ by 4 modulo 8, 4-byte
// aligned) and the rest goes in words of that size. A copy whose two ends
// differ by an odd amount, or by 2 modulo 4, goes byte by byte (rare: the
// protocols keep their payloads 8-byte aligned; AM pads its messages so a
// Long's payload is, issue 19: a byte loop moved 4 KiB in ~7 us).
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "core/copy_engine.h"

namespace core {

namespace copy_detail {

// Each loop starts on a 64-byte boundary, so it never straddles a page:
// QEMU chains a translation block to itself only within one guest page, and
// a loop across a page boundary went back to QEMU's block lookup every turn
// -- a sender's 4 KiB packet copies ran ~10x slower when unrelated code moved
// the inlined loop over a boundary (measured, issue 19: VMMC 1 MiB one-way
// 4.7 -> 0.5 GB/s). A jump over the padding: its nops were up to 15
// instructions of every copy (issue 22's per-message budget).
[[gnu::always_inline]] inline void words8(uint8_t*& d, const uint8_t*& s, size_t blocks) {
  __asm__ volatile(
      "j 1f\n"
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
}

[[gnu::always_inline]] inline void words4(uint8_t*& d, const uint8_t*& s, size_t blocks) {
  __asm__ volatile(
      "j 1f\n"
      ".balign 64\n"
      "1:\n\t"
      "lw t0, 0(%[s])\n\t"
      "lw t1, 4(%[s])\n\t"
      "lw t2, 8(%[s])\n\t"
      "lw t3, 12(%[s])\n\t"
      "sw t0, 0(%[d])\n\t"
      "sw t1, 4(%[d])\n\t"
      "sw t2, 8(%[d])\n\t"
      "sw t3, 12(%[d])\n\t"
      "addi %[s], %[s], 16\n\t"
      "addi %[d], %[d], 16\n\t"
      "addi %[b], %[b], -1\n\t"
      "bnez %[b], 1b"
      : [d] "+r"(d), [s] "+r"(s), [b] "+r"(blocks)
      :
      : "t0", "t1", "t2", "t3", "memory");
}

// Whole words one at a time (what is left after the four-word turns: a
// 16-byte AM argument block went byte by byte, ~100 instructions).
[[gnu::always_inline]] inline void single_words(uint8_t*& d, const uint8_t*& s, size_t n, size_t word) {
  for (; n; --n, d += word, s += word) {
    uint64_t w;
    if (word == 8) {
      __asm__ volatile("ld %0, 0(%1)" : "=r"(w) : "r"(s) : "memory");
      __asm__ volatile("sd %0, 0(%1)" ::"r"(w), "r"(d) : "memory");
    } else {
      __asm__ volatile("lwu %0, 0(%1)" : "=r"(w) : "r"(s) : "memory");
      __asm__ volatile("sw %0, 0(%1)" ::"r"(w), "r"(d) : "memory");
    }
  }
}

[[gnu::always_inline]] inline void bytes(uint8_t*& d, const uint8_t*& s, size_t n) {
  for (; n; --n, ++d, ++s) {
    uint8_t b;
    __asm__ volatile("lbu %0, 0(%1)" : "=r"(b) : "r"(s) : "memory");
    __asm__ volatile("sb %0, 0(%1)" ::"r"(b), "r"(d) : "memory");
  }
}

}  // namespace copy_detail

// A long copy between the slots and the fabric goes to the board's copy
// engine when there is one (core/copy_engine.h).
[[gnu::always_inline]] inline void copy_bytes(void* dst, const void* src, size_t n) {
  using namespace copy_detail;
  if (copy_engine::copy(dst, src, n)) return;
  auto* d = static_cast<uint8_t*>(dst);
  auto* s = static_cast<const uint8_t*>(src);
  const uintptr_t apart = uintptr_t(d) ^ uintptr_t(s);
  const uintptr_t word = (apart & 7) == 0 ? 8 : (apart & 3) == 0 ? 4 : 1;
  if (word > 1) {
    const size_t head = (word - (uintptr_t(d) & (word - 1))) & (word - 1);
    if (head >= n) return bytes(d, s, n);
    bytes(d, s, head);
    n -= head;
    const size_t block = 4 * word;  // four loads and four stores a turn
    if (n >= block) {
      if (word == 8) words8(d, s, n / block);
      else words4(d, s, n / block);
      n %= block;
    }
    single_words(d, s, n / word, word);
    n %= word;
  }
  bytes(d, s, n);
}

}  // namespace core
