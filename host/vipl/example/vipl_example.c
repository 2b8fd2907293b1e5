/* A VIPL client/server as the VI Architecture books write one, using only
 * what the VIPL 1.0 spec defines. It shows that a
 * program written against the spec compiles unchanged against ulnic's
 * vipl.h, as C99 and as C++, and runs.
 *
 *   vipl_example server [device]            (device: nic<k>, default nic0)
 *   vipl_example client [device] [server]   (server: node<k>, default node1)
 *
 * The server waits for a connection on a discriminator and tells the client
 * where its buffer is; the client ping-pongs ROUNDS messages, then
 * RDMA-writes a block into the server's buffer with immediate data; the
 * server says it saw it, and the client hangs up.
 *
 * Built as C99 and as C++, linked with libvipl, it also runs: `ulnic demo`
 * and integration.vipl run it between two nodes. */
#define _POSIX_C_SOURCE 200809L /* nanosleep */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <vipl.h>

#define MSG_SIZE 4096
#define NUM_RECV 8
#define ROUNDS 100
#define RDMA_SIZE (MSG_SIZE / 2)
#define CONNECT_TIMEOUT 10000 /* ms */
#define RDMA_DONE_TAG 0x600DF00Du

static const char discriminator[] = "pingpong";

/* First message from the server: where the client may RDMA-write. */
struct rdma_target {
  VIP_UINT64 address;
  VIP_MEM_HANDLE handle;
  VIP_UINT32 length;
};

static VIP_NIC_HANDLE nic;
static VIP_NIC_ATTRIBUTES nic_attrs;
static VIP_PROTECTION_HANDLE ptag;
static VIP_CQ_HANDLE recv_cq;
static VIP_VI_HANDLE vi;
static VIP_MEM_HANDLE mem_handle;

/* One registered region: NUM_RECV + 1 descriptors, then a buffer for each
 * of them, then the RDMA target. Descriptors come first so that they keep
 * the region's VIP_DESCRIPTOR_ALIGNMENT. */
static void *region_raw;
static char *region;
static VIP_ULONG region_len;
static VIP_DESCRIPTOR *recv_desc[NUM_RECV];
static VIP_DESCRIPTOR *send_desc;
static char *recv_buf[NUM_RECV];
static char *send_buf;
static char *rdma_buf;

static const char *vip_strerror(VIP_RETURN rc) {
  static const char *const names[] = {"VIP_SUCCESS", "VIP_NOT_DONE", "VIP_INVALID_PARAMETER", "VIP_ERROR_RESOURCE",
                                      "VIP_TIMEOUT", "VIP_REJECT", "VIP_INVALID_RELIABILITY_LEVEL",
                                      "VIP_INVALID_MTU", "VIP_INVALID_QOS", "VIP_INVALID_PTAG",
                                      "VIP_INVALID_RDMAREAD", "VIP_DESCRIPTOR_ERROR", "VIP_INVALID_STATE",
                                      "VIP_ERROR_NAMESERVICE", "VIP_NO_MATCH"};
  if ((unsigned)rc < sizeof names / sizeof names[0]) return names[rc];
  return "unknown VIP_RETURN";
}

static void check(VIP_RETURN rc, const char *what) {
  if (rc != VIP_SUCCESS) {
    fprintf(stderr, "vipl_example: %s: %s\n", what, vip_strerror(rc));
    exit(1);
  }
}

static void check_status(const VIP_DESCRIPTOR *d, const char *what) {
  if (!(d->CS.Status & VIP_STATUS_DONE) || (d->CS.Status & VIP_STATUS_ERROR_MASK)) {
    fprintf(stderr, "vipl_example: %s: descriptor status 0x%lx\n", what, (unsigned long)d->CS.Status);
    exit(1);
  }
}

/* Set once the exchange is over: the peer may disconnect first then, and
 * the connection-lost error that brings is expected. */
static volatile int finished;

static void on_async_error(VIP_PVOID context, VIP_ERROR_DESCRIPTOR *err) {
  (void)context;
  if (finished && err->ErrorCode == VIP_ERROR_CONN_LOST) return;
  fprintf(stderr, "vipl_example: asynchronous error %d on resource %d (descriptor %p, op %lu)\n",
          (int)err->ErrorCode, (int)err->ResourceCode, (void *)err->DescriptorPtr, err->OpCode);
  if (err->ErrorCode == VIP_ERROR_CATASTROPHIC || err->ErrorCode == VIP_ERROR_CONN_LOST) exit(1);
}

static void setup_memory(void) {
  VIP_MEM_ATTRIBUTES mem_attrs;
  size_t descs = (NUM_RECV + 1) * sizeof(VIP_DESCRIPTOR);
  uintptr_t base;
  int i;

  region_len = (VIP_ULONG)(descs + (NUM_RECV + 1) * MSG_SIZE + RDMA_SIZE);
  region_raw = malloc(region_len + VIP_DESCRIPTOR_ALIGNMENT);
  if (region_raw == NULL) {
    fprintf(stderr, "vipl_example: out of memory\n");
    exit(1);
  }
  base = ((uintptr_t)region_raw + VIP_DESCRIPTOR_ALIGNMENT - 1) & ~(uintptr_t)(VIP_DESCRIPTOR_ALIGNMENT - 1);
  region = (char *)base;
  memset(region, 0, region_len);

  for (i = 0; i < NUM_RECV; i++) {
    recv_desc[i] = (VIP_DESCRIPTOR *)(region + i * sizeof(VIP_DESCRIPTOR));
    recv_buf[i] = region + descs + i * MSG_SIZE;
  }
  send_desc = (VIP_DESCRIPTOR *)(region + NUM_RECV * sizeof(VIP_DESCRIPTOR));
  send_buf = region + descs + NUM_RECV * MSG_SIZE;
  rdma_buf = send_buf + MSG_SIZE;

  mem_attrs.Ptag = ptag;
  mem_attrs.EnableRdmaWrite = VIP_TRUE; /* the client writes rdma_buf */
  mem_attrs.EnableRdmaRead = VIP_FALSE;
  check(VipRegisterMem(nic, region, region_len, &mem_attrs, &mem_handle), "VipRegisterMem");
}

static void setup(const char *device) {
  VIP_VI_ATTRIBUTES vi_attrs;

  check(VipOpenNic(device, &nic), "VipOpenNic");
  check(VipQueryNic(nic, &nic_attrs), "VipQueryNic");
  printf("%s: address length %u, max transfer %lu, MTU %lu, %lu VIs\n", nic_attrs.Name,
         (unsigned)nic_attrs.NicAddressLen, nic_attrs.MaxTransferSize, nic_attrs.NativeMTU, nic_attrs.MaxVI);
  if (!(nic_attrs.ReliabilityLevelSupport & VIP_SERVICE_RELIABLE_DELIVERY)) {
    fprintf(stderr, "vipl_example: %s has no reliable delivery\n", nic_attrs.Name);
    exit(1);
  }
  check(VipErrorCallback(nic, NULL, on_async_error), "VipErrorCallback");
  check(VipNSInit(nic, NULL), "VipNSInit");
  check(VipCreatePtag(nic, &ptag), "VipCreatePtag");
  setup_memory();
  check(VipCreateCQ(nic, NUM_RECV, &recv_cq), "VipCreateCQ");

  memset(&vi_attrs, 0, sizeof vi_attrs);
  vi_attrs.ReliabilityLevel = VIP_SERVICE_RELIABLE_DELIVERY;
  vi_attrs.MaxTransferSize = MSG_SIZE < nic_attrs.MaxTransferSize ? MSG_SIZE : nic_attrs.MaxTransferSize;
  vi_attrs.QoS = NULL;
  vi_attrs.Ptag = ptag;
  vi_attrs.EnableRdmaWrite = VIP_TRUE;
  vi_attrs.EnableRdmaRead = VIP_FALSE;
  /* Sends complete on the VI, receives on the CQ. */
  check(VipCreateVi(nic, &vi_attrs, NULL, recv_cq, &vi), "VipCreateVi");
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
  d->DS[0].Local.Length = MSG_SIZE;
  check(VipPostRecv(vi, d, mem_handle), "VipPostRecv");
}

static int recv_index(const VIP_DESCRIPTOR *d) {
  int i;
  for (i = 0; i < NUM_RECV; i++)
    if (recv_desc[i] == d) return i;
  fprintf(stderr, "vipl_example: completion for an unknown descriptor\n");
  exit(1);
}

/* Waits on the CQ, takes the receive off the VI, and returns its index. */
static int wait_recv(VIP_DESCRIPTOR **out) {
  VIP_VI_HANDLE done_vi;
  VIP_BOOLEAN is_recv;
  VIP_DESCRIPTOR *d;

  check(VipCQWait(recv_cq, VIP_INFINITE, &done_vi, &is_recv), "VipCQWait");
  if (done_vi != vi || !is_recv) {
    fprintf(stderr, "vipl_example: unexpected CQ entry\n");
    exit(1);
  }
  check(VipRecvDone(vi, &d), "VipRecvDone");
  check_status(d, "receive");
  *out = d;
  return recv_index(d);
}

static void send_message(VIP_UINT32 length) {
  VIP_DESCRIPTOR *d = send_desc;
  VIP_DESCRIPTOR *done;

  d->CS.Control = VIP_CONTROL_OP_SENDRECV;
  d->CS.SegCount = 1;
  d->CS.Length = length;
  d->CS.Status = 0;
  d->DS[0].Local.Data.Address = send_buf;
  d->DS[0].Local.Handle = mem_handle;
  d->DS[0].Local.Length = length;
  check(VipPostSend(vi, d, mem_handle), "VipPostSend");
  check(VipSendWait(vi, VIP_INFINITE, &done), "VipSendWait");
  check_status(done, "send");
}

/* RDMA write with immediate data: DS[0] names the remote buffer, DS[1] the
 * local bytes. The immediate data consumes a receive at the other end. */
static void rdma_write(const struct rdma_target *target, VIP_UINT32 length) {
  VIP_DESCRIPTOR *d = send_desc;
  VIP_DESCRIPTOR *done;

  d->CS.Control = VIP_CONTROL_OP_RDMAWRITE | VIP_CONTROL_IMMEDIATE;
  d->CS.SegCount = 2;
  d->CS.Length = length;
  d->CS.Status = 0;
  d->CS.ImmediateData = RDMA_DONE_TAG;
  d->DS[0].Remote.Data.AddressBits = target->address;
  d->DS[0].Remote.Handle = target->handle;
  d->DS[0].Remote.Reserved = 0;
  d->DS[1].Local.Data.Address = send_buf;
  d->DS[1].Local.Handle = mem_handle;
  d->DS[1].Local.Length = length;
  check(VipPostSend(vi, d, mem_handle), "VipPostSend (RDMA write)");
  check(VipSendWait(vi, VIP_INFINITE, &done), "VipSendWait (RDMA write)");
  check_status(done, "RDMA write");
}

/* host == NULL: this NIC's own address. */
static VIP_NET_ADDRESS *make_address(VIP_CHAR *host) {
  VIP_UINT16 host_len = nic_attrs.NicAddressLen;
  VIP_UINT16 disc_len = (VIP_UINT16)sizeof discriminator;
  VIP_NET_ADDRESS *a = (VIP_NET_ADDRESS *)malloc(sizeof(VIP_NET_ADDRESS) + host_len + disc_len);
  if (a == NULL) {
    fprintf(stderr, "vipl_example: out of memory\n");
    exit(1);
  }
  if (host == NULL) {
    memcpy(a->HostAddress, nic_attrs.LocalNicAddress, host_len);
  } else {
    check(VipNSGetHostByName(nic, host, a, 0), "VipNSGetHostByName");
  }
  a->HostAddressLen = host_len;
  a->DiscriminatorLen = disc_len;
  memcpy(a->HostAddress + host_len, discriminator, disc_len);
  return a;
}

static VIP_NET_ADDRESS *alloc_remote_address(void) {
  size_t bytes = sizeof(VIP_NET_ADDRESS) + nic_attrs.NicAddressLen + nic_attrs.MaxDiscriminatorLen;
  VIP_NET_ADDRESS *a = (VIP_NET_ADDRESS *)malloc(bytes);
  if (a == NULL) {
    fprintf(stderr, "vipl_example: out of memory\n");
    exit(1);
  }
  memset(a, 0, bytes);
  return a;
}

static void run_server(void) {
  VIP_NET_ADDRESS *local = make_address(NULL);
  VIP_NET_ADDRESS *remote = alloc_remote_address();
  VIP_VI_ATTRIBUTES remote_attrs;
  VIP_CONN_HANDLE conn;
  VIP_CHAR peer[64];
  VIP_ULONG peer_len = sizeof peer;
  struct rdma_target target;
  VIP_DESCRIPTOR *d;
  int i, round;

  for (i = 0; i < NUM_RECV; i++) post_recv(i); /* before the connection exists */

  check(VipConnectWait(nic, local, VIP_INFINITE, remote, &remote_attrs, &conn), "VipConnectWait");
  if (remote_attrs.ReliabilityLevel != VIP_SERVICE_RELIABLE_DELIVERY) {
    check(VipConnectReject(conn), "VipConnectReject");
    fprintf(stderr, "vipl_example: rejected a client with another reliability level\n");
    exit(1);
  }
  check(VipConnectAccept(conn, vi), "VipConnectAccept");
  if (VipNSGetHostByAddr(nic, remote, peer, &peer_len) == VIP_SUCCESS) printf("connected to %s\n", peer);

  target.address = (VIP_UINT64)(uintptr_t)rdma_buf;
  target.handle = mem_handle;
  target.length = RDMA_SIZE;
  memcpy(send_buf, &target, sizeof target);
  send_message((VIP_UINT32)sizeof target);

  for (round = 0; round < ROUNDS; round++) {
    i = wait_recv(&d);
    memcpy(send_buf, recv_buf[i], d->CS.Length);
    send_message(d->CS.Length); /* echo */
    post_recv(i);
  }

  i = wait_recv(&d);
  if ((d->CS.Status & VIP_STATUS_OP_MASK) != VIP_STATUS_OP_REMOTE_RDMA_WRITE ||
      !(d->CS.Status & VIP_STATUS_IMMEDIATE) || d->CS.ImmediateData != RDMA_DONE_TAG) {
    fprintf(stderr, "vipl_example: expected an RDMA write with immediate data\n");
    exit(1);
  }
  printf("RDMA write arrived: %.16s...\n", rdma_buf);
  post_recv(i);
  /* Tell the client, which hangs up then: the receives still posted here
   * come back flushed, and the connection-lost error is expected. */
  finished = 1;
  send_message(0);
  (void)VipRecvWait(vi, CONNECT_TIMEOUT, &d);
  free(local);
  free(remote);
}

/* A request that reaches the server before its VipConnectWait is answered
 * VIP_NO_MATCH at once: ask again after a short pause, as VIPL clients do,
 * for about CONNECT_TIMEOUT. */
static void connect_to_server(VIP_NET_ADDRESS *local, VIP_NET_ADDRESS *remote, VIP_VI_ATTRIBUTES *remote_attrs) {
  struct timespec pause;
  long waited = 0; /* ms */
  VIP_RETURN rc;

  pause.tv_sec = 0;
  pause.tv_nsec = 10L * 1000 * 1000;
  while ((rc = VipConnectRequest(vi, local, remote, CONNECT_TIMEOUT, remote_attrs)) == VIP_NO_MATCH &&
         waited < CONNECT_TIMEOUT) {
    nanosleep(&pause, NULL);
    waited += 10;
  }
  check(rc, "VipConnectRequest");
}

static void run_client(VIP_CHAR *server) {
  VIP_NET_ADDRESS *local = make_address(NULL);
  VIP_NET_ADDRESS *remote = make_address(server);
  VIP_VI_ATTRIBUTES remote_attrs;
  struct rdma_target target;
  VIP_DESCRIPTOR *d;
  VIP_UINT32 length;
  int i, round;

  for (i = 0; i < NUM_RECV; i++) post_recv(i);

  connect_to_server(local, remote, &remote_attrs);
  i = wait_recv(&d);
  memcpy(&target, recv_buf[i], sizeof target);
  post_recv(i);

  for (round = 0; round < ROUNDS; round++) {
    length = (VIP_UINT32)(1 + round * (MSG_SIZE - 1) / ROUNDS);
    memset(send_buf, 'a' + round % 26, length);
    send_message(length);
    i = wait_recv(&d);
    if (d->CS.Length != length || memcmp(recv_buf[i], send_buf, length) != 0) {
      fprintf(stderr, "vipl_example: round %d: echo differs\n", round);
      exit(1);
    }
    post_recv(i);
  }

  length = target.length < RDMA_SIZE ? target.length : RDMA_SIZE;
  memset(send_buf, 'R', length);
  rdma_write(&target, length);
  i = wait_recv(&d); /* the server has seen it */
  post_recv(i);
  printf("%d round trips and one %lu-byte RDMA write done\n", ROUNDS, (unsigned long)length);
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
  /* Connected, or Error if the peer disconnected first: back to Idle. */
  if (state != VIP_STATE_IDLE) check(VipDisconnect(vi), "VipDisconnect");
  /* Receives still posted come back flushed after the disconnect. */
  while (VipRecvDone(vi, &d) == VIP_SUCCESS) {
    if (!(d->CS.Status & VIP_STATUS_DESC_FLUSHED_ERROR)) check_status(d, "flushed receive");
  }
  check(VipDestroyVi(vi), "VipDestroyVi");
  check(VipDestroyCQ(recv_cq), "VipDestroyCQ");
  check(VipDeregisterMem(nic, region, mem_handle), "VipDeregisterMem");
  free(region_raw);
  check(VipDestroyPtag(nic, ptag), "VipDestroyPtag");
  check(VipNSShutdown(nic), "VipNSShutdown");
  check(VipCloseNic(nic), "VipCloseNic");
}

int main(int argc, char **argv) {
  static VIP_CHAR default_server[] = "node1";
  const char *device = argc > 2 ? argv[2] : "nic0";

  if (argc < 2 || (strcmp(argv[1], "server") != 0 && strcmp(argv[1], "client") != 0)) {
    fprintf(stderr, "usage: %s server [device] | client [device] [server]\n", argv[0]);
    return 2;
  }
  setup(device);
  if (strcmp(argv[1], "server") == 0)
    run_server();
  else
    run_client(argc > 3 ? argv[3] : default_server);
  teardown();
  return 0;
}
