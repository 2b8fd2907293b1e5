// Inside libulnic: a thread that follows its NIC to the NIC's CPU
// (ULNIC_NIC_AFFINITY=node; emulator/board/node.h, nic_cpu).
#pragma once

#include <cstdint>

namespace ulnic::detail {

// Called by Nic::attach with the daemon's AttachReply::nic_cpu (-1: the
// NIC's QEMU is not pinned): moves the calling thread to that CPU where
// it may (pin.cpp says when it does not).
void follow_nic_cpu(int32_t cpu);

// While one lives, a thread that follow_nic_cpu pinned runs on the other
// CPUs it had before instead: trace::sync_clock spins on NOPs, and a
// thread that spins on its NIC's own CPU leaves the NIC no time to answer.
class AwayFromNic {
 public:
  AwayFromNic();
  ~AwayFromNic();
  AwayFromNic(const AwayFromNic&) = delete;
  AwayFromNic& operator=(const AwayFromNic&) = delete;

 private:
  bool moved_ = false;
};

}  // namespace ulnic::detail
