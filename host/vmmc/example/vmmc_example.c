/* VMMC example, in C: a receiver exports an inbox and echoes every notified
 * message into the sender's own export; the sender does a ping-pong and a
 * 1 MiB notified bulk transfer, and checks every byte.
 *
 *   node 1:  vmmc_example serve 0        (peer = node 0)
 *   node 0:  vmmc_example send 1         (peer = node 1)
 *
 * ULNIC_CLUSTER / ULNIC_NODE pick the node each process attaches to. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ulnic/vmmc.h"

#define INBOX_BYTES (2u << 20)
#define ROUNDS 200
#define BULK (1u << 20)

static vmmc_endpoint* ep;
static vmmc_proxy_t peer;     /* the other side's export */
static int notified;
static size_t last_offset, last_length;

static void on_note(void* arg, void* data, size_t offset, size_t length, uint32_t src_node) {
  (void)arg, (void)data, (void)src_node;
  last_offset = offset;
  last_length = length;
  ++notified;
}

static int check(int st, const char* what) {
  if (st != VMMC_OK) {
    fprintf(stderr, "vmmc_example: %s: %s\n", what, vmmc_strerror(st));
    exit(1);
  }
  return st;
}

static void wait_note(void) {
  int before = notified;
  while (notified == before)
    if (vmmc_wait(ep, 10000) < 0) {
      fprintf(stderr, "vmmc_example: no notification within 10 s\n");
      exit(1);
    }
}

static double now_us(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

int main(int argc, char** argv) {
  if (argc != 3 || (strcmp(argv[1], "serve") && strcmp(argv[1], "send"))) {
    fprintf(stderr, "usage: vmmc_example serve|send PEER_NODE\n");
    return 2;
  }
  int serving = !strcmp(argv[1], "serve"), peer_node = atoi(argv[2]);
  check(vmmc_open(NULL, -1, &ep), "open");
  unsigned char* inbox = vmmc_alloc(ep, INBOX_BYTES);
  if (!inbox) return fprintf(stderr, "vmmc_example: slot heap too small\n"), 1;
  memset(inbox, 0, INBOX_BYTES);
  const char* mine = serving ? "example.server" : "example.client";
  const char* theirs = serving ? "example.client" : "example.server";
  check(vmmc_export(ep, mine, inbox, INBOX_BYTES, NULL, 0, on_note, NULL), "export");
  size_t len = 0;
  check(vmmc_import(ep, peer_node, theirs, 30000, &peer, &len), "import");

  if (serving) {
    /* Echo: whatever arrives with a notification goes back to the same offset. */
    for (;;) {
      wait_note();
      if (last_length == 4 && !memcmp(inbox + last_offset, "QUIT", 4)) break;
      check(vmmc_send(ep, inbox + last_offset, peer + last_offset, last_length, VMMC_NOTIFY), "echo");
    }
    printf("vmmc_example: server done\n");
  } else {
    unsigned char ping[64];
    double t0 = now_us();
    for (int i = 0; i < ROUNDS; ++i) {
      memset(ping, i & 0xff, sizeof ping);
      check(vmmc_send(ep, ping, peer, sizeof ping, VMMC_NOTIFY), "ping");
      wait_note();
      if (memcmp(inbox, ping, sizeof ping)) return fprintf(stderr, "vmmc_example: pong %d corrupt\n", i), 1;
    }
    double rtt = (now_us() - t0) / ROUNDS;
    unsigned char* bulk = malloc(BULK); /* ordinary memory: the library registers it (user-managed TLB) */
    for (unsigned i = 0; i < BULK; ++i) bulk[i] = (unsigned char)(i * 2654435761u >> 24);
    t0 = now_us();
    check(vmmc_send(ep, bulk, peer + 4096, BULK, VMMC_NOTIFY), "bulk");
    wait_note();
    double bulk_us = now_us() - t0;
    if (last_offset != 4096 || last_length != BULK || memcmp(inbox + 4096, bulk, BULK))
      return fprintf(stderr, "vmmc_example: bulk echo corrupt\n"), 1;
    check(vmmc_send(ep, "QUIT", peer, 4, VMMC_NOTIFY), "quit");
    printf("vmmc_example: %d round trips of 64 B, %.1f us each; 1 MiB there and back verified in %.1f ms\n", ROUNDS,
           rtt, bulk_us / 1000);
    free(bulk);
  }
  vmmc_close(ep);
  return 0;
}
