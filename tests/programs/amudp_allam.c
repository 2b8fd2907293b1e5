/* amudp_allam.c: every request form with every argument count (0..16), each
 * answered by the reply of the same form and count, around a ring of ranks,
 * polling or blocking in AM_WaitSema (tests/integration/test_am_compat.py;
 * issue 24: with T, a thread blocked in AM_WaitSema kept the bundle from
 * the thread that sends, and every rank was stuck). C99, only amudp.h /
 * amudp_spmd.h (and amudp_args.h).
 *
 *   amudp_allam [ITERS [P|B|T]]
 *
 * Each iteration every rank sends its partner (rank + 1) AM_Request0..16,
 * AM_RequestI0..16 and AM_RequestXfer0..16 twice (24-byte payloads into
 * slot N of the partner's small malloc'd segment), and waits for the 68
 * replies: AM_ReplyN, AM_ReplyIN, AM_ReplyXferN (into slot 17 + N of the
 * requester's segment), by AM_Poll (P) or by AM_SetEventMask + AM_WaitSema +
 * AM_Poll (B), or (T) by a second thread that loops AM_SetEventMask +
 * AM_WaitSema + AM_Poll on the endpoint, moved into an AM_PAR bundle, while
 * the main thread only sends and sleeps (a thread blocked in AM_WaitSema
 * must neither keep the other's requests out nor miss a message; a handler
 * running in one thread must not make the other's calls fail). Every argument, byte, address and return code is checked; a
 * wait longer than 30 s is a failure ("stuck"). Prints "allam ok rank R" and
 * ends the job with AMUDP_SPMDExit(0); a failure prints "FAIL rank R: ...".
 */
#define _POSIX_C_SOURCE 200809L
#include <amudp_spmd.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "amudp_args.h"

typedef struct {
  double d;
  uint64_t u;
  int idx;
} payload_t;

#define PD 2.25
#define PU ((uint64_t)0x0123456789ABCDEFull)
#define COUNTS 17 /* argument counts 0..16 */
#define ARG(i) ((int)(0x5A5A0000 + (i)))

#define H_SHORT_REQ 20
#define H_SHORT_REP 40
#define H_MEDIUM_REQ 60
#define H_MEDIUM_REP 80
#define H_LONG_REQ 100
#define H_LONG_REP 120
#define H_WAKE 200

static int my_rank = -1, nprocs = -1;
static eb_t eb;
static ep_t ep;
static payload_t *seg;
/* In mode T the handlers run on the waiting thread while main reads these:
 * C99 has no atomics, so they go through GCC's builtins (TSan found the
 * volatile counters raced). A handler error is counted after its text is
 * written, and read with acquire before the text is. */
#define LOAD(x) __atomic_load_n(&(x), __ATOMIC_ACQUIRE)
#define STORE(x, v) __atomic_store_n(&(x), (v), __ATOMIC_RELEASE)
#define BUMP(x) __atomic_add_fetch(&(x), 1, __ATOMIC_RELEASE)
static int replies;
static int errors, bad_reply_rc;
static char first_error[256];

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

static void handler_error(const char *fmt, ...) {
  va_list ap;
  if (LOAD(errors) == 0) {
    va_start(ap, fmt);
    vsnprintf(first_error, sizeof first_error, fmt, ap);
    va_end(ap);
  }
  BUMP(errors);
}

static void reply_rc(int rc, const char *form, int n) {
  if (rc != AM_OK && bad_reply_rc++ == 0) handler_error("%s%d returned %d", form, n, rc);
}

static int payload_ok(const void *buf, size_t nbytes, int idx) {
  const payload_t *p = (const payload_t *)buf;
  return nbytes == sizeof(payload_t) && p->d == PD && p->u == PU && p->idx == idx;
}

/* The handlers of argument count N: a request handler checks and answers
 * with the reply of its form; a reply handler checks and counts. */
#define HANDLERS(N)                                                                                     \
  static void short_req_##N(void *token AMUDP_T_DECL##N) {                                                     \
    if (AMUDP_T_BAD##N) handler_error("short request %d: arguments", N);                                       \
    reply_rc(AMUDP_T_INVOKE(AM_Reply##N, (token, H_SHORT_REP + N AMUDP_T_PASS##N)), "AM_Reply", N);                              \
  }                                                                                                     \
  static void short_rep_##N(void *token AMUDP_T_DECL##N) {                                                     \
    (void)token;                                                                                        \
    if (AMUDP_T_BAD##N) handler_error("short reply %d: arguments", N);                                         \
    BUMP(replies);                                                                                      \
  }                                                                                                     \
  static void medium_req_##N(void *token, void *buf, size_t nbytes AMUDP_T_DECL##N) {                          \
    payload_t *p = (payload_t *)buf;                                                                    \
    if (AMUDP_T_BAD##N || !payload_ok(buf, nbytes, N)) handler_error("medium request %d: arguments or bytes", N); \
    p->idx = -p->idx;                                                                                   \
    reply_rc(AMUDP_T_INVOKE(AM_ReplyI##N, (token, H_MEDIUM_REP + N, buf, (int)nbytes AMUDP_T_PASS##N)), "AM_ReplyI", N);         \
    memset(buf, 0xEE, nbytes); /* the reply has its own copy */                                         \
  }                                                                                                     \
  static void medium_rep_##N(void *token, void *buf, size_t nbytes AMUDP_T_DECL##N) {                          \
    (void)token;                                                                                        \
    if (AMUDP_T_BAD##N || !payload_ok(buf, nbytes, -N)) handler_error("medium reply %d: arguments or bytes", N); \
    BUMP(replies);                                                                                      \
  }                                                                                                     \
  static void long_req_##N(void *token, void *buf, size_t nbytes AMUDP_T_DECL##N) {                            \
    payload_t mine;                                                                                     \
    if (AMUDP_T_BAD##N || buf != seg + N || !payload_ok(buf, nbytes, N))                                        \
      handler_error("long request %d: arguments, address or bytes", N);                                 \
    mine = *(payload_t *)buf;                                                                           \
    mine.idx = -mine.idx;                                                                               \
    reply_rc(AMUDP_T_INVOKE(AM_ReplyXfer##N, (token, (COUNTS + N) * sizeof(payload_t), H_LONG_REP + N, &mine,   \
                                      (int)sizeof mine AMUDP_T_PASS##N)),                                        \
             "AM_ReplyXfer", N);                                                                        \
    memset(&mine, 0xEE, sizeof mine);                                                                   \
  }                                                                                                     \
  static void long_rep_##N(void *token, void *buf, size_t nbytes AMUDP_T_DECL##N) {                            \
    (void)token;                                                                                        \
    if (AMUDP_T_BAD##N || buf != seg + COUNTS + N || !payload_ok(buf, nbytes, -N))                              \
      handler_error("long reply %d: arguments, address or bytes", N);                                   \
    BUMP(replies);                                                                                      \
  }                                                                                                     \
  static void set_handlers_##N(void) {                                                                  \
    if (AM_SetHandler(ep, H_SHORT_REQ + N, short_req_##N) != AM_OK ||                                  \
        AM_SetHandler(ep, H_SHORT_REP + N, short_rep_##N) != AM_OK ||                                  \
        AM_SetHandler(ep, H_MEDIUM_REQ + N, medium_req_##N) != AM_OK ||                                \
        AM_SetHandler(ep, H_MEDIUM_REP + N, medium_rep_##N) != AM_OK ||                                \
        AM_SetHandler(ep, H_LONG_REQ + N, long_req_##N) != AM_OK ||                                    \
        AM_SetHandler(ep, H_LONG_REP + N, long_rep_##N) != AM_OK)                                      \
      fail("AM_SetHandler %d", N);                                                                      \
  }                                                                                                     \
  static void send_##N(int to) {                                                                        \
    static payload_t medium, lng, async;                                                                \
    payload_t p;                                                                                        \
    p.d = PD, p.u = PU, p.idx = N;                                                                      \
    if (AMUDP_T_INVOKE(AM_Request##N, (ep, to, H_SHORT_REQ + N AMUDP_T_VAL##N)) != AM_OK) fail("AM_Request%d", N);               \
    medium = p;                                                                                         \
    if (AMUDP_T_INVOKE(AM_RequestI##N, (ep, to, H_MEDIUM_REQ + N, &medium, (int)sizeof medium AMUDP_T_VAL##N)) != AM_OK)         \
      fail("AM_RequestI%d", N);                                                                         \
    memset(&medium, 0xEE, sizeof medium); /* sent: the buffer is ours again */                         \
    lng = p;                                                                                            \
    if (AMUDP_T_INVOKE(AM_RequestXfer##N, (ep, to, N * sizeof(payload_t), H_LONG_REQ + N, &lng, (int)sizeof lng AMUDP_T_VAL##N)) != AM_OK) \
      fail("AM_RequestXfer%d", N);                                                                      \
    memset(&lng, 0xEE, sizeof lng);                                                                     \
    async = p;                                                                                          \
    if (AMUDP_T_INVOKE(AM_RequestXfer##N, (ep, to, N * sizeof(payload_t), H_LONG_REQ + N, &async, (int)sizeof async AMUDP_T_VAL##N)) != AM_OK) \
      fail("AM_RequestXfer%d (second)", N);                                                             \
  }

AMUDP_T_EACH_COUNT(HANDLERS)

static void (*const set_handlers[COUNTS])(void) = {
    set_handlers_0,  set_handlers_1,  set_handlers_2,  set_handlers_3,  set_handlers_4,  set_handlers_5,
    set_handlers_6,  set_handlers_7,  set_handlers_8,  set_handlers_9,  set_handlers_10, set_handlers_11,
    set_handlers_12, set_handlers_13, set_handlers_14, set_handlers_15, set_handlers_16};
static void (*const send_all[COUNTS])(int) = {send_0,  send_1,  send_2,  send_3,  send_4,  send_5,
                                               send_6,  send_7,  send_8,  send_9,  send_10, send_11,
                                               send_12, send_13, send_14, send_15, send_16};

static void on_returned(int status, op_t opcode, void *token) {
  (void)token;
  handler_error("a message came back: status %d opcode %d", status, opcode);
}

/* T: the thread that waits for messages and runs every handler, until
 * stop_waiter (then a request to itself wakes it). */
static int helper_rc = AM_OK, stop_waiter;
static void on_wake(void *token) { (void)token; }
static void *waiter(void *arg) {
  (void)arg;
  while (!LOAD(stop_waiter)) {
    int rc = AM_SetEventMask(eb, AM_NOTEMPTY);
    if (rc == AM_OK) rc = AM_WaitSema(eb);
    if (rc == AM_OK) rc = AM_Poll(eb);
    if (rc != AM_OK) {
      STORE(helper_rc, rc);
      return NULL;
    }
  }
  return NULL;
}

static void stuck(int sig) {
  char msg[96];
  int n = snprintf(msg, sizeof msg, "FAIL rank %d: stuck for 30 s (%d replies so far)\n", my_rank, LOAD(replies));
  (void)sig;
  if (n > 0) (void)!write(1, msg, (size_t)n);
  _exit(1);
}

int main(int argc, char **argv) {
  uint64_t tag;
  int iters = 1, blocking = 0, threaded = 0, i, n, partner;
  pthread_t helper;
  if (AMUDP_SPMDStartup(&argc, &argv, 0, 0, NULL, &tag, &eb, &ep) != AM_OK) fail("AMUDP_SPMDStartup");
  if (argc > 1) iters = atoi(argv[1]);
  if (iters < 1) iters = 1;
  if (argc > 2) blocking = argv[2][0] == 'B' || argv[2][0] == 'b';
  if (argc > 2) threaded = argv[2][0] == 'T' || argv[2][0] == 't';
  my_rank = AMUDP_SPMDMyProc();
  nprocs = AMUDP_SPMDNumProcs();
  partner = (my_rank + 1) % nprocs;
  seg = (payload_t *)calloc(2 * COUNTS, sizeof(payload_t)); /* small: it shares its pages with the heap */
  if (!seg || AM_SetSeg(ep, seg, 2 * COUNTS * sizeof(payload_t)) != AM_OK) fail("AM_SetSeg");
  if (AM_SetHandler(ep, 0, on_returned) != AM_OK || AM_SetHandler(ep, H_WAKE, on_wake) != AM_OK)
    fail("AM_SetHandler 0");
  for (n = 0; n < COUNTS; n++) set_handlers[n]();
  signal(SIGALRM, stuck);
  if (threaded) {
    eb_t par;
    if (AM_AllocateBundle(AM_PAR, &par) != AM_OK || AM_MoveEndpoint(ep, eb, par) != AM_OK) fail("AM_PAR bundle");
    eb = par;
    if (pthread_create(&helper, NULL, waiter, NULL) != 0) fail("pthread_create");
  }
  if (AMUDP_SPMDBarrier() != AM_OK) fail("barrier");
  for (i = 0; i < iters; i++) {
    alarm(30);
    for (n = 0; n < COUNTS; n++) send_all[n](partner);
    while (threaded && LOAD(replies) < 4 * COUNTS * (i + 1)) {
      struct timespec ms = {0, 1000000};
      nanosleep(&ms, NULL);
      if (LOAD(helper_rc) != AM_OK) fail("the waiting thread: AM_SetEventMask/AM_WaitSema/AM_Poll returned %d", LOAD(helper_rc));
      if (LOAD(errors)) fail("iteration %d: %d handler errors, first: %s", i, LOAD(errors), first_error);
    }
    while (LOAD(replies) < 4 * COUNTS * (i + 1)) {
      if (blocking) {
        if (AM_SetEventMask(eb, AM_NOTEMPTY) != AM_OK) fail("AM_SetEventMask");
        if (AM_WaitSema(eb) != AM_OK) fail("AM_WaitSema");
      }
      if (AM_Poll(eb) != AM_OK) fail("AM_Poll");
      if (LOAD(errors)) fail("iteration %d: %d handler errors, first: %s", i, LOAD(errors), first_error);
    }
    alarm(0);
  }
  if (AMUDP_SPMDBarrier() != AM_OK) fail("barrier after the iterations");
  if ((!threaded && AM_Poll(eb) != AM_OK) || LOAD(errors)) fail("%d handler errors, first: %s", LOAD(errors), first_error);
  if (LOAD(replies) != 4 * COUNTS * iters) fail("%d replies, expected %d", LOAD(replies), 4 * COUNTS * iters);
  if (threaded) { /* the waiter ends before the job does (AM_Terminate frees its bundle) */
    STORE(stop_waiter, 1);
    if (AM_Request0(ep, my_rank, H_WAKE) != AM_OK) fail("AM_Request0 to itself");
    if (pthread_join(helper, NULL) != 0 || helper_rc != AM_OK) fail("the waiting thread ended with %d", helper_rc);
  }
  printf("allam ok rank %d\n", my_rank);
  fflush(stdout);
  if (AMUDP_SPMDBarrier() != AM_OK) fail("last barrier");
  AMUDP_SPMDExit(0);
  return 0;
}
