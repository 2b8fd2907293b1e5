/* vmmc_tight.c: a VMMC ping-pong that waits the way VMMC programs that poll
 * do: `while (notified == before) vmmc_poll(ep);`, no sleeps, no yields
 * (tests/integration/test_tight_poll.py runs it between two nodes).
 *
 *   node 1:  vmmc_tight serve 0 [--rounds N] [--bytes B] [--timeout S]
 *   node 0:  vmmc_tight send 1 [--rounds N] [--bytes B] [--timeout S]
 *
 * Each side exports an inbox and imports the other's. The sender sends N
 * (1000) pings of 4 .. 4096 bytes (inline and fetched by the NIC; --bytes:
 * all B bytes, the same B on both sides) with VMMC_NOTIFY, at offsets that
 * move through the inbox (ping r: message r of prog_common.h); the server's
 * notification handler records it, the server checks offset, length and
 * every byte, and answers with a pong of the same
 * length at the same offset of the sender's inbox (message r | 1 << 31),
 * which the sender checks. Each side prints one line:
 *   vmmc_tight send: N round trips, B bytes verified, X us per round trip
 *   vmmc_tight serve: N pings verified, B bytes
 * A mismatch prints "FAIL ..." (exit 1); the watchdog (S = 90 s) ends a hung
 * side with 3. */
#define _POSIX_C_SOURCE 200809L
#include "prog_common.h"
#include "ulnic/vmmc.h"

#define MSG_MIN 4u
#define MSG_MAX 4096u
#define INBOX_BYTES (512u * 1024u)

static vmmc_endpoint *ep;
static vmmc_proxy_t peer; /* the other side's inbox */
static unsigned char *inbox, *out;
static volatile int notified;
static void *last_data;
static size_t last_offset, last_length;

static void on_note(void *arg, void *data, size_t offset, size_t length, uint32_t src_node) {
  (void)arg, (void)src_node;
  last_data = data;
  last_offset = offset;
  last_length = length;
  ++notified;
}

static void check(int st, const char *what) {
  if (st != VMMC_OK) prog_fail("%s: %s", what, vmmc_strerror(st));
}

/* Spins until the next notification ran. */
static void wait_note(void) {
  int before = notified;
  while (notified == before) {
    int ran = vmmc_poll(ep);
    if (ran < 0) prog_fail("vmmc_poll: %s", vmmc_strerror(-ran));
  }
}

static size_t offset_of(int r) { return (size_t)(r % 97) * 4104u; }

/* The notification that just ran is message `seq` of `length` bytes at the offset of round r. */
static void check_note(int r, uint32_t seq, uint32_t length, const char *what) {
  long bad;
  if (last_offset != offset_of(r) || last_length != length || last_data != inbox + offset_of(r))
    prog_fail("round %d: %s of %lu bytes at offset %lu, expected %u at %lu", r, what, (unsigned long)last_length,
               (unsigned long)last_offset, length, (unsigned long)offset_of(r));
  if ((bad = prog_mismatch(inbox + last_offset, length, seq)) >= 0)
    prog_fail("round %d: byte %ld of the %u-byte %s is wrong", r, bad, length, what);
}

int main(int argc, char **argv) {
  int serving, peer_node, rounds, r;
  uint32_t fixed;
  unsigned long bytes = 0;
  size_t len = 0;
  double t0;
  if (argc < 3 || (strcmp(argv[1], "serve") && strcmp(argv[1], "send"))) {
    fprintf(stderr, "usage: vmmc_tight serve|send PEER_NODE [--rounds N] [--bytes B] [--timeout S]\n");
    return 2;
  }
  serving = !strcmp(argv[1], "serve");
  peer_node = atoi(argv[2]);
  prog_watchdog(serving ? "vmmc_tight serve" : "vmmc_tight send", (unsigned)prog_arg(argc, argv, "--timeout", 90));
  rounds = prog_arg(argc, argv, "--rounds", 1000);
  fixed = (uint32_t)prog_arg(argc, argv, "--bytes", 0);
  if (fixed && (fixed < MSG_MIN || fixed > MSG_MAX)) prog_fail("--bytes: %u .. %u", MSG_MIN, MSG_MAX);
  check(vmmc_open(NULL, -1, &ep), "vmmc_open");
  inbox = vmmc_alloc(ep, INBOX_BYTES);
  out = vmmc_alloc(ep, MSG_MAX);
  if (!inbox || !out) prog_fail("the slot heap is too small");
  memset(inbox, 0, INBOX_BYTES);
  check(vmmc_export(ep, serving ? "tight.server" : "tight.client", inbox, INBOX_BYTES, NULL, 0, on_note, NULL),
        "vmmc_export");
  check(vmmc_import(ep, peer_node, serving ? "tight.client" : "tight.server", 30000, &peer, &len), "vmmc_import");

  t0 = prog_now();
  for (r = 0; r < rounds; r++) {
    uint32_t length = fixed ? fixed : prog_size((uint32_t)r, (uint32_t)rounds, MSG_MIN, MSG_MAX);
    if (serving) {
      wait_note();
      check_note(r, (uint32_t)r, length, "ping");
      prog_fill(out, length, (uint32_t)r | 0x80000000u);
      check(vmmc_send(ep, out, peer + offset_of(r), length, VMMC_NOTIFY), "pong");
      bytes += length;
    } else {
      prog_fill(out, length, (uint32_t)r);
      check(vmmc_send(ep, out, peer + offset_of(r), length, VMMC_NOTIFY), "ping");
      wait_note();
      check_note(r, (uint32_t)r | 0x80000000u, length, "pong");
      bytes += 2ul * length;
    }
  }
  if (serving)
    printf("vmmc_tight serve: %d pings verified, %lu bytes\n", rounds, bytes);
  else
    printf("vmmc_tight send: %d round trips, %lu bytes verified, %.1f us per round trip\n", rounds, bytes,
           (prog_now() - t0) * 1e6 / (rounds > 0 ? rounds : 1));
  fflush(stdout);
  vmmc_close(ep);
  return 0;
}
