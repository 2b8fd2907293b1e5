// The wire checksum (shared/include/ulnic/crc32c.h): the slice-by-8 path
// equals the bytewise reference at every length and alignment, and matches
// the published CRC-32C check value.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "ulnic/crc32c.h"

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
