/* am_spmd_check.c: an AMUDP SPMD job that checks itself
 * (tests/integration/test_am_spmd.py). C99, only amudp.h / amudp_spmd.h.
 *
 * Every worker: AMUDP_SPMDStartup, MyProc/NumProcs, the job tag, a variable
 * of the launcher's environment (AMUDP_SPMDgetenvMaster), all-gathers (the
 * ranks, the tags, 1000-byte patterns), 100 barriers, then one AM_Request1
 * to every rank (itself included), counting the replies. Prints
 * "ok rank R of N" and ends the job with AMUDP_SPMDExit(0).
 *
 *   --expect-env VALUE      getenvMaster("AM_SPMD_CHECK_VAR") must be VALUE
 *   --exit-rank R --exit-code C
 *                           after the first barrier rank R calls
 *                           AMUDP_SPMDExit(C); the others wait in barriers
 *   --die-rank R [--die-signal S]
 *                           after the first barrier rank R raises S (SIGKILL)
 *   --die-late-rank R       after the first barrier rank R dies as a killed
 *                           process does, slowly: its connection to the
 *                           master closes first (shutdown), then it tells
 *                           rank 0 so (AM_Request1), polls 300 ms and
 *                           raises SIGKILL; rank 0, told, fails with
 *                           AMUDP_SPMDExit(1), as a survivor whose
 *                           messages came back would
 *   --nostart-rank R        rank R (from $ULNIC_AM_RANK) never calls
 *                           AMUDP_SPMDStartup: it prints its pid and sleeps
 * Every worker prints "pid P rank R" first; the exit callback prints
 * "exit callback rank R code C". Failures print "FAIL rank R: ...".
 */
#define _POSIX_C_SOURCE 200809L
#include <amudp_spmd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define H_REQUEST 1
#define H_REPLY 2
#define H_GOING 3
#define PATTERN 1000

static int my_rank = -1, nprocs = -1;
static int requests_in, replies_in, bad_handler_args;
static int seen_reply[AMUDP_MAX_SPMDPROCS];

static void fail(const char *what) {
  printf("FAIL rank %d: %s\n", my_rank, what);
  fflush(stdout);
  if (AMUDP_SPMDNumProcs() > 0) AMUDP_SPMDExit(1);
  exit(1);
}

static void on_request(void *token, int from) {
  int src = -1;
  if (AMUDP_GetSourceId(token, &src) != AM_OK || src != from) bad_handler_args++;
  requests_in++;
  if (AM_Reply2(token, H_REPLY, from, my_rank) != AM_OK) bad_handler_args++;
}

static void on_reply(void *token, int to, int from) {
  (void)token;
  if (to != my_rank || from < 0 || from >= nprocs) bad_handler_args++;
  else seen_reply[from]++;
  replies_in++;
}

static volatile int peer_going = -1;

static void on_going(void *token, int from) {
  (void)token;
  peer_going = from;
}

static void on_exit_callback(int code) {
  printf("exit callback rank %d code %d\n", my_rank, code);
  fflush(stdout);
}

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static void check_gathers(ep_t ep, uint64_t tag) {
  int ranks[AMUDP_MAX_SPMDPROCS];
  uint64_t tags[AMUDP_MAX_SPMDPROCS];
  static unsigned char mine[PATTERN], all[PATTERN * AMUDP_MAX_SPMDPROCS];
  tag_t ep_tag = 0;
  int r, i;
  if (AM_GetTag(ep, &ep_tag) != AM_OK || ep_tag != tag) fail("the endpoint's tag is not the networkpid");
  if (AMUDP_SPMDAllGather(&my_rank, ranks, sizeof my_rank) != AM_OK) fail("AllGather of the ranks");
  for (r = 0; r < nprocs; r++)
    if (ranks[r] != r) fail("AllGather put a rank out of place");
  if (AMUDP_SPMDAllGather(&tag, tags, sizeof tag) != AM_OK) fail("AllGather of the tags");
  for (r = 0; r < nprocs; r++)
    if (tags[r] != tag) fail("the workers have different tags");
  for (i = 0; i < PATTERN; i++) mine[i] = (unsigned char)(my_rank * 31 + i);
  if (AMUDP_SPMDAllGather(mine, all, PATTERN) != AM_OK) fail("AllGather of the patterns");
  for (r = 0; r < nprocs; r++)
    for (i = 0; i < PATTERN; i++)
      if (all[r * PATTERN + i] != (unsigned char)(r * 31 + i)) fail("AllGather pattern corrupted");
}

/* One request to every rank, itself included; every one answers once. */
static void check_requests(eb_t eb, ep_t ep) {
  double deadline = now() + 30;
  int r;
  for (r = 0; r < nprocs; r++)
    if (AM_Request1(ep, r, H_REQUEST, my_rank) != AM_OK) fail("AM_Request1");
  while (replies_in < nprocs) {
    if (AM_Poll(eb) != AM_OK) fail("AM_Poll");
    if (now() > deadline) fail("replies missing after 30 s");
  }
  /* Past this barrier every rank has its replies: every request was served. */
  if (AMUDP_SPMDBarrier() != AM_OK) fail("barrier after the requests");
  if (requests_in != nprocs) fail("a rank did not get one request from every rank");
  for (r = 0; r < nprocs; r++)
    if (seen_reply[r] != 1) fail("a rank did not reply exactly once");
  if (bad_handler_args) fail("a handler got bad arguments");
}

/* The connection to the master: the process's only stream socket (AM over
 * udp uses datagrams). */
static void shut_master_connection(void) {
  int fd, type, found = 0;
  socklen_t len;
  for (fd = 3; fd < 1024; fd++) {
    len = sizeof type;
    if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) == 0 && type == SOCK_STREAM && shutdown(fd, SHUT_WR) == 0)
      found++;
  }
  if (found != 1) fail("not exactly one stream socket to the master");
}

/* --die-late-rank: see the header. */
static void die_late(eb_t eb, ep_t ep, int rank) {
  double until;
  if (my_rank == rank) {
    shut_master_connection();
    if (AM_Request1(ep, 0, H_GOING, my_rank) != AM_OK) fail("AM_Request1 going");
    for (until = now() + 0.3; now() < until;) AM_Poll(eb);
    raise(SIGKILL);
  }
  if (my_rank == 0) {
    while (peer_going < 0)
      if (AM_Poll(eb) != AM_OK) fail("AM_Poll waiting for the going rank");
    printf("rank 0: rank %d is going\n", peer_going);
    fflush(stdout);
    AMUDP_SPMDExit(1);
  }
  for (;;) AM_Poll(eb); /* until the job ends under us */
}

int main(int argc, char **argv) {
  const char *expect_env = NULL, *env_rank = getenv("ULNIC_AM_RANK");
  int exit_rank = -1, exit_code = 0, die_rank = -1, die_signal = SIGKILL, die_late_rank = -1, nostart_rank = -1, i;
  eb_t eb;
  ep_t ep;
  uint64_t tag = 0;
  for (i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "--expect-env")) expect_env = argv[i + 1];
    else if (!strcmp(argv[i], "--exit-rank")) exit_rank = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--exit-code")) exit_code = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--die-rank")) die_rank = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--die-signal")) die_signal = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--die-late-rank")) die_late_rank = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--nostart-rank")) nostart_rank = atoi(argv[i + 1]);
    else fail("unknown option");
  }
  if (nostart_rank >= 0 && env_rank && atoi(env_rank) == nostart_rank) {
    printf("pid %ld rank %d nostart\n", (long)getpid(), nostart_rank);
    fflush(stdout);
    for (;;) pause();
  }

  if (AMUDP_SPMDMyProc() != -1 || AMUDP_SPMDBarrier() != AM_ERR_NOT_INIT) fail("SPMD calls before Startup");
  if (AMUDP_SPMDStartup(&argc, &argv, 0, 0, NULL, &tag, &eb, &ep) != AM_OK) fail("AMUDP_SPMDStartup");
  my_rank = AMUDP_SPMDMyProc();
  nprocs = AMUDP_SPMDNumProcs();
  printf("pid %ld rank %d\n", (long)getpid(), my_rank);
  fflush(stdout);
  if (!AMUDP_SPMDIsWorker(argv)) fail("AMUDP_SPMDIsWorker");
  if (nprocs < 1 || my_rank < 0 || my_rank >= nprocs) fail("MyProc/NumProcs out of range");
  if (!env_rank || atoi(env_rank) != my_rank) fail("MyProc is not $ULNIC_AM_RANK");
  if (tag == AM_NONE || tag == AM_ALL) fail("networkpid is not a usable tag");
  if (expect_env) {
    const char *v = AMUDP_SPMDgetenvMaster("AM_SPMD_CHECK_VAR");
    if (!v || strcmp(v, expect_env) != 0) fail("getenvMaster(AM_SPMD_CHECK_VAR) is not the launcher's value");
  }
  if (AMUDP_SPMDgetenvMaster("AM_SPMD_CHECK_NO_SUCH_VARIABLE") != NULL) fail("getenvMaster of an unset variable");
  AMUDP_SPMDSetExitCallback(on_exit_callback);
  if (AM_SetHandler(ep, H_REQUEST, on_request) != AM_OK || AM_SetHandler(ep, H_REPLY, on_reply) != AM_OK ||
      AM_SetHandler(ep, H_GOING, on_going) != AM_OK)
    fail("AM_SetHandler");
  /* Every handler is set everywhere before anyone sends. */
  if (AMUDP_SPMDBarrier() != AM_OK) fail("first barrier");

  if (die_late_rank > 0) die_late(eb, ep, die_late_rank);
  if (my_rank == die_rank) raise(die_signal);
  if (my_rank == exit_rank) AMUDP_SPMDExit(exit_code);
  if (die_rank >= 0 || exit_rank >= 0)
    for (;;) AMUDP_SPMDBarrier(); /* until the job ends under us */

  check_gathers(ep, tag);
  for (i = 0; i < 100; i++)
    if (AMUDP_SPMDBarrier() != AM_OK) fail("barrier loop");
  check_requests(eb, ep);
  printf("ok rank %d of %d\n", my_rank, nprocs);
  fflush(stdout);
  /* Nobody ends the job before everyone has said ok. */
  if (AMUDP_SPMDBarrier() != AM_OK) fail("last barrier");
  AMUDP_SPMDExit(0);
  return 0;
}
