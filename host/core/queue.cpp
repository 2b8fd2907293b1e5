// Hot path: descriptors out, completions in, waits that never miss a wake-up.
#include <poll.h>
#include <sched.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "pin.h"
#include "ulnic/nic.h"
#include "ulnic/trace.h"
#include "ulnic/util/sched_attr.h"

namespace ulnic {

namespace {
using Clock = std::chrono::steady_clock;

// Our store before their load (the dormancy and wait handshakes are
// Dekker-style: each side writes its flag, then reads the other's).
inline void full_barrier() { std::atomic_thread_fence(std::memory_order_seq_cst); }
}  // namespace

abi::SqEntry* Nic::next_sqe() {
  if (in_flight() + taken_ >= layout_.cq_capacity) return nullptr;  // no CQ room for its completion
  abi::SqEntry* e = sq_.reserve();
  if (!e) return nullptr;
  std::memset(e, 0, sizeof *e);
  sq_.push();
  ++taken_;
  if (trace::armed()) taken_descriptors_.push_back(e);
  return e;
}

abi::SqEntry* Nic::next_inline_sqe() {
  abi::SqEntry* e = sq_.reserve();
  if (!e) return nullptr;
  std::memset(e, 0, sizeof *e);
  sq_.push();
  return e;
}

uint32_t Nic::sq_free() { return sq_.free_space(sq_.capacity()); }  // always a fresh look

bool Nic::poll_event(abi::EqEntry& out) {
  const abi::EqEntry* e = eq_.peek();
  if (!e) return false;
  out = *e;
  eq_.pop();
  eq_.release();
  took_one();
  return true;
}

void Nic::took_one() {
  consumed_.fetch_add(1);
  if (sleepers_.load() > 0) {
    // Another thread sleeps in block_until: this may be what it waits for
    // (wait_ready() and poll_found() look at what was taken). The poke wakes
    // the leader, and it the others; without it they would sleep out their
    // slice.
    uint64_t one = 1;
    ssize_t ignored = ::write(completion_fd_.get(), &one, sizeof one);
    (void)ignored;
  }
}

uint64_t Nic::events_dropped() const { return __atomic_load_n(&header().nic.events_dropped, __ATOMIC_RELAXED); }

namespace {
bool sends_data(uint8_t opcode) {
  return opcode == abi::kOpPut || opcode == abi::kOpSend || opcode == abi::kOpSendInline ||
         opcode == abi::kOpAmSend || opcode == abi::kOpViPostSend || opcode == abi::kOpUnetSend ||
         opcode == abi::kOpUnetSendInline;
}
}  // namespace

uint32_t Nic::submit() {
  if (taken_ == 0) return 0;
  if (!taken_descriptors_.empty()) {
    for (abi::SqEntry* e : taken_descriptors_)
      if (sends_data(e->opcode) && trace::take_arming()) {
        e->flags |= abi::kSqTrace;
        break;
      }
    taken_descriptors_.clear();
  }
  sq_.publish();  // release: the NIC reads entries only after it sees the tail
  posted_.store(posted_.load(std::memory_order_relaxed) + taken_, std::memory_order_relaxed);  // one writer
  uint32_t n = taken_;
  taken_ = 0;
  // Work handed to the NIC between two empty polls: the program is not
  // spinning idle, it drains a queue and goes on (VipSendDone until
  // NOT_DONE before each VipPostSend), and its next empty poll must not
  // block (poll_found). Counted as blocked, that pattern slept ~once a
  // message (issue 19: a VIPL stream at depth 16).
  empty_polls_.store(0, std::memory_order_relaxed);
  ring_if_dormant();
  return n;
}

void Nic::ring_if_dormant() {
  full_barrier();  // the tail (or a U-Net/MM fill) before sq_dormant: pairs with the firmware's go_dormant()
  if (__atomic_load_n(&header().nic.sq_dormant, __ATOMIC_RELAXED)) {
    uint64_t one = 1;
    ssize_t ignored = ::write(doorbell_fd_.get(), &one, sizeof one);
    (void)ignored;
  }
}

bool Nic::poll(abi::CqEntry& out) {
  if (!stashed_.empty()) {
    out = stashed_.front();
    stashed_.pop_front();
    stash_size_.store(stashed_.size());
    return true;
  }
  return poll_ring(out);
}

Result<void> Nic::block_until(const std::function<bool()>& ready, std::chrono::nanoseconds timeout,
                              std::chrono::microseconds spin, uint32_t wait_for, uint32_t events) {
  auto start = Clock::now();
  while (Clock::now() - start < spin)
    if (ready()) return {};
  // Our bits in the slot's wait_for while we may sleep (written before the
  // first wait_seq bump below; the NIC reads both after its fence).
  auto publish_wait_for = [&](int delta) {
    std::lock_guard lock(wait_mu_);
    if (wait_for & abi::kWaitCompletions) waiting_for_[0] += delta;
    if (wait_for & abi::kWaitEvents) waiting_for_[1] += delta;
    const uint32_t all = (waiting_for_[0] ? uint32_t(abi::kWaitCompletions) : 0u) |
                         (waiting_for_[1] ? uint32_t(abi::kWaitEvents) : 0u);
    __atomic_store_n(&header().host.wait_for, all ? all : uint32_t(abi::kWaitAll), __ATOMIC_RELAXED);
    // A threshold holds only while its thread waits alone; the queue's
    // released head is where its count starts, and a full queue (events
    // dropped) would never reach more than its capacity.
    waiters_ += delta;
    const uint32_t n = std::min(events, eq_.capacity());
    const uint32_t until = delta > 0 && waiters_ == 1 && n > 1 ? eq_.released() + n : 0;
    __atomic_store_n(&header().host.wait_events_until, until, __ATOMIC_RELAXED);
  };
  publish_wait_for(1);
  struct Unpublish {
    decltype(publish_wait_for)& f;
    ~Unpublish() { f(-1); }
  } unpublish{publish_wait_for};
  for (;;) {
    // Announce that we are about to sleep, then look once more: the firmware
    // rings only if it sees a wait_seq it has not answered.
    // (One atomic add: several threads of the process may announce at once,
    // and each must change the word; only the NIC reads it.)
    __atomic_fetch_add(&header().host.wait_seq, 1, __ATOMIC_RELAXED);
    full_barrier();
    if (ready()) return {};
    if (state() != abi::SlotState::kActive)
      return fail("the NIC stopped serving this slot (state " + std::to_string(uint32_t(state())) + ", fault " +
                  std::to_string(uint32_t(fault())) + ")");
    // Re-check the slot state once a second.
    std::chrono::nanoseconds t = std::chrono::seconds(1);
    if (timeout != std::chrono::nanoseconds::max()) {
      auto left = timeout - std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - start);
      if (left.count() <= 0) return fail("timed out waiting for the NIC");
      t = std::min(left, t);
    }
    sleepers_.fetch_add(1);
    sleep_once(t);
    sleepers_.fetch_sub(1);
    if (ready()) return {};
  }
}

namespace {
// Nic::kWaitSlice, once per thread: asked the first time the thread sleeps.
void ask_for_wait_slice() {
  thread_local bool asked = false;
  if (asked) return;
  asked = true;
  const int64_t slice_ns = [] {
    const char* v = std::getenv("ULNIC_WAIT_SLICE_US");
    if (!v || !*v) return int64_t(std::chrono::nanoseconds(Nic::kWaitSlice).count());
    char* end = nullptr;
    long long us = std::strtoll(v, &end, 10);
    return (*end || us <= 0) ? int64_t(0) : int64_t(std::min<long long>(us, 100'000)) * 1000;
  }();
  if (slice_ns == 0) return;
  SchedAttr a;
  if (!get_sched_attr(a)) return;
  // SCHED_OTHER only, and never longer: sched_runtime is the thread's slice
  // (the kernel's default one where nobody chose; 0 before Linux 6.12).
  if (a.sched_policy != SCHED_OTHER || (a.sched_runtime != 0 && a.sched_runtime <= uint64_t(slice_ns))) return;
  SchedAttr want;
  want.sched_policy = SCHED_OTHER;
  want.sched_flags = a.sched_flags & kSchedFlagResetOnFork;
  want.sched_nice = a.sched_nice;
  want.sched_runtime = uint64_t(slice_ns);
  (void)set_sched_attr(want);
}
}  // namespace

// One sleep of block_until, as the leader on the eventfd or as a follower
// (see wait_cv_). A follower that finds no leader any more returns at once:
// its caller announces its sleep again and may lead.
void Nic::sleep_once(std::chrono::nanoseconds t) {
  ask_for_wait_slice();
  std::unique_lock lock(wait_mu_);
  if (wait_leader_) {
    const uint64_t gen = wait_gen_;
    wait_cv_.wait_for(lock, t, [&] { return wait_gen_ != gen || !wait_leader_; });
    return;
  }
  wait_leader_ = true;
  lock.unlock();
  pollfd p{completion_fd_.get(), POLLIN, 0};
  const timespec ts{time_t(t.count() / 1'000'000'000), long(t.count() % 1'000'000'000)};
  detail::sleep_near_nic(this, nic_stat_fd_.get());  // the NIC's ring then wakes us at once
  if (::ppoll(&p, 1, &ts, nullptr) > 0) {
    uint64_t count;
    ssize_t ignored = ::read(completion_fd_.get(), &count, sizeof count);
    (void)ignored;
  }
  lock.lock();
  wait_leader_ = false;
  ++wait_gen_;
  lock.unlock();
  wait_cv_.notify_all();
}

void Nic::wait_passive(uint64_t gen, std::chrono::milliseconds timeout) {
  std::unique_lock lock(wait_mu_);
  poke_cv_.wait_for(lock, timeout, [&] { return poke_gen_.load() != gen; });
}

void Nic::poke() {
  {
    std::lock_guard lock(wait_mu_);
    poke_gen_.fetch_add(1);
  }
  poke_cv_.notify_all();
}

namespace {
int64_t now_ns() { return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count(); }
}  // namespace

int64_t stream_nap_ns(uint32_t in_flight, int64_t gap_ns, int64_t since_ns, int64_t now_ns, int64_t spin_ns,
                      int64_t timeout_ns) {
  constexpr int64_t kMaxNapNs = 2'000'000;
  // With one descriptor in flight the NIC has nothing queued behind it.
  if (in_flight < 2 || gap_ns <= 0 || since_ns == 0) return 0;
  // Until the next completion is due, one gap after the last a wait took;
  // with more in flight, until half of them are (one wake-up reaps them
  // all: on a 2-core host that runs two NICs, every wake-up takes a NIC's
  // core for a moment; measured at 1 MiB, 8 in flight, waking for every
  // fourth rather than every second completion gained ~3%). The NIC has
  // the other half queued meanwhile.
  const int64_t due = int64_t(std::max<uint32_t>(1, in_flight / 2)) * gap_ns;
  // Only where that is more than two spins off: a shorter nap saves little,
  // and its wake-up could outlast the queued work.
  if (due <= 2 * spin_ns) return 0;
  int64_t nap = since_ns + due - now_ns;
  if (timeout_ns >= 0) nap = std::min(nap, timeout_ns / 2);
  return std::max<int64_t>(0, std::min({nap, due, kMaxNapNs}));
}

int64_t stream_gap_ns(int64_t gap_ns, int64_t since_ns, uint32_t reaped_since, int64_t now_ns) {
  if (since_ns == 0 || reaped_since == 0 || now_ns - since_ns <= 0 || now_ns - since_ns >= 50'000'000) return gap_ns;
  const int64_t sample = (now_ns - since_ns) / reaped_since;
  return gap_ns ? gap_ns + (sample - gap_ns) / 4 : sample;
}

// stream_nap_ns naps only where half of those in flight are due more than
// two "spins" away; waits spin 0 us by default now (see nic.h), and a nap of
// a few microseconds cost a wake-up per completion: small sends with 16 in
// flight fell to a few thousand a second (issue 19). Two spins of 20 us, as
// before, is the floor.
constexpr int64_t kNapSpinFloorNs = 20'000;

// Linux's hybrid polling, for a stream (stream_nap_ns): sleep until the
// completion is due at the pace completions have been arriving at (the NIC
// works through the descriptors queued behind it meanwhile), then look;
// spin and block as usual only if it is not there yet. A nap costs the NIC
// nothing: only a process that announced its sleep (wait_seq) is rung.
// Measured (issue 5, 1 MiB sends, 8 in flight): a 20 us spin before each
// completion took ~8% of a core from the NICs on this 2-core machine, and
// each doorbell ~11 us of the sending NIC's time.
Result<abi::CqEntry> Nic::wait(std::chrono::milliseconds timeout, std::chrono::microseconds spin) {
  abi::CqEntry out;
  if (poll(out)) return out;
  const int64_t since = pace_since_ns_.load(std::memory_order_relaxed);
  const int64_t nap = stream_nap_ns(in_flight(), reap_gap_ns_.load(std::memory_order_relaxed), since, now_ns(),
                                    std::max<int64_t>(std::chrono::nanoseconds(spin).count(), kNapSpinFloorNs),
                                    timeout == kNoTimeout ? -1 : std::max<int64_t>(0, limit(timeout).count()));
  if (nap > 0) {
    // With Linux's default 50 us timer slack a nap of 50 us would last up
    // to 100 (and the NIC could run out of queued work): this one ends on
    // time, and the thread's slack is what it was afterwards. Measured at
    // 64 KiB (8 in flight, naps of ~50 us): one-way up by ~15%.
    const int slack = ::prctl(PR_GET_TIMERSLACK, 0, 0, 0, 0);
    if (slack > 1000) ::prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);
    timespec ts{time_t(nap / 1'000'000'000), long(nap % 1'000'000'000)};
    ::nanosleep(&ts, nullptr);
    if (slack > 1000) ::prctl(PR_SET_TIMERSLACK, static_cast<unsigned long>(slack), 0, 0, 0);
  }
  if (nap == 0 || !poll(out)) {
    if (auto r = block_until([&] { return completion_ready(); }, limit(timeout), spin, abi::kWaitCompletions); !r)
      return std::unexpected(r.error());
    if (!poll(out)) return fail("completion vanished");
  }
  const int64_t now = now_ns();
  const uint32_t reaped = reaped_.load();
  reap_gap_ns_.store(stream_gap_ns(reap_gap_ns_.load(std::memory_order_relaxed), since,
                                   reaped - pace_since_reaped_.load(std::memory_order_relaxed), now),
                     std::memory_order_relaxed);
  pace_since_ns_.store(now, std::memory_order_relaxed);
  pace_since_reaped_.store(reaped, std::memory_order_relaxed);
  return out;
}

Result<abi::CqEntry> Nic::wait_owed(std::chrono::milliseconds bound) {
  const NicDeadline deadline(*this, bound);
  for (;;) {
    auto r = wait(deadline.sleep_slice());
    if (r || state() != abi::SlotState::kActive || deadline.passed()) return r;
  }
}

void Nic::poll_found(bool something, std::chrono::nanoseconds max_block, uint32_t wait_for) {
  const uint64_t consumed = consumed_.load();
  const bool news = consumed_seen_.exchange(consumed) != consumed;  // always taken: the next poll compares with it
  if (something || news) {
    empty_polls_.store(0, std::memory_order_relaxed);
    return;
  }
  const int64_t now = now_ns();
  const int64_t last = last_empty_ns_.exchange(now, std::memory_order_relaxed);
  const uint32_t n = empty_polls_.fetch_add(1, std::memory_order_relaxed);
  if (n == 0 || now - last > std::chrono::nanoseconds(kTightGap).count()) {
    empty_polls_.store(1, std::memory_order_relaxed);
    first_empty_ns_.store(now, std::memory_order_relaxed);
    return;
  }
  if (n + 1 < kTightPolls || now - first_empty_ns_.load(std::memory_order_relaxed) <
                                 std::chrono::nanoseconds(kTightSpin).count())
    return;
  max_block = std::min<std::chrono::nanoseconds>(max_block, kTightBlock);
  if (max_block.count() <= 0) return;  // the library has work due now
  tight_blocks_.fetch_add(1, std::memory_order_relaxed);
  (void)block_until([&] { return completion_ready() || eq_.published() || consumed_.load() != consumed; },
                    max_block, std::chrono::microseconds(0), wait_for);
  last_empty_ns_.store(now_ns(), std::memory_order_relaxed);  // the block is no pause in the polling
}

Result<void> Nic::wait_ready(std::chrono::milliseconds timeout, std::chrono::microseconds spin, uint32_t wait_for,
                             uint32_t events) {
  // A completion another thread reaps meanwhile (under its library's lock)
  // may be the one this thread sleeps for: that counts as ready too.
  const uint32_t seen = reaped_.load();
  return block_until([&] { return completion_ready() || eq_.published() || reaped_.load() != seen; },
                     limit(timeout), spin, wait_for, events);
}

bool Nic::post(const abi::SqEntry& e, const void* payload, size_t bytes) {
  size_t extra = (bytes + sizeof(abi::SqEntry) - 1) / sizeof(abi::SqEntry);
  if (sq_free() < 1 + extra) return false;
  abi::SqEntry* s = next_sqe();
  if (!s) return false;
  *s = e;
  for (size_t i = 0; i < extra; ++i) {
    size_t n = std::min(bytes - i * sizeof(abi::SqEntry), sizeof(abi::SqEntry));
    std::memcpy(next_inline_sqe(), static_cast<const uint8_t*>(payload) + i * sizeof(abi::SqEntry), n);
  }
  submit();
  return true;
}

Result<abi::CqEntry> Nic::run(const abi::SqEntry& e, std::chrono::milliseconds timeout) {
  return run(e, nullptr, 0, timeout);
}

bool Nic::configure_am_endpoint(uint32_t index, uint64_t tag, const MemRegion& ring, uint32_t entries,
                                const MemRegion* segment, std::chrono::milliseconds timeout) {
  abi::SqEntry e{};
  e.opcode = abi::kOpAmEndpoint;
  e.dst_slot = index;
  e.length = entries;
  e.src_addr = reinterpret_cast<uint64_t>(ring.addr);
  e.src_key = ring.key;
  e.access = uint32_t(tag);
  e.src_slot = uint32_t(tag >> 32);
  if (segment && segment->length) {
    e.dst_addr = reinterpret_cast<uint64_t>(segment->addr);
    e.dst_key = segment->key;
    e.reg_offset = segment->length;
  }
  auto r = run(e, timeout);
  return r && r->status == abi::kCqOk;
}

bool Nic::close_am_endpoint(uint32_t index, std::chrono::milliseconds timeout) {
  abi::SqEntry e{};
  e.opcode = abi::kOpAmEndpoint;
  e.dst_slot = index;
  e.flags = abi::kSqAmClose;
  auto r = run(e, timeout);
  return r && r->status == abi::kCqOk;
}

Result<abi::CqEntry> Nic::run(const abi::SqEntry& e, const void* payload, size_t bytes,
                              std::chrono::milliseconds timeout) {
  if (taken_ != 0) return fail("run: descriptors taken but not submitted");
  // A user_data nobody else uses (descriptor addresses stay below 2^63).
  abi::SqEntry mine = e;
  mine.user_data = (uint64_t(1) << 63) | ++run_serial_;
  const NicDeadline deadline(*this, timeout);
  while (!post(mine, payload, bytes)) {
    // Full: reap what is there (kept for the owner) until there is room.
    abi::CqEntry c;
    if (cq_.peek() && poll_ring(c)) {
      stashed_.push_back(c);
      stash_size_.store(stashed_.size());
      continue;
    }
    if (deadline.passed()) return fail("run: send queue full");
    deadline.back_off();
  }
  for (;;) {
    abi::CqEntry c;
    while (poll_ring(c)) {
      if (c.user_data == mine.user_data) {
        c.user_data = e.user_data;
        return c;
      }
      stashed_.push_back(c);
      stash_size_.store(stashed_.size());
    }
    if (deadline.passed()) return fail("timed out waiting for the NIC");
    // A slice that ends is no failure: the deadline judges (a NIC off the CPU has not had its time yet).
    if (auto r = block_until([&] { return cq_.published(); }, limit(deadline.sleep_slice()),
                             std::chrono::microseconds(20), abi::kWaitCompletions);
        !r && state() != abi::SlotState::kActive)
      return std::unexpected(r.error());
  }
}

abi::SlotTrace Nic::trace_stamps() const {
  const abi::SlotTrace& shared = header().trace;
  abi::SlotTrace out{};
  for (;;) {
    // Pairs with the firmware's release of each sequence word after its times.
    const uint64_t tx = __atomic_load_n(&shared.tx_seq, __ATOMIC_ACQUIRE);
    const uint64_t rx = __atomic_load_n(&shared.rx_seq, __ATOMIC_ACQUIRE);
    out.tx_seen = __atomic_load_n(&shared.tx_seen, __ATOMIC_RELAXED);
    out.tx_sent = __atomic_load_n(&shared.tx_sent, __ATOMIC_RELAXED);
    out.rx_seen = __atomic_load_n(&shared.rx_seen, __ATOMIC_RELAXED);
    out.rx_done = __atomic_load_n(&shared.rx_done, __ATOMIC_RELAXED);
    std::atomic_thread_fence(std::memory_order_acquire);
    out.tx_seq = __atomic_load_n(&shared.tx_seq, __ATOMIC_RELAXED);
    out.rx_seq = __atomic_load_n(&shared.rx_seq, __ATOMIC_RELAXED);
    if (out.tx_seq == tx && out.rx_seq == rx) return out;
  }
}

bool Nic::poll_ring(abi::CqEntry& out) {
  const abi::CqEntry* c = cq_.peek();
  if (!c) return false;
  out = *c;
  cq_.pop();
  cq_.release();
  reaped_.fetch_add(1);
  took_one();
  return true;
}

}  // namespace ulnic
