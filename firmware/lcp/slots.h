// Host slots as the firmware serves them (DESIGN §4, §8): per-slot send
// queue scan, memory registration table, node-local copies, completion
// queue, completion doorbells, and dormancy (while the NIC sleeps no slot is
// polled; a process that posts rings its slot's doorbell vector instead).
#pragma once

#include "core/board.h"
#include "ulnic/abi/ctrl.h"
#include "ulnic/abi/slot.h"
#include "ulnic/abi/vmmc.h"

namespace lcp {

namespace abi = ulnic::abi;

// Per pass and slot: at most this many descriptors and copy bytes, so one
// busy slot cannot starve the others (LANai loop, bounded steps).
constexpr uint32_t kSqBudget = 16;
constexpr uint64_t kCopyChunk = 64u << 10;

struct Registration {
  uint64_t va;        // the owner's virtual address of the region
  uint64_t offset;    // slot offset of the region
  uint64_t length;
  uint32_t access;    // abi::MemAccess
  uint32_t key;       // 0 = free entry
  uint32_t ptag;      // VI protection tag (0: none)
};

struct CopyState {
  bool active;
  abi::SqEntry sqe;       // private copy of the descriptor
  uint64_t src, dst;      // NIC addresses of the next byte
  uint64_t left;
  uint32_t dst_slot, src_slot;
  uint64_t dst_generation, src_generation;
};

// VMMC outgoing page table entry: proxy region -> an export on another node.
struct Import {
  bool used;
  uint32_t node, slot;    // the exporter
  uint32_t handle;        // its export handle
  uint64_t length;
};

// Per-slot software TLB (direct mapped by virtual page): which registration
// holds a send's source. Entries are hints, checked against the table.
constexpr uint32_t kTlbEntries = 64;
struct TlbEntry {
  uint64_t vpage;
  uint32_t reg;           // index into regs
  uint32_t key;           // the registration's key when filled
};

struct Slot {
  abi::SlotState state;
  uint32_t index;
  uint64_t generation;
  uint64_t base, size;              // the slot's BAR
  abi::SlotLayout layout;           // from the daemon, never from the slot
  abi::RingConsumer<abi::SqEntry> sq;
  abi::RingProducer<abi::CqEntry> cq;
  abi::RingProducer<abi::EqEntry> eq;
  bool dormant;
  uint32_t cq_pending;              // CQEs pushed, not yet published
  uint32_t host_peer, host_vector;  // who to ring on completions
  uint64_t rung_seq;                // host wait_seq we last answered
  uint32_t ring_due;                // abi::WaitFor bits published this pass, and kDueFailure (slots_ring_hosts)
  bool ring_waits;                  // a ring for events waits for wait_events_until (ring_host)
  uint64_t ring_waits_since;        // ... since then (ticks)
  bool cq_failed;                   // a CQE with an error status pushed, not yet published
  CopyState copy;
  bool put_active;                  // feeding put_op to the link
  uint32_t put_op;
  uint32_t cq_reserved;             // CQ entries owed to puts and VI posts in flight
  uint32_t cq_waiting;              // ... of them, owed to VI receives, connects and
                                    // listens (they may wait long: the slot may sleep)
  bool unet_mm;                     // a U-Net/MM endpoint (its fills are taken at every service)
  bool unet_waiting;                // its SQ head waits for a TLB fill (unet_can_start)
  bool vi_active;                   // feeding VI operation vi_op to the link
  uint32_t vi_op;
  uint64_t trace_seen;              // the descriptor being executed carries kSqTrace:
                                    // when the NIC took it (0: it does not)
  Registration regs[abi::kMaxRegistrations];
  Import imports[abi::kMaxImports];
  TlbEntry tlb[kTlbEntries];
  uint64_t tlb_hits, tlb_misses;
};

struct SlotTable {
  Slot slots[abi::kMaxSlots];
  // Bumped whenever a slot is attached, detached or cut off, a registration
  // changes, or a VMMC table does: translations cached across packets
  // (vmmc.cpp) hold only while it stays.
  uint64_t epoch;
  uint32_t rng;                     // xorshift state for memory keys
  const core::board::Board* board;
  uint32_t first;                   // the slot each service pass starts with (turns round)
  // Bit k: slots[k] is kActive. The loop's per-pass looks (service, rings,
  // busy) visit these, not every slot: ~16 instructions a slot and pass.
  uint32_t active;
  uint64_t run_us;                  // the NIC's running time as last published (slots_publish_run_time)
};

void slots_init(SlotTable& t, const core::board::Board& board, uint64_t seed);
abi::CtrlStatus slot_attach(SlotTable& t, const abi::CtrlCommand& cmd);
// Stops serving the slot; outstanding descriptors complete as flushed (if the
// CQ has room). Returns how many were flushed.
uint64_t slot_detach(SlotTable& t, uint32_t slot);
// One bounded pass over the awake slots; true if any did work.
bool slots_service(SlotTable& t);
// Dormancy, for the whole NIC at once: a NIC that polls polls every slot (a
// load per slot and pass), and one that sleeps none. Before it sleeps it
// marks every slot dormant (sq_dormant: its process must ring), then looks
// at their send queues once more: false, and nothing marked, if any has a
// descriptor (Dekker-style with the host's submit: flag, full fence, tail).
bool slots_prepare_sleep(SlotTable& t);
// The NIC woke (or did not sleep after all): every slot is polled again.
void slots_woke(SlotTable& t);
// Rings every process that waits and had completions or events published
// since the last call, of a kind one of its sleepers waits for
// (SlotHostWords.wait_for; completions with an error status always): once
// per loop pass, not once per publication. A ring
// is a device write that leaves translated code and takes QEMU's global
// lock (a few microseconds of the NIC's time) and wakes the process; a
// burst of messages for one process within a pass costs one (measured,
// issue 19: a depth-16 AM stream rang its hosts ~1.6 times per message).
// A ring for events alone waits while the queue's tail is short of what the
// sleeper asked for (SlotHostWords.wait_events_until): its due bits stay
// until enough arrived, kRingDeferUs passed since it first waited, or the NIC
// is about to sleep (slots_ring_deferred). Measured, issue 19: a process
// that took each 64 KiB FM packet as it came shared its CPU with the NIC in
// ~14,000 turns a second, ~18 us of kernel time each.
// True if it rang.
bool slots_ring_hosts(SlotTable& t, uint64_t now);
constexpr uint64_t kRingDeferUs = 500;
// Rings every waiting ring now, whatever its sleeper's threshold: the NIC is
// about to sleep, and nothing more arrives before it wakes. True if it rang.
bool slots_ring_deferred(SlotTable& t);
// Writes the NIC's running time (microseconds, the loop's refresh clock) to
// every active slot's header (SlotNicWords.run_us); an attach writes the
// last value, so a process never sees the clock jump from 0.
void slots_publish_run_time(SlotTable& t, uint64_t run_us);
// ring_due: a completion with an error status was published (rings whatever
// the process waits for: a failed send is news to a process waiting for arrivals).
constexpr uint32_t kDueFailure = 1u << 31;
// The slot's doorbell vector fired.
void slot_wake(SlotTable& t, uint32_t slot);
// True while some slot has work the NIC must come back to by itself: a copy,
// put, send or VI operation to feed to the link (it may be waiting for room
// or for CQ space), or sends awaiting their verdicts.
bool slots_busy(const SlotTable& t);

// A table index with a random 24-bit tag above it (memory keys, export
// handles): hard to guess, and a stale one does not match a reused entry.
uint32_t tagged_index(uint32_t& rng, uint32_t index);

// Slot k still has the process it had at `generation`.
bool slot_live(const SlotTable& t, uint32_t k, uint64_t generation);

// The slot header as the firmware writes it (only its nic words).
abi::SlotHeader& header(const Slot& s);

// The NIC address of [addr, addr+len) in slot `s` through registration `key`
// with access `need`, or why not. Inline: every arriving chunk asks.
inline abi::CqStatus slot_translate(const Slot& s, uint32_t key, uint64_t addr, uint64_t len, uint32_t need,
                                    uint64_t& nic) {
  const Registration& r = s.regs[key & 0xff];
  if (key == 0 || r.key != key) return abi::kCqBadKey;
  if ((r.access & need) != need) return abi::kCqProtection;
  if (addr < r.va || len > r.length || addr - r.va > r.length - len) return abi::kCqBadLength;
  nic = s.base + r.offset + (addr - r.va);
  return abi::kCqOk;
}
// The same, for a VI: the registration must also carry protection tag `ptag`
// (kCqProtection if not). (Inline: a VI message takes a dozen.)
inline abi::CqStatus slot_translate_tagged(const Slot& s, uint32_t key, uint64_t addr, uint64_t len, uint32_t need,
                                           uint32_t ptag, uint64_t& nic) {
  abi::CqStatus st = slot_translate(s, key, addr, len, need, nic);
  if (st == abi::kCqOk && s.regs[key & 0xff].ptag != ptag) return abi::kCqProtection;
  return st;
}
// A completion for the descriptor being executed now (no CQ entry was kept
// for it; the pass made sure there is room).
void slot_complete(Slot& s, const abi::SqEntry& e, abi::CqStatus status, uint32_t result);
// Runs the receive posts (kOpViPostRecv) at the head of the slot's SQ now:
// a message may arrive before the slot's pass got to a receive its process
// had posted before the sender sent.
void slot_run_recv_posts(SlotTable& t, Slot& s);
// A short send's payload as execute() takes it off the SQ for send_start
// and unet_start: whole entries (8-byte aligned), ceil(len / 64) of them.
constexpr uint32_t kInlineEntries = abi::kMaxInline / sizeof(abi::SqEntry);
static_assert(abi::kMaxInline % sizeof(abi::SqEntry) == 0);
// Takes `len` bytes (at most kMaxInline) of payload that follow the current
// descriptor in the SQ (ceil(len / 64) entries), as kOpSendInline does.
abi::CqStatus slot_take_inline(Slot& s, uint32_t len, uint8_t* out);
// A completion for work that finished outside the slot's own pass (remote
// puts); dropped if the slot has changed hands since (generation).
void slot_post_completion(SlotTable& t, uint32_t slot, uint64_t generation, const abi::SqEntry& e,
                          abi::CqStatus status, uint32_t result);
// Latency breakdowns (abi::SlotTrace): a traced descriptor of slot `s`
// taken from the SQ at `seen` finished sending at `sent`; a traced message
// for slot `slot` whose last packet the NIC began on at `seen` was delivered
// at `done`. Times in mtime ticks.
void slot_trace_tx(Slot& s, uint64_t seen, uint64_t sent);
void slot_trace_rx(SlotTable& t, uint32_t slot, uint64_t seen, uint64_t done);
// An event (notification) for slot `slot`'s process; counted and dropped if
// its event queue is full. The process is rung if it waits (at the end of
// the pass: slots_ring_hosts).
void slot_post_event(SlotTable& t, uint32_t slot, const abi::EqEntry& ev);

}  // namespace lcp
