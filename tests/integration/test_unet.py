#!/usr/bin/env python3
"""U-Net end to end (issue 23): endpoints, channels through the node daemons,
inline and segment sends, free and receive queues, the upcall, every refusal,
the drops U-Net counts instead of flow control, teardown when a process
exits, and a 4-node all-to-all with every byte checked.

Each endpoint is a unet_worker (tests/programs/unet_worker.c, C against
unet.h) driven line by line; the receiver checks every byte itself. One
4-node cluster for the file. Needs ULNIC_BIN and ULNIC_PROGRAMS.
"""
import json
import os
import select
import signal
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.dirname(__file__))
from cluster_case import PrivateCluster, ULNIC  # noqa: E402

BIN = os.environ.get("ULNIC_PROGRAMS", os.path.dirname(ULNIC))
WORKER = os.path.join(BIN, "unet_worker")

# unet_status (host/unet/include/unet.h)
OK, BAD_ARG, RESOURCE, NIC, TAG_IN_USE, BAD_CHANNEL, EMPTY, FULL, TIMEOUT = range(9)
INLINE_MAX, MESSAGE_MAX = 40, 65536


class Endpoint:
    """A unet_worker on one node with its endpoint created."""

    def __init__(self, node, seg=1 << 20, rx=64, free=64, mm_pin=None):
        """mm_pin: a U-Net/MM endpoint over `seg` bytes of the worker's
        malloc'd memory, at most mm_pin bytes pinned."""
        self.node = node
        env = dict(os.environ, ULNIC_CLUSTER=TestUnet.cluster, ULNIC_NODE=str(node))
        self.p = subprocess.Popen([WORKER], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True, bufsize=1)
        assert self.read()["ok"] == 1
        r = self("create", seg, rx, free) if mm_pin is None else self("createmm", seg, rx, free, mm_pin)
        assert r["st"] == OK and r["node"] == node and r.get("same", 1) == 1, r
        self.slot = r["slot"]
        self.addr = (node, self.slot)

    def read(self, timeout=120):
        if not select.select([self.p.stdout], [], [], timeout)[0]:
            raise AssertionError(f"unet_worker on node {self.node} said nothing for {timeout} s")
        line = self.p.stdout.readline()
        if not line:
            raise AssertionError(f"unet_worker on node {self.node} died: {self.p.stderr.read()}")
        return json.loads(line)

    def __call__(self, *words, timeout=120):
        self.start(*words)
        return self.read(timeout)

    def start(self, *words):
        """A command whose answer is read later (read())."""
        self.p.stdin.write(" ".join(str(w) for w in words) + "\n")
        self.p.stdin.flush()

    def channel(self, peer, tx, rx):
        r = self("channel", peer.node, peer.slot, tx, rx)
        assert r["st"] == OK, r
        return r["ch"]

    def stats(self):
        return self("stats")

    def close(self):
        if self.p.poll() is None:
            self.p.stdin.write("quit\n")
            self.p.stdin.flush()
            self.p.wait(30)
        self.p.stdin.close()
        self.p.stdout.close()
        self.p.stderr.close()


def node_counters(node):
    p = subprocess.run([ULNIC, "node", "status", "-c", TestUnet.cluster, "-n", str(node), "--json"],
                       capture_output=True, text=True, timeout=60, check=True)
    return json.loads(p.stdout)["counters"]


class TestUnet(PrivateCluster, unittest.TestCase):
    cluster = "unet"
    nodes = 4
    slot_size_mib = 16

    def setUp(self):
        self.eps = []

    def tearDown(self):
        for ep in self.eps:
            ep.close()

    def endpoint(self, node, **kw):
        ep = Endpoint(node, **kw)
        self.eps.append(ep)
        return ep

    def pair(self, tags, **kw):
        """Endpoints on nodes 0 and 1 joined by one channel each way: tags = (a's rx, b's rx)."""
        a, b = self.endpoint(0), self.endpoint(1, **kw)
        return a, b, a.channel(b, tags[1], tags[0]), b.channel(a, tags[0], tags[1])

    def test_every_call(self):
        a, b, ab, ba = self.pair((11, 12))
        self.assertEqual(b("pushn", 8, 4096, 0)["n"], 8)
        self.assertEqual(b("poll")["st"], EMPTY)
        self.assertEqual(b("ready"), {"ready": 0})
        # Inline both ways: in the send queue, and in the receive descriptor.
        self.assertEqual(a("sendi", ab, 20, 5)["st"], OK)
        self.assertEqual(a("wait", 10000)["st"], OK)
        r = b("recv", 10000, 1)
        self.assertEqual((r["st"], r["ch"], r["len"], r["inline"], r["good"], r["seed"]), (OK, ba, 20, 1, 1, 5))
        # From the segment into a free buffer (one the NIC took at its first packet).
        self.assertEqual(a("send", ab, 65536, 3000, 6)["st"], OK)
        r = b("recv", 10000, 0)
        self.assertEqual((r["len"], r["inline"], r["good"], r["seed"], r["offset"]), (3000, 0, 1, 6, 0))
        # An inline send longer than a descriptor holds lands in a buffer.
        self.assertEqual(a("sendi", ab, 100, 7)["st"], OK)
        r = b("recv", 10000, 1)
        self.assertEqual((r["len"], r["inline"], r["good"], r["offset"]), (100, 0, 1, 4096))
        self.assertEqual(b("recv", 50, 0)["st"], TIMEOUT)
        # Readiness, the upcall and the other direction.
        self.assertEqual(a("pushn", 4, 4096, 0)["n"], 4)
        self.assertEqual(b("send", ba, 8192, 4000, 8)["st"], OK)
        self.assertEqual(b("wait", 10000)["st"], OK)
        self.assertEqual(a("ready"), {"ready": 1})
        self.assertEqual(a("dispatch", 10000)["r"], -BAD_ARG)  # no upcall yet
        self.assertEqual(a("upcall", 1)["st"], OK)
        self.assertEqual(a("dispatch", 10000), {"r": 1, "n": 1, "bad": 0})
        self.assertEqual(a("dispatch", 50), {"r": 0, "n": 0, "bad": 0})
        s = b.stats()
        self.assertEqual((s["delivered"], s["rx_full"], s["free_empty"], s["too_long"], s["bad_tag"]), (3, 0, 0, 0, 0))

    def test_largest_message(self):
        a, b, ab, _ = self.pair((21, 22))
        self.assertEqual(b("push", 1 << 19, MESSAGE_MAX)["st"], OK)
        self.assertEqual(a("send", ab, 0, MESSAGE_MAX, 9)["st"], OK)
        r = b("recv", 10000, 0)
        self.assertEqual((r["st"], r["len"], r["good"], r["offset"]), (OK, MESSAGE_MAX, 1, 1 << 19))
        self.assertEqual(a("send", ab, 0, MESSAGE_MAX + 1, 9)["st"], BAD_ARG)
        self.assertEqual(a("wait", 10000)["st"], OK)

    def test_refusals(self):
        a, b, ab, _ = self.pair((31, 32))
        self.assertEqual(a("channel", 1, b.slot, 0, 33)["st"], BAD_ARG)         # tag 0
        self.assertEqual(a("channel", 9, 0, 34, 35)["st"], BAD_ARG)             # no node 9
        self.assertEqual(a("channel", 1, 8, 34, 35)["st"], BAD_ARG)             # no slot 8
        c = self.endpoint(0)
        self.assertEqual(c("channel", 1, b.slot, 36, 31)["st"], TAG_IN_USE)     # a's rx tag, same node
        self.assertEqual(self.endpoint(1).channel(a, 37, 31) >= 0, True)        # another node may use it
        self.assertEqual(c("unchannel", ab)["st"], BAD_CHANNEL)                 # a's, not c's
        self.assertEqual(c("unchannel", 64)["st"], BAD_CHANNEL)
        # The NIC refuses a send on a channel that is not the endpoint's.
        self.assertEqual(c("sendi", ab, 8, 1)["st"], OK)
        self.assertEqual(c("wait", 10000)["st"], BAD_CHANNEL)
        self.assertEqual(c("send", 63, 0, 100, 1)["st"], OK)
        self.assertEqual(c("wait", 10000)["st"], BAD_CHANNEL)
        self.assertEqual(a("send", ab, (1 << 20) - 10, 11, 1)["st"], BAD_ARG)   # past the segment
        self.assertEqual(a("sendi", ab, 129, 1)["st"], BAD_ARG)
        self.assertEqual(a("sendi", ab, 0, 1)["st"], BAD_ARG)
        self.assertEqual(a("push", 1 << 20, 1)["st"], BAD_ARG)
        self.assertEqual(a("push", 0, 0)["st"], BAD_ARG)
        # After unchannel the channel is gone for sends too, and its tag is free.
        self.assertEqual(a("unchannel", ab)["st"], OK)
        self.assertEqual(a("sendi", ab, 8, 1)["st"], OK)
        self.assertEqual(a("wait", 10000)["st"], BAD_CHANNEL)
        self.assertEqual(b("poll")["st"], EMPTY)

    def test_bad_tags_dropped_and_counted(self):
        a, b, ab, _ = self.pair((41, 42))
        self.assertEqual(b("pushn", 4, 4096, 0)["n"], 4)
        before = node_counters(1)["unet_bad_tag"]
        c = self.endpoint(2)
        wrong_tag = c.channel(b, 49, 43)     # b has no channel with rx tag 49
        wrong_sender = c.channel(b, 42, 44)  # b's tag 42 takes only from a
        for ch in (wrong_tag, wrong_sender):
            self.assertEqual(c("sendi", ch, 8, 1)["st"], OK)
            self.assertEqual(c("send", ch, 0, 2000, 2)["st"], OK)
        self.assertEqual(c("wait", 10000)["st"], OK)  # U-Net tells the sender nothing
        self.assertEqual(b("poll")["st"], EMPTY)
        s = b.stats()
        self.assertEqual((s["bad_tag"], s["delivered"], s["free_taken"]), (4, 0, 0))
        self.assertEqual(node_counters(1)["unet_bad_tag"] - before, 4)
        # The right channel still works.
        self.assertEqual(a("sendi", ab, 8, 3)["st"], OK)
        self.assertEqual(b("recv", 10000, 1)["seed"], 3)

    def test_overflow_drops_are_counted(self):
        a, b, ab, _ = self.pair((51, 52), rx=4, free=4)
        # Receive queue full: 4 of 6 inline messages fit, 2 are dropped.
        self.assertEqual(a("sendn", ab, 6, 16, -1, 100)["st"], OK)
        self.assertEqual(b.stats()["rx_full"], 2)
        self.assertEqual(b("recvn", 4, 10000), {"st": OK, "n": 4, "bad": 0, "seeds": 100 + 101 + 102 + 103})
        self.assertEqual(b("poll")["st"], EMPTY)
        # Free queue empty: 2 buffers, 3 messages that need one.
        self.assertEqual(b("pushn", 2, 4096, 0)["n"], 2)
        self.assertEqual(a("sendn", ab, 3, 1000, 0, 200)["st"], OK)
        s = b.stats()
        self.assertEqual((s["free_empty"], s["delivered"], s["free_taken"]), (1, 6, 2))
        r = b("recvn", 2, 10000)
        self.assertEqual((r["n"], r["bad"]), (2, 0))  # and their buffers are pushed again
        # A buffer too short: the message is dropped, the buffer comes back.
        self.assertEqual(b("pushn", 2, 4096, 0)["n"], 2)    # free queue: 2 + 2 = full
        self.assertEqual(b("push", 0, 1)["st"], FULL)
        big = Endpoint(1, rx=4, free=4)
        self.eps.append(big)
        ch = a.channel(big, 53, 54)
        big.channel(a, 54, 53)
        self.assertEqual(big("push", 0, 512)["st"], OK)
        self.assertEqual(a("send", ch, 0, 1000, 300)["st"], OK)
        self.assertEqual(a("wait", 10000)["st"], OK)
        s = big.stats()
        self.assertEqual((s["too_long"], s["delivered"], s["free_taken"]), (1, 0, 1))
        self.assertEqual(big("push", 4096, 4096)["free"], 1)
        self.assertEqual(big("poll")["st"], EMPTY)             # takes the dropped descriptor:
        self.assertEqual(big("push", 8192, 4096)["free"], 3)   # the 512-byte buffer is back

    def test_teardown_on_exit(self):
        a, b, ab, _ = self.pair((61, 62))
        before = node_counters(1)["unet_bad_tag"]
        os.kill(b.p.pid, signal.SIGKILL)
        b.p.wait(30)
        # Its channels went with it: its rx tag is free on node 1 again, and
        # what a still sends to it is dropped and counted by node 1's NIC.
        n = self.endpoint(1)
        self.assertEqual(n("unchannel", n.channel(a, 63, 62))["st"], OK)
        self.assertEqual(a("sendi", ab, 8, 1)["st"], OK)
        self.assertEqual(a("wait", 10000)["st"], OK)
        self.assertEqual(node_counters(1)["unet_bad_tag"] - before, 1)
        # destroy does the same without exiting.
        c = self.endpoint(2)
        c.channel(a, 70, 71)
        self.assertEqual(c("destroy")["st"], OK)
        self.assertEqual(self.endpoint(2).channel(a, 72, 71) >= 0, True)

    def test_descriptors_and_queue_words_libunet_never_writes(self):
        """Every refusal of kOpUnetEndpoint and kOpUnetSend*, full channel
        tables (a slot's, the NIC's), and lying queue words, on the NIC's
        same-node path."""
        env = dict(os.environ, ULNIC_CLUSTER=self.cluster, ULNIC_NODE="3")
        p = subprocess.run([os.path.join(BIN, "unet_abuse")], env=env, capture_output=True, text=True, timeout=120)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertTrue(json.loads(p.stdout)["ok"])

    def test_four_nodes_all_to_all(self):
        eps = [self.endpoint(n, seg=2 << 20, rx=256, free=128) for n in range(4)]
        tag = lambda src, dst: 1000 + src * 10 + dst  # the rx tag at dst of the channel from src
        ch = {}
        for i, e in enumerate(eps):
            self.assertEqual(e("pushn", 96, 8192, 0)["n"], 96)
            for j, f in enumerate(eps):
                if i != j:
                    ch[i, j] = e.channel(f, tag(i, j), tag(j, i))
        sizes = (16, 100, 4000, 8192)
        for i in range(4):
            for j in range(4):
                if i != j:
                    for k, size in enumerate(sizes):  # inline sends up to 128 bytes; the rest from the segment
                        base = -1 if size <= 128 else 1 << 20
                        r = eps[i]("sendn", ch[i, j], 5, size, base, i * 100000 + j * 1000 + k * 10)
                        self.assertEqual(r["st"], OK, (i, j, size))
        for j, e in enumerate(eps):
            r = e("recvn", 60, 30000)
            expect = sum(i * 100000 + j * 1000 + k * 10 + m
                         for i in range(4) if i != j for k in range(4) for m in range(5))
            self.assertEqual(r, {"st": OK, "n": 60, "bad": 0, "seeds": expect})
            s = e.stats()
            counts = (s["delivered"], s["rx_full"], s["free_empty"], s["too_long"], s["bad_tag"])
            self.assertEqual(counts, (60, 0, 0, 0, 0))

    # ---- U-Net/MM: the segment is each worker's own malloc'd memory

    def mm_pair(self, tags, a_pin, b_pin, seg=1 << 20, **kw):
        a = self.endpoint(0, seg=seg, mm_pin=a_pin)
        b = self.endpoint(1, seg=seg, mm_pin=b_pin, **kw)
        return a, b, a.channel(b, tags[1], tags[0]), b.channel(a, tags[0], tags[1])

    def test_mm_a_working_set_larger_than_the_pin_limit(self):
        """Sends from 512 KiB of a's heap (129 pages) with at most 36 pages
        (144 KiB) pinned: the NIC misses, the library pins on demand and
        evicts pages no send in flight uses; every byte arrives. b's
        buffers fit its limit. U-Net has no flow control, so a sends the
        32 regions three times, each round only once b has taken (and given
        back the buffers of) the one before: 32 messages against b's 40
        buffers, however late b's process runs. (a's own completions are no
        pace: a send completes at a's NIC, not when b has taken it.)"""
        a, b, ab, _ = self.mm_pair((81, 82), 36 * 4096, 1 << 20)
        self.assertEqual(b("pushn", 40, 16384, 100)["n"], 40)  # unaligned: 5 pages each
        for k in range(3):
            seed = 5000 + 32 * k
            b.start("recvn", 32, 60000)
            r = a("sendn", ab, 32, 16384, 1000, seed)  # 32 regions of 16 KiB from offset 1000
            self.assertEqual(r["st"], OK)
            got = b.read()
            self.assertEqual(got, {"st": OK, "n": 32, "bad": 0, "seeds": sum(range(seed, seed + 32))},
                             (k, b.stats(), a.stats()))
        s = a.stats()
        self.assertLessEqual(s["pinned"], 36)
        self.assertGreater(s["tlb_misses"], 0)
        self.assertGreater(s["evictions"], 0)
        self.assertGreaterEqual(s["pins"], 128)  # every page of the 512 KiB at least once
        self.assertEqual(s["pending"], 0)
        s = b.stats()
        self.assertEqual((s["delivered"], s["drops_tlb_miss"], s["free_empty"]), (96, 0, 0))
        self.assertEqual((s["pinned"], s["evictions"]), (161, 0))
        # The segment is a's memory still: what it wrote is there after destroy.
        self.assertEqual(a("segcheck", 1000 + 31 * 16384, 16384, 5095), {"good": 1})
        self.assertEqual(a("destroy")["st"], OK)
        self.assertEqual(a("segcheck", 1000 + 31 * 16384, 16384, 5095), {"good": 1})

    def test_mm_buffers_beyond_the_pin_limit_drop_and_count(self):
        """b posts 16 buffers of 16 KiB (65 pages: the heap segment is not
        page aligned) with at most 36 pages pinned: the first ones are
        mapped, the rest cannot be without unmapping those before them. 16
        messages while b is not looking: the mapped buffers take theirs,
        the others are dropped and counted (U-Net has no flow control) and
        their buffers come back; as b takes them the next buffers in the
        queue are mapped first, so the next message lands."""
        a, b, ab, _ = self.mm_pair((83, 84), 256 * 1024, 36 * 4096, free=16)
        self.assertEqual(b("pushn", 16, 16384, 0)["n"], 16)
        self.assertLessEqual(b.stats()["pinned"], 36)
        self.assertEqual(a("sendn", ab, 16, 16384, 0, 7000)["st"], OK)
        r = b("recvn", 16, 2000)
        self.assertEqual((r["st"], r["bad"]), (TIMEOUT, 0))
        s = b.stats()
        self.assertEqual(s["delivered"], r["n"])
        self.assertEqual(s["delivered"] + s["drops_tlb_miss"], 16, s)
        self.assertGreater(s["drops_tlb_miss"], 0)
        self.assertGreater(s["delivered"], 0)
        self.assertGreater(s["tlb_misses"], 0)
        self.assertLessEqual(s["pinned"], 36)
        for seed in (9990, 9991):
            # (a's send may wait for a page of a's own: a's library maps it in
            # unet_send_wait, as a U-Net/MM program waits for its sends.)
            self.assertEqual(a("send", ab, 0, 3000, seed)["st"], OK)
            b.start("recv", 10000, 1)
            self.assertEqual(a("wait", 10000)["st"], OK)
            r = b.read()
            self.assertEqual((r["st"], r.get("good"), r.get("seed")), (OK, 1, seed), (r, b.stats()))

    def test_mm_refusals(self):
        env = dict(os.environ, ULNIC_CLUSTER=self.cluster, ULNIC_NODE="2")
        w = self.endpoint(2)
        self.assertEqual(w("createmm", 1 << 20, 64, 64, 4096)["st"], BAD_ARG)  # pin limit below the minimum
        del env


if __name__ == "__main__":
    unittest.main()
