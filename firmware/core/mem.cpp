// The freestanding C memory primitives the compiler may call. Built with
// -fno-builtin so the loops below are not turned back into calls to
// themselves. Word-at-a-time when both sides are 8-byte aligned: DESIGN §7.3
// measured 64-bit copies as the fast path under TCG.
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "core/copy.h"

extern "C" {

void* memcpy(void* dst, const void* src, size_t n) {
  core::copy_bytes(dst, src, n);
  return dst;
}

// A destination above its source and overlapping it is copied from the end:
// by the board's copy engine (a memmove) when it takes it, else in pieces no
// longer than the distance between the two, each a copy that cannot overlap
// itself and goes by words where the ends allow (a byte loop moved a large
// slot's kOpMoveRegion in seconds, the NIC doing nothing else: issue 20).
// Below a few words of distance the byte loop is the cheaper.
void* memmove(void* dst, const void* src, size_t n) {
  auto* d = static_cast<uint8_t*>(dst);
  auto* s = static_cast<const uint8_t*>(src);
  if (d <= s || d >= s + n) return memcpy(dst, src, n);
  if (core::copy_engine::copy(dst, src, n)) return dst;
  const size_t gap = size_t(d - s);
  if (gap < 64) {
    while (n--) d[n] = s[n];
    return dst;
  }
  while (n) {
    const size_t piece = n < gap ? n : gap;
    n -= piece;
    core::copy_bytes(d + n, s + n, piece);
  }
  return dst;
}

void* memset(void* dst, int c, size_t n) {
  auto* d = static_cast<uint8_t*>(dst);
  uint64_t word = 0x0101010101010101ull * uint8_t(c);
  while (n && (uintptr_t(d) & 7)) *d++ = uint8_t(c), --n;
  for (; n >= 8; n -= 8, d += 8) *reinterpret_cast<uint64_t*>(d) = word;
  while (n--) *d++ = uint8_t(c);
  return dst;
}

int memcmp(const void* a, const void* b, size_t n) {
  auto* x = static_cast<const uint8_t*>(a);
  auto* y = static_cast<const uint8_t*>(b);
  for (size_t i = 0; i < n; ++i)
    if (x[i] != y[i]) return x[i] < y[i] ? -1 : 1;
  return 0;
}

int strcmp(const char* a, const char* b) {
  for (; *a && *a == *b; ++a, ++b) {
  }
  return *reinterpret_cast<const unsigned char*>(a) - *reinterpret_cast<const unsigned char*>(b);
}

size_t strlen(const char* s) {
  size_t n = 0;
  while (s[n]) ++n;
  return n;
}

}  // extern "C"
