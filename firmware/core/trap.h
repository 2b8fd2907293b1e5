// Trap policy. The firmware runs with interrupts globally off and polls its
// wake sources after WFI, so every trap that reaches here is a fault: it is
// recorded in the status block (cause, pc, tval, ra, sp), logged, and the NIC
// is parked in the visible "crashed" state. A parked NIC draws no CPU.
#pragma once

#include <stdint.h>

namespace core::trap {

// Saved by boot/trap_entry.S; x[2] is the interrupted sp.
struct Frame {
  uint64_t x[32];
  uint64_t mepc, mcause, mtval, mstatus;
};
static_assert(sizeof(Frame) == 36 * 8, "trap_entry.S hard-codes the frame layout");

// Tests only: a hook that may resume after a recorded fault (e.g. by
// advancing frame.mepc). Returns true to resume, false to park as usual.
using FaultHook = bool (*)(Frame& frame);
void set_fault_hook(FaultHook hook);

const char* cause_name(uint64_t mcause);
// Length in bytes of the instruction at pc (2 for compressed, else 4).
uint64_t insn_length(uint64_t pc);

}  // namespace core::trap

extern "C" void ulnic_trap_handler(core::trap::Frame* frame);
