#include "lcp/remote.h"

#include <stddef.h>
#include <string.h>

#include "core/cost.h"
#include "core/status.h"
#include "hal/clint.h"
#include "lcp/am.h"
#include "lcp/mail.h"
#include "lcp/unet.h"
#include "lcp/vi.h"
#include "lcp/vmmc.h"
#include "link/link.h"

namespace lcp {
namespace {

static_assert(kMaxPendingPerPeer >= 2 * (kMaxPuts + kMaxViOps), "a peer's operations fit in its verdict queue");
static_assert(abi::kMaxNodes == 64, "a bit per peer in a uint64_t");
static_assert(kMaxPuts < 0xff, "operation indices fit a uint8_t beside kNoOp");
constexpr uint8_t kNoOp = 0xff;

struct PutOp {
  bool used;
  uint32_t slot;
  uint64_t generation;
  abi::SqEntry sqe;       // private copy: user_data, addresses, length
  uint64_t op_id;         // index | serial << 8: a late verdict cannot hit a reused entry
  uint64_t src;           // NIC address of the first byte
  uint32_t sent;          // bytes handed to the link
  uint64_t stalled_since; // mtime the link first refused more of it (0: not stalled)
  // Where it goes (a put names it; a VMMC send has it from its import).
  uint8_t wire_op;        // kWireOpPut, kWireOpSend, kWireOpAm or kWireOpUnet
  uint8_t wire_flags;     // kWireNotify on the last packet
  uint16_t dst_slot;
  uint32_t dst_node, dst_key;
  uint64_t dst_addr;
  uint64_t trace_seen;    // traced (kSqTrace): when the NIC took its descriptor (0: not)
  bool awaiting;          // every packet went: its verdict is due (wait), and it is
  uint8_t due_prev, due_next;  // in its peer's list of those, oldest first (DueList)
  VerdictWait wait;
  uint64_t am_ticket;     // an AM request that counts toward its reply (am_count_request), or 0
  bool local;             // a VMMC send into an export of this very NIC
  uint8_t local_verdict;  // its first refusal (kCqOk so far)
  // Filled by their users before anything reads them, so new_op leaves them
  // be (everything above them is zeroed).
  alignas(8) uint8_t inline_data[abi::kMaxInline];  // short sends: the payload, ours now (aligned: word copies)
  // Header precompute (VMMC's LCP): the header template of every packet of
  // the operation, filled once at its start; each chunk's header is a copy
  // with three fields of its own (link::segment_header).
  link::Segments segs;
  // A U-Net/MM send: its source pages (segs.pages points here).
  uint64_t pages[abi::kUnetMaxPages];
};

// A verdict owed to a peer: a refusal (kWireOpResult: op_id, status) or
// the operations that finished well (kWireOpOkThrough: op_id holds the seq).
struct Pending {
  uint64_t op_id;
  uint8_t status;
  uint8_t op;
};

// What a peer is owed for the operations that finished well since the last
// OK went: the seq of the newest one's last packet, and (for the cost
// plugin) which protocol's receiving side owes it.
struct OkOwed {
  uint32_t seq;
  uint8_t cost_op;
};

// One peer's verdicts, in the order they were decided.
struct Verdicts {
  Pending q[kMaxPendingPerPeer];
  uint32_t head, count;
};

// Receiver side: the first refusal seen for an operation not yet finished.
struct Refusal {
  bool used;
  uint32_t src;
  uint64_t op_id;
  uint8_t status;
};

// Sender: a peer's operations whose verdicts are due, in the order their
// last packets went (so by seq, and a slot's in posting order): an OK
// (remote_ok_through) completes a prefix of the list.
struct DueList {
  uint8_t head, tail;  // kNoOp: empty
};

struct State {
  SlotTable* t;
  PutOp ops[kMaxPuts];
  uint32_t ops_used;
  uint64_t serial;
  Verdicts verdicts[abi::kMaxNodes];  // by peer
  uint32_t verdicts_waiting;            // over every peer
  Refusal refusals[kMaxPuts];
  uint32_t refusals_used;             // entries in use: with none, a last packet does not look
  uint64_t next_verdict_check;        // mtime (remote_timers)
  OkOwed ok[abi::kMaxNodes];          // receiver: by peer ...
  uint64_t ok_owed;                   // ... a bit for each peer owed one
  DueList due[abi::kMaxNodes];        // sender: by peer
};
State g;

PutOp* find(uint64_t op_id) {
  uint64_t index = op_id & 0xff;
  if (index >= kMaxPuts) return nullptr;
  PutOp& op = g.ops[index];
  return op.used && op.op_id == op_id ? &op : nullptr;
}

// Every packet of `op` went: its verdict is due.
void await_verdict(PutOp& op) {
  const uint8_t i = uint8_t(&op - g.ops);
  DueList& l = g.due[op.dst_node];
  op.awaiting = true;
  op.due_prev = l.tail;
  op.due_next = kNoOp;
  if (l.tail != kNoOp) g.ops[l.tail].due_next = i;
  else l.head = i;
  l.tail = i;
}

void release(PutOp& op) {
  op.used = false;
  if (op.awaiting) {
    DueList& l = g.due[op.dst_node];
    if (op.due_prev != kNoOp) g.ops[op.due_prev].due_next = op.due_next;
    else l.head = op.due_next;
    if (op.due_next != kNoOp) g.ops[op.due_next].due_prev = op.due_prev;
    else l.tail = op.due_prev;
    op.awaiting = false;
  }
  op.segs.h.op_id = 0;  // the link sends what it may still hold of it as fillers
  --g.ops_used;
}

void finish(PutOp& op, abi::CqStatus status) {
  core::cost::Phase<abi::kPhaseCompletion> cost;
  if (op.am_ticket) am_send_done(op.slot, op.am_ticket, op.dst_node, op.dst_slot, status);
  slot_post_completion(*g.t, op.slot, op.generation, op.sqe, status, status == abi::kCqOk ? op.sqe.length : 0);
  if (op.wire_op == abi::kWireOpPut) core::status::count(ulnic::abi::kCtrPutsDone);
  if (op.wire_op == abi::kWireOpSend) core::status::count(ulnic::abi::kCtrVmmcSends);
  release(op);
}

bool send_result(uint32_t dst, const Pending& p) {
  core::cost::Phase<abi::kPhaseVerdict> cost;
  abi::WireHeader h{};
  h.op = p.op;
  if (p.op == abi::kWireOpOkThrough) {
    h.dst_addr = p.op_id;
  } else {
    h.op_id = p.op_id;
    h.status = p.status;
  }
  return link::send(dst, h, 0, 0, ~0u, 0, p.op == abi::kWireOpResult) != 0;
}

// A verdict for `dst`: now, or in order behind those that wait for room on
// the link. Operations that finished well, owed while the last verdict
// waiting is of that kind too, raise it: it is sent later and says more.
void send_or_queue(uint32_t dst, const Pending& p) {
  Verdicts& v = g.verdicts[dst];
  if (v.count == 0 && send_result(dst, p)) return;
  if (p.op == abi::kWireOpOkThrough && v.count) {
    Pending& tail = v.q[(v.head + v.count - 1) % kMaxPendingPerPeer];
    if (tail.op == abi::kWireOpOkThrough) {
      tail.op_id = p.op_id;
      return;
    }
  }
  if (v.count == kMaxPendingPerPeer) {  // the peer broke the protocol: see kMaxPendingPerPeer
    core::status::count(ulnic::abi::kCtrVerdictsDropped);
    return;
  }
  v.q[(v.head + v.count++) % kMaxPendingPerPeer] = p;
  ++g.verdicts_waiting;
  link::set_ok_held(dst, true);  // no ack of ours says OK past a refusal not yet sent
}

// The OK verdict owed to `peer` goes (the receiving protocol's cost): in the
// ACK the link owes it, at once (abi::kWireAckOk) -- or, while refusals to
// it wait for room, as a kWireOpOkThrough queued behind them.
void send_ok(uint32_t peer) {
  core::cost::Phase<abi::kPhaseVerdict> cost;
  const OkOwed& o = g.ok[peer];
  if (o.cost_op == abi::kCostOpVmmcRecv) core::cost::op<abi::kCostOpVmmcRecv>();
  else if (o.cost_op == abi::kCostOpAmRecv) core::cost::op<abi::kCostOpAmRecv>();
  else if (o.cost_op == abi::kCostOpViRecv) core::cost::op<abi::kCostOpViRecv>();
  if (g.verdicts[peer].count == 0) {
    (void)link::ack_now(peer);  // (a full ring: the link's ACK timer sends it)
    return;
  }
  send_or_queue(peer, Pending{o.seq, abi::kCqOk, abi::kWireOpOkThrough});
}

// Does an OK through `seq` from `src` cover the oldest operation due there?
bool head_ok(uint32_t src, uint32_t seq) {
  const DueList& l = g.due[src];
  return l.head != kNoOp && link::seq_at_or_before(g.ops[l.head].wait.last_seq, seq);
}

// Sender: `src` says every operation whose last packet had a seq <= `seq`
// and that it did not refuse finished well: a prefix of its due list.
void ok_through(uint32_t src, uint32_t seq) {
  while (head_ok(src, seq)) finish(g.ops[g.due[src].head], abi::kCqOk);
}

// (Every operation's last packet asks: a scan of the whole table was ~320
// instructions of each message's receive side, issue 22.)
uint8_t take_refusal(uint32_t src, uint64_t op_id) {
  if (!g.refusals_used) return abi::kCqOk;
  for (Refusal& r : g.refusals)
    if (r.used && r.src == src && r.op_id == op_id) {
      r.used = false;
      --g.refusals_used;
      return r.status;
    }
  return abi::kCqOk;
}

void note_refusal(uint32_t src, uint64_t op_id, uint8_t status) {
  for (Refusal& r : g.refusals)
    if (r.used && r.src == src && r.op_id == op_id) return;  // the first reason stands
  for (Refusal& r : g.refusals)
    if (!r.used) {
      r = Refusal{true, src, op_id, status};
      ++g.refusals_used;
      return;
    }
}

uint8_t place(const abi::WireHeader& h, const uint8_t* payload) {
  if (h.dst_slot >= abi::kMaxSlots) return abi::kCqRemoteBadSlot;
  Slot& s = g.t->slots[h.dst_slot];
  if (s.state != abi::SlotState::kActive) return abi::kCqRemoteBadSlot;
  uint64_t nic = 0;
  abi::CqStatus st = slot_translate(s, h.dst_key, h.dst_addr, h.payload_len, abi::kAccessRemoteWrite, nic);
  if (st == abi::kCqBadKey) return abi::kCqRemoteBadKey;
  if (st != abi::kCqOk) return abi::kCqRemoteProtection;
  memcpy(reinterpret_cast<void*>(nic), payload, h.payload_len);
  return abi::kCqOk;
}

// After a middle packet of a put, VMMC send, AM message (its Long payload),
// VI send or RDMA write was placed: the link may place the operation's next
// packets itself, as the protocol's own placement would -- through the
// translation just taken, while nothing in the tables changes
// (SlotTable::epoch) -- and without an upcall each.
void place_rest(uint32_t src, const abi::WireHeader& h) {
  if (h.op == abi::kWireOpPut) {
    // place() found this registration for the packet.
    const Slot& s = g.t->slots[h.dst_slot];
    const Registration& r = s.regs[h.dst_key & 0xff];
    link::place_next(src, h, 0, s.base + r.offset - r.va, r.va + r.length, &g.t->epoch);
    return;
  }
  // The protocols' own placements: offsets within the operation's bytes.
  uint64_t base = 0, hi = 0;
  const bool placed = h.op == abi::kWireOpSend ? vmmc_placement(src, h, base, hi)
                      : h.op == abi::kWireOpAm ? am_placement(src, h, base, hi)
                      : h.op == abi::kWireOpUnet ? unet_placement(src, h, base, hi)
                      : (h.op == abi::kWireOpViSend || h.op == abi::kWireOpViWrite) && vi_placement(src, h, base, hi);
  if (placed) link::place_next(src, h, abi::kWireFirst, base, hi, &g.t->epoch);
}

// The operation's header template, once its destination is known.
void precompute_header(PutOp& op) {
  link::Segments& sg = op.segs;
  sg.h = abi::WireHeader{};
  sg.h.op = op.wire_op;
  sg.h.flags = op.trace_seen ? abi::kWireTrace : 0;
  sg.h.dst_slot = op.dst_slot;
  sg.h.dst_key = op.dst_key;
  sg.h.dst_addr = op.dst_addr;
  sg.h.op_id = op.op_id;
  sg.h.op_length = op.sqe.length;
  sg.h.src_slot = uint16_t(op.slot);
  sg.src = op.src;
  sg.length = op.sqe.length;
  sg.first_flags = op.wire_op == abi::kWireOpPut ? 0 : abi::kWireFirst;
  sg.last_flags = uint8_t(abi::kWireLast | op.wire_flags);
  sg.owner = op.slot;
  sg.generation = op.generation;
  sg.pages = nullptr;  // contiguous (unet_start gathers a U-Net/MM send's pages)
  sg.page_off = 0;
}

PutOp* new_op(Slot& s, const abi::SqEntry& e, uint64_t src) {
  for (uint32_t i = 0; i < kMaxPuts; ++i) {
    PutOp& op = g.ops[i];
    if (op.used) continue;
    // The state anew, but not the short-send payload or the header template
    // after it, which new_message and precompute_header fill: clearing the
    // whole record (~400 bytes) was most of a message's header phase (issue 22).
    // (Inline stores: the call to memset and its loop were ~110 instructions.)
    __builtin_memset_inline(&op, 0, offsetof(PutOp, inline_data));
    op.used = true;
    ++g.ops_used;
    op.slot = s.index;
    op.generation = s.generation;
    op.sqe = e;
    op.op_id = i | (++g.serial << 8);
    op.src = src;
    op.trace_seen = s.trace_seen;
    s.put_op = i;
    return &op;
  }
  return nullptr;
}

// A message (VMMC send, AM or U-Net message) for `node`: over the link, or
// (`local`) to a slot of this NIC.
abi::CqStatus reachable(uint32_t node, bool& local) {
  local = node == core::status::block().node_id;
  return local || (link::enabled() && node < link::nodes()) ? abi::kCqOk : abi::kCqBadSlot;
}

// Its operation: bytes at NIC address `src`, or (short sends) a copy of the
// payload that came with the descriptor: whole SQ entries (kInlineEntries,
// as execute() passes it to send_start and unet_start),
// copied as words, one or two of them.
PutOp* new_message(Slot& s, const abi::SqEntry& e, uint64_t src, const abi::SqEntry* inline_payload, bool local) {
  PutOp* op = new_op(s, e, src);
  if (op && inline_payload) {
    static_assert(sizeof op->inline_data == kInlineEntries * sizeof(abi::SqEntry) && kInlineEntries == 2);
    auto* to = static_cast<abi::SqEntry*>(__builtin_assume_aligned(op->inline_data, 8));
    __builtin_memcpy_inline(&to[0], &inline_payload[0], sizeof to[0]);
    if (e.length > sizeof to[0]) __builtin_memcpy_inline(&to[1], &inline_payload[1], sizeof to[1]);
    op->src = reinterpret_cast<uint64_t>(op->inline_data);
  }
  if (op) op->local = local;
  return op;
}

}  // namespace

uint32_t link_room(uint32_t dst, uint64_t& stalled_since) {
  if (uint32_t n = link::room(dst)) {
    stalled_since = 0;
    return n;
  }
  // A full window: the link's own deadline judges the peer (by its
  // retransmissions, not the clock alone) and fails this operation with the
  // rest if it must. Else the ring to the fabric takes nothing: a link that
  // takes nothing for the unreachable deadline fails the operation even when
  // nothing was in flight to time out.
  uint64_t now = hal::clint::now();
  if (link::in_flight(dst) || !stalled_since) stalled_since = now;
  return now - stalled_since < hal::clint::us_to_ticks(link::kUnreachableUs) ? 0 : kLinkGone;
}

void remote_send_result(uint32_t dst, uint64_t op_id, uint8_t status) {
  core::cost::Phase<abi::kPhaseVerdict> cost;
  if (dst >= abi::kMaxNodes) return;
  send_or_queue(dst, Pending{op_id, status, abi::kWireOpResult});
}

void remote_verdict_ok(uint32_t src, uint32_t seq, uint8_t cost_op) {
  if (src >= abi::kMaxNodes) return;
  g.ok[src] = OkOwed{seq, cost_op};
  g.ok_owed |= 1ull << src;
}

void remote_rx_done() {
  for (uint64_t m = g.ok_owed; m; m &= m - 1) send_ok(uint32_t(__builtin_ctzll(m)));
  g.ok_owed = 0;
}

bool remote_can_start(const abi::SqEntry& e) {
  bool needs_op = e.opcode == abi::kOpPut || e.opcode == abi::kOpSend || e.opcode == abi::kOpSendInline ||
                  e.opcode == abi::kOpAmSend || e.opcode == abi::kOpUnetSend || e.opcode == abi::kOpUnetSendInline;
  if (!needs_op || g.ops_used < kMaxPuts) return true;
  core::status::count(ulnic::abi::kCtrOpWaits);
  return false;
}

bool remote_results_pending() { return g.verdicts_waiting != 0 || g.ok_owed != 0; }

bool remote_results_pending_for(uint32_t peer) {
  return peer < abi::kMaxNodes && (g.verdicts[peer].count != 0 || (g.ok_owed >> peer & 1) != 0);
}

uint32_t remote_results_waiting(uint32_t peer) { return peer < abi::kMaxNodes ? g.verdicts[peer].count : 0; }

void remote_init(SlotTable& t) {
  memset(&g, 0, sizeof g);
  g.t = &t;
  for (DueList& l : g.due) l = DueList{kNoOp, kNoOp};
}

abi::CqStatus put_start(SlotTable& t, Slot& s, const abi::SqEntry& e) {
  if (e.length == 0 || e.length > abi::kMaxCopyBytes) return abi::kCqBadLength;
  if (!link::enabled() || e.dst_node >= link::nodes() || e.dst_node == link::self()) return abi::kCqBadSlot;
  uint64_t src = 0;
  {
    core::cost::Phase<abi::kPhaseTranslate> cost;
    abi::CqStatus st = slot_translate(s, e.src_key, e.src_addr, e.length, abi::kAccessLocal, src);
    if (st != abi::kCqOk) return st;
  }
  (void)t;
  core::cost::Phase<abi::kPhaseHeader> cost;
  PutOp* op = new_op(s, e, src);
  if (!op) return abi::kCqNoResources;
  op->wire_op = abi::kWireOpPut;
  op->dst_node = e.dst_node;
  op->dst_slot = e.dst_slot;
  op->dst_key = e.dst_key;
  op->dst_addr = e.dst_addr;
  precompute_header(*op);
  return abi::kCqOk;
}

abi::CqStatus send_start(SlotTable& t, Slot& s, const abi::SqEntry& e, const abi::SqEntry* inline_payload) {
  (void)t;
  core::cost::op<abi::kCostOpVmmcSend>();
  if (e.length == 0 || e.length > abi::kMaxCopyBytes || (inline_payload && e.length > abi::kMaxInline))
    return abi::kCqBadLength;
  const Import* imp = nullptr;
  uint64_t offset = 0, src = 0;
  bool local = false;
  {
    core::cost::Phase<abi::kPhaseTranslate> cost;
    abi::CqStatus st = vmmc_translate_proxy(s, e.dst_addr, e.length, imp, offset);
    if (st != abi::kCqOk) return st;
    if ((st = reachable(imp->node, local)) != abi::kCqOk) return st;
    if (!inline_payload) {
      st = vmmc_translate_source(s, e.src_addr, e.length, src);
      if (st != abi::kCqOk) return st;
    }
  }
  core::cost::Phase<abi::kPhaseHeader> cost;
  PutOp* op = new_message(s, e, src, inline_payload, local);
  if (!op) return abi::kCqNoResources;
  op->wire_op = abi::kWireOpSend;
  op->wire_flags = (e.flags & abi::kSqNotify) ? abi::kWireNotify : 0;
  op->dst_node = imp->node;
  op->dst_slot = uint16_t(imp->slot);
  op->dst_key = imp->handle;
  op->dst_addr = offset;
  precompute_header(*op);
  return abi::kCqOk;
}

abi::CqStatus am_start(SlotTable& t, Slot& s, const abi::SqEntry& e) {
  (void)t;
  core::cost::op<abi::kCostOpAmSend>();
  uint64_t src = 0;
  abi::CqStatus st;
  bool local = false;
  {
    core::cost::Phase<abi::kPhaseTranslate> cost;
    if ((st = am_check_send(s, e, src)) != abi::kCqOk) return st;
    if ((st = reachable(e.dst_node, local)) != abi::kCqOk) return st;
  }
  core::cost::Phase<abi::kPhaseHeader> cost;
  PutOp* op = new_message(s, e, src, nullptr, local);
  if (!op) return abi::kCqNoResources;
  st = am_count_request(s, e, src, op->am_ticket);
  if (st != abi::kCqOk) {
    release(*op);
    return st;
  }
  op->wire_op = abi::kWireOpAm;
  op->dst_node = e.dst_node;
  op->dst_slot = e.dst_slot;
  precompute_header(*op);
  return abi::kCqOk;
}

abi::CqStatus unet_start(SlotTable& t, Slot& s, const abi::SqEntry& e, const abi::SqEntry* inline_payload) {
  (void)t;
  UnetRoute route{};
  abi::CqStatus st = unet_check_send(s, e, inline_payload != nullptr, route);
  if (st != abi::kCqOk) return st;
  bool local = false;
  if ((st = reachable(route.node, local)) != abi::kCqOk) return st;
  PutOp* op = new_message(s, e, route.src, inline_payload, local);
  if (!op) return abi::kCqNoResources;
  op->wire_op = abi::kWireOpUnet;
  op->dst_node = route.node;
  op->dst_slot = uint16_t(route.slot);
  op->dst_key = route.tag;
  precompute_header(*op);
  if (route.npages) {
    memcpy(op->pages, route.pages, route.npages * sizeof op->pages[0]);
    op->segs.pages = op->pages;
    op->segs.page_off = route.page_off;
  }
  return abi::kCqOk;
}

// What the receiving NIC does with one packet of a VMMC send, an AM message
// or a U-Net message (the same, whether it came over the wire or from a
// slot of this NIC).
uint8_t place_packet(uint32_t src, const abi::WireHeader& h, const uint8_t* payload) {
  if (h.op == abi::kWireOpUnet) return unet_place(src, h, payload);
  return h.op == abi::kWireOpAm ? am_place(src, h, payload) : vmmc_place(src, h, payload);
}

void last_packet(uint32_t src, const abi::WireHeader& h, bool ok) {
  if (h.op == abi::kWireOpAm) am_last(src, h, ok);
  else if (h.op == abi::kWireOpUnet) unet_last(src, h, ok);
  else vmmc_last(src, h, ok);
}

// A send between two slots of this NIC: the receiving checks run as if the
// chunks had come over the wire, a bounded amount per pass.
bool local_feed(PutOp& op) {
  uint64_t budget = kCopyChunk;
  abi::WireHeader h = op.segs.h;
  while (op.sent < op.sqe.length && budget) {
    uint32_t len = link::segment_length(op.segs, op.sent);
    link::segment_header(op.segs, op.sent, len, h);
    uint8_t st = place_packet(op.dst_node, h, reinterpret_cast<const uint8_t*>(link::segment_src(op.segs, op.sent)));
    if (st != abi::kCqOk && op.local_verdict == abi::kCqOk) op.local_verdict = st;
    op.sent += len;
    budget -= len < budget ? len : budget;
  }
  if (op.sent < op.sqe.length) return false;  // more next pass
  const uint64_t seen = op.trace_seen ? hal::clint::now() : 0;
  last_packet(op.dst_node, h, op.local_verdict == abi::kCqOk);
  if (seen) {
    const uint64_t done = hal::clint::now();
    slot_trace_rx(*g.t, op.dst_slot, seen, done);
    slot_trace_tx(g.t->slots[op.slot], op.trace_seen, done);
  }
  finish(op, abi::CqStatus(op.local_verdict));
  return true;
}

// Hands the link as many chunks as it takes now (one burst: one clock read,
// one publish), each a copy of the precomputed header with its own offset.
bool put_feed(SlotTable& t, Slot& s) {
  (void)t;
  core::cost::Phase<abi::kPhaseTransmit> cost;
  PutOp& op = g.ops[s.put_op];
  if (!op.used || op.slot != s.index || op.generation != s.generation) return true;  // lost meanwhile
  if (op.wire_op == abi::kWireOpSend) core::cost::op<abi::kCostOpVmmcSend>();
  else if (op.wire_op == abi::kWireOpAm) core::cost::op<abi::kCostOpAmSend>();
  if (op.local) return local_feed(op);
  const uint32_t dst = op.dst_node;
  uint32_t room = link_room(dst, op.stalled_since);
  if (room == kLinkGone) {
    finish(op, abi::kCqUnreachable);
    return true;
  }
  if (room == 0) return false;
  const uint64_t now = hal::clint::now();
  op.sent = link::send_segments(dst, op.segs, op.sent, room, now);
  if (op.sent < op.sqe.length) return false;
  await_verdict(op);
  verdict_wait_start(dst, op.wait);
  // Stamped with the time the last packets went into the ring (a later
  // clock read would count whatever delays this vCPU after publishing).
  if (op.trace_seen) slot_trace_tx(s, op.trace_seen, now);
  return true;
}

void verdict_wait_start(uint32_t dst, VerdictWait& w) { w = VerdictWait{link::last_sent(dst), 0, 0, 0}; }

bool verdict_overdue(uint32_t dst, VerdictWait& w, uint64_t progress, uint64_t now) {
  if (!link::acked(dst, w.last_seq)) {
    w.since = 0;
    return false;
  }
  const uint64_t seen = link::recoveries(dst) + progress;
  if (!w.since || seen != w.seen) {
    w.since = now;
    w.seen = seen;
    w.waited = 0;
    return false;
  }
  // Acknowledged, and no OK since the last look: the ACK that said it may
  // have been lost, and what acknowledged the operation since could not say
  // it (a refusal). Ask again (issue 20: no operation lost to one lost ACK).
  link::ask_ok(dst, now);
  const uint64_t step = now - w.since, step_max = hal::clint::us_to_ticks(kVerdictStepMaxUs);
  w.waited += step < step_max ? step : step_max;
  w.since = now;
  return w.waited >= hal::clint::us_to_ticks(kVerdictTimeoutUs) && !link::rx_behind();
}

namespace {
// The verdict check, due (remote_timers looked). Out of line, as
// control.cpp's take_commands.
[[gnu::noinline]] bool check_verdicts(uint64_t now) {
  g.next_verdict_check = now + hal::clint::us_to_ticks(kVerdictCheckUs);
  bool worked = false;
  for (PutOp& op : g.ops)
    if (op.used && op.awaiting && verdict_overdue(op.dst_node, op.wait, 0, now)) {
      core::status::count(ulnic::abi::kCtrVerdictTimeouts);
      finish(op, abi::kCqUnreachable);
      worked = true;
    }
  return worked;
}
}  // namespace

bool remote_timers(uint64_t now) {
  return g.ops_used && now >= g.next_verdict_check && check_verdicts(now);
}

namespace {
// Verdicts owed or waiting for link room (remote_poll looked). Out of line,
// as control.cpp's take_commands.
[[gnu::noinline]] bool send_owed() {
  bool worked = false;
  // OK verdicts owed by deliveries outside a receive pass (none in the
  // firmware's own loop, where the pass's end sends them: remote_rx_done).
  if (g.ok_owed) remote_rx_done(), worked = true;
  // A full link to one peer holds only that peer's verdicts.
  for (uint32_t peer = 0; g.verdicts_waiting && peer < abi::kMaxNodes; ++peer) {
    Verdicts& v = g.verdicts[peer];
    while (v.count) {
      if (!send_result(peer, v.q[v.head])) break;
      v.head = (v.head + 1) % kMaxPendingPerPeer;
      --v.count;
      --g.verdicts_waiting;
      worked = true;
    }
    if (!v.count) link::set_ok_held(peer, false);
  }
  return worked;
}
}  // namespace

bool remote_poll(SlotTable& t) {
  (void)t;
  return (g.ok_owed || g.verdicts_waiting) && send_owed();
}

namespace {
void deliver(uint32_t src, const abi::WireHeader& h, const uint8_t* payload) {
  if (h.op == abi::kWireOpPut || h.op == abi::kWireOpSend || h.op == abi::kWireOpAm || h.op == abi::kWireOpUnet) {
    if (h.flags & abi::kWireAbort) note_refusal(src, h.op_id, abi::kCqUnreachable);
    {
      core::cost::Phase<abi::kPhasePlacement> cost;
      uint8_t st = h.op == abi::kWireOpPut ? place(h, payload) : place_packet(src, h, payload);
      if (st != abi::kCqOk) {
        if (h.op == abi::kWireOpPut) core::status::count(ulnic::abi::kCtrPutsRefused);
        note_refusal(src, h.op_id, st);
      } else if (!(h.flags & abi::kWireLast)) {
        place_rest(src, h);
      }
    }
    if (h.flags & abi::kWireLast) {
      uint8_t verdict = take_refusal(src, h.op_id);
      // The data is in place (in-order link): now the receiver may look.
      if (h.op != abi::kWireOpPut) {
        core::cost::Phase<abi::kPhaseCompletion> cost;
        last_packet(src, h, verdict == abi::kCqOk);
      }
      // An abort's sender let go of the operation already: no verdict.
      if (h.flags & abi::kWireAbort) return;
      if (verdict != abi::kCqOk) return remote_send_result(src, h.op_id, verdict);
      remote_verdict_ok(src, h.seq,
                        h.op == abi::kWireOpSend ? abi::kCostOpVmmcRecv
                        : h.op == abi::kWireOpAm ? abi::kCostOpAmRecv
                                                 : abi::kCostOpOther);
    }
  } else if (h.op == abi::kWireOpResult && (h.op_id & kViOpFlag)) {
    core::cost::op<abi::kCostOpVerdict>();
    vi_result(src, h);
  } else if (h.op == abi::kWireOpResult) {
    core::cost::op<abi::kCostOpVerdict>();
    PutOp* op = find(h.op_id);
    if (op && op->dst_node == src) finish(*op, abi::CqStatus(h.status));
  } else if (h.op == abi::kWireOpOkThrough) {
    remote_ok_through(src, uint32_t(h.dst_addr));
  } else if (h.op == abi::kWireOpMail) {
    mail_deliver(src, h, payload);
  } else if (h.op >= abi::kWireOpViSend && h.op <= abi::kWireOpViConn) {
    core::cost::Phase<abi::kPhasePlacement> cost;
    vi_deliver(src, h, payload);
    if (!(h.flags & abi::kWireLast)) place_rest(src, h);  // VI sends and RDMA writes only
  }
}
}  // namespace

void remote_deliver(uint32_t src, const abi::WireHeader& h, const uint8_t* payload) {
  constexpr uint8_t kTracedLast = abi::kWireTrace | abi::kWireLast;
  if ((h.flags & kTracedLast) != kTracedLast) return deliver(src, h, payload);
  const uint64_t seen = hal::clint::now();
  deliver(src, h, payload);
  slot_trace_rx(*g.t, h.dst_slot, seen, hal::clint::now());
}

void remote_peer_lost(uint32_t peer) {
  for (PutOp& op : g.ops)
    if (op.used && op.dst_node == peer) {
      // Stop feeding it; the slot moves on to its next descriptor.
      op.sent = op.sqe.length;
      finish(op, abi::kCqUnreachable);
    }
  for (Refusal& r : g.refusals)
    if (r.used && r.src == peer) r.used = false, --g.refusals_used;
  // Verdicts still owed to it are moot (its operations are gone with it).
  if (peer < abi::kMaxNodes) {
    g.verdicts_waiting -= g.verdicts[peer].count;
    g.verdicts[peer].count = 0;
    link::set_ok_held(peer, false);
    g.ok_owed &= ~(1ull << peer);
  }
  vmmc_peer_lost(peer);
  vi_peer_lost(peer);
  am_peer_lost(peer);
  unet_peer_lost(peer);
}

void remote_slot_detached(uint32_t slot) {
  for (PutOp& op : g.ops) {
    if (!op.used || op.slot != slot) continue;
    // A VMMC send or AM message cut off after its first packet: the
    // receiver is told, so it lets go of what it holds for it (an AM ring
    // entry). Over the link this is best effort (a full link: the receiver
    // lets go when it loses us).
    if (op.wire_op != abi::kWireOpPut && op.sent > 0 && op.sent < op.sqe.length) {
      abi::WireHeader h = op.segs.h;
      h.flags = abi::kWireLast | abi::kWireAbort;
      h.dst_addr = op.dst_addr + op.sent;
      if (op.local) last_packet(op.dst_node, h, false);
      else (void)link::send(op.dst_node, h, 0, 0, ~0u, 0);
    }
    release(op);  // its process is gone: no completion
  }
}

void remote_ok_through(uint32_t src, uint32_t seq) {
  if (src >= abi::kMaxNodes) return;
  // (Most packets that say OK complete nothing: the work item is the
  // verdict's only where one does.)
  if (head_ok(src, seq)) {
    core::cost::op<abi::kCostOpVerdict>();
    ok_through(src, seq);
  }
  vi_ok_through(src, seq);
}

link::Upcalls remote_upcalls() {
  return link::Upcalls{remote_deliver, remote_peer_lost, remote_payload_valid, remote_rx_done, remote_ok_through};
}

bool remote_payload_valid(uint32_t slot, uint64_t generation) {
  if (slot == kMailOwner) return mail_payload_valid(generation);
  if (slot == kViOwner) return vi_payload_valid(generation);
  return slot_live(*g.t, slot, generation);
}

}  // namespace lcp
