// The slot service (firmware/lcp/slots.cpp) on the real board: the test
// plays the host's part by writing descriptors into a slot through its BAR,
// runs the firmware's service passes, and reads the completions back.
#include <string.h>

#include "core/board.h"
#include "harness.h"
#include "hal/clint.h"
#include "lcp/slots.h"
#include "slot_proc.h"

namespace abi = ulnic::abi;

namespace {

core::board::Board g_board;
lcp::SlotTable g_t;
uint64_t g_now = 1'000'000;

constexpr uint32_t kSq = 8, kCq = 4;
constexpr fwtest::SlotShape kShape = fwtest::packed_shape(kSq, kCq, 4);
constexpr uint64_t kVa = 0x7000'0000;  // the "host" address of the registered region

abi::CtrlCommand attach_cmd(uint32_t slot, uint64_t gen) {
  return fwtest::attach_command(slot, gen, fwtest::slot_layout(kShape, g_board.slots[slot].size));
}

// The processes on slots 0 and 1; the tests attach them themselves.
struct Host : fwtest::SlotProc {
  void open(uint32_t k) { map(g_t, g_now, k, kShape, 0x20000); }  // header, rings and the start of the heap
};

Host g_a, g_b;

abi::SqEntry reg(uint64_t offset, uint32_t len, uint32_t access, uint64_t va = kVa) {
  return fwtest::register_entry(offset, len, access, va);
}

abi::SqEntry copy(uint32_t src_slot, uint32_t src_key, uint64_t src, uint32_t dst_slot, uint32_t dst_key,
                  uint64_t dst, uint32_t len) {
  abi::SqEntry e{};
  e.opcode = abi::kOpCopy;
  e.src_slot = src_slot;
  e.src_key = src_key;
  e.src_addr = src;
  e.dst_slot = uint16_t(dst_slot);
  e.dst_key = dst_key;
  e.dst_addr = dst;
  e.length = len;
  e.user_data = 0xabcd;
  return e;
}

uint32_t g_key_a, g_key_b;

}  // namespace

FW_TEST(attach_validates_the_layout) {
  core::board::discover(g_board);
  lcp::slots_init(g_t, g_board, 12345);
  auto c = attach_cmd(0, 1);
  c.layout.sq_capacity = 6;
  EXPECT_EQ(lcp::slot_attach(g_t, c), abi::kCtrlBadLayout);
  c = attach_cmd(0, 1);
  c.layout.cq_offset = c.layout.sq_offset;  // rings overlap
  EXPECT_EQ(lcp::slot_attach(g_t, c), abi::kCtrlBadLayout);
  c = attach_cmd(0, 1);
  c.layout.heap_offset = 0x1000;  // heap over the rings
  EXPECT_EQ(lcp::slot_attach(g_t, c), abi::kCtrlBadLayout);
  c = attach_cmd(0, 1);
  c.layout.slot_size *= 2;
  EXPECT_EQ(lcp::slot_attach(g_t, c), abi::kCtrlBadLayout);
  c = attach_cmd(0, 1);
  c.slot = 9;
  EXPECT_EQ(lcp::slot_attach(g_t, c), abi::kCtrlBadSlot);
}

FW_TEST(attach_then_nop_round_trip) {
  g_a.open(0);
  CHECK_EQ(g_a.attach(1), abi::kCtrlOk);
  EXPECT_EQ(lcp::header(g_t.slots[0]).nic.state, uint32_t(abi::SlotState::kActive));
  EXPECT_EQ(g_a.attach(2), abi::kCtrlBadSlot);  // already active
  abi::SqEntry e{};
  e.opcode = abi::kOpNop;
  e.user_data = 77;
  abi::CqEntry c = g_a.run(e);
  EXPECT_EQ(c.status, abi::kCqOk);
  EXPECT_EQ(c.user_data, 77u);
}

FW_TEST(register_and_copy_within_a_slot) {
  abi::CqEntry c = g_a.run(reg(0x10000, 0x10000, abi::kAccessLocal));
  CHECK_EQ(c.status, abi::kCqOk);
  g_key_a = c.result;
  EXPECT(g_key_a != 0);
  for (int i = 0; i < 4096; ++i) g_a.base[0x10000 + i] = uint8_t(i * 7);
  c = g_a.run(copy(0, g_key_a, kVa, 0, g_key_a, kVa + 0x8003, 4096));
  CHECK_EQ(c.status, abi::kCqOk);
  EXPECT_EQ(c.result, 4096u);
  EXPECT(memcmp(g_a.base + 0x18003, g_a.base + 0x10000, 4096) == 0);
}

FW_TEST(bad_descriptors_get_error_statuses) {
  EXPECT_EQ(g_a.run(copy(0, g_key_a ^ 0x100, kVa, 0, g_key_a, kVa, 8)).status, abi::kCqBadKey);
  EXPECT_EQ(g_a.run(copy(0, 0, kVa, 0, g_key_a, kVa, 8)).status, abi::kCqBadKey);
  EXPECT_EQ(g_a.run(copy(0, g_key_a, kVa + 0xfff0, 0, g_key_a, kVa, 32)).status, abi::kCqBadLength);
  EXPECT_EQ(g_a.run(copy(0, g_key_a, kVa - 1, 0, g_key_a, kVa, 8)).status, abi::kCqBadLength);
  EXPECT_EQ(g_a.run(copy(0, g_key_a, kVa, 0, g_key_a, kVa, 0)).status, abi::kCqBadLength);
  EXPECT_EQ(g_a.run(copy(0, g_key_a, kVa, 5, 1, kVa, 8)).status, abi::kCqBadSlot);  // nobody there
  EXPECT_EQ(g_a.run(copy(0, g_key_a, kVa, 200, 1, kVa, 8)).status, abi::kCqBadSlot);
  EXPECT_EQ(g_a.run(reg(0, 4096, abi::kAccessLocal)).status, abi::kCqBadAddress);  // the header
  EXPECT_EQ(g_a.run(reg(g_board.slots[0].size - 4096, 8192, abi::kAccessLocal)).status, abi::kCqBadAddress);
  EXPECT_EQ(g_a.run(reg(0x10000, 0, abi::kAccessLocal)).status, abi::kCqBadLength);
  EXPECT_EQ(g_a.run(reg(0x10000, 64, 0)).status, abi::kCqBadOpcode);
  abi::SqEntry e{};
  e.opcode = abi::kOpcodeCount;
  EXPECT_EQ(g_a.run(e).status, abi::kCqBadOpcode);
  e.opcode = abi::kOpNop;
  e.flags = 1;
  EXPECT_EQ(g_a.run(e).status, abi::kCqBadOpcode);
  e = abi::SqEntry{};
  e.opcode = abi::kOpDeregister;
  e.src_key = 0x12345600;
  EXPECT_EQ(g_a.run(e).status, abi::kCqBadKey);
}

FW_TEST(cross_slot_copy_needs_remote_write) {
  g_b.open(1);
  CHECK_EQ(g_b.attach(7), abi::kCtrlOk);
  abi::CqEntry c = g_b.run(reg(0x20000, 0x1000, abi::kAccessLocal));
  CHECK_EQ(c.status, abi::kCqOk);
  uint32_t local_only = c.result;
  EXPECT_EQ(g_a.run(copy(0, g_key_a, kVa, 1, local_only, kVa, 64)).status, abi::kCqProtection);
  c = g_b.run(reg(0x30000, 0x1000, abi::kAccessLocal | abi::kAccessRemoteWrite, 0x9000'0000));
  CHECK_EQ(c.status, abi::kCqOk);
  g_key_b = c.result;
  c = g_a.run(copy(0, g_key_a, kVa, 1, g_key_b, 0x9000'0010, 512));
  EXPECT_EQ(c.status, abi::kCqOk);
  EXPECT(memcmp(g_b.base + 0x30010, g_a.base + 0x10000, 512) == 0);
  // Reading B's memory needs RemoteRead, which it did not grant.
  EXPECT_EQ(g_a.run(copy(1, g_key_b, 0x9000'0000, 0, g_key_a, kVa, 8)).status, abi::kCqProtection);
}

FW_TEST(large_copies_take_several_bounded_passes) {
  for (int i = 0; i < 0x8000; ++i) g_a.base[0x10000 + i] = uint8_t(i ^ 0x5a);
  uint32_t len = 0x8000;
  CHECK_EQ(g_a.run(reg(0x40000, 0x30000, abi::kAccessLocal, 0x5000'0000)).status, abi::kCqOk);
  uint32_t big = 0;
  {
    abi::CqEntry c = g_a.run(reg(0x100000, 0x100000, abi::kAccessLocal, 0x6000'0000));
    CHECK_EQ(c.status, abi::kCqOk);
    big = c.result;
  }
  g_a.submit(copy(0, big, 0x6000'0000, 0, big, 0x6008'0000, 0x80000));  // 512 KiB = 8 chunks
  abi::CqEntry c{};
  int passes = 0;
  while (!g_a.reap(c) && passes < 100) lcp::slots_service(g_t), ++passes;
  EXPECT_EQ(c.status, abi::kCqOk);
  EXPECT(passes >= int(0x80000 / lcp::kCopyChunk));
  (void)len;
}

abi::SqEntry move(uint64_t from, uint64_t to, uint32_t len) {
  abi::SqEntry e{};
  e.opcode = abi::kOpMoveRegion;
  e.reg_offset = from;
  e.dst_addr = to;
  e.length = len;
  return e;
}

FW_TEST(move_region_moves_the_bytes_and_the_registrations_inside) {
  constexpr uint64_t kFrom = 0x200000, kTo = 0x300000, kVaM = 0x4000'0000;
  const uint32_t inside = g_a.run(reg(kFrom, 0x1000, abi::kAccessLocal, kVaM)).result;
  const uint32_t overlapping = g_a.run(reg(kFrom + 0x800, 0x800, abi::kAccessLocal, kVaM + 0x800)).result;
  const uint32_t straddling = g_a.run(reg(kFrom + 0xc00, 0x1000, abi::kAccessLocal, 0x4800'0000)).result;
  CHECK(inside && overlapping && straddling);
  for (int i = 0; i < 0x2000; ++i) g_a.base[kFrom + i] = uint8_t(i * 13 + 1);
  CHECK_EQ(g_a.run(move(kFrom, kTo, 0x1000)).status, abi::kCqOk);
  EXPECT(memcmp(g_a.base + kTo, g_a.base + kFrom, 0x1000) == 0);
  // The old place changes; what the two inside registrations read is the new one.
  memset(g_a.base + kFrom, 0xee, 0x2000);
  for (int i = 0; i < 0x1000; ++i) g_a.base[kTo + i] = uint8_t(i * 5 + 3);
  CHECK_EQ(g_a.run(copy(0, inside, kVaM + 0x10, 0, g_key_a, kVa, 0x100)).status, abi::kCqOk);
  EXPECT(memcmp(g_a.base + 0x10000, g_a.base + kTo + 0x10, 0x100) == 0);
  CHECK_EQ(g_a.run(copy(0, overlapping, kVaM + 0x900, 0, g_key_a, kVa, 0x100)).status, abi::kCqOk);
  EXPECT(memcmp(g_a.base + 0x10000, g_a.base + kTo + 0x900, 0x100) == 0);
  // One reaching past the range stays where it was.
  CHECK_EQ(g_a.run(copy(0, straddling, 0x4800'0000, 0, g_key_a, kVa, 0x100)).status, abi::kCqOk);
  EXPECT_EQ(g_a.base[0x10000], 0xee);
  // Overlapping source and destination: a memmove, up a page and back down.
  for (int i = 0; i < 0x3000; ++i) g_a.base[kTo + i] = uint8_t(i * 3 + (i >> 8));
  CHECK_EQ(g_a.run(move(kTo, kTo + 0x1000, 0x3000)).status, abi::kCqOk);
  for (int i = 0; i < 0x3000; ++i) CHECK_EQ(g_a.base[kTo + 0x1000 + i], uint8_t(i * 3 + (i >> 8)));
  CHECK_EQ(g_a.run(copy(0, inside, kVaM, 0, g_key_a, kVa, 0x100)).status, abi::kCqOk);
  EXPECT(memcmp(g_a.base + 0x10000, g_a.base + kTo + 0x1000, 0x100) == 0);
  CHECK_EQ(g_a.run(move(kTo + 0x1000, kTo, 0x3000)).status, abi::kCqOk);
  for (int i = 0; i < 0x3000; ++i) CHECK_EQ(g_a.base[kTo + i], uint8_t(i * 3 + (i >> 8)));
  CHECK_EQ(g_a.run(copy(0, inside, kVaM + 0x40, 0, g_key_a, kVa, 0x100)).status, abi::kCqOk);
  EXPECT(memcmp(g_a.base + 0x10000, g_a.base + kTo + 0x40, 0x100) == 0);
}

FW_TEST(move_region_refusals) {
  const uint64_t heap_end = g_t.slots[0].layout.heap_offset + g_t.slots[0].layout.heap_size;
  EXPECT_EQ(g_a.run(move(0x200000, 0x300000, 0)).status, abi::kCqBadLength);
  EXPECT_EQ(g_a.run(move(0, 0x300000, 0x1000)).status, abi::kCqBadAddress);  // the header
  EXPECT_EQ(g_a.run(move(0x200000, heap_end - 0x1000, 0x2000)).status, abi::kCqBadAddress);
  EXPECT_EQ(g_a.run(move(heap_end - 0x1000, 0x200000, 0x2000)).status, abi::kCqBadAddress);
  // Whole pages only: a length, a source or a destination off a page.
  EXPECT_EQ(g_a.run(move(0x200000, 0x300000, 0x1001)).status, abi::kCqBadLength);
  EXPECT_EQ(g_a.run(move(0x200000, 0x300000, 0x800)).status, abi::kCqBadLength);
  EXPECT_EQ(g_a.run(move(0x200001, 0x300000, 0x1000)).status, abi::kCqBadAddress);
  EXPECT_EQ(g_a.run(move(0x200000, 0x300008, 0x1000)).status, abi::kCqBadAddress);
  EXPECT_EQ(g_a.run(move(0x200000, 0x200001, 0x2000)).status, abi::kCqBadAddress);
  abi::SqEntry e = move(0x200000, 0x300000, 0x1000);
  e.src_key = g_key_a;  // the registrations it moves are the ones in the range, never named
  EXPECT_EQ(g_a.run(e).status, abi::kCqBadOpcode);
  e = move(0x200000, 0x300000, 0x1000);
  e.src_addr = 1;
  EXPECT_EQ(g_a.run(e).status, abi::kCqBadOpcode);
  // A send's completion owed (as the remote path counts it): not now.
  ++g_t.slots[0].cq_reserved;
  EXPECT_EQ(g_a.run(move(0x200000, 0x300000, 0x1000)).status, abi::kCqBusy);
  --g_t.slots[0].cq_reserved;
  // A copy of another slot reading this one, under way.
  g_t.slots[1].copy.active = true;
  g_t.slots[1].copy.src_slot = 0;
  EXPECT_EQ(g_a.run(move(0x200000, 0x300000, 0x1000)).status, abi::kCqBusy);
  g_t.slots[1].copy.active = false;
  EXPECT_EQ(g_a.run(move(0x200000, 0x300000, 0x1000)).status, abi::kCqOk);
}

FW_TEST(a_full_cq_stalls_the_slot_instead_of_overwriting) {
  abi::SqEntry e{};
  e.opcode = abi::kOpNop;
  for (uint32_t i = 0; i < kSq; ++i) e.user_data = i, g_a.submit(e);
  for (int i = 0; i < 5; ++i) lcp::slots_service(g_t);
  abi::CqEntry c;
  uint32_t got = 0;
  while (g_a.reap(c)) EXPECT_EQ(c.user_data, got++);
  EXPECT_EQ(got, kCq);  // only as many as the CQ holds
  for (int i = 0; i < 5; ++i) lcp::slots_service(g_t);
  while (g_a.reap(c)) EXPECT_EQ(c.user_data, got++);
  EXPECT_EQ(got, kSq);
}

FW_TEST(a_sleeping_nic_marks_every_slot_dormant_and_polls_none) {
  EXPECT(!lcp::slots_busy(g_t));
  EXPECT(lcp::slots_prepare_sleep(g_t));
  for (uint32_t k = 0; k < 2; ++k) {
    EXPECT(g_t.slots[k].dormant);
    EXPECT_EQ(lcp::header(g_t.slots[k]).nic.sq_dormant, 1u);
  }
  abi::SqEntry e{};
  e.opcode = abi::kOpNop;
  g_a.submit(e);
  for (int i = 0; i < 5; ++i) lcp::slots_service(g_t);
  abi::CqEntry c;
  EXPECT(!g_a.reap(c));  // not polled while dormant: the host must ring
  lcp::slot_wake(g_t, 0);  // its doorbell: the NIC polls every slot again
  lcp::slots_woke(g_t);
  for (uint32_t k = 0; k < 2; ++k) EXPECT_EQ(lcp::header(g_t.slots[k]).nic.sq_dormant, 0u);
  lcp::slots_service(g_t);
  EXPECT(g_a.reap(c));
}

FW_TEST(going_to_sleep_rechecks_every_tail) {
  // Work that arrives while the flags go up must not be stranded: the NIC
  // stays up and every slot stays polled.
  abi::SqEntry e{};
  e.opcode = abi::kOpNop;
  g_b.submit(e);
  EXPECT(!lcp::slots_prepare_sleep(g_t));
  for (uint32_t k = 0; k < 2; ++k) {
    EXPECT(!g_t.slots[k].dormant);
    EXPECT_EQ(lcp::header(g_t.slots[k]).nic.sq_dormant, 0u);
  }
  lcp::slots_service(g_t);
  abi::CqEntry c;
  EXPECT(g_b.reap(c));
}

FW_TEST(a_host_is_rung_only_for_what_it_waits_for) {
  CHECK(g_board.fabric.regs != 0);  // else nothing ever rings and this proves nothing
  abi::SlotHostWords& host = lcp::header(g_t.slots[0]).host;
  abi::SqEntry nop{};
  nop.opcode = abi::kOpNop;
  abi::CqEntry c;
  lcp::slots_ring_hosts(g_t, 0);  // what earlier tests left due
  // Asleep for events only (an AM or FM process waiting for arrivals): its
  // own completion does not ring it...
  host.wait_for = abi::kWaitEvents;
  host.wait_seq++;
  g_a.submit(nop);
  lcp::slots_service(g_t);
  EXPECT(!lcp::slots_ring_hosts(g_t, 0));
  EXPECT(g_a.reap(c) && c.status == abi::kCqOk);
  // ... an event does, once per announced sleep ...
  abi::EqEntry ev{};
  ev.type = abi::kEqAmArrival;
  lcp::slot_post_event(g_t, 0, ev);
  EXPECT(lcp::slots_ring_hosts(g_t, 0));
  EXPECT_EQ(g_t.slots[0].rung_seq, host.wait_seq);
  lcp::slot_post_event(g_t, 0, ev);
  EXPECT(!lcp::slots_ring_hosts(g_t, 0));  // rung already for this sleep
  // ... and so does a completion with an error status (a returned message).
  host.wait_seq++;
  abi::SqEntry bad{};
  bad.opcode = 0xee;
  g_a.submit(bad);
  lcp::slots_service(g_t);
  EXPECT(lcp::slots_ring_hosts(g_t, 0));
  EXPECT(g_a.reap(c) && c.status != abi::kCqOk);
  // Asleep for completions (0 is what a host that never set it writes: all).
  const uint32_t sleeps[] = {abi::kWaitCompletions, 0u};
  for (uint32_t wants : sleeps) {
    host.wait_for = wants;
    host.wait_seq++;
    g_a.submit(nop);
    lcp::slots_service(g_t);
    EXPECT(lcp::slots_ring_hosts(g_t, 0));
    EXPECT(g_a.reap(c) && c.status == abi::kCqOk);
  }
  host.wait_for = abi::kWaitCompletions;  // and not for events
  host.wait_seq++;
  lcp::slot_post_event(g_t, 0, ev);
  EXPECT(!lcp::slots_ring_hosts(g_t, 0));
  abi::EqEntry got;
  while (g_a.event(got)) {}
  host.wait_for = 0;
}

FW_TEST(a_sleeper_that_waits_for_several_events_is_rung_once_they_are_in) {
  CHECK(g_board.fabric.regs != 0);
  abi::SlotHostWords& host = lcp::header(g_t.slots[0]).host;
  const lcp::Slot& slot = g_t.slots[0];
  const uint64_t us = hal::clint::us_to_ticks(1), patience = lcp::kRingDeferUs * us;
  uint64_t now = 1000 * us;
  abi::EqEntry ev{}, got;
  ev.type = abi::kEqAmArrival;
  abi::CqEntry c;
  auto sleep = [&](uint32_t wants, uint32_t events) {
    lcp::slots_ring_hosts(g_t, now);  // what earlier steps left due
    while (g_a.event(got)) {}
    host.wait_for = wants;
    host.wait_events_until = slot.eq.tail() + events;
    host.wait_seq++;
  };
  // Asleep for events until 3 more are in (an FM process amid a message):
  // the first two do not ring it, the third does.
  sleep(abi::kWaitEvents, 3);
  for (int i = 0; i < 2; ++i) {
    lcp::slot_post_event(g_t, 0, ev);
    EXPECT(!lcp::slots_ring_hosts(g_t, now += us));
  }
  lcp::slot_post_event(g_t, 0, ev);
  EXPECT(lcp::slots_ring_hosts(g_t, now += us));
  EXPECT_EQ(slot.rung_seq, host.wait_seq);
  EXPECT(!slot.ring_waits);
  // Fewer come: rung kRingDeferUs after the first, not before.
  sleep(abi::kWaitEvents, 3);
  lcp::slot_post_event(g_t, 0, ev);
  EXPECT(!lcp::slots_ring_hosts(g_t, now));
  lcp::slot_post_event(g_t, 0, ev);
  EXPECT(!lcp::slots_ring_hosts(g_t, now + patience - 1));
  EXPECT(lcp::slots_ring_hosts(g_t, now + patience));
  now += patience;
  // The NIC about to sleep rings it at once, and once.
  sleep(abi::kWaitEvents, 3);
  lcp::slot_post_event(g_t, 0, ev);
  EXPECT(!lcp::slots_ring_hosts(g_t, now));
  EXPECT(lcp::slots_ring_deferred(g_t));
  EXPECT(!lcp::slots_ring_deferred(g_t));
  EXPECT(!lcp::slots_ring_hosts(g_t, now));
  // A completion it waits for rings at once, whatever the events...
  sleep(abi::kWaitAll, 3);
  abi::SqEntry nop{};
  nop.opcode = abi::kOpNop;
  g_a.submit(nop);
  lcp::slots_service(g_t);
  EXPECT(lcp::slots_ring_hosts(g_t, now));
  EXPECT(g_a.reap(c) && c.status == abi::kCqOk);
  // ... and so does a failed one, to a process that waits for events.
  sleep(abi::kWaitEvents, 3);
  abi::SqEntry bad{};
  bad.opcode = 0xee;
  g_a.submit(bad);
  lcp::slots_service(g_t);
  EXPECT(lcp::slots_ring_hosts(g_t, now));
  EXPECT(g_a.reap(c) && c.status != abi::kCqOk);
  // A threshold the tail has passed already rings at once.
  sleep(abi::kWaitEvents, 0);
  host.wait_events_until = slot.eq.tail() - 1;
  lcp::slot_post_event(g_t, 0, ev);
  EXPECT(lcp::slots_ring_hosts(g_t, now));
  while (g_a.event(got)) {}
  host.wait_events_until = 0;
  host.wait_for = 0;
}

FW_TEST(detach_flushes_outstanding_descriptors) {
  abi::SqEntry e{};
  e.opcode = abi::kOpNop;
  for (int i = 0; i < 3; ++i) g_b.submit(e);
  EXPECT_EQ(lcp::slot_detach(g_t, 1), 3u);
  abi::CqEntry c;
  int flushed = 0;
  while (g_b.reap(c)) flushed += c.status == abi::kCqFlushed;
  EXPECT_EQ(flushed, 3);
  EXPECT_EQ(reinterpret_cast<abi::SlotHeader*>(g_b.base)->nic.state, uint32_t(abi::SlotState::kFlushed));
  // A copy into the detached slot is now refused.
  lcp::slot_wake(g_t, 0);
  EXPECT_EQ(g_a.run(copy(0, g_key_a, kVa, 1, g_key_b, 0x9000'0000, 8)).status, abi::kCqBadSlot);
}

FW_TEST(a_wild_sq_tail_cuts_the_slot_off_and_spares_the_others) {
  g_b.open(1);
  CHECK_EQ(g_b.attach(8), abi::kCtrlOk);
  auto* sqc = reinterpret_cast<abi::RingControl*>(g_b.base + g_b.layout.sq_offset);
  sqc->tail = 1000;  // more entries than the ring holds
  lcp::slots_service(g_t);
  EXPECT_EQ(g_t.slots[1].state, abi::SlotState::kCutOff);
  EXPECT_EQ(lcp::header(g_t.slots[1]).nic.fault_code, uint32_t(abi::kFaultSqCorrupt));
  abi::SqEntry e{};
  e.opcode = abi::kOpNop;
  EXPECT_EQ(g_a.run(e).status, abi::kCqOk);  // slot 0 unaffected
}

FW_TEST(a_wild_cq_head_cuts_the_slot_off) {
  auto* cqc = reinterpret_cast<abi::RingControl*>(g_a.base + g_a.layout.cq_offset);
  cqc->head = cqc->head + 1000;
  abi::SqEntry e{};
  e.opcode = abi::kOpNop;
  // The NIC reads the head again once its cached copy shows the ring full:
  // a ring's worth of completions gets there wherever the indices stand.
  for (uint32_t i = 0; i < kCq; ++i) g_a.submit(e);
  for (int i = 0; i < 3; ++i) lcp::slots_service(g_t);
  EXPECT_EQ(g_t.slots[0].state, abi::SlotState::kCutOff);
  EXPECT_EQ(lcp::header(g_t.slots[0]).nic.fault_code, uint32_t(abi::kFaultCqCorrupt));
}

FW_TEST(the_active_set_follows_attach_cut_off_and_detach) {
  // The passes visit the slots in SlotTable::active only: a slot must be in
  // it from its attach until its cut-off or detach (both earlier tests cut
  // theirs off).
  EXPECT_EQ(g_t.active, 0u);
  g_a.open(0);
  CHECK_EQ(g_a.attach(9), abi::kCtrlOk);
  g_b.open(1);
  CHECK_EQ(g_b.attach(10), abi::kCtrlOk);
  EXPECT_EQ(g_t.active, 3u);
  // Each pass serves both, whichever it starts with.
  abi::SqEntry e{};
  e.opcode = abi::kOpNop;
  for (uint32_t pass = 0; pass < abi::kMaxSlots + 1; ++pass) {
    g_a.submit(e);
    g_b.submit(e);
    lcp::slots_service(g_t);
    abi::CqEntry c;
    EXPECT(g_a.reap(c) && c.status == abi::kCqOk);
    EXPECT(g_b.reap(c) && c.status == abi::kCqOk);
  }
  EXPECT_EQ(lcp::slot_detach(g_t, 1), 0u);
  EXPECT_EQ(g_t.active, 1u);
  auto* sqc = reinterpret_cast<abi::RingControl*>(g_a.base + g_a.layout.sq_offset);
  sqc->tail = sqc->tail + 1000;
  lcp::slots_service(g_t);
  EXPECT_EQ(g_t.slots[0].state, abi::SlotState::kCutOff);
  EXPECT_EQ(g_t.active, 0u);
}
