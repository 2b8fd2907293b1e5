// Small helpers shared by the host unit tests.
#pragma once

#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>

namespace ulnic_test {

// A fresh directory under /tmp, removed with everything in it at scope exit.
class TempDir {
 public:
  explicit TempDir(const std::string& tag = "test") {
    std::string tmpl = "/tmp/ulnic-" + tag + "-XXXXXX";
    const char* d = ::mkdtemp(tmpl.data());
    EXPECT_NE(d, nullptr);
    path_ = d ? d : "";
  }
  ~TempDir() {
    std::error_code ec;
    if (!path_.empty()) std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

// A child process that only sleeps, killed at scope exit: a "QEMU" that
// gets no CPU, for the waits judged by QEMU's CPU time (CpuDeadline).
class SleepingProcess {
 public:
  SleepingProcess() : pid_(::fork()) {
    if (pid_ == 0) {
      ::pause();
      ::_exit(0);
    }
    EXPECT_GT(pid_, 0);
  }
  ~SleepingProcess() { stop(); }
  SleepingProcess(const SleepingProcess&) = delete;
  SleepingProcess& operator=(const SleepingProcess&) = delete;
  pid_t pid() const { return pid_; }
  void stop() {
    if (pid_ > 0) ::kill(pid_, SIGKILL), ::waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }

 private:
  pid_t pid_;
};

// The seconds of CPU a CpuDeadline message says QEMU had ("QEMU had 0.01 s
// of CPU meanwhile"), or -1 if it says none. A SleepingProcess gets next to
// none -- not always 0.00: forked from a TSan process, its child's start
// took 0.01 s -- so a test asserts it stayed under the bound it would
// have passed, not that it is zero.
inline double qemu_cpu_seconds(const std::string& message) {
  const std::string key = "QEMU had ";
  size_t at = message.find(key);
  if (at == std::string::npos) return -1;
  char* end = nullptr;
  double s = std::strtod(message.c_str() + at + key.size(), &end);
  return end && std::string(end).rfind(" s of CPU", 0) == 0 ? s : -1;
}

// EXPECT_TRUE(Contains(message, "what the user relies on")) prints both.
inline ::testing::AssertionResult Contains(const std::string& hay, const std::string& needle) {
  if (hay.find(needle) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "\"" << hay << "\" does not contain \"" << needle << "\"";
}

}  // namespace ulnic_test
