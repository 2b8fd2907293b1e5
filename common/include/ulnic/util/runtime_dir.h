// Where a machine's ulnic runtime files go when $ULNIC_RUNTIME_DIR does not
// say: one rule for the tools (emulator/board/runtime.h) and the host
// library (daemon socket paths), so both always agree.
//
// Slot, SRAM and fabric files are shared memory. /dev/shm holds them in RAM,
// but containers often give it only 64 MiB, and a board touches more than
// that (QEMU then dies of SIGBUS on a page it cannot get). So /dev/shm is the
// default only where it is at least kMinShmBytes in size; elsewhere /tmp
// (page cache over disk: the same sharing, a little more I/O). The rule looks
// at the size of the file system, not what is free, so it gives the same
// answer for every process on the machine.
#pragma once

#include <pwd.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <string>

namespace ulnic {

constexpr uint64_t kMinShmBytes = 1ull << 30;

inline std::string default_runtime_parent() {
  struct statvfs st {};
  if (::statvfs("/dev/shm", &st) == 0 && uint64_t(st.f_blocks) * st.f_frsize >= kMinShmBytes) return "/dev/shm";
  return "/tmp";
}

inline std::string runtime_base_dir() {
  if (const char* e = std::getenv("ULNIC_RUNTIME_DIR"); e && *e) return e;
  const passwd* pw = ::getpwuid(::getuid());
  return default_runtime_parent() + "/ulnic-" + (pw ? pw->pw_name : std::to_string(::getuid()));
}

}  // namespace ulnic
