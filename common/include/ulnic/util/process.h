// Child processes of the tools: detached daemons (QEMU, the fabric server)
// and supervised ones (firmware test runs).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "ulnic/util/result.h"

namespace ulnic {

// Starts argv[0] (searched in PATH) as a daemon: own session, stdin from
// /dev/null, stdout+stderr appended to `log_path`, reparented to init (double
// fork) so it outlives the caller and never lingers as its zombie. Returns
// its pid once exec succeeded; an exec failure is an error here. A `nice`
// other than 0 is the daemon's priority, as a nice value: its own (every
// thread it starts inherits it) and its session's autogroup's (with
// autogroups, Linux shares the CPUs between sessions first, so only that
// one counts). Best effort: without the privilege to raise a priority the
// daemon runs at the default. A `cpu` of 0 or more pins the daemon (and
// every thread it starts) to that one CPU. The fds in `inherit` stay open in
// the daemon under their numbers (in the caller they keep their close-on-exec
// flag: nothing else the caller starts meanwhile gets them).
Result<pid_t> spawn_daemon(const std::vector<std::string>& argv, const std::string& log_path, int nice = 0,
                           int cpu = -1, const std::vector<int>& inherit = {});

// Starts argv as a child of the caller sharing its stdout/stderr; reap it
// with wait_child(). Exec failure shows as exit status 127.
Result<pid_t> spawn_child(const std::vector<std::string>& argv);
// Waits up to `timeout` for the child; returns its exit status (128+signal
// if killed), or an error on timeout (the child is then killed).
Result<int> wait_child(pid_t pid, std::chrono::milliseconds timeout);

bool process_alive(pid_t pid);  // exists and is not a zombie
// CPU time the process has had (user + system, all its threads), and its
// scheduler state letter (R, S, D, T, Z...); nullopt once it is gone.
struct ProcessCpu {
  std::chrono::milliseconds cpu{0};
  char state = '?';
};
std::optional<ProcessCpu> process_cpu(pid_t pid);
// A wait for something another process must do (QEMU's firmware: a boot, an
// answer on the control queue), judged by that process's CPU time and not
// the wall clock alone, which a loaded host spends elsewhere: over once
// `timeout` has passed and the process had `cpu_budget` of CPU since the
// start (it ran and did not do it), or after `wall_factor` x `timeout`
// whatever it got (it never ran), or at once when it is gone. Without a pid
// (0) the wall clock alone decides, at `timeout`.
class CpuDeadline {
 public:
  CpuDeadline(pid_t pid, std::chrono::milliseconds timeout, std::chrono::milliseconds cpu_budget,
              int wall_factor = 10);
  // Reads /proc/PID/stat once `timeout` has passed: call it between looks.
  bool passed();
  bool gone() const { return gone_; }  // the process exited (seen by passed())
  std::chrono::milliseconds waited() const;
  std::chrono::milliseconds cpu_used() const { return now_.cpu - cpu0_; }  // as of the last look
  char state() const { return now_.state; }
  // "in W s (QEMU had C s of CPU meanwhile)", for the error that ends a wait.
  std::string spent() const;

 private:
  pid_t pid_;
  std::chrono::steady_clock::time_point start_;
  std::chrono::milliseconds timeout_, cpu_budget_, cpu0_{0};
  int wall_factor_;
  ProcessCpu now_{};
  bool gone_ = false;
};
std::string process_cmdline(pid_t pid);  // argv joined by spaces, "" if gone
// SIGTERM, then SIGKILL after `grace`; true once the process is gone.
bool terminate_process(pid_t pid, std::chrono::milliseconds grace);

// Full path of an executable found in PATH, or "".
std::string find_in_path(const std::string& name);
// Writes "<pid>\n" to `path` atomically (a temporary file renamed over it):
// whoever sees the file sees the whole pid, never an empty file. False if
// it could not be written.
bool write_pid_file(const std::string& path, pid_t pid);
// The pid in such a file, 0 if it is missing or unreadable.
pid_t read_pid_file(const std::string& path);
// Last `max_lines` lines of a text file ("" if unreadable).
std::string tail_file(const std::string& path, size_t max_lines);

}  // namespace ulnic
