// The LANai-style event loop of the NIC control program (DESIGN §8). Each
// pass runs every work source for a bounded step: pending interrupts, the
// control queue, the fabric, then the send-queue scan over every slot; when
// nothing happened for the spin window the NIC marks every slot dormant
// (its process must ring) and sleeps in WFI until its next deadline or a
// doorbell interrupt (MSI through the IMSIC).
#pragma once

#include <stdint.h>

#include "core/boot_config.h"
#include "lcp/control.h"
#include "lcp/slots.h"

namespace lcp {

// How long the loop keeps polling after the last useful work before it
// sleeps: at least kIdleSpinUs (DESIGN §7.5, a spinning vCPU eats one of our
// two cores), and through the gaps of the conversation going on, so that
// the next message of a round trip finds its NIC polling. Waking a NIC that
// sleeps goes through QEMU's main loop and costs 100-300 us here (measured,
// issue 19: doorbell eventfd -> main loop -> MSI -> vCPU), where a polling
// NIC sees a descriptor in about a microsecond.
//
// The loop keeps, for this and the last kGapEpochUs, the gaps between
// bursts of outside work (descriptors, packets, control commands): how many
// were at most kMaxSpinUs ("short") and how many longer, and the longest
// short one. While the short ones are at least two and no fewer than the
// long ones (a conversation), the window is twice the longest short gap,
// between kConversationSpinUs and kMaxSpinUs: while the conversation goes
// on its next message comes within the window anyway, so a wide window costs
// one window at its end, where one too narrow costs a wake-up in the middle
// (a ping-pong here pauses ~500 us every millisecond or two, host
// scheduling: a memory of the last few gaps forgot those pauses and the NIC
// slept through every one of them). Otherwise -- idle, or peers that keep
// it waiting longer than kMaxSpinUs, where spinning would cost a core and
// save little -- the window is kIdleSpinUs.
//
// kMaxSpinUs is about what a wake-up costs: spinning longer than a wake-up
// costs can save at most that wake-up, and a spin of at most that much
// costs at most twice what sleeping at once would have (the classic
// spin-then-block bound). It was 2 ms: a lossy link's retransmissions (1 ms
// RTO) then looked like a conversation to both NICs, both vCPUs spun
// through every timeout, and the switch and the processes were left
// without a core -- 10 000 puts through 30% loss took 38-47 s instead of
// 18 (20.7 s with 300 us), and 100 000 over a faulty UDP bridge outlasted
// their test. Ping-pong medians did not move (VMMC and AM RTT/2 ~27 us
// with 300, 500 and 2000 us, two rounds each: a round trip's gaps are far
// shorter).
constexpr uint64_t kIdleSpinUs = 50;
constexpr uint64_t kConversationSpinUs = 200;
constexpr uint64_t kMaxSpinUs = 300;
constexpr uint64_t kGapEpochUs = 20'000;
// A pass that idles takes about a microsecond; one that starts this long
// after the previous one began means that pass worked long, or the vCPU was
// off the host's CPU meanwhile (two cores, four parties): either way the time
// was not spent idle, and the spin window does not count it.
constexpr uint64_t kStallUs = 10;
// ... and after the last packet that arrived: a stream's packets come in
// bursts, and a NIC that falls asleep between them costs its sender a
// doorbell (a device write that takes QEMU's global lock, tens of
// microseconds) and the stream a wake-up.
constexpr uint64_t kStreamSpinUs = 500;
// A NIC that polls without finding work (its spin window, a full ring
// toward a peer, a stream's gaps) gives the host CPU away every this much
// of its own time (abi/wake.h, kMarkYield): a peer NIC or a process that
// shares its CPU runs then, not when the scheduler next preempts the NIC.
// Two NICs on one CPU streaming to each other otherwise took turns of a
// whole scheduler slice, each spinning most of its turn on a ring the other
// had to empty (VMMC 1 MiB one-way, both QEMUs on one CPU: 396 MB/s; 1,070-
// 1,816 with the yields; 2,350 on two CPUs). Alone on its CPU a yield is
// one system call (~1.2 us here) per this much polling.
constexpr uint64_t kYieldUs = 20;
// The running time published to the slots (SlotNicWords.run_us) grows at
// each status refresh by the time since the last one, at most this many
// heartbeats: a NIC the host left unscheduled for seconds counts one step,
// so a host waiting on it does not judge it by a pause it could not work in.
constexpr uint64_t kRunStepHeartbeats = 2;
// A wake-up this late past the NIC's own timer is logged: the host left the
// NIC's vCPU unscheduled (board/node.h, nic_priority).
constexpr uint64_t kOversleptUs = 1'000'000;

// The gaps between outside work seen in one epoch (kGapEpochUs).
struct GapEpoch {
  uint64_t longest_short;    // ticks: the longest gap of at most kMaxSpinUs
  uint32_t short_gaps, long_gaps;
};

struct LoopState {
  uint64_t heartbeat_ticks;  // status refresh period
  uint64_t next_refresh;     // mtime of the next status refresh
  uint64_t last_refresh;     // mtime of the last one
  uint64_t run_ticks;        // the NIC's running time (SlotNicWords.run_us): refresh steps, each capped
  uint64_t last_work;        // mtime of the last pass that did work (stalls added)
  uint64_t last_yield;       // ... of the last yield (stalls added)
  uint64_t last_pass;        // mtime the last pass began
  uint64_t last_outside;     // ... that took work from outside (not a timer)
  GapEpoch epochs[2];        // gaps of this epoch and of the last one
  uint64_t epoch_start;      // mtime this epoch began
  uint64_t spin_ticks;       // the spin window now (spin_window of the epochs)
  uint64_t timer_at;         // mtimecmp as last written (~0: never)
  SlotTable* slots;          // null: no slot service (unit tests)
  Control* control;          // null: no control queue (unit tests)
};

// The spin window for the gaps of two epochs (ticks; see kIdleSpinUs).
uint64_t spin_window(const GapEpoch& now, const GapEpoch& last);
// Outside work came at `now`: learn the gap since the last.
void note_outside_work(LoopState& s, uint64_t now);

void loop_init(LoopState& s, const core::boot_config::Config& cfg, uint64_t now);
// One pass: poll sources, refresh status when due. Returns true if it did work.
bool loop_pass(LoopState& s, uint64_t now);
// Sleeps until the next deadline or interrupt if idle long enough; returns
// true if it slept.
bool loop_idle(LoopState& s, uint64_t now);
// After a pass without work that did not sleep: yields the host CPU if the
// NIC has polled kYieldUs since its last work and its last yield.
void loop_yield(LoopState& s, uint64_t now);
// Claims pending doorbell interrupts and wakes the slots they name.
bool drain_interrupts(LoopState& s);
[[noreturn]] void run(LoopState& s);

}  // namespace lcp
