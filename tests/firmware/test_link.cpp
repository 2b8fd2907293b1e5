// The reliable link's receive side on the real board's fabric (two ports:
// this NIC is node 0, and the test plays node 1 by writing its ring and
// reading ours). Above all direct placement (link::place_next): the packets
// of a placed stream land in memory with no upcall only while every header
// word is what the protocol layer was told, and anything else -- another
// operation, a gap, a duplicate, the last packet, bytes past the end, a
// changed table, injected loss -- goes the usual way. And selective repeat
// on a lossy link: packets beyond a gap are held and delivered once it fills,
// standalone ACKs say which are held, and the sender then sends again only
// what was lost.
#include <string.h>

#include "core/board.h"
#include "fabric_peer.h"
#include "harness.h"
#include "link/link.h"
#include "ulnic/abi/fabric.h"

namespace abi = ulnic::abi;

namespace {

constexpr uint64_t kOp = 0x4201;
constexpr uint16_t kLen = 1024;  // payload per packet (any length the stream's packets share)

core::board::Board g_board;
fwtest::FabricPeer g_peer;  // node 1 (acknowledges nothing unless a test says so)

// What the protocol layer saw.
uint32_t g_delivered;
abi::WireHeader g_last;
uint32_t g_seqs[64];                      // the seq of every delivery, by g_delivered % 64
uint8_t g_mem[16 * kLen];                 // where the test's "protocol layer" places bytes
uint64_t g_epoch = 1;
bool g_place_next;                        // the upcall asks the link to place what follows
uint64_t g_hi = sizeof g_mem;

void deliver(uint32_t src, const abi::WireHeader& h, const uint8_t* payload) {
  g_seqs[g_delivered++ % 64] = h.seq;
  g_last = h;
  if (src != fwtest::FabricPeer::kNode || h.dst_addr > sizeof g_mem || h.payload_len > sizeof g_mem - h.dst_addr)
    return;
  memcpy(g_mem + h.dst_addr, payload, h.payload_len);
  if (g_place_next) link::place_next(src, h, abi::kWireFirst, reinterpret_cast<uint64_t>(g_mem), g_hi, &g_epoch);
}
uint32_t g_lost;  // peer_lost upcalls
void peer_lost(uint32_t) { ++g_lost; }
// ok_through upcalls (abi::kWireAckOk from node 1): how many, the last one's
// seq, and how many packets had been delivered when it came.
uint32_t g_oks, g_ok_seq, g_ok_delivered;
void ok_through(uint32_t src, uint32_t seq) {
  if (src != fwtest::FabricPeer::kNode) return;
  ++g_oks;
  g_ok_seq = seq;
  g_ok_delivered = g_delivered;
}
bool payload_valid(uint32_t, uint64_t) { return true; }

uint8_t byte_at(uint64_t offset, uint32_t salt) { return uint8_t(offset * 13 + salt * 7 + 1); }

// The header node 1 sends for bytes [offset, offset + kLen) of operation `op`.
abi::WireHeader data(uint64_t op, uint64_t offset, uint8_t flags = 0) {
  abi::WireHeader h = g_peer.header();
  h.flags = flags;
  h.payload_len = kLen;
  h.op = abi::kWireOpSend;
  h.dst_slot = 2;
  h.dst_key = 0x77;
  h.dst_addr = offset;
  h.op_id = op;
  h.op_length = sizeof g_mem;
  h.src_slot = 3;
  return h;
}

// Node 1 sends `h` with the next sequence number (or `seq`), its payload
// stamped with `salt`; our link then takes what arrived.
void send(const abi::WireHeader& h, uint32_t salt = 0, uint32_t seq = 0) {
  uint8_t payload[kLen];
  for (uint32_t i = 0; i < h.payload_len; ++i) payload[i] = byte_at(h.dst_addr + i, salt);
  g_peer.send(h, payload, seq);
}

bool landed(uint64_t offset, uint32_t len, uint32_t salt) {
  for (uint32_t i = 0; i < len; ++i)
    if (g_mem[offset + i] != byte_at(offset + i, salt)) return false;
  return true;
}

// Our ACKs and data toward node 1, taken off its ring: the last header.
abi::WireHeader take_from_us() { return g_peer.drain(); }

const abi::LinkStatus& status_of_peer() { return g_peer.status(); }

}  // namespace

FW_TEST(the_link_comes_up_on_the_fabric_and_learns_the_peer) {
  core::board::discover(g_board);
  CHECK(g_peer.up(g_board, link::Upcalls{deliver, peer_lost, payload_valid, nullptr, ok_through}));
  // At boot the link announces itself: an ACK that acknowledges nothing and
  // carries our incarnation (a peer that knew an earlier boot forgets it now,
  // not when its first packet to this one is refused).
  const abi::Packet* hello = g_peer.from_us.peek();
  CHECK(hello != nullptr);
  EXPECT_EQ(hello->h.type, abi::kPktAck);
  EXPECT_EQ(hello->h.ack, 0u);
  EXPECT_EQ(hello->h.dst_incarnation, 0u);
  EXPECT(hello->h.src_incarnation != 0);
  // The peer's first packet does not know our incarnation yet.
  abi::WireHeader h = data(0x10, 0, abi::kWireFirst);
  EXPECT_EQ(h.dst_incarnation, 0u);
  send(h);
  CHECK_EQ(g_delivered, 1u);
  // Our ACK, due now, tells it.
  CHECK(g_peer.learn_incarnation());
  EXPECT_EQ(status_of_peer().peer_incarnation, fwtest::FabricPeer::kIncarnation);
}

FW_TEST(a_placed_stream_lands_without_upcalls_and_in_order) {
  g_place_next = true;
  send(data(kOp, 0, abi::kWireFirst), 1);
  CHECK_EQ(g_delivered, 2u);
  g_place_next = false;  // from here on only the link places
  uint64_t rx = status_of_peer().rx_data;
  for (uint64_t k = 1; k < 8; ++k) send(data(kOp, k * kLen), 1);
  EXPECT_EQ(g_delivered, 2u);
  EXPECT(landed(0, 8 * kLen, 1));
  EXPECT_EQ(status_of_peer().rx_data, rx + 7);
  EXPECT_EQ(status_of_peer().expected, g_peer.next_seq);
  // The last packet is the protocol layer's (its verdict, its notification).
  send(data(kOp, 8 * kLen, abi::kWireLast), 1);
  EXPECT_EQ(g_delivered, 3u);
  EXPECT_EQ(g_last.flags, abi::kWireLast);
  EXPECT_EQ(g_last.seq, g_peer.next_seq - 1);
  // Placed packets are acknowledged like any other.
  link::poll_timers(hal::clint::now() + hal::clint::us_to_ticks(1'000'000));
  EXPECT_EQ(take_from_us().ack, g_peer.next_seq - 1);
}

FW_TEST(anything_but_the_next_packet_of_the_stream_goes_the_usual_way) {
  auto arm = [](uint64_t op, uint32_t salt) {
    g_place_next = true;
    send(data(op, 0, abi::kWireFirst), salt);
    g_place_next = false;
  };
  // Another operation.
  arm(0x51, 2);
  uint32_t before = g_delivered;
  send(data(0x52, kLen), 2);
  EXPECT_EQ(g_delivered, before + 1);
  EXPECT_EQ(g_last.op_id, 0x52u);
  // The same operation, but not where the previous packet ended.
  arm(0x53, 3);
  before = g_delivered;
  send(data(0x53, 3 * kLen), 3);
  EXPECT_EQ(g_delivered, before + 1);
  // Another field of the header (the destination slot).
  arm(0x54, 4);
  before = g_delivered;
  abi::WireHeader h = data(0x54, kLen);
  h.dst_slot = 9;
  send(h, 4);
  EXPECT_EQ(g_delivered, before + 1);
  // The table behind the translation changed.
  arm(0x55, 5);
  ++g_epoch;
  before = g_delivered;
  send(data(0x55, kLen), 5);
  EXPECT_EQ(g_delivered, before + 1);
  // Bytes past the end the protocol layer gave.
  g_hi = 2 * kLen + kLen / 2;
  arm(0x56, 6);
  before = g_delivered;
  send(data(0x56, kLen), 6);  // ends at 2 kLen: placed
  EXPECT_EQ(g_delivered, before);
  EXPECT(landed(kLen, kLen, 6));
  memset(g_mem + 2 * kLen, 0, kLen);
  send(data(0x56, 2 * kLen), 6);  // would end past hi: the protocol layer's to refuse
  EXPECT_EQ(g_delivered, before + 1);
  g_hi = sizeof g_mem;
}

FW_TEST(gaps_and_duplicates_in_a_placed_stream_place_nothing) {
  g_place_next = true;
  send(data(0x61, 0, abi::kWireFirst), 7);
  g_place_next = false;
  uint32_t before = g_delivered;
  const abi::LinkStatus& s = status_of_peer();
  uint64_t dups = s.duplicates, rx = s.rx_data;
  uint32_t expected = s.expected;
  memset(g_mem, 0, sizeof g_mem);
  // A packet from beyond a gap: dropped (go-back-N resends it), not placed.
  send(data(0x61, kLen), 7, g_peer.next_seq + 1);
  // An old packet again: dropped, not placed.
  send(data(0x61, kLen), 7, g_peer.next_seq - 1);
  EXPECT_EQ(g_delivered, before);
  EXPECT_EQ(status_of_peer().duplicates, dups + 2);
  EXPECT_EQ(status_of_peer().rx_data, rx);
  EXPECT_EQ(status_of_peer().expected, expected);
  for (uint32_t i = 0; i < sizeof g_mem; ++i) CHECK_EQ(g_mem[i], 0);
  // The packet that was next all along still is.
  send(data(0x61, kLen), 7);
  EXPECT_EQ(g_delivered, before);
  EXPECT(landed(kLen, kLen, 7));
}

FW_TEST(a_placed_packet_carries_its_ack) {
  // A packet of ours toward node 1, then a placed packet that acknowledges it.
  abi::WireHeader mine{};
  mine.op = abi::kWireOpMail;
  uint32_t seq = link::send(fwtest::FabricPeer::kNode, mine, 0, 0, ~0u, 0);
  CHECK(seq != 0);
  take_from_us();
  EXPECT_EQ(status_of_peer().acked, seq - 1);
  g_place_next = true;
  send(data(0x71, 0, abi::kWireFirst), 8);
  g_place_next = false;
  uint32_t before = g_delivered;
  abi::WireHeader h = data(0x71, kLen);
  h.ack = seq;
  send(h, 8);
  EXPECT_EQ(g_delivered, before);
  EXPECT_EQ(status_of_peer().acked, seq);
}

FW_TEST(injected_loss_turns_placement_off) {
  g_place_next = true;
  send(data(0x81, 0, abi::kWireFirst), 9);
  link::set_rx_drop(1, 1);  // every packet meets the dice (and almost all pass)
  uint32_t before = g_delivered;
  send(data(0x81, kLen), 9);
  EXPECT_EQ(g_delivered, before + 1);
  // ... and asking again does not turn it back on.
  send(data(0x81, 2 * kLen), 9);
  EXPECT_EQ(g_delivered, before + 2);
  g_place_next = false;
  link::set_rx_drop(0, 1);
}

namespace {

// The data packets our link sent node 1 since the last call, by seq (the
// ring taken raw: FabricPeer::drain keeps only the ones next in order).
struct Resent {
  uint32_t seqs[64];
  uint8_t flags[64];
  uint32_t n;
  bool has(uint32_t seq) const {
    for (uint32_t i = 0; i < n; ++i)
      if (seqs[i] == seq) return true;
    return false;
  }
  // Did the packet with `seq` say OK (abi::kWireAckOk)? (false if not sent)
  bool says_ok(uint32_t seq) const {
    for (uint32_t i = 0; i < n; ++i)
      if (seqs[i] == seq) return flags[i] & abi::kWireAckOk;
    return false;
  }
};
Resent take_data_from_us() {
  Resent r{};
  while (const abi::Packet* p = g_peer.from_us.peek()) {
    if (p->h.type == abi::kPktData && r.n < 64) r.flags[r.n] = p->h.flags, r.seqs[r.n++] = p->h.seq;
    g_peer.from_us.pop();
  }
  g_peer.from_us.release();
  return r;
}

// Node 1's standalone ACK: cumulative `ack`, and selective bits (bit i: it
// holds our packet ack + 2 + i).
void ack_from_peer(uint32_t ack, uint64_t bits) {
  abi::WireHeader h = g_peer.header();
  h.type = abi::kPktAck;
  h.ack = ack;
  h.dst_addr = bits;
  g_peer.send(h, nullptr, g_peer.next_seq);  // (an ACK's seq is not looked at; node 1's next stays next)
}

uint64_t at(uint64_t us) { return hal::clint::now() + hal::clint::us_to_ticks(us); }

// Node 1's ACK, then our timers at the moment it came: what the ACK itself
// calls for goes, and no timeout fires. (Timers run at a later clock read
// could: the ACK restarts the retransmission timer, 1 ms on a lossy link,
// and this vCPU may lose its CPU in between -- it did, under load.)
void ack_then_timers(uint32_t ack, uint64_t bits) {
  const uint64_t t = hal::clint::now();
  ack_from_peer(ack, bits);
  link::poll_timers(t);
}

// Four packets of ours toward node 1 (taken off its ring): the first's seq,
// or 0 if one was not sent.
uint32_t send_four() {
  abi::WireHeader mine{};
  mine.op = abi::kWireOpMail;
  uint32_t s = 0;
  bool sent = true;
  for (uint32_t i = 0; i < 4; ++i) {
    uint32_t seq = link::send(fwtest::FabricPeer::kNode, mine, 0, 0, ~0u, 0);
    sent = sent && seq != 0;
    if (i == 0) s = seq;
  }
  return take_data_from_us().n == 4 && sent ? s : 0;
}

// Our timers run at `when`: a timeout, whose probe is `oldest` and `newest` again.
bool probe_at(uint64_t when, uint32_t oldest, uint32_t newest) {
  link::poll_timers(when);
  Resent r = take_data_from_us();
  return EXPECT_EQ(r.n, 2u) && EXPECT(r.has(oldest) && r.has(newest));
}

}  // namespace

FW_TEST(a_lossy_link_holds_packets_beyond_a_gap_and_delivers_them_in_order_once_it_fills) {
  link::set_rx_drop(1, 1);  // a lossy link (the dice drop 1 in 65536: none of these, seeded)
  const uint32_t gap = g_peer.next_seq, before = g_delivered;
  const uint64_t held = link::stats().held;
  memset(g_mem, 0, sizeof g_mem);
  // Two packets from beyond the gap: held, not delivered.
  send(data(0x91, kLen), 11, gap + 1);
  send(data(0x91, 2 * kLen), 11, gap + 2);
  EXPECT_EQ(g_delivered, before);
  EXPECT_EQ(link::stats().held, held + 2);
  // Our ACK goes at once and says which are held.
  link::poll_timers(hal::clint::now());
  abi::WireHeader ack = take_from_us();
  EXPECT_EQ(ack.type, abi::kPktAck);
  EXPECT_EQ(ack.ack, gap - 1);
  EXPECT_EQ(ack.dst_addr, 0b11u);
  // One sent again before the gap fills is not held (nor delivered) twice;
  // one more than a window ahead is not held at all.
  send(data(0x91, kLen), 11, gap + 1);
  send(data(0x91, 3 * kLen), 11, gap + link::kLossyWindow);
  EXPECT_EQ(link::stats().held, held + 2);
  EXPECT_EQ(g_delivered, before);
  // The gap fills: all three are delivered, in order, with their bytes.
  send(data(0x91, 0, abi::kWireFirst), 11, gap);
  CHECK_EQ(g_delivered, before + 3);
  for (uint32_t i = 0; i < 3; ++i) EXPECT_EQ(g_seqs[(before + i) % 64], gap + i);
  EXPECT(landed(0, 3 * kLen, 11));
  g_peer.next_seq = gap + 3;
  EXPECT_EQ(status_of_peer().expected, gap + 3);
  // ... and the next ACK holds nothing back.
  link::poll_timers(at(1'000'000));
  ack = take_from_us();
  EXPECT_EQ(ack.ack, gap + 2);
  EXPECT_EQ(ack.dst_addr, 0u);
  link::set_rx_drop(0, 1);
}

FW_TEST(selective_acks_make_the_sender_resend_only_what_was_lost) {
  link::set_rx_drop(1, 1);
  const uint64_t sent = hal::clint::now();  // before their timer started (ack_then_timers says why)
  const uint32_t s = send_four();
  CHECK(s != 0);
  const uint64_t sacked = link::stats().sacked;
  // Node 1 holds s + 1 and s + 3: s and s + 2, sent before s + 3, were lost,
  // and only they go again, before any timeout.
  ack_from_peer(s - 1, 0b101);
  EXPECT_EQ(link::stats().sacked, sacked + 2);
  link::poll_timers(sent);
  Resent r = take_data_from_us();
  EXPECT_EQ(r.n, 2u);
  EXPECT(r.has(s));
  EXPECT(r.has(s + 2));
  // The same ACK again (its copy, or a stale one) sends nothing more.
  ack_then_timers(s - 1, 0b101);
  EXPECT_EQ(take_data_from_us().n, 0u);
  // A timeout sends a probe: the oldest unacknowledged and the newest.
  probe_at(at(300'000), s, s + 3);
  // Node 1 acknowledges the probe's s, and nothing sent after it: s + 2,
  // sent before the probe and not held, was lost again and goes at once.
  ack_then_timers(s, 0);
  r = take_data_from_us();
  EXPECT_EQ(r.n, 1u);
  EXPECT(r.has(s + 2));
  // s + 1, which node 1 said it held, is the oldest unacknowledged now: the
  // next timeout's probe sends it all the same (selective ACKs that named a
  // packet node 1 did not have cannot stall the link).
  probe_at(at(600'000), s + 1, s + 3);
  // The cumulative ACK ends it: nothing outstanding, nothing sent again.
  ack_from_peer(s + 3, 0);
  EXPECT_EQ(status_of_peer().acked, s + 3);
  link::poll_timers(at(1'200'000));
  EXPECT_EQ(take_data_from_us().n, 0u);
  link::set_rx_drop(0, 1);
}

// A timeout is a guess: the packets may be lost, or node 1 may only be late
// (its vCPU off the CPU). It sends a probe, the oldest and the newest
// packet, and node 1's ACK says which: if it covers the oldest and nothing
// sent once after it, what was sent before the probe was lost and goes
// again at once; if it covers packets sent once, they arrived and nothing
// goes again.
FW_TEST(a_timeout_sends_a_probe_and_its_ack_tells_what_else_was_lost) {
  // On the direct fabric, then on a lossy link (the dice drop 1 in 65536:
  // none of these, seeded).
  for (uint32_t lossy = 0; lossy < 2; ++lossy) {
    link::set_rx_drop(lossy, 1);
    // Lost: node 1 got nothing, then the probe.
    uint32_t s = send_four();
    CHECK(s != 0);
    probe_at(at(300'000), s, s + 3);
    ack_then_timers(s, 0);
    Resent r = take_data_from_us();
    EXPECT_EQ(r.n, 2u);
    EXPECT(r.has(s + 1) && r.has(s + 2));
    ack_from_peer(s + 3, 0);
    link::poll_timers(at(600'000));
    EXPECT_EQ(take_data_from_us().n, 0u);
    // Late: node 1 read the four packets after the timeout; its ACKs name
    // packets sent once (the probe is a duplicate to it).
    s = send_four();
    CHECK(s != 0);
    probe_at(at(300'000), s, s + 3);
    ack_then_timers(s + 1, 0);
    EXPECT_EQ(take_data_from_us().n, 0u);
    ack_from_peer(s + 3, 0);
    EXPECT_EQ(status_of_peer().acked, s + 3);
    link::poll_timers(at(600'000));
    EXPECT_EQ(take_data_from_us().n, 0u);
  }
  link::set_rx_drop(0, 1);
}

// A NIC that was off its CPU past a timeout may find the ACK it waits for
// still in its receive ring: with a full budget of packets taken and more
// unread, it reads on before it judges (for one timeout at most).
FW_TEST(a_timeout_waits_for_acks_still_unread_in_the_receive_ring) {
  // Node 1's ACKs (the last one new, the rest older than our cumulative ACK:
  // not duplicate ACKs) in our ring, more than one poll takes.
  auto acks_in_ring = [](uint32_t stale, uint32_t last) {
    g_peer.hold = true;
    for (uint32_t i = 0; i < 40; ++i) ack_from_peer(stale, 0);
    ack_from_peer(last, 0);
    g_peer.hold = false;
  };
  // The packets' deadline lies between `before` and `after` plus a timeout
  // (send() stamps them with its own clock read; this vCPU may lose its CPU
  // around the sends): "within one timeout of the deadline" is judged from
  // `before`, "a timeout past it" from `after`.
  uint64_t before = hal::clint::now();
  uint32_t s = send_four();
  CHECK(s != 0);
  uint64_t rto = hal::clint::us_to_ticks(status_of_peer().rto_us);
  CHECK(rto > 0);
  const uint32_t stale = status_of_peer().acked;
  acks_in_ring(stale - 1, s + 3);
  link::poll_rx(before + rto * 3 / 2);  // a budget's worth, half a timeout late: the new ACK is unread
  CHECK(link::rx_behind());
  EXPECT_EQ(status_of_peer().acked, stale);
  link::poll_timers(before + rto * 3 / 2);
  EXPECT_EQ(take_data_from_us().n, 0u);
  while (link::rx_behind()) link::poll_rx(before + rto * 3 / 2);
  EXPECT_EQ(status_of_peer().acked, s + 3);
  link::poll_timers(before + rto * 3 / 2);
  EXPECT_EQ(take_data_from_us().n, 0u);
  // Unread packets delay the judgement by one timeout, not for ever.
  before = hal::clint::now();
  s = send_four();
  CHECK(s != 0);
  const uint64_t after = hal::clint::now();
  rto = hal::clint::us_to_ticks(status_of_peer().rto_us);
  acks_in_ring(s - 2, s - 2);
  link::poll_rx(before + rto * 3 / 2);
  CHECK(link::rx_behind());
  link::poll_timers(before + rto * 3 / 2);
  EXPECT_EQ(take_data_from_us().n, 0u);
  while (link::rx_behind()) link::poll_rx(before + rto * 3 / 2);
  acks_in_ring(s - 2, s - 2);
  link::poll_rx(after + rto * 5 / 2);
  CHECK(link::rx_behind());
  probe_at(after + rto * 5 / 2, s, s + 3);
  while (link::rx_behind()) link::poll_rx(after + rto * 5 / 2);
  ack_from_peer(s + 3, 0);
  EXPECT_EQ(status_of_peer().acked, s + 3);
}

FW_TEST(packets_held_for_a_peer_that_restarts_are_forgotten) {
  link::set_rx_drop(1, 1);
  const uint32_t gap = g_peer.next_seq, before = g_delivered;
  const uint64_t held = link::stats().held, restarts = link::stats().restarts;
  send(data(0xa1, kLen), 12, gap + 1);
  send(data(0xa1, 2 * kLen), 12, gap + 2);
  CHECK_EQ(link::stats().held, held + 2);
  // Node 1 restarts: its new incarnation's packets start again at seq 1.
  // What the old one left held is never delivered, whatever seq the new
  // one reaches.
  abi::WireHeader h = data(0xa2, 0, abi::kWireFirst);
  h.src_incarnation = fwtest::FabricPeer::kIncarnation + 1;
  h.dst_incarnation = 0;
  for (uint32_t seq = 1; seq <= gap + 3; ++seq) {
    h.dst_addr = (seq % 8) * kLen;
    send(h, 13, seq);
  }
  EXPECT_EQ(link::stats().restarts, restarts + 1);
  EXPECT_EQ(g_delivered, before + gap + 3);
  for (uint32_t i = 0; i < 16; ++i) EXPECT_EQ(g_seqs[(g_delivered - 1 - i) % 64], gap + 3 - i);
  EXPECT(landed(0, 8 * kLen, 13));
  EXPECT_EQ(link::stats().held, held + 2);
  EXPECT_EQ(status_of_peer().expected, gap + 4);
  link::set_rx_drop(0, 1);
}

// A peer is judged by its chances to answer, not by the clock alone: a NIC
// that wakes long past the unreachable deadline (the host left its vCPU
// unscheduled, or stopped its QEMU) resends first, and declares the peer
// unreachable only once kUnreachableTimeouts resends in a row went
// unanswered; then what waited for the peer is failed (peer_lost).
FW_TEST(a_silent_peer_is_unreachable_only_after_its_retransmissions_went_unanswered) {
  // Node 1 speaks with its own incarnation again (the test before restarted it as another).
  ack_from_peer(status_of_peer().acked, 0);
  abi::WireHeader mine{};
  mine.op = abi::kWireOpMail;
  const uint32_t seq = link::send(fwtest::FabricPeer::kNode, mine, 0, 0, ~0u, 0);
  CHECK(seq != 0);
  CHECK_EQ(take_data_from_us().n, 1u);
  const uint64_t unreachable = link::stats().unreachable;
  const uint32_t lost = g_lost;
  uint64_t t = at(2 * link::kUnreachableUs);
  for (uint32_t i = 1; i <= link::kUnreachableTimeouts; ++i) {
    link::poll_timers(t);
    EXPECT_EQ(take_data_from_us().n, 1u);  // the packet again: timeout i
    EXPECT_EQ(link::stats().unreachable, unreachable);
    t += hal::clint::us_to_ticks(link::kRtoMaxUs + 1000);
  }
  EXPECT_EQ(g_lost, lost);
  link::poll_timers(t);
  EXPECT_EQ(link::stats().unreachable, unreachable + 1);
  EXPECT_EQ(g_lost, lost + 1);
  EXPECT_EQ(status_of_peer().state, uint32_t(abi::LinkState::kUnreachable));
  // It answers after all: reachable again, nothing outstanding.
  ack_from_peer(seq, 0);
  EXPECT_EQ(status_of_peer().acked, seq);
  EXPECT(status_of_peer().state != uint32_t(abi::LinkState::kUnreachable));
}

// OK verdicts on our acks (abi::kWireAckOk, docs/wire.md): an ACK says OK and
// names our newest data seq (the peer applies it once it has that packet);
// nothing says OK while the protocol layer holds it (a refusal waits for
// room), nor does a refusal itself, nor a packet sent before one -- though a
// packet after it does, retransmitted too.
FW_TEST(our_packets_say_ok_only_where_every_refusal_went_before_them) {
  abi::WireHeader mine{};
  mine.op = abi::kWireOpMail;
  g_peer.next_seq = status_of_peer().expected;  // (node 1 restarted as another, tests above)
  ack_from_peer(link::last_sent(fwtest::FabricPeer::kNode), 0);  // nothing of ours in flight
  take_from_us();
  // Node 1's packet arrives: the ACK owed goes now, says OK through it, and
  // names our newest seq; with nothing new since, no second one.
  send(data(0xa1, 0, abi::kWireFirst | abi::kWireLast), 11);
  CHECK(link::ack_now(fwtest::FabricPeer::kNode));
  abi::WireHeader a = take_from_us();
  EXPECT_EQ(a.type, abi::kPktAck);
  EXPECT(a.flags & abi::kWireAckOk);
  EXPECT_EQ(a.ack, g_peer.next_seq - 1);
  EXPECT_EQ(a.seq, link::last_sent(fwtest::FabricPeer::kNode));
  CHECK(link::ack_now(fwtest::FabricPeer::kNode));
  EXPECT(take_from_us().type == 0);
  // Held: neither the ACK nor a data packet says OK.
  link::set_ok_held(fwtest::FabricPeer::kNode, true);
  send(data(0xa2, 0, abi::kWireFirst | abi::kWireLast), 11);
  CHECK(link::ack_now(fwtest::FabricPeer::kNode));
  a = take_from_us();
  EXPECT_EQ(a.type, abi::kPktAck);
  EXPECT(!(a.flags & abi::kWireAckOk));
  const uint32_t held = link::send(fwtest::FabricPeer::kNode, mine, 0, 0, ~0u, 0);
  CHECK(held != 0);
  Resent r = take_data_from_us();
  EXPECT(r.has(held) && !r.says_ok(held));
  link::set_ok_held(fwtest::FabricPeer::kNode, false);
  // A refusal does not say OK (its own ack covers the operation it
  // refuses); the packet after it does.
  const uint32_t refusal = link::send(fwtest::FabricPeer::kNode, mine, 0, 0, ~0u, 0, true);
  const uint32_t after = link::send(fwtest::FabricPeer::kNode, mine, 0, 0, ~0u, 0);
  CHECK(refusal != 0 && after == refusal + 1);
  r = take_data_from_us();
  EXPECT(r.has(refusal) && !r.says_ok(refusal));
  EXPECT(r.says_ok(after));
  // A timeout's probe sends the oldest and the newest again, and node 1's
  // ACK for the oldest the one between, each with today's ack: OK only
  // after the refusal.
  link::poll_timers(at(2 * link::kRtoMaxUs));
  r = take_data_from_us();
  EXPECT(r.n == 2 && r.has(held) && r.has(after));
  EXPECT(!r.says_ok(held));
  EXPECT(r.says_ok(after));
  ack_then_timers(held, 0);
  r = take_data_from_us();
  EXPECT(r.n == 1 && r.has(refusal));
  EXPECT(!r.says_ok(refusal));
  // Node 1 acknowledges them all: from now on its packets' OKs reach the upcall.
  ack_from_peer(after, 0);
  take_from_us();
}

// Node 1's OKs: an ACK that says OK through a seq reaches the protocol layer
// once node 1's data packets up to the seq it names are delivered; a data
// packet that says OK reaches it before the packet itself; the same OK twice
// reaches it once.
FW_TEST(an_ok_from_the_peer_waits_for_its_packets_before_it) {
  const uint32_t oks = g_oks;
  const uint32_t mine = link::last_sent(fwtest::FabricPeer::kNode);
  g_peer.send_ack(mine, true, g_peer.next_seq - 1);  // node 1 sent nothing we lack
  EXPECT_EQ(g_oks, oks + 1);
  EXPECT_EQ(g_ok_seq, mine);
  g_peer.send_ack(mine, true, g_peer.next_seq - 1);  // the same again
  EXPECT_EQ(g_oks, oks + 1);
  // Through a packet we have not had yet: it waits for it.
  g_peer.send_ack(mine + 5, true, g_peer.next_seq);
  EXPECT_EQ(g_oks, oks + 1);
  const uint32_t delivered = g_delivered;
  send(data(0xb1, 0, abi::kWireFirst | abi::kWireLast), 12);
  EXPECT_EQ(g_delivered, delivered + 1);
  EXPECT_EQ(g_oks, oks + 2);
  EXPECT_EQ(g_ok_seq, mine + 5);
  EXPECT_EQ(g_ok_delivered, delivered + 1);  // after the packet it waited for
  // A data packet's OK, before the packet itself is delivered.
  abi::WireHeader h = data(0xb2, 0, abi::kWireFirst | abi::kWireLast | abi::kWireAckOk);
  h.ack = mine + 6;
  send(h, 12);
  EXPECT_EQ(g_oks, oks + 3);
  EXPECT_EQ(g_ok_seq, mine + 6);
  EXPECT_EQ(g_ok_delivered, delivered + 1);
  EXPECT_EQ(g_delivered, delivered + 2);
  take_from_us();
}

// The peer asks for its OK (an ACK with kWireOkProbe: an operation of its
// was acknowledged without one): our link answers with an ACK that says OK
// at its next timer pass, though it owed none.
FW_TEST(a_peer_that_asks_for_its_ok_gets_an_ack_that_says_it) {
  link::ack_now(fwtest::FabricPeer::kNode);  // what the test before owes
  take_from_us();
  CHECK(link::ack_now(fwtest::FabricPeer::kNode));  // nothing owed now: nothing sent
  EXPECT(take_from_us().type == 0);
  abi::WireHeader h = g_peer.header();
  h.type = abi::kPktAck;
  h.flags = abi::kWireOkProbe;
  h.ack = link::last_sent(fwtest::FabricPeer::kNode);
  g_peer.send(h, nullptr, g_peer.next_seq);  // (an ACK's seq stays node 1's next)
  link::poll_timers(hal::clint::now());
  const abi::WireHeader a = take_from_us();
  EXPECT_EQ(a.type, abi::kPktAck);
  EXPECT(a.flags & abi::kWireAckOk);
  EXPECT_EQ(a.ack, g_peer.next_seq - 1);
}
