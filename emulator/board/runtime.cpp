#include "board/runtime.h"

#include "ulnic/util/runtime_dir.h"
#include "ulnic/abi/fabric.h"
#include "ulnic/abi/sram.h"
#include "fabric/fabric_server.h"
#include "ulnic/util/unix_socket.h"

#include <poll.h>
#include <pwd.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cctype>
#include <algorithm>
#include <cstdlib>
#include <filesystem>

#ifndef ULNIC_BUILD_BINDIR
#define ULNIC_BUILD_BINDIR ""
#endif
#ifndef ULNIC_BUILD_FIRMWARE_DIR
#define ULNIC_BUILD_FIRMWARE_DIR ""
#endif

namespace ulnic::board {

namespace fs = std::filesystem;

std::string runtime_base() { return runtime_base_dir(); }

Result<void> check_cluster_name(const std::string& name) {
  if (name.empty() || name.size() > 31) return fail("cluster name must be 1..31 characters");
  for (char c : name)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_'))
      return fail("cluster name '" + name + "': use letters, digits, '-' and '_' only");
  // Not '-' or '_' first: such a name reads as an option ("-c -n").
  if (!std::isalnum(static_cast<unsigned char>(name[0])))
    return fail("cluster name '" + name + "': must start with a letter or digit");
  return {};
}

std::string cluster_dir(const std::string& cluster) { return runtime_base() + "/" + cluster; }

uint64_t node_space() { return ulnic::abi::kSramSize + (1u << 20); }  // + logs, sockets, the ELF's copy

uint64_t fabric_space(uint32_t ports) {
  return ulnic::abi::fabric_bar_size(ports, ulnic::abi::default_ring_capacity(ports)) + (1u << 20);
}

Result<void> check_space(const std::string& what, uint64_t bytes) {
  // The runtime directory, or the nearest directory above it that exists.
  fs::path dir = runtime_base();
  std::error_code ec;
  while (!fs::exists(dir, ec) && dir.has_parent_path() && dir != dir.parent_path()) dir = dir.parent_path();
  struct statvfs v {};
  if (::statvfs(dir.c_str(), &v) != 0) return {};  // nothing to go by: the writes will say
  uint64_t free = uint64_t(v.f_bavail) * v.f_frsize;
  if (free >= bytes) return {};
  auto mib = [](uint64_t b) { return std::to_string((b + (1u << 20) - 1) >> 20); };
  return fail("no room in " + runtime_base() + " for " + what + ": " + mib(bytes) + " MiB needed, " +
              std::to_string(free >> 20) + " MiB free (free some, or set ULNIC_RUNTIME_DIR to a filesystem with room)");
}

std::string fabric_dir(const std::string& cluster) { return cluster_dir(cluster) + "/fabric"; }

std::string hosts_path(const std::string& cluster) { return cluster_dir(cluster) + "/hosts"; }

NodePaths node_paths(const std::string& cluster, uint32_t node) {
  NodePaths p;
  p.dir = cluster_dir(cluster) + "/node" + std::to_string(node);
  p.sram = p.dir + "/sram";
  p.qmp = p.dir + "/qmp.sock";
  p.gdb = p.dir + "/gdb.sock";
  p.serial_log = p.dir + "/serial.log";
  p.qemu_log = p.dir + "/qemu.log";
  p.pid = p.dir + "/qemu.pid";
  p.firmware = p.dir + "/firmware.elf";
  p.lock = p.dir + ".lock";
  return p;
}

UniqueFd connect_wake(const std::string& cluster, uint32_t node) {
  if (const char* e = std::getenv("ULNIC_WAKE_PLUGIN"); e && std::string(e) == "off") return {};
  if (!fs::exists(tool_path("ulnic-wake.so"))) return {};
  auto s = connect_unix(fabric::Paths::wake_socket(fabric_dir(cluster), node));
  if (!s) return {};
  pollfd answer{s->get(), POLLIN, 0};
  if (::poll(&answer, 1, 5000) != 1 || !(answer.revents & POLLIN)) return {};
  return std::move(*s);
}

std::string tool_path(const std::string& name) {
  if (const char* e = std::getenv("ULNIC_BINDIR"); e && *e) return std::string(e) + "/" + name;
  std::error_code ec;
  fs::path self = fs::read_symlink("/proc/self/exe", ec);
  if (!ec && fs::exists(self.parent_path() / name)) return (self.parent_path() / name).string();
  return std::string(ULNIC_BUILD_BINDIR) + "/" + name;
}

std::string default_firmware(const std::string& name) {
  if (const char* e = std::getenv("ULNIC_FIRMWARE"); e && *e && name == "ulnic-fw.elf") return e;
  return std::string(ULNIC_BUILD_FIRMWARE_DIR) + "/" + name;
}

Result<void> make_dirs(const std::string& path) {
  std::error_code ec;
  fs::create_directories(path, ec);
  if (ec) return fail("cannot create " + path + ": " + ec.message());
  ::chmod(path.c_str(), 0700);
  return {};
}

void remove_tree(const std::string& path) {
  // Only strictly below the runtime base, after resolving "..", symlinks and
  // prefixes that merely look alike ("<base>-other").
  std::error_code ec;
  fs::path base = fs::weakly_canonical(runtime_base(), ec);
  if (ec) return;
  fs::path target = fs::weakly_canonical(path, ec);
  if (ec || target == base) return;
  auto [b, t] = std::mismatch(base.begin(), base.end(), target.begin(), target.end());
  if (b != base.end()) return;
  fs::remove_all(target, ec);
}

}  // namespace ulnic::board
