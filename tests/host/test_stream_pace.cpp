// Nic::wait's hybrid polling rules (ulnic/nic.h: stream_nap_ns,
// stream_gap_ns): when a wait naps instead of spinning and blocking, for
// how long, and how the pace it aims at is learned.
#include <gtest/gtest.h>

#include "ulnic/nic.h"

namespace {

constexpr int64_t kUs = 1'000, kMs = 1'000'000;
constexpr int64_t kSpin = 20 * kUs;
constexpr int64_t kNoTimeout = -1;

TEST(StreamPace, NoNapWithOneInFlightOrNoPaceYet) {
  // The NIC has nothing queued behind the only descriptor: wake-up matters.
  EXPECT_EQ(ulnic::stream_nap_ns(1, 300 * kUs, 1 * kMs, 1 * kMs, kSpin, kNoTimeout), 0);
  EXPECT_EQ(ulnic::stream_nap_ns(8, 0, 1 * kMs, 1 * kMs, kSpin, kNoTimeout), 0);       // no gap learned
  EXPECT_EQ(ulnic::stream_nap_ns(8, 300 * kUs, 0, 1 * kMs, kSpin, kNoTimeout), 0);     // no waited completion
}

TEST(StreamPace, NapsUntilHalfOfThoseInFlightAreDue) {
  // 8 in flight, 250 us apart, the last taken just now: 4 gaps.
  EXPECT_EQ(ulnic::stream_nap_ns(8, 250 * kUs, 10 * kMs, 10 * kMs, kSpin, kNoTimeout), 1 * kMs);
  // ... less what has passed since.
  EXPECT_EQ(ulnic::stream_nap_ns(8, 250 * kUs, 10 * kMs, 10 * kMs + 300 * kUs, kSpin, kNoTimeout), 700 * kUs);
  // Two or three in flight: one gap.
  EXPECT_EQ(ulnic::stream_nap_ns(2, 250 * kUs, 10 * kMs, 10 * kMs, kSpin, kNoTimeout), 250 * kUs);
  EXPECT_EQ(ulnic::stream_nap_ns(3, 250 * kUs, 10 * kMs, 10 * kMs, kSpin, kNoTimeout), 250 * kUs);
  // Already due: look now.
  EXPECT_EQ(ulnic::stream_nap_ns(8, 250 * kUs, 10 * kMs, 12 * kMs, kSpin, kNoTimeout), 0);
}

TEST(StreamPace, NoNapWhereHalfAreDueWithinTwoSpins) {
  // 16 KiB sends: 5 us apart, 8 in flight -> 20 us: a wake-up would cost
  // about what the nap spares.
  EXPECT_EQ(ulnic::stream_nap_ns(8, 5 * kUs, 10 * kMs, 10 * kMs, kSpin, kNoTimeout), 0);
  EXPECT_EQ(ulnic::stream_nap_ns(8, 10 * kUs, 10 * kMs, 10 * kMs, kSpin, kNoTimeout), 0);  // exactly 2 spins
  EXPECT_EQ(ulnic::stream_nap_ns(8, 11 * kUs, 10 * kMs, 10 * kMs, kSpin, kNoTimeout), 44 * kUs);
  // 64 KiB sends, 8 in flight: ~15 us apart.
  EXPECT_EQ(ulnic::stream_nap_ns(8, 15 * kUs, 10 * kMs, 10 * kMs, kSpin, kNoTimeout), 60 * kUs);
  // Many in flight make a short gap worth a nap.
  EXPECT_EQ(ulnic::stream_nap_ns(32, 5 * kUs, 10 * kMs, 10 * kMs, kSpin, kNoTimeout), 80 * kUs);
}

TEST(StreamPace, NapsAreCappedByTwoMillisecondsAndHalfTheTimeout) {
  EXPECT_EQ(ulnic::stream_nap_ns(8, 5 * kMs, 10 * kMs, 10 * kMs, kSpin, kNoTimeout), 2 * kMs);
  EXPECT_EQ(ulnic::stream_nap_ns(8, 250 * kUs, 10 * kMs, 10 * kMs, kSpin, 1 * kMs), 500 * kUs);
  EXPECT_EQ(ulnic::stream_nap_ns(8, 250 * kUs, 10 * kMs, 10 * kMs, kSpin, 0), 0);
}

TEST(StreamPace, TheGapIsTheTimeBetweenWaitsOverTheCompletionsTakenMeanwhile) {
  EXPECT_EQ(ulnic::stream_gap_ns(0, 10 * kMs, 1, 10 * kMs + 250 * kUs), 250 * kUs);  // the first sample
  // Smoothed by a quarter.
  EXPECT_EQ(ulnic::stream_gap_ns(250 * kUs, 10 * kMs, 1, 10 * kMs + 650 * kUs), 350 * kUs);
  // A nap that woke late found four completions: the pace is unchanged.
  EXPECT_EQ(ulnic::stream_gap_ns(250 * kUs, 10 * kMs, 4, 11 * kMs), 250 * kUs);
}

TEST(StreamPace, AnOversleepingStreamKeepsTheNicsPace) {
  // The NIC completes one every 250 us; each nap overshoots by 60 us (timer
  // slack). Whatever the wake-ups find, the learned gap stays near the pace.
  const int64_t pace = 250 * kUs, slack = 60 * kUs;
  int64_t gap = pace, since = 1 * kMs, now = since;
  uint64_t done_at_since = 0;
  for (int i = 0; i < 200; ++i) {
    now += ulnic::stream_nap_ns(8, gap, since, now, kSpin, kNoTimeout) + slack;
    uint64_t done = uint64_t((now - 1 * kMs) / pace);  // completions by now
    if (done == done_at_since) continue;                // (would spin; not here)
    gap = ulnic::stream_gap_ns(gap, since, uint32_t(done - done_at_since), now);
    since = now, done_at_since = done;
  }
  EXPECT_GT(gap, pace * 9 / 10);
  EXPECT_LT(gap, pace * 12 / 10);
}

TEST(StreamPace, IdleIntervalsTeachNothing) {
  EXPECT_EQ(ulnic::stream_gap_ns(250 * kUs, 10 * kMs, 1, 70 * kMs), 250 * kUs);
  EXPECT_EQ(ulnic::stream_gap_ns(250 * kUs, 0, 1, 70 * kMs), 250 * kUs);
  EXPECT_EQ(ulnic::stream_gap_ns(250 * kUs, 10 * kMs, 0, 11 * kMs), 250 * kUs);
}

}  // namespace
