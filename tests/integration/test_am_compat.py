#!/usr/bin/env python3
"""AMUDP 3.x programs as they are (issue 24): tests/programs/amudp_names
(AMUDP's whole public interface, built as C99 and as C++), amudp_forms
(every request form answered by every reply form, mediums up to
AM_MaxMedium()) and amudp_allam (every form with every argument count,
waiting by polling, in AM_WaitSema, or in a second thread's AM_WaitSema),
every byte and return code checked by the programs themselves.

  * Launch (udp, no emulator): the program is its own job master the AMUDP
    way -- `prog N [L|S|C] args` with the local, ssh (a stand-in ssh) and
    custom ($CSPAWN_CMD) spawners, $AMUDP_SPAWNFN, a spawn function of the
    program's own with extra_env, AMUDP_SPMDgetenvMaster giving the
    master's environment, the job's exit code through AMX_SPMDkillmyprocess
    -- and `ulnic run` beside it.
  * Udp: the three programs over UDP.
  * OnNics: one 2-node cluster, booted once: the three programs over VIPL
    and natively under `ulnic run` (4 ranks, 2 per node), and a program that
    is its own master choosing the transport from the environment.
    amudp_refused (every reply refused by its requester, the replier slow
    to poll, depth 16) failed before over VIPL: reply calls returned
    AM_ERR_NOT_SENT once the peer's requests, replies and refusals
    outnumbered the 2k+2 receives of a VI (now 3k+2, as AMVIA reserves);
    amudp_allam T was stuck on every transport (the thread in AM_WaitSema
    kept the bundle). Over VIPL, allam with every listener slowed by
    $ULNIC_AM_VIPL_ACCEPT_DELAY_MS: a first Long waits for the peer's
    greeting (it gave up after a few ms and came back EBADSEGOFF).
Needs ULNIC_BIN and ULNIC_PROGRAMS in the environment.
"""
import os
import shutil
import stat
import subprocess
import tempfile
import unittest
from cluster_case import PrivateCluster

ULNIC = os.path.abspath(os.environ.get("ULNIC_BIN", "build/bin/ulnic"))
BIN = os.path.abspath(os.environ.get("ULNIC_PROGRAMS", os.path.dirname(ULNIC)))
NAMES = os.path.join(BIN, "amudp_names")
NAMES_CXX = os.path.join(BIN, "amudp_names_cxx")
FORMS = os.path.join(BIN, "amudp_forms")
ALLAM = os.path.join(BIN, "amudp_allam")
REFUSED = os.path.join(BIN, "amudp_refused")

# An ssh stand-in: records its command line, drops the host and runs the
# rest through a shell, as sshd does.
FAKE_SSH = """#!/bin/sh
echo "$*" >> "$(dirname "$0")/calls"
shift
exec /bin/sh -c "$*"
"""


def job_env(**extra):
    """The test's environment without any AM job or spawner setting of ours."""
    drop = ("ULNIC_AM_", "AMUDP_", "SSH_SERVERS", "SSH_CMD", "CSPAWN_")
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
    env["ULNIC_AM_TRANSPORT"] = "udp"
    env.update(extra)
    return env


def run(args, env=None, timeout=180, cwd=None):
    p = subprocess.run(args, capture_output=True, text=True, timeout=timeout, env=env or job_env(), cwd=cwd)
    return p


def report(p):
    return f"exit {p.returncode}\n--- stdout\n{p.stdout}--- stderr\n{p.stderr}"


class Checks:
    def assert_names_ok(self, p, nproc, transport="udp", master_var="master", extra="(unset)"):
        self.assertEqual(p.returncode, 0, report(p))
        self.assertNotIn("FAIL", p.stdout, report(p))
        for r in range(nproc):
            self.assertEqual(p.stdout.count(f"names ok rank {r} of {nproc} transport {transport}\n"), 1, report(p))
        self.assertIn(f"names master-var {master_var}\n", p.stdout, report(p))
        self.assertIn(f"names extra {extra}\n", p.stdout, report(p))
        # AMX_VerboseErrors: the one failing call says so, once per rank.
        for r in range(nproc):
            self.assertEqual(p.stderr.count(f"Node {r}: AMUDP AM_Map returning an error code: AM_ERR_BAD_ARG (2)\n"), 1,
                             report(p))
        self.assertIn("Requests sent", p.stdout, report(p))  # AMX_DumpStatistics

    def assert_ok(self, p, word, nproc):
        self.assertEqual(p.returncode, 0, report(p))
        self.assertNotIn("FAIL", p.stdout, report(p))
        for r in range(nproc):
            self.assertEqual(p.stdout.count(f"{word} ok rank {r}\n"), 1, report(p))


class Launch(unittest.TestCase, Checks):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="ulnic-am-compat-")

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def test_local_spawn_c_and_cxx(self):
        p = run([NAMES, "3"])
        self.assert_names_ok(p, 3)
        p = run([NAMES_CXX, "2", "L"])
        self.assert_names_ok(p, 2)
        p = run([NAMES, "2"], env=job_env(AMUDP_SPAWNFN="L"))
        self.assert_names_ok(p, 2)

    def test_ssh_spawn_with_a_host_list(self):
        ssh = os.path.join(self.tmp, "fake-ssh")
        with open(ssh, "w") as f:
            f.write(FAKE_SSH)
        os.chmod(ssh, stat.S_IRWXU)
        p = run([NAMES, "2", "S"], env=job_env(SSH_CMD=ssh, SSH_SERVERS="localhost,localhost"), cwd=self.tmp)
        self.assert_names_ok(p, 2)
        with open(os.path.join(self.tmp, "calls")) as f:
            calls = f.read().splitlines()
        self.assertEqual(len(calls), 2, calls)
        for r in range(2):
            self.assertEqual(sum(c.startswith(f"localhost cd {self.tmp} && env ") and f"ULNIC_AM_RANK={r} " in c
                                 for c in calls), 1, calls)
        # Fewer machines than workers: AMUDP's ssh spawner wants one each.
        p = run([NAMES, "3", "S"], env=job_env(SSH_CMD=ssh, SSH_SERVERS="localhost localhost"), cwd=self.tmp)
        self.assertNotEqual(p.returncode, 0, report(p))
        self.assertIn("SSH_SERVERS names 2 machines for 3 workers", p.stderr, report(p))

    def test_custom_spawn_command(self):
        cmd = "for i in $(seq %N); do %C & done; wait"
        p = run([NAMES, "3", "C"], env=job_env(CSPAWN_CMD=cmd))
        self.assert_names_ok(p, 3)
        p = run([NAMES, "2"], env=job_env(AMUDP_SPAWNFN="C", AMUDP_CSPAWN_CMD=cmd))
        self.assert_names_ok(p, 2)
        p = run([NAMES, "2", "C"])
        self.assertNotEqual(p.returncode, 0, report(p))
        self.assertIn("AMUDP_SPMDCustomSpawn needs the spawn command in $CSPAWN_CMD", p.stderr, report(p))

    def test_a_spawn_function_of_the_programs_own(self):
        p = run([NAMES, "2", "--own-spawn"])
        self.assert_names_ok(p, 2, extra="own-spawn")
        self.assertIn("own spawn nproc 2 argc 2\n", p.stdout, report(p))

    def test_ulnic_run_beside_it(self):
        # The launcher is not the program: getenvMaster gives its environment
        # with rank 0's changes before AMUDP_SPMDStartup.
        p = run([ULNIC, "run", "-n", "2", NAMES])
        self.assert_names_ok(p, 2, master_var="worker")

    def test_exit_code_through_killmyprocess(self):
        p = run([NAMES, "2", "--exit-code", "3"])
        self.assertEqual(p.returncode, 3, report(p))
        self.assertEqual(p.stdout.count("names ok rank"), 2, report(p))
        self.assertRegex(p.stdout, r"killmyprocess 3 rank [01]\n", report(p))

    def test_usage(self):
        p = run([NAMES])
        self.assertEqual(p.returncode, 1, report(p))
        self.assertIn("<number of workers> <spawner> program arguments", p.stderr, report(p))
        for letter in "SLC":
            self.assertRegex(p.stderr, rf"\n    {letter}  ", report(p))


class Udp(unittest.TestCase, Checks):
    def test_forms(self):
        self.assert_ok(run([FORMS, "3", "--rounds", "2"]), "forms", 3)

    def test_allam_polling_blocking_and_threads(self):
        for mode in "PBT":
            with self.subTest(mode=mode):
                self.assert_ok(run([ALLAM, "3", "3", mode]), "allam", 3)

    def test_refused_replies(self):
        self.assert_ok(run([REFUSED, "2", "10"]), "refused", 2)


class OnNics(PrivateCluster, unittest.TestCase, Checks):
    cluster = "am-compat"
    ranks = 4

    def job(self, transport, *args, n=None, **env):
        return run([ULNIC, "run", "-n", str(n or self.ranks), "--transport", transport, "-c", self.cluster, *args],
                   env=job_env(ULNIC_RUNTIME_DIR=self.rundir, **env), timeout=300)

    def test_forms_replies_never_fail(self):
        for t in ("vipl", "native"):
            with self.subTest(transport=t):
                self.assert_ok(self.job(t, FORMS, "--rounds", "2"), "forms", self.ranks)

    def test_allam_polling_blocking_and_threads(self):
        for t in ("vipl", "native"):
            for mode in "PBT":
                with self.subTest(transport=t, mode=mode):
                    self.assert_ok(self.job(t, ALLAM, "3", mode), "allam", self.ranks)

    def test_first_long_waits_for_a_slow_greeting(self):
        # Every rank's listener sleeps 300 ms between accepting a connection
        # and greeting the peer (handing the VI over with it): each rank's
        # first Long waits for its partner's greeting while its own listener
        # still holds the VI its predecessor already sends on. The wait was
        # 5000 polls, each finding that VI and so never sleeping: a few ms,
        # then the Long went unplaced and came back EBADSEGOFF (CI, about 1
        # run in 60 of the T case above, with no delay).
        self.assert_ok(self.job("vipl", ALLAM, "1", "P", ULNIC_AM_VIPL_ACCEPT_DELAY_MS="300"), "allam", self.ranks)

    def test_refused_replies_never_fail(self):
        for t in ("vipl", "native"):
            with self.subTest(transport=t):
                env = job_env(ULNIC_RUNTIME_DIR=self.rundir, ULNIC_AM_TRANSPORT=t, ULNIC_CLUSTER=self.cluster,
                              AMUDP_REFUSED_DEPTH="16")
                self.assert_ok(run([REFUSED, "2", "10"], env=env), "refused", 2)

    def test_names_under_ulnic_run_and_as_its_own_master(self):
        for t in ("vipl", "native"):
            with self.subTest(transport=t, launch="ulnic run"):
                self.assert_names_ok(self.job(t, NAMES, n=2), 2, transport=t, master_var="worker")
            with self.subTest(transport=t, launch="prog N"):
                env = job_env(ULNIC_RUNTIME_DIR=self.rundir, ULNIC_AM_TRANSPORT=t, ULNIC_CLUSTER=self.cluster)
                self.assert_names_ok(run([NAMES_CXX, "3"], env=env), 3, transport=t)


if __name__ == "__main__":
    unittest.main(verbosity=2)
