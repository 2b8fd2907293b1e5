// VMMC in the firmware (firmware/lcp/vmmc.cpp) on the real board: two slots
// of this NIC, one exporting, one importing; the test plays both processes
// (descriptors in, completions and events out) and the daemon (control
// commands). Sends between slots of one NIC take the same checks as chunks
// from the wire, so every rule of the incoming and outgoing tables shows here.
#include <string.h>

#include "core/board.h"
#include "core/status.h"
#include "harness.h"
#include "lcp/remote.h"
#include "lcp/slots.h"
#include "lcp/vmmc.h"
#include "slot_proc.h"

namespace abi = ulnic::abi;

namespace {

core::board::Board g_board;
lcp::SlotTable g_t;
constexpr uint64_t kNow = 1'000'000;
constexpr uint32_t kSq = 16, kCq = 8, kEq = 4;
constexpr fwtest::SlotShape kShape = fwtest::packed_shape(kSq, kCq, kEq);
constexpr uint64_t kHeap = kShape.heap_offset;
constexpr uint64_t kVaA = 0x7000'0000, kVaB = 0x9000'0000;

struct Proc : fwtest::SlotProc {
  void open(uint32_t k, uint64_t generation) {
    map(g_t, kNow, k, kShape, 0x80000);
    EXPECT_EQ(attach(generation), abi::kCtrlOk);
  }
  uint32_t reg(uint64_t offset, uint32_t len, uint32_t access, uint64_t va) {
    abi::CqEntry c = run(fwtest::register_entry(offset, len, access, va));
    EXPECT_EQ(c.status, abi::kCqOk);
    return c.result;
  }
};

Proc g_a, g_b;  // a imports and sends, b exports
uint32_t g_key_b, g_handle;

abi::CtrlStatus ctrl(uint32_t op, uint32_t slot, abi::CtrlVmmcArgs args, uint64_t* value = nullptr) {
  abi::CtrlCommand cmd{};
  cmd.opcode = op;
  cmd.slot = slot;
  cmd.vmmc = args;
  uint64_t v = 0;
  abi::CtrlStatus st = lcp::vmmc_control(g_t, cmd, v);
  if (value) *value = v;
  return st;
}

abi::SqEntry send(uint64_t src, uint64_t proxy, uint32_t len, uint8_t flags = 0) {
  abi::SqEntry e{};
  e.opcode = abi::kOpSend;
  e.src_addr = src;
  e.dst_addr = proxy;
  e.length = len;
  e.flags = flags;
  e.user_data = 0x5e5d;
  return e;
}

uint64_t ctr(abi::Counter c) { return core::status::block().counters[c]; }

}  // namespace

FW_TEST(setup_two_slots) {
  core::board::discover(g_board);
  CHECK(g_board.num_slots >= 2);
  lcp::slots_init(g_t, g_board, 777);
  lcp::remote_init(g_t);
  lcp::vmmc_init(g_t);
  g_a.open(0, 1);
  g_b.open(1, 2);
  g_a.reg(kHeap, 0x40000, abi::kAccessLocal, kVaA);
  for (int i = 0; i < 0x40000; ++i) g_a.base[kHeap + i] = uint8_t(i * 13 + 1);
}

FW_TEST(export_needs_a_remote_write_registration) {
  uint32_t local_only = g_b.reg(kHeap, 0x1000, abi::kAccessLocal, kVaB);
  g_key_b = g_b.reg(kHeap + 0x10000, 0x20000, abi::kAccessLocal | abi::kAccessRemoteWrite, kVaB + 0x10000);
  uint64_t handle = 0;
  EXPECT_EQ(ctrl(abi::kCtrlExport, 1, {0, local_only, kVaB, 0x1000, 0, 0, 0, 1, {}}), abi::kCtrlBadRegion);
  EXPECT_EQ(ctrl(abi::kCtrlExport, 1, {0, g_key_b, kVaB + 0x10000, 0x20001, 0, 0, 0, 1, {}}), abi::kCtrlBadRegion);
  EXPECT_EQ(ctrl(abi::kCtrlExport, 1, {0, g_key_b ^ 0x100, kVaB + 0x10000, 16, 0, 0, 0, 1, {}}),
            abi::kCtrlBadRegion);
  EXPECT_EQ(ctrl(abi::kCtrlExport, 5, {0, g_key_b, kVaB + 0x10000, 16, 0, 0, 0, 1, {}}), abi::kCtrlBadSlot);
  CHECK_EQ(ctrl(abi::kCtrlExport, 1, {0, g_key_b, kVaB + 0x10000, 0x20000, 0, 0, 0, 1, {}}, &handle), abi::kCtrlOk);
  g_handle = uint32_t(handle);
  EXPECT(g_handle != 0);
  // The importer's outgoing table: proxy region 0 -> (this node, slot 1, handle).
  uint32_t self = core::status::block().node_id;
  EXPECT_EQ(ctrl(abi::kCtrlImport, 0, {g_handle, 0, 0, 0, self, 1, 0, 0, {}}), abi::kCtrlBadRegion);  // no length
  EXPECT_EQ(ctrl(abi::kCtrlImport, 0, {g_handle, 0, 0, 0x20000, self, 1, abi::kMaxImports, 0, {}}),
            abi::kCtrlBadHandle);
  CHECK_EQ(ctrl(abi::kCtrlImport, 0, {g_handle, 0, 0, 0x20000, self, 1, 0, 0, {}}), abi::kCtrlOk);
}

FW_TEST(a_send_without_a_grant_is_refused_by_the_receiving_side) {
  uint64_t before = ctr(abi::kCtrVmmcViolations);
  abi::CqEntry c = g_a.run(send(kVaA, abi::proxy_base(0), 4096));
  EXPECT_EQ(c.status, abi::kCqRemoteRevoked);
  EXPECT_EQ(c.user_data, 0x5e5dull);
  EXPECT(ctr(abi::kCtrVmmcViolations) > before);
  EXPECT_EQ(g_b.base[kHeap + 0x10000], 0);
}

FW_TEST(granted_sends_land_and_the_tlb_caches_the_source) {
  uint32_t self = core::status::block().node_id;
  CHECK_EQ(ctrl(abi::kCtrlGrant, 0, {g_handle, 0, 0, 0, self, 0, 0, 0, {}}), abi::kCtrlOk);
  EXPECT_EQ(ctrl(abi::kCtrlGrant, 0, {g_handle, 0, 0, 0, self, 0, 0, 0, {}}), abi::kCtrlOk);  // idempotent
  uint64_t misses = g_t.slots[0].tlb_misses;
  // A page no send used yet: a TLB miss; straddles pages on both sides.
  abi::CqEntry c = g_a.run(send(kVaA + 0x10003, abi::proxy_base(0) + 4093, 10000));
  CHECK_EQ(c.status, abi::kCqOk);
  EXPECT_EQ(c.result, 10000u);
  EXPECT(memcmp(g_b.base + kHeap + 0x10000 + 4093, g_a.base + kHeap + 0x10003, 10000) == 0);
  EXPECT_EQ(g_t.slots[0].tlb_misses, misses + 1);
  uint64_t hits = g_t.slots[0].tlb_hits;
  CHECK_EQ(g_a.run(send(kVaA + 0x10100, abi::proxy_base(0), 64)).status, abi::kCqOk);
  EXPECT_EQ(g_t.slots[0].tlb_hits, hits + 1);
  EXPECT_EQ(g_t.slots[0].tlb_misses, misses + 1);
}

FW_TEST(sends_outside_the_tables_are_refused_at_the_sender) {
  EXPECT_EQ(g_a.run(send(kVaA, abi::proxy_base(0) + 0x20000 - 8, 9)).status, abi::kCqNotImported);
  EXPECT_EQ(g_a.run(send(kVaA, abi::proxy_base(1), 8)).status, abi::kCqNotImported);   // region never imported
  EXPECT_EQ(g_a.run(send(kVaA, 0x1000, 8)).status, abi::kCqNotImported);               // below the proxy space
  EXPECT_EQ(g_a.run(send(kVaA, abi::proxy_base(abi::kMaxImports), 8)).status, abi::kCqNotImported);
  EXPECT_EQ(g_a.run(send(0x1234'0000, abi::proxy_base(0), 8)).status, abi::kCqUnregistered);
  EXPECT_EQ(g_a.run(send(kVaA + 0x40000 - 4, abi::proxy_base(0), 8)).status, abi::kCqUnregistered);  // runs off
  EXPECT_EQ(g_a.run(send(kVaA, abi::proxy_base(0), 0)).status, abi::kCqBadLength);
  abi::SqEntry e = send(kVaA, abi::proxy_base(0), 8);
  e.dst_slot = 1;  // fields a send does not use must be zero
  EXPECT_EQ(g_a.run(e).status, abi::kCqBadOpcode);
  e = send(kVaA, abi::proxy_base(0), 8, 0x80);
  EXPECT_EQ(g_a.run(e).status, abi::kCqBadOpcode);
}

FW_TEST(inline_sends_carry_their_payload_in_the_queue) {
  uint8_t payload[128];
  for (int i = 0; i < 128; ++i) payload[i] = uint8_t(0xa0 + i);
  abi::SqEntry e = send(0, abi::proxy_base(0) + 77, 100);
  e.opcode = abi::kOpSendInline;
  CHECK_EQ(g_a.run(e, payload, sizeof payload).status, abi::kCqOk);
  EXPECT(memcmp(g_b.base + kHeap + 0x10000 + 77, payload, 100) == 0);
  e.length = 129;  // too long to be inline (what the host put after it is read as descriptors)
  EXPECT_EQ(g_a.run(e).status, abi::kCqBadLength);
  // A payload the host never published: the send fails, nothing lands.
  e.length = 128;
  e.dst_addr = abi::proxy_base(0) + 1000;
  EXPECT_EQ(g_a.run(e).status, abi::kCqBadLength);
  EXPECT_EQ(g_b.base[kHeap + 0x10000 + 1000], 0);
}

FW_TEST(a_notifying_send_posts_an_event_after_its_data) {
  abi::EqEntry ev{};
  EXPECT(!g_b.event(ev));
  CHECK_EQ(g_a.run(send(kVaA, abi::proxy_base(0) + 8192, 9000, abi::kSqNotify)).status, abi::kCqOk);
  CHECK(g_b.event(ev));
  EXPECT_EQ(ev.type, abi::kEqNotification);
  EXPECT_EQ(ev.export_handle, g_handle);
  EXPECT_EQ(ev.offset, 8192u);
  EXPECT_EQ(ev.length, 9000u);
  EXPECT_EQ(ev.src_slot, 0u);
  EXPECT_EQ(ev.flags, 0u);
  // A full event queue drops and counts; sends still complete.
  uint64_t dropped = lcp::header(g_t.slots[1]).nic.events_dropped;
  for (uint32_t i = 0; i < kEq + 2; ++i)
    CHECK_EQ(g_a.run(send(kVaA, abi::proxy_base(0), 8, abi::kSqNotify)).status, abi::kCqOk);
  EXPECT_EQ(lcp::header(g_t.slots[1]).nic.events_dropped, dropped + 2);
  while (g_b.event(ev)) {
  }
}

FW_TEST(redirection_takes_one_whole_send) {
  uint32_t target_key = g_b.reg(kHeap + 0x40000, 0x8000, abi::kAccessLocal, kVaB + 0x40000);
  (void)target_key;
  abi::SqEntry r{};
  r.opcode = abi::kOpRedirect;
  r.dst_key = g_handle;
  r.dst_addr = 0x1000;
  r.length = 0x4000;
  r.src_addr = kVaB + 0x40000;
  r.src_key = 42;
  CHECK_EQ(g_b.run(r).status, abi::kCqOk);
  // Not wholly inside the range: passes it by.
  CHECK_EQ(g_a.run(send(kVaA, abi::proxy_base(0) + 0x4f00, 0x200, abi::kSqNotify)).status, abi::kCqOk);
  abi::EqEntry ev{};
  CHECK(g_b.event(ev));
  EXPECT_EQ(ev.flags, 0u);
  // Inside: lands in the target, the export is untouched.
  memset(g_b.base + kHeap + 0x10000 + 0x1100, 0, 0x800);
  CHECK_EQ(g_a.run(send(kVaA + 5, abi::proxy_base(0) + 0x1100, 0x800)).status, abi::kCqOk);
  EXPECT(memcmp(g_b.base + kHeap + 0x40000 + 0x100, g_a.base + kHeap + 5, 0x800) == 0);
  EXPECT_EQ(g_b.base[kHeap + 0x10000 + 0x1100], 0);
  CHECK(g_b.event(ev));  // redirected sends always tell the owner
  EXPECT_EQ(ev.flags, uint32_t(abi::kEqRedirected));
  EXPECT_EQ(ev.redirect_id, 42u);
  EXPECT_EQ(ev.offset, 0x1100u);
  // One shot: the next one lands in the export; cancelling finds nothing left.
  CHECK_EQ(g_a.run(send(kVaA + 5, abi::proxy_base(0) + 0x1100, 0x800)).status, abi::kCqOk);
  EXPECT(memcmp(g_b.base + kHeap + 0x10000 + 0x1100, g_a.base + kHeap + 5, 0x800) == 0);
  r.length = 0;
  abi::CqEntry c = g_b.run(r);
  EXPECT_EQ(c.status, abi::kCqOk);
  EXPECT_EQ(c.result, 0u);
  // Only the export's owner may redirect it, only inside it, only into its own memory.
  r.length = 0x100;
  EXPECT_EQ(g_a.run(r).status, abi::kCqBadKey);
  r.dst_addr = 0x1ff01;  // one byte past the export
  EXPECT_EQ(g_b.run(r).status, abi::kCqBadLength);
  r.dst_addr = 0;
  r.src_addr = 0x1234'0000;
  EXPECT_EQ(g_b.run(r).status, abi::kCqUnregistered);
  r.src_addr = kVaB + 0x40000;
  c = g_b.run(r);
  EXPECT_EQ(c.status, abi::kCqOk);
  r.length = 0;
  c = g_b.run(r);
  EXPECT_EQ(c.result, 1u);  // cancelled unused
}

// Every arriving chunk is checked. A send's later chunks reuse the
// translation its first chunk took while nothing behind it changes (a TLB of
// the incoming page table); a change between two chunks -- a revoked grant,
// a deregistration -- stops the very next one, and a chunk outside the
// export is refused mid-send as at its start.
FW_TEST(a_change_between_two_chunks_of_a_send_stops_the_next_one) {
  constexpr uint32_t kSrc = 3;  // another node's process, as the wire brings it
  constexpr uint16_t kSrcSlot = 5;
  constexpr uint32_t kExp = 0x8000;
  uint32_t key = g_b.reg(kHeap + 0x50000, kExp, abi::kAccessLocal | abi::kAccessRemoteWrite, kVaB + 0x50000);
  uint64_t handle = 0;
  CHECK_EQ(ctrl(abi::kCtrlExport, 1, {0, key, kVaB + 0x50000, kExp, 0, 0, 0, 0, {}}, &handle), abi::kCtrlOk);
  CHECK_EQ(ctrl(abi::kCtrlGrant, 0, {uint32_t(handle), 0, 0, 0, kSrc, kSrcSlot, 0, 0, {}}), abi::kCtrlOk);
  static uint8_t chunk[abi::kMtu];
  for (uint32_t i = 0; i < sizeof chunk; ++i) chunk[i] = uint8_t(i * 7 + 3);
  auto place = [&](uint64_t op, uint64_t offset, uint8_t flags = 0) {
    abi::WireHeader h{};
    h.op = abi::kWireOpSend;
    h.flags = flags;
    h.dst_key = uint32_t(handle);
    h.src_slot = kSrcSlot;
    h.op_id = op;
    h.op_length = 4 * abi::kMtu;
    h.dst_addr = offset;
    h.payload_len = uint16_t(abi::kMtu);
    return lcp::vmmc_place(kSrc, h, chunk);
  };
  uint8_t* exp = g_b.base + kHeap + 0x50000;
  uint64_t violations = ctr(abi::kCtrVmmcViolations);
  CHECK_EQ(place(0x71, 0, abi::kWireFirst), abi::kCqOk);
  CHECK_EQ(place(0x71, abi::kMtu), abi::kCqOk);
  EXPECT(memcmp(exp, chunk, abi::kMtu) == 0 && memcmp(exp + abi::kMtu, chunk, abi::kMtu) == 0);
  // Past the export's end, mid-send: refused, nothing written.
  EXPECT_EQ(place(0x71, kExp - 100), abi::kCqRemoteProtection);
  // Another send from the same source is looked up afresh (and lands).
  CHECK_EQ(place(0x72, 2 * abi::kMtu), abi::kCqOk);
  // The grant is revoked between two chunks: the next one is refused.
  CHECK_EQ(ctrl(abi::kCtrlRevoke, 0, {uint32_t(handle), 0, 0, 0, kSrc, kSrcSlot, 0, 0, {}}), abi::kCtrlOk);
  memset(exp, 0, kExp);
  EXPECT_EQ(place(0x72, 3 * abi::kMtu), abi::kCqRemoteRevoked);
  // Granted again; the owner deregisters the memory under the export
  // between two chunks: the next one is refused.
  CHECK_EQ(ctrl(abi::kCtrlGrant, 0, {uint32_t(handle), 0, 0, 0, kSrc, kSrcSlot, 0, 0, {}}), abi::kCtrlOk);
  CHECK_EQ(place(0x73, 0, abi::kWireFirst), abi::kCqOk);
  abi::SqEntry d{};
  d.opcode = abi::kOpDeregister;
  d.src_key = key;
  CHECK_EQ(g_b.run(d).status, abi::kCqOk);
  memset(exp, 0, abi::kMtu);  // (the slot's memory; no registration names it now)
  EXPECT_EQ(place(0x73, abi::kMtu), abi::kCqRemoteRevoked);
  for (uint32_t i = 0; i < kExp; ++i) CHECK_EQ(exp[i], 0);
  EXPECT_EQ(ctr(abi::kCtrVmmcViolations), violations + 3);
  EXPECT_EQ(ctrl(abi::kCtrlUnexport, 0, {uint32_t(handle), 0, 0, 0, 0, 0, 0, 0, {}}), abi::kCtrlOk);
}

// One-packet sends (every message of a ping-pong) reuse the translation the
// last send from the same slot into the same export took, while nothing
// behind it changes: each still lands where it says, and a revoked grant,
// another sending slot or a redirection posted since is seen by the next.
FW_TEST(back_to_back_one_packet_sends_reuse_the_translation_until_the_tables_change) {
  constexpr uint32_t kSrc = 4;
  constexpr uint16_t kSrcSlot = 2;
  constexpr uint32_t kExp = 0x4000;
  uint32_t key = g_b.reg(kHeap + 0x60000, kExp, abi::kAccessLocal | abi::kAccessRemoteWrite, kVaB + 0x60000);
  uint32_t target = g_b.reg(kHeap + 0x68000, 0x1000, abi::kAccessLocal, kVaB + 0x68000);
  (void)target;
  uint64_t handle = 0;
  CHECK_EQ(ctrl(abi::kCtrlExport, 1, {0, key, kVaB + 0x60000, kExp, 0, 0, 0, 0, {}}, &handle), abi::kCtrlOk);
  CHECK_EQ(ctrl(abi::kCtrlGrant, 0, {uint32_t(handle), 0, 0, 0, kSrc, kSrcSlot, 0, 0, {}}), abi::kCtrlOk);
  uint8_t msg[64];
  uint64_t op = 0x100;
  auto send1 = [&](uint64_t offset, uint8_t fill, uint16_t slot = kSrcSlot) {
    memset(msg, fill, sizeof msg);
    abi::WireHeader h{};
    h.op = abi::kWireOpSend;
    h.flags = abi::kWireFirst | abi::kWireLast;
    h.dst_key = uint32_t(handle);
    h.src_slot = slot;
    h.op_id = ++op;
    h.op_length = sizeof msg;
    h.dst_addr = offset;
    h.payload_len = sizeof msg;
    uint8_t st = lcp::vmmc_place(kSrc, h, msg);
    lcp::vmmc_last(kSrc, h, st == abi::kCqOk);
    return st;
  };
  uint8_t* exp = g_b.base + kHeap + 0x60000;
  uint8_t* tgt = g_b.base + kHeap + 0x68000;
  for (uint32_t i = 0; i < 8; ++i) {
    CHECK_EQ(send1(i * 64, uint8_t(0x10 + i)), abi::kCqOk);
    for (uint32_t b = 0; b < 64; ++b) CHECK_EQ(exp[i * 64 + b], uint8_t(0x10 + i));
  }
  EXPECT_EQ(send1(kExp - 63, 0x77), abi::kCqRemoteProtection);  // one byte past the export's end
  EXPECT_EQ(exp[kExp - 1], 0);
  EXPECT_EQ(send1(0, 0x55, kSrcSlot + 1), abi::kCqRemoteRevoked);  // a slot with no grant, right after one with
  EXPECT_EQ(exp[0], 0x10);
  CHECK_EQ(send1(0, 0x20), abi::kCqOk);
  // A redirection posted for [0x800, 0x1000): a send beside it lands in the
  // export (and the redirection stays posted), the next inside it is redirected.
  abi::SqEntry r{};
  r.opcode = abi::kOpRedirect;
  r.dst_key = uint32_t(handle);
  r.dst_addr = 0x800;
  r.length = 0x800;
  r.src_addr = kVaB + 0x68000;
  r.src_key = 7;
  CHECK_EQ(g_b.run(r).status, abi::kCqOk);
  CHECK_EQ(send1(0x100, 0x30), abi::kCqOk);
  EXPECT_EQ(exp[0x100], 0x30);
  CHECK_EQ(send1(0x840, 0x31), abi::kCqOk);
  EXPECT_EQ(tgt[0x40], 0x31);
  EXPECT_EQ(exp[0x840], 0);
  abi::EqEntry ev{};
  while (g_b.event(ev)) {
  }
  // One shot: the next lands in the export again.
  CHECK_EQ(send1(0x840, 0x32), abi::kCqOk);
  EXPECT_EQ(exp[0x840], 0x32);
  EXPECT_EQ(tgt[0x40], 0x31);
  // The grant is revoked between two messages: the next is refused.
  CHECK_EQ(ctrl(abi::kCtrlRevoke, 0, {uint32_t(handle), 0, 0, 0, kSrc, kSrcSlot, 0, 0, {}}), abi::kCtrlOk);
  EXPECT_EQ(send1(0x200, 0x40), abi::kCqRemoteRevoked);
  EXPECT_EQ(exp[0x200], 0);
  CHECK_EQ(ctrl(abi::kCtrlUnexport, 0, {uint32_t(handle), 0, 0, 0, 0, 0, 0, 0, {}}), abi::kCtrlOk);
}

FW_TEST(revocation_unimport_and_detach_tear_down) {
  uint32_t self = core::status::block().node_id;
  CHECK_EQ(ctrl(abi::kCtrlRevoke, 0, {g_handle, 0, 0, 0, self, 0, 0, 0, {}}), abi::kCtrlOk);
  EXPECT_EQ(g_a.run(send(kVaA, abi::proxy_base(0), 8)).status, abi::kCqRemoteRevoked);
  CHECK_EQ(ctrl(abi::kCtrlGrant, 0, {g_handle, 0, 0, 0, self, 0, 0, 0, {}}), abi::kCtrlOk);
  EXPECT_EQ(g_a.run(send(kVaA, abi::proxy_base(0), 8)).status, abi::kCqOk);
  // The exporter's process goes: its exports go with its slot.
  lcp::slot_detach(g_t, 1);
  lcp::vmmc_slot_detached(1);
  EXPECT_EQ(g_a.run(send(kVaA, abi::proxy_base(0), 8)).status, abi::kCqRemoteRevoked);
  EXPECT_EQ(ctrl(abi::kCtrlUnexport, 0, {g_handle, 0, 0, 0, 0, 0, 0, 0, {}}), abi::kCtrlBadHandle);
  EXPECT_EQ(ctrl(abi::kCtrlUnimport, 0, {0, 0, 0, 0, 0, 0, 0, 0, {}}), abi::kCtrlOk);
  EXPECT_EQ(ctrl(abi::kCtrlUnimport, 0, {0, 0, 0, 0, 0, 0, 0, 0, {}}), abi::kCtrlBadHandle);
  EXPECT_EQ(g_a.run(send(kVaA, abi::proxy_base(0), 8)).status, abi::kCqNotImported);
}

// The verdicts a receiver owes its senders wait, per peer, for room on the
// link. This board has no link, so every verdict waits.
FW_TEST(verdicts_wait_per_peer_and_only_a_peer_past_its_operations_loses_any) {
  auto last_packet = [](uint32_t src, uint64_t op_id, uint8_t flags = 0) {
    abi::WireHeader h{};
    h.op = abi::kWireOpPut;
    h.flags = uint8_t(abi::kWireLast | flags);
    h.dst_slot = abi::kMaxSlots;  // refused: the verdict is an error, owed all the same
    h.op_id = op_id;
    lcp::remote_deliver(src, h, nullptr);
  };
  uint64_t dropped = ctr(abi::kCtrVerdictsDropped);
  // A peer with every operation it can have waiting for us: none is lost.
  for (uint32_t i = 0; i < lcp::kMaxPendingPerPeer; ++i) last_packet(3, 0x100 + i);
  EXPECT_EQ(lcp::remote_results_waiting(3), lcp::kMaxPendingPerPeer);
  EXPECT_EQ(ctr(abi::kCtrVerdictsDropped), dropped);
  // One more than it can have in flight: that one is dropped and counted...
  last_packet(3, 0x999);
  EXPECT_EQ(lcp::remote_results_waiting(3), lcp::kMaxPendingPerPeer);
  EXPECT_EQ(ctr(abi::kCtrVerdictsDropped), dropped + 1);
  // ... and another peer's verdicts still find room behind it.
  for (uint32_t i = 0; i < 5; ++i) last_packet(4, 0x200 + i);
  EXPECT_EQ(lcp::remote_results_waiting(4), 5u);
  EXPECT(lcp::remote_results_pending());
  // An abort: its sender let go of the operation, nothing is owed.
  last_packet(5, 0x300, abi::kWireAbort);
  EXPECT_EQ(lcp::remote_results_waiting(5), 0u);
  // A source no table can name is ignored.
  last_packet(abi::kMaxNodes, 1);
  EXPECT_EQ(lcp::remote_results_waiting(abi::kMaxNodes), 0u);
  // A lost peer's verdicts are moot; the others' stay.
  lcp::remote_peer_lost(3);
  EXPECT_EQ(lcp::remote_results_waiting(3), 0u);
  EXPECT_EQ(lcp::remote_results_waiting(4), 5u);
  lcp::remote_peer_lost(4);
  EXPECT(!lcp::remote_results_pending());
}
