// Firmware cost accounting (issue 22): exact NIC instruction counts per phase
// and per protocol operation, measured by a QEMU TCG plugin
// (emulator/cost/cost_plugin.cpp) that the board loads under `--cost`.
//
// The firmware marks where work starts and ends with HINT instructions (the
// RISC-V "custom use" encoding `slti x0, x0, imm`, a no-op on every RV64
// core). The plugin counts every instruction the NIC retires and charges it
// to the innermost open phase; instructions outside any phase are the event
// loop's polling ("idle"), whose amount depends on timing. The work phases do
// not: the same message costs the same count run after run.
//
// Marker immediates (12-bit, signed):
//   1..15          open phase p (phases nest; the innermost is charged)
//   kMarkClose     close the innermost open phase
//   kMarkOp + o    this work item belongs to protocol operation o
// A work item ("span") runs from the outermost open to its close; its
// instructions are added to the operation named inside it (or to kCostOpOther).
#pragma once

#include "ulnic/abi/sram.h"

namespace ulnic::abi {

enum CostPhase : uint32_t {
  kPhaseIdle = 0,     // the loop's polling between work (timing dependent)
  kPhaseSqScan,       // a descriptor found at a send-queue head: copy, pop, count
  kPhaseDecode,       // opcode dispatch, field checks, inline payload
  kPhaseTranslate,    // proxy / source / key translation and bounds checks
  kPhaseHeader,       // operation slot and wire-header template
  kPhaseTransmit,     // packets into the link ring (or a node-local feed)
  kPhaseRxCheck,      // a packet taken from a fabric ring: header, checksum, sequence
  kPhasePlacement,    // incoming page table / receive descriptor / ring: data placed
  kPhaseCompletion,   // completion entries, notifications, receive-ring publish
  kPhaseVerdict,      // an operation's verdict (result packet) sent back to its sender
  // Timing dependent, so outside the per-message budgets: how often these
  // run and which way they branch depends on when the peers acted.
  kPhaseAck,          // link ACKs taken, owed, sent alone; retransmission timer upkeep
  kPhaseRing,         // fabric ring head re-reads (how far the peer got) and doorbells (does it sleep)
  kPhaseCount,
};
constexpr uint32_t kMaxCostPhases = 16;
static_assert(kPhaseCount <= kMaxCostPhases);

enum CostOp : uint32_t {
  kCostOpOther = 0,   // work no operation marker claimed (link ACKs, control, ...)
  kCostOpVmmcSend,    // VMMC send: the sender's side
  kCostOpVmmcRecv,    // VMMC send: the receiver's side
  kCostOpAmSend,      // native AM request/reply: the sender's side
  kCostOpAmRecv,      // native AM message: the receiver's side
  kCostOpViSend,      // VI send / RDMA operation: the initiator's side
  kCostOpViRecv,      // VI send / RDMA write: the target's side
  kCostOpVerdict,     // an operation's verdict (result packet) taken by its sender
  kCostOpCount,
};
constexpr uint32_t kMaxCostOps = 8;
static_assert(kCostOpCount <= kMaxCostOps);

constexpr int32_t kMarkClose = 0x7ff;
constexpr int32_t kMarkOp = 0x40;

// SRAM at kCostOffset, written only by the cost plugin (the firmware never
// touches it; without --cost it stays zero). A reader that wants one
// consistent snapshot reads `seq` before and after (odd: an update is under way).
constexpr uint64_t kCostOffset = 0xFF'3000;
constexpr uint64_t kCostSize = 0x1000;
constexpr uint32_t kCostMagic = fourcc('U', 'C', 'S', 'T');

struct CostOpCounts {
  uint64_t spans;                     // work items charged to this operation
  uint64_t insns[kMaxCostPhases];     // instructions by phase
  uint64_t last[kMaxCostPhases];      // by phase: the latest work item of this operation that had any
};
ULNIC_ABI_CHECK_SIZE(CostOpCounts, 264);

struct CostBlock {
  uint32_t magic;                     // kCostMagic once the plugin runs
  uint32_t version;                   // ULNIC_ABI_VERSION the plugin was built with
  uint64_t seq;                       // bumped before and after every update
  uint64_t total;                     // instructions retired up to the last marker
  uint64_t spans;                     // work items closed
  uint64_t bad_markers;               // closes with nothing open, opens past the depth
  uint64_t reserved0[3];
  uint64_t phase[kMaxCostPhases];     // instructions by phase, all operations (idle included)
  uint64_t entries[kMaxCostPhases];   // times each phase was opened
  CostOpCounts ops[kMaxCostOps];
};
ULNIC_ABI_CHECK_OFFSET(CostBlock, phase, 64);
ULNIC_ABI_CHECK_OFFSET(CostBlock, ops, 320);
ULNIC_ABI_CHECK_SIZE(CostBlock, 320 + 8 * 264);
static_assert(sizeof(CostBlock) <= kCostSize);
static_assert(kCostOffset >= kStatusOffset + kStatusSize + 0x1000 && kCostOffset + kCostSize <= kSramSize);

// Names, indexed by CostPhase / CostOp, for the tools' tables and JSON.
inline const char* cost_phase_name(uint32_t p) {
  static const char* const names[kPhaseCount] = {"idle",     "sq_scan",    "decode",  "translate", "header",
                                                 "transmit", "rx_check",   "placement", "completion", "verdict",
                                                 "ack",      "ring"};
  return p < kPhaseCount ? names[p] : "?";
}
inline const char* cost_op_name(uint32_t o) {
  static const char* const names[kCostOpCount] = {"other",   "vmmc_send", "vmmc_recv", "am_send",
                                                  "am_recv", "vi_send",   "vi_recv",   "verdict_taken"};
  return o < kCostOpCount ? names[o] : "?";
}

}  // namespace ulnic::abi
