// Inside libulnic: a thread that follows its NIC to the NIC's CPU
// (ULNIC_NIC_AFFINITY=node; emulator/board/node.h, nic_cpu), and a thread
// that goes to sleep where its NIC runs (sleep_near_nic).
#pragma once

#include <cstdint>

namespace ulnic::detail {

// Called by Nic::attach with the daemon's AttachReply::nic_cpu (-1: the
// NIC's QEMU is not pinned): moves the calling thread to that CPU where
// it may (pin.cpp says when it does not).
void follow_nic_cpu(int32_t cpu);

// Called by a thread about to sleep on `nic`, whose vCPU thread's
// /proc/TID/stat is open as `stat_fd` (-1: unknown): moves the thread to the
// CPU that thread last ran on (looked up at most once a millisecond per
// thread), if it runs elsewhere, so that the NIC's ring wakes it there. Its
// affinity is left as it was. Nothing happens with ULNIC_AFFINITY=off, for
// a thread whose affinity is one CPU or leaves out the NIC's, or one that
// follow_nic_cpu pinned. Returns whether it moved the thread.
bool sleep_near_nic(const void* nic, int stat_fd);

// The CPU a thread last ran on (field 39 of its /proc/TID/stat open as
// `stat_fd`), -1 if unknown.
int32_t last_cpu(int stat_fd);

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
