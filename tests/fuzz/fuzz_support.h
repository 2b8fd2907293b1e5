// Helpers shared by the emulator's fuzz targets (tests/fuzz): a socket that
// replays the fuzzer's bytes as the replies of a peer that then hangs up.
#pragma once

#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>

#include "fuzz_check.h"
#include "ulnic/util/fd.h"

namespace fuzz {

// A connected pair: `client` is handed to the code under test; its peer has
// sent `size` bytes of `data` (at most what fits in the socket buffer) and
// shut down its sending side, so reads see the bytes, then end of file. The
// peer stays open (sends do not fail with EPIPE); what the client sends
// stays unread in its receive buffer.
struct Replay {
  ulnic::UniqueFd client, peer;
};

inline Replay replaying_socket(const uint8_t* data, size_t size) {
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) std::abort();
  Replay r{ulnic::UniqueFd(sv[0]), ulnic::UniqueFd(sv[1])};
  while (size > 0) {
    ssize_t n = ::send(r.peer.get(), data, size, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n <= 0) break;  // buffer full: the rest is cut off
    data += n, size -= size_t(n);
  }
  ::shutdown(r.peer.get(), SHUT_WR);
  // Nobody reads what the client sends: once that fills the socket (a gdb
  // client writing a byte a packet, found by fuzz_gdb), a blocking send would
  // wait forever where a real peer reads. Non-blocking, it fails instead;
  // the clients poll before every read, so reads behave the same.
  ::fcntl(r.client.get(), F_SETFL, O_NONBLOCK);
  return r;
}

// Runs talk(client socket, timeout) against a peer that sends `data` and
// hangs up, and checks that it ended without waiting for a reply that does
// not come: the client may wait 30 s; well below that (a loaded machine may
// stall a run for seconds), it did not wait.
template <class Talk>
void converse(const uint8_t* data, size_t size, Talk&& talk) {
  using namespace std::chrono_literals;
  Replay r = replaying_socket(data, size);
  auto start = std::chrono::steady_clock::now();
  talk(std::move(r.client), std::chrono::milliseconds(30s));
  FUZZ_CHECK(std::chrono::steady_clock::now() - start < 20s);
}

}  // namespace fuzz
