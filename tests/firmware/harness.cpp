#include "harness.h"

#include <stdarg.h>

#include "core/log.h"
#include "core/status.h"
#include "core/trap.h"
#include "hal/clint.h"
#include "hal/finisher.h"
#include "hal/uart.h"

extern "C" const fwtest::TestCase __ulnic_tests_start[];
extern "C" const fwtest::TestCase __ulnic_tests_end[];

namespace fwtest {
namespace {
int g_failures_in_test;
}

void fail(const char* file, int line, const char* expr) {
  ++g_failures_in_test;
  core::log("%s:%d: Failure\n  expected: %s\n", file, line, expr);
}

void fail_eq(const char* file, int line, const char* a, const char* b, uint64_t va, uint64_t vb) {
  ++g_failures_in_test;
  core::log("%s:%d: Failure\n  expected equality of %s and %s\n    %s = %lu (0x%lx)\n    %s = %lu (0x%lx)\n",
            file, line, a, b, a, va, va, b, vb, vb);
}

// A fault inside a test ends the run as a failure at once (the trap path
// already logged cause and pc); parking would only make ctest time out.
bool fault_ends_the_run(core::trap::Frame&) {
  core::log("[  FAILED  ] the test crashed the NIC; stopping\n");
  core::log("0 passed, 1 failed\n");
  hal::finisher::exit(2);
}

void note(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  core::log("  note: ");
  core::vlog(fmt, ap);
  core::log("\n");
  va_end(ap);
}

}  // namespace fwtest

extern "C" [[noreturn]] void ulnic_main(uint64_t, uint64_t) {
  core::status::begin_boot(hal::clint::now(), "fwtest");
  hal::uart::init();
  int total = int(__ulnic_tests_end - __ulnic_tests_start);
  int failed = 0;
  core::log("[==========] Running %d firmware tests on the NIC processor\n", total);
  for (const fwtest::TestCase* t = __ulnic_tests_start; t < __ulnic_tests_end; ++t) {
    core::log("[ RUN      ] %s\n", t->name);
    fwtest::g_failures_in_test = 0;
    core::trap::set_fault_hook(fwtest::fault_ends_the_run);  // tests may install their own
    t->fn();
    if (fwtest::g_failures_in_test) ++failed;
    core::log("%s %s\n", fwtest::g_failures_in_test ? "[  FAILED  ]" : "[       OK ]", t->name);
  }
  core::log("[==========] %d tests ran\n", total);
  core::log("%d passed, %d failed\n", total - failed, failed);
  hal::finisher::exit(failed || total == 0 ? 1 : 0);
}
