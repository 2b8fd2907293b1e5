/* am_exercises.c: multi-node AM-2 exercises with every byte verified
 * (tests/integration/test_am_multinode.py). C99, only amudp.h / amudp_spmd.h
 * (and prog_common.h, the test programs' helpers).
 *
 *   am_exercises [--rounds R] [--mediums K] [--long-max B] [--timeout S] [EXERCISE...]
 *
 * EXERCISE is ring, alltoall, reduce or getput; none = all four, in that
 * order, with a barrier between them. R (8) rounds of the ring; every wait
 * gives up after S (60) seconds.
 *   ring      a token (a medium payload) goes around the ranks R times; each
 *             rank checks every entry so far, appends its own and updates a
 *             running checksum in the header, then forwards it with
 *             AM_RequestI. Rank 0 checks the whole list at the end.
 *   alltoall  every rank sends every other rank K (16) mediums of varying
 *             sizes and 4 Longs (AM_RequestXfer, 1 B .. 128 KiB; --long-max
 *             caps them) into the region of the receiver's segment reserved
 *             for that sender; the receiver checks every byte against
 *             pattern(sender, receiver, i), in the handler and again after a
 *             barrier (with the rest of its segment still zero).
 *   reduce    3 rounds: the sum and max of one value per rank go to rank 0
 *             by requests; rank 0 broadcasts them by requests, then every
 *             rank also fetches them by a request that rank 0 answers with a
 *             reply. Both are checked against the closed form.
 *   getput    every rank puts a block (AM_RequestXfer, up to 120 KiB) into
 *             every other rank's segment and counts the acks (replies); after
 *             a barrier each receiver checks the blocks put into it; then
 *             every rank gets its blocks back (a short request whose handler
 *             answers with AM_ReplyXfer into the requester's segment) and
 *             checks them.
 * Each rank prints "rank R of N on TRANSPORT node ULNIC_NODE" after startup,
 * "exercise NAME ok rank R" after each exercise, then "exercises ok rank R", and
 * the job ends with AMUDP_SPMDExit(0). A mismatch or a deadline missed prints
 * "FAIL rank R: ..." and ends the job with AMUDP_SPMDExit(1).
 */
#define _POSIX_C_SOURCE 200809L
#include <amudp_spmd.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "prog_common.h"

#define H_RING 1
#define H_A2A_MEDIUM 2
#define H_A2A_LONG 3
#define H_RED_CONTRIB 4
#define H_RED_RESULT 5
#define H_RED_FETCH 6
#define H_RED_FETCHED 7
#define H_PUT 8
#define H_PUT_ACK 9
#define H_GET 10
#define H_GOT 11

#define KiB 1024u
#define NLONG 4
#define A2A_REGION (192u * KiB) /* per sender: the 4 Longs, back to back */
#define PUT_REGION (128u * KiB) /* per sender (puts) and per target (gets) */
#define RED_ROUNDS 3
#define RING_MAX_ENTRIES 1000   /* header + entries fit AM_MaxMedium() */

static uint32_t long_sizes[NLONG] = {128u * KiB, 40000u, 4097u, 1u};

static int my_rank = -1, nprocs = -1;
static eb_t eb;
static ep_t ep;
static unsigned char *seg;
static size_t seg_len;
static double timeout_s = 60;

/* ---- helpers */

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

static void check_errors(const char *where) {
  if (prog_errors) fail("%s: %d handler errors, first: %s", where, prog_errors, prog_first_error);
}

/* Byte k of message i from sender to receiver. */
static unsigned char pattern(int sender, int receiver, int i, uint32_t k) {
  uint32_t seed = prog_mix((uint32_t)sender * 0x9E3779B1u ^ (uint32_t)receiver * 0x85EBCA77u ^ (uint32_t)i * 0xC2B2AE3Du);
  return (unsigned char)(prog_mix(seed ^ (k >> 2)) >> (8 * (k & 3)));
}

static void fill(unsigned char *p, uint32_t n, int sender, int receiver, int i) {
  uint32_t k;
  for (k = 0; k < n; k++) p[k] = pattern(sender, receiver, i, k);
}

/* -1 if all match, else the first index that does not. */
static long mismatch(const unsigned char *p, uint32_t n, int sender, int receiver, int i) {
  uint32_t k;
  for (k = 0; k < n; k++)
    if (p[k] != pattern(sender, receiver, i, k)) return (long)k;
  return -1;
}

/* After a poll that brought nothing: give the CPU away for a moment (a job
 * of 8 busy-polling ranks must not starve the emulated NICs it runs on). */
static void idle(void) {
  struct timespec t = {0, 50000};
  nanosleep(&t, NULL);
}

static void poll_once(const char *where) {
  int rc = AM_Poll(eb);
  if (rc != AM_OK) fail("%s: AM_Poll returned %d", where, rc);
  check_errors(where);
}

/* Polls until *counter reaches target, or fails at the deadline. */
static void wait_for(volatile int *counter, int target, const char *what) {
  double deadline = prog_now() + timeout_s;
  while (*counter < target) {
    int before = *counter;
    poll_once(what);
    if (*counter == before) idle();
    if (prog_now() > deadline) fail("%s: %d of %d after %.0f s", what, *counter, target, timeout_s);
  }
}

static void barrier(const char *where) {
  if (AMUDP_SPMDBarrier() != AM_OK) fail("barrier %s", where);
  check_errors(where);
}

static void request_ok(int rc, const char *what, int dest) {
  if (rc != AM_OK) fail("%s to rank %d returned %d", what, dest, rc);
}

/* Handler 0: nothing may come back in these exercises. */
static void on_returned(int status, op_t opcode, void *token) {
  (void)token;
  prog_handler_error("a message came back: status %d opcode %d", status, opcode);
}

/* ---- ring: header {round_trips_done, checksum}, then entries. Entry j is
 * appended by rank j % nprocs and equals ring_entry(j). */
static uint32_t ring_box[2 + RING_MAX_ENTRIES];
static uint32_t ring_box_len; /* entries in ring_box */
static int ring_received;
static int ring_pending;

static uint32_t ring_entry(uint32_t j) { return prog_mix(j * 2654435761u + 17u) ^ (j % (uint32_t)nprocs); }

static uint32_t ring_checksum(const uint32_t *entries, uint32_t n) {
  uint32_t c = 0x12345678u, j;
  for (j = 0; j < n; j++) c = prog_mix(c ^ entries[j]);
  return c;
}

static void on_ring(void *token, void *buf, size_t nbytes, int from, int len) {
  (void)token;
  if (ring_pending) {
    prog_handler_error("ring: a second token arrived before the first was forwarded");
    return;
  }
  if (nbytes != (size_t)(2 + len) * 4 || len < 1 || len > RING_MAX_ENTRIES || from != (my_rank + nprocs - 1) % nprocs) {
    prog_handler_error("ring: token of %lu bytes, %d entries from rank %d", (unsigned long)nbytes, len, from);
    return;
  }
  memcpy(ring_box, buf, nbytes);
  ring_box_len = (uint32_t)len;
  ring_pending = 1;
  ring_received++;
}

static void verify_ring_box(uint32_t expect_len) {
  uint32_t j;
  if (ring_box_len != expect_len) fail("ring: token has %u entries, expected %u", ring_box_len, expect_len);
  for (j = 0; j < ring_box_len; j++)
    if (ring_box[2 + j] != ring_entry(j)) fail("ring: entry %u is %08x, expected %08x", j, ring_box[2 + j], ring_entry(j));
  if (ring_box[1] != ring_checksum(ring_box + 2, ring_box_len)) fail("ring: running checksum wrong at %u entries", ring_box_len);
  if (ring_box[0] != ring_box_len - 1) fail("ring: hop counter %u at %u entries", ring_box[0], ring_box_len);
}

static void ring_send(void) {
  int next = (my_rank + 1) % nprocs;
  request_ok(AM_RequestI2(ep, next, H_RING, ring_box, (int)((2 + ring_box_len) * 4), my_rank, (int)ring_box_len),
             "ring AM_RequestI2", next);
}

static void exercise_ring(int rounds) {
  uint32_t total = (uint32_t)rounds * (uint32_t)nprocs + 1, received;
  if (total > RING_MAX_ENTRIES) fail("ring: %d rounds x %d ranks do not fit one medium", rounds, nprocs);
  /* ring_received and ring_pending start at 0 and are not reset here: the
   * token may already have arrived during the barrier before this call. */
  if (my_rank == 0) {
    ring_box[0] = 0;
    ring_box[2] = ring_entry(0);
    ring_box_len = 1;
    ring_box[1] = ring_checksum(ring_box + 2, 1);
    ring_send();
  }
  /* Every rank gets the token `rounds` times: rank r at lengths r, r + N, ...
   * (rank 0 at N, 2N, ..., RN). */
  for (received = 0; received < (uint32_t)rounds; received++) {
    uint32_t expect = my_rank == 0 ? (received + 1) * (uint32_t)nprocs : received * (uint32_t)nprocs + (uint32_t)my_rank;
    wait_for(&ring_pending, 1, "ring: waiting for the token");
    ring_pending = 0;
    verify_ring_box(expect);
    /* update: append this rank's entry, the hop counter and the checksum */
    ring_box[2 + ring_box_len] = ring_entry(ring_box_len);
    ring_box_len++;
    ring_box[0]++;
    ring_box[1] = ring_checksum(ring_box + 2, ring_box_len);
    if (ring_box_len < total) ring_send();
  }
  if (ring_received != rounds) fail("ring: token arrived %d times, expected %d", ring_received, rounds);
  if (my_rank == 0) verify_ring_box(total);
}

/* ---- all-to-all */
static int a2a_mediums_in[AMUDP_MAX_SPMDPROCS], a2a_longs_in[AMUDP_MAX_SPMDPROCS];
static int a2a_in_total;
static unsigned char medium_buf[AMUDP_MAX_MEDIUM];

static uint32_t medium_len(int sender, int receiver, int i) {
  return 1 + prog_mix((uint32_t)(sender * 1000003 + receiver * 7919 + i)) % AMUDP_MAX_MEDIUM;
}

static uint32_t long_offset(int i) {
  uint32_t off = 0;
  int j;
  for (j = 0; j < i; j++) off += long_sizes[j];
  return off;
}

static void on_a2a_medium(void *token, void *buf, size_t nbytes, int sender, int i) {
  long bad;
  int src = -1;
  if (AMUDP_GetSourceId(token, &src) != AM_OK || src != sender) prog_handler_error("a2a medium: source id %d, sender %d", src, sender);
  if (sender < 0 || sender >= nprocs || sender == my_rank) {
    prog_handler_error("a2a medium from bad sender %d", sender);
    return;
  }
  if (nbytes != medium_len(sender, my_rank, i)) {
    prog_handler_error("a2a medium %d from %d: %lu bytes, expected %u", i, sender, (unsigned long)nbytes,
                  medium_len(sender, my_rank, i));
    return;
  }
  bad = mismatch(buf, (uint32_t)nbytes, sender, my_rank, i);
  if (bad >= 0) prog_handler_error("a2a medium %d from %d: byte %ld wrong", i, sender, bad);
  a2a_mediums_in[sender]++;
  a2a_in_total++;
}

static void on_a2a_long(void *token, void *buf, size_t nbytes, int sender, int i) {
  unsigned char *expect;
  long bad;
  (void)token;
  if (sender < 0 || sender >= nprocs || sender == my_rank || i < 0 || i >= NLONG) {
    prog_handler_error("a2a long from bad sender %d (i %d)", sender, i);
    return;
  }
  expect = seg + (size_t)sender * A2A_REGION + long_offset(i);
  if ((unsigned char *)buf != expect || nbytes != long_sizes[i]) {
    prog_handler_error("a2a long %d from %d: at offset %ld, %lu bytes", i, sender, (long)((unsigned char *)buf - seg),
                  (unsigned long)nbytes);
    return;
  }
  bad = mismatch(buf, (uint32_t)nbytes, sender, my_rank, 1000 + i);
  if (bad >= 0) prog_handler_error("a2a long %d from %d: byte %ld wrong", i, sender, bad);
  a2a_longs_in[sender]++;
  a2a_in_total++;
}

static void exercise_alltoall(int k) {
  static unsigned char long_buf[128 * KiB];
  int s, t, i, d;
  memset(a2a_mediums_in, 0, sizeof a2a_mediums_in);
  memset(a2a_longs_in, 0, sizeof a2a_longs_in);
  a2a_in_total = 0;
  memset(seg, 0, (size_t)nprocs * A2A_REGION);
  barrier("before alltoall"); /* nobody writes into a region before it is cleared */
  /* Interleaved: every destination gets its i-th message before any its
   * (i+1)-th, starting with the next rank so that not everyone hits rank 0. */
  for (i = 0; i < k + NLONG; i++) {
    for (d = 1; d < nprocs; d++) {
      t = (my_rank + d) % nprocs;
      if (i < k) {
        uint32_t n = medium_len(my_rank, t, i);
        fill(medium_buf, n, my_rank, t, i);
        request_ok(AM_RequestI2(ep, t, H_A2A_MEDIUM, medium_buf, (int)n, my_rank, i), "a2a AM_RequestI2", t);
      } else {
        int l = i - k;
        fill(long_buf, long_sizes[l], my_rank, t, 1000 + l);
        request_ok(AM_RequestXfer2(ep, t, (uintptr_t)my_rank * A2A_REGION + long_offset(l), H_A2A_LONG, long_buf,
                                   (int)long_sizes[l], my_rank, l),
                   "a2a AM_RequestXfer2", t);
      }
    }
    check_errors("alltoall: sending");
  }
  {
    double deadline = prog_now() + timeout_s;
    while (a2a_in_total < (nprocs - 1) * (k + NLONG)) {
      int before = a2a_in_total;
      poll_once("alltoall: waiting for the messages");
      if (a2a_in_total == before) idle();
      if (prog_now() > deadline) {
        for (s = 0; s < nprocs; s++)
          if (s != my_rank && (a2a_mediums_in[s] != k || a2a_longs_in[s] != NLONG))
            printf("rank %d: from rank %d only %d of %d mediums, %d of %d longs\n", my_rank, s, a2a_mediums_in[s], k,
                   a2a_longs_in[s], NLONG);
        fail("alltoall: %d of %d messages after %.0f s", a2a_in_total, (nprocs - 1) * (k + NLONG), timeout_s);
      }
    }
  }
  for (s = 0; s < nprocs; s++) {
    if (s == my_rank) continue;
    if (a2a_mediums_in[s] != k || a2a_longs_in[s] != NLONG)
      fail("alltoall: from rank %d: %d mediums, %d longs", s, a2a_mediums_in[s], a2a_longs_in[s]);
  }
  barrier("after alltoall");
  /* Again, the whole segment: each sender's region holds its Longs, and the
   * rest of it (and this rank's own region) is still zero. */
  for (s = 0; s < nprocs; s++) {
    unsigned char *r = seg + (size_t)s * A2A_REGION;
    uint32_t used = s == my_rank ? 0 : long_offset(NLONG), x;
    for (i = 0; s != my_rank && i < NLONG; i++) {
      long bad = mismatch(r + long_offset(i), long_sizes[i], s, my_rank, 1000 + i);
      if (bad >= 0) fail("alltoall: after the barrier, long %d from %d: byte %ld wrong", i, s, bad);
    }
    for (x = used; x < A2A_REGION; x++)
      if (r[x]) fail("alltoall: byte %u of rank %d's region was written", x, s);
  }
}

/* ---- reduction */
static int red_count[RED_ROUNDS], red_sum[RED_ROUNDS], red_max[RED_ROUNDS];
static int red_result_in[RED_ROUNDS], red_result_sum[RED_ROUNDS], red_result_max[RED_ROUNDS];
static int red_fetched_in[RED_ROUNDS], red_fetched_sum[RED_ROUNDS], red_fetched_max[RED_ROUNDS];

/* Rank r's value in round k: a permutation of 0..N-1 (x1000) plus r + 1. */
static int red_value(int r, int k) { return ((r * 37 + k * 11) % nprocs) * 1000 + r + 1; }

static void on_red_contrib(void *token, int round, int from, int value) {
  (void)token;
  if (my_rank != 0 || round < 0 || round >= RED_ROUNDS || from < 0 || from >= nprocs) {
    prog_handler_error("reduce: bad contribution round %d from %d", round, from);
    return;
  }
  if (value != red_value(from, round)) prog_handler_error("reduce: rank %d sent %d in round %d", from, value, round);
  red_sum[round] += value;
  if (red_count[round] == 0 || value > red_max[round]) red_max[round] = value;
  red_count[round]++;
}

static void on_red_result(void *token, int round, int sum, int max) {
  (void)token;
  if (round < 0 || round >= RED_ROUNDS) {
    prog_handler_error("reduce: result of round %d", round);
    return;
  }
  red_result_sum[round] = sum;
  red_result_max[round] = max;
  red_result_in[round]++;
}

static void on_red_fetch(void *token, int round) {
  if (my_rank != 0 || round < 0 || round >= RED_ROUNDS || red_count[round] != nprocs) {
    prog_handler_error("reduce: fetch of round %d before it completed", round);
    return;
  }
  if (AM_Reply3(token, H_RED_FETCHED, round, red_sum[round], red_max[round]) != AM_OK)
    prog_handler_error("reduce: AM_Reply3 failed");
}

static void on_red_fetched(void *token, int round, int sum, int max) {
  (void)token;
  if (round < 0 || round >= RED_ROUNDS) {
    prog_handler_error("reduce: fetched round %d", round);
    return;
  }
  red_fetched_sum[round] = sum;
  red_fetched_max[round] = max;
  red_fetched_in[round]++;
}

static void exercise_reduce(void) {
  int k, r;
  long n = nprocs;
  if (nprocs % 37 == 0) fail("reduce: the values are a permutation only when 37 does not divide N");
  memset(red_count, 0, sizeof red_count);
  memset(red_result_in, 0, sizeof red_result_in);
  memset(red_fetched_in, 0, sizeof red_fetched_in);
  memset(red_sum, 0, sizeof red_sum);
  barrier("before reduce");
  for (k = 0; k < RED_ROUNDS; k++) {
    /* closed form: the permutation sums to 1000 N(N-1)/2, the r + 1 to N(N+1)/2;
     * the max is N-1 (x1000) plus the rank that holds it, plus one. */
    long want_sum = 1000 * n * (n - 1) / 2 + n * (n + 1) / 2;
    int holder = -1, want_max;
    for (r = 0; r < nprocs; r++)
      if ((r * 37 + k * 11) % nprocs == nprocs - 1) holder = r;
    want_max = (nprocs - 1) * 1000 + holder + 1;
    request_ok(AM_Request3(ep, 0, H_RED_CONTRIB, k, my_rank, red_value(my_rank, k)), "reduce AM_Request3", 0);
    if (my_rank == 0) {
      wait_for(&red_count[k], nprocs, "reduce: waiting for the contributions");
      for (r = 0; r < nprocs; r++)
        request_ok(AM_Request3(ep, r, H_RED_RESULT, k, red_sum[k], red_max[k]), "reduce broadcast", r);
    }
    wait_for(&red_result_in[k], 1, "reduce: waiting for the broadcast");
    request_ok(AM_Request1(ep, 0, H_RED_FETCH, k), "reduce fetch", 0);
    wait_for(&red_fetched_in[k], 1, "reduce: waiting for the fetched result");
    if (red_result_in[k] != 1 || red_fetched_in[k] != 1) fail("reduce: round %d result came more than once", k);
    if (red_result_sum[k] != want_sum || red_result_max[k] != want_max)
      fail("reduce: round %d broadcast sum %d max %d, expected %ld and %d", k, red_result_sum[k], red_result_max[k],
           want_sum, want_max);
    if (red_fetched_sum[k] != want_sum || red_fetched_max[k] != want_max)
      fail("reduce: round %d fetched sum %d max %d, expected %ld and %d", k, red_fetched_sum[k], red_fetched_max[k],
           want_sum, want_max);
  }
}

/* ---- remote put and get. Segment: [a2a: N x A2A_REGION][puts in: N x
 * PUT_REGION, by sender][gets back: N x PUT_REGION, by target]. */
static int puts_in, put_acks, gets_done;

static size_t put_base(void) { return (size_t)nprocs * A2A_REGION; }
static size_t get_base(void) { return put_base() + (size_t)nprocs * PUT_REGION; }
static uint32_t put_len(int sender, int target) { return 1 + prog_mix((uint32_t)(sender * 131 + target * 29 + 5)) % (120u * KiB); }

static void on_put(void *token, void *buf, size_t nbytes, int sender) {
  if (sender < 0 || sender >= nprocs || (unsigned char *)buf != seg + put_base() + (size_t)sender * PUT_REGION ||
      nbytes != put_len(sender, my_rank))
    prog_handler_error("put from %d: %lu bytes at offset %ld", sender, (unsigned long)nbytes, (long)((unsigned char *)buf - seg));
  puts_in++;
  if (AM_Reply2(token, H_PUT_ACK, my_rank, (int)nbytes) != AM_OK) prog_handler_error("put: AM_Reply2 failed");
}

static void on_put_ack(void *token, int target, int nbytes) {
  (void)token;
  if (target < 0 || target >= nprocs || (uint32_t)nbytes != put_len(my_rank, target))
    prog_handler_error("put ack from %d for %d bytes", target, nbytes);
  put_acks++;
}

/* A get: the requester names a region of this segment and where in its own
 * segment it goes; the reply carries it there. */
static void on_get(void *token, int offset, int nbytes, int dest_offset) {
  if (offset < 0 || nbytes < 0 || (size_t)offset + (size_t)nbytes > seg_len) {
    prog_handler_error("get of %d bytes at %d", nbytes, offset);
    return;
  }
  if (AM_ReplyXfer2(token, (uintptr_t)dest_offset, H_GOT, seg + offset, nbytes, my_rank, offset) != AM_OK)
    prog_handler_error("get: AM_ReplyXfer2 failed");
}

static void on_got(void *token, void *buf, size_t nbytes, int target, int offset) {
  (void)token;
  if (target < 0 || target >= nprocs || (unsigned char *)buf != seg + get_base() + (size_t)target * PUT_REGION ||
      nbytes != put_len(my_rank, target) || (size_t)offset != put_base() + (size_t)my_rank * PUT_REGION)
    prog_handler_error("got from %d: %lu bytes at offset %ld", target, (unsigned long)nbytes, (long)((unsigned char *)buf - seg));
  gets_done++;
}

static void exercise_getput(void) {
  static unsigned char block[128 * KiB];
  int d, t, s;
  puts_in = put_acks = gets_done = 0;
  memset(seg + put_base(), 0, (size_t)nprocs * PUT_REGION * 2);
  barrier("before getput");
  for (d = 1; d < nprocs; d++) {
    t = (my_rank + d) % nprocs;
    fill(block, put_len(my_rank, t), my_rank, t, 2000);
    request_ok(AM_RequestXfer1(ep, t, put_base() + (size_t)my_rank * PUT_REGION, H_PUT, block, (int)put_len(my_rank, t),
                               my_rank),
               "put AM_RequestXfer1", t);
  }
  wait_for(&put_acks, nprocs - 1, "getput: waiting for the put acks");
  barrier("after the puts"); /* every put has been acked: all are in place */
  if (puts_in != nprocs - 1) fail("getput: %d puts arrived, expected %d", puts_in, nprocs - 1);
  for (s = 0; s < nprocs; s++) {
    const unsigned char *r = seg + put_base() + (size_t)s * PUT_REGION;
    uint32_t n = s == my_rank ? 0 : put_len(s, my_rank), x;
    long bad = mismatch(r, n, s, my_rank, 2000);
    if (bad >= 0) fail("getput: byte %ld of the put from rank %d wrong", bad, s);
    for (x = n; x < PUT_REGION; x++)
      if (r[x]) fail("getput: byte %u past rank %d's put was written", x, s);
  }
  for (d = 1; d < nprocs; d++) {
    t = (my_rank + d) % nprocs;
    request_ok(AM_Request3(ep, t, H_GET, (int)(put_base() + (size_t)my_rank * PUT_REGION), (int)put_len(my_rank, t),
                           (int)(get_base() + (size_t)t * PUT_REGION)),
               "get AM_Request3", t);
  }
  wait_for(&gets_done, nprocs - 1, "getput: waiting for the gets");
  for (t = 0; t < nprocs; t++) {
    const unsigned char *r = seg + get_base() + (size_t)t * PUT_REGION;
    uint32_t n = t == my_rank ? 0 : put_len(my_rank, t), x;
    long bad = mismatch(r, n, my_rank, t, 2000);
    if (bad >= 0) fail("getput: byte %ld of the block got back from rank %d wrong", bad, t);
    for (x = n; x < PUT_REGION; x++)
      if (r[x]) fail("getput: byte %u past the block got from rank %d was written", x, t);
  }
}

/* ---- main */

static int selected(int nsel, char **sel, const char *name) {
  int i;
  if (nsel == 0) return 1;
  for (i = 0; i < nsel; i++)
    if (!strcmp(sel[i], name)) return 1;
  return 0;
}

static void done(const char *name) {
  barrier(name);
  printf("exercise %s ok rank %d\n", name, my_rank);
  fflush(stdout);
}

int main(int argc, char **argv) {
  uint64_t tag = 0;
  int rounds = 8, mediums = 16, nsel = 0, i;
  uint32_t long_max = 128u * KiB;
  char *sel[8];
  void *mem;
  if (AMUDP_SPMDStartup(&argc, &argv, 0, 0, NULL, &tag, &eb, &ep) != AM_OK) fail("AMUDP_SPMDStartup");
  my_rank = AMUDP_SPMDMyProc();
  nprocs = AMUDP_SPMDNumProcs();
  for (i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--rounds") && i + 1 < argc) rounds = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--mediums") && i + 1 < argc) mediums = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--timeout") && i + 1 < argc) timeout_s = atof(argv[++i]);
    else if (!strcmp(argv[i], "--long-max") && i + 1 < argc) long_max = (uint32_t)strtoul(argv[++i], NULL, 0);
    else if (!strcmp(argv[i], "ring") || !strcmp(argv[i], "alltoall") || !strcmp(argv[i], "reduce") ||
             !strcmp(argv[i], "getput")) {
      if (nsel < 8) sel[nsel++] = argv[i];
    } else fail("unknown argument %s", argv[i]);
  }
  if (rounds < 1 || mediums < 0 || timeout_s <= 0 || long_max < 1 || long_max > 128u * KiB)
    fail("bad --rounds, --mediums, --timeout or --long-max");
  for (i = 0; i < NLONG; i++)
    if (long_sizes[i] > long_max) long_sizes[i] = long_max;

  /* The segment: page-aligned (the vipl transport registers it). */
  seg_len = (size_t)nprocs * (A2A_REGION + 2 * PUT_REGION);
  if (posix_memalign(&mem, (size_t)sysconf(_SC_PAGESIZE), seg_len) != 0)
    fail("no memory for a %lu-byte segment", (unsigned long)seg_len);
  seg = mem;
  memset(seg, 0, seg_len);
  if (AM_SetSeg(ep, seg, seg_len) != AM_OK) fail("AM_SetSeg");
  if (AM_SetHandler(ep, 0, on_returned) != AM_OK || AM_SetHandler(ep, H_RING, on_ring) != AM_OK ||
      AM_SetHandler(ep, H_A2A_MEDIUM, on_a2a_medium) != AM_OK || AM_SetHandler(ep, H_A2A_LONG, on_a2a_long) != AM_OK ||
      AM_SetHandler(ep, H_RED_CONTRIB, on_red_contrib) != AM_OK ||
      AM_SetHandler(ep, H_RED_RESULT, on_red_result) != AM_OK || AM_SetHandler(ep, H_RED_FETCH, on_red_fetch) != AM_OK ||
      AM_SetHandler(ep, H_RED_FETCHED, on_red_fetched) != AM_OK || AM_SetHandler(ep, H_PUT, on_put) != AM_OK ||
      AM_SetHandler(ep, H_PUT_ACK, on_put_ack) != AM_OK || AM_SetHandler(ep, H_GET, on_get) != AM_OK ||
      AM_SetHandler(ep, H_GOT, on_got) != AM_OK)
    fail("AM_SetHandler");
  {
    const char *node = getenv("ULNIC_NODE");
    printf("rank %d of %d on %s node %s\n", my_rank, nprocs, AMX_TransportName(), node ? node : "-");
  }
  fflush(stdout);
  barrier("after the handlers are set"); /* every handler is set everywhere before anyone sends */

  if (selected(nsel, sel, "ring")) {
    exercise_ring(rounds);
    done("ring");
  }
  if (selected(nsel, sel, "alltoall")) {
    exercise_alltoall(mediums);
    done("alltoall");
  }
  if (selected(nsel, sel, "reduce")) {
    exercise_reduce();
    done("reduce");
  }
  if (selected(nsel, sel, "getput")) {
    exercise_getput();
    done("getput");
  }
  printf("exercises ok rank %d\n", my_rank);
  fflush(stdout);
  barrier("last"); /* nobody ends the job before everyone has said ok */
  AMUDP_SPMDExit(0);
  return 0;
}
