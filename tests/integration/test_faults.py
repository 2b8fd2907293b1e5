#!/usr/bin/env python3
"""Faults a user will hit (issue 20): a process SIGKILLed in the middle of a
transfer, on every protocol; ulnicd killed and restarted under live traffic;
an AM over VIPL peer stopped while a connection to it is made; a runtime
directory without room at cluster start.

One 2-node cluster for the class. In each test a process on one node is
killed while data flows; the test checks what its peer sees and how soon
(bounds that are about a timeout the product states, generous, never about
speed), and that both nodes' daemons took everything back: every slot a
process was given is wiped and free again (ulnicd's log: "pid P attached to
slot K" ... "slot K wiped and free"), VMMC exports and grants are gone, and
the same protocol works again on the same NICs (the firmware's per-slot
tables -- VIs, AM endpoints, import tables, operations -- are cleared with
the slot).

Needs ULNIC_BIN and ULNIC_PROGRAMS in the environment.
"""
import json
import os
import re
import select
import signal
import subprocess
import tempfile
import time
import unittest

import test_vmmc
from cluster_case import FIRMWARE_DIR, PrivateCluster, ULNIC, process_alive, stop_process

BIN = os.environ.get("ULNIC_PROGRAMS", os.path.dirname(ULNIC))
VIPL_TIGHT = os.path.join(BIN, "vipl_tight")
COPY_WORKER = os.path.join(BIN, "copy_worker")
FIRMWARE = os.path.join(FIRMWARE_DIR or os.path.join(os.path.dirname(ULNIC), "..", "firmware"), "ulnic-fw.elf")
AM_TIGHT = os.path.join(BIN, "am_tight")
FM_TIGHT = os.path.join(BIN, "fm_tight")
VIPL_REGISTER = os.path.join(BIN, "vipl_register")
SLOT_ABUSE = os.path.join(BIN, "slot_abuse")

# vmmc_status (host/vmmc/include/ulnic/vmmc.h)
NO_EXPORT, BAD_REGION, UNREACHABLE, REVOKED, IO = 1, 4, 6, 9, 12


class Worker(test_vmmc.Worker):
    """test_vmmc's vmmc_worker driver, and a command sent without waiting for its answer."""

    def write(self, *words):
        self.p.stdin.write(" ".join(str(w) for w in words) + "\n")
        self.p.stdin.flush()

    def close(self):
        for f in (self.p.stdout, self.p.stderr, self.p.stdin):
            f.close()


class KilledMidTransfer(PrivateCluster, unittest.TestCase):
    cluster = "faults"
    nodes = 2
    slot_size_mib = 32

    def setUp(self):
        self.workers = []
        os.environ["ULNIC_CLUSTER"] = self.cluster

    def tearDown(self):
        for w in self.workers:
            w.quit()

    def worker(self, node):
        w = Worker(node)
        self.workers.append(w)
        return w

    def daemon_log(self, node):
        with open(os.path.join(self.rundir, self.cluster, f"node{node}", "ulnicd.log")) as f:
            return f.read()

    def wait_log(self, node, pattern, seconds=15):
        deadline = time.monotonic() + seconds
        while not re.search(pattern, self.daemon_log(node)):
            if time.monotonic() > deadline:
                self.fail(f"node {node}'s ulnicd never logged /{pattern}/ in {seconds} s:\n{self.daemon_log(node)}")
            time.sleep(0.1)

    def attached_pid(self, node, program, seconds=60):
        """The live process running `program` that node's ulnicd gave a slot."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            for m in re.finditer(r"pid (\d+) attached to slot", self.daemon_log(node)):
                try:
                    with open(f"/proc/{m[1]}/cmdline") as f:
                        if program in f.read():
                            return int(m[1])
                except OSError:
                    pass
            time.sleep(0.1)
        self.fail(f"no {program} attached on node {node} within {seconds} s")

    def assertEverySlotReclaimed(self, seconds=15):
        """Every slot ulnicd gave a process was wiped after it: none leaked."""
        for node in range(self.nodes):
            deadline = time.monotonic() + seconds
            while True:
                held = {}
                for line in self.daemon_log(node).splitlines():
                    if m := re.search(r"pid (\d+) attached to slot (\d+)", line):
                        held[int(m[2])] = int(m[1])
                    elif m := re.search(r"slot (\d+) wiped and free", line):
                        held.pop(int(m[1]), None)
                if not held or time.monotonic() > deadline:
                    break
                time.sleep(0.1)
            self.assertEqual(held, {}, f"node {node}: slots still held (slot: pid)\n{self.daemon_log(node)}")

    # ------------------------------------------------------------------ VMMC

    def stream_and_kill(self, tx, victim, size, seed):
        """Sends of `size` bytes, four in flight, into import 0 of tx; the victim
        is SIGKILLed while the first of them is in flight. Returns the first
        send status that is not OK and the seconds from the kill to it."""
        tx.write("send", 0, 0, size, seed, "async=4")
        os.kill(victim.pid, signal.SIGKILL)
        killed = time.monotonic()
        victim.p.wait(30)
        reply = tx.read()
        while reply.get("ok") == 1 and time.monotonic() - killed < 60:
            reply = tx("send", 0, 0, size, seed, "async=4")
        return reply, time.monotonic() - killed

    def test_vmmc_exporter_killed_mid_stream(self):
        rx, tx = Worker(1), self.worker(0)
        self.assertEqual(rx("export", "victim", 8 << 20).get("ok"), 1)
        self.assertEqual(tx("import", 1, "victim").get("ok"), 1)
        self.assertEqual(tx("send", 0, 0, 2 << 20, 1, "async=4").get("ok"), 1)
        reply, waited = self.stream_and_kill(tx, rx, 2 << 20, 2)
        rx.close()
        # The exporter's slot is detached at once (its socket closed): its
        # incoming page table entry goes with it and the NIC refuses what
        # arrives for it. No link timeout is involved; 30 s is generous.
        self.assertEqual(reply.get("status"), REVOKED, reply)
        self.assertLess(waited, 30)
        self.wait_log(1, rf"slot {rx.slot} \(pid {rx.pid}\) detached")
        self.wait_log(1, rf"slot {rx.slot} wiped and free")
        # The importer gives its dead import back and imports afresh: the
        # name is free for a new exporter on the same node and slot table.
        self.assertEqual(tx("unimport", 0).get("ok"), 1)
        rx2 = self.worker(1)
        self.assertEqual(rx2("export", "victim", 8 << 20).get("ok"), 1)
        imp = tx("import", 1, "victim")
        self.assertEqual(imp.get("ok"), 1, imp)
        self.assertEqual(tx("send", imp["import"], 0, 2 << 20, 3, "async=4").get("ok"), 1)
        self.assertEqual(rx2("verify", "victim", 0, 8 << 20, 3).get("ok"), 1)
        for w in self.workers:
            w.quit()
        self.workers = []
        self.assertEverySlotReclaimed()

    def test_vmmc_importer_killed_mid_stream(self):
        rx, tx = self.worker(1), Worker(0)
        self.assertEqual(rx("export", "survivor", 8 << 20).get("ok"), 1)
        self.assertEqual(tx("import", 1, "survivor").get("ok"), 1)
        self.assertEqual(tx("send", 0, 0, 2 << 20, 1, "async=4").get("ok"), 1)
        tx.write("send", 0, 0, 2 << 20, 2, "async=4")
        os.kill(tx.pid, signal.SIGKILL)
        tx.p.wait(30)
        tx.close()
        # Its daemon detaches it and mails the exporter's daemon, which takes
        # the grant back from its NIC (ulnicd's mail: no link timeout).
        self.wait_log(0, rf"slot {tx.slot} wiped and free")
        self.wait_log(1, rf"'survivor': grant of node 0 slot {tx.slot} revoked")
        # The exporter never noticed anything and serves the next importer.
        tx2 = self.worker(0)
        self.assertEqual(tx2("import", 1, "survivor").get("ok"), 1)
        self.assertEqual(tx2("send", 0, 0, 2 << 20, 4, "async=4").get("ok"), 1)
        self.assertEqual(rx("verify", "survivor", 0, 8 << 20, 4).get("ok"), 1)
        for w in self.workers:
            w.quit()
        self.workers = []
        self.assertEverySlotReclaimed()

    # ------------------------------------------------------------------ VIPL

    def test_vipl_peer_killed_mid_transfer(self):
        def side(*args):
            return subprocess.Popen([VIPL_TIGHT, *args, "--timeout", "120"], stdout=subprocess.PIPE,
                                    stderr=subprocess.STDOUT, text=True)

        survivor = side("server", "nic0", "--rounds", "100000000")
        victim = side("client", "nic1", "node0", "--rounds", "100000000")
        try:
            # Mid-transfer: the client attached, and pings and pongs flowing.
            pid = self.attached_pid(1, "vipl_tight")
            self.assertEqual(pid, victim.pid)
            time.sleep(1)
            self.assertIsNone(victim.poll(), "the transfer ended before the kill")
            self.assertIsNone(survivor.poll(), "the transfer ended before the kill")
            victim.kill()
            victim.wait(30)
            killed = time.monotonic()
            # The victim's NIC tears its VIs down with its slot and tells the
            # peer NIC: the survivor's VI goes to the error state, its receive
            # completes flushed (VIP_ERROR_CONN_LOST to the callback), and it
            # fails at once instead of at its 120 s watchdog.
            out, _ = survivor.communicate(timeout=110)
            waited = time.monotonic() - killed
        finally:
            for p in (survivor, victim):
                if p.poll() is None:
                    p.kill()
                p.communicate()
        self.assertEqual(survivor.returncode, 1, out)
        self.assertIn("FAIL", out)
        self.assertLess(waited, 30, out)
        self.assertEverySlotReclaimed()
        # The same NICs serve a new connection.
        again = [side("server", "nic0", "--rounds", "200"), side("client", "nic1", "node0", "--rounds", "200")]
        outs = [p.communicate(timeout=300)[0] for p in again]
        for n, p in enumerate(again):
            self.assertEqual(p.returncode, 0, outs[n])
        self.assertEverySlotReclaimed()

    # ------------------------------------------------------------------ AM

    def kill_rank_1(self, argv, program):
        """Starts the job `argv` (ulnic run or fmrun, two ranks, one per node)
        and SIGKILLs rank 1 (`program` on node 1) while it runs. Returns the
        job, the victim's pid, its output and the seconds from the kill to
        the job's end."""
        job = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
        try:
            victim = self.attached_pid(1, program)
            time.sleep(1)
            self.assertIsNone(job.poll(), "the job ended before the kill")
            os.kill(victim, signal.SIGKILL)
            killed = time.monotonic()
            out, err = job.communicate(timeout=60)
            return job, victim, out, err, time.monotonic() - killed
        finally:
            if job.poll() is None:
                os.killpg(job.pid, signal.SIGKILL)
                job.communicate()

    def am_rank_killed(self, transport):
        """`ulnic run` of two ranks in a ping-pong of requests and replies;
        rank 1 is SIGKILLed while it runs. The master ends the job with
        128 + 9 and takes the survivor down (host/am/SEMANTICS.md, SPMD)."""
        job, victim, out, err, waited = self.kill_rank_1(
            [ULNIC, "run", "-n", "2", "--transport", transport, "-c", self.cluster, AM_TIGHT, "--requests", "100000000",
             "--timeout", "120"], "am_tight")
        self.assertEqual(job.returncode, 128 + 9, out + err)
        self.assertRegex(err, rf"rank 1 \(pid {victim}\) was killed by signal 9", err)
        self.assertLess(waited, 30, err)
        self.assertEverySlotReclaimed()
        # The same NICs run a job again.
        p = subprocess.run([ULNIC, "run", "-n", "2", "--transport", transport, "-c", self.cluster, AM_TIGHT,
                            "--requests", "200"], capture_output=True, text=True, timeout=300)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertEverySlotReclaimed()

    def test_am_native_rank_killed_mid_job(self):
        self.am_rank_killed("native")

    def test_am_over_vipl_rank_killed_mid_job(self):
        self.am_rank_killed("vipl")

    # ------------------------------------------- AM over VIPL: a slow peer

    def test_am_over_vipl_connects_to_a_peer_stopped_past_5s(self):
        """A two-rank am_tight job over VIPL, held after its first barrier
        (--hold: every endpoint up, no connection made yet). Rank 1 is
        SIGSTOPped, rank 0 let go (its first request makes the connection),
        and rank 1 stays stopped 8 s: its listener thread cannot take the
        connection meanwhile (its NIC answers VIP_NO_MATCH, or holds the
        request for the ConnectWait the listener posted), and rank 0 keeps
        asking. The job must then end well: a live peer that was off the CPU
        is not a lost one (issue 20's stress: processes unscheduled for 1-20
        s). With the old 5 s bound on the connection (before 3af0b4a) the
        first request came back undeliverable (checked)."""
        hold = os.path.join(tempfile.mkdtemp(prefix="amhold", dir=self.rundir), "go")
        job = subprocess.Popen([ULNIC, "run", "-n", "2", "--transport", "vipl", "-c", self.cluster, AM_TIGHT,
                                "--requests", "200", "--xfers", "2", "--hold", hold, "--timeout", "120"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
        try:
            deadline = time.monotonic() + 60
            while not os.path.exists(hold + ".ready"):
                self.assertIsNone(job.poll(), "the job ended before its hold")
                self.assertLess(time.monotonic(), deadline, "rank 0 never reached its hold")
                time.sleep(0.05)
            rank1 = self.attached_pid(1, "am_tight")
            stop_process(rank1)
            try:
                open(hold, "w").close()
                time.sleep(8)
                self.assertIsNone(job.poll(), "the job ended while rank 1 was stopped")
            finally:
                os.kill(rank1, signal.SIGCONT)
            out, err = job.communicate(timeout=120)
        finally:
            if job.poll() is None:
                os.killpg(job.pid, signal.SIGKILL)
                job.communicate()
        self.assertEqual(job.returncode, 0, out + err)
        self.assertIn("200 round trips, 2 xfers acked", out)
        self.assertIn("200 requests and 2 xfers verified", out)
        self.assertEverySlotReclaimed()

    # ------------------------------------------------------------------ FM

    def test_fm_rank_killed_mid_job(self):
        # ulnic fmrun stops the job when a rank fails (README, Fast Messages).
        job, victim, out, err, waited = self.kill_rank_1(
            [ULNIC, "fmrun", "-n", "2", "-c", self.cluster, FM_TIGHT, "--messages", "10000000", "--timeout", "120"],
            "fm_tight")
        self.assertEqual(job.returncode, 128 + 9, out + err)
        self.assertIn("rank 1 exited with 137: stopping the job", err)
        self.assertLess(waited, 30, err)
        self.assertEverySlotReclaimed()
        p = subprocess.run([ULNIC, "fmrun", "-n", "2", "-c", self.cluster, FM_TIGHT, "--messages", "200"],
                           capture_output=True, text=True, timeout=300)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertEverySlotReclaimed()

    # ------------------------------------------------------------ ulnicd

    def counters(self, node):
        p = subprocess.run([ULNIC, "node", "status", "-c", self.cluster, "-n", str(node), "--json"],
                           capture_output=True, text=True, timeout=60)
        return json.loads(p.stdout)

    def advancing(self, node, counter, seconds=30):
        """Whether node's `counter` moves within `seconds` (traffic flows)."""
        before = self.counters(node)["counters"][counter]
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            time.sleep(0.2)
            if self.counters(node)["counters"][counter] != before:
                return True
        return False

    # ------------------------------------------------------------ reflash

    # "zy": late (unittest runs methods alphabetically): it reflashes node 1.
    def test_zy_a_nic_reflashed_under_traffic(self):
        server = subprocess.Popen([VIPL_TIGHT, "server", "nic0", "--rounds", "100000000", "--timeout", "300"],
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        client = subprocess.Popen([VIPL_TIGHT, "client", "nic1", "node0", "--rounds", "100000000", "--timeout", "300"],
                                  env=dict(os.environ, ULNIC_NODE="1"), stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, text=True)
        copier = subprocess.Popen([COPY_WORKER, "--ops", "1000000000"], env=dict(os.environ, ULNIC_NODE="1"),
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        procs = [server, client, copier]
        try:
            rx, tx = self.worker(1), self.worker(0)
            self.assertEqual(rx("export", "flashed", 8 << 20).get("ok"), 1)
            self.assertEqual(tx("import", 1, "flashed").get("ok"), 1)
            self.assertEqual(tx("send", 0, 0, 2 << 20, 1, "async=4").get("ok"), 1)
            self.attached_pid(1, "vipl_tight")
            self.attached_pid(1, "copy_worker")
            before = self.counters(1)
            p = subprocess.run([ULNIC, "node", "flash", "-c", self.cluster, "-n", "1", FIRMWARE], capture_output=True,
                               text=True, timeout=120)
            self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
            after = self.counters(1)
            self.assertEqual(after["pid"], before["pid"])  # the same QEMU, a new boot
            self.assertEqual(after["boot_count"], before["boot_count"] + 1)
            self.wait_log(1, r"firmware rebooted \(boot #\d+\): its slots' processes lost their NIC state")
            # The new firmware knows nothing the old one held, and the work in
            # flight will never complete: the processes lose their slots (the
            # header says flushed) and fail at once, not at their watchdogs
            # (300 s). The VIPL client's library flushes its VI (and its NIC
            # reports VIP_ERROR_CATASTROPHIC); the server's VI breaks as its
            # link sees the peer reboot; the copier's wait fails.
            for p in (server, client):
                out, _ = p.communicate(timeout=60)
                self.assertEqual(p.returncode, 1, out)
                self.assertIn("FAIL", out)
            out, _ = copier.communicate(timeout=60)
            self.assertEqual(copier.returncode, 1, out)
            self.assertIn("the NIC stopped serving this slot", out)
            # A VMMC process of before cannot register memory any more.
            self.assertEqual(rx("export", "more", 4096, timeout=30).get("status"), BAD_REGION)
            # Exports too: sends into the old one are refused by the new NIC.
            reply = tx("send", 0, 0, 4096, 2)
            for _ in range(100):
                if reply.get("status") == REVOKED:
                    break
                time.sleep(0.1)
                reply = tx("send", 0, 0, 4096, 2)
            self.assertEqual(reply.get("status"), REVOKED, reply)
            # New processes work at once: copies, VMMC, VIPL.
            fresh = subprocess.run([COPY_WORKER, "--ops", "1000"], env=dict(os.environ, ULNIC_NODE="1"),
                                   capture_output=True, text=True, timeout=120)
            self.assertEqual(fresh.returncode, 0, fresh.stdout + fresh.stderr)
            rx2, tx2 = self.worker(1), self.worker(0)
            self.assertEqual(rx2("export", "reflashed", 8 << 20).get("ok"), 1)
            self.assertEqual(tx2("import", 1, "reflashed").get("ok"), 1)
            self.assertEqual(tx2("send", 0, 0, 2 << 20, 3, "async=4").get("ok"), 1)
            self.assertEqual(rx2("verify", "reflashed", 0, 8 << 20, 3).get("ok"), 1)
            again = [subprocess.Popen([VIPL_TIGHT, "server", "nic0", "--rounds", "200"], stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, text=True),
                     subprocess.Popen([VIPL_TIGHT, "client", "nic1", "node0", "--rounds", "200"],
                                      env=dict(os.environ, ULNIC_NODE="1"), stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, text=True)]
            procs += again
            for p in again:
                out, _ = p.communicate(timeout=120)
                self.assertEqual(p.returncode, 0, out)
        finally:
            for w in self.workers:
                w.quit()
            self.workers = []
            for p in procs:
                if p.poll() is None:
                    p.kill()
                p.communicate()
        self.assertEverySlotReclaimed()

    # "zz": runs last (unittest runs methods alphabetically): it kills node 1's daemon.
    def test_zz_ulnicd_killed_and_restarted_under_live_traffic(self):
        # Live traffic on node 1: a VIPL client in a ping-pong with node 0, a
        # process copying through its NIC, and a VMMC export node 0 streams into.
        server = subprocess.Popen([VIPL_TIGHT, "server", "nic0", "--rounds", "100000000", "--timeout", "300"],
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        client = subprocess.Popen([VIPL_TIGHT, "client", "nic1", "node0", "--rounds", "100000000", "--timeout", "300"],
                                  env=dict(os.environ, ULNIC_NODE="1"), stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, text=True)
        copier = subprocess.Popen([os.path.join(BIN, "copy_worker"), "--ops", "1000000000", "--quiet"],
                                  env=dict(os.environ, ULNIC_NODE="1"), stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, text=True)
        procs = [server, client, copier]
        try:
            rx, tx = self.worker(1), self.worker(0)
            self.assertEqual(rx("export", "kept", 8 << 20).get("ok"), 1)
            self.assertEqual(tx("import", 1, "kept").get("ok"), 1)
            # And an importer on node 1, whose grant node 0's daemon keeps.
            far_rx, far_tx = self.worker(0), self.worker(1)
            self.assertEqual(far_rx("export", "far", 4096).get("ok"), 1)
            self.assertEqual(far_tx("import", 0, "far").get("ok"), 1)
            self.attached_pid(1, "vipl_tight")
            self.attached_pid(1, "copy_worker")
            old = self.counters(1)
            self.assertGreater(old["daemon_pid"], 0)
            os.kill(old["daemon_pid"], signal.SIGKILL)
            while process_alive(old["daemon_pid"]):
                time.sleep(0.05)
            self.assertEqual(self.counters(1)["daemon_pid"], 0)
            human = subprocess.run([ULNIC, "node", "status", "-c", self.cluster, "-n", "1"], capture_output=True,
                                   text=True).stdout
            self.assertIn("ulnicd     NOT RUNNING (ulnic node start restarts it)", human)

            # Without its daemon, what runs goes on: the data path is the
            # processes' slots and the NICs.
            self.assertTrue(self.advancing(1, "vi_ops"), "VIPL traffic stopped with the daemon")
            self.assertTrue(self.advancing(1, "copy_bytes"), "copies stopped with the daemon")
            self.assertEqual(tx("send", 0, 0, 2 << 20, 5, "async=4").get("ok"), 1)
            self.assertEqual(rx("verify", "kept", 0, 8 << 20, 5).get("ok"), 1)
            # What needs the daemon fails at once, in one clear line: a new
            # process, and a request of a process that had it.
            p = subprocess.run([os.path.join(BIN, "copy_worker"), "--ops", "10"], env=dict(os.environ, ULNIC_NODE="1"),
                               capture_output=True, text=True, timeout=60)
            self.assertNotEqual(p.returncode, 0)
            self.assertIn("cannot reach the node daemon", p.stderr)
            self.assertEqual(rx("export", "more", 4096, timeout=30).get("status"), IO)

            # Restarted: the processes of before keep their slots and run on;
            # new ones get the free slots and everything works for them.
            p = subprocess.run([ULNIC, "node", "start", "-c", self.cluster, "-n", "1"], capture_output=True, text=True,
                               timeout=120)
            self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
            self.assertIn("ulnicd restarted", p.stdout)
            self.assertGreater(self.counters(1)["daemon_pid"], 0, self.daemon_log(1)[-3000:])
            self.wait_log(1, rf"slot {rx.slot} is held by a process of an earlier daemon")
            self.assertTrue(self.advancing(1, "vi_ops"))
            self.assertTrue(self.advancing(1, "copy_bytes"))
            fresh = subprocess.run([os.path.join(BIN, "copy_worker"), "--ops", "1000"],
                                   env=dict(os.environ, ULNIC_NODE="1"), capture_output=True, text=True, timeout=120)
            self.assertEqual(fresh.returncode, 0, fresh.stderr)
            self.assertIn("1000 copies verified, 0 bad", fresh.stderr + fresh.stdout)
            rx2 = self.worker(1)
            self.assertNotIn(rx2.slot, (rx.slot,))
            self.assertEqual(rx2("export", "after", 8 << 20).get("ok"), 1)
            tx2 = self.worker(0)
            self.assertEqual(tx2("import", 1, "after").get("ok"), 1)
            # An export made before is unknown to the new daemon: found by no one.
            self.assertEqual(tx2("import", 1, "kept", 500).get("status"), NO_EXPORT)  # waits 0.5 s for it
            # A process of before still has no daemon to ask.
            self.assertEqual(rx("export", "more", 4096, timeout=30).get("status"), IO)
            self.assertEqual(tx2("send", 0, 0, 2 << 20, 6, "async=4").get("ok"), 1)
            self.assertEqual(rx2("verify", "after", 0, 8 << 20, 6).get("ok"), 1)
            # The old exporter's data path still works too.
            self.assertEqual(tx("send", 0, 0, 2 << 20, 7, "async=4").get("ok"), 1)
            self.assertEqual(rx("verify", "kept", 0, 8 << 20, 7).get("ok"), 1)
            # The old importer ends: its slot is reclaimed, and the grant it
            # held is taken back on node 0 (the new daemon never knew its
            # imports: it tells every node the slot is gone).
            self.workers.remove(far_tx)
            far_tx.quit()
            self.wait_log(1, rf"slot {far_tx.slot} \(of an earlier daemon\) let go")
            self.wait_log(0, rf"'far': grant of node 1 slot {far_tx.slot} revoked "
                             r"\(its process, of an earlier daemon, is gone\)")
        finally:
            for w in self.workers:
                w.quit()
            self.workers = []
            for p in procs:
                p.kill()
                p.communicate()
        # The slots of the processes of before are reclaimed as they end.
        self.wait_log(1, rf"slot {rx.slot} \(of an earlier daemon\) let go")
        self.assertEverySlotReclaimed()

    # ------------------------------------------------------------ restart

    # "zzz": last of all: it restarts node 1.
    def test_zzz_the_first_message_to_a_restarted_node_gets_through(self):
        # Node 0 knew node 1's earlier boot and hears nothing from the new one
        # before a job's first request goes there. That request once went to
        # the old boot, was refused, and failed with everything in flight to
        # the restarted peer: an AM job that spins for its first reply hung
        # (the soak, about once an hour). The new boot announces itself.
        restarts = self.counters(0)["counters"]["link_restarts"]
        for args in (["node", "stop"], ["node", "start", "--slot-size", str(self.slot_size_mib)]):
            p = subprocess.run([ULNIC, *args, "-c", self.cluster, "-n", "1"], capture_output=True, text=True,
                               timeout=120)
            self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        # Node 0 learns of the new boot from its announcement, with no traffic.
        deadline = time.monotonic() + 30
        while self.counters(0)["counters"]["link_restarts"] == restarts and time.monotonic() < deadline:
            time.sleep(0.1)
        self.assertEqual(self.counters(0)["counters"]["link_restarts"], restarts + 1)
        p = subprocess.run([ULNIC, "run", "-n", "2", "--transport", "native", "-c", self.cluster, AM_TIGHT,
                            "--requests", "200", "--xfers", "1", "--timeout", "60"], capture_output=True, text=True,
                           timeout=300)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertIn("200 requests and 1 xfers verified", p.stdout)
        # ... and not again when the job began.
        self.assertEqual(self.counters(0)["counters"]["link_restarts"], restarts + 1)
        self.assertEverySlotReclaimed()


class NicOffTheCpu(PrivateCluster, unittest.TestCase):
    """A NIC operation that should finish at once (here VipRegisterMem, a
    registration through Nic::run) is bounded by the time the NIC ran, not
    by the wall clock (host/core nic.h, NicDeadline). A 2-core host under
    load left NICs off the CPU for up to 20 s (issue 20's stress runs); with
    a 10 s wall-clock bound, libvipl failed such calls on live NICs. A NIC
    that is gone (its QEMU killed: the node's daemon exits) still fails them
    after the bound."""
    cluster = "offcpu"
    nodes = 1
    slot_size_mib = 16

    def setUp(self):
        os.environ["ULNIC_CLUSTER"] = self.cluster
        self.qemu = json.loads(subprocess.run([ULNIC, "node", "status", "-c", self.cluster, "-n", "0", "--json"],
                                              capture_output=True, text=True, timeout=60).stdout)["pid"]
        self.prog = subprocess.Popen([VIPL_REGISTER, "nic0"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True, env=dict(os.environ, ULNIC_NODE="0"))
        self.addCleanup(self.finish)
        self.assertEqual(self.read(), "ready")

    def finish(self):
        self.prog.stdin.close()  # its end of input: it exits
        self.prog.wait(60)
        self.prog.stdout.close()
        self.prog.stderr.close()

    def read(self, seconds=60):
        ready, _, _ = select.select([self.prog.stdout], [], [], seconds)
        self.assertTrue(ready, f"vipl_register said nothing in {seconds} s")
        return self.prog.stdout.readline().strip()

    def register(self):
        """(VIP_RETURN, ms) of one VipRegisterMem."""
        self.prog.stdin.write("register\n")
        self.prog.stdin.flush()
        words = self.read(120).split()
        self.assertEqual(words[0], "register", words)
        return int(words[1]), float(words[2])

    def test_a_call_outlasts_its_nic_off_the_cpu(self):
        self.assertEqual(self.register()[0], 0)
        stop_process(self.qemu)
        try:
            self.prog.stdin.write("register\n")
            self.prog.stdin.flush()
            # Past libvipl's 10 s bound on the NIC: the call still waits.
            ready, _, _ = select.select([self.prog.stdout], [], [], 12)
            self.assertFalse(ready, "the call returned while its NIC was stopped")
        finally:
            os.kill(self.qemu, signal.SIGCONT)
        words = self.read().split()
        self.assertEqual(words[:2], ["register", "0"], words)  # VIP_SUCCESS once the NIC ran
        self.assertGreaterEqual(float(words[2]), 12000, words)
        self.assertEqual(self.register()[0], 0)

    def test_b_a_call_on_a_nic_that_is_gone_fails(self):
        self.assertEqual(self.register()[0], 0)
        os.kill(self.qemu, signal.SIGKILL)
        rc, ms = self.register()
        self.assertEqual(rc, 3)  # VIP_ERROR_RESOURCE
        self.assertGreaterEqual(ms, 10000)  # the bound counts from the call
        self.assertLess(ms, 60000)


class DaemonNicOffTheCpu(PrivateCluster, unittest.TestCase):
    """The daemon's control commands to the firmware (a process's attach)
    are bounded by the time QEMU ran, not the wall clock (CpuDeadline,
    common/process.cpp): under two CPU burners an attach found QEMU off the
    CPU for its whole 5 s and failed, and the slot it named then stayed
    refused (the firmware took the attach late; the daemon thought the slot
    free) -- every later process of the node failed to attach (issue 20's
    stress). Here the bound is 300 ms ($ULNIC_CTRL_TIMEOUT_MS at node
    start), so 10x it on the wall clock is 3 s."""
    cluster = "ctrloff"
    nodes = 1
    slot_size_mib = 16

    @classmethod
    def setUpClass(cls):
        os.environ["ULNIC_CTRL_TIMEOUT_MS"] = "300"
        try:
            super().setUpClass()
        finally:
            del os.environ["ULNIC_CTRL_TIMEOUT_MS"]

    def setUp(self):
        os.environ["ULNIC_CLUSTER"] = self.cluster
        self.qemu = json.loads(subprocess.run([ULNIC, "node", "status", "-c", self.cluster, "-n", "0", "--json"],
                                              capture_output=True, text=True, timeout=60).stdout)["pid"]

    def hold(self):
        p = subprocess.Popen([SLOT_ABUSE, "hold"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             env=dict(os.environ, ULNIC_NODE="0"))
        self.addCleanup(lambda: (p.kill(), p.wait(), p.stdout.close(), p.stderr.close()))
        return p

    def attached(self, p, seconds=60):
        ready, _, _ = select.select([p.stdout], [], [], seconds)
        self.assertTrue(ready, f"slot_abuse hold said nothing in {seconds} s")
        line = p.stdout.readline()
        return json.loads(line) if line.startswith("{") else {"error": line + p.stderr.read()}

    def test_an_attach_outlasts_its_nic_off_the_cpu_and_one_given_up_on_heals(self):
        stop_process(self.qemu)
        try:
            p = self.hold()
            time.sleep(1.5)  # 5x the bound, QEMU without a moment of CPU
        finally:
            os.kill(self.qemu, signal.SIGCONT)
        first = self.attached(p)
        self.assertIn("slot", first, first)  # was: "no answer within 300 ms"
        # Off the CPU past 10x the bound: that attach fails ...
        stop_process(self.qemu)
        try:
            q = self.hold()
            q.wait(30)
        finally:
            os.kill(self.qemu, signal.SIGCONT)
        self.assertEqual(q.returncode, 1)
        self.assertIn("no answer in", q.stderr.read())
        # ... the firmware takes it once it runs, and the next process gets
        # that slot all the same (it was refused, status 2, for good).
        third = self.attached(self.hold())
        self.assertIn("slot", third, third)
        self.assertNotEqual(third["slot"], first["slot"])
        with open(os.path.join(self.rundir, self.cluster, "node0", "ulnicd.log")) as f:
            self.assertIn(f"slot {third['slot']}: the firmware served it from an attach given up on", f.read())


class RuntimeDirFull(unittest.TestCase):
    """The runtime directory's filesystem full, or too small, at cluster
    start: a clear one-line error, nothing started, nothing left. The small
    filesystem is a 30 MiB tmpfs in a private mount namespace (unshare -rm:
    no root needed where user namespaces are allowed), so the test runs its
    commands inside it."""

    def test_no_room_is_refused_before_anything_starts(self):
        d = tempfile.mkdtemp(prefix="ulnic-full-", dir="/tmp")
        self.addCleanup(os.rmdir, d)
        script = f"""
            mount -t tmpfs -o size=30m tmpfs {d} || exit 90
            mkdir {d}/rt
            export ULNIC_RUNTIME_DIR={d}/rt
            # Two boards (16 MiB of SRAM each) and a fabric do not fit in 30 MiB.
            {ULNIC} cluster up -n 2 -c full --slot-size 16; echo "rc $?" >&2
            # Full to the last byte: not even one board.
            dd if=/dev/zero of={d}/filler bs=1M count=64 2>/dev/null
            {ULNIC} cluster up -n 1 -c full --slot-size 16; echo "rc $?" >&2
            {ULNIC} node start -c full --slot-size 16; echo "rc $?" >&2
            find {d}/rt -mindepth 1 | sed 's/^/left /' >&2
        """
        p = subprocess.run(["unshare", "-rm", "sh", "-c", script], capture_output=True, text=True, timeout=120)
        if p.returncode != 0:
            self.skipTest(f"no private mount namespace here (unshare -rm: {p.stderr.strip()[:200]})")
        lines = p.stderr.splitlines()
        self.assertEqual([line for line in lines if line.startswith("rc ")], ["rc 1"] * 3, p.stderr)
        errors = [line for line in lines if line.startswith("ulnic:")]
        self.assertEqual(len(errors), 3, p.stderr)  # one line each
        self.assertRegex(errors[0], r"no room in .* for cluster 'full' \(2 nodes and its fabric\): 43 MiB needed, 30 MiB free")
        self.assertRegex(errors[1], r"no room in .* for cluster 'full' \(1 node and its fabric\): \d+ MiB needed, 0 MiB free")
        self.assertRegex(errors[2], r"no room in .* for node 0 of cluster 'full': 17 MiB needed, 0 MiB free")
        self.assertEqual([line for line in lines if line.startswith("left ")], [], p.stderr)
        self.assertEqual(subprocess.run(["pgrep", "-f", d], capture_output=True).stdout, b"")


if __name__ == "__main__":
    unittest.main(verbosity=2)
