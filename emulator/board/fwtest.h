// Runs one firmware test image on a private board, the same board a node
// gets (slots, fabric, memory map), with the serial log on our stdout. The
// image ends the run through virt's test finisher; its exit status is ours.
#pragma once

#include <chrono>
#include <string>

#include "board/launcher.h"

namespace ulnic::board {

struct FwTestOptions {
  std::string elf;
  BoardSpec board;                      // node, slots, extra args
  bool fabric = true;
  uint32_t fabric_ports = 2;            // a small ring matrix
  std::chrono::milliseconds timeout{120'000};
};

// Exit status of the test (0 = all passed), or an error if it could not run
// or did not finish in time.
Result<int> run_firmware_test(const FwTestOptions& opts);

}  // namespace ulnic::board
