/* am_tight.c: a two-rank AM-2 job written the way AMUDP programs are: every
 * wait is a loop on AM_Poll, no sleeps, no yields
 * (tests/integration/test_tight_poll.py runs it natively and over VIPL).
 *
 *   ulnic run -n 2 --transport native|vipl am_tight [--requests N] [--xfers M] [--timeout S]
 *                                                   [--hold PATH]
 *
 * Rank 0 sends N (2000) AM_Request4, one at a time, and spins
 * `while (!done) AM_Poll(eb);` for each reply. Request i carries
 * request_args(i); rank 1's handler checks them (and that request i is the
 * i-th it sees) and answers AM_Reply4 with reply_args(i), which rank 0's
 * reply handler checks. Then M (8) AM_RequestXfer2 of 64 KiB .. 1 MiB into
 * rank 1's segment at odd offsets: rank 1's handler checks where the bytes
 * are and every byte, and answers with how many it verified; rank 0 spins
 * for each answer. Rank 1 spins `while (seen < N + M) AM_Poll(eb);`.
 * Each rank prints one line:
 *   am_tight rank 0 on T: N round trips, M xfers acked (B bytes), X us per round trip
 *   am_tight rank 1 on T: N requests and M xfers verified (B bytes)
 * and the job ends with AMUDP_SPMDExit(0). A mismatch, or a message that
 * comes back undeliverable, ends the wait at once, prints "FAIL ..." and
 * ends the job with 1; the watchdog (S = 90 s) ends a hung rank with 3 and
 * says what it waited for.
 *
 * --hold PATH: after the first barrier (every endpoint up; over VIPL no
 * connection made yet: the first request makes it) rank 0 creates
 * PATH.ready and sends nothing until PATH exists, so a test can stop a
 * party just before the connection (tests/integration/test_faults.py). */
#define _POSIX_C_SOURCE 200809L
#include <amudp_spmd.h>
#include <limits.h>

#include "prog_common.h"

#define H_REQ 1
#define H_REP 2
#define H_XFER 3
#define H_XFER_ACK 4

#define KiB 1024u
#define XFER_MIN (64u * KiB)
#define XFER_MAX ((uint32_t)AM_MaxLong())
#define XFER_SLACK (64u * KiB) /* offsets of the xfers: below this */

static eb_t eb;
static ep_t ep;
static unsigned char *seg;
static size_t seg_len;

/* rank 0 */
static volatile int done;
static int reply_index = -1;
static int xfer_acked_bytes;
/* rank 1 */
static volatile int seen;
static int requests_seen, xfers_seen;
static unsigned long bytes_verified;

static void am_exit(int code) {
  if (AMUDP_SPMDNumProcs() > 0) AMUDP_SPMDExit(code);
}

static void check_poll(int rc) {
  if (rc != AM_OK) prog_fail("AM_Poll returned %d", rc);
}

static void request_args(int i, int32_t a[4]) {
  a[0] = i;
  a[1] = (int32_t)prog_mix((uint32_t)i);
  a[2] = -7 * i - 1;
  a[3] = i % 2 ? INT32_MIN + i : INT32_MAX - i;
}

static void reply_args(int i, int32_t b[4]) {
  int32_t a[4];
  request_args(i, a);
  b[0] = i;
  b[1] = ~a[1];
  b[2] = (int32_t)((uint32_t)a[2] * 3u + 1u);
  b[3] = a[3] ^ 0x5a5a5a5a;
}

static int same_args(const int32_t want[4], int a0, int a1, int a2, int a3) {
  return want[0] == a0 && want[1] == a1 && want[2] == a2 && want[3] == a3;
}

static uint32_t xfer_size(int j, int m) { return prog_size((uint32_t)j, (uint32_t)m, XFER_MIN, XFER_MAX); }
static uint32_t xfer_offset(int j) { return (uint32_t)(j * 4099) % XFER_SLACK; }
static uint32_t xfer_seq(int j) { return 0x10000u + (uint32_t)j; }

/* ---- rank 1: the requests and the xfers */

static void on_request(void *token, int a0, int a1, int a2, int a3) {
  int32_t want[4], b[4];
  request_args(requests_seen, want);
  if (!same_args(want, a0, a1, a2, a3))
    prog_handler_error("request %d: arguments %d %d %d %d, expected %d %d %d %d", requests_seen, a0, a1, a2, a3, want[0],
                  want[1], want[2], want[3]);
  reply_args(a0, b);
  if (AM_Reply4(token, H_REP, b[0], b[1], b[2], b[3]) != AM_OK) prog_handler_error("AM_Reply4 to request %d", a0);
  requests_seen++;
  seen++;
}

static void on_xfer(void *token, void *buf, size_t nbytes, int j, int m) {
  long bad = -2;
  if (j != xfers_seen || m <= 0)
    prog_handler_error("xfer %d (of %d) arrived as the %d-th", j, m, xfers_seen);
  else if ((unsigned char *)buf != seg + xfer_offset(j) || nbytes != xfer_size(j, m))
    prog_handler_error("xfer %d: %lu bytes at offset %ld, expected %u at %u", j, (unsigned long)nbytes,
                  (long)((unsigned char *)buf - seg), xfer_size(j, m), xfer_offset(j));
  else if ((bad = prog_mismatch(buf, nbytes, xfer_seq(j))) >= 0)
    prog_handler_error("xfer %d: byte %ld of %lu wrong", j, bad, (unsigned long)nbytes);
  else
    bytes_verified += nbytes;
  if (AM_Reply2(token, H_XFER_ACK, j, bad == -1 ? (int)nbytes : -1) != AM_OK) prog_handler_error("AM_Reply2 to xfer %d", j);
  xfers_seen++;
  seen++;
}

/* ---- rank 0: the answers */

static void on_reply(void *token, int a0, int a1, int a2, int a3) {
  int32_t want[4];
  (void)token;
  reply_args(reply_index, want);
  if (!same_args(want, a0, a1, a2, a3))
    prog_handler_error("reply %d: arguments %d %d %d %d, expected %d %d %d %d", reply_index, a0, a1, a2, a3, want[0],
                  want[1], want[2], want[3]);
  done = 1;
}

static void on_xfer_ack(void *token, int j, int verified) {
  (void)token;
  if (j != reply_index || verified < 0) prog_handler_error("xfer %d: the receiver verified %d bytes", j, verified);
  else xfer_acked_bytes += verified;
  done = 1;
}

/* Handler 0: nothing may come back. */
static void on_returned(int status, op_t opcode, void *token) {
  (void)token;
  prog_handler_error("a message came back: status %d opcode %d", status, opcode);
}

static void sender(int n, int m) {
  unsigned char *src = malloc(XFER_MAX);
  double t0, rtt_us;
  int i, j;
  if (!src) prog_fail("no memory");
  t0 = prog_now();
  for (i = 0; i < n; i++) {
    int32_t a[4];
    request_args(i, a);
    reply_index = i;
    done = 0;
    prog_at("AM_Request4's reply: request, of", i, n);
    if (AM_Request4(ep, 1, H_REQ, a[0], a[1], a[2], a[3]) != AM_OK) prog_fail("AM_Request4 %d", i);
    while (!done && !prog_errors) check_poll(AM_Poll(eb));
    prog_check_handlers("requests");
  }
  rtt_us = (prog_now() - t0) * 1e6 / (n > 0 ? n : 1);
  for (j = 0; j < m; j++) {
    uint32_t size = xfer_size(j, m);
    prog_fill(src, size, xfer_seq(j));
    reply_index = j;
    done = 0;
    prog_at("AM_RequestXfer2's ack: xfer, bytes", j, (long)size);
    if (AM_RequestXfer2(ep, 1, xfer_offset(j), H_XFER, src, (int)size, j, m) != AM_OK)
      prog_fail("AM_RequestXfer2 %d (%u bytes)", j, size);
    while (!done && !prog_errors) check_poll(AM_Poll(eb));
    prog_check_handlers("xfers");
  }
  printf("am_tight rank 0 on %s: %d round trips, %d xfers acked (%d bytes), %.1f us per round trip\n",
         AMX_TransportName(), n, m, xfer_acked_bytes, rtt_us);
  free(src);
}

/* --hold: PATH.ready made, then no further until PATH exists. */
static void hold_until(const char *path) {
  char ready[PATH_MAX];
  FILE *f;
  const struct timespec nap = {0, 10 * 1000 * 1000};
  if (snprintf(ready, sizeof ready, "%s.ready", path) >= (int)sizeof ready) prog_fail("--hold: path too long");
  if (!(f = fopen(ready, "w")) || fclose(f) != 0) prog_fail("--hold: cannot create %s", ready);
  prog_at("--hold's file", 0, 0);
  while (access(path, F_OK) != 0) nanosleep(&nap, NULL);
}

static void receiver(int n, int m) {
  while (seen < n + m && !prog_errors) {
    prog_at("requests and xfers: seen, of", seen, n + m);
    check_poll(AM_Poll(eb));
  }
  prog_check_handlers("receiving");
  printf("am_tight rank 1 on %s: %d requests and %d xfers verified (%lu bytes)\n", AMX_TransportName(), requests_seen,
         xfers_seen, bytes_verified);
}

int main(int argc, char **argv) {
  uint64_t tag = 0;
  void *mem;
  int n, m, my_rank;
  const char *hold;
  prog_watchdog("am_tight", (unsigned)prog_arg(argc, argv, "--timeout", 90));
  if (AMUDP_SPMDStartup(&argc, &argv, 0, 0, NULL, &tag, &eb, &ep) != AM_OK) prog_fail("AMUDP_SPMDStartup");
  prog_exit = am_exit;
  my_rank = AMUDP_SPMDMyProc();
  prog_name = my_rank == 0 ? "am_tight rank 0" : "am_tight rank 1";
  if (AMUDP_SPMDNumProcs() != 2) prog_fail("needs 2 ranks, has %d", AMUDP_SPMDNumProcs());
  n = prog_arg(argc, argv, "--requests", 2000);
  m = prog_arg(argc, argv, "--xfers", 8);
  if (n < 0 || m < 0) prog_fail("bad --requests or --xfers");
  hold = prog_arg_str(argc, argv, "--hold");

  /* The segment: page-aligned (the vipl transport registers it). */
  seg_len = XFER_SLACK + XFER_MAX;
  if (posix_memalign(&mem, (size_t)sysconf(_SC_PAGESIZE), seg_len) != 0) prog_fail("no memory for the segment");
  seg = mem;
  memset(seg, 0, seg_len);
  if (AM_SetSeg(ep, seg, seg_len) != AM_OK) prog_fail("AM_SetSeg");
  if (AM_SetHandler(ep, 0, on_returned) != AM_OK || AM_SetHandler(ep, H_REQ, on_request) != AM_OK ||
      AM_SetHandler(ep, H_REP, on_reply) != AM_OK || AM_SetHandler(ep, H_XFER, on_xfer) != AM_OK ||
      AM_SetHandler(ep, H_XFER_ACK, on_xfer_ack) != AM_OK)
    prog_fail("AM_SetHandler");
  prog_at("the first barrier", 0, 0);
  if (AMUDP_SPMDBarrier() != AM_OK) prog_fail("barrier"); /* the handlers are set everywhere */

  if (my_rank == 0 && hold) hold_until(hold);
  if (my_rank == 0) sender(n, m);
  else receiver(n, m);
  fflush(stdout);
  prog_at("the last barrier", 0, 0);
  if (AMUDP_SPMDBarrier() != AM_OK) prog_fail("last barrier");
  AMUDP_SPMDExit(0);
  return 0;
}
