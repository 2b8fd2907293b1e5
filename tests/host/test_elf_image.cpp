// Unit tests for emulator/board/elf_image: parse_elf() and load_elf_file().
// Bad images are assembled in memory from <elf.h> structures so each test
// breaks exactly one rule of the NIC's SRAM layout.
#include <elf.h>
#include <fcntl.h>
#include <gtest/gtest.h>

#include "test_support.h"
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "board/elf_image.h"
#include "ulnic/abi/sram.h"

namespace {

namespace abi = ulnic::abi;
namespace fs = std::filesystem;
using ulnic::board::FirmwareImage;
using ulnic::board::kMaxElfFileBytes;
using ulnic::board::load_elf_file;
using ulnic::board::parse_elf;

const std::string kFwDir = ULNIC_TEST_FIRMWARE_DIR;

// Succeeds if `needle` occurs in `hay`; either way the message shows both.
using ulnic_test::Contains;

// One program header of a synthetic ELF; `data` is placed in the file and
// p_offset/p_filesz are filled in by build_elf().
struct SegSpec {
  uint32_t type = PT_LOAD;
  uint32_t flags = PF_R | PF_X;
  uint64_t paddr = abi::kSramBase;
  std::vector<uint8_t> data = std::vector<uint8_t>(16, 0x13);  // RISC-V nops-ish
  uint64_t memsz = 0;  // 0 = data.size()
};

using Tweak = std::function<void(Elf64_Ehdr&, std::vector<Elf64_Phdr>&)>;

// Ehdr at 0, program headers right after it, then each segment's bytes
// (8-byte aligned). `tweak` may break any field after the layout is computed.
std::vector<uint8_t> build_elf(const std::vector<SegSpec>& segs, const Tweak& tweak = {}) {
  Elf64_Ehdr eh{};
  std::memcpy(eh.e_ident, ELFMAG, SELFMAG);
  eh.e_ident[EI_CLASS] = ELFCLASS64;
  eh.e_ident[EI_DATA] = ELFDATA2LSB;
  eh.e_ident[EI_VERSION] = EV_CURRENT;
  eh.e_type = ET_EXEC;
  eh.e_machine = EM_RISCV;
  eh.e_version = EV_CURRENT;
  eh.e_entry = abi::kFirmwareEntry;
  eh.e_phoff = sizeof(Elf64_Ehdr);
  eh.e_ehsize = sizeof(Elf64_Ehdr);
  eh.e_phentsize = sizeof(Elf64_Phdr);
  eh.e_phnum = uint16_t(segs.size());

  std::vector<Elf64_Phdr> ph(segs.size());
  uint64_t off = sizeof(Elf64_Ehdr) + segs.size() * sizeof(Elf64_Phdr);
  for (size_t i = 0; i < segs.size(); ++i) {
    off = (off + 7) & ~7ull;
    ph[i].p_type = segs[i].type;
    ph[i].p_flags = segs[i].flags;
    ph[i].p_offset = off;
    ph[i].p_vaddr = ph[i].p_paddr = segs[i].paddr;
    ph[i].p_filesz = segs[i].data.size();
    ph[i].p_memsz = segs[i].memsz ? segs[i].memsz : segs[i].data.size();
    ph[i].p_align = 8;
    off += segs[i].data.size();
  }
  const std::vector<Elf64_Phdr> laid_out = ph;  // where the payload really goes
  if (tweak) tweak(eh, ph);

  std::vector<uint8_t> out(off, 0);
  for (size_t i = 0; i < segs.size(); ++i)
    std::copy(segs[i].data.begin(), segs[i].data.end(), out.begin() + long(laid_out[i].p_offset));
  std::memcpy(out.data(), &eh, sizeof eh);
  const size_t phbytes = std::min<size_t>(ph.size() * sizeof(Elf64_Phdr), out.size() - sizeof eh);
  std::memcpy(out.data() + sizeof eh, ph.data(), phbytes);
  return out;
}

// A GNU build-id note with the given descriptor bytes.
std::vector<uint8_t> build_id_note(const std::vector<uint8_t>& id) {
  Elf64_Nhdr n{};
  n.n_namesz = 4;
  n.n_descsz = uint32_t(id.size());
  n.n_type = NT_GNU_BUILD_ID;
  std::vector<uint8_t> out(sizeof n + 4 + ((id.size() + 3) & ~size_t(3)), 0);
  std::memcpy(out.data(), &n, sizeof n);
  std::memcpy(out.data() + sizeof n, "GNU", 4);
  std::copy(id.begin(), id.end(), out.begin() + long(sizeof n + 4));
  return out;
}

std::string error_of(const std::vector<uint8_t>& bytes, const std::string& name = "fw.elf") {
  auto r = parse_elf(bytes, name);
  EXPECT_FALSE(r.has_value()) << "image was accepted";
  return r ? std::string() : r.error().message;
}

std::vector<uint8_t> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

bool is_hex(const std::string& s) {
  return std::all_of(s.begin(), s.end(), [](char c) { return std::isxdigit(static_cast<unsigned char>(c)); });
}

using ulnic_test::TempDir;

// ---------------------------------------------------------------- real firmware

TEST(ElfImage, RealFirmwareParses) {
  auto img = load_elf_file(kFwDir + "/ulnic-fw.elf");
  ASSERT_TRUE(img.has_value()) << img.error().message;
  EXPECT_EQ(img->entry, 0x80000000u);
  EXPECT_EQ(img->path, kFwDir + "/ulnic-fw.elf");
  ASSERT_FALSE(img->segments.empty());
  EXPECT_TRUE(std::any_of(img->segments.begin(), img->segments.end(), [](auto& s) { return s.executable; }));
  EXPECT_LE(img->end, abi::kSramBase + abi::kImageMaxSize);
}

TEST(ElfImage, RealFirmwareSegmentsAreSortedAndInsideImageArea) {
  auto img = load_elf_file(kFwDir + "/ulnic-fw.elf");
  ASSERT_TRUE(img.has_value()) << img.error().message;
  for (size_t i = 0; i < img->segments.size(); ++i) {
    const auto& s = img->segments[i];
    EXPECT_GE(s.addr, abi::kSramBase);
    EXPECT_LE(s.data.size(), s.memsz);
    EXPECT_LE(s.addr + s.memsz, abi::kSramBase + abi::kImageMaxSize);
    if (i > 0) {
      EXPECT_LE(img->segments[i - 1].addr + img->segments[i - 1].memsz, s.addr);
    }
  }
  EXPECT_EQ(img->end, img->segments.back().addr + img->segments.back().memsz);
}

TEST(ElfImage, RealFirmwareHasFortyHexCharBuildId) {
  auto img = load_elf_file(kFwDir + "/ulnic-fw.elf");
  ASSERT_TRUE(img.has_value()) << img.error().message;
  EXPECT_EQ(img->build_id.size(), 40u) << img->build_id;
  EXPECT_TRUE(is_hex(img->build_id)) << img->build_id;
}

TEST(ElfImage, BuildIdIsStableAcrossParses) {
  auto a = load_elf_file(kFwDir + "/ulnic-fw.elf");
  auto bytes = read_file(kFwDir + "/ulnic-fw.elf");
  auto b = parse_elf(bytes, "copy");
  ASSERT_TRUE(a.has_value()) << a.error().message;
  ASSERT_TRUE(b.has_value()) << b.error().message;
  EXPECT_FALSE(a->build_id.empty());
  EXPECT_EQ(a->build_id, b->build_id);
}

TEST(ElfImage, AltFirmwareHasDifferentBuildId) {
  auto fw = load_elf_file(kFwDir + "/ulnic-fw.elf");
  auto alt = load_elf_file(kFwDir + "/ulnic-fw-alt.elf");
  ASSERT_TRUE(fw.has_value()) << fw.error().message;
  ASSERT_TRUE(alt.has_value()) << alt.error().message;
  EXPECT_EQ(alt->build_id.size(), 40u);
  EXPECT_NE(fw->build_id, alt->build_id);
}

TEST(ElfImage, CrashtestFirmwareParses) {
  auto img = load_elf_file(kFwDir + "/ulnic-fw-crashtest.elf");
  ASSERT_TRUE(img.has_value()) << img.error().message;
  EXPECT_EQ(img->entry, abi::kFirmwareEntry);
}

// ---------------------------------------------------------------- good synthetic

TEST(ElfImage, MinimalSyntheticImageParses) {
  auto img = parse_elf(build_elf({SegSpec{}}), "mini.elf");
  ASSERT_TRUE(img.has_value()) << img.error().message;
  EXPECT_EQ(img->path, "mini.elf");
  ASSERT_EQ(img->segments.size(), 1u);
  EXPECT_EQ(img->segments[0].addr, abi::kSramBase);
  EXPECT_EQ(img->segments[0].data, std::vector<uint8_t>(16, 0x13));
  EXPECT_TRUE(img->segments[0].executable);
  EXPECT_EQ(img->end, abi::kSramBase + 16);
  EXPECT_EQ(img->build_id, "");
}

TEST(ElfImage, SegmentsWithBssAreSortedByAddress) {
  SegSpec text;  // listed last in the program headers
  SegSpec data{.type = PT_LOAD, .flags = PF_R | PF_W, .paddr = abi::kSramBase + 0x2000,
               .data = {1, 2, 3, 4}, .memsz = 0x100};
  SegSpec ro{.type = PT_LOAD, .flags = PF_R, .paddr = abi::kSramBase + 0x1000, .data = {9, 9}, .memsz = 0};
  auto img = parse_elf(build_elf({data, ro, text}), "bss.elf");
  ASSERT_TRUE(img.has_value()) << img.error().message;
  ASSERT_EQ(img->segments.size(), 3u);
  EXPECT_EQ(img->segments[0].addr, abi::kSramBase);
  EXPECT_EQ(img->segments[1].addr, abi::kSramBase + 0x1000);
  EXPECT_EQ(img->segments[2].addr, abi::kSramBase + 0x2000);
  EXPECT_EQ(img->segments[2].data, (std::vector<uint8_t>{1, 2, 3, 4}));
  EXPECT_EQ(img->segments[2].memsz, 0x100u);
  EXPECT_FALSE(img->segments[2].executable);
  EXPECT_EQ(img->end, abi::kSramBase + 0x2100);
}

TEST(ElfImage, SegmentEndingExactlyAtImageLimitIsAccepted) {
  SegSpec bss{.type = PT_LOAD, .flags = PF_R | PF_W, .paddr = abi::kSramBase + 0x1000, .data = {},
              .memsz = abi::kImageMaxSize - 0x1000};
  auto img = parse_elf(build_elf({SegSpec{}, bss}), "full.elf");
  ASSERT_TRUE(img.has_value()) << img.error().message;
  EXPECT_EQ(img->end, abi::kSramBase + abi::kImageMaxSize);
}

TEST(ElfImage, AdjacentSegmentsDoNotCountAsOverlap) {
  SegSpec next{.type = PT_LOAD, .flags = PF_R, .paddr = abi::kSramBase + 16, .data = {7}, .memsz = 0};
  auto img = parse_elf(build_elf({SegSpec{}, next}), "adj.elf");
  EXPECT_TRUE(img.has_value()) << img.error().message;
}

TEST(ElfImage, NonLoadAndEmptySegmentsAreIgnored) {
  SegSpec stack{.type = PT_GNU_STACK, .flags = PF_R | PF_W, .paddr = 0, .data = {}, .memsz = 0};
  SegSpec empty_load{.type = PT_LOAD, .flags = PF_R, .paddr = 0x1000, .data = {}, .memsz = 0};
  auto img = parse_elf(build_elf({stack, SegSpec{}, empty_load}), "x.elf");
  ASSERT_TRUE(img.has_value()) << img.error().message;
  EXPECT_EQ(img->segments.size(), 1u);
}

TEST(ElfImage, BuildIdIsReadFromNoteSegment) {
  SegSpec note{.type = PT_NOTE, .flags = PF_R, .paddr = 0, .data = build_id_note({0xde, 0xad, 0x01, 0xf0}),
               .memsz = 0};
  auto img = parse_elf(build_elf({SegSpec{}, note}), "note.elf");
  ASSERT_TRUE(img.has_value()) << img.error().message;
  EXPECT_EQ(img->build_id, "dead01f0");
}

TEST(ElfImage, TruncatedNoteGivesEmptyBuildIdNotACrash) {
  auto note_bytes = build_id_note(std::vector<uint8_t>(20, 0xab));
  SegSpec note{.type = PT_NOTE, .flags = PF_R, .paddr = 0, .data = note_bytes, .memsz = 0};
  auto img = parse_elf(build_elf({SegSpec{}, note},
                                 [](Elf64_Ehdr&, std::vector<Elf64_Phdr>& ph) {
                                   ph[1].p_filesz = 16;  // cuts the descriptor short
                                 }),
                       "note.elf");
  ASSERT_TRUE(img.has_value()) << img.error().message;
  EXPECT_EQ(img->build_id, "");
}

TEST(ElfImage, NoteWithHugeSizeDoesNotCrash) {
  SegSpec note{.type = PT_NOTE, .flags = PF_R, .paddr = 0, .data = build_id_note({1, 2}), .memsz = 0};
  auto img = parse_elf(build_elf({SegSpec{}, note},
                                 [](Elf64_Ehdr&, std::vector<Elf64_Phdr>& ph) { ph[1].p_filesz = ~0ull; }),
                       "note.elf");
  EXPECT_TRUE(img.has_value()) << img.error().message;
}

TEST(ElfImage, SixtyFourProgramHeadersAreAccepted) {
  std::vector<SegSpec> segs(64, SegSpec{.type = PT_NULL, .flags = 0, .paddr = 0, .data = {}, .memsz = 0});
  segs[0] = SegSpec{};
  auto img = parse_elf(build_elf(segs), "many.elf");
  EXPECT_TRUE(img.has_value()) << img.error().message;
}

// ---------------------------------------------------------------- bad headers

TEST(ElfImage, EmptyInputIsNotAnElf) {
  std::string e = error_of({}, "empty.elf");
  EXPECT_TRUE(Contains(e, "empty.elf"));
  EXPECT_TRUE(Contains(e, "not an ELF file"));
  EXPECT_TRUE(Contains(e, "only 0 bytes"));
}

TEST(ElfImage, InputShorterThanHeaderIsNotAnElf) {
  auto bytes = build_elf({SegSpec{}});
  bytes.resize(sizeof(Elf64_Ehdr) - 1);
  std::string e = error_of(bytes);
  EXPECT_TRUE(Contains(e, "not an ELF file"));
  EXPECT_TRUE(Contains(e, "only 63 bytes"));
}

TEST(ElfImage, BadMagicIsNotAnElf) {
  auto bytes = build_elf({SegSpec{}});
  bytes[1] = 'X';
  EXPECT_TRUE(Contains(error_of(bytes, "junk.bin"), "junk.bin: not an ELF file"));
}

TEST(ElfImage, Elf32IsRejected) {
  auto bytes = build_elf({SegSpec{}}, [](Elf64_Ehdr& eh, auto&) { eh.e_ident[EI_CLASS] = ELFCLASS32; });
  std::string e = error_of(bytes);
  EXPECT_TRUE(Contains(e, "32-bit"));
  EXPECT_TRUE(Contains(e, "ELFCLASS64"));
}

TEST(ElfImage, BigEndianIsRejected) {
  auto bytes = build_elf({SegSpec{}}, [](Elf64_Ehdr& eh, auto&) { eh.e_ident[EI_DATA] = ELFDATA2MSB; });
  EXPECT_TRUE(Contains(error_of(bytes), "big-endian"));
}

TEST(ElfImage, X86_64MachineIsNotRiscV) {
  auto bytes = build_elf({SegSpec{}}, [](Elf64_Ehdr& eh, auto&) { eh.e_machine = EM_X86_64; });
  std::string e = error_of(bytes);
  EXPECT_TRUE(Contains(e, "x86-64"));
  EXPECT_TRUE(Contains(e, "e_machine 62"));
  EXPECT_TRUE(Contains(e, "not RISC-V"));
}

TEST(ElfImage, AArch64MachineIsNotRiscV) {
  auto bytes = build_elf({SegSpec{}}, [](Elf64_Ehdr& eh, auto&) { eh.e_machine = EM_AARCH64; });
  std::string e = error_of(bytes);
  EXPECT_TRUE(Contains(e, "AArch64"));
  EXPECT_TRUE(Contains(e, "not RISC-V"));
}

TEST(ElfImage, UnknownMachineIsNotRiscV) {
  auto bytes = build_elf({SegSpec{}}, [](Elf64_Ehdr& eh, auto&) { eh.e_machine = 0x1234; });
  std::string e = error_of(bytes);
  EXPECT_TRUE(Contains(e, "another machine"));
  EXPECT_TRUE(Contains(e, "not RISC-V"));
}

TEST(ElfImage, SharedObjectIsNotAnExecutable) {
  auto bytes = build_elf({SegSpec{}}, [](Elf64_Ehdr& eh, auto&) { eh.e_type = ET_DYN; });
  std::string e = error_of(bytes);
  EXPECT_TRUE(Contains(e, "not an executable"));
  EXPECT_TRUE(Contains(e, "e_type 3"));
}

TEST(ElfImage, RelocatableObjectIsNotAnExecutable) {
  auto bytes = build_elf({SegSpec{}}, [](Elf64_Ehdr& eh, auto&) { eh.e_type = ET_REL; });
  EXPECT_TRUE(Contains(error_of(bytes), "not an executable"));
}

TEST(ElfImage, WrongProgramHeaderEntrySizeIsRejected) {
  auto bytes = build_elf({SegSpec{}}, [](Elf64_Ehdr& eh, auto&) { eh.e_phentsize = sizeof(Elf32_Phdr); });
  EXPECT_TRUE(Contains(error_of(bytes), "unexpected program header size"));
}

TEST(ElfImage, ZeroProgramHeadersAreRejected) {
  auto bytes = build_elf({SegSpec{}}, [](Elf64_Ehdr& eh, auto&) { eh.e_phnum = 0; });
  EXPECT_TRUE(Contains(error_of(bytes), ": 0 program headers"));
}

TEST(ElfImage, TooManyProgramHeadersAreRejected) {
  auto bytes = build_elf({SegSpec{}}, [](Elf64_Ehdr& eh, auto&) { eh.e_phnum = 65; });
  EXPECT_TRUE(Contains(error_of(bytes), ": 65 program headers"));
}

TEST(ElfImage, ProgramHeadersRunningPastEndOfFileAreRejected) {
  auto bytes = build_elf({SegSpec{}}, [](Elf64_Ehdr& eh, auto&) { eh.e_phnum = 40; });
  std::string e = error_of(bytes);
  EXPECT_TRUE(Contains(e, "program headers lie outside the file"));
  EXPECT_TRUE(Contains(e, "truncated?"));
}

TEST(ElfImage, ProgramHeaderOffsetBeyondFileIsRejected) {
  auto bytes = build_elf({SegSpec{}}, [](Elf64_Ehdr& eh, auto&) { eh.e_phoff = 1ull << 40; });
  EXPECT_TRUE(Contains(error_of(bytes), "program headers lie outside the file"));
}

TEST(ElfImage, ProgramHeaderOffsetNearMaxDoesNotWrap) {
  auto bytes = build_elf({SegSpec{}}, [](Elf64_Ehdr& eh, auto&) { eh.e_phoff = ~0ull - 8; });
  EXPECT_TRUE(Contains(error_of(bytes), "program headers lie outside the file"));
}

// ---------------------------------------------------------------- bad placement

TEST(ElfImage, SegmentBelowSramIsOutside) {
  SegSpec s;
  s.paddr = abi::kSramBase - 0x1000;
  std::string e = error_of(build_elf({s}));
  EXPECT_TRUE(Contains(e, "segment 0 [0x7ffff000, +16 bytes)"));
  EXPECT_TRUE(Contains(e, "outside"));
  EXPECT_TRUE(Contains(e, "[0x80000000, 0x81000000)"));
}

TEST(ElfImage, SegmentAtAddressZeroIsOutside) {
  SegSpec s;
  s.paddr = 0;
  EXPECT_TRUE(Contains(error_of(build_elf({s})), "outside"));
}

TEST(ElfImage, SegmentAboveSramIsOutside) {
  SegSpec s;
  s.paddr = abi::kSramBase + abi::kSramSize;
  std::string e = error_of(build_elf({SegSpec{}, s}));
  EXPECT_TRUE(Contains(e, "segment 1"));
  EXPECT_TRUE(Contains(e, "outside"));
}

TEST(ElfImage, SegmentFarAboveSramIsOutside) {
  SegSpec s;
  s.paddr = 0x1'0000'0000ull;
  EXPECT_TRUE(Contains(error_of(build_elf({SegSpec{}, s})), "outside"));
}

TEST(ElfImage, SegmentStraddlingImageLimitIsTooBig) {
  SegSpec s{.type = PT_LOAD, .flags = PF_R | PF_W, .paddr = abi::kSramBase + abi::kImageMaxSize - 0x10,
            .data = {}, .memsz = 0x20};
  std::string e = error_of(build_elf({SegSpec{}, s}));
  EXPECT_TRUE(Contains(e, "too big"));
  EXPECT_TRUE(Contains(e, "ends at 0x80f00010"));
  EXPECT_TRUE(Contains(e, "15360 KiB"));
  EXPECT_TRUE(Contains(e, "0x80f00000"));
}

TEST(ElfImage, OneByteOverImageLimitIsTooBig) {
  SegSpec s{.type = PT_LOAD, .flags = PF_R | PF_W, .paddr = abi::kSramBase + 0x1000, .data = {},
            .memsz = abi::kImageMaxSize - 0x1000 + 1};
  EXPECT_TRUE(Contains(error_of(build_elf({SegSpec{}, s})), "too big"));
}

TEST(ElfImage, SegmentInReservedSramAreaIsRejected) {
  // Inside SRAM but in the boot-config block, past the firmware area.
  SegSpec s{.type = PT_LOAD, .flags = PF_R, .paddr = abi::kSramBase + abi::kBootConfigOffset, .data = {1},
            .memsz = 0};
  EXPECT_TRUE(Contains(error_of(build_elf({SegSpec{}, s})), "firmware area"));
}

TEST(ElfImage, MoreFileBytesThanMemoryBytesIsRejected) {
  auto bytes = build_elf({SegSpec{}}, [](Elf64_Ehdr&, std::vector<Elf64_Phdr>& ph) { ph[0].p_memsz = 8; });
  EXPECT_TRUE(Contains(error_of(bytes), "more file bytes than memory bytes"));
}

// p_filesz > 0 with p_memsz == 0 is as malformed as any p_filesz > p_memsz,
// even though an empty segment is otherwise skipped.
TEST(ElfImage, FileBytesWithZeroMemorySizeIsRejected) {
  SegSpec extra{.type = PT_LOAD, .flags = PF_R, .paddr = abi::kSramBase + 0x1000, .data = {1, 2, 3, 4},
                .memsz = 0};
  auto bytes = build_elf({SegSpec{}, extra},
                         [](Elf64_Ehdr&, std::vector<Elf64_Phdr>& ph) { ph[1].p_memsz = 0; });
  EXPECT_TRUE(Contains(error_of(bytes), "more file bytes than memory bytes"));
}

TEST(ElfImage, AddressWrapAroundIsRejected) {
  auto bytes = build_elf({SegSpec{}}, [](Elf64_Ehdr&, std::vector<Elf64_Phdr>& ph) {
    ph[0].p_memsz = ~0ull - abi::kSramBase + 2;  // paddr + memsz == 1 (mod 2^64)
  });
  EXPECT_TRUE(Contains(error_of(bytes), "wraps around"));
}

TEST(ElfImage, SegmentFileBytesPastEndOfFileAreTruncated) {
  auto bytes = build_elf({SegSpec{}}, [](Elf64_Ehdr&, std::vector<Elf64_Phdr>& ph) {
    ph[0].p_filesz = ph[0].p_memsz = 4096;
  });
  std::string e = error_of(bytes);
  EXPECT_TRUE(Contains(e, "segment 0 file bytes lie outside the file"));
  EXPECT_TRUE(Contains(e, "truncated?"));
}

TEST(ElfImage, SegmentOffsetPastEndOfFileIsTruncated) {
  auto bytes = build_elf({SegSpec{}}, [](Elf64_Ehdr&, std::vector<Elf64_Phdr>& ph) { ph[0].p_offset = 1 << 20; });
  EXPECT_TRUE(Contains(error_of(bytes), "lie outside the file"));
}

TEST(ElfImage, SegmentOffsetPlusSizeOverflowIsTruncated) {
  auto bytes = build_elf({SegSpec{}}, [](Elf64_Ehdr&, std::vector<Elf64_Phdr>& ph) {
    ph[0].p_offset = 8;
    ph[0].p_filesz = ph[0].p_memsz = 0x100000;  // fits in SRAM, not in the file
  });
  EXPECT_TRUE(Contains(error_of(bytes), "lie outside the file"));
}

TEST(ElfImage, OverlappingSegmentsAreRejected) {
  SegSpec b{.type = PT_LOAD, .flags = PF_R, .paddr = abi::kSramBase + 8, .data = {1, 2, 3, 4}, .memsz = 0};
  std::string e = error_of(build_elf({SegSpec{}, b}));
  EXPECT_TRUE(Contains(e, "overlap"));
  EXPECT_TRUE(Contains(e, "0x80000008"));
}

TEST(ElfImage, OverlapIsFoundWhenHeadersAreUnsorted) {
  SegSpec bss{.type = PT_LOAD, .flags = PF_R | PF_W, .paddr = abi::kSramBase + 0x1000, .data = {},
              .memsz = 0x1000};
  SegSpec inside{.type = PT_LOAD, .flags = PF_R, .paddr = abi::kSramBase + 0x1800, .data = {5}, .memsz = 0};
  EXPECT_TRUE(Contains(error_of(build_elf({inside, SegSpec{}, bss})), "overlap at 0x80001800"));
}

TEST(ElfImage, NoLoadableSegmentIsRejected) {
  SegSpec note{.type = PT_NOTE, .flags = PF_R, .paddr = 0, .data = build_id_note({1}), .memsz = 0};
  EXPECT_TRUE(Contains(error_of(build_elf({note})), "no loadable segments"));
}

TEST(ElfImage, OnlyEmptyLoadSegmentsCountAsNoLoadableSegments) {
  SegSpec empty{.type = PT_LOAD, .flags = PF_R | PF_X, .paddr = abi::kSramBase, .data = {}, .memsz = 0};
  EXPECT_TRUE(Contains(error_of(build_elf({empty})), "no loadable segments"));
}

// ---------------------------------------------------------------- bad entry

TEST(ElfImage, EntryNotAtSramBaseIsRejected) {
  auto bytes = build_elf({SegSpec{}}, [](Elf64_Ehdr& eh, auto&) { eh.e_entry = abi::kSramBase + 4; });
  std::string e = error_of(bytes);
  EXPECT_TRUE(Contains(e, "entry point 0x80000004 is not 0x80000000"));
  EXPECT_TRUE(Contains(e, "reset vector"));
}

TEST(ElfImage, EntryInNonExecutableSegmentIsRejected) {
  SegSpec data;
  data.flags = PF_R | PF_W;
  std::string e = error_of(build_elf({data}));
  EXPECT_TRUE(Contains(e, "no executable segment contains the entry point 0x80000000"));
}

TEST(ElfImage, EntryNotCoveredByAnySegmentIsRejected) {
  SegSpec text;
  text.paddr = abi::kSramBase + 0x1000;
  EXPECT_TRUE(Contains(error_of(build_elf({text})), "no executable segment contains the entry point"));
}

TEST(ElfImage, EntryInExecutableBssOnlyIsRejected) {
  // Executable but with no file bytes at the entry: it would run zeros.
  SegSpec text{.type = PT_LOAD, .flags = PF_R | PF_X, .paddr = abi::kSramBase, .data = {}, .memsz = 64};
  EXPECT_TRUE(Contains(error_of(build_elf({text})), "no executable segment contains the entry point"));
}

// ---------------------------------------------------------------- load_elf_file

TEST(ElfImage, LoadMissingFileFails) {
  TempDir t;
  const std::string path = t.path() + "/nope.elf";
  auto r = load_elf_file(path);
  ASSERT_FALSE(r.has_value());
  EXPECT_TRUE(Contains(r.error().message, "cannot read firmware " + path));
  EXPECT_TRUE(Contains(r.error().message, "No such file"));
}

TEST(ElfImage, LoadOversizedFileFailsBeforeReadingIt) {
  TempDir t;
  const std::string path = t.path() + "/huge.elf";
  int fd = ::open(path.c_str(), O_CREAT | O_WRONLY, 0600);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::ftruncate(fd, off_t(kMaxElfFileBytes + (1 << 20))), 0);  // sparse: costs nothing
  ::close(fd);
  auto r = load_elf_file(path);
  ASSERT_FALSE(r.has_value());
  EXPECT_TRUE(Contains(r.error().message, path));
  EXPECT_TRUE(Contains(r.error().message, "file is 65 MiB"));
  EXPECT_TRUE(Contains(r.error().message, "at most 15360 KiB"));
}

TEST(ElfImage, LoadFileAtSizeLimitIsParsedNotRejectedForSize) {
  TempDir t;
  const std::string path = t.path() + "/limit.elf";
  int fd = ::open(path.c_str(), O_CREAT | O_WRONLY, 0600);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::ftruncate(fd, off_t(kMaxElfFileBytes)), 0);
  ::close(fd);
  auto r = load_elf_file(path);
  ASSERT_FALSE(r.has_value());
  EXPECT_TRUE(Contains(r.error().message, "not an ELF file"));
  EXPECT_FALSE(Contains(r.error().message, "MiB"));
}

TEST(ElfImage, LoadEmptyFileIsNotAnElf) {
  TempDir t;
  const std::string path = t.path() + "/empty.elf";
  std::ofstream(path).close();
  auto r = load_elf_file(path);
  ASSERT_FALSE(r.has_value());
  EXPECT_TRUE(Contains(r.error().message, path + ": not an ELF file (only 0 bytes)"));
}

TEST(ElfImage, LoadSyntheticFileUsesPathInImageAndErrors) {
  TempDir t;
  const std::string good = t.path() + "/good.elf";
  const std::string bad = t.path() + "/bad.elf";
  auto bytes = build_elf({SegSpec{}});
  std::ofstream(good, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()), long(bytes.size()));
  bytes[EI_CLASS] = ELFCLASS32;
  std::ofstream(bad, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()), long(bytes.size()));
  auto g = load_elf_file(good);
  ASSERT_TRUE(g.has_value()) << g.error().message;
  EXPECT_EQ(g->path, good);
  auto b = load_elf_file(bad);
  ASSERT_FALSE(b.has_value());
  EXPECT_TRUE(Contains(b.error().message, bad + ": 32-bit ELF"));
}

// A directory opens as an ifstream and "sizes" as LLONG_MAX: it must be
// refused as not a regular file, not reported as a huge image.
TEST(ElfImage, LoadDirectoryFailsWithoutClaimingAHugeSize) {
  TempDir t;
  auto r = load_elf_file(t.path());
  ASSERT_FALSE(r.has_value());
  EXPECT_TRUE(Contains(r.error().message, t.path()));
  EXPECT_FALSE(Contains(r.error().message, "MiB")) << r.error().message;
}

}  // namespace
