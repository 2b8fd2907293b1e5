/* amudp_forms.c: every AM-2 request form answered by every reply form,
 * between every pair of ranks of an SPMD job (itself included), every byte
 * and every return code checked (tests/integration/test_am_compat.py; issue
 * 24: replies never fail, mediums of AM_MaxMedium() bytes both ways on
 * every transport). C99, only amudp.h / amudp_spmd.h.
 *
 *   amudp_forms [--rounds R] [--timeout S]
 *
 * Requests: AM_Request0, AM_Request4, AM_Request16, AM_RequestI4 (sizes 0 ..
 * AM_MaxMedium()), AM_RequestXfer4 and AM_RequestXferAsync4 (into a slot of
 * the receiver's segment reserved for the sender). Each is answered by one
 * of: no reply, AM_Reply0, AM_Reply4, AM_Reply16, AM_ReplyI4 (0 ..
 * AM_MaxMedium() bytes), AM_ReplyXfer4 (into a slot of the requester's
 * segment). A reply call that does not return AM_OK is an error: replies
 * never fail for want of resources. Prints "forms ok rank R" and ends the
 * job with AMUDP_SPMDExit(0); a failure prints "FAIL rank R: ..." and exits 1.
 */
#define _POSIX_C_SOURCE 200809L
#include <amudp_spmd.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { H_REQ0 = 1, H_REQ4, H_REQ16, H_REQ_MEDIUM, H_REQ_LONG, H_REP0, H_REP4, H_REP16, H_REP_MEDIUM, H_REP_LONG };
enum { F_SHORT0, F_SHORT4, F_SHORT16, F_MEDIUM, F_LONG, F_LONG_ASYNC, NFORMS };
enum { R_NONE, R_SHORT0, R_SHORT4, R_SHORT16, R_MEDIUM, R_LONG, NREPLIES };

#define SLOTS 16              /* > the network depth: a slot is not reused while its message is in flight */
#define LONG_SLOT (32u * 1024) /* a Long request or reply lands in one slot */
#define MAXPROCS 8

static int my_rank = -1, nprocs = -1;
static eb_t eb;
static ep_t ep;
static unsigned char *seg;
static size_t seg_len;
static double timeout_s = 120;
static int errors;
static char first_error[300];
static long requests_in, replies_in, replies_expected, reply_failures;
static int reply_failure_code;

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
  if (errors++ == 0) {
    va_start(ap, fmt);
    vsnprintf(first_error, sizeof first_error, fmt, ap);
    va_end(ap);
  }
}

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static uint32_t mix(uint32_t x) {
  x ^= x >> 16;
  x *= 0x7feb352du;
  x ^= x >> 15;
  x *= 0x846ca68bu;
  x ^= x >> 16;
  return x;
}

/* Byte k of the payload `from` sends `to` in its message number seq (dir 0:
 * request, 1: reply). */
static unsigned char pattern(int from, int to, int seq, int dir, uint32_t k) {
  uint32_t s = mix((uint32_t)from * 0x9E3779B1u ^ (uint32_t)to * 0x85EBCA77u ^ (uint32_t)seq * 0xC2B2AE3Du ^
                   (uint32_t)dir * 0x27D4EB2Fu);
  return (unsigned char)(mix(s ^ (k >> 2)) >> (8 * (k & 3)));
}

static void fill(unsigned char *p, uint32_t n, int from, int to, int seq, int dir) {
  uint32_t k;
  for (k = 0; k < n; k++) p[k] = pattern(from, to, seq, dir, k);
}

static int matches(const unsigned char *p, uint32_t n, int from, int to, int seq, int dir) {
  uint32_t k;
  for (k = 0; k < n; k++)
    if (p[k] != pattern(from, to, seq, dir, k)) return 0;
  return 1;
}

/* Sizes by sequence number: mediums up to AM_MaxMedium(), Longs up to a slot. */
static uint32_t medium_size(int seq) {
  uint32_t max = AM_MaxMedium(), choice[6];
  choice[0] = 0;
  choice[1] = 1;
  choice[2] = 4095 < max ? 4095 : max;
  choice[3] = 4097 < max ? 4097 : max;
  choice[4] = max / 2 + 3;
  choice[5] = max;
  return choice[(unsigned)seq % 6];
}
static uint32_t long_size(int seq) {
  static const uint32_t choice[4] = {1, 4097, 20000, LONG_SLOT};
  return choice[(unsigned)seq % 4];
}

/* Where a Long from `from` with sequence seq lands: requests in the first
 * half of the segment, replies in the second. */
static size_t long_offset(int from, int seq, int reply) {
  return ((size_t)reply * MAXPROCS * SLOTS + (size_t)from * SLOTS + (size_t)((unsigned)seq % SLOTS)) * LONG_SLOT;
}

/* ---- answering: args are from, seq, reply kind, reply size */

static void counted_reply(int rc) {
  if (rc != AM_OK) {
    if (reply_failures++ == 0) reply_failure_code = rc;
  }
}

static void answer(void *token, int from, int seq, int kind) {
  static unsigned char buf[65536 * 16];
  uint32_t n;
  switch (kind) {
    case R_NONE: return;
    case R_SHORT0: counted_reply(AM_Reply0(token, H_REP0)); return;
    case R_SHORT4: counted_reply(AM_Reply4(token, H_REP4, my_rank, seq, kind, 0)); return;
    case R_SHORT16:
      counted_reply(AM_Reply16(token, H_REP16, my_rank, seq, kind, 0, seq + 4, seq + 5, seq + 6, seq + 7, seq + 8,
                               seq + 9, seq + 10, seq + 11, seq + 12, seq + 13, seq + 14, -seq));
      return;
    case R_MEDIUM:
      n = medium_size(seq + 1);
      if (n > sizeof buf) n = sizeof buf;
      fill(buf, n, my_rank, from, seq, 1);
      counted_reply(AM_ReplyI4(token, H_REP_MEDIUM, buf, (int)n, my_rank, seq, kind, (int)n));
      return;
    case R_LONG:
      n = long_size(seq + 1);
      fill(buf, n, my_rank, from, seq, 1);
      counted_reply(AM_ReplyXfer4(token, long_offset(my_rank, seq, 1), H_REP_LONG, buf, (int)n, my_rank, seq, kind,
                                  (int)n));
      return;
    default: handler_error("reply kind %d", kind);
  }
}

static int check_source(void *token, int from) {
  int src = -1;
  if (from < 0 || from >= nprocs || AMUDP_GetSourceId(token, &src) != AM_OK || src != from) {
    handler_error("request from %d names source %d", from, src);
    return 0;
  }
  return 1;
}

static void on_req0(void *token) {
  int src = -1;
  requests_in++;
  if (AMUDP_GetSourceId(token, &src) != AM_OK) handler_error("AM_Request0: no source id");
  counted_reply(AM_Reply0(token, H_REP0));
}

static void on_req4(void *token, int from, int seq, int kind, int size) {
  (void)size;
  requests_in++;
  if (check_source(token, from)) answer(token, from, seq, kind);
}

static void on_req16(void *token, int from, int seq, int kind, int size, int a4, int a5, int a6, int a7, int a8,
                     int a9, int a10, int a11, int a12, int a13, int a14, int a15) {
  int i, a[12];
  a[0] = a4, a[1] = a5, a[2] = a6, a[3] = a7, a[4] = a8, a[5] = a9, a[6] = a10, a[7] = a11, a[8] = a12, a[9] = a13,
  a[10] = a14, a[11] = a15;
  (void)size;
  requests_in++;
  for (i = 0; i < 11; i++)
    if (a[i] != seq * 3 + i) handler_error("AM_Request16 from %d: argument %d is %d", from, i + 4, a[i]);
  if (a[11] != -seq) handler_error("AM_Request16 from %d: last argument %d", from, a[11]);
  if (check_source(token, from)) answer(token, from, seq, kind);
}

static void on_req_medium(void *token, void *buf, size_t nbytes, int from, int seq, int kind, int size) {
  requests_in++;
  if (!check_source(token, from)) return;
  if (nbytes != (size_t)size || !matches(buf, (uint32_t)nbytes, from, my_rank, seq, 0))
    handler_error("medium request %d from %d: %lu bytes (%d sent) or a byte differs", seq, from,
                  (unsigned long)nbytes, size);
  answer(token, from, seq, kind);
}

static void on_req_long(void *token, void *buf, size_t nbytes, int from, int seq, int kind, int size) {
  requests_in++;
  if (!check_source(token, from)) return;
  if ((unsigned char *)buf != seg + long_offset(from, seq, 0) || nbytes != (size_t)size ||
      !matches(buf, (uint32_t)nbytes, from, my_rank, seq, 0))
    handler_error("long request %d from %d: at offset %ld, %lu bytes (%d sent) or a byte differs", seq, from,
                  (long)((unsigned char *)buf - seg), (unsigned long)nbytes, size);
  answer(token, from, seq, kind);
}

/* ---- replies */

static void on_rep0(void *token) {
  (void)token;
  replies_in++;
}

static void on_rep4(void *token, int from, int seq, int kind, int size) {
  (void)token;
  if (kind != R_SHORT4 || size != 0 || from < 0 || from >= nprocs) handler_error("AM_Reply4 from %d: %d %d", from, kind, size);
  (void)seq;
  replies_in++;
}

static void on_rep16(void *token, int from, int seq, int kind, int size, int a4, int a5, int a6, int a7, int a8,
                     int a9, int a10, int a11, int a12, int a13, int a14, int a15) {
  (void)token;
  if (kind != R_SHORT16 || size != 0 || a4 != seq + 4 || a5 != seq + 5 || a6 != seq + 6 || a7 != seq + 7 ||
      a8 != seq + 8 || a9 != seq + 9 || a10 != seq + 10 || a11 != seq + 11 || a12 != seq + 12 || a13 != seq + 13 ||
      a14 != seq + 14 || a15 != -seq)
    handler_error("AM_Reply16 from %d: arguments differ", from);
  replies_in++;
}

static void on_rep_medium(void *token, void *buf, size_t nbytes, int from, int seq, int kind, int size) {
  (void)token;
  if (kind != R_MEDIUM || nbytes != (size_t)size || from < 0 || from >= nprocs ||
      !matches(buf, (uint32_t)nbytes, from, my_rank, seq, 1))
    handler_error("medium reply %d from %d: %lu bytes (%d sent) or a byte differs", seq, from, (unsigned long)nbytes,
                  size);
  replies_in++;
}

static void on_rep_long(void *token, void *buf, size_t nbytes, int from, int seq, int kind, int size) {
  (void)token;
  if (kind != R_LONG || from < 0 || from >= nprocs || (unsigned char *)buf != seg + long_offset(from, seq, 1) ||
      nbytes != (size_t)size || !matches(buf, (uint32_t)nbytes, from, my_rank, seq, 1))
    handler_error("long reply %d from %d: at offset %ld, %lu bytes (%d sent) or a byte differs", seq, from,
                  (long)((unsigned char *)buf - seg), (unsigned long)nbytes, size);
  replies_in++;
}

static void on_returned(int status, op_t opcode, void *token) {
  (void)token;
  handler_error("a message came back: status %d opcode %d", status, opcode);
}

/* ---- sending */

static void poll_once(const char *where) {
  int rc = AM_Poll(eb);
  if (rc != AM_OK) fail("%s: AM_Poll returned %d", where, rc);
  if (errors) fail("%s: %d handler errors, first: %s", where, errors, first_error);
  if (reply_failures) fail("%s: %ld reply calls failed, the first with %d", where, reply_failures, reply_failure_code);
}

static void send_one(int to, int form, int seq, int kind) {
  static unsigned char buf[65536 * 16];
  uint32_t n;
  int rc;
  switch (form) {
    case F_SHORT0: rc = AM_Request0(ep, to, H_REQ0); break;
    case F_SHORT4: rc = AM_Request4(ep, to, H_REQ4, my_rank, seq, kind, 0); break;
    case F_SHORT16:
      rc = AM_Request16(ep, to, H_REQ16, my_rank, seq, kind, 0, seq * 3, seq * 3 + 1, seq * 3 + 2, seq * 3 + 3,
                        seq * 3 + 4, seq * 3 + 5, seq * 3 + 6, seq * 3 + 7, seq * 3 + 8, seq * 3 + 9, seq * 3 + 10,
                        -seq);
      break;
    case F_MEDIUM:
      n = medium_size(seq);
      if (n > sizeof buf) n = sizeof buf;
      fill(buf, n, my_rank, to, seq, 0);
      rc = AM_RequestI4(ep, to, H_REQ_MEDIUM, buf, (int)n, my_rank, seq, kind, (int)n);
      break;
    case F_LONG:
      n = long_size(seq);
      fill(buf, n, my_rank, to, seq, 0);
      rc = AM_RequestXfer4(ep, to, long_offset(my_rank, seq, 0), H_REQ_LONG, buf, (int)n, my_rank, seq, kind, (int)n);
      break;
    default: {
      double deadline = now() + timeout_s;
      n = long_size(seq);
      fill(buf, n, my_rank, to, seq, 0);
      while ((rc = AM_RequestXferAsync4(ep, to, long_offset(my_rank, seq, 0), H_REQ_LONG, buf, (int)n, my_rank, seq,
                                        kind, (int)n)) == AM_ERR_IN_USE) {
        poll_once("async request: waiting for a credit");
        if (now() > deadline) fail("AM_RequestXferAsync4 to %d: no credit after %.0f s", to, timeout_s);
      }
    }
  }
  if (rc != AM_OK) fail("request form %d to rank %d returned %d", form, to, rc);
  /* Request0 carries no arguments: its handler always answers with Reply0. */
  if (form == F_SHORT0 || kind != R_NONE) replies_expected++;
}

int main(int argc, char **argv) {
  uint64_t tag;
  int rounds = 4, round, i, form, kind, d, seq = 0;
  double deadline;
  struct timespec pause = {0, 50000};
  if (AMUDP_SPMDStartup(&argc, &argv, 0, 0, NULL, &tag, &eb, &ep) != AM_OK) fail("AMUDP_SPMDStartup");
  for (i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "--rounds")) rounds = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--timeout")) timeout_s = atof(argv[i + 1]);
    else fail("unknown option %s", argv[i]);
  }
  my_rank = AMUDP_SPMDMyProc();
  nprocs = AMUDP_SPMDNumProcs();
  if (nprocs > MAXPROCS) fail("at most %d ranks", MAXPROCS);
  seg_len = 2 * (size_t)MAXPROCS * SLOTS * LONG_SLOT;
  seg = calloc(1, seg_len);
  if (!seg || AM_SetSeg(ep, seg, seg_len) != AM_OK) fail("AM_SetSeg");
  if (AM_SetHandler(ep, 0, on_returned) != AM_OK || AM_SetHandler(ep, H_REQ0, on_req0) != AM_OK ||
      AM_SetHandler(ep, H_REQ4, on_req4) != AM_OK || AM_SetHandler(ep, H_REQ16, on_req16) != AM_OK ||
      AM_SetHandler(ep, H_REQ_MEDIUM, on_req_medium) != AM_OK || AM_SetHandler(ep, H_REQ_LONG, on_req_long) != AM_OK ||
      AM_SetHandler(ep, H_REP0, on_rep0) != AM_OK || AM_SetHandler(ep, H_REP4, on_rep4) != AM_OK ||
      AM_SetHandler(ep, H_REP16, on_rep16) != AM_OK || AM_SetHandler(ep, H_REP_MEDIUM, on_rep_medium) != AM_OK ||
      AM_SetHandler(ep, H_REP_LONG, on_rep_long) != AM_OK)
    fail("AM_SetHandler");
  if (AMUDP_SPMDBarrier() != AM_OK) fail("first barrier");
  for (round = 0; round < rounds; round++) {
    for (form = 0; form < NFORMS; form++)
      for (kind = 0; kind < NREPLIES; kind++) {
        seq++;
        for (d = 0; d < nprocs; d++) send_one((my_rank + d) % nprocs, form, seq, kind);
        poll_once("sending");
      }
  }
  deadline = now() + timeout_s;
  while (replies_in < replies_expected) {
    long before = replies_in;
    poll_once("waiting for the replies");
    if (replies_in == before) nanosleep(&pause, NULL);
    if (now() > deadline) fail("%ld of %ld replies after %.0f s", replies_in, replies_expected, timeout_s);
  }
  /* Past this barrier every rank has all its replies, so every request was served. */
  if (AMUDP_SPMDBarrier() != AM_OK) fail("barrier after the exchange");
  poll_once("after the exchange");
  if (requests_in != (long)rounds * NFORMS * NREPLIES * nprocs)
    fail("%ld requests arrived, expected %ld", requests_in, (long)rounds * NFORMS * NREPLIES * nprocs);
  if (replies_in != replies_expected) fail("%ld replies arrived, expected %ld", replies_in, replies_expected);
  printf("forms ok rank %d\n", my_rank);
  fflush(stdout);
  if (AMUDP_SPMDBarrier() != AM_OK) fail("last barrier");
  AMUDP_SPMDExit(0);
  return 0;
}
