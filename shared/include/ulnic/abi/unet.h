// U-Net endpoints on the NIC (von Eicken, Basu, Buch, Vogels: "U-Net: A
// User-Level Network Interface for Parallel and Distributed Computing",
// SOSP 1995; host/unet/include/unet.h): what the U-Net library, the daemon
// and the firmware share beyond slot.h.
//
//   * A slot is one U-Net endpoint (the protection domain the paper's
//     endpoint is): the process configures it with kOpUnetEndpoint -- its
//     communication segment (registered, kAccessLocal | kAccessRemoteWrite)
//     and its queue area (registered, kAccessLocal): UnetHostWords,
//     UnetNicWords, the receive queue, the free queue. The send queue is the
//     slot's SQ (kOpUnetSend, kOpUnetSendInline); a send completes in the CQ
//     once the receiving NIC has had the whole message (delivered or dropped:
//     U-Net tells the sender nothing more).
//   * Channels are set up by the node daemon only (kCtrlUnetChannel): channel
//     c of slot k sends to (remote node, remote slot) with tx_tag, and takes
//     messages that carry rx_tag from exactly that remote endpoint. The rx
//     tag is unique on its NIC: the receiving NIC demultiplexes on it alone.
//     Anything else -- an unknown tag, a tag from the wrong sender -- is
//     dropped and counted (drops_bad_tag of the endpoint the packet names,
//     and the NIC's unet_bad_tag).
//   * No flow control, as in the paper: a message that finds the receive
//     queue full, or (larger than kUnetInline) the free queue empty, is
//     dropped and counted. A message of at most kUnetInline bytes travels in
//     its receive descriptor; a larger one goes straight into the buffer the
//     NIC takes from the free queue at its first packet (direct placement).
//     A buffer too small for the message, or outside the segment, comes back
//     in a descriptor flagged kUnetRxDropped (counted in drops_too_long), so
//     the process can post it again.
//   * U-Net/MM (Welsh, Basu, von Eicken: "Incorporating Memory Management
//     into User-Level Network Interfaces", 1997): with kSqUnetMm the segment
//     is the process's own memory at dst_addr (no registration, dst_key 0),
//     and the NIC translates it a page (kUnetPage) at a time through a TLB
//     of its own (kUnetTlbEntries, shared by the NIC's endpoints, keyed by
//     slot and virtual page). A frame is a page of the slot's heap: the
//     library moves a page into the slot (copies it, maps the slot page over
//     it, as registration does) and tells the NIC through the fill ring in
//     the queue area (UnetTlbFill; an unmap before it gives a frame back,
//     and waits until fills_taken covers it). A send whose pages the TLB
//     does not all hold waits at the head of the SQ; the NIC posts
//     kEqUnetTlbMiss for the first missing page (again only after the host
//     gave fills since) and tries again when the host rings. A message whose
//     free buffer misses is dropped and counted (drops_tlb_miss: U-Net has
//     no flow control), and the miss is posted, so the next one finds it.
//     The NIC checks every fill (a frame inside the slot's heap, page
//     aligned); it can map a process's segment only onto its own slot.
#pragma once

#include "ulnic/abi/types.h"

namespace ulnic::abi {

constexpr uint32_t kMaxUnetChannels = 64;          // per NIC (the tag table)
constexpr uint32_t kMaxUnetChannelsPerSlot = 32;   // one process cannot take the whole table
constexpr uint32_t kUnetMaxQueue = 4096;           // entries of a receive or free queue
constexpr uint32_t kUnetInline = 40;               // bytes carried in a receive descriptor
constexpr uint32_t kUnetMaxMessage = 65536;        // AAL5's largest PDU, U-Net/ATM's limit

// The queue area: these two cache lines, then the receive queue
// (UnetRxDesc[rx_entries]), then the free queue (UnetFreeDesc[free_entries]).
// Every index counts up forever from 0 at kOpUnetEndpoint (the NIC starts
// both queues empty and its words at zero) and is masked on use.
struct UnetHostWords {        // written only by the process
  uint64_t rx_consumed;       // receive descriptors the process is done with
  uint64_t free_produced;     // free-queue entries posted
  uint64_t fills_produced;    // U-Net/MM: fill-ring entries posted
  uint64_t reserved[5];
};
ULNIC_ABI_CHECK_SIZE(UnetHostWords, 64);

struct UnetNicWords {         // written only by the NIC
  uint64_t free_taken;        // free-queue entries the NIC has taken
  uint64_t delivered;         // messages published in the receive queue
  uint64_t drops_rx_full;     // dropped: receive queue full
  uint64_t drops_free_empty;  // dropped: free queue empty
  uint64_t drops_too_long;    // dropped: longer than the buffer, or a bad buffer
  uint64_t drops_bad_tag;     // dropped: a tag no channel of ours takes from that sender
  uint64_t reserved[2];
};
ULNIC_ABI_CHECK_SIZE(UnetNicWords, 64);

enum UnetRxFlags : uint8_t {
  kUnetRxInline = 1u << 0,    // the message is in `data`, no buffer was taken
  kUnetRxDropped = 1u << 1,   // no message: `offset`/`buf_len` give a taken buffer back
};

struct UnetRxDesc {
  uint32_t seq;               // NIC-written last (release): entry number + 1 (mod 2^32)
  uint16_t channel;           // the receiving channel
  uint8_t flags;              // UnetRxFlags
  uint8_t reserved0;
  uint32_t length;            // message bytes
  uint32_t offset;            // not inline: the buffer (segment offset) holding them
  uint32_t buf_len;           // not inline: the buffer's length as posted
  uint8_t data[kUnetInline];  // inline: the message
  uint32_t reserved1;
};
ULNIC_ABI_CHECK_SIZE(UnetRxDesc, 64);

struct UnetFreeDesc {
  uint32_t offset;            // a buffer in the segment
  uint32_t length;
};
ULNIC_ABI_CHECK_SIZE(UnetFreeDesc, 8);

constexpr uint64_t unet_area_bytes(uint32_t rx_entries, uint32_t free_entries) {
  return 128 + uint64_t(rx_entries) * sizeof(UnetRxDesc) + uint64_t(free_entries) * sizeof(UnetFreeDesc);
}

// ---- U-Net/MM: after the free queue, UnetMmWords, then the fill ring
// (UnetTlbFill[kUnetFillEntries]).
constexpr uint32_t kUnetPage = 4096;
constexpr uint32_t kUnetTlbEntries = 256;  // per NIC (direct mapped)
constexpr uint32_t kUnetFillEntries = 64;
constexpr uint64_t kUnetUnmap = ~0ull;     // UnetTlbFill.frame: forget the page
// A message's pages (kUnetMaxMessage bytes from any offset).
constexpr uint32_t kUnetMaxPages = kUnetMaxMessage / kUnetPage + 1;

struct UnetMmWords {          // written only by the NIC
  uint64_t fills_taken;       // fill-ring entries the NIC has carried out (or refused)
  uint64_t tlb_hits;          // this endpoint's pages the TLB translated
  uint64_t tlb_misses;        // ... it did not hold (each posted as kEqUnetTlbMiss)
  uint64_t drops_tlb_miss;    // messages dropped: a page of their free buffer was not mapped
  uint64_t fills_refused;     // fills naming a frame outside the slot's heap, or unaligned
  uint64_t reserved[3];
};
ULNIC_ABI_CHECK_SIZE(UnetMmWords, 64);

struct UnetTlbFill {
  uint64_t vpage;             // virtual page number (address / kUnetPage) in the segment
  uint64_t frame;             // slot offset of the page's frame, or kUnetUnmap
};
ULNIC_ABI_CHECK_SIZE(UnetTlbFill, 16);

// Where the U-Net/MM words and the fill ring are in an endpoint's area: one
// definition for the NIC and the library.
constexpr uint64_t unet_mm_words_offset(uint32_t rx_entries, uint32_t free_entries) {
  return unet_area_bytes(rx_entries, free_entries);
}
constexpr uint64_t unet_fill_ring_offset(uint32_t rx_entries, uint32_t free_entries) {
  return unet_mm_words_offset(rx_entries, free_entries) + sizeof(UnetMmWords);
}
constexpr uint64_t unet_mm_area_bytes(uint32_t rx_entries, uint32_t free_entries) {
  return unet_fill_ring_offset(rx_entries, free_entries) + kUnetFillEntries * sizeof(UnetTlbFill);
}

// kCtrlUnetChannel / kCtrlUnetUnchannel arguments (CtrlCommand.unet), and
// a process's kReqUnetChannel / kReqUnetUnchannel (OwnerRequest.unet).
struct UnetChannelArgs {
  uint32_t remote_node;
  uint32_t remote_slot;
  uint32_t tx_tag;            // carried by messages sent on the channel (nonzero)
  uint32_t rx_tag;            // carried by messages it takes (nonzero, unique per NIC)
  uint32_t channel;           // kCtrlUnetUnchannel, kReqUnetUnchannel: which one
  uint32_t reserved[11];
};
ULNIC_ABI_CHECK_SIZE(UnetChannelArgs, 64);

}  // namespace ulnic::abi
