// The wake plugin: a QEMU TCG plugin the board loads into every NIC that has
// a fabric (`-plugin ulnic-wake.so,sram=<SRAM file>,fd=<wake connection>`).
// It lets the NIC sleep on its doorbells in its own vCPU thread, so that a
// doorbell wakes that thread directly instead of going through QEMU's main
// loop, an MSI and the global lock (shared/include/ulnic/abi/wake.h has the
// handshake with the firmware).
//
// The board connects to the fabric server's wake socket for this node before
// it starts QEMU (QEMU connects its fabric device before it loads plugins)
// and QEMU inherits the connection (`fd=N`); at install the plugin reads the
// NIC's own doorbell eventfds from it (the ones host processes, the daemon
// and peer NICs write). While it is open the server gives QEMU's ivshmem
// device eventfds nobody rings, so only this plugin reads the real ones and
// no doorbell can be taken from under it. Without them it stays out of the
// way: it never acknowledges a sleep, and the firmware sleeps in WFI as
// without a plugin.
//
// It also yields the host CPU where the firmware asks (kMarkYield: the NIC
// polls without finding work). $ULNIC_WAKE_YIELD=off leaves those markers
// alone (no-ops, as without a plugin).
//
// And it is the board's copy engine (kMarkCopy): it maps the files behind
// the NIC's slots and fabric (`slot<k>=`, `fabric=`) and makes the copies
// the firmware asks for between them with memcpy. $ULNIC_WAKE_COPY=off
// leaves those markers alone: the firmware copies everything itself.
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "plugin/qemu_plugin.h"
#include "wake/copy_regions.h"
#include "ulnic/abi/sram.h"
#include "ulnic/abi/wake.h"
#include "ulnic/util/fd.h"
#include "ulnic/util/sched_attr.h"

namespace abi = ulnic::abi;

const int qemu_plugin_version = 1;

namespace {

constexpr int kAnswerMs = 5000;      // how long install waits for the fabric server
constexpr uint64_t kSliceNs = 100'000;  // the vCPU thread's scheduler slice while it sleeps (set_slice)

// The vCPU thread's scheduler slice awake and asleep (set_slice).
struct Slice {
  bool known = false, use = false;
  uint64_t own_ns = 0, sleeping_ns = 0;  // sched_runtime: the thread's own (0: the kernel's), asleep
};

// One NIC hart (-smp 1): the callback runs on its vCPU thread only.
struct State {
  abi::WakeBlock* block = nullptr;  // in the SRAM file
  abi::CopyBlock* copy = nullptr;   // in the same page
  ulnic::wake::Mapped regions[abi::kCopyRegions];
  std::vector<pollfd> doorbells;    // index = vector
  std::vector<ulnic::UniqueFd> owned;
  Slice slice;
  bool yield = true;                // $ULNIC_WAKE_YIELD is not "off"
  bool copies = true;               // $ULNIC_WAKE_COPY is not "off"
} g;

template <class T>
void put(T& field, T v) {
  __atomic_store_n(&field, v, __ATOMIC_RELAXED);
}

// While it sleeps in the plugin the vCPU thread has a short scheduler slice
// (Linux >= 6.12; older kernels ignore it), as a process that sleeps on its
// NIC has (host/core/queue.cpp): woken by a doorbell onto a CPU where the
// process that rang spins, it then preempts that process at once instead of
// waiting out its slice. Once awake it gets its own slice back: kept short,
// a NIC streaming beside busy processes was preempted every 100 us (FM's
// depth-16 rate ~8% lower, measured). $ULNIC_WAKE_SLICE_US: the slice (0:
// leave the thread's alone).
void set_slice(Slice& s, bool sleeping) {
  if (!s.known) {
    s.known = true;
    s.sleeping_ns = kSliceNs;
    if (const char* e = std::getenv("ULNIC_WAKE_SLICE_US"); e && *e) s.sleeping_ns = std::strtoull(e, nullptr, 10) * 1000;
    ulnic::SchedAttr a;
    // SCHED_OTHER only, and never longer than its own.
    if (s.sleeping_ns == 0 || !ulnic::get_sched_attr(a) || a.sched_policy != 0 ||
        (a.sched_runtime && a.sched_runtime <= s.sleeping_ns))
      return;
    s.own_ns = a.sched_runtime;
    s.use = true;
  }
  if (!s.use) return;
  // The nice value as it is now: the node daemon's priority guard may have
  // raised QEMU's threads meanwhile (emulator/daemon/priority_guard.h).
  ulnic::SchedAttr now;
  if (!ulnic::get_sched_attr(now) || now.sched_policy != 0) return;
  ulnic::SchedAttr want;
  want.sched_flags = now.sched_flags & ulnic::kSchedFlagResetOnFork;
  want.sched_nice = now.sched_nice;
  want.sched_runtime = sleeping ? s.sleeping_ns : s.own_ns;
  (void)ulnic::set_sched_attr(want);
}

void say(const std::string& line) { qemu_plugin_outs(("ulnic-wake: " + line + "\n").c_str()); }

// The firmware's sleep marker: block until a doorbell or the sleep's limit,
// then say which vectors were rung and acknowledge the sleep.
void on_sleep(unsigned int, void*) {
  abi::WakeBlock& w = *g.block;
  const uint64_t seq = __atomic_load_n(&w.fw_seq, __ATOMIC_ACQUIRE);
  uint64_t us = __atomic_load_n(&w.sleep_us, __ATOMIC_RELAXED);
  if (us > abi::kMaxWakeSleepUs) us = abi::kMaxWakeSleepUs;
  timespec limit{time_t(us / 1000000), long(us % 1000000) * 1000};
  for (pollfd& p : g.doorbells) p.revents = 0;
  set_slice(g.slice, true);
  int n;
  while ((n = ::ppoll(g.doorbells.data(), g.doorbells.size(), &limit, nullptr)) < 0 && errno == EINTR) {
  }
  set_slice(g.slice, false);
  uint64_t woke = 0;
  for (size_t v = 0; n > 0 && v < g.doorbells.size(); ++v) {
    pollfd& p = g.doorbells[v];
    if (p.revents & POLLIN) {
      uint64_t count;
      if (::read(p.fd, &count, sizeof count) == ssize_t(sizeof count)) woke |= uint64_t(1) << v;
    } else if (p.revents) {  // (never seen) an eventfd in error would end every sleep at once: no longer polled
      say("doorbell " + std::to_string(v) + " is broken: no longer polled");
      p.fd = -1;
    }
  }
  put(w.woke, woke);
  put(w.sleeps, w.sleeps + 1);
  if (woke) put(w.rung, w.rung + 1);
  __atomic_store_n(&w.plugin_seq, seq, __ATOMIC_RELEASE);
}

// The firmware's yield marker: whoever else waits for this CPU runs first
// (a peer NIC whose ring this one waits on, a process that polls it).
void on_yield(unsigned int, void*) {
  ::sched_yield();
  put(g.block->yields, g.block->yields + 1);
}

// The firmware's copy marker: copy, count, acknowledge; or refuse (no
// acknowledgement: the firmware copies it itself). A copy of length 0 is the
// boot's question whether the engine is here.
void on_copy(unsigned int, void*) {
  abi::CopyBlock& c = *g.copy;
  const uint64_t seq = __atomic_load_n(&c.fw_seq, __ATOMIC_ACQUIRE);
  const uint64_t n = __atomic_load_n(&c.len, __ATOMIC_RELAXED);
  if (n) {
    uint8_t* dst = ulnic::wake::resolve(c.regions, g.regions, __atomic_load_n(&c.dst, __ATOMIC_RELAXED), n);
    const uint8_t* src = ulnic::wake::resolve(c.regions, g.regions, __atomic_load_n(&c.src, __ATOMIC_RELAXED), n);
    if (!dst || !src) {
      put(c.refused, c.refused + 1);
      return;
    }
    std::memmove(dst, src, n);  // the firmware's memmove hands it overlapping ones too
    put(c.copies, c.copies + 1);
    put(c.bytes, c.bytes + n);
  }
  __atomic_store_n(&c.plugin_seq, seq, __ATOMIC_RELEASE);
}

void on_translate(qemu_plugin_id_t, qemu_plugin_tb* tb) {
  for (size_t i = 0, n = qemu_plugin_tb_n_insns(tb); i < n; ++i) {
    qemu_plugin_insn* insn = qemu_plugin_tb_get_insn(tb, i);
    int32_t imm;
    if (!qemu_plugin_marker(insn, imm)) continue;
    if (imm == abi::kMarkSleep)
      qemu_plugin_register_vcpu_insn_exec_cb(insn, on_sleep, QEMU_PLUGIN_CB_NO_REGS, nullptr);
    else if (imm == abi::kMarkYield && g.yield)
      qemu_plugin_register_vcpu_insn_exec_cb(insn, on_yield, QEMU_PLUGIN_CB_NO_REGS, nullptr);
    else if (imm == abi::kMarkCopy && g.copy->mapped)
      qemu_plugin_register_vcpu_insn_exec_cb(insn, on_copy, QEMU_PLUGIN_CB_NO_REGS, nullptr);
  }
}

// One message of the fabric server: an int64 and at most one fd (-1 if
// none). False on a timeout, a short message or a closed connection.
bool recv_message(int sock, int64_t& value, int& fd) {
  fd = -1;
  pollfd p{sock, POLLIN, 0};
  if (::poll(&p, 1, kAnswerMs) != 1) return false;
  iovec iov{&value, sizeof value};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  msghdr m{};
  m.msg_iov = &iov;
  m.msg_iovlen = 1;
  m.msg_control = control;
  m.msg_controllen = sizeof control;
  const ssize_t n = ::recvmsg(sock, &m, MSG_CMSG_CLOEXEC);
  for (cmsghdr* c = CMSG_FIRSTHDR(&m); c; c = CMSG_NXTHDR(&m, c))
    if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS && c->cmsg_len == CMSG_LEN(sizeof(int)))
      std::memcpy(&fd, CMSG_DATA(c), sizeof fd);
  if (n == ssize_t(sizeof value) && !(m.msg_flags & MSG_CTRUNC)) return true;
  if (fd >= 0) ::close(fd);
  return false;
}

// The NIC's doorbell eventfds from the fabric server, on the connection the
// board made before starting QEMU (fd `sock`, inherited): a count, then that
// many (vector, eventfd) messages. An empty string, or what went wrong.
std::string take_doorbells(int sock) {
  ulnic::UniqueFd s(sock);
  if (::fcntl(sock, F_SETFD, FD_CLOEXEC) != 0) return "fd " + std::to_string(sock) + " is not open";
  int64_t count = 0;
  int fd = -1;
  if (!recv_message(sock, count, fd)) return "no answer";
  ulnic::UniqueFd stray(fd);
  if (count <= 0 || count > 64) return "a count of " + std::to_string(count) + " vectors";
  std::vector<pollfd> bells(size_t(count), pollfd{-1, POLLIN, 0});
  for (int64_t k = 0; k < count; ++k) {
    int64_t v = 0;
    if (!recv_message(sock, v, fd)) return "vector message " + std::to_string(k) + " missing";
    ulnic::UniqueFd bell(fd);
    if (v < 0 || v >= count || !bell || bells[size_t(v)].fd >= 0) return "a bad vector message";
    bells[size_t(v)].fd = bell.get();
    g.owned.push_back(std::move(bell));
  }
  g.doorbells = std::move(bells);
  // The connection stays open for QEMU's life: the server gives this NIC's
  // device the unrung eventfds while it is.
  g.owned.push_back(std::move(s));
  return "";
}

// Maps the file behind region k (a slot or the fabric's memory) whole; an
// empty string, or what went wrong.
std::string map_region(uint32_t k, const char* path) {
  ulnic::UniqueFd fd(::open(path, O_RDWR | O_CLOEXEC));
  struct stat st {};
  if (!fd || ::fstat(fd.get(), &st) != 0 || st.st_size <= 0) return std::string("cannot open ") + path;
  void* p = ::mmap(nullptr, size_t(st.st_size), PROT_READ | PROT_WRITE, MAP_SHARED, fd.get(), 0);
  if (p == MAP_FAILED) return std::string("cannot map ") + path;
  g.regions[k] = ulnic::wake::Mapped{static_cast<uint8_t*>(p), uint64_t(st.st_size)};
  return "";
}

}  // namespace

int qemu_plugin_install(qemu_plugin_id_t id, const void*, int argc, char** argv) {
  const char* sram = nullptr;
  int sock = -1;
  const char* files[abi::kCopyRegions] = {};  // slot<k>=, fabric=
  for (int i = 0; i < argc; ++i) {
    if (std::strncmp(argv[i], "sram=", 5) == 0) sram = argv[i] + 5;
    if (std::strncmp(argv[i], "fd=", 3) == 0) sock = std::atoi(argv[i] + 3);
    if (std::strncmp(argv[i], "fabric=", 7) == 0) files[abi::kCopyFabricRegion] = argv[i] + 7;
    char* end = nullptr;
    if (std::strncmp(argv[i], "slot", 4) == 0) {
      const unsigned long k = std::strtoul(argv[i] + 4, &end, 10);
      if (end != argv[i] + 4 && *end == '=' && k < abi::kMaxSlots) files[k] = end + 1;
    }
  }
  if (!sram || sock < 0) {
    say("needs sram=<the board's SRAM file> and fd=<its connection to the fabric server's wake socket>");
    return -1;
  }
  int fd = ::open(sram, O_RDWR | O_CLOEXEC);
  void* p = fd < 0 ? MAP_FAILED
                   : ::mmap(nullptr, abi::kWakeSize, PROT_READ | PROT_WRITE, MAP_SHARED, fd, off_t(abi::kWakeOffset));
  if (fd >= 0) ::close(fd);
  if (p == MAP_FAILED) {
    say(std::string("cannot map ") + sram);
    return -1;
  }
  g.block = static_cast<abi::WakeBlock*>(p);
  g.copy = reinterpret_cast<abi::CopyBlock*>(static_cast<uint8_t*>(p) + (abi::kCopyOffset - abi::kWakeOffset));
  put(g.block->vectors, 0u);
  put(g.copy->mapped, 0u);
  if (const std::string why = take_doorbells(sock); !why.empty()) {
    // Out of the way: the firmware sleeps in WFI, woken through QEMU's device.
    say("no doorbells from the fabric server (" + why + "): the NIC sleeps in WFI");
    return 0;
  }
  put(g.block->vectors, uint32_t(g.doorbells.size()));
  if (const char* e = std::getenv("ULNIC_WAKE_YIELD"); e && std::strcmp(e, "off") == 0) g.yield = false;
  if (const char* e = std::getenv("ULNIC_WAKE_COPY"); e && std::strcmp(e, "off") == 0) g.copies = false;
  uint32_t mapped = 0;
  for (uint32_t k = 0; g.copies && k < abi::kCopyRegions; ++k) {
    if (!files[k]) continue;
    if (const std::string why = map_region(k, files[k]); !why.empty())
      say(why + ": the firmware copies to and from it itself");
    else
      mapped |= 1u << k;
  }
  put(g.copy->mapped, mapped);
  qemu_plugin_register_vcpu_tb_trans_cb(id, on_translate);
  return 0;
}
