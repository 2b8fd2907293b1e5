#include "link/link.h"

#include <stddef.h>
#include <string.h>

#include "core/copy.h"
#include "core/cost.h"
#include "core/log.h"
#include "core/status.h"
#include "hal/clint.h"
#include "hal/cpu.h"
#include "hal/mmio.h"
#include "ulnic/abi/slot.h"
#include "ulnic/abi/status.h"
#include "ulnic/crc32c.h"
#include "ulnic/wire_sum.h"

namespace link {
namespace {

using hal::full_barrier;

constexpr uint32_t kRxBudget = 32;  // packets per poll: the other work sources must run too
constexpr uint32_t kRxReleaseEvery = 8;  // ring entries handed back at a time
constexpr uint32_t kPublishEvery = 8;    // ring entries published at a time within a burst

// A data packet in the window, kept to be sent again.
struct TxEntry {
  uint32_t seq;
  // A packet of send_segments() is rebuilt from its operation's template,
  // which stays in the protocol layer's (static) memory: per packet the
  // window records three words, not a header.
  const Segments* seg;   // null: the fields below hold the packet
  uint64_t seg_op;       // the template's op_id when sent (another now: the operation is gone)
  uint32_t seg_offset;   // the packet's first byte in the operation
  abi::WireHeader h;     // operation fields; addressing is filled in at each send
  uint64_t payload;      // NIC address of the bytes in host memory
  uint16_t len;
  uint32_t owner;
  uint64_t generation;
  uint64_t sent_at;      // mtime of the first transmission (RTT samples)
  bool retransmitted;    // Karn: no RTT sample from a packet sent twice
  bool sacked;           // the peer holds it (selective ACK): never sent again but after timeouts
  uint32_t xmit;         // the peer's transmission count at its latest transmission
};

// A header as the eight little-endian words it is stored as: a burst keeps
// the words every packet shares in registers and changes three per packet,
// and a placed stream (place_next) compares them word by word.
union HeaderWords {
  abi::WireHeader h;
  uint64_t w[8];
};
static_assert(sizeof(HeaderWords) == sizeof(abi::WireHeader));
static_assert(offsetof(abi::WireHeader, type) == 4 && offsetof(abi::WireHeader, src) == 8 &&
              offsetof(abi::WireHeader, dst) == 10 && offsetof(abi::WireHeader, src_incarnation) == 48 &&
              offsetof(abi::WireHeader, dst_incarnation) == 52, "the words a standalone ACK is built of");
static_assert(offsetof(abi::WireHeader, flags) == 5 && offsetof(abi::WireHeader, payload_len) == 6 &&
              offsetof(abi::WireHeader, seq) == 12 && offsetof(abi::WireHeader, ack) == 16 &&
              offsetof(abi::WireHeader, checksum) == 20 && offsetof(abi::WireHeader, dst_addr) == 32,
              "the words send_segments() and a placed stream change");
constexpr uint32_t kWordSeq = 1, kWordOp = 3, kWordDstAddr = 4;
static_assert(offsetof(abi::WireHeader, op) == 24, "op: the low byte of word kWordOp");

// A stream whose packets the link places itself (place_next).
struct Placed {
  const uint64_t* epoch;  // null: none
  uint64_t epoch_at;
  HeaderWords next;       // the next packet's header, seq and ack zero
  uint64_t base, hi;      // its payload goes to base + dst_addr, and must end by hi
};

// Which packets a resend pass (resend_next .. next_seq) sends again.
enum class Resend : uint8_t {
  kLost,      // those a packet sent after them overtook (selective ACKs: RACK's rule)
  kUnsacked,  // all but those the peer holds (duplicate ACKs without selective ACKs)
  kProbe,     // the oldest and the newest unacknowledged (a timeout: their ACK tells the rest)
};

struct Peer {
  // Transmit side.
  uint32_t next_seq;       // next sequence number to assign
  uint32_t acked;          // cumulative: every seq <= acked was received
  uint32_t resend_next;    // resend cursor (== next_seq: nothing to resend)
  Resend resend;           // ... and which packets it sends
  uint8_t timeouts;        // retransmission timeouts since the last progress
  uint32_t timeouts_total;
  uint32_t xmits;          // transmissions of data packets so far (TxEntry::xmit)
  uint32_t delivered_xmit; // the newest transmission known to have arrived (ACKed or held)
  uint64_t rto_ticks;      // current retransmission timeout
  uint64_t rto_deadline;   // 0: no timer
  uint64_t last_progress;  // mtime of the last ACK progress
  uint64_t timeout_at;     // mtime of the last retransmission timeout
  // OK verdicts we give it (abi::kWireAckOk): no packet up to the newest
  // refusal we sent says OK (its ack may cover the refused operation; kept
  // up with `acked`, so it stays near the seqs in use), and the ack the last
  // packet that did said.
  uint32_t last_refusal;
  uint32_t ok_sent;
  uint64_t ok_asked;       // mtime of our last kWireOkProbe to it (ask_ok)
  // abi::kWireAckOk, or 0 while refusals to it wait in the protocol layer
  // for room on the link (set_ok_held): our packets' OK flag.
  uint8_t ok_flag;
  TxEntry win[kWindow];    // by seq % kWindow (the widest window)
  // Receive side.
  uint32_t their_session;  // the peer's incarnation (0: not heard from yet)
  uint32_t expected;       // next in-order seq
  uint8_t held[kLossyWindow];  // by seq % kLossyWindow: 1 + the State::held slot of a packet ahead of a gap
  uint32_t held_count;
  uint32_t unacked_rx;     // packets since our last ACK
  bool ack_owed;
  uint64_t ack_deadline;
  // OK verdicts from the peer (abi::kWireAckOk): the last watermark handed
  // up (so an unchanged one is not handed up again), and one from a
  // standalone ACK that waits until its packets before it are delivered.
  uint32_t ok_given;
  bool ok_waiting;
  uint32_t ok_waiting_seq, ok_waiting_after;
  // Per-link statistics (status block).
  uint64_t tx_data, rx_data, retransmits, duplicates;
  bool unreachable;
  uint32_t dup_acks;       // pure ACKs that did not advance while data is outstanding
  uint32_t recover;        // fast retransmit again only once acked reaches this
  uint64_t srtt, rttvar;   // smoothed round-trip time and its variation (ticks; 0: no sample)
  uint64_t rto_base;       // the timeout the estimator suggests (before backoff)
  Placed placed;           // receive side: a stream placed without upcalls
};

struct State {
  bool enabled;
  uint32_t incarnation;    // ours: random per boot, never 0
  uint32_t self, nodes, ports, switch_port, capacity;
  bool checksums;          // through a switch only: see wire_sum.h
  bool lossless;           // the direct fabric without injected loss
  uint32_t window, ack_every;  // kWindow, kAckEvery or their lossy forms
  uint64_t fabric, regs;
  Upcalls up;
  Stats stats;
  uint32_t rng;
  uint32_t drop_per_65536;
  uint32_t drop_rng;
  Peer peers[abi::kMaxPorts];
  // Packets from beyond a gap on a lossy link, held until the gap fills
  // (selective repeat), for all peers together; a full pool drops them.
  abi::Packet held[kHeldPackets];
  uint8_t held_free[kHeldPackets];  // the free slots, a stack
  uint32_t held_free_count;
  abi::RingProducer<abi::Packet> tx[abi::kMaxPorts];  // by destination port
  abi::RingConsumer<abi::Packet> rx[abi::kMaxPorts];  // by source port
  uint32_t rx_next;                                   // round-robin start
  uint64_t last_rx;                                   // mtime of the last data packet taken
  bool rx_behind;                                     // the last poll_rx used its whole budget
};
State g;

uint32_t random32() {
  uint32_t x = g.rng;
  x ^= x << 13, x ^= x >> 17, x ^= x << 5;
  g.rng = x;
  return x;
}


// Nothing loses packets on the direct fabric (only an injected drop does):
// a missing ACK there means a peer that is not running just now (its vCPU
// descheduled on a busy host), and going back N would only make both sides
// copy the window again. The timeout waits longer there, and the window is
// wider.
void set_loss_mode(bool lossless) {
  g.lossless = lossless;
  g.window = lossless ? kWindow : kLossyWindow;
  g.ack_every = lossless ? kAckEvery : kLossyAckEvery;
}

uint64_t rto_floor() { return hal::clint::us_to_ticks(g.lossless ? kRtoMinLosslessUs : kRtoMinUs); }

uint64_t initial_rto() {
  uint64_t t = hal::clint::us_to_ticks(kRtoInitialUs);
  return rto_floor() > t ? rto_floor() : t;
}

abi::RingControl* ring(uint32_t src, uint32_t dst) {
  return reinterpret_cast<abi::RingControl*>(g.fabric + abi::ring_offset(g.ports, g.capacity, src, dst));
}
abi::PortArea& port(uint32_t p) {
  return reinterpret_cast<abi::PortArea*>(g.fabric + abi::kPortAreaOffset)[p];
}
// Where packets for `dst` go, and where packets from `src` come from.
uint32_t tx_port(uint32_t dst) { return g.switch_port == abi::kNoSwitch ? dst : g.switch_port; }

// Both directions start over: at boot, and when the peer rebooted (its new
// incarnation has a fresh receive side, and nothing we had in flight counts).
void reset_peer(Peer& p, uint32_t their_session, uint64_t now) {
  for (uint8_t slot : p.held)
    if (slot) g.held_free[g.held_free_count++] = uint8_t(slot - 1);
  memset(&p, 0, sizeof p);
  p.next_seq = p.resend_next = 1;
  p.expected = 1;
  // (A restart's peer_lost upcall follows: the protocol layer's refusals for
  // the peer are gone with it, so none holds the OK back.)
  p.ok_flag = abi::kWireAckOk;
  p.rto_ticks = p.rto_base = initial_rto();
  p.last_progress = now;
  p.their_session = their_session;
}

void ring_doorbell(uint32_t dst_port) {
  core::cost::Phase<ulnic::abi::kPhaseRing> cost;
  full_barrier();  // our tail before their rx_asleep: pairs with prepare_sleep()
  if (!__atomic_load_n(&port(dst_port).rx_asleep, __ATOMIC_RELAXED) || !g.regs) return;
  uint32_t peer = __atomic_load_n(&port(dst_port).peer_id, __ATOMIC_RELAXED);
  if (peer == 0) peer = dst_port;  // NIC k is fabric peer k
  if (peer > 0xffff) return;
  hal::mmio_write32(g.regs + core::board::kDoorbell, peer << 16 | abi::kVectorFabric);
}

// CRC-32C over the header (checksum field zero) and the payload's sums
// (shared/include/ulnic/wire_sum.h).
uint32_t checksum(const abi::WireHeader& h, const ulnic::WireSum& payload) {
  abi::WireHeader copy = h;
  copy.checksum = 0;
  uint32_t c = ulnic::crc32c(0, &copy, sizeof copy);
  return ulnic::crc32c(c, &payload, sizeof payload);
}

// A third party wrote our ring's indices (the consumer then resyncs its head
// to whatever tail it saw). We own the tail: publish our real one again and
// start over once the consumer's head is consistent with it; until then the
// ring counts as full and the link's retransmission covers the gap.
abi::RingProducer<abi::Packet>& tx_ring(uint32_t port) {
  abi::RingProducer<abi::Packet>& tx = g.tx[port];
  if (tx.corrupt()) {
    abi::RingControl* out = ring(g.self, port);
    __atomic_store_n(&out->tail, tx.tail(), __ATOMIC_RELEASE);
    abi::RingProducer<abi::Packet> fresh;
    if (fresh.attach(out, reinterpret_cast<abi::Packet*>(out + 1), g.capacity)) tx = fresh;
  }
  return tx;
}

// What the link adds to every packet toward `dst`, as words (field by field
// a header took ~30-40 narrow stores): addressing, the packet's flags,
// length and seq, the piggybacked ACK (checksum 0: fill()), both incarnations.
[[gnu::always_inline]] inline void address(HeaderWords& w, uint32_t dst, uint8_t type, uint8_t flags, uint32_t len,
                                           uint32_t seq) {
  const Peer& p = g.peers[dst];
  w.w[0] = uint64_t(abi::kWireMagic) | uint64_t(type) << 32 | uint64_t(flags) << 40 | uint64_t(len) << 48;
  w.w[1] = uint64_t(g.self) | uint64_t(dst) << 16 | uint64_t(seq) << 32;
  w.w[2] = uint32_t(p.expected - 1);
  w.w[6] = uint64_t(g.incarnation) | uint64_t(p.their_session) << 32;
}

// A header is 64 bytes: copied inline, word by word (a call to memcpy per
// packet costs a TCG block lookup on its return).
[[gnu::always_inline]] inline void copy_header(abi::WireHeader* to, const abi::WireHeader& from) {
  __builtin_memcpy_inline(to, &from, sizeof from);
}

// The payload into the ring entry, then the sealed header (unpublished).
[[gnu::always_inline]] inline void fill(abi::Packet* pkt, abi::WireHeader& h, const void* payload) {
  ulnic::WireSum sum;
  if (h.payload_len) {
    if (g.checksums) sum = ulnic::copy_and_sum(pkt->payload, payload, h.payload_len);
    else core::copy_bytes(pkt->payload, payload, h.payload_len);
  }
  h.checksum = g.checksums ? checksum(h, sum) : 0;
  copy_header(&pkt->h, h);
}

// The ACK rode along on a packet just written (`ok`: saying OK too).
void ack_sent(Peer& p, uint8_t ok) {
  if (ok) p.ok_sent = p.expected - 1;
  p.ack_owed = false;
  p.unacked_rx = 0;
  p.ack_deadline = 0;
}

// The header words and payload of a packet in the window, but for the words
// the link fills in (addressing, flags and length, seq, ack, checksum,
// incarnations: put_packet), and its flags and length. A retransmission asks
// the protocol layer whether its source may still be read (the operation may
// have failed and its memory been reused): if not, it goes as a sequence
// filler. A first transmission's sender checked the source a moment ago.
// (Words, not fields: a header built field by field took ~30 narrow stores.)
void packet_of(const TxEntry& e, bool first, HeaderWords& w, uint8_t& flags, uint32_t& len, uint64_t& payload) {
  payload = 0;
  flags = 0;
  len = 0;
  if (e.seg) {
    const Segments& op = *e.seg;
    if (op.h.op_id == e.seg_op && (first || (g.up.payload_valid && g.up.payload_valid(op.owner, op.generation)))) {
      copy_header(&w.h, op.h);
      len = segment_length(op, e.seg_offset);
      flags = segment_flags(op, e.seg_offset, len);
      w.w[kWordDstAddr] = op.h.dst_addr + e.seg_offset;
      payload = segment_src(op, e.seg_offset);
    } else {
      w = HeaderWords{};
    }
  } else {
    copy_header(&w.h, e.h);
    flags = e.h.flags;
    if (e.len && (first || (g.up.payload_valid && g.up.payload_valid(e.owner, e.generation)))) {
      len = e.len;
      payload = e.payload;
    } else if (e.len) {
      w.w[kWordOp] &= ~uint64_t(0xff);  // op = kWireOpNone: the source is gone: keep the sequence, drop the bytes
      flags = 0;
    }
  }
}

// A standalone ACK's selective part (its dst_addr): bit i set if we hold the
// packet with seq ack + 2 + i (ack + 1 is the gap).
uint64_t held_bits(const Peer& p) {
  uint64_t bits = 0;
  for (uint32_t i = 0; p.held_count && i + 1 < kLossyWindow; ++i)
    if (p.held[(p.expected + 1 + i) % kLossyWindow]) bits |= 1ull << i;
  return bits;
}

// Writes one packet into the ring toward `dst` without publishing it (`e`:
// a data packet of the window, `first` its first transmission; none: an
// ACK); false if the ring is full.
bool put_packet(uint32_t dst, uint8_t type, const TxEntry* e, bool first, uint8_t ack_flags = 0) {
  abi::Packet* pkt = tx_ring(tx_port(dst)).reserve();
  if (!pkt) {
    ++g.stats.ring_full;
    return false;
  }
  Peer& p = g.peers[dst];
  uint8_t ok = p.ok_flag;
  HeaderWords w;
  if (!e) {
    // A standalone ACK: no payload. Its OK applies once the peer has
    // delivered every data packet we sent so far (every refusal among them):
    // seq names the newest.
    address(w, dst, type, uint8_t(ok | ack_flags), 0, ok ? p.next_seq - 1 : 0);
    w.w[3] = 0;
    w.w[4] = held_bits(p);  // dst_addr: the selective ACK
    w.w[5] = 0;
    w.w[7] = 0;
    fill(pkt, w.h, nullptr);
  } else {
    uint8_t flags;
    uint32_t len;
    uint64_t payload;
    packet_of(*e, first, w, flags, len, payload);
    // The ack is today's (on a retransmission too): it may say OK if every
    // refusal went before this packet.
    if (!seq_before(p.last_refusal, e->seq)) ok = 0;
    address(w, dst, type, uint8_t((flags & ~abi::kWireAckOk) | ok), len, e->seq);
    fill(pkt, w.h, reinterpret_cast<const void*>(payload));
  }
  tx_ring(tx_port(dst)).push();
  ack_sent(p, ok);
  return true;
}

// Makes every packet written toward `dst` visible, and wakes it if it sleeps.
void publish_to(uint32_t dst) {
  uint32_t port = tx_port(dst);
  g.tx[port].publish();
  ring_doorbell(port);
}

// One packet on the wire now (ACKs, retransmissions); false if the ring is
// full. `ack_flags`: more flags on a standalone ACK (kWireOkProbe).
bool transmit(uint32_t dst, uint8_t type, const TxEntry* e, uint8_t ack_flags = 0) {
  if (!put_packet(dst, type, e, false, ack_flags)) return false;
  publish_to(dst);
  return true;
}

// The peer stopped answering: what was in flight to it completes with an
// error now. The sequence state stays (a slow peer that comes back resyncs by
// retransmission), but no retransmission reads host memory any more.
void declare_unreachable(uint32_t peer, uint64_t now) {
  Peer& p = g.peers[peer];
  // Rare and final for what was in flight: say what the link looked like.
  core::log("link: peer %u unreachable: acked %u, next %u, resend from %u, expecting %u from it, %u timeouts in a row, "
            "rto %lu us, srtt %lu us, %u ring slots free toward it, it %s\n",
            peer, p.acked, p.next_seq, p.resend_next, p.expected, unsigned(p.timeouts),
            (unsigned long)hal::clint::ticks_to_us(p.rto_ticks), (unsigned long)hal::clint::ticks_to_us(p.srtt),
            tx_ring(tx_port(peer)).free_space(g.capacity),
            __atomic_load_n(&port(tx_port(peer)).rx_asleep, __ATOMIC_RELAXED) ? "sleeps" : "is awake");
  // Packets that carry host memory become sequence fillers (their operation
  // has failed; the memory may be reused). Packets without payload -- the
  // verdicts we owe the peer -- stay as they are: dropping one would leave an
  // operation on a live but slow peer waiting forever.
  for (TxEntry& e : p.win)
    if (e.seg || e.len) {
      e.seg = nullptr;
      e.len = 0;
      e.h = abi::WireHeader{};  // op kWireOpNone
    }
  p.last_progress = now;
  p.unreachable = true;
  ++g.stats.unreachable;
  if (g.up.peer_lost) g.up.peer_lost(peer);
}

// Jacobson/Karels: srtt += (r - srtt)/8, rttvar += (|r - srtt| - rttvar)/4,
// RTO = srtt + 4 rttvar, clamped. A fixed timeout retransmitted needlessly
// whenever a full window took longer than it to drain. A packet the peer
// held beyond a gap is sampled when the selective ACK says so: the
// cumulative ACK covers it only once the gap is filled, a round trip later.
// No sample from a packet sent twice (Karn), nor from one sent before the
// last timeout (Karn's rule again, for what the timeout did not send
// again): the ACK that tells of it may answer the timeout's probe, and its
// wait would count the timeout in. At 30% loss each way such samples pushed
// the timeout to its cap.
void sample_rtt(Peer& p, const TxEntry& e, uint64_t now) {
  if (e.retransmitted || e.sacked || int64_t(now - e.sent_at) <= 0 || int64_t(e.sent_at - p.timeout_at) <= 0)
    return;
  uint64_t r = now - e.sent_at;
  if (p.srtt == 0) {
    p.srtt = r;
    p.rttvar = r / 2;
  } else {
    uint64_t err = r > p.srtt ? r - p.srtt : p.srtt - r;
    p.rttvar = (3 * p.rttvar + err) / 4;
    p.srtt = (7 * p.srtt + r) / 8;
  }
  uint64_t rto = p.srtt + 4 * p.rttvar;
  uint64_t lo = rto_floor(), hi = hal::clint::us_to_ticks(kRtoMaxUs);
  p.rto_base = rto < lo ? lo : rto > hi ? hi : rto;
}

// Packet `e` is known to have arrived (ACKed or held): every packet sent
// before it that is neither now counts as lost (RACK's rule, by transmission).
void note_delivered(Peer& p, const TxEntry& e) {
  if (seq_before(p.delivered_xmit, e.xmit)) p.delivered_xmit = e.xmit;
}
bool lost(const Peer& p, const TxEntry& e) { return !e.sacked && seq_before(e.xmit, p.delivered_xmit); }

// A resend pass for the lost packets, if any and if none is under way (one
// under way sends them anyway, but for a timeout's probe).
void resend_lost(Peer& p) {
  if (p.resend_next != p.next_seq && p.resend != Resend::kProbe) return;
  for (uint32_t seq = p.acked + 1; seq_before(seq, p.next_seq); ++seq) {
    const TxEntry& e = p.win[seq % kWindow];
    if (lost(p, e)) {
      p.resend_next = seq;
      p.resend = Resend::kLost;
      return;
    }
  }
}

void take_ack(Peer& p, uint32_t ack, uint64_t now) {
  core::cost::Phase<ulnic::abi::kPhaseAck> cost;
  if (!seq_before(p.acked, ack) || !seq_before(ack, p.next_seq)) return;  // old or impossible
  const TxEntry& newest = p.win[ack % kWindow];
  sample_rtt(p, newest, now);
  note_delivered(p, newest);
  const bool resent = newest.retransmitted;
  p.acked = ack;
  if (seq_before(p.last_refusal, ack)) p.last_refusal = ack;  // (nothing up to ack goes again)
  p.unreachable = false;
  p.dup_acks = 0;
  p.timeouts = 0;
  if (seq_before(p.resend_next, ack + 1)) p.resend_next = ack + 1;
  p.last_progress = now;
  p.rto_ticks = p.rto_base;  // progress ends any backoff
  p.rto_deadline = seq_before(p.acked + 1, p.next_seq) ? now + p.rto_ticks : 0;
  // The ACK covers a packet sent again (a timeout's probe, a resend): what
  // was sent before that and is neither acknowledged nor held was lost. If
  // instead the packets after the probe had arrived (the timeout was
  // spurious: the peer was only late), the ACK covers them too and names one
  // sent once; then nothing goes again.
  if (resent) resend_lost(p);
}

// An ACK is owed for a data packet that arrived (in order or not).
[[gnu::always_inline]] inline void owe_ack(Peer& p, uint64_t now) {
  core::cost::Phase<ulnic::abi::kPhaseAck> cost;
  p.ack_owed = true;
  if (!p.ack_deadline) p.ack_deadline = now + hal::clint::us_to_ticks(kAckDelayUs);
}

// The peer's next data packet in order was taken.
[[gnu::always_inline]] inline void accept(Peer& p, uint64_t now) {
  ++p.expected;
  ++p.unacked_rx;
  g.last_rx = now;
  ++g.stats.rx_data;
  ++p.rx_data;
}

// An OK verdict from peer `src` (abi::kWireAckOk) through our seq `seq`,
// every packet before it delivered: up to the protocol layer, unless it
// said the same last time.
inline void take_ok(uint32_t src, Peer& p, uint32_t seq) {
  if (seq == p.ok_given) return;
  p.ok_given = seq;
  if (g.up.ok_through) g.up.ok_through(src, seq);
}

// A standalone ACK's OK waits for the data packets the peer sent before it:
// due once the one it named is delivered.
[[gnu::always_inline]] inline void ok_waiting_due(uint32_t src, Peer& p) {
  if (__builtin_expect(p.ok_waiting, 0) && seq_at_or_before(p.ok_waiting_after, p.expected - 1)) {
    p.ok_waiting = false;
    take_ok(src, p, p.ok_waiting_seq);
  }
}

// The next packet of the stream placed for peer `p` (place_next): placed
// here, with no upcall. False for anything else, which then takes the usual
// way (receive()). The comparison is the whole check: every word but the ack
// is what the packet the protocol layer checked said it would be.
[[gnu::always_inline]] inline bool receive_placed(uint32_t src, Peer& p, const HeaderWords& w,
                                                  const uint8_t* payload, uint64_t now) {
  Placed& s = p.placed;
  const uint64_t* e = s.next.w;
  constexpr uint64_t kOkBit = uint64_t(abi::kWireAckOk) << 40;  // (flags: byte 5)
  if (!s.epoch || *s.epoch != s.epoch_at || (w.w[0] & ~kOkBit) != e[0] ||
      w.w[kWordSeq] != (e[kWordSeq] | uint64_t(p.expected) << 32) || w.w[3] != e[3] ||
      w.w[kWordDstAddr] != e[kWordDstAddr] || w.w[5] != e[5] || w.w[6] != e[6] || w.w[7] != e[7])
    return false;
  uint64_t dst = w.w[kWordDstAddr], len = w.h.payload_len;
  if (len > s.hi - dst) return false;  // (dst <= hi: place_next made it so, and it moves only by what fit)
  core::copy_bytes(reinterpret_cast<void*>(s.base + dst), payload, len);
  s.next.h.dst_addr = dst + len;
  ++g.stats.placed;
  owe_ack(p, now);
  if (w.w[0] & kOkBit) take_ok(src, p, w.h.ack);
  accept(p, now);
  if (w.h.ack != p.acked) take_ack(p, w.h.ack, now);
  ok_waiting_due(src, p);
  return true;
}

// A standalone ACK from the peer said which of our packets beyond its gap it
// holds (`bits`, as held_bits() builds them for `ack`). Those are never sent
// again but after timeouts; one that was sent before a packet the peer has
// since received, and is not held, was lost (no reordering on our fabric
// but what a faulty switch injects): a resend pass sends those, and only
// those, now -- unless a pass is under way, which sends them anyway.
void take_sack(Peer& p, uint32_t ack, uint64_t bits, uint64_t now) {
  for (uint32_t i = 0; bits; ++i, bits >>= 1) {
    uint32_t seq = ack + 2 + i;
    if (!(bits & 1) || !seq_before(p.acked, seq) || !seq_before(seq, p.next_seq)) continue;
    TxEntry& e = p.win[seq % kWindow];
    if (e.seq != seq || e.sacked) continue;
    sample_rtt(p, e, now);
    e.sacked = true;
    ++g.stats.sacked;
    note_delivered(p, e);
  }
  resend_lost(p);
}

// Should a resend pass send this packet again?
bool resend_wanted(const Peer& p, const TxEntry& e) {
  switch (p.resend) {
    case Resend::kLost: return lost(p, e);
    case Resend::kUnsacked: return !e.sacked;
    default: return true;  // kProbe: two packets chosen by the pass
  }
}

// A data packet from beyond a gap, on a lossy link: kept (header and payload)
// for delivery once the gap fills, if it is within a lossy window of it and
// a slot is free; else dropped, and the sender sends it again.
void hold(Peer& p, const abi::WireHeader& h, const uint8_t* payload) {
  uint8_t& slot = p.held[h.seq % kLossyWindow];
  if (h.seq - p.expected >= kLossyWindow || slot || !g.held_free_count) return;
  uint8_t k = g.held_free[--g.held_free_count];
  abi::Packet& pkt = g.held[k];
  copy_header(&pkt.h, h);
  if (h.payload_len) core::copy_bytes(pkt.payload, payload, h.payload_len);
  slot = uint8_t(k + 1);
  ++p.held_count;
  ++g.stats.held;
}

// The packets held beyond a gap that just filled, in order, as if they
// arrived now; a gap after them is reported at once.
void deliver_held(uint32_t src, Peer& p, uint64_t now) {
  for (uint8_t* slot; p.held_count && *(slot = &p.held[p.expected % kLossyWindow]);) {
    uint8_t k = uint8_t(*slot - 1);
    *slot = 0;
    --p.held_count;
    accept(p, now);
    const abi::Packet& pkt = g.held[k];
    if ((pkt.h.flags & abi::kWireAckOk) && pkt.h.dst_incarnation == g.incarnation) take_ok(src, p, pkt.h.ack);
    if (pkt.h.op != abi::kWireOpNone && g.up.deliver) g.up.deliver(src, pkt.h, pkt.payload);
    ok_waiting_due(src, p);
    g.held_free[g.held_free_count++] = k;  // the payload was the upcall's until it returned
  }
  if (p.held_count) p.ack_deadline = now;
}

// Any packet but the next of a placed stream. `h` is the caller's copy of
// the header (the ring is shared memory: read once); `payload` is in the ring.
void receive(uint32_t from_port, const abi::WireHeader& h, const uint8_t* payload, uint64_t now) {
  uint32_t src = h.src;
  bool addressed = h.magic == abi::kWireMagic && h.dst == g.self && src < g.nodes && src != g.self &&
                   (g.switch_port != abi::kNoSwitch || from_port == src) && h.payload_len <= abi::kMtu &&
                   (h.type == abi::kPktData || h.type == abi::kPktAck) && h.src_incarnation != 0;
  if (addressed && g.checksums && checksum(h, ulnic::wire_sum(payload, h.payload_len)) != h.checksum)
    addressed = false;
  if (!addressed) {
    ++g.stats.bad_packets;
    return;
  }
  Peer& p = g.peers[src];
  if (h.src_incarnation != p.their_session) {
    if (p.their_session == 0) {
      p.their_session = h.src_incarnation;  // first word from this peer
    } else {
      // It rebooted: its receive side is fresh and nothing we had in flight counts.
      reset_peer(p, h.src_incarnation, now);
      ++g.stats.restarts;
      if (g.up.peer_lost) g.up.peer_lost(src);
    }
  }
  if (h.dst_incarnation != 0 && h.dst_incarnation != g.incarnation) {
    // Meant for an earlier boot of ours: drop, and answer so the sender
    // learns our new incarnation.
    ++g.stats.duplicates;
    p.ack_owed = true;
    p.ack_deadline = now;
    return;
  }
  // Acknowledgements count only once the peer knows who we are.
  if (h.dst_incarnation == g.incarnation) take_ack(p, h.ack, now);
  if (h.type == abi::kPktAck) {
    ++g.stats.rx_acks;
    if (h.dst_incarnation != g.incarnation) return;
    if (h.flags & abi::kWireAckOk) {
      // Its OK verdict counts once the peer's data packets up to h.seq are
      // delivered (a refusal among them first): now, or when they are.
      p.ok_waiting = true;
      p.ok_waiting_seq = h.ack;
      p.ok_waiting_after = h.seq;
      ok_waiting_due(src, p);
    }
    if (h.flags & abi::kWireOkProbe) {  // the peer asks for its OK: an ACK goes at the next timer pass
      p.ack_owed = true;
      p.ack_deadline = now;
    }
    // The rest is the link's upkeep, which branches on what is in flight
    // (timing): outside the per-message budgets.
    core::cost::Phase<ulnic::abi::kPhaseAck> cost;
    // A receiver that holds packets beyond the gap says which (selective
    // ACK); then only the lost ones go again.
    if (h.dst_addr) {
      take_sack(p, h.ack, h.dst_addr, now);
      return;
    }
    // Fast retransmit: the receiver acks at once when something arrives out
    // of order, so repeated ACKs that do not advance while data is
    // outstanding mean a loss; go back now rather than at the timeout.
    // Once per loss (NewReno's "recover" point): the duplicate ACKs that
    // our own go-back-N provokes must not trigger it again.
    bool outstanding = seq_before(p.acked + 1, p.next_seq);
    if (h.ack == p.acked && outstanding && p.resend_next == p.next_seq && !seq_before(p.acked, p.recover) &&
        ++p.dup_acks >= kFastRetransmitAcks) {
      p.dup_acks = 0;
      p.recover = p.next_seq - 1;
      p.resend_next = p.acked + 1;
      p.resend = Resend::kUnsacked;
    }
    return;
  }
  if (g.drop_per_65536 && (((g.drop_rng = g.drop_rng * 1103515245u + 12345u) >> 8) & 0xffff) < g.drop_per_65536)
    return;  // injected loss (tests)
  owe_ack(p, now);
  if (h.seq != p.expected) {
    ++p.duplicates;
    if (seq_before(h.seq, p.expected)) {
      ++g.stats.duplicates;  // the delayed ACK will do: an old packet says nothing new
    } else {
      ++g.stats.out_of_order;
      if (!g.lossless) hold(p, h, payload);
      p.ack_deadline = now;  // a gap: tell the sender at once (fast retransmit)
    }
    return;
  }
  accept(p, now);
  // An OK verdict on it holds for what went before it: before the packet's
  // own delivery (a disconnect after a VI's last send must find it done).
  if ((h.flags & abi::kWireAckOk) && h.dst_incarnation == g.incarnation) take_ok(src, p, h.ack);
  if (h.op != abi::kWireOpNone && g.up.deliver) g.up.deliver(src, h, payload);
  ok_waiting_due(src, p);
  if (p.held_count) deliver_held(src, p, now);
}

}  // namespace

void init(const core::board::Board& board, const core::boot_config::Config& cfg, const Upcalls& up, uint64_t now) {
  memset(&g, 0, sizeof g);
  g.up = up;
  g.rng = (uint32_t(now ^ (now >> 29)) * 2654435761u) ^ (cfg.node_id * 40503u) ^ uint32_t(cfg.flash_seq << 7);
  if (!g.rng) g.rng = 1;
  while ((g.incarnation = random32()) == 0) {
  }
  if (!board.fabric.present || cfg.fabric_ports == 0) return;
  g.ports = cfg.fabric_ports;
  g.switch_port = cfg.switch_port;
  g.checksums = g.switch_port != abi::kNoSwitch;
  set_loss_mode(!g.checksums);
  g.nodes = g.switch_port == abi::kNoSwitch ? g.ports : g.ports - 1;
  if (cfg.node_id >= g.nodes || abi::fabric_bytes(g.ports, cfg.ring_capacity) > board.fabric.size) return;
  g.self = cfg.node_id;
  g.capacity = cfg.ring_capacity;
  g.fabric = board.fabric.mem;
  g.regs = board.fabric.regs;
  for (uint32_t p = 0; p < g.ports; ++p) {
    if (p == g.self) continue;
    // Our rings: we are the only producer of ring[self][p] and the only
    // consumer of ring[p][self]; our previous boot's leftovers are attached
    // as they are (the indices are in shared memory and stay consistent).
    abi::RingControl* out = ring(g.self, p);
    abi::RingControl* in = ring(p, g.self);
    if (!g.tx[p].attach(out, reinterpret_cast<abi::Packet*>(out + 1), g.capacity)) ++g.stats.bad_packets;
    if (!g.rx[p].attach(in, reinterpret_cast<abi::Packet*>(in + 1), g.capacity)) ++g.stats.bad_packets;
  }
  for (uint32_t k = 0; k < kHeldPackets; ++k) g.held_free[g.held_free_count++] = uint8_t(k);
  for (uint32_t n = 0; n < g.nodes; ++n) reset_peer(g.peers[n], 0, now);
  __atomic_store_n(&port(g.self).rx_asleep, 0u, __ATOMIC_RELAXED);
  g.enabled = true;
  // This boot announces itself to every peer: a standalone ACK that
  // acknowledges nothing and carries the new incarnation, so a peer that
  // knew an earlier boot of ours forgets it now. Until it heard from us it
  // went on addressing the old boot, and its first message to a process
  // started here after the restart was refused and failed (a peer's
  // restart fails what was in flight to it): the soak's AM jobs that hung
  // on their first request. Best effort: if it is lost, that refusal's
  // answer still teaches the peer, as before.
  for (uint32_t n = 0; n < g.nodes; ++n)
    if (n != g.self) (void)transmit(n, abi::kPktAck, nullptr);
}

void publish_link_status() {
  if (!g.enabled) return;
  auto* out = reinterpret_cast<abi::LinkStatus*>(abi::kSramBase + abi::kLinkStatusOffset);
  for (uint32_t n = 0; n < g.nodes && n < abi::kMaxLinks; ++n) {
    const Peer& p = g.peers[n];
    abi::LinkStatus l{};
    l.state = uint32_t(p.unreachable ? abi::LinkState::kUnreachable
                                     : p.their_session ? abi::LinkState::kUp : abi::LinkState::kIdle);
    l.peer_incarnation = p.their_session;
    l.next_seq = p.next_seq;
    l.acked = p.acked;
    l.expected = p.expected;
    l.tx_data = p.tx_data;
    l.rx_data = p.rx_data;
    l.retransmits = p.retransmits;
    l.duplicates = p.duplicates;
    l.rto_us = uint32_t(hal::clint::ticks_to_us(p.rto_ticks));
    l.srtt_us = uint32_t(hal::clint::ticks_to_us(p.srtt));
    l.timeouts = p.timeouts_total;
    // Word by word: the tools read while we write (single writer per word).
    const uint64_t* src = reinterpret_cast<const uint64_t*>(&l);
    auto* dst = reinterpret_cast<uint64_t*>(&out[n]);
    for (size_t i = 0; i < sizeof l / 8; ++i) __atomic_store_n(&dst[i], src[i], __ATOMIC_RELAXED);
  }
}

bool enabled() { return g.enabled; }
uint32_t self() { return g.self; }
uint32_t nodes() { return g.nodes; }
const Stats& stats() { return g.stats; }

void set_rx_drop(uint32_t per_65536, uint32_t seed) {
  g.drop_per_65536 = per_65536;
  for (Peer& p : g.peers) p.placed.epoch = nullptr;  // every packet must meet the dice
  g.drop_rng = seed | 1u;
  set_loss_mode(!g.checksums && per_65536 == 0);
  for (uint32_t n = 0; n < g.nodes; ++n)  // the timeout floor depends on it
    if (g.peers[n].srtt == 0) g.peers[n].rto_ticks = g.peers[n].rto_base = initial_rto();
}

uint32_t room(uint32_t dst) {
  if (!g.enabled || dst >= g.nodes || dst == g.self) return 0;
  const Peer& p = g.peers[dst];
  uint32_t in_flight = p.next_seq - p.acked - 1;
  if (in_flight >= g.window || p.resend_next != p.next_seq) return 0;  // full, or going back N first
  // Both numbers depend on how far the peer got (ACKs, ring head): timing.
  core::cost::Phase<ulnic::abi::kPhaseRing> cost;
  uint32_t ring = tx_ring(tx_port(dst)).free_space(g.window);
  return g.window - in_flight < ring ? g.window - in_flight : ring;
}

bool can_send(uint32_t dst) { return room(dst) != 0; }

void set_ok_held(uint32_t dst, bool held) {
  if (dst >= abi::kMaxPorts) return;
  g.peers[dst].ok_flag = held ? 0 : abi::kWireAckOk;
}

bool ack_now(uint32_t dst) {
  if (!g.enabled || dst >= g.nodes || dst == g.self) return true;
  Peer& p = g.peers[dst];
  if (p.ok_sent == p.expected - 1) return true;  // a packet since said it
  // (Charged to the caller's phase: the verdict this ACK carries.)
  if (transmit(dst, abi::kPktAck, nullptr)) {
    ++g.stats.tx_acks;
    return true;
  }
  // The ring is full: the delayed-ACK timer sends it.
  p.ack_owed = true;
  if (!p.ack_deadline) p.ack_deadline = hal::clint::now();
  return false;
}

void ask_ok(uint32_t dst, uint64_t now) {
  if (!g.enabled || dst >= g.nodes || dst == g.self) return;
  Peer& p = g.peers[dst];
  if (p.ok_asked && now - p.ok_asked < hal::clint::us_to_ticks(kOkProbeUs)) return;
  p.ok_asked = now;
  if (transmit(dst, abi::kPktAck, nullptr, abi::kWireOkProbe)) ++g.stats.tx_acks;
}

bool in_flight(uint32_t dst) {
  return g.enabled && dst < g.nodes && seq_before(g.peers[dst].acked + 1, g.peers[dst].next_seq);
}

uint32_t last_sent(uint32_t dst) { return g.enabled && dst < g.nodes ? g.peers[dst].next_seq - 1 : 0; }

bool acked(uint32_t dst, uint32_t seq) { return g.enabled && dst < g.nodes && !seq_before(g.peers[dst].acked, seq); }

uint64_t recoveries(uint32_t dst) {
  return g.enabled && dst < g.nodes ? g.peers[dst].retransmits + g.peers[dst].duplicates : 0;
}

// Remembers a data packet for retransmission and takes its sequence number.
[[gnu::always_inline]] inline uint32_t take_seq(Peer& p, const abi::WireHeader& h, uint64_t payload, uint32_t owner,
                                               uint64_t generation, uint64_t now) {
  uint32_t seq = p.next_seq;
  TxEntry& e = p.win[seq % kWindow];
  copy_header(&e.h, h);
  e.seq = seq;
  e.seg = nullptr;
  e.payload = payload;
  e.len = h.payload_len;
  e.owner = owner;
  e.generation = generation;
  e.sent_at = now;
  e.retransmitted = false;
  e.sacked = false;
  e.xmit = ++p.xmits;
  p.next_seq = p.resend_next = seq + 1;
  ++g.stats.tx_data;
  ++p.tx_data;
  {
    core::cost::Phase<ulnic::abi::kPhaseAck> cost;  // armed unless earlier packets still wait for their ACK
    if (!p.rto_deadline) p.rto_deadline = now + p.rto_ticks, p.last_progress = now;
  }
  return seq;
}

uint32_t send(uint32_t dst, const abi::WireHeader& h, uint64_t payload, uint16_t len, uint32_t owner,
              uint64_t generation, bool refusal) {
  if (!room(dst) || len > abi::kMtu) return 0;
  abi::WireHeader copy = h;
  copy.payload_len = len;
  uint32_t seq = take_seq(g.peers[dst], copy, payload, owner, generation, hal::clint::now());
  if (refusal) g.peers[dst].last_refusal = seq;
  put_packet(dst, abi::kPktData, &g.peers[dst].win[seq % kWindow], true);  // room() said it fits
  publish_to(dst);
  return seq;
}

namespace {

// A window entry for packet `seq` of a send_segments() operation.
[[gnu::always_inline]] inline void remember_segment(Peer& p, uint32_t seq, const Segments& op, uint32_t sent,
                                                    uint64_t now) {
  TxEntry& e = p.win[seq % kWindow];
  e.seq = seq;
  e.seg = &op;
  e.seg_op = op.h.op_id;
  e.seg_offset = sent;
  e.sent_at = now;
  e.retransmitted = false;
  e.sacked = false;
  e.xmit = ++p.xmits;
}

// After a burst of `n` packets up to `seq` (exclusive): the window's and the
// timer's books, the ACK the packets carried, the peer told.
void burst_sent(Peer& p, uint32_t dst, uint32_t n, uint32_t seq, uint64_t now) {
  p.next_seq = p.resend_next = seq;
  g.stats.tx_data += n;
  p.tx_data += n;
  {
    core::cost::Phase<ulnic::abi::kPhaseAck> cost;  // as in take_seq()
    if (!p.rto_deadline) p.rto_deadline = now + p.rto_ticks, p.last_progress = now;
  }
  ack_sent(p, p.ok_flag);
  publish_to(dst);
}

// The last packet of an operation whose bytes are contiguous (a short
// message's only one): the burst's loop without the setup that pays off
// over many packets, which was a third of a short send's transmit phase
// (issue 22).
uint32_t send_last(Peer& p, abi::RingProducer<abi::Packet>& tx, uint32_t dst, const Segments& op, uint32_t sent,
                   uint64_t now) {
  const uint32_t len = op.length - sent, seq = p.next_seq;
  HeaderWords w;
  copy_header(&w.h, op.h);
  address(w, dst, abi::kPktData, uint8_t(segment_flags(op, sent, len) | p.ok_flag), len, seq);
  w.w[kWordDstAddr] = op.h.dst_addr + sent;
  remember_segment(p, seq, op, sent, now);
  fill(tx.reserve_unchecked(), w.h, reinterpret_cast<const void*>(op.src + sent));
  tx.push();
  burst_sent(p, dst, 1, seq + 1, now);
  return op.length;
}

}  // namespace

// Page-aligned (it is smaller than a page): QEMU chains translated blocks
// only within a guest page, so a burst loop that straddled a page boundary
// (it did, at 0x80012000) went through a block lookup on every packet --
// most of the sending NIC's lookups in a VMMC stream (perf: 3.5x fewer
// lookup samples a byte once aligned).
[[gnu::aligned(4096)]] uint32_t send_segments(uint32_t dst, const Segments& op, uint32_t sent, uint32_t max_packets, uint64_t now) {
  Peer& p = g.peers[dst];
  abi::RingProducer<abi::Packet>& tx = tx_ring(tx_port(dst));
  {
    core::cost::Phase<ulnic::abi::kPhaseRing> cost;
    uint32_t free = tx.free_space(max_packets);
    if (free < max_packets) max_packets = free;
  }
  if (max_packets && !op.pages && op.length - sent <= abi::kMtu && sent < op.length)
    return send_last(p, tx, dst, op, sent, now);
  // The burst's template: the operation's words and the link's, with each
  // packet's flags, length, seq and dst_addr to add.
  HeaderWords t;
  copy_header(&t.h, op.h);
  address(t, dst, abi::kPktData, p.ok_flag, 0, 0);
  uint32_t seq = p.next_seq, n = 0;
  for (; n < max_packets && sent < op.length; ++n, ++seq) {
    uint32_t len = segment_length(op, sent);
    HeaderWords w = t;
    w.w[0] |= uint64_t(segment_flags(op, sent, len)) << 40 | uint64_t(len) << 48;
    w.w[1] |= uint64_t(seq) << 32;
    w.w[kWordDstAddr] = op.h.dst_addr + sent;
    remember_segment(p, seq, op, sent, now);
    fill(tx.reserve_unchecked(), w.h, reinterpret_cast<const void*>(segment_src(op, sent)));
    tx.push();
    // The peer may start on a burst before it ends (one index store a few
    // packets; the doorbell, if it sleeps, once at the end).
    if ((n + 1) % kPublishEvery == 0) tx.publish();
    sent += len;
  }
  if (n) burst_sent(p, dst, n, seq, now);
  return sent;
}

void place_next(uint32_t src, const abi::WireHeader& h, uint8_t first_flag, uint64_t base, uint64_t hi,
                const uint64_t* epoch) {
  if (!g.enabled || src >= g.nodes || src == g.self || g.checksums || g.drop_per_65536 || !epoch) return;
  Peer& p = g.peers[src];
  uint64_t next = h.dst_addr + h.payload_len;
  if (h.dst_incarnation != g.incarnation || h.src_incarnation != p.their_session || next < h.dst_addr || next > hi ||
      p.held_count)  // (packets held from a lossy spell wait for a packet that takes the usual way)
    return;
  Placed& s = p.placed;
  s.next.h = h;
  s.next.h.flags = uint8_t(h.flags & ~(first_flag | abi::kWireAckOk));  // (the OK flag: either way)
  s.next.h.seq = 0;
  s.next.h.ack = 0;
  s.next.h.checksum = 0;
  s.next.h.dst_addr = next;
  s.base = base;
  s.hi = hi;
  s.epoch = epoch;
  s.epoch_at = *epoch;
}

namespace {

// Takes up to `budget` packets from port `from`, which has some (or a wild
// index: then starts its ring over). Returns how many it took. Out of line:
// inlined into poll_rx's loop over the ports, the receive path's ~40 field
// addresses were computed and spilled before the first port -- ~190
// instructions of every pass of the NIC's loop, most of which receive
// nothing (issue 19: an idle pass cost ~1,100).
//
// Page-aligned for the reason send_segments() is: the loop's blocks chain
// but for one crossing near the end (the function is ~4.7 KiB), wherever
// the code before it grows or shrinks.
[[gnu::noinline, gnu::aligned(4096)]] uint32_t drain_port(uint32_t from, uint32_t budget, uint64_t now) {
  abi::RingConsumer<abi::Packet>& rx = g.rx[from];
  // The sender, if a stream of it is placed: on the direct fabric port k
  // is node k (through a switch nothing is placed, see place_next).
  Peer& p = g.peers[from];
  uint32_t took = 0;
  for (uint32_t n; took < budget && (n = rx.available()) != 0;) {
    if (n > budget - took) n = budget - took;
    for (; n; --n) {
      const abi::Packet* pkt = rx.front();
      {
        // A packet: the work item starts here. The ring's own upkeep
        // (pop, release) stays outside it: how many packets one pass
        // finds is timing, not the packet's cost.
        core::cost::Phase<ulnic::abi::kPhaseRxCheck> cost;
        HeaderWords w;
        copy_header(&w.h, pkt->h);  // once: the ring is shared memory
        if (!receive_placed(from, p, w, pkt->payload, now)) receive(from, w.h, pkt->payload, now);
      }
      rx.pop();
      // Entries go back a few at a time: the sender refills them while we
      // take the next, and a small ring is never held for a whole budget.
      if (++took % kRxReleaseEvery == 0) rx.release();
    }
  }
  if (took) rx.release();
  if (rx.corrupt()) {
    // A wild index from the other side: count it and start that ring over.
    ++g.stats.bad_packets;
    abi::RingControl* in = ring(from, g.self);
    __atomic_store_n(&in->head, __atomic_load_n(&in->tail, __ATOMIC_ACQUIRE), __ATOMIC_RELEASE);
    rx.attach(in, reinterpret_cast<abi::Packet*>(in + 1), g.capacity);
  }
  return took;
}

}  // namespace

bool poll_rx(uint64_t now) {
  if (!g.enabled) return false;
  bool worked = false;
  uint32_t budget = kRxBudget;
  for (uint32_t i = 0; i < g.ports && budget; ++i) {
    uint32_t from = (g.rx_next + i) % g.ports;
    if (from == g.self || (g.switch_port != abi::kNoSwitch && from != g.switch_port)) continue;
    abi::RingConsumer<abi::Packet>& rx = g.rx[from];
    if (rx.available() == 0 && !rx.corrupt()) continue;  // (available() finds a wild index)
    const uint32_t took = drain_port(from, budget, now);
    budget -= took;
    worked |= took != 0;
  }
  g.rx_next = (g.rx_next + 1) % (g.ports ? g.ports : 1);
  g.rx_behind = budget == 0;
  if (worked && g.up.rx_done) g.up.rx_done();
  return worked;
}

bool rx_behind() { return g.rx_behind; }

namespace {

// Peer `n`'s timers: unreachable, the retransmission timeout and what it
// resends, an ACK due. Out of line, for a peer with something in flight, to
// resend or to acknowledge (poll_timers looks): inlined into the loop over
// the peers, its addresses were computed and spilled in every pass of the
// NIC's loop (~80 instructions of passes that mostly have nothing due).
[[gnu::noinline]] bool peer_timers(uint32_t n, Peer& p, bool outstanding, uint64_t now) {
  bool worked = false;
  // Signed: send() stamps with a clock read after this pass's `now`.
  if (outstanding && !g.rx_behind && p.timeouts >= kUnreachableTimeouts &&
      int64_t(now - p.last_progress) > int64_t(hal::clint::us_to_ticks(kUnreachableUs))) {
    declare_unreachable(n, now);
    worked = true;
  }
  // Our own receive rings may hold the ACK we wait for: a NIC that was off
  // its CPU past the deadline and then took a full budget of packets
  // judges once it has read them (for at most one more timeout).
  const bool unread = g.rx_behind && now - p.rto_deadline < p.rto_ticks;
  if (outstanding && p.rto_deadline && now >= p.rto_deadline && !unread) {
    // Two packets go again, a probe: the oldest unacknowledged (whatever
    // the peer's selective ACKs said of it: one that named a packet it
    // does not hold cannot stall the link) and the newest, which, held
    // beyond a gap, makes the peer say at once what it lacks (a tail loss
    // probe's choice). Their ACK tells what else was lost (take_ack,
    // take_sack) -- or that nothing was: on a loaded 2-core host most
    // timeouts are a peer off its CPU, and sending the whole window at
    // each made every such pause a window's worth of copies both sides
    // then had to handle (a soak resent 17-21% of its packets; now 3-5%).
    p.resend_next = p.acked + 1;
    if (p.timeouts < 0xff) ++p.timeouts;
    ++p.timeouts_total;
    p.timeout_at = now;
    p.resend = Resend::kProbe;
    // Back off, but on a lossy link only once timeouts come in a row:
    // there a resend and its ACK both get through only half the time
    // (30% loss each way), and doubling at every timeout made the
    // expected wait for one lost packet grow to the cap.
    if (g.lossless || p.timeouts > kLossyTimeoutsBeforeBackoff)
      p.rto_ticks = p.rto_ticks * 2 < hal::clint::us_to_ticks(kRtoMaxUs) ? p.rto_ticks * 2
                                                                         : hal::clint::us_to_ticks(kRtoMaxUs);
    p.rto_deadline = now + p.rto_ticks;
  }
  bool resent = false;
  while (seq_before(p.resend_next, p.next_seq)) {
    core::cost::Phase<ulnic::abi::kPhaseTransmit> cost;  // a retransmission
    TxEntry& e = p.win[p.resend_next % kWindow];
    if (!resend_wanted(p, e)) {
      ++p.resend_next;
      continue;
    }
    if (!put_packet(n, abi::kPktData, &e, false)) break;
    e.retransmitted = true;
    e.xmit = ++p.xmits;
    ++p.resend_next;
    ++g.stats.retransmits;
    ++p.retransmits;
    resent = true;
    if (p.resend == Resend::kProbe)  // the oldest, then the newest
      p.resend_next = seq_at_or_before(p.resend_next, p.next_seq - 1) ? p.next_seq - 1 : p.next_seq;
  }
  if (resent) publish_to(n), worked = true;
  if (p.ack_owed && (now >= p.ack_deadline || p.unacked_rx >= g.ack_every)) {
    core::cost::Phase<ulnic::abi::kPhaseAck> cost;
    if (transmit(n, abi::kPktAck, nullptr)) ++g.stats.tx_acks, worked = true;
  }
  return worked;
}

}  // namespace

bool poll_timers(uint64_t now) {
  if (!g.enabled) return false;
  bool worked = false;
  for (uint32_t n = 0; n < g.nodes; ++n) {
    if (n == g.self) continue;
    Peer& p = g.peers[n];
    const bool outstanding = seq_before(p.acked + 1, p.next_seq);
    if (outstanding || p.ack_owed || seq_before(p.resend_next, p.next_seq)) worked |= peer_timers(n, p, outstanding, now);
  }
  return worked;
}

bool busy() {
  if (!g.enabled) return false;
  for (uint32_t n = 0; n < g.nodes; ++n) {
    const Peer& p = g.peers[n];
    if (n != g.self && (p.ack_owed || seq_before(p.acked + 1, p.next_seq))) return true;
  }
  return false;
}

uint64_t next_deadline() {
  uint64_t d = ~0ull;
  for (uint32_t n = 0; g.enabled && n < g.nodes; ++n) {
    const Peer& p = g.peers[n];
    if (n == g.self) continue;
    if (p.ack_owed && p.ack_deadline < d) d = p.ack_deadline;
    if (p.rto_deadline && p.rto_deadline < d) d = p.rto_deadline;
  }
  return d;
}

bool receiving(uint64_t now, uint64_t within_ticks) { return g.enabled && now - g.last_rx < within_ticks; }

bool prepare_sleep() {
  if (!g.enabled) return true;
  __atomic_store_n(&port(g.self).rx_asleep, 1u, __ATOMIC_RELAXED);
  full_barrier();  // our flag before their tails: pairs with ring_doorbell()
  for (uint32_t from = 0; from < g.ports; ++from)
    if (from != g.self && g.rx[from].available()) {
      __atomic_store_n(&port(g.self).rx_asleep, 0u, __ATOMIC_RELAXED);
      return false;
    }
  return true;
}

void woke() {
  if (g.enabled) __atomic_store_n(&port(g.self).rx_asleep, 0u, __ATOMIC_RELAXED);
}

}  // namespace link
