// VIPL 1.0 conformance, control plane: the calls that own NICs, protection
// tags, memory registrations, completion queues, VIs, the error callback,
// the name service and autodiscovery, checked as a program sees them, from
// the rules of the VI Architecture spec (and, where the spec leaves a choice
// to the provider, from what vipl.h and host/vipl/vipl.cpp promise).
//
// Every test runs against real NICs: a 2-node cluster that this process
// boots once (ClusterEnvironment) with the `ulnic` tool, in a private
// runtime directory, and takes down at the end, even if the process dies.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <spawn.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>
#include <vipl.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "ulnic/abi/fabric.h"
#include "ulnic/abi/slot.h"
#include "ulnic/abi/sram.h"
#include "vipl_cluster.h"

namespace {

using namespace vipl_test;

constexpr size_t kPage = 4096;

[[maybe_unused]] ::testing::Environment* const cluster_env =
    ::testing::AddGlobalTestEnvironment(new ClusterEnvironment("vipl"));

VIP_VI_ATTRIBUTES vi_attributes(VIP_PROTECTION_HANDLE ptag, VIP_RELIABILITY_LEVEL level = VIP_SERVICE_RELIABLE_DELIVERY) {
  VIP_VI_ATTRIBUTES a;
  std::memset(&a, 0, sizeof a);
  a.ReliabilityLevel = level;
  a.MaxTransferSize = 4096;
  a.QoS = nullptr;
  a.Ptag = ptag;
  a.EnableRdmaWrite = VIP_FALSE;
  a.EnableRdmaRead = VIP_FALSE;
  return a;
}

VIP_MEM_ATTRIBUTES mem_attributes(VIP_PROTECTION_HANDLE ptag, bool rdma_write = false, bool rdma_read = false) {
  VIP_MEM_ATTRIBUTES m;
  m.Ptag = ptag;
  m.EnableRdmaWrite = rdma_write ? VIP_TRUE : VIP_FALSE;
  m.EnableRdmaRead = rdma_read ? VIP_TRUE : VIP_FALSE;
  return m;
}

// Every test starts with node 0's NIC open, its attributes read and one
// protection tag; TearDown closes every NIC the test opened (which releases
// what is left on them), and only then is the test's memory unmapped.
class Vipl : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(open_nic("nic0", &nic_), VIP_SUCCESS);
    opened_.push_back(nic_);
    ASSERT_EQ(VipQueryNic(nic_, &attrs_), VIP_SUCCESS);
    ASSERT_EQ(VipCreatePtag(nic_, &ptag_), VIP_SUCCESS);
  }
  void TearDown() override {
    for (VIP_NIC_HANDLE n : opened_) (void)VipCloseNic(n);  // those already closed: VIP_INVALID_PARAMETER
  }
  ~Vipl() override {
    for (auto [p, len] : maps_) ::munmap(p, len);
    for (void* p : mallocs_) std::free(p);
  }

  VIP_NIC_HANDLE open(const char* name) {
    VIP_NIC_HANDLE n = nullptr;
    EXPECT_EQ(open_nic(name, &n), VIP_SUCCESS) << name;
    if (n) opened_.push_back(n);
    return n;
  }
  // `pages` pages of anonymous memory that no other object shares.
  uint8_t* pages(size_t pages) {
    size_t len = pages * kPage;
    void* p = ::mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    EXPECT_NE(p, MAP_FAILED);
    if (p == MAP_FAILED) return nullptr;
    maps_.push_back({p, len});
    return static_cast<uint8_t*>(p);
  }
  // Memory as most programs get it.
  uint8_t* heap(size_t bytes) {
    void* p = std::malloc(bytes);
    mallocs_.push_back(p);
    return static_cast<uint8_t*>(p);
  }
  VIP_MEM_HANDLE reg(void* va, size_t len, VIP_PROTECTION_HANDLE ptag = nullptr, bool w = false, bool r = false) {
    VIP_MEM_ATTRIBUTES m = mem_attributes(ptag ? ptag : ptag_, w, r);
    VIP_MEM_HANDLE h = 0;
    EXPECT_EQ(VipRegisterMem(nic_, va, len, &m, &h), VIP_SUCCESS);
    return h;
  }
  VIP_CQ_HANDLE cq(VIP_ULONG entries = 16) {
    VIP_CQ_HANDLE c = nullptr;
    EXPECT_EQ(VipCreateCQ(nic_, entries, &c), VIP_SUCCESS);
    return c;
  }
  VIP_VI_HANDLE vi(VIP_CQ_HANDLE send_cq = nullptr, VIP_CQ_HANDLE recv_cq = nullptr) {
    VIP_VI_ATTRIBUTES a = vi_attributes(ptag_);
    VIP_VI_HANDLE v = nullptr;
    EXPECT_EQ(VipCreateVi(nic_, &a, send_cq, recv_cq, &v), VIP_SUCCESS);
    return v;
  }

  VIP_NIC_HANDLE nic_ = nullptr;
  VIP_NIC_ATTRIBUTES attrs_{};
  VIP_PROTECTION_HANDLE ptag_ = nullptr;
  std::vector<VIP_NIC_HANDLE> opened_;
  std::vector<std::pair<void*, size_t>> maps_;
  std::vector<void*> mallocs_;
  int not_a_handle_ = 0;  // its address is a pointer that no VIPL call returned
  void* bogus() { return &not_a_handle_; }
};

// =========================================================================
// VipOpenNic, VipCloseNic, VipQueryNic

using Nic = Vipl;

TEST_F(Nic, EveryNodeOfTheClusterOpensByItsDeviceName) {
  VIP_NIC_HANDLE nic1 = open("nic1");
  ASSERT_NE(nic1, nullptr);
  EXPECT_NE(nic1, nic_);
  VIP_NIC_ATTRIBUTES a{};
  ASSERT_EQ(VipQueryNic(nic1, &a), VIP_SUCCESS);
  EXPECT_STREQ(a.Name, "nic1");
  ASSERT_EQ(a.NicAddressLen, 2);
  EXPECT_EQ(a.LocalNicAddress[0], 1);
  EXPECT_EQ(a.LocalNicAddress[1], 0);
  EXPECT_EQ(VipCloseNic(nic1), VIP_SUCCESS);
}

TEST_F(Nic, OneNicOpensTwiceAsIndependentInstances) {
  VIP_NIC_HANDLE again = open("nic0");
  ASSERT_NE(again, nullptr);
  EXPECT_NE(again, nic_);
  VIP_PROTECTION_HANDLE p = nullptr;
  ASSERT_EQ(VipCreatePtag(again, &p), VIP_SUCCESS);
  EXPECT_EQ(VipCloseNic(again), VIP_SUCCESS);
  // The first instance and its ptag are untouched.
  EXPECT_EQ(VipQueryNic(nic_, &attrs_), VIP_SUCCESS);
  VIP_MEM_ATTRIBUTES m = mem_attributes(ptag_);
  VIP_MEM_HANDLE h;
  uint8_t* buf = pages(1);
  EXPECT_EQ(VipRegisterMem(nic_, buf, kPage, &m, &h), VIP_SUCCESS);
}

TEST_F(Nic, BadDeviceNamesAreInvalidParameters) {
  const char* bad[] = {"",      "nic",   "nicX", "eth0", "NIC0", "nic-1", "nic+1", "nic01",
                       "nic0 ", " nic0", "nic1x", "nic64", "nic65535", "nic4294967296",
                       "nic99999999999999999999", "node0"};
  for (const char* name : bad) {
    VIP_NIC_HANDLE n = bogus();
    EXPECT_EQ(VipOpenNic(name, &n), VIP_INVALID_PARAMETER) << '"' << name << '"';
  }
  VIP_NIC_HANDLE n;
  EXPECT_EQ(VipOpenNic(nullptr, &n), VIP_INVALID_PARAMETER);
}

TEST_F(Nic, OpenWithoutAPlaceForTheHandleIsAnInvalidParameter) {
  EXPECT_EQ(VipOpenNic("nic0", nullptr), VIP_INVALID_PARAMETER);
}

TEST_F(Nic, ANodeThatIsNotRunningIsAResourceError) {
  VIP_NIC_HANDLE n;
  EXPECT_EQ(VipOpenNic("nic5", &n), VIP_ERROR_RESOURCE);   // the cluster has nodes 0 and 1
  EXPECT_EQ(VipOpenNic("nic63", &n), VIP_ERROR_RESOURCE);  // the largest node id there is
}

TEST_F(Nic, AClusterThatIsNotUpIsAResourceError) {
  std::string mine = env_or("ULNIC_CLUSTER", "");
  ::setenv("ULNIC_CLUSTER", "no-such-cluster", 1);
  VIP_NIC_HANDLE n;
  VIP_RETURN rc = VipOpenNic("nic0", &n);
  ::setenv("ULNIC_CLUSTER", mine.c_str(), 1);
  EXPECT_EQ(rc, VIP_ERROR_RESOURCE);
}

TEST_F(Nic, MoreInstancesThanTheNodeHasSlotsIsAResourceError) {
  // Each open NIC instance is a slot of the board (8); the ninth fails.
  std::vector<VIP_NIC_HANDLE> open_ones;
  VIP_RETURN last = VIP_SUCCESS;
  for (uint32_t i = 0; i <= ulnic::abi::kMaxSlots && last == VIP_SUCCESS; ++i) {
    VIP_NIC_HANDLE n = nullptr;
    last = i == 0 ? open_nic("nic1", &n) : VipOpenNic("nic1", &n);
    if (last == VIP_SUCCESS) {
      open_ones.push_back(n);
      opened_.push_back(n);
    }
  }
  EXPECT_EQ(last, VIP_ERROR_RESOURCE);
  EXPECT_GE(open_ones.size(), 1u);
  EXPECT_LE(open_ones.size(), size_t(ulnic::abi::kMaxSlots));
  for (VIP_NIC_HANDLE n : open_ones) EXPECT_EQ(VipCloseNic(n), VIP_SUCCESS);
}

TEST_F(Nic, CloseTakesOnlyLiveNicHandles) {
  EXPECT_EQ(VipCloseNic(nullptr), VIP_INVALID_PARAMETER);
  EXPECT_EQ(VipCloseNic(bogus()), VIP_INVALID_PARAMETER);
  EXPECT_EQ(VipCloseNic(ptag_), VIP_INVALID_PARAMETER);  // a handle, but not a NIC's
  VIP_NIC_HANDLE n = open("nic0");
  ASSERT_EQ(VipCloseNic(n), VIP_SUCCESS);
  EXPECT_EQ(VipCloseNic(n), VIP_INVALID_PARAMETER);  // stale
  EXPECT_EQ(VipQueryNic(n, &attrs_), VIP_INVALID_PARAMETER);
}

TEST_F(Nic, CloseReleasesEverythingMadeOnTheNic) {
  VIP_CQ_HANDLE c = cq();
  VIP_VI_HANDLE v = vi(c, c);
  uint8_t* buf = heap(3 * kPage + 100);
  for (size_t i = 0; i < 3 * kPage + 100; ++i) buf[i] = uint8_t(i * 7);
  VIP_MEM_HANDLE h = reg(buf + 10, 3 * kPage);
  ASSERT_EQ(VipCloseNic(nic_), VIP_SUCCESS);

  VIP_VI_STATE state;
  VIP_VI_ATTRIBUTES va;
  VIP_BOOLEAN se, re;
  EXPECT_EQ(VipQueryVi(v, &state, &va, &se, &re), VIP_INVALID_PARAMETER);
  EXPECT_EQ(VipDestroyVi(v), VIP_INVALID_PARAMETER);
  EXPECT_EQ(VipDestroyCQ(c), VIP_INVALID_PARAMETER);
  EXPECT_EQ(VipDestroyPtag(nic_, ptag_), VIP_INVALID_PARAMETER);
  EXPECT_EQ(VipDeregisterMem(nic_, buf + 10, h), VIP_INVALID_PARAMETER);
  // The registered memory is the program's again, with its contents.
  for (size_t i = 0; i < 3 * kPage + 100; ++i) ASSERT_EQ(buf[i], uint8_t(i * 7)) << i;
  std::memset(buf, 0x5a, 3 * kPage + 100);
  EXPECT_EQ(buf[3 * kPage + 99], 0x5a);
}

TEST_F(Nic, QueryReportsThisSystem) {
  EXPECT_STREQ(attrs_.Name, "nic0");
  ASSERT_EQ(attrs_.NicAddressLen, 2);
  ASSERT_NE(attrs_.LocalNicAddress, nullptr);
  EXPECT_EQ(attrs_.LocalNicAddress[0], 0);
  EXPECT_EQ(attrs_.LocalNicAddress[1], 0);
  EXPECT_EQ(attrs_.NativeMTU, ulnic::abi::kMtu);
  EXPECT_EQ(attrs_.MaxRegisterRegions, ulnic::abi::kMaxRegistrations);
  // The slot heap: the board was started with 16 MiB slots; the rings and
  // header take less than one MiB of that.
  EXPECT_LE(attrs_.MaxRegisterBytes, kSlotMiB << 20);
  EXPECT_GT(attrs_.MaxRegisterBytes, (kSlotMiB - 1) << 20);
  EXPECT_GT(attrs_.MaxRegisterBlockBytes, 0u);
  EXPECT_LE(attrs_.MaxRegisterBlockBytes, attrs_.MaxRegisterBytes);
  EXPECT_GE(attrs_.MaxTransferSize, attrs_.NativeMTU);
  // The levels: known bits only; reliable delivery at least (the fabric is
  // reliable); RDMA read only where the spec allows it (not unreliable).
  EXPECT_EQ(attrs_.ReliabilityLevelSupport & ~(VIP_SERVICE_UNRELIABLE | VIP_SERVICE_RELIABLE_DELIVERY |
                                               VIP_SERVICE_RELIABLE_RECEPTION),
            0);
  EXPECT_TRUE(attrs_.ReliabilityLevelSupport & VIP_SERVICE_RELIABLE_DELIVERY);
  EXPECT_EQ(attrs_.RDMAReadSupport & ~attrs_.ReliabilityLevelSupport, 0);
  EXPECT_EQ(attrs_.RDMAReadSupport & VIP_SERVICE_UNRELIABLE, 0);
  EXPECT_GE(attrs_.MaxVI, 1u);
  EXPECT_GE(attrs_.MaxCQ, 1u);
  EXPECT_GE(attrs_.MaxCQEntries, 1u);
  EXPECT_GE(attrs_.MaxSegmentsPerDesc, 2u);  // RDMA needs an address and a data segment
  EXPECT_GE(attrs_.MaxDescriptorsPerQueue, 1u);
  EXPECT_GE(attrs_.MaxPtags, 1u);
  EXPECT_GE(attrs_.MaxDiscriminatorLen, 1u);
  EXPECT_EQ(attrs_.ThreadSafe, VIP_FALSE);
  // The same NIC reports the same values every time.
  VIP_NIC_ATTRIBUTES again{};
  ASSERT_EQ(VipQueryNic(nic_, &again), VIP_SUCCESS);
  EXPECT_EQ(std::memcmp(&again, &attrs_, sizeof again), 0);
}

TEST_F(Nic, QueryTakesALiveNicAndAPlaceForTheAnswer) {
  EXPECT_EQ(VipQueryNic(nic_, nullptr), VIP_INVALID_PARAMETER);
  EXPECT_EQ(VipQueryNic(nullptr, &attrs_), VIP_INVALID_PARAMETER);
  EXPECT_EQ(VipQueryNic(bogus(), &attrs_), VIP_INVALID_PARAMETER);
  EXPECT_EQ(VipQueryNic(ptag_, &attrs_), VIP_INVALID_PARAMETER);
}

// =========================================================================
// VipCreatePtag, VipDestroyPtag

using Ptag = Vipl;

TEST_F(Ptag, TagsAreDistinctAndDestroyable) {
  VIP_PROTECTION_HANDLE a = nullptr, b = nullptr;
  ASSERT_EQ(VipCreatePtag(nic_, &a), VIP_SUCCESS);
  ASSERT_EQ(VipCreatePtag(nic_, &b), VIP_SUCCESS);
  EXPECT_NE(a, b);
  EXPECT_NE(a, ptag_);
  EXPECT_EQ(VipDestroyPtag(nic_, a), VIP_SUCCESS);
  EXPECT_EQ(VipDestroyPtag(nic_, b), VIP_SUCCESS);
}

TEST_F(Ptag, CreateTakesALiveNicAndAPlaceForTheTag) {
  VIP_PROTECTION_HANDLE p;
  EXPECT_EQ(VipCreatePtag(nic_, nullptr), VIP_INVALID_PARAMETER);
  EXPECT_EQ(VipCreatePtag(nullptr, &p), VIP_INVALID_PARAMETER);
  EXPECT_EQ(VipCreatePtag(bogus(), &p), VIP_INVALID_PARAMETER);
  EXPECT_EQ(VipCreatePtag(ptag_, &p), VIP_INVALID_PARAMETER);
}

TEST_F(Ptag, DestroyTakesALiveTagOfThatNic) {
  EXPECT_EQ(VipDestroyPtag(nic_, nullptr), VIP_INVALID_PARAMETER);
  EXPECT_EQ(VipDestroyPtag(nic_, bogus()), VIP_INVALID_PARAMETER);
  EXPECT_EQ(VipDestroyPtag(nullptr, ptag_), VIP_INVALID_PARAMETER);
  EXPECT_EQ(VipDestroyPtag(bogus(), ptag_), VIP_INVALID_PARAMETER);
  VIP_CQ_HANDLE c = cq();
  EXPECT_EQ(VipDestroyPtag(nic_, c), VIP_INVALID_PARAMETER);  // not a ptag
  VIP_NIC_HANDLE other = open("nic1");
  VIP_PROTECTION_HANDLE theirs = nullptr;
  ASSERT_EQ(VipCreatePtag(other, &theirs), VIP_SUCCESS);
  EXPECT_EQ(VipDestroyPtag(nic_, theirs), VIP_INVALID_PARAMETER);  // another NIC's
  EXPECT_EQ(VipDestroyPtag(other, ptag_), VIP_INVALID_PARAMETER);
  EXPECT_EQ(VipDestroyPtag(other, theirs), VIP_SUCCESS);
  ASSERT_EQ(VipDestroyPtag(nic_, ptag_), VIP_SUCCESS);
  EXPECT_EQ(VipDestroyPtag(nic_, ptag_), VIP_INVALID_PARAMETER);  // stale
}

TEST_F(Ptag, ATagInUseByARegistrationCannotBeDestroyed) {
  uint8_t* buf = pages(1);
  VIP_MEM_HANDLE h = reg(buf, kPage);
  EXPECT_EQ(VipDestroyPtag(nic_, ptag_), VIP_INVALID_STATE);
  // Nothing changed: the registration still stands under its tag.
  VIP_MEM_ATTRIBUTES m{};
  ASSERT_EQ(VipQueryMem(nic_, buf, h, &m), VIP_SUCCESS);
  EXPECT_EQ(m.Ptag, ptag_);
  ASSERT_EQ(VipDeregisterMem(nic_, buf, h), VIP_SUCCESS);
  EXPECT_EQ(VipDestroyPtag(nic_, ptag_), VIP_SUCCESS);
}

TEST_F(Ptag, ATagInUseByAViCannotBeDestroyed) {
  VIP_VI_HANDLE v = vi();
  EXPECT_EQ(VipDestroyPtag(nic_, ptag_), VIP_INVALID_STATE);
  ASSERT_EQ(VipDestroyVi(v), VIP_SUCCESS);
  EXPECT_EQ(VipDestroyPtag(nic_, ptag_), VIP_SUCCESS);
}

TEST_F(Ptag, RetaggingReleasesTheOldTag) {
  VIP_PROTECTION_HANDLE other = nullptr;
  ASSERT_EQ(VipCreatePtag(nic_, &other), VIP_SUCCESS);
  VIP_VI_HANDLE v = vi();
  uint8_t* buf = pages(1);
  VIP_MEM_HANDLE h = reg(buf, kPage);
  VIP_VI_ATTRIBUTES a = vi_attributes(other);
  ASSERT_EQ(VipSetViAttributes(v, &a), VIP_SUCCESS);
  VIP_MEM_ATTRIBUTES m = mem_attributes(other);
  ASSERT_EQ(VipSetMemAttributes(nic_, buf, h, &m), VIP_SUCCESS);
  EXPECT_EQ(VipDestroyPtag(nic_, other), VIP_INVALID_STATE);
  EXPECT_EQ(VipDestroyPtag(nic_, ptag_), VIP_SUCCESS);
}

TEST_F(Ptag, MaxPtagsAreAvailableAndNoMore) {
  std::vector<VIP_PROTECTION_HANDLE> tags{ptag_};
  while (tags.size() < attrs_.MaxPtags) {
    VIP_PROTECTION_HANDLE p = nullptr;
    ASSERT_EQ(VipCreatePtag(nic_, &p), VIP_SUCCESS) << "tag " << tags.size();
    tags.push_back(p);
  }
  VIP_PROTECTION_HANDLE p;
  EXPECT_EQ(VipCreatePtag(nic_, &p), VIP_ERROR_RESOURCE);
  ASSERT_EQ(VipDestroyPtag(nic_, tags.back()), VIP_SUCCESS);
  EXPECT_EQ(VipCreatePtag(nic_, &p), VIP_SUCCESS);
}

// =========================================================================
// VipRegisterMem, VipDeregisterMem, VipQueryMem, VipSetMemAttributes

using Mem = Vipl;

TEST_F(Mem, ProgramMemoryRegistersAndKeepsItsContents) {
  const size_t n = 10000;
  uint8_t* buf = heap(n);
  for (size_t i = 0; i < n; ++i) buf[i] = uint8_t(i ^ 0x33);
  VIP_MEM_HANDLE h = reg(buf, n);
  EXPECT_NE(h, 0u);
  for (size_t i = 0; i < n; ++i) ASSERT_EQ(buf[i], uint8_t(i ^ 0x33)) << i;
  for (size_t i = 0; i < n; ++i) buf[i] = uint8_t(i);  // still the program's memory
  ASSERT_EQ(VipDeregisterMem(nic_, buf, h), VIP_SUCCESS);
  for (size_t i = 0; i < n; ++i) ASSERT_EQ(buf[i], uint8_t(i)) << i;
}

TEST_F(Mem, RegistrationsHaveDistinctHandlesAndTheirAttributes) {
  uint8_t* buf = pages(3);
  VIP_MEM_HANDLE a = reg(buf, kPage);
  VIP_MEM_HANDLE b = reg(buf + kPage, kPage, nullptr, true, false);
  VIP_MEM_HANDLE c = reg(buf + 2 * kPage + 5, 100, nullptr, true, true);
  EXPECT_NE(a, b);
  EXPECT_NE(b, c);
  EXPECT_NE(a, c);
  struct {
    VIP_MEM_HANDLE h;
    void* va;
    VIP_BOOLEAN w, r;
  } want[] = {{a, buf, VIP_FALSE, VIP_FALSE}, {b, buf + kPage, VIP_TRUE, VIP_FALSE}, {c, buf + 2 * kPage + 5, VIP_TRUE, VIP_TRUE}};
  for (auto& x : want) {
    VIP_MEM_ATTRIBUTES m{};
    ASSERT_EQ(VipQueryMem(nic_, x.va, x.h, &m), VIP_SUCCESS);
    EXPECT_EQ(m.Ptag, ptag_);
    EXPECT_EQ(m.EnableRdmaWrite, x.w);
    EXPECT_EQ(m.EnableRdmaRead, x.r);
  }
  for (auto& x : want) EXPECT_EQ(VipDeregisterMem(nic_, x.va, x.h), VIP_SUCCESS);
}

TEST_F(Mem, TheSameMemoryRegistersMoreThanOnce) {
  uint8_t* buf = heap(3 * kPage);
  std::memset(buf, 0x11, 3 * kPage);
  VIP_PROTECTION_HANDLE other = nullptr;
  ASSERT_EQ(VipCreatePtag(nic_, &other), VIP_SUCCESS);
  VIP_MEM_HANDLE whole = reg(buf, 3 * kPage);
  VIP_MEM_HANDLE twice = reg(buf, 3 * kPage, other, true);
  VIP_MEM_HANDLE part = reg(buf + 1000, 2000);
  EXPECT_NE(whole, twice);
  EXPECT_NE(whole, part);
  VIP_MEM_ATTRIBUTES m{};
  ASSERT_EQ(VipQueryMem(nic_, buf, twice, &m), VIP_SUCCESS);
  EXPECT_EQ(m.Ptag, other);
  EXPECT_EQ(m.EnableRdmaWrite, VIP_TRUE);
  // Deregistering the first leaves the others standing, and the memory too.
  ASSERT_EQ(VipDeregisterMem(nic_, buf, whole), VIP_SUCCESS);
  ASSERT_EQ(VipQueryMem(nic_, buf + 1000, part, &m), VIP_SUCCESS);
  buf[1500] = 0x22;
  ASSERT_EQ(VipDeregisterMem(nic_, buf, twice), VIP_SUCCESS);
  ASSERT_EQ(VipDeregisterMem(nic_, buf + 1000, part), VIP_SUCCESS);
  EXPECT_EQ(buf[0], 0x11);
  EXPECT_EQ(buf[1500], 0x22);
  EXPECT_EQ(buf[3 * kPage - 1], 0x11);
}

TEST_F(Mem, RegisterTakesALiveNicAndItsArguments) {
  uint8_t* buf = pages(1);
  VIP_MEM_ATTRIBUTES m = mem_attributes(ptag_);
  VIP_MEM_HANDLE h;
  EXPECT_EQ(VipRegisterMem(nullptr, buf, kPage, &m, &h), VIP_INVALID_PARAMETER);
  EXPECT_EQ(VipRegisterMem(bogus(), buf, kPage, &m, &h), VIP_INVALID_PARAMETER);
  EXPECT_EQ(VipRegisterMem(ptag_, buf, kPage, &m, &h), VIP_INVALID_PARAMETER);
  EXPECT_EQ(VipRegisterMem(nic_, nullptr, kPage, &m, &h), VIP_INVALID_PARAMETER);
  EXPECT_EQ(VipRegisterMem(nic_, buf, 0, &m, &h), VIP_INVALID_PARAMETER);
  EXPECT_EQ(VipRegisterMem(nic_, buf, kPage, nullptr, &h), VIP_INVALID_PARAMETER);
  EXPECT_EQ(VipRegisterMem(nic_, buf, kPage, &m, nullptr), VIP_INVALID_PARAMETER);
}

TEST_F(Mem, RegisterTakesALiveTagOfThatNic) {
  uint8_t* buf = pages(1);
  VIP_MEM_HANDLE h;
  VIP_MEM_ATTRIBUTES m = mem_attributes(nullptr);
  EXPECT_EQ(VipRegisterMem(nic_, buf, kPage, &m, &h), VIP_INVALID_PTAG);
  m.Ptag = bogus();
  EXPECT_EQ(VipRegisterMem(nic_, buf, kPage, &m, &h), VIP_INVALID_PTAG);
  VIP_NIC_HANDLE other = open("nic1");
  VIP_PROTECTION_HANDLE theirs = nullptr;
  ASSERT_EQ(VipCreatePtag(other, &theirs), VIP_SUCCESS);
  m.Ptag = theirs;
  EXPECT_EQ(VipRegisterMem(nic_, buf, kPage, &m, &h), VIP_INVALID_PTAG);
  VIP_PROTECTION_HANDLE gone = nullptr;
  ASSERT_EQ(VipCreatePtag(nic_, &gone), VIP_SUCCESS);
  ASSERT_EQ(VipDestroyPtag(nic_, gone), VIP_SUCCESS);
  m.Ptag = gone;
  EXPECT_EQ(VipRegisterMem(nic_, buf, kPage, &m, &h), VIP_INVALID_PTAG);
}

TEST_F(Mem, MemoryTheProgramDoesNotHaveIsAnInvalidParameter) {
  uint8_t* buf = pages(4);
  ASSERT_EQ(::munmap(buf + kPage, kPage), 0);  // a hole in the middle
  VIP_MEM_ATTRIBUTES m = mem_attributes(ptag_);
  VIP_MEM_HANDLE h;
  EXPECT_EQ(VipRegisterMem(nic_, buf + kPage, 100, &m, &h), VIP_INVALID_PARAMETER);
  EXPECT_EQ(VipRegisterMem(nic_, buf, 3 * kPage, &m, &h), VIP_INVALID_PARAMETER);
  // A range that wraps around the address space.
  EXPECT_EQ(VipRegisterMem(nic_, reinterpret_cast<void*>(~uintptr_t(0) - 100), 1000, &m, &h),
            VIP_INVALID_PARAMETER);
  // The pages on either side of the hole still register.
  EXPECT_EQ(VipRegisterMem(nic_, buf, kPage, &m, &h), VIP_SUCCESS);
  EXPECT_EQ(VipRegisterMem(nic_, buf + 2 * kPage, 2 * kPage, &m, &h), VIP_SUCCESS);
}

TEST_F(Mem, ARegionOfMaxRegisterBlockBytesRegistersAndOneByteMoreDoesNot) {
  VIP_ULONG block = attrs_.MaxRegisterBlockBytes;
  size_t n = (block + 2 * kPage - 1) / kPage;
  uint8_t* buf = pages(n);
  ASSERT_NE(buf, nullptr);
  VIP_MEM_ATTRIBUTES m = mem_attributes(ptag_);
  VIP_MEM_HANDLE h;
  EXPECT_EQ(VipRegisterMem(nic_, buf, block + 1, &m, &h), VIP_ERROR_RESOURCE);
  ASSERT_EQ(VipRegisterMem(nic_, buf + 123, block, &m, &h), VIP_SUCCESS);  // at any alignment
  EXPECT_EQ(VipDeregisterMem(nic_, buf + 123, h), VIP_SUCCESS);
}

TEST_F(Mem, MoreThanMaxRegisterBytesIsAResourceError) {
  // Two regions that each fit, but not together.
  VIP_ULONG half = attrs_.MaxRegisterBytes / 2 + kPage;
  uint8_t* a = pages(half / kPage + 1);
  uint8_t* b = pages(half / kPage + 1);
  VIP_MEM_ATTRIBUTES m = mem_attributes(ptag_);
  VIP_MEM_HANDLE ha, hb;
  ASSERT_EQ(VipRegisterMem(nic_, a, half, &m, &ha), VIP_SUCCESS);
  EXPECT_EQ(VipRegisterMem(nic_, b, half, &m, &hb), VIP_ERROR_RESOURCE);
  ASSERT_EQ(VipDeregisterMem(nic_, a, ha), VIP_SUCCESS);
  EXPECT_EQ(VipRegisterMem(nic_, b, half, &m, &hb), VIP_SUCCESS);  // the room came back
}

TEST_F(Mem, MaxRegisterRegionsAreAvailableAndNoMore) {
  size_t n = attrs_.MaxRegisterRegions;
  uint8_t* buf = pages(n + 1);
  std::vector<VIP_MEM_HANDLE> hs;
  VIP_MEM_ATTRIBUTES m = mem_attributes(ptag_);
  for (size_t i = 0; i < n; ++i) {
    VIP_MEM_HANDLE h;
    ASSERT_EQ(VipRegisterMem(nic_, buf + i * kPage, 64, &m, &h), VIP_SUCCESS) << "region " << i;
    hs.push_back(h);
  }
  VIP_MEM_HANDLE h;
  EXPECT_EQ(VipRegisterMem(nic_, buf + n * kPage, 64, &m, &h), VIP_ERROR_RESOURCE);
  ASSERT_EQ(VipDeregisterMem(nic_, buf, hs[0]), VIP_SUCCESS);
  EXPECT_EQ(VipRegisterMem(nic_, buf + n * kPage, 64, &m, &h), VIP_SUCCESS);
}

TEST_F(Mem, DeregisterTakesTheRegisteredAddressAndHandle) {
  uint8_t* buf = pages(2);
  VIP_MEM_HANDLE h = reg(buf + 8, kPage);
  EXPECT_EQ(VipDeregisterMem(nic_, buf, h), VIP_INVALID_PARAMETER);      // not where it starts
  EXPECT_EQ(VipDeregisterMem(nic_, buf + 9, h), VIP_INVALID_PARAMETER);
  EXPECT_EQ(VipDeregisterMem(nic_, buf + 8, h + 1), VIP_INVALID_PARAMETER);  // no such handle
  EXPECT_EQ(VipDeregisterMem(nic_, buf + 8, 0), VIP_INVALID_PARAMETER);
  EXPECT_EQ(VipDeregisterMem(nullptr, buf + 8, h), VIP_INVALID_PARAMETER);
  EXPECT_EQ(VipDeregisterMem(bogus(), buf + 8, h), VIP_INVALID_PARAMETER);
  VIP_NIC_HANDLE other = open("nic1");
  EXPECT_EQ(VipDeregisterMem(other, buf + 8, h), VIP_INVALID_PARAMETER);  // another NIC's
  ASSERT_EQ(VipDeregisterMem(nic_, buf + 8, h), VIP_SUCCESS);
  EXPECT_EQ(VipDeregisterMem(nic_, buf + 8, h), VIP_INVALID_PARAMETER);  // stale
}

TEST_F(Mem, QueryTakesAnAddressInsideTheRegion) {
  uint8_t* buf = pages(3);
  VIP_MEM_HANDLE h = reg(buf + 100, kPage);
  VIP_MEM_ATTRIBUTES m{};
  EXPECT_EQ(VipQueryMem(nic_, buf + 100, h, &m), VIP_SUCCESS);
  EXPECT_EQ(VipQueryMem(nic_, buf + 100 + kPage - 1, h, &m), VIP_SUCCESS);
  EXPECT_EQ(VipQueryMem(nic_, buf + 99, h, &m), VIP_INVALID_PARAMETER);
  EXPECT_EQ(VipQueryMem(nic_, buf + 100 + kPage, h, &m), VIP_INVALID_PARAMETER);
}

TEST_F(Mem, QueryTakesALiveNicHandleAndAPlaceForTheAnswer) {
  uint8_t* buf = pages(1);
  VIP_MEM_HANDLE h = reg(buf, kPage);
  VIP_MEM_ATTRIBUTES m{};
  EXPECT_EQ(VipQueryMem(nic_, buf, h, nullptr), VIP_INVALID_PARAMETER);
  EXPECT_EQ(VipQueryMem(nullptr, buf, h, &m), VIP_INVALID_PARAMETER);
  EXPECT_EQ(VipQueryMem(bogus(), buf, h, &m), VIP_INVALID_PARAMETER);
  EXPECT_EQ(VipQueryMem(nic_, buf, h ^ 0x100, &m), VIP_INVALID_PARAMETER);
  ASSERT_EQ(VipDeregisterMem(nic_, buf, h), VIP_SUCCESS);
  EXPECT_EQ(VipQueryMem(nic_, buf, h, &m), VIP_INVALID_PARAMETER);
}

TEST_F(Mem, SetAttributesMovesTheRegionToAnotherTag) {
  VIP_PROTECTION_HANDLE other = nullptr;
  ASSERT_EQ(VipCreatePtag(nic_, &other), VIP_SUCCESS);
  uint8_t* buf = pages(1);
  VIP_MEM_HANDLE h = reg(buf, kPage, nullptr, true, false);
  VIP_MEM_ATTRIBUTES m = mem_attributes(other, true, false);
  ASSERT_EQ(VipSetMemAttributes(nic_, buf + 10, h, &m), VIP_SUCCESS);
  VIP_MEM_ATTRIBUTES now{};
  ASSERT_EQ(VipQueryMem(nic_, buf, h, &now), VIP_SUCCESS);
  EXPECT_EQ(now.Ptag, other);
  EXPECT_EQ(now.EnableRdmaWrite, VIP_TRUE);
  EXPECT_EQ(now.EnableRdmaRead, VIP_FALSE);
  EXPECT_EQ(VipDestroyPtag(nic_, ptag_), VIP_SUCCESS);  // no longer in use
  EXPECT_EQ(VipDestroyPtag(nic_, other), VIP_INVALID_STATE);
}

TEST_F(Mem, SetAttributesValidatesLikeRegister) {
  uint8_t* buf = pages(1);
  VIP_MEM_HANDLE h = reg(buf, kPage);
  VIP_MEM_ATTRIBUTES m = mem_attributes(bogus());
  EXPECT_EQ(VipSetMemAttributes(nic_, buf, h, &m), VIP_INVALID_PTAG);
  m.Ptag = nullptr;
  EXPECT_EQ(VipSetMemAttributes(nic_, buf, h, &m), VIP_INVALID_PTAG);
  m.Ptag = ptag_;
  EXPECT_EQ(VipSetMemAttributes(nic_, buf, h, nullptr), VIP_INVALID_PARAMETER);
  EXPECT_EQ(VipSetMemAttributes(nullptr, buf, h, &m), VIP_INVALID_PARAMETER);
  EXPECT_EQ(VipSetMemAttributes(nic_, buf, h + 1, &m), VIP_INVALID_PARAMETER);
  EXPECT_EQ(VipSetMemAttributes(nic_, buf + kPage, h, &m), VIP_INVALID_PARAMETER);
  // A failed call changed nothing.
  VIP_MEM_ATTRIBUTES now{};
  ASSERT_EQ(VipQueryMem(nic_, buf, h, &now), VIP_SUCCESS);
  EXPECT_EQ(now.Ptag, ptag_);
  EXPECT_EQ(now.EnableRdmaWrite, VIP_FALSE);
}

// =========================================================================
// VipCreateCQ, VipResizeCQ, VipDestroyCQ, VipCQDone, VipCQWait

using Cq = Vipl;

TEST_F(Cq, CreateTakesOneToMaxCQEntries) {
  VIP_CQ_HANDLE a = nullptr, b = nullptr, c;
  ASSERT_EQ(VipCreateCQ(nic_, 1, &a), VIP_SUCCESS);
  ASSERT_EQ(VipCreateCQ(nic_, attrs_.MaxCQEntries, &b), VIP_SUCCESS);
  EXPECT_NE(a, b);
  EXPECT_EQ(VipCreateCQ(nic_, 0, &c), VIP_INVALID_PARAMETER);
  EXPECT_EQ(VipCreateCQ(nic_, attrs_.MaxCQEntries + 1, &c), VIP_INVALID_PARAMETER);
  EXPECT_EQ(VipCreateCQ(nic_, ~VIP_ULONG(0), &c), VIP_INVALID_PARAMETER);
  EXPECT_EQ(VipDestroyCQ(a), VIP_SUCCESS);
  EXPECT_EQ(VipDestroyCQ(b), VIP_SUCCESS);
}

TEST_F(Cq, CreateTakesALiveNicAndAPlaceForTheHandle) {
  VIP_CQ_HANDLE c;
  EXPECT_EQ(VipCreateCQ(nic_, 8, nullptr), VIP_INVALID_PARAMETER);
  EXPECT_EQ(VipCreateCQ(nullptr, 8, &c), VIP_INVALID_PARAMETER);
  EXPECT_EQ(VipCreateCQ(bogus(), 8, &c), VIP_INVALID_PARAMETER);
  EXPECT_EQ(VipCreateCQ(ptag_, 8, &c), VIP_INVALID_PARAMETER);
}

TEST_F(Cq, MaxCQAreAvailableAndNoMore) {
  std::vector<VIP_CQ_HANDLE> cqs;
  for (VIP_ULONG i = 0; i < attrs_.MaxCQ; ++i) {
    VIP_CQ_HANDLE c = nullptr;
    ASSERT_EQ(VipCreateCQ(nic_, 4, &c), VIP_SUCCESS) << "CQ " << i;
    cqs.push_back(c);
  }
  VIP_CQ_HANDLE c;
  EXPECT_EQ(VipCreateCQ(nic_, 4, &c), VIP_ERROR_RESOURCE);
  ASSERT_EQ(VipDestroyCQ(cqs[0]), VIP_SUCCESS);
  EXPECT_EQ(VipCreateCQ(nic_, 4, &c), VIP_SUCCESS);
}

TEST_F(Cq, ResizeTakesOneToMaxCQEntries) {
  VIP_CQ_HANDLE c = cq(8);
  EXPECT_EQ(VipResizeCQ(c, 1), VIP_SUCCESS);
  EXPECT_EQ(VipResizeCQ(c, attrs_.MaxCQEntries), VIP_SUCCESS);
  EXPECT_EQ(VipResizeCQ(c, 0), VIP_INVALID_PARAMETER);
  EXPECT_EQ(VipResizeCQ(c, attrs_.MaxCQEntries + 1), VIP_INVALID_PARAMETER);
  EXPECT_EQ(VipResizeCQ(nullptr, 8), VIP_INVALID_PARAMETER);
  EXPECT_EQ(VipResizeCQ(bogus(), 8), VIP_INVALID_PARAMETER);
  EXPECT_EQ(VipResizeCQ(nic_, 8), VIP_INVALID_PARAMETER);  // a NIC, not a CQ
  // A CQ in use by a VI resizes too.
  VIP_VI_HANDLE v = vi(c, nullptr);
  EXPECT_EQ(VipResizeCQ(c, 32), VIP_SUCCESS);
  ASSERT_EQ(VipDestroyVi(v), VIP_SUCCESS);
  ASSERT_EQ(VipDestroyCQ(c), VIP_SUCCESS);
  EXPECT_EQ(VipResizeCQ(c, 8), VIP_INVALID_PARAMETER);  // stale
}

TEST_F(Cq, DestroyTakesOnlyLiveCqHandles) {
  VIP_CQ_HANDLE c = cq();
  EXPECT_EQ(VipDestroyCQ(nullptr), VIP_INVALID_PARAMETER);
  EXPECT_EQ(VipDestroyCQ(bogus()), VIP_INVALID_PARAMETER);
  EXPECT_EQ(VipDestroyCQ(nic_), VIP_INVALID_PARAMETER);
  EXPECT_EQ(VipDestroyCQ(ptag_), VIP_INVALID_PARAMETER);
  ASSERT_EQ(VipDestroyCQ(c), VIP_SUCCESS);
  EXPECT_EQ(VipDestroyCQ(c), VIP_INVALID_PARAMETER);
}

TEST_F(Cq, ACqThatAViCompletesIntoCannotBeDestroyed) {
  VIP_CQ_HANDLE send_cq = cq(), recv_cq = cq();
  VIP_VI_HANDLE a = vi(send_cq, nullptr);
  VIP_VI_HANDLE b = vi(nullptr, recv_cq);
  EXPECT_EQ(VipDestroyCQ(send_cq), VIP_INVALID_STATE);
  EXPECT_EQ(VipDestroyCQ(recv_cq), VIP_INVALID_STATE);
  ASSERT_EQ(VipDestroyVi(a), VIP_SUCCESS);
  EXPECT_EQ(VipDestroyCQ(send_cq), VIP_SUCCESS);
  EXPECT_EQ(VipDestroyCQ(recv_cq), VIP_INVALID_STATE);
  ASSERT_EQ(VipDestroyVi(b), VIP_SUCCESS);
  EXPECT_EQ(VipDestroyCQ(recv_cq), VIP_SUCCESS);
}

TEST_F(Cq, ACqBothQueuesOfTwoVisUseIsFreedByTheLastVi) {
  VIP_CQ_HANDLE c = cq();
  VIP_VI_HANDLE a = vi(c, c), b = vi(c, c);
  ASSERT_EQ(VipDestroyVi(a), VIP_SUCCESS);
  EXPECT_EQ(VipDestroyCQ(c), VIP_INVALID_STATE);
  ASSERT_EQ(VipDestroyVi(b), VIP_SUCCESS);
  EXPECT_EQ(VipDestroyCQ(c), VIP_SUCCESS);
}

TEST_F(Cq, DoneOnAnEmptyCqIsNotDone) {
  VIP_CQ_HANDLE c = cq();
  vi(c, c);
  VIP_VI_HANDLE v = bogus();
  VIP_BOOLEAN recv = 7;
  EXPECT_EQ(VipCQDone(c, &v, &recv), VIP_NOT_DONE);
  EXPECT_EQ(VipCQDone(c, &v, &recv), VIP_NOT_DONE);
}

TEST_F(Cq, DoneTakesALiveCqAndPlacesForTheAnswer) {
  VIP_CQ_HANDLE c = cq();
  VIP_VI_HANDLE v;
  VIP_BOOLEAN recv;
  EXPECT_EQ(VipCQDone(c, nullptr, &recv), VIP_INVALID_PARAMETER);
  EXPECT_EQ(VipCQDone(c, &v, nullptr), VIP_INVALID_PARAMETER);
  EXPECT_EQ(VipCQDone(nullptr, &v, &recv), VIP_INVALID_PARAMETER);
  EXPECT_EQ(VipCQDone(bogus(), &v, &recv), VIP_INVALID_PARAMETER);
  EXPECT_EQ(VipCQDone(nic_, &v, &recv), VIP_INVALID_PARAMETER);
  ASSERT_EQ(VipDestroyCQ(c), VIP_SUCCESS);
  EXPECT_EQ(VipCQDone(c, &v, &recv), VIP_INVALID_PARAMETER);
}

TEST_F(Cq, WaitOnAnEmptyCqTimesOut) {
  VIP_CQ_HANDLE c = cq();
  vi(nullptr, c);
  VIP_VI_HANDLE v;
  VIP_BOOLEAN recv;
  EXPECT_EQ(VipCQWait(c, 50, &v, &recv), VIP_TIMEOUT);
  EXPECT_EQ(VipCQWait(c, 1, &v, &recv), VIP_TIMEOUT);
  EXPECT_EQ(VipCQWait(c, 0, &v, &recv), VIP_TIMEOUT);
  // Nothing was taken from it meanwhile.
  EXPECT_EQ(VipCQDone(c, &v, &recv), VIP_NOT_DONE);
}

TEST_F(Cq, WaitTakesALiveCqAndPlacesForTheAnswer) {
  VIP_CQ_HANDLE c = cq();
  VIP_VI_HANDLE v;
  VIP_BOOLEAN recv;
  EXPECT_EQ(VipCQWait(c, 10, nullptr, &recv), VIP_INVALID_PARAMETER);
  EXPECT_EQ(VipCQWait(c, 10, &v, nullptr), VIP_INVALID_PARAMETER);
  EXPECT_EQ(VipCQWait(nullptr, 10, &v, &recv), VIP_INVALID_PARAMETER);
  EXPECT_EQ(VipCQWait(bogus(), 10, &v, &recv), VIP_INVALID_PARAMETER);
  EXPECT_EQ(VipCQWait(nic_, VIP_INFINITE, &v, &recv), VIP_INVALID_PARAMETER);  // returns at once
  ASSERT_EQ(VipDestroyCQ(c), VIP_SUCCESS);
  EXPECT_EQ(VipCQWait(c, VIP_INFINITE, &v, &recv), VIP_INVALID_PARAMETER);
}

// =========================================================================
// VipCreateVi, VipDestroyVi, VipQueryVi, VipSetViAttributes

using Vi = Vipl;

TEST_F(Vi, ANewViIsIdleWithEmptyQueuesAndItsAttributes) {
  for (VIP_RELIABILITY_LEVEL level :
       {VIP_SERVICE_UNRELIABLE, VIP_SERVICE_RELIABLE_DELIVERY, VIP_SERVICE_RELIABLE_RECEPTION}) {
    if (!(attrs_.ReliabilityLevelSupport & level)) continue;
    VIP_VI_ATTRIBUTES a = vi_attributes(ptag_, level);
    a.MaxTransferSize = attrs_.MaxTransferSize;
    a.EnableRdmaWrite = VIP_TRUE;
    a.EnableRdmaRead = (attrs_.RDMAReadSupport & level) ? VIP_TRUE : VIP_FALSE;
    VIP_VI_HANDLE v = nullptr;
    ASSERT_EQ(VipCreateVi(nic_, &a, nullptr, nullptr, &v), VIP_SUCCESS) << "level " << level;
    VIP_VI_STATE state = VIP_STATE_ERROR;
    VIP_VI_ATTRIBUTES got;
    std::memset(&got, 0xff, sizeof got);
    VIP_BOOLEAN send_empty = VIP_FALSE, recv_empty = VIP_FALSE;
    ASSERT_EQ(VipQueryVi(v, &state, &got, &send_empty, &recv_empty), VIP_SUCCESS);
    EXPECT_EQ(state, VIP_STATE_IDLE);
    EXPECT_TRUE(send_empty);
    EXPECT_TRUE(recv_empty);
    EXPECT_EQ(got.ReliabilityLevel, level);
    EXPECT_EQ(got.MaxTransferSize, attrs_.MaxTransferSize);
    EXPECT_EQ(got.Ptag, ptag_);
    EXPECT_EQ(got.EnableRdmaWrite, VIP_TRUE);
    EXPECT_EQ(got.EnableRdmaRead, a.EnableRdmaRead);
    EXPECT_EQ(VipDestroyVi(v), VIP_SUCCESS);
  }
}

TEST_F(Vi, WorkQueuesCompleteOnTheViOrOnAnyCqOfTheNic) {
  VIP_CQ_HANDLE a = cq(), b = cq();
  VIP_VI_HANDLE vis[] = {vi(nullptr, nullptr), vi(a, nullptr), vi(nullptr, b), vi(a, b), vi(b, b)};
  for (VIP_VI_HANDLE v : vis) {
    ASSERT_NE(v, nullptr);
    EXPECT_EQ(VipDestroyVi(v), VIP_SUCCESS);
  }
}

TEST_F(Vi, CreateTakesALiveNicAndItsArguments) {
  VIP_VI_ATTRIBUTES a = vi_attributes(ptag_);
  VIP_VI_HANDLE v;
  EXPECT_EQ(VipCreateVi(nic_, nullptr, nullptr, nullptr, &v), VIP_INVALID_PARAMETER);
  EXPECT_EQ(VipCreateVi(nic_, &a, nullptr, nullptr, nullptr), VIP_INVALID_PARAMETER);
  EXPECT_EQ(VipCreateVi(nullptr, &a, nullptr, nullptr, &v), VIP_INVALID_PARAMETER);
  EXPECT_EQ(VipCreateVi(bogus(), &a, nullptr, nullptr, &v), VIP_INVALID_PARAMETER);
  EXPECT_EQ(VipCreateVi(ptag_, &a, nullptr, nullptr, &v), VIP_INVALID_PARAMETER);
}

TEST_F(Vi, CqHandlesMustBeLiveCqsOfTheSameNic) {
  VIP_VI_ATTRIBUTES a = vi_attributes(ptag_);
  VIP_VI_HANDLE v;
  EXPECT_EQ(VipCreateVi(nic_, &a, bogus(), nullptr, &v), VIP_INVALID_PARAMETER);
  EXPECT_EQ(VipCreateVi(nic_, &a, nullptr, bogus(), &v), VIP_INVALID_PARAMETER);
  EXPECT_EQ(VipCreateVi(nic_, &a, ptag_, nullptr, &v), VIP_INVALID_PARAMETER);  // not a CQ
  VIP_CQ_HANDLE gone = cq();
  ASSERT_EQ(VipDestroyCQ(gone), VIP_SUCCESS);
  EXPECT_EQ(VipCreateVi(nic_, &a, gone, nullptr, &v), VIP_INVALID_PARAMETER);
  VIP_NIC_HANDLE other = open("nic1");
  VIP_CQ_HANDLE theirs = nullptr;
  ASSERT_EQ(VipCreateCQ(other, 8, &theirs), VIP_SUCCESS);
  EXPECT_EQ(VipCreateVi(nic_, &a, nullptr, theirs, &v), VIP_INVALID_PARAMETER);
  EXPECT_EQ(VipDestroyCQ(theirs), VIP_SUCCESS);  // the failed calls did not count it as used
}

TEST_F(Vi, TheReliabilityLevelIsOneSupportedLevel) {
  VIP_VI_HANDLE v;
  for (VIP_RELIABILITY_LEVEL bad : {0x0, 0x3, 0x5, 0x6, 0x7, 0x8, 0x10, 0x8000, 0xffff}) {
    VIP_VI_ATTRIBUTES a = vi_attributes(ptag_, VIP_RELIABILITY_LEVEL(bad));
    EXPECT_EQ(VipCreateVi(nic_, &a, nullptr, nullptr, &v), VIP_INVALID_RELIABILITY_LEVEL) << "level " << bad;
  }
  for (VIP_RELIABILITY_LEVEL level :
       {VIP_SERVICE_UNRELIABLE, VIP_SERVICE_RELIABLE_DELIVERY, VIP_SERVICE_RELIABLE_RECEPTION}) {
    VIP_VI_ATTRIBUTES a = vi_attributes(ptag_, level);
    bool supported = attrs_.ReliabilityLevelSupport & level;
    EXPECT_EQ(VipCreateVi(nic_, &a, nullptr, nullptr, &v),
              supported ? VIP_SUCCESS : VIP_INVALID_RELIABILITY_LEVEL);
  }
}

TEST_F(Vi, MaxTransferSizeIsAtMostTheNics) {
  VIP_VI_HANDLE v;
  VIP_VI_ATTRIBUTES a = vi_attributes(ptag_);
  a.MaxTransferSize = attrs_.MaxTransferSize + 1;
  EXPECT_EQ(VipCreateVi(nic_, &a, nullptr, nullptr, &v), VIP_INVALID_MTU);
  a.MaxTransferSize = ~VIP_ULONG(0);
  EXPECT_EQ(VipCreateVi(nic_, &a, nullptr, nullptr, &v), VIP_INVALID_MTU);
  a.MaxTransferSize = attrs_.MaxTransferSize;
  EXPECT_EQ(VipCreateVi(nic_, &a, nullptr, nullptr, &v), VIP_SUCCESS);
}

TEST_F(Vi, ThePtagIsALiveTagOfTheNic) {
  VIP_VI_HANDLE v;
  VIP_VI_ATTRIBUTES a = vi_attributes(nullptr);
  EXPECT_EQ(VipCreateVi(nic_, &a, nullptr, nullptr, &v), VIP_INVALID_PTAG);
  a.Ptag = bogus();
  EXPECT_EQ(VipCreateVi(nic_, &a, nullptr, nullptr, &v), VIP_INVALID_PTAG);
  VIP_CQ_HANDLE c = cq();
  a.Ptag = c;  // a handle, but not a ptag
  EXPECT_EQ(VipCreateVi(nic_, &a, nullptr, nullptr, &v), VIP_INVALID_PTAG);
  VIP_NIC_HANDLE other = open("nic1");
  VIP_PROTECTION_HANDLE theirs = nullptr;
  ASSERT_EQ(VipCreatePtag(other, &theirs), VIP_SUCCESS);
  a.Ptag = theirs;
  EXPECT_EQ(VipCreateVi(nic_, &a, nullptr, nullptr, &v), VIP_INVALID_PTAG);
  EXPECT_EQ(VipDestroyPtag(other, theirs), VIP_SUCCESS);  // the failed call did not use it
}

TEST_F(Vi, RdmaReadOnlyWhereTheNicSupportsIt) {
  for (VIP_RELIABILITY_LEVEL level :
       {VIP_SERVICE_UNRELIABLE, VIP_SERVICE_RELIABLE_DELIVERY, VIP_SERVICE_RELIABLE_RECEPTION}) {
    if (!(attrs_.ReliabilityLevelSupport & level)) continue;
    VIP_VI_ATTRIBUTES a = vi_attributes(ptag_, level);
    a.EnableRdmaRead = VIP_TRUE;
    VIP_VI_HANDLE v;
    EXPECT_EQ(VipCreateVi(nic_, &a, nullptr, nullptr, &v),
              (attrs_.RDMAReadSupport & level) ? VIP_SUCCESS : VIP_INVALID_RDMAREAD)
        << "level " << level;
  }
}

TEST_F(Vi, MaxViAreAvailableAndNoMore) {
  std::vector<VIP_VI_HANDLE> vis;
  VIP_VI_ATTRIBUTES a = vi_attributes(ptag_);
  for (VIP_ULONG i = 0; i < attrs_.MaxVI; ++i) {
    VIP_VI_HANDLE v = nullptr;
    ASSERT_EQ(VipCreateVi(nic_, &a, nullptr, nullptr, &v), VIP_SUCCESS) << "VI " << i;
    vis.push_back(v);
  }
  VIP_VI_HANDLE v;
  EXPECT_EQ(VipCreateVi(nic_, &a, nullptr, nullptr, &v), VIP_ERROR_RESOURCE);
  ASSERT_EQ(VipDestroyVi(vis[0]), VIP_SUCCESS);
  EXPECT_EQ(VipCreateVi(nic_, &a, nullptr, nullptr, &v), VIP_SUCCESS);
}

TEST_F(Vi, DestroyTakesOnlyLiveViHandles) {
  VIP_VI_HANDLE v = vi();
  VIP_CQ_HANDLE c = cq();
  EXPECT_EQ(VipDestroyVi(nullptr), VIP_INVALID_PARAMETER);
  EXPECT_EQ(VipDestroyVi(bogus()), VIP_INVALID_PARAMETER);
  EXPECT_EQ(VipDestroyVi(c), VIP_INVALID_PARAMETER);
  EXPECT_EQ(VipDestroyVi(nic_), VIP_INVALID_PARAMETER);
  ASSERT_EQ(VipDestroyVi(v), VIP_SUCCESS);
  EXPECT_EQ(VipDestroyVi(v), VIP_INVALID_PARAMETER);
}

TEST_F(Vi, QueryTakesALiveViAndPlacesForEveryAnswer) {
  VIP_VI_HANDLE v = vi();
  VIP_VI_STATE s;
  VIP_VI_ATTRIBUTES a;
  VIP_BOOLEAN se, re;
  EXPECT_EQ(VipQueryVi(v, nullptr, &a, &se, &re), VIP_INVALID_PARAMETER);
  EXPECT_EQ(VipQueryVi(v, &s, nullptr, &se, &re), VIP_INVALID_PARAMETER);
  EXPECT_EQ(VipQueryVi(v, &s, &a, nullptr, &re), VIP_INVALID_PARAMETER);
  EXPECT_EQ(VipQueryVi(v, &s, &a, &se, nullptr), VIP_INVALID_PARAMETER);
  EXPECT_EQ(VipQueryVi(nullptr, &s, &a, &se, &re), VIP_INVALID_PARAMETER);
  EXPECT_EQ(VipQueryVi(bogus(), &s, &a, &se, &re), VIP_INVALID_PARAMETER);
  EXPECT_EQ(VipQueryVi(nic_, &s, &a, &se, &re), VIP_INVALID_PARAMETER);
  ASSERT_EQ(VipDestroyVi(v), VIP_SUCCESS);
  EXPECT_EQ(VipQueryVi(v, &s, &a, &se, &re), VIP_INVALID_PARAMETER);
}

TEST_F(Vi, SetAttributesOfAnIdleViTakesEffect) {
  VIP_VI_HANDLE v = vi();
  VIP_PROTECTION_HANDLE other = nullptr;
  ASSERT_EQ(VipCreatePtag(nic_, &other), VIP_SUCCESS);
  VIP_VI_ATTRIBUTES want = vi_attributes(other, VIP_SERVICE_RELIABLE_RECEPTION);
  want.MaxTransferSize = 12345;
  want.EnableRdmaWrite = VIP_TRUE;
  want.EnableRdmaRead = (attrs_.RDMAReadSupport & VIP_SERVICE_RELIABLE_RECEPTION) ? VIP_TRUE : VIP_FALSE;
  ASSERT_EQ(VipSetViAttributes(v, &want), VIP_SUCCESS);
  VIP_VI_STATE s;
  VIP_VI_ATTRIBUTES got;
  VIP_BOOLEAN se, re;
  ASSERT_EQ(VipQueryVi(v, &s, &got, &se, &re), VIP_SUCCESS);
  EXPECT_EQ(s, VIP_STATE_IDLE);
  EXPECT_EQ(got.ReliabilityLevel, VIP_SERVICE_RELIABLE_RECEPTION);
  EXPECT_EQ(got.MaxTransferSize, 12345u);
  EXPECT_EQ(got.Ptag, other);
  EXPECT_EQ(got.EnableRdmaWrite, VIP_TRUE);
  EXPECT_EQ(got.EnableRdmaRead, want.EnableRdmaRead);
}

TEST_F(Vi, SetAttributesValidatesLikeCreateAndAFailureChangesNothing) {
  VIP_VI_HANDLE v = vi();
  VIP_VI_ATTRIBUTES a = vi_attributes(ptag_, 0x3);
  EXPECT_EQ(VipSetViAttributes(v, &a), VIP_INVALID_RELIABILITY_LEVEL);
  a = vi_attributes(ptag_);
  a.MaxTransferSize = attrs_.MaxTransferSize + 1;
  EXPECT_EQ(VipSetViAttributes(v, &a), VIP_INVALID_MTU);
  a = vi_attributes(bogus());
  EXPECT_EQ(VipSetViAttributes(v, &a), VIP_INVALID_PTAG);
  a = vi_attributes(nullptr);
  EXPECT_EQ(VipSetViAttributes(v, &a), VIP_INVALID_PTAG);
  if (!(attrs_.RDMAReadSupport & VIP_SERVICE_UNRELIABLE) && (attrs_.ReliabilityLevelSupport & VIP_SERVICE_UNRELIABLE)) {
    a = vi_attributes(ptag_, VIP_SERVICE_UNRELIABLE);
    a.EnableRdmaRead = VIP_TRUE;
    EXPECT_EQ(VipSetViAttributes(v, &a), VIP_INVALID_RDMAREAD);
  }
  EXPECT_EQ(VipSetViAttributes(v, nullptr), VIP_INVALID_PARAMETER);
  a = vi_attributes(ptag_);
  EXPECT_EQ(VipSetViAttributes(nullptr, &a), VIP_INVALID_PARAMETER);
  EXPECT_EQ(VipSetViAttributes(bogus(), &a), VIP_INVALID_PARAMETER);
  EXPECT_EQ(VipSetViAttributes(nic_, &a), VIP_INVALID_PARAMETER);
  VIP_VI_STATE s;
  VIP_VI_ATTRIBUTES got;
  VIP_BOOLEAN se, re;
  ASSERT_EQ(VipQueryVi(v, &s, &got, &se, &re), VIP_SUCCESS);
  VIP_VI_ATTRIBUTES first = vi_attributes(ptag_);
  EXPECT_EQ(got.ReliabilityLevel, first.ReliabilityLevel);
  EXPECT_EQ(got.MaxTransferSize, first.MaxTransferSize);
  EXPECT_EQ(got.QoS, first.QoS);
  EXPECT_EQ(got.Ptag, first.Ptag);
  EXPECT_EQ(got.EnableRdmaWrite, first.EnableRdmaWrite);
  EXPECT_EQ(got.EnableRdmaRead, first.EnableRdmaRead);
}

// =========================================================================
// VipErrorCallback

using ErrorCallback = Vipl;

int g_callbacks = 0;
void count_callback(VIP_PVOID context, VIP_ERROR_DESCRIPTOR*) {
  ++g_callbacks;
  ++*static_cast<int*>(context);
}

TEST_F(ErrorCallback, AHandlerIsTakenAndNeverCalledForErrorsACallReturns) {
  int mine = 0;
  g_callbacks = 0;
  ASSERT_EQ(VipErrorCallback(nic_, &mine, count_callback), VIP_SUCCESS);
  // Synchronous errors are return codes, not asynchronous errors.
  VIP_CQ_HANDLE c;
  VIP_VI_HANDLE v;
  VIP_VI_ATTRIBUTES a = vi_attributes(nullptr);
  EXPECT_EQ(VipCreateCQ(nic_, 0, &c), VIP_INVALID_PARAMETER);
  EXPECT_EQ(VipCreateVi(nic_, &a, nullptr, nullptr, &v), VIP_INVALID_PTAG);
  EXPECT_EQ(VipDeregisterMem(nic_, bogus(), 42), VIP_INVALID_PARAMETER);
  c = cq();
  VIP_BOOLEAN recv;
  EXPECT_EQ(VipCQWait(c, 10, &v, &recv), VIP_TIMEOUT);
  EXPECT_EQ(mine, 0);
  EXPECT_EQ(g_callbacks, 0);
}

TEST_F(ErrorCallback, TheHandlerCanBeReplacedAndReset) {
  int a = 0, b = 0;
  EXPECT_EQ(VipErrorCallback(nic_, &a, count_callback), VIP_SUCCESS);
  EXPECT_EQ(VipErrorCallback(nic_, &b, count_callback), VIP_SUCCESS);
  EXPECT_EQ(VipErrorCallback(nic_, nullptr, nullptr), VIP_SUCCESS);  // back to the default
}

TEST_F(ErrorCallback, ItTakesALiveNic) {
  int a = 0;
  EXPECT_EQ(VipErrorCallback(nullptr, &a, count_callback), VIP_INVALID_PARAMETER);
  EXPECT_EQ(VipErrorCallback(bogus(), &a, count_callback), VIP_INVALID_PARAMETER);
  EXPECT_EQ(VipErrorCallback(ptag_, &a, count_callback), VIP_INVALID_PARAMETER);
}

// =========================================================================
// VipNSInit, VipNSGetHostByName, VipNSGetHostByAddr, VipNSShutdown

using NameService = Vipl;

TEST_F(NameService, InitAndShutdownTakeALiveNic) {
  EXPECT_EQ(VipNSInit(nic_, nullptr), VIP_SUCCESS);
  EXPECT_EQ(VipNSShutdown(nic_), VIP_SUCCESS);
  EXPECT_EQ(VipNSInit(nullptr, nullptr), VIP_INVALID_PARAMETER);
  EXPECT_EQ(VipNSInit(bogus(), nullptr), VIP_INVALID_PARAMETER);
  EXPECT_EQ(VipNSShutdown(nullptr), VIP_INVALID_PARAMETER);
  EXPECT_EQ(VipNSShutdown(ptag_), VIP_INVALID_PARAMETER);
}

TEST_F(NameService, NodeAndNicNamesResolveToTheNodeId) {
  ASSERT_EQ(VipNSInit(nic_, nullptr), VIP_SUCCESS);
  struct {
    const char* name;
    unsigned node;
  } names[] = {{"node0", 0}, {"node1", 1}, {"nic0", 0}, {"nic1", 1}, {"node63", 63}, {"nic10", 10}};
  for (auto& n : names) {
    NetAddress addr;
    addr.get()->DiscriminatorLen = 0x4242;  // the caller's: left alone
    std::string name = n.name;
    ASSERT_EQ(VipNSGetHostByName(nic_, name.data(), addr.get(), 0), VIP_SUCCESS) << n.name;
    EXPECT_EQ(addr.get()->HostAddressLen, attrs_.NicAddressLen);
    EXPECT_EQ(addr.get()->HostAddress[0], n.node & 0xff) << n.name;
    EXPECT_EQ(addr.get()->HostAddress[1], n.node >> 8) << n.name;
    EXPECT_EQ(addr.get()->DiscriminatorLen, 0x4242);
  }
  EXPECT_EQ(VipNSShutdown(nic_), VIP_SUCCESS);
}

TEST_F(NameService, TheLocalAddressIsNode0sAddress) {
  NetAddress addr;
  std::string name = "node0";
  ASSERT_EQ(VipNSGetHostByName(nic_, name.data(), addr.get(), 0), VIP_SUCCESS);
  EXPECT_EQ(std::memcmp(addr.get()->HostAddress, attrs_.LocalNicAddress, attrs_.NicAddressLen), 0);
}

TEST_F(NameService, UnknownNamesAreNameServiceErrors) {
  // ("localhost" and this machine's host name are the local node: vipl_names_test.)
  for (const char* bad : {"", "node", "nic", "node64", "nic64", "node-1", "node01", "nodeX", "node1 ", "host0",
                          "NODE0", "node99999999999999999999"}) {
    NetAddress addr;
    std::string name = bad;
    EXPECT_EQ(VipNSGetHostByName(nic_, name.data(), addr.get(), 0), VIP_ERROR_NAMESERVICE) << '"' << bad << '"';
  }
}

TEST_F(NameService, ANodeHasOneAddress) {
  NetAddress addr;
  std::string name = "node1";
  EXPECT_EQ(VipNSGetHostByName(nic_, name.data(), addr.get(), 1), VIP_ERROR_NAMESERVICE);
  EXPECT_EQ(VipNSGetHostByName(nic_, name.data(), addr.get(), 7), VIP_ERROR_NAMESERVICE);
}

TEST_F(NameService, GetHostByNameTakesALiveNicANameAndAnAddress) {
  NetAddress addr;
  std::string name = "node1";
  EXPECT_EQ(VipNSGetHostByName(nic_, nullptr, addr.get(), 0), VIP_INVALID_PARAMETER);
  EXPECT_EQ(VipNSGetHostByName(nic_, name.data(), nullptr, 0), VIP_INVALID_PARAMETER);
  EXPECT_EQ(VipNSGetHostByName(nullptr, name.data(), addr.get(), 0), VIP_INVALID_PARAMETER);
  EXPECT_EQ(VipNSGetHostByName(bogus(), name.data(), addr.get(), 0), VIP_INVALID_PARAMETER);
}

TEST_F(NameService, AddressesResolveBackToTheirNodeName) {
  for (unsigned node : {0u, 1u, 42u, 63u}) {
    NetAddress addr;
    addr.get()->HostAddressLen = 2;
    addr.get()->DiscriminatorLen = 3;
    addr.get()->HostAddress[0] = VIP_UINT8(node);
    addr.get()->HostAddress[1] = 0;
    std::memcpy(addr.get()->HostAddress + 2, "abc", 3);  // the discriminator plays no part
    VIP_CHAR name[64];
    VIP_ULONG len = sizeof name;
    ASSERT_EQ(VipNSGetHostByAddr(nic_, addr.get(), name, &len), VIP_SUCCESS) << node;
    std::string want = "node" + std::to_string(node);
    EXPECT_STREQ(name, want.c_str());
    EXPECT_EQ(len, want.size() + 1);
  }
}

TEST_F(NameService, NamesRoundTrip) {
  std::string name = "nic1";
  NetAddress addr;
  ASSERT_EQ(VipNSGetHostByName(nic_, name.data(), addr.get(), 0), VIP_SUCCESS);
  VIP_CHAR back[16];
  VIP_ULONG len = sizeof back;
  ASSERT_EQ(VipNSGetHostByAddr(nic_, addr.get(), back, &len), VIP_SUCCESS);
  EXPECT_STREQ(back, "node1");
  NetAddress again;
  ASSERT_EQ(VipNSGetHostByName(nic_, back, again.get(), 0), VIP_SUCCESS);
  EXPECT_EQ(std::memcmp(addr.get()->HostAddress, again.get()->HostAddress, 2), 0);
}

TEST_F(NameService, ATooSmallNameBufferSaysHowMuchIsNeeded) {
  NetAddress addr;
  addr.get()->HostAddressLen = 2;
  addr.get()->DiscriminatorLen = 0;
  addr.get()->HostAddress[0] = 12;
  addr.get()->HostAddress[1] = 0;
  VIP_CHAR name[16] = "untouched";
  VIP_ULONG len = 6;  // "node12" needs 7 with its NUL
  EXPECT_EQ(VipNSGetHostByAddr(nic_, addr.get(), name, &len), VIP_INVALID_PARAMETER);
  EXPECT_EQ(len, 7u);
  EXPECT_STREQ(name, "untouched");
  len = 0;
  EXPECT_EQ(VipNSGetHostByAddr(nic_, addr.get(), name, &len), VIP_INVALID_PARAMETER);
  EXPECT_EQ(len, 7u);
  ASSERT_EQ(VipNSGetHostByAddr(nic_, addr.get(), name, &len), VIP_SUCCESS);
  EXPECT_STREQ(name, "node12");
}

TEST_F(NameService, AddressesOfNoNodeAreNameServiceErrors) {
  VIP_CHAR name[64];
  VIP_ULONG len = sizeof name;
  NetAddress addr;
  addr.get()->DiscriminatorLen = 0;
  addr.get()->HostAddressLen = 2;
  addr.get()->HostAddress[0] = 64;  // past the fabric's last node
  addr.get()->HostAddress[1] = 0;
  EXPECT_EQ(VipNSGetHostByAddr(nic_, addr.get(), name, &len), VIP_ERROR_NAMESERVICE);
  addr.get()->HostAddress[0] = 0;
  addr.get()->HostAddress[1] = 1;  // node 256
  EXPECT_EQ(VipNSGetHostByAddr(nic_, addr.get(), name, &len), VIP_ERROR_NAMESERVICE);
  for (VIP_UINT16 bad_len : {0, 1, 3, 4, 6}) {
    addr.get()->HostAddressLen = bad_len;
    addr.get()->HostAddress[1] = 0;
    EXPECT_EQ(VipNSGetHostByAddr(nic_, addr.get(), name, &len), VIP_ERROR_NAMESERVICE) << bad_len;
  }
}

TEST_F(NameService, GetHostByAddrTakesALiveNicAndItsArguments) {
  NetAddress addr;
  addr.get()->HostAddressLen = 2;
  VIP_CHAR name[64];
  VIP_ULONG len = sizeof name;
  EXPECT_EQ(VipNSGetHostByAddr(nic_, nullptr, name, &len), VIP_INVALID_PARAMETER);
  EXPECT_EQ(VipNSGetHostByAddr(nic_, addr.get(), nullptr, &len), VIP_INVALID_PARAMETER);
  EXPECT_EQ(VipNSGetHostByAddr(nic_, addr.get(), name, nullptr), VIP_INVALID_PARAMETER);
  EXPECT_EQ(VipNSGetHostByAddr(nullptr, addr.get(), name, &len), VIP_INVALID_PARAMETER);
  EXPECT_EQ(VipNSGetHostByAddr(bogus(), addr.get(), name, &len), VIP_INVALID_PARAMETER);
}

// =========================================================================
// VipQuerySystemManagementInfo

using Autodiscovery = Vipl;

struct AddressArray {
  explicit AddressArray(size_t n) : storage(n), pointers(n) {
    for (size_t i = 0; i < n; ++i) pointers[i] = storage[i].get();
    list.NumberOfHops = 1;
    list.ADAddrArray = pointers.data();
    list.NumAdAddrs = n;
  }
  std::vector<NetAddress> storage;
  std::vector<VIP_NET_ADDRESS*> pointers;
  VIP_AUTODISCOVERY_LIST list{};
};

unsigned node_of(const VIP_NET_ADDRESS* a) { return a->HostAddress[0] | unsigned(a->HostAddress[1]) << 8; }

TEST_F(Autodiscovery, ListsTheNodesOfTheCluster) {
  AddressArray a(8);
  ASSERT_EQ(VipQuerySystemManagementInfo(nic_, VIP_SMI_AUTODISCOVERY, &a.list), VIP_SUCCESS);
  ASSERT_EQ(a.list.NumAdAddrs, VIP_ULONG(kNodes));
  for (int k = 0; k < kNodes; ++k) {
    EXPECT_EQ(a.pointers[k]->HostAddressLen, attrs_.NicAddressLen);
    EXPECT_EQ(a.pointers[k]->DiscriminatorLen, 0);
    EXPECT_EQ(node_of(a.pointers[k]), unsigned(k));
  }
  // What it lists resolves and opens.
  VIP_CHAR name[16];
  VIP_ULONG len = sizeof name;
  ASSERT_EQ(VipNSGetHostByAddr(nic_, a.pointers[1], name, &len), VIP_SUCCESS);
  EXPECT_STREQ(name, "node1");
}

TEST_F(Autodiscovery, ATooShortArrayGetsWhatFitsAndTheCount) {
  AddressArray a(1);
  EXPECT_EQ(VipQuerySystemManagementInfo(nic_, VIP_SMI_AUTODISCOVERY, &a.list), VIP_ERROR_RESOURCE);
  EXPECT_EQ(a.list.NumAdAddrs, VIP_ULONG(kNodes));
  EXPECT_EQ(node_of(a.pointers[0]), 0u);
  AddressArray none(0);
  none.list.ADAddrArray = nullptr;
  EXPECT_EQ(VipQuerySystemManagementInfo(nic_, VIP_SMI_AUTODISCOVERY, &none.list), VIP_ERROR_RESOURCE);
  EXPECT_EQ(none.list.NumAdAddrs, VIP_ULONG(kNodes));
}

TEST_F(Autodiscovery, ItTakesALiveNicAKnownInfoTypeAndSomewhereToWrite) {
  AddressArray a(4);
  EXPECT_EQ(VipQuerySystemManagementInfo(nic_, 0, &a.list), VIP_INVALID_PARAMETER);
  EXPECT_EQ(VipQuerySystemManagementInfo(nic_, 2, &a.list), VIP_INVALID_PARAMETER);
  EXPECT_EQ(VipQuerySystemManagementInfo(nic_, VIP_SMI_AUTODISCOVERY, nullptr), VIP_INVALID_PARAMETER);
  EXPECT_EQ(VipQuerySystemManagementInfo(nullptr, VIP_SMI_AUTODISCOVERY, &a.list), VIP_INVALID_PARAMETER);
  EXPECT_EQ(VipQuerySystemManagementInfo(bogus(), VIP_SMI_AUTODISCOVERY, &a.list), VIP_INVALID_PARAMETER);
  a.list.ADAddrArray = nullptr;
  EXPECT_EQ(VipQuerySystemManagementInfo(nic_, VIP_SMI_AUTODISCOVERY, &a.list), VIP_INVALID_PARAMETER);
  AddressArray holey(4);
  holey.pointers[1] = nullptr;
  EXPECT_EQ(VipQuerySystemManagementInfo(nic_, VIP_SMI_AUTODISCOVERY, &holey.list), VIP_INVALID_PARAMETER);
}

// =========================================================================
// ulnic's limits where the spec leaves them to the provider (vipl.cpp says
// why); a later change that lifts one changes its test on purpose.

using UlnicLimits = Vipl;

// A buffer reaching past pages registered before registers (one range with
// them); one reaching into registered pages the program has since mapped
// anew cannot (their bytes would live in two places) until their
// registrations go. (Until ABI 8 the first was refused too.) Then the pages
// still the slot's go back to private memory before their slot pages are
// reused: the program's bytes stay its own.
TEST_F(UlnicLimits, ABufferOverRegisteredPagesMappedAnewIsAResourceError) {
  uint8_t* buf = pages(3);
  pattern(buf, 3 * kPage, 9);
  std::vector<uint8_t> want(buf, buf + 3 * kPage);
  VIP_MEM_HANDLE first = reg(buf, kPage + 100);  // moves pages 0 and 1
  VIP_MEM_ATTRIBUTES m = mem_attributes(ptag_);
  VIP_MEM_HANDLE grown, h;
  EXPECT_EQ(VipRegisterMem(nic_, buf + kPage + 200, kPage, &m, &grown), VIP_SUCCESS);  // pages 1 and 2
  EXPECT_EQ(VipRegisterMem(nic_, buf + kPage + 200, 100, &m, &h), VIP_SUCCESS);  // page 1 only
  EXPECT_EQ(VipDeregisterMem(nic_, buf + kPage + 200, h), VIP_SUCCESS);
  ASSERT_EQ(::mmap(buf, kPage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0), buf);
  pattern(buf, kPage, 10);  // the program's new page 0
  std::copy(buf, buf + kPage, want.begin());
  EXPECT_EQ(VipRegisterMem(nic_, buf + 100, 2 * kPage, &m, &h), VIP_ERROR_RESOURCE);
  EXPECT_EQ(VipDeregisterMem(nic_, buf, first), VIP_SUCCESS);
  EXPECT_EQ(VipDeregisterMem(nic_, buf + kPage + 200, grown), VIP_SUCCESS);
  // Page 0 alone moves in afresh; the unused backing goes, and its pages 1
  // and 2, still the slot's, go back to private memory first: memory
  // registered next, which may get their slot pages, is not theirs.
  EXPECT_EQ(VipRegisterMem(nic_, buf, 100, &m, &h), VIP_SUCCESS);
  uint8_t* other = pages(4);
  pattern(other, 4 * kPage, 11);
  VIP_MEM_HANDLE o = reg(other, 4 * kPage);
  EXPECT_TRUE(std::equal(want.begin(), want.end(), buf));
  EXPECT_EQ(VipDeregisterMem(nic_, buf, h), VIP_SUCCESS);
  EXPECT_EQ(VipDeregisterMem(nic_, other, o), VIP_SUCCESS);
}

TEST_F(Mem, SetMemAttributesChangesTheRdmaRightsInPlace) {
  uint8_t* buf = pages(1);
  VIP_MEM_HANDLE h = reg(buf, kPage);
  VIP_MEM_ATTRIBUTES m = mem_attributes(ptag_, true, false);
  EXPECT_EQ(VipSetMemAttributes(nic_, buf, h, &m), VIP_SUCCESS);
  VIP_MEM_ATTRIBUTES now{};
  ASSERT_EQ(VipQueryMem(nic_, buf, h, &now), VIP_SUCCESS);
  EXPECT_EQ(now.EnableRdmaWrite, VIP_TRUE);
  EXPECT_EQ(now.EnableRdmaRead, VIP_FALSE);
  m = mem_attributes(ptag_, false, true);
  EXPECT_EQ(VipSetMemAttributes(nic_, buf, h, &m), VIP_SUCCESS);
  ASSERT_EQ(VipQueryMem(nic_, buf, h, &now), VIP_SUCCESS);
  EXPECT_EQ(now.EnableRdmaWrite, VIP_FALSE);
  EXPECT_EQ(now.EnableRdmaRead, VIP_TRUE);
  EXPECT_EQ(VipDeregisterMem(nic_, buf, h), VIP_SUCCESS);  // the handle stayed the same
}

}  // namespace
