#include "lcp/remote.h"

#include <string.h>

#include "core/status.h"
#include "hal/clint.h"
#include "link/link.h"

namespace lcp {
namespace {

struct PutOp {
  bool used;
  uint32_t slot;
  uint64_t generation;
  abi::SqEntry sqe;       // private copy: user_data, addresses, length
  uint64_t op_id;         // index | serial << 8: a late verdict cannot hit a reused entry
  uint64_t src;           // NIC address of the first byte
  uint32_t sent;          // bytes handed to the link
  uint64_t stalled_since; // mtime the link first refused more of it (0: not stalled)
};

struct Pending {
  uint32_t dst;
  uint64_t op_id;
  uint8_t status;
};

// Receiver side: the first refusal seen for an operation not yet finished.
struct Refusal {
  bool used;
  uint32_t src;
  uint64_t op_id;
  uint8_t status;
};

struct State {
  SlotTable* t;
  PutOp ops[kMaxPuts];
  uint64_t serial;
  Pending pending[kMaxPendingResults];
  uint32_t pending_head, pending_count;
  Refusal refusals[kMaxPuts];
};
State g;

PutOp* find(uint64_t op_id) {
  uint64_t index = op_id & 0xff;
  if (index >= kMaxPuts) return nullptr;
  PutOp& op = g.ops[index];
  return op.used && op.op_id == op_id ? &op : nullptr;
}

void finish(PutOp& op, abi::CqStatus status) {
  slot_post_completion(*g.t, op.slot, op.generation, op.sqe, status, status == abi::kCqOk ? op.sqe.length : 0);
  core::status::count(ulnic::abi::kCtrPutsDone);
  op.used = false;
}

bool send_result(uint32_t dst, uint64_t op_id, uint8_t status) {
  abi::WireHeader h{};
  h.op = abi::kWireOpResult;
  h.op_id = op_id;
  h.status = status;
  return link::send(dst, h, 0, 0, ~0u, 0) != 0;
}

void queue_result(uint32_t dst, uint64_t op_id, uint8_t status) {
  if (send_result(dst, op_id, status)) return;
  if (g.pending_count == kMaxPendingResults) return;  // the sender will time out: unreachable
  g.pending[(g.pending_head + g.pending_count++) % kMaxPendingResults] = Pending{dst, op_id, status};
}

uint8_t take_refusal(uint32_t src, uint64_t op_id) {
  for (Refusal& r : g.refusals)
    if (r.used && r.src == src && r.op_id == op_id) {
      r.used = false;
      return r.status;
    }
  return abi::kCqOk;
}

void note_refusal(uint32_t src, uint64_t op_id, uint8_t status) {
  core::status::count(ulnic::abi::kCtrPutsRefused);
  for (Refusal& r : g.refusals)
    if (r.used && r.src == src && r.op_id == op_id) return;  // the first reason stands
  for (Refusal& r : g.refusals)
    if (!r.used) {
      r = Refusal{true, src, op_id, status};
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

}  // namespace

void remote_init(SlotTable& t) {
  memset(&g, 0, sizeof g);
  g.t = &t;
}

abi::CqStatus put_start(SlotTable& t, Slot& s, const abi::SqEntry& e) {
  if (e.length == 0 || e.length > abi::kMaxCopyBytes) return abi::kCqBadLength;
  if (!link::enabled() || e.dst_node >= link::nodes() || e.dst_node == link::self()) return abi::kCqBadSlot;
  uint64_t src = 0;
  abi::CqStatus st = slot_translate(s, e.src_key, e.src_addr, e.length, abi::kAccessLocal, src);
  if (st != abi::kCqOk) return st;
  for (uint32_t i = 0; i < kMaxPuts; ++i) {
    PutOp& op = g.ops[i];
    if (op.used) continue;
    op = PutOp{true, s.index, s.generation, e, i | (++g.serial << 8), src, 0, 0};
    s.put_op = i;
    (void)t;
    return abi::kCqOk;
  }
  return abi::kCqNoResources;
}

bool put_feed(SlotTable& t, Slot& s) {
  (void)t;
  PutOp& op = g.ops[s.put_op];
  if (!op.used || op.slot != s.index || op.generation != s.generation) return true;  // lost meanwhile
  while (op.sent < op.sqe.length) {
    uint32_t dst = op.sqe.dst_node;
    if (!link::can_send(dst)) {
      // A link that takes nothing for the unreachable deadline fails the
      // operation even when nothing of it was in flight to time out.
      uint64_t now = hal::clint::now();
      if (!op.stalled_since) op.stalled_since = now;
      if (now - op.stalled_since < hal::clint::us_to_ticks(link::kUnreachableUs)) return false;
      finish(op, abi::kCqUnreachable);
      return true;
    }
    op.stalled_since = 0;
    uint32_t len = op.sqe.length - op.sent < abi::kMtu ? op.sqe.length - op.sent : abi::kMtu;
    abi::WireHeader h{};
    h.op = abi::kWireOpPut;
    h.flags = op.sent + len == op.sqe.length ? abi::kWireLast : 0;
    h.dst_slot = op.sqe.dst_slot;
    h.dst_key = op.sqe.dst_key;
    h.dst_addr = op.sqe.dst_addr + op.sent;
    h.op_id = op.op_id;
    h.op_length = op.sqe.length;
    if (!link::send(dst, h, op.src + op.sent, uint16_t(len), s.index, s.generation)) return false;
    op.sent += len;
  }
  return true;
}

bool remote_poll(SlotTable& t) {
  (void)t;
  bool worked = false;
  while (g.pending_count) {
    Pending& p = g.pending[g.pending_head];
    if (!send_result(p.dst, p.op_id, p.status)) break;
    g.pending_head = (g.pending_head + 1) % kMaxPendingResults;
    --g.pending_count;
    worked = true;
  }
  return worked;
}

void remote_deliver(uint32_t src, const abi::WireHeader& h, const uint8_t* payload) {
  if (h.op == abi::kWireOpPut) {
    uint8_t st = place(h, payload);
    if (st != abi::kCqOk) note_refusal(src, h.op_id, st);
    if (h.flags & abi::kWireLast) queue_result(src, h.op_id, take_refusal(src, h.op_id));
  } else if (h.op == abi::kWireOpResult) {
    PutOp* op = find(h.op_id);
    if (op && op->sqe.dst_node == src) finish(*op, abi::CqStatus(h.status));
  }
}

void remote_peer_lost(uint32_t peer) {
  for (PutOp& op : g.ops)
    if (op.used && op.sqe.dst_node == peer) {
      // Stop feeding it; the slot moves on to its next descriptor.
      op.sent = op.sqe.length;
      finish(op, abi::kCqUnreachable);
    }
  for (Refusal& r : g.refusals)
    if (r.used && r.src == peer) r.used = false;
}

bool remote_payload_valid(uint32_t slot, uint64_t generation) {
  return slot < abi::kMaxSlots && g.t->slots[slot].state == abi::SlotState::kActive &&
         g.t->slots[slot].generation == generation;
}

}  // namespace lcp
