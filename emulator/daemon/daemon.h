// ulnicd, the node daemon (DESIGN §5): the kernel-driver analog. It attaches
// host processes to slots over a UNIX socket, drives the firmware through the
// control queue in SRAM (the only writer of it), hands each process the fds
// of its slot and doorbells, and reclaims a slot when its process is gone.
// It is trusted; host programs are not.
#pragma once

#include <sys/types.h>

#include <array>
#include <chrono>
#include <deque>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "board/runtime.h"
#include "board/node.h"
#include "board/sram.h"
#include "daemon/priority_guard.h"
#include "ulnic/abi/attach.h"
#include "ulnic/abi/ctrl.h"
#include "ulnic/abi/vmmc.h"
#include "ulnic/util/fd.h"
#include "ulnic/util/result.h"

namespace ulnic::daemon {

struct Options {
  std::string cluster = "default";
  uint32_t node = 0;
  uint32_t sq_capacity = 256;
  uint32_t cq_capacity = 8192;  // room for every VI descriptor a process keeps posted
  uint32_t eq_capacity = 256;
  // A control command unanswered this long, in QEMU's CPU time (at most 10x
  // it on the wall clock), has failed ($ULNIC_CTRL_TIMEOUT_MS).
  std::chrono::milliseconds ctrl_timeout{5000};
  // --boost-nice N: keep QEMU at the ordinary priority and raise it to N
  // while the host starves it (priority_guard.h). Without it, nobody moves
  // QEMU's priority (ULNIC_NIC_NICE set: a fixed one).
  bool guard = false;
  int boost_nice = 0;
};

std::string socket_path(const board::NodePaths& p);
std::string pid_path(const board::NodePaths& p);
std::string log_path(const board::NodePaths& p);

// The slot layout the daemon gives every process (liburing style: offsets).
abi::SlotLayout make_layout(uint64_t slot_size, uint32_t sq_capacity, uint32_t cq_capacity, uint32_t eq_capacity);

class Daemon {
 public:
  Result<void> init(const Options& opts);
  // Serves until *stop is true and wake() was called (signal handler).
  Result<void> run(volatile const bool* stop);
  void wake();

 private:
  // kOrphaned: held by a process that attached to an earlier daemon of this
  // board (one that was killed): the NIC keeps serving it; we detach and
  // wipe it once nobody holds it.
  enum class SlotUse { kFree, kAttached, kDraining, kOrphaned };
  struct SlotRec {
    SlotUse use = SlotUse::kFree;
    UniqueFd conn;        // the owner's connection; closes when it dies
    pid_t pid = 0;
    uid_t uid = 0;
    uint64_t generation = 0;
    struct Import {
      bool used = false;
      uint32_t node = 0, handle = 0;
      uint64_t id = 0;    // the import request's id: the exporter keys its grant on it
    };
    std::array<Import, abi::kMaxImports> imports{};  // mirrors the firmware's outgoing table
  };
  // An export of one of our slots (the firmware holds the incoming page table).
  struct ExportRec {
    std::string name;
    uint32_t slot = 0;
    uint64_t generation = 0;
    uint32_t handle = 0;
    uint64_t length = 0;
    std::vector<abi::VmmcImporter> allowed;  // empty: anybody
    // Importer (node, slot) -> its imports (request ids). The NIC holds one
    // grant per (node, slot), revoked when the last import of it goes.
    std::map<std::pair<uint32_t, uint32_t>, std::set<uint64_t>> importers;
  };
  // An import waiting for the exporter's daemon.
  struct PendingImport {
    uint64_t id = 0, owner_request = 0, generation = 0;
    uint32_t slot = 0, index = 0, node = 0;
    std::string name;
    std::chrono::steady_clock::time_point next_try, deadline;
  };

  Result<void> connect_fabric();
  void read_fabric_notices();
  Result<abi::CtrlResponse> ctrl_call(abi::CtrlCommand cmd);
  void ring_nic(uint32_t vector);
  void accept_client();
  void serve_request(UniqueFd conn);
  Result<uint32_t> attach(int conn, pid_t pid, uid_t uid, abi::AttachReply& reply);
  void detach(uint32_t slot);
  void reclaim_drained();
  void adopt_slots();
  void slot_gone(uint32_t slot);
  void on_slot_gone(uint32_t src, const abi::MailVmmc& m);
  void revoke(const ExportRec& e, uint32_t node, uint32_t slot, const std::string& why);
  Result<abi::CtrlResponse> ctrl_detach(uint32_t slot);
  bool slot_in_use_elsewhere(uint32_t slot) const;
  Result<void> wipe(uint32_t slot);
  void follow_reboots();
  // VMMC (vmmc.cpp): owner requests, daemon mail, teardown.
  Result<void> init_mail();
  void serve_owner(uint32_t slot);
  void owner_reply(uint32_t slot, const abi::OwnerReply& r);
  abi::OwnerReply do_export(uint32_t slot, const abi::OwnerRequest& q);
  abi::OwnerReply do_unexport(uint32_t slot, const abi::OwnerRequest& q);
  void start_import(uint32_t slot, const abi::OwnerRequest& q);
  abi::OwnerReply do_unimport(uint32_t slot, const abi::OwnerRequest& q);
  // U-Net (unet.cpp): channels for a slot's endpoint.
  abi::OwnerReply do_unet_channel(uint32_t slot, const abi::OwnerRequest& q);
  void send_mail(uint32_t node, const abi::MailVmmc& m);
  void flush_mail();
  void give_back(uint32_t slot, SlotRec::Import& imp);
  void read_mail();
  void handle_mail(uint32_t src, const abi::MailVmmc& m);
  void on_import_request(uint32_t src, const abi::MailVmmc& m);
  void on_import_reply(uint32_t src, const abi::MailVmmc& m);
  void retry_imports();
  void vmmc_detach(uint32_t slot);
  void vmmc_forget_all();
  void log(const std::string& line) const;

  Options opts_;
  board::NodePaths paths_;
  std::optional<board::SramFile> sram_;
  abi::RingProducer<abi::CtrlCommand> ctrl_;
  abi::RingConsumer<abi::CtrlResponse> rsp_;
  uint64_t ctrl_seq_ = 0;
  uint64_t boot_count_ = 0;
  uint64_t slot_size_ = 0;
  uint32_t num_slots_ = 0;
  uint32_t vectors_ = 0;
  pid_t qemu_pid_ = 0;
  PriorityGuard guard_;
  UniqueFd listen_, fabric_, wake_rd_, wake_wr_;
  int64_t peer_id_ = -1;
  std::vector<UniqueFd> nic_vectors_;  // write 1 to ring NIC vector v
  std::vector<UniqueFd> own_vectors_;  // slot k's completion eventfd (vector k)
  std::array<SlotRec, abi::kMaxSlots> slots_{};
  struct Pending {
    UniqueFd conn;
    std::chrono::steady_clock::time_point deadline;
  };
  std::vector<Pending> pending_;  // accepted, request not yet received
  uint64_t generation_ = 0;
  abi::RingProducer<abi::MailMessage> mail_out_;
  abi::RingConsumer<abi::MailMessage> mail_in_;
  std::vector<ExportRec> exports_;
  std::vector<PendingImport> pending_imports_;
  uint64_t mail_seq_ = 0;
  std::deque<std::pair<uint32_t, abi::MailVmmc>> mail_backlog_;  // waiting for outbox room
};

}  // namespace ulnic::daemon
