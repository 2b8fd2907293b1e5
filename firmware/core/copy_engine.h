// The board's copy engine (abi/wake.h, kMarkCopy): the wake plugin copies
// with the host's memcpy what the firmware would copy with its own loop
// (core/copy.h), where both ends lie in the slots or the fabric. Without the
// plugin, or for a copy it refuses, the loop runs as before.
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "ulnic/abi/sram.h"

namespace core::board {
struct Board;
}

namespace core::copy_engine {

// Shorter copies stay in the loop: the marker's round trip (a store of the
// request, the plugin's call, a load of the answer) costs about what the
// loop takes for ~256 bytes, and a short message's own instructions are
// issue 22's budget.
constexpr size_t kMinBytes = 1024;

// True once the plugin answered the boot's probe.
extern bool g_on;

// Publishes the slots' and the fabric's BARs to the plugin and asks whether
// it is there (a copy of length 0). Again after every enumeration.
void init(const board::Board& b);

// Asks the plugin for one copy: true if it made it, false if the caller
// must (no plugin, or an end outside the regions it maps).
bool copy(void* dst, const void* src, size_t n);

// Whether a copy of `n` bytes between these addresses goes to the engine:
// long enough, and neither end in the SRAM (the firmware's own memory: the
// plugin maps only the slots and the fabric).
[[gnu::always_inline]] inline bool worth(const void* dst, const void* src, size_t n) {
  return n >= kMinBytes && g_on && uintptr_t(dst) - ulnic::abi::kSramBase >= ulnic::abi::kSramSize &&
         uintptr_t(src) - ulnic::abi::kSramBase >= ulnic::abi::kSramSize;
}

}  // namespace core::copy_engine
