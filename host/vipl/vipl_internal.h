// libvipl's private state: the objects behind the VIPL handles, the handle
// table, and the limits VipQueryNic reports. Only host/vipl/*.cpp includes
// this; programs see vipl.h alone.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>

#include "ulnic/abi/fabric.h"
#include "ulnic/abi/slot.h"
#include "ulnic/abi/vi.h"
#include "ulnic/nic.h"
#include "vipl.h"

namespace ulnic::vipl {

// ---- Limits (VIP_NIC_ATTRIBUTES). Chosen so that the data path that comes
// next (firmware VI tables and work queues) can honour every one of them;
// each is per NIC handle, i.e. per slot, since a VipOpenNic is one slot.

// VIs and CQs: a firmware VI table of 64 entries per slot costs 8 slots x 64
// entries of SRAM, a few tens of KiB of the firmware's 15 MiB.
constexpr VIP_ULONG kMaxVi = 64;
constexpr VIP_ULONG kMaxCq = 64;
// Descriptors posted and not yet completed on one work queue: what the
// firmware tracks per queue (descriptors stay in registered host memory; the
// NIC follows them). 256 is also the slot SQ's capacity (ulnicd's default),
// so a full queue fits the SQ even if every post takes one entry.
constexpr VIP_ULONG kMaxDescriptorsPerQueue = 256;
// A CQ large enough for every work queue of every VI of the NIC: it can
// never overflow, whatever the program attaches to it.
constexpr VIP_ULONG kMaxCqEntries = kMaxVi * 2 * kMaxDescriptorsPerQueue;
// Segments after the control segment (the RDMA address segment included):
// bounds the firmware's work per descriptor.
constexpr VIP_ULONG kMaxSegmentsPerDesc = 16;
// The largest transfer of one descriptor: the firmware's largest single
// copy or put (abi/slot.h), which it moves in kMtu packets.
constexpr VIP_ULONG kMaxTransferSize = abi::kMaxCopyBytes;
constexpr VIP_ULONG kMaxPtags = 64;
// A connection request carries the discriminator in one fabric packet.
constexpr VIP_UINT16 kMaxDiscriminatorLen = 64;
static_assert(kMaxDiscriminatorLen + 64 <= abi::kMtu);
// The fabric is reliable (per-peer sequence numbers, retransmission), and a
// remote put completes only once the receiving NIC has placed every byte:
// that is reliable reception, and the weaker levels come with it. RDMA read
// is offered where the spec allows it, on the reliable levels only.
constexpr VIP_RELIABILITY_LEVEL kReliabilitySupport =
    VIP_SERVICE_UNRELIABLE | VIP_SERVICE_RELIABLE_DELIVERY | VIP_SERVICE_RELIABLE_RECEPTION;
constexpr VIP_RELIABILITY_LEVEL kRdmaReadSupport = VIP_SERVICE_RELIABLE_DELIVERY | VIP_SERVICE_RELIABLE_RECEPTION;
// VipQueryNic: HardwareVersion is the NIC ABI the firmware speaks;
// ProviderVersion is the VIPL version, major << 16 | minor.
constexpr VIP_ULONG kProviderVersion = 0x00010000;
constexpr size_t kPage = 4096;
// Host addresses: the node id, little-endian.
constexpr VIP_UINT16 kNicAddressLen = 2;

// ---- Objects. Each belongs to one NicState, which owns it; a handle names
// it through the handle table, so a stale or foreign handle is detected,
// never dereferenced.

struct NicState;
using ViNotify = void (*)(VIP_PVOID, VIP_NIC_HANDLE, VIP_VI_HANDLE, VIP_DESCRIPTOR*);
using CqNotifyFn = void (*)(VIP_PVOID, VIP_NIC_HANDLE, VIP_VI_HANDLE, VIP_BOOLEAN);

struct Ptag {
  NicState* nic = nullptr;
  VIP_PROTECTION_HANDLE handle = nullptr;
  uint32_t id = 0;     // what the NIC checks (registrations and VIs carry it)
  uint32_t users = 0;  // registrations and VIs tagged with it
};

struct Region {
  void* va = nullptr;
  size_t length = 0;
  uint32_t key = 0;  // the NIC's memory key = the VIP_MEM_HANDLE
  Ptag* ptag = nullptr;
  bool rdma_write = false, rdma_read = false;
  MemRegion pages;   // libulnic's registration (Nic::register_memory)
};

struct Vi;

struct CqEntry {
  Vi* vi;
  bool recv;
};

struct Cq {
  NicState* nic = nullptr;
  VIP_CQ_HANDLE handle = nullptr;
  size_t capacity = 0;
  std::deque<CqEntry> entries;  // completions not yet taken by VipCQDone/Wait
  uint32_t users = 0;           // work queues completing into it
  CqNotifyFn notify = nullptr;  // a pending VipCQNotify
  VIP_PVOID notify_context = nullptr;
};

struct WorkQueue {
  Cq* cq = nullptr;                      // nullptr: completes on the VI only
  std::deque<VIP_DESCRIPTOR*> posted;    // posted, not yet taken by Done/Wait
  ViNotify notify = nullptr;             // a pending VipSend/RecvNotify
  VIP_PVOID notify_context = nullptr;
};

struct Vi {
  NicState* nic = nullptr;
  VIP_VI_HANDLE handle = nullptr;
  VIP_VI_ATTRIBUTES attrs{};
  Ptag* ptag = nullptr;
  VIP_VI_STATE state = VIP_STATE_IDLE;
  WorkQueue send, recv;
  uint32_t index = 0;                    // in the NIC's VI table of this slot
  VIP_VI_ATTRIBUTES remote{};            // the peer's, once connected
  // Peer-to-peer connect in progress (VipConnectPeerRequest).
  uint64_t peer_token = 0;               // its descriptor's user_data (0: none)
  std::chrono::steady_clock::time_point peer_deadline;
  bool peer_forever = false;
};

// A connection request a VipConnectWait took (VIP_CONN_HANDLE).
struct Conn {
  NicState* nic = nullptr;
  void* handle = nullptr;
  uint32_t id = 0;                       // the NIC's connection id
  abi::ViConnInfo info{};
};

struct NicState {
  std::unique_ptr<Nic> core;
  VIP_NIC_HANDLE handle = nullptr;
  std::string cluster;
  uint32_t node = 0;
  std::string name;  // "nic<k>"
  VIP_UINT8 address[kNicAddressLen] = {};
  std::map<VIP_PROTECTION_HANDLE, std::unique_ptr<Ptag>> ptags;
  std::map<VIP_CQ_HANDLE, std::unique_ptr<Cq>> cqs;
  std::map<VIP_VI_HANDLE, std::unique_ptr<Vi>> vis;
  std::map<uint32_t, Region> regions;  // by key
  VIP_ERROR_HANDLER on_error = nullptr;  // nullptr: the default handler
  VIP_PVOID error_context = nullptr;
  uint32_t next_ptag_id = 0;
  // ---- data path (datapath.cpp)
  // Every call on the NIC or its objects holds `mu` (the notify thread
  // too); blocking waits let go of it while they sleep.
  std::recursive_mutex mu;
  Vi* by_index[kMaxVi] = {};             // the NIC's VI table, as the library knows it
  std::map<void*, std::unique_ptr<Conn>> conns;
  std::map<uint64_t, abi::CqEntry> results;  // completions of connect/listen, by user_data
  uint64_t next_token = 0;
  // Where the NIC writes what connects and listens learn: registered slot
  // memory, one ViConnInfo per VI and one per listen in progress.
  abi::ViConnInfo* info = nullptr;
  uint32_t info_key = 0;
  uint64_t listens_busy = 0;             // bit i: info[kMaxVi + i] in use
  uint32_t passive_waiters = 0;          // threads in wait_token's passive wait (poked for results)
  // The notify thread (started by the first Notify call).
  std::thread notifier;
  bool stopping = false;
  uint32_t notifies_pending = 0;
  bool lost = false;                     // the NIC stopped serving our slot (datapath.cpp: nic_lost)
  ~NicState();
};

// ---- The handle table: every live handle of the process, with its kind.
// Handle values are never reused, and on 64-bit hosts carry a tag in the
// top bits that no user-space pointer has, so a stale handle, a handle of
// another kind, or a stray pointer is always told apart from a live one.
enum class Kind : uint8_t { kNic = 1, kPtag, kCq, kVi, kConn };

class HandleTable {
 public:
  void* add(Kind kind, void* object);
  void remove(void* handle);
  // The object behind `handle` if it is live and of `kind`, else nullptr.
  void* find(const void* handle, Kind kind) const;

 private:
  mutable std::mutex mu_;
  std::unordered_map<uintptr_t, std::pair<Kind, void*>> live_;
  uintptr_t next_ = 0;
};

HandleTable& handles();

// The object behind a live handle of `kind`, or nullptr.
template <class T>
T* lookup(const void* handle, Kind kind) {
  return static_cast<T*>(handles().find(handle, kind));
}

// With ULNIC_VIPL_TRACE=1: why a call failed, on stderr.
void trace(const std::string& what);

// No exception crosses the C API: running out of memory is a resource error.
template <class F>
VIP_RETURN guarded(F&& body) noexcept {
  try {
    return body();
  } catch (const std::exception& e) {
    trace(e.what());
    return VIP_ERROR_RESOURCE;
  } catch (...) {
    return VIP_ERROR_RESOURCE;
  }
}

// Hands an asynchronous error to the NIC's VipErrorCallback handler (or the
// default one, which prints it -- except a connection the peer's process
// hung up in order: `orderly`, abi::kEqViOrderly). The data path calls it
// while it processes completions; it fills in NicHandle.
void report_async_error(NicState& nic, VIP_ERROR_DESCRIPTOR& error, bool orderly = false);

// ---- data path (datapath.cpp), for the control plane in vipl.cpp.
// Takes in the NIC's completions and events (call with nic.mu held).
void progress(NicState& nic);
// A non-blocking poll (VipSendDone, VipRecvDone, VipCQDone) returned `rc`:
// tells the NIC's core whether it found something, without nic.mu held
// (Nic::poll_found may block a process that keeps finding nothing). `nic`
// may be null (a bad handle). Returns rc.
VIP_RETURN polled(NicState* nic, VIP_RETURN rc);
// The NIC's side of a VI (create, destroy); false if it refused.
bool nic_create_vi(NicState& nic, Vi& vi);
bool nic_destroy_vi(NicState& nic, Vi& vi);
// A free index in the NIC's VI table, or -1.
int free_vi_index(const NicState& nic);

}  // namespace ulnic::vipl
