// PCIe root complex of QEMU's virt machine (gpex): ECAM config access, BAR
// sizing and assignment. The firmware is its own BIOS: it enumerates bus 0
// and places every memory BAR in one of the two MMIO windows.
#pragma once

#include <stdint.h>

namespace hal::pcie {

// virt memory map, QEMU 7.2 (hw/riscv/virt.c): ECAM 0x3000_0000 (256 MiB),
// 32-bit MMIO 0x4000_0000 (1 GiB), 64-bit MMIO at RAM top rounded up to its
// 16 GiB size: 0x4_0000_0000 for our 16 MiB of RAM.
constexpr uintptr_t kEcamBase = 0x3000'0000;
constexpr uint64_t kMmio32Base = 0x4000'0000;
constexpr uint64_t kMmio32Size = 0x4000'0000;
constexpr uint64_t kMmio64Base = 0x4'0000'0000;
constexpr uint64_t kMmio64Size = 16ull << 30;

constexpr int kMaxBars = 6;
constexpr int kMaxFunctions = 32;

// Config-space registers (PCI Local Bus spec names).
enum ConfigReg : uint32_t {
  kVendorId = 0x00,
  kDeviceId = 0x02,
  kCommand = 0x04,
  kStatus = 0x06,
  kRevision = 0x08,
  kHeaderType = 0x0e,
  kBar0 = 0x10,
  kCapPtr = 0x34,
};
constexpr uint16_t kCommandMemory = 1u << 1;
constexpr uint16_t kCommandBusMaster = 1u << 2;
constexpr uint16_t kStatusCapList = 1u << 4;
constexpr uint8_t kCapIdMsix = 0x11;

struct Bar {
  uint64_t addr;   // assigned address, 0 if unassigned
  uint64_t size;   // 0 if the BAR is not implemented
  bool is64;
  bool prefetchable;
  bool io;         // I/O-space BAR: never assigned (virt's PIO window unused)
};

struct Function {
  uint8_t bus, dev, fn;
  uint16_t vendor, device;
  uint8_t revision;
  Bar bars[kMaxBars];
  uint16_t msix_table_size;   // vectors, 0 if no MSI-X capability
  uint8_t msix_cap;           // config offset of the MSI-X capability
  uint8_t msix_table_bar;
  uint32_t msix_table_offset;
};

struct Window {
  uint64_t next, end;
};

struct Allocator {
  Window mmio32{kMmio32Base, kMmio32Base + kMmio32Size};
  Window mmio64{kMmio64Base, kMmio64Base + kMmio64Size};
  uint32_t failures = 0;  // BARs that did not fit
};

uint32_t config_read32(uint8_t bus, uint8_t dev, uint8_t fn, uint32_t off);
uint16_t config_read16(uint8_t bus, uint8_t dev, uint8_t fn, uint32_t off);
uint8_t config_read8(uint8_t bus, uint8_t dev, uint8_t fn, uint32_t off);
void config_write32(uint8_t bus, uint8_t dev, uint8_t fn, uint32_t off, uint32_t v);
void config_write16(uint8_t bus, uint8_t dev, uint8_t fn, uint32_t off, uint16_t v);

// Scans bus 0, sizes every BAR, assigns memory BARs (naturally aligned;
// 64-bit prefetchable ones in the high window), enables memory decoding and
// bus mastering. Fills `out` in (dev, fn) order; returns the count.
int enumerate(Function* out, int max, Allocator& alloc);

// Moves memory BAR `i` of `f` to the first free address of its window that
// is `offset` modulo `period` (a power of two, multiple of the BAR size),
// decoding off meanwhile. False (and the BAR stays) if the window is full.
bool move_bar(Function& f, int i, Allocator& alloc, uint64_t period, uint64_t offset);

// Address of MSI-X table entry `vector` of `f` (its BAR must be assigned).
uint64_t msix_entry(const Function& f, uint32_t vector);
// Points vector `vector` at (address, data) and unmasks it.
void msix_set_vector(const Function& f, uint32_t vector, uint64_t address, uint32_t data);
// Turns MSI-X on for the function (and clears its function mask).
void msix_enable(const Function& f);

}  // namespace hal::pcie
