// Reads and validates the boot-config block the flasher left in SRAM. The
// firmware keeps a private copy: later writes to the block (a flash in
// progress) cannot change a running boot.
#pragma once

#include "ulnic/abi/boot_config.h"
#include "ulnic/abi/status.h"

namespace core::boot_config {

struct Config {
  uint32_t node_id;
  uint32_t num_nodes;
  uint32_t flags;
  uint32_t num_slots;
  uint64_t flash_seq;
  uint64_t slot_size;
  uint64_t fabric_size;
  uint32_t heartbeat_us;
  char cluster[32];
  uint32_t fabric_ports;     // 0: no ring matrix
  uint32_t switch_port;      // abi::kNoSwitch: direct rings
  uint32_t ring_capacity;
  uint64_t ring_stride;
  uint64_t rings_offset;
  uint32_t test_rx_drop;     // /65536 of arriving data packets dropped (tests)
  uint32_t test_seed;
};

// Defaults when the block is missing: node 0, no expectations about slots.
constexpr uint32_t kDefaultHeartbeatUs = 100'000;
constexpr uint32_t kMinHeartbeatUs = 1'000;
constexpr uint32_t kMaxHeartbeatUs = 10'000'000;

// Validates `raw` (untrusted bytes) into `out`; returns the verdict.
ulnic::abi::BootConfigVerdict parse(const ulnic::abi::BootConfig& raw, Config& out);
// parse() of the block in SRAM.
ulnic::abi::BootConfigVerdict load(Config& out);

}  // namespace core::boot_config
