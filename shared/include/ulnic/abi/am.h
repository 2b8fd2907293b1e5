// Active Messages on the NIC (DESIGN §8, §9; host/am/transport_native.cpp):
// what the AM library and the firmware share beyond slot.h.
//
//   * A slot has kMaxAmEndpoints AM endpoints in the firmware. The process
//     configures one with kOpAmEndpoint: its tag, its receive queue (a ring
//     in the process's registered memory) and its segment (registered with
//     kAccessRemoteWrite).
//   * kOpAmSend sends `length` bytes of registered memory: an AmPrefix, the
//     message (the AM layer's packet, at most kAmMaxMessage bytes) and, for a
//     Long, its payload -- after the message padded to 8 bytes (am_long_start),
//     so that the NIC moves it in words. The receiving NIC decides at the first packet: the
//     endpoint exists, a request's tag matches (AM_ALL 1 takes every tag,
//     AM_NONE 0 none), the ring has a free entry (the credit), a Long fits
//     the segment. Then it writes the message into the ring entry and the
//     payload straight into the segment, and publishes the entry after the
//     last byte. A refusal writes nothing and comes back to the sender as
//     the operation's CQ status (kCqAm*, or kCqRemoteBadSlot when the
//     destination slot has no process), which the library turns into a
//     returned message.
//   * Replies are checked too (AM-2: a request gets at most one reply): an
//     endpoint takes a reply only from an endpoint it has sent more requests
//     than it has taken replies from. Its NIC counts them per peer endpoint
//     (at most kAmPeers of the firmware's at once): a request that expects a
//     reply (kAmRequest without kAmNoReply) counts when it starts, and is
//     uncounted if the destination NIC refuses it; the first piece of a reply
//     takes the count back (and allows the pieces it announces, `pieces`).
//     Any other reply is refused with kCqAmBadTag, like a request with the
//     wrong tag. A request that would need a count its endpoint has no room
//     for is not sent: kCqAmCongestion, as for a full ring (the host tries
//     again; replies coming in free the room). One-way messages (FM, and
//     notices that answer a reply) go as requests with kAmNoReply: checked
//     by tag, uncounted, and no reply to them is taken.
//   * A message larger than a ring entry goes as several kOpAmSends, its
//     pieces: the first says how many there are (`pieces`), the others
//     carry kAmPiece (a request's are tag-checked and not counted; a reply's
//     are taken while its first piece's allowance lasts, and asked to come
//     again, kCqAmCongestion, if they overtook a first piece that is itself
//     coming again).
//   * The process consumes entries in order and tells the NIC how far it got
//     (AmRingControl.consumed); the NIC never reuses an unconsumed entry.
//     Each publication also posts a kEqAmArrival event, the wake-up of a
//     process asleep on its slot.
#pragma once

#include "ulnic/abi/types.h"

namespace ulnic::abi {

constexpr uint32_t kMaxAmEndpoints = 8;        // per slot
constexpr uint32_t kAmMaxMessage = 4288;       // the AM layer's packet: header + 16 args + 4 KiB medium
constexpr uint32_t kAmMaxRingEntries = 1024;

// Where a Long's payload starts in a kOpAmSend's bytes: after the prefix and
// the message, padded to 8 bytes (the NIC copies 8-byte words only between
// addresses that agree modulo 8; a byte loop moved 4 KiB in ~7 us, issue 19).
constexpr uint64_t am_long_start(uint32_t msg_len) { return 64 + ((uint64_t(msg_len) + 7) & ~uint64_t(7)); }
// The bytes of a kOpAmSend: a message alone has no padding.
constexpr uint64_t am_send_bytes(uint32_t msg_len, uint32_t long_len) {
  return long_len ? am_long_start(msg_len) + long_len : 64 + uint64_t(msg_len);
}
constexpr uint32_t kAmMaxLong = 1u << 20;      // AM_MaxLong()

// The first bytes of every kOpAmSend payload (written by the sender).
struct AmPrefix {
  uint64_t tag;          // the tag the sender has for the destination endpoint
  uint32_t msg_len;      // message bytes after this prefix (1..kAmMaxMessage)
  uint32_t long_len;     // Long payload bytes after the message (0: none)
  uint32_t long_offset;  // where in the destination's segment they go
  uint8_t dst_ep;        // destination endpoint (index in the destination slot)
  uint8_t src_ep;        // sending endpoint (index in the sending slot)
  uint8_t flags;         // AmPrefixFlags
  uint8_t pieces;        // a message's first piece: kOpAmSends it takes in all (0 or 1: one)
  uint8_t reserved[40];  // 0
};
ULNIC_ABI_CHECK_SIZE(AmPrefix, 64);
static_assert(am_long_start(0) == sizeof(AmPrefix));

enum AmPrefixFlags : uint8_t {
  kAmRequest = 1u << 0,  // a request: tag-checked (replies answer a request the destination sent)
  kAmNoReply = 1u << 1,  // with kAmRequest: one-way, no reply to it is taken (not counted)
  kAmPiece = 1u << 2,    // not the first piece of its message (see `pieces`)
};
constexpr uint8_t kAmMaxPieces = 16;  // pieces of one message: a 65000-byte medium in 4 KiB pieces

// The receive ring: this control block, then `entries` entries of
// kAmEntryBytes each (an AmRxEntry, then the message).
struct AmRingControl {
  uint64_t consumed;     // host-written: entries the process is done with
  uint64_t reserved[7];
};
ULNIC_ABI_CHECK_SIZE(AmRingControl, 64);

struct AmRxEntry {
  uint32_t seq;          // NIC-written last (release): entry number + 1 (mod 2^32)
  uint32_t len;          // message bytes that follow (0: nothing, skip it)
  uint16_t src_node;
  uint16_t src_slot;
  uint8_t src_ep;
  uint8_t flags;         // AmPrefixFlags of the message
  uint16_t reserved0;
  uint32_t long_len;     // a Long's payload, now in the segment
  uint32_t long_offset;
  uint8_t reserved[40];
};
ULNIC_ABI_CHECK_SIZE(AmRxEntry, 64);
constexpr uint32_t kAmEntryBytes = sizeof(AmRxEntry) + kAmMaxMessage;  // 4352
static_assert(kAmEntryBytes % 64 == 0);

}  // namespace ulnic::abi
