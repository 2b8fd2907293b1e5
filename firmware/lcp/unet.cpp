#include "lcp/unet.h"

#include <string.h>

#include "core/status.h"
#include "link/link.h"

namespace lcp {
namespace {

using core::status::count;
using core::status::put;

static_assert(abi::kUnetPage == link::kSegmentPage, "a U-Net/MM send's packets end at page ends");

struct Endpoint {
  bool used;
  uint32_t serial;         // this configuration (assemblies name it)
  uint32_t area_key;
  uint64_t area_va;
  uint32_t rx_entries, free_entries;  // powers of 2
  uint32_t seg_key;
  uint64_t seg_va, seg_len;
  uint64_t produced;       // receive descriptors handed out (reserved)
  abi::UnetNicWords nic;   // private copy of what the NIC publishes
  // U-Net/MM (kSqUnetMm): the segment is process memory at seg_va, mapped a
  // page at a time through the TLB.
  bool mm;
  abi::UnetMmWords mmw;    // private copy of what the NIC publishes
  uint64_t miss_vpage;     // the last miss posted, and fills_taken then:
  uint64_t miss_fills;     // the same miss goes again only after more fills
};

// The NIC's TLB for U-Net/MM segments: (slot, endpoint serial, virtual
// page) -> frame (slot offset of a heap page). Direct mapped: a fill takes
// its entry from whatever held it (that page misses next time, and its
// process maps it again from the page it still holds).
struct TlbEntry {
  uint32_t slot_plus1;     // 0: empty
  uint32_t serial;
  uint64_t vpage;
  uint64_t frame;
};

struct Channel {
  bool used;
  uint32_t slot;
  uint64_t generation;
  uint32_t remote_node, remote_slot, tx_tag, rx_tag;
};

// A message being received: where its bytes go.
struct Assembly {
  bool used;
  uint32_t src;
  uint64_t op_id;
  uint32_t slot;
  uint64_t generation;
  uint32_t serial;         // the endpoint configuration it was checked against
  uint16_t channel;
  uint64_t entry;          // its receive descriptor's number
  uint32_t length;
  bool in_line;            // in the descriptor, no buffer
  bool dropped;            // a taken buffer that did not fit: given back
  uint32_t buf_off, buf_len;
};

struct State {
  SlotTable* t;
  Endpoint eps[abi::kMaxSlots];
  Channel chans[abi::kMaxUnetChannels];
  Assembly in[kMaxUnetAssemblies];
  TlbEntry tlb[abi::kUnetTlbEntries];
  uint32_t serial;
} g;

uint64_t area_bytes(const Endpoint& ep) {
  return ep.mm ? abi::unet_mm_area_bytes(ep.rx_entries, ep.free_entries)
               : abi::unet_area_bytes(ep.rx_entries, ep.free_entries);
}

// The NIC address of the endpoint's queue area, or 0 if its registration is gone.
uint64_t area_nic(const Slot& s, const Endpoint& ep) {
  uint64_t nic = 0;
  if (slot_translate(s, ep.area_key, ep.area_va, area_bytes(ep), abi::kAccessLocal, nic) != abi::kCqOk) return 0;
  return nic;
}

abi::UnetHostWords& host_words(uint64_t area) { return *reinterpret_cast<abi::UnetHostWords*>(area); }
abi::UnetNicWords& nic_words(uint64_t area) { return *reinterpret_cast<abi::UnetNicWords*>(area + 64); }
abi::UnetRxDesc& rx_desc(uint64_t area, uint64_t n) { return reinterpret_cast<abi::UnetRxDesc*>(area + 128)[n]; }

// The process's words (untrusted: only read, once, with acquire: they
// publish the free-queue entries before them).
uint64_t host_word(const uint64_t& w) { return __atomic_load_n(&w, __ATOMIC_ACQUIRE); }

void publish_mm(uint64_t area, const Endpoint& ep);

// Publishes the endpoint's counters and free-queue index into its area at
// `area` (one writer: the NIC; single-word stores).
void publish_counts(Endpoint& ep, uint64_t area) {
  if (ep.mm) publish_mm(area, ep);
  abi::UnetNicWords& w = nic_words(area);
  put(w.free_taken, ep.nic.free_taken);
  put(w.delivered, ep.nic.delivered);
  put(w.drops_rx_full, ep.nic.drops_rx_full);
  put(w.drops_free_empty, ep.nic.drops_free_empty);
  put(w.drops_too_long, ep.nic.drops_too_long);
  put(w.drops_bad_tag, ep.nic.drops_bad_tag);
}
// ... where the caller has not translated the area yet (nothing if its
// registration is gone).
void publish_counts(Slot& s, Endpoint& ep) {
  if (const uint64_t area = area_nic(s, ep)) publish_counts(ep, area);
}

// ---- U-Net/MM: the TLB, the fill ring, misses

abi::UnetMmWords& mm_words(uint64_t area, const Endpoint& ep) {
  return *reinterpret_cast<abi::UnetMmWords*>(area + abi::unet_mm_words_offset(ep.rx_entries, ep.free_entries));
}
const abi::UnetTlbFill* fill_ring(uint64_t area, const Endpoint& ep) {
  return reinterpret_cast<const abi::UnetTlbFill*>(area + abi::unet_fill_ring_offset(ep.rx_entries, ep.free_entries));
}

void publish_mm(uint64_t area, const Endpoint& ep) {
  abi::UnetMmWords& w = mm_words(area, ep);
  put(w.fills_taken, ep.mmw.fills_taken);
  put(w.tlb_hits, ep.mmw.tlb_hits);
  put(w.tlb_misses, ep.mmw.tlb_misses);
  put(w.drops_tlb_miss, ep.mmw.drops_tlb_miss);
  put(w.fills_refused, ep.mmw.fills_refused);
}

TlbEntry& tlb_entry(uint32_t slot, uint64_t vpage) {
  return g.tlb[uint32_t((vpage * 0x9e3779b97f4a7c15ull) >> 40 ^ slot * 0x2f) & (abi::kUnetTlbEntries - 1)];
}

// The frame of the endpoint's page `vpage` (NIC address), or 0: a miss.
uint64_t tlb_lookup(const Slot& s, const Endpoint& ep, uint64_t vpage) {
  const TlbEntry& e = tlb_entry(s.index, vpage);
  if (e.slot_plus1 != s.index + 1 || e.serial != ep.serial || e.vpage != vpage) return 0;
  return s.base + e.frame;
}

bool in_segment(const Endpoint& ep, uint64_t vpage) {
  return vpage >= ep.seg_va / abi::kUnetPage && vpage <= (ep.seg_va + ep.seg_len - 1) / abi::kUnetPage;
}

// Carries out the fills the process posted since the last look. Untrusted:
// a page outside the segment, or a frame that is not a whole page of the
// slot's own heap, is refused (counted); an index no process could have
// written reads as nothing new.
void take_fills(const Slot& s, Endpoint& ep, uint64_t area) {
  const uint64_t produced = host_word(host_words(area).fills_produced);
  if (produced == ep.mmw.fills_taken || produced - ep.mmw.fills_taken > abi::kUnetFillEntries) return;
  const abi::UnetTlbFill* ring = fill_ring(area, ep);
  for (; ep.mmw.fills_taken != produced; ++ep.mmw.fills_taken) {
    abi::UnetTlbFill f;
    memcpy(&f, &ring[ep.mmw.fills_taken & (abi::kUnetFillEntries - 1)], sizeof f);  // once: the host may rewrite it
    count(ulnic::abi::kCtrUnetTlbFills);
    TlbEntry& e = tlb_entry(s.index, f.vpage);
    if (!in_segment(ep, f.vpage)) {
      ++ep.mmw.fills_refused;
    } else if (f.frame == abi::kUnetUnmap) {
      if (e.slot_plus1 == s.index + 1 && e.serial == ep.serial && e.vpage == f.vpage) e = TlbEntry{};
    } else if (f.frame % abi::kUnetPage != 0 || f.frame < s.layout.heap_offset ||
               f.frame - s.layout.heap_offset > s.layout.heap_size ||
               s.layout.heap_size - (f.frame - s.layout.heap_offset) < abi::kUnetPage) {
      ++ep.mmw.fills_refused;
    } else {
      e = TlbEntry{s.index + 1, ep.serial, f.vpage, f.frame};
    }
  }
  publish_mm(area, ep);
}

// Tells the process the TLB has no frame for `vpage` (once, until it has
// given fills since). `waiting`: the low word of the waiting send's user_data.
void post_miss(uint32_t slot, Endpoint& ep, uint64_t area, uint64_t vpage, uint32_t waiting) {
  if (vpage == ep.miss_vpage && ep.mmw.fills_taken == ep.miss_fills) return;
  ep.miss_vpage = vpage;
  ep.miss_fills = ep.mmw.fills_taken;
  ++ep.mmw.tlb_misses;
  count(ulnic::abi::kCtrUnetTlbMisses);
  publish_mm(area, ep);
  abi::EqEntry ev{};
  ev.type = abi::kEqUnetTlbMiss;
  ev.export_handle = waiting;
  ev.offset = vpage;
  slot_post_event(*g.t, slot, ev);
}

// The pages of [va, va + len) in the TLB, in order: their count, or -1 and
// `missing` the first one it does not hold.
int32_t tlb_pages(const Slot& s, const Endpoint& ep, uint64_t va, uint64_t len, uint64_t* pages, uint64_t& missing) {
  const uint64_t first = va / abi::kUnetPage, last = (va + len - 1) / abi::kUnetPage;
  for (uint64_t p = first; p <= last; ++p) {
    const uint64_t nic = tlb_lookup(s, ep, p);
    if (!nic) {
      missing = p;
      return -1;
    }
    if (pages) pages[p - first] = nic;
  }
  return int32_t(last - first + 1);
}

void drop(Endpoint& ep, uint64_t area, uint64_t& counter) {
  ++counter;
  count(ulnic::abi::kCtrUnetDrops);
  publish_counts(ep, area);
}

// A message no channel takes: counted by the NIC and, if the slot it names
// is an endpoint, by that endpoint.
void bad_tag(const abi::WireHeader& h) {
  count(ulnic::abi::kCtrUnetBadTag);
  if (h.dst_slot >= abi::kMaxSlots) return;
  Slot& s = g.t->slots[h.dst_slot];
  Endpoint& ep = g.eps[h.dst_slot];
  if (s.state != abi::SlotState::kActive || !ep.used) return;
  ++ep.nic.drops_bad_tag;
  publish_counts(s, ep);
}

Channel* channel_for_tag(uint32_t tag) {
  for (Channel& c : g.chans)
    if (c.used && c.rx_tag == tag && slot_live(*g.t, c.slot, c.generation)) return &c;
  return nullptr;
}

Assembly* find(uint32_t src, uint64_t op_id) {
  for (Assembly& a : g.in)
    if (a.used && a.src == src && a.op_id == op_id) return &a;
  return nullptr;
}

Assembly* free_assembly() {
  for (Assembly& a : g.in)
    if (!a.used) return &a;
  return nullptr;
}

// Takes the next free-queue entry, or false (empty, or indices no process
// could have written: read as empty).
bool take_buffer(Endpoint& ep, uint64_t area, abi::UnetFreeDesc& out) {
  const uint64_t produced = host_word(host_words(area).free_produced);
  if (produced == ep.nic.free_taken || produced - ep.nic.free_taken > ep.free_entries) return false;
  const uint64_t queue = area + 128 + uint64_t(ep.rx_entries) * sizeof(abi::UnetRxDesc);
  const auto* q = reinterpret_cast<const abi::UnetFreeDesc*>(queue);
  memcpy(&out, &q[ep.nic.free_taken & (ep.free_entries - 1)], sizeof out);  // once: the host may rewrite it
  ++ep.nic.free_taken;
  return true;
}

// The first packet: the channel, the endpoint, room in the receive queue
// and, for a message too long to go in its descriptor, a free buffer.
void begin(uint32_t src, const abi::WireHeader& h) {
  const Channel* ch = channel_for_tag(h.dst_key);
  if (!ch || ch->remote_node != src || ch->remote_slot != h.src_slot || ch->slot != h.dst_slot) return bad_tag(h);
  Slot& s = g.t->slots[ch->slot];
  Endpoint& ep = g.eps[ch->slot];
  if (!ep.used) return bad_tag(h);
  const uint64_t area = area_nic(s, ep);
  if (!area) return;  // its process took the queues away: nowhere to count
  if (h.op_length == 0 || h.op_length > abi::kUnetMaxMessage) return drop(ep, area, ep.nic.drops_too_long);
  const uint64_t consumed = host_word(host_words(area).rx_consumed);
  // Untrusted: more consumed than produced reads as full.
  if (consumed > ep.produced || ep.produced - consumed >= ep.rx_entries) return drop(ep, area, ep.nic.drops_rx_full);
  Assembly* a = free_assembly();
  if (!a) return drop(ep, area, ep.nic.drops_rx_full);  // more arriving at once than the NIC holds
  *a = Assembly{};
  a->in_line = h.op_length <= abi::kUnetInline;
  if (!a->in_line) {
    abi::UnetFreeDesc b;
    if (!take_buffer(ep, area, b)) return drop(ep, area, ep.nic.drops_free_empty);
    a->buf_off = b.offset;
    a->buf_len = b.length;
    // A buffer that cannot hold the message (or lies outside the segment)
    // goes back to the process in a dropped descriptor.
    a->dropped = b.length < h.op_length || b.offset > ep.seg_len || b.length > ep.seg_len - b.offset;
    if (a->dropped) {
      ++ep.nic.drops_too_long, count(ulnic::abi::kCtrUnetDrops);
    } else if (ep.mm) {
      // U-Net/MM: every page the message will fill must be mapped now (a
      // message cannot wait: no flow control). One that is not drops it,
      // and the miss goes to the process for the next one.
      take_fills(s, ep, area);
      uint64_t missing = 0;
      const int32_t n = tlb_pages(s, ep, ep.seg_va + b.offset, h.op_length, nullptr, missing);
      if (n < 0) {
        a->dropped = true;
        ++ep.mmw.drops_tlb_miss, count(ulnic::abi::kCtrUnetDrops);
        post_miss(ch->slot, ep, area, missing, 0);
      } else {
        ep.mmw.tlb_hits += uint32_t(n);
        count(ulnic::abi::kCtrUnetTlbHits, uint32_t(n));
      }
    }
    publish_counts(ep, area);
  }
  a->used = true;
  a->src = src;
  a->op_id = h.op_id;
  a->slot = ch->slot;
  a->generation = s.generation;
  a->serial = ep.serial;
  a->channel = uint16_t(ch - g.chans);
  a->entry = ep.produced++;
  a->length = h.op_length;
}

// The assembly's endpoint, as it was checked (null: gone or reconfigured).
Endpoint* endpoint_of(const Assembly& a) {
  if (!slot_live(*g.t, a.slot, a.generation)) return nullptr;
  Endpoint& ep = g.eps[a.slot];
  return ep.used && ep.serial == a.serial ? &ep : nullptr;
}

// U-Net/MM: a packet's bytes into the buffer's pages, through the TLB. A
// page unmapped since the first packet (the process evicted it) drops the
// message: the bytes may not go to a frame the process has taken back.
void place_mm(Assembly& a, const Slot& s, Endpoint& ep, uint64_t off, const uint8_t* bytes, uint32_t len) {
  uint64_t va = ep.seg_va + a.buf_off + off;
  while (len) {
    const uint64_t nic = tlb_lookup(s, ep, va / abi::kUnetPage);
    if (!nic) {
      a.dropped = true;  // published as such (its buffer back), and counted here
      ++ep.mmw.drops_tlb_miss, count(ulnic::abi::kCtrUnetDrops);
      return;
    }
    const uint32_t in_page = uint32_t(abi::kUnetPage - va % abi::kUnetPage), n = len < in_page ? len : in_page;
    memcpy(reinterpret_cast<void*>(nic + va % abi::kUnetPage), bytes, n);
    va += n, bytes += n, len -= n;
  }
}

void place(Assembly& a, uint64_t off, const uint8_t* bytes, uint32_t len) {
  Endpoint* ep = endpoint_of(a);
  if (!ep || a.dropped || off > a.length || len > a.length - off) return;
  const Slot& s = g.t->slots[a.slot];
  uint64_t nic = 0;
  if (ep->mm && !a.in_line) return place_mm(a, s, *ep, off, bytes, len);
  if (a.in_line) {
    const uint64_t area = area_nic(s, *ep);
    if (!area) return;
    nic = reinterpret_cast<uint64_t>(rx_desc(area, a.entry & (ep->rx_entries - 1)).data) + off;
  } else if (slot_translate(s, ep->seg_key, ep->seg_va + a.buf_off + off, len, abi::kAccessRemoteWrite, nic) !=
             abi::kCqOk) {
    return;  // the segment's registration went away meanwhile
  }
  memcpy(reinterpret_cast<void*>(nic), bytes, len);
}

// Publishes the assembly's descriptor: the message, a buffer given back,
// or (a message that went away: its sender aborted it) an empty one the
// process skips, so later descriptors are not held up.
void publish(Assembly& a, bool ok) {
  a.used = false;
  Endpoint* ep = endpoint_of(a);
  if (!ep) return;
  Slot& s = g.t->slots[a.slot];
  const uint64_t area = area_nic(s, *ep);
  if (!area) return;
  abi::UnetRxDesc& d = rx_desc(area, a.entry & (ep->rx_entries - 1));
  const bool delivered = ok && !a.dropped;
  d.channel = a.channel;
  d.flags = uint8_t(delivered ? (a.in_line ? abi::kUnetRxInline : 0) : abi::kUnetRxDropped);
  d.length = delivered ? a.length : 0;
  d.offset = a.in_line ? 0 : a.buf_off;
  d.buf_len = a.in_line ? 0 : a.buf_len;
  // The process reads the descriptor once seq says so: everything before first.
  __atomic_store_n(&d.seq, uint32_t(a.entry + 1), __ATOMIC_RELEASE);
  if (!delivered) {  // a buffer given back wakes nobody: the next message will
    if (ep->mm) publish_counts(*ep, area);  // (a page unmapped under it: place_mm counted it)
    return;
  }
  ++ep->nic.delivered;
  publish_counts(*ep, area);
  count(ulnic::abi::kCtrUnetMessages);
  abi::EqEntry ev{};
  ev.type = abi::kEqUnetArrival;
  ev.export_handle = a.channel;
  ev.src_node = uint16_t(a.src);
  ev.length = a.length;
  slot_post_event(*g.t, a.slot, ev);
}

}  // namespace

void unet_init(SlotTable& t) {
  memset(&g, 0, sizeof g);
  g.t = &t;
}

abi::CqStatus unet_configure(Slot& s, const abi::SqEntry& e) {
  if (e.dst_slot || e.src_slot || e.dst_node) return abi::kCqBadOpcode;
  Endpoint& ep = g.eps[s.index];
  ++g.t->epoch;  // messages placed into its segment stop here (unet_placement)
  s.unet_mm = s.unet_waiting = false;
  if (e.flags & abi::kSqUnetClose) {
    ep = Endpoint{};
    return abi::kCqOk;
  }
  const bool mm = e.flags & abi::kSqUnetMm;
  const uint32_t rx = e.length, fq = e.access;
  if (rx == 0 || rx > abi::kUnetMaxQueue || (rx & (rx - 1)) || fq == 0 || fq > abi::kUnetMaxQueue || (fq & (fq - 1)))
    return abi::kCqBadLength;
  if (e.reg_offset == 0 || e.reg_offset > 0xffffffffull) return abi::kCqBadLength;  // offsets are 32-bit
  uint64_t area = 0, seg = 0;
  const uint64_t area_len = mm ? abi::unet_mm_area_bytes(rx, fq) : abi::unet_area_bytes(rx, fq);
  abi::CqStatus st = slot_translate(s, e.src_key, e.src_addr, area_len, abi::kAccessLocal, area);
  if (st != abi::kCqOk) return st;
  if (area % alignof(abi::UnetNicWords) != 0) return abi::kCqBadAddress;  // the NIC writes 8-byte words there
  if (mm) {
    // The process's own memory: nothing to check but that it is an address
    // range (every page is checked as the process maps it).
    if (e.dst_key || e.dst_addr + e.reg_offset < e.dst_addr) return abi::kCqBadAddress;
  } else {
    st = slot_translate(s, e.dst_key, e.dst_addr, e.reg_offset, abi::kAccessLocal | abi::kAccessRemoteWrite, seg);
    if (st != abi::kCqOk) return st;
  }
  while (++g.serial == 0) {
  }
  // Queues start empty, counts at zero (abi/unet.h): a process that posted
  // buffers first has them taken from the first entry on.
  ep = Endpoint{};
  ep.used = true;
  ep.serial = g.serial;
  ep.area_key = e.src_key;
  ep.area_va = e.src_addr;
  ep.rx_entries = rx;
  ep.free_entries = fq;
  ep.seg_key = e.dst_key;
  ep.seg_va = e.dst_addr;
  ep.seg_len = e.reg_offset;
  ep.mm = mm;
  ep.miss_vpage = ~0ull;
  s.unet_mm = mm;
  publish_counts(s, ep);
  return abi::kCqOk;
}

bool unet_can_start(Slot& s, const abi::SqEntry& e) {
  if (e.opcode != abi::kOpUnetSend) return true;
  Endpoint& ep = g.eps[s.index];
  // Anything but a U-Net/MM send of segment bytes goes on (unet_check_send judges it).
  if (!ep.used || !ep.mm || e.length == 0 || e.src_addr > ep.seg_len || e.length > ep.seg_len - e.src_addr ||
      e.length > abi::kUnetMaxMessage)
    return true;
  const uint64_t area = area_nic(s, ep);
  if (!area) return true;
  take_fills(s, ep, area);
  uint64_t missing = 0;
  s.unet_waiting = tlb_pages(s, ep, ep.seg_va + e.src_addr, e.length, nullptr, missing) < 0;
  if (s.unet_waiting) post_miss(s.index, ep, area, missing, uint32_t(e.user_data));
  return !s.unet_waiting;
}

void unet_take_fills(Slot& s) {
  Endpoint& ep = g.eps[s.index];
  if (!ep.used || !ep.mm) return;
  if (const uint64_t area = area_nic(s, ep)) take_fills(s, ep, area);
}

bool unet_fills_waiting(const Slot& s) {
  const Endpoint& ep = g.eps[s.index];
  if (!ep.used || !ep.mm) return false;
  const uint64_t area = area_nic(s, ep);
  return area && host_word(host_words(area).fills_produced) != ep.mmw.fills_taken;
}

abi::CtrlStatus unet_control(SlotTable& t, const abi::CtrlCommand& cmd, uint64_t& value) {
  const abi::UnetChannelArgs& a = cmd.unet;
  if (cmd.slot >= abi::kMaxSlots) return abi::kCtrlBadSlot;
  const Slot& s = t.slots[cmd.slot];
  ++t.epoch;
  if (cmd.opcode == abi::kCtrlUnetUnchannel) {
    if (a.channel >= abi::kMaxUnetChannels) return abi::kCtrlBadHandle;
    Channel& c = g.chans[a.channel];
    if (!c.used || !slot_live(t, cmd.slot, c.generation) || c.slot != cmd.slot) return abi::kCtrlBadHandle;
    c = Channel{};
    return abi::kCtrlOk;
  }
  if (s.state != abi::SlotState::kActive) return abi::kCtrlBadSlot;
  if (a.tx_tag == 0 || a.rx_tag == 0 || a.remote_node >= abi::kMaxNodes || a.remote_slot >= abi::kMaxSlots)
    return abi::kCtrlBadCommand;
  if (channel_for_tag(a.rx_tag)) return abi::kCtrlInUse;
  uint32_t held = 0;
  for (const Channel& c : g.chans) held += c.used && c.slot == cmd.slot && slot_live(t, c.slot, c.generation);
  if (held >= abi::kMaxUnetChannelsPerSlot) return abi::kCtrlNoResources;
  for (uint32_t i = 0; i < abi::kMaxUnetChannels; ++i) {
    Channel& c = g.chans[i];
    if (c.used && slot_live(t, c.slot, c.generation)) continue;
    c = Channel{true, cmd.slot, s.generation, a.remote_node, a.remote_slot, a.tx_tag, a.rx_tag};
    value = i;
    return abi::kCtrlOk;
  }
  return abi::kCtrlNoResources;
}

abi::CqStatus unet_check_send(const Slot& s, const abi::SqEntry& e, bool inline_payload, UnetRoute& route) {
  if (e.dst_slot || e.access || e.src_slot || e.reg_offset || e.dst_node || e.src_key || e.dst_addr ||
      (inline_payload && e.src_addr))
    return abi::kCqBadOpcode;
  const Endpoint& ep = g.eps[s.index];
  if (!ep.used) return abi::kCqUnetNoEndpoint;
  if (e.dst_key >= abi::kMaxUnetChannels) return abi::kCqUnetBadChannel;
  const Channel& c = g.chans[e.dst_key];
  if (!c.used || c.slot != s.index || c.generation != s.generation) return abi::kCqUnetBadChannel;
  if (e.length == 0 || e.length > (inline_payload ? abi::kMaxInline : abi::kUnetMaxMessage)) return abi::kCqBadLength;
  route.node = c.remote_node;
  route.slot = c.remote_slot;
  route.tag = c.tx_tag;
  route.src = 0;
  route.npages = 0;
  if (inline_payload) return abi::kCqOk;
  if (e.src_addr > ep.seg_len || e.length > ep.seg_len - e.src_addr) return abi::kCqBadLength;
  if (!ep.mm) return slot_translate(s, ep.seg_key, ep.seg_va + e.src_addr, e.length, abi::kAccessLocal, route.src);
  // U-Net/MM: unet_can_start found every page mapped in this very pass.
  const uint64_t va = ep.seg_va + e.src_addr;
  uint64_t missing = 0;
  const int32_t n = tlb_pages(s, ep, va, e.length, route.pages, missing);
  if (n < 0) return abi::kCqBadAddress;  // (cannot happen: see unet_can_start)
  route.npages = uint32_t(n);
  route.page_off = uint32_t(va % abi::kUnetPage);
  route.src = route.pages[0] + route.page_off;
  Endpoint& mine = g.eps[s.index];
  mine.mmw.tlb_hits += route.npages;
  count(ulnic::abi::kCtrUnetTlbHits, route.npages);
  if (const uint64_t area = area_nic(s, mine)) publish_mm(area, mine);
  return abi::kCqOk;
}

uint8_t unet_place(uint32_t src, const abi::WireHeader& h, const uint8_t* payload) {
  Assembly* a = find(src, h.op_id);
  if (!a && (h.flags & abi::kWireFirst)) {
    begin(src, h);
    a = find(src, h.op_id);
  }
  if (a) place(*a, h.dst_addr, payload, h.payload_len);
  return abi::kCqOk;  // dropped or not: counted here, not told (U-Net)
}

bool unet_placement(uint32_t src, const abi::WireHeader& h, uint64_t& base, uint64_t& hi) {
  const Assembly* a = find(src, h.op_id);
  if (!a || a->in_line || a->dropped) return false;
  const Endpoint* ep = endpoint_of(*a);
  if (ep && ep->mm) return false;  // its pages are not one range: each packet goes through the TLB
  uint64_t nic = 0;
  if (!ep || slot_translate(g.t->slots[a->slot], ep->seg_key, ep->seg_va + a->buf_off, a->length,
                            abi::kAccessRemoteWrite, nic) != abi::kCqOk)
    return false;
  (void)h;
  base = nic;
  hi = a->length;
  return true;
}

void unet_last(uint32_t src, const abi::WireHeader& h, bool ok) {
  if (Assembly* a = find(src, h.op_id)) publish(*a, ok);
}

void unet_peer_lost(uint32_t peer) {
  for (Assembly& a : g.in)
    if (a.used && a.src == peer) publish(a, false);
}

void unet_slot_detached(uint32_t slot) {
  g.eps[slot] = Endpoint{};
  for (Channel& c : g.chans)
    if (c.used && c.slot == slot) c = Channel{};
  for (Assembly& a : g.in)
    if (a.used && a.slot == slot) a.used = false;
}

}  // namespace lcp
