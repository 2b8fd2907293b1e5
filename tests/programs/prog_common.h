/* prog_common.h: what the C test programs share (the tight-poll programs
 * am_tight.c, vipl_tight.c, vmmc_tight.c and fm_tight.c, which
 * tests/integration/test_tight_poll.py runs, and am_exercises.c). C99,
 * header-only; define _POSIX_C_SOURCE before any include.
 *
 * Each tight-poll program waits the way classic programs for its API do --
 * a loop on the non-blocking call, no sleep and no yield in it -- and checks
 * every byte. What they need besides: a failure that names itself, a
 * watchdog (a hang must end the run, not the test's patience), handler
 * errors kept for the main loop, the byte pattern of a message, the message
 * sizes of a run and "--name value" arguments. */
#ifndef ULNIC_TESTS_PROG_COMMON_H
#define ULNIC_TESTS_PROG_COMMON_H

#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static const char *prog_name = "program";
/* How a failure ends the process (an SPMD worker ends its job instead). */
static void (*prog_exit)(int code) = exit;

/* "FAIL <prog>: ..." on stdout, then exit status 1. */
static inline void prog_fail(const char *fmt, ...) {
  va_list ap;
  printf("FAIL %s: ", prog_name);
  va_start(ap, fmt);
  vprintf(fmt, ap);
  va_end(ap);
  printf("\n");
  fflush(stdout);
  prog_exit(1);
  exit(1);
}

/* A handler cannot end the process safely: it records what went wrong
 * (the first message, and how many), and the main loop fails. */
static int prog_errors;
static char prog_first_error[256];

static inline void prog_handler_error(const char *fmt, ...) {
  va_list ap;
  if (prog_errors++ == 0) {
    va_start(ap, fmt);
    vsnprintf(prog_first_error, sizeof prog_first_error, fmt, ap);
    va_end(ap);
  }
}

/* Fails (prog_fail) if a handler recorded an error. */
static inline void prog_check_handlers(const char *where) {
  if (prog_errors) prog_fail("%s: %d handler errors, first: %s", where, prog_errors, prog_first_error);
}

/* Where the program waits, for the watchdog's message: a label and two
 * numbers (say, the message it waits for and how many it has), set before
 * each wait with prog_at(). Plain stores: cheap enough for a tight loop. */
static const char *volatile prog_where = "starting";
static volatile long prog_where_a = -1, prog_where_b = -1;

static inline void prog_at(const char *where, long a, long b) {
  prog_where = where;
  prog_where_a = a;
  prog_where_b = b;
}

/* Appends s, or the decimal n, to buf at *len: async-signal-safe. */
static inline void prog_put(char *buf, size_t cap, size_t *len, const char *s) {
  while (*s && *len + 1 < cap) buf[(*len)++] = *s++;
}
static inline void prog_put_long(char *buf, size_t cap, size_t *len, long n) {
  char digits[24];
  int k = 0;
  unsigned long u = n < 0 ? 0ul - (unsigned long)n : (unsigned long)n;
  if (n < 0) prog_put(buf, cap, len, "-");
  do digits[k++] = (char)('0' + u % 10); while ((u /= 10) && k < (int)sizeof digits);
  while (k > 0 && *len + 1 < cap) buf[(*len)++] = digits[--k];
}

static inline void prog_on_alarm(int sig) {
  char msg[256];
  size_t len = 0;
  (void)sig;
  prog_put(msg, sizeof msg, &len, "FAIL: the watchdog fired: the run hung (");
  prog_put(msg, sizeof msg, &len, prog_name);
  prog_put(msg, sizeof msg, &len, ", ");
  prog_put(msg, sizeof msg, &len, prog_where);
  prog_put(msg, sizeof msg, &len, " ");
  prog_put_long(msg, sizeof msg, &len, prog_where_a);
  prog_put(msg, sizeof msg, &len, " ");
  prog_put_long(msg, sizeof msg, &len, prog_where_b);
  prog_put(msg, sizeof msg, &len, ")\n");
  (void)!write(1, msg, len);
  _exit(3);
}

/* Ends the process (exit status 3) if it still runs after `seconds`. */
static inline void prog_watchdog(const char *prog, unsigned seconds) {
  prog_name = prog;
  signal(SIGALRM, prog_on_alarm);
  alarm(seconds);
}

static inline double prog_now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static inline uint32_t prog_mix(uint32_t x) {
  x ^= x >> 16;
  x *= 0x7feb352du;
  x ^= x >> 15;
  x *= 0x846ca68bu;
  x ^= x >> 16;
  return x;
}

/* Byte k of message `seq`. */
static inline unsigned char prog_byte(uint32_t seq, uint32_t k) {
  return (unsigned char)(prog_mix(prog_mix(seq * 0x9E3779B1u + 1u) ^ (k >> 2)) >> (8 * (k & 3)));
}

static inline void prog_fill(unsigned char *p, size_t n, uint32_t seq) {
  size_t k;
  for (k = 0; k < n; k++) p[k] = prog_byte(seq, (uint32_t)k);
}

/* -1 if the n bytes at p are message `seq`, else the first that is not. */
static inline long prog_mismatch(const unsigned char *p, size_t n, uint32_t seq) {
  size_t k;
  for (k = 0; k < n; k++)
    if (p[k] != prog_byte(seq, (uint32_t)k)) return (long)k;
  return -1;
}

/* The size of message i of n: lo for the first, hi for the last, spread
 * between them (odd sizes too). */
static inline uint32_t prog_size(uint32_t i, uint32_t n, uint32_t lo, uint32_t hi) {
  uint64_t s;
  if (n < 2 || i == 0) return lo;
  if (i + 1 >= n) return hi;
  s = lo + (uint64_t)(hi - lo) * i / (n - 1) - i % 3;
  return s < lo ? lo : (uint32_t)s;
}

/* The string after "--name" in argv, or NULL. */
static inline const char *prog_arg_str(int argc, char **argv, const char *name) {
  int i;
  for (i = 1; i + 1 < argc; i++)
    if (!strcmp(argv[i], name)) return argv[i + 1];
  return NULL;
}

/* The integer after "--name" in argv, or `fallback`. */
static inline int prog_arg(int argc, char **argv, const char *name, int fallback) {
  const char *v = prog_arg_str(argc, argv, name);
  return v ? atoi(v) : fallback;
}

/* Whether "--name" is in argv. */
static inline int prog_flag(int argc, char **argv, const char *name) {
  int i;
  for (i = 1; i < argc; i++)
    if (!strcmp(argv[i], name)) return 1;
  return 0;
}

#endif
