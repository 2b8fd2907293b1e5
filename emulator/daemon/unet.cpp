// ulnicd's U-Net part: channels (abi/unet.h). A process asks for a channel
// from its endpoint (its slot) to a remote endpoint with a tag pair; the
// daemon, trusted, sets it up in the firmware's tag table for that slot and
// no other, so a process can neither take messages meant for another's
// channel nor send on one it was not given. The firmware drops a slot's
// channels when the slot detaches (its process exited), which frees their
// tags for the node.
#include <cstdio>

#include "daemon/daemon.h"

namespace ulnic::daemon {

namespace {
abi::OwnerReply unet_reply(const abi::OwnerRequest& q, abi::VmmcStatus st, const char* msg) {
  abi::OwnerReply r{};
  r.magic = abi::kOwnerMagic;
  r.status = st;
  r.request_id = q.request_id;
  std::snprintf(r.message, sizeof r.message, "%s", msg);
  return r;
}
}  // namespace

abi::OwnerReply Daemon::do_unet_channel(uint32_t k, const abi::OwnerRequest& q) {
  const uint32_t nodes = sram_->boot_config().num_nodes;
  abi::CtrlCommand cmd{};
  cmd.slot = k;
  cmd.generation = slots_[k].generation;
  cmd.unet = q.unet;
  if (q.type == abi::kReqUnetUnchannel) {
    cmd.opcode = abi::kCtrlUnetUnchannel;
  } else {
    cmd.opcode = abi::kCtrlUnetChannel;
    cmd.unet.channel = 0;
    if ((nodes && q.unet.remote_node >= nodes) || q.unet.remote_slot >= abi::kMaxSlots)
      return unet_reply(q, abi::kVmmcBadRequest, "no such remote endpoint in this cluster");
    if (q.unet.tx_tag == 0 || q.unet.rx_tag == 0) return unet_reply(q, abi::kVmmcBadRequest, "tags are nonzero");
  }
  auto r = ctrl_call(cmd);
  if (!r) return unet_reply(q, abi::kVmmcUnreachable, "the NIC did not answer");
  switch (r->status) {
    case abi::kCtrlOk: {
      abi::OwnerReply ok = unet_reply(q, abi::kVmmcOk, "");
      ok.handle = uint32_t(r->value);
      if (q.type == abi::kReqUnetChannel)
        log("slot " + std::to_string(k) + ": U-Net channel " + std::to_string(r->value) + " to node " +
            std::to_string(q.unet.remote_node) + " slot " + std::to_string(q.unet.remote_slot));
      return ok;
    }
    case abi::kCtrlInUse:
      return unet_reply(q, abi::kUnetTagTaken, "that rx tag is in use on this node");
    case abi::kCtrlNoResources:
      return unet_reply(q, abi::kVmmcNoResources, "no room for another channel (per endpoint, or on the NIC)");
    case abi::kCtrlBadHandle:
      return unet_reply(q, abi::kUnetNoChannel, "no such channel of yours");
    default:
      return unet_reply(q, abi::kVmmcBadRequest, "refused by the NIC");
  }
}

}  // namespace ulnic::daemon
