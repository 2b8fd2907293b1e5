// VMMC in the firmware (DESIGN §8): the incoming page table (exports of this
// NIC's slots, with the importers each export was granted to), the per-slot
// outgoing page tables (proxy regions -> exports on other nodes, in Slot),
// the per-slot software TLB that finds the registration behind a send's
// virtual address, receiver-side checks of every arriving chunk, and
// notifications into the receiving slot's event queue. A send's first chunk
// is checked against the tables; the translation it took then serves the
// chunks after it while no table changes (SlotTable::epoch), and the link
// places those itself when each header is exactly the one expected
// (link::place_next; anything else comes here and is checked again).
//
// Only the node daemon changes the tables (control queue); a process can
// reach only the proxy regions its daemon imported for it.
#pragma once

#include "lcp/slots.h"
#include "ulnic/abi/fabric.h"
#include "ulnic/abi/vmmc.h"

namespace lcp {

void vmmc_init(SlotTable& t);

// Control commands (kCtrlExport .. kCtrlUnimport). `value` gets the export
// handle for kCtrlExport.
abi::CtrlStatus vmmc_control(SlotTable& t, const abi::CtrlCommand& cmd, uint64_t& value);
// Slot k lost its process: its exports go (its imports go with the Slot).
void vmmc_slot_detached(uint32_t slot);

// Sender: the NIC address of a send's source through the slot's TLB
// (registrations with local access, found by virtual address).
abi::CqStatus vmmc_translate_source(Slot& s, uint64_t va, uint64_t len, uint64_t& nic);
// Sender: the import behind [proxy, proxy + len), or why not.
abi::CqStatus vmmc_translate_proxy(const Slot& s, uint64_t proxy, uint64_t len, const Import*& imp,
                                   uint64_t& offset);

// Receiver: checks one arriving chunk against the incoming page table and
// places it; returns a CqStatus (kCqOk when placed).
uint8_t vmmc_place(uint32_t src, const abi::WireHeader& h, const uint8_t* payload);
// Receiver: where the rest of the send whose chunk `h` was just placed goes,
// as the translation cached for it says: bytes at offset o land at base + o,
// below offset hi. False if nothing is cached for it.
bool vmmc_placement(uint32_t src, const abi::WireHeader& h, uint64_t& base, uint64_t& hi);
// Receiver: the last chunk of a send arrived (`placed`: all of it was
// accepted). Ends a redirection and posts the owner's event: for a send
// with kWireNotify, and for every redirected send.
void vmmc_last(uint32_t src, const abi::WireHeader& h, bool placed);
// Redirections in progress from a lost peer end.
void vmmc_peer_lost(uint32_t peer);
// kOpRedirect from the export's owner; `result` as slot.h says.
abi::CqStatus vmmc_redirect(Slot& s, const abi::SqEntry& e, uint32_t& result);

}  // namespace lcp
