// Boot-config block: written into SRAM by the flasher (node start / flash)
// while the NIC is stopped; read-only for the firmware. It tells the firmware
// who it is; the firmware must survive a missing or garbled block (it then
// runs with defaults and says so in the status block).
#pragma once

#include "ulnic/abi/sram.h"

namespace ulnic::abi {

constexpr uint32_t kBootConfigMagic = fourcc('U', 'B', 'C', 'F');

enum BootFlags : uint32_t {
  kBootFlagVerbose = 1u << 0,  // chatty serial log
};

struct BootConfig {
  uint32_t magic;           // kBootConfigMagic
  uint32_t abi_version;     // ULNIC_ABI_VERSION
  uint32_t size;            // sizeof(BootConfig)
  uint32_t node_id;         // this NIC's index in its cluster (= fabric peer id)
  uint32_t num_nodes;       // cluster size known at boot (0 = unknown)
  uint32_t flags;           // BootFlags
  uint64_t flash_seq;       // incremented by every flash of this node
  uint64_t slot_size;       // bytes in each host slot BAR
  uint32_t num_slots;       // host slots attached to the board
  uint32_t heartbeat_us;    // status refresh period while idle
  uint64_t fabric_size;     // bytes in the fabric BAR (0 = no fabric)
  char cluster[32];         // NUL-terminated cluster name
  uint64_t flashed_unix_ns; // wall clock of the flash, for humans
  // Fabric geometry (shared/include/ulnic/abi/fabric.h); ports 0 = no rings.
  uint32_t fabric_ports;
  uint32_t switch_port;     // kNoSwitch: direct rings
  uint32_t ring_capacity;
  uint32_t pad0;
  uint64_t ring_stride;
  uint64_t rings_offset;
  // Test hook: the link drops this fraction (/65536) of arriving data
  // packets, seeded (reproducible); 0 in production.
  uint32_t test_rx_drop;
  uint32_t test_seed;
  uint8_t reserved[120];
};
ULNIC_ABI_CHECK_SIZE(BootConfig, 256);
ULNIC_ABI_CHECK_OFFSET(BootConfig, flash_seq, 24);
ULNIC_ABI_CHECK_OFFSET(BootConfig, slot_size, 32);
ULNIC_ABI_CHECK_OFFSET(BootConfig, num_slots, 40);
ULNIC_ABI_CHECK_OFFSET(BootConfig, fabric_size, 48);
ULNIC_ABI_CHECK_OFFSET(BootConfig, cluster, 56);
ULNIC_ABI_CHECK_OFFSET(BootConfig, flashed_unix_ns, 88);
ULNIC_ABI_CHECK_OFFSET(BootConfig, fabric_ports, 96);
ULNIC_ABI_CHECK_OFFSET(BootConfig, ring_stride, 112);
static_assert(sizeof(BootConfig) <= kBootConfigSize);

}  // namespace ulnic::abi
