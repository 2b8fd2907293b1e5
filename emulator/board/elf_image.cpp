#include "board/elf_image.h"

#include <elf.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <iterator>

#include "ulnic/abi/sram.h"

namespace ulnic::board {
namespace abi = ulnic::abi;

namespace {

std::string hex(uint64_t v) {
  char b[24];
  std::snprintf(b, sizeof b, "0x%llx", static_cast<unsigned long long>(v));
  return b;
}

const char* machine_name(uint16_t m) {
  switch (m) {
    case EM_X86_64: return "x86-64";
    case EM_386: return "i386";
    case EM_AARCH64: return "AArch64";
    case EM_ARM: return "ARM";
    case EM_RISCV: return "RISC-V";
    default: return "another machine";
  }
}

template <class T>
bool read_at(std::span<const uint8_t> b, uint64_t off, T& out) {
  if (off > b.size() || b.size() - off < sizeof(T)) return false;
  std::memcpy(&out, b.data() + off, sizeof(T));
  return true;
}

// Walks the notes in [off, off+size) for the GNU build id.
std::string find_build_id(std::span<const uint8_t> b, uint64_t off, uint64_t size) {
  uint64_t end = std::min<uint64_t>(off + size, b.size());
  while (off + sizeof(Elf64_Nhdr) <= end) {
    Elf64_Nhdr n{};
    read_at(b, off, n);
    uint64_t name_off = off + sizeof n;
    uint64_t desc_off = name_off + ((uint64_t(n.n_namesz) + 3) & ~3ull);
    uint64_t next = desc_off + ((uint64_t(n.n_descsz) + 3) & ~3ull);
    if (next > end || next <= off) break;
    if (n.n_type == NT_GNU_BUILD_ID && n.n_namesz == 4 && std::memcmp(b.data() + name_off, "GNU", 4) == 0) {
      std::string s;
      char two[3];
      for (uint32_t i = 0; i < n.n_descsz; ++i) {
        std::snprintf(two, sizeof two, "%02x", b[desc_off + i]);
        s += two;
      }
      return s;
    }
    off = next;
  }
  return {};
}

Result<void> check_header(const Elf64_Ehdr& eh, uint64_t file_size, const std::string& name) {
  if (std::memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0) return fail(name + ": not an ELF file");
  if (eh.e_ident[EI_CLASS] != ELFCLASS64)
    return fail(name + ": 32-bit ELF; the NIC needs a RISC-V 64-bit (ELFCLASS64) image");
  if (eh.e_ident[EI_DATA] != ELFDATA2LSB) return fail(name + ": big-endian ELF; the NIC is little-endian");
  if (eh.e_machine != EM_RISCV)
    return fail(name + ": built for " + machine_name(eh.e_machine) + " (e_machine " +
                std::to_string(eh.e_machine) + "), not RISC-V");
  if (eh.e_type != ET_EXEC) return fail(name + ": not an executable (e_type " + std::to_string(eh.e_type) + ")");
  if (eh.e_phentsize != sizeof(Elf64_Phdr)) return fail(name + ": unexpected program header size");
  if (eh.e_phnum == 0 || eh.e_phnum > 64) return fail(name + ": " + std::to_string(eh.e_phnum) + " program headers");
  if (eh.e_phoff > file_size || (file_size - eh.e_phoff) / sizeof(Elf64_Phdr) < eh.e_phnum)
    return fail(name + ": program headers lie outside the file (truncated?)");
  return {};
}

Result<void> check_placement(const Elf64_Phdr& ph, size_t index, const std::string& name) {
  const uint64_t lo = abi::kSramBase + abi::kImageOffset;
  const uint64_t hi = lo + abi::kImageMaxSize;
  const uint64_t sram_end = abi::kSramBase + abi::kSramSize;
  std::string seg = name + ": segment " + std::to_string(index) + " [" + hex(ph.p_paddr) + ", +" +
                    std::to_string(ph.p_memsz) + " bytes)";
  if (ph.p_filesz > ph.p_memsz) return fail(seg + " has more file bytes than memory bytes");
  if (ph.p_paddr + ph.p_memsz < ph.p_paddr) return fail(seg + " wraps around the address space");
  if (ph.p_paddr < lo || ph.p_paddr >= sram_end)
    return fail(seg + " lies outside the NIC's SRAM [" + hex(abi::kSramBase) + ", " + hex(sram_end) + ")");
  if (ph.p_paddr + ph.p_memsz > hi)
    return fail(seg + ": image too big, it ends at " + hex(ph.p_paddr + ph.p_memsz) + ", past the " +
                std::to_string(abi::kImageMaxSize >> 10) + " KiB firmware area ending at " + hex(hi));
  return {};
}

}  // namespace

Result<FirmwareImage> parse_elf(std::span<const uint8_t> b, const std::string& name) {
  Elf64_Ehdr eh{};
  if (!read_at(b, 0, eh)) return fail(name + ": not an ELF file (only " + std::to_string(b.size()) + " bytes)");
  if (auto ok = check_header(eh, b.size(), name); !ok) return std::unexpected(ok.error());

  FirmwareImage img;
  img.path = name;
  img.entry = eh.e_entry;
  for (size_t i = 0; i < eh.e_phnum; ++i) {
    Elf64_Phdr ph{};
    read_at(b, eh.e_phoff + i * sizeof ph, ph);
    if (ph.p_type == PT_NOTE && img.build_id.empty() && ph.p_offset < b.size())
      img.build_id = find_build_id(b, ph.p_offset, ph.p_filesz);
    if (ph.p_type != PT_LOAD) continue;
    if (ph.p_filesz > ph.p_memsz)
      return fail(name + ": segment " + std::to_string(i) + " has more file bytes than memory bytes");
    if (ph.p_memsz == 0) continue;
    if (auto ok = check_placement(ph, i, name); !ok) return std::unexpected(ok.error());
    if (ph.p_offset > b.size() || b.size() - ph.p_offset < ph.p_filesz)
      return fail(name + ": segment " + std::to_string(i) + " file bytes lie outside the file (truncated?)");
    Segment s;
    s.addr = ph.p_paddr;
    s.memsz = ph.p_memsz;
    s.executable = (ph.p_flags & PF_X) != 0;
    s.data.assign(b.begin() + long(ph.p_offset), b.begin() + long(ph.p_offset + ph.p_filesz));
    img.segments.push_back(std::move(s));
  }
  if (img.segments.empty()) return fail(name + ": no loadable segments");
  std::sort(img.segments.begin(), img.segments.end(), [](auto& x, auto& y) { return x.addr < y.addr; });
  for (size_t i = 1; i < img.segments.size(); ++i)
    if (img.segments[i - 1].addr + img.segments[i - 1].memsz > img.segments[i].addr)
      return fail(name + ": loadable segments overlap at " + hex(img.segments[i].addr));
  img.end = img.segments.back().addr + img.segments.back().memsz;
  if (img.entry != abi::kFirmwareEntry)
    return fail(name + ": entry point " + hex(img.entry) + " is not " + hex(abi::kFirmwareEntry) +
                ", where the NIC's reset vector jumps");
  bool entry_loaded = std::any_of(img.segments.begin(), img.segments.end(), [&](const Segment& s) {
    return s.executable && img.entry >= s.addr && img.entry < s.addr + s.data.size();
  });
  if (!entry_loaded) return fail(name + ": no executable segment contains the entry point " + hex(img.entry));
  return img;
}

Result<FirmwareImage> load_elf_file(const std::string& path) {
  // In messages, the path with control characters shown as '?': one line.
  std::string name = path;
  for (char& c : name)
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = '?';
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return fail_errno("cannot read firmware " + name, errno);
  if (!S_ISREG(st.st_mode)) return fail("cannot read firmware " + name + ": not a regular file");
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) return fail_errno("cannot read firmware " + name, errno);
  auto size = static_cast<uint64_t>(in.tellg());
  if (size > kMaxElfFileBytes)
    return fail(name + ": file is " + std::to_string(size >> 20) + " MiB; firmware images are at most " +
                std::to_string(abi::kImageMaxSize >> 10) + " KiB");
  in.seekg(0);
  std::vector<uint8_t> bytes(size);
  if (!in.read(reinterpret_cast<char*>(bytes.data()), std::streamsize(size)))
    return fail("cannot read firmware " + name);
  return parse_elf(bytes, name);
}

}  // namespace ulnic::board
