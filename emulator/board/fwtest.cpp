#include "board/fwtest.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>

#include "board/elf_image.h"
#include "board/fabric_control.h"
#include "board/sram.h"
#include "fabric/fabric_server.h"
#include "ulnic/abi/fabric.h"
#include "ulnic/abi/testbench.h"
#include "ulnic/util/fd.h"
#include "ulnic/util/mapping.h"
#include "ulnic/util/process.h"

namespace ulnic::board {

namespace {

Result<void> create_file(const std::string& path, uint64_t size) {
  UniqueFd fd(::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
  if (!fd || ::ftruncate(fd.get(), off_t(size)) != 0) return fail_errno("cannot create " + path, errno);
  return {};
}

Result<void> stamp_file(const std::string& path, uint64_t offset, const abi::TestbenchStamp& stamp) {
  UniqueFd fd(::open(path.c_str(), O_RDWR | O_CLOEXEC));
  if (!fd || ::pwrite(fd.get(), &stamp, sizeof stamp, off_t(offset)) != ssize_t(sizeof stamp))
    return fail_errno("cannot stamp " + path, errno);
  return {};
}

}  // namespace

Result<int> run_firmware_test(const FwTestOptions& o) {
  if (auto r = validate(o.board); !r) return std::unexpected(r.error());
  auto qemu = find_qemu(o.board.qemu);
  if (!qemu) return std::unexpected(qemu.error());
  auto img = load_elf_file(o.elf);
  if (!img) return std::unexpected(img.error());

  std::string cluster = "fwtest-" + std::to_string(::getpid());
  NodePaths p = node_paths(cluster, o.board.node);
  struct Cleanup {
    std::string cluster;
    ~Cleanup() {
      stop_fabric(cluster);
      remove_tree(cluster_dir(cluster));
    }
  } cleanup{cluster};
  if (auto r = make_dirs(p.dir); !r) return std::unexpected(r.error());

  BoardSpec spec = o.board;
  spec.qemu = *qemu;
  spec.serial_to_stdout = true;
  abi::FabricHeader geometry{};
  if (o.fabric) {
    std::vector<std::string> notes;
    FabricSpec fs_spec;
    fs_spec.ports = o.fabric_ports;
    fs_spec.vectors = spec.fabric_vectors;
    auto g = ensure_fabric(cluster, spec.node, fs_spec, notes);
    if (!g) return std::unexpected(g.error());
    geometry = *g;
    spec.fabric_socket = fabric::Paths::nic_socket(fabric_dir(cluster), spec.node);
    std::string mem = fabric::Paths::memory(fabric_dir(cluster));
    // The stamp goes past the geometry header, where no ring lives yet.
    if (auto r = stamp_file(mem, abi::kPortAreaOffset - sizeof(abi::TestbenchStamp),
                            abi::make_stamp(abi::kFabricStampMagic, 0)); !r)
      return std::unexpected(r.error());
  }
  for (uint32_t k = 0; k < spec.num_slots; ++k) {
    if (auto r = create_file(p.slot(k), spec.slot_size); !r) return std::unexpected(r.error());
    if (auto r = stamp_file(p.slot(k), 0, abi::make_stamp(abi::kSlotStampMagic, k)); !r)
      return std::unexpected(r.error());
  }

  auto sram = SramFile::create(p.sram);
  if (!sram) return std::unexpected(sram.error());
  sram->write_image(*img);
  abi::BootConfig c{};
  c.magic = abi::kBootConfigMagic;
  c.abi_version = ULNIC_ABI_VERSION;
  c.size = sizeof c;
  c.node_id = spec.node;
  c.num_nodes = 1;
  c.num_slots = spec.num_slots;
  c.slot_size = spec.slot_size;
  c.fabric_size = o.fabric ? abi::fabric_bar_size(geometry.ports, geometry.ring_capacity) : 0;
  c.fabric_ports = geometry.ports;
  c.switch_port = o.fabric ? geometry.switch_port : abi::kNoSwitch;
  c.ring_capacity = geometry.ring_capacity;
  c.ring_stride = geometry.ring_stride;
  c.rings_offset = geometry.rings_offset;
  c.flash_seq = 1;
  std::snprintf(c.cluster, sizeof c.cluster, "%s", cluster.c_str());
  sram->write_boot_config(c);

  std::fflush(stdout);
  auto pid = spawn_child(qemu_command(spec, p));
  if (!pid) return std::unexpected(pid.error());
  auto status = wait_child(*pid, o.timeout);
  if (!status) return fail(o.elf + ": " + status.error().message + tail_file(p.qemu_log, 10));
  return *status;
}

}  // namespace ulnic::board
