#include "board/fabric_control.h"

#include <fcntl.h>
#include <unistd.h>
#include <sys/file.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <thread>

#include "board/node.h"
#include "fabric/fabric_server.h"
#include "ulnic/abi/sram.h"
#include "ulnic/util/fd.h"
#include "ulnic/util/process.h"

namespace ulnic::board {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

namespace {

bool is_our_fabricd(pid_t pid, const std::string& dir) {
  return pid && process_alive(pid) && process_cmdline(pid).find(dir) != std::string::npos;
}

// Serializes fabric start/stop within a cluster: nodes of one cluster may be
// started and stopped concurrently, but there must be one fabric server.
class ClusterLock {
 public:
  explicit ClusterLock(const std::string& cluster) {
    (void)make_dirs(cluster_dir(cluster));
    fd_.reset(::open((cluster_dir(cluster) + "/fabric.lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600));
    if (fd_) ::flock(fd_.get(), LOCK_EX);
  }

 private:
  UniqueFd fd_;
};

}  // namespace

Result<abi::FabricHeader> fabric_geometry(const std::string& cluster) {
  std::string mem = fabric::Paths::memory(fabric_dir(cluster));
  UniqueFd fd(::open(mem.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) return fail_errno("cannot read " + mem, errno);
  abi::FabricHeader h{};
  if (::pread(fd.get(), &h, sizeof h, 0) != ssize_t(sizeof h) || h.magic != abi::kFabricMagic)
    return fail(mem + " has no fabric geometry");
  return h;
}

namespace {
Result<abi::FabricHeader> check_node_fits(const std::string& cluster, uint32_t node) {
  auto g = fabric_geometry(cluster);
  if (!g) return g;
  uint32_t nodes = g->switch_port == abi::kNoSwitch ? g->ports : g->ports - 1;
  if (node >= nodes)
    return fail("node " + std::to_string(node) + " does not fit the fabric of cluster '" + cluster + "' (" +
                std::to_string(nodes) + " nodes)");
  return g;
}
}  // namespace

Result<abi::FabricHeader> ensure_fabric(const std::string& cluster, uint32_t node, const FabricSpec& spec,
                                        std::vector<std::string>& notes) {
  ClusterLock lock(cluster);
  std::string dir = fabric_dir(cluster);
  std::string pidfile = fabric::Paths::pid_file(dir);
  std::string sock = fabric::Paths::nic_socket(dir, node);
  pid_t pid = read_pid_file(pidfile);
  if (is_our_fabricd(pid, dir)) return check_node_fits(cluster, node);
  if (pid || fs::exists(dir)) {
    std::vector<uint32_t> nodes = list_nodes(cluster);
    bool others = std::any_of(nodes.begin(), nodes.end(),
                              [&](uint32_t n) { return n != node && live_qemu(node_paths(cluster, n)); });
    if (others)
      return fail("the fabric server of cluster '" + cluster +
                  "' is gone while other nodes still run; stop them and start again");
    remove_tree(dir);
    if (pid) notes.push_back("removed stale fabric files (fabric server pid " + std::to_string(pid) + " is gone)");
  }
  if (auto r = make_dirs(dir); !r) return std::unexpected(r.error());
  std::vector<std::string> argv = {tool_path("ulnic-fabricd"), "--dir", dir, "--size", "1048576", "--vectors",
                                   std::to_string(spec.vectors), "--nodes", std::to_string(abi::kMaxNodes),
                                   // NICs need only each other's fabric vector: keeps a QEMU's
                                   // fd count linear in the cluster size
                                   "--nic-peer-vectors", "1", "--ports", std::to_string(spec.ports),
                                   "--ring-capacity",
                                   std::to_string(spec.ring_capacity ? spec.ring_capacity
                                                                     : abi::default_ring_capacity(spec.ports))};
  if (spec.with_switch) argv.push_back("--switch");
  auto spawned = spawn_daemon(argv, fabric::Paths::log_file(dir));
  if (!spawned) return fail("cannot start the fabric server: " + spawned.error().message);
  for (auto deadline = std::chrono::steady_clock::now() + 10s; std::chrono::steady_clock::now() < deadline;
       std::this_thread::sleep_for(10ms)) {
    if (read_pid_file(pidfile) == *spawned && fs::exists(sock)) return check_node_fits(cluster, node);
    if (!process_alive(*spawned)) break;
  }
  return fail("the fabric server did not come up:\n" + tail_file(fabric::Paths::log_file(dir), 10));
}

std::string switch_stats_path(const std::string& cluster) { return fabric_dir(cluster) + "/switch.json"; }

Result<void> start_switch(const std::string& cluster, const std::string& faults, const std::string& pcap,
                          const std::vector<std::string>& extra_args) {
  std::string dir = fabric_dir(cluster);
  std::vector<std::string> argv = {tool_path("ulnic-switch"), "--fabric", dir, "--stats", switch_stats_path(cluster)};
  if (!faults.empty()) argv.insert(argv.end(), {"--faults", faults});
  if (!pcap.empty()) argv.insert(argv.end(), {"--pcap", pcap});
  argv.insert(argv.end(), extra_args.begin(), extra_args.end());
  auto pid = spawn_daemon(argv, dir + "/switch.log", nic_nice());  // on the data path, like the NICs
  if (!pid) return fail("cannot start ulnic-switch: " + pid.error().message);
  write_pid_file(dir + "/switch.pid", *pid);
  // Up once it published its peer id in its port area (or dead).
  for (auto deadline = std::chrono::steady_clock::now() + 10s; std::chrono::steady_clock::now() < deadline;
       std::this_thread::sleep_for(10ms)) {
    if (!process_alive(*pid)) break;
    if (fs::exists(switch_stats_path(cluster)) || std::ifstream(dir + "/switch.log").peek() != EOF) {
      std::this_thread::sleep_for(20ms);
      if (process_alive(*pid)) return {};
    }
  }
  return fail("ulnic-switch did not come up:\n" + tail_file(dir + "/switch.log", 10));
}

void stop_fabric(const std::string& cluster) {
  ClusterLock lock(cluster);
  std::string dir = fabric_dir(cluster);
  pid_t sw = read_pid_file(dir + "/switch.pid");
  if (sw && process_cmdline(sw).find(dir) != std::string::npos) terminate_process(sw, 2s);
  pid_t pid = read_pid_file(fabric::Paths::pid_file(dir));
  if (is_our_fabricd(pid, dir)) terminate_process(pid, 2s);
  remove_tree(dir);
}

bool retire_cluster_if_empty(const std::string& cluster) {
  {
    ClusterLock lock(cluster);
    if (!list_nodes(cluster).empty()) return false;
  }
  stop_fabric(cluster);
  ClusterLock lock(cluster);
  if (!list_nodes(cluster).empty()) return false;  // a node started meanwhile: it restarts the fabric
  remove_tree(cluster_dir(cluster));
  return true;
}

}  // namespace ulnic::board
