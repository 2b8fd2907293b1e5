/* mpi_pingpong: an MPI ping-pong and streaming bandwidth between ranks 0
 * and 1, the way MPI benchmarks are written (MPI_Send / MPI_Recv, then a
 * window of MPI_Isend / MPI_Irecv and MPI_Waitall), every message checked
 * byte for byte. Any other ranks only take part in the barriers. Unchanged
 * MPI: under Open MPI it runs over whatever transport mpirun picks; the
 * README shows how to make that the ulnic libfabric provider, and
 * tests/integration/test_mpi.py runs it so on an emulated cluster.
 *
 *   mpirun -np 2 mpi_pingpong [--max BYTES] [--iters N] [--window W]
 *
 * Prints, per size from 1 byte to --max (default 1 MiB) by 4x and --max
 * itself: RTT/2 in microseconds (median of --iters round trips) and the
 * one-way bandwidth of --window messages in flight (MB/s = 1e6 B/s; after
 * one untimed window); then "ok". Fills and checks stay outside the timed
 * parts. Exit status 1 (and "FAIL ...") on any wrong byte, 3 if it hangs. */
#define _POSIX_C_SOURCE 200809L
#include <mpi.h>

#include "prog_common.h"

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static void check(const unsigned char *p, size_t n, uint32_t seq, const char *what, size_t size) {
  long bad = prog_mismatch(p, n, seq);
  if (bad >= 0) prog_fail("%s of %zu bytes, message %u: byte %ld is wrong", what, size, seq, bad);
}

int main(int argc, char **argv) {
  int rank, ranks, max, iters, window, i, w, pass;
  size_t size;
  unsigned char *buf, *out, *win;
  double *rtt;
  MPI_Request *req;
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  prog_watchdog("mpi_pingpong", 600);
  max = prog_arg(argc, argv, "--max", 1 << 20);
  iters = prog_arg(argc, argv, "--iters", 100);
  window = prog_arg(argc, argv, "--window", 16);
  if (ranks < 2 || max < 1 || iters < 1 || window < 1) prog_fail("needs 2 ranks, --max, --iters, --window >= 1");
  buf = malloc((size_t)max);
  out = malloc((size_t)max);
  win = malloc((size_t)max * (size_t)window);
  rtt = malloc(sizeof *rtt * (size_t)iters);
  req = malloc(sizeof *req * (size_t)window);
  if (!buf || !out || !win || !rtt || !req) prog_fail("out of memory");
  /* Touched before any timing, as benchmark buffers are (first-touch page
   * faults are no transport's cost). */
  memset(buf, 0, (size_t)max), memset(out, 0, (size_t)max), memset(win, 0, (size_t)max * (size_t)window);
  if (rank == 0) printf("%10s %12s %12s\n", "bytes", "RTT/2 us", "MB/s");
  for (size = 1;; size = size * 4 > (size_t)max && size < (size_t)max ? (size_t)max : size * 4) {
    uint32_t base = (uint32_t)size * 7919u;
    double t0, bw = 0;
    /* Every message is filled before and checked after the time it is in:
     * rank 1 answers from a buffer it filled after its last answer, and
     * checks a ping after answering it (while rank 0 checks the pong and
     * fills the next ping); a fill or check of 1 MiB takes longer here than
     * moving it, and would be most of what the figures measure. */
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 1) prog_fill(out, size, base + 1u);
    for (i = 0; i < iters && rank < 2; i++) {
      uint32_t ping = base + 2u * (uint32_t)i, pong = ping + 1u;
      if (rank == 0) {
        prog_fill(out, size, ping);
        t0 = MPI_Wtime();
        MPI_Send(out, (int)size, MPI_BYTE, 1, 1, MPI_COMM_WORLD);
        MPI_Recv(buf, (int)size, MPI_BYTE, 1, 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        rtt[i] = (MPI_Wtime() - t0) / 2 * 1e6;
        check(buf, size, pong, "pong", size);
      } else {
        MPI_Recv(buf, (int)size, MPI_BYTE, 0, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        MPI_Send(out, (int)size, MPI_BYTE, 0, 2, MPI_COMM_WORLD);
        check(buf, size, ping, "ping", size);
        prog_fill(out, size, pong + 2u);
      }
    }
    /* A window of messages in flight, then a one-byte acknowledgement: once
     * untimed (a transport's first use of buffers this size warms it up, as
     * the ping-pong's first round trips do its median), then timed. */
    for (pass = 0; pass < 2 && rank < 2; pass++) {
      if (rank == 0)
        for (w = 0; w < window; w++)
          prog_fill(win + (size_t)w * size, size, base + 100000u + (uint32_t)(pass * window + w));
      MPI_Barrier(MPI_COMM_WORLD);
      t0 = MPI_Wtime();
      for (w = 0; w < window; w++) {
        unsigned char *p = win + (size_t)w * size;
        if (rank == 0)
          MPI_Isend(p, (int)size, MPI_BYTE, 1, 3, MPI_COMM_WORLD, &req[w]);
        else
          MPI_Irecv(p, (int)size, MPI_BYTE, 0, 3, MPI_COMM_WORLD, &req[w]);
      }
      MPI_Waitall(window, req, MPI_STATUSES_IGNORE);
      if (rank == 1) {  /* acknowledged first, checked after: the check is not in the time */
        MPI_Send(buf, 1, MPI_BYTE, 0, 4, MPI_COMM_WORLD);
        for (w = 0; w < window; w++)
          check(win + (size_t)w * size, size, base + 100000u + (uint32_t)(pass * window + w), "stream", size);
      } else {
        MPI_Recv(buf, 1, MPI_BYTE, 1, 4, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        bw = (double)size * window / (MPI_Wtime() - t0) / 1e6;
      }
    }
    if (rank >= 2) {  /* the others take part in the windows' barriers */
      MPI_Barrier(MPI_COMM_WORLD);
      MPI_Barrier(MPI_COMM_WORLD);
    }
    if (rank == 0) {
      qsort(rtt, (size_t)iters, sizeof *rtt, cmp_double);
      printf("%10zu %12.2f %12.1f\n", size, rtt[iters / 2], bw);
      fflush(stdout);
    }
    if (size >= (size_t)max) break;
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0) printf("ok\n");
  free(buf), free(out), free(win), free(rtt), free(req);
  MPI_Finalize();
  return 0;
}
