#include "ulnic/util/process.h"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>

#include "ulnic/util/fd.h"

namespace ulnic {

namespace {

std::vector<char*> c_argv(const std::vector<std::string>& argv) {
  std::vector<char*> v;
  for (const auto& a : argv) v.push_back(const_cast<char*>(a.c_str()));
  v.push_back(nullptr);
  return v;
}

// In the child: report errno through the CLOEXEC pipe and die.
[[noreturn]] void child_fail(int pipe_fd, int err) {
  ssize_t ignored = ::write(pipe_fd, &err, sizeof err);
  (void)ignored;
  ::_exit(127);
}

// In the child: its priority and its session's (spawn_daemon's `nice`).
// Only async-signal-safe calls: the parent may have threads.
void set_child_priority(int nice) {
  (void)::setpriority(PRIO_PROCESS, 0, nice);
  char text[16];
  int n = 0, v = nice < 0 ? -nice : nice;
  char digits[12];
  int d = 0;
  do digits[d++] = char('0' + v % 10), v /= 10;
  while (v);
  if (nice < 0) text[n++] = '-';
  while (d) text[n++] = digits[--d];
  text[n++] = '\n';
  int fd = ::open("/proc/self/autogroup", O_WRONLY | O_CLOEXEC);
  if (fd < 0) return;  // no autogroups: the process's own priority is what counts
  ssize_t ignored = ::write(fd, text, size_t(n));
  (void)ignored;
  ::close(fd);
}

}  // namespace

Result<pid_t> spawn_daemon(const std::vector<std::string>& argv, const std::string& log_path, int nice, int cpu,
                           const std::vector<int>& inherit) {
  if (argv.empty()) return fail("spawn: empty command");
  cpu_set_t one;
  CPU_ZERO(&one);
  if (cpu >= 0) {
    if (cpu >= CPU_SETSIZE) return fail("spawn " + argv.front() + ": no CPU " + std::to_string(cpu));
    CPU_SET(cpu, &one);
  }
  int p[2];
  if (::pipe2(p, O_CLOEXEC) != 0) return fail_errno("pipe", errno);
  UniqueFd rd(p[0]), wr(p[1]);
  auto args = c_argv(argv);
  pid_t mid = ::fork();
  if (mid < 0) return fail_errno("fork", errno);
  if (mid == 0) {
    ::setsid();
    pid_t pid = ::fork();
    if (pid != 0) {
      // Tell the caller the daemon's pid, then let it be adopted by init.
      int64_t msg = pid < 0 ? -int64_t(errno) : int64_t(pid);
      ssize_t ignored = ::write(wr.get(), &msg, sizeof msg);
      (void)ignored;
      ::_exit(0);
    }
    int null = ::open("/dev/null", O_RDONLY);
    int log = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0600);
    if (null < 0 || log < 0) child_fail(wr.get(), errno);
    ::dup2(null, 0);
    ::dup2(log, 1);
    ::dup2(log, 2);
    if (nice) set_child_priority(nice);
    if (cpu >= 0 && ::sched_setaffinity(0, sizeof one, &one) != 0) child_fail(wr.get(), errno);
    for (int fd : inherit)
      if (::fcntl(fd, F_SETFD, 0) != 0) child_fail(wr.get(), errno);
    ::execvp(args[0], args.data());
    child_fail(wr.get(), errno);
  }
  wr.reset();
  int status = 0;
  ::waitpid(mid, &status, 0);
  int64_t pid = 0;
  if (::read(rd.get(), &pid, sizeof pid) != sizeof pid) return fail("spawn " + argv[0] + ": no pid from launcher");
  if (pid < 0) return fail_errno("fork", int(-pid));
  int err = 0;
  if (::read(rd.get(), &err, sizeof err) == sizeof err) return fail_errno("cannot run " + argv[0], err);
  return pid_t(pid);
}

Result<pid_t> spawn_child(const std::vector<std::string>& argv) {
  if (argv.empty()) return fail("spawn: empty command");
  auto args = c_argv(argv);
  pid_t pid = ::fork();
  if (pid < 0) return fail_errno("fork", errno);
  if (pid == 0) {
    ::execvp(args[0], args.data());
    ::_exit(127);
  }
  return pid;
}

Result<int> wait_child(pid_t pid, std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    int status = 0;
    pid_t r = ::waitpid(pid, &status, WNOHANG);
    if (r == pid) return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    if (r < 0 && errno != EINTR) return fail_errno("waitpid", errno);
    if (std::chrono::steady_clock::now() >= deadline) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      return fail("timed out after " + std::to_string(timeout.count() / 1000) + " s");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

namespace {

// /proc/PID/stat after the command's closing parenthesis (the command may
// hold spaces and parentheses): " S ppid ..."; "" if there is none;
// nullopt if the file cannot be read (the process is gone).
std::optional<std::string> stat_after_command(pid_t pid) {
  std::ifstream st("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(st, line)) return std::nullopt;
  const size_t paren = line.rfind(')');
  return paren == std::string::npos ? std::string() : line.substr(paren + 1);
}

}  // namespace

bool process_alive(pid_t pid) {
  if (pid <= 0) return false;
  if (::kill(pid, 0) != 0 && errno != EPERM) return false;
  const auto rest = stat_after_command(pid);
  if (!rest) return false;
  return rest->size() < 2 || (*rest)[1] != 'Z';
}

std::optional<ProcessCpu> process_cpu(pid_t pid) {
  if (pid <= 0) return std::nullopt;
  const auto rest = stat_after_command(pid);
  if (!rest) return std::nullopt;
  std::istringstream in(*rest);
  ProcessCpu r;
  std::string skip;
  unsigned long long utime = 0, stime = 0;
  if (!(in >> r.state)) return std::nullopt;
  for (int field = 4; field <= 13; ++field) in >> skip;  // ppid .. cmajflt
  if (!(in >> utime >> stime)) return std::nullopt;
  const long hz = ::sysconf(_SC_CLK_TCK);
  r.cpu = std::chrono::milliseconds((utime + stime) * 1000 / uint64_t(hz > 0 ? hz : 100));
  return r;
}

CpuDeadline::CpuDeadline(pid_t pid, std::chrono::milliseconds timeout, std::chrono::milliseconds cpu_budget,
                         int wall_factor)
    : pid_(pid), start_(std::chrono::steady_clock::now()), timeout_(timeout), cpu_budget_(cpu_budget),
      wall_factor_(wall_factor) {
  if (pid_ > 0) now_ = process_cpu(pid_).value_or(ProcessCpu{});
  cpu0_ = now_.cpu;
}

std::chrono::milliseconds CpuDeadline::waited() const {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start_);
}

std::string CpuDeadline::spent() const {
  char got[80];
  std::snprintf(got, sizeof got, "in %.1f s (QEMU had %.2f s of CPU meanwhile)", double(waited().count()) / 1000,
                double(cpu_used().count()) / 1000);
  return got;
}

bool CpuDeadline::passed() {
  const auto w = waited();
  if (w < timeout_) return false;
  if (pid_ <= 0) return true;
  auto cpu = process_cpu(pid_);
  if (!cpu || cpu->state == 'Z') return gone_ = true;
  now_ = *cpu;
  return now_.cpu - cpu0_ >= cpu_budget_ || w >= wall_factor_ * timeout_;
}

std::string process_cmdline(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/cmdline", std::ios::binary);
  std::string s((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  for (char& c : s)
    if (c == '\0') c = ' ';
  return s;
}

bool terminate_process(pid_t pid, std::chrono::milliseconds grace) {
  if (!process_alive(pid)) return true;
  ::kill(pid, SIGTERM);
  auto deadline = std::chrono::steady_clock::now() + grace;
  while (std::chrono::steady_clock::now() < deadline) {
    ::waitpid(pid, nullptr, WNOHANG);  // reap if it happens to be our child
    if (!process_alive(pid)) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ::kill(pid, SIGKILL);
  for (int i = 0; i < 200 && process_alive(pid); ++i) {
    ::waitpid(pid, nullptr, WNOHANG);
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return !process_alive(pid);
}

std::string find_in_path(const std::string& name) {
  if (name.find('/') != std::string::npos) return ::access(name.c_str(), X_OK) == 0 ? name : "";
  const char* path = std::getenv("PATH");
  std::stringstream ss(path ? path : "/usr/bin:/bin");
  std::string dir;
  while (std::getline(ss, dir, ':')) {
    std::string full = (dir.empty() ? "." : dir) + "/" + name;
    struct stat st {};
    if (::stat(full.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(full.c_str(), X_OK) == 0) return full;
  }
  return "";
}

bool write_pid_file(const std::string& path, pid_t pid) {
  std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << pid << "\n";
    if (!out.flush()) return false;
  }
  return std::rename(tmp.c_str(), path.c_str()) == 0;
}

pid_t read_pid_file(const std::string& path) {
  std::ifstream in(path);
  long pid = 0;
  in >> pid;
  return pid > 0 ? pid_t(pid) : 0;
}

std::string tail_file(const std::string& path, size_t max_lines) {
  std::ifstream in(path);
  std::vector<std::string> lines;
  std::string line;
  while (std::getline(in, line)) {
    lines.push_back(line);
    if (lines.size() > max_lines) lines.erase(lines.begin());
  }
  std::string out;
  for (const auto& l : lines) out += "  | " + l + "\n";
  return out;
}

}  // namespace ulnic
