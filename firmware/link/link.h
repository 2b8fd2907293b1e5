// The reliable link (DESIGN §6, VMMC-2 style) over the fabric's SPSC packet
// rings: per-peer sequence numbers, cumulative acknowledgements piggybacked
// on data (or sent alone after a short delay), retransmission from host
// memory with backoff (selective repeat where packets can be lost: packets
// beyond a gap are held and selectively acknowledged; go-back-N on the
// direct fabric), duplicate suppression, in-order
// exactly-once delivery, and a deadline after which a silent peer is declared
// unreachable. Incarnation numbers (random per boot) tell a restarted peer
// from the old one, so sequence state starts over cleanly after a restart.
//
// The link knows nothing of operations: the protocol layer above hands it
// packets to send (with a function that says whether their payload may still
// be read from host memory) and takes in-order deliveries through upcalls.
#pragma once

#include <stdint.h>

#include "core/board.h"
#include "core/boot_config.h"
#include "ulnic/abi/fabric.h"

namespace link {

namespace abi = ulnic::abi;

// Unacknowledged data packets per peer on the direct fabric, which loses
// nothing: 512 KiB of 4 KiB packets, half a default ring (abi/fabric.h).
// The bandwidth-delay product of two NICs that poll is far less; the rest
// absorbs the moments a busy 2-core host takes one NIC's core away, so the
// other keeps working meanwhile.
constexpr uint32_t kWindow = 128;
// ... through a switch or with injected loss (with go-back-N, which the
// link used there before selective repeat, a window of 128 never got
// through at 30% loss each way; the window also bounds what a receiver
// holds for one peer, below).
constexpr uint32_t kLossyWindow = 32;
// ... and there the receiver holds packets that arrive beyond a gap (up to a
// window ahead) until the gap fills, and its standalone ACKs say which it
// holds (selective repeat: the sender sends again only what was lost, not
// the rest of the window). Packets held, for all peers together: two full
// lossy windows (266 KiB); beyond that a packet from beyond a gap is dropped
// and sent again like any lost one.
constexpr uint32_t kHeldPackets = 64;
static_assert(kLossyWindow - 1 <= 64, "a standalone ACK's dst_addr names every packet a window holds");
constexpr uint64_t kAckDelayUs = 30;         // a standalone ACK waits this long for a ride
// ... or until this many packets arrived: a quarter window, so the sender
// does not run dry (one ACK, a packet for each side to handle, per 128 KiB).
// The sender then sends in bursts of about as many; with half a window the
// two sides took turns more than they overlapped.
constexpr uint32_t kAckEvery = kWindow / 4;
constexpr uint32_t kLossyAckEvery = 8;
constexpr uint64_t kRtoInitialUs = 2'000;    // retransmission timeout before the first RTT sample
constexpr uint64_t kRtoMinUs = 1'000;        // floor of the estimated timeout
// ... on the direct fabric without injected loss: a 2-core host that runs
// two NICs and their processes deschedules a NIC for over a millisecond
// dozens of times a second (measured, issue 5): with the 1 ms floor each
// such pause cost a spurious go-back-N of the whole window.
constexpr uint64_t kRtoMinLosslessUs = 20'000;
constexpr uint64_t kRtoMaxUs = 200'000;      // backoff cap
// No progress for this long: peer unreachable. At 30% loss each way a
// retransmission round trip succeeds about half the time; with the backoff
// capped at kRtoMaxUs, 5 s is ~30 rounds (a live peer is lost with p ~ 1e-9).
constexpr uint64_t kUnreachableUs = 5'000'000;
// ... and only after this many retransmission timeouts in a row: the bound is
// the peer's chances to answer, not the clock alone. A NIC whose own vCPU the
// host left unscheduled past the deadline (a loaded 2-core host, a stopped
// QEMU) wakes with it expired and none of those retransmissions sent, and
// must give the peer its rounds before it judges. On a running NIC 24
// timeouts take under 5 s (at the backoff cap ~4.3 s), so there the deadline
// binds; a live peer behind 30% loss each way fails 24 rounds with p ~ 1e-7.
constexpr uint32_t kUnreachableTimeouts = 24;
constexpr uint32_t kFastRetransmitAcks = 2;      // duplicate ACKs (without selective ACKs) that resend early
// On a lossy link the timeout doubles only after this many in a row (see
// poll_timers); on the direct fabric, where only a descheduled peer is late,
// at every one.
constexpr uint32_t kLossyTimeoutsBeforeBackoff = 4;

// Sequence numbers (and the counts that wrap like them) in order: a before b.
inline bool seq_before(uint32_t a, uint32_t b) { return int32_t(a - b) < 0; }
inline bool seq_at_or_before(uint32_t a, uint32_t b) { return int32_t(a - b) <= 0; }

// Upcalls into the protocol layer.
struct Upcalls {
  // An in-order, exactly-once data packet from `src` (payload in the RX ring,
  // valid during the call).
  void (*deliver)(uint32_t src, const abi::WireHeader& h, const uint8_t* payload);
  // Everything in flight to `peer` is lost (unreachable or restarted).
  void (*peer_lost)(uint32_t peer);
  // May the payload of this packet still be read from host memory?
  bool (*payload_valid)(uint32_t owner, uint64_t owner_generation);
  // A receive pass that delivered packets is over (what the deliveries owe
  // their senders may now go as one packet); may be null.
  void (*rx_done)();
  // `src` says every operation of ours whose last packet had a seq <= `seq`
  // and that it did not refuse (in a packet delivered before this call)
  // finished well (abi::kWireAckOk); may be null.
  void (*ok_through)(uint32_t src, uint32_t seq);
};

struct Stats {
  uint64_t tx_data, tx_acks, rx_data, rx_acks, retransmits, duplicates, out_of_order;
  uint64_t bad_packets;     // bad magic, length, checksum or addressing: dropped
  uint64_t ring_full;       // sends refused by back-pressure
  uint64_t unreachable;     // peers declared unreachable
  uint64_t restarts;        // peer incarnations that changed
  uint64_t placed;          // data packets placed by the link itself (place_next)
  uint64_t held;            // data packets from beyond a gap held until it filled (selective repeat)
  uint64_t sacked;          // our data packets a peer said it holds (spared a retransmission)
};

// Brings the link up on the fabric the boot config describes (no-op without one).
void init(const core::board::Board& board, const core::boot_config::Config& cfg, const Upcalls& up, uint64_t now);
bool enabled();
uint32_t self();
uint32_t nodes();

// Data packets that may be sent to `dst` now (window and ring room; 0: wait).
uint32_t room(uint32_t dst);
bool can_send(uint32_t dst);
// Are data packets to `dst` unacknowledged? Then the link's own deadline
// (kUnreachableUs and kUnreachableTimeouts) judges the peer, and fails what
// waits for it (Upcalls::peer_lost).
bool in_flight(uint32_t dst);
// Sends a data packet: `h` carries the operation fields (op, flags, dst_*,
// op_id, op_length); the link fills in addressing, sequence, ack, checksum.
// The payload is read from `payload` (a NIC address in host memory) now and
// again on every retransmission while payload_valid(owner, generation).
// Returns the sequence number, or 0 if it could not be sent.
// OK verdicts ride on the link's acks (abi::kWireAckOk): a packet's ack says
// OK for what it covers unless a refusal to its destination waits
// (set_ok_held), or the packet is one (`refusal`: it names an operation its
// own ack may cover) or came before one in the sequence (a retransmission).
// h.flags never carries kWireAckOk: the link decides.
uint32_t send(uint32_t dst, const abi::WireHeader& h, uint64_t payload, uint16_t len, uint32_t owner,
              uint64_t owner_generation, bool refusal = false);
// Refusals to `dst` wait in the protocol layer for room on the link (`held`)
// or none do any more: while they wait, no packet to `dst` says OK.
void set_ok_held(uint32_t dst, bool held);
// A receive pass took operations from `dst` that finished well: the ACK
// owed to it (which says so) goes now rather than after kAckDelayUs, unless
// a packet since carried it. False if the ring to `dst` is full (the owed
// ACK then goes when the delayed-ACK timer fires).
bool ack_now(uint32_t dst);
// An operation to `dst` whose last packet was acknowledged has waited for
// its OK (the ACK that said it may have been lost, and what acknowledged it
// since could not say it: a refusal): ask `dst` to say it again
// (abi::kWireOkProbe; at most one ask per peer per kOkProbeUs).
constexpr uint64_t kOkProbeUs = 5'000;
void ask_ok(uint32_t dst, uint64_t now);
// Segmentation offload for the data path: the packets of one operation,
// built from a header template. Packet k carries source bytes
// [off_k, off_k + len_k) (len_k = kMtu but the last), with header `h` but
// dst_addr = h.dst_addr + off_k, payload_len = len_k and flags = h.flags,
// plus first_flags on the operation's first packet and last_flags on its last.
struct Segments {
  abi::WireHeader h;     // the template (h.dst_addr: where byte 0 goes)
  uint64_t src;          // NIC address of byte 0 (host memory)
  uint32_t length;       // bytes in the operation
  uint8_t first_flags, last_flags;
  uint32_t owner;        // payload_valid(owner, generation) on retransmission
  uint64_t generation;
  // A source scattered over pages (U-Net/MM): the NIC address of each page
  // the bytes touch, byte 0 at page_off in the first; a packet then ends at
  // a page's end. Null: the bytes are contiguous from src.
  const uint64_t* pages;
  uint32_t page_off;
};
constexpr uint32_t kSegmentPage = 4096;
// The flags of the packet carrying the bytes from `sent`, `len` of them.
inline uint8_t segment_flags(const Segments& op, uint32_t sent, uint32_t len) {
  return uint8_t(op.h.flags | (sent == 0 ? op.first_flags : 0) | (sent + len == op.length ? op.last_flags : 0));
}
// Packet k's header: the bytes from `sent`, `len` of them.
inline void segment_header(const Segments& op, uint32_t sent, uint32_t len, abi::WireHeader& h) {
  h.flags = segment_flags(op, sent, len);
  h.dst_addr = op.h.dst_addr + sent;
  h.payload_len = uint16_t(len);
}
inline uint32_t segment_length(const Segments& op, uint32_t sent) {
  uint32_t n = op.length - sent < abi::kMtu ? op.length - sent : abi::kMtu;
  if (__builtin_expect(op.pages != nullptr, 0)) {
    const uint32_t in_page = kSegmentPage - (op.page_off + sent) % kSegmentPage;
    if (n > in_page) n = in_page;
  }
  return n;
}
// Where the bytes from `sent` are (NIC address).
inline uint64_t segment_src(const Segments& op, uint32_t sent) {
  if (__builtin_expect(op.pages == nullptr, 1)) return op.src + sent;
  const uint64_t at = uint64_t(op.page_off) + sent;
  return op.pages[at / kSegmentPage] + at % kSegmentPage;
}
// Sends the operation's packets from byte `sent` on, at most `max_packets`
// of them (room(dst)), stamped with the caller's `now`; the peer sees them
// a few at a time (an index store per 8; at most one doorbell). Returns the
// new `sent`. `op` must stay where it is while its packets may be sent
// again: the window keeps a pointer to it, and rebuilds a packet from it
// only while op.h.op_id is the same (a new operation there, or an op_id of
// 0, turns them into sequence fillers).
uint32_t send_segments(uint32_t dst, const Segments& op, uint32_t sent, uint32_t max_packets, uint64_t now);
// Direct data placement, as VMMC's LCP places a send's chunks without
// asking anyone: having delivered packet `h` from `src`, the protocol layer
// may tell the link where the rest of that operation goes. The link then
// places a later packet from `src` itself -- payload to base + dst_addr, no
// deliver upcall -- if its header is `h` but for three fields: seq (the next
// in order), ack (taken as usual) and dst_addr (where the previous packet's
// bytes ended), and flags without `first_flag`; if its bytes end at or
// below `hi`; and if *epoch still holds the value it holds now (the layer's
// tables have not changed). Anything else is delivered the usual way. One
// such stream per peer (a new call replaces it). Not used where packets are
// checksummed (the switch) or dropped by injection, nor before the peer
// knows our incarnation.
void place_next(uint32_t src, const abi::WireHeader& h, uint8_t first_flag, uint64_t base, uint64_t hi,
                const uint64_t* epoch);
// The protocol layer's view of one operation's packets (remote.cpp's
// verdict deadline): the sequence number of the last data packet sent to
// `dst` so far; whether `dst` has acknowledged every data packet up to
// `seq`; and a count that moves whenever either direction of the link to
// `dst` recovers from a loss (packets we sent again, packets from `dst`
// that arrived twice or ahead of a gap).
uint32_t last_sent(uint32_t dst);
bool acked(uint32_t dst, uint32_t seq);
uint64_t recoveries(uint32_t dst);
// Receive work: at most a bounded number of packets. True if it did work.
bool poll_rx(uint64_t now);
// Did the last poll_rx stop at its budget (packets may still wait)? Nothing
// declares a peer silent then: its answer may be among them (after a long
// descheduling, a peer's ACKs and verdicts queue up behind a ring's worth).
bool rx_behind();
// Timers: retransmissions, standalone ACKs, unreachable peers. True if it did work.
bool poll_timers(uint64_t now);
// True while anything is unacknowledged or an ACK is owed (do not sleep long).
bool busy();
// The earliest mtime at which poll_timers has something to do (~0: none).
uint64_t next_deadline();
// Has a data packet arrived within the last `within_ticks`?
bool receiving(uint64_t now, uint64_t within_ticks);
// Before sleeping: tell senders to ring us; false if work arrived meanwhile.
bool prepare_sleep();
void woke();

const Stats& stats();
// Writes every peer's LinkStatus into SRAM (the status refresh calls it).
void publish_link_status();
// Fault injection for tests (boot flag): drop this fraction (/65536) of
// received data packets, seeded, reproducible.
void set_rx_drop(uint32_t per_65536, uint32_t seed);

}  // namespace link
