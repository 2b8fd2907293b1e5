// Active Messages on the NIC (abi/am.h): per-slot endpoints with a tag, a
// receive ring in host memory and a segment; arriving messages are checked
// (endpoint, tag, ring room, segment bounds) at their first packet, written
// into a ring entry (the payload of a Long straight into the segment) and
// published after their last. Messages travel as kWireOpAm operations on
// remote.cpp's put machinery (so the link's reliability, verdicts and the
// same-NIC path come with it).
#pragma once

#include "lcp/slots.h"
#include "ulnic/abi/am.h"
#include "ulnic/abi/fabric.h"

namespace lcp {

constexpr uint32_t kMaxAmAssemblies = 32;  // messages arriving at once, per NIC
// Peer endpoints an endpoint may await replies from at once (abi/am.h):
// more than the ranks of any job here, each of whose endpoints is one peer.
constexpr uint32_t kAmPeers = 32;

void am_init(SlotTable& t);
// kOpAmEndpoint: configures (or frees) one of the slot's endpoints.
abi::CqStatus am_configure(Slot& s, const abi::SqEntry& e);
// kOpAmSend: checks the descriptor and the prefix it points at; the NIC
// address of its bytes in `src`.
abi::CqStatus am_check_send(const Slot& s, const abi::SqEntry& e, uint64_t& src);
// A kOpAmSend that start checked, whose bytes are at NIC address `src`:
// if it is a request that expects a reply (abi/am.h), its sending endpoint
// now awaits one more reply from its destination endpoint; `ticket` names
// that count (0: none taken). kCqAmCongestion if the endpoint awaits
// replies from kAmPeers others already (the host tries again later, as
// for a full ring).
abi::CqStatus am_count_request(const Slot& s, const abi::SqEntry& e, uint64_t src, uint64_t& ticket);
// The message of `ticket` (taken by slot `slot` for node `dst_node`, slot
// `dst_slot`) completed with `status`. Refused by the destination NIC
// (kCqAm*), nothing was written there and no reply will come: the count
// goes. Any other failure keeps it (unreachable: the peer's counts go with
// the peer, am_peer_lost; no verdict: the message may have arrived, and its
// reply may still come).
void am_send_done(uint32_t slot, uint64_t ticket, uint32_t dst_node, uint32_t dst_slot, abi::CqStatus status);
// One arriving packet of a kWireOpAm operation from node `src`: kCqOk or the
// refusal (nothing of a refused message is written).
uint8_t am_place(uint32_t src, const abi::WireHeader& h, const uint8_t* payload);
// Its last packet has been placed (`ok`: no refusal): publish the entry.
void am_last(uint32_t src, const abi::WireHeader& h, bool ok);
// Direct placement (link::place_next) of a Long's payload: having placed
// packet `h` from `src`, where the operation's next bytes go if they are all
// payload -- byte `off` of the operation at base + off, up to `hi` -- through
// the segment translation just checked. False: the next packet takes
// am_place() (the message, a refusal, no Long).
bool am_placement(uint32_t src, const abi::WireHeader& h, uint64_t& base, uint64_t& hi);
void am_peer_lost(uint32_t peer);
void am_slot_detached(uint32_t slot);

}  // namespace lcp
