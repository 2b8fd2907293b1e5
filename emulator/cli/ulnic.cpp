// ulnic: the command-line entry point for boards, firmware and clusters.
//
// The commands, their options and what they do are the table kCommands at
// the end of this file: `ulnic --help`, `ulnic help CMD` and the manual page
// ulnic(1) (made at build time by `ulnic help --roff`) all print it,
// main() runs only the commands it names, and a command takes only the
// options its synopsis shows (parse, takes_option).
#include <poll.h>
#include <strings.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "board/elf_image.h"
#include "board/fabric_control.h"
#include "board/fwtest.h"
#include "board/node.h"
#include "ulnic/abi/boot_config.h"
#include "board/runtime.h"
#include "amudp.h"  // AMUDP_MAX_SPMDPROCS, AMUDP_MAX_NETWORKDEPTH
#include "fm.h"     // FM_MAX_NODES
#include "spmd_master.h"
#include "switch/faults.h"
#include "switch/switch.h"
#include "ulnic/util/json.h"
#include "ulnic/util/process.h"
#include "ulnic/util/unix_socket.h"

namespace abi = ulnic::abi;
namespace board = ulnic::board;
using namespace std::chrono_literals;

namespace {

// What every command shares (the help's and the manual's last part): the
// defaults and ranges of the options' values, and what the exit status says.
const char* kUsageEnd = R"(CLUSTER defaults to $ULNIC_CLUSTER or "default"; NODE to 0 (0..63); K 1..8 (default 8);
MIB a power of two 1..1024 (default 256); US 1000..10000000; S 1..86400; F 0..0.99.
Exit status: 2 for a command line that cannot be right (an unknown command or option,
an option the command does not take, a missing, extra or out-of-range argument): one
line on stderr, nothing started. 1 when the command ran and failed (a missing or bad
ELF, a node that is not running, a cluster with no nodes); node status: 3 QEMU not
running, 4 firmware not running.
Runtime files live in $ULNIC_RUNTIME_DIR (default /dev/shm/ulnic-$USER; /tmp/ulnic-$USER
where /dev/shm is smaller than 1 GiB).
QEMU runs at the ordinary priority and its node daemon raises it to nice -10 while the
host starves it (logged in ulnicd.log); $ULNIC_NIC_NICE=N fixes it at N instead.
$ULNIC_NIC_AFFINITY=node at node start pins node K's QEMU to CPU K mod N (of the N CPUs
`ulnic` may use); a process that attaches to the node then runs on that CPU too (not its
children; $ULNIC_AFFINITY=off in the process, or an affinity it chose, keeps its own).
)";

std::string usage();                      // every command (kCommands, below)
int print_help(const std::string& name);  // one command's, on stdout

struct Args {
  std::vector<std::string> positional;
  std::string cluster;
  uint32_t node = 0;
  bool json = false, follow = false, verbose_fw = false, no_fabric = false, node_given = false, cost = false;
  uint32_t count = 0;  // cluster up -n
  double test_drop = 0;
  bool with_switch = false;
  std::string faults, pcap, bridge_listen, names;
  std::vector<std::string> bridge_peers;
  uint32_t first = 0, total = 0;  // cluster up across machines
  std::string firmware;
  uint32_t slots = 8;
  uint64_t slot_size = 256ull << 20;
  uint32_t heartbeat_us = 100'000;
  uint32_t timeout_s = 120;
  uint32_t boot_timeout_s = 30;
  uint32_t fabric_ports = 2;  // fwtest
  std::vector<std::string> qemu_args;
  std::vector<std::string> passthrough;  // after "--"
};

// Control characters as escapes: a message stays on one line.
std::string escaped(const std::string& v) {
  std::string o;
  for (char ch : v) {
    auto c = static_cast<unsigned char>(ch);
    if (c == '\n') o += "\\n";
    else if (c == '\t') o += "\\t";
    else if (c < 0x20 || c == 0x7f) {
      char b[8];
      std::snprintf(b, sizeof b, "\\x%02x", c);
      o += b;
    } else o += ch;
  }
  return o;
}

// A user's string inside a message: quoted, escaped, cut after 64
// characters (an argument may be anything, a megabyte included).
std::string shown(const std::string& v) {
  return "'" + escaped(v.substr(0, 64)) + (v.size() > 64 ? "'..." : "'");
}

[[noreturn]] void die(const std::string& msg, int code = 1) {
  std::fprintf(stderr, "ulnic: %s\n", msg.c_str());
  std::exit(code);
}

// A usage error: one line (whatever a quoted argument held), exit 2, before
// anything was started.
[[noreturn]] void usage_error(const std::string& msg) {
  die(escaped(msg) + " (ulnic --help)", 2);
}

// A decimal number lo..hi, all of `v`: no sign, blanks, base prefixes or junk.
uint64_t number(const std::string& opt, const std::string& v, uint64_t lo, uint64_t hi) {
  if (v.empty() || v.size() > 19 || v.find_first_not_of("0123456789") != std::string::npos)
    usage_error(opt + " needs a number, got " + shown(v));
  uint64_t n = std::strtoull(v.c_str(), nullptr, 10);
  if (n < lo || n > hi) usage_error(opt + " must be " + std::to_string(lo) + ".." + std::to_string(hi) + ", got " + v);
  return n;
}

struct Command {
  const char* name;      // what follows `ulnic`: one or two words
  const char* synopsis;  // its arguments, a line each ("" for none)
  const char* summary;   // what it does, a line each
  int (*run)(int argc, char** argv);
  size_t min_args = 0, max_args = 0;  // its plain arguments (ELF), as the synopsis shows them
};

// Whether the synopsis of `c` shows the option `opt` ("-c", "--slots", "--"):
// the options a command takes are the ones its help names, no others.
bool takes_option(const Command& c, const std::string& opt) {
  const std::string syn = c.synopsis;
  size_t i = 0;
  while (i < syn.size()) {
    size_t b = syn.find_first_not_of(" \n", i);
    if (b == std::string::npos) break;
    size_t e = syn.find_first_of(" \n", b);
    if (e == std::string::npos) e = syn.size();
    std::string w = syn.substr(b, e - b);
    i = e;
    w.erase(0, w.find_first_not_of('['));
    while (!w.empty() && (w.back() == ']' || w.back() == '.')) w.pop_back();
    if (w.size() > 1 && w[0] == '-' && w == opt) return true;
  }
  return false;
}

// A node's, a cluster's or fwtest's command line, checked against what the
// command's help shows (its options, its plain arguments, the values'
// ranges) and the cluster name: anything else is a usage error, found
// before any work starts.
Args parse(const Command& cmd, int argc, char** argv) {
  const int first = std::strchr(cmd.name, ' ') ? 3 : 2;
  Args a;
  const char* env = std::getenv("ULNIC_CLUSTER");
  a.cluster = env && *env ? env : "default";
  const std::string name = cmd.name;
  for (int i = first; i < argc; ++i) {
    std::string s = argv[i];
    std::string inline_value;
    bool has_inline = false;
    if (s.rfind("--", 0) == 0 && s.size() > 2)
      if (size_t eq = s.find('='); eq != std::string::npos)
        inline_value = s.substr(eq + 1), s.resize(eq), has_inline = true;
    if (s == "--cluster") s = "-c";
    else if (s == "--node") s = "-n";
    else if (s == "--follow") s = "-f";
    if (s == "-h" || s == "--help") std::exit(print_help(name));
    if (s.size() > 1 && s[0] == '-') {
      if (!takes_option(cmd, s))
        usage_error("ulnic " + name + " takes no option " + shown(s));
    } else {
      if (a.positional.size() == cmd.max_args)
        usage_error("ulnic " + name + ": unexpected argument " + shown(s));
      a.positional.push_back(s);
      continue;
    }
    auto value = [&]() -> std::string {
      if (has_inline) return std::exchange(has_inline, false), inline_value;
      if (i + 1 >= argc) usage_error(s + " needs a value");
      return argv[++i];
    };
    if (s == "--") {
      a.passthrough.assign(argv + i + 1, argv + argc);
      break;
    }
    if (s == "-c") a.cluster = value();
    else if (s == "-n") {
      // cluster up: the node count; elsewhere: a node id.
      if (name == "cluster up") a.node = uint32_t(number(s, value(), 1, abi::kMaxNodes));
      else a.node = uint32_t(number(s, value(), 0, abi::kMaxNodes - 1));
      a.node_given = true;
    }
    else if (s == "--json") a.json = true;
    else if (s == "-f") a.follow = true;
    else if (s == "--firmware") a.firmware = value();
    else if (s == "--slots") a.slots = uint32_t(number(s, value(), 1, abi::kMaxSlots));
    else if (s == "--slot-size") {
      uint64_t mib = number(s, value(), 1, 1024);
      if (mib & (mib - 1)) usage_error("--slot-size must be a power of two (MiB), got " + std::to_string(mib));
      a.slot_size = mib << 20;
    }
    else if (s == "--heartbeat-us") a.heartbeat_us = uint32_t(number(s, value(), 1'000, 10'000'000));
    else if (s == "--timeout") a.timeout_s = uint32_t(number(s, value(), 1, 86'400));
    else if (s == "--fabric-ports") a.fabric_ports = uint32_t(number(s, value(), 2, abi::kMaxNodes));
    else if (s == "--boot-timeout") a.boot_timeout_s = uint32_t(number(s, value(), 1, 3'600));
    else if (s == "--verbose-fw") a.verbose_fw = true;
    else if (s == "--test-drop") {
      std::string v = value();
      char* end = nullptr;
      double f = v.empty() || v.find_first_not_of("0123456789.") != std::string::npos ? -1 : std::strtod(v.c_str(), &end);
      if (f < 0 || f > 0.99 || !end || *end) usage_error("--test-drop needs a fraction 0..0.99, got " + shown(v));
      a.test_drop = f;
    }
    else if (s == "--switch") a.with_switch = true;
    else if (s == "--faults") a.faults = value(), a.with_switch = true;
    else if (s == "--pcap") a.pcap = value(), a.with_switch = true;
    else if (s == "--bridge-listen") a.bridge_listen = value(), a.with_switch = true;
    else if (s == "--bridge-peer") a.bridge_peers.push_back(value()), a.with_switch = true;
    else if (s == "--names") a.names = value();
    else if (s == "--first") a.first = uint32_t(number(s, value(), 0, abi::kMaxNodes - 1));
    else if (s == "--total") a.total = uint32_t(number(s, value(), 1, abi::kMaxNodes));
    else if (s == "--no-fabric") a.no_fabric = true;
    else if (s == "--cost") a.cost = true;
    else if (s == "--qemu-arg") a.qemu_args.push_back(value());
    if (has_inline) usage_error(s + " takes no value");
  }
  if (a.positional.size() < cmd.min_args)
    usage_error("ulnic " + name + " needs " + (cmd.min_args == 1 ? "an ELF" : "more arguments"));
  if (auto ok = board::check_cluster_name(a.cluster); !ok) usage_error(ok.error().message);
  return a;
}

std::string hex(uint64_t v) {
  char b[24];
  std::snprintf(b, sizeof b, "0x%llx", static_cast<unsigned long long>(v));
  return b;
}

const char* counter_name(uint32_t i) {
  static const char* const names[] = {
      "loop_iterations", "wfi",           "timer_wakeups",   "ext_wakeups",     "pcie_devices",
      "pcie_ignored",    "bad_boot_config", "ctrl_commands", "sq_entries",      "cq_entries",
      "copy_bytes",      "bad_descriptors", "slot_cutoffs",  "host_rings",      "slot_wakeups",
      "slot_dormant",    "link_tx_data",    "link_rx_data",  "link_retransmits", "link_duplicates",
      "link_out_of_order", "link_bad_packets", "link_unreachable", "link_restarts", "puts_done",
      "puts_refused",    "vmmc_sends",      "vmmc_violations", "vmmc_notifications", "events_dropped",
      "mail_out",        "mail_in",         "mail_dropped",
      "vi_ops",          "vi_recvs",        "vi_refused",      "vi_connects",
      "am_messages",     "am_refused",      "op_waits",        "verdicts_dropped",
      "spin_window_us",  "link_placed",     "verdict_timeouts",
      "unet_messages",   "unet_drops",      "unet_bad_tag",
      "link_held",       "link_sacked",
      "unet_tlb_hits",   "unet_tlb_misses", "unet_tlb_fills",
      "wake_sleeps",     "vi_conn_dropped"};
  static_assert(sizeof names / sizeof names[0] == abi::kCounterCount, "a name for every counter");
  return i < sizeof names / sizeof names[0] ? names[i] : "?";
}

using ulnic::json_escape;

std::string cstr(const char* s, size_t cap) { return std::string(s, strnlen(s, cap)); }

// The cost plugin's counts (--cost): instructions by phase, and by protocol
// operation and phase; "cost": null when the board runs without the plugin.
void print_cost_json(const abi::CostBlock& c) {
  auto u = [](uint64_t v) { return static_cast<unsigned long long>(v); };
  if (c.magic != abi::kCostMagic) {
    std::printf(",\n \"cost\": null");
    return;
  }
  std::printf(",\n \"cost\": {\"total\": %llu, \"spans\": %llu, \"bad_markers\": %llu, \"phases\": {", u(c.total),
              u(c.spans), u(c.bad_markers));
  for (uint32_t p = 0; p < abi::kPhaseCount; ++p)
    std::printf("%s\"%s\": {\"insns\": %llu, \"entries\": %llu}", p ? ", " : "", abi::cost_phase_name(p),
                u(c.phase[p]), u(c.entries[p]));
  std::printf("},\n  \"ops\": {");
  for (uint32_t o = 0; o < abi::kCostOpCount; ++o) {
    std::printf("%s\"%s\": {\"spans\": %llu", o ? ",\n   " : "", abi::cost_op_name(o), u(c.ops[o].spans));
    for (uint32_t p = 1; p < abi::kPhaseCount; ++p)
      std::printf(", \"%s\": %llu", abi::cost_phase_name(p), u(c.ops[o].insns[p]));
    std::printf(", \"last\": {");
    for (uint32_t p = 1; p < abi::kPhaseCount; ++p)
      std::printf("%s\"%s\": %llu", p > 1 ? ", " : "", abi::cost_phase_name(p), u(c.ops[o].last[p]));
    std::printf("}}");
  }
  std::printf("}}");
}

void print_status_json(const std::string& cluster, const board::NodeInfo& n) {
  const abi::StatusBlock& s = n.status;
  std::printf("{\"cluster\": \"%s\", \"node\": %u, \"qemu_running\": %s, \"pid\": %d, \"vm_state\": \"%s\",\n",
              json_escape(cluster).c_str(), n.node, n.running ? "true" : "false", int(n.pid), n.vm_state.c_str());
  std::printf(" \"daemon_pid\": %d,\n", int(n.daemon_pid));
  std::printf(" \"state\": \"%s\", \"build_id\": \"%s\", \"version\": \"%s\", \"abi_version\": %u,\n",
              board::state_name(s.state), json_escape(cstr(s.build_id, sizeof s.build_id)).c_str(),
              json_escape(cstr(s.version, sizeof s.version)).c_str(), s.abi_version);
  std::printf(" \"boot_count\": %llu, \"flash_seq\": %llu, \"uptime_us\": %llu, \"heartbeat\": %llu,",
              static_cast<unsigned long long>(s.boot_count), static_cast<unsigned long long>(s.flash_seq),
              static_cast<unsigned long long>(s.uptime_us), static_cast<unsigned long long>(s.heartbeat));
  if (n.heartbeat_checked) std::printf(" \"heartbeat_advancing\": %s,", n.heartbeat_advancing ? "true" : "false");
  std::printf("\n \"boot_config\": %u, \"node_id\": %u, \"num_slots\": %u, \"slots\": [", s.boot_config, s.node_id,
              s.num_slots);
  for (uint32_t k = 0; k < abi::kMaxSlots; ++k)
    std::printf("%s{\"addr\": %llu, \"size\": %llu}", k ? ", " : "",
                static_cast<unsigned long long>(s.slots[k].bar_addr),
                static_cast<unsigned long long>(s.slots[k].bar_size));
  std::printf("],\n \"fabric\": {\"addr\": %llu, \"size\": %llu, \"peer_id\": %u, \"vectors\": %u},\n",
              static_cast<unsigned long long>(s.fabric_bar_addr), static_cast<unsigned long long>(s.fabric_bar_size),
              s.fabric_peer_id, s.fabric_vectors);
  std::printf(" \"trap\": {\"cause\": %llu, \"pc\": %llu, \"tval\": %llu, \"ra\": %llu, \"sp\": %llu},\n",
              static_cast<unsigned long long>(s.trap_cause), static_cast<unsigned long long>(s.trap_pc),
              static_cast<unsigned long long>(s.trap_tval), static_cast<unsigned long long>(s.trap_ra),
              static_cast<unsigned long long>(s.trap_sp));
  std::printf(" \"links\": [");
  for (size_t k = 0; k < n.links.size(); ++k) {
    const abi::LinkStatus& l = n.links[k];
    std::printf("%s{\"peer\": %zu, \"state\": %u, \"next_seq\": %u, \"acked\": %u, \"expected\": %u, "
                "\"tx_data\": %llu, \"rx_data\": %llu, \"retransmits\": %llu, \"duplicates\": %llu, "
                "\"rto_us\": %u, \"srtt_us\": %u, \"timeouts\": %u}",
                k ? ", " : "", k, l.state, l.next_seq, l.acked, l.expected, static_cast<unsigned long long>(l.tx_data),
                static_cast<unsigned long long>(l.rx_data), static_cast<unsigned long long>(l.retransmits),
                static_cast<unsigned long long>(l.duplicates), l.rto_us, l.srtt_us, l.timeouts);
  }
  std::printf("],\n \"counters\": {");
  for (uint32_t i = 0; i < abi::kCounterCount; ++i)
    std::printf("%s\"%s\": %llu", i ? ", " : "", counter_name(i), static_cast<unsigned long long>(s.counters[i]));
  std::printf("}");
  // The wake plugin (abi/wake.h): the doorbells it polls (0: the NIC sleeps
  // in WFI), the sleeps it took, how many a doorbell ended, and the times it
  // gave the host CPU away.
  std::printf(",\n \"wake_plugin\": {\"vectors\": %u, \"sleeps\": %llu, \"rung\": %llu, \"yields\": %llu}",
              n.wake.vectors, static_cast<unsigned long long>(n.wake.sleeps),
              static_cast<unsigned long long>(n.wake.rung), static_cast<unsigned long long>(n.wake.yields));
  // Its copy engine: the regions it maps (bit k: slot k; bit 8: the fabric),
  // the copies it made for the firmware and their bytes, and the copies it
  // refused (an end outside every region: the firmware copied those itself).
  std::printf(",\n \"copy_engine\": {\"mapped\": %u, \"copies\": %llu, \"bytes\": %llu, \"refused\": %llu}",
              n.copy.mapped, static_cast<unsigned long long>(n.copy.copies),
              static_cast<unsigned long long>(n.copy.bytes), static_cast<unsigned long long>(n.copy.refused));
  print_cost_json(n.cost);
  std::printf("}\n");
}

// "file:line" of a firmware pc, if the ELF and llvm-addr2line are at hand.
std::string symbolize(const std::string& elf, uint64_t pc) {
  std::string tool = ulnic::find_in_path("llvm-addr2line-16");
  if (tool.empty() || elf.empty() || pc == 0) return "";
  std::string cmd = tool + " -f -C -e '" + elf + "' " + hex(pc) + " 2>/dev/null";
  FILE* f = ::popen(cmd.c_str(), "r");
  if (!f) return "";
  char fn[256] = "", loc[512] = "";
  if (!std::fgets(fn, sizeof fn, f) || !std::fgets(loc, sizeof loc, f)) fn[0] = loc[0] = 0;
  ::pclose(f);
  std::string out = std::string(fn) + " at " + loc;
  for (auto& c : out)
    if (c == '\n') c = ' ';
  return fn[0] && fn[0] != '?' ? out : "";
}

void print_status(const std::string& cluster, const board::NodeInfo& n) {
  const abi::StatusBlock& s = n.status;
  std::printf("node %u of cluster '%s'\n", n.node, cluster.c_str());
  std::printf("  qemu       %s", n.running ? ("pid " + std::to_string(n.pid)).c_str() : "not running");
  if (!n.vm_state.empty()) std::printf(", vm %s", n.vm_state.c_str());
  std::printf("\n");
  if (n.running)
    std::printf("  ulnicd     %s\n", n.daemon_pid ? ("pid " + std::to_string(n.daemon_pid)).c_str()
                                                  : "NOT RUNNING (ulnic node start restarts it)");
  if (s.magic != abi::kStatusMagic) {
    std::printf("  firmware   has not written its status block (state off)\n");
    return;
  }
  std::printf("  firmware   ulnic-fw %s  build %s  (ABI %u)\n", cstr(s.version, sizeof s.version).c_str(),
              cstr(s.build_id, sizeof s.build_id).c_str(), s.abi_version);
  std::printf("  state      %s", board::state_name(s.state));
  if (s.state == uint32_t(abi::FwState::kCrashed)) std::printf(": %s", board::describe_trap(s).c_str());
  std::printf("\n");
  if (s.state == uint32_t(abi::FwState::kCrashed))
    if (std::string where = symbolize(n.firmware_path, s.trap_pc); !where.empty())
      std::printf("             in %s\n", where.c_str());
  std::printf("  boot       #%llu, flash #%llu, boot config %s\n", static_cast<unsigned long long>(s.boot_count),
              static_cast<unsigned long long>(s.flash_seq),
              s.boot_config == abi::kBootConfigOk ? "ok" : "missing or bad (defaults)");
  std::printf("  uptime     %.3f s   heartbeat %llu%s\n", double(s.uptime_us) / 1e6,
              static_cast<unsigned long long>(s.heartbeat),
              !n.heartbeat_checked ? "" : n.heartbeat_advancing ? " (advancing)" : " (STUCK)");
  std::printf("  slots      %u", s.num_slots);
  for (uint32_t k = 0; k < abi::kMaxSlots; ++k)
    if (s.slots[k].bar_size)
      std::printf("%s%u@%s", k ? " " : "  ", k, hex(s.slots[k].bar_addr).c_str());
  if (s.num_slots) std::printf("  (%llu MiB each)", static_cast<unsigned long long>(s.slots[0].bar_size >> 20));
  std::printf("\n");
  if (s.fabric_bar_size)
    std::printf("  fabric     peer id %u, %llu MiB at %s, %u MSI-X vectors\n", s.fabric_peer_id,
                static_cast<unsigned long long>(s.fabric_bar_size >> 20), hex(s.fabric_bar_addr).c_str(),
                s.fabric_vectors);
  else
    std::printf("  fabric     none\n");
  bool header = false;
  for (size_t k = 0; k < n.links.size(); ++k) {
    const abi::LinkStatus& l = n.links[k];
    if (k == s.node_id || (l.state == 0 && !l.tx_data && !l.rx_data)) continue;
    if (!header)
      std::printf("  links      peer  state            tx      rx  retransmits  dup/ooo/held  timeouts  srtt us  rto us\n");
    header = true;
    static const char* const states[] = {"idle", "up", "UNREACHABLE"};
    std::printf("             %4zu  %-11s %7llu %7llu %12llu %13llu %9u %8u %7u\n", k,
                l.state < 3 ? states[l.state] : "?", static_cast<unsigned long long>(l.tx_data),
                static_cast<unsigned long long>(l.rx_data), static_cast<unsigned long long>(l.retransmits),
                static_cast<unsigned long long>(l.duplicates), l.timeouts, l.srtt_us, l.rto_us);
  }
  std::printf("  counters  ");
  for (uint32_t i = 0; i < abi::kCounterCount; ++i)
    std::printf(" %s=%llu", counter_name(i), static_cast<unsigned long long>(s.counters[i]));
  std::printf("\n");
  if (n.cost.magic == abi::kCostMagic) {
    std::printf("  cost       %llu instructions, %llu work items;", static_cast<unsigned long long>(n.cost.total),
                static_cast<unsigned long long>(n.cost.spans));
    for (uint32_t p = 0; p < abi::kPhaseCount; ++p)
      std::printf(" %s=%llu", abi::cost_phase_name(p), static_cast<unsigned long long>(n.cost.phase[p]));
    std::printf("\n");
  }
}

board::BoardSpec spec_from(const Args& a) {
  board::BoardSpec b;
  b.node = a.node;
  b.num_slots = a.slots;
  b.slot_size = a.slot_size;
  b.extra_args = a.qemu_args;
  b.cost = a.cost;
  return b;
}

int cmd_start(const Args& a) {
  board::StartOptions o;
  o.cluster = a.cluster;
  o.board = spec_from(a);
  o.firmware = a.firmware.empty() ? board::default_firmware() : a.firmware;
  o.heartbeat_us = a.heartbeat_us;
  o.boot_timeout = std::chrono::seconds(a.boot_timeout_s);
  o.boot_flags = a.verbose_fw ? uint32_t(abi::kBootFlagVerbose) : 0u;
  o.fabric = !a.no_fabric;
  o.test_rx_drop = a.test_drop;
  auto r = board::start_node(o);
  if (!r) die(r.error().message);
  if (r->daemon_restarted) {
    std::printf("node %u of cluster '%s': QEMU pid %d was running without its ulnicd: ulnicd restarted\n", a.node,
                a.cluster.c_str(), int(r->pid));
    return 0;
  }
  for (const auto& note : r->notes) std::printf("note: %s\n", note.c_str());
  std::printf("node %u of cluster '%s' started: QEMU pid %d, firmware %s, build %s\n", a.node, a.cluster.c_str(),
              int(r->pid), board::state_name(r->status.state), r->status.build_id);
  if (r->status.state == uint32_t(abi::FwState::kCrashed)) {
    std::printf("the firmware crashed during boot: %s\n", board::describe_trap(r->status).c_str());
    return 1;
  }
  return 0;
}

int cmd_flash(const Args& a) {
  auto r = board::flash_node(a.cluster, a.node, a.positional[0], std::chrono::seconds(a.boot_timeout_s));
  if (!r) die(r.error().message);
  std::printf("flashed node %u: build %s -> %s (flash #%llu), firmware %s\n", a.node, r->old_build_id.c_str(),
              r->new_build_id.c_str(), static_cast<unsigned long long>(r->flash_seq),
              board::state_name(r->status.state));
  if (r->status.state == uint32_t(abi::FwState::kCrashed)) {
    std::printf("the new firmware crashed: %s\n", board::describe_trap(r->status).c_str());
    return 1;
  }
  return 0;
}

int cmd_status(const Args& a) {
  auto r = board::query_node(a.cluster, a.node, true);
  if (!r) die(r.error().message);
  if (a.json) print_status_json(a.cluster, *r);
  else print_status(a.cluster, *r);
  if (!r->running) return 3;
  return r->status.state == uint32_t(abi::FwState::kRunning) ? 0 : 4;
}

int cmd_log(const Args& a) {
  board::NodePaths p = board::node_paths(a.cluster, a.node);
  std::ifstream in(p.serial_log);
  if (!in) die("no serial log for node " + std::to_string(a.node) + " of cluster '" + a.cluster + "' (not running?)");
  std::string line;
  for (;;) {
    while (std::getline(in, line)) {
      if (!line.empty() && line.back() == '\r') line.pop_back();
      std::printf("%s\n", line.c_str());
    }
    if (!a.follow) return 0;
    std::fflush(stdout);
    in.clear();
    std::this_thread::sleep_for(200ms);
    if (!board::live_qemu(p)) return 0;
  }
}

// stdin/stdout <-> the node's gdbstub socket, for `target remote | ...`.
int cmd_gdb_pipe(const Args& a) {
  auto s = ulnic::connect_unix(board::node_paths(a.cluster, a.node).gdb);
  if (!s) die(s.error().message);
  pollfd fds[2] = {{0, POLLIN, 0}, {s->get(), POLLIN, 0}};
  char buf[4096];
  for (;;) {
    if (::poll(fds, 2, -1) < 0) return 1;
    for (int i = 0; i < 2; ++i) {
      if (!(fds[i].revents & (POLLIN | POLLHUP))) continue;
      ssize_t n = ::read(fds[i].fd, buf, sizeof buf);
      if (n <= 0) return 0;
      int out = i == 0 ? s->get() : 1;
      for (ssize_t off = 0; off < n;) {
        ssize_t w = ::write(out, buf + off, size_t(n - off));
        if (w <= 0) return 1;
        off += w;
      }
    }
  }
}

// Replaces this process with argv (argv[0] looked up in PATH unless it has
// a '/'); returns only if that failed, errno saying why.
void exec_argv(std::vector<std::string> argv) {
  std::vector<char*> c;
  for (auto& s : argv) c.push_back(s.data());
  c.push_back(nullptr);
  ::execvp(c[0], c.data());
}

int cmd_gdb(const Args& a) {
  board::NodePaths p = board::node_paths(a.cluster, a.node);
  if (!board::live_qemu(p)) die("node " + std::to_string(a.node) + " of cluster '" + a.cluster + "' is not running");
  std::string gdb = ulnic::find_in_path("gdb-multiarch");
  if (gdb.empty()) die("gdb-multiarch not found: install the Debian package gdb-multiarch (toolchain/install-deps.sh)");
  std::string elf = a.positional.empty() ? p.firmware : a.positional[0];
  std::error_code ec;
  std::string self = std::filesystem::read_symlink("/proc/self/exe", ec).string();
  // gdb speaks to a pipe; the pipe is us, relaying to the node's gdbstub socket.
  std::string pipe = "target remote | '" + self + "' node gdb-pipe -c " + a.cluster + " -n " + std::to_string(a.node);
  // gdb gives a remote target 2 s to answer each packet; the gdbstub is
  // served by QEMU's main loop, which a loaded host can leave waiting for a
  // CPU longer than that (the NIC's priority is raised only while its vCPU
  // starves, board/node.h), and gdb then gives up with the NIC stopped.
  std::vector<std::string> argv = {gdb, "-q", "-ex", "set architecture riscv:rv64", "-ex", "set remotetimeout 30",
                                   "-ex", pipe};
  argv.insert(argv.end(), a.passthrough.begin(), a.passthrough.end());
  argv.push_back(elf);
  exec_argv(std::move(argv));
  die("cannot run " + gdb + ": " + std::strerror(errno));
}

int cmd_stop(const Args& a) {
  auto r = board::stop_node(a.cluster, a.node);
  if (!r) die(r.error().message);
  for (const auto& note : *r) std::printf("note: %s\n", note.c_str());
  std::printf("node %u of cluster '%s' stopped\n", a.node, a.cluster.c_str());
  return 0;
}

int cmd_list(const Args& a) {
  auto nodes = board::list_nodes(a.cluster);
  if (nodes.empty()) std::printf("cluster '%s' has no nodes\n", a.cluster.c_str());
  for (uint32_t n : nodes) {
    auto r = board::query_node(a.cluster, n, false);
    if (!r) std::printf("node %u: %s\n", n, r.error().message.c_str());
    else
      std::printf("node %u: qemu %s, firmware %s, build %s\n", n, r->running ? "up" : "down",
                  board::state_name(r->status.state), r->status.build_id);
  }
  return 0;
}

int cmd_fwtest(const Args& a) {
  board::FwTestOptions o;
  o.elf = a.positional[0];
  o.board = spec_from(a);
  o.fabric = !a.no_fabric;
  o.fabric_ports = a.fabric_ports;
  o.timeout = std::chrono::seconds(a.timeout_s);
  auto r = board::run_firmware_test(o);
  if (!r) die(r.error().message);
  if (*r != 0) std::fprintf(stderr, "ulnic fwtest: %s exited with status %d\n", o.elf.c_str(), *r);
  return *r;
}

// The hosts file `--names` asks for (board::hosts_path; host/vipl reads it):
// one "name node" line per name, for this machine's n nodes from `first`, or
// for all `total` nodes of the cluster. Dies on a list that fits neither.
std::string hosts_file(const std::string& names, uint32_t first, uint32_t n, uint32_t total) {
  std::vector<std::string> list;
  for (size_t at = 0; at <= names.size();) {
    size_t end = std::min(names.find(',', at), names.size());
    list.push_back(names.substr(at, end - at));
    at = end + 1;
  }
  if (list.size() != n && list.size() != total)
    die("--names: give " + std::to_string(n) + " names (nodes " + std::to_string(first) + ".." +
            std::to_string(first + n - 1) + ")" +
            (total > n ? " or " + std::to_string(total) + " (every node of the cluster)" : "") + ", not " +
            std::to_string(list.size()),
        2);
  const uint32_t base = list.size() == total ? 0 : first;
  std::string text = "# name node: written by ulnic cluster up --names; more lines may be added\n";
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string& name = list[i];
    if (name.empty() || name.size() > 255 || name.find_first_of(" \t\n#") != std::string::npos)
      usage_error("--names: " + shown(name) + " is not a name (1..255 characters, no blanks or '#')");
    for (size_t j = 0; j < i; ++j)
      if (strcasecmp(list[j].c_str(), name.c_str()) == 0) usage_error("--names: " + shown(name) + " is given twice");
    text += name + " " + std::to_string(base + i) + "\n";
  }
  return text;
}

int cmd_cluster_up(Args a) {
  uint32_t n = a.node;  // "-n" means the node count here
  if (!a.node_given) usage_error("ulnic cluster up needs -n N (1..64), the number of nodes");
  // Across machines: this machine runs nodes first..first+n-1 of `total`.
  uint32_t total = a.total ? a.total : a.first + n;
  if (a.first + n > total || total > abi::kMaxNodes) usage_error("--first/--total: nodes must fit in 0..total-1 (<= 64)");
  if (total > n && a.bridge_peers.empty()) usage_error("nodes on other machines need --bridge-peer IP:PORT=FIRST-LAST");
  // What the switch would refuse, refused here: before anything starts.
  if (auto f = ulnic::sw::parse_faults(a.faults); !f) usage_error("--faults: " + f.error().message);
  if (!a.bridge_listen.empty())
    if (auto b = ulnic::sw::parse_addr(a.bridge_listen); !b) usage_error("--bridge-listen: " + b.error().message);
  for (const auto& p : a.bridge_peers)
    if (auto b = ulnic::sw::parse_bridge_peer(p); !b) usage_error("--bridge-peer: " + b.error().message);
  if (!a.pcap.empty()) {
    std::error_code ec;
    auto dir = std::filesystem::absolute(a.pcap, ec).parent_path();
    if (a.pcap.back() == '/' || !std::filesystem::is_directory(dir, ec))
      usage_error("--pcap " + shown(a.pcap) + ": not a file in an existing directory");
  }
  const std::string hosts = a.names.empty() ? "" : hosts_file(a.names, a.first, n, total);
  const std::string firmware = a.firmware.empty() ? board::default_firmware() : a.firmware;
  // A bad image, or a runtime directory without room for every board and the
  // fabric, is refused before a fabric, a switch or a node starts.
  if (auto img = board::load_elf_file(firmware); !img) die(img.error().message);
  if (auto ok = board::check_space("cluster '" + a.cluster + "' (" + std::to_string(n) + (n == 1 ? " node" : " nodes") + " and its fabric)",
                                   n * board::node_space() + board::fabric_space(a.with_switch ? total + 1 : total));
      !ok)
    die(ok.error().message);
  if (auto old = board::list_nodes(a.cluster); !old.empty()) {
    bool live = false;
    for (uint32_t k : old) live |= board::live_qemu(board::node_paths(a.cluster, k)) != 0;
    if (live) die("cluster '" + a.cluster + "' is already up: ulnic cluster down -c " + a.cluster + " first");
    // Every board of a previous run is dead (a crash, a reboot of the
    // machine's tmpfs survivors): clean up after it and start afresh.
    std::printf("note: cluster '%s' has files of %zu dead nodes from a crashed run; cleaning up\n", a.cluster.c_str(),
                old.size());
    for (uint32_t k : old) (void)board::stop_node(a.cluster, k);
    board::stop_fabric(a.cluster);
    board::retire_cluster_if_empty(a.cluster);
  }
  board::StartOptions o;
  o.cluster = a.cluster;
  o.firmware = firmware;
  o.heartbeat_us = a.heartbeat_us;
  o.boot_timeout = std::chrono::seconds(a.boot_timeout_s);
  o.fabric_spec.ports = a.with_switch ? total + 1 : total;
  o.num_nodes = total;
  o.fabric_spec.with_switch = a.with_switch;
  o.test_rx_drop = a.test_drop;
  if (a.with_switch) {
    std::vector<std::string> notes;
    board::FabricSpec spec = o.fabric_spec;
    spec.vectors = o.board.fabric_vectors;
    std::vector<std::string> bridge;
    if (!a.bridge_listen.empty()) bridge = {"--bridge-listen", a.bridge_listen};
    for (const auto& p : a.bridge_peers) bridge.insert(bridge.end(), {"--bridge-peer", p});
    if (auto g = board::ensure_fabric(a.cluster, a.first, spec, notes); !g) die(g.error().message);
    if (auto r = board::start_switch(a.cluster, a.faults, a.pcap, bridge); !r) {
      board::retire_cluster_if_empty(a.cluster);
      die(r.error().message);
    }
    std::printf("switch up%s%s%s%s\n", a.faults.empty() ? "" : ", faults ", a.faults.c_str(),
                a.pcap.empty() ? "" : ", capturing to ", a.pcap.c_str());
  }
  o.board.num_slots = a.slots;
  o.board.slot_size = a.slot_size;
  o.board.extra_args = a.qemu_args;
  o.board.cost = a.cost;
  for (uint32_t k = a.first; k < a.first + n; ++k) {
    o.board.node = k;
    auto r = board::start_node(o);
    if (!r) {
      std::fprintf(stderr, "ulnic: node %u: %s\n", k, r.error().message.c_str());
      if (k > a.first) std::fprintf(stderr, "stopping the nodes started so far\n");
      for (uint32_t j = a.first; j < k; ++j) (void)board::stop_node(a.cluster, j);
      board::retire_cluster_if_empty(a.cluster);
      return 1;
    }
    for (const auto& note : r->notes) std::printf("note: %s\n", note.c_str());
    std::printf("[%u/%u] node %u up: QEMU pid %d, firmware %s\n", k - a.first + 1, n, k, int(r->pid),
                board::state_name(r->status.state));
    std::fflush(stdout);
  }
  if (!hosts.empty()) {
    // Whole or not at all for a program that reads it meanwhile.
    const std::string path = board::hosts_path(a.cluster), tmp = path + ".new";
    std::ofstream out(tmp);
    out << hosts;
    out.close();
    if (!out || std::rename(tmp.c_str(), path.c_str()) != 0) die("cannot write " + path);
    std::printf("host names in %s\n", path.c_str());
  }
  std::printf("cluster '%s': %u nodes up\n", a.cluster.c_str(), n);
  return 0;
}

int cmd_cluster_status(const Args& a) {
  auto nodes = board::list_nodes(a.cluster);
  if (nodes.empty()) die("cluster '" + a.cluster + "' has no nodes");
  int rc = 0;
  if (a.json) std::printf("[");
  bool first = true;
  for (uint32_t n : nodes) {
    auto r = board::query_node(a.cluster, n, true);
    if (!r) {
      rc = 1;
      if (!a.json) std::printf("node %-3u %s\n", n, r.error().message.c_str());
      continue;
    }
    if (!r->running || r->status.state != uint32_t(abi::FwState::kRunning)) rc = 4;
    if (a.json) {
      if (!first) std::printf(",\n");
      print_status_json(a.cluster, *r);
    } else {
      std::printf("node %-3u qemu %-5s firmware %-8s build %.12s  uptime %8.1f s  heartbeat %s\n", n,
                  r->running ? "up" : "DOWN", board::state_name(r->status.state), r->status.build_id,
                  double(r->status.uptime_us) / 1e6,
                  !r->heartbeat_checked ? "-" : r->heartbeat_advancing ? "advancing" : "STUCK");
    }
    first = false;
  }
  if (a.json) std::printf("]\n");
  std::ifstream sw(board::switch_stats_path(a.cluster));
  std::string stats((std::istreambuf_iterator<char>(sw)), std::istreambuf_iterator<char>());
  if (!a.json && !stats.empty()) std::printf("switch   %s", stats.c_str());
  return rc;
}

int cmd_cluster_down(const Args& a) {
  auto nodes = board::list_nodes(a.cluster);
  if (nodes.empty()) die("cluster '" + a.cluster + "' has no nodes");
  int rc = 0;
  for (uint32_t n : nodes) {
    auto r = board::stop_node(a.cluster, n);
    if (!r) rc = 1, std::fprintf(stderr, "ulnic: node %u: %s\n", n, r.error().message.c_str());
  }
  std::printf("cluster '%s' down (%zu nodes stopped)\n", a.cluster.c_str(), nodes.size());
  return rc;
}

void step(const char* what) { std::printf("\n\033[1m== %s\033[0m\n", what), std::fflush(stdout); }

int cmd_demo() {
  Args a;
  a.cluster = "demo";
  std::string fw = board::default_firmware(), alt = board::default_firmware("ulnic-fw-alt.elf");
  if (!board::list_nodes(a.cluster).empty()) (void)board::stop_node(a.cluster, 0);
  step("ulnic node start -c demo -n 0   (QEMU virt board: 16 MiB SRAM, 8 host slots, fabric)");
  a.firmware = fw;
  if (cmd_start(a) != 0) return 1;
  step("ulnic node status -c demo");
  cmd_status(a);
  step("ulnic node log -c demo   (the NIC's serial console)");
  cmd_log(a);
  step("copy_worker   (a host program: attach to a slot, register memory, 10000 verified copies by the NIC)");
  {
    ::setenv("ULNIC_CLUSTER", a.cluster.c_str(), 1);
    auto pid = ulnic::spawn_child({board::tool_path("copy_worker"), "--ops", "10000", "--max-size", "8192"});
    auto rc = pid ? ulnic::wait_child(*pid, std::chrono::seconds(120)) : ulnic::Result<int>(std::unexpected(pid.error()));
    if (!rc || *rc != 0) std::printf("copy_worker failed%s\n", rc ? "" : (": " + rc.error().message).c_str());
  }
  step("ulnic node status -c demo   (counters: descriptors, completions, bytes copied, doorbells)");
  cmd_status(a);
  step("ulnic node flash -c demo ulnic-fw-alt.elf   (reflash the running NIC: a different build)");
  a.positional = {alt};
  int rc = cmd_flash(a);
  a.positional.clear();
  step("ulnic node status -c demo");
  cmd_status(a);
  step("ulnic node stop -c demo");
  cmd_stop(a);
  // Part two: two nodes on one fabric, and VMMC between them.
  Args c;
  c.cluster = "demo-vmmc";
  c.node = 2;
  c.node_given = true;
  c.slot_size = 16ull << 20;
  c.firmware = fw;
  if (!board::list_nodes(c.cluster).empty()) (void)cmd_cluster_down(c);
  step("ulnic cluster up -n 2 -c demo-vmmc   (two NICs, one fabric, a reliable link between them)");
  if (cmd_cluster_up(c) != 0) return 1;
  step("vmmc_example   (VMMC: node 1 exports an inbox and echoes; node 0 imports it, ping-pongs, sends 1 MiB)");
  {
    ::setenv("ULNIC_CLUSTER", c.cluster.c_str(), 1);
    ::setenv("ULNIC_NODE", "1", 1);
    auto server = ulnic::spawn_child({board::tool_path("vmmc_example"), "serve", "0"});
    ::setenv("ULNIC_NODE", "0", 1);
    auto client = ulnic::spawn_child({board::tool_path("vmmc_example"), "send", "1"});
    auto crc = client ? ulnic::wait_child(*client, std::chrono::seconds(120)) : ulnic::Result<int>(std::unexpected(client.error()));
    auto src = server ? ulnic::wait_child(*server, std::chrono::seconds(30)) : ulnic::Result<int>(std::unexpected(server.error()));
    if (!crc || *crc != 0 || !src || *src != 0) {
      std::printf("vmmc_example failed\n");
      rc = 1;
    }
  }
  step("vipl_example   (VIPL: a textbook VI client/server; node 1 waits, node 0 connects, ping-pongs, RDMA-writes)");
  {
    auto server = ulnic::spawn_child({board::tool_path("vipl_example"), "server", "nic1"});
    // No pause: until node 1 waits for it, the client's request is VIP_NO_MATCH and it asks again.
    auto client = ulnic::spawn_child({board::tool_path("vipl_example"), "client", "nic0", "node1"});
    auto crc = client ? ulnic::wait_child(*client, std::chrono::seconds(120)) : ulnic::Result<int>(std::unexpected(client.error()));
    auto src = server ? ulnic::wait_child(*server, std::chrono::seconds(30)) : ulnic::Result<int>(std::unexpected(server.error()));
    if (!crc || *crc != 0 || !src || *src != 0) {
      std::printf("vipl_example failed\n");
      rc = 1;
    }
  }
  step("ulnic cluster down -c demo-vmmc");
  cmd_cluster_down(c);
  return rc;
}


// ---- ulnic run: an AMUDP SPMD job (host/am/spmd_master.cpp does the work)

const char* g_job_command = "run";  // the job command running (run, fmrun, mpirun): its errors' prefix

[[noreturn]] void run_fail(const std::string& msg, int code = 2) {
  std::fprintf(stderr, "ulnic %s: %s\n", g_job_command, msg.c_str());
  std::exit(code);
}

int run_number(const std::string& opt, const std::string& v, int lo, int hi) {
  if (v.empty() || v.size() > 19 || v.find_first_not_of("0123456789") != std::string::npos)
    run_fail(opt + " needs a number, got " + shown(v));
  uint64_t n = std::strtoull(v.c_str(), nullptr, 10);
  if (n < uint64_t(lo) || n > uint64_t(hi))
    run_fail(opt + " must be " + std::to_string(lo) + ".." + std::to_string(hi) + ", got " + v);
  return int(n);
}

std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  size_t i = 0;
  while (i <= s.size()) {
    size_t j = s.find(',', i);
    if (j == std::string::npos) j = s.size();
    if (j > i) out.push_back(s.substr(i, j - i));
    i = j + 1;
  }
  return out;
}

// The nodes of the cluster whose QEMU runs, which must be 0..M-1: rank r
// goes to node r % M.
int nodes_up(const std::string& cluster) {
  std::vector<uint32_t> up;
  for (uint32_t n : board::list_nodes(cluster))
    if (board::live_qemu(board::node_paths(cluster, n))) up.push_back(n);
  if (up.empty())
    run_fail("cluster '" + cluster + "' has no nodes up (ulnic cluster up -n M -c " + cluster + ", or pass --nodes M)", 1);
  for (size_t k = 0; k < up.size(); ++k)
    if (up[k] != k) run_fail("cluster '" + cluster + "': node " + std::to_string(k) + " is not up; pass --nodes M", 1);
  return int(up.size());
}

// Walks the options before a job's program (`ulnic run`, `ulnic fmrun`):
// option(name, value) takes one (value() reads its argument) and returns
// false for one it does not know. Returns the program's index, or -1 for --help.
template <class Option>
int job_options(int argc, char** argv, Option option) {
  int i = 2;
  for (; i < argc; ++i) {
    std::string s = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) run_fail(s + " needs a value");
      return argv[++i];
    };
    if (s == "--") return i + 1;
    if (s.empty() || s[0] != '-') break;
    if (s == "-h" || s == "--help") return -1;
    if (!option(s, value)) run_fail("unknown option " + shown(s) + " (ulnic --help)");
  }
  return i;
}

// Options come before the program; everything from the program on is the
// program's (options that look like ours included).
int cmd_run(int argc, char** argv) {
  ulnic::am::SpmdJob job;
  const char* t = std::getenv("ULNIC_AM_TRANSPORT");
  job.transport = t && *t ? t : "udp";
  bool nodes_given = false;
  const char* env_cluster = std::getenv("ULNIC_CLUSTER");
  job.cluster = env_cluster ? env_cluster : "";
  bool cluster_given = false;
  int i = job_options(argc, argv, [&](const std::string& s, auto value) {
    if (s == "-n" || s == "--nproc") job.nproc = run_number(s, value(), 1, AMUDP_MAX_SPMDPROCS);
    else if (s == "--transport") job.transport = value();
    else if (s == "--depth") job.depth = run_number(s, value(), 1, AMUDP_MAX_NETWORKDEPTH);
    else if (s == "--hosts") job.hosts = split_list(value());
    else if (s == "--nodes") job.nodes = run_number(s, value(), 1, int(abi::kMaxNodes)), nodes_given = true;
    else if (s == "-c" || s == "--cluster") job.cluster = value(), cluster_given = true;
    else return false;
    return true;
  });
  if (i < 0) return print_help("run");
  if (i >= argc) run_fail("usage: ulnic run -n N [--transport T] [--depth K] [--hosts H,...] [--nodes M] [-c CLUSTER] PROG [ARGS...]");
  if (job.nproc == 0) run_fail("-n N (the number of workers) is required");
  if (job.transport != "udp" && job.transport != "vipl" && job.transport != "native")
    run_fail("unknown transport " + shown(job.transport) + " (udp, vipl or native)");
  if (cluster_given || !job.cluster.empty())
    if (auto ok = board::check_cluster_name(job.cluster); !ok) run_fail(escaped(ok.error().message));
  if (job.transport != "udp" && !nodes_given) {
    // The up nodes of this machine say nothing about a cluster that spans others.
    if (!job.hosts.empty()) run_fail("--hosts with transport " + job.transport + " needs --nodes M");
    job.nodes = nodes_up(job.cluster.empty() ? "default" : job.cluster);
  }
  job.argv.assign(argv + i, argv + argc);
  return ulnic::am::spmd_master_run(job);
}

// An FM job (host/fm/include/fm.h: the environment FM_initialize reads):
// N children of this process, each told its rank, the job size and a
// directory private to this run where the ranks exchange endpoint names.
int cmd_fmrun(int argc, char** argv) {
  g_job_command = "fmrun";
  int nproc = 0, nodes = 0;
  const char* env_cluster = std::getenv("ULNIC_CLUSTER");
  std::string cluster = env_cluster ? env_cluster : "";
  bool cluster_given = false;
  int i = job_options(argc, argv, [&](const std::string& s, auto value) {
    if (s == "-n" || s == "--nproc") nproc = run_number(s, value(), 1, FM_MAX_NODES);
    else if (s == "--nodes") nodes = run_number(s, value(), 1, int(abi::kMaxNodes));
    else if (s == "-c" || s == "--cluster") cluster = value(), cluster_given = true;
    else return false;
    return true;
  });
  if (i < 0) return print_help("fmrun");
  if (i >= argc) run_fail("usage: ulnic fmrun -n N [--nodes M] [-c CLUSTER] PROG [ARGS...]");
  if (nproc == 0) run_fail("-n N (the number of FM processes) is required");
  if (cluster_given || !cluster.empty()) {
    if (auto ok = board::check_cluster_name(cluster); !ok) run_fail(escaped(ok.error().message));
    ::setenv("ULNIC_CLUSTER", cluster.c_str(), 1);
  }
  if (!nodes) nodes = nodes_up(cluster.empty() ? "default" : cluster);
  std::string dir = (std::filesystem::temp_directory_path() / "ulnic-fmjob-XXXXXX").string();
  if (!::mkdtemp(dir.data())) run_fail("cannot make a job directory: " + std::string(std::strerror(errno)), 1);
  std::vector<std::string> prog(argv + i, argv + argc);
  std::vector<pid_t> pids;
  ::setenv("ULNIC_FM_NPROCS", std::to_string(nproc).c_str(), 1);
  ::setenv("ULNIC_FM_DIR", dir.c_str(), 1);
  int rc = 0;
  for (int r = 0; r < nproc && rc == 0; ++r) {
    ::setenv("ULNIC_FM_RANK", std::to_string(r).c_str(), 1);
    ::setenv("ULNIC_NODE", std::to_string(r % nodes).c_str(), 1);
    auto pid = ulnic::spawn_child(prog);
    if (!pid) {
      std::fprintf(stderr, "ulnic fmrun: %s\n", pid.error().message.c_str());
      rc = 1;
    } else {
      pids.push_back(*pid);
    }
  }
  // The first rank to fail takes the job down: the others would wait for it.
  for (size_t left = pids.size(); left;) {
    int status = 0;
    pid_t p = ::waitpid(-1, &status, 0);
    if (p < 0) {
      if (errno == EINTR) continue;
      break;
    }
    auto it = std::find(pids.begin(), pids.end(), p);
    if (it == pids.end()) continue;
    *it = -1;
    left--;
    int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    if (code != 0 && rc == 0) {
      rc = code;
      std::fprintf(stderr, "ulnic fmrun: rank %d exited with %d: stopping the job\n", int(it - pids.begin()), code);
      for (pid_t q : pids)
        if (q > 0) ::kill(q, SIGTERM);
    }
  }
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  return rc;
}

// The directory holding the libfabric provider libulnic-fi.so: next to the
// tools in a build tree (build/lib), or where `cmake --install` put it
// (<prefix>/<libdir>/libfabric, beside the installed bin/); "" if neither.
std::string provider_dir() {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path bin = fs::path(board::tool_path("ulnic")).parent_path();
  for (const fs::path& d : {bin.parent_path() / "lib", bin.parent_path() / ULNIC_INSTALL_LIBDIR / "libfabric",
                            fs::path(ULNIC_BUILD_LIBDIR)})
    if (fs::exists(d / "libulnic-fi.so", ec)) return fs::weakly_canonical(d, ec).string();
  return "";
}

// An MPI job over the NICs: Open MPI's mpirun with the environment that
// makes it use the ulnic libfabric provider (host/ofi: the cm PML, the OFI
// MTL, only the ulnic provider), ranks spread over the cluster's nodes by
// their local rank (the provider's rule; ULNIC_NODE is dropped so that it
// applies), more ranks than cores allowed. mpirun replaces this process:
// its exit status is the job's.
int cmd_mpirun(int argc, char** argv) {
  g_job_command = "mpirun";
  int nproc = 0;
  const char* env_cluster = std::getenv("ULNIC_CLUSTER");
  std::string cluster = env_cluster && *env_cluster ? env_cluster : "default";
  std::vector<std::string> mpi_args;
  int i = job_options(argc, argv, [&](const std::string& s, auto value) {
    if (s == "-n" || s == "--nproc") nproc = run_number(s, value(), 1, 4096);
    else if (s == "-c" || s == "--cluster") cluster = value();
    else if (s == "--mpi-arg") mpi_args.push_back(value());
    else return false;
    return true;
  });
  if (i < 0) return print_help("mpirun");
  if (i >= argc) run_fail("usage: ulnic mpirun -n N [-c CLUSTER] [--mpi-arg ARG]... PROG [ARGS...]");
  if (nproc == 0) run_fail("-n N (the number of MPI ranks) is required");
  if (auto ok = board::check_cluster_name(cluster); !ok) run_fail(escaped(ok.error().message));
  const std::string dir = provider_dir();
  if (dir.empty())
    run_fail("libulnic-fi.so (the libfabric provider) was not built: install libfabric-dev "
             "(toolchain/install-deps.sh) and build again", 1);
  bool any_up = false;
  for (uint32_t n : board::list_nodes(cluster)) any_up = any_up || board::live_qemu(board::node_paths(cluster, n));
  if (!any_up) run_fail("cluster '" + cluster + "' has no nodes up (ulnic cluster up -n M -c " + cluster + ")", 1);
  ::setenv("ULNIC_CLUSTER", cluster.c_str(), 1);
  ::unsetenv("ULNIC_NODE");
  ::setenv("FI_PROVIDER_PATH", dir.c_str(), 1);
  ::setenv("OMPI_MCA_pml", "cm", 1);
  ::setenv("OMPI_MCA_mtl", "ofi", 1);
  ::setenv("OMPI_MCA_mtl_ofi_provider_include", "ulnic", 1);
  ::setenv("OMPI_MCA_rmaps_base_oversubscribe", "1", 0);
  // Ranks unbound (unless the caller chose a binding): the NICs' vCPU
  // threads share the cores, and a rank held on one core cannot sleep
  // beside the NIC that wakes it (host/core/pin.cpp). Measured with
  // mpi_pingpong, 2 ranks, 2 vCPUs, four runs each, interleaved: 16 B RTT/2
  // 25.5-26.5 us unbound, 25.5 or 75-84 us bound to cores (3 of 4 slow).
  ::setenv("OMPI_MCA_hwloc_base_binding_policy", "none", 0);
  std::vector<std::string> cmd = {"mpirun", "-np", std::to_string(nproc)};
  cmd.insert(cmd.end(), mpi_args.begin(), mpi_args.end());
  cmd.insert(cmd.end(), argv + i, argv + argc);
  exec_argv(std::move(cmd));
  const int err = errno;
  run_fail(std::string("cannot run mpirun: ") + std::strerror(err) + " (Debian: openmpi-bin, toolchain/install-deps.sh)",
           err == ENOENT ? 127 : 126);
}

// `ulnic paper NAME [--quick] [--out DIR]`: the seed papers' experiments --
// tests/bench/papers.py of the source tree this command was built from, run
// against this build's programs (each benchmark on a private cluster).
int cmd_paper(int argc, char** argv) {
  static const std::vector<std::string> kPapers = {"via", "vmmc", "fm", "amudp", "unet", "all"};
  std::string name, out = "papers_out";
  bool quick = false;
  for (int i = 2; i < argc; ++i) {
    const std::string s = argv[i];
    if (s == "--quick") {
      quick = true;
    } else if (s == "--out") {
      if (i + 1 >= argc) usage_error("--out needs a value");
      out = argv[++i];
    } else if (!s.empty() && s[0] == '-') {
      usage_error("ulnic paper takes no option " + shown(s));
    } else if (!name.empty()) {
      usage_error("ulnic paper: unexpected argument " + shown(s));
    } else {
      name = s;
    }
  }
  if (std::find(kPapers.begin(), kPapers.end(), name) == kPapers.end())
    usage_error("ulnic paper needs one of via, vmmc, fm, amudp, unet, all" +
                (name.empty() ? std::string() : ", got " + shown(name)));
  const std::string script = std::string(ULNIC_SOURCE_DIR) + "/tests/bench/papers.py";
  std::error_code ec;
  const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec || !std::filesystem::exists(script))
    die(script + " not found: `ulnic paper` runs the benchmarks of the source tree ulnic was built from");
  std::vector<std::string> cmd = {"python3", script, name, "--build", self.parent_path().parent_path().string(),
                                  "--out", out};
  if (quick) cmd.push_back("--quick");
  exec_argv(std::move(cmd));
  const int err = errno;
  die(std::string("cannot run python3: ") + std::strerror(err), err == ENOENT ? 127 : 126);
}

// ---- the commands: help, manual page and dispatch from one table

// `ulnic node ...`, `ulnic cluster ...` and `ulnic fwtest`: the command line
// checked against what command `c` takes (parse), then run.
int with_args(const Command& c, int argc, char** argv, int (*cmd)(const Args&)) { return cmd(parse(c, argc, argv)); }

int cmd_help(int argc, char** argv);
const Command* command_of(int argc, char** argv);

// gdb's remote target pipe for `node gdb`: not a command for people, so not
// in the table (nor the help), but its command line is checked the same way.
const Command kGdbPipe{"node gdb-pipe", "[-c CLUSTER] [-n NODE]", "", nullptr};

#define ULNIC_NODE_CMD(fn) [](int argc, char** argv) { return with_args(*command_of(argc, argv), argc, argv, fn); }
const Command kCommands[] = {
    {"node start",
     "[-c CLUSTER] [-n NODE] [--firmware ELF] [--slots K] [--slot-size MIB]\n"
     "[--heartbeat-us US] [--verbose-fw] [--no-fabric] [--cost] [--qemu-arg ARG]...\n"
     "[--boot-timeout S]",
     "start a NIC board and flash ELF (default: the build's ulnic-fw.elf);\n"
     "on a board whose ulnicd died, start only a new ulnicd.\n"
     "--boot-timeout: the boot fails once S seconds (default 30) have\n"
     "passed and QEMU has had 2 s of CPU, or after 10 x S seconds\n"
     "however little it ran (a loaded host may starve it)\n"
     "--cost: count the NIC's instructions exactly, by firmware phase\n"
     "and protocol operation (a QEMU plugin; `node status` shows them)", ULNIC_NODE_CMD(cmd_start)},
    {"node flash", "[-c CLUSTER] [-n NODE] [--boot-timeout S] ELF",
     "flash ELF onto the running NIC (stop, write SRAM, reset)",
     ULNIC_NODE_CMD(cmd_flash), 1, 1},
    {"node status", "[-c CLUSTER] [-n NODE] [--json]", "firmware build, state, uptime, heartbeat, PCIe, counters",
     ULNIC_NODE_CMD(cmd_status)},
    {"node log", "[-c CLUSTER] [-n NODE] [-f]", "the NIC's serial log (-f: follow)", ULNIC_NODE_CMD(cmd_log)},
    {"node gdb", "[-c CLUSTER] [-n NODE] [ELF] [-- GDB-ARGS...]",
     "attach gdb-multiarch to the NIC (symbols: the flashed ELF)", ULNIC_NODE_CMD(cmd_gdb), 0, 1},
    {"node stop", "[-c CLUSTER] [-n NODE]", "stop the board and remove its runtime files", ULNIC_NODE_CMD(cmd_stop)},
    {"node list", "[-c CLUSTER]", "nodes of a cluster and their state", ULNIC_NODE_CMD(cmd_list)},
    {"cluster up",
     "-n N [-c CLUSTER] [--firmware ELF] [--slot-size MIB] [--test-drop F] [--cost]\n"
     "[--slots K] [--heartbeat-us US] [--qemu-arg ARG]... [--boot-timeout S]\n"
     "[--switch] [--faults SPEC] [--pcap FILE] [--names NAME,NAME,...]\n"
     "[--first F --total T --bridge-listen IP:PORT --bridge-peer IP:PORT=A-B ...]",
     "start N nodes on one fabric (N <= 64). --switch: through\n"
     "ulnic-switch, which applies SPEC per link, seeded\n"
     "(\"drop=0.3,corrupt=0.01,dup=0.01,reorder=0.01,delay=200us,seed=7\")\n"
     "and captures to FILE (pcap, DLT_USER0; emulator/switch/ulnic.lua).\n"
     "--test-drop: each NIC drops fraction F of arriving data (tests).\n"
     "Across machines: this one runs nodes F..F+N-1 of T; the\n"
     "switches bridge by UDP (nodes A..B are behind IP:PORT).\n"
     "--names: host names for VIPL's name service, written to\n"
     "the cluster's hosts file (\"name node\" lines; add more by\n"
     "hand): one per node here (name i = node F+i), or one per\n"
     "node of all T (name i = node i; give the same list on\n"
     "every machine so each knows every name)",
     [](int argc, char** argv) {
       return with_args(*command_of(argc, argv), argc, argv, [](const Args& a) { return cmd_cluster_up(a); });
     }},
    {"cluster status", "[-c CLUSTER] [--json]", "one line per node: QEMU, firmware state, build, heartbeat",
     ULNIC_NODE_CMD(cmd_cluster_status)},
    {"cluster down", "[-c CLUSTER]", "stop every node of the cluster", ULNIC_NODE_CMD(cmd_cluster_down)},
    {"fwtest", "ELF [--timeout S] [--slots K] [--slot-size MIB] [--no-fabric] [--fabric-ports N]\n"
     "[--qemu-arg ARG]...",
     "run a firmware test image on a private board; exit = its status\n"
     "(its fabric: N ports, default 2; the test image plays the other nodes)",
     ULNIC_NODE_CMD(cmd_fwtest), 1, 1},
    {"run",
     "-n N [--transport udp|vipl|native] [--depth K] [--hosts H1,H2,...] [--nodes M]\n"
     "[-c CLUSTER] PROG [ARGS...]",
     "run an AMUDP SPMD job: N workers of PROG (ARGS passed on as\n"
     "they are) and this command as its master; exits with the job's\n"
     "code. Transport: default $ULNIC_AM_TRANSPORT or udp; depth 8.\n"
     "--hosts: start the workers over ${ULNIC_SSH:-ssh}, round robin.\n"
     "--nodes: rank r uses NIC node r % M (vipl/native default: the\n"
     "nodes of CLUSTER that are up)",
     cmd_run},
    {"fmrun", "-n N [--nodes M] [-c CLUSTER] PROG [ARGS...]",
     "run a Fast Messages job (FM 2.x and the layers over it,\n"
     "host/fm): N processes of PROG, rank r on NIC node r % M\n"
     "(default: the nodes of CLUSTER that are up); exits with the\n"
     "first failing rank's code, after stopping the others",
     cmd_fmrun},
    {"mpirun", "-n N [-c CLUSTER] [--mpi-arg ARG]... PROG [ARGS...]",
     "run an MPI program over the NICs: Open MPI's mpirun -np N\n"
     "with the ulnic libfabric provider (the cm PML, the OFI MTL,\n"
     "FI_PROVIDER_PATH set), rank r on the r-th up node of CLUSTER\n"
     "(mod their number; by local rank); --mpi-arg: one argument\n"
     "for mpirun itself. Exits with mpirun's code",
     cmd_mpirun},
    {"paper", "via|vmmc|fm|amudp|unet|all [--quick] [--out DIR]",
     "the seed papers' experiments (tests/bench/papers.py): each\n"
     "paper's table with its published values, this machine's\n"
     "wall-clock medians and modelled time on the paper's NIC;\n"
     "all also writes DIR/report.html (default DIR: papers_out)",
     cmd_paper},
    {"demo", "", "start a node, show status and boot log, reflash, stop", 
     [](int argc, char**) {
       if (argc > 2) usage_error("ulnic demo takes no arguments");
       return cmd_demo();
     }},
    {"help", "[COMMAND...] | --roff",
     "what COMMAND does (every command whose name starts with it),\n"
     "or all of this; --roff: the manual page ulnic(1)",
     cmd_help},
};
#undef ULNIC_NODE_CMD

std::vector<std::string> lines_of(const char* text) {
  std::vector<std::string> out;
  for (const char* p = text; *p;) {
    const char* nl = std::strchr(p, '\n');
    out.emplace_back(p, nl ? nl - p : std::strlen(p));
    p = nl ? nl + 1 : p + std::strlen(p);
  }
  return out;
}

// A command's entry in the help: its synopsis, then what it does from
// column 34 (beside a short one-line synopsis, else below it).
std::string command_help(const Command& c) {
  constexpr size_t kSummaryColumn = 34;
  const std::vector<std::string> syn = lines_of(c.synopsis), sum = lines_of(c.summary);
  const std::string head = std::string("  ") + c.name, indent(head.size() + 1, ' ');
  std::string out = syn.empty() ? head + "\n" : "";
  for (size_t i = 0; i < syn.size(); ++i) out += (i ? indent : head + " ") + syn[i] + "\n";
  size_t first = 0;
  if (syn.size() <= 1 && out.size() + 1 < kSummaryColumn) {
    out.pop_back();
    out += std::string(kSummaryColumn - out.size(), ' ') + sum[0] + "\n";
    first = 1;
  }
  for (size_t i = first; i < sum.size(); ++i) out += std::string(kSummaryColumn, ' ') + sum[i] + "\n";
  return out;
}

std::string usage() {
  std::string out = "usage: ulnic <command> ...\n\n";
  for (const Command& c : kCommands) out += command_help(c);
  return out + "\n" + kUsageEnd;
}

// The commands whose names start with the words `words` ("node" names all
// of node's, "node start" one).
std::vector<const Command*> commands_named(const std::string& words) {
  std::vector<const Command*> out;
  for (const Command& c : kCommands) {
    std::string name = c.name;
    if (name == words || name.rfind(words + " ", 0) == 0) out.push_back(&c);
  }
  return out;
}

int print_help(const std::string& name) {
  for (const Command* c : commands_named(name)) std::fputs(command_help(*c).c_str(), stdout);
  return 0;
}

// Text as roff prints it: a leading dot or quote would be a request, a
// backslash an escape, and '-' may become a hyphen (options must copy).
std::string roff(const std::string& text) {
  std::string out;
  bool line_start = true;
  for (char ch : text) {
    if (line_start && (ch == '.' || ch == '\'')) out += "\\&";
    if (ch == '\\') out += "\\e";
    else if (ch == '-') out += "\\-";
    else out += ch;
    line_start = ch == '\n';
  }
  return out;
}

// ulnic(1). Each command's section is its help entry, word for word
// (tests/docs/test_manpage.py holds the page to that).
std::string manual_page() {
  std::string out =
      ".TH ULNIC 1 \"\" \"ulnic\" \"ulnic manual\"\n"
      ".SH NAME\n"
      "ulnic \\- start, flash, inspect and stop emulated NIC boards and clusters; run AM and FM jobs\n"
      ".SH SYNOPSIS\n"
      ".B ulnic\n.I command\n[\\fIoptions\\fR]\n.br\n.B ulnic help\n[\\fIcommand\\fR]\n"
      ".SH DESCRIPTION\n"
      "A ulnic node is a NIC board (a QEMU RISC-V virt machine running the NIC firmware) and its node\n"
      "daemon ulnicd; a cluster is nodes wired together by a shared-memory fabric, optionally through\n"
      "ulnic-switch. Host programs reach their node's NIC through libulnic and the APIs over it (VMMC,\n"
      "VIPL, AM-2, FM 2.x, the libfabric provider). \\fBulnic\\fR starts, flashes, inspects and stops\n"
      "nodes and clusters, runs firmware tests, and starts AM and FM jobs.\n"
      "Each command's section below is what \\fBulnic help\\fR \\fIcommand\\fR prints.\n"
      ".SH COMMANDS\n";
  for (const Command& c : kCommands) out += ".SS \"" + roff(c.name) + "\"\n.nf\n" + roff(command_help(c)) + ".fi\n";
  out += ".SH ENVIRONMENT\n.nf\n" + roff(kUsageEnd) + ".fi\n";
  out += ".SH EXIT STATUS\n"
         "0 on success; 2 for a usage error (a command line that cannot be right: one line on\n"
         "stderr, nothing started); 1 when the command ran and failed; \\fBnode status\\fR: 3 when\n"
         "QEMU is not running, 4 when the firmware is not. \\fBfwtest\\fR, \\fBrun\\fR and \\fBfmrun\\fR\n"
         "exit with the status of what they ran.\n";
  out += ".SH SEE ALSO\n"
         "README.md and docs/ in the source tree (docs/architecture.md: what runs where;\n"
         "docs/concepts.md: where each mechanism is in the code).\n";
  return out;
}

int cmd_help(int argc, char** argv) {
  if (argc == 3 && std::string(argv[2]) == "--roff") return std::fputs(manual_page().c_str(), stdout), 0;
  if (argc == 2) return std::fputs(usage().c_str(), stdout), 0;
  if (argc == 3 && (std::string(argv[2]) == "-h" || std::string(argv[2]) == "--help")) return print_help("help");
  std::string words = argv[2];
  for (int i = 3; i < argc; ++i) words += std::string(" ") + argv[i];
  if (commands_named(words).empty()) usage_error("no command " + shown(words));
  return print_help(words);
}

// The command argv names: two words before one, so "node" alone names none.
const Command* command_of(int argc, char** argv) {
  for (const Command& c : kCommands) {
    std::string name = c.name;
    size_t space = name.find(' ');
    bool match = space == std::string::npos
                     ? name == argv[1]
                     : argc >= 3 && name.compare(0, space, argv[1]) == 0 && name.substr(space + 1) == argv[2];
    if (match) return &c;
  }
  return nullptr;
}

// -h/--help among a command's own options (before "--" and, for the job
// commands, before the program).
bool asks_for_help(const Command& c, int argc, char** argv) {
  int first = std::strchr(c.name, ' ') ? 3 : 2;
  if (c.run == cmd_run || c.run == cmd_fmrun || c.run == cmd_help) return false;  // they look themselves
  for (int i = first; i < argc; ++i) {
    std::string s = argv[i];
    if (s == "--") break;
    if (s == "-h" || s == "--help") return true;
  }
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) usage_error("usage: ulnic <command> ...");
  const std::string first = argv[1];
  if (first == "-h" || first == "--help") return std::fputs(usage().c_str(), stdout), 0;
  // gdb's remote target pipe for `node gdb` (not a command for people).
  if (argc >= 3 && first == "node" && std::string(argv[2]) == "gdb-pipe")
    return with_args(kGdbPipe, argc, argv, cmd_gdb_pipe);
  const Command* c = command_of(argc, argv);
  if (!c) {
    if ((first == "node" || first == "cluster") && argc < 3) usage_error("ulnic " + first + " needs a command");
    std::string name = first == "node" || first == "cluster" ? first + " " + argv[2] : first;
    usage_error("unknown command " + shown(name));
  }
  if (asks_for_help(*c, argc, argv)) return print_help(c->name);
  return c->run(argc, argv);
}
