// Unit tests for the QMP client (emulator/board/qmp.{h,cpp}) against a fake
// QEMU monitor served on a UNIX socket by a std::thread.
#include <gtest/gtest.h>

#include "test_support.h"
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "board/qmp.h"
#include "ulnic/util/unix_socket.h"

using namespace std::chrono_literals;
using ulnic::board::json_string_field;
using ulnic::board::Qmp;

namespace {

constexpr int kGuardMs = 5000;  // failure guard only; never a pacing assumption

using ulnic_test::SleepingProcess;
using ulnic_test::TempDir;

// The server side of one QMP connection, as seen by a script.
class Conn {
 public:
  explicit Conn(int fd) : fd_(fd) {}
  void send(const std::string& s) {
    size_t off = 0;
    while (off < s.size()) {
      ssize_t n = ::send(fd_, s.data() + off, s.size() - off, MSG_NOSIGNAL);
      if (n <= 0) return;
      off += size_t(n);
    }
  }
  // One line without its '\n'; nullopt on EOF or after the guard timeout.
  std::optional<std::string> line() {
    for (;;) {
      size_t nl = buf_.find('\n');
      if (nl != std::string::npos) {
        std::string l = buf_.substr(0, nl);
        buf_.erase(0, nl + 1);
        received.push_back(l);
        return l;
      }
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, kGuardMs) <= 0) return std::nullopt;
      char chunk[1024];
      ssize_t n = ::read(fd_, chunk, sizeof chunk);
      if (n <= 0) return std::nullopt;
      buf_.append(chunk, size_t(n));
    }
  }
  // Greeting plus the capabilities negotiation, as QEMU does it.
  void handshake() {
    send(R"({"QMP": {"version": {"qemu": {"micro": 0, "minor": 2, "major": 7}}, "capabilities": ["oob"]}})"
         "\n");
    auto caps = line();
    EXPECT_TRUE(caps && caps->find(R"("qmp_capabilities")") != std::string::npos) << caps.value_or("<none>");
    send("{\"return\": {}}\n");
  }
  std::vector<std::string> received;  // every line read from the client

 private:
  int fd_;
  std::string buf_;
};

// A fake QEMU monitor: listens on `path` (optionally only after
// `listen_delay`), accepts one client and runs `script` on it.
class FakeQemu {
 public:
  using Script = std::function<void(Conn&)>;
  FakeQemu(std::string path, Script script, std::chrono::milliseconds listen_delay = 0ms) {
    auto start = [this, path, script = std::move(script)] {
      auto l = ulnic::listen_unix(path);
      if (!l) {
        ADD_FAILURE() << l.error().message;
        return;
      }
      listening();
      pollfd p{l->get(), POLLIN, 0};
      if (::poll(&p, 1, kGuardMs) <= 0) return;  // nobody came
      ulnic::UniqueFd c(::accept(l->get(), nullptr, nullptr));
      if (!c) return;
      Conn conn(c.get());
      script(conn);
      received_ = conn.received;
      // Keep the connection open until the test is done with its client.
      std::unique_lock lk(mu_);
      cv_.wait_for(lk, std::chrono::milliseconds(kGuardMs), [this] { return released_; });
    };
    if (listen_delay.count() == 0) {
      thread_ = std::thread(start);
      wait_listening();
    } else {
      thread_ = std::thread([start, listen_delay] {
        std::this_thread::sleep_for(listen_delay);
        start();
      });
    }
  }
  ~FakeQemu() { join(); }
  // Lets the script's connection close, waits for the thread, and returns
  // the lines the client sent.
  std::vector<std::string> join() {
    {
      std::lock_guard lk(mu_);
      released_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
    return received_;
  }

 private:
  void listening() {
    std::lock_guard lk(mu_);
    listening_ = true;
    cv_.notify_all();
  }
  void wait_listening() {
    std::unique_lock lk(mu_);
    cv_.wait_for(lk, std::chrono::milliseconds(kGuardMs), [this] { return listening_; });
  }
  std::mutex mu_;
  std::condition_variable cv_;
  bool listening_ = false;
  bool released_ = false;
  std::vector<std::string> received_;
  std::thread thread_;
};

const std::string kPaused = R"({"return": {"status": "paused", "singlestep": false, "running": false}})";

}  // namespace

// ---------------------------------------------------------------- connect

TEST(Qmp, ConnectReadsGreetingAndNegotiatesCapabilities) {
  TempDir dir;
  FakeQemu qemu(dir.file("qmp.sock"), [](Conn& c) { c.handshake(); });
  auto q = Qmp::connect(dir.file("qmp.sock"), 5000ms);
  ASSERT_TRUE(q) << q.error().message;
  auto lines = qemu.join();
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0], R"({"execute": "qmp_capabilities"})");
}

TEST(Qmp, ConnectFailsAfterTimeoutWhenNobodyListens) {
  TempDir dir;
  auto t0 = std::chrono::steady_clock::now();
  auto q = Qmp::connect(dir.file("nobody.sock"), 200ms);
  auto elapsed = std::chrono::steady_clock::now() - t0;
  ASSERT_FALSE(q);
  EXPECT_GE(elapsed, 200ms);  // it kept retrying for the whole timeout
  EXPECT_NE(q.error().message.find("QMP"), std::string::npos) << q.error().message;
  EXPECT_NE(q.error().message.find(dir.file("nobody.sock")), std::string::npos) << q.error().message;
}

TEST(Qmp, ConnectRetriesUntilTheSocketListens) {
  TempDir dir;
  FakeQemu qemu(dir.file("late.sock"), [](Conn& c) { c.handshake(); }, 100ms);
  auto q = Qmp::connect(dir.file("late.sock"), 5000ms);
  EXPECT_TRUE(q) << q.error().message;
}

TEST(Qmp, ConnectRejectsANonQmpGreeting) {
  TempDir dir;
  FakeQemu qemu(dir.file("qmp.sock"), [](Conn& c) { c.send("{\"hello\": 1}\n"); });
  auto q = Qmp::connect(dir.file("qmp.sock"), 2000ms);
  ASSERT_FALSE(q);
  EXPECT_NE(q.error().message.find("unexpected greeting"), std::string::npos) << q.error().message;
}

TEST(Qmp, ConnectFailsWhenCapabilitiesAreRefused) {
  TempDir dir;
  FakeQemu qemu(dir.file("qmp.sock"), [](Conn& c) {
    c.send("{\"QMP\": {}}\n");
    c.line();
    c.send(R"({"error": {"class": "CommandNotFound", "desc": "no caps today"}})" "\n");
  });
  auto q = Qmp::connect(dir.file("qmp.sock"), 2000ms);
  ASSERT_FALSE(q);
  EXPECT_NE(q.error().message.find("no caps today"), std::string::npos) << q.error().message;
}

TEST(Qmp, ConnectFailsWhenServerClosesBeforeGreeting) {
  TempDir dir;
  FakeQemu qemu(dir.file("qmp.sock"), [](Conn&) {});
  std::thread closer([&] { qemu.join(); });  // close right after accepting
  auto q = Qmp::connect(dir.file("qmp.sock"), 5000ms);
  closer.join();
  ASSERT_FALSE(q);
  EXPECT_NE(q.error().message.find("closed"), std::string::npos) << q.error().message;
}

// ---------------------------------------------------------------- execute

TEST(Qmp, RunStateReturnsStatusOfQueryStatus) {
  TempDir dir;
  FakeQemu qemu(dir.file("qmp.sock"), [](Conn& c) {
    c.handshake();
    c.line();
    c.send(kPaused + "\n");
  });
  auto q = Qmp::connect(dir.file("qmp.sock"), 5000ms);
  ASSERT_TRUE(q) << q.error().message;
  auto s = q->run_state();
  ASSERT_TRUE(s) << s.error().message;
  EXPECT_EQ(*s, "paused");
  auto lines = qemu.join();
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[1], R"({"execute": "query-status"})");
}

TEST(Qmp, ExecuteSkipsEventsBeforeTheReply) {
  TempDir dir;
  FakeQemu qemu(dir.file("qmp.sock"), [](Conn& c) {
    c.handshake();
    c.line();
    c.send(R"({"event": "STOP", "timestamp": {"seconds": 1, "microseconds": 2}})" "\n");
    c.send(R"({"event": "RESET", "data": {"guest": false, "reason": "host-qmp-system-reset"}})" "\n");
    c.send(kPaused + "\n");
  });
  auto q = Qmp::connect(dir.file("qmp.sock"), 5000ms);
  ASSERT_TRUE(q) << q.error().message;
  auto s = q->run_state();
  ASSERT_TRUE(s) << s.error().message;
  EXPECT_EQ(*s, "paused");
}

TEST(Qmp, ExecuteSkipsEventsDuringCapabilitiesNegotiation) {
  TempDir dir;
  FakeQemu qemu(dir.file("qmp.sock"), [](Conn& c) {
    c.send("{\"QMP\": {}}\n");
    c.line();
    c.send(R"({"event": "RESUME", "timestamp": {"seconds": 1, "microseconds": 2}})" "\n");
    c.send("{\"return\": {}}\n");
  });
  auto q = Qmp::connect(dir.file("qmp.sock"), 5000ms);
  EXPECT_TRUE(q) << q.error().message;
}

TEST(Qmp, ExecuteReturnsTheRawReplyLine) {
  TempDir dir;
  FakeQemu qemu(dir.file("qmp.sock"), [](Conn& c) {
    c.handshake();
    c.line();
    c.send("{\"return\": {}}\n");
  });
  auto q = Qmp::connect(dir.file("qmp.sock"), 5000ms);
  ASSERT_TRUE(q) << q.error().message;
  auto r = q->execute("stop");
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(*r, "{\"return\": {}}");
}

TEST(Qmp, ExecuteSendsArgumentsObject) {
  TempDir dir;
  FakeQemu qemu(dir.file("qmp.sock"), [](Conn& c) {
    c.handshake();
    c.line();
    c.send("{\"return\": \"\"}\n");
  });
  auto q = Qmp::connect(dir.file("qmp.sock"), 5000ms);
  ASSERT_TRUE(q) << q.error().message;
  auto r = q->execute("human-monitor-command", R"({"command-line": "info status"})");
  ASSERT_TRUE(r) << r.error().message;
  auto lines = qemu.join();
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[1], R"({"execute": "human-monitor-command", "arguments": {"command-line": "info status"}})");
}

TEST(Qmp, ExecuteFailsWithTheErrorDescription) {
  TempDir dir;
  FakeQemu qemu(dir.file("qmp.sock"), [](Conn& c) {
    c.handshake();
    c.line();
    c.send(R"({"error": {"class": "GenericError", "desc": "boom"}})" "\n");
  });
  auto q = Qmp::connect(dir.file("qmp.sock"), 5000ms);
  ASSERT_TRUE(q) << q.error().message;
  auto r = q->execute("system_reset");
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("boom"), std::string::npos) << r.error().message;
  EXPECT_NE(r.error().message.find("system_reset"), std::string::npos) << r.error().message;
}

TEST(Qmp, ExecuteTimesOutWhenServerNeverAnswers) {
  TempDir dir;
  FakeQemu qemu(dir.file("qmp.sock"), [](Conn& c) {
    c.handshake();
    c.line();  // ... and never answer it
  });
  auto q = Qmp::connect(dir.file("qmp.sock"), 300ms);
  ASSERT_TRUE(q) << q.error().message;
  auto t0 = std::chrono::steady_clock::now();
  auto r = q->execute("query-status");
  auto elapsed = std::chrono::steady_clock::now() - t0;
  ASSERT_FALSE(r);
  EXPECT_GE(elapsed, 250ms);  // it waited (the deadline is rounded to whole ms)
  EXPECT_NE(r.error().message.find("no reply within 300 ms"), std::string::npos) << r.error().message;
}

TEST(Qmp, WithQemusPidAReplyIsOverdueByItsCpuTimeOrTenTimesTheBound) {
  // "QEMU" here is a child that sleeps: it gets no CPU, so a 200 ms bound
  // waits out 10x it (a loaded host keeps QEMU off the CPU: node flash
  // failed "no reply within 5000 ms" under two burners, issue 20).
  SleepingProcess qemu_process;
  ASSERT_GT(qemu_process.pid(), 0);
  TempDir dir;
  FakeQemu qemu(dir.file("qmp.sock"), [](Conn& c) {
    c.handshake();
    c.line();  // ... and never answer it
  });
  auto q = Qmp::connect(dir.file("qmp.sock"), 200ms, qemu_process.pid());
  ASSERT_TRUE(q) << q.error().message;
  auto t0 = std::chrono::steady_clock::now();
  auto r = q->execute("query-status");
  auto elapsed = std::chrono::steady_clock::now() - t0;
  qemu_process.stop();
  ASSERT_FALSE(r);
  EXPECT_GE(elapsed, 1900ms);
  EXPECT_NE(r.error().message.find("QMP: no reply in "), std::string::npos) << r.error().message;
  const double cpu = ulnic_test::qemu_cpu_seconds(r.error().message);
  EXPECT_GE(cpu, 0.0) << r.error().message;
  EXPECT_LT(cpu, 0.2) << "the sleeping QEMU had the bound's CPU: " << r.error().message;
}

TEST(Qmp, ServerClosingMidReplyIsAnError) {
  TempDir dir;
  FakeQemu qemu(dir.file("qmp.sock"), [](Conn& c) {
    c.handshake();
    c.line();
    c.send(R"({"return": {"status": "pau)");  // no newline, then close
  });
  auto q = Qmp::connect(dir.file("qmp.sock"), 5000ms);
  ASSERT_TRUE(q) << q.error().message;
  std::thread closer([&] { qemu.join(); });
  auto r = q->execute("query-status");
  closer.join();
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("closed"), std::string::npos) << r.error().message;
}

TEST(Qmp, ReplySplitAcrossWritesIsReassembled) {
  TempDir dir;
  FakeQemu qemu(dir.file("qmp.sock"), [](Conn& c) {
    c.handshake();
    c.line();
    const std::string reply = kPaused + "\n";
    for (size_t i = 0; i < reply.size(); i += 7) {
      c.send(reply.substr(i, 7));
      std::this_thread::sleep_for(2ms);  // encourages separate reads; correctness does not depend on it
    }
  });
  auto q = Qmp::connect(dir.file("qmp.sock"), 5000ms);
  ASSERT_TRUE(q) << q.error().message;
  auto s = q->run_state();
  ASSERT_TRUE(s) << s.error().message;
  EXPECT_EQ(*s, "paused");
}

TEST(Qmp, LinesArrivingInOneWriteAreKeptForLaterReads) {
  TempDir dir;
  FakeQemu qemu(dir.file("qmp.sock"), [](Conn& c) {
    // Greeting and the capabilities reply in one write, before the command.
    c.send("{\"QMP\": {}}\n{\"return\": {}}\n");
    c.line();
    c.line();
    c.send(R"({"event": "STOP"})" "\n" + kPaused + "\n");
  });
  auto q = Qmp::connect(dir.file("qmp.sock"), 5000ms);
  ASSERT_TRUE(q) << q.error().message;
  auto s = q->run_state();
  ASSERT_TRUE(s) << s.error().message;
  EXPECT_EQ(*s, "paused");
}

TEST(Qmp, CrLfLineEndingsAreAccepted) {
  // QEMU's monitor writes "\r\n" after every QMP line.
  TempDir dir;
  FakeQemu qemu(dir.file("qmp.sock"), [](Conn& c) {
    c.send("{\"QMP\": {}}\r\n");
    c.line();
    c.send("{\"return\": {}}\r\n");
    c.line();
    c.send(kPaused + "\r\n");
  });
  auto q = Qmp::connect(dir.file("qmp.sock"), 5000ms);
  ASSERT_TRUE(q) << q.error().message;
  auto s = q->run_state();
  ASSERT_TRUE(s) << s.error().message;
  EXPECT_EQ(*s, "paused");
}

// QEMU serialises an event with its timestamp first:
//   {"timestamp": {...}, "event": "BLOCK_JOB_COMPLETED", "data": {..., "error": "..."}}
// It must be recognised as an event by its top-level "event" member and
// skipped, even though its data carries an "error" member.
TEST(Qmp, EventWithTimestampFirstIsSkippedEvenIfItsDataHasAnErrorMember) {
  TempDir dir;
  FakeQemu qemu(dir.file("qmp.sock"), [](Conn& c) {
    c.handshake();
    c.line();
    c.send(R"({"timestamp": {"seconds": 1, "microseconds": 2}, "event": "BLOCK_JOB_COMPLETED", )"
           R"("data": {"device": "d0", "type": "commit", "error": "No space left on device"}})" "\n");
    c.send(kPaused + "\n");
  });
  auto q = Qmp::connect(dir.file("qmp.sock"), 5000ms);
  ASSERT_TRUE(q) << q.error().message;
  auto s = q->run_state();
  ASSERT_TRUE(s) << s.error().message;
  EXPECT_EQ(*s, "paused");
}

// ------------------------------------------------------ json_string_field

TEST(QmpJsonStringField, ReturnsTheValueOfAStringField) {
  EXPECT_EQ(json_string_field(R"({"status": "running"})", "status"), "running");
  EXPECT_EQ(json_string_field(R"({"a": "x", "b": "y"})", "b"), "y");
}

TEST(QmpJsonStringField, FindsAFieldInsideANestedObject) {
  EXPECT_EQ(json_string_field(kPaused, "status"), "paused");
  EXPECT_EQ(json_string_field(R"({"error": {"class": "GenericError", "desc": "boom"}})", "desc"), "boom");
}

TEST(QmpJsonStringField, MissingKeyGivesEmpty) {
  EXPECT_EQ(json_string_field(R"({"status": "running"})", "state"), "");
  EXPECT_EQ(json_string_field("", "status"), "");
  EXPECT_EQ(json_string_field("{}", "status"), "");
}

TEST(QmpJsonStringField, EmptyValueGivesEmpty) {
  EXPECT_EQ(json_string_field(R"({"desc": ""})", "desc"), "");
}

TEST(QmpJsonStringField, ToleratesAnyWhitespaceAroundTheColon) {
  EXPECT_EQ(json_string_field(R"({"status":"paused"})", "status"), "paused");
  EXPECT_EQ(json_string_field(R"({"status" :   "paused"})", "status"), "paused");
}

TEST(QmpJsonStringField, KeyMustMatchTheWholeName) {
  EXPECT_EQ(json_string_field(R"({"xstatus": "a", "status": "b"})", "status"), "b");
  EXPECT_EQ(json_string_field(R"({"statusx": "a", "status": "b"})", "status"), "b");
  EXPECT_EQ(json_string_field(R"({"statusx": "a"})", "status"), "");
}

TEST(QmpJsonStringField, TruncatedJsonGivesEmpty) {
  EXPECT_EQ(json_string_field(R"({"status")", "status"), "");
  EXPECT_EQ(json_string_field(R"({"status": )", "status"), "");
  EXPECT_EQ(json_string_field(R"({"status": "pau)", "status"), "");
}

TEST(QmpJsonStringField, ValueMayContainColonsAndBraces) {
  EXPECT_EQ(json_string_field(R"({"desc": "a: {b}, c"})", "desc"), "a: {b}, c");
}

// A field whose value is not a string has no string value: "" (not the next
// quoted token in the text).
TEST(QmpJsonStringField, NonStringValueGivesEmpty) {
  EXPECT_EQ(json_string_field(R"({"singlestep": false, "running": "x"})", "singlestep"), "");
  EXPECT_EQ(json_string_field(R"({"count": 5, "desc": "d"})", "count"), "");
}

// Only member names match the key; a string value equal to it does not.
TEST(QmpJsonStringField, KeyThatOnlyAppearsAsAValueGivesEmpty) {
  EXPECT_EQ(json_string_field(R"({"class": "desc", "other": "x"})", "desc"), "");
}

// An escaped quote does not end the value (QMP error descriptions quote).
TEST(QmpJsonStringField, EscapedQuoteDoesNotEndTheValue) {
  std::string v = json_string_field(R"({"desc": "bad \"x\" value"})", "desc");
  EXPECT_TRUE(v == R"(bad "x" value)" || v == R"(bad \"x\" value)") << v;
}
