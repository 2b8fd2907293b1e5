// A small QMP client: enough to stop, reset, continue and quit a board and
// to ask its run state. QEMU is trusted; replies are matched by key only.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <string>

#include "ulnic/util/fd.h"
#include "ulnic/util/result.h"

namespace ulnic::board {

class Qmp {
 public:
  // With QEMU's `pid`, a reply is overdue once `timeout` has passed and QEMU
  // had as much CPU since the request, or after 10x `timeout` (CpuDeadline:
  // a loaded host may keep QEMU off the CPU); without it, at `timeout`.
  static Result<Qmp> connect(const std::string& socket_path, std::chrono::milliseconds timeout, pid_t pid = 0);
  // The handshake (greeting, qmp_capabilities) on a connected socket; connect()
  // ends with it, and the fuzz target (tests/fuzz) feeds it replies through one.
  static Result<Qmp> handshake(UniqueFd fd, std::chrono::milliseconds timeout, pid_t pid = 0);
  // Runs a command; returns the raw reply line ({"return": ...}).
  Result<std::string> execute(const std::string& command, const std::string& arguments_json = "");
  // "running", "paused", ... from query-status.
  Result<std::string> run_state();

 private:
  Result<std::string> read_line();
  UniqueFd fd_;
  std::string buf_;
  std::chrono::milliseconds timeout_{0};
  pid_t pid_ = 0;
};

// The value of a JSON string field `"key": "value"` in a flat reply, or "".
std::string json_string_field(const std::string& json, const std::string& key);

}  // namespace ulnic::board
