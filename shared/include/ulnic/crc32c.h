// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), the wire checksum.
// Header-only and freestanding: the firmware, the switch and the capture
// tools compute it the same way. Table-driven, one table built at compile time.
#pragma once

#include <stddef.h>
#include <stdint.h>

namespace ulnic {

struct Crc32cTable {
  uint32_t t[256];
  constexpr Crc32cTable() : t() {
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (0x82F63B78u & (0u - (c & 1u)));
      t[i] = c;
    }
  }
};
inline constexpr Crc32cTable kCrc32cTable{};

// Continues a CRC over `n` more bytes; start with crc = 0.
inline uint32_t crc32c(uint32_t crc, const void* data, size_t n) {
  const uint8_t* p = static_cast<const uint8_t*>(data);
  crc = ~crc;
  for (size_t i = 0; i < n; ++i) crc = kCrc32cTable.t[(crc ^ p[i]) & 0xff] ^ (crc >> 8);
  return ~crc;
}

}  // namespace ulnic
