// The switch's fault injection (emulator/switch/faults.h): spec parsing and
// the per-link decision streams (seeded, reproducible, independent links).
#include <gtest/gtest.h>

#include "switch/faults.h"
#include "test_support.h"

using ulnic::sw::FaultSpec;
using ulnic::sw::LinkFaults;
using ulnic::sw::parse_faults;
using ulnic_test::Contains;

TEST(SwitchFaults, ParsesEveryKind) {
  auto f = parse_faults("drop=0.3,corrupt=0.01,dup=0.02,reorder=0.04,delay=200us,seed=7");
  ASSERT_TRUE(f) << f.error().message;
  EXPECT_DOUBLE_EQ(f->drop, 0.3);
  EXPECT_DOUBLE_EQ(f->corrupt, 0.01);
  EXPECT_DOUBLE_EQ(f->duplicate, 0.02);
  EXPECT_DOUBLE_EQ(f->reorder, 0.04);
  EXPECT_EQ(f->delay_us, 200u);
  EXPECT_EQ(f->seed, 7u);
  EXPECT_EQ(parse_faults("delay=2ms")->delay_us, 2000u);
  EXPECT_FALSE(parse_faults("")->any());
}

TEST(SwitchFaults, RejectsBadSpecs) {
  EXPECT_TRUE(Contains(parse_faults("drop=1.5").error().message, "probability"));
  EXPECT_TRUE(Contains(parse_faults("drop=-0.1").error().message, "probability"));
  EXPECT_TRUE(Contains(parse_faults("drop").error().message, "name=value"));
  EXPECT_TRUE(Contains(parse_faults("lose=0.1").error().message, "unknown fault"));
  EXPECT_TRUE(Contains(parse_faults("drop=abc").error().message, "not a number"));
  EXPECT_TRUE(Contains(parse_faults("delay=5s").error().message, "delay"));
}

TEST(SwitchFaults, TheSameSeedGivesTheSameDecisions) {
  FaultSpec s = *parse_faults("drop=0.3,corrupt=0.1,dup=0.1,reorder=0.1,seed=42");
  LinkFaults a, b;
  a.seed(s.seed, 0, 1);
  b.seed(s.seed, 0, 1);
  for (int i = 0; i < 10000; ++i) {
    auto x = a.decide(s), y = b.decide(s);
    ASSERT_EQ(x.drop, y.drop);
    ASSERT_EQ(x.corrupt, y.corrupt);
    ASSERT_EQ(x.corrupt_at, y.corrupt_at);
    ASSERT_EQ(x.duplicate, y.duplicate);
    ASSERT_EQ(x.reorder, y.reorder);
  }
}

TEST(SwitchFaults, LinksHaveIndependentStreamsAndTheRatesHold) {
  FaultSpec s = *parse_faults("drop=0.3,seed=1");
  LinkFaults l01, l10;
  l01.seed(s.seed, 0, 1);
  l10.seed(s.seed, 1, 0);
  int drops = 0, same = 0;
  const int n = 100000;
  for (int i = 0; i < n; ++i) {
    bool d = l01.decide(s).drop;
    drops += d;
    same += d == l10.decide(s).drop;
  }
  EXPECT_NEAR(double(drops) / n, 0.3, 0.01);
  EXPECT_LT(same, n * 0.65);  // 0.3^2 + 0.7^2 = 0.58 if independent
}
