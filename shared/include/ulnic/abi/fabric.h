// The cluster fabric (DESIGN §6): one shared region mapped by every NIC as
// the BAR of its ivshmem-doorbell device, created by the fabric server.
//
//   0                FabricHeader (geometry; written once by the fabric server)
//   kPortAreaOffset  PortArea[ports]: one cache line per port, written only by
//                    that port's owner (its NIC, or the switch)
//   rings_offset     ring[src][dst] for src, dst < ports: RingControl + Packet[capacity]
//
// ring[i][j] is written only by port i and read only by port j (SPSC). With a
// switch, the switch is port `switch_port` (= ports - 1): NIC i then sends
// everything on ring[i][switch] and receives on ring[switch][i], and the
// switch moves packets between them. A NIC learns the mode from its boot
// config and cannot otherwise tell the difference.
#pragma once

#include "ulnic/abi/ring.h"

namespace ulnic::abi {

constexpr uint32_t kFabricMagic = fourcc('U', 'F', 'A', 'B');
constexpr uint32_t kMtu = 4096;              // payload bytes per packet
constexpr uint32_t kNoSwitch = 0xffffffff;

// ---------------------------------------------------------------- the wire

enum PacketType : uint8_t {
  kPktData = 1,     // carries payload and an operation header
  kPktAck = 2,      // cumulative acknowledgement only
};

// Fields every packet carries. Through a switch (a lossy wire) the checksum
// covers the header (with the checksum field zero) and, through its sums,
// the payload (wire_sum.h); a corrupted packet is dropped and counted, and
// the link layer's retransmission repairs the loss. On the direct fabric it
// is zero and unchecked: see wire_sum.h. Either way every field is checked
// for sense before use (addressing, lengths, keys, bounds).
struct WireHeader {
  uint32_t magic;        // kWireMagic
  uint8_t type;          // PacketType
  uint8_t flags;
  uint16_t payload_len;  // <= kMtu
  uint16_t src;          // sending NIC (node id)
  uint16_t dst;          // receiving NIC
  uint32_t seq;          // per (src, dst) data sequence number, from 1
  uint32_t ack;          // cumulative: every data seq <= ack from dst arrived
  uint32_t checksum;     // CRC-32C of header (this field 0) and WireSum(payload); 0 on the direct fabric
  // Operation (data packets): where the payload goes at the receiver.
  uint8_t op;            // WireOp
  uint8_t status;        // kWireOpResult: the receiver's verdict
  uint16_t dst_slot;
  uint32_t dst_key;
  uint64_t dst_addr;     // receiver-side virtual address of this packet's bytes
  uint64_t op_id;        // sender's operation handle (echoed in results)
  uint32_t src_incarnation;  // random per boot of the sender
  uint32_t dst_incarnation;  // the receiver's, as the sender knows it (0: unknown)
  uint32_t op_length;    // kWireOpPut/Send: total bytes of the operation
  uint16_t src_slot;     // kWireOpSend, kWireOpVi*: the sending slot
  uint16_t vi;           // kWireOpVi*: the target VI (index in dst_slot)
};
ULNIC_ABI_CHECK_SIZE(WireHeader, 64);
constexpr uint32_t kWireMagic = fourcc('U', 'W', 'I', '1');

enum WireOp : uint8_t {
  kWireOpNone = 0,       // sequence filler (a retransmission whose source is gone)
  kWireOpPut = 1,        // write payload at (dst_slot, dst_key, dst_addr)
  kWireOpResult = 2,     // receiver -> sender: operation op_id finished with `status` (a
                         // refusal; operations that finish well are kWireOpOkThrough's)
  kWireOpSend = 3,       // VMMC: write payload at offset dst_addr of export dst_key
  kWireOpMail = 4,       // daemon mail: payload is MailMessage.data for the daemon
  // VIs (firmware/lcp/vi.h): `status` = the sending VI's index.
  kWireOpViSend = 5,     // a send's bytes: dst_addr = offset in the message,
                         // dst_key = immediate data (kWireImmediate, last packet)
  kWireOpViWrite = 6,    // RDMA write: dst_addr = remote VA, dst_key = its memory handle
  kWireOpViReadReq = 7,  // RDMA read request: dst_addr/dst_key as for a write, op_length bytes
  kWireOpViReadResp = 8, // RDMA read data back: dst_addr = offset in the read
  kWireOpViConn = 9,     // connection management: payload is a ViConnMessage
  kWireOpAm = 10,        // an AM message (abi/am.h): dst_addr = offset in the operation's
                         // bytes (AmPrefix first), op_length = their total
  kWireOpUnet = 11,      // a U-Net message (abi/unet.h): dst_key = its tag, dst_slot = the
                         // endpoint its channel names, dst_addr = offset in the message
  kWireOpOkThrough = 12, // receiver -> sender: every operation (put, VMMC send, AM, U-Net,
                         // VI send or RDMA write) whose last packet had a seq <= dst_addr
                         // (mod 2^32) and was not refused by a kWireOpResult sent before
                         // this packet finished well. Sent only while a refusal to that
                         // peer waits for room on the link (queued behind it); otherwise
                         // the link's ACK says the same (kWireAckOk).
};

enum WireFlags : uint8_t {
  kWireLast = 1u << 0,   // last packet of an operation: the receiver answers with a verdict
  kWireNotify = 1u << 1, // kWireOpSend, last packet: notify the export's owner
  kWireFirst = 1u << 2,  // kWireOpSend, kWireOpViSend: first packet of the send
  kWireImmediate = 1u << 3,  // kWireOpViSend: dst_key carries immediate data
  kWireRdmaImm = 1u << 4,    // kWireOpViSend: ends an RDMA write with immediate data
  kWireAbort = 1u << 5,      // kWireOpSend/kWireOpAm, with kWireLast and no payload: the
                             // sender's process went away mid-operation; drop what came
  kWireTrace = 1u << 6,      // every packet of a kSqTrace operation: the receiver stamps
                             // the last one in the destination slot's SlotTrace
  // The link's, on any packet: its `ack` is also an OK verdict. Every
  // operation of the packet's receiver whose last packet had a seq <= ack
  // (mod 2^32) and that the packet's sender did not refuse (kWireOpResult)
  // finished well -- as a kWireOpOkThrough through `ack` would say, without
  // a sequenced packet of its own. Set only where every refusal for those
  // operations went before the packet: on a data packet (first sent or sent
  // again) with a seq above every refusal to that peer, never a refusal
  // itself (it applies before the packet is delivered: every packet before
  // it was), and on a standalone ACK, whose `seq` then holds the sender's
  // newest data seq (it applies once that one is delivered); on none while
  // a refusal waits for room on the link.
  kWireAckOk = 1u << 7,
  // On a standalone ACK (kWireLast's bit, which an ACK has no use for): its
  // sender has operations whose last packets were acknowledged without
  // their OK (the ACK that said it was lost): the receiver answers with an
  // ACK at once, which says OK as kWireAckOk allows.
  kWireOkProbe = kWireLast,
};

struct Packet {
  WireHeader h;
  uint8_t payload[kMtu];
};
ULNIC_ABI_CHECK_SIZE(Packet, 64 + kMtu);

// --------------------------------------------------------------- geometry

struct PortArea {
  uint32_t rx_asleep;    // 1: this port sleeps; a sender rings its fabric vector
  uint32_t peer_id;      // fabric peer id to ring (0: the port number; the
                         // switch, an anonymous peer, publishes its own)
  uint64_t heartbeat;    // bumped by the port's owner now and then
  uint64_t pad1[6];
};
ULNIC_ABI_CHECK_SIZE(PortArea, 64);

struct FabricHeader {
  uint32_t magic;          // kFabricMagic
  uint32_t abi_version;
  uint32_t ports;          // nodes (+1 with a switch)
  uint32_t switch_port;    // kNoSwitch, or the switch's port
  uint32_t ring_capacity;  // packets per ring (power of two)
  uint32_t pad;
  uint64_t ring_stride;    // bytes from one ring to the next
  uint64_t rings_offset;
  uint64_t size;           // bytes the geometry needs
  uint8_t reserved[4096 - 48];
};
ULNIC_ABI_CHECK_SIZE(FabricHeader, 4096);

constexpr uint64_t kPortAreaOffset = 4096;
constexpr uint32_t kMaxPorts = 65;  // 64 NICs and a switch

constexpr uint64_t ring_stride(uint32_t capacity) {
  // Not a power of two on purpose (DESIGN §7.3: QEMU's direct-mapped soft
  // TLB punishes buffers at power-of-two distances).
  return (sizeof(RingControl) + uint64_t(capacity) * sizeof(Packet) + 63) & ~uint64_t(63);
}

// Packets per ring when the cluster does not say. Large rings are fast:
// the two NICs run on different host cores, and a ring entry the receiver
// read a moment ago is still in its core's cache when the sender writes the
// entry again, so every store of the sender's copy waits for the line to
// come back (measured, issue 5: a 4 KiB copy into a 16-entry ring cost the
// sender ~3x its copy within one core; into a 256-entry ring, ~1.1x). The
// matrix has ports^2 rings, so the capacity shrinks with the cluster to keep
// the fabric within kFabricRingBudget of address space (memory is taken only
// by rings in use: the fabric file is sparse): 256 up to 22 ports, 16 at 65.
constexpr uint64_t kFabricRingBudget = 512ull << 20;
constexpr uint32_t kMinDefaultRingCapacity = 16;
constexpr uint32_t kMaxDefaultRingCapacity = 256;
constexpr uint32_t default_ring_capacity(uint32_t ports) {
  uint32_t capacity = kMaxDefaultRingCapacity;
  while (capacity > kMinDefaultRingCapacity && uint64_t(ports) * ports * ring_stride(capacity) > kFabricRingBudget)
    capacity /= 2;
  return capacity;
}
static_assert(default_ring_capacity(17) == 256 && default_ring_capacity(65) == 16);
constexpr uint64_t rings_offset(uint32_t ports) {
  return (kPortAreaOffset + uint64_t(ports) * sizeof(PortArea) + 4095) & ~uint64_t(4095);
}
constexpr uint64_t fabric_bytes(uint32_t ports, uint32_t capacity) {
  return rings_offset(ports) + uint64_t(ports) * ports * ring_stride(capacity);
}
// The power-of-two BAR size that holds the geometry.
constexpr uint64_t fabric_bar_size(uint32_t ports, uint32_t capacity) {
  uint64_t need = fabric_bytes(ports, capacity), size = 1u << 20;
  while (size < need) size <<= 1;
  return size;
}
constexpr uint64_t ring_offset(uint32_t ports, uint32_t capacity, uint32_t src, uint32_t dst) {
  return rings_offset(ports) + (uint64_t(src) * ports + dst) * ring_stride(capacity);
}

}  // namespace ulnic::abi
