// Shared by the benchmark programs (slot_bench, fabric_bench): timing
// helpers, min/median/max summaries, a small JSON writer, machine facts, and
// the host-only floors every NIC figure is compared against in the same run
// (a two-process shared-memory ping-pong and memcpy bandwidth).
#pragma once

#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <string>
#include <vector>

namespace bench {

using Clock = std::chrono::steady_clock;

// Each program defines it: print "<program>: msg" and exit 1.
[[noreturn]] void die(const std::string& msg);

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

inline std::string size_name(uint64_t b) {
  char buf[32];
  if (b >= (1u << 20) && b % (1u << 20) == 0) std::snprintf(buf, sizeof buf, "%" PRIu64 " MiB", b >> 20);
  else if (b >= 1024 && b % 1024 == 0) std::snprintf(buf, sizeof buf, "%" PRIu64 " KiB", b >> 10);
  else std::snprintf(buf, sizeof buf, "%" PRIu64 " B", b);
  return buf;
}

// A tiny JSON writer: enough for nested objects, arrays, numbers and strings.
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
  Json& str(const char* key, const std::string& v) {
    std::string q = "\"";
    for (char c : v) {
      if (c == '"' || c == '\\') q += '\\', q += c;
      else if (uint8_t(c) < 0x20) q += ' ';
      else q += c;
    }
    return raw(key, q + "\"");
  }
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
  const pid_t parent = ::getpid();
  const pid_t child = ::fork();
  if (child < 0) die(std::string("fork: ") + std::strerror(errno));
  if (child == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(0);
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


}  // namespace bench
