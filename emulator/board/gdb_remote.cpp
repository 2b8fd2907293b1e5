#include "board/gdb_remote.h"

#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "ulnic/util/unix_socket.h"

namespace ulnic::board {

std::string GdbRemote::frame(const std::string& payload) {
  unsigned sum = 0;
  for (unsigned char c : payload) sum += c;
  char cs[3];
  std::snprintf(cs, sizeof cs, "%02x", sum & 0xff);
  return "$" + payload + "#" + cs;
}

Result<GdbRemote> GdbRemote::connect(const std::string& path, std::chrono::milliseconds timeout, pid_t pid) {
  auto fd = connect_unix(path);
  if (!fd) return fail("gdbstub: " + fd.error().message);
  return handshake(std::move(*fd), timeout, pid);
}

Result<GdbRemote> GdbRemote::handshake(UniqueFd fd, std::chrono::milliseconds timeout, pid_t pid) {
  GdbRemote g;
  g.fd_ = std::move(fd);
  g.timeout_ = timeout;
  g.pid_ = pid;
  // A second debugger queues behind an attached one and gets no answer, so a
  // silent stub most likely means `ulnic node gdb` is attached.
  auto sup = g.transact("qSupported");
  if (!sup)
    return fail("gdbstub did not answer (" + sup.error().message +
                "); is a debugger attached to this node? detach it and retry");
  size_t at = sup->find("PacketSize=");
  if (at != std::string::npos) {
    size_t size = std::strtoul(sup->c_str() + at + 11, nullptr, 16);
    if (size > 0) g.packet_size_ = size;
  }
  return g;
}

// One reply's bytes share one deadline (transact's).
Result<char> GdbRemote::read_byte(CpuDeadline& deadline) {
  pollfd p{fd_.get(), POLLIN, 0};
  for (;;) {
    // Within the bound, wait out what is left of it; past it, look again
    // every 100 ms until the deadline says the reply is overdue.
    const auto left = timeout_ - deadline.waited();
    int r = ::poll(&p, 1, left.count() > 0 ? int(left.count()) : 100);
    if (r > 0) break;
    if (r < 0 && errno != EINTR) return fail_errno("poll", errno);
    if (deadline.passed()) {
      if (!pid_) return fail("timed out after " + std::to_string(timeout_.count()) + " ms");
      return fail("timed out: no reply " + deadline.spent());
    }
  }
  char c;
  ssize_t n = ::recv(fd_.get(), &c, 1, 0);
  if (n <= 0) return fail("connection closed");
  return c;
}

Result<std::string> GdbRemote::transact(const std::string& payload) {
  std::string f = frame(payload);
  if (::send(fd_.get(), f.data(), f.size(), MSG_NOSIGNAL) != ssize_t(f.size())) return fail_errno("send", errno);
  // Reply: optional '+' ack(s), then "$...#xx"; anything else before '$' is noise.
  CpuDeadline deadline(pid_, timeout_, timeout_);
  char c;
  do {
    auto b = read_byte(deadline);
    if (!b) return std::unexpected(b.error());
    c = *b;
    if (c == '-') return fail("gdbstub rejected a packet (checksum)");
  } while (c != '$');
  std::string reply;
  for (;;) {
    auto b = read_byte(deadline);
    if (!b) return std::unexpected(b.error());
    if (*b == '#') break;
    reply += *b;
  }
  for (int i = 0; i < 2; ++i)
    if (auto b = read_byte(deadline); !b) return std::unexpected(b.error());
  ::send(fd_.get(), "+", 1, MSG_NOSIGNAL);
  return reply;
}

Result<void> GdbRemote::write_memory(uint64_t addr, std::span<const uint8_t> bytes) {
  static const char hex[] = "0123456789abcdef";
  for (size_t off = 0, n = 0; off < bytes.size(); off += n) {
    // The stub's PacketSize bounds the whole packet: "$Maddr,len:" + 2 hex
    // digits per byte + "#xx". The length field is at most as long as the
    // address field, so reserve that much for it.
    char head[48];
    int head_len = std::snprintf(head, sizeof head, "M%llx,%llx:", static_cast<unsigned long long>(addr + off),
                                 static_cast<unsigned long long>(addr + off));
    size_t room = packet_size_ > size_t(head_len) + 4 ? (packet_size_ - size_t(head_len) - 4) / 2 : 1;
    n = std::min(std::max<size_t>(room, 1), bytes.size() - off);
    std::snprintf(head, sizeof head, "M%llx,%zx:", static_cast<unsigned long long>(addr + off), n);
    std::string p = head;
    p.reserve(p.size() + 2 * n);
    for (size_t i = 0; i < n; ++i) {
      p += hex[bytes[off + i] >> 4];
      p += hex[bytes[off + i] & 15];
    }
    auto r = transact(p);
    if (!r) return std::unexpected(r.error());
    if (*r != "OK") return fail("gdbstub refused a memory write at " + std::string(head) + " (" + *r + ")");
  }
  return {};
}

Result<void> GdbRemote::detach() {
  auto r = transact("D");
  if (!r) return std::unexpected(r.error());
  fd_.reset();
  return {};
}

}  // namespace ulnic::board
