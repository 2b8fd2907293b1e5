// Fast Messages 2.x over the NIC's native AM endpoints (abi/am.h).
//
// Every FM packet is one kOpAmSend: a PacketHeader and up to kInlinePayload
// message bytes in the AM message, or a Long packet (below) of up to P
// bytes. Each rank receives into one AM ring of kRingEntries entries in its
// slot; the NIC refuses a message when the ring is full, so FM never sends
// one that could find it full:
//
//   * The ring is partitioned among the N senders: C = kRingEntries / N
//     entries each. Of those, a sender may have W data packets not yet
//     reported consumed (the credit window, counted by Peer.sent and
//     Peer.granted).
//   * Credit-only packets and the two FIN packets of FM_finalize need no
//     credit, so reporting never waits for a report (no credit deadlock).
//     They stay bounded: a credit packet goes out only after T = max(1, L/2)
//     (L below) more data packets of its destination were consumed, and
//     that destination cannot send more than W beyond what the last packet
//     of ours it consumed told it; so at most floor(W/T) credit packets of
//     ours wait in its ring, plus 2 FINs. W is the most, up to C - 5, with
//     W + floor(W/T) + 2 <= C (119 + 7 + 2 = 128 for 2 ranks). Credit
//     packets themselves are never reported (no credit ping-pong).
//   * Every packet also carries the cumulative count (piggybacked credit).
//   * Send buffers: kSendBuffers inline-sized ones, and 2 MiB of P-sized ones
//     for Long packets. Open streams hold one each, so at most kMaxStreams
//     are open, and data packets leave kControlReserve inline buffers for
//     credit and FIN packets (a report never waits behind data that waits
//     for it). A stream waits for a Long buffer only while the NIC has one
//     (its completion frees it); with every Long buffer held by open streams
//     it takes an inline one.
//
// Long packets: a main-program stream with more than kInlinePayload bytes
// to go fills packets of up to P bytes; one of more than kInlinePayload goes
// as the AM message's Long, which the receiving NIC places straight into
// the receiver's segment before it publishes the ring entry (the header
// alone is in the entry). The segment has L chunks of P bytes per sender
// (L <= W): the k-th Long packet of a sender uses its chunk k mod L, and a
// Long packet leaves only while fewer than L Long packets of its sender are
// unreported, so none of those still being read is in that chunk (they are
// the L - 1 before it). Inline packets take no chunk (when they counted,
// a GM read's reply -- a Long packet and a short one -- let only L/2
// replies be under way). The sender knows which reported packets were Long
// from a bit per packet of its window. T = L/2 keeps the credit flowing: a
// sender held at L has had L/2 of them consumed and reported, and half its
// window is still in flight while that report travels. L is the power of 2
// above (C - 5)/2, at most kMaxLongWindow (32); P the largest power of 2 from kMinLongPayload
// to kPacketPayload (32 .. 128 KiB) whose N x L chunks fit kSegmentBytes
// (4 MiB; 32 KiB chunks may exceed it, for 5 and for 9-15 ranks): 64 KiB for
// 2 ranks (L = 32, T = 16, W = 119), 32 KiB for 3 to 16, 128 KiB for a job of
// one. A handler's streams take Long packets too (GM answers a read from
// its request handler), but a handler cannot wait: its credits are reserved
// at FM_begin_message (one more per Long packet), and a Long buffer that
// finds L Long packets unreported goes as inline packets instead
// (send_split).
// Credit and FIN packets are inline. Measured (fm_bench, issue 19, 2
// ranks): 4 KiB packets held FM streams at ~0.4-0.6 GB/s, the NIC's rate of
// AM messages. Interleaved runs on one cluster (medians, 64 KiB and 1 MiB
// messages): 32 KiB Long packets from one pool of 64 buffers 1.9 and 1.2
// GB/s; 64 KiB Long packets, L = 32, 2.4 and 1.9 (L = 16 of 128 KiB: 2.3
// and 1.8).
//
// Failures: the NIC's link is reliable, so a packet it completes with an
// error (the peer's process or node is gone, or it refused) is not resent:
// that peer is failed -- sends to it fail with EIO, its messages still
// arriving are cut where they are, FM_finalize stops waiting for it and
// returns -1. A ring entry the NIC gave up on (its sender died mid-packet)
// fails its sender the same way, and so does a wait on a peer whose process
// is gone (its lock on its name file dropped: bootstrap.cpp).
//
// A handler is a logical thread: it starts on its message's first packet on
// a stack of its own (fiber.h), reads the packet in place in the ring, and
// when it wants bytes not yet arrived it swaps back to the extract loop,
// which resumes it when the next packet of its message comes. By then it has
// read every byte of the current packet, so every ring entry is done with
// once its handler swaps back or returns, and entries are consumed in order.
#include <sys/mman.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <thread>
#include <unordered_set>

#include "fiber.h"
#include "fm_internal.h"
#include "fm_layer.h"
#include "ulnic/nic.h"

// A stream is either direction; the library tells them apart by `inbound`.
struct FM_stream {
  bool inbound;
};

FM_ULONG FM_nodeid = 0;
FM_ULONG FM_numnodes = 0;

namespace ulnic::fm {
namespace {

constexpr uint32_t kRingEntries = 256;      // a power of 2 (firmware), <= kAmMaxRingEntries
constexpr uint8_t kEndpoint = 0;            // FM's AM endpoint in its slot
constexpr uint32_t kSendBuffers = 64;       // inline-sized packets in flight per process
constexpr uint32_t kControlReserve = 8;     // send buffers data packets leave to credit/FIN packets
constexpr size_t round64(size_t n) { return (n + 63) & ~size_t(63); }
constexpr size_t kBufBytes = round64(kPayloadAt + kInlinePayload);
constexpr size_t kLongBuffersBytes = 2u << 20;  // the Long packets' send buffers, together
constexpr size_t kSegmentBytes = 4u << 20;      // the Long packets' chunks, all senders' together
constexpr uint32_t kMaxLongWindow = 32;         // L, at most
constexpr size_t kStackBytes = 256 << 10;   // per handler: room for ordinary C code
constexpr size_t kMaxStreams = FM_MAX_STREAMS;  // open outbound streams
static_assert(kMaxStreams + kControlReserve < kSendBuffers);
constexpr auto kNicWait = std::chrono::milliseconds(30000);
constexpr auto kLivenessEvery = std::chrono::milliseconds(100);  // a wait on a peer looks at its lock
static_assert(kBufBytes % 64 == 0);

struct Peer {
  EndpointName name;      // with the tag its endpoint takes
  uint32_t sent = 0;      // data packets we sent it (mod 2^32)
  uint32_t granted = 0;   // of those, what it reported consumed
  uint32_t reserved = 0;  // credits set aside by handlers' open streams
  uint32_t consumed = 0;  // its data packets we consumed
  uint32_t reported = 0;  // the `consumed` we last told it
  // Long packets have chunks of their own count: ours to it (`long_sent`,
  // of those `long_granted` reported consumed, known from which of our data
  // packets were Long: `kinds`, bit k mod 256 for packet k, W < 256 of them
  // unreported) and its to us (`long_consumed`).
  uint32_t long_sent = 0, long_granted = 0, long_consumed = 0;
  uint64_t kinds[4] = {};
  static_assert(kRingEntries <= sizeof kinds * 8);  // W < C <= kRingEntries
  uint32_t next_out = 0;  // the next message id to it
  uint32_t next_in = 0;   // the message id its next first packet must carry
  bool fin1 = false, fin2 = false;
  bool failed = false;    // a packet to or from it was lost: nothing more goes to it
};

struct Inbound;

struct Outbound : FM_stream {
  uint32_t dest = 0, handler = 0, length = 0;
  uint32_t msg_id = 0;       // set when its first packet leaves
  Inbound* owner = nullptr;  // the handler that opened it (nullptr: the main program)
  uint32_t written = 0;      // message bytes appended
  int buf = -1;              // the send buffer being filled
  uint32_t fill = 0;         // message bytes in it
  uint32_t reserved = 0;     // credits still set aside for it
  bool first = true;         // its next packet is the first
  uint64_t serial = 0;       // opening order
};

struct Inbound : FM_stream {
  uint32_t sender = 0, msg_id = 0, length = 0;
  FM_handler* fn = nullptr;  // nullptr: nobody takes it; its packets are dropped
  uint32_t next_offset = 0;
  bool last_seen = false, done = false;
  int result = FM_CONTINUE;
  const uint8_t* cur = nullptr;  // the unread bytes of the current packet (in the ring)
  uint32_t cur_left = 0;
  Fiber ctx;  // its handler's thread, on `stack`
  void* stack = nullptr;
};

struct State {
  bool up = false;
  bool closing = false;    // FM_finalize began: no new messages
  bool fin2_sent = false;  // nothing more goes out
  std::unique_ptr<Nic> nic;
  Job job;
  int name_lock = -1;  // our name file, locked while we live
  uint32_t rank = 0, nprocs = 0, window = 0, threshold = 0;
  uint64_t tag = 0;  // our endpoint's: only requests carrying it get in
  std::vector<Peer> peers;
  uint8_t* ring = nullptr;  // AmRingControl + entries: NIC-written, except `consumed`
  MemRegion ring_mr;
  uint64_t ring_consumed = 0;  // our copy of AmRingControl.consumed
  uint8_t* seg = nullptr;  // Long packets' chunks: NIC-written, L per sender
  MemRegion seg_mr;
  uint32_t long_window = 0;  // L
  uint32_t packet = 0;       // P: a Long packet's payload, at most
  // Send buffers, one registration: kSendBuffers of kBufBytes (ids below
  // kSendBuffers), then kLongBuffersBytes / P of long_buf_bytes (the ids after).
  uint8_t* bufs = nullptr;
  MemRegion bufs_mr;
  size_t long_buf_bytes = 0;
  std::vector<int> free_bufs, free_long;
  uint32_t long_posted = 0;  // long buffers the NIC has
  std::map<uint64_t, std::pair<int, uint32_t>> in_flight;  // user_data -> buffer, destination rank
  uint64_t next_user_data = 1;
  std::unordered_set<FM_stream*> streams;   // live ones (arguments are checked against it)
  size_t outbound_open = 0;                 // of them, outbound
  size_t handler_streams = 0;               // of those, opened by handlers
  uint64_t next_serial = 0;
  std::vector<uint32_t> to_cut;             // failed ranks whose messages are still to be cut
  std::chrono::steady_clock::time_point next_look{};  // look_at_peers
  std::map<uint64_t, Inbound*> inbound;     // sender << 32 | msg_id
  std::vector<void*> stacks;                // free handler stacks
  Inbound* current = nullptr;               // the handler running
  Fiber sched;                              // the extract loop, while a handler runs
  bool extracting = false;
  uint64_t live_handlers = 0;
  FM_stats stats{};
};
State g;
FM_handler* handlers[FM_MAX_HANDLERS];  // registrations outlive FM_initialize/FM_finalize
FM_stats last_stats;                    // the last job's, once FM_finalize ended it

uint64_t key(uint32_t sender, uint32_t msg) { return uint64_t(sender) << 32 | msg; }
uint64_t packets_for(uint64_t length, uint32_t per_packet) {
  return length ? (length + per_packet - 1) / per_packet : 1;
}
// Where in `receiver`'s segment the `k`-th data packet of `sender` goes if Long.
uint64_t chunk_offset(uint32_t sender, uint32_t k) {
  return (uint64_t(sender) * g.long_window + (k & (g.long_window - 1))) * g.packet;
}
bool is_long(int b) { return b >= int(kSendBuffers); }
uint8_t* buffer(int b) {
  if (!is_long(b)) return g.bufs + size_t(b) * kBufBytes;
  return g.bufs + kSendBuffers * kBufBytes + size_t(b - int(kSendBuffers)) * g.long_buf_bytes;
}
void give_buffer(int b) { (is_long(b) ? g.free_long : g.free_bufs).push_back(b); }

// ---- failures and send completions

// Its messages still arriving are cut by the extract loop (a handler may be
// running now: this can be called from inside one).
void fail_peer(uint32_t r, const std::string& why) {
  Peer& p = g.peers[r];
  if (p.failed || r == g.rank) return;
  std::fprintf(stderr, "FM: rank %u failed: %s; nothing more goes to it\n", r, why.c_str());
  p.failed = true;
  g.to_cut.push_back(r);
}

uint64_t extract_packets(uint64_t maxbytes, bool& quit);

// While we wait for others, every kLivenessEvery: is each peer's process
// still there? (A packet to a dead one would fail, but a wait sends none.)
// A rank that sent its FIN2 may leave: it owes us nothing more. Its
// packets reached our ring before it could (it waits for their
// completions), so they are taken before its absence counts.
void look_at_peers() {
  auto now = std::chrono::steady_clock::now();
  if (now < g.next_look) return;
  g.next_look = now + kLivenessEvery;
  std::vector<uint32_t> gone;
  for (uint32_t r = 0; r < g.nprocs; ++r)
    if (r != g.rank && !g.peers[r].failed && !g.peers[r].fin2 && !rank_alive(g.job, r)) gone.push_back(r);
  if (gone.empty()) return;
  bool quit;
  (void)extract_packets(~uint64_t(0), quit);
  for (uint32_t r : gone)
    if (!g.peers[r].fin2) fail_peer(r, "its process is gone");
}

void complete(const abi::CqEntry& c) {
  auto it = g.in_flight.find(c.user_data);
  if (it == g.in_flight.end()) return;  // a configuration call's, taken by Nic::run
  // The firmware keeps a slot's sends in order and never fails one for want
  // of its own resources, so an error is final: the packet is lost.
  if (c.status != abi::kCqOk) {
    g.stats.send_errors++;
    fail_peer(it->second.second, "a packet to it completed with NIC status " + std::to_string(c.status));
  }
  if (is_long(it->second.first)) g.long_posted--;
  give_buffer(it->second.first);
  g.in_flight.erase(it);
}

void reap() {
  abi::CqEntry c;
  while (g.nic->poll(c)) complete(c);
  abi::EqEntry ev;
  while (g.nic->poll_event(ev)) {}  // arrivals are only wake-ups: the ring holds the packets
}

bool wait_completion() {
  auto r = g.nic->wait_owed(kNicWait);
  if (!r) return false;
  complete(*r);
  return true;
}

// A send buffer; a data packet's leaves kControlReserve free. Buffers not
// free are in flight or held by open streams (at most kMaxStreams), so with
// too few free some are in flight and a completion will come.
int take_buffer(bool data) {
  reap();
  size_t keep = data ? kControlReserve : 0;
  while (g.free_bufs.size() <= keep)
    if (!wait_completion()) return -1;
  int b = g.free_bufs.back();
  g.free_bufs.pop_back();
  return b;
}

// A buffer for a stream's next data packet, `left` message bytes to go: a
// long one if they are more than an inline packet holds and one is free or
// will be (the NIC has one: its completion frees it), else an inline-sized
// one (so open streams that hold every long buffer leave the next stream
// inline packets, never a wait that nothing ends).
int take_data_buffer(uint64_t left) {
  if (left > kInlinePayload) {
    reap();
    while (g.free_long.empty() && g.long_posted > 0)
      if (!wait_completion()) return -1;
    if (!g.free_long.empty()) {
      int b = g.free_long.back();
      g.free_long.pop_back();
      return b;
    }
  }
  return take_buffer(true);
}

PacketHeader header(uint32_t dest, PacketKind kind) {
  PacketHeader h{};
  h.magic = kMagic;
  h.version = kVersion;
  h.kind = kind;
  h.sender = uint16_t(g.rank);
  Peer& p = g.peers[dest];
  h.credit = p.consumed;  // every packet reports (piggybacked credit)
  p.reported = p.consumed;
  return h;
}

// Sends buffer `b`: its payload is already in place after the header (at
// kPayloadAt); more than kInlinePayload of it goes as a Long packet.
bool post_packet(uint32_t dest, int b, const PacketHeader& h) {
  const Peer& p = g.peers[dest];
  uint8_t* at = buffer(b);
  const bool big = h.payload > kInlinePayload;
  abi::AmPrefix pre{};
  pre.tag = p.name.tag;
  pre.msg_len = uint32_t(sizeof h) + (big ? 0 : h.payload);
  if (big) {
    pre.long_len = h.payload;
    pre.long_offset = uint32_t(chunk_offset(g.rank, p.long_sent));
  }
  pre.dst_ep = uint8_t(p.name.ep);
  pre.src_ep = kEndpoint;
  // One-way: FM answers nothing with AM replies, so its packets are
  // requests (tag-checked by the NIC) that ask for none (abi/am.h: a
  // request that expected one would keep a count at our NIC forever).
  pre.flags = abi::kAmRequest | abi::kAmNoReply;
  std::memcpy(at, &pre, sizeof pre);
  std::memcpy(at + sizeof pre, &h, sizeof h);
  abi::SqEntry e{};
  e.opcode = abi::kOpAmSend;
  e.length = uint32_t(abi::am_send_bytes(pre.msg_len, pre.long_len));
  e.src_addr = reinterpret_cast<uint64_t>(at);
  e.src_key = g.bufs_mr.key;
  e.dst_node = uint16_t(p.name.node);
  e.dst_slot = uint16_t(p.name.slot);
  e.user_data = g.next_user_data++;
  g.in_flight[e.user_data] = {b, dest};
  if (is_long(b)) g.long_posted++;
  while (!g.nic->post(e)) {
    if (!wait_completion()) {
      g.in_flight.erase(e.user_data);
      if (is_long(b)) g.long_posted--;
      give_buffer(b);
      g.stats.send_errors++;
      fail_peer(dest, "the NIC took no packet for it in 30 s");
      return false;
    }
  }
  g.stats.packets_sent++;
  return true;
}

bool send_control(uint32_t dest, PacketKind kind) {
  if (g.peers[dest].failed) return false;
  int b = take_buffer(false);
  if (b < 0) {
    fail_peer(dest, "no send buffer came back from the NIC in 30 s");
    return false;
  }
  return post_packet(dest, b, header(dest, kind));
}

// After consuming a data packet of `r`: report once T of them are unreported.
void maybe_credit(uint32_t r) {
  Peer& p = g.peers[r];
  if (p.consumed - p.reported < g.threshold || g.fin2_sent || p.fin2 || p.failed) return;
  if (send_control(r, kCredit)) g.stats.credit_packets_sent++;
}

// ---- receiving

const abi::AmRxEntry* ready_entry() {
  auto* e = reinterpret_cast<const abi::AmRxEntry*>(g.ring + sizeof(abi::AmRingControl) +
                                                    (g.ring_consumed % kRingEntries) * abi::kAmEntryBytes);
  // acquire: the NIC wrote the entry's bytes before its seq (its release)
  uint32_t seq = __atomic_load_n(&e->seq, __ATOMIC_ACQUIRE);
  return seq == uint32_t(g.ring_consumed + 1) ? e : nullptr;
}

void consume_entry() {
  g.ring_consumed++;
  auto* ctl = reinterpret_cast<abi::AmRingControl*>(g.ring);
  // release: we are done reading the entry; the NIC reuses it once it sees this
  __atomic_store_n(&ctl->consumed, g.ring_consumed, __ATOMIC_RELEASE);
}

void* take_stack() {
  if (!g.stacks.empty()) {
    void* s = g.stacks.back();
    g.stacks.pop_back();
    return s;
  }
  void* s = ::mmap(nullptr, kStackBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
  if (s == MAP_FAILED) return nullptr;
  ::mprotect(s, 4096, PROT_NONE);  // guard page: an overflow faults instead of corrupting
  return s;
}

void end_streams_of(const Inbound* m);

[[noreturn]] void handler_main() {
  Inbound* m = g.current;
  m->result = m->fn(m, m->sender);
  m->done = true;
  fiber_switch(m->ctx, g.sched);  // for good: a finished handler is not resumed
  std::abort();
}

// Runs or resumes the message's handler on `n` bytes at `data`; false if
// it could not be started (no stack).
bool run(Inbound& m, const uint8_t* data, uint32_t n) {
  m.cur = data;
  m.cur_left = n;
  if (!m.stack) {
    m.stack = take_stack();
    if (!m.stack) return false;
    fiber_start(m.ctx, m.stack, kStackBytes, handler_main);
    g.live_handlers++;
    g.stats.max_live_handlers = std::max<unsigned long long>(g.stats.max_live_handlers, g.live_handlers);
  }
  g.current = &m;
  fiber_switch(g.sched, m.ctx);
  g.current = nullptr;
  m.cur = nullptr;  // the entry goes back to the NIC: unread bytes are discarded
  m.cur_left = 0;
  if (m.done) {
    g.stacks.push_back(m.stack);
    m.stack = nullptr;
    g.live_handlers--;
    end_streams_of(&m);
  }
  return true;
}

void finish_if_over(Inbound* m) {
  if (!(m->done && m->last_seen)) return;
  g.inbound.erase(key(m->sender, m->msg_id));
  g.streams.erase(m);
  delete m;
}

// A packet that breaks its message (bad offset or length, or lost): the
// handler sees the message end there rather than wait forever.
void cut_message(Inbound* m, bool& quit) {
  m->last_seen = true;
  if (!m->done && m->stack) {
    run(*m, nullptr, 0);
    if (m->done && m->result == FM_QUIT) quit = true;
  }
  if (!m->done) m->done = true;
  finish_if_over(m);
}

// Every message of `r` still arriving ends where it is.
void cut_messages_of(uint32_t r, bool& quit) {
  std::vector<Inbound*> cut;
  for (auto& [k, m] : g.inbound)
    if (m->sender == r) cut.push_back(m);
  for (Inbound* m : cut) cut_message(m, quit);
}

// A data packet of `r`: start or continue its message. Returns payload bytes.
bool data_packet(uint32_t r, const PacketHeader& h, const uint8_t* data, bool& quit) {
  Peer& p = g.peers[r];
  Inbound* m = nullptr;
  if (h.flags & kFirst) {
    if (h.msg_id != p.next_in || h.offset != 0 || h.handler >= FM_MAX_HANDLERS || h.payload > h.length) return false;
    p.next_in++;
    m = new Inbound();
    m->inbound = true;
    m->sender = r;
    m->msg_id = h.msg_id;
    m->length = h.length;
    m->fn = handlers[h.handler];
    if (!m->fn) {
      std::fprintf(stderr, "FM: message from node %u for handler %u, which is not registered: dropped\n", r,
                   unsigned(h.handler));
      g.stats.bad_packets++;
      m->done = true;
    }
    g.inbound[key(r, h.msg_id)] = m;
    g.streams.insert(m);
  } else {
    auto it = g.inbound.find(key(r, h.msg_id));
    if (it == g.inbound.end()) return false;
    m = it->second;
    if (h.offset != m->next_offset || h.payload > m->length - h.offset || h.length != m->length) {
      cut_message(m, quit);
      return false;
    }
  }
  m->next_offset += h.payload;
  if (h.flags & kLast) m->last_seen = true;
  if (!m->done) {
    if (!run(*m, data, h.payload)) {
      std::fprintf(stderr, "FM: no memory for a handler stack: message from node %u dropped\n", r);
      m->done = true;
    }
    if (m->done && m->result == FM_QUIT) quit = true;
  }
  finish_if_over(m);
  return true;
}

// The rank whose endpoint sent entry `e` (the NIC vouches for the address), or -1.
int rank_of(const abi::AmRxEntry* e) {
  for (uint32_t r = 0; r < g.nprocs; ++r) {
    const EndpointName& n = g.peers[r].name;
    if (e->src_node == n.node && e->src_slot == n.slot && e->src_ep == n.ep) return int(r);
  }
  return -1;
}

// One ring entry. `data_from`: the peer whose data packet it was (its
// credit is due once the entry is consumed), or -1.

void handle_entry(const abi::AmRxEntry* e, uint64_t& bytes, bool& quit, int& data_from) {
  data_from = -1;
  if (e->len == 0) {  // an entry the NIC gave up on: its sender died mid-packet
    g.stats.lost_packets++;
    int r = rank_of(e);
    if (r >= 0 && uint32_t(r) != g.rank) {
      fail_peer(uint32_t(r), "a packet from it was lost (its process died mid-send?)");
      cut_messages_of(uint32_t(r), quit);
    }
    return;
  }
  g.stats.packets_received++;
  PacketHeader h;
  // Members send requests only (tag-checked by the NIC); the NIC takes no
  // reply for this endpoint (it never asks for one), so this is a check of
  // the member's own kind.
  if (e->len < sizeof h || e->len > abi::kAmMaxMessage || !(e->flags & abi::kAmRequest)) {
    g.stats.bad_packets++;
    return;
  }
  std::memcpy(&h, e + 1, sizeof h);
  const bool big = e->long_len != 0;  // a Long packet: the payload is in the segment
  if (h.magic != kMagic || h.version != kVersion || h.sender >= g.nprocs ||
      h.payload != (big ? e->long_len : e->len - sizeof h)) {
    g.stats.bad_packets++;
    return;
  }
  Peer& p = g.peers[h.sender];
  // The NIC vouches for where it came from; the header only claims it.
  if (e->src_node != p.name.node || e->src_slot != p.name.slot || e->src_ep != p.name.ep) {
    g.stats.bad_packets++;
    return;
  }
  if (h.kind == kData) data_from = int(h.sender);
  // A Long packet is a data packet with its payload in the sender's chunk
  // for it (the NIC checked only that it fits the segment).
  if (big && (h.kind != kData || e->len != sizeof h || h.payload > g.packet ||
              e->long_offset != chunk_offset(h.sender, p.long_consumed))) {
    g.stats.bad_packets++;
    return;
  }
  // A report may only move forward, and not past what we sent.
  uint32_t advance = h.credit - p.granted;
  if (advance > p.sent - p.granted) {
    g.stats.bad_packets++;
    return;
  }
  for (; p.granted != h.credit; ++p.granted)
    if (p.kinds[(p.granted >> 6) & 3] >> (p.granted & 63) & 1) p.long_granted++;
  const uint8_t* payload = big ? g.seg + e->long_offset : reinterpret_cast<const uint8_t*>(e + 1) + sizeof h;
  switch (h.kind) {
    case kCredit: g.stats.credit_packets_received++; break;
    case kFin1: p.fin1 = true; break;
    case kFin2: p.fin2 = true; break;
    case kData:
      if (p.failed) break;  // its messages were cut: the rest is dropped
      if (data_packet(h.sender, h, payload, quit)) bytes += h.payload;
      else g.stats.bad_packets++;
      break;
    default: g.stats.bad_packets++; break;
  }
}

// Cuts the messages of ranks that failed since last time.
void cut_failed(bool& quit) {
  while (!g.to_cut.empty()) {
    uint32_t r = g.to_cut.back();
    g.to_cut.pop_back();
    cut_messages_of(r, quit);
  }
}

// Processes ring entries until `maxbytes` message bytes were taken (data
// packets past the budget stay in the ring: receiver flow control).
uint64_t extract_packets(uint64_t maxbytes, bool& quit) {
  g.extracting = true;
  reap();
  uint64_t bytes = 0;
  quit = false;
  cut_failed(quit);
  while (const abi::AmRxEntry* e = ready_entry()) {
    if (bytes >= maxbytes && e->len >= sizeof(PacketHeader)) {
      PacketHeader h;
      std::memcpy(&h, e + 1, sizeof h);
      if (h.kind == kData) break;
    }
    int data_from = -1;
    const bool big = e->long_len != 0;  // (read before the entry goes back)
    handle_entry(e, bytes, quit, data_from);
    consume_entry();
    if (data_from >= 0) {
      g.peers[data_from].consumed++;
      if (big) g.peers[data_from].long_consumed++;
      maybe_credit(uint32_t(data_from));
    }
    cut_failed(quit);
    if (quit) break;
  }
  g.extracting = false;
  return bytes;
}

// A sender with nothing to do until packets arrive: take them all, then
// sleep until a packet arrives (or briefly, so a lost wake-up costs little;
// our own sends' completions do not wake us unless one failed).
// A peer found dead meanwhile fails (its messages are cut next time).
void progress_blocking() {
  bool quit;
  uint64_t before = g.ring_consumed;
  (void)extract_packets(~uint64_t(0), quit);
  if (g.ring_consumed != before) return;  // a report may have come: look again first
  look_at_peers();
  if (!g.to_cut.empty()) return;
  (void)g.nic->wait_ready(std::chrono::milliseconds(10), std::chrono::microseconds(0), abi::kWaitEvents);
}

// ---- sending

Outbound* outbound(FM_stream* st) {
  if (!g.up || !st || !g.streams.count(st) || st->inbound) return nullptr;
  auto* s = static_cast<Outbound*>(st);
  return s->owner == g.current ? s : nullptr;  // a stream belongs to the thread that opened it
}

// A credit for the stream's next data packet: its reservation, or (outside
// handlers) waiting for reports, extracting meanwhile as FM 2.x does. A Long
// packet (`big`) also waits until fewer than L are unreported.
bool acquire_credit(Outbound& s, bool big) {
  Peer& p = g.peers[s.dest];
  if (s.reserved) {
    s.reserved--;
    p.reserved--;
    return true;
  }
  bool waited = false;
  while ((p.sent - p.granted) + p.reserved >= g.window || (big && p.long_sent - p.long_granted >= g.long_window)) {
    if (g.current || p.failed || g.nic->state() != abi::SlotState::kActive) return false;
    if (!waited) g.stats.credit_waits++;
    waited = true;
    progress_blocking();
  }
  return true;
}

// A stream whose packet could not go: it holds no buffer any more, and a
// message that had begun is cut short at the receiver, which would wait
// for the rest forever: the peer is failed.
bool stream_failed(Outbound& s) {
  if (s.buf >= 0) give_buffer(s.buf);
  s.buf = -1;
  if (!s.first) fail_peer(s.dest, "a message to it could not be finished");
  return false;
}

// Posts buffer `b` as the stream's next data packet: `n` bytes at message
// offset `offset`, the message's last if `last`. Its credit is acquired.
bool send_data(Outbound& s, int b, uint32_t offset, uint32_t n, bool last) {
  Peer& p = g.peers[s.dest];
  PacketHeader h = header(s.dest, kData);
  h.handler = uint16_t(s.handler);
  // Numbered at the first packet: message order is the order first packets
  // leave (a handler's message may start while this one waits for credits).
  if (s.first) s.msg_id = p.next_out++;
  h.msg_id = s.msg_id;
  h.flags = (s.first ? uint32_t(kFirst) : 0u) | (last ? uint32_t(kLast) : 0u);
  h.offset = offset;
  h.length = s.length;
  h.payload = n;
  if (!post_packet(s.dest, b, h)) return false;  // post_packet failed the peer
  const bool big = n > kInlinePayload;
  uint64_t& word = p.kinds[(p.sent >> 6) & 3];
  word = big ? word | 1ull << (p.sent & 63) : word & ~(1ull << (p.sent & 63));
  p.sent++;
  if (big) p.long_sent++;
  s.first = false;
  return true;
}

// A handler's Long buffer when its peer has L Long packets unreported: the
// Long packet may not leave (its chunk may still be read) and a handler
// cannot wait for the report, so its bytes go as inline packets, whose
// credits the stream reserved (FM_begin_message counts one more packet per
// Long buffer for this).
bool send_split(Outbound& s, bool last) {
  const int whole = s.buf;
  s.buf = -1;
  const uint32_t start = s.written - s.fill;
  bool ok = true;
  for (uint32_t off = 0; ok && off < s.fill;) {
    const uint32_t n = std::min(kInlinePayload, s.fill - off);
    const int b = take_buffer(true);
    ok = b >= 0 && acquire_credit(s, false);
    if (!ok) {
      if (b >= 0) give_buffer(b);
      break;
    }
    std::memcpy(buffer(b) + kPayloadAt, buffer(whole) + kPayloadAt + off, n);
    off += n;
    ok = send_data(s, b, start + off - n, n, last && off == s.fill);
  }
  give_buffer(whole);
  g.stats.long_splits++;
  return ok;
}

// Sends the stream's buffer as its next packet (and takes a new buffer
// unless `last`). False if the packet could not go (stream_failed).
bool flush(Outbound& s, bool last) {
  Peer& p = g.peers[s.dest];
  // After our FIN2 the receiver may have closed its endpoint.
  if (s.buf < 0 || g.fin2_sent || p.failed) return stream_failed(s);
  const bool big = s.fill > kInlinePayload;
  if (big && s.owner && p.long_sent - p.long_granted >= g.long_window) {
    if (!send_split(s, last)) return stream_failed(s);
  } else {
    if (!acquire_credit(s, big)) return stream_failed(s);
    int b = s.buf;
    s.buf = -1;
    if (!send_data(s, b, s.written - s.fill, s.fill, last)) return stream_failed(s);
    if (big) g.stats.long_packets_sent++;
  }
  s.fill = 0;
  if (!last) {
    s.buf = take_data_buffer(s.length - s.written);
    if (s.buf < 0) return stream_failed(s);
  }
  return true;
}

void close_stream(Outbound* s) {
  g.peers[s->dest].reserved -= s->reserved;
  if (s->buf >= 0) give_buffer(s->buf);
  g.streams.erase(s);
  g.outbound_open--;
  if (s->owner) g.handler_streams--;
  delete s;
}

// A handler returned with streams still open: they end as if it had called
// FM_end_message (their credits were reserved, so this never waits for any).
void end_streams_of(const Inbound* m) {
  std::vector<Outbound*> left;
  for (FM_stream* st : g.streams)
    if (!st->inbound && static_cast<Outbound*>(st)->owner == m) left.push_back(static_cast<Outbound*>(st));
  std::sort(left.begin(), left.end(), [](const Outbound* a, const Outbound* b) { return a->serial < b->serial; });
  for (Outbound* s : left) {
    g.stats.streams_ended_for_handlers++;
    if (s->reserved) (void)flush(*s, true);  // always reserved; never block in the extract loop
    close_stream(s);
  }
}

uint8_t* payload_area(const Outbound& s) { return buffer(s.buf) + kPayloadAt; }
// The bytes a stream puts in one packet: what its buffer holds.
uint32_t packet_bytes(const Outbound& s) { return is_long(s.buf) ? g.packet : kInlinePayload; }

// ---- setup and teardown

bool configure_endpoint(bool close) {
  return close ? g.nic->close_am_endpoint(kEndpoint, kNicWait)
               : g.nic->configure_am_endpoint(kEndpoint, g.tag, g.ring_mr, kRingEntries, &g.seg_mr, kNicWait);
}

void teardown() {
  for (FM_stream* s : g.streams) {
    if (s->inbound) {
      auto* m = static_cast<Inbound*>(s);
      if (m->stack) g.stacks.push_back(m->stack);  // a handler that never got its message's end
      delete m;
    } else {
      delete static_cast<Outbound*>(s);
    }
  }
  for (void* s : g.stacks) ::munmap(s, kStackBytes);
  if (g.name_lock >= 0) ::close(g.name_lock);
  if (g.nic) {
    if (g.ring_mr.key) (void)g.nic->deregister(g.ring_mr);
    if (g.bufs_mr.key) (void)g.nic->deregister(g.bufs_mr);
    if (g.seg_mr.key) (void)g.nic->deregister(g.seg_mr);
    if (g.ring) g.nic->free(g.ring);
    if (g.seg) g.nic->free(g.seg);
    if (g.bufs) g.nic->free(g.bufs);
  }
  last_stats = g.stats;
  g = State{};
}

int fail(const std::string& why) {
  std::fprintf(stderr, "FM_initialize: %s\n", why.c_str());
  teardown();
  return -1;
}

// A node's slots are wiped for a moment after their process exits: retry.
Result<std::unique_ptr<Nic>> open_nic() {
  auto n = Nic::open();
  for (int i = 0; i < 100 && !n; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    n = Nic::open();
  }
  return n;
}

// The packets still to come of the messages part-way in, as many as a wait
// may count on: T/2. A sender has L - (T - 1) > T of them in credit when we
// sleep with everything that arrived consumed (each T consumed are reported
// at once), so they come without another report from us; fewer (a sender
// that pauses) cost the NIC's ~500 us bound or its sleep, not a hang.
uint32_t packets_due() {
  uint64_t n = 0;
  for (const auto& [k, m] : g.inbound)
    if (!m->last_seen) n += packets_for(m->length - m->next_offset, g.packet);
  return uint32_t(std::min<uint64_t>(n, g.threshold / 2));
}
}  // namespace
}  // namespace ulnic::fm

using namespace ulnic::fm;

extern "C" {

int FM_initialize(void) {
  if (g.up) {
    std::fprintf(stderr, "FM_initialize: already initialized\n");
    return -1;
  }
  Job job;
  std::string err;
  if (!read_job(job, err)) return fail(err);
  uint32_t c = kRingEntries / job.nprocs;
  if (c < 6) return fail("too many nodes for the receive ring");
  g.rank = job.rank;
  g.nprocs = job.nprocs;
  g.tag = random_tag();
  if (g.tag == 0) return fail("no random tag: getrandom failed");
  g.job = job;
  // L: the power of 2 above (C - 5) / 2, at most kMaxLongWindow; T = L / 2;
  // W: as many as the ring's partition holds beside W / T credit packets and
  // two FINs (W + W / T + 2 <= C), at most C - 5. P: the most a chunk may
  // hold with the segment's L chunks per sender within kSegmentBytes.
  g.long_window = std::min(kMaxLongWindow, std::bit_ceil((c - 5) / 2 + 1));
  g.threshold = std::max(1u, g.long_window / 2);
  g.window = c - 5;
  while (g.window + g.window / g.threshold + 2 > c) g.window--;
  if (g.long_window > g.window) return fail("internal: credit windows");
  g.packet = uint32_t(std::clamp<size_t>(std::bit_floor(kSegmentBytes / (size_t(job.nprocs) * g.long_window)),
                                         kMinLongPayload, kPacketPayload));
  g.long_buf_bytes = round64(kPayloadAt + g.packet);
  const uint32_t long_buffers = uint32_t(kLongBuffersBytes / g.packet);
  const size_t bufs_bytes = kSendBuffers * kBufBytes + long_buffers * g.long_buf_bytes;
  auto n = open_nic();
  if (!n) return fail(n.error().message);
  g.nic = std::move(*n);
  size_t ring_bytes = sizeof(abi::AmRingControl) + size_t(kRingEntries) * abi::kAmEntryBytes;
  g.ring = static_cast<uint8_t*>(g.nic->alloc(ring_bytes, 4096));
  g.bufs = static_cast<uint8_t*>(g.nic->alloc(bufs_bytes, 4096));
  const size_t seg_bytes = size_t(job.nprocs) * g.long_window * g.packet;
  g.seg = static_cast<uint8_t*>(g.nic->alloc(seg_bytes, 4096));
  if (!g.ring || !g.bufs || !g.seg) return fail("the slot heap has no room for the ring, segment and send buffers");
  std::memset(g.ring, 0, ring_bytes);
  auto rr = g.nic->register_memory(g.ring, ring_bytes, abi::kAccessLocal);
  if (!rr) return fail(rr.error().message);
  g.ring_mr = *rr;
  auto br = g.nic->register_memory(g.bufs, bufs_bytes, abi::kAccessLocal);
  if (!br) return fail(br.error().message);
  g.bufs_mr = *br;
  auto sr = g.nic->register_memory(g.seg, seg_bytes, abi::kAccessRemoteWrite);
  if (!sr) return fail(sr.error().message);
  g.seg_mr = *sr;
  for (int b = int(kSendBuffers) - 1; b >= 0; --b) g.free_bufs.push_back(b);
  for (int b = int(kSendBuffers + long_buffers) - 1; b >= int(kSendBuffers); --b) g.free_long.push_back(b);
  if (!configure_endpoint(false)) return fail("the NIC refused the AM endpoint");
  std::vector<EndpointName> names;
  EndpointName mine{g.nic->node(), g.nic->slot(), kEndpoint, g.tag};
  if (!publish_name(job, mine, g.name_lock, err) || !collect_names(job, mine, names, err))
    return fail(err);
  g.peers.resize(job.nprocs);
  for (uint32_t r = 0; r < job.nprocs; ++r) g.peers[r].name = names[r];
  FM_nodeid = job.rank;
  FM_numnodes = job.nprocs;
  g.up = true;
  return 0;
}

int FM_finalize(void) {
  if (!g.up || g.current || g.extracting) {
    errno = EINVAL;
    return -1;
  }
  if (g.outbound_open > g.handler_streams) {  // the caller's own streams: end them first
    errno = EBUSY;
    return -1;
  }
  g.closing = true;
  // A failed peer sends nothing more and is not waited for (one that dies
  // while we wait fails: progress_blocking looks).
  auto wait_until = [](const auto& done) {
    while (!done() && g.nic->state() == abi::SlotState::kActive) progress_blocking();
  };
  auto all = [](bool Peer::*flag) {
    return std::all_of(g.peers.begin(), g.peers.end(), [&](const Peer& p) { return p.*flag || p.failed; });
  };
  // Phase 1: everyone stops starting messages (reports still flow).
  for (uint32_t r = 0; r < g.nprocs; ++r) {
    if (r == g.rank) g.peers[r].fin1 = true;
    else (void)send_control(r, kFin1);
  }
  wait_until([&] { return all(&Peer::fin1); });
  // Handlers still sending (their messages began before the FIN1s) finish.
  wait_until([] { return g.outbound_open == 0; });
  // Phase 2: after its FIN2 a rank sends nothing, so once all FIN2s are in,
  // nothing more can arrive and the endpoint may close.
  for (uint32_t r = 0; r < g.nprocs; ++r) {
    if (r == g.rank) g.peers[r].fin2 = true;
    else (void)send_control(r, kFin2);
  }
  g.fin2_sent = true;
  wait_until([&] { return all(&Peer::fin2); });
  while (!g.in_flight.empty())
    if (!wait_completion()) break;
  bool failed = std::any_of(g.peers.begin(), g.peers.end(), [](const Peer& p) { return p.failed; });
  bool ok = g.nic->state() == abi::SlotState::kActive && g.in_flight.empty() && g.outbound_open == 0 && !failed &&
            all(&Peer::fin2);
  (void)configure_endpoint(true);
  teardown();
  FM_nodeid = 0;
  FM_numnodes = 0;
  if (!ok) errno = EIO;
  return ok ? 0 : -1;
}

FM_ULONG FM_register_handler(FM_ULONG id, FM_handler* handler) {
  if (!handler) return FM_ANY_ID;
  if (id == FM_ANY_ID) {
    for (id = 0; id < FM_MAX_HANDLERS && handlers[id]; ++id) {}
    if (id == FM_MAX_HANDLERS) return FM_ANY_ID;
  }
  if (id >= FM_MAX_HANDLERS) return FM_ANY_ID;
  handlers[id] = handler;
  return id;
}

FM_stream* FM_begin_message(FM_ULONG dest, FM_ULONG length, FM_ULONG handler) {
  if (!g.up || g.closing || dest >= g.nprocs || length > FM_MAX_MESSAGE || handler >= FM_MAX_HANDLERS) {
    errno = EINVAL;
    return nullptr;
  }
  // Outside handlers, wait for handlers' streams to end (never for our own).
  while (g.outbound_open >= kMaxStreams && !g.current && g.handler_streams > 0 &&
         g.nic->state() == abi::SlotState::kActive)
    progress_blocking();
  if (g.outbound_open >= kMaxStreams) {
    errno = EAGAIN;
    return nullptr;
  }
  if (g.peers[dest].failed) {
    errno = EIO;
    return nullptr;
  }
  auto* s = new Outbound();
  s->inbound = false;
  s->dest = uint32_t(dest);
  s->handler = uint32_t(handler);
  s->length = uint32_t(length);
  s->owner = g.current;
  Peer& p = g.peers[s->dest];
  if (g.current) {
    // A handler cannot wait for credits (the extract loop is below it): all
    // of them now, or NULL (FM 2.x's deadlock avoidance). As many as inline
    // packets would take, and one more per Long packet, which may have to
    // go as inline packets after all (send_split: its last one part-full).
    uint64_t need = packets_for(s->length, kInlinePayload);
    if (s->length > kInlinePayload) need += packets_for(s->length, g.packet);
    if (uint64_t(p.sent - p.granted) + p.reserved + need > g.window) {
      delete s;
      errno = EAGAIN;
      return nullptr;
    }
    p.reserved += uint32_t(need);
    s->reserved = uint32_t(need);
  }
  s->buf = take_data_buffer(s->length);
  if (s->buf < 0) {
    p.reserved -= s->reserved;
    delete s;
    errno = EIO;
    return nullptr;
  }
  s->serial = g.next_serial++;
  g.streams.insert(s);
  g.outbound_open++;
  if (s->owner) g.handler_streams++;
  return s;
}

int FM_send_piece(FM_stream* stream, const void* buffer, FM_ULONG length) {
  Outbound* s = outbound(stream);
  if (!s || (length && !buffer) || length > s->length - s->written) {
    errno = EINVAL;
    return -1;
  }
  if (s->buf < 0 || g.peers[s->dest].failed) {  // an earlier packet could not go, or the peer failed
    errno = EIO;
    return -1;
  }
  auto* from = static_cast<const uint8_t*>(buffer);
  while (length) {
    // A full packet leaves only when more bytes follow: the last one must say so.
    if (s->fill == packet_bytes(*s) && !flush(*s, false)) {
      errno = EIO;
      return -1;
    }
    uint32_t n = uint32_t(std::min<FM_ULONG>(length, packet_bytes(*s) - s->fill));
    std::memcpy(payload_area(*s) + s->fill, from, n);
    s->fill += n;
    s->written += n;
    from += n;
    length -= n;
  }
  return 0;
}

int FM_end_message(FM_stream* stream) {
  Outbound* s = outbound(stream);
  if (!s) {
    errno = EINVAL;
    return -1;
  }
  bool ok = flush(*s, true);
  close_stream(s);
  if (!ok) errno = EIO;
  return ok ? 0 : -1;
}

FM_ULONG FM_receive(void* buffer, FM_stream* stream, FM_ULONG length) {
  Inbound* m = g.current;
  if (!m || stream != m || (length && !buffer)) {
    errno = EINVAL;
    return 0;
  }
  auto* to = static_cast<uint8_t*>(buffer);
  FM_ULONG got = 0;
  while (got < length) {
    if (m->cur_left == 0) {
      if (m->last_seen) break;
      g.stats.handler_yields++;
      fiber_switch(m->ctx, g.sched);  // the extract loop resumes us with the next packet
      continue;
    }
    uint32_t n = uint32_t(std::min<FM_ULONG>(length - got, m->cur_left));
    std::memcpy(to + got, m->cur, n);
    m->cur += n;
    m->cur_left -= n;
    got += n;
  }
  return got;
}

FM_ULONG FM_extract(FM_ULONG maxbytes) {
  if (!g.up || g.current || g.extracting) return 0;
  const uint64_t before = g.ring_consumed;
  const FM_ULONG bytes = ulnic_fm_extract_quiet(maxbytes);
  // A process that keeps finding nothing hands its core to the NIC.
  g.nic->poll_found(g.ring_consumed != before, ulnic::Nic::kTightBlock, abi::kWaitEvents);
  return bytes;
}

FM_ULONG ulnic_fm_extract_quiet(FM_ULONG maxbytes) {
  if (!g.up || g.current || g.extracting) return 0;
  bool quit;
  return FM_ULONG(extract_packets(maxbytes, quit));
}

void ulnic_fm_polled(int found) {
  if (g.up) g.nic->poll_found(found != 0, ulnic::Nic::kTightBlock, abi::kWaitEvents);
}

int FM_wait(FM_ULONG usec) {
  if (!g.up || g.current || g.extracting) return 0;
  // Events are drained before the ring is looked at: an arrival after this
  // look posts one more, which ends the sleep.
  reap();
  if (ready_entry()) return 1;
  auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(std::min<FM_ULONG>(usec, 1ul << 40));
  for (;;) {
    auto left = std::chrono::ceil<std::chrono::milliseconds>(until - std::chrono::steady_clock::now());
    if (left.count() <= 0) return 0;
    // No spin first (Nic::wait's rule): on two cores a waiting process that
    // spins takes the core a NIC needs -- 20 us of it held FM's one-way
    // latency with FM_wait at ~70 us, the sending NICs picking up each
    // message ~25 us late (hop_bench fm, issue 19).
    // The rest of a message part-way in comes in a batch: one wake-up for
    // several packets, not one each (ulnic::Nic::wait_ready's `events`).
    if (!g.nic->wait_ready(std::min(left, std::chrono::milliseconds(1000)), std::chrono::microseconds(0),
                           abi::kWaitEvents, packets_due()) &&
        g.nic->state() != abi::SlotState::kActive)
      return 0;
    reap();
    if (ready_entry()) return 1;
  }
}

void FM_get_stats(FM_stats* out) {
  if (!out) return;
  *out = g.up ? g.stats : last_stats;
  out->in_flight = g.up ? g.in_flight.size() : 0;
}

}  // extern "C"
