#include "lcp/loop.h"

#include "core/status.h"
#include "hal/clint.h"
#include "hal/cpu.h"

namespace lcp {
namespace abi = ulnic::abi;

void loop_init(LoopState& s, const core::boot_config::Config& cfg, uint64_t now) {
  s.heartbeat_ticks = hal::clint::us_to_ticks(cfg.heartbeat_us);
  s.next_refresh = now;
  s.last_work = now;
}

bool loop_pass(LoopState& s, uint64_t now) {
  core::status::count(abi::kCtrLoopIterations);
  bool worked = false;
  // Work sources (control queue, send-queue scan, fabric RX, timers) plug in
  // here as they are built; each returns whether it did anything.
  if (now >= s.next_refresh) {
    core::status::refresh(now);
    s.next_refresh = now + s.heartbeat_ticks;
  }
  if (worked) s.last_work = now;
  return worked;
}

bool loop_idle(LoopState& s, uint64_t now) {
  if (now - s.last_work < hal::clint::us_to_ticks(kIdleSpinUs)) return false;
  hal::clint::set_deadline(s.next_refresh);
  HAL_CSR_SET(mie, hal::kMieMTIE);
  core::status::count(abi::kCtrWfi);
  // Re-check after arming: a deadline already past makes MTIP pending and
  // WFI returns at once, so no wake-up is lost.
  hal::wait_for_interrupt();
  if (hal::clint::deadline_passed()) core::status::count(abi::kCtrTimerWakeups);
  hal::clint::clear_deadline();
  s.last_work = hal::clint::now();
  return true;
}

void run(const core::boot_config::Config& cfg) {
  LoopState s;
  loop_init(s, cfg, hal::clint::now());
  for (;;) {
    uint64_t now = hal::clint::now();
    if (!loop_pass(s, now)) loop_idle(s, now);
  }
}

}  // namespace lcp
