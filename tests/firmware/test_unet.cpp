// U-Net endpoints in the firmware (firmware/lcp/unet.cpp) on the real board,
// from the wire: the test plays node 1 of the fabric (fabric_peer.h), a peer
// NIC whose packets are untrusted. Slot B is a U-Net endpoint (a queue area
// and a segment in its registered memory) with a channel, made as the
// daemon makes them (kCtrlUnetChannel), that takes rx tag kTag from node 1's
// slot kPeerSlot. Checked: a message that spans packets lands in the free
// buffer taken at its first packet, the middle packets placed by the link
// itself; every lie of a peer (a tag, a sender, a length, an offset, a
// packet of no message, an abort) is dropped and counted and writes nothing
// outside the buffer; the verdict says only that the message came.
#include <string.h>

#include "core/board.h"
#include "core/status.h"
#include "fabric_peer.h"
#include "harness.h"
#include "lcp/am.h"
#include "lcp/remote.h"
#include "lcp/slots.h"
#include "lcp/unet.h"
#include "lcp/vi.h"
#include "lcp/vmmc.h"
#include "link/link.h"
#include "slot_proc.h"
#include "ulnic/abi/unet.h"

namespace abi = ulnic::abi;

namespace {

core::board::Board g_board;
lcp::SlotTable g_t;
fwtest::FabricPeer g_peer;
fwtest::SlotProc g_b;
constexpr uint64_t kNow = 1'000'000;
constexpr uint32_t kMtu = abi::kMtu;
constexpr uint32_t kPeer = fwtest::FabricPeer::kNode;
constexpr uint16_t kPeerSlot = 5;   // the sending slot on node 1
constexpr uint32_t kSlotB = 1;
constexpr uint32_t kTag = 0x7a6;    // B's channel's rx tag
constexpr uint32_t kRx = 8, kFree = 8;

constexpr fwtest::SlotShape kShape{0x1000, 32, 0x2000, 64, 0x3000, 64, 0x10000};
constexpr uint64_t kAreaOff = 0x100000, kAreaLen = 0x10000;  // queue area: Local
constexpr uint64_t kSegOff = 0x200000, kSegLen = 0x40000;    // segment: Local|RemoteWrite
constexpr uint64_t kVa = 0x9000'0000;
constexpr uint32_t kBuf = 0x10000;                           // free buffers: 64 KiB each
constexpr uint8_t kFill = 0x5a;                              // the segment's untouched bytes

uint64_t g_token = 0x100, g_op = 0x1000;
uint32_t g_channel = 0;
uint64_t g_posted = 0, g_taken = 0;  // free-queue entries B pushed; receive descriptors B consumed

uint64_t ctr(abi::Counter c) { return core::status::block().counters[c]; }
uint8_t mbyte(uint8_t seed, uint32_t i) { return uint8_t(i * 131u + (i >> 9) + seed); }

abi::UnetHostWords& host_words() { return *reinterpret_cast<abi::UnetHostWords*>(g_b.base + kAreaOff); }
const abi::UnetNicWords& nic_words() { return *reinterpret_cast<const abi::UnetNicWords*>(g_b.base + kAreaOff + 64); }
const abi::UnetRxDesc& rx(uint64_t n) {
  return reinterpret_cast<const abi::UnetRxDesc*>(g_b.base + kAreaOff + 128)[n % kRx];
}
abi::UnetFreeDesc* free_queue() {
  return reinterpret_cast<abi::UnetFreeDesc*>(g_b.base + kAreaOff + 128 + kRx * sizeof(abi::UnetRxDesc));
}

uint32_t reg(uint64_t off, uint64_t len, uint32_t access) {
  abi::CqEntry c = g_b.run(fwtest::register_entry(off, uint32_t(len), access, kVa + off));
  EXPECT_EQ(c.status, abi::kCqOk);
  return c.result;
}

// B pushes buffer k of the segment (kBuf bytes, or `len`).
void push(uint32_t k, uint32_t len = kBuf) {
  free_queue()[g_posted % kFree] = abi::UnetFreeDesc{k * kBuf, len};
  __atomic_store_n(&host_words().free_produced, ++g_posted, __ATOMIC_RELEASE);
}

// B consumes the next receive descriptor.
void consume() { __atomic_store_n(&host_words().rx_consumed, ++g_taken, __ATOMIC_RELEASE); }

// A message from node 1: `total` bytes of mbyte(seed), in MTU packets.
struct PeerMsg {
  uint64_t op_id = ++g_op;
  uint32_t total;
  uint8_t seed;
  uint32_t tag = kTag;
  uint16_t src_slot = kPeerSlot, dst_slot = kSlotB;

  uint32_t packets() const { return total ? (total + kMtu - 1) / kMtu : 1; }
  abi::WireHeader header(uint32_t k) const {
    abi::WireHeader h = g_peer.packet_header(abi::kWireOpUnet, op_id, total, k, dst_slot, src_slot);
    h.dst_key = tag;
    return h;
  }
  void send(uint32_t k) const {
    static uint8_t bytes[kMtu];
    abi::WireHeader h = header(k);
    for (uint32_t i = 0; i < h.payload_len; ++i) bytes[i] = mbyte(seed, uint32_t(h.dst_addr) + i);
    g_peer.send(h, bytes);
  }
  void send_all() const {
    for (uint32_t k = 0; k < packets(); ++k) send(k);
  }
};

uint64_t placed() { return link::stats().placed; }

// The daemon's kCtrlUnetChannel for B: rx tag kTag from node 1's kPeerSlot.
abi::CtrlCommand channel_command(uint32_t tx_tag) {
  abi::CtrlCommand cmd{};
  cmd.opcode = abi::kCtrlUnetChannel;
  cmd.slot = kSlotB;
  cmd.unet.remote_node = kPeer;
  cmd.unet.remote_slot = kPeerSlot;
  cmd.unet.tx_tag = tx_tag;
  cmd.unet.rx_tag = kTag;
  return cmd;
}

// The segment from `off` on holds `len` bytes of mbyte(seed) (and, with
// `upto`, its own fill after them up to `upto`).
bool landed(uint32_t off, uint32_t len, uint8_t seed, uint32_t upto = 0) {
  for (uint32_t i = 0; i < len; ++i)
    if (g_b.base[kSegOff + off + i] != mbyte(seed, i)) return EXPECT_EQ(i, len);
  for (uint32_t i = off + len; i < upto; ++i)
    if (g_b.base[kSegOff + i] != kFill) return EXPECT_EQ(i, upto);
  return true;
}

bool untouched() { return landed(0, 0, 0, kSegLen); }

// B's kOpUnetEndpoint: its queue area (registration `area`), the segment.
abi::SqEntry endpoint_entry(uint32_t area, uint8_t flags, uint32_t seg_key, uint64_t seg_va, uint64_t seg_len) {
  abi::SqEntry e{};
  e.opcode = abi::kOpUnetEndpoint;
  e.flags = flags;
  e.src_key = area;
  e.src_addr = kVa + kAreaOff;
  e.length = kRx;
  e.access = kFree;
  e.dst_key = seg_key;
  e.dst_addr = seg_va;
  e.reg_offset = seg_len;
  e.user_data = ++g_token;
  return e;
}

}  // namespace

FW_TEST(setup_an_endpoint_and_its_channel) {
  core::board::discover(g_board);
  CHECK(g_board.num_slots >= 2);
  lcp::slots_init(g_t, g_board, 4242);
  lcp::remote_init(g_t);
  lcp::vmmc_init(g_t);
  lcp::vi_init(g_t);
  lcp::am_init(g_t);
  lcp::unet_init(g_t);
  g_b.map(g_t, kNow, kSlotB, kShape, 0x10000);
  CHECK_EQ(g_b.attach(7), abi::kCtrlOk);
  memset(g_b.base + kAreaOff, 0, kAreaLen);
  memset(g_b.base + kSegOff, kFill, kSegLen);
  const uint32_t area = reg(kAreaOff, kAreaLen, abi::kAccessLocal);
  const uint32_t seg = reg(kSegOff, kSegLen, abi::kAccessLocal | abi::kAccessRemoteWrite);
  CHECK_EQ(g_b.run(endpoint_entry(area, 0, seg, kVa + kSegOff, kSegLen)).status, abi::kCqOk);
  const abi::CtrlCommand cmd = channel_command(0x99);
  uint64_t id = ~0ull;
  CHECK_EQ(lcp::unet_control(g_t, cmd, id), abi::kCtrlOk);
  g_channel = uint32_t(id);
  // The daemon's refusals: the tag is taken, tags are nonzero, a remote
  // endpoint that cannot exist, a slot with no process, no such channel.
  EXPECT_EQ(lcp::unet_control(g_t, cmd, id), abi::kCtrlInUse);
  abi::CtrlCommand bad = cmd;
  bad.unet.rx_tag = 0;
  EXPECT_EQ(lcp::unet_control(g_t, bad, id), abi::kCtrlBadCommand);
  bad = cmd;
  bad.unet.rx_tag = kTag + 1;
  bad.unet.remote_slot = abi::kMaxSlots;
  EXPECT_EQ(lcp::unet_control(g_t, bad, id), abi::kCtrlBadCommand);
  bad.unet.remote_slot = 0;
  bad.slot = 0;  // not attached
  EXPECT_EQ(lcp::unet_control(g_t, bad, id), abi::kCtrlBadSlot);
  bad.slot = abi::kMaxSlots;
  EXPECT_EQ(lcp::unet_control(g_t, bad, id), abi::kCtrlBadSlot);
  bad = cmd;
  bad.opcode = abi::kCtrlUnetUnchannel;
  bad.unet.channel = abi::kMaxUnetChannels;
  EXPECT_EQ(lcp::unet_control(g_t, bad, id), abi::kCtrlBadHandle);
  bad.unet.channel = g_channel + 1;  // nobody's
  EXPECT_EQ(lcp::unet_control(g_t, bad, id), abi::kCtrlBadHandle);
}

FW_TEST(the_link_comes_up_with_node_1) {
  CHECK(g_peer.up(g_board, lcp::remote_upcalls()));
  g_peer.acks = true;
  CHECK(g_peer.meet());
}

FW_TEST(a_message_of_many_packets_is_placed_into_its_buffer_by_the_link) {
  push(0);
  push(1);
  const PeerMsg m{.total = 3 * kMtu + 100, .seed = 1};
  const uint64_t before = placed(), msgs = ctr(abi::kCtrUnetMessages);
  for (uint32_t k = 0; k < m.packets(); ++k) {
    m.send(k);
    // The first packet goes to unet.cpp, which names the buffer; the link
    // places the middle ones; the last goes to unet.cpp again.
    const uint32_t by_link = k == 0 ? 0 : k + 1 < m.packets() ? k : m.packets() - 2;
    EXPECT_EQ(placed(), before + by_link);
    if (k + 1 < m.packets()) EXPECT_EQ(rx(0).seq, 0u);  // published after its last packet only
  }
  EXPECT_EQ(g_peer.verdict(m.op_id), abi::kCqOk);
  EXPECT_EQ(rx(0).seq, 1u);
  EXPECT_EQ(rx(0).channel, g_channel);
  EXPECT_EQ(rx(0).flags, 0u);
  EXPECT_EQ(rx(0).length, m.total);
  EXPECT_EQ(rx(0).offset, 0u);
  EXPECT_EQ(rx(0).buf_len, kBuf);
  EXPECT(landed(0, m.total, 1, kBuf));
  EXPECT_EQ(nic_words().free_taken, 1u);
  EXPECT_EQ(nic_words().delivered, 1u);
  EXPECT_EQ(ctr(abi::kCtrUnetMessages), msgs + 1);
  abi::EqEntry ev;
  CHECK(g_b.event(ev));
  EXPECT_EQ(ev.type, uint32_t(abi::kEqUnetArrival));
  EXPECT_EQ(ev.length, m.total);
  consume();
  // A short one goes into its descriptor: no buffer taken.
  const PeerMsg s{.total = abi::kUnetInline, .seed = 2};
  s.send_all();
  EXPECT_EQ(rx(1).seq, 2u);
  EXPECT_EQ(rx(1).flags, uint8_t(abi::kUnetRxInline));
  EXPECT_EQ(rx(1).length, abi::kUnetInline);
  for (uint32_t i = 0; i < abi::kUnetInline; ++i) EXPECT_EQ(rx(1).data[i], mbyte(2, i));
  EXPECT_EQ(nic_words().free_taken, 1u);
  consume();
  memset(g_b.base + kSegOff, kFill, kSegLen);
}

FW_TEST(lies_of_a_peer_are_dropped_and_counted) {
  const uint64_t bad_tag = ctr(abi::kCtrUnetBadTag), drops = ctr(abi::kCtrUnetDrops);
  PeerMsg unknown{.total = 2 * kMtu, .seed = 3};
  unknown.tag = kTag + 1;
  PeerMsg wrong_sender{.total = 100, .seed = 4};
  wrong_sender.src_slot = kPeerSlot + 1;
  PeerMsg wrong_slot{.total = 100, .seed = 5};
  wrong_slot.dst_slot = 0;
  PeerMsg no_slot{.total = 100, .seed = 6};
  no_slot.tag = 0x12345;
  no_slot.dst_slot = 0xffff;
  const PeerMsg* lies[] = {&unknown, &wrong_sender, &wrong_slot, &no_slot};
  for (const PeerMsg* m : lies) {
    m->send_all();
    EXPECT_EQ(g_peer.verdict(m->op_id), abi::kCqOk);  // the sender learns nothing
  }
  EXPECT_EQ(ctr(abi::kCtrUnetBadTag), bad_tag + 4);
  EXPECT_EQ(nic_words().drops_bad_tag, 2u);  // the two that named B's slot
  // Lengths: none, and more than a message may have.
  PeerMsg empty{.total = 0, .seed = 7};
  empty.send_all();
  PeerMsg huge{.total = abi::kUnetMaxMessage + 1, .seed = 8};
  huge.send(0);
  huge.send(huge.packets() - 1);
  EXPECT_EQ(nic_words().drops_too_long, 2u);
  EXPECT_EQ(ctr(abi::kCtrUnetDrops), drops + 2);
  // A packet of no message it began (its first never came).
  PeerMsg orphan{.total = 2 * kMtu, .seed = 9};
  orphan.send(1);
  EXPECT_EQ(nic_words().free_taken, 1u);
  EXPECT_EQ(rx(2).seq, 0u);
  EXPECT(untouched());
  EXPECT_EQ(nic_words().delivered, 2u);
}

FW_TEST(bytes_beyond_the_message_are_not_written) {
  // A 100-byte message whose second packet claims bytes 4096..8191 of it:
  // dropped, and buffer 1 holds its 100 bytes and nothing after them.
  const PeerMsg m{.total = 100, .seed = 10};
  abi::WireHeader h = m.header(0);
  h.flags = abi::kWireFirst;
  static uint8_t bytes[kMtu];
  for (uint32_t i = 0; i < kMtu; ++i) bytes[i] = mbyte(10, i);
  g_peer.send(h, bytes);
  h.flags = abi::kWireLast;
  h.dst_addr = kMtu;
  h.payload_len = uint16_t(kMtu);
  g_peer.send(h, bytes);
  EXPECT_EQ(rx(2).seq, 3u);
  EXPECT_EQ(rx(2).length, 100u);
  EXPECT_EQ(rx(2).offset, kBuf);
  EXPECT(landed(kBuf, 100, 10, kSegLen));
  consume();
  memset(g_b.base + kSegOff, kFill, kSegLen);
}

FW_TEST(full_queues_and_short_buffers_drop_and_count) {
  // Free queue empty (B pushed 2, both taken).
  const PeerMsg a{.total = 1000, .seed = 11};
  a.send_all();
  EXPECT_EQ(nic_words().drops_free_empty, 1u);
  EXPECT_EQ(rx(3).seq, 0u);
  // A buffer shorter than the message comes back in a dropped descriptor.
  push(2, 500);
  const PeerMsg b{.total = 1000, .seed = 12};
  b.send_all();
  EXPECT_EQ(nic_words().drops_too_long, 3u);
  EXPECT_EQ(rx(3).seq, 4u);
  EXPECT_EQ(rx(3).flags, uint8_t(abi::kUnetRxDropped));
  EXPECT_EQ(rx(3).offset, 2 * kBuf);
  EXPECT_EQ(rx(3).buf_len, 500u);
  EXPECT(untouched());
  // So does one outside the segment.
  free_queue()[g_posted % kFree] = abi::UnetFreeDesc{uint32_t(kSegLen - 100), kBuf};
  __atomic_store_n(&host_words().free_produced, ++g_posted, __ATOMIC_RELEASE);
  b.send_all();
  EXPECT_EQ(rx(4).flags, uint8_t(abi::kUnetRxDropped));
  EXPECT(untouched());
  // Receive queue full: B has consumed 3 of the 5 descriptors published, so
  // 6 more inline messages fill it (8) and the 7th is dropped.
  const uint64_t full = nic_words().drops_rx_full;
  for (uint8_t i = 0; i < 6; ++i) PeerMsg{.total = 8, .seed = uint8_t(20 + i)}.send_all();
  EXPECT_EQ(rx(10).seq, 11u);
  EXPECT_EQ(nic_words().drops_rx_full, full);
  PeerMsg{.total = 8, .seed = 30}.send_all();
  EXPECT_EQ(nic_words().drops_rx_full, full + 1);
  EXPECT_EQ(rx(11).seq, 4u);  // descriptor 11 is descriptor 3's place: not written again
  // A consumed count no process could have written reads as full too.
  __atomic_store_n(&host_words().rx_consumed, ~0ull, __ATOMIC_RELEASE);
  PeerMsg{.total = 8, .seed = 31}.send_all();
  EXPECT_EQ(nic_words().drops_rx_full, full + 2);
  g_taken = 11;
  __atomic_store_n(&host_words().rx_consumed, g_taken, __ATOMIC_RELEASE);
}

FW_TEST(an_aborted_message_gives_its_buffer_back) {
  push(3);
  const PeerMsg m{.total = 3 * kMtu, .seed = 40};
  m.send(0);
  m.send(1);
  abi::WireHeader h = m.header(2);
  h.flags = abi::kWireLast | abi::kWireAbort;
  h.payload_len = 0;
  g_peer.send(h, nullptr);
  EXPECT_EQ(rx(11).seq, 12u);
  EXPECT_EQ(rx(11).flags, uint8_t(abi::kUnetRxDropped));
  EXPECT_EQ(rx(11).offset, 3 * kBuf);
  EXPECT_EQ(rx(11).length, 0u);
}

FW_TEST(a_detached_slot_takes_its_channels_with_it) {
  lcp::slot_detach(g_t, kSlotB);
  lcp::remote_slot_detached(kSlotB);
  lcp::unet_slot_detached(kSlotB);
  const uint64_t bad_tag = ctr(abi::kCtrUnetBadTag);
  PeerMsg{.total = 8, .seed = 50}.send_all();
  EXPECT_EQ(ctr(abi::kCtrUnetBadTag), bad_tag + 1);
  // The tag is free for the next process.
  CHECK_EQ(g_b.attach(8), abi::kCtrlOk);
  uint64_t id = 0;
  EXPECT_EQ(lcp::unet_control(g_t, channel_command(1), id), abi::kCtrlOk);
}

// ---------------------------------------------------------------------
// U-Net/MM (abi/unet.h, kSqUnetMm): B's segment is now its process's own
// memory at kMmVa, which the NIC reaches only through its TLB, a page at a
// time; B maps pages onto frames of its slot's heap through the fill ring.
// Checked: a send whose pages are not all mapped waits at the head of the
// SQ and posts a miss for the first missing page (once), then goes once B
// fills it, its packets gathered from frames that are not adjacent; a
// message whose buffer is not mapped is dropped and counted, its miss
// posted; fills outside the segment or the heap are refused; an unmap makes
// the page miss again; a head that waits for a fill lets the NIC sleep.

namespace {

constexpr uint64_t kMmVa = 0x7000'0000;
constexpr uint32_t kMmPages = 16;
constexpr uint64_t kFrames = kSegOff;  // frames: heap pages from here
constexpr uint32_t kSendTag = 1;       // the channel's tx tag (made by the test before)
uint64_t g_fills = 0;

abi::UnetMmWords& mm_words() {
  return *reinterpret_cast<abi::UnetMmWords*>(g_b.base + kAreaOff + abi::unet_area_bytes(kRx, kFree));
}
abi::UnetTlbFill* fill_ring() {
  return reinterpret_cast<abi::UnetTlbFill*>(g_b.base + kAreaOff + abi::unet_area_bytes(kRx, kFree) +
                                             sizeof(abi::UnetMmWords));
}
// B maps segment page `page` onto the frame at slot offset `frame` (or unmaps it).
void fill(uint64_t page, uint64_t frame) {
  fill_ring()[g_fills % abi::kUnetFillEntries] = abi::UnetTlbFill{kMmVa / abi::kUnetPage + page, frame};
  __atomic_store_n(&host_words().fills_produced, ++g_fills, __ATOMIC_RELEASE);
}
void service(int passes = 4) {
  for (int i = 0; i < passes; ++i) {
    link::poll_rx(hal::clint::now());
    lcp::remote_poll(g_t);
    lcp::slots_service(g_t);
    link::poll_timers(hal::clint::now());
  }
  g_peer.drain();
}
// The U-Net packets node 1 heard since it had heard `since`.
uint32_t unet_heard(uint64_t since, const fwtest::FabricPeer::Heard** out, uint32_t max) {
  uint32_t n = 0;
  for (uint64_t i = since; i < g_peer.logged && n < max; ++i) {
    const auto& e = g_peer.log[i % fwtest::FabricPeer::kKept];
    if (e.h.op == abi::kWireOpUnet) out[n++] = &e;
  }
  return n;
}

abi::SqEntry mm_send(uint32_t off, uint32_t len) {
  abi::SqEntry e{};
  e.opcode = abi::kOpUnetSend;
  e.dst_key = g_channel;
  e.src_addr = off;
  e.length = len;
  e.user_data = ++g_token;
  return e;
}

}  // namespace

FW_TEST(mm_an_endpoint_over_process_memory) {
  const uint32_t area = reg(kAreaOff, kAreaLen, abi::kAccessLocal);
  memset(g_b.base + kAreaOff, 0, kAreaLen);
  g_posted = g_taken = 0;
  abi::SqEntry e = endpoint_entry(area, abi::kSqUnetMm, 1, kMmVa, kMmPages * abi::kUnetPage);
  EXPECT_EQ(g_b.run(e).status, abi::kCqBadAddress);  // a registration (key 1): not for U-Net/MM
  e.dst_key = 0;
  CHECK_EQ(g_b.run(e).status, abi::kCqOk);
  uint64_t id = 0;
  abi::CtrlCommand cmd = channel_command(kSendTag);
  cmd.opcode = abi::kCtrlUnetUnchannel;
  cmd.unet.channel = g_channel;
  (void)lcp::unet_control(g_t, cmd, id);  // the last test's, if it is still there
  CHECK_EQ(lcp::unet_control(g_t, channel_command(kSendTag), id), abi::kCtrlOk);
  g_channel = uint32_t(id);
  for (uint32_t i = 0; i < 4 * abi::kUnetPage; ++i) g_b.base[kFrames + i] = uint8_t(i * 7 + 3);
  service();  // what the tests before left to say
  abi::EqEntry ev;
  while (g_b.event(ev)) {
  }
}

FW_TEST(mm_a_send_waits_for_its_pages_then_gathers_them) {
  // 6000 bytes from segment offset 100: pages 0 and 1, mapped to frames 3 and 1.
  const uint64_t misses = ctr(abi::kCtrUnetTlbMisses), heard = g_peer.logged;
  const abi::SqEntry e = mm_send(100, 6000);
  g_b.submit(e);
  service();
  abi::EqEntry ev{};
  CHECK(g_b.event(ev));
  EXPECT_EQ(ev.type, uint32_t(abi::kEqUnetTlbMiss));
  EXPECT_EQ(ev.offset, kMmVa / abi::kUnetPage);
  EXPECT_EQ(ev.export_handle, uint32_t(e.user_data));
  EXPECT(!g_b.event(ev));  // once, however often the NIC looks
  const fwtest::FabricPeer::Heard* got[4];
  EXPECT_EQ(unet_heard(heard, got, 4), 0u);
  EXPECT_EQ(mm_words().tlb_misses, 1u);
  // Waiting for B, the NIC may sleep (B rings after its fill).
  CHECK(lcp::slots_prepare_sleep(g_t));
  lcp::slots_woke(g_t);
  fill(0, kFrames + 3 * abi::kUnetPage);
  EXPECT(!lcp::slots_prepare_sleep(g_t));  // a fill waits: not now
  service();
  EXPECT_EQ(mm_words().fills_taken, 1u);
  CHECK(g_b.event(ev));  // now the second page
  EXPECT_EQ(ev.offset, kMmVa / abi::kUnetPage + 1);
  EXPECT_EQ(unet_heard(heard, got, 4), 0u);
  fill(1, kFrames + 1 * abi::kUnetPage);
  service();
  CHECK_EQ(unet_heard(heard, got, 4), 2u);
  const auto& p0 = *got[0];
  const auto& p1 = *got[1];
  EXPECT_EQ(p0.h.op, uint8_t(abi::kWireOpUnet));
  EXPECT_EQ(p0.h.dst_key, kSendTag);
  EXPECT_EQ(p0.h.dst_addr, 0u);
  EXPECT_EQ(p0.h.payload_len, abi::kUnetPage - 100);  // to its page's end
  EXPECT_EQ(p1.h.dst_addr, abi::kUnetPage - 100);
  EXPECT_EQ(p1.h.payload_len, 6000 - (abi::kUnetPage - 100));
  for (uint32_t i = 0; i < fwtest::FabricPeer::kKeptPayload; ++i) {
    EXPECT_EQ(p0.payload[i], g_b.base[kFrames + 3 * abi::kUnetPage + 100 + i]);
    EXPECT_EQ(p1.payload[i], g_b.base[kFrames + 1 * abi::kUnetPage + i]);
  }
  EXPECT_EQ(ctr(abi::kCtrUnetTlbMisses), misses + 2);
  EXPECT_EQ(mm_words().tlb_hits, 2u);
  // Node 1's verdict completes it.
  abi::WireHeader v = g_peer.header();
  v.op = abi::kWireOpOkThrough;
  v.dst_addr = p1.h.seq;
  g_peer.send(v, nullptr);
  service();
  abi::CqEntry c{};
  CHECK(g_b.reap(c));
  EXPECT_EQ(c.user_data, e.user_data);
  EXPECT_EQ(c.status, abi::kCqOk);
}

FW_TEST(mm_a_message_into_an_unmapped_buffer_is_dropped_and_its_miss_posted) {
  // Buffer: pages 4..5 of the segment, not mapped.
  free_queue()[g_posted % kFree] = abi::UnetFreeDesc{4 * abi::kUnetPage, 2 * abi::kUnetPage};
  __atomic_store_n(&host_words().free_produced, ++g_posted, __ATOMIC_RELEASE);
  const PeerMsg m{.total = 5000, .seed = 60};
  m.send_all();
  EXPECT_EQ(mm_words().drops_tlb_miss, 1u);
  EXPECT_EQ(rx(0).seq, 1u);
  EXPECT_EQ(rx(0).flags, uint8_t(abi::kUnetRxDropped));  // the buffer back
  EXPECT_EQ(rx(0).offset, 4 * abi::kUnetPage);
  consume();
  abi::EqEntry ev{};
  CHECK(g_b.event(ev));
  EXPECT_EQ(ev.type, uint32_t(abi::kEqUnetTlbMiss));
  EXPECT_EQ(ev.offset, kMmVa / abi::kUnetPage + 4);
  EXPECT_EQ(ev.export_handle, 0u);
  // Mapped (frames 0 and 2), pushed again: the next one lands, page by page.
  fill(4, kFrames + 2 * abi::kUnetPage);
  fill(5, kFrames + 0 * abi::kUnetPage);
  service();
  free_queue()[g_posted % kFree] = abi::UnetFreeDesc{4 * abi::kUnetPage, 2 * abi::kUnetPage};
  __atomic_store_n(&host_words().free_produced, ++g_posted, __ATOMIC_RELEASE);
  const PeerMsg n{.total = 5000, .seed = 61};
  n.send_all();
  EXPECT_EQ(rx(1).seq, 2u);
  EXPECT_EQ(rx(1).flags, 0u);
  EXPECT_EQ(rx(1).length, 5000u);
  for (uint32_t i = 0; i < 5000; ++i) {
    const uint64_t at = i < abi::kUnetPage ? kFrames + 2 * abi::kUnetPage + i : kFrames + i - abi::kUnetPage;
    if (!EXPECT_EQ(g_b.base[at], mbyte(61, i))) break;
  }
  consume();
  CHECK(g_b.event(ev));
  EXPECT_EQ(ev.type, uint32_t(abi::kEqUnetArrival));
  EXPECT_EQ(mm_words().drops_tlb_miss, 1u);
}

FW_TEST(mm_fills_outside_the_segment_or_the_heap_are_refused_and_unmaps_miss_again) {
  const uint64_t refused = mm_words().fills_refused;
  fill(kMmPages, kFrames);                                 // a page beyond the segment
  fill(6, 0);                                              // the slot's rings, not its heap
  fill(6, kFrames + 100);                                  // not a page
  fill(6, g_b.layout.heap_offset + g_b.layout.heap_size);  // past the heap
  service();
  EXPECT_EQ(mm_words().fills_refused, refused + 4);
  // Page 6 is still not mapped; page 0 is, until it is unmapped.
  abi::SqEntry e = mm_send(6 * abi::kUnetPage, 10);
  g_b.submit(e);
  service();
  abi::EqEntry ev{};
  CHECK(g_b.event(ev));
  EXPECT_EQ(ev.offset, kMmVa / abi::kUnetPage + 6);
  fill(6, kFrames + 3 * abi::kUnetPage);
  fill(0, abi::kUnetUnmap);
  service();
  e = mm_send(0, 10);
  g_b.submit(e);
  service();
  CHECK(g_b.event(ev));
  EXPECT_EQ(ev.offset, kMmVa / abi::kUnetPage);
  EXPECT_EQ(ev.export_handle, uint32_t(e.user_data));
}

FW_TEST(mm_a_page_unmapped_while_a_message_arrives_drops_it) {
  // Buffer pages 4..5 (mapped before); page 5 goes between the packets.
  free_queue()[g_posted % kFree] = abi::UnetFreeDesc{4 * abi::kUnetPage, 2 * abi::kUnetPage};
  __atomic_store_n(&host_words().free_produced, ++g_posted, __ATOMIC_RELEASE);
  const uint64_t drops = mm_words().drops_tlb_miss;
  const PeerMsg m{.total = 5000, .seed = 62};
  m.send(0);
  fill(5, abi::kUnetUnmap);
  service();
  const uint8_t before = g_b.base[kFrames + 0 * abi::kUnetPage + 100];
  m.send(1);
  EXPECT_EQ(rx(2).seq, 3u);
  EXPECT_EQ(rx(2).flags, uint8_t(abi::kUnetRxDropped));  // the buffer back
  EXPECT_EQ(rx(2).offset, 4 * abi::kUnetPage);
  EXPECT_EQ(mm_words().drops_tlb_miss, drops + 1);
  EXPECT_EQ(g_b.base[kFrames + 0 * abi::kUnetPage + 100], before);  // nothing went to the frame page 5 had
  consume();
}
