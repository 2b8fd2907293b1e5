// UNIX-domain stream sockets: connect, listen, and 8-byte messages with an
// optional file descriptor (the ivshmem server protocol).
#pragma once

#include <cstdint>
#include <string>

#include "util/fd.h"
#include "util/result.h"

namespace ulnic {

Result<UniqueFd> connect_unix(const std::string& path);
// Binds and listens at `path`, replacing a stale socket file.
Result<UniqueFd> listen_unix(const std::string& path, int backlog = 16);
// Sends one little-endian int64 and, if fd >= 0, the fd by SCM_RIGHTS.
Result<void> send_i64_with_fd(int sock, int64_t value, int fd);

}  // namespace ulnic
