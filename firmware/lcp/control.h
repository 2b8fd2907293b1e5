// The control queue (shared/include/ulnic/abi/ctrl.h): commands from the
// node daemon, the only trusted writer the firmware listens to.
#pragma once

#include "lcp/slots.h"

namespace lcp {

struct Control {
  abi::RingConsumer<abi::CtrlCommand> cmds;
  abi::RingProducer<abi::CtrlResponse> rsps;
};

// Attaches to the control area in SRAM (resetting it: a new boot starts a
// new conversation; the daemon notices the boot count and re-attaches).
void control_init(Control& c);
// Slot k lost its process (kCtrlDetachSlot): the slot stops, and every
// module lets go of what the process had. Returns the descriptors flushed.
uint64_t detach_slot(SlotTable& slots, uint32_t slot);
// Serves up to a few commands; true if it did anything.
bool control_poll(Control& c, SlotTable& slots);

}  // namespace lcp
