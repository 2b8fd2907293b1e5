// The freestanding memcpy/memmove/memset/memcmp (core/mem.cpp) at every
// alignment and length that matters to the word-at-a-time paths, and the
// copy loop under memcpy and the link (core/copy.h: head bytes up to
// alignment, then 8- or 4-byte words when both ends agree modulo 8 or 4).
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "core/copy.h"
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

// ---------------------------------------------------------------------
// core::copy_bytes, and memcpy through it: every destination and source
// offset within two words (so every head length, and every relation of the
// two modulo 8 and 4: words of 8, of 4, or bytes), every length up to a few
// blocks past the widest turn (32 bytes) and some large ones, in buffers with
// guard bytes on both sides. The copied bytes equal the source; no byte
// outside [dst, dst + n) changes, and the source does not change.

namespace {

constexpr size_t kGuard = 64;
constexpr size_t kMaxOffset = 16;
constexpr size_t kMaxSmall = 70;
constexpr size_t kLarge[] = {4096, 4096 + 13, 65536 + 5};
constexpr size_t kSpan = kGuard + kMaxOffset + 65536 + 5 + kGuard;
alignas(64) uint8_t g_csrc[kSpan], g_cdst[kSpan];

// Source bytes are below 0x80 and guard bytes above: a store of any byte
// read from the source buffer into a guard position shows.
uint8_t src_byte(size_t i) { return uint8_t((i * 37 + (i >> 7)) & 0x7f); }
uint8_t guard_byte(size_t i) { return uint8_t(0x80 | ((i * 11 + (i >> 5)) & 0x7f)); }

void copy_fn(void* d, const void* s, size_t n) { core::copy_bytes(d, s, n); }
void memcpy_fn(void* d, const void* s, size_t n) { memcpy(d, s, n); }

void fill_source() {
  for (size_t i = 0; i < kSpan; ++i) g_csrc[i] = src_byte(i);
}

// n bytes from source offset so to destination offset d_o (each past
// kGuard) with `copy`; false (after a note) at the first byte that is not
// what it must be.
bool copied(void (*copy)(void*, const void*, size_t), const char* name, size_t d_o, size_t so, size_t n) {
  const size_t end = kGuard + d_o + n + kGuard;  // the bytes that matter
  for (size_t i = 0; i < end; ++i) g_cdst[i] = guard_byte(i);
  copy(g_cdst + kGuard + d_o, g_csrc + kGuard + so, n);
  for (size_t i = 0; i < end; ++i) {
    const bool inside = i >= kGuard + d_o && i < kGuard + d_o + n;
    const uint8_t want = inside ? src_byte(kGuard + so + (i - kGuard - d_o)) : guard_byte(i);
    if (g_cdst[i] != want) {
      EXPECT_EQ(g_cdst[i], want);
      fwtest::note("%s: dst offset %lu, src offset %lu, %lu bytes: byte %ld from dst %s", name, (unsigned long)d_o,
                   (unsigned long)so, (unsigned long)n, long(i) - long(kGuard + d_o),
                   inside ? "differs from the source" : "(outside the copy) changed");
      return false;
    }
  }
  return true;
}

bool source_intact() {
  for (size_t i = 0; i < kSpan; ++i)
    if (!EXPECT_EQ(g_csrc[i], src_byte(i))) return false;
  return true;
}

// Every offset pair with every length up to kMaxSmall and the large ones.
void every_offset(void (*copy)(void*, const void*, size_t), const char* name) {
  fill_source();
  for (size_t d_o = 0; d_o < kMaxOffset; ++d_o)
    for (size_t so = 0; so < kMaxOffset; ++so) {
      for (size_t n = 0; n <= kMaxSmall; ++n)
        if (!copied(copy, name, d_o, so, n)) return;
      for (size_t n : kLarge)
        if (!copied(copy, name, d_o, so, n)) return;
    }
  source_intact();
}

}  // namespace

FW_TEST(copy_bytes_every_offset_pair_and_length) { every_offset(copy_fn, "copy_bytes"); }

FW_TEST(memcpy_runs_the_copy_loop_at_every_offset_pair) { every_offset(memcpy_fn, "memcpy"); }

// memmove up over itself, far enough to go in pieces (a distance of 64 bytes
// or more: core/mem.cpp), at distances that are whole words, half words and
// odd, lengths of one piece, several and a tail, in both directions; the
// bytes around the destination keep their values.
FW_TEST(memmove_long_overlapping_moves_in_pieces) {
  const size_t gaps[] = {1, 63, 64, 65, 100, 4096, 4099};
  const size_t lengths[] = {64, 200, 4096 + 13, 3 * 4096};
  for (int up = 0; up < 2; ++up)
    for (size_t gap : gaps)
      for (size_t n : lengths) {
        const size_t lo = kGuard + 3;  // the lower end of the two
        for (size_t i = 0; i < kSpan; ++i) g_cdst[i] = src_byte(i);
        const size_t from = up ? lo : lo + gap, to = up ? lo + gap : lo;
        memmove(g_cdst + to, g_cdst + from, n);
        for (size_t i = 0; i < lo + gap + n + kGuard; ++i) {
          const bool inside = i >= to && i < to + n;
          const uint8_t want = inside ? src_byte(from + (i - to)) : src_byte(i);
          if (g_cdst[i] != want) {
            EXPECT_EQ(g_cdst[i], want);
            fwtest::note("memmove %s by %lu, %lu bytes: byte %ld of the destination", up ? "up" : "down",
                         (unsigned long)gap, (unsigned long)n, long(i) - long(to));
            return;
          }
        }
      }
}
