// Starting and stopping a cluster's fabric server (emulator/fabric).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "util/result.h"

namespace ulnic::board {

// Makes sure the cluster's fabric server runs and listens for `node`;
// cleans up after a dead one if no node of the cluster still uses it.
Result<void> ensure_fabric(const std::string& cluster, uint32_t node, uint64_t size, uint32_t vectors,
                           std::vector<std::string>& notes);
void stop_fabric(const std::string& cluster);
// Once no node of the cluster is left: stops its fabric server and removes
// the cluster's directory. Returns whether it did.
bool retire_cluster_if_empty(const std::string& cluster);

}  // namespace ulnic::board
