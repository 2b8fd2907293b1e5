// ulnic-switch: see switch.h.
//   ulnic-switch --fabric DIR [--faults SPEC] [--pcap FILE] [--stats FILE]
#include <signal.h>

#include <cstdio>
#include <string>

#include "switch/switch.h"

namespace {
volatile bool g_stop = false;
ulnic::sw::Switch* g_switch = nullptr;
void on_signal(int) {
  g_stop = true;
  if (g_switch) g_switch->wake();
}
}  // namespace

int main(int argc, char** argv) {
  ulnic::sw::Options o;
  std::string faults;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i], v = i + 1 < argc ? argv[i + 1] : "";
    if (a == "--fabric") o.fabric_dir = v, ++i;
    else if (a == "--faults") faults = v, ++i;
    else if (a == "--pcap") o.pcap = v, ++i;
    else if (a == "--stats") o.stats_path = v, ++i;
    else if (a == "--bridge-listen") o.bridge_listen = v, ++i;
    else if (a == "--bridge-peer") {
      auto p = ulnic::sw::parse_bridge_peer(v);
      if (!p) {
        std::fprintf(stderr, "ulnic-switch: %s\n", p.error().message.c_str());
        return 2;
      }
      o.bridge_peers.push_back(*p);
      ++i;
    }
    else {
      std::fprintf(stderr, "usage: ulnic-switch --fabric DIR [--faults SPEC] [--pcap FILE] [--stats FILE]\n"
                   "                    [--bridge-listen IP:PORT --bridge-peer IP:PORT=FIRST-LAST ...]\n");
      return 2;
    }
  }
  auto spec = ulnic::sw::parse_faults(faults);
  if (!spec) {
    std::fprintf(stderr, "ulnic-switch: %s\n", spec.error().message.c_str());
    return 2;
  }
  o.faults = *spec;
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
  signal(SIGPIPE, SIG_IGN);
  ulnic::sw::Switch s;
  g_switch = &s;
  if (auto r = s.init(o); !r) {
    std::fprintf(stderr, "ulnic-switch: %s\n", r.error().message.c_str());
    return 1;
  }
  std::fprintf(stderr, "ulnic-switch: serving %s%s%s\n", o.fabric_dir.c_str(), faults.empty() ? "" : " with faults ",
               faults.c_str());
  if (auto r = s.run(&g_stop); !r) {
    std::fprintf(stderr, "ulnic-switch: %s\n", r.error().message.c_str());
    return 1;
  }
  return 0;
}
