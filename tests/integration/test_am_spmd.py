#!/usr/bin/env python3
"""AMUDP SPMD jobs end to end: `ulnic run` and master-mode AMUDP_SPMDStartup.

Every job runs tests/programs/am_spmd_check over the udp transport (no
emulator needed): it checks its rank, the job's tag, the launcher's
environment, all-gathers, 100 barriers and one AM request from every rank to
every rank, and says "ok rank R of N". Then the ways a job ends: a worker's
AMUDP_SPMDExit(3) (the others run their exit callbacks and the job exits 3),
a worker killed by a signal (the job ends with 128 + signal, nobody left),
a worker that never starts (the startup timeout), workers started over
"ssh" (a stand-in script), and a program that is its own master.
Needs ULNIC_BIN and ULNIC_PROGRAMS in the environment.
"""
import os
import re
import shutil
import stat
import subprocess
import tempfile
import time
import unittest

ULNIC = os.environ.get("ULNIC_BIN", "build/bin/ulnic")
BIN = os.environ.get("ULNIC_PROGRAMS", os.path.dirname(ULNIC))
CHECK = os.path.join(BIN, "am_spmd_check")

# An ssh stand-in: records its command line, drops the host and runs the
# rest through a shell, as sshd does. It unsets the test's variable so the
# workers can only know it from the master (AMUDP_SPMDgetenvMaster).
FAKE_SSH = """#!/bin/sh
echo "$*" >> "$(dirname "$0")/calls"
shift
unset AM_SPMD_CHECK_VAR
exec /bin/sh -c "$*"
"""


def job_env(**extra):
    """The test's environment without any job of ours around it."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ULNIC_AM_")}
    env["ULNIC_AM_TRANSPORT"] = "udp"
    env.update(extra)
    return env


def run(args, env=None, timeout=120):
    """(CompletedProcess, seconds)."""
    t0 = time.monotonic()
    p = subprocess.run(args, capture_output=True, text=True, timeout=timeout, env=env or job_env())
    return p, time.monotonic() - t0


def ulnic_run(nproc, *args, env=None, timeout=120):
    return run([ULNIC, "run", "-n", str(nproc), "--transport", "udp", CHECK, *args], env=env, timeout=timeout)


def worker_pids(out):
    return [int(m.group(1)) for m in re.finditer(r"^pid (\d+) rank", out, re.M)]


def gone(pid, seconds=5):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.05)
    return False


class AmSpmd(unittest.TestCase):
    def report(self, p):
        return f"exit {p.returncode}\n--- stdout\n{p.stdout}--- stderr\n{p.stderr}"

    def assert_all_ok(self, p, nproc):
        self.assertEqual(p.returncode, 0, self.report(p))
        self.assertNotIn("FAIL", p.stdout, self.report(p))
        for r in range(nproc):
            self.assertEqual(p.stdout.count(f"ok rank {r} of {nproc}\n"), 1, self.report(p))
        self.assertEqual(p.stdout.count("ok rank"), nproc, self.report(p))

    def assert_all_gone(self, p):
        pids = worker_pids(p.stdout)
        self.assertTrue(pids, self.report(p))
        for pid in pids:
            self.assertTrue(gone(pid), f"worker pid {pid} still runs\n{self.report(p)}")

    def test_jobs_of_1_2_4_8_workers(self):
        for n in (1, 2, 4, 8):
            with self.subTest(nproc=n):
                value = f"launcher-value-{n}"
                p, _ = ulnic_run(n, "--expect-env", value, env=job_env(AM_SPMD_CHECK_VAR=value))
                self.assert_all_ok(p, n)

    def test_arguments_after_the_program_are_the_programs(self):
        # "-n" and "--depth" after the program look like ulnic's; they are not.
        p, _ = run([ULNIC, "run", "-n", "2", "--depth", "4", CHECK, "--expect-env", "-n"],
                   env=job_env(AM_SPMD_CHECK_VAR="-n"))
        self.assert_all_ok(p, 2)

    def test_spmd_exit_ends_the_job_with_its_code(self):
        p, took = ulnic_run(4, "--exit-rank", "2", "--exit-code", "3")
        self.assertEqual(p.returncode, 3, self.report(p))
        for r in (0, 1, 3):
            self.assertIn(f"exit callback rank {r} code 3\n", p.stdout, self.report(p))
        self.assertNotIn("exit callback rank 2", p.stdout, self.report(p))
        self.assertLess(took, 15, self.report(p))
        self.assert_all_gone(p)

    def test_a_killed_worker_ends_the_job(self):
        for sig, name in ((9, "SIGKILL"), (6, "abort")):
            with self.subTest(signal=name):
                p, took = ulnic_run(4, "--die-rank", "1", "--die-signal", str(sig))
                self.assertEqual(p.returncode, 128 + sig, self.report(p))
                self.assertRegex(p.stderr, rf"ulnic run: rank 1 \(pid \d+\) was killed by signal {sig}", self.report(p))
                self.assertLess(took, 10, self.report(p))
                self.assertNotIn("exit callback", p.stdout, self.report(p))
                self.assert_all_gone(p)

    def test_a_survivor_failing_first_does_not_hide_a_kill(self):
        # Rank 1 dies as a SIGKILLed process does under load: its connection
        # to the master closes (its files go first), rank 0 learns it is gone
        # and fails with AMUDP_SPMDExit(1), and only then is rank 1 killed
        # and reaped (issue 20's stress run: a job killed mid-run ended 1,
        # not 137). The death is the job's verdict.
        p, took = ulnic_run(3, "--die-late-rank", "1")
        self.assertIn("rank 0: rank 1 is going\n", p.stdout, self.report(p))
        self.assertEqual(p.returncode, 128 + 9, self.report(p))
        self.assertRegex(p.stderr, r"ulnic run: rank 1 \(pid \d+\) was killed by signal 9", self.report(p))
        self.assertLess(took, 10, self.report(p))
        self.assert_all_gone(p)
        # A failure with nobody dying is still the job's, and soon.
        p, took = ulnic_run(3, "--exit-rank", "2", "--exit-code", "5")
        self.assertEqual(p.returncode, 5, self.report(p))
        self.assertLess(took, 10, self.report(p))

    def test_a_worker_that_never_starts_times_out(self):
        p, took = ulnic_run(3, "--nostart-rank", "1", env=job_env(ULNIC_AM_STARTUP_TIMEOUT_MS="1500"))
        self.assertNotEqual(p.returncode, 0, self.report(p))
        self.assertIn("ulnic run: startup timed out after 1500 ms: 2 of 3 workers", p.stderr, self.report(p))
        self.assertIn("waiting for rank 1", p.stderr, self.report(p))
        self.assertLess(took, 10, self.report(p))
        self.assertIn("rank 1 nostart", p.stdout, self.report(p))
        self.assert_all_gone(p)

    def test_hosts_start_workers_over_ssh(self):
        tmp = tempfile.mkdtemp(prefix="ulnic-am-spmd-")
        try:
            ssh = os.path.join(tmp, "fake-ssh")
            with open(ssh, "w") as f:
                f.write(FAKE_SSH)
            os.chmod(ssh, stat.S_IRWXU)
            # The value has spaces and quotes: the command line crosses a remote shell.
            value = "two words, 'quoted' $HOME"
            p, _ = run([ULNIC, "run", "-n", "4", "--hosts", "localhost,localhost", CHECK, "--expect-env", value],
                       env=job_env(ULNIC_SSH=ssh, AM_SPMD_CHECK_VAR=value))
            self.assert_all_ok(p, 4)
            with open(os.path.join(tmp, "calls")) as f:
                calls = f.read().splitlines()
            self.assertEqual(len(calls), 4, calls)
            for r in range(4):
                self.assertEqual(sum(c.startswith("localhost env ") and f"ULNIC_AM_RANK={r} " in c for c in calls), 1,
                                 calls)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def test_a_program_that_is_its_own_master(self):
        p, _ = run([CHECK, "--expect-env", "master-mode"],
                   env=job_env(ULNIC_AM_NPROCS="3", AM_SPMD_CHECK_VAR="master-mode"))
        self.assert_all_ok(p, 3)

    def test_usage_errors(self):
        p, _ = run([ULNIC, "run", CHECK])
        self.assertEqual(p.returncode, 2, self.report(p))
        self.assertIn("ulnic run: -n N", p.stderr)
        p, _ = run([ULNIC, "run", "-n", "2", "--transport", "carrier-pigeon", CHECK])
        self.assertEqual(p.returncode, 2, self.report(p))
        self.assertIn("ulnic run: unknown transport", p.stderr)
        p, _ = run([ULNIC, "run", "-n", "2", "/nonexistent/program"])
        self.assertEqual(p.returncode, 127, self.report(p))
        self.assertIn("ulnic run: cannot start rank 0", p.stderr)


if __name__ == "__main__":
    unittest.main(verbosity=2)
