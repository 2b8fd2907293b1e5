// The daemon -> firmware control queue, in SRAM at kCtrlOffset. Only the
// node daemon (trusted) writes commands; the firmware answers in the
// response ring. Host programs never see it.
#pragma once

#include "ulnic/abi/slot.h"
#include "ulnic/abi/sram.h"
#include "ulnic/abi/unet.h"
#include "ulnic/abi/vmmc.h"

namespace ulnic::abi {

enum CtrlOpcode : uint32_t {
  kCtrlPing = 0,
  kCtrlAttachSlot = 1,   // start serving slot k with `layout`
  kCtrlDetachSlot = 2,   // stop serving slot k; flush its outstanding work
  kCtrlMailbox = 3,      // ring (host_peer, host_vector) when daemon mail arrives
  kCtrlExport = 4,       // slot k exports vmmc.{key, va, length}: value = handle
  kCtrlUnexport = 5,     // drop export vmmc.handle (its grants with it)
  kCtrlGrant = 6,        // let (vmmc.node, vmmc.peer_slot) send into vmmc.handle
  kCtrlRevoke = 7,       // take that back
  kCtrlImport = 8,       // slot k: proxy region vmmc.index -> (node, peer_slot, handle, length)
  kCtrlUnimport = 9,     // slot k: clear proxy region vmmc.index
  kCtrlUnetChannel = 10, // slot k: a U-Net channel (unet.*): value = its id
  kCtrlUnetUnchannel = 11,  // slot k: drop channel unet.channel
};

struct CtrlCommand {
  uint32_t opcode;       // CtrlOpcode
  uint32_t slot;
  uint64_t seq;          // echoed in the response
  uint32_t host_peer;    // fabric peer id that receives slot k's completion doorbells
  uint32_t host_vector;  // vector of that peer to ring
  uint64_t generation;
  union {
    SlotLayout layout;     // kCtrlAttachSlot
    CtrlVmmcArgs vmmc;     // kCtrlExport .. kCtrlUnimport
    UnetChannelArgs unet;  // kCtrlUnetChannel, kCtrlUnetUnchannel
  };
  uint8_t reserved[32];
};
ULNIC_ABI_CHECK_SIZE(CtrlCommand, 128);

enum CtrlStatus : uint32_t {
  kCtrlOk = 0,
  kCtrlBadCommand = 1,
  kCtrlBadSlot = 2,      // no such slot device, or wrong state
  kCtrlBadLayout = 3,
  kCtrlBadRegion = 4,    // kCtrlExport: not a registration with RemoteWrite covering it
  kCtrlNoResources = 5,  // table full
  kCtrlBadHandle = 6,    // no such export / import / channel
  kCtrlInUse = 7,        // kCtrlUnetChannel: the rx tag is taken on this NIC
};
// The highest status the NIC answers (the fw fuzzer checks every response
// against it). Keep it the last one.
constexpr uint32_t kCtrlLastStatus = kCtrlInUse;

struct CtrlResponse {
  uint64_t seq;
  uint32_t status;       // CtrlStatus
  uint32_t opcode;
  uint64_t value;        // kCtrlDetachSlot: descriptors flushed; kCtrlExport: handle
  uint64_t reserved;
};
ULNIC_ABI_CHECK_SIZE(CtrlResponse, 32);

constexpr uint32_t kCtrlCapacity = 64;
struct CtrlArea {
  RingControl cmd_ring;                   // daemon produces
  CtrlCommand cmds[kCtrlCapacity];
  RingControl rsp_ring;                   // firmware produces
  CtrlResponse rsps[kCtrlCapacity];
};
static_assert(sizeof(CtrlArea) <= kCtrlSize);

}  // namespace ulnic::abi
