// PCIe enumeration and board discovery against the real board: QEMU virt
// with 8 ivshmem-plain host slots and the ivshmem-doorbell fabric, each
// stamped by the runner (ulnic/abi/testbench.h).
#include "core/board.h"
#include "core/boot_config.h"
#include "hal/mmio.h"
#include "hal/pcie.h"
#include "harness.h"
#include "ulnic/abi/fabric.h"
#include "ulnic/abi/testbench.h"

namespace abi = ulnic::abi;
using core::board::Board;

namespace {

core::boot_config::Config config() {
  core::boot_config::Config c;
  core::boot_config::load(c);
  return c;
}

bool stamp_ok(uint64_t addr, uint64_t magic, uint32_t index) {
  auto want = abi::make_stamp(magic, index);
  auto* got = reinterpret_cast<const volatile abi::TestbenchStamp*>(addr);
  return got->magic == want.magic && got->index == want.index && got->check == want.check;
}

Board g_board;

}  // namespace

FW_TEST(boot_config_describes_the_test_board) {
  auto c = config();
  CHECK_EQ(core::boot_config::load(c), abi::kBootConfigOk);
  EXPECT_EQ(c.num_slots, 8u);
  EXPECT(c.fabric_size != 0);
}

FW_TEST(finds_every_slot_at_its_pinned_device) {
  core::board::discover(g_board);
  auto c = config();
  CHECK_EQ(g_board.num_slots, c.num_slots);
  for (uint32_t k = 0; k < c.num_slots; ++k) {
    EXPECT(g_board.slots[k].present);
    EXPECT_EQ(g_board.slots[k].size, c.slot_size);
    // Naturally aligned in the 64-bit window.
    EXPECT_EQ(g_board.slots[k].mem & (g_board.slots[k].size - 1), 0u);
    EXPECT(g_board.slots[k].mem >= hal::pcie::kMmio64Base);
    EXPECT(g_board.slots[k].mem + g_board.slots[k].size <= hal::pcie::kMmio64Base + hal::pcie::kMmio64Size);
  }
  EXPECT_EQ(g_board.bar_failures, 0u);
  EXPECT_EQ(g_board.misplaced, 0u);
  EXPECT_EQ(g_board.foreign, 1u);  // the gpex host bridge
}

FW_TEST(slot_bars_do_not_overlap) {
  for (uint32_t i = 0; i < abi::kMaxSlots; ++i)
    for (uint32_t j = i + 1; j < abi::kMaxSlots; ++j) {
      const auto& a = g_board.slots[i];
      const auto& b = g_board.slots[j];
      if (a.present && b.present) EXPECT(a.mem + a.size <= b.mem || b.mem + b.size <= a.mem);
    }
}

FW_TEST(each_slot_bar_reaches_its_own_file) {
  for (uint32_t k = 0; k < g_board.num_slots; ++k) {
    if (!EXPECT(stamp_ok(g_board.slots[k].mem, abi::kSlotStampMagic, k))) fwtest::note("slot %u stamp wrong", k);
  }
}

FW_TEST(slot_memory_is_readable_and_writable_to_the_last_byte) {
  for (uint32_t k = 0; k < g_board.num_slots; ++k) {
    uint64_t last = g_board.slots[k].mem + g_board.slots[k].size - 8;
    hal::mmio_write64(last, 0x5107'0000'0000'0000ull | k);
    EXPECT_EQ(hal::mmio_read64(last), 0x5107'0000'0000'0000ull | k);
  }
}

FW_TEST(command_register_enables_memory_and_bus_master) {
  for (uint32_t k = 0; k < g_board.num_slots; ++k) {
    uint16_t cmd = hal::pcie::config_read16(0, uint8_t(abi::kSlotPciDevBase + k), 0, hal::pcie::kCommand);
    EXPECT_EQ(cmd & 0x6, 0x6);
  }
}

FW_TEST(finds_the_fabric_doorbell_device) {
  auto c = config();
  const auto& f = g_board.fabric;
  CHECK(f.present);
  EXPECT_EQ(f.size, c.fabric_size);
  EXPECT_EQ(f.mem & (f.size - 1), 0u);
  EXPECT(stamp_ok(f.mem + abi::kPortAreaOffset - sizeof(abi::TestbenchStamp), abi::kFabricStampMagic, 0));
  // The fabric server wrote the ring geometry the boot config describes.
  const auto& g = *reinterpret_cast<const volatile abi::FabricHeader*>(f.mem);
  EXPECT_EQ(g.magic, abi::kFabricMagic);
  EXPECT_EQ(g.ports, c.fabric_ports);
  EXPECT_EQ(g.rings_offset, c.rings_offset);
  EXPECT_EQ(g.ring_stride, c.ring_stride);
  EXPECT_EQ(f.peer_id, c.node_id);  // the fabric server pins NIC k to peer id k
  EXPECT_EQ(f.vectors, 16u);
  // BAR0 (registers) and BAR1 (MSI-X) live in the 32-bit window.
  EXPECT(f.regs >= hal::pcie::kMmio32Base && f.regs < hal::pcie::kMmio32Base + hal::pcie::kMmio32Size);
  EXPECT(f.fn.bars[1].addr >= hal::pcie::kMmio32Base);
  EXPECT_EQ(f.fn.bars[1].addr & (f.fn.bars[1].size - 1), 0u);
  EXPECT(hal::pcie::msix_entry(f.fn, 1) == f.fn.bars[f.fn.msix_table_bar].addr + f.fn.msix_table_offset + 16);
}

FW_TEST(host_bridge_is_seen_and_ignored) {
  EXPECT(g_board.functions >= g_board.num_slots + 2);  // gpex host bridge + slots + fabric
  EXPECT_EQ(hal::pcie::config_read16(0, 0, 0, hal::pcie::kVendorId), 0x1b36);  // Red Hat gpex bridge
}

FW_TEST(bars_that_do_not_fit_are_counted_and_left_unassigned) {
  static hal::pcie::Function fns[hal::pcie::kMaxFunctions];
  hal::pcie::Allocator tiny;
  tiny.mmio64 = {hal::pcie::kMmio64Base, hal::pcie::kMmio64Base + (64u << 20)};  // smaller than one slot
  int n = hal::pcie::enumerate(fns, hal::pcie::kMaxFunctions, tiny);
  EXPECT(n >= 10);
  EXPECT(tiny.failures >= 8);
  int unassigned = 0;
  for (int i = 0; i < n; ++i)
    if (fns[i].vendor == abi::kIvshmemVendor && fns[i].bars[2].size > (64u << 20) && fns[i].bars[2].addr == 0)
      ++unassigned;
  EXPECT(unassigned >= 8);
  // Put the board back the way the other tests expect it.
  core::board::discover(g_board);
  EXPECT_EQ(g_board.num_slots, 8u);
}

FW_TEST(enumeration_respects_the_output_capacity) {
  static hal::pcie::Function fns[3];
  hal::pcie::Allocator alloc;
  EXPECT_EQ(hal::pcie::enumerate(fns, 3, alloc), 3);
  core::board::discover(g_board);
}

FW_TEST(rediscovery_is_stable) {
  Board again;
  core::board::discover(again);
  for (uint32_t k = 0; k < abi::kMaxSlots; ++k) EXPECT_EQ(again.slots[k].mem, g_board.slots[k].mem);
  EXPECT_EQ(again.fabric.mem, g_board.fabric.mem);
  EXPECT(stamp_ok(again.slots[3].mem, abi::kSlotStampMagic, 3));
}
