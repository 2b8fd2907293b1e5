/* A ping-pong over a small message-passing library written the way VIPL
 * libraries for M-VIA and cLAN were (issue 24): plain VIPL 1.0 and C99.
 *
 *   vipl_regcache_mpl DEVICE SELF PEER [--iters N] [--max BYTES]
 *
 * DEVICE is what VipOpenNic gets (an M-VIA path such as /dev/via_eth0 names
 * this process's node); SELF and PEER are host names for the name service.
 * As such programs do, the two processes pick their rank by name (the
 * smaller name is rank 0, the server) and find each other by name.
 *
 * The library ("mpl_*"): messages below 16 KiB go eagerly, copied through
 * bounce buffers registered once; from 16 KiB on a rendezvous registers the
 * user's buffers per message -- the sender's for the RDMA write, the
 * receiver's as its target (RTS, CTS with address and memory handle, RDMA
 * write with immediate data) -- through a registration cache of a few
 * entries that deregisters on eviction. The application frees and
 * re-allocates its buffers (malloc and mmap) as it goes and tells the
 * library, as an allocator hook would (mpl_buffer_freed); the library marks
 * those entries stale and deregisters them only when they are evicted, when
 * the memory is long gone (VipDeregisterMem of freed, unmapped memory). A
 * registration the library cannot make (VIP_ERROR_RESOURCE) evicts every
 * unused entry and tries once more.
 *
 * Every byte of every message is checked at both ends. Prints the one-way
 * time per size (information only), the cache's counts, and "OK" at the
 * end; exits 0 only if everything arrived intact. Sets no error callback:
 * the peer's orderly disconnect at the end must not print anything. */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <vipl.h>

#define EAGER_LIMIT (16 * 1024)
#define NUM_RECV 8
#define CACHE_SLOTS 4
#define CONNECT_TIMEOUT_MS 60000
#define WAIT_MS 30000

enum { MSG_EAGER = 1, MSG_RTS = 2, MSG_CTS = 3, MSG_FIN = 4 };

struct header {
  VIP_UINT32 type;
  VIP_UINT32 tag;
  VIP_UINT64 length;
  VIP_UINT64 address; /* CTS: where to write */
  VIP_MEM_HANDLE handle;
  VIP_UINT32 pad;
};

#define BOUNCE_BYTES (sizeof(struct header) + EAGER_LIMIT)

/* ---------------------------------------------------------------- library */

struct cache_entry {
  int used, stale, refs;
  char *addr;
  size_t length;
  VIP_MEM_HANDLE handle;
  unsigned long last_use;
};

static struct {
  VIP_NIC_HANDLE nic;
  VIP_NIC_ATTRIBUTES attrs;
  VIP_PROTECTION_HANDLE ptag;
  VIP_VI_HANDLE vi;
  int rank;
  /* registered once: descriptors, then bounce buffers */
  char *region;
  size_t region_len;
  VIP_MEM_HANDLE region_handle;
  VIP_DESCRIPTOR *recv_desc[NUM_RECV], *send_desc;
  char *recv_buf[NUM_RECV], *send_buf;
  struct cache_entry cache[CACHE_SLOTS];
  unsigned long clock;
  unsigned long registrations, hits, evictions, freed_deregistered, retries;
} mpl;

static void fail(const char *what, long detail) {
  fprintf(stderr, "vipl_regcache_mpl rank %d: FAIL: %s (%ld)\n", mpl.rank, what, detail);
  exit(1);
}

static void check(VIP_RETURN rc, const char *what) {
  if (rc != VIP_SUCCESS) fail(what, (long)rc);
}

static double now_us(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

static void evict(struct cache_entry *e) {
  /* The memory may have been freed and unmapped long ago: VipDeregisterMem
   * must not mind. */
  check(VipDeregisterMem(mpl.nic, e->addr, e->handle), "VipDeregisterMem (eviction)");
  mpl.evictions++;
  if (e->stale) mpl.freed_deregistered++;
  e->used = 0;
}

static int evict_unused(void) {
  int i, n = 0;
  for (i = 0; i < CACHE_SLOTS; i++)
    if (mpl.cache[i].used && mpl.cache[i].refs == 0) evict(&mpl.cache[i]), n++;
  return n;
}

/* A registration covering [addr, addr + length), from the cache or new. */
static struct cache_entry *cache_get(void *addr, size_t length) {
  struct cache_entry *slot = NULL;
  VIP_MEM_ATTRIBUTES attrs;
  VIP_RETURN rc;
  char *p = addr;
  int i;

  mpl.clock++;
  for (i = 0; i < CACHE_SLOTS; i++) {
    struct cache_entry *e = &mpl.cache[i];
    if (e->used && !e->stale && p >= e->addr && p + length <= e->addr + e->length) {
      e->refs++;
      e->last_use = mpl.clock;
      mpl.hits++;
      return e;
    }
  }
  for (i = 0; i < CACHE_SLOTS && !slot; i++)
    if (!mpl.cache[i].used) slot = &mpl.cache[i];
  if (!slot) {
    /* Evict the least recently used entry nobody holds. */
    for (i = 0; i < CACHE_SLOTS; i++) {
      struct cache_entry *e = &mpl.cache[i];
      if (e->refs == 0 && (!slot || e->last_use < slot->last_use)) slot = e;
    }
    if (!slot) fail("registration cache: every entry is in use", CACHE_SLOTS);
    evict(slot);
  }
  attrs.Ptag = mpl.ptag;
  attrs.EnableRdmaWrite = VIP_TRUE;
  attrs.EnableRdmaRead = VIP_FALSE;
  rc = VipRegisterMem(mpl.nic, addr, (VIP_ULONG)length, &attrs, &slot->handle);
  if (rc == VIP_ERROR_RESOURCE && evict_unused()) {
    mpl.retries++;
    rc = VipRegisterMem(mpl.nic, addr, (VIP_ULONG)length, &attrs, &slot->handle);
  }
  check(rc, "VipRegisterMem (cache)");
  slot->used = 1;
  slot->stale = 0;
  slot->refs = 1;
  slot->addr = p;
  slot->length = length;
  slot->last_use = mpl.clock;
  mpl.registrations++;
  return slot;
}

static void cache_put(struct cache_entry *e) { e->refs--; }

/* What an allocator hook tells the library: [addr, +length) is gone. The
 * registrations stay until evicted. */
static void mpl_buffer_freed(void *addr, size_t length) {
  char *p = addr;
  int i;
  for (i = 0; i < CACHE_SLOTS; i++) {
    struct cache_entry *e = &mpl.cache[i];
    if (e->used && p < e->addr + e->length && e->addr < p + length) e->stale = 1;
  }
}

static void post_recv(int i) {
  VIP_DESCRIPTOR *d = mpl.recv_desc[i];
  memset(d, 0, sizeof *d);
  d->CS.SegCount = 1;
  d->DS[0].Local.Data.Address = mpl.recv_buf[i];
  d->DS[0].Local.Handle = mpl.region_handle;
  d->DS[0].Local.Length = BOUNCE_BYTES;
  check(VipPostRecv(mpl.vi, d, mpl.region_handle), "VipPostRecv");
}

static void wait_send(const char *what) {
  VIP_DESCRIPTOR *d;
  check(VipSendWait(mpl.vi, WAIT_MS, &d), what);
  if (d->CS.Status & VIP_STATUS_ERROR_MASK) fail(what, (long)d->CS.Status);
}

/* Sends a control message or an eager message (payload copied). */
static void send_message(VIP_UINT32 type, VIP_UINT32 tag, const void *payload, size_t length, VIP_UINT64 address,
                         VIP_MEM_HANDLE handle) {
  VIP_DESCRIPTOR *d = mpl.send_desc;
  struct header h;
  memset(&h, 0, sizeof h);
  h.type = type;
  h.tag = tag;
  h.length = length;
  h.address = address;
  h.handle = handle;
  memcpy(mpl.send_buf, &h, sizeof h);
  if (type == MSG_EAGER) memcpy(mpl.send_buf + sizeof h, payload, length);
  memset(d, 0, sizeof *d);
  d->CS.SegCount = 1;
  d->CS.Length = (VIP_UINT32)(sizeof h + (type == MSG_EAGER ? length : 0));
  d->DS[0].Local.Data.Address = mpl.send_buf;
  d->DS[0].Local.Handle = mpl.region_handle;
  d->DS[0].Local.Length = d->CS.Length;
  check(VipPostSend(mpl.vi, d, mpl.region_handle), "VipPostSend");
  wait_send("send");
}

/* The next receive; its index (to post again) in *index. */
static VIP_DESCRIPTOR *next_recv(int *index) {
  VIP_DESCRIPTOR *d;
  int i;
  check(VipRecvWait(mpl.vi, WAIT_MS, &d), "VipRecvWait");
  if (d->CS.Status & VIP_STATUS_ERROR_MASK) fail("receive status", (long)d->CS.Status);
  for (i = 0; i < NUM_RECV; i++)
    if (mpl.recv_desc[i] == d) break;
  if (i == NUM_RECV) fail("a receive of an unknown descriptor", 0);
  *index = i;
  return d;
}

static struct header next_message(VIP_UINT32 want) {
  int i;
  struct header h;
  next_recv(&i);
  memcpy(&h, mpl.recv_buf[i], sizeof h);
  post_recv(i);
  if (h.type != want) fail("an unexpected message type", (long)h.type);
  return h;
}

static void mpl_send(const void *buf, size_t length, VIP_UINT32 tag) {
  struct cache_entry *reg;
  struct header cts;
  VIP_DESCRIPTOR *d = mpl.send_desc;

  if (length < EAGER_LIMIT) {
    send_message(MSG_EAGER, tag, buf, length, 0, 0);
    return;
  }
  reg = cache_get((void *)buf, length);
  send_message(MSG_RTS, tag, NULL, length, 0, 0);
  cts = next_message(MSG_CTS);
  if (cts.tag != tag || cts.length != length) fail("a CTS for another message", (long)cts.tag);
  memset(d, 0, sizeof *d);
  d->CS.Control = VIP_CONTROL_OP_RDMAWRITE | VIP_CONTROL_IMMEDIATE;
  d->CS.SegCount = 2;
  d->CS.Length = (VIP_UINT32)length;
  d->CS.ImmediateData = tag;
  d->DS[0].Remote.Data.AddressBits = cts.address;
  d->DS[0].Remote.Handle = cts.handle;
  d->DS[1].Local.Data.Address = (void *)buf;
  d->DS[1].Local.Handle = reg->handle;
  d->DS[1].Local.Length = (VIP_UINT32)length;
  check(VipPostSend(mpl.vi, d, mpl.region_handle), "VipPostSend (RDMA write)");
  wait_send("RDMA write");
  cache_put(reg);
}

static void mpl_recv(void *buf, size_t length, VIP_UINT32 tag) {
  int i;
  struct header h;
  VIP_DESCRIPTOR *d = next_recv(&i);
  struct cache_entry *reg;

  memcpy(&h, mpl.recv_buf[i], sizeof h);
  if (h.tag != tag || h.length != length) fail("a message of another tag or length", (long)h.tag);
  if (h.type == MSG_EAGER) {
    if (d->CS.Length != sizeof h + length) fail("an eager message of another length", (long)d->CS.Length);
    memcpy(buf, mpl.recv_buf[i] + sizeof h, length);
    post_recv(i);
    return;
  }
  if (h.type != MSG_RTS) fail("an unexpected message type", (long)h.type);
  post_recv(i);
  reg = cache_get(buf, length);
  send_message(MSG_CTS, tag, NULL, length, (VIP_UINT64)(uintptr_t)buf, reg->handle);
  d = next_recv(&i);  /* the RDMA write's immediate data: the bytes are in place */
  if ((d->CS.Status & VIP_STATUS_OP_MASK) != VIP_STATUS_OP_REMOTE_RDMA_WRITE ||
      !(d->CS.Status & VIP_STATUS_IMMEDIATE) || d->CS.ImmediateData != tag)
    fail("the RDMA write's completion", (long)d->CS.Status);
  post_recv(i);
  cache_put(reg);
}

static void mpl_init(const char *device, const char *self, const char *peer) {
  VIP_VI_ATTRIBUTES vi_attrs, remote_attrs;
  VIP_MEM_ATTRIBUTES mem_attrs;
  VIP_NET_ADDRESS *me, *them;
  static const char disc[] = "mpl";
  size_t addr_bytes, descs;
  int i;

  mpl.rank = strcmp(self, peer) < 0 ? 0 : 1;
  check(VipOpenNic(device, &mpl.nic), "VipOpenNic");
  check(VipQueryNic(mpl.nic, &mpl.attrs), "VipQueryNic");
  check(VipNSInit(mpl.nic, NULL), "VipNSInit");
  check(VipCreatePtag(mpl.nic, &mpl.ptag), "VipCreatePtag");

  descs = (NUM_RECV + 1) * sizeof(VIP_DESCRIPTOR);
  descs = (descs + VIP_DESCRIPTOR_ALIGNMENT - 1) & ~(size_t)(VIP_DESCRIPTOR_ALIGNMENT - 1);
  mpl.region_len = descs + (NUM_RECV + 1) * BOUNCE_BYTES;
  if (posix_memalign((void **)&mpl.region, 4096, mpl.region_len) != 0) fail("out of memory", 0);
  memset(mpl.region, 0, mpl.region_len);
  for (i = 0; i < NUM_RECV; i++) {
    mpl.recv_desc[i] = (VIP_DESCRIPTOR *)(mpl.region + i * sizeof(VIP_DESCRIPTOR));
    mpl.recv_buf[i] = mpl.region + descs + i * BOUNCE_BYTES;
  }
  mpl.send_desc = (VIP_DESCRIPTOR *)(mpl.region + NUM_RECV * sizeof(VIP_DESCRIPTOR));
  mpl.send_buf = mpl.region + descs + NUM_RECV * BOUNCE_BYTES;
  mem_attrs.Ptag = mpl.ptag;
  mem_attrs.EnableRdmaWrite = VIP_FALSE;
  mem_attrs.EnableRdmaRead = VIP_FALSE;
  check(VipRegisterMem(mpl.nic, mpl.region, (VIP_ULONG)mpl.region_len, &mem_attrs, &mpl.region_handle),
        "VipRegisterMem (bounce buffers)");

  memset(&vi_attrs, 0, sizeof vi_attrs);
  vi_attrs.ReliabilityLevel = VIP_SERVICE_RELIABLE_DELIVERY;
  vi_attrs.MaxTransferSize = mpl.attrs.MaxTransferSize;
  vi_attrs.Ptag = mpl.ptag;
  vi_attrs.EnableRdmaWrite = VIP_TRUE;
  check(VipCreateVi(mpl.nic, &vi_attrs, NULL, NULL, &mpl.vi), "VipCreateVi");
  for (i = 0; i < NUM_RECV; i++) post_recv(i);

  /* Addresses by name: ours must be this NIC's. */
  addr_bytes = sizeof(VIP_NET_ADDRESS) + mpl.attrs.NicAddressLen + mpl.attrs.MaxDiscriminatorLen;
  me = calloc(1, addr_bytes);
  them = calloc(1, addr_bytes);
  if (!me || !them) fail("out of memory", 0);
  check(VipNSGetHostByName(mpl.nic, (VIP_CHAR *)self, me, 0), "VipNSGetHostByName (self)");
  check(VipNSGetHostByName(mpl.nic, (VIP_CHAR *)peer, them, 0), "VipNSGetHostByName (peer)");
  if (memcmp(me->HostAddress, mpl.attrs.LocalNicAddress, mpl.attrs.NicAddressLen) != 0)
    fail("SELF does not name this NIC's node", 0);
  me->DiscriminatorLen = them->DiscriminatorLen = (VIP_UINT16)(sizeof disc - 1);
  memcpy(me->HostAddress + me->HostAddressLen, disc, sizeof disc - 1);
  memcpy(them->HostAddress + them->HostAddressLen, disc, sizeof disc - 1);

  if (mpl.rank == 0) {
    VIP_CONN_HANDLE conn;
    VIP_NET_ADDRESS *from = calloc(1, addr_bytes);
    if (!from) fail("out of memory", 0);
    check(VipConnectWait(mpl.nic, me, CONNECT_TIMEOUT_MS, from, &remote_attrs, &conn), "VipConnectWait");
    check(VipConnectAccept(conn, mpl.vi), "VipConnectAccept");
    free(from);
  } else {
    /* The server may not wait yet: VIP_NO_MATCH, and ask again. */
    double deadline = now_us() + CONNECT_TIMEOUT_MS * 1e3;
    VIP_RETURN rc;
    while ((rc = VipConnectRequest(mpl.vi, me, them, CONNECT_TIMEOUT_MS, &remote_attrs)) == VIP_NO_MATCH &&
           now_us() < deadline)
      usleep(5000);
    check(rc, "VipConnectRequest");
  }
  free(me);
  free(them);
}

static void mpl_finalize(void) {
  VIP_VI_STATE state;
  VIP_VI_ATTRIBUTES attrs;
  VIP_BOOLEAN send_empty, recv_empty;
  VIP_DESCRIPTOR *d;
  int i;

  /* Rank 1 says it is done; rank 0 hangs up first, rank 1 sees the orderly
   * disconnect (nothing printed) and hangs up too. */
  if (mpl.rank == 1) {
    send_message(MSG_FIN, 0, NULL, 0, 0, 0);
    do {
      usleep(1000);
      check(VipQueryVi(mpl.vi, &state, &attrs, &send_empty, &recv_empty), "VipQueryVi");
    } while (state == VIP_STATE_CONNECTED);
  } else {
    next_message(MSG_FIN);
  }
  check(VipDisconnect(mpl.vi), "VipDisconnect");
  while (VipRecvDone(mpl.vi, &d) == VIP_SUCCESS) {
  }
  for (i = 0; i < CACHE_SLOTS; i++)
    if (mpl.cache[i].used) evict(&mpl.cache[i]);
  check(VipDestroyVi(mpl.vi), "VipDestroyVi");
  check(VipDeregisterMem(mpl.nic, mpl.region, mpl.region_handle), "VipDeregisterMem (bounce buffers)");
  free(mpl.region);
  check(VipDestroyPtag(mpl.nic, mpl.ptag), "VipDestroyPtag");
  check(VipNSShutdown(mpl.nic), "VipNSShutdown");
  check(VipCloseNic(mpl.nic), "VipCloseNic");
}

/* ------------------------------------------------------------ application */

/* Buffers the way applications get them: malloc, or mmap for big ones. */
static void *get_buffer(size_t length, int use_mmap) {
  void *p;
  if (!use_mmap) {
    p = malloc(length);
    if (!p) fail("out of memory", (long)length);
    return p;
  }
  p = mmap(NULL, length, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) fail("mmap", (long)length);
  return p;
}

static void put_buffer(void *p, size_t length, int use_mmap) {
  mpl_buffer_freed(p, length);
  if (use_mmap) munmap(p, length);
  else free(p);
}

static unsigned char pattern(size_t size, int iter, size_t i) {
  return (unsigned char)(size * 31 + (size_t)iter * 7 + i * 13 + (i >> 9));
}

int main(int argc, char **argv) {
  int iters = 20, i, step = 0;
  size_t max = 256 * 1024, size;
  unsigned long messages = 0;

  if (argc < 4) {
    fprintf(stderr, "usage: vipl_regcache_mpl DEVICE SELF PEER [--iters N] [--max BYTES]\n");
    return 2;
  }
  for (i = 4; i + 1 < argc; i += 2) {
    if (strcmp(argv[i], "--iters") == 0) iters = atoi(argv[i + 1]);
    else if (strcmp(argv[i], "--max") == 0) max = (size_t)strtoul(argv[i + 1], NULL, 0);
  }
  mpl_init(argv[1], argv[2], argv[3]);
  printf("vipl_regcache_mpl rank %d: %s -> %s, connected\n", mpl.rank, argv[2], argv[3]);

  for (size = 1; size <= max; size = size < 4096 ? size * 4 : size * 2, step++) {
    /* Rendezvous buffers come from mmap every other size, the rest from malloc. */
    int use_mmap = size >= EAGER_LIMIT && step % 2 == 1;
    unsigned char *sbuf = get_buffer(size, use_mmap), *rbuf = get_buffer(size, use_mmap);
    double t0 = now_us();
    int iter;
    for (iter = 0; iter < iters; iter++) {
      size_t k;
      if (iter > 0 && iter % 5 == 0) {
        /* The application frees and allocates again (often at the same
         * addresses): the cache's entries for the old buffers go stale. */
        put_buffer(sbuf, size, use_mmap);
        put_buffer(rbuf, size, use_mmap);
        sbuf = get_buffer(size, use_mmap);
        rbuf = get_buffer(size, use_mmap);
      }
      if (mpl.rank == 0) {
        for (k = 0; k < size; k++) sbuf[k] = pattern(size, iter, k);
        mpl_send(sbuf, size, (VIP_UINT32)iter);
        memset(rbuf, 0xEE, size);
        mpl_recv(rbuf, size, (VIP_UINT32)iter);
        for (k = 0; k < size; k++)
          if (rbuf[k] != pattern(size, iter, k)) fail("the pong differs at byte", (long)k);
      } else {
        memset(rbuf, 0xEE, size);
        mpl_recv(rbuf, size, (VIP_UINT32)iter);
        for (k = 0; k < size; k++)
          if (rbuf[k] != pattern(size, iter, k)) fail("the ping differs at byte", (long)k);
        mpl_send(rbuf, size, (VIP_UINT32)iter); /* back from where it came in */
      }
      messages += 2;
    }
    if (mpl.rank == 0)
      printf("%8lu bytes  %9.1f us one-way  (%s)\n", (unsigned long)size, (now_us() - t0) / (2.0 * iters),
             size < EAGER_LIMIT ? "eager" : use_mmap ? "rendezvous, mmap" : "rendezvous, malloc");
    put_buffer(sbuf, size, use_mmap);
    put_buffer(rbuf, size, use_mmap);
  }
  printf("vipl_regcache_mpl rank %d: cache: %lu registrations, %lu hits, %lu evictions, "
         "%lu deregistered after their memory was freed, %lu retried after eviction\n",
         mpl.rank, mpl.registrations, mpl.hits, mpl.evictions, mpl.freed_deregistered, mpl.retries);
  mpl_finalize();
  printf("vipl_regcache_mpl rank %d: OK: %lu messages verified\n", mpl.rank, messages);
  return 0;
}
