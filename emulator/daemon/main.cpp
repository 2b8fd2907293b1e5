// ulnicd: the node daemon (see daemon.h).
//   ulnicd --cluster C --node K [--boost-nice N]
#include <signal.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "daemon/daemon.h"

namespace {
volatile bool g_stop = false;
ulnic::daemon::Daemon* g_daemon = nullptr;
void on_signal(int) {
  g_stop = true;
  if (g_daemon) g_daemon->wake();
}
}  // namespace

int main(int argc, char** argv) {
  ulnic::daemon::Options opts;
  // How long a control command may go unanswered, in the NIC's time (tests
  // shorten it; `ulnic node start` passes its environment on).
  if (const char* t = std::getenv("ULNIC_CTRL_TIMEOUT_MS"); t && std::atoi(t) > 0)
    opts.ctrl_timeout = std::chrono::milliseconds(std::atoi(t));
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    std::string v = i + 1 < argc ? argv[i + 1] : "";
    if (a == "--cluster") opts.cluster = v, ++i;
    else if (a == "--node") opts.node = uint32_t(std::stoul(v)), ++i;
    else if (a == "--boost-nice") opts.guard = true, opts.boost_nice = std::stoi(v), ++i;
    else {
      std::fprintf(stderr, "usage: ulnicd --cluster C --node K [--boost-nice N]\n");
      return 2;
    }
  }
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
  signal(SIGPIPE, SIG_IGN);
  ulnic::daemon::Daemon d;
  g_daemon = &d;
  if (auto r = d.init(opts); !r) {
    std::fprintf(stderr, "ulnicd: %s\n", r.error().message.c_str());
    return 1;
  }
  if (auto r = d.run(&g_stop); !r) {
    std::fprintf(stderr, "ulnicd: %s\n", r.error().message.c_str());
    return 1;
  }
  return 0;
}
