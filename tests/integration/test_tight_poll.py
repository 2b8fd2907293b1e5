#!/usr/bin/env python3
"""Classic tight-poll programs complete on a 2-core machine, every byte
verified: each waits in a loop on its API's non-blocking call, with no sleep
and no yield (before libulnic handed a spinning process's core to its NIC,
Nic::poll_found, such a program starved the emulated NICs and a round trip
took milliseconds). On one 2-node cluster (rank / side 0 on node 0, 1 on
node 1):
  * AM-2 (tests/programs/am_tight.c, `ulnic run -n 2`), natively and over
    VIPL: 2000 AM_Request4 round trips with checked arguments, then 8
    AM_RequestXfer of 64 KiB .. 1 MiB checked byte for byte by the receiver;
  * VIPL (vipl_tight.c): 500 ping-pongs of 8 .. 4096 B on a reliable VI,
    spinning on VipRecvDone, and again on VipCQDone;
  * VMMC (vmmc_tight.c): 1000 notified ping-pongs of 4 .. 4096 B, spinning
    on vmmc_poll;
  * FM 2.x (fm_tight.c, `ulnic fmrun -n 2`): 1000 messages each way,
    spinning on FM_extract.
Each run has 120 s (a hang is a failure); the programs' own watchdogs end
them after 90 s. The output shows round trips, verified bytes and the time
per round trip (not asserted). Needs ULNIC_BIN and ULNIC_PROGRAMS.
"""
import os
import re
import signal
import subprocess
import time
import unittest
from cluster_case import PrivateCluster

ULNIC = os.environ.get("ULNIC_BIN", "build/bin/ulnic")
BIN = os.environ.get("ULNIC_PROGRAMS", os.path.dirname(ULNIC))
CLUSTER = "tight"
LIMIT = 120  # seconds per run

AM_REQUESTS, AM_XFERS = 2000, 8
VIPL_ROUNDS = 500
VMMC_ROUNDS = 1000
FM_MESSAGES = 1000


def program(name):
    return os.path.join(BIN, name)


def size(i, n, lo, hi):
    """prog_size() of tests/programs/prog_common.h: message i of n."""
    if n < 2 or i == 0:
        return lo
    if i + 1 >= n:
        return hi
    return max(lo, lo + (hi - lo) * i // (n - 1) - i % 3)


def total(n, lo, hi):
    return sum(size(i, n, lo, hi) for i in range(n))


class Run:
    """Processes started together, each in a process group of its own (so a
    hung `ulnic run` is killed with its workers); output collected."""

    def __init__(self, *commands, env=None):
        self.procs = [subprocess.Popen(c, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                       env=dict(os.environ, **e), start_new_session=True)
                      for c, e in zip(commands, env or [{}] * len(commands))]

    def finish(self, test):
        """Waits (LIMIT seconds in all); returns [(exit status, output)]. A
        run still going after that fails the test."""
        results, hung = [], []
        deadline = time.monotonic() + LIMIT
        for p in self.procs:
            try:
                out, _ = p.communicate(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                out, _ = p.communicate()
                hung.append(p.args)
            results.append((p.returncode, out))
        report = "\n".join(f"--- {' '.join(p.args)}: exit {rc}\n{out}" for p, (rc, out) in zip(self.procs, results))
        print(report, flush=True)
        test.assertFalse(hung, f"no end within {LIMIT} s: {hung}\n{report}")
        for rc, out in results:
            test.assertEqual(rc, 0, report)
            test.assertNotIn("FAIL", out, report)
        return results, report


class TightPoll(PrivateCluster, unittest.TestCase):
    cluster = CLUSTER

    @classmethod
    def setUpClass(cls):
        os.environ["ULNIC_CLUSTER"] = CLUSTER
        for k in [k for k in os.environ if k.startswith("ULNIC_AM_") or k.startswith("ULNIC_FM_")]:
            del os.environ[k]
        super().setUpClass()

    def assert_line(self, out, pattern, report):
        m = re.search(pattern, out)
        self.assertIsNotNone(m, f"no line /{pattern}/\n{report}")
        return m

    # ---- AM-2

    def am(self, transport):
        results, report = Run([ULNIC, "run", "-n", "2", "--transport", transport, "-c", CLUSTER,
                               program("am_tight"), "--requests", str(AM_REQUESTS), "--xfers",
                               str(AM_XFERS)]).finish(self)
        out = results[0][1]
        xfer_bytes = total(AM_XFERS, 64 * 1024, 1024 * 1024)
        self.assert_line(out, rf"am_tight rank 0 on {transport}: {AM_REQUESTS} round trips, {AM_XFERS} xfers acked "
                              rf"\({xfer_bytes} bytes\)", report)
        self.assert_line(out, rf"am_tight rank 1 on {transport}: {AM_REQUESTS} requests and {AM_XFERS} xfers verified "
                              rf"\({xfer_bytes} bytes\)", report)

    def test_am_native(self):
        self.am("native")

    def test_am_vipl(self):
        self.am("vipl")

    # ---- VIPL

    def vipl(self, *extra):
        mode = "cq" if "--cq" in extra else "recv"
        rounds = ["--rounds", str(VIPL_ROUNDS)]
        results, report = Run([program("vipl_tight"), "server", "nic1", *rounds, *extra],
                              # Until node 1 waits, the request is VIP_NO_MATCH and the client asks again.
                              [program("vipl_tight"), "client", "nic0", "node1", *rounds, *extra]).finish(self)
        data = total(VIPL_ROUNDS, 8, 4096)
        self.assert_line(results[0][1], rf"vipl_tight server \({mode}\): {VIPL_ROUNDS} pings verified, {data} bytes",
                         report)
        self.assert_line(results[1][1], rf"vipl_tight client \({mode}\): {VIPL_ROUNDS} round trips, {2 * data} bytes "
                                        rf"verified", report)

    def test_vipl_spinning_on_recv_done(self):
        self.vipl()

    def test_vipl_spinning_on_cq_done(self):
        self.vipl("--cq")

    # ---- VMMC

    def test_vmmc_spinning_on_vmmc_poll(self):
        rounds = ["--rounds", str(VMMC_ROUNDS)]
        results, report = Run([program("vmmc_tight"), "serve", "0", *rounds],
                              [program("vmmc_tight"), "send", "1", *rounds],
                              env=[{"ULNIC_NODE": "1"}, {"ULNIC_NODE": "0"}]).finish(self)
        data = total(VMMC_ROUNDS, 4, 4096)
        self.assert_line(results[0][1], rf"vmmc_tight serve: {VMMC_ROUNDS} pings verified, {data} bytes", report)
        self.assert_line(results[1][1], rf"vmmc_tight send: {VMMC_ROUNDS} round trips, {2 * data} bytes verified",
                         report)

    # ---- FM

    def test_fm_spinning_on_fm_extract(self):
        results, report = Run([ULNIC, "fmrun", "-n", "2", "-c", CLUSTER, program("fm_tight"), "--messages",
                               str(FM_MESSAGES)]).finish(self)
        data = total(FM_MESSAGES, 8, 512) + 8 * FM_MESSAGES  # payloads and headers, each way
        for rank in (0, 1):
            self.assert_line(results[0][1], rf"fm_tight rank {rank}: {FM_MESSAGES} messages each way, {data} bytes "
                                            rf"verified", report)


if __name__ == "__main__":
    unittest.main()
