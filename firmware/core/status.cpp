#include "core/status.h"

#include "core/log.h"
#include "hal/clint.h"

extern "C" const uint8_t __build_id_start[];
extern "C" const uint8_t __build_id_end[];

namespace core::status {
namespace abi = ulnic::abi;

namespace {

char g_build_id[48];
uint64_t g_boot_mtime;

// ELF note: namesz, descsz, type, name (padded to 4), desc.
void decode_build_id() {
  const uint8_t* p = __build_id_start;
  size_t avail = size_t(__build_id_end - __build_id_start);
  g_build_id[0] = '\0';
  if (avail < 12) return;
  uint32_t namesz = uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24;
  uint32_t descsz = uint32_t(p[4]) | uint32_t(p[5]) << 8 | uint32_t(p[6]) << 16 | uint32_t(p[7]) << 24;
  size_t desc = 12 + ((namesz + 3) & ~3u);
  if (desc > avail || descsz > avail - desc) return;
  static const char hex[] = "0123456789abcdef";
  size_t n = 0;
  for (uint32_t i = 0; i < descsz && n + 2 < sizeof g_build_id; ++i) {
    g_build_id[n++] = hex[p[desc + i] >> 4];
    g_build_id[n++] = hex[p[desc + i] & 15];
  }
  g_build_id[n] = '\0';
}

void copy_string(char* dst, size_t cap, const char* src) {
  size_t i = 0;
  for (; i + 1 < cap && src[i]; ++i) dst[i] = src[i];
  for (; i < cap; ++i) dst[i] = '\0';
}

}  // namespace

abi::StatusBlock& block() {
  return *reinterpret_cast<abi::StatusBlock*>(abi::kSramBase + abi::kStatusOffset);
}

void begin_boot(uint64_t mtime_now, const char* version) {
  abi::StatusBlock& b = block();
  g_boot_mtime = mtime_now;
  // Announce "booting" before anything else, so a crash in early boot is
  // visible as a crash and not as a stale "running" from the last image.
  put(b.state, uint32_t(abi::FwState::kBooting));
  uint64_t boots = b.magic == abi::kStatusMagic ? b.boot_count + 1 : 1;
  // Wipe everything else: counters and trap info belong to one boot.
  auto* words = reinterpret_cast<volatile uint64_t*>(&b);
  for (size_t i = 1; i < sizeof(b) / 8; ++i) words[i] = 0;
  put(b.magic, abi::kStatusMagic);
  put(b.abi_version, ULNIC_ABI_VERSION);
  put(b.state, uint32_t(abi::FwState::kBooting));
  decode_build_id();
  copy_string(b.build_id, sizeof b.build_id, g_build_id);
  copy_string(b.version, sizeof b.version, version);
  put(b.boot_count, boots);
  put(b.boot_mtime, mtime_now);
}

void set_state(abi::FwState s) {
  // Everything written before a state change is visible once the tools see it.
  __atomic_thread_fence(__ATOMIC_RELEASE);
  put(block().state, uint32_t(s));
}

abi::FwState state() { return abi::FwState(block().state); }

void count(abi::Counter c, uint64_t n) {
  if (c >= abi::kCounterCount) return;
  uint64_t& slot = block().counters[c];
  put(slot, slot + n);  // single writer: no read-modify-write race
}

uint64_t counter(abi::Counter c) { return c < abi::kCounterCount ? block().counters[c] : 0; }

void refresh(uint64_t mtime_now) {
  abi::StatusBlock& b = block();
  put(b.uptime_us, hal::clint::ticks_to_us(mtime_now - g_boot_mtime));
  put(b.heartbeat, b.heartbeat + 1);
}

const char* build_id() { return g_build_id; }

}  // namespace core::status
