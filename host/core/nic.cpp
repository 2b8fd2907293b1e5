// Cold path: attach, slot mapping, heap, registration. The hot path
// (descriptors and completions) is in queue.cpp.
#include <fcntl.h>
#include <poll.h>
#include <pwd.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>

#include <cstdlib>
#include <cstring>
#include <thread>

#include "pin.h"
#include "ulnic/abi/attach.h"
#include "ulnic/nic.h"
#include "ulnic/trace.h"
#include "ulnic/util/runtime_dir.h"
#include "ulnic/util/unix_socket.h"

namespace ulnic {

namespace {
constexpr size_t kPage = 4096;

// Copies whole pages of the program's memory (register_memory, ~Nic): bytes
// of the neighbours that move with the buffer, of allocator headers, of
// memory the program has freed since. To ASan those are redzones and freed
// blocks, to TSan freed memory, so the sanitizer builds copy with a loop
// they do not check (memcpy they intercept and check whatever the caller).
// What they would see is the documented limit of moving whole pages
// (nic.h): another thread must not write a neighbour during the move.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
__attribute__((no_sanitize_address, no_sanitize_thread, optimize("no-tree-loop-distribute-patterns")))
void copy_pages(void* dst, const void* src, size_t len) {
  auto* d = static_cast<uint64_t*>(dst);
  auto* s = static_cast<const uint64_t*>(src);
  for (size_t i = 0; i < len / sizeof *d; ++i) d[i] = s[i];
}
#else
void copy_pages(void* dst, const void* src, size_t len) { std::memcpy(dst, src, len); }
#endif

// Maps [p, +len) into this process now, whole pages. This VM's hypervisor
// takes every first touch of a page: ~13 us a fault here, where
// MADV_POPULATE_WRITE maps the same pages in one call for ~1.3 us a page
// (~0.4 when the pages exist already, another process having touched them;
// measured, Linux 6.18 PVM guest: a 1 MiB buffer's first fill 3.3 ms against
// 0.3). Best effort: a kernel before 5.14 refuses it, and the pages fault in
// as before.
void populate(void* p, size_t len) {
#ifndef MADV_POPULATE_WRITE
  constexpr int MADV_POPULATE_WRITE = 23;
#endif
  const uintptr_t a = reinterpret_cast<uintptr_t>(p), start = a & ~(kPage - 1);
  const uintptr_t end = (a + len + kPage - 1) & ~(kPage - 1);
  if (len) (void)::madvise(reinterpret_cast<void*>(start), end - start, MADV_POPULATE_WRITE);
}

// Gives [start, start+len) private anonymous pages with the same contents.
// The copy goes through a separate mapping that mremap then moves into place
// in one step: a temporary on the malloc heap could itself lie in the range.
bool move_to_private(uintptr_t start, size_t len) {
  void* tmp = ::mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
  if (tmp == MAP_FAILED) return false;
  copy_pages(tmp, reinterpret_cast<void*>(start), len);
  if (::mremap(tmp, len, len, MREMAP_MAYMOVE | MREMAP_FIXED, reinterpret_cast<void*>(start)) == MAP_FAILED) {
    ::munmap(tmp, len);
    return false;
  }
  return true;
}

std::string env_or(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v && *v ? v : fallback;
}
}  // namespace

std::string daemon_socket_path(const std::string& cluster, uint32_t node) {
  return runtime_base_dir() + "/" + cluster + "/node" + std::to_string(node) + "/ulnicd.sock";
}

Result<std::unique_ptr<Nic>> Nic::open(const NicOptions& o) {
  std::string socket = o.socket;
  if (socket.empty()) {
    std::string cluster = o.cluster.empty() ? env_or("ULNIC_CLUSTER", "default") : o.cluster;
    int node = o.node >= 0 ? o.node : std::atoi(env_or("ULNIC_NODE", "0").c_str());
    socket = daemon_socket_path(cluster, uint32_t(node));
  }
  std::unique_ptr<Nic> nic(new Nic());
  if (auto r = nic->attach(socket); !r) return std::unexpected(r.error());
  return nic;
}

Result<void> Nic::attach(const std::string& socket) {
  auto c = connect_unix(socket);
  if (!c) return fail("cannot reach the node daemon (is the node started? ulnic node start): " + c.error().message);
  conn_ = std::move(*c);
  abi::AttachRequest req{abi::kAttachMagic, ULNIC_ABI_VERSION, 0, 0};
  if (auto r = send_with_fds(conn_.get(), &req, sizeof req, nullptr, 0); !r) return r;
  abi::AttachReply reply{};
  std::vector<UniqueFd> fds;
  if (auto r = recv_with_fds(conn_.get(), &reply, sizeof reply, fds, 3, 30000); !r)
    return fail("attach: " + r.error().message);
  reply.message[sizeof reply.message - 1] = '\0';
  if (reply.magic != abi::kAttachMagic) return fail("attach: not a ulnic daemon");
  if (reply.status != abi::kAttachOk) return fail(std::string("attach refused: ") + reply.message);
  if (fds.size() != 3) return fail("attach: daemon sent " + std::to_string(fds.size()) + " fds, expected 3");
  slot_fd_ = std::move(fds[0]);
  doorbell_fd_ = std::move(fds[1]);
  completion_fd_ = std::move(fds[2]);
  size_ = reply.slot_size;
  void* m = ::mmap(nullptr, size_, PROT_READ | PROT_WRITE, MAP_SHARED, slot_fd_.get(), 0);
  if (m == MAP_FAILED) return fail_errno("map slot", errno);
  base_ = static_cast<uint8_t*>(m);
  const abi::SlotHeader& h = header();
  if (h.magic != abi::kSlotMagic || h.abi_version != ULNIC_ABI_VERSION || h.generation != reply.generation)
    return fail("attach: the slot header does not match the daemon's reply");
  slot_ = reply.slot;
  node_ = reply.node_id;
  layout_ = h.layout;  // the daemon wrote it; we keep a private copy
  if (layout_.slot_size != size_ || layout_.heap_offset + layout_.heap_size > size_)
    return fail("attach: bad slot layout");
  auto* sq_ctl = reinterpret_cast<abi::RingControl*>(base_ + layout_.sq_offset);
  auto* cq_ctl = reinterpret_cast<abi::RingControl*>(base_ + layout_.cq_offset);
  auto* eq_ctl = reinterpret_cast<abi::RingControl*>(base_ + layout_.eq_offset);
  if (layout_.eq_offset + abi::ring_bytes<abi::EqEntry>(layout_.eq_capacity) >
      layout_.heap_offset)
    return fail("attach: bad slot layout");
  if (!sq_.attach(sq_ctl, reinterpret_cast<abi::SqEntry*>(sq_ctl + 1), layout_.sq_capacity) ||
      !cq_.attach(cq_ctl, reinterpret_cast<abi::CqEntry*>(cq_ctl + 1), layout_.cq_capacity) ||
      !eq_.attach(eq_ctl, reinterpret_cast<abi::EqEntry*>(eq_ctl + 1), layout_.eq_capacity))
    return fail("attach: bad ring capacities");
  free_[layout_.heap_offset] = layout_.heap_size;
  trace::register_nic(this);
  detail::follow_nic_cpu(reply.nic_cpu);
  if (reply.nic_thread > 0)  // followed from sleep_once (pin.cpp)
    nic_stat_fd_.reset(::open(("/proc/" + std::to_string(reply.nic_thread) + "/stat").c_str(), O_RDONLY | O_CLOEXEC));
  return {};
}

Result<abi::OwnerReply> Nic::call_daemon(abi::OwnerRequest q, std::chrono::milliseconds timeout) {
  q.magic = abi::kOwnerMagic;
  q.request_id = ++daemon_requests_;
  if (auto r = send_with_fds(conn_.get(), &q, sizeof q, nullptr, 0); !r) return fail("daemon: " + r.error().message);
  for (;;) {
    abi::OwnerReply reply{};
    std::vector<UniqueFd> fds;
    if (auto r = recv_with_fds(conn_.get(), &reply, sizeof reply, fds, 0, int(timeout.count())); !r)
      return fail("daemon: " + r.error().message);
    reply.message[sizeof reply.message - 1] = '\0';
    if (reply.magic != abi::kOwnerMagic) return fail("daemon: bad reply");
    if (reply.request_id == q.request_id) return reply;
    // An answer to a request we gave up on: skip it.
  }
}

Nic::~Nic() {
  trace::unregister_nic(this);
  // Give the caller its private pages back before the slot goes away (those
  // still mapped from it: see mapped_runs).
  for (const Backing& b : backings_)
    for (auto [from, to] : mapped_runs(b)) move_to_private(from, to - from);
  if (base_) ::munmap(base_, size_);
  // Closing conn_ (member destructor) tells the daemon to detach the slot.
}

abi::SlotState Nic::state() const {
  return abi::SlotState(__atomic_load_n(&header().nic.state, __ATOMIC_ACQUIRE));
}
abi::SlotFault Nic::fault() const {
  return abi::SlotFault(__atomic_load_n(&header().nic.fault_code, __ATOMIC_ACQUIRE));
}

uint64_t Nic::run_us() const { return __atomic_load_n(&header().nic.run_us, __ATOMIC_RELAXED); }

bool Nic::daemon_gone() const {
  // Only the hang-up is looked at: a reply being read by call_daemon's thread is not ours to take.
  pollfd p{conn_.get(), POLLRDHUP, 0};
  return ::poll(&p, 1, 0) == 1 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL));
}

// ---- NicDeadline

NicDeadline::NicDeadline(const Nic& nic, std::chrono::milliseconds limit)
    : nic_(&nic), start_(std::chrono::steady_clock::now()), run0_(nic.run_us()), limit_(limit) {}

bool NicDeadline::passed() const {
  if (limit_ == Nic::kNoTimeout) return false;
  if (std::chrono::steady_clock::now() - start_ < limit_) return false;
  const uint64_t ran = nic_->run_us() - run0_;
  return ran >= uint64_t(std::max<int64_t>(0, std::chrono::microseconds(limit_).count())) || nic_->daemon_gone();
}

std::chrono::milliseconds NicDeadline::sleep_slice() const {
  using std::chrono::milliseconds;
  if (limit_ == Nic::kNoTimeout) return milliseconds(1000);
  auto left = std::chrono::ceil<milliseconds>(limit_ - (std::chrono::steady_clock::now() - start_));
  return left.count() > 0 ? std::min(left, milliseconds(1000)) : milliseconds(100);  // 100: the NIC's refresh step
}

void NicDeadline::back_off() const {
  if (limit_ == Nic::kNoTimeout || std::chrono::steady_clock::now() - start_ < limit_) std::this_thread::yield();
  else std::this_thread::sleep_for(std::chrono::milliseconds(1));
}

// ---- heap: first fit over the slot's heap, coalescing on free.

uint64_t Nic::heap_alloc(size_t bytes, size_t align) {
  if (bytes == 0 || align == 0 || (align & (align - 1))) return 0;
  bytes = (bytes + 63) & ~size_t(63);
  for (auto it = free_.begin(); it != free_.end(); ++it) {
    uint64_t start = (it->first + align - 1) & ~uint64_t(align - 1);
    uint64_t end = it->first + it->second;
    if (start + bytes > end) continue;
    uint64_t block = it->first;
    free_.erase(it);
    if (start > block) free_[block] = start - block;
    if (start + bytes < end) free_[start + bytes] = end - (start + bytes);
    allocated_[start] = bytes;
    return start;
  }
  return 0;
}

void Nic::heap_free(uint64_t offset) {
  auto a = allocated_.find(offset);
  if (a == allocated_.end()) return;
  uint64_t start = offset, size = a->second;
  allocated_.erase(a);
  auto next = free_.lower_bound(start);
  if (next != free_.end() && start + size == next->first) {
    size += next->second;
    next = free_.erase(next);
  }
  if (next != free_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == start) {
      prev->second += size;
      return;
    }
  }
  free_[start] = size;
}

void* Nic::alloc(size_t bytes, size_t align) {
  uint64_t off = heap_alloc_evicting(bytes, align < 64 ? 64 : align);
  if (!off) return nullptr;
  populate_heap(off, bytes);
  return base_ + off;
}

// Heap pages this process has not mapped yet, mapped (populate); each page
// once per attach (the daemon wipes the slot's pages only between attaches).
void Nic::populate_heap(uint64_t off, size_t bytes) {
  const uint64_t first = off / kPage, last = (off + bytes - 1) / kPage;
  if (populated_.size() < size_ / kPage) populated_.resize(size_ / kPage);
  uint64_t p = first;
  while (p <= last && populated_[p]) ++p;
  if (p > last) return;
  populate(base_ + p * kPage, (last + 1 - p) * kPage);
  for (; p <= last; ++p) populated_[p] = true;
}

void Nic::free(void* p) {
  if (p && in_slot(p, 1)) heap_free(uint64_t(static_cast<uint8_t*>(p) - base_));
}

bool Nic::in_slot(const void* p, size_t len) const {
  auto a = reinterpret_cast<uintptr_t>(p), b = reinterpret_cast<uintptr_t>(base_);
  return a >= b && len <= size_ && a - b <= size_ - len;
}

// ---- registration

// The runs of [b.start, +b.length) that /proc/self/maps shows mapped from
// this slot's file at b's offsets. (A program may free, unmap or map anew
// memory it once registered; only pages still ours may be touched.)
std::vector<std::pair<uintptr_t, uintptr_t>> Nic::mapped_runs(const Backing& b) const {
  std::vector<std::pair<uintptr_t, uintptr_t>> runs;
  struct stat st;
  if (::fstat(slot_fd_.get(), &st) != 0) return runs;
  std::FILE* maps = std::fopen("/proc/self/maps", "re");
  if (!maps) return runs;
  const uintptr_t end = b.start + b.length;
  char line[512];
  while (std::fgets(line, sizeof line, maps)) {
    unsigned long lo = 0, hi = 0, off = 0, ino = 0;
    unsigned dmaj = 0, dmin = 0;
    char perms[8] = {};
    if (std::sscanf(line, "%lx-%lx %7s %lx %x:%x %lu", &lo, &hi, perms, &off, &dmaj, &dmin, &ino) != 7) continue;
    if (lo >= end) break;  // (maps are sorted by address)
    const uintptr_t from = std::max<uintptr_t>(lo, b.start), to = std::min<uintptr_t>(hi, end);
    if (from >= to) continue;
    const bool ours = perms[3] == 's' && ino == st.st_ino && dmaj == major(st.st_dev) && dmin == minor(st.st_dev) &&
                      off + (from - lo) == b.offset + (from - b.start);
    if (!ours) continue;
    if (!runs.empty() && runs.back().second == from) runs.back().second = to;
    else runs.emplace_back(from, to);
  }
  std::fclose(maps);
  return runs;
}

// Every page of b still ours?
bool Nic::backing_mapped(const Backing& b) const {
  const auto runs = mapped_runs(b);
  return runs.size() == 1 && runs[0].first == b.start && runs[0].second == b.start + b.length;
}

// Its pages go back to private memory where they are still mapped from the
// slot (a program may have mapped anew some of them, not all: those that
// are still the slot's must not stay mapped from heap pages that are freed
// here and handed to someone else).
void Nic::release_backing(size_t i, bool move_back) {
  const Backing b = backings_[i];
  backings_.erase(backings_.begin() + std::ptrdiff_t(i));
  if (move_back)
    for (auto [from, to] : mapped_runs(b)) move_to_private(from, to - from);
  heap_free(b.offset);
}

uint64_t Nic::heap_alloc_evicting(size_t bytes, size_t align) {
  for (;;) {
    if (uint64_t off = heap_alloc(bytes, align)) return off;
    auto unused = std::find_if(backings_.begin(), backings_.end(), [](const Backing& b) { return b.users == 0; });
    if (unused == backings_.end()) return 0;
    release_backing(size_t(unused - backings_.begin()), true);
  }
}

Result<MemRegion> Nic::register_memory(void* addr, size_t length, uint32_t access, uint32_t ptag) {
  if (!addr || length == 0) return fail("register: empty region");
  if (length > UINT32_MAX) return fail("register: at most 4 GiB per region");
  MemRegion r;
  r.addr = addr;
  r.length = length;
  r.access = access;
  auto a = reinterpret_cast<uintptr_t>(addr);
  Backing* used = nullptr;  // the moved pages this registration holds
  bool fresh = false;       // ... moved in for it just now
  if (in_slot(addr, length)) {
    r.slot_offset = a - reinterpret_cast<uintptr_t>(base_);
  } else {
    const uintptr_t start = a & ~(kPage - 1), end = (a + length + kPage - 1) & ~(kPage - 1);
    // Pages moved in before, and still mapped here from the slot: no copy.
    std::vector<uintptr_t> held;  // registered backings the range reaches past
    for (size_t i = 0; i < backings_.size() && !used;) {
      Backing& b = backings_[i];
      const bool holds = start >= b.start && end <= b.start + b.length;
      const bool overlaps = start < b.start + b.length && b.start < end;
      if (!overlaps) {
        ++i;
        continue;
      }
      // One read of /proc/self/maps per backing, and only where it decides.
      const bool mapped = (holds || (b.users && !b.pinned)) && backing_mapped(b);
      if (holds && mapped) {
        used = &b;
        ++cache_hits_;
      } else if (b.pinned) {
        return fail("register: overlaps pages pinned for U-Net/MM");
      } else if (b.users && !mapped) {
        return fail("register: overlaps registered memory the program has unmapped or mapped anew");
      } else if (b.users) {
        held.push_back(b.start);
        ++i;
      } else {
        release_backing(i, true);  // unused: its pages go back, and the range moves in afresh
      }
    }
    if (!used && !held.empty()) {
      auto merged = merge_backings(start, end, held);
      if (!merged) return std::unexpected(merged.error());
      used = *merged;
    } else if (!used) {
      const size_t n = end - start;
      const uint64_t off = heap_alloc_evicting(n, kPage);
      if (!off) return fail("register: the slot heap has no room for " + std::to_string(n) + " bytes");
      populate_heap(off, n);
      copy_pages(base_ + off, reinterpret_cast<void*>(start), n);
      void* m = ::mmap(reinterpret_cast<void*>(start), n, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED | MAP_POPULATE,
                       slot_fd_.get(), off_t(off));
      if (m == MAP_FAILED) {
        heap_free(off);
        return fail_errno("register: cannot map slot pages over the buffer", errno);
      }
      backings_.push_back(Backing{start, n, off, 0});
      used = &backings_.back();
      fresh = true;
      pages_moved_in_ += n / kPage;
    }
    ++used->users;
    r.moved = true;
    r.slot_offset = used->offset + (a - used->start);
  }
  abi::SqEntry e{};
  e.opcode = abi::kOpRegister;
  e.src_addr = a;
  e.length = uint32_t(length);
  e.access = access;
  e.reg_offset = r.slot_offset;
  e.dst_node = ptag;
  auto c = run(e);
  if (!c || c->status != abi::kCqOk) {
    if (used) {
      // As if it had not been asked: pages moved in for it go back.
      --used->users;
      if (fresh) release_backing(size_t(used - backings_.data()), true);
    }
    return fail(c ? "register: the NIC refused (status " + std::to_string(c->status) + ")" : c.error().message);
  }
  r.key = c->result;
  return r;
}

Result<void> Nic::move_region(uint64_t from, uint64_t to, uint64_t length) {
  abi::SqEntry e{};
  e.opcode = abi::kOpMoveRegion;
  e.reg_offset = from;
  e.dst_addr = to;
  e.length = uint32_t(length);
  // Busy while a send, put or VI operation of this slot is owed its
  // completion: they finish without us (the NIC keeps their CQ entries), so
  // ask again, for as long as the NIC may take over work it owes.
  NicDeadline d(*this, std::chrono::milliseconds(10000));
  for (;;) {
    auto c = run(e);
    if (!c) return std::unexpected(c.error());
    if (c->status == abi::kCqOk) return {};
    if (c->status != abi::kCqBusy || d.passed())
      return fail("register: the NIC did not move registered pages (status " + std::to_string(c->status) + ")");
    d.back_off();
  }
}

Result<Nic::Backing*> Nic::merge_backings(uintptr_t start, uintptr_t end, const std::vector<uintptr_t>& held) {
  uintptr_t lo = start, hi = end;
  auto find = [&](uintptr_t at) {
    return std::find_if(backings_.begin(), backings_.end(), [&](const Backing& b) { return b.start == at; });
  };
  for (uintptr_t at : held) {
    const Backing& b = *find(at);
    lo = std::min(lo, b.start);
    hi = std::max(hi, b.start + b.length);
  }
  const size_t n = hi - lo;
  const uint64_t off = heap_alloc_evicting(n, kPage);  // (evicts only unused backings: `held` stay)
  if (!off) return fail("register: the slot heap has no room for " + std::to_string(n) + " bytes");
  populate_heap(off, n);
  // The pages no registration holds yet: copied, as a move-in does.
  std::vector<Backing> olds;
  for (uintptr_t at : held) olds.push_back(*find(at));
  std::sort(olds.begin(), olds.end(), [](const Backing& x, const Backing& y) { return x.start < y.start; });
  uintptr_t p = lo;
  for (const Backing& b : olds) {
    if (b.start > p) copy_pages(base_ + off + (p - lo), reinterpret_cast<void*>(p), b.start - p);
    p = b.start + b.length;
  }
  if (hi > p) copy_pages(base_ + off + (p - lo), reinterpret_cast<void*>(p), hi - p);
  // The registered ones: the NIC moves them with their registrations, so no
  // placement is lost in between; one that fails puts back those before it.
  for (size_t i = 0; i < olds.size(); ++i) {
    auto moved = move_region(olds[i].offset, off + (olds[i].start - lo), olds[i].length);
    if (moved) continue;
    while (i--) (void)move_region(off + (olds[i].start - lo), olds[i].offset, olds[i].length);
    heap_free(off);
    return std::unexpected(moved.error());
  }
  if (::mmap(reinterpret_cast<void*>(lo), n, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED | MAP_POPULATE,
             slot_fd_.get(), off_t(off)) == MAP_FAILED) {
    // Unreachable in practice (the range is mapped from this slot or was
    // private memory already); the NIC's registrations are in the new
    // place, so the process's pages can no longer be the old ones.
    return fail_errno("register: cannot map slot pages over the merged range", errno);
  }
  Backing merged{lo, n, off, 0, false};
  for (const Backing& b : olds) {
    merged.users += b.users;
    pages_moved_in_ -= b.length / kPage;  // counted when they moved in
    heap_free(b.offset);
    backings_.erase(find(b.start));
  }
  pages_moved_in_ += n / kPage;
  backings_.push_back(merged);
  return &backings_.back();
}

Result<std::vector<uint64_t>> Nic::pin_pages(void* addr, size_t length) {
  const auto a = reinterpret_cast<uintptr_t>(addr);
  if (a % kPage || length == 0 || length % kPage) return fail("pin: whole pages only");
  for (const Backing& b : backings_)
    if (a < b.start + b.length && b.start < a + length) return fail("pin: pages already moved into the slot");
  if (in_slot(addr, length)) return fail("pin: the slot's own pages");
  // A frame per page (each freed on its own), mapped a run at a time: each
  // mmap over the process's pages costs a TLB flush on every CPU it ran on
  // (under this VM's hypervisor most of the ~250 us a U-Net/MM page took to
  // move in and out one at a time: perf, pvm_flush_tlb_multi and
  // pvm_irq_enable), a run of adjacent frames one call.
  std::vector<uint64_t> frames;
  for (size_t i = 0; i < length / kPage; ++i) {
    const uint64_t off = heap_alloc_evicting(kPage, kPage);
    if (!off) {
      for (uint64_t f : frames) heap_free(f);
      return fail("pin: the slot heap has no room for " + std::to_string(length) + " bytes");
    }
    frames.push_back(off);
  }
  for (size_t i = 0; i < frames.size();) {
    size_t n = 1;
    while (i + n < frames.size() && frames[i + n] == frames[i] + n * kPage) ++n;
    void* at = reinterpret_cast<void*>(a + i * kPage);
    populate_heap(frames[i], n * kPage);
    copy_pages(base_ + frames[i], at, n * kPage);
    if (::mmap(at, n * kPage, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED | MAP_POPULATE, slot_fd_.get(),
               off_t(frames[i])) == MAP_FAILED) {
      const int err = errno;
      if (i) move_to_private(a, i * kPage);  // the runs mapped so far go back
      for (size_t k = 0; k < i; ++k) backings_.pop_back();
      for (uint64_t f : frames) heap_free(f);
      return fail_errno("pin: cannot map slot pages over the memory", err);
    }
    for (size_t k = 0; k < n; ++k)  // a user each: no registration moves them back meanwhile
      backings_.push_back(Backing{a + (i + k) * kPage, kPage, frames[i + k], 1, true});
    i += n;
  }
  pages_moved_in_ += length / kPage;
  return frames;
}

Result<void> Nic::unpin_pages(void* addr, size_t length, bool keep_frames) {
  const auto a = reinterpret_cast<uintptr_t>(addr);
  if (a % kPage || length == 0 || length % kPage) return fail("unpin: whole pages only");
  // The backings that make up the range exactly (pin_pages made one a page).
  std::vector<size_t> in;
  size_t covered = 0;
  for (size_t i = 0; i < backings_.size(); ++i) {
    const Backing& b = backings_[i];
    if (b.start >= a && b.start + b.length <= a + length) in.push_back(i), covered += b.length;
    else if (b.start < a + length && a < b.start + b.length) return fail("unpin: pages pinned as part of a larger range");
  }
  if (covered != length) return fail("unpin: not pinned pages");
  // The caller's own pages (a segment it keeps mapped while its library
  // uses it): moved back in one call, without looking at /proc/self/maps.
  const bool moved = move_to_private(a, length);
  for (auto it = in.rbegin(); it != in.rend(); ++it) {
    if (!keep_frames) heap_free(backings_[*it].offset);
    backings_.erase(backings_.begin() + std::ptrdiff_t(*it));
  }
  if (!moved) return fail_errno("unpin: cannot move the pages back", errno);
  return {};
}

Result<void> Nic::deregister(MemRegion& r) {
  Result<void> result;
  if (r.key) {
    abi::SqEntry e{};
    e.opcode = abi::kOpDeregister;
    e.src_key = r.key;
    auto c = run(e);
    if (!c || c->status != abi::kCqOk)
      result = fail(c ? "deregister: unknown key" : c.error().message);
    r.key = 0;
  }
  if (r.moved) {
    // The backing that holds it (backings never overlap: one a registration
    // reaches past is merged into a new one, register_memory).
    const auto a = reinterpret_cast<uintptr_t>(r.addr);
    for (Backing& b : backings_)
      if (b.users && a >= b.start && a - b.start + r.length <= b.length) {
        --b.users;  // the pages stay: see register_memory
        break;
      }
    r.moved = false;
  }
  return result;
}

}  // namespace ulnic
