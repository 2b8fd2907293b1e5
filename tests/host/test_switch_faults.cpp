// The switch's fault injection (emulator/switch/faults.h): spec parsing and
// the per-link decision streams (seeded, reproducible, independent links).
#include <gtest/gtest.h>

#include "switch/faults.h"
#include "switch/switch.h"
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
  // Found by tests/fuzz: NaN passed as a probability, and numbers out of
  // uint64_t's range were converted to it (undefined behaviour).
  EXPECT_TRUE(Contains(parse_faults("drop=nan").error().message, "probability"));
  EXPECT_TRUE(Contains(parse_faults("delay=1e308").error().message, "delay"));
  EXPECT_TRUE(Contains(parse_faults("delay=inf").error().message, "delay"));
  EXPECT_TRUE(Contains(parse_faults("seed=-1").error().message, "seed"));
  EXPECT_TRUE(Contains(parse_faults("seed=1e308").error().message, "seed"));
  EXPECT_EQ(parse_faults("delay=3600000ms")->delay_us, 3'600'000'000u);
}

TEST(SwitchBridgePeer, ParsesARange) {
  auto p = ulnic::sw::parse_bridge_peer("10.0.0.2:9000=2-3");
  ASSERT_TRUE(p) << p.error().message;
  EXPECT_EQ(p->host, "10.0.0.2");
  EXPECT_EQ(p->port, 9000);
  EXPECT_EQ(p->first, 2u);
  EXPECT_EQ(p->last, 3u);
}

// Found by tests/fuzz: std::stoul threw on words, so a typo ended the switch
// with an uncaught exception instead of an error message.
TEST(SwitchBridgePeer, RejectsBadNumbersWithAnError) {
  for (const char* bad : {"10.0.0.1:1=0-d", "10.0.0.1:x=0-1", "10.0.0.1:1=a-1", "10.0.0.1:70000=0-1",
                          "10.0.0.1:1=0-99999999999", "10.0.0.1:1=-1-2", "10.0.0.1:1= 1-2"})
    EXPECT_FALSE(ulnic::sw::parse_bridge_peer(bad)) << bad;
  EXPECT_TRUE(Contains(ulnic::sw::parse_bridge_peer("10.0.0.1:1=3-2").error().message, "empty"));
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
