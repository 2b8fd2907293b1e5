// The VI Architecture on the NIC (DESIGN §8, APIS.md "VIPL"): what libvipl
// and the firmware share beyond slot.h.
//
//   * VI descriptors live in the process's registered memory, in the VIPL
//     1.0 layout (vipl.h's VIP_DESCRIPTOR; host/vipl checks the two agree).
//     A post names one by virtual address and memory handle; the firmware
//     copies it into SRAM when it starts on it, checks every segment
//     against the registrations (memory handle, ptag, bounds), and writes
//     Length, ImmediateData and last Status back when it is done.
//   * Each slot has a table of kMaxVis VIs in the firmware. The process
//     creates and destroys its own; only the NICs connect them, after a
//     handshake between the two NICs (a process cannot point a VI at
//     somebody else's), and a VI accepts packets only from its peer.
//   * Connection requests are matched by discriminator at the server's NIC:
//     a client/server request that finds no listen for its discriminator is
//     answered at once (kCqViCancelled; VIPL clients ask again), a
//     peer-to-peer request waits there for the other side's.
//
// Descriptor posts (kOpViPostSend/Recv) complete in the CQ when the
// descriptor is done (result = the VI index, user_data = the descriptor's
// address); the descriptor's Status word is the truth, the CQE the wake-up. The firmware keeps a CQ entry in reserve
// for every posted descriptor, so a completion is never lost.
#pragma once

#include "ulnic/abi/types.h"

namespace ulnic::abi {

constexpr uint32_t kMaxVis = 64;              // per slot
constexpr uint32_t kViQueueDepth = 256;       // receive descriptors posted per VI
constexpr uint32_t kViMaxSegments = 16;       // after the control segment
constexpr uint32_t kViMaxDiscriminator = 64;  // bytes

// ------------------------------------------------ the descriptor (VIPL 1.0)

struct ViControlSegment {
  uint64_t next;           // Next: not used by the NIC (posts name descriptors)
  uint32_t next_handle;
  uint16_t seg_count;      // segments after this one (address segment included)
  uint16_t control;        // ViControl
  uint32_t reserved;
  uint32_t immediate;      // ImmediateData
  uint32_t length;         // Length: sends, the total; receives, what arrived
  uint32_t status;         // ViStatus, written last by the NIC
};
ULNIC_ABI_CHECK_SIZE(ViControlSegment, 32);

struct ViDataSegment {     // also the address segment: {Data, Handle, Reserved}
  uint64_t data;           // virtual address
  uint32_t handle;         // memory handle
  uint32_t length;         // data segment: bytes; address segment: reserved
};
ULNIC_ABI_CHECK_SIZE(ViDataSegment, 16);

enum ViControl : uint16_t {
  kViCtlOpSendRecv = 0x0,
  kViCtlOpRdmaWrite = 0x1,
  kViCtlOpRdmaRead = 0x2,
  kViCtlOpMask = 0x3,
  kViCtlImmediate = 0x4,
  kViCtlQueueFence = 0x8,
  kViCtlReserved = 0xfff0,
};

enum ViStatus : uint32_t {
  kViStDone = 0x1,
  kViStFormatError = 0x2,
  kViStProtectionError = 0x4,
  kViStLengthError = 0x8,
  kViStPartialError = 0x10,
  kViStFlushed = 0x20,
  kViStTransportError = 0x40,
  kViStRdmaProtError = 0x80,
  kViStRemoteDescError = 0x100,
  kViStOpSend = 0x0,
  kViStOpReceive = 0x10000,
  kViStOpRdmaWrite = 0x20000,
  kViStOpRemoteRdmaWrite = 0x30000,
  kViStOpRdmaRead = 0x40000,
  kViStImmediate = 0x80000,
};

enum ViReliability : uint32_t {
  kViUnreliable = 0x1,
  kViReliableDelivery = 0x2,
  kViReliableReception = 0x4,
};

// ------------------------------------------------------- the SQ operations
//
// kOpViCreate      dst_slot = VI index, src_key = ptag, access = ViAttrBits,
//                  length = MaxTransferSize. The VI is Idle.
// kOpViDestroy     dst_slot = VI index, in any state (a connected VI
//                  disconnects first).
// kOpViPostSend    dst_slot = VI index, src_addr/src_key = the descriptor.
// kOpViPostRecv    the same, for the receive queue (Idle or Connected).
// kOpViConnect     dst_slot = VI index, dst_node = the server's node,
//                  access = discriminator bytes (the discriminator fills the
//                  next SQ entry), src_addr/src_key = a ViConnInfo the NIC
//                  fills with the server's side; flags kSqViPeer makes it a
//                  peer-to-peer request (both sides ask, either may be first).
//                  Completes when connected, rejected or cancelled; a
//                  client/server request that no listen of the server's NIC
//                  waits for completes kCqViCancelled as soon as that NIC
//                  answers so.
// kOpViListen      access = discriminator bytes (next SQ entry), src_addr/
//                  src_key = a ViConnInfo. Completes when a request with that
//                  discriminator arrives (result = its connection id) or is
//                  cancelled.
// kOpViAccept      dst_slot = VI index, dst_key = connection id.
// kOpViReject      dst_key = connection id.
// kOpViCancel      dst_slot = VI index: cancel its connect; or, with flags
//                  kSqViListen, cancel the listen whose user_data is src_addr.
//                  result = 1 if something was cancelled (it completes
//                  kCqViCancelled or kCqViTimedOut), 0 if it had finished.
// kOpViDisconnect  dst_slot = VI index: flush both queues, tell the peer,
//                  back to Idle.

enum ViAttrBits : uint32_t {
  kViAttrReliabilityMask = 0x7,   // ViReliability
  kViAttrRdmaWrite = 1u << 8,
  kViAttrRdmaRead = 1u << 9,
};

// What a connect or listen learns about the other side (firmware -> host).
struct ViConnInfo {
  uint32_t node;           // the other NIC
  uint32_t attrs;          // its VI's ViAttrBits
  uint32_t max_transfer;   // its VI's MaxTransferSize
  uint32_t conn_id;        // kOpViListen: for kOpViAccept / kOpViReject
  uint32_t disc_len;
  uint32_t pad[3];
  uint8_t disc[kViMaxDiscriminator];
};
ULNIC_ABI_CHECK_SIZE(ViConnInfo, 96);

// -------------------------------------------------- asynchronous errors

// EqEntry with type kEqViError: export_handle = VI index, length = the
// VIP_ERROR_CODE value, offset = the VI's state afterwards (ViState),
// flags = kEqViOrderly on a kViErrConnLost because the peer's process
// disconnected or destroyed its VI itself (not its death, nor an error).
constexpr uint32_t kEqViOrderly = 1;
enum ViState : uint32_t {
  kViStateIdle = 0,
  kViStateConnected = 1,
  kViStateConnectPending = 2,
  kViStateError = 3,
};
enum ViErrorCode : uint32_t {   // = VIP_ERROR_CODE
  kViErrPostDesc = 0,
  kViErrConnLost = 1,
  kViErrRecvQEmpty = 2,
  kViErrViOverrun = 3,
  kViErrRdmaWriteProt = 4,
  kViErrRdmaWriteData = 5,
  kViErrRdmaWriteAbort = 6,
  kViErrRdmaReadProt = 7,
  kViErrCompProt = 8,
  kViErrRdmaTransport = 9,
  kViErrCatastrophic = 10,
};

}  // namespace ulnic::abi
