// Firmware unit-test harness. Each test image links the real firmware
// modules plus this harness, boots on the same QEMU board a node gets (via
// `ulnic fwtest`), runs every FW_TEST in it, prints GoogleTest-style lines
// on the serial console, and ends QEMU through virt's test finisher: exit 0
// if all passed, 1 otherwise, so ctest sees a failure as a failure.
#pragma once

#include <stdint.h>

namespace fwtest {

struct TestCase {
  const char* name;
  void (*fn)();
};

void fail(const char* file, int line, const char* expr);
void fail_eq(const char* file, int line, const char* a, const char* b, uint64_t va, uint64_t vb);
void note(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

}  // namespace fwtest

#define FW_TEST(name)                                                                          \
  static void fwtest_fn_##name();                                                              \
  __attribute__((section(".ulnic_tests"), used)) static const fwtest::TestCase fwtest_case_##name = { \
      #name, fwtest_fn_##name};                                                                \
  static void fwtest_fn_##name()

// CHECK*: on failure, report and leave the test. EXPECT*: report and go on.
#define EXPECT(expr) \
  ((expr) ? true : (fwtest::fail(__FILE__, __LINE__, #expr), false))
#define EXPECT_EQ(a, b)                                                                         \
  ([&] {                                                                                        \
    auto va_ = (a);                                                                             \
    auto vb_ = (b);                                                                             \
    if (va_ == vb_) return true;                                                                \
    fwtest::fail_eq(__FILE__, __LINE__, #a, #b, static_cast<uint64_t>(va_), static_cast<uint64_t>(vb_)); \
    return false;                                                                               \
  }())
#define CHECK(expr) \
  do {              \
    if (!EXPECT(expr)) return; \
  } while (0)
#define CHECK_EQ(a, b) \
  do {                 \
    if (!EXPECT_EQ(a, b)) return; \
  } while (0)
