// The freestanding memcpy/memmove/memset/memcmp (core/mem.cpp) at every
// alignment and length that matters to the word-at-a-time paths.
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "harness.h"

namespace {
uint8_t g_src[256], g_dst[256], g_ref[256];
const size_t kLengths[] = {0, 1, 7, 8, 31, 32, 33, 100};
const size_t kOverlapLengths[] = {1, 8, 17, 64};

void fill(uint8_t* p, size_t n, uint8_t seed) {
  for (size_t i = 0; i < n; ++i) p[i] = uint8_t(seed + i * 7);
}
// A byte loop the compiler cannot turn into a call to what we test.
void slow_copy(volatile uint8_t* d, const volatile uint8_t* s, size_t n) {
  for (size_t i = 0; i < n; ++i) d[i] = s[i];
}
bool equal(const uint8_t* a, const uint8_t* b, size_t n) {
  for (size_t i = 0; i < n; ++i)
    if (a[i] != b[i]) return false;
  return true;
}
}  // namespace

FW_TEST(memcpy_all_alignments) {
  fill(g_src, sizeof g_src, 1);
  for (size_t so = 0; so < 9; ++so)
    for (size_t d_o = 0; d_o < 9; ++d_o)
      for (size_t n : kLengths) {
        fill(g_dst, sizeof g_dst, 99);
        fill(g_ref, sizeof g_ref, 99);
        slow_copy(g_ref + d_o, g_src + so, n);
        memcpy(g_dst + d_o, g_src + so, n);
        CHECK(equal(g_dst, g_ref, sizeof g_dst));
      }
}

FW_TEST(memmove_overlapping_both_ways) {
  for (int dir = 0; dir < 2; ++dir)
    for (size_t n : kOverlapLengths) {
      fill(g_dst, sizeof g_dst, 5);
      fill(g_ref, sizeof g_ref, 5);
      uint8_t tmp[128];
      size_t from = dir ? 10 : 3, to = dir ? 3 : 10;
      slow_copy(tmp, g_ref + from, n);
      slow_copy(g_ref + to, tmp, n);
      memmove(g_dst + to, g_dst + from, n);
      CHECK(equal(g_dst, g_ref, sizeof g_dst));
    }
}

FW_TEST(memset_and_memcmp) {
  for (size_t off = 0; off < 9; ++off) {
    fill(g_dst, sizeof g_dst, 0);
    memset(g_dst + off, 0xab, 45);
    for (size_t i = 0; i < sizeof g_dst; ++i) {
      bool inside = i >= off && i < off + 45;
      if (inside) CHECK_EQ(g_dst[i], 0xab);
    }
  }
  EXPECT_EQ(memcmp("abc", "abd", 3), -1);
  EXPECT_EQ(memcmp("abd", "abc", 3), 1);
  EXPECT_EQ(memcmp("abc", "abc", 3), 0);
  EXPECT_EQ(strlen("ulnic"), 5u);
}
