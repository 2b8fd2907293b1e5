// slot_bench: what a slot costs, beside the host floors measured in the same run.
//
//   slot_bench [--json FILE] [--iters N] [--warmup N] [--wake-samples N] [--wake-sleep-ms MS]
//              [--inflight K] [--bw-seconds S] [--skip-slots N] [--no-counters]
//              [--sections floors,busy,bw,wake]
//
// --sections: only these of the four sections below (default all; their
// JSON keys are left out, and a ratio to a floor not measured is 0).
// --skip-slots N holds N other attachments open first, so the measured slot
// is not the node's first free one (compare slots: the firmware serves them
// all alike, so their figures should agree).
//
// Attaches to the node ($ULNIC_CLUSTER / $ULNIC_NODE / $ULNIC_RUNTIME_DIR, as
// every libulnic program does) and measures, in one run:
//   1. floors: a two-process shared-memory ping-pong (fork; both sides spin
//      on atomics in a MAP_SHARED anonymous page), a two-process blocking
//      eventfd ping-pong (the cost of waking a sleeping thread, back to back
//      and after an idle pause) and host memcpy bandwidth;
//   2. busy-path post -> completion latency (kOpNop and kOpCopy 8 B .. 64 KiB),
//      one descriptor at a time, spin-polling with Nic::poll so the slot never
//      goes dormant;
//   3. copy bandwidth through the NIC with several copies in flight, and the
//      NOP descriptor rate with as many in flight;
//   4. wake-up latency: the slot dormant and the NIC asleep in WFI, then one
//      NOP, completion reaped by spin-polling, by Nic::wait() with no spin
//      (the completion eventfd path) and by Nic::wait() with its default spin.
// Prints min/median/max tables and writes JSON. A program, not a test.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "bench_common.h"
#include "ulnic/nic.h"

namespace abi = ulnic::abi;

namespace {

using namespace bench;

// ---------------------------------------------------- NIC firmware counters

// `ulnic node status --json` for our node ($ULNIC_NODE); "" when unavailable.
std::string own_status_json() {
  const char* nd = std::getenv("ULNIC_NODE");
  return node_status_json(uint32_t(nd && *nd ? std::atoi(nd) : 0));
}

// The firmware's counters from the status JSON.
Counters nic_counters(bool enabled) {
  if (!enabled) return {};
  return parse_counters(own_status_json());
}

int qemu_pid() { return status_pid(own_status_json()); }

// ----------------------------------------------------------------- the NIC

struct Bench {
  ulnic::Nic& nic;
  uint8_t* src = nullptr;     // registered source buffer (slot heap)
  uint8_t* dst = nullptr;     // registered destination area: `inflight` regions
  uint64_t dst_stride = 0;
  uint32_t src_key = 0, dst_key = 0;

  void fill(abi::SqEntry* e, uint32_t len, uint32_t region, uint64_t user) const {
    e->user_data = user;
    if (len == 0) {
      e->opcode = abi::kOpNop;
      return;
    }
    e->opcode = abi::kOpCopy;
    e->length = len;
    e->src_slot = nic.slot();
    e->dst_slot = uint16_t(nic.slot());
    e->src_key = src_key;
    e->dst_key = dst_key;
    e->src_addr = reinterpret_cast<uint64_t>(src);
    e->dst_addr = reinterpret_cast<uint64_t>(dst + dst_stride * region);
  }

  void post(uint32_t len, uint32_t region, uint64_t user) {
    abi::SqEntry* e = nic.next_sqe();
    if (!e) die("send queue unexpectedly full");
    fill(e, len, region, user);
    nic.submit();
  }

  abi::CqEntry spin(const char* what) { return spin_cq(nic, what, 10); }

  void check(const abi::CqEntry& c, uint32_t len, const char* what) const {
    if (c.status != abi::kCqOk || (len && c.result != len))
      die(std::string(what) + ": completion status " + std::to_string(c.status) + ", result " +
          std::to_string(c.result) + " (expected " + std::to_string(len) + ")");
  }

  // One copy of `len` bytes into region 0, every byte checked.
  void verify(uint32_t len) {
    for (uint32_t i = 0; i < len; ++i) src[i] = uint8_t(i * 131 + len);
    std::memset(dst, 0, len + 64);
    post(len, 0, 0xfeed);
    abi::CqEntry c = spin("verify");
    check(c, len, "verify");
    if (std::memcmp(src, dst, len) != 0 || dst[len] != 0)
      die("copy of " + std::to_string(len) + " bytes through the NIC produced wrong data");
  }
};

struct Latency {
  std::string op;
  uint32_t size = 0;
  Stats us;
  uint64_t dormant_hits = 0;  // samples posted while the slot was dormant
  double ratio = 0;           // median / floor RTT median
};

Latency busy_latency(Bench& b, uint32_t len, int warmup, int iters, double budget_s) {
  Latency l;
  l.op = len ? "copy" : "nop";
  l.size = len;
  if (len) b.verify(len);
  std::vector<double> v;
  v.reserve(size_t(iters));
  auto start = Clock::now();
  for (int i = 0; i < warmup + iters; ++i) {
    bool dormant = sq_dormant(b.nic) != 0;
    auto t0 = Clock::now();
    b.post(len, 0, uint64_t(i));
    abi::CqEntry c = b.spin("busy path");
    auto t1 = Clock::now();
    b.check(c, len, "busy path");
    if (i < warmup) continue;
    v.push_back(us_between(t0, t1));
    if (dormant) ++l.dormant_hits;
    if ((i & 63) == 0 && seconds_since(start) > budget_s) break;  // keep the run short on a slow NIC
  }
  l.us = summarize(v);
  return l;
}

// Busy path, but each completion is reaped by a blocking wait (no spin): the
// completion eventfd path with the NIC awake.
Latency busy_wait_latency(Bench& b, int warmup, int iters, double budget_s) {
  Latency l;
  l.op = "nop, blocking wait";
  std::vector<double> v;
  auto start = Clock::now();
  for (int i = 0; i < warmup + iters; ++i) {
    bool dormant = sq_dormant(b.nic) != 0;
    auto t0 = Clock::now();
    b.post(0, 0, uint64_t(i));
    auto c = b.nic.wait(std::chrono::milliseconds(10000), std::chrono::microseconds(0));
    auto t1 = Clock::now();
    if (!c) die("busy path, blocking wait: " + c.error().message);
    b.check(*c, 0, "busy path, blocking wait");
    if (i < warmup) continue;
    v.push_back(us_between(t0, t1));
    if (dormant) ++l.dormant_hits;
    if ((i & 63) == 0 && seconds_since(start) > budget_s) break;
  }
  l.us = summarize(v);
  return l;
}

struct Bandwidth {
  uint32_t size = 0;       // 0: NOPs (then the rates are in Gops/s)
  uint32_t inflight = 0;
  Stats gbps;            // per window
  double overall_gbps = 0;
  uint64_t copies = 0;
  double memcpy_gbps = 0;  // floor median
  double ratio = 0;        // NIC median / memcpy median
};

Bandwidth nic_bandwidth(Bench& b, uint32_t len, uint32_t inflight, double budget_s) {
  Bandwidth r;
  r.size = len;
  r.inflight = inflight;
  if (len) b.verify(len);
  // Completions per window: >= 8 MiB of copies (or 1024 NOPs) and >= 8x the
  // copies in flight, so a burst of completions reaped at once (the host was
  // descheduled meanwhile) cannot make a window look short.
  const uint64_t window = std::max<uint64_t>(8 * uint64_t(inflight), len ? (8u << 20) / len : 1024);
  const uint64_t warm = std::max<uint64_t>(inflight, window / 2);
  for (uint32_t i = 0; i < inflight; ++i) {
    abi::SqEntry* e = b.nic.next_sqe();
    if (!e) die("send queue too small for " + std::to_string(inflight) + " copies in flight");
    b.fill(e, len, i, i);
  }
  b.nic.submit();
  CompletionWindows w(window, warm, budget_s);
  while (b.nic.in_flight() > 0) {
    abi::CqEntry c = b.spin("bandwidth");
    w.complete(Clock::now());
    b.check(c, len, "bandwidth");
    if (w.posting) b.post(len, uint32_t(c.user_data), c.user_data);
  }
  std::vector<double> gbps;
  for (double sec : w.seconds) gbps.push_back(double(window) * (len ? len : 1) / sec / 1e9);  // NOP: Gops/s
  r.gbps = summarize(gbps);
  r.copies = w.measured;
  double sec = w.measured_seconds();
  r.overall_gbps = sec > 0 ? double(r.copies) * (len ? len : 1) / sec / 1e9 : 0;
  return r;
}

struct Wake {
  std::string mode;
  Stats us;
  uint64_t not_dormant = 0;  // samples where the slot had not gone dormant in time
  std::map<std::string, uint64_t> counters;
};

// mode 0: spin-poll; 1: Nic::wait() without spinning; 2: Nic::wait() with its default spin.
Wake wake_latency(Bench& b, int mode, int samples, int sleep_ms, bool counters) {
  static const char* names[] = {"spin-poll", "blocking wait (spin 0)", "Nic::wait() default (20 us spin)"};
  Wake w;
  w.mode = names[mode];
  auto before = nic_counters(counters);
  std::vector<double> v;
  for (int i = 0; i < samples; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(sleep_ms));
    int extra = 0;
    while (sq_dormant(b.nic) == 0 && extra < 100) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      ++extra;
    }
    if (sq_dormant(b.nic) == 0) {
      ++w.not_dormant;
      continue;
    }
    auto t0 = Clock::now();
    b.post(0, 0, uint64_t(i));
    abi::CqEntry c;
    if (mode == 0) {
      c = b.spin("wake-up");
    } else {
      auto r = mode == 1 ? b.nic.wait(std::chrono::milliseconds(10000), std::chrono::microseconds(0))
                         : b.nic.wait(std::chrono::milliseconds(10000));
      if (!r) die(std::string("wake-up, ") + w.mode + ": " + r.error().message);
      c = *r;
    }
    auto t1 = Clock::now();
    b.check(c, 0, "wake-up");
    v.push_back(us_between(t0, t1));
  }
  w.counters = counter_delta(before, nic_counters(counters));
  w.us = summarize(v);
  return w;
}

void usage() {
  std::fprintf(stderr,
               "usage: slot_bench [--json FILE] [--iters N] [--warmup N] [--wake-samples N] [--wake-sleep-ms MS]\n"
               "                  [--inflight K] [--bw-seconds S] [--skip-slots N] [--no-counters]\n"
               "                  [--sections floors,busy,bw,wake]\n"
               "Attaches to the node named by $ULNIC_CLUSTER/$ULNIC_NODE ($ULNIC_RUNTIME_DIR);\n"
               "start one first: ulnic node start -c CLUSTER --slot-size 64\n");
  std::exit(2);
}

}  // namespace

int main(int argc, char** argv) {
  bench::program = "slot_bench";
  std::string json_path = "slot_bench.json";
  int iters = 2000, warmup = 200, wake_samples = 200, wake_sleep_ms = 20;
  uint32_t inflight = 8;
  double bw_seconds = 0.6;
  bool counters = true;
  int skip_slots = 0;
  std::string sections = "floors,busy,bw,wake";
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&] { return next_arg(argc, argv, i, usage); };
    if (a == "--json") json_path = next();
    else if (a == "--iters") iters = std::max(1, std::atoi(next().c_str()));
    else if (a == "--warmup") warmup = std::max(0, std::atoi(next().c_str()));
    else if (a == "--wake-samples") wake_samples = std::max(1, std::atoi(next().c_str()));
    else if (a == "--wake-sleep-ms") wake_sleep_ms = std::max(1, std::atoi(next().c_str()));
    else if (a == "--inflight") inflight = uint32_t(std::clamp(std::atoi(next().c_str()), 1, 64));
    else if (a == "--bw-seconds") bw_seconds = std::max(0.05, std::atof(next().c_str()));
    else if (a == "--no-counters") counters = false;
    else if (a == "--skip-slots") skip_slots = std::clamp(std::atoi(next().c_str()), 0, int(abi::kMaxSlots) - 1);
    else if (a == "--sections") sections = next();
    else usage();
  }
  auto run = [&](const char* s) { return ("," + sections + ",").find("," + std::string(s) + ",") != std::string::npos; };
  // x over a floor's median; 0 where the floor was not measured.
  auto over = [](double x, double floor) { return floor > 0 ? x / floor : 0.0; };
  const auto run_start = Clock::now();
  std::setvbuf(stdout, nullptr, _IOLBF, 0);

  // ---- attach first: a missing node should fail before any measuring.
  std::vector<std::unique_ptr<ulnic::Nic>> held;  // --skip-slots: attachments we do not measure
  auto opened = ulnic::Nic::open();
  for (int k = 0; k < skip_slots && opened; ++k) {
    held.push_back(std::move(*opened));
    opened = ulnic::Nic::open();
  }
  if (!opened) {
    const char* cl = std::getenv("ULNIC_CLUSTER");
    die(opened.error().message + "\n  (cluster '" + (cl && *cl ? cl : "default") +
        "'; start a node with: ulnic node start -c CLUSTER --slot-size 64)");
  }
  ulnic::Nic& nic = **opened;
  const abi::SlotLayout& lay = nic.layout();

  const std::vector<uint32_t> lat_sizes = {8, 64, 512, 4096, 32768, 65536};
  std::vector<uint32_t> bw_sizes = {4096, 16384, 65536, 262144, 1u << 20, 4u << 20};
  const uint32_t lat_max = 65536;

  // Buffers in the slot heap: one source, `inflight` destination regions
  // (stride not a power of two). Drop 4 MiB if the heap cannot hold it.
  auto need = [&](uint32_t max) { return uint64_t(max) + 8192 + uint64_t(inflight) * (max + 4096 + 320) + 8192; };
  while (bw_sizes.size() > 1 && need(bw_sizes.back()) > lay.heap_size) bw_sizes.pop_back();
  const uint32_t bw_max = std::max(bw_sizes.back(), lat_max);
  inflight = std::min<uint32_t>(inflight, std::min(lay.sq_capacity, lay.cq_capacity));
  Bench b{nic};
  b.dst_stride = uint64_t(bw_max) + 4096 + 320;
  const uint64_t src_len = uint64_t(bw_max) + 64, dst_len = b.dst_stride * inflight;
  b.src = static_cast<uint8_t*>(nic.alloc(src_len, 4096));
  b.dst = static_cast<uint8_t*>(nic.alloc(dst_len, 4096));
  if (!b.src || !b.dst)
    die("slot heap too small (" + std::to_string(lay.heap_size >> 20) + " MiB) for the buffers; use --slot-size 64");
  std::memset(b.src, 0x5a, src_len);
  std::memset(b.dst, 0, dst_len);
  auto src_mr = nic.register_memory(b.src, src_len, abi::kAccessLocal);
  if (!src_mr) die("register source buffer: " + src_mr.error().message);
  auto dst_mr = nic.register_memory(b.dst, dst_len, abi::kAccessLocal);
  if (!dst_mr) die("register destination buffer: " + dst_mr.error().message);
  b.src_key = src_mr->key;
  b.dst_key = dst_mr->key;

  // ---- machine facts
  const int qemu = qemu_pid();
  const std::vector<int> cpu_pids = {qemu};
  const CpuSnap cpu0 = cpu_snap(cpu_pids);
  Machine m = machine_facts();
  std::printf("slot_bench: node %u, slot %u of %s; SQ %u, CQ %u entries, heap %s\n", nic.node(), nic.slot(),
              size_name(nic.slot_size()).c_str(), lay.sq_capacity, lay.cq_capacity,
              size_name(lay.heap_size).c_str());
  print_machine(m);
  std::printf("steady_clock::now() cost: min %.0f ns, median %.0f ns\n", m.clock_ns.min, m.clock_ns.median);
  note_cpus(m, 3,
            ": the spinning host thread and the NIC's vCPU thread take one each; QEMU's\n"
            "      I/O thread and the ping-pong floor's child compete for the same CPUs");

  // ---- 1. floors (the slot is idle; let it go dormant so the NIC sleeps)
  PingPong pp;
  EventfdPingPong efd;
  std::map<uint64_t, MemcpyFloor> mc;
  if (run("floors")) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    pp = pingpong_floor(2000, 20000);
    efd = eventfd_floor(2000, std::max(20, wake_samples / 2), wake_sleep_ms);
    mc = memcpy_floors(size_union(lat_sizes, bw_sizes), 31);

    std::printf("\n== 1. floors (host only)\n");
    print_pingpong(pp);
    std::printf("%-36s%10s%10s%10s\n", "blocking eventfd ping-pong RTT, us", "min", "median", "max");
    std::printf("%-36s%10.1f%10.1f%10.1f\n", "  back to back", efd.busy_rtt_us.min, efd.busy_rtt_us.median,
                efd.busy_rtt_us.max);
    std::string idle_row = "  after " + std::to_string(efd.idle_ms) + " ms idle (n=" + std::to_string(efd.idle_rtt_us.n) + ")";
    std::printf("%-36s%10.1f%10.1f%10.1f\n", idle_row.c_str(), efd.idle_rtt_us.min, efd.idle_rtt_us.median,
                efd.idle_rtt_us.max);
    print_memcpy(mc);
  }

  // ---- 2. busy path
  std::vector<Latency> lat;
  Counters busy_counters;
  if (run("busy")) {
    auto c0 = nic_counters(counters);
    lat.push_back(busy_latency(b, 0, warmup, iters, 4.0));
    for (uint32_t s : lat_sizes) lat.push_back(busy_latency(b, s, warmup, iters, 4.0));
    Latency bw_wait = busy_wait_latency(b, warmup, iters, 4.0);
    busy_counters = counter_delta(c0, nic_counters(counters));
    for (Latency& l : lat) l.ratio = over(l.us.median, pp.rtt_us.median);
    bw_wait.ratio = over(bw_wait.us.median, pp.rtt_us.median);

    std::printf("\n== 2. busy path: post -> completion, one at a time, spin-polled (us; floor RTT median %.3f us)\n",
                pp.rtt_us.median);
    std::printf("%-22s%8s%10s%10s%10s%12s%10s\n", "op", "n", "min", "median", "max", "med/RTT", "dormant");
    auto lat_row = [&](const Latency& l) {
      std::string name = l.size ? l.op + " " + size_name(l.size) : l.op;
      std::printf("%-22s%8zu%10.2f%10.2f%10.2f%12.1f%10" PRIu64 "\n", name.c_str(), l.us.n, l.us.min, l.us.median,
                  l.us.max, l.ratio, l.dormant_hits);
    };
    for (const Latency& l : lat) lat_row(l);
    lat_row(bw_wait);
    lat.push_back(bw_wait);
  }

  // ---- 3. bandwidth
  Bandwidth nop_rate;
  std::vector<Bandwidth> bw;
  if (run("bw")) {
    nop_rate = nic_bandwidth(b, 0, inflight, bw_seconds / 2);
    for (uint32_t s : bw_sizes) {
      Bandwidth r = nic_bandwidth(b, s, inflight, bw_seconds);
      r.memcpy_gbps = mc.count(s) ? mc[s].gbps.median : 0;
      r.ratio = over(r.gbps.median, r.memcpy_gbps);
      bw.push_back(r);
    }
    std::printf("\n== 3. copy bandwidth through the NIC, %u in flight (GB/s = 1e9 B/s, per window of >= 8 MiB and >= 8x in flight)\n",
                inflight);
    std::printf("%-10s%8s%10s%10s%10s%10s%12s%12s\n", "size", "copies", "min", "median", "max", "overall",
                "memcpy med", "NIC/memcpy");
    for (const Bandwidth& r : bw)
      std::printf("%-10s%8" PRIu64 "%10.3f%10.3f%10.3f%10.3f%12.2f%12.4f\n", size_name(r.size).c_str(), r.copies,
                  r.gbps.min, r.gbps.median, r.gbps.max, r.overall_gbps, r.memcpy_gbps, r.ratio);
    std::printf("descriptor rate, NOP, %u in flight (per >= 1024-op window): min %.3f, median %.3f, max %.3f Mops/s"
                " (%.2f us/op at the median)\n",
                inflight, nop_rate.gbps.min * 1e3, nop_rate.gbps.median * 1e3, nop_rate.gbps.max * 1e3,
                nop_rate.gbps.median > 0 ? 1e-3 / nop_rate.gbps.median : 0.0);
  }

  // ---- 4. wake-up from a dormant slot and a sleeping NIC
  std::vector<Wake> wk;
  if (run("wake")) {
    for (int mode = 0; mode < 3; ++mode) wk.push_back(wake_latency(b, mode, wake_samples, wake_sleep_ms, counters));
    std::printf("\n== 4. wake-up: slot dormant (sq_dormant = 1), NIC in WFI, %d ms between samples: post(NOP) -> "
                "completion (us)\n",
                wake_sleep_ms);
    std::printf("%-34s%6s%10s%10s%10s%10s%8s%8s\n", "reaped by", "n", "min", "median", "max", "med/RTT", "wfi",
                "wakeups");
    for (const Wake& w : wk) {
      auto get = [&](const char* k) { return w.counters.count(k) ? std::to_string(w.counters.at(k)) : "-"; };
      std::printf("%-34s%6zu%10.1f%10.1f%10.1f%10.0f%8s%8s\n", w.mode.c_str(), w.us.n, w.us.min, w.us.median, w.us.max,
                  over(w.us.median, pp.rtt_us.median), get("wfi").c_str(), get("slot_wakeups").c_str());
      if (w.not_dormant) std::printf("  (%" PRIu64 " samples skipped: slot not dormant after the pause)\n", w.not_dormant);
    }
  }
  if (!busy_counters.empty())
    std::printf("busy path (section 2, incl. verification copies): NIC wfi %" PRIu64 ", slot wakeups %" PRIu64
                ", slot dormant %" PRIu64 "\n",
                busy_counters["wfi"], busy_counters["slot_wakeups"], busy_counters["slot_dormant"]);

  const double runtime = seconds_since(run_start);
  const CpuShare cs = cpu_share(cpu0, cpu_snap(cpu_pids));
  const double cpu_qemu = cs.procs[0];
  std::printf("\ntotal runtime %.1f s; CPU over the run, %% of one CPU (of %ld): slot_bench %.0f, node QEMU %.0f%s,"
              " everything else %.0f, hypervisor steal %.1f\n",
              runtime, m.nproc, cs.self, cpu_qemu, qemu > 0 ? "" : " (pid unknown)", cs.others, cs.steal);
  if (cs.others > 20)
    std::printf("note: other processes used %.0f%% of a CPU during the run: the figures above are noisy\n", cs.others);

  // ---- JSON
  Json j;
  j.begin_object();
  j.str("benchmark", "slot_bench").num("runtime_s", runtime);
  machine_json(j, m, "clock_now_ns");
  j.begin_object("cpu_over_run_pct")
      .num("slot_bench", cs.self)
      .num("node_qemu", cpu_qemu)
      .num("everything_else", cs.others)
      .num("steal", cs.steal)
      .end_object();
  j.begin_object("slot")
      .num("node", nic.node())
      .num("slot", nic.slot())
      .num("slot_size", double(nic.slot_size()))
      .num("heap_size", double(lay.heap_size))
      .num("sq_capacity", lay.sq_capacity)
      .num("cq_capacity", lay.cq_capacity)
      .num("skipped_slots", skip_slots)
      .end_object();
  j.begin_object("params")
      .num("iters", iters)
      .num("warmup", warmup)
      .num("wake_samples", wake_samples)
      .num("wake_sleep_ms", wake_sleep_ms)
      .num("inflight", inflight)
      .num("bw_seconds", bw_seconds)
      .end_object();
  if (run("floors")) {
    j.begin_object("floors");
    pingpong_json(j, pp);
    j.begin_object("eventfd_pingpong")
        .stats("busy_rtt_us", efd.busy_rtt_us)
        .stats("idle_rtt_us", efd.idle_rtt_us)
        .num("idle_ms", efd.idle_ms)
        .end_object();
    memcpy_json(j, mc, true, false);
    j.end_object();
  }
  if (run("busy")) {
    j.begin_array("busy_latency");
    for (const Latency& l : lat)
      j.begin_object()
          .str("op", l.op)
          .num("size", l.size)
          .stats("us", l.us)
          .num("ratio_median_to_floor_rtt", l.ratio)
          .num("dormant_at_post", double(l.dormant_hits))
          .end_object();
    j.end_array();
    j.counters("busy_counters", busy_counters);
  }
  if (run("bw")) {
    j.begin_object("nop_rate")
        .num("inflight", nop_rate.inflight)
        .num("ops", double(nop_rate.copies))
        .stats("mops", Stats{nop_rate.gbps.min * 1e3, nop_rate.gbps.median * 1e3, nop_rate.gbps.max * 1e3,
                             nop_rate.gbps.mean * 1e3, nop_rate.gbps.n})
        .end_object();
    j.begin_array("bandwidth");
    for (const Bandwidth& r : bw)
      j.begin_object()
          .num("size", r.size)
          .num("inflight", r.inflight)
          .num("copies", double(r.copies))
          .stats("gbps", r.gbps)
          .num("overall_gbps", r.overall_gbps)
          .num("memcpy_gbps_median", r.memcpy_gbps)
          .num("ratio_median_to_memcpy", r.ratio)
          .end_object();
    j.end_array();
  }
  if (run("wake")) {
    j.begin_array("wakeup");
    for (const Wake& w : wk) {
      j.begin_object()
          .str("mode", w.mode)
          .num("sleep_ms", wake_sleep_ms)
          .stats("us", w.us)
          .num("ratio_median_to_floor_rtt", over(w.us.median, pp.rtt_us.median))
          .num("skipped_not_dormant", double(w.not_dormant));
      j.counters("counters", w.counters).end_object();
    }
    j.end_array();
  }
  j.end_object();
  write_json(j, json_path);
  return 0;
}
