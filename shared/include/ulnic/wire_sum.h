// The payload half of the wire checksum (fabric.h, WireHeader.checksum):
//
//   checksum = CRC-32C( header with checksum = 0 ,  WireSum{a, b} of the payload )
//
// WireSum is a Fletcher-style pair of 64-bit running sums over the payload's
// little-endian 64-bit words (a tail shorter than a word is zero-padded):
// a += w; b += a. Any change of one word changes `a`; swapped or shifted
// words change `b`; the CRC then folds header and sums into 32 bits, so a
// random corruption anywhere passes with probability about 2^-32, as with a
// CRC over everything. Why not CRC-32C over the payload: on the emulated NIC
// a table-driven CRC costs ~25 instructions per 8 bytes at both ends and was
// the ceiling of the link's bandwidth; the sums cost two additions per word,
// and the sender computes them while it copies the payload into the ring.
//
// The checksum is taken only when a switch is in the path (the switch
// injects faults and bridges machines over UDP: a lossy wire). On the direct
// fabric the "wire" is memory that only NICs and the fabric server map,
// which corrupts nothing a checksum could catch (a faulty peer firmware
// would checksum its wrong bytes as well; a hostile one forges a CRC as
// easily as a header), so both ends skip it there, as loopback devices skip
// theirs: the receiver's checks of every field guard where bytes go.
// Measured (issue 5): the payload sums cost the sender as much again as its
// copy, and the receiver a pass over the packet before its copy; the header
// CRC alone cost each end ~700 cycles per 4 KiB packet (~25% of its copy).
#pragma once

#include <stddef.h>
#include <stdint.h>
#include <string.h>

namespace ulnic {

struct WireSum {
  uint64_t a = 0, b = 0;
};

namespace wire_detail {
typedef uint64_t __attribute__((may_alias)) word_t;

inline void add(WireSum& s, uint64_t w) {
  s.a += w;
  s.b += s.a;
}

inline void add_tail(WireSum& s, const uint8_t* p, size_t n) {
  if (n == 0) return;
  uint64_t w = 0;
  memcpy(&w, p, n);
  add(s, w);
}
}  // namespace wire_detail

inline WireSum wire_sum(const void* data, size_t n) {
  using namespace wire_detail;
  WireSum s;
  const uint8_t* p = static_cast<const uint8_t*>(data);
  size_t words = n / 8;
  if ((reinterpret_cast<uintptr_t>(p) & 7) == 0) {
    const word_t* w = reinterpret_cast<const word_t*>(p);
    for (size_t i = 0; i < words; ++i) add(s, w[i]);
  } else {
    for (size_t i = 0; i < words; ++i) {
      uint64_t w;
      memcpy(&w, p + 8 * i, 8);
      add(s, w);
    }
  }
  add_tail(s, p + 8 * words, n % 8);
  return s;
}

// memcpy(dst, src, n) and wire_sum(dst, n) in one pass when both are
// 8-byte aligned (the ring's payloads are); two passes otherwise.
inline WireSum copy_and_sum(void* dst, const void* src, size_t n) {
  using namespace wire_detail;
  if (((reinterpret_cast<uintptr_t>(dst) | reinterpret_cast<uintptr_t>(src)) & 7) != 0) {
    memcpy(dst, src, n);
    return wire_sum(dst, n);
  }
  WireSum s;
  const word_t* from = static_cast<const word_t*>(src);
  word_t* to = static_cast<word_t*>(dst);
  size_t words = n / 8, i = 0;
  for (; i + 4 <= words; i += 4) {
    uint64_t w0 = from[i], w1 = from[i + 1], w2 = from[i + 2], w3 = from[i + 3];
    to[i] = w0, to[i + 1] = w1, to[i + 2] = w2, to[i + 3] = w3;
    add(s, w0), add(s, w1), add(s, w2), add(s, w3);
  }
  for (; i < words; ++i) {
    uint64_t w = from[i];
    to[i] = w;
    add(s, w);
  }
  const uint8_t* tail = static_cast<const uint8_t*>(src) + 8 * words;
  memcpy(static_cast<uint8_t*>(dst) + 8 * words, tail, n % 8);
  add_tail(s, tail, n % 8);
  return s;
}

}  // namespace ulnic
