// The fake HAL of the firmware's fuzz build (tests/fuzz): a clock the fuzz
// target moves, no interrupts, a serial port that discards, and an empty
// build id. Everything else the firmware touches is memory: the SRAM the
// target maps at kSramBase, slot and fabric BARs it allocates.
#include <stdint.h>

#include "fw_host.h"
#include "hal/clint.h"
#include "hal/imsic.h"
#include "hal/uart.h"

// The linker script's build-id note bounds (core/status.cpp): one address,
// an empty note.
extern "C" const uint8_t __build_id_start[1] = {0};
__asm__(".globl __build_id_end\n.set __build_id_end, __build_id_start");

namespace fw_host {
uint64_t g_mtime = 1;
}

namespace hal::clint {
uint64_t now() { return fw_host::g_mtime; }
void set_deadline(uint64_t) {}
void clear_deadline() {}
bool deadline_passed() { return false; }
}  // namespace hal::clint

namespace hal::imsic {
void init(uint32_t) {}
uint32_t claim() { return 0; }
uint64_t pending() { return 0; }
}  // namespace hal::imsic

namespace hal::uart {
void init() {}
void putc(char) {}
void write(const char*, size_t) {}
}  // namespace hal::uart
