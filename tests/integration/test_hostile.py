#!/usr/bin/env python3
"""Hostile inputs on the real board (issue 20 item 3), on one 3-node cluster.

Descriptors: on nodes 0 and 1, one process per NIC posts 10^6 descriptors of random
content (tests/programs/slot_abuse.cpp random-descriptors: opcodes, flags,
nodes, slots, keys, addresses at and around its own registrations, lengths;
half of them with the fields their opcode does not read zeroed, so the
translation, the link and the receiving NIC's verdicts see random values
too) while a well-behaved pair does verified remote puts from node 0 into
node 1 and back. Checks:
  * each hostile process: every descriptor completed exactly once, its slot
    still active, no byte of the canary pages around its four registered
    regions changed, a copy still works;
  * the good pairs' data arrived byte for byte, every put completed kCqOk;
  * both NICs still run (no trap, heartbeat advancing), and a new put pair
    works afterwards.
Packets: node 2 is stopped and tests/programs/fabric_abuse.cpp takes its
fabric port: 10^6 random and mutated packets to nodes 0 and 1 (garbage,
link-level nonsense, wild ring indices, and mostly packets in sequence that
reach the protocol layer with random operation fields and payloads), while
verified puts run between 0 and 1 and a process on node 1 holds a zeroed
RemoteWrite region: the puts arrive byte for byte, the region stays zero,
both NICs run, and they counted the bad packets.
Needs ULNIC_BIN and ULNIC_PROGRAMS."""
import json
import os
import shutil
import subprocess
import tempfile
import time
import unittest
from cluster_case import PrivateCluster

ULNIC = os.environ.get("ULNIC_BIN", "build/bin/ulnic")
BIN = os.environ.get("ULNIC_PROGRAMS", os.path.dirname(ULNIC))
ABUSE, PUT = os.path.join(BIN, "slot_abuse"), os.path.join(BIN, "put_worker")
FABRIC_ABUSE = os.path.join(BIN, "fabric_abuse")
DESCRIPTORS = 1000000
PUTS = 20000


class HostileDescriptors(PrivateCluster, unittest.TestCase):
    cluster = "hostile"
    nodes = 3

    def setUp(self):
        self.work = tempfile.mkdtemp(prefix="ulnic-hostile-")
        self.addCleanup(shutil.rmtree, self.work, ignore_errors=True)

    def env(self, node):
        return dict(os.environ, ULNIC_CLUSTER=self.cluster, ULNIC_NODE=str(node))

    def status(self, node):
        p = subprocess.run([ULNIC, "node", "status", "-c", self.cluster, "-n", str(node), "--json"],
                           capture_output=True, text=True, timeout=30)
        self.assertEqual(p.returncode, 0, p.stderr)
        return json.loads(p.stdout)

    def serve(self, node, tag):
        info = os.path.join(self.work, f"{tag}.info")
        p = subprocess.Popen([PUT, "serve", "--info", info, "--size", str(4 << 20)], env=self.env(node),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.addCleanup(lambda: p.poll() is None and (p.kill(), p.wait()))
        until = time.time() + 30
        while not os.path.exists(info) and p.poll() is None and time.time() < until:
            time.sleep(0.05)
        self.assertTrue(os.path.exists(info), "the put server never wrote its info file")
        return p, info

    def put(self, node, info, dst, seed, ops):
        return subprocess.Popen([PUT, "put", "--info", info, "--dst-node", str(dst), "--ops", str(ops), "--seed",
                                 str(seed)], env=self.env(node), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True)

    def check_pair(self, server, putter, ops):
        out, err = putter.communicate(timeout=300)
        self.assertEqual(putter.returncode, 0, out + err)
        self.assertIn(f"{ops} puts, 0 failed", out)
        sout, serr = server.communicate(timeout=120)
        self.assertEqual(server.returncode, 0, sout + serr)
        self.assertIn(" 0 bad bytes", sout)
        self.assertIn(f"{ops} puts checked", sout)

    def test_1_random_descriptors_beside_verified_puts(self):
        before = [self.status(n) for n in range(2)]
        s1, i1 = self.serve(1, "to1")
        s0, i0 = self.serve(0, "to0")
        good = [(s1, self.put(0, i1, 1, 5, PUTS)), (s0, self.put(1, i0, 0, 6, PUTS))]
        hostile = [subprocess.Popen([ABUSE, "random-descriptors", "--count", str(DESCRIPTORS), "--seed", str(11 + n),
                                     "--nodes", "2"], env=self.env(n), stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, text=True) for n in range(2)]
        reports = []
        for n, h in enumerate(hostile):
            out, err = h.communicate(timeout=600)
            line = [x for x in out.splitlines() if x.startswith("{")]
            self.assertTrue(line, out + err)
            r = json.loads(line[-1])
            self.assertEqual(h.returncode, 0, json.dumps(r, indent=1) + err)
            self.assertTrue(r["ok"])
            self.assertEqual((r["posted"], r["completed"], r["canary_bytes_changed"]), (DESCRIPTORS, DESCRIPTORS, 0))
            reports.append(r)
        for server, putter in good:
            self.check_pair(server, putter, PUTS)
        for n in range(2):
            s = self.status(n)
            self.assertEqual(s["state"], "running", s)
            self.assertEqual(s["trap"]["cause"], 0, s["trap"])
            self.assertGreater(s["heartbeat"], before[n]["heartbeat"])
        for n, r in enumerate(reports):
            print(f"\n  node {n}: {r['posted']} random descriptors in {float(r['seconds']):.1f} s, statuses "
                  f"{r['statuses']}, regions registered again {r['regions_registered_again']}", flush=True)

    def test_2_a_new_pair_works_afterwards(self):
        server, info = self.serve(1, "after")
        self.check_pair(server, self.put(0, info, 1, 9, 2000), 2000)


    def test_3_a_hostile_fabric_peer(self):
        stop = subprocess.run([ULNIC, "node", "stop", "-c", self.cluster, "-n", "2"], capture_output=True, text=True,
                              timeout=120)
        self.assertEqual(stop.returncode, 0, stop.stdout + stop.stderr)
        before = [self.status(n) for n in range(2)]
        holder = subprocess.Popen([ABUSE, "hold", "--export"], env=self.env(1), stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True)
        self.addCleanup(lambda: holder.poll() is None and (holder.kill(), holder.wait()))
        self.assertTrue(holder.stdout.readline().startswith("{"), "the holder never exported its region")
        s1, i1 = self.serve(1, "f1")
        s0, i0 = self.serve(0, "f0")
        good = [(s1, self.put(0, i1, 1, 7, PUTS)), (s0, self.put(1, i0, 0, 8, PUTS))]
        fabric = os.path.join(os.environ["ULNIC_RUNTIME_DIR"], self.cluster, "fabric")
        p = subprocess.run([FABRIC_ABUSE, "--fabric", fabric, "--as", "2", "--count", str(DESCRIPTORS), "--seed", "3"],
                           capture_output=True, text=True, timeout=600)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        r = json.loads(p.stdout.splitlines()[-1])
        self.assertEqual(r["sent"], DESCRIPTORS)
        for server, putter in good:
            self.check_pair(server, putter, PUTS)
        holder.terminate()
        out, err = holder.communicate(timeout=60)
        self.assertEqual(holder.returncode, 0, out + err)
        self.assertIn('"nonzero_bytes": 0', out)
        for n in range(2):
            s = self.status(n)
            self.assertEqual(s["state"], "running", s)
            self.assertEqual(s["trap"]["cause"], 0, s["trap"])
            c, c0 = s["counters"], before[n]["counters"]
            self.assertGreater(c["link_bad_packets"], c0["link_bad_packets"])
            self.assertGreater(c["link_rx_data"] - c0["link_rx_data"], 1000)  # the protocol layer saw them
            print(f"\n  node {n}: bad packets +{c['link_bad_packets'] - c0['link_bad_packets']}, in order "
                  f"+{c['link_rx_data'] - c0['link_rx_data']}, out of order +"
                  f"{c['link_out_of_order'] - c0['link_out_of_order']}, restarts +"
                  f"{c['link_restarts'] - c0['link_restarts']}", flush=True)
        print(f"  fabric_abuse: {r}", flush=True)


if __name__ == "__main__":
    unittest.main(verbosity=2)
