// Fuzz target: the firmware image loader (emulator/board/elf_image.*), which
// reads any file a user names before a byte of it goes to a NIC. Invariants
// of an accepted image: segments sorted, disjoint, inside the firmware area
// of SRAM, file bytes within memory bytes, the entry point in an executable
// segment's file bytes, and the build id in hex.
#include <cstdint>
#include <span>

#include "board/elf_image.h"
#include "fuzz_support.h"
#include "ulnic/abi/sram.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace abi = ulnic::abi;
  auto img = ulnic::board::parse_elf(std::span<const uint8_t>(data, size), "fuzz.elf");
  if (!img) {
    FUZZ_CHECK(!img.error().message.empty());
    return 0;
  }
  const uint64_t lo = abi::kSramBase + abi::kImageOffset, hi = lo + abi::kImageMaxSize;
  FUZZ_CHECK(!img->segments.empty());
  bool entry_loaded = false;
  uint64_t prev_end = lo;
  for (const auto& s : img->segments) {
    FUZZ_CHECK(s.memsz > 0 && s.data.size() <= s.memsz);
    FUZZ_CHECK(s.addr >= prev_end && s.addr + s.memsz <= hi && s.addr + s.memsz > s.addr);
    FUZZ_CHECK(s.data.size() <= size);
    prev_end = s.addr + s.memsz;
    entry_loaded |= s.executable && img->entry >= s.addr && img->entry < s.addr + s.data.size();
  }
  FUZZ_CHECK(img->end == prev_end);
  FUZZ_CHECK(img->entry == abi::kFirmwareEntry && entry_loaded);
  FUZZ_CHECK(img->build_id.size() % 2 == 0);
  for (char c : img->build_id) FUZZ_CHECK((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'));
  return 0;
}
