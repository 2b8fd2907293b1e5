#!/usr/bin/env python3
"""VIPL 1.0 (libvipl) end to end: a 4-node all-to-all over VIs.

Every node runs one vipl_alltoall at once: every pair of nodes connects one
VI pair (client/server by node order, a discriminator naming the pair), each
side sends the other K messages of varied sizes (multi-segment gathers and
scatters, several MTUs, immediate data) and W RDMA writes (the last with
immediate data), the receivers check every byte, and all disconnect cleanly.
The program exits 0 only if everything arrived and verified.

One cluster per class: a plain 4-node cluster (each reliability level in
turn, then the same run again on the same NICs: the clean disconnects left
nothing behind), and a 4-node cluster behind ulnic-switch with its fault
injector dropping, corrupting, duplicating, reordering and delaying packets.
Needs ULNIC_BIN and ULNIC_PROGRAMS in the environment.
"""
import json
import os
import select
import shutil
import signal
import subprocess
import tempfile
import time
import unittest

ULNIC = os.environ.get("ULNIC_BIN", "build/bin/ulnic")
BIN = os.environ.get("ULNIC_PROGRAMS", os.path.dirname(ULNIC))
ALLTOALL = os.path.join(BIN, "vipl_alltoall")
PEER = os.path.join(BIN, "vipl_peer")


def ulnic(*args, check=None, timeout=180):
    p = subprocess.run([ULNIC, *args], capture_output=True, text=True, timeout=timeout)
    if check is not None and p.returncode != check:
        raise AssertionError(f"ulnic {' '.join(args)} -> {p.returncode}\n{p.stdout}\n{p.stderr}")
    return p


def status(cluster, node):
    return json.loads(ulnic("node", "status", "-c", cluster, "-n", str(node), "--json", check=0).stdout)


class AllToAll:
    """A mixin: one cluster of `nodes` nodes for the class (unittest.TestCase
    subclasses below add `cluster`, `extra` and the tests)."""
    nodes = 4
    extra = []
    cluster = None

    @classmethod
    def setUpClass(cls):
        cls.rundir = tempfile.mkdtemp(prefix=f"ulnic-{cls.cluster}-", dir="/tmp")
        os.environ["ULNIC_RUNTIME_DIR"] = cls.rundir
        os.environ["ULNIC_CLUSTER"] = cls.cluster
        ulnic("cluster", "up", "-n", str(cls.nodes), "-c", cls.cluster, "--slot-size", "32", *cls.extra, check=0)

    @classmethod
    def tearDownClass(cls):
        ulnic("cluster", "down", "-c", cls.cluster)
        left = os.listdir(cls.rundir)
        shutil.rmtree(cls.rundir, ignore_errors=True)
        assert left == [], f"cluster down left {left}"

    def run_all(self, *args, timeout=600):
        """vipl_alltoall on every node at once; [(returncode, stdout, stderr)] by node."""
        procs = []
        for n in range(self.nodes):
            env = dict(os.environ, ULNIC_NODE=str(n))
            procs.append(subprocess.Popen([ALLTOALL, "--node", str(n), "--nodes", str(self.nodes), *args], env=env,
                                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
        results = []
        deadline = time.monotonic() + timeout
        for p in procs:
            try:
                out, err = p.communicate(timeout=max(1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                for q in procs:
                    q.kill()
                out, err = p.communicate()
                err += f"\n(killed after {timeout} s)"
            results.append((p.returncode, out, err))
        return results

    def assert_all_verified(self, results, messages, rdma):
        report = "\n".join(f"--- node {n}: exit {rc}\n{out}{err}" for n, (rc, out, err) in enumerate(results))
        for n, (rc, out, err) in enumerate(results):
            self.assertEqual(rc, 0, report)
            self.assertNotIn("FAIL", out, report)
            self.assertIn(f"vipl_alltoall node {n}: connected to {self.nodes - 1} peers", out, report)
            peers = self.nodes - 1
            self.assertIn(f"vipl_alltoall node {n}: OK: all verified: {peers * messages} messages", out, report)
            self.assertIn(f"{peers} x {rdma} RDMA writes", out, report)
            self.assertIn("disconnected cleanly", out, report)

    def counter(self, node, name):
        return status(self.cluster, node)["counters"][name]


class Vipl(AllToAll, unittest.TestCase):
    cluster = "vipl"

    def test_all_to_all_reliable_delivery(self):
        self.assert_all_verified(self.run_all("--messages", "128", "--rdma", "12", "--reliability", "delivery"), 128, 12)

    def test_all_to_all_reliable_reception_then_again_on_the_same_nics(self):
        # Twice in a row: the first run's disconnects and closes left the
        # NICs' VI tables and connection state as they found them.
        for _ in range(2):
            self.assert_all_verified(self.run_all("--messages", "96", "--rdma", "12", "--reliability", "reception",
                                                  "--window", "16"), 96, 12)
        for n in range(self.nodes):
            self.assertEqual(status(self.cluster, n)["state"], "running")

    # "zz": unittest runs methods alphabetically; this one kills node 3 and
    # starts it again, so it goes last.
    def test_zz_a_dead_nic_breaks_its_peers_connections(self):
        def line(p, seconds=60):
            ready, _, _ = select.select([p.stdout], [], [], seconds)
            return p.stdout.readline().strip() if ready else "(nothing)"

        server = subprocess.Popen([PEER, "serve", "nic0", "doomed"], stdout=subprocess.PIPE, text=True)
        client = subprocess.Popen([PEER, "connect", "nic3", "node0", "doomed"], stdout=subprocess.PIPE, text=True)
        try:
            self.assertEqual(line(server), "connected")
            self.assertEqual(line(client), "connected")
            os.kill(status(self.cluster, 3)["pid"], signal.SIGKILL)
            t0 = time.monotonic()
            out, _ = server.communicate(timeout=60)
            # The link's unreachable deadline (5 s), then VIP_ERROR_CONN_LOST (1).
            self.assertEqual(server.returncode, 0, out)
            self.assertRegex(out, r"lost 1 after", out)
            self.assertLess(time.monotonic() - t0, 20)
        finally:
            for p in (client, server):
                p.kill()
                p.wait()
        ulnic("node", "start", "-c", self.cluster, "-n", "3", "--slot-size", "32", check=0)
        self.assertEqual(status(self.cluster, 3)["state"], "running")

    def test_all_to_all_unreliable_on_a_lossless_fabric(self):
        # Unreliable VIs give no delivery guarantee, but below them the fabric
        # is reliable and every receive is posted in advance: all arrives.
        self.assert_all_verified(self.run_all("--messages", "64", "--rdma", "8", "--reliability", "unreliable"), 64, 8)


class ViplSwitchFaults(AllToAll, unittest.TestCase):
    """The same through ulnic-switch, with every kind of fault on every link."""
    cluster = "viplfaulty"
    extra = ["--faults", "drop=0.3,corrupt=0.01,dup=0.01,reorder=0.01,delay=50us,seed=23"]

    def test_all_to_all_survives_drop_corruption_duplication_and_reordering(self):
        before = sum(self.counter(n, "link_retransmits") for n in range(self.nodes))
        self.assert_all_verified(self.run_all("--messages", "64", "--rdma", "12", "--reliability", "reception"), 64, 12)
        time.sleep(1.2)  # the switch rewrites its counters every second
        with open(os.path.join(self.rundir, self.cluster, "fabric", "switch.json")) as f:
            links = json.load(f)["links"]
        total = {k: sum(l[k] for l in links) for k in ("dropped", "corrupted", "duplicated", "reordered")}
        self.assertTrue(all(v > 0 for v in total.values()), total)
        after = sum(self.counter(n, "link_retransmits") for n in range(self.nodes))
        self.assertGreater(after, before)


if __name__ == "__main__":
    unittest.main(verbosity=2)
