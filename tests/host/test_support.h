// Small helpers shared by the host unit tests.
#pragma once

#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

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

// EXPECT_TRUE(Contains(message, "what the user relies on")) prints both.
inline ::testing::AssertionResult Contains(const std::string& hay, const std::string& needle) {
  if (hay.find(needle) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "\"" << hay << "\" does not contain \"" << needle << "\"";
}

}  // namespace ulnic_test
