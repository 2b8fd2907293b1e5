#include "core/board.h"

#include "hal/mmio.h"
#include "hal/soft_tlb.h"

namespace core::board {
namespace abi = ulnic::abi;

namespace {

bool is_ivshmem(const hal::pcie::Function& f) {
  return f.vendor == abi::kIvshmemVendor && f.device == abi::kIvshmemDevice;
}

// The fabric's rings go in the other half of the soft TLB's reach from the
// SRAM and the start of every slot (whose bases are multiples of it): the
// link copies between a slot buffer and a ring entry, and two pages that
// share a TLB entry make such a copy many times slower (hal/soft_tlb.h). So
// no buffer in the first half of a slot meets a ring. A fabric larger than
// half the reach (bigger clusters) stays where enumeration put it.
void color_fabric(hal::pcie::Function& f, hal::pcie::Allocator& alloc) {
  constexpr uint64_t kReach = hal::soft_tlb::kReach;
  if (f.bars[2].size != 0 && f.bars[2].size <= kReach / 2) (void)hal::pcie::move_bar(f, 2, alloc, kReach, kReach / 2);
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
      color_fabric(fns[i], alloc);
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
