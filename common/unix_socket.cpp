#include "ulnic/util/unix_socket.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>

namespace ulnic {

namespace {

Result<sockaddr_un> make_addr(const std::string& path) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof addr.sun_path) return fail("socket path too long (" + std::to_string(path.size()) + " bytes): " + path);
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  return addr;
}

}  // namespace

Result<UniqueFd> connect_unix(const std::string& path) {
  auto addr = make_addr(path);
  if (!addr) return std::unexpected(addr.error());
  UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd) return fail_errno("socket", errno);
  if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&*addr), sizeof *addr) != 0)
    return fail_errno("cannot connect to " + path, errno);
  return fd;
}

Result<UniqueFd> listen_unix(const std::string& path, int backlog) {
  auto addr = make_addr(path);
  if (!addr) return std::unexpected(addr.error());
  UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd) return fail_errno("socket", errno);
  ::unlink(path.c_str());
  if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&*addr), sizeof *addr) != 0)
    return fail_errno("cannot bind " + path, errno);
  if (::listen(fd.get(), backlog) != 0) return fail_errno("cannot listen on " + path, errno);
  return fd;
}

Result<void> send_i64_with_fd(int sock, int64_t value, int fd) {
  iovec iov{&value, sizeof value};  // x86-64 is little-endian, as the protocol wants
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  if (fd >= 0) {
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    std::memcpy(CMSG_DATA(c), &fd, sizeof fd);
  }
  if (::sendmsg(sock, &msg, MSG_NOSIGNAL) != ssize_t(sizeof value)) return fail_errno("sendmsg", errno);
  return {};
}

namespace {

bool wait_readable(int sock, int timeout_ms) {
  pollfd p{sock, POLLIN, 0};
  int r;
  while ((r = ::poll(&p, 1, timeout_ms)) < 0 && errno == EINTR) {
  }
  return r > 0;
}

// recvmsg of up to `len` bytes, collecting any SCM_RIGHTS fds.
ssize_t recv_collect(int sock, void* data, size_t len, std::vector<UniqueFd>& fds) {
  iovec iov{data, len};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(8 * sizeof(int))];
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  ssize_t n = ::recvmsg(sock, &msg, MSG_CMSG_CLOEXEC);
  if (n < 0) return n;
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < count; ++i) {
      int fd;
      std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof fd);
      fds.emplace_back(fd);
    }
  }
  return n;
}

}  // namespace

Result<int64_t> recv_i64_with_fd(int sock, UniqueFd& fd, int timeout_ms) {
  if (!wait_readable(sock, timeout_ms)) return fail("timed out");
  int64_t value = 0;
  std::vector<UniqueFd> fds;
  ssize_t n = recv_collect(sock, &value, sizeof value, fds);
  if (n == 0) return fail("closed");
  if (n < 0) return fail_errno("recvmsg", errno);
  if (n != sizeof value) return fail("short message");
  fd = fds.empty() ? UniqueFd() : std::move(fds[0]);
  return value;
}

Result<void> send_with_fds(int sock, const void* data, size_t len, const int* fds, size_t nfds) {
  if (nfds > 8) return fail("too many fds");
  iovec iov{const_cast<void*>(data), len};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(8 * sizeof(int))] = {};
  if (nfds) {
    msg.msg_control = control;
    msg.msg_controllen = CMSG_SPACE(nfds * sizeof(int));
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(nfds * sizeof(int));
    std::memcpy(CMSG_DATA(c), fds, nfds * sizeof(int));
  }
  if (::sendmsg(sock, &msg, MSG_NOSIGNAL) != ssize_t(len)) return fail_errno("sendmsg", errno);
  return {};
}

Result<void> recv_with_fds(int sock, void* data, size_t len, std::vector<UniqueFd>& fds, size_t max_fds,
                           int timeout_ms) {
  if (!wait_readable(sock, timeout_ms)) return fail("timed out");
  std::vector<UniqueFd> got;
  ssize_t n = recv_collect(sock, data, len, got);
  if (n == 0) return fail("closed");
  if (n < 0) return fail_errno("recvmsg", errno);
  if (size_t(n) != len) return fail("short message (" + std::to_string(n) + " of " + std::to_string(len) + " bytes)");
  if (got.size() > max_fds) return fail("unexpected fds");
  fds = std::move(got);
  return {};
}

}  // namespace ulnic
