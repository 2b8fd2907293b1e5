// A host process played by a firmware unit test on one slot of the board:
// it lays out its rings in the slot's memory, has the firmware attach the
// slot (as the daemon would), pushes SQ entries, runs the firmware's slot
// service until a completion arrives, and reads completions and events.
// Header-only; freestanding like the test images (no std library, no
// exceptions): see harness.h for the test macros.
#pragma once

#include <stdint.h>
#include <string.h>

#include "harness.h"
#include "lcp/slots.h"

namespace fwtest {

namespace abi = ulnic::abi;

// Where a test's process puts its rings and its heap in a slot; the heap runs
// from heap_offset to the end of the slot.
struct SlotShape {
  uint32_t sq_offset;
  uint32_t sq_capacity;
  uint32_t cq_offset;
  uint32_t cq_capacity;
  uint32_t eq_offset;
  uint32_t eq_capacity;
  uint64_t heap_offset;
};

// Small rings packed into the slot's first 64 KiB: the SQ right after the
// header, the CQ at 8 KiB, the EQ at 12 KiB; the heap from 64 KiB.
constexpr SlotShape packed_shape(uint32_t sq_capacity, uint32_t cq_capacity, uint32_t eq_capacity) {
  return SlotShape{abi::kSlotHeaderSize, sq_capacity, 0x2000, cq_capacity, 0x3000, eq_capacity, 0x10000};
}

inline abi::SlotLayout slot_layout(const SlotShape& s, uint64_t slot_size) {
  abi::SlotLayout l{};
  l.sq_offset = s.sq_offset;
  l.sq_capacity = s.sq_capacity;
  l.cq_offset = s.cq_offset;
  l.cq_capacity = s.cq_capacity;
  l.eq_offset = s.eq_offset;
  l.eq_capacity = s.eq_capacity;
  l.heap_offset = s.heap_offset;
  l.heap_size = slot_size - s.heap_offset;
  l.slot_size = slot_size;
  return l;
}

// The daemon's command attaching `slot` with layout l.
inline abi::CtrlCommand attach_command(uint32_t slot, uint64_t generation, const abi::SlotLayout& l) {
  abi::CtrlCommand c{};
  c.opcode = abi::kCtrlAttachSlot;
  c.slot = slot;
  c.generation = generation;
  c.host_peer = 99;  // nobody: rings are ignored by QEMU
  c.layout = l;
  return c;
}

// An SQ entry registering [offset, +len) of the slot at the process's address va.
inline abi::SqEntry register_entry(uint64_t offset, uint32_t len, uint32_t access, uint64_t va) {
  abi::SqEntry e{};
  e.opcode = abi::kOpRegister;
  e.reg_offset = offset;
  e.length = len;
  e.access = access;
  e.src_addr = va;
  return e;
}

// The oldest entry of r, consumed and handed back to the producer; false if none.
template <class T>
bool take_one(abi::RingConsumer<T>& r, T& out) {
  const T* e = r.peek();
  if (!e) return false;
  out = *e;
  r.pop();
  r.release();
  return true;
}

struct SlotProc {
  lcp::SlotTable* table = nullptr;
  const uint64_t* clock = nullptr;  // the test's time, read at each attach() and run()
  uint32_t slot = 0;
  uint8_t* base = nullptr;
  abi::SlotLayout layout{};
  abi::RingProducer<abi::SqEntry> sq;
  abi::RingConsumer<abi::CqEntry> cq;
  abi::RingConsumer<abi::EqEntry> eq;

  // The process's side of slot k of t's board: zeroes the slot's first
  // `clear` bytes (header, rings, the heap the test uses) and takes its ends
  // of the rings laid out as s. The firmware learns of it at attach(). `now`
  // is the test's clock, kept by reference (a test may move it on).
  void map(lcp::SlotTable& t, const uint64_t& now, uint32_t k, const SlotShape& s, uint64_t clear) {
    table = &t;
    clock = &now;
    slot = k;
    base = reinterpret_cast<uint8_t*>(t.board->slots[k].mem);
    layout = slot_layout(s, t.board->slots[k].size);
    memset(base, 0, clear);
    auto* sqc = reinterpret_cast<abi::RingControl*>(base + layout.sq_offset);
    auto* cqc = reinterpret_cast<abi::RingControl*>(base + layout.cq_offset);
    auto* eqc = reinterpret_cast<abi::RingControl*>(base + layout.eq_offset);
    sq = abi::RingProducer<abi::SqEntry>();
    cq = abi::RingConsumer<abi::CqEntry>();
    eq = abi::RingConsumer<abi::EqEntry>();
    sq.attach(sqc, reinterpret_cast<abi::SqEntry*>(sqc + 1), layout.sq_capacity);
    cq.attach(cqc, reinterpret_cast<abi::CqEntry*>(cqc + 1), layout.cq_capacity);
    eq.attach(eqc, reinterpret_cast<abi::EqEntry*>(eqc + 1), layout.eq_capacity);
  }
  // The daemon attaches the slot with the layout map() used.
  abi::CtrlStatus attach(uint64_t generation) const {
    return lcp::slot_attach(*table, attach_command(slot, generation, layout));
  }

  // One 64-byte SQ entry (a descriptor or an inline continuation), not yet published.
  void push(const void* entry) {
    abi::SqEntry* slot_entry = sq.reserve();
    if (!EXPECT(slot_entry != nullptr)) return;
    memcpy(slot_entry, entry, sizeof(abi::SqEntry));
    sq.push();
  }
  // e, then `bytes` of inline payload in continuation entries; published.
  void submit(const abi::SqEntry& e, const void* payload = nullptr, uint32_t bytes = 0) {
    push(&e);
    for (uint32_t off = 0; off < bytes; off += 64) {
      uint8_t chunk[64] = {};
      memcpy(chunk, static_cast<const uint8_t*>(payload) + off, bytes - off < 64 ? bytes - off : 64);
      push(chunk);
    }
    sq.publish();
  }
  // The oldest completion / event, consumed; false if none.
  bool reap(abi::CqEntry& out) { return take_one(cq, out); }
  bool event(abi::EqEntry& out) { return take_one(eq, out); }
  // Submits e (and its inline payload), runs the slot service until a
  // completion arrives (at most kRunPasses passes) and returns it; status
  // 0xffff if none came.
  static constexpr int kRunPasses = 1000;
  abi::CqEntry run(const abi::SqEntry& e, const void* payload = nullptr, uint32_t bytes = 0) {
    submit(e, payload, bytes);
    abi::CqEntry c{};
    c.status = 0xffff;
    for (int i = 0; i < kRunPasses && !reap(c); ++i) lcp::slots_service(*table);
    return c;
  }
};

}  // namespace fwtest
