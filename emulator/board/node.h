// Node lifecycle: start a board with a firmware image, flash a running one,
// query its status, stop it. Every operation takes the node's lock, so two
// tools cannot start or flash the same node at once.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <string>
#include <vector>

#include "board/fabric_control.h"
#include "board/launcher.h"
#include "ulnic/abi/cost.h"
#include "ulnic/abi/wake.h"
#include "ulnic/abi/status.h"

namespace ulnic::board {

struct StartOptions {
  std::string cluster = "default";
  BoardSpec board;
  std::string firmware;                 // ELF to flash at start
  uint32_t num_nodes = 0;               // for the boot config; 0: the cluster fabric's nodes
  uint32_t heartbeat_us = 100'000;
  uint32_t boot_flags = 0;
  FabricSpec fabric_spec;               // geometry if this start creates the fabric
  bool fabric = true;                   // attach the cluster fabric device
  bool daemon = true;                   // run ulnicd (needs the fabric)
  double test_rx_drop = 0;              // link test hook: fraction of data packets dropped
  std::chrono::milliseconds boot_timeout{30'000};
};

struct StartResult {
  pid_t pid = 0;
  std::vector<std::string> notes;       // e.g. stale files cleaned
  bool daemon_restarted = false;        // QEMU was running; only its ulnicd was started
  abi::StatusBlock status{};
};

struct FlashResult {
  std::string old_build_id, new_build_id;
  uint64_t flash_seq = 0;
  abi::StatusBlock status{};
};

struct NodeInfo {
  uint32_t node = 0;
  bool running = false;                 // QEMU process alive
  pid_t pid = 0;
  std::string vm_state;                 // QMP run state, "" if unknown
  abi::StatusBlock status{};
  bool heartbeat_checked = false;
  bool heartbeat_advancing = false;
  std::string firmware_path;            // copy of the flashed ELF
  pid_t daemon_pid = 0;                 // its ulnicd, 0 if not running
  std::vector<abi::LinkStatus> links;   // by peer node (the cluster's nodes)
  abi::CostBlock cost{};                // instruction counts (magic 0: no --cost)
  abi::WakeBlock wake{};                // the wake plugin's counts (vectors 0: no plugin)
  abi::CopyBlock copy{};                // its copy engine's (mapped 0: none)
};

// The emulated NICs' priority on the host ($ULNIC_NIC_NICE). A NIC is
// hardware; a host busy with its own processes must not starve it. Under two
// CPU burners and eight AM ranks spinning on AM_Poll, Linux's autogroups
// (one per session: each QEMU has its own) left the QEMU threads runnable
// but unscheduled for 5-12 s at a time: a NIC slept through its 100 ms timer
// for up to 9 s, its peers declared it unreachable after 5 s without an ACK,
// and the jobs' messages came back EUNREACHABLE (measured, issue 20). At
// nice -10 the same load ran 10 jobs of 10; but a NIC that outranks the
// host's processes all the time keeps the process it just woke off that CPU
// while it spins, and small messages took 263-321 us one way against 26-67
// at the ordinary priority. So by default ($ULNIC_NIC_NICE unset) QEMU runs
// at the ordinary priority and its node daemon raises it to `boost` (-10)
// only while the host starves it (daemon/priority_guard.h); the daemon
// itself, which must see the starvation in time, and the switch run at
// `boost`. $ULNIC_NIC_NICE=N fixes QEMU, the switch and nothing else at N.
// Spinning is bounded by the firmware (it sleeps in WFI after its spin
// window), so an idle NIC costs nothing at any priority.
struct NicPriority {
  bool adaptive = true;  // the daemon boosts QEMU to `nice` while starved
  int nice = -10;        // the boost, or the fixed priority
};
NicPriority nic_priority();
// The priority of the processes that always run raised: the switch, and the
// daemon when adaptive (nic_priority().nice).
int nic_nice();

// The one host CPU node `node`'s QEMU is pinned to, -1 for none
// ($ULNIC_NIC_AFFINITY, read when the node starts). Unset or `off`: QEMU's
// threads go wherever Linux puts them. `node`: the node's QEMU runs on CPU
// node mod N of the N CPUs the starting process may use, and a process that
// attaches to the node follows it there (host/core: Nic::attach, unless its
// own affinity is already narrowed or $ULNIC_AFFINITY=off). A NIC and the
// processes it wakes then share one CPU: every wake-up is local, and a
// process that blocks hands the CPU straight to its NIC. On a 2-vCPU VM,
// where a wake-up onto the other (halted) CPU costs 20-230 us in the
// hypervisor, small messages of every protocol took 22-27 us one way
// (RTT/2) with each node on its own CPU against 24-80 us (bimodal) with
// nothing pinned (measured with hop_bench, docs/platform.md). Not the
// default: with more nodes than CPUs the scheduler can no longer move load
// off a CPU that its nodes' processes crowd.
Result<int> nic_cpu(uint32_t node);

// On a node whose QEMU runs but whose ulnicd does not (it was killed), starts
// only the daemon (StartResult::daemon_restarted).
Result<StartResult> start_node(const StartOptions& opts);
Result<FlashResult> flash_node(const std::string& cluster, uint32_t node, const std::string& firmware,
                               std::chrono::milliseconds boot_timeout = std::chrono::milliseconds(30'000));
Result<NodeInfo> query_node(const std::string& cluster, uint32_t node, bool check_heartbeat);
// Stops QEMU (QMP quit, then signals) and removes the node's files; stops the
// fabric server when no node of the cluster is left. Returns notes.
Result<std::vector<std::string>> stop_node(const std::string& cluster, uint32_t node);
// The QEMU recorded in the node's pid file if it is alive and really that
// node's (its command line names the node's SRAM file), else 0.
pid_t live_qemu(const NodePaths& p);
// Nodes that have a runtime directory in the cluster.
std::vector<uint32_t> list_nodes(const std::string& cluster);

// "running", "crashed", ... for a FwState value.
const char* state_name(uint32_t state);
std::string describe_trap(const abi::StatusBlock& s);

}  // namespace ulnic::board
