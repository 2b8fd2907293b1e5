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

namespace {
uint64_t us(uint64_t n) { return hal::clint::us_to_ticks(n); }
}  // namespace

FW_TEST(the_spin_window_covers_the_conversations_gaps) {
  using E = lcp::GapEpoch;
  EXPECT_EQ(lcp::spin_window(E{}, E{}), us(lcp::kIdleSpinUs));               // nothing learned: the floor
  EXPECT_EQ(lcp::spin_window(E{us(120), 1, 0}, E{}), us(lcp::kIdleSpinUs));  // one gap is no conversation
  EXPECT_EQ(lcp::spin_window(E{us(120), 1, 0}, E{us(60), 1, 0}), us(240));   // twice the longest, either epoch
  EXPECT_EQ(lcp::spin_window(E{us(30), 5, 0}, E{}), us(lcp::kConversationSpinUs));  // a conversation's floor
  EXPECT_EQ(lcp::spin_window(E{us(290), 5, 1}, E{}), us(lcp::kMaxSpinUs));           // capped
  // Peers that mostly keep it waiting beyond kMaxSpinUs: sleep at once.
  EXPECT_EQ(lcp::spin_window(E{us(100), 2, 3}, E{}), us(lcp::kIdleSpinUs));
}

FW_TEST(outside_work_teaches_the_window_and_short_gaps_do_not) {
  lcp::LoopState s{};
  uint64_t t = 1'000'000;
  lcp::loop_init(s, cfg(100'000), t);
  for (int i = 0; i < 20; ++i) lcp::note_outside_work(s, t += us(2));  // a busy stream
  EXPECT_EQ(s.spin_ticks, us(lcp::kIdleSpinUs));
  for (int i = 0; i < 3; ++i) lcp::note_outside_work(s, t += us(120));  // a round trip every 120 us
  EXPECT_EQ(s.spin_ticks, us(240));
  EXPECT(!lcp::loop_idle(s, s.last_work + us(230)));  // inside the window: no sleep
  // Fast exchanges after a pause: the pause is still remembered.
  for (int i = 0; i < 50; ++i) lcp::note_outside_work(s, t += us(30));
  EXPECT_EQ(s.spin_ticks, us(240));
  // Retransmission timeouts (1 ms) are no conversation: spinning through
  // them would cost more than the wake-ups they save.
  for (int i = 0; i < 200; ++i) lcp::note_outside_work(s, t += us(1'000));
  EXPECT_EQ(s.spin_ticks, us(lcp::kIdleSpinUs));
  // The conversation ends: one gap beyond two epochs forgets it.
  lcp::note_outside_work(s, t += us(3 * lcp::kGapEpochUs));
  EXPECT_EQ(s.spin_ticks, us(lcp::kIdleSpinUs));
}

FW_TEST(sleeping_again_for_the_same_deadline_leaves_the_timer_alone) {
  lcp::LoopState s{};
  uint64_t start = hal::clint::now();
  lcp::loop_init(s, cfg(20'000), start);
  lcp::loop_pass(s, start);
  uint64_t later = start + us(lcp::kIdleSpinUs + 1);
  while (!lcp::loop_idle(s, later)) later += us(10);
  EXPECT_EQ(s.timer_at, s.next_refresh);
  const uint64_t cmp = *reinterpret_cast<volatile uint64_t*>(hal::clint::kBase + 0x4000);
  EXPECT_EQ(cmp, s.next_refresh);
  // A second sleep for the same refresh: mtimecmp is still what it was.
  EXPECT(lcp::loop_idle(s, s.last_work + us(lcp::kIdleSpinUs + 1)));
  EXPECT_EQ(*reinterpret_cast<volatile uint64_t*>(hal::clint::kBase + 0x4000), cmp);
}

FW_TEST(time_off_the_cpu_is_not_idle_time) {
  lcp::LoopState s{};
  uint64_t t = 1'000'000;
  lcp::loop_init(s, cfg(100'000), t);
  lcp::loop_pass(s, t);  // the refresh: work
  const uint64_t worked = s.last_work;
  // The next pass comes 40 us later (the vCPU was descheduled): those 40 us
  // do not count toward the spin window.
  lcp::loop_pass(s, t + us(40));
  EXPECT_EQ(s.last_work, worked + us(40));
  EXPECT(!lcp::loop_idle(s, t + us(40) + us(lcp::kIdleSpinUs) - 1));
  // Passes a microsecond apart are idle polling: the window runs out.
  uint64_t now = t + us(40);
  for (int i = 0; i < int(lcp::kIdleSpinUs) + 2; ++i) lcp::loop_pass(s, now += us(1));
  EXPECT(now - s.last_work >= s.spin_ticks);
}

FW_TEST(polling_without_work_yields_every_kYieldUs_of_its_own_time) {
  lcp::LoopState s{};
  uint64_t t = 1'000'000;
  lcp::loop_init(s, cfg(100'000), t);
  lcp::loop_pass(s, t);  // the refresh: work
  const uint64_t worked = s.last_work, every = us(lcp::kYieldUs);
  // Passes a microsecond apart without work: no yield before kYieldUs of them.
  uint64_t now = t;
  while (now + us(1) - worked < every) {
    lcp::loop_pass(s, now += us(1));
    lcp::loop_yield(s, now);
    EXPECT_EQ(s.last_yield, t);
  }
  lcp::loop_pass(s, now += us(1));
  lcp::loop_yield(s, now);
  EXPECT_EQ(s.last_yield, now);
  // Not again until kYieldUs more of polling.
  const uint64_t yielded = now;
  lcp::loop_pass(s, now += us(1));
  lcp::loop_yield(s, now);
  EXPECT_EQ(s.last_yield, yielded);
  // The yield gave the CPU away for 400 us (another party ran): that time is
  // not the NIC's, so the next yield is kYieldUs of polling later, not at once.
  lcp::loop_pass(s, now += us(400));
  EXPECT_EQ(s.last_yield, yielded + us(400));
  lcp::loop_yield(s, now);
  EXPECT_EQ(s.last_yield, yielded + us(400));
  while (now + us(1) - s.last_yield < every) {
    lcp::loop_pass(s, now += us(1));
    lcp::loop_yield(s, now);
    EXPECT_EQ(s.last_yield, yielded + us(400));
  }
  lcp::loop_pass(s, now += us(1));
  lcp::loop_yield(s, now);
  EXPECT_EQ(s.last_yield, now);
}
