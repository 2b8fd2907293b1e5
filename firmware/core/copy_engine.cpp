#include "core/copy_engine.h"

#include "core/board.h"
#include "ulnic/abi/wake.h"

namespace core::copy_engine {
namespace abi = ulnic::abi;

bool g_on = false;

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

}  // namespace core::copy_engine
