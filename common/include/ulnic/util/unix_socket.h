// UNIX-domain stream sockets: connect, listen, and 8-byte messages with an
// optional file descriptor (the ivshmem server protocol).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ulnic/util/fd.h"
#include "ulnic/util/result.h"

namespace ulnic {

Result<UniqueFd> connect_unix(const std::string& path);
// Binds and listens at `path`, replacing a stale socket file.
Result<UniqueFd> listen_unix(const std::string& path, int backlog = 16);
// Sends one little-endian int64 and, if fd >= 0, the fd by SCM_RIGHTS.
Result<void> send_i64_with_fd(int sock, int64_t value, int fd);
// Receives one int64 and the fd that came with it (if any). Waits up to
// timeout_ms (-1: forever). An orderly close is an error "closed".
Result<int64_t> recv_i64_with_fd(int sock, UniqueFd& fd, int timeout_ms);
// Sends `len` bytes with up to 8 fds attached.
Result<void> send_with_fds(int sock, const void* data, size_t len, const int* fds, size_t nfds);
// Receives exactly `len` bytes (one message) and up to `max_fds` fds.
Result<void> recv_with_fds(int sock, void* data, size_t len, std::vector<UniqueFd>& fds, size_t max_fds,
                           int timeout_ms);

}  // namespace ulnic
