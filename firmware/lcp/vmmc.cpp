#include "lcp/vmmc.h"

#include <string.h>

#include "core/copy.h"
#include "core/cost.h"
#include "core/status.h"

namespace lcp {
namespace {

struct Grant {
  bool used;
  uint32_t node, slot;
};

// Incoming page table entry: an exported region of one slot.
struct Export {
  bool used;
  bool notify;
  uint32_t handle;        // index | tag << 8
  uint32_t slot;
  uint64_t generation;    // of the owning slot's attachment
  uint32_t key;           // the registration behind it
  uint64_t va, length;
  Grant grants[abi::kMaxGrants];
  uint32_t grants_end;    // no grant at or above this index (each chunk looks below it)
  // VMMC-2 transfer redirection posted by the owner (one shot).
  bool redirect;
  uint64_t redirect_offset, redirect_length;
  uint64_t redirect_nic;  // where redirect_offset lands instead
  uint32_t redirect_id;
};

// A send being redirected: decided at its first chunk, followed to its last.
struct Redirected {
  bool used;
  uint32_t src;
  uint64_t op_id;
  uint32_t handle;
  uint64_t offset, length;  // the export range it may cover
  uint64_t nic;             // where `offset` lands
  uint32_t id;
};

// The translation of the send a source is placing now, taken from the
// incoming page table at one chunk and good for that send's later chunks
// while nothing behind it changes (SlotTable::epoch): a one-entry TLB per
// source, so a chunk costs a bounds check instead of the table walk.
struct Placing {
  uint64_t epoch;    // SlotTable::epoch when filled (0: empty)
  uint64_t op_id;
  uint32_t handle;   // the export (h.dst_key)
  uint16_t src_slot;
  uint64_t lo, hi;   // a chunk's [dst_addr, dst_addr + len) must lie in [lo, hi)
  uint64_t base;     // NIC address of offset 0 of the export (or of the redirection)
  bool this_send;    // good for this send only: base is a redirection's, or the
                     // export has one posted that a later send may take
};

struct State {
  SlotTable* t;
  Export exports[abi::kMaxExports];
  Redirected redirected[abi::kMaxRedirected];
  uint32_t redirected_used;  // entries in use: with none, a chunk does not look
  uint32_t rng;
  Placing placing[abi::kMaxNodes];  // by source node
};
State g;

void tables_changed() { ++g.t->epoch; }

Export* find_export(uint32_t handle) {
  uint32_t index = handle & 0xff;
  if (index >= abi::kMaxExports) return nullptr;
  Export& x = g.exports[index];
  return x.used && x.handle == handle ? &x : nullptr;
}

bool granted(const Export& x, uint32_t node, uint32_t slot) {
  for (uint32_t i = 0; i < x.grants_end; ++i) {
    const Grant& gr = x.grants[i];
    if (gr.used && gr.node == node && gr.slot == slot) return true;
  }
  return false;
}

void end_redirect(Redirected& r) {
  r.used = false;
  --g.redirected_used;
  tables_changed();
}

abi::CtrlStatus do_export(const abi::CtrlCommand& cmd, uint64_t& value) {
  if (cmd.slot >= abi::kMaxSlots) return abi::kCtrlBadSlot;
  Slot& s = g.t->slots[cmd.slot];
  if (s.state != abi::SlotState::kActive) return abi::kCtrlBadSlot;
  const abi::CtrlVmmcArgs& a = cmd.vmmc;
  uint64_t nic = 0;
  if (a.length == 0 || slot_translate(s, a.key, a.va, a.length, abi::kAccessRemoteWrite, nic) != abi::kCqOk)
    return abi::kCtrlBadRegion;
  for (uint32_t i = 0; i < abi::kMaxExports; ++i) {
    Export& x = g.exports[i];
    if (x.used) continue;
    memset(&x, 0, sizeof x);
    x.used = true;
    x.notify = a.notify != 0;
    x.handle = tagged_index(g.rng, i);
    x.slot = cmd.slot;
    x.generation = s.generation;
    x.key = a.key;
    x.va = a.va;
    x.length = a.length;
    value = x.handle;
    return abi::kCtrlOk;
  }
  return abi::kCtrlNoResources;
}

abi::CtrlStatus do_grant(const abi::CtrlCommand& cmd, bool grant) {
  Export* x = find_export(cmd.vmmc.handle);
  if (!x) return abi::kCtrlBadHandle;
  const uint32_t node = cmd.vmmc.node, slot = cmd.vmmc.peer_slot;
  for (Grant& gr : x->grants)
    if (gr.used && gr.node == node && gr.slot == slot) {
      if (!grant) gr.used = false;
      return abi::kCtrlOk;
    }
  if (!grant) return abi::kCtrlOk;  // revoking what was never granted: nothing to do
  for (uint32_t i = 0; i < abi::kMaxGrants; ++i)
    if (!x->grants[i].used) {
      x->grants[i] = Grant{true, node, slot};
      if (i >= x->grants_end) x->grants_end = i + 1;
      return abi::kCtrlOk;
    }
  return abi::kCtrlNoResources;
}

abi::CtrlStatus do_import(const abi::CtrlCommand& cmd, bool set) {
  if (cmd.slot >= abi::kMaxSlots) return abi::kCtrlBadSlot;
  Slot& s = g.t->slots[cmd.slot];
  if (s.state != abi::SlotState::kActive) return abi::kCtrlBadSlot;
  const abi::CtrlVmmcArgs& a = cmd.vmmc;
  if (a.index >= abi::kMaxImports) return abi::kCtrlBadHandle;
  Import& imp = s.imports[a.index];
  if (!set) {
    if (!imp.used) return abi::kCtrlBadHandle;
    imp = Import{};
    return abi::kCtrlOk;
  }
  if (a.length == 0 || a.length > (uint64_t(1) << abi::kProxyShift)) return abi::kCtrlBadRegion;
  imp = Import{true, a.node, a.peer_slot, a.handle, a.length};
  return abi::kCtrlOk;
}

Redirected* find_redirected(uint32_t src, uint64_t op_id) {
  for (Redirected& r : g.redirected)
    if (r.used && r.src == src && r.op_id == op_id) return &r;
  return nullptr;
}

// At a send's first chunk: does a redirection take the whole send?
Redirected* start_redirect(Export& x, uint32_t src, const abi::WireHeader& h) {
  if (!x.redirect || !(h.flags & abi::kWireFirst)) return nullptr;
  if (h.dst_addr < x.redirect_offset || h.op_length > x.redirect_length ||
      h.dst_addr - x.redirect_offset > x.redirect_length - h.op_length)
    return nullptr;
  for (Redirected& r : g.redirected)
    if (!r.used) {
      r = Redirected{true, src, h.op_id, x.handle, x.redirect_offset, x.redirect_length, x.redirect_nic, x.redirect_id};
      ++g.redirected_used;
      tables_changed();
      x.redirect = false;  // one shot
      return &r;
    }
  return nullptr;  // table full: the send lands in the export as usual
}

bool contains(const Registration& r, uint64_t va, uint64_t len) {
  return r.key && (r.access & abi::kAccessLocal) && va >= r.va && len <= r.length && va - r.va <= r.length - len;
}

}  // namespace

void vmmc_init(SlotTable& t) {
  memset(&g, 0, sizeof g);
  g.t = &t;
  g.rng = (t.rng * 2654435761u) | 1u;
}

abi::CtrlStatus vmmc_control(SlotTable& t, const abi::CtrlCommand& cmd, uint64_t& value) {
  (void)t;
  tables_changed();
  switch (cmd.opcode) {
    case abi::kCtrlExport:
      return do_export(cmd, value);
    case abi::kCtrlUnexport: {
      Export* x = find_export(cmd.vmmc.handle);
      if (!x) return abi::kCtrlBadHandle;
      x->used = false;
      return abi::kCtrlOk;
    }
    case abi::kCtrlGrant:
      return do_grant(cmd, true);
    case abi::kCtrlRevoke:
      return do_grant(cmd, false);
    case abi::kCtrlImport:
      return do_import(cmd, true);
    case abi::kCtrlUnimport:
      return do_import(cmd, false);
    default:
      return abi::kCtrlBadCommand;
  }
}

void vmmc_slot_detached(uint32_t slot) {
  tables_changed();
  for (Export& x : g.exports)
    if (x.used && x.slot == slot) x.used = false;
}

void vmmc_peer_lost(uint32_t peer) {
  tables_changed();
  for (Redirected& r : g.redirected)
    if (r.used && r.src == peer) end_redirect(r);
}

abi::CqStatus vmmc_redirect(Slot& s, const abi::SqEntry& e, uint32_t& result) {
  tables_changed();
  Export* x = find_export(e.dst_key);
  if (!x || x->slot != s.index || x->generation != s.generation) return abi::kCqBadKey;
  result = 0;
  if (e.length == 0) {  // cancel
    result = x->redirect ? 1 : 0;
    x->redirect = false;
    return abi::kCqOk;
  }
  if (e.dst_addr > x->length || e.length > x->length - e.dst_addr) return abi::kCqBadLength;
  uint64_t nic = 0;
  abi::CqStatus st = vmmc_translate_source(s, e.src_addr, e.length, nic);
  if (st != abi::kCqOk) return st;
  x->redirect = true;
  x->redirect_offset = e.dst_addr;
  x->redirect_length = e.length;
  x->redirect_nic = nic;
  x->redirect_id = e.src_key;
  return abi::kCqOk;
}

abi::CqStatus vmmc_translate_source(Slot& s, uint64_t va, uint64_t len, uint64_t& nic) {
  if (len == 0 || va + len < va) return abi::kCqBadLength;
  uint64_t vpage = va >> 12;
  TlbEntry& e = s.tlb[vpage % kTlbEntries];
  uint32_t reg = ~0u;
  if (e.key && e.vpage == vpage && e.reg < abi::kMaxRegistrations && s.regs[e.reg].key == e.key &&
      contains(s.regs[e.reg], va, len)) {
    reg = e.reg;
    ++s.tlb_hits;
  } else {
    ++s.tlb_misses;
    for (uint32_t i = 0; i < abi::kMaxRegistrations; ++i)
      if (contains(s.regs[i], va, len)) {
        reg = i;
        break;
      }
    if (reg == ~0u) return abi::kCqUnregistered;
    e = TlbEntry{vpage, reg, s.regs[reg].key};
  }
  const Registration& r = s.regs[reg];
  nic = s.base + r.offset + (va - r.va);
  return abi::kCqOk;
}

abi::CqStatus vmmc_translate_proxy(const Slot& s, uint64_t proxy, uint64_t len, const Import*& imp,
                                   uint64_t& offset) {
  uint64_t region = proxy >> abi::kProxyShift;
  if (region == 0 || region > abi::kMaxImports) return abi::kCqNotImported;
  const Import& i = s.imports[region - 1];
  offset = proxy & ((uint64_t(1) << abi::kProxyShift) - 1);
  if (!i.used || len > i.length || offset > i.length - len) return abi::kCqNotImported;
  imp = &i;
  return abi::kCqOk;
}

namespace {

// Is `c` the translation of the send `h` belongs to (and still good)?
bool translates(const Placing& c, const abi::WireHeader& h) {
  return c.epoch == g.t->epoch && c.op_id == h.op_id && c.handle == h.dst_key && c.src_slot == h.src_slot;
}

// A chunk the send's cached translation does not cover: the table walk, and
// a new translation for the chunks after it. Out of line, so the common case
// (vmmc_place) stays small.
[[gnu::noinline]] uint8_t place_walk(Placing& c, uint32_t src, const abi::WireHeader& h, const uint8_t* payload) {
  uint8_t st = abi::kCqOk;
  Export* x = find_export(h.dst_key);
  uint64_t nic = 0;
  if (!x || !granted(*x, src, h.src_slot)) {
    st = abi::kCqRemoteRevoked;
  } else {
    Slot& s = g.t->slots[x->slot];
    if (s.state != abi::SlotState::kActive || s.generation != x->generation) {
      st = abi::kCqRemoteRevoked;
    } else if (h.dst_addr > x->length || h.payload_len > x->length - h.dst_addr) {
      st = abi::kCqRemoteProtection;
    } else if (slot_translate(s, x->key, x->va + h.dst_addr, h.payload_len, abi::kAccessRemoteWrite, nic) !=
               abi::kCqOk) {
      st = abi::kCqRemoteRevoked;  // the registration under the export is gone
    }
  }
  if (st != abi::kCqOk) {
    core::status::count(ulnic::abi::kCtrVmmcViolations);
    return st;
  }
  Redirected* r = g.redirected_used ? find_redirected(src, h.op_id) : nullptr;
  if (!r && x->redirect) r = start_redirect(*x, src, h);
  // The rest of this send may skip the walk (while nothing changes).
  c = Placing{g.t->epoch, h.op_id, x->handle, h.src_slot, 0, x->length, nic - h.dst_addr, x->redirect};
  if (r && r->handle == x->handle && h.dst_addr >= r->offset && h.payload_len <= r->length &&
      h.dst_addr - r->offset <= r->length - h.payload_len) {
    nic = r->nic + (h.dst_addr - r->offset);
    c.lo = r->offset, c.hi = r->offset + r->length, c.base = r->nic - r->offset, c.this_send = true;
  }
  memcpy(reinterpret_cast<void*>(nic), payload, h.payload_len);
  return abi::kCqOk;
}

}  // namespace

uint8_t vmmc_place(uint32_t src, const abi::WireHeader& h, const uint8_t* payload) {
  core::cost::op<abi::kCostOpVmmcRecv>();
  Placing& c = g.placing[src % abi::kMaxNodes];
  // The send whose translation this is; or (no redirection under way or
  // posted) a later send from the same slot into the same export: the
  // export, its grants and its registration are what the walk found while
  // the epoch stands (a redirection posted since moved it). A ping-pong's
  // every message is a first packet: the walk was ~180 instructions of it.
  const bool same_send = translates(c, h) && !(h.flags & abi::kWireFirst);
  const bool same_export = c.epoch == g.t->epoch && c.handle == h.dst_key && c.src_slot == h.src_slot &&
                           !c.this_send && !g.redirected_used;
  if ((same_send || same_export) && h.dst_addr >= c.lo && h.dst_addr <= c.hi && h.payload_len <= c.hi - h.dst_addr) {
    c.op_id = h.op_id;
    core::copy_bytes(reinterpret_cast<void*>(c.base + h.dst_addr), payload, h.payload_len);
    return abi::kCqOk;
  }
  return place_walk(c, src, h, payload);
}

bool vmmc_placement(uint32_t src, const abi::WireHeader& h, uint64_t& base, uint64_t& hi) {
  const Placing& c = g.placing[src % abi::kMaxNodes];
  if (!translates(c, h)) return false;
  base = c.base;
  hi = c.hi;
  return true;
}

void vmmc_last(uint32_t src, const abi::WireHeader& h, bool placed) {
  Redirected* r = g.redirected_used ? find_redirected(src, h.op_id) : nullptr;
  abi::EqEntry ev{};
  if (r) {
    ev.flags = abi::kEqRedirected;
    ev.redirect_id = r->id;
    end_redirect(*r);
  }
  Export* x = find_export(h.dst_key);
  // A redirected send always tells the owner (its library waits for the
  // buffer); others only when asked to.
  if (!placed || !x || (!x->notify && !r) || (!r && !(h.flags & abi::kWireNotify))) return;
  ev.type = abi::kEqNotification;
  ev.export_handle = x->handle;
  ev.src_node = uint16_t(src);
  ev.src_slot = h.src_slot;
  ev.length = h.op_length;
  // The send's first byte: this (last) chunk's offset minus what came before.
  uint64_t before = h.op_length - h.payload_len;
  ev.offset = h.dst_addr >= before ? h.dst_addr - before : 0;
  core::status::count(ulnic::abi::kCtrVmmcNotifications);
  slot_post_event(*g.t, x->slot, ev);
}

}  // namespace lcp
