#include "core/copy_engine.h"

#include "core/board.h"
#include "ulnic/abi/wake.h"

namespace core::copy_engine {
namespace abi = ulnic::abi;

bool g_on = false;

namespace {

abi::CopyBlock& block() { return *reinterpret_cast<abi::CopyBlock*>(abi::kSramBase + abi::kCopyOffset); }

// One request: the plugin runs before the marker retires, in this thread.
bool ask(uint64_t dst, uint64_t src, uint64_t n) {
  abi::CopyBlock& c = block();
  const uint64_t seq = c.fw_seq + 1;
  __atomic_store_n(&c.dst, dst, __ATOMIC_RELAXED);
  __atomic_store_n(&c.src, src, __ATOMIC_RELAXED);
  __atomic_store_n(&c.len, n, __ATOMIC_RELAXED);
  __atomic_store_n(&c.fw_seq, seq, __ATOMIC_RELEASE);
#ifdef __riscv
  // The memory clobber keeps the stores above (the request, and the data
  // the caller wrote to the source) before the marker, and the loads below
  // (and the caller's of the destination) after it.
  asm volatile("slti zero, zero, %0" ::"i"(abi::kMarkCopy) : "memory");
#endif
  return __atomic_load_n(&c.plugin_seq, __ATOMIC_ACQUIRE) == seq;
}

}  // namespace

void init(const board::Board& b) {
  abi::CopyBlock& c = block();
  for (uint32_t k = 0; k < abi::kMaxSlots; ++k) {
    const board::Slot& s = b.slots[k];
    c.regions[k] = s.present ? abi::CopyRegion{s.mem, s.size} : abi::CopyRegion{0, 0};
  }
  c.regions[abi::kCopyFabricRegion] =
      b.fabric.present ? abi::CopyRegion{b.fabric.mem, b.fabric.size} : abi::CopyRegion{0, 0};
  g_on = ask(0, 0, 0);
}

bool copy(void* dst, const void* src, size_t n) { return ask(uintptr_t(dst), uintptr_t(src), n); }

}  // namespace core::copy_engine
