// Latency breakdowns (ulnic/trace.h): arming, the registry of open Nics,
// and the NIC clock's offset from CLOCK_MONOTONIC.
#include "ulnic/trace.h"

#include <time.h>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <type_traits>
#include <vector>

#include "pin.h"
#include "ulnic/nic.h"

namespace ulnic::trace {
namespace {

std::atomic<bool> g_armed{false};

// The open Nics (read_all). The list lives while a Nic is open: a Nic that a
// static object owns (a program's global endpoint) closes during exit,
// after a static list of this file might be gone (ASan found ~Nic erasing
// itself from a destroyed vector at exit), and a list never freed leaks
// whenever a library that contains this file is unloaded (the libfabric
// provider: LSan, after libfabric dlcloses it at exit). The mutex is
// constant-initialized and trivially destructible: usable during exit.
std::mutex g_nics_mu;
static_assert(std::is_trivially_destructible_v<std::mutex>);
std::vector<const Nic*>* g_nics = nullptr;  // guarded by g_nics_mu; null while none is open

constexpr int64_t kNsPerTick = 100;  // mtime runs at 10 MHz (hal/clint.h)

}  // namespace

void arm() { g_armed.store(true, std::memory_order_relaxed); }
bool armed() { return g_armed.load(std::memory_order_relaxed); }
bool take_arming() { return g_armed.exchange(false, std::memory_order_relaxed); }

void register_nic(const Nic* nic) {
  std::lock_guard lock(g_nics_mu);
  if (!g_nics) g_nics = new std::vector<const Nic*>;
  g_nics->push_back(nic);
}

void unregister_nic(const Nic* nic) {
  std::lock_guard lock(g_nics_mu);
  if (!g_nics) return;
  std::erase(*g_nics, nic);
  if (g_nics->empty()) {
    delete g_nics;
    g_nics = nullptr;
  }
}

std::vector<Stamps> read_all() {
  std::lock_guard lock(g_nics_mu);
  std::vector<Stamps> out;
  if (g_nics)
    for (const Nic* n : *g_nics) out.push_back(Stamps{n->node(), n->slot(), n->trace_stamps()});
  return out;
}

int64_t monotonic_ns() {
  timespec ts;
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

int64_t host_ns(const ClockSync& c, uint64_t nic_ticks) { return int64_t(nic_ticks) * kNsPerTick - c.offset_ns; }

// NTP's estimate: a NOP stamped by the NIC at `seen` between a post at t0
// and its completion at t1 puts the NIC's clock at seen when the host's read
// (t0 + t1) / 2, within half the round trip. The shortest round trip wins.
Result<ClockSync> sync_clock(Nic& nic, int samples) {
  if (nic.in_flight() != 0) return fail("sync_clock: descriptors in flight");
  ClockSync best{0, INT64_MAX};
  const detail::AwayFromNic away;
  for (int i = 0; i < samples; ++i) {
    abi::SqEntry* e = nic.next_sqe();
    if (!e) return fail("sync_clock: send queue full");
    e->opcode = abi::kOpNop;
    e->flags = abi::kSqTrace;
    e->user_data = uint64_t(i);
    const uint64_t before = nic.trace_stamps().tx_seq;
    const int64_t t0 = monotonic_ns();
    nic.submit();
    abi::CqEntry c;
    while (!nic.poll(c)) {
    }
    const int64_t t1 = monotonic_ns();
    if (c.status != abi::kCqOk) return fail("sync_clock: the NIC refused a traced NOP");
    const abi::SlotTrace s = nic.trace_stamps();
    if (s.tx_seq != before + 1) return fail("sync_clock: the NIC did not stamp the NOP (old firmware?)");
    const int64_t half = (t1 - t0) / 2;
    if (half < best.error_ns) best = ClockSync{int64_t(s.tx_seen) * kNsPerTick - (t0 + half), half};
  }
  return best;
}

}  // namespace ulnic::trace
