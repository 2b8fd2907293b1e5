// Endpoints (FI_EP_RDM and FI_EP_DGRAM, both reliable and ordered here):
// the message and tagged data path on one AM endpoint of the domain's slot.
//
// Eager: a message of up to kEagerMax bytes is copied into a registered
// send buffer and goes as one AM message into the receiver's ring; the
// receiver copies it into the matching receive buffer (or keeps it as
// unexpected). Up to the domain's eager_max (64 KiB) a message goes eagerly
// too: as one Long into the lane of the receiver's segment that it granted
// this sender (credits say how much of the lane is free again), or, without
// a lane, in fragments of kEagerMax bytes, one ring entry each, which the
// receiver puts together before it matches the message. One trip, where a
// rendezvous takes four, each waiting for a host's turn on a CPU. Up to
// kStreamMax (1 MiB) a message streams through the lane in kChunkBytes
// Longs as the credits allow, bound to its receive once it is next in
// order.
// Rendezvous, above that (or before the lane is granted): RTS; when a receive matches, the
// receiver registers its buffer (remote write) and answers CTS with the key;
// the sender's NIC puts the data straight into that buffer (kOpPut, or
// kOpCopy within a node) and the sender sends FIN once the put completed
// (its NIC's completion says every byte is placed); the receive completes
// on FIN. A desc from fi_mr_reg saves both registrations.
//
// Everything that arrives is untrusted: ring entries and headers are
// checked, CTS/FIN must come from the endpoint the operation is with and
// name an operation we have, a CTS may not ask for more than the message,
// a Long must lie in the room its sender's lane has (its bytes are in the
// segment by then, which is open to every holder of our address, as an AM
// segment is: SEMANTICS.md).
#include <sys/random.h>

#include <algorithm>
#include <chrono>
#include <cstring>

#include "ofi.h"

namespace ulnic::ofi {
namespace {

using std::chrono::milliseconds;
constexpr auto kNicWait = milliseconds(10000);

Ep* as_ep(fid_ep* e) { return reinterpret_cast<Ep*>(e); }
Ep* as_ep(fid* f) { return reinterpret_cast<Ep*>(f); }

uint64_t random_tag() {
  uint64_t t = 0;
  // Neither AM_NONE (0) nor AM_ALL (1): the NIC reads those specially.
  while (t <= 1)
    if (::getrandom(&t, sizeof t, 0) != sizeof t) return 0;
  return t;
}

// ---------------------------------------------------------------- sending

// Copies the header and `n` payload bytes into a free send buffer and posts
// it as an AM request to `dst` -- with `long_offset`, as a Long: the header
// alone is the message and the payload goes into the destination's segment
// there (from a Long staging buffer). Never waits and never runs progress
// (it is called from inside it): false if no buffer or no room in the SQ.
bool post_msg(Ep& ep, const Addr& dst, const WireHdr& h, const void* payload, size_t n, uint64_t op,
              const uint32_t* long_offset = nullptr) {
  Domain& d = *ep.dom;
  std::vector<int>& pool = long_offset ? ep.free_longs : ep.free_bufs;
  if (pool.empty()) return false;
  const int b = pool.back();
  uint8_t* at = long_offset ? ep.longs + size_t(b) * kLongBufBytes : ep.bufs + size_t(b) * kBufBytes;
  abi::AmPrefix pre{};
  pre.tag = dst.tag;
  pre.msg_len = uint32_t(sizeof h + (long_offset ? 0 : n));
  pre.long_len = long_offset ? uint32_t(n) : 0;
  pre.long_offset = long_offset ? *long_offset : 0;
  pre.dst_ep = dst.ep;
  pre.src_ep = ep.index;
  // One-way: nothing answers with an AM reply, so it takes none of the
  // NIC's reply counts (at most 0xffff per peer endpoint: a request that
  // awaits a reply would be refused as congestion from then on).
  pre.flags = abi::kAmRequest | abi::kAmNoReply;
  std::memcpy(at, &pre, sizeof pre);
  std::memcpy(at + sizeof pre, &h, sizeof h);
  if (n) std::memcpy(at + (long_offset ? abi::am_long_start(pre.msg_len) : sizeof pre + sizeof h), payload, n);
  Post post;
  post.ep = &ep;
  post.kind = kPostMsg;
  post.wire = h.kind;
  (long_offset ? post.long_buf : post.buf) = b;
  post.op = op;
  post.dst = dst;
  abi::SqEntry& e = post.sqe;
  e.opcode = abi::kOpAmSend;
  e.length = uint32_t(abi::am_send_bytes(pre.msg_len, pre.long_len));
  e.src_addr = reinterpret_cast<uint64_t>(at);
  e.src_key = long_offset ? ep.longs_mr.key : ep.bufs_mr.key;
  e.dst_node = dst.node;
  e.dst_slot = dst.slot;
  e.user_data = d.next_user_data++;
  if (!d.nic->post(e)) return false;
  pool.pop_back();
  d.posts[e.user_data] = post;
  return true;
}

WireHdr header(const Ep& ep, WireKind kind) {
  WireHdr h{};
  h.magic = kWireMagic;
  h.kind = kind;
  h.src_tag = ep.tag;
  return h;
}

// CTS and FIN: sent now or, without a free buffer, from the next progress.
void post_ctl(Ep& ep, const Addr& dst, const WireHdr& h) {
  if (!ep.ctl_backlog.empty() || !post_msg(ep, dst, h, nullptr, 0, 0)) ep.ctl_backlog.emplace_back(dst, h);
}

// One operation's end on counter `n` (if one is bound): counters count every
// end, whether or not it makes a CQ entry.
void count(Cntr* n, bool failed) {
  if (n) ++(failed ? n->errors : n->value);
}

// Every operation's end: it counts on its counter (FI_RECV, FI_SEND, FI_READ,
// FI_WRITE by its flags) and goes into its CQ if it asked for a completion
// or failed.
void report(Ep& ep, Completion c, bool wanted) {
  const uint64_t f = c.e.flags;
  count((f & FI_RECV) ? ep.recv_cntr : (f & FI_SEND) ? ep.send_cntr : (f & FI_READ) ? ep.read_cntr
        : (f & FI_WRITE) ? ep.write_cntr : nullptr,
        c.err != 0);
  if (wanted || c.err) cq_push((f & FI_RECV) ? ep.rx_cq : ep.tx_cq, std::move(c));
}

void complete_send(Ep& ep, const Send& s, int err, int prov_errno) {
  Completion c;
  c.e.op_context = s.context;
  c.e.flags = FI_SEND | (s.tagged ? FI_TAGGED : FI_MSG);
  c.err = err;
  c.prov_errno = prov_errno;
  report(ep, std::move(c), s.completion);
}

void deregister(Domain& d, MemRegion& r) {
  if (r.key) (void)d.nic->deregister(r);
  r = MemRegion{};
}

// Kept bounce buffers: at most kIdleMax bytes (and a quarter of the slot)
// and kIdleMaxCount of them (each holds one of the slot's kMaxRegistrations
// NIC keys); at least kBounceMin each, so a size class serves neighbouring
// sizes.
constexpr size_t kIdleMax = size_t(32) << 20;
constexpr size_t kIdleMaxCount = 32;
constexpr size_t kBounceMin = size_t(64) << 10;

size_t bounce_capacity(size_t n) {
  size_t c = kBounceMin;
  while (c < n) c <<= 1;
  return c;
}

// A stand-in for n bytes in the slot heap, registered (`bounce` set): a kept
// one of its size class and access -- for remote write, only one whose key
// went to the same peer, so a peer can reach no buffer that now holds
// another's data -- or a new one, dropping kept ones while the heap has no
// room (or the NIC no free key).
Result<MemRegion> bounce_buffer(Domain& d, size_t n, uint32_t access, uint64_t peer, uint8_t*& bounce) {
  if (!(access & abi::kAccessRemoteWrite)) peer = 0;
  const size_t cap = bounce_capacity(n);
  for (auto it = d.idle.begin(); it != d.idle.end(); ++it)
    if (it->reg.length == cap && it->reg.access == access && it->peer == peer) {
      bounce = it->buf;
      MemRegion r = it->reg;
      d.idle_bytes -= cap;
      d.idle.erase(it);
      ++d.bounce_hits;
      return r;
    }
  ++d.bounce_misses;
  size_t len = cap;
  void* b = d.nic->alloc(len, 64);
  while (!b && drop_idle_bounce(d)) b = d.nic->alloc(len, 64);
  if (!b) b = d.nic->alloc(len = n, 64);  // not kept afterwards: not a size class
  if (!b) return fail("no room for a bounce buffer of " + std::to_string(n) + " bytes in the slot heap");
  auto r = d.nic->register_memory(b, len, access);
  while (!r && drop_idle_bounce(d)) r = d.nic->register_memory(b, len, access);
  if (!r) {
    d.nic->free(b);
    return r;
  }
  bounce = static_cast<uint8_t*>(b);
  return r;
}

// The NIC's view of [buf, +n) for a put: a stand-in in the slot heap
// (`bounce`; the caller copies through it), or, when the heap has no room
// for it, the buffer itself registered where it is. Registering in place
// moves the buffer's pages into the slot (Nic::register_memory): pages an
// application's allocator shares with other objects -- which another thread
// of the application (an MPI library's progress or PMIx thread) may write
// during the move, losing that write -- and pages another registration
// still in use has moved (adjacent buffers of an MPI window). A copy at
// memcpy speed costs less than the registration's NIC round trips anyway.
// The first error if neither works.
// `busy`: operations in flight hold room that comes back (Held): the caller
// waits for it rather than moving the application's pages.
Result<MemRegion> bounce_or_register(Domain& d, void* buf, size_t n, uint32_t access, uint64_t peer,
                                     uint8_t*& bounce, bool busy) {
  auto b = bounce_buffer(d, n, access, peer, bounce);
  if (b || busy) return b;
  auto r = d.nic->register_memory(buf, n, access);
  return r ? r : b;
}

// Slot-heap room that the domain's operations in flight hold (bounce
// buffers, or buffers registered in place), each giving it back as it ends:
// rendezvous receives until their FIN (`rx`), and sends' puts and RMA
// (`tx`), which end by their own NIC's completion. A buffer that finds no
// room while some is held waits for it: the slot is smaller than what an
// application may have in flight (an MPI window of 128 1 MiB messages, a
// 64 MiB slot), and failing the operation would fail the job. Receives
// hold at most kRxHeldShare of the slot (but one always may): two peers
// that fill their slots with receives each waiting for the other's put
// would wait for ever, while a put's room comes back without the peer.
struct Held {
  uint64_t rx = 0, tx = 0;
  bool any() const { return rx || tx; }
};
constexpr uint64_t kRxHeldShare = 4;  // a quarter of the slot

Held held(const Domain& d) {
  Held h;
  for (const Ep* e : d.eps) {
    for (const auto& [id, rv] : e->rndv)
      if (rv.reg.key) h.rx += rv.reg.length;
    for (const auto& [id, s] : e->sends)
      if (s.reg.key) h.tx += s.reg.length;
    for (const auto& [id, op] : e->rma)
      if (op.reg.key) h.tx += op.reg.length;
  }
  return h;
}

// A rendezvous's registration and bounce buffer, given back: deregistered
// and freed. For operations that failed or were cut short, whose peer may
// still use the key.
void release(Domain& d, MemRegion& r, uint8_t*& bounce) {
  deregister(d, r);
  if (bounce) d.nic->free(bounce);
  bounce = nullptr;
}

// ... of an operation that ended well (the peer's NIC is done with the key):
// a bounce buffer of a size class is kept, registered, for the next one of
// its kind (`peer`: the addr_id its key went to, if remote-writable), the
// oldest kept ones dropped beyond kIdleMax.
void recycle(Domain& d, MemRegion& r, uint8_t*& bounce, uint64_t peer) {
  const size_t limit = std::min(kIdleMax, d.nic->slot_size() / 4);
  if (!bounce || !r.key || r.length != bounce_capacity(r.length) || r.length > limit) return release(d, r, bounce);
  d.idle.push_back(Bounce{bounce, r, (r.access & abi::kAccessRemoteWrite) ? peer : 0});
  d.idle_bytes += r.length;
  while (d.idle_bytes > limit || d.idle.size() > kIdleMaxCount) (void)drop_idle_bounce(d);
  r = MemRegion{};
  bounce = nullptr;
}

void fail_send(Ep& ep, uint64_t id, int prov_errno) {
  auto it = ep.sends.find(id);
  if (it == ep.sends.end()) return;
  release(*ep.dom, it->second.reg, it->second.bounce);
  complete_send(ep, it->second, FI_EIO, prov_errno);
  ep.sends.erase(it);
}

// A put of `len` bytes from our [src, +len) (key src_key) to dst's
// (dst_key, dst_addr): kOpPut, or kOpCopy between two slots of one node. Its
// completion comes back as a Post of `kind` for operation `op`. False if the
// SQ has no room.
bool post_put(Ep& ep, PostKind kind, uint64_t op, const Addr& dst, uint64_t src, uint32_t src_key, uint64_t len,
              uint32_t dst_key, uint64_t dst_addr) {
  Domain& d = *ep.dom;
  Post post;
  post.ep = &ep;
  post.kind = kind;
  post.op = op;
  abi::SqEntry& e = post.sqe;
  if (dst.node == d.nic->node()) {  // a put stays within its node: a copy between slots
    e.opcode = abi::kOpCopy;
    e.src_slot = d.nic->slot();
  } else {
    e.opcode = abi::kOpPut;
    e.dst_node = dst.node;
  }
  e.dst_slot = dst.slot;
  e.length = uint32_t(len);
  e.src_addr = src;
  e.src_key = src_key;
  e.dst_key = dst_key;
  e.dst_addr = dst_addr;
  e.user_data = d.next_user_data++;
  if (!d.nic->post(e)) return false;
  d.posts[e.user_data] = post;
  return true;
}

// The put of a rendezvous whose CTS came. False if it must wait (no room in
// the SQ, or in the slot heap while operations in flight hold some: Held); a
// source the NIC will not register fails the send.
bool start_put(Ep& ep, Send& s) {
  Domain& d = *ep.dom;
  uint32_t key;
  if (mr_covers(d, s.desc, s.buf, s.put_len)) {
    key = s.desc->region.key;
  } else {
    if (!s.reg.key) {
      const bool busy = held(d).any();
      auto r = bounce_or_register(d, const_cast<uint8_t*>(s.buf), s.put_len, abi::kAccessLocal, 0, s.bounce, busy);
      if (!r && busy) return false;  // room comes back as those end
      if (!r) {
        ULNIC_WARN(FI_LOG_EP_DATA, "cannot register a send buffer: %s\n", r.error().message.c_str());
        WireHdr f = header(ep, kFin);
        f.flags = kWireFailed;
        f.sid = s.id;
        f.rid = s.rid;
        post_ctl(ep, s.dst, f);
        fail_send(ep, s.id, kErrRegister);
        return true;
      }
      s.reg = *r;
      if (s.bounce) std::memcpy(s.bounce, s.buf, s.put_len);
    }
    key = s.reg.key;
  }
  return post_put(ep, kPostPut, s.id, s.dst, reinterpret_cast<uint64_t>(s.bounce ? s.bounce : s.buf), key, s.put_len,
                  s.rkey, s.raddr);
}

// Our lane at `dst`, asked for if we have not yet; null until granted.
LaneTx* lane_to(Ep& ep, const Addr& dst) {
  if (!ep.longs) return nullptr;
  LaneTx& t = ep.lanes_tx[{addr_id(dst), dst.tag}];
  if (!t.asked) {
    t.asked = true;
    t.dst = dst;
    post_ctl(ep, dst, header(ep, kLaneReq));
  }
  return t.granted ? &t : nullptr;
}

// An eager message of n bytes (kEagerMax < n; or a stream's chunk, `h`
// saying which) as one Long into our lane at `dst`. kNoLane: we have none
// (the first such message asks for one; the grant comes back as
// kLaneGrant, and meanwhile messages go in fragments); kLaneWait: not now
// -- the receiver has not freed the room yet, or no staging buffer or SQ
// entry is free (a Long moves 64 KiB in one NIC operation where fragments
// take sixteen: waiting for a credit is cheaper).
enum LaneResult { kLanePosted, kNoLane, kLaneWait };
LaneResult post_in_lane(Ep& ep, const Addr& dst, WireHdr h, const void* buf, size_t n) {
  LaneTx* lane = lane_to(ep, dst);
  if (!lane) return kNoLane;
  LaneTx& t = *lane;
  // The stream's next n bytes, or the lane's start if they would wrap.
  const uint64_t place = t.head % t.size;
  const uint64_t skip = place + n > t.size ? t.size - place : 0;
  if (t.head + skip + n - t.credited > t.size) return kLaneWait;
  h.kind = kEagerLong;
  h.rid = t.head;
  h.key = uint32_t(skip);
  const uint32_t offset = uint32_t(t.off + (t.head + skip) % t.size);
  if (!post_msg(ep, dst, h, buf, n, h.sid, &offset)) return kLaneWait;
  t.head += skip + n;
  return kLanePosted;
}

// Posts the fragments (or a stream's chunks) of send `s` that buffers, SQ
// room and lane credits allow; true once all are posted.
bool post_frags(Ep& ep, Send& s) {
  while (s.frag_next < s.len) {
    const size_t n = std::min<uint64_t>(s.stream ? kChunkBytes : kEagerMax, s.len - s.frag_next);
    WireHdr h = s.frag_hdr;
    if (s.stream) {
      h.chunk = uint16_t(s.frag_next / kChunkBytes);
      if (post_in_lane(ep, s.dst, h, s.buf + s.frag_next, n) != kLanePosted) return false;
    } else {
      h.rid = s.frag_next;
      if (!post_msg(ep, s.dst, h, s.buf + s.frag_next, n, s.id)) return false;
    }
    s.frag_next += n;
    ++s.frags_out;
  }
  return true;
}

// Common to every send call. `flags`: FI_INJECT (copy now, no completion),
// FI_COMPLETION, FI_REMOTE_CQ_DATA.
ssize_t do_send(Ep& ep, const void* buf, size_t len, void* desc, fi_addr_t dest, bool tagged, uint64_t tag,
                uint64_t data, void* context, uint64_t flags) {
  Domain& d = *ep.dom;
  std::lock_guard lk(d.mu);
  if (!ep.enabled) return -FI_EOPBADSTATE;
  if (!ep.av) return -FI_ENOAV;
  const Addr* dst = ep.av->lookup(dest);
  if (!dst) return -FI_EINVAL;
  if (len > kMaxMsg || ((flags & FI_INJECT) && len > kEagerMax)) return -FI_EMSGSIZE;
  if (len && !buf) return -FI_EINVAL;
  const bool inject = flags & FI_INJECT;
  const bool want = !inject && (!ep.tx_selective || (flags & FI_COMPLETION));
  // No buffer or no SQ room: completions may give some back. A message in
  // fragments not all posted yet goes first: a message behind it would have
  // its receiver hold it (and the ones after it) until it is whole.
  if (ep.free_bufs.empty() || d.nic->sq_free() == 0 || !ep.frags_waiting.empty()) (void)progress(d);
  if (!ep.frags_waiting.empty()) return -FI_EAGAIN;
  const bool frags = len > kEagerMax && len <= d.eager_max;
  // Above the eager size, a stream through our lane at dst if we have one
  // (the first such message asks for it and goes by rendezvous): one trip,
  // and its chunks go as far as the credits reach, the rest when more come
  // (the receiver copies every chunk out as it arrives, so the lane drains
  // whether or not a receive waits). A window of such messages streams
  // through the lane as the credits come back each quarter lane. Measured
  // against sending by rendezvous whatever the lane had no room for now
  // (MPI windows of 8 MiB, 2 vCPUs, three interleaved pairs): 256 KiB
  // 1157-1663 MB/s against 781-1048, 1 MiB 1139-1686 against 726-1563.
  const LaneTx* lane_tx = len > kEagerMax && !frags && len <= kStreamMax ? lane_to(ep, *dst) : nullptr;
  const bool stream = lane_tx && lane_tx->size >= kChunkBytes;  // a lane that holds no chunk would never take one
  const bool rendezvous = len > kEagerMax && !frags && !stream;
  WireHdr h = header(ep, frags ? kEagerFrag : stream ? kEagerLong : rendezvous ? kRts : kEager);
  h.flags = (tagged ? kWireTagged : 0) | ((flags & FI_REMOTE_CQ_DATA) ? kWireData : 0) | (stream ? kWireChunk : 0);
  h.len = len;
  h.tag = tag;
  h.data = data;
  uint32_t& seq = ep.tx_seq[{addr_id(*dst), dst->tag}];
  h.seq = seq;
  Send s;
  s.dst = *dst;
  s.len = len;
  s.tagged = tagged;
  s.tag = tag;
  s.context = context;
  s.completion = want;
  // An eager send completes when the receiving NIC took it (all of its
  // fragments); one without a completion in one piece needs no record.
  uint64_t id = 0;
  if (len > kEagerMax || want) id = d.next_op++;
  h.sid = id;
  s.id = id;
  LaneResult lane = frags ? post_in_lane(ep, *dst, h, buf, len) : kNoLane;
  if (lane == kLaneWait) {  // credits or buffers may be in
    (void)progress(d);
    lane = post_in_lane(ep, *dst, h, buf, len);
    if (lane == kLaneWait) return -FI_EAGAIN;
  }
  if (lane == kLanePosted) {
    s.frag_next = len;  // all of it, in one piece
    s.frags_out = 1;
  } else if (frags || stream) {
    s.buf = static_cast<const uint8_t*>(buf);
    s.frag_hdr = h;
    s.stream = stream;
    if (!post_frags(ep, s) && s.frag_next == 0) {
      if (!stream) return -FI_EAGAIN;
      (void)progress(d);  // credits may be in
      if (!post_frags(ep, s) && s.frag_next == 0) return -FI_EAGAIN;
    }
    if (s.frag_next < len) ep.frags_waiting.push_back(id);
  } else if (rendezvous) {
    s.rendezvous = true;
    s.buf = static_cast<const uint8_t*>(buf);
    s.desc = static_cast<Mr*>(desc);
    if (!post_msg(ep, *dst, h, nullptr, 0, id)) return -FI_EAGAIN;
  } else if (!post_msg(ep, *dst, h, buf, len, id)) {
    return -FI_EAGAIN;
  }
  ++seq;
  ++d.sent[rendezvous ? 3 : stream ? 4 : !frags ? 0 : s.buf ? 2 : 1];
  if (id) ep.sends.emplace(id, s);
  return 0;
}

// ---------------------------------------------------------------- receiving

// FI_SOURCE: the sender's fi_addr, if the endpoint asked for it and the AV
// holds the sender (else what a Completion starts with, FI_ADDR_NOTAVAIL).
fi_addr_t source(const Ep& ep, uint64_t src_id) {
  if (!ep.av || !(ep.caps & FI_SOURCE)) return FI_ADDR_NOTAVAIL;
  auto it = ep.av->by_id.find(src_id);
  return it != ep.av->by_id.end() ? it->second : FI_ADDR_NOTAVAIL;
}

Completion recv_completion(const Ep& ep, const Recv& r, const Message& m, uint64_t n) {
  Completion c;
  c.e.op_context = r.context;
  c.e.flags = FI_RECV | ((m.flags & kWireTagged) ? FI_TAGGED : FI_MSG) | ((m.flags & kWireData) ? FI_REMOTE_CQ_DATA : 0);
  c.e.len = n;
  c.e.buf = r.buf;
  c.e.data = (m.flags & kWireData) ? m.data : 0;
  c.e.tag = (m.flags & kWireTagged) ? m.tag : 0;
  c.src = source(ep, m.src_id);
  if (m.len > r.len && !r.discard) {
    c.err = FI_ETRUNC;
    c.prov_errno = kErrTruncated;
    c.olen = m.len - r.len;
    c.err_text = "ulnic: a message of " + std::to_string(m.len) + " bytes truncated to the receive buffer's " +
                 std::to_string(r.len);
  }
  return c;
}

void complete_recv(Ep& ep, const Recv& r, const Message& m, uint64_t n) {
  report(ep, recv_completion(ep, r, m, n), r.completion);
}

// A rendezvous receive's CTS. False if it must wait for a send buffer or for
// room in the slot heap (Held); a buffer the NIC will not register fails the
// receive (and, by a failed CTS, the send).
bool send_cts(Ep& ep, uint64_t id) {
  auto it = ep.rndv.find(id);
  if (it == ep.rndv.end()) return true;
  RndvRecv& rv = it->second;
  Domain& d = *ep.dom;
  WireHdr h = header(ep, kCts);
  h.sid = rv.m.sid;
  h.rid = id;
  h.len = rv.n;
  if (rv.n) {
    if (mr_covers(d, rv.r.desc, rv.r.buf, rv.n)) {
      h.key = rv.r.desc->region.key;
    } else if (!rv.reg.key) {
      const Held now = held(d);
      if (now.rx && now.rx + rv.n > d.nic->slot_size() / kRxHeldShare) return false;  // a FIN gives room back
      const bool busy = now.any();
      auto r = bounce_or_register(d, rv.r.buf, rv.n, abi::kAccessLocal | abi::kAccessRemoteWrite, rv.m.src_id,
                                  rv.bounce, busy);
      if (!r && busy) return false;  // room comes back as those end
      if (!r) {
        ULNIC_WARN(FI_LOG_EP_DATA, "cannot register a receive buffer: %s\n", r.error().message.c_str());
        h.flags = kWireFailed;
        h.len = 0;
        post_ctl(ep, rv.m.src, h);
        Completion c = recv_completion(ep, rv.r, rv.m, 0);
        c.err = FI_EIO;
        c.prov_errno = kErrRegister;
        c.err_text = prov_strerror(kErrRegister);
        report(ep, std::move(c), true);
        ep.rndv.erase(it);
        return true;
      }
      rv.reg = *r;
    }
    if (!h.key) h.key = rv.reg.key;
    h.data = reinterpret_cast<uint64_t>(rv.bounce ? rv.bounce : rv.r.buf);
  }
  if (!post_msg(ep, rv.m.src, h, nullptr, 0, id)) return false;
  rv.cts_sent = true;
  return true;
}

// A receive meets its message.
// An eager message's bytes are in m.payload, or at `bytes` (in the ring or
// a lane, not copied out yet).
void start_recv(Ep& ep, const Recv& r, Message& m, const uint8_t* bytes = nullptr) {
  uint64_t n = std::min<uint64_t>(m.len, r.len);
  if (m.kind == kEager) {
    if (n) std::memcpy(r.buf, bytes ? bytes : m.payload.data(), n);
    complete_recv(ep, r, m, n);
    return;
  }
  uint64_t id = ep.dom->next_op++;
  RndvRecv& rv = ep.rndv[id];
  rv.r = r;
  rv.m = std::move(m);
  rv.n = n;
  if (!send_cts(ep, id)) ep.rndv_waiting.push_back(id);
}

bool matches(const Recv& r, const Message& m) {
  if (r.directed && r.src_id != m.src_id) return false;
  return !r.tagged || ((r.tag ^ m.tag) & ~r.ignore) == 0;
}

// An in-order message: to the first matching posted receive (straight from
// `bytes`, if given, into its buffer), or kept (copied out of `bytes`).
void deliver(Ep& ep, Message&& m, const uint8_t* bytes = nullptr) {
  bool tagged = m.flags & kWireTagged;
  auto& posted = tagged ? ep.posted_tagged : ep.posted_msg;
  for (auto it = posted.begin(); it != posted.end(); ++it) {
    if (!matches(*it, m)) continue;
    Recv r = *it;
    posted.erase(it);
    start_recv(ep, r, m, bytes);
    return;
  }
  if (bytes) m.payload.assign(bytes, bytes + m.len);
  ep.unexpected_bytes += m.payload.size() + sizeof(Message);
  (tagged ? ep.unexpected_tagged : ep.unexpected_msg).push_back(std::move(m));
}

// What we have from a sender, dropped, when another process has taken its
// slot and endpoint or it is gone (peer_gone): its messages not whole or not
// in order yet, its lane (free again); receives bound to its streams fail
// (`prov_errno`: the rest will not come).
void forget_sender(Ep& ep, PeerRx& p, int prov_errno) {
  for (auto& [seq, old] : p.early) ep.unexpected_bytes -= old.payload.size() + sizeof(Message);
  for (auto& [seq, part] : p.partial) ep.unexpected_bytes -= part.m.payload.size() + sizeof(Message);
  for (auto& [seq, st] : p.streams) {
    if (!st.bound) {
      ep.unexpected_bytes -= st.m.payload.size() + (st.m.payload.empty() ? 0 : sizeof(Message));
      continue;
    }
    Completion c = recv_completion(ep, st.r, st.m, 0);
    c.err = FI_EIO;
    c.prov_errno = prov_errno;
    c.err_text = prov_strerror(prov_errno);
    report(ep, std::move(c), true);
  }
  if (p.lane >= 0) ep.lanes[p.lane] = LaneRx{};
  p = PeerRx{};
}

// What we have from the sender of `m`: started over if it is a new process
// on that slot and endpoint.
PeerRx& peer_rx(Ep& ep, const Message& m) {
  PeerRx& p = ep.rx[m.src_id];
  if (p.incarnation != m.src.tag) {
    forget_sender(ep, p, kErrRemoteFailed);
    p.incarnation = m.src.tag;
  }
  return p;
}

bool stream_whole(const Stream& st) {
  const uint32_t chunks = uint32_t((st.m.len + kChunkBytes - 1) / kChunkBytes);
  return st.have == (chunks == 32 ? ~0u : (1u << chunks) - 1);
}

// A stream that is next in order meets the first matching posted receive:
// bound to it (what has come so far copied in); false if none matches.
bool bind(Ep& ep, Stream& st) {
  auto& posted = (st.m.flags & kWireTagged) ? ep.posted_tagged : ep.posted_msg;
  for (auto it = posted.begin(); it != posted.end(); ++it) {
    if (!matches(*it, st.m)) continue;
    st.r = *it;
    posted.erase(it);
    st.bound = true;
    if (!st.m.payload.empty()) {
      std::memcpy(st.r.buf, st.m.payload.data(), std::min<uint64_t>(st.m.len, st.r.len));
      ep.unexpected_bytes -= st.m.payload.size() + sizeof(Message);
      std::vector<uint8_t>().swap(st.m.payload);
    }
    return true;
  }
  return false;
}

// Messages that are next in order: kept ones delivered, a stream bound to a
// receive (or, whole and with none, made an unexpected message), until one
// is missing or a stream must wait for more of its chunks.
void drain(Ep& ep, PeerRx& p) {
  for (;;) {
    if (auto e = p.early.find(p.expected); e != p.early.end()) {
      Message next = std::move(e->second);
      ep.unexpected_bytes -= next.payload.size() + sizeof(Message);
      p.early.erase(e);
      deliver(ep, std::move(next));
      p.expected++;
      continue;
    }
    auto it = p.streams.find(p.expected);
    if (it == p.streams.end()) return;
    Stream& st = it->second;
    if (bind(ep, st)) {
      p.expected++;
      if (stream_whole(st)) {
        complete_recv(ep, st.r, st.m, std::min<uint64_t>(st.m.len, st.r.len));
        p.streams.erase(it);
      }
      continue;
    }
    if (!stream_whole(st)) return;
    Message whole = std::move(st.m);
    ep.unexpected_bytes -= whole.payload.size() + sizeof(Message);
    p.streams.erase(it);
    deliver(ep, std::move(whole));
    p.expected++;
  }
}

// `bytes`: an eager message's m.len bytes where they arrived (the ring or a
// lane); they are copied out before this returns.
void in_order(Ep& ep, uint32_t seq, Message&& m, const uint8_t* bytes = nullptr) {
  PeerRx& p = peer_rx(ep, m);
  if (seq != p.expected) {
    // Ahead of a message the NIC refused (it comes again): keep it. Behind
    // `expected`, or too far ahead, it is no message of a correct sender.
    if (int32_t(seq - p.expected) > 0 && p.early.size() < kMaxPendingPerPeer && !p.early.count(seq) &&
        !p.streams.count(seq)) {
      if (bytes) m.payload.assign(bytes, bytes + m.len);
      ep.unexpected_bytes += m.payload.size() + sizeof(Message);
      p.early.emplace(seq, std::move(m));
    } else {
      ULNIC_WARN(FI_LOG_EP_DATA, "dropped a message out of sequence (%u, expected %u)\n", seq, p.expected);
    }
    return;
  }
  deliver(ep, std::move(m), bytes);
  p.expected++;
  drain(ep, p);
}

// A piece of a message (a chunk of a stream, a fragment) repeats its
// message's header, its send's id included: one that disagrees with the
// pieces kept so far (`kept`), or whose bit is already in `have`, is
// dropped with a warning.
bool piece_ok(const Message& kept, uint32_t have, const Message& m, uint32_t bit, const char* what) {
  if (kept.len != m.len || kept.tag != m.tag || kept.data != m.data || kept.flags != m.flags || kept.sid != m.sid) {
    ULNIC_WARN(FI_LOG_EP_DATA, "dropped a %s that disagrees with its message's others\n", what);
    return false;
  }
  if (have & bit) {
    ULNIC_WARN(FI_LOG_EP_DATA, "dropped a %s that came twice\n", what);
    return false;
  }
  return true;
}

// Chunk `h.chunk` (n bytes at `bytes`, in our segment) of streamed message
// h.seq: into its bound receive's buffer, or kept until one is posted (or
// the whole message becomes an unexpected one). Chunks that disagree with
// their message's others or come twice are dropped.
void on_chunk(Ep& ep, PeerRx& p, const WireHdr& h, Message&& m, const uint8_t* bytes, size_t n) {
  const uint64_t off = uint64_t(h.chunk) * kChunkBytes;
  auto it = p.streams.find(h.seq);
  if (it == p.streams.end()) {
    if (uint32_t(h.seq - p.expected) >= kMaxPendingPerPeer || p.early.count(h.seq)) {
      ULNIC_WARN(FI_LOG_EP_DATA, "dropped a chunk out of sequence (%u, expected %u)\n", h.seq, p.expected);
      return;
    }
    it = p.streams.emplace(h.seq, Stream{}).first;
    it->second.m = std::move(m);  // (m keeps its header fields for piece_ok)
    it->second.m.kind = kEager;
  }
  Stream& st = it->second;
  const uint32_t bit = 1u << h.chunk;
  if (!piece_ok(st.m, st.have, m, bit, "chunk")) return;
  drain(ep, p);  // binds it if it is next in order and a receive waits
  if (st.bound) {
    if (off < st.r.len) std::memcpy(static_cast<uint8_t*>(st.r.buf) + off, bytes, std::min<uint64_t>(n, st.r.len - off));
  } else {
    if (st.m.payload.empty()) {
      st.m.payload.resize(st.m.len);
      ep.unexpected_bytes += st.m.len + sizeof(Message);
    }
    std::memcpy(st.m.payload.data() + off, bytes, n);
  }
  st.have |= bit;
  if (st.bound && stream_whole(st)) {
    complete_recv(ep, st.r, st.m, std::min<uint64_t>(st.m.len, st.r.len));
    p.streams.erase(it);
    return;
  }
  drain(ep, p);  // whole, in order, and no receive: an unexpected message
}

// A fragment (kEagerFrag) of message `seq`: `n` bytes at `off` of its
// m.len. The message goes on in order once all its fragments are in. A
// fragment that disagrees with the others of its message, comes twice, or
// belongs to no message a correct sender has in flight is dropped.
void on_fragment(Ep& ep, uint32_t seq, Message&& m, uint64_t off, const uint8_t* bytes, size_t n) {
  PeerRx& p = peer_rx(ep, m);
  if (uint32_t(seq - p.expected) >= kMaxPendingPerPeer) {
    ULNIC_WARN(FI_LOG_EP_DATA, "dropped a fragment out of sequence (%u, expected %u)\n", seq, p.expected);
    return;
  }
  auto [it, fresh] = p.partial.try_emplace(seq);
  Partial& a = it->second;
  if (fresh) {
    a.m = std::move(m);  // (m keeps its header fields for piece_ok)
    a.m.kind = kEager;
    a.m.payload.resize(a.m.len);
    ep.unexpected_bytes += a.m.len + sizeof(Message);
  }
  const uint32_t bit = 1u << (off / kEagerMax);
  if (!piece_ok(a.m, a.have, m, bit, "fragment")) return;
  a.have |= bit;
  std::memcpy(a.m.payload.data() + off, bytes, n);
  const uint32_t frags = uint32_t((a.m.len + kEagerMax - 1) / kEagerMax);
  if (a.have != (uint32_t(1) << frags) - 1) return;
  Message whole = std::move(a.m);
  ep.unexpected_bytes -= whole.len + sizeof(Message);
  p.partial.erase(it);
  in_order(ep, seq, std::move(whole));
}

// ---------------------------------------------------------------- lanes

// Ranges of a lane taken out of order (beyond `freed`): a correct sender
// has few (the messages the NIC refused for a full ring and took later
// ones instead); beyond this many a Long is dropped.
constexpr size_t kMaxLaneRanges = 256;

// A sender asks for a lane: the first free one, or none (len 0). Its
// messages go in fragments until the grant comes, or for good.
void on_lane_req(Ep& ep, const Message& from) {
  PeerRx& p = peer_rx(ep, from);
  if (p.lane >= 0) {
    ULNIC_WARN(FI_LOG_EP_DATA, "dropped a second lane request from one sender\n");
    return;
  }
  WireHdr g = header(ep, kLaneGrant);
  for (size_t i = 0; i < ep.lanes.size(); ++i) {
    if (ep.lanes[i].used) continue;
    ep.lanes[i] = LaneRx{};
    ep.lanes[i].used = true;
    ep.lanes[i].gen = ++ep.lane_gen;
    p.lane = int(i);
    g.data = i * kLaneBytes;
    g.len = kLaneBytes;
    g.sid = ep.lanes[i].gen;
    break;
  }
  post_ctl(ep, from.src, g);
}

void on_lane_grant(Ep& ep, const Message& from, const WireHdr& h) {
  auto it = ep.lanes_tx.find({from.src_id, from.src.tag});
  if (it == ep.lanes_tx.end() || !it->second.asked || it->second.granted ||
      (h.len && (h.len < 2 * kFragMsgMax || h.len > (size_t(64) << 20) || h.data + h.len > UINT32_MAX))) {
    ULNIC_WARN(FI_LOG_EP_DATA, "dropped a lane grant we did not ask for, or a lane no Long can use\n");
    return;
  }
  LaneTx& t = it->second;
  if (!h.len) return;  // none to give: fragments it is
  t.granted = true;
  t.off = h.data;
  t.size = h.len;
  t.gen = h.sid;
}

void on_lane_release(Ep& ep, const Message& from, const WireHdr& h) {
  PeerRx& p = peer_rx(ep, from);
  if (p.lane < 0 || ep.lanes[p.lane].gen != h.sid) {
    ULNIC_WARN(FI_LOG_EP_DATA, "dropped the release of a lane the sender does not have\n");
    return;
  }
  ep.lanes[p.lane] = LaneRx{};
  p.lane = -1;
}

void on_credit(Ep& ep, const Message& from, const WireHdr& h) {
  auto it = ep.lanes_tx.find({from.src_id, from.src.tag});
  if (it == ep.lanes_tx.end() || !it->second.granted || it->second.gen != h.sid || h.len > it->second.head ||
      h.len < it->second.credited) {
    ULNIC_WARN(FI_LOG_EP_DATA, "dropped a credit for no lane of ours, or for bytes we did not send\n");
    return;
  }
  it->second.credited = h.len;
}

// A Long in the sender's lane: checked against the lane (its range lies
// within the room our credits gave, overlaps no other message's, and is
// where the NIC put it), copied out -- on in order as an eager message, or
// as a chunk of its stream -- and its bytes freed (the sender told below).
void on_long(Ep& ep, const abi::AmRxEntry& e, const WireHdr& h, Message&& m) {
  PeerRx& p = peer_rx(ep, m);
  // A whole message (kEagerMax < len <= kFragMsgMax), or a chunk of one of
  // up to kStreamMax bytes (each kChunkBytes but the last).
  const bool chunk = h.flags & kWireChunk;
  const uint64_t n = e.long_len, start = h.rid, pos = h.rid + h.key;
  const uint64_t off = uint64_t(h.chunk) * kChunkBytes;
  const bool size_ok = chunk ? h.len > kEagerMax && h.len <= kStreamMax && off < h.len &&
                                   n == std::min<uint64_t>(kChunkBytes, h.len - off)
                             : n == h.len && n > kEagerMax && n <= kFragMsgMax;
  LaneRx* l = p.lane >= 0 ? &ep.lanes[p.lane] : nullptr;
  const bool ok = l && size_ok && start >= l->freed && pos >= start && h.key < kLaneBytes &&
                  pos - l->freed + n <= kLaneBytes && pos % kLaneBytes + n <= kLaneBytes &&
                  e.long_offset == p.lane * kLaneBytes + pos % kLaneBytes && l->done.size() < kMaxLaneRanges;
  auto next = ok ? l->done.upper_bound(start) : decltype(l->done)::iterator{};
  if (!ok || (next != l->done.begin() && std::prev(next)->second > start) ||
      (next != l->done.end() && next->first < pos + n)) {
    ULNIC_WARN(FI_LOG_EP_DATA, "dropped a Long outside its sender's lane\n");
    return;
  }
  // Copied out (into the receive buffer, or kept) before the bytes are
  // freed: a credit lets the sender overwrite them.
  const int lane = p.lane;
  const Addr src = m.src;
  m.kind = kEager;
  if (chunk)
    on_chunk(ep, p, h, std::move(m), ep.segment + e.long_offset, n);
  else
    in_order(ep, h.seq, std::move(m), ep.segment + e.long_offset);
  l = &ep.lanes[lane];
  l->done.emplace(start, pos + n);
  while (!l->done.empty() && l->done.begin()->first == l->freed) {
    l->freed = l->done.begin()->second;
    l->done.erase(l->done.begin());
  }
  // The sender is told each quarter lane freed, and whenever the lane is
  // empty again (nothing taken out of order) with 64 KiB freed: its next
  // eager message may be waiting for just that.
  if (l->freed - l->reported >= (l->done.empty() ? kDefaultEagerSize : kLaneBytes / 4)) {
    WireHdr c = header(ep, kCredit);
    c.len = l->freed;
    c.sid = l->gen;
    post_ctl(ep, src, c);
    l->reported = l->freed;
  }
}

void on_cts(Ep& ep, const Message& from, const WireHdr& h) {
  auto it = ep.sends.find(h.sid);
  if (it == ep.sends.end() || !it->second.rendezvous || it->second.cts || addr_id(it->second.dst) != from.src_id ||
      h.len > it->second.len) {
    ULNIC_WARN(FI_LOG_EP_DATA, "dropped a CTS that names no rendezvous of ours with its sender\n");
    return;
  }
  Send& s = it->second;
  s.cts = true;
  s.rid = h.rid;
  if (h.flags & kWireFailed) {  // the receiver could not take it
    fail_send(ep, s.id, kErrRemoteFailed);
    return;
  }
  s.put_len = h.len;
  s.rkey = h.key;
  s.raddr = h.data;
  if (s.put_len == 0) {  // nothing to put (an empty message, or a receive buffer of 0 bytes)
    WireHdr f = header(ep, kFin);
    f.sid = s.id;
    f.rid = s.rid;
    post_ctl(ep, s.dst, f);
    complete_send(ep, s, 0, 0);
    ep.sends.erase(it);
    return;
  }
  if (!start_put(ep, s)) ep.cts_waiting.push_back(s.id);
}

void on_fin(Ep& ep, const Message& from, const WireHdr& h) {
  auto it = ep.rndv.find(h.rid);
  if (it == ep.rndv.end() || !it->second.cts_sent || it->second.m.src_id != from.src_id ||
      it->second.m.sid != h.sid) {
    ULNIC_WARN(FI_LOG_EP_DATA, "dropped a FIN that names no rendezvous of ours with its sender\n");
    return;
  }
  RndvRecv& rv = it->second;
  if (h.flags & kWireFailed) {
    release(*ep.dom, rv.reg, rv.bounce);
    Completion c = recv_completion(ep, rv.r, rv.m, 0);
    c.err = FI_EIO;
    c.prov_errno = kErrRemoteFailed;
    c.err_text = prov_strerror(kErrRemoteFailed);
    report(ep, std::move(c), true);
  } else {
    if (rv.bounce) std::memcpy(rv.r.buf, rv.bounce, rv.n);
    recycle(*ep.dom, rv.reg, rv.bounce, rv.m.src_id);
    complete_recv(ep, rv.r, rv.m, rv.n);
  }
  ep.rndv.erase(it);
}

void on_read_req(Ep& ep, const Message& from, const WireHdr& h);  // RMA, below
void on_read_done(Ep& ep, const Message& from, const WireHdr& h);
void on_write_data(Ep& ep, const Message& from, const WireHdr& h);

// One ring entry (the message after its AmRxEntry), checked.
void handle_entry(Ep& ep, const abi::AmRxEntry& e, const uint8_t* msg) {
  if (e.len < sizeof(WireHdr) || e.len > abi::kAmMaxMessage) return;  // 0: the NIC gave up on it
  WireHdr h;
  std::memcpy(&h, msg, sizeof h);
  if (h.magic != kWireMagic || (e.long_len != 0) != (h.kind == kEagerLong)) return;
  Message m;
  m.kind = h.kind;
  m.flags = h.flags;
  m.src = Addr{e.src_node, e.src_slot, e.src_ep, kAddrVersion, 0, h.src_tag};
  m.src_id = addr_id(m.src);
  m.len = h.len;
  m.tag = h.tag;
  m.data = h.data;
  m.sid = h.sid;
  switch (h.kind) {
    case kEager:
      if (h.len != e.len - sizeof h) return;
      in_order(ep, h.seq, std::move(m), msg + sizeof h);
      return;
    case kEagerFrag: {
      const uint64_t n = e.len - sizeof h;
      if (h.len <= kEagerMax || h.len > kFragMsgMax || h.rid % kEagerMax || h.rid >= h.len ||
          n != std::min<uint64_t>(kEagerMax, h.len - h.rid))
        return;
      on_fragment(ep, h.seq, std::move(m), h.rid, msg + sizeof h, n);
      return;
    }
    case kEagerLong:
      if (e.len != sizeof h) return;
      on_long(ep, e, h, std::move(m));
      return;
    case kLaneReq:
      on_lane_req(ep, m);
      return;
    case kLaneGrant:
      on_lane_grant(ep, m, h);
      return;
    case kCredit:
      on_credit(ep, m, h);
      return;
    case kLaneRelease:
      on_lane_release(ep, m, h);
      return;
    case kRts:
      if (h.len <= kEagerMax || h.len > kMaxMsg) return;
      in_order(ep, h.seq, std::move(m));
      return;
    case kCts:
      on_cts(ep, m, h);
      return;
    case kFin:
      on_fin(ep, m, h);
      return;
    case kReadReq:
      on_read_req(ep, m, h);
      return;
    case kReadDone:
      on_read_done(ep, m, h);
      return;
    case kWriteData:
      on_write_data(ep, m, h);
      return;
    case kProbe:  // its sender asked its NIC whether we are here: the answer was the delivery
    default:
      return;
  }
}

const abi::AmRxEntry* ready_entry(Ep& ep) {
  auto* e = reinterpret_cast<const abi::AmRxEntry*>(ep.ring + sizeof(abi::AmRingControl) +
                                                    (ep.ring_consumed % kRingEntries) * abi::kAmEntryBytes);
  // acquire: the NIC wrote the entry before its seq (its release)
  uint32_t seq = __atomic_load_n(&e->seq, __ATOMIC_ACQUIRE);
  return seq == uint32_t(ep.ring_consumed + 1) ? e : nullptr;
}

void consume_entry(Ep& ep) {
  ep.ring_consumed++;
  auto* ctl = reinterpret_cast<abi::AmRingControl*>(ep.ring);
  // release: done reading the entry; the NIC reuses it once it sees this
  __atomic_store_n(&ctl->consumed, ep.ring_consumed, __ATOMIC_RELEASE);
}

// ---------------------------------------------------------------- posting receives

// FI_PEEK (fi_tagged(3), how MPI_Iprobe / MPI_Improbe look): a completion
// that describes the first unexpected message the receive would match
// (length, tag, data, source; no buffer), or an FI_ENOMSG error entry if
// none has arrived. With FI_CLAIM the message is set aside for the receive
// that names the same fi_context with FI_CLAIM (MPI_Mrecv); with FI_DISCARD
// it is dropped. FI_CLAIM alone takes the message set aside -- into the
// buffer, or dropped with FI_DISCARD (a completion of 0 bytes). A dropped
// rendezvous is answered with an empty CTS, so its sender completes too.
ssize_t peek_or_claim(Ep& ep, Recv& r, uint64_t flags) {
  auto* fc = static_cast<fi_context*>(r.context);
  if ((flags & FI_CLAIM) && !fc) return -FI_EINVAL;  // the claim is kept in the application's fi_context
  r.discard = flags & FI_DISCARD;
  if (r.discard) r.buf = nullptr, r.len = 0, r.desc = nullptr;
  if (!(flags & FI_PEEK)) {
    auto it = ep.claimed.find(reinterpret_cast<uint64_t>(fc->internal[0]));
    if (it == ep.claimed.end()) return -FI_EINVAL;
    Message m = std::move(it->second);
    ep.claimed.erase(it);
    start_recv(ep, r, m);
    return 0;
  }
  auto& unexpected = r.tagged ? ep.unexpected_tagged : ep.unexpected_msg;
  auto it = std::find_if(unexpected.begin(), unexpected.end(), [&](const Message& m) { return matches(r, m); });
  if (it == unexpected.end()) {
    Completion c;
    c.e.op_context = r.context;
    c.e.flags = FI_RECV | (r.tagged ? FI_TAGGED : FI_MSG);
    c.err = FI_ENOMSG;
    c.err_text = "ulnic: FI_PEEK: no message matches";
    cq_push(ep.rx_cq, std::move(c));
    return 0;
  }
  Recv look = r;
  look.len = it->len;  // describes the message whole: no truncation
  Completion c = recv_completion(ep, look, *it, it->len);
  c.e.buf = nullptr;
  if (flags & (FI_CLAIM | FI_DISCARD)) {
    Message m = std::move(*it);
    unexpected.erase(it);
    ep.unexpected_bytes -= m.payload.size() + sizeof(Message);
    if (flags & FI_CLAIM) {
      uint64_t id = ep.dom->next_op++;
      fc->internal[0] = reinterpret_cast<void*>(id);
      ep.claimed.emplace(id, std::move(m));
    } else {
      r.completion = false;  // the peek's completion is the only one
      start_recv(ep, r, m);
    }
  }
  cq_push(ep.rx_cq, std::move(c));
  return 0;
}

ssize_t do_recv(Ep& ep, void* buf, size_t len, void* desc, fi_addr_t src, bool tagged, uint64_t tag,
                uint64_t ignore, void* context, uint64_t flags) {
  Domain& d = *ep.dom;
  std::lock_guard lk(d.mu);
  if (!ep.enabled) return -FI_EOPBADSTATE;
  if (len && !buf) return -FI_EINVAL;
  Recv r;
  r.buf = buf;
  r.len = len;
  r.desc = static_cast<Mr*>(desc);
  r.tagged = tagged;
  r.tag = tag;
  r.ignore = ignore;
  r.context = context;
  r.completion = !ep.rx_selective || (flags & FI_COMPLETION);
  if ((ep.caps & FI_DIRECTED_RECV) && src != FI_ADDR_UNSPEC) {
    const Addr* a = ep.av ? ep.av->lookup(src) : nullptr;
    if (!a) return -FI_EINVAL;
    r.directed = true;
    r.src = src;
    r.src_id = addr_id(*a);
  }
  if (flags & (FI_PEEK | FI_CLAIM)) return peek_or_claim(ep, r, flags);
  auto& unexpected = tagged ? ep.unexpected_tagged : ep.unexpected_msg;
  for (auto it = unexpected.begin(); it != unexpected.end(); ++it) {
    if (!matches(r, *it)) continue;
    Message m = std::move(*it);
    unexpected.erase(it);
    ep.unexpected_bytes -= m.payload.size() + sizeof(Message);
    start_recv(ep, r, m);
    return 0;
  }
  (tagged ? ep.posted_tagged : ep.posted_msg).push_back(r);
  return 0;
}

// ---------------------------------------------------------------- fi_ops_msg / fi_ops_tagged

uint64_t send_flags(const Ep& ep) { return ep.tx_op_flags & FI_COMPLETION; }

// iov_limit is 1: the one buffer of a vector call (none for a count of 0).
struct One {
  void* buf = nullptr;
  size_t len = 0;
  void* desc = nullptr;
};
One one(const iovec* iov, void** desc, size_t count) {
  if (!count) return {};
  return {iov[0].iov_base, iov[0].iov_len, desc ? desc[0] : nullptr};
}
uint64_t recv_flags(const Ep& ep) { return ep.rx_op_flags & FI_COMPLETION; }

ssize_t msg_recv(fid_ep* e, void* buf, size_t len, void* desc, fi_addr_t src, void* ctx) {
  Ep& ep = *as_ep(e);
  return do_recv(ep, buf, len, desc, src, false, 0, 0, ctx, recv_flags(ep));
}
ssize_t msg_recvv(fid_ep* e, const iovec* iov, void** desc, size_t count, fi_addr_t src, void* ctx) {
  if (count > 1) return -FI_EINVAL;
  One o = one(iov, desc, count);
  return msg_recv(e, o.buf, o.len, o.desc, src, ctx);
}
ssize_t msg_recvmsg(fid_ep* e, const fi_msg* m, uint64_t flags) {
  if (m->iov_count > 1) return -FI_EINVAL;
  One o = one(m->msg_iov, m->desc, m->iov_count);
  return do_recv(*as_ep(e), o.buf, o.len, o.desc, m->addr, false, 0, 0, m->context, flags);
}
ssize_t msg_send(fid_ep* e, const void* buf, size_t len, void* desc, fi_addr_t dest, void* ctx) {
  Ep& ep = *as_ep(e);
  return do_send(ep, buf, len, desc, dest, false, 0, 0, ctx, send_flags(ep));
}
ssize_t msg_sendv(fid_ep* e, const iovec* iov, void** desc, size_t count, fi_addr_t dest, void* ctx) {
  if (count > 1) return -FI_EINVAL;
  One o = one(iov, desc, count);
  return msg_send(e, o.buf, o.len, o.desc, dest, ctx);
}
ssize_t msg_sendmsg(fid_ep* e, const fi_msg* m, uint64_t flags) {
  if (m->iov_count > 1) return -FI_EINVAL;
  One o = one(m->msg_iov, m->desc, m->iov_count);
  return do_send(*as_ep(e), o.buf, o.len, o.desc, m->addr, false, 0, m->data, m->context, flags);
}
ssize_t msg_inject(fid_ep* e, const void* buf, size_t len, fi_addr_t dest) {
  return do_send(*as_ep(e), buf, len, nullptr, dest, false, 0, 0, nullptr, FI_INJECT);
}
ssize_t msg_senddata(fid_ep* e, const void* buf, size_t len, void* desc, uint64_t data, fi_addr_t dest, void* ctx) {
  Ep& ep = *as_ep(e);
  return do_send(ep, buf, len, desc, dest, false, 0, data, ctx, send_flags(ep) | FI_REMOTE_CQ_DATA);
}
ssize_t msg_injectdata(fid_ep* e, const void* buf, size_t len, uint64_t data, fi_addr_t dest) {
  return do_send(*as_ep(e), buf, len, nullptr, dest, false, 0, data, nullptr, FI_INJECT | FI_REMOTE_CQ_DATA);
}
fi_ops_msg msg_ops = {sizeof(fi_ops_msg), msg_recv, msg_recvv, msg_recvmsg, msg_send, msg_sendv,
                      msg_sendmsg,        msg_inject, msg_senddata, msg_injectdata};

ssize_t tag_recv(fid_ep* e, void* buf, size_t len, void* desc, fi_addr_t src, uint64_t tag, uint64_t ignore,
                 void* ctx) {
  Ep& ep = *as_ep(e);
  return do_recv(ep, buf, len, desc, src, true, tag, ignore, ctx, recv_flags(ep));
}
ssize_t tag_recvv(fid_ep* e, const iovec* iov, void** desc, size_t count, fi_addr_t src, uint64_t tag,
                  uint64_t ignore, void* ctx) {
  if (count > 1) return -FI_EINVAL;
  One o = one(iov, desc, count);
  return tag_recv(e, o.buf, o.len, o.desc, src, tag, ignore, ctx);
}
ssize_t tag_recvmsg(fid_ep* e, const fi_msg_tagged* m, uint64_t flags) {
  if (m->iov_count > 1) return -FI_EINVAL;
  if ((flags & FI_DISCARD) && !(flags & (FI_PEEK | FI_CLAIM))) return -FI_EINVAL;
  One o = one(m->msg_iov, m->desc, m->iov_count);
  return do_recv(*as_ep(e), o.buf, o.len, o.desc, m->addr, true, m->tag, m->ignore, m->context, flags);
}
ssize_t tag_send(fid_ep* e, const void* buf, size_t len, void* desc, fi_addr_t dest, uint64_t tag, void* ctx) {
  Ep& ep = *as_ep(e);
  return do_send(ep, buf, len, desc, dest, true, tag, 0, ctx, send_flags(ep));
}
ssize_t tag_sendv(fid_ep* e, const iovec* iov, void** desc, size_t count, fi_addr_t dest, uint64_t tag, void* ctx) {
  if (count > 1) return -FI_EINVAL;
  One o = one(iov, desc, count);
  return tag_send(e, o.buf, o.len, o.desc, dest, tag, ctx);
}
ssize_t tag_sendmsg(fid_ep* e, const fi_msg_tagged* m, uint64_t flags) {
  if (m->iov_count > 1) return -FI_EINVAL;
  One o = one(m->msg_iov, m->desc, m->iov_count);
  return do_send(*as_ep(e), o.buf, o.len, o.desc, m->addr, true, m->tag, m->data, m->context, flags);
}
ssize_t tag_inject(fid_ep* e, const void* buf, size_t len, fi_addr_t dest, uint64_t tag) {
  return do_send(*as_ep(e), buf, len, nullptr, dest, true, tag, 0, nullptr, FI_INJECT);
}
ssize_t tag_senddata(fid_ep* e, const void* buf, size_t len, void* desc, uint64_t data, fi_addr_t dest, uint64_t tag,
                     void* ctx) {
  Ep& ep = *as_ep(e);
  return do_send(ep, buf, len, desc, dest, true, tag, data, ctx, send_flags(ep) | FI_REMOTE_CQ_DATA);
}
ssize_t tag_injectdata(fid_ep* e, const void* buf, size_t len, uint64_t data, fi_addr_t dest, uint64_t tag) {
  return do_send(*as_ep(e), buf, len, nullptr, dest, true, tag, data, nullptr, FI_INJECT | FI_REMOTE_CQ_DATA);
}
fi_ops_tagged tagged_ops = {sizeof(fi_ops_tagged), tag_recv,    tag_recvv,    tag_recvmsg,   tag_send,
                            tag_sendv,             tag_sendmsg, tag_inject,   tag_senddata,  tag_injectdata};

// ---------------------------------------------------------------- fi_ops_ep, fi_ops_cm

ssize_t ep_cancel(fid* f, void* context) {
  Ep& ep = *as_ep(f);
  std::lock_guard lk(ep.dom->mu);
  for (auto* posted : {&ep.posted_msg, &ep.posted_tagged}) {
    for (auto it = posted->begin(); it != posted->end(); ++it) {
      if (it->context != context) continue;
      Completion c;
      c.e.op_context = context;
      c.e.flags = FI_RECV | (it->tagged ? FI_TAGGED : FI_MSG);
      c.e.buf = it->buf;
      c.e.tag = it->tag;
      c.err = FI_ECANCELED;
      c.prov_errno = kErrCanceled;
      posted->erase(it);
      report(ep, std::move(c), true);
      return 0;
    }
  }
  return -FI_ENOENT;
}
int ep_getopt(fid*, int, int, void*, size_t*) { return -FI_ENOPROTOOPT; }
int ep_setopt(fid*, int, int, const void*, size_t) { return -FI_ENOPROTOOPT; }
ssize_t ep_rx_left(fid_ep*) { return 1024; }
ssize_t ep_tx_left(fid_ep* e) {
  Ep& ep = *as_ep(e);
  std::lock_guard lk(ep.dom->mu);
  return ssize_t(ep.free_bufs.size());
}
// Scalable endpoints' contexts: none (one TX and one RX context per endpoint).
// ---------------------------------------------------------------- RMA
//
// fi_write: the NIC puts the bytes into the target's registered memory
// (post_put), and the target's NIC checks them against the key: the key of
// an MR registered without FI_REMOTE_WRITE is one the NIC lets no peer write
// through (objects.cpp, mr_reg). fi_read: the NIC reads remote memory only
// for VIs, so the reader registers its buffer for remote write and asks the
// target's provider (kReadReq), which checks that the key names an MR of its
// own registered with FI_REMOTE_READ covering the range, puts the bytes back
// and says so (kReadDone): the target takes part in its progress (the
// domain's progress is manual, as fi_getinfo says). Addresses are virtual
// (FI_MR_VIRT_ADDR) and keys the NIC's (FI_MR_PROV_KEY): fi_getinfo offers
// FI_RMA only with both.

void complete_rma(Ep& ep, RmaOp& op, int err, int prov_errno) {
  if (err) release(*ep.dom, op.reg, op.bounce);
  else recycle(*ep.dom, op.reg, op.bounce, op.peer_id);
  Completion c;
  c.e.op_context = op.context;
  c.e.flags = FI_RMA | (op.read ? FI_READ : FI_WRITE);
  c.err = err;
  c.prov_errno = prov_errno;
  if (err) c.err_text = prov_strerror(prov_errno);
  report(ep, std::move(c), op.completion);
}

void end_rma(Ep& ep, uint64_t id, int err, int prov_errno) {
  auto it = ep.rma.find(id);
  if (it == ep.rma.end()) return;
  RmaOp& op = it->second;
  if (!err && op.read && op.bounce) std::memcpy(op.buf, op.bounce, op.len);
  complete_rma(ep, op, err, prov_errno);
  ep.rma.erase(it);
}

// fi_writedata: the target hears of a write that is complete (every byte
// placed: the put's completion said so) and of its remote CQ data.
void notify_write(Ep& ep, const RmaOp& op) {
  WireHdr h = header(ep, kWriteData);
  h.flags = kWireData;
  h.len = op.len;
  h.tag = op.raddr;
  h.data = op.data;
  h.sid = op.id;
  post_ctl(ep, op.dst, h);
}

// A write's remote CQ data at its target: an entry in the receive CQ
// (FI_RMA | FI_REMOTE_WRITE | FI_REMOTE_CQ_DATA; no receive is taken, the
// provider asks no FI_RX_CQ_DATA mode). Its sender is any peer that may
// send us messages: what it says is reported, as a message's data is.
void on_write_data(Ep& ep, const Message& from, const WireHdr& h) {
  if (!(ep.caps & FI_RMA) || h.len > kMaxMsg) {
    ULNIC_WARN(FI_LOG_EP_DATA, "dropped a write's remote CQ data that this endpoint cannot have\n");
    return;
  }
  Completion c;
  c.e.flags = FI_RMA | FI_REMOTE_WRITE | FI_REMOTE_CQ_DATA;
  c.e.len = h.len;
  c.e.buf = reinterpret_cast<void*>(h.tag);
  c.e.data = h.data;
  c.src = source(ep, from.src_id);
  cq_push(ep.rx_cq, std::move(c));
}

ssize_t do_rma(Ep& ep, bool read, void* buf, size_t len, void* desc, fi_addr_t dest, uint64_t addr, uint64_t key,
               void* context, uint64_t flags, uint64_t data = 0) {
  Domain& d = *ep.dom;
  std::lock_guard lk(d.mu);
  if (!ep.enabled) return -FI_EOPBADSTATE;
  if (!(ep.caps & FI_RMA)) return -FI_EOPNOTSUPP;
  if (!ep.av) return -FI_ENOAV;
  const Addr* dst = ep.av->lookup(dest);
  if (!dst || len > kMaxMsg || key > UINT32_MAX || (len && !buf)) return -FI_EINVAL;
  if ((flags & FI_INJECT) && len > kEagerMax) return -FI_EMSGSIZE;
  RmaOp op;
  op.id = d.next_op++;
  op.read = read;
  op.peer_id = addr_id(*dst);
  op.dst = *dst;
  op.raddr = addr;
  op.has_data = !read && (flags & FI_REMOTE_CQ_DATA);
  op.data = data;
  op.buf = static_cast<uint8_t*>(buf);
  op.len = len;
  op.context = context;
  op.completion = !(flags & FI_INJECT) && (!ep.tx_selective || (flags & FI_COMPLETION));
  if (len == 0) {  // nothing to move (the remote CQ data still goes)
    if (op.has_data) notify_write(ep, op);
    complete_rma(ep, op, 0, 0);
    return 0;
  }
  // Ours: a desc, or the buffer registered (a reader's for the target to put
  // into); an injected write's bytes are copied now, into a stand-in.
  const uint32_t access = read ? abi::kAccessLocal | abi::kAccessRemoteWrite : abi::kAccessLocal;
  uint32_t lkey = 0;
  auto* mr = static_cast<Mr*>(desc);
  if (!(flags & FI_INJECT) && mr_covers(d, mr, buf, len)) {
    lkey = mr->region.key;
  } else {
    const bool busy = held(d).any();
    auto r = (flags & FI_INJECT) ? bounce_buffer(d, len, access, op.peer_id, op.bounce)
                                 : bounce_or_register(d, buf, len, access, op.peer_id, op.bounce, busy);
    if (!r && busy) return -FI_EAGAIN;  // room comes back as those end: try again after progress
    if (!r) {
      ULNIC_WARN(FI_LOG_EP_DATA, "cannot register an RMA buffer: %s\n", r.error().message.c_str());
      return -FI_ENOMEM;
    }
    op.reg = *r;
    lkey = r->key;
    if (op.bounce && !read) std::memcpy(op.bounce, buf, len);
  }
  const uint64_t local = reinterpret_cast<uint64_t>(op.bounce ? op.bounce : op.buf);
  bool posted;
  if (read) {
    WireHdr h = header(ep, kReadReq);
    h.key = uint32_t(key);
    h.data = addr;
    h.len = len;
    h.sid = op.id;
    h.tag = local;
    h.rid = lkey;
    posted = post_msg(ep, *dst, h, nullptr, 0, op.id);
  } else {
    posted = post_put(ep, kPostWrite, op.id, *dst, local, lkey, len, uint32_t(key), addr);
  }
  if (!posted) {  // the key went nowhere
    recycle(d, op.reg, op.bounce, op.peer_id);
    return -FI_EAGAIN;
  }
  ep.rma.emplace(op.id, std::move(op));
  return 0;
}

// The put of a read we serve; false if the SQ has no room (it waits).
bool start_served_read(Ep& ep, const ServedRead& r) {
  uint64_t id = ep.dom->next_op++;
  if (!post_put(ep, kPostReadPut, id, r.peer, r.src, r.src_key, r.len, r.dst_key, r.dst_addr)) return false;
  ep.serving.emplace(id, r);
  return true;
}

void read_done(Ep& ep, const Addr& peer, uint64_t sid, bool ok) {
  WireHdr done = header(ep, kReadDone);
  done.sid = sid;
  if (!ok) done.flags = kWireFailed;
  post_ctl(ep, peer, done);
}

// A peer's fi_read of our memory: only through the key of an MR of ours
// registered with FI_REMOTE_READ, and only within it.
void on_read_req(Ep& ep, const Message& from, const WireHdr& h) {
  Domain& d = *ep.dom;
  Mr* mr = nullptr;
  for (Mr* m : d.mrs)
    if (m->fid.key == h.key) mr = m;
  const bool ok = mr && (mr->access & FI_REMOTE_READ) && h.len && h.len <= kMaxMsg &&
                  mr_covers(d, mr, reinterpret_cast<const void*>(h.data), h.len);
  if (!ok) {
    ULNIC_INFO(FI_LOG_EP_DATA, "refused a read: no MR with FI_REMOTE_READ covers it\n");
    read_done(ep, from.src, h.sid, false);
    return;
  }
  ServedRead r{from.src, h.sid, h.data, h.len, mr->region.key, uint32_t(h.rid), h.tag};
  if (!ep.reads_waiting.empty() || !start_served_read(ep, r)) ep.reads_waiting.push_back(r);
}

void on_read_done(Ep& ep, const Message& from, const WireHdr& h) {
  auto it = ep.rma.find(h.sid);
  if (it == ep.rma.end() || !it->second.read || it->second.peer_id != from.src_id) {
    ULNIC_WARN(FI_LOG_EP_DATA, "dropped a read's answer that names no read of ours with its sender\n");
    return;
  }
  end_rma(ep, h.sid, (h.flags & kWireFailed) ? FI_EIO : 0, (h.flags & kWireFailed) ? kErrReadRefused : 0);
}

// iov_limit is 1, and one remote range.
bool one_rma(const fi_msg_rma* m) {
  return m && m->iov_count <= 1 && m->rma_iov_count == 1 && (m->iov_count ? m->msg_iov[0].iov_len : 0) ==
                                                                m->rma_iov[0].len;
}

ssize_t rma_read(fid_ep* e, void* buf, size_t len, void* desc, fi_addr_t src, uint64_t addr, uint64_t key, void* ctx) {
  Ep& ep = *as_ep(e);
  return do_rma(ep, true, buf, len, desc, src, addr, key, ctx, ep.tx_op_flags & FI_COMPLETION);
}
ssize_t rma_readv(fid_ep* e, const iovec* iov, void** desc, size_t count, fi_addr_t src, uint64_t addr, uint64_t key,
                  void* ctx) {
  if (count > 1) return -FI_EINVAL;
  One o = one(iov, desc, count);
  return rma_read(e, o.buf, o.len, o.desc, src, addr, key, ctx);
}
ssize_t rma_readmsg(fid_ep* e, const fi_msg_rma* m, uint64_t flags) {
  if (!one_rma(m)) return -FI_EINVAL;
  One o = one(m->msg_iov, m->desc, m->iov_count);
  return do_rma(*as_ep(e), true, o.buf, o.len, o.desc, m->addr, m->rma_iov[0].addr, m->rma_iov[0].key, m->context,
                flags & FI_COMPLETION);
}
ssize_t rma_write(fid_ep* e, const void* buf, size_t len, void* desc, fi_addr_t dest, uint64_t addr, uint64_t key,
                  void* ctx) {
  Ep& ep = *as_ep(e);
  return do_rma(ep, false, const_cast<void*>(buf), len, desc, dest, addr, key, ctx, ep.tx_op_flags & FI_COMPLETION);
}
ssize_t rma_writev(fid_ep* e, const iovec* iov, void** desc, size_t count, fi_addr_t dest, uint64_t addr, uint64_t key,
                   void* ctx) {
  if (count > 1) return -FI_EINVAL;
  One o = one(iov, desc, count);
  return rma_write(e, o.buf, o.len, o.desc, dest, addr, key, ctx);
}
ssize_t rma_writemsg(fid_ep* e, const fi_msg_rma* m, uint64_t flags) {
  if (!one_rma(m)) return -FI_EINVAL;
  One o = one(m->msg_iov, m->desc, m->iov_count);
  return do_rma(*as_ep(e), false, o.buf, o.len, o.desc, m->addr, m->rma_iov[0].addr, m->rma_iov[0].key, m->context,
                flags & (FI_COMPLETION | FI_INJECT | FI_REMOTE_CQ_DATA), m->data);
}
ssize_t rma_inject(fid_ep* e, const void* buf, size_t len, fi_addr_t dest, uint64_t addr, uint64_t key) {
  return do_rma(*as_ep(e), false, const_cast<void*>(buf), len, nullptr, dest, addr, key, nullptr, FI_INJECT);
}
ssize_t rma_writedata(fid_ep* e, const void* buf, size_t len, void* desc, uint64_t data, fi_addr_t dest, uint64_t addr,
                      uint64_t key, void* ctx) {
  Ep& ep = *as_ep(e);
  return do_rma(ep, false, const_cast<void*>(buf), len, desc, dest, addr, key, ctx,
                (ep.tx_op_flags & FI_COMPLETION) | FI_REMOTE_CQ_DATA, data);
}
ssize_t rma_injectdata(fid_ep* e, const void* buf, size_t len, uint64_t data, fi_addr_t dest, uint64_t addr,
                       uint64_t key) {
  return do_rma(*as_ep(e), false, const_cast<void*>(buf), len, nullptr, dest, addr, key, nullptr,
                FI_INJECT | FI_REMOTE_CQ_DATA, data);
}
fi_ops_rma rma_ops = {sizeof(fi_ops_rma), rma_read,  rma_readv,     rma_readmsg,   rma_write,
                      rma_writev,         rma_writemsg, rma_inject, rma_writedata, rma_injectdata};

int no_tx_ctx(fid_ep*, int, fi_tx_attr*, fid_ep**, void*) { return -FI_ENOSYS; }
int no_rx_ctx(fid_ep*, int, fi_rx_attr*, fid_ep**, void*) { return -FI_ENOSYS; }
fi_ops_ep ep_ops = {sizeof(fi_ops_ep), ep_cancel, ep_getopt, ep_setopt, no_tx_ctx, no_rx_ctx, ep_rx_left, ep_tx_left};

int cm_getname(fid_t f, void* addr, size_t* addrlen) {
  Ep& ep = *as_ep(f);
  size_t given = *addrlen;
  *addrlen = sizeof(Addr);
  if (given < sizeof(Addr)) return -FI_ETOOSMALL;
  Addr a = ep.self();
  std::memcpy(addr, &a, sizeof a);
  return 0;
}
int cm_setname(fid_t, void*, size_t) { return -FI_ENOSYS; }
int cm_getpeer(fid_ep*, void*, size_t*) { return -FI_ENOSYS; }
// Connections are for FI_EP_MSG: none here.
int cm_connect(fid_ep*, const void*, const void*, size_t) { return -FI_ENOSYS; }
int cm_listen(fid_pep*) { return -FI_ENOSYS; }
int cm_accept(fid_ep*, const void*, size_t) { return -FI_ENOSYS; }
int cm_reject(fid_pep*, fid_t, const void*, size_t) { return -FI_ENOSYS; }
int cm_shutdown(fid_ep*, uint64_t) { return -FI_ENOSYS; }
fi_ops_cm cm_ops = {sizeof(fi_ops_cm), cm_setname, cm_getname, cm_getpeer, cm_connect, cm_listen, cm_accept,
                    cm_reject, cm_shutdown, nullptr};

// ---------------------------------------------------------------- fid ops

// The NIC's AM endpoint: configured at fi_enable, freed at close.
bool configure(Ep& ep, bool close) {
  Nic& nic = *ep.dom->nic;
  return close ? nic.close_am_endpoint(ep.index, kNicWait)
               : nic.configure_am_endpoint(ep.index, ep.tag, ep.ring_mr, kRingEntries,
                                           ep.segment ? &ep.seg_mr : nullptr, kNicWait);
}

void free_ep(Ep* ep) {
  Domain& d = *ep->dom;
  if (ep->ring_mr.key) (void)d.nic->deregister(ep->ring_mr);
  if (ep->bufs_mr.key) (void)d.nic->deregister(ep->bufs_mr);
  if (ep->longs_mr.key) (void)d.nic->deregister(ep->longs_mr);
  if (ep->seg_mr.key) (void)d.nic->deregister(ep->seg_mr);
  if (ep->ring) d.nic->free(ep->ring);
  if (ep->bufs) d.nic->free(ep->bufs);
  if (ep->longs) d.nic->free(ep->longs);
  if (ep->segment) d.nic->free(ep->segment);
  d.ep_at[ep->index] = nullptr;
  for (Cntr* c : {ep->send_cntr, ep->recv_cntr, ep->write_cntr, ep->read_cntr})
    if (c) --c->binds;
  delete ep;
}

int ep_close(fid* f) {
  Ep* ep = as_ep(f);
  Domain& d = *ep->dom;
  std::unique_lock lk(d.mu);
  // The NIC may still read our send buffers: let its descriptors finish
  // (they complete or fail within the link's deadline).
  auto has_posts = [&] {
    for (auto& [ud, p] : d.posts)
      if (p.ep == ep) return true;
    return false;
  };
  auto drain = [&] {
    auto deadline = std::chrono::steady_clock::now() + milliseconds(6000);
    while (has_posts() && std::chrono::steady_clock::now() < deadline) {
      (void)progress(d);
      if (!has_posts()) break;
      lk.unlock();
      (void)d.nic->wait_ready(milliseconds(10));
      lk.lock();
    }
  };
  drain();
  // The lanes we hold go back to their receivers -- now, when nothing of
  // ours is on its way: a Long that came after the release could land in
  // the lane of the receiver's next sender.
  if (ep->enabled) {
    for (auto& [key, t] : ep->lanes_tx) {
      if (!t.granted) continue;
      WireHdr r = header(*ep, kLaneRelease);
      r.sid = t.gen;
      post_ctl(*ep, t.dst, r);
    }
    drain();
  }
  for (auto it = d.posts.begin(); it != d.posts.end();)
    it = it->second.ep == ep ? d.posts.erase(it) : std::next(it);
  if (ep->enabled) (void)configure(*ep, true);
  for (auto& [id, s] : ep->sends) release(d, s.reg, s.bounce);
  for (auto& [id, rv] : ep->rndv) release(d, rv.reg, rv.bounce);
  for (auto& [id, op] : ep->rma) release(d, op.reg, op.bounce);
  d.eps.erase(std::remove(d.eps.begin(), d.eps.end(), ep), d.eps.end());
  free_ep(ep);
  return 0;
}

int ep_bind(fid* f, fid* b, uint64_t flags) {
  Ep& ep = *as_ep(f);
  std::lock_guard lk(ep.dom->mu);
  if (ep.enabled) return -FI_EOPBADSTATE;
  switch (b->fclass) {
    case FI_CLASS_CQ: {
      auto* cq = reinterpret_cast<Cq*>(b);
      if (cq->dom != ep.dom) return -FI_EINVAL;
      if (flags & ~uint64_t(FI_TRANSMIT | FI_RECV | FI_SELECTIVE_COMPLETION)) return -FI_EBADFLAGS;
      if (flags & FI_TRANSMIT) {
        ep.tx_cq = cq;
        ep.tx_selective = flags & FI_SELECTIVE_COMPLETION;
      }
      if (flags & FI_RECV) {
        ep.rx_cq = cq;
        ep.rx_selective = flags & FI_SELECTIVE_COMPLETION;
      }
      return 0;
    }
    case FI_CLASS_AV: {
      auto* av = reinterpret_cast<Av*>(b);
      if (av->dom != ep.dom) return -FI_EINVAL;
      ep.av = av;
      return 0;
    }
    case FI_CLASS_CNTR: {
      auto* c = reinterpret_cast<Cntr*>(b);
      if (c->dom != ep.dom) return -FI_EINVAL;
      if (flags & (FI_REMOTE_READ | FI_REMOTE_WRITE)) {
        // The NIC writes a target's memory without its provider (and no
        // FI_RMA_EVENT is offered): nothing could count those.
        ULNIC_INFO(FI_LOG_EP_CTRL, "counters of remote RMA (FI_REMOTE_READ/WRITE) are not supported\n");
        return -FI_ENOSYS;
      }
      if (flags & ~uint64_t(FI_SEND | FI_RECV | FI_READ | FI_WRITE)) return -FI_EBADFLAGS;
      if (!flags) return -FI_EINVAL;
      for (auto [bit, slot] : {std::pair{FI_SEND, &ep.send_cntr}, std::pair{FI_RECV, &ep.recv_cntr},
                               std::pair{FI_WRITE, &ep.write_cntr}, std::pair{FI_READ, &ep.read_cntr}}) {
        if (!(flags & bit)) continue;
        if (*slot) --(*slot)->binds;
        *slot = c;
        ++c->binds;
      }
      return 0;
    }
    case FI_CLASS_EQ:
      return 0;  // nothing to report on it (RDM/DGRAM: no connection events)
    default:
      ULNIC_INFO(FI_LOG_EP_CTRL, "only CQs, counters, AVs and EQs bind to an endpoint (no SRX)\n");
      return -FI_ENOSYS;
  }
}

int ep_control(fid* f, int command, void* arg) {
  Ep& ep = *as_ep(f);
  std::lock_guard lk(ep.dom->mu);
  switch (command) {
    case FI_ENABLE:
      if (ep.enabled) return 0;
      if (!ep.tx_cq || !ep.rx_cq) return -FI_ENOCQ;
      if (!ep.av) return -FI_ENOAV;
      if (!configure(ep, false)) {
        ULNIC_WARN(FI_LOG_EP_CTRL, "the NIC refused the AM endpoint\n");
        return -FI_EIO;
      }
      ep.enabled = true;
      return 0;
    case FI_GETOPSFLAG:
    case FI_SETOPSFLAG: {
      if (!arg) return -FI_EINVAL;
      auto* flags = static_cast<uint64_t*>(arg);
      bool tx = *flags & FI_TRANSMIT, rx = *flags & FI_RECV;
      if (tx == rx) return -FI_EINVAL;
      uint64_t& ours = tx ? ep.tx_op_flags : ep.rx_op_flags;
      if (command == FI_GETOPSFLAG)
        *flags = ours | (tx ? FI_TRANSMIT : FI_RECV);
      else
        ours = *flags & ~uint64_t(FI_TRANSMIT | FI_RECV);
      return 0;
    }
    default:
      return -FI_ENOSYS;
  }
}
int no_ops_open(fid*, const char*, uint64_t, void**, void*) { return -FI_ENOSYS; }
fi_ops ep_fi_ops = {sizeof(fi_ops), ep_close, ep_bind, ep_control, no_ops_open, nullptr, nullptr};

// ---------------------------------------------------------------- peers that are gone

// Rendezvous receive `id` fails (`status`): its buffer deregistered (the
// sender's NIC can no longer put into it) and an error entry.
void fail_rndv(Ep& ep, uint64_t id, int status) {
  auto it = ep.rndv.find(id);
  if (it == ep.rndv.end()) return;
  release(*ep.dom, it->second.reg, it->second.bounce);
  Completion c = recv_completion(ep, it->second.r, it->second.m, 0);
  c.err = FI_EIO;
  c.prov_errno = status;
  c.err_text = prov_strerror(status);
  report(ep, std::move(c), true);
  ep.rndv.erase(it);
}

// Does the NIC's verdict on a message say its endpoint is gone: no such
// endpoint (or another process's now), its slot detached, its NIC silent?
bool peer_is_gone(uint16_t status) {
  switch (status) {
    case abi::kCqAmBadEndpoint:
    case abi::kCqAmBadTag:
    case abi::kCqBadSlot:
    case abi::kCqRemoteBadSlot:
    case abi::kCqUnreachable:
      return true;
    default:
      return false;
  }
}

// A send that waits for its peer's word: a rendezvous for its CTS, a stream
// for credits. (One with a NIC descriptor in flight -- a put, an eager
// message -- ends by its own completion.)
bool waits_on_peer(const Send& s) { return !s.cts && (s.rendezvous || s.stream); }

// The operations of ours that wait for a peer's word: such sends,
// rendezvous receives waiting for its put and FIN (or for room), reads
// waiting for it to serve them, receives bound to its streams.
template <class F>
void for_waits(Ep& ep, F&& each) {
  for (auto& [id, s] : ep.sends)
    if (waits_on_peer(s)) each(s.dst);
  for (auto& [id, rv] : ep.rndv) each(rv.m.src);
  for (auto& [id, op] : ep.rma)
    if (op.read) each(op.dst);
  for (auto& [src, p] : ep.rx)
    for (auto& [seq, st] : p.streams)
      if (st.bound) each(st.m.src);
}

// Peer `a` is gone (a message to it failed so): every operation of ours that
// waits for it ends with an error entry (`status`, the NIC's word), and what
// we had from it is dropped. A peer that dies in the middle of a rendezvous
// or a stream would otherwise leave its partner waiting for ever.
void peer_gone(Ep& ep, const Addr& a, uint16_t status) {
  const uint64_t id = addr_id(a);
  std::vector<uint64_t> sends, rndv, reads;
  for (auto& [sid, s] : ep.sends)
    if (waits_on_peer(s) && addr_id(s.dst) == id && s.dst.tag == a.tag) sends.push_back(sid);
  for (auto& [rid, rv] : ep.rndv)
    if (rv.m.src_id == id && rv.m.src.tag == a.tag) rndv.push_back(rid);
  for (auto& [oid, op] : ep.rma)
    if (op.read && op.peer_id == id && op.dst.tag == a.tag) reads.push_back(oid);
  if (!sends.empty() || !rndv.empty() || !reads.empty())
    ULNIC_WARN(FI_LOG_EP_DATA, "a peer is gone (%s): %zu sends, %zu receives and %zu reads with it fail\n",
               prov_strerror(status), sends.size(), rndv.size(), reads.size());
  for (uint64_t sid : sends) fail_send(ep, sid, status);
  for (uint64_t rid : rndv) fail_rndv(ep, rid, status);
  for (uint64_t oid : reads) end_rma(ep, oid, FI_EIO, status);
  auto p = ep.rx.find(id);
  if (p != ep.rx.end() && p->second.incarnation == a.tag) forget_sender(ep, p->second, status);
}

// Every kProbeNs, a kProbe to each peer an operation of ours waits for: the
// peer ignores it, and its NIC's verdict says whether it is still there.
void probe_peers(Ep& ep, int64_t now) {
  if (ep.next_probe_ns == 0) ep.next_probe_ns = now + kProbeNs;
  if (now < ep.next_probe_ns) return;
  ep.next_probe_ns = now + kProbeNs;
  std::map<std::pair<uint64_t, uint64_t>, Addr> peers;
  for_waits(ep, [&](const Addr& a) { peers.emplace(std::make_pair(addr_id(a), a.tag), a); });
  for (const auto& [key, a] : peers) post_ctl(ep, a, header(ep, kProbe));
}

}  // namespace

Addr Ep::self() const {
  return Addr{uint16_t(dom->nic->node()), uint16_t(dom->nic->slot()), index, kAddrVersion, 0, tag};
}

namespace {
// Lanes and Long staging, if the slot heap has room for them (lanes take a
// sixteenth of the slot at most, staging a thirty-second, two buffers at
// least); without, messages above kEagerMax go in fragments.
void open_lanes(Domain& d, Ep& ep) {
  const size_t lanes = std::min<size_t>(kMaxLanes, d.nic->slot_size() / 16 / kLaneBytes);
  const size_t longs = std::clamp<size_t>(d.nic->slot_size() / 32 / kLongBufBytes, 2, kLongBufs);
  if (!lanes) return;
  ep.segment = static_cast<uint8_t*>(d.nic->alloc(lanes * kLaneBytes, 4096));
  ep.longs = static_cast<uint8_t*>(d.nic->alloc(longs * kLongBufBytes, 4096));
  auto sr = ep.segment ? d.nic->register_memory(ep.segment, lanes * kLaneBytes,
                                                abi::kAccessLocal | abi::kAccessRemoteWrite)
                       : Result<MemRegion>(fail("no room for lanes"));
  auto lr = ep.longs ? d.nic->register_memory(ep.longs, longs * kLongBufBytes, abi::kAccessLocal)
                     : Result<MemRegion>(fail("no room for Long staging"));
  if (sr) ep.seg_mr = *sr;
  if (lr) ep.longs_mr = *lr;
  if (!sr || !lr) {
    ULNIC_INFO(FI_LOG_EP_CTRL, "no lanes: messages above %u bytes go in fragments\n", unsigned(kEagerMax));
    if (ep.seg_mr.key) (void)d.nic->deregister(ep.seg_mr);
    if (ep.longs_mr.key) (void)d.nic->deregister(ep.longs_mr);
    if (ep.segment) d.nic->free(ep.segment);
    if (ep.longs) d.nic->free(ep.longs);
    ep.segment = ep.longs = nullptr;
    ep.seg_mr = ep.longs_mr = MemRegion{};
    return;
  }
  ep.lanes.resize(lanes);
  for (int b = int(longs) - 1; b >= 0; --b) ep.free_longs.push_back(b);
}
}  // namespace

int ep_open(fid_domain* domain, fi_info* info, fid_ep** out, void* context) {
  auto* dp = reinterpret_cast<Domain*>(domain);
  Domain& d = *dp;
  if (!info || !info->ep_attr || (info->ep_attr->type != FI_EP_RDM && info->ep_attr->type != FI_EP_DGRAM)) {
    ULNIC_INFO(FI_LOG_EP_CTRL, "only FI_EP_RDM and FI_EP_DGRAM endpoints\n");
    return -FI_ENOSYS;
  }
  std::lock_guard lk(d.mu);
  int index = -1;
  for (uint32_t i = 0; i < kMaxEndpoints; ++i)
    if (!d.ep_at[i]) {
      index = int(i);
      break;
    }
  if (index < 0) return -FI_ENOSPC;
  auto* ep = new Ep{};
  init_fid(ep->fid.fid, FI_CLASS_EP, context, &ep_fi_ops);
  ep->fid.ops = &ep_ops;
  ep->fid.cm = &cm_ops;
  ep->fid.msg = &msg_ops;
  ep->fid.tagged = &tagged_ops;
  ep->fid.rma = &rma_ops;
  ep->dom = dp;
  ep->type = info->ep_attr->type;
  ep->caps = info->caps ? info->caps : (FI_MSG | FI_TAGGED | FI_SEND | FI_RECV);
  ep->tx_op_flags = info->tx_attr ? info->tx_attr->op_flags : 0;
  ep->rx_op_flags = info->rx_attr ? info->rx_attr->op_flags : 0;
  ep->index = uint8_t(index);
  ep->tag = random_tag();
  d.ep_at[index] = ep;
  const size_t ring_bytes = sizeof(abi::AmRingControl) + size_t(kRingEntries) * abi::kAmEntryBytes;
  ep->ring = static_cast<uint8_t*>(d.nic->alloc(ring_bytes, 4096));
  ep->bufs = static_cast<uint8_t*>(d.nic->alloc(kSendBufs * kBufBytes, 4096));
  if (!ep->tag || !ep->ring || !ep->bufs) {
    free_ep(ep);
    return -FI_ENOMEM;
  }
  std::memset(ep->ring, 0, ring_bytes);
  auto rr = d.nic->register_memory(ep->ring, ring_bytes, abi::kAccessLocal);
  auto br = rr ? d.nic->register_memory(ep->bufs, kSendBufs * kBufBytes, abi::kAccessLocal) : rr;
  if (!rr || !br) {
    if (rr) ep->ring_mr = *rr;
    free_ep(ep);
    return -FI_ENOMEM;
  }
  ep->ring_mr = *rr;
  ep->bufs_mr = *br;
  for (int b = int(kSendBufs) - 1; b >= 0; --b) ep->free_bufs.push_back(b);
  open_lanes(d, *ep);
  d.eps.push_back(ep);
  *out = &ep->fid;
  return 0;
}

bool drop_idle_bounce(Domain& d) {
  if (d.idle.empty()) return false;
  Bounce& b = d.idle.front();
  d.idle_bytes -= b.reg.length;
  deregister(d, b.reg);
  d.nic->free(b.buf);
  d.idle.pop_front();
  return true;
}

// Under d.mu: control messages and rendezvous steps that waited, then the
// ring; the peers we wait for probed now and then.
bool ep_progress(Ep& ep) {
  bool did = false;
  while (!ep.ctl_backlog.empty()) {
    auto& [dst, h] = ep.ctl_backlog.front();
    if (!post_msg(ep, dst, h, nullptr, 0, h.kind == kCts ? h.rid : 0)) break;
    ep.ctl_backlog.pop_front();
    did = true;
  }
  for (size_t n = ep.rndv_waiting.size(); n; --n) {
    uint64_t id = ep.rndv_waiting.front();
    ep.rndv_waiting.pop_front();
    if (!send_cts(ep, id)) ep.rndv_waiting.push_back(id);
  }
  while (!ep.frags_waiting.empty()) {
    auto it = ep.sends.find(ep.frags_waiting.front());
    if (it != ep.sends.end()) {
      const uint64_t before = it->second.frag_next;
      const bool all = post_frags(ep, it->second);
      did |= it->second.frag_next != before;
      if (!all) break;
    }
    ep.frags_waiting.pop_front();  // all posted, or failed meanwhile
  }
  for (size_t n = ep.cts_waiting.size(); n; --n) {
    uint64_t id = ep.cts_waiting.front();
    ep.cts_waiting.pop_front();
    auto it = ep.sends.find(id);
    if (it != ep.sends.end() && !start_put(ep, it->second)) ep.cts_waiting.push_back(id);
  }
  while (!ep.reads_waiting.empty() && start_served_read(ep, ep.reads_waiting.front())) {
    ep.reads_waiting.pop_front();
    did = true;
  }
  // Past the unexpected-message budget the ring is left full: the NIC
  // refuses senders' messages until receives are posted (they resend).
  while (ep.unexpected_bytes < kMaxUnexpectedBytes) {
    const abi::AmRxEntry* e = ready_entry(ep);
    if (!e) break;
    handle_entry(ep, *e, reinterpret_cast<const uint8_t*>(e + 1));
    consume_entry(ep);
    did = true;
  }
  probe_peers(ep, std::chrono::duration_cast<std::chrono::nanoseconds>(
                      std::chrono::steady_clock::now().time_since_epoch()).count());
  return did;
}

// A descriptor of this endpoint completed (a congestion refusal of a
// message was already turned into a resend).
void ep_nic_done(Ep& ep, Post& post, const abi::CqEntry& c) {
  const bool ok = c.status == abi::kCqOk;
  if (post.kind == kPostWrite) {
    auto it = ep.rma.find(post.op);
    if (ok && it != ep.rma.end() && it->second.has_data) notify_write(ep, it->second);
    end_rma(ep, post.op, ok ? 0 : FI_EIO, ok ? 0 : c.status);
    return;
  }
  if (post.kind == kPostReadPut) {
    auto it = ep.serving.find(post.op);
    if (it == ep.serving.end()) return;
    read_done(ep, it->second.peer, it->second.sid, ok);
    ep.serving.erase(it);
    return;
  }
  if (post.kind == kPostPut) {
    auto it = ep.sends.find(post.op);
    if (it == ep.sends.end()) return;
    Send& s = it->second;
    WireHdr f = header(ep, kFin);
    f.sid = s.id;
    f.rid = s.rid;
    if (!ok) f.flags = kWireFailed;
    post_ctl(ep, s.dst, f);
    if (!ok) {
      fail_send(ep, s.id, c.status);
      return;
    }
    recycle(*ep.dom, s.reg, s.bounce, 0);
    complete_send(ep, s, 0, 0);
    ep.sends.erase(it);
    return;
  }
  if (post.long_buf >= 0) ep.free_longs.push_back(post.long_buf);
  else ep.free_bufs.push_back(post.buf);
  switch (post.wire) {
    case kEager:
      if (!post.op) {
        // An inject (or a send without FI_COMPLETION): no record and no CQ
        // entry, but its counter counts it.
        count(ep.send_cntr, !ok);
        if (!ok) ULNIC_WARN(FI_LOG_EP_DATA, "an injected message was lost: %s\n", prov_strerror(c.status));
        return;
      }
      if (ok) {
        auto it = ep.sends.find(post.op);
        if (it != ep.sends.end()) {
          complete_send(ep, it->second, 0, 0);
          ep.sends.erase(it);
        }
      } else {
        fail_send(ep, post.op, c.status);
      }
      return;
    case kEagerFrag:
    case kEagerLong: {
      auto it = ep.sends.find(post.op);
      if (it == ep.sends.end()) return;  // failed by an earlier fragment
      if (!ok) return fail_send(ep, post.op, c.status);
      Send& s = it->second;
      if (--s.frags_out || s.frag_next < s.len) return;
      complete_send(ep, s, 0, 0);
      ep.sends.erase(it);
      return;
    }
    case kRts:
      if (!ok) fail_send(ep, post.op, c.status);
      return;
    case kReadReq:
      if (!ok) end_rma(ep, post.op, FI_EIO, c.status);
      return;
    case kCts:
      if (!ok) fail_rndv(ep, post.op, c.status);
      return;
    default:
      if (ok) return;
      if (post.wire != kProbe)
        ULNIC_WARN(FI_LOG_EP_DATA, "a control message was lost: %s\n", prov_strerror(c.status));
      if (peer_is_gone(c.status)) peer_gone(ep, post.dst, c.status);
      return;
  }
}

}  // namespace ulnic::ofi
