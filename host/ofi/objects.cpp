// Fabric, domain, address vectors, memory registration, completion queues
// and progress.
#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <thread>

#include "ofi.h"

namespace ulnic::ofi {
namespace {

using std::chrono::milliseconds;

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

template <class T, class F>
T* as(F* f) {
  return reinterpret_cast<T*>(f);
}

int no_bind(fid*, fid*, uint64_t) { return -FI_ENOSYS; }
int no_control(fid*, int, void*) { return -FI_ENOSYS; }
int no_ops_open(fid*, const char*, uint64_t, void**, void*) { return -FI_ENOSYS; }

// ---------------------------------------------------------------- fabric

int fabric_close(fid* f) {
  delete as<Fabric>(f);
  return 0;
}
fi_ops fabric_fi_ops = {sizeof(fi_ops), fabric_close, no_bind, no_control, no_ops_open, nullptr, nullptr};

int domain_open(fid_fabric* fabric, fi_info* info, fid_domain** dom, void* context);

// ---------------------------------------------------------------- EQ
// RDM and DGRAM endpoints have no connection events and AVs here are
// synchronous, so the provider writes nothing into an EQ: it holds what
// the application writes (fi_eq_write), which is all some programs use it
// for (fi_pingpong opens one whatever the endpoint type).

struct EqEvent {
  uint32_t event;
  std::vector<uint8_t> bytes;
};
struct Eq {
  fid_eq fid;
  std::mutex mu;
  std::condition_variable cv;
  std::deque<EqEvent> q;
};

ssize_t eq_take(Eq& eq, uint32_t* event, void* buf, size_t len, uint64_t flags) {
  if (eq.q.empty()) return -FI_EAGAIN;
  EqEvent& ev = eq.q.front();
  if (len < ev.bytes.size()) return -FI_ETOOSMALL;
  if (event) *event = ev.event;
  size_t n = ev.bytes.size();
  if (n) std::memcpy(buf, ev.bytes.data(), n);
  if (!(flags & FI_PEEK)) eq.q.pop_front();
  return ssize_t(n);
}
ssize_t eq_read(fid_eq* f, uint32_t* event, void* buf, size_t len, uint64_t flags) {
  auto* eq = as<Eq>(f);
  std::lock_guard lk(eq->mu);
  return eq_take(*eq, event, buf, len, flags);
}
ssize_t eq_readerr(fid_eq*, fi_eq_err_entry*, uint64_t) { return -FI_EAGAIN; }
ssize_t eq_write(fid_eq* f, uint32_t event, const void* buf, size_t len, uint64_t) {
  auto* eq = as<Eq>(f);
  std::lock_guard lk(eq->mu);
  auto* b = static_cast<const uint8_t*>(buf);
  eq->q.push_back(EqEvent{event, std::vector<uint8_t>(b, b + len)});
  eq->cv.notify_all();
  return ssize_t(len);
}
ssize_t eq_sread(fid_eq* f, uint32_t* event, void* buf, size_t len, int timeout, uint64_t flags) {
  auto* eq = as<Eq>(f);
  std::unique_lock lk(eq->mu);
  auto ready = [&] { return !eq->q.empty(); };
  if (timeout < 0)
    eq->cv.wait(lk, ready);
  else if (!eq->cv.wait_for(lk, milliseconds(timeout), ready))
    return -FI_EAGAIN;
  return eq_take(*eq, event, buf, len, flags);
}
const char* eq_strerror(fid_eq*, int prov_errno, const void*, char* buf, size_t len) {
  const char* s = prov_strerror(prov_errno);
  if (buf && len) {
    std::snprintf(buf, len, "%s", s);
    return buf;
  }
  return s;
}
fi_ops_eq eq_ops = {sizeof(fi_ops_eq), eq_read, eq_readerr, eq_write, eq_sread, eq_strerror};
int eq_close(fid* f) {
  delete as<Eq>(f);
  return 0;
}
fi_ops eq_fi_ops = {sizeof(fi_ops), eq_close, no_bind, no_control, no_ops_open, nullptr, nullptr};

int eq_open(fid_fabric*, fi_eq_attr* attr, fid_eq** out, void* context) {
  if (!attr) return -FI_EINVAL;
  if (attr->wait_obj != FI_WAIT_NONE && attr->wait_obj != FI_WAIT_UNSPEC) {
    ULNIC_INFO(FI_LOG_EQ, "EQ wait objects other than FI_WAIT_NONE/UNSPEC are not supported\n");
    return -FI_ENOSYS;
  }
  auto* eq = new Eq{};
  init_fid(eq->fid.fid, FI_CLASS_EQ, context, &eq_fi_ops);
  eq->fid.ops = &eq_ops;
  *out = &eq->fid;
  return 0;
}

int no_wait(fid_fabric*, fi_wait_attr*, fid_wait**) { return -FI_ENOSYS; }
int trywait(fid_fabric*, fid**, int) { return 0; }  // sread blocks on the NIC itself
int no_pep(fid_fabric*, fi_info*, fid_pep**, void*) { return -FI_ENOSYS; }
// Entries left null are only called through FI_CHECK_OP, which says -FI_ENOSYS.
fi_ops_fabric fabric_ops = {sizeof(fi_ops_fabric), domain_open, no_pep, eq_open, no_wait, trywait, nullptr};

// ---------------------------------------------------------------- domain

// FI_PROGRESS_AUTO: progress under the domain's lock, then a sleep on the
// NIC until it has a completion or an event for the slot (1 ms while
// refused messages wait to go again), until the domain closes.
void auto_progress(Domain* d) {
  while (!d->stop_progress.load()) {
    milliseconds slice(kAutoSliceMs);
    {
      std::lock_guard lk(d->mu);
      (void)progress(*d);
      if (!d->retry.empty()) slice = milliseconds(1);
    }
    (void)d->nic->wait_ready(slice);
  }
}

int domain_close(fid* f) {
  auto* d = as<Domain>(f);
  if (!d->eps.empty() || !d->cqs.empty() || !d->cntrs.empty() || !d->mrs.empty()) return -FI_EBUSY;
  if (d->progress_thread.joinable()) {  // it sees the flag within a slice
    d->stop_progress = true;
    d->progress_thread.join();
  }
  {
    std::lock_guard lk(d->mu);
    ULNIC_INFO(FI_LOG_DOMAIN, "bounce buffers: %llu taken registered from the cache, %llu registered anew\n",
               static_cast<unsigned long long>(d->bounce_hits), static_cast<unsigned long long>(d->bounce_misses));
    ULNIC_INFO(FI_LOG_DOMAIN, "messages sent: %llu eager in one entry, %llu as a Long in a lane, %llu in fragments, "
               "%llu by rendezvous, %llu streamed through a lane\n", static_cast<unsigned long long>(d->sent[0]),
               static_cast<unsigned long long>(d->sent[1]), static_cast<unsigned long long>(d->sent[2]),
               static_cast<unsigned long long>(d->sent[3]), static_cast<unsigned long long>(d->sent[4]));
    ULNIC_INFO(FI_LOG_DOMAIN, "CQ and counter reads that found nothing blocked on the NIC %llu times\n",
               static_cast<unsigned long long>(d->nic->tight_blocks()));
    ULNIC_INFO(FI_LOG_DOMAIN, "pages moved into the slot to register buffers in place: %llu (%llu registrations "
               "found theirs there already)\n", static_cast<unsigned long long>(d->nic->pages_moved_in()),
               static_cast<unsigned long long>(d->nic->registration_cache_hits()));
    while (drop_idle_bounce(*d)) {
    }
  }
  delete d;
  return 0;
}
fi_ops domain_fi_ops = {sizeof(fi_ops), domain_close, no_bind, no_control, no_ops_open, nullptr, nullptr};

int av_open(fid_domain* domain, fi_av_attr* attr, fid_av** av, void* context);
int cq_open(fid_domain* domain, fi_cq_attr* attr, fid_cq** cq, void* context);
int cntr_open(fid_domain* domain, fi_cntr_attr* attr, fid_cntr** cntr, void* context);
int no_sep(fid_domain*, fi_info*, fid_ep**, void*) { return -FI_ENOSYS; }
int no_poll(fid_domain*, fi_poll_attr*, fid_poll**) { return -FI_ENOSYS; }
int no_stx(fid_domain*, fi_tx_attr*, fid_stx**, void*) { return -FI_ENOSYS; }
int no_srx(fid_domain*, fi_rx_attr*, fid_ep**, void*) { return -FI_ENOSYS; }
fi_ops_domain domain_ops = {
    sizeof(fi_ops_domain), av_open, cq_open, ep_open, no_sep, cntr_open, no_poll, no_stx, no_srx, nullptr,
    nullptr, nullptr};

int mr_reg(fid* fid, const void* buf, size_t len, uint64_t access, uint64_t offset, uint64_t requested_key,
           uint64_t flags, fid_mr** mr, void* context);
int mr_regv(fid* fid, const iovec* iov, size_t count, uint64_t access, uint64_t offset, uint64_t requested_key,
            uint64_t flags, fid_mr** mr, void* context) {
  if (count != 1) return -FI_EINVAL;
  return mr_reg(fid, iov[0].iov_base, iov[0].iov_len, access, offset, requested_key, flags, mr, context);
}
int mr_regattr(fid* fid, const fi_mr_attr* attr, uint64_t flags, fid_mr** mr) {
  if (!attr || attr->iov_count != 1 || attr->iface != FI_HMEM_SYSTEM) return -FI_EINVAL;
  return mr_reg(fid, attr->mr_iov[0].iov_base, attr->mr_iov[0].iov_len, attr->access, attr->offset,
                attr->requested_key, flags, mr, attr->context);
}
fi_ops_mr mr_ops = {sizeof(fi_ops_mr), mr_reg, mr_regv, mr_regattr};

// A slot of a node is wiped for a moment after its process exits: a
// program started right after another may find none free. Retry for 5 s.
Result<std::unique_ptr<Nic>> open_nic(const NicOptions& where) {
  auto n = Nic::open(where);
  for (int i = 0; i < 50 && !n; ++i) {
    std::this_thread::sleep_for(milliseconds(100));
    n = Nic::open(where);
  }
  return n;
}

int domain_open(fid_fabric* fabric, fi_info* info, fid_domain** dom, void* context) {
  if (!info || !info->domain_attr || (info->domain_attr->name && std::strncmp(info->domain_attr->name, "ulnic", 5)))
    return -FI_EINVAL;
  // The node fi_getinfo chose (the domain's name, "ulnic<node>"; none: $ULNIC_NODE).
  NicOptions where;
  if (info->domain_attr->name && info->domain_attr->name[5]) {
    char* end = nullptr;
    long node = std::strtol(info->domain_attr->name + 5, &end, 10);
    if (*end || node < 0 || node >= long(abi::kMaxNodes)) return -FI_EINVAL;
    where.node = int(node);
  }
  auto n = open_nic(where);
  if (!n) {
    ULNIC_WARN(FI_LOG_DOMAIN, "cannot attach to the NIC: %s\n", n.error().message.c_str());
    return -FI_ENODEV;
  }
  auto* d = new Domain{};
  init_fid(d->fid.fid, FI_CLASS_DOMAIN, context, &domain_fi_ops);
  d->fid.ops = &domain_ops;
  d->fid.mr = &mr_ops;
  d->fabric = as<Fabric>(fabric);
  d->nic = std::move(*n);
  size_t eager = 0;
  if (fi_param_get_size_t(&g_prov, "eager_size", &eager) == FI_SUCCESS)
    d->eager_max = std::clamp<size_t>(eager, kEagerMax, kFragMsgMax);
  if (info->domain_attr->data_progress == FI_PROGRESS_AUTO || info->domain_attr->control_progress == FI_PROGRESS_AUTO)
    d->progress_thread = std::thread(auto_progress, d);
  *dom = &d->fid;
  return 0;
}

// ---------------------------------------------------------------- AV

int av_close(fid* f) {
  auto* av = as<Av>(f);
  std::lock_guard lk(av->dom->mu);
  for (Ep* ep : av->dom->eps)
    if (ep->av == av) return -FI_EBUSY;
  delete av;
  return 0;
}
int av_bind(fid*, fid*, uint64_t) {
  ULNIC_INFO(FI_LOG_AV, "asynchronous AVs (bound to an EQ) are not supported\n");
  return -FI_ENOSYS;
}
fi_ops av_fi_ops = {sizeof(fi_ops), av_close, av_bind, no_control, no_ops_open, nullptr, nullptr};

// Addresses come from the application (often from a peer over a socket):
// one that is not a ulnic address is not inserted.
bool valid_addr(const Addr& a) {
  return a.version == kAddrVersion && a.zero == 0 && a.node < abi::kMaxNodes && a.slot < abi::kMaxSlots &&
         a.ep < kMaxEndpoints;
}

int av_insert(fid_av* fav, const void* addr, size_t count, fi_addr_t* fi_addr, uint64_t flags, void*) {
  auto* av = as<Av>(fav);
  if (flags & ~uint64_t(FI_MORE | FI_SYNC_ERR)) return -FI_EBADFLAGS;
  if (!addr && count) return -FI_EINVAL;
  std::lock_guard lk(av->dom->mu);
  int inserted = 0;
  for (size_t i = 0; i < count; ++i) {
    Addr a;
    std::memcpy(&a, static_cast<const uint8_t*>(addr) + i * sizeof(Addr), sizeof a);
    if (!valid_addr(a)) {
      ULNIC_WARN(FI_LOG_AV, "address %zu is not a ulnic address: not inserted\n", i);
      if (fi_addr) fi_addr[i] = FI_ADDR_NOTAVAIL;
      continue;
    }
    fi_addr_t fa = av->addrs.size();
    av->addrs.push_back(a);
    av->live.push_back(true);
    av->by_id.emplace(addr_id(a), fa);  // the first entry of an address answers FI_SOURCE
    if (fi_addr) fi_addr[i] = fa;
    ++inserted;
  }
  return inserted;
}
int av_insertsvc(fid_av*, const char*, const char*, fi_addr_t*, uint64_t, void*) { return -FI_ENOSYS; }
int av_insertsym(fid_av*, const char*, size_t, const char*, size_t, fi_addr_t*, uint64_t, void*) {
  return -FI_ENOSYS;
}
int av_remove(fid_av* fav, fi_addr_t* fi_addr, size_t count, uint64_t flags) {
  auto* av = as<Av>(fav);
  if (flags) return -FI_EBADFLAGS;
  std::lock_guard lk(av->dom->mu);
  for (size_t i = 0; i < count; ++i) {
    fi_addr_t a = fi_addr[i];
    if (a >= av->addrs.size() || !av->live[a]) return -FI_EINVAL;
    av->live[a] = false;  // indices are never reused
    auto it = av->by_id.find(addr_id(av->addrs[a]));
    if (it != av->by_id.end() && it->second == a) av->by_id.erase(it);
  }
  return 0;
}
int av_lookup(fid_av* fav, fi_addr_t fi_addr, void* addr, size_t* addrlen) {
  auto* av = as<Av>(fav);
  std::lock_guard lk(av->dom->mu);
  const Addr* a = av->lookup(fi_addr);
  if (!a) return -FI_EINVAL;
  std::memcpy(addr, a, std::min(*addrlen, sizeof(Addr)));
  *addrlen = sizeof(Addr);
  return 0;
}
const char* av_straddr(fid_av*, const void* addr, char* buf, size_t* len) {
  Addr a;
  std::memcpy(&a, addr, sizeof a);
  char s[96];
  int n = std::snprintf(s, sizeof s, "ulnic://%u/%u/%u/%016llx", a.node, a.slot, a.ep,
                        static_cast<unsigned long long>(a.tag));
  if (*len) {
    std::snprintf(buf, *len, "%s", s);
  }
  *len = size_t(n) + 1;
  return buf;
}
fi_ops_av av_ops = {sizeof(fi_ops_av), av_insert, av_insertsvc, av_insertsym, av_remove, av_lookup, av_straddr,
                    nullptr};

int av_open(fid_domain* domain, fi_av_attr* attr, fid_av** fav, void* context) {
  auto* d = as<Domain>(domain);
  if (!attr) return -FI_EINVAL;
  if (attr->type != FI_AV_UNSPEC && attr->type != FI_AV_TABLE && attr->type != FI_AV_MAP) return -FI_EINVAL;
  if (attr->flags & (FI_EVENT | FI_READ | FI_SYMMETRIC)) {
    ULNIC_INFO(FI_LOG_AV, "AV flags FI_EVENT, FI_READ and FI_SYMMETRIC are not supported\n");
    return -FI_ENOSYS;
  }
  if (attr->name) {
    ULNIC_INFO(FI_LOG_AV, "named (shared) AVs are not supported\n");
    return -FI_ENOSYS;
  }
  auto* av = new Av{};
  init_fid(av->fid.fid, FI_CLASS_AV, context, &av_fi_ops);
  av->fid.ops = &av_ops;
  av->dom = d;
  // FI_AV_MAP's addresses are opaque to the application: ours are the same
  // indices as a table's (stable, never reused).
  av->type = attr->type == FI_AV_UNSPEC ? FI_AV_TABLE : attr->type;
  attr->type = av->type;
  *fav = &av->fid;
  return 0;
}

// ---------------------------------------------------------------- MR

int mr_close(fid* f) {
  auto* mr = as<Mr>(f);
  Domain& d = *mr->dom;
  std::lock_guard lk(d.mu);
  d.mrs.erase(std::remove(d.mrs.begin(), d.mrs.end(), mr), d.mrs.end());
  (void)d.nic->deregister(mr->region);
  (void)d.nic->deregister(mr->rma);
  delete mr;
  return 0;
}
int mr_bind(fid*, fid*, uint64_t) { return -FI_ENOSYS; }
fi_ops mr_fi_ops = {sizeof(fi_ops), mr_close, mr_bind, no_control, no_ops_open, nullptr, nullptr};

// Registered with local access and remote write: a desc serves as a send's
// source and as a rendezvous's destination (the sender's NIC puts into it).
// The key fi_mr_key gives is that registration's with FI_REMOTE_WRITE, else
// a second, local-only one of the same pages: the NIC refuses a peer's
// fi_write through it. FI_REMOTE_READ is checked by our provider when it
// serves a peer's fi_read (ep.cpp).
int mr_reg(fid* fid, const void* buf, size_t len, uint64_t access, uint64_t offset, uint64_t requested_key,
           uint64_t flags, fid_mr** out, void* context) {
  (void)offset;
  (void)requested_key;  // keys are the NIC's (mr_key_size 4)
  if (fid->fclass != FI_CLASS_DOMAIN) return -FI_EINVAL;
  auto* d = as<Domain>(fid);
  if (flags) return -FI_EBADFLAGS;
  if (!buf || !len || len > kMaxMsg) return -FI_EINVAL;
  std::lock_guard lk(d->mu);
  auto r = d->nic->register_memory(const_cast<void*>(buf), len, abi::kAccessLocal | abi::kAccessRemoteWrite);
  while (!r && drop_idle_bounce(*d))  // kept bounce buffers may hold the key or heap room it needs
    r = d->nic->register_memory(const_cast<void*>(buf), len, abi::kAccessLocal | abi::kAccessRemoteWrite);
  if (!r) {
    ULNIC_WARN(FI_LOG_MR, "registration failed: %s\n", r.error().message.c_str());
    return -FI_ENOMEM;
  }
  MemRegion rma{};
  if (!(access & FI_REMOTE_WRITE)) {
    auto k = d->nic->register_memory(const_cast<void*>(buf), len, abi::kAccessLocal);
    if (!k) {
      ULNIC_WARN(FI_LOG_MR, "registration failed: %s\n", k.error().message.c_str());
      (void)d->nic->deregister(*r);
      return -FI_ENOMEM;
    }
    rma = *k;
  }
  auto* mr = new Mr{};
  init_fid(mr->fid.fid, FI_CLASS_MR, context, &mr_fi_ops);
  mr->fid.mem_desc = mr;
  mr->fid.key = rma.key ? rma.key : r->key;
  mr->dom = d;
  mr->region = *r;
  mr->rma = rma;
  mr->access = access;
  d->mrs.push_back(mr);
  *out = &mr->fid;
  return 0;
}

// ---------------------------------------------------------------- CQ

int cq_close(fid* f) {
  auto* cq = as<Cq>(f);
  Domain& d = *cq->dom;
  std::lock_guard lk(d.mu);
  for (Ep* ep : d.eps)
    if (ep->tx_cq == cq || ep->rx_cq == cq) return -FI_EBUSY;
  d.cqs.erase(std::remove(d.cqs.begin(), d.cqs.end(), cq), d.cqs.end());
  delete cq;
  return 0;
}
int cq_control(fid* f, int command, void* arg) {
  auto* cq = as<Cq>(f);
  if (command == FI_GETWAITOBJ && arg) {
    *static_cast<fi_wait_obj*>(arg) = cq->wait;
    return 0;
  }
  return -FI_ENOSYS;
}
fi_ops cq_fi_ops = {sizeof(fi_ops), cq_close, no_bind, cq_control, no_ops_open, nullptr, nullptr};

// Copies up to `count` completions in the CQ's format; -FI_EAVAIL first if
// an error waits; -FI_EAGAIN if none.
ssize_t cq_take(Cq& cq, void* buf, size_t count, fi_addr_t* src) {
  if (!cq.errors.empty()) return -FI_EAVAIL;
  if (cq.done.empty()) return -FI_EAGAIN;
  size_t n = 0, sz = cq.entry_size();
  auto* out = static_cast<uint8_t*>(buf);
  while (n < count && !cq.done.empty()) {
    const Completion& c = cq.done.front();
    std::memcpy(out + n * sz, &c.e, sz);
    if (src) src[n] = c.src;
    cq.done.pop_front();
    ++n;
  }
  return ssize_t(n);
}

// An application that spins on fi_cq_read (or fi_cntr_read) takes the core
// its NIC needs: empty polls in a row hand it over (Nic::poll_found blocks
// on the NIC for at most this long). A message refused for a full ring
// goes again when its retry is due: the block ends then, not up to
// Nic::kTightBlock (10 ms) late. Under d.mu.
std::chrono::nanoseconds tight_block(const Domain& d) {
  if (d.retry.empty()) return Nic::kTightBlock;
  return std::chrono::nanoseconds(std::max<int64_t>(0, d.retry.front().second - now_ns()));
}

ssize_t cq_readfrom(fid_cq* fcq, void* buf, size_t count, fi_addr_t* src) {
  auto* cq = as<Cq>(fcq);
  Domain& d = *cq->dom;
  std::unique_lock lk(d.mu);
  bool did = progress(d);
  ssize_t r = cq_take(*cq, buf, count, src);
  const auto block = tight_block(d);
  lk.unlock();
  d.nic->poll_found(did || r != -FI_EAGAIN, block);
  return r;
}
ssize_t cq_read(fid_cq* fcq, void* buf, size_t count) { return cq_readfrom(fcq, buf, count, nullptr); }

ssize_t cq_readerr(fid_cq* fcq, fi_cq_err_entry* buf, uint64_t flags) {
  (void)flags;
  auto* cq = as<Cq>(fcq);
  std::lock_guard lk(cq->dom->mu);
  if (cq->errors.empty()) return -FI_EAGAIN;
  Completion c = std::move(cq->errors.front());
  cq->errors.pop_front();
  // API 1.5+: the application may give its own err_data buffer (err_data_size
  // > 0). An entry it read before and passes again as it was still points at
  // ours, which the assignment below frees: that is no buffer of its own.
  const bool ours = !cq->last_err.empty() && buf->err_data == cq->last_err.data();
  void* user_data = ours ? nullptr : buf->err_data;
  size_t user_size = ours ? 0 : buf->err_data_size;
  buf->op_context = c.e.op_context;
  buf->flags = c.e.flags;
  buf->len = c.e.len;
  buf->buf = c.e.buf;
  buf->data = c.e.data;
  buf->tag = c.e.tag;
  buf->olen = c.olen;
  buf->err = c.err;
  buf->prov_errno = c.prov_errno;
  cq->last_err = c.err_text;
  if (user_size && user_data) {
    size_t n = std::min(user_size, cq->last_err.size() + 1);
    std::memcpy(user_data, cq->last_err.c_str(), n);
    static_cast<char*>(user_data)[n - 1] = 0;
    buf->err_data_size = n;
  } else {
    buf->err_data = cq->last_err.empty() ? nullptr : const_cast<char*>(cq->last_err.c_str());
    buf->err_data_size = cq->last_err.empty() ? 0 : cq->last_err.size() + 1;
  }
  return 1;
}

// How long a blocking call may sleep on the NIC before it looks again:
// 100 ms (fi_cq_signal is seen within that), 1 ms while refused messages
// wait for progress to send them again, and never past the caller's
// deadline (`timeout` ms from its start; < 0: none). Zero: that has passed.
milliseconds wait_slice(const Domain& d, std::chrono::steady_clock::time_point deadline, int timeout) {
  const milliseconds slice = d.retry.empty() ? milliseconds(100) : milliseconds(1);
  if (timeout < 0) return slice;
  const auto left = std::chrono::ceil<milliseconds>(deadline - std::chrono::steady_clock::now());
  return left.count() <= 0 ? milliseconds(0) : std::min(slice, left);
}

// Blocks on the NIC (its eventfd: Nic::wait_ready) between looks, never
// spinning: every completion or arrival for the slot wakes it.
ssize_t cq_sreadfrom(fid_cq* fcq, void* buf, size_t count, fi_addr_t* src, const void* cond, int timeout) {
  (void)cond;  // a threshold of 1: return as soon as there is something
  auto* cq = as<Cq>(fcq);
  Domain& d = *cq->dom;
  const auto deadline = std::chrono::steady_clock::now() + milliseconds(timeout);
  for (;;) {
    std::unique_lock lk(d.mu);
    (void)progress(d);
    ssize_t r = cq_take(*cq, buf, count, src);
    if (r != -FI_EAGAIN) return r;
    if (cq->signaled) {
      cq->signaled = false;
      return -FI_EAGAIN;
    }
    const milliseconds slice = wait_slice(d, deadline, timeout);
    if (slice.count() == 0) return -FI_EAGAIN;
    lk.unlock();
    (void)d.nic->wait_ready(slice);
  }
}
ssize_t cq_sread(fid_cq* fcq, void* buf, size_t count, const void* cond, int timeout) {
  return cq_sreadfrom(fcq, buf, count, nullptr, cond, timeout);
}
int cq_signal(fid_cq* fcq) {
  auto* cq = as<Cq>(fcq);
  std::lock_guard lk(cq->dom->mu);
  cq->signaled = true;  // seen within a wait slice (100 ms)
  return 0;
}
const char* cq_strerror(fid_cq*, int prov_errno, const void* err_data, char* buf, size_t len) {
  const char* s = err_data ? static_cast<const char*>(err_data) : prov_strerror(prov_errno);
  if (buf && len) {
    std::snprintf(buf, len, "%s", s);
    return buf;
  }
  return s;
}
fi_ops_cq cq_ops = {sizeof(fi_ops_cq), cq_read, cq_readfrom, cq_readerr, cq_sread, cq_sreadfrom, cq_signal,
                    cq_strerror};

int cq_open(fid_domain* domain, fi_cq_attr* attr, fid_cq** fcq, void* context) {
  auto* d = as<Domain>(domain);
  if (!attr) return -FI_EINVAL;
  switch (attr->format) {
    case FI_CQ_FORMAT_UNSPEC:
    case FI_CQ_FORMAT_CONTEXT:
    case FI_CQ_FORMAT_MSG:
    case FI_CQ_FORMAT_DATA:
    case FI_CQ_FORMAT_TAGGED:
      break;
    default:
      return -FI_ENOSYS;
  }
  if (attr->wait_obj != FI_WAIT_NONE && attr->wait_obj != FI_WAIT_UNSPEC && attr->wait_obj != FI_WAIT_YIELD) {
    ULNIC_INFO(FI_LOG_CQ, "CQ wait objects other than FI_WAIT_NONE/UNSPEC/YIELD are not supported\n");
    return -FI_ENOSYS;
  }
  if (attr->wait_cond != FI_CQ_COND_NONE && attr->wait_cond != FI_CQ_COND_THRESHOLD) return -FI_EINVAL;
  if (attr->flags & FI_AFFINITY) return -FI_ENOSYS;
  auto* cq = new Cq{};
  init_fid(cq->fid.fid, FI_CLASS_CQ, context, &cq_fi_ops);
  cq->fid.ops = &cq_ops;
  cq->dom = d;
  cq->format = attr->format == FI_CQ_FORMAT_UNSPEC ? FI_CQ_FORMAT_CONTEXT : attr->format;
  cq->wait = attr->wait_obj == FI_WAIT_NONE ? FI_WAIT_NONE : FI_WAIT_UNSPEC;
  {
    std::lock_guard lk(d->mu);
    d->cqs.push_back(cq);
  }
  *fcq = &cq->fid;
  return 0;
}

// ---------------------------------------------------------------- counters

int cntr_close(fid* f) {
  auto* c = as<Cntr>(f);
  Domain& d = *c->dom;
  std::lock_guard lk(d.mu);
  if (c->binds) return -FI_EBUSY;
  d.cntrs.erase(std::remove(d.cntrs.begin(), d.cntrs.end(), c), d.cntrs.end());
  delete c;
  return 0;
}
fi_ops cntr_fi_ops = {sizeof(fi_ops), cntr_close, no_bind, no_control, no_ops_open, nullptr, nullptr};

// Reads drive progress (the domain's progress is manual), as CQ reads do,
// and a program that spins on a counter hands its core over as one that
// spins on a CQ does.
uint64_t cntr_read(fid_cntr* f) {
  auto* c = as<Cntr>(f);
  Domain& d = *c->dom;
  std::unique_lock lk(d.mu);
  const bool did = progress(d);
  const uint64_t v = c->value;
  const auto block = tight_block(d);
  lk.unlock();
  d.nic->poll_found(did, block);
  return v;
}
uint64_t cntr_readerr(fid_cntr* f) {
  auto* c = as<Cntr>(f);
  std::lock_guard lk(c->dom->mu);
  (void)progress(*c->dom);
  return c->errors;
}
template <uint64_t Cntr::*field, bool add>
int cntr_change(fid_cntr* f, uint64_t v) {
  auto* c = as<Cntr>(f);
  std::lock_guard lk(c->dom->mu);
  c->*field = add ? c->*field + v : v;
  return 0;
}

// Until the value reaches `threshold` (0), the error count changes
// (-FI_EAVAIL) or `timeout` ms pass (-FI_ETIMEDOUT; < 0: no limit). Blocks
// on the NIC between looks, as fi_cq_sread does, never spinning. A counter
// opened with FI_WAIT_NONE may be waited on too (the man page makes that
// the application's error; this provider blocks the same way).
int cntr_wait(fid_cntr* f, uint64_t threshold, int timeout) {
  auto* c = as<Cntr>(f);
  Domain& d = *c->dom;
  const auto deadline = std::chrono::steady_clock::now() + milliseconds(timeout);
  std::unique_lock lk(d.mu);
  const uint64_t errors = c->errors;
  for (;;) {
    (void)progress(d);
    if (c->value >= threshold) return 0;
    if (c->errors != errors) return -FI_EAVAIL;
    const milliseconds slice = wait_slice(d, deadline, timeout);
    if (slice.count() == 0) return -FI_ETIMEDOUT;
    lk.unlock();
    (void)d.nic->wait_ready(slice);
    lk.lock();
  }
}
fi_ops_cntr cntr_ops = {sizeof(fi_ops_cntr), cntr_read, cntr_readerr, cntr_change<&Cntr::value, true>,
                        cntr_change<&Cntr::value, false>, cntr_wait, cntr_change<&Cntr::errors, true>,
                        cntr_change<&Cntr::errors, false>};

int cntr_open(fid_domain* domain, fi_cntr_attr* attr, fid_cntr** fc, void* context) {
  auto* d = as<Domain>(domain);
  if (attr) {
    if (attr->events != FI_CNTR_EVENTS_COMP) return -FI_ENOSYS;
    if (attr->wait_obj != FI_WAIT_NONE && attr->wait_obj != FI_WAIT_UNSPEC && attr->wait_obj != FI_WAIT_YIELD) {
      ULNIC_INFO(FI_LOG_CNTR, "counter wait objects other than FI_WAIT_NONE/UNSPEC/YIELD are not supported\n");
      return -FI_ENOSYS;
    }
    if (attr->flags) return -FI_EINVAL;
  }
  auto* c = new Cntr{};
  init_fid(c->fid.fid, FI_CLASS_CNTR, context, &cntr_fi_ops);
  c->fid.ops = &cntr_ops;
  c->dom = d;
  {
    std::lock_guard lk(d->mu);
    d->cntrs.push_back(c);
  }
  *fc = &c->fid;
  return 0;
}

}  // namespace

size_t Cq::entry_size() const {
  switch (format) {
    case FI_CQ_FORMAT_MSG:
      return sizeof(fi_cq_msg_entry);
    case FI_CQ_FORMAT_DATA:
      return sizeof(fi_cq_data_entry);
    case FI_CQ_FORMAT_TAGGED:
      return sizeof(fi_cq_tagged_entry);
    default:
      return sizeof(fi_cq_entry);
  }
}

void cq_push(Cq* cq, Completion c) {
  if (!cq) return;
  if (c.err) {
    if (c.err_text.empty()) c.err_text = prov_strerror(c.prov_errno);
    cq->errors.push_back(std::move(c));
  } else {
    cq->done.push_back(std::move(c));
  }
}

bool mr_covers(Domain& d, Mr* mr, const void* p, size_t n) {
  if (!mr || std::find(d.mrs.begin(), d.mrs.end(), mr) == d.mrs.end()) return false;  // not ours: ignored
  auto a = reinterpret_cast<uintptr_t>(p), s = reinterpret_cast<uintptr_t>(mr->region.addr);
  return a >= s && n <= mr->region.length && a - s <= mr->region.length - n;
}

const char* prov_strerror(int e) {
  switch (e) {
    case kErrTruncated: return "ulnic: message longer than the receive buffer (truncated)";
    case kErrRemoteFailed: return "ulnic: the sender's transfer failed; the buffer holds part of the message";
    case kErrRegister: return "ulnic: the NIC would not register the buffer";
    case kErrCanceled: return "ulnic: canceled";
    case kErrReadRefused: return "ulnic: the target has no MR with FI_REMOTE_READ covering the range read";
    case abi::kCqUnreachable: return "ulnic NIC: the destination NIC stopped answering";
    case abi::kCqAmBadEndpoint: return "ulnic NIC: no such endpoint at the destination (closed?)";
    case abi::kCqAmBadTag: return "ulnic NIC: the destination endpoint refused our tag (stale address?)";
    case abi::kCqRemoteBadSlot: return "ulnic NIC: the destination slot is not attached";
    case abi::kCqRemoteBadKey: return "ulnic NIC: the receiver's registration is gone";
    case abi::kCqRemoteProtection: return "ulnic NIC: the receiver refused the put (bounds or access)";
    case abi::kCqBadSlot: return "ulnic NIC: bad destination";
    case abi::kCqFlushed: return "ulnic NIC: flushed (the slot was detached)";
    default: return "ulnic: NIC error";
  }
}

int fabric_open(fi_fabric_attr* attr, fid_fabric** fabric, void* context) {
  if (attr && attr->name && std::strncmp(attr->name, "ulnic", 5) != 0) return -FI_ENODATA;
  auto* f = new Fabric{};
  init_fid(f->fid.fid, FI_CLASS_FABRIC, context, &fabric_fi_ops);
  f->fid.ops = &fabric_ops;
  f->fid.api_version = kApiVersion;
  *fabric = &f->fid;
  return 0;
}

// Under d.mu. Events are only wake-ups (the rings hold the messages):
// drained first, so an arrival after the ring was looked at leaves one for
// the next wait_ready.
bool progress(Domain& d) {
  bool did = false;
  abi::EqEntry ev;
  while (d.nic->poll_event(ev)) {
  }
  abi::CqEntry c;
  while (d.nic->poll(c)) {
    did = true;
    auto it = d.posts.find(c.user_data);
    if (it == d.posts.end()) continue;  // a synchronous call's (Nic::run took it)
    Post post = it->second;
    d.posts.erase(it);
    if (c.status == abi::kCqAmCongestion && post.kind == kPostMsg) {
      // The receiver's ring was full; nothing was written: send it again
      // (its seq puts it back in order at the receiver).
      uint64_t ud = d.next_user_data++;
      post.sqe.user_data = ud;
      d.posts[ud] = post;
      d.retry.emplace_back(ud, now_ns() + kRetryNs);
      continue;
    }
    ep_nic_done(*post.ep, post, c);
  }
  // Resend refused messages that waited long enough, in the order they
  // were refused (without SQ room they wait for the next progress).
  const int64_t now = now_ns();
  while (!d.retry.empty() && d.retry.front().second <= now) {
    auto it = d.posts.find(d.retry.front().first);
    if (it != d.posts.end() && !d.nic->post(it->second.sqe)) break;
    d.retry.pop_front();
    did = true;
  }
  for (Ep* ep : d.eps)
    if (ep->enabled && ep_progress(*ep)) did = true;
  return did;
}

}  // namespace ulnic::ofi
