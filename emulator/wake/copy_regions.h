// The copy engine's one check (abi/wake.h, kMarkCopy): where a range of the
// NIC's physical addresses lies in the wake plugin's own mappings of the
// files behind the slots and the fabric. The regions' bases and sizes are
// the firmware's word and are not trusted: a range is resolved only if it
// lies whole inside one region as the firmware published it *and* inside
// the plugin's mapping of that region's file, so no copy ever touches
// memory outside what the plugin mapped.
#pragma once

#include <algorithm>
#include <cstdint>

#include "ulnic/abi/wake.h"

namespace ulnic::wake {

// A file behind one of the NIC's BARs, mapped whole (at null: not mapped).
struct Mapped {
  uint8_t* at = nullptr;
  uint64_t size = 0;
};

// Our address of [addr, addr + n), n > 0; null if no region holds it whole.
inline uint8_t* resolve(const abi::CopyRegion (&published)[abi::kCopyRegions], const Mapped (&mapped)[abi::kCopyRegions],
                        uint64_t addr, uint64_t n) {
  for (uint32_t k = 0; k < abi::kCopyRegions; ++k) {
    const Mapped& m = mapped[k];
    // (written by the firmware while we may read: one load each)
    const uint64_t base = __atomic_load_n(&published[k].base, __ATOMIC_RELAXED);
    const uint64_t size = std::min(__atomic_load_n(&published[k].size, __ATOMIC_RELAXED), m.size);
    if (m.at && base && addr >= base && addr - base <= size && n <= size - (addr - base)) return m.at + (addr - base);
  }
  return nullptr;
}

}  // namespace ulnic::wake
