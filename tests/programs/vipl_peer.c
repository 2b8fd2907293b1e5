/* One side of a VI connection that waits for it to end (integration.vipl:
 * a dead NIC breaks its peers' connections).
 *
 *   vipl_peer serve DEVICE DISCRIMINATOR          accept one connection, then
 *       wait until it breaks: prints "connected", then "lost <error code>
 *       after <ms> ms" and exits 0 (1 if nothing broke within 60 s)
 *   vipl_peer connect DEVICE NODE DISCRIMINATOR   connect, print "connected",
 *       then wait to be killed
 *
 * Plain VIPL 1.0 (C99). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <vipl.h>

static VIP_NIC_HANDLE nic;
static VIP_VI_HANDLE vi;
static volatile int lost_code = -1;

static void die(const char *what, VIP_RETURN rc) {
  fprintf(stderr, "vipl_peer: %s: %d\n", what, (int)rc);
  exit(1);
}

static void on_error(VIP_PVOID context, VIP_ERROR_DESCRIPTOR *e) {
  (void)context;
  if (e->ViHandle == vi) lost_code = (int)e->ErrorCode;
}

static VIP_NET_ADDRESS *address(const char *host, const char *disc) {
  size_t n = strlen(disc);
  VIP_NET_ADDRESS *a = calloc(1, sizeof *a + 2 + n);
  VIP_RETURN rc = VipNSGetHostByName(nic, (VIP_CHAR *)host, a, 0);
  if (rc != VIP_SUCCESS) die("VipNSGetHostByName", rc);
  a->DiscriminatorLen = (VIP_UINT16)n;
  memcpy(a->HostAddress + a->HostAddressLen, disc, n);
  return a;
}

static double now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

int main(int argc, char **argv) {
  VIP_PROTECTION_HANDLE ptag;
  VIP_VI_ATTRIBUTES attrs, remote_attrs;
  VIP_RETURN rc;
  char self[16];
  int serve = argc == 4 && strcmp(argv[1], "serve") == 0;
  int client = argc == 5 && strcmp(argv[1], "connect") == 0;

  if (!serve && !client) {
    fprintf(stderr, "usage: vipl_peer serve DEVICE DISC | connect DEVICE NODE DISC\n");
    return 2;
  }
  if ((rc = VipOpenNic(argv[2], &nic)) != VIP_SUCCESS) die("VipOpenNic", rc);
  if ((rc = VipErrorCallback(nic, NULL, on_error)) != VIP_SUCCESS) die("VipErrorCallback", rc);
  if ((rc = VipCreatePtag(nic, &ptag)) != VIP_SUCCESS) die("VipCreatePtag", rc);
  memset(&attrs, 0, sizeof attrs);
  attrs.ReliabilityLevel = VIP_SERVICE_RELIABLE_DELIVERY;
  attrs.MaxTransferSize = 4096;
  attrs.Ptag = ptag;
  if ((rc = VipCreateVi(nic, &attrs, NULL, NULL, &vi)) != VIP_SUCCESS) die("VipCreateVi", rc);
  snprintf(self, sizeof self, "%s", argv[2]); /* "nic<k>" names the local host too */

  if (serve) {
    VIP_NET_ADDRESS *local = address(self, argv[3]);
    VIP_NET_ADDRESS *remote = calloc(1, sizeof *remote + 2 + 64);
    VIP_CONN_HANDLE conn;
    VIP_VI_STATE state = VIP_STATE_CONNECTED;
    VIP_BOOLEAN s_empty, r_empty;
    double t0, deadline;
    if ((rc = VipConnectWait(nic, local, 60000, remote, &remote_attrs, &conn)) != VIP_SUCCESS) die("VipConnectWait", rc);
    if ((rc = VipConnectAccept(conn, vi)) != VIP_SUCCESS) die("VipConnectAccept", rc);
    printf("connected\n");
    fflush(stdout);
    t0 = now_ms();
    deadline = t0 + 60000;
    while (state != VIP_STATE_ERROR && now_ms() < deadline) {
      usleep(20000);
      if ((rc = VipQueryVi(vi, &state, &attrs, &s_empty, &r_empty)) != VIP_SUCCESS) die("VipQueryVi", rc);
    }
    free(local);
    free(remote);
    if (state != VIP_STATE_ERROR) {
      printf("still connected after 60 s\n");
      return 1;
    }
    printf("lost %d after %.0f ms\n", lost_code, now_ms() - t0);
    return 0;
  } else {
    VIP_NET_ADDRESS *local = address(self, "");
    VIP_NET_ADDRESS *remote = address(argv[3], argv[4]);
    double deadline = now_ms() + 60000;
    /* VIP_NO_MATCH: the server does not wait yet; ask again. */
    while ((rc = VipConnectRequest(vi, local, remote, 60000, &remote_attrs)) == VIP_NO_MATCH && now_ms() < deadline)
      usleep(10000);
    if (rc != VIP_SUCCESS) die("VipConnectRequest", rc);
    printf("connected\n");
    fflush(stdout);
    for (;;) pause();
  }
}
