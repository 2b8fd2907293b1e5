#include "ulnic/vmmc.hpp"

#include <algorithm>
#include <bit>
#include <cstring>
#include <thread>

namespace ulnic::vmmc {

namespace {
constexpr uintptr_t kPage = 4096;

int from_daemon(uint32_t st) {
  switch (st) {
    case abi::kVmmcOk: return VMMC_OK;
    case abi::kVmmcNoSuchExport: return VMMC_ERR_NO_EXPORT;
    case abi::kVmmcDenied: return VMMC_ERR_DENIED;
    case abi::kVmmcNameTaken: return VMMC_ERR_NAME_TAKEN;
    case abi::kVmmcBadRegion: return VMMC_ERR_BAD_REGION;
    case abi::kVmmcNoResources: return VMMC_ERR_NO_RESOURCES;
    case abi::kVmmcUnreachable: return VMMC_ERR_UNREACHABLE;
    case abi::kVmmcNotImported: return VMMC_ERR_NOT_IMPORTED;
    default: return VMMC_ERR_BAD_REQUEST;
  }
}
}  // namespace

int status_of(uint16_t cq) {
  switch (cq) {
    case abi::kCqOk: return VMMC_OK;
    case abi::kCqNotImported: return VMMC_ERR_NOT_IMPORTED;
    case abi::kCqUnregistered: return VMMC_ERR_NOT_REGISTERED;
    case abi::kCqRemoteRevoked: return VMMC_ERR_REVOKED;
    case abi::kCqRemoteProtection: return VMMC_ERR_PROTECTION;
    case abi::kCqUnreachable: return VMMC_ERR_UNREACHABLE;
    case abi::kCqNoResources: return VMMC_ERR_NO_RESOURCES;
    case abi::kCqBadLength: case abi::kCqBadOpcode: return VMMC_ERR_BAD_REQUEST;
    default: return VMMC_ERR_IO;
  }
}

Result<std::unique_ptr<Endpoint>> Endpoint::open(const NicOptions& opts) {
  auto nic = Nic::open(opts);
  if (!nic) return std::unexpected(nic.error());
  std::unique_ptr<Endpoint> ep(new Endpoint());
  ep->nic_ = std::move(*nic);
  ep->sends_.resize(std::bit_ceil(std::max<size_t>(4096, 2 * size_t(ep->nic_->layout().cq_capacity))));
  return ep;
}

Endpoint::~Endpoint() = default;  // the daemon tears exports and imports down when the slot goes

int Endpoint::fail(int status, std::string why) {
  error_ = std::move(why);
  return status;
}

int Endpoint::export_buffer(const std::string& name, void* buffer, size_t length,
                            const std::vector<vmmc_importer>& allowed, vmmc_notify_fn handler, void* arg) {
  abi::OwnerRequest q{};
  if (name.empty() || name.size() >= sizeof q.name) return fail(VMMC_ERR_BAD_REQUEST, "bad export name");
  if (!buffer || length == 0) return fail(VMMC_ERR_BAD_REQUEST, "empty buffer");
  if (allowed.size() > std::size(q.allowed)) return fail(VMMC_ERR_BAD_REQUEST, "at most 8 importers");
  drain();
  auto region = nic_->register_memory(buffer, length, abi::kAccessLocal | abi::kAccessRemoteWrite);
  if (!region) return fail(VMMC_ERR_BAD_REGION, region.error().message);
  q.type = abi::kReqExport;
  q.key = region->key;
  q.va = reinterpret_cast<uint64_t>(buffer);
  q.length = length;
  q.notify = handler ? 1 : 0;
  q.num_allowed = uint32_t(allowed.size());
  for (size_t i = 0; i < allowed.size(); ++i) q.allowed[i] = {allowed[i].node, allowed[i].pid};
  std::snprintf(q.name, sizeof q.name, "%s", name.c_str());
  auto r = nic_->call_daemon(q);
  int st = !r ? VMMC_ERR_IO : from_daemon(r->status);
  if (st != VMMC_OK) {
    (void)nic_->deregister(*region);
    return fail(st, r ? r->message : r.error().message);
  }
  exports_.push_back(Export{name, r->handle, *region, handler, arg, {}});
  return VMMC_OK;
}

int Endpoint::unexport(const std::string& name) {
  auto it = std::find_if(exports_.begin(), exports_.end(), [&](const Export& e) { return e.name == name; });
  if (it == exports_.end()) return fail(VMMC_ERR_NO_EXPORT, "not exported here: " + name);
  abi::OwnerRequest q{};
  q.type = abi::kReqUnexport;
  std::snprintf(q.name, sizeof q.name, "%s", name.c_str());
  auto r = nic_->call_daemon(q);
  int st = !r ? VMMC_ERR_IO : from_daemon(r->status);
  // Only now may the memory stop being remotely writable.
  drain();
  (void)nic_->deregister(it->region);
  exports_.erase(it);
  return st == VMMC_OK ? VMMC_OK : fail(st, r ? r->message : r.error().message);
}

int Endpoint::import(uint32_t node, const std::string& name, int timeout_ms, vmmc_proxy_t& proxy, size_t& length) {
  abi::OwnerRequest q{};
  if (name.empty() || name.size() >= sizeof q.name) return fail(VMMC_ERR_BAD_REQUEST, "bad export name");
  q.type = abi::kReqImport;
  q.node = node;
  std::snprintf(q.name, sizeof q.name, "%s", name.c_str());
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms < 0 ? 30000 : timeout_ms);
  for (;;) {
    auto r = nic_->call_daemon(q);
    if (!r) return fail(VMMC_ERR_IO, r.error().message);
    int st = from_daemon(r->status);
    if (st == VMMC_OK) {
      proxy = r->proxy;
      length = r->length;
      return VMMC_OK;
    }
    // The exporter may not have exported yet: VMMC's import waits for it.
    if (st != VMMC_ERR_NO_EXPORT || std::chrono::steady_clock::now() >= deadline) return fail(st, r->message);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

int Endpoint::unimport(vmmc_proxy_t proxy) {
  abi::OwnerRequest q{};
  q.type = abi::kReqUnimport;
  q.va = proxy;
  auto r = nic_->call_daemon(q);
  if (!r) return fail(VMMC_ERR_IO, r.error().message);
  int st = from_daemon(r->status);
  return st == VMMC_OK ? VMMC_OK : fail(st, r->message);
}

// User-managed TLB: the NIC finds registrations by virtual address; a
// source the library has not registered yet is registered now (pages
// outside the slot move into it), so a miss costs time, never the send.
int Endpoint::translate(const void* src, size_t n) {
  uintptr_t a = reinterpret_cast<uintptr_t>(src);
  auto covers = [&](const MemRegion& r) {
    uintptr_t ra = reinterpret_cast<uintptr_t>(r.addr);
    return a >= ra && n <= r.length && a - ra <= r.length - n;
  };
  for (const MemRegion& r : tlb_)
    if (covers(r)) return VMMC_OK;
  for (const Export& x : exports_)  // exports are registered with local access too
    if (covers(x.region)) return VMMC_OK;
  ++tlb_misses_;
  drain();  // registering takes the queue to itself (Nic::run)
  uintptr_t start = a & ~(kPage - 1), end = (a + n + kPage - 1) & ~(kPage - 1);
  auto region = nic_->register_memory(reinterpret_cast<void*>(start), end - start, abi::kAccessLocal);
  if (!region) return fail(VMMC_ERR_NOT_REGISTERED, "cannot register the source: " + region.error().message);
  tlb_.push_back(*region);
  return VMMC_OK;
}

// A slot buffer of at least n bytes, registered, that no send in flight
// still reads: for sources that cannot be registered where they are.
int Endpoint::bounce_buffer(size_t n) {
  if (bounce_.key && bounce_.length >= n) {
    while (in_flight(bounce_id_)) {  // its last send must be out first
      if (int st = wait_one(); st != VMMC_OK) return st;
    }
    return VMMC_OK;
  }
  drain();
  if (bounce_.key) {
    void* old = bounce_.addr;
    (void)nic_->deregister(bounce_);
    nic_->free(old);
    bounce_ = MemRegion{};
  }
  size_t size = std::max<size_t>((n + kPage - 1) & ~(kPage - 1), 1 << 20);
  void* p = nic_->alloc(size, kPage);
  if (!p) return fail(VMMC_ERR_NO_RESOURCES, "no room in the slot for a bounce buffer of " + std::to_string(size));
  auto r = nic_->register_memory(p, size, abi::kAccessLocal);
  if (!r) {
    nic_->free(p);
    return fail(VMMC_ERR_NO_RESOURCES, r.error().message);
  }
  bounce_ = *r;
  return VMMC_OK;
}

// Waits until no send is in flight (their verdicts are recorded).
void Endpoint::drain() {
  while (nic_->in_flight() > 0)
    if (wait_one() != VMMC_OK) return;
}

// A send's completion: its verdict waits until asked for.
void Endpoint::record(const abi::CqEntry& c) {
  SendState& s = state_of(c.user_data);
  if (s.id == c.user_data && s.state == State::kInFlight) {
    s.status = status_of(c.status);
    s.state = State::kDone;
  } else {
    spilled_[c.user_data] = status_of(c.status);
  }
}

bool Endpoint::in_flight(vmmc_send_id id) {
  const SendState& s = state_of(id);
  if (s.id == id && s.state != State::kFree) return s.state == State::kInFlight;
  auto it = spilled_.find(id);
  return it != spilled_.end() && it->second == VMMC_PENDING;
}

// Blocks for one completion and records it.
int Endpoint::wait_one() {
  auto c = nic_->wait_owed(std::chrono::milliseconds(30000));
  if (!c) return fail(VMMC_ERR_IO, c.error().message);
  record(*c);
  return VMMC_OK;
}

void Endpoint::reap() {
  abi::CqEntry c;
  while (nic_->poll(c)) record(c);
}

int Endpoint::post(const void* src, vmmc_proxy_t dst, size_t n, int flags, vmmc_send_id& id) {
  if (n == 0 || n > abi::kMaxCopyBytes) return fail(VMMC_ERR_BAD_REQUEST, "send size must be 1 .. 64 MiB");
  if (flags & ~VMMC_NOTIFY) return fail(VMMC_ERR_BAD_REQUEST, "unknown flags");
  bool inline_send = n <= abi::kMaxInline, bounced = false;
  if (!inline_send && translate(src, n) != VMMC_OK) {
    // Pages the library cannot register as they are (no room in the slot
    // heap for them, or pages an earlier registration moved in that the
    // program has since unmapped or mapped anew): the bytes go from a
    // registered slot buffer instead. A copy, never a failed send.
    if (int st = bounce_buffer(n); st != VMMC_OK) return st;
    std::memcpy(bounce_.addr, src, n);
    src = bounce_.addr;
    bounced = true;
    ++bounces_;
  }
  uint32_t need = inline_send ? 1 + uint32_t((n + sizeof(abi::SqEntry) - 1) / sizeof(abi::SqEntry)) : 1;
  // Room for the descriptor (and its inline payload) and for its completion.
  for (;;) {
    reap();
    if (nic_->sq_free() >= need && nic_->in_flight() < nic_->layout().cq_capacity) break;
    if (int st = wait_one(); st != VMMC_OK) return st;
  }
  abi::SqEntry* e = nic_->next_sqe();
  if (!e) return fail(VMMC_ERR_NO_RESOURCES, "send queue full");
  id = next_id_++;
  SendState& s = state_of(id);
  if (s.state != State::kFree)  // the ring came round to a send not asked about (or not even done): keep it
    spilled_[s.id] = s.state == State::kDone ? s.status : VMMC_PENDING;
  s = SendState{id, 0, State::kInFlight};
  e->opcode = inline_send ? abi::kOpSendInline : abi::kOpSend;
  e->flags = (flags & VMMC_NOTIFY) ? abi::kSqNotify : 0;
  e->length = uint32_t(n);
  e->user_data = id;
  e->dst_addr = dst;
  if (inline_send) {
    const uint8_t* p = static_cast<const uint8_t*>(src);
    for (size_t off = 0; off < n; off += sizeof(abi::SqEntry)) {
      abi::SqEntry* c = nic_->next_inline_sqe();
      std::memcpy(c, p + off, std::min(n - off, sizeof(abi::SqEntry)));
    }
  } else {
    e->src_addr = reinterpret_cast<uint64_t>(src);
  }
  nic_->submit();
  if (bounced) bounce_id_ = id;
  return VMMC_OK;
}

int Endpoint::send_async(const void* src, vmmc_proxy_t dst, size_t n, int flags, vmmc_send_id& id) {
  return post(src, dst, n, flags, id);
}

int Endpoint::send_done(vmmc_send_id id) {
  reap();
  SendState& s = state_of(id);
  if (s.id == id && s.state != State::kFree) {
    if (s.state == State::kInFlight) return VMMC_PENDING;
    s.state = State::kFree;  // asked for: forgotten
    return s.status;
  }
  auto it = spilled_.find(id);
  if (it == spilled_.end()) return fail(VMMC_ERR_BAD_REQUEST, "no such send");
  const int st = it->second;
  if (st != VMMC_PENDING) spilled_.erase(it);
  return st;
}

int Endpoint::send_wait(vmmc_send_id id) {
  for (;;) {
    int st = send_done(id);
    if (st != VMMC_PENDING) return st;
    if (int st = wait_one(); st != VMMC_OK) return st;
  }
}

int Endpoint::send(const void* src, vmmc_proxy_t dst, size_t n, int flags) {
  vmmc_send_id id = 0;
  if (int st = post(src, dst, n, flags, id); st != VMMC_OK) return st;
  int st = send_wait(id);
  if (st != VMMC_OK && error_.empty()) error_ = vmmc_strerror(st);
  return st;
}

int Endpoint::redirect(const std::string& name, size_t offset, size_t length, void* buffer) {
  auto it = std::find_if(exports_.begin(), exports_.end(), [&](const Export& e) { return e.name == name; });
  if (it == exports_.end()) return fail(VMMC_ERR_NO_EXPORT, "not exported here: " + name);
  if (!it->handler) return fail(VMMC_ERR_BAD_REQUEST, "redirection needs an export with a handler");
  if (it->redirect.pending) return fail(VMMC_ERR_BAD_REQUEST, "a redirection is pending on " + name);
  if (!buffer || length == 0 || offset > it->region.length || length > it->region.length - offset)
    return fail(VMMC_ERR_BAD_REQUEST, "redirection outside the export");
  if (int st = translate(buffer, length); st != VMMC_OK) return st;
  drain();
  abi::SqEntry e{};
  e.opcode = abi::kOpRedirect;
  e.dst_key = it->handle;
  e.dst_addr = offset;
  e.length = uint32_t(length);
  e.src_addr = reinterpret_cast<uint64_t>(buffer);
  e.src_key = ++redirect_ids_;
  auto c = nic_->run(e);
  if (!c) return fail(VMMC_ERR_IO, c.error().message);
  if (c->status != abi::kCqOk) return fail(status_of(c->status), "the NIC refused the redirection");
  it->redirect = Redirect{true, e.src_key, offset, length, static_cast<uint8_t*>(buffer)};
  return VMMC_OK;
}

// Where an event's bytes are now; nullptr if nowhere we know of.
void* Endpoint::land(Export& x, const abi::EqEntry& ev) {
  Redirect& r = x.redirect;
  uint8_t* in_export = static_cast<uint8_t*>(x.region.addr) + ev.offset;
  if (ev.flags & abi::kEqRedirected) {
    if (!r.pending || r.id != ev.redirect_id) return nullptr;
    r.pending = false;
    ++redirect_hits_;
    return r.buffer + (ev.offset - r.offset);
  }
  bool covered = r.pending && ev.offset >= r.offset && ev.length <= r.length && ev.offset - r.offset <= r.length - ev.length;
  if (!covered) return in_export;
  // The send beat the redirection: take the redirection back and copy --
  // unless a later send has used it meanwhile (its own event will say so).
  drain();
  abi::SqEntry e{};
  e.opcode = abi::kOpRedirect;
  e.dst_key = x.handle;
  auto c = nic_->run(e);
  if (!c || c->status != abi::kCqOk || c->result != 1) return in_export;
  r.pending = false;
  ++redirect_copies_;
  std::memcpy(r.buffer + (ev.offset - r.offset), in_export, ev.length);
  return r.buffer + (ev.offset - r.offset);
}

int Endpoint::poll() {
  reap();  // completions too: what is left in the rings is then news (poll_found)
  const int ran = run_handlers();
  nic_->poll_found(ran > 0);  // a process that keeps finding nothing hands its core to the NIC
  return ran;
}

int Endpoint::poll_send(vmmc_send_id id) {
  const int st = send_done(id);
  nic_->poll_found(st != VMMC_PENDING);
  return st;
}

int Endpoint::run_handlers() {
  int ran = 0;
  abi::EqEntry ev;
  while (nic_->poll_event(ev)) {
    if (ev.type != abi::kEqNotification) continue;
    auto it = std::find_if(exports_.begin(), exports_.end(), [&](const Export& e) { return e.handle == ev.export_handle; });
    if (it == exports_.end() || !it->handler) continue;  // unexported meanwhile
    if (ev.offset > it->region.length || ev.length > it->region.length - ev.offset) continue;
    void* data = land(*it, ev);
    if (!data) continue;
    it->handler(it->arg, data, size_t(ev.offset), ev.length, ev.src_node);
    ++ran;
  }
  return ran;
}

int Endpoint::wait(int timeout_ms) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  for (;;) {
    reap();
    if (int n = run_handlers(); n > 0) return n;
    auto left = Nic::kNoTimeout;
    if (timeout_ms >= 0) {
      // Rounded up: a wait cut short by rounding would look like a failure.
      left = std::chrono::ceil<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return -VMMC_ERR_TIMEOUT;
    }
    if (auto r = nic_->wait_ready(left); !r && nic_->state() != abi::SlotState::kActive) {
      error_ = r.error().message;
      return -VMMC_ERR_IO;
    }
    // Otherwise (ready, or the wait's own timeout): look again; the deadline decides.
  }
}

}  // namespace ulnic::vmmc

// ------------------------------------------------------------------- C API

using ulnic::vmmc::Endpoint;
struct vmmc_endpoint {
  std::unique_ptr<Endpoint> ep;
};

extern "C" {

int vmmc_open(const char* cluster, int node, vmmc_endpoint** out) {
  if (!out) return VMMC_ERR_BAD_REQUEST;
  ulnic::NicOptions o;
  if (cluster) o.cluster = cluster;
  o.node = node;
  auto ep = Endpoint::open(o);
  if (!ep) {
    std::fprintf(stderr, "vmmc_open: %s\n", ep.error().message.c_str());
    return VMMC_ERR_UNREACHABLE;
  }
  *out = new vmmc_endpoint{std::move(*ep)};
  return VMMC_OK;
}

void vmmc_close(vmmc_endpoint* ep) { delete ep; }
int vmmc_node(const vmmc_endpoint* ep) { return int(ep->ep->node()); }
void* vmmc_alloc(vmmc_endpoint* ep, size_t bytes) { return ep->ep->nic().alloc(bytes, 4096); }
void vmmc_free(vmmc_endpoint* ep, void* p) { ep->ep->nic().free(p); }

int vmmc_export(vmmc_endpoint* ep, const char* name, void* buffer, size_t length, const vmmc_importer* allowed,
                size_t num_allowed, vmmc_notify_fn handler, void* arg) {
  if (!name || (num_allowed && !allowed)) return VMMC_ERR_BAD_REQUEST;
  std::vector<vmmc_importer> list(allowed, allowed + num_allowed);
  return ep->ep->export_buffer(name, buffer, length, list, handler, arg);
}
int vmmc_unexport(vmmc_endpoint* ep, const char* name) { return name ? ep->ep->unexport(name) : VMMC_ERR_BAD_REQUEST; }
int vmmc_import(vmmc_endpoint* ep, int node, const char* name, int timeout_ms, vmmc_proxy_t* proxy, size_t* length) {
  if (!name || !proxy || node < 0) return VMMC_ERR_BAD_REQUEST;
  size_t len = 0;
  int st = ep->ep->import(uint32_t(node), name, timeout_ms, *proxy, len);
  if (length) *length = len;
  return st;
}
int vmmc_unimport(vmmc_endpoint* ep, vmmc_proxy_t proxy) { return ep->ep->unimport(proxy); }
int vmmc_send(vmmc_endpoint* ep, const void* src, vmmc_proxy_t dst, size_t nbytes, int flags) {
  return ep->ep->send(src, dst, nbytes, flags);
}
int vmmc_send_async(vmmc_endpoint* ep, const void* src, vmmc_proxy_t dst, size_t nbytes, int flags, vmmc_send_id* id) {
  if (!id) return VMMC_ERR_BAD_REQUEST;
  return ep->ep->send_async(src, dst, nbytes, flags, *id);
}
int vmmc_send_done(vmmc_endpoint* ep, vmmc_send_id id) { return ep->ep->poll_send(id); }
int vmmc_send_wait(vmmc_endpoint* ep, vmmc_send_id id) { return ep->ep->send_wait(id); }
int vmmc_redirect(vmmc_endpoint* ep, const char* name, size_t offset, size_t length, void* buffer) {
  return name ? ep->ep->redirect(name, offset, length, buffer) : VMMC_ERR_BAD_REQUEST;
}
int vmmc_poll(vmmc_endpoint* ep) { return ep->ep->poll(); }
int vmmc_wait(vmmc_endpoint* ep, int timeout_ms) { return ep->ep->wait(timeout_ms); }

const char* vmmc_strerror(int st) {
  switch (st < 0 ? -st : st) {
    case VMMC_OK: return "ok";
    case VMMC_ERR_NO_EXPORT: return "no such export";
    case VMMC_ERR_DENIED: return "import denied by the exporter";
    case VMMC_ERR_NAME_TAKEN: return "export name taken";
    case VMMC_ERR_BAD_REGION: return "buffer cannot be exported";
    case VMMC_ERR_NO_RESOURCES: return "out of resources";
    case VMMC_ERR_UNREACHABLE: return "node unreachable";
    case VMMC_ERR_BAD_REQUEST: return "bad request";
    case VMMC_ERR_NOT_IMPORTED: return "destination outside every import";
    case VMMC_ERR_REVOKED: return "export revoked";
    case VMMC_ERR_PROTECTION: return "receiver refused the bytes";
    case VMMC_ERR_NOT_REGISTERED: return "source not registered";
    case VMMC_ERR_IO: return "NIC or daemon failure";
    case VMMC_ERR_TIMEOUT: return "timed out";
    case VMMC_PENDING: return "pending";
    default: return "unknown status";
  }
}

}  // extern "C"
