// Daemon mail on the NIC (firmware/lcp/mail.cpp): arriving mail goes into
// the daemon's inbox in SRAM; what finds it full waits in the NIC, in
// order, and moves in as the daemon takes mail out; beyond kMailWaiting it
// is dropped and counted. The test plays the link (mail_deliver) and the
// daemon (the inbox's consumer).
#include <string.h>

#include "core/board.h"
#include "core/status.h"
#include "harness.h"
#include "lcp/mail.h"
#include "ulnic/abi/ring.h"
#include "ulnic/abi/sram.h"

namespace abi = ulnic::abi;

namespace {

core::board::Board g_board;
abi::RingConsumer<abi::MailMessage> g_inbox;  // the daemon's side
uint32_t g_sent, g_taken;

abi::MailArea& area() { return *reinterpret_cast<abi::MailArea*>(abi::kSramBase + abi::kMailOffset); }

// Mail number `n` from node 1: its number in its first bytes.
void arrive(uint32_t n) {
  uint8_t payload[32];
  for (uint32_t i = 0; i < sizeof payload; ++i) payload[i] = uint8_t(n * 7 + i);
  memcpy(payload, &n, sizeof n);
  abi::WireHeader h{};
  h.op = abi::kWireOpMail;
  h.payload_len = sizeof payload;
  lcp::mail_deliver(1, h, payload);
}

// Takes what the inbox holds; false if a message is not the next in order.
bool take_all() {
  bool in_order = true;
  while (const abi::MailMessage* m = g_inbox.peek()) {
    uint32_t n;
    memcpy(&n, m->data, sizeof n);
    in_order = in_order && m->peer == 1 && m->length == 32 && n == g_taken && m->data[31] == uint8_t(n * 7 + 31);
    ++g_taken;
    g_inbox.pop();
  }
  g_inbox.release();
  return in_order;
}

uint64_t dropped() { return core::status::block().counters[abi::kCtrMailDropped]; }

}  // namespace

FW_TEST(mail_beyond_the_inbox_waits_and_moves_in_as_the_daemon_takes_it) {
  lcp::mail_init(g_board);
  CHECK(g_inbox.attach(&area().in_ring, area().in, abi::kMailCapacity));
  // 64 unimports at once, twice what the inbox holds.
  for (; g_sent < 2 * abi::kMailCapacity; ++g_sent) arrive(g_sent);
  EXPECT(take_all());
  EXPECT_EQ(g_taken, abi::kMailCapacity);
  // The daemon made room: the NIC's next pass moves the rest in.
  EXPECT(lcp::mail_poll());
  EXPECT(take_all());
  EXPECT_EQ(g_taken, 2 * abi::kMailCapacity);
  EXPECT(!lcp::mail_poll());  // nothing left
  // New mail while some waits goes behind it.
  for (uint32_t i = 0; i < abi::kMailCapacity + 5; ++i, ++g_sent) arrive(g_sent);
  arrive(g_sent++);
  EXPECT(take_all());
  while (lcp::mail_poll()) EXPECT(take_all());
  EXPECT_EQ(g_taken, g_sent);
}

FW_TEST(mail_beyond_what_may_wait_is_dropped_and_counted) {
  uint64_t before = dropped();
  uint32_t fits = abi::kMailCapacity + lcp::kMailWaiting;
  for (uint32_t i = 0; i < fits; ++i, ++g_sent) arrive(g_sent);
  EXPECT_EQ(dropped(), before);
  for (uint32_t i = 0; i < 3; ++i) arrive(g_sent + i);  // no room anywhere: dropped
  EXPECT_EQ(dropped(), before + 3);
  EXPECT(take_all());
  while (lcp::mail_poll()) EXPECT(take_all());
  EXPECT_EQ(g_taken, g_sent);  // every one that was kept, in order
  // Too long for a message: dropped.
  uint8_t big[abi::kMailBytes + 1] = {};
  abi::WireHeader h{};
  h.op = abi::kWireOpMail;
  h.payload_len = sizeof big;
  lcp::mail_deliver(1, h, big);
  EXPECT_EQ(dropped(), before + 4);
  EXPECT(!g_inbox.peek());
}
