"""One private cluster per test class, for the integration tests that run
jobs on a cluster of their own (test_am_compat, test_am_exercises,
test_tight_poll): a mixin for unittest.TestCase, listed before it.

The class names `cluster` and may change `nodes` and `slot_size_mib`; the
cluster comes up once in a fresh ULNIC_RUNTIME_DIR (set in the environment
for the class's programs) and goes down with the class. With
$ULNIC_FIRMWARE_DIR the NICs run that build's firmware. Needs ULNIC_BIN.
"""
import os
import shutil
import signal
import subprocess
import tempfile
import time

ULNIC = os.path.abspath(os.environ.get("ULNIC_BIN", "build/bin/ulnic"))
FIRMWARE_DIR = os.environ.get("ULNIC_FIRMWARE_DIR", "")


def keep_logs(rundir, label):
    """With $ULNIC_KEEP_LOGS (tests/stress/stress.py sets it), copies the
    cluster's logs (every *.log and *.json under `rundir`: firmware serial
    logs, daemons, switch, QEMU) to $ULNIC_KEEP_LOGS/LABEL-<n>/ before the
    cluster goes down and takes them along: a failure found under stress is
    read from its own run, not guessed at."""
    keep = os.environ.get("ULNIC_KEEP_LOGS")
    if not keep or not os.path.isdir(rundir):
        return
    n = 0
    while os.path.exists(os.path.join(keep, f"{label}-{n}")):
        n += 1
    dest = os.path.join(keep, f"{label}-{n}")
    for top, _, files in os.walk(rundir):
        for f in files:
            if f.endswith((".log", ".json")):
                target = os.path.join(dest, os.path.relpath(top, rundir))
                os.makedirs(target, exist_ok=True)
                try:
                    shutil.copy(os.path.join(top, f), target)
                except OSError:
                    pass


def stop_process(pid, seconds=10):
    """SIGSTOPs `pid` and returns once every thread of it has stopped. kill()
    returns before a thread running on another CPU has: on this VM all of a
    NIC's QEMU threads took up to 10 ms to show stopped, long enough for the
    NIC to finish a registration its process posted just after the kill."""
    os.kill(pid, signal.SIGSTOP)
    deadline = time.monotonic() + seconds
    while True:
        states = []
        for tid in os.listdir(f"/proc/{pid}/task"):
            try:
                with open(f"/proc/{pid}/task/{tid}/stat") as f:
                    states.append(f.read().rsplit(")", 1)[1].split()[0])
            except OSError:
                pass  # a thread that exited meanwhile
        if all(s in "TtZX" for s in states):
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"pid {pid} not stopped {seconds} s after SIGSTOP: thread states {states}")
        time.sleep(0.001)


def process_alive(pid):
    """The process exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


class PrivateCluster:
    cluster = None
    nodes = 2
    slot_size_mib = 64

    @classmethod
    def setUpClass(cls):
        cls.rundir = tempfile.mkdtemp(prefix=f"ulnic-{cls.cluster}-", dir="/tmp")
        os.environ["ULNIC_RUNTIME_DIR"] = cls.rundir
        args = [ULNIC, "cluster", "up", "-n", str(cls.nodes), "-c", cls.cluster, "--slot-size", str(cls.slot_size_mib)]
        if FIRMWARE_DIR:
            args += ["--firmware", os.path.join(FIRMWARE_DIR, "ulnic-fw.elf")]
        p = subprocess.run(args, capture_output=True, text=True, timeout=300)
        if p.returncode != 0:
            shutil.rmtree(cls.rundir, ignore_errors=True)
            raise AssertionError(p.stdout + p.stderr)

    @classmethod
    def tearDownClass(cls):
        keep_logs(cls.rundir, cls.cluster)
        subprocess.run([ULNIC, "cluster", "down", "-c", cls.cluster], capture_output=True, timeout=120)
        shutil.rmtree(cls.rundir, ignore_errors=True)

    @classmethod
    def node_status(cls):
        """Every node's `ulnic node status` (links and counters), for a failure
        message: what the NICs saw says why a job's message came back."""
        out = []
        for n in range(cls.nodes):
            p = subprocess.run([ULNIC, "node", "status", "-c", cls.cluster, "-n", str(n)], capture_output=True,
                               text=True, timeout=60)
            out.append(p.stdout + p.stderr)
        return "\n".join(out)
