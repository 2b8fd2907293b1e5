// Native AM's staging ring (host/am/staging_ring.h): spans in use never
// overlap and stay inside the area, out-of-order give-backs free room only
// once the older spans are back, and an emptied ring offers the whole area.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>

#include "am/staging_ring.h"

using ulnic::am::StagingRing;

namespace {

struct Live {
  size_t offset, bytes;
};

// Every live span inside [0, size) and apart from every other.
void expect_disjoint(const std::map<uint64_t, Live>& live, size_t size) {
  std::vector<Live> v;
  for (const auto& [t, s] : live) v.push_back(s);
  std::sort(v.begin(), v.end(), [](const Live& a, const Live& b) { return a.offset < b.offset; });
  for (size_t i = 0; i < v.size(); ++i) {
    ASSERT_LE(v[i].offset + v[i].bytes, size);
    if (i) ASSERT_LE(v[i - 1].offset + v[i - 1].bytes, v[i].offset) << "spans overlap";
  }
}

}  // namespace

TEST(StagingRing, TakesInOrderAndWrapsWhenTheEndIsTooShort) {
  StagingRing r(1024);
  size_t off = 0;
  uint64_t a = 0, b = 0, c = 0, d = 0;
  ASSERT_TRUE(r.take(100, off, a));  // rounded to 128
  EXPECT_EQ(off, 0u);
  ASSERT_TRUE(r.take(512, off, b));
  EXPECT_EQ(off, 128u);
  ASSERT_TRUE(r.take(384, off, c));  // exactly to the end
  EXPECT_EQ(off, 640u);
  EXPECT_FALSE(r.take(64, off, d));  // full
  r.give(b);                         // out of order: a still holds the front
  EXPECT_FALSE(r.take(64, off, d));
  r.give(a);  // a and b back: [0, 640) free
  ASSERT_TRUE(r.take(640, off, d));
  EXPECT_EQ(off, 0u);
  r.give(c);
  r.give(d);
  // Empty again: the whole area from its start.
  ASSERT_TRUE(r.take(1024, off, a));
  EXPECT_EQ(off, 0u);
  EXPECT_FALSE(r.take(64, off, b));
  r.give(a);
  r.give(a);  // a span given back twice (or never taken) changes nothing
  r.give(12345);
  ASSERT_TRUE(r.take(1024, off, a));
  EXPECT_FALSE(r.take(1025, off, b));  // larger than the area: never fits
}

TEST(StagingRing, ASpanThatWrapsHoldsTheEndUntilItIsBack) {
  StagingRing r(1024);
  size_t off = 0;
  uint64_t a = 0, b = 0, c = 0, d = 0;
  ASSERT_TRUE(r.take(768, off, a));  // [0, 768)
  ASSERT_TRUE(r.take(128, off, b));  // [768, 896)
  r.give(a);                         // [0, 768) free; 128 left at the end
  ASSERT_TRUE(r.take(256, off, c));  // does not fit at the end: wraps to 0
  EXPECT_EQ(off, 0u);
  ASSERT_TRUE(r.take(512, off, d));  // [256, 768)
  EXPECT_EQ(off, 256u);
  EXPECT_FALSE(r.take(64, off, a));  // [768, 896) is b's, the end c's
  r.give(b);
  ASSERT_TRUE(r.take(64, off, a));  // b's room: [768, 832)
  EXPECT_EQ(off, 768u);
  EXPECT_FALSE(r.take(128, off, b));  // 64 left before the end, which stays c's until c is back
  r.give(c);
  ASSERT_TRUE(r.take(128, off, b));  // [832, 960)
  EXPECT_EQ(off, 832u);
}

// Random traffic against a model: many spans live at once, given back in a
// shuffled order; the ring must never hand out bytes that are still live,
// and must find room whenever everything before the head is back.
TEST(StagingRing, RandomTrafficNeverOverlaps) {
  std::mt19937_64 rng(7);
  const size_t size = 64 * 1024;
  StagingRing r(size);
  std::map<uint64_t, Live> live;
  uint64_t taken = 0;
  for (int step = 0; step < 200000; ++step) {
    if (live.empty() || (rng() % 3 != 0)) {
      size_t bytes = 1 + rng() % (rng() % 8 == 0 ? 16384 : 512);
      size_t off = 0;
      uint64_t t = 0;
      if (r.take(bytes, off, t)) {
        ASSERT_EQ(live.count(t), 0u);
        live[t] = Live{off, (bytes + 63) & ~size_t(63)};
        ++taken;
      } else {
        ASSERT_FALSE(live.empty()) << "an empty ring refused " << bytes << " bytes";
      }
    } else {
      // Mostly the oldest, sometimes any (a resend finishing late).
      auto it = live.begin();
      if (rng() % 4 == 0) std::advance(it, rng() % live.size());
      r.give(it->first);
      live.erase(it);
    }
    if (step % 64 == 0) expect_disjoint(live, size);
  }
  EXPECT_GT(taken, 50000u);  // (a third of the steps give back; a full ring refuses the rest)
  for (const auto& [t, s] : live) r.give(t);
  size_t off = 0;
  uint64_t t = 0;
  ASSERT_TRUE(r.take(size, off, t));
  EXPECT_EQ(off, 0u);
}
