// A host slot: one process's window onto its NIC (DESIGN §4). The slot is an
// ivshmem-plain device backed by a file; the owning process maps the file,
// the firmware reaches it through the device's BAR. Everything a process
// shares with its NIC lives here: the header, the send queue (SQ), the
// completion queue (CQ) and the DMA-able heap.
//
//   0            SlotHeader (one page)
//   sq_offset    RingControl + SqEntry[sq_capacity]      host -> NIC
//   cq_offset    RingControl + CqEntry[cq_capacity]      NIC -> host
//   eq_offset    RingControl + EqEntry[eq_capacity]      NIC -> host (notifications)
//   heap_offset  DMA-able heap up to the end of the slot
//
// The daemon picks the layout at attach and writes it into the header; the
// firmware gets the same layout through the (trusted) control queue and
// never reads it back from the slot, which the host can scribble on.
#pragma once

#include "ulnic/abi/ring.h"
#include "ulnic/abi/sram.h"

namespace ulnic::abi {

constexpr uint32_t kSlotMagic = fourcc('U', 'S', 'L', 'T');
constexpr uint32_t kSlotHeaderSize = 4096;

struct SlotLayout {
  uint32_t sq_offset;        // RingControl, entries follow at sq_offset + 128
  uint32_t sq_capacity;      // power of two
  uint32_t cq_offset;        // RingControl, entries follow at cq_offset + 128
  uint32_t cq_capacity;      // power of two, >= sq_capacity
  uint64_t heap_offset;      // page aligned
  uint64_t heap_size;
  uint64_t slot_size;        // bytes in the slot (its BAR size)
  uint32_t eq_offset;        // RingControl, EqEntry[eq_capacity] follow at eq_offset + 128
  uint32_t eq_capacity;      // power of two
  uint64_t reserved[2];
};
ULNIC_ABI_CHECK_SIZE(SlotLayout, 64);

enum class SlotState : uint32_t {
  kFree = 0,       // no process
  kActive = 1,     // attached, firmware serving it
  kCutOff = 2,     // firmware stopped serving it: bad rings (fault_code says)
  kFlushed = 3,    // detached; outstanding work completed as flushed
};

enum SlotFault : uint32_t {
  kFaultNone = 0,
  kFaultSqCorrupt = 1,   // SQ indices impossible (tail - head > capacity)
  kFaultCqCorrupt = 2,   // CQ head impossible
};

// Firmware -> host. One cache line, written only by the firmware.
struct SlotNicWords {
  uint32_t sq_dormant;   // 1: the firmware no longer polls this SQ: ring the
                         //    doorbell after publishing (io_uring need_wakeup)
  uint32_t state;        // SlotState
  uint32_t fault_code;   // SlotFault when state == kCutOff
  uint32_t pad0;
  uint64_t completions;  // CQEs written (statistics)
  uint64_t events_dropped;  // notifications lost to a full event queue
  // The NIC's running time, microseconds, advanced at every status refresh
  // (boot config heartbeat_us) by the time since the last one, at most two
  // heartbeats: a NIC its host left off the CPU does not count the pause.
  // A host's bound on something the NIC should do at once counts this clock
  // (host/core nic.h, NicDeadline), not the wall clock.
  uint64_t run_us;
  uint64_t pad1[3];
};
ULNIC_ABI_CHECK_SIZE(SlotNicWords, 64);

// What a host asleep on its completion eventfd waits for (wait_for). The
// firmware rings for a completion or an event only if one of the sleepers
// asked for it, and for a completion with an error status always: a process
// waiting for arrivals (an AM reply, an FM packet) is not woken for each of
// its own sends' completions (two wake-ups per round trip, issue 19).
enum WaitFor : uint32_t {
  kWaitCompletions = 1u << 0,
  kWaitEvents = 1u << 1,
  kWaitAll = kWaitCompletions | kWaitEvents,
};

// Host -> firmware. One cache line, written only by the owning process.
struct SlotHostWords {
  uint64_t wait_seq;     // bumped before the host blocks on its completion
                         // eventfd; the firmware rings when it changed
  uint32_t wait_for;     // WaitFor bits, written before wait_seq; 0: all
  // 0, or the event queue's tail the sleeper waits for: a ring for events
  // alone (no completion it waits for, no failure) waits until the NIC's
  // tail reaches it (or the NIC is about to sleep, or 500 us passed: firmware
  // lcp/slots.h, kRingDeferUs).
  // A process that knows more arrivals are on their way (the rest of a
  // message) sleeps through them instead of waking for each (issue 19).
  // Written before wait_seq, like wait_for.
  uint32_t wait_events_until;
  uint64_t pad[6];
};
ULNIC_ABI_CHECK_SIZE(SlotHostWords, 64);

// Per-message timestamps for latency breakdowns: a descriptor posted with
// kSqTrace, and the message it sends, are stamped at every hop the NIC
// sees, in the NIC's clock (the `time` CSR: 10 MHz ticks of QEMU's virtual
// clock, which runs at a fixed offset from the host's CLOCK_MONOTONIC while
// the board runs; ulnic/trace.h measures the offset). Written only by the
// firmware, the times first and then the sequence word (release): a reader
// reads the sequence word (acquire), the times, and the sequence word again.
struct SlotTrace {
  uint64_t tx_seq;       // traced descriptors of this slot that finished sending
  uint64_t tx_seen;      // ... the last one: the NIC took it from the SQ
  uint64_t tx_sent;      // ... its last packet was in the fabric ring (a kOpNop:
                         //     tx_seen; a send within the node: placed)
  uint64_t rx_seq;       // traced messages delivered into this slot
  uint64_t rx_seen;      // ... the last one: the NIC began on its last packet
  uint64_t rx_done;      // ... and had written and published what the process
                         //     sees (data, CQ entry, ring entry, event); a
                         //     process that sleeps is rung at the end of the pass
  uint64_t pad[2];
};
ULNIC_ABI_CHECK_SIZE(SlotTrace, 64);

struct SlotHeader {
  // Written by the daemon before the process gets the slot; then constant.
  uint32_t magic;          // kSlotMagic
  uint32_t abi_version;    // ULNIC_ABI_VERSION
  uint32_t slot_index;
  uint32_t node_id;
  uint64_t generation;     // attach count of this slot (changes per owner)
  uint64_t pad0[5];
  SlotLayout layout;
  SlotNicWords nic;        // firmware only
  SlotHostWords host;      // owning process only
  SlotTrace trace;         // firmware only
  uint8_t reserved[kSlotHeaderSize - 320];
};
ULNIC_ABI_CHECK_OFFSET(SlotHeader, layout, 64);
ULNIC_ABI_CHECK_OFFSET(SlotHeader, nic, 128);
ULNIC_ABI_CHECK_OFFSET(SlotHeader, host, 192);
ULNIC_ABI_CHECK_OFFSET(SlotHeader, trace, 256);
ULNIC_ABI_CHECK_SIZE(SlotHeader, kSlotHeaderSize);

// ---------------------------------------------------------------- send queue

enum SqOpcode : uint8_t {
  kOpNop = 0,         // completes at once (doorbell and CQ round trip)
  kOpCopy = 1,        // registered -> registered, this slot or another on the node
                      // (overlapping source and destination: undefined, as memcpy)
  kOpRegister = 2,    // make [reg_offset, +length) of this slot's heap DMA-able;
                      // with src_key: change that registration's access and
                      // ptag in place (its key stays)
  kOpDeregister = 3,  // drop the registration src_key
  kOpPut = 4,         // registered -> another node's registration (RemoteWrite);
                      // completes once the receiving NIC has placed every byte
  kOpSend = 5,        // VMMC SendMsg: `length` bytes at virtual address src_addr
                      // (registered, found through the slot's TLB) to proxy
                      // address dst_addr (an import); completes once placed
  kOpSendInline = 6,  // VMMC short send (length <= kMaxInline): the payload
                      // fills the next ceil(length / 64) SQ entries
  kOpRedirect = 7,    // VMMC-2 transfer redirection on our export dst_key: the
                      // next send landing wholly in [dst_addr, +length) of it
                      // goes to virtual address src_addr instead (registered,
                      // ours); src_key = an id for the events. length 0 cancels:
                      // result 1 if an unused redirection was cancelled
  // The VI Architecture (abi/vi.h says what each takes).
  kOpViCreate = 8,
  kOpViDestroy = 9,
  kOpViPostSend = 10,
  kOpViPostRecv = 11,
  kOpViConnect = 12,
  kOpViListen = 13,
  kOpViAccept = 14,
  kOpViReject = 15,
  kOpViCancel = 16,
  kOpViDisconnect = 17,
  // Active Messages (abi/am.h).
  kOpAmEndpoint = 18,  // configure endpoint dst_slot (< kMaxAmEndpoints): ring = `length`
                       // entries (a power of 2) at src_addr (key src_key); segment
                       // reg_offset bytes at dst_addr (key dst_key; 0 bytes: none);
                       // tag = access | uint64(src_slot) << 32. kSqAmClose: free it
  kOpAmSend = 19,      // send `length` bytes at src_addr (key src_key): AmPrefix,
                       // message, Long payload; to node dst_node, slot dst_slot
  // U-Net (abi/unet.h).
  kOpUnetEndpoint = 20,   // make this slot a U-Net endpoint: queue area at src_addr (key
                          // src_key) with `length` receive and `access` free-queue entries
                          // (powers of 2); segment reg_offset bytes at dst_addr (key
                          // dst_key). kSqUnetClose: stop being one (channels stay).
                          // kSqUnetMm: U-Net/MM, the segment is the process's own
                          // memory at dst_addr (dst_key 0), mapped page by page
                          // through the NIC's TLB (abi/unet.h)
  kOpUnetSend = 21,       // send `length` bytes at segment offset src_addr on channel dst_key
  kOpUnetSendInline = 22, // the same with the payload in the next ceil(length / 64) SQ
                          // entries (length <= kMaxInline)
  // Memory (libulnic: a registration that overlaps pages another one moved
  // into the slot, and reaches past them, as VIA allows).
  kOpMoveRegion = 23,     // move `length` bytes at heap offset reg_offset to heap
                          // offset dst_addr (memmove): every registration lying
                          // wholly in the source range names the same bytes at
                          // their new place. Whole pages (kMovePage: all three
                          // multiples of it). kCqBusy while an operation of the
                          // slot may hold an address in its heap (a send, put, VI
                          // send or RDMA op whose completion is owed, a copy of
                          // any slot into or out of it)
  kOpcodeCount,
};

enum SqFlags : uint8_t {
  kSqNotify = 1u << 0,   // kOpSend*: run the receiver's notification handler
  kSqViPeer = 1u << 1,   // kOpViConnect: peer-to-peer
  kSqViListen = 1u << 2, // kOpViCancel: cancel a listen, not a connect
  kSqAmClose = 1u << 3,  // kOpAmEndpoint: free the endpoint
  kSqTrace = 1u << 4,    // any opcode: stamp it, and the message it sends, in SlotTrace
  kSqUnetClose = 1u << 3,  // kOpUnetEndpoint: no longer an endpoint
  kSqUnetMm = 1u << 5,     // kOpUnetEndpoint: U-Net/MM (abi/unet.h)
};

enum MemAccess : uint32_t {
  kAccessLocal = 1u << 0,        // usable as a source or destination by its owner
  kAccessRemoteWrite = 1u << 1,  // other slots on the node may copy into it
  kAccessRemoteRead = 1u << 2,   // other slots may copy from it
};

struct SqEntry {
  uint8_t opcode;       // SqOpcode
  uint8_t flags;        // reserved, 0
  uint16_t dst_slot;    // kOpCopy: destination slot index on this node
  uint32_t length;      // bytes
  uint64_t user_data;   // returned in the CQE
  uint64_t src_addr;    // kOpCopy: source address (owner's virtual address);
                        // kOpRegister: the virtual address the region has
  uint64_t dst_addr;    // kOpCopy: destination address in dst_slot's owner
  uint32_t src_key;     // kOpCopy: source memory key; kOpDeregister: the key
  uint32_t dst_key;     // kOpCopy: destination memory key
  uint32_t access;      // kOpRegister: MemAccess bits
  uint32_t src_slot;    // kOpCopy: slot holding the source (own slot unless
                        //          reading another slot's RemoteRead region)
  uint64_t reg_offset;  // kOpRegister: slot offset of the region
  uint32_t dst_node;    // kOpPut: the receiving node; kOpRegister: the VI
                        // protection tag (0: none; VIs need theirs)
  uint32_t reserved;
};
// kOpSend* use opcode, flags, length, user_data, src_addr (kOpSend) and
// dst_addr (the proxy address); every other field must be zero.
ULNIC_ABI_CHECK_SIZE(SqEntry, 64);
ULNIC_ABI_CHECK_OFFSET(SqEntry, user_data, 8);
ULNIC_ABI_CHECK_OFFSET(SqEntry, src_key, 32);
ULNIC_ABI_CHECK_OFFSET(SqEntry, reg_offset, 48);

// ----------------------------------------------------------- completion queue

enum CqStatus : uint16_t {
  kCqOk = 0,
  kCqBadOpcode = 1,      // unknown opcode or nonzero reserved fields
  kCqBadLength = 2,      // zero, too long, or past the end of a region
  kCqBadAddress = 3,     // outside the slot's heap
  kCqBadKey = 4,         // no such registration
  kCqProtection = 5,     // registration lacks the access asked for
  kCqBadSlot = 6,        // destination slot not attached
  kCqNoResources = 7,    // registration table full
  kCqFlushed = 8,        // slot detached before the work ran
  kCqUnreachable = 9,    // the destination NIC stopped answering (or rebooted), or
                         // never gave its verdict on this operation (verdict_timeouts)
  kCqRemoteBadKey = 10,  // the receiver refused: no such registration
  kCqRemoteProtection = 11,  // the receiver refused: no RemoteWrite, or out of bounds
  kCqRemoteBadSlot = 12, // the receiver refused: slot not attached
  kCqNotImported = 13,   // kOpSend*: no import covers [dst_addr, +length)
  kCqUnregistered = 14,  // kOpSend: the source is not registered memory
  kCqRemoteRevoked = 15, // the receiver refused: export gone, or not granted to us
  // VIs (abi/vi.h): the descriptor's Status word says more.
  kCqViBadVi = 16,       // no such VI, or not in a state for this
  kCqViRejected = 17,    // kOpViConnect: the server rejected it
  kCqViCancelled = 18,   // kOpViConnect/Listen: cancelled before anybody took it
  kCqViTimedOut = 19,    // kOpViConnect: cancelled after a server took it
  kCqViMismatch = 20,    // kOpViAccept: reliability levels differ
  kCqViBusy = 21,        // kOpViConnect: the server NIC's request table is full
  // Receivers' verdicts on VI operations (never in a CQE).
  kCqRemoteNoRecv = 22,      // no receive descriptor posted
  kCqRemoteTooLong = 23,     // longer than the receive descriptor
  kCqRemoteDescError = 24,   // the receive descriptor was bad
  kCqRemoteRdmaProt = 25,    // RDMA refused (handle, ptag, enables, bounds)
  kCqRemoteNotConnected = 26,  // the target VI is not connected to the sender
  // kOpAmSend, decided by the destination NIC (nothing was written):
  kCqAmBadEndpoint = 27,     // no such endpoint in the destination slot
  kCqAmBadTag = 28,          // a request's tag does not match the endpoint's, or a
                             // reply answers no request of the endpoint's (abi/am.h)
  kCqAmCongestion = 29,      // the endpoint's receive ring is full (or see abi/am.h:
                             // try again later)
  kCqAmBadSegOffset = 30,    // a Long's offset is past the segment (or no segment)
  kCqAmBadLength = 31,       // a Long's end is past the segment
  // kOpUnetSend*:
  kCqUnetBadChannel = 32,    // no such channel of this slot (the daemon sets them up)
  kCqUnetNoEndpoint = 33,    // the slot is not a U-Net endpoint (kOpUnetEndpoint)
  kCqBusy = 34,              // kOpMoveRegion: operations in flight; ask again after them
};
// The highest status the NIC writes (a reader may treat anything above it as
// garbage; the fuzzer checks every CQ entry against it). Keep it the last one.
constexpr uint16_t kCqLastStatus = kCqBusy;

struct CqEntry {
  uint64_t user_data;
  uint32_t result;       // kOpCopy: bytes; kOpRegister: the new key
  uint16_t status;       // CqStatus
  uint8_t opcode;
  uint8_t pad;
};
ULNIC_ABI_CHECK_SIZE(CqEntry, 16);

// Registrations per slot (firmware table size) and the largest single copy.
constexpr uint32_t kMaxRegistrations = 256;
constexpr uint32_t kMaxCopyBytes = 64u << 20;
// kOpMoveRegion's unit: its offsets and length are multiples of it (one step
// of the NIC's loop moves it all, so it goes by words, never bytes).
constexpr uint32_t kMovePage = 4096;

// NIC MSI-X vectors (= fabric peer vectors). The slot doorbells have their
// own vectors so a wake-up says which slot to look at.
constexpr uint32_t kVectorFabric = 0;      // a peer NIC wrote into our RX ring
constexpr uint32_t kVectorControl = 1;     // the daemon posted a control command
constexpr uint32_t kVectorSlotBase = 2;    // slot k's doorbell: kVectorSlotBase + k
constexpr uint32_t kNicVectors = kVectorSlotBase + kMaxSlots;

}  // namespace ulnic::abi
