// U-Net on libulnic (include/unet.h, shared/include/ulnic/abi/unet.h): an
// endpoint is a Nic (one slot) with a segment and a queue area registered
// in it and configured with kOpUnetEndpoint; channels come from the node
// daemon; sends are kOpUnetSend* descriptors on the slot's SQ; the receive
// and free queues are rings in the queue area, one writer per word.
#include "unet.h"

#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>

#include "ulnic/abi/unet.h"
#include "ulnic/nic.h"

namespace ulnic::unet {
namespace {

namespace abi = ::ulnic::abi;
using Clock = std::chrono::steady_clock;

constexpr size_t kDefaultSegment = 1u << 20;
constexpr uint32_t kDefaultEntries = 64;

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

 private:
  static uint64_t load(const uint64_t& w) { return std::atomic_ref<const uint64_t>(w).load(std::memory_order_acquire); }
  abi::UnetHostWords& host_words() const { return *reinterpret_cast<abi::UnetHostWords*>(area_); }
  const abi::UnetNicWords& nic_words() const { return *reinterpret_cast<const abi::UnetNicWords*>(area_ + 64); }
  abi::UnetRxDesc* rx_queue() const { return reinterpret_cast<abi::UnetRxDesc*>(area_ + 128); }
  abi::UnetFreeDesc* free_queue() const { return reinterpret_cast<abi::UnetFreeDesc*>(area_ + 128 + rx_entries_ * 64); }
  void reap();                 // send completions and arrival events taken from the slot's rings
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
  unet_attr a{nullptr, -1, 0, 0, 0};
  if (attr) a = *attr;
  if (!a.segment_bytes) a.segment_bytes = kDefaultSegment;
  if (!a.rx_entries) a.rx_entries = kDefaultEntries;
  if (!a.free_entries) a.free_entries = kDefaultEntries;
  if (!power_of_two(a.rx_entries) || !power_of_two(a.free_entries) || a.rx_entries > UNET_QUEUE_MAX ||
      a.free_entries > UNET_QUEUE_MAX || a.segment_bytes > 0xffffffffu)
    return UNET_ERR_BAD_ARG;
  NicOptions o;
  if (a.cluster) o.cluster = a.cluster;
  o.node = a.node;
  auto nic = Nic::open(o);
  if (!nic) return UNET_ERR_NIC;
  std::unique_ptr<Endpoint> ep(new Endpoint());
  ep->nic_ = std::move(*nic);
  const size_t area_len = abi::unet_area_bytes(a.rx_entries, a.free_entries);
  ep->seg_ = static_cast<uint8_t*>(ep->nic_->alloc(a.segment_bytes, 4096));
  ep->area_ = static_cast<uint8_t*>(ep->nic_->alloc(area_len, 64));
  if (!ep->seg_ || !ep->area_) return UNET_ERR_RESOURCE;
  std::memset(ep->area_, 0, area_len);
  auto seg = ep->nic_->register_memory(ep->seg_, a.segment_bytes, abi::kAccessLocal | abi::kAccessRemoteWrite);
  auto area = ep->nic_->register_memory(ep->area_, area_len, abi::kAccessLocal);
  if (!seg || !area) return UNET_ERR_RESOURCE;
  abi::SqEntry e{};
  e.opcode = abi::kOpUnetEndpoint;
  e.src_key = area->key;
  e.src_addr = reinterpret_cast<uint64_t>(ep->area_);
  e.length = a.rx_entries;
  e.access = a.free_entries;
  e.dst_key = seg->key;
  e.dst_addr = reinterpret_cast<uint64_t>(ep->seg_);
  e.reg_offset = a.segment_bytes;
  auto r = ep->nic_->run(e);
  if (!r || r->status != abi::kCqOk) return UNET_ERR_NIC;
  ep->seg_len_ = a.segment_bytes;
  ep->rx_entries_ = a.rx_entries;
  ep->free_entries_ = a.free_entries;
  out = std::move(ep);
  return UNET_OK;
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
  while (nic_->poll(c))
    if (c.status != abi::kCqOk && send_error_ == UNET_OK) send_error_ = from_cq(c.status);
  abi::EqEntry ev;
  while (nic_->poll_event(ev)) {
  }  // arrivals: wake-ups only, the receive queue says what came
}

int Endpoint::send(unet_channel ch, uint8_t opcode, uint64_t offset, const void* data, size_t length) {
  if (length == 0 || length > (data ? UNET_SEND_INLINE_MAX : UNET_MESSAGE_MAX)) return UNET_ERR_BAD_ARG;
  if (!data && (offset > seg_len_ || length > seg_len_ - offset)) return UNET_ERR_BAD_ARG;
  abi::SqEntry e{};
  e.opcode = opcode;
  e.dst_key = ch;
  e.length = uint32_t(length);
  e.src_addr = data ? 0 : offset;
  // A full send queue: wait for sends to leave (the receive side drops,
  // the send side waits, as U-Net's send queue does).
  for (;;) {
    reap();
    if (nic_->post(e, data, data ? length : 0)) return UNET_OK;
    auto c = nic_->wait(std::chrono::milliseconds(30000));
    if (!c) return UNET_ERR_NIC;
    if (c->status != abi::kCqOk && send_error_ == UNET_OK) send_error_ = from_cq(c->status);
  }
}

int Endpoint::send_wait(int timeout_ms) {
  const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms < 0 ? 0 : timeout_ms);
  reap();
  while (nic_->in_flight()) {
    auto l = left(timeout_ms, deadline);
    if (l.count() == 0) return UNET_ERR_TIMEOUT;
    auto c = nic_->wait(l);
    if (!c) return nic_->state() == abi::SlotState::kActive ? UNET_ERR_TIMEOUT : UNET_ERR_NIC;
    if (c->status != abi::kCqOk && send_error_ == UNET_OK) send_error_ = from_cq(c->status);
  }
  const int st = send_error_;
  send_error_ = UNET_OK;
  return st;
}

int Endpoint::free_push(size_t offset, size_t length) {
  if (length == 0 || offset > seg_len_ || length > seg_len_ - offset) return UNET_ERR_BAD_ARG;
  if (free_count() >= free_entries_) return UNET_ERR_FULL;
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
