// The NIC processor's address translation as QEMU's TCG implements it: every
// guest load and store goes through a direct-mapped software TLB indexed by
// (address >> 12) modulo its size. Two pages whose addresses agree modulo the
// TLB's reach share one entry, and a copy between them refills it on every
// alternation (DESIGN §7.3: ~30x slower). QEMU sizes the TLB itself: 256
// entries at first, resized only when it is flushed -- doubled when more than
// 70% of it was in use, shrunk after 100 ms of little use.
//
// The firmware therefore grows it at the end of its boot (changes of QEMU's
// memory map, as BAR programming makes, flush it too): it touches every page
// of its SRAM and flushes (sfence.vma), over and over, until the TLB holds
// 8192 entries (kReach = 32 MiB: a flush with 4096 of 8192 entries in use
// neither grows nor shrinks it), and nothing flushes it afterwards. Without
// this the streaming copies of the link ran at their normal speed or 4x
// slower, run by run, as the ring's position happened to meet the user's
// buffer in a 1 MiB reach (issue 5).
#pragma once

#include <stdint.h>

namespace hal::soft_tlb {

constexpr uint64_t kPage = 4096;
constexpr uint64_t kReach = 8192 * kPage;  // what grow() leaves behind

// Touches [base, base + bytes) page by page and flushes, `rounds` times.
// With the SRAM (16 MiB, 4096 pages): 8192 entries after at most 7 rounds
// (QEMU's smallest TLB has 64 entries).
void grow(uint64_t base, uint64_t bytes, uint32_t rounds);

}  // namespace hal::soft_tlb
