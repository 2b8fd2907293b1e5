// Issue 24, item 6: what VIPL programs written for M-VIA and cLAN expect of
// names, device names, connection setup and teardown.
//   (a) the name service: node<k>/nic<k>; the names `ulnic cluster up
//       --names` writes to the cluster's hosts file (for this machine's
//       nodes, or for every node of a cluster across machines), and lines
//       a user adds; this machine's host name and "localhost" for the local
//       node;
//       VipNSGetHostByAddr gives a node's first name;
//   (b) VipOpenNic: "nic<k>", $ULNIC_VIA_DEVICE aliases, M-VIA's /dev/via_*
//       paths for the process's node ($ULNIC_NODE);
//   (c) VipConnectRequest to a node nobody waits at is VIP_NO_MATCH at once
//       (client/server); a peer-to-peer request still waits for its peer;
//   (d) an orderly disconnect by the peer is not printed by the default
//       error handler (a handler still gets VIP_ERROR_CONN_LOST); a broken
//       connection still is.
// One 2-node cluster for the binary, brought up with --names alpha,beta
// (and, for one test, a 1-node cluster that is part of a 3-node one).
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>
#include <vipl.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "vipl_cluster.h"

namespace {

using namespace vipl_test;
using Clock = std::chrono::steady_clock;

constexpr VIP_ULONG kLong = 10000;

ClusterEnvironment* const cluster_env = static_cast<ClusterEnvironment*>(
    ::testing::AddGlobalTestEnvironment(new ClusterEnvironment("vipl-names", kNodes, {"--names", "alpha,beta"})));

std::string hosts_path() { return cluster_env->dir() + "/" + cluster_env->cluster() + "/hosts"; }

// Sets an environment variable for one scope.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old, had_ = true;
    if (value) ::setenv(name, value, 1);
    else ::unsetenv(name);
  }
  ~ScopedEnv() {
    if (had_) ::setenv(name_.c_str(), old_.c_str(), 1);
    else ::unsetenv(name_.c_str());
  }

 private:
  std::string name_, old_;
  bool had_ = false;
};

// What this process writes on stderr meanwhile.
class StderrCapture {
 public:
  StderrCapture() {
    char path[] = "/tmp/vipl-names-stderr-XXXXXX";
    fd_ = ::mkstemp(path);
    path_ = path;
    std::fflush(stderr);
    saved_ = ::dup(2);
    ::dup2(fd_, 2);
  }
  ~StderrCapture() {
    restore();
    ::close(fd_);
    ::unlink(path_.c_str());
  }
  std::string text() {
    restore();
    return slurp(path_);
  }

 private:
  void restore() {
    if (saved_ < 0) return;
    std::fflush(stderr);
    ::dup2(saved_, 2);
    ::close(saved_);
    saved_ = -1;
  }
  int fd_ = -1, saved_ = -1;
  std::string path_;
};

// ---- (a) the name service

class Names : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(open_nic("nic0", &nic0_), VIP_SUCCESS);
    ASSERT_EQ(open_nic("nic1", &nic1_), VIP_SUCCESS);
  }
  void TearDown() override {
    for (VIP_NIC_HANDLE n : {nic0_, nic1_})
      if (n) {
        EXPECT_EQ(VipCloseNic(n), VIP_SUCCESS);
      }
  }
  // The node `name` resolves to through `nic` (-1: VIP_ERROR_NAMESERVICE).
  int lookup(VIP_NIC_HANDLE nic, const std::string& name) {
    NetAddress a;
    std::string copy = name;
    VIP_RETURN rc = VipNSGetHostByName(nic, copy.data(), a.get(), 0);
    if (rc == VIP_ERROR_NAMESERVICE) return -1;
    EXPECT_EQ(rc, VIP_SUCCESS) << name;
    EXPECT_EQ(a.get()->HostAddressLen, 2) << name;
    return a.node();
  }
  std::string name_of(VIP_NIC_HANDLE nic, unsigned node) {
    NetAddress a = address(node, "");
    VIP_CHAR buf[300];
    VIP_ULONG len = sizeof buf;
    EXPECT_EQ(VipNSGetHostByAddr(nic, a.get(), buf, &len), VIP_SUCCESS) << node;
    EXPECT_EQ(len, std::strlen(buf) + 1);
    return buf;
  }
  VIP_NIC_HANDLE nic0_ = nullptr, nic1_ = nullptr;
};

TEST_F(Names, ClusterUpNamesWritesTheHostsFile) {
  std::string text = slurp(hosts_path());
  EXPECT_NE(text.find("\nalpha 0\n"), std::string::npos) << text;
  EXPECT_NE(text.find("\nbeta 1\n"), std::string::npos) << text;
}

TEST_F(Names, NodeAndNicNamesResolveAsBefore) {
  for (VIP_NIC_HANDLE nic : {nic0_, nic1_}) {
    EXPECT_EQ(lookup(nic, "node0"), 0);
    EXPECT_EQ(lookup(nic, "nic1"), 1);
    EXPECT_EQ(lookup(nic, "node63"), 63);  // a node of another machine, maybe
  }
}

TEST_F(Names, TheNamesGivenToTheClusterResolveWithoutCase) {
  for (VIP_NIC_HANDLE nic : {nic0_, nic1_}) {
    EXPECT_EQ(lookup(nic, "alpha"), 0);
    EXPECT_EQ(lookup(nic, "beta"), 1);
    EXPECT_EQ(lookup(nic, "ALPHA"), 0);
    EXPECT_EQ(lookup(nic, "Beta"), 1);
  }
  for (const char* unknown : {"gamma", "alph", "alphaa", "alpha ", "beta.x", "", "node64"})
    EXPECT_EQ(lookup(nic0_, unknown), -1) << '"' << unknown << '"';
}

TEST_F(Names, TheHostNameAndLocalhostAreTheNodeOfTheNicAsked) {
  char host[256] = {};
  ASSERT_EQ(::gethostname(host, sizeof host - 1), 0);
  std::string self = host, label = self.substr(0, self.find('.'));
  for (VIP_NIC_HANDLE nic : {nic0_, nic1_}) {
    const int own = nic == nic0_ ? 0 : 1;
    EXPECT_EQ(lookup(nic, "localhost"), own);
    EXPECT_EQ(lookup(nic, "LocalHost"), own);
    if (self != "alpha" && self != "beta") {  // a cluster name wins over the host name
      EXPECT_EQ(lookup(nic, self), own) << self;
      EXPECT_EQ(lookup(nic, label), own) << label;
    }
  }
}

TEST_F(Names, GetHostByAddrGivesTheFirstNameOfANode) {
  EXPECT_EQ(name_of(nic0_, 0), "alpha");
  EXPECT_EQ(name_of(nic1_, 1), "beta");
  EXPECT_EQ(name_of(nic0_, 5), "node5");  // no name: as before
}

TEST_F(Names, AUserMayExtendTheHostsFile) {
  const std::string path = hosts_path(), before = slurp(path);
  {
    std::ofstream f(path, std::ios::app);
    f << "# added by hand\n"
         "gamma 1\n"
         "   delta\t 0   # the first node again\n"
         "epsilon node1\n"
         "alpha 1\n"      // a second line for a name: the first one counts
         "broken\n"
         "zeta 64\n"
         "eta 1 extra\n";
  }
  EXPECT_EQ(lookup(nic0_, "gamma"), 1);
  EXPECT_EQ(lookup(nic0_, "delta"), 0);
  EXPECT_EQ(lookup(nic1_, "epsilon"), 1);
  EXPECT_EQ(lookup(nic0_, "alpha"), 0);
  for (const char* bad : {"broken", "zeta", "eta", "added"}) EXPECT_EQ(lookup(nic0_, bad), -1) << bad;
  EXPECT_EQ(name_of(nic0_, 1), "beta");  // still the first name of node 1
  std::ofstream(path, std::ios::trunc) << before;
  EXPECT_EQ(lookup(nic0_, "gamma"), -1);
}

TEST_F(Names, AClusterWithoutAHostsFileStillKnowsItsNodesAndItself) {
  const std::string path = hosts_path(), before = slurp(path);
  ASSERT_EQ(::unlink(path.c_str()), 0);
  EXPECT_EQ(lookup(nic0_, "alpha"), -1);
  EXPECT_EQ(lookup(nic0_, "node1"), 1);
  EXPECT_EQ(lookup(nic1_, "localhost"), 1);
  EXPECT_EQ(name_of(nic0_, 0), "node0");
  std::ofstream(path) << before;
  EXPECT_EQ(lookup(nic0_, "alpha"), 0);
}

// `ulnic cluster up --names` refuses, before starting anything, a list that
// fits neither this machine's nodes nor the whole cluster, or names that
// are no names.
TEST(ClusterUpNames, BadListsAreRefused) {
  const std::string fw = env_or("ULNIC_FIRMWARE_DIR", ULNIC_TEST_FIRMWARE_DIR) + "/ulnic-fw.elf";
  const std::string cluster = "vipl-names-bad-" + std::to_string(::getpid());
  const std::vector<std::vector<std::string>> bad = {
      {"-n", "2", "--names", "one"},
      {"-n", "2", "--names", "a,b,c"},
      {"-n", "2", "--names", "a,,"},
      {"-n", "2", "--names", "a,A"},
      {"-n", "2", "--names", "a b,c"},
      {"-n", "2", "--names", "a#,c"},
      // Across machines: 1 here (node 1) of 3; two names fit neither.
      {"-n", "1", "--first", "1", "--total", "3", "--bridge-peer", "127.0.0.1:9=0-0", "--names", "x,y"},
  };
  for (const auto& args : bad) {
    std::vector<std::string> cmd = {"cluster", "up", "-c", cluster, "--firmware", fw};
    cmd.insert(cmd.end(), args.begin(), args.end());
    std::string shown;
    for (const auto& a : args) shown += a + " ";
    EXPECT_EQ(run_ulnic(cmd, true), 2) << shown;
  }
  EXPECT_FALSE(fs::exists(cluster_env->dir() + "/" + cluster)) << "something was started";
}

// A UDP port of 127.0.0.1 nobody uses now (0: none found).
unsigned free_udp_port() {
  int fd = ::socket(AF_INET, SOCK_DGRAM, 0);
  if (fd < 0) return 0;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  unsigned port = 0;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0)
    port = ntohs(a.sin_port);
  ::close(fd);
  return port;
}

// A cluster across machines: this machine runs node 1 of 3 (nodes 0 and 2
// are behind UDP bridges nobody answers), and --names names all three, as
// every machine of the cluster is told. A process on node 1 resolves every
// name, its own and the other machines' nodes'.
TEST(ClusterUpNames, AListForEveryNodeOfAClusterAcrossMachines) {
  const std::string fw = env_or("ULNIC_FIRMWARE_DIR", ULNIC_TEST_FIRMWARE_DIR) + "/ulnic-fw.elf";
  const std::string cluster = "vipl-names-xm-" + std::to_string(::getpid());
  const unsigned here = free_udp_port(), a = free_udp_port(), b = free_udp_port();
  ASSERT_TRUE(here && a && b && here != a && here != b);
  auto port = [](unsigned p) { return "127.0.0.1:" + std::to_string(p); };
  ASSERT_EQ(run_ulnic({"cluster", "up", "-c", cluster, "-n", "1", "--first", "1", "--total", "3", "--slot-size",
                       std::to_string(kSlotMiB), "--firmware", fw, "--bridge-listen", port(here), "--bridge-peer",
                       port(a) + "=0-0", "--bridge-peer", port(b) + "=2-2", "--names", "xm-zero,xm-one,xm-two"}),
            0);
  {
    const std::string text = slurp(cluster_env->dir() + "/" + cluster + "/hosts");
    EXPECT_NE(text.find("\nxm-zero 0\nxm-one 1\nxm-two 2\n"), std::string::npos) << text;
    ScopedEnv which("ULNIC_CLUSTER", cluster.c_str());
    VIP_NIC_HANDLE nic = nullptr;
    ASSERT_EQ(open_nic("nic1", &nic), VIP_SUCCESS);
    const std::pair<const char*, int> names[] = {
        {"xm-zero", 0}, {"xm-one", 1}, {"xm-two", 2}, {"XM-TWO", 2}, {"localhost", 1}, {"alpha", -1}};
    for (const auto& [name, node] : names) {
      NetAddress addr;
      std::string copy = name;
      VIP_RETURN rc = VipNSGetHostByName(nic, copy.data(), addr.get(), 0);
      if (node < 0) {
        EXPECT_EQ(rc, VIP_ERROR_NAMESERVICE) << name;  // another cluster's name
        continue;
      }
      EXPECT_EQ(rc, VIP_SUCCESS) << name;
      EXPECT_EQ(addr.node(), node) << name;
    }
    NetAddress two = address(2, "");
    VIP_CHAR buf[64];
    VIP_ULONG len = sizeof buf;
    EXPECT_EQ(VipNSGetHostByAddr(nic, two.get(), buf, &len), VIP_SUCCESS);
    EXPECT_STREQ(buf, "xm-two");
    EXPECT_EQ(len, VIP_ULONG(sizeof "xm-two"));
    EXPECT_EQ(VipCloseNic(nic), VIP_SUCCESS);
  }
  EXPECT_EQ(run_ulnic({"cluster", "down", "-c", cluster}), 0);
}

// ---- (b) device names

class Devices : public ::testing::Test {
 protected:
  // The node VipOpenNic(name) opened (-1: it failed; rc says how).
  int open_node(const char* name, VIP_RETURN* rc = nullptr) {
    VIP_NIC_HANDLE nic = nullptr;
    VIP_RETURN r = open_nic(name, &nic);
    if (rc) *rc = r;
    if (r != VIP_SUCCESS) return -1;
    VIP_NIC_ATTRIBUTES a{};
    EXPECT_EQ(VipQueryNic(nic, &a), VIP_SUCCESS);
    int node = a.LocalNicAddress[0] | a.LocalNicAddress[1] << 8;
    EXPECT_STREQ(a.Name, ("nic" + std::to_string(node)).c_str());
    EXPECT_EQ(VipCloseNic(nic), VIP_SUCCESS);
    return node;
  }
};

TEST_F(Devices, MviaDevicePathsOpenTheNodeOfTheProcess) {
  {
    ScopedEnv node("ULNIC_NODE", "1");
    EXPECT_EQ(open_node("/dev/via_eth0"), 1);
    EXPECT_EQ(open_node("/dev/via_lo"), 1);
    EXPECT_EQ(open_node("nic0"), 0);  // nic<k> is node k, whatever $ULNIC_NODE says
  }
  {
    ScopedEnv node("ULNIC_NODE", nullptr);
    EXPECT_EQ(open_node("/dev/via_eth1"), 0);
  }
  {
    ScopedEnv node("ULNIC_NODE", "0");
    EXPECT_EQ(open_node("/dev/via_eth0"), 0);
  }
}

TEST_F(Devices, ViaDeviceAliasesNameNodes) {
  ScopedEnv node("ULNIC_NODE", "0");
  ScopedEnv aliases("ULNIC_VIA_DEVICE",
                    "/dev/via_eth0=1,clan0=0,clan1=1,broken=99,=1,nicname=nic1,nodename=node1,clan0=1,bad=nic");
  EXPECT_EQ(open_node("/dev/via_eth0"), 1);  // the alias, not $ULNIC_NODE
  EXPECT_EQ(open_node("clan0"), 0);          // the first entry for a name counts
  EXPECT_EQ(open_node("clan1"), 1);
  EXPECT_EQ(open_node("nicname"), 1);
  EXPECT_EQ(open_node("nodename"), 1);
  EXPECT_EQ(open_node("/dev/via_eth9"), 0);  // no alias: $ULNIC_NODE
  VIP_RETURN rc = VIP_SUCCESS;
  EXPECT_EQ(open_node("broken", &rc), -1);
  EXPECT_EQ(rc, VIP_INVALID_PARAMETER);
  EXPECT_EQ(open_node("clan2", &rc), -1);
  EXPECT_EQ(rc, VIP_INVALID_PARAMETER);
  for (const char* bad : {"bad", ""}) {  // a node that is none; an empty name is no alias
    rc = VIP_SUCCESS;
    EXPECT_EQ(open_node(bad, &rc), -1) << '"' << bad << '"';
    EXPECT_EQ(rc, VIP_INVALID_PARAMETER) << '"' << bad << '"';
  }
}

TEST_F(Devices, OtherNamesStayInvalidParameters) {
  ScopedEnv node("ULNIC_NODE", "1");
  for (const char* bad : {"", "/dev/via_", "/dev/via", "/dev/viax", "/dev/eth0", "via_eth0", "eth0", "/dev/vi_lo",
                          "nic", "node0"}) {
    VIP_RETURN rc = VIP_SUCCESS;
    EXPECT_EQ(open_node(bad, &rc), -1) << '"' << bad << '"';
    EXPECT_EQ(rc, VIP_INVALID_PARAMETER) << '"' << bad << '"';
  }
  ScopedEnv broken("ULNIC_NODE", "x");
  VIP_RETURN rc = VIP_SUCCESS;
  EXPECT_EQ(open_node("/dev/via_eth0", &rc), -1);
  EXPECT_EQ(rc, VIP_INVALID_PARAMETER);
}

// ---- (c) and (d): connections

void record(VIP_PVOID context, VIP_ERROR_DESCRIPTOR* e) {
  static_cast<std::vector<VIP_ERROR_DESCRIPTOR>*>(context)->push_back(*e);
}

class Conn : public ::testing::Test {
 protected:
  struct Side {
    VIP_NIC_HANDLE nic = nullptr;
    VIP_PROTECTION_HANDLE ptag = nullptr;
    std::vector<VIP_ERROR_DESCRIPTOR> errors;  // with a handler set
  };
  void SetUp() override {
    for (int k = 0; k < 2; ++k) {
      Side& s = k ? b_ : a_;
      std::string dev = "nic" + std::to_string(k);
      ASSERT_EQ(open_nic(dev.c_str(), &s.nic), VIP_SUCCESS);
      ASSERT_EQ(VipCreatePtag(s.nic, &s.ptag), VIP_SUCCESS);
    }
  }
  void TearDown() override {
    for (Side* s : {&a_, &b_})
      if (s->nic) {
        EXPECT_EQ(VipCloseNic(s->nic), VIP_SUCCESS);
      }
  }
  void handler(Side& s) { ASSERT_EQ(VipErrorCallback(s.nic, &s.errors, record), VIP_SUCCESS); }
  VIP_VI_HANDLE vi(Side& s) {
    VIP_VI_ATTRIBUTES a{};
    a.ReliabilityLevel = VIP_SERVICE_RELIABLE_DELIVERY;
    a.MaxTransferSize = 4096;
    a.Ptag = s.ptag;
    VIP_VI_HANDLE v = nullptr;
    EXPECT_EQ(VipCreateVi(s.nic, &a, nullptr, nullptr, &v), VIP_SUCCESS);
    return v;
  }
  VIP_VI_STATE state(VIP_VI_HANDLE v) { return vi_state(v); }
  // Waits (running the library's completion processing) until `v` is in `want`.
  bool await_state(VIP_VI_HANDLE v, VIP_VI_STATE want) {
    for (auto deadline = Clock::now() + std::chrono::milliseconds(kLong); Clock::now() < deadline;) {
      if (state(v) == want) return true;
      std::this_thread::sleep_for(5ms);
    }
    return false;
  }
  // `client` (on node `client_node`) to `server`, a VI of `ss` on node `server_node`.
  void connect(VIP_VI_HANDLE client, unsigned client_node, Side& ss, VIP_VI_HANDLE server, unsigned server_node) {
    std::string disc = fresh_discriminator("pair");
    VIP_RETURN wait = VIP_ERROR_RESOURCE, accept = VIP_ERROR_RESOURCE;
    std::thread srv([&] {
      NetAddress local = address(server_node, disc), from;
      VIP_VI_ATTRIBUTES ra{};
      VIP_CONN_HANDLE conn = nullptr;
      wait = VipConnectWait(ss.nic, local.get(), kLong, from.get(), &ra, &conn);
      if (wait == VIP_SUCCESS) accept = VipConnectAccept(conn, server);
    });
    NetAddress local = address(client_node, disc), remote = address(server_node, disc);
    VIP_VI_ATTRIBUTES ra{};
    VIP_RETURN request = connect_request(client, local.get(), remote.get(), kLong, &ra);
    srv.join();
    ASSERT_EQ(request, VIP_SUCCESS);
    ASSERT_EQ(wait, VIP_SUCCESS);
    ASSERT_EQ(accept, VIP_SUCCESS);
  }
  Side a_, b_;
};

TEST_F(Conn, ARequestNobodyWaitsForIsNoMatchLongBeforeItsTimeout) {
  VIP_VI_HANDLE client = vi(a_);
  for (unsigned server : {1u, 0u}) {  // another node, and this one
    std::string disc = fresh_discriminator("nobody");
    NetAddress local = address(0, disc), remote = address(server, disc);
    VIP_VI_ATTRIBUTES ra{};
    auto start = Clock::now();
    EXPECT_EQ(VipConnectRequest(client, local.get(), remote.get(), 120000, &ra), VIP_NO_MATCH) << server;
    EXPECT_LT(Clock::now() - start, 60s) << "VIP_NO_MATCH came only with the timeout";
    EXPECT_EQ(state(client), VIP_STATE_IDLE);
  }
  // VIP_INFINITE too.
  std::string disc = fresh_discriminator("forever");
  NetAddress local = address(0, disc), remote = address(1, disc);
  VIP_VI_ATTRIBUTES ra{};
  EXPECT_EQ(VipConnectRequest(client, local.get(), remote.get(), VIP_INFINITE, &ra), VIP_NO_MATCH);
}

TEST_F(Conn, AClientThatAsksAgainConnectsOnceTheServerWaits) {
  VIP_VI_HANDLE client = vi(a_), server = vi(b_);
  std::string disc = fresh_discriminator("later");
  int no_match = 0;
  VIP_RETURN request = VIP_ERROR_RESOURCE;
  std::thread cli([&] {
    NetAddress local = address(0, disc), remote = address(1, disc);
    VIP_VI_ATTRIBUTES ra{};
    auto deadline = Clock::now() + std::chrono::milliseconds(kLong);
    while ((request = VipConnectRequest(client, local.get(), remote.get(), kLong, &ra)) == VIP_NO_MATCH &&
           Clock::now() < deadline) {
      ++no_match;
      std::this_thread::sleep_for(10ms);
    }
  });
  std::this_thread::sleep_for(500ms);
  NetAddress local = address(1, disc), from;
  VIP_VI_ATTRIBUTES ra{};
  VIP_CONN_HANDLE conn = nullptr;
  ASSERT_EQ(VipConnectWait(b_.nic, local.get(), kLong, from.get(), &ra, &conn), VIP_SUCCESS);
  EXPECT_EQ(VipConnectAccept(conn, server), VIP_SUCCESS);
  cli.join();
  EXPECT_EQ(request, VIP_SUCCESS);
  EXPECT_GT(no_match, 0) << "the client asked before the server waited";
  EXPECT_EQ(state(client), VIP_STATE_CONNECTED);
}

TEST_F(Conn, APeerToPeerRequestStillWaitsForItsPeer) {
  VIP_VI_HANDLE va = vi(a_), vb = vi(b_);
  std::string disc = fresh_discriminator("p2p");
  NetAddress la = address(0, disc), lb = address(1, disc);
  // Alone: no VIP_NO_MATCH, it waits out its timeout.
  auto start = Clock::now();
  ASSERT_EQ(VipConnectPeerRequest(va, la.get(), lb.get(), 1000), VIP_SUCCESS);
  VIP_VI_ATTRIBUTES ra{};
  EXPECT_EQ(VipConnectPeerWait(va, &ra), VIP_TIMEOUT);
  EXPECT_GE(Clock::now() - start, 900ms);
  // With its peer asking half a second later: connected.
  ASSERT_EQ(VipConnectPeerRequest(va, la.get(), lb.get(), kLong), VIP_SUCCESS);
  std::this_thread::sleep_for(500ms);
  ASSERT_EQ(VipConnectPeerRequest(vb, lb.get(), la.get(), kLong), VIP_SUCCESS);
  EXPECT_EQ(VipConnectPeerWait(va, &ra), VIP_SUCCESS);
  EXPECT_EQ(VipConnectPeerWait(vb, &ra), VIP_SUCCESS);
}

TEST_F(Conn, AnOrderlyDisconnectByThePeerIsNotPrinted) {
  handler(b_);  // a_ keeps the default handler
  VIP_VI_HANDLE va = vi(a_), vb = vi(b_);
  connect(va, 0, b_, vb, 1);
  StderrCapture err;
  ASSERT_EQ(VipDisconnect(vb), VIP_SUCCESS);
  EXPECT_TRUE(await_state(va, VIP_STATE_ERROR));  // a_ took the event in
  EXPECT_EQ(VipDisconnect(va), VIP_SUCCESS);
  EXPECT_EQ(err.text(), "");
}

TEST_F(Conn, AHandlerStillGetsConnLostForAnOrderlyDisconnect) {
  handler(a_);
  handler(b_);
  VIP_VI_HANDLE va = vi(a_), vb = vi(b_);
  connect(va, 0, b_, vb, 1);
  ASSERT_EQ(VipDisconnect(vb), VIP_SUCCESS);
  EXPECT_TRUE(await_state(va, VIP_STATE_ERROR));
  ASSERT_EQ(a_.errors.size(), 1u);
  EXPECT_EQ(a_.errors[0].ErrorCode, VIP_ERROR_CONN_LOST);
  EXPECT_EQ(a_.errors[0].ResourceCode, VIP_RESOURCE_VI);
  EXPECT_EQ(a_.errors[0].ViHandle, va);
  EXPECT_EQ(a_.errors[0].NicHandle, a_.nic);
  EXPECT_TRUE(b_.errors.empty());
}

TEST_F(Conn, ClosingTheNicWithAConnectedViIsAnOrderlyDisconnectToo) {
  VIP_NIC_HANDLE other = nullptr;
  ASSERT_EQ(open_nic("nic1", &other), VIP_SUCCESS);
  Side c;
  c.nic = other;
  ASSERT_EQ(VipCreatePtag(c.nic, &c.ptag), VIP_SUCCESS);
  VIP_VI_HANDLE va = vi(a_), vc = vi(c);
  connect(va, 0, c, vc, 1);
  StderrCapture err;
  ASSERT_EQ(VipCloseNic(other), VIP_SUCCESS);  // without VipDisconnect first
  EXPECT_TRUE(await_state(va, VIP_STATE_ERROR));
  EXPECT_EQ(err.text(), "");
}

TEST_F(Conn, AConnectionBrokenByAnErrorIsStillPrinted) {
  handler(b_);
  VIP_VI_HANDLE va = vi(a_), vb = vi(b_);
  connect(va, 0, b_, vb, 1);
  // b_ posts a send with a bad format on its reliable VI: the connection
  // breaks at both ends, and that is no orderly disconnect.
  void* mem = nullptr;
  ASSERT_EQ(posix_memalign(&mem, 4096, 4096), 0);
  std::memset(mem, 0, 4096);
  VIP_MEM_ATTRIBUTES m{b_.ptag, VIP_FALSE, VIP_FALSE};
  VIP_MEM_HANDLE h = 0;
  ASSERT_EQ(VipRegisterMem(b_.nic, mem, 4096, &m, &h), VIP_SUCCESS);
  auto* d = static_cast<VIP_DESCRIPTOR*>(mem);
  d->CS.SegCount = 40;  // more than MaxSegmentsPerDesc: a format error
  StderrCapture err;
  ASSERT_EQ(VipPostSend(vb, d, h), VIP_SUCCESS);
  VIP_DESCRIPTOR* done = nullptr;
  EXPECT_EQ(VipSendWait(vb, kLong, &done), VIP_SUCCESS);
  EXPECT_TRUE(await_state(va, VIP_STATE_ERROR));
  const std::string text = err.text();
  EXPECT_NE(text.find("vipl: asynchronous error 1 on resource"), std::string::npos) << text;
  EXPECT_EQ(VipDisconnect(vb), VIP_SUCCESS);
  EXPECT_EQ(VipDeregisterMem(b_.nic, mem, h), VIP_SUCCESS);
  std::free(mem);
}

}  // namespace

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
