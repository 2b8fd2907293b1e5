// Shared by the benchmark programs (slot_bench, fabric_bench, vmmc_bench,
// vipl_bench, hop_bench, ...): timing helpers, min/median/max summaries and
// quantiles, a small JSON writer, machine facts, the host-only floors every
// NIC figure is compared against in the same run (a two-process shared-memory
// ping-pong, a blocking eventfd ping-pong and memcpy bandwidth),
// the NIC's firmware counters (`ulnic node status --json`), who used the CPUs
// over a run, and the windows of a bandwidth measurement.
#pragma once

#include <sched.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "ulnic/nic.h"
#include "ulnic/util/json.h"
#include "ulnic/util/runtime_dir.h"

namespace bench {

using Clock = std::chrono::steady_clock;

// The program's name in messages ("fabric_bench", "vmmc_bench serve"): main sets it.
inline std::string program = "bench";

// Prints "<program>: msg" and exits 1.
[[noreturn]] inline void die(const std::string& msg) {
  std::fprintf(stderr, "%s: %s\n", program.c_str(), msg.c_str());
  std::exit(1);
}

// ------------------------------------------------------------------ helpers

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ volatile("yield");
#endif
}

inline double us_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::micro>(b - a).count();
}

inline double seconds_since(Clock::time_point a) { return std::chrono::duration<double>(Clock::now() - a).count(); }

// Spins until pred() holds: cpu_relax, then after `yield_after` looks either
// sched_yield (sleep_ns 0) or nanosleep(sleep_ns) between looks (two cores,
// two QEMUs and two host processes). False after `limit_s`.
template <class Pred>
bool spin_until(Pred pred, uint32_t yield_after, uint32_t sleep_ns, double limit_s) {
  uint32_t k = 0;
  auto start = Clock::now();
  const timespec nap{0, long(sleep_ns)};
  while (!pred()) {
    if (++k <= yield_after) cpu_relax();
    else if (sleep_ns) ::nanosleep(&nap, nullptr);
    else ::sched_yield();
    if ((k & 0x3ff) == 0 && seconds_since(start) > limit_s) return pred();
  }
  return true;
}

// The value of option argv[i] (i moves on to it); usage() if there is none.
inline std::string next_arg(int argc, char** argv, int& i, void (*usage)()) {
  if (i + 1 >= argc) usage();
  return argv[++i];
}

// main of a program with two modes: `serve ...` and `client ...` (argv[1]).
inline int serve_or_client(int argc, char** argv, int (*serve)(int, char**), int (*client)(int, char**),
                           void (*usage)()) {
  if (argc < 2) usage();
  const std::string mode = argv[1];
  if (mode == "serve") return serve(argc, argv);
  if (mode == "client") return client(argc, argv);
  usage();
  return 2;
}

// fork(); the child (0 returned there) dies with this process.
inline pid_t fork_child() {
  const pid_t parent = ::getpid();
  const pid_t child = ::fork();
  if (child < 0) die(std::string("fork: ") + std::strerror(errno));
  if (child == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(0);
  }
  return child;
}

struct Stats {
  double min = 0, median = 0, max = 0, mean = 0;
  size_t n = 0;
};

inline Stats summarize(std::vector<double> v) {
  Stats s;
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  s.n = v.size();
  s.min = v.front();
  s.max = v.back();
  s.median = v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
  double sum = 0;
  for (double x : v) sum += x;
  s.mean = sum / double(v.size());
  return s;
}

// The q-quantile (0 .. 1) of v by nearest rank (q = 0.99: the p99); 0 if v is empty.
inline double quantile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t rank = size_t(std::ceil(std::clamp(q, 0.0, 1.0) * double(v.size())));
  return v[rank ? rank - 1 : 0];
}

inline std::string size_name(uint64_t b) {
  char buf[32];
  if (b >= (1u << 20) && b % (1u << 20) == 0) std::snprintf(buf, sizeof buf, "%" PRIu64 " MiB", b >> 20);
  else if (b >= 1024 && b % 1024 == 0) std::snprintf(buf, sizeof buf, "%" PRIu64 " KiB", b >> 10);
  else std::snprintf(buf, sizeof buf, "%" PRIu64 " B", b);
  return buf;
}

// v printed with the printf format f ("%.0f").
inline std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

// Sizes as the programs take them: comma-separated, optional K/M suffix
// ("8,64,4K,1M"), or "none". Sorted, each once; 1 B .. kMaxCopyBytes.
inline std::vector<uint32_t> parse_sizes(const std::string& text) {
  std::vector<uint32_t> out;
  if (text.empty() || text == "none") return out;
  std::stringstream ss(text);
  for (std::string item; std::getline(ss, item, ',');) {
    if (item.empty()) continue;
    char* end = nullptr;
    uint64_t v = std::strtoull(item.c_str(), &end, 10);
    if (*end == 'K' || *end == 'k') v <<= 10, ++end;
    else if (*end == 'M' || *end == 'm') v <<= 20, ++end;
    if (*end || v == 0 || v > ulnic::abi::kMaxCopyBytes) die("bad size '" + item + "' in '" + text + "'");
    out.push_back(uint32_t(v));
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

// Every size of either list, ascending, each once.
inline std::vector<uint64_t> size_union(const std::vector<uint32_t>& a, const std::vector<uint32_t>& b) {
  std::set<uint64_t> all(a.begin(), a.end());
  all.insert(b.begin(), b.end());
  return {all.begin(), all.end()};
}

inline Stats scaled(Stats s, double k) {
  s.min *= k;
  s.median *= k;
  s.max *= k;
  s.mean *= k;
  return s;
}

// A tiny JSON writer: enough for nested objects, arrays, numbers and strings.
class Json {
 public:
  Json& begin_object(const char* key = nullptr) { return open(key, '{'); }
  Json& begin_array(const char* key = nullptr) { return open(key, '['); }
  Json& end_object() { return close('}'); }
  Json& end_array() { return close(']'); }
  Json& num(const char* key, double v) {
    char buf[64];
    if (v == double(int64_t(v)) && v < 1e15 && v > -1e15) std::snprintf(buf, sizeof buf, "%" PRId64, int64_t(v));
    else std::snprintf(buf, sizeof buf, "%.6g", v);
    return raw(key, buf);
  }
  Json& str(const char* key, const std::string& v) { return raw(key, "\"" + ulnic::json_escape(v) + "\""); }
  Json& boolean(const char* key, bool v) { return raw(key, v ? "true" : "false"); }
  Json& stats(const char* key, const Stats& s) {
    begin_object(key);
    num("min", s.min).num("median", s.median).num("max", s.max).num("mean", s.mean).num("n", double(s.n));
    return end_object();
  }
  Json& counters(const char* key, const std::map<std::string, uint64_t>& c) {
    begin_object(key);
    for (auto& [k, v] : c) num(k.c_str(), double(v));
    return end_object();
  }
  const std::string& text() const { return out_; }

 private:
  Json& open(const char* key, char c) {
    prefix(key);
    out_ += c;
    first_.push_back(true);
    return *this;
  }
  Json& close(char c) {
    bool empty = first_.back();
    first_.pop_back();
    if (!empty) out_ += "\n" + std::string(2 * first_.size(), ' ');
    out_ += c;
    return *this;
  }
  Json& raw(const char* key, const std::string& v) {
    prefix(key);
    out_ += v;
    return *this;
  }
  void prefix(const char* key) {
    if (!first_.empty()) {
      if (!first_.back()) out_ += ",";
      first_.back() = false;
      out_ += "\n" + std::string(2 * first_.size(), ' ');
    }
    if (key) out_ += "\"" + std::string(key) + "\": ";
  }
  std::string out_;
  std::vector<bool> first_;
};

// Writes the document to `path` and says so on stdout; dies if it cannot.
inline void write_json(const Json& j, const std::string& path) {
  std::ofstream out(path);
  out << j.text() << "\n";
  if (!out) die("cannot write " + path);
  std::printf("wrote %s\n", path.c_str());
}

// ------------------------------------------------------------ machine facts

struct Machine {
  long nproc = 0;
  int affinity = 0;
  std::string cpu_model, kernel, hypervisor;
  Stats clock_ns;  // cost of one steady_clock::now()
};

inline Machine machine_facts() {
  Machine m;
  m.nproc = ::sysconf(_SC_NPROCESSORS_ONLN);
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof set, &set) == 0) m.affinity = CPU_COUNT(&set);
  std::ifstream ci("/proc/cpuinfo");
  for (std::string line; std::getline(ci, line);) {
    if (m.cpu_model.empty() && line.rfind("model name", 0) == 0) m.cpu_model = line.substr(line.find(':') + 2);
    if (line.rfind("flags", 0) == 0) {
      m.hypervisor = line.find(" hypervisor") != std::string::npos ? "yes" : "no";
      break;
    }
  }
  utsname u{};
  if (::uname(&u) == 0) m.kernel = std::string(u.sysname) + " " + u.release + " " + u.machine;
  std::vector<double> d;
  for (int i = 0; i < 20000; ++i) {
    auto a = Clock::now();
    auto b = Clock::now();
    d.push_back(std::chrono::duration<double, std::nano>(b - a).count());
  }
  m.clock_ns = summarize(d);
  return m;
}

inline void print_machine(const Machine& m) {
  std::printf("machine: nproc %ld (affinity %d), %s, hypervisor %s, %s\n", m.nproc, m.affinity, m.cpu_model.c_str(),
              m.hypervisor.c_str(), m.kernel.c_str());
}

// "note: N CPUs<rest>" if the machine has fewer than `enough`.
inline void note_cpus(const Machine& m, long enough, const char* rest) {
  if (m.nproc < enough) std::printf("note: %ld CPUs%s\n", m.nproc, rest);
}

// "machine": {...}; with the cost of one steady_clock::now() under clock_key
// unless it is null.
inline void machine_json(Json& j, const Machine& m, const char* clock_key = nullptr) {
  j.begin_object("machine")
      .num("nproc", double(m.nproc))
      .num("affinity_cpus", m.affinity)
      .str("cpu_model", m.cpu_model)
      .str("hypervisor", m.hypervisor)
      .str("kernel", m.kernel);
  if (clock_key) j.stats(clock_key, m.clock_ns);
  j.end_object();
}

// ------------------------------------------------------- where CPU went

// A node's QEMU, from its pid file (the cluster: ULNIC_CLUSTER, else
// "default", as the libraries find their daemon); 0 if it cannot be read.
inline pid_t node_qemu_pid(uint32_t node) {
  const char* c = std::getenv("ULNIC_CLUSTER");
  std::ifstream f(ulnic::runtime_base_dir() + "/" + (c && *c ? c : "default") + "/node" + std::to_string(node) +
                  "/qemu.pid");
  long pid = 0;
  return f >> pid && pid > 0 ? pid_t(pid) : 0;
}

// The CPU time of every thread of a process so far, in ns (the scheduler's
// own sum, /proc/PID/task/*/schedstat: /proc/PID/stat counts 10 ms ticks);
// -1 once it is gone.
inline double process_cpu_ns(pid_t pid) {
  std::error_code ec;
  double ns = 0;
  bool any = false;
  for (const auto& t : std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/task", ec)) {
    std::ifstream f(t.path() / "schedstat");
    double run = 0;
    if (f >> run) ns += run, any = true;
  }
  return any ? ns : -1;
}

// Where the machine's CPU went over a stretch of a run: each named
// process's CPU time (all its threads) and the whole machine's busy time
// (/proc/stat: everything but idle, iowait and steal, in ticks). A benchmark that
// saturates the machine shows here which of its parts (hosts, NICs) a
// message's time went to, and how much went to neither.
class CpuMeter {
 public:
  struct Part {
    std::string name;
    pid_t pid;
    double ns0 = -1, ns = -1;
  };
  void add(const std::string& name, pid_t pid) { parts_.push_back({name, pid}); }
  void start() {
    for (Part& p : parts_) p.ns0 = p.pid ? process_cpu_ns(p.pid) : -1;
    busy0_ = machine_busy_ticks();
    t0_ = Clock::now();
  }
  void stop() {
    for (Part& p : parts_) p.ns = p.pid && p.ns0 >= 0 ? process_cpu_ns(p.pid) : -1;
    busy_ = machine_busy_ticks();
    seconds_ = seconds_since(t0_);
  }
  // {"cpu_us_per_msg": {part: us, ..., "machine": us, "other": us},
  //  "busy_cpus": the machine's busy CPUs on average, "seconds": the stretch}.
  // A part that could not be read is left out (and "other" with it).
  void json(Json& j, double msgs) const {
    j.begin_object("cpu_us_per_msg");
    double parts = 0;
    bool all = true;
    for (const Part& p : parts_) {
      if (p.ns < 0 || msgs <= 0) {
        all = false;
        continue;
      }
      j.num(p.name.c_str(), (p.ns - p.ns0) / 1e3 / msgs);
      parts += p.ns - p.ns0;
    }
    const double machine_ns = busy_cpus() * seconds_ * 1e9;
    if (msgs > 0) j.num("machine", machine_ns / 1e3 / msgs);
    if (all && msgs > 0) j.num("other", std::max(0.0, machine_ns - parts) / 1e3 / msgs);
    j.end_object().num("busy_cpus", busy_cpus()).num("seconds", seconds_);
  }
  // "host_client 0.85, host_server 1.26, nic_client 4.13, nic_server 3.74 us of CPU a message;
  //  machine busy 1.97 of 2 CPUs"
  std::string line(double msgs, long nproc) const {
    std::string s;
    for (const Part& p : parts_)
      if (p.ns >= 0 && msgs > 0) s += (s.empty() ? "" : ", ") + p.name + fmt(" %.2f", (p.ns - p.ns0) / 1e3 / msgs);
    return s + " us of CPU a message; machine busy " + fmt("%.2f", busy_cpus()) + " of " + std::to_string(nproc) +
           " CPUs";
  }
  // A stream's view (bulk rows): the share of a CPU each part kept busy
  // over the stretch. A part near 1 was busy or spinning (a NIC polls
  // between bursts and counts as busy: its work share is in a --cost
  // profile); none near it, and the machine not busy, means the hand-offs
  // between them (a window, a wake-up) bound it. {"cpu_shares": {part: CPUs, ...,
  // "machine": CPUs}, "seconds": the stretch}; nothing from a meter that
  // has no parts (one that was never started).
  void shares_json(Json& j) const {
    if (parts_.empty()) return;  // never started
    j.begin_object("cpu_shares");
    for (const Part& p : parts_)
      if (p.ns >= 0 && seconds_ > 0) j.num(p.name.c_str(), share(p));
    if (seconds_ >= kMinBusySeconds) j.num("machine", busy_cpus());
    j.end_object().num("seconds", seconds_);
  }
  // "host_client 0.12, host_server 0.04, nic_client 0.97, nic_server 0.81 of a CPU each; machine busy 1.96 of 2"
  std::string shares_line(long nproc) const {
    if (parts_.empty()) return "";  // never started
    std::string s;
    for (const Part& p : parts_)
      if (p.ns >= 0 && seconds_ > 0) s += (s.empty() ? "" : ", ") + p.name + fmt(" %.2f", share(p));
    return s + " of a CPU each; machine busy " +
           (seconds_ >= kMinBusySeconds ? fmt("%.2f", busy_cpus()) : "- (a stretch too short for its ticks)") +
           " of " + std::to_string(nproc);
  }
  double busy_cpus() const {
    const double hz = double(::sysconf(_SC_CLK_TCK));
    return seconds_ > 0 ? double(busy_ - busy0_) / hz / seconds_ : 0;
  }

 private:
  static uint64_t machine_busy_ticks() {
    std::ifstream f("/proc/stat");
    std::string cpu;
    uint64_t v[10] = {}, busy = 0;
    if (!(f >> cpu) || cpu != "cpu") return 0;
    for (int i = 0; i < 10 && f >> v[i]; ++i) {
    }
    // user nice system idle iowait irq softirq steal (guest, guest_nice: in user already);
    // steal is time the hypervisor ran something else: not ours.
    for (int i : {0, 1, 2, 5, 6}) busy += v[i];
    return busy;
  }
  // The machine's busy time comes in 10 ms ticks per CPU: over a shorter
  // stretch than this its share reads tenths off (2.87 of 2 CPUs was seen).
  static constexpr double kMinBusySeconds = 0.5;
  double share(const Part& p) const { return (p.ns - p.ns0) / 1e9 / seconds_; }
  std::vector<Part> parts_;
  uint64_t busy0_ = 0, busy_ = 0;
  Clock::time_point t0_{};
  double seconds_ = 0;
};

// ------------------------------------------------------------------ floors

struct PingPong {
  Stats rtt_us, oneway_us;
};

// Parent and child each own one cache line of a MAP_SHARED anonymous page;
// the parent stores a sequence number, the child echoes it back.
inline PingPong pingpong_floor(int warmup, int iters) {
  void* page = ::mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (page == MAP_FAILED) die(std::string("mmap shared page: ") + std::strerror(errno));
  auto* ping = reinterpret_cast<std::atomic<uint64_t>*>(page);
  auto* pong = reinterpret_cast<std::atomic<uint64_t>*>(static_cast<char*>(page) + 64);
  ping->store(0);
  pong->store(0);
  const pid_t child = fork_child();
  if (child == 0) {
    uint64_t last = 0;
    for (;;) {
      uint64_t v;
      while ((v = ping->load(std::memory_order_acquire)) == last) cpu_relax();
      if (v == ~uint64_t(0)) ::_exit(0);
      pong->store(v, std::memory_order_release);
      last = v;
    }
  }
  std::vector<double> rtt;
  rtt.reserve(size_t(iters));
  bool stuck = false;
  for (int i = 1; i <= warmup + iters && !stuck; ++i) {
    auto t0 = Clock::now();
    ping->store(uint64_t(i), std::memory_order_release);
    uint32_t spins = 0;
    while (pong->load(std::memory_order_acquire) != uint64_t(i)) {
      cpu_relax();
      if ((++spins & 0xfffff) == 0 && seconds_since(t0) > 5) stuck = true;
      if (stuck) break;
    }
    auto t1 = Clock::now();
    if (i > warmup) rtt.push_back(us_between(t0, t1));
  }
  ping->store(~uint64_t(0), std::memory_order_release);
  int st = 0;
  if (stuck) ::kill(child, SIGKILL);
  ::waitpid(child, &st, 0);
  ::munmap(page, 4096);
  if (stuck) die("ping-pong floor: the child process stopped answering");
  PingPong p;
  p.rtt_us = summarize(rtt);
  for (double& x : rtt) x /= 2;
  p.oneway_us = summarize(rtt);
  return p;
}

struct MemcpyFloor {
  uint64_t size = 0;
  Stats gbps;          // GB/s (1e9 bytes per second) per sample
  Stats ns_per_copy;   // time of one memcpy
};

// Buffers in private anonymous memory; dst sits size + 4416 bytes after src
// (not a power-of-two distance, so no 4K aliasing between the streams).
inline MemcpyFloor memcpy_floor(uint64_t size, int samples) {
  const uint64_t distance = size + 4096 + 320;
  const uint64_t map_len = ((192 + distance + size + 4095) / 4096) * 4096;
  void* m = ::mmap(nullptr, map_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) die(std::string("mmap memcpy buffers: ") + std::strerror(errno));
  auto* src = static_cast<uint8_t*>(m) + 192;
  uint8_t* dst = src + distance;
  for (uint64_t i = 0; i < size; ++i) src[i] = uint8_t(i * 7 + 1);
  std::memset(dst, 0, size);
  const uint64_t reps = std::clamp<uint64_t>((2u << 20) / size, 1, 20000);
  std::vector<double> gbps, ns;
  for (int s = -3; s < samples; ++s) {  // three warm-up samples
    auto t0 = Clock::now();
    for (uint64_t r = 0; r < reps; ++r) {
      std::memcpy(dst, src, size);
      __asm__ volatile("" : : "r"(dst), "r"(src) : "memory");
    }
    auto t1 = Clock::now();
    if (s < 0) continue;
    double sec = std::chrono::duration<double>(t1 - t0).count();
    gbps.push_back(double(size * reps) / sec / 1e9);
    ns.push_back(sec * 1e9 / double(reps));
  }
  if (std::memcmp(src, dst, size) != 0) die("memcpy floor: copy wrong (?)");
  ::munmap(m, map_len);
  MemcpyFloor f;
  f.size = size;
  f.gbps = summarize(gbps);
  f.ns_per_copy = summarize(ns);
  return f;
}

// memcpy_floor for each size, ascending.
inline std::map<uint64_t, MemcpyFloor> memcpy_floors(const std::vector<uint64_t>& sizes, int samples) {
  std::map<uint64_t, MemcpyFloor> mc;
  for (uint64_t s : sizes) mc[s] = memcpy_floor(s, samples);
  return mc;
}

inline void print_pingpong(const PingPong& pp) {
  std::printf("%-36s%10s%10s%10s\n", "shared-memory ping-pong, us", "min", "median", "max");
  std::printf("%-36s%10.3f%10.3f%10.3f\n", "  round trip (RTT)", pp.rtt_us.min, pp.rtt_us.median, pp.rtt_us.max);
  std::printf("%-36s%10.3f%10.3f%10.3f\n", "  one-way (RTT/2)", pp.oneway_us.min, pp.oneway_us.median,
              pp.oneway_us.max);
}

inline void pingpong_json(Json& j, const PingPong& pp) {
  j.begin_object("pingpong").stats("rtt_us", pp.rtt_us).stats("oneway_us", pp.oneway_us).end_object();
}

struct EventfdPingPong {
  Stats busy_rtt_us;  // back to back
  Stats idle_rtt_us;  // after an idle pause (both processes asleep, CPUs idle)
  int idle_ms = 0;
};

// Two processes that block in read() on eventfds: the floor for any path that
// wakes a sleeping thread (the doorbell -> QEMU -> NIC and NIC -> completion
// eventfd -> Nic::wait() hops each include at least one such wake-up).
inline EventfdPingPong eventfd_floor(int iters, int idle_samples, int idle_ms) {
  int to_child = ::eventfd(0, EFD_CLOEXEC), to_parent = ::eventfd(0, EFD_CLOEXEC);
  if (to_child < 0 || to_parent < 0) die(std::string("eventfd: ") + std::strerror(errno));
  const pid_t child = fork_child();
  if (child == 0) {
    for (;;) {
      uint64_t v = 0;
      if (::read(to_child, &v, sizeof v) != sizeof v || v != 1) ::_exit(0);
      v = 1;
      if (::write(to_parent, &v, sizeof v) != sizeof v) ::_exit(0);
    }
  }
  auto round_trip = [&]() -> double {
    uint64_t v = 1;
    auto t0 = Clock::now();
    if (::write(to_child, &v, sizeof v) != sizeof v || ::read(to_parent, &v, sizeof v) != sizeof v)
      die(std::string("eventfd ping-pong: ") + std::strerror(errno));
    return us_between(t0, Clock::now());
  };
  EventfdPingPong f;
  f.idle_ms = idle_ms;
  std::vector<double> busy, idle;
  for (int i = 0; i < 200; ++i) round_trip();
  for (int i = 0; i < iters; ++i) busy.push_back(round_trip());
  for (int i = 0; i < idle_samples; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(idle_ms));
    idle.push_back(round_trip());
  }
  uint64_t stop = 2;
  ssize_t ignored = ::write(to_child, &stop, sizeof stop);
  (void)ignored;
  int st = 0;
  ::waitpid(child, &st, 0);
  ::close(to_child);
  ::close(to_parent);
  f.busy_rtt_us = summarize(busy);
  f.idle_rtt_us = summarize(idle);
  return f;
}

// "memcpy": one object per size: "size", then the samples as "gbps" (GB/s)
// and/or "bytes_per_s", then "ns_per_copy".
inline void memcpy_json(Json& j, const std::map<uint64_t, MemcpyFloor>& mc, bool gbps, bool bytes_per_s) {
  j.begin_array("memcpy");
  for (auto& [s, f] : mc) {
    j.begin_object().num("size", double(s));
    if (gbps) j.stats("gbps", f.gbps);
    if (bytes_per_s) j.stats("bytes_per_s", scaled(f.gbps, 1e9));
    j.stats("ns_per_copy", f.ns_per_copy).end_object();
  }
  j.end_array();
}

// The machine's cross-core copy rate: one thread copies 4 KiB chunks into a
// ring of 256 entries of 4160 bytes (the fabric's shape), another on the
// other CPU copies them out, for about `seconds`; GB/s. A NIC-to-NIC transfer
// moves every byte from one core's cache to the other's like this. Measured
// on these machines: ~20-25 GB/s, but for minutes at a time ~2 GB/s (the
// two vCPUs placed far apart by the host), while a copy within one core's
// memory runs as fast as ever. 0 with one CPU.
inline double cross_core_floor(double seconds) {
  if (::sysconf(_SC_NPROCESSORS_ONLN) < 2) return 0;
  constexpr uint32_t kEntries = 256, kEntry = 4160, kChunk = 4096;
  constexpr uint64_t kSpan = 1u << 20;  // each side's buffer
  std::vector<uint8_t> ring(uint64_t(kEntries) * kEntry + 64), src(kSpan + 4096, 1), dst(kSpan + 8192, 0);
  alignas(64) std::atomic<uint64_t> head{0};
  alignas(64) std::atomic<uint64_t> tail{0};
  std::atomic<bool> stop{false};
  auto pin = [](int cpu) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    ::sched_setaffinity(0, sizeof set, &set);
  };
  uint64_t moved = 0;
  Clock::time_point t0, t1;
  std::thread consumer([&] {
    pin(1);
    for (uint64_t i = 0;; ++i) {
      uint64_t t;
      while ((t = tail.load(std::memory_order_acquire)) <= i)
        if (stop.load(std::memory_order_relaxed) && tail.load(std::memory_order_acquire) <= i) return;
      std::memcpy(dst.data() + 320 + (i * kChunk) % kSpan, ring.data() + (i % kEntries) * kEntry + 64, kChunk);
      head.store(i + 1, std::memory_order_release);
    }
  });
  {
    pin(0);
    t0 = Clock::now();
    uint64_t i = 0;
    for (; seconds_since(t0) < seconds; ++i) {
      while (i - head.load(std::memory_order_acquire) >= kEntries) cpu_relax();
      std::memcpy(ring.data() + (i % kEntries) * kEntry + 64, src.data() + (i * kChunk) % kSpan, kChunk);
      tail.store(i + 1, std::memory_order_release);
    }
    while (head.load(std::memory_order_acquire) < i) cpu_relax();
    t1 = Clock::now();
    moved = i * kChunk;
    stop.store(true);
  }
  consumer.join();
  cpu_set_t all;
  CPU_ZERO(&all);
  for (long c = 0; c < ::sysconf(_SC_NPROCESSORS_ONLN); ++c) CPU_SET(c, &all);
  ::sched_setaffinity(0, sizeof all, &all);
  return double(moved) / std::chrono::duration<double>(t1 - t0).count() / 1e9;
}

// The memcpy floors as GB/s min/median/max and the median time of one copy.
inline void print_memcpy(const std::map<uint64_t, MemcpyFloor>& mc) {
  std::printf("%-12s%12s%10s%10s%14s\n", "memcpy", "GB/s min", "median", "max", "ns/copy med");
  for (auto& [s, f] : mc)
    std::printf("%-12s%12.2f%10.2f%10.2f%14.1f\n", size_name(s).c_str(), f.gbps.min, f.gbps.median, f.gbps.max,
                f.ns_per_copy.median);
}

// The host-only floors of a run beside the NIC: a shared-memory ping-pong
// (2000 warm-up round trips, then pp_iters) and memcpy at every size of either
// list (mc_samples each), printed under "== <title>" (the ping-pong, then the
// memcpy table unless print_mc is false).
struct HostFloors {
  PingPong pp;
  std::map<uint64_t, MemcpyFloor> mc;
};

inline HostFloors host_floors(const char* title, const std::vector<uint32_t>& lat_sizes,
                              const std::vector<uint32_t>& bw_sizes, int pp_iters, int mc_samples,
                              bool print_mc = true) {
  HostFloors f;
  f.pp = pingpong_floor(2000, pp_iters);
  f.mc = memcpy_floors(size_union(lat_sizes, bw_sizes), mc_samples);
  std::printf("\n== %s\n", title);
  print_pingpong(f.pp);
  if (print_mc) print_memcpy(f.mc);
  return f;
}

// ----------------------------------------------------------------- the NIC

// The slot's sq_dormant flag: set while the NIC does not watch the send queue
// (the next post rings the doorbell).
inline uint32_t sq_dormant(const ulnic::Nic& nic) {
  auto* h = reinterpret_cast<ulnic::abi::SlotHeader*>(nic.slot_base());
  return __atomic_load_n(&h->nic.sq_dormant, __ATOMIC_ACQUIRE);
}

// Spin-polls for the next completion; dies after limit_s seconds without one.
inline ulnic::abi::CqEntry spin_cq(ulnic::Nic& nic, const char* what, int limit_s) {
  ulnic::abi::CqEntry c;
  uint32_t k = 0;
  auto start = Clock::now();
  while (!nic.poll(c)) {
    cpu_relax();
    if ((++k & 0xffff) == 0 && seconds_since(start) > limit_s)
      die(std::string(what) + ": no completion after " + std::to_string(limit_s) + " s (slot state " +
          std::to_string(uint32_t(nic.state())) + ", fault " + std::to_string(uint32_t(nic.fault())) + ")");
  }
  return c;
}

// A bandwidth run's windows: after `warm` completions (the warm-up), every
// `window` completions close a window. Posting stops once budget_s has passed
// and there are 5 windows, at 200 windows, or after 3 x budget_s.
struct CompletionWindows {
  uint64_t window = 0, warm = 0;
  double budget_s = 0;
  Clock::time_point start = Clock::now();
  std::vector<double> seconds;  // each window's length
  uint64_t measured = 0;        // completions in the windows
  bool posting = true;

  CompletionWindows(uint64_t window_ops, uint64_t warm_ops, double budget)
      : window(window_ops), warm(warm_ops), budget_s(budget) {}

  // One completion, at `now`.
  void complete(Clock::time_point now) {
    ++done_;
    if (done_ == warm) win_start_ = meas_start_ = now;
    else if (done_ > warm && posting) {
      ++counted_;
      if (++in_window_ == window) {
        seconds.push_back(std::chrono::duration<double>(now - win_start_).count());
        win_start_ = now;
        in_window_ = 0;
        meas_end_ = now;
        measured = counted_;
        double el = std::chrono::duration<double>(now - start).count();
        if ((el > budget_s && seconds.size() >= 5) || seconds.size() >= 200 || el > 3 * budget_s) posting = false;
      }
    }
  }
  // From the end of the warm-up to the end of the last window.
  double measured_seconds() const { return std::chrono::duration<double>(meas_end_ - meas_start_).count(); }

 private:
  uint64_t done_ = 0, in_window_ = 0, counted_ = 0;
  Clock::time_point win_start_, meas_start_, meas_end_;
};

// ---------------------------------------------------- NIC firmware counters

using Counters = std::map<std::string, uint64_t>;

// Starts `ulnic node status --json` for a node of our cluster ($ULNIC_CLUSTER;
// the CLI sits next to this program); null if it cannot.
inline FILE* start_node_status(uint32_t node) {
  char self[4096];
  ssize_t n = ::readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0) return nullptr;
  self[n] = '\0';
  std::string dir(self);
  dir = dir.substr(0, dir.rfind('/'));
  const char* cl = std::getenv("ULNIC_CLUSTER");
  std::string cmd = "'" + dir + "/ulnic' node status -c '" + (cl && *cl ? cl : "default") + "' -n " +
                    std::to_string(node) + " --json 2>/dev/null";
  return ::popen(cmd.c_str(), "r");
}

// What a started status command printed ("" if it did not start); `status`,
// if given, gets its wait status (-1: it did not start).
inline std::string finish_node_status(FILE* p, int* status = nullptr) {
  if (status) *status = -1;
  if (!p) return "";
  std::string text;
  char buf[4096];
  for (size_t k; (k = std::fread(buf, 1, sizeof buf, p)) > 0;) text.append(buf, k);
  int st = ::pclose(p);
  if (status) *status = st;
  return text;
}

inline std::string node_status_json(uint32_t node, int* status = nullptr) {
  return finish_node_status(start_node_status(node), status);
}

// Every firmware counter in a status JSON (empty if it has none).
inline Counters parse_counters(const std::string& text) {
  Counters out;
  size_t at = text.find("\"counters\"");
  if (at == std::string::npos) return out;
  size_t end = text.find('}', at);
  for (size_t q = text.find('"', at + 10); q < end; q = text.find('"', q)) {
    size_t q2 = text.find('"', q + 1);
    if (q2 == std::string::npos || q2 > end) break;
    std::string key = text.substr(q + 1, q2 - q - 1);
    size_t colon = text.find(':', q2);
    out[key] = std::strtoull(text.c_str() + colon + 1, nullptr, 10);
    q = text.find_first_of(",}", colon);
    if (q == std::string::npos || q >= end) break;
  }
  return out;
}

// The counters of c named in keys.
template <size_t N>
Counters only(const Counters& c, const char* const (&keys)[N]) {
  Counters out;
  for (const char* k : keys)
    if (c.count(k)) out[k] = c.at(k);
  return out;
}

// b - a for each counter in both.
inline Counters counter_delta(const Counters& a, const Counters& b) {
  Counters d;
  for (auto& [k, v] : b)
    if (a.count(k)) d[k] = v - a.at(k);
  return d;
}

// Two NICs' counters: ours and the other node's.
struct CounterPair {
  Counters self, peer;
  static CounterPair delta(const CounterPair& a, const CounterPair& b) {
    return {counter_delta(a.self, b.self), counter_delta(a.peer, b.peer)};
  }
};

// "counters": {"<self_key>": {...}, "<peer_key>": {...}}
inline Json& counters_json(Json& j, const CounterPair& c, const char* self_key, const char* peer_key) {
  return j.begin_object("counters").counters(self_key, c.self).counters(peer_key, c.peer).end_object();
}

// The node's QEMU in a status JSON ("pid"); 0 if none.
inline int status_pid(const std::string& text) {
  size_t at = text.find("\"pid\":");
  return at == std::string::npos ? 0 : std::atoi(text.c_str() + at + 6);
}

// ----------------------------------------------- who else used the CPUs

// CPU time (user + system) of a process so far, seconds; 0 if pid <= 0 or gone.
inline double proc_cpu_seconds(int pid) {
  if (pid <= 0) return 0;
  std::ifstream q("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(q)), std::istreambuf_iterator<char>());
  size_t paren = text.rfind(')');
  if (paren == std::string::npos) return 0;
  std::vector<std::string> f;
  size_t i = paren + 2;
  while (i < text.size() && f.size() < 15) {
    size_t j = text.find(' ', i);
    f.push_back(text.substr(i, j - i));
    if (j == std::string::npos) break;
    i = j + 1;
  }
  if (f.size() < 13) return 0;
  return double(std::strtoull(f[11].c_str(), nullptr, 10) + std::strtoull(f[12].c_str(), nullptr, 10)) /
         double(::sysconf(_SC_CLK_TCK));
}

// CPU time so far, seconds: all CPUs (/proc/stat), this process, its reaped
// children, and the processes asked for (QEMUs, a server, a switch).
struct CpuSnap {
  Clock::time_point when;
  double busy = 0, steal = 0;
  double self = 0, children = 0;
  std::vector<double> procs;
};

inline CpuSnap cpu_snap(const std::vector<int>& pids) {
  CpuSnap c;
  c.when = Clock::now();
  const double tck = double(::sysconf(_SC_CLK_TCK));
  std::ifstream st("/proc/stat");
  std::string cpu;
  uint64_t user = 0, nice = 0, sys = 0, idle = 0, iowait = 0, irq = 0, softirq = 0, steal = 0;
  st >> cpu >> user >> nice >> sys >> idle >> iowait >> irq >> softirq >> steal;
  c.busy = double(user + nice + sys + irq + softirq) / tck;
  c.steal = double(steal) / tck;
  rusage ru{}, rc{};
  ::getrusage(RUSAGE_SELF, &ru);
  ::getrusage(RUSAGE_CHILDREN, &rc);
  auto sec = [](const timeval& t) { return double(t.tv_sec) + double(t.tv_usec) * 1e-6; };
  c.self = sec(ru.ru_utime) + sec(ru.ru_stime);
  c.children = sec(rc.ru_utime) + sec(rc.ru_stime);
  for (int pid : pids) c.procs.push_back(proc_cpu_seconds(pid));
  return c;
}

// Between two snapshots, % of one CPU: this process (with its reaped children
// if with_children), each process asked for, everything else and steal.
struct CpuShare {
  double wall = 0, self = 0, others = 0, steal = 0;
  std::vector<double> procs;
};

inline CpuShare cpu_share(const CpuSnap& a, const CpuSnap& b, bool with_children = true) {
  CpuShare s;
  s.procs.assign(b.procs.size(), 0.0);
  s.wall = std::chrono::duration<double>(b.when - a.when).count();
  if (s.wall <= 0) return s;
  s.self = 100 * (b.self - a.self + (with_children ? b.children - a.children : 0)) / s.wall;
  s.others = 100 * (b.busy - a.busy) / s.wall - s.self;
  for (size_t k = 0; k < s.procs.size(); ++k) {
    s.procs[k] = 100 * (b.procs[k] - a.procs[k]) / s.wall;
    s.others -= s.procs[k];
  }
  s.others = std::max(0.0, s.others);
  s.steal = 100 * (b.steal - a.steal) / s.wall;
  return s;
}

}  // namespace bench
