// NS16550A UART of QEMU's virt machine (0x1000_0000): the serial log.
#pragma once

#include <stddef.h>
#include <stdint.h>

namespace hal::uart {

constexpr uintptr_t kBase = 0x1000'0000;

void init();
void putc(char c);
void write(const char* s, size_t n);

}  // namespace hal::uart
