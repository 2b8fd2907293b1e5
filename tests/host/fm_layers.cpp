// The layers over Fast Messages 2.x (host/fm/LAYERS.md): Split-C style
// global memory (fm_gm.h) and the MPI-like layer (fm_mp.h), with real
// forked ranks spread over a real 4-node cluster that this binary boots
// once (vipl_cluster.h). The jobs and checks are fm_job.h's: each rank is a
// child that reports by its exit status, every byte is checked against
// pattern(), and no NIC may refuse a message while a test runs.
#include <errno.h>
#include <fm_gm.h>
#include <fm_mp.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstdarg>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "fm_job.h"

namespace {

using namespace fm_test;

constexpr unsigned kRanks = 4;
const std::vector<int> kOnePerNode = {0, 1, 2, 3};
const std::vector<int> kTwoPerNode = {0, 1, 2, 3, 0, 1, 2, 3};

std::string strf(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
std::string strf(const char* fmt, ...) {
  char b[256];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(b, sizeof b, fmt, ap);
  va_end(ap);
  return b;
}

// `n` bytes at `p` are bytes `from`.. of (sender, seq).
void expect_pattern(const uint8_t* p, size_t n, uint32_t sender, uint32_t seq, const std::string& what,
                    uint64_t from = 0) {
  size_t bad = first_mismatch(p, n, sender, seq, from);
  check(bad == SIZE_MAX, "%s: byte %zu of %zu differs", what.c_str(), bad, n);
}

// `n` bytes at `p` are all `v`.
void expect_all(const uint8_t* p, size_t n, uint8_t v, const std::string& what) {
  for (size_t i = 0; i < n; ++i)
    if (p[i] != v) {
      check(false, "%s: byte %zu of %zu is 0x%02x, not 0x%02x", what.c_str(), i, n, p[i], v);
      return;
    }
}

std::vector<uint8_t> message(size_t n, uint32_t sender, uint32_t seq) {
  std::vector<uint8_t> v(n);
  fill(v, sender, seq);
  return v;
}

// Every NIC of the 4-node cluster must refuse nothing.
class Gm : public NoRefusalsTest<4> {};
class Mp : public NoRefusalsTest<4> {};

// ======================================================== global memory

// A GM rank: gm_init, body, gm_finalize; the exit status says how it went.
int gm_rank(unsigned rank, const std::function<void(unsigned me)>& body) {
  if (gm_init() != 0) {
    std::fprintf(stderr, "[rank %u] gm_init failed: %s\n", rank, std::strerror(errno));
    return 2;
  }
  check(gm_mynode() == rank && gm_nodes() == FM_numnodes, "gm_mynode %u / gm_nodes %u", gm_mynode(), gm_nodes());
  body(rank);
  return child_exit(gm_finalize);
}

uint64_t addr_of(const void* p) { return uint64_t(reinterpret_cast<uintptr_t>(p)); }
gm_ptr at(unsigned node, uint64_t addr, size_t off = 0) {
  return gm_global(node, reinterpret_cast<void*>(uintptr_t(addr + off)));
}

// Every process's address of `mine`.
std::vector<uint64_t> allgather(const void* mine) {
  std::vector<uint64_t> all(gm_nodes(), 0);
  check(gm_allgather(addr_of(mine), all.data()) == 0, "gm_allgather: %s", std::strerror(errno));
  check(all[gm_mynode()] == addr_of(mine), "gm_allgather: my own entry is wrong");
  return all;
}

// Blocks of `sizes` laid out in a region from `lead`, `gap` bytes apart.
struct Layout {
  std::vector<size_t> sizes, offsets;
  size_t end = 0;
  Layout(std::vector<size_t> s, size_t lead, size_t gap) : sizes(std::move(s)) {
    end = lead;
    for (size_t n : sizes) offsets.push_back(end), end += n + gap;
  }
};

// Writer w's blocks in a region: block k is pattern(w, seq(k)) at its
// offset; everything else in the region is `background`.
void expect_region(const uint8_t* region, size_t bytes, const Layout& l, uint32_t w,
                   const std::function<uint32_t(size_t k)>& seq, uint8_t background, const std::string& what) {
  size_t at_byte = 0;
  for (size_t k = 0; k < l.sizes.size(); ++k) {
    expect_all(region + at_byte, l.offsets[k] - at_byte, background, strf("%s: before block %zu", what.c_str(), k));
    expect_pattern(region + l.offsets[k], l.sizes[k], w, seq(k), strf("%s: block %zu", what.c_str(), k));
    at_byte = l.offsets[k] + l.sizes[k];
  }
  expect_all(region + at_byte, bytes - at_byte, background, strf("%s: after the blocks", what.c_str()));
}

// ---- blocking reads and writes, primitive and bulk, every rank to every other

const Layout kBulk({1, 7, 4096, 4257, 100000, 1 << 20}, 3, 5);
constexpr size_t kRegion = 1250000;  // per writer, in every owner's arena
constexpr uint32_t kOwnerSeq = 77;   // the owner's own region: pattern(owner, 77)

struct Prims {
  int32_t i32, pad;
  int64_t i64;
  double f64;
};
int32_t v32(unsigned w, unsigned t) { return int32_t(0x80000000u | (w << 12) | t); }
int64_t v64(unsigned w, unsigned t) { return int64_t(0xF00DFACE00000000ull ^ (uint64_t(w) << 20) ^ t); }
double vf64(unsigned w, unsigned t) { return -1.0e300 / (w + 1) + t * 0.5; }
bool same_bits(double a, double b) { return std::memcmp(&a, &b, sizeof a) == 0; }
uint32_t bulk_seq(unsigned target, size_t k) { return uint32_t(100 * target + k); }

TEST_F(Gm, ReadWriteEveryRankPrimitiveAndBulk) {
  auto rc = run_job(kOnePerNode, [](unsigned rank) {
    return gm_rank(rank, [](unsigned me) {
      check(kBulk.end <= kRegion, "layout");
      std::vector<uint8_t> arena(kRanks * kRegion, 0);
      std::vector<Prims> prims(kRanks, Prims{0, 0, 0, 0.0});
      fill(arena.data() + me * kRegion, kRegion, me, kOwnerSeq);
      check(gm_expose(arena.data(), arena.size()) == 0, "gm_expose(arena)");
      check(gm_expose(prims.data(), prims.size() * sizeof(Prims)) == 0, "gm_expose(prims)");
      auto arenas = allgather(arena.data());
      auto primss = allgather(prims.data());
      for (unsigned d = 1; d < kRanks; ++d) {
        unsigned t = (me + d) % kRanks;
        // Primitive types into my slot of t's prims, read back.
        uint64_t p = primss[t] + me * sizeof(Prims);
        gm_write_i32(at(t, p, offsetof(Prims, i32)), v32(me, t));
        gm_write_i64(at(t, p, offsetof(Prims, i64)), v64(me, t));
        gm_write_f64(at(t, p, offsetof(Prims, f64)), vf64(me, t));
        check(gm_read_i32(at(t, p, offsetof(Prims, i32))) == v32(me, t), "i32 read back from %u", t);
        check(gm_read_i64(at(t, p, offsetof(Prims, i64))) == v64(me, t), "i64 read back from %u", t);
        check(same_bits(gm_read_f64(at(t, p, offsetof(Prims, f64))), vf64(me, t)), "f64 read back from %u", t);
        // Bulk blocks into my region of t's arena, each read back between guards.
        uint64_t region = arenas[t] + me * kRegion;
        for (size_t k = 0; k < kBulk.sizes.size(); ++k) {
          size_t n = kBulk.sizes[k];
          auto data = message(n, me, bulk_seq(t, k));
          check(gm_write(at(t, region, kBulk.offsets[k]), data.data(), n) == 0, "gm_write %zu B to %u: %s", n, t,
                std::strerror(errno));
          std::vector<uint8_t> back(n + 16, 0xA5);
          check(gm_read(back.data() + 8, at(t, region, kBulk.offsets[k]), n) == 0, "gm_read %zu B from %u: %s", n,
                t, std::strerror(errno));
          expect_pattern(back.data() + 8, n, me, bulk_seq(t, k), strf("%zu B read back from %u", n, t));
          expect_all(back.data(), 8, 0xA5, strf("%zu B from %u: guard before", n, t));
          expect_all(back.data() + 8 + n, 8, 0xA5, strf("%zu B from %u: guard after", n, t));
        }
        // What t wrote into its own region itself.
        uint64_t own = arenas[t] + t * kRegion;
        for (size_t k = 0; k < kBulk.sizes.size(); ++k) {
          size_t n = kBulk.sizes[k], off = kRegion - kBulk.offsets[k] - n;  // from the far end, unaligned
          std::vector<uint8_t> got(n);
          check(gm_read(got.data(), at(t, own, off), n) == 0, "gm_read %zu B of %u's own: %s", n, t,
                std::strerror(errno));
          expect_pattern(got.data(), n, t, kOwnerSeq, strf("%zu B of %u's own region", n, t), off);
        }
      }
      // Through a global pointer to myself: a memory copy, checked the same way.
      std::vector<uint8_t> mine(4257);
      check(gm_read(mine.data(), at(me, arenas[me], me * kRegion + 11), mine.size()) == 0, "gm_read from myself");
      expect_pattern(mine.data(), mine.size(), me, kOwnerSeq, "read from myself", 11);
      check(gm_barrier() == 0, "gm_barrier: %s", std::strerror(errno));
      // Everything the others wrote is here, and nothing else changed.
      for (unsigned w = 0; w < kRanks; ++w) {
        const uint8_t* region = arena.data() + w * kRegion;
        if (w == me) {
          expect_pattern(region, kRegion, me, kOwnerSeq, "my own region");
          continue;
        }
        expect_region(region, kRegion, kBulk, w, [me](size_t k) { return bulk_seq(me, k); }, 0,
                      strf("region of writer %u", w));
        check(prims[w].i32 == v32(w, me) && prims[w].i64 == v64(w, me) && same_bits(prims[w].f64, vf64(w, me)),
              "primitives from %u", w);
      }
      check(prims[me].i32 == 0 && prims[me].i64 == 0 && prims[me].f64 == 0.0, "my own prims slot was written");
      gm_stats st;
      gm_get_stats(&st);
      const unsigned long long n = kBulk.sizes.size(), peers = kRanks - 1;
      check(st.writes == peers * (3 + n) && st.reads == peers * (3 + 2 * n) + 1, "issued %llu writes, %llu reads",
            st.writes, st.reads);
      check(st.served == peers * (6 + 3 * n) && st.refused == 0, "served %llu, refused %llu", st.served,
            st.refused);
    });
  });
  EXPECT_EQ(rc, (std::vector<int>(kRanks, 0)));
}

// ---- split phase: 64 gets and puts outstanding to each of 3 ranks, then gm_sync

constexpr size_t kPub = 256 << 10;   // every rank's pattern(rank, 55), read by gets
constexpr uint32_t kPubSeq = 55;
constexpr unsigned kSplitOps = 64;   // per target: even ones gets, odd ones puts
const std::vector<size_t> kSplitSizes = {1, 9, 4256, 4257, 333, 12000, 64, 8191, 2, 4255};

size_t split_size(unsigned i) { return kSplitSizes[(i / 2) % kSplitSizes.size()]; }
Layout put_layout() {  // where one writer's puts land in a target's inbox region
  std::vector<size_t> s;
  for (unsigned i = 1; i < kSplitOps; i += 2) s.push_back(split_size(i));
  s.push_back(8);  // the gm_put_i64
  return Layout(s, 1, 3);
}
uint32_t put_seq(unsigned target, size_t k) { return uint32_t(1000 * target + k); }
size_t get_offset(unsigned i, size_t n) { return (i * 7919u) % (kPub - n); }

TEST_F(Gm, SplitPhaseGetsAndPutsCompleteAtSync) {
  auto rc = run_job(kOnePerNode, [](unsigned rank) {
    return gm_rank(rank, [](unsigned me) {
      const Layout puts = put_layout();
      const size_t region = puts.end + 16;
      std::vector<uint8_t> pub(kPub), inbox(kRanks * region, 0);
      fill(pub.data(), kPub, me, kPubSeq);
      check(gm_expose(pub.data(), pub.size()) == 0 && gm_expose(inbox.data(), inbox.size()) == 0, "gm_expose");
      auto pubs = allgather(pub.data());
      auto inboxes = allgather(inbox.data());
      // Destinations of the gets (per target, each op at its own place) and
      // one scratch source for every put, clobbered right after each put.
      std::vector<std::vector<uint8_t>> got(kRanks, std::vector<uint8_t>(kSplitOps * 12000 + 64, 0xA5));
      std::vector<int64_t> got64(kRanks, 0);
      std::vector<uint8_t> scratch(12000);
      for (unsigned i = 0; i < kSplitOps; ++i)
        for (unsigned d = 1; d < kRanks; ++d) {
          unsigned t = (me + d) % kRanks;
          size_t n = split_size(i);
          if (i % 2 == 0) {
            check(gm_get(got[t].data() + i * 12000, at(t, pubs[t], get_offset(i, n)), n) == 0, "gm_get %u to %u", i,
                  t);
          } else {
            size_t k = i / 2;
            fill(scratch.data(), n, me, put_seq(t, k));
            check(gm_put(at(t, inboxes[t] + me * region, puts.offsets[k]), scratch.data(), n) == 0,
                  "gm_put %u to %u", i, t);
            std::memset(scratch.data(), 0xEE, scratch.size());  // copied at the call: reusable at once
          }
        }
      for (unsigned d = 1; d < kRanks; ++d) {
        unsigned t = (me + d) % kRanks;
        gm_get_i64(&got64[t], at(t, pubs[t], 16));
        gm_put_i64(at(t, inboxes[t] + me * region, puts.offsets.back()), v64(me, t));
      }
      check(gm_sync() == 0, "gm_sync: %s", std::strerror(errno));
      for (unsigned d = 1; d < kRanks; ++d) {
        unsigned t = (me + d) % kRanks;
        for (unsigned i = 0; i < kSplitOps; i += 2) {
          size_t n = split_size(i);
          const uint8_t* p = got[t].data() + i * 12000;
          expect_pattern(p, n, t, kPubSeq, strf("get %u (%zu B) from %u", i, n, t), get_offset(i, n));
          expect_all(p + n, 12000 - n, 0xA5, strf("get %u from %u: past its end", i, t));
        }
        int64_t want;
        uint8_t b[8];
        fill(b, 8, t, kPubSeq, 16);
        std::memcpy(&want, b, 8);
        check(got64[t] == want, "gm_get_i64 from %u", t);
      }
      check(gm_sync() == 0, "an idle gm_sync");
      check(gm_barrier() == 0, "gm_barrier");
      for (unsigned w = 0; w < kRanks; ++w) {
        const uint8_t* r = inbox.data() + w * region;
        if (w == me) {
          expect_all(r, region, 0, "my own inbox region");
          continue;
        }
        Layout data_only = puts;
        data_only.sizes.pop_back();
        data_only.offsets.pop_back();
        expect_region(r, puts.offsets.back(), data_only, w, [me](size_t k) { return put_seq(me, k); }, 0,
                      strf("puts from %u", w));
        int64_t v;
        std::memcpy(&v, r + puts.offsets.back(), 8);
        check(v == v64(w, me), "gm_put_i64 from %u", w);
        expect_all(r + puts.offsets.back() + 8, region - puts.offsets.back() - 8, 0, strf("after %u's puts", w));
      }
      gm_stats st;
      gm_get_stats(&st);
      const unsigned long long each = kSplitOps / 2 + 1;
      check(st.gets == (kRanks - 1) * each && st.puts == (kRanks - 1) * each, "issued %llu gets, %llu puts",
            st.gets, st.puts);
      check(st.refused == 0, "refused %llu", st.refused);
      // Collectives back to back, a different rank late each time: every
      // allgather sees its own epoch's values.
      for (uint64_t i = 0; i < 40; ++i) {
        if (i % kRanks == me) ::usleep(3000);
        std::vector<uint64_t> all(kRanks, ~0ull);
        check(gm_allgather(me * 1000 + i, all.data()) == 0, "gm_allgather %llu", (unsigned long long)i);
        for (unsigned r = 0; r < kRanks; ++r)
          check(all[r] == r * 1000 + i, "gm_allgather %llu: rank %u gave %llu", (unsigned long long)i, r,
                (unsigned long long)all[r]);
        if (i % 3 == 0) check(gm_barrier() == 0, "gm_barrier %llu", (unsigned long long)i);
      }
    });
  });
  EXPECT_EQ(rc, (std::vector<int>(kRanks, 0)));
}

// ---- stores: every rank into every other, gm_store_sync at the targets,
// gm_all_store_sync, acknowledgements batched

constexpr unsigned kStores = 40;  // chunks per target per round (and one gm_store_i64)
const std::vector<size_t> kStoreSizes = {1, 8, 1000, 4256, 4257, 2500, 17, 6000};

Layout store_layout() {
  std::vector<size_t> s;
  for (unsigned k = 0; k < kStores; ++k) s.push_back(kStoreSizes[k % kStoreSizes.size()]);
  s.push_back(8);
  return Layout(s, 5, 1);
}
uint32_t store_seq(unsigned round, unsigned target, size_t k) { return uint32_t(10000 * round + 100 * target + k); }

TEST_F(Gm, StoresLandCountedAtTargetsAckedInBatches) {
  auto rc = run_job(kOnePerNode, [](unsigned rank) {
    return gm_rank(rank, [](unsigned me) {
      const Layout l = store_layout();
      const size_t region = l.end + 3;
      std::vector<uint8_t> inbox(kRanks * region, 0);
      check(gm_expose(inbox.data(), inbox.size()) == 0, "gm_expose");
      auto inboxes = allgather(inbox.data());
      size_t per_writer = 0;
      for (size_t n : l.sizes) per_writer += n;
      for (unsigned round = 0; round < 2; ++round) {
        for (unsigned k = 0; k <= kStores; ++k)
          for (unsigned d = 1; d < kRanks; ++d) {
            unsigned t = (me + d) % kRanks;
            gm_ptr p = at(t, inboxes[t] + me * region, l.offsets[k]);
            if (k == kStores) {
              gm_store_i64(p, v64(me, t) ^ round);
              continue;
            }
            auto data = message(l.sizes[k], me, store_seq(round, t, k));
            check(gm_store(p, data.data(), data.size()) == 0, "gm_store %u to %u", k, t);
          }
        // Everyone else's stores into me, counted here.
        check(gm_store_sync((kRanks - 1) * per_writer) == 0, "gm_store_sync: %s", std::strerror(errno));
        for (unsigned w = 0; w < kRanks; ++w) {
          const uint8_t* r = inbox.data() + w * region;
          if (w == me) {
            expect_all(r, region, 0, "my own region");
            continue;
          }
          Layout data_only = l;
          data_only.sizes.pop_back();
          data_only.offsets.pop_back();
          expect_region(r, l.offsets.back(), data_only, w, [&](size_t k) { return store_seq(round, me, k); }, 0,
                        strf("round %u: stores from %u", round, w));
          int64_t v;
          std::memcpy(&v, r + l.offsets.back(), 8);
          check(v == (v64(w, me) ^ round), "round %u: gm_store_i64 from %u", round, w);
        }
        check(gm_all_store_sync() == 0, "round %u: gm_all_store_sync: %s", round, std::strerror(errno));
      }
      gm_stats st;
      gm_get_stats(&st);
      const unsigned long long stores = 2ull * (kRanks - 1) * (kStores + 1);
      std::fprintf(stderr, "[rank %u] %llu stores; acks received %llu, sent %llu\n", me, st.stores,
                   st.store_acks_received, st.store_acks_sent);
      check(st.stores == stores, "issued %llu stores, not %llu", st.stores, stores);
      check(st.store_acks_received > 0 && st.store_acks_received < stores, "%llu store acks for %llu stores",
            st.store_acks_received, stores);
      check(st.store_acks_sent > 0 && st.store_acks_sent < stores, "%llu store acks sent", st.store_acks_sent);
      check(st.refused == 0, "refused %llu", st.refused);
    });
  });
  EXPECT_EQ(rc, (std::vector<int>(kRanks, 0)));
}

// ---- refused ranges, bad nodes, oversize requests: errors, counted, nothing written

constexpr size_t kGuard = 4096, kArena = 64 << 10;
constexpr uint32_t kMemSeq = 9, kGoodSeq = 5;
constexpr size_t kGoodOff = 1000, kGoodBytes = 500;

TEST_F(Gm, RefusedRangesAndBadArguments) {
  auto rc = run_job(kOnePerNode, [](unsigned rank) {
    // Before gm_init.
    int64_t x = 0;
    check(gm_read(&x, gm_global(0, &x), sizeof x) == -1, "gm_read before gm_init");
    check(gm_barrier() == -1, "gm_barrier before gm_init");
    return gm_rank(rank, [](unsigned me) {
      std::vector<uint8_t> mem(kGuard + kArena + kGuard);
      fill(mem.data(), mem.size(), me, kMemSeq);
      uint8_t* arena = mem.data() + kGuard;
      check(gm_expose(arena, kArena) == 0, "gm_expose");
      errno = 0;
      check(gm_expose(nullptr, 64) == -1 && errno == EINVAL, "gm_expose(NULL): errno %d", errno);
      static uint8_t small[GM_MAX_REGIONS][64];
      for (unsigned i = 1; i < GM_MAX_REGIONS; ++i) check(gm_expose(small[i], 64) == 0, "gm_expose region %u", i + 1);
      errno = 0;
      check(gm_expose(small[0], 64) == -1 && errno == ENOSPC, "region %u: errno %d, not ENOSPC",
            GM_MAX_REGIONS + 1, errno);
      auto arenas = allgather(arena);
      const unsigned t = (me + 1) % kRanks, attacker = (me + kRanks - 1) % kRanks;
      const uint64_t a = arenas[t];
      uint8_t buf[64];
      std::memset(buf, 0x42, sizeof buf);

      // Local argument errors: EINVAL at the call, nothing sent, gm_sync clean.
      auto einval = [&](int r, const char* what) {
        check(r == -1 && errno == EINVAL, "%s: %d, errno %d (not EINVAL)", what, r, errno);
        errno = 0;
      };
      errno = 0;
      for (unsigned node : {unsigned(kRanks), 1000u}) {
        einval(gm_read(buf, gm_global(node, arena), 8), "gm_read, bad node");
        einval(gm_write(gm_global(node, arena), buf, 8), "gm_write, bad node");
        einval(gm_get(buf, gm_global(node, arena), 8), "gm_get, bad node");
        einval(gm_put(gm_global(node, arena), buf, 8), "gm_put, bad node");
        einval(gm_store(gm_global(node, arena), buf, 8), "gm_store, bad node");
      }
      // A buffer as big as the request: nothing may touch memory it does not have.
      const size_t big = size_t(GM_MAX_BYTES) + 1;
      void* huge = ::mmap(nullptr, big + 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                          -1, 0);
      check(huge != MAP_FAILED, "mmap");
      if (huge != MAP_FAILED) {
        einval(gm_read(huge, at(t, a), big), "gm_read > GM_MAX_BYTES");
        einval(gm_write(at(t, a), huge, big), "gm_write > GM_MAX_BYTES");
        einval(gm_get(huge, at(t, a), big), "gm_get > GM_MAX_BYTES");
        einval(gm_put(at(t, a), huge, big), "gm_put > GM_MAX_BYTES");
        einval(gm_store(at(t, a), huge, big), "gm_store > GM_MAX_BYTES");
        ::munmap(huge, big + 4096);
      }
      check(gm_sync() == 0, "gm_sync after calls that failed at once: %s", std::strerror(errno));

      // Ranges t did not expose: refused there (EFAULT here).
      auto efault = [&](int r, const char* what) {
        check(r == -1 && errno == EFAULT, "%s: %d, errno %d (not EFAULT)", what, r, errno);
        errno = 0;
      };
      const uint64_t unexposed = a - 100;  // in t's guard
      efault(gm_write(at(t, unexposed), buf, 8), "gm_write, unexposed");
      efault(gm_read(buf, at(t, unexposed), 8), "gm_read, unexposed");
      efault(gm_write(at(t, a, kArena - 4), buf, 8), "gm_write across the end");
      efault(gm_read(buf, at(t, a - 4), 8), "gm_read across the start");
      efault(gm_read(buf, gm_global(t, reinterpret_cast<void*>(16)), 8), "gm_read at address 16");
      check(gm_put(at(t, unexposed), buf, 8) == 0, "gm_put, unexposed: not issued");
      efault(gm_sync(), "gm_sync after a refused put");
      check(gm_sync() == 0, "a second gm_sync");
      check(gm_get(buf, at(t, a, kArena), 1) == 0, "gm_get, just past the end: not issued");
      efault(gm_sync(), "gm_sync after a refused get");
      // An address range that wraps around: refused (EFAULT) or rejected (EINVAL).
      int r = gm_write(gm_global(t, reinterpret_cast<void*>(UINTPTR_MAX - 15)), buf, 64);
      check(r == -1 && (errno == EFAULT || errno == EINVAL), "a write wrapping around: %d, errno %d", r, errno);
      errno = 0;
      check(gm_store(at(t, unexposed), buf, 8) == 0, "gm_store, unexposed: not issued");
      efault(gm_all_store_sync(), "gm_all_store_sync after a refused store");
      check(gm_all_store_sync() == 0, "a second gm_all_store_sync: %s", std::strerror(errno));

      // Still works: a good write, read back.
      auto good = message(kGoodBytes, me, kGoodSeq);
      check(gm_write(at(t, a, kGoodOff), good.data(), good.size()) == 0, "a good gm_write after the errors");
      std::vector<uint8_t> back(kGoodBytes);
      check(gm_read(back.data(), at(t, a, kGoodOff), kGoodBytes) == 0, "a good gm_read after the errors");
      expect_pattern(back.data(), kGoodBytes, me, kGoodSeq, "read back after the errors");
      check(gm_barrier() == 0, "gm_barrier");

      // At the owner: the attacker's refusals counted, only its good write landed.
      gm_stats st;
      gm_get_stats(&st);
      check(st.refused == 8 || st.refused == 9, "refused %llu requests, not 8 (or 9 with the wrap-around)",
            st.refused);
      const size_t good_at = kGuard + kGoodOff;
      expect_pattern(mem.data(), good_at, me, kMemSeq, "my memory before the good write");
      expect_pattern(mem.data() + good_at, kGoodBytes, attacker, kGoodSeq, "the good write");
      expect_pattern(mem.data() + good_at + kGoodBytes, mem.size() - good_at - kGoodBytes, me, kMemSeq,
                     "my memory after the good write", good_at + kGoodBytes);
    });
  });
  EXPECT_EQ(rc, (std::vector<int>(kRanks, 0)));
}

// ======================================================== message passing

// An MP rank: MP_Init (the eager limit from `eager_limit`, or the default),
// body, MP_Finalize; the exit status says how it went.
int mp_rank(unsigned rank, const char* eager_limit, const std::function<void(int me, int n)>& body) {
  if (eager_limit)
    ::setenv("ULNIC_MP_EAGER_LIMIT", eager_limit, 1);
  else
    ::unsetenv("ULNIC_MP_EAGER_LIMIT");
  if (int rc = MP_Init(); rc != MP_SUCCESS) {
    std::fprintf(stderr, "[rank %u] MP_Init: %d\n", rank, rc);
    return 2;
  }
  int me = -1, n = -1;
  check(MP_Comm_rank(&me) == MP_SUCCESS && MP_Comm_size(&n) == MP_SUCCESS, "MP_Comm_rank / size");
  check(me == int(rank) && n == int(FM_numnodes), "rank %d, size %d", me, n);
  body(me, n);
  MP_Stats st;
  MP_Get_stats(&st);
  check(st.bad_packets == 0, "%llu bad packets", st.bad_packets);
  return child_exit(MP_Finalize);
}

// A received message: status and bytes.
void expect_received(int rc, const MP_Status& st, int want_rc, int source, int tag, size_t count, size_t length,
                     const uint8_t* buf, uint32_t seq, const std::string& what) {
  check(rc == want_rc && st.error == want_rc, "%s: returned %d, status.error %d, not %d", what.c_str(), rc, st.error,
        want_rc);
  check(st.source == source && st.tag == tag, "%s: from %d tag %d, not %d tag %d", what.c_str(), st.source, st.tag,
        source, tag);
  check(st.count == count && st.length == length, "%s: count %zu length %zu, not %zu / %zu", what.c_str(), st.count,
        st.length, count, length);
  if (buf) expect_pattern(buf, std::min(count, st.count), uint32_t(source), seq, what);
}

// Until a message matching (source, tag) waits here (it and, by FM's
// order, everything its sender sent before it).
bool probe_until(int source, int tag, MP_Status* st = nullptr) {
  auto until = Clock::now() + 30s;
  int found = 0;
  while (Clock::now() < until) {
    check(MP_Iprobe(source, tag, &found, st) == MP_SUCCESS, "MP_Iprobe");
    if (found) return true;
    ::usleep(200);
  }
  check(false, "nothing from %d with tag %d arrived", source, tag);
  return false;
}

void waitall(std::vector<MP_Request>& reqs, const char* what) {
  int rc = MP_Waitall(int(reqs.size()), reqs.data(), nullptr);
  check(rc == MP_SUCCESS, "%s: MP_Waitall %d", what, rc);
  for (MP_Request r : reqs) check(r == MP_REQUEST_NULL, "%s: a request left after MP_Waitall", what);
}

// ---- matching by source and tag, wildcards, 8 ranks (2 per node)

size_t match_size_a(int s, int tag) { return size_t(10 + 7 * tag + s); }
const size_t kMatchSizesB[] = {5, 3005, 6005, 20000};  // the last one rendezvous (default limit)
const int kTagsC[] = {50, 30, 90, 40};
const size_t kSizesC[] = {12, 20000, 0, 7};

TEST_F(Mp, MatchingBySourceTagAndWildcards) {
  auto rc = run_job(kTwoPerNode, [](unsigned rank) {
    return mp_rank(rank, nullptr, [](int me, int n) {
      std::vector<std::vector<uint8_t>> keep;  // send buffers, alive until MP_Waitall
      std::vector<MP_Request> sends;
      auto isend = [&](size_t bytes, int dest, int tag, uint32_t seq) {
        keep.push_back(message(bytes, uint32_t(me), seq));
        MP_Request r = MP_REQUEST_NULL;
        check(MP_Isend(keep.back().data(), bytes, dest, tag, &r) == MP_SUCCESS, "MP_Isend to %d tag %d", dest, tag);
        sends.push_back(r);
      };
      std::vector<uint8_t> buf(20000);
      MP_Status st;
      // A: every pair, tags 0..3, received by exact (source, tag) in the reverse order.
      for (int d = 0; d < n; ++d)
        if (d != me)
          for (int tag = 0; tag < 4; ++tag) isend(match_size_a(me, tag), d, tag, uint32_t(100 * d + tag));
      for (int tag = 3; tag >= 0; --tag)
        for (int s = n - 1; s >= 0; --s) {
          if (s == me) continue;
          int rc = MP_Recv(buf.data(), buf.size(), s, tag, &st);
          size_t len = match_size_a(s, tag);
          expect_received(rc, st, MP_SUCCESS, s, tag, len, len, buf.data(), uint32_t(100 * me + tag),
                          strf("A: from %d tag %d", s, tag));
        }
      // B: MP_ANY_SOURCE, tag 10: 4 from each, each sender's in send order.
      for (int d = 0; d < n; ++d)
        if (d != me)
          for (uint32_t k = 0; k < 4; ++k) isend(kMatchSizesB[k], d, 10, 1000 * d + 200 + k);
      std::vector<uint32_t> next(n, 0);
      for (int i = 0; i < 4 * (n - 1); ++i) {
        int rc = MP_Recv(buf.data(), buf.size(), MP_ANY_SOURCE, 10, &st);
        int s = st.source;
        check(rc == MP_SUCCESS && s >= 0 && s < n && s != me, "B: receive %d: rc %d, source %d", i, rc, s);
        if (rc != MP_SUCCESS || s < 0 || s >= n || s == me) continue;
        uint32_t k = next[s]++;
        check(k < 4, "B: a 5th message from %d", s);
        if (k < 4)
          expect_received(rc, st, MP_SUCCESS, s, 10, kMatchSizesB[k], kMatchSizesB[k], buf.data(),
                          1000 * me + 200 + k, strf("B: message %u from %d", k, s));
      }
      // C: MP_ANY_TAG from one source: the tags come in send order.
      int prev = (me + n - 1) % n;
      for (uint32_t i = 0; i < 4; ++i) isend(kSizesC[i], (me + 1) % n, kTagsC[i], 300 + i);
      for (uint32_t i = 0; i < 4; ++i) {
        int rc = MP_Recv(buf.data(), buf.size(), prev, MP_ANY_TAG, &st);
        expect_received(rc, st, MP_SUCCESS, prev, kTagsC[i], kSizesC[i], kSizesC[i], buf.data(), 300 + i,
                        strf("C: message %u", i));
      }
      // D: both wildcards.
      isend(1000 + me, (me + 2) % n, 500 + me, 400);
      int from = (me + n - 2) % n;
      int rc = MP_Recv(buf.data(), buf.size(), MP_ANY_SOURCE, MP_ANY_TAG, &st);
      expect_received(rc, st, MP_SUCCESS, from, 500 + from, 1000 + from, 1000 + from, buf.data(), 400,
                      "D: any source, any tag");
      waitall(sends, "sends");
    });
  });
  EXPECT_EQ(rc, (std::vector<int>(8, 0)));
}

// ---- non-overtaking: one sender, one tag, eager and rendezvous mixed,
// received pre-posted and unexpected (eager limit 1000 from the environment)

const std::vector<size_t> kOrderSizes = {10, 10, 10, 5000, 3000, 100, 20000, 1, 1001, 1000, 0, 999, 4096};
constexpr size_t kOrderLimit = 1000;

TEST_F(Mp, NonOvertakingEagerAndRendezvousMixed) {
  auto rc = run_job(kOnePerNode, [](unsigned rank) {
    return mp_rank(rank, "1000", [](int me, int n) {
      check(MP_Eager_limit() == kOrderLimit, "MP_Eager_limit() = %zu with ULNIC_MP_EAGER_LIMIT=1000",
            MP_Eager_limit());
      const int next = (me + 1) % n, prev = (me + n - 1) % n;
      const size_t m = kOrderSizes.size();
      std::vector<std::vector<uint8_t>> out, in(m, std::vector<uint8_t>(20000));
      for (size_t i = 0; i < m; ++i) out.push_back(message(kOrderSizes[i], uint32_t(me), uint32_t(500 + i)));
      MP_Stats s0, s1;
      MP_Get_stats(&s0);
      // Pre-posted (half of them MP_ANY_SOURCE), then "go" to the sender.
      std::vector<MP_Request> recvs(m), sends(m);
      for (size_t i = 0; i < m; ++i)
        check(MP_Irecv(in[i].data(), in[i].size(), i % 2 ? MP_ANY_SOURCE : prev, 7, &recvs[i]) == MP_SUCCESS,
              "MP_Irecv %zu", i);
      check(MP_Send(nullptr, 0, prev, 99) == MP_SUCCESS, "go");
      check(MP_Recv(nullptr, 0, next, 99, nullptr) == MP_SUCCESS, "wait for go");
      for (size_t i = 0; i < m; ++i)
        check(MP_Isend(out[i].data(), out[i].size(), next, 7, &sends[i]) == MP_SUCCESS, "MP_Isend %zu", i);
      std::vector<MP_Status> sts(m);
      check(MP_Waitall(int(m), recvs.data(), sts.data()) == MP_SUCCESS, "pre-posted: MP_Waitall");
      for (size_t i = 0; i < m; ++i)
        expect_received(sts[i].error, sts[i], MP_SUCCESS, prev, 7, kOrderSizes[i], kOrderSizes[i], in[i].data(),
                        uint32_t(500 + i), strf("pre-posted %zu (%zu B)", i, kOrderSizes[i]));
      waitall(sends, "pre-posted sends");
      // Unexpected: everything sent (and a marker after it) before a receive is posted.
      for (size_t i = 0; i < m; ++i)
        check(MP_Isend(out[i].data(), out[i].size(), next, 8, &sends[i]) == MP_SUCCESS, "MP_Isend %zu", i);
      check(MP_Send(nullptr, 0, next, 9) == MP_SUCCESS, "marker");
      probe_until(prev, 9);
      MP_Status st{};
      int found = 0;
      check(MP_Iprobe(prev, 8, &found, &st) == MP_SUCCESS && found && st.length == kOrderSizes[0] &&
                st.source == prev && st.tag == 8,
            "MP_Iprobe: the first message waits (found %d, length %zu)", found, st.length);
      for (size_t i = 0; i < m; ++i) {
        std::fill(in[i].begin(), in[i].end(), 0);
        int rc = MP_Recv(in[i].data(), in[i].size(), i % 3 ? prev : MP_ANY_SOURCE, 8, &st);
        expect_received(rc, st, MP_SUCCESS, prev, 8, kOrderSizes[i], kOrderSizes[i], in[i].data(), uint32_t(500 + i),
                        strf("unexpected %zu (%zu B)", i, kOrderSizes[i]));
      }
      check(MP_Recv(nullptr, 0, prev, 9, nullptr) == MP_SUCCESS, "the marker");
      waitall(sends, "unexpected sends");
      MP_Get_stats(&s1);
      unsigned long long eager = 0, rdv = 0;
      for (size_t sz : kOrderSizes) (sz <= kOrderLimit ? eager : rdv)++;
      check(s1.eager_sent - s0.eager_sent == 2 * eager + 2 && s1.rendezvous_sent - s0.rendezvous_sent == 2 * rdv,
            "eager %llu, rendezvous %llu sent; expected %llu / %llu", s1.eager_sent - s0.eager_sent,
            s1.rendezvous_sent - s0.rendezvous_sent, 2 * eager + 2, 2 * rdv);
    });
  });
  EXPECT_EQ(rc, (std::vector<int>(kRanks, 0)));
}

// ---- pre-posted receives go straight into the buffer; unexpected ones are staged

const std::vector<size_t> kDirectSizes = {1, 100, 4256, 4257, 16384, 9000, 16385, 70000};  // default limit

TEST_F(Mp, PrePostedGoDirectUnexpectedAreStaged) {
  auto rc = run_job(kOnePerNode, [](unsigned rank) {
    return mp_rank(rank, nullptr, [](int me, int) {
      const int peer = me ^ 1;  // 0 sends to 1, 2 to 3 (different nodes)
      const bool sender = me % 2 == 0;
      const size_t m = kDirectSizes.size();
      if (sender) {
        std::vector<std::vector<uint8_t>> out;
        for (size_t i = 0; i < m; ++i) out.push_back(message(kDirectSizes[i], uint32_t(me), uint32_t(600 + i)));
        check(MP_Recv(nullptr, 0, peer, 100, nullptr) == MP_SUCCESS, "go");
        for (size_t i = 0; i < m; ++i)
          check(MP_Send(out[i].data(), out[i].size(), peer, int(i)) == MP_SUCCESS, "MP_Send %zu", i);
        check(MP_Recv(nullptr, 0, peer, 101, nullptr) == MP_SUCCESS, "go 2");
        std::vector<MP_Request> sends(m);
        for (size_t i = 0; i < m; ++i)
          check(MP_Isend(out[i].data(), out[i].size(), peer, int(i), &sends[i]) == MP_SUCCESS, "MP_Isend %zu", i);
        check(MP_Send(nullptr, 0, peer, 102) == MP_SUCCESS, "done");
        waitall(sends, "sends");
        return;
      }
      std::vector<std::vector<uint8_t>> in(m);
      for (size_t i = 0; i < m; ++i) in[i].assign(kDirectSizes[i], 0);
      MP_Stats s0, s1, s2;
      MP_Get_stats(&s0);
      std::vector<MP_Request> recvs(m);
      for (size_t i = 0; i < m; ++i)
        check(MP_Irecv(in[i].data(), in[i].size(), peer, int(i), &recvs[i]) == MP_SUCCESS, "MP_Irecv %zu", i);
      check(MP_Send(nullptr, 0, peer, 100) == MP_SUCCESS, "go");
      std::vector<MP_Status> sts(m);
      check(MP_Waitall(int(m), recvs.data(), sts.data()) == MP_SUCCESS, "MP_Waitall");
      for (size_t i = 0; i < m; ++i)
        expect_received(sts[i].error, sts[i], MP_SUCCESS, peer, int(i), kDirectSizes[i], kDirectSizes[i],
                        in[i].data(), uint32_t(600 + i), strf("pre-posted %zu", i));
      MP_Get_stats(&s1);
      check(s1.direct - s0.direct == m, "pre-posted: direct grew by %llu, not %zu", s1.direct - s0.direct, m);
      check(s1.unexpected == s0.unexpected, "pre-posted: %llu unexpected", s1.unexpected - s0.unexpected);
      check(s1.staged_bytes == s0.staged_bytes, "pre-posted: %llu bytes staged", s1.staged_bytes - s0.staged_bytes);
      // Unexpected: all of it here before any receive, received last first.
      check(MP_Send(nullptr, 0, peer, 101) == MP_SUCCESS, "go 2");
      probe_until(peer, 102);
      MP_Status st;
      for (size_t i = m; i-- > 0;) {
        std::fill(in[i].begin(), in[i].end(), 0);
        int rc = MP_Recv(in[i].data(), in[i].size(), peer, int(i), &st);
        expect_received(rc, st, MP_SUCCESS, peer, int(i), kDirectSizes[i], kDirectSizes[i], in[i].data(),
                        uint32_t(600 + i), strf("unexpected %zu", i));
      }
      check(MP_Recv(nullptr, 0, peer, 102, nullptr) == MP_SUCCESS, "done");
      MP_Get_stats(&s2);
      unsigned long long eager_bytes = 0, rdv = 0;
      for (size_t n : kDirectSizes) n <= MP_Eager_limit() ? eager_bytes += n : rdv++;
      check(s2.unexpected - s1.unexpected == m + 1, "unexpected grew by %llu, not %zu", s2.unexpected - s1.unexpected,
            m + 1);
      check(s2.staged_bytes - s1.staged_bytes == eager_bytes, "staged %llu bytes, not %llu",
            s2.staged_bytes - s1.staged_bytes, eager_bytes);
      check(s2.direct - s1.direct <= rdv, "unexpected: direct grew by %llu", s2.direct - s1.direct);
    });
  });
  EXPECT_EQ(rc, (std::vector<int>(kRanks, 0)));
}

// ---- truncation, eager and rendezvous, pre-posted and unexpected

struct Trunc {
  size_t sent, buffer;
};
const Trunc kTrunc[] = {{3000, 1000},  {500, 500},  {100000, 40000}, {50000, 60000},
                        {10, 0},       {77, 100},   {16385, 16384},  {16384, 16383}};
constexpr size_t kTruncGuard = 64;

TEST_F(Mp, TruncationKeepsWhatFitsAndTheNextMessage) {
  auto rc = run_job(kOnePerNode, [](unsigned rank) {
    return mp_rank(rank, nullptr, [](int me, int n) {
      const int next = (me + 1) % n, prev = (me + n - 1) % n;
      const size_t m = std::size(kTrunc);
      size_t truncated = 0;
      for (const Trunc& t : kTrunc) truncated += t.sent > t.buffer;
      std::vector<std::vector<uint8_t>> out, in(m);
      for (size_t i = 0; i < m; ++i) out.push_back(message(kTrunc[i].sent, uint32_t(me), uint32_t(700 + i)));
      auto expect = [&](size_t i, int rc, const MP_Status& st, int tag, const char* how) {
        const Trunc& t = kTrunc[i];
        bool cut = t.sent > t.buffer;
        size_t count = std::min(t.sent, t.buffer);
        expect_received(rc, st, cut ? MP_ERR_TRUNCATE : MP_SUCCESS, prev, tag, count, t.sent,
                        in[i].data(), uint32_t(700 + i), strf("%s %zu: %zu B into %zu", how, i, t.sent, t.buffer));
        expect_all(in[i].data() + count, in[i].size() - count, 0xEE, strf("%s %zu: past what fits", how, i));
      };
      auto buffer = [&](size_t i) {
        in[i].assign(kTrunc[i].buffer + kTruncGuard, 0xEE);
        return kTrunc[i].buffer ? in[i].data() : nullptr;
      };
      MP_Stats s0, s1;
      MP_Get_stats(&s0);
      // Pre-posted (tag 1).
      std::vector<MP_Request> recvs(m), sends(m);
      for (size_t i = 0; i < m; ++i)
        check(MP_Irecv(buffer(i), kTrunc[i].buffer, prev, 1, &recvs[i]) == MP_SUCCESS, "MP_Irecv %zu", i);
      check(MP_Send(nullptr, 0, prev, 99) == MP_SUCCESS, "go");
      check(MP_Recv(nullptr, 0, next, 99, nullptr) == MP_SUCCESS, "wait for go");
      for (size_t i = 0; i < m; ++i)
        check(MP_Isend(out[i].data(), out[i].size(), next, 1, &sends[i]) == MP_SUCCESS, "MP_Isend %zu", i);
      for (size_t i = 0; i < m; ++i) {
        MP_Status st{};
        int rc = MP_Wait(&recvs[i], &st);
        expect(i, rc, st, 1, "pre-posted");
      }
      waitall(sends, "pre-posted sends (truncation is the receiver's)");
      // Unexpected (tag 2): all sent, then a marker; received in order.
      for (size_t i = 0; i < m; ++i)
        check(MP_Isend(out[i].data(), out[i].size(), next, 2, &sends[i]) == MP_SUCCESS, "MP_Isend %zu", i);
      check(MP_Send(nullptr, 0, next, 98) == MP_SUCCESS, "marker");
      probe_until(prev, 98);
      for (size_t i = 0; i < m; ++i) {
        MP_Status st{};
        int rc = MP_Recv(buffer(i), kTrunc[i].buffer, prev, 2, &st);
        expect(i, rc, st, 2, "unexpected");
      }
      check(MP_Recv(nullptr, 0, prev, 98, nullptr) == MP_SUCCESS, "the marker");
      waitall(sends, "unexpected sends (truncation is the receiver's)");
      MP_Get_stats(&s1);
      check(s1.truncated - s0.truncated == 2 * truncated, "truncated %llu, not %zu", s1.truncated - s0.truncated,
            2 * truncated);
    });
  });
  EXPECT_EQ(rc, (std::vector<int>(kRanks, 0)));
}

// ---- sizes around the eager limit up to 3 MiB, windows of 16 both ways, MP_Test

TEST_F(Mp, SizesAndWindowsBothWaysWithTestPolling) {
  auto rc = run_job(kOnePerNode, [](unsigned rank) {
    return mp_rank(rank, nullptr, [](int me, int) {
      const size_t L = MP_Eager_limit();
      check(L == MP_EAGER_LIMIT_DEFAULT, "MP_Eager_limit() = %zu, not the default", L);
      const int peer = me ^ 1;
      // Sizes, each way at once, completed by MP_Test polling alone.
      const std::vector<size_t> sizes = {0, 1, L - 1, L, L + 1, 1 << 20, 3 << 20};
      const size_t m = sizes.size();
      std::vector<std::vector<uint8_t>> out, in;
      for (size_t i = 0; i < m; ++i) {
        out.push_back(message(sizes[i], uint32_t(me), uint32_t(800 + i)));
        in.emplace_back(sizes[i], 0);
      }
      MP_Stats s0, s1;
      MP_Get_stats(&s0);
      std::vector<MP_Request> reqs(2 * m);
      for (size_t i = 0; i < m; ++i) {
        check(MP_Irecv(in[i].data(), sizes[i], peer, int(i), &reqs[i]) == MP_SUCCESS, "MP_Irecv %zu", i);
        check(MP_Isend(out[i].data(), sizes[i], peer, int(i), &reqs[m + i]) == MP_SUCCESS, "MP_Isend %zu", i);
      }
      std::vector<MP_Status> sts(2 * m);
      std::vector<bool> done(2 * m, false);
      size_t left = 2 * m;
      unsigned long long polls = 0;
      auto until = Clock::now() + 40s;
      while (left && Clock::now() < until) {
        for (size_t i = 0; i < 2 * m; ++i) {
          if (done[i]) continue;
          int flag = 0;
          int rc = MP_Test(&reqs[i], &flag, &sts[i]);
          polls++;
          check(rc == MP_SUCCESS, "MP_Test %zu: %d", i, rc);
          if (rc != MP_SUCCESS || flag) {
            done[i] = true;
            left--;
            check(reqs[i] == MP_REQUEST_NULL, "MP_Test left request %zu", i);
          }
        }
        if (left) ::usleep(100);
      }
      check(left == 0, "%zu requests never completed", left);
      std::fprintf(stderr, "[rank %d] sizes up to 3 MiB both ways: %llu MP_Test calls\n", me, polls);
      for (size_t i = 0; i < m && !left; ++i)
        expect_received(sts[i].error, sts[i], MP_SUCCESS, peer, int(i), sizes[i], sizes[i], in[i].data(),
                        uint32_t(800 + i), strf("%zu B", sizes[i]));
      MP_Get_stats(&s1);
      check(s1.eager_sent - s0.eager_sent == 4 && s1.rendezvous_sent - s0.rendezvous_sent == 3,
            "eager %llu, rendezvous %llu (not 4 / 3)", s1.eager_sent - s0.eager_sent,
            s1.rendezvous_sent - s0.rendezvous_sent);
      // Windows of 16 each way, one tag (so in order): sends posted first, then receives first.
      const size_t kWin = 16, wsizes[] = {3000, 40000, 17, 100000, 0, L + 1, L, 5000};
      for (int round = 0; round < 2; ++round) {
        std::vector<std::vector<uint8_t>> wout, win;
        for (size_t i = 0; i < kWin; ++i) {
          size_t sz = wsizes[(i + round) % std::size(wsizes)];
          wout.push_back(message(sz, uint32_t(me), uint32_t(900 + 100 * round + i)));
          win.emplace_back(sz + 8, 0);
        }
        std::vector<MP_Request> w(2 * kWin);
        for (int half = 0; half < 2; ++half)
          for (size_t i = 0; i < kWin; ++i) {
            if ((half == 0) == (round == 0))
              check(MP_Isend(wout[i].data(), wout[i].size(), peer, 20 + round, &w[kWin + i]) == MP_SUCCESS,
                    "window %d: MP_Isend %zu", round, i);
            else
              check(MP_Irecv(win[i].data(), win[i].size(), round ? MP_ANY_SOURCE : peer, 20 + round, &w[i]) ==
                        MP_SUCCESS,
                    "window %d: MP_Irecv %zu", round, i);
          }
        std::vector<MP_Status> ws(2 * kWin);
        check(MP_Waitall(int(w.size()), w.data(), ws.data()) == MP_SUCCESS, "window %d: MP_Waitall", round);
        for (size_t i = 0; i < kWin; ++i) {
          size_t sz = wout[i].size();
          expect_received(ws[i].error, ws[i], MP_SUCCESS, peer, 20 + round, sz, sz, win[i].data(),
                          uint32_t(900 + 100 * round + i), strf("window %d message %zu", round, i));
        }
      }
    });
  });
  EXPECT_EQ(rc, (std::vector<int>(kRanks, 0)));
}

// ---- an eager message matched while its bytes are still arriving (limit 4 MiB)

constexpr size_t kBigEager = 3 << 20, kBigCut = 2 << 20, kCutBuffer = 1 << 20;

TEST_F(Mp, EagerMatchedWhileStillArriving) {
  auto rc = run_job(kOnePerNode, [](unsigned rank) {
    return mp_rank(rank, "4194304", [](int me, int) {
      check(MP_Eager_limit() == (4u << 20), "MP_Eager_limit() = %zu", MP_Eager_limit());
      const int peer = me ^ 1;
      if (me % 2 == 0) {  // 0 -> 1 and 2 -> 3
        auto a = message(kBigEager, uint32_t(me), 1), b = message(kBigCut, uint32_t(me), 2);
        check(MP_Send(a.data(), a.size(), peer, 1) == MP_SUCCESS, "3 MiB");
        check(MP_Recv(nullptr, 0, peer, 3, nullptr) == MP_SUCCESS, "go");
        check(MP_Send(b.data(), b.size(), peer, 2) == MP_SUCCESS, "2 MiB");
        MP_Stats st;
        MP_Get_stats(&st);
        check(st.eager_sent == 2 && st.rendezvous_sent == 0, "eager %llu, rendezvous %llu", st.eager_sent,
              st.rendezvous_sent);
        return;
      }
      MP_Stats s0, s1;
      MP_Get_stats(&s0);
      std::vector<uint8_t> in(kBigEager + 64, 0xEE);
      MP_Status st{};
      // Seen at its first packet; FM's window (59 packets) holds the rest back.
      probe_until(peer, 1, &st);
      check(st.length == kBigEager, "MP_Iprobe: length %zu", st.length);
      int rc = MP_Recv(in.data(), kBigEager, peer, 1, &st);
      expect_received(rc, st, MP_SUCCESS, peer, 1, kBigEager, kBigEager, in.data(), 1, "3 MiB eager");
      expect_all(in.data() + kBigEager, 64, 0xEE, "past the 3 MiB");
      check(MP_Send(nullptr, 0, peer, 3) == MP_SUCCESS, "go");
      std::fill(in.begin(), in.end(), 0xEE);
      probe_until(peer, 2, &st);
      rc = MP_Recv(in.data(), kCutBuffer, peer, 2, &st);
      expect_received(rc, st, MP_ERR_TRUNCATE, peer, 2, kCutBuffer, kBigCut, in.data(), 2, "2 MiB into 1 MiB");
      expect_all(in.data() + kCutBuffer, 64, 0xEE, "past the 1 MiB");
      MP_Get_stats(&s1);
      check(s1.unexpected - s0.unexpected == 2 && s1.direct == s0.direct, "unexpected +%llu, direct +%llu",
            s1.unexpected - s0.unexpected, s1.direct - s0.direct);
      check(s1.staged_bytes - s0.staged_bytes == kBigEager + kCutBuffer, "staged %llu bytes",
            s1.staged_bytes - s0.staged_bytes);
    });
  });
  EXPECT_EQ(rc, (std::vector<int>(kRanks, 0)));
}

// ---- argument errors, before MP_Init and after MP_Finalize

TEST_F(Mp, ArgumentErrors) {
  auto rc = run_job({0, 3}, [](unsigned rank) {
    uint8_t buf[128] = {};
    MP_Request req = MP_REQUEST_NULL;
    MP_Status st;
    int flag = 0, x = 0;
    auto uninit = [&](const char* what) {
      check(MP_Send(buf, 1, 0, 0) == MP_ERR_INIT, "%s: MP_Send", what);
      check(MP_Recv(buf, 1, 0, 0, &st) == MP_ERR_INIT, "%s: MP_Recv", what);
      check(MP_Isend(buf, 1, 0, 0, &req) == MP_ERR_INIT, "%s: MP_Isend", what);
      check(MP_Irecv(buf, 1, 0, 0, &req) == MP_ERR_INIT, "%s: MP_Irecv", what);
      check(MP_Wait(&req, &st) == MP_ERR_INIT, "%s: MP_Wait", what);
      check(MP_Test(&req, &flag, &st) == MP_ERR_INIT, "%s: MP_Test", what);
      check(MP_Waitall(0, nullptr, nullptr) == MP_ERR_INIT, "%s: MP_Waitall", what);
      check(MP_Iprobe(0, 0, &flag, &st) == MP_ERR_INIT, "%s: MP_Iprobe", what);
      check(MP_Comm_rank(&x) == MP_ERR_INIT && MP_Comm_size(&x) == MP_ERR_INIT, "%s: MP_Comm_*", what);
      check(MP_Finalize() == MP_ERR_INIT, "%s: MP_Finalize", what);
    };
    uninit("before MP_Init");
    ::unsetenv("ULNIC_MP_EAGER_LIMIT");
    if (MP_Init() != MP_SUCCESS) return 2;
    check(MP_Init() == MP_ERR_INIT, "a second MP_Init");
    const int me = int(rank), peer = 1 - me, n = 2;
    // Ranks.
    check(MP_Send(buf, 1, n, 0) == MP_ERR_ARG, "MP_Send to rank size");
    check(MP_Send(buf, 1, MP_ANY_SOURCE, 0) == MP_ERR_ARG, "MP_Send to MP_ANY_SOURCE");
    check(MP_Send(buf, 1, -7, 0) == MP_ERR_ARG, "MP_Send to -7");
    check(MP_Isend(buf, 1, 99, 0, &req) == MP_ERR_ARG, "MP_Isend to 99");
    check(MP_Recv(buf, 1, n, 0, &st) == MP_ERR_ARG, "MP_Recv from rank size");
    check(MP_Recv(buf, 1, -2, 0, &st) == MP_ERR_ARG, "MP_Recv from -2");
    check(MP_Irecv(buf, 1, 99, 0, &req) == MP_ERR_ARG, "MP_Irecv from 99");
    check(MP_Iprobe(n, 0, &flag, &st) == MP_ERR_ARG, "MP_Iprobe rank size");
    // Tags.
    check(MP_Send(buf, 1, peer, MP_ANY_TAG) == MP_ERR_ARG, "MP_Send with MP_ANY_TAG");
    check(MP_Send(buf, 1, peer, -5) == MP_ERR_ARG, "MP_Send tag -5");
    check(MP_Isend(buf, 1, peer, INT_MIN, &req) == MP_ERR_ARG, "MP_Isend tag INT_MIN");
    check(MP_Recv(buf, 1, peer, -2, &st) == MP_ERR_ARG, "MP_Recv tag -2");
    check(MP_Irecv(buf, 1, peer, -3, &req) == MP_ERR_ARG, "MP_Irecv tag -3");
    check(MP_Iprobe(peer, -4, &flag, &st) == MP_ERR_ARG, "MP_Iprobe tag -4");
    // NULL buffers with bytes, NULL outputs, counts.
    check(MP_Send(nullptr, 10, peer, 0) == MP_ERR_ARG, "MP_Send NULL, 10 B");
    check(MP_Isend(nullptr, 1, peer, 0, &req) == MP_ERR_ARG, "MP_Isend NULL, 1 B");
    check(MP_Recv(nullptr, 10, peer, 0, &st) == MP_ERR_ARG, "MP_Recv NULL, 10 B");
    check(MP_Irecv(nullptr, 5, peer, 0, &req) == MP_ERR_ARG, "MP_Irecv NULL, 5 B");
    check(MP_Isend(buf, 1, peer, 0, nullptr) == MP_ERR_ARG, "MP_Isend, no request");
    check(MP_Irecv(buf, 1, peer, 0, nullptr) == MP_ERR_ARG, "MP_Irecv, no request");
    check(MP_Wait(nullptr, &st) == MP_ERR_ARG, "MP_Wait(NULL)");
    check(MP_Test(&req, nullptr, &st) == MP_ERR_ARG, "MP_Test, no flag");
    check(MP_Iprobe(peer, 0, nullptr, &st) == MP_ERR_ARG, "MP_Iprobe, no flag");
    check(MP_Waitall(-1, &req, nullptr) == MP_ERR_ARG, "MP_Waitall(-1)");
    check(MP_Comm_rank(nullptr) == MP_ERR_ARG && MP_Comm_size(nullptr) == MP_ERR_ARG, "MP_Comm_*(NULL)");
    // None of that sent anything: the first message to arrive is the good one.
    auto data = message(100, uint32_t(me), 42);
    check(MP_Send(nullptr, 0, peer, MP_TAG_MAX) == MP_SUCCESS, "0 B, NULL, tag MP_TAG_MAX");
    check(MP_Send(data.data(), data.size(), peer, 0) == MP_SUCCESS, "100 B");
    int rc = MP_Recv(nullptr, 0, peer, MP_ANY_TAG, &st);
    expect_received(rc, st, MP_SUCCESS, peer, MP_TAG_MAX, 0, 0, nullptr, 0, "0 B with tag MP_TAG_MAX");
    std::fill(std::begin(buf), std::end(buf), 0);
    rc = MP_Recv(buf, sizeof buf, MP_ANY_SOURCE, MP_ANY_TAG, &st);
    expect_received(rc, st, MP_SUCCESS, peer, 0, 100, 100, buf, 42, "100 B after the errors");
    check(MP_Iprobe(MP_ANY_SOURCE, MP_ANY_TAG, &flag, &st) == MP_SUCCESS && !flag, "something more arrived");
    MP_Stats ms;
    MP_Get_stats(&ms);
    check(ms.eager_sent == 2 && ms.rendezvous_sent == 0 && ms.bad_packets == 0,
          "eager %llu, rendezvous %llu, bad packets %llu", ms.eager_sent, ms.rendezvous_sent, ms.bad_packets);
    check(MP_Finalize() == MP_SUCCESS, "MP_Finalize");
    uninit("after MP_Finalize");
    return g_failures ? 1 : 0;
  });
  EXPECT_EQ(rc, (std::vector<int>{0, 0}));
}

}  // namespace

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  ::testing::AddGlobalTestEnvironment(new vipl_test::ClusterEnvironment("fmlayers", int(kRanks)));
  return RUN_ALL_TESTS();
}
