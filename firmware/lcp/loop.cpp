#include "lcp/loop.h"

#include "core/cost.h"
#include "core/log.h"
#include "core/status.h"
#include "hal/clint.h"
#include "hal/cpu.h"
#include "hal/imsic.h"
#include "lcp/mail.h"
#include "lcp/remote.h"
#include "lcp/vi.h"
#include "link/link.h"
#include "ulnic/abi/wake.h"

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
  core::status::put(b.counters[abi::kCtrLinkPlaced], l.placed);
  core::status::put(b.counters[abi::kCtrLinkHeld], l.held);
  core::status::put(b.counters[abi::kCtrLinkSacked], l.sacked);
  link::publish_link_status();
}
}  // namespace

void loop_init(LoopState& s, const core::boot_config::Config& cfg, uint64_t now) {
  s.heartbeat_ticks = hal::clint::us_to_ticks(cfg.heartbeat_us);
  s.next_refresh = s.last_refresh = now;
  s.run_ticks = 0;
  s.last_work = s.last_yield = s.last_outside = s.last_pass = now;
  s.epochs[0] = s.epochs[1] = GapEpoch{};
  s.epoch_start = now;
  s.spin_ticks = hal::clint::us_to_ticks(kIdleSpinUs);
  s.timer_at = ~0ull;
}

uint64_t spin_window(const GapEpoch& now, const GapEpoch& last) {
  const uint32_t short_gaps = now.short_gaps + last.short_gaps;
  if (short_gaps < 2 || short_gaps < now.long_gaps + last.long_gaps) return hal::clint::us_to_ticks(kIdleSpinUs);
  const uint64_t longest = now.longest_short > last.longest_short ? now.longest_short : last.longest_short;
  const uint64_t w = 2 * longest, lo = hal::clint::us_to_ticks(kConversationSpinUs),
                 hi = hal::clint::us_to_ticks(kMaxSpinUs);
  return w < lo ? lo : w > hi ? hi : w;
}

void note_outside_work(LoopState& s, uint64_t now) {
  const uint64_t gap = now - s.last_outside;
  s.last_outside = now;
  // Outside work on passes a few microseconds apart is one burst, not a gap
  // (a round trip's gaps here are 10-100 us: a ping-pong answers in ~30).
  if (gap < hal::clint::us_to_ticks(kStallUs)) return;
  const uint64_t epoch = hal::clint::us_to_ticks(kGapEpochUs);
  if (now - s.epoch_start >= epoch) {
    // A new epoch; after a pause longer than one, the last is empty too.
    s.epochs[1] = now - s.epoch_start < 2 * epoch ? s.epochs[0] : GapEpoch{};
    s.epochs[0] = GapEpoch{};
    s.epoch_start = now;
  }
  GapEpoch& e = s.epochs[0];
  if (gap <= hal::clint::us_to_ticks(kMaxSpinUs)) {
    ++e.short_gaps;
    if (gap > e.longest_short) e.longest_short = gap;
  } else {
    ++e.long_gaps;
  }
  s.spin_ticks = spin_window(s.epochs[0], s.epochs[1]);
}

namespace {
// Doorbell `vector` was rung (an MSI, or the wake plugin saw its eventfd).
void rung(LoopState& s, uint32_t vector) {
  core::status::count(abi::kCtrExtWakeups);
  if (s.slots && vector >= abi::kVectorSlotBase && vector < abi::kVectorSlotBase + abi::kMaxSlots)
    slot_wake(*s.slots, vector - abi::kVectorSlotBase);
}

// Sleeps in the wake plugin (abi/wake.h) until a doorbell or `deadline`:
// true if the plugin took the sleep (`vectors`: the ones rung meanwhile),
// false if no plugin did (the caller sleeps in WFI instead).
bool plugin_sleep(uint64_t now, uint64_t deadline, uint64_t& vectors) {
  auto& w = *reinterpret_cast<abi::WakeBlock*>(abi::kSramBase + abi::kWakeOffset);
  const uint64_t seq = w.fw_seq + 1;
  __atomic_store_n(&w.sleep_us, deadline > now ? hal::clint::ticks_to_us(deadline - now) : 0, __ATOMIC_RELAXED);
  __atomic_store_n(&w.fw_seq, seq, __ATOMIC_RELEASE);
#ifdef __riscv  // (the fuzz build runs this code on the host: no plugin there)
  // The plugin runs before this instruction, in this thread: the memory
  // clobber keeps the stores above before it and the loads below after it.
  asm volatile("slti zero, zero, %0" ::"i"(abi::kMarkSleep) : "memory");
#endif
  if (__atomic_load_n(&w.plugin_seq, __ATOMIC_ACQUIRE) != seq) return false;
  vectors = __atomic_load_n(&w.woke, __ATOMIC_RELAXED);
  return true;
}
}  // namespace

bool drain_interrupts(LoopState& s) {
  bool any = false;
  // Identity = MSI-X vector + 1 (identity 0 does not exist in the IMSIC).
  for (uint32_t id; (id = hal::imsic::claim()) != 0;) {
    any = true;
    rung(s, id - 1);
  }
  return any;
}

bool loop_pass(LoopState& s, uint64_t now) {
  core::status::count(abi::kCtrLoopIterations);
  const uint64_t since = now - s.last_pass;
  if (since > hal::clint::us_to_ticks(kStallUs)) {  // see kStallUs
    s.last_work += since;
    s.last_yield += since;
  }
  s.last_pass = now;
  bool outside = drain_interrupts(s);
  if (s.control) outside |= control_poll(*s.control, *s.slots);
  if (s.control) outside |= mail_poll();
  outside |= link::poll_rx(now);
  // Verdicts the link had no room for go first: new data would take each
  // place an ACK frees, and a peer's operations wait for the verdicts.
  bool worked = s.slots && remote_poll(*s.slots);
  if (s.slots) outside |= slots_service(*s.slots);
  if (s.slots) worked |= vi_poll(*s.slots, now);
  if (s.slots) worked |= remote_timers(now);
  worked |= link::poll_timers(now);
  if (s.slots) worked |= slots_ring_hosts(*s.slots, now);
  if (outside) note_outside_work(s, now);
  worked |= outside;
  if (now >= s.next_refresh) {
    core::status::refresh(now);
    publish_link_counters();
    core::status::put(core::status::block().counters[abi::kCtrSpinWindowUs], hal::clint::ticks_to_us(s.spin_ticks));
    const uint64_t step = now - s.last_refresh, step_max = kRunStepHeartbeats * s.heartbeat_ticks;
    s.run_ticks += step < step_max ? step : step_max;
    s.last_refresh = now;
    if (s.slots) slots_publish_run_time(*s.slots, hal::clint::ticks_to_us(s.run_ticks));
    s.next_refresh = now + s.heartbeat_ticks;
  }
  if (worked) s.last_work = now;
  return worked;
}

bool loop_idle(LoopState& s, uint64_t now) {
  if (now - s.last_work < s.spin_ticks) return false;
  if (s.slots && slots_busy(*s.slots)) return false;  // a slot feeds the link or awaits verdicts
  if (link::receiving(now, hal::clint::us_to_ticks(kStreamSpinUs))) return false;
  if (s.control && s.control->cmds.available()) return false;
  uint64_t deadline = s.next_refresh;
  if (link::busy()) {
    // Retransmission and ACK timers run on the CLINT; wake for the earliest.
    uint64_t d = link::next_deadline();
    if (d < deadline) deadline = d;
    if (deadline <= now) return false;
  }
  // Arrivals a sleeper waits to be rung for in a batch: no more come now.
  if (s.slots) slots_ring_deferred(*s.slots);
  // Every slot's process must ring from now on; a descriptor published
  // meanwhile keeps us up.
  if (s.slots && !slots_prepare_sleep(*s.slots)) return false;
  if (!link::prepare_sleep()) {  // a packet arrived meanwhile
    if (s.slots) slots_woke(*s.slots);
    return false;
  }
  const uint64_t slept_at = hal::clint::now();
  // The wake plugin's sleep first: a doorbell rung since the slots went
  // dormant is still in its eventfd, and the plugin returns at once.
  uint64_t vectors = 0;
  const bool plugin = plugin_sleep(slept_at, deadline, vectors);
  if (plugin) {
    for (uint32_t v = 0; v < 64; ++v)
      if (vectors >> v & 1) rung(s, v);
  } else {
    // mtimecmp is written only when the deadline moves: under TCG each write
    // re-arms a QEMU timer and wakes QEMU's main loop (an eventfd write and a
    // contended global lock per sleep, measured, issue 19).
    if (deadline != s.timer_at) {
      hal::clint::set_deadline(deadline);
      s.timer_at = deadline;
    }
    HAL_CSR_SET(mie, hal::kMieMTIE);
    // A deadline already past, or an MSI that arrived since the last claim,
    // leaves an interrupt pending and WFI returns at once: no lost wake-up.
    hal::wait_for_interrupt();
    HAL_CSR_CLEAR(mie, hal::kMieMTIE);  // the timer stays set; only the wake-up is masked
  }
  const uint64_t woke = hal::clint::now();
  // Both counted on waking, side by side: a reader of the status block
  // mid-sleep sees neither, so wfi == wake_sleeps holds between sleeps.
  core::status::count(abi::kCtrWfi);
  if (plugin) core::status::count(abi::kCtrWakeSleeps);
  // Woken a second or more past the timer: the host did not run this NIC
  // (its peers may have given up on it meanwhile; board/node.h, nic_priority).
  if (int64_t(woke - deadline) > int64_t(hal::clint::us_to_ticks(kOversleptUs)))
    core::log("loop: woke %lu ms after its timer (slept %lu ms): the host did not run this NIC\n",
              (unsigned long)(hal::clint::ticks_to_us(woke - deadline) / 1000),
              (unsigned long)(hal::clint::ticks_to_us(woke - slept_at) / 1000));
  if (woke >= deadline) core::status::count(abi::kCtrTimerWakeups);
  link::woke();
  if (s.slots) slots_woke(*s.slots);
  s.last_pass = woke;
  // A plugin sleep that ended early with nothing rung (its limit, kMaxWakeSleepUs)
  // is no work: the NIC goes back to sleep without a spin window.
  if (!plugin || vectors || woke >= deadline) s.last_work = woke;
  return true;
}

void loop_yield(LoopState& s, uint64_t now) {
  const uint64_t every = hal::clint::us_to_ticks(kYieldUs);
  if (now - s.last_work < every || now - s.last_yield < every) return;
  s.last_yield = now;
  // No handshake, so no memory clobber: the cost markers' instruction serves.
  core::cost::mark<abi::kMarkYield>();
}

void run(LoopState& s) {
  for (;;) {
    uint64_t now = hal::clint::now();
    if (!loop_pass(s, now) && !loop_idle(s, now)) loop_yield(s, now);
  }
}

}  // namespace lcp
