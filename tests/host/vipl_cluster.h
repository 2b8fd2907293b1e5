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

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <ostream>
#include <sstream>
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
  // `nodes`: how many NICs it boots (nodes 0 .. nodes-1). `extra`: more
  // arguments for `ulnic cluster up` (--names ...).
  explicit ClusterEnvironment(std::string name, int nodes = kNodes, std::vector<std::string> extra = {})
      : name_(std::move(name)), nodes_(nodes), extra_(std::move(extra)) {}

  const std::string& dir() const { return dir_; }
  const std::string& cluster() const { return cluster_; }

  void SetUp() override {
    std::string pattern = "/tmp/ulnic-" + name_ + "-XXXXXX";
    ASSERT_NE(::mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
    cluster_ = name_ + "-" + std::to_string(::getpid());
    ::setenv("ULNIC_RUNTIME_DIR", dir_.c_str(), 1);
    ::setenv("ULNIC_CLUSTER", cluster_.c_str(), 1);
    start_reaper();
    std::string fw = env_or("ULNIC_FIRMWARE_DIR", ULNIC_TEST_FIRMWARE_DIR) + "/ulnic-fw.elf";
    std::vector<std::string> up = {"cluster", "up", "-n", std::to_string(nodes_), "-c", cluster_, "--slot-size",
                                   std::to_string(kSlotMiB), "--firmware", fw};
    up.insert(up.end(), extra_.begin(), extra_.end());
    ASSERT_EQ(run_ulnic(up), 0) << "ulnic cluster up failed";
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
  std::vector<std::string> extra_;
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

// ---- what the suites share besides the cluster

// A file's contents ("" if there is none).
inline std::string slurp(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

// A VIP_NET_ADDRESS with room for a 2-byte host address and a discriminator
// of the largest length.
struct NetAddress {
  alignas(VIP_NET_ADDRESS) unsigned char bytes[sizeof(VIP_NET_ADDRESS) + 2 + 64] = {};
  VIP_NET_ADDRESS* get() { return reinterpret_cast<VIP_NET_ADDRESS*>(bytes); }
  std::string discriminator() {
    VIP_NET_ADDRESS* a = get();
    size_t n = std::min<size_t>(a->DiscriminatorLen, 64);
    return std::string(reinterpret_cast<const char*>(a->HostAddress) + 2, n);
  }
  // The node of a 2-byte host address (-1: another length).
  int node() { return get()->HostAddressLen == 2 ? get()->HostAddress[0] | get()->HostAddress[1] << 8 : -1; }
};

// Node `node`'s address (2-byte little-endian node id) with `disc`.
inline NetAddress address(unsigned node, const std::string& disc) {
  NetAddress n;
  VIP_NET_ADDRESS* a = n.get();
  a->HostAddressLen = 2;
  a->DiscriminatorLen = VIP_UINT16(disc.size());
  a->HostAddress[0] = VIP_UINT8(node & 0xff);
  a->HostAddress[1] = VIP_UINT8(node >> 8);
  std::memcpy(a->HostAddress + 2, disc.data(), disc.size());
  return n;
}

// A discriminator no other connection of this process uses.
inline std::string fresh_discriminator(const std::string& tag) {
  static std::atomic<unsigned> counter{0};
  return "d" + std::to_string(++counter) + "-" + tag;
}

// Bytes that differ from seed to seed and from offset to offset.
inline void pattern(uint8_t* p, size_t n, uint32_t seed) {
  uint32_t x = seed * 2654435761u + 12345u;
  for (size_t i = 0; i < n; ++i) {
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    p[i] = uint8_t(x >> 7);
  }
}

// The state of `vi` (VipQueryVi, which also runs the library's completion processing).
inline VIP_VI_STATE vi_state(VIP_VI_HANDLE vi) {
  VIP_VI_STATE s = VIP_VI_STATE(-1);
  VIP_VI_ATTRIBUTES a;
  VIP_BOOLEAN se, re;
  EXPECT_EQ(VipQueryVi(vi, &s, &a, &se, &re), VIP_SUCCESS);
  return s;
}

// VipConnectRequest as VIPL clients call it: a request that finds no
// ConnectWait at the server's NIC (not yet, or not any more) is VIP_NO_MATCH
// at once (SEMANTICS.md), so ask again after a short pause, each time with
// the time left, until `ms` have passed.
inline VIP_RETURN connect_request(VIP_VI_HANDLE vi, VIP_NET_ADDRESS* local, VIP_NET_ADDRESS* remote, VIP_ULONG ms,
                                  VIP_VI_ATTRIBUTES* remote_attrs) {
  using Clock = std::chrono::steady_clock;
  const Clock::time_point deadline = Clock::now() + std::chrono::milliseconds(ms);
  for (;;) {
    auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now()).count();
    VIP_RETURN rc = VipConnectRequest(vi, local, remote, VIP_ULONG(left > 0 ? left : 0), remote_attrs);
    if (rc != VIP_NO_MATCH || Clock::now() >= deadline) return rc;
    std::this_thread::sleep_for(2ms);
  }
}

}  // namespace vipl_test
