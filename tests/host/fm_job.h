// What the FM test binaries (fm_core.cpp, fm_layers.cpp) share: running a
// job of forked FM ranks on the cluster the binary booted (vipl_cluster.h),
// the children's checks and byte patterns, and the NICs' am_refused
// counters (FM, and every layer over it, must never make a NIC refuse).
//
// A job's rank is a forked child: it reports failed checks on stderr and by
// its exit status (0: all checks passed); the parent asserts on the statuses.
#pragma once

#include <fm.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "vipl_cluster.h"

namespace fm_test {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

// ---- in the children

// A child's failed checks: each printed, and the child exits 1 at the end.
inline int g_failures = 0;

inline void check(bool ok, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
inline void check(bool ok, const char* fmt, ...) {
  if (ok) return;
  g_failures++;
  va_list ap;
  va_start(ap, fmt);
  std::fprintf(stderr, "[rank %lu] check failed: ", FM_nodeid);
  std::vfprintf(stderr, fmt, ap);
  std::fputc('\n', stderr);
  va_end(ap);
}

// The byte at `off` of message (or block) `seq` from `sender`.
inline uint8_t pattern(uint32_t sender, uint32_t seq, uint64_t off) {
  uint64_t x = (uint64_t(sender) + 1) * 0x9E3779B97F4A7C15ull ^ (uint64_t(seq) + 7) * 0xC2B2AE3D27D4EB4Full ^
               (off + 1) * 0x165667B19E3779F9ull;
  x ^= x >> 29;
  x *= 0xBF58476D1CE4E5B9ull;
  return uint8_t(x >> 32);
}

// Bytes `from` .. `from + n` of (sender, seq) at `p`.
inline void fill(uint8_t* p, size_t n, uint32_t sender, uint32_t seq, uint64_t from = 0) {
  for (size_t i = 0; i < n; ++i) p[i] = pattern(sender, seq, from + i);
}
inline void fill(std::vector<uint8_t>& v, uint32_t sender, uint32_t seq) { fill(v.data(), v.size(), sender, seq); }

// The first of `n` bytes at `p` that is not byte `from + i` of (sender, seq)
// (its index i), or SIZE_MAX.
inline size_t first_mismatch(const uint8_t* p, size_t n, uint32_t sender, uint32_t seq, uint64_t from = 0) {
  for (size_t i = 0; i < n; ++i)
    if (p[i] != pattern(sender, seq, from + i)) return i;
  return SIZE_MAX;
}
inline size_t first_mismatch(const std::vector<uint8_t>& v, size_t n, uint32_t sender, uint32_t seq) {
  return first_mismatch(v.data(), n, sender, seq);
}

// A child's exit status: `finalize` (FM_finalize, or a layer's) must
// return 0, and every check must have passed.
inline int child_exit(int (*finalize)(void) = FM_finalize) {
  check(finalize() == 0, "finalize");
  return g_failures ? 1 : 0;
}

// ---- in the parent

// Runs an FM job: rank r on node nodes[r], running body(r) in a forked
// child (ULNIC_FM_RANK / ULNIC_FM_NPROCS / ULNIC_FM_DIR / ULNIC_NODE set,
// the directory fresh). Returns each rank's exit status (-1: killed or
// timed out after `limit`).
inline std::vector<int> run_job(const std::vector<int>& nodes, const std::function<int(unsigned)>& body,
                                std::chrono::seconds limit = 50s) {
  std::string dir = "/tmp/ulnic-fmjob-XXXXXX";
  if (!::mkdtemp(dir.data())) return std::vector<int>(nodes.size(), -1);
  std::fflush(nullptr);
  std::vector<pid_t> pids;
  for (unsigned r = 0; r < nodes.size(); ++r) {
    pid_t pid = ::fork();
    if (pid == 0) {
      ::setenv("ULNIC_FM_RANK", std::to_string(r).c_str(), 1);
      ::setenv("ULNIC_FM_NPROCS", std::to_string(nodes.size()).c_str(), 1);
      ::setenv("ULNIC_FM_DIR", dir.c_str(), 1);
      ::setenv("ULNIC_NODE", std::to_string(nodes[r]).c_str(), 1);
      int rc = body(r);
      std::fflush(nullptr);
      ::_exit(rc);
    }
    pids.push_back(pid);
  }
  std::vector<int> rc(nodes.size(), -1);
  auto until = Clock::now() + limit;
  size_t left = pids.size();
  while (left) {
    for (size_t r = 0; r < pids.size(); ++r) {
      if (pids[r] <= 0) continue;
      int st = 0;
      if (::waitpid(pids[r], &st, WNOHANG) == pids[r]) {
        rc[r] = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
        pids[r] = 0;
        left--;
      }
    }
    if (left && Clock::now() > until) {
      for (pid_t p : pids)
        if (p > 0) ::kill(p, SIGKILL), ::waitpid(p, nullptr, 0);
      break;
    }
    std::this_thread::sleep_for(5ms);
  }
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  return rc;
}

// A number from `ulnic node status --json` for the node: the first field
// called `name` (a NIC counter, or "pid": the board's QEMU); -1 if unknown.
inline long node_status_number(int node, const std::string& name) {
  std::string cmd = std::string(ULNIC_TEST_BINDIR) + "/ulnic node status --json -c " +
                    vipl_test::env_or("ULNIC_CLUSTER", "") + " -n " + std::to_string(node);
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) return -1;
  std::string out;
  char b[4096];
  size_t n;
  while ((n = std::fread(b, 1, sizeof b, p)) > 0) out.append(b, n);
  ::pclose(p);
  std::string key = "\"" + name + "\":";
  size_t at = out.find(key);
  return at == std::string::npos ? -1 : std::atol(out.c_str() + at + key.size());
}
inline long am_refused(int node) { return node_status_number(node, "am_refused"); }

// A test whose NICs (nodes 0 .. Nodes-1) must refuse nothing while it runs.
template <int Nodes>
class NoRefusalsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (int n = 0; n < Nodes; ++n) {
      refused_[n] = am_refused(n);
      ASSERT_GE(refused_[n], 0) << "node " << n << ": no am_refused counter";
    }
  }
  // A test that makes node `node` refuse `n` messages on purpose.
  void expect_refusals(int node, long n) { refused_[node] += n; }
  // A test that kills a rank: its node refuses what was in flight to it.
  void allow_refusals(int node) { refused_[node] = -1; }
  // FM never sends what the receiving NIC would refuse.
  void TearDown() override {
    for (int n = 0; n < Nodes; ++n) {
      if (refused_[n] < 0) continue;
      EXPECT_EQ(am_refused(n), refused_[n]) << "node " << n << " refused messages";
    }
  }
  long refused_[Nodes] = {};
};

}  // namespace fm_test
