#!/usr/bin/env python3
"""End-to-end tests of the `ulnic` command, run the way a user runs it.

Each test class boots its board once (setUpClass) and shares it. Runtime
files go to a private ULNIC_RUNTIME_DIR so "nothing left behind" can be
checked by looking at it. Needs: ULNIC_BIN (the ulnic executable) and
ULNIC_FIRMWARE_DIR (the built firmware images) in the environment.
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
FW_DIR = os.environ.get("ULNIC_FIRMWARE_DIR", "build/firmware")
FW = os.path.join(FW_DIR, "ulnic-fw.elf")
FW_ALT = os.path.join(FW_DIR, "ulnic-fw-alt.elf")
FW_CRASH = os.path.join(FW_DIR, "ulnic-fw-crashtest.elf")


def run(*args, env=None, check=None, timeout=120):
    p = subprocess.run([ULNIC, *args], capture_output=True, text=True, env=env, timeout=timeout)
    if check is not None and p.returncode != check:
        raise AssertionError(f"ulnic {' '.join(args)} -> {p.returncode}, wanted {check}\n"
                             f"stdout:\n{p.stdout}\nstderr:\n{p.stderr}")
    return p


def status(cluster, node=0):
    p = run("node", "status", "-c", cluster, "-n", str(node), "--json")
    return p.returncode, json.loads(p.stdout) if p.stdout.startswith("{") else None


def pids_mentioning(text):
    out = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if text.encode() in f.read():
                    out.append(int(pid))
        except OSError:
            pass
    return out


def process_alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


class RuntimeDir:
    """A private runtime directory for one test class."""

    @classmethod
    def make(cls):
        d = tempfile.mkdtemp(prefix="ulnic-it-", dir="/tmp")
        os.environ["ULNIC_RUNTIME_DIR"] = d
        return d


class Demo(unittest.TestCase):
    """The README's first command ends in `ulnic demo`: it must run clean."""

    def test_demo_runs_and_leaves_nothing_behind(self):
        rundir = RuntimeDir.make()
        try:
            p = subprocess.run([ULNIC, "demo"], capture_output=True, text=True, timeout=600)
            self.assertEqual(p.returncode, 0, p.stdout[-3000:] + p.stderr[-3000:])
            self.assertIn("10000 copies", p.stdout + p.stderr)
            self.assertIn("1 MiB there and back verified", p.stdout)
            self.assertIn("cluster 'demo-vmmc' down (2 nodes stopped)", p.stdout)
            left = [os.path.join(r, f) for r, _, fs in os.walk(rundir) for f in fs]
            self.assertEqual(left, [], "the demo left runtime files behind")
        finally:
            shutil.rmtree(rundir, ignore_errors=True)


class RunningNode(unittest.TestCase):
    """One board, flashed and reflashed the way a firmware developer works."""

    cluster = "cli"

    @classmethod
    def setUpClass(cls):
        cls.rundir = RuntimeDir.make()
        run("node", "start", "-c", cls.cluster, "--firmware", FW, "--heartbeat-us", "20000",
            "--slot-size", "16", check=0)
        _, cls.first = status(cls.cluster)

    @classmethod
    def tearDownClass(cls):
        run("node", "stop", "-c", cls.cluster)
        shutil.rmtree(cls.rundir, ignore_errors=True)

    def flash(self, elf, want_rc=0):
        return run("node", "flash", "-c", self.cluster, elf, check=want_rc)

    def test_status_json_describes_the_running_board(self):
        rc, s = status(self.cluster)
        self.assertEqual(rc, 0)
        self.assertTrue(s["qemu_running"])
        self.assertEqual(s["vm_state"], "running")
        self.assertIn(s["state"], "running")
        self.assertRegex(s["build_id"], r"^[0-9a-f]{40}$")
        self.assertEqual(s["num_slots"], 8)
        self.assertTrue(all(slot["size"] == 16 << 20 for slot in s["slots"]))
        self.assertEqual(s["fabric"]["peer_id"], 0)
        self.assertTrue(s["heartbeat_advancing"])

    def test_human_status_names_state_and_build(self):
        _, s = status(self.cluster)
        p = run("node", "status", "-c", self.cluster, check=0)
        self.assertIn("state      running", p.stdout)
        self.assertIn("build " + s["build_id"], p.stdout)
        self.assertIn("(advancing)", p.stdout)

    def test_second_start_is_refused(self):
        p = run("node", "start", "-c", self.cluster, "--firmware", FW, check=1)
        self.assertIn("already running", p.stderr)

    def test_serial_log_shows_the_boot(self):
        p = run("node", "log", "-c", self.cluster, check=0)
        self.assertIn("ulnic-fw", p.stdout)
        self.assertIn("8 slots", p.stdout)
        self.assertIn("running", p.stdout)

    def test_reflash_changes_build_id_without_restarting_qemu(self):
        _, before = status(self.cluster)
        p = self.flash(FW_ALT)
        self.assertIn("->", p.stdout)
        _, alt = status(self.cluster)
        self.assertNotEqual(alt["build_id"], before["build_id"])
        self.assertTrue(alt["version"].endswith("-alt"))
        self.assertEqual(alt["pid"], before["pid"])
        self.assertEqual(alt["flash_seq"], before["flash_seq"] + 1)
        self.assertEqual(alt["boot_count"], before["boot_count"] + 1)
        self.assertEqual(alt["state"], "running")
        self.flash(FW)
        _, back = status(self.cluster)
        self.assertEqual(back["build_id"], self.first["build_id"])
        self.assertEqual(back["pid"], before["pid"])

    def test_flashing_a_non_riscv_elf_is_refused_and_the_nic_keeps_running(self):
        _, before = status(self.cluster)
        p = self.flash("/bin/true", want_rc=1)
        self.assertIn("not RISC-V", p.stderr)
        _, after = status(self.cluster)
        self.assertEqual(after["flash_seq"], before["flash_seq"])
        self.assertEqual(after["state"], "running")
        self.assertTrue(after["heartbeat_advancing"])

    def test_flashing_garbage_is_refused(self):
        with tempfile.NamedTemporaryFile(suffix=".elf") as f:
            f.write(os.urandom(4096))
            f.flush()
            p = self.flash(f.name, want_rc=1)
            self.assertIn("not an ELF", p.stderr)

    def test_crashing_firmware_is_shown_crashed_with_cause_and_pc(self):
        p = self.flash(FW_CRASH, want_rc=1)
        self.assertIn("crashed", p.stdout)
        rc, s = status(self.cluster)
        self.assertEqual(rc, 4)
        self.assertEqual(s["state"], "crashed")
        self.assertEqual(s["trap"]["cause"], 5)
        self.assertGreaterEqual(s["trap"]["pc"], 0x8000_0000)
        human = run("node", "status", "-c", self.cluster).stdout
        self.assertIn("crashed: load access fault", human)
        self.assertIn("at pc 0x8", human)
        self.assertIn("TRAP", run("node", "log", "-c", self.cluster).stdout)
        self.flash(FW)
        self.assertEqual(status(self.cluster)[1]["state"], "running")

    def test_gdb_attaches_to_the_nic(self):
        if not shutil.which("gdb-multiarch"):
            self.skipTest("gdb-multiarch not installed")
        p = run("node", "gdb", "-c", self.cluster, "--", "-batch", "-ex", "info registers pc", "-ex", "detach",
                timeout=60)
        self.assertRegex(p.stdout, r"pc\s+0x8000[0-9a-f]{4}")
        # Detaching resumed the NIC.
        self.assertTrue(status(self.cluster)[1]["heartbeat_advancing"])

    def test_list_shows_the_node(self):
        p = run("node", "list", "-c", self.cluster, check=0)
        self.assertIn("node 0: qemu up", p.stdout)


class Failures(unittest.TestCase):
    """Crashes, kills and bad input: clear errors, nothing left behind."""

    @classmethod
    def setUpClass(cls):
        cls.rundir = RuntimeDir.make()

    @classmethod
    def tearDownClass(cls):
        for c in os.listdir(cls.rundir):
            for n in ("0", "1"):
                run("node", "stop", "-c", c, "-n", n)
        shutil.rmtree(cls.rundir, ignore_errors=True)

    def assertNothingLeft(self, cluster):
        self.assertFalse(os.path.exists(os.path.join(self.rundir, cluster)),
                         os.listdir(self.rundir))
        self.assertEqual(pids_mentioning(os.path.join(self.rundir, cluster)), [])

    def test_usage_errors_exit_2(self):
        self.assertEqual(run("frobnicate").returncode, 2)
        self.assertEqual(run("node", "start", "--bogus").returncode, 2)
        self.assertEqual(run("node", "start", "-n", "x").returncode, 2)
        self.assertEqual(run("node", "status", "-c", "../etc").returncode, 2)

    def test_status_of_a_node_that_never_ran(self):
        p = run("node", "status", "-c", "nobody", check=1)
        self.assertIn("not running", p.stderr)

    def test_bad_firmware_at_start_leaves_nothing(self):
        p = run("node", "start", "-c", "badfw", "--firmware", "/bin/true", check=1)
        self.assertIn("not RISC-V", p.stderr)
        p = run("node", "start", "-c", "badfw", "--firmware", "/nonexistent.elf", check=1)
        self.assertIn("cannot read firmware", p.stderr)
        self.assertFalse(os.path.exists(os.path.join(self.rundir, "badfw", "node0")))

    def test_qemu_dying_during_boot_is_reported_with_its_log(self):
        p = run("node", "start", "-c", "qdies", "--firmware", FW, "--qemu-arg=-device",
                "--qemu-arg=no-such-device", check=1)
        self.assertIn("QEMU exited during boot", p.stderr)
        self.assertIn("no-such-device", p.stderr)
        self.assertFalse(os.path.exists(os.path.join(self.rundir, "qdies", "node0")))

    def test_killed_qemu_is_seen_and_its_stale_files_cleaned_on_restart(self):
        run("node", "start", "-c", "kill9", "--firmware", FW, "--slot-size", "16", check=0)
        _, s = status("kill9")
        os.kill(s["pid"], signal.SIGKILL)
        for _ in range(500):
            if not process_alive(s["pid"]):
                break
            time.sleep(0.01)
        rc, dead = status("kill9")
        self.assertEqual(rc, 3)
        self.assertFalse(dead["qemu_running"])
        p = run("node", "start", "-c", "kill9", "--firmware", FW, "--slot-size", "16", check=0)
        self.assertIn("stale", p.stdout)
        self.assertEqual(status("kill9")[1]["state"], "running")
        run("node", "stop", "-c", "kill9", check=0)
        self.assertNothingLeft("kill9")

    def test_stop_leaves_nothing_behind(self):
        run("node", "start", "-c", "tidy", "-n", "0", "--firmware", FW, "--slot-size", "16", check=0)
        run("node", "start", "-c", "tidy", "-n", "1", "--firmware", FW, "--slot-size", "16", check=0)
        self.assertEqual(status("tidy", 1)[1]["fabric"]["peer_id"], 1)
        run("node", "stop", "-c", "tidy", "-n", "0", check=0)
        self.assertEqual(status("tidy", 1)[1]["state"], "running")
        run("node", "stop", "-c", "tidy", "-n", "1", check=0)
        self.assertNothingLeft("tidy")


if __name__ == "__main__":
    unittest.main(verbosity=2)
