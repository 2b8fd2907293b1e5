// Node lifecycle through the library (board/node.h) on real QEMU boards:
// the launcher's and flasher's error paths, and that nothing is left behind.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <filesystem>
#include <atomic>
#include <fstream>
#include <thread>

#include "board/node.h"
#include "board/runtime.h"
#include "ulnic/util/process.h"

namespace fs = std::filesystem;
namespace board = ulnic::board;
namespace uabi = ulnic::abi;  // not "abi": <cxxabi.h> (via gtest) owns that name
using namespace std::chrono_literals;

namespace {

std::string fw(const std::string& name) { return std::string(ULNIC_TEST_FIRMWARE_DIR) + "/" + name; }

class NodeLifecycle : public ::testing::Test {
 protected:
  void SetUp() override {
    cluster_ = "gt" + std::to_string(::getpid()) + "-" +
               ::testing::UnitTest::GetInstance()->current_test_info()->name();
    cluster_ = cluster_.substr(0, 31);
  }
  void TearDown() override {
    for (uint32_t n : board::list_nodes(cluster_)) (void)board::stop_node(cluster_, n);
    board::remove_tree(board::cluster_dir(cluster_));
  }
  board::StartOptions options(uint32_t node = 0) {
    board::StartOptions o;
    o.cluster = cluster_;
    o.board.node = node;
    o.board.slot_size = 16u << 20;
    o.firmware = fw("ulnic-fw.elf");
    o.heartbeat_us = 10'000;
    return o;
  }
  std::string cluster_;
};

// `ulnic node start` returns once the pid file of the daemon it started
// holds that daemon's pid; a reader must never see the file empty (a CI run
// saw "ulnicd restarted" and then daemon_pid 0: the file was created, not yet
// written). A writer rewrites the file while a reader checks every read.
TEST(PidFile, AReaderNeverSeesAnEmptyOrPartialPid) {
  std::string path = fs::temp_directory_path().string() + "/ulnic-pidfile-" + std::to_string(::getpid());
  ASSERT_TRUE(ulnic::write_pid_file(path, 1234567));
  std::atomic<bool> done{false};
  std::atomic<long> reads{0}, bad{0};
  std::thread reader([&] {
    while (!done.load()) {
      pid_t pid = ulnic::read_pid_file(path);
      if (pid != 1234567 && pid != 7654321) bad.fetch_add(1);
      reads.fetch_add(1);
    }
  });
  for (int i = 0; i < 20000; ++i) ASSERT_TRUE(ulnic::write_pid_file(path, i % 2 ? 1234567 : 7654321));
  done = true;
  reader.join();
  EXPECT_GT(reads.load(), 0);
  EXPECT_EQ(bad.load(), 0) << "of " << reads.load() << " reads";
  EXPECT_EQ(ulnic::read_pid_file(path + ".missing"), 0);
  fs::remove(path);
  EXPECT_FALSE(ulnic::write_pid_file("/nonexistent-dir/x.pid", 1));
}

// The board hands QEMU its wake connection this way (board/runtime.h,
// connect_wake): the daemon keeps the fds it is told to under their numbers,
// and no other: the caller's close-on-exec fds stay out of it.
TEST(SpawnDaemon, InheritsExactlyTheFdsItIsGiven) {
  const std::string dir = fs::temp_directory_path().string() + "/ulnic-inherit-" + std::to_string(::getpid());
  fs::create_directories(dir);
  int kept[2], other[2];
  ASSERT_EQ(::pipe2(kept, O_CLOEXEC), 0);
  ASSERT_EQ(::pipe2(other, O_CLOEXEC), 0);
  const std::string out = dir + "/fds";
  const std::string probe = "for f in " + std::to_string(kept[0]) + " " + std::to_string(other[0]) +
                            "; do if [ -e /proc/self/fd/$f ]; then echo open $f; else echo closed $f; fi; done > " +
                            out + ".tmp && mv " + out + ".tmp " + out;
  auto pid = ulnic::spawn_daemon({"/bin/sh", "-c", probe}, dir + "/log", 0, -1, {kept[0]});
  ASSERT_TRUE(pid) << pid.error().message;
  for (int i = 0; i < 500 && !fs::exists(out); ++i) std::this_thread::sleep_for(10ms);
  std::ifstream f(out);
  std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  EXPECT_EQ(text, "open " + std::to_string(kept[0]) + "\nclosed " + std::to_string(other[0]) + "\n");
  // ... and in the caller the fd is still close-on-exec.
  EXPECT_EQ(::fcntl(kept[0], F_GETFD) & FD_CLOEXEC, FD_CLOEXEC);
  for (int fd : {kept[0], kept[1], other[0], other[1]}) ::close(fd);
  fs::remove_all(dir);
}

TEST_F(NodeLifecycle, StartBootsTheFirmwareAndStopRemovesEverything) {
  auto r = board::start_node(options());
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->status.state, uint32_t(uabi::FwState::kRunning));
  EXPECT_EQ(r->status.num_slots, 8u);
  EXPECT_EQ(r->status.flash_seq, 1u);
  EXPECT_EQ(r->status.fabric_peer_id, 0u);
  auto q = board::query_node(cluster_, 0, true);
  ASSERT_TRUE(q) << q.error().message;
  EXPECT_TRUE(q->running);
  EXPECT_EQ(q->vm_state, "running");
  EXPECT_TRUE(q->heartbeat_advancing);
  auto s = board::stop_node(cluster_, 0);
  ASSERT_TRUE(s) << s.error().message;
  EXPECT_FALSE(ulnic::process_alive(r->pid));
  EXPECT_FALSE(fs::exists(board::cluster_dir(cluster_)));
}

TEST_F(NodeLifecycle, SecondStartOfARunningNodeIsRefused) {
  ASSERT_TRUE(board::start_node(options()));
  auto again = board::start_node(options());
  ASSERT_FALSE(again);
  EXPECT_NE(again.error().message.find("already running"), std::string::npos) << again.error().message;
  EXPECT_TRUE(board::query_node(cluster_, 0, false)->running);
}

TEST_F(NodeLifecycle, BadFirmwareIsRefusedBeforeAnythingIsCreated) {
  auto o = options();
  o.firmware = "/bin/sh";
  auto r = board::start_node(o);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("not RISC-V"), std::string::npos) << r.error().message;
  EXPECT_FALSE(fs::exists(board::node_paths(cluster_, 0).dir));
}

TEST_F(NodeLifecycle, MissingQemuNamesThePackage) {
  auto o = options();
  o.board.qemu = "qemu-system-riscv64-not-installed";
  auto r = board::start_node(o);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("qemu-system-misc"), std::string::npos) << r.error().message;
  EXPECT_FALSE(fs::exists(board::node_paths(cluster_, 0).dir));
}

TEST_F(NodeLifecycle, QemuDyingDuringBootIsReportedWithItsLogAndCleanedUp) {
  auto o = options();
  o.board.extra_args = {"-device", "no-such-device-model"};
  auto r = board::start_node(o);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("QEMU exited during boot"), std::string::npos) << r.error().message;
  EXPECT_NE(r.error().message.find("no-such-device-model"), std::string::npos) << r.error().message;
  EXPECT_FALSE(fs::exists(board::node_paths(cluster_, 0).dir));
}

TEST_F(NodeLifecycle, StaleFilesOfADeadNodeAreDetectedAndCleaned) {
  auto first = board::start_node(options());
  ASSERT_TRUE(first);
  ::kill(first->pid, SIGKILL);  // a crash: QEMU gone, files left behind
  for (int i = 0; i < 500 && ulnic::process_alive(first->pid); ++i) std::this_thread::sleep_for(10ms);
  auto q = board::query_node(cluster_, 0, false);
  ASSERT_TRUE(q);
  EXPECT_FALSE(q->running);
  auto second = board::start_node(options());
  ASSERT_TRUE(second) << second.error().message;
  ASSERT_FALSE(second->notes.empty());
  EXPECT_NE(second->notes[0].find("stale"), std::string::npos) << second->notes[0];
  EXPECT_EQ(second->status.state, uint32_t(uabi::FwState::kRunning));
}

TEST_F(NodeLifecycle, FlashChangesTheBuildWithoutRestartingQemu) {
  auto r = board::start_node(options());
  ASSERT_TRUE(r);
  auto f = board::flash_node(cluster_, 0, fw("ulnic-fw-alt.elf"));
  ASSERT_TRUE(f) << f.error().message;
  EXPECT_NE(f->old_build_id, f->new_build_id);
  EXPECT_EQ(f->old_build_id, std::string(r->status.build_id));
  EXPECT_EQ(f->flash_seq, 2u);
  EXPECT_EQ(f->status.state, uint32_t(uabi::FwState::kRunning));
  EXPECT_EQ(f->status.boot_count, 2u);
  EXPECT_STREQ(f->status.version + std::string(f->status.version).size() - 4, "-alt");
  auto q = board::query_node(cluster_, 0, true);
  EXPECT_EQ(q->pid, r->pid);
  EXPECT_TRUE(q->heartbeat_advancing);
  // And back: the old code must really run again, not a stale translation.
  auto back = board::flash_node(cluster_, 0, fw("ulnic-fw.elf"));
  ASSERT_TRUE(back) << back.error().message;
  EXPECT_EQ(back->new_build_id, std::string(r->status.build_id));
  EXPECT_EQ(std::string(back->status.version).find("-alt"), std::string::npos);
}

TEST_F(NodeLifecycle, FlashingABadImageLeavesTheRunningFirmwareAlone) {
  auto r = board::start_node(options());
  ASSERT_TRUE(r);
  auto f = board::flash_node(cluster_, 0, "/bin/sh");
  ASSERT_FALSE(f);
  auto q = board::query_node(cluster_, 0, true);
  EXPECT_EQ(q->vm_state, "running");
  EXPECT_EQ(q->status.flash_seq, 1u);
  EXPECT_TRUE(q->heartbeat_advancing);
}

TEST_F(NodeLifecycle, CrashingFirmwareShowsCrashedWithCauseAndPc) {
  ASSERT_TRUE(board::start_node(options()));
  auto f = board::flash_node(cluster_, 0, fw("ulnic-fw-crashtest.elf"));
  ASSERT_TRUE(f) << f.error().message;
  auto q = board::query_node(cluster_, 0, false);
  EXPECT_EQ(q->status.state, uint32_t(uabi::FwState::kCrashed));
  EXPECT_EQ(q->status.trap_cause, 5u);  // load access fault
  EXPECT_GE(q->status.trap_pc, uabi::kSramBase);
  EXPECT_LT(q->status.trap_pc, uabi::kSramBase + uabi::kImageMaxSize);
  EXPECT_EQ(q->status.trap_tval, 0x7000'0000'0000ull);
  EXPECT_NE(board::describe_trap(q->status).find("load access fault"), std::string::npos);
  // A crashed NIC is recovered by flashing a good image.
  auto good = board::flash_node(cluster_, 0, fw("ulnic-fw.elf"));
  ASSERT_TRUE(good) << good.error().message;
  EXPECT_EQ(good->status.state, uint32_t(uabi::FwState::kRunning));
  EXPECT_EQ(good->status.trap_cause, 0u);
}

TEST_F(NodeLifecycle, OperationsOnAMissingNodeFailClearly) {
  auto f = board::flash_node(cluster_, 5, fw("ulnic-fw.elf"));
  ASSERT_FALSE(f);
  EXPECT_NE(f.error().message.find("not running"), std::string::npos);
  auto s = board::stop_node(cluster_, 5);
  ASSERT_FALSE(s);
  auto q = board::query_node(cluster_, 5, false);
  ASSERT_FALSE(q);
}

TEST_F(NodeLifecycle, TwoNodesShareTheFabricWithTheirOwnPeerIds) {
  auto a = board::start_node(options(0));
  ASSERT_TRUE(a) << a.error().message;
  auto b = board::start_node(options(3));
  ASSERT_TRUE(b) << b.error().message;
  EXPECT_EQ(a->status.fabric_peer_id, 0u);
  EXPECT_EQ(b->status.fabric_peer_id, 3u);
  EXPECT_EQ(a->status.fabric_bar_size, b->status.fabric_bar_size);
  ASSERT_TRUE(board::stop_node(cluster_, 0));
  EXPECT_TRUE(fs::exists(board::fabric_dir(cluster_)));  // node 3 still uses it
  ASSERT_TRUE(board::stop_node(cluster_, 3));
  EXPECT_FALSE(fs::exists(board::cluster_dir(cluster_)));
}

}  // namespace
