#include "board/node.h"

#include <fcntl.h>
#include <sched.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <optional>
#include <thread>

#include "board/elf_image.h"
#include "board/fabric_control.h"
#include "board/gdb_remote.h"
#include "board/qmp.h"
#include "board/sram.h"
#include "fabric/fabric_server.h"
#include "ulnic/util/fd.h"
#include "ulnic/util/process.h"

namespace ulnic::board {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

namespace {

// flock() on <node>.lock, released when the guard goes.
class NodeLock {
 public:
  static Result<NodeLock> take(const NodePaths& p) {
    NodeLock l;
    l.fd_.reset(::open(p.lock.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600));
    if (!l.fd_) return fail_errno("cannot open lock " + p.lock, errno);
    if (::flock(l.fd_.get(), LOCK_EX) != 0) return fail_errno("cannot lock " + p.lock, errno);
    return l;
  }

 private:
  UniqueFd fd_;
};

}  // namespace

namespace {

std::string node_name(const std::string& cluster, uint32_t node) {
  return "node " + std::to_string(node) + " of cluster '" + cluster + "'";
}

Result<void> create_sparse(const std::string& path, uint64_t size) {
  UniqueFd fd(::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
  if (!fd) return fail_errno("cannot create " + path, errno);
  if (::ftruncate(fd.get(), off_t(size)) != 0) return fail_errno("cannot size " + path, errno);
  return {};
}

abi::BootConfig make_boot_config(const StartOptions& o, uint64_t flash_seq, const abi::FabricHeader* g) {
  abi::BootConfig c{};
  c.magic = abi::kBootConfigMagic;
  c.abi_version = ULNIC_ABI_VERSION;
  c.size = sizeof c;
  c.node_id = o.board.node;
  // `node start` alone does not know the cluster's size; the fabric does
  // (a port per node, and one for a switch). A restarted node that took
  // itself for the only one refused every VMMC import from a higher node and
  // told only node 0 that its old processes were gone.
  c.num_nodes = o.num_nodes ? o.num_nodes : !g ? 1 : g->ports - (g->switch_port != abi::kNoSwitch ? 1 : 0);
  c.flags = o.boot_flags;
  c.flash_seq = flash_seq;
  c.slot_size = o.board.slot_size;
  c.num_slots = o.board.num_slots;
  c.heartbeat_us = o.heartbeat_us;
  if (g) {
    c.fabric_size = abi::fabric_bar_size(g->ports, g->ring_capacity);
    c.fabric_ports = g->ports;
    c.switch_port = g->switch_port;
    c.ring_capacity = g->ring_capacity;
    c.ring_stride = g->ring_stride;
    c.rings_offset = g->rings_offset;
  } else {
    c.switch_port = abi::kNoSwitch;
  }
  std::snprintf(c.cluster, sizeof c.cluster, "%s", o.cluster.c_str());
  c.test_rx_drop = uint32_t(std::clamp(o.test_rx_drop, 0.0, 0.99) * 65536);
  c.test_seed = o.board.node * 7919 + 1;
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  c.flashed_unix_ns = uint64_t(ts.tv_sec) * 1'000'000'000ull + uint64_t(ts.tv_nsec);
  return c;
}

std::string logs_tail(const NodePaths& p) {
  std::string s;
  if (std::string q = tail_file(p.qemu_log, 15); !q.empty()) s += "\nQEMU said:\n" + q;
  if (std::string q = tail_file(p.serial_log, 15); !q.empty()) s += "\nserial log:\n" + q;
  return s;
}

// Waits until the firmware of boot `flash_seq` left the booting state.
// `timeout` is judged on the time QEMU got, not the wall clock alone: a boot
// takes ~0.1 s of QEMU's CPU, and on a loaded host (CPU burners, other
// clusters' spinning NICs) QEMU may wait far longer than that to run. So
// the boot has failed once `timeout` has passed and QEMU has used
// kBootCpuBudget of CPU (a firmware that runs but never boots), or after
// kBootWallFactor x `timeout` whatever QEMU got (one that never runs).
constexpr auto kBootCpuBudget = 2s;
constexpr int kBootWallFactor = 10;

Result<abi::StatusBlock> wait_for_boot(const NodePaths& p, pid_t pid, uint64_t flash_seq,
                                       std::chrono::milliseconds timeout) {
  auto sram = SramFile::open(p.sram, false);
  if (!sram) return std::unexpected(sram.error());
  CpuDeadline deadline(pid, timeout, kBootCpuBudget, kBootWallFactor);
  abi::StatusBlock s{};
  for (;; std::this_thread::sleep_for(10ms)) {
    s = sram->read_status();
    auto st = abi::FwState(s.state);
    if (s.magic == abi::kStatusMagic && s.flash_seq == flash_seq && st != abi::FwState::kBooting &&
        st != abi::FwState::kOff)
      return s;
    if (!process_alive(pid)) return fail("QEMU exited during boot" + logs_tail(p));
    if (deadline.passed()) break;
  }
  if (deadline.gone()) return fail("QEMU exited during boot" + logs_tail(p));
  const auto waited_s = std::chrono::duration_cast<std::chrono::seconds>(deadline.waited()).count();
  char got[160];
  std::snprintf(got, sizeof got,
                " in %lld s (QEMU had %.2f s of CPU, state %c; firmware state %u, flash #%llu, waited for #%llu)",
                static_cast<long long>(waited_s), double(deadline.cpu_used().count()) / 1000, deadline.state(),
                unsigned(s.state), static_cast<unsigned long long>(s.flash_seq),
                static_cast<unsigned long long>(flash_seq));
  return fail("the firmware did not finish booting" + std::string(got) + logs_tail(p));
}

std::string daemon_pid_file(const NodePaths& p) { return p.dir + "/ulnicd.pid"; }

// ulnicd runs as long as the board; it is started once the firmware runs.
Result<void> start_daemon(const std::string& cluster, uint32_t node) {
  NodePaths p = node_paths(cluster, node);
  const NicPriority prio = nic_priority();
  std::vector<std::string> argv = {tool_path("ulnicd"), "--cluster", cluster, "--node", std::to_string(node)};
  if (prio.adaptive) argv.insert(argv.end(), {"--boost-nice", std::to_string(prio.nice)});
  auto pid = spawn_daemon(argv, p.dir + "/ulnicd.log", prio.adaptive ? prio.nice : 0);
  if (!pid) return fail("cannot start ulnicd: " + pid.error().message);
  for (auto deadline = Clock::now() + 15s; Clock::now() < deadline; std::this_thread::sleep_for(5ms)) {
    if (read_pid_file(daemon_pid_file(p)) == *pid) return {};
    if (!process_alive(*pid)) break;
  }
  terminate_process(*pid, 1s);
  return fail("ulnicd did not come up:\n" + tail_file(p.dir + "/ulnicd.log", 10));
}

void stop_daemon(const NodePaths& p) {
  pid_t pid = read_pid_file(daemon_pid_file(p));
  if (pid && process_cmdline(pid).find("ulnicd") != std::string::npos) terminate_process(pid, 3s);
}

pid_t live_daemon(const NodePaths& p) {
  pid_t pid = read_pid_file(daemon_pid_file(p));
  return pid && process_alive(pid) && process_cmdline(pid).find("ulnicd") != std::string::npos ? pid : 0;
}

}  // namespace

pid_t live_qemu(const NodePaths& p) {
  pid_t pid = read_pid_file(p.pid);
  if (pid && process_alive(pid) && process_cmdline(pid).find(p.sram) != std::string::npos) return pid;
  return 0;
}

const char* state_name(uint32_t state) {
  switch (abi::FwState(state)) {
    case abi::FwState::kOff: return "off";
    case abi::FwState::kBooting: return "booting";
    case abi::FwState::kRunning: return "running";
    case abi::FwState::kCrashed: return "crashed";
    case abi::FwState::kHalted: return "halted";
  }
  return "unknown";
}

std::string describe_trap(const abi::StatusBlock& s) {
  static const char* const names[] = {
      "instruction address misaligned", "instruction access fault", "illegal instruction", "breakpoint",
      "load address misaligned", "load access fault", "store address misaligned", "store access fault",
      "ecall from U-mode", "ecall from S-mode", "reserved", "ecall from M-mode", "instruction page fault",
      "load page fault", "reserved", "store page fault"};
  char b[256];
  bool irq = s.trap_cause >> 63;
  const char* name = irq ? "unexpected interrupt" : s.trap_cause < 16 ? names[s.trap_cause] : "unknown cause";
  std::snprintf(b, sizeof b, "%s (mcause %llu) at pc 0x%llx, tval 0x%llx, ra 0x%llx, sp 0x%llx", name,
                static_cast<unsigned long long>(s.trap_cause & ~(1ull << 63)),
                static_cast<unsigned long long>(s.trap_pc), static_cast<unsigned long long>(s.trap_tval),
                static_cast<unsigned long long>(s.trap_ra), static_cast<unsigned long long>(s.trap_sp));
  return b;
}

std::vector<uint32_t> list_nodes(const std::string& cluster) {
  std::vector<uint32_t> nodes;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(cluster_dir(cluster), ec)) {
    std::string n = e.path().filename().string();
    if (e.is_directory() && n.rfind("node", 0) == 0 && n.size() > 4 &&
        n.find_first_not_of("0123456789", 4) == std::string::npos)
      nodes.push_back(uint32_t(std::stoul(n.substr(4))));
  }
  std::sort(nodes.begin(), nodes.end());
  return nodes;
}

NicPriority nic_priority() {
  const char* v = std::getenv("ULNIC_NIC_NICE");
  if (!v || !*v) return {};
  char* end = nullptr;
  long n = std::strtol(v, &end, 10);
  if (*end || n < -20 || n > 19) return {};
  return {false, int(n)};
}

int nic_nice() { return nic_priority().nice; }

Result<int> nic_cpu(uint32_t node) {
  const char* v = std::getenv("ULNIC_NIC_AFFINITY");
  const std::string mode = v ? v : "";
  if (mode.empty() || mode == "off") return -1;
  if (mode != "node") return fail("ULNIC_NIC_AFFINITY=" + mode + ": expected node or off");
  cpu_set_t mine;
  if (::sched_getaffinity(0, sizeof mine, &mine) != 0) return fail_errno("sched_getaffinity", errno);
  std::vector<int> cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &mine)) cpus.push_back(c);
  if (cpus.empty()) return -1;
  return cpus[node % cpus.size()];
}

Result<StartResult> start_node(const StartOptions& o) {
  if (auto r = check_cluster_name(o.cluster); !r) return std::unexpected(r.error());
  if (auto r = validate(o.board); !r) return std::unexpected(r.error());
  auto qemu = find_qemu(o.board.qemu);
  if (!qemu) return std::unexpected(qemu.error());
  auto img = load_elf_file(o.firmware);
  if (!img) return std::unexpected(img.error());

  NodePaths p = node_paths(o.cluster, o.board.node);
  if (auto r = check_space(node_name(o.cluster, o.board.node), node_space()); !r) return std::unexpected(r.error());
  if (auto r = make_dirs(cluster_dir(o.cluster)); !r) return std::unexpected(r.error());
  auto lock = NodeLock::take(p);
  if (!lock) return std::unexpected(lock.error());

  StartResult res;
  if (pid_t pid = live_qemu(p); pid && o.daemon && !live_daemon(p)) {
    // Its ulnicd was killed: a new one adopts the slots live processes hold.
    ::unlink(daemon_pid_file(p).c_str());
    if (auto d = start_daemon(o.cluster, o.board.node); !d) return std::unexpected(d.error());
    auto sram = SramFile::open(p.sram, false);
    if (!sram) return std::unexpected(sram.error());
    res.pid = pid;
    res.status = sram->read_status();
    res.daemon_restarted = true;
    return res;
  }
  if (pid_t pid = live_qemu(p))
    return fail(node_name(o.cluster, o.board.node) + " is already running (QEMU pid " + std::to_string(pid) +
                "); stop it first: ulnic node stop -c " + o.cluster + " -n " + std::to_string(o.board.node));
  if (fs::exists(p.dir)) {
    pid_t old = read_pid_file(p.pid);
    stop_daemon(p);  // a daemon may outlive its crashed QEMU briefly
    remove_tree(p.dir);
    res.notes.push_back("removed stale runtime files of " + node_name(o.cluster, o.board.node) +
                        (old ? " (QEMU pid " + std::to_string(old) + " is gone)" : ""));
  }
  if (auto r = make_dirs(p.dir); !r) return std::unexpected(r.error());

  auto cleanup_on_error = [&](Error e) -> Result<StartResult> {
    stop_daemon(p);
    if (pid_t pid = live_qemu(p)) terminate_process(pid, 2s);
    remove_tree(p.dir);
    retire_cluster_if_empty(o.cluster);  // the fabric server we may have started
    return std::unexpected(std::move(e));
  };

  BoardSpec spec = o.board;
  spec.qemu = *qemu;
  std::optional<abi::FabricHeader> geometry;
  UniqueFd wake;  // ours until QEMU has inherited it
  if (o.fabric) {
    FabricSpec fs_spec = o.fabric_spec;
    fs_spec.vectors = o.board.fabric_vectors;
    auto g = ensure_fabric(o.cluster, o.board.node, fs_spec, res.notes);
    if (!g) return cleanup_on_error(g.error());
    geometry = *g;
    spec.fabric_socket = fabric::Paths::nic_socket(fabric_dir(o.cluster), o.board.node);
    spec.fabric_memory = fabric::Paths::memory(fabric_dir(o.cluster));
    wake = connect_wake(o.cluster, o.board.node);
    spec.wake_fd = wake ? wake.get() : -1;
  }
  auto sram = SramFile::create(p.sram);
  if (!sram) return cleanup_on_error(sram.error());
  for (uint32_t k = 0; k < spec.num_slots; ++k)
    if (auto r = create_sparse(p.slot(k), spec.slot_size); !r) return cleanup_on_error(r.error());
  // No translations exist before QEMU starts, so plain file writes suffice here.
  sram->write_image(*img);
  sram->write_boot_config(make_boot_config(o, 1, geometry ? &*geometry : nullptr));
  std::error_code ec;
  fs::copy_file(o.firmware, p.firmware, fs::copy_options::overwrite_existing, ec);

  const NicPriority prio = nic_priority();
  auto cpu = nic_cpu(o.board.node);
  if (!cpu) return cleanup_on_error(cpu.error());
  auto pid = spawn_daemon(qemu_command(spec, p), p.qemu_log, prio.adaptive ? 0 : prio.nice, *cpu,
                          wake ? std::vector<int>{wake.get()} : std::vector<int>{});
  if (!pid) return cleanup_on_error(pid.error());
  write_pid_file(p.pid, *pid);
  res.pid = *pid;
  auto st = wait_for_boot(p, *pid, 1, o.boot_timeout);
  if (!st) return cleanup_on_error(Error{node_name(o.cluster, o.board.node) + ": " + st.error().message});
  res.status = *st;
  if (o.daemon && st->state == uint32_t(abi::FwState::kRunning)) {
    if (auto d = start_daemon(o.cluster, o.board.node); !d)
      return cleanup_on_error(Error{node_name(o.cluster, o.board.node) + ": " + d.error().message});
  }
  return res;
}

Result<FlashResult> flash_node(const std::string& cluster, uint32_t node, const std::string& firmware,
                               std::chrono::milliseconds boot_timeout) {
  if (auto r = check_cluster_name(cluster); !r) return std::unexpected(r.error());
  auto img = load_elf_file(firmware);
  if (!img) return std::unexpected(img.error());
  NodePaths p = node_paths(cluster, node);
  if (!fs::exists(p.dir)) return fail(node_name(cluster, node) + " is not running");
  auto lock = NodeLock::take(p);
  if (!lock) return std::unexpected(lock.error());
  pid_t pid = live_qemu(p);
  if (!pid) return fail(node_name(cluster, node) + " is not running (its QEMU is gone; ulnic node start)");
  auto sram = SramFile::open(p.sram, true);
  if (!sram) return std::unexpected(sram.error());
  auto qmp = Qmp::connect(p.qmp, 5s, pid);
  if (!qmp) return std::unexpected(qmp.error());

  FlashResult res;
  res.old_build_id = sram->read_status().build_id;
  abi::BootConfig cfg = sram->boot_config();
  res.flash_seq = cfg.flash_seq + 1;

  // The LANai way: stop the NIC, write its SRAM, reset it into the new image.
  if (auto r = qmp->execute("stop"); !r) return std::unexpected(r.error());
  auto stopped_error = [&](const std::string& what) {
    return fail(what + "; the NIC is left stopped: flash again, or stop the node");
  };
  auto gdb = GdbRemote::connect(p.gdb, 5s, pid);
  if (!gdb) return stopped_error("cannot reach the gdbstub: " + gdb.error().message);
  sram->write_image(*img);
  // Rewrite code through QEMU so it drops translations of the old image
  // (gdb_remote.h says why the file write alone is not enough).
  for (const Segment& s : img->segments)
    if (s.executable)
      if (auto r = gdb->write_memory(s.addr, s.data); !r) return stopped_error("flash: " + r.error().message);
  cfg.flash_seq = res.flash_seq;
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  cfg.flashed_unix_ns = uint64_t(ts.tv_sec) * 1'000'000'000ull + uint64_t(ts.tv_nsec);
  sram->write_boot_config(cfg);
  if (auto r = qmp->execute("system_reset"); !r) return stopped_error(r.error().message);
  if (auto r = gdb->detach(); !r) return stopped_error("gdb detach: " + r.error().message);
  if (auto r = qmp->execute("cont"); !r) return std::unexpected(r.error());
  std::error_code ec;
  fs::copy_file(firmware, p.firmware, fs::copy_options::overwrite_existing, ec);

  auto st = wait_for_boot(p, pid, res.flash_seq, boot_timeout);
  if (!st) return std::unexpected(st.error());
  res.status = *st;
  res.new_build_id = st->build_id;
  return res;
}

Result<NodeInfo> query_node(const std::string& cluster, uint32_t node, bool check_heartbeat) {
  if (auto r = check_cluster_name(cluster); !r) return std::unexpected(r.error());
  NodePaths p = node_paths(cluster, node);
  if (!fs::exists(p.sram)) return fail(node_name(cluster, node) + " is not running");
  NodeInfo info;
  info.node = node;
  info.pid = live_qemu(p);
  info.running = info.pid != 0;
  info.firmware_path = fs::exists(p.firmware) ? p.firmware : "";
  info.daemon_pid = live_daemon(p);
  auto sram = SramFile::open(p.sram, false);
  if (!sram) return std::unexpected(sram.error());
  info.status = sram->read_status();
  info.links = sram->read_links(sram->boot_config().num_nodes);
  info.cost = sram->read_cost();
  info.wake = sram->read_wake();
  info.copy = sram->read_copy();
  if (info.running) {
    if (auto q = Qmp::connect(p.qmp, 2s))
      if (auto s = q->run_state()) info.vm_state = *s;
  }
  if (check_heartbeat && info.running && info.status.state == uint32_t(abi::FwState::kRunning)) {
    uint32_t period_us = sram->boot_config().heartbeat_us;
    period_us = std::clamp<uint32_t>(period_us ? period_us : 100'000, 1'000, 2'000'000);
    uint64_t before = info.status.heartbeat;
    info.heartbeat_checked = true;
    // Three periods, judged by QEMU's CPU time and not the wall clock alone
    // (issue 20: under load an idle NIC's QEMU went unscheduled for all
    // three, and a healthy firmware read as STUCK): stuck once QEMU has had
    // a period's worth of CPU meanwhile without a refresh, or after 10x the
    // three periods whatever it got.
    const auto period = std::chrono::milliseconds(std::max<uint32_t>(period_us / 1000, 1));
    CpuDeadline deadline(info.pid, 3 * period, std::max(period, std::chrono::milliseconds(20)));
    for (;; std::this_thread::sleep_for(5ms)) {
      info.status = sram->read_status();
      if (info.status.heartbeat != before) {
        info.heartbeat_advancing = true;
        break;
      }
      if (deadline.passed()) break;
    }
  }
  return info;
}

Result<std::vector<std::string>> stop_node(const std::string& cluster, uint32_t node) {
  if (auto r = check_cluster_name(cluster); !r) return std::unexpected(r.error());
  NodePaths p = node_paths(cluster, node);
  std::vector<std::string> notes;
  if (!fs::exists(p.dir)) return fail(node_name(cluster, node) + " is not running");
  {
    auto lock = NodeLock::take(p);
    if (!lock) return std::unexpected(lock.error());
    stop_daemon(p);
    if (pid_t pid = live_qemu(p)) {
      if (auto q = Qmp::connect(p.qmp, 2s)) (void)q->execute("quit");
      for (auto deadline = Clock::now() + 3s; Clock::now() < deadline && process_alive(pid);)
        std::this_thread::sleep_for(10ms);
      if (!terminate_process(pid, 2s)) return fail("cannot stop QEMU pid " + std::to_string(pid));
    } else {
      notes.push_back("QEMU was not running; removed its files");
    }
    remove_tree(p.dir);
  }
  ::unlink(p.lock.c_str());
  retire_cluster_if_empty(cluster);
  return notes;
}

}  // namespace ulnic::board
