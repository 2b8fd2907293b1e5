#!/usr/bin/env python3
"""VMMC end to end: export/import through the node daemons, SendMsg (short
inline and long by DMA, synchronous and asynchronous), notifications, the
user-managed TLB, and every protection refusal, on a real 3-node cluster.

Each process is a vmmc_worker driven line by line (see its header); the
receiver checks the bytes itself, so a test sees only verdicts. One cluster
for the whole file. Needs ULNIC_BIN and ULNIC_PROGRAMS in the environment.
"""
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
import unittest

ULNIC = os.environ.get("ULNIC_BIN", "build/bin/ulnic")
BIN = os.environ.get("ULNIC_PROGRAMS", os.path.dirname(ULNIC))
WORKER = os.path.join(BIN, "vmmc_worker")
EXAMPLE = os.path.join(BIN, "vmmc_example")
CLUSTER = "vmmc"

# vmmc_status (host/vmmc/include/ulnic/vmmc.h)
NO_EXPORT, DENIED, NAME_TAKEN, BAD_REGION, UNREACHABLE, BAD_REQUEST, NOT_IMPORTED, REVOKED, NOT_REGISTERED = \
    1, 2, 3, 4, 6, 7, 8, 9, 11
# CqStatus (shared/include/ulnic/abi/slot.h)
CQ_NOT_IMPORTED, CQ_UNREGISTERED = 13, 14


def ulnic(*args, check=None, timeout=180):
    p = subprocess.run([ULNIC, *args], capture_output=True, text=True, timeout=timeout)
    if check is not None and p.returncode != check:
        raise AssertionError(f"ulnic {' '.join(args)} -> {p.returncode}\n{p.stdout}\n{p.stderr}")
    return p


def node_status(node):
    return json.loads(ulnic("node", "status", "-c", CLUSTER, "-n", str(node), "--json", check=0).stdout)


def counters(node):
    return node_status(node)["counters"]


class Worker:
    """A vmmc_worker process on one node."""

    def __init__(self, node):
        env = dict(os.environ, ULNIC_NODE=str(node))
        self.node = node
        self.p = subprocess.Popen([WORKER], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True, bufsize=1)
        hello = self.read()
        assert hello.get("ok") == 1, hello
        self.pid, self.slot = hello["pid"], hello["slot"]

    def read(self, timeout=120):
        import select
        r, _, _ = select.select([self.p.stdout], [], [], timeout)
        if not r:
            raise AssertionError(f"worker on node {self.node} said nothing for {timeout} s")
        line = self.p.stdout.readline()
        if not line:
            raise AssertionError(f"worker on node {self.node} died: {self.p.stderr.read()}")
        return json.loads(line)

    def __call__(self, *words, timeout=120):
        self.p.stdin.write(" ".join(str(w) for w in words) + "\n")
        self.p.stdin.flush()
        return self.read(timeout)

    def quit(self):
        if self.p.poll() is None:
            try:
                self.p.stdin.write("quit\n")
                self.p.stdin.flush()
            except BrokenPipeError:
                pass
            self.p.wait(30)
        self.p.stdout.close()
        self.p.stderr.close()
        self.p.stdin.close()

    def kill(self):
        self.p.kill()
        self.p.wait(30)
        for f in (self.p.stdout, self.p.stderr, self.p.stdin):
            f.close()


class Vmmc(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.rundir = tempfile.mkdtemp(prefix="ulnic-vmmc-", dir="/tmp")
        os.environ["ULNIC_RUNTIME_DIR"] = cls.rundir
        os.environ["ULNIC_CLUSTER"] = CLUSTER
        ulnic("cluster", "up", "-n", "3", "-c", CLUSTER, "--slot-size", "32", check=0)

    @classmethod
    def tearDownClass(cls):
        ulnic("cluster", "down", "-c", CLUSTER)
        left = os.listdir(cls.rundir)
        shutil.rmtree(cls.rundir, ignore_errors=True)
        assert left == [], f"cluster down left {left}"

    def setUp(self):
        self.workers = []

    def tearDown(self):
        for w in self.workers:
            w.quit()

    def worker(self, node):
        w = Worker(node)
        self.workers.append(w)
        return w

    def ok(self, reply):
        self.assertEqual(reply.get("ok"), 1, reply)
        return reply

    def send_until(self, w, status, *send_args, seconds=30):
        """Sends until the verdict is `status` (a teardown elsewhere takes a moment)."""
        deadline = time.monotonic() + seconds
        while True:
            reply = w("send", *send_args)
            if reply.get("status") == status or time.monotonic() > deadline:
                return reply
            time.sleep(0.2)

    def daemon_log_count(self, node, needle, want, seconds=10):
        """Lines of node's ulnicd log containing needle, once there are `want` (or the time is up)."""
        log = os.path.join(self.rundir, CLUSTER, f"node{node}", "ulnicd.log")
        deadline = time.monotonic() + seconds
        while True:
            with open(log) as f:
                n = sum(needle in line for line in f)
            if n >= want or time.monotonic() > deadline:
                return n
            time.sleep(0.1)

    def pair(self, name, size, *export_opts, sender_node=0, receiver_node=1):
        rx, tx = self.worker(receiver_node), self.worker(sender_node)
        self.ok(rx("export", name, size, *export_opts))
        imp = self.ok(tx("import", receiver_node, name))
        self.assertEqual(imp["length"], size)
        return rx, tx

    # ------------------------------------------------------------ data path

    def test_short_and_long_sends_land_byte_for_byte(self):
        rx, tx = self.pair("data", 1 << 20)
        # Inline sizes, the crossover, page-straddling offsets (two-piece
        # scatter at the receiver), and multi-packet sends.
        cases = [(0, 1), (5, 7), (100, 64), (1000, 128), (4000, 129), (4090, 300), (8191, 4097),
                 (65536 - 3, 70000), (200000, 300001)]
        for i, (off, n) in enumerate(cases):
            self.ok(tx("send", 0, off, n, 10 + i))
            self.ok(rx("verify", "data", off, n, 10 + i))
        # Later sends left earlier ones alone (case 4 is overwritten by 5 on purpose).
        for i, (off, n) in enumerate(cases):
            if i != 4:
                self.ok(rx("verify", "data", off, n, 10 + i))

    def test_the_source_may_be_ordinary_memory_and_the_export_too(self):
        # Sources from malloc are registered on first use (user-managed TLB);
        # an export from malloc has its pages moved into the slot.
        rx, tx = self.pair("heap", 256 << 10, "malloc")
        self.ok(tx("send", 0, 123, 100000, 5, "malloc"))
        self.ok(rx("verify", "heap", 123, 100000, 5))
        self.ok(tx("send", 0, 9, 77, 6, "malloc"))
        self.ok(rx("verify", "heap", 9, 77, 6))

    def test_sources_overlapping_earlier_ones_still_go(self):
        # The user-managed TLB registers whole pages; a later source that
        # shares pages with an earlier one and reaches past them registers
        # as one range with them (libulnic merges them: the NIC moves the
        # registered pages, kOpMoveRegion), so none needs the bounce buffer.
        rx, tx = self.pair("overlap", 1 << 20)
        self.assertEqual(self.ok(tx("send", 0, 0, 5000, 91, "heap=0"))["bounces"], 0)
        self.assertEqual(self.ok(tx("send", 0, 0, 20000, 92, "heap=0"))["bounces"], 0)
        self.ok(rx("verify", "overlap", 0, 20000, 92))
        self.assertEqual(self.ok(tx("send", 0, 100, 3000, 93, "heap=100"))["bounces"], 0)  # inside the first
        self.ok(rx("verify", "overlap", 100, 3000, 93))
        # Eight in flight, each overlapping the pages of its neighbours.
        self.assertEqual(self.ok(tx("send", 0, 0, 20000, 94, "heap=0", "async=8"))["bounces"], 0)
        self.ok(rx("verify", "overlap", 0, 160000, 94))
        # The program maps fresh pages where those registered sources were
        # (their registration stays in the library's TLB): a source that
        # reaches from them into new pages cannot be registered (its first
        # pages are not the slot's any more), so it goes through the bounce
        # buffer, never fails, and its bytes are the program's new ones.
        self.assertEqual(self.ok(tx("send", 0, 160000, 20000, 95, "heap=160000", "remap"))["bounces"], 1)
        self.ok(rx("verify", "overlap", 160000, 20000, 95))

    def test_8_mib_send(self):
        rx, tx = self.pair("big", 8 << 20)
        before = [node_status(k)["copy_engine"] for k in (0, 1)]
        self.ok(tx("send", 0, 0, 8 << 20, 99))
        self.ok(rx("verify", "big", 0, 8 << 20, 99))
        # Both NICs' copies went through the board's copy engine (the wake plugin, abi/wake.h): the sender's from
        # its slot into the fabric's ring, the receiver's from the ring into the export. None was refused.
        for k, b in zip((0, 1), before):
            e = node_status(k)["copy_engine"]
            self.assertGreaterEqual(e["bytes"] - b["bytes"], 8 << 20, f"node {k}: {e}")
            self.assertEqual(e["refused"], 0, f"node {k}: {e}")

    def test_asynchronous_sends_in_flight_complete_in_order(self):
        rx, tx = self.pair("async", 4 << 20, "notify")
        self.ok(tx("send", 0, 0, 40000, 21, "notify", "async=64"))  # 64 x 40000 B, 2.56 MB
        self.ok(rx("verify", "async", 0, 64 * 40000, 21))
        notes = self.ok(rx("notes", 64, 10000))["notes"]
        self.assertEqual(notes, [{"export": "async", "offset": k * 40000, "length": 40000, "src": 0}
                                 for k in range(64)])
        self.ok(tx("send", 0, 0, 100, 22, "async=200"))  # short ones, many more than the SQ holds
        self.ok(rx("verify", "async", 0, 20000, 22))
        # More sends posted before any is asked about than the library's ring
        # of send states holds (4096): the first ones' results wait in its
        # overflow map, each asked for once, in posting order, every one OK.
        self.ok(tx("send", 0, 0, 64, 23, "async=10000"))
        self.ok(rx("verify", "async", 0, 640000, 23))

    def test_two_senders_on_two_nodes_into_one_export(self):
        rx = self.worker(1)
        self.ok(rx("export", "shared", 2 << 20, "notify"))
        a, b = self.worker(0), self.worker(2)
        self.ok(a("import", 1, "shared"))
        self.ok(b("import", 1, "shared"))
        for w in (a, b):
            w.p.stdin.write(f"send 0 {0 if w is a else 1 << 20} 1000 {w.node + 50} notify async=100\n")
            w.p.stdin.flush()
        for w in (a, b):
            self.ok(w.read())
        self.ok(rx("verify", "shared", 0, 100000, 50))
        self.ok(rx("verify", "shared", 1 << 20, 100000, 52))
        notes = self.ok(rx("notes", 200, 10000))["notes"]  # the event queue holds 256
        self.assertEqual(sorted(n["src"] for n in notes), [0] * 100 + [2] * 100)

    def test_sends_between_two_processes_of_one_node(self):
        rx, tx = self.pair("local", 1 << 20, "notify", sender_node=2, receiver_node=2)
        for i, (off, n) in enumerate([(0, 100), (4095, 5000), (12345, 300000)]):
            self.ok(tx("send", 0, off, n, 60 + i, "notify"))
            self.ok(rx("verify", "local", off, n, 60 + i))
        notes = self.ok(rx("notes", 3, 5000))["notes"]
        self.assertEqual([(n["offset"], n["length"], n["src"]) for n in notes],
                         [(0, 100, 2), (4095, 5000, 2), (12345, 300000, 2)])
        self.assertEqual(tx("send", 0, (1 << 20) - 10, 11, 1)["status"], NOT_IMPORTED)
        self.ok(rx("unexport", "local"))
        self.assertEqual(tx("send", 0, 0, 1000, 1)["status"], REVOKED)

    def test_the_c_example_runs(self):
        env1 = dict(os.environ, ULNIC_NODE="1")
        server = subprocess.Popen([EXAMPLE, "serve", "2"], env=env1, stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, text=True)
        client = subprocess.run([EXAMPLE, "send", "1"], env=dict(os.environ, ULNIC_NODE="2"),
                                capture_output=True, text=True, timeout=120)
        out, _ = server.communicate(timeout=60)
        self.assertEqual(client.returncode, 0, client.stdout + client.stderr)
        self.assertIn("verified", client.stdout)
        self.assertEqual(server.returncode, 0, out)

    # -------------------------------------------------------- notifications

    def test_notifications_run_after_the_data_by_polling_and_blocking(self):
        rx, tx = self.pair("notes", 1 << 20, "notify")
        self.ok(tx("send", 0, 64, 5000, 31, "notify"))
        # Polling: a zero timeout only polls; the note is there by now (the
        # send completed after the receiver's NIC placed the data and queued it).
        reply = self.ok(rx("notes", 1, 0))
        self.assertEqual(reply["notes"], [{"export": "notes", "offset": 64, "length": 5000, "src": 0}])
        self.ok(rx("verify", "notes", 64, 5000, 31))
        # Blocking: the worker sleeps in vmmc_wait until the send arrives.
        rx.p.stdin.write("notes 1 20000\n")
        rx.p.stdin.flush()
        time.sleep(0.5)
        self.ok(tx("send", 0, 7, 3, 32, "notify"))
        reply = rx.read()
        self.assertEqual(reply["notes"], [{"export": "notes", "offset": 7, "length": 3, "src": 0}])
        # A send without the flag notifies nobody; short waits with nothing to
        # deliver time out cleanly (never as an I/O failure).
        self.ok(tx("send", 0, 0, 10, 33))
        self.assertEqual(self.ok(rx("notes", 0, 300))["notes"], [])
        reply = rx("wait-timeouts", 50, 5)
        self.assertEqual(reply, {"ok": 1, "timeouts": 50}, reply)

    def test_notifications_beyond_the_event_queue_are_counted_not_lost_silently(self):
        rx, tx = self.pair("flood", 64 << 10, "notify")
        self.ok(tx("send", 0, 0, 8, 40, "notify", "async=300"))  # 300 notes, the event queue holds 256
        reply = rx("notes", 300, 3000)
        self.assertEqual(len(reply["notes"]) + reply["dropped"], 300, reply)
        self.assertGreater(reply["dropped"], 0)
        self.assertGreater(counters(1)["events_dropped"], 0)

    # ------------------------------------------- VMMC-2 transfer redirection

    def test_redirection_places_the_next_send_in_the_user_buffer(self):
        rx, tx = self.pair("redir", 1 << 20, "notify")
        self.ok(rx("redirect", "redir", 4096, 100000))
        self.ok(tx("send", 0, 4106, 50000, 71, "notify"))
        reply = self.ok(rx("notes", 1, 10000))
        self.assertEqual(reply["notes"], [{"export": "redir", "offset": 4106, "length": 50000, "src": 0,
                                           "in": "redirect"}])
        self.assertEqual((reply["redirect_hits"], reply["redirect_copies"]), (1, 0))
        self.ok(rx("verify-redirect", 4106, 50000, 71))
        self.assertEqual(rx("verify", "redir", 4106, 50000, 71)["ok"], 0, "the export got the bytes too")
        # One shot: the next send lands in the export.
        self.ok(tx("send", 0, 4106, 50000, 72, "notify"))
        self.assertEqual(self.ok(rx("notes", 1, 10000))["notes"][0].get("in"), None)
        self.ok(rx("verify", "redir", 4106, 50000, 72))
        self.ok(rx("verify-redirect", 4106, 50000, 71))
        # A send not wholly inside the range passes it by; the next one inside takes it.
        self.ok(rx("redirect", "redir", 0, 4096))
        self.ok(tx("send", 0, 4000, 200, 73, "notify"))
        self.ok(tx("send", 0, 100, 60, 74, "notify"))   # short (inline) sends redirect too
        notes = self.ok(rx("notes", 2, 10000))["notes"]
        self.assertEqual([n.get("in") for n in notes], [None, "redirect"])
        self.ok(rx("verify", "redir", 4000, 200, 73))
        self.ok(rx("verify-redirect", 100, 60, 74))

    def test_a_send_that_beats_its_redirection_is_copied_by_the_library(self):
        rx, tx = self.pair("late", 1 << 20, "notify")
        self.ok(tx("send", 0, 8192, 30000, 81, "notify"))   # arrives before the redirection is posted
        self.ok(rx("redirect", "late", 8192, 30000))
        reply = self.ok(rx("notes", 1, 10000))
        self.assertEqual(reply["notes"][0].get("in"), "redirect")
        self.assertEqual((reply["redirect_hits"], reply["redirect_copies"]), (0, 1))
        self.ok(rx("verify-redirect", 8192, 30000, 81))
        # The redirection was taken back: the next send lands in the export.
        self.ok(tx("send", 0, 8192, 30000, 82, "notify"))
        self.assertEqual(self.ok(rx("notes", 1, 10000))["notes"][0].get("in"), None)
        self.ok(rx("verify", "late", 8192, 30000, 82))

    def test_redirection_refusals(self):
        rx = self.worker(1)
        self.ok(rx("export", "rr", 65536, "notify"))
        self.ok(rx("export", "quiet", 65536))
        self.assertEqual(rx("redirect", "nope", 0, 10)["status"], NO_EXPORT)
        self.assertEqual(rx("redirect", "rr", 60000, 10000)["status"], BAD_REQUEST)   # past the export
        self.assertEqual(rx("redirect", "quiet", 0, 100)["status"], BAD_REQUEST)      # no handler
        self.ok(rx("redirect", "rr", 0, 100))
        self.assertEqual(rx("redirect", "rr", 0, 100)["status"], BAD_REQUEST)         # one at a time
        reply = rx("raw", 0, 0, 100, "redirect=0x12345")                              # not our export
        self.assertEqual(reply["cq_status"], 4, reply)

    # ----------------------------------------------------------- protection

    def test_import_refusals(self):
        w = self.worker(0)
        t0 = time.monotonic()
        self.assertEqual(w("import", 1, "nobody-exports-this", 300)["status"], NO_EXPORT)
        self.assertLess(time.monotonic() - t0, 30)
        self.assertEqual(w("import", 0, "own-node", 200)["status"], NO_EXPORT)
        self.assertEqual(w("import", 7, "no-such-node")["status"], BAD_REQUEST)
        rx = self.worker(1)
        self.ok(rx("export", "taken", 4096))
        other = self.worker(1)
        self.assertEqual(other("export", "taken", 4096)["status"], NAME_TAKEN)
        self.assertEqual(other("export", "huge", 64 << 20, "malloc")["status"], BAD_REGION)

    def test_the_daemon_answers_malformed_requests_and_keeps_serving(self):
        w = self.worker(0)
        for kind in ("type", "unterminated", "allowed", "unimport", "node"):
            reply = w("daemon-raw", kind)
            self.assertEqual(reply.get("daemon_status"), 7, (kind, reply))  # kVmmcBadRequest
        self.ok(w("export", "after-garbage", 4096))
        tx = self.worker(1)
        self.ok(tx("import", 0, "after-garbage"))

    def test_restricted_export_admits_only_the_named_importers(self):
        allowed, refused = self.worker(0), self.worker(0)
        third = self.worker(2)
        rx = self.worker(1)
        self.ok(rx("export", "private", 8192, f"allow=0:{allowed.pid},2:0"))
        self.assertEqual(refused("import", 1, "private")["status"], DENIED)
        self.ok(allowed("import", 1, "private"))
        self.ok(third("import", 1, "private"))  # any process on node 2
        self.ok(allowed("send", 0, 0, 4096, 7))
        self.ok(rx("verify", "private", 0, 4096, 7))

    def test_sends_outside_the_import_are_refused_at_the_sender(self):
        rx, tx = self.pair("small", 4096)
        self.assertEqual(tx("send", 0, 4000, 97, 1)["status"], NOT_IMPORTED)   # past the end
        self.assertEqual(tx("send", 0, 1 << 20, 8, 1)["status"], NOT_IMPORTED)  # far past it
        reply = tx("raw", 0, 0, 64, "proxy=0x12345")                            # no import there
        self.assertEqual(reply["cq_status"], CQ_NOT_IMPORTED, reply)
        reply = tx("raw", 0, 0, 4096, "unregistered")                          # source not registered
        self.assertEqual(reply["cq_status"], CQ_UNREGISTERED, reply)
        self.ok(tx("send", 0, 0, 4096, 2))
        self.ok(rx("verify", "small", 0, 4096, 2))

    def test_unimport_unexport_and_exit_tear_down(self):
        rx, tx = self.pair("torn", 65536)
        self.ok(tx("import", 1, "torn"))        # a second import of the same export: index 1
        self.ok(tx("unimport", 0))
        self.assertEqual(tx("send", 0, 0, 100, 1)["status"], NOT_IMPORTED)
        self.assertEqual(tx("unimport", 0)["status"], NOT_IMPORTED)
        self.ok(tx("send", 1, 0, 100, 1))       # the other import still works
        before = counters(1)["vmmc_violations"]
        self.ok(rx("unexport", "torn"))
        for n in (100, 10000):                  # short and long: the receiving NIC refuses both
            self.assertEqual(tx("send", 1, 0, n, 2)["status"], REVOKED)
        self.assertGreaterEqual(counters(1)["vmmc_violations"], before + 2)
        # The exporter's process exits: its exports die with its slot.
        rx2, tx2 = self.pair("dies", 65536)
        rx2.kill()
        self.workers.remove(rx2)
        st = self.send_until(tx2, REVOKED, 0, 0, 5000, 3)
        self.assertEqual(st.get("status"), REVOKED, st)
        # The name is free again for a new process.
        again = self.worker(1)
        self.ok(again("export", "dies", 4096))

    def test_an_importer_with_every_proxy_region_used_gives_all_back_at_exit(self):
        # 64 imports of one export, then exit: 64 unimport mails at once,
        # more than the daemon's outbox holds; the grant goes only with the last.
        rx = self.worker(1)
        self.ok(rx("export", "many", 4096))
        tx = Worker(0)
        for i in range(64):
            self.ok(tx("import", 1, "many"))
        self.assertEqual(tx("import", 1, "many")["status"], 5)  # NO_RESOURCES: the table is full
        self.ok(tx("send", 63, 0, 16, 7))
        tx.quit()
        self.assertEqual(self.daemon_log_count(1, "'many': grant of node 0", 1), 1)

    # "zz": unittest runs methods alphabetically; this one restarts node 2,
    # so it goes last.
    def test_zz_a_killed_exporter_node_fails_sends_cleanly_and_serves_again_after_restart(self):
        rx, tx = self.pair("doomed", 65536, sender_node=0, receiver_node=2)
        self.ok(tx("send", 0, 0, 9000, 1))
        qemu = json.loads(ulnic("node", "status", "-c", CLUSTER, "-n", "2", "--json", check=0).stdout)["pid"]
        os.kill(qemu, signal.SIGKILL)
        t0 = time.monotonic()
        reply = tx("send", 0, 0, 9000, 2, timeout=60)
        self.assertEqual(reply.get("status"), UNREACHABLE, reply)  # the link's deadline, then a clean error
        self.assertLess(time.monotonic() - t0, 20)
        rx.kill()
        self.workers.remove(rx)
        p = ulnic("node", "start", "-c", CLUSTER, "-n", "2", "--slot-size", "32", check=0)
        self.assertIn("stale", p.stdout)
        # The old import names an export the new NIC never had: refused by it.
        reply = self.send_until(tx, REVOKED, 0, 0, 9000, 3)
        self.assertEqual(reply.get("status"), REVOKED, reply)
        # A new exporter on the restarted node, a new import: it works again.
        rx2 = self.worker(2)
        self.ok(rx2("export", "reborn", 65536))
        self.ok(tx("import", 2, "reborn"))
        self.ok(tx("send", 1, 0, 9000, 4))
        self.ok(rx2("verify", "reborn", 0, 9000, 4))
        # The restarted node knows the whole cluster, though `node start` was
        # not told its size: it imports from node 1 as well as from node 0
        # (it once took itself for a 1-node cluster and refused every import
        # from a higher node: "bad request", for good, in the soak).
        rx1 = self.worker(1)
        self.ok(rx1("export", "upward", 65536))
        tx2 = self.worker(2)
        self.ok(tx2("import", 1, "upward"))
        self.ok(tx2("send", 0, 0, 9000, 5))
        self.ok(rx1("verify", "upward", 0, 9000, 5))
        status = json.loads(ulnic("node", "status", "-c", CLUSTER, "-n", "2", "--json", check=0).stdout)
        self.assertEqual(len(status["links"]), 3, status["links"])

    def test_an_importer_that_exits_gives_its_grant_back(self):
        rx = self.worker(1)
        self.ok(rx("export", "grants", 4096))
        # Far more importers over time than an export has grant entries (16):
        # each one's exit must give its grant back.
        for i in range(20):
            tx = Worker(0)
            self.ok(tx("import", 1, "grants"))
            self.ok(tx("send", 0, 0, 16, i))
            tx.quit()
        self.ok(rx("verify", "grants", 0, 16, 19))
        # The exporter's daemon took every grant back (the last one perhaps
        # a moment after its importer exited).
        self.assertEqual(self.daemon_log_count(1, "'grants': grant of node 0", 20), 20)


if __name__ == "__main__":
    unittest.main(verbosity=2)
