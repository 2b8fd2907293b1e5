// Single-producer single-consumer rings in shared memory (DESIGN §7).
//
// Layout: a RingControl (two index words on separate cache lines) plus an
// array of `capacity` fixed-size entries, capacity a power of two. Indices
// count up forever (mod 2^32) and are masked on use. The producer is the only
// writer of `tail` and of the entries in [head, tail); the consumer is the
// only writer of `head`. No read-modify-write ever touches a shared word: a
// TCG guest executes AMOs non-atomically with respect to other processes.
//
// Each side keeps a private copy of its own index and never trusts the other
// side's: an index that implies more than `capacity` entries in flight marks
// the ring corrupt, and every later operation refuses to run.
//
// Ordering uses the compiler's __atomic builtins with acquire/release only
// (plain loads and stores plus fences on both x86-64 and RV64: `fence rw,w`
// before a release store, `fence r,rw` after an acquire load), so the same
// code runs in the freestanding firmware and the host library.
#pragma once

#include "ulnic/abi/types.h"

namespace ulnic::abi {

struct RingControl {
  uint32_t tail;        // written by the producer only: entries published
  uint32_t pad0[15];
  uint32_t head;        // written by the consumer only: entries consumed
  uint32_t pad1[15];
};
ULNIC_ABI_CHECK_SIZE(RingControl, 128);
ULNIC_ABI_CHECK_OFFSET(RingControl, head, 64);

constexpr bool is_ring_capacity(uint32_t capacity) {
  return capacity >= 2 && capacity <= (1u << 24) && (capacity & (capacity - 1)) == 0;
}

namespace ring_detail {
inline uint32_t load_acquire(const uint32_t* p) { return __atomic_load_n(p, __ATOMIC_ACQUIRE); }
inline void store_release(uint32_t* p, uint32_t v) { __atomic_store_n(p, v, __ATOMIC_RELEASE); }
}  // namespace ring_detail

// Bytes a ring of `capacity` T entries takes in shared memory (control + entries).
template <class T>
constexpr uint64_t ring_bytes(uint32_t capacity) {
  return sizeof(RingControl) + uint64_t(capacity) * sizeof(T);
}

// Producer side. T is the entry type (trivially copyable, fixed size).
template <class T>
class RingProducer {
 public:
  RingProducer() = default;
  // `shared_ctl` and `shared_entries` point into shared memory. Returns false
  // (and stays unusable) if capacity is not a power of two in range.
  bool attach(RingControl* shared_ctl, T* shared_entries, uint32_t capacity) {
    if (!is_ring_capacity(capacity)) return false;
    shared_ctl_ = shared_ctl;
    shared_entries_ = shared_entries;
    capacity_ = capacity;
    tail_ = __atomic_load_n(&shared_ctl->tail, __ATOMIC_RELAXED);
    head_cache_ = ring_detail::load_acquire(&shared_ctl->head);
    corrupt_ = tail_ - head_cache_ > capacity_;
    return !corrupt_;
  }

  bool corrupt() const { return corrupt_; }
  uint32_t capacity() const { return capacity_; }

  // Free entries, refreshing the consumer's head if the cached value shows
  // fewer than `want` (the default refreshes only when the ring looks full).
  uint32_t free_space(uint32_t want = 1) {
    if (corrupt_ || !shared_ctl_) return 0;
    uint32_t used = tail_ - head_cache_;
    if (capacity_ - used < want) {
      // Pairs with the consumer's release of head after it finished reading.
      uint32_t head = ring_detail::load_acquire(&shared_ctl_->head);
      if (tail_ - head > capacity_) {  // head ahead of tail or too far behind
        corrupt_ = true;
        return 0;
      }
      head_cache_ = head;
      used = tail_ - head;
    }
    return capacity_ - used;
  }

  // The next entry to fill, or nullptr if the ring is full or corrupt. The
  // entry becomes visible to the consumer only at publish().
  T* reserve() {
    if (free_space() == 0) return nullptr;
    return &shared_entries_[tail_ & (capacity_ - 1)];
  }

  // reserve() without its check, for a burst whose caller took
  // free_space() once for all of its entries.
  T* reserve_unchecked() { return &shared_entries_[tail_ & (capacity_ - 1)]; }

  // Publishes every reserved-and-filled entry so far (one per reserve()).
  void push() { ++tail_; }
  void publish() {
    // Release: the consumer reads entries only after it sees this tail.
    ring_detail::store_release(&shared_ctl_->tail, tail_);
  }

  uint32_t tail() const { return tail_; }

 private:
  RingControl* shared_ctl_ = nullptr;
  T* shared_entries_ = nullptr;
  uint32_t capacity_ = 0;
  uint32_t tail_ = 0;        // private copy of our index
  uint32_t head_cache_ = 0;  // last head seen from the consumer
  bool corrupt_ = false;
};

// Consumer side.
template <class T>
class RingConsumer {
 public:
  RingConsumer() = default;
  bool attach(RingControl* shared_ctl, T* shared_entries, uint32_t capacity) {
    if (!is_ring_capacity(capacity)) return false;
    shared_ctl_ = shared_ctl;
    shared_entries_ = shared_entries;
    capacity_ = capacity;
    head_ = __atomic_load_n(&shared_ctl->head, __ATOMIC_RELAXED);
    tail_cache_ = head_;
    corrupt_ = false;
    return true;
  }

  bool corrupt() const { return corrupt_; }
  uint32_t capacity() const { return capacity_; }

  // Entries ready to read, refreshing the producer's tail when none are cached.
  uint32_t available() {
    if (corrupt_ || !shared_ctl_) return 0;
    if (tail_cache_ == head_) {
      // Acquire pairs with the producer's release: entries below the tail we
      // read are complete.
      uint32_t tail = ring_detail::load_acquire(&shared_ctl_->tail);
      if (tail - head_ > capacity_) {  // wild tail from a buggy or hostile producer
        corrupt_ = true;
        return 0;
      }
      tail_cache_ = tail;
    }
    return tail_cache_ - head_;
  }

  // Has the producer published entries this consumer has not released yet?
  // Reads only the two shared indices and changes nothing, so a thread that
  // is not the consumer may ask while the consumer works (a sleeper's
  // "anything to do?"); available() may not be called that way.
  bool published() const {
    if (!shared_ctl_) return false;
    uint32_t head = ring_detail::load_acquire(&shared_ctl_->head);
    uint32_t tail = ring_detail::load_acquire(&shared_ctl_->tail);
    return tail != head && tail - head <= capacity_;
  }

  // The oldest unread entry, or nullptr. Stays valid until pop()+release().
  const T* peek() { return available() == 0 ? nullptr : front(); }
  // The same, for a consumer that takes a batch: only after available()
  // counted it.
  const T* front() const { return &shared_entries_[head_ & (capacity_ - 1)]; }

  void pop() { ++head_; }
  void release() {
    // Release: the producer may overwrite the entries we read only after it
    // sees this head.
    ring_detail::store_release(&shared_ctl_->head, head_);
  }

  uint32_t head() const { return head_; }
  // The head as last released: any thread may ask.
  uint32_t released() const { return shared_ctl_ ? ring_detail::load_acquire(&shared_ctl_->head) : 0; }

 private:
  RingControl* shared_ctl_ = nullptr;
  const T* shared_entries_ = nullptr;
  uint32_t capacity_ = 0;
  uint32_t head_ = 0;        // private copy of our index
  uint32_t tail_cache_ = 0;  // last tail seen from the producer
  bool corrupt_ = false;
};

}  // namespace ulnic::abi
