// The wake block: how the NIC sleeps on its doorbells in its own QEMU thread.
//
// Asleep in WFI, a NIC is woken through QEMU's main loop: a doorbell's
// eventfd wakes the main loop, which raises the MSI and kicks the vCPU
// thread, which then waits for the global lock the main loop holds (three
// threads and four context switches, 100-300 us on a 2-vCPU VM:
// docs/platform.md). The board loads a QEMU TCG plugin
// (emulator/wake/wake_plugin.cpp) that runs in the vCPU thread: the
// firmware asks it to sleep with one marker instruction, and it blocks in
// ppoll on the NIC's own doorbell eventfds, which the fabric server hands
// it instead of to QEMU's device (QEMU's gets eventfds nobody rings). A
// doorbell then wakes the NIC's thread itself.
//
// The handshake, per sleep: the firmware writes `sleep_us` and then bumps
// `fw_seq` and executes the marker; the plugin, if it holds the eventfds,
// sleeps until one is rung or `sleep_us` passes (at most kMaxWakeSleepUs),
// clears the ones rung, writes their vector bits to `woke` and then sets
// `plugin_seq` to `fw_seq`. The firmware sees plugin_seq == fw_seq, or
// (no plugin, or one without eventfds) sleeps in WFI as before. Without the
// plugin the marker is a no-op (`slti x0, x0, imm`, as the cost markers).
//
// A second marker gives the host's CPU away: a NIC that polls without
// finding work (its spin window, a full ring toward a peer, a stream it
// waits on) executes kMarkYield now and then, and the plugin calls
// sched_yield in the vCPU thread. Alone on its CPU that is a system call;
// beside another runnable party (a peer NIC, a process) on the same CPU,
// that party runs now instead of when the scheduler preempts the NIC. No
// handshake: the firmware does not wait for an answer.
//
// A third marker is the board's copy engine, doing for the firmware what the
// LANai's DMA engines did for its control program: the firmware names a copy
// (destination, source, length: its own physical addresses) and the plugin
// makes it with the host's memcpy, in the vCPU thread, before the marker's
// instruction retires. Under TCG every guest load and store goes through the
// soft TLB, so the firmware's own copy loop moves ~5 GB/s within one core
// and half that into a ring another core reads (docs/platform.md); memcpy
// moves several times more. The plugin maps the slot files and the fabric
// memory itself (they are the files behind those BARs), and the firmware
// says once, at boot, where each BAR sits (`regions`); a copy whose two ends
// do not each lie whole inside one mapped region is refused, and the
// firmware copies it itself, as it does every copy without the plugin.
// The two ends may overlap (the plugin copies as memmove does).
// The handshake, per copy: the firmware writes dst, src and len, bumps
// `fw_seq` and executes the marker; the plugin copies and sets `plugin_seq`
// to `fw_seq`, or refuses by leaving it. A copy of length 0 at boot asks
// whether the engine is there at all.
#pragma once

#include "ulnic/abi/sram.h"
#include "ulnic/abi/types.h"

namespace ulnic::abi {

// SRAM at kWakeOffset (sram.h's reserved range).
constexpr uint64_t kWakeOffset = 0xFF'4000;
constexpr uint64_t kWakeSize = 0x1000;

// The markers' immediates (cost.h's markers use 1..kPhaseCount, 0x40.. and
// 0x7ff; the cost plugin ignores these three).
constexpr int32_t kMarkSleep = 0x7fe;
constexpr int32_t kMarkYield = 0x7fd;
constexpr int32_t kMarkCopy = 0x7fc;

// The longest one plugin sleep lasts: a vCPU blocked in the plugin holds up
// whatever waits for it to stop (a QMP stop, the gdb stub of a flash), so
// a NIC with nothing to do wakes this often (~0.2% of a core here).
constexpr uint64_t kMaxWakeSleepUs = 100'000;

struct WakeBlock {
  // Written by the firmware only.
  uint64_t fw_seq;       // bumped before each marker
  uint64_t sleep_us;     // the longest this sleep may last (the NIC's next timer)
  uint8_t fw_pad[48];
  // Written by the plugin only.
  uint64_t plugin_seq;   // fw_seq of the last sleep the plugin took
  uint64_t woke;         // bit v: vector v was rung during that sleep
  uint32_t vectors;      // the NIC's doorbell eventfds the plugin polls (0: none yet)
  uint32_t reserved;
  uint64_t sleeps;       // sleeps taken
  uint64_t rung;         // of them, ended by a doorbell
  uint64_t yields;       // kMarkYield markers the plugin yielded at
};
ULNIC_ABI_CHECK_SIZE(WakeBlock, 112);
static_assert(sizeof(WakeBlock) <= kWakeSize);

// The copy engine's block: in the wake block's page, so the plugin's one
// mapping holds both.
constexpr uint64_t kCopyOffset = kWakeOffset + 0x100;
constexpr uint32_t kCopyRegions = kMaxSlots + 1;  // slot k is region k; the fabric's memory is region kMaxSlots
constexpr uint32_t kCopyFabricRegion = kMaxSlots;

struct CopyRegion {
  uint64_t base;  // the BAR's physical address in the NIC's space (0: none)
  uint64_t size;  // its size (the plugin also bounds it by its file's)
};

struct CopyBlock {
  // Written by the firmware only.
  CopyRegion regions[kCopyRegions];
  uint64_t dst, src, len;  // the copy asked for
  uint64_t fw_seq;         // bumped before each marker
  uint8_t fw_pad[16];
  // Written by the plugin only.
  uint64_t plugin_seq;  // fw_seq of the last copy the plugin made
  uint64_t copies;      // copies made (the boot's probe not counted)
  uint64_t bytes;       // bytes they moved
  uint64_t refused;     // copies refused: an end outside every mapped region
  uint32_t mapped;      // bit k: the plugin maps region k's file (0: no engine)
  uint32_t reserved;
};
ULNIC_ABI_CHECK_OFFSET(CopyBlock, plugin_seq, 192);  // its own cache line
ULNIC_ABI_CHECK_SIZE(CopyBlock, 232);
static_assert(kCopyOffset - kWakeOffset >= sizeof(WakeBlock));
static_assert(kCopyOffset - kWakeOffset + sizeof(CopyBlock) <= kWakeSize);

}  // namespace ulnic::abi
