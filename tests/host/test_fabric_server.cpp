// Unit tests for the fabric (ivshmem) server, emulator/fabric/fabric_server.*.
// The server runs on a thread; the tests are its clients on UNIX sockets and
// check the ivshmem client-server protocol (QEMU docs/specs/ivshmem-spec.txt):
// 8-byte little-endian messages, some carrying one fd by SCM_RIGHTS.
#include <gtest/gtest.h>
#include <poll.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "fabric/fabric_server.h"
#include "ulnic/abi/sram.h"
#include "ulnic/util/fd.h"
#include "ulnic/util/unix_socket.h"

using ulnic::UniqueFd;
using ulnic::fabric::Options;
using ulnic::fabric::Paths;
using ulnic::fabric::Server;

namespace {

constexpr int kGuardMs = 5000;  // failure guard only
constexpr uint64_t kSize = 1ull << 20;
constexpr uint32_t kVectors = 2;
constexpr uint32_t kNodes = 4;
constexpr int64_t kFirstHostId = ulnic::fabric::kAnonymousIdBase;

std::string make_temp_dir() {
  char tmpl[] = "/tmp/ulnic-fabric-XXXXXX";
  const char* d = ::mkdtemp(tmpl);
  EXPECT_NE(d, nullptr);
  return d ? d : "/tmp";
}

bool exists(const std::string& p) {
  struct stat st {};
  return ::lstat(p.c_str(), &st) == 0;
}

bool is_eventfd(int fd) {
  char target[128] = {};
  std::string link = "/proc/self/fd/" + std::to_string(fd);
  ssize_t n = ::readlink(link.c_str(), target, sizeof target - 1);
  return n > 0 && std::string(target, size_t(n)) == "anon_inode:[eventfd]";
}

bool readable(int fd, int timeout_ms) {
  pollfd p{fd, POLLIN, 0};
  return ::poll(&p, 1, timeout_ms) > 0 && (p.revents & POLLIN);
}

struct Msg {
  int64_t value = 0;
  UniqueFd fd;   // the fd that came with it, if any
  int nfds = 0;  // how many fds came with it
};

enum class Got { kMsg, kEof, kTimeout };

// Reads exactly one 8-byte message.
Got recv_msg(int sock, Msg& out, int timeout_ms = kGuardMs) {
  if (!readable(sock, timeout_ms)) {
    pollfd p{sock, POLLIN, 0};
    if (::poll(&p, 1, 0) > 0 && (p.revents & POLLHUP)) return Got::kEof;
    return Got::kTimeout;
  }
  unsigned char buf[8];
  size_t have = 0;
  out = Msg{};
  while (have < sizeof buf) {
    iovec iov{buf + have, sizeof buf - have};
    alignas(cmsghdr) char control[CMSG_SPACE(4 * sizeof(int))];
    msghdr m{};
    m.msg_iov = &iov;
    m.msg_iovlen = 1;
    m.msg_control = control;
    m.msg_controllen = sizeof control;
    ssize_t n = ::recvmsg(sock, &m, MSG_CMSG_CLOEXEC);
    if (n <= 0) return have == 0 ? Got::kEof : Got::kTimeout;
    for (cmsghdr* c = CMSG_FIRSTHDR(&m); c; c = CMSG_NXTHDR(&m, c)) {
      if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
      size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      for (size_t i = 0; i < count; ++i) {
        int fd;
        std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof fd);
        if (out.nfds++ == 0) out.fd.reset(fd);
        else ::close(fd);
      }
    }
    have += size_t(n);
  }
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | buf[i];  // little-endian on the wire
  out.value = int64_t(v);
  return Got::kMsg;
}

// One ivshmem client as QEMU would be.
struct Client {
  UniqueFd sock;
  int64_t id = -1;
  UniqueFd mem;
  std::vector<UniqueFd> own;                        // ours: readable when rung
  std::map<int64_t, std::vector<UniqueFd>> peers;   // theirs: write to ring
  std::vector<int64_t> greeting_peers;              // peers in greeting order
};

// Reads the greeting on a connected socket, checking it message by message.
std::optional<Client> greet(UniqueFd sock, const std::string& path) {
  auto bad = [&](const char* what) {
    ADD_FAILURE() << what << " on " << path;
    return std::optional<Client>();
  };
  Client c;
  c.sock = std::move(sock);
  Msg m;
  // 1. protocol version 0, no fd
  if (recv_msg(c.sock.get(), m) != Got::kMsg) return bad("no version");
  EXPECT_EQ(m.value, 0);
  EXPECT_EQ(m.nfds, 0);
  // 2. our id, no fd
  if (recv_msg(c.sock.get(), m) != Got::kMsg) return bad("no id");
  EXPECT_EQ(m.nfds, 0);
  EXPECT_GE(m.value, 0);
  EXPECT_LE(m.value, 65535);
  c.id = m.value;
  // 3. -1 with the shared memory
  if (recv_msg(c.sock.get(), m) != Got::kMsg) return bad("no memory");
  EXPECT_EQ(m.value, -1);
  EXPECT_EQ(m.nfds, 1);
  c.mem = std::move(m.fd);
  // 4. `vectors` messages per existing peer, 5. then `vectors` of our own id.
  while (c.own.size() < kVectors) {
    if (recv_msg(c.sock.get(), m) != Got::kMsg) return bad("greeting cut short");
    EXPECT_EQ(m.nfds, 1) << "peer " << m.value << " announced without an eventfd";
    if (m.nfds != 1) continue;
    EXPECT_TRUE(is_eventfd(m.fd.get())) << "peer " << m.value;
    if (m.value == c.id) {
      c.own.push_back(std::move(m.fd));
      continue;
    }
    EXPECT_TRUE(c.own.empty()) << "peer " << m.value << " announced amid our own vectors";
    auto& v = c.peers[m.value];
    if (v.empty()) c.greeting_peers.push_back(m.value);
    else EXPECT_EQ(c.greeting_peers.back(), m.value) << "peer " << m.value << "'s vectors are not contiguous";
    v.push_back(std::move(m.fd));
  }
  for (auto& [id, fds] : c.peers) EXPECT_EQ(fds.size(), kVectors) << "peer " << id;
  return c;
}

// Connects to `path` and reads the greeting.
std::optional<Client> join(const std::string& path) {
  auto s = ulnic::connect_unix(path);
  if (!s) {
    ADD_FAILURE() << s.error().message;
    return std::nullopt;
  }
  return greet(std::move(*s), path);
}

// True if the server closed `sock` without a word (a refused connection).
bool refused(int sock) {
  char b;
  return readable(sock, kGuardMs) && ::recv(sock, &b, 1, MSG_PEEK | MSG_DONTWAIT) == 0;
}

// Reads the announcement of a newcomer `id`: `vectors` messages with an fd.
void expect_arrival(Client& c, int64_t id) {
  auto& fds = c.peers[id];
  fds.clear();
  for (uint32_t v = 0; v < kVectors; ++v) {
    Msg m;
    ASSERT_EQ(recv_msg(c.sock.get(), m), Got::kMsg) << "client " << c.id << " not told about " << id;
    EXPECT_EQ(m.value, id);
    ASSERT_EQ(m.nfds, 1) << "client " << c.id << ": arrival of " << m.value << " without an fd";
    EXPECT_TRUE(is_eventfd(m.fd.get()));
    fds.push_back(std::move(m.fd));
  }
}

// Reads the announcement that `id` left: its id without an fd.
void expect_departure(Client& c, int64_t id) {
  Msg m;
  ASSERT_EQ(recv_msg(c.sock.get(), m), Got::kMsg) << "client " << c.id << " not told that " << id << " left";
  EXPECT_EQ(m.value, id);
  EXPECT_EQ(m.nfds, 0);
  c.peers.erase(id);
}

void ring(int eventfd) {
  uint64_t one = 1;
  ASSERT_EQ(::write(eventfd, &one, sizeof one), ssize_t(sizeof one));
}

class FabricServer : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = make_temp_dir();
    opts_.dir = dir_;
    opts_.size = kSize;
    opts_.vectors = kVectors;
    opts_.max_nodes = kNodes;
    auto r = server_.init(opts_);
    ASSERT_TRUE(r) << r.error().message;
    thread_ = std::thread([this] { run_result_ = server_.run(&stop_); });
  }
  void TearDown() override {
    stop_server();
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  void stop_server() {
    if (!thread_.joinable()) return;
    stop_ = true;
    server_.wake();
    thread_.join();
  }
  std::string nic(uint32_t k) const { return Paths::nic_socket(dir_, k); }
  std::string host() const { return Paths::host_socket(dir_); }

  std::string dir_;
  Options opts_;
  Server server_;
  std::thread thread_;
  std::atomic<bool> stop_{false};
  ulnic::Result<void> run_result_;
};

}  // namespace

// ------------------------------------------------------------------- init

TEST(FabricServerInit, RejectsSizesThatAreNotAPowerOfTwo) {
  std::string dir = make_temp_dir();
  for (uint64_t size : std::vector<uint64_t>{0, 3ull << 20, (1ull << 20) + 4096}) {
    Server s;
    auto r = s.init(Options{dir, size, 2, 4});
    ASSERT_FALSE(r) << size;
    EXPECT_NE(r.error().message.find("power of two"), std::string::npos) << r.error().message;
  }
  EXPECT_FALSE(exists(Paths::nic_socket(dir, 0)));
  std::filesystem::remove_all(dir);
}

TEST(FabricServerInit, RejectsZeroVectors) {
  std::string dir = make_temp_dir();
  Server s;
  auto r = s.init(Options{dir, kSize, 0, 4});
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("vectors"), std::string::npos) << r.error().message;
  std::filesystem::remove_all(dir);
}

TEST(FabricServerInit, RejectsMoreThan64Vectors) {
  std::string dir = make_temp_dir();
  Server s;
  EXPECT_FALSE(s.init(Options{dir, kSize, 65, 4}));
  std::filesystem::remove_all(dir);
}

TEST(FabricServerInit, RejectsMoreNodesThanTheAbiAllows) {
  std::string dir = make_temp_dir();
  Server s;
  EXPECT_FALSE(s.init(Options{dir, kSize, 2, ulnic::abi::kMaxNodes + 1}));
  std::filesystem::remove_all(dir);
}

TEST_F(FabricServer, InitCreatesMemorySocketsAndPidFile) {
  struct stat st {};
  ASSERT_EQ(::stat(Paths::memory(dir_).c_str(), &st), 0);
  EXPECT_EQ(uint64_t(st.st_size), kSize);
  for (uint32_t k = 0; k < kNodes; ++k) EXPECT_TRUE(exists(nic(k))) << nic(k);
  EXPECT_FALSE(exists(nic(kNodes)));  // only max_nodes listeners
  EXPECT_TRUE(exists(host()));
  std::ifstream pid(Paths::pid_file(dir_));
  long p = 0;
  EXPECT_TRUE(pid >> p);
  EXPECT_EQ(p, long(::getpid()));
}

// --------------------------------------------------------------- greeting

TEST_F(FabricServer, GreetingOfTheFirstClientFollowsTheProtocol) {
  auto c = join(nic(2));
  ASSERT_TRUE(c);
  EXPECT_EQ(c->id, 2);
  EXPECT_TRUE(c->peers.empty());
  EXPECT_EQ(c->own.size(), kVectors);
  EXPECT_FALSE(readable(c->sock.get(), 0)) << "unexpected message after the greeting";
}

TEST_F(FabricServer, SharedMemoryFdHasTheConfiguredSize) {
  auto c = join(nic(0));
  ASSERT_TRUE(c);
  struct stat st {};
  ASSERT_EQ(::fstat(c->mem.get(), &st), 0);
  EXPECT_EQ(uint64_t(st.st_size), kSize);
}

TEST_F(FabricServer, SharedMemoryIsSharedBetweenClients) {
  auto a = join(nic(0));
  auto b = join(nic(1));
  ASSERT_TRUE(a && b);
  void* pa = ::mmap(nullptr, kSize, PROT_READ | PROT_WRITE, MAP_SHARED, a->mem.get(), 0);
  void* pb = ::mmap(nullptr, kSize, PROT_READ | PROT_WRITE, MAP_SHARED, b->mem.get(), 0);
  ASSERT_NE(pa, MAP_FAILED);
  ASSERT_NE(pb, MAP_FAILED);
  static_cast<volatile uint8_t*>(pa)[kSize - 1] = 0x5a;
  static_cast<volatile uint8_t*>(pa)[12345] = 0xa5;
  EXPECT_EQ(static_cast<volatile uint8_t*>(pb)[kSize - 1], 0x5a);
  EXPECT_EQ(static_cast<volatile uint8_t*>(pb)[12345], 0xa5);
  ::munmap(pa, kSize);
  ::munmap(pb, kSize);
}

TEST_F(FabricServer, NicClientsGetTheIdOfTheirSocketWhateverTheOrder) {
  auto c3 = join(nic(3));
  auto c1 = join(nic(1));
  ASSERT_TRUE(c3 && c1);
  EXPECT_EQ(c3->id, 3);
  EXPECT_EQ(c1->id, 1);
}

TEST_F(FabricServer, NewcomerLearnsEveryPeerThenItsOwnVectors) {
  auto c0 = join(nic(0));
  auto c2 = join(nic(2));
  auto h = join(host());
  ASSERT_TRUE(c0 && c2 && h);
  auto c1 = join(nic(1));
  ASSERT_TRUE(c1);
  EXPECT_EQ(c1->id, 1);
  std::vector<int64_t> seen = c1->greeting_peers;
  std::sort(seen.begin(), seen.end());
  EXPECT_EQ(seen, (std::vector<int64_t>{0, 2, kFirstHostId}));
  EXPECT_EQ(c1->own.size(), kVectors);
  EXPECT_FALSE(readable(c1->sock.get(), 0)) << "unexpected message after the greeting";
}

TEST_F(FabricServer, ArrivalIsAnnouncedToEarlierClients) {
  auto c0 = join(nic(0));
  auto c1 = join(nic(1));
  ASSERT_TRUE(c0 && c1);
  ASSERT_NO_FATAL_FAILURE(expect_arrival(*c0, 1));
  auto c3 = join(nic(3));
  ASSERT_TRUE(c3);
  ASSERT_NO_FATAL_FAILURE(expect_arrival(*c0, 3));
  ASSERT_NO_FATAL_FAILURE(expect_arrival(*c1, 3));
}

TEST_F(FabricServer, AnonymousDisconnectIsAnnouncedWithoutAnFd) {
  auto h1 = join(host());
  auto h2 = join(host());
  ASSERT_TRUE(h1 && h2);
  ASSERT_NO_FATAL_FAILURE(expect_arrival(*h1, h2->id));
  h2->sock.reset();
  ASSERT_NO_FATAL_FAILURE(expect_departure(*h1, h2->id));
}

// QEMU 7.2 corrupts its heap when a peer it was told had left comes back
// under the same id, so a NIC's departure is never announced: its mailbox
// (eventfds) stays valid for its next connection.
TEST_F(FabricServer, NicDisconnectIsNotAnnounced) {
  auto c0 = join(nic(0));
  auto c1 = join(nic(1));
  ASSERT_TRUE(c0 && c1);
  ASSERT_NO_FATAL_FAILURE(expect_arrival(*c0, 1));
  c1->sock.reset();
  EXPECT_FALSE(readable(c0->sock.get(), 300));
}

// ---------------------------------------------------------------- ringing

TEST_F(FabricServer, RingingAPeerVectorSignalsThatPeersOwnEventfd) {
  auto c0 = join(nic(0));
  auto c1 = join(nic(1));
  ASSERT_TRUE(c0 && c1);
  ASSERT_NO_FATAL_FAILURE(expect_arrival(*c0, 1));

  // 0 rings 1's vector 1 with the fd it was given when 1 arrived.
  ring(c0->peers[1][1].get());
  ASSERT_TRUE(readable(c1->own[1].get(), kGuardMs));
  EXPECT_FALSE(readable(c1->own[0].get(), 0)) << "the wrong vector was rung";
  uint64_t count = 0;
  ASSERT_EQ(::read(c1->own[1].get(), &count, sizeof count), ssize_t(sizeof count));
  EXPECT_EQ(count, 1u);

  // 1 rings 0's vector 0 with the fd from its greeting.
  ring(c1->peers[0][0].get());
  ASSERT_TRUE(readable(c0->own[0].get(), kGuardMs));
  EXPECT_FALSE(readable(c0->own[1].get(), 0)) << "the wrong vector was rung";
}

TEST_F(FabricServer, HostClientCanRingANic) {
  auto c0 = join(nic(0));
  auto h = join(host());
  ASSERT_TRUE(c0 && h);
  ring(h->peers[0][1].get());
  EXPECT_TRUE(readable(c0->own[1].get(), kGuardMs));
}

// ---------------------------------------------------------- wake plugins

// The wake plugin's side of wake<k>.sock (emulator/wake/wake_plugin.cpp):
// the count of the NIC's vectors, then each vector with its eventfd.
std::vector<UniqueFd> take_doorbells(UniqueFd& sock, const std::string& path) {
  auto s = ulnic::connect_unix(path);
  if (!s) {
    ADD_FAILURE() << s.error().message;
    return {};
  }
  sock = std::move(*s);
  Msg m;
  if (recv_msg(sock.get(), m) != Got::kMsg) {
    ADD_FAILURE() << "no count on " << path;
    return {};
  }
  EXPECT_EQ(m.value, int64_t(kVectors));
  EXPECT_EQ(m.nfds, 0);
  std::vector<UniqueFd> bells;
  for (uint32_t v = 0; v < kVectors; ++v) {
    if (recv_msg(sock.get(), m) != Got::kMsg) {
      ADD_FAILURE() << "vector " << v << " missing on " << path;
      return {};
    }
    EXPECT_EQ(m.value, int64_t(v));
    EXPECT_EQ(m.nfds, 1);
    EXPECT_TRUE(is_eventfd(m.fd.get()));
    bells.push_back(std::move(m.fd));
  }
  return bells;
}

TEST_F(FabricServer, AWakePluginHoldsItsNicsDoorbellsAndTheDeviceGetsUnrungOnes) {
  auto h = join(host());  // before the NIC: told of it when it arrives
  ASSERT_TRUE(h);
  UniqueFd plugin;
  auto bells = take_doorbells(plugin, Paths::wake_socket(dir_, 1));
  ASSERT_EQ(bells.size(), kVectors);
  EXPECT_FALSE(readable(h->sock.get(), 300)) << "a plugin's connection is announced to nobody";
  auto c0 = join(nic(0));
  auto c1 = join(nic(1));
  ASSERT_TRUE(c0 && c1);
  EXPECT_EQ(c0->peers.count(1), 0u) << "NIC 1's mailbox shown before NIC 1 came";
  ASSERT_NO_FATAL_FAILURE(expect_arrival(*h, 0));
  ASSERT_NO_FATAL_FAILURE(expect_arrival(*h, 1));  // once, at its arrival
  ASSERT_NO_FATAL_FAILURE(expect_arrival(*c0, 1));
  EXPECT_FALSE(readable(h->sock.get(), 300)) << "NIC 1 announced twice";
  // Whoever rings NIC 1 (a host, a peer NIC) rings the plugin's eventfd; the
  // one QEMU's device got stays quiet.
  ring(h->peers[1][1].get());
  ASSERT_TRUE(readable(bells[1].get(), kGuardMs));
  EXPECT_FALSE(readable(bells[0].get(), 0)) << "the wrong vector was rung";
  EXPECT_FALSE(readable(c1->own[1].get(), 0)) << "the device saw a doorbell meant for the plugin";
  ring(c0->peers[1][0].get());
  ASSERT_TRUE(readable(bells[0].get(), kGuardMs));
  EXPECT_FALSE(readable(c1->own[0].get(), 0));
  // NIC 0 has no plugin: its device gets its real doorbells.
  ring(c1->peers[0][0].get());
  EXPECT_TRUE(readable(c0->own[0].get(), kGuardMs));
}

TEST_F(FabricServer, ANicWhosePluginWentGetsItsRealDoorbellsAgain) {
  auto h = join(host());
  ASSERT_TRUE(h);
  {
    UniqueFd plugin;
    ASSERT_EQ(take_doorbells(plugin, Paths::wake_socket(dir_, 2)).size(), kVectors);
  }  // its QEMU went before the NIC connected (or was restarted without it)
  auto c2 = join(nic(2));
  ASSERT_TRUE(c2);
  ASSERT_NO_FATAL_FAILURE(expect_arrival(*h, 2));
  ring(h->peers[2][1].get());
  EXPECT_TRUE(readable(c2->own[1].get(), kGuardMs));
}

// ------------------------------------------------------------- occupancy

TEST_F(FabricServer, SecondConnectionOnAnOccupiedNicSocketIsClosed) {
  auto c0 = join(nic(0));
  ASSERT_TRUE(c0);
  auto dup = ulnic::connect_unix(nic(0));
  ASSERT_TRUE(dup) << dup.error().message;
  Msg m;
  EXPECT_EQ(recv_msg(dup->get(), m), Got::kEof) << "the intruder got message " << m.value;

  // The first connection keeps working: nothing was said about the intruder,
  // and the next event it hears of is a real arrival.
  auto c1 = join(nic(1));
  ASSERT_TRUE(c1);
  EXPECT_EQ(c1->greeting_peers, (std::vector<int64_t>{0}));
  ASSERT_NO_FATAL_FAILURE(expect_arrival(*c0, 1));
  ring(c1->peers[0][0].get());
  EXPECT_TRUE(readable(c0->own[0].get(), kGuardMs));
}

TEST_F(FabricServer, AReconnectingNicKeepsItsMailbox) {
  auto c0 = join(nic(0));
  auto c1 = join(nic(1));
  ASSERT_TRUE(c0 && c1);
  ASSERT_NO_FATAL_FAILURE(expect_arrival(*c0, 1));
  c1.reset();
  std::optional<Client> again;
  for (int i = 0; i < 100 && !again; ++i) {  // until the server saw the hang-up
    auto s = ulnic::connect_unix(nic(1));
    ASSERT_TRUE(s);
    if (!refused(s->get())) again = greet(std::move(*s), nic(1));
  }
  ASSERT_TRUE(again);
  EXPECT_EQ(again->id, 1);
  EXPECT_FALSE(readable(c0->sock.get(), 300)) << "NIC 0 must not be told anything";
  ring(c0->peers[1][0].get());  // the fd NIC 0 got at the first arrival still works
  EXPECT_TRUE(readable(again->own[0].get(), kGuardMs));
  EXPECT_EQ(again->greeting_peers, (std::vector<int64_t>{0}));
}

TEST_F(FabricServer, HostClientsGetIdsFromMaxNodesUp) {
  auto h1 = join(host());
  auto h2 = join(host());
  auto h3 = join(host());
  ASSERT_TRUE(h1 && h2 && h3);
  EXPECT_EQ(h1->id, kFirstHostId);
  EXPECT_EQ(h2->id, kFirstHostId + 1);
  EXPECT_EQ(h3->id, kFirstHostId + 2);
}

TEST_F(FabricServer, AnonymousIdsAreNeverReused) {
  auto h1 = join(host());
  auto h2 = join(host());
  ASSERT_TRUE(h1 && h2);
  ASSERT_NO_FATAL_FAILURE(expect_arrival(*h1, kFirstHostId + 1));
  h1.reset();
  ASSERT_NO_FATAL_FAILURE(expect_departure(*h2, kFirstHostId));  // the server has dropped it
  auto h3 = join(host());
  ASSERT_TRUE(h3);
  EXPECT_EQ(h3->id, kFirstHostId + 2);
  EXPECT_EQ(h3->greeting_peers, (std::vector<int64_t>{kFirstHostId + 1}));
}

// A restarted NIC may connect before the server has seen its old connection
// close (listeners and hang-ups arrive in one poll pass). The id must not be
// refused while its holder has in fact hung up.
TEST_F(FabricServer, NicReconnectingRightAfterItsDisconnectIsAccepted) {
  auto watcher = join(nic(0));
  auto c = join(nic(1));
  ASSERT_TRUE(watcher && c);
  ASSERT_NO_FATAL_FAILURE(expect_arrival(*watcher, 1));
  int refusals = 0;
  for (int i = 0; i < 200; ++i) {
    c.reset();                               // the old QEMU goes away ...
    auto s = ulnic::connect_unix(nic(1));    // ... and the new one connects at once
    ASSERT_TRUE(s) << s.error().message;
    if (refused(s->get())) {
      ++refusals;
      c = join(nic(1));  // the holder is dropped now: a retry gets in
    } else {
      c = greet(std::move(*s), nic(1));
    }
    ASSERT_TRUE(c);
  }
  EXPECT_EQ(refusals, 0) << "of 200 immediate reconnections were refused";
  EXPECT_FALSE(readable(watcher->sock.get(), 200));  // restarts are silent
  ring(watcher->peers[1][kVectors - 1].get());
  EXPECT_TRUE(readable(c->own[kVectors - 1].get(), kGuardMs));
}

// A client that stops reading its socket (a stuck host process, a wedged
// QEMU) fills its socket buffer. The server must not block in sendmsg on it:
// it drops that client (telling the others it left) and keeps serving.
TEST_F(FabricServer, ClientThatStopsReadingDoesNotStallTheOthers) {
  auto lazy = join(host());  // never reads again
  auto watcher = join(nic(0));
  ASSERT_TRUE(lazy && watcher);
  const int64_t lazy_id = lazy->id;
  bool lazy_dropped = false;
  // Fresh anonymous peers come and go; each is announced to the lazy client
  // too, until its socket is full. A blocking server stalled after ~90.
  for (int i = 0; i < 500; ++i) {
    auto s = ulnic::connect_unix(host());
    ASSERT_TRUE(s) << s.error().message;
    Msg m;
    int64_t me = -1;
    int got_own = 0, msgs = 0;
    Got g = Got::kMsg;
    while (got_own < int(kVectors) && (g = recv_msg(s->get(), m)) == Got::kMsg) {
      if (++msgs == 2) me = m.value;
      if (msgs > 3 && m.value == me && m.nfds == 1) ++got_own;
    }
    ASSERT_EQ(g, Got::kMsg) << "server stopped serving after " << i << " joins while one client did not read";
    auto next = [&](Msg& w) {
      Got got;
      while ((got = recv_msg(watcher->sock.get(), w)) == Got::kMsg && w.value == lazy_id && w.nfds == 0)
        lazy_dropped = true;
      return got;
    };
    Msg w;
    for (uint32_t v = 0; v < kVectors; ++v) {
      ASSERT_EQ(next(w), Got::kMsg);
      EXPECT_EQ(w.value, me);
      EXPECT_EQ(w.nfds, 1);
    }
    s->reset();
    ASSERT_EQ(next(w), Got::kMsg);
    EXPECT_EQ(w.value, me);
    EXPECT_EQ(w.nfds, 0);
  }
  EXPECT_TRUE(lazy_dropped);
}

// ------------------------------------------------------------------- stop

TEST_F(FabricServer, StopRemovesSocketsAndPidFile) {
  auto c0 = join(nic(0));
  ASSERT_TRUE(c0);
  stop_server();
  EXPECT_TRUE(run_result_) << run_result_.error().message;
  for (uint32_t k = 0; k < kNodes; ++k) EXPECT_FALSE(exists(nic(k))) << nic(k);
  EXPECT_FALSE(exists(host()));
  EXPECT_FALSE(exists(Paths::pid_file(dir_)));
}

// ------------------------------------------------------------------ topology

namespace {

// Reads one greeting without judging it: how many eventfds came per peer id.
std::map<int64_t, uint32_t> greeting_counts(int sock, int64_t& self) {
  std::map<int64_t, uint32_t> counts;
  Msg m;
  EXPECT_EQ(recv_msg(sock, m), Got::kMsg);  // version
  EXPECT_EQ(recv_msg(sock, m), Got::kMsg);  // id
  self = m.value;
  EXPECT_EQ(recv_msg(sock, m), Got::kMsg);  // memory
  while (counts[self] < kVectors && recv_msg(sock, m) == Got::kMsg) counts[m.value] += m.nfds;
  return counts;
}

// Nothing more arrives on `sock` for a while (the server sends in bursts).
bool quiet(int sock) { return !readable(sock, 200); }

class FabricTopology : public FabricServer {
 protected:
  void SetUp() override {
    opts_.nic_peer_vectors = 1;
    FabricServer::SetUp();
  }
  std::string daemon(uint32_t k) const { return Paths::daemon_socket(dir_, k); }
  UniqueFd connect(const std::string& path) {
    auto s = ulnic::connect_unix(path);
    EXPECT_TRUE(s) << s.error().message;
    return s ? std::move(*s) : UniqueFd();
  }
};

}  // namespace

TEST_F(FabricTopology, NicsAreGivenOnlyEachOthersFabricVector) {
  int64_t id0, id1;
  UniqueFd n0 = connect(nic(0));
  greeting_counts(n0.get(), id0);
  UniqueFd n1 = connect(nic(1));
  auto c1 = greeting_counts(n1.get(), id1);
  EXPECT_EQ(id1, 1);
  EXPECT_EQ(c1[0], 1u);  // NIC 0's vector 0 only
  Msg m;
  ASSERT_EQ(recv_msg(n0.get(), m), Got::kMsg);
  EXPECT_EQ(m.value, 1);
  EXPECT_EQ(m.nfds, 1);
  EXPECT_TRUE(quiet(n0.get()));  // not the other vectors
}

TEST_F(FabricTopology, ADaemonAndItsNicShareEverythingAndNobodyElseSeesIt) {
  int64_t id;
  UniqueFd n0 = connect(nic(0));
  greeting_counts(n0.get(), id);
  UniqueFd n1 = connect(nic(1));
  greeting_counts(n1.get(), id);
  Msg m;
  ASSERT_EQ(recv_msg(n0.get(), m), Got::kMsg);  // NIC 0 hears of NIC 1
  UniqueFd d0 = connect(daemon(0));
  auto c = greeting_counts(d0.get(), id);
  EXPECT_EQ(id, ulnic::fabric::kDaemonIdBase);
  EXPECT_EQ(c[0], kVectors);  // all of its NIC's vectors
  EXPECT_EQ(c.count(1), 0u);  // nothing of the other NIC
  uint32_t told = 0;
  while (told < kVectors && recv_msg(n0.get(), m) == Got::kMsg) told += m.value == id && m.nfds == 1;
  EXPECT_EQ(told, kVectors);  // NIC 0 can ring every vector of its daemon
  EXPECT_TRUE(quiet(n1.get()));  // NIC 1 is not told about daemon 0
  d0.reset();  // a daemon's departure is not announced (its mailbox persists)
  EXPECT_TRUE(quiet(n0.get()));
  EXPECT_TRUE(quiet(n1.get()));
}

TEST_F(FabricTopology, DaemonIdsAreFixedByNode) {
  int64_t id;
  UniqueFd d1 = connect(daemon(1));
  greeting_counts(d1.get(), id);
  EXPECT_EQ(id, ulnic::fabric::kDaemonIdBase + 1);
}
