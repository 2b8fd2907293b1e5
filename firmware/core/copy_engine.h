// The board's copy engine (abi/wake.h, kMarkCopy): the wake plugin copies
// with the host's memcpy what the firmware would copy with its own loop
// (core/copy.h), where both ends lie in the slots or the fabric. Without the
// plugin, or for a copy it refuses, the loop runs as before.
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "ulnic/abi/sram.h"
#include "ulnic/abi/wake.h"

namespace core::board {
struct Board;
}

namespace core::copy_engine {

// Shorter copies stay in the loop: a 64-byte message's copy is a few loop
// turns, and its instructions are issue 22's budget. From 256 bytes (eight
// turns, ~100 instructions and 64 memory accesses through the soft TLB) a
// request's dozen instructions and the plugin's call are cheaper; below 2 KiB the
// message rate hides the difference (vmmc_bench one-way, 256 B - 1 KiB: the
// same with and without the engine, 2026-12-03).
constexpr size_t kMinBytes = 256;

// True once the plugin answered the boot's probe.
extern bool g_on;

// Publishes the slots' and the fabric's BARs to the plugin and asks whether
// it is there (a copy of length 0). Again after every enumeration.
void init(const board::Board& b);

// The block the firmware and the plugin share (in the wake block's page).
inline ulnic::abi::CopyBlock& block() {
  return *reinterpret_cast<ulnic::abi::CopyBlock*>(ulnic::abi::kSramBase + ulnic::abi::kCopyOffset);
}

// Asks the plugin for one copy: true if it made it, false if the caller
// must (no plugin, or an end outside the regions it maps). Inline, with no
// call: a call in the copy's caller would make it save registers on every
// path, the short messages' too (issue 22's budget).
[[gnu::always_inline]] inline bool ask(uint64_t dst, uint64_t src, uint64_t n) {
  ulnic::abi::CopyBlock& c = block();
  const uint64_t seq = c.fw_seq + 1;
  // Relaxed, and no fence on either side of the marker: the engine is not
  // another agent but part of this hart's instruction stream. The plugin
  // runs in this hart's thread before the marker retires, so it sees the
  // request (and the caller's stores of the source) and its copy and answer
  // are done before the next instruction, in program order; the memory
  // clobber keeps the compiler from moving accesses across it. What must
  // order the copied bytes for another agent (a ring's tail, a completion)
  // is the caller's release, as for bytes it stored itself. A fence here
  // costs more than its instruction: QEMU turns every RISC-V fence into a
  // full host barrier, which right after the copy waited for the copy's
  // stores to reach a ring whose lines the receiving NIC's core holds
  // (vmmc_bench one-way, interleaved A/B on one cluster: 1 MiB 6.5-7.9 ->
  // 8.4-9.2 GB/s, 64 KiB 3.4-3.8 -> 3.7-4.0 GB/s; 2026-12-04).
  __atomic_store_n(&c.dst, dst, __ATOMIC_RELAXED);
  __atomic_store_n(&c.src, src, __ATOMIC_RELAXED);
  __atomic_store_n(&c.len, n, __ATOMIC_RELAXED);
  __atomic_store_n(&c.fw_seq, seq, __ATOMIC_RELAXED);
#ifdef __riscv
  asm volatile("slti zero, zero, %0" ::"i"(ulnic::abi::kMarkCopy) : "memory");
#endif
  return __atomic_load_n(&c.plugin_seq, __ATOMIC_RELAXED) == seq;
}

// Whether the engine made a copy of `n` bytes: long enough, neither end in
// the SRAM (the firmware's own memory: the plugin maps only the slots and
// the fabric), and the plugin made it.
[[gnu::always_inline]] inline bool copy(void* dst, const void* src, size_t n) {
  if (__builtin_expect(n < kMinBytes, 1)) return false;
  return g_on && uintptr_t(dst) - ulnic::abi::kSramBase >= ulnic::abi::kSramSize &&
         uintptr_t(src) - ulnic::abi::kSramBase >= ulnic::abi::kSramSize && ask(uintptr_t(dst), uintptr_t(src), n);
}

}  // namespace core::copy_engine
