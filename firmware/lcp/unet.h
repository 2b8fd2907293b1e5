// U-Net endpoints on the NIC (abi/unet.h): a slot configured as an
// endpoint (segment, queue area), channels set up by the daemon (a tag
// table per NIC), sends from the segment or inline, and arrivals that take
// a buffer from the free queue at their first packet and are placed straight
// into it. Messages travel as kWireOpUnet operations on remote.cpp's put
// machinery (the link's reliability, verdicts and the same-NIC path come
// with it). No flow control: what does not fit is dropped and counted.
#pragma once

#include "lcp/slots.h"
#include "ulnic/abi/fabric.h"
#include "ulnic/abi/unet.h"

namespace lcp {

constexpr uint32_t kMaxUnetAssemblies = 32;  // messages arriving at once, per NIC

void unet_init(SlotTable& t);
// kOpUnetEndpoint: configures (or, kSqUnetClose, closes) the slot's endpoint.
abi::CqStatus unet_configure(Slot& s, const abi::SqEntry& e);
// kCtrlUnetChannel / kCtrlUnetUnchannel (the daemon's): value = the channel id.
abi::CtrlStatus unet_control(SlotTable& t, const abi::CtrlCommand& cmd, uint64_t& value);
// Where a kOpUnetSend* of slot `s` goes: its channel's node, slot and tag,
// and (kOpUnetSend) the NIC address of its bytes in the segment.
// U-Net/MM (abi/unet.h): the NIC address of every page instead, byte 0 at
// page_off in the first.
struct UnetRoute {
  uint32_t node, slot, tag;
  uint64_t src;
  uint32_t npages, page_off;  // npages 0: the bytes are contiguous from src
  uint64_t pages[abi::kUnetMaxPages];
};
abi::CqStatus unet_check_send(const Slot& s, const abi::SqEntry& e, bool inline_payload, UnetRoute& route);
// Whether descriptor `e` at the head of slot `s`'s SQ may start now: false
// for a U-Net/MM send whose pages the TLB does not all hold (the first
// missing one is posted as kEqUnetTlbMiss; s.unet_waiting says it waits).
bool unet_can_start(Slot& s, const abi::SqEntry& e);
// Carries out the fills the slot's process posted (U-Net/MM; a look at one
// word otherwise), and whether it has posted any not yet carried out.
void unet_take_fills(Slot& s);
bool unet_fills_waiting(const Slot& s);
// One arriving packet of a kWireOpUnet operation from node `src`. Always
// kCqOk: the sender learns nothing of drops (U-Net), the receiver counts them.
uint8_t unet_place(uint32_t src, const abi::WireHeader& h, const uint8_t* payload);
// Its last packet has been placed (`ok`: the sender did not abort it).
void unet_last(uint32_t src, const abi::WireHeader& h, bool ok);
// Direct placement (link::place_next): having placed packet `h` from `src`,
// where the message's following bytes go (byte `off` at base + off, up to `hi`).
bool unet_placement(uint32_t src, const abi::WireHeader& h, uint64_t& base, uint64_t& hi);
void unet_peer_lost(uint32_t peer);
void unet_slot_detached(uint32_t slot);

}  // namespace lcp
