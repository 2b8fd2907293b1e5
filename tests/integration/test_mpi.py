#!/usr/bin/env python3
"""Unmodified MPI programs over the NIC: Debian's Open MPI (mpirun, the cm
PML and its OFI MTL) runs them through the ulnic libfabric provider
(host/ofi) on one 4-node cluster, every value checked by the programs
themselves:
  * tests/programs/mpi_pingpong.c: ping-pong and windowed bandwidth from 1 B
    to 1 MiB between ranks 0 and 1;
  * tests/programs/mpi_collectives.c: Bcast from every root, reductions,
    scans, Allgather, Alltoall(v), Gatherv/Scatterv, Reduce_scatter_block,
    Sendrecv rings, MPI_Probe on wildcards, Comm_split, Iallreduce -- on 4
    ranks (one per node) and 8 (two per node);
  * tests/programs/mpi4py_check.py with python3-mpi4py: objects and NumPy
    buffers point to point, collectives, probes, one-sided Put/Get;
  * a rank killed with SIGKILL mid-job ends the job (mpirun exits non-zero),
    and the next job on the same NICs runs.
The job's environment is the README's recipe: FI_PROVIDER_PATH, the cm PML,
the ofi MTL and mtl_ofi_provider_include=ulnic; rank k goes to the k-th
node (mod 4) by its local rank. The NICs' link counters show the traffic
went through the fabric between the ranks' nodes. Needs ULNIC_BIN,
ULNIC_PROGRAMS and ULNIC_FI_LIBDIR."""
import json
import os
import signal
import subprocess
import time
import unittest
from cluster_case import PrivateCluster

ULNIC = os.environ.get("ULNIC_BIN", "build/bin/ulnic")
BIN = os.environ.get("ULNIC_PROGRAMS", os.path.dirname(ULNIC))
LIBDIR = os.environ.get("ULNIC_FI_LIBDIR", os.path.join(os.path.dirname(BIN), "lib"))
HERE = os.path.dirname(os.path.abspath(__file__))
MPI4PY_CHECK = os.path.join(HERE, "..", "programs", "mpi4py_check.py")
PYTHON = "/usr/bin/python3"  # Debian's, which python3-mpi4py is for
LIMIT = 300


class MpiOverUlnic(PrivateCluster, unittest.TestCase):
    cluster = "mpi"
    nodes = 4

    def env(self):
        e = dict(os.environ)
        e.update({"ULNIC_CLUSTER": self.cluster, "FI_PROVIDER_PATH": LIBDIR,
                  "OMPI_MCA_pml": "cm", "OMPI_MCA_mtl": "ofi", "OMPI_MCA_mtl_ofi_provider_include": "ulnic",
                  # two cores: more ranks than cores; tests may run as root
                  "OMPI_MCA_rmaps_base_oversubscribe": "1",
                  "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"})
        e.pop("ULNIC_NODE", None)  # ranks pick their nodes by local rank
        return e

    def counters(self):
        out = []
        for n in range(self.nodes):
            p = subprocess.run([ULNIC, "node", "status", "-c", self.cluster, "-n", str(n), "--json"],
                               capture_output=True, text=True, timeout=30)
            self.assertEqual(p.returncode, 0, p.stderr)
            out.append(json.loads(p.stdout)["counters"])
        return out

    def mpirun(self, n, argv, limit=LIMIT):
        before = self.counters()
        p = subprocess.run(["mpirun", "-np", str(n), *argv], env=self.env(), capture_output=True, text=True,
                           timeout=limit)
        after = self.counters()
        moved = [a["link_tx_data"] - b["link_tx_data"] for a, b in zip(after, before)]
        print(f"\nmpirun -np {n} {' '.join(os.path.basename(a) for a in argv)}: exit {p.returncode}, "
              f"data packets sent per node {moved}\n{p.stdout[-1500:]}", flush=True)
        return p, moved

    def test_pingpong_between_two_nodes(self):
        p, moved = self.mpirun(2, [os.path.join(BIN, "mpi_pingpong"), "--iters", "20"])
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertIn("ok", p.stdout.splitlines()[-1])
        rows = [line.split() for line in p.stdout.splitlines() if line.split() and line.split()[0].isdigit()]
        self.assertEqual([int(r[0]) for r in rows], [1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576])
        # Rank 0 on node 0, rank 1 on node 1: their NICs carried it, the others did not.
        self.assertGreater(moved[0], 256, moved)  # at least the 1 MiB messages' packets
        self.assertGreater(moved[1], 0, moved)
        self.assertEqual(moved[2:], [0, 0], moved)

    def test_collectives_one_rank_per_node(self):
        p, moved = self.mpirun(4, [os.path.join(BIN, "mpi_collectives"), "--rounds", "3"])
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertIn("ok: 4 ranks, 3 rounds", p.stdout)
        self.assertTrue(all(m > 0 for m in moved), moved)

    def test_collectives_two_ranks_per_node(self):
        p, moved = self.mpirun(8, [os.path.join(BIN, "mpi_collectives"), "--rounds", "2", "--max", "65536"])
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertIn("ok: 8 ranks, 2 rounds", p.stdout)
        self.assertTrue(all(m > 0 for m in moved), moved)

    def test_mpi4py(self):
        p, moved = self.mpirun(4, [PYTHON, MPI4PY_CHECK, "--rounds", "2"])
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertIn("ok: 4 ranks, 2 rounds; one-sided: Put/Get in a window checked", p.stdout)
        self.assertTrue(all(m > 0 for m in moved), moved)

    def test_ulnic_mpirun_sets_the_job_up_itself(self):
        # Only what a user has: the cluster's name and Open MPI's root permission (tests may run as root);
        # `ulnic mpirun` sets the provider path, the PML/MTL, oversubscription and no binding.
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("OMPI_MCA_", "FI_")) and k not in ("ULNIC_NODE", "ULNIC_CLUSTER")}
        env.update({"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1", "ULNIC_NODE": "3"})
        before = self.counters()
        p = subprocess.run([ULNIC, "mpirun", "-n", "4", "-c", self.cluster, os.path.join(BIN, "mpi_collectives"),
                            "--rounds", "1"], env=env, capture_output=True, text=True, timeout=LIMIT)
        moved = [a["link_tx_data"] - b["link_tx_data"] for a, b in zip(self.counters(), before)]
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertIn("ok: 4 ranks, 1 rounds", p.stdout)
        # One rank per node (ULNIC_NODE, which would put all four on node 3, is dropped).
        self.assertTrue(all(m > 0 for m in moved), moved)
        # Ranks are left unbound (the NICs' vCPUs share the cores), unless the user chose a binding.
        show = ["/bin/sh", "-c", "grep Cpus_allowed_list: /proc/self/status"]
        everywhere = "Cpus_allowed_list:\t" + open("/proc/self/status").read().split("Cpus_allowed_list:\t")[1].split("\n")[0]
        for policy, want in [(None, [everywhere] * 2), ("core", ["Cpus_allowed_list:\t0", "Cpus_allowed_list:\t1"])]:
            e = dict(env, **({"OMPI_MCA_hwloc_base_binding_policy": policy} if policy else {}))
            p = subprocess.run([ULNIC, "mpirun", "-n", "2", "-c", self.cluster, *show], env=e, capture_output=True,
                               text=True, timeout=LIMIT)
            self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
            if policy and os.cpu_count() < 2:
                continue
            self.assertEqual(sorted(p.stdout.split("\n")[:-1]), want, policy)
        # mpirun's own exit status comes back; errors are one line, before anything starts.
        p = subprocess.run([ULNIC, "mpirun", "-n", "2", "-c", self.cluster, "/bin/false"], env=env,
                           capture_output=True, text=True, timeout=LIMIT)
        self.assertNotEqual(p.returncode, 0, p.stdout + p.stderr)
        for args, code, text in [(["-n", "2", "-c", "nosuch", "/bin/true"], 1, "ulnic mpirun: cluster 'nosuch' has no nodes up"),
                                 (["-c", self.cluster, "/bin/true"], 2, "ulnic mpirun: -n N"),
                                 (["-n", "0", "/bin/true"], 2, "ulnic mpirun: -n must be 1..4096"),
                                 (["-n", "2", "--bogus", "/bin/true"], 2, "ulnic mpirun: unknown option")]:
            p = subprocess.run([ULNIC, "mpirun", *args], env=env, capture_output=True, text=True, timeout=60)
            self.assertEqual((p.returncode, p.stdout), (code, ""), args)
            self.assertIn(text, p.stderr, args)

    def test_a_killed_rank_ends_the_job_and_the_next_job_runs(self):
        prog = os.path.join(BIN, "mpi_collectives")
        job = subprocess.Popen(["mpirun", "-np", "4", prog, "--rounds", "100000"], env=self.env(),
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
        try:
            victim, until = None, time.time() + 60
            while victim is None and time.time() < until:  # a rank of this job, once it runs
                time.sleep(0.5)
                p = subprocess.run(["pgrep", "-f", "-P", str(job.pid), prog], capture_output=True, text=True)
                pids = [int(x) for x in p.stdout.split()]
                victim = pids[1] if len(pids) == 4 else None
            self.assertIsNotNone(victim, "the job's ranks never appeared")
            time.sleep(2)  # mid-job
            os.kill(victim, signal.SIGKILL)
            out, _ = job.communicate(timeout=120)
        finally:
            if job.poll() is None:
                os.killpg(job.pid, signal.SIGKILL)
                job.wait()
        self.assertNotEqual(job.returncode, 0, out[-2000:])
        self.assertNotIn("ok:", out)
        p, _ = self.mpirun(4, [prog, "--rounds", "1"])
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertIn("ok: 4 ranks, 1 rounds", p.stdout)


if __name__ == "__main__":
    unittest.main(verbosity=2)
