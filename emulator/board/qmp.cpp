#include "board/qmp.h"

#include <poll.h>
#include <sys/socket.h>

#include <cstring>
#include <thread>

#include "ulnic/util/json.h"
#include "ulnic/util/process.h"
#include "ulnic/util/unix_socket.h"

namespace ulnic::board {


std::string json_string_field(const std::string& json, const std::string& key) {
  auto doc = parse_json(json);
  if (!doc) return {};
  const Json* v = doc->find_string(key);
  return v ? v->string : std::string{};
}

Result<Qmp> Qmp::connect(const std::string& path, std::chrono::milliseconds timeout, pid_t pid) {
  // QEMU creates the socket early in startup; retry until it listens.
  auto deadline = std::chrono::steady_clock::now() + timeout;
  Result<UniqueFd> fd = fail("no attempt");
  while (!(fd = connect_unix(path)) && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  if (!fd) return fail("QMP: " + fd.error().message);
  return handshake(std::move(*fd), timeout, pid);
}

Result<Qmp> Qmp::handshake(UniqueFd fd, std::chrono::milliseconds timeout, pid_t pid) {
  Qmp q;
  q.fd_ = std::move(fd);
  q.timeout_ = timeout;
  q.pid_ = pid;
  auto greeting = q.read_line();
  if (!greeting) return std::unexpected(greeting.error());
  if (greeting->find("\"QMP\"") == std::string::npos) return fail("QMP: unexpected greeting: " + *greeting);
  if (auto r = q.execute("qmp_capabilities"); !r) return std::unexpected(r.error());
  return q;
}

Result<std::string> Qmp::read_line() {
  CpuDeadline deadline(pid_, timeout_, timeout_);
  for (;;) {
    size_t nl = buf_.find('\n');
    if (nl != std::string::npos) {
      std::string line = buf_.substr(0, nl);
      buf_.erase(0, nl + 1);
      return line;
    }
    if (deadline.passed()) {
      if (!pid_) return fail("QMP: no reply within " + std::to_string(timeout_.count()) + " ms");
      return fail("QMP: no reply " + deadline.spent());
    }
    // Past the wall-clock part, look again every 100 ms.
    const auto left = timeout_ - deadline.waited();
    const int wait_ms = left.count() > 0 ? int(left.count()) : 100;
    pollfd p{fd_.get(), POLLIN, 0};
    if (::poll(&p, 1, wait_ms) < 0 && errno != EINTR) return fail_errno("QMP poll", errno);
    if (!(p.revents & (POLLIN | POLLHUP))) continue;
    char chunk[4096];
    ssize_t n = ::read(fd_.get(), chunk, sizeof chunk);
    if (n == 0) return fail("QMP: QEMU closed the connection");
    if (n < 0 && errno != EINTR && errno != EAGAIN) return fail_errno("QMP read", errno);
    if (n > 0) buf_.append(chunk, size_t(n));
  }
}

Result<std::string> Qmp::execute(const std::string& command, const std::string& arguments_json) {
  std::string msg = "{\"execute\": \"" + command + "\"";
  if (!arguments_json.empty()) msg += ", \"arguments\": " + arguments_json;
  msg += "}\n";
  if (::send(fd_.get(), msg.data(), msg.size(), MSG_NOSIGNAL) != ssize_t(msg.size()))
    return fail_errno("QMP send " + command, errno);
  for (;;) {
    auto line = read_line();
    if (!line) return line;
    auto doc = parse_json(*line);
    if (!doc || doc->type != Json::Type::kObject) continue;  // not a reply we can use
    if (doc->get("event")) continue;                          // asynchronous events: not our reply
    if (const Json* err = doc->get("error")) {
      const Json* desc = err->find_string("desc");
      return fail("QMP " + command + ": " + (desc ? desc->string : std::string("error")));
    }
    if (doc->get("return")) return line;
  }
}

Result<std::string> Qmp::run_state() {
  auto r = execute("query-status");
  if (!r) return r;
  return json_string_field(*r, "status");
}

}  // namespace ulnic::board
