/* The firmware's freestanding subset of <string.h>, implemented in
 * firmware/core/mem.cpp. There is no libc on the NIC. */
#pragma once

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

void* memcpy(void* dst, const void* src, size_t n);
void* memmove(void* dst, const void* src, size_t n);
void* memset(void* dst, int c, size_t n);
int memcmp(const void* a, const void* b, size_t n);
size_t strlen(const char* s);
int strcmp(const char* a, const char* b);

#ifdef __cplusplus
}
#endif
