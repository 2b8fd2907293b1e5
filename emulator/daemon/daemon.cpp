#include "daemon/daemon.h"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <thread>

#include "fabric/fabric_server.h"
#include "ulnic/util/process.h"
#include "ulnic/util/mapping.h"
#include "ulnic/util/unix_socket.h"

namespace ulnic::daemon {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

std::string socket_path(const board::NodePaths& p) { return p.dir + "/ulnicd.sock"; }
std::string pid_path(const board::NodePaths& p) { return p.dir + "/ulnicd.pid"; }
std::string log_path(const board::NodePaths& p) { return p.dir + "/ulnicd.log"; }

abi::SlotLayout make_layout(uint64_t slot_size, uint32_t sq_capacity, uint32_t cq_capacity, uint32_t eq_capacity) {
  abi::SlotLayout l{};
  l.sq_offset = abi::kSlotHeaderSize;
  l.sq_capacity = sq_capacity;
  uint64_t sq_end = l.sq_offset + abi::ring_bytes<abi::SqEntry>(sq_capacity);
  l.cq_offset = uint32_t((sq_end + 63) & ~63ull);
  l.cq_capacity = cq_capacity;
  uint64_t cq_end = l.cq_offset + abi::ring_bytes<abi::CqEntry>(cq_capacity);
  l.eq_offset = uint32_t((cq_end + 63) & ~63ull);
  l.eq_capacity = eq_capacity;
  uint64_t eq_end = l.eq_offset + abi::ring_bytes<abi::EqEntry>(eq_capacity);
  // The heap starts on a 64 KiB boundary: DMA buffers are page aligned, and
  // keeping the rings on their own pages lets a process map them separately.
  l.heap_offset = (eq_end + 0xffff) & ~0xffffull;
  l.heap_size = slot_size > l.heap_offset ? slot_size - l.heap_offset : 0;
  l.slot_size = slot_size;
  return l;
}

// Called by the main loop and by the priority guard's thread: localtime
// (its static buffer; glibc re-reads TZ on each call and frees the old copy)
// raced there under TSan in a CI run; localtime_r under one lock, one line
// per write.
void Daemon::log(const std::string& line) const {
  static std::mutex mu;
  std::lock_guard lock(mu);
  char stamp[32];
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  std::strftime(stamp, sizeof stamp, "%H:%M:%S", ::localtime_r(&t, &tm));
  std::fprintf(stderr, "%s ulnicd[%s/%u]: %s\n", stamp, opts_.cluster.c_str(), opts_.node, line.c_str());
}

Result<void> Daemon::init(const Options& opts) {
  opts_ = opts;
  paths_ = board::node_paths(opts.cluster, opts.node);
  auto sram = board::SramFile::open(paths_.sram, true);
  if (!sram) return std::unexpected(sram.error());
  sram_.emplace(std::move(*sram));
  abi::StatusBlock st = sram_->read_status();
  if (st.state != uint32_t(abi::FwState::kRunning)) return fail("the firmware is not running");
  boot_count_ = st.boot_count;
  slot_size_ = st.slots[0].bar_size;
  num_slots_ = st.num_slots;
  vectors_ = st.fabric_vectors;
  qemu_pid_ = read_pid_file(paths_.pid);
  if (opts.guard && qemu_pid_) guard_.start(qemu_pid_, opts.boost_nice, [this](const std::string& l) { log(l); });
  if (vectors_ < abi::kNicVectors)
    return fail("the fabric device has " + std::to_string(vectors_) + " vectors; slots need " +
                std::to_string(abi::kNicVectors));
  auto* area = reinterpret_cast<abi::CtrlArea*>(sram_->at(abi::kCtrlOffset));
  ctrl_.attach(&area->cmd_ring, area->cmds, abi::kCtrlCapacity);
  rsp_.attach(&area->rsp_ring, area->rsps, abi::kCtrlCapacity);
  if (auto r = connect_fabric(); !r) return r;
  int p[2];
  if (::pipe2(p, O_CLOEXEC | O_NONBLOCK) != 0) return fail_errno("pipe", errno);
  wake_rd_.reset(p[0]);
  wake_wr_.reset(p[1]);
  auto l = listen_unix(socket_path(paths_));
  if (!l) return std::unexpected(l.error());
  listen_ = std::move(*l);
  ::chmod(socket_path(paths_).c_str(), 0600);
  // Prove the control path works before saying we are up.
  abi::CtrlCommand ping{};
  ping.opcode = abi::kCtrlPing;
  if (auto r = ctrl_call(ping); !r) return fail("the firmware does not answer its control queue: " + r.error().message);
  if (auto r = init_mail(); !r) return fail("daemon mail: " + r.error().message);
  adopt_slots();
  if (!write_pid_file(pid_path(paths_), ::getpid())) return fail("cannot write " + pid_path(paths_));
  log("serving " + std::to_string(num_slots_) + " slots of " + std::to_string(slot_size_ >> 20) +
      " MiB; fabric peer id " + std::to_string(peer_id_));
  return {};
}

// The daemon is an ivshmem host peer: it receives the NIC's eventfds (so it
// can hand a process the doorbell of its slot) and its own (one per slot,
// rung by the NIC when that slot has completions for a waiting process).
Result<void> Daemon::connect_fabric() {
  std::string sock = fabric::Paths::daemon_socket(board::fabric_dir(opts_.cluster), opts_.node);
  auto s = connect_unix(sock);
  if (!s) return fail("cannot reach the fabric server: " + s.error().message);
  fabric_ = std::move(*s);
  UniqueFd fd;
  auto version = recv_i64_with_fd(fabric_.get(), fd, 5000);
  if (!version || *version != 0) return fail("fabric server: bad protocol version");
  auto id = recv_i64_with_fd(fabric_.get(), fd, 5000);
  if (!id) return fail("fabric server: no peer id");
  peer_id_ = *id;
  auto mem = recv_i64_with_fd(fabric_.get(), fd, 5000);
  if (!mem || *mem != -1) return fail("fabric server: no shared memory");
  fd.reset();  // the daemon has no business in the fabric memory
  auto deadline = Clock::now() + std::chrono::seconds(5);
  while (own_vectors_.size() < vectors_ && Clock::now() < deadline) {
    auto who = recv_i64_with_fd(fabric_.get(), fd, 5000);
    if (!who) return fail("fabric server: " + who.error().message);
    if (*who == peer_id_ && fd) own_vectors_.push_back(std::move(fd));
    else if (*who == int64_t(opts_.node) && fd) nic_vectors_.push_back(std::move(fd));
  }
  if (own_vectors_.size() < vectors_ || nic_vectors_.size() < abi::kNicVectors)
    return fail("fabric server: got " + std::to_string(own_vectors_.size()) + " own and " +
                std::to_string(nic_vectors_.size()) + " NIC vectors");
  return {};
}

void Daemon::read_fabric_notices() {
  UniqueFd fd;
  auto who = recv_i64_with_fd(fabric_.get(), fd, 0);
  if (!who) {
    if (who.error().message == "closed") {
      log("the fabric server went away");
      fabric_.reset();
    }
    return;
  }
  if (*who != int64_t(opts_.node)) return;  // other peers: not ours to ring
  if (!fd) {
    log("our NIC left the fabric");
    nic_vectors_.clear();
  } else {
    nic_vectors_.push_back(std::move(fd));
  }
}

void Daemon::ring_nic(uint32_t vector) {
  if (vector >= nic_vectors_.size()) return;
  uint64_t one = 1;
  ssize_t ignored = ::write(nic_vectors_[vector].get(), &one, sizeof one);
  (void)ignored;
}

Result<abi::CtrlResponse> Daemon::ctrl_call(abi::CtrlCommand cmd) {
  cmd.seq = ++ctrl_seq_;
  abi::CtrlCommand* slot = ctrl_.reserve();
  if (!slot) return fail("control queue full");
  *slot = cmd;
  ctrl_.push();
  ctrl_.publish();
  ring_nic(abi::kVectorControl);
  // The NIC's time, not the wall clock's (issue 20: under two CPU burners
  // an attach found QEMU kept off the CPU for the whole 5 s): no answer once
  // the timeout has passed and QEMU had as much CPU meanwhile, or after 10x
  // the timeout, or at once if the firmware stopped running.
  CpuDeadline deadline(qemu_pid_, opts_.ctrl_timeout, opts_.ctrl_timeout);
  for (auto pause = std::chrono::microseconds(20);;) {
    if (const abi::CtrlResponse* r = rsp_.peek()) {
      abi::CtrlResponse copy = *r;
      rsp_.pop();
      rsp_.release();
      if (copy.seq == cmd.seq) return copy;
      continue;  // a late answer to a command we gave up on
    }
    if (deadline.waited() >= opts_.ctrl_timeout) {
      abi::StatusBlock st = sram_->read_status();
      if (st.state != uint32_t(abi::FwState::kRunning))
        return fail("the firmware stopped running (state " + std::to_string(st.state) + ")");
      if (deadline.passed()) break;
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::microseconds(2000));
  }
  return fail("no answer " + deadline.spent());
}

// What the last process used is zeroed in place up to kWarmBytes (the
// first data ranges of the file, where the rings and the heap's first
// allocations lie) and punched out beyond: QEMU keeps its mapping of the
// pages zeroed in place, where each page punched out costs it a fault when
// the NIC next touches it (~13 us here: docs/platform.md). Punching keeps
// the size (QEMU maps the whole file: a truncate would fault it) and
// returns the pages to tmpfs. Either way the slot reads as zeros.
Result<void> Daemon::wipe(uint32_t slot) {
  constexpr uint64_t kWarmBytes = uint64_t(16) << 20;
  UniqueFd fd(::open(paths_.slot(slot).c_str(), O_RDWR | O_CLOEXEC));
  if (!fd) return fail_errno("open " + paths_.slot(slot), errno);
  // Never written: its pages stay the kernel's zero page, and the daemon's
  // resident memory does not grow by it (a 1 MiB vector did, by 1 MiB at
  // the first wipe: the soak's leak check saw it).
  static const char zeros[64 << 10] = {};
  auto zero = [&](uint64_t from, uint64_t to) -> Result<void> {
    for (uint64_t off = from; off < to;) {
      const ssize_t n = ::pwrite(fd.get(), zeros, std::min<uint64_t>(sizeof zeros, to - off), off_t(off));
      if (n <= 0) return fail_errno("wipe", n < 0 ? errno : EIO);
      off += uint64_t(n);
    }
    return {};
  };
  auto punch = [&](uint64_t from, uint64_t to) -> Result<void> {
    const int mode = FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE;
    return ::fallocate(fd.get(), mode, off_t(from), off_t(to - from)) == 0 ? Result<void>{} : zero(from, to);
  };
  uint64_t warm = 0;  // bytes zeroed in place so far
  for (uint64_t pos = 0; pos < slot_size_;) {
    const off_t data = ::lseek(fd.get(), off_t(pos), SEEK_DATA);
    if (data < 0) return errno == ENXIO ? Result<void>{} : punch(pos, slot_size_);  // only holes left / no SEEK_DATA
    off_t hole = ::lseek(fd.get(), data, SEEK_HOLE);
    const uint64_t end = hole < 0 ? slot_size_ : std::min<uint64_t>(uint64_t(hole), slot_size_);
    const uint64_t keep = std::min<uint64_t>(end - uint64_t(data), kWarmBytes - warm);
    if (auto r = zero(uint64_t(data), uint64_t(data) + keep); !r) return r;
    warm += keep;
    if (uint64_t(data) + keep < end)
      if (auto r = punch(uint64_t(data) + keep, end); !r) return r;
    pos = end;
  }
  return {};
}

namespace {
// The one CPU QEMU is pinned to (board/node.h, nic_cpu), -1 if it may run on
// more (or is gone). Asked at each attach: taskset may have moved it since.
int32_t pinned_cpu(pid_t qemu) {
  cpu_set_t s;
  if (!qemu || ::sched_getaffinity(qemu, sizeof s, &s) != 0 || CPU_COUNT(&s) != 1) return -1;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &s)) return c;
  return -1;
}

// The thread of QEMU that runs the NIC ("CPU 0/TCG": launcher.cpp names
// QEMU's threads), 0 if not found. Processes follow it (host/core/pin.cpp).
int32_t vcpu_thread(pid_t qemu) {
  if (!qemu) return 0;
  const std::string dir = "/proc/" + std::to_string(qemu) + "/task";
  DIR* d = ::opendir(dir.c_str());
  if (!d) return 0;
  int32_t found = 0;
  while (dirent* e = ::readdir(d)) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    std::ifstream f(dir + "/" + e->d_name + "/comm");
    std::string name;
    if (std::getline(f, name) && name.rfind("CPU ", 0) == 0) {
      found = int32_t(std::atoi(e->d_name));
      break;
    }
  }
  ::closedir(d);
  return found;
}
}  // namespace

Result<uint32_t> Daemon::attach(int conn, pid_t pid, uid_t uid, abi::AttachReply& reply) {
  reply.status = abi::kAttachNoFreeSlot;
  if (uid != ::getuid() && uid != 0) {
    reply.status = abi::kAttachDenied;
    return fail("uid " + std::to_string(uid) + " may not use this node");
  }
  uint32_t k = 0;
  while (k < num_slots_ && slots_[k].use != SlotUse::kFree) ++k;
  if (k == num_slots_)
    return fail("no free slot: all " + std::to_string(num_slots_) + " slots of node " + std::to_string(opts_.node) +
                " are in use");
  if (auto r = wipe(k); !r) {
    reply.status = abi::kAttachNicDown;
    return std::unexpected(r.error());
  }
  auto slot_map = Mapping::map_file(paths_.slot(k), abi::kSlotHeaderSize, true);
  if (!slot_map) return std::unexpected(slot_map.error());
  abi::SlotLayout layout = make_layout(slot_size_, opts_.sq_capacity, opts_.cq_capacity, opts_.eq_capacity);
  auto* h = reinterpret_cast<abi::SlotHeader*>(slot_map->data());
  h->magic = abi::kSlotMagic;
  h->abi_version = ULNIC_ABI_VERSION;
  h->slot_index = k;
  h->node_id = opts_.node;
  h->generation = ++generation_;
  h->layout = layout;
  abi::CtrlCommand cmd{};
  cmd.opcode = abi::kCtrlAttachSlot;
  cmd.slot = k;
  cmd.host_peer = uint32_t(peer_id_);
  cmd.host_vector = k;
  cmd.generation = generation_;
  cmd.layout = layout;
  auto r = ctrl_call(cmd);
  if (r && r->status == abi::kCtrlBadSlot) {
    // The firmware serves the slot already: an attach we gave up on before
    // (no answer in time) that it took later. Stop that, and attach anew.
    abi::CtrlCommand d{};
    d.opcode = abi::kCtrlDetachSlot;
    d.slot = k;
    if (auto dr = ctrl_call(d); dr && dr->status == abi::kCtrlOk) {
      log("slot " + std::to_string(k) + ": the firmware served it from an attach given up on; detached it");
      r = ctrl_call(cmd);  // (nobody mapped it: the header above is all it holds)
    }
  }
  if (!r || r->status != abi::kCtrlOk) {
    reply.status = abi::kAttachNicDown;
    return fail(r ? "the firmware refused the slot (status " + std::to_string(r->status) + ")"
                  : "the firmware did not answer: " + r.error().message);
  }
  UniqueFd slot_fd(::open(paths_.slot(k).c_str(), O_RDWR | O_CLOEXEC));
  if (!slot_fd) return fail_errno("open slot", errno);
  reply.status = abi::kAttachOk;
  reply.slot = k;
  reply.generation = generation_;
  reply.slot_size = slot_size_;
  reply.nic_cpu = pinned_cpu(qemu_pid_);
  reply.nic_thread = vcpu_thread(qemu_pid_);
  std::snprintf(reply.message, sizeof reply.message, "slot %u of node %u", k, opts_.node);
  int fds[3] = {slot_fd.get(), nic_vectors_[abi::kVectorSlotBase + k].get(), own_vectors_[k].get()};
  if (auto s = send_with_fds(conn, &reply, sizeof reply, fds, 3); !s) {
    abi::CtrlCommand d{};
    d.opcode = abi::kCtrlDetachSlot;
    d.slot = k;
    (void)ctrl_call(d);
    return fail("client vanished during attach: " + s.error().message);
  }
  slots_[k].use = SlotUse::kAttached;
  slots_[k].pid = pid;
  slots_[k].uid = uid;
  slots_[k].generation = generation_;
  return k;
}

// Accepting never waits for the request: a client that connects and says
// nothing (or too little) must not stall the daemon for the others.
void Daemon::accept_client() {
  UniqueFd conn(::accept4(listen_.get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK));
  if (!conn) return;
  if (pending_.size() >= 64) return;  // flood: drop the newcomer
  pending_.push_back({std::move(conn), Clock::now() + std::chrono::seconds(2)});
}

void Daemon::serve_request(UniqueFd conn) {
  ucred cred{};
  socklen_t len = sizeof cred;
  ::getsockopt(conn.get(), SOL_SOCKET, SO_PEERCRED, &cred, &len);
  abi::AttachRequest req{};
  std::vector<UniqueFd> junk_fds;
  abi::AttachReply reply{};
  reply.magic = abi::kAttachMagic;
  reply.node_id = opts_.node;
  reply.nic_cpu = -1;
  // Garbage, a short request or a hang-up mid-request costs the client its
  // connection, never the daemon.
  auto got = recv_with_fds(conn.get(), &req, sizeof req, junk_fds, 0, 0);
  if (!got || req.magic != abi::kAttachMagic) {
    reply.status = abi::kAttachBadRequest;
    std::snprintf(reply.message, sizeof reply.message, "bad attach request");
    (void)send_with_fds(conn.get(), &reply, sizeof reply, nullptr, 0);
    log("pid " + std::to_string(cred.pid) + ": bad attach request" + (got ? "" : ": " + got.error().message));
    return;
  }
  if (req.abi_version != ULNIC_ABI_VERSION) {
    reply.status = abi::kAttachBadVersion;
    std::snprintf(reply.message, sizeof reply.message, "library ABI %u, NIC ABI %u", req.abi_version,
                  ULNIC_ABI_VERSION);
    (void)send_with_fds(conn.get(), &reply, sizeof reply, nullptr, 0);
    return;
  }
  auto k = attach(conn.get(), cred.pid, cred.uid, reply);
  if (!k) {
    std::snprintf(reply.message, sizeof reply.message, "%s", k.error().message.c_str());
    (void)send_with_fds(conn.get(), &reply, sizeof reply, nullptr, 0);
    log("pid " + std::to_string(cred.pid) + ": " + k.error().message);
    return;
  }
  slots_[*k].conn = std::move(conn);
  log("pid " + std::to_string(cred.pid) + " attached to slot " + std::to_string(*k));
}

// The firmware stops serving slot k and lets go of what its process had.
Result<abi::CtrlResponse> Daemon::ctrl_detach(uint32_t k) {
  abi::CtrlCommand cmd{};
  cmd.opcode = abi::kCtrlDetachSlot;
  cmd.slot = k;
  return ctrl_call(cmd);
}

void Daemon::detach(uint32_t k) {
  SlotRec& s = slots_[k];
  vmmc_detach(k);
  auto r = ctrl_detach(k);
  log("slot " + std::to_string(k) + " (pid " + std::to_string(s.pid) + ") detached" +
      (r ? ", " + std::to_string(r->value) + " descriptors flushed" : ": firmware did not answer"));
  s.conn.reset();
  s.use = SlotUse::kDraining;
}

// Any process other than QEMU that still maps or holds the slot file. By
// device and inode, never by path: the runtime directory may be spelled many
// ways (a trailing slash, a symlink), the file is always the same.
bool Daemon::slot_in_use_elsewhere(uint32_t k) const {
  struct stat want {};
  if (::stat(paths_.slot(k).c_str(), &want) != 0) return false;
  DIR* proc = ::opendir("/proc");
  if (!proc) return false;
  bool found = false;
  while (dirent* e = ::readdir(proc)) {
    if (found) break;
    char* end;
    long pid = std::strtol(e->d_name, &end, 10);
    if (*end || pid <= 0 || pid == qemu_pid_ || pid == ::getpid()) continue;
    std::ifstream maps("/proc/" + std::string(e->d_name) + "/maps");
    for (std::string line; !found && std::getline(maps, line);) {
      // address perms offset dev(major:minor, hex) inode path
      unsigned major = 0, minor = 0;
      unsigned long long inode = 0;
      if (std::sscanf(line.c_str(), "%*s %*s %*s %x:%x %llu", &major, &minor, &inode) == 3 && inode == want.st_ino &&
          makedev(major, minor) == want.st_dev)
        found = true;
    }
    std::error_code ec;
    for (const auto& fd : fs::directory_iterator("/proc/" + std::string(e->d_name) + "/fd", ec)) {
      struct stat st {};
      if (::stat(fd.path().c_str(), &st) == 0 && st.st_dev == want.st_dev && st.st_ino == want.st_ino) {
        found = true;
        break;
      }
    }
  }
  ::closedir(proc);
  return found;
}

void Daemon::reclaim_drained() {
  for (uint32_t k = 0; k < num_slots_; ++k) {
    SlotRec& s = slots_[k];
    if ((s.use != SlotUse::kDraining && s.use != SlotUse::kOrphaned) || slot_in_use_elsewhere(k)) continue;
    if (s.use == SlotUse::kOrphaned) {
      auto r = ctrl_detach(k);
      log("slot " + std::to_string(k) + " (of an earlier daemon) let go" +
          (r ? ", " + std::to_string(r->value) + " descriptors flushed" : ": firmware did not answer"));
      slot_gone(k);
    }
    if (auto r = wipe(k); !r) {
      log("slot " + std::to_string(k) + ": " + r.error().message);
      continue;
    }
    s = SlotRec{};
    log("slot " + std::to_string(k) + " wiped and free");
  }
}

// A daemon that starts on a board that has run one before (the last was
// killed: `ulnic node start` restarts it) finds slots the NIC may still
// serve. Those a process still holds stay its own (orphaned: its traffic goes
// on, but it has no daemon to ask for anything); the others are detached
// and wiped now. Generations start past any an earlier daemon gave (the NIC
// tells owners apart by them), at the time of day in microseconds.
void Daemon::adopt_slots() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  generation_ = uint64_t(ts.tv_sec) * 1'000'000 + uint64_t(ts.tv_nsec) / 1'000;
  for (uint32_t k = 0; k < num_slots_; ++k) {
    // A slot an earlier daemon attached still has the header it wrote (a
    // detach wipes it); a fresh slot file is zeros.
    bool used_before = false;
    if (auto m = Mapping::map_file(paths_.slot(k), abi::kSlotHeaderSize, false))
      used_before = reinterpret_cast<const abi::SlotHeader*>(m->data())->magic == abi::kSlotMagic;
    if (!used_before) continue;
    if (slot_in_use_elsewhere(k)) {
      slots_[k].use = SlotUse::kOrphaned;
      log("slot " + std::to_string(k) + " is held by a process of an earlier daemon: the NIC serves it on; " +
          "reclaimed when it is let go");
      continue;
    }
    auto r = ctrl_detach(k);
    log("slot " + std::to_string(k) + " (of an earlier daemon): its process is gone" +
        (r ? ", " + std::to_string(r->value) + " descriptors flushed" : ": firmware did not answer"));
    if (auto w = wipe(k); !w) log("slot " + std::to_string(k) + ": " + w.error().message);
    slot_gone(k);
  }
}

// The imports of a slot an earlier daemon attached are unknown to us: every
// other daemon is told to revoke whatever grants that slot holds.
void Daemon::slot_gone(uint32_t k) {
  abi::MailVmmc m{};
  m.type = abi::kMailSlotGone;
  m.importer_slot = k;
  for (uint32_t n = 0; n < sram_->boot_config().num_nodes; ++n) send_mail(n, m);
}

void Daemon::follow_reboots() {
  abi::StatusBlock st = sram_->read_status();
  if (st.boot_count == boot_count_ || st.state != uint32_t(abi::FwState::kRunning)) return;
  boot_count_ = st.boot_count;
  // A new firmware image (a reflash) started a new control conversation and
  // forgot everything it held for the slots: registrations, VIs, exports,
  // AM endpoints, and the work in flight, which will never complete. So the
  // processes lose their slots, as if detached: each slot's header says
  // flushed (its waits fail at once, libvipl flushes its VIs), its daemon
  // connection closes, its imports' grants are given back, and the slot is
  // wiped once its process lets go. New processes get fresh slots.
  auto* area = reinterpret_cast<abi::CtrlArea*>(sram_->at(abi::kCtrlOffset));
  ctrl_.attach(&area->cmd_ring, area->cmds, abi::kCtrlCapacity);
  rsp_.attach(&area->rsp_ring, area->rsps, abi::kCtrlCapacity);
  log("firmware rebooted (boot #" + std::to_string(boot_count_) + "): its slots' processes lost their NIC state");
  if (auto r = init_mail(); !r) log("daemon mail: " + r.error().message);
  for (uint32_t k = 0; k < num_slots_; ++k) {
    if (slots_[k].use == SlotUse::kAttached) detach(k);
    else if (slots_[k].use != SlotUse::kOrphaned) continue;
    if (auto m = Mapping::map_file(paths_.slot(k), abi::kSlotHeaderSize, true)) {
      auto* h = reinterpret_cast<abi::SlotHeader*>(m->data());
      __atomic_store_n(&h->nic.state, uint32_t(abi::SlotState::kFlushed), __ATOMIC_RELEASE);
      __atomic_store_n(&h->nic.sq_dormant, 0u, __ATOMIC_RELEASE);
    }
    uint64_t one = 1;  // wake a process asleep on its completions: it sees the state
    ssize_t ignored = ::write(own_vectors_[k].get(), &one, sizeof one);
    (void)ignored;
  }
  vmmc_forget_all();
}

void Daemon::wake() {
  char c = 1;
  ssize_t ignored = ::write(wake_wr_.get(), &c, 1);
  (void)ignored;
}

Result<void> Daemon::run(volatile const bool* stop) {
  while (!*stop) {
    std::vector<pollfd> fds = {{listen_.get(), POLLIN, 0},
                               {wake_rd_.get(), POLLIN, 0},
                               {own_vectors_[abi::kDaemonMailVector].get(), POLLIN, 0}};
    if (fabric_) fds.push_back({fabric_.get(), POLLIN, 0});
    std::vector<uint32_t> owners;
    for (uint32_t k = 0; k < num_slots_; ++k)
      if (slots_[k].use == SlotUse::kAttached) {
        fds.push_back({slots_[k].conn.get(), POLLIN, 0});
        owners.push_back(k);
      }
    size_t first_pending = fds.size(), npending = pending_.size();
    for (const Pending& p : pending_) fds.push_back({p.conn.get(), POLLIN, 0});
    bool draining = false;
    for (const auto& s : slots_) draining |= s.use == SlotUse::kDraining || s.use == SlotUse::kOrphaned;
    // Wake up now and then to follow firmware reboots and, while a slot
    // drains, to see whether its last holder is gone.
    int n = ::poll(fds.data(), fds.size(),
                   !mail_backlog_.empty() ? 1 : !pending_imports_.empty() ? 50 : draining || !pending_.empty() ? 100 : 500);
    if (n < 0 && errno != EINTR) return fail_errno("poll", errno);
    if (n > 0) {
      if (fds[0].revents) accept_client();
      if (fds[1].revents) {
        char drain[64];
        while (::read(wake_rd_.get(), drain, sizeof drain) > 0) {
        }
      }
      if (fds[2].revents) {
        uint64_t count;
        ssize_t ignored = ::read(fds[2].fd, &count, sizeof count);
        (void)ignored;
      }
      size_t first_owner = fabric_ ? 4 : 3;
      if (fabric_ && fds[3].revents) read_fabric_notices();
      for (size_t i = 0; i < owners.size(); ++i)
        if (fds[first_owner + i].revents) serve_owner(owners[i]);
      std::vector<Pending> still;
      for (size_t i = 0; i < pending_.size(); ++i) {  // entries past npending were accepted just now
        if (i < npending && fds[first_pending + i].revents) serve_request(std::move(pending_[i].conn));
        else still.push_back(std::move(pending_[i]));
      }
      pending_ = std::move(still);
    }
    // Clients that connected and said nothing in time are dropped.
    std::erase_if(pending_, [](const Pending& p) { return Clock::now() > p.deadline; });
    read_mail();
    flush_mail();
    if (!pending_imports_.empty()) retry_imports();
    follow_reboots();
    if (draining) reclaim_drained();
    if (qemu_pid_ && !process_alive(qemu_pid_)) {
      log("the board's QEMU (pid " + std::to_string(qemu_pid_) + ") is gone; exiting");
      break;
    }
  }
  for (uint32_t k = 0; k < num_slots_; ++k)
    if (slots_[k].use == SlotUse::kAttached) detach(k);
  ::unlink(socket_path(paths_).c_str());
  ::unlink(pid_path(paths_).c_str());
  return {};
}

}  // namespace ulnic::daemon
