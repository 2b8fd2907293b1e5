// Unit tests for emulator/board/launcher (validate, qemu_command, find_qemu)
// and emulator/board/runtime (runtime paths, cluster names).
#include <gtest/gtest.h>
#include <sys/statvfs.h>

#include "test_support.h"
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "board/launcher.h"
#include "board/runtime.h"
#include "ulnic/util/runtime_dir.h"
#include "ulnic/abi/sram.h"

namespace {

namespace abi = ulnic::abi;
namespace fs = std::filesystem;
using ulnic::board::BoardSpec;
using ulnic::board::NodePaths;
using Argv = std::vector<std::string>;

using ulnic_test::Contains;

std::string join(const Argv& a) {
  std::string s;
  for (const auto& x : a) s += (s.empty() ? "" : " ") + x;
  return s;
}

// True if `opt` is immediately followed by `value` somewhere in argv.
::testing::AssertionResult HasOption(const Argv& a, const std::string& opt, const std::string& value) {
  for (size_t i = 0; i + 1 < a.size(); ++i)
    if (a[i] == opt && a[i + 1] == value) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "no `" << opt << " " << value << "` in: " << join(a);
}

size_t count_containing(const Argv& a, const std::string& needle) {
  return size_t(std::count_if(a.begin(), a.end(), [&](const std::string& s) { return Contains(s, needle); }));
}

// Sets (or, with nullopt, unsets) an environment variable for one scope.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, std::optional<std::string> value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value) ::setenv(name, value->c_str(), 1);
    else ::unsetenv(name);
  }
  ~ScopedEnv() {
    if (old_) ::setenv(name_, old_->c_str(), 1);
    else ::unsetenv(name_);
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

using ulnic_test::TempDir;

// Fixed paths so the command line does not depend on the environment.
NodePaths fixed_paths() {
  NodePaths p;
  p.dir = "/rt/lab/node3";
  p.sram = p.dir + "/sram";
  p.qmp = p.dir + "/qmp.sock";
  p.gdb = p.dir + "/gdb.sock";
  p.serial_log = p.dir + "/serial.log";
  p.qemu_log = p.dir + "/qemu.log";
  p.pid = p.dir + "/qemu.pid";
  p.firmware = p.dir + "/firmware.elf";
  p.lock = p.dir + ".lock";
  return p;
}

std::string validate_error(const BoardSpec& s) {
  auto r = ulnic::board::validate(s);
  EXPECT_FALSE(r.has_value()) << "spec was accepted";
  return r ? std::string() : r.error().message;
}

// ---------------------------------------------------------------- qemu_command

TEST(Launcher, CommandStartsWithTheQemuBinary) {
  BoardSpec s;
  s.qemu = "/opt/qemu/bin/qemu-system-riscv64";
  auto a = ulnic::board::qemu_command(s, fixed_paths());
  ASSERT_FALSE(a.empty());
  EXPECT_EQ(a[0], "/opt/qemu/bin/qemu-system-riscv64");
}

TEST(Launcher, MachineIsVirtWithAiaAndSramBackend) {
  auto a = ulnic::board::qemu_command(BoardSpec{}, fixed_paths());
  EXPECT_TRUE(HasOption(a, "-M", "virt,aia=aplic-imsic,memory-backend=sram"));
  EXPECT_TRUE(HasOption(a, "-m", "16M"));
  // One hart, translated for parallel execution (real fences): see launcher.cpp.
  EXPECT_TRUE(HasOption(a, "-smp", "1,maxcpus=2"));
}

TEST(Launcher, NoBiosAndNoDefaults) {
  auto a = ulnic::board::qemu_command(BoardSpec{}, fixed_paths());
  EXPECT_TRUE(HasOption(a, "-bios", "none"));
  EXPECT_TRUE(HasOption(a, "-display", "none"));
  EXPECT_EQ(std::count(a.begin(), a.end(), "-nodefaults"), 1);
  EXPECT_EQ(std::count(a.begin(), a.end(), "-no-user-config"), 1);
}

TEST(Launcher, SramIsASharedFileBackendAtTheNodesPath) {
  auto p = fixed_paths();
  auto a = ulnic::board::qemu_command(BoardSpec{}, p);
  EXPECT_TRUE(HasOption(a, "-object", "memory-backend-file,id=sram,size=16M,mem-path=" + p.sram + ",share=on"));
}

TEST(Launcher, QmpAndGdbAreUnixSockets) {
  auto p = fixed_paths();
  auto a = ulnic::board::qemu_command(BoardSpec{}, p);
  EXPECT_TRUE(HasOption(a, "-chardev", "socket,id=qmp,path=/rt/lab/node3/qmp.sock,server=on,wait=off"));
  EXPECT_TRUE(HasOption(a, "-mon", "chardev=qmp,mode=control"));
  EXPECT_TRUE(HasOption(a, "-chardev", "socket,id=gdb,path=/rt/lab/node3/gdb.sock,server=on,wait=off"));
  EXPECT_TRUE(HasOption(a, "-gdb", "chardev:gdb"));
}

TEST(Launcher, SerialGoesToTheLogFileByDefault) {
  auto a = ulnic::board::qemu_command(BoardSpec{}, fixed_paths());
  EXPECT_TRUE(HasOption(a, "-chardev", "file,id=serial,path=/rt/lab/node3/serial.log"));
  EXPECT_TRUE(HasOption(a, "-serial", "chardev:serial"));
  EXPECT_FALSE(HasOption(a, "-serial", "stdio"));
}

TEST(Launcher, SerialGoesToStdioWhenAsked) {
  BoardSpec s;
  s.serial_to_stdout = true;
  auto a = ulnic::board::qemu_command(s, fixed_paths());
  EXPECT_TRUE(HasOption(a, "-serial", "stdio"));
  EXPECT_EQ(count_containing(a, "serial.log"), 0u);
}

TEST(Launcher, OneIvshmemPlainPerSlotAtFixedPciAddress) {
  BoardSpec s;
  s.num_slots = 3;
  s.slot_size = 1u << 20;
  auto p = fixed_paths();
  auto a = ulnic::board::qemu_command(s, p);
  for (uint32_t k = 0; k < 3; ++k) {
    std::string id = "slot" + std::to_string(k);
    EXPECT_TRUE(HasOption(a, "-object",
                          "memory-backend-file,id=" + id + ",size=1048576,mem-path=" + p.slot(k) + ",share=on"));
    EXPECT_TRUE(HasOption(a, "-device", "ivshmem-plain,memdev=" + id + ",addr=0x" + std::string(1, "89a"[k])));
  }
  EXPECT_EQ(count_containing(a, "ivshmem-plain"), 3u);
}

TEST(Launcher, EightSlotsUseAddressesEightThroughF) {
  BoardSpec s;
  s.num_slots = abi::kMaxSlots;
  auto a = ulnic::board::qemu_command(s, fixed_paths());
  EXPECT_EQ(count_containing(a, "ivshmem-plain"), 8u);
  EXPECT_TRUE(HasOption(a, "-device", "ivshmem-plain,memdev=slot0,addr=0x8"));
  EXPECT_TRUE(HasOption(a, "-device", "ivshmem-plain,memdev=slot7,addr=0xf"));
  EXPECT_TRUE(HasOption(a, "-object", "memory-backend-file,id=slot7,size=268435456,mem-path=/rt/lab/node3/slot7,share=on"));
}

TEST(Launcher, ZeroSlotsMeansNoIvshmemPlain) {
  BoardSpec s;
  s.num_slots = 0;
  auto a = ulnic::board::qemu_command(s, fixed_paths());
  EXPECT_EQ(count_containing(a, "ivshmem-plain"), 0u);
  EXPECT_EQ(count_containing(a, "id=slot"), 0u);
}

TEST(Launcher, FabricSocketAddsIvshmemDoorbell) {
  BoardSpec s;
  s.fabric_socket = "/rt/lab/fabric/nic3.sock";
  s.fabric_vectors = 4;
  auto a = ulnic::board::qemu_command(s, fixed_paths());
  EXPECT_TRUE(HasOption(a, "-chardev", "socket,id=fabric,path=/rt/lab/fabric/nic3.sock"));
  EXPECT_TRUE(HasOption(a, "-device", "ivshmem-doorbell,chardev=fabric,vectors=4,ioeventfd=off,addr=0x10"));
  EXPECT_EQ(count_containing(a, "ivshmem-doorbell"), 1u);
}

TEST(Launcher, FabricVectorsArePassedThrough) {
  BoardSpec s;
  s.fabric_socket = "/f.sock";
  s.fabric_vectors = 64;
  auto a = ulnic::board::qemu_command(s, fixed_paths());
  EXPECT_TRUE(HasOption(a, "-device", "ivshmem-doorbell,chardev=fabric,vectors=64,ioeventfd=off,addr=0x10"));
}

TEST(Launcher, NoFabricSocketMeansNoDoorbell) {
  auto a = ulnic::board::qemu_command(BoardSpec{}, fixed_paths());
  EXPECT_EQ(count_containing(a, "ivshmem-doorbell"), 0u);
  EXPECT_EQ(count_containing(a, "id=fabric"), 0u);
}

TEST(Launcher, AWakeConnectionLoadsTheWakePluginOnIt) {
  ScopedEnv bindir("ULNIC_BINDIR", "/opt/ulnic/bin");
  BoardSpec s;
  s.fabric_socket = "/f.sock";
  s.wake_fd = 7;
  s.num_slots = 0;
  auto a = ulnic::board::qemu_command(s, fixed_paths());
  EXPECT_TRUE(HasOption(a, "-plugin", "file=/opt/ulnic/bin/ulnic-wake.so,sram=/rt/lab/node3/sram,fd=7"));
  EXPECT_EQ(count_containing(a, "-plugin"), 1u);
}

// The plugin is also the board's copy engine: it maps the files behind the
// slots and the fabric's memory (abi/wake.h), named the way QEMU's own
// backends are, commas doubled.
TEST(Launcher, TheWakePluginIsToldTheSlotAndFabricFiles) {
  ScopedEnv bindir("ULNIC_BINDIR", "/opt/ulnic/bin");
  BoardSpec s;
  s.fabric_socket = "/f.sock";
  s.fabric_memory = "/rt/lab/fab,ric/fabric.mem";
  s.wake_fd = 7;
  s.num_slots = 2;
  auto a = ulnic::board::qemu_command(s, fixed_paths());
  EXPECT_TRUE(HasOption(a, "-plugin",
                        "file=/opt/ulnic/bin/ulnic-wake.so,sram=/rt/lab/node3/sram,fd=7,slot0=/rt/lab/node3/slot0,"
                        "slot1=/rt/lab/node3/slot1,fabric=/rt/lab/fab,,ric/fabric.mem"));
  EXPECT_EQ(count_containing(a, "-plugin"), 1u);
}

TEST(Launcher, NoWakeConnectionOrNoFabricMeansNoPlugin) {
  BoardSpec s;
  s.fabric_socket = "/f.sock";  // wake_fd -1: the NIC sleeps in WFI
  EXPECT_EQ(count_containing(ulnic::board::qemu_command(s, fixed_paths()), "-plugin"), 0u);
  BoardSpec t;
  t.wake_fd = 7;  // no fabric device, no doorbells to sleep on
  EXPECT_EQ(count_containing(ulnic::board::qemu_command(t, fixed_paths()), "-plugin"), 0u);
}

TEST(Launcher, ExtraArgsAreAppendedVerbatimAtTheEnd) {
  BoardSpec s;
  s.fabric_socket = "/f.sock";
  s.extra_args = {"-d", "guest_errors,unimp", "-S"};
  auto a = ulnic::board::qemu_command(s, fixed_paths());
  ASSERT_GE(a.size(), 3u);
  EXPECT_EQ(Argv(a.end() - 3, a.end()), s.extra_args);
}

TEST(Launcher, CommandUsesPathsFromNodePaths) {
  TempDir t;
  ScopedEnv env("ULNIC_RUNTIME_DIR", t.path());
  auto p = ulnic::board::node_paths("lab", 2);
  auto a = ulnic::board::qemu_command(BoardSpec{}, p);
  EXPECT_TRUE(HasOption(a, "-object",
                        "memory-backend-file,id=sram,size=16M,mem-path=" + t.path() + "/lab/node2/sram,share=on"));
  EXPECT_TRUE(HasOption(a, "-device", "ivshmem-plain,memdev=slot0,addr=0x8"));
  EXPECT_EQ(count_containing(a, t.path() + "/lab/node2/slot"), 8u);
}

// A runtime directory may contain commas (ULNIC_RUNTIME_DIR=/tmp/a,b): every
// path reaches QEMU with QemuOpts' ",," escape.
TEST(Launcher, CommasInPathsAreEscapedForQemu) {
  ScopedEnv env("ULNIC_RUNTIME_DIR", std::string("/tmp/a,b"));
  auto p = ulnic::board::node_paths("lab", 0);
  BoardSpec s;
  s.fabric_socket = "/tmp/a,b/lab/fabric/nic0.sock";
  auto a = ulnic::board::qemu_command(s, p);
  EXPECT_TRUE(HasOption(a, "-object", "memory-backend-file,id=sram,size=16M,mem-path=/tmp/a,,b/lab/node0/sram,share=on"));
  EXPECT_TRUE(HasOption(a, "-chardev", "socket,id=qmp,path=/tmp/a,,b/lab/node0/qmp.sock,server=on,wait=off"));
  EXPECT_TRUE(HasOption(a, "-chardev", "file,id=serial,path=/tmp/a,,b/lab/node0/serial.log"));
  EXPECT_TRUE(HasOption(a, "-chardev", "socket,id=fabric,path=/tmp/a,,b/lab/fabric/nic0.sock"));
  EXPECT_EQ(ulnic::board::qemu_escape("a,b,,c"), "a,,b,,,,c");
}

// ---------------------------------------------------------------- validate

TEST(Launcher, DefaultSpecIsValid) {
  auto r = ulnic::board::validate(BoardSpec{});
  EXPECT_TRUE(r.has_value()) << r.error().message;
}

TEST(Launcher, ValidateAcceptsEightSlotsRejectsNine) {
  BoardSpec s;
  s.num_slots = 8;
  EXPECT_TRUE(ulnic::board::validate(s).has_value());
  s.num_slots = 9;
  EXPECT_TRUE(Contains(validate_error(s), "at most 8 slots"));
}

TEST(Launcher, ValidateAcceptsZeroSlots) {
  BoardSpec s;
  s.num_slots = 0;
  EXPECT_TRUE(ulnic::board::validate(s).has_value());
}

TEST(Launcher, ValidateRejectsNonPowerOfTwoSlotSize) {
  BoardSpec s;
  s.slot_size = 3u << 20;
  EXPECT_TRUE(Contains(validate_error(s), "power of two between 1 MiB and 1 GiB"));
}

TEST(Launcher, ValidateRejectsTooSmallSlotSize) {
  BoardSpec s;
  s.slot_size = 512u << 10;
  EXPECT_TRUE(Contains(validate_error(s), "power of two between 1 MiB and 1 GiB"));
  s.slot_size = 0;
  EXPECT_TRUE(Contains(validate_error(s), "slot size"));
}

TEST(Launcher, ValidateRejectsTooLargeSlotSize) {
  BoardSpec s;
  s.slot_size = 2ull << 30;
  EXPECT_TRUE(Contains(validate_error(s), "power of two between 1 MiB and 1 GiB"));
  s.slot_size = 1ull << 40;
  EXPECT_TRUE(Contains(validate_error(s), "slot size"));
}

TEST(Launcher, ValidateAcceptsSlotSizeBounds) {
  BoardSpec s;
  s.slot_size = 1u << 20;
  EXPECT_TRUE(ulnic::board::validate(s).has_value());
  s.slot_size = 1ull << 30;
  EXPECT_TRUE(ulnic::board::validate(s).has_value());
}

TEST(Launcher, ValidateRejectsNodeSixtyFour) {
  BoardSpec s;
  s.node = 63;
  EXPECT_TRUE(ulnic::board::validate(s).has_value());
  s.node = abi::kMaxNodes;
  EXPECT_TRUE(Contains(validate_error(s), "node id must be below 64"));
  s.node = ~0u;
  EXPECT_TRUE(Contains(validate_error(s), "node id"));
}

TEST(Launcher, ValidateRejectsZeroFabricVectors) {
  BoardSpec s;
  s.fabric_vectors = 0;
  EXPECT_TRUE(Contains(validate_error(s), "fabric vectors must be 1..64"));
}

TEST(Launcher, ValidateRejectsMoreThanSixtyFourFabricVectors) {
  BoardSpec s;
  s.fabric_vectors = 65;
  EXPECT_TRUE(Contains(validate_error(s), "fabric vectors must be 1..64"));
}

TEST(Launcher, ValidateAcceptsFabricVectorBounds) {
  BoardSpec s;
  s.fabric_vectors = 1;
  EXPECT_TRUE(ulnic::board::validate(s).has_value());
  s.fabric_vectors = 64;
  EXPECT_TRUE(ulnic::board::validate(s).has_value());
}

// ---------------------------------------------------------------- find_qemu

TEST(Launcher, MissingQemuNamesTheDebianPackage) {
  auto r = ulnic::board::find_qemu("definitely-not-a-qemu-binary");
  ASSERT_FALSE(r.has_value());
  EXPECT_TRUE(Contains(r.error().message, "definitely-not-a-qemu-binary not found"));
  EXPECT_TRUE(Contains(r.error().message, "qemu-system-misc"));
}

TEST(Launcher, MissingAbsoluteQemuPathNamesTheDebianPackage) {
  auto r = ulnic::board::find_qemu("/nonexistent/bin/qemu-system-riscv64");
  ASSERT_FALSE(r.has_value());
  EXPECT_TRUE(Contains(r.error().message, "qemu-system-misc"));
}

TEST(Launcher, FindQemuSearchesPath) {
  TempDir t;
  const std::string fake = t.path() + "/fake-qemu";
  std::ofstream(fake) << "#!/bin/sh\n";
  ASSERT_EQ(::chmod(fake.c_str(), 0755), 0);
  ScopedEnv env("PATH", t.path());
  auto r = ulnic::board::find_qemu("fake-qemu");
  ASSERT_TRUE(r.has_value()) << r.error().message;
  EXPECT_EQ(*r, fake);
}

TEST(Launcher, FindQemuSkipsNonExecutableFiles) {
  TempDir t;
  const std::string fake = t.path() + "/fake-qemu";
  std::ofstream(fake) << "#!/bin/sh\n";
  ASSERT_EQ(::chmod(fake.c_str(), 0644), 0);
  ScopedEnv env("PATH", t.path());
  auto r = ulnic::board::find_qemu("fake-qemu");
  ASSERT_FALSE(r.has_value());
  EXPECT_TRUE(Contains(r.error().message, "qemu-system-misc"));
}

TEST(Launcher, FindQemuAcceptsExecutableAbsolutePath) {
  TempDir t;
  const std::string fake = t.path() + "/my-qemu";
  std::ofstream(fake) << "#!/bin/sh\n";
  ASSERT_EQ(::chmod(fake.c_str(), 0755), 0);
  ScopedEnv env("PATH", std::string("/nonexistent"));
  auto r = ulnic::board::find_qemu(fake);
  ASSERT_TRUE(r.has_value()) << r.error().message;
  EXPECT_EQ(*r, fake);
}

// ---------------------------------------------------------------- runtime

TEST(Runtime, RuntimeBaseHonoursEnvironment) {
  ScopedEnv env("ULNIC_RUNTIME_DIR", std::string("/some/where"));
  EXPECT_EQ(ulnic::board::runtime_base(), "/some/where");
}

TEST(Runtime, RuntimeBaseDefaultsToDevShmWhenItIsLargeEnough) {
  ScopedEnv env("ULNIC_RUNTIME_DIR", std::nullopt);
  std::string b = ulnic::board::runtime_base();
  struct statvfs st {};
  bool big = ::statvfs("/dev/shm", &st) == 0 && uint64_t(st.f_blocks) * st.f_frsize >= ulnic::kMinShmBytes;
  std::string want = big ? "/dev/shm/ulnic-" : "/tmp/ulnic-";
  EXPECT_EQ(b.rfind(want, 0), 0u) << b;
  EXPECT_GT(b.size(), want.size());
  EXPECT_EQ(ulnic::default_runtime_parent(), big ? "/dev/shm" : "/tmp");
}

TEST(Runtime, EmptyRuntimeDirMeansDefault) {
  ScopedEnv env("ULNIC_RUNTIME_DIR", std::string(""));
  EXPECT_EQ(ulnic::board::runtime_base().rfind(ulnic::default_runtime_parent() + "/ulnic-", 0), 0u);
}

TEST(Runtime, ClusterAndFabricDirsAreUnderRuntimeBase) {
  ScopedEnv env("ULNIC_RUNTIME_DIR", std::string("/rt"));
  EXPECT_EQ(ulnic::board::cluster_dir("lab"), "/rt/lab");
  EXPECT_EQ(ulnic::board::fabric_dir("lab"), "/rt/lab/fabric");
}

TEST(Runtime, NodePathsLayout) {
  ScopedEnv env("ULNIC_RUNTIME_DIR", std::string("/rt"));
  auto p = ulnic::board::node_paths("lab", 3);
  EXPECT_EQ(p.dir, "/rt/lab/node3");
  EXPECT_EQ(p.sram, "/rt/lab/node3/sram");
  EXPECT_EQ(p.qmp, "/rt/lab/node3/qmp.sock");
  EXPECT_EQ(p.gdb, "/rt/lab/node3/gdb.sock");
  EXPECT_EQ(p.serial_log, "/rt/lab/node3/serial.log");
  EXPECT_EQ(p.qemu_log, "/rt/lab/node3/qemu.log");
  EXPECT_EQ(p.pid, "/rt/lab/node3/qemu.pid");
  EXPECT_EQ(p.firmware, "/rt/lab/node3/firmware.elf");
  EXPECT_EQ(p.lock, "/rt/lab/node3.lock");
  EXPECT_EQ(p.slot(0), "/rt/lab/node3/slot0");
  EXPECT_EQ(p.slot(7), "/rt/lab/node3/slot7");
}

TEST(Runtime, NodePathsFollowRuntimeDirChanges) {
  std::string a, b;
  {
    ScopedEnv env("ULNIC_RUNTIME_DIR", std::string("/one"));
    a = ulnic::board::node_paths("c", 0).sram;
  }
  {
    ScopedEnv env("ULNIC_RUNTIME_DIR", std::string("/two"));
    b = ulnic::board::node_paths("c", 0).sram;
  }
  EXPECT_EQ(a, "/one/c/node0/sram");
  EXPECT_EQ(b, "/two/c/node0/sram");
}

TEST(Runtime, DistinctNodesGetDistinctDirs) {
  ScopedEnv env("ULNIC_RUNTIME_DIR", std::string("/rt"));
  EXPECT_NE(ulnic::board::node_paths("lab", 1).dir, ulnic::board::node_paths("lab", 10).dir);
  EXPECT_NE(ulnic::board::node_paths("lab", 1).dir, ulnic::board::node_paths("lab2", 1).dir);
}

TEST(Runtime, ClusterNameAcceptsLettersDigitsDashUnderscore) {
  EXPECT_TRUE(ulnic::board::check_cluster_name("a").has_value());
  EXPECT_TRUE(ulnic::board::check_cluster_name("Lab_2-x").has_value());
  EXPECT_TRUE(ulnic::board::check_cluster_name(std::string(31, 'z')).has_value());
}

TEST(Runtime, ClusterNameMustNotBeEmpty) {
  auto r = ulnic::board::check_cluster_name("");
  ASSERT_FALSE(r.has_value());
  EXPECT_TRUE(Contains(r.error().message, "1..31 characters"));
}

TEST(Runtime, ClusterNameOf32CharactersIsTooLong) {
  auto r = ulnic::board::check_cluster_name(std::string(32, 'z'));
  ASSERT_FALSE(r.has_value());
  EXPECT_TRUE(Contains(r.error().message, "1..31 characters"));
}

TEST(Runtime, ClusterNameRejectsPathCharacters) {
  for (const std::string& bad : std::vector<std::string>{"a/b", "..", ".", "a.b", "/abs", "a b", "a,b", "a\nb", "caf\xc3\xa9", std::string("a\0b", 3)}) {
    auto r = ulnic::board::check_cluster_name(bad);
    ASSERT_FALSE(r.has_value()) << "accepted: " << bad;
    EXPECT_TRUE(Contains(r.error().message, "letters, digits, '-' and '_' only"));
  }
}

TEST(Runtime, ClusterNameStartsWithALetterOrDigit) {
  for (const std::string& bad : std::vector<std::string>{"-", "-n", "--json", "_x"}) {
    auto r = ulnic::board::check_cluster_name(bad);
    ASSERT_FALSE(r.has_value()) << "accepted: " << bad;
    EXPECT_TRUE(Contains(r.error().message, "must start with a letter or digit"));
  }
  EXPECT_TRUE(ulnic::board::check_cluster_name("9-_").has_value());
}

TEST(Runtime, ClusterNameErrorQuotesTheName) {
  auto r = ulnic::board::check_cluster_name("x/y");
  ASSERT_FALSE(r.has_value());
  EXPECT_TRUE(Contains(r.error().message, "'x/y'"));
}

TEST(Runtime, ToolPathHonoursBindir) {
  ScopedEnv env("ULNIC_BINDIR", std::string("/opt/ulnic/bin"));
  EXPECT_EQ(ulnic::board::tool_path("ulnic-fabricd"), "/opt/ulnic/bin/ulnic-fabricd");
}

TEST(Runtime, DefaultFirmwareHonoursEnvOnlyForTheMainImage) {
  ScopedEnv env("ULNIC_FIRMWARE", std::string("/x/custom.elf"));
  EXPECT_EQ(ulnic::board::default_firmware(), "/x/custom.elf");
  std::string alt = ulnic::board::default_firmware("ulnic-fw-alt.elf");
  EXPECT_NE(alt, "/x/custom.elf");
  EXPECT_TRUE(Contains(alt, "/ulnic-fw-alt.elf"));
}

TEST(Runtime, MakeDirsCreatesNestedPrivateDirectories) {
  TempDir t;
  const std::string d = t.path() + "/a/b/c";
  auto r = ulnic::board::make_dirs(d);
  ASSERT_TRUE(r.has_value()) << r.error().message;
  struct stat st {};
  ASSERT_EQ(::stat(d.c_str(), &st), 0);
  EXPECT_TRUE(S_ISDIR(st.st_mode));
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  EXPECT_TRUE(ulnic::board::make_dirs(d).has_value());  // idempotent
}

TEST(Runtime, MakeDirsOverAFileFails) {
  TempDir t;
  const std::string f = t.path() + "/file";
  std::ofstream(f) << "x";
  auto r = ulnic::board::make_dirs(f + "/sub");
  ASSERT_FALSE(r.has_value());
  EXPECT_TRUE(Contains(r.error().message, "cannot create " + f + "/sub"));
}

TEST(Runtime, RemoveTreeDeletesDirectoryUnderRuntimeBase) {
  TempDir t;
  ScopedEnv env("ULNIC_RUNTIME_DIR", t.path() + "/run");
  const std::string victim = t.path() + "/run/lab/node0";
  fs::create_directories(victim);
  std::ofstream(victim + "/sram") << "x";
  ulnic::board::remove_tree(victim);
  EXPECT_FALSE(fs::exists(victim));
  EXPECT_TRUE(fs::exists(t.path() + "/run/lab"));
}

TEST(Runtime, RemoveTreeRefusesPathsOutsideRuntimeBase) {
  TempDir t;
  ScopedEnv env("ULNIC_RUNTIME_DIR", t.path() + "/run");
  fs::create_directories(t.path() + "/run");
  const std::string other = t.path() + "/other";
  fs::create_directories(other);
  ulnic::board::remove_tree(other);
  EXPECT_TRUE(fs::exists(other));
  ulnic::board::remove_tree(t.path() + "/run");  // the base itself
  EXPECT_TRUE(fs::exists(t.path() + "/run"));
}

// "Inside the runtime base" is a path relation, not a string prefix: with
// base "<tmp>/run" the sibling "<tmp>/run-other" must survive.
TEST(Runtime, RemoveTreeRefusesSiblingSharingTheBasePrefix) {
  TempDir t;
  ScopedEnv env("ULNIC_RUNTIME_DIR", t.path() + "/run");
  fs::create_directories(t.path() + "/run");
  const std::string sibling = t.path() + "/run-other";
  fs::create_directories(sibling);
  ulnic::board::remove_tree(sibling);
  EXPECT_TRUE(fs::exists(sibling));
}

// "<base>/../victim" starts with "<base>" but resolves outside it.
TEST(Runtime, RemoveTreeRefusesDotDotEscapes) {
  TempDir t;
  ScopedEnv env("ULNIC_RUNTIME_DIR", t.path() + "/run");
  fs::create_directories(t.path() + "/run");
  const std::string victim = t.path() + "/victim";
  fs::create_directories(victim);
  ulnic::board::remove_tree(t.path() + "/run/../victim");
  EXPECT_TRUE(fs::exists(victim));
}

}  // namespace
