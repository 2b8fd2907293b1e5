// The board: one QEMU `virt` process per NIC (DESIGN §3). This file only
// builds the command line; node.h runs it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "board/runtime.h"
#include "ulnic/util/result.h"

namespace ulnic::board {

struct BoardSpec {
  uint32_t node = 0;
  uint32_t num_slots = 8;              // ivshmem-plain host slots (<= kMaxSlots)
  uint64_t slot_size = 256ull << 20;   // bytes per slot BAR; a power of two
  uint32_t fabric_vectors = 16;        // MSI-X vectors of the fabric device (>= abi::kNicVectors)
  std::string fabric_socket;           // ivshmem server socket; "" = no fabric device
  std::string fabric_memory;           // the file behind the fabric's memory (the wake plugin's copy engine maps it)
  int wake_fd = -1;                    // a connection to the fabric server's wake socket, inherited by QEMU:
                                       // load the wake plugin on it (abi/wake.h; -1 = none, the NIC sleeps in WFI)
  std::string qemu = "qemu-system-riscv64";
  bool serial_to_stdout = false;       // firmware tests: serial on our stdout
  bool cost = false;                   // load the cost plugin (exact instruction counts, abi/cost.h)
  std::vector<std::string> extra_args; // appended verbatim (debugging, tests)
};

Result<void> validate(const BoardSpec& spec);
std::vector<std::string> qemu_command(const BoardSpec& spec, const NodePaths& paths);
// A value for a QEMU "key=value,..." option: commas doubled.
std::string qemu_escape(const std::string& value);

// A clear error naming the Debian package if the emulator is missing.
Result<std::string> find_qemu(const std::string& qemu);

}  // namespace ulnic::board
