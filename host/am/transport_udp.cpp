// AM over UDP (the AMUDP design): one datagram socket per endpoint, no
// emulator. The core (reqrep.cpp) makes it reliable: request instances with
// the reply as the acknowledgement, retransmission with exponential backoff,
// pieces for messages larger than a datagram.
//
// An endpoint's name is the IPv4 address and port its socket is bound to:
// the address AMUDP_SetUDPInterface gave, else $ULNIC_AM_UDP_HOST (an
// address of this machine that the job's other machines reach), else
// 127.0.0.1. A medium of AM_MaxMedium() bytes is larger than a datagram's
// room after the header: it goes as two pieces, like a Long.
//
// Fault injection for tests: $ULNIC_AM_UDP_DROP = fraction of outgoing
// datagrams dropped (seeded by $ULNIC_AM_UDP_SEED, else the pid).
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "am_internal.h"

namespace ulnic::am {
namespace {

// The largest datagram AMUDP sends on Linux (amudp.h: AMUDP_MAX_LONG 65000).
constexpr uint32_t kMaxDatagram = 65000;
// Socket buffers: asked for generously; unprivileged, the kernel caps them at
// net.core.[rw]mem_max (208 KiB by default), which is why the core sends a
// large message's pieces a window at a time.
constexpr int kSocketBuffer = 4 << 20;
constexpr uint32_t kWindow = 3;  // 3 x 64 KB pieces fit a 208 KiB receive buffer

struct UdpEndpoint {
  int fd = -1;
};

struct Faults {
  double drop = 0;
  std::mt19937_64 rng;
};
Faults faults;
std::vector<uint8_t> rx_buffer;

int fd_of(const Endpoint& ep) { return static_cast<UdpEndpoint*>(ep.transport_state)->fd; }

int udp_start() {
  const char* d = std::getenv("ULNIC_AM_UDP_DROP");
  faults.drop = d && *d ? std::strtod(d, nullptr) : 0.0;
  const char* seed = std::getenv("ULNIC_AM_UDP_SEED");
  faults.rng.seed(seed && *seed ? std::strtoull(seed, nullptr, 10) : uint64_t(getpid()));
  rx_buffer.resize(kMaxDatagram);
  return AM_OK;
}

void udp_stop() {}

int udp_open(Endpoint& ep, en_t& name) {
  const char* host = std::getenv("ULNIC_AM_UDP_HOST");
  sockaddr_in a{};
  a.sin_family = AF_INET;
  if (lib().udp_interface) {
    a.sin_addr.s_addr = htonl(lib().udp_interface);  // AMUDP_SetUDPInterface
  } else if (inet_pton(AF_INET, host && *host ? host : "127.0.0.1", &a.sin_addr) != 1) {
    std::fprintf(stderr, "AM udp: ULNIC_AM_UDP_HOST=%s is not an IPv4 address\n", host);
    return AM_ERR_RESOURCE;
  }
  int fd = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return AM_ERR_RESOURCE;
  setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &kSocketBuffer, sizeof kSocketBuffer);
  setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &kSocketBuffer, sizeof kSocketBuffer);
  socklen_t len = sizeof a;
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    close(fd);
    return AM_ERR_RESOURCE;
  }
  name = en_t{};
  name.host = a.sin_addr.s_addr;
  name.port = ntohs(a.sin_port);
  name.transport = AMX_TRANSPORT_UDP;
  ep.transport_state = new UdpEndpoint{fd};
  return AM_OK;
}

void udp_close(Endpoint& ep) {
  auto* u = static_cast<UdpEndpoint*>(ep.transport_state);
  if (!u) return;
  close(u->fd);
  delete u;
  ep.transport_state = nullptr;
}

int udp_send(Endpoint& ep, const en_t& dest, void* head, size_t head_len, const void* payload,
             size_t payload_len) {
  if (faults.drop > 0 && std::uniform_real_distribution<double>(0, 1)(faults.rng) < faults.drop) return 0;
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_addr.s_addr = dest.host;
  to.sin_port = htons(uint16_t(dest.port));
  iovec iov[2] = {{head, head_len}, {const_cast<void*>(payload), payload_len}};
  msghdr m{};
  m.msg_name = &to;
  m.msg_namelen = sizeof to;
  m.msg_iov = iov;
  m.msg_iovlen = payload_len ? 2 : 1;
  if (sendmsg(fd_of(ep), &m, 0) >= 0) return 0;
  // A full socket buffer is congestion: the retransmission timer sends it.
  // Anything else (no route...) is the same to a datagram: lost.
  return errno == EAGAIN || errno == ENOBUFS ? -1 : 0;
}

int udp_poll(Endpoint& ep, int budget) {
  int n = 0;
  int fd = fd_of(ep);
  while (n < budget) {
    sockaddr_in from{};
    socklen_t flen = sizeof from;
    ssize_t got = recvfrom(fd, rx_buffer.data(), rx_buffer.size(), 0, reinterpret_cast<sockaddr*>(&from), &flen);
    if (got < 0) break;  // EAGAIN: nothing more
    en_t src{};
    src.host = from.sin_addr.s_addr;
    src.port = ntohs(from.sin_port);
    src.transport = AMX_TRANSPORT_UDP;
    n++;
    deliver(ep, src, rx_buffer.data(), size_t(got));
  }
  return n;
}

bool udp_wait(Bundle& eb, int timeout_ms) {
  std::vector<pollfd> fds;
  for (Endpoint* ep : eb.endpoints) fds.push_back({fd_of(*ep), POLLIN, 0});
  if (fds.empty()) {
    if (timeout_ms > 0) usleep(useconds_t(timeout_ms) * 1000);
    return false;
  }
  return poll(fds.data(), fds.size(), timeout_ms) > 0;
}

const Transport kUdp = {
    "udp", AMX_TRANSPORT_UDP, /*reliable=*/false, kMaxDatagram, kWindow, AMUDP_MAX_NETWORKDEPTH,
    /*places_long=*/false, /*probes=*/false,
    udp_start, udp_stop, udp_open, udp_close, udp_send, udp_poll, udp_wait, /*endpoint_changed=*/nullptr,
    /*polled=*/nullptr,  // the kernel does the transport: nothing to hand over
};

}  // namespace

const Transport* udp_transport() { return &kUdp; }

}  // namespace ulnic::am
