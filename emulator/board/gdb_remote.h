// A minimal GDB remote-protocol client for QEMU's gdbstub, used by the
// flasher to write code into a live board. Why not just the SRAM file:
// QEMU's TCG caches translations of guest code and does not notice writes
// made to the backing file by another process, so a reflashed NIC would keep
// running stale translations of the old image (seen on QEMU 7.2: the old
// firmware kept printing after system_reset). Memory written through the
// gdbstub goes through QEMU's own debug-write path, which invalidates every
// translation covering the bytes written.
#pragma once

#include <chrono>
#include <cstdint>
#include <sys/types.h>
#include <span>
#include <string>

#include "ulnic/util/fd.h"
#include "ulnic/util/process.h"
#include "ulnic/util/result.h"

namespace ulnic::board {

class GdbRemote {
 public:
  // Connecting halts the guest (gdbstub semantics). With QEMU's pid, a reply
  // is overdue once `timeout` has passed and QEMU had as much CPU since, or
  // after 10x `timeout` (CpuDeadline: a loaded host may keep QEMU off the
  // CPU for the whole bound); without one, at `timeout` (as Qmp's).
  static Result<GdbRemote> connect(const std::string& socket_path, std::chrono::milliseconds timeout,
                                   pid_t pid = 0);
  // The qSupported exchange on a connected socket; connect() ends with it, and
  // the fuzz target (tests/fuzz) feeds it the stub's replies through one.
  static Result<GdbRemote> handshake(UniqueFd fd, std::chrono::milliseconds timeout, pid_t pid = 0);
  Result<void> write_memory(uint64_t addr, std::span<const uint8_t> bytes);
  // Detaching resumes the guest.
  Result<void> detach();

  // Exposed for tests: "$<payload>#<checksum>".
  static std::string frame(const std::string& payload);

 private:
  Result<std::string> transact(const std::string& payload);
  Result<char> read_byte(CpuDeadline& deadline);
  UniqueFd fd_;
  std::chrono::milliseconds timeout_{0};
  pid_t pid_ = 0;
  size_t packet_size_ = 400;  // GDB's default until the stub says otherwise
};

}  // namespace ulnic::board
