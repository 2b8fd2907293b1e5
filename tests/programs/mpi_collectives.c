/* mpi_collectives: an MPI program that leans on collectives and wildcard
 * matching, every result checked -- the kind of job a user runs first on a
 * new interconnect. Unchanged MPI (tests/integration/test_mpi.py runs it
 * over the ulnic libfabric provider on an emulated cluster).
 *
 *   mpirun -np N mpi_collectives [--rounds R] [--max BYTES]
 *
 * Per round: MPI_Bcast from every root (sizes up to --max, default 256 KiB),
 * MPI_Allreduce and MPI_Reduce (sums and maxima of known values),
 * MPI_Allgather, MPI_Alltoall and MPI_Alltoallv (every pair's block named
 * by sender, receiver and round), MPI_Gatherv / MPI_Scatterv, MPI_Scan,
 * MPI_Reduce_scatter_block, a ring of MPI_Sendrecv, MPI_ANY_SOURCE /
 * MPI_ANY_TAG receives with MPI_Probe, a split communicator, and a
 * non-blocking MPI_Iallreduce overlapped with point-to-point traffic.
 * Prints "ok" on rank 0; exit status 1 and "FAIL ..." on a wrong value. */
#define _POSIX_C_SOURCE 200809L
#include <mpi.h>

#include "prog_common.h"

static int rank, ranks;

/* The value rank `from` sends rank `to` in round r, element k. */
static int32_t val(int from, int to, int r, int k) {
  return (int32_t)(prog_mix((uint32_t)(from * 7919 + to * 104729 + r * 1299709 + k)) & 0x7fffffff);
}

static void expect(int ok, const char *what, int r) {
  if (!ok) prog_fail("rank %d: %s wrong in round %d", rank, what, r);
}

static void bcasts(int r, int max) {
  unsigned char *p = malloc((size_t)max);
  int root, size;
  if (!p) prog_fail("out of memory");
  for (root = 0; root < ranks; root++)
    for (size = 1; size <= max; size *= 8) {
      uint32_t seq = (uint32_t)(r * 1000 + root * 50 + size % 997);
      if (rank == root) prog_fill(p, (size_t)size, seq);
      else memset(p, 0, (size_t)size);
      MPI_Bcast(p, size, MPI_BYTE, root, MPI_COMM_WORLD);
      expect(prog_mismatch(p, (size_t)size, seq) < 0, "MPI_Bcast", r);
    }
  free(p);
}

static void reductions(int r) {
  enum { K = 1000 };
  static int64_t mine[K], sum[K], red[K], scan[K];
  static int32_t mx[K], mxin[K];
  int k, j;
  for (k = 0; k < K; k++) mine[k] = (int64_t)val(rank, 0, r, k), mxin[k] = val(rank, 1, r, k);
  MPI_Allreduce(mine, sum, K, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
  MPI_Allreduce(mxin, mx, K, MPI_INT32_T, MPI_MAX, MPI_COMM_WORLD);
  MPI_Reduce(mine, red, K, MPI_INT64_T, MPI_SUM, ranks - 1, MPI_COMM_WORLD);
  MPI_Scan(mine, scan, K, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
  for (k = 0; k < K; k++) {
    int64_t s = 0, pre = 0;
    int32_t m = 0;
    for (j = 0; j < ranks; j++) {
      s += val(j, 0, r, k);
      if (j <= rank) pre += val(j, 0, r, k);
      if (val(j, 1, r, k) > m) m = val(j, 1, r, k);
    }
    expect(sum[k] == s, "MPI_Allreduce (sum)", r);
    expect(mx[k] == m, "MPI_Allreduce (max)", r);
    expect(rank != ranks - 1 || red[k] == s, "MPI_Reduce", r);
    expect(scan[k] == pre, "MPI_Scan", r);
  }
}

static void exchanges(int r) {
  enum { B = 333 }; /* a block of each pair, in int32s: odd-sized */
  int32_t *out = malloc(sizeof(int32_t) * B * (size_t)ranks), *in = malloc(sizeof(int32_t) * B * (size_t)ranks);
  int32_t *gat = malloc(sizeof(int32_t) * B * (size_t)ranks);
  int *counts = malloc(sizeof(int) * (size_t)ranks), *displs = malloc(sizeof(int) * (size_t)ranks);
  int *rcounts = malloc(sizeof(int) * (size_t)ranks), *rdispls = malloc(sizeof(int) * (size_t)ranks);
  int j, k, off = 0, roff = 0;
  if (!out || !in || !gat || !counts || !displs || !rcounts || !rdispls) prog_fail("out of memory");
  for (j = 0; j < ranks; j++)
    for (k = 0; k < B; k++) out[j * B + k] = val(rank, j, r, k);
  /* Allgather: everyone's block for rank 0. */
  MPI_Allgather(out, B, MPI_INT32_T, gat, B, MPI_INT32_T, MPI_COMM_WORLD);
  for (j = 0; j < ranks; j++)
    for (k = 0; k < B; k++) expect(gat[j * B + k] == val(j, 0, r, k), "MPI_Allgather", r);
  MPI_Alltoall(out, B, MPI_INT32_T, in, B, MPI_INT32_T, MPI_COMM_WORLD);
  for (j = 0; j < ranks; j++)
    for (k = 0; k < B; k++) expect(in[j * B + k] == val(j, rank, r, k), "MPI_Alltoall", r);
  /* Alltoallv: rank i sends rank j (i + j + r) % B + 1 elements. */
  for (j = 0; j < ranks; j++) {
    counts[j] = (rank + j + r) % B + 1, displs[j] = off, off += counts[j];
    rcounts[j] = (j + rank + r) % B + 1, rdispls[j] = roff, roff += rcounts[j];
    for (k = 0; k < counts[j]; k++) gat[displs[j] + k] = val(rank, j, r, k + 7);
  }
  MPI_Alltoallv(gat, counts, displs, MPI_INT32_T, in, rcounts, rdispls, MPI_INT32_T, MPI_COMM_WORLD);
  for (j = 0; j < ranks; j++)
    for (k = 0; k < rcounts[j]; k++) expect(in[rdispls[j] + k] == val(j, rank, r, k + 7), "MPI_Alltoallv", r);
  /* Gatherv to the last rank (rank j gives j + 1 elements), Scatterv back. */
  for (j = 0, off = 0; j < ranks; j++) counts[j] = j + 1, displs[j] = off, off += j + 1;
  for (k = 0; k <= rank; k++) out[k] = val(rank, ranks, r, k);
  MPI_Gatherv(out, rank + 1, MPI_INT32_T, gat, counts, displs, MPI_INT32_T, ranks - 1, MPI_COMM_WORLD);
  if (rank == ranks - 1)
    for (j = 0; j < ranks; j++)
      for (k = 0; k <= j; k++) expect(gat[displs[j] + k] == val(j, ranks, r, k), "MPI_Gatherv", r);
  MPI_Scatterv(gat, counts, displs, MPI_INT32_T, in, rank + 1, MPI_INT32_T, ranks - 1, MPI_COMM_WORLD);
  for (k = 0; k <= rank; k++) expect(in[k] == val(rank, ranks, r, k), "MPI_Scatterv", r);
  /* Reduce_scatter_block: element j of the sum goes to rank j. */
  for (j = 0; j < ranks; j++) out[j] = val(rank, j, r, 99) & 0xffff;
  MPI_Reduce_scatter_block(out, in, 1, MPI_INT32_T, MPI_SUM, MPI_COMM_WORLD);
  {
    int32_t s = 0;
    for (j = 0; j < ranks; j++) s += val(j, rank, r, 99) & 0xffff;
    expect(in[0] == s, "MPI_Reduce_scatter_block", r);
  }
  free(out), free(in), free(gat), free(counts), free(displs), free(rcounts), free(rdispls);
}

static void ring_and_wildcards(int r) {
  enum { N = 4096 };
  static unsigned char a[N], b[N];
  int right = (rank + 1) % ranks, left = (rank + ranks - 1) % ranks, j, seen = 0;
  MPI_Status st;
  prog_fill(a, N, (uint32_t)(r * 100 + rank));
  MPI_Sendrecv(a, N, MPI_BYTE, right, 10, b, N, MPI_BYTE, left, 10, MPI_COMM_WORLD, &st);
  expect(prog_mismatch(b, N, (uint32_t)(r * 100 + left)) < 0 && st.MPI_SOURCE == left, "MPI_Sendrecv ring", r);
  /* Everyone sends rank 0 one message of its own size and tag. */
  if (rank != 0) {
    prog_fill(a, (size_t)(rank * 10), (uint32_t)(r * 100 + rank + 50));
    MPI_Send(a, rank * 10, MPI_BYTE, 0, 20 + rank, MPI_COMM_WORLD);
  } else {
    for (j = 1; j < ranks; j++) {
      int n;
      MPI_Probe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &st);
      MPI_Get_count(&st, MPI_BYTE, &n);
      expect(st.MPI_TAG == 20 + st.MPI_SOURCE && n == st.MPI_SOURCE * 10, "MPI_Probe", r);
      MPI_Recv(b, N, MPI_BYTE, st.MPI_SOURCE, st.MPI_TAG, MPI_COMM_WORLD, &st);
      expect(prog_mismatch(b, (size_t)n, (uint32_t)(r * 100 + st.MPI_SOURCE + 50)) < 0, "MPI_ANY_SOURCE data", r);
      expect(!(seen & (1 << st.MPI_SOURCE)), "MPI_ANY_SOURCE (a sender seen twice)", r);
      seen |= 1 << st.MPI_SOURCE;
    }
  }
}

static void split_and_overlap(int r) {
  MPI_Comm half;
  MPI_Request req[3];
  int64_t mine = rank + 1, sum = 0, hs = 0, x = r, y = -1;
  int hr, hn, j, expect_hs = 0;
  MPI_Comm_split(MPI_COMM_WORLD, rank % 2, rank, &half);
  MPI_Comm_rank(half, &hr);
  MPI_Comm_size(half, &hn);
  MPI_Allreduce(&mine, &hs, 1, MPI_INT64_T, MPI_SUM, half);
  for (j = rank % 2; j < ranks; j += 2) expect_hs += j + 1;
  expect(hs == expect_hs && hr == rank / 2, "MPI_Comm_split + MPI_Allreduce", r);
  /* A non-blocking allreduce while a message goes round the ring. */
  MPI_Iallreduce(&mine, &sum, 1, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD, &req[0]);
  MPI_Irecv(&y, 1, MPI_INT64_T, (rank + ranks - 1) % ranks, 30, MPI_COMM_WORLD, &req[1]);
  MPI_Isend(&x, 1, MPI_INT64_T, (rank + 1) % ranks, 30, MPI_COMM_WORLD, &req[2]);
  MPI_Waitall(3, req, MPI_STATUSES_IGNORE);
  expect(sum == (int64_t)ranks * (ranks + 1) / 2 && y == r, "MPI_Iallreduce beside point-to-point", r);
  MPI_Comm_free(&half);
  (void)hn;
}

int main(int argc, char **argv) {
  int rounds, max, r;
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  prog_watchdog("mpi_collectives", 600);
  rounds = prog_arg(argc, argv, "--rounds", 3);
  max = prog_arg(argc, argv, "--max", 256 << 10);
  if (ranks > 31 || rounds < 1 || max < 1) prog_fail("needs at most 31 ranks, --rounds and --max >= 1");
  for (r = 0; r < rounds; r++) {
    bcasts(r, max);
    reductions(r);
    exchanges(r);
    ring_and_wildcards(r);
    split_and_overlap(r);
    MPI_Barrier(MPI_COMM_WORLD);
  }
  if (rank == 0) printf("ok: %d ranks, %d rounds\n", ranks, rounds);
  MPI_Finalize();
  return 0;
}
