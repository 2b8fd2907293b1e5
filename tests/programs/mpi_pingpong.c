/* mpi_pingpong: an MPI ping-pong and streaming bandwidth between ranks 0
 * and 1, the way MPI benchmarks are written (MPI_Send / MPI_Recv, then a
 * window of MPI_Isend / MPI_Irecv and MPI_Waitall), every message checked
 * byte for byte. Any other ranks only take part in the barriers. Unchanged
 * MPI: under Open MPI it runs over whatever transport mpirun picks; the
 * README shows how to make that the ulnic libfabric provider, and
 * tests/integration/test_mpi.py runs it so on an emulated cluster.
 *
 *   mpirun -np 2 mpi_pingpong [--min BYTES] [--max BYTES] [--iters N]
 *                             [--window W] [--burst BYTES] [--bursts N]
 *
 * Prints, per size from --min (default 1 byte) to --max (default 1 MiB) by
 * 4x and --max itself: RTT/2 in microseconds (median of --iters round
 * trips) and the one-way bandwidth of a window of messages in flight (MB/s
 * = 1e6 B/s; the median of --bursts timed windows, default 5, back to back
 * after one untimed). A window holds --window messages (default 16) or, if
 * more, as many as make --burst bytes (default 8 MiB; at most 1024
 * messages): a window of 16 small messages is over in a millisecond, so a
 * scheduler's hiccup would be most of what it measured (am_logp's bursts
 * move 8 MiB too, so the two compare). Then "ok". Fills and checks stay
 * outside the timed parts: every ping and pong is checked, and of the
 * windows the last (the others hold the same bytes). Exit status 1 (and
 * "FAIL ...") on any wrong byte, 3 if it hangs. */
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
  int rank, ranks, min, max, iters, window, burst, bursts, most, i, w, pass;
  size_t size, win_bytes;
  unsigned char *buf, *out, *win;
  double *rtt, *bws;
  MPI_Request *req;
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  prog_watchdog("mpi_pingpong", 600);
  min = prog_arg(argc, argv, "--min", 1);
  max = prog_arg(argc, argv, "--max", 1 << 20);
  iters = prog_arg(argc, argv, "--iters", 100);
  window = prog_arg(argc, argv, "--window", 16);
  burst = prog_arg(argc, argv, "--burst", 8 << 20);
  bursts = prog_arg(argc, argv, "--bursts", 5);
  if (ranks < 2 || min < 1 || max < min || iters < 1 || window < 1 || burst < 0 || bursts < 1)
    prog_fail("needs 2 ranks, 1 <= --min <= --max, --iters, --window, --bursts >= 1, --burst >= 0");
  most = window > 1024 ? window : 1024; /* messages in a window, at most */
  /* The largest window in bytes: --window of --max, or about --burst. */
  win_bytes = (size_t)max * (size_t)window > (size_t)burst ? (size_t)max * (size_t)window : (size_t)burst;
  buf = malloc((size_t)max);
  out = malloc((size_t)max);
  win = malloc(win_bytes);
  rtt = malloc(sizeof *rtt * (size_t)iters);
  bws = malloc(sizeof *bws * (size_t)bursts);
  req = malloc(sizeof *req * (size_t)most);
  if (!buf || !out || !win || !rtt || !bws || !req) prog_fail("out of memory");
  /* Touched before any timing, as benchmark buffers are (first-touch page
   * faults are no transport's cost). */
  memset(buf, 0, (size_t)max), memset(out, 0, (size_t)max), memset(win, 0, win_bytes);
  if (rank == 0) printf("%10s %12s %12s\n", "bytes", "RTT/2 us", "MB/s");
  for (size = (size_t)min;; size = size * 4 > (size_t)max && size < (size_t)max ? (size_t)max : size * 4) {
    uint32_t base = (uint32_t)size * 7919u;
    double t0;
    /* This size's window: --window messages, or --burst bytes of them. */
    int n = (size_t)burst / size > (size_t)window ? (int)((size_t)burst / size) : window;
    if (n > most) n = most;
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
     * the ping-pong's first round trips do its median), then --bursts times
     * timed, back to back, as a bandwidth benchmark's windows go (osu_bw;
     * am_logp's bulk bursts): the window is filled before the first burst
     * (each message its own pattern) and checked after the last, which
     * overwrote the others. A fill and a check between two bursts (8 MiB,
     * ~10 ms of CPU here) left the next one at about half speed: MPI over
     * ulnic at 64 KiB gave 570-670 MB/s with them, 1150-1620 without (2
     * vCPUs, the same hour). */
    if (rank == 0)
      for (w = 0; w < n; w++) prog_fill(win + (size_t)w * size, size, base + 100000u + (uint32_t)w);
    if (rank == 1) memset(win, 0, (size_t)n * size); /* the last burst's bytes, not a previous size's */
    for (pass = 0; pass <= bursts && rank < 2; pass++) {
      MPI_Barrier(MPI_COMM_WORLD);
      t0 = MPI_Wtime();
      for (w = 0; w < n; w++) {
        unsigned char *p = win + (size_t)w * size;
        if (rank == 0)
          MPI_Isend(p, (int)size, MPI_BYTE, 1, 3, MPI_COMM_WORLD, &req[w]);
        else
          MPI_Irecv(p, (int)size, MPI_BYTE, 0, 3, MPI_COMM_WORLD, &req[w]);
      }
      MPI_Waitall(n, req, MPI_STATUSES_IGNORE);
      if (rank == 1) {
        MPI_Send(buf, 1, MPI_BYTE, 0, 4, MPI_COMM_WORLD);
      } else {
        MPI_Recv(buf, 1, MPI_BYTE, 1, 4, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        if (pass > 0) bws[pass - 1] = (double)size * n / (MPI_Wtime() - t0) / 1e6;
      }
    }
    if (rank == 1)
      for (w = 0; w < n; w++) check(win + (size_t)w * size, size, base + 100000u + (uint32_t)w, "stream", size);
    if (rank >= 2) /* the others take part in the windows' barriers */
      for (pass = 0; pass <= bursts; pass++) MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) {
      qsort(rtt, (size_t)iters, sizeof *rtt, cmp_double);
      qsort(bws, (size_t)bursts, sizeof *bws, cmp_double);
      printf("%10zu %12.2f %12.1f\n", size, rtt[iters / 2], bws[bursts / 2]);
      fflush(stdout);
    }
    if (size >= (size_t)max) break;
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0) printf("ok\n");
  free(buf), free(out), free(win), free(rtt), free(bws), free(req);
  MPI_Finalize();
  return 0;
}
