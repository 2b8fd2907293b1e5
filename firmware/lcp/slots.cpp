#include "lcp/slots.h"

#include <string.h>

#include "core/cost.h"
#include "core/status.h"
#include "hal/clint.h"
#include "hal/cpu.h"
#include "hal/mmio.h"
#include "lcp/am.h"
#include "lcp/remote.h"
#include "lcp/unet.h"
#include "lcp/vi.h"
#include "lcp/vmmc.h"

namespace lcp {
namespace {

using core::status::count;

using hal::full_barrier;

template <class T>
void put(T& field, T v) {
  __atomic_store_n(&field, v, __ATOMIC_RELAXED);
}

bool in_range(uint64_t off, uint64_t len, uint64_t lo, uint64_t size) {
  return off >= lo && len <= size && off - lo <= size - len;
}

void complete(Slot& s, const abi::SqEntry& e, abi::CqStatus status, uint32_t result) {
  core::cost::Phase<abi::kPhaseCompletion> cost;
  abi::CqEntry* c = s.cq.reserve();  // callers checked for room
  if (!c) return;
  c->user_data = e.user_data;
  c->result = result;
  c->status = status;
  c->opcode = e.opcode;
  c->pad = 0;
  s.cq.push();
  ++s.cq_pending;
  count(ulnic::abi::kCtrCqEntries);
  if (status != abi::kCqOk) {
    count(ulnic::abi::kCtrBadDescriptors);
    s.cq_failed = true;
  }
}

// `due`: what was published (abi::WaitFor bits, kDueFailure); `force` rings
// whatever the process waits for. `may_wait`: a ring for events alone may
// wait for the sleeper's wait_events_until (slots_ring_hosts, at `now`).
bool ring_host(Slot& s, const SlotTable& t, bool force, uint32_t due, bool may_wait = false, uint64_t now = 0) {
  // Pairs with the host's "set wait_for; bump wait_seq; full fence; check
  // CQ and EQ; block".
  full_barrier();
  uint64_t seq = __atomic_load_n(&header(s).host.wait_seq, __ATOMIC_RELAXED);
  uint32_t wants = __atomic_load_n(&header(s).host.wait_for, __ATOMIC_RELAXED);
  if (wants == 0) wants = abi::kWaitAll;
  const bool waited = s.ring_waits;
  s.ring_waits = false;
  // What nobody waits for is dropped, not kept: a process that comes to wait
  // for it announces anew and checks the rings before it sleeps.
  if (!force && !(due & (wants | kDueFailure))) return false;
  if ((seq == s.rung_seq && !force) || !t.board->fabric.regs) return false;
  if (may_wait && !(due & ((wants & abi::kWaitCompletions) | kDueFailure))) {
    const uint32_t until = __atomic_load_n(&header(s).host.wait_events_until, __ATOMIC_RELAXED);
    const uint64_t since = waited ? s.ring_waits_since : now;
    if (until && int32_t(s.eq.tail() - until) < 0 && now - since < hal::clint::us_to_ticks(kRingDeferUs)) {
      s.ring_waits = true;
      s.ring_waits_since = since;
      s.ring_due |= due;
      return false;
    }
  }
  s.rung_seq = seq;
  hal::mmio_write32(t.board->fabric.regs + core::board::kDoorbell, s.host_peer << 16 | (s.host_vector & 0xffff));
  count(ulnic::abi::kCtrHostRings);
  return true;
}

void publish(Slot& s) {
  if (!s.cq_pending) return;
  s.cq.publish();
  put(header(s).nic.completions, header(s).nic.completions + s.cq_pending);
  s.cq_pending = 0;
  s.ring_due |= abi::kWaitCompletions | (s.cq_failed ? kDueFailure : 0);
  s.cq_failed = false;
}

void cut_off(Slot& s, SlotTable& t, abi::SlotFault why) {
  ++t.epoch;
  s.state = abi::SlotState::kCutOff;
  t.active &= ~(1u << s.index);
  put(header(s).nic.fault_code, uint32_t(why));
  put(header(s).nic.state, uint32_t(abi::SlotState::kCutOff));
  count(ulnic::abi::kCtrSlotCutOffs);
  ring_host(s, t, true, abi::kWaitAll);  // a blocked waiter must wake up and see it
}


abi::CqStatus do_register(SlotTable& t, Slot& s, const abi::SqEntry& e, uint32_t& key) {
  ++t.epoch;
  const uint32_t valid = abi::kAccessLocal | abi::kAccessRemoteWrite | abi::kAccessRemoteRead;
  if (e.access & ~valid || e.access == 0) return abi::kCqBadOpcode;
  if (e.src_key) {
    // Change an existing registration's rights and ptag; its key stays.
    Registration& r = s.regs[e.src_key & 0xff];
    if (r.key != e.src_key) return abi::kCqBadKey;
    r.access = e.access;
    r.ptag = e.dst_node;
    key = r.key;
    return abi::kCqOk;
  }
  if (e.length == 0) return abi::kCqBadLength;
  if (!in_range(e.reg_offset, e.length, s.layout.heap_offset, s.layout.heap_size)) return abi::kCqBadAddress;
  if (e.src_addr + e.length < e.src_addr) return abi::kCqBadAddress;
  for (uint32_t i = 0; i < abi::kMaxRegistrations; ++i) {
    Registration& r = s.regs[i];
    if (r.key) continue;
    r = Registration{e.src_addr, e.reg_offset, e.length, e.access, tagged_index(t.rng, i), e.dst_node};
    key = r.key;
    return abi::kCqOk;
  }
  return abi::kCqNoResources;
}

// kOpMoveRegion: libulnic grows the pages a registration moved into the
// slot into a larger range when a new registration overlaps them and
// reaches past them (VIA allows overlapping registrations; a registration
// names one contiguous range of the heap). The bytes move and the
// registrations in the source range move with them in one step of this
// loop, so no placement in between is lost. Operations that keep a
// translated address do not see the move: while any of this slot's sends,
// puts or VI operations is owed its completion, or a copy of any slot reads
// or writes this one, it is refused (kCqBusy) and the library asks again.
// What keeps an address past that checks the tables' epoch (a VI receive
// under way, a placed stream, an AM ring). The step is as long as the copy:
// 32 MiB took 7 ms with the copy engine and 30 ms with the word loop (so a
// whole 1 GiB heap ~0.25 / ~1 s), well inside the link's unreachable deadline.
abi::CqStatus move_region(SlotTable& t, Slot& s, const abi::SqEntry& e) {
  if (e.dst_slot || e.access || e.src_slot || e.src_key || e.dst_key || e.dst_node || e.src_addr)
    return abi::kCqBadOpcode;
  if (e.length == 0 || e.length % abi::kMovePage) return abi::kCqBadLength;
  const uint64_t from = e.reg_offset, to = e.dst_addr, len = e.length;
  // Whole pages, as libulnic moves them: the move then goes by words (or the
  // board's engine) both ways. A move whose ends differed by an odd amount
  // went byte by byte: a slot of 1 GiB could stop its NIC for seconds, long
  // enough for every peer to give it up (issue 20: a hostile slot).
  if ((from | to) % abi::kMovePage) return abi::kCqBadAddress;
  if (!in_range(from, len, s.layout.heap_offset, s.layout.heap_size) ||
      !in_range(to, len, s.layout.heap_offset, s.layout.heap_size))
    return abi::kCqBadAddress;
  if (s.cq_reserved != s.cq_waiting) return abi::kCqBusy;
  for (const Slot& other : t.slots)
    if (other.copy.active && (other.copy.src_slot == s.index || other.copy.dst_slot == s.index)) return abi::kCqBusy;
  ++t.epoch;
  memmove(reinterpret_cast<void*>(s.base + to), reinterpret_cast<const void*>(s.base + from), len);
  count(ulnic::abi::kCtrCopyBytes, len);
  for (Registration& r : s.regs)
    if (r.key && r.offset >= from && r.length <= len && r.offset - from <= len - r.length) r.offset = r.offset - from + to;
  return abi::kCqOk;
}

// Validates a copy and starts it; returns kCqOk if s.copy is now active.
abi::CqStatus start_copy(SlotTable& t, Slot& s, const abi::SqEntry& e) {
  if (e.length == 0 || e.length > abi::kMaxCopyBytes) return abi::kCqBadLength;
  uint32_t src_slot = e.src_slot, dst_slot = e.dst_slot;
  if (src_slot >= abi::kMaxSlots || dst_slot >= abi::kMaxSlots) return abi::kCqBadSlot;
  Slot& from = t.slots[src_slot];
  Slot& to = t.slots[dst_slot];
  if (from.state != abi::SlotState::kActive || to.state != abi::SlotState::kActive) return abi::kCqBadSlot;
  uint32_t src_need = src_slot == s.index ? abi::kAccessLocal : abi::kAccessRemoteRead;
  uint32_t dst_need = dst_slot == s.index ? abi::kAccessLocal : abi::kAccessRemoteWrite;
  CopyState& c = s.copy;
  abi::CqStatus st = slot_translate(from, e.src_key, e.src_addr, e.length, src_need, c.src);
  if (st == abi::kCqOk) st = slot_translate(to, e.dst_key, e.dst_addr, e.length, dst_need, c.dst);
  if (st != abi::kCqOk) return st;
  c.active = true;
  c.sqe = e;
  c.left = e.length;
  c.src_slot = src_slot;
  c.dst_slot = dst_slot;
  c.src_generation = from.generation;
  c.dst_generation = to.generation;
  return abi::kCqOk;
}

// Moves up to `budget` bytes of the current copy; completes it when done.
uint64_t step_copy(SlotTable& t, Slot& s, uint64_t budget) {
  CopyState& c = s.copy;
  // The other slot may have been detached (its process died) meanwhile.
  if (!slot_live(t, c.src_slot, c.src_generation) || !slot_live(t, c.dst_slot, c.dst_generation)) {
    c.active = false;
    complete(s, c.sqe, abi::kCqBadSlot, uint32_t(c.sqe.length - c.left));
    return 0;
  }
  uint64_t n = c.left < budget ? c.left : budget;
  memmove(reinterpret_cast<void*>(c.dst), reinterpret_cast<const void*>(c.src), n);
  c.src += n, c.dst += n, c.left -= n;
  count(ulnic::abi::kCtrCopyBytes, n);
  if (c.left == 0) {
    c.active = false;
    complete(s, c.sqe, abi::kCqOk, c.sqe.length);
  }
  return n;
}

bool is_send(const abi::SqEntry& e) { return e.opcode == abi::kOpSend || e.opcode == abi::kOpSendInline; }

// The copy/put/register fields, which VMMC descriptors leave zero.
bool vmmc_fields_ok(const abi::SqEntry& e) {
  return e.dst_slot == 0 && e.access == 0 && e.src_slot == 0 && e.reg_offset == 0 && e.dst_node == 0;
}

// VMMC sends name only a source and a proxy address: every other field is zero.
bool send_fields_ok(const abi::SqEntry& e) {
  return vmmc_fields_ok(e) && e.src_key == 0 && e.dst_key == 0 && (e.opcode == abi::kOpSend || e.src_addr == 0);
}

// A short send's payload follows it in the SQ, as whole entries the host
// published with the descriptor; each is copied as eight words (an exact-
// length copy was a call and a byte tail per entry): `out` has room for
// ceil(len / 64) of them; the bytes past `len` are the entry's. A payload
// the host did not publish fails the send (and whatever it publishes later
// is read as descriptors).
abi::CqStatus take_inline_entries(Slot& s, uint32_t len, abi::SqEntry* out) {
  for (uint32_t off = 0; off < len; off += sizeof(abi::SqEntry), ++out) {
    const abi::SqEntry* c = s.sq.peek();
    if (!c) return abi::kCqBadLength;
    __builtin_memcpy_inline(out, c, sizeof *out);
    s.sq.pop();
  }
  return abi::kCqOk;
}

void start_remote(Slot& s, const abi::SqEntry& e, abi::CqStatus st) {
  if (st != abi::kCqOk) return complete(s, e, st, 0);
  s.put_active = true;
  ++s.cq_reserved;  // its completion comes later: keep a CQ entry for it
}

void execute(SlotTable& t, Slot& s, const abi::SqEntry& e) {
  core::cost::Phase<abi::kPhaseDecode> cost;
  if (e.opcode >= abi::kOpViCreate && e.opcode <= abi::kOpViDisconnect) {
    uint8_t vi_flags = e.opcode == abi::kOpViConnect ? abi::kSqViPeer : e.opcode == abi::kOpViCancel ? abi::kSqViListen : 0;
    if ((e.flags & ~vi_flags) != 0 || e.reserved != 0) {
      // A refused connect or listen still owns the entries of its discriminator.
      uint8_t disc[abi::kViMaxDiscriminator];
      if ((e.opcode == abi::kOpViConnect || e.opcode == abi::kOpViListen) && e.access <= abi::kViMaxDiscriminator)
        (void)slot_take_inline(s, e.access, disc);
      return complete(s, e, abi::kCqBadOpcode, 0);
    }
    return vi_execute(t, s, e);
  }
  uint8_t flags_ok = is_send(e)                           ? abi::kSqNotify
                     : e.opcode == abi::kOpAmEndpoint     ? abi::kSqAmClose
                     : e.opcode == abi::kOpUnetEndpoint   ? uint8_t(abi::kSqUnetClose | abi::kSqUnetMm)
                                                          : 0;
  if ((e.flags & ~flags_ok) != 0 || e.reserved != 0 || e.opcode >= abi::kOpcodeCount)
    return complete(s, e, abi::kCqBadOpcode, 0);
  switch (e.opcode) {
    case abi::kOpNop:
      return complete(s, e, abi::kCqOk, 0);
    case abi::kOpRegister: {
      uint32_t key = 0;
      abi::CqStatus st = do_register(t, s, e, key);
      return complete(s, e, st, key);
    }
    case abi::kOpDeregister: {
      Registration& r = s.regs[e.src_key & 0xff];
      if (e.src_key == 0 || r.key != e.src_key) return complete(s, e, abi::kCqBadKey, 0);
      r = Registration{};
      ++t.epoch;
      // A copy under way through this registration stops here: once the
      // owner has it back, no other slot may write or read it any more.
      for (Slot& other : t.slots) {
        CopyState& c = other.copy;
        bool uses = c.active && ((c.dst_slot == s.index && c.sqe.dst_key == e.src_key) ||
                                 (c.src_slot == s.index && c.sqe.src_key == e.src_key));
        if (!uses) continue;
        c.active = false;
        complete(other, c.sqe, abi::kCqBadKey, uint32_t(c.sqe.length - c.left));
        if (&other != &s) publish(other);
      }
      return complete(s, e, abi::kCqOk, 0);
    }
    case abi::kOpMoveRegion:
      return complete(s, e, move_region(t, s, e), 0);
    case abi::kOpCopy: {
      abi::CqStatus st = start_copy(t, s, e);
      if (st != abi::kCqOk) complete(s, e, st, 0);
      return;
    }
    case abi::kOpPut:
      return start_remote(s, e, put_start(t, s, e));
    case abi::kOpSend:
      if (!send_fields_ok(e)) return complete(s, e, abi::kCqBadOpcode, 0);
      return start_remote(s, e, send_start(t, s, e, nullptr));
    case abi::kOpRedirect: {
      uint32_t result = 0;
      abi::CqStatus st = vmmc_fields_ok(e) ? vmmc_redirect(s, e, result) : abi::kCqBadOpcode;
      return complete(s, e, st, result);
    }
    case abi::kOpAmEndpoint:
      return complete(s, e, am_configure(s, e), 0);
    case abi::kOpAmSend:
      return start_remote(s, e, am_start(t, s, e));
    case abi::kOpUnetEndpoint:
      return complete(s, e, unet_configure(s, e), 0);
    case abi::kOpUnetSend:
      return start_remote(s, e, unet_start(t, s, e, nullptr));
    case abi::kOpUnetSendInline: {
      abi::SqEntry payload[kInlineEntries];
      abi::CqStatus st =
          e.length == 0 || e.length > abi::kMaxInline ? abi::kCqBadLength : take_inline_entries(s, e.length, payload);
      if (st != abi::kCqOk) return complete(s, e, st, 0);
      return start_remote(s, e, unet_start(t, s, e, payload));
    }
    case abi::kOpSendInline: {
      abi::SqEntry payload[kInlineEntries];
      abi::CqStatus st =
          e.length == 0 || e.length > abi::kMaxInline ? abi::kCqBadLength : take_inline_entries(s, e.length, payload);
      if (st == abi::kCqOk && !send_fields_ok(e)) st = abi::kCqBadOpcode;
      if (st != abi::kCqOk) return complete(s, e, st, 0);
      return start_remote(s, e, send_start(t, s, e, payload));
    }
  }
}

// One bounded step of one slot; true if it did anything. Out of line, and
// called only for a slot with something to do (has_work): inlined into
// slots_service, its loop's ~25 field addresses were computed and spilled
// for every awake slot in every pass of the NIC's loop (~60 instructions,
// and a 12-register prologue, of passes that mostly find nothing).
[[gnu::noinline]] bool service_slot(SlotTable& t, Slot& s) {
  bool worked = false;
  if (s.unet_mm) unet_take_fills(s);  // unmaps are acknowledged whatever the SQ holds
  uint64_t bytes = kCopyChunk;
  for (uint32_t n = 0; n < kSqBudget && bytes > 0;) {
    if (s.put_active) {
      if (!put_feed(t, s)) break;  // the link is full: later
      s.put_active = false;
      worked = true;
      continue;
    }
    if (s.vi_active) {
      if (!vi_feed(t, s)) break;  // the link is full: later
      s.vi_active = false;
      worked = true;
      continue;
    }
    if (s.copy.active) {
      if (s.cq.free_space() == 0) break;  // completion needs room: wait for the host
      bytes -= step_copy(t, s, bytes);
      worked = true;
      continue;
    }
    // Room for one more than is owed (free_space looks at the host's head
    // again only when asked for more than it saw last).
    if (s.cq.free_space(s.cq_reserved + 1) <= s.cq_reserved) break;
    const abi::SqEntry* shared = s.sq.peek();
    if (!shared) break;
    core::cost::Phase<abi::kPhaseSqScan> cost;  // a descriptor found: the work item starts here
    abi::SqEntry e;  // copy once: the host may rewrite the entry under us
    __builtin_memcpy_inline(&e, shared, sizeof e);  // (eight words, no call)
    // Every operation of its kind busy, or (U-Net/MM) a page of it not in
    // the NIC's TLB: it waits at the head (order kept).
    if (!vi_can_start(e) || !remote_can_start(e) || (s.unet_mm && !unet_can_start(s, e))) break;
    s.sq.pop();
    ++n;
    count(ulnic::abi::kCtrSqEntries);
    // A traced descriptor: the operation it starts takes the stamp along.
    s.trace_seen = (e.flags & abi::kSqTrace) ? hal::clint::now() : 0;
    e.flags &= uint8_t(~abi::kSqTrace);
    execute(t, s, e);
    if (s.trace_seen && e.opcode == abi::kOpNop) slot_trace_tx(s, s.trace_seen, s.trace_seen);
    s.trace_seen = 0;
    worked = true;
  }
  if (worked) s.sq.release();
  publish(s);
  if (s.sq.corrupt()) cut_off(s, t, abi::kFaultSqCorrupt);
  else if (s.cq.corrupt()) cut_off(s, t, abi::kFaultCqCorrupt);
  return worked;
}

}  // namespace

bool slot_live(const SlotTable& t, uint32_t k, uint64_t generation) {
  return k < abi::kMaxSlots && t.slots[k].state == abi::SlotState::kActive && t.slots[k].generation == generation;
}

uint32_t tagged_index(uint32_t& rng, uint32_t index) {
  // xorshift32; the top 24 bits make keys hard to guess across slots.
  uint32_t x = rng;
  do {
    x ^= x << 13, x ^= x >> 17, x ^= x << 5;
  } while ((x >> 8) == 0);
  rng = x;
  return (x & ~0xffu) | index;
}

abi::SlotHeader& header(const Slot& s) { return *reinterpret_cast<abi::SlotHeader*>(s.base); }

void slot_complete(Slot& s, const abi::SqEntry& e, abi::CqStatus status, uint32_t result) {
  complete(s, e, status, result);
}

abi::CqStatus slot_take_inline(Slot& s, uint32_t len, uint8_t* out) {
  abi::SqEntry entries[kInlineEntries];
  if (len > sizeof entries) return abi::kCqBadLength;
  abi::CqStatus st = take_inline_entries(s, len, entries);
  if (st == abi::kCqOk) memcpy(out, entries, len);
  return st;
}

void slot_run_recv_posts(SlotTable& t, Slot& s) {
  if (s.state != abi::SlotState::kActive) return;
  bool worked = false;
  for (uint32_t n = 0; n < abi::kViQueueDepth && s.cq.free_space(s.cq_reserved + 1) > s.cq_reserved; ++n) {
    const abi::SqEntry* shared = s.sq.peek();
    if (!shared) break;
    core::cost::Phase<abi::kPhaseSqScan> cost;
    abi::SqEntry e;
    __builtin_memcpy_inline(&e, shared, sizeof e);  // (eight words, no call)
    if (e.opcode != abi::kOpViPostRecv) break;  // anything else waits for the pass
    e.flags &= uint8_t(~abi::kSqTrace);         // a receive sends nothing to stamp
    s.sq.pop();
    count(ulnic::abi::kCtrSqEntries);
    execute(t, s, e);
    worked = true;
  }
  if (worked) s.sq.release();
  publish(s);
}

void slot_post_completion(SlotTable& t, uint32_t slot, uint64_t generation, const abi::SqEntry& e,
                          abi::CqStatus status, uint32_t result) {
  core::cost::Phase<abi::kPhaseCompletion> cost;
  if (slot >= abi::kMaxSlots) return;
  Slot& s = t.slots[slot];
  if (s.state != abi::SlotState::kActive || s.generation != generation) return;
  if (s.cq_reserved) --s.cq_reserved;
  complete(s, e, status, result);
  publish(s);
}

void slot_trace_tx(Slot& s, uint64_t seen, uint64_t sent) {
  abi::SlotTrace& tr = header(s).trace;
  put(tr.tx_seen, seen);
  put(tr.tx_sent, sent);
  // Release: a reader that sees the new count sees the times.
  __atomic_store_n(&tr.tx_seq, tr.tx_seq + 1, __ATOMIC_RELEASE);
}

void slot_trace_rx(SlotTable& t, uint32_t slot, uint64_t seen, uint64_t done) {
  if (slot >= abi::kMaxSlots || t.slots[slot].state != abi::SlotState::kActive) return;
  abi::SlotTrace& tr = header(t.slots[slot]).trace;
  put(tr.rx_seen, seen);
  put(tr.rx_done, done);
  __atomic_store_n(&tr.rx_seq, tr.rx_seq + 1, __ATOMIC_RELEASE);  // as in slot_trace_tx
}

void slot_post_event(SlotTable& t, uint32_t slot, const abi::EqEntry& ev) {
  core::cost::Phase<abi::kPhaseCompletion> cost;
  if (slot >= abi::kMaxSlots) return;
  Slot& s = t.slots[slot];
  if (s.state != abi::SlotState::kActive) return;
  abi::EqEntry* e = s.eq.reserve();
  if (!e) {
    put(header(s).nic.events_dropped, header(s).nic.events_dropped + 1);
    count(ulnic::abi::kCtrEventsDropped);
    return;
  }
  *e = ev;
  s.eq.push();
  s.eq.publish();
  s.ring_due |= abi::kWaitEvents;
}

namespace {
// Rings what is due: in every slot, thresholds holding (at `now`), or in
// the slots whose rings wait for theirs, thresholds or not (`waiting`).
bool ring_slots(SlotTable& t, bool waiting, uint64_t now) {
  bool rang = false;
  for (uint32_t m = t.active; m; m &= m - 1) {
    Slot& s = t.slots[__builtin_ctz(m)];
    if (waiting ? !s.ring_waits : !s.ring_due) continue;
    const uint32_t due = s.ring_due;
    s.ring_due = 0;
    rang |= ring_host(s, t, false, due, !waiting, now);
  }
  return rang;
}
}  // namespace

bool slots_ring_hosts(SlotTable& t, uint64_t now) { return ring_slots(t, false, now); }

bool slots_ring_deferred(SlotTable& t) { return ring_slots(t, true, 0); }

void slots_publish_run_time(SlotTable& t, uint64_t run_us) {
  t.run_us = run_us;
  for (Slot& s : t.slots)
    if (s.state == abi::SlotState::kActive) put(header(s).nic.run_us, run_us);
}

void slots_init(SlotTable& t, const core::board::Board& board, uint64_t seed) {
  memset(&t, 0, sizeof t);
  t.epoch = 1;  // 0 marks an empty cached translation
  t.board = &board;
  t.rng = uint32_t(seed ^ (seed >> 32)) | 1u;
  for (uint32_t k = 0; k < abi::kMaxSlots; ++k) t.slots[k].index = k;
}

abi::CtrlStatus slot_attach(SlotTable& t, const abi::CtrlCommand& cmd) {
  if (cmd.slot >= abi::kMaxSlots || !t.board->slots[cmd.slot].present) return abi::kCtrlBadSlot;
  Slot& s = t.slots[cmd.slot];
  if (s.state == abi::SlotState::kActive) return abi::kCtrlBadSlot;
  const abi::SlotLayout& l = cmd.layout;
  uint64_t size = t.board->slots[cmd.slot].size;
  // Three rings after the header, apart from each other, then the heap.
  struct Area {
    uint64_t off, bytes;
  } areas[3] = {
      {l.sq_offset, abi::ring_bytes<abi::SqEntry>(l.sq_capacity)},
      {l.cq_offset, abi::ring_bytes<abi::CqEntry>(l.cq_capacity)},
      {l.eq_offset, abi::ring_bytes<abi::EqEntry>(l.eq_capacity)},
  };
  if (l.slot_size != size || !abi::is_ring_capacity(l.sq_capacity) || !abi::is_ring_capacity(l.cq_capacity) ||
      !abi::is_ring_capacity(l.eq_capacity))
    return abi::kCtrlBadLayout;
  uint64_t rings_end = abi::kSlotHeaderSize;
  for (uint32_t i = 0; i < 3; ++i) {
    const Area& a = areas[i];
    if (a.off % 64 || !in_range(a.off, a.bytes, abi::kSlotHeaderSize, size)) return abi::kCtrlBadLayout;
    for (uint32_t j = 0; j < i; ++j)
      if (!(a.off + a.bytes <= areas[j].off || areas[j].off + areas[j].bytes <= a.off)) return abi::kCtrlBadLayout;
    if (a.off + a.bytes > rings_end) rings_end = a.off + a.bytes;
  }
  if (!in_range(l.heap_offset, l.heap_size, rings_end, size)) return abi::kCtrlBadLayout;
  uint32_t index = s.index;
  memset(&s, 0, sizeof s);
  s.index = index;
  ++t.epoch;
  s.base = t.board->slots[cmd.slot].mem;
  s.size = size;
  s.layout = l;
  s.generation = cmd.generation;
  s.host_peer = cmd.host_peer;
  s.host_vector = cmd.host_vector;
  auto* sq_ctl = reinterpret_cast<abi::RingControl*>(s.base + l.sq_offset);
  auto* cq_ctl = reinterpret_cast<abi::RingControl*>(s.base + l.cq_offset);
  auto* eq_ctl = reinterpret_cast<abi::RingControl*>(s.base + l.eq_offset);
  s.sq.attach(sq_ctl, reinterpret_cast<abi::SqEntry*>(sq_ctl + 1), l.sq_capacity);
  s.cq.attach(cq_ctl, reinterpret_cast<abi::CqEntry*>(cq_ctl + 1), l.cq_capacity);
  s.eq.attach(eq_ctl, reinterpret_cast<abi::EqEntry*>(eq_ctl + 1), l.eq_capacity);
  s.rung_seq = __atomic_load_n(&header(s).host.wait_seq, __ATOMIC_RELAXED);
  s.state = abi::SlotState::kActive;
  t.active |= 1u << s.index;
  put(header(s).nic.sq_dormant, 0u);
  put(header(s).nic.fault_code, 0u);
  put(header(s).nic.run_us, t.run_us);
  put(header(s).nic.state, uint32_t(abi::SlotState::kActive));
  return abi::kCtrlOk;
}

uint64_t slot_detach(SlotTable& t, uint32_t k) {
  if (k >= abi::kMaxSlots) return 0;
  Slot& s = t.slots[k];
  uint64_t flushed = 0;
  if (s.state == abi::SlotState::kActive) {
    if (s.copy.active && s.cq.free_space()) complete(s, s.copy.sqe, abi::kCqFlushed, 0), ++flushed;
    while (s.cq.free_space()) {
      const abi::SqEntry* e = s.sq.peek();
      if (!e) break;
      abi::SqEntry local;
      memcpy(&local, e, sizeof local);
      s.sq.pop();
      complete(s, local, abi::kCqFlushed, 0);
      ++flushed;
    }
    s.sq.release();
    publish(s);
  }
  if (s.state != abi::SlotState::kFree) {
    put(header(s).nic.state, uint32_t(abi::SlotState::kFlushed));
    put(header(s).nic.sq_dormant, 0u);
    if (s.state == abi::SlotState::kActive) ring_host(s, t, true, abi::kWaitAll);  // a waiter must see the flush now
  }
  uint32_t index = s.index;
  memset(&s, 0, sizeof s);  // registrations die with the attachment
  s.index = index;
  t.active &= ~(1u << index);
  ++t.epoch;
  return flushed;
}

namespace {
// Anything for service_slot: an operation to feed, a descriptor posted
// (or a wild SQ index: available() finds it), completions to publish, a
// corrupt ring to cut off, U-Net/MM's fills.
bool has_work(Slot& s) {
  return s.put_active || s.vi_active || s.copy.active || s.cq_pending || s.unet_mm || s.sq.available() != 0 ||
         s.sq.corrupt() || s.cq.corrupt();
}
}  // namespace

// Each pass starts one slot further on: operations freed while slots wait
// for one (remote_can_start) go to each slot in turn, not the lowest first.
bool slots_service(SlotTable& t) {
  static_assert(abi::kMaxSlots <= 16);
  bool worked = false;
  const uint32_t first = t.first;
  t.first = (first + 1) % abi::kMaxSlots;
  // The active slots from `first` on, round: bit i is slot (first + i) % kMaxSlots.
  const uint32_t all = (1u << abi::kMaxSlots) - 1;
  for (uint32_t m = ((t.active >> first) | (t.active << (abi::kMaxSlots - first))) & all; m; m &= m - 1) {
    Slot& s = t.slots[(first + uint32_t(__builtin_ctz(m))) % abi::kMaxSlots];
    if (s.dormant || !has_work(s)) continue;
    worked |= service_slot(t, s);
  }
  return worked;
}

bool slots_prepare_sleep(SlotTable& t) {
  for (Slot& s : t.slots)
    if (s.state == abi::SlotState::kActive) put(header(s).nic.sq_dormant, 1u);
  full_barrier();  // our flags before their tails: see ring.h / slot.h
  for (Slot& s : t.slots) {
    if (s.state != abi::SlotState::kActive) continue;
    // A head that waits for a TLB fill is no work until its process posts
    // one (it rings after it, as after a submit).
    const bool waits = s.unet_waiting && !unet_fills_waiting(s);
    if ((s.sq.available() && !waits) || s.sq.corrupt()) {
      slots_woke(t);
      return false;
    }
  }
  for (Slot& s : t.slots)
    if (s.state == abi::SlotState::kActive) {
      s.dormant = true;
      count(ulnic::abi::kCtrSlotDormant);
    }
  return true;
}

void slots_woke(SlotTable& t) {
  for (Slot& s : t.slots) {
    if (s.state != abi::SlotState::kActive) continue;
    s.dormant = false;
    put(header(s).nic.sq_dormant, 0u);
  }
}

void slot_wake(SlotTable& t, uint32_t k) {
  if (k >= abi::kMaxSlots) return;
  Slot& s = t.slots[k];
  count(ulnic::abi::kCtrSlotWakeups);
  if (s.state != abi::SlotState::kActive || !s.dormant) return;
  s.dormant = false;
  put(header(s).nic.sq_dormant, 0u);
}

bool slots_busy(const SlotTable& t) {
  for (uint32_t m = t.active; m; m &= m - 1) {
    const Slot& s = t.slots[__builtin_ctz(m)];
    if (s.copy.active || s.put_active || s.vi_active || s.cq_reserved != s.cq_waiting) return true;
  }
  return false;
}

}  // namespace lcp
