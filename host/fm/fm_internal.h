// FM 2.x internals shared by the library's files (host/fm/SEMANTICS.md).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "fm.h"
#include "ulnic/abi/am.h"
#include "ulnic/abi/slot.h"

namespace ulnic::fm {

namespace abi = ::ulnic::abi;

// The FM packet header, first in every AM message FM sends. Host byte order
// (little-endian on every machine of a cluster here). Untrusted on receipt.
struct PacketHeader {
  uint16_t magic;    // kMagic
  uint8_t version;   // kVersion
  uint8_t kind;      // PacketKind
  uint16_t sender;   // the sender's FM node id (checked against its NIC address)
  uint16_t handler;  // kData: handler id at the receiver
  uint32_t msg_id;   // kData: the sender's message number to this receiver (0, 1, ...)
  uint32_t flags;    // PacketFlags
  uint32_t offset;   // kData: where this packet's bytes start in the message
  uint32_t length;   // kData: the length bound given to FM_begin_message
  uint32_t payload;  // message bytes after the header
  uint32_t credit;   // data packets of the receiver the sender has consumed (cumulative, mod 2^32)
};
static_assert(sizeof(PacketHeader) == 32);

constexpr uint16_t kMagic = 0x4d46;  // "FM"
constexpr uint8_t kVersion = 3;  // 3: Long packets of up to 128 KiB (chunks by the job's size)
enum PacketKind : uint8_t { kData = 1, kCredit = 2, kFin1 = 3, kFin2 = 4 };
enum PacketFlags : uint32_t { kFirst = 1u << 0, kLast = 1u << 1 };

// A packet's payload: up to kInlinePayload bytes ride in its AM message, read
// in place in the receiver's ring entry; a bigger one is the message's AM
// Long, placed by the receiving NIC straight into a chunk of the receiver's
// segment (fm.cpp, "Long packets"). A job's Long packets carry up to
// kMinLongPayload .. kPacketPayload bytes, by its number of ranks.
constexpr uint32_t kInlinePayload = abi::kAmMaxMessage - sizeof(PacketHeader);
constexpr uint32_t kPacketPayload = 128u << 10;
constexpr uint32_t kMinLongPayload = 32u << 10;
static_assert(kPacketPayload == FM_PACKET_PAYLOAD && kMinLongPayload > kInlinePayload);
static_assert(kPacketPayload <= abi::kAmMaxLong);
// Where a packet's payload starts in its send buffer: after the AmPrefix and
// the header, which is where the NIC takes a Long's payload from too.
constexpr size_t kPayloadAt = sizeof(abi::AmPrefix) + sizeof(PacketHeader);
static_assert(abi::am_long_start(sizeof(PacketHeader)) == kPayloadAt);

// Where a rank receives: its NIC, slot and AM endpoint, and the tag the
// endpoint takes (random per run: only the job's members know it).
struct EndpointName {
  uint32_t node = 0, slot = 0, ep = 0;
  uint64_t tag = 0;
};

// bootstrap.cpp: the job from the environment and the name exchange.
struct Job {
  uint32_t rank = 0, nprocs = 0;
  std::string dir;
};
bool read_job(Job& job, std::string& err);
// A tag no one can guess: neither AM_NONE (0) nor AM_ALL (1).
uint64_t random_tag();
// Publishes our name, locked while this process lives (`lock_fd`, to keep open).
bool publish_name(const Job& job, const EndpointName& mine, int& lock_fd, std::string& err);
// False once `rank`'s process is gone (its lock on its name file dropped).
bool rank_alive(const Job& job, uint32_t rank);
// Every rank's name; fails on a malformed file, two ranks naming one
// endpoint, or a file for our rank that is not `mine`.
bool collect_names(const Job& job, const EndpointName& mine, std::vector<EndpointName>& names, std::string& err);

}  // namespace ulnic::fm
