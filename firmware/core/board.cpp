#include "core/board.h"

#include "hal/mmio.h"

namespace core::board {
namespace abi = ulnic::abi;

namespace {

bool is_ivshmem(const hal::pcie::Function& f) {
  return f.vendor == abi::kIvshmemVendor && f.device == abi::kIvshmemDevice;
}

void take_fabric(Board& b, const hal::pcie::Function& f) {
  Fabric& fab = b.fabric;
  fab.present = f.bars[2].addr != 0;
  fab.mem = f.bars[2].addr;
  fab.size = f.bars[2].size;
  fab.regs = f.bars[0].addr;
  fab.vectors = f.msix_table_size;
  fab.fn = f;
  fab.peer_id = fab.regs ? hal::mmio_read32(fab.regs + kIvPosition) : 0;
}

}  // namespace

void discover(Board& b) {
  b = Board{};
  static hal::pcie::Function fns[hal::pcie::kMaxFunctions];
  hal::pcie::Allocator alloc;
  int n = hal::pcie::enumerate(fns, hal::pcie::kMaxFunctions, alloc);
  b.functions = uint32_t(n);
  b.bar_failures = alloc.failures;
  for (int i = 0; i < n; ++i) {
    const hal::pcie::Function& f = fns[i];
    if (!is_ivshmem(f)) {
      ++b.foreign;
      continue;
    }
    uint32_t k = f.dev - abi::kSlotPciDevBase;
    if (f.dev == abi::kFabricPciDev && f.msix_table_size > 0 && !b.fabric.present) {
      take_fabric(b, f);
    } else if (f.dev >= abi::kSlotPciDevBase && k < abi::kMaxSlots && f.msix_table_size == 0 &&
               f.bars[2].addr != 0) {
      b.slots[k] = Slot{true, f.bars[2].addr, f.bars[2].size};
      ++b.num_slots;
    } else {
      ++b.misplaced;
    }
  }
}

}  // namespace core::board
