#include "core/boot_config.h"

#include "ulnic/abi/fabric.h"

namespace core::boot_config {
namespace abi = ulnic::abi;

namespace {

void defaults(Config& c) {
  c = Config{};
  c.switch_port = abi::kNoSwitch;
  c.heartbeat_us = kDefaultHeartbeatUs;
  c.cluster[0] = '\0';
}

template <class T>
T clamp(T v, T lo, T hi) {
  return v < lo ? lo : v > hi ? hi : v;
}

}  // namespace

abi::BootConfigVerdict parse(const abi::BootConfig& raw, Config& out) {
  defaults(out);
  if (raw.magic != abi::kBootConfigMagic) return abi::kBootConfigMissing;
  if (raw.abi_version != ULNIC_ABI_VERSION || raw.size != sizeof(abi::BootConfig)) return abi::kBootConfigBadAbi;
  out.node_id = raw.node_id < abi::kMaxNodes ? raw.node_id : 0;
  out.num_nodes = raw.num_nodes <= abi::kMaxNodes ? raw.num_nodes : 0;
  out.flags = raw.flags;
  out.num_slots = raw.num_slots <= abi::kMaxSlots ? raw.num_slots : abi::kMaxSlots;
  out.flash_seq = raw.flash_seq;
  out.slot_size = raw.slot_size;
  out.fabric_size = raw.fabric_size;
  out.heartbeat_us = raw.heartbeat_us ? clamp(raw.heartbeat_us, kMinHeartbeatUs, kMaxHeartbeatUs) : kDefaultHeartbeatUs;
  for (size_t i = 0; i < sizeof out.cluster; ++i) out.cluster[i] = raw.cluster[i];
  out.cluster[sizeof out.cluster - 1] = '\0';
  // The ring geometry must be self-consistent and fit the fabric BAR, or the
  // NIC runs without a fabric rather than writing outside it.
  bool geometry_ok = raw.fabric_ports >= 1 && raw.fabric_ports <= abi::kMaxPorts &&
                     abi::is_ring_capacity(raw.ring_capacity) && raw.ring_capacity <= 1024 &&
                     raw.ring_stride == abi::ring_stride(raw.ring_capacity) &&
                     raw.rings_offset == abi::rings_offset(raw.fabric_ports) &&
                     abi::fabric_bytes(raw.fabric_ports, raw.ring_capacity) <= raw.fabric_size &&
                     (raw.switch_port == abi::kNoSwitch || raw.switch_port == raw.fabric_ports - 1);
  out.test_rx_drop = raw.test_rx_drop < 65536 ? raw.test_rx_drop : 65535;
  out.test_seed = raw.test_seed;
  if (geometry_ok) {
    out.fabric_ports = raw.fabric_ports;
    out.switch_port = raw.switch_port;
    out.ring_capacity = raw.ring_capacity;
    out.ring_stride = raw.ring_stride;
    out.rings_offset = raw.rings_offset;
  }
  return abi::kBootConfigOk;
}

abi::BootConfigVerdict load(Config& out) {
  const auto& raw = *reinterpret_cast<const abi::BootConfig*>(abi::kSramBase + abi::kBootConfigOffset);
  return parse(raw, out);
}

}  // namespace core::boot_config
