// Fuzz target: the gdb remote-protocol client (emulator/board/gdb_remote.*)
// reading what QEMU's gdbstub sends: the input is the stub's side of a
// whole conversation (acks, noise, "$...#xx" replies, its PacketSize), after
// which it hangs up. The client runs its qSupported handshake, writes a
// small image as the flasher does (split by the stub's packet size), and
// detaches. Invariant: every call ends without waiting for the timeout.
#include <chrono>
#include <cstdint>

#include "board/gdb_remote.h"
#include "fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz::converse(data, size, [](ulnic::UniqueFd fd, std::chrono::milliseconds timeout) {
    auto g = ulnic::board::GdbRemote::handshake(std::move(fd), timeout);
    if (!g) return;
    static const uint8_t image[300] = {0x13, 0x00, 0x00, 0x00};
    if (g->write_memory(0x8000'0000, image)) (void)g->detach();
  });
  return 0;
}
