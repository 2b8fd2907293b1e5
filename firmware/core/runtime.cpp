// Minimal C++ runtime for the freestanding image: static constructors and
// the hooks the compiler may reference. No heap, no exceptions, no RTTI.
#include <stddef.h>

#include "hal/cpu.h"

extern "C" {
using InitFn = void (*)();
extern InitFn __init_array_start[];
extern InitFn __init_array_end[];

void ulnic_run_init_array() {
  for (InitFn* f = __init_array_start; f < __init_array_end; ++f) (*f)();
}

// A pure virtual call is a firmware bug: trap so it is recorded as a crash.
void __cxa_pure_virtual() { __builtin_trap(); }
}
