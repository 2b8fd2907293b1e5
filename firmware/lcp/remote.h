// Remote puts over the reliable link: the first cross-node data path.
//
// Sender: a kOpPut descriptor becomes an operation in the put table; its
// bytes go out in MTU-sized packets straight from host memory (the link
// rereads them for retransmission); the last packet asks the receiving NIC
// for a verdict, and the completion is written when that verdict arrives --
// after the receiver placed every byte -- or when the peer is lost.
// Receiver: every arriving packet is checked against the target slot's
// registration (key, RemoteWrite, bounds) before a byte is written; refused
// packets are counted and turn the verdict into an error.
// Verdicts: a refusal is a packet of its own (kWireOpResult, at once); the
// operations that finished well ride on the link's acks ("all your
// operations up to the seq I ack that I did not refuse": abi::kWireAckOk,
// as IB RC's ACK completes a send), and the ACK owed goes as soon as the
// receive pass that placed them ends -- per burst of arrivals, not per
// operation, and no sequenced packet of its own. The link delivers in order
// and puts that flag only on packets every refusal went before, so a
// refusal always reaches the sender before the OK that covers its
// operation; while a refusal waits for room on the link, the OK is a
// kWireOpOkThrough packet queued behind it.
#pragma once

#include "lcp/slots.h"
#include "link/link.h"
#include "ulnic/abi/fabric.h"

namespace lcp {

constexpr uint32_t kMaxPuts = 64;          // operations in flight per NIC
// Verdicts waiting for room on the link, queued per peer. A peer has at most
// kMaxPuts + kMaxViOps operations waiting for our verdicts (each operation
// holds its place until the verdict arrives); twice that leaves room for
// verdicts on operations the peer let go when their process died (it may
// reuse the places before those verdicts leave). So the queue does not
// fill for a peer that keeps the protocol, however many peers are busy and
// however long a link stays full. A verdict beyond it comes from a peer that
// does not (it sent more last packets than it can have operations): it is
// dropped and counted (verdicts_dropped), and only that peer is hurt.
constexpr uint32_t kMaxPendingPerPeer = 384;

// A verdict that never comes. An operation holds its entry (and its
// slot's CQ entry) until the receiving NIC's verdict arrives; one the
// receiver dropped (verdicts_dropped) or never sent would hold them
// forever, and the NIC would never sleep again. So once the link has
// acknowledged an operation's last packet, its verdict has
// kVerdictTimeoutUs to arrive; then the operation completes with
// kCqUnreachable and counts in verdict_timeouts.
// The bound is the link's own unreachable deadline: a verdict is a data
// packet of the peer's link to us, which resends one it lost for that long
// (backoff capped at link::kRtoMaxUs: some 25 tries, so at 30% loss a live
// peer's verdict misses it with p ~ 1e-13); a shorter bound would fail
// operations whose verdicts the link is still delivering. On the direct
// fabric a verdict takes microseconds (milliseconds while a busy host has
// descheduled a NIC), so the bound is far above any legitimate delay. The
// clock starts only once the last packet is acknowledged (until then the
// link retries it and its own deadline applies), and starts again whenever
// either direction of the link recovers from a loss (link::recoveries: a
// verdict lost on its way makes the peer's later packets arrive ahead of a
// gap, or twice) and, for an RDMA read, while its response arrives.
// The wait counts the NIC's own running time, as the link's deadline counts
// its retransmissions: between two looks at an operation at most
// kVerdictStepMaxUs count, so a NIC the host left unscheduled for seconds
// does not wake to fail operations whose verdicts the peer is still
// resending (or that wait, unread, in its receive ring: nothing is judged
// while the link is behind on it, link::rx_behind).
constexpr uint64_t kVerdictTimeoutUs = link::kUnreachableUs;
constexpr uint64_t kVerdictCheckUs = 10'000;  // operations are looked at this often (not every pass)
constexpr uint64_t kVerdictStepMaxUs = 500'000;
struct VerdictWait {
  uint32_t last_seq;  // the operation's last packet
  uint64_t since;     // mtime of the last look (0: the last packet is not acknowledged yet)
  uint64_t seen;      // link::recoveries plus the operation's progress, then
  uint64_t waited;    // ticks of running time since the wait (last) started
};
// The operation's last packet to `dst` has just been handed to the link.
void verdict_wait_start(uint32_t dst, VerdictWait& w);
// Is its verdict overdue at `now`? `progress`: a count that moves while the
// operation advances by itself (an RDMA read's response), else 0.
bool verdict_overdue(uint32_t dst, VerdictWait& w, uint64_t progress, uint64_t now);
// Fails the operations whose verdicts are overdue. True if it did work.
bool remote_timers(uint64_t now);

void remote_init(SlotTable& t);
// Whether `e` may start now: a put, send or AM message needs a free
// operation (kMaxPuts per NIC, shared by every slot). One that finds none
// waits at the head of its send queue -- it is never failed, so the slot's
// operations still leave in the order they were posted.
bool remote_can_start(const abi::SqEntry& e);
// Validates a put and starts it; kCqOk if the slot should now feed it.
abi::CqStatus put_start(SlotTable& t, Slot& s, const abi::SqEntry& e);
// Validates a VMMC send (kOpSend, or kOpSendInline with its payload: the
// ceil(length / 64) SQ entries that followed it) and starts it; kCqOk if the
// slot should now feed it.
abi::CqStatus send_start(SlotTable& t, Slot& s, const abi::SqEntry& e, const abi::SqEntry* inline_payload);
// Validates an AM message (kOpAmSend) and starts it; kCqOk if the slot
// should now feed it.
abi::CqStatus am_start(SlotTable& t, Slot& s, const abi::SqEntry& e);
// Validates a U-Net send (kOpUnetSend, or kOpUnetSendInline with its
// payload, as send_start's) and starts it; kCqOk if the slot should now feed it.
abi::CqStatus unet_start(SlotTable& t, Slot& s, const abi::SqEntry& e, const abi::SqEntry* inline_payload);
// Hands more of the slot's current put or send to the link; true once it is all sent.
bool put_feed(SlotTable& t, Slot& s);
// Room on the link to `dst` for an operation's next packets: how many it
// takes now; 0 (wait) while packets to `dst` are in flight (the link's own
// deadline judges the peer then) or the ring to the fabric has taken nothing
// for less than the unreachable deadline (`stalled_since` keeps the
// operation's first refusal), kLinkGone after.
constexpr uint32_t kLinkGone = ~0u;
uint32_t link_room(uint32_t dst, uint64_t& stalled_since);
// Sends a receiver's verdict on operation `op_id` back to `dst` (now, or in
// order once the link has room): a refusal, or kCqOk where the sender must
// hear of that one operation alone (none does today: see remote_verdict_ok).
void remote_send_result(uint32_t dst, uint64_t op_id, uint8_t status);
// The operation whose last packet from `src` had sequence number `seq`
// finished well: owed to `src` in the ACK that goes when this receive pass
// ends (remote_rx_done: abi::kWireAckOk, or a kWireOpOkThrough while
// refusals wait). `cost_op`: the receiving protocol's abi::CostOp, which the
// cost plugin charges for sending it.
void remote_verdict_ok(uint32_t src, uint32_t seq, uint8_t cost_op);
// A receive pass ended (link upcall rx_done): the OK verdicts owed go, one
// packet per peer.
void remote_rx_done();
// Verdicts for `peer` wait for room on its link (or for the receive pass to
// end): a message to it that must not overtake them (a VI disconnect after
// the verdict on its last send) waits too.
bool remote_results_pending_for(uint32_t peer);
// ... for any peer.
bool remote_results_pending();
// Verdicts waiting for room on the link to `peer` (tests, diagnostics).
uint32_t remote_results_waiting(uint32_t peer);
// Sends verdicts that waited for room on the link. True if it did work.
bool remote_poll(SlotTable& t);

// Slot k lost its process: its operations stop (no completions), and a
// receiver holding part of one is told to drop it.
void remote_slot_detached(uint32_t slot);

// Link upcalls (remote_upcalls: all of them, for link::init).
link::Upcalls remote_upcalls();
void remote_deliver(uint32_t src, const abi::WireHeader& h, const uint8_t* payload);
// `src` says our operations to it up to `seq` that it did not refuse finished
// well (a kWireOpOkThrough, or its ACK: abi::kWireAckOk).
void remote_ok_through(uint32_t src, uint32_t seq);
void remote_peer_lost(uint32_t peer);
bool remote_payload_valid(uint32_t slot, uint64_t generation);

}  // namespace lcp
