#include "board/sram.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>

#include "ulnic/util/fd.h"

namespace ulnic::board {

Result<SramFile> SramFile::create(const std::string& path) {
  UniqueFd fd(::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
  if (!fd) return fail_errno("cannot create SRAM file " + path, errno);
  // Allocated, not sparse: a page the filesystem cannot back would kill
  // QEMU (SIGBUS) when the NIC touches it; ENOSPC here says why instead.
  if (int e = ::posix_fallocate(fd.get(), 0, abi::kSramSize); e != 0)
    return fail_errno("cannot allocate SRAM file " + path, e);
  return open(path, true);
}

Result<SramFile> SramFile::open(const std::string& path, bool writable) {
  auto m = Mapping::map_file(path, abi::kSramSize, writable);
  if (!m) return std::unexpected(m.error());
  SramFile f;
  f.map_ = std::move(*m);
  return f;
}

void SramFile::write_image(const FirmwareImage& img) {
  for (const Segment& s : img.segments) {
    uint8_t* dst = at(s.addr - abi::kSramBase);  // parse_elf() proved the range is inside SRAM
    // std::copy, not memcpy: a segment all .bss has no bytes, and memcpy
    // from an empty vector's null data() is undefined even for 0 bytes.
    std::copy(s.data.begin(), s.data.end(), dst);
    std::memset(dst + s.data.size(), 0, s.memsz - s.data.size());
  }
}

void SramFile::write_boot_config(const abi::BootConfig& cfg) {
  std::memcpy(at(abi::kBootConfigOffset), &cfg, sizeof cfg);
}

abi::BootConfig SramFile::boot_config() const {
  abi::BootConfig c;
  std::memcpy(&c, at(abi::kBootConfigOffset), sizeof c);
  return c;
}

namespace {
// A copy of the block at `shared` taken while its word `version` stood still
// (and, with `odd_busy`, was even: the writer makes it odd while it updates).
// The writer may be at work while we copy: a bounded number of tries.
template <class Block>
Block read_stable(const Block* shared, const uint64_t& version, bool odd_busy) {
  Block copy;
  for (int tries = 0; tries < 8; ++tries) {
    uint64_t before = std::atomic_ref<const uint64_t>(version).load(std::memory_order_acquire);
    std::memcpy(&copy, shared, sizeof copy);
    std::atomic_thread_fence(std::memory_order_acquire);
    if (!(odd_busy && (before & 1)) &&
        std::atomic_ref<const uint64_t>(version).load(std::memory_order_relaxed) == before)
      break;
  }
  return copy;
}
}  // namespace

abi::StatusBlock SramFile::read_status() const {
  const auto* shared = reinterpret_cast<const abi::StatusBlock*>(at(abi::kStatusOffset));
  return read_stable(shared, shared->heartbeat, false);
}

std::vector<abi::LinkStatus> SramFile::read_links(uint32_t n) const {
  if (n > abi::kMaxLinks) n = abi::kMaxLinks;
  std::vector<abi::LinkStatus> links(n);
  std::memcpy(links.data(), at(abi::kLinkStatusOffset), n * sizeof(abi::LinkStatus));
  return links;
}

abi::CostBlock SramFile::read_cost() const {
  const auto* shared = reinterpret_cast<const abi::CostBlock*>(at(abi::kCostOffset));
  return read_stable(shared, shared->seq, true);  // the plugin counts at every firmware marker
}

namespace {
// Counters a reader takes one by one: no snapshot to hold together.
template <class T>
T read_counters(const uint8_t* shared) {
  T out;
  std::memcpy(&out, shared, sizeof out);
  return out;
}
}  // namespace

abi::WakeBlock SramFile::read_wake() const { return read_counters<abi::WakeBlock>(at(abi::kWakeOffset)); }

abi::CopyBlock SramFile::read_copy() const { return read_counters<abi::CopyBlock>(at(abi::kCopyOffset)); }

}  // namespace ulnic::board
