// The firmware's printf subset (core/log.h), through format() into a buffer.
#include <string.h>

#include "core/log.h"
#include "harness.h"

namespace {
char g_buf[128];
bool same(const char* want) { return strcmp(g_buf, want) == 0; }
#define FORMATS_AS(want, ...)                            \
  do {                                                   \
    core::format(g_buf, sizeof g_buf, __VA_ARGS__);      \
    if (!EXPECT(same(want))) fwtest::note("got '%s'", g_buf); \
  } while (0)
}  // namespace

FW_TEST(integers) {
  FORMATS_AS("42 -7 0", "%d %d %u", 42, -7, 0u);
  FORMATS_AS("18446744073709551615", "%lu", ~uint64_t(0));
  FORMATS_AS("-9223372036854775808", "%ld", int64_t(1ull << 63));
  FORMATS_AS("ff 0x80000000", "%x 0x%lx", 255u, uint64_t(0x80000000));
}

FW_TEST(width_and_zero_padding) {
  FORMATS_AS("  7|007|00000000deadbeef", "%3d|%03u|%016lx", 7, 7u, uint64_t(0xdeadbeef));
}

FW_TEST(strings_chars_and_percent) {
  FORMATS_AS("a-(null)-x-100%", "%s-%s-%c-100%%", "a", static_cast<const char*>(nullptr), 'x');
}

FW_TEST(truncates_and_terminates) {
  char small[6];
  size_t n = core::format(small, sizeof small, "%s", "abcdefgh");
  EXPECT_EQ(n, 5u);
  EXPECT(strcmp(small, "abcde") == 0);
  EXPECT_EQ(core::format(small, 0, "x"), 0u);
}

#pragma clang diagnostic ignored "-Wformat"
FW_TEST(unknown_conversion_is_printed_verbatim) {
  FORMATS_AS("%q", "%q");
}
