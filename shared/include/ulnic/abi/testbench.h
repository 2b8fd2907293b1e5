// Test-bench contract between the firmware test runner (`ulnic fwtest`) and
// firmware tests: before booting a test image the runner stamps each host
// slot and the fabric memory with a signature, so a test can prove that it
// reached the right file through the right BAR. Not used in production.
#pragma once

#include "ulnic/abi/types.h"

namespace ulnic::abi {

struct TestbenchStamp {
  uint64_t magic;   // kSlotStampMagic or kFabricStampMagic
  uint32_t index;   // slot number (0 for the fabric)
  uint32_t check;   // ~index ^ low word of magic
};
ULNIC_ABI_CHECK_SIZE(TestbenchStamp, 16);

constexpr uint64_t kSlotStampMagic = 0x544f4c53434e4c55ull;    // "ULNCSLOT"
constexpr uint64_t kFabricStampMagic = 0x52424146434e4c55ull;  // "ULNCFABR"

constexpr TestbenchStamp make_stamp(uint64_t magic, uint32_t index) {
  return TestbenchStamp{magic, index, ~index ^ uint32_t(magic)};
}

}  // namespace ulnic::abi
