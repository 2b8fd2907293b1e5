// put_worker: remote puts between two nodes, data verified.
//
//   put_worker serve --info FILE [--size BYTES]
//       attach, register a RemoteWrite buffer, write "slot key addr size" to
//       FILE, then wait for FILE.done and check the buffer against the
//       pattern the writer left (see expected()); exit 0 if every byte matches.
//   put_worker put --info FILE --dst-node N [--ops K] [--max-size B] [--batch Q] [--seed S]
//                  [--expect-status N] [--slot S] [--key K] [--addr-offset BYTES]
//       attach, put K payloads into the server's buffer, check completions
//       (all kCqOk, or all N with --expect-status), then create FILE.done
//       with "ops seed max_size" in it (not with --expect-status);
//       --stop-on-error exits at the first unexpected status. --slot,
//       --key and --addr-offset aim the puts elsewhere (protection tests).
// Op i writes a region of the buffer chosen by i (regions cycle), so the
// final content is known: the last round's pattern in every region.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "ulnic/nic.h"

namespace abi = ulnic::abi;

namespace {

constexpr uint32_t kRegions = 64;

uint8_t pattern(uint64_t seed, uint64_t op, uint64_t byte) { return uint8_t((seed * 131 + op * 7919 + byte * 31) >> 3); }
uint32_t op_len(uint64_t seed, uint64_t op, uint32_t max) { return 1 + uint32_t((seed ^ (op * 2654435761u)) % max); }

int serve(const std::string& info, uint64_t size) {
  auto nic = ulnic::Nic::open();
  if (!nic) return std::fprintf(stderr, "put_worker: %s\n", nic.error().message.c_str()), 1;
  auto& n = **nic;
  uint8_t* buf = static_cast<uint8_t*>(n.alloc(size, 4096));
  if (!buf) return std::fprintf(stderr, "put_worker: slot heap too small\n"), 1;
  std::memset(buf, 0, size);
  auto mr = n.register_memory(buf, size, abi::kAccessLocal | abi::kAccessRemoteWrite);
  if (!mr) return std::fprintf(stderr, "put_worker: %s\n", mr.error().message.c_str()), 1;
  {
    std::ofstream tmp(info + ".tmp");
    tmp << n.slot() << " " << mr->key << " " << reinterpret_cast<uint64_t>(buf) << " " << size << "\n";
  }
  std::rename((info + ".tmp").c_str(), info.c_str());
  uint64_t ops = 0, seed = 0;
  uint32_t max = 0;
  // Up to 30 minutes: the writer's pace is the fabric's (a lossy link under
  // a loaded machine is slow); the test's own timeout bounds a hang.
  for (int i = 0; i < 18000; ++i) {
    std::ifstream done(info + ".done");
    if (done >> ops >> seed >> max) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  if (!max) return std::fprintf(stderr, "put_worker: the writer never finished\n"), 1;
  uint64_t region = size / kRegions, bad = 0;
  for (uint32_t r = 0; r < kRegions && r < ops; ++r) {
    uint64_t last = r + ((ops - 1 - r) / kRegions) * kRegions;  // last op that wrote region r
    uint32_t len = op_len(seed, last, max);
    for (uint32_t b = 0; b < len; ++b)
      if (buf[r * region + b] != pattern(seed, last, b) && bad++ < 5)
        std::fprintf(stderr, "put_worker: region %u byte %u: got %u want %u\n", r, b, buf[r * region + b],
                     pattern(seed, last, b));
  }
  std::printf("put_worker serve: slot %u of node %u: %llu puts checked, %llu bad bytes\n", n.slot(), n.node(),
              static_cast<unsigned long long>(ops), static_cast<unsigned long long>(bad));
  return bad ? 1 : 0;
}

struct Aim {
  int64_t slot = -1, key = -1;
  uint64_t addr_offset = 0;
  int expect = 0;  // CqStatus every put must end with
  bool stop_on_error = false;
};

int put(const std::string& info, uint32_t dst_node, uint64_t ops, uint32_t max, uint32_t batch, uint64_t seed,
        const Aim& aim) {
  uint32_t slot = 0, key = 0;
  uint64_t addr = 0, size = 0;
  for (int i = 0; i < 300; ++i) {
    std::ifstream in(info);
    if (in >> slot >> key >> addr >> size) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  if (!size) return std::fprintf(stderr, "put_worker: no server info in %s\n", info.c_str()), 1;
  if (aim.slot >= 0) slot = uint32_t(aim.slot);
  if (aim.key >= 0) key = uint32_t(aim.key);
  addr += aim.addr_offset;
  uint64_t region = size / kRegions;
  if (max > region) max = uint32_t(region);
  auto nic = ulnic::Nic::open();
  if (!nic) return std::fprintf(stderr, "put_worker: %s\n", nic.error().message.c_str()), 1;
  auto& n = **nic;
  if (batch == 0 || batch > 32) batch = 8;
  std::vector<uint8_t*> src(batch);
  std::vector<ulnic::MemRegion> mr(batch);
  for (uint32_t i = 0; i < batch; ++i) {
    src[i] = static_cast<uint8_t*>(n.alloc(max, 4096));
    auto r = src[i] ? n.register_memory(src[i], max, abi::kAccessLocal) : ulnic::Result<ulnic::MemRegion>(std::unexpected(ulnic::Error{"heap"}));
    if (!r) return std::fprintf(stderr, "put_worker: %s\n", r.error().message.c_str()), 1;
    mr[i] = *r;
  }
  uint64_t issued = 0, done = 0, failed = 0;
  std::vector<uint64_t> op_of(batch);
  auto issue = [&](uint32_t b) {
    uint64_t i = issued++;
    uint32_t len = op_len(seed, i, max);
    for (uint32_t k = 0; k < len; ++k) src[b][k] = pattern(seed, i, k);
    abi::SqEntry* e = n.next_sqe();
    e->opcode = abi::kOpPut;
    e->length = len;
    e->user_data = b;
    e->src_key = mr[b].key;
    e->src_addr = reinterpret_cast<uint64_t>(src[b]);
    e->dst_node = dst_node;
    e->dst_slot = uint16_t(slot);
    e->dst_key = key;
    e->dst_addr = addr + (i % kRegions) * region;
    op_of[b] = i;
  };
  // Puts to one region must land in order: batch buffers map to ops, and the
  // link delivers in order, so a later op always lands after an earlier one.
  for (uint32_t b = 0; b < batch && issued < ops; ++b) issue(b);
  n.submit();
  while (done < ops) {
    auto c = n.wait(std::chrono::milliseconds(60000));
    if (!c) return std::fprintf(stderr, "put_worker: %s after %llu puts\n", c.error().message.c_str(),
                                static_cast<unsigned long long>(done)), 1;
    if (c->status != aim.expect && failed++ < 5)
      std::fprintf(stderr, "put_worker: put %llu ended with status %u, expected %d\n",
                   static_cast<unsigned long long>(op_of[c->user_data]), c->status, aim.expect);
    if (failed && aim.stop_on_error) return 1;
    ++done;
    if (issued < ops) {
      issue(uint32_t(c->user_data));
      n.submit();
    }
  }
  if (aim.expect == 0) std::ofstream(info + ".done") << ops << " " << seed << " " << max << "\n";
  std::printf("put_worker put: node %u -> node %u: %llu puts, %llu failed\n", n.node(), dst_node,
              static_cast<unsigned long long>(done), static_cast<unsigned long long>(failed));
  return failed ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return std::fprintf(stderr, "usage: put_worker serve|put ...\n"), 2;
  std::string mode = argv[1], info;
  uint64_t size = 4u << 20, ops = 1000, seed = 1;
  uint32_t max = 8192, batch = 8, dst = 1;
  Aim aim;
  for (int i = 2; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&] { return i + 1 < argc ? std::string(argv[++i]) : std::string(); };
    if (a == "--info") info = next();
    else if (a == "--size") size = std::stoull(next(), nullptr, 0);
    else if (a == "--ops") ops = std::stoull(next());
    else if (a == "--max-size") max = uint32_t(std::stoul(next()));
    else if (a == "--batch") batch = uint32_t(std::stoul(next()));
    else if (a == "--seed") seed = std::stoull(next());
    else if (a == "--dst-node") dst = uint32_t(std::stoul(next()));
    else if (a == "--expect-status") aim.expect = std::stoi(next());
    else if (a == "--stop-on-error") aim.stop_on_error = true;
    else if (a == "--slot") aim.slot = std::stoll(next());
    else if (a == "--key") aim.key = std::stoll(next(), nullptr, 0);
    else if (a == "--addr-offset") aim.addr_offset = std::stoull(next(), nullptr, 0);
    else return std::fprintf(stderr, "put_worker: unknown option %s\n", a.c_str()), 2;
  }
  if (info.empty()) return std::fprintf(stderr, "put_worker: --info FILE is required\n"), 2;
  if (mode == "serve") return serve(info, size);
  if (mode == "put") return put(info, dst, ops, max, batch, seed, aim);
  return std::fprintf(stderr, "usage: put_worker serve|put ...\n"), 2;
}
