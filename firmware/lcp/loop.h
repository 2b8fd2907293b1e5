// The LANai-style event loop of the NIC control program (DESIGN §8). Each
// pass runs every work source for a bounded step: control queue, then the
// send-queue scan over awake slots, then pending interrupts; when nothing is
// awake and nothing happened for kIdleSpinUs the NIC sleeps in WFI until its
// next deadline or a doorbell interrupt (MSI through the IMSIC).
#pragma once

#include <stdint.h>

#include "core/boot_config.h"
#include "lcp/control.h"
#include "lcp/slots.h"

namespace lcp {

// How long the loop keeps polling after the last useful work before it
// sleeps. Short: DESIGN §7.5, a spinning vCPU eats one of our two cores.
constexpr uint64_t kIdleSpinUs = 50;
// ... and after the last packet that arrived: a stream's packets come in
// bursts, and a NIC that falls asleep between them costs its sender a
// doorbell (a device write that takes QEMU's global lock, tens of
// microseconds) and the stream a wake-up.
constexpr uint64_t kStreamSpinUs = 500;

struct LoopState {
  uint64_t heartbeat_ticks;  // status refresh period
  uint64_t next_refresh;     // mtime of the next status refresh
  uint64_t last_work;        // mtime of the last pass that did work
  SlotTable* slots;          // null: no slot service (unit tests)
  Control* control;          // null: no control queue (unit tests)
};

void loop_init(LoopState& s, const core::boot_config::Config& cfg, uint64_t now);
// One pass: poll sources, refresh status when due. Returns true if it did work.
bool loop_pass(LoopState& s, uint64_t now);
// Sleeps until the next deadline or interrupt if idle long enough; returns
// true if it slept.
bool loop_idle(LoopState& s, uint64_t now);
// Claims pending doorbell interrupts and wakes the slots they name.
bool drain_interrupts(LoopState& s);
[[noreturn]] void run(LoopState& s);

}  // namespace lcp
