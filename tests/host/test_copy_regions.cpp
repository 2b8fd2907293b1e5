// The copy engine's check (emulator/wake/copy_regions.h): a copy's end is
// resolved only inside one region as the firmware published it and inside
// the plugin's own mapping of that region's file.
#include <gtest/gtest.h>

#include <vector>

#include "wake/copy_regions.h"

namespace uabi = ulnic::abi;
using ulnic::wake::Mapped;
using ulnic::wake::resolve;

namespace {

struct Regions {
  uabi::CopyRegion published[uabi::kCopyRegions] = {};
  Mapped mapped[uabi::kCopyRegions] = {};
  std::vector<uint8_t> slot0 = std::vector<uint8_t>(4096), fabric = std::vector<uint8_t>(8192);

  Regions() {
    published[0] = {0x4000'0000, 4096};
    mapped[0] = {slot0.data(), slot0.size()};
    published[uabi::kCopyFabricRegion] = {0x4'0000'0000, 8192};
    mapped[uabi::kCopyFabricRegion] = {fabric.data(), fabric.size()};
  }
  uint8_t* at(uint64_t addr, uint64_t n) const { return resolve(published, mapped, addr, n); }
};

}  // namespace

TEST(CopyRegions, ARangeInsideARegionIsTheSameOffsetInItsMapping) {
  Regions r;
  EXPECT_EQ(r.at(0x4000'0000, 4096), r.slot0.data());
  EXPECT_EQ(r.at(0x4000'0010, 16), r.slot0.data() + 16);
  EXPECT_EQ(r.at(0x4'0000'0000 + 4096, 4096), r.fabric.data() + 4096);
}

TEST(CopyRegions, ARangeThatRunsPastItsRegionOrStartsOutsideIsRefused) {
  Regions r;
  EXPECT_EQ(r.at(0x4000'0000, 4097), nullptr);
  EXPECT_EQ(r.at(0x4000'0fff, 2), nullptr);
  EXPECT_EQ(r.at(0x4000'1000, 1), nullptr);
  EXPECT_EQ(r.at(0x3fff'ffff, 2), nullptr);
  EXPECT_EQ(r.at(0x8000'0000, 64), nullptr);  // the SRAM is no region
  EXPECT_EQ(r.at(0, 1), nullptr);
}

TEST(CopyRegions, HugeLengthsAndAddressesDoNotWrapIntoARegion) {
  Regions r;
  EXPECT_EQ(r.at(0x4000'0010, ~uint64_t(0)), nullptr);
  EXPECT_EQ(r.at(0x4000'0010, ~uint64_t(0) - 0xf), nullptr);
  EXPECT_EQ(r.at(~uint64_t(0), 2), nullptr);
}

TEST(CopyRegions, AFirmwareThatPublishesMoreThanTheFileHoldsGetsOnlyTheFile) {
  Regions r;
  r.published[0].size = 1ull << 30;  // the firmware's word: not trusted past what we mapped
  EXPECT_EQ(r.at(0x4000'0000, 4096), r.slot0.data());
  EXPECT_EQ(r.at(0x4000'0000 + 4096, 1), nullptr);
  EXPECT_EQ(r.at(0x4000'0000, 4097), nullptr);
}

TEST(CopyRegions, ARegionWithoutABaseOrWithoutAMappingHoldsNothing) {
  Regions r;
  r.published[0].base = 0;
  EXPECT_EQ(r.at(0, 16), nullptr);
  EXPECT_EQ(r.at(0x4000'0000, 16), nullptr);
  Regions u;
  u.mapped[uabi::kCopyFabricRegion] = {};  // the plugin could not map the fabric's file
  EXPECT_EQ(u.at(0x4'0000'0000, 16), nullptr);
  EXPECT_EQ(u.at(0x4000'0000, 16), u.slot0.data());
}
