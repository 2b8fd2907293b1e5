// RISC-V AIA IMSIC, machine-level interrupt file of hart 0 (QEMU virt with
// aia=aplic-imsic). A PCI device's MSI-X entry pointing at kMsiAddress with
// data = identity sets that identity pending; with mie.MEIE set, WFI wakes.
// Registers are reached indirectly through miselect/mireg (AIA spec 1.0).
#pragma once

#include <stdint.h>

namespace hal::imsic {

constexpr uint64_t kMsiAddress = 0x2400'0000;  // hart 0, M-level file (virt memory map)
constexpr uint32_t kMaxIdentity = 63;          // we only use eie0 (identities 1..63)

// Enables delivery of identities 1..count (count <= 63) and mie.MEIE.
void init(uint32_t count);
// Claims the highest-priority pending identity (lowest number) and clears
// it; 0 if none is pending.
uint32_t claim();
// Pending bits of identities 0..63 (eip0), without claiming.
uint64_t pending();

}  // namespace hal::imsic
