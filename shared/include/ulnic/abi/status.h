// Status block: written only by the firmware, read by the node's tools
// (`ulnic node status`, later ulnicd). Each field is an aligned word updated
// with a single store, so a reader never sees a torn value; a reader that
// wants a consistent snapshot of several fields reads `heartbeat` before and
// after and retries if it moved.
#pragma once

#include "ulnic/abi/sram.h"

namespace ulnic::abi {

constexpr uint32_t kStatusMagic = fourcc('U', 'S', 'T', 'A');

enum class FwState : uint32_t {
  kOff = 0,       // nothing has run (block still zero)
  kBooting = 1,   // firmware entered, hardware not yet up
  kRunning = 2,   // event loop running
  kCrashed = 3,   // trap taken; trap_* fields say where; NIC parked
  kHalted = 4,    // firmware stopped on purpose (tests, fatal config)
};

enum BootConfigVerdict : uint32_t {
  kBootConfigOk = 0,
  kBootConfigMissing = 1,   // bad magic: ran with defaults
  kBootConfigBadAbi = 2,    // ABI version or size mismatch: ran with defaults
};

// Counters are indexed by this enum; the host prints them by name.
enum Counter : uint32_t {
  kCtrLoopIterations = 0,  // event-loop passes
  kCtrWfi,                 // sleeps the NIC took (counted on waking)
  kCtrTimerWakeups,        // wake-ups by the CLINT timer
  kCtrExtWakeups,          // wake-ups by an external (MSI) interrupt
  kCtrPcieDevices,         // PCI functions seen at boot
  kCtrPcieIgnored,         // functions that are not ours
  kCtrBadBootConfig,       // boot-config blocks rejected
  kCtrCtrlCommands,        // control-queue commands served
  kCtrSqEntries,           // send-queue descriptors consumed
  kCtrCqEntries,           // completions written
  kCtrCopyBytes,           // bytes moved by node-local copies
  kCtrBadDescriptors,      // descriptors completed with an error status
  kCtrSlotCutOffs,         // slots cut off for corrupt rings
  kCtrHostRings,           // completion doorbells rung to hosts
  kCtrSlotWakeups,         // slot doorbell interrupts taken
  kCtrSlotDormant,         // times a slot stopped being polled
  kCtrLinkTxData,          // data packets sent (first transmissions)
  kCtrLinkRxData,          // data packets delivered in order
  kCtrLinkRetransmits,     // data packets sent again
  kCtrLinkDuplicates,      // data packets received twice (dropped)
  kCtrLinkOutOfOrder,      // data packets ahead of a gap (held on a lossy link: kCtrLinkHeld; else dropped)
  kCtrLinkBadPackets,      // bad magic/length/checksum/addressing (dropped)
  kCtrLinkUnreachable,     // peers declared unreachable
  kCtrLinkRestarts,        // peers seen rebooting
  kCtrPutsDone,            // remote puts completed (any status)
  kCtrPutsRefused,         // incoming puts refused (key, access, bounds, slot)
  kCtrVmmcSends,           // VMMC sends completed (any status)
  kCtrVmmcViolations,      // arriving VMMC chunks the incoming page table refused
  kCtrVmmcNotifications,   // notifications queued to a receiving process
  kCtrEventsDropped,       // notifications lost to a full event queue
  kCtrMailOut,             // daemon mail sent
  kCtrMailIn,              // daemon mail delivered to our daemon
  kCtrMailDropped,         // daemon mail dropped (bad, inbox full, no route)
  kCtrViOps,               // VI sends / RDMA operations completed (any status)
  kCtrViRecvs,             // VI receive descriptors completed (any status)
  kCtrViRefused,           // arriving VI operations refused (no receive, protection, not connected)
  kCtrViConnects,          // VIs connected
  kCtrAmMessages,          // AM messages published into a receive ring
  kCtrAmRefused,           // arriving AM messages refused (endpoint, tag, ring full, segment)
  kCtrOpWaits,             // passes a put/send/AM message waited at its SQ head for a free operation
  kCtrVerdictsDropped,     // verdicts beyond a peer's queue (a peer that broke the protocol)
  kCtrSpinWindowUs,        // gauge: how long the NIC polls after its last work before it sleeps
  kCtrLinkPlaced,          // data packets the link placed itself (direct placement, no upcall)
  kCtrVerdictTimeouts,     // operations failed for a verdict that never came (its packets all acknowledged)
  kCtrUnetMessages,        // U-Net messages published into a receive queue
  kCtrUnetDrops,           // U-Net messages dropped: receive queue full, free queue empty, too long
  kCtrUnetBadTag,          // U-Net messages dropped: no channel takes their tag from their sender
  kCtrLinkHeld,            // data packets from beyond a gap held until it filled (selective repeat)
  kCtrLinkSacked,          // our data packets a peer said it held (not sent again)
  kCtrUnetTlbHits,         // U-Net/MM: segment pages the NIC's TLB translated
  kCtrUnetTlbMisses,       // U-Net/MM: ... it had no frame for (the host was asked)
  kCtrUnetTlbFills,        // U-Net/MM: translations the hosts gave it (maps and unmaps)
  kCtrWakeSleeps,          // sleeps the wake plugin took (abi/wake.h), blocked on the doorbells; counted in wfi too
  kCtrViConnDropped,       // VI connection messages dropped: no room left for them (firmware lcp/vi.cpp, kBacklog)
  kCounterCount,
};
constexpr uint32_t kMaxCounters = 64;
static_assert(kCounterCount <= kMaxCounters);

struct SlotInfo {
  uint64_t bar_addr;  // NIC physical address of the slot memory (BAR2)
  uint64_t bar_size;  // bytes
};
ULNIC_ABI_CHECK_SIZE(SlotInfo, 16);

struct StatusBlock {
  uint32_t magic;              // kStatusMagic once the firmware ran
  uint32_t abi_version;        // ULNIC_ABI_VERSION of the running firmware
  uint32_t state;              // FwState
  uint32_t boot_config;        // BootConfigVerdict
  char build_id[48];           // hex of the linker's build-id note, NUL-terminated
  char version[32];            // human version string, NUL-terminated
  uint64_t boot_count;         // boots since the SRAM file was created
  uint64_t flash_seq;          // boot config's flash_seq when this boot began
  uint64_t boot_mtime;         // CLINT mtime (10 MHz) at entry
  uint64_t uptime_us;          // since entry
  uint64_t heartbeat;          // incremented every loop refresh
  uint32_t node_id;            // from the boot config
  uint32_t num_slots;          // host slots found on PCIe
  uint64_t trap_cause;         // mcause of the fatal trap
  uint64_t trap_pc;            // mepc of the fatal trap
  uint64_t trap_tval;          // mtval of the fatal trap
  uint64_t trap_ra;            // ra at the fatal trap
  uint64_t trap_sp;            // sp at the fatal trap
  SlotInfo slots[kMaxSlots];   // per slot: where the firmware mapped it
  uint64_t fabric_bar_addr;    // fabric shared memory (BAR2), 0 if absent
  uint64_t fabric_bar_size;
  uint64_t fabric_regs_addr;   // fabric BAR0 registers
  uint32_t fabric_peer_id;     // IVPosition: our id at the fabric server
  uint32_t fabric_vectors;     // MSI-X table size of the fabric device
  uint64_t counters[kMaxCounters];
  uint8_t reserved[1192];
};
ULNIC_ABI_CHECK_OFFSET(StatusBlock, build_id, 16);
ULNIC_ABI_CHECK_OFFSET(StatusBlock, version, 64);
ULNIC_ABI_CHECK_OFFSET(StatusBlock, boot_count, 96);
ULNIC_ABI_CHECK_OFFSET(StatusBlock, heartbeat, 128);
ULNIC_ABI_CHECK_OFFSET(StatusBlock, trap_cause, 144);
ULNIC_ABI_CHECK_OFFSET(StatusBlock, slots, 184);
ULNIC_ABI_CHECK_OFFSET(StatusBlock, fabric_bar_addr, 312);
ULNIC_ABI_CHECK_OFFSET(StatusBlock, counters, 344);
ULNIC_ABI_CHECK_SIZE(StatusBlock, 2048);
static_assert(sizeof(StatusBlock) <= kStatusSize);

// Per-link state, one entry per peer NIC, in SRAM at kLinkStatusOffset;
// written by the firmware at every status refresh.
constexpr uint64_t kLinkStatusOffset = 0xFF'2000;
constexpr uint32_t kMaxLinks = 64;

enum class LinkState : uint32_t { kIdle = 0, kUp = 1, kUnreachable = 2 };

struct LinkStatus {
  uint32_t state;              // LinkState
  uint32_t peer_incarnation;   // 0: never heard from
  uint32_t next_seq;           // next sequence number we will send
  uint32_t acked;              // cumulative ACK from the peer
  uint32_t expected;           // next in-order sequence we expect
  uint32_t rto_us;             // the retransmission timeout now (backoff included)
  uint64_t tx_data;            // first transmissions
  uint64_t rx_data;            // in-order deliveries
  uint64_t retransmits;
  uint64_t duplicates;         // duplicates and out-of-order arrivals (dropped, or held until the gap fills)
  uint32_t srtt_us;            // smoothed round trip (0: no sample yet)
  uint32_t timeouts;           // retransmission timeouts that fired
};
ULNIC_ABI_CHECK_SIZE(LinkStatus, 64);
static_assert(kLinkStatusOffset >= kStatusOffset + kStatusSize &&
              kLinkStatusOffset + kMaxLinks * sizeof(LinkStatus) <= kSramSize);

}  // namespace ulnic::abi
