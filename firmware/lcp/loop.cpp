#include "lcp/loop.h"

#include "core/status.h"
#include "hal/clint.h"
#include "hal/cpu.h"
#include "hal/imsic.h"
#include "lcp/mail.h"
#include "lcp/remote.h"
#include "lcp/vi.h"
#include "link/link.h"

namespace lcp {

namespace {
// The link's statistics, mirrored into the status block's counters.
void publish_link_counters() {
  const link::Stats& l = link::stats();
  abi::StatusBlock& b = core::status::block();
  core::status::put(b.counters[abi::kCtrLinkTxData], l.tx_data);
  core::status::put(b.counters[abi::kCtrLinkRxData], l.rx_data);
  core::status::put(b.counters[abi::kCtrLinkRetransmits], l.retransmits);
  core::status::put(b.counters[abi::kCtrLinkDuplicates], l.duplicates);
  core::status::put(b.counters[abi::kCtrLinkOutOfOrder], l.out_of_order);
  core::status::put(b.counters[abi::kCtrLinkBadPackets], l.bad_packets);
  core::status::put(b.counters[abi::kCtrLinkUnreachable], l.unreachable);
  core::status::put(b.counters[abi::kCtrLinkRestarts], l.restarts);
  link::publish_link_status();
}
}  // namespace

void loop_init(LoopState& s, const core::boot_config::Config& cfg, uint64_t now) {
  s.heartbeat_ticks = hal::clint::us_to_ticks(cfg.heartbeat_us);
  s.next_refresh = now;
  s.last_work = now;
}

bool drain_interrupts(LoopState& s) {
  bool any = false;
  // Identity = MSI-X vector + 1 (identity 0 does not exist in the IMSIC).
  for (uint32_t id; (id = hal::imsic::claim()) != 0;) {
    any = true;
    core::status::count(abi::kCtrExtWakeups);
    uint32_t vector = id - 1;
    if (s.slots && vector >= abi::kVectorSlotBase && vector < abi::kVectorSlotBase + abi::kMaxSlots)
      slot_wake(*s.slots, vector - abi::kVectorSlotBase);
  }
  return any;
}

bool loop_pass(LoopState& s, uint64_t now) {
  core::status::count(abi::kCtrLoopIterations);
  bool worked = drain_interrupts(s);
  if (s.control) worked |= control_poll(*s.control, *s.slots, now);
  if (s.control) worked |= mail_poll();
  worked |= link::poll_rx(now);
  // Verdicts the link had no room for go first: new data would take each
  // place an ACK frees, and a peer's operations wait for the verdicts.
  if (s.slots) worked |= remote_poll(*s.slots);
  if (s.slots) worked |= slots_service(*s.slots, now);
  if (s.slots) worked |= vi_poll(*s.slots, now);
  worked |= link::poll_timers(now);
  if (now >= s.next_refresh) {
    core::status::refresh(now);
    publish_link_counters();
    s.next_refresh = now + s.heartbeat_ticks;
  }
  if (worked) s.last_work = now;
  return worked;
}

bool loop_idle(LoopState& s, uint64_t now) {
  if (now - s.last_work < hal::clint::us_to_ticks(kIdleSpinUs)) return false;
  if (s.slots && slots_awake(*s.slots)) return false;  // still polling somebody
  if (link::receiving(now, hal::clint::us_to_ticks(kStreamSpinUs))) return false;
  if (s.control && s.control->cmds.available()) return false;
  uint64_t deadline = s.next_refresh;
  if (link::busy()) {
    // Retransmission and ACK timers run on the CLINT; wake for the earliest.
    uint64_t d = link::next_deadline();
    if (d < deadline) deadline = d;
    if (deadline <= now) return false;
  }
  if (!link::prepare_sleep()) return false;  // a packet arrived meanwhile
  hal::clint::set_deadline(deadline);
  HAL_CSR_SET(mie, hal::kMieMTIE);
  core::status::count(abi::kCtrWfi);
  // A deadline already past, or an MSI that arrived since the last claim,
  // leaves an interrupt pending and WFI returns at once: no lost wake-up.
  hal::wait_for_interrupt();
  if (hal::clint::deadline_passed()) core::status::count(abi::kCtrTimerWakeups);
  hal::clint::clear_deadline();
  link::woke();
  s.last_work = hal::clint::now();
  return true;
}

void run(LoopState& s) {
  for (;;) {
    uint64_t now = hal::clint::now();
    if (!loop_pass(s, now)) loop_idle(s, now);
  }
}

}  // namespace lcp
