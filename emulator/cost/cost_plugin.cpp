// The cost plugin: a QEMU TCG plugin the board loads under `--cost`
// (`-plugin ulnic-cost.so,sram=<SRAM file>`). It counts every instruction
// the NIC retires and charges it to the firmware's phase markers
// (shared/include/ulnic/abi/cost.h), publishing the counts in the cost block
// of the node's SRAM file, where `ulnic node status` reads them.
//
// Counting: each translated block adds its instruction count to one counter
// when it starts (an inline add, no call); each marker instruction gets a
// callback that knows its index in the block, so "instructions retired
// before this marker" is exact: counter - block length + index. A block
// runs to its end unless an instruction traps, and the firmware's work
// paths take no traps. No -icount, so the board's timing is unchanged.
//
// With `profile=FILE` it also counts, per translated block, the instructions
// it retired inside work items (a marker open when the block started) and
// outside them, and writes "vaddr insns work idle" lines to FILE when QEMU
// exits (exit(), as after a QMP quit): tests/bench/cost_profile.py names the functions (where a phase's
// instructions go). A callback per block: slower, for profiling only.
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <vector>

#include "plugin/qemu_plugin.h"
#include "ulnic/abi/cost.h"

namespace abi = ulnic::abi;

const int qemu_plugin_version = 1;

namespace {

constexpr uint32_t kMaxDepth = 8;

// One NIC hart (-smp 1): callbacks run on its vCPU thread, one at a time.
struct State {
  uint64_t retired = 0;      // bumped by each block's length as it starts
  uint64_t mark = 0;         // `retired` at the last marker
  uint32_t depth = 0;
  uint32_t stack[kMaxDepth];
  uint32_t op = abi::kCostOpOther;
  uint64_t span[abi::kMaxCostPhases];  // the open work item, by phase
  abi::CostBlock* block = nullptr;     // in the SRAM file
};
State g;

// profile=FILE: one record per translation of a block (a block translated
// again gets another; the file sums them by address).
struct BlockCounts {
  uint64_t vaddr;
  uint64_t insns;
  uint64_t work = 0, idle = 0;  // executions that started inside a work item / outside
};
// Plain storage, never destroyed: write_profile runs from exit(), after or
// before the DSO's static destructors (a std::string here once gave the file
// a garbage name).
std::vector<BlockCounts*>& g_blocks = *new std::vector<BlockCounts*>;
char g_profile[4096];

// Single-writer stores the node's tools may read at any time.
template <class T>
void put(T& field, T v) {
  __atomic_store_n(&field, v, __ATOMIC_RELAXED);
}
template <class T>
void add(T& field, T v) {
  put(field, T(field + v));
}

// A marker's userdata: its immediate, its index in the block, the block's length.
uint64_t pack(int32_t imm, size_t index, size_t n) {
  return uint64_t(uint16_t(imm)) | uint64_t(index & 0xffff) << 16 | uint64_t(n & 0xffffffff) << 32;
}

void close_span(abi::CostBlock& b) {
  const uint32_t op = g.op < abi::kMaxCostOps ? g.op : abi::kCostOpOther;
  for (uint32_t p = 0; p < abi::kMaxCostPhases; ++p) {
    if (!g.span[p]) continue;
    add(b.phase[p], g.span[p]);
    add(b.ops[op].insns[p], g.span[p]);
    put(b.ops[op].last[p], g.span[p]);
  }
  add(b.ops[op].spans, uint64_t(1));
  add(b.spans, uint64_t(1));
}

void on_marker(unsigned int, void* udata) {
  const uint64_t u = reinterpret_cast<uint64_t>(udata);
  const int32_t imm = int16_t(u & 0xffff);
  const uint64_t now = g.retired - (u >> 32) + ((u >> 16) & 0xffff);
  const uint64_t delta = now - g.mark;
  g.mark = now;
  abi::CostBlock& b = *g.block;
  put(b.seq, b.seq + 1);
  __atomic_thread_fence(__ATOMIC_RELEASE);  // readers see seq odd before any count moves
  if (g.depth) g.span[g.stack[g.depth - 1]] += delta;
  else add(b.phase[abi::kPhaseIdle], delta);
  put(b.total, now);
  if (imm > 0 && imm < int32_t(abi::kPhaseCount)) {
    if (g.depth == 0) {
      std::memset(g.span, 0, sizeof g.span);
      g.op = abi::kCostOpOther;
    }
    if (g.depth < kMaxDepth) {
      g.stack[g.depth++] = uint32_t(imm);
      add(b.entries[imm], uint64_t(1));
    } else {
      add(b.bad_markers, uint64_t(1));
    }
  } else if (imm == abi::kMarkClose) {
    if (g.depth == 0) add(b.bad_markers, uint64_t(1));
    else if (--g.depth == 0) close_span(b);
  } else if (imm >= abi::kMarkOp && imm < abi::kMarkOp + int32_t(abi::kCostOpCount)) {
    if (g.depth) g.op = uint32_t(imm - abi::kMarkOp);
  }
  __atomic_thread_fence(__ATOMIC_RELEASE);
  put(b.seq, b.seq + 1);
}

// The firmware starts over (flash, reset): a work item left open by the old
// image is dropped, not charged.
void on_entry(unsigned int, void*) { g.depth = 0; }

void on_block(unsigned int, void* udata) {
  BlockCounts& c = *static_cast<BlockCounts*>(udata);
  if (g.depth) ++c.work;
  else ++c.idle;
}

void write_profile() {
  std::map<uint64_t, BlockCounts> by_addr;
  for (const BlockCounts* c : g_blocks) {
    BlockCounts& t = by_addr[c->vaddr];
    t.vaddr = c->vaddr;
    t.insns = c->insns;
    t.work += c->work;
    t.idle += c->idle;
  }
  FILE* f = std::fopen(g_profile, "w");
  if (!f) return;
  for (const auto& [addr, c] : by_addr)
    if (c.work || c.idle)
      std::fprintf(f, "%#llx %llu %llu %llu\n", (unsigned long long)addr, (unsigned long long)c.insns,
                   (unsigned long long)(c.work * c.insns), (unsigned long long)(c.idle * c.insns));
  std::fclose(f);
}

void on_translate(qemu_plugin_id_t, qemu_plugin_tb* tb) {
  const size_t n = qemu_plugin_tb_n_insns(tb);
  qemu_plugin_register_vcpu_tb_exec_inline(tb, QEMU_PLUGIN_INLINE_ADD_U64, &g.retired, n);
  if (g_profile[0]) {
    auto* c = new BlockCounts{qemu_plugin_tb_vaddr(tb), n};
    g_blocks.push_back(c);
    qemu_plugin_register_vcpu_tb_exec_cb(tb, on_block, QEMU_PLUGIN_CB_NO_REGS, c);
  }
  if (qemu_plugin_tb_vaddr(tb) == abi::kFirmwareEntry)
    qemu_plugin_register_vcpu_tb_exec_cb(tb, on_entry, QEMU_PLUGIN_CB_NO_REGS, nullptr);
  for (size_t i = 0; i < n; ++i) {
    qemu_plugin_insn* insn = qemu_plugin_tb_get_insn(tb, i);
    int32_t imm;
    if (!qemu_plugin_marker(insn, imm)) continue;
    qemu_plugin_register_vcpu_insn_exec_cb(insn, on_marker, QEMU_PLUGIN_CB_NO_REGS,
                                           reinterpret_cast<void*>(pack(imm, i, n)));
  }
}

abi::CostBlock* map_block(const char* sram) {
  int fd = ::open(sram, O_RDWR | O_CLOEXEC);
  if (fd < 0) return nullptr;
  void* p = ::mmap(nullptr, abi::kCostSize, PROT_READ | PROT_WRITE, MAP_SHARED, fd, off_t(abi::kCostOffset));
  ::close(fd);
  return p == MAP_FAILED ? nullptr : static_cast<abi::CostBlock*>(p);
}

}  // namespace

int qemu_plugin_install(qemu_plugin_id_t id, const void*, int argc, char** argv) {
  const char* sram = nullptr;
  for (int i = 0; i < argc; ++i) {
    if (std::strncmp(argv[i], "sram=", 5) == 0) sram = argv[i] + 5;
    if (std::strncmp(argv[i], "profile=", 8) == 0) std::snprintf(g_profile, sizeof g_profile, "%s", argv[i] + 8);
  }
  if (!sram) {
    qemu_plugin_outs("ulnic-cost: needs sram=<the board's SRAM file>\n");
    return -1;
  }
  g.block = map_block(sram);
  if (!g.block) {
    char msg[512];
    std::snprintf(msg, sizeof msg, "ulnic-cost: cannot map %s\n", sram);
    qemu_plugin_outs(msg);
    return -1;
  }
  std::memset(static_cast<void*>(g.block), 0, sizeof *g.block);
  g.block->version = ULNIC_ABI_VERSION;
  __atomic_thread_fence(__ATOMIC_RELEASE);
  put(g.block->magic, abi::kCostMagic);
  qemu_plugin_register_vcpu_tb_trans_cb(id, on_translate);
  // At QEMU's exit() (a QMP quit): QEMU 7.2's own plugin atexit hook runs
  // only in user mode.
  if (g_profile[0]) std::atexit(write_profile);
  return 0;
}
