// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), the wire checksum.
// Header-only and freestanding: the firmware, the switch and the capture
// tools compute it the same way. Slice-by-8 (eight 1 KiB tables built at
// compile time): the checksum runs over every packet at both ends, and on
// the emulated NIC a byte-at-a-time CRC of a 4 KiB payload cost more than
// everything else the link does with the packet.
#pragma once

#include <stddef.h>
#include <stdint.h>

namespace ulnic {

struct Crc32cTables {
  uint32_t t[8][256];
  constexpr Crc32cTables() : t() {
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (0x82F63B78u & (0u - (c & 1u)));
      t[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; ++i)
      for (int s = 1; s < 8; ++s) t[s][i] = (t[s - 1][i] >> 8) ^ t[0][t[s - 1][i] & 0xff];
  }
};
inline constexpr Crc32cTables kCrc32c{};

// One byte at a time: the reference the fast path is tested against.
inline uint32_t crc32c_bytewise(uint32_t crc, const void* data, size_t n) {
  const uint8_t* p = static_cast<const uint8_t*>(data);
  crc = ~crc;
  for (size_t i = 0; i < n; ++i) crc = kCrc32c.t[0][(crc ^ p[i]) & 0xff] ^ (crc >> 8);
  return ~crc;
}

// Continues a CRC over `n` more bytes; start with crc = 0. Little-endian
// hosts only (x86-64 and RV64 both are).
inline uint32_t crc32c(uint32_t crc, const void* data, size_t n) {
  const uint8_t* p = static_cast<const uint8_t*>(data);
  crc = ~crc;
  for (; n && (reinterpret_cast<uintptr_t>(p) & 7); --n, ++p) crc = kCrc32c.t[0][(crc ^ *p) & 0xff] ^ (crc >> 8);
  for (; n >= 8; n -= 8, p += 8) {
    uint64_t w = *reinterpret_cast<const uint64_t*>(p) ^ crc;
    crc = kCrc32c.t[7][w & 0xff] ^ kCrc32c.t[6][(w >> 8) & 0xff] ^ kCrc32c.t[5][(w >> 16) & 0xff] ^
          kCrc32c.t[4][(w >> 24) & 0xff] ^ kCrc32c.t[3][(w >> 32) & 0xff] ^ kCrc32c.t[2][(w >> 40) & 0xff] ^
          kCrc32c.t[1][(w >> 48) & 0xff] ^ kCrc32c.t[0][w >> 56];
  }
  for (; n; --n, ++p) crc = kCrc32c.t[0][(crc ^ *p) & 0xff] ^ (crc >> 8);
  return ~crc;
}

}  // namespace ulnic
