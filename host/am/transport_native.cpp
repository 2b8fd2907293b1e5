// Native AM: the NIC does the transport (abi/am.h, firmware/lcp/am.cpp).
//
// Each endpoint is one of the slot's AM endpoints in the firmware: the
// process gives it a receive ring in registered slot memory, its tag and
// its segment (registered for remote writes). A message goes out as one
// kOpAmSend: AmPrefix + the AM packet (+ a Long's payload) staged in
// registered memory. The destination NIC checks endpoint, tag, ring room
// and segment bounds at the first packet, writes the packet into a ring
// entry and the payload straight into the segment, and publishes the entry
// after the last byte; a refusal comes back as the send's CQ status, which
// becomes a returned message. The NIC's link is reliable, so the core
// neither retransmits nor keeps copies.
//
// A ring entry holds kAmMaxMessage bytes: a larger medium goes as pieces
// (reqrep.cpp), one kOpAmSend and one ring entry each, gathered before the
// handler runs. A full ring (or a NIC with no assembly free) is a passing
// shortage, not a verdict: the send keeps its staging bytes and is posted
// again, with backoff, until the ring has room; only a ring full for
// kCongestionPatience becomes a returned message (ECONGESTION).
//
// An endpoint's name: host = node, port = slot, index = the firmware
// endpoint (0..7), id = 0.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <vector>

#include "am_internal.h"
#include "staging_ring.h"
#include "ulnic/abi/am.h"
#include "ulnic/nic.h"

namespace ulnic::am {
namespace {

constexpr uint32_t kRingEntries = 256;  // > 2 x depth x peers of the jobs here; full = ECONGESTION
// The NIC bounds a message's pieces (abi/am.h): the largest medium fits.
constexpr uint32_t kPieceBytes = abi::kAmMaxMessage - sizeof(PacketHeader) - 4 * kMaxArgs;
static_assert((AMUDP_MAX_MEDIUM + kPieceBytes - 1) / kPieceBytes <= abi::kAmMaxPieces);
constexpr size_t kStaging = (size_t(2) << 20) + (64 << 10);  // a 1 MiB Long and smaller messages beside it
constexpr auto kNicWait = std::chrono::milliseconds(30000);
constexpr auto kFirstResend = std::chrono::microseconds(50);
constexpr auto kMaxResendGap = std::chrono::microseconds(5000);

// How long a send may find the destination ring full before it comes back
// ECONGESTION ($ULNIC_AM_CONGESTION_MS, default 10 s: a process that does
// not poll for that long has left the conversation).
Clock::duration congestion_patience() {
  static const Clock::duration v = [] {
    const char* s = std::getenv("ULNIC_AM_CONGESTION_MS");
    long ms = s && *s ? std::strtol(s, nullptr, 10) : 0;
    return Clock::duration(std::chrono::milliseconds(ms > 0 ? ms : 10000));
  }();
  return v;
}

std::unique_ptr<ulnic::Nic> nic;
uint32_t fw_endpoints_used = 0;  // bit i: firmware endpoint i taken

// A send the NIC has not completed: its staging bytes, the descriptor (to
// post again after a full ring) and (for a returned message) where it went
// and what it was.
struct InFlight {
  Endpoint* ep = nullptr;
  uint64_t span = 0;                        // its staging bytes (StagingRing::take)
  en_t dest;
  PacketHeader header;
  abi::SqEntry sqe;                         // sqe.user_data: its id (0: a free entry of InFlightTable)
  Clock::time_point give_up{};              // set at the first refusal for a full ring
  std::chrono::microseconds backoff{0};
};

// Sends refused for a full ring, waiting to be posted again.
struct Resend {
  uint64_t user_data;
  Clock::time_point due;
};
std::vector<Resend> resends;

// The sends the NIC has not completed, by user_data (sequential): a ring by
// id, and a map only for a send the ring comes round to while it is still
// in flight (one refused for a full ring may wait long). No allocation per
// send (a std::map was an insert and an erase per request, issue 19).
class InFlightTable {
 public:
  InFlight* find(uint64_t id) {
    InFlight& f = ring_[id % kRing];
    if (f.sqe.user_data == id) return &f;
    auto it = spilled_.find(id);
    return it == spilled_.end() ? nullptr : &it->second;
  }
  void add(const InFlight& v) {
    InFlight& f = ring_[v.sqe.user_data % kRing];
    if (f.sqe.user_data) spilled_.emplace(f.sqe.user_data, f);
    f = v;
  }
  void erase(uint64_t id) {
    InFlight& f = ring_[id % kRing];
    if (f.sqe.user_data == id) f.sqe.user_data = 0;
    else spilled_.erase(id);
  }
  // fn(InFlight&) -> true to erase it.
  template <class Fn>
  void erase_if(Fn fn) {
    for (InFlight& f : ring_)
      if (f.sqe.user_data && fn(f)) f.sqe.user_data = 0;
    std::erase_if(spilled_, [&](auto& kv) { return fn(kv.second); });
  }
  template <class Fn>
  bool any_of(Fn fn) {
    return std::any_of(ring_.begin(), ring_.end(), [&](InFlight& f) { return f.sqe.user_data && fn(f); }) ||
           std::any_of(spilled_.begin(), spilled_.end(), [&](auto& kv) { return fn(kv.second); });
  }
  void clear() {
    for (InFlight& f : ring_) f.sqe.user_data = 0;
    spilled_.clear();
  }

 private:
  static constexpr size_t kRing = 1024;
  std::vector<InFlight> ring_ = std::vector<InFlight>(kRing);
  std::map<uint64_t, InFlight> spilled_;
};

struct NativeEndpoint {
  uint8_t fw = 0;                  // firmware endpoint index
  uint8_t* ring = nullptr;         // AmRingControl + entries (slot heap)
  MemRegion ring_mr;
  uint64_t consumed = 0;           // our copy of AmRingControl.consumed
  uint8_t* staging = nullptr;
  MemRegion staging_mr;
  StagingRing spans{kStaging};  // what of `staging` the NIC may still read
  MemRegion seg_mr;                // the segment's registration (length 0: none)
  uint32_t seg_gen_registered = 0;
};

InFlightTable in_flight;
uint64_t next_user_data = 1;

NativeEndpoint& state(Endpoint& ep) { return *static_cast<NativeEndpoint*>(ep.transport_state); }

int am_status(abi::CqStatus st) {
  switch (st) {
    case abi::kCqAmBadEndpoint: return EBADENDPOINT;
    case abi::kCqAmBadTag: return EBADTAG;
    case abi::kCqAmCongestion: return ECONGESTION;
    case abi::kCqAmBadSegOffset: return EBADSEGOFF;
    case abi::kCqAmBadLength: return EBADLENGTH;
    default: return EUNREACHABLE;  // unreachable node, dead slot, link gave up
  }
}

// ---- completions (one CQ for the process: user_data says whose)

void complete(const abi::CqEntry& c) {
  InFlight* found = in_flight.find(c.user_data);
  if (!found) return;  // a configuration call's, taken by Nic::run
  InFlight& f = *found;
  auto now = Clock::now();
  // The destination ring had no room (or its NIC no assembly): nothing was
  // written there; post it again later. (Other statuses are verdicts; the
  // firmware holds a send at the head of the queue until it has an
  // operation for it, so those shortages never show here.)
  // A probe refused so found its endpoint alive: it is not sent again.
  if (c.status == abi::kCqAmCongestion && f.header.kind != Kind::kProbe) {
    if (f.backoff.count() == 0) f.give_up = now + congestion_patience();
    if (now < f.give_up) {
      f.backoff = std::min(std::max(f.backoff * 2, std::chrono::microseconds(kFirstResend)), kMaxResendGap);
      resends.push_back(Resend{c.user_data, now + f.backoff});
      return;
    }
  }
  InFlight done = f;
  in_flight.erase(done.sqe.user_data);
  state(*done.ep).spans.give(done.span);
  // A probe tells only what the destination NIC said: no process there, or
  // no such endpoint. A probe that timed out (a slow or unreachable NIC)
  // proves nothing the requests' own verdicts will not; the next one asks again.
  if (done.header.kind == Kind::kProbe && c.status != abi::kCqRemoteBadSlot && c.status != abi::kCqAmBadEndpoint)
    return;
  if (c.status != abi::kCqOk) send_failed(*done.ep, done.dest, done.header, am_status(abi::CqStatus(c.status)));
}

// Posts again the refused sends that are due; returns how many.
int resend_due() {
  int n = 0;
  auto now = Clock::now();
  for (size_t i = 0; i < resends.size();) {
    InFlight* f = in_flight.find(resends[i].user_data);
    if (!f) {
      resends.erase(resends.begin() + ptrdiff_t(i));
      continue;
    }
    if (resends[i].due > now || !nic->post(f->sqe)) {
      i++;
      continue;
    }
    count_resend(*f->ep, f->header);
    resends.erase(resends.begin() + ptrdiff_t(i));
    n++;
  }
  return n;
}

// The time until the next resend is due (zero if one is, max if none).
Clock::duration until_resend() {
  Clock::duration d = Clock::duration::max();
  auto now = Clock::now();
  for (const Resend& r : resends) d = std::min(d, r.due > now ? r.due - now : Clock::duration::zero());
  return d;
}

int reap() {
  int n = 0;
  abi::CqEntry c;
  while (nic->poll(c)) {
    complete(c);
    n++;
  }
  abi::EqEntry ev;
  while (nic->poll_event(ev)) {}  // arrivals: only wake-ups, the rings hold the messages
  return n + resend_due();
}

// A NIC wait of at most `limit`, cut short when a resend falls due.
std::chrono::milliseconds wait_slice(std::chrono::milliseconds limit) {
  Clock::duration next = until_resend();
  if (next == Clock::duration::max()) return limit;
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(next) + std::chrono::milliseconds(1);
  return std::min(limit, ms);
}

// Waits until the NIC completes something (a send, freeing staging or SQ
// room) or a refused send has been posted again.
bool wait_completion() {
  if (reap()) return true;
  const ulnic::NicDeadline deadline(*nic, kNicWait);  // the NIC's running time, not the wall clock's
  for (;;) {
    auto r = nic->wait(wait_slice(deadline.sleep_slice()));
    if (r) {
      complete(*r);
      return true;
    }
    if (resend_due() > 0 || !resends.empty()) return true;
    if (nic->state() != abi::SlotState::kActive || deadline.passed()) return false;
  }
}

// ---- endpoint configuration

int configure(Endpoint& ep, bool close) {
  NativeEndpoint& s = state(ep);
  bool ok = close ? nic->close_am_endpoint(s.fw, kNicWait)
                  : nic->configure_am_endpoint(s.fw, ep.tag, s.ring_mr, kRingEntries, &s.seg_mr, kNicWait);
  return ok ? AM_OK : AM_ERR_RESOURCE;
}

// ---- the ops

int native_start() {
  auto n = ulnic::Nic::open();
  if (!n) {
    std::fprintf(stderr, "AM native: %s\n", n.error().message.c_str());
    return AM_ERR_RESOURCE;
  }
  nic = std::move(*n);
  return AM_OK;
}

void native_stop() {
  in_flight.clear();
  resends.clear();
  nic.reset();
  fw_endpoints_used = 0;
}

int native_open(Endpoint& ep, en_t& name) {
  uint8_t fw = 0;
  while (fw < abi::kMaxAmEndpoints && (fw_endpoints_used >> fw & 1)) fw++;
  if (fw == abi::kMaxAmEndpoints) return AM_ERR_RESOURCE;
  auto s = std::make_unique<NativeEndpoint>();
  s->fw = fw;
  size_t ring_bytes = sizeof(abi::AmRingControl) + size_t(kRingEntries) * abi::kAmEntryBytes;
  s->ring = static_cast<uint8_t*>(nic->alloc(ring_bytes, 4096));
  s->staging = static_cast<uint8_t*>(nic->alloc(kStaging, 4096));
  auto undo = [&] {
    if (s->ring_mr.key) (void)nic->deregister(s->ring_mr);
    if (s->staging_mr.key) (void)nic->deregister(s->staging_mr);
    if (s->ring) nic->free(s->ring);
    if (s->staging) nic->free(s->staging);
    return AM_ERR_RESOURCE;
  };
  if (!s->ring || !s->staging) return undo();
  std::memset(s->ring, 0, ring_bytes);
  auto rr = nic->register_memory(s->ring, ring_bytes, abi::kAccessLocal);
  if (!rr) return undo();
  s->ring_mr = *rr;
  auto sr = nic->register_memory(s->staging, kStaging, abi::kAccessLocal);
  if (!sr) return undo();
  s->staging_mr = *sr;
  s->seg_gen_registered = ep.seg_gen;
  ep.transport_state = s.get();
  if (configure(ep, false) != AM_OK) {
    ep.transport_state = nullptr;
    return undo();
  }
  s.release();
  fw_endpoints_used |= 1u << fw;
  name = en_t{};
  name.host = nic->node();
  name.port = nic->slot();
  name.index = fw;
  name.transport = AMX_TRANSPORT_NATIVE;
  return AM_OK;
}

void native_close(Endpoint& ep) {
  NativeEndpoint* s = &state(ep);
  // Sends waiting to be posted again are dropped (the NIC does not have them).
  in_flight.erase_if([&](const InFlight& f) {
    return f.ep == &ep &&
           std::any_of(resends.begin(), resends.end(), [&](const Resend& r) { return r.user_data == f.sqe.user_data; });
  });
  // Sends still in flight finish first: their staging bytes are the NIC's.
  while (in_flight.any_of([&](const InFlight& f) { return f.ep == &ep; }))
    if (!wait_completion()) break;
  (void)configure(ep, true);
  (void)nic->deregister(s->ring_mr);
  (void)nic->deregister(s->staging_mr);
  if (s->seg_mr.length) (void)nic->deregister(s->seg_mr);
  nic->free(s->ring);
  nic->free(s->staging);
  fw_endpoints_used &= ~(1u << s->fw);
  delete s;
  ep.transport_state = nullptr;
}

int native_send(Endpoint& ep, const en_t& dest, void* head, size_t head_len, const void* payload,
                size_t payload_len) {
  NativeEndpoint& s = state(ep);
  auto* h = static_cast<PacketHeader*>(head);
  bool is_long = h->category == Category::kLong;
  size_t msg_len = head_len + (is_long ? 0 : payload_len);
  size_t long_len = is_long ? payload_len : 0;
  size_t bytes = abi::am_send_bytes(uint32_t(msg_len), uint32_t(long_len));
  if (is_long && long_len) h->placed = kPlacedByNic;
  size_t offset = 0;
  uint64_t span = 0;
  while (!s.spans.take(bytes, offset, span))
    if (!wait_completion()) return EUNREACHABLE;
  uint8_t* p = s.staging + offset;
  abi::AmPrefix pre{};
  pre.tag = h->tag;
  pre.msg_len = uint32_t(msg_len);
  pre.long_len = uint32_t(long_len);
  pre.long_offset = h->offset;
  pre.dst_ep = uint8_t(dest.index);
  pre.src_ep = s.fw;
  // The NIC takes a reply only for a request it saw us send (abi/am.h):
  // requests count, answers (reply, ack, return) take the count back. A
  // notice that refuses a reply answers nothing and expects nothing: a
  // one-way request, checked against the tag the reply carried (the
  // replier's own); so is a probe (Transport::probes), with the tag of the
  // requests it asks about. A medium in pieces says so, for the NIC's count.
  if (h->kind == Kind::kRequest) pre.flags = abi::kAmRequest;
  else if (h->kind == Kind::kReplyRefused || h->kind == Kind::kProbe) pre.flags = abi::kAmRequest | abi::kAmNoReply;
  if (h->piece) pre.flags |= abi::kAmPiece;
  else pre.pieces = uint8_t(message_pieces(*h));
  std::memcpy(p, &pre, sizeof pre);
  std::memcpy(p + sizeof pre, head, head_len);
  if (is_long && payload_len) std::memcpy(p + abi::am_long_start(uint32_t(msg_len)), payload, payload_len);
  else if (payload_len) std::memcpy(p + sizeof pre + head_len, payload, payload_len);
  abi::SqEntry e{};
  e.opcode = abi::kOpAmSend;
  e.length = uint32_t(bytes);
  e.src_addr = reinterpret_cast<uint64_t>(p);
  e.src_key = s.staging_mr.key;
  e.dst_node = dest.host;
  e.dst_slot = uint16_t(dest.port);
  e.user_data = next_user_data++;
  in_flight.add(InFlight{&ep, span, dest, *h, e});
  while (!nic->post(e)) {
    if (!wait_completion()) {
      in_flight.erase(e.user_data);
      s.spans.give(span);
      return EUNREACHABLE;
    }
  }
  return 0;
}

const abi::AmRxEntry* ready_entry(NativeEndpoint& s) {
  auto* e = reinterpret_cast<const abi::AmRxEntry*>(s.ring + sizeof(abi::AmRingControl) +
                                                    (s.consumed % kRingEntries) * abi::kAmEntryBytes);
  // acquire: the entry's bytes were written before its seq (firmware's release)
  uint32_t seq = __atomic_load_n(&e->seq, __ATOMIC_ACQUIRE);
  return seq == uint32_t(s.consumed + 1) ? e : nullptr;
}

int native_poll(Endpoint& ep, int budget) {
  reap();
  NativeEndpoint& s = state(ep);
  int n = 0;
  while (n < budget) {
    const abi::AmRxEntry* e = ready_entry(s);
    if (!e) break;
    if (e->len && e->len <= abi::kAmMaxMessage) {
      en_t src{};
      src.host = e->src_node;
      src.port = e->src_slot;
      src.index = e->src_ep;
      src.transport = AMX_TRANSPORT_NATIVE;
      deliver(ep, src, reinterpret_cast<const uint8_t*>(e + 1), e->len);
      n++;
    }
    // The entry is the NIC's again only now: a medium handler read it in place.
    s.consumed++;
    auto* ctl = reinterpret_cast<abi::AmRingControl*>(s.ring);
    __atomic_store_n(&ctl->consumed, s.consumed, __ATOMIC_RELEASE);  // the NIC reads it for ring room
    if (!ep.transport_state) break;  // a handler freed the endpoint
  }
  return n;
}

// A message in a ring, or a returned message waiting for the next poll (a
// probe's verdict reaped meanwhile: Transport::probes).
bool any_ready(Bundle& eb) {
  for (Endpoint* ep : eb.endpoints)
    if (ready_entry(state(*ep)) || !ep->deferred.empty()) return true;
  return false;
}

bool native_wait(Bundle& eb, int timeout_ms) {
  reap();
  if (any_ready(eb)) return true;
  auto until = Clock::now() + std::chrono::milliseconds(timeout_ms < 0 ? 1ll << 40 : timeout_ms);
  for (;;) {
    // Read once: a thread preempted between a look at the clock and this
    // one found a negative `left` here, which Nic::wait_ready takes for "no
    // timeout" -- an AM_PAR bundle's 10 ms slice became a sleep until the
    // next arrival, holding the bundle from the thread that would send it.
    auto left = std::chrono::ceil<std::chrono::milliseconds>(until - Clock::now());
    if (left.count() <= 0) break;
    // Arrivals wake us, our sends' completions do not (unless one failed:
    // a returned message), nor do refusals' resends (wait_slice ends first).
    if (!nic->wait_ready(wait_slice(std::min(left, std::chrono::milliseconds(1000))), std::chrono::microseconds(0),
                         abi::kWaitEvents)) {
      reap();  // a resend may have fallen due
      if (any_ready(eb)) return true;
      if (nic->state() != abi::SlotState::kActive) return false;
      continue;
    }
    reap();
    if (any_ready(eb)) return true;
  }
  return false;
}

// A new tag or segment: the firmware's endpoint is told. A new segment is
// registered for remote writes first, and the old one let go.
int native_endpoint_changed(Endpoint& ep) {
  NativeEndpoint& s = state(ep);
  if (ep.seg_gen != s.seg_gen_registered) {
    if (s.seg_mr.length) {
      (void)nic->deregister(s.seg_mr);
      s.seg_mr = MemRegion{};
    }
    if (ep.seg && ep.seg_len) {
      auto r = nic->register_memory(ep.seg, ep.seg_len, abi::kAccessLocal | abi::kAccessRemoteWrite);
      if (!r) {
        std::fprintf(stderr, "AM native: cannot register the segment: %s\n", r.error().message.c_str());
        (void)configure(ep, false);
        return AM_ERR_RESOURCE;
      }
      s.seg_mr = *r;
    }
    s.seg_gen_registered = ep.seg_gen;
  }
  return configure(ep, false);
}

// A program spinning on AM_Poll blocks between empty polls (Nic::poll_found)
// until a message arrives -- not for its own sends' completions -- but no
// longer than until its next resend is due (a message the destination's
// full ring refused went out again up to 10 ms late before).
void native_polled(bool found) {
  if (!nic) return;
  const Clock::duration next = until_resend();
  nic->poll_found(found,
                  next == Clock::duration::max() ? std::chrono::nanoseconds(Nic::kTightBlock)
                                                 : std::chrono::duration_cast<std::chrono::nanoseconds>(next),
                  abi::kWaitEvents);
}

const Transport kNative = {
    "native", AMX_TRANSPORT_NATIVE, /*reliable=*/true, uint32_t(abi::kAmMaxMessage), /*window=*/1,
    AMUDP_MAX_NETWORKDEPTH, /*places_long=*/true, /*probes=*/true,
    native_start, native_stop, native_open, native_close, native_send, native_poll, native_wait,
    native_endpoint_changed, native_polled,
};

}  // namespace

const Transport* native_transport() { return &kNative; }

}  // namespace ulnic::am
