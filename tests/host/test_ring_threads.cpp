// The shared SPSC ring's consumer seen by a second thread: published() is the
// only question a thread that is not the consumer may ask (libulnic's
// sleepers ask it without the lock the consumer's library holds). Asking
// available() that way moved the consumer's private indices under it: once
// in a while a stale tail made the consumer declare the ring corrupt and it
// never read another completion (AM over VIPL, 8 ranks: a token lost in 1 of
// ~15 jobs, host head 16, NIC tail 17, forever).
#include <atomic>
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
// corrupt ring. A disturbed consumer that loses entries is caught without a
// clock: whenever peek() finds nothing but published() (the shared indices)
// says entries wait, a second peek() must find them, since the tail only
// grows and only the consumer moves the head; and once the producer has
// finished, finding nothing means the rest is lost. (The first version gave
// up after 60 s instead, and on a loaded CI machine three spinning threads on
// two cores once took longer than that with nothing wrong.)
TEST(RingPublished, AThirdThreadAskingDoesNotDisturbTheConsumer) {
  Ring r;
  constexpr uint64_t kEntries = 400'000;
  std::atomic<bool> done{false}, produced_all{false}, stop{false};
  std::atomic<uint64_t> asked{0}, said_yes{0};
  std::thread watcher([&] {
    while (!done.load(std::memory_order_relaxed)) {
      if (r.consumer.published()) said_yes.fetch_add(1, std::memory_order_relaxed);
      // Ask in bursts, then let the others run: a watcher that never yields
      // only slows the test on a busy machine; it is the asking between the
      // consumer's steps that matters.
      if (asked.fetch_add(1, std::memory_order_relaxed) % 64 == 63) std::this_thread::yield();
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
    produced_all.store(true, std::memory_order_release);
  });
  uint64_t next = 0, out_of_order = 0, missed = 0;
  while (next < kEntries && !r.consumer.corrupt()) {
    // Read before looking, so "finished" covers every entry the look missed.
    const bool finished = produced_all.load(std::memory_order_acquire);
    uint64_t seq;
    bool got = r.consume(seq);
    if (!got && r.consumer.published()) {
      got = r.consume(seq);
      if (!got) {
        ++missed;  // the shared indices say an entry waits; the consumer cannot see it
        break;
      }
    }
    if (!got) {
      if (finished) break;  // everything was published before the look: the rest is lost
      std::this_thread::yield();
      continue;
    }
    if (seq != next) ++out_of_order;
    ++next;
  }
  stop = true;  // a consumer that stopped early would leave the producer waiting for room
  producer.join();
  done = true;
  watcher.join();
  EXPECT_FALSE(r.consumer.corrupt());
  EXPECT_EQ(missed, 0u);
  EXPECT_EQ(next, kEntries);
  EXPECT_EQ(out_of_order, 0u);
  EXPECT_GT(asked.load(), 0u);
  EXPECT_FALSE(r.consumer.published());
}

}  // namespace
}  // namespace ring_threads_test
