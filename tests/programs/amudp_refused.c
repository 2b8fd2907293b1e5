/* amudp_refused.c: replies the requester refuses, while the replier is
 * slow to poll (tests/integration/test_am_compat.py; issue 24: over VIPL a
 * VI must have room for what a peer may send before we poll -- its
 * requests, its replies to ours and its refusals of our replies -- or a
 * reply fails for want of resources). C99, only amudp.h / amudp_spmd.h.
 *
 *   amudp_refused [ROUNDS]      (two ranks or more)
 *
 * The network depth is $AMUDP_REFUSED_DEPTH (default 16, VIPL's most),
 * passed to AMUDP_SPMDStartup.
 *
 * Every rank, each round, sends a full window of requests (the job's depth)
 * to its partner (rank + 1) and waits for their answers. A request handler
 * answers with AM_Reply1 to a handler the requester never set, so each
 * reply is refused there (EBADHANDLER) and comes back to the replier's
 * handler 0, while the requester's credit is free again at once. Between
 * two polls a rank sleeps 20 ms, so its peer's requests, replies and
 * refusals pile up at it. Every reply call must return AM_OK, every refusal
 * must come back as (EBADHANDLER, AM_REPLY_M), nothing else may come back.
 * Prints "refused ok rank R"; a failure "FAIL rank R: ...".
 */
#define _POSIX_C_SOURCE 200809L
#include <amudp_spmd.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define H_REQ 10
#define H_ANSWER 11 /* set by nobody */

static int my_rank = -1;
static eb_t eb;
static ep_t ep;
static long served, refusals, bad_returns, bad_replies, first_bad_reply = AM_OK;
static int bad_status, bad_opcode;

static void fail(const char *fmt, ...) {
  va_list ap;
  printf("FAIL rank %d: ", my_rank);
  va_start(ap, fmt);
  vprintf(fmt, ap);
  va_end(ap);
  printf("\n");
  fflush(stdout);
  if (AMUDP_SPMDNumProcs() > 0) AMUDP_SPMDExit(1);
  exit(1);
}

static void on_req(void *token, int from, int seq) {
  int rc = AM_Reply1(token, H_ANSWER, seq);
  (void)from;
  served++;
  if (rc != AM_OK && bad_replies++ == 0) first_bad_reply = rc;
}

static void on_returned(int status, op_t opcode, void *token) {
  (void)token;
  if (status == EBADHANDLER && opcode == AM_REPLY_M) refusals++;
  else if (bad_returns++ == 0) bad_status = status, bad_opcode = opcode;
}

int main(int argc, char **argv) {
  uint64_t tag;
  int rounds = 20, depth = 16, round, i, partner, nprocs;
  long expected;
  struct timespec nap = {0, 20 * 1000 * 1000};
  time_t deadline;
  if (getenv("AMUDP_REFUSED_DEPTH")) depth = atoi(getenv("AMUDP_REFUSED_DEPTH"));
  if (AMUDP_SPMDStartup(&argc, &argv, 0, depth, NULL, &tag, &eb, &ep) != AM_OK) fail("AMUDP_SPMDStartup");
  if (argc > 1) rounds = atoi(argv[1]);
  my_rank = AMUDP_SPMDMyProc();
  nprocs = AMUDP_SPMDNumProcs();
  partner = (my_rank + 1) % nprocs;
  if (AM_SetHandler(ep, 0, on_returned) != AM_OK || AM_SetHandler(ep, H_REQ, on_req) != AM_OK)
    fail("AM_SetHandler");
  if (AMUDP_SPMDBarrier() != AM_OK) fail("barrier");
  deadline = time(NULL) + 60;
  for (round = 0; round < rounds; round++) {
    /* A full window: the credits come back when the refused replies arrive. */
    for (i = 0; i < depth; i++)
      if (AM_Request2(ep, partner, H_REQ, my_rank, round * depth + i) != AM_OK) fail("AM_Request2");
    nanosleep(&nap, NULL); /* everything the partner sends meanwhile piles up here */
    if (AM_Poll(eb) != AM_OK) fail("AM_Poll");
    if (bad_replies) fail("%ld reply calls failed, the first with %ld", bad_replies, first_bad_reply);
    if (bad_returns)
      fail("%ld messages came back other than refused replies, the first with status %d opcode %d", bad_returns,
           bad_status, bad_opcode);
    if (time(NULL) > deadline) fail("not done after 60 s (round %d)", round);
  }
  /* Past this barrier every rank has sent all its requests. */
  if (AMUDP_SPMDBarrier() != AM_OK) fail("barrier after the rounds");
  expected = (long)rounds * depth;
  while (served < expected || refusals < expected) {
    if (AM_Poll(eb) != AM_OK) fail("AM_Poll");
    if (time(NULL) > deadline) fail("%ld served, %ld refusals back, of %ld", served, refusals, expected);
  }
  if (bad_replies || bad_returns) fail("%ld failed replies, %ld other returns", bad_replies, bad_returns);
  printf("refused ok rank %d\n", my_rank);
  fflush(stdout);
  if (AMUDP_SPMDBarrier() != AM_OK) fail("last barrier");
  AMUDP_SPMDExit(0);
  return 0;
}
