// Host process <-> node daemon (ulnicd): the attach handshake on the
// daemon's UNIX socket (<runtime>/<cluster>/node<k>/ulnicd.sock).
//
// The process sends one AttachRequest; the daemon answers one AttachReply
// and, on success, passes three fds with it (SCM_RIGHTS, in this order):
//   [0] the slot file (read/write; map it whole)
//   [1] the NIC's doorbell eventfd for this slot (write 1 to wake the NIC)
//   [2] the slot's completion eventfd (readable when the NIC rings us)
// The connection then stays open for the life of the attachment: when it
// closes (the process exited or was killed) the daemon detaches the slot,
// and reuses it only after no process maps it any more.
#pragma once

#include "ulnic/abi/types.h"

namespace ulnic::abi {

constexpr uint32_t kAttachMagic = fourcc('U', 'A', 'T', 'T');

struct AttachRequest {
  uint32_t magic;         // kAttachMagic
  uint32_t abi_version;   // ULNIC_ABI_VERSION of the library
  uint32_t flags;         // 0
  uint32_t reserved;
};
ULNIC_ABI_CHECK_SIZE(AttachRequest, 16);

enum AttachStatus : uint32_t {
  kAttachOk = 0,
  kAttachNoFreeSlot = 1,
  kAttachBadVersion = 2,
  kAttachNicDown = 3,      // firmware not running or not answering
  kAttachBadRequest = 4,
  kAttachDenied = 5,       // another user
};

struct AttachReply {
  uint32_t magic;          // kAttachMagic
  uint32_t status;         // AttachStatus
  uint32_t slot;
  uint32_t node_id;
  uint64_t generation;     // the slot header carries the same value
  uint64_t slot_size;
  int32_t nic_cpu;         // the one host CPU the NIC's QEMU is pinned to, -1 if not pinned
  int32_t nic_thread;      // the host thread id of the NIC's vCPU, 0 if unknown
  char message[88];        // human-readable, NUL-terminated
};
ULNIC_ABI_CHECK_SIZE(AttachReply, 128);

}  // namespace ulnic::abi
