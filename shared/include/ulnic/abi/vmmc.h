// VMMC (DESIGN §8, APIS.md "VMMC"): export/import tables, proxy addresses,
// notifications, and the daemon mail that matches importers with exporters.
//
// Who writes what:
//   * the exporter's NIC holds the incoming page table: one entry per
//     exported region (owner slot, registration, bounds, importers granted);
//     only its daemon changes it, through the control queue;
//   * each slot has an outgoing page table in the firmware: proxy region i
//     -> (node, export handle, length); only the slot's daemon changes it;
//   * a process names a destination by proxy address, never by a key or a
//     remote address, so it can reach only what its daemon imported for it.
//
// Daemons talk to each other through their NICs (mail over the reliable
// link), so export/import works across machines as well as on one.
#pragma once

#include "ulnic/abi/ring.h"
#include "ulnic/abi/sram.h"
#include "ulnic/abi/unet.h"

namespace ulnic::abi {

// ----------------------------------------------------------- proxy space

// Proxy region i (an import) spans [(i+1) << kProxyShift, +length): address 0
// is never a valid destination, and an offset can never carry into the next
// import.
constexpr uint32_t kProxyShift = 40;
constexpr uint32_t kMaxImports = 64;     // per slot (outgoing page table)
constexpr uint32_t kMaxExports = 64;     // per NIC (incoming page table)
constexpr uint32_t kMaxGrants = 16;      // importers per export
constexpr uint32_t kMaxInline = 128;     // short sends: payload in the SQ
constexpr uint32_t kMaxRedirected = 16;  // redirected sends in progress per NIC
constexpr uint64_t proxy_base(uint32_t import_index) { return uint64_t(import_index + 1) << kProxyShift; }

// ------------------------------------------------------------ event queue

enum EqType : uint32_t {
  kEqNotification = 1,   // a send with kSqNotify finished landing in an export
  kEqViError = 2,        // a VI's asynchronous error (abi/vi.h)
  kEqAmArrival = 3,      // a message was published in AM endpoint export_handle's ring
  kEqUnetArrival = 4,    // a descriptor was published in the U-Net receive queue
  kEqUnetTlbMiss = 5,    // U-Net/MM: the NIC's TLB has no frame for segment page `offset`
                         // (a virtual page number); export_handle: the low word of the
                         // waiting send's user_data, or 0 for a receive (abi/unet.h)
};

enum EqFlags : uint32_t {
  kEqRedirected = 1u << 0,  // the bytes went to redirection redirect_id, not the export
};

// Firmware -> owning process, in the slot's event queue (SlotLayout.eq_*).
struct EqEntry {
  uint32_t type;         // EqType
  uint32_t export_handle;
  uint16_t src_node;
  uint16_t src_slot;
  uint32_t length;       // bytes of the send that carried the notification
  uint64_t offset;       // where it was aimed, from the start of the export
  uint32_t flags;        // EqFlags
  uint32_t redirect_id;  // kEqRedirected: the kOpRedirect's src_key
};
ULNIC_ABI_CHECK_SIZE(EqEntry, 32);

// --------------------------------------------------------- control queue

// Arguments of the VMMC control commands (CtrlCommand.vmmc).
struct CtrlVmmcArgs {
  uint32_t handle;       // export handle (index | tag << 8)
  uint32_t key;          // kCtrlExport: registration of the exported region
  uint64_t va;           // kCtrlExport: first byte, owner's virtual address
  uint64_t length;       // kCtrlExport / kCtrlImport: bytes
  uint32_t node;         // kCtrlGrant/kCtrlRevoke: importer node; kCtrlImport: exporter node
  uint32_t peer_slot;    // kCtrlGrant/kCtrlRevoke: importer slot; kCtrlImport: exporter slot
  uint32_t index;        // kCtrlImport/kCtrlUnimport: proxy region
  uint32_t notify;       // kCtrlExport: 1 if sends may notify the owner
  uint8_t reserved[24];
};
ULNIC_ABI_CHECK_SIZE(CtrlVmmcArgs, 64);

// ------------------------------------------------------------ daemon mail

// Mail between node daemons, carried by the NICs over the reliable link.
// Delivery is best effort at this level (a full inbox drops, a reboot loses
// what was in flight): every request is answered, and requesters retry.
constexpr uint32_t kMailBytes = 240;
struct MailMessage {
  uint16_t peer;         // outbox: destination node; inbox: source node
  uint16_t length;       // bytes of data
  uint32_t pad;
  uint64_t reserved;
  uint8_t data[kMailBytes];
};
ULNIC_ABI_CHECK_SIZE(MailMessage, 256);

constexpr uint32_t kMailCapacity = 32;
constexpr uint64_t kMailOffset = 0xF1'0000;   // inside the daemon<->firmware area
struct MailArea {
  RingControl out_ring;          // daemon produces
  MailMessage out[kMailCapacity];
  RingControl in_ring;           // firmware produces
  MailMessage in[kMailCapacity];
};
static_assert(kMailOffset >= kCtrlOffset + 0x1'0000 && kMailOffset + sizeof(MailArea) <= kCtrlOffset + kCtrlSize);

// The daemon's vector the firmware rings when mail arrived.
constexpr uint32_t kDaemonMailVector = kMaxSlots;

// The daemon-to-daemon protocol (MailMessage.data).
constexpr uint32_t kMailMagic = fourcc('U', 'V', 'M', '1');
enum MailType : uint32_t {
  kMailImportRequest = 1,   // importer daemon -> exporter daemon
  kMailImportReply = 2,     // exporter daemon -> importer daemon
  kMailUnimport = 3,        // importer daemon -> exporter daemon (no reply)
  kMailSlotGone = 4,        // importer daemon -> every daemon (no reply): the process of
                            // importer_slot, which an earlier daemon of the node attached,
                            // is gone: revoke every grant that slot holds
};
constexpr uint32_t kNameBytes = 64;
struct MailVmmc {
  uint32_t magic;           // kMailMagic
  uint32_t type;            // MailType
  uint64_t request_id;      // chosen by the importer daemon, echoed
  uint32_t status;          // reply: VmmcStatus
  uint32_t handle;          // reply / unimport: export handle
  uint64_t length;          // reply: bytes exported
  uint32_t importer_slot;   // request / unimport
  uint32_t importer_pid;    // request: for export restrictions
  uint32_t importer_uid;
  uint32_t exporter_slot;   // reply
  char name[kNameBytes];    // request: NUL-terminated
  uint8_t reserved[kMailBytes - 112];
};
ULNIC_ABI_CHECK_SIZE(MailVmmc, kMailBytes);

// ------------------------------------------- process <-> daemon requests

// After attaching, a process may send these on its daemon connection (one
// request, one reply, in order). Anything else still costs it the slot.
constexpr uint32_t kOwnerMagic = fourcc('U', 'O', 'W', 'N');
enum OwnerRequestType : uint32_t {
  kReqExport = 1,
  kReqUnexport = 2,
  kReqImport = 3,
  kReqUnimport = 4,
  kReqUnetChannel = 5,      // a U-Net channel for the slot (unet: abi/unet.h); reply handle = its id
  kReqUnetUnchannel = 6,
};

enum VmmcStatus : uint32_t {
  kVmmcOk = 0,
  kVmmcNoSuchExport = 1,    // no export of that name on that node
  kVmmcDenied = 2,          // the export is restricted to other importers
  kVmmcNameTaken = 3,       // an export of that name exists on this node
  kVmmcBadRegion = 4,       // not registered memory with remote-write access
  kVmmcNoResources = 5,     // export/import/grant table full
  kVmmcUnreachable = 6,     // the node did not answer
  kVmmcBadRequest = 7,      // malformed request, bad node, bad proxy address
  kVmmcNotImported = 8,     // unimport of something not imported
  kUnetTagTaken = 9,        // kReqUnetChannel: the rx tag is in use on this node
  kUnetNoChannel = 10,      // kReqUnetUnchannel: no such channel of the slot
};

struct VmmcImporter {
  uint32_t node;
  uint32_t pid;             // 0: any process on that node
};

struct OwnerRequest {
  uint32_t magic;           // kOwnerMagic
  uint32_t type;            // OwnerRequestType
  uint64_t request_id;      // echoed
  uint32_t key;             // export: registration key
  uint32_t node;            // import: exporter node
  uint64_t va;              // export: first byte; unimport: proxy base
  uint64_t length;          // export: bytes
  uint32_t notify;          // export: sends may notify
  uint32_t num_allowed;     // export: 0 = anybody, else allowed[0..n)
  union {
    VmmcImporter allowed[8];
    UnetChannelArgs unet;   // kReqUnetChannel, kReqUnetUnchannel
  };
  char name[kNameBytes];
};
ULNIC_ABI_CHECK_SIZE(OwnerRequest, 176);

struct OwnerReply {
  uint32_t magic;           // kOwnerMagic
  uint32_t status;          // VmmcStatus
  uint64_t request_id;
  uint64_t proxy;           // import: proxy base address
  uint64_t length;          // import: bytes
  uint32_t handle;          // export: handle (notifications name it)
  uint32_t pad;
  char message[88];
};
ULNIC_ABI_CHECK_SIZE(OwnerReply, 128);

}  // namespace ulnic::abi
