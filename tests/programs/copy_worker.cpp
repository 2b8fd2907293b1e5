// copy_worker: a host program that attaches to its node, registers buffers
// (one from the slot heap, one from malloc that gets moved into the slot),
// and runs node-local copies through the NIC with every byte verified.
//
//   copy_worker [--ops N] [--max-size BYTES] [--batch K] [--seed S] [--quiet] [--dormant-first 1]
//
// --dormant-first: the first copy is posted only once the NIC has marked
// the slot dormant (it went to sleep after the registrations), so that post
// rings the slot's doorbell, whatever the host's scheduling.
// Exit 0 when every copy completed OK and verified; 1 otherwise.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "ulnic/nic.h"

namespace abi = ulnic::abi;

int main(int argc, char** argv) {
  uint64_t ops = 1000, seed = 1;
  uint32_t max_size = 4096, batch = 16;
  bool quiet = false, dormant_first = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&] { return i + 1 < argc ? std::strtoull(argv[++i], nullptr, 0) : 0ull; };
    if (a == "--ops") ops = next();
    else if (a == "--max-size") max_size = uint32_t(next());
    else if (a == "--batch") batch = uint32_t(next());
    else if (a == "--seed") seed = next();
    else if (a == "--quiet") quiet = true;
    else if (a == "--dormant-first") dormant_first = next() != 0;
    else {
      std::fprintf(stderr,
                   "usage: copy_worker [--ops N] [--max-size B] [--batch K] [--seed S] [--quiet] [--dormant-first 1]\n");
      return 2;
    }
  }
  // The source buffer outlives the Nic (declared before it): ~Nic moves its
  // pages back to private memory first, and only then is it freed.
  std::vector<uint8_t> src_vec;
  auto nic = ulnic::Nic::open();
  if (!nic) {
    std::fprintf(stderr, "copy_worker: %s\n", nic.error().message.c_str());
    return 1;
  }
  auto& n = **nic;
  if (batch == 0 || batch > 64) batch = 16;
  const size_t region = max_size + 64;
  // Source: ordinary heap memory, moved into the slot by registration.
  src_vec.resize(region * batch + 8192);
  uint8_t* src = src_vec.data();
  auto src_mr = n.register_memory(src, src_vec.size(), abi::kAccessLocal);
  // Destination: allocated in the slot.
  uint8_t* dst = static_cast<uint8_t*>(n.alloc(region * batch, 4096));
  if (!src_mr || !dst) {
    std::fprintf(stderr, "copy_worker: %s\n", src_mr ? "slot heap exhausted" : src_mr.error().message.c_str());
    return 1;
  }
  auto dst_mr = n.register_memory(dst, region * batch, abi::kAccessLocal);
  if (!dst_mr) {
    std::fprintf(stderr, "copy_worker: %s\n", dst_mr.error().message.c_str());
    return 1;
  }
  if (dormant_first) {
    const auto* h = reinterpret_cast<const abi::SlotHeader*>(n.slot_base());
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (!__atomic_load_n(&h->nic.sq_dormant, __ATOMIC_ACQUIRE)) {
      if (std::chrono::steady_clock::now() > until) {
        std::fprintf(stderr, "copy_worker: the NIC never marked the slot dormant\n");
        return 1;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }
  std::mt19937_64 rng(seed);
  struct Op {
    uint32_t len, src_off, dst_off;
    uint8_t fill;
  };
  std::vector<Op> ops_in(batch);
  std::vector<bool> busy(batch, false);
  uint64_t issued = 0, done = 0, bad = 0;
  auto issue = [&](uint32_t i) {
    Op& o = ops_in[i];
    o.len = 1 + uint32_t(rng() % max_size);
    o.src_off = uint32_t(rng() % 64);
    o.dst_off = uint32_t(rng() % 64);
    o.fill = uint8_t(rng());
    uint8_t* s = src + region * i + o.src_off;
    for (uint32_t b = 0; b < o.len; ++b) s[b] = uint8_t(o.fill + b * 31);
    std::memset(dst + region * i, 0, region);
    abi::SqEntry* e = n.next_sqe();
    e->opcode = abi::kOpCopy;
    e->length = o.len;
    e->user_data = i;
    e->src_slot = n.slot();
    e->dst_slot = uint16_t(n.slot());
    e->src_key = src_mr->key;
    e->dst_key = dst_mr->key;
    e->src_addr = reinterpret_cast<uint64_t>(s);
    e->dst_addr = reinterpret_cast<uint64_t>(dst + region * i + o.dst_off);
    busy[i] = true;
    ++issued;
  };
  for (uint32_t i = 0; i < batch && issued < ops; ++i) issue(i);
  n.submit();
  while (done < ops) {
    auto c = n.wait(std::chrono::milliseconds(30000));
    if (!c) {
      std::fprintf(stderr, "copy_worker: slot %u: %s after %llu ops\n", n.slot(), c.error().message.c_str(),
                   static_cast<unsigned long long>(done));
      return 1;
    }
    uint32_t i = uint32_t(c->user_data);
    const Op& o = ops_in[i];
    const uint8_t* d = dst + region * i;
    bool ok = c->status == abi::kCqOk && c->result == o.len;
    for (uint32_t b = 0; ok && b < o.dst_off; ++b) ok = d[b] == 0;
    for (uint32_t b = 0; ok && b < o.len; ++b) ok = d[o.dst_off + b] == uint8_t(o.fill + b * 31);
    for (uint32_t b = o.dst_off + o.len; ok && b < region; ++b) ok = d[b] == 0;
    if (!ok && bad++ < 5)
      std::fprintf(stderr, "copy_worker: slot %u: op %llu (len %u) status %u: data wrong\n", n.slot(),
                   static_cast<unsigned long long>(done), o.len, c->status);
    ++done;
    busy[i] = false;
    if (issued < ops) {
      issue(i);
      n.submit();
    }
  }
  if (!quiet)
    std::printf("copy_worker: slot %u of node %u: %llu copies verified, %llu bad\n", n.slot(), n.node(),
                static_cast<unsigned long long>(done), static_cast<unsigned long long>(bad));
  return bad ? 1 : 0;
}
