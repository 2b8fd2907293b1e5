// The NIC board as the firmware sees it after PCIe enumeration: the host
// slots (ivshmem-plain, one per attachable process) and the fabric
// (ivshmem-doorbell: shared memory plus MSI-X doorbells). Slot k is the
// ivshmem device at PCI device kSlotPciDevBase + k (the launcher pins the
// addresses); the fabric is the ivshmem device with an MSI-X table.
#pragma once

#include "hal/pcie.h"
#include "ulnic/abi/sram.h"

namespace core::board {

struct Slot {
  bool present;
  uint64_t mem;       // BAR2 address
  uint64_t size;      // BAR2 size
};

struct Fabric {
  bool present;
  uint64_t mem;       // BAR2: the cluster's shared region
  uint64_t size;
  uint64_t regs;      // BAR0: IVPosition, Doorbell
  uint32_t peer_id;   // IVPosition
  uint16_t vectors;   // MSI-X table size
  hal::pcie::Function fn;
};

struct Board {
  Slot slots[ulnic::abi::kMaxSlots];
  uint32_t num_slots;   // slots present
  Fabric fabric;
  uint32_t functions;   // PCI functions seen
  uint32_t foreign;     // functions that are not ivshmem (the host bridge)
  uint32_t misplaced;   // ivshmem functions at no slot or fabric position
  uint32_t bar_failures;
};

// ivshmem BAR0 registers (QEMU ivshmem spec).
enum IvshmemReg : uint32_t {
  kIntrMask = 0,
  kIntrStatus = 4,
  kIvPosition = 8,
  kDoorbell = 12,
};

// Enumerates PCIe and classifies our devices. Safe to call again (re-assigns).
void discover(Board& out);

}  // namespace core::board
