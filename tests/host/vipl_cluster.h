// The cluster the VIPL conformance suites run on (vipl_conformance.cpp,
// vipl_data_conformance.cpp): nodes 0 and 1 of a cluster this process boots
// once with the `ulnic` tool, in a runtime directory of its own, and takes
// down at the end -- by a reaper child if the process dies first.
#pragma once

#include <fcntl.h>
#include <gtest/gtest.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>
#include <vipl.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <ostream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

extern char** environ;

// Failures print VIP_RETURN names.
inline const char* vip_name(VIP_RETURN rc) {
  static const char* const names[] = {"VIP_SUCCESS",          "VIP_NOT_DONE",
                                      "VIP_INVALID_PARAMETER", "VIP_ERROR_RESOURCE",
                                      "VIP_TIMEOUT",          "VIP_REJECT",
                                      "VIP_INVALID_RELIABILITY_LEVEL", "VIP_INVALID_MTU",
                                      "VIP_INVALID_QOS",      "VIP_INVALID_PTAG",
                                      "VIP_INVALID_RDMAREAD", "VIP_DESCRIPTOR_ERROR",
                                      "VIP_INVALID_STATE",    "VIP_ERROR_NAMESERVICE",
                                      "VIP_NO_MATCH",         "VIP_NOT_REACHABLE",
                                      "VIP_ERROR_NOT_SUPPORTED"};
  return unsigned(rc) < sizeof names / sizeof names[0] ? names[rc] : "VIP_RETURN(?)";
}
inline void PrintTo(VIP_RETURN rc, std::ostream* os) { *os << vip_name(rc); }

namespace vipl_test {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

constexpr int kNodes = 2;
constexpr uint64_t kSlotMiB = 16;

inline std::string env_or(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v && *v ? v : fallback;
}

// Runs `ulnic ARGS...` and returns its exit status; output goes to ours
// (or nowhere).
inline int run_ulnic(const std::vector<std::string>& args, bool quiet = false) {
  std::string tool = std::string(ULNIC_TEST_BINDIR) + "/ulnic";
  std::vector<char*> argv{tool.data()};
  std::vector<std::string> copy = args;
  for (std::string& a : copy) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  if (quiet) {
    posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
  }
  pid_t pid;
  int rc = posix_spawn(&pid, tool.c_str(), &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) return -1;
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// The cluster every test uses: nodes 0 and 1 of a cluster with a name of its
// own, in a runtime directory of its own (ULNIC_RUNTIME_DIR and
// ULNIC_CLUSTER are set for the whole process, as a user would set them,
// and so for the peer processes it starts).
class ClusterEnvironment : public ::testing::Environment {
 public:
  // `name`: the runtime directory is /tmp/ulnic-<name>-XXXXXX, the cluster <name>-<pid>.
  // `nodes`: how many NICs it boots (nodes 0 .. nodes-1).
  explicit ClusterEnvironment(std::string name, int nodes = kNodes) : name_(std::move(name)), nodes_(nodes) {}

  void SetUp() override {
    std::string pattern = "/tmp/ulnic-" + name_ + "-XXXXXX";
    ASSERT_NE(::mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
    cluster_ = name_ + "-" + std::to_string(::getpid());
    ::setenv("ULNIC_RUNTIME_DIR", dir_.c_str(), 1);
    ::setenv("ULNIC_CLUSTER", cluster_.c_str(), 1);
    start_reaper();
    std::string fw = env_or("ULNIC_FIRMWARE_DIR", ULNIC_TEST_FIRMWARE_DIR) + "/ulnic-fw.elf";
    ASSERT_EQ(run_ulnic({"cluster", "up", "-n", std::to_string(nodes_), "-c", cluster_, "--slot-size",
                         std::to_string(kSlotMiB), "--firmware", fw}),
              0)
        << "ulnic cluster up failed";
  }

  void TearDown() override {
    EXPECT_EQ(run_ulnic({"cluster", "down", "-c", cluster_}), 0);
    char done = 1;
    (void)!::write(reaper_pipe_, &done, 1);  // tell the reaper it has nothing to do
    ::close(reaper_pipe_);
    ::waitpid(reaper_, nullptr, 0);
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }

 private:
  // A child that outlives a crash or a ctest timeout of this process: when
  // our end of the pipe closes without a word, it takes the cluster down.
  void start_reaper() {
    int p[2];
    ASSERT_EQ(::pipe(p), 0);
    reaper_ = ::fork();
    ASSERT_GE(reaper_, 0);
    if (reaper_ == 0) {
      ::setsid();  // not killed with our process group
      ::close(p[1]);
      char word;
      if (::read(p[0], &word, 1) != 1) {
        run_ulnic({"cluster", "down", "-c", cluster_}, true);
        std::error_code ec;
        fs::remove_all(dir_, ec);
      }
      ::_exit(0);
    }
    ::close(p[0]);
    reaper_pipe_ = p[1];
    ::fcntl(reaper_pipe_, F_SETFD, FD_CLOEXEC);
  }

  std::string name_, dir_, cluster_;
  int nodes_;
  pid_t reaper_ = -1;
  int reaper_pipe_ = -1;
};

// Opens a NIC of the cluster. A NIC closed a moment ago leaves its slot to
// be wiped by the node daemon (within about 0.1 s); a node with all slots
// still being wiped answers VIP_ERROR_RESOURCE for that long.
inline VIP_RETURN open_nic(const char* name, VIP_NIC_HANDLE* nic) {
  VIP_RETURN rc = VIP_ERROR_RESOURCE;
  for (int i = 0; i < 100 && rc == VIP_ERROR_RESOURCE; ++i) {
    if (i) std::this_thread::sleep_for(100ms);
    rc = VipOpenNic(name, nic);
  }
  return rc;
}

}  // namespace vipl_test
