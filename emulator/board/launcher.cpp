#include "board/launcher.h"

#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "ulnic/abi/sram.h"
#include "ulnic/util/process.h"

namespace ulnic::board {
namespace abi = ulnic::abi;

namespace {
std::string pci_addr(uint32_t dev) {
  char b[8];
  std::snprintf(b, sizeof b, "0x%x", dev);
  return b;
}
}  // namespace

Result<void> validate(const BoardSpec& s) {
  if (s.num_slots > abi::kMaxSlots) return fail("at most " + std::to_string(abi::kMaxSlots) + " slots per board");
  if (s.slot_size < (1u << 20) || (s.slot_size & (s.slot_size - 1)) != 0 || s.slot_size > (1ull << 30))
    return fail("slot size must be a power of two between 1 MiB and 1 GiB");
  if (s.node >= abi::kMaxNodes) return fail("node id must be below " + std::to_string(abi::kMaxNodes));
  if (s.fabric_vectors == 0 || s.fabric_vectors > 64) return fail("fabric vectors must be 1..64");
  return {};
}

std::string qemu_escape(const std::string& value) {
  std::string out;
  for (char c : value) {
    out += c;
    if (c == ',') out += ',';
  }
  return out;
}

std::vector<std::string> qemu_command(const BoardSpec& s, const NodePaths& p) {
  std::string mb = std::to_string(abi::kSramSize >> 20) + "M";
  // Every path goes through a QemuOpts "key=value" option (never the legacy
  // "unix:" / "file:" forms, which cannot escape a comma).
  // maxcpus=2 (one hart still): QEMU translates the NIC's code for parallel
  // execution only when the machine may have more than one CPU, and
  // otherwise drops every RISC-V `fence` (and runs AMOs non-atomically). The
  // firmware's handshakes with hosts and peers are Dekker-style (flag, full
  // fence, look at the other side), and an x86 host lets a store pass a
  // later load: without real fences the NIC may read a process's wait_seq
  // (or a peer's tail) before its own store is visible, while the other
  // side misses that store too, and nobody rings (QEMU's tcg_gen_mb emits
  // a barrier only under CF_PARALLEL, which needs max_cpus > 1).
  std::vector<std::string> a = {
      s.qemu, "-M", "virt,aia=aplic-imsic,memory-backend=sram", "-m", mb, "-smp", "1,maxcpus=2", "-bios", "none",
      "-nodefaults", "-display", "none", "-no-user-config",
      // Thread names: the daemon finds the vCPU thread ("CPU 0/TCG") by its
      // name, and tells the processes that follow it (AttachReply::nic_thread).
      "-name", "ulnic-nic,debug-threads=on",
      "-object", "memory-backend-file,id=sram,size=" + mb + ",mem-path=" + qemu_escape(p.sram) + ",share=on",
      "-chardev", "socket,id=qmp,path=" + qemu_escape(p.qmp) + ",server=on,wait=off",
      "-mon", "chardev=qmp,mode=control",
      "-chardev", "socket,id=gdb,path=" + qemu_escape(p.gdb) + ",server=on,wait=off",
      "-gdb", "chardev:gdb",
  };
  if (s.serial_to_stdout) {
    a.insert(a.end(), {"-serial", "stdio"});
  } else {
    a.insert(a.end(), {"-chardev", "file,id=serial,path=" + qemu_escape(p.serial_log), "-serial", "chardev:serial"});
  }
  for (uint32_t k = 0; k < s.num_slots; ++k) {
    std::string id = "slot" + std::to_string(k);
    a.insert(a.end(), {"-object", "memory-backend-file,id=" + id + ",size=" + std::to_string(s.slot_size) +
                                      ",mem-path=" + qemu_escape(p.slot(k)) + ",share=on",
                       "-device", "ivshmem-plain,memdev=" + id + ",addr=" + pci_addr(abi::kSlotPciDevBase + k)});
  }
  if (!s.fabric_socket.empty()) {
    // ioeventfd=off: with it on, QEMU registers an ioeventfd on the doorbell
    // register for every vector of every peer that joins the fabric (each
    // process that attaches), and each registration changes the memory map,
    // which flushes the NIC processor's soft TLB and may shrink it again
    // (firmware/hal/soft_tlb.h). Under TCG an ioeventfd saves nothing: the
    // doorbell write reaches the same eventfd through the device model.
    a.insert(a.end(), {"-chardev", "socket,id=fabric,path=" + qemu_escape(s.fabric_socket), "-device",
                       "ivshmem-doorbell,chardev=fabric,vectors=" + std::to_string(s.fabric_vectors) +
                           ",ioeventfd=off,addr=" + pci_addr(abi::kFabricPciDev)});
  }
  if (!s.fabric_socket.empty() && s.wake_fd >= 0) {
    // The NIC sleeps on its doorbells in its vCPU thread (abi/wake.h); the
    // plugin takes them from the fabric server's answer on wake_fd. It is
    // also the board's copy engine, on the files behind the slots and the
    // fabric.
    std::string plugin = "file=" + qemu_escape(tool_path("ulnic-wake.so")) + ",sram=" + qemu_escape(p.sram) +
                         ",fd=" + std::to_string(s.wake_fd);
    for (uint32_t k = 0; k < s.num_slots; ++k) plugin += ",slot" + std::to_string(k) + "=" + qemu_escape(p.slot(k));
    if (!s.fabric_memory.empty()) plugin += ",fabric=" + qemu_escape(s.fabric_memory);
    a.insert(a.end(), {"-plugin", plugin});
  }
  if (s.cost) {
    // $ULNIC_COST_PROFILE (a directory): the plugin also profiles the NIC by
    // block, into DIR/<cluster>-node<k>.prof (tests/bench/cost_profile.py).
    std::string plugin = "file=" + qemu_escape(tool_path("ulnic-cost.so")) + ",sram=" + qemu_escape(p.sram);
    if (const char* dir = std::getenv("ULNIC_COST_PROFILE"); dir && *dir) {
      const std::filesystem::path node_dir(p.dir);  // <base>/<cluster>/node<k>
      const std::string name = node_dir.parent_path().filename().string() + "-" + node_dir.filename().string();
      plugin += ",profile=" + qemu_escape(std::string(dir) + "/" + name + ".prof");
    }
    a.insert(a.end(), {"-plugin", plugin});
  }
  a.insert(a.end(), s.extra_args.begin(), s.extra_args.end());
  return a;
}

Result<std::string> find_qemu(const std::string& qemu) {
  std::string path = find_in_path(qemu);
  if (path.empty())
    return fail(qemu + " not found: install the Debian package qemu-system-misc (toolchain/install-deps.sh)");
  return path;
}

}  // namespace ulnic::board
