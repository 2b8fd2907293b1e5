// Phase markers for the cost plugin (shared/include/ulnic/abi/cost.h). Each
// is one HINT instruction (`slti x0, x0, imm`: writes x0, so a no-op): the
// firmware pays one instruction per marker whether or not a plugin watches,
// and there is no flag to test. No memory clobber: the compiler may move
// arithmetic across a marker, so a phase's border is exact to within a few
// instructions, but the same code always splits the same way.
#pragma once

#include "ulnic/abi/cost.h"

namespace core::cost {

template <int Imm>
inline void mark() {
  static_assert(Imm >= -2048 && Imm <= 2047);
#ifdef __riscv  // (the fuzz build runs this code on the host: no markers there)
  asm volatile("slti zero, zero, %0" ::"i"(Imm));
#endif
}

// A phase open for the lifetime of the scope (closed on every return path).
template <ulnic::abi::CostPhase P>
struct Phase {
  static_assert(P > ulnic::abi::kPhaseIdle && P < ulnic::abi::kPhaseCount);
  Phase() { mark<int(P)>(); }
  ~Phase() { mark<ulnic::abi::kMarkClose>(); }
  Phase(const Phase&) = delete;
  Phase& operator=(const Phase&) = delete;
};

// The open work item belongs to operation O.
template <ulnic::abi::CostOp O>
inline void op() {
  mark<ulnic::abi::kMarkOp + int(O)>();
}

}  // namespace core::cost
