// ulnic NIC ABI: base types shared by the firmware (freestanding RV64) and the
// host (x86-64 Linux). Both sides are little-endian; every multi-byte field in
// shared memory is little-endian and naturally aligned.
#pragma once

#include <stddef.h>
#include <stdint.h>

// Bumped on any incompatible change to a layout in shared/. The firmware
// reports it in the status block; the host refuses to talk to a NIC whose
// version differs.
#define ULNIC_ABI_VERSION 8u

#define ULNIC_ABI_CHECK_SIZE(type, bytes) \
  static_assert(sizeof(type) == (bytes), #type " size is part of the ABI")
#define ULNIC_ABI_CHECK_OFFSET(type, field, off) \
  static_assert(offsetof(type, field) == (off), #type "." #field " offset is part of the ABI")

namespace ulnic::abi {

// Four ASCII characters packed little-endian, so a hex dump reads them in order.
constexpr uint32_t fourcc(char a, char b, char c, char d) {
  return uint32_t(uint8_t(a)) | uint32_t(uint8_t(b)) << 8 | uint32_t(uint8_t(c)) << 16 |
         uint32_t(uint8_t(d)) << 24;
}

}  // namespace ulnic::abi
