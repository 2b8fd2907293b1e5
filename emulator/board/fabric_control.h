// Starting and stopping a cluster's fabric server (emulator/fabric).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ulnic/abi/fabric.h"
#include "ulnic/util/result.h"

namespace ulnic::board {

namespace abi = ulnic::abi;

struct FabricSpec {
  uint32_t ports = 16;           // ring-matrix ports: nodes (+1 with a switch)
  bool with_switch = false;
  uint32_t ring_capacity = 0;    // packets per ring (0: abi::default_ring_capacity(ports))
  uint32_t vectors = 16;         // MSI-X vectors per device
};

// Makes sure the cluster's fabric server runs and listens for `node`, and
// returns the fabric's geometry; cleans up after a dead server if no node of
// the cluster still uses it. A running fabric keeps its geometry: a node
// outside it is refused.
Result<abi::FabricHeader> ensure_fabric(const std::string& cluster, uint32_t node, const FabricSpec& spec,
                                        std::vector<std::string>& notes);
// The geometry of the cluster's running fabric.
Result<abi::FabricHeader> fabric_geometry(const std::string& cluster);
void stop_fabric(const std::string& cluster);
// Starts ulnic-switch on the cluster's fabric (made with a switch port).
// `faults` in ulnic-switch's syntax ("drop=0.3,corrupt=0.01,..."), `pcap` a
// capture file or "".
Result<void> start_switch(const std::string& cluster, const std::string& faults, const std::string& pcap,
                          const std::vector<std::string>& extra_args = {});
std::string switch_stats_path(const std::string& cluster);
// Once no node of the cluster is left: stops its fabric server and removes
// the cluster's directory. Returns whether it did.
bool retire_cluster_if_empty(const std::string& cluster);

}  // namespace ulnic::board
