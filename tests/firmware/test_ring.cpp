// The shared SPSC ring (shared/include/ulnic/abi/ring.h) as the firmware
// runs it: ordering builtins compile to fences on RV64, wrap-around of the
// free-running indices, and refusal of wild indices from a hostile peer.
#include "harness.h"
#include "ulnic/abi/ring.h"

namespace abi = ulnic::abi;

namespace {
struct Entry {
  uint64_t seq;
  uint64_t payload;
};
abi::RingControl g_ctl;
Entry g_entries[8];

void reset(uint32_t start) {
  g_ctl = abi::RingControl{};
  g_ctl.head = g_ctl.tail = start;
}
}  // namespace

FW_TEST(capacity_must_be_a_power_of_two) {
  abi::RingProducer<Entry> p;
  EXPECT(!p.attach(&g_ctl, g_entries, 6));
  EXPECT(!p.attach(&g_ctl, g_entries, 1));
  EXPECT(!p.attach(&g_ctl, g_entries, 0));
  EXPECT(p.attach(&g_ctl, g_entries, 8));
}

FW_TEST(fills_to_capacity_then_refuses) {
  reset(0);
  abi::RingProducer<Entry> p;
  CHECK(p.attach(&g_ctl, g_entries, 8));
  for (uint64_t i = 0; i < 8; ++i) {
    Entry* e = p.reserve();
    CHECK(e != nullptr);
    *e = {i, i * 3};
    p.push();
  }
  EXPECT(p.reserve() == nullptr);
  EXPECT_EQ(p.free_space(), 0u);
  p.publish();
  EXPECT_EQ(g_ctl.tail, 8u);
}

FW_TEST(delivers_in_order_across_index_wraparound) {
  reset(0xffff'fffcu);  // indices wrap past 2^32 during the test
  abi::RingProducer<Entry> p;
  abi::RingConsumer<Entry> c;
  CHECK(p.attach(&g_ctl, g_entries, 8));
  CHECK(c.attach(&g_ctl, g_entries, 8));
  uint64_t sent = 0, got = 0;
  for (int round = 0; round < 50; ++round) {
    for (int i = 0; i < 5; ++i) {
      Entry* e = p.reserve();
      if (!e) break;
      *e = {sent, ~sent};
      p.push();
      ++sent;
    }
    p.publish();
    for (int i = 0; i < 3; ++i) {
      const Entry* e = c.peek();
      if (!e) break;
      CHECK_EQ(e->seq, got);
      CHECK_EQ(e->payload, ~got);
      c.pop();
      ++got;
    }
    c.release();
  }
  while (const Entry* e = c.peek()) {
    CHECK_EQ(e->seq, got);
    c.pop();
    ++got;
  }
  c.release();
  EXPECT_EQ(got, sent);
  EXPECT(sent > 100);
  EXPECT(!p.corrupt());
  EXPECT(!c.corrupt());
}

FW_TEST(consumer_rejects_a_wild_tail) {
  reset(100);
  abi::RingConsumer<Entry> c;
  CHECK(c.attach(&g_ctl, g_entries, 8));
  g_ctl.tail = 100 + 9;  // claims more entries than the ring holds
  EXPECT(c.peek() == nullptr);
  EXPECT(c.corrupt());
  g_ctl.tail = 101;  // once corrupt, stays refused
  EXPECT(c.peek() == nullptr);
}

FW_TEST(consumer_rejects_a_tail_behind_head) {
  reset(100);
  abi::RingConsumer<Entry> c;
  CHECK(c.attach(&g_ctl, g_entries, 8));
  g_ctl.tail = 99;
  EXPECT_EQ(c.available(), 0u);
  EXPECT(c.corrupt());
}

FW_TEST(producer_rejects_a_wild_head) {
  reset(0);
  abi::RingProducer<Entry> p;
  CHECK(p.attach(&g_ctl, g_entries, 8));
  for (int i = 0; i < 8; ++i) {
    CHECK(p.reserve() != nullptr);
    p.push();
  }
  p.publish();
  g_ctl.head = 20;  // consumer claims to have read entries never written
  EXPECT(p.reserve() == nullptr);
  EXPECT(p.corrupt());
}

FW_TEST(producer_attach_detects_inconsistent_indices) {
  g_ctl = abi::RingControl{};
  g_ctl.tail = 50;
  g_ctl.head = 10;
  abi::RingProducer<Entry> p;
  EXPECT(!p.attach(&g_ctl, g_entries, 8));
  EXPECT(p.corrupt());
}
