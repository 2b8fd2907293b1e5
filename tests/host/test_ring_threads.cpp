// The shared SPSC ring's consumer seen by a second thread: published() is the
// only question a thread that is not the consumer may ask (libulnic's
// sleepers ask it without the lock the consumer's library holds). Asking
// available() that way moved the consumer's private indices under it: once
// in a while a stale tail made the consumer declare the ring corrupt and it
// never read another completion (AM over VIPL, 8 ranks: a token lost in 1 of
// ~15 jobs, host head 16, NIC tail 17, forever).
#include <atomic>
#include <chrono>
#include <cstdint>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "ulnic/abi/ring.h"

namespace ring_threads_test {
namespace {

using ulnic::abi::RingConsumer;
using ulnic::abi::RingControl;
using ulnic::abi::RingProducer;

struct Entry {
  uint64_t seq;
};

struct Ring {
  RingControl ctl{};
  Entry entries[8]{};
  RingProducer<Entry> producer;
  RingConsumer<Entry> consumer;
  Ring() {
    EXPECT_TRUE(producer.attach(&ctl, entries, 8));
    EXPECT_TRUE(consumer.attach(&ctl, entries, 8));
  }
  void produce(uint64_t seq) {
    Entry* e = producer.reserve();
    ASSERT_NE(e, nullptr);
    e->seq = seq;
    producer.push();
    producer.publish();
  }
  bool consume(uint64_t& seq) {
    const Entry* e = consumer.peek();
    if (!e) return false;
    seq = e->seq;
    consumer.pop();
    consumer.release();
    return true;
  }
};

TEST(RingPublished, SaysWhetherEntriesWaitAndChangesNothing) {
  Ring r;
  EXPECT_FALSE(r.consumer.published());
  r.produce(1);
  r.produce(2);
  EXPECT_TRUE(r.consumer.published());
  EXPECT_TRUE(r.consumer.published());  // asking twice takes nothing
  uint64_t seq = 0;
  ASSERT_TRUE(r.consume(seq));
  EXPECT_EQ(seq, 1u);
  EXPECT_TRUE(r.consumer.published());
  ASSERT_TRUE(r.consume(seq));
  EXPECT_EQ(seq, 2u);
  EXPECT_FALSE(r.consumer.published());
  EXPECT_FALSE(r.consume(seq));
}

TEST(RingPublished, AWildTailIsNotWork) {
  Ring r;
  r.ctl.tail = r.ctl.head + 1000;  // a hostile producer: more than the capacity
  EXPECT_FALSE(r.consumer.published());
  EXPECT_EQ(r.consumer.available(), 0u);
  EXPECT_TRUE(r.consumer.corrupt());
}

// Producer, consumer and a third thread asking published() as fast as it
// can: every entry arrives once, in order, and the consumer never sees a
// corrupt ring. (A consumer disturbed this way loses entries and would wait
// for them forever: the test gives up after 60 s and fails instead.)
TEST(RingPublished, AThirdThreadAskingDoesNotDisturbTheConsumer) {
  Ring r;
  constexpr uint64_t kEntries = 400'000;
  std::atomic<bool> done{false}, stop{false};
  std::atomic<uint64_t> asked{0}, said_yes{0};
  std::thread watcher([&] {
    while (!done.load(std::memory_order_relaxed)) {
      if (r.consumer.published()) said_yes.fetch_add(1, std::memory_order_relaxed);
      asked.fetch_add(1, std::memory_order_relaxed);
    }
  });
  std::thread producer([&] {
    for (uint64_t i = 0; i < kEntries && !stop.load(std::memory_order_relaxed);) {
      Entry* e = r.producer.reserve();
      if (!e) {
        std::this_thread::yield();
        continue;
      }
      e->seq = i++;
      r.producer.push();
      r.producer.publish();
    }
  });
  uint64_t next = 0, out_of_order = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (next < kEntries && !r.consumer.corrupt() && std::chrono::steady_clock::now() < deadline) {
    uint64_t seq;
    if (!r.consume(seq)) {
      std::this_thread::yield();
      continue;
    }
    if (seq != next) ++out_of_order;
    ++next;
  }
  stop = true;
  producer.join();
  done = true;
  watcher.join();
  EXPECT_FALSE(r.consumer.corrupt());
  EXPECT_EQ(next, kEntries);
  EXPECT_EQ(out_of_order, 0u);
  EXPECT_GT(asked.load(), 0u);
  EXPECT_FALSE(r.consumer.published());
}

}  // namespace
}  // namespace ring_threads_test
