// Fast Messages 2.x core (host/fm): real processes on a real 2-node cluster
// that this binary boots once (vipl_cluster.h) in a private runtime
// directory. Every FM job is a set of forked children, each one FM rank
// with its own slot (ULNIC_NODE picks the NIC); every byte is checked.
// A child reports by its exit status; the parent asserts on those and on
// the NICs' am_refused counters (FM must never make a NIC refuse).
#include <fcntl.h>
#include <fm.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <thread>
#include <vector>

#include "fm_job.h"
#include "ulnic/abi/am.h"
#include "ulnic/nic.h"

namespace {

using namespace fm_test;

constexpr int kNodes = 6;  // most tests use nodes 0 and 1

// ---- in the children

// Sends message `seq` of `size` bytes (bound `bound`) in pieces cycling
// through `pieces`.
void send_message(unsigned dest, unsigned handler, uint32_t seq, size_t size, size_t bound,
                  const std::vector<size_t>& pieces) {
  std::vector<uint8_t> data(size);
  fill(data, uint32_t(FM_nodeid), seq);
  FM_stream* s = FM_begin_message(dest, bound, handler);
  check(s != nullptr, "FM_begin_message(%u, %zu) = NULL", dest, bound);
  if (!s) return;
  size_t off = 0;
  for (size_t k = 0; off < size; ++k) {
    size_t n = std::min(pieces[k % pieces.size()], size - off);
    check(FM_send_piece(s, data.data() + off, n) == 0, "FM_send_piece(%zu)", n);
    off += n;
  }
  check(FM_end_message(s) == 0, "FM_end_message");
}

// What a receiver knows of a sender's messages: their sizes by seq.
using SizeOf = std::function<size_t(uint32_t sender, uint32_t seq)>;

struct Receiver {
  SizeOf size_of;
  std::vector<size_t> reads{5, 1000, 1, 8191, 3, 65536, 17, 4256};
  std::map<unsigned, uint32_t> next_seq;  // per sender: messages run so far (order check)
  uint64_t messages = 0, bytes = 0;
  bool half = false;                      // read only half, then return (the rest is discarded)
} g_rx;

int verifying_handler(FM_stream* s, unsigned sender) {
  uint32_t seq = g_rx.next_seq[sender]++;
  size_t size = g_rx.size_of(sender, seq);
  size_t want = g_rx.half ? size / 2 : size;
  std::vector<uint8_t> buf(size + 64);
  size_t got = 0;
  for (size_t k = 0; got < want; ++k) {
    size_t n = std::min(g_rx.reads[k % g_rx.reads.size()], want - got);
    FM_ULONG r = FM_receive(buf.data() + got, s, n);
    check(r == n, "sender %u seq %u: FM_receive(%zu) at %zu returned %lu", sender, seq, n, got, r);
    if (r != n) break;
    got += n;
  }
  if (!g_rx.half) {  // past the end: nothing more (the bound may be larger than the message)
    FM_ULONG r = FM_receive(buf.data() + got, s, 64);
    check(r == 0, "sender %u seq %u: %lu bytes past the end", sender, seq, r);
  }
  size_t bad = first_mismatch(buf, got, sender, seq);
  check(bad == SIZE_MAX, "sender %u seq %u (%zu bytes): byte %zu differs", sender, seq, size, bad);
  g_rx.messages++;
  g_rx.bytes += got;
  return FM_CONTINUE;
}

int half_handler(FM_stream* s, unsigned sender) {
  g_rx.half = true;
  int r = verifying_handler(s, sender);
  g_rx.half = false;
  return r;
}

// Extracts until `done()` or the deadline; sleeps a little when idle (two
// cores are shared with the NICs' QEMUs).
bool extract_until(const std::function<bool()>& done, FM_ULONG budget = 1 << 20,
                   std::chrono::seconds limit = 40s) {
  auto until = Clock::now() + limit;
  while (!done()) {
    if (Clock::now() > until) return false;
    if (FM_extract(budget) == 0) ::usleep(100);
  }
  return true;
}

// FM never sends what the receiving NIC would refuse (any node).
class Fm : public NoRefusalsTest<kNodes> {};

constexpr unsigned kVerify = 1, kHalf = 2;

// ---- gather/scatter: mismatched pieces, sizes 0 .. 1 MiB

// A Long packet's payload with 2 ranks (fm.cpp: P; FM_PACKET_PAYLOAD is the
// most, for a job of one).
constexpr size_t kLongPacket = 64 << 10;
static_assert(kLongPacket <= FM_PACKET_PAYLOAD);

// Around the inline packet (4256 bytes) and the Long packet (kLongPacket, and
// 32 and 128 KiB, its size with more ranks and with one).
const std::vector<size_t> kSizes = {0,     1,     2,     3,     15,    16,     100,    4255,   4256,   4257,
                                    8511,  8512,  8513,  12345, 32767, 32768,  32769,  36992,  65536,  65537,
                                    69792,  100000, 131071, 131072, 131073, 262147, 1 << 20, 5000, 300000};

TEST_F(Fm, GatherScatterAllSizes) {
  auto rc = run_job({0, 1}, [](unsigned rank) {
    FM_register_handler(kVerify, verifying_handler);
    FM_register_handler(kHalf, half_handler);
    g_rx.size_of = [](uint32_t, uint32_t seq) { return kSizes[seq]; };
    if (FM_initialize() != 0) return 2;
    if (rank == 0) {
      const std::vector<size_t> pieces{1, 7, 4096, 3, 333, 9000, 64, 4256, 70000};
      for (uint32_t k = 0; k < kSizes.size(); ++k) {
        // Some bounds larger than the message (FM 2.x: the length is a bound);
        // the last two messages are read only halfway.
        size_t bound = kSizes[k] + (k % 3 == 2 ? 100 : 0);
        send_message(1, k + 2 >= kSizes.size() ? kHalf : kVerify, k, kSizes[k], bound, pieces);
      }
    } else {
      bool all = extract_until([] { return g_rx.messages == kSizes.size(); });
      check(all, "%llu of %zu messages arrived", (unsigned long long)g_rx.messages, kSizes.size());
    }
    return child_exit();
  });
  EXPECT_EQ(rc, (std::vector<int>{0, 0}));
}

// ---- more open streams than Long send buffers
//
// Long packets leave from 2 MiB of send buffers (32 of kLongPacket with 2
// ranks); a main-program stream holds one while it is open. With every one
// held by an open stream and none at the NIC, nothing would free one: the
// next stream takes an inline-sized buffer instead (its packets are inline)
// and every message still arrives whole.

constexpr uint32_t kOpenStreams = 40;
constexpr size_t kOpenSize = 150000;

TEST_F(Fm, MoreOpenStreamsThanLongBuffers) {
  auto rc = run_job({0, 1}, [](unsigned rank) {
    FM_register_handler(kVerify, verifying_handler);
    g_rx.size_of = [](uint32_t, uint32_t) { return kOpenSize; };
    if (FM_initialize() != 0) return 2;
    if (rank == 0) {
      std::vector<std::vector<uint8_t>> data(kOpenStreams, std::vector<uint8_t>(kOpenSize));
      std::vector<FM_stream*> open;
      for (uint32_t k = 0; k < kOpenStreams; ++k) {  // opened in order: message k is the k-th first packet
        fill(data[k], 0, k);
        FM_stream* s = FM_begin_message(1, kOpenSize, kVerify);
        check(s != nullptr, "FM_begin_message %u: errno %d", k, errno);
        if (!s) return child_exit();
        check(FM_send_piece(s, data[k].data(), 1000) == 0, "first piece of %u", k);
        open.push_back(s);
      }
      // No packet left yet (1000 bytes fill none): stream k's first packet
      // leaves now, in order, which numbers the messages as the receiver
      // expects.
      for (uint32_t k = 0; k < kOpenStreams; ++k) {
        check(FM_send_piece(open[k], data[k].data() + 1000, kOpenSize - 1000) == 0, "the rest of %u", k);
        check(FM_end_message(open[k]) == 0, "end %u", k);
      }
    } else {
      bool all = extract_until([] { return g_rx.messages == kOpenStreams; });
      check(all, "%llu of %u messages arrived", (unsigned long long)g_rx.messages, kOpenStreams);
    }
    return child_exit();
  });
  EXPECT_EQ(rc, (std::vector<int>{0, 0}));
}

// ---- three senders (two on the receiver's node) into one receiver at once

size_t multi_size(uint32_t sender, uint32_t seq) {
  static const size_t sizes[] = {1 << 20, 17, 70000, 4256, 0, 200003, 9000, 1, 131072, 4257, 50000, 333};
  return sizes[(seq + sender) % 12];
}
constexpr uint32_t kMultiMessages = 12;

TEST_F(Fm, InterleavedSenders) {
  auto rc = run_job({0, 0, 1, 1}, [](unsigned rank) {
    FM_register_handler(kVerify, verifying_handler);
    g_rx.size_of = multi_size;
    if (FM_initialize() != 0) return 2;
    if (rank == 0) {
      bool all = extract_until([] { return g_rx.messages == 3 * kMultiMessages; });
      check(all, "%llu of %u messages arrived", (unsigned long long)g_rx.messages, 3 * kMultiMessages);
      for (unsigned s = 1; s <= 3; ++s) check(g_rx.next_seq[s] == kMultiMessages, "sender %u: %u messages", s, g_rx.next_seq[s]);
      FM_stats st;
      FM_get_stats(&st);
      std::fprintf(stderr, "[receiver] handlers alive at once: up to %llu; descheduled %llu times\n",
                   st.max_live_handlers, st.handler_yields);
      check(st.bad_packets == 0 && st.send_errors == 0, "bad packets %llu, send errors %llu", st.bad_packets,
            st.send_errors);
    } else {
      const std::vector<size_t> pieces{4096 + rank, 3, 1 << 16, 11 * rank};
      for (uint32_t k = 0; k < kMultiMessages; ++k) send_message(0, kVerify, k, multi_size(rank, k), multi_size(rank, k), pieces);
    }
    return child_exit();
  });
  EXPECT_EQ(rc, (std::vector<int>{0, 0, 0, 0}));
}

// ---- more sends in flight than the NIC has operations
//
// The NIC has 64 operations (kMaxPuts) for all its slots' sends; one stays
// taken until the receiving NIC's verdict comes back. Five senders on node
// 0 each send to their own receiver on nodes 1..5, whose QEMUs are stopped:
// each sender's packets fill the fabric ring to its peer (16) and one more
// waits for room, 5 x 17 = 85 > 64, so the NIC runs out of operations. The
// firmware then holds the next send at the head of its queue (counter
// op_waits) instead of failing it, and every message still arrives, in
// order, byte for byte.

TEST_F(Fm, MoreSendsThanTheNicHasOperationsKeepOrder) {
  constexpr unsigned kPairs = 5;
  constexpr uint32_t kMessages = 20;  // within the credit window (20 for 10 ranks)
  std::vector<pid_t> stopped;
  for (unsigned n = 1; n <= kPairs; ++n) stopped.push_back(pid_t(node_status_number(int(n), "pid")));
  ASSERT_TRUE(std::all_of(stopped.begin(), stopped.end(), [](pid_t p) { return p > 0; })) << "no QEMU pid";
  long waits_before = node_status_number(0, "op_waits");
  ASSERT_GE(waits_before, 0);
  auto size = [](uint32_t sender, uint32_t seq) { return size_t(16 + (sender * 7 + seq * 131) % 900); };
  auto rc = run_job({0, 0, 0, 0, 0, 1, 2, 3, 4, 5}, [&](unsigned rank) {
    FM_register_handler(kVerify, verifying_handler);
    g_rx.size_of = size;
    if (FM_initialize() != 0) return 2;
    std::string marker = std::string(std::getenv("ULNIC_FM_DIR")) + "/stopped";
    if (rank >= kPairs) {  // a receiver: its sender's messages, in order
      unsigned from = rank - kPairs;
      bool all = extract_until([] { return g_rx.messages == kMessages; });
      check(all, "%llu of %u messages", (unsigned long long)g_rx.messages, kMessages);
      check(g_rx.next_seq[from] == kMessages, "from rank %u: %u messages", from, g_rx.next_seq[from]);
      return child_exit();
    }
    std::thread freezer;
    if (rank == 0) {
      for (pid_t p : stopped) ::kill(p, SIGSTOP);
      std::fclose(std::fopen(marker.c_str(), "w"));
      // Until node 0 has made a send wait for an operation (at most 3 s:
      // the link gives a silent peer 5 s).
      freezer = std::thread([&] {
        auto until = Clock::now() + 3s;
        while (node_status_number(0, "op_waits") <= waits_before && Clock::now() < until) std::this_thread::sleep_for(20ms);
        for (pid_t p : stopped) ::kill(p, SIGCONT);
      });
    } else {
      while (::access(marker.c_str(), F_OK) != 0) ::usleep(1000);
    }
    for (uint32_t k = 0; k < kMessages; ++k)
      send_message(rank + kPairs, kVerify, k, size(rank, k), size(rank, k), {7, 100});
    if (freezer.joinable()) freezer.join();
    FM_stats st{};
    FM_get_stats(&st);
    check(st.send_errors == 0 && st.bad_packets == 0, "send errors %llu, bad packets %llu", st.send_errors,
          st.bad_packets);
    return child_exit();
  }, 80s);
  for (pid_t p : stopped) ::kill(p, SIGCONT);  // whatever happened to the job
  EXPECT_EQ(rc, (std::vector<int>(2 * kPairs, 0)));
  long waits = node_status_number(0, "op_waits") - waits_before;
  std::fprintf(stderr, "[node 0] service passes a send waited for a free operation: %ld\n", waits);
  EXPECT_GT(waits, 0) << "the NIC never ran out of operations: the test did not test what it says";
}

// ---- a handler descheduled in FM_receive while the rest is in flight

constexpr size_t kDeschedBytes = 3 * kLongPacket;
std::atomic<uint64_t> g_extract_calls{0};
bool g_started = false, g_finished = false;
uint64_t g_calls_at_start = 0, g_calls_at_end = 0;

int waiting_handler(FM_stream* s, unsigned sender) {
  g_started = true;
  g_calls_at_start = g_extract_calls;
  std::vector<uint8_t> buf(kDeschedBytes);
  check(FM_receive(buf.data(), s, 5000) == 5000, "first 5000");
  check(FM_receive(buf.data() + 5000, s, kDeschedBytes - 5000) == kDeschedBytes - 5000, "the rest");
  check(first_mismatch(buf, buf.size(), sender, 0) == SIZE_MAX, "bytes differ");
  g_calls_at_end = g_extract_calls;
  g_finished = true;
  return FM_CONTINUE;
}

TEST_F(Fm, HandlerDescheduledUntilBytesArrive) {
  auto rc = run_job({0, 0}, [](unsigned rank) {  // both on node 0
    FM_register_handler(kVerify, waiting_handler);
    if (FM_initialize() != 0) return 2;
    if (rank == 0) {
      std::vector<uint8_t> data(kDeschedBytes);
      fill(data, 0, 0);
      FM_stream* s = FM_begin_message(1, data.size(), kVerify);
      check(s != nullptr, "begin");
      const size_t first = 2 * kLongPacket + 1;  // two full packets leave now
      check(FM_send_piece(s, data.data(), first) == 0, "piece 1");
      std::this_thread::sleep_for(400ms);
      check(FM_send_piece(s, data.data() + first, data.size() - first) == 0, "piece 2");
      check(FM_end_message(s) == 0, "end");
    } else {
      bool seen_waiting = false;
      bool ok = extract_until([&] {
        g_extract_calls++;
        if (g_started && !g_finished) seen_waiting = true;
        return g_finished;
      });
      check(ok, "the message never completed");
      check(seen_waiting, "FM_extract never returned while the handler waited");
      check(g_calls_at_end > g_calls_at_start, "the handler was not resumed by a later FM_extract");
      FM_stats st;
      FM_get_stats(&st);
      check(st.handler_yields >= 1, "no yield recorded");
    }
    return child_exit();
  });
  EXPECT_EQ(rc, (std::vector<int>{0, 0}));
}

// ---- two streams of one sender, interleaved: two handlers alive at once

TEST_F(Fm, TwoStreamsOfOneSenderInterleave) {
  auto rc = run_job({0, 1}, [](unsigned rank) {
    FM_register_handler(kVerify, verifying_handler);
    constexpr size_t kA = 3 * kLongPacket + 1000, kAFirst = 2 * kLongPacket + 1;
    g_rx.size_of = [](uint32_t, uint32_t seq) { return seq == 0 ? kA : size_t(9000); };
    if (FM_initialize() != 0) return 2;
    if (rank == 0) {
      std::vector<uint8_t> a(kA), b(9000);
      fill(a, 0, 0);
      fill(b, 0, 1);
      FM_stream* sa = FM_begin_message(1, a.size(), kVerify);
      check(sa && FM_send_piece(sa, a.data(), kAFirst) == 0, "A: first part");  // two packets of A leave
      FM_stream* sb = FM_begin_message(1, b.size(), kVerify);                  // B starts after A did
      check(sb && FM_send_piece(sb, b.data(), b.size()) == 0 && FM_end_message(sb) == 0, "B whole");
      check(sa && FM_send_piece(sa, a.data() + kAFirst, kA - kAFirst) == 0 && FM_end_message(sa) == 0,
            "A: the rest");
    } else {
      check(extract_until([] { return g_rx.messages == 2; }), "%llu of 2 messages", (unsigned long long)g_rx.messages);
      FM_stats st{};
      FM_get_stats(&st);
      // A's handler started at its first packet and waited in FM_receive
      // while B's ran: both alive at once.
      check(st.max_live_handlers >= 2, "handlers alive at once: %llu", st.max_live_handlers);
      check(st.handler_yields >= 1, "no handler waited");
    }
    return child_exit();
  });
  EXPECT_EQ(rc, (std::vector<int>{0, 0}));
}

// ---- receiver flow control: a 64-byte budget, senders blocked, nothing lost

constexpr uint32_t kFlowMessages = 40;
// One Long packet each: 40 per sender, > the 32 Long packets a sender may have
// unreported with 4 ranks (fm.cpp: L).
constexpr size_t kFlowSize = 20000;

TEST_F(Fm, ReceiverFlowControlBlocksSenders) {
  auto rc = run_job({1, 0, 0, 1}, [](unsigned rank) {
    FM_register_handler(kVerify, verifying_handler);
    g_rx.size_of = [](uint32_t, uint32_t) { return kFlowSize; };
    if (FM_initialize() != 0) return 2;
    if (rank == 0) {
      std::this_thread::sleep_for(1500ms);  // not extracting: the senders must stop
      bool all = extract_until([&] { return g_rx.messages == 3 * kFlowMessages; }, 64);
      check(all, "%llu of %u messages arrived", (unsigned long long)g_rx.messages, 3 * kFlowMessages);
      for (unsigned s = 1; s <= 3; ++s) check(g_rx.next_seq[s] == kFlowMessages, "sender %u: %u messages", s, g_rx.next_seq[s]);
    } else {
      auto t0 = Clock::now();
      for (uint32_t k = 0; k < kFlowMessages; ++k) send_message(0, kVerify, k, kFlowSize, kFlowSize, {kFlowSize});
      auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0).count();
      FM_stats st;
      FM_get_stats(&st);
      check(st.credit_waits > 0, "the sender never waited for credits");
      check(ms >= 1000, "sending took %lld ms: the receiver's 1.5 s pause did not hold it back", (long long)ms);
      check(st.send_errors == 0, "%llu send errors", st.send_errors);
    }
    return child_exit();
  });
  EXPECT_EQ(rc, (std::vector<int>{0, 0, 0, 0}));
}

// The bytes per FM_extract(64) call, checked in the receiver itself.
TEST_F(Fm, ExtractBudgetIsSoftBound) {
  auto rc = run_job({0, 1}, [](unsigned rank) {
    FM_register_handler(kVerify, verifying_handler);
    g_rx.size_of = [](uint32_t, uint32_t) { return size_t(100000); };
    if (FM_initialize() != 0) return 2;
    if (rank == 1) {
      for (uint32_t k = 0; k < 4; ++k) send_message(0, kVerify, k, 100000, 100000, {100000});
    } else {
      auto until = Clock::now() + 40s;
      while (g_rx.messages < 4 && Clock::now() < until) {
        FM_ULONG n = FM_extract(64);
        check(n <= 64 + FM_PACKET_PAYLOAD, "FM_extract(64) took %lu bytes", n);
        if (!n) ::usleep(100);
      }
      check(g_rx.messages == 4, "%llu of 4 messages", (unsigned long long)g_rx.messages);
    }
    return child_exit();
  });
  EXPECT_EQ(rc, (std::vector<int>{0, 0}));
}

// ---- all to all, replies sent from inside handlers, everyone blocking

constexpr unsigned kPing = 3, kPong = 4;
constexpr uint32_t kPings = 40;
constexpr size_t kPingSize = 100000;  // 4 packets (3 Long): 40 x 2 destinations > the 80-packet window
std::vector<std::pair<unsigned, uint64_t>> g_deferred;  // replies a handler could not send
uint64_t g_replied_in_handler = 0, g_pongs = 0;
std::map<unsigned, std::vector<bool>> g_pong_seen;

void send_pong(unsigned dest, uint64_t seq, FM_stream* s) {
  check(FM_send_piece(s, &seq, sizeof seq) == 0 && FM_end_message(s) == 0, "pong to %u", dest);
}

int ping_handler(FM_stream* s, unsigned sender) {
  uint64_t seq = g_rx.next_seq[sender];
  int r = verifying_handler(s, sender);
  // FM 2.x: a handler may send, but gets NULL rather than wait for credits.
  if (FM_stream* o = FM_begin_message(sender, sizeof seq, kPong)) {
    send_pong(sender, seq, o);
    g_replied_in_handler++;
  } else {
    g_deferred.push_back({sender, seq});
  }
  return r;
}

int pong_handler(FM_stream* s, unsigned sender) {
  uint64_t seq = ~0ull;
  check(FM_receive(&seq, s, sizeof seq) == sizeof seq, "pong size");
  auto& seen = g_pong_seen[sender];
  seen.resize(kPings);
  check(seq < kPings && !seen[seq], "pong %llu from %u: unexpected", (unsigned long long)seq, sender);
  if (seq < kPings) seen[seq] = true;
  g_pongs++;
  return FM_CONTINUE;
}

void send_deferred() {
  for (size_t i = 0; i < g_deferred.size(); ++i) {  // sending may run handlers that add more
    auto [dest, seq] = g_deferred[i];
    FM_stream* o = FM_begin_message(dest, sizeof seq, kPong);
    check(o != nullptr, "a deferred pong could not begin");
    if (o) send_pong(dest, seq, o);
  }
  g_deferred.clear();
}

TEST_F(Fm, AllToAllWithRepliesFromHandlers) {
  auto rc = run_job({0, 1, 0}, [](unsigned rank) {
    FM_register_handler(kPing, ping_handler);
    FM_register_handler(kPong, pong_handler);
    g_rx.size_of = [](uint32_t, uint32_t) { return kPingSize; };
    if (FM_initialize() != 0) return 2;
    const uint32_t n = uint32_t(FM_numnodes);
    for (uint32_t k = 0; k < kPings; ++k) {
      for (unsigned d = 0; d < n; ++d)
        if (d != rank) send_message(d, kPing, k, kPingSize, kPingSize, {1500, 7, 20000});
      send_deferred();
    }
    bool all = extract_until([&] {
      send_deferred();
      return g_rx.messages == kPings * (n - 1) && g_pongs == kPings * (n - 1);
    });
    check(all, "pings %llu, pongs %llu of %u each", (unsigned long long)g_rx.messages,
          (unsigned long long)g_pongs, kPings * (n - 1));
    FM_stats st;
    FM_get_stats(&st);
    std::fprintf(stderr, "[rank %u] replies from handlers %llu of %u; credit waits %llu\n", rank,
                 (unsigned long long)g_replied_in_handler, kPings * (n - 1), st.credit_waits);
    check(st.bad_packets == 0 && st.send_errors == 0, "bad packets %llu, send errors %llu", st.bad_packets,
          st.send_errors);
    return child_exit();
  });
  EXPECT_EQ(rc, (std::vector<int>{0, 0, 0}));
}

// ---- a handler's long replies: Long packets, or inline ones when it cannot wait

constexpr unsigned kAsk = 5;
// Rank 0 first sends rank 1 kBigs one-Long-packet messages and then small
// ones, kSmalls in all: L - 1 (31) Long packets unreported, their chunks
// still unread, and 9 inline ones (which take no chunk), until rank 1 takes
// them.
constexpr uint32_t kBigs = 31, kSmalls = 40;
constexpr size_t kReplySize = 100000;   // a Long packet of 64 KiB and one of 34464 bytes
int g_ask_pipe[2] = {-1, -1};           // rank 0 -> rank 1: the first reply has left
uint32_t g_asks = 0;

int ask_handler(FM_stream* s, unsigned sender) {
  uint32_t n = ~0u;
  check(FM_receive(&n, s, sizeof n) == sizeof n, "ask size");
  std::vector<uint8_t> data(kReplySize);
  fill(data, uint32_t(FM_nodeid), kSmalls + n);  // the receiver's message kSmalls + n
  FM_stream* o = FM_begin_message(sender, kReplySize, kVerify);
  check(o != nullptr, "ask %u: FM_begin_message in the handler: errno %d", n, errno);
  if (!o) return FM_CONTINUE;
  const size_t pieces[] = {1500, 7, 20000};
  for (size_t off = 0, k = 0; off < kReplySize; ++k) {
    size_t len = std::min(pieces[k % 3], kReplySize - off);
    check(FM_send_piece(o, data.data() + off, len) == 0, "ask %u: piece at %zu", n, off);
    off += len;
  }
  check(FM_end_message(o) == 0, "ask %u: FM_end_message", n);
  g_asks++;
  return FM_CONTINUE;
}

TEST_F(Fm, HandlersRepliesGoAsLongPacketsOrInlineWhenTheWindowIsFull) {
  ASSERT_EQ(::pipe(g_ask_pipe), 0);
  auto rc = run_job({0, 1}, [](unsigned rank) {
    FM_register_handler(kVerify, verifying_handler);
    FM_register_handler(kAsk, ask_handler);
    g_rx.size_of = [](uint32_t, uint32_t seq) {
      return seq < kBigs ? kLongPacket : seq < kSmalls ? size_t(10) : kReplySize;
    };
    if (FM_initialize() != 0) return 2;
    if (rank == 0) {
      ::close(g_ask_pipe[0]);
      // kSmalls data packets rank 1 does not take yet: none is reported.
      for (uint32_t k = 0; k < kSmalls; ++k) {
        const size_t n = g_rx.size_of(0, k);
        send_message(1, kVerify, k, n, n, {n});
      }
      check(extract_until([] { return g_asks == 1; }), "the first ask");
      FM_stats st;
      FM_get_stats(&st);
      // Its reply's first Long buffer went as the L-th Long packet (chunk 31,
      // free); the second found L unreported and went as inline packets (as
      // a Long packet it would have gone into the chunk of message 0, which
      // rank 1 has not read yet).
      check(st.long_splits == 1 && st.long_packets_sent == kBigs + 1, "first reply: %llu splits, %llu Long packets",
            st.long_splits, st.long_packets_sent);
      // Rank 1 reads only once the reply is in its ring (and a Long packet
      // of it would be in a chunk).
      check(extract_until([] {
              FM_stats now;
              FM_get_stats(&now);
              return now.in_flight == 0;
            }),
            "the first reply's packets completed");
      check(::write(g_ask_pipe[1], "x", 1) == 1, "pipe");
      // The second ask comes after rank 1 took everything (its report rides on the ask).
      check(extract_until([] { return g_asks == 2; }), "the second ask");
      FM_get_stats(&st);
      check(st.long_splits == 1 && st.long_packets_sent == kBigs + 3, "second reply: %llu splits, %llu Long packets",
            st.long_splits, st.long_packets_sent);
      ::close(g_ask_pipe[1]);
    } else {
      ::close(g_ask_pipe[1]);
      uint32_t n = 0;
      FM_stream* a = FM_begin_message(0, sizeof n, kAsk);
      check(a && FM_send_piece(a, &n, sizeof n) == 0 && FM_end_message(a) == 0, "ask 0");
      char c;
      check(::read(g_ask_pipe[0], &c, 1) == 1, "pipe");  // no extracting until the reply left
      check(extract_until([] { return g_rx.messages == kSmalls + 1; }), "%llu of %u messages",
            (unsigned long long)g_rx.messages, kSmalls + 1);
      n = 1;
      a = FM_begin_message(0, sizeof n, kAsk);
      check(a && FM_send_piece(a, &n, sizeof n) == 0 && FM_end_message(a) == 0, "ask 1");
      check(extract_until([] { return g_rx.messages == kSmalls + 2; }), "%llu of %u messages",
            (unsigned long long)g_rx.messages, kSmalls + 2);
      ::close(g_ask_pipe[0]);
    }
    return child_exit();
  });
  ::close(g_ask_pipe[0]);
  ::close(g_ask_pipe[1]);
  EXPECT_EQ(rc, (std::vector<int>{0, 0}));
}

// ---- argument errors (a one-rank job; the rank sends to itself)

int g_self_runs = 0;
int self_handler(FM_stream* s, unsigned sender) {
  char c[16];
  check(FM_receive(c, nullptr, 4) == 0, "FM_receive on no stream");
  check(FM_receive(nullptr, s, 4) == 0, "FM_receive into NULL");
  check(FM_receive(c, s, sizeof c) == 10, "self message: 10 bytes");
  check(std::memcmp(c, "0123456789", 10) == 0 && sender == 0, "self message bytes");
  check(FM_extract(100) == 0, "FM_extract inside a handler");
  g_self_runs++;
  return FM_CONTINUE;
}

TEST_F(Fm, ArgumentErrors) {
  auto rc = run_job({0}, [](unsigned) {
    char buf[64] = "0123456789";
    // Before FM_initialize.
    check(FM_begin_message(0, 1, 1) == nullptr, "begin before init");
    check(FM_extract(100) == 0, "extract before init");
    check(FM_receive(buf, nullptr, 1) == 0, "receive before init");
    check(FM_finalize() == -1, "finalize before init");
    // Bad job descriptions.
    std::string rank = std::getenv("ULNIC_FM_RANK"), dir = std::getenv("ULNIC_FM_DIR");
    ::setenv("ULNIC_FM_RANK", "1", 1);
    check(FM_initialize() == -1, "rank == nprocs accepted");
    ::setenv("ULNIC_FM_RANK", "x", 1);
    check(FM_initialize() == -1, "rank 'x' accepted");
    ::setenv("ULNIC_FM_RANK", rank.c_str(), 1);
    ::setenv("ULNIC_FM_DIR", "/nonexistent/fm", 1);
    check(FM_initialize() == -1, "a missing directory accepted");
    ::setenv("ULNIC_FM_DIR", dir.c_str(), 1);
    // Handler registration.
    check(FM_register_handler(FM_MAX_HANDLERS, self_handler) == FM_ANY_ID, "id out of range");
    check(FM_register_handler(3, nullptr) == FM_ANY_ID, "NULL handler");
    check(FM_register_handler(5, self_handler) == 5, "id 5");
    FM_ULONG any = FM_register_handler(FM_ANY_ID, self_handler);
    check(any == 0, "FM_ANY_ID gave %lu", any);
    if (FM_initialize() != 0) return 2;
    check(FM_initialize() == -1, "a second FM_initialize");
    check(FM_nodeid == 0 && FM_numnodes == 1, "node id / count");
    // Begin / send / end.
    check(FM_begin_message(1, 10, 5) == nullptr, "dest out of range");
    check(FM_begin_message(0, 10, FM_MAX_HANDLERS) == nullptr, "handler out of range");
    check(FM_send_piece(nullptr, buf, 1) == -1, "send_piece on NULL");
    check(FM_end_message(nullptr) == -1, "end on NULL");
    FM_stream* s = FM_begin_message(0, 10, 5);
    check(s != nullptr, "begin to self");
    if (s) {
      check(FM_send_piece(s, nullptr, 5) == -1, "NULL buffer with bytes");
      check(FM_send_piece(s, buf, 11) == -1, "more than the bound");
      check(FM_send_piece(s, buf, 0) == 0, "an empty piece");
      check(FM_send_piece(s, buf, 4) == 0 && FM_send_piece(s, buf + 4, 6) == 0, "10 bytes");
      check(FM_send_piece(s, buf, 1) == -1, "a byte past the bound");
      check(FM_receive(buf, s, 1) == 0, "FM_receive on an outbound stream");
      check(FM_end_message(s) == 0, "end");
    }
    check(FM_receive(buf, s, 1) == 0, "FM_receive outside a handler");
    check(extract_until([] { return g_self_runs == 1; }, 1 << 20, 10s), "the message to itself never ran");
    check(FM_finalize() == 0, "finalize");
    check(FM_begin_message(0, 1, 5) == nullptr, "begin after finalize");
    return g_failures ? 1 : 0;
  });
  EXPECT_EQ(rc, (std::vector<int>{0}));
}

constexpr uint8_t kWireVersion = 3;

// A rank's published name: "ulnic-fm <version> <node> <slot> <ep> <tag hex>".
struct RankName {
  unsigned v = 0, node = 0, slot = 0, ep = 0;
  unsigned long long tag = 0;
};
bool read_rank(const std::string& dir, unsigned rank, RankName& n) {
  FILE* f = nullptr;
  std::string path = dir + "/rank." + std::to_string(rank);
  for (int i = 0; i < 5000 && !(f = std::fopen(path.c_str(), "r")); ++i) ::usleep(2000);
  if (!f) return false;
  bool ok = std::fscanf(f, "ulnic-fm %u %u %u %u %llx", &n.v, &n.node, &n.slot, &n.ep, &n.tag) == 5;
  std::fclose(f);
  return ok;
}

// ---- stream limits, and FM_finalize with a stream still open

int g_small_runs = 0;
int small_handler(FM_stream* s, unsigned sender) {
  uint32_t seq = 0;
  check(FM_receive(&seq, s, sizeof seq) == sizeof seq, "stream %d: 4 bytes", g_small_runs);
  check(seq == uint32_t(g_small_runs) && sender == 0, "stream %u ran as message %d", seq, g_small_runs);
  g_small_runs++;
  return FM_CONTINUE;
}

TEST_F(Fm, StreamLimitAndFinalizeWithAStreamOpen) {
  auto rc = run_job({0}, [](unsigned) {
    FM_register_handler(kVerify, small_handler);
    if (FM_initialize() != 0) return 2;
    // Each open stream holds a send buffer; FM keeps some for its reports.
    std::vector<FM_stream*> open;
    for (int k = 0; k < FM_MAX_STREAMS; ++k) open.push_back(FM_begin_message(0, 4, kVerify));
    check(std::count(open.begin(), open.end(), nullptr) == 0, "%d streams could not open", int(std::count(open.begin(), open.end(), nullptr)));
    errno = 0;
    check(FM_begin_message(0, 4, kVerify) == nullptr && errno == EAGAIN, "stream %d: errno %d", FM_MAX_STREAMS, errno);
    errno = 0;
    check(FM_finalize() == -1 && errno == EBUSY, "FM_finalize with streams open: errno %d", errno);
    for (uint32_t k = 0; k < open.size(); ++k) {
      if (!open[k]) continue;
      check(FM_send_piece(open[k], &k, sizeof k) == 0, "piece %u", k);
      check(FM_end_message(open[k]) == 0, "end %u", k);
    }
    // Messages are numbered when their first packet leaves: in end order here.
    check(extract_until([] { return g_small_runs == FM_MAX_STREAMS; }, 1 << 20, 20s), "%d of %d messages",
          g_small_runs, FM_MAX_STREAMS);
    check(FM_finalize() == 0, "finalize");
    FM_stats st{};
    FM_get_stats(&st);  // the finished job's
    check(st.packets_sent >= FM_MAX_STREAMS && st.packets_received >= FM_MAX_STREAMS,
          "stats after FM_finalize: sent %llu, received %llu", st.packets_sent, st.packets_received);
    return g_failures ? 1 : 0;
  });
  EXPECT_EQ(rc, (std::vector<int>{0}));
}

// ---- a handler that returns with the stream it opened still open

constexpr unsigned kLeaky = 6;
constexpr size_t kLeakyBytes = 20000;

int leaky_handler(FM_stream* s, unsigned sender) {
  char c[8];
  check(FM_receive(c, s, sizeof c) == 8, "8 bytes");
  FM_stream* out = FM_begin_message(sender, kLeakyBytes, kVerify);
  check(out != nullptr, "begin from the handler");
  if (!out) return FM_CONTINUE;
  std::vector<uint8_t> data(kLeakyBytes);
  fill(data, uint32_t(FM_nodeid), 0);
  for (size_t off = 0; off < data.size(); off += 3000)
    check(FM_send_piece(out, data.data() + off, std::min<size_t>(3000, data.size() - off)) == 0, "piece at %zu", off);
  g_rx.messages++;
  return FM_CONTINUE;  // without FM_end_message
}

TEST_F(Fm, AStreamAHandlerLeftOpenIsEnded) {
  auto rc = run_job({0, 1}, [](unsigned rank) {
    FM_register_handler(kVerify, verifying_handler);
    FM_register_handler(kLeaky, leaky_handler);
    g_rx.size_of = [](uint32_t, uint32_t) { return kLeakyBytes; };
    if (FM_initialize() != 0) return 2;
    if (rank == 1) {
      FM_stream* s = FM_begin_message(0, 8, kLeaky);
      check(s && FM_send_piece(s, "request!", 8) == 0 && FM_end_message(s) == 0, "request");
      check(extract_until([] { return g_rx.messages == 1; }), "the reply never came whole");
    } else {
      check(extract_until([] { return g_rx.messages == 1; }), "the request never came");
    }
    check(FM_finalize() == 0, "finalize");
    FM_stats st{};
    FM_get_stats(&st);
    unsigned long long want = rank == 0 ? 1 : 0;
    check(st.streams_ended_for_handlers == want, "streams ended for handlers: %llu", st.streams_ended_for_handlers);
    return g_failures ? 1 : 0;
  });
  EXPECT_EQ(rc, (std::vector<int>{0, 0}));
}

// ---- a rank that dies: sends to it fail, FM_finalize does not wait for it

TEST_F(Fm, ADeadRankFailsSendsAndFinalizeEnds) {
  allow_refusals(1);  // rank 1's NIC refuses what still comes for its gone slot
  auto rc = run_job({0, 1, 0}, [](unsigned rank) {
    FM_register_handler(kVerify, verifying_handler);
    if (FM_initialize() != 0) return 2;
    if (rank == 1) return 0;  // dies without FM_finalize
    if (rank == 2) {          // a bystander that never sends to it
      errno = 0;
      check(FM_finalize() == -1 && errno == EIO, "FM_finalize with a dead rank: errno %d", errno);
      return g_failures ? 1 : 0;
    }
    // Sends until FM says rank 1 is gone: a packet to it fails, or a wait
    // for its credits finds its process gone.
    std::vector<uint8_t> data(9000);
    int err = 0;
    for (uint32_t k = 0; !err && k < 100000; ++k) {
      fill(data, 0, k);
      errno = 0;
      FM_stream* s = FM_begin_message(1, data.size(), kVerify);
      if (!s) {
        err = errno;
        break;
      }
      int a = FM_send_piece(s, data.data(), data.size());
      int ea = errno;
      int b = FM_end_message(s);
      if (a || b) err = a ? ea : errno;
    }
    check(err == EIO, "sends to the dead rank: errno %d", err);
    errno = 0;
    check(FM_begin_message(1, 10, kVerify) == nullptr && errno == EIO, "a begin after the failure: errno %d", errno);
    errno = 0;
    check(FM_finalize() == -1 && errno == EIO, "FM_finalize with a dead rank: errno %d", errno);
    return g_failures ? 1 : 0;
  });
  EXPECT_EQ(rc, (std::vector<int>{0, 0, 0}));
}

// ---- a sender that dies between two packets of a message, while the
// receiving handler waits in FM_receive with a stream of its own open

constexpr unsigned kPark = 7, kAck = 8;
constexpr size_t kParkSent = 2 * FM_PACKET_PAYLOAD, kParkBytes = kParkSent + 5000;
FM_ULONG g_park_got = 0;
bool g_park_returned = false, g_acked = false;

int park_handler(FM_stream* s, unsigned sender) {
  std::vector<uint8_t> buf(kParkBytes);
  g_park_got = FM_receive(buf.data(), s, kParkSent);
  FM_stream* ack = FM_begin_message(sender, 0, kAck);  // "both packets are here": the sender may die
  check(ack && FM_end_message(ack) == 0, "ack");
  FM_stream* held = FM_begin_message(sender, 100, kAck);  // open while we wait
  check(held != nullptr, "a stream to hold open");
  g_park_got += FM_receive(buf.data() + g_park_got, s, kParkBytes - g_park_got);  // the sender dies meanwhile
  check(first_mismatch(buf, g_park_got, sender, 0) == SIZE_MAX, "bytes before the cut");
  g_park_returned = true;
  return FM_CONTINUE;  // `held` is ended for us (and fails: its peer is gone)
}
int ack_handler(FM_stream*, unsigned) {
  g_acked = true;
  return FM_CONTINUE;
}

TEST_F(Fm, ASenderDyingMidMessageCutsItAtTheReceiver) {
  allow_refusals(1);
  auto rc = run_job({0, 1}, [](unsigned rank) {
    FM_register_handler(kPark, park_handler);
    FM_register_handler(kAck, ack_handler);
    if (FM_initialize() != 0) return 2;
    if (rank == 1) {
      std::vector<uint8_t> data(kParkSent + 1);
      fill(data, 1, 0);
      FM_stream* s = FM_begin_message(0, kParkBytes, kPark);
      check(s && FM_send_piece(s, data.data(), data.size()) == 0, "two packets");  // both leave: more follows
      check(extract_until([] { return g_acked; }), "no ack");
      return g_failures ? 1 : 0;  // dies mid-message
    }
    check(extract_until([] { return g_park_got >= kParkSent; }), "the first two packets never came");
    errno = 0;
    check(FM_finalize() == -1 && errno == EIO, "FM_finalize with a dead sender: errno %d", errno);
    check(g_park_returned, "the handler was never resumed");
    check(g_park_got == kParkSent, "the handler got %lu bytes, not %zu", g_park_got, kParkSent);
    FM_stats st{};
    FM_get_stats(&st);
    check(st.streams_ended_for_handlers == 1, "streams ended for the handler: %llu", st.streams_ended_for_handlers);
    return g_failures ? 1 : 0;
  });
  EXPECT_EQ(rc, (std::vector<int>{0, 0}));
}

// ---- the rank files: two ranks naming one endpoint, a rank's own file replaced

// As rank 1 of 2: once our rank.1 is published, `forge` writes the files.
void with_forged_files(const std::function<void(const std::string&, const RankName&)>& forge_files,
                       const char* what) {
  std::string dir = std::getenv("ULNIC_FM_DIR");
  ::setenv("ULNIC_FM_RANK", "1", 1);
  ::setenv("ULNIC_FM_NPROCS", "2", 1);
  std::thread t([&] {
    RankName mine;
    if (read_rank(dir, 1, mine)) forge_files(dir, mine);
  });
  check(FM_initialize() == -1, "FM_initialize accepted %s", what);
  t.join();
  std::filesystem::remove(dir + "/rank.0");
  std::filesystem::remove(dir + "/rank.1");
}

void write_rank(const std::string& dir, unsigned rank, const RankName& n) {
  std::string path = dir + "/rank." + std::to_string(rank), tmp = path + ".forged";
  FILE* f = std::fopen(tmp.c_str(), "w");
  if (!f) return;
  std::fprintf(f, "ulnic-fm %u %u %u %u %llx\n", n.v, n.node, n.slot, n.ep, n.tag);
  std::fclose(f);
  std::rename(tmp.c_str(), path.c_str());
}

TEST_F(Fm, RankFilesAreChecked) {
  auto rc = run_job({0}, [](unsigned) {
    with_forged_files([](const std::string& dir, const RankName& mine) { write_rank(dir, 0, mine); },
                      "two ranks naming one endpoint");
    with_forged_files(
        [](const std::string& dir, RankName mine) {
          mine.tag ^= 0x10;  // someone else's run took our file
          write_rank(dir, 1, mine);
          mine.slot = (mine.slot + 1) % ulnic::abi::kMaxSlots;
          write_rank(dir, 0, mine);
        },
        "a rank file that is not its own");
    with_forged_files(
        [](const std::string& dir, RankName mine) {
          mine.slot = (mine.slot + 1) % ulnic::abi::kMaxSlots;
          mine.tag = 1;  // AM_ALL: no tag at all
          write_rank(dir, 0, mine);
        },
        "a rank without a tag");
    return g_failures ? 1 : 0;
  });
  EXPECT_EQ(rc, (std::vector<int>{0}));
}

// ---- untrusted input: forged and malformed packets, unregistered handlers

// The FM wire header (host/fm/fm_internal.h), written by hand as a forger would.
struct ForgedHeader {
  uint16_t magic;
  uint8_t version, kind;
  uint16_t sender, handler;
  uint32_t msg_id, flags, offset, length, payload, credit;
};
static_assert(sizeof(ForgedHeader) == 32);

// Sends raw AM messages to rank 0's endpoint from a process outside the job
// that learned rank 0's name and tag (a leaked job directory): requests the
// FM header gives away, a reply (no tag needed), and a request with a wrong
// tag, which rank 0's NIC refuses (the only refusal of the test).
int forge(const std::string& dir) {
  namespace abi = ulnic::abi;
  RankName to;
  if (!read_rank(dir, 0, to)) return 3;
  unsigned node = to.node, slot = to.slot, ep = to.ep;
  auto nic = ulnic::Nic::open();
  for (int i = 0; i < 50 && !nic; ++i) ::usleep(100000), nic = ulnic::Nic::open();
  if (!nic) return 4;
  auto* mem = static_cast<uint8_t*>((*nic)->alloc(8192, 4096));
  auto mr = (*nic)->register_memory(mem, 8192, abi::kAccessLocal);
  if (!mr) return 5;
  auto send = [&](const void* msg, uint32_t len, uint64_t tag = 0, uint8_t flags = abi::kAmRequest) {
    abi::AmPrefix pre{};
    pre.tag = tag ? tag : to.tag;
    pre.msg_len = len;
    pre.dst_ep = uint8_t(ep);
    pre.flags = flags;
    std::memcpy(mem, &pre, sizeof pre);
    std::memcpy(mem + sizeof pre, msg, len);
    abi::SqEntry e{};
    e.opcode = abi::kOpAmSend;
    e.length = uint32_t(sizeof pre) + len;
    e.src_addr = reinterpret_cast<uint64_t>(mem);
    e.src_key = mr->key;
    e.dst_node = uint16_t(node);
    e.dst_slot = uint16_t(slot);
    auto r = (*nic)->run(e, 10s);
    return r && r->status == abi::kCqOk;
  };
  uint8_t pkt[64] = {};
  // Claims to be rank 0's first message to itself (which rank 0 never
  // sends, so only the NIC address can give it away), 10 bytes.
  ForgedHeader h{0x4d46, kWireVersion, 1, 0, kVerify, 0, 3, 0, 10, 10, 0};
  std::memcpy(pkt, &h, sizeof h);
  bool ok = send(pkt, 42);                 // right header, wrong NIC address
  ok = !send(pkt, 42, 0, 0) && ok;         // a reply rank 0 never asked for: its NIC refuses it
  ok = send("garbage", 7) && ok;           // shorter than a header
  h.magic = 0x1234;
  std::memcpy(pkt, &h, sizeof h);
  ok = send(pkt, 42) && ok;                // bad magic
  ok = !send(pkt, 42, to.tag ^ 0x5a5a) && ok;  // a wrong tag: rank 0's NIC refuses it
  (void)(*nic)->deregister(*mr);
  return ok ? 0 : 6;
}

TEST_F(Fm, UntrustedPacketsAreDropped) {
  std::string fmdir;
  auto rc = run_job({0, 1, 1}, [&](unsigned rank) {
    if (rank == 2) return forge(std::getenv("ULNIC_FM_DIR"));  // not an FM rank
    ::setenv("ULNIC_FM_NPROCS", "2", 1);
    FM_register_handler(kVerify, verifying_handler);
    g_rx.size_of = [](uint32_t, uint32_t) { return size_t(6000); };
    if (FM_initialize() != 0) return 2;
    if (rank == 1) {
      send_message(0, 77, 99, 6000, 6000, {1000});   // handler 77: not registered there
      send_message(0, kVerify, 0, 6000, 6000, {1000});
    } else {
      FM_stats st{};
      bool ok = extract_until([&] {
        FM_get_stats(&st);
        return g_rx.messages == 1 && st.bad_packets >= 4;
      });
      check(ok, "messages %llu, bad packets %llu", (unsigned long long)g_rx.messages, st.bad_packets);
      check(g_rx.next_seq[1] == 1 && g_rx.next_seq[0] == 0, "the forged message ran a handler");
    }
    return child_exit();
  });
  EXPECT_EQ(rc, (std::vector<int>{0, 0, 0}));
  expect_refusals(0, 2);  // the wrong tag, the unsolicited reply
}

// ---- malformed packets from a job member's own address

// Rank 1 of this job is not FM: a raw AM endpoint that publishes its name
// like FM, sends hand-made packets to rank 0 and absorbs what rank 0 sends
// back until rank 0's FIN2 (so nothing is ever refused).
constexpr unsigned kTrunc = 5;
size_t g_trunc_got = SIZE_MAX;

int trunc_handler(FM_stream* s, unsigned sender) {
  std::vector<uint8_t> buf(10000);
  g_trunc_got = FM_receive(buf.data(), s, buf.size());  // the message is cut after 100 bytes
  check(first_mismatch(buf, g_trunc_got, sender, 0) == SIZE_MAX, "truncated message bytes");
  return FM_CONTINUE;
}

int fake_rank(const std::string& dir) {
  namespace abi = ulnic::abi;
  constexpr uint32_t kEntries = 256;
  auto nic = ulnic::Nic::open();
  for (int i = 0; i < 50 && !nic; ++i) ::usleep(100000), nic = ulnic::Nic::open();
  if (!nic) return 4;
  ulnic::Nic& n = **nic;
  size_t ring_bytes = sizeof(abi::AmRingControl) + size_t(kEntries) * abi::kAmEntryBytes;
  auto* ring = static_cast<uint8_t*>(n.alloc(ring_bytes, 4096));
  auto* mem = static_cast<uint8_t*>(n.alloc(8192, 4096));
  std::memset(ring, 0, ring_bytes);
  auto rr = n.register_memory(ring, ring_bytes, abi::kAccessLocal);
  auto mr = n.register_memory(mem, 8192, abi::kAccessLocal);
  if (!rr || !mr) return 5;
  abi::SqEntry cfg{};
  cfg.opcode = abi::kOpAmEndpoint;
  cfg.length = kEntries;
  cfg.src_addr = reinterpret_cast<uint64_t>(ring);
  cfg.src_key = rr->key;
  constexpr uint64_t kMyTag = 0x7a6b5c4d3e2f1a0bull;
  cfg.access = uint32_t(kMyTag);
  cfg.src_slot = uint32_t(kMyTag >> 32);
  auto c = n.run(cfg, 10s);
  if (!c || c->status != abi::kCqOk) return 6;
  FILE* f = std::fopen((dir + "/rank.1.tmp").c_str(), "w+");  // published whole and locked, as FM does
  struct flock lk{};
  lk.l_type = F_RDLCK;
  lk.l_whence = SEEK_SET;
  if (!f || ::fcntl(fileno(f), F_OFD_SETLK, &lk) != 0) return 9;
  std::fprintf(f, "ulnic-fm %u %u %u 0 %llx\n", unsigned(kWireVersion), n.node(), n.slot(),
               static_cast<unsigned long long>(kMyTag));
  std::fflush(f);  // kept open (and locked) while this process lives
  std::rename((dir + "/rank.1.tmp").c_str(), (dir + "/rank.1").c_str());
  RankName to;
  if (!read_rank(dir, 0, to)) return 7;
  unsigned node = to.node, slot = to.slot, ep = to.ep;
  bool ok = true;
  // Sends a header (with `bytes` message bytes of pattern(1, seq) from `from`;
  // with `chunk` >= 0 as a Long packet into that chunk of rank 0's segment).
  auto send = [&](ForgedHeader h, uint32_t bytes, uint32_t seq, uint32_t from, int chunk = -1) {
    abi::AmPrefix pre{};
    pre.tag = to.tag;
    pre.msg_len = uint32_t(sizeof h) + (chunk < 0 ? bytes : 0);
    if (chunk >= 0) {
      pre.long_len = bytes;
      pre.long_offset = uint32_t(chunk * kLongPacket);
    }
    pre.dst_ep = uint8_t(ep);
    pre.flags = abi::kAmRequest;
    std::memcpy(mem, &pre, sizeof pre);
    std::memcpy(mem + sizeof pre, &h, sizeof h);
    for (uint32_t i = 0; i < bytes; ++i) mem[sizeof pre + sizeof h + i] = pattern(1, seq, from + i);
    abi::SqEntry e{};
    e.opcode = abi::kOpAmSend;
    e.length = uint32_t(abi::am_send_bytes(pre.msg_len, pre.long_len));
    e.src_addr = reinterpret_cast<uint64_t>(mem);
    e.src_key = mr->key;
    e.dst_node = uint16_t(node);
    e.dst_slot = uint16_t(slot);
    auto r = n.run(e, 10s);
    ok = ok && r && r->status == abi::kCqOk;
  };
  //        magic  ver kind snd handler msg flags off len   payload credit
  send({0x4d46, kWireVersion, 1, 1, kTrunc, 0, 1, 0, 10000, 100, 0}, 100, 0, 0);     // first 100 bytes of 10000
  send({0x4d46, kWireVersion, 1, 1, kTrunc, 0, 0, 500, 10000, 100, 0}, 100, 0, 500); // wrong offset: cut there
  send({0x4d46, kWireVersion, 1, 1, kVerify, 5, 3, 0, 50, 50, 0}, 50, 0, 0);         // message 5 before 1
  send({0x4d46, kWireVersion, 2, 1, 0, 0, 0, 0, 0, 0, 1000}, 0, 0, 0);               // credit for packets never sent
  send({0x4d46, kWireVersion, 9, 1, 0, 0, 0, 0, 0, 0, 0}, 0, 0, 0);                  // no such kind
  send({0x4d46, kWireVersion, 1, 1, kVerify, 1, 3, 0, 50, 100, 0}, 50, 0, 0);        // payload field says 100, has 50
  send({0x4d46, kWireVersion, 1, 1, kVerify, 1, 3, 0, 50, 50, 0}, 50, 0, 0);         // message 1: fine
  // Long packets: rank 1's chunks in rank 0's segment are 32..63 (L = 32,
  // of kLongPacket bytes, with 2 ranks), its k-th Long packet's is 32 + k
  // mod 32 (inline packets take none); none went so far.
  send({0x4d46, kWireVersion, 2, 1, 0, 0, 0, 0, 0, 50, 0}, 50, 1, 0, 32 + 4);         // a Long credit packet
  send({0x4d46, kWireVersion, 1, 1, kVerify, 2, 3, 0, 50, 50, 0}, 50, 1, 0, 32 + 0);  // message 2: fine
  send({0x4d46, kWireVersion, 1, 1, kVerify, 3, 3, 0, 50, 50, 0}, 50, 2, 0, 32 + 5);  // not its 2nd Long's chunk
  send({0x4d46, kWireVersion, 3, 1, 0, 0, 0, 0, 0, 0, 0}, 0, 0, 0);                  // FIN1
  send({0x4d46, kWireVersion, 4, 1, 0, 0, 0, 0, 0, 0, 0}, 0, 0, 0);                  // FIN2
  // Absorb rank 0's packets until its FIN2: only then may this endpoint go.
  uint64_t consumed = 0;
  bool fin2 = false;
  auto until = Clock::now() + 30s;
  while (!fin2 && Clock::now() < until) {
    auto* e = reinterpret_cast<const abi::AmRxEntry*>(ring + sizeof(abi::AmRingControl) +
                                                      (consumed % kEntries) * abi::kAmEntryBytes);
    if (__atomic_load_n(&e->seq, __ATOMIC_ACQUIRE) != uint32_t(consumed + 1)) {
      ::usleep(200);
      continue;
    }
    ForgedHeader h{};
    if (e->len >= sizeof h) std::memcpy(&h, e + 1, sizeof h);
    fin2 = h.kind == 4;
    consumed++;
    __atomic_store_n(&reinterpret_cast<abi::AmRingControl*>(ring)->consumed, consumed, __ATOMIC_RELEASE);
  }
  return ok && fin2 ? 0 : 8;
}

TEST_F(Fm, MalformedPacketsFromAMember) {
  auto rc = run_job({1, 0}, [](unsigned rank) {
    if (rank == 1) return fake_rank(std::getenv("ULNIC_FM_DIR"));
    FM_register_handler(kVerify, verifying_handler);
    FM_register_handler(kTrunc, trunc_handler);
    g_rx.size_of = [](uint32_t, uint32_t) { return size_t(50); };
    if (FM_initialize() != 0) return 2;
    FM_stats st{};
    bool ok = extract_until([&] {
      FM_get_stats(&st);
      return g_rx.messages == 2 && g_trunc_got != SIZE_MAX && st.bad_packets >= 7;
    });
    check(ok, "messages %llu, bad packets %llu", (unsigned long long)g_rx.messages, st.bad_packets);
    check(g_trunc_got == 100, "the cut message gave %zu bytes", g_trunc_got);
    check(FM_finalize() == 0, "FM_finalize");
    check(st.bad_packets == 7 && g_rx.messages == 2, "bad packets: %llu, not 7; messages %llu, not 2",
          st.bad_packets, (unsigned long long)g_rx.messages);
    return g_failures ? 1 : 0;
  });
  EXPECT_EQ(rc, (std::vector<int>{0, 0}));
}

}  // namespace

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  ::testing::AddGlobalTestEnvironment(new vipl_test::ClusterEnvironment("fm", kNodes));
  return RUN_ALL_TESTS();
}
