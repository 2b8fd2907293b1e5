// The VI Architecture in the firmware (abi/vi.h, DESIGN §8): per-slot VI
// tables, descriptor fetch from and status write-back to host memory,
// receive queues consumed as messages arrive, immediate data, RDMA write and
// read with memory handle + ptag + enable checks at the target, the three
// reliability levels, connection management between NICs (discriminator
// matching at the server's NIC, peer-to-peer), disconnect and flushing.
//
// The sending NIC moves a descriptor's data segments in packets of at most
// one MTU that never span a segment; the receiving NIC scatters them into the
// receive descriptor it took at the message's first packet. Every operation
// ends with the receiver's verdict (a refusal: kWireOpResult; success: the
// link ACK that covers it, abi::kWireAckOk, remote.h), so a send completes once
// its bytes are placed, at every reliability level; what a level changes is
// what an error at the receiver does (abi/slot.h kCqRemote*, host/vipl/SEMANTICS.md).
#pragma once

#include "lcp/slots.h"
#include "ulnic/abi/fabric.h"
#include "ulnic/abi/vi.h"

namespace lcp {

constexpr uint32_t kMaxViOps = 128;          // sends/RDMA in flight per NIC
constexpr uint32_t kMaxViResponders = 16;    // RDMA reads being answered per NIC
constexpr uint32_t kMaxViConns = 32;         // requests held per NIC: a listen took them, or peer-to-peer
constexpr uint32_t kMaxViListens = 32;       // ConnectWaits per NIC
constexpr uint32_t kViOwner = 0xffff'fff1u;  // link payload owner: connection messages
constexpr uint64_t kViOpFlag = 0x80;         // in op ids: a VI op, not a put
// Peers with connected VIs hear from us at least this often, so the link
// notices one that died (its unreachable deadline) even on an idle connection.
constexpr uint64_t kViKeepaliveUs = 1'000'000;
// Connection messages waiting for room on their peers' links (vi.cpp): at
// most kViConnBacklog; the process's connection operations wait at their SQ
// head while fewer than kViConnBacklogReserve entries are free, so only
// what the network makes us say can find it full (counter vi_conn_dropped).
constexpr uint32_t kViConnBacklog = 64;
constexpr uint32_t kViConnBacklogReserve = 16;

void vi_init(SlotTable& t);
// Does slot `s` have what `e` needs to start now (a free op for a post)?
bool vi_can_start(const abi::SqEntry& e);
// Runs one kOpVi* descriptor of slot `s`.
void vi_execute(SlotTable& t, Slot& s, const abi::SqEntry& e);
// Hands more of the slot's current VI operation to the link; true once all is sent.
bool vi_feed(SlotTable& t, Slot& s);
// RDMA read answers and connection messages waiting for link room. True if it did work.
bool vi_poll(SlotTable& t, uint64_t now);
// Connection messages waiting for link room (tests, diagnostics).
uint32_t vi_conn_waiting();

// Link upcalls (through remote.cpp).
void vi_deliver(uint32_t src, const abi::WireHeader& h, const uint8_t* payload);
void vi_result(uint32_t src, const abi::WireHeader& h);
// `src` says every send and RDMA write of ours to it whose last packet had
// a seq <= `seq` (and that it did not refuse) finished well (remote.h).
void vi_ok_through(uint32_t src, uint32_t seq);
// Direct placement (link::place_next): having delivered middle packet `h` of
// a VI send or RDMA write from `src`, where that operation's next bytes go --
// the rest of the receive segment they fall in, or of the RDMA target's
// registration -- as base + dst_addr, up to `hi`. False: the next packet
// takes vi_deliver().
bool vi_placement(uint32_t src, const abi::WireHeader& h, uint64_t& base, uint64_t& hi);
void vi_peer_lost(uint32_t peer);
bool vi_payload_valid(uint64_t serial);
// Slot k lost its process: its VIs disconnect, its requests go.
void vi_slot_detached(uint32_t slot);

}  // namespace lcp
