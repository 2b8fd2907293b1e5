// Native AM's staging memory (transport_native.cpp): the registered area a
// process's messages are copied into for the NIC to send from.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace ulnic::am {

// Staging memory: a ring over the registered area, taken in posting order
// at the head and given back when the NIC completes the send. Completions
// may come out of order (a send refused for a full ring is posted again
// later): a span given back frees room once every span before it is back
// too. A span that does not fit before the area's end starts at 0 and takes
// the end's rest with it. No allocation per send (the first-fit std::map it
// replaces was two or three node allocations per request, issue 19).
class StagingRing {
 public:
  explicit StagingRing(size_t size) : size_(size) {}

  // Takes `bytes` (rounded up to 64); false if they do not fit now. `ticket`
  // names the span for give().
  bool take(size_t bytes, size_t& offset, uint64_t& ticket) {
    bytes = (bytes + 63) & ~size_t(63);
    if (count_ == 0) head_ = tail_ = 0;  // empty: the whole area, from its start
    size_t at;
    if (count_ && head_ <= tail_) {  // the free room is [head, tail) (none if equal)
      if (tail_ - head_ < bytes) return false;
      at = head_;
    } else if (size_ - head_ >= bytes) {  // the free room is [head, size) and [0, tail)
      at = head_;
    } else if (tail_ >= bytes) {
      at = 0;
    } else {
      return false;
    }
    if (count_ == recs_.size()) grow();
    ticket = first_ + count_;
    recs_[ticket % recs_.size()] = Span{head_, false};
    ++count_;
    head_ = at + bytes;
    offset = at;
    return true;
  }

  void give(uint64_t ticket) {
    if (ticket - first_ >= count_) return;  // not a live span
    recs_[ticket % recs_.size()].done = true;
    while (count_ && recs_[first_ % recs_.size()].done) {
      ++first_;
      --count_;
    }
    tail_ = count_ ? recs_[first_ % recs_.size()].start : head_;
  }

 private:
  struct Span {
    size_t start;  // where its room begins (before its offset when it wrapped)
    bool done;
  };
  void grow() {
    std::vector<Span> bigger(recs_.empty() ? 256 : 2 * recs_.size());
    for (uint64_t t = first_; t != first_ + count_; ++t) bigger[t % bigger.size()] = recs_[t % recs_.size()];
    recs_.swap(bigger);
  }

  size_t size_;
  size_t head_ = 0, tail_ = 0;  // the next span's start; the oldest live span's start
  std::vector<Span> recs_;      // live spans, oldest first, by ticket
  uint64_t first_ = 0;          // the oldest live span's ticket
  size_t count_ = 0;
};

}  // namespace ulnic::am
