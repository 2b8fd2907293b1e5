#include <cerrno>
#include <fm_mp.h>
#include <fm_gm.h>
#include <cstdio>
#include <cstring>
#include <vector>
#include <cstdlib>
int main(int argc, char** argv) {
  bool gm = argc > 1 && !strcmp(argv[1], "gm");
  if (!gm) {
    if (MP_Init()) return 2;
    int me, n; MP_Comm_rank(&me); MP_Comm_size(&n);
    size_t sizes[] = {0, 1, 100, 16384, 16385, 100000, 1 << 20};
    for (size_t sz : sizes) {
      std::vector<unsigned char> b(sz + 10);
      if (me == 0) {
        for (size_t i = 0; i < sz; ++i) b[i] = (unsigned char)(i * 7 + sz);
        if (MP_Send(b.data(), sz, 1, 5)) printf("send fail\n");
        MP_Status st;
        int rc = MP_Recv(b.data(), sz, 1, MP_ANY_TAG, &st);
        for (size_t i = 0; i < sz; ++i) if (b[i] != (unsigned char)(i * 7 + sz + 1)) { printf("bad echo %zu at %zu\n", sz, i); break; }
        printf("size %zu rc %d count %zu tag %d\n", sz, rc, st.count, st.tag);
      } else if (me == 1) {
        MP_Status st;
        int rc = MP_Recv(b.data(), sz + 10, MP_ANY_SOURCE, 5, &st);
        if (rc || st.count != sz) printf("recv rc %d count %zu\n", rc, st.count);
        for (size_t i = 0; i < sz; ++i) b[i]++;
        MP_Send(b.data(), sz, 0, 9);
      }
    }
    MP_Stats s; MP_Get_stats(&s);
    printf("[%d] eager %llu rdv %llu direct %llu unexp %llu staged %llu\n", me, s.eager_sent, s.rendezvous_sent, s.direct, s.unexpected, s.staged_bytes);
    return MP_Finalize();
  }
  static long arr[1 << 17];
  if (gm_init()) return 2;
  gm_expose(arr, sizeof arr);
  unsigned me = gm_mynode(), n = gm_nodes();
  std::vector<uint64_t> addrs(n);
  gm_allgather((uint64_t)(uintptr_t)arr, addrs.data());
  for (int i = 0; i < 1 << 17; ++i) arr[i] = me * 1000000 + i;
  gm_barrier();
  unsigned peer = (me + 1) % n;
  gm_ptr p = gm_global(peer, (void*)addrs[peer]);
  long v = gm_read_i64(gm_offset(p, 8 * 5));
  printf("[%u] read %ld\n", me, v);
  std::vector<long> big(1 << 17);
  int rc = gm_read(big.data(), p, sizeof arr);
  printf("[%u] bulk read rc %d last %ld\n", me, rc, big.back());
  for (int i = 0; i < 100; ++i) gm_put_i64(gm_offset(p, 8 * i), -i);
  printf("[%u] sync %d\n", me, gm_sync());
  for (int i = 0; i < 100; ++i) gm_store_i64(gm_offset(p, 8 * (200 + i)), -i);
  gm_store_sync(800);
  printf("[%u] store sync %d arr[250]=%ld\n", me, gm_all_store_sync(), arr[250]);
  rc = gm_read(big.data(), gm_global(peer, (void*)8), 8);
  printf("[%u] bad read rc %d errno %d\n", me, rc, errno);
  gm_stats st; gm_get_stats(&st);
  printf("[%u] acks sent %llu recv %llu deferred %llu refused %llu\n", me, st.store_acks_sent, st.store_acks_received, st.deferred, st.refused);
  return gm_finalize();
}
