/* amudp_names.c: AMUDP 3.x's public interface, included and used the way
 * AMUDP programs do (plain <amudp.h> and <amudp_spmd.h>, the AMX_ names, the
 * va_list forms, statistics, callbacks), built as C99 -pedantic -Werror and
 * as C++ (tests/integration/test_am_compat.py, issue 24). Every public
 * function is referenced, so a name the library lacks fails the link.
 *
 * Run as an SPMD job, AMUDP's way (`amudp_names N [L|S|C] [options]`) or
 * under `ulnic run`. Every rank, with every return code checked exactly:
 *   * AMX_VerboseErrors: one failing call reports itself on stderr;
 *   * AMUDP_SetTranslationTag; AMUDP_enEqual; AMUDP_SetUDPInterface(0);
 *     AMUDP_SPMDHandleControlTraffic; the checkpoint/restart calls' "no";
 *   * handler callbacks around every handler (category, isReq, handler,
 *     arguments);
 *   * the six va_list forms, every byte of their payloads checked,
 *     mediums of AM_MaxMedium() bytes included;
 *   * statistics after a known exchange with the partner (rank + 1):
 *     requests and replies sent by category and their data bytes exactly,
 *     received at least as many as the partner sent (exactly on the NIC
 *     transports), AMX_AggregateStatistics over an all-gather of every
 *     rank's, AMX_DumpStatistics.
 * Rank 0 prints "names master-var <value of getenvMaster(AMUDP_NAMES_SET)>"
 * and "names extra <value of $AMUDP_NAMES_EXTRA>". Options:
 *   --own-spawn   the program passes its own spawn function (fork/exec with
 *                 extra_env, and AMUDP_NAMES_EXTRA=own-spawn)
 *   --exit-code C every rank ends with AMUDP_SPMDExit(C) through a
 *                 AMX_SPMDkillmyprocess of its own ("killmyprocess C")
 * Prints "names ok rank R of N transport T"; a failure "FAIL rank R: ...".
 */
#define _POSIX_C_SOURCE 200809L
#include <amudp.h>
#include <amudp_spmd.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

#ifdef __cplusplus
#define CAST(T, x) static_cast<T>(x)
#define FNCAST(T, f) reinterpret_cast<T>(f)
#else
#define CAST(T, x) ((T)(x))
#define FNCAST(T, f) ((T)(f))
#endif

/* ---- compile-time: what AMUDP programs test with the preprocessor */
#if !defined(AMUDP) || !defined(AMUDP_LIBRARY_VERSION) || !defined(AMUDP_LIBRARY_VERSION_STR)
#error "amudp.h: AMUDP, AMUDP_LIBRARY_VERSION, AMUDP_LIBRARY_VERSION_STR"
#endif
#if AMUDP_MAX_MEDIUM < 65000 || AMUDP_MAX_LONG < 65000 || AMUDP_MAX_SHORT < 16
#error "AMUDP's sizes"
#endif
#if !defined(AMUDP_DEBUG) && !defined(AMUDP_NDEBUG)
#error "AMUDP_DEBUG or AMUDP_NDEBUG"
#endif
typedef char check_max_medium[(AM_MaxMedium() >= 65000) ? 1 : -1];
typedef char check_max_long[(AM_MaxLong() >= 65000) ? 1 : -1];
typedef char check_procid[(AMUDP_PROCID_NEXT == -1 && AMUDP_PROCID_ALLOC == -2) ? 1 : -1];

#define H_SHORT 1
#define H_SHORT_REP 2
#define H_MEDIUM 3
#define H_MEDIUM_REP 4
#define H_LONG 5
#define H_LONG_REP 6
#define H_TAGGED 7

#define SHORTS 5
#define MEDIUMS 3
#define LONGS 4
#define LONG_BYTES 70000
#define SEG_BYTES (4 * LONG_BYTES)

static int my_rank = -1, nprocs = -1, partner = -1, from_rank = -1;
static eb_t eb;
static ep_t ep;
static unsigned char *seg;
static unsigned char medium_buf[AMUDP_MAX_MEDIUM];
static int replies;
static int errors;
static char first_error[256];
static long pre_calls, post_calls, pre_args_bad;
static int in_handler;

static void fail(const char *fmt, ...) {
  va_list ap;
  printf("FAIL rank %d: ", my_rank);
  va_start(ap, fmt);
  vprintf(fmt, ap);
  va_end(ap);
  printf("\n");
  fflush(stdout);
  if (AMX_SPMDNumProcs() > 0) AMX_SPMDExit(1);
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

static unsigned char byte_of(int from, int seq, int reply, size_t k) {
  return CAST(unsigned char, (k * 131u + CAST(unsigned, from) * 17u + CAST(unsigned, seq) * 7u + (reply ? 101u : 0u)) >> 1);
}
static void fill(unsigned char *p, size_t n, int from, int seq, int reply) {
  size_t k;
  for (k = 0; k < n; k++) p[k] = byte_of(from, seq, reply, k);
}
static int matches(const unsigned char *p, size_t n, int from, int seq, int reply) {
  size_t k;
  for (k = 0; k < n; k++)
    if (p[k] != byte_of(from, seq, reply, k)) return 0;
  return 1;
}
static size_t medium_size(int seq) { return seq == 0 ? 0 : seq == 1 ? 1 : AM_MaxMedium(); }

/* ---- the va_list forms, called the way a wrapper library calls them */
static int request_va(int form, amudp_node_t dest, handler_t h, void *buf, size_t n, uintptr_t off, int numargs, ...) {
  va_list ap;
  int rc;
  va_start(ap, numargs);
  if (form == 0) rc = AMUDP_RequestVA(ep, dest, h, numargs, ap);
  else if (form == 1) rc = AMUDP_RequestIVA(ep, dest, h, buf, n, numargs, ap);
  else rc = AMUDP_RequestXferVA(ep, dest, h, buf, n, off, 0, numargs, ap);
  va_end(ap);
  return rc;
}
static int reply_va(int form, void *token, handler_t h, void *buf, size_t n, uintptr_t off, int numargs, ...) {
  va_list ap;
  int rc;
  va_start(ap, numargs);
  if (form == 0) rc = AMUDP_ReplyVA(token, h, numargs, ap);
  else if (form == 1) rc = AMUDP_ReplyIVA(token, h, buf, n, numargs, ap);
  else rc = AMUDP_ReplyXferVA(token, h, buf, n, off, numargs, ap);
  va_end(ap);
  return rc;
}

/* ---- handlers */
static void check_source(void *token, const char *what) {
  int src = -1;
  if (AMX_GetSourceId(token, &src) != AM_OK || src != from_rank) handler_error("%s: source %d", what, src);
}

static void on_short(void *token, int from, int seq, int c) {
  check_source(token, "short request");
  if (from != from_rank || c != -seq) handler_error("short request: arguments %d %d %d", from, seq, c);
  if (reply_va(0, token, H_SHORT_REP, NULL, 0, 0, 2, my_rank, seq) != AM_OK) handler_error("AMUDP_ReplyVA");
}
static void on_short_rep(void *token, int from, int seq) {
  (void)token;
  if (from != partner || seq < 0 || seq >= SHORTS) handler_error("short reply: %d %d", from, seq);
  replies++;
}
static void on_medium(void *token, void *buf, size_t n, int from, int seq) {
  static unsigned char out[AMUDP_MAX_MEDIUM];
  check_source(token, "medium request");
  if (from != from_rank || n != medium_size(seq) || !matches(CAST(unsigned char *, buf), n, from, seq, 0))
    handler_error("medium request %d: %lu bytes or a byte differs", seq, CAST(unsigned long, n));
  fill(out, medium_size(seq), my_rank, seq, 1);
  if (reply_va(1, token, H_MEDIUM_REP, out, medium_size(seq), 0, 2, my_rank, seq) != AM_OK) handler_error("AMUDP_ReplyIVA");
}
static void on_medium_rep(void *token, void *buf, size_t n, int from, int seq) {
  (void)token;
  if (from != partner || n != medium_size(seq) || !matches(CAST(unsigned char *, buf), n, from, seq, 1))
    handler_error("medium reply %d: %lu bytes or a byte differs", seq, CAST(unsigned long, n));
  replies++;
}
static void on_long(void *token, void *buf, size_t n, int from, int seq) {
  static unsigned char out[LONG_BYTES];
  check_source(token, "long request");
  if (from != from_rank || n != LONG_BYTES || CAST(unsigned char *, buf) != seg + CAST(size_t, seq % 2) * LONG_BYTES ||
      !matches(CAST(unsigned char *, buf), n, from, seq, 0))
    handler_error("long request %d: %lu bytes, wrong place or a byte differs", seq, CAST(unsigned long, n));
  fill(out, LONG_BYTES, my_rank, seq, 1);
  if (reply_va(2, token, H_LONG_REP, out, LONG_BYTES, CAST(uintptr_t, 2 + seq % 2) * LONG_BYTES, 2, my_rank, seq) != AM_OK)
    handler_error("AMUDP_ReplyXferVA");
}
static void on_long_rep(void *token, void *buf, size_t n, int from, int seq) {
  (void)token;
  if (from != partner || n != LONG_BYTES || CAST(unsigned char *, buf) != seg + CAST(size_t, 2 + seq % 2) * LONG_BYTES ||
      !matches(CAST(unsigned char *, buf), n, from, seq, 1))
    handler_error("long reply %d: %lu bytes, wrong place or a byte differs", seq, CAST(unsigned long, n));
  replies++;
}
static void on_tagged(void *token, int from, int v) {
  tag_t t = 0;
  if (AM_GetMsgTag(token, &t) != AM_OK || from != from_rank || v != 77) handler_error("tagged request");
  if (AM_Reply2(token, H_SHORT_REP, my_rank, 0) != AM_OK) handler_error("tagged reply");
}
static void on_returned(int status, op_t opcode, void *token) {
  (void)token;
  handler_error("a message came back: status %d opcode %d", status, opcode);
}

/* ---- handler callbacks */
static void pre_cb(amudp_category_t cat, int isReq, int handlerId, void *token, void *buf, size_t nbytes, int numargs,
                   uint32_t *args) {
  (void)token, (void)buf;
  pre_calls++;
  if (in_handler++) pre_args_bad++;
  if (cat < amudp_Short || cat >= amudp_NumCategories || numargs < 1 || !args) {
    pre_args_bad++;
    return;
  }
  /* every handler of this program has the sender's rank first */
  if (CAST(int, args[0]) != (isReq ? from_rank : partner)) pre_args_bad++;
  if (handlerId == H_MEDIUM && (cat != amudp_Medium || !isReq || nbytes != medium_size(CAST(int, args[1]))))
    pre_args_bad++;
  if (handlerId == H_LONG_REP && (cat != amudp_Long || isReq || nbytes != LONG_BYTES)) pre_args_bad++;
  if (handlerId == H_SHORT && (cat != amudp_Short || !isReq || numargs != 3)) pre_args_bad++;
}
static void post_cb(amudp_category_t cat, int isReq) {
  (void)cat, (void)isReq;
  post_calls++;
  in_handler--;
}

/* ---- spawning */
static int own_spawn(int nproc, int argc, char **argv, char **extra_env) {
  int i;
  printf("own spawn nproc %d argc %d\n", nproc, argc);
  fflush(stdout);
  for (i = 0; i < nproc; i++) {
    pid_t pid = fork();
    if (pid < 0) return 0;
    if (pid == 0) {
      char **e;
      for (e = extra_env; e && *e; e++) {
        char kv[4096], *eq;
        snprintf(kv, sizeof kv, "%s", *e);
        if ((eq = strchr(kv, '=')) != NULL) *eq = 0, setenv(kv, eq + 1, 1);
      }
      setenv("AMUDP_NAMES_EXTRA", "own-spawn", 1);
      execv("/proc/self/exe", argv);
      _exit(127);
    }
  }
  return 1;
}

static void my_killmyprocess(int code) {
  printf("killmyprocess %d rank %d\n", code, my_rank);
  fflush(stdout);
  _exit(code);
}

static void wait_replies(int n, const char *what) {
  while (replies < n) {
    if (AM_Poll(eb) != AM_OK) fail("AM_Poll");
    if (errors) fail("%s: %d handler errors, first: %s", what, errors, first_error);
  }
}

/* Every public function, so that the link needs them all (external: the
 * compiler keeps it). */
typedef void (*anyfn)(void);
#define FN(f) FNCAST(anyfn, f)
#ifdef __cplusplus
extern "C" {
#endif
extern const anyfn amudp_names_every_function[];
const anyfn amudp_names_every_function[] = {
    FN(AM_Init), FN(AM_Terminate), FN(AM_AllocateBundle), FN(AM_FreeBundle), FN(AM_AllocateEndpoint),
    FN(AM_FreeEndpoint), FN(AM_MoveEndpoint), FN(AM_GetSeg), FN(AM_SetSeg), FN(AM_MaxSegLength), FN(AM_GetTag),
    FN(AM_SetTag), FN(AM_Map), FN(AM_MapAny), FN(AM_UnMap), FN(AM_GetTranslationInuse), FN(AM_GetTranslationTag),
    FN(AM_GetTranslationName), FN(AM_GetNumTranslations), FN(AM_SetNumTranslations), FN(AM_SetExpectedResources),
    FN(_AM_SetHandler), FN(_AM_SetHandlerAny), FN(AM_GetEventMask), FN(AM_SetEventMask), FN(AM_WaitSema),
    FN(AM_GetSourceEndpoint), FN(AM_GetDestEndpoint), FN(AM_GetMsgTag), FN(AM_Poll), FN(AMX_SetTransport),
    FN(AMUDP_Request), FN(AMUDP_RequestI), FN(AMUDP_RequestXfer), FN(AMUDP_Reply), FN(AMUDP_ReplyI),
    FN(AMUDP_ReplyXfer), FN(AMUDP_RequestVA), FN(AMUDP_RequestIVA), FN(AMUDP_RequestXferVA), FN(AMUDP_ReplyVA),
    FN(AMUDP_ReplyIVA), FN(AMUDP_ReplyXferVA), FN(AMUDP_GetSourceId), FN(AMUDP_enEqual), FN(AMUDP_FatalErr),
    FN(AMUDP_SetUDPInterface), FN(AMUDP_GetEndpointStatistics), FN(AMUDP_ResetEndpointStatistics),
    FN(AMUDP_AggregateStatistics), FN(AMUDP_DumpStatistics), FN(AMUDP_SetHandlerCallbacks),
    FN(AMUDP_SPMDHandleControlTraffic), FN(AMUDP_SetTranslationTag), FN(AMX_FatalErr), FN(AMX_GetEndpointStatistics),
    FN(AMX_AggregateStatistics), FN(AMX_DumpStatistics), FN(AMX_SetTranslationTag), FN(AMX_enEqual),
    FN(AMUDP_SPMDStartup), FN(AMUDP_SPMDExit), FN(AMUDP_SPMDSetExitCallback), FN(AMUDP_SPMDIsWorker),
    FN(AMUDP_SPMDNumProcs), FN(AMUDP_SPMDMyProc), FN(AMUDP_SPMDBarrier), FN(AMUDP_SPMDgetenvMaster),
    FN(AMUDP_SPMDAllGather), FN(AMUDP_SPMDLocalSpawn), FN(AMUDP_SPMDSshSpawn), FN(AMUDP_SPMDCustomSpawn),
    FN(AMUDP_SPMDCheckpoint), FN(AMUDP_SPMDRunRestart), FN(AMUDP_SPMDRestartProcId), FN(AMX_SPMDgetenvMaster),
    FN(AMX_SPMDBarrier), FN(AMX_SPMDNumProcs), FN(AMX_SPMDMyProc), FN(AMX_SPMDExit), FN(AMX_SPMDSetExitCallback),
    FN(AMX_SPMDIsWorker), FN(AMX_SPMDAllGather)};
#ifdef __cplusplus
}
#endif

int main(int argc, char **argv) {
  uint64_t tag;
  amudp_spawnfn_t spawnfn = NULL;
  const char *v, *transport;
  int i, rc, exit_code = 0, seq, ntrans = 0;
  amx_handler_fn_t handlers[7];
  amx_stats_t mine, all_sum, *all;
  tag_t t;
  en_t a, b;
  char *cp_argv[1];
  int cp_argc = 0;
  char **cp_argvp = cp_argv;
  long expect_data[3];

  cp_argv[0] = NULL;
  /* AMUDP's version is a number (3.x) and its string */
  if (AMUDP_LIBRARY_VERSION < 3 || strtod(AMUDP_LIBRARY_VERSION_STR, NULL) != AMUDP_LIBRARY_VERSION)
    fail("AMUDP_LIBRARY_VERSION %s", AMUDP_LIBRARY_VERSION_STR);
  memset(&a, 0, sizeof a);
  memset(&b, 0, sizeof b);
  if (!amudp_names_every_function[0]) fail("amudp_names_every_function");
  /* A variable the program sets before Startup: a master's shows in getenvMaster. */
  setenv("AMUDP_NAMES_SET", AMUDP_SPMDIsWorker(argv) ? "worker" : "master", 1);
  for (i = 1; i < argc; i++)
    if (!strcmp(argv[i], "--own-spawn")) spawnfn = own_spawn;
  if (AMUDP_SPMDStartup(&argc, &argv, 0, 0, spawnfn, &tag, &eb, &ep) != AM_OK) fail("AMUDP_SPMDStartup");
  for (i = 1; i < argc; i++)
    if (!strcmp(argv[i], "--exit-code") && i + 1 < argc) exit_code = atoi(argv[++i]);
    else if (strcmp(argv[i], "--own-spawn")) fail("unknown argument %s", argv[i]);
  my_rank = AMX_SPMDMyProc();
  nprocs = AMX_SPMDNumProcs();
  partner = (my_rank + 1) % nprocs;
  from_rank = (my_rank + nprocs - 1) % nprocs;
  transport = getenv("ULNIC_AM_TRANSPORT");
  if (!transport || !*transport) transport = "udp";
  if (!AMX_SPMDIsWorker(argv)) fail("AMX_SPMDIsWorker");
  if (my_rank == 0) {
    v = AMX_SPMDgetenvMaster("AMUDP_NAMES_SET");
    printf("names master-var %s\n", v ? v : "(unset)");
    v = getenv("AMUDP_NAMES_EXTRA");
    printf("names extra %s\n", v ? v : "(unset)");
    fflush(stdout);
  }

  /* knobs and small calls */
  AMX_VerboseErrors = 1;
  if (AM_Map(ep, -1, a, 0) != AM_ERR_BAD_ARG) fail("AM_Map(-1) is not AM_ERR_BAD_ARG");
  AMX_VerboseErrors = 0;
  AMUDP_PoliteSync = 1;
  AMX_SilentMode = 0;
  if (!AMX_ProcessLabel || strncmp(AMX_ProcessLabel, "Node ", 5) != 0) fail("AMX_ProcessLabel");
  if (AMUDP_SetUDPInterface(0) != AM_OK) fail("AMUDP_SetUDPInterface(0)");
  rc = -1;
  if (AMUDP_SPMDHandleControlTraffic(&rc) != AM_OK || rc != 0) fail("AMUDP_SPMDHandleControlTraffic");
  if (AMUDP_SPMDCheckpoint(&eb, &ep, "/nonexistent") != -1) fail("AMUDP_SPMDCheckpoint is not -1");
  if (AMUDP_SPMDRestartProcId(&cp_argc, &cp_argvp) != -1) fail("AMUDP_SPMDRestartProcId is not -1");
  if (AM_GetNumTranslations(ep, &ntrans) != AM_OK || ntrans < nprocs) fail("AM_GetNumTranslations");
  if (AM_GetTranslationName(ep, partner, &a) != AM_OK || AM_GetTranslationName(ep, partner, &b) != AM_OK ||
      AMX_enEqual(a, b) != 1)
    fail("AMX_enEqual of one name");
  if (nprocs > 1 && (AM_GetTranslationName(ep, my_rank, &b) != AM_OK || AMUDP_enEqual(a, b) != 0))
    fail("AMUDP_enEqual of two names");
  if (AMX_SetTranslationTag(ep, AMUDP_MAX_NUMTRANSLATIONS - 1, 5) != AM_ERR_RESOURCE)
    fail("AMX_SetTranslationTag of an unmapped index is not AM_ERR_RESOURCE");
  if (AMX_SetTranslationTag(ep, -1, 5) != AM_ERR_BAD_ARG) fail("AMX_SetTranslationTag(-1)");

  seg = CAST(unsigned char *, calloc(1, SEG_BYTES));
  if (!seg || AM_SetSeg(ep, seg, SEG_BYTES) != AM_OK) fail("AM_SetSeg");
  handlers[0] = FNCAST(amx_handler_fn_t, on_short);
  handlers[1] = FNCAST(amx_handler_fn_t, on_short_rep);
  handlers[2] = FNCAST(amx_handler_fn_t, on_medium);
  handlers[3] = FNCAST(amx_handler_fn_t, on_medium_rep);
  handlers[4] = FNCAST(amx_handler_fn_t, on_long);
  handlers[5] = FNCAST(amx_handler_fn_t, on_long_rep);
  handlers[6] = FNCAST(amx_handler_fn_t, on_tagged);
  for (i = 0; i < 7; i++)
    if (_AM_SetHandler(ep, CAST(handler_t, i + 1), handlers[i]) != AM_OK) fail("_AM_SetHandler %d", i + 1);
  if (AM_SetHandler(ep, 0, on_returned) != AM_OK) fail("AM_SetHandler 0");
  if (AMUDP_SetHandlerCallbacks(ep, pre_cb, post_cb) != AM_OK) fail("AMUDP_SetHandlerCallbacks");
  if (AMX_SPMDBarrier() != AM_OK) fail("barrier");
  if (AMUDP_ResetEndpointStatistics(ep) != AM_OK) fail("AMUDP_ResetEndpointStatistics");
  if (AMX_SPMDBarrier() != AM_OK) fail("barrier after the reset");

  /* the exchange: SHORTS shorts, MEDIUMS mediums, LONGS longs to the partner */
  expect_data[0] = expect_data[1] = expect_data[2] = 0;
  for (seq = 0; seq < SHORTS; seq++) {
    if (request_va(0, CAST(amudp_node_t, partner), H_SHORT, NULL, 0, 0, 3, my_rank, seq, -seq) != AM_OK)
      fail("AMUDP_RequestVA %d", seq);
    expect_data[0] += 12;
  }
  for (seq = 0; seq < MEDIUMS; seq++) {
    fill(medium_buf, medium_size(seq), my_rank, seq, 0);
    if (request_va(1, CAST(amudp_node_t, partner), H_MEDIUM, medium_buf, medium_size(seq), 0, 2, my_rank, seq) != AM_OK)
      fail("AMUDP_RequestIVA %d", seq);
    memset(medium_buf, 0xEE, sizeof medium_buf);
    expect_data[1] += 8 + CAST(long, medium_size(seq));
  }
  for (seq = 0; seq < LONGS; seq++) {
    static unsigned char lbuf[LONG_BYTES];
    /* one at a time: the previous one's handler has run and read its slot */
    wait_replies(SHORTS + MEDIUMS + seq, "longs");
    fill(lbuf, LONG_BYTES, my_rank, seq, 0);
    if (request_va(2, CAST(amudp_node_t, partner), H_LONG, lbuf, LONG_BYTES, CAST(uintptr_t, seq % 2) * LONG_BYTES, 2,
                   my_rank, seq) != AM_OK)
      fail("AMUDP_RequestXferVA %d", seq);
    expect_data[2] += 8 + LONG_BYTES;
  }
  wait_replies(SHORTS + MEDIUMS + LONGS, "replies");
  /* every rank has its replies past this barrier, so every request was served */
  if (AMX_SPMDBarrier() != AM_OK) fail("barrier after the exchange");
  if (AM_Poll(eb) != AM_OK || errors) fail("%d handler errors, first: %s", errors, first_error);
  if (pre_calls != 2 * (SHORTS + MEDIUMS + LONGS) || post_calls != pre_calls || pre_args_bad || in_handler)
    fail("handler callbacks: %ld pre, %ld post, %ld bad", pre_calls, post_calls, pre_args_bad);

  /* statistics: what this endpoint sent, exactly; what it received */
  if (AMX_GetEndpointStatistics(ep, &mine) != AM_OK) fail("AMX_GetEndpointStatistics");
  if (CAST(long, mine.RequestsSent[amudp_Short]) != SHORTS || CAST(long, mine.RequestsSent[amudp_Medium]) != MEDIUMS ||
      CAST(long, mine.RequestsSent[amudp_Long]) != LONGS)
    fail("RequestsSent %lu %lu %lu", CAST(unsigned long, mine.RequestsSent[0]), CAST(unsigned long, mine.RequestsSent[1]),
         CAST(unsigned long, mine.RequestsSent[2]));
  if (CAST(long, mine.RepliesSent[amudp_Short]) != SHORTS || CAST(long, mine.RepliesSent[amudp_Medium]) != MEDIUMS ||
      CAST(long, mine.RepliesSent[amudp_Long]) != LONGS)
    fail("RepliesSent %lu %lu %lu", CAST(unsigned long, mine.RepliesSent[0]), CAST(unsigned long, mine.RepliesSent[1]),
         CAST(unsigned long, mine.RepliesSent[2]));
  for (i = 0; i < 3; i++) {
    if (CAST(long, mine.RequestDataBytesSent[i]) != expect_data[i] || CAST(long, mine.ReplyDataBytesSent[i]) != expect_data[i] - (i == 0 ? 4 * SHORTS : 0))
      fail("data bytes of category %d: requests %lu (expected %ld), replies %lu", i,
           CAST(unsigned long, mine.RequestDataBytesSent[i]), expect_data[i], CAST(unsigned long, mine.ReplyDataBytesSent[i]));
    if (mine.RequestTotalBytesSent[i] < mine.RequestDataBytesSent[i] || mine.ReplyTotalBytesSent[i] < mine.ReplyDataBytesSent[i])
      fail("total bytes of category %d below its data bytes", i);
    /* each received at least once (udp: duplicates counted), exactly once on the NICs */
    if (mine.RequestsReceived[i] < mine.RequestsSent[i] || mine.RepliesReceived[i] < mine.RepliesSent[i])
      fail("received fewer than were sent in category %d", i);
    if (strcmp(transport, "udp") != 0 &&
        (mine.RequestsReceived[i] != mine.RequestsSent[i] || mine.RepliesReceived[i] != mine.RepliesSent[i] ||
         mine.RepliesSquashed[i] != 0))
      fail("category %d: %lu requests and %lu replies received on a NIC transport", i,
           CAST(unsigned long, mine.RequestsReceived[i]), CAST(unsigned long, mine.RepliesReceived[i]));
  }
  if (mine.ReturnedMessages != 0) fail("ReturnedMessages %lu", CAST(unsigned long, mine.ReturnedMessages));
  if (mine.TotalBytesSent < mine.RequestTotalBytesSent[0] + mine.RequestTotalBytesSent[1] + mine.RequestTotalBytesSent[2])
    fail("TotalBytesSent");
  if (mine.RequestMinLatency == 0 || mine.RequestMinLatency > mine.RequestMaxLatency ||
      mine.RequestSumLatency < mine.RequestMaxLatency)
    fail("latencies");
  all = CAST(amx_stats_t *, malloc(sizeof(amx_stats_t) * CAST(size_t, nprocs)));
  if (!all || AMX_SPMDAllGather(&mine, all, sizeof mine) != AM_OK) fail("AMX_SPMDAllGather of the statistics");
  all_sum = AMX_initial_stats;
  for (i = 0; i < nprocs; i++)
    if (AMX_AggregateStatistics(&all_sum, &all[i]) != AM_OK) fail("AMX_AggregateStatistics");
  if (CAST(long, all_sum.RequestsSent[amudp_Long]) != CAST(long, LONGS) * nprocs ||
      all_sum.RequestMinLatency > mine.RequestMinLatency || all_sum.RequestMaxLatency < mine.RequestMaxLatency)
    fail("aggregated statistics");
  if (my_rank == 0) {
    const char *text = AMX_DumpStatistics(stdout, &all_sum, 1);
    if (!text || !strstr(text, "Requests sent")) fail("AMX_DumpStatistics");
  }
  if (AMUDP_ResetEndpointStatistics(ep) != AM_OK || AMX_GetEndpointStatistics(ep, &mine) != AM_OK ||
      mine.RequestsSent[amudp_Short] != 0 || mine.RequestMinLatency != AMX_initial_stats.RequestMinLatency)
    fail("AMUDP_ResetEndpointStatistics");

  /* a translation's tag changed: the request carries the new one (the partner accepts only the job's) */
  if (AMX_SPMDBarrier() != AM_OK) fail("barrier before the tags");
  if (AM_GetTranslationTag(ep, partner, &t) != AM_OK || t != tag) fail("the job's tag");
  if (AMX_SetTranslationTag(ep, partner, tag) != AM_OK) fail("AMX_SetTranslationTag");
  if (AM_GetTranslationTag(ep, partner, &t) != AM_OK || t != tag) fail("AM_GetTranslationTag after Set");
  if (AM_Request2(ep, partner, H_TAGGED, my_rank, 77) != AM_OK) fail("AM_Request2 tagged");
  wait_replies(SHORTS + MEDIUMS + LONGS + 1, "tagged");
  if (AMX_SPMDBarrier() != AM_OK) fail("last barrier");
  if (AM_Poll(eb) != AM_OK || errors) fail("%d handler errors, first: %s", errors, first_error);
  printf("names ok rank %d of %d transport %s\n", my_rank, nprocs, transport);
  fflush(stdout);
  if (AMX_SPMDBarrier() != AM_OK) fail("barrier before the exit");
  AMX_SPMDkillmyprocess = my_killmyprocess;
  AMX_SPMDExit(exit_code);
  return 0;
}
