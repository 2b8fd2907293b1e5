// The wire checksum on the NIC processor (RV64): the slice-by-8 path equals
// the bytewise reference and the published check value.
#include <string.h>

#include "harness.h"
#include "ulnic/crc32c.h"
#include "ulnic/wire_sum.h"

namespace {
uint8_t g_buf[4200];
}

FW_TEST(check_value) { EXPECT_EQ(ulnic::crc32c(0, "123456789", 9), 0xE3069283u); }

FW_TEST(slice_by_8_equals_bytewise) {
  uint32_t x = 12345;
  for (auto& b : g_buf) x = x * 1103515245u + 12345u, b = uint8_t(x >> 16);
  const uint32_t lens[] = {0, 1, 7, 8, 9, 64, 4096, 4160};
  for (uint32_t off = 0; off < 9; ++off)
    for (uint32_t len : lens)
      CHECK_EQ(ulnic::crc32c(7, g_buf + off, len), ulnic::crc32c_bytewise(7, g_buf + off, len));
}

FW_TEST(copy_and_sum_equals_sum_and_copies) {
  static uint8_t dst[4200];
  const uint32_t lens[] = {0, 1, 7, 8, 33, 4096};
  for (uint32_t off = 0; off < 9; off += 4)
    for (uint32_t len : lens) {
      ulnic::WireSum s = ulnic::copy_and_sum(dst, g_buf + off, len);
      ulnic::WireSum r = ulnic::wire_sum(g_buf + off, len);
      CHECK(s.a == r.a && s.b == r.b);
      CHECK(memcmp(dst, g_buf + off, len) == 0);
    }
}
