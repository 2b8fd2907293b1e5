// Unit tests for emulator/board/sram: the SRAM file as the trusted tools see
// it. File contents are checked with pread()/pwrite(), independently of the
// SramFile's own mapping.
#include <fcntl.h>
#include <gtest/gtest.h>

#include "test_support.h"
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "board/elf_image.h"
#include "board/sram.h"
#include "ulnic/abi/boot_config.h"
#include "ulnic/abi/sram.h"
#include "ulnic/abi/status.h"

namespace {

namespace abi = ulnic::abi;
namespace fs = std::filesystem;
using ulnic::board::FirmwareImage;
using ulnic::board::Segment;
using ulnic::board::SramFile;

using ulnic_test::Contains;

class SramTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/ulnic-sram-test-XXXXXX";
    const char* d = ::mkdtemp(tmpl);
    ASSERT_NE(d, nullptr);
    dir_ = d;
    path_ = dir_ + "/sram";
  }
  void TearDown() override {
    std::error_code ec;
    if (!dir_.empty()) fs::remove_all(dir_, ec);
  }

  std::vector<uint8_t> pread_file(uint64_t off, size_t n) const {
    std::vector<uint8_t> out(n);
    int fd = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
    EXPECT_GE(fd, 0);
    EXPECT_EQ(::pread(fd, out.data(), n, off_t(off)), ssize_t(n));
    ::close(fd);
    return out;
  }
  void pwrite_file(uint64_t off, const void* p, size_t n) const {
    int fd = ::open(path_.c_str(), O_WRONLY | O_CLOEXEC);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::pwrite(fd, p, n, off_t(off)), ssize_t(n));
    ::close(fd);
  }
  void make_file(uint64_t size) const {
    int fd = ::open(path_.c_str(), O_CREAT | O_TRUNC | O_WRONLY | O_CLOEXEC, 0600);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::ftruncate(fd, off_t(size)), 0);
    ::close(fd);
  }
  uint64_t file_size() const {
    struct stat st {};
    EXPECT_EQ(::stat(path_.c_str(), &st), 0);
    return uint64_t(st.st_size);
  }

  static Segment seg(uint64_t addr, std::vector<uint8_t> data, uint64_t memsz, bool x = false) {
    Segment s;
    s.addr = addr;
    s.data = std::move(data);
    s.memsz = memsz;
    s.executable = x;
    return s;
  }

  std::string dir_, path_;
};

abi::BootConfig sample_config() {
  abi::BootConfig c{};
  c.magic = abi::kBootConfigMagic;
  c.abi_version = ULNIC_ABI_VERSION;
  c.size = sizeof c;
  c.node_id = 5;
  c.num_nodes = 7;
  c.flags = abi::kBootFlagVerbose;
  c.flash_seq = 0x1122334455667788ull;
  c.slot_size = 256ull << 20;
  c.num_slots = 3;
  c.heartbeat_us = 250000;
  c.fabric_size = 64ull << 20;
  std::strncpy(c.cluster, "lab-1", sizeof c.cluster);
  c.flashed_unix_ns = 1700000000123456789ull;
  return c;
}

// ---------------------------------------------------------------- create/open

TEST_F(SramTest, CreateMakesFileOfExactlySramSize) {
  auto f = SramFile::create(path_);
  ASSERT_TRUE(f.has_value()) << f.error().message;
  EXPECT_EQ(file_size(), abi::kSramSize);
}

TEST_F(SramTest, CreatedFileIsAllZero) {
  auto f = SramFile::create(path_);
  ASSERT_TRUE(f.has_value()) << f.error().message;
  auto bytes = pread_file(0, abi::kSramSize);
  EXPECT_TRUE(std::all_of(bytes.begin(), bytes.end(), [](uint8_t b) { return b == 0; }));
}

TEST_F(SramTest, CreateIsPrivateToTheUser) {
  ASSERT_TRUE(SramFile::create(path_).has_value());
  struct stat st {};
  ASSERT_EQ(::stat(path_.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 077, 0u);
}

TEST_F(SramTest, CreateTruncatesAndZeroesAnExistingFile) {
  make_file(20u << 20);
  std::vector<uint8_t> junk(4096, 0xAA);
  pwrite_file(0, junk.data(), junk.size());
  pwrite_file(abi::kStatusOffset, junk.data(), junk.size());
  auto f = SramFile::create(path_);
  ASSERT_TRUE(f.has_value()) << f.error().message;
  EXPECT_EQ(file_size(), abi::kSramSize);
  EXPECT_EQ(pread_file(0, 4096), std::vector<uint8_t>(4096, 0));
  EXPECT_EQ(pread_file(abi::kStatusOffset, 4096), std::vector<uint8_t>(4096, 0));
}

TEST_F(SramTest, CreateInMissingDirectoryFails) {
  const std::string bad = dir_ + "/no/such/dir/sram";
  auto f = SramFile::create(bad);
  ASSERT_FALSE(f.has_value());
  EXPECT_TRUE(Contains(f.error().message, "cannot create SRAM file " + bad));
  EXPECT_TRUE(Contains(f.error().message, "No such file"));
}

TEST_F(SramTest, OpenMissingFileFails) {
  auto f = SramFile::open(path_, false);
  ASSERT_FALSE(f.has_value());
  EXPECT_TRUE(Contains(f.error().message, path_));
  EXPECT_TRUE(Contains(f.error().message, "No such file"));
}

TEST_F(SramTest, OpenTooSmallFileFailsNamingBothSizes) {
  make_file(4096);
  auto f = SramFile::open(path_, true);
  ASSERT_FALSE(f.has_value());
  EXPECT_TRUE(Contains(f.error().message, path_ + " is 4096 bytes"));
  EXPECT_TRUE(Contains(f.error().message, "expected at least 16777216"));
}

TEST_F(SramTest, OpenOneByteShortFileFails) {
  make_file(abi::kSramSize - 1);
  EXPECT_FALSE(SramFile::open(path_, false).has_value());
}

TEST_F(SramTest, OpenEmptyFileFails) {
  make_file(0);
  auto f = SramFile::open(path_, false);
  ASSERT_FALSE(f.has_value());
  EXPECT_TRUE(Contains(f.error().message, "is 0 bytes"));
}

TEST_F(SramTest, OpenDirectoryFails) {
  EXPECT_FALSE(SramFile::open(dir_, false).has_value());
}

TEST_F(SramTest, OpenExistingSramFileReadOnlyWorks) {
  ASSERT_TRUE(SramFile::create(path_).has_value());
  auto f = SramFile::open(path_, false);
  ASSERT_TRUE(f.has_value()) << f.error().message;
  EXPECT_EQ(f->at(0)[0], 0);
}

// ---------------------------------------------------------------- write_image

TEST_F(SramTest, WriteImagePlacesBytesAtAddressMinusSramBase) {
  auto f = SramFile::create(path_);
  ASSERT_TRUE(f.has_value()) << f.error().message;
  FirmwareImage img;
  img.entry = abi::kSramBase;
  img.segments.push_back(seg(abi::kSramBase, {1, 2, 3, 4}, 4, true));
  img.segments.push_back(seg(abi::kSramBase + 0x12345, {5, 6, 7}, 3));
  f->write_image(img);
  EXPECT_EQ(pread_file(0, 4), (std::vector<uint8_t>{1, 2, 3, 4}));
  EXPECT_EQ(pread_file(0x12345, 3), (std::vector<uint8_t>{5, 6, 7}));
  EXPECT_EQ(pread_file(4, 4), std::vector<uint8_t>(4, 0));
}

TEST_F(SramTest, WriteImageZeroesBssTailOverGarbage) {
  make_file(abi::kSramSize);
  std::vector<uint8_t> junk(0x200, 0xAA);
  pwrite_file(0x1000, junk.data(), junk.size());
  auto f = SramFile::open(path_, true);
  ASSERT_TRUE(f.has_value()) << f.error().message;
  FirmwareImage img;
  img.segments.push_back(seg(abi::kSramBase + 0x1000, {9, 8}, 0x100));
  f->write_image(img);
  auto got = pread_file(0x1000, 0x200);
  EXPECT_EQ(got[0], 9);
  EXPECT_EQ(got[1], 8);
  EXPECT_TRUE(std::all_of(got.begin() + 2, got.begin() + 0x100, [](uint8_t b) { return b == 0; }));
  // Nothing past memsz is touched.
  EXPECT_TRUE(std::all_of(got.begin() + 0x100, got.end(), [](uint8_t b) { return b == 0xAA; }));
}

TEST_F(SramTest, WriteImageOfPureBssSegmentOnlyZeroes) {
  make_file(abi::kSramSize);
  std::vector<uint8_t> junk(64, 0x55);
  pwrite_file(0x2000, junk.data(), junk.size());
  auto f = SramFile::open(path_, true);
  ASSERT_TRUE(f.has_value()) << f.error().message;
  FirmwareImage img;
  img.segments.push_back(seg(abi::kSramBase + 0x2000, {}, 32));
  f->write_image(img);
  auto got = pread_file(0x2000, 64);
  EXPECT_EQ(std::vector<uint8_t>(got.begin(), got.begin() + 32), std::vector<uint8_t>(32, 0));
  EXPECT_EQ(std::vector<uint8_t>(got.begin() + 32, got.end()), std::vector<uint8_t>(32, 0x55));
}

TEST_F(SramTest, WriteImageUpToImageLimit) {
  auto f = SramFile::create(path_);
  ASSERT_TRUE(f.has_value()) << f.error().message;
  FirmwareImage img;
  img.segments.push_back(seg(abi::kSramBase + abi::kImageMaxSize - 2, {0xC0, 0xDE}, 2));
  f->write_image(img);
  EXPECT_EQ(pread_file(abi::kImageMaxSize - 2, 2), (std::vector<uint8_t>{0xC0, 0xDE}));
}

TEST_F(SramTest, WriteImageOfRealFirmwareMatchesItsSegments) {
  auto img = ulnic::board::load_elf_file(std::string(ULNIC_TEST_FIRMWARE_DIR) + "/ulnic-fw.elf");
  ASSERT_TRUE(img.has_value()) << img.error().message;
  auto f = SramFile::create(path_);
  ASSERT_TRUE(f.has_value()) << f.error().message;
  f->write_image(*img);
  for (const auto& s : img->segments) {
    auto got = pread_file(s.addr - abi::kSramBase, s.memsz);
    EXPECT_TRUE(std::equal(s.data.begin(), s.data.end(), got.begin())) << std::hex << s.addr;
    EXPECT_TRUE(std::all_of(got.begin() + long(s.data.size()), got.end(), [](uint8_t b) { return b == 0; }));
  }
}

TEST_F(SramTest, WriteImageLeavesBootConfigAlone) {
  auto f = SramFile::create(path_);
  ASSERT_TRUE(f.has_value()) << f.error().message;
  auto cfg = sample_config();
  f->write_boot_config(cfg);
  FirmwareImage img;
  img.segments.push_back(seg(abi::kSramBase, {1, 2, 3}, 0x10000));
  f->write_image(img);
  auto back = f->boot_config();
  EXPECT_EQ(std::memcmp(&back, &cfg, sizeof cfg), 0);
}

// ---------------------------------------------------------------- boot config

TEST_F(SramTest, BootConfigOfFreshFileIsZero) {
  auto f = SramFile::create(path_);
  ASSERT_TRUE(f.has_value()) << f.error().message;
  abi::BootConfig zero{};
  auto c = f->boot_config();
  EXPECT_EQ(std::memcmp(&c, &zero, sizeof c), 0);
}

TEST_F(SramTest, BootConfigRoundTrips) {
  auto f = SramFile::create(path_);
  ASSERT_TRUE(f.has_value()) << f.error().message;
  auto cfg = sample_config();
  f->write_boot_config(cfg);
  auto back = f->boot_config();
  EXPECT_EQ(std::memcmp(&back, &cfg, sizeof cfg), 0);
  EXPECT_EQ(back.node_id, 5u);
  EXPECT_STREQ(back.cluster, "lab-1");
}

TEST_F(SramTest, BootConfigLandsAtItsOffsetInTheFile) {
  auto f = SramFile::create(path_);
  ASSERT_TRUE(f.has_value()) << f.error().message;
  auto cfg = sample_config();
  f->write_boot_config(cfg);
  auto raw = pread_file(abi::kBootConfigOffset, sizeof cfg);
  EXPECT_EQ(std::memcmp(raw.data(), &cfg, sizeof cfg), 0);
  // The block is little-endian on disk: the magic reads "UBCF".
  EXPECT_EQ(std::string(raw.begin(), raw.begin() + 4), "UBCF");
}

TEST_F(SramTest, BootConfigSurvivesReopen) {
  auto cfg = sample_config();
  {
    auto f = SramFile::create(path_);
    ASSERT_TRUE(f.has_value()) << f.error().message;
    f->write_boot_config(cfg);
  }
  auto f = SramFile::open(path_, false);
  ASSERT_TRUE(f.has_value()) << f.error().message;
  auto back = f->boot_config();
  EXPECT_EQ(std::memcmp(&back, &cfg, sizeof cfg), 0);
}

TEST_F(SramTest, BootConfigOverwriteReplacesOldValue) {
  auto f = SramFile::create(path_);
  ASSERT_TRUE(f.has_value()) << f.error().message;
  auto cfg = sample_config();
  f->write_boot_config(cfg);
  cfg.flash_seq = 2;
  std::strncpy(cfg.cluster, "b", sizeof cfg.cluster);
  f->write_boot_config(cfg);
  EXPECT_EQ(f->boot_config().flash_seq, 2u);
  EXPECT_STREQ(f->boot_config().cluster, "b");
}

// ---------------------------------------------------------------- status

TEST_F(SramTest, ReadStatusOfFreshFileIsZero) {
  auto f = SramFile::create(path_);
  ASSERT_TRUE(f.has_value()) << f.error().message;
  auto st = f->read_status();
  abi::StatusBlock zero{};
  EXPECT_EQ(std::memcmp(&st, &zero, sizeof st), 0);
  EXPECT_EQ(st.state, uint32_t(abi::FwState::kOff));
}

TEST_F(SramTest, ReadStatusReturnsStatusBlockFromFile) {
  ASSERT_TRUE(SramFile::create(path_).has_value());
  abi::StatusBlock sb{};
  sb.magic = abi::kStatusMagic;
  sb.abi_version = ULNIC_ABI_VERSION;
  sb.state = uint32_t(abi::FwState::kCrashed);
  sb.boot_config = abi::kBootConfigMissing;
  std::strncpy(sb.build_id, "0123456789abcdef0123456789abcdef01234567", sizeof sb.build_id);
  std::strncpy(sb.version, "ulnic-fw 1.2", sizeof sb.version);
  sb.boot_count = 3;
  sb.heartbeat = 77;
  sb.node_id = 2;
  sb.trap_pc = 0x80000123;
  sb.slots[7].bar_size = 1 << 20;
  sb.counters[abi::kCtrWfi] = 99;
  pwrite_file(abi::kStatusOffset, &sb, sizeof sb);

  auto f = SramFile::open(path_, false);
  ASSERT_TRUE(f.has_value()) << f.error().message;
  auto st = f->read_status();
  EXPECT_EQ(std::memcmp(&st, &sb, sizeof st), 0);
  EXPECT_EQ(st.state, uint32_t(abi::FwState::kCrashed));
  EXPECT_STREQ(st.version, "ulnic-fw 1.2");
  EXPECT_EQ(st.trap_pc, 0x80000123u);
  EXPECT_EQ(st.counters[abi::kCtrWfi], 99u);
}

TEST_F(SramTest, ReadStatusSeesWritesThroughAnotherMapping) {
  auto writer = SramFile::create(path_);
  ASSERT_TRUE(writer.has_value()) << writer.error().message;
  auto reader = SramFile::open(path_, false);
  ASSERT_TRUE(reader.has_value()) << reader.error().message;
  auto* sb = reinterpret_cast<abi::StatusBlock*>(writer->at(abi::kStatusOffset));
  sb->magic = abi::kStatusMagic;
  sb->state = uint32_t(abi::FwState::kRunning);
  sb->heartbeat = 12345;
  auto st = reader->read_status();
  EXPECT_EQ(st.magic, abi::kStatusMagic);
  EXPECT_EQ(st.state, uint32_t(abi::FwState::kRunning));
  EXPECT_EQ(st.heartbeat, 12345u);
}

TEST_F(SramTest, StatusAndBootConfigDoNotAlias) {
  auto f = SramFile::create(path_);
  ASSERT_TRUE(f.has_value()) << f.error().message;
  f->write_boot_config(sample_config());
  auto st = f->read_status();
  EXPECT_EQ(st.magic, 0u);
}

TEST_F(SramTest, AtIsOffsetIntoTheSharedFile) {
  auto f = SramFile::create(path_);
  ASSERT_TRUE(f.has_value()) << f.error().message;
  f->at(abi::kCtrlOffset)[0] = 0x5A;
  f->at(abi::kSramSize - 1)[0] = 0xA5;
  EXPECT_EQ(pread_file(abi::kCtrlOffset, 1)[0], 0x5A);
  EXPECT_EQ(pread_file(abi::kSramSize - 1, 1)[0], 0xA5);
}

}  // namespace
