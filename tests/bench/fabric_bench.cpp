// fabric_bench: what a remote put costs, beside host floors measured in the same run.
//
//   fabric_bench serve --info FILE [--size BYTES]
//       (on the receiving node) attach, register a RemoteWrite buffer, write
//       "slot key addr size" to FILE, then wait for FILE.done and check the
//       verification puts it describes; the verdict goes to FILE.result
//       ("ok BYTES" or "bad BYTES") and the exit status.
//   fabric_bench client --info FILE --dst-node N [--json FILE] [--label TEXT]
//       [--lat-sizes LIST] [--iters N] [--warmup N] [--lat-seconds S]
//       [--bw-sizes LIST] [--inflight K] [--bw-seconds S]
//       [--goodput-size B] [--goodput-puts N] [--goodput-seconds S]
//       [--no-floors] [--no-counters]
//       (on the sending node) measures, in one run:
//   1. floors (host only): a two-process shared-memory ping-pong (fork; both
//      sides spin on atomics in a MAP_SHARED page) and memcpy bandwidth;
//   2. remote put latency: post -> completion (the completion comes once the
//      receiving NIC placed every byte), one put at a time, spin-polling
//      Nic::poll, for each size of --lat-sizes;
//   3. remote put bandwidth with --inflight puts in flight, per window;
//   4. goodput: --goodput-puts puts of --goodput-size bytes (or until
//      --goodput-seconds), --inflight in flight: payload bytes of puts that
//      completed with kCqOk per second (the figure the drop sweep plots);
//   5. verification: one put per region of the server's buffer, lengths from
//      every size class, checked byte for byte by the server.
// LIST: comma-separated sizes with optional K/M suffix ("8,64,4K,1M"), or
// "none". Both programs find their node as every libulnic program does
// ($ULNIC_RUNTIME_DIR, $ULNIC_CLUSTER, $ULNIC_NODE). Prints min/median/max
// tables and writes JSON. A program, not a test; tests/bench/fabric_bench.py
// drives it over a direct fabric, a switch and a lossy switch.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "bench_common.h"
#include "ulnic/nic.h"

namespace abi = ulnic::abi;

namespace {

using namespace bench;

// ---------------------------------------------------- NIC firmware counters

// `ulnic node status --json` for a node of our cluster, retried once; a
// failed query is reported on stderr (the figures then lack that snapshot's
// counters).
std::string node_status_retried(uint32_t node) {
  std::string text;
  for (int attempt = 0; attempt < 2; ++attempt) {
    int status = 0;
    text = node_status_json(node, &status);
    if (text.find("\"counters\"") != std::string::npos) return text;
    std::fprintf(stderr, "fabric_bench: note: `ulnic node status -n %u --json` failed (wait status 0x%x, %zu bytes: %.120s)%s\n",
                 node, unsigned(status), text.size(), text.c_str(), attempt ? "" : "; retrying");
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return text;
}

// The link and put counters of the sending (self) and the receiving (peer) NIC.
const char* const kLinkKeys[] = {"link_tx_data", "link_rx_data", "link_retransmits", "link_duplicates",
                                 "link_out_of_order", "link_bad_packets", "link_unreachable", "link_restarts",
                                 "puts_done", "puts_refused", "wfi", "slot_wakeups", "slot_dormant", "link_held",
                                 "link_sacked"};

struct CounterProbe {
  bool enabled = true;
  uint32_t self = 0, peer = 0;
  CounterPair snap() const {
    CounterPair c;
    if (!enabled) return c;
    c.self = only(parse_counters(node_status_retried(self)), kLinkKeys);
    c.peer = only(parse_counters(node_status_retried(peer)), kLinkKeys);
    return c;
  }
};

// ----------------------------------------------- who else used the CPUs

// The cluster's ulnic-switch, if it runs one: the process whose argv[0] is
// ulnic-switch and which names our fabric directory. 0 if none.
int switch_pid() {
  const char* cl = std::getenv("ULNIC_CLUSTER");
  std::string sock = ulnic::daemon_socket_path(cl && *cl ? cl : "default", 0);  // <base>/<cluster>/node0/ulnicd.sock
  std::string fabric = sock.substr(0, sock.rfind("/node0/")) + "/fabric";
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/proc", ec)) {
    const std::string name = e.path().filename().string();
    if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream f(e.path() / "cmdline");
    if (!f) continue;
    std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    std::vector<std::string> argv;
    for (size_t i = 0; i < text.size();) {
      size_t j = text.find('\0', i);
      if (j == std::string::npos) j = text.size();
      argv.push_back(text.substr(i, j - i));
      i = j + 1;
    }
    if (argv.empty() || argv[0].size() < 12 || argv[0].compare(argv[0].size() - 12, 12, "ulnic-switch") != 0) continue;
    for (const std::string& a : argv)
      if (a == fabric || a == fabric + "/") return std::atoi(name.c_str());
  }
  return 0;
}

// --------------------------------------------------------- the verification
// Region r of the server's buffer gets one put of lengths[r] bytes of
// pattern(seed, r, i); the server checks them after FILE.done appears.

uint8_t pattern(uint64_t seed, uint64_t region, uint64_t byte) {
  return uint8_t((seed * 131 + region * 7919 + byte * 31 + (byte >> 8) * 17) >> 2);
}

// ------------------------------------------------------------------ server

int serve(const std::string& info, uint64_t size) {
  auto nic = ulnic::Nic::open();
  if (!nic) die(nic.error().message);
  auto& n = **nic;
  uint8_t* buf = nullptr;
  while (size >= (1u << 20) && !(buf = static_cast<uint8_t*>(n.alloc(size, 4096)))) size -= 1u << 20;
  if (!buf) die("slot heap too small for a 1 MiB buffer");
  std::memset(buf, 0, size);
  auto mr = n.register_memory(buf, size, abi::kAccessLocal | abi::kAccessRemoteWrite);
  if (!mr) die("register: " + mr.error().message);
  // A FILE.done an earlier client left would end this server before its
  // client starts (its puts then fail: the slot is gone).
  std::remove((info + ".done").c_str());
  {
    std::ofstream tmp(info + ".tmp");
    tmp << n.slot() << " " << mr->key << " " << reinterpret_cast<uint64_t>(buf) << " " << size << "\n";
  }
  std::rename((info + ".tmp").c_str(), info.c_str());
  std::printf("fabric_bench serve: node %u slot %u key 0x%x, %s buffer\n", n.node(), n.slot(), mr->key,
              size_name(size).c_str());
  std::fflush(stdout);
  // FILE.done: "seed regions stride len0 len1 ..." (regions 0: nothing to check).
  uint64_t seed = 0, regions = 0, stride = 0;
  std::vector<uint64_t> lens;
  bool got = false;
  for (int i = 0; i < 60000 && !got; ++i) {  // up to 20 minutes
    std::ifstream done(info + ".done");
    if (done >> seed >> regions >> stride) {
      lens.resize(regions);
      got = true;
      for (auto& l : lens)
        if (!(done >> l)) got = false;
    }
    if (!got) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (!got) die("serve: the client never finished");
  uint64_t checked = 0, bad = 0;
  for (uint64_t r = 0; r < regions; ++r) {
    if (r * stride + lens[r] > size) {
      ++bad;
      continue;
    }
    for (uint64_t b = 0; b < lens[r]; ++b, ++checked)
      if (buf[r * stride + b] != pattern(seed, r, b) && bad++ < 5)
        std::fprintf(stderr, "fabric_bench serve: region %" PRIu64 " byte %" PRIu64 ": got %u want %u\n", r, b,
                     buf[r * stride + b], pattern(seed, r, b));
  }
  {
    std::ofstream tmp(info + ".result.tmp");
    tmp << (bad ? "bad " : "ok ") << (bad ? bad : checked) << "\n";
  }
  std::rename((info + ".result.tmp").c_str(), (info + ".result").c_str());
  std::printf("fabric_bench serve: %" PRIu64 " regions, %" PRIu64 " bytes checked, %" PRIu64 " bad\n", regions,
              checked, bad);
  return bad ? 1 : 0;
}

// ------------------------------------------------------------------ client

struct Target {
  uint32_t node = 1, slot = 0, key = 0;
  uint64_t addr = 0, size = 0;
};

struct Client {
  ulnic::Nic& nic;
  Target dst;
  uint8_t* src = nullptr;
  uint32_t src_key = 0;
  uint64_t stride = 0;  // between destination regions

  void post(uint32_t len, uint32_t region, uint64_t user) {
    abi::SqEntry* e = nic.next_sqe();
    if (!e) die("send queue unexpectedly full");
    e->opcode = abi::kOpPut;
    e->length = len;
    e->user_data = user;
    e->src_key = src_key;
    e->src_addr = reinterpret_cast<uint64_t>(src);
    e->dst_node = dst.node;
    e->dst_slot = uint16_t(dst.slot);
    e->dst_key = dst.key;
    e->dst_addr = dst.addr + stride * region;
    nic.submit();
  }

  abi::CqEntry spin(const char* what) { return spin_cq(nic, what, 30); }
};

struct Latency {
  uint32_t size = 0;
  Stats us;
  uint64_t failed = 0;        // completions with an error status (not in the samples)
  uint64_t first_status = 0;  // the first error status seen
  uint64_t dormant_hits = 0;  // samples posted while the slot was dormant
  double ratio = 0;           // median / floor RTT median
  CounterPair counters;
};

Latency put_latency(Client& c, uint32_t len, int warmup, int iters, double budget_s, const CounterProbe& probe) {
  Latency l;
  l.size = len;
  std::vector<double> v;
  v.reserve(size_t(iters));
  CounterPair before = probe.snap();
  auto start = Clock::now();
  for (int i = 0; i < warmup + iters; ++i) {
    bool dormant = sq_dormant(c.nic) != 0;
    auto t0 = Clock::now();
    c.post(len, 0, uint64_t(i));
    abi::CqEntry cq = c.spin("latency");
    auto t1 = Clock::now();
    if (cq.status != abi::kCqOk) {
      if (!l.failed++) l.first_status = cq.status;
      if (l.failed > 20 && v.empty()) die("latency: every put fails (status " + std::to_string(cq.status) + ")");
      continue;
    }
    if (i < warmup) continue;
    v.push_back(us_between(t0, t1));
    if (dormant) ++l.dormant_hits;
    if ((i & 15) == 0 && seconds_since(start) > budget_s) break;  // keep the run short on a slow link
  }
  l.counters = CounterPair::delta(before, probe.snap());
  l.us = summarize(v);
  return l;
}

struct Bandwidth {
  uint32_t size = 0;
  uint32_t inflight = 0;
  Stats bps;                 // bytes/s per window
  double overall_bps = 0;    // over all measured windows
  uint64_t puts = 0;         // measured puts
  uint64_t failed = 0;
  double memcpy_bps = 0;     // floor median
  double ratio = 0;          // median / memcpy median
  CounterPair counters;
};

Bandwidth put_bandwidth(Client& c, uint32_t len, uint32_t inflight, double budget_s, const CounterProbe& probe) {
  Bandwidth r;
  r.size = len;
  r.inflight = inflight;
  // Completions per window: >= 4 MiB of puts and >= 2x the puts in flight;
  // the first window's worth (at least `inflight`) is warm-up.
  const uint64_t window = std::max<uint64_t>(2 * uint64_t(inflight), (4u << 20) / len);
  const uint64_t warm = std::max<uint64_t>(inflight, window / 2);
  CounterPair before = probe.snap();
  for (uint32_t i = 0; i < inflight; ++i) c.post(len, i, i);
  CompletionWindows w(window, warm, budget_s);
  while (c.nic.in_flight() > 0) {
    abi::CqEntry cq = c.spin("bandwidth");
    w.complete(Clock::now());
    if (cq.status != abi::kCqOk) ++r.failed;
    if (w.posting) c.post(len, uint32_t(cq.user_data), cq.user_data);
  }
  r.counters = CounterPair::delta(before, probe.snap());
  std::vector<double> bps;
  for (double sec : w.seconds) bps.push_back(double(window) * len / sec);
  r.bps = summarize(bps);
  r.puts = w.measured;
  double sec = w.measured_seconds();
  r.overall_bps = sec > 0 ? double(r.puts) * len / sec : 0;
  return r;
}

struct Goodput {
  uint32_t size = 0, inflight = 0;
  uint64_t target_puts = 0, ok = 0, failed = 0, first_status = 0;
  double seconds = 0, budget_s = 0;
  bool budget_hit = false;
  double bps = 0;            // payload bytes of kCqOk puts / seconds
  Stats window_bps;          // per window of `window` completions
  uint64_t window = 0;
  Stats put_us;              // post -> completion of each put, with `inflight` in flight
  CounterPair counters;
};

// `total` puts of `len` bytes, `inflight` in flight, timed from the first post
// to the last completion (no warm-up: a lossy link's slow start is part of it).
Goodput goodput(Client& c, uint32_t len, uint32_t inflight, uint64_t total, double budget_s,
                const CounterProbe& probe) {
  Goodput g;
  g.size = len;
  g.inflight = inflight;
  g.target_puts = total;
  g.budget_s = budget_s;
  g.window = std::max<uint64_t>(4 * uint64_t(inflight), total / 20);
  std::vector<double> win, put_us;
  std::vector<Clock::time_point> posted(inflight);
  CounterPair before = probe.snap();
  uint64_t issued = 0, in_window = 0, window_ok = 0;
  auto start = Clock::now();
  auto win_start = start;
  for (uint32_t i = 0; i < inflight && issued < total; ++i, ++issued) {
    posted[i] = Clock::now();
    c.post(len, i, i);
  }
  bool posting = true;
  auto last = start;
  while (c.nic.in_flight() > 0) {
    abi::CqEntry cq = c.spin("goodput");
    auto now = last = Clock::now();
    if (cq.status == abi::kCqOk) {
      ++g.ok;
      ++window_ok;
      put_us.push_back(us_between(posted[cq.user_data], now));
    } else if (!g.failed++) {
      g.first_status = cq.status;
    }
    if (++in_window == g.window) {
      win.push_back(double(window_ok) * len / std::chrono::duration<double>(now - win_start).count());
      win_start = now;
      in_window = window_ok = 0;
    }
    if (posting && std::chrono::duration<double>(now - start).count() > budget_s) {
      posting = false;
      g.budget_hit = true;
    }
    if (posting && issued < total) {
      posted[cq.user_data] = Clock::now();
      c.post(len, uint32_t(cq.user_data), cq.user_data);
      ++issued;
    }
  }
  g.counters = CounterPair::delta(before, probe.snap());
  g.seconds = std::chrono::duration<double>(last - start).count();
  g.bps = g.seconds > 0 ? double(g.ok) * len / g.seconds : 0;
  g.window_bps = summarize(win);
  g.put_us = summarize(put_us);
  return g;
}

void usage() {
  std::fprintf(stderr,
               "usage: fabric_bench serve --info FILE [--size BYTES]\n"
               "       fabric_bench client --info FILE --dst-node N [--json FILE] [--label TEXT]\n"
               "              [--lat-sizes LIST] [--iters N] [--warmup N] [--lat-seconds S]\n"
               "              [--bw-sizes LIST] [--inflight K] [--bw-seconds S]\n"
               "              [--goodput-size B] [--goodput-puts N] [--goodput-seconds S]\n"
               "              [--no-floors] [--no-counters]\n"
               "LIST: sizes with optional K/M suffix, comma-separated (\"8,64,4K\"), or none.\n"
               "Both attach to $ULNIC_CLUSTER/$ULNIC_NODE ($ULNIC_RUNTIME_DIR); start a cluster first:\n"
               "  ulnic cluster up -n 2 -c CLUSTER --slot-size 16 [--switch] [--faults drop=0.1,seed=1]\n");
  std::exit(2);
}

std::string counter_text(const CounterPair& c) {
  auto get = [](const std::map<std::string, uint64_t>& m, const char* k) -> std::string {
    return m.count(k) ? std::to_string(m.at(k)) : "-";
  };
  return "tx " + get(c.self, "link_tx_data") + ", retx " + get(c.self, "link_retransmits") + ", rx dup " +
         get(c.peer, "link_duplicates") + ", rx ooo " + get(c.peer, "link_out_of_order") + ", rx bad " +
         get(c.peer, "link_bad_packets");
}

std::string retx_cell(const CounterPair& c) {
  if (!c.self.count("link_retransmits")) return "-";
  return std::to_string(c.self.at("link_retransmits"));
}

int client(int argc, char** argv) {
  std::string info, json_path = "fabric_bench.json", label;
  Target dst;
  std::vector<uint32_t> lat_sizes = {8, 64, 512, 4096, 16384, 65536};
  std::vector<uint32_t> bw_sizes = {4096, 16384, 65536, 262144, 1u << 20};
  int iters = 1000, warmup = 100;
  double lat_seconds = 3, bw_seconds = 1, goodput_seconds = 20;
  uint32_t inflight = 8, goodput_size = 16384;
  uint64_t goodput_puts = 2000;
  bool floors = true, counters = true;
  for (int i = 2; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&] { return next_arg(argc, argv, i, usage); };
    if (a == "--info") info = next();
    else if (a == "--dst-node") dst.node = uint32_t(std::stoul(next()));
    else if (a == "--json") json_path = next();
    else if (a == "--label") label = next();
    else if (a == "--lat-sizes") lat_sizes = parse_sizes(next());
    else if (a == "--bw-sizes") bw_sizes = parse_sizes(next());
    else if (a == "--iters") iters = std::max(1, std::atoi(next().c_str()));
    else if (a == "--warmup") warmup = std::max(0, std::atoi(next().c_str()));
    else if (a == "--lat-seconds") lat_seconds = std::max(0.05, std::atof(next().c_str()));
    else if (a == "--bw-seconds") bw_seconds = std::max(0.05, std::atof(next().c_str()));
    else if (a == "--inflight") inflight = uint32_t(std::clamp(std::atoi(next().c_str()), 1, 64));
    else if (a == "--goodput-size") goodput_size = parse_sizes(next()).at(0);
    else if (a == "--goodput-puts") goodput_puts = std::stoull(next());
    else if (a == "--goodput-seconds") goodput_seconds = std::max(0.1, std::atof(next().c_str()));
    else if (a == "--no-floors") floors = false;
    else if (a == "--no-counters") counters = false;
    else usage();
  }
  if (info.empty()) usage();
  const auto run_start = Clock::now();
  std::setvbuf(stdout, nullptr, _IOLBF, 0);

  // ---- the server's buffer
  for (int i = 0; i < 600; ++i) {
    std::ifstream in(info);
    if (in >> dst.slot >> dst.key >> dst.addr >> dst.size) break;
    dst.size = 0;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  if (!dst.size) die("no server info in " + info + " (start: fabric_bench serve --info FILE on the other node)");

  // ---- attach
  auto opened = ulnic::Nic::open();
  if (!opened) die(opened.error().message);
  ulnic::Nic& nic = **opened;
  const abi::SlotLayout& lay = nic.layout();
  inflight = std::min<uint32_t>(inflight, std::min(lay.sq_capacity, lay.cq_capacity));

  // Destination regions: `inflight` of them, stride not a power of two; drop
  // the largest bandwidth sizes if the server's buffer cannot hold them.
  auto stride_for = [](uint64_t max) { return max + 4096 + 320; };
  auto largest = [&] {
    uint64_t m = goodput_puts ? goodput_size : 0;
    for (uint32_t s : lat_sizes) m = std::max<uint64_t>(m, s);
    for (uint32_t s : bw_sizes) m = std::max<uint64_t>(m, s);
    return m;
  };
  while (!bw_sizes.empty() && stride_for(largest()) * inflight > dst.size) {
    std::printf("note: dropping %s: %u regions do not fit the server's %s buffer\n",
                size_name(bw_sizes.back()).c_str(), inflight, size_name(dst.size).c_str());
    bw_sizes.pop_back();
  }
  if (stride_for(largest()) * inflight > dst.size) die("the server's buffer is too small for these sizes");
  Client c{nic, dst};
  c.stride = stride_for(largest());
  const uint64_t src_len = std::max<uint64_t>(largest(), 65536) + 64;
  c.src = static_cast<uint8_t*>(nic.alloc(src_len, 4096));
  if (!c.src) die("slot heap too small (" + size_name(lay.heap_size) + ") for a " + size_name(src_len) + " source");
  for (uint64_t i = 0; i < src_len; ++i) c.src[i] = uint8_t(i * 13 + 5);
  auto src_mr = nic.register_memory(c.src, src_len, abi::kAccessLocal);
  if (!src_mr) die("register source buffer: " + src_mr.error().message);
  c.src_key = src_mr->key;

  CounterProbe probe;
  probe.enabled = counters;
  probe.self = nic.node();
  probe.peer = dst.node;
  int qemu[2] = {0, 0};
  if (counters) {
    qemu[0] = status_pid(node_status_retried(nic.node()));
    qemu[1] = status_pid(node_status_retried(dst.node));
  }
  const int sw_pid = switch_pid();
  const std::vector<int> cpu_pids = {qemu[0], qemu[1], sw_pid};
  const CpuSnap cpu0 = cpu_snap(cpu_pids);
  Machine m = machine_facts();
  std::printf("fabric_bench%s%s: node %u slot %u -> node %u slot %u (%s buffer, %u regions of %s); SQ %u, CQ %u\n",
              label.empty() ? "" : " ", label.c_str(), nic.node(), nic.slot(), dst.node, dst.slot,
              size_name(dst.size).c_str(), inflight, size_name(c.stride).c_str(), lay.sq_capacity, lay.cq_capacity);
  print_machine(m);
  note_cpus(m, 4,
            ": this spinning thread and the two NICs' vCPU threads (plus the switch, if any)\n"
            "      compete for them");

  // ---- 1. floors
  HostFloors host;
  if (floors) host = host_floors("1. floors (host only)", lat_sizes, bw_sizes, 20000, 31);
  const PingPong& pp = host.pp;
  std::map<uint64_t, MemcpyFloor>& mc = host.mc;

  // ---- 2. latency
  std::vector<Latency> lat;
  for (uint32_t s : lat_sizes) {
    lat.push_back(put_latency(c, s, warmup, iters, lat_seconds, probe));
    if (floors && pp.rtt_us.median > 0) lat.back().ratio = lat.back().us.median / pp.rtt_us.median;
  }
  if (!lat.empty()) {
    std::printf("\n== 2. remote put latency: post -> completion (receiver placed every byte), one at a time, "
                "spin-polled (us)\n");
    if (floors) std::printf("   floor: shared-memory ping-pong RTT median %.3f us\n", pp.rtt_us.median);
    std::printf("%-10s%7s%10s%10s%10s%10s%8s%8s%8s%9s\n", "size", "n", "min", "median", "max", "med/RTT", "MB/s",
                "failed", "retx", "dormant");
    for (const Latency& l : lat)
      std::printf("%-10s%7zu%10.1f%10.1f%10.1f%10s%8.1f%8" PRIu64 "%8s%9" PRIu64 "\n", size_name(l.size).c_str(),
                  l.us.n, l.us.min, l.us.median, l.us.max, l.ratio > 0 ? std::to_string(int64_t(l.ratio + 0.5)).c_str() : "-",
                  l.us.median > 0 ? l.size / l.us.median : 0.0, l.failed, retx_cell(l.counters).c_str(),
                  l.dormant_hits);
    std::printf("   (MB/s: size / median latency; retx: sender's link retransmissions during the row; dormant:\n"
                "    samples posted while the slot was dormant, i.e. the post rang the doorbell)\n");
  }

  // ---- 3. bandwidth
  std::vector<Bandwidth> bw;
  for (uint32_t s : bw_sizes) {
    Bandwidth r = put_bandwidth(c, s, inflight, bw_seconds, probe);
    if (mc.count(s)) {
      r.memcpy_bps = mc[s].gbps.median * 1e9;
      r.ratio = r.bps.median / r.memcpy_bps;
    }
    bw.push_back(r);
  }
  if (!bw.empty()) {
    std::printf("\n== 3. remote put bandwidth, %u in flight (MB/s = 1e6 B/s, per window of >= 4 MiB and >= %u puts)\n",
                inflight, 2 * inflight);
    std::printf("%-10s%7s%10s%10s%10s%10s%8s%8s%12s%12s\n", "size", "puts", "min", "median", "max", "overall",
                "failed", "retx", "memcpy MB/s", "put/memcpy");
    for (const Bandwidth& r : bw)
      std::printf("%-10s%7" PRIu64 "%10.1f%10.1f%10.1f%10.1f%8" PRIu64 "%8s%12.0f%12.4f\n", size_name(r.size).c_str(),
                  r.puts, r.bps.min / 1e6, r.bps.median / 1e6, r.bps.max / 1e6, r.overall_bps / 1e6, r.failed,
                  retx_cell(r.counters).c_str(), r.memcpy_bps / 1e6, r.ratio);
  }

  // ---- 4. goodput
  Goodput gp;
  if (goodput_puts) {
    gp = goodput(c, goodput_size, inflight, goodput_puts, goodput_seconds, probe);
    std::printf("\n== 4. goodput: %" PRIu64 " puts of %s, %u in flight (payload of kCqOk puts per second)\n",
                goodput_puts, size_name(goodput_size).c_str(), inflight);
    std::printf("   %" PRIu64 " ok, %" PRIu64 " failed%s in %.3f s: %.2f MB/s (%.0f puts/s)%s\n", gp.ok, gp.failed,
                gp.failed ? (" (first status " + std::to_string(gp.first_status) + ")").c_str() : "", gp.seconds,
                gp.bps / 1e6, gp.seconds > 0 ? double(gp.ok) / gp.seconds : 0.0,
                gp.budget_hit ? " -- stopped at the time budget" : "");
    std::printf("   per window of %" PRIu64 " puts, MB/s: min %.2f, median %.2f, max %.2f\n", gp.window,
                gp.window_bps.min / 1e6, gp.window_bps.median / 1e6, gp.window_bps.max / 1e6);
    std::printf("   put post -> completion with %u in flight, us: min %.1f, median %.1f, max %.1f\n", inflight,
                gp.put_us.min, gp.put_us.median, gp.put_us.max);
    if (counters) std::printf("   link: %s\n", counter_text(gp.counters).c_str());
  }

  // ---- 5. verification: every region once, lengths from every size class
  std::vector<uint32_t> classes(lat_sizes.begin(), lat_sizes.end());
  classes.insert(classes.end(), bw_sizes.begin(), bw_sizes.end());
  if (goodput_puts) classes.push_back(goodput_size);
  std::sort(classes.begin(), classes.end());
  classes.erase(std::unique(classes.begin(), classes.end()), classes.end());
  if (classes.empty()) classes.push_back(4096);
  const uint64_t seed = uint64_t(::getpid());
  std::vector<uint64_t> vlen(inflight);
  uint64_t verify_failed = 0;
  for (uint32_t r = 0; r < inflight; ++r) {
    vlen[r] = classes[r % classes.size()] - (r % 3);  // odd lengths too
    for (uint64_t i = 0; i < vlen[r]; ++i) c.src[i] = pattern(seed, r, i);
    c.post(uint32_t(vlen[r]), r, r);
    abi::CqEntry cq = c.spin("verify");
    if (cq.status != abi::kCqOk) ++verify_failed;
  }
  {
    std::ofstream tmp(info + ".done.tmp");
    tmp << seed << " " << inflight << " " << c.stride;
    for (uint64_t l : vlen) tmp << " " << l;
    tmp << "\n";
  }
  std::rename((info + ".done.tmp").c_str(), (info + ".done").c_str());
  std::string verdict = "no answer";
  for (int i = 0; i < 500; ++i) {  // 10 s
    std::ifstream in(info + ".result");
    std::string word, count;
    if (in >> word >> count) {
      verdict = word + " " + count;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  const bool verified = verify_failed == 0 && verdict.rfind("ok", 0) == 0;
  std::printf("\nverification: %u puts (%s .. %s), %" PRIu64 " failed; server: %s\n", inflight,
              size_name(*std::min_element(vlen.begin(), vlen.end())).c_str(),
              size_name(*std::max_element(vlen.begin(), vlen.end())).c_str(), verify_failed, verdict.c_str());

  const double runtime = seconds_since(run_start);
  const CpuShare cs = cpu_share(cpu0, cpu_snap(cpu_pids));
  const double cpu_sender = cs.procs[0], cpu_receiver = cs.procs[1], cpu_switch = cs.procs[2];
  std::printf("total runtime %.1f s; CPU over the run, %% of one CPU (of %ld): fabric_bench %.0f, QEMU node %u %.0f,"
              " QEMU node %u %.0f, switch %s, everything else %.0f, steal %.1f\n",
              runtime, m.nproc, cs.self, nic.node(), cpu_sender, dst.node, cpu_receiver,
              sw_pid ? std::to_string(int(cpu_switch + 0.5)).c_str() : "none", cs.others, cs.steal);

  // ---- JSON
  Json j;
  j.begin_object();
  j.str("benchmark", "fabric_bench").str("label", label).num("runtime_s", runtime).boolean("verified", verified);
  machine_json(j, m);
  j.begin_object("cpu_over_run_pct")
      .num("fabric_bench", cs.self)
      .num("qemu_sender", cpu_sender)
      .num("qemu_receiver", cpu_receiver)
      .num("switch", cpu_switch)
      .boolean("switch_found", sw_pid != 0)
      .num("everything_else", cs.others)
      .num("steal", cs.steal)
      .end_object();
  j.begin_object("path")
      .num("node", nic.node())
      .num("slot", nic.slot())
      .num("dst_node", dst.node)
      .num("dst_slot", dst.slot)
      .num("dst_buffer", double(dst.size))
      .num("region_stride", double(c.stride))
      .end_object();
  j.begin_object("params")
      .num("iters", iters)
      .num("warmup", warmup)
      .num("lat_seconds", lat_seconds)
      .num("bw_seconds", bw_seconds)
      .num("inflight", inflight)
      .num("goodput_size", goodput_size)
      .num("goodput_puts", double(goodput_puts))
      .num("goodput_seconds", goodput_seconds)
      .end_object();
  if (floors) {
    j.begin_object("floors");
    pingpong_json(j, pp);
    memcpy_json(j, mc, true, true);
    j.end_object();
  }
  j.begin_array("latency");
  for (const Latency& l : lat) {
    j.begin_object()
        .num("size", l.size)
        .stats("us", l.us)
        .num("failed", double(l.failed))
        .num("first_failed_status", double(l.first_status))
        .num("dormant_at_post", double(l.dormant_hits))
        .num("ratio_median_to_floor_rtt", l.ratio);
    counters_json(j, l.counters, "sender", "receiver").end_object();
  }
  j.end_array();
  j.begin_array("bandwidth");
  for (const Bandwidth& r : bw) {
    j.begin_object()
        .num("size", r.size)
        .num("inflight", r.inflight)
        .num("puts", double(r.puts))
        .num("failed", double(r.failed))
        .stats("bytes_per_s", r.bps)
        .num("overall_bytes_per_s", r.overall_bps)
        .num("memcpy_bytes_per_s_median", r.memcpy_bps)
        .num("ratio_median_to_memcpy", r.ratio);
    counters_json(j, r.counters, "sender", "receiver").end_object();
  }
  j.end_array();
  if (goodput_puts) {
    j.begin_object("goodput")
        .num("size", gp.size)
        .num("inflight", gp.inflight)
        .num("target_puts", double(gp.target_puts))
        .num("ok", double(gp.ok))
        .num("failed", double(gp.failed))
        .num("first_failed_status", double(gp.first_status))
        .num("seconds", gp.seconds)
        .num("budget_s", gp.budget_s)
        .boolean("budget_hit", gp.budget_hit)
        .num("bytes_per_s", gp.bps)
        .num("window_puts", double(gp.window))
        .stats("window_bytes_per_s", gp.window_bps)
        .stats("put_us_inflight", gp.put_us);
    counters_json(j, gp.counters, "sender", "receiver").end_object();
  }
  j.begin_object("verification")
      .num("puts", inflight)
      .num("failed", double(verify_failed))
      .str("server", verdict)
      .end_object();
  j.end_object();
  write_json(j, json_path);
  return verified ? 0 : 1;
}

int serve_main(int argc, char** argv) {
  std::string info;
  uint64_t size = 10u << 20;
  for (int i = 2; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--info" && i + 1 < argc) info = argv[++i];
    else if (a == "--size" && i + 1 < argc) size = std::stoull(argv[++i], nullptr, 0);
    else usage();
  }
  if (info.empty()) usage();
  return serve(info, size);
}

}  // namespace

int main(int argc, char** argv) {
  bench::program = "fabric_bench";
  return serve_or_client(argc, argv, serve_main, client, usage);
}
