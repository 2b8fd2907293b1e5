// The node daemon's priority guard (emulator/daemon/priority_guard.h): when
// it boosts a NIC's QEMU, for how long, and when it does not.
#include <gtest/gtest.h>

#include "daemon/priority_guard.h"

namespace {

using ulnic::daemon::GuardPolicy;
using ulnic::daemon::ThreadShare;
using Action = GuardPolicy::Action;
using namespace std::chrono_literals;

constexpr std::chrono::nanoseconds kWin = GuardPolicy::kWindow;

// The host starves the vCPU: runnable the whole window, on a CPU for 2%.
const std::vector<ThreadShare> kStarved = {{1ms, 0ms}, {2ms, 98ms}};
// A spinning vCPU that shares its CPU with a host process: half and half.
const std::vector<ThreadShare> kShared = {{50ms, 50ms}, {0ms, 0ms}};
// An idle NIC in WFI: neither running nor waiting.
const std::vector<ThreadShare> kIdle = {{0ms, 0ms}, {0ms, 0ms}};

struct Guard {
  GuardPolicy p;
  GuardPolicy::Clock::time_point t{};
  Action window(const std::vector<ThreadShare>& s) { return p.step(t += kWin, kWin, s); }
  // Windows of `s` until the policy acts; -> the action, and how many windows.
  std::pair<Action, int> until_action(const std::vector<ThreadShare>& s, int limit = 100'000) {
    for (int n = 1; n <= limit; ++n)
      if (Action a = window(s); a != Action::kNone) return {a, n};
    return {Action::kNone, limit};
  }
};

TEST(PriorityGuard, TwoStarvedWindowsInARowBoostForTheMinimumHold) {
  Guard g;
  EXPECT_EQ(g.window(kStarved), Action::kNone);
  EXPECT_EQ(g.window(kStarved), Action::kBoost);
  EXPECT_TRUE(g.p.boosted());
  EXPECT_EQ(g.p.hold(), GuardPolicy::kHoldMin);
  EXPECT_EQ(g.p.boosts(), 1u);
  // Held for kHoldMin whatever the windows say, then back.
  auto [a, n] = g.until_action(kShared);
  EXPECT_EQ(a, Action::kUnboost);
  EXPECT_EQ(n * kWin, GuardPolicy::kHoldMin);
  EXPECT_FALSE(g.p.boosted());
}

TEST(PriorityGuard, OneStarvedWindowAloneDoesNotBoost) {
  Guard g;
  for (int i = 0; i < 50; ++i) {
    EXPECT_EQ(g.window(kStarved), Action::kNone);
    EXPECT_EQ(g.window(kShared), Action::kNone);
  }
  EXPECT_EQ(g.p.boosts(), 0u);
}

TEST(PriorityGuard, SpinningOrSleepingNicsAreNotStarved) {
  Guard g;
  // Waiting most of the window but running more than a tenth of it is a
  // vCPU that shares its CPU, not one the host starves; and the reverse.
  const std::vector<ThreadShare> busy_sharing = {{12ms, 80ms}};
  const std::vector<ThreadShare> barely_waiting = {{1ms, 70ms}};
  for (const auto* s : {&kShared, &kIdle, &busy_sharing, &barely_waiting})
    EXPECT_EQ(g.until_action(*s, 1000).first, Action::kNone);
  EXPECT_EQ(g.p.boosts(), 0u);
}

TEST(PriorityGuard, TheThresholdsScaleWithTheWindowLength) {
  // A guard thread that woke late measures a longer window: 190 ms waited of
  // 200 is starved, 120 of 200 is not.
  GuardPolicy p;
  GuardPolicy::Clock::time_point t{};
  const std::vector<ThreadShare> half = {{2ms, 120ms}}, most = {{2ms, 190ms}};
  EXPECT_EQ(p.step(t += 200ms, 200ms, half), Action::kNone);
  EXPECT_EQ(p.step(t += 200ms, 200ms, half), Action::kNone);
  EXPECT_EQ(p.step(t += 200ms, 200ms, most), Action::kNone);
  EXPECT_EQ(p.step(t += 200ms, 200ms, most), Action::kBoost);
  // No window, no verdict.
  GuardPolicy q;
  EXPECT_EQ(q.step(t, 0ns, kStarved), Action::kNone);
  EXPECT_EQ(q.step(t, 0ns, kStarved), Action::kNone);
}

TEST(PriorityGuard, StarvationThatComesBackSoonDoublesTheHoldUpToTheMaximum) {
  Guard g;
  std::vector<std::chrono::nanoseconds> holds;
  for (int i = 0; i < 10; ++i) {
    ASSERT_EQ(g.until_action(kStarved).first, Action::kBoost);
    holds.push_back(g.p.hold());
    ASSERT_EQ(g.until_action(kStarved).first, Action::kUnboost);  // starved all along
  }
  EXPECT_EQ(holds[0], GuardPolicy::kHoldMin);
  for (size_t i = 1; i < holds.size(); ++i)
    EXPECT_EQ(holds[i], std::min<std::chrono::nanoseconds>(2 * holds[i - 1], GuardPolicy::kHoldMax)) << i;
  EXPECT_EQ(holds.back(), GuardPolicy::kHoldMax);
  // A host that stays overloaded: the NIC is unboosted 2 windows in every
  // kHoldMax + 2 windows (the probe that finds it still starved).
  EXPECT_EQ(g.p.boosts(), 10u);
}

TEST(PriorityGuard, AQuietMinuteResetsTheHold) {
  Guard g;
  for (int i = 0; i < 3; ++i) {
    g.until_action(kStarved);
    g.until_action(kStarved);
  }
  ASSERT_EQ(g.p.hold(), 4 * GuardPolicy::kHoldMin);
  // Between kRecurWithin and kCalmAfter the hold stays as it was ...
  for (auto quiet = 0ns; quiet < GuardPolicy::kRecurWithin + kWin; quiet += kWin) g.window(kShared);
  ASSERT_EQ(g.until_action(kStarved).first, Action::kBoost);
  EXPECT_EQ(g.p.hold(), 4 * GuardPolicy::kHoldMin);
  g.until_action(kShared);
  // ... and after kCalmAfter without starvation it is the minimum again.
  for (auto quiet = 0ns; quiet < GuardPolicy::kCalmAfter; quiet += kWin) g.window(kIdle);
  ASSERT_EQ(g.until_action(kStarved).first, Action::kBoost);
  EXPECT_EQ(g.p.hold(), GuardPolicy::kHoldMin);
}

TEST(PriorityGuard, AnAdoptedBoostEndsAfterTheMinimumHold) {
  // A restarted daemon that finds QEMU boosted by its predecessor.
  Guard g;
  g.p.adopt_boost(g.t);
  EXPECT_TRUE(g.p.boosted());
  auto [a, n] = g.until_action(kShared);
  EXPECT_EQ(a, Action::kUnboost);
  EXPECT_EQ(n * kWin, GuardPolicy::kHoldMin);
  EXPECT_EQ(g.p.boosts(), 0u);
}

}  // namespace
