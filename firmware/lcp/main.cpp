// Firmware entry after boot/start.S: status block, serial log, boot config,
// PCIe bring-up, then the event loop.
#include "core/board.h"
#include "core/copy_engine.h"
#include "core/boot_config.h"
#include "core/log.h"
#include "core/status.h"
#include "hal/clint.h"
#include "hal/imsic.h"
#include "hal/pcie.h"
#include "hal/soft_tlb.h"
#include "hal/uart.h"
#include "lcp/loop.h"
#include "lcp/mail.h"
#include "lcp/remote.h"
#include "lcp/am.h"
#include "lcp/unet.h"
#include "lcp/vi.h"
#include "lcp/vmmc.h"
#include "link/link.h"

namespace abi = ulnic::abi;

#ifndef ULNIC_FW_VERSION
#define ULNIC_FW_VERSION "0.0.0-dev"
#endif
#ifdef ULNIC_FW_VARIANT
#define ULNIC_FW_VERSION_STRING ULNIC_FW_VERSION "-" ULNIC_FW_VARIANT
#else
#define ULNIC_FW_VERSION_STRING ULNIC_FW_VERSION
#endif

namespace {

core::board::Board g_board;
lcp::SlotTable g_slots;
lcp::Control g_control;

// Doorbells: every fabric MSI-X vector v raises IMSIC identity v + 1.
void wire_doorbells(const core::board::Board& b) {
  uint32_t n = b.fabric.vectors < abi::kNicVectors ? b.fabric.vectors : abi::kNicVectors;
  hal::imsic::init(abi::kNicVectors);
  if (!b.fabric.present) return;
  for (uint32_t v = 0; v < n; ++v) hal::pcie::msix_set_vector(b.fabric.fn, v, hal::imsic::kMsiAddress, v + 1);
  hal::pcie::msix_enable(b.fabric.fn);
  if (n < abi::kNicVectors) core::log("warning: fabric has %u vectors, slots need %u\n", n, abi::kNicVectors);
}

void publish_board(const core::board::Board& b) {
  abi::StatusBlock& s = core::status::block();
  using core::status::put;
  put(s.num_slots, b.num_slots);
  for (uint32_t k = 0; k < abi::kMaxSlots; ++k) {
    put(s.slots[k].bar_addr, b.slots[k].mem);
    put(s.slots[k].bar_size, b.slots[k].size);
  }
  put(s.fabric_bar_addr, b.fabric.mem);
  put(s.fabric_bar_size, b.fabric.size);
  put(s.fabric_regs_addr, b.fabric.regs);
  put(s.fabric_peer_id, b.fabric.peer_id);
  put(s.fabric_vectors, uint32_t(b.fabric.vectors));
  core::status::count(abi::kCtrPcieDevices, b.functions);
  core::status::count(abi::kCtrPcieIgnored, b.foreign + b.misplaced);
}

void log_board(const core::board::Board& b) {
  core::log("pcie: %u functions, %u slots, %u foreign, %u misplaced, %u BARs unplaced\n", b.functions,
            b.num_slots, b.foreign, b.misplaced, b.bar_failures);
  for (uint32_t k = 0; k < abi::kMaxSlots; ++k)
    if (b.slots[k].present)
      core::log("  slot %u: %lx + %lu MiB\n", k, b.slots[k].mem, b.slots[k].size >> 20);
  if (b.fabric.present)
    core::log("  fabric: %lx + %lu MiB, regs %lx, peer id %u, %u vectors\n", b.fabric.mem,
              b.fabric.size >> 20, b.fabric.regs, b.fabric.peer_id, b.fabric.vectors);
  else
    core::log("  fabric: absent\n");
}

}  // namespace

extern "C" [[noreturn]] void ulnic_main(uint64_t /*hartid*/, uint64_t /*dtb*/) {
  core::status::begin_boot(hal::clint::now(), ULNIC_FW_VERSION_STRING);
  hal::uart::init();
  core::boot_config::Config cfg;
  abi::BootConfigVerdict verdict = core::boot_config::load(cfg);
  core::status::put(core::status::block().boot_config, uint32_t(verdict));
  core::status::put(core::status::block().node_id, cfg.node_id);
  core::status::put(core::status::block().flash_seq, cfg.flash_seq);
  if (verdict != abi::kBootConfigOk) core::status::count(abi::kCtrBadBootConfig);
  core::log("\nulnic-fw %s build %s: node %u of cluster '%s', flash #%lu%s\n",
            core::status::block().version, core::status::build_id(), cfg.node_id, cfg.cluster, cfg.flash_seq,
            verdict == abi::kBootConfigOk ? "" : " (no valid boot config: defaults)");

  core::board::discover(g_board);
  publish_board(g_board);
  log_board(g_board);
  if (cfg.num_slots && g_board.num_slots != cfg.num_slots)
    core::log("warning: boot config expects %u slots, board has %u\n", cfg.num_slots, g_board.num_slots);

#ifdef ULNIC_FW_HANG_IN_BOOT
  // Hang-test build: never leaves the booting state, and keeps its CPU
  // busy, so the tools' boot timeout (emulator/board/node.cpp) is shown.
  core::log("hang-test build: spinning in boot on purpose\n");
  for (volatile uint64_t spins = 0;; spins = spins + 1) {
  }
#endif
#ifdef ULNIC_FW_CRASH_AFTER_BOOT
  // Crash-test build: a load from an address nothing decodes, after boot, so
  // the tools can be shown a crashed NIC with a real cause and pc.
  core::log("crash-test build: faulting on purpose\n");
  (void)*reinterpret_cast<volatile uint64_t*>(0x7000'0000'0000ull);
#endif

  wire_doorbells(g_board);
  core::copy_engine::init(g_board);
  if (core::copy_engine::g_on) core::log("copy engine: the wake plugin copies between slots and fabric\n");
  lcp::slots_init(g_slots, g_board, hal::clint::now());
  lcp::control_init(g_control);
  lcp::remote_init(g_slots);
  lcp::vmmc_init(g_slots);
  lcp::vi_init(g_slots);
  lcp::am_init(g_slots);
  lcp::unet_init(g_slots);
  lcp::mail_init(g_board);
  link::init(g_board, cfg, lcp::remote_upcalls(), hal::clint::now());
  if (link::enabled())
    core::log("link: node %u of %u on the fabric%s\n", link::self(), link::nodes(),
              cfg.switch_port == abi::kNoSwitch ? "" : " (through the switch)");
  if (cfg.test_rx_drop) {
    link::set_rx_drop(cfg.test_rx_drop, cfg.test_seed);
    core::log("link: TEST MODE: dropping %u/65536 of arriving data packets\n", cfg.test_rx_drop);
  }
  // Last: programming BARs and MSI-X changes QEMU's memory map, which
  // flushes the TLB (and may shrink it); from here on nothing does.
  hal::soft_tlb::grow(abi::kSramBase, abi::kSramSize, 8);
  lcp::LoopState loop{};
  lcp::loop_init(loop, cfg, hal::clint::now());
  loop.slots = &g_slots;
  loop.control = &g_control;
  core::status::set_state(abi::FwState::kRunning);
  core::log("running\n");
  lcp::run(loop);
}
