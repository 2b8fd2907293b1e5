// libvipl, the control plane: VIPL 1.0 calls that need nothing from the NIC
// but what libulnic's core already gives (a slot, registration, waits).
//
//   NICs           VipOpenNic, VipCloseNic, VipQueryNic
//   protection     VipCreatePtag, VipDestroyPtag
//   memory         VipRegisterMem, VipDeregisterMem, VipQueryMem, VipSetMemAttributes
//   CQs            VipCreateCQ, VipResizeCQ, VipDestroyCQ, VipCQDone, VipCQWait
//   VIs            VipCreateVi, VipDestroyVi, VipQueryVi, VipSetViAttributes
//   errors         VipErrorCallback
//   names          VipNSInit, VipNSGetHostByName, VipNSGetHostByAddr, VipNSShutdown
//   management     VipQuerySystemManagementInfo (VIP_SMI_AUTODISCOVERY)
//
// The data path (posting, completions, connections, RDMA) is in
// datapath.cpp.
//
// Choices the spec leaves to the provider, beyond those vipl.h states:
//   - Handles are table entries, never raw pointers: NULL, stale (destroyed)
//     and foreign (another kind, another NIC) handles give
//     VIP_INVALID_PARAMETER (VIP_INVALID_PTAG where a ptag is an attribute).
//   - VipCloseNic releases everything made on the NIC: VIs (connected ones
//     disconnect, as with VipDisconnect), CQs, registrations (registered
//     pages stay the program's, contents intact), ptags. Their handles
//     become stale.
//   - Destroying a ptag, CQ or VI that something still uses (a registration
//     or VI on the ptag, a VI work queue on the CQ, a VI not idle or with
//     descriptors posted) fails with VIP_INVALID_STATE and changes nothing.
//   - Memory registration is libulnic's (Nic::register_memory): a buffer
//     outside the slot has its touched pages moved into it (a copy and an
//     mmap), and they stay there after VipDeregisterMem, as a driver keeps
//     pages pinned in a registration cache. Registering the same pages
//     again -- the same buffer twice, part of a registered buffer, or a
//     buffer deregistered before and still mapped from the slot -- costs no
//     copy. VipDeregisterMem never reads or writes the program's memory: a
//     region the program has freed or unmapped already, or whose addresses
//     its allocator has mapped anew, deregisters cleanly, and the new
//     mapping is left as it is. Registrations may overlap: a buffer that
//     shares pages with registered ones and reaches past them moves in as
//     one range with them (the NIC moves the registered pages and their
//     registrations, once no send or RDMA operation is in flight). One
//     that lies where a region still registered was unmapped (or mapped
//     anew) cannot be registered (VIP_ERROR_RESOURCE) until that
//     registration goes.
//   - VipQueryMem / VipSetMemAttributes take any address inside the region;
//     VipDeregisterMem takes the address it was registered at.
//     VipSetMemAttributes changes the ptag and the RDMA enables in place
//     (the NIC's registration keeps its key = the memory handle).
//   - VipQuerySystemManagementInfo(VIP_SMI_AUTODISCOVERY): the caller passes
//     NumAdAddrs buffers in ADAddrArray, each with room for NicAddressLen
//     address bytes; every node of this machine's part of the cluster is
//     written (this node included, ascending, DiscriminatorLen 0) and
//     NumAdAddrs set to their number. If they do not all fit, the first
//     NumAdAddrs (the caller's) are written, NumAdAddrs says how many there
//     are, and the call returns VIP_ERROR_RESOURCE. NumberOfHops is not
//     used: every NIC of the fabric is one hop away.
//   - VipOpenNic's device names: "nic<k>" is node k of $ULNIC_CLUSTER; a
//     name $ULNIC_VIA_DEVICE maps ("name=node,name=node", e.g.
//     "/dev/via_eth0=1,clan0=nic1"; node k, nic<k> or node<k>; the first
//     entry for a name counts, a bad one makes the name invalid); M-VIA's
//     device paths "/dev/via_<anything>" (as
//     /dev/via_eth0, /dev/via_lo) open the process's node, $ULNIC_NODE
//     (0 if unset). Anything else is VIP_INVALID_PARAMETER. VipQueryNic
//     names the NIC "nic<k>" whatever name opened it.
//   - The name service needs no VipNSInit (it has no state); VipNSInit and
//     VipNSShutdown only check the NIC handle. VipNSGetHostByName knows, in
//     this order: "node<k>" and "nic<k>" (node k); the names of the
//     cluster's hosts file, <runtime dir>/<cluster>/hosts (one "name node"
//     a line, '#' starts a comment; `ulnic cluster up --names` writes it
//     and a user may write or extend it); this machine's host name
//     (gethostname, or its first label) and "localhost", which mean the
//     node of the NIC handle asked. Names compare without case.
//     VipNSGetHostByAddr writes the node's first name in the hosts file, or
//     "node<k>", and its NUL into Name and sets *NameLen to the bytes used;
//     if *NameLen is too small it sets it to the bytes needed and returns
//     VIP_INVALID_PARAMETER. Node ids up to the fabric's limit (64) resolve
//     whether or not the node is up: it may be on another machine.
//   - Calls on one NIC and its objects are serialized by a lock per NIC
//     (the Notify thread takes it too); blocking calls let go of it while
//     they sleep. VipQueryNic still says ThreadSafe FALSE: the spec's
//     meaning (concurrent posts proceed in parallel) is not what a lock gives.
//   - VipErrorCallback: the handler runs for asynchronous errors only
//     (connection lost, descriptor and RDMA protection errors, a NIC that
//     stops serving the process), from the data path's completion
//     processing, i.e. inside a Done/Wait call on that NIC. Errors of a
//     call are its return code, never a callback. With no handler (or a
//     NULL one) the default handler prints the error on stderr -- except
//     the VIP_ERROR_CONN_LOST of an orderly disconnect by the peer (its
//     process called VipDisconnect or VipCloseNic): that is
//     how every teardown ends on the side that hangs up second, and the
//     default handler says nothing of it. A peer that dies or breaks the
//     connection on an error is still printed. A handler a program sets
//     gets every VIP_ERROR_CONN_LOST, orderly or not, as the spec says.
//   - ULNIC_VIPL_TRACE=1 in the environment prints why a call failed, where
//     libulnic said (e.g. "cannot reach the node daemon").
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <new>
#include <optional>
#include <string_view>
#include <vector>

#include "ulnic/util/runtime_dir.h"
#include "vipl_internal.h"

namespace ulnic::vipl {

// ---- handle table

namespace {
// User-space pointers on 64-bit Linux stay below 2^47; handles live above.
constexpr uintptr_t kHandleTag = sizeof(uintptr_t) >= 8 ? uintptr_t(0x5649) << 48 : 0;
}  // namespace

void* HandleTable::add(Kind kind, void* object) {
  std::lock_guard lock(mu_);
  uintptr_t h = kHandleTag | (++next_ << 3);
  live_.emplace(h, std::make_pair(kind, object));
  return reinterpret_cast<void*>(h);
}

void HandleTable::remove(void* handle) {
  std::lock_guard lock(mu_);
  live_.erase(reinterpret_cast<uintptr_t>(handle));
}

void* HandleTable::find(const void* handle, Kind kind) const {
  if (!handle) return nullptr;
  std::lock_guard lock(mu_);
  auto it = live_.find(reinterpret_cast<uintptr_t>(handle));
  return it != live_.end() && it->second.first == kind ? it->second.second : nullptr;
}

HandleTable& handles() {
  // Never destroyed: a program may still call VIPL from atexit handlers.
  static HandleTable* table = new HandleTable;
  return *table;
}

namespace {
void default_error_handler(VIP_PVOID, VIP_ERROR_DESCRIPTOR* e) {
  std::fprintf(stderr, "vipl: asynchronous error %d on resource %d (NIC %p, VI %p, CQ %p, descriptor %p)\n",
               int(e->ErrorCode), int(e->ResourceCode), e->NicHandle, e->ViHandle, e->CQHandle,
               static_cast<void*>(e->DescriptorPtr));
}
}  // namespace

void trace(const std::string& what) {
  static const bool on = [] {
    const char* v = std::getenv("ULNIC_VIPL_TRACE");
    return v && *v && std::strcmp(v, "0") != 0;
  }();
  if (on) std::fprintf(stderr, "vipl: %s\n", what.c_str());
}

void report_async_error(NicState& nic, VIP_ERROR_DESCRIPTOR& error, bool orderly) {
  error.NicHandle = nic.handle;
  if (nic.on_error) nic.on_error(nic.error_context, &error);
  else if (!orderly) default_error_handler(nullptr, &error);  // a peer that hung up in order is no news
}

namespace {

using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

NicState* nic_of(VIP_NIC_HANDLE h) { return lookup<NicState>(h, Kind::kNic); }
Cq* cq_of(VIP_CQ_HANDLE h) { return lookup<Cq>(h, Kind::kCq); }
Vi* vi_of(VIP_VI_HANDLE h) { return lookup<Vi>(h, Kind::kVi); }
// A ptag of this NIC, or nullptr.
Ptag* ptag_of(const NicState* nic, VIP_PROTECTION_HANDLE h) {
  Ptag* p = lookup<Ptag>(h, Kind::kPtag);
  return p && p->nic == nic ? p : nullptr;
}
// A CQ of this NIC, or nullptr.
Cq* nic_cq(const NicState* nic, VIP_CQ_HANDLE h) {
  Cq* c = cq_of(h);
  return c && c->nic == nic ? c : nullptr;
}

// Makes `object` reachable through a new handle, owned by `owner`.
template <class T>
void* adopt(std::map<void*, std::unique_ptr<T>>& owner, std::unique_ptr<T> object, Kind kind) {
  T* raw = object.get();
  void* h = handles().add(kind, raw);
  raw->handle = h;
  try {
    owner.emplace(h, std::move(object));
  } catch (...) {
    handles().remove(h);
    throw;
  }
  return h;
}

template <class T>
void forget(std::map<void*, std::unique_ptr<T>>& owner, void* handle) {
  handles().remove(handle);
  owner.erase(handle);
}

// A name the program passed: at most 255 bytes before its NUL (host
// names are no longer), else nothing.
std::optional<std::string_view> name_arg(const char* s) {
  if (!s) return std::nullopt;
  std::string_view v(s, ::strnlen(s, 256));
  if (v.size() == 256) return std::nullopt;
  return v;
}

// "<prefix><k>": k a node id of the fabric in plain decimal (no sign, no
// leading zero, no trailing characters).
std::optional<uint32_t> parse_node(std::string_view v, std::string_view prefix = "") {
  if (!v.starts_with(prefix)) return std::nullopt;
  v.remove_prefix(prefix.size());
  if (v.empty() || (v.size() > 1 && v[0] == '0')) return std::nullopt;
  uint32_t k = 0;
  for (char c : v) {
    if (c < '0' || c > '9') return std::nullopt;
    k = k * 10 + uint32_t(c - '0');
    if (k >= abi::kMaxNodes) return std::nullopt;
  }
  return k;
}

std::string cluster_name() {
  const char* c = std::getenv("ULNIC_CLUSTER");
  return c && *c ? c : "default";
}

// Timeouts are milliseconds; VIP_INFINITE and above wait forever.
bool infinite(VIP_ULONG timeout) { return timeout >= VIP_ULONG(VIP_INFINITE); }

VIP_BOOLEAN boolean(bool b) { return b ? VIP_TRUE : VIP_FALSE; }

// ---- memory

uintptr_t page_down(uintptr_t a) { return a & ~uintptr_t(kPage - 1); }
uintptr_t page_up(uintptr_t a) { return (a + kPage - 1) & ~uintptr_t(kPage - 1); }

// The largest region that registers in an empty slot heap at any alignment
// (its pages are moved into the heap, so allow one page of slack), and
// whose length fits a registration's 32-bit length.
VIP_ULONG max_region_bytes(const NicState& nic) {
  uint64_t heap = nic.core->layout().heap_size & ~uint64_t(kPage - 1);
  uint64_t block = heap > kPage ? heap - kPage : 0;
  return VIP_ULONG(std::min<uint64_t>(block, UINT32_MAX));
}

// Every page of [start, end) is mapped in this process (registering moves
// the pages, so they must exist).
bool mapped(uintptr_t start, uintptr_t end) {
  std::vector<unsigned char> resident((end - start) / kPage);
  return ::mincore(reinterpret_cast<void*>(start), end - start, resident.data()) == 0;
}

uint32_t access_bits(bool rdma_write, bool rdma_read) {
  return abi::kAccessLocal | (rdma_write ? uint32_t(abi::kAccessRemoteWrite) : 0u) |
         (rdma_read ? uint32_t(abi::kAccessRemoteRead) : 0u);
}

// Drops the NIC's registration and the library's record of it. Nothing of
// the program's memory is read or written (Nic::deregister): the region may
// be freed or unmapped already. If the NIC does not answer (it was
// reflashed, or cut this slot off) the registration is gone with it anyway.
void drop_region(NicState& nic, std::map<uint32_t, Region>::iterator it) {
  Region& r = it->second;
  if (auto d = nic.core->deregister(r.pages); !d) trace(d.error().message);
  --r.ptag->users;
  nic.regions.erase(it);
}

// The registration `handle` if `address` lies in it.
Region* region_at(NicState& nic, VIP_MEM_HANDLE handle, const void* address) {
  auto it = nic.regions.find(handle);
  if (it == nic.regions.end()) return nullptr;
  auto a = reinterpret_cast<uintptr_t>(address), va = reinterpret_cast<uintptr_t>(it->second.va);
  return a >= va && a - va < it->second.length ? &it->second : nullptr;
}

// ---- VIs

// Validates VI attributes for `nic`; on success *ptag is the VI's ptag.
VIP_RETURN check_vi_attributes(const NicState& nic, const VIP_VI_ATTRIBUTES& a, Ptag** ptag) {
  VIP_RELIABILITY_LEVEL level = a.ReliabilityLevel;
  bool one_level = level == VIP_SERVICE_UNRELIABLE || level == VIP_SERVICE_RELIABLE_DELIVERY ||
                   level == VIP_SERVICE_RELIABLE_RECEPTION;
  if (!one_level || !(level & kReliabilitySupport)) return VIP_INVALID_RELIABILITY_LEVEL;
  if (a.MaxTransferSize > kMaxTransferSize) return VIP_INVALID_MTU;
  *ptag = ptag_of(&nic, a.Ptag);
  if (!*ptag) return VIP_INVALID_PTAG;
  if (a.EnableRdmaRead && !(level & kRdmaReadSupport)) return VIP_INVALID_RDMAREAD;
  return VIP_SUCCESS;
}

void use_cq(Cq* cq, int delta) {
  if (cq) cq->users += delta;
}

// ---- device names, the name service and discovery

std::string env_string(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

// The node VipOpenNic opens for `device`: "nic<k>"; a name $ULNIC_VIA_DEVICE
// maps ("name=node,name=node", e.g. "/dev/via_eth0=1"; node k, nic<k> or
// node<k>; the first entry for a name counts); an M-VIA device path
// "/dev/via_<anything>": the process's node, $ULNIC_NODE (0 if unset).
std::optional<uint32_t> device_node(std::string_view device) {
  if (auto k = parse_node(device, "nic")) return k;
  const std::string aliases = env_string("ULNIC_VIA_DEVICE");
  for (size_t at = 0; at < aliases.size();) {
    size_t end = std::min(aliases.find(',', at), aliases.size());
    std::string_view item = std::string_view(aliases).substr(at, end - at);
    size_t eq = item.rfind('=');
    if (eq != std::string_view::npos && eq > 0 && item.substr(0, eq) == device) {
      const std::string_view node = item.substr(eq + 1);  // k, nic<k> or node<k>
      if (auto k = parse_node(node)) return k;
      if (auto k = parse_node(node, "nic")) return k;
      return parse_node(node, "node");
    }
    at = end + 1;
  }
  constexpr std::string_view kMviaDevice = "/dev/via_";
  if (device.size() > kMviaDevice.size() && device.starts_with(kMviaDevice)) {
    const std::string own = env_string("ULNIC_NODE");
    return own.empty() ? std::optional<uint32_t>(0) : parse_node(own);
  }
  return std::nullopt;
}

bool same_name(std::string_view a, std::string_view b) {  // host names: case does not count
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) == std::tolower(static_cast<unsigned char>(y));
         });
}

// The names of the cluster's nodes, in file order: <runtime dir>/<cluster>/hosts
// (emulator/board/runtime.h), one "name node" a line, '#' to the end of a
// line a comment; written by `ulnic cluster up --names`, and by users.
std::vector<std::pair<std::string, uint32_t>> host_names(const std::string& cluster) {
  std::vector<std::pair<std::string, uint32_t>> names;
  std::FILE* f = std::fopen((runtime_base_dir() + "/" + cluster + "/hosts").c_str(), "re");
  if (!f) return names;
  char line[512];
  while (std::fgets(line, sizeof line, f)) {
    line[std::strcspn(line, "#\n")] = 0;
    char name[256], node[16], extra;
    if (std::sscanf(line, "%255s %15s %c", name, node, &extra) != 2) continue;
    auto k = parse_node(node);
    if (!k) k = parse_node(node, "node");
    if (k) names.emplace_back(name, *k);
  }
  std::fclose(f);
  return names;
}

// The node a name service name means to `nic`: "node<k>" or "nic<k>"; a name
// of the hosts file; this machine's host name (or its first label) and
// "localhost": the NIC's own node.
std::optional<uint32_t> resolve(const NicState& nic, std::string_view name) {
  if (auto k = parse_node(name, "node")) return k;
  if (auto k = parse_node(name, "nic")) return k;
  for (const auto& [known, node] : host_names(nic.cluster))
    if (same_name(known, name)) return node;
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) != 0) host[0] = 0;
  std::string_view self(host), label = self.substr(0, self.find('.'));
  if (same_name(name, "localhost") || (!self.empty() && (same_name(name, self) || same_name(name, label))))
    return nic.node;
  return std::nullopt;
}

void write_address(VIP_NET_ADDRESS* a, uint32_t node) {
  a->HostAddressLen = kNicAddressLen;
  a->HostAddress[0] = VIP_UINT8(node & 0xff);
  a->HostAddress[1] = VIP_UINT8(node >> 8);
}

// The nodes of `cluster` on this machine whose daemon is up, ascending:
// <runtime dir>/<cluster>/node<k>/ulnicd.sock (emulator/board/runtime.h).
std::vector<uint32_t> cluster_nodes(const std::string& cluster) {
  namespace fs = std::filesystem;
  std::vector<uint32_t> nodes;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(runtime_base_dir() + "/" + cluster, ec)) {
    std::string name = entry.path().filename().string();
    auto k = parse_node(name, "node");
    if (!k || !entry.is_directory(ec)) continue;
    if (fs::is_socket(daemon_socket_path(cluster, *k), ec)) nodes.push_back(*k);
  }
  std::sort(nodes.begin(), nodes.end());
  return nodes;
}

}  // namespace
}  // namespace ulnic::vipl

using namespace ulnic::vipl;
namespace abi = ulnic::abi;

// =========================================================================
// NICs

VIP_RETURN VipOpenNic(const VIP_CHAR* DeviceName, VIP_NIC_HANDLE* NicHandle) {
  return guarded([&] {
    if (!NicHandle) return VIP_INVALID_PARAMETER;
    auto device = name_arg(DeviceName);
    auto node = device ? device_node(*device) : std::nullopt;
    if (!node) return VIP_INVALID_PARAMETER;
    auto nic = std::make_unique<NicState>();
    nic->cluster = cluster_name();
    nic->node = *node;
    nic->name = "nic" + std::to_string(*node);
    ulnic::NicOptions o;
    o.cluster = nic->cluster;
    o.node = int(*node);
    auto core = ulnic::Nic::open(o);
    if (!core) {
      trace("VipOpenNic(" + nic->name + "): " + core.error().message);
      return VIP_ERROR_RESOURCE;
    }
    nic->core = std::move(*core);
    nic->address[0] = VIP_UINT8(*node & 0xff);
    nic->address[1] = VIP_UINT8(*node >> 8);
    nic->handle = handles().add(Kind::kNic, nic.get());
    *NicHandle = nic->handle;
    nic.release();  // owned through its handle until VipCloseNic
    return VIP_SUCCESS;
  });
}

VIP_RETURN VipCloseNic(VIP_NIC_HANDLE NicHandle) {
  return guarded([&] {
    NicState* nic = nic_of(NicHandle);
    if (!nic) return VIP_INVALID_PARAMETER;
    {
      // Stop the notify thread first: it uses the objects below.
      std::unique_lock lock(nic->mu);
      nic->stopping = true;
    }
    if (nic->notifier.joinable()) nic->notifier.join();
    // Connections end in order (their peers hear an orderly disconnect, as
    // after VipDisconnect), not as a process that went away.
    if (nic->core->state() == abi::SlotState::kActive)
      for (const auto& [h, vi] : nic->vis)
        if (vi->state != VIP_STATE_IDLE) nic_destroy_vi(*nic, *vi);
    for (const auto& [h, conn] : nic->conns) handles().remove(h);
    for (const auto& [h, vi] : nic->vis) handles().remove(h);
    for (const auto& [h, cq] : nic->cqs) handles().remove(h);
    for (const auto& [h, ptag] : nic->ptags) handles().remove(h);
    handles().remove(nic->handle);
    // The registrations end with the slot; ~Nic gives the program its moved
    // pages back, then detaches the slot.
    delete nic;
    return VIP_SUCCESS;
  });
}

VIP_RETURN VipQueryNic(VIP_NIC_HANDLE NicHandle, VIP_NIC_ATTRIBUTES* Attributes) {
  return guarded([&] {
    NicState* nic = nic_of(NicHandle);
    if (!nic || !Attributes) return VIP_INVALID_PARAMETER;
    VIP_NIC_ATTRIBUTES& a = *Attributes;
    std::memset(&a, 0, sizeof a);
    std::snprintf(a.Name, sizeof a.Name, "%s", nic->name.c_str());
    a.HardwareVersion = ULNIC_ABI_VERSION;
    a.ProviderVersion = kProviderVersion;
    a.NicAddressLen = kNicAddressLen;
    a.LocalNicAddress = nic->address;  // valid until VipCloseNic
    a.ThreadSafe = VIP_FALSE;
    a.MaxDiscriminatorLen = kMaxDiscriminatorLen;
    a.MaxRegisterBytes = VIP_ULONG(nic->core->layout().heap_size);
    a.MaxRegisterRegions = abi::kMaxRegistrations;
    a.MaxRegisterBlockBytes = max_region_bytes(*nic);
    a.MaxVI = kMaxVi;
    a.MaxDescriptorsPerQueue = kMaxDescriptorsPerQueue;
    a.MaxSegmentsPerDesc = kMaxSegmentsPerDesc;
    a.MaxCQ = kMaxCq;
    a.MaxCQEntries = kMaxCqEntries;
    a.MaxTransferSize = kMaxTransferSize;
    a.NativeMTU = abi::kMtu;
    a.MaxPtags = kMaxPtags;
    a.ReliabilityLevelSupport = kReliabilitySupport;
    a.RDMAReadSupport = kRdmaReadSupport;
    return VIP_SUCCESS;
  });
}

// =========================================================================
// Protection tags

VIP_RETURN VipCreatePtag(VIP_NIC_HANDLE NicHandle, VIP_PROTECTION_HANDLE* ProtectionTag) {
  return guarded([&] {
    NicState* nic = nic_of(NicHandle);
    if (!nic || !ProtectionTag) return VIP_INVALID_PARAMETER;
    if (nic->ptags.size() >= kMaxPtags) return VIP_ERROR_RESOURCE;
    auto p = std::make_unique<Ptag>();
    p->nic = nic;
    p->id = ++nic->next_ptag_id;
    *ProtectionTag = adopt(nic->ptags, std::move(p), Kind::kPtag);
    return VIP_SUCCESS;
  });
}

VIP_RETURN VipDestroyPtag(VIP_NIC_HANDLE NicHandle, VIP_PROTECTION_HANDLE ProtectionTag) {
  return guarded([&] {
    NicState* nic = nic_of(NicHandle);
    if (!nic) return VIP_INVALID_PARAMETER;
    Ptag* p = ptag_of(nic, ProtectionTag);
    if (!p) return VIP_INVALID_PARAMETER;
    if (p->users) return VIP_INVALID_STATE;
    forget(nic->ptags, ProtectionTag);
    return VIP_SUCCESS;
  });
}

// =========================================================================
// Memory registration

VIP_RETURN VipRegisterMem(VIP_NIC_HANDLE NicHandle, VIP_PVOID VirtualAddress, VIP_ULONG Length,
                          VIP_MEM_ATTRIBUTES* MemAttributes, VIP_MEM_HANDLE* MemHandle) {
  return guarded([&] {
    NicState* nic = nic_of(NicHandle);
    if (!nic || !VirtualAddress || Length == 0 || !MemAttributes || !MemHandle) return VIP_INVALID_PARAMETER;
    std::lock_guard lock(nic->mu);
    auto va = reinterpret_cast<uintptr_t>(VirtualAddress);
    if (va + Length < va || page_up(va + Length) < va) return VIP_INVALID_PARAMETER;
    Ptag* ptag = ptag_of(nic, MemAttributes->Ptag);
    if (!ptag) return VIP_INVALID_PTAG;
    if (Length > max_region_bytes(*nic) || nic->regions.size() >= abi::kMaxRegistrations) return VIP_ERROR_RESOURCE;
    if (!mapped(page_down(va), page_up(va + Length))) return VIP_INVALID_PARAMETER;
    bool rdma_write = MemAttributes->EnableRdmaWrite, rdma_read = MemAttributes->EnableRdmaRead;
    uint32_t access = access_bits(rdma_write, rdma_read);

    // libulnic moves the pages in, or finds them in the slot already (the
    // same buffer registered again, before or after its deregistration).
    auto pages = nic->core->register_memory(VirtualAddress, Length, access, ptag->id);
    if (!pages) {
      trace("VipRegisterMem: " + pages.error().message);
      return VIP_ERROR_RESOURCE;
    }
    const uint32_t key = pages->key;
    Region& region = nic->regions[key];
    region = Region{VirtualAddress, Length, key, ptag, rdma_write, rdma_read, *pages};
    ++ptag->users;
    *MemHandle = key;
    return VIP_SUCCESS;
  });
}

VIP_RETURN VipDeregisterMem(VIP_NIC_HANDLE NicHandle, VIP_PVOID VirtualAddress, VIP_MEM_HANDLE MemHandle) {
  return guarded([&] {
    NicState* nic = nic_of(NicHandle);
    if (!nic) return VIP_INVALID_PARAMETER;
    std::lock_guard lock(nic->mu);
    auto it = nic->regions.find(MemHandle);
    if (it == nic->regions.end() || it->second.va != VirtualAddress) return VIP_INVALID_PARAMETER;
    drop_region(*nic, it);
    return VIP_SUCCESS;
  });
}

VIP_RETURN VipQueryMem(VIP_NIC_HANDLE NicHandle, VIP_PVOID Address, VIP_MEM_HANDLE MemHandle,
                       VIP_MEM_ATTRIBUTES* MemAttributes) {
  return guarded([&] {
    NicState* nic = nic_of(NicHandle);
    if (!nic || !MemAttributes) return VIP_INVALID_PARAMETER;
    const Region* r = region_at(*nic, MemHandle, Address);
    if (!r) return VIP_INVALID_PARAMETER;
    MemAttributes->Ptag = r->ptag->handle;
    MemAttributes->EnableRdmaWrite = boolean(r->rdma_write);
    MemAttributes->EnableRdmaRead = boolean(r->rdma_read);
    return VIP_SUCCESS;
  });
}

VIP_RETURN VipSetMemAttributes(VIP_NIC_HANDLE NicHandle, VIP_PVOID Address, VIP_MEM_HANDLE MemHandle,
                               VIP_MEM_ATTRIBUTES* MemAttributes) {
  return guarded([&] {
    NicState* nic = nic_of(NicHandle);
    if (!nic || !MemAttributes) return VIP_INVALID_PARAMETER;
    std::lock_guard lock(nic->mu);
    Region* r = region_at(*nic, MemHandle, Address);
    if (!r) return VIP_INVALID_PARAMETER;
    Ptag* ptag = ptag_of(nic, MemAttributes->Ptag);
    if (!ptag) return VIP_INVALID_PTAG;
    // The NIC changes its registration in place: the key (= the handle) stays.
    bool rdma_write = MemAttributes->EnableRdmaWrite, rdma_read = MemAttributes->EnableRdmaRead;
    abi::SqEntry e{};
    e.opcode = abi::kOpRegister;
    e.src_key = r->key;
    e.access = access_bits(rdma_write, rdma_read);
    e.dst_node = ptag->id;
    auto c = nic->core->run(e);
    if (!c || c->status != abi::kCqOk) return VIP_ERROR_RESOURCE;
    r->rdma_write = rdma_write;
    r->rdma_read = rdma_read;
    --r->ptag->users;
    ++ptag->users;
    r->ptag = ptag;
    return VIP_SUCCESS;
  });
}

// =========================================================================
// Completion queues

VIP_RETURN VipCreateCQ(VIP_NIC_HANDLE NicHandle, VIP_ULONG EntryCount, VIP_CQ_HANDLE* CQHandle) {
  return guarded([&] {
    NicState* nic = nic_of(NicHandle);
    if (!nic || !CQHandle || EntryCount == 0 || EntryCount > kMaxCqEntries) return VIP_INVALID_PARAMETER;
    if (nic->cqs.size() >= kMaxCq) return VIP_ERROR_RESOURCE;
    auto cq = std::make_unique<Cq>();
    cq->nic = nic;
    cq->capacity = EntryCount;
    *CQHandle = adopt(nic->cqs, std::move(cq), Kind::kCq);
    return VIP_SUCCESS;
  });
}

VIP_RETURN VipDestroyCQ(VIP_CQ_HANDLE CQHandle) {
  return guarded([&] {
    Cq* cq = cq_of(CQHandle);
    if (!cq) return VIP_INVALID_PARAMETER;
    std::lock_guard lock(cq->nic->mu);
    if (cq->users) return VIP_INVALID_STATE;
    forget(cq->nic->cqs, CQHandle);
    return VIP_SUCCESS;
  });
}

VIP_RETURN VipResizeCQ(VIP_CQ_HANDLE CQHandle, VIP_ULONG EntryCount) {
  return guarded([&] {
    Cq* cq = cq_of(CQHandle);
    if (!cq || EntryCount == 0 || EntryCount > kMaxCqEntries) return VIP_INVALID_PARAMETER;
    std::lock_guard lock(cq->nic->mu);
    if (EntryCount < cq->entries.size()) return VIP_INVALID_PARAMETER;  // would drop completions
    cq->capacity = EntryCount;
    return VIP_SUCCESS;
  });
}

namespace {
VIP_RETURN cq_done(Cq& cq, VIP_VI_HANDLE* ViHandle, VIP_BOOLEAN* RecvQueue) {
  std::lock_guard lock(cq.nic->mu);
  progress(*cq.nic);
  if (cq.notify) return VIP_INVALID_STATE;
  if (cq.entries.empty()) return VIP_NOT_DONE;
  CqEntry e = cq.entries.front();
  cq.entries.pop_front();
  *ViHandle = e.vi->handle;
  *RecvQueue = boolean(e.recv);
  return VIP_SUCCESS;
}
}  // namespace

VIP_RETURN VipCQDone(VIP_CQ_HANDLE CQHandle, VIP_VI_HANDLE* ViHandle, VIP_BOOLEAN* RecvQueue) {
  NicState* nic = nullptr;
  VIP_RETURN rc = guarded([&] {
    Cq* cq = cq_of(CQHandle);
    if (!cq || !ViHandle || !RecvQueue) return VIP_INVALID_PARAMETER;
    nic = cq->nic;
    return cq_done(*cq, ViHandle, RecvQueue);
  });
  return polled(nic, rc);
}

VIP_RETURN VipCQWait(VIP_CQ_HANDLE CQHandle, VIP_ULONG Timeout, VIP_VI_HANDLE* ViHandle, VIP_BOOLEAN* RecvQueue) {
  return guarded([&] {
    Cq* cq = cq_of(CQHandle);
    if (!cq || !ViHandle || !RecvQueue) return VIP_INVALID_PARAMETER;
    const bool forever = infinite(Timeout);
    const Clock::time_point deadline = forever ? Clock::time_point::max() : Clock::now() + milliseconds(Timeout);
    for (;;) {
      if (VIP_RETURN rc = cq_done(*cq, ViHandle, RecvQueue); rc != VIP_NOT_DONE) return rc;
      Clock::time_point now = Clock::now();
      if (now >= deadline) return VIP_TIMEOUT;
      milliseconds left = forever ? ulnic::Nic::kNoTimeout
                                  : std::chrono::ceil<milliseconds>(deadline - now);
      // The notify thread may take the wake-up: look again soon.
      if (cq->nic->notifier.joinable() && left > milliseconds(10)) left = milliseconds(10);
      // Sleeps until the NIC writes a completion into the slot (or the time
      // is up); the data path turns completions into CQ entries.
      if (auto r = cq->nic->core->wait_ready(left); !r && cq->nic->core->state() != abi::SlotState::kActive) {
        trace("VipCQWait: " + r.error().message);
        return VIP_ERROR_RESOURCE;  // the NIC cut this process off: nothing will complete
      }
    }
  });
}

// =========================================================================
// VIs

VIP_RETURN VipCreateVi(VIP_NIC_HANDLE NicHandle, VIP_VI_ATTRIBUTES* ViAttributes, VIP_CQ_HANDLE SendCQHandle,
                       VIP_CQ_HANDLE RecvCQHandle, VIP_VI_HANDLE* ViHandle) {
  return guarded([&] {
    NicState* nic = nic_of(NicHandle);
    if (!nic || !ViAttributes || !ViHandle) return VIP_INVALID_PARAMETER;
    Cq* send_cq = SendCQHandle ? nic_cq(nic, SendCQHandle) : nullptr;
    Cq* recv_cq = RecvCQHandle ? nic_cq(nic, RecvCQHandle) : nullptr;
    if ((SendCQHandle && !send_cq) || (RecvCQHandle && !recv_cq)) return VIP_INVALID_PARAMETER;
    Ptag* ptag = nullptr;
    if (VIP_RETURN rc = check_vi_attributes(*nic, *ViAttributes, &ptag); rc != VIP_SUCCESS) return rc;
    std::lock_guard lock(nic->mu);
    int index = free_vi_index(*nic);
    if (index < 0) return VIP_ERROR_RESOURCE;
    auto vi = std::make_unique<Vi>();
    vi->nic = nic;
    vi->attrs = *ViAttributes;
    vi->ptag = ptag;
    vi->send.cq = send_cq;
    vi->recv.cq = recv_cq;
    vi->index = uint32_t(index);
    if (!nic_create_vi(*nic, *vi)) return VIP_ERROR_RESOURCE;
    nic->by_index[index] = vi.get();
    *ViHandle = adopt(nic->vis, std::move(vi), Kind::kVi);
    ++ptag->users;
    use_cq(send_cq, +1);
    use_cq(recv_cq, +1);
    return VIP_SUCCESS;
  });
}

VIP_RETURN VipDestroyVi(VIP_VI_HANDLE ViHandle) {
  return guarded([&] {
    Vi* vi = vi_of(ViHandle);
    if (!vi) return VIP_INVALID_PARAMETER;
    std::lock_guard lock(vi->nic->mu);
    progress(*vi->nic);
    if (vi->state != VIP_STATE_IDLE || !vi->send.posted.empty() || !vi->recv.posted.empty())
      return VIP_INVALID_STATE;
    nic_destroy_vi(*vi->nic, *vi);
    vi->nic->by_index[vi->index] = nullptr;
    // Its completions still queued in CQs (flushed descriptors, say) go with it.
    for (Cq* cq : {vi->send.cq, vi->recv.cq})
      if (cq) std::erase_if(cq->entries, [vi](const CqEntry& e) { return e.vi == vi; });
    --vi->ptag->users;
    use_cq(vi->send.cq, -1);
    use_cq(vi->recv.cq, -1);
    forget(vi->nic->vis, ViHandle);
    return VIP_SUCCESS;
  });
}

VIP_RETURN VipQueryVi(VIP_VI_HANDLE ViHandle, VIP_VI_STATE* State, VIP_VI_ATTRIBUTES* Attributes,
                      VIP_BOOLEAN* SendQueueEmpty, VIP_BOOLEAN* RecvQueueEmpty) {
  return guarded([&] {
    Vi* vi = vi_of(ViHandle);
    if (!vi || !State || !Attributes || !SendQueueEmpty || !RecvQueueEmpty) return VIP_INVALID_PARAMETER;
    std::lock_guard lock(vi->nic->mu);
    progress(*vi->nic);  // a connection lost meanwhile shows in the state
    *State = vi->state;
    *Attributes = vi->attrs;
    *SendQueueEmpty = boolean(vi->send.posted.empty());
    *RecvQueueEmpty = boolean(vi->recv.posted.empty());
    return VIP_SUCCESS;
  });
}

VIP_RETURN VipSetViAttributes(VIP_VI_HANDLE ViHandle, VIP_VI_ATTRIBUTES* Attributes) {
  return guarded([&] {
    Vi* vi = vi_of(ViHandle);
    if (!vi || !Attributes) return VIP_INVALID_PARAMETER;
    std::lock_guard lock(vi->nic->mu);
    progress(*vi->nic);
    if (vi->state != VIP_STATE_IDLE) return VIP_INVALID_STATE;
    Ptag* ptag = nullptr;
    if (VIP_RETURN rc = check_vi_attributes(*vi->nic, *Attributes, &ptag); rc != VIP_SUCCESS) return rc;
    // The NIC's VI is made again with the new attributes (it is Idle).
    Vi next = Vi{};
    next.index = vi->index;
    next.attrs = *Attributes;
    next.ptag = ptag;
    nic_destroy_vi(*vi->nic, *vi);
    if (!nic_create_vi(*vi->nic, next)) {
      nic_create_vi(*vi->nic, *vi);
      return VIP_ERROR_RESOURCE;
    }
    --vi->ptag->users;
    ++ptag->users;
    vi->ptag = ptag;
    vi->attrs = *Attributes;
    return VIP_SUCCESS;
  });
}

// =========================================================================
// Errors and system management

VIP_RETURN VipErrorCallback(VIP_NIC_HANDLE NicHandle, VIP_PVOID Context,
                            void (*Handler)(VIP_PVOID Context, VIP_ERROR_DESCRIPTOR* ErrorDesc)) {
  return guarded([&] {
    NicState* nic = nic_of(NicHandle);
    if (!nic) return VIP_INVALID_PARAMETER;
    nic->on_error = Handler;
    nic->error_context = Context;
    return VIP_SUCCESS;
  });
}

VIP_RETURN VipQuerySystemManagementInfo(VIP_NIC_HANDLE NicHandle, VIP_ULONG InfoType, VIP_PVOID SysManInfo) {
  return guarded([&] {
    NicState* nic = nic_of(NicHandle);
    if (!nic || InfoType != VIP_SMI_AUTODISCOVERY || !SysManInfo) return VIP_INVALID_PARAMETER;
    auto* list = static_cast<VIP_AUTODISCOVERY_LIST*>(SysManInfo);
    std::vector<uint32_t> nodes = cluster_nodes(nic->cluster);
    size_t n = std::min<size_t>(nodes.size(), list->NumAdAddrs);
    if (n && !list->ADAddrArray) return VIP_INVALID_PARAMETER;
    for (size_t i = 0; i < n; ++i)
      if (!list->ADAddrArray[i]) return VIP_INVALID_PARAMETER;
    for (size_t i = 0; i < n; ++i) {
      write_address(list->ADAddrArray[i], nodes[i]);
      list->ADAddrArray[i]->DiscriminatorLen = 0;
    }
    list->NumAdAddrs = nodes.size();
    return n < nodes.size() ? VIP_ERROR_RESOURCE : VIP_SUCCESS;
  });
}

// =========================================================================
// Name service (resolve(), host_names()): nothing to start or stop.

VIP_RETURN VipNSInit(VIP_NIC_HANDLE NicHandle, VIP_PVOID) {
  return guarded([&] { return nic_of(NicHandle) ? VIP_SUCCESS : VIP_INVALID_PARAMETER; });
}

VIP_RETURN VipNSShutdown(VIP_NIC_HANDLE NicHandle) {
  return guarded([&] { return nic_of(NicHandle) ? VIP_SUCCESS : VIP_INVALID_PARAMETER; });
}

VIP_RETURN VipNSGetHostByName(VIP_NIC_HANDLE NicHandle, VIP_CHAR* Name, VIP_NET_ADDRESS* Address,
                              VIP_ULONG NameIndex) {
  return guarded([&] {
    NicState* nic = nic_of(NicHandle);
    if (!nic || !Name || !Address) return VIP_INVALID_PARAMETER;
    auto name = name_arg(Name);
    auto node = name ? resolve(*nic, *name) : std::nullopt;
    if (!node || NameIndex != 0) return VIP_ERROR_NAMESERVICE;  // one address per node
    write_address(Address, *node);
    return VIP_SUCCESS;
  });
}

VIP_RETURN VipNSGetHostByAddr(VIP_NIC_HANDLE NicHandle, VIP_NET_ADDRESS* Address, VIP_CHAR* Name,
                              VIP_ULONG* NameLen) {
  return guarded([&] {
    NicState* nic = nic_of(NicHandle);
    if (!nic || !Address || !Name || !NameLen) return VIP_INVALID_PARAMETER;
    if (Address->HostAddressLen != kNicAddressLen) return VIP_ERROR_NAMESERVICE;
    uint32_t node = uint32_t(Address->HostAddress[0]) | uint32_t(Address->HostAddress[1]) << 8;
    if (node >= abi::kMaxNodes) return VIP_ERROR_NAMESERVICE;
    std::string name = "node" + std::to_string(node);  // unless the hosts file names it
    for (const auto& [known, k] : host_names(nic->cluster))
      if (k == node) {
        name = known;
        break;
      }
    VIP_ULONG need = name.size() + 1;
    if (*NameLen < need) {
      *NameLen = need;
      return VIP_INVALID_PARAMETER;
    }
    std::memcpy(Name, name.c_str(), need);
    *NameLen = need;
    return VIP_SUCCESS;
  });
}
