// The trap path: a fault is recorded in the status block (cause, pc, tval,
// ra, sp) and the state turns "crashed" before anything else can go wrong.
// A test hook resumes after the faulting instruction instead of parking.
#include "core/status.h"
#include "core/trap.h"
#include "harness.h"

namespace abi = ulnic::abi;

namespace {

int g_traps;
uint64_t g_last_cause;

bool resume_after(core::trap::Frame& f) {
  ++g_traps;
  g_last_cause = f.mcause;
  f.mepc += core::trap::insn_length(f.mepc);
  return true;
}

void arm() {
  g_traps = 0;
  core::status::set_state(abi::FwState::kRunning);
  core::trap::set_fault_hook(resume_after);
}

abi::StatusBlock& st() { return core::status::block(); }

// The address of a label in inline asm, to compare with the recorded pc.
#define FAULT_AT(label_var, insn)                           \
  __asm__ volatile("la %0, 1f\n1: " insn "\n" : "=&r"(label_var)::"memory")

}  // namespace

FW_TEST(illegal_instruction_is_recorded_as_a_crash) {
  arm();
  uint64_t pc;
  FAULT_AT(pc, ".4byte 0xc0001073");  // csrw cycle: a write to a read-only CSR is illegal
  CHECK_EQ(g_traps, 1);
  EXPECT_EQ(st().trap_cause, 2u);
  EXPECT_EQ(st().trap_pc, pc);
  EXPECT_EQ(st().state, uint32_t(abi::FwState::kCrashed));
}

FW_TEST(load_from_nowhere_is_a_load_access_fault_with_its_address) {
  arm();
  uint64_t pc;
  __asm__ volatile("li t0, 0x700000000000\n la %0, 1f\n1: ld t1, 0(t0)\n" : "=&r"(pc)::"t0", "t1", "memory");
  CHECK_EQ(g_traps, 1);
  EXPECT_EQ(st().trap_cause, 5u);
  EXPECT_EQ(st().trap_pc, pc);
  EXPECT_EQ(st().trap_tval, 0x700000000000ull);
}

FW_TEST(store_to_nowhere_is_a_store_access_fault) {
  arm();
  uint64_t pc;
  __asm__ volatile("li t0, 0x700000000008\n la %0, 1f\n1: sd zero, 0(t0)\n" : "=&r"(pc)::"t0", "memory");
  CHECK_EQ(g_traps, 1);
  EXPECT_EQ(st().trap_cause, 7u);
  EXPECT_EQ(st().trap_pc, pc);
  EXPECT_EQ(st().trap_tval, 0x700000000008ull);
}

FW_TEST(ebreak_is_recorded_with_compressed_length) {
  arm();
  uint64_t pc;
  FAULT_AT(pc, "c.ebreak");
  CHECK_EQ(g_traps, 1);
  EXPECT_EQ(st().trap_cause, 3u);
  EXPECT_EQ(st().trap_pc, pc);
  EXPECT_EQ(core::trap::insn_length(pc), 2u);
}

FW_TEST(a_fault_with_a_wild_stack_pointer_is_still_recorded) {
  // The handler runs on its own stack (mscratch), so sp = 0 cannot stop it.
  arm();
  uint64_t pc;
  __asm__ volatile(
      "mv t2, sp\n"
      "li sp, 0\n"
      "la %0, 1f\n"
      "1: .4byte 0xc0001073\n"
      "mv sp, t2\n"
      : "=&r"(pc)::"t2", "memory");
  CHECK_EQ(g_traps, 1);
  EXPECT_EQ(st().trap_sp, 0u);
  EXPECT_EQ(st().trap_pc, pc);
}

FW_TEST(ra_is_recorded) {
  arm();
  uint64_t ra_value = 0x8000'1234;
  __asm__ volatile("mv t3, ra\n mv ra, %0\n .4byte 0xc0001073\n mv ra, t3\n" ::"r"(ra_value) : "t3", "memory");
  CHECK_EQ(g_traps, 1);
  EXPECT_EQ(st().trap_ra, ra_value);
}

FW_TEST(cause_names) {
  EXPECT(core::trap::cause_name(2)[0] == 'i');  // illegal instruction
  EXPECT(core::trap::cause_name(5)[0] == 'l');  // load access fault
  EXPECT(core::trap::cause_name(99)[0] == 'u'); // unknown
  EXPECT(core::trap::cause_name(1ull << 63)[0] == 'u');  // unexpected interrupt
  core::trap::set_fault_hook(nullptr);
  core::status::set_state(abi::FwState::kRunning);
}
