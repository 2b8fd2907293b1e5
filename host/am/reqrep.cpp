// The AM-2 request/reply protocol, the same over every transport.
//
// Credits are request instances, as in HPAM and AMUDP: each (requester,
// responder) pair has k instances; a request occupies one until its reply
// (or the empty ack a handler that did not reply leaves, or a return) comes
// back, and the responder keeps one answer per instance. So replies never
// wait for a credit, and on an unreliable transport the answer kept doubles
// as the retransmission of a lost reply: a duplicate request (same instance,
// same serial) gets it again instead of running the handler twice.
//
// On unreliable transports (UDP) the requester retransmits with exponential
// backoff and gives up with EUNREACHABLE; messages larger than one packet go
// as pieces, `window` at a time, each confirmed by a piece ack (a socket
// buffer smaller than the message must not drop the same pieces forever).
// Reliable transports deliver every packet, so none of that runs there;
// a medium larger than one packet still goes as pieces there (native), and
// is gathered before its handler runs.
//
// Every endpoint counts what it sends and receives (amudp_stats_t): here,
// where the packets are built and taken apart, whatever the transport.
#include <amudp.h>

#include <algorithm>
#include <array>
#include <cstdarg>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <span>
#include <utility>

#include "am_internal.h"

namespace ulnic::am {
namespace {

using std::chrono::milliseconds;

constexpr milliseconds kFirstRetry{20};   // a LAN round trip is well under this
constexpr milliseconds kMaxBackoff{1000};
// Transport::probes: a peer is asked after its oldest request has been out
// this long, and again as often while requests stay out (SEMANTICS.md).
constexpr milliseconds kProbeAfter{1000};
constexpr milliseconds kProbeEvery{1000};

milliseconds give_up_after() {
  static const milliseconds v = [] {
    const char* s = std::getenv("ULNIC_AM_UDP_TIMEOUT_MS");
    long ms = s && *s ? std::strtol(s, nullptr, 10) : 0;
    return milliseconds(ms > 0 ? ms : 10000);
  }();
  return v;
}

const Transport& tp() { return *lib().transport; }

// The payload bytes one packet carries: fixed per transport, so both sides
// agree on where piece i starts (header + 16 arguments always fit).
uint32_t piece_bytes() { return tp().max_packet - uint32_t(sizeof(PacketHeader)) - 4 * kMaxArgs; }

uint32_t pieces_of(uint32_t nbytes) {
  uint32_t p = piece_bytes();
  return nbytes == 0 ? 1 : (nbytes + p - 1) / p;
}

// How many packets a message takes: one if the transport places its payload.
uint32_t pieces_of(const PacketHeader& h) {
  if (tp().places_long && h.category == Category::kLong) return 1;
  return pieces_of(h.nbytes);
}

uint64_t all_pieces(uint32_t n) { return n >= 64 ? ~0ull : (1ull << n) - 1; }

// ---- tokens: a fixed ring, so a token used after its handler returned is
// recognized (its entry is no longer live) rather than trusted.
Token token_ring[64];
unsigned token_next = 0;

Token* take_token() {
  Token* t = &token_ring[token_next++ % 64];
  *t = Token{};
  t->live = true;
  return t;
}

// ---- calling handlers with N int arguments

template <size_t... I>
void call_short(amudp_handler_fn_t fn, void* token, const int32_t* a, std::index_sequence<I...>) {
  using F = void (*)(void*, decltype((void)I, int())...);
  reinterpret_cast<F>(fn)(token, int(a[I])...);
}
template <size_t... I>
void call_bulk(amudp_handler_fn_t fn, void* token, void* buf, size_t n, const int32_t* a,
               std::index_sequence<I...>) {
  using F = void (*)(void*, void*, size_t, decltype((void)I, int())...);
  reinterpret_cast<F>(fn)(token, buf, n, int(a[I])...);
}
using ShortCall = void (*)(amudp_handler_fn_t, void*, const int32_t*);
using BulkCall = void (*)(amudp_handler_fn_t, void*, void*, size_t, const int32_t*);
template <size_t N>
void short_n(amudp_handler_fn_t fn, void* t, const int32_t* a) { call_short(fn, t, a, std::make_index_sequence<N>{}); }
template <size_t N>
void bulk_n(amudp_handler_fn_t fn, void* t, void* b, size_t n, const int32_t* a) {
  call_bulk(fn, t, b, n, a, std::make_index_sequence<N>{});
}
template <size_t... N>
constexpr auto short_table(std::index_sequence<N...>) { return std::array<ShortCall, sizeof...(N)>{{&short_n<N>...}}; }
template <size_t... N>
constexpr auto bulk_table(std::index_sequence<N...>) { return std::array<BulkCall, sizeof...(N)>{{&bulk_n<N>...}}; }
constexpr auto kShortCalls = short_table(std::make_index_sequence<kMaxArgs + 1>{});
constexpr auto kBulkCalls = bulk_table(std::make_index_sequence<kMaxArgs + 1>{});

// Runs a request or reply handler, between the endpoint's callbacks
// (AMUDP_SetHandlerCallbacks); `token` is live only meanwhile.
void run_handler(Token* t, amudp_handler_fn_t fn, const int32_t* args, void* buf, size_t n) {
  Endpoint& ep = *t->ep;
  auto cat = amudp_category_t(t->hdr.category);
  handler_depth()++;
  if (ep.pre_handler) {
    uint32_t copy[kMaxArgs];
    std::memcpy(copy, args, 4 * size_t(t->hdr.nargs));
    ep.pre_handler(cat, t->is_request, t->hdr.handler, t, t->hdr.category == Category::kShort ? nullptr : buf,
                   t->hdr.category == Category::kShort ? 0 : n, t->hdr.nargs, copy);
  }
  // A medium's buffer is 8-byte aligned (SEMANTICS.md). In the packet the
  // payload follows the 4-byte arguments, so an odd count leaves it 4 bytes
  // off: such a payload is handed over from an aligned copy (UBSan found
  // amudp_allam's handlers reading their struct from a misaligned buffer).
  std::unique_ptr<uint64_t[]> aligned;
  if (t->hdr.category == Category::kMedium && n && reinterpret_cast<uintptr_t>(buf) % alignof(uint64_t)) {
    aligned.reset(new uint64_t[(n + sizeof(uint64_t) - 1) / sizeof(uint64_t)]);
    std::memcpy(aligned.get(), buf, n);
    buf = aligned.get();
  }
  if (t->hdr.category == Category::kShort) kShortCalls[t->hdr.nargs](fn, t, args);
  else kBulkCalls[t->hdr.nargs](fn, t, buf, n, args);
  if (ep.post_handler) ep.post_handler(cat, t->is_request);
  handler_depth()--;
  t->live = false;
}

op_t opcode_of(Category c, bool request) {
  int base = request ? AM_REQUEST_M : AM_REPLY_M;
  return base + int(c);
}

// Handler 0 with a returned message: `to` is where it was going.
void run_returned(Endpoint& ep, const PacketHeader& h, const en_t& to, int status, bool request) {
  Token* t = take_token();
  t->returned = true;
  t->ep = &ep;
  t->source = to;
  t->tag = h.tag;
  t->hdr = h;
  ep.stats.ReturnedMessages++;
  handler_depth()++;
  using F = void (*)(int, op_t, void*);
  reinterpret_cast<F>(ep.handlers[0])(status, opcode_of(h.category, request), t);
  handler_depth()--;
  t->live = false;
}

// ---- peers

Peer& peer_for(Endpoint& ep, const en_t& name) {
  auto& p = ep.peers[name];
  if (!p) {
    p = std::make_unique<Peer>();
    p->name = name;
  }
  if (int(p->out.size()) != ep.depth && p->outstanding == 0) {
    p->out.assign(size_t(ep.depth), OutInstance{});
    p->in.assign(size_t(ep.depth), InInstance{});
  }
  return *p;
}

// ---- sending

const PacketHeader& header_of(const Transfer& x) { return *reinterpret_cast<const PacketHeader*>(x.head.data()); }

// Every packet the endpoint sends, by what it carries.
void count_sent(Endpoint& ep, const PacketHeader& h, size_t bytes) {
  ep.stats.TotalBytesSent += bytes;
  if (h.kind == Kind::kRequest) ep.stats.RequestTotalBytesSent[int(h.category)] += bytes;
  else if (h.kind == Kind::kReply || h.kind == Kind::kAck) ep.stats.ReplyTotalBytesSent[int(h.category)] += bytes;
}

// Sends piece i of a transfer (whole message if it has one piece).
int send_piece(Endpoint& ep, const en_t& dest, Transfer& x, const uint8_t* payload, uint32_t i) {
  auto* h = reinterpret_cast<PacketHeader*>(x.head.data());
  uint32_t from = i * piece_bytes();
  uint32_t len = x.npieces == 1 ? h->nbytes : std::min(h->nbytes - std::min(h->nbytes, from), piece_bytes());
  h->piece = from;
  x.sent |= 1ull << i;
  count_sent(ep, *h, x.head.size() + len);
  return tp().send(ep, dest, x.head.data(), x.head.size(), payload + from, len);
}

// Sends the pieces not yet sent inside the window that starts at the first
// unconfirmed piece (all of them on a reliable transport).
int send_window(Endpoint& ep, const en_t& dest, Transfer& x, const uint8_t* payload) {
  uint32_t window = tp().reliable ? x.npieces : tp().window;
  uint32_t first = 0;
  while (first < x.npieces && (x.acked >> first & 1)) first++;
  for (uint32_t i = first; i < x.npieces && i < first + window; i++) {
    if (x.sent >> i & 1) continue;
    int rc = send_piece(ep, dest, x, payload, i);
    if (rc != 0) return rc;
  }
  return 0;
}

void arm(Transfer& x) {
  if (tp().reliable) return;
  x.active = true;
  x.backoff = kFirstRetry;
  x.next_try = Clock::now() + x.backoff;
  x.give_up = Clock::now() + give_up_after();
  x.tried_late = false;
}

// Builds a transfer: header, args, and (unreliable) a copy of the payload.
void build(Transfer& x, const PacketHeader& h, const int32_t* args, const void* payload) {
  // A fresh transfer in the instance's old buffers: their capacity stays (no
  // allocation per message once an instance has carried one like it), but a
  // large payload copy is not kept for every instance of every peer.
  std::vector<uint8_t> head = std::move(x.head), kept = std::move(x.payload);
  x = Transfer{};
  x.head = std::move(head);
  if (kept.capacity() <= 4096) x.payload = std::move(kept);
  x.payload.clear();
  x.head.resize(sizeof h + 4 * size_t(h.nargs));
  std::memcpy(x.head.data(), &h, sizeof h);
  if (h.nargs) std::memcpy(x.head.data() + sizeof h, args, 4 * size_t(h.nargs));
  x.npieces = pieces_of(h);
  if (!tp().reliable && h.nbytes) x.payload.assign(static_cast<const uint8_t*>(payload),
                                                   static_cast<const uint8_t*>(payload) + h.nbytes);
}

// Sends a one-packet control answer (ack, return, piece ack, refusal); not kept.
void send_control(Endpoint& ep, const en_t& dest, PacketHeader h) {
  h.magic = kMagic;
  h.nargs = 0;
  h.nbytes = 0;
  h.piece = 0;
  count_sent(ep, h, sizeof h);
  (void)tp().send(ep, dest, &h, sizeof h, nullptr, 0);
}

// Answers a request (ack / return / reply) and keeps the answer for a
// duplicate. `payload` is the reply's (medium or long) payload.
int answer(Endpoint& ep, Peer& peer, InInstance& in, const PacketHeader& h, const int32_t* args,
           const void* payload) {
  build(in.reply, h, args, payload);
  in.seq_done = h.seq;
  const uint8_t* bytes = tp().reliable ? static_cast<const uint8_t*>(payload) : in.reply.payload.data();
  int rc = send_window(ep, peer.name, in.reply, bytes);
  // A one-packet answer needs no timer: a lost one is asked for again by
  // the requester's retransmission. Pieces are confirmed one by one.
  if (in.reply.npieces > 1) arm(in.reply);
  return rc;
}

void refuse(Endpoint& ep, Peer& peer, InInstance* in, const PacketHeader& req, int status) {
  PacketHeader h = req;
  h.kind = Kind::kReturn;
  h.status = uint8_t(status);
  h.nbytes = 0;
  h.nargs = 0;
  if (in) (void)answer(ep, peer, *in, h, nullptr, nullptr);
  else send_control(ep, peer.name, h);
}

// ---- receiving

struct Packet {
  const PacketHeader* h;
  const int32_t* args;
  const uint8_t* payload;
  uint32_t len;  // payload bytes in this packet
};

bool parse(const uint8_t* data, size_t len, Packet& p) {
  if (len < sizeof(PacketHeader)) return false;
  p.h = reinterpret_cast<const PacketHeader*>(data);
  const PacketHeader& h = *p.h;
  if (h.magic != kMagic || h.nargs > kMaxArgs || uint8_t(h.category) > 2) return false;
  if (h.kind < Kind::kRequest || h.kind > Kind::kProbe) return false;
  size_t head = sizeof h + 4 * size_t(h.nargs);
  if (len < head) return false;
  p.args = reinterpret_cast<const int32_t*>(data + sizeof h);
  p.payload = data + head;
  p.len = uint32_t(len - head);
  if (h.nbytes > AMUDP_MAX_LONG || h.piece > h.nbytes || p.len > h.nbytes - h.piece) return false;
  if (h.category == Category::kShort && h.nbytes) return false;
  if (h.category == Category::kMedium && h.nbytes > AMUDP_MAX_MEDIUM) return false;
  if (h.placed) return h.category == Category::kLong && tp().places_long && p.len == 0 && h.piece == 0;
  // A piece starts on a piece boundary and is whole unless it is the last.
  if (h.piece % piece_bytes() || (p.len != piece_bytes() && h.piece + p.len != h.nbytes)) return false;
  return true;
}

// Where a Long payload goes, or the status that refuses it.
int check_long(const Endpoint& ep, const PacketHeader& h) {
  if (!ep.seg || h.offset > ep.seg_len) return EBADSEGOFF;
  if (uint64_t(h.offset) + h.nbytes > ep.seg_len) return EBADLENGTH;
  // Placed by the transport into another segment than this one (changed
  // since the sender learned it), or not placed at all.
  if (h.placed && h.placed != kPlacedByNic && h.nbytes && h.placed != ep.seg_gen) return EBADSEGOFF;
  return 0;
}

int check_request(const Endpoint& ep, const PacketHeader& h) {
  if (ep.tag == AM_NONE || (ep.tag != AM_ALL && ep.tag != h.tag)) return EBADTAG;
  if (h.handler == 0 || !ep.handlers[h.handler]) return EBADHANDLER;
  if (h.category == Category::kLong) return check_long(ep, h);
  return 0;
}

void piece_ack(Endpoint& ep, const en_t& to, const PacketHeader& of, uint64_t bitmap, bool of_reply) {
  if (tp().reliable) return;
  PacketHeader a{};
  a.kind = Kind::kPieceAck;
  a.instance = of.instance;
  a.seq = of.seq;
  a.bitmap = bitmap;
  a.status = of_reply ? 1 : 0;
  send_control(ep, to, a);
}

// Runs the handler of a request or reply that has arrived whole: a medium's
// buffer is the packet (or `gathered`, a medium that came in pieces), a
// Long's the segment.
const Token* run_message(Endpoint& ep, Peer* peer, const en_t& src, const Packet& p, bool request,
                         uint8_t* gathered = nullptr) {
  const PacketHeader& h = *p.h;
  Token* t = take_token();
  t->is_request = request;
  t->ep = &ep;
  t->peer = peer;
  t->source = src;
  t->tag = h.tag;
  t->hdr = h;
  void* buf = h.category == Category::kLong ? static_cast<uint8_t*>(ep.seg) + h.offset
              : gathered                    ? gathered
                                            : const_cast<uint8_t*>(p.payload);
  run_handler(t, ep.handlers[h.handler], p.args, buf, h.nbytes);
  return t;
}

// A medium piece into the message being gathered (sized at its first piece).
void gather(std::vector<uint8_t>& into, const PacketHeader& h, const Packet& p) {
  if (into.size() != h.nbytes) into.assign(h.nbytes, 0);
  if (p.len) std::memcpy(into.data() + h.piece, p.payload, p.len);
}

void on_request(Endpoint& ep, const en_t& src, const Packet& p) {
  const PacketHeader& h = *p.h;
  Peer& peer = peer_for(ep, src);
  if (h.piece == 0) {  // each transmission of a request counts once
    ep.stats.RequestsReceived[int(h.category)]++;
    if (h.seq < peer.last_request_in) ep.stats.OutOfOrderRequests++;
    peer.last_request_in = std::max(peer.last_request_in, h.seq);
  }
  if (h.instance >= peer.in.size()) return refuse(ep, peer, nullptr, h, ECONGESTION);
  InInstance& in = peer.in[h.instance];
  if (h.seq == in.seq_done) {  // a duplicate: its answer was lost, or is on its way
    if (!tp().reliable) {
      in.reply.sent &= in.reply.acked;
      if (!in.reply.head.empty() && header_of(in.reply).kind == Kind::kReply)
        ep.stats.RepliesRetransmitted[int(header_of(in.reply).category)]++;
      (void)send_window(ep, src, in.reply, in.reply.payload.data());
    }
    return;
  }
  if (h.seq < in.seq_done) return;  // older than what was answered: stale
  uint32_t n = pieces_of(h);
  if (n > 1 && in.seq_assembling == h.seq) {
    // another piece of the request being assembled (checked at its first)
  } else {
    if (int status = check_request(ep, h)) return refuse(ep, peer, &in, h, status);
    in.seq_assembling = h.seq;
    in.pieces = 0;
  }
  if (h.category == Category::kLong && p.len)
    std::memcpy(static_cast<uint8_t*>(ep.seg) + h.offset + h.piece, p.payload, p.len);
  bool pieces = n > 1 && h.category == Category::kMedium;
  if (pieces) gather(in.medium, h, p);
  if (n > 1) {
    in.pieces |= 1ull << (h.piece / piece_bytes());
    piece_ack(ep, src, h, in.pieces, false);
    if (in.pieces != all_pieces(n)) return;
  }
  in.seq_assembling = 0;
  in.seq_done = h.seq;  // from here a duplicate gets the answer below
  std::vector<uint8_t> medium;
  if (pieces) medium.swap(in.medium);  // the handler's buffer, even if it frees the endpoint
  const Token* t = run_message(ep, &peer, src, p, true, pieces ? medium.data() : nullptr);
  if (!t->replied) {
    // The ack names the request (instance, serial) and nothing else: a
    // copy of a Long's header kept `placed`, which parse() refuses on a Short.
    PacketHeader a{};
    a.magic = kMagic;
    a.kind = Kind::kAck;
    a.category = Category::kShort;
    a.instance = h.instance;
    a.seq = h.seq;
    ep.stats.RepliesSent[amudp_Short]++;
    (void)answer(ep, peer, in, a, nullptr, nullptr);
  }
}

// The requester's instance a reply/ack/return answers, or nullptr if stale.
OutInstance* answered(Endpoint& ep, const en_t& src, const PacketHeader& h, Peer*& peer) {
  auto it = ep.peers.find(src);
  if (it == ep.peers.end()) return nullptr;
  peer = it->second.get();
  if (h.instance >= peer->out.size()) return nullptr;
  OutInstance& o = peer->out[h.instance];
  return o.busy && o.seq == h.seq ? &o : nullptr;
}

void release(Peer& peer, OutInstance& o) {
  o.busy = false;
  o.request = Transfer{};
  o.reply_pieces = 0;
  o.reply_medium.clear();
  peer.outstanding--;
}

// A request answered (reply or empty reply): its round trip.
void note_latency(Endpoint& ep, const OutInstance& o) {
  auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - o.sent_at).count();
  amx_tick_t t = amx_tick_t(std::max<long long>(ns, 0));
  ep.stats.RequestMinLatency = std::min(ep.stats.RequestMinLatency, t);
  ep.stats.RequestMaxLatency = std::max(ep.stats.RequestMaxLatency, t);
  ep.stats.RequestSumLatency += t;
}

void on_answer(Endpoint& ep, const en_t& src, const Packet& p) {
  const PacketHeader& h = *p.h;
  Peer* peer = nullptr;
  OutInstance* o = answered(ep, src, h, peer);
  bool is_reply = h.kind == Kind::kReply || h.kind == Kind::kAck;
  if (is_reply && h.piece == 0) {  // each transmission of a reply counts once
    ep.stats.RepliesReceived[int(h.category)]++;
    if (!o) ep.stats.RepliesSquashed[int(h.category)]++;
    if (peer) {
      if (h.seq < peer->last_reply_in) ep.stats.OutOfOrderReplies++;
      peer->last_reply_in = std::max(peer->last_reply_in, h.seq);
    }
  }
  if (!o) {
    // Pieces of a reply already taken whole: the piece ack was lost.
    if (peer && h.kind == Kind::kReply && pieces_of(h) > 1 && h.instance < peer->out.size() &&
        peer->out[h.instance].seq == h.seq)
      piece_ack(ep, src, h, all_pieces(pieces_of(h)), true);
    return;
  }
  if (h.kind == Kind::kAck) {
    note_latency(ep, *o);
    return release(*peer, *o);
  }
  if (h.kind == Kind::kReturn) {
    PacketHeader sent = header_of(o->request);
    release(*peer, *o);
    return run_returned(ep, sent, src, h.status, true);
  }
  // A reply: check it once (first piece), gather pieces, then run it.
  uint32_t n = pieces_of(h);
  int status = 0;
  if (h.handler == 0 || !ep.handlers[h.handler]) status = EBADHANDLER;
  else if (h.category == Category::kLong) status = check_long(ep, h);
  if (status) {
    release(*peer, *o);
    PacketHeader r = h;
    r.kind = Kind::kReplyRefused;
    r.status = uint8_t(status);
    return send_control(ep, src, r);
  }
  if (h.category == Category::kLong && p.len)
    std::memcpy(static_cast<uint8_t*>(ep.seg) + h.offset + h.piece, p.payload, p.len);
  bool pieces = n > 1 && h.category == Category::kMedium;
  if (pieces) gather(o->reply_medium, h, p);
  if (n > 1) {
    o->reply_pieces |= 1ull << (h.piece / piece_bytes());
    piece_ack(ep, src, h, o->reply_pieces, true);
    if (o->reply_pieces != all_pieces(n)) return;
  }
  std::vector<uint8_t> medium;
  if (pieces) medium.swap(o->reply_medium);
  note_latency(ep, *o);
  release(*peer, *o);  // the credit is back before the handler runs
  run_message(ep, peer, src, p, false, pieces ? medium.data() : nullptr);
}

void on_piece_ack(Endpoint& ep, const en_t& src, const PacketHeader& h) {
  auto it = ep.peers.find(src);
  if (it == ep.peers.end()) return;
  Peer& peer = *it->second;
  bool of_reply = h.status == 1;
  Transfer* x = nullptr;
  if (!of_reply) {  // pieces of my request
    if (h.instance < peer.out.size() && peer.out[h.instance].busy && peer.out[h.instance].seq == h.seq)
      x = &peer.out[h.instance].request;
  } else if (h.instance < peer.in.size() && peer.in[h.instance].seq_done == h.seq) {
    x = &peer.in[h.instance].reply;  // pieces of my reply
  }
  if (!x || x->npieces < 2) return;
  x->acked |= h.bitmap & all_pieces(x->npieces);
  // Progress: the peer is there, so the deadline starts again.
  x->backoff = kFirstRetry;
  x->next_try = Clock::now() + x->backoff;
  x->give_up = Clock::now() + give_up_after();
  x->tried_late = false;
  if (of_reply && x->acked == all_pieces(x->npieces)) x->active = false;  // delivered whole
  (void)send_window(ep, src, *x, x->payload.data());
}

void on_reply_refused(Endpoint& ep, const en_t& src, const PacketHeader& h) {
  auto it = ep.peers.find(src);
  if (it == ep.peers.end()) return;
  Peer& peer = *it->second;
  if (h.instance >= peer.in.size() || peer.in[h.instance].seq_done != h.seq) return;
  InInstance& in = peer.in[h.instance];
  if (in.reply.head.empty() || header_of(in.reply).kind != Kind::kReply) return;
  PacketHeader sent = header_of(in.reply);
  in.reply.active = false;
  in.reply.head.clear();  // report once
  run_returned(ep, sent, src, h.status, false);
}

// ---- retransmission (unreliable transports)

void retry(Endpoint& ep, const en_t& dest, Transfer& x, Clock::time_point now) {
  const PacketHeader& h = header_of(x);
  if (h.kind == Kind::kRequest) ep.stats.RequestsRetransmitted[int(h.category)]++;
  else if (h.kind == Kind::kReply) ep.stats.RepliesRetransmitted[int(h.category)]++;
  x.sent &= x.acked;  // everything unconfirmed goes again
  if (x.acked == all_pieces(x.npieces) && x.npieces > 1)
    (void)send_piece(ep, dest, x, x.payload.data(), x.npieces - 1);  // all there: ask for the answer
  else
    (void)send_window(ep, dest, x, x.payload.data());
  x.backoff = std::min(x.backoff * 2, kMaxBackoff);
  x.next_try = now + x.backoff;
}

// The oldest request still out to `peer` (nullptr: none).
const OutInstance* oldest_out(const Peer& peer) {
  const OutInstance* oldest = nullptr;
  for (const OutInstance& o : peer.out)
    if (o.busy && (!oldest || o.sent_at < oldest->sent_at)) oldest = &o;
  return oldest;
}

// When `peer` is to be probed next, given its oldest request out (max: none).
Clock::time_point probe_due(const Peer& peer, const OutInstance* oldest) {
  return oldest ? std::max(oldest->sent_at + kProbeAfter, peer.next_probe) : Clock::time_point::max();
}

// Transport::probes: a kProbe to every peer whose requests have been out
// kProbeAfter (its tag: that of the request, which the NIC checks). A live
// endpoint takes it and ignores it; a dead one's NIC returns it, and
// send_failed returns the requests with it.
void probe(Endpoint& ep) {
  const Clock::time_point now = Clock::now();
  for (auto& [name, peer] : ep.peers) {
    const OutInstance* oldest = oldest_out(*peer);
    if (probe_due(*peer, oldest) > now) continue;
    PacketHeader h = header_of(oldest->request);
    h.kind = Kind::kProbe;
    h.category = Category::kShort;
    h.placed = 0;
    peer->next_probe = now + kProbeEvery;
    send_control(ep, name, h);
  }
}

// Retransmits what is due; requests past their deadline are returned with
// EUNREACHABLE (collected in `gone` so the caller decides when handlers run)
// once a retransmission sent at or after the deadline went a whole backoff
// unanswered: a process kept off the CPU past its deadline (a loaded host)
// had sent nothing for a while, and gave up on a live peer before it had
// asked it again (issue 20).
void retransmit(Endpoint& ep, std::vector<std::pair<PacketHeader, en_t>>* gone) {
  if (tp().reliable) {
    if (tp().probes) probe(ep);
    return;
  }
  Clock::time_point now = Clock::now();
  for (auto& [name, peer] : ep.peers) {
    for (OutInstance& o : peer->out) {
      if (!o.busy || !o.request.active || o.request.next_try > now) continue;
      if (now >= o.request.give_up) {
        if (o.request.tried_late) {
          if (!gone) continue;
          gone->emplace_back(header_of(o.request), name);
          release(*peer, o);
          continue;
        }
        o.request.tried_late = true;
      }
      retry(ep, name, o.request, now);
    }
    for (InInstance& in : peer->in) {
      Transfer& x = in.reply;
      if (!x.active || x.next_try > now) continue;
      if (now >= x.give_up) x.active = false;  // the requester went away
      else retry(ep, name, x, now);
    }
  }
}

// ---- the calls

bool in_handler() { return handler_depth() > 0; }

void read_args(int32_t* out, int n, va_list ap) {
  for (int i = 0; i < n; i++) out[i] = int32_t(va_arg(ap, int));
}

// The lowest free instance: a sender deeper than its receiver stays within
// the receiver's k while it has no more than k requests out.
OutInstance* free_instance(Peer& peer) {
  for (OutInstance& o : peer.out)
    if (!o.busy) return &o;
  return nullptr;
}

// Waits (polling, so handlers run and credits come back) for a free instance.
OutInstance* wait_instance(Endpoint& ep, Peer& peer) {
  for (;;) {
    if (OutInstance* o = free_instance(peer)) return o;
    Clock::time_point due = next_deadline(ep);
    int timeout = 50;
    if (due != Clock::time_point::max())
      timeout = int(std::clamp<long long>(
          std::chrono::duration_cast<milliseconds>(due - Clock::now()).count() + 1, 0, 50));
    Bundle& eb = *ep.bundle;
    tp().wait(eb, timeout);
    poll_bundle(eb);
  }
}

int request(ep_t e, amudp_node_t dest, handler_t handler, Category cat, const void* src, size_t nbytes,
            uintptr_t offset, bool async, int numargs, va_list ap) {
  if (!lib().init_count) return AM_ERR_NOT_INIT;
  auto* ep = e;
  if (!ep || std::find(lib().endpoints.begin(), lib().endpoints.end(), ep) == lib().endpoints.end())
    return AM_ERR_BAD_ARG;
  if (dest >= AMUDP_MAX_NUMTRANSLATIONS || !ep->table[dest].inuse) return AM_ERR_BAD_ARG;
  size_t max = cat == Category::kLong ? AMUDP_MAX_LONG : cat == Category::kMedium ? AMUDP_MAX_MEDIUM : 0;
  if (numargs < 0 || numargs > kMaxArgs || nbytes > max || (nbytes && !src)) return AM_ERR_BAD_ARG;
  if (cat == Category::kLong && offset > AMUDP_MAX_SEGLENGTH) return AM_ERR_BAD_ARG;
  if (in_handler()) return AM_ERR_RESOURCE;
  if (ep->depth == 0) return AM_ERR_RESOURCE;
  int32_t args[kMaxArgs];
  read_args(args, numargs, ap);
  BundleLock hold(*ep->bundle);
  const Translation tr = ep->table[dest];
  if (!async) poll_bundle(*ep->bundle);
  Peer& peer = peer_for(*ep, tr.name);
  OutInstance* o = free_instance(peer);
  if (!o) {
    if (async) return AM_ERR_IN_USE;
    o = wait_instance(*ep, peer);
  }
  PacketHeader h{};
  h.magic = kMagic;
  h.kind = Kind::kRequest;
  h.category = cat;
  h.nargs = uint8_t(numargs);
  h.handler = handler;
  h.instance = uint16_t(o - peer.out.data());
  h.seq = peer.next_seq++;
  h.nbytes = uint32_t(nbytes);
  h.offset = uint32_t(offset);
  h.tag = tr.tag;
  o->busy = true;
  o->seq = h.seq;
  o->reply_pieces = 0;
  o->sent_at = Clock::now();
  peer.outstanding++;
  ep->stats.RequestsSent[int(cat)]++;
  ep->stats.RequestDataBytesSent[int(cat)] += 4 * uint64_t(numargs) + nbytes;
  build(o->request, h, args, src);
  const uint8_t* bytes = tp().reliable ? static_cast<const uint8_t*>(src) : o->request.payload.data();
  int rc = send_window(*ep, tr.name, o->request, bytes);
  if (rc <= 0) {  // -1 (no room now): the retransmission timer sends it
    arm(o->request);
    return AM_OK;
  }
  release(peer, *o);  // never deliverable (a transport status)
  run_returned(*ep, h, tr.name, rc, true);
  return AM_OK;
}

// A reply never fails for want of resources: each request instance owns
// its answer at the responder, and the transports wait for room rather
// than refuse. A reply the transport can never deliver (its peer is gone)
// goes to handler 0 at the next poll; the call still returns AM_OK.
int reply(void* token, handler_t handler, Category cat, const void* src, size_t nbytes, uintptr_t offset,
          int numargs, va_list ap) {
  if (!lib().init_count) return AM_ERR_NOT_INIT;
  Token* t = live_token(token);
  if (!t || !t->is_request) return AM_ERR_BAD_ARG;
  if (t->replied) return AM_ERR_RESOURCE;
  size_t max = cat == Category::kLong ? AMUDP_MAX_LONG : cat == Category::kMedium ? AMUDP_MAX_MEDIUM : 0;
  if (numargs < 0 || numargs > kMaxArgs || nbytes > max || (nbytes && !src)) return AM_ERR_BAD_ARG;
  if (cat == Category::kLong && offset > AMUDP_MAX_SEGLENGTH) return AM_ERR_BAD_ARG;
  int32_t args[kMaxArgs];
  read_args(args, numargs, ap);
  t->replied = true;
  PacketHeader h{};
  h.magic = kMagic;
  h.kind = Kind::kReply;
  h.category = cat;
  h.nargs = uint8_t(numargs);
  h.handler = handler;
  h.instance = t->hdr.instance;
  h.seq = t->hdr.seq;
  h.nbytes = uint32_t(nbytes);
  h.offset = uint32_t(offset);
  h.tag = t->ep->tag;
  Endpoint& ep = *t->ep;
  Peer& peer = *t->peer;
  ep.stats.RepliesSent[int(cat)]++;
  ep.stats.ReplyDataBytesSent[int(cat)] += 4 * uint64_t(numargs) + nbytes;
  int rc = answer(ep, peer, peer.in[h.instance], h, args, src);
  if (rc > 0) ep.deferred.push_back(Deferred{h, peer.name, rc, false});
  return AM_OK;
}

}  // namespace

uint32_t message_pieces(const PacketHeader& h) { return pieces_of(h); }

Token* live_token(void* token) {
  auto* t = static_cast<Token*>(token);
  if (t < token_ring || t >= token_ring + 64) return nullptr;
  if ((reinterpret_cast<uintptr_t>(t) - reinterpret_cast<uintptr_t>(token_ring)) % sizeof(Token)) return nullptr;
  return t->live ? t : nullptr;
}

void deliver(Endpoint& ep, const en_t& source, const uint8_t* data, size_t len) {
  Packet p;
  if (!parse(data, len, p)) return;  // not ours, or damaged: dropped
  switch (p.h->kind) {
    case Kind::kRequest: return on_request(ep, source, p);
    case Kind::kReply:
    case Kind::kAck:
    case Kind::kReturn: return on_answer(ep, source, p);
    case Kind::kPieceAck: return on_piece_ack(ep, source, *p.h);
    case Kind::kReplyRefused: return on_reply_refused(ep, source, *p.h);
    case Kind::kProbe: return;  // arriving was its answer
  }
}

int poll_endpoint(Endpoint& ep) {
  std::vector<Deferred> deferred;
  deferred.swap(ep.deferred);
  for (const Deferred& d : deferred) run_returned(ep, d.header, d.to, d.status, d.request);
  int n = tp().poll(ep, kPollBudget);
  std::vector<std::pair<PacketHeader, en_t>> gone;
  retransmit(ep, &gone);
  for (auto& [h, to] : gone) run_returned(ep, h, to, EUNREACHABLE, true);
  return n + int(gone.size() + deferred.size());
}

// A request call polls the sender's whole bundle, as AM_Poll would: the
// endpoint that must answer may be another one of it.
int poll_bundle(Bundle& eb) {
  // A copy, as a handler may free endpoints: on the stack for a bundle of a
  // few (every request polls: no allocation on that path).
  Endpoint* few[8];
  std::vector<Endpoint*> many;
  std::span<Endpoint* const> eps;
  if (eb.endpoints.size() <= std::size(few)) {
    std::copy(eb.endpoints.begin(), eb.endpoints.end(), few);
    eps = std::span<Endpoint* const>(few, eb.endpoints.size());
  } else {
    many = eb.endpoints;
    eps = many;
  }
  int n = 0;
  for (Endpoint* e : eps)
    if (std::find(lib().endpoints.begin(), lib().endpoints.end(), e) != lib().endpoints.end()) n += poll_endpoint(*e);
  return n;
}

// From AM_WaitSema, which runs no handler: requests given up on meanwhile
// wait for the next poll, and end the wait (they were skipped before, and
// the wait spun on their passed deadline until a poll came).
void retransmit_due(Endpoint& ep) {
  std::vector<std::pair<PacketHeader, en_t>> gone;
  retransmit(ep, &gone);
  for (auto& [h, to] : gone) ep.deferred.push_back(Deferred{h, to, EUNREACHABLE, true});
}

Clock::time_point next_deadline(const Endpoint& ep) {
  Clock::time_point due = Clock::time_point::max();
  if (tp().reliable) {
    if (tp().probes)
      for (auto& [name, peer] : ep.peers) due = std::min(due, probe_due(*peer, oldest_out(*peer)));
    return due;
  }
  for (auto& [name, peer] : ep.peers) {
    for (const OutInstance& o : peer->out)
      if (o.busy && o.request.active) {  // (past give_up, the late retransmission's answer is awaited)
        const Clock::time_point at = o.request.tried_late ? o.request.next_try : o.request.give_up;
        due = std::min(due, std::min(o.request.next_try, at));
      }
    for (const InInstance& in : peer->in)
      if (in.reply.active) due = std::min(due, in.reply.next_try);
  }
  return due;
}

void peer_unreachable(Endpoint& ep, const en_t& name, bool defer) {
  auto it = ep.peers.find(name);
  if (it == ep.peers.end()) return;
  Peer& peer = *it->second;
  for (OutInstance& o : peer.out) {
    if (!o.busy) continue;
    PacketHeader sent = header_of(o.request);
    release(peer, o);
    if (defer) ep.deferred.push_back(Deferred{sent, name, EUNREACHABLE, true});
    else run_returned(ep, sent, name, EUNREACHABLE, true);
  }
}

void send_failed(Endpoint& ep, const en_t& dest, const PacketHeader& sent, int status) {
  // A probe the transport returns found no endpoint there (Transport::probes):
  // nothing will answer. Handler 0 runs at the next poll (a probe's verdict
  // may be reaped in AM_WaitSema, which runs none).
  if (sent.kind == Kind::kProbe) return peer_unreachable(ep, dest, /*defer=*/true);
  if (sent.kind != Kind::kRequest) {
    if (sent.kind != Kind::kReply) return;  // an ack or a return that did not arrive: the requester retries or gives up
    run_returned(ep, sent, dest, status, false);
    // The requester's NIC refused the reply (segment bounds, a full ring):
    // the requester never sees it, and on a reliable transport it asks no
    // more, so its credit comes back with the ack a handler that did not
    // reply leaves (UDP's requester refuses a reply itself, kReplyRefused).
    if (tp().reliable && status != EUNREACHABLE) {
      PacketHeader a{};
      a.kind = Kind::kAck;
      a.category = Category::kShort;
      a.instance = sent.instance;
      a.seq = sent.seq;
      send_control(ep, dest, a);
    }
    return;
  }
  auto it = ep.peers.find(dest);
  if (it == ep.peers.end() || sent.instance >= it->second->out.size()) return;
  OutInstance& o = it->second->out[sent.instance];
  if (!o.busy || o.seq != sent.seq) return;  // already answered
  release(*it->second, o);
  run_returned(ep, sent, dest, status, true);
}

void drop_endpoint_state(Endpoint& ep) {
  ep.peers.clear();
  ep.deferred.clear();
}

void count_resend(Endpoint& ep, const PacketHeader& sent) {
  if (sent.kind == Kind::kRequest) ep.stats.RequestsRetransmitted[int(sent.category)]++;
  else if (sent.kind == Kind::kReply) ep.stats.RepliesRetransmitted[int(sent.category)]++;
}

}  // namespace ulnic::am

using namespace ulnic::am;

extern "C" {

int AMUDP_RequestVA(ep_t ep, amudp_node_t dest, handler_t handler, int numargs, va_list ap) {
  return verbose_error(request(ep, dest, handler, Category::kShort, nullptr, 0, 0, false, numargs, ap), __func__);
}

int AMUDP_RequestIVA(ep_t ep, amudp_node_t dest, handler_t handler, void* src, size_t nbytes, int numargs,
                     va_list ap) {
  return verbose_error(request(ep, dest, handler, Category::kMedium, src, nbytes, 0, false, numargs, ap), __func__);
}

int AMUDP_RequestXferVA(ep_t ep, amudp_node_t dest, handler_t handler, void* src, size_t nbytes, uintptr_t offset,
                        int async, int numargs, va_list ap) {
  int rc = request(ep, dest, handler, Category::kLong, src, nbytes, offset, async != 0, numargs, ap);
  return rc == AM_ERR_IN_USE && async ? rc : verbose_error(rc, __func__);  // Async's "not now" is no error
}

int AMUDP_ReplyVA(void* token, handler_t handler, int numargs, va_list ap) {
  return verbose_error(reply(token, handler, Category::kShort, nullptr, 0, 0, numargs, ap), __func__);
}

int AMUDP_ReplyIVA(void* token, handler_t handler, void* src, size_t nbytes, int numargs, va_list ap) {
  return verbose_error(reply(token, handler, Category::kMedium, src, nbytes, 0, numargs, ap), __func__);
}

int AMUDP_ReplyXferVA(void* token, handler_t handler, void* src, size_t nbytes, uintptr_t offset, int numargs,
                      va_list ap) {
  return verbose_error(reply(token, handler, Category::kLong, src, nbytes, offset, numargs, ap), __func__);
}

// The variadic forms: each is its va_list form.
#define AMX_VARIADIC(call)   \
  va_list ap;                \
  va_start(ap, numargs);     \
  int rc = call;             \
  va_end(ap);                \
  return rc

int AMUDP_Request(ep_t ep, amudp_node_t dest, handler_t handler, int numargs, ...) {
  AMX_VARIADIC(AMUDP_RequestVA(ep, dest, handler, numargs, ap));
}

int AMUDP_RequestI(ep_t ep, amudp_node_t dest, handler_t handler, void* src, size_t nbytes, int numargs, ...) {
  AMX_VARIADIC(AMUDP_RequestIVA(ep, dest, handler, src, nbytes, numargs, ap));
}

int AMUDP_RequestXfer(ep_t ep, amudp_node_t dest, handler_t handler, void* src, size_t nbytes, uintptr_t offset,
                      int async, int numargs, ...) {
  AMX_VARIADIC(AMUDP_RequestXferVA(ep, dest, handler, src, nbytes, offset, async, numargs, ap));
}

int AMUDP_Reply(void* token, handler_t handler, int numargs, ...) {
  AMX_VARIADIC(AMUDP_ReplyVA(token, handler, numargs, ap));
}

int AMUDP_ReplyI(void* token, handler_t handler, void* src, size_t nbytes, int numargs, ...) {
  AMX_VARIADIC(AMUDP_ReplyIVA(token, handler, src, nbytes, numargs, ap));
}

int AMUDP_ReplyXfer(void* token, handler_t handler, void* src, size_t nbytes, uintptr_t offset, int numargs, ...) {
  AMX_VARIADIC(AMUDP_ReplyXferVA(token, handler, src, nbytes, offset, numargs, ap));
}

}  // extern "C"
