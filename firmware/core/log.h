// Serial log: printf-style formatting to the UART, no heap, no libc.
// Supports %s %c %d %i %u %x %p with optional '0', width and 'l'/'ll'.
#pragma once

#include <stdarg.h>
#include <stddef.h>

namespace core {

void log(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
void vlog(const char* fmt, va_list ap);
// Formats into buf (always NUL-terminated when cap > 0); returns chars written.
size_t format(char* buf, size_t cap, const char* fmt, ...) __attribute__((format(printf, 3, 4)));
size_t vformat(char* buf, size_t cap, const char* fmt, va_list ap);

}  // namespace core
