#include "hal/pcie.h"

#include "hal/mmio.h"

namespace hal::pcie {
namespace {

uintptr_t ecam(uint8_t bus, uint8_t dev, uint8_t fn, uint32_t off) {
  return kEcamBase + (uintptr_t(bus) << 20 | uintptr_t(dev & 31) << 15 | uintptr_t(fn & 7) << 12 |
                      (off & 0xfff));
}

constexpr uint32_t kBarIo = 1u << 0;
constexpr uint32_t kBarType64 = 2u << 1;
constexpr uint32_t kBarTypeMask = 3u << 1;
constexpr uint32_t kBarPrefetch = 1u << 3;
constexpr uint32_t kBarMemMask = ~0xfu;

// Sizing protocol: write all ones, read back the writable bits, restore.
// Decoding is off while this runs (enumerate clears the command register).
int size_bar(uint8_t bus, uint8_t dev, uint8_t fn, int i, Bar& bar) {
  uint32_t off = kBar0 + 4u * uint32_t(i);
  uint32_t orig = config_read32(bus, dev, fn, off);
  config_write32(bus, dev, fn, off, ~0u);
  uint32_t lo = config_read32(bus, dev, fn, off);
  config_write32(bus, dev, fn, off, orig);
  bar = Bar{};
  if (lo == 0) return 1;
  if (orig & kBarIo) {
    bar.io = true;
    bar.size = uint64_t(~(lo & ~0x3u) + 1) & 0xffff'ffffu;
    return 1;
  }
  uint64_t mask = lo & kBarMemMask;
  int used = 1;
  if ((orig & kBarTypeMask) == kBarType64 && i + 1 < kMaxBars) {
    uint32_t orig_hi = config_read32(bus, dev, fn, off + 4);
    config_write32(bus, dev, fn, off + 4, ~0u);
    uint32_t hi = config_read32(bus, dev, fn, off + 4);
    config_write32(bus, dev, fn, off + 4, orig_hi);
    mask |= uint64_t(hi) << 32;
    bar.is64 = true;
    used = 2;
  } else {
    mask |= 0xffff'ffff'0000'0000ull;
  }
  bar.size = ~mask + 1;
  bar.prefetchable = (orig & kBarPrefetch) != 0;
  return used;
}

bool place(Window& w, uint64_t size, uint64_t& addr) {
  if (size == 0 || (size & (size - 1)) != 0) return false;  // BAR sizes are powers of two
  uint64_t a = (w.next + size - 1) & ~(size - 1);
  if (a < w.next || a + size > w.end || a + size < a) return false;
  addr = a;
  w.next = a + size;
  return true;
}

Window& window_of(const Bar& bar, Allocator& alloc) {
  return (bar.is64 && bar.prefetchable) ? alloc.mmio64 : alloc.mmio32;
}

void write_bar(uint8_t bus, uint8_t dev, uint8_t fn, int i, Bar& bar, uint64_t addr) {
  uint32_t off = kBar0 + 4u * uint32_t(i);
  config_write32(bus, dev, fn, off, uint32_t(addr));
  if (bar.is64) config_write32(bus, dev, fn, off + 4, uint32_t(addr >> 32));
  bar.addr = addr;
}

void assign_bar(uint8_t bus, uint8_t dev, uint8_t fn, int i, Bar& bar, Allocator& alloc) {
  if (bar.size == 0 || bar.io) return;
  uint64_t addr = 0;
  if (!place(window_of(bar, alloc), bar.size, addr)) {
    ++alloc.failures;
    return;
  }
  write_bar(bus, dev, fn, i, bar, addr);
}

void find_msix(Function& f) {
  if (!(config_read16(f.bus, f.dev, f.fn, kStatus) & kStatusCapList)) return;
  uint8_t ptr = config_read8(f.bus, f.dev, f.fn, kCapPtr) & 0xfc;
  // A capability list is at most 48 entries long in 256 bytes; bound the
  // walk so a looping list cannot hang the boot.
  for (int hops = 0; ptr >= 0x40 && hops < 48; ++hops) {
    uint8_t id = config_read8(f.bus, f.dev, f.fn, ptr);
    if (id == kCapIdMsix) {
      uint16_t ctrl = config_read16(f.bus, f.dev, f.fn, ptr + 2);
      uint32_t table = config_read32(f.bus, f.dev, f.fn, ptr + 4);
      f.msix_table_size = uint16_t((ctrl & 0x7ff) + 1);
      f.msix_cap = ptr;
      f.msix_table_bar = uint8_t(table & 7);
      f.msix_table_offset = table & ~7u;
      return;
    }
    ptr = config_read8(f.bus, f.dev, f.fn, ptr + 1) & 0xfc;
  }
}

void probe(uint8_t bus, uint8_t dev, uint8_t fn, Function& f, Allocator& alloc) {
  f = Function{};
  f.bus = bus;
  f.dev = dev;
  f.fn = fn;
  f.vendor = config_read16(bus, dev, fn, kVendorId);
  f.device = config_read16(bus, dev, fn, kDeviceId);
  f.revision = config_read8(bus, dev, fn, kRevision);
  config_write16(bus, dev, fn, kCommand, 0);
  bool bridge = (config_read8(bus, dev, fn, kHeaderType) & 0x7f) != 0;
  int nbars = bridge ? 2 : kMaxBars;
  for (int i = 0; i < nbars;) {
    int used = size_bar(bus, dev, fn, i, f.bars[i]);
    assign_bar(bus, dev, fn, i, f.bars[i], alloc);
    i += used;
  }
  find_msix(f);
  config_write16(bus, dev, fn, kCommand, kCommandMemory | kCommandBusMaster);
}

}  // namespace

uint32_t config_read32(uint8_t bus, uint8_t dev, uint8_t fn, uint32_t off) {
  return mmio_read32(ecam(bus, dev, fn, off & ~3u));
}
uint16_t config_read16(uint8_t bus, uint8_t dev, uint8_t fn, uint32_t off) {
  return mmio_read16(ecam(bus, dev, fn, off & ~1u));
}
uint8_t config_read8(uint8_t bus, uint8_t dev, uint8_t fn, uint32_t off) {
  return mmio_read8(ecam(bus, dev, fn, off));
}
void config_write32(uint8_t bus, uint8_t dev, uint8_t fn, uint32_t off, uint32_t v) {
  mmio_write32(ecam(bus, dev, fn, off & ~3u), v);
}
void config_write16(uint8_t bus, uint8_t dev, uint8_t fn, uint32_t off, uint16_t v) {
  mmio_write16(ecam(bus, dev, fn, off & ~1u), v);
}

int enumerate(Function* out, int max, Allocator& alloc) {
  int n = 0;
  for (uint8_t dev = 0; dev < 32 && n < max; ++dev) {
    if (config_read16(0, dev, 0, kVendorId) == 0xffff) continue;
    bool multi = (config_read8(0, dev, 0, kHeaderType) & 0x80) != 0;
    for (uint8_t fn = 0; fn < (multi ? 8 : 1) && n < max; ++fn) {
      if (config_read16(0, dev, fn, kVendorId) == 0xffff) continue;
      probe(0, dev, fn, out[n++], alloc);
    }
  }
  return n;
}

bool move_bar(Function& f, int i, Allocator& alloc, uint64_t period, uint64_t offset) {
  if (i < 0 || i >= kMaxBars) return false;
  Bar& bar = f.bars[i];
  if (bar.size == 0 || bar.io || bar.addr == 0 || period % bar.size != 0 || offset % bar.size != 0) return false;
  Window& w = window_of(bar, alloc);
  uint64_t addr = ((w.next + period - 1) & ~(period - 1)) + offset;
  if (addr < w.next || addr + bar.size > w.end || addr + bar.size < addr) return false;
  w.next = addr + bar.size;
  uint16_t command = config_read16(f.bus, f.dev, f.fn, kCommand);
  config_write16(f.bus, f.dev, f.fn, kCommand, 0);
  write_bar(f.bus, f.dev, f.fn, i, bar, addr);
  config_write16(f.bus, f.dev, f.fn, kCommand, command);
  return true;
}

uint64_t msix_entry(const Function& f, uint32_t vector) {
  const Bar& b = f.bars[f.msix_table_bar % kMaxBars];
  return b.addr + f.msix_table_offset + 16ull * vector;
}

void msix_set_vector(const Function& f, uint32_t vector, uint64_t address, uint32_t data) {
  if (vector >= f.msix_table_size) return;
  uint64_t e = msix_entry(f, vector);
  // MSI-X table entry: address low, address high, data, vector control.
  mmio_write32(e + 0, uint32_t(address));
  mmio_write32(e + 4, uint32_t(address >> 32));
  mmio_write32(e + 8, data);
  mmio_write32(e + 12, 0);  // unmasked
}

void msix_enable(const Function& f) {
  if (!f.msix_cap) return;
  constexpr uint16_t kEnable = 1u << 15, kFunctionMask = 1u << 14;
  uint16_t ctrl = config_read16(f.bus, f.dev, f.fn, f.msix_cap + 2u);
  config_write16(f.bus, f.dev, f.fn, f.msix_cap + 2u, uint16_t((ctrl | kEnable) & ~kFunctionMask));
}

}  // namespace hal::pcie
