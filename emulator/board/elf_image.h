// Firmware images: a RISC-V 64 ELF checked against the NIC's SRAM layout
// (shared/include/ulnic/abi/sram.h) before a byte of it is written anywhere.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "ulnic/util/result.h"

namespace ulnic::board {

struct Segment {
  uint64_t addr = 0;           // NIC physical address (p_paddr)
  std::vector<uint8_t> data;   // file bytes (p_filesz)
  uint64_t memsz = 0;          // bytes in SRAM; the tail past data is zero
  bool executable = false;     // PF_X: QEMU may hold translations of it
};

struct FirmwareImage {
  std::string path;
  uint64_t entry = 0;
  std::vector<Segment> segments;  // sorted by address, non-overlapping
  uint64_t end = 0;               // highest address + 1 over all segments
  std::string build_id;           // hex of NT_GNU_BUILD_ID, "" if none
};

// Largest ELF file we read at all (the image itself is capped by SRAM).
constexpr uint64_t kMaxElfFileBytes = 64ull << 20;

// Validates and extracts an image from ELF bytes. `name` is used in messages.
Result<FirmwareImage> parse_elf(std::span<const uint8_t> bytes, const std::string& name);
Result<FirmwareImage> load_elf_file(const std::string& path);

}  // namespace ulnic::board
