// Node 1 of the test board's fabric, played by a firmware test. `ulnic
// fwtest` gives every test board a fabric with no switch (2 ports unless
// --fabric-ports says more): this NIC is node 0, and the test is node 1 by
// writing ring[1][0] (packets toward us) and reading ring[0][1] (what our
// link sends it). The link is brought up with the upcalls the test chooses
// (the firmware's own, lcp::remote_*, to test the protocol layer; its own,
// to test the link alone). On a larger fabric a second FabricPeer may play
// node 2 and beyond (`node`, attach() instead of up()).
// Header-only; freestanding like the test images: see harness.h.
#pragma once

#include <stdint.h>
#include <string.h>

#include "core/board.h"
#include "core/boot_config.h"
#include "core/status.h"
#include "hal/clint.h"
#include "harness.h"
#include "lcp/loop.h"
#include "link/link.h"
#include "ulnic/abi/fabric.h"
#include "ulnic/abi/ring.h"
#include "ulnic/abi/status.h"

namespace fwtest {

namespace abi = ulnic::abi;

struct FabricPeer {
  static constexpr uint32_t kNode = 1;  // the node it plays unless told (`node`)
  static constexpr uint32_t kIncarnation = 0x5eed1234;
  static constexpr uint32_t kKept = 64;         // our data packets it keeps for the test
  static constexpr uint32_t kKeptPayload = 128;  // ... and the first bytes of each

  // One of our data packets, as node 1 took it.
  struct Heard {
    abi::WireHeader h;
    uint8_t payload[kKeptPayload];
  };

  uint32_t node = kNode;
  core::boot_config::Config cfg{};
  uint64_t fabric = 0;
  abi::RingProducer<abi::Packet> to_us;    // ring[1][0]: the test is its producer
  abi::RingConsumer<abi::Packet> from_us;  // ring[0][1]: the test is its consumer
  uint32_t ours = 0;      // our incarnation, once learnt (meet / learn_incarnation)
  uint32_t next_seq = 1;  // node 1's next sequence number
  uint32_t heard = 0;     // our data packets it took in order
  bool acks = false;      // its data packets acknowledge `heard` (else they carry the ack they are given)
  bool hold = false;      // send() leaves its packets in the ring for a later link::poll_rx
  // Our OK verdicts it took: a kWireOpOkThrough, or a packet whose ack says
  // OK (abi::kWireAckOk), that moved the watermark -- how many, the newest
  // watermark, and the seq of our data packets it came after (every refusal
  // of ours that covers is at or before it).
  uint32_t ok_verdicts = 0;
  uint32_t ok_seq = 0, ok_after = 0;
  bool ok_heard = false;
  Heard log[kKept];       // the last kKept of them, by sequence number
  uint32_t logged = 0;    // how many it took in all
  // Node 1's last packets (kWireLast): the op id and seq of the last kKept.
  struct LastSent {
    uint64_t op_id;
    uint32_t seq;
  };
  LastSent lasts[kKept] = {};
  uint32_t lasts_sent = 0;

  abi::RingControl* ring(uint32_t src, uint32_t dst) const {
    return reinterpret_cast<abi::RingControl*>(fabric +
                                               abi::ring_offset(cfg.fabric_ports, cfg.ring_capacity, src, dst));
  }

  // The boot config, the link on board b's fabric with upcalls `up`, and
  // node 1's ends of the two rings; false (after reporting) if any is amiss.
  bool up(const core::board::Board& b, const link::Upcalls& upcalls) {
    if (!EXPECT_EQ(core::boot_config::load(cfg), abi::kBootConfigOk)) return false;
    if (!EXPECT(b.fabric.present) || !EXPECT_EQ(cfg.node_id, 0u) || !EXPECT(cfg.fabric_ports >= 2) ||
        !EXPECT_EQ(cfg.switch_port, abi::kNoSwitch))
      return false;
    link::init(b, cfg, upcalls, hal::clint::now());
    if (!EXPECT(link::enabled())) return false;
    return rings(b);
  }
  // Node `node`'s ends of its two rings, the link already up (another
  // FabricPeer's up()); false (after reporting) if amiss.
  bool attach(const core::board::Board& b) {
    return EXPECT_EQ(core::boot_config::load(cfg), abi::kBootConfigOk) && rings(b);
  }

 private:
  // Node `node`'s ends of its two rings, cfg loaded.
  bool rings(const core::board::Board& b) {
    if (!EXPECT(node > 0 && node < cfg.fabric_ports)) return false;
    fabric = b.fabric.mem;
    abi::RingControl* in = ring(node, 0);
    abi::RingControl* out = ring(0, node);
    return EXPECT(to_us.attach(in, reinterpret_cast<abi::Packet*>(in + 1), cfg.ring_capacity)) &&
           EXPECT(from_us.attach(out, reinterpret_cast<abi::Packet*>(out + 1), cfg.ring_capacity));
  }

 public:
  // A data packet's header from node 1 to us, operation fields zero.
  abi::WireHeader header() const {
    abi::WireHeader h{};
    h.magic = abi::kWireMagic;
    h.type = abi::kPktData;
    h.src = uint16_t(node);
    h.dst = 0;
    h.src_incarnation = kIncarnation;
    h.dst_incarnation = ours;
    return h;
  }

  // Packet k of operation op_id (`op`, `total` bytes in MTU packets, from
  // node 1's slot src_slot to our slot dst_slot): the bytes from k * kMtu,
  // kWireFirst on the first, kWireLast on the last.
  abi::WireHeader packet_header(uint8_t op, uint64_t op_id, uint32_t total, uint32_t k, uint16_t dst_slot,
                                uint16_t src_slot) const {
    const uint32_t off = k * abi::kMtu, len = total - off < abi::kMtu ? total - off : abi::kMtu;
    abi::WireHeader h = header();
    h.op = op;
    h.flags = uint8_t((k == 0 ? abi::kWireFirst : 0) | (off + len >= total ? abi::kWireLast : 0));
    h.payload_len = uint16_t(len);
    h.dst_slot = dst_slot;
    h.dst_addr = off;
    h.op_id = op_id;
    h.op_length = total;
    h.src_slot = src_slot;
    return h;
  }

  // Node 1 sends h (h.payload_len bytes of `payload`) with its next sequence
  // number (or `seq`); our link then takes what arrived (unless `hold`).
  void send(abi::WireHeader h, const void* payload, uint32_t seq = 0) {
    h.seq = seq ? seq : next_seq++;
    if (h.flags & abi::kWireLast) lasts[lasts_sent++ % kKept] = LastSent{h.op_id, h.seq};
    if (acks) h.ack = heard;
    abi::Packet* p = to_us.reserve();
    if (!p) return fail(__FILE__, __LINE__, "ring toward node 0 full");
    if (h.payload_len) memcpy(p->payload, payload, h.payload_len);
    p->h = h;
    to_us.push();
    to_us.publish();
    if (!hold) link::poll_rx(hal::clint::now());
  }

  // Node 1 sends a standalone ACK of our packets through `ack`; with `ok`, it
  // says OK for our operations through `ack` too (abi::kWireAckOk), once our
  // link has delivered node 1's data packets through `after`.
  void send_ack(uint32_t ack, bool ok, uint32_t after) {
    abi::WireHeader h = header();
    h.type = abi::kPktAck;
    h.ack = ack;
    if (ok) h.flags = abi::kWireAckOk, h.seq = after;
    abi::Packet* p = to_us.reserve();
    if (!p) return fail(__FILE__, __LINE__, "ring toward node 0 full");
    p->h = h;
    to_us.push();
    to_us.publish();
    if (!hold) link::poll_rx(hal::clint::now());
  }

  // Takes everything our link sent node 1 (ACKs, data, retransmissions):
  // data packets next in order are kept in the log. Returns the last header
  // (zero if none).
  abi::WireHeader drain() {
    abi::WireHeader last{};
    while (const abi::Packet* p = from_us.peek()) {
      last = p->h;
      if (last.flags & abi::kWireAckOk)
        took_ok(last.ack, last.type == abi::kPktAck ? last.seq : last.seq - 1);
      if (last.type == abi::kPktData && last.seq == heard + 1) {
        ++heard;
        if (last.op == abi::kWireOpOkThrough) took_ok(uint32_t(last.dst_addr), last.seq);
        Heard& e = log[logged++ % kKept];
        e.h = last;
        memcpy(e.payload, p->payload, last.payload_len < kKeptPayload ? last.payload_len : kKeptPayload);
      }
      from_us.pop();
    }
    from_us.release();
    return last;
  }

  void took_ok(uint32_t seq, uint32_t after) {
    if (ok_heard && !link::seq_before(ok_seq, seq)) return;
    ok_heard = true;
    ok_seq = seq;
    ok_after = after;
    ++ok_verdicts;
  }

  // Our ACK, forced out now, tells node 1 our incarnation (after a packet of
  // its with dst_incarnation 0).
  bool learn_incarnation() {
    link::poll_timers(hal::clint::now() + hal::clint::us_to_ticks(1'000'000));
    abi::WireHeader ack = drain();
    if (!EXPECT_EQ(ack.type, abi::kPktAck) || !EXPECT_EQ(ack.ack, next_seq - 1)) return false;
    ours = ack.src_incarnation;
    return EXPECT(ours != 0);
  }
  // The same after a sequence filler (a packet no protocol sees).
  bool meet() {
    abi::WireHeader h = header();
    h.dst_incarnation = 0;
    send(h, nullptr);
    return learn_incarnation() && EXPECT_EQ(status().peer_incarnation, kIncarnation);
  }

  // The newest data packet of ours with operation `op` and `op_id` (null if none).
  const Heard* find(uint8_t op, uint64_t op_id) {
    drain();
    uint32_t kept = logged < kKept ? logged : kKept;
    for (uint32_t i = 1; i <= kept; ++i) {
      const Heard& e = log[(logged - i) % kKept];
      if (e.h.op == op && e.h.op_id == op_id) return &e;
    }
    return nullptr;
  }
  // Our verdict on node 1's operation op_id has come back: its status; 0xffff if none.
  // A refusal is a kWireOpResult naming it; success, an OK verdict (an ack
  // with abi::kWireAckOk, or a kWireOpOkThrough) covering the seq of its last
  // packet (a refusal comes before the OK that covers its seq).
  uint16_t verdict(uint64_t op_id) {
    if (const Heard* e = find(abi::kWireOpResult, op_id)) return e->h.status;
    uint32_t seq = 0;
    for (uint32_t i = 1; i <= kKept && i <= lasts_sent && !seq; ++i)
      if (lasts[(lasts_sent - i) % kKept].op_id == op_id) seq = lasts[(lasts_sent - i) % kKept].seq;
    if (!seq) return 0xffff;
    return ok_heard && link::seq_at_or_before(seq, ok_seq) ? abi::kCqOk : 0xffff;
  }

  // Our link's view of node 1.
  const abi::LinkStatus& status() const {
    link::publish_link_status();
    return reinterpret_cast<const abi::LinkStatus*>(abi::kSramBase + abi::kLinkStatusOffset)[node];
  }
};

// Runs one pass of the NIC's loop with no slots, due for a status refresh,
// so the link's statistics are published in the status block; returns the
// counter link_placed (packets the link placed itself).
inline uint64_t published_link_placed() {
  core::boot_config::Config c{};
  lcp::LoopState s{};
  lcp::loop_init(s, c, hal::clint::now());
  lcp::loop_pass(s, hal::clint::now());
  return core::status::counter(abi::kCtrLinkPlaced);
}

}  // namespace fwtest
