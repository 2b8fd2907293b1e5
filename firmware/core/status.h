// The firmware's side of the status block (shared/include/ulnic/abi/status.h).
// The firmware is the block's only writer; every store is a single aligned
// word so the node's tools never read a torn field.
#pragma once

#include "ulnic/abi/status.h"

namespace core::status {

ulnic::abi::StatusBlock& block();

// Called first thing at boot: magic, ABI, build id, version, boot count.
void begin_boot(uint64_t mtime_now, const char* version);
void set_state(ulnic::abi::FwState s);
ulnic::abi::FwState state();
void count(ulnic::abi::Counter c, uint64_t n = 1);
uint64_t counter(ulnic::abi::Counter c);
// Uptime and heartbeat; the tools use heartbeat to tell a live NIC from a hung one.
void refresh(uint64_t mtime_now);

// Single-word store/load into the block (relaxed atomics: one writer).
template <class T>
inline void put(T& field, T v) {
  __atomic_store_n(&field, v, __ATOMIC_RELAXED);
}

// The hex build id of this image (from the linker's .note.gnu.build-id).
const char* build_id();

}  // namespace core::status
