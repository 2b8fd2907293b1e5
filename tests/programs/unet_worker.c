/* A U-Net endpoint driven line by line (tests/integration/test_unet.py), in
 * C against unet.h alone. One command a line on stdin, one JSON line back.
 * Every message starts with its 32-bit seed and goes on with pattern(seed):
 * the receiver checks each byte itself.
 *
 *   create SEG RX FREE          endpoint -> {"st","node","slot"}
 *   createmm SEG RX FREE PIN    a U-Net/MM endpoint over SEG bytes of malloc'd memory,
 *                               at most PIN bytes pinned
 *   segcheck OFF LEN SEED       the segment holds message SEED there -> {"good"} (after
 *                               destroy too: U-Net/MM's segment is the program's memory)
 *   channel NODE SLOT TX RX     -> {"st","ch"}        unchannel CH -> {"st"}
 *   push OFF LEN                free-queue entry      pushn N SIZE BASE
 *   send CH OFF LEN SEED        from the segment      sendi CH LEN SEED  inline
 *   sendn CH N LEN BASE SEED0 [R]  N messages (segment, or inline if LEN <= 128
 *                               and BASE is -1) from R regions of LEN bytes in turn
 *                               (default 32), waiting for them every R
 *                               -> {"st","us"} (microseconds, first send to last done)
 *   wait MS                     unet_send_wait -> {"st"}
 *   recv MS REPUSH              one message -> {"st","ch","len","inline","good","seed"}
 *   recvn N MS                  N messages, buffers pushed again -> {"st","n","bad","seeds"}
 *   poll | ready | stats | destroy | quit
 *   dispatch MS                 unet_dispatch with an upcall that checks each message
 */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "unet.h"

static unet_endpoint* ep;
static uint8_t* seg;
static size_t seg_len;

static double now_us(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e6 + (double)t.tv_nsec / 1e3;
}

static uint8_t pattern(uint32_t seed, size_t i) { return (uint8_t)(seed * 31u + i * 7u + (i >> 8)); }

static void fill(uint8_t* p, size_t len, uint32_t seed) {
  for (size_t i = 0; i < len; ++i) p[i] = pattern(seed, i);
  memcpy(p, &seed, len < 4 ? len : 4);
}

/* 1 if the message is what its seed says. */
static int check(const uint8_t* p, size_t len, uint32_t* seed_out) {
  uint32_t seed = 0;
  if (len < 4) return 0;
  memcpy(&seed, p, 4);
  *seed_out = seed;
  for (size_t i = 4; i < len; ++i)
    if (p[i] != pattern(seed, i)) return 0;
  return 1;
}

static int repush(const unet_rx_desc* d) {
  return (d->flags & UNET_RX_INLINE) ? UNET_OK : unet_free_push(ep, d->offset, d->buf_len);
}

static unsigned long up_n, up_bad;
static void upcall(unet_endpoint* e, const unet_rx_desc* d, void* arg) {
  uint32_t seed;
  (void)arg;
  ++up_n;
  if (e != ep || !check((const uint8_t*)d->data, d->length, &seed)) ++up_bad;
  (void)repush(d);
}

static int send_one(unet_channel ch, long off, size_t len, uint32_t seed) {
  if (off < 0) {
    uint8_t buf[UNET_SEND_INLINE_MAX];
    fill(buf, len <= sizeof buf ? len : sizeof buf, seed);
    return unet_send_inline(ep, ch, buf, len);
  }
  if ((size_t)off > seg_len || len > seg_len - (size_t)off) return unet_send(ep, ch, (size_t)off, len);
  fill(seg + off, len, seed);
  return unet_send(ep, ch, (size_t)off, len);
}

int main(void) {
  char line[512];
  setvbuf(stdout, NULL, _IOLBF, 0);
  printf("{\"ok\":1,\"pid\":%d}\n", (int)getpid());
  while (fgets(line, sizeof line, stdin)) {
    char cmd[32] = "";
    long a = 0, b = 0, c = 0, d = 0, e = 0, f = 0;
    int n = sscanf(line, "%31s %ld %ld %ld %ld %ld %ld", cmd, &a, &b, &c, &d, &e, &f);
    if (n < 1) continue;
    if (!strcmp(cmd, "quit")) break;
    if (!strcmp(cmd, "create")) {
      unet_attr at = {NULL, -1, (size_t)a, (uint32_t)b, (uint32_t)c, NULL, 0};
      unet_addr me = {0, 0};
      int st = unet_endpoint_create(&at, &ep);
      if (st == UNET_OK) {
        unet_endpoint_addr(ep, &me);
        seg = (uint8_t*)unet_segment(ep, &seg_len);
      }
      printf("{\"st\":%d,\"node\":%u,\"slot\":%u,\"seg\":%zu}\n", st, me.node, me.slot, seg_len);
    } else if (!strcmp(cmd, "createmm")) {
      unet_attr at = {NULL, -1, (size_t)a, (uint32_t)b, (uint32_t)c, NULL, (size_t)d};
      unet_addr me = {0, 0};
      at.segment = malloc((size_t)a);  /* ordinary heap memory, not page aligned */
      int st = at.segment ? unet_endpoint_create(&at, &ep) : UNET_ERR_RESOURCE;
      if (st == UNET_OK) {
        unet_endpoint_addr(ep, &me);
        seg = (uint8_t*)unet_segment(ep, &seg_len);
      }
      printf("{\"st\":%d,\"node\":%u,\"slot\":%u,\"seg\":%zu,\"same\":%d}\n", st, me.node, me.slot, seg_len,
             seg == at.segment);
    } else if (!strcmp(cmd, "segcheck")) {
      uint32_t seed = 0;
      int good = seg && (size_t)a <= seg_len && (size_t)b <= seg_len - (size_t)a && b >= 4 &&
                 check(seg + a, (size_t)b, &seed) && seed == (uint32_t)c;
      printf("{\"good\":%d}\n", good);
    } else if (!strcmp(cmd, "channel")) {
      unet_addr r = {(uint32_t)a, (uint32_t)b};
      unet_channel ch = 0;
      int st = unet_channel_create(ep, r, (uint32_t)c, (uint32_t)d, &ch);
      printf("{\"st\":%d,\"ch\":%u}\n", st, ch);
    } else if (!strcmp(cmd, "unchannel")) {
      printf("{\"st\":%d}\n", unet_channel_destroy(ep, (unet_channel)a));
    } else if (!strcmp(cmd, "push")) {
      int st = unet_free_push(ep, (size_t)a, (size_t)b);
      printf("{\"st\":%d,\"free\":%u}\n", st, unet_free_count(ep));
    } else if (!strcmp(cmd, "pushn")) {
      int st = UNET_OK;
      long i = 0;
      for (; i < a && st == UNET_OK; ++i) st = unet_free_push(ep, (size_t)(c + i * b), (size_t)b);
      printf("{\"st\":%d,\"n\":%ld}\n", st, st == UNET_OK ? i : i - 1);
    } else if (!strcmp(cmd, "send")) {
      printf("{\"st\":%d}\n", send_one((unet_channel)a, b, (size_t)c, (uint32_t)d));
    } else if (!strcmp(cmd, "sendi")) {
      printf("{\"st\":%d}\n", send_one((unet_channel)a, -1, (size_t)b, (uint32_t)c));
    } else if (!strcmp(cmd, "sendn")) {
      int st = UNET_OK;
      const long regions = n >= 7 && f > 0 ? f : 32;
      const double t0 = now_us();
      for (long i = 0; i < b && st == UNET_OK; ++i) {
        long off = d < 0 ? -1 : d + (i % regions) * c;
        if (i % regions == 0 && i) st = unet_send_wait(ep, 60000);  /* the regions are reused */
        if (st == UNET_OK) st = send_one((unet_channel)a, off, (size_t)c, (uint32_t)(e + i));
      }
      if (st == UNET_OK) st = unet_send_wait(ep, 60000);
      printf("{\"st\":%d,\"us\":%.1f}\n", st, now_us() - t0);
    } else if (!strcmp(cmd, "wait")) {
      printf("{\"st\":%d}\n", unet_send_wait(ep, (int)a));
    } else if (!strcmp(cmd, "recv") || !strcmp(cmd, "poll")) {
      unet_rx_desc r;
      uint32_t seed = 0;
      int st = !strcmp(cmd, "poll") ? unet_recv(ep, &r) : unet_recv_wait(ep, &r, (int)a);
      if (st != UNET_OK) {
        printf("{\"st\":%d}\n", st);
        continue;
      }
      int good = check((const uint8_t*)r.data, r.length, &seed);
      if (!strcmp(cmd, "recv") && b) (void)repush(&r);
      printf("{\"st\":0,\"ch\":%u,\"len\":%u,\"inline\":%d,\"good\":%d,\"seed\":%u,\"offset\":%zu}\n", r.channel,
             r.length, (r.flags & UNET_RX_INLINE) ? 1 : 0, good, seed, r.offset);
    } else if (!strcmp(cmd, "recvn")) {
      int st = UNET_OK;
      long got = 0, bad = 0;
      unsigned long long seeds = 0;
      for (; got < a; ++got) {
        unet_rx_desc r;
        uint32_t seed = 0;
        st = unet_recv_wait(ep, &r, (int)b);
        if (st != UNET_OK) break;
        if (!check((const uint8_t*)r.data, r.length, &seed)) ++bad;
        seeds += seed;
        (void)repush(&r);
      }
      printf("{\"st\":%d,\"n\":%ld,\"bad\":%ld,\"seeds\":%llu}\n", st, got, bad, seeds);
    } else if (!strcmp(cmd, "ready")) {
      printf("{\"ready\":%d}\n", unet_ready(ep));
    } else if (!strcmp(cmd, "dispatch")) {
      up_n = up_bad = 0;
      int r = unet_dispatch(ep, (int)a);
      printf("{\"r\":%d,\"n\":%lu,\"bad\":%lu}\n", r, up_n, up_bad);
    } else if (!strcmp(cmd, "upcall")) {
      printf("{\"st\":%d}\n", unet_set_upcall(ep, a ? upcall : NULL, NULL));
    } else if (!strcmp(cmd, "stats")) {
      unet_stats s;
      int st = unet_stats_get(ep, &s);
      printf("{\"st\":%d,\"delivered\":%llu,\"rx_full\":%llu,\"free_empty\":%llu,\"too_long\":%llu,"
             "\"bad_tag\":%llu,\"free_taken\":%llu,\"pending\":%u,\"tlb_hits\":%llu,\"tlb_misses\":%llu,"
             "\"drops_tlb_miss\":%llu,\"pinned\":%llu,\"pins\":%llu,\"refills\":%llu,\"evictions\":%llu}\n",
             st, (unsigned long long)s.delivered, (unsigned long long)s.drops_rx_full,
             (unsigned long long)s.drops_free_empty, (unsigned long long)s.drops_too_long,
             (unsigned long long)s.drops_bad_tag, (unsigned long long)s.free_taken, unet_send_pending(ep),
             (unsigned long long)s.tlb_hits, (unsigned long long)s.tlb_misses,
             (unsigned long long)s.drops_tlb_miss, (unsigned long long)s.pages_pinned, (unsigned long long)s.pins,
             (unsigned long long)s.refills, (unsigned long long)s.evictions);
    } else if (!strcmp(cmd, "destroy")) {
      printf("{\"st\":%d}\n", unet_endpoint_destroy(ep));
      ep = NULL;  /* seg stays: a U-Net/MM segment is the program's own memory */
    } else {
      printf("{\"error\":\"unknown command\"}\n");
    }
  }
  if (ep) unet_endpoint_destroy(ep);
  return 0;
}
