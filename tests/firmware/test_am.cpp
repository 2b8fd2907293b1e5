// Active Messages in the firmware (firmware/lcp/am.cpp) on the real board:
// two slots of this NIC played by the test as processes. B configures AM
// endpoints (a receive ring in its registered memory, a segment registered
// RemoteWrite, a tag); A sends kOpAmSend messages (AmPrefix + message + Long
// payload built by hand in its registered memory) to B's endpoints. Sends
// between slots of one NIC take remote.cpp's local path (local_feed ->
// am_place / am_last), the same receiving checks as packets from the wire.
// What is checked, byte for byte: the ring entries (header and message), the
// segment (the Long and the bytes around it), the EQ, the sender's CQE -- and
// above all that a refused message writes nothing at all.
// The last tests bring the link up on the board's fabric and play a peer NIC
// (node 1, fabric_peer.h) that sends messages over the wire: there the link
// places a Long's packets into the segment itself (direct placement).
#include <string.h>

#include "core/board.h"
#include "core/status.h"
#include "fabric_peer.h"
#include "harness.h"
#include "lcp/am.h"
#include "lcp/control.h"
#include "lcp/remote.h"
#include "lcp/slots.h"
#include "lcp/vi.h"
#include "lcp/vmmc.h"
#include "link/link.h"
#include "slot_proc.h"
#include "ulnic/abi/am.h"

namespace abi = ulnic::abi;

namespace {

core::board::Board g_board;
lcp::SlotTable g_t;
constexpr uint64_t kNow = 1'000'000;

// Slot layout (both processes): rings in the first 64 KiB, then regions.
constexpr uint32_t kSq = 32, kCq = 64, kEq = 64;
constexpr fwtest::SlotShape kShape{0x1000, kSq, 0x2000, kCq, 0x3000, kEq, 0x10000};
constexpr uint64_t kSrcOff = 0x100000, kSrcLen = 0x200000;   // message sources: Local
constexpr uint64_t kRingOff = 0x400000, kRingLen = 0x800000; // receive rings: Local
constexpr uint64_t kRingStride = 0x12000;                    // small rings (<= 16 entries) in it
constexpr uint32_t kSmallRings = 0x300000 / kRingStride;     // below kBigRing
constexpr uint64_t kBigRing = 0x300000;                      // region offset of a 1024-entry ring
constexpr uint64_t kSegOff = 0x1000000;                      // segment: Local|RemoteWrite
constexpr uint32_t kSegLen = abi::kAmMaxLong + 0x2000;
constexpr uint64_t kLocOff = 0x1200000, kLocLen = 0x10000;   // Local only
constexpr uint64_t kVaA = 0x7000'0000, kVaB = 0x9000'0000;

constexpr uint8_t kReq = abi::kAmRequest;
constexpr uint64_t kTag = 0xdeadbeef'12345678ull;
constexpr uint8_t kFill = 0xee;  // untouched bytes of ring entries' message areas

uint32_t self_node() { return core::status::block().node_id; }
uint64_t ctr(abi::Counter c) { return core::status::block().counters[c]; }
uint64_t g_token = 0x1000;

uint8_t mbyte(uint8_t seed, uint32_t i) { return uint8_t(i * 131u + (i >> 9) + seed); }
uint8_t lbyte(uint8_t seed, uint32_t i) { return uint8_t(i * 37u + (i >> 10) * 11u + seed + 0x55); }
uint8_t sbyte(uint32_t i) { return uint8_t(i * 29u + (i >> 12) + 0x3c); }  // the segment's own bytes

struct Proc : fwtest::SlotProc {
  uint64_t va0 = 0;
  uint32_t src_key = 0, ring_key = 0, seg_key = 0, loc_key = 0;
  uint32_t next_ring = 0;

  uint64_t va(uint64_t off) const { return va0 + off; }
  uint32_t reg(uint64_t off, uint64_t len, uint32_t access) {
    abi::CqEntry c = run(fwtest::register_entry(off, uint32_t(len), access, va(off)));
    EXPECT_EQ(c.status, abi::kCqOk);
    return c.result;
  }
  void open(uint32_t k, uint64_t generation, uint64_t va_base) {
    va0 = va_base;
    next_ring = 0;
    map(g_t, kNow, k, kShape, 0x10000);
    EXPECT_EQ(attach(generation), abi::kCtrlOk);
    src_key = reg(kSrcOff, kSrcLen, abi::kAccessLocal);
    ring_key = reg(kRingOff, kRingLen, abi::kAccessLocal);
    seg_key = reg(kSegOff, kSegLen, abi::kAccessLocal | abi::kAccessRemoteWrite);
    loc_key = reg(kLocOff, kLocLen, abi::kAccessLocal);
  }
  void fill_segment() {
    for (uint32_t i = 0; i < kSegLen; ++i) base[kSegOff + i] = sbyte(i);
  }
  // The first segment byte that is not its own (kSegLen: none).
  uint32_t segment_changed_at() const {
    for (uint32_t i = 0; i < kSegLen; ++i)
      if (base[kSegOff + i] != sbyte(i)) return i;
    return kSegLen;
  }
  void drain() {
    abi::EqEntry ev;
    while (event(ev)) {
    }
    abi::CqEntry c;
    while (reap(c)) {
    }
  }
};

Proc g_a, g_b;  // a sends, b receives (and the other way for replies)

abi::SqEntry endpoint_entry(uint8_t ep, uint64_t ring_va, uint32_t ring_key, uint32_t entries, uint64_t tag,
                            uint32_t seg_key, uint64_t seg_va, uint64_t seg_len) {
  abi::SqEntry e{};
  e.opcode = abi::kOpAmEndpoint;
  e.dst_slot = ep;
  e.length = entries;
  e.src_addr = ring_va;
  e.src_key = ring_key;
  e.dst_addr = seg_va;
  e.dst_key = seg_key;
  e.reg_offset = seg_len;
  e.access = uint32_t(tag);
  e.src_slot = uint32_t(tag >> 32);
  e.user_data = ++g_token;
  return e;
}

abi::SqEntry close_entry(uint16_t ep) {
  abi::SqEntry e{};
  e.opcode = abi::kOpAmEndpoint;
  e.flags = abi::kSqAmClose;
  e.dst_slot = ep;
  e.user_data = ++g_token;
  return e;
}

// A receive ring of p's, and the endpoint it feeds.
struct Ring {
  Proc* p = nullptr;
  uint8_t ep = 0;
  uint64_t off = 0;  // slot offset of its control block
  uint32_t entries = 0;
  uint64_t done = 0;  // what the test has consumed (sane values only)

  abi::AmRingControl* ctrl() const { return reinterpret_cast<abi::AmRingControl*>(p->base + off); }
  abi::AmRxEntry* entry(uint64_t n) const {
    return reinterpret_cast<abi::AmRxEntry*>(p->base + off + sizeof(abi::AmRingControl) +
                                             (n & (entries - 1)) * abi::kAmEntryBytes);
  }
  uint8_t* msg(uint64_t n) const { return reinterpret_cast<uint8_t*>(entry(n)) + sizeof(abi::AmRxEntry); }
  // The host says it is done up to `upto`; the message areas of entries it
  // is done with go back to kFill (test bookkeeping: a shorter message
  // later in the entry shows every byte it wrote and no more).
  void consume(uint64_t upto) {
    if (upto > done && upto - done <= entries) {
      for (uint64_t n = done; n < upto; ++n) memset(msg(n), kFill, abi::kAmMaxMessage);
      done = upto;
    }
    __atomic_store_n(&ctrl()->consumed, upto, __ATOMIC_RELEASE);
  }
  // No entry has been published, no message byte written.
  bool untouched() const {
    for (uint32_t n = 0; n < entries; ++n) {
      const uint8_t* h = reinterpret_cast<const uint8_t*>(entry(n));
      for (uint32_t i = 0; i < sizeof(abi::AmRxEntry); ++i)
        if (h[i]) return false;
      for (uint32_t i = 0; i < abi::kAmMaxMessage; ++i)
        if (msg(n)[i] != kFill) return false;
    }
    return true;
  }
};

// A fresh ring (control and entry headers zero, message areas kFill) of
// `entries`, configured as endpoint `ep` of p with `tag` (and p's segment).
Ring new_ring(Proc& p, uint8_t ep, uint32_t entries, uint64_t tag, bool segment = true) {
  Ring r;
  r.p = &p;
  r.ep = ep;
  r.entries = entries;
  if (!EXPECT(p.next_ring < kSmallRings)) return r;
  r.off = kRingOff + uint64_t(p.next_ring++) * kRingStride;
  memset(p.base + r.off, 0, sizeof(abi::AmRingControl));
  for (uint32_t n = 0; n < entries; ++n) {
    memset(r.entry(n), 0, sizeof(abi::AmRxEntry));
    memset(r.msg(n), kFill, abi::kAmMaxMessage);
  }
  abi::CqEntry c = p.run(endpoint_entry(ep, p.va(r.off), p.ring_key, entries, tag, segment ? p.seg_key : 0,
                                        segment ? p.va(kSegOff) : 0, segment ? kSegLen : 0));
  EXPECT_EQ(c.status, abi::kCqOk);
  EXPECT_EQ(c.opcode, abi::kOpAmEndpoint);
  return r;
}

abi::AmPrefix prefix(uint8_t dst_ep, uint32_t msg_len, uint64_t tag, uint8_t flags = kReq, uint8_t src_ep = 0,
                     uint32_t long_len = 0, uint32_t long_offset = 0) {
  abi::AmPrefix p{};
  p.tag = tag;
  p.msg_len = msg_len;
  p.long_len = long_len;
  p.long_offset = long_offset;
  p.dst_ep = dst_ep;
  p.src_ep = src_ep;
  p.flags = flags;
  return p;
}

// Writes prefix, message and Long (after the message padded to 8 bytes,
// abi::am_long_start) into `from`'s source region at src_off (message bytes
// mbyte(seed), Long bytes lbyte(seed)); returns the bytes.
uint32_t build(Proc& from, const abi::AmPrefix& p, uint8_t seed, uint64_t src_off = 0) {
  uint8_t* at = from.base + kSrcOff + src_off;
  memcpy(at, &p, sizeof p);
  for (uint32_t i = 0; i < p.msg_len && sizeof p + i < kSrcLen - src_off; ++i) at[sizeof p + i] = mbyte(seed, i);
  const uint64_t long_start = abi::am_long_start(p.msg_len);
  for (uint32_t i = 0; i < p.long_len && long_start + i < kSrcLen - src_off; ++i) at[long_start + i] = lbyte(seed, i);
  return uint32_t(abi::am_send_bytes(p.msg_len, p.long_len));
}

abi::SqEntry send_entry(Proc& from, uint32_t length, uint16_t dst_slot, uint64_t src_off = 0) {
  abi::SqEntry e{};
  e.opcode = abi::kOpAmSend;
  e.length = length;
  e.src_addr = from.va(kSrcOff + src_off);
  e.src_key = from.src_key;
  e.dst_node = self_node();
  e.dst_slot = dst_slot;
  e.user_data = ++g_token;
  return e;
}

// Builds and sends; returns the sender's completion (its user_data and
// opcode checked, result = length exactly when kCqOk).
abi::CqEntry send(Proc& from, const Proc& to, const abi::AmPrefix& p, uint8_t seed) {
  uint32_t len = build(from, p, seed);
  abi::SqEntry e = send_entry(from, len, uint16_t(to.slot));
  abi::CqEntry c = from.run(e);
  EXPECT_EQ(c.user_data, e.user_data);
  EXPECT_EQ(c.opcode, abi::kOpAmSend);
  EXPECT_EQ(c.result, c.status == abi::kCqOk ? len : 0u);
  return c;
}

// Entry number n of r holds message p (seed) from slot src_slot of node
// src_node, byte for byte, and nothing past its message is written.
bool holds_from(const Ring& r, uint64_t n, const abi::AmPrefix& p, uint8_t seed, uint32_t src_node,
                uint32_t src_slot) {
  const abi::AmRxEntry* e = r.entry(n);
  bool ok = EXPECT_EQ(e->seq, uint32_t(n + 1));
  ok &= EXPECT_EQ(e->len, p.msg_len);
  ok &= EXPECT_EQ(e->src_node, uint16_t(src_node));
  ok &= EXPECT_EQ(e->src_slot, uint16_t(src_slot));
  ok &= EXPECT_EQ(e->src_ep, p.src_ep);
  ok &= EXPECT_EQ(e->flags, p.flags);
  ok &= EXPECT_EQ(e->reserved0, 0u);
  ok &= EXPECT_EQ(e->long_len, p.long_len);
  if (p.long_len) ok &= EXPECT_EQ(e->long_offset, p.long_offset);
  for (uint32_t i = 0; i < sizeof e->reserved; ++i)
    if (!EXPECT_EQ(e->reserved[i], 0u)) return false;
  const uint8_t* m = r.msg(n);
  for (uint32_t i = 0; i < p.msg_len; ++i)
    if (!EXPECT_EQ(m[i], mbyte(seed, i))) {
      fwtest::note("entry %lu: message byte %u", (unsigned long)n, i);
      return false;
    }
  for (uint32_t i = p.msg_len; i < abi::kAmMaxMessage; ++i)
    if (!EXPECT_EQ(m[i], kFill)) {
      fwtest::note("entry %lu: byte %u past the message written", (unsigned long)n, i);
      return false;
    }
  return ok;
}
// ... from `from`, a process on this NIC.
bool holds(const Ring& r, uint64_t n, const abi::AmPrefix& p, uint8_t seed, const Proc& from) {
  return holds_from(r, n, p, seed, self_node(), from.slot);
}

// The Long of p (seed) is in `to`'s segment at its offset -- its first
// `upto` bytes only, if given; every other segment byte is the segment's
// own. Then the segment is put back.
bool long_landed(Proc& to, const abi::AmPrefix& p, uint8_t seed, uint32_t upto = ~0u) {
  bool ok = true;
  const uint32_t len = p.long_len < upto ? p.long_len : upto;
  for (uint32_t i = 0; i < kSegLen; ++i) {
    uint8_t want = i >= p.long_offset && i - p.long_offset < len ? lbyte(seed, i - p.long_offset) : sbyte(i);
    if (to.base[kSegOff + i] != want) {
      EXPECT_EQ(to.base[kSegOff + i], want);
      fwtest::note("segment byte %u (long at %u, %u of its %u bytes)", i, p.long_offset, len, p.long_len);
      ok = false;
      break;
    }
  }
  to.fill_segment();
  return ok;
}

// One kEqAmArrival for endpoint ep, `len` message bytes from node src_node.
bool arrival(Proc& p, uint8_t ep, uint32_t len, uint32_t src_node = self_node()) {
  abi::EqEntry ev{};
  if (!EXPECT(p.event(ev))) return false;
  bool ok = EXPECT_EQ(ev.type, uint32_t(abi::kEqAmArrival));
  ok &= EXPECT_EQ(ev.export_handle, uint32_t(ep));
  ok &= EXPECT_EQ(ev.src_node, uint16_t(src_node));
  ok &= EXPECT_EQ(ev.length, len);
  return ok;
}

bool no_event(Proc& p) {
  abi::EqEntry ev{};
  return EXPECT(!p.event(ev));
}

// A refused message: the sender's status, nothing written anywhere.
void refused(const Ring& r, const abi::AmPrefix& p, abi::CqStatus want, uint8_t seed = 9) {
  uint64_t before = ctr(abi::kCtrAmRefused), msgs = ctr(abi::kCtrAmMessages);
  abi::CqEntry c = send(g_a, *r.p, p, seed);
  EXPECT_EQ(c.status, want);
  EXPECT_EQ(ctr(abi::kCtrAmRefused), before + 1);
  EXPECT_EQ(ctr(abi::kCtrAmMessages), msgs);
  EXPECT(r.untouched());
  EXPECT_EQ(r.p->segment_changed_at(), kSegLen);
  no_event(*r.p);
}

// The next good message lands in entry n of r.
void lands(Ring& r, uint64_t n, uint8_t seed = 0x42, uint64_t tag = kTag) {
  abi::AmPrefix p = prefix(r.ep, 200, tag, kReq, 1);
  CHECK_EQ(send(g_a, *r.p, p, seed).status, abi::kCqOk);
  EXPECT(holds(r, n, p, seed, g_a));
  arrival(*r.p, r.ep, 200);
}

// AM-2 replies (abi/am.h): an endpoint takes a reply only from an endpoint
// it has sent a request to that is not answered yet. A's endpoint kSinkEp
// takes B's requests (any tag): solicit() has B's endpoint ask it once, so
// that a reply A sends from kSinkEp is taken.
constexpr uint8_t kSinkEp = 7;

Ring& sink() {
  static Ring r;
  static uint64_t generation = 0;
  if (generation != g_t.slots[g_a.slot].generation) {  // (re)opened: a new endpoint
    r = new_ring(g_a, kSinkEp, 16, 1, false);
    generation = g_t.slots[g_a.slot].generation;
  }
  return r;
}

// `from`'s endpoint from_ep sends a request to ring `to`'s endpoint; the
// entry it takes there is consumed and the event taken.
void solicit(Proc& from, uint8_t from_ep, Ring& to) {
  abi::AmPrefix p = prefix(to.ep, 8, 0x5011c17, kReq, from_ep);
  CHECK_EQ(send(from, *to.p, p, 0x50).status, abi::kCqOk);
  EXPECT_EQ(to.entry(to.done)->seq, uint32_t(to.done + 1));
  to.consume(to.done + 1);
  abi::EqEntry ev;
  while (to.p->event(ev)) {
  }
}
void solicit_sink(Proc& from, uint8_t from_ep) { solicit(from, from_ep, sink()); }

// A refused message to r, whose next entry is n: the sender's status, the
// refusal counted, entry n not taken, no event.
void refused_at(const Ring& r, uint64_t n, const abi::AmPrefix& p, abi::CqStatus want, uint8_t seed = 9) {
  uint64_t before = ctr(abi::kCtrAmRefused), msgs = ctr(abi::kCtrAmMessages);
  abi::CqEntry c = send(g_a, *r.p, p, seed);
  EXPECT_EQ(c.status, want);
  EXPECT_EQ(ctr(abi::kCtrAmRefused), before + 1);
  EXPECT_EQ(ctr(abi::kCtrAmMessages), msgs);
  EXPECT_EQ(r.entry(n)->seq, 0u);
  no_event(*r.p);
}

}  // namespace

FW_TEST(setup_two_slots) {
  core::board::discover(g_board);
  CHECK(g_board.num_slots >= 3);
  CHECK(g_board.slots[0].size >= kSegOff + kSegLen + 0x100000);
  lcp::slots_init(g_t, g_board, 1717);
  lcp::remote_init(g_t);
  lcp::vmmc_init(g_t);
  lcp::vi_init(g_t);
  lcp::am_init(g_t);
  g_a.open(0, 1, kVaA);
  g_b.open(1, 2, kVaB);
  g_a.fill_segment();
  g_b.fill_segment();
}

FW_TEST(endpoint_descriptors_are_checked) {
  Proc& b = g_b;
  uint64_t big = b.va(kRingOff + kBigRing);
  auto ep = [&](uint8_t index, uint32_t entries) {
    return endpoint_entry(index, big, b.ring_key, entries, kTag, b.seg_key, b.va(kSegOff), kSegLen);
  };
  // Entries: a power of 2, 1..kAmMaxRingEntries.
  EXPECT_EQ(b.run(ep(0, 0)).status, abi::kCqBadLength);
  EXPECT_EQ(b.run(ep(0, 3)).status, abi::kCqBadLength);
  EXPECT_EQ(b.run(ep(0, 1000)).status, abi::kCqBadLength);
  EXPECT_EQ(b.run(ep(0, abi::kAmMaxRingEntries + 1)).status, abi::kCqBadLength);
  EXPECT_EQ(b.run(ep(0, abi::kAmMaxRingEntries * 2)).status, abi::kCqBadLength);
  EXPECT_EQ(b.run(ep(0, 0x80000000u)).status, abi::kCqBadLength);
  CHECK_EQ(b.run(ep(0, abi::kAmMaxRingEntries)).status, abi::kCqOk);  // 4.25 MiB: fits the registration
  CHECK_EQ(b.run(close_entry(0)).status, abi::kCqOk);
  // The ring: registered, Local, wholly inside its registration.
  abi::SqEntry e = ep(0, 4);
  e.src_key = b.ring_key ^ 0x100;
  EXPECT_EQ(b.run(e).status, abi::kCqBadKey);
  e.src_key = 0;
  EXPECT_EQ(b.run(e).status, abi::kCqBadKey);
  e.src_key = 0x77;  // a key never handed out
  EXPECT_EQ(b.run(e).status, abi::kCqBadKey);
  e = ep(0, 4);
  e.src_addr = b.va(0x8000);  // not registered memory (the slot's ring area)
  EXPECT_EQ(b.run(e).status, abi::kCqBadLength);
  e = ep(0, 8);
  e.src_addr = b.va(kRingOff + kRingLen) - sizeof(abi::AmRingControl) - 7 * abi::kAmEntryBytes;  // one entry short
  EXPECT_EQ(b.run(e).status, abi::kCqBadLength);
  e = ep(0, abi::kAmMaxRingEntries);
  e.src_addr = b.va(kRingOff + kRingLen - 0x400000);  // 4 MiB left: a 1024-entry ring runs off
  EXPECT_EQ(b.run(e).status, abi::kCqBadLength);
  // ... and aligned for its words (found by tests/fuzz: the NIC read the
  // count and wrote the entries misaligned).
  e = ep(0, 4);
  e.src_addr = big + 4;
  EXPECT_EQ(b.run(e).status, abi::kCqBadAddress);
  // The segment: RemoteWrite, inside its registration.
  e = ep(0, 4);
  e.dst_key = b.loc_key;
  e.dst_addr = b.va(kLocOff);
  e.reg_offset = kLocLen;
  EXPECT_EQ(b.run(e).status, abi::kCqProtection);
  e = ep(0, 4);
  e.reg_offset = kSegLen + 1;
  EXPECT_EQ(b.run(e).status, abi::kCqBadLength);
  e = ep(0, 4);
  e.dst_addr = b.va(kSegOff) + 1;
  EXPECT_EQ(b.run(e).status, abi::kCqBadLength);
  e = ep(0, 4);
  e.dst_key = b.seg_key ^ 0x100;
  EXPECT_EQ(b.run(e).status, abi::kCqBadKey);
  // The index, and fields that must be zero.
  EXPECT_EQ(b.run(ep(abi::kMaxAmEndpoints, 4)).status, abi::kCqBadOpcode);
  EXPECT_EQ(b.run(ep(255, 4)).status, abi::kCqBadOpcode);
  e = ep(0, 4);
  e.dst_slot = 0xffff;
  EXPECT_EQ(b.run(e).status, abi::kCqBadOpcode);
  EXPECT_EQ(b.run(close_entry(abi::kMaxAmEndpoints)).status, abi::kCqBadOpcode);
  e = ep(0, 4);
  e.dst_node = 1;
  EXPECT_EQ(b.run(e).status, abi::kCqBadOpcode);
  e = ep(0, 4);
  e.flags = abi::kSqNotify;
  EXPECT_EQ(b.run(e).status, abi::kCqBadOpcode);
  e = ep(0, 4);
  e.reserved = 1;
  EXPECT_EQ(b.run(e).status, abi::kCqBadOpcode);
  // None of that configured anything: endpoint 0 does not exist.
  abi::AmPrefix p = prefix(0, 16, kTag);
  EXPECT_EQ(send(g_a, b, p, 1).status, abi::kCqAmBadEndpoint);
  EXPECT_EQ(b.segment_changed_at(), kSegLen);
  no_event(b);
  // A refused reconfiguration leaves a configured endpoint as it was.
  Ring r = new_ring(b, 1, 4, kTag);
  e = endpoint_entry(1, b.va(kRingOff + kBigRing), b.ring_key, 4, 5, b.loc_key, b.va(kLocOff), kLocLen);
  EXPECT_EQ(b.run(e).status, abi::kCqProtection);
  lands(r, 0);
  EXPECT_EQ(b.run(close_entry(1)).status, abi::kCqOk);
  // Closing a closed endpoint is fine.
  EXPECT_EQ(b.run(close_entry(1)).status, abi::kCqOk);
}

FW_TEST(a_message_lands_in_entry_0_byte_for_byte) {
  Ring r = new_ring(g_b, 0, 8, kTag);
  uint64_t msgs = ctr(abi::kCtrAmMessages);
  abi::AmPrefix p = prefix(0, 100, kTag, kReq, 3);
  abi::CqEntry c = send(g_a, g_b, p, 7);
  CHECK_EQ(c.status, abi::kCqOk);
  EXPECT_EQ(c.result, 64u + 100u);
  EXPECT_EQ(ctr(abi::kCtrAmMessages), msgs + 1);
  EXPECT(holds(r, 0, p, 7, g_a));
  EXPECT_EQ(r.entry(1)->seq, 0u);
  EXPECT_EQ(r.msg(1)[0], kFill);
  EXPECT_EQ(r.ctrl()->consumed, 0u);  // the host's word: never written by the NIC
  arrival(g_b, 0, 100);
  no_event(g_b);
  no_event(g_a);
  EXPECT_EQ(g_b.segment_changed_at(), kSegLen);
  // A one-byte message, a reply, from another endpoint.
  solicit_sink(g_b, 0);  // a reply: B asked A's endpoint 7
  p = prefix(0, 1, 0, 0, kSinkEp);
  CHECK_EQ(send(g_a, g_b, p, 8).status, abi::kCqOk);
  EXPECT(holds(r, 1, p, 8, g_a));
  arrival(g_b, 0, 1);
  EXPECT_EQ(r.entry(2)->seq, 0u);
}

FW_TEST(the_largest_message_spans_two_packets) {
  Ring r = new_ring(g_b, 0, 4, kTag);
  abi::AmPrefix p = prefix(0, abi::kAmMaxMessage, kTag, kReq, 2);
  CHECK_EQ(send(g_a, g_b, p, 0x31).status, abi::kCqOk);
  EXPECT(holds(r, 0, p, 0x31, g_a));
  // The next entry's header is right behind the message: untouched.
  const uint8_t* next = reinterpret_cast<const uint8_t*>(r.entry(1));
  for (uint32_t i = 0; i < sizeof(abi::AmRxEntry); ++i) EXPECT_EQ(next[i], 0u);
  arrival(g_b, 0, abi::kAmMaxMessage);
  // 4096 - 64: exactly one packet; 4097 - 64: the message ends one byte into the second.
  p = prefix(0, abi::kMtu - 64, kTag, kReq, 2);
  CHECK_EQ(send(g_a, g_b, p, 0x32).status, abi::kCqOk);
  EXPECT(holds(r, 1, p, 0x32, g_a));
  arrival(g_b, 0, abi::kMtu - 64);
  p = prefix(0, abi::kMtu - 63, kTag, kReq, 2);
  CHECK_EQ(send(g_a, g_b, p, 0x33).status, abi::kCqOk);
  EXPECT(holds(r, 2, p, 0x33, g_a));
  arrival(g_b, 0, abi::kMtu - 63);
}

FW_TEST(a_long_lands_at_its_offset_in_the_segment) {
  Ring r = new_ring(g_b, 0, 4, kTag);
  abi::AmPrefix p = prefix(0, 40, kTag, kReq, 1, 3000, 1234);
  CHECK_EQ(send(g_a, g_b, p, 0x50).status, abi::kCqOk);
  EXPECT(holds(r, 0, p, 0x50, g_a));
  EXPECT(long_landed(g_b, p, 0x50));
  arrival(g_b, 0, 40);
  // A Long whose message fills its first packet exactly, then the payload.
  p = prefix(0, abi::kMtu - 64, kTag, kReq, 1, 5000, 77);
  CHECK_EQ(send(g_a, g_b, p, 0x51).status, abi::kCqOk);
  EXPECT(holds(r, 1, p, 0x51, g_a));
  EXPECT(long_landed(g_b, p, 0x51));
  arrival(g_b, 0, abi::kMtu - 64);
  // Ending exactly at the end of the segment; one byte at its very start.
  p = prefix(0, 9, kTag, kReq, 1, 4321, kSegLen - 4321);
  CHECK_EQ(send(g_a, g_b, p, 0x52).status, abi::kCqOk);
  EXPECT(holds(r, 2, p, 0x52, g_a));
  EXPECT(long_landed(g_b, p, 0x52));
  p = prefix(0, 9, kTag, kReq, 1, 1, 0);
  CHECK_EQ(send(g_a, g_b, p, 0x53).status, abi::kCqOk);
  EXPECT(holds(r, 3, p, 0x53, g_a));
  EXPECT(long_landed(g_b, p, 0x53));
  g_b.drain();
}

FW_TEST(a_100k_long_spans_many_packets) {
  Ring r = new_ring(g_b, 0, 4, kTag);
  abi::AmPrefix p = prefix(0, 333, kTag, kReq, 4, 100 * 1024, 0x3001);
  CHECK_EQ(send(g_a, g_b, p, 0x60).status, abi::kCqOk);
  EXPECT(holds(r, 0, p, 0x60, g_a));
  EXPECT(long_landed(g_b, p, 0x60));
  arrival(g_b, 0, 333);
  no_event(g_b);
}

FW_TEST(a_long_of_exactly_max_long) {
  Ring r = new_ring(g_b, 0, 4, kTag);
  abi::AmPrefix p = prefix(0, abi::kAmMaxMessage, kTag, kReq, 5, abi::kAmMaxLong, 0x1000);
  CHECK_EQ(send(g_a, g_b, p, 0x70).status, abi::kCqOk);
  EXPECT(holds(r, 0, p, 0x70, g_a));
  EXPECT(long_landed(g_b, p, 0x70));
  arrival(g_b, 0, abi::kAmMaxMessage);
  // The whole segment but nothing more: the bytes before and after are checked above.
  p = prefix(0, 1, kTag, kReq, 5, abi::kAmMaxLong, 0x2000);
  CHECK_EQ(send(g_a, g_b, p, 0x71).status, abi::kCqOk);
  EXPECT(holds(r, 1, p, 0x71, g_a));
  EXPECT(long_landed(g_b, p, 0x71));
  arrival(g_b, 0, 1);
}

FW_TEST(no_such_endpoint_is_refused_and_writes_nothing) {
  Ring r = new_ring(g_b, 0, 4, kTag);
  refused(r, prefix(5, 64, kTag), abi::kCqAmBadEndpoint);                      // never configured
  refused(r, prefix(abi::kMaxAmEndpoints, 64, kTag), abi::kCqAmBadEndpoint);   // no such index
  refused(r, prefix(255, 64, kTag, kReq, 0, 100, 0), abi::kCqAmBadEndpoint);
  // A closed endpoint.
  Ring closed = new_ring(g_b, 2, 4, kTag);
  CHECK_EQ(g_b.run(close_entry(2)).status, abi::kCqOk);
  refused(r, prefix(2, 64, kTag), abi::kCqAmBadEndpoint);
  EXPECT(closed.untouched());
  // A slot nobody attached (no process: unreachable, as for VMMC); a slot
  // index that cannot be.
  abi::AmPrefix p = prefix(0, 64, kTag);
  uint32_t len = build(g_a, p, 3);
  abi::CqEntry c = g_a.run(send_entry(g_a, len, 2));
  EXPECT_EQ(c.status, abi::kCqRemoteBadSlot);
  c = g_a.run(send_entry(g_a, len, abi::kMaxSlots));
  EXPECT_EQ(c.status, abi::kCqBadOpcode);
  EXPECT(r.untouched());
  no_event(g_b);
  // A prefix with any reserved byte set names no endpoint (the receiver
  // checks them as five words: the first and last byte of each).
  for (uint32_t i = 0; i < sizeof p.reserved; i += (i % 8 == 0 ? 7 : 1)) {
    abi::AmPrefix bad = prefix(0, 64, kTag);
    bad.reserved[i] = uint8_t(0x80 >> (i % 8));
    refused(r, bad, abi::kCqAmBadEndpoint);
  }
  lands(r, 0);
}

FW_TEST(tags_are_checked_on_requests_only) {
  Ring r = new_ring(g_b, 0, 4, kTag);
  refused(r, prefix(0, 64, kTag + 1), abi::kCqAmBadTag);
  refused(r, prefix(0, 64, kTag ^ (1ull << 40)), abi::kCqAmBadTag);  // the tag's high half counts
  refused(r, prefix(0, 64, uint32_t(kTag)), abi::kCqAmBadTag);
  refused(r, prefix(0, 64, 1), abi::kCqAmBadTag);  // AM_ALL is no wildcard on the sending side
  refused(r, prefix(0, 64, 0), abi::kCqAmBadTag);
  refused(r, prefix(0, 64, kTag + 1, kReq, 0, 100, 0), abi::kCqAmBadTag);  // a Long too
  // The same message as a reply (to a request of B's) passes: it lands in entry 0.
  solicit_sink(g_b, 0);
  abi::AmPrefix p = prefix(0, 64, kTag + 1, 0, kSinkEp);
  CHECK_EQ(send(g_a, g_b, p, 0x11).status, abi::kCqOk);
  EXPECT(holds(r, 0, p, 0x11, g_a));
  arrival(g_b, 0, 64);
  lands(r, 1);
  // AM_ALL (1) takes every tag; AM_NONE (0) no request.
  Ring all = new_ring(g_b, 1, 8, 1);
  uint64_t tags[] = {0, 1, 5, kTag, ~0ull};
  for (uint32_t i = 0; i < 5; ++i) {
    p = prefix(1, 10 + i, tags[i]);
    CHECK_EQ(send(g_a, g_b, p, uint8_t(i)).status, abi::kCqOk);
    EXPECT(holds(all, i, p, uint8_t(i), g_a));
    arrival(g_b, 1, 10 + i);
  }
  Ring none = new_ring(g_b, 2, 4, 0);
  refused(none, prefix(2, 64, 0), abi::kCqAmBadTag);
  refused(none, prefix(2, 64, 1), abi::kCqAmBadTag);
  refused(none, prefix(2, 64, kTag), abi::kCqAmBadTag);
  solicit_sink(g_b, 2);
  p = prefix(2, 64, 0, 0, kSinkEp);
  CHECK_EQ(send(g_a, g_b, p, 0x12).status, abi::kCqOk);
  EXPECT(holds(none, 0, p, 0x12, g_a));
  arrival(g_b, 2, 64);
  // Close them: later tests reuse the indices.
  EXPECT_EQ(g_b.run(close_entry(1)).status, abi::kCqOk);
  EXPECT_EQ(g_b.run(close_entry(2)).status, abi::kCqOk);
}

FW_TEST(a_full_ring_refuses_until_the_host_consumes) {
  Ring r = new_ring(g_b, 0, 4, kTag);
  abi::AmPrefix ps[4];
  for (uint32_t i = 0; i < 4; ++i) {
    ps[i] = prefix(0, 100 + i, kTag, kReq, uint8_t(i));
    CHECK_EQ(send(g_a, g_b, ps[i], uint8_t(0x20 + i)).status, abi::kCqOk);
    arrival(g_b, 0, 100 + i);
  }
  uint64_t refused_before = ctr(abi::kCtrAmRefused);
  abi::AmPrefix p = prefix(0, 500, kTag);
  EXPECT_EQ(send(g_a, g_b, p, 0x30).status, abi::kCqAmCongestion);
  solicit_sink(g_b, 0);
  p = prefix(0, 50, kTag, 0, kSinkEp, 200, 0);  // replies and Longs too
  EXPECT_EQ(send(g_a, g_b, p, 0x30).status, abi::kCqAmCongestion);
  EXPECT_EQ(ctr(abi::kCtrAmRefused), refused_before + 2);
  for (uint32_t i = 0; i < 4; ++i) EXPECT(holds(r, i, ps[i], uint8_t(0x20 + i), g_a));  // nothing overwritten
  EXPECT_EQ(g_b.segment_changed_at(), kSegLen);
  no_event(g_b);
  // The host is done with entry 0: one more fits, in entry 0, as number 4.
  r.consume(1);
  p = prefix(0, 77, kTag, kReq, 9);
  CHECK_EQ(send(g_a, g_b, p, 0x34).status, abi::kCqOk);
  EXPECT(holds(r, 4, p, 0x34, g_a));
  EXPECT_EQ(r.entry(4)->seq, 5u);
  arrival(g_b, 0, 77);
  EXPECT_EQ(send(g_a, g_b, prefix(0, 5, kTag), 0x35).status, abi::kCqAmCongestion);
  EXPECT(holds(r, 1, ps[1], 0x21, g_a));
  // All consumed: three more fit, the fourth does not.
  r.consume(5);
  for (uint32_t i = 5; i < 8; ++i) {
    p = prefix(0, 10 * i, kTag, kReq, uint8_t(i));
    CHECK_EQ(send(g_a, g_b, p, uint8_t(i)).status, abi::kCqOk);
    EXPECT(holds(r, i, p, uint8_t(i), g_a));
    arrival(g_b, 0, 10 * i);
  }
  CHECK_EQ(send(g_a, g_b, prefix(0, 11, kTag), 0x36).status, abi::kCqOk);
  arrival(g_b, 0, 11);
  EXPECT_EQ(send(g_a, g_b, prefix(0, 11, kTag), 0x37).status, abi::kCqAmCongestion);
  no_event(g_b);
}

FW_TEST(long_bounds_are_checked_against_the_segment) {
  Ring r = new_ring(g_b, 0, 4, kTag);
  refused(r, prefix(0, 64, kTag, kReq, 0, 1, kSegLen + 1), abi::kCqAmBadSegOffset);
  refused(r, prefix(0, 64, kTag, kReq, 0, 100, 0xffffffffu), abi::kCqAmBadSegOffset);
  refused(r, prefix(0, 64, kTag, kReq, 0, 1, kSegLen), abi::kCqAmBadLength);  // starts at the end
  refused(r, prefix(0, 64, kTag, kReq, 0, 11, kSegLen - 10), abi::kCqAmBadLength);
  refused(r, prefix(0, 64, kTag, kReq, 0, abi::kAmMaxLong, 0x2001), abi::kCqAmBadLength);
  solicit_sink(g_b, 0);
  refused(r, prefix(0, 64, kTag, 0, kSinkEp, 8192, kSegLen - 4096), abi::kCqAmBadLength);  // a reply too
  lands(r, 0);
  // An endpoint without a segment takes no Long at all, but short messages.
  Ring bare = new_ring(g_b, 3, 4, kTag, false);
  refused(bare, prefix(3, 64, kTag, kReq, 0, 1, 0), abi::kCqAmBadSegOffset);
  solicit_sink(g_b, 3);
  refused(bare, prefix(3, 64, kTag, 0, kSinkEp, 4096, 0), abi::kCqAmBadSegOffset);
  abi::AmPrefix p = prefix(3, 64, kTag, kReq, 0, 0, 0x7777);  // a long_offset without a Long is nothing
  CHECK_EQ(send(g_a, g_b, p, 0x44).status, abi::kCqOk);
  EXPECT(holds(bare, 0, p, 0x44, g_a));
  arrival(g_b, 3, 64);
  EXPECT_EQ(g_b.run(close_entry(3)).status, abi::kCqOk);
}

FW_TEST(untrusted_send_descriptors_are_refused_without_a_crash) {
  Ring r = new_ring(g_b, 0, 4, kTag);
  auto status = [&](const abi::SqEntry& e) {
    abi::CqEntry c = g_a.run(e);
    EXPECT_EQ(c.user_data, e.user_data);
    EXPECT_EQ(c.result, 0u);
    return c.status;
  };
  auto check = [&](uint16_t got, abi::CqStatus want, int line) {
    if (!EXPECT_EQ(got, uint16_t(want))) fwtest::note("case at line %d", line);
    EXPECT(r.untouched());
    EXPECT_EQ(g_b.segment_changed_at(), kSegLen);
    no_event(g_b);
  };
  // The length disagrees with the prefix (the receiving side checks).
  abi::AmPrefix p = prefix(0, 100, kTag, kReq, 0, 50, 0);
  uint32_t len = build(g_a, p, 1);
  check(status(send_entry(g_a, len + 1, 1)), abi::kCqAmBadEndpoint, __LINE__);
  check(status(send_entry(g_a, len - 1, 1)), abi::kCqAmBadEndpoint, __LINE__);
  check(status(send_entry(g_a, len + 4096, 1)), abi::kCqAmBadEndpoint, __LINE__);  // a second packet more
  check(status(send_entry(g_a, 65, 1)), abi::kCqAmBadEndpoint, __LINE__);
  // msg_len 0 or too long (consistent lengths).
  p = prefix(0, 0, kTag, kReq, 0, 100, 0);
  check(status(send_entry(g_a, build(g_a, p, 1), 1)), abi::kCqAmBadEndpoint, __LINE__);
  p = prefix(0, abi::kAmMaxMessage + 1, kTag);
  check(status(send_entry(g_a, build(g_a, p, 1), 1)), abi::kCqAmBadEndpoint, __LINE__);
  p = prefix(0, 0xffffffffu, kTag);
  build(g_a, p, 1);
  check(status(send_entry(g_a, 4096, 1)), abi::kCqAmBadEndpoint, __LINE__);
  // A Long over kAmMaxLong (the length is still within the send limit).
  p = prefix(0, 1, kTag, kReq, 0, abi::kAmMaxLong + 1, 0);
  check(status(send_entry(g_a, build(g_a, p, 1), 1)), abi::kCqAmBadEndpoint, __LINE__);
  // long_len + msg_len wrapping 32 bits to the right total.
  p = prefix(0, 100, kTag, kReq, 0, 0xffffffffu - 99 + 50, 0);  // 100 + long_len == 50 (mod 2^32)
  build(g_a, p, 1);
  check(status(send_entry(g_a, 64 + 50, 1)), abi::kCqAmBadEndpoint, __LINE__);
  // Lengths the sending side refuses.
  p = prefix(0, 100, kTag);
  len = build(g_a, p, 1);
  check(status(send_entry(g_a, 0, 1)), abi::kCqBadLength, __LINE__);
  check(status(send_entry(g_a, 64, 1)), abi::kCqBadLength, __LINE__);
  check(status(send_entry(g_a, 64 + abi::kAmMaxMessage + abi::kAmMaxLong + 1, 1)), abi::kCqBadLength, __LINE__);
  check(status(send_entry(g_a, 0xffffffffu, 1)), abi::kCqBadLength, __LINE__);
  // The source: registered, Local, wholly inside its registration.
  abi::SqEntry e = send_entry(g_a, len, 1);
  e.src_key = 0;
  check(status(e), abi::kCqBadKey, __LINE__);
  e.src_key = g_a.src_key ^ 0x100;
  check(status(e), abi::kCqBadKey, __LINE__);
  e = send_entry(g_a, len, 1);
  e.src_addr = 0x1234'0000;
  check(status(e), abi::kCqBadLength, __LINE__);
  e = send_entry(g_a, len, 1, kSrcLen - len + 1);  // runs off by one byte
  check(status(e), abi::kCqBadLength, __LINE__);
  e = send_entry(g_a, len, 1);
  e.src_key = g_a.ring_key;  // a registration that does not hold that address
  check(status(e), abi::kCqBadLength, __LINE__);
  // Fields a send does not use must be zero.
  for (int field = 0; field < 8; ++field) {
    e = send_entry(g_a, len, 1);
    switch (field) {
      case 0: e.access = 1; break;
      case 1: e.src_slot = 1; break;
      case 2: e.reg_offset = 1; break;
      case 3: e.dst_key = 1; break;
      case 4: e.dst_addr = 1; break;
      case 5: e.flags = abi::kSqNotify; break;
      case 6: e.flags = abi::kSqAmClose; break;
      case 7: e.reserved = 1; break;
    }
    check(status(e), abi::kCqBadOpcode, __LINE__ + field * 1000);
  }
  // Another node with no fabric link in this image.
  e = send_entry(g_a, len, 1);
  e.dst_node = self_node() + 1;
  check(status(e), abi::kCqBadSlot, __LINE__);
  // After all that the ring is as new: the next good message takes entry 0.
  lands(r, 0);
  lands(r, 1);
}

FW_TEST(a_garbage_consumed_word_reads_as_full) {
  Ring r = new_ring(g_b, 0, 4, kTag);
  lands(r, 0);
  uint64_t bad[] = {2, 5, 1ull << 40, 0x8000'0000'0000'0001ull, ~0ull - 100};
  for (uint64_t v : bad) {
    r.consume(v);
    EXPECT_EQ(send(g_a, g_b, prefix(0, 64, kTag), 0x5a).status, abi::kCqAmCongestion);
    solicit_sink(g_b, 0);
    EXPECT_EQ(send(g_a, g_b, prefix(0, 64, kTag, 0, kSinkEp, 300, 0), 0x5a).status, abi::kCqAmCongestion);
    EXPECT_EQ(r.entry(1)->seq, 0u);
    EXPECT_EQ(r.msg(1)[0], kFill);
    EXPECT_EQ(g_b.segment_changed_at(), kSegLen);
    no_event(g_b);
  }
  // A sane value again: on it goes from where it was.
  r.consume(1);
  lands(r, 1);
  r.consume(0);  // going backwards but still within the ring: 2 of 4 in use
  lands(r, 2);
  lands(r, 3);
  EXPECT_EQ(send(g_a, g_b, prefix(0, 64, kTag), 0x5b).status, abi::kCqAmCongestion);
  r.consume(4);
  lands(r, 4);
}

FW_TEST(the_ring_wraps_with_increasing_seq) {
  Ring r = new_ring(g_b, 0, 4, kTag);
  // Consuming each message as it comes: 14 messages through 4 entries.
  for (uint32_t i = 0; i < 14; ++i) {
    abi::AmPrefix p = prefix(0, 1 + i * 300, kTag, kReq, uint8_t(i & 7));
    CHECK_EQ(send(g_a, g_b, p, uint8_t(0x80 + i)).status, abi::kCqOk);
    if (!holds(r, i, p, uint8_t(0x80 + i), g_a)) fwtest::note("message %u", i);
    EXPECT_EQ(r.entry(i)->seq, i + 1);
    arrival(g_b, 0, 1 + i * 300);
    // Entries not reused yet keep their older numbers.
    if (i >= 1) EXPECT_EQ(r.entry(i - 1)->seq, i);
    if (i >= 3) EXPECT_EQ(r.entry(i + 1)->seq, i + 1 - 3);
    r.consume(i + 1);
  }
  // Lagging behind: 14 produced, 14 consumed. Numbers 14, 15, 16 go to
  // entries 2, 3, 0; the host finishes 14 and 15; 17, 18, 19 go to entries
  // 1, 2, 3; then the ring (16..19) is full.
  abi::AmPrefix p[6];
  for (uint32_t i = 0; i < 3; ++i) {
    p[i] = prefix(0, 20 + i, kTag, kReq, uint8_t(i));
    CHECK_EQ(send(g_a, g_b, p[i], uint8_t(i)).status, abi::kCqOk);
  }
  r.consume(16);
  for (uint32_t i = 3; i < 6; ++i) {
    p[i] = prefix(0, 20 + i, kTag, kReq, uint8_t(i));
    CHECK_EQ(send(g_a, g_b, p[i], uint8_t(i)).status, abi::kCqOk);
  }
  for (uint32_t i = 2; i < 6; ++i) EXPECT(holds(r, 14 + i, p[i], uint8_t(i), g_a));
  EXPECT_EQ(r.entry(2)->seq, 19u);
  EXPECT_EQ(r.entry(3)->seq, 20u);
  EXPECT_EQ(r.entry(0)->seq, 17u);
  EXPECT_EQ(r.entry(1)->seq, 18u);
  EXPECT_EQ(send(g_a, g_b, prefix(0, 8, kTag), 0x99).status, abi::kCqAmCongestion);
  for (uint32_t i = 0; i < 6; ++i) arrival(g_b, 0, 20 + i);
  no_event(g_b);
}

FW_TEST(reconfiguring_the_same_ring_keeps_its_place) {
  Ring r = new_ring(g_b, 0, 4, kTag);
  lands(r, 0);
  lands(r, 1);
  // A new tag on the same ring: numbering goes on, the old tag is refused.
  abi::SqEntry e = endpoint_entry(0, g_b.va(r.off), g_b.ring_key, 4, kTag + 7, g_b.seg_key, g_b.va(kSegOff), kSegLen);
  CHECK_EQ(g_b.run(e).status, abi::kCqOk);
  EXPECT_EQ(send(g_a, g_b, prefix(0, 64, kTag), 1).status, abi::kCqAmBadTag);
  lands(r, 2, 0x42, kTag + 7);
  // Closed and opened again: it starts where the process says it is.
  CHECK_EQ(g_b.run(close_entry(0)).status, abi::kCqOk);
  r.consume(3);
  CHECK_EQ(g_b.run(e).status, abi::kCqOk);
  lands(r, 3, 0x43, kTag + 7);
}

FW_TEST(replies_flow_back_to_the_sender_slot) {
  Ring r = new_ring(g_a, 6, 4, 1);
  Ring asked = new_ring(g_b, 2, 4, 1, false);
  solicit(g_a, 6, asked);  // A's endpoint 6 asks B's endpoint 2
  abi::AmPrefix p = prefix(6, 123, 99, 0, 2, 2000, 5000);
  uint32_t len = build(g_b, p, 0x77);
  abi::SqEntry e = send_entry(g_b, len, uint16_t(g_a.slot));
  abi::CqEntry c = g_b.run(e);
  CHECK_EQ(c.status, abi::kCqOk);
  EXPECT_EQ(c.result, len);
  EXPECT(holds(r, 0, p, 0x77, g_b));
  EXPECT(long_landed(g_a, p, 0x77));
  arrival(g_a, 6, 123);
  no_event(g_b);
  // And a slot sending to itself.
  p = prefix(6, 5, 1, kReq, 6);
  len = build(g_a, p, 0x78);
  CHECK_EQ(g_a.run(send_entry(g_a, len, uint16_t(g_a.slot))).status, abi::kCqOk);
  EXPECT(holds(r, 1, p, 0x78, g_a));
  arrival(g_a, 6, 5);
  EXPECT_EQ(g_b.run(close_entry(2)).status, abi::kCqOk);
}

// AM-2: a request gets at most one reply. B's endpoint 3 takes a reply
// only from an endpoint it asked and has not had its answer from; any other
// is refused (kCqAmBadTag, counted) and writes nothing.
FW_TEST(replies_are_taken_only_for_requests_the_endpoint_sent) {
  Ring r = new_ring(g_b, 3, 16, kTag);
  Ring& s = sink();
  const abi::AmPrefix reply = prefix(3, 64, 0, 0, kSinkEp);
  // Unsolicited: refused, whatever its tag, and nothing is written.
  refused(r, reply, abi::kCqAmBadTag);
  refused(r, prefix(3, 64, kTag, 0, kSinkEp), abi::kCqAmBadTag);
  refused(r, prefix(3, 300, kTag, 0, kSinkEp, 100, 0), abi::kCqAmBadTag);  // a Long too
  // B asks: the reply is taken...
  solicit(g_b, 3, s);
  CHECK_EQ(send(g_a, g_b, reply, 0x31).status, abi::kCqOk);
  EXPECT(holds(r, 0, reply, 0x31, g_a));
  arrival(g_b, 3, 64);
  // ... and a second reply to the same request is not.
  refused_at(r, 1, reply, abi::kCqAmBadTag);
  // Two requests, two replies (from the endpoint asked, not another of A's).
  solicit(g_b, 3, s);
  solicit(g_b, 3, s);
  refused_at(r, 1, prefix(3, 64, 0, 0, 2), abi::kCqAmBadTag);
  CHECK_EQ(send(g_a, g_b, reply, 0x32).status, abi::kCqOk);
  CHECK_EQ(send(g_a, g_b, reply, 0x33).status, abi::kCqOk);
  EXPECT(holds(r, 2, reply, 0x33, g_a));
  arrival(g_b, 3, 64);
  arrival(g_b, 3, 64);
  refused_at(r, 3, reply, abi::kCqAmBadTag);
  // A one-way request (kAmNoReply) asks for none; neither does a request
  // the destination refused (no such endpoint: its count is given back).
  abi::AmPrefix one_way = prefix(s.ep, 8, 1, kReq | abi::kAmNoReply, 3);
  CHECK_EQ(send(g_b, g_a, one_way, 0x34).status, abi::kCqOk);
  s.consume(s.done + 1);
  g_a.drain();
  refused_at(r, 3, reply, abi::kCqAmBadTag);
  EXPECT_EQ(send(g_b, g_a, prefix(5, 8, 1, kReq, 3), 0x35).status, abi::kCqAmBadEndpoint);
  refused_at(r, 3, prefix(3, 64, 0, 0, 5), abi::kCqAmBadTag);
  // A reply in pieces: its first piece announces them, the pieces that
  // follow (kAmPiece) are taken up to that many. A piece before any first
  // piece while the request is unanswered comes again later (congestion).
  solicit(g_b, 3, s);
  abi::AmPrefix piece = prefix(3, 64, 0, abi::kAmPiece, kSinkEp);
  refused_at(r, 3, piece, abi::kCqAmCongestion);
  abi::AmPrefix first = reply;
  first.pieces = 3;
  CHECK_EQ(send(g_a, g_b, first, 0x36).status, abi::kCqOk);
  CHECK_EQ(send(g_a, g_b, piece, 0x37).status, abi::kCqOk);
  CHECK_EQ(send(g_a, g_b, piece, 0x38).status, abi::kCqOk);
  EXPECT(holds(r, 5, piece, 0x38, g_a));
  for (int i = 0; i < 3; ++i) arrival(g_b, 3, 64);
  refused_at(r, 6, piece, abi::kCqAmBadTag);
  refused_at(r, 6, reply, abi::kCqAmBadTag);
  first.pieces = abi::kAmMaxPieces + 1;  // more than a message has: malformed
  refused_at(r, 6, first, abi::kCqAmBadEndpoint);
  // Closed and opened again, the endpoint awaits nothing.
  solicit(g_b, 3, s);
  CHECK_EQ(g_b.run(close_entry(3)).status, abi::kCqOk);
  r = new_ring(g_b, 3, 16, kTag);
  refused(r, reply, abi::kCqAmBadTag);
  // A slot's requests to itself count the same.
  CHECK_EQ(send(g_b, g_b, prefix(3, 8, kTag, kReq, 3), 0x50).status, abi::kCqOk);
  r.consume(1);
  g_b.drain();
  abi::AmPrefix self_reply = prefix(3, 16, 0, 0, 3);
  uint32_t len = build(g_b, self_reply, 0x39);
  CHECK_EQ(g_b.run(send_entry(g_b, len, uint16_t(g_b.slot))).status, abi::kCqOk);
  EXPECT(holds_from(r, 1, self_reply, 0x39, self_node(), g_b.slot));
  CHECK_EQ(g_b.run(send_entry(g_b, len, uint16_t(g_b.slot))).status, abi::kCqAmBadTag);
  g_b.drain();
  CHECK_EQ(g_b.run(close_entry(3)).status, abi::kCqOk);
}

FW_TEST(a_segment_deregistered_mid_long_publishes_an_empty_entry) {
  Ring r = new_ring(g_b, 0, 4, kTag);
  abi::AmPrefix p = prefix(0, 64, kTag, kReq, 0, abi::kAmMaxLong, 0x1000);
  abi::SqEntry e = send_entry(g_a, build(g_a, p, 0x90), 1);
  g_a.submit(e);
  for (int i = 0; i < 3; ++i) lcp::slots_service(g_t);
  abi::CqEntry c{};
  CHECK(!g_a.reap(c));  // 1 MiB takes more passes than that
  abi::SqEntry d{};
  d.opcode = abi::kOpDeregister;
  d.src_key = g_b.seg_key;
  d.user_data = ++g_token;
  g_b.submit(d);
  c.status = 0xffff;
  for (int i = 0; i < 1000 && !g_a.reap(c); ++i) lcp::slots_service(g_t);
  EXPECT_EQ(c.status, abi::kCqAmBadSegOffset);
  EXPECT_EQ(c.user_data, e.user_data);
  abi::CqEntry dc{};
  CHECK(g_b.reap(dc));
  EXPECT_EQ(dc.status, abi::kCqOk);
  // The entry it had is published empty, so the process can move past it.
  EXPECT_EQ(r.entry(0)->seq, 1u);
  EXPECT_EQ(r.entry(0)->len, 0u);
  EXPECT_EQ(r.entry(0)->long_len, 0u);
  g_b.drain();
  // With a segment again, the next message takes the next entry.
  g_b.seg_key = g_b.reg(kSegOff, kSegLen, abi::kAccessLocal | abi::kAccessRemoteWrite);
  g_b.fill_segment();
  CHECK_EQ(g_b.run(endpoint_entry(0, g_b.va(r.off), g_b.ring_key, 4, kTag, g_b.seg_key, g_b.va(kSegOff), kSegLen))
               .status,
           abi::kCqOk);
  p = prefix(0, 64, kTag, kReq, 0, 4096, 0);
  CHECK_EQ(send(g_a, g_b, p, 0x91).status, abi::kCqOk);
  EXPECT(holds(r, 1, p, 0x91, g_a));
  EXPECT(long_landed(g_b, p, 0x91));
  arrival(g_b, 0, 64);
}

FW_TEST(detach_of_the_receiving_slot_mid_way) {
  Ring r = new_ring(g_b, 0, 4, kTag);
  Ring r1 = new_ring(g_b, 1, 4, 1);
  lands(r, 0);
  // A 1 MiB Long under way when the receiving process goes.
  abi::AmPrefix p = prefix(0, 64, kTag, kReq, 0, abi::kAmMaxLong, 0);
  abi::SqEntry e = send_entry(g_a, build(g_a, p, 0xa0), 1);
  g_a.submit(e);
  for (int i = 0; i < 3; ++i) lcp::slots_service(g_t);
  abi::CqEntry c{};
  CHECK(!g_a.reap(c));
  lcp::detach_slot(g_t, 1);  // what control.cpp does for kCtrlDetachSlot
  uint32_t seg_mark = g_b.segment_changed_at();
  EXPECT(seg_mark < kSegLen);  // part of it had landed
  c.status = 0xffff;
  for (int i = 0; i < 1000 && !g_a.reap(c); ++i) lcp::slots_service(g_t);
  EXPECT_EQ(c.status, abi::kCqRemoteBadSlot);  // its process went: unreachable
  EXPECT_EQ(c.user_data, e.user_data);
  EXPECT_EQ(r.entry(1)->seq, 0u);  // never published (its message bytes had been placed)
  uint8_t snapshot[abi::kAmEntryBytes];
  memcpy(snapshot, r.entry(1), sizeof snapshot);
  // Later sends: refused, nothing written.
  for (uint8_t ep = 0; ep < 2; ++ep) {
    EXPECT_EQ(send(g_a, g_b, prefix(ep, 64, kTag), 0xa1).status, abi::kCqRemoteBadSlot);
    EXPECT_EQ(send(g_a, g_b, prefix(ep, 64, kTag, 0, 0, 100, 0), 0xa1).status, abi::kCqRemoteBadSlot);
  }
  EXPECT(memcmp(snapshot, r.entry(1), sizeof snapshot) == 0);
  EXPECT(r1.untouched());
  // A new process on the slot inherits no endpoint.
  g_b.open(1, 3, kVaB);
  g_b.fill_segment();
  EXPECT_EQ(send(g_a, g_b, prefix(0, 64, kTag), 0xa2).status, abi::kCqAmBadEndpoint);
  EXPECT_EQ(send(g_a, g_b, prefix(1, 64, kTag), 0xa2).status, abi::kCqAmBadEndpoint);
  EXPECT(r1.untouched());
  EXPECT_EQ(g_b.segment_changed_at(), kSegLen);
  no_event(g_b);
  // Its own endpoint works.
  Ring fresh = new_ring(g_b, 0, 4, kTag);
  lands(fresh, 0);
  p = prefix(0, 64, kTag, kReq, 0, 100 * 1024, 0x800);
  CHECK_EQ(send(g_a, g_b, p, 0xa3).status, abi::kCqOk);
  EXPECT(holds(fresh, 1, p, 0xa3, g_a));
  EXPECT(long_landed(g_b, p, 0xa3));
  arrival(g_b, 0, 64);
}

// consumed is a 64-bit count: a value above what the NIC has produced is
// garbage however close it is to 2^64 (the brief: bigger than produced ->
// full). produced - consumed wraps for those values, though.
FW_TEST(a_consumed_word_just_below_2_64_reads_as_full) {
  Ring r = new_ring(g_b, 2, 4, kTag);
  lands(r, 0);  // produced 1
  uint64_t bad[] = {~0ull, ~0ull - 1};  // produced - consumed = 2, 3
  for (uint64_t v : bad) {
    r.consume(v);
    EXPECT_EQ(send(g_a, g_b, prefix(2, 64, kTag), 0x5c).status, abi::kCqAmCongestion);
    EXPECT_EQ(r.entry(1)->seq, 0u);
    EXPECT_EQ(r.msg(1)[0], kFill);
    g_b.drain();
  }
}

// The sending process goes while its 1 MiB Long is half way into B's ring
// entry: the entry it had must not stay unpublished forever (the process
// consumes in order; abi/am.h, am.cpp publish(): "an empty one the process
// skips, so later entries are not held up"), and the NIC's AM assembly
// table must not keep the dead message.
FW_TEST(detach_of_the_sending_slot_mid_way_does_not_wedge_the_receiver) {
  Ring r = new_ring(g_b, 0, 4, kTag);
  abi::AmPrefix p = prefix(0, 64, kTag, kReq, 0, abi::kAmMaxLong, 0);
  abi::SqEntry e = send_entry(g_a, build(g_a, p, 0xb0), 1);
  g_a.submit(e);
  for (int i = 0; i < 3; ++i) lcp::slots_service(g_t);
  abi::CqEntry c{};
  CHECK(!g_a.reap(c));
  lcp::detach_slot(g_t, 0);
  for (int i = 0; i < 100; ++i) lcp::slots_service(g_t);
  g_b.fill_segment();
  // A new process on A's slot sends to the same endpoint.
  g_a.open(0, 4, kVaA);
  abi::AmPrefix q = prefix(0, 64, kTag, kReq, 1);
  CHECK_EQ(send(g_a, g_b, q, 0xb1).status, abi::kCqOk);
  // Entry 0 (the dead Long's) is published, empty; the new message follows it.
  EXPECT_EQ(r.entry(0)->seq, 1u);
  EXPECT_EQ(r.entry(0)->len, 0u);
  EXPECT(holds(r, 1, q, 0xb1, g_a));
  g_b.drain();
  // And the NIC keeps taking messages (no assembly left behind): more dead
  // Longs than it has assemblies (the host keeping room in the ring), then
  // a good message to another endpoint.
  for (uint32_t k = 0; k < lcp::kMaxAmAssemblies + 2; ++k) {
    r.consume(2 + k);
    g_a.submit(send_entry(g_a, build(g_a, p, 0xb2), 1));
    for (int i = 0; i < 2; ++i) lcp::slots_service(g_t);
    lcp::detach_slot(g_t, 0);
    g_a.open(0, 5 + k, kVaA);
  }
  g_b.drain();
  Ring r2 = new_ring(g_b, 1, 4, kTag);
  g_b.fill_segment();
  lands(r2, 0);
}

// The sender's side of the same: each sending process that goes in the
// middle of a send must give back the NIC's operation (remote.cpp PutOp,
// kMaxPuts per NIC), or after kMaxPuts such detaches no slot can send.
FW_TEST(detach_of_the_sending_slot_mid_way_frees_its_operation) {
  Ring r = new_ring(g_b, 3, 16, kTag);
  (void)r;
  abi::AmPrefix p = prefix(3, 64, kTag, kReq, 0, abi::kAmMaxLong, 0);
  static uint64_t generation = 100;
  for (uint32_t k = 0; k < lcp::kMaxPuts + 1; ++k) {
    g_a.submit(send_entry(g_a, build(g_a, p, 0xc0), 1));
    for (int i = 0; i < 2; ++i) lcp::slots_service(g_t);
    lcp::detach_slot(g_t, 0);
    g_a.open(0, ++generation, kVaA);
  }
  g_b.drain();
  abi::CqEntry c = send(g_a, g_b, prefix(3, 64, kTag), 0xc1);
  EXPECT(c.status != 0xffff);
  if (!EXPECT(c.status != abi::kCqNoResources)) fwtest::note("no PutOp left for any slot of the NIC");
}

// =====================================================================
// A peer NIC. From here on the link is up on the board's fabric, and node 1,
// played by the test, sends AM operations to B's endpoints as a sending NIC
// does (remote.cpp precompute_header, link::send_segments): kWireOpAm,
// dst_addr = offset in the operation's bytes, kMtu bytes a packet,
// kWireFirst on the first and kWireLast on the last. Once the protocol layer
// has taken a packet that ends past the message, the link places the Long's
// next packets into the segment itself (link::place_next, am_placement), up
// to the last packet (the protocol layer's: the verdict, the ring entry) or
// until the tables change (SlotTable::epoch).

namespace {

fwtest::FabricPeer g_peer;
constexpr uint32_t kPeer = fwtest::FabricPeer::kNode;
constexpr uint16_t kPeerSlot = 5;                            // the sending slot on node 1
constexpr uint64_t kSeg2Off = 0x1300000, kSeg2Len = 0x10000;  // another region of B's: Local|RemoteWrite
constexpr uint32_t kMtu = abi::kMtu;
uint64_t g_peer_op = 0x7700;

uint8_t s2byte(uint32_t i) { return uint8_t(i * 53u + (i >> 8) + 0x21); }

// An AM operation of node 1's: its bytes (AmPrefix, message, Long) are in
// g_a's source region, where build() wrote them.
struct PeerAm {
  uint64_t op_id;
  uint32_t total;
  uint16_t dst_slot;
  uint16_t src_slot = kPeerSlot;

  uint32_t packets() const { return (total + kMtu - 1) / kMtu; }
  // Packet k: the bytes from k * kMtu.
  void send(uint32_t k) const {
    g_peer.send(g_peer.packet_header(abi::kWireOpAm, op_id, total, k, dst_slot, src_slot),
                g_a.base + kSrcOff + k * kMtu);
  }
  void send(uint32_t from, uint32_t to) const {
    for (uint32_t k = from; k < to; ++k) send(k);
  }
};

PeerAm peer_am(const Proc& to, const abi::AmPrefix& p, uint8_t seed) {
  return PeerAm{++g_peer_op, build(g_a, p, seed), uint16_t(to.slot)};
}

// The first packet of p's operation the link may place: the one after the
// first packet that ends past the message.
uint32_t first_placed(const abi::AmPrefix& p) {
  const uint64_t k = (abi::am_long_start(p.msg_len) + kMtu - 1) / kMtu;
  return k < 1 ? 1 : uint32_t(k);
}

uint64_t placed() { return link::stats().placed; }

// Endpoint ep of B again: ring r, `tag`, the segment [seg_off, +seg_len) of registration seg_key.
abi::CqEntry reconfigure(const Ring& r, uint64_t tag, uint32_t seg_key, uint64_t seg_off, uint64_t seg_len) {
  return g_b.run(endpoint_entry(r.ep, g_b.va(r.off), g_b.ring_key, r.entries, tag, seg_key, g_b.va(seg_off), seg_len));
}

// Node 1 sends p's operation (seed) to B with `change` made after its first
// `at` packets, of which the link placed all but the first: it places none
// after the change, and B's segment holds the Long up to the change and no
// byte after it. The operation, for its verdict.
template <class Change>
PeerAm cut_off(const abi::AmPrefix& p, uint8_t seed, uint32_t at, Change change) {
  PeerAm op = peer_am(g_b, p, seed);
  const uint64_t before = placed();
  op.send(0, at);
  EXPECT_EQ(placed(), before + at - 1);
  change();
  op.send(at, op.packets());
  EXPECT_EQ(placed(), before + at - 1);
  EXPECT(long_landed(g_b, p, seed, uint32_t(at * kMtu - abi::am_long_start(p.msg_len))));
  return op;
}

// Entry n of r: a message refused after it took the entry, published empty.
void published_empty(const Ring& r, uint64_t n) {
  EXPECT_EQ(r.entry(n)->seq, uint32_t(n + 1));
  EXPECT_EQ(r.entry(n)->len, 0u);
  EXPECT_EQ(r.entry(n)->long_len, 0u);
}

}  // namespace

FW_TEST(remote_the_link_comes_up_with_node_1) {
  CHECK(g_peer.up(g_board, lcp::remote_upcalls()));
  g_peer.acks = true;
  CHECK(g_peer.meet());
  g_b.drain();
  g_b.fill_segment();
}

FW_TEST(remote_longs_are_placed_by_the_link_byte_for_byte) {
  // Where the Long lands decides how the link copies it (core/copy.h): the
  // payload starts 8-aligned in the operation, so long_offset modulo 8 is
  // the packet's distance from its destination modulo 8.
  struct Shape {
    uint32_t msg_len, long_len, long_offset;
  } shapes[] = {
      {200, 5 * kMtu + 1000, 0x2000},  // words of 8
      {13, 3 * kMtu + 77, 0x1004},     // the message padded by 3; words of 4
      {4287, 3 * kMtu + 77, 0x1003},   // the message runs into the 2nd packet; bytes
      {64, 4 * kMtu, 0x1006},          // 2 apart modulo 4: bytes
      {8, abi::kAmMaxLong, 0x10},      // 1 MiB, 257 packets
  };
  Ring r = new_ring(g_b, 4, 8, kTag);
  const uint64_t published = fwtest::published_link_placed(), total_before = placed();
  uint64_t total = 0;
  for (uint32_t i = 0; i < sizeof shapes / sizeof shapes[0]; ++i) {
    const Shape& sh = shapes[i];
    const uint8_t seed = uint8_t(0x60 + i);
    abi::AmPrefix p = prefix(4, sh.msg_len, kTag, kReq, uint8_t(i), sh.long_len, sh.long_offset);
    PeerAm op = peer_am(g_b, p, seed);
    const uint32_t n = op.packets(), first = first_placed(p);
    for (uint32_t k = 0; k < n; ++k) {
      const uint64_t was = placed();
      op.send(k);
      const bool by_link = k >= first && k + 1 < n;
      if (!EXPECT_EQ(placed(), was + (by_link ? 1 : 0))) fwtest::note("shape %u, packet %u of %u", i, k, n);
      if (k + 1 < n && !EXPECT_EQ(r.entry(i)->seq, 0u)) fwtest::note("published before its last packet");
    }
    total += n - 1 - first;
    EXPECT_EQ(g_peer.verdict(op.op_id), abi::kCqOk);
    if (!holds_from(r, i, p, seed, kPeer, kPeerSlot)) fwtest::note("shape %u", i);
    if (!long_landed(g_b, p, seed)) fwtest::note("shape %u", i);
    arrival(g_b, 4, sh.msg_len, kPeer);
    no_event(g_b);
    r.consume(i + 1);
  }
  EXPECT_EQ(placed() - total_before, total);
  EXPECT_EQ(fwtest::published_link_placed() - published, total);  // status counter link_placed
}

FW_TEST(remote_a_new_tag_mid_long_stops_placement_until_the_next_packet) {
  // The endpoint is configured again (a new tag, the same ring and segment)
  // between two packets: the epoch stops the placed stream; the protocol
  // layer takes the next packet (into the same segment) and hands the rest
  // to the link again. The message lands whole.
  Ring r = new_ring(g_b, 5, 4, kTag);
  abi::AmPrefix p = prefix(5, 64, kTag, kReq, 1, 6 * kMtu, 0x3000);
  PeerAm op = peer_am(g_b, p, 0x71);
  CHECK_EQ(op.packets(), 7u);
  const uint64_t before = placed();
  op.send(0, 3);
  EXPECT_EQ(placed(), before + 2);
  CHECK_EQ(reconfigure(r, kTag + 1, g_b.seg_key, kSegOff, kSegLen).status, abi::kCqOk);
  op.send(3);
  EXPECT_EQ(placed(), before + 2);
  op.send(4, 7);
  EXPECT_EQ(placed(), before + 4);  // packets 4 and 5
  EXPECT_EQ(g_peer.verdict(op.op_id), abi::kCqOk);
  EXPECT(holds_from(r, 0, p, 0x71, kPeer, kPeerSlot));
  EXPECT(long_landed(g_b, p, 0x71));
  arrival(g_b, 5, 64, kPeer);
  no_event(g_b);
}

FW_TEST(remote_a_new_segment_mid_long_takes_no_more_of_it) {
  // Between two packets the endpoint gets another segment, one that ends
  // before the Long's offset (in a registration that goes on past it). No
  // byte of the Long sent after the change may land in the old segment --
  // nor anywhere in the new registration: the message no longer fits the
  // endpoint's segment (abi/am.h: "a Long fits the segment"; a segment
  // deregistered mid-Long is kCqAmBadSegOffset with its entry published
  // empty, see a_segment_deregistered_mid_long_publishes_an_empty_entry).
  Ring r = new_ring(g_b, 6, 4, kTag);
  const uint32_t seg2_key = g_b.reg(kSeg2Off, kSeg2Len, abi::kAccessLocal | abi::kAccessRemoteWrite);
  for (uint32_t i = 0; i < kSeg2Len; ++i) g_b.base[kSeg2Off + i] = s2byte(i);
  abi::AmPrefix p = prefix(6, 64, kTag, kReq, 2, 6 * kMtu, 0x3000);
  PeerAm op = cut_off(p, 0x72, 3, [&] {
    EXPECT_EQ(reconfigure(r, kTag, seg2_key, kSeg2Off, 0x1000).status, abi::kCqOk);
  });
  // The new registration: untouched, within the new segment and past it.
  for (uint32_t i = 0; i < kSeg2Len; ++i)
    if (!EXPECT_EQ(g_b.base[kSeg2Off + i], s2byte(i))) {
      fwtest::note("byte %u of the new segment's registration written (segment: 0x1000 bytes; Long at 0x%x)", i,
                   p.long_offset);
      break;
    }
  // Refused, and its entry published empty so the process moves past it.
  EXPECT_EQ(g_peer.verdict(op.op_id), abi::kCqAmBadSegOffset);
  published_empty(r, 0);
  no_event(g_b);
  EXPECT_EQ(g_b.run(close_entry(6)).status, abi::kCqOk);
  g_b.drain();
}

FW_TEST(remote_an_endpoint_closed_mid_long_takes_no_more_of_it) {
  Ring r = new_ring(g_b, 7, 4, kTag);
  abi::AmPrefix p = prefix(7, 100, kTag, kReq, 3, 5 * kMtu, 0x800);
  PeerAm op = cut_off(p, 0x73, 3, [] { EXPECT_EQ(g_b.run(close_entry(7)).status, abi::kCqOk); });
  EXPECT_EQ(g_peer.verdict(op.op_id), abi::kCqAmBadEndpoint);
  EXPECT_EQ(r.entry(0)->seq, 0u);  // the NIC has no ring for it any more
  no_event(g_b);
  // The NIC let go of the message: a new endpoint there takes the next one
  // (a Long in one packet: first and last).
  Ring r2 = new_ring(g_b, 7, 4, kTag);
  p = prefix(7, 24, kTag, kReq, 3, 1000, 0x801);
  op = peer_am(g_b, p, 0x74);
  CHECK_EQ(op.packets(), 1u);
  op.send(0);
  EXPECT_EQ(g_peer.verdict(op.op_id), abi::kCqOk);
  EXPECT(holds_from(r2, 0, p, 0x74, kPeer, kPeerSlot));
  EXPECT(long_landed(g_b, p, 0x74));
  arrival(g_b, 7, 24, kPeer);
}

FW_TEST(remote_a_segment_deregistered_mid_long_takes_no_more_of_it) {
  Ring r = new_ring(g_b, 4, 4, kTag);
  abi::AmPrefix p = prefix(4, 32, kTag, kReq, 4, 8 * kMtu, 0x4000);
  PeerAm op = cut_off(p, 0x75, 4, [] {
    abi::SqEntry d{};
    d.opcode = abi::kOpDeregister;
    d.src_key = g_b.seg_key;
    d.user_data = ++g_token;
    EXPECT_EQ(g_b.run(d).status, abi::kCqOk);
  });
  EXPECT_EQ(g_peer.verdict(op.op_id), abi::kCqAmBadSegOffset);
  published_empty(r, 0);
  no_event(g_b);
  // Registered again, the segment takes the next Long.
  g_b.seg_key = g_b.reg(kSegOff, kSegLen, abi::kAccessLocal | abi::kAccessRemoteWrite);
  CHECK_EQ(reconfigure(r, kTag, g_b.seg_key, kSegOff, kSegLen).status, abi::kCqOk);
  p = prefix(4, 32, kTag, kReq, 4, 3 * kMtu, 0x4000);
  op = peer_am(g_b, p, 0x76);
  const uint64_t before = placed();
  op.send(0, op.packets());
  EXPECT_EQ(placed(), before + 2);
  EXPECT_EQ(g_peer.verdict(op.op_id), abi::kCqOk);
  EXPECT(holds_from(r, 1, p, 0x76, kPeer, kPeerSlot));
  EXPECT(long_landed(g_b, p, 0x76));
  arrival(g_b, 4, 32, kPeer);
}

// AM-2 replies over the wire: B's endpoint 6 asks kAmPeers endpoints of
// node 1 -- (slot k % 8, endpoint k / 8) -- and so awaits a reply from each.
// A request to one more is not sent (kCqAmCongestion at once: the host tries
// again, as for a full ring) until a reply frees a place; node 1's replies
// are taken once per request, from the endpoints asked only; a request node 1
// refuses gives its place back.
FW_TEST(remote_an_endpoint_awaits_replies_from_at_most_kAmPeers_endpoints) {
  Ring r = new_ring(g_b, 6, 8, kTag);
  g_b.drain();
  g_peer.drain();
  const uint32_t logged = g_peer.logged;
  auto request = [&](uint32_t k) {
    abi::AmPrefix p = prefix(uint8_t(k / 8), 16, 0x77, kReq, 6);
    abi::SqEntry e = send_entry(g_b, build(g_b, p, uint8_t(k), k * 0x100), uint16_t(k % 8), k * 0x100);
    e.dst_node = kPeer;
    g_b.submit(e);
    for (int i = 0; i < 4; ++i) lcp::slots_service(g_t);
    return e;
  };
  // Node 1 answers each AM operation of ours it heard since `from` with `status`.
  auto verdicts = [&](uint32_t from, uint8_t status) {
    g_peer.drain();
    uint32_t n = 0;
    for (uint32_t i = from; i < g_peer.logged; ++i) {
      const auto& e = g_peer.log[i % fwtest::FabricPeer::kKept];
      if (e.h.op != abi::kWireOpAm) continue;
      abi::WireHeader v = g_peer.header();
      v.op = abi::kWireOpResult;
      v.op_id = e.h.op_id;
      v.status = status;
      g_peer.send(v, nullptr);
      ++n;
    }
    return n;
  };
  // Node 1's endpoint (slot, ep) sends B's endpoint 6 a reply; our verdict.
  auto reply_from = [&](uint16_t slot, uint8_t ep, uint8_t seed) {
    PeerAm op = peer_am(g_b, prefix(6, 32, 0, 0, ep), seed);
    op.src_slot = slot;
    op.send(0, op.packets());
    return g_peer.verdict(op.op_id);
  };
  for (uint32_t k = 0; k < lcp::kAmPeers; ++k) request(k);
  CHECK_EQ(verdicts(logged, abi::kCqOk), lcp::kAmPeers);
  abi::CqEntry c{};
  for (uint32_t k = 0; k < lcp::kAmPeers; ++k) {
    CHECK(g_b.reap(c));
    EXPECT_EQ(c.status, abi::kCqOk);
  }
  // One more endpoint: not sent.
  const uint32_t before = g_peer.logged;
  abi::SqEntry extra = request(lcp::kAmPeers);
  CHECK(g_b.reap(c));
  EXPECT_EQ(c.user_data, extra.user_data);
  EXPECT_EQ(c.status, abi::kCqAmCongestion);
  g_peer.drain();
  EXPECT_EQ(g_peer.logged, before);
  // A reply from an endpoint not asked is refused; from one asked, taken once.
  EXPECT_EQ(reply_from(3, 4, 0x70), abi::kCqAmBadTag);
  EXPECT_EQ(r.entry(0)->seq, 0u);
  EXPECT_EQ(reply_from(3, 0, 0x71), abi::kCqOk);
  EXPECT_EQ(r.entry(0)->seq, 1u);
  EXPECT_EQ(reply_from(3, 0, 0x72), abi::kCqAmBadTag);
  r.consume(1);
  g_b.drain();
  // Its place is free: the request goes now. Node 1 refuses it (no such
  // endpoint there): the place is free again, for another endpoint.
  request(lcp::kAmPeers);
  EXPECT_EQ(verdicts(before, abi::kCqAmBadEndpoint), 1u);
  CHECK(g_b.reap(c));
  EXPECT_EQ(c.status, abi::kCqAmBadEndpoint);
  const uint32_t next = g_peer.logged;
  request(lcp::kAmPeers + 1);
  EXPECT_EQ(verdicts(next, abi::kCqOk), 1u);
  CHECK(g_b.reap(c));
  EXPECT_EQ(c.status, abi::kCqOk);
  EXPECT_EQ(reply_from((lcp::kAmPeers + 1) % 8, (lcp::kAmPeers + 1) / 8, 0x73), abi::kCqOk);
  // Closed, the endpoint awaits nothing (and later tests find it free).
  CHECK_EQ(g_b.run(close_entry(6)).status, abi::kCqOk);
  g_b.drain();
}

// ---------------------------------------------------------------------
// A verdict that never comes (remote.h kVerdictTimeoutUs): node 1 takes a
// put of A's and acknowledges it, but sends no verdict. The put fails as
// unreachable once its verdict is that long overdue -- not while the link
// still resends it, and not while either direction of the link recovers
// from a loss, nor on waking from a pause longer than the deadline (the wait
// counts the NIC's running time: kVerdictStepMaxUs at most between two
// looks) -- and counts in verdict_timeouts; A's next put goes and completes
// as usual. The NIC's own loop runs it (loop_pass), on a clock the test
// moves on, 100 ms at a time where the wait should count it all.

namespace {

abi::SqEntry put_to_peer(uint32_t len) {
  abi::SqEntry e{};
  e.opcode = abi::kOpPut;
  e.length = len;
  e.src_addr = g_a.va(kSrcOff);
  e.src_key = g_a.src_key;
  e.dst_node = kPeer;
  e.dst_slot = 2;
  e.dst_key = 0x1234;
  e.dst_addr = 0x5000;
  e.user_data = ++g_token;
  return e;
}

// The newest put packet node 1 took (its op id; 0 if none).
uint64_t peer_heard_put() {
  g_peer.drain();
  const uint32_t kept = g_peer.logged < fwtest::FabricPeer::kKept ? g_peer.logged : fwtest::FabricPeer::kKept;
  for (uint32_t i = 1; i <= kept; ++i) {
    const auto& e = g_peer.log[(g_peer.logged - i) % fwtest::FabricPeer::kKept];
    if (e.h.op == abi::kWireOpPut) return e.h.op_id;
  }
  return 0;
}

// Node 1 acknowledges what it took: a sequence filler carries the ACK.
void peer_acks() {
  g_peer.drain();
  g_peer.send(g_peer.header(), nullptr);
}

}  // namespace

FW_TEST(remote_an_operation_whose_verdict_never_comes_fails_and_the_slot_goes_on) {
  const uint64_t ms = hal::clint::us_to_ticks(1000), timeout = hal::clint::us_to_ticks(lcp::kVerdictTimeoutUs);
  core::boot_config::Config cfg{};
  lcp::LoopState loop{};
  uint64_t t = hal::clint::now();
  lcp::loop_init(loop, cfg, t);
  loop.slots = &g_t;
  auto pass_at = [&](uint64_t at) {
    for (int i = 0; i < 4; ++i) lcp::loop_pass(loop, at);
  };
  auto passes = [&](uint64_t from, uint64_t to) {  // every 100 ms after `from`, and at `to`
    for (uint64_t at = from + 100 * ms; at < to; at += 100 * ms) pass_at(at);
    pass_at(to);
  };
  const uint64_t step_max = hal::clint::us_to_ticks(lcp::kVerdictStepMaxUs);
  g_a.drain();
  peer_acks();  // nothing of ours left unacknowledged: the put's packet starts the link's clock
  const uint64_t timeouts = ctr(abi::kCtrVerdictTimeouts);
  abi::SqEntry e = put_to_peer(300);
  g_a.submit(e);
  pass_at(t);
  const uint64_t op = peer_heard_put();
  CHECK(op != 0);
  abi::CqEntry c{};
  // Unacknowledged for most of a deadline (the link's own is as long): the
  // link resends the put; its verdict's wait has not begun.
  pass_at(t + timeout - 500 * ms);
  EXPECT(!g_a.reap(c));
  EXPECT_EQ(peer_heard_put(), op);
  // Acknowledged now, at t1. The NIC is then off its CPU for longer than the
  // deadline: on waking that counts as step_max, and nothing fails.
  peer_acks();
  const uint64_t t1 = t + timeout - 400 * ms;
  pass_at(t1);
  const uint64_t woke = t1 + timeout + 1000 * ms;
  pass_at(woke);
  EXPECT(!g_a.reap(c));
  // Half a deadline on, node 1 sends a packet twice (a loss it recovers
  // from): the wait starts again.
  passes(woke, woke + timeout / 2);
  EXPECT(!g_a.reap(c));
  g_peer.send(g_peer.header(), nullptr, g_peer.next_seq - 1);
  const uint64_t t2 = woke + timeout / 2 + 20 * ms;
  pass_at(t2);
  passes(t2, woke + timeout - step_max + 20 * ms);
  EXPECT(!g_a.reap(c));
  passes(woke + timeout - step_max + 20 * ms, t2 + timeout - 20 * ms);
  EXPECT(!g_a.reap(c));
  EXPECT_EQ(ctr(abi::kCtrVerdictTimeouts), timeouts);
  // A deadline after that: it fails, counted.
  pass_at(t2 + timeout + 20 * ms);
  CHECK(g_a.reap(c));
  EXPECT_EQ(c.user_data, e.user_data);
  EXPECT_EQ(c.status, abi::kCqUnreachable);
  EXPECT_EQ(c.result, 0u);
  EXPECT_EQ(ctr(abi::kCtrVerdictTimeouts), timeouts + 1);
  // A verdict that comes after all finds nothing to finish.
  abi::WireHeader v = g_peer.header();
  v.op = abi::kWireOpResult;
  v.op_id = op;
  g_peer.send(v, nullptr);
  pass_at(hal::clint::now());
  EXPECT(!g_a.reap(c));
  // The slot's next put goes, and completes with its verdict.
  e = put_to_peer(5000);
  g_a.submit(e);
  t = hal::clint::now();
  pass_at(t);
  const uint64_t op2 = peer_heard_put();
  CHECK(op2 != 0 && op2 != op);
  v.op_id = op2;
  g_peer.send(v, nullptr);
  pass_at(t);
  CHECK(g_a.reap(c));
  EXPECT_EQ(c.user_data, e.user_data);
  EXPECT_EQ(c.status, abi::kCqOk);
  EXPECT_EQ(c.result, 5000u);
  EXPECT_EQ(ctr(abi::kCtrVerdictTimeouts), timeouts + 1);
  EXPECT(!g_a.reap(c));
  g_a.drain();
}

// Node 0's puts to node 1 whose verdicts a test gives, one packet each (node
// 1 hears each one's last packet), on a loop of the test's own.
struct DuePuts {
  lcp::LoopState loop{};
  abi::SqEntry e[4];
  uint64_t op[4];
  uint32_t seq[4];
  abi::CqEntry c{};
  void passes() {
    for (int i = 0; i < 4; ++i) lcp::loop_pass(loop, hal::clint::now());
  }
  // n puts of 100, 200, ... bytes, none complete yet.
  bool start(uint32_t n) {
    core::boot_config::Config cfg{};
    lcp::loop_init(loop, cfg, hal::clint::now());
    loop.slots = &g_t;
    g_a.drain();
    peer_acks();
    for (uint32_t i = 0; i < n; ++i) {
      e[i] = put_to_peer(100 + 100 * i);
      g_a.submit(e[i]);
      passes();
      op[i] = peer_heard_put();
      if (!EXPECT(op[i] != 0 && (i == 0 || op[i] != op[i - 1]))) return false;
      const fwtest::FabricPeer::Heard* h = g_peer.find(abi::kWireOpPut, op[i]);
      if (!EXPECT(h != nullptr)) return false;
      seq[i] = h->h.seq;
    }
    return EXPECT(!g_a.reap(c));
  }
  // A's next completion: put `put`'s, with `status` and `result`.
  bool completes(const abi::SqEntry& put, uint8_t status, uint32_t result) {
    if (!EXPECT(g_a.reap(c))) return false;
    return EXPECT_EQ(c.user_data, put.user_data) && EXPECT_EQ(c.status, status) && EXPECT_EQ(c.result, result);
  }
  bool none() { return EXPECT(!g_a.reap(c)); }
  // Node 1 refuses put i.
  void refuse(uint32_t i) {
    abi::WireHeader r = g_peer.header();
    r.op = abi::kWireOpResult;
    r.op_id = op[i];
    r.status = abi::kCqRemoteProtection;
    g_peer.send(r, nullptr);
    passes();
  }
};

// OK verdicts are cumulative (remote.h, kWireOpOkThrough): one packet from
// node 1 completes every operation of ours whose last packet it covers, in
// the order they went; a refusal (kWireOpResult) before it fails its own
// operation only; one that covers nothing of ours, or an old one, completes
// nothing.
FW_TEST(remote_one_ok_through_completes_the_operations_it_covers_in_order) {
  DuePuts d;
  CHECK(d.start(3));
  auto ok_through = [&](uint32_t s) {
    abi::WireHeader v = g_peer.header();
    v.op = abi::kWireOpOkThrough;
    v.dst_addr = s;
    g_peer.send(v, nullptr);
    d.passes();
  };
  // Through the first: the first alone.
  ok_through(d.seq[0]);
  d.completes(d.e[0], abi::kCqOk, 100);
  d.none();
  // The same again (or older): nothing more.
  ok_through(d.seq[0]);
  ok_through(d.seq[0] - 1);
  d.none();
  // The second refused, then OK through the third: each its own verdict, in order.
  d.refuse(1);
  ok_through(d.seq[2]);
  d.completes(d.e[1], abi::kCqRemoteProtection, 0);
  d.completes(d.e[2], abi::kCqOk, 300);
  d.none();
  // Far ahead of anything we sent, with nothing due: nothing happens; the
  // next put still waits for its own verdict, and takes it.
  ok_through(d.seq[2] + 1000);
  abi::SqEntry next = put_to_peer(64);
  g_a.submit(next);
  d.passes();
  d.none();
  const uint64_t op4 = peer_heard_put();
  CHECK(op4 != 0 && op4 != d.op[2]);
  ok_through(g_peer.find(abi::kWireOpPut, op4)->h.seq);
  d.completes(next, abi::kCqOk, 64);
  g_a.drain();
}

// OK verdicts ride on acks (abi::kWireAckOk): a standalone ACK that says OK
// through a seq completes our operations it covers, oldest first -- but only
// once node 1's data packets up to the seq it names are delivered (a refusal
// among them must land first); a data packet that says OK completes them
// before its own delivery; an ACK without the flag completes nothing.
FW_TEST(remote_an_ack_that_says_ok_completes_what_it_covers_after_the_packets_before_it) {
  DuePuts d;
  CHECK(d.start(4));
  // A plain ACK through all four: acknowledged, but no verdict.
  g_peer.send_ack(d.seq[3], false, 0);
  d.passes();
  d.none();
  // OK through the first, after node 1's data we have: the first alone.
  g_peer.send_ack(d.seq[0], true, g_peer.next_seq - 1);
  d.passes();
  d.completes(d.e[0], abi::kCqOk, 100);
  d.none();
  // OK through the third, after a data packet of node 1's we have not had
  // (a refusal of the second): it waits for it.
  g_peer.send_ack(d.seq[2], true, g_peer.next_seq);
  d.passes();
  d.none();
  d.refuse(1);
  d.completes(d.e[1], abi::kCqRemoteProtection, 0);
  d.completes(d.e[2], abi::kCqOk, 300);
  d.none();
  // A data packet (a sequence filler) whose ack says OK through the fourth.
  abi::WireHeader f = g_peer.header();
  f.flags = abi::kWireAckOk;
  const bool acks = g_peer.acks;
  g_peer.acks = false;
  f.ack = d.seq[3];
  g_peer.send(f, nullptr);
  g_peer.acks = acks;
  d.passes();
  d.completes(d.e[3], abi::kCqOk, 400);
  d.none();
  g_a.drain();
}

// An operation acknowledged without its OK (the ACK that said it was lost,
// and what acknowledged the operation could not say it: a refusal): once
// the verdict checks find it still waiting, our link asks node 1 for its OK
// (an ACK with kWireOkProbe), and the answer completes it.
FW_TEST(remote_an_acknowledged_operation_without_its_ok_asks_for_it) {
  DuePuts d;
  CHECK(d.start(1));
  g_peer.send_ack(d.seq[0], false, 0);  // acknowledged; no OK
  d.passes();
  d.none();
  g_peer.drain();
  // (Later than any time the tests above passed the loop: the verdict
  // checks' clock is the firmware's, and they left it ahead of the CLINT.)
  const uint64_t t = hal::clint::now() + hal::clint::us_to_ticks(60'000'000),
                 check = hal::clint::us_to_ticks(lcp::kVerdictCheckUs + 1000);
  for (uint64_t i = 1; i <= 3; ++i) lcp::loop_pass(d.loop, t + i * check);
  uint32_t asked = 0;
  while (const abi::Packet* p = g_peer.from_us.peek()) {
    if (p->h.type == abi::kPktAck && (p->h.flags & abi::kWireOkProbe)) ++asked;
    g_peer.from_us.pop();
  }
  g_peer.from_us.release();
  EXPECT(asked >= 1);
  d.none();
  g_peer.send_ack(d.seq[0], true, g_peer.next_seq - 1);  // node 1's answer
  d.passes();
  d.completes(d.e[0], abi::kCqOk, 100);
  d.none();
  g_a.drain();
}

// The receiver's side: the messages one receive pass takes owe their
// senders one OK verdict between them, covering the last: the ACK that goes
// when the pass ends says it (abi::kWireAckOk), no packet of its own.
FW_TEST(remote_the_messages_of_one_receive_pass_share_one_ok_verdict) {
  Ring r = new_ring(g_b, 4, 8, kTag);
  g_peer.drain();
  const uint32_t oks = g_peer.ok_verdicts;
  abi::AmPrefix p[3];
  PeerAm op[3];
  g_peer.hold = true;
  for (uint32_t i = 0; i < 3; ++i) {
    p[i] = prefix(4, 16 + 8 * i, kTag, kReq, uint8_t(i));
    op[i] = peer_am(g_b, p[i], uint8_t(0x50 + i));
    CHECK_EQ(op[i].packets(), 1u);
    op[i].send(0);
  }
  g_peer.hold = false;
  EXPECT(!lcp::remote_results_pending());
  link::poll_rx(hal::clint::now());
  g_peer.drain();
  EXPECT_EQ(g_peer.ok_verdicts - oks, 1u);
  for (uint32_t i = 0; i < 3; ++i) {
    EXPECT_EQ(g_peer.verdict(op[i].op_id), abi::kCqOk);
    EXPECT(holds_from(r, i, p[i], uint8_t(0x50 + i), kPeer, kPeerSlot));
  }
  // A refused one among them: its own verdict, first; the others' OK after it.
  const uint32_t oks2 = g_peer.ok_verdicts;
  g_peer.hold = true;
  // (Each built and sent in turn: they are built in one source buffer.)
  PeerAm ok1 = peer_am(g_b, p[0], 0x60);
  ok1.send(0);
  abi::AmPrefix bad = prefix(4, 16, kTag + 1, kReq, 0);  // a tag the endpoint does not have
  PeerAm refused = peer_am(g_b, bad, 0x61);
  refused.send(0);
  PeerAm ok2 = peer_am(g_b, p[1], 0x62);
  ok2.send(0);
  g_peer.hold = false;
  link::poll_rx(hal::clint::now());
  g_peer.drain();
  EXPECT_EQ(g_peer.ok_verdicts - oks2, 1u);
  EXPECT_EQ(g_peer.verdict(ok1.op_id), abi::kCqOk);
  EXPECT(g_peer.verdict(refused.op_id) != abi::kCqOk && g_peer.verdict(refused.op_id) != 0xffff);
  EXPECT_EQ(g_peer.verdict(ok2.op_id), abi::kCqOk);
  // The refusal went before the OK that covers its seq (the sender reads them
  // in that order): the OK's ACK names a seq at or after the refusal's, and
  // no sequenced OK packet went at all.
  const fwtest::FabricPeer::Heard* rv = g_peer.find(abi::kWireOpResult, refused.op_id);
  CHECK(rv != nullptr);
  EXPECT(!(rv->h.flags & abi::kWireAckOk));  // (its own ack covers the operation it refuses)
  EXPECT(link::seq_at_or_before(rv->h.seq, g_peer.ok_after));
  EXPECT(g_peer.find(abi::kWireOpOkThrough, 0) == nullptr);
  abi::EqEntry ev{};
  while (g_b.event(ev)) {
  }
  g_b.drain();
}
