// The node's SRAM file as the trusted tools see it: image and boot-config
// writer, status-block reader. Host programs never map it (DESIGN §3).
#pragma once

#include <string>
#include <vector>

#include "board/elf_image.h"
#include "ulnic/abi/boot_config.h"
#include "ulnic/abi/cost.h"
#include "ulnic/abi/wake.h"
#include "ulnic/abi/status.h"
#include "ulnic/util/mapping.h"

namespace ulnic::board {

class SramFile {
 public:
  // Creates (or truncates) a zeroed SRAM file of abi::kSramSize bytes.
  static Result<SramFile> create(const std::string& path);
  static Result<SramFile> open(const std::string& path, bool writable);

  // Writes every PT_LOAD segment at its SRAM offset and zeroes its bss tail.
  void write_image(const FirmwareImage& img);
  void write_boot_config(const abi::BootConfig& cfg);
  abi::BootConfig boot_config() const;
  // A copy of the status block, re-read until the heartbeat is stable so the
  // fields belong together (the firmware may be writing while we read).
  abi::StatusBlock read_status() const;
  // Per-link state of the first `n` peers (shared/include/ulnic/abi/status.h).
  std::vector<abi::LinkStatus> read_links(uint32_t n) const;
  // The cost plugin's block (zero without --cost), re-read until its
  // sequence number is even and unchanged.
  abi::CostBlock read_cost() const;
  // The wake plugin's words (abi/wake.h; zero without the plugin).
  abi::WakeBlock read_wake() const;
  // The copy engine's words (abi/wake.h; zero without the plugin).
  abi::CopyBlock read_copy() const;

  uint8_t* at(uint64_t offset) const { return map_.data() + offset; }

 private:
  Mapping map_;
};

}  // namespace ulnic::board
