// Fuzz target: the QMP client (emulator/board/qmp.*) reading what QEMU's
// monitor sends: the input is the monitor's side of a whole conversation
// (greeting, replies, events, in any pieces), after which it hangs up. The
// client runs its handshake, asks the run state and stops the board, as
// `ulnic node` does. Invariant: every call ends without waiting for the
// timeout (the hang-up ends the conversation: no call may wait for more).
#include <chrono>
#include <cstdint>

#include "board/qmp.h"
#include "fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz::converse(data, size, [](ulnic::UniqueFd fd, std::chrono::milliseconds timeout) {
    auto q = ulnic::board::Qmp::handshake(std::move(fd), timeout);
    if (!q) return;
    (void)q->run_state();
    (void)q->execute("stop");
    (void)q->execute("system_reset", "{}");
  });
  return 0;
}
