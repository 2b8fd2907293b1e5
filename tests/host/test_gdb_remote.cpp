// Unit tests for the GDB remote-protocol client (emulator/board/gdb_remote.*)
// against a fake gdbstub served on a UNIX socket by a std::thread.
#include <gtest/gtest.h>

#include "test_support.h"
#include <poll.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "board/gdb_remote.h"
#include "ulnic/util/unix_socket.h"

using namespace std::chrono_literals;
using ulnic::board::GdbRemote;

namespace {

constexpr int kGuardMs = 5000;  // failure guard only

using ulnic_test::SleepingProcess;
using ulnic_test::TempDir;

// Computed here independently of GdbRemote::frame.
std::string checksum_hex(const std::string& payload) {
  unsigned sum = 0;
  for (unsigned char c : payload) sum = (sum + c) % 256;
  char cs[3];
  std::snprintf(cs, sizeof cs, "%02x", sum);
  return cs;
}
std::string packet(const std::string& payload) { return "$" + payload + "#" + checksum_hex(payload); }

struct Action {
  std::string bytes;   // sent as is after the packet was read
  bool close = false;  // then hang up
};
// The usual answer: ack, then the reply packet.
Action reply(const std::string& payload) { return {"+" + packet(payload)}; }

struct Received {
  std::string payload;
  bool checksum_ok;
};

// A fake QEMU gdbstub: accepts one client; for every packet it reads it asks
// `handler` what to send back (nullopt: stay silent).
class FakeStub {
 public:
  using Handler = std::function<std::optional<Action>(const std::string& payload)>;
  FakeStub(const std::string& path, Handler handler) {
    auto l = ulnic::listen_unix(path);
    if (!l) {
      ADD_FAILURE() << l.error().message;
      return;
    }
    listener_ = std::move(*l);
    thread_ = std::thread([this, handler = std::move(handler)] { serve(handler); });
  }
  ~FakeStub() { join(); }
  // Waits for the client to hang up (destroy or detach it first).
  void join() {
    if (thread_.joinable()) thread_.join();
  }
  std::vector<Received> packets;  // read these after join()
  int acks = 0;                   // '+' bytes the client sent

  // The default stub: PacketSize=1000 (hex, i.e. 4096), M and D answered OK.
  static std::optional<Action> qemu_like(const std::string& p) {
    if (p.rfind("qSupported", 0) == 0) return reply("PacketSize=1000;qXfer:features:read+;multiprocess+");
    if (p.rfind("M", 0) == 0 || p == "D") return reply("OK");
    return reply("");
  }

 private:
  int getc(int fd) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, kGuardMs) <= 0) return -1;
    unsigned char c;
    if (::recv(fd, &c, 1, 0) != 1) return -1;
    return c;
  }
  void serve(const Handler& handler) {
    pollfd p{listener_.get(), POLLIN, 0};
    if (::poll(&p, 1, kGuardMs) <= 0) return;
    ulnic::UniqueFd s(::accept(listener_.get(), nullptr, nullptr));
    if (!s) return;
    for (;;) {
      int c = getc(s.get());
      if (c < 0) return;
      if (c == '+') {
        ++acks;
        continue;
      }
      if (c != '$') continue;
      std::string payload;
      while ((c = getc(s.get())) >= 0 && c != '#') payload += char(c);
      std::string cs;
      for (int i = 0; i < 2 && c >= 0; ++i)
        if ((c = getc(s.get())) >= 0) cs += char(c);
      if (c < 0) return;
      packets.push_back({payload, cs == checksum_hex(payload)});
      auto a = handler(payload);
      if (!a) continue;
      if (!a->bytes.empty()) ::send(s.get(), a->bytes.data(), a->bytes.size(), MSG_NOSIGNAL);
      if (a->close) return;
    }
  }
  ulnic::UniqueFd listener_;
  std::thread thread_;
};

struct MPacket {
  uint64_t addr;
  size_t len;
  std::vector<uint8_t> bytes;
};

// Parses "M<addr>,<len>:<hex>" strictly (hex digits only, no 0x).
std::optional<MPacket> parse_m(const std::string& p) {
  auto is_hex = [](const std::string& s) {
    return !s.empty() && s.find_first_not_of("0123456789abcdefABCDEF") == std::string::npos;
  };
  if (p.empty() || p[0] != 'M') return std::nullopt;
  size_t comma = p.find(','), colon = p.find(':');
  if (comma == std::string::npos || colon == std::string::npos || colon < comma) return std::nullopt;
  std::string a = p.substr(1, comma - 1), l = p.substr(comma + 1, colon - comma - 1), h = p.substr(colon + 1);
  if (!is_hex(a) || !is_hex(l) || (!h.empty() && !is_hex(h)) || h.size() % 2) return std::nullopt;
  MPacket m{std::stoull(a, nullptr, 16), std::stoul(l, nullptr, 16), {}};
  for (size_t i = 0; i < h.size(); i += 2) m.bytes.push_back(uint8_t(std::stoul(h.substr(i, 2), nullptr, 16)));
  return m;
}

std::vector<uint8_t> pattern(size_t n) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = uint8_t(i * 7 + i / 251 + 3);
  return v;
}

// Checks that the M packets cover `data` at `addr` exactly, contiguously, in
// order, each payload at most `max_packet` bytes; returns how many there were.
size_t expect_m_packets_cover(const std::vector<Received>& packets, uint64_t addr, const std::vector<uint8_t>& data,
                              size_t max_packet) {
  uint64_t next = addr;
  std::vector<uint8_t> got;
  size_t count = 0;
  for (const auto& r : packets) {
    if (r.payload.empty() || r.payload[0] != 'M') continue;
    ++count;
    EXPECT_TRUE(r.checksum_ok) << r.payload.substr(0, 40);
    EXPECT_LE(r.payload.size(), max_packet) << "packet " << count << " exceeds the announced PacketSize";
    auto m = parse_m(r.payload);
    if (!m) {
      ADD_FAILURE() << "malformed M packet: " << r.payload.substr(0, 40);
      continue;
    }
    EXPECT_EQ(m->addr, next) << "packet " << count;
    EXPECT_EQ(m->len, m->bytes.size()) << "packet " << count;
    EXPECT_GT(m->len, 0u);
    next = m->addr + m->bytes.size();
    got.insert(got.end(), m->bytes.begin(), m->bytes.end());
  }
  EXPECT_EQ(got.size(), data.size());
  EXPECT_TRUE(got == data) << "bytes written differ from the data";
  return count;
}

}  // namespace

// ------------------------------------------------------------------ frame

TEST(GdbRemoteFrame, ChecksumIsTheSumOfPayloadBytesModulo256InLowercaseHex) {
  EXPECT_EQ(GdbRemote::frame("OK"), "$OK#9a");
  // q(71)+S(53)+u(75)+p(70)+p(70)+o(6f)+r(72)+t(74)+e(65)+d(64) = 0x437
  EXPECT_EQ(GdbRemote::frame("qSupported"), "$qSupported#37");
  EXPECT_EQ(GdbRemote::frame("D"), "$D#44");
  EXPECT_EQ(GdbRemote::frame("E14"), "$E14#aa");
}

TEST(GdbRemoteFrame, EmptyPayloadHasChecksumZero) { EXPECT_EQ(GdbRemote::frame(""), "$#00"); }

TEST(GdbRemoteFrame, ChecksumWrapsAndKeepsTwoDigits) {
  EXPECT_EQ(GdbRemote::frame("zzz"), "$zzz#6e");              // 3 * 0x7a = 0x16e
  EXPECT_EQ(GdbRemote::frame(std::string(256, 'A')), "$" + std::string(256, 'A') + "#00");  // 256 * 0x41
  EXPECT_EQ(GdbRemote::frame("\x01"), "$\x01#01");
}

TEST(GdbRemoteFrame, HighBytesCountAsUnsigned) {
  EXPECT_EQ(GdbRemote::frame("\xff"), "$\xff#ff");
  EXPECT_EQ(GdbRemote::frame("\xff\x02"), "$\xff\x02#01");
}

// ---------------------------------------------------------------- connect

TEST(GdbRemote, ConnectSendsQSupportedWithAValidChecksum) {
  TempDir dir;
  FakeStub stub(dir.file("gdb.sock"), FakeStub::qemu_like);
  {
    auto g = GdbRemote::connect(dir.file("gdb.sock"), 5000ms);
    ASSERT_TRUE(g) << g.error().message;
  }
  stub.join();
  ASSERT_EQ(stub.packets.size(), 1u);
  EXPECT_EQ(stub.packets[0].payload, "qSupported");
  EXPECT_TRUE(stub.packets[0].checksum_ok);
  EXPECT_EQ(stub.acks, 1);  // the reply was acknowledged
}

TEST(GdbRemote, ConnectToAMissingSocketFails) {
  TempDir dir;
  auto g = GdbRemote::connect(dir.file("none.sock"), 200ms);
  ASSERT_FALSE(g);
  EXPECT_NE(g.error().message.find("gdbstub"), std::string::npos) << g.error().message;
  EXPECT_NE(g.error().message.find(dir.file("none.sock")), std::string::npos) << g.error().message;
}

TEST(GdbRemote, SilentStubFailsConnectSuggestingAnAttachedDebugger) {
  TempDir dir;
  FakeStub stub(dir.file("gdb.sock"), [](const std::string&) -> std::optional<Action> { return std::nullopt; });
  auto t0 = std::chrono::steady_clock::now();
  auto g = GdbRemote::connect(dir.file("gdb.sock"), 200ms);
  EXPECT_GE(std::chrono::steady_clock::now() - t0, 200ms);
  ASSERT_FALSE(g);
  EXPECT_NE(g.error().message.find("debugger"), std::string::npos) << g.error().message;
  EXPECT_NE(g.error().message.find("attached"), std::string::npos) << g.error().message;
  EXPECT_NE(g.error().message.find("timed out after 200 ms"), std::string::npos) << g.error().message;
}

TEST(GdbRemote, NakFromStubFailsConnect) {
  TempDir dir;
  FakeStub stub(dir.file("gdb.sock"), [](const std::string&) { return std::optional<Action>(Action{"-"}); });
  auto g = GdbRemote::connect(dir.file("gdb.sock"), 2000ms);
  ASSERT_FALSE(g);
  EXPECT_NE(g.error().message.find("checksum"), std::string::npos) << g.error().message;
}

TEST(GdbRemote, NoiseBeforeTheReplyIsIgnored) {
  TempDir dir;
  FakeStub stub(dir.file("gdb.sock"), [](const std::string& p) -> std::optional<Action> {
    if (p == "qSupported") return Action{"+++\r\nxyz" + packet("PacketSize=1000")};
    return reply("OK");
  });
  auto g = GdbRemote::connect(dir.file("gdb.sock"), 2000ms);
  ASSERT_TRUE(g) << g.error().message;
  std::vector<uint8_t> data{1, 2, 3};
  EXPECT_TRUE(g->write_memory(0x1000, data));
}

// ----------------------------------------------------------- write_memory

TEST(GdbRemote, WriteMemorySendsHexAndAddressInOnePacket) {
  TempDir dir;
  FakeStub stub(dir.file("gdb.sock"), FakeStub::qemu_like);
  {
    auto g = GdbRemote::connect(dir.file("gdb.sock"), 5000ms);
    ASSERT_TRUE(g) << g.error().message;
    std::vector<uint8_t> data{0x00, 0xab, 0x0f, 0xf0, 0xff};
    auto r = g->write_memory(0x1234567890ull, data);
    ASSERT_TRUE(r) << r.error().message;
  }
  stub.join();
  ASSERT_EQ(stub.packets.size(), 2u);
  EXPECT_EQ(stub.packets[1].payload, "M1234567890,5:00ab0ff0ff");
  EXPECT_TRUE(stub.packets[1].checksum_ok);
  EXPECT_EQ(stub.acks, 2);
}

TEST(GdbRemote, WriteMemoryOfNothingSendsNoPacket) {
  TempDir dir;
  FakeStub stub(dir.file("gdb.sock"), FakeStub::qemu_like);
  {
    auto g = GdbRemote::connect(dir.file("gdb.sock"), 5000ms);
    ASSERT_TRUE(g) << g.error().message;
    EXPECT_TRUE(g->write_memory(0x1000, {}));
  }
  stub.join();
  EXPECT_EQ(stub.packets.size(), 1u);  // just qSupported
}

TEST(GdbRemote, LargeWriteIsSplitIntoPacketsWithinPacketSize) {
  TempDir dir;
  FakeStub stub(dir.file("gdb.sock"), FakeStub::qemu_like);  // PacketSize=0x1000
  auto data = pattern(5000);
  {
    auto g = GdbRemote::connect(dir.file("gdb.sock"), 5000ms);
    ASSERT_TRUE(g) << g.error().message;
    auto r = g->write_memory(0x80001000, data);
    ASSERT_TRUE(r) << r.error().message;
  }
  stub.join();
  size_t n = expect_m_packets_cover(stub.packets, 0x80001000, data, 0x1000);
  EXPECT_GE(n, 2u);  // 5000 bytes are 10000 hex digits: cannot fit one 4096-byte packet
}

TEST(GdbRemote, SmallPacketSizeGivesSmallPackets) {
  TempDir dir;
  FakeStub stub(dir.file("gdb.sock"), [](const std::string& p) -> std::optional<Action> {
    if (p == "qSupported") return reply("qXfer:features:read+;PacketSize=100");  // 256 bytes
    return reply("OK");
  });
  auto data = pattern(1000);
  {
    auto g = GdbRemote::connect(dir.file("gdb.sock"), 5000ms);
    ASSERT_TRUE(g) << g.error().message;
    auto r = g->write_memory(0xffffffff00000000ull, data);  // the longest address text
    ASSERT_TRUE(r) << r.error().message;
  }
  stub.join();
  EXPECT_GE(expect_m_packets_cover(stub.packets, 0xffffffff00000000ull, data, 0x100), 8u);
}

TEST(GdbRemote, WithoutPacketSizeLargeWritesStillArriveComplete) {
  TempDir dir;
  FakeStub stub(dir.file("gdb.sock"), [](const std::string& p) -> std::optional<Action> {
    if (p == "qSupported") return reply("qXfer:features:read+");
    return reply("OK");
  });
  auto data = pattern(3000);
  {
    auto g = GdbRemote::connect(dir.file("gdb.sock"), 5000ms);
    ASSERT_TRUE(g) << g.error().message;
    ASSERT_TRUE(g->write_memory(0x2000, data));
  }
  stub.join();
  EXPECT_GE(expect_m_packets_cover(stub.packets, 0x2000, data, SIZE_MAX), 2u);
}

// However small the stub's PacketSize, no M packet may exceed it.
TEST(GdbRemote, TinyPacketSizeIsStillRespected) {
  TempDir dir;
  FakeStub stub(dir.file("gdb.sock"), [](const std::string& p) -> std::optional<Action> {
    if (p == "qSupported") return reply("PacketSize=40");  // 64 bytes
    return reply("OK");
  });
  auto data = pattern(100);
  {
    auto g = GdbRemote::connect(dir.file("gdb.sock"), 5000ms);
    ASSERT_TRUE(g) << g.error().message;
    ASSERT_TRUE(g->write_memory(0x1000, data));
  }
  stub.join();
  expect_m_packets_cover(stub.packets, 0x1000, data, 0x40);
}

TEST(GdbRemote, ErrorReplyFailsWriteMemory) {
  TempDir dir;
  FakeStub stub(dir.file("gdb.sock"), [](const std::string& p) -> std::optional<Action> {
    if (p == "qSupported") return reply("PacketSize=1000");
    return reply("E14");
  });
  auto g = GdbRemote::connect(dir.file("gdb.sock"), 5000ms);
  ASSERT_TRUE(g) << g.error().message;
  std::vector<uint8_t> data{1, 2, 3, 4};
  auto r = g->write_memory(0x80000000, data);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("E14"), std::string::npos) << r.error().message;
  EXPECT_NE(r.error().message.find("80000000"), std::string::npos) << r.error().message;
}

TEST(GdbRemote, ErrorReplyStopsALargeWriteAtTheFailingPacket) {
  TempDir dir;
  FakeStub stub(dir.file("gdb.sock"), [](const std::string& p) -> std::optional<Action> {
    if (p == "qSupported") return reply("PacketSize=1000");
    return reply("E14");
  });
  {
    auto g = GdbRemote::connect(dir.file("gdb.sock"), 5000ms);
    ASSERT_TRUE(g) << g.error().message;
    EXPECT_FALSE(g->write_memory(0x80000000, pattern(5000)));
  }
  stub.join();
  EXPECT_EQ(stub.packets.size(), 2u);  // qSupported and the first M only
}

TEST(GdbRemote, StubHangingUpMidReplyFailsWriteMemory) {
  TempDir dir;
  FakeStub stub(dir.file("gdb.sock"), [](const std::string& p) -> std::optional<Action> {
    if (p == "qSupported") return reply("PacketSize=1000");
    return Action{"+$O", true};
  });
  auto g = GdbRemote::connect(dir.file("gdb.sock"), 5000ms);
  ASSERT_TRUE(g) << g.error().message;
  std::vector<uint8_t> data{1};
  auto r = g->write_memory(0x1000, data);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("closed"), std::string::npos) << r.error().message;
}

TEST(GdbRemote, SilentStubTimesOutWriteMemory) {
  TempDir dir;
  FakeStub stub(dir.file("gdb.sock"), [](const std::string& p) -> std::optional<Action> {
    if (p == "qSupported") return reply("PacketSize=1000");
    return std::nullopt;
  });
  auto g = GdbRemote::connect(dir.file("gdb.sock"), 200ms);
  ASSERT_TRUE(g) << g.error().message;
  std::vector<uint8_t> data{1};
  auto r = g->write_memory(0x1000, data);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("timed out"), std::string::npos) << r.error().message;
}

TEST(GdbRemote, WithQemusPidAReplyIsOverdueByItsCpuTimeOrTenTimesTheBound) {
  // "QEMU" here is a child that sleeps: it gets no CPU, so a 200 ms bound
  // waits out 10x it (a loaded host keeps QEMU off the CPU; node flash
  // writes the image through the stub with a 5 s bound, issue 20).
  SleepingProcess qemu_process;
  ASSERT_GT(qemu_process.pid(), 0);
  TempDir dir;
  FakeStub stub(dir.file("gdb.sock"), [](const std::string& p) -> std::optional<Action> {
    if (p == "qSupported") return reply("PacketSize=1000");
    return std::nullopt;
  });
  auto g = GdbRemote::connect(dir.file("gdb.sock"), 200ms, qemu_process.pid());
  ASSERT_TRUE(g) << g.error().message;
  std::vector<uint8_t> data{1};
  auto t0 = std::chrono::steady_clock::now();
  auto r = g->write_memory(0x1000, data);
  auto elapsed = std::chrono::steady_clock::now() - t0;
  qemu_process.stop();
  ASSERT_FALSE(r);
  EXPECT_GE(elapsed, 1900ms);
  EXPECT_NE(r.error().message.find("timed out: no reply in "), std::string::npos) << r.error().message;
  const double cpu = ulnic_test::qemu_cpu_seconds(r.error().message);
  EXPECT_GE(cpu, 0.0) << r.error().message;
  EXPECT_LT(cpu, 0.2) << "the sleeping QEMU had the bound's CPU: " << r.error().message;
}

// ----------------------------------------------------------------- detach

TEST(GdbRemote, DetachSendsDAndHangsUp) {
  TempDir dir;
  FakeStub stub(dir.file("gdb.sock"), FakeStub::qemu_like);
  auto g = GdbRemote::connect(dir.file("gdb.sock"), 5000ms);
  ASSERT_TRUE(g) << g.error().message;
  auto r = g->detach();
  ASSERT_TRUE(r) << r.error().message;
  stub.join();  // returns only once the client closed its socket
  ASSERT_EQ(stub.packets.size(), 2u);
  EXPECT_EQ(stub.packets[1].payload, "D");
  EXPECT_TRUE(stub.packets[1].checksum_ok);
  EXPECT_EQ(stub.acks, 2);
}

TEST(GdbRemote, DetachFailsWhenTheStubHasGone) {
  TempDir dir;
  FakeStub stub(dir.file("gdb.sock"), [](const std::string& p) -> std::optional<Action> {
    if (p == "qSupported") return reply("PacketSize=1000");
    return Action{"", true};
  });
  auto g = GdbRemote::connect(dir.file("gdb.sock"), 5000ms);
  ASSERT_TRUE(g) << g.error().message;
  EXPECT_FALSE(g->detach());
}
