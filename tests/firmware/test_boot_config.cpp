// Boot-config validation (core/boot_config.h): the block is read from SRAM
// where a bad flasher or a stale image may have left anything.
#include <string.h>

#include "core/boot_config.h"
#include "harness.h"
#include "ulnic/abi/fabric.h"

namespace abi = ulnic::abi;
using core::boot_config::Config;

namespace {
abi::BootConfig good() {
  abi::BootConfig b{};
  b.magic = abi::kBootConfigMagic;
  b.abi_version = ULNIC_ABI_VERSION;
  b.size = sizeof b;
  b.node_id = 3;
  b.num_nodes = 4;
  b.num_slots = 8;
  b.heartbeat_us = 50'000;
  b.flash_seq = 9;
  memcpy(b.cluster, "lab", 4);
  return b;
}
}  // namespace

FW_TEST(accepts_a_good_block) {
  Config c;
  abi::BootConfig b = good();
  CHECK_EQ(core::boot_config::parse(b, c), abi::kBootConfigOk);
  EXPECT_EQ(c.node_id, 3u);
  EXPECT_EQ(c.num_nodes, 4u);
  EXPECT_EQ(c.flash_seq, 9u);
  EXPECT_EQ(c.heartbeat_us, 50'000u);
  EXPECT(strcmp(c.cluster, "lab") == 0);
}

FW_TEST(missing_block_gives_defaults) {
  Config c;
  abi::BootConfig b{};
  EXPECT_EQ(core::boot_config::parse(b, c), abi::kBootConfigMissing);
  EXPECT_EQ(c.node_id, 0u);
  EXPECT_EQ(c.heartbeat_us, core::boot_config::kDefaultHeartbeatUs);
}

FW_TEST(other_abi_or_size_is_refused) {
  Config c;
  abi::BootConfig b = good();
  b.abi_version = ULNIC_ABI_VERSION + 1;
  EXPECT_EQ(core::boot_config::parse(b, c), abi::kBootConfigBadAbi);
  b = good();
  b.size = 12;
  EXPECT_EQ(core::boot_config::parse(b, c), abi::kBootConfigBadAbi);
  EXPECT_EQ(c.node_id, 0u);  // defaults, not half-parsed values
}

FW_TEST(out_of_range_fields_are_clamped) {
  Config c;
  abi::BootConfig b = good();
  b.node_id = 1000;
  b.num_nodes = 1000;
  b.num_slots = 99;
  b.heartbeat_us = 1;
  memset(b.cluster, 'x', sizeof b.cluster);  // no terminator
  CHECK_EQ(core::boot_config::parse(b, c), abi::kBootConfigOk);
  EXPECT_EQ(c.node_id, 0u);
  EXPECT_EQ(c.num_nodes, 0u);
  EXPECT_EQ(c.num_slots, abi::kMaxSlots);
  EXPECT_EQ(c.heartbeat_us, core::boot_config::kMinHeartbeatUs);
  EXPECT_EQ(c.cluster[sizeof c.cluster - 1], '\0');
  b.heartbeat_us = 0xffff'ffff;
  core::boot_config::parse(b, c);
  EXPECT_EQ(c.heartbeat_us, core::boot_config::kMaxHeartbeatUs);
}

FW_TEST(the_runner_wrote_a_valid_block_into_sram) {
  Config c;
  EXPECT_EQ(core::boot_config::load(c), abi::kBootConfigOk);
}

FW_TEST(a_consistent_fabric_geometry_is_taken) {
  Config c;
  abi::BootConfig b = good();
  b.fabric_ports = 5;
  b.switch_port = 4;
  b.ring_capacity = 16;
  b.ring_stride = abi::ring_stride(16);
  b.rings_offset = abi::rings_offset(5);
  b.fabric_size = abi::fabric_bar_size(5, 16);
  CHECK_EQ(core::boot_config::parse(b, c), abi::kBootConfigOk);
  EXPECT_EQ(c.fabric_ports, 5u);
  EXPECT_EQ(c.switch_port, 4u);
  EXPECT_EQ(c.ring_stride, abi::ring_stride(16));
}

FW_TEST(an_inconsistent_fabric_geometry_means_no_fabric) {
  Config c;
  abi::BootConfig b = good();
  b.fabric_ports = 5;
  b.switch_port = abi::kNoSwitch;
  b.ring_capacity = 16;
  b.ring_stride = abi::ring_stride(16) - 64;  // rings would overlap
  b.rings_offset = abi::rings_offset(5);
  b.fabric_size = abi::fabric_bar_size(5, 16);
  core::boot_config::parse(b, c);
  EXPECT_EQ(c.fabric_ports, 0u);
  b.ring_stride = abi::ring_stride(16);
  b.fabric_size = 1u << 20;  // rings past the end of the BAR
  core::boot_config::parse(b, c);
  EXPECT_EQ(c.fabric_ports, 0u);
  b.fabric_size = abi::fabric_bar_size(5, 16);
  b.switch_port = 2;  // the switch must be the last port
  core::boot_config::parse(b, c);
  EXPECT_EQ(c.fabric_ports, 0u);
  EXPECT_EQ(c.switch_port, abi::kNoSwitch);
}
