/* fm_tight.c: an FM 2.x job of two ranks that waits the way FM programs do:
 * `while (received == before) FM_extract(...)`, no sleeps, no yields
 * (tests/integration/test_tight_poll.py runs it with `ulnic fmrun -n 2`).
 *
 *   fm_tight [--messages N] [--timeout S]
 *
 * N (1000) small messages each way, as a ping-pong: rank 0 sends message i
 * (8 .. 512 bytes of payload behind an 8-byte header {i, length}: FM_begin_message,
 * two FM_send_piece, FM_end_message) and spins on FM_extract until its
 * handler saw rank 1's message i; rank 1 spins until it saw rank 0's
 * message i, then sends its own. The handler reads the header and the
 * payload with FM_receive and checks the number, the length and every byte
 * (message i of sender s: prog_common.h's message i | s << 31). Each rank
 * prints one line:
 *   fm_tight rank R: N messages each way, B bytes verified, X us per round trip
 * and both end with FM_finalize. A mismatch prints "FAIL ..." (exit 1); the
 * watchdog (S = 90 s) ends a hung rank with 3. */
#define _POSIX_C_SOURCE 200809L
#include <fm.h>

#include "prog_common.h"

#define PAYLOAD_MIN 8u
#define PAYLOAD_MAX 512u

static int messages;
static volatile int received; /* messages the handler took in */
static unsigned long bytes_verified;

static uint32_t payload_size(int i) { return prog_size((uint32_t)i, (uint32_t)messages, PAYLOAD_MIN, PAYLOAD_MAX); }
static uint32_t seq_of(int i, unsigned sender) { return (uint32_t)i | (uint32_t)sender << 31; }

static int on_message(FM_stream *stream, unsigned sender) {
  uint32_t header[2];
  unsigned char payload[PAYLOAD_MAX];
  long bad;
  if (FM_receive(header, stream, sizeof header) != sizeof header) {
    prog_handler_error("message %d: no header", received);
  } else if ((int)header[0] != received || header[1] != payload_size(received) || sender != 1 - FM_nodeid) {
    prog_handler_error("message %d: header {%u, %u} from %u, expected {%d, %u} from %lu", received, header[0], header[1],
                  sender, received, payload_size(received), 1 - FM_nodeid);
  } else if (FM_receive(payload, stream, header[1]) != header[1]) {
    prog_handler_error("message %d: short payload", received);
  } else if ((bad = prog_mismatch(payload, header[1], seq_of(received, sender))) >= 0) {
    prog_handler_error("message %d: byte %ld of %u wrong", received, bad, header[1]);
  } else {
    bytes_verified += sizeof header + header[1];
  }
  received++;
  return FM_CONTINUE;
}

static FM_ULONG handler_id;

static void send_message(int i) {
  unsigned char payload[PAYLOAD_MAX];
  uint32_t header[2];
  FM_stream *s;
  header[0] = (uint32_t)i;
  header[1] = payload_size(i);
  prog_fill(payload, header[1], seq_of(i, (unsigned)FM_nodeid));
  s = FM_begin_message(1 - FM_nodeid, sizeof header + header[1], handler_id);
  if (!s) prog_fail("FM_begin_message %d", i);
  if (FM_send_piece(s, header, sizeof header) != 0 || FM_send_piece(s, payload, header[1]) != 0)
    prog_fail("FM_send_piece %d", i);
  if (FM_end_message(s) != 0) prog_fail("FM_end_message %d", i);
}

/* Spins until the handler took in message i. */
static void wait_message(int i) {
  while (received <= i) FM_extract(~(FM_ULONG)0);
  prog_check_handlers("receiving");
}

int main(int argc, char **argv) {
  double t0;
  int i;
  prog_watchdog("fm_tight", (unsigned)prog_arg(argc, argv, "--timeout", 90));
  messages = prog_arg(argc, argv, "--messages", 1000);
  if (FM_initialize() != 0) prog_fail("FM_initialize");
  prog_name = FM_nodeid == 0 ? "fm_tight rank 0" : "fm_tight rank 1";
  if (FM_numnodes != 2) prog_fail("needs 2 ranks, has %lu", FM_numnodes);
  handler_id = FM_register_handler(1, on_message);
  if (handler_id != 1) prog_fail("FM_register_handler");
  t0 = prog_now();
  for (i = 0; i < messages; i++) {
    if (FM_nodeid == 0) {
      send_message(i);
      wait_message(i);
    } else {
      wait_message(i);
      send_message(i);
    }
  }
  printf("fm_tight rank %lu: %d messages each way, %lu bytes verified, %.1f us per round trip\n", FM_nodeid, messages,
         bytes_verified, (prog_now() - t0) * 1e6 / (messages > 0 ? messages : 1));
  fflush(stdout);
  if (FM_finalize() != 0) prog_fail("FM_finalize");
  return 0;
}
