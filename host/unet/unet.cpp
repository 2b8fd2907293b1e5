// U-Net on libulnic (include/unet.h, shared/include/ulnic/abi/unet.h): an
// endpoint is a Nic (one slot) with a segment and a queue area registered
// in it and configured with kOpUnetEndpoint; channels come from the node
// daemon; sends are kOpUnetSend* descriptors on the slot's SQ; the receive
// and free queues are rings in the queue area, one writer per word.
#include "unet.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <deque>
#include <memory>
#include <unordered_map>
#include <vector>

#include "ulnic/abi/unet.h"
#include "ulnic/nic.h"

namespace ulnic::unet {
namespace {

namespace abi = ::ulnic::abi;
using Clock = std::chrono::steady_clock;

constexpr size_t kDefaultSegment = 1u << 20;
constexpr uint32_t kDefaultEntries = 64;
constexpr size_t kDefaultPinLimit = 1u << 20;
constexpr uint64_t kPage = abi::kUnetPage;
static_assert(UNET_PAGE == abi::kUnetPage && UNET_MM_PIN_MIN >= 2 * abi::kUnetMaxPages * abi::kUnetPage);

bool power_of_two(uint32_t n) { return n && !(n & (n - 1)); }

int from_cq(uint16_t status) {
  switch (status) {
    case abi::kCqOk: return UNET_OK;
    case abi::kCqUnetBadChannel: case abi::kCqUnetNoEndpoint: return UNET_ERR_BAD_CHANNEL;
    case abi::kCqUnreachable: case abi::kCqBadSlot: return UNET_ERR_UNREACHABLE;
    case abi::kCqBadLength: case abi::kCqBadOpcode: case abi::kCqBadAddress: return UNET_ERR_BAD_ARG;
    default: return UNET_ERR_NIC;
  }
}

// Milliseconds left until `deadline` (rounded up), Nic::kNoTimeout for none, 0 when past.
std::chrono::milliseconds left(int timeout_ms, Clock::time_point deadline) {
  if (timeout_ms < 0) return Nic::kNoTimeout;
  auto l = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now());
  return l.count() > 0 ? l : std::chrono::milliseconds(0);
}

}  // namespace

class Endpoint {
 public:
  static int create(const unet_attr* attr, std::unique_ptr<Endpoint>& out);
  unet_addr addr() const { return {nic_->node(), nic_->slot()}; }
  uint8_t* segment(size_t* bytes) const {
    if (bytes) *bytes = seg_len_;
    return seg_;
  }
  int channel(const abi::OwnerRequest& q, unet_channel* out);
  int send(unet_channel ch, uint8_t opcode, uint64_t offset, const void* data, size_t length);
  int send_wait(int timeout_ms);
  uint32_t send_pending() const { return nic_->in_flight(); }
  int free_push(size_t offset, size_t length);
  uint32_t free_count() const { return uint32_t(free_next_ - load(nic_words().free_taken)); }
  int recv(unet_rx_desc* out);
  int recv_wait(unet_rx_desc* out, int timeout_ms);
  bool ready();
  int dispatch(int timeout_ms);
  void set_upcall(unet_upcall_fn fn, void* arg) { upcall_ = fn, upcall_arg_ = arg; }
  void stats(unet_stats* out) const;
  ~Endpoint();

 private:
  // ---- U-Net/MM (abi/unet.h): the pages of the segment the NIC can reach
  struct Pinned {
    uint64_t frame;  // slot offset
    uint64_t used;   // LRU stamp
  };
  struct Posted {    // a send in flight: its serial (user_data), its number, its pages
    uint32_t serial;
    uint64_t number;
    uint64_t first, last;
  };
  struct Dying {     // the frame of an evicted page
    uint64_t fills;  // freed once the NIC has carried out this many fills (its unmap)
    uint64_t sends;  // ... and every send posted before the unmap has completed
    uint64_t frame;  // (a send that started before the unmap still reads it)
  };
  struct Buffer {    // a free-queue entry, in the order pushed
    uint64_t first, last;  // its pages
    uint64_t map_last;     // ... of which a message can fill these (UNET_MESSAGE_MAX)
  };
  abi::UnetMmWords& mm_words() const {
    return *reinterpret_cast<abi::UnetMmWords*>(area_ + abi::unet_mm_words_offset(rx_entries_, free_entries_));
  }
  abi::UnetTlbFill* fill_ring() const {
    return reinterpret_cast<abi::UnetTlbFill*>(area_ + abi::unet_fill_ring_offset(rx_entries_, free_entries_));
  }
  uint64_t vpage(uint64_t offset) const { return (reinterpret_cast<uintptr_t>(seg_) + offset) / kPage; }
  void completed(const abi::CqEntry& c);  // a send's completion (its pages are free again)
  void on_miss(uint64_t page, uint32_t serial);
  // Pins the pages [first, last] not pinned yet (making room in one batch
  // if at the limit) and gives the NIC their frames; gives it `refill`'s
  // again if that one is pinned already. `waiting`: the serial of the send
  // that waits for them (0: none); `before`: free-queue positions (in
  // buffers_) whose pages may not go for them. False if not all could be.
  bool map_range(uint64_t first, uint64_t last, uint32_t waiting, size_t before, uint64_t refill);
  bool evict(size_t need, uint32_t waiting, size_t before, uint64_t keep_first, uint64_t keep_last);
  bool in_use(uint64_t page, uint32_t waiting) const;
  size_t buffers_taken() const { return size_t(std::min<uint64_t>(load(nic_words().free_taken) - buffers_popped_, buffers_.size())); }
  void map_ahead();  // maps the free queue's buffers, the next one first
  bool post_fill(uint64_t page, uint64_t frame);  // false: the NIC takes no fills (gone)
  void publish_fills();
  void reap_frames();
  bool wait_fills(uint64_t upto);
  void retry_misses();

  bool mm_ = false;
  size_t pin_limit_ = 0;  // pages
  std::unordered_map<uint64_t, Pinned> pinned_;
  uint64_t clock_ = 0;
  std::deque<Posted> posted_;
  std::deque<Buffer> buffers_;   // pushed, not yet back in a descriptor
  uint64_t buffers_popped_ = 0;  // free-queue entries whose buffer came back
  uint64_t fills_next_ = 0;      // fill-ring entries written
  uint64_t fills_published_ = 0; // ... and handed to the NIC (mirrors fills_produced)
  std::deque<Dying> dying_;
  uint32_t serial_ = 0;
  uint64_t sends_posted_ = 0;  // segment sends posted (Posted.number)
  std::vector<std::pair<uint64_t, uint32_t>> misses_;  // misses that found no room yet: page, serial
  uint64_t pins_ = 0, refills_ = 0, evictions_ = 0;
  static uint64_t load(const uint64_t& w) { return std::atomic_ref<const uint64_t>(w).load(std::memory_order_acquire); }
  abi::UnetHostWords& host_words() const { return *reinterpret_cast<abi::UnetHostWords*>(area_); }
  const abi::UnetNicWords& nic_words() const { return *reinterpret_cast<const abi::UnetNicWords*>(area_ + 64); }
  abi::UnetRxDesc* rx_queue() const { return reinterpret_cast<abi::UnetRxDesc*>(area_ + 128); }
  abi::UnetFreeDesc* free_queue() const { return reinterpret_cast<abi::UnetFreeDesc*>(area_ + 128 + rx_entries_ * 64); }
  void reap();                 // send completions and arrival events taken from the slot's rings
  int await(std::chrono::milliseconds limit);  // waits for the NIC to move on, then reaps
  bool take(unet_rx_desc* out);  // the next delivered descriptor, if any

  std::unique_ptr<Nic> nic_;
  uint8_t* seg_ = nullptr;
  size_t seg_len_ = 0;
  uint8_t* area_ = nullptr;
  uint32_t rx_entries_ = 0, free_entries_ = 0;
  uint64_t rx_next_ = 0;       // receive descriptors taken (mirrors rx_consumed)
  uint64_t free_next_ = 0;     // free-queue entries pushed (mirrors free_produced)
  int send_error_ = UNET_OK;   // the first failed send since the last send_wait
  unet_upcall_fn upcall_ = nullptr;
  void* upcall_arg_ = nullptr;
};

int Endpoint::create(const unet_attr* attr, std::unique_ptr<Endpoint>& out) {
  unet_attr a{};
  a.node = -1;
  if (attr) a = *attr;
  const bool mm = a.segment != nullptr;
  if (!a.segment_bytes) a.segment_bytes = kDefaultSegment;
  if (!a.rx_entries) a.rx_entries = kDefaultEntries;
  if (!a.free_entries) a.free_entries = kDefaultEntries;
  if (!a.pin_limit_bytes) a.pin_limit_bytes = kDefaultPinLimit;
  if (!power_of_two(a.rx_entries) || !power_of_two(a.free_entries) || a.rx_entries > UNET_QUEUE_MAX ||
      a.free_entries > UNET_QUEUE_MAX || a.segment_bytes > 0xffffffffu ||
      (mm && (a.pin_limit_bytes < UNET_MM_PIN_MIN ||
              reinterpret_cast<uintptr_t>(a.segment) + a.segment_bytes < reinterpret_cast<uintptr_t>(a.segment))))
    return UNET_ERR_BAD_ARG;
  NicOptions o;
  if (a.cluster) o.cluster = a.cluster;
  o.node = a.node;
  auto nic = Nic::open(o);
  if (!nic) return UNET_ERR_NIC;
  std::unique_ptr<Endpoint> ep(new Endpoint());
  ep->nic_ = std::move(*nic);
  const size_t area_len = mm ? abi::unet_mm_area_bytes(a.rx_entries, a.free_entries)
                             : abi::unet_area_bytes(a.rx_entries, a.free_entries);
  ep->seg_ = mm ? static_cast<uint8_t*>(a.segment) : static_cast<uint8_t*>(ep->nic_->alloc(a.segment_bytes, 4096));
  ep->area_ = static_cast<uint8_t*>(ep->nic_->alloc(area_len, 64));
  if (!ep->seg_ || !ep->area_) return UNET_ERR_RESOURCE;
  std::memset(ep->area_, 0, area_len);
  abi::SqEntry e{};
  if (!mm) {
    auto seg = ep->nic_->register_memory(ep->seg_, a.segment_bytes, abi::kAccessLocal | abi::kAccessRemoteWrite);
    if (!seg) return UNET_ERR_RESOURCE;
    e.dst_key = seg->key;
  }
  auto area = ep->nic_->register_memory(ep->area_, area_len, abi::kAccessLocal);
  if (!area) return UNET_ERR_RESOURCE;
  e.opcode = abi::kOpUnetEndpoint;
  e.flags = mm ? abi::kSqUnetMm : 0;
  e.src_key = area->key;
  e.src_addr = reinterpret_cast<uint64_t>(ep->area_);
  e.length = a.rx_entries;
  e.access = a.free_entries;
  e.dst_addr = reinterpret_cast<uint64_t>(ep->seg_);
  e.reg_offset = a.segment_bytes;
  auto r = ep->nic_->run(e);
  if (!r || r->status != abi::kCqOk) return UNET_ERR_NIC;
  ep->seg_len_ = a.segment_bytes;
  ep->rx_entries_ = a.rx_entries;
  ep->free_entries_ = a.free_entries;
  ep->mm_ = mm;
  ep->pin_limit_ = a.pin_limit_bytes / kPage;
  out = std::move(ep);
  return UNET_OK;
}

Endpoint::~Endpoint() {
  if (!mm_ || !nic_) return;
  // The NIC forgets the endpoint, then every pinned page goes back to
  // ordinary memory (the slot is about to go: its pages must not stay
  // mapped under the application's segment).
  abi::SqEntry e{};
  e.opcode = abi::kOpUnetEndpoint;
  e.flags = abi::kSqUnetClose;
  (void)nic_->run(e);
  for (const auto& [page, p] : pinned_) (void)nic_->unpin_pages(reinterpret_cast<void*>(page * kPage), kPage);
  for (const Dying& d : dying_) nic_->free(nic_->slot_base() + d.frame);
}

// ---- U-Net/MM

// Writes a fill; publish_fills hands the NIC every fill written (one index
// store and at most one doorbell for a batch: a NIC that saw half of a
// send's pages would post a miss for the next one).
bool Endpoint::post_fill(uint64_t page, uint64_t frame) {
  // The ring has room once the NIC has carried out all but its last entries.
  if (fills_next_ - load(mm_words().fills_taken) >= abi::kUnetFillEntries && !wait_fills(fills_next_ - abi::kUnetFillEntries + 1))
    return false;
  fill_ring()[fills_next_ & (abi::kUnetFillEntries - 1)] = abi::UnetTlbFill{page, frame};
  ++fills_next_;
  return true;
}

void Endpoint::publish_fills() {
  if (fills_published_ == fills_next_) return;
  // Release: the entries before the index the NIC reads them by.
  std::atomic_ref<uint64_t>(host_words().fills_produced).store(fills_published_ = fills_next_, std::memory_order_release);
  nic_->ring_if_dormant();
}

// Until the NIC has carried out the fills before `upto` (it takes them at
// every look at the slot; ringing wakes one that sleeps). False if it does
// not within 10 s of the NIC's running time (a NIC gone: the slot is cut
// off or the node died; ulnic::NicDeadline).
bool Endpoint::wait_fills(uint64_t upto) {
  publish_fills();
  const ulnic::NicDeadline deadline(*nic_, std::chrono::seconds(10));
  for (uint32_t n = 0; load(mm_words().fills_taken) < upto; ++n) {
    if (nic_->state() != abi::SlotState::kActive || deadline.passed()) return false;
    if (n % 64 == 63) nic_->ring_if_dormant();
    deadline.back_off();  // the NIC's vCPU may want this core
  }
  return true;
}

// A page the NIC may be using now: one of a send that has started (every
// send posted before `waiting`, the send a miss holds at the head of the SQ;
// with waiting 0 every send in flight), or of a buffer the NIC has taken
// from the free queue and not yet given back in a descriptor.
bool Endpoint::in_use(uint64_t page, uint32_t waiting) const {
  for (const Posted& p : posted_) {
    if (waiting && p.serial == waiting) break;  // it and those after it have not started
    if (page >= p.first && page <= p.last) return true;
  }
  const size_t taken = buffers_taken();
  for (size_t i = 0; i < taken; ++i)
    if (page >= buffers_[i].first && page <= buffers_[i].last) return true;
  return false;
}

// Makes room for `need` more pages (at most). Which pages go: those nobody
// uses, the least recently used first; then those only buffers from
// position `before` on use, the one last in the free queue first (the NIC
// takes buffers in order: the next ones must stay mapped, and a pushed
// buffer never pushes out those before it); never [keep_first, keep_last].
// One batch: the NIC carries out all the unmaps (after them no packet is
// placed in those frames and no send starts from them), then the pages go
// back. False if no page could go.
bool Endpoint::evict(size_t need, uint32_t waiting, size_t before, uint64_t keep_first, uint64_t keep_last) {
  std::vector<std::pair<uint64_t, uint64_t>> victims;  // (key, page); free pages: their LRU stamp, buffer pages:
  for (const auto& [page, pin] : pinned_) {             // 2^63 + (2^32 - the last position that uses them)
    if (page >= keep_first && page <= keep_last) continue;
    size_t first_pos = SIZE_MAX, last_pos = 0;
    for (size_t i = 0; i < buffers_.size(); ++i)
      if (page >= buffers_[i].first && page <= buffers_[i].last) first_pos = std::min(first_pos, i), last_pos = i;
    uint64_t key = pin.used;
    if (first_pos != SIZE_MAX) {
      if (first_pos < before) continue;
      key = (1ull << 63) + ((1ull << 32) - last_pos);
    }
    if (!in_use(page, waiting)) victims.emplace_back(key, page);
  }
  if (victims.empty()) return false;
  need = std::min(need, victims.size());
  std::partial_sort(victims.begin(), victims.begin() + std::ptrdiff_t(need), victims.end());
  bool buffer_pages = false;
  for (size_t i = 0; i < need; ++i) {
    if (!post_fill(victims[i].second, abi::kUnetUnmap)) return false;
    buffer_pages |= victims[i].first >> 63;
  }
  // A buffer's page may be written by the NIC until it has carried out the
  // unmap (a buffer it takes meanwhile): its bytes go back only after that.
  // Any other page the NIC only reads (a send), so it goes back now; its
  // frame stays as it is until reap_frames finds no send that may read it.
  if (buffer_pages ? !wait_fills(fills_next_) : (publish_fills(), false)) return false;
  // Back a run of adjacent pages at a time (one mremap: a TLB flush each).
  std::vector<uint64_t> pages;
  for (size_t i = 0; i < need; ++i) pages.push_back(victims[i].second);
  std::sort(pages.begin(), pages.end());
  for (size_t i = 0; i < pages.size();) {
    size_t n = 1;
    while (i + n < pages.size() && pages[i + n] == pages[i] + n) ++n;
    (void)nic_->unpin_pages(reinterpret_cast<void*>(pages[i] * kPage), n * kPage, true);
    for (size_t k = i; k < i + n; ++k) {
      dying_.push_back(Dying{fills_next_, sends_posted_, pinned_[pages[k]].frame});
      pinned_.erase(pages[k]);
      ++evictions_;
    }
    i += n;
  }
  reap_frames();
  return true;
}

// Frees the frames of evicted pages once the NIC can no longer touch them:
// it has carried out their unmaps (no packet is placed there, no send starts
// from them after), and every send posted before an unmap has completed (a
// send the NIC started before it holds the frame's address, and its
// retransmissions read it until the send completes; which sends had
// started, the library cannot know exactly).
void Endpoint::reap_frames() {
  const uint64_t taken = load(mm_words().fills_taken);
  const uint64_t oldest = posted_.empty() ? sends_posted_ + 1 : posted_.front().number;
  for (auto it = dying_.begin(); it != dying_.end();)
    if (it->fills <= taken && it->sends < oldest) {
      nic_->free(nic_->slot_base() + it->frame);
      it = dying_.erase(it);
    } else {
      ++it;
    }
}

bool Endpoint::map_range(uint64_t first, uint64_t last, uint32_t waiting, size_t before, uint64_t refill) {
  size_t missing = 0;
  for (uint64_t p = first; p <= last; ++p)
    if (auto it = pinned_.find(p); it != pinned_.end()) {
      it->second.used = ++clock_;
      if (p == refill) {  // still pinned: the NIC's TLB lost it (another page took its entry)
        ++refills_;
        if (!post_fill(p, it->second.frame)) return false;
        publish_fills();
      }
    } else {
      ++missing;
    }
  if (!missing) return true;
  if (pinned_.size() + missing > pin_limit_) (void)evict(pinned_.size() + missing - pin_limit_, waiting, before, first, last);
  // Pinned a run of adjacent missing pages at a time (one mmap each).
  bool all = true;
  for (uint64_t p = first; p <= last && all;) {
    if (pinned_.count(p)) {
      ++p;
      continue;
    }
    uint64_t n = 0;
    while (p + n <= last && !pinned_.count(p + n) && pinned_.size() + n < pin_limit_) ++n;
    if (n == 0) break;  // at the limit: no room was made
    auto frames = nic_->pin_pages(reinterpret_cast<void*>(p * kPage), n * kPage);
    if (!frames) break;
    for (uint64_t k = 0; k < n; ++k) {
      pinned_[p + k] = Pinned{(*frames)[k], ++clock_};
      ++pins_;
      all &= post_fill(p + k, (*frames)[k]);
    }
    p += n;
  }
  publish_fills();
  for (uint64_t p = first; p <= last; ++p) all &= pinned_.count(p) == 1;
  return all;
}

void Endpoint::map_ahead() {
  for (size_t k = 0; k < buffers_.size(); ++k)
    if (!map_range(buffers_[k].first, buffers_[k].map_last, 0, k, ~0ull)) return;
}

void Endpoint::on_miss(uint64_t page, uint32_t serial) {
  const uint64_t first = vpage(0), last = vpage(seg_len_ - 1);
  if (page < first || page > last) return;  // not ours to map (the NIC checks it too)
  if (!serial) return map_ahead();  // a message dropped: its buffer comes back, and is mapped as it is pushed
  uint64_t keep_first = page, keep_last = page;
  for (const Posted& p : posted_)
    if (p.serial == serial) keep_first = p.first, keep_last = p.last;
  // The NIC names the first page it missed; the send's other pages go now
  // too, or each would cost a round trip of its own (NIC, event, library).
  // Any buffer the NIC has not taken may give way (the last in the queue first).
  if (!map_range(keep_first, keep_last, serial, buffers_taken(), page)) {
    misses_.emplace_back(page, serial);
    return;
  }
  // The sends posted after it, in order, as far as room can be made without
  // unmapping a page of an earlier one (or of a buffer): each would miss in
  // turn, a round trip through this process each time.
  bool after = false;
  for (const Posted& p : posted_) {
    if (after && !map_range(p.first, p.last, p.serial, buffers_.size(), ~0ull)) break;
    after |= p.serial == serial;
  }
}

// Misses that found no room: pages free up as sends complete and the
// application consumes descriptors.
void Endpoint::retry_misses() {
  if (misses_.empty()) return;
  auto waiting = std::move(misses_);
  misses_.clear();
  for (const auto& [page, serial] : waiting)
    if (!pinned_.count(page)) on_miss(page, serial);
}

void Endpoint::completed(const abi::CqEntry& c) {
  if (c.status != abi::kCqOk && send_error_ == UNET_OK) send_error_ = from_cq(c.status);
  if (!mm_) return;
  for (auto it = posted_.begin(); it != posted_.end(); ++it)
    if (it->serial == uint32_t(c.user_data)) {
      posted_.erase(it);
      break;
    }
}

int Endpoint::channel(const abi::OwnerRequest& q, unet_channel* out) {
  auto r = nic_->call_daemon(q);
  if (!r) return UNET_ERR_NIC;
  switch (r->status) {
    case abi::kVmmcOk:
      if (out) *out = r->handle;
      return UNET_OK;
    case abi::kUnetTagTaken: return UNET_ERR_TAG_IN_USE;
    case abi::kUnetNoChannel: return UNET_ERR_BAD_CHANNEL;
    case abi::kVmmcNoResources: return UNET_ERR_RESOURCE;
    case abi::kVmmcBadRequest: return UNET_ERR_BAD_ARG;
    default: return UNET_ERR_NIC;
  }
}

void Endpoint::reap() {
  abi::CqEntry c;
  while (nic_->poll(c)) completed(c);
  abi::EqEntry ev;
  while (nic_->poll_event(ev))  // arrivals: wake-ups only, the receive queue says what came
    if (mm_ && ev.type == abi::kEqUnetTlbMiss) on_miss(ev.offset, ev.export_handle);
  if (mm_) retry_misses(), reap_frames();
}

// Waits up to `limit` for the NIC to move on -- a send's completion; with
// U-Net/MM any event, since a send may wait at the head of the queue for a
// page the library must map -- and takes what came. UNET_ERR_NIC: the slot
// is gone; UNET_ERR_TIMEOUT: nothing came; UNET_OK otherwise.
int Endpoint::await(std::chrono::milliseconds limit) {
  if (mm_) {
    if (!nic_->wait_ready(limit, std::chrono::microseconds(0), abi::kWaitAll) &&
        nic_->state() != abi::SlotState::kActive)
      return UNET_ERR_NIC;
    reap();
    return UNET_OK;
  }
  auto c = nic_->wait(limit);
  if (!c) return nic_->state() == abi::SlotState::kActive ? UNET_ERR_TIMEOUT : UNET_ERR_NIC;
  completed(*c);
  return UNET_OK;
}

int Endpoint::send(unet_channel ch, uint8_t opcode, uint64_t offset, const void* data, size_t length) {
  if (length == 0 || length > (data ? UNET_SEND_INLINE_MAX : UNET_MESSAGE_MAX)) return UNET_ERR_BAD_ARG;
  if (!data && (offset > seg_len_ || length > seg_len_ - offset)) return UNET_ERR_BAD_ARG;
  abi::SqEntry e{};
  e.opcode = opcode;
  e.dst_key = ch;
  e.length = uint32_t(length);
  e.src_addr = data ? 0 : offset;
  if (mm_) {
    while (++serial_ == 0) {
    }
    e.user_data = serial_;  // a miss names the send it holds (kEqUnetTlbMiss)
  }
  // A full send queue: wait for sends to leave (the receive side drops,
  // the send side waits, as U-Net's send queue does), for up to 30 s of the
  // NIC's running time (ulnic::NicDeadline).
  const ulnic::NicDeadline deadline(*nic_, std::chrono::milliseconds(30000));
  for (;;) {
    reap();
    if (nic_->post(e, data, data ? length : 0)) break;
    const int rc = await(deadline.sleep_slice());
    if (rc == UNET_ERR_NIC || (rc != UNET_OK && deadline.passed())) return UNET_ERR_NIC;
  }
  if (mm_ && !data) posted_.push_back(Posted{serial_, ++sends_posted_, vpage(offset), vpage(offset + length - 1)});
  return UNET_OK;
}

int Endpoint::send_wait(int timeout_ms) {
  const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms < 0 ? 0 : timeout_ms);
  reap();
  while (nic_->in_flight()) {
    auto l = left(timeout_ms, deadline);
    if (l.count() == 0) return UNET_ERR_TIMEOUT;
    if (int st = await(l); st != UNET_OK) return st;
  }
  const int st = send_error_;
  send_error_ = UNET_OK;
  return st;
}

int Endpoint::free_push(size_t offset, size_t length) {
  if (length == 0 || offset > seg_len_ || length > seg_len_ - offset) return UNET_ERR_BAD_ARG;
  if (free_count() >= free_entries_) return UNET_ERR_FULL;
  if (mm_) {
    // Its pages mapped ahead of the messages (a message cannot wait for a
    // miss); where no room can be made now the NIC drops into it and asks.
    reap();
    const uint64_t first = vpage(offset), last = vpage(offset + std::min<size_t>(length, UNET_MESSAGE_MAX) - 1);
    const size_t pos = buffers_.size();
    buffers_.push_back(Buffer{first, vpage(offset + length - 1), last});
    (void)map_range(first, last, 0, pos, ~0ull);
  }
  free_queue()[free_next_ & (free_entries_ - 1)] = abi::UnetFreeDesc{uint32_t(offset), uint32_t(length)};
  // Release: the entry before the index the NIC reads it by.
  std::atomic_ref<uint64_t>(host_words().free_produced).store(++free_next_, std::memory_order_release);
  return UNET_OK;
}

bool Endpoint::take(unet_rx_desc* out) {
  for (;;) {
    abi::UnetRxDesc& d = rx_queue()[rx_next_ & (rx_entries_ - 1)];
    if (std::atomic_ref<uint32_t>(d.seq).load(std::memory_order_acquire) != uint32_t(rx_next_ + 1)) return false;
    abi::UnetRxDesc copy = d;
    // Release: we are done reading the descriptor before the NIC may reuse it.
    std::atomic_ref<uint64_t>(host_words().rx_consumed).store(++rx_next_, std::memory_order_release);
    if (mm_ && copy.buf_len && !buffers_.empty()) {
      // The oldest buffer the NIC took is back (it takes them in order, and
      // publishes their descriptors in that order): its pages may serve the
      // buffers after it.
      buffers_.pop_front();
      ++buffers_popped_;
      map_ahead();
    }
    if (copy.flags & abi::kUnetRxDropped) {
      // A buffer given back unused (the message did not fit): on the free
      // queue again, where the NIC took it from (it has room for it).
      if (copy.buf_len) (void)free_push(copy.offset, copy.buf_len);
      continue;
    }
    *out = unet_rx_desc{};
    out->channel = copy.channel;
    out->length = copy.length;
    if (copy.flags & abi::kUnetRxInline) {
      out->flags = UNET_RX_INLINE;
      std::memcpy(out->inline_data, copy.data, copy.length <= UNET_INLINE_MAX ? copy.length : UNET_INLINE_MAX);
      out->data = out->inline_data;
    } else {
      out->offset = copy.offset;
      out->buf_len = copy.buf_len;
      out->data = seg_ + copy.offset;
    }
    return true;
  }
}

int Endpoint::recv(unet_rx_desc* out) {
  reap();
  const bool found = take(out);
  nic_->poll_found(found, Nic::kTightBlock, abi::kWaitEvents);  // a program spinning here yields to its NIC
  return found ? UNET_OK : UNET_ERR_EMPTY;
}

int Endpoint::recv_wait(unet_rx_desc* out, int timeout_ms) {
  const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms < 0 ? 0 : timeout_ms);
  for (;;) {
    reap();
    if (take(out)) return UNET_OK;
    auto l = left(timeout_ms, deadline);
    if (l.count() == 0) return UNET_ERR_TIMEOUT;
    if (auto r = nic_->wait_ready(l, std::chrono::microseconds(0), abi::kWaitEvents);
        !r && nic_->state() != abi::SlotState::kActive)
      return UNET_ERR_NIC;
  }
}

bool Endpoint::ready() {
  reap();
  const abi::UnetRxDesc& d = rx_queue()[rx_next_ & (rx_entries_ - 1)];
  return std::atomic_ref<const uint32_t>(d.seq).load(std::memory_order_acquire) == uint32_t(rx_next_ + 1);
}

int Endpoint::dispatch(int timeout_ms) {
  if (!upcall_) return -UNET_ERR_BAD_ARG;
  unet_rx_desc d;
  int st = recv_wait(&d, timeout_ms);
  if (st == UNET_ERR_TIMEOUT) return 0;
  if (st != UNET_OK) return -st;
  int n = 0;
  do {
    upcall_(reinterpret_cast<unet_endpoint*>(this), &d, upcall_arg_);
    ++n;
  } while (take(&d));
  return n;
}

void Endpoint::stats(unet_stats* out) const {
  const abi::UnetNicWords& w = nic_words();
  out->delivered = load(w.delivered);
  out->drops_rx_full = load(w.drops_rx_full);
  out->drops_free_empty = load(w.drops_free_empty);
  out->drops_too_long = load(w.drops_too_long);
  out->drops_bad_tag = load(w.drops_bad_tag);
  out->free_taken = load(w.free_taken);
  out->tlb_hits = out->tlb_misses = out->drops_tlb_miss = 0;
  out->pages_pinned = pinned_.size();
  out->pins = pins_;
  out->refills = refills_;
  out->evictions = evictions_;
  if (mm_) {
    const abi::UnetMmWords& m = mm_words();
    out->tlb_hits = load(m.tlb_hits);
    out->tlb_misses = load(m.tlb_misses);
    out->drops_tlb_miss = load(m.drops_tlb_miss);
  }
}

}  // namespace ulnic::unet

// ------------------------------------------------------------------- C API

using ulnic::unet::Endpoint;

// The C handle is the Endpoint's address (unet_endpoint stays incomplete;
// upcalls get back the handle they were created with).
namespace {
Endpoint* cxx(unet_endpoint* ep) { return reinterpret_cast<Endpoint*>(ep); }
const Endpoint* cxx(const unet_endpoint* ep) { return reinterpret_cast<const Endpoint*>(ep); }
}  // namespace

extern "C" {

int unet_endpoint_create(const unet_attr* attr, unet_endpoint** out) {
  if (!out) return UNET_ERR_BAD_ARG;
  std::unique_ptr<Endpoint> ep;
  if (int st = Endpoint::create(attr, ep); st != UNET_OK) return st;
  *out = reinterpret_cast<unet_endpoint*>(ep.release());
  return UNET_OK;
}

int unet_endpoint_destroy(unet_endpoint* ep) {
  if (!ep) return UNET_ERR_BAD_ARG;
  delete cxx(ep);  // the slot goes back to the daemon: the NIC forgets endpoint and channels
  return UNET_OK;
}

int unet_endpoint_addr(const unet_endpoint* ep, unet_addr* out) {
  if (!ep || !out) return UNET_ERR_BAD_ARG;
  *out = cxx(ep)->addr();
  return UNET_OK;
}

void* unet_segment(unet_endpoint* ep, size_t* bytes) { return ep ? cxx(ep)->segment(bytes) : nullptr; }

int unet_channel_create(unet_endpoint* ep, unet_addr remote, uint32_t tx_tag, uint32_t rx_tag, unet_channel* out) {
  if (!ep || !out || tx_tag == 0 || rx_tag == 0) return UNET_ERR_BAD_ARG;
  ulnic::abi::OwnerRequest q{};
  q.magic = ulnic::abi::kOwnerMagic;
  q.type = ulnic::abi::kReqUnetChannel;
  q.unet.remote_node = remote.node;
  q.unet.remote_slot = remote.slot;
  q.unet.tx_tag = tx_tag;
  q.unet.rx_tag = rx_tag;
  return cxx(ep)->channel(q, out);
}

int unet_channel_destroy(unet_endpoint* ep, unet_channel ch) {
  if (!ep) return UNET_ERR_BAD_ARG;
  ulnic::abi::OwnerRequest q{};
  q.magic = ulnic::abi::kOwnerMagic;
  q.type = ulnic::abi::kReqUnetUnchannel;
  q.unet.channel = ch;
  return cxx(ep)->channel(q, nullptr);
}

int unet_send(unet_endpoint* ep, unet_channel ch, size_t offset, size_t length) {
  return ep ? cxx(ep)->send(ch, ulnic::abi::kOpUnetSend, offset, nullptr, length) : UNET_ERR_BAD_ARG;
}

int unet_send_inline(unet_endpoint* ep, unet_channel ch, const void* data, size_t length) {
  if (!ep || !data) return UNET_ERR_BAD_ARG;
  return cxx(ep)->send(ch, ulnic::abi::kOpUnetSendInline, 0, data, length);
}

int unet_send_wait(unet_endpoint* ep, int timeout_ms) { return ep ? cxx(ep)->send_wait(timeout_ms) : UNET_ERR_BAD_ARG; }
uint32_t unet_send_pending(const unet_endpoint* ep) { return ep ? cxx(ep)->send_pending() : 0; }

int unet_free_push(unet_endpoint* ep, size_t offset, size_t length) {
  return ep ? cxx(ep)->free_push(offset, length) : UNET_ERR_BAD_ARG;
}
uint32_t unet_free_count(const unet_endpoint* ep) { return ep ? cxx(ep)->free_count() : 0; }

int unet_recv(unet_endpoint* ep, unet_rx_desc* out) { return ep && out ? cxx(ep)->recv(out) : UNET_ERR_BAD_ARG; }
int unet_recv_wait(unet_endpoint* ep, unet_rx_desc* out, int timeout_ms) {
  return ep && out ? cxx(ep)->recv_wait(out, timeout_ms) : UNET_ERR_BAD_ARG;
}
int unet_ready(unet_endpoint* ep) { return ep && cxx(ep)->ready(); }

int unet_set_upcall(unet_endpoint* ep, unet_upcall_fn fn, void* arg) {
  if (!ep) return UNET_ERR_BAD_ARG;
  cxx(ep)->set_upcall(fn, arg);
  return UNET_OK;
}
int unet_dispatch(unet_endpoint* ep, int timeout_ms) { return ep ? cxx(ep)->dispatch(timeout_ms) : -UNET_ERR_BAD_ARG; }

int unet_stats_get(const unet_endpoint* ep, unet_stats* out) {
  if (!ep || !out) return UNET_ERR_BAD_ARG;
  cxx(ep)->stats(out);
  return UNET_OK;
}

const char* unet_strerror(int status) {
  switch (status < 0 ? -status : status) {
    case UNET_OK: return "ok";
    case UNET_ERR_BAD_ARG: return "bad argument";
    case UNET_ERR_RESOURCE: return "out of resources (slot, heap, channel table)";
    case UNET_ERR_NIC: return "the daemon or the NIC failed the request";
    case UNET_ERR_TAG_IN_USE: return "the rx tag is in use on this node";
    case UNET_ERR_BAD_CHANNEL: return "not a channel of this endpoint";
    case UNET_ERR_EMPTY: return "the receive queue is empty";
    case UNET_ERR_FULL: return "the free queue is full";
    case UNET_ERR_TIMEOUT: return "timed out";
    case UNET_ERR_UNREACHABLE: return "the remote NIC does not answer";
    default: return "unknown status";
  }
}

}  // extern "C"
