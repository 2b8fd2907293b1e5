// Issue 24, item 5: memory registration as message-passing libraries with a
// registration cache use it. Registering a buffer, the program freeing it
// (free(), munmap), getting memory again (often at the same address) and
// deregistering, in every order: nothing crashes, memory mapped anew where a
// registered region was is never written by the deregistration (nor by the
// NIC through the old registration), the bytes moved through registered
// buffers are right, and registering a buffer again after deregistering it
// moves no pages (libulnic's Nic::pages_moved_in() stays,
// Nic::registration_cache_hits() grows: the Nic behind a VIPL handle is
// reached through libvipl's internals). Last, tests/programs/
// vipl_regcache_mpl.c -- a ping-pong over a small library written the M-VIA
// way (rendezvous from 16 KiB with per-message registration through a
// cache, the application freeing and re-allocating its buffers) -- runs as
// two processes opened by M-VIA device path and named by `ulnic cluster up
// --names`.
//
// One 2-node cluster for the binary (vipl_cluster.h). Each test opens nic0
// (side a_) and nic1 (side b_) in this process, connected by a reliable VI
// pair with RDMA write enabled.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <malloc.h>
#include <spawn.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>
#include <vipl.h>

#include <chrono>
#include <cstring>
#include <fstream>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "vipl_cluster.h"
#include "vipl_internal.h"
#include "vipl_layer.h"

namespace {

using namespace vipl_test;
using Clock = std::chrono::steady_clock;

constexpr size_t kPage = 4096;
constexpr VIP_ULONG kLong = 10000;
constexpr size_t kDescBytes = 2 * kPage;  // a few descriptors, 64 bytes each
constexpr size_t kPeerBytes = 512 * 1024;  // the other side's registered buffer

[[maybe_unused]] ::testing::Environment* const cluster_env = ::testing::AddGlobalTestEnvironment(
    new ClusterEnvironment("vipl-regcache", kNodes, {"--names", "rc-alpha,rc-beta"}));

// The libulnic Nic behind a VIPL NIC handle: its registration statistics.
const ulnic::Nic& core_of(VIP_NIC_HANDLE h) {
  return *ulnic::vipl::lookup<ulnic::vipl::NicState>(h, ulnic::vipl::Kind::kNic)->core;
}

// Does [p, +n) hold the bytes pattern() writes for `seed`?
::testing::AssertionResult holds(const uint8_t* p, size_t n, uint32_t seed) {
  std::vector<uint8_t> want(n);
  pattern(want.data(), n, seed);
  for (size_t i = 0; i < n; ++i)
    if (p[i] != want[i])
      return ::testing::AssertionFailure() << "byte " << i << " of " << n << " is " << unsigned(p[i]) << ", want "
                                           << unsigned(want[i]) << " (seed " << seed << ")";
  return ::testing::AssertionSuccess();
}

// How programs get buffers: mmap; malloc of a big block (glibc maps it on
// its own and unmaps it on free: the threshold is pinned below, so it does
// not move); malloc of a smaller one (from the heap, where free leaves the
// pages mapped).
enum class Alloc { kMmap, kMallocLarge, kMallocSmall };
const char* name(Alloc a) {
  return a == Alloc::kMmap ? "mmap" : a == Alloc::kMallocLarge ? "malloc (mapped)" : "malloc (heap)";
}
size_t size_of(Alloc a) { return a == Alloc::kMallocSmall ? 40 * 1024 : 256 * 1024; }
// Does giving the buffer back unmap its pages?
bool unmaps(Alloc a) { return a != Alloc::kMallocSmall; }

struct Buffer {
  uint8_t* p = nullptr;
  size_t n = 0;
  Alloc how = Alloc::kMmap;
};

// A buffer of `how`; an mmap goes at `hint` if that is free (the allocator
// giving the same address again, made sure of).
Buffer get(Alloc how, void* hint = nullptr) {
  Buffer b{nullptr, size_of(how), how};
  if (how == Alloc::kMmap) {
    void* p = ::mmap(hint, b.n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | (hint ? MAP_FIXED_NOREPLACE : 0),
                     -1, 0);
    if (p == MAP_FAILED && hint) p = ::mmap(nullptr, b.n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    b.p = p == MAP_FAILED ? nullptr : static_cast<uint8_t*>(p);
  } else {
    b.p = static_cast<uint8_t*>(std::malloc(b.n));
  }
  return b;
}

void put(const Buffer& b) {
  if (b.how == Alloc::kMmap) ::munmap(b.p, b.n);
  else std::free(b.p);
}

// One side: a NIC, a ptag, a VI, registered descriptors and a registered
// buffer of its own.
struct Side {
  VIP_NIC_HANDLE nic = nullptr;
  VIP_PROTECTION_HANDLE ptag = nullptr;
  VIP_VI_HANDLE vi = nullptr;
  uint8_t* descs = nullptr;
  VIP_MEM_HANDLE descs_h = 0;
  uint8_t* mine = nullptr;  // kPeerBytes
  VIP_MEM_HANDLE mine_h = 0;
};

class Regcache : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    // Blocks of 128 KiB and more come from their own mappings, always.
    ASSERT_EQ(mallopt(M_MMAP_THRESHOLD, 128 * 1024), 1);
  }

  void SetUp() override {
    for (int k = 0; k < 2; ++k) {
      Side& s = k ? b_ : a_;
      std::string dev = "nic" + std::to_string(k);
      ASSERT_EQ(open_nic(dev.c_str(), &s.nic), VIP_SUCCESS) << dev;
      ASSERT_EQ(VipCreatePtag(s.nic, &s.ptag), VIP_SUCCESS);
      s.descs = map(kDescBytes);
      s.mine = map(kPeerBytes);
      ASSERT_TRUE(s.descs && s.mine);
      ASSERT_EQ(reg(s, s.descs, kDescBytes, &s.descs_h), VIP_SUCCESS);
      ASSERT_EQ(reg(s, s.mine, kPeerBytes, &s.mine_h), VIP_SUCCESS);
      VIP_VI_ATTRIBUTES a{};
      a.ReliabilityLevel = VIP_SERVICE_RELIABLE_DELIVERY;
      a.MaxTransferSize = 1 << 20;
      a.Ptag = s.ptag;
      a.EnableRdmaWrite = VIP_TRUE;
      ASSERT_EQ(VipCreateVi(s.nic, &a, nullptr, nullptr, &s.vi), VIP_SUCCESS);
    }
    connect();
  }

  void TearDown() override {
    for (Side* s : {&a_, &b_})
      if (s->nic) {
        EXPECT_EQ(VipCloseNic(s->nic), VIP_SUCCESS);
      }
    for (auto [p, n] : maps_) ::munmap(p, n);
  }

  uint8_t* map(size_t n) {
    void* p = ::mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return nullptr;
    maps_.push_back({p, n});
    return static_cast<uint8_t*>(p);
  }

  VIP_RETURN reg(Side& s, void* p, size_t n, VIP_MEM_HANDLE* h) {
    VIP_MEM_ATTRIBUTES m{s.ptag, VIP_TRUE, VIP_FALSE};
    return VipRegisterMem(s.nic, p, VIP_ULONG(n), &m, h);
  }

  // a_'s VI (client) to b_'s (server), with the client asking again while
  // the server does not wait yet (VIP_NO_MATCH).
  void connect() {
    const std::string disc = fresh_discriminator("rc");
    VIP_RETURN wait = VIP_ERROR_RESOURCE, accept = VIP_ERROR_RESOURCE;
    std::thread server([&] {
      NetAddress here = address(1, disc), from;
      VIP_CONN_HANDLE conn = nullptr;
      VIP_VI_ATTRIBUTES ra{};
      wait = VipConnectWait(b_.nic, here.get(), kLong, from.get(), &ra, &conn);
      if (wait == VIP_SUCCESS) accept = VipConnectAccept(conn, b_.vi);
    });
    NetAddress here = address(0, disc), there = address(1, disc);
    VIP_VI_ATTRIBUTES ra{};
    VIP_RETURN request = connect_request(a_.vi, here.get(), there.get(), kLong, &ra);
    server.join();
    ASSERT_EQ(request, VIP_SUCCESS);
    ASSERT_EQ(wait, VIP_SUCCESS);
    ASSERT_EQ(accept, VIP_SUCCESS);
  }

  // A descriptor of `s` (slot i of its descriptor area), zeroed.
  static VIP_DESCRIPTOR* desc(Side& s, int i) {
    auto* d = reinterpret_cast<VIP_DESCRIPTOR*>(s.descs + i * 64);
    std::memset(d, 0, 64);
    return d;
  }

  static ::testing::AssertionResult completed(Side& s, bool recv, VIP_DESCRIPTOR* want) {
    VIP_DESCRIPTOR* d = nullptr;
    VIP_RETURN rc = recv ? VipRecvWait(s.vi, kLong, &d) : VipSendWait(s.vi, kLong, &d);
    if (rc != VIP_SUCCESS) return ::testing::AssertionFailure() << (recv ? "VipRecvWait " : "VipSendWait ") << rc;
    if (d != want) return ::testing::AssertionFailure() << "another descriptor completed";
    if (d->CS.Status & VIP_STATUS_ERROR_MASK) return ::testing::AssertionFailure() << "status 0x" << std::hex << d->CS.Status;
    return ::testing::AssertionSuccess();
  }

  // Sends n bytes at `src` (registered with `from` under hs) into `dst` of
  // the other side (registered there under hd).
  static ::testing::AssertionResult send(Side& from, const void* src, VIP_MEM_HANDLE hs, Side& to, void* dst,
                                         VIP_MEM_HANDLE hd, size_t n) {
    VIP_DESCRIPTOR* r = desc(to, 0);
    r->CS.SegCount = 1;
    r->DS[0].Local.Data.Address = dst;
    r->DS[0].Local.Handle = hd;
    r->DS[0].Local.Length = VIP_UINT32(n);
    if (VIP_RETURN rc = VipPostRecv(to.vi, r, to.descs_h); rc != VIP_SUCCESS)
      return ::testing::AssertionFailure() << "VipPostRecv " << rc;
    VIP_DESCRIPTOR* s = desc(from, 1);
    s->CS.SegCount = 1;
    s->CS.Length = VIP_UINT32(n);
    s->DS[0].Local.Data.Address = const_cast<void*>(src);
    s->DS[0].Local.Handle = hs;
    s->DS[0].Local.Length = VIP_UINT32(n);
    if (VIP_RETURN rc = VipPostSend(from.vi, s, from.descs_h); rc != VIP_SUCCESS)
      return ::testing::AssertionFailure() << "VipPostSend " << rc;
    if (auto ok = completed(from, false, s); !ok) return ok;
    if (auto ok = completed(to, true, r); !ok) return ok;
    if (r->CS.Length != n) return ::testing::AssertionFailure() << "received " << r->CS.Length << " of " << n;
    return ::testing::AssertionSuccess();
  }

  // Moves a buffer of a_ both ways: bytes of `seed` written into it go out
  // to b_, and b_'s bytes (seed + 1) come back in; checks every byte at
  // both ends.
  ::testing::AssertionResult both_ways(uint8_t* p, VIP_MEM_HANDLE h, size_t n, uint32_t seed) {
    pattern(p, n, seed);
    std::memset(b_.mine, 0, n);
    if (auto ok = send(a_, p, h, b_, b_.mine, b_.mine_h, n); !ok) return ok;
    if (auto ok = holds(b_.mine, n, seed); !ok) return ::testing::AssertionFailure() << "out: " << ok.message();
    pattern(b_.mine, n, seed + 1);
    if (auto ok = send(b_, b_.mine, b_.mine_h, a_, p, h, n); !ok) return ok;
    if (auto ok = holds(p, n, seed + 1); !ok) return ::testing::AssertionFailure() << "in: " << ok.message();
    return ::testing::AssertionSuccess();
  }

  // An RDMA write by b_ into [dst, +n) of a_'s registration h.
  ::testing::AssertionResult rdma_write_into(void* dst, VIP_MEM_HANDLE h, size_t n, uint32_t seed) {
    pattern(b_.mine, n, seed);
    VIP_DESCRIPTOR* d = desc(b_, 2);
    d->CS.Control = VIP_CONTROL_OP_RDMAWRITE;
    d->CS.SegCount = 2;
    d->CS.Length = VIP_UINT32(n);
    d->DS[0].Remote.Data.Address = dst;
    d->DS[0].Remote.Handle = h;
    d->DS[1].Local.Data.Address = b_.mine;
    d->DS[1].Local.Handle = b_.mine_h;
    d->DS[1].Local.Length = VIP_UINT32(n);
    if (VIP_RETURN rc = VipPostSend(b_.vi, d, b_.descs_h); rc != VIP_SUCCESS)
      return ::testing::AssertionFailure() << "VipPostSend " << rc;
    return completed(b_, false, d);
  }

  Side a_, b_;
  std::vector<std::pair<void*, size_t>> maps_;
};

TEST_F(Regcache, RegisteringABufferAgainAfterDeregisteringItMovesNoPages) {
  const ulnic::Nic& core = core_of(a_.nic);
  for (Alloc how : {Alloc::kMmap, Alloc::kMallocLarge, Alloc::kMallocSmall}) {
    SCOPED_TRACE(name(how));
    Buffer b = get(how);
    ASSERT_TRUE(b.p);
    pattern(b.p, b.n, 1);
    const uint64_t moved0 = core.pages_moved_in();
    VIP_MEM_HANDLE h = 0;
    ASSERT_EQ(reg(a_, b.p, b.n, &h), VIP_SUCCESS);
    EXPECT_GE(core.pages_moved_in(), moved0 + b.n / kPage);  // the first time, its pages move in
    EXPECT_TRUE(both_ways(b.p, h, b.n, 10));
    ASSERT_EQ(VipDeregisterMem(a_.nic, b.p, h), VIP_SUCCESS);
    EXPECT_TRUE(holds(b.p, b.n, 11));  // deregistering left the bytes as they were
    // Registered again (a message later, the same buffer): not a page moves.
    for (int round = 0; round < 3; ++round) {
      const uint64_t moved = core.pages_moved_in(), hits = core.registration_cache_hits();
      pattern(b.p, b.n, 20 + round);
      ASSERT_EQ(reg(a_, b.p, b.n, &h), VIP_SUCCESS);
      EXPECT_EQ(core.pages_moved_in(), moved) << "round " << round;
      EXPECT_EQ(core.registration_cache_hits(), hits + 1) << "round " << round;
      EXPECT_TRUE(holds(b.p, b.n, 20 + round));
      EXPECT_TRUE(both_ways(b.p, h, b.n, 30 + round * 2));
      ASSERT_EQ(VipDeregisterMem(a_.nic, b.p, h), VIP_SUCCESS);
    }
    put(b);
  }
}

// One way to go from a registered buffer to a new one: the steps after the
// registration, in order. F: the program gives the buffer back (free or
// munmap); A: it gets a buffer of the same size again (at the same address
// where the allocator gives it) and fills it; D: VipDeregisterMem of the
// old registration; R: registering the new buffer while the old
// registration stands.
struct Order {
  const char* steps;
};

TEST_F(Regcache, FreeReallocateAndDeregisterInEveryOrder) {
  const Order orders[] = {{"FAD"}, {"FDA"}, {"DFA"}, {"FARD"}};
  uint32_t seed = 100;
  for (Alloc how : {Alloc::kMmap, Alloc::kMallocLarge, Alloc::kMallocSmall}) {
    for (const Order& order : orders) {
      const std::string steps = order.steps;
      SCOPED_TRACE(std::string(name(how)) + ", register then " + steps);
      Buffer old = get(how);
      ASSERT_TRUE(old.p);
      pattern(old.p, old.n, ++seed);
      VIP_MEM_HANDLE h_old = 0;
      ASSERT_EQ(reg(a_, old.p, old.n, &h_old), VIP_SUCCESS);
      EXPECT_TRUE(both_ways(old.p, h_old, old.n, ++seed));
      ++seed;
      Buffer now;
      const uint32_t new_seed = ++seed;
      bool deregistered = false;
      for (char step : steps) {
        if (step == 'F') {
          put(old);
        } else if (step == 'A') {
          now = get(how, old.p);
          ASSERT_TRUE(now.p);
          if (how == Alloc::kMmap) {
            EXPECT_EQ(now.p, old.p) << "mmap at the old address";
          }
          pattern(now.p, now.n, new_seed);
          if (unmaps(how) && !deregistered && now.p == old.p) {
            // The NIC writing through the old registration reaches the
            // pages that registration had, never the new mapping.
            EXPECT_TRUE(rdma_write_into(old.p, h_old, old.n, ++seed));
            EXPECT_TRUE(holds(now.p, now.n, new_seed)) << "an RDMA write through the old registration";
          }
        } else if (step == 'D') {
          ASSERT_EQ(VipDeregisterMem(a_.nic, old.p, h_old), VIP_SUCCESS);
          deregistered = true;
          if (now.p) {
            EXPECT_TRUE(holds(now.p, now.n, new_seed)) << "after deregistering the old registration";
          }
        } else if (step == 'R' && unmaps(how) && now.p == old.p) {
          // Where a region still registered was unmapped: not until it goes
          // (SEMANTICS.md), and the new bytes stay as they are.
          VIP_MEM_HANDLE h = 0;
          EXPECT_EQ(reg(a_, now.p, now.n, &h), VIP_ERROR_RESOURCE);
          EXPECT_TRUE(holds(now.p, now.n, new_seed));
        }
      }
      // The new buffer has its own bytes, registers, and carries data.
      EXPECT_TRUE(holds(now.p, now.n, new_seed));
      VIP_MEM_HANDLE h_new = 0;
      ASSERT_EQ(reg(a_, now.p, now.n, &h_new), VIP_SUCCESS);
      EXPECT_TRUE(holds(now.p, now.n, new_seed)) << "registering the new buffer";
      std::memset(b_.mine, 0, now.n);
      EXPECT_TRUE(send(a_, now.p, h_new, b_, b_.mine, b_.mine_h, now.n));
      EXPECT_TRUE(holds(b_.mine, now.n, new_seed)) << "the new buffer's bytes at the other side";
      EXPECT_TRUE(both_ways(now.p, h_new, now.n, ++seed));
      ASSERT_EQ(VipDeregisterMem(a_.nic, now.p, h_new), VIP_SUCCESS);
      EXPECT_TRUE(holds(now.p, now.n, seed + 1));
      put(now);
    }
  }
}

TEST_F(Regcache, DeregisteringEveryRegistrationOfFreedMemoryAtOnceIsClean) {
  // A cache flushed at the end: many regions, all given back before. (Not
  // small mallocs: neighbours on the heap share pages, and a buffer that
  // shares pages with a registered one cannot be registered, SEMANTICS.md.)
  std::vector<Buffer> bufs;
  std::vector<VIP_MEM_HANDLE> hs;
  for (int i = 0; i < 8; ++i)
    for (Alloc how : {Alloc::kMmap, Alloc::kMallocLarge}) {
      Buffer b = get(how);
      ASSERT_TRUE(b.p);
      pattern(b.p, b.n, 500 + uint32_t(bufs.size()));
      VIP_MEM_HANDLE h = 0;
      ASSERT_EQ(reg(a_, b.p, b.n, &h), VIP_SUCCESS);
      bufs.push_back(b);
      hs.push_back(h);
    }
  for (const Buffer& b : bufs) put(b);
  // Fresh memory meanwhile, possibly where the old was.
  std::vector<Buffer> fresh;
  for (size_t i = 0; i < bufs.size(); ++i) {
    Buffer b = get(bufs[i].how);
    ASSERT_TRUE(b.p);
    pattern(b.p, b.n, 900 + uint32_t(i));
    fresh.push_back(b);
  }
  for (size_t i = 0; i < bufs.size(); ++i) EXPECT_EQ(VipDeregisterMem(a_.nic, bufs[i].p, hs[i]), VIP_SUCCESS);
  for (size_t i = 0; i < fresh.size(); ++i) EXPECT_TRUE(holds(fresh[i].p, fresh[i].n, 900 + uint32_t(i))) << i;
  for (const Buffer& b : fresh) put(b);
}

// ---- the message-passing library's ping-pong, as two processes

struct Proc {
  pid_t pid = -1;
  std::string out, err;  // files
};

Proc start_mpl(unsigned node, const std::string& self, const std::string& peer, const std::string& dir) {
  Proc r;
  r.out = dir + "/mpl-" + self + ".out";
  r.err = dir + "/mpl-" + self + ".err";
  std::string tool = std::string(ULNIC_TEST_BINDIR) + "/vipl_regcache_mpl";
  std::vector<std::string> args = {tool, "/dev/via_eth0", self, peer};
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::vector<std::string> env;
  for (char** e = environ; *e; ++e)
    if (std::strncmp(*e, "ULNIC_NODE=", 11) != 0) env.push_back(*e);
  env.push_back("ULNIC_NODE=" + std::to_string(node));
  std::vector<char*> envp;
  for (std::string& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, r.out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  posix_spawn_file_actions_addopen(&fa, 2, r.err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  if (posix_spawn(&r.pid, tool.c_str(), &fa, nullptr, argv.data(), envp.data()) != 0) r.pid = -1;
  posix_spawn_file_actions_destroy(&fa);
  return r;
}

// Its exit status (-1: killed after `seconds`).
int finish(const Proc& r, int seconds) {
  auto deadline = Clock::now() + std::chrono::seconds(seconds);
  int status = 0;
  for (;;) {
    pid_t p = ::waitpid(r.pid, &status, WNOHANG);
    if (p == r.pid) return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    if (Clock::now() > deadline) {
      ::kill(r.pid, SIGKILL);
      ::waitpid(r.pid, &status, 0);
      return -1;
    }
    std::this_thread::sleep_for(50ms);
  }
}

TEST(MessagePassingLibrary, APingPongWithARegistrationCachePerMessageVerifiesEveryByte) {
  const std::string dir = env_or("ULNIC_RUNTIME_DIR", "/tmp");
  // The client (rank 1: "rc-beta" > "rc-alpha") first: it asks again until
  // the server waits.
  Proc beta = start_mpl(1, "rc-beta", "rc-alpha", dir);
  std::this_thread::sleep_for(300ms);
  Proc alpha = start_mpl(0, "rc-alpha", "rc-beta", dir);
  ASSERT_GT(beta.pid, 0);
  ASSERT_GT(alpha.pid, 0);
  int rc_alpha = finish(alpha, 300), rc_beta = finish(beta, 60);
  for (const Proc* r : {&alpha, &beta}) {
    const std::string out = slurp(r->out), err = slurp(r->err);
    const std::string report = "stdout:\n" + out + "stderr:\n" + err;
    SCOPED_TRACE(report);
    EXPECT_NE(out.find("OK: "), std::string::npos);
    EXPECT_EQ(err.find("asynchronous error"), std::string::npos) << "the orderly disconnect was printed";
    std::smatch m;
    ASSERT_TRUE(std::regex_search(out, m, std::regex(R"(cache: (\d+) registrations, (\d+) hits, (\d+) evictions, (\d+) deregistered after their memory was freed)")));
    EXPECT_GT(std::stoul(m[2]), 0u) << "registration cache hits";
    EXPECT_GT(std::stoul(m[4]), 0u) << "deregistrations of freed memory";
  }
  EXPECT_EQ(rc_alpha, 0);
  EXPECT_EQ(rc_beta, 0);
}

// Layers on libvipl (AM over VIPL, vipl_layer.h): a program's empty
// VipCQDone hands its core to the NIC (Nic::poll_found: from the second in
// a row each blocks until the NIC has news, or kTightBlock); a layer's own
// calls must not -- counted, an AM_Request blocked for the whole slice
// before it posted its message -- and the layer reports its program's polls
// instead. What is asserted is whether a poll blocked (tight_blocks()),
// never how long anything took. A program's polls may not block if the
// thread lost its CPU for longer than kTightGap between two of them (a
// loaded machine): those checks want one attempt of a few that blocked.
TEST(LayerPolls, ALayersOwnPollsNeverBlockAndItsReportOfTheProgramsPollsDoes) {
  VIP_NIC_HANDLE nic = nullptr;
  ASSERT_EQ(VipOpenNic(reinterpret_cast<const VIP_CHAR*>("nic0"), &nic), VIP_SUCCESS);
  VIP_CQ_HANDLE cq = nullptr;
  ASSERT_EQ(VipCreateCQ(nic, 16, &cq), VIP_SUCCESS);
  const ulnic::Nic& core = core_of(nic);
  VIP_VI_HANDLE vi = nullptr;
  VIP_BOOLEAN recv = VIP_FALSE;
  constexpr int kAttempts = 5;

  ulnic_vipl_quiet_polls(1);
  const uint64_t start = core.tight_blocks();
  for (int i = 0; i < 200; ++i) ASSERT_EQ(VipCQDone(cq, &vi, &recv), VIP_NOT_DONE);
  EXPECT_EQ(core.tight_blocks(), start) << "a layer's own empty polls blocked";
  ulnic_vipl_quiet_polls(1);  // quiet scopes nest
  ulnic_vipl_quiet_polls(0);
  for (int i = 0; i < 20; ++i) ASSERT_EQ(VipCQDone(cq, &vi, &recv), VIP_NOT_DONE);
  EXPECT_EQ(core.tight_blocks(), start) << "an inner quiet scope's end made the outer one loud";

  // The layer's report of its program's polls counts as VipCQDone's would.
  bool blocked = false;
  for (int a = 0; a < kAttempts && !blocked; ++a) {
    const uint64_t before = core.tight_blocks();
    for (int i = 0; i < 3; ++i) ulnic_vipl_polled(nic, 0);
    blocked = core.tight_blocks() > before;
  }
  EXPECT_TRUE(blocked) << "three empty polls reported by the layer never blocked in " << kAttempts << " attempts";
  ulnic_vipl_quiet_polls(0);

  // Out of the layer's scope the program's own VipCQDone hands the core over.
  blocked = false;
  for (int a = 0; a < kAttempts && !blocked; ++a) {
    const uint64_t before = core.tight_blocks();
    for (int i = 0; i < 3; ++i) ASSERT_EQ(VipCQDone(cq, &vi, &recv), VIP_NOT_DONE);
    blocked = core.tight_blocks() > before;
  }
  EXPECT_TRUE(blocked) << "three empty VipCQDone of the program never blocked in " << kAttempts << " attempts";

  EXPECT_EQ(VipDestroyCQ(cq), VIP_SUCCESS);
  EXPECT_EQ(VipCloseNic(nic), VIP_SUCCESS);
}

}  // namespace

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
