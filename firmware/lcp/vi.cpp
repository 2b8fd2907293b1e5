#include "lcp/vi.h"

#include <string.h>

#include "core/cost.h"
#include "core/status.h"
#include "hal/clint.h"
#include "lcp/remote.h"
#include "link/link.h"

namespace lcp {
namespace {

using core::status::count;

// ----------------------------------------------------------------- state

struct DescRef {
  uint64_t va;
  uint32_t key;
};

struct Seg {
  uint64_t nic;
  uint32_t len;
};

// A descriptor as read from host memory, with its data segments translated.
struct Desc {
  abi::ViControlSegment cs;
  // Where read_desc found the control segment, and SlotTable::epoch then:
  // its completion writes there while no table changed (null: not found).
  abi::ViControlSegment* at;
  uint64_t at_epoch;
  abi::ViDataSegment remote;  // RDMA: the address segment
  uint32_t nsegs;
  uint64_t room;              // bytes the data segments hold
  Seg segs[abi::kViMaxSegments];  // (last: only the first nsegs mean anything)
};

// What every message reads first, the receive queue's array last: a field
// within 2 KiB of the record's start is one load or store from a pointer
// to it (RISC-V's 12-bit offsets); one behind the 4 KiB array took a lui
// and an add more each time.
struct Vi {
  bool used;
  uint32_t state;             // abi::ViState
  uint32_t attrs;             // abi::ViAttrBits
  uint32_t ptag, max_transfer;
  uint32_t peer_node, peer_slot, peer_vi;
  // The operation arriving now (one at a time: a VI has one peer, in order).
  uint64_t in_op;             // its op id (0: none)
  uint8_t in_verdict;         // first refusal (kCqOk so far)
  bool rx_active;             // a receive descriptor is taken for it
  DescRef rx_ref;
  uint64_t rx_epoch;          // SlotTable::epoch when rx's segments were translated
  uint32_t rx_error;          // ViStatus error bits for the receive
  uint32_t rq_head, rq_count;
  Desc rx;
  // kViStateConnectPending: the connect descriptor and what it asked for.
  abi::SqEntry connect;
  uint64_t connect_serial;
  uint32_t connect_node;
  bool connect_matched, connect_peer;
  uint32_t disc_len;
  uint8_t disc[abi::kViMaxDiscriminator];
  // Receive queue: posted, not yet taken by a message (rq_head, rq_count).
  DescRef rq[abi::kViQueueDepth];
};

enum OpKind : uint8_t { kKindSend, kKindWrite, kKindRead };

struct ViOp {
  bool used;
  uint8_t kind;
  bool data_done;             // every data packet went
  bool closed;                // the read request / the closing send (write with immediate) went
  uint32_t slot, vi;
  uint64_t generation;
  uint64_t op_id;
  DescRef desc;
  uint32_t dst_node, dst_slot, dst_vi;
  uint32_t seg, seg_off, sent;  // feed cursor
  uint64_t stalled_since;
  uint64_t trace_seen;          // traced (kSqTrace): when the NIC took its descriptor (0: not)
  bool awaiting;                // every packet went: its verdict (or read response) is due
  VerdictWait wait;
  uint64_t progress;            // read response packets taken (they keep its verdict clock going)
  bool answered;                // its verdict came; it completes after the older ones (complete_in_order)
  uint32_t answer;              // ... with these ViStatus bits
  bool streaming;               // `stream` holds the data segment that ends the message
  Desc d;                       // (new_op leaves its segments and what follows be, see there)
  // The streamed segment's packets' template (stream_last_segment fills it
  // before anything reads it).
  link::Segments stream;
};

struct Responder {
  bool used;
  uint32_t node;              // the requester
  uint64_t op_id;
  uint32_t slot, vi;          // ours
  uint64_t generation;
  uint32_t dst_slot, dst_vi;  // the requester's
  uint32_t key;               // the memory it reads: handle and address, checked
  uint64_t va;                //   again for every chunk (the owner may deregister)
  uint32_t length, sent;
};

// Connection management messages (the payload of kWireOpViConn).
enum ConnKind : uint32_t {
  kConnRequest = 1,     // client -> server (peer: either way)
  kConnMatched = 2,     // server -> client: a ConnectWait took it
  kConnAccept = 3,      // server -> client (peer: either way)
  kConnReject = 4,
  kConnBusy = 5,        // the server's request table is full
  kConnCancel = 6,      // client -> server: gave up waiting
  kConnDisconnect = 7,  // either way: the connection is over
  kConnKeepalive = 8,   // nothing: makes the link notice a peer that died
  kConnNoMatch = 9,     // server -> client: no listen waits for that discriminator
};
struct ConnMessage {
  uint32_t kind;
  uint32_t slot, vi;          // the sender's VI
  uint32_t peer_slot, peer_vi;  // kConnDisconnect: the receiver's VI
  uint32_t attrs, max_transfer;
  uint32_t peer;              // kConnRequest: peer-to-peer
  uint64_t serial;            // the client's connect attempt
  uint32_t disc_len;
  uint32_t orderly;           // kConnDisconnect: the process asked for it (not its death, nor an error)
  uint8_t disc[abi::kViMaxDiscriminator];
};
static_assert(sizeof(ConnMessage) <= 128);

// A request held at the server's NIC: a listen took it (until it is answered), or a
// peer-to-peer request waiting for the other side's.
struct Conn {
  bool used;
  bool delivered;             // a listen took it (slot = its slot)
  uint32_t id;                // tagged index: the process's connection id
  uint32_t node;              // the client
  ConnMessage req;
  uint32_t slot;
};

struct Listen {
  bool used;
  uint32_t slot;
  uint64_t generation;
  abi::SqEntry sqe;
  uint32_t disc_len;
  uint8_t disc[abi::kViMaxDiscriminator];
};

// Outgoing connection messages stay here while the link may resend them
// (one overwritten before its peer acknowledged it would be resent as a
// filler, and lost): room for a whole backlog sent at once after a stall,
// and as much again.
constexpr uint32_t kPool = 256;
struct Outgoing {
  uint64_t serial;
  ConnMessage m;
};

// Connection messages the link had no room for yet, oldest first. They go
// in order per peer, each as soon as its own peer's link has room: a peer
// off the CPU for seconds holds up only what is for it. The process's own
// connection operations (connect, accept, reject, disconnect, cancel,
// destroy: one message each at most) wait at their SQ head while fewer
// than kBacklogReserve entries are free (vi_can_start), so they never find
// it full; what the network makes us say (answers to requests, the
// disconnects of VIs broken by what arrived or by a bad post) has the
// reserve, and what finds no room at all is dropped and counted
// (vi_conn_dropped).
constexpr uint32_t kBacklog = kViConnBacklog;
constexpr uint32_t kBacklogReserve = kViConnBacklogReserve;
static_assert(kBacklogReserve >= 1 && kBacklogReserve < kBacklog);
static_assert(kPool >= 2 * kBacklog);
struct Backlogged {
  uint32_t dst;
  ConnMessage m;
};

struct State {
  // ops first (then the VIs): a field of g.ops[i] is an immediate offset
  // from one register. Behind the backlog and the VIs (2.4 MB in) each
  // field's address took a lui, addiw and add of its own (a 64 B VI send:
  // 57 instructions more; issue 22).
  ViOp ops[kMaxViOps];
  Vi vis[abi::kMaxSlots][abi::kMaxVis];
  SlotTable* t;
  Backlogged backlog[kBacklog];  // [0, backlog_count), oldest first
  uint32_t backlog_count;
  Responder responders[kMaxViResponders];
  uint32_t responders_end;  // none used at or above this index (vi_poll looks below it)
  Conn conns[kMaxViConns];
  Listen listens[kMaxViListens];
  Outgoing pool[kPool];
  uint64_t pool_serial, op_serial, connect_serial;
  uint32_t rng;
  uint64_t next_keepalive;    // mtime
  uint32_t reads;             // RDMA reads in ops (complete_in_order)
  uint64_t next_verdict_check;  // mtime
  uint64_t ok_due[kMaxViOps / 64];  // sends and writes whose verdict is due: a bit each (vi_ok_through)
};
static_assert(kMaxViOps % 64 == 0);
State g;

void set_ok_due(const ViOp& op, bool due) {
  const uint32_t i = uint32_t(&op - g.ops);
  if (due) g.ok_due[i / 64] |= 1ull << (i % 64);
  else g.ok_due[i / 64] &= ~(1ull << (i % 64));
}

template <class T>
void put(T& field, T v) {
  __atomic_store_n(&field, v, __ATOMIC_RELAXED);
}

uint32_t self() { return core::status::block().node_id; }
uint32_t reliability(const Vi& v) { return v.attrs & abi::kViAttrReliabilityMask; }
bool reliable(const Vi& v) { return reliability(v) != abi::kViUnreliable; }

Vi* vi_of(uint32_t slot, uint32_t vi) {
  if (slot >= abi::kMaxSlots || vi >= abi::kMaxVis) return nullptr;
  Vi& v = g.vis[slot][vi];
  return v.used ? &v : nullptr;
}

// A completion for something that waited on the network (a receive, a
// connect, a listen): reserve_waiting() kept its CQ entry.
void complete_waiting(uint32_t slot, uint64_t generation, const abi::SqEntry& e, abi::CqStatus st, uint32_t result) {
  if (slot >= abi::kMaxSlots) return;
  Slot& s = g.t->slots[slot];
  if (s.generation == generation && s.cq_waiting) --s.cq_waiting;
  slot_post_completion(*g.t, slot, generation, e, st, result);
}

// A completion the slot kept room for (every VI post keeps one).
void post_cqe(uint32_t slot, uint64_t generation, uint8_t opcode, uint64_t va, abi::CqStatus st, uint32_t vi) {
  abi::SqEntry e{};
  e.opcode = opcode;
  e.user_data = va;
  if (opcode == abi::kOpViPostRecv) return complete_waiting(slot, generation, e, st, vi);
  slot_post_completion(*g.t, slot, generation, e, st, vi);
}

void post_error(uint32_t slot, uint32_t vi, uint32_t code, bool orderly = false) {
  const Vi* v = vi_of(slot, vi);
  abi::EqEntry ev{};
  ev.type = abi::kEqViError;
  ev.export_handle = vi;
  ev.length = code;
  ev.offset = v ? v->state : abi::kViStateIdle;
  ev.flags = orderly ? abi::kEqViOrderly : 0;
  slot_post_event(*g.t, slot, ev);
}

// ------------------------------------------------------- descriptors

// The descriptor control segment at `r` in slot `s`, if it is still where it
// was posted (registered, the VI's ptag, local access).
abi::ViControlSegment* desc_at(const Slot& s, const Vi& v, const DescRef& r, uint64_t len) {
  uint64_t nic = 0;
  if (slot_translate_tagged(s, r.key, r.va, len, abi::kAccessLocal, v.ptag, nic) != abi::kCqOk) return nullptr;
  // Aligned for its words too (VIPL's descriptors are 64-byte aligned, a
  // hostile process's need not be: tests/fuzz found the NIC then reading and
  // writing them misaligned, which RISC-V may trap on).
  if (nic % alignof(abi::ViControlSegment) != 0) return nullptr;
  return reinterpret_cast<abi::ViControlSegment*>(nic);
}

// Writes a descriptor's results back (Status last) and posts its CQE.
// `read`: the descriptor as read_desc read it, if it did (its translation
// then serves while no table changed: ~100 instructions a completion).
void complete_desc(uint32_t slot, uint32_t vi, const DescRef& r, uint8_t opcode, uint32_t status, bool set_len,
                   uint32_t length, bool set_imm, uint32_t imm, const Desc* read = nullptr) {
  core::cost::Phase<abi::kPhaseCompletion> cost;
  Slot& s = g.t->slots[slot];
  Vi* v = vi_of(slot, vi);
  abi::ViControlSegment* cs = nullptr;
  if (v) cs = read && read->at && read->at_epoch == g.t->epoch ? read->at : desc_at(s, *v, r, sizeof *cs);
  if (cs) {
    if (set_len) put(cs->length, length);
    if (set_imm) put(cs->immediate, imm);
    __atomic_store_n(&cs->status, status, __ATOMIC_RELEASE);
  }
  count(opcode == abi::kOpViPostRecv ? ulnic::abi::kCtrViRecvs : ulnic::abi::kCtrViOps);
  post_cqe(slot, s.generation, opcode, r.va, cs ? abi::kCqOk : abi::kCqBadKey, vi);
}

// Reads descriptor `r` into `d` and translates its data segments. Returns
// ViStatus error bits (0: good). `send`: a send-queue descriptor.
uint32_t read_desc(const Slot& s, const Vi& v, const DescRef& r, bool send, Desc& d) {
  abi::ViControlSegment* cs = desc_at(s, v, r, sizeof(abi::ViControlSegment));
  d.at = cs;
  d.at_epoch = g.t->epoch;
  if (!cs) return abi::kViStProtectionError;
  // Copied once (the process may rewrite it under us), as words: desc_at
  // checked the alignment, and a call to memcpy cost ~40 instructions a
  // segment (issue 22).
  __builtin_memcpy_inline(&d.cs, cs, sizeof d.cs);
  uint32_t nseg = d.cs.seg_count;
  uint32_t op = d.cs.control & abi::kViCtlOpMask;
  if (nseg > abi::kViMaxSegments || (d.cs.control & abi::kViCtlReserved) || op == abi::kViCtlOpMask)
    return abi::kViStFormatError;
  if (!send && op != abi::kViCtlOpSendRecv) return abi::kViStFormatError;
  bool rdma = op != abi::kViCtlOpSendRecv;
  if (rdma && nseg == 0) return abi::kViStFormatError;
  if (op == abi::kViCtlOpRdmaRead && (d.cs.control & abi::kViCtlImmediate)) return abi::kViStFormatError;
  // The segments must lie in the same registration: desc_at found it and
  // its bytes from the control segment on.
  const Registration& reg = s.regs[r.key & 0xff];
  if (16ull * nseg > reg.length - (r.va - reg.va) - sizeof(abi::ViControlSegment)) return abi::kViStProtectionError;
  const auto* segs = reinterpret_cast<const abi::ViDataSegment*>(cs + 1);
  uint32_t first = 0;
  if (rdma) __builtin_memcpy_inline(&d.remote, &segs[0], sizeof d.remote), first = 1;
  d.nsegs = 0;
  d.room = 0;
  uint32_t bad = 0;
  for (uint32_t i = first; i < nseg; ++i) {
    abi::ViDataSegment ds;
    __builtin_memcpy_inline(&ds, &segs[i], sizeof ds);
    if (ds.length == 0) continue;
    uint64_t nic = 0;
    if (slot_translate_tagged(s, ds.handle, ds.data, ds.length, abi::kAccessLocal, v.ptag, nic) != abi::kCqOk)
      bad |= abi::kViStProtectionError;
    d.segs[d.nsegs++] = Seg{nic, ds.length};
    d.room += ds.length;
  }
  if (bad) return bad;
  if (send && (d.room != d.cs.length || d.room > v.max_transfer)) return abi::kViStLengthError;
  return 0;
}

// Copies `len` bytes at message offset `off` into the segments of `d`; the
// bytes past its room are dropped.
void scatter(const Desc& d, uint64_t off, const uint8_t* p, uint32_t len) {
  uint64_t base = 0;
  for (uint32_t i = 0; i < d.nsegs && len; ++i) {
    const Seg& sg = d.segs[i];
    if (off < base + sg.len) {
      uint64_t in = off - base;
      uint32_t n = sg.len - in < len ? uint32_t(sg.len - in) : len;
      memcpy(reinterpret_cast<void*>(sg.nic + in), p, n);
      p += n, off += n, len -= n;
    }
    base += sg.len;
  }
}

// --------------------------------------------------- the link, or ourselves

void deliver_conn(uint32_t src, const ConnMessage& m);

bool link_conn(uint32_t dst, const ConnMessage& m) {
  if (!link::can_send(dst)) return false;
  Outgoing& o = g.pool[g.pool_serial % kPool];
  o.serial = ++g.pool_serial;
  o.m = m;
  abi::WireHeader h{};
  h.op = abi::kWireOpViConn;
  h.op_length = sizeof m;
  return link::send(dst, h, reinterpret_cast<uint64_t>(&o.m), sizeof m, kViOwner, o.serial) != 0;
}

// Connection messages for `dst` wait in the backlog.
bool conn_waiting(uint32_t dst) {
  for (uint32_t n = 0; n < g.backlog_count; ++n)
    if (g.backlog[n].dst == dst) return true;
  return false;
}

// A connection message may go to `dst` now as far as order goes: nothing
// older for it waits, here or among its verdicts (a disconnect must not
// overtake the verdict on the last send before it).
bool conn_in_order(uint32_t dst) { return !remote_results_pending_for(dst) && !conn_waiting(dst); }

// Sends a connection message now, or as soon as the link to `dst` has room
// (in order per peer). False if it cannot go at all: no link to `dst`, or
// the backlog full (counted).
bool send_conn(uint32_t dst, const ConnMessage& m) {
  if (dst == self()) {
    deliver_conn(dst, m);
    return true;
  }
  if (!link::enabled() || dst >= link::nodes() || dst >= abi::kMaxNodes) return false;
  if (conn_in_order(dst) && link_conn(dst, m)) return true;
  if (g.backlog_count == kBacklog) {
    count(ulnic::abi::kCtrViConnDropped);
    return false;
  }
  g.backlog[g.backlog_count++] = Backlogged{dst, m};
  return true;
}

// The backlog's messages whose peers' links have room go, in order per
// peer; the rest keep their order. True if any went.
bool send_backlog() {
  static_assert(abi::kMaxNodes <= 64);
  uint64_t held = 0;  // peers with an older message still here
  uint32_t kept = 0;
  for (uint32_t n = 0; n < g.backlog_count; ++n) {
    const Backlogged b = g.backlog[n];
    const uint64_t bit = 1ull << b.dst;  // (< kMaxNodes: send_conn)
    if (!(held & bit) && !remote_results_pending_for(b.dst) && link_conn(b.dst, b.m)) continue;
    held |= bit;
    g.backlog[kept++] = b;
  }
  const bool sent = kept != g.backlog_count;
  g.backlog_count = kept;
  return sent;
}

void send_verdict(uint32_t src, uint64_t op_id, uint8_t status) {
  if (src == self()) {
    abi::WireHeader h{};
    h.op = abi::kWireOpResult;
    h.op_id = op_id;
    h.status = status;
    vi_result(src, h);
    return;
  }
  remote_send_result(src, op_id, status);
}

// The receiver's verdict on the operation whose last packet is `h`: one
// that finished well shares the next OK the link's ACK says (remote.h).
void answer(uint32_t src, const abi::WireHeader& h, uint8_t verdict) {
  if (verdict == abi::kCqOk && src != self()) return remote_verdict_ok(src, h.seq, abi::kCostOpViRecv);
  send_verdict(src, h.op_id, verdict);
}

bool reachable(uint32_t node) { return node == self() || (link::enabled() && node < link::nodes()); }

// ----------------------------------------------------------- VI state

void flush_recvs(uint32_t slot, uint32_t vi) {
  Vi& v = g.vis[slot][vi];
  ++g.t->epoch;  // a stream placed into a receive descriptor stops here (vi_placement)
  const uint32_t st = abi::kViStDone | abi::kViStOpReceive | abi::kViStFlushed;
  if (v.rx_active) {
    v.rx_active = false;
    complete_desc(slot, vi, v.rx_ref, abi::kOpViPostRecv, st, false, 0, false, 0, &v.rx);
  }
  while (v.rq_count) {
    DescRef r = v.rq[v.rq_head];
    v.rq_head = (v.rq_head + 1) % abi::kViQueueDepth;
    --v.rq_count;
    complete_desc(slot, vi, r, abi::kOpViPostRecv, st, false, 0, false, 0);
  }
}

uint32_t op_bits(const ViOp& op) {
  switch (op.kind) {
    case kKindWrite: return abi::kViStOpRdmaWrite;
    case kKindRead: return abi::kViStOpRdmaRead;
    default: return abi::kViStOpSend;
  }
}

void release_op(ViOp& op) {
  op.used = false;
  set_ok_due(op, false);
  if (op.kind == kKindRead) --g.reads;
}

void finish_op(ViOp& op, uint32_t status) {
  release_op(op);
  complete_desc(op.slot, op.vi, op.desc, abi::kOpViPostSend, abi::kViStDone | op_bits(op) | status, false, 0, false, 0,
                &op.d);
}

// A VI's oldest operation still in flight (ops are numbered as posted; the
// table's order is not theirs), or null.
template <class Which>
ViOp* oldest_op(Which which) {
  ViOp* oldest = nullptr;
  for (ViOp& op : g.ops)
    if (op.used && which(op) && (!oldest || op.op_id >> 8 < oldest->op_id >> 8)) oldest = &op;
  return oldest;
}

// Descriptors complete in the order they were posted (VipSendDone looks at
// the queue's head), so a flush goes oldest first (one whose verdict came
// keeps it).
void flush_sends(uint32_t slot, uint32_t vi) {
  while (ViOp* op = oldest_op([&](const ViOp& o) { return o.slot == slot && o.vi == vi; }))
    finish_op(*op, op->answered ? op->answer : abi::kViStFlushed);
}

// Completes `op` with `status` in posting order (VIA: a work queue's
// descriptors complete in the order they were posted). Sends and RDMA
// writes get their verdicts in that order anyway -- one at a time onto the
// link, answered at their last packets in order -- but an RDMA read ends
// with its response, which the target streams while it answers what was
// posted behind the read at once: an operation that overtakes an older
// read waits for it. With no read in flight (the common case) nothing can
// be overtaken, and nothing is looked up.
void complete_in_order(ViOp& op, uint32_t status) {
  op.awaiting = false;
  set_ok_due(op, false);
  if (g.reads == 0) return finish_op(op, status);
  op.answered = true;
  op.answer = status;
  const uint32_t slot = op.slot, vi = op.vi;
  while (ViOp* o = oldest_op([&](const ViOp& x) { return x.slot == slot && x.vi == vi; })) {
    if (!o->answered) break;
    finish_op(*o, o->answer);
  }
}

// Tells the server a pending connect of ours is off.
void send_cancel(const Vi& v) {
  ConnMessage m{};
  m.kind = kConnCancel;
  m.serial = v.connect_serial;
  send_conn(v.connect_node, m);
}

// `orderly`: the process disconnects (or destroys) its VI itself.
void send_disconnect(const Vi& v, uint32_t slot, uint32_t vi, bool orderly = false) {
  ConnMessage m{};
  m.kind = kConnDisconnect;
  m.slot = slot, m.vi = vi;
  m.peer_slot = v.peer_slot, m.peer_vi = v.peer_vi;
  m.orderly = orderly;
  send_conn(v.peer_node, m);
}

// The connection is over for this VI: Error state, everything flushed, the
// process told (code). `tell_peer`: the other side does not know yet.
// `orderly`: the peer's process disconnected (abi::kEqViOrderly).
void break_vi(uint32_t slot, uint32_t vi, uint32_t code, bool tell_peer, bool orderly = false) {
  Vi* v = vi_of(slot, vi);
  if (!v || v->state != abi::kViStateConnected) return;
  if (tell_peer) send_disconnect(*v, slot, vi);
  v->state = abi::kViStateError;
  v->in_op = 0;
  flush_sends(slot, vi);
  flush_recvs(slot, vi);
  post_error(slot, vi, code, orderly);
}

void connect_vi(uint32_t slot, uint32_t vi, uint32_t node, uint32_t peer_slot, uint32_t peer_vi) {
  Vi& v = g.vis[slot][vi];
  v.state = abi::kViStateConnected;
  v.peer_node = node, v.peer_slot = peer_slot, v.peer_vi = peer_vi;
  v.in_op = 0;
  count(ulnic::abi::kCtrViConnects);
}

// Ends a pending connect with `st`; on success `info` goes to its ViConnInfo.
void finish_connect(uint32_t slot, uint32_t vi, abi::CqStatus st, const abi::ViConnInfo* info) {
  Vi& v = g.vis[slot][vi];
  Slot& s = g.t->slots[slot];
  if (info) {
    uint64_t nic = 0;
    if (slot_translate(s, v.connect.src_key, v.connect.src_addr, sizeof *info, abi::kAccessLocal, nic) == abi::kCqOk)
      memcpy(reinterpret_cast<void*>(nic), info, sizeof *info);
  }
  if (st != abi::kCqOk) v.state = abi::kViStateIdle;
  complete_waiting(slot, s.generation, v.connect, st, vi);
}

abi::ViConnInfo info_of(uint32_t node, const ConnMessage& m) {
  abi::ViConnInfo i{};
  i.node = node;
  i.attrs = m.attrs;
  i.max_transfer = m.max_transfer;
  i.disc_len = m.disc_len;
  memcpy(i.disc, m.disc, sizeof i.disc);
  return i;
}

ConnMessage message_of(uint32_t kind, uint32_t slot, uint32_t vi) {
  ConnMessage m{};
  m.kind = kind;
  m.slot = slot, m.vi = vi;
  if (const Vi* v = vi_of(slot, vi)) {
    m.attrs = v->attrs;
    m.max_transfer = v->max_transfer;
  }
  return m;
}

bool same_disc(uint32_t len_a, const uint8_t* a, uint32_t len_b, const uint8_t* b) {
  return len_a == len_b && memcmp(a, b, len_a) == 0;
}

// Peer-to-peer: both VIs asked; connect ours to theirs and tell them.
void peer_match(uint32_t slot, uint32_t vi, uint32_t node, const ConnMessage& req) {
  connect_vi(slot, vi, node, req.slot, req.vi);
  ConnMessage a = message_of(kConnAccept, slot, vi);
  a.serial = req.serial;
  send_conn(node, a);
  abi::ViConnInfo info = info_of(node, req);
  finish_connect(slot, vi, abi::kCqOk, &info);
}

// A listen takes a request: the process learns it, the client hears so.
void deliver_to_listen(Listen& l, Conn& c) {
  c.delivered = true;
  c.slot = l.slot;
  abi::ViConnInfo info = info_of(c.node, c.req);
  info.conn_id = c.id;
  Slot& s = g.t->slots[l.slot];
  uint64_t nic = 0;
  if (slot_translate(s, l.sqe.src_key, l.sqe.src_addr, sizeof info, abi::kAccessLocal, nic) == abi::kCqOk)
    memcpy(reinterpret_cast<void*>(nic), &info, sizeof info);
  l.used = false;
  complete_waiting(l.slot, l.generation, l.sqe, abi::kCqOk, c.id);
  ConnMessage m{};
  m.kind = kConnMatched;
  m.serial = c.req.serial;
  send_conn(c.node, m);
}

Conn* find_conn(uint32_t id) {
  uint32_t i = id & 0xff;
  if (i >= kMaxViConns || !g.conns[i].used || g.conns[i].id != id) return nullptr;
  return &g.conns[i];
}

void deliver_conn(uint32_t src, const ConnMessage& m) {
  switch (m.kind) {
    case kConnRequest: {
      if (m.disc_len > abi::kViMaxDiscriminator) return;
      for (const Conn& c : g.conns)  // a retransmitted request is not taken twice
        if (c.used && c.node == src && c.req.serial == m.serial) return;
      if (m.peer) {
        // Peer-to-peer: is our side already asking for this one?
        for (uint32_t k = 0; k < abi::kMaxSlots; ++k)
          for (uint32_t i = 0; i < abi::kMaxVis; ++i) {
            Vi& v = g.vis[k][i];
            bool itself = src == self() && k == m.slot && i == m.vi;  // a VI does not pair with itself
            if (v.used && !itself && v.state == abi::kViStateConnectPending && v.connect_peer && v.connect_node == src &&
                same_disc(v.disc_len, v.disc, m.disc_len, m.disc))
              return peer_match(k, i, src, m);
          }
      } else {
        bool listening = false;
        for (Listen& l : g.listens)
          if (l.used && same_disc(l.disc_len, l.disc, m.disc_len, m.disc)) {
            listening = true;
            for (uint32_t i = 0; i < kMaxViConns; ++i)
              if (!g.conns[i].used) {
                Conn& c = g.conns[i];
                c = Conn{true, false, tagged_index(g.rng, i), src, m, 0};
                return deliver_to_listen(l, c);
              }
          }
        // No ConnectWait waits for it: the client hears so at once (VIPL
        // clients ask again). Only peer-to-peer requests wait here.
        if (!listening) {
          ConnMessage none{};
          none.kind = kConnNoMatch;
          none.serial = m.serial;
          send_conn(src, none);
          return;
        }
      }
      for (uint32_t i = 0; i < kMaxViConns; ++i)
        if (!g.conns[i].used) {
          g.conns[i] = Conn{true, false, tagged_index(g.rng, i), src, m, 0};
          return;
        }
      ConnMessage busy{};
      busy.kind = kConnBusy;
      busy.serial = m.serial;
      send_conn(src, busy);
      return;
    }
    case kConnMatched:
    case kConnAccept:
    case kConnReject:
    case kConnBusy:
    case kConnNoMatch: {
      for (uint32_t k = 0; k < abi::kMaxSlots; ++k)
        for (uint32_t i = 0; i < abi::kMaxVis; ++i) {
          Vi& v = g.vis[k][i];
          if (!v.used || v.connect_node != src || v.connect_serial != m.serial) continue;
          if (v.state == abi::kViStateConnected && v.peer_node == src && v.peer_slot == m.slot && v.peer_vi == m.vi)
            return;  // peer-to-peer: both sides matched at once
          if (v.state != abi::kViStateConnectPending) break;
          if (m.kind == kConnMatched) {
            v.connect_matched = true;
          } else if (m.kind == kConnAccept) {
            connect_vi(k, i, src, m.slot, m.vi);
            abi::ViConnInfo info = info_of(src, m);
            finish_connect(k, i, abi::kCqOk, &info);
          } else {
            finish_connect(k, i,
                           m.kind == kConnReject  ? abi::kCqViRejected
                           : m.kind == kConnBusy ? abi::kCqViBusy
                                                 : abi::kCqViCancelled,  // kConnNoMatch: nobody took it
                           nullptr);
          }
          return;
        }
      if (m.kind == kConnAccept) {
        // Nobody waits for it any more (cancelled, or the process left).
        ConnMessage d{};
        d.kind = kConnDisconnect;
        d.peer_slot = m.slot, d.peer_vi = m.vi;
        send_conn(src, d);
      }
      return;
    }
    case kConnCancel:
      for (Conn& c : g.conns)
        if (c.used && c.node == src && c.req.serial == m.serial) c.used = false;
      return;
    case kConnDisconnect: {
      Vi* v = vi_of(m.peer_slot, m.peer_vi);
      if (v && v->state == abi::kViStateConnected && v->peer_node == src && v->peer_slot == m.slot &&
          v->peer_vi == m.vi)
        break_vi(m.peer_slot, m.peer_vi, abi::kViErrConnLost, false, m.orderly != 0);
      return;
    }
    default:
      return;
  }
}

// --------------------------------------------------------- SQ operations

ViOp* new_op(Slot& s, uint32_t vi) {
  for (uint32_t i = 0; i < kMaxViOps; ++i) {
    ViOp& op = g.ops[i];
    if (op.used) continue;
    // The state anew, but not the descriptor's segment table, which
    // read_desc fills as far as nsegs says, nor the stream template after
    // it: clearing the whole record (~400 bytes) was ~260 instructions of
    // every VI send (issue 22).
    __builtin_memset_inline(&op, 0, offsetof(ViOp, d) + offsetof(Desc, segs));
    op.used = true;
    op.slot = s.index;
    op.vi = vi;
    op.generation = s.generation;
    op.op_id = i | kViOpFlag | (++g.op_serial << 8);
    return &op;
  }
  return nullptr;
}

ViOp* find_op(uint64_t op_id) {
  uint64_t i = op_id & 0x7f;
  if (!(op_id & kViOpFlag) || i >= kMaxViOps) return nullptr;
  ViOp& op = g.ops[i];
  return op.used && op.op_id == op_id ? &op : nullptr;
}

// Where a post's CQE goes: kept in reserve from now on. A send keeps the
// slot awake until it completes; a receive, connect or listen waits on the
// network for as long as it likes, and the slot may sleep meanwhile.
void reserve(Slot& s) { ++s.cq_reserved; }
void reserve_waiting(Slot& s) {
  ++s.cq_reserved;
  ++s.cq_waiting;
}

void post_send(Slot& s, Vi& v, uint32_t vi, const abi::SqEntry& e) {
  core::cost::op<abi::kCostOpViSend>();
  DescRef r{e.src_addr, e.src_key};
  reserve(s);
  if (v.state == abi::kViStateError) {
    return complete_desc(s.index, vi, r, abi::kOpViPostSend, abi::kViStDone | abi::kViStFlushed, false, 0, false, 0);
  }
  ViOp* op = new_op(s, vi);  // vi_can_start made sure there is one
  if (!op) return complete_desc(s.index, vi, r, abi::kOpViPostSend, abi::kViStDone | abi::kViStTransportError,
                                false, 0, false, 0);
  op->desc = r;
  uint32_t bad;
  {
    core::cost::Phase<abi::kPhaseTranslate> cost;
    bad = read_desc(s, v, r, true, op->d);
  }
  uint32_t ctl_op = op->d.cs.control & abi::kViCtlOpMask;
  op->kind = ctl_op == abi::kViCtlOpRdmaWrite ? kKindWrite : ctl_op == abi::kViCtlOpRdmaRead ? kKindRead : kKindSend;
  if (op->kind == kKindRead) ++g.reads;
  // The RDMA enables are the target's business: its VI and its memory.
  if (bad) {
    complete_in_order(*op, bad);
    if (reliable(v)) break_vi(s.index, vi, abi::kViErrPostDesc, true);
    return;
  }
  op->dst_node = v.peer_node;
  op->dst_slot = v.peer_slot;
  op->dst_vi = v.peer_vi;
  op->trace_seen = s.trace_seen;
  s.vi_active = true;
  s.vi_op = uint32_t(op - g.ops);
}

void post_recv(Slot& s, Vi& v, uint32_t vi, const abi::SqEntry& e) {
  core::cost::op<abi::kCostOpViRecv>();  // posting receives is the target's work per message
  DescRef r{e.src_addr, e.src_key};
  if (v.state == abi::kViStateError) {
    reserve_waiting(s);
    return complete_desc(s.index, vi, r, abi::kOpViPostRecv, abi::kViStDone | abi::kViStOpReceive | abi::kViStFlushed,
                         false, 0, false, 0);
  }
  if (v.rq_count == abi::kViQueueDepth) return slot_complete(s, e, abi::kCqNoResources, vi);
  reserve_waiting(s);
  v.rq[(v.rq_head + v.rq_count++) % abi::kViQueueDepth] = r;
}

void connect(Slot& s, Vi& v, uint32_t vi, const abi::SqEntry& e, const uint8_t* disc) {
  if (v.state != abi::kViStateIdle) return slot_complete(s, e, abi::kCqViBadVi, vi);
  if (!reachable(e.dst_node)) return slot_complete(s, e, abi::kCqUnreachable, vi);
  reserve_waiting(s);
  v.state = abi::kViStateConnectPending;
  v.connect = e;
  v.connect_serial = ++g.connect_serial | uint64_t(s.index) << 56;
  v.connect_node = e.dst_node;
  v.connect_matched = false;
  v.connect_peer = (e.flags & abi::kSqViPeer) != 0;
  v.disc_len = e.access;
  memcpy(v.disc, disc, e.access);
  if (v.connect_peer) {
    // The other side may have asked first: its request waits here.
    for (Conn& c : g.conns)
      if (c.used && c.req.peer && c.node == e.dst_node && same_disc(v.disc_len, v.disc, c.req.disc_len, c.req.disc)) {
        ConnMessage req = c.req;
        c.used = false;
        return peer_match(s.index, vi, e.dst_node, req);
      }
  }
  ConnMessage m = message_of(kConnRequest, s.index, vi);
  m.peer = v.connect_peer;
  m.serial = v.connect_serial;
  m.disc_len = v.disc_len;
  memcpy(m.disc, v.disc, v.disc_len);
  // (Not for want of room: vi_can_start kept the reserve free for this.)
  if (!send_conn(e.dst_node, m)) finish_connect(s.index, vi, abi::kCqUnreachable, nullptr);
}

void listen(Slot& s, const abi::SqEntry& e, const uint8_t* disc) {
  for (Listen& l : g.listens) {
    if (l.used) continue;
    reserve_waiting(s);
    l = Listen{true, s.index, s.generation, e, e.access, {}};
    memcpy(l.disc, disc, e.access);
    return;  // (no request waits for it here: one that came first was answered kConnNoMatch)
  }
  slot_complete(s, e, abi::kCqNoResources, 0);
}

void accept(Slot& s, const abi::SqEntry& e) {
  Conn* c = find_conn(e.dst_key);
  if (!c || !c->delivered || c->slot != s.index) return slot_complete(s, e, abi::kCqBadKey, 0);
  Vi* v = vi_of(s.index, e.dst_slot);
  if (!v || v->state != abi::kViStateIdle) return slot_complete(s, e, abi::kCqViBadVi, 0);
  if (reliability(*v) != (c->req.attrs & abi::kViAttrReliabilityMask)) return slot_complete(s, e, abi::kCqViMismatch, 0);
  connect_vi(s.index, e.dst_slot, c->node, c->req.slot, c->req.vi);
  ConnMessage a = message_of(kConnAccept, s.index, e.dst_slot);
  a.serial = c->req.serial;
  c->used = false;
  send_conn(c->node, a);
  slot_complete(s, e, abi::kCqOk, 0);
}

void reject(Slot& s, const abi::SqEntry& e) {
  Conn* c = find_conn(e.dst_key);
  if (!c || !c->delivered || c->slot != s.index) return slot_complete(s, e, abi::kCqBadKey, 0);
  ConnMessage m{};
  m.kind = kConnReject;
  m.serial = c->req.serial;
  c->used = false;
  send_conn(c->node, m);
  slot_complete(s, e, abi::kCqOk, 0);
}

void cancel(Slot& s, const abi::SqEntry& e) {
  if (e.flags & abi::kSqViListen) {
    for (Listen& l : g.listens)
      if (l.used && l.slot == s.index && l.sqe.user_data == e.src_addr) {
        l.used = false;
        complete_waiting(l.slot, l.generation, l.sqe, abi::kCqViCancelled, 0);
        return slot_complete(s, e, abi::kCqOk, 1);
      }
    return slot_complete(s, e, abi::kCqOk, 0);
  }
  Vi* v = vi_of(s.index, e.dst_slot);
  if (!v || v->state != abi::kViStateConnectPending) return slot_complete(s, e, abi::kCqOk, 0);
  send_cancel(*v);
  finish_connect(s.index, e.dst_slot, v->connect_matched ? abi::kCqViTimedOut : abi::kCqViCancelled, nullptr);
  slot_complete(s, e, abi::kCqOk, 1);
}

// Back to Idle from any state, the queues flushed.
void reset_vi(uint32_t slot, uint32_t vi) {
  Vi& v = g.vis[slot][vi];
  if (v.state == abi::kViStateConnected) send_disconnect(v, slot, vi, true);
  if (v.state == abi::kViStateConnectPending) {
    send_cancel(v);
    finish_connect(slot, vi, abi::kCqFlushed, nullptr);
  }
  v.state = abi::kViStateIdle;
  v.in_op = 0;
  flush_sends(slot, vi);
  flush_recvs(slot, vi);
}

// ------------------------------------------------------ the receiving side

void refuse(Vi& v, uint8_t why) {
  if (v.in_verdict == abi::kCqOk) v.in_verdict = why;
  count(ulnic::abi::kCtrViRefused);
}

// The VI a packet is for, if it is connected to the packet's sender.
Vi* target(uint32_t src, const abi::WireHeader& h) {
  Vi* v = vi_of(h.dst_slot, h.vi);
  if (!v || v->state != abi::kViStateConnected || v->peer_node != src || v->peer_slot != h.src_slot ||
      v->peer_vi != h.status)
    return nullptr;
  return v;
}

// The receiver's side of an error, by reliability level (SEMANTICS.md).
void receiver_error(uint32_t slot, uint32_t vi, uint8_t verdict) {
  Vi& v = g.vis[slot][vi];
  uint32_t code = verdict == abi::kCqRemoteNoRecv      ? abi::kViErrRecvQEmpty
                  : verdict == abi::kCqRemoteRdmaProt ? abi::kViErrRdmaWriteProt
                                                       : abi::kViErrPostDesc;  // too long, bad receive
  if (!reliable(v)) return post_error(slot, vi, code);
  // The connection is over: a reliable level says so with its reason, or
  // as lost when the reason was the receive descriptor.
  break_vi(slot, vi, code == abi::kViErrPostDesc ? abi::kViErrConnLost : code, false);
}

[[gnu::noinline]] void deliver_send(uint32_t src, Vi& v, uint32_t slot, uint32_t vi, const abi::WireHeader& h,
                                   const uint8_t* payload) {
  Slot& s = g.t->slots[slot];
  const bool rdma_imm = h.flags & abi::kWireRdmaImm;
  if (h.flags & abi::kWireFirst) {
    // The closing send of an RDMA write with immediate data keeps the
    // write's verdict: a refused write takes no receive descriptor.
    bool refused_write = rdma_imm && v.in_op == h.op_id && v.in_verdict != abi::kCqOk;
    if (!rdma_imm || v.in_op != h.op_id) v.in_verdict = abi::kCqOk;
    v.in_op = h.op_id;
    v.rx_active = false;
    if (!refused_write && v.rq_count == 0) slot_run_recv_posts(*g.t, s);
    if (!refused_write && v.rq_count == 0) {
      refuse(v, abi::kCqRemoteNoRecv);
    } else if (!refused_write) {
      v.rx_ref = v.rq[v.rq_head];
      v.rq_head = (v.rq_head + 1) % abi::kViQueueDepth;
      --v.rq_count;
      v.rx_active = true;
      v.rx_error = read_desc(s, v, v.rx_ref, false, v.rx);
      v.rx_epoch = g.t->epoch;
      if (v.rx_error) refuse(v, abi::kCqRemoteDescError);
      else if (h.op_length > v.rx.room) v.rx_error = abi::kViStLengthError, refuse(v, abi::kCqRemoteTooLong);
    }
  }
  if (v.in_op != h.op_id) {  // a message whose start we never saw
    if (h.flags & abi::kWireLast) send_verdict(src, h.op_id, abi::kCqRemoteNotConnected);
    return;
  }
  if (v.rx_active && !v.rx_error && v.rx_epoch != g.t->epoch) {
    // A table changed since the receive's segments were translated (one of
    // them deregistered?): translate them again before writing a byte more.
    v.rx_epoch = g.t->epoch;
    if (uint32_t bad = read_desc(s, v, v.rx_ref, false, v.rx)) v.rx_error = bad, refuse(v, abi::kCqRemoteDescError);
  }
  if (v.rx_active && !(v.rx_error & ~abi::kViStLengthError) && h.payload_len)
    scatter(v.rx, uint32_t(h.dst_addr), payload, h.payload_len);
  if (!(h.flags & abi::kWireLast)) return;
  uint8_t verdict = v.in_verdict;
  v.in_op = 0;
  if (v.rx_active) {
    v.rx_active = false;
    bool imm = h.flags & abi::kWireImmediate;
    uint32_t st = abi::kViStDone | (rdma_imm ? abi::kViStOpRemoteRdmaWrite : abi::kViStOpReceive) |
                  (imm ? abi::kViStImmediate : 0) | v.rx_error;
    uint32_t len = rdma_imm ? 0 : (h.op_length < v.rx.room ? h.op_length : uint32_t(v.rx.room));
    complete_desc(slot, vi, v.rx_ref, abi::kOpViPostRecv, st, true, v.rx_error & ~abi::kViStLengthError ? 0 : len,
                  imm, h.dst_key, &v.rx);
  }
  answer(src, h, verdict);
  if (verdict != abi::kCqOk) receiver_error(slot, vi, verdict);
}

// RDMA target checks: the VI's enable, the registration's right, its ptag.
bool rdma_ok(const Slot& s, const Vi& v, uint32_t key, uint64_t va, uint64_t len, bool write, uint64_t& nic) {
  if (!(v.attrs & (write ? abi::kViAttrRdmaWrite : abi::kViAttrRdmaRead))) return false;
  uint32_t need = write ? abi::kAccessRemoteWrite : abi::kAccessRemoteRead;
  return slot_translate_tagged(s, key, va, len, need, v.ptag, nic) == abi::kCqOk;
}

void deliver_write(uint32_t src, Vi& v, uint32_t slot, uint32_t vi, const abi::WireHeader& h, const uint8_t* payload) {
  if (v.in_op != h.op_id) {
    v.in_op = h.op_id;
    v.in_verdict = abi::kCqOk;
  }
  uint64_t nic = 0;
  if (rdma_ok(g.t->slots[slot], v, h.dst_key, h.dst_addr, h.payload_len, true, nic)) {
    if (h.payload_len) memcpy(reinterpret_cast<void*>(nic), payload, h.payload_len);
  } else {
    refuse(v, abi::kCqRemoteRdmaProt);
  }
  if (!(h.flags & abi::kWireLast)) return;
  uint8_t verdict = v.in_verdict;
  v.in_op = 0;
  answer(src, h, verdict);
  if (verdict != abi::kCqOk) receiver_error(slot, vi, verdict);
}

// The data segment of descriptor `d` that holds message byte `next`: its
// first byte's NIC address minus its offset in the message, and its end (as
// a message offset).
bool segment_of(const Desc& d, uint64_t next, uint64_t& base, uint64_t& hi) {
  uint64_t start = 0;
  for (uint32_t i = 0; i < d.nsegs; start += d.segs[i].len, ++i)
    if (next < start + d.segs[i].len) {
      base = d.segs[i].nic - start;
      hi = start + d.segs[i].len;
      return true;
    }
  return false;
}

void deliver_read_request(uint32_t src, Vi& v, uint32_t slot, uint32_t vi, const abi::WireHeader& h) {
  uint64_t nic = 0;
  Slot& s = g.t->slots[slot];
  if (!rdma_ok(s, v, h.dst_key, h.dst_addr, h.op_length, false, nic)) {
    count(ulnic::abi::kCtrViRefused);
    send_verdict(src, h.op_id, abi::kCqRemoteRdmaProt);
    if (reliable(v)) break_vi(slot, vi, abi::kViErrRdmaReadProt, false);
    return;
  }
  for (uint32_t i = 0; i < kMaxViResponders; ++i) {
    Responder& r = g.responders[i];
    if (r.used) continue;
    r = Responder{true, src, h.op_id, slot, vi, s.generation, h.src_slot, h.status, h.dst_key, h.dst_addr,
                  h.op_length, 0};
    if (i >= g.responders_end) g.responders_end = i + 1;
    return;
  }
  send_verdict(src, h.op_id, abi::kCqNoResources);
}

void deliver_read_response(uint32_t src, const abi::WireHeader& h, const uint8_t* payload) {
  ViOp* op = find_op(h.op_id);
  if (!op || op->dst_node != src || op->kind != kKindRead || op->answered) return;
  if (h.payload_len) scatter(op->d, h.dst_addr, payload, h.payload_len);
  ++op->progress;
  if (h.flags & abi::kWireLast) complete_in_order(*op, 0);
}

// The sender's side of a verdict, by reliability level (SEMANTICS.md).
void sender_verdict(ViOp& op, uint8_t verdict) {
  Vi* v = vi_of(op.slot, op.vi);
  uint32_t slot = op.slot, vi = op.vi;
  if (verdict == abi::kCqOk || !v) return complete_in_order(op, 0);
  uint32_t level = reliability(*v);
  uint32_t status = 0, code = abi::kViErrConnLost;
  bool brk = level != abi::kViUnreliable;
  switch (verdict) {
    case abi::kCqRemoteNoRecv:
    case abi::kCqRemoteTooLong:
    case abi::kCqRemoteDescError:
      if (level == abi::kViReliableReception) status = abi::kViStRemoteDescError;
      break;
    case abi::kCqRemoteRdmaProt:
      if (level == abi::kViReliableReception || op.kind == kKindRead) status = abi::kViStRdmaProtError;
      if (op.kind == kKindRead) code = abi::kViErrRdmaReadProt;
      break;
    default:  // not connected, unreachable, no resources at the target
      status = abi::kViStTransportError;
      brk = true;
      break;
  }
  complete_in_order(op, status);
  // The receiver broke its side already (it knows the level too).
  if (brk) break_vi(slot, vi, code, false);
}

}  // namespace

// ================================================================== API

void vi_init(SlotTable& t) {
  memset(&g, 0, sizeof g);
  g.t = &t;
  g.rng = (t.rng * 2246822519u) | 1u;
}

bool vi_can_start(const abi::SqEntry& e) {
  // Every other protocol's descriptors pass here too: one range check for
  // them (+5 instructions a VMMC or AM message when the backlog was looked
  // at first, issue 22).
  static_assert(abi::kOpViDestroy + 1 == abi::kOpViPostSend && abi::kOpViPostSend + 1 == abi::kOpViPostRecv &&
                abi::kOpViPostRecv + 1 == abi::kOpViConnect && abi::kOpViConnect + 5 == abi::kOpViDisconnect);
  if (uint32_t(e.opcode) - abi::kOpViDestroy > uint32_t(abi::kOpViDisconnect - abi::kOpViDestroy)) return true;
  if (e.opcode == abi::kOpViPostSend) {
    for (const ViOp& op : g.ops)
      if (!op.used) return true;
    return false;
  }
  if (e.opcode == abi::kOpViPostRecv) return true;
  // A connection operation (destroy, connect .. disconnect) sends one
  // message at most: it waits while the backlog's reserve is short (its
  // peers' links full), rather than failing for want of room (see kBacklog).
  return g.backlog_count + kBacklogReserve <= kBacklog;
}

namespace {

// Every VI opcode but the posts: creating, connecting and tearing down VIs.
[[gnu::noinline]] void manage(Slot& s, const abi::SqEntry& e) {
  uint8_t disc[abi::kViMaxDiscriminator] = {};
  if (e.opcode == abi::kOpViConnect || e.opcode == abi::kOpViListen) {
    if (e.access > abi::kViMaxDiscriminator) return slot_complete(s, e, abi::kCqBadLength, 0);
    abi::CqStatus st = e.access ? slot_take_inline(s, e.access, disc) : abi::kCqOk;
    if (st != abi::kCqOk) return slot_complete(s, e, st, 0);
  }
  if (e.opcode == abi::kOpViListen) return listen(s, e, disc);
  if (e.opcode == abi::kOpViAccept) return accept(s, e);
  if (e.opcode == abi::kOpViReject) return reject(s, e);
  if (e.opcode == abi::kOpViCancel) return cancel(s, e);
  uint32_t vi = e.dst_slot;
  if (vi >= abi::kMaxVis) return slot_complete(s, e, abi::kCqViBadVi, vi);
  Vi& v = g.vis[s.index][vi];
  if (e.opcode == abi::kOpViCreate) {
    uint32_t level = e.access & abi::kViAttrReliabilityMask;
    bool level_ok = level == abi::kViUnreliable || level == abi::kViReliableDelivery || level == abi::kViReliableReception;
    if (v.used || !level_ok || (e.access & ~(abi::kViAttrReliabilityMask | abi::kViAttrRdmaWrite | abi::kViAttrRdmaRead)))
      return slot_complete(s, e, abi::kCqViBadVi, vi);
    memset(&v, 0, sizeof v);
    v.used = true;
    v.state = abi::kViStateIdle;
    v.attrs = e.access;
    v.ptag = e.src_key;
    v.max_transfer = e.length;
    return slot_complete(s, e, abi::kCqOk, vi);
  }
  if (!v.used) return slot_complete(s, e, abi::kCqViBadVi, vi);
  switch (e.opcode) {
    case abi::kOpViDestroy:
      reset_vi(s.index, vi);
      v.used = false;
      return slot_complete(s, e, abi::kCqOk, vi);
    case abi::kOpViDisconnect:
      reset_vi(s.index, vi);
      return slot_complete(s, e, abi::kCqOk, vi);
    case abi::kOpViConnect:
      return connect(s, v, vi, e, disc);
    default:
      return slot_complete(s, e, abi::kCqBadOpcode, vi);
  }
}

}  // namespace

void vi_execute(SlotTable& t, Slot& s, const abi::SqEntry& e) {
  (void)t;
  // The posts, first and alone: a descriptor's way here paid for the
  // zeroed discriminator buffer the connection opcodes need (~40
  // instructions of every post; issue 22).
  if (e.opcode != abi::kOpViPostSend && e.opcode != abi::kOpViPostRecv) return manage(s, e);
  const uint32_t vi = e.dst_slot;
  Vi* v = vi_of(s.index, vi);
  if (!v) return slot_complete(s, e, abi::kCqViBadVi, vi);
  if (e.opcode == abi::kOpViPostRecv) return post_recv(s, *v, vi, e);
  if (v->state != abi::kViStateConnected && v->state != abi::kViStateError)
    return slot_complete(s, e, abi::kCqViBadVi, vi);
  return post_send(s, *v, vi, e);
}

// The accept that connects the peer's side of (slot, vi) is still waiting
// for link room: the VI's data must not overtake it (the peer would refuse
// it as not connected and the connection would break).
bool accept_waiting(uint32_t slot, uint32_t vi) {
  for (uint32_t n = 0; n < g.backlog_count; ++n) {
    const ConnMessage& m = g.backlog[n].m;
    if (m.kind == kConnAccept && m.slot == slot && m.vi == vi) return true;
  }
  return false;
}

namespace {
// Every packet of `op` went (over the link: its verdict is due).
bool sent_all(ViOp& op) {
  if (op.dst_node != self() && !op.awaiting) {
    op.awaiting = true;
    verdict_wait_start(op.dst_node, op.wait);
    if (op.kind != kKindRead) set_ok_due(op, true);  // a read ends with its response
  }
  return true;
}

// The fields every packet of operation `op` carries (its header's others
// are zero).
void op_header(const ViOp& op, abi::WireHeader& h) {
  h = abi::WireHeader{};
  h.dst_slot = uint16_t(op.dst_slot);
  h.vi = uint16_t(op.dst_vi);
  h.status = uint8_t(op.vi);
  h.src_slot = uint16_t(op.slot);
  h.op_id = op.op_id;
  h.op_length = op.d.cs.length;
}

// The rest of the message's bytes lie in the data segment at op.seg: the
// link builds their packets from one header template, a burst per pass
// (send_segments: an index store per few packets and one doorbell, as
// VMMC's put_feed), where one link::send each published every packet.
// The template is filled once and stays in op.stream while the packets may
// be sent again. The same packets as the loop in vi_feed builds. 1: every
// data packet went; 0: no room (more next pass); -1: the link is gone (the
// operation failed).
int stream_last_segment(Slot& s, ViOp& op) {
  const Desc& d = op.d;
  if (!op.streaming) {
    const bool imm = d.cs.control & abi::kViCtlImmediate;
    const uint32_t at = op.sent - op.seg_off;  // the segment's first byte in the message
    link::Segments& sg = op.stream;
    op_header(op, sg.h);
    sg.h.flags = op.trace_seen ? abi::kWireTrace : 0;
    if (op.kind == kKindSend) {
      sg.h.op = abi::kWireOpViSend;
      sg.h.dst_addr = at;
      sg.h.dst_key = imm ? d.cs.immediate : 0;
      sg.first_flags = at == 0 ? abi::kWireFirst : 0;
      sg.last_flags = uint8_t(abi::kWireLast | (imm ? abi::kWireImmediate : 0));
    } else {
      sg.h.op = abi::kWireOpViWrite;
      sg.h.dst_addr = d.remote.data + at;
      sg.h.dst_key = d.remote.handle;
      sg.first_flags = 0;
      sg.last_flags = imm ? 0 : abi::kWireLast;  // with immediate data, the closing send ends it
    }
    sg.src = d.segs[op.seg].nic;
    sg.length = d.segs[op.seg].len;
    sg.owner = op.slot;
    sg.generation = op.generation;
    sg.pages = nullptr;
    sg.page_off = 0;
    op.streaming = true;
  }
  const uint32_t room = link_room(op.dst_node, op.stalled_since);
  if (room == 0) return 0;
  if (room == kLinkGone) {
    sender_verdict(op, abi::kCqUnreachable);
    return -1;
  }
  const uint64_t now = hal::clint::now();
  const uint32_t was = op.seg_off;
  op.seg_off = link::send_segments(op.dst_node, op.stream, was, room, now);
  op.sent += op.seg_off - was;
  if (op.seg_off < op.stream.length) return 0;
  op.data_done = true;
  if (op.trace_seen && (op.stream.last_flags & abi::kWireLast)) slot_trace_tx(s, op.trace_seen, now);
  return 1;
}

// One packet of operation `op` (or, streamed, every data packet left), or
// the end of its sending. A function of its own, not vi_feed's loop body:
// around a loop, the compiler computed and spilled the address of every
// field of the record before the first turn (~90 instructions of a 64 B
// send that takes one turn; issue 22).
enum Fed { kFedFalse, kFedTrue, kFedMore };
[[gnu::noinline]] Fed feed_step(Slot& s, ViOp& op) {
  const Desc& d = op.d;
  const bool imm = d.cs.control & abi::kViCtlImmediate;
  bool data = false;  // a data packet (else the read request or the closing send)
  if (op.kind == kKindRead) {
    if (op.closed) return sent_all(op) ? kFedTrue : kFedFalse;  // the request went; the answer comes back
  } else if (!op.data_done) {
    data = true;
    while (op.seg < d.nsegs && op.seg_off == d.segs[op.seg].len) ++op.seg, op.seg_off = 0;
    if (op.dst_node != self() && op.seg < d.nsegs &&
        op.sent - op.seg_off + d.segs[op.seg].len == d.cs.length) {
      int r = stream_last_segment(s, op);
      if (r <= 0) return r < 0 ? kFedTrue : kFedFalse;  // no room: more next pass (the link gone: failed)
      return kFedMore;  // every data packet went
    }
  } else if (op.kind != kKindWrite || !imm || op.closed) {
    return sent_all(op) ? kFedTrue : kFedFalse;  // the verdict finishes it
  }
  // One packet built here (the streamed ones: stream_last_segment).
  abi::WireHeader h;
  op_header(op, h);
  uint64_t src = 0;
  uint32_t len = 0;
  if (op.kind == kKindRead) {
    h.op = abi::kWireOpViReadReq;
    h.dst_addr = d.remote.data;
    h.dst_key = d.remote.handle;
  } else if (data) {
    if (op.seg < d.nsegs) {
      uint32_t left = d.segs[op.seg].len - op.seg_off;
      len = left < abi::kMtu ? left : abi::kMtu;
      src = d.segs[op.seg].nic + op.seg_off;
    }
    bool last = op.sent + len == d.cs.length;
    if (op.kind == kKindSend) {
      h.op = abi::kWireOpViSend;
      h.dst_addr = op.sent;
      h.flags = uint8_t((op.sent == 0 ? abi::kWireFirst : 0) | (last ? abi::kWireLast : 0) |
                        (last && imm ? abi::kWireImmediate : 0));
      h.dst_key = imm ? d.cs.immediate : 0;
    } else {
      h.op = abi::kWireOpViWrite;
      h.dst_addr = d.remote.data + op.sent;
      h.dst_key = d.remote.handle;
      h.flags = last && !imm ? abi::kWireLast : 0;
    }
  } else {
    // RDMA write with immediate data: a closing zero-length send takes a
    // receive descriptor at the target, after the data is in place.
    h.op = abi::kWireOpViSend;
    h.flags = abi::kWireFirst | abi::kWireLast | abi::kWireImmediate | abi::kWireRdmaImm;
    h.dst_key = d.cs.immediate;
    h.op_length = 0;
  }
  h.payload_len = uint16_t(len);  // the link sets it too; the local path needs it
  if (op.trace_seen) h.flags |= abi::kWireTrace;
  const uint64_t sent_at = op.trace_seen ? hal::clint::now() : 0;  // as put_feed stamps
  if (op.dst_node != self()) {
    uint32_t room = link_room(op.dst_node, op.stalled_since);
    if (room == 0) return kFedFalse;
    if (room == kLinkGone) {
      sender_verdict(op, abi::kCqUnreachable);
      return kFedTrue;
    }
    if (!link::send(op.dst_node, h, src, uint16_t(len), op.slot, op.generation)) return kFedFalse;
  }
  if (data) {
    op.sent += len, op.seg_off += len;
    op.data_done = op.sent == d.cs.length;
  } else {
    op.closed = true;
  }
  if (op.trace_seen && (h.flags & abi::kWireLast)) slot_trace_tx(s, op.trace_seen, sent_at);
  // Between two slots of this NIC the receiving side runs right here (and
  // may finish the operation: the loop condition looks again).
  if (op.dst_node == self()) vi_deliver(self(), h, reinterpret_cast<const uint8_t*>(src));
  return kFedMore;
}

}  // namespace

bool vi_feed(SlotTable& t, Slot& s) {
  (void)t;
  core::cost::Phase<abi::kPhaseTransmit> cost;
  core::cost::op<abi::kCostOpViSend>();
  ViOp& op = g.ops[s.vi_op];
  const uint64_t op_id = op.op_id;
  if (op.used && g.backlog_count && accept_waiting(op.slot, op.vi)) return false;
  while (op.used && op.op_id == op_id)
    if (Fed f = feed_step(s, op); f != kFedMore) return f == kFedTrue;
  return true;
}

namespace {

// The link declares a peer unreachable only when data to it goes
// unacknowledged: a connection with nothing to send would never learn that
// its peer's NIC died. Now and then, each peer with a connected VI gets a
// message that needs an acknowledgement -- only when its link has room and
// nothing for it waits: otherwise data is in flight to it already (the link
// judges the peer by that), and a keepalive must not queue (a peer off the
// CPU for seconds would fill the backlog with them).
bool keepalive(uint64_t now) {
  if (now < g.next_keepalive) return false;
  g.next_keepalive = now + hal::clint::us_to_ticks(kViKeepaliveUs);
  bool sent[abi::kMaxNodes] = {};
  for (uint32_t k = 0; k < abi::kMaxSlots; ++k)
    for (const Vi& v : g.vis[k]) {
      if (!v.used || v.state != abi::kViStateConnected || v.peer_node == self() || v.peer_node >= abi::kMaxNodes ||
          sent[v.peer_node])
        continue;
      sent[v.peer_node] = true;
      if (!conn_in_order(v.peer_node)) continue;
      ConnMessage m{};
      m.kind = kConnKeepalive;
      link_conn(v.peer_node, m);  // (no room: data in flight, as above)
    }
  return false;  // not work the loop must hurry for
}

}  // namespace

namespace {
// Operations whose verdicts (or read responses) are overdue (remote.h,
// kVerdictTimeoutUs) fail as if their peer were unreachable.
bool verdict_timers(uint64_t now) {
  if (now < g.next_verdict_check) return false;
  g.next_verdict_check = now + hal::clint::us_to_ticks(kVerdictCheckUs);
  bool worked = false;
  for (ViOp& op : g.ops)
    if (op.used && op.awaiting && verdict_overdue(op.dst_node, op.wait, op.progress, now)) {
      count(ulnic::abi::kCtrVerdictTimeouts);
      sender_verdict(op, abi::kCqUnreachable);
      worked = true;
    }
  return worked;
}
}  // namespace

namespace {
// Keepalives and verdict checks due, connection messages waiting for link
// room, RDMA reads to answer (vi_poll looked). Out of line, as control.cpp's
// take_commands.
[[gnu::noinline]] bool vi_work(uint64_t now) {
  bool worked = keepalive(now);
  worked |= verdict_timers(now);
  // (remote_poll ran first: the verdicts that wait go before these.)
  if (g.backlog_count) worked |= send_backlog();
  // Every pass of the loop comes here: with no RDMA read to answer it is
  // quickly done.
  while (g.responders_end && !g.responders[g.responders_end - 1].used) --g.responders_end;
  for (uint32_t i = 0; i < g.responders_end; ++i) {
    Responder& r = g.responders[i];
    if (!r.used) continue;
    if (!slot_live(*g.t, r.slot, r.generation)) {  // its process left: the requester hears from the disconnect
      r.used = false;
      continue;
    }
    Vi* v = vi_of(r.slot, r.vi);
    for (uint64_t budget = kCopyChunk; r.used && budget;) {
      uint32_t len = r.length - r.sent < abi::kMtu ? r.length - r.sent : abi::kMtu;
      uint64_t nic = 0;
      if (!v || v->state != abi::kViStateConnected ||
          !rdma_ok(g.t->slots[r.slot], *v, r.key, r.va + r.sent, len, false, nic)) {
        // Deregistered (or disconnected) under the read: no byte more.
        r.used = false;
        count(ulnic::abi::kCtrViRefused);
        send_verdict(r.node, r.op_id, abi::kCqRemoteRdmaProt);
        if (v && reliable(*v)) break_vi(r.slot, r.vi, abi::kViErrRdmaReadProt, false);
        break;
      }
      abi::WireHeader h{};
      h.op = abi::kWireOpViReadResp;
      h.dst_slot = uint16_t(r.dst_slot);
      h.vi = uint16_t(r.dst_vi);
      h.status = uint8_t(r.vi);
      h.src_slot = uint16_t(r.slot);
      h.op_id = r.op_id;
      h.op_length = r.length;
      h.dst_addr = r.sent;
      h.payload_len = uint16_t(len);
      h.flags = r.sent + len == r.length ? abi::kWireLast : 0;
      if (r.node == self()) {
        deliver_read_response(self(), h, reinterpret_cast<const uint8_t*>(nic));
      } else if (!link::can_send(r.node) || !link::send(r.node, h, nic, uint16_t(len), r.slot, r.generation)) {
        break;
      }
      r.sent += len;
      budget -= len < budget ? len : budget;
      worked = true;
      if (h.flags & abi::kWireLast) r.used = false;
    }
  }
  return worked;
}
}  // namespace

uint32_t vi_conn_waiting() { return g.backlog_count; }

bool vi_poll(SlotTable& t, uint64_t now) {
  (void)t;
  if (now < g.next_keepalive && now < g.next_verdict_check && !g.backlog_count && !g.responders_end) return false;
  return vi_work(now);
}

bool vi_placement(uint32_t src, const abi::WireHeader& h, uint64_t& base, uint64_t& hi) {
  if (h.flags & abi::kWireLast) return false;
  Vi* v = target(src, h);
  if (!v || v->in_op != h.op_id || v->in_verdict != abi::kCqOk) return false;
  if (h.op == abi::kWireOpViSend)
    return v->rx_active && !v->rx_error && v->rx_epoch == g.t->epoch &&
           segment_of(v->rx, h.dst_addr + h.payload_len, base, hi);
  if (h.op != abi::kWireOpViWrite) return false;
  // The registration that took this packet takes the next ones while it
  // lasts (rights, ptag and the VI's enable are as just checked).
  const Slot& s = g.t->slots[h.dst_slot];
  const Registration& r = s.regs[h.dst_key & 0xff];
  uint64_t nic = 0;
  if (!rdma_ok(s, *v, h.dst_key, h.dst_addr, h.payload_len, true, nic)) return false;
  base = nic - h.dst_addr;
  hi = r.va + r.length;
  return true;
}

void vi_deliver(uint32_t src, const abi::WireHeader& h, const uint8_t* payload) {
  if (h.op == abi::kWireOpViConn) {
    if (h.payload_len != sizeof(ConnMessage)) return;
    ConnMessage m;
    memcpy(&m, payload, sizeof m);
    return deliver_conn(src, m);
  }
  if (h.op == abi::kWireOpViReadResp) return deliver_read_response(src, h, payload);
  core::cost::op<abi::kCostOpViRecv>();
  Vi* v = target(src, h);
  if (!v) {
    count(ulnic::abi::kCtrViRefused);
    if ((h.flags & abi::kWireLast) || h.op == abi::kWireOpViReadReq) send_verdict(src, h.op_id, abi::kCqRemoteNotConnected);
    return;
  }
  if (h.op == abi::kWireOpViSend) return deliver_send(src, *v, h.dst_slot, h.vi, h, payload);
  if (h.op == abi::kWireOpViWrite) return deliver_write(src, *v, h.dst_slot, h.vi, h, payload);
  if (h.op == abi::kWireOpViReadReq) return deliver_read_request(src, *v, h.dst_slot, h.vi, h);
}

namespace {
[[gnu::noinline]] void ok_through(uint32_t src, uint32_t seq) {
  // Posting order (op_id >> 8) among those due: each VI's descriptors
  // complete in the order they were posted (complete_in_order).
  uint8_t due[kMaxViOps];
  uint32_t n = 0;
  for (uint32_t w = 0; w < kMaxViOps / 64; ++w)
    for (uint64_t m = g.ok_due[w]; m; m &= m - 1) {
      const uint32_t i = w * 64 + uint32_t(__builtin_ctzll(m));
      const ViOp& op = g.ops[i];
      if (op.dst_node != src || op.answered || !link::seq_at_or_before(op.wait.last_seq, seq)) continue;
      uint32_t k = n++;
      for (; k && g.ops[due[k - 1]].op_id >> 8 > op.op_id >> 8; --k) due[k] = due[k - 1];
      due[k] = uint8_t(i);
    }
  if (n) core::cost::op<abi::kCostOpVerdict>();
  for (uint32_t k = 0; k < n; ++k)
    if (g.ops[due[k]].used) sender_verdict(g.ops[due[k]], abi::kCqOk);
}
}  // namespace

void vi_ok_through(uint32_t src, uint32_t seq) {
  static_assert(kMaxViOps == 128);
  if (g.ok_due[0] | g.ok_due[1]) ok_through(src, seq);  // (no VI operation due: the common case for the others)
}

void vi_result(uint32_t src, const abi::WireHeader& h) {
  ViOp* op = find_op(h.op_id);
  if (!op || op->dst_node != src || op->answered) return;  // (answered: waits for an older read)
  sender_verdict(*op, h.status);
}

void vi_peer_lost(uint32_t peer) {
  while (ViOp* op = oldest_op([&](const ViOp& o) { return o.dst_node == peer; }))
    sender_verdict(*op, abi::kCqUnreachable);
  for (Responder& r : g.responders)
    if (r.used && r.node == peer) r.used = false;
  for (Conn& c : g.conns)
    if (c.used && c.node == peer) c.used = false;
  uint32_t kept = 0;
  for (uint32_t n = 0; n < g.backlog_count; ++n)  // kept in order, minus the lost peer's
    if (g.backlog[n].dst != peer) g.backlog[kept++] = g.backlog[n];
  g.backlog_count = kept;
  for (uint32_t k = 0; k < abi::kMaxSlots; ++k)
    for (uint32_t i = 0; i < abi::kMaxVis; ++i) {
      Vi& v = g.vis[k][i];
      if (!v.used) continue;
      if (v.state == abi::kViStateConnected && v.peer_node == peer) break_vi(k, i, abi::kViErrConnLost, false);
      else if (v.state == abi::kViStateConnectPending && v.connect_node == peer)
        finish_connect(k, i, abi::kCqUnreachable, nullptr);
    }
}

bool vi_payload_valid(uint64_t serial) { return serial && g.pool[(serial - 1) % kPool].serial == serial; }

void vi_slot_detached(uint32_t slot) {
  if (slot >= abi::kMaxSlots) return;
  for (uint32_t i = 0; i < abi::kMaxVis; ++i) {
    Vi& v = g.vis[slot][i];
    if (!v.used) continue;
    if (v.state == abi::kViStateConnected) send_disconnect(v, slot, i);
    if (v.state == abi::kViStateConnectPending) send_cancel(v);
    memset(&v, 0, sizeof v);
  }
  for (ViOp& op : g.ops)
    if (op.used && op.slot == slot) release_op(op);
  for (Responder& r : g.responders)
    if (r.used && r.slot == slot) r.used = false;
  for (Listen& l : g.listens)
    if (l.used && l.slot == slot) l.used = false;
  for (Conn& c : g.conns)
    if (c.used && c.delivered && c.slot == slot) {
      ConnMessage m{};
      m.kind = kConnReject;
      m.serial = c.req.serial;
      c.used = false;
      send_conn(c.node, m);
    }
}

}  // namespace lcp
