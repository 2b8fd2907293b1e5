#include "lcp/control.h"

#include <string.h>

#include "core/log.h"
#include "core/status.h"
#include "lcp/mail.h"
#include "lcp/am.h"
#include "lcp/remote.h"
#include "lcp/unet.h"
#include "lcp/vi.h"
#include "lcp/vmmc.h"

namespace lcp {
namespace {

constexpr uint32_t kCtrlBudget = 4;

abi::CtrlArea& area() { return *reinterpret_cast<abi::CtrlArea*>(abi::kSramBase + abi::kCtrlOffset); }

}  // namespace

void control_init(Control& c) {
  abi::CtrlArea& a = area();
  memset(&a, 0, sizeof a);
  c.cmds.attach(&a.cmd_ring, a.cmds, abi::kCtrlCapacity);
  c.rsps.attach(&a.rsp_ring, a.rsps, abi::kCtrlCapacity);
}

uint64_t detach_slot(SlotTable& slots, uint32_t slot) {
  uint64_t flushed = slot_detach(slots, slot);
  remote_slot_detached(slot);
  vmmc_slot_detached(slot);
  vi_slot_detached(slot);
  am_slot_detached(slot);
  unet_slot_detached(slot);
  return flushed;
}

namespace {
// The commands waiting (control_poll looked). Out of line: the checks of
// every pass of the NIC's loop, most of which find none, stay a few
// instructions (with the loop body inlined, the function's prologue and
// set-up ran before the first look: ~70 a pass).
[[gnu::noinline]] bool take_commands(Control& c, SlotTable& slots) {
  bool worked = false;
  for (uint32_t n = 0; n < kCtrlBudget && c.rsps.free_space(); ++n) {
    const abi::CtrlCommand* shared = c.cmds.peek();
    if (!shared) break;
    abi::CtrlCommand cmd;
    memcpy(&cmd, shared, sizeof cmd);
    c.cmds.pop();
    abi::CtrlResponse r{};
    r.seq = cmd.seq;
    r.opcode = cmd.opcode;
    switch (cmd.opcode) {
      case abi::kCtrlPing:
        r.status = abi::kCtrlOk;
        break;
      case abi::kCtrlAttachSlot:
        r.status = slot_attach(slots, cmd);
        core::log("ctrl: attach slot %u (peer %u vector %u): %s\n", cmd.slot, cmd.host_peer, cmd.host_vector,
                  r.status == abi::kCtrlOk ? "ok" : "refused");
        break;
      case abi::kCtrlDetachSlot:
        // Only a slot that exists: the protocol layers' per-slot tables have
        // kMaxSlots rows (tests/fuzz: slot 0x54500000 reached past AM's).
        r.status = cmd.slot < abi::kMaxSlots ? abi::kCtrlOk : abi::kCtrlBadSlot;
        if (r.status == abi::kCtrlOk) r.value = detach_slot(slots, cmd.slot);
        core::log("ctrl: detach slot %u, %lu flushed\n", cmd.slot, r.value);
        break;
      case abi::kCtrlMailbox:
        mail_set_doorbell(cmd.host_peer, cmd.host_vector);
        r.status = abi::kCtrlOk;
        break;
      case abi::kCtrlExport:
      case abi::kCtrlUnexport:
      case abi::kCtrlGrant:
      case abi::kCtrlRevoke:
      case abi::kCtrlImport:
      case abi::kCtrlUnimport:
        r.status = vmmc_control(slots, cmd, r.value);
        break;
      case abi::kCtrlUnetChannel:
      case abi::kCtrlUnetUnchannel:
        r.status = unet_control(slots, cmd, r.value);
        break;
      default:
        r.status = abi::kCtrlBadCommand;
    }
    *c.rsps.reserve() = r;
    c.rsps.push();
    core::status::count(ulnic::abi::kCtrCtrlCommands);
    worked = true;
  }
  if (worked) {
    c.cmds.release();
    c.rsps.publish();
  }
  return worked;
}
}  // namespace

bool control_poll(Control& c, SlotTable& slots) {
  return c.cmds.available() != 0 && take_commands(c, slots);
}

}  // namespace lcp
