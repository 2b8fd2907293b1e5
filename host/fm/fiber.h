// fiber.h: FM's handler threads (fm.cpp): a stack of their own each, and a
// switch to and from the extract loop that makes no system call.
//
// glibc's getcontext/swapcontext/setcontext save and restore the signal
// mask, a rt_sigprocmask system call each way: three per message with a
// handler of its own, 45% of an FM job's process time in a depth-16 rate
// run (perf, issue 19). On x86-64 a switch here saves what the ABI says a
// callee keeps (rbx, rbp, r12-r15, the stack pointer, MXCSR and the x87
// control word) and nothing else; the signal mask is the thread's and no
// handler changes it. Elsewhere, in sanitizer builds (ASan and TSan
// intercept swapcontext and follow it; a switch they cannot see would
// confuse their view of the stack) and in builds for shadow stacks
// (-fcf-protection: glibc's switch keeps the shadow stack in step, this
// one's `ret` into a new stack would not), it is ucontext as before.
#pragma once

#include <cstddef>

#if defined(__CET__)
#define ULNIC_FM_SHADOW_STACK ((__CET__ & 2) != 0)
#else
#define ULNIC_FM_SHADOW_STACK 0
#endif

#if defined(__x86_64__) && !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__) && !ULNIC_FM_SHADOW_STACK
#define ULNIC_FM_FIBER_ASM 1
#else
#define ULNIC_FM_FIBER_ASM 0
#include <ucontext.h>
#endif

namespace ulnic::fm {

struct Fiber {
#if ULNIC_FM_FIBER_ASM
  void* sp = nullptr;  // where its registers were saved
#else
  ucontext_t ctx{};
#endif
};

// Makes `f` start entry() on [stack, stack + size) at the next switch to
// it. entry must never return (it switches away for good instead).
void fiber_start(Fiber& f, void* stack, size_t size, void (*entry)());

// Saves the running thread in `from` and resumes `to`; returns when
// something switches back to `from`.
void fiber_switch(Fiber& from, Fiber& to);

}  // namespace ulnic::fm
