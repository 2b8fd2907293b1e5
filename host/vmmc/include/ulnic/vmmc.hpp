// VMMC, C++ API (the C API in ulnic/vmmc.h wraps it). See vmmc.h for the model.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "ulnic/nic.h"
#include "ulnic/vmmc.h"

namespace ulnic::vmmc {

class Endpoint {
 public:
  static Result<std::unique_ptr<Endpoint>> open(const NicOptions& opts = {});
  ~Endpoint();

  Nic& nic() { return *nic_; }
  uint32_t node() const { return nic_->node(); }

  // Each returns VMMC_OK or a vmmc_status; `error()` has the words.
  int export_buffer(const std::string& name, void* buffer, size_t length, const std::vector<vmmc_importer>& allowed,
                    vmmc_notify_fn handler, void* arg);
  int unexport(const std::string& name);
  int import(uint32_t node, const std::string& name, int timeout_ms, vmmc_proxy_t& proxy, size_t& length);
  int unimport(vmmc_proxy_t proxy);
  int send(const void* src, vmmc_proxy_t dst, size_t n, int flags);
  int send_async(const void* src, vmmc_proxy_t dst, size_t n, int flags, vmmc_send_id& id);
  int send_done(vmmc_send_id id);
  // send_done() as vmmc_send_done: a caller that keeps finding the send
  // pending hands its core to the NIC (Nic::poll_found).
  int poll_send(vmmc_send_id id);
  int send_wait(vmmc_send_id id);
  int redirect(const std::string& name, size_t offset, size_t length, void* buffer);
  // Runs the handlers of what arrived; a caller that keeps finding nothing
  // hands its core to the NIC (Nic::poll_found).
  int poll();
  int wait(int timeout_ms);
  const std::string& error() const { return error_; }

  // Statistics of the user-managed TLB (host side).
  uint64_t tlb_misses() const { return tlb_misses_; }
  // Sends that went through the bounce buffer (a source whose pages could
  // not be registered where they are).
  uint64_t bounces() const { return bounces_; }
  // Redirections: sends the NIC placed straight into the buffer, and sends
  // that beat their redirection and were copied by the library.
  uint64_t redirect_hits() const { return redirect_hits_; }
  uint64_t redirect_copies() const { return redirect_copies_; }

 private:
  Endpoint() = default;
  int fail(int status, std::string why);
  int translate(const void* src, size_t n);   // user-managed TLB: register on a miss
  void record(const abi::CqEntry& c);         // one completion -> its send's state
  int run_handlers();                         // poll() without the hand-over
  int wait_one();                             // block for one completion, record it
  void reap();                                // completions -> their sends' states
  void drain();                               // every send in flight -> done
  int bounce_buffer(size_t n);
  int post(const void* src, vmmc_proxy_t dst, size_t n, int flags, vmmc_send_id& id);

  struct Redirect {
    bool pending = false;
    uint32_t id = 0;
    size_t offset = 0, length = 0;
    uint8_t* buffer = nullptr;
  };
  struct Export {
    std::string name;
    uint32_t handle = 0;
    MemRegion region;
    vmmc_notify_fn handler = nullptr;
    void* arg = nullptr;
    Redirect redirect;
  };
  void* land(Export& x, const abi::EqEntry& ev);  // where an event's bytes are
  std::unique_ptr<Nic> nic_;
  std::vector<Export> exports_;
  std::vector<MemRegion> tlb_;                // registered send sources
  // Each send's state until its result is asked for: a ring of the recent
  // sends by id (no allocation on the send path), and a map for the few
  // the ring came round to first (a send still in flight, or a result not
  // asked for yet, whose place a later send takes) and for completions of
  // ids this endpoint did not post.
  enum class State : uint8_t { kFree, kInFlight, kDone };
  struct SendState {
    vmmc_send_id id = 0;
    int status = 0;
    State state = State::kFree;
  };
  SendState& state_of(vmmc_send_id id) { return sends_[id & (sends_.size() - 1)]; }
  bool in_flight(vmmc_send_id id);
  std::vector<SendState> sends_;              // a power of two > the CQ's capacity
  std::map<vmmc_send_id, int> spilled_;       // status, or VMMC_PENDING while in flight
  vmmc_send_id next_id_ = 1;
  uint64_t tlb_misses_ = 0, redirect_hits_ = 0, redirect_copies_ = 0, bounces_ = 0;
  MemRegion bounce_;                          // registered slot buffer (key 0: none yet)
  vmmc_send_id bounce_id_ = 0;                // the last send from it
  uint32_t redirect_ids_ = 0;
  std::string error_;
};

// The vmmc_status for a completion status.
int status_of(uint16_t cq_status);

}  // namespace ulnic::vmmc
