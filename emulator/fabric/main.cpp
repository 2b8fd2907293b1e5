// ulnic-fabricd: the cluster's fabric server (see fabric_server.h).
//   ulnic-fabricd --dir DIR [--size BYTES] [--vectors N] [--nodes N]
#include <signal.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <string>

#include "fabric/fabric_server.h"

namespace {
std::atomic<bool> g_stop{false};
static_assert(std::atomic<bool>::is_always_lock_free, "set from a signal handler");
ulnic::fabric::Server* g_server = nullptr;
void on_signal(int) {
  g_stop = true;
  if (g_server) g_server->wake();
}
}  // namespace

int main(int argc, char** argv) {
  ulnic::fabric::Options opts;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
    if (a == "--dir") opts.dir = next();
    else if (a == "--size") opts.size = std::stoull(next(), nullptr, 0);
    else if (a == "--vectors") opts.vectors = uint32_t(std::stoul(next()));
    else if (a == "--nodes") opts.max_nodes = uint32_t(std::stoul(next()));
    else if (a == "--nic-peer-vectors") opts.nic_peer_vectors = uint32_t(std::stoul(next()));
    else if (a == "--ports") opts.ports = uint32_t(std::stoul(next()));
    else if (a == "--switch") opts.with_switch = true;
    else if (a == "--ring-capacity") opts.ring_capacity = uint32_t(std::stoul(next()));
    else {
      std::fprintf(stderr, "usage: ulnic-fabricd --dir DIR [--size BYTES] [--vectors N] [--nodes N] [--nic-peer-vectors N]\n"
                   "                     [--ports P [--switch] [--ring-capacity C]]\n");
      return 2;
    }
  }
  if (opts.dir.empty()) {
    std::fprintf(stderr, "ulnic-fabricd: --dir is required\n");
    return 2;
  }
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
  signal(SIGPIPE, SIG_IGN);
  ulnic::fabric::Server server;
  g_server = &server;  // wake() before init() writes to no pipe: harmless
  if (auto r = server.init(opts); !r) {
    std::fprintf(stderr, "ulnic-fabricd: %s\n", r.error().message.c_str());
    return 1;
  }
  std::fprintf(stderr, "ulnic-fabricd: serving %s (%llu MiB, %u vectors)\n", opts.dir.c_str(),
               static_cast<unsigned long long>(opts.size >> 20), opts.vectors);
  if (auto r = server.run(&g_stop); !r) {
    std::fprintf(stderr, "ulnic-fabricd: %s\n", r.error().message.c_str());
    return 1;
  }
  return 0;
}
