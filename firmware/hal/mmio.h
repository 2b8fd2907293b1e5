// Memory-mapped I/O accessors: every device register access goes through
// these, so a trace or a fence policy can be added in one place.
#pragma once

#include <stdint.h>

namespace hal {

inline uint8_t mmio_read8(uintptr_t a) { return *reinterpret_cast<volatile uint8_t*>(a); }
inline uint16_t mmio_read16(uintptr_t a) { return *reinterpret_cast<volatile uint16_t*>(a); }
inline uint32_t mmio_read32(uintptr_t a) { return *reinterpret_cast<volatile uint32_t*>(a); }
inline uint64_t mmio_read64(uintptr_t a) { return *reinterpret_cast<volatile uint64_t*>(a); }
inline void mmio_write8(uintptr_t a, uint8_t v) { *reinterpret_cast<volatile uint8_t*>(a) = v; }
inline void mmio_write16(uintptr_t a, uint16_t v) { *reinterpret_cast<volatile uint16_t*>(a) = v; }
inline void mmio_write32(uintptr_t a, uint32_t v) { *reinterpret_cast<volatile uint32_t*>(a) = v; }
inline void mmio_write64(uintptr_t a, uint64_t v) { *reinterpret_cast<volatile uint64_t*>(a) = v; }

}  // namespace hal
