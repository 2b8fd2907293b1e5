// Host stand-in for firmware/core/copy.h in the firmware's fuzz build
// (tests/fuzz): the NIC's copy loop is RISC-V assembly; here it is memcpy,
// which ASan checks like every other access.
#pragma once

#include <stddef.h>
#include <string.h>

namespace core {

inline void copy_bytes(void* dst, const void* src, size_t n) { memcpy(dst, src, n); }

}  // namespace core
