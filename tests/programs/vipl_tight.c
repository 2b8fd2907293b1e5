/* vipl_tight.c: a VI client/server that waits the way VIA programs that poll
 * do: every completion is a loop on VipRecvDone / VipSendDone (or, with
 * --cq, on VipCQDone for the receives), no sleeps, no yields
 * (tests/integration/test_tight_poll.py runs it between two nodes).
 *
 *   vipl_tight server DEVICE [--cq] [--rounds N] [--bytes B] [--timeout S]
 *   vipl_tight client DEVICE SERVER [--cq] [--rounds N] [--bytes B] [--timeout S]
 *
 * (DEVICE: nic<k>; SERVER: node<k>.) One reliable-delivery VI; the client
 * sends N (500) pings of 8 .. 4096 bytes (--bytes: all B bytes; both sides
 * must be given the same B), one at a time (ping r: message r
 * of prog_common.h), the server checks each (length and every byte) and
 * answers with a pong of the same length (message r | 1 << 31), which the
 * client checks. Each side prints one line:
 *   vipl_tight client (recv|cq): N round trips, B bytes verified, X us per round trip
 *   vipl_tight server (recv|cq): N pings verified, B bytes
 * A mismatch prints "FAIL ..." (exit 1); the watchdog (S = 90 s) ends a hung
 * side with 3. */
#define _POSIX_C_SOURCE 200809L
#include <vipl.h>

#include "prog_common.h"

#define MSG_MIN 8u
#define MSG_MAX 4096u
#define NUM_RECV 4
#define CONNECT_TIMEOUT 10000 /* ms */

static const char discriminator[] = "tight";
static uint32_t fixed_bytes; /* --bytes B: every message B bytes (0: 8 .. 4096) */

static VIP_NIC_HANDLE nic;
static VIP_NIC_ATTRIBUTES nic_attrs;
static VIP_PROTECTION_HANDLE ptag;
static VIP_CQ_HANDLE recv_cq; /* --cq */
static VIP_VI_HANDLE vi;
static VIP_MEM_HANDLE mem_handle;
static int use_cq;

/* One registered region: the descriptors first (they keep its alignment),
 * then a buffer per descriptor. */
static void *region_raw;
static char *region;
static VIP_DESCRIPTOR *recv_desc[NUM_RECV], *send_desc;
static unsigned char *recv_buf[NUM_RECV], *send_buf;

/* Set once the exchange is over: the peer may hang up first then. */
static volatile int finished;

static void check(VIP_RETURN rc, const char *what) {
  if (rc != VIP_SUCCESS) prog_fail("%s: VIP_RETURN %d", what, (int)rc);
}

static void check_status(const VIP_DESCRIPTOR *d, const char *what) {
  if (!(d->CS.Status & VIP_STATUS_DONE) || (d->CS.Status & VIP_STATUS_ERROR_MASK))
    prog_fail("%s: descriptor status 0x%lx", what, (unsigned long)d->CS.Status);
}

static void on_async_error(VIP_PVOID context, VIP_ERROR_DESCRIPTOR *err) {
  (void)context;
  if (finished && err->ErrorCode == VIP_ERROR_CONN_LOST) return;
  prog_fail("asynchronous error %d on resource %d", (int)err->ErrorCode, (int)err->ResourceCode);
}

static void setup(const char *device) {
  VIP_MEM_ATTRIBUTES mem_attrs;
  VIP_VI_ATTRIBUTES vi_attrs;
  size_t descs = (NUM_RECV + 1) * sizeof(VIP_DESCRIPTOR), len = descs + (NUM_RECV + 1) * (size_t)MSG_MAX;
  int i;

  check(VipOpenNic(device, &nic), "VipOpenNic");
  check(VipQueryNic(nic, &nic_attrs), "VipQueryNic");
  check(VipErrorCallback(nic, NULL, on_async_error), "VipErrorCallback");
  check(VipNSInit(nic, NULL), "VipNSInit");
  check(VipCreatePtag(nic, &ptag), "VipCreatePtag");

  region_raw = malloc(len + VIP_DESCRIPTOR_ALIGNMENT);
  if (!region_raw) prog_fail("no memory");
  region = (char *)(((uintptr_t)region_raw + VIP_DESCRIPTOR_ALIGNMENT - 1) & ~(uintptr_t)(VIP_DESCRIPTOR_ALIGNMENT - 1));
  memset(region, 0, len);
  for (i = 0; i < NUM_RECV; i++) {
    recv_desc[i] = (VIP_DESCRIPTOR *)(region + i * sizeof(VIP_DESCRIPTOR));
    recv_buf[i] = (unsigned char *)region + descs + i * (size_t)MSG_MAX;
  }
  send_desc = (VIP_DESCRIPTOR *)(region + NUM_RECV * sizeof(VIP_DESCRIPTOR));
  send_buf = (unsigned char *)region + descs + NUM_RECV * (size_t)MSG_MAX;
  mem_attrs.Ptag = ptag;
  mem_attrs.EnableRdmaWrite = VIP_FALSE;
  mem_attrs.EnableRdmaRead = VIP_FALSE;
  check(VipRegisterMem(nic, region, (VIP_ULONG)len, &mem_attrs, &mem_handle), "VipRegisterMem");

  if (use_cq) check(VipCreateCQ(nic, NUM_RECV, &recv_cq), "VipCreateCQ");
  memset(&vi_attrs, 0, sizeof vi_attrs);
  vi_attrs.ReliabilityLevel = VIP_SERVICE_RELIABLE_DELIVERY;
  vi_attrs.MaxTransferSize = MSG_MAX;
  vi_attrs.Ptag = ptag;
  check(VipCreateVi(nic, &vi_attrs, NULL, use_cq ? recv_cq : NULL, &vi), "VipCreateVi");
}

static void post_recv(int i) {
  VIP_DESCRIPTOR *d = recv_desc[i];
  d->CS.Control = VIP_CONTROL_OP_SENDRECV;
  d->CS.SegCount = 1;
  d->CS.Length = 0;
  d->CS.Status = 0;
  d->CS.ImmediateData = 0;
  d->DS[0].Local.Data.Address = recv_buf[i];
  d->DS[0].Local.Handle = mem_handle;
  d->DS[0].Local.Length = MSG_MAX;
  check(VipPostRecv(vi, d, mem_handle), "VipPostRecv");
}

/* The next receive, by spinning; returns its index. */
static int recv_spin(VIP_DESCRIPTOR **out) {
  VIP_DESCRIPTOR *d = NULL;
  VIP_RETURN rc;
  int i;
  if (use_cq) {
    VIP_VI_HANDLE done_vi = NULL;
    VIP_BOOLEAN is_recv = VIP_FALSE;
    while ((rc = VipCQDone(recv_cq, &done_vi, &is_recv)) == VIP_NOT_DONE) {
    }
    check(rc, "VipCQDone");
    if (done_vi != vi || !is_recv) prog_fail("VipCQDone: an entry for another queue");
    rc = VipRecvDone(vi, &d); /* the CQ said it is there */
  } else {
    while ((rc = VipRecvDone(vi, &d)) == VIP_NOT_DONE) {
    }
  }
  check(rc, "VipRecvDone");
  check_status(d, "receive");
  for (i = 0; i < NUM_RECV; i++)
    if (recv_desc[i] == d) {
      *out = d;
      return i;
    }
  prog_fail("a completion for an unknown descriptor");
  return -1;
}

/* Sends `length` bytes of send_buf and spins until the send completed. */
static void send_spin(uint32_t length) {
  VIP_DESCRIPTOR *d = send_desc, *done = NULL;
  VIP_RETURN rc;
  d->CS.Control = VIP_CONTROL_OP_SENDRECV;
  d->CS.SegCount = 1;
  d->CS.Length = length;
  d->CS.Status = 0;
  d->DS[0].Local.Data.Address = send_buf;
  d->DS[0].Local.Handle = mem_handle;
  d->DS[0].Local.Length = length;
  check(VipPostSend(vi, d, mem_handle), "VipPostSend");
  while ((rc = VipSendDone(vi, &done)) == VIP_NOT_DONE) {
  }
  check(rc, "VipSendDone");
  if (done != d) prog_fail("VipSendDone: another descriptor");
  check_status(done, "send");
}

/* Checks receive i against message `seq` of `length` bytes, then reposts it. */
static void check_message(int i, const VIP_DESCRIPTOR *d, uint32_t seq, uint32_t length, const char *what, int round) {
  long bad;
  if (d->CS.Length != length) prog_fail("round %d: %s of %u bytes, expected %u", round, what, (unsigned)d->CS.Length, length);
  if ((bad = prog_mismatch(recv_buf[i], length, seq)) >= 0)
    prog_fail("round %d: byte %ld of the %u-byte %s is wrong", round, bad, length, what);
  post_recv(i);
}

static VIP_NET_ADDRESS *make_address(VIP_CHAR *host) {
  VIP_UINT16 host_len = nic_attrs.NicAddressLen, disc_len = (VIP_UINT16)sizeof discriminator;
  size_t room = sizeof(VIP_NET_ADDRESS) + host_len + nic_attrs.MaxDiscriminatorLen;
  VIP_NET_ADDRESS *a = malloc(room);
  if (!a) prog_fail("no memory");
  memset(a, 0, room);
  if (host) check(VipNSGetHostByName(nic, host, a, 0), "VipNSGetHostByName");
  else memcpy(a->HostAddress, nic_attrs.LocalNicAddress, host_len);
  a->HostAddressLen = host_len;
  a->DiscriminatorLen = disc_len;
  memcpy(a->HostAddress + host_len, discriminator, disc_len);
  return a;
}

static void run_server(int rounds) {
  VIP_NET_ADDRESS *local = make_address(NULL), *remote = make_address(NULL);
  VIP_VI_ATTRIBUTES remote_attrs;
  VIP_CONN_HANDLE conn;
  VIP_DESCRIPTOR *d;
  unsigned long bytes = 0;
  int r, i;
  for (i = 0; i < NUM_RECV; i++) post_recv(i);
  check(VipConnectWait(nic, local, VIP_INFINITE, remote, &remote_attrs, &conn), "VipConnectWait");
  check(VipConnectAccept(conn, vi), "VipConnectAccept");
  for (r = 0; r < rounds; r++) {
    uint32_t length = fixed_bytes ? fixed_bytes : prog_size((uint32_t)r, (uint32_t)rounds, MSG_MIN, MSG_MAX);
    i = recv_spin(&d);
    check_message(i, d, (uint32_t)r, length, "ping", r);
    bytes += length;
    prog_fill(send_buf, length, (uint32_t)r | 0x80000000u);
    /* The client hangs up once it has the last pong, which may be before
     * this side's VipSendDone sees the send complete. */
    if (r + 1 == rounds) finished = 1;
    send_spin(length);
  }
  printf("vipl_tight server (%s): %d pings verified, %lu bytes\n", use_cq ? "cq" : "recv", rounds, bytes);
  fflush(stdout);
  /* The client hangs up: the receives still posted come back flushed. */
  (void)VipRecvWait(vi, CONNECT_TIMEOUT, &d);
  free(local);
  free(remote);
}

static void run_client(VIP_CHAR *server, int rounds) {
  VIP_NET_ADDRESS *local = make_address(NULL), *remote = make_address(server);
  VIP_VI_ATTRIBUTES remote_attrs;
  VIP_DESCRIPTOR *d;
  unsigned long bytes = 0;
  double t0;
  int r, i;
  for (i = 0; i < NUM_RECV; i++) post_recv(i);
  {
    /* VIP_NO_MATCH: the server does not wait yet; ask again, as VIPL clients do. */
    const struct timespec pause = {0, 1000000};
    const double deadline = prog_now() + CONNECT_TIMEOUT / 1e3;
    VIP_RETURN rc;
    while ((rc = VipConnectRequest(vi, local, remote, CONNECT_TIMEOUT, &remote_attrs)) == VIP_NO_MATCH &&
           prog_now() < deadline)
      nanosleep(&pause, NULL);
    check(rc, "VipConnectRequest");
  }
  t0 = prog_now();
  for (r = 0; r < rounds; r++) {
    uint32_t length = fixed_bytes ? fixed_bytes : prog_size((uint32_t)r, (uint32_t)rounds, MSG_MIN, MSG_MAX);
    prog_fill(send_buf, length, (uint32_t)r);
    send_spin(length);
    i = recv_spin(&d);
    check_message(i, d, (uint32_t)r | 0x80000000u, length, "pong", r);
    bytes += 2ul * length;
  }
  finished = 1;
  printf("vipl_tight client (%s): %d round trips, %lu bytes verified, %.1f us per round trip\n",
         use_cq ? "cq" : "recv", rounds, bytes, (prog_now() - t0) * 1e6 / (rounds > 0 ? rounds : 1));
  free(local);
  free(remote);
}

static void teardown(void) {
  VIP_VI_STATE state;
  VIP_VI_ATTRIBUTES attrs;
  VIP_BOOLEAN send_empty, recv_empty;
  VIP_DESCRIPTOR *d;
  finished = 1;
  check(VipQueryVi(vi, &state, &attrs, &send_empty, &recv_empty), "VipQueryVi");
  if (state != VIP_STATE_IDLE) check(VipDisconnect(vi), "VipDisconnect");
  while (VipRecvDone(vi, &d) == VIP_SUCCESS) {
  } /* flushed */
  check(VipDestroyVi(vi), "VipDestroyVi");
  if (use_cq) check(VipDestroyCQ(recv_cq), "VipDestroyCQ");
  check(VipDeregisterMem(nic, region, mem_handle), "VipDeregisterMem");
  free(region_raw);
  check(VipDestroyPtag(nic, ptag), "VipDestroyPtag");
  check(VipNSShutdown(nic), "VipNSShutdown");
  check(VipCloseNic(nic), "VipCloseNic");
}

int main(int argc, char **argv) {
  int server, rounds;
  if (argc < 3 || (strcmp(argv[1], "server") && strcmp(argv[1], "client")) ||
      (!strcmp(argv[1], "client") && argc < 4)) {
    fprintf(stderr, "usage: %s server DEVICE | client DEVICE SERVER [--cq] [--rounds N] [--bytes B] [--timeout S]\n",
            argv[0]);
    return 2;
  }
  server = !strcmp(argv[1], "server");
  prog_watchdog(server ? "vipl_tight server" : "vipl_tight client", (unsigned)prog_arg(argc, argv, "--timeout", 90));
  use_cq = prog_flag(argc, argv, "--cq");
  rounds = prog_arg(argc, argv, "--rounds", 500);
  fixed_bytes = (uint32_t)prog_arg(argc, argv, "--bytes", 0);
  if (fixed_bytes && (fixed_bytes < MSG_MIN || fixed_bytes > MSG_MAX)) prog_fail("--bytes: %u .. %u", MSG_MIN, MSG_MAX);
  setup(argv[2]);
  if (server) run_server(rounds);
  else run_client(argv[3], rounds);
  teardown();
  return 0;
}
