// The wire checksum (shared/include/ulnic/crc32c.h): the slice-by-8 path
// equals the bytewise reference at every length and alignment, and matches
// the published CRC-32C check value.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <vector>

#include "ulnic/crc32c.h"
#include "ulnic/wire_sum.h"

TEST(Crc32c, CheckValue) {
  // CRC-32C of "123456789" (RFC 3720 appendix / the catalogue's check value).
  EXPECT_EQ(ulnic::crc32c(0, "123456789", 9), 0xE3069283u);
  EXPECT_EQ(ulnic::crc32c_bytewise(0, "123456789", 9), 0xE3069283u);
}

TEST(Crc32c, SliceBy8EqualsBytewiseAtEveryAlignmentAndLength) {
  std::mt19937 rng(7);
  std::vector<uint8_t> buf(4200);
  for (auto& b : buf) b = uint8_t(rng());
  for (size_t off = 0; off < 9; ++off)
    for (size_t len : {0u, 1u, 7u, 8u, 9u, 63u, 64u, 65u, 4096u, 4160u})
      ASSERT_EQ(ulnic::crc32c(0x1234, buf.data() + off, len), ulnic::crc32c_bytewise(0x1234, buf.data() + off, len))
          << "off " << off << " len " << len;
}

TEST(Crc32c, ContinuingEqualsOneShot) {
  const char msg[] = "ulnic fabric packet, header then payload";
  uint32_t whole = ulnic::crc32c(0, msg, sizeof msg);
  uint32_t parts = ulnic::crc32c(ulnic::crc32c(0, msg, 11), msg + 11, sizeof msg - 11);
  EXPECT_EQ(whole, parts);
}

// The payload sums (shared/include/ulnic/wire_sum.h).
namespace {
bool same(const ulnic::WireSum& x, const ulnic::WireSum& y) { return x.a == y.a && x.b == y.b; }
}  // namespace

TEST(WireSum, CopyAndSumEqualsSumAndCopiesAtEveryAlignmentAndLength) {
  std::mt19937 rng(11);
  std::vector<uint8_t> src(4200), dst(4200);
  for (auto& b : src) b = uint8_t(rng());
  for (size_t soff : {0u, 1u, 8u})
    for (size_t doff : {0u, 3u, 8u})
      for (size_t len : {0u, 1u, 7u, 8u, 9u, 31u, 32u, 33u, 4096u}) {
        std::fill(dst.begin(), dst.end(), 0xee);
        ulnic::WireSum s = ulnic::copy_and_sum(dst.data() + doff, src.data() + soff, len);
        ASSERT_TRUE(same(s, ulnic::wire_sum(src.data() + soff, len))) << soff << " " << doff << " " << len;
        ASSERT_EQ(0, std::memcmp(dst.data() + doff, src.data() + soff, len));
        ASSERT_EQ(dst[doff + len], 0xee) << "wrote past the end";
      }
}

TEST(WireSum, EveryByteFlipAndEveryWordSwapChangesIt) {
  std::vector<uint8_t> buf(256);
  for (size_t i = 0; i < buf.size(); ++i) buf[i] = uint8_t(i * 37 + 1);
  ulnic::WireSum ref = ulnic::wire_sum(buf.data(), buf.size());
  for (size_t i = 0; i < buf.size(); ++i) {
    buf[i] ^= 0x5a;  // what the switch's corruption does
    EXPECT_FALSE(same(ulnic::wire_sum(buf.data(), buf.size()), ref)) << i;
    buf[i] ^= 0x5a;
  }
  for (size_t w = 0; w + 1 < buf.size() / 8; ++w) {
    std::swap_ranges(buf.begin() + 8 * w, buf.begin() + 8 * w + 8, buf.begin() + 8 * w + 8);
    EXPECT_FALSE(same(ulnic::wire_sum(buf.data(), buf.size()), ref)) << w;
    std::swap_ranges(buf.begin() + 8 * w, buf.begin() + 8 * w + 8, buf.begin() + 8 * w + 8);
  }
  // A zero-padded tail still counts its length through the header, but a
  // change inside the tail changes the sum.
  EXPECT_FALSE(same(ulnic::wire_sum(buf.data(), 13), ulnic::wire_sum(buf.data(), 12)));
}
