// The event loop's idle path: status refresh on schedule, and WFI sleep that
// the CLINT timer ends (the property that keeps an idle NIC off the CPU).
#include "core/boot_config.h"
#include "core/status.h"
#include "hal/clint.h"
#include "lcp/loop.h"
#include "harness.h"

namespace abi = ulnic::abi;

namespace {
core::boot_config::Config cfg(uint32_t heartbeat_us) {
  core::boot_config::Config c{};
  c.heartbeat_us = heartbeat_us;
  return c;
}
}  // namespace

FW_TEST(first_pass_refreshes_the_status) {
  lcp::LoopState s{};
  uint64_t now = hal::clint::now();
  lcp::loop_init(s, cfg(2'000), now);
  uint64_t hb = core::status::block().heartbeat;
  lcp::loop_pass(s, now);
  EXPECT_EQ(core::status::block().heartbeat, hb + 1);
  lcp::loop_pass(s, now);  // not due again yet
  EXPECT_EQ(core::status::block().heartbeat, hb + 1);
  lcp::loop_pass(s, now + hal::clint::us_to_ticks(2'000));
  EXPECT_EQ(core::status::block().heartbeat, hb + 2);
}

FW_TEST(does_not_sleep_right_after_work) {
  lcp::LoopState s{};
  uint64_t now = hal::clint::now();
  lcp::loop_init(s, cfg(2'000), now);
  EXPECT(!lcp::loop_idle(s, now));
}

FW_TEST(sleeps_in_wfi_until_the_next_refresh) {
  lcp::LoopState s{};
  uint64_t start = hal::clint::now();
  lcp::loop_init(s, cfg(5'000), start);
  lcp::loop_pass(s, start);  // schedules the next refresh 5 ms out
  uint64_t wfi = core::status::counter(abi::kCtrWfi);
  uint64_t wakes = core::status::counter(abi::kCtrTimerWakeups);
  uint64_t later = start + hal::clint::us_to_ticks(lcp::kIdleSpinUs + 1);
  int sleeps = 0;
  // WFI may return early (it is a hint); the loop sleeps again until due.
  while (hal::clint::now() < s.next_refresh && sleeps < 1000) sleeps += lcp::loop_idle(s, later) ? 1 : 0;
  EXPECT(hal::clint::now() >= s.next_refresh);
  EXPECT(sleeps >= 1);
  EXPECT(core::status::counter(abi::kCtrWfi) >= wfi + 1);
  EXPECT(core::status::counter(abi::kCtrTimerWakeups) >= wakes + 1);
}
