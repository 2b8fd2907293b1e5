// fiber.cpp: see fiber.h.
#include "fiber.h"

#include <cstdint>
#include <cstdlib>

#if ULNIC_FM_FIBER_ASM
// void ulnic_fm_fiber_switch(void** save_sp, void* to_sp)
// Pushes the callee-saved registers and the floating-point control words
// on the running stack, stores its pointer in *save_sp, and pops the same
// from to_sp's stack; `ret` then goes where that thread left off (or, the
// first time, to its entry: fiber_start's frame).
asm(R"(
        .text
        .p2align 4
        .type ulnic_fm_fiber_switch, @function
ulnic_fm_fiber_switch:
        pushq %rbp
        pushq %rbx
        pushq %r12
        pushq %r13
        pushq %r14
        pushq %r15
        subq $8, %rsp
        stmxcsr (%rsp)
        fnstcw 4(%rsp)
        movq %rsp, (%rdi)
        movq %rsi, %rsp
        ldmxcsr (%rsp)
        fldcw 4(%rsp)
        addq $8, %rsp
        popq %r15
        popq %r14
        popq %r13
        popq %r12
        popq %rbx
        popq %rbp
        ret
        .size ulnic_fm_fiber_switch, .-ulnic_fm_fiber_switch
)");
extern "C" void ulnic_fm_fiber_switch(void** save_sp, void* to_sp);
#endif

namespace ulnic::fm {

#if ULNIC_FM_FIBER_ASM

void fiber_start(Fiber& f, void* stack, size_t size, void (*entry)()) {
  // The frame a switch pops: the control words, six registers (zero), the
  // entry as the return address, and below the stack's top a null return
  // address of entry's own (it never returns): at entry the stack pointer
  // is 8 past a multiple of 16, as after a call.
  auto top = (reinterpret_cast<uintptr_t>(stack) + size) & ~uintptr_t(15);
  auto* w = reinterpret_cast<uint64_t*>(top);
  *--w = 0;                                   // entry's return address
  *--w = reinterpret_cast<uintptr_t>(entry);  // popped by `ret`
  for (int i = 0; i < 6; ++i) *--w = 0;       // rbp, rbx, r12-r15
  *--w = uint64_t(0x037f) << 32 | 0x1f80;     // MXCSR and x87 control word: their defaults
  f.sp = w;
}

void fiber_switch(Fiber& from, Fiber& to) { ulnic_fm_fiber_switch(&from.sp, to.sp); }

#else

void fiber_start(Fiber& f, void* stack, size_t size, void (*entry)()) {
  getcontext(&f.ctx);
  f.ctx.uc_stack.ss_sp = stack;
  f.ctx.uc_stack.ss_size = size;
  f.ctx.uc_link = nullptr;  // entry never returns
  makecontext(&f.ctx, entry, 0);
}

void fiber_switch(Fiber& from, Fiber& to) {
  if (swapcontext(&from.ctx, &to.ctx) != 0) std::abort();
}

#endif

}  // namespace ulnic::fm
