// The reliable link (DESIGN §6, VMMC-2 style) over the fabric's SPSC packet
// rings: per-peer sequence numbers, cumulative acknowledgements piggybacked
// on data (or sent alone after a short delay), go-back-N retransmission from
// host memory with exponential backoff, duplicate suppression, in-order
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

constexpr uint32_t kWindow = 32;             // unacknowledged data packets per peer
constexpr uint64_t kAckDelayUs = 30;         // a standalone ACK waits this long for a ride
constexpr uint32_t kAckEvery = 8;            // ... or until this many packets arrived
constexpr uint64_t kRtoInitialUs = 2'000;    // retransmission timeout before the first RTT sample
constexpr uint64_t kRtoMinUs = 1'000;        // floor of the estimated timeout
constexpr uint64_t kRtoMaxUs = 200'000;      // backoff cap
// No progress for this long: peer unreachable. At 30% loss each way a
// retransmission round trip succeeds about half the time; with the backoff
// capped at kRtoMaxUs, 5 s is ~30 rounds (a live peer is lost with p ~ 1e-9).
constexpr uint64_t kUnreachableUs = 5'000'000;
constexpr uint32_t kFastRetransmitAcks = 2;      // duplicate ACKs that trigger go-back-N early

// Upcalls into the protocol layer.
struct Upcalls {
  // An in-order, exactly-once data packet from `src` (payload in the RX ring,
  // valid during the call).
  void (*deliver)(uint32_t src, const abi::WireHeader& h, const uint8_t* payload);
  // Everything in flight to `peer` is lost (unreachable or restarted).
  void (*peer_lost)(uint32_t peer);
  // May the payload of this packet still be read from host memory?
  bool (*payload_valid)(uint32_t owner, uint64_t owner_generation);
};

struct Stats {
  uint64_t tx_data, tx_acks, rx_data, rx_acks, retransmits, duplicates, out_of_order;
  uint64_t bad_packets;     // bad magic, length, checksum or addressing: dropped
  uint64_t ring_full;       // sends refused by back-pressure
  uint64_t unreachable;     // peers declared unreachable
  uint64_t restarts;        // peer incarnations that changed
};

// Brings the link up on the fabric the boot config describes (no-op without one).
void init(const core::board::Board& board, const core::boot_config::Config& cfg, const Upcalls& up, uint64_t now);
bool enabled();
uint32_t self();
uint32_t nodes();

// Room to send one more data packet to `dst` now?
bool can_send(uint32_t dst);
// Queues a data packet: `h` carries the operation fields (op, flags, dst_*,
// op_id, op_length); the link fills in addressing, sequence, ack, checksum.
// The payload is read from `payload` (a NIC address in host memory) now and
// again on every retransmission while payload_valid(owner, generation).
// Returns the sequence number, or 0 if it could not be queued.
uint32_t send(uint32_t dst, const abi::WireHeader& h, uint64_t payload, uint16_t len, uint32_t owner,
              uint64_t owner_generation);
// Receive work: at most a bounded number of packets. True if it did work.
bool poll_rx(uint64_t now);
// Timers: retransmissions, standalone ACKs, unreachable peers. True if it did work.
bool poll_timers(uint64_t now);
// True while anything is unacknowledged or an ACK is owed (do not sleep long).
bool busy();
// The earliest mtime at which poll_timers has something to do (~0: none).
uint64_t next_deadline();
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
