// The NIC's SRAM: 16 MiB of QEMU guest RAM at 0x8000_0000, backed by a shared
// file that only the firmware and the node's trusted tools map (DESIGN §3).
//
//   0x000000 .. 0xEFFFFF  firmware image: code, data, bss, stack (linker script)
//   0xF00000 .. 0xFEFFFF  reserved for daemon<->firmware queues
//   0xFF0000              boot-config block (written by the flasher only)
//   0xFF1000              status block      (written by the firmware only)
//   0xFF2000              per-link state    (written by the firmware only; status.h)
//   0xFF3000              cost block        (written by the cost plugin only; cost.h)
//   0xFF4000              wake block        (firmware and wake plugin, a word each; wake.h)
//   0xFF5000 .. 0xFFFFFF  reserved
#pragma once

#include "ulnic/abi/types.h"

namespace ulnic::abi {

// The firmware's fuzz build (tests/fuzz) runs its code on the host, where
// 0x8000_0000 is ASan's shadow memory: it maps a fake SRAM elsewhere.
#ifdef ULNIC_HOST_SRAM_BASE
constexpr uint64_t kSramBase = ULNIC_HOST_SRAM_BASE;
#else
constexpr uint64_t kSramBase = 0x8000'0000;
#endif
constexpr uint64_t kSramSize = 16u << 20;

// The reset ROM of QEMU's virt machine jumps to the start of DRAM, so every
// firmware image must have its entry point there.
constexpr uint64_t kFirmwareEntry = kSramBase;
constexpr uint64_t kImageOffset = 0;
constexpr uint64_t kImageMaxSize = 0xF0'0000;

constexpr uint64_t kCtrlOffset = 0xF0'0000;
constexpr uint64_t kCtrlSize = 0xF'0000;
constexpr uint64_t kBootConfigOffset = 0xFF'0000;
constexpr uint64_t kBootConfigSize = 0x1000;
constexpr uint64_t kStatusOffset = 0xFF'1000;
constexpr uint64_t kStatusSize = 0x1000;

static_assert(kImageOffset + kImageMaxSize <= kCtrlOffset);
static_assert(kCtrlOffset + kCtrlSize <= kBootConfigOffset);
static_assert(kBootConfigOffset + kBootConfigSize <= kStatusOffset);
static_assert(kStatusOffset + kStatusSize <= kSramSize);

// Host slots and the fabric are ivshmem PCI devices (vendor 0x1af4, device
// 0x1110). The board puts them at fixed PCI device numbers so a slot's index
// never depends on enumeration luck; the firmware still classifies them by
// their BARs (only the fabric's ivshmem-doorbell has an MSI-X BAR1).
constexpr uint32_t kMaxSlots = 8;
constexpr uint32_t kSlotPciDevBase = 0x08;   // slot k at 00:(0x08+k).0
constexpr uint32_t kFabricPciDev = 0x10;     // fabric at 00:10.0
constexpr uint16_t kIvshmemVendor = 0x1af4;
constexpr uint16_t kIvshmemDevice = 0x1110;

// Largest cluster the fabric server hands fixed peer ids to: NIC k is peer k.
// Host processes registered as doorbell peers get ids from kMaxNodes up.
constexpr uint32_t kMaxNodes = 64;

}  // namespace ulnic::abi
