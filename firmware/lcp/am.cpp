#include "lcp/am.h"

#include <string.h>

#include "core/cost.h"
#include "core/status.h"

namespace lcp {
namespace {

struct Endpoint {
  bool used;
  uint64_t tag;
  uint32_t ring_key;
  uint64_t ring_va;
  uint32_t entries;       // a power of 2
  uint64_t produced;      // entries handed out (reserved) so far
  uint32_t seg_key;
  uint64_t seg_va, seg_len;
  uint32_t serial;        // this configuration of it, from its first (names its counts in tickets)
};

// The replies an endpoint awaits from one peer endpoint (AM-2: a request
// gets at most one reply): the requests it sent there not yet answered, and
// the later pieces of replies whose first piece came (abi/am.h). Free when
// both are 0.
struct Owed {
  uint16_t node;
  uint8_t slot, ep;
  uint16_t requests, pieces;
};

// A message being received: where its bytes go.
struct Assembly {
  bool used;
  uint32_t src;
  uint64_t op_id;
  uint16_t src_slot;
  uint32_t slot;
  uint64_t generation;
  uint8_t ep;
  uint64_t entry;          // its ring entry's number
  abi::AmPrefix prefix;
  uint8_t status;          // kCqOk, or why the rest is dropped
  // The segment its Long was checked against at the first packet: the rest
  // goes there or nowhere (an endpoint given another segment meanwhile
  // refuses it).
  uint32_t seg_key;
  uint64_t seg_va, seg_len;
  // Its endpoint's ring (NIC address), translated at the first packet, and
  // the tables' epoch then: good for as long as nothing in the tables
  // changes (ring_of; a message's packets and its publish took three walks).
  uint64_t ring, ring_epoch;
};

struct State {
  SlotTable* t;
  Endpoint eps[abi::kMaxSlots][abi::kMaxAmEndpoints];
  Owed owed[abi::kMaxSlots][abi::kMaxAmEndpoints][kAmPeers];
  uint8_t owed_end[abi::kMaxSlots][abi::kMaxAmEndpoints];  // no Owed in use at or above this index
  uint32_t serial;
  Assembly in[kMaxAmAssemblies];
  uint32_t in_used;  // assemblies in use: with none, a first packet does not look
} g;

static_assert(abi::kMaxNodes <= 0xffff && abi::kMaxSlots <= 0xff && abi::kMaxAmEndpoints <= 0xff && kAmPeers <= 0xff,
              "Owed's fields, owed_end");

// What endpoint (slot, ep) awaits from endpoint peer_ep of slot peer_slot on `node` (null: nothing). Only the
// entries below the endpoint's high-water mark are looked at: a program talks to a few peers (a scan of all
// kAmPeers was ~160 instructions of each request and each reply).
Owed* owed_by(uint32_t slot, uint32_t ep, uint32_t node, uint32_t peer_slot, uint32_t peer_ep) {
  Owed* row = g.owed[slot][ep];
  for (uint32_t i = 0, end = g.owed_end[slot][ep]; i < end; ++i) {
    Owed& o = row[i];
    if ((o.requests || o.pieces) && o.node == node && o.slot == peer_slot && o.ep == peer_ep) return &o;
  }
  return nullptr;
}

// May endpoint ep of slot h.dst_slot take reply `p` from `src`? kCqOk, or
// the refusal: a reply no request of its asked for is refused as a request
// with the wrong tag would be; a later piece of a reply whose first piece
// has not come yet (its first was refused for a full ring, and is on its way
// again) is asked to come again later.
uint8_t reply_allowed(const Owed* o, const abi::AmPrefix& p) {
  if (p.flags & abi::kAmPiece) return o && o->pieces ? abi::kCqOk : o && o->requests ? abi::kCqAmCongestion : abi::kCqAmBadTag;
  return o && o->requests ? abi::kCqOk : abi::kCqAmBadTag;
}

// Reply `p` was taken: it answers one request (its first piece), or is one
// of the pieces its first piece announced.
void take_reply(Owed& o, const abi::AmPrefix& p) {
  if (p.flags & abi::kAmPiece) {
    --o.pieces;
    return;
  }
  --o.requests;
  const uint32_t more = p.pieces > 1 ? p.pieces - 1u : 0u;  // begin() bounded it by kAmMaxPieces
  o.pieces = uint16_t(o.pieces + more > 0xffff ? 0xffff : o.pieces + more);
}

void clear_owed(uint32_t slot, uint32_t ep) {
  memset(g.owed[slot][ep], 0, sizeof g.owed[slot][ep]);
  g.owed_end[slot][ep] = 0;
}

uint64_t ring_bytes(uint32_t entries) { return sizeof(abi::AmRingControl) + uint64_t(entries) * abi::kAmEntryBytes; }

// The NIC address of the ring, or 0 if its registration is gone.
uint64_t ring_nic(const Slot& s, const Endpoint& ep) {
  uint64_t nic = 0;
  if (slot_translate(s, ep.ring_key, ep.ring_va, ring_bytes(ep.entries), abi::kAccessLocal, nic) != abi::kCqOk)
    return 0;
  return nic;
}

// The ring `a`'s message goes to (0: its registration is gone).
uint64_t ring_of(Assembly& a, const Slot& s, const Endpoint& ep) {
  if (a.ring_epoch != g.t->epoch) a.ring = ring_nic(s, ep), a.ring_epoch = g.t->epoch;
  return a.ring;
}

// What the process says it has consumed (untrusted: anything but a count
// within the ring reads as "full").
uint64_t consumed(uint64_t ring) {
  return __atomic_load_n(reinterpret_cast<volatile uint64_t*>(ring), __ATOMIC_ACQUIRE);
}

bool tag_ok(uint64_t mine, uint64_t theirs) {
  constexpr uint64_t kAll = 1, kNone = 0;  // AM_ALL, AM_NONE
  return mine == kAll || (mine != kNone && mine == theirs);
}

// (A scan of the whole table was ~160 instructions of each message.)
Assembly* find(uint32_t src, uint64_t op_id) {
  if (!g.in_used) return nullptr;
  for (Assembly& a : g.in)
    if (a.used && a.src == src && a.op_id == op_id) return &a;
  return nullptr;
}

// The first packet: every check, then a ring entry for the message (`out`).
uint8_t begin(uint32_t src, const abi::WireHeader& h, const uint8_t* payload, Assembly*& out) {
  if (h.payload_len < sizeof(abi::AmPrefix) || h.dst_addr != 0 || h.dst_slot >= abi::kMaxSlots)
    return abi::kCqAmBadEndpoint;
  abi::AmPrefix p;
  memcpy(&p, payload, sizeof p);
  // A malformed message names no endpoint that could take it.
  // (As five words: byte by byte it was ~80 instructions of every message.)
  static_assert(offsetof(abi::AmPrefix, reserved) % 8 == 0 && sizeof p.reserved == 5 * 8);
  uint64_t r[5];
  __builtin_memcpy_inline(r, p.reserved, sizeof r);
  const bool reserved_zero = (r[0] | r[1] | r[2] | r[3] | r[4]) == 0;
  if (p.dst_ep >= abi::kMaxAmEndpoints || p.msg_len == 0 || p.msg_len > abi::kAmMaxMessage ||
      p.long_len > abi::kAmMaxLong || abi::am_send_bytes(p.msg_len, p.long_len) != h.op_length || !reserved_zero ||
      p.pieces > abi::kAmMaxPieces)
    return abi::kCqAmBadEndpoint;
  Slot& s = g.t->slots[h.dst_slot];
  Endpoint& ep = g.eps[h.dst_slot][p.dst_ep];
  // No process there (gone, or never): unreachable, as for a VMMC send.
  if (s.state != abi::SlotState::kActive) return abi::kCqRemoteBadSlot;
  if (!ep.used) return abi::kCqAmBadEndpoint;
  Owed* owed = nullptr;
  if (p.flags & abi::kAmRequest) {
    if (!tag_ok(ep.tag, p.tag)) return abi::kCqAmBadTag;
  } else {
    owed = owed_by(h.dst_slot, p.dst_ep, src, h.src_slot, p.src_ep);
    if (uint8_t st = reply_allowed(owed, p)) return st;
  }
  if (p.long_len) {
    if (ep.seg_len == 0 || p.long_offset > ep.seg_len) return abi::kCqAmBadSegOffset;
    if (uint64_t(p.long_offset) + p.long_len > ep.seg_len) return abi::kCqAmBadLength;
  }
  uint64_t ring = ring_nic(s, ep);
  if (!ring) return abi::kCqAmBadEndpoint;
  uint64_t done = consumed(ring);  // untrusted: more than was produced reads as full
  if (done > ep.produced || ep.produced - done >= ep.entries) return abi::kCqAmCongestion;
  Assembly* a = nullptr;
  for (Assembly& x : g.in)
    if (!x.used) {
      a = &x;
      break;
    }
  if (!a) return abi::kCqAmCongestion;
  if (owed) take_reply(*owed, p);
  ++g.in_used;
  *a = Assembly{true,       src,        h.op_id,   h.src_slot, h.dst_slot, s.generation, p.dst_ep, ep.produced++,
                p,          abi::kCqOk, ep.seg_key, ep.seg_va,  ep.seg_len, ring,         g.t->epoch};
  out = a;
  return abi::kCqOk;
}

// Is the endpoint's segment still the one `a`'s Long was checked against?
bool same_segment(const Endpoint& ep, const Assembly& a) {
  return ep.seg_key == a.seg_key && ep.seg_va == a.seg_va && ep.seg_len == a.seg_len;
}

// Writes [off, off+len) of the operation's bytes where they belong.
uint8_t place(Assembly& a, uint64_t off, const uint8_t* bytes, uint32_t len) {
  if (!slot_live(*g.t, a.slot, a.generation)) return abi::kCqRemoteBadSlot;  // its process went
  const Slot& s = g.t->slots[a.slot];
  const Endpoint& ep = g.eps[a.slot][a.ep];
  if (!ep.used) return abi::kCqAmBadEndpoint;
  if (a.prefix.long_len && !same_segment(ep, a)) return abi::kCqAmBadSegOffset;
  const uint64_t msg_start = sizeof(abi::AmPrefix), msg_end = msg_start + a.prefix.msg_len,
                 long_start = abi::am_long_start(a.prefix.msg_len);
  while (len) {
    uint64_t nic = 0;
    uint32_t n = len;
    if (off < msg_start) {  // the prefix: already read
      n = uint32_t(msg_start - off < len ? msg_start - off : len);
    } else if (off >= msg_end && off < long_start) {  // padding before a Long: skipped
      n = uint32_t(long_start - off < len ? long_start - off : len);
    } else if (off < msg_end) {
      n = uint32_t(msg_end - off < len ? msg_end - off : len);
      uint64_t ring = ring_of(a, s, ep);
      if (!ring) return abi::kCqAmBadEndpoint;
      nic = ring + sizeof(abi::AmRingControl) + (a.entry & (ep.entries - 1)) * abi::kAmEntryBytes +
            sizeof(abi::AmRxEntry) + (off - msg_start);
    } else {
      uint64_t at = ep.seg_va + a.prefix.long_offset + (off - long_start);
      if (slot_translate(s, ep.seg_key, at, n, abi::kAccessRemoteWrite, nic) != abi::kCqOk)
        return abi::kCqAmBadSegOffset;  // the segment's registration went away meanwhile
    }
    if (nic) memcpy(reinterpret_cast<void*>(nic), bytes, n);
    off += n, bytes += n, len -= n;
  }
  return abi::kCqOk;
}

// Publishes the assembly's entry: the message, or (refused after its entry
// was taken) an empty one the process skips, so later entries are not held up.
void publish(Assembly& a, bool ok) {
  a.used = false;
  --g.in_used;
  if (!slot_live(*g.t, a.slot, a.generation)) return;
  Slot& s = g.t->slots[a.slot];
  Endpoint& ep = g.eps[a.slot][a.ep];
  uint64_t ring = ep.used ? ring_of(a, s, ep) : 0;
  if (!ring) return;
  auto* e = reinterpret_cast<abi::AmRxEntry*>(ring + sizeof(abi::AmRingControl) +
                                              (a.entry & (ep.entries - 1)) * abi::kAmEntryBytes);
  abi::AmRxEntry head{};
  head.len = ok ? a.prefix.msg_len : 0;
  head.src_node = uint16_t(a.src);
  head.src_slot = a.src_slot;
  head.src_ep = a.prefix.src_ep;
  head.flags = a.prefix.flags;
  head.long_len = ok ? a.prefix.long_len : 0;
  head.long_offset = a.prefix.long_offset;
  memcpy(reinterpret_cast<uint8_t*>(e) + sizeof(uint32_t), reinterpret_cast<const uint8_t*>(&head) + sizeof(uint32_t),
         sizeof head - sizeof(uint32_t));
  // The process reads the entry once seq says so: everything before first.
  __atomic_store_n(&e->seq, uint32_t(a.entry + 1), __ATOMIC_RELEASE);
  if (!ok) return;  // an empty entry wakes nobody: the next message will
  core::status::count(ulnic::abi::kCtrAmMessages);
  abi::EqEntry ev{};
  ev.type = abi::kEqAmArrival;
  ev.export_handle = a.ep;
  ev.src_node = uint16_t(a.src);
  ev.src_slot = a.src_slot;
  ev.length = head.len;
  slot_post_event(*g.t, a.slot, ev);
}

}  // namespace

void am_init(SlotTable& t) {
  memset(&g, 0, sizeof g);
  g.t = &t;
}

abi::CqStatus am_configure(Slot& s, const abi::SqEntry& e) {
  if (e.dst_slot >= abi::kMaxAmEndpoints || e.dst_node != 0) return abi::kCqBadOpcode;
  Endpoint& ep = g.eps[s.index][e.dst_slot];
  ++g.t->epoch;  // streams placed into its segment stop here (am_placement)
  if (e.flags & abi::kSqAmClose) {
    ep = Endpoint{};
    clear_owed(s.index, e.dst_slot);  // replies to it have nowhere to go
    return abi::kCqOk;
  }
  uint32_t n = e.length;
  if (n == 0 || n > abi::kAmMaxRingEntries || (n & (n - 1))) return abi::kCqBadLength;
  uint64_t ring = 0, seg = 0;
  abi::CqStatus st = slot_translate(s, e.src_key, e.src_addr, ring_bytes(n), abi::kAccessLocal, ring);
  if (st != abi::kCqOk) return st;
  // Aligned for its words (tests/fuzz: a ring at an odd address had the NIC
  // read the count and write the entries misaligned, which RISC-V may trap on).
  if (ring % alignof(abi::AmRingControl) != 0) return abi::kCqBadAddress;
  if (e.reg_offset) {
    st = slot_translate(s, e.dst_key, e.dst_addr, e.reg_offset, abi::kAccessRemoteWrite, seg);
    if (st != abi::kCqOk) return st;
  }
  // The same ring again (a new tag or segment) keeps its place; a new one
  // starts where its process says it is.
  bool same_ring = ep.used && ep.ring_key == e.src_key && ep.ring_va == e.src_addr && ep.entries == n;
  uint64_t produced = same_ring ? ep.produced : consumed(ring);
  // A configured endpoint keeps the replies it awaits (its requests are
  // still answered); a new one awaits none.
  uint32_t serial = ep.serial;
  if (!ep.used) {
    while (++g.serial == 0) {
    }
    serial = g.serial;
    clear_owed(s.index, e.dst_slot);
  }
  ep = Endpoint{true, uint64_t(e.access) | uint64_t(e.src_slot) << 32, e.src_key, e.src_addr, n, produced,
                e.dst_key, e.reg_offset ? e.dst_addr : 0, e.reg_offset, serial};
  return abi::kCqOk;
}

abi::CqStatus am_check_send(const Slot& s, const abi::SqEntry& e, uint64_t& src) {
  if (e.dst_slot >= abi::kMaxSlots || e.access || e.src_slot || e.reg_offset || e.dst_key || e.dst_addr)
    return abi::kCqBadOpcode;
  if (e.length <= sizeof(abi::AmPrefix) || e.length > sizeof(abi::AmPrefix) + abi::kAmMaxMessage + abi::kAmMaxLong)
    return abi::kCqBadLength;
  return slot_translate(s, e.src_key, e.src_addr, e.length, abi::kAccessLocal, src);
}

abi::CqStatus am_count_request(const Slot& s, const abi::SqEntry& e, uint64_t src, uint64_t& ticket) {
  ticket = 0;
  abi::AmPrefix p;
  memcpy(&p, reinterpret_cast<const void*>(src), sizeof p);  // once: the host may rewrite it
  const uint8_t one_way = abi::kAmNoReply | abi::kAmPiece;
  if (!(p.flags & abi::kAmRequest) || (p.flags & one_way) || p.src_ep >= abi::kMaxAmEndpoints ||
      p.dst_ep >= abi::kMaxAmEndpoints || !g.eps[s.index][p.src_ep].used)
    return abi::kCqOk;  // no reply to await (a destination that does not exist refuses it)
  Owed* o = owed_by(s.index, p.src_ep, e.dst_node, e.dst_slot, p.dst_ep);
  if (!o) {
    for (uint32_t i = 0; i < kAmPeers; ++i) {
      Owed& x = g.owed[s.index][p.src_ep][i];
      if (!x.requests && !x.pieces) {
        x = Owed{uint16_t(e.dst_node), uint8_t(e.dst_slot), p.dst_ep, 0, 0};
        o = &x;
        uint8_t& end = g.owed_end[s.index][p.src_ep];
        if (i >= end) end = uint8_t(i + 1);
        break;
      }
    }
  }
  // Full (or a count no protocol reaches): not sent now, so that no reply
  // to it is refused; the host tries again as for a full ring.
  if (!o || o->requests == 0xffff) return abi::kCqAmCongestion;
  ++o->requests;
  ticket = uint64_t(g.eps[s.index][p.src_ep].serial) << 16 | uint64_t(p.src_ep) << 8 | p.dst_ep;
  return abi::kCqOk;
}

void am_send_done(uint32_t slot, uint64_t ticket, uint32_t dst_node, uint32_t dst_slot, abi::CqStatus status) {
  const bool refused = (status >= abi::kCqAmBadEndpoint && status <= abi::kCqAmBadLength) || status == abi::kCqRemoteBadSlot;
  if (!refused || slot >= abi::kMaxSlots) return;
  const uint32_t src_ep = (ticket >> 8) & 0xff, dst_ep = ticket & 0xff;
  const Endpoint& ep = g.eps[slot][src_ep];
  if (!ep.used || ep.serial != uint32_t(ticket >> 16)) return;  // closed since: its counts went with it
  if (Owed* o = owed_by(slot, src_ep, dst_node, dst_slot, dst_ep); o && o->requests) --o->requests;
}

uint8_t am_place(uint32_t src, const abi::WireHeader& h, const uint8_t* payload) {
  core::cost::op<abi::kCostOpAmRecv>();
  Assembly* a = find(src, h.op_id);
  if (!a) {
    if (!(h.flags & abi::kWireFirst)) {  // refused at its first packet, or its process went since
      const bool gone = h.dst_slot < abi::kMaxSlots && g.t->slots[h.dst_slot].state != abi::SlotState::kActive;
      return gone ? abi::kCqRemoteBadSlot : abi::kCqAmBadEndpoint;
    }
    uint8_t st = begin(src, h, payload, a);
    if (st != abi::kCqOk) {
      core::status::count(ulnic::abi::kCtrAmRefused);
      return st;
    }
  }
  if (a->status == abi::kCqOk) a->status = place(*a, h.dst_addr, payload, h.payload_len);
  return a->status;
}

bool am_placement(uint32_t src, const abi::WireHeader& h, uint64_t& base, uint64_t& hi) {
  const Assembly* a = find(src, h.op_id);
  if (!a || a->status != abi::kCqOk || !a->prefix.long_len || !slot_live(*g.t, a->slot, a->generation)) return false;
  const Endpoint& ep = g.eps[a->slot][a->ep];
  const uint64_t long_start = abi::am_long_start(a->prefix.msg_len);
  if (!ep.used || !same_segment(ep, *a) || h.dst_addr + h.payload_len < long_start) return false;  // not all in yet
  uint64_t nic = 0;
  if (slot_translate(g.t->slots[a->slot], ep.seg_key, ep.seg_va + a->prefix.long_offset, a->prefix.long_len,
                     abi::kAccessRemoteWrite, nic) != abi::kCqOk)
    return false;
  base = nic - long_start;
  hi = long_start + a->prefix.long_len;
  return true;
}

void am_last(uint32_t src, const abi::WireHeader& h, bool ok) {
  Assembly* a = find(src, h.op_id);
  if (a) publish(*a, ok && a->status == abi::kCqOk);
}

void am_peer_lost(uint32_t peer) {
  for (Assembly& a : g.in)
    if (a.used && a.src == peer) publish(a, false);
  // No reply comes from a peer that lost what it had of ours.
  for (auto& slot : g.owed)
    for (auto& ep : slot)
      for (Owed& o : ep)
        if (o.node == peer) o = Owed{};
}

void am_slot_detached(uint32_t slot) {
  for (Endpoint& ep : g.eps[slot]) ep = Endpoint{};
  memset(g.owed[slot], 0, sizeof g.owed[slot]);
  memset(g.owed_end[slot], 0, sizeof g.owed_end[slot]);
  for (Assembly& a : g.in)
    if (a.used && a.slot == slot) a.used = false, --g.in_used;
}

}  // namespace lcp
