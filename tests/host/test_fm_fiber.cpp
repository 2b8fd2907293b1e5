// FM's handler threads (host/fm/fiber.h): a switch keeps what each side had
// (locals across it, the floating-point rounding mode), a fiber runs deep on
// its own stack, many interleave, and a stack is started again after its
// fiber finished -- as fm.cpp starts a handler on a pooled stack per
// message. Normal builds test the x86-64 switch, sanitizer builds ucontext.
#include <gtest/gtest.h>
#include <sys/mman.h>

#include <cfenv>
#include <cstdint>
#include <vector>

#include "fm/fiber.h"

using ulnic::fm::Fiber;
using ulnic::fm::fiber_start;
using ulnic::fm::fiber_switch;

namespace {

constexpr size_t kStack = 256 << 10;

struct Stack {
  void* p = ::mmap(nullptr, kStack, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
  ~Stack() { ::munmap(p, kStack); }
};

// The fibers of the test running now, and what they do.
Fiber main_side;
std::vector<Fiber> fibers;
std::vector<uint64_t> progress;
int current = -1;
int rounds = 0;

// Each round adds its own index to its progress and gives the CPU back.
[[noreturn]] void counting_entry() {
  const int me = current;
  uint64_t mine = 0x9e3779b97f4a7c15ull * uint64_t(me + 1);  // lives across the switches
  for (int r = 0; r < rounds; ++r) {
    mine = mine * 6364136223846793005ull + 1442695040888963407ull;
    progress[size_t(me)] += uint64_t(r) ^ (mine >> 60);
    fiber_switch(fibers[size_t(me)], main_side);
  }
  progress[size_t(me)] |= uint64_t(1) << 63;  // finished
  fiber_switch(fibers[size_t(me)], main_side);
  std::abort();
}

uint64_t expected_progress(int me) {
  uint64_t mine = 0x9e3779b97f4a7c15ull * uint64_t(me + 1), p = 0;
  for (int r = 0; r < rounds; ++r) {
    mine = mine * 6364136223846793005ull + 1442695040888963407ull;
    p += uint64_t(r) ^ (mine >> 60);
  }
  return p | uint64_t(1) << 63;
}

TEST(FmFiber, ManyFibersInterleaveAndKeepTheirState) {
  constexpr int kFibers = 8;
  rounds = 2000;
  std::vector<Stack> stacks(kFibers);
  fibers.assign(kFibers, Fiber{});
  progress.assign(kFibers, 0);
  for (int f = 0; f < kFibers; ++f) fiber_start(fibers[size_t(f)], stacks[size_t(f)].p, kStack, counting_entry);
  // Locals of the main side live across every switch (callee-saved registers or its own stack).
  volatile uint64_t seed = 12345;
  uint64_t a = seed * 3, b = seed * 5, c = seed * 7, d = seed * 11, e = seed * 13, h = seed * 17;
  for (int r = 0; r <= rounds; ++r)
    for (int f = 0; f < kFibers; ++f) {
      current = f;
      fiber_switch(main_side, fibers[size_t(f)]);
      a += 1, b += 2, c += 3, d += 4, e += 5, h += 6;
    }
  const uint64_t n = uint64_t(rounds + 1) * kFibers;
  EXPECT_EQ(a, 12345 * 3 + n);
  EXPECT_EQ(b, 12345 * 5 + 2 * n);
  EXPECT_EQ(c, 12345 * 7 + 3 * n);
  EXPECT_EQ(d, 12345 * 11 + 4 * n);
  EXPECT_EQ(e, 12345 * 13 + 5 * n);
  EXPECT_EQ(h, 12345 * 17 + 6 * n);
  for (int f = 0; f < kFibers; ++f) EXPECT_EQ(progress[size_t(f)], expected_progress(f)) << "fiber " << f;
}

// Recursion that needs ~128 KiB of the fiber's stack.
uint64_t deep(int depth) {
  volatile uint8_t frame[1024];
  frame[0] = uint8_t(depth);
  frame[1023] = uint8_t(depth >> 8);
  return depth == 0 ? 1 : deep(depth - 1) + frame[0] + frame[1023];
}

uint64_t deep_result = 0;

[[noreturn]] void deep_entry() {
  deep_result = deep(128);
  fiber_switch(fibers[0], main_side);
  std::abort();
}

TEST(FmFiber, AFiberRunsDeepOnItsOwnStackAndTheStackIsStartedAgain) {
  Stack stack;
  fibers.assign(1, Fiber{});
  uint64_t want = 1;
  for (int d = 1; d <= 128; ++d) want += uint64_t(uint8_t(d)) + uint64_t(uint8_t(d >> 8));
  for (int run = 0; run < 3; ++run) {  // the same stack, started again each time
    deep_result = 0;
    fiber_start(fibers[0], stack.p, kStack, deep_entry);
    fiber_switch(main_side, fibers[0]);
    EXPECT_EQ(deep_result, want) << "run " << run;
  }
}

int fiber_round_seen = -1;

[[noreturn]] void rounding_entry() {
  fiber_round_seen = std::fegetround();  // started with the default mode
  std::fesetround(FE_UPWARD);
  fiber_switch(fibers[0], main_side);
  fiber_round_seen = std::fegetround();  // its own mode again
  fiber_switch(fibers[0], main_side);
  std::abort();
}

TEST(FmFiber, EachSideKeepsItsRoundingMode) {
  Stack stack;
  fibers.assign(1, Fiber{});
  ASSERT_EQ(std::fegetround(), FE_TONEAREST);
  fiber_start(fibers[0], stack.p, kStack, rounding_entry);
  std::fesetround(FE_TOWARDZERO);
  fiber_switch(main_side, fibers[0]);
  EXPECT_EQ(fiber_round_seen, FE_TONEAREST);
  EXPECT_EQ(std::fegetround(), FE_TOWARDZERO);
  fiber_switch(main_side, fibers[0]);
  EXPECT_EQ(fiber_round_seen, FE_UPWARD);
  EXPECT_EQ(std::fegetround(), FE_TOWARDZERO);
  std::fesetround(FE_TONEAREST);
}

}  // namespace
