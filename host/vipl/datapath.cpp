// libvipl, the data path: descriptors, completions, connections.
//
//   posting        VipPostSend, VipPostRecv
//   completing     VipSendDone, VipSendWait, VipRecvDone, VipRecvWait,
//                  VipSendNotify, VipRecvNotify, VipCQNotify (VipCQDone and
//                  VipCQWait are in vipl.cpp and call progress())
//   connections    VipConnectWait, VipConnectAccept, VipConnectReject,
//                  VipConnectRequest, VipDisconnect, VipConnectPeerRequest,
//                  VipConnectPeerDone, VipConnectPeerWait
//
// A post is one SQ entry naming the descriptor (abi/vi.h); the NIC reads
// the descriptor from registered memory, moves the data, writes Status
// back and posts a CQ entry naming the VI. progress() turns those CQ
// entries into VIPL CQ entries and the NIC's asynchronous errors (event
// queue) into VipErrorCallback calls and VI state changes. Done/Wait look at
// the head descriptor's Status, as the spec says.
//
// The provider's choices (SEMANTICS.md says them for programs):
//   - Connections are matched by the NICs: a request that finds no
//     ConnectWait with its discriminator at the server's NIC is answered at
//     once, and VipConnectRequest returns VIP_NO_MATCH then (VIPL clients
//     ask again); VIP_TIMEOUT if a ConnectWait took it but nobody accepted
//     or rejected in time, VIP_REJECT, or VIP_NOT_REACHABLE. A peer-to-peer
//     request waits at the other NIC for the other side's until its timeout.
//   - Notify handlers run once, on one library thread per NIC (started by
//     the first Notify call), for the next completion; Done/Wait on a queue
//     (or CQ) with a Notify pending return VIP_INVALID_STATE.
//   - Asynchronous errors reach the handler from inside the library's
//     calls on that NIC (and from the notify thread once it runs).
#include <algorithm>
#include <chrono>
#include <cstring>
#include <optional>

#include "vipl_internal.h"
#include "vipl_layer.h"

namespace ulnic::vipl {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;
using Lock = std::unique_lock<std::recursive_mutex>;

// connect/listen user_data: above any descriptor address, below Nic::run's.
constexpr uint64_t kTokenBit = uint64_t(1) << 62;
// How long a NIC operation that should finish at once may take: time the
// NIC ran (ulnic::NicDeadline), not wall-clock time.
constexpr milliseconds kNicTimeout{10000};

uint32_t load_status(const VIP_DESCRIPTOR* d) { return __atomic_load_n(&d->CS.Status, __ATOMIC_ACQUIRE); }

// A program's timeout (wall clock), or the bound on the NIC (nic_op).
struct Deadline {
  bool forever;
  Clock::time_point at;
  std::optional<NicDeadline> nic;
  static Deadline after(VIP_ULONG ms) {
    bool f = ms >= VIP_ULONG(VIP_INFINITE);
    return Deadline{f, f ? Clock::time_point::max() : Clock::now() + milliseconds(ms), std::nullopt};
  }
  static Deadline nic_op(const NicState& n) {
    return Deadline{false, Clock::time_point::max(), NicDeadline(*n.core, kNicTimeout)};
  }
  bool passed() const { return nic ? nic->passed() : !forever && Clock::now() >= at; }
  milliseconds left() const {
    return nic ? nic->sleep_slice() : std::chrono::ceil<milliseconds>(at - Clock::now());
  }
};

// Sleeps until the NIC writes a completion or an event, the deadline, or a
// short slice when another thread (the notifier) may take the wake-up.
void sleep_on(NicState& nic, Lock& lock, const Deadline& d) {
  milliseconds slice = nic.notifier.joinable() ? milliseconds(10) : milliseconds(1000);
  if (!d.forever) slice = std::min(slice, d.left());
  if (slice.count() <= 0) return;
  lock.unlock();
  (void)nic.core->wait_ready(slice);
  lock.lock();
}

void push_cq(NicState& nic, Cq& cq, Vi* vi, bool recv) {
  if (cq.entries.size() >= cq.capacity) {
    VIP_ERROR_DESCRIPTOR e{};
    e.ViHandle = vi->handle;
    e.CQHandle = cq.handle;
    e.ResourceCode = VIP_RESOURCE_CQ;
    e.ErrorCode = VIP_ERROR_CATASTROPHIC;
    report_async_error(nic, e);
    return;
  }
  cq.entries.push_back(CqEntry{vi, recv});
}

void handle_completion(NicState& nic, const abi::CqEntry& c) {
  if (c.opcode != abi::kOpViPostSend && c.opcode != abi::kOpViPostRecv) {
    nic.results[c.user_data] = c;  // connect, listen: their callers look
    if (nic.passive_waiters) nic.core->poke();
    return;
  }
  const bool recv = c.opcode == abi::kOpViPostRecv;
  auto* d = reinterpret_cast<VIP_DESCRIPTOR*>(c.user_data);
  if (c.status != abi::kCqOk && !(load_status(d) & VIP_STATUS_DONE)) {
    // The NIC could not write the descriptor back (its memory was
    // deregistered meanwhile): the library says so in it.
    uint32_t st = VIP_STATUS_DONE | VIP_STATUS_PROTECTION_ERROR | (recv ? VIP_STATUS_OP_RECEIVE : 0);
    __atomic_store_n(&d->CS.Status, st, __ATOMIC_RELEASE);
  }
  Vi* vi = c.result < kMaxVi ? nic.by_index[c.result] : nullptr;
  if (!vi) return;
  WorkQueue& q = recv ? vi->recv : vi->send;
  if (q.cq) push_cq(nic, *q.cq, vi, recv);
}

void handle_event(NicState& nic, const abi::EqEntry& ev) {
  if (ev.type != abi::kEqViError) return;
  Vi* vi = ev.export_handle < kMaxVi ? nic.by_index[ev.export_handle] : nullptr;
  if (!vi) return;
  vi->state = VIP_VI_STATE(ev.offset);
  VIP_ERROR_DESCRIPTOR e{};
  e.ViHandle = vi->handle;
  e.ResourceCode = VIP_RESOURCE_VI;
  e.ErrorCode = VIP_ERROR_CODE(ev.length);
  report_async_error(nic, e, (ev.flags & abi::kEqViOrderly) != 0);
}

// Posts `e` (and its payload), reaping completions to make room.
VIP_RETURN post_entry(NicState& nic, const abi::SqEntry& e, const void* payload = nullptr, size_t bytes = 0) {
  const Deadline d = Deadline::nic_op(nic);
  while (!nic.core->post(e, payload, bytes)) {
    progress(nic);
    if (nic.core->post(e, payload, bytes)) break;
    // Every CQ entry is owed to a descriptor still posted (receives waiting
    // for messages): nothing will free one soon.
    if (nic.core->in_flight() >= nic.core->layout().cq_capacity) return VIP_ERROR_RESOURCE;
    if (d.passed() || nic.core->state() != abi::SlotState::kActive) return VIP_ERROR_RESOURCE;
    d.nic->back_off();
  }
  return VIP_SUCCESS;
}

// Runs a NIC operation that completes at once (its completion, or nothing).
std::optional<abi::CqEntry> run(NicState& nic, const abi::SqEntry& e) {
  auto c = nic.core->run(e, kNicTimeout);
  if (!c) return std::nullopt;
  return *c;
}

// Waits for the completion of a connect, listen or other NIC operation
// (user_data `token`), taking completions off the rings meanwhile. While another
// thread of the process takes them too (a data path in full flow beside a
// listener blocked in VipConnectWait), the wait turns passive: that thread
// hands the result over (handle_completion pokes), and this one looks for
// itself every kPassiveSlice in case it stops. Asleep on the NIC instead, it
// was woken by each of that thread's reaps: AM over VIPL's six listener
// threads took ~17,000 context switches each in one depth-16 run (issue 19).
std::optional<abi::CqEntry> wait_token(NicState& nic, Lock& lock, uint64_t token, const Deadline& d) {
  constexpr milliseconds kPassiveSlice{10};
  bool others_reap = false;
  for (;;) {
    progress(nic);
    if (auto it = nic.results.find(token); it != nic.results.end()) {
      abi::CqEntry c = it->second;
      nic.results.erase(it);
      return c;
    }
    if (d.passed() || nic.core->state() != abi::SlotState::kActive) return std::nullopt;
    const uint64_t consumed = nic.core->consumed();
    if (others_reap) {
      const milliseconds slice = d.forever ? kPassiveSlice : std::min(kPassiveSlice, d.left());
      if (slice.count() > 0) {
        const uint64_t gen = nic.core->poke_gen();
        ++nic.passive_waiters;
        lock.unlock();
        nic.core->wait_passive(gen, slice);
        lock.lock();
        --nic.passive_waiters;
      }
    } else {
      sleep_on(nic, lock, d);
    }
    others_reap = nic.core->consumed() != consumed;
  }
}

// ---- descriptors

VIP_RETURN post(Vi& vi, VIP_DESCRIPTOR* d, VIP_MEM_HANDLE mh, bool recv) {
  NicState& nic = *vi.nic;
  if (!d || reinterpret_cast<uintptr_t>(d) % VIP_DESCRIPTOR_ALIGNMENT) return VIP_INVALID_PARAMETER;
  auto r = nic.regions.find(mh);
  auto a = reinterpret_cast<uintptr_t>(d);
  if (r == nic.regions.end()) return VIP_INVALID_PARAMETER;
  auto va = reinterpret_cast<uintptr_t>(r->second.va);
  if (a < va || a - va + sizeof(VIP_CONTROL_SEGMENT) > r->second.length) return VIP_INVALID_PARAMETER;
  if (!recv && vi.state != VIP_STATE_CONNECTED && vi.state != VIP_STATE_ERROR) return VIP_INVALID_STATE;
  WorkQueue& q = recv ? vi.recv : vi.send;
  if (q.posted.size() >= kMaxDescriptorsPerQueue) return VIP_ERROR_RESOURCE;
  __atomic_store_n(&d->CS.Status, 0u, __ATOMIC_RELAXED);
  abi::SqEntry e{};
  e.opcode = recv ? abi::kOpViPostRecv : abi::kOpViPostSend;
  e.dst_slot = uint16_t(vi.index);
  e.src_addr = a;
  e.src_key = mh;
  e.user_data = a;
  q.posted.push_back(d);
  if (VIP_RETURN rc = post_entry(nic, e); rc != VIP_SUCCESS) {
    q.posted.pop_back();
    return rc;
  }
  return VIP_SUCCESS;
}

VIP_RETURN done(Vi& vi, WorkQueue& q, VIP_DESCRIPTOR** out) {
  progress(*vi.nic);
  if (q.notify) return VIP_INVALID_STATE;
  if (q.posted.empty() || !(load_status(q.posted.front()) & VIP_STATUS_DONE)) return VIP_NOT_DONE;
  *out = q.posted.front();
  q.posted.pop_front();
  return VIP_SUCCESS;
}

VIP_RETURN wait_done(Vi& vi, bool recv, VIP_ULONG timeout, VIP_DESCRIPTOR** out) {
  NicState& nic = *vi.nic;
  Lock lock(nic.mu);
  Deadline d = Deadline::after(timeout);
  for (;;) {
    VIP_RETURN rc = done(vi, recv ? vi.recv : vi.send, out);
    if (rc != VIP_NOT_DONE) return rc;
    if (d.passed()) return VIP_TIMEOUT;
    if (nic.core->state() != abi::SlotState::kActive) return VIP_ERROR_RESOURCE;
    sleep_on(nic, lock, d);
  }
}

// ---- notify

// Runs one due Notify handler (without the lock); true if it ran one.
bool run_one_notify(NicState& nic, Lock& lock) {
  for (auto& [h, vi] : nic.vis) {
    for (bool recv : {false, true}) {
      WorkQueue& q = recv ? vi->recv : vi->send;
      if (!q.notify || q.posted.empty() || !(load_status(q.posted.front()) & VIP_STATUS_DONE)) continue;
      VIP_DESCRIPTOR* d = q.posted.front();
      q.posted.pop_front();
      ViNotify fn = q.notify;
      VIP_PVOID ctx = q.notify_context;
      q.notify = nullptr;
      --nic.notifies_pending;
      VIP_VI_HANDLE vh = vi->handle;
      lock.unlock();
      fn(ctx, nic.handle, vh, d);
      lock.lock();
      return true;
    }
  }
  for (auto& [h, cq] : nic.cqs) {
    if (!cq->notify || cq->entries.empty()) continue;
    CqEntry e = cq->entries.front();
    cq->entries.pop_front();
    CqNotifyFn fn = cq->notify;
    VIP_PVOID ctx = cq->notify_context;
    cq->notify = nullptr;
    --nic.notifies_pending;
    VIP_VI_HANDLE vh = e.vi->handle;
    lock.unlock();
    fn(ctx, nic.handle, vh, e.recv ? VIP_TRUE : VIP_FALSE);
    lock.lock();
    return true;
  }
  return false;
}

void notifier_main(NicState* nic) {
  Lock lock(nic->mu);
  while (!nic->stopping) {
    progress(*nic);
    if (run_one_notify(*nic, lock)) continue;
    Deadline d = Deadline::after(nic->notifies_pending ? 10 : 100);
    sleep_on(*nic, lock, d);
  }
}

void start_notifier(NicState& nic) {
  if (!nic.notifier.joinable()) nic.notifier = std::thread(notifier_main, &nic);
}

// ---- connections

bool our_address(const NicState& nic, const VIP_NET_ADDRESS* a) {
  return a && a->HostAddressLen == kNicAddressLen && std::memcmp(a->HostAddress, nic.address, kNicAddressLen) == 0 &&
         a->DiscriminatorLen <= kMaxDiscriminatorLen;
}

const uint8_t* discriminator(const VIP_NET_ADDRESS* a) { return a->HostAddress + a->HostAddressLen; }

// The registered ViConnInfo records the NIC fills (made on first use).
bool ensure_info(NicState& nic) {
  if (nic.info) return true;
  size_t bytes = sizeof(abi::ViConnInfo) * 2 * kMaxVi;
  void* p = nic.core->alloc(bytes, kPage);
  if (!p) return false;
  auto r = nic.core->register_memory(p, bytes, abi::kAccessLocal);
  if (!r) {
    nic.core->free(p);
    return false;
  }
  nic.info = static_cast<abi::ViConnInfo*>(p);
  nic.info_key = r->key;
  return true;
}

VIP_VI_ATTRIBUTES attributes_of(const abi::ViConnInfo& info) {
  VIP_VI_ATTRIBUTES a{};
  a.ReliabilityLevel = VIP_RELIABILITY_LEVEL(info.attrs & abi::kViAttrReliabilityMask);
  a.MaxTransferSize = info.max_transfer;
  a.EnableRdmaWrite = (info.attrs & abi::kViAttrRdmaWrite) ? VIP_TRUE : VIP_FALSE;
  a.EnableRdmaRead = (info.attrs & abi::kViAttrRdmaRead) ? VIP_TRUE : VIP_FALSE;
  return a;
}

// Asks the NIC to connect `vi` to (node, discriminator); returns the token
// its completion will carry, or 0.
uint64_t start_connect(NicState& nic, Vi& vi, uint32_t node, const VIP_NET_ADDRESS* remote, bool peer) {
  if (!ensure_info(nic)) return 0;
  uint64_t token = kTokenBit | ++nic.next_token;
  abi::SqEntry e{};
  e.opcode = abi::kOpViConnect;
  e.flags = peer ? abi::kSqViPeer : 0;
  e.dst_slot = uint16_t(vi.index);
  e.dst_node = node;
  e.access = remote->DiscriminatorLen;
  e.src_addr = reinterpret_cast<uintptr_t>(&nic.info[vi.index]);
  e.src_key = nic.info_key;
  e.user_data = token;
  if (post_entry(nic, e, discriminator(remote), remote->DiscriminatorLen) != VIP_SUCCESS) return 0;
  vi.state = VIP_STATE_CONNECT_PENDING;
  return token;
}

// Cancels the connect of `vi` and waits for its completion.
std::optional<abi::CqEntry> cancel_connect(NicState& nic, Lock& lock, Vi& vi, uint64_t token) {
  abi::SqEntry x{};
  x.opcode = abi::kOpViCancel;
  x.dst_slot = uint16_t(vi.index);
  (void)run(nic, x);
  return wait_token(nic, lock, token, Deadline::nic_op(nic));
}

VIP_RETURN finish_connect(NicState& nic, Vi& vi, const std::optional<abi::CqEntry>& c, VIP_VI_ATTRIBUTES* remote,
                          bool peer) {
  vi.peer_token = 0;
  if (c && c->status == abi::kCqOk) {
    vi.state = VIP_STATE_CONNECTED;
    vi.remote = attributes_of(nic.info[vi.index]);
    if (remote) *remote = vi.remote;
    return VIP_SUCCESS;
  }
  vi.state = VIP_STATE_IDLE;
  if (!c) return VIP_TIMEOUT;
  switch (c->status) {
    case abi::kCqViRejected: return VIP_REJECT;
    case abi::kCqViCancelled: return peer ? VIP_TIMEOUT : VIP_NO_MATCH;
    case abi::kCqViTimedOut: return VIP_TIMEOUT;
    case abi::kCqUnreachable: return VIP_NOT_REACHABLE;
    case abi::kCqViBadVi: return VIP_INVALID_STATE;
    default: return VIP_ERROR_RESOURCE;
  }
}

// The checks VipConnectRequest and VipConnectPeerRequest share.
VIP_RETURN check_request(Vi* vi, const VIP_NET_ADDRESS* local, const VIP_NET_ADDRESS* remote) {
  if (!vi || !local || !remote) return VIP_INVALID_PARAMETER;
  if (!our_address(*vi->nic, local)) return VIP_INVALID_PARAMETER;
  if (remote->HostAddressLen != kNicAddressLen || remote->DiscriminatorLen > kMaxDiscriminatorLen)
    return VIP_INVALID_PARAMETER;
  if (vi->state != VIP_STATE_IDLE) return VIP_INVALID_STATE;
  return VIP_SUCCESS;
}

uint32_t node_of(const VIP_NET_ADDRESS* a) { return uint32_t(a->HostAddress[0]) | uint32_t(a->HostAddress[1]) << 8; }

VIP_RETURN peer_done(Vi& vi, Lock& lock, VIP_VI_ATTRIBUTES* remote) {
  NicState& nic = *vi.nic;
  if (!vi.peer_token) return vi.state == VIP_STATE_CONNECTED ? VIP_SUCCESS : VIP_INVALID_STATE;
  progress(nic);
  auto it = nic.results.find(vi.peer_token);
  if (it != nic.results.end()) {
    abi::CqEntry c = it->second;
    nic.results.erase(it);
    return finish_connect(nic, vi, c, remote, true);
  }
  if (vi.peer_forever || Clock::now() < vi.peer_deadline) return VIP_NOT_DONE;
  return finish_connect(nic, vi, cancel_connect(nic, lock, vi, vi.peer_token), remote, true);
}

}  // namespace

// ---- for vipl.cpp

namespace {
thread_local int quiet_polls = 0;  // ulnic_vipl_quiet_polls (vipl_layer.h)
}  // namespace

VIP_RETURN polled(NicState* nic, VIP_RETURN rc) {
  // Outside the library's lock: the poll may block a moment (Nic::poll_found).
  if (nic && quiet_polls == 0 && (rc == VIP_SUCCESS || rc == VIP_NOT_DONE)) nic->core->poll_found(rc == VIP_SUCCESS);
  return rc;
}

// The NIC stopped serving our slot (it was reflashed and rebooted, or cut
// the slot off): whatever it held for us is gone and nothing posted will
// complete. As for a broken connection, every VI goes to the error state and
// every posted descriptor completes flushed (on its CQ too); the NIC's error
// callback gets VIP_ERROR_CATASTROPHIC once.
void nic_lost(NicState& nic) {
  nic.lost = true;
  for (Vi* vi : nic.by_index) {
    if (!vi) continue;
    for (bool recv : {false, true}) {
      WorkQueue& q = recv ? vi->recv : vi->send;
      for (VIP_DESCRIPTOR* d : q.posted) {
        if (load_status(d) & VIP_STATUS_DONE) continue;
        uint32_t st = VIP_STATUS_DONE | VIP_STATUS_DESC_FLUSHED_ERROR | (recv ? VIP_STATUS_OP_RECEIVE : 0);
        __atomic_store_n(&d->CS.Status, st, __ATOMIC_RELEASE);
        if (q.cq) push_cq(nic, *q.cq, vi, recv);
      }
    }
    if (vi->state != VIP_STATE_IDLE) vi->state = VIP_STATE_ERROR;
  }
  VIP_ERROR_DESCRIPTOR e{};
  e.ResourceCode = VIP_RESOURCE_NIC;
  e.ErrorCode = VIP_ERROR_CATASTROPHIC;
  report_async_error(nic, e);
}

void progress(NicState& nic) {
  abi::CqEntry c;
  while (nic.core->poll(c)) handle_completion(nic, c);
  abi::EqEntry ev;
  while (nic.core->poll_event(ev)) handle_event(nic, ev);
  if (!nic.lost && nic.core->state() != abi::SlotState::kActive) nic_lost(nic);
}

int free_vi_index(const NicState& nic) {
  for (uint32_t i = 0; i < kMaxVi; ++i)
    if (!nic.by_index[i]) return int(i);
  return -1;
}

bool nic_create_vi(NicState& nic, Vi& vi) {
  abi::SqEntry e{};
  e.opcode = abi::kOpViCreate;
  e.dst_slot = uint16_t(vi.index);
  e.src_key = vi.ptag->id;
  e.access = uint32_t(vi.attrs.ReliabilityLevel) | (vi.attrs.EnableRdmaWrite ? abi::kViAttrRdmaWrite : 0u) |
             (vi.attrs.EnableRdmaRead ? abi::kViAttrRdmaRead : 0u);
  e.length = uint32_t(vi.attrs.MaxTransferSize);
  auto c = run(nic, e);
  return c && c->status == abi::kCqOk;
}

bool nic_destroy_vi(NicState& nic, Vi& vi) {
  abi::SqEntry e{};
  e.opcode = abi::kOpViDestroy;
  e.dst_slot = uint16_t(vi.index);
  auto c = run(nic, e);
  return c && c->status == abi::kCqOk;
}

NicState::~NicState() {
  if (notifier.joinable()) {
    {
      std::lock_guard lock(mu);
      stopping = true;
    }
    notifier.join();
  }
}

}  // namespace ulnic::vipl

using namespace ulnic::vipl;
namespace abi = ulnic::abi;

// =========================================================================
// Descriptors

VIP_RETURN VipPostSend(VIP_VI_HANDLE ViHandle, VIP_DESCRIPTOR* DescriptorPtr, VIP_MEM_HANDLE MemoryHandle) {
  return guarded([&] {
    Vi* vi = lookup<Vi>(ViHandle, Kind::kVi);
    if (!vi) return VIP_INVALID_PARAMETER;
    Lock lock(vi->nic->mu);
    return post(*vi, DescriptorPtr, MemoryHandle, false);
  });
}

VIP_RETURN VipPostRecv(VIP_VI_HANDLE ViHandle, VIP_DESCRIPTOR* DescriptorPtr, VIP_MEM_HANDLE MemoryHandle) {
  return guarded([&] {
    Vi* vi = lookup<Vi>(ViHandle, Kind::kVi);
    if (!vi) return VIP_INVALID_PARAMETER;
    Lock lock(vi->nic->mu);
    return post(*vi, DescriptorPtr, MemoryHandle, true);
  });
}

namespace {
VIP_RETURN queue_done(VIP_VI_HANDLE ViHandle, bool recv, VIP_DESCRIPTOR** DescriptorPtr) {
  NicState* nic = nullptr;
  VIP_RETURN rc = guarded([&] {
    Vi* vi = lookup<Vi>(ViHandle, Kind::kVi);
    if (!vi || !DescriptorPtr) return VIP_INVALID_PARAMETER;
    nic = vi->nic;
    Lock lock(vi->nic->mu);
    return done(*vi, recv ? vi->recv : vi->send, DescriptorPtr);
  });
  return polled(nic, rc);
}
}  // namespace

VIP_RETURN VipSendDone(VIP_VI_HANDLE ViHandle, VIP_DESCRIPTOR** DescriptorPtr) {
  return queue_done(ViHandle, false, DescriptorPtr);
}

VIP_RETURN VipRecvDone(VIP_VI_HANDLE ViHandle, VIP_DESCRIPTOR** DescriptorPtr) {
  return queue_done(ViHandle, true, DescriptorPtr);
}

VIP_RETURN VipSendWait(VIP_VI_HANDLE ViHandle, VIP_ULONG Timeout, VIP_DESCRIPTOR** DescriptorPtr) {
  return guarded([&] {
    Vi* vi = lookup<Vi>(ViHandle, Kind::kVi);
    if (!vi || !DescriptorPtr) return VIP_INVALID_PARAMETER;
    return wait_done(*vi, false, Timeout, DescriptorPtr);
  });
}

VIP_RETURN VipRecvWait(VIP_VI_HANDLE ViHandle, VIP_ULONG Timeout, VIP_DESCRIPTOR** DescriptorPtr) {
  return guarded([&] {
    Vi* vi = lookup<Vi>(ViHandle, Kind::kVi);
    if (!vi || !DescriptorPtr) return VIP_INVALID_PARAMETER;
    return wait_done(*vi, true, Timeout, DescriptorPtr);
  });
}

namespace {
VIP_RETURN set_notify(VIP_VI_HANDLE ViHandle, bool recv, VIP_PVOID Context, ViNotify Handler) {
  Vi* vi = lookup<Vi>(ViHandle, Kind::kVi);
  if (!vi || !Handler) return VIP_INVALID_PARAMETER;
  Lock lock(vi->nic->mu);
  WorkQueue& q = recv ? vi->recv : vi->send;
  if (q.notify) return VIP_INVALID_STATE;
  q.notify = Handler;
  q.notify_context = Context;
  ++vi->nic->notifies_pending;
  start_notifier(*vi->nic);
  return VIP_SUCCESS;
}
}  // namespace

VIP_RETURN VipSendNotify(VIP_VI_HANDLE ViHandle, VIP_PVOID Context, ViNotify Handler) {
  return guarded([&] { return set_notify(ViHandle, false, Context, Handler); });
}

VIP_RETURN VipRecvNotify(VIP_VI_HANDLE ViHandle, VIP_PVOID Context, ViNotify Handler) {
  return guarded([&] { return set_notify(ViHandle, true, Context, Handler); });
}

VIP_RETURN VipCQNotify(VIP_CQ_HANDLE CqHandle, VIP_PVOID Context, CqNotifyFn Handler) {
  return guarded([&] {
    Cq* cq = lookup<Cq>(CqHandle, Kind::kCq);
    if (!cq || !Handler) return VIP_INVALID_PARAMETER;
    Lock lock(cq->nic->mu);
    if (cq->notify) return VIP_INVALID_STATE;
    cq->notify = Handler;
    cq->notify_context = Context;
    ++cq->nic->notifies_pending;
    start_notifier(*cq->nic);
    return VIP_SUCCESS;
  });
}

// =========================================================================
// For layers on libvipl (vipl_layer.h)

void ulnic_vipl_quiet_polls(int quiet) { quiet_polls += quiet ? 1 : -1; }

void ulnic_vipl_polled(VIP_NIC_HANDLE NicHandle, int found) {
  NicState* nic = lookup<NicState>(NicHandle, Kind::kNic);
  if (nic) nic->core->poll_found(found != 0);
}

const ulnic::Nic* ulnic_vipl_core(VIP_NIC_HANDLE NicHandle) {
  NicState* nic = lookup<NicState>(NicHandle, Kind::kNic);
  return nic ? nic->core.get() : nullptr;
}

// =========================================================================
// Connections

VIP_RETURN VipConnectWait(VIP_NIC_HANDLE NicHandle, VIP_NET_ADDRESS* LocalAddr, VIP_ULONG Timeout,
                          VIP_NET_ADDRESS* RemoteAddr, VIP_VI_ATTRIBUTES* RemoteViAttributes,
                          VIP_CONN_HANDLE* ConnHandle) {
  return guarded([&] {
    NicState* nic = lookup<NicState>(NicHandle, Kind::kNic);
    if (!nic || !RemoteAddr || !RemoteViAttributes || !ConnHandle || !our_address(*nic, LocalAddr))
      return VIP_INVALID_PARAMETER;
    Lock lock(nic->mu);
    if (!ensure_info(*nic)) return VIP_ERROR_RESOURCE;
    uint32_t slot = 0;
    while (slot < kMaxVi && (nic->listens_busy >> slot & 1)) ++slot;
    if (slot == kMaxVi) return VIP_ERROR_RESOURCE;
    nic->listens_busy |= uint64_t(1) << slot;
    abi::ViConnInfo* info = &nic->info[kMaxVi + slot];
    uint64_t token = kTokenBit | ++nic->next_token;
    abi::SqEntry e{};
    e.opcode = abi::kOpViListen;
    e.access = LocalAddr->DiscriminatorLen;
    e.src_addr = reinterpret_cast<uintptr_t>(info);
    e.src_key = nic->info_key;
    e.user_data = token;
    std::optional<abi::CqEntry> c;
    if (post_entry(*nic, e, discriminator(LocalAddr), LocalAddr->DiscriminatorLen) == VIP_SUCCESS) {
      c = wait_token(*nic, lock, token, Deadline::after(Timeout));
      if (!c) {
        abi::SqEntry x{};
        x.opcode = abi::kOpViCancel;
        x.flags = abi::kSqViListen;
        x.src_addr = token;
        (void)run(*nic, x);
        c = wait_token(*nic, lock, token, Deadline::nic_op(*nic));
      }
    }
    abi::ViConnInfo got = *info;
    nic->listens_busy &= ~(uint64_t(1) << slot);
    if (!c || c->status == abi::kCqViCancelled) return VIP_TIMEOUT;
    if (c->status != abi::kCqOk) return VIP_ERROR_RESOURCE;
    auto conn = std::make_unique<Conn>();
    conn->nic = nic;
    conn->id = c->result;
    conn->info = got;
    void* h = handles().add(Kind::kConn, conn.get());
    conn->handle = h;
    nic->conns.emplace(h, std::move(conn));
    RemoteAddr->HostAddressLen = kNicAddressLen;
    RemoteAddr->HostAddress[0] = VIP_UINT8(got.node & 0xff);
    RemoteAddr->HostAddress[1] = VIP_UINT8(got.node >> 8);
    RemoteAddr->DiscriminatorLen = VIP_UINT16(got.disc_len);
    std::memcpy(RemoteAddr->HostAddress + kNicAddressLen, got.disc, got.disc_len);
    *RemoteViAttributes = attributes_of(got);
    *ConnHandle = h;
    return VIP_SUCCESS;
  });
}

namespace {
// Ends a connection handle (after Accept or Reject).
void drop_conn(NicState& nic, Conn* conn) {
  handles().remove(conn->handle);
  nic.conns.erase(conn->handle);
}
}  // namespace

VIP_RETURN VipConnectAccept(VIP_CONN_HANDLE ConnHandle, VIP_VI_HANDLE ViHandle) {
  return guarded([&] {
    Conn* conn = lookup<Conn>(ConnHandle, Kind::kConn);
    Vi* vi = lookup<Vi>(ViHandle, Kind::kVi);
    if (!conn || !vi || vi->nic != conn->nic) return VIP_INVALID_PARAMETER;
    NicState& nic = *conn->nic;
    Lock lock(nic.mu);
    if (vi->state != VIP_STATE_IDLE) return VIP_INVALID_STATE;
    if (vi->attrs.ReliabilityLevel != (conn->info.attrs & abi::kViAttrReliabilityMask))
      return VIP_INVALID_RELIABILITY_LEVEL;
    abi::SqEntry e{};
    e.opcode = abi::kOpViAccept;
    e.dst_slot = uint16_t(vi->index);
    e.dst_key = conn->id;
    auto c = run(nic, e);
    if (!c) return VIP_ERROR_RESOURCE;
    switch (c->status) {
      case abi::kCqOk:
        vi->state = VIP_STATE_CONNECTED;
        vi->remote = attributes_of(conn->info);
        drop_conn(nic, conn);
        return VIP_SUCCESS;
      case abi::kCqViMismatch:
        return VIP_INVALID_RELIABILITY_LEVEL;
      case abi::kCqViBadVi:
        return VIP_INVALID_STATE;
      default:  // the client gave up meanwhile
        drop_conn(nic, conn);
        return VIP_TIMEOUT;
    }
  });
}

VIP_RETURN VipConnectReject(VIP_CONN_HANDLE ConnHandle) {
  return guarded([&] {
    Conn* conn = lookup<Conn>(ConnHandle, Kind::kConn);
    if (!conn) return VIP_INVALID_PARAMETER;
    NicState& nic = *conn->nic;
    Lock lock(nic.mu);
    abi::SqEntry e{};
    e.opcode = abi::kOpViReject;
    e.dst_key = conn->id;
    (void)run(nic, e);  // a client that gave up is rejected already
    drop_conn(nic, conn);
    return VIP_SUCCESS;
  });
}

VIP_RETURN VipConnectRequest(VIP_VI_HANDLE ViHandle, VIP_NET_ADDRESS* LocalAddr, VIP_NET_ADDRESS* RemoteAddr,
                             VIP_ULONG Timeout, VIP_VI_ATTRIBUTES* RemoteViAttributes) {
  return guarded([&] {
    Vi* vi = lookup<Vi>(ViHandle, Kind::kVi);
    if (!vi || !RemoteViAttributes) return VIP_INVALID_PARAMETER;
    NicState& nic = *vi->nic;
    Lock lock(nic.mu);
    if (VIP_RETURN rc = check_request(vi, LocalAddr, RemoteAddr); rc != VIP_SUCCESS) return rc;
    uint64_t token = start_connect(nic, *vi, node_of(RemoteAddr), RemoteAddr, false);
    if (!token) return VIP_ERROR_RESOURCE;
    auto c = wait_token(nic, lock, token, Deadline::after(Timeout));
    if (!c) c = cancel_connect(nic, lock, *vi, token);
    return finish_connect(nic, *vi, c, RemoteViAttributes, false);
  });
}

VIP_RETURN VipConnectPeerRequest(VIP_VI_HANDLE ViHandle, VIP_NET_ADDRESS* LocalAddr, VIP_NET_ADDRESS* RemoteAddr,
                                 VIP_ULONG Timeout) {
  return guarded([&] {
    Vi* vi = lookup<Vi>(ViHandle, Kind::kVi);
    if (!vi) return VIP_INVALID_PARAMETER;
    NicState& nic = *vi->nic;
    Lock lock(nic.mu);
    if (VIP_RETURN rc = check_request(vi, LocalAddr, RemoteAddr); rc != VIP_SUCCESS) return rc;
    uint64_t token = start_connect(nic, *vi, node_of(RemoteAddr), RemoteAddr, true);
    if (!token) return VIP_ERROR_RESOURCE;
    Deadline d = Deadline::after(Timeout);
    vi->peer_token = token;
    vi->peer_forever = d.forever;
    vi->peer_deadline = d.at;
    return VIP_SUCCESS;
  });
}

VIP_RETURN VipConnectPeerDone(VIP_VI_HANDLE ViHandle, VIP_VI_ATTRIBUTES* RemoteViAttributes) {
  return guarded([&] {
    Vi* vi = lookup<Vi>(ViHandle, Kind::kVi);
    if (!vi || !RemoteViAttributes) return VIP_INVALID_PARAMETER;
    Lock lock(vi->nic->mu);
    return peer_done(*vi, lock, RemoteViAttributes);
  });
}

VIP_RETURN VipConnectPeerWait(VIP_VI_HANDLE ViHandle, VIP_VI_ATTRIBUTES* RemoteViAttributes) {
  return guarded([&] {
    Vi* vi = lookup<Vi>(ViHandle, Kind::kVi);
    if (!vi || !RemoteViAttributes) return VIP_INVALID_PARAMETER;
    NicState& nic = *vi->nic;
    Lock lock(nic.mu);
    for (;;) {
      VIP_RETURN rc = peer_done(*vi, lock, RemoteViAttributes);
      if (rc != VIP_NOT_DONE) return rc;
      Deadline d{vi->peer_forever, vi->peer_deadline, std::nullopt};
      sleep_on(nic, lock, d);
    }
  });
}

VIP_RETURN VipDisconnect(VIP_VI_HANDLE ViHandle) {
  return guarded([&] {
    Vi* vi = lookup<Vi>(ViHandle, Kind::kVi);
    if (!vi) return VIP_INVALID_PARAMETER;
    NicState& nic = *vi->nic;
    Lock lock(nic.mu);
    progress(nic);
    if (vi->state == VIP_STATE_IDLE) return VIP_INVALID_STATE;
    abi::SqEntry e{};
    e.opcode = abi::kOpViDisconnect;
    e.dst_slot = uint16_t(vi->index);
    auto c = run(nic, e);
    progress(nic);  // the flushed descriptors' completions (and a peer connect's)
    if (vi->peer_token) {
      nic.results.erase(vi->peer_token);
      vi->peer_token = 0;
    }
    vi->state = VIP_STATE_IDLE;
    return c && c->status == abi::kCqOk ? VIP_SUCCESS : VIP_ERROR_RESOURCE;
  });
}
