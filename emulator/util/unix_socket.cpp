#include "util/unix_socket.h"

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

}  // namespace ulnic
