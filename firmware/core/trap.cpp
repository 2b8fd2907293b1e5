#include "core/trap.h"

#include "core/log.h"
#include "core/status.h"
#include "hal/cpu.h"

namespace core::trap {
namespace abi = ulnic::abi;

namespace {
FaultHook g_hook;
}

void set_fault_hook(FaultHook hook) { g_hook = hook; }

const char* cause_name(uint64_t mcause) {
  if (mcause & hal::kMcauseInterrupt) return "unexpected interrupt";
  static const char* const names[] = {
      "instruction address misaligned", "instruction access fault", "illegal instruction",
      "breakpoint", "load address misaligned", "load access fault", "store address misaligned",
      "store access fault", "ecall from U", "ecall from S", "reserved", "ecall from M",
      "instruction page fault", "load page fault", "reserved", "store page fault"};
  return mcause < sizeof names / sizeof names[0] ? names[mcause] : "unknown";
}

uint64_t insn_length(uint64_t pc) {
  // The low two bits of the first halfword are 0b11 for 32-bit encodings.
  return (*reinterpret_cast<const volatile uint16_t*>(pc) & 3) == 3 ? 4 : 2;
}

}  // namespace core::trap

extern "C" void ulnic_trap_handler(core::trap::Frame* f) {
  using namespace core;
  namespace abi = ulnic::abi;
  abi::StatusBlock& b = status::block();
  status::put(b.trap_cause, f->mcause);
  status::put(b.trap_pc, f->mepc);
  status::put(b.trap_tval, f->mtval);
  status::put(b.trap_ra, f->x[1]);
  status::put(b.trap_sp, f->x[2]);
  status::set_state(abi::FwState::kCrashed);
  log("\n*** ulnic-fw TRAP: %s (mcause=%lx) pc=%lx tval=%lx ra=%lx sp=%lx\n",
      trap::cause_name(f->mcause), f->mcause, f->mepc, f->mtval, f->x[1], f->x[2]);
  if (trap::g_hook && trap::g_hook(*f)) return;
  log("*** NIC parked (state=crashed); reflash to recover\n");
  hal::park_forever();
}
