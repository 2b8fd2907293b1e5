// libulnic core: a process's handle on its NIC (DESIGN §4, §9).
//
//   auto nic = ulnic::Nic::open();            // attach: get a slot from ulnicd
//   void* buf = nic->alloc(1 << 20);          // DMA-able memory from the slot
//   auto mr = nic->register_memory(buf, 1 << 20, abi::kAccessLocal);
//   abi::SqEntry* e = nic->next_sqe(); ...;   // fill descriptors
//   nic->submit();                            // publish + doorbell if asleep
//   auto cqe = nic->wait();                   // spin briefly, then block
//
// Everything a process shares with its NIC lives in its slot: the rings and
// the heap. Memory outside the slot can be registered too: its pages are
// moved into the slot (copied, then the slot's pages are mapped over the
// same virtual range), see register_memory().
//
// A Nic is not thread-safe: one thread posts and reaps (as with a VI or an
// io_uring); use one Nic per thread if needed.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "ulnic/abi/slot.h"
#include "ulnic/abi/vmmc.h"
#include "ulnic/util/fd.h"
#include "ulnic/util/result.h"

namespace ulnic {

namespace abi = ::ulnic::abi;

struct NicOptions {
  std::string cluster;   // "" = $ULNIC_CLUSTER or "default"
  int node = -1;         // -1 = $ULNIC_NODE or 0
  std::string socket;    // explicit daemon socket; overrides cluster/node
};

struct MemRegion {
  void* addr = nullptr;       // what the caller registered
  size_t length = 0;
  uint32_t key = 0;           // memory key for descriptors
  uint32_t access = 0;        // abi::MemAccess
  uint64_t slot_offset = 0;   // where the bytes lived in the slot when registered
                              // (a later registration overlapping them may move them)
  bool moved = false;         // pages were moved into the slot
};

class Nic;

// A bound on how long a NIC may take over work it should do at once (a
// configuration operation, room in its send queue, a cancel): it passes
// once `limit` has gone by on the wall clock *and* the NIC has run that
// long since (Nic::run_us), or, with the wall-clock part over, once the
// node's daemon is gone (the NIC will not run again). A wall-clock bound
// alone failed live NICs: a 2-core host running two NICs, their processes
// and other load left NICs off the CPU for up to 20 s (issue 20's stress
// runs), and nothing the NIC could have done was late. kNoTimeout: never.
class NicDeadline {
 public:
  NicDeadline(const Nic& nic, std::chrono::milliseconds limit);
  bool passed() const;
  // How long a waiter may sleep before looking again: the wall-clock part
  // left, then one refresh step of the NIC's clock (never 0 unless passed).
  std::chrono::milliseconds sleep_slice() const;
  // Between the looks of a waiter that has nothing to sleep on (a full send
  // queue): a yield while the wall-clock part lasts, then a 1 ms sleep -- a
  // NIC kept off the CPU needs that CPU more than its waiter does.
  void back_off() const;

 private:
  const Nic* nic_;
  std::chrono::steady_clock::time_point start_;
  uint64_t run0_;
  std::chrono::milliseconds limit_;
};

// Nic::wait's hybrid polling for streams, as pure rules (times in ns):
// how long a wait naps before it first looks, with `in_flight` descriptors
// in flight, completions `gap_ns` apart (0: unknown) and the last one wait()
// waited for taken at `since_ns` (0: none); 0 means no nap. It naps only
// with two or more in flight and only where half of them are due more than
// two spins away, until they are (at most 2 ms, half of `timeout_ns` if
// that is >= 0).
int64_t stream_nap_ns(uint32_t in_flight, int64_t gap_ns, int64_t since_ns, int64_t now_ns, int64_t spin_ns,
                      int64_t timeout_ns);
// The gap after wait() took a completion it waited for at `now_ns`, with
// `reaped_since` completions reaped since `since_ns` (this one and any found
// ready without waiting): a nap that overslept finds several, and the gap
// stays the NIC's pace instead of growing by the oversleep. Smoothed 1/4;
// an interval of 50 ms or more (an idle stream) teaches nothing.
int64_t stream_gap_ns(int64_t gap_ns, int64_t since_ns, uint32_t reaped_since, int64_t now_ns);

// Page-aligned, so that no buffer the program registers shares a page with
// it: register_memory moves whole pages, and a write another thread makes
// to a neighbour during the move is lost (its limit, below) -- and this
// object's wait words are written by any thread that sleeps on the NIC
// (TSan saw a listener thread's sleep race the main thread's move of the
// page they were on).
class alignas(4096) Nic {
 public:
  static Result<std::unique_ptr<Nic>> open(const NicOptions& opts = {});
  ~Nic();
  Nic(const Nic&) = delete;
  Nic& operator=(const Nic&) = delete;

  uint32_t slot() const { return slot_; }
  uint32_t node() const { return node_; }
  const abi::SlotLayout& layout() const { return layout_; }
  // The slot's state as the firmware reports it (kActive while all is well).
  abi::SlotState state() const;
  abi::SlotFault fault() const;

  // ---- memory
  // Allocates from the slot heap (DMA-able; `align` a power of two). nullptr
  // when the heap is exhausted.
  void* alloc(size_t bytes, size_t align = 64);
  void free(void* p);
  bool in_slot(const void* p, size_t len) const;
  // Registers [addr, addr+length) with the NIC and returns its key. Memory in
  // the slot heap registers in place. Memory elsewhere (heap, stack, globals:
  // private anonymous pages) is moved into the slot first: its pages are
  // copied into slot pages that are then mapped MAP_FIXED over the same
  // virtual range, so the caller's pointers stay valid. Cost: one copy of the
  // touched pages plus an mmap; limits: whole pages move (neighbours on
  // them too: a write to one by another thread during the move is lost),
  // file-backed mappings are refused by the kernel's semantics
  // (they would lose their file), and the slot heap must have room.
  // Moved pages stay where they are after deregistration (a cache, like a
  // real NIC's pinned pages): registering them again costs no copy, only a
  // look at /proc/self/maps that they are still this slot's pages. A range
  // that overlaps moved pages still registered, and reaches past them (VIA
  // allows overlapping registrations), moves in as one range with them: its
  // other pages are copied, the NIC moves the registered ones and their
  // registrations to their place in it (kOpMoveRegion, once no operation of
  // the slot is in flight: the call waits for those), and the whole range is
  // mapped over. A write another thread makes to the registered pages while
  // that runs may be lost, as for the pages moved in. Pages pin_pages moved
  // in are not merged with: such a range is refused.
  // `ptag`: the VI protection tag the NIC checks for VI use (0: none).
  Result<MemRegion> register_memory(void* addr, size_t length, uint32_t access, uint32_t ptag = 0);
  // Drops the registration. Never reads or writes the process's memory:
  // moved pages stay in the slot (see register_memory), so a region the
  // program has freed, unmapped or had its allocator map anew deregisters
  // cleanly. Pages moved back to private memory only when the slot heap needs
  // the room or the Nic closes -- and only where they are still mapped from
  // this slot.
  Result<void> deregister(MemRegion& region);
  // Pages a library maps for the NIC by itself (U-Net/MM, abi/unet.h: the
  // NIC's TLB names frames, not registrations): pin_pages moves the whole
  // pages [addr, addr+length) of private memory into the slot as
  // register_memory does, without a registration, and returns the slot
  // offset of each page's frame; they stay until unpin_pages moves them
  // back into private memory (or the Nic closes), any run of them at once.
  // unpin_pages frees their frames too unless `keep_frames`: the caller then
  // frees each (free(slot_base() + offset)) once the NIC can no longer use
  // it (an unmap it has seen carried out). Neither tells the NIC anything.
  Result<std::vector<uint64_t>> pin_pages(void* addr, size_t length);
  Result<void> unpin_pages(void* addr, size_t length, bool keep_frames = false);
  // Rings the NIC's doorbell for this slot if the NIC stopped polling it:
  // after writing, in the slot, something the NIC reads at its next look
  // rather than a descriptor (U-Net/MM's fills). A full fence first.
  void ring_if_dormant();
  // Registrations made without a copy because the pages were already in the
  // slot, and moves of pages into the slot (statistics).
  uint64_t registration_cache_hits() const { return cache_hits_; }
  uint64_t pages_moved_in() const { return pages_moved_in_; }

  // ---- descriptors
  // The next free send-queue entry (zeroed), or nullptr if the SQ is full or
  // as many descriptors are in flight as the CQ can hold.
  abi::SqEntry* next_sqe();
  // A continuation entry for the descriptor just taken (kOpSendInline
  // payload): no completion of its own. Check sq_free() first: all or none.
  abi::SqEntry* next_inline_sqe();
  uint32_t sq_free();
  // Publishes the entries taken since the last submit and rings the NIC's
  // doorbell if it stopped polling this slot. Returns how many were published.
  uint32_t submit();
  // A completion, if one is ready.
  bool poll(abi::CqEntry& out);
  // Waits for a completion: spins for `spin`, then blocks on the slot's
  // completion eventfd. No spin by default: on a 2-core host the spinning
  // process takes the core a NIC needs (a 64 B VMMC ping-pong, issue 19:
  // RTT/2 median ~48 us with 20 us of spin, ~13 with 2, ~9 with none; the
  // NIC rings a process that announced its sleep within microseconds). Fails on timeout or if the slot was cut off.
  // With two or more descriptors in flight it may first nap until half of
  // them are due at the pace completions have been coming at (hybrid
  // polling, stream_nap_ns): the NIC has queued work meanwhile, and a process that
  // is not asleep on the eventfd costs it no doorbell (a device write under
  // QEMU's global lock).
  // Timeouts: kNoTimeout waits without a limit; any other value is a limit,
  // and one of zero or less (a deadline already past, as a caller that
  // computes time left may find) looks once and times out. (A negative
  // value meant "no limit" once: a caller preempted between reading the
  // clock and computing its time left slept until the next arrival.)
  static constexpr std::chrono::milliseconds kNoTimeout = std::chrono::milliseconds::max();
  Result<abi::CqEntry> wait(std::chrono::milliseconds timeout = kNoTimeout,
                            std::chrono::microseconds spin = std::chrono::microseconds(0));
  // A completion the NIC owes (a send's, room in the send queue): waits until
  // one comes, or fails once the slot is no longer served or NicDeadline(bound)
  // passed -- the NIC ran that long without one, or its daemon is gone.
  Result<abi::CqEntry> wait_owed(std::chrono::milliseconds bound);
  uint32_t in_flight() const {
    return posted_.load(std::memory_order_relaxed) - reaped_.load(std::memory_order_relaxed);
  }

  // ---- events (VMMC notifications), in the slot's event queue
  bool poll_event(abi::EqEntry& out);
  // Notifications lost because the event queue was full.
  uint64_t events_dropped() const;
  // Waits until a completion or an event is ready (neither is taken), or
  // until another thread of the process took completions (they may be the
  // ones this thread waits for: look again). `wait_for` (abi::WaitFor): what
  // the NIC wakes it for -- a library waiting for arrivals only (AM, FM)
  // passes kWaitEvents and is not woken by its own sends' completions
  // (those with an error status still wake it). `events`: a caller that
  // drained the event queue and knows more arrivals are on their way (the
  // rest of a message) asks the NIC to ring it for events only once that
  // many are in, or the NIC is about to sleep, or ~500 us passed
  // (SlotHostWords.wait_events_until); 0 or 1: the first. Only while it is
  // the one thread waiting: another's wait is never delayed by it.
  Result<void> wait_ready(std::chrono::milliseconds timeout = kNoTimeout,
                          std::chrono::microseconds spin = std::chrono::microseconds(0),
                          uint32_t wait_for = abi::kWaitAll, uint32_t events = 0);
  // For a thread that waits for what another thread of the process takes
  // from the rings for it (libvipl's connection waits beside a busy data
  // path): wait_passive(gen, timeout) sleeps until poke() or the timeout,
  // announcing no sleep (the NIC does not ring for it) and not counted as a
  // sleeper (other threads' reaps do not write the eventfd, and a leader's
  // wake-ups do not reach it). `gen`: poke_gen(), read before the caller let
  // go of the lock under which it looked. consumed(): completions and events
  // taken from the rings so far, by any thread.
  uint64_t poke_gen() const { return poke_gen_.load(); }
  void wait_passive(uint64_t gen, std::chrono::milliseconds timeout);
  void poke();
  uint64_t consumed() const { return consumed_.load(); }

  // ---- handing the core to the NIC
  // A library's non-blocking poll (AM_Poll, VipRecvDone, VipCQDone,
  // vmmc_poll, FM_extract) says whether it found anything, holding none of
  // its own locks. Empty polls back to back are a process spinning while it
  // waits, as classic programs do; on a 2-core host it takes the core its NIC
  // (or the peer's) needs, and a round trip stretched to milliseconds
  // (measured, issue 19). From the kTightPolls-th of them in a row (once
  // they have spanned kTightSpin), each empty poll blocks on the slot's
  // eventfd until
  // the NIC has a completion or an event for the process (it rings a process
  // that announced its sleep) or kTightBlock passes. A poll that finds
  // something, a pause of kTightGap between two polls (the program does
  // other work), or a post to the NIC between them (submit: it drains a
  // queue and sends, as a stream does), starts the count again: such a
  // program never blocks. So
  // do completions or events taken from the rings since the last call (by
  // any thread: they went into a library's queues, where the poll may look
  // next), and they end a block too. `max_block` bounds the block below
  // kTightBlock: a library with a timer of its own (AM's resend of a
  // message the destination's full ring refused, due in 50 us .. 5 ms)
  // passes the time until it is due, so a program spinning on its poll
  // resends on time (it waited the whole kTightBlock before, issue 19).
  // Measured with a 64 B VMMC ping-pong spinning on vmmc_poll, 2 nodes
  // (issue 19): blocking from the second empty poll on beat spinning 5 us
  // first; a block of at most 1 or 2 ms gave RTT/2 medians of 19-32 us and
  // p99 ~1 ms, 5-100 ms gave ~10 us and p99 40-100 us (with short timeouts
  // the woken process often waited for a CPU behind a spinning vCPU).
  static constexpr uint32_t kTightPolls = 2;
  static constexpr std::chrono::microseconds kTightSpin{0};
  static constexpr std::chrono::microseconds kTightGap{50};
  static constexpr std::chrono::milliseconds kTightBlock{10};
  // The scheduler slice a thread asks for the first time it sleeps on its
  // NIC (Linux >= 6.12, EEVDF; older kernels ignore the request): woken by
  // its NIC, a thread with a shorter slice than the NIC's vCPU thread runs at
  // once instead of after that thread's slice. On two cores a NIC that has
  // just rung its process often shares that process's CPU; with the default
  // slice the process waited out the NIC's spin window before it ran (a NOP
  // to a sleeping NIC, blocking wait: median ~100-230 us, ~30 us with it;
  // docs/design.md, "Two cores, four parties"). $ULNIC_WAIT_SLICE_US
  // overrides it (0: leave the scheduler alone); a thread with a policy
  // other than SCHED_OTHER, or whose slice is already as short, is left
  // alone.
  static constexpr std::chrono::microseconds kWaitSlice{100};
  void poll_found(bool something, std::chrono::nanoseconds max_block = kTightBlock,
                  uint32_t wait_for = abi::kWaitAll);
  // Empty polls that blocked (statistics).
  uint64_t tight_blocks() const { return tight_blocks_.load(std::memory_order_relaxed); }

  // ---- the NIC's running time
  // Microseconds the NIC has run (SlotNicWords.run_us): it moves in steps
  // of the NIC's status refresh (100 ms by default) and only while the NIC
  // runs, so a NIC the host left off the CPU has not aged meanwhile.
  uint64_t run_us() const;
  // True once the node's daemon has gone (its connection hung up): it exits
  // when the board's QEMU does, and the NIC's clock will not move again.
  bool daemon_gone() const;

  // ---- requests to the node daemon (VMMC export/import): one at a time
  Result<abi::OwnerReply> call_daemon(abi::OwnerRequest q,
                                      std::chrono::milliseconds timeout = std::chrono::milliseconds(30000));

  // ---- synchronous helpers (post one descriptor, wait for its completion)
  // Other descriptors may be in flight: their completions are kept, in
  // order, for poll()/wait(). `e.user_data` comes back in the result.
  // `timeout` is a NicDeadline: time the NIC ran, not wall-clock time.
  Result<abi::CqEntry> run(const abi::SqEntry& e, std::chrono::milliseconds timeout = std::chrono::milliseconds(10000));
  // The same with a payload in the entries after the descriptor (kOpSendInline,
  // kOpViConnect, kOpViListen): `bytes` of `payload`, ceil(bytes / 64) entries.
  Result<abi::CqEntry> run(const abi::SqEntry& e, const void* payload, size_t bytes,
                           std::chrono::milliseconds timeout = std::chrono::milliseconds(10000));
  // Configures AM endpoint `index` of this slot (abi/am.h): its tag, its
  // receive ring (`entries` entries at ring.addr, registered as `ring`) and,
  // when `segment` is given, the segment Long payloads land in. True when
  // the NIC took it. close_am_endpoint frees the endpoint again.
  bool configure_am_endpoint(uint32_t index, uint64_t tag, const MemRegion& ring, uint32_t entries,
                             const MemRegion* segment, std::chrono::milliseconds timeout);
  bool close_am_endpoint(uint32_t index, std::chrono::milliseconds timeout);
  // Posts without waiting (the caller reaps the completion): false if the SQ
  // or the CQ has no room.
  bool post(const abi::SqEntry& e, const void* payload = nullptr, size_t bytes = 0);

  // Latency breakdowns (ulnic/trace.h): a consistent copy of the slot's stamps.
  abi::SlotTrace trace_stamps() const;

  // For tests and tools: the raw slot mapping.
  uint8_t* slot_base() const { return base_; }
  size_t slot_size() const { return size_; }

 private:
  Nic() = default;
  Result<void> attach(const std::string& socket);
  // `timeout` nanoseconds::max(): no limit (kNoTimeout, through limit());
  // <= 0: look once. Sub-millisecond timeouts hold (poll_found's bound may
  // be a library's resend due in 50 us).
  // `wait_for`: what the NIC rings us for while we sleep (abi::WaitFor; the
  // union over the sleeping threads goes into SlotHostWords.wait_for).
  // `events`: wait_ready's.
  Result<void> block_until(const std::function<bool()>& ready, std::chrono::nanoseconds timeout,
                           std::chrono::microseconds spin, uint32_t wait_for, uint32_t events = 0);
  static std::chrono::nanoseconds limit(std::chrono::milliseconds timeout) {
    return timeout == kNoTimeout ? std::chrono::nanoseconds::max() : std::chrono::nanoseconds(timeout);
  }
  void sleep_once(std::chrono::nanoseconds t);
  void took_one();  // a completion or an event was taken from its ring
  bool poll_ring(abi::CqEntry& out);  // the next completion in the ring itself
  uint64_t heap_alloc(size_t bytes, size_t align);  // slot offset, 0 on failure
  void heap_free(uint64_t offset);
  abi::SlotHeader& header() const { return *reinterpret_cast<abi::SlotHeader*>(base_); }

  UniqueFd conn_, slot_fd_, doorbell_fd_, completion_fd_;
  UniqueFd nic_stat_fd_;  // /proc/TID/stat of the NIC's vCPU thread: a sleeper follows it (pin.h)
  uint8_t* base_ = nullptr;
  size_t size_ = 0;
  uint32_t slot_ = 0, node_ = 0;
  abi::SlotLayout layout_{};
  abi::RingProducer<abi::SqEntry> sq_;
  abi::RingConsumer<abi::CqEntry> cq_;
  abi::RingConsumer<abi::EqEntry> eq_;
  uint64_t daemon_requests_ = 0;
  // Threads asleep in block_until: one of them (the leader) sleeps on the
  // completion eventfd, the others on wait_cv_; whenever the leader wakes it
  // bumps wait_gen_ and wakes them all, and each looks at what it waits for
  // (a NIC wake-up is for the process, not for one of its threads: before,
  // it reached whichever thread slept on the eventfd, and another that
  // waited for it slept on to the end of its slice -- 10 ms per AM message
  // over VIPL, whose listener thread shares the NIC).
  std::atomic<int> sleepers_{0};
  std::mutex wait_mu_;
  std::condition_variable wait_cv_;
  uint64_t wait_gen_ = 0;    // guarded by wait_mu_
  bool wait_leader_ = false; // guarded by wait_mu_
  // wait_passive's sleepers, apart from those (a data path's wake-ups would
  // otherwise wake them all: six AM-over-VIPL listener threads took ~17,000
  // context switches each in a depth-16 run, issue 19). Written under wait_mu_.
  std::condition_variable poke_cv_;
  std::atomic<uint64_t> poke_gen_{0};
  // Threads in block_until waiting for completions, for events (guarded by
  // wait_mu_; their union is written to SlotHostWords.wait_for under it, so
  // a thread's bits are never overwritten while it may sleep).
  uint32_t waiting_for_[2] = {};
  uint32_t waiters_ = 0;   // threads in block_until (guarded by wait_mu_)
  uint32_t taken_ = 0;     // SQEs taken since the last submit
  // While trace::armed(): the descriptors taken since the last submit (not
  // their continuation entries), for submit() to mark the first data one.
  std::vector<abi::SqEntry*> taken_descriptors_;
  // Written by the posting thread only; read by in_flight() in any thread's
  // wait() (TSan found the plain counter read by a sleeper while the poster
  // wrote it).
  std::atomic<uint32_t> posted_{0};
  std::atomic<uint32_t> reaped_{0};  // read by sleepers in wait_ready()
  // When wait() last took a completion it waited for, reaped_ then, and the
  // smoothed pace of completions since (steady-clock ns; 0: none yet).
  std::atomic<int64_t> pace_since_ns_{0}, reap_gap_ns_{0};
  std::atomic<uint32_t> pace_since_reaped_{0};
  // poll_found: empty polls in a row, when the first and the last were
  // (steady-clock ns), and how many blocked; completions and events taken
  // from the rings by any thread, and that count at the last poll_found (a
  // poll by another thread may have moved what this one waits for into its
  // library's own queues: libvipl's listener does). Atomics: libvipl polls
  // from any thread.
  std::atomic<uint64_t> consumed_{0}, consumed_seen_{0};
  std::atomic<uint32_t> empty_polls_{0};
  std::atomic<int64_t> first_empty_ns_{0}, last_empty_ns_{0};
  std::atomic<uint64_t> tight_blocks_{0};
  std::deque<abi::CqEntry> stashed_;         // reaped while run() waited for its own
  // Its size, for block_until's ready() checks: a thread may sleep in
  // wait_ready() without the lock its library holds while another reaps
  // (libvipl), so those checks read only atomics and never move ring indices.
  std::atomic<size_t> stash_size_{0};
  bool completion_ready() const { return stash_size_.load() > 0 || cq_.published(); }
  uint64_t run_serial_ = 0;
  std::map<uint64_t, uint64_t> free_;        // heap: offset -> size
  std::map<uint64_t, uint64_t> allocated_;   // heap: offset -> size
  // Ranges of the process's memory whose pages were moved into the slot,
  // with the registrations that use them now (0: cached, see register_memory).
  struct Backing {
    uintptr_t start = 0;
    size_t length = 0;
    uint64_t offset = 0;  // slot offset of its first page
    uint32_t users = 0;
    bool pinned = false;  // a pin_pages frame (never merged, never evicted)
  };
  std::vector<Backing> backings_;
  uint64_t cache_hits_ = 0, pages_moved_in_ = 0;
  bool backing_mapped(const Backing& b) const;     // still this slot's pages at those addresses?
  // The parts of b still mapped from its slot pages ([start, end) runs).
  std::vector<std::pair<uintptr_t, uintptr_t>> mapped_runs(const Backing& b) const;
  void release_backing(size_t i, bool move_back);  // frees its slot pages (after moving them back)
  uint64_t heap_alloc_evicting(size_t bytes, size_t align);  // heap_alloc, evicting unused backings for room
  // register_memory's overlapping case: [start, end) overlaps the registered
  // backings starting at `held` (moved pages still mapped here): one backing
  // for the union, or why not.
  Result<Backing*> merge_backings(uintptr_t start, uintptr_t end, const std::vector<uintptr_t>& held);
  // kOpMoveRegion, asked again while the NIC says busy (operations in flight).
  Result<void> move_region(uint64_t from, uint64_t to, uint64_t length);
  std::vector<bool> populated_;                     // heap pages mapped into this process (populate_heap)
  void populate_heap(uint64_t offset, size_t bytes);
};

// The daemon socket for (cluster, node) under the runtime directory
// (ulnic/util/runtime_dir.h), as emulator/board/runtime.h lays it out.
std::string daemon_socket_path(const std::string& cluster, uint32_t node);

}  // namespace ulnic
