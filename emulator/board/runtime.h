// Where a cluster's runtime files live, and where the tools find each other.
//
//   <base>/<cluster>/fabric/   fabric server: sockets, fabric.mem, pid, log
//   <base>/<cluster>/node<k>/  one board: sram, slot<i>, qmp.sock, gdb.sock,
//                              serial.log, qemu.log, qemu.pid, firmware.elf
//   <base>/<cluster>/hosts     names of nodes, one "name node" a line ('#'
//                              starts a comment): `ulnic cluster up --names`
//                              writes it, users may extend it; libvipl's name
//                              service reads it (host/vipl/vipl.cpp)
//
// <base> is $ULNIC_RUNTIME_DIR, else /dev/shm/ulnic-<user> (ulnic/util/runtime_dir.h:
// /tmp/ulnic-<user> where /dev/shm is small; tmpfs: the big
// slot files are sparse and cost only the pages that are touched).
#pragma once

#include "ulnic/util/fd.h"

#include <cstdint>
#include <string>

#include "ulnic/util/result.h"

namespace ulnic::board {

std::string runtime_base();
Result<void> check_cluster_name(const std::string& name);
std::string cluster_dir(const std::string& cluster);

struct NodePaths {
  std::string dir;
  std::string sram, qmp, gdb, serial_log, qemu_log, pid, firmware, lock;
  std::string slot(uint32_t k) const { return dir + "/slot" + std::to_string(k); }
};
NodePaths node_paths(const std::string& cluster, uint32_t node);
std::string fabric_dir(const std::string& cluster);
// A connection to the fabric server's wake socket for NIC `node` that the
// server has taken (its answer, the NIC's doorbells, waits in it for the
// wake plugin; abi/wake.h): QEMU inherits it as BoardSpec::wake_fd. Taken
// before QEMU starts, because QEMU connects its fabric device before it
// loads plugins, and the server must know by then. Invalid with
// $ULNIC_WAKE_PLUGIN=off, without ulnic-wake.so, or if the server does not
// answer: the NIC then sleeps in WFI, woken through QEMU's main loop.
UniqueFd connect_wake(const std::string& cluster, uint32_t node);
std::string hosts_path(const std::string& cluster);

// Our own executables (ulnic-fabricd, ...): $ULNIC_BINDIR, then the directory
// of the running executable, then the build tree's bin directory.
std::string tool_path(const std::string& name);
// The firmware to flash when none is named: $ULNIC_FIRMWARE, else the
// build's ulnic-fw.elf.
std::string default_firmware(const std::string& name = "ulnic-fw.elf");

// Refuses, with a message that says so, when the filesystem of the runtime
// directory has less than `bytes` free for `what`: the SRAM and the fabric's
// rings are files there that QEMU and the NICs write as memory, and a page
// the filesystem cannot back kills the process that touches it (SIGBUS).
Result<void> check_space(const std::string& what, uint64_t bytes);
// What one board needs there (its SRAM file is allocated whole), and what a
// fabric of `ports` ports comes to once every ring has been around (the
// fabric and slot files are sparse: they cost the pages that are touched).
uint64_t node_space();
uint64_t fabric_space(uint32_t ports);

// mkdir -p with mode 0700.
Result<void> make_dirs(const std::string& path);
// rm -rf of a directory we own (refuses paths outside runtime_base()).
void remove_tree(const std::string& path);

}  // namespace ulnic::board
