// Latency breakdowns: one message at a time, stamped at every hop a NIC
// sees (abi::SlotTrace), on one clock.
//
//   ulnic::trace::arm();                       // the next data descriptor is traced
//   vmmc_send(...) / VipPostSend(...) / AM_Request0(...) / FM_end_message(...)
//   ... once the message arrived: trace::read_all() in each process gives its
//   slot's stamps (the sender's: taken from the SQ, last packet in the fabric
//   ring; the receiver's: last packet taken, delivered)
//
// The firmware stamps in its clock (mtime ticks); sync_clock() measures that
// clock's offset from the host's CLOCK_MONOTONIC the way NTP does, over
// traced NOPs, and host_ns() converts a stamp.
#pragma once

#include <cstdint>
#include <vector>

#include "ulnic/abi/slot.h"
#include "ulnic/util/result.h"

namespace ulnic {

class Nic;

namespace trace {

// The next descriptor that sends data (kOpPut, kOpSend, kOpSendInline,
// kOpAmSend, kOpViPostSend) that any Nic of this process submits carries
// abi::kSqTrace; arming again before it went changes nothing.
void arm();
bool armed();

struct Stamps {
  uint32_t node = 0, slot = 0;
  abi::SlotTrace t{};
};
// A consistent copy of the stamps of every Nic this process has open.
std::vector<Stamps> read_all();

// The NIC's clock against CLOCK_MONOTONIC: host ns = nic ticks * 100 -
// offset_ns, within +- error_ns (half the shortest NOP round trip seen).
struct ClockSync {
  int64_t offset_ns = 0;
  int64_t error_ns = 0;
};
// Measures it over `samples` traced NOPs on `nic` (nothing else in flight).
Result<ClockSync> sync_clock(Nic& nic, int samples = 200);
// A stamp (mtime ticks) in CLOCK_MONOTONIC ns.
int64_t host_ns(const ClockSync& c, uint64_t nic_ticks);
// CLOCK_MONOTONIC now, in ns (what host_ns() compares with).
int64_t monotonic_ns();

// For the core: Nic keeps the registry of open Nics that read_all() walks.
void register_nic(const Nic* nic);
void unregister_nic(const Nic* nic);
// Takes the arming, if armed (one descriptor gets it).
bool take_arming();

}  // namespace trace
}  // namespace ulnic
