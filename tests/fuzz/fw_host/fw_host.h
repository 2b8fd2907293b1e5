// The firmware's fuzz build (tests/fuzz): what the fuzz target shares with
// the fake HAL (fake_hal.cpp).
#pragma once

#include <stdint.h>

namespace fw_host {

// mtime as hal::clint::now() reports it (10 MHz ticks); the target moves it.
extern uint64_t g_mtime;

}  // namespace fw_host
