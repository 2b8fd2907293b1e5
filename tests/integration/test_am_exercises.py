#!/usr/bin/env python3
"""AM-2 SPMD jobs that compute: tests/programs/am_exercises (a ring, an
all-to-all of mediums and Longs up to 128 KiB into per-sender regions of the
segments, a reduction with a broadcast, remote put/get through handlers;
every byte checked by every rank) started by `ulnic run`:
  * over UDP, 8 ranks, with no loss and with 30 % of datagrams dropped;
  * on the NICs of one 4-node cluster, 8 ranks (4 nodes x 2 processes,
    rank r on node r % 4), natively and over VIPL, each twice on the same
    NICs: a job's endpoints, VIs and registrations must not get in the next
    one's way.
Needs ULNIC_BIN and ULNIC_PROGRAMS in the environment.
"""
import os
import subprocess
import unittest
from cluster_case import PrivateCluster

ULNIC = os.environ.get("ULNIC_BIN", "build/bin/ulnic")
BIN = os.environ.get("ULNIC_PROGRAMS", os.path.dirname(ULNIC))
EXERCISES = os.path.join(BIN, "am_exercises")
RANKS = 8


def run_job(transport, env=None, cluster=None, timeout=300):
    args = [ULNIC, "run", "-n", str(RANKS), "--transport", transport]
    if cluster:
        args += ["-c", cluster]
    p = subprocess.run(args + [EXERCISES], capture_output=True, text=True, timeout=timeout,
                       env=dict(os.environ, **(env or {})))
    return p.returncode, p.stdout + p.stderr


class Udp(unittest.TestCase):
    def check(self, env):
        rc, out = run_job("udp", env)
        self.assertEqual(rc, 0, out)
        for r in range(RANKS):
            self.assertIn(f"exercises ok rank {r}\n", out, out)

    def test_eight_ranks(self):
        self.check({})

    def test_eight_ranks_with_30_percent_of_datagrams_dropped(self):
        self.check({"ULNIC_AM_UDP_DROP": "0.3", "ULNIC_AM_UDP_TIMEOUT_MS": "30000"})


class OnNics(PrivateCluster, unittest.TestCase):
    cluster = "am-ex"
    nodes = 4

    def twice(self, transport):
        for attempt in range(2):
            rc, out = run_job(transport, cluster=self.cluster)
            if rc != 0:
                self.fail(f"job {attempt} exited {rc}:\n{out}\nthe NICs:\n{self.node_status()}")
            for r in range(RANKS):
                self.assertIn(f"rank {r} of {RANKS} on {transport} node {r % 4}\n", out, out)
                self.assertIn(f"exercises ok rank {r}\n", out, out)

    def test_native_four_nodes_two_processes_each_twice(self):
        self.twice("native")

    def test_vipl_four_nodes_two_processes_each_twice(self):
        self.twice("vipl")


if __name__ == "__main__":
    unittest.main()
