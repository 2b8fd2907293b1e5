#!/usr/bin/env python3
"""Runs tests again and again, optionally under CPU load, and reports every failure.

Not part of the default suite: a test that fails once is a bug to find, and
this is how to find the ones that fail rarely (issue 20). Two modes:

  tests/stress/stress.py --build build [--label integration] [-R REGEX]
                         [--runs 20] [--burners 2] [--jobs 2] [--out DIR]
      ctest on an existing build, --runs times in a row (-L LABEL, default
      the integration groups; -R narrows it), with --burners busy-loop
      processes (one core each, ordinary priority) running all the while.

  tests/stress/stress.py --clone [--repo .] [--runs 5] [--burners 0] [--out DIR]
      the README's test command on a fresh clone of --repo (its committed
      HEAD), --runs times: `toolchain/bootstrap.sh test` in a new clone each
      time, as CI runs it.

Every run's full output goes to OUT/run-N.log (and ctest's LastTest.log to
OUT/run-N.lasttest.log), and a failed run's clusters' logs (firmware serial
logs, node daemons, switches) to OUT/run-N-clusters/ (ctest mode; the
integration tests copy them there before their clusters go down); a failed
run's failing tests are listed at the end with the path of their logs. Exit status 0 only if every run passed.
"""
import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def start_burners(n):
    """n processes that each spin on a core until killed."""
    pids = []
    for _ in range(n):
        pid = os.fork()
        if pid == 0:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            x = 0
            while True:
                x += 1
        pids.append(pid)
    return pids


def stop_burners(pids):
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        except (ProcessLookupError, ChildProcessError):
            pass


def failed_tests(output):
    """The names ctest lists under 'The following tests FAILED:'."""
    names, listing = [], False
    for line in output.splitlines():
        if "The following tests FAILED" in line:
            listing = True
            continue
        if listing:
            m = re.match(r"\s*\d+\s*-\s*(\S+)", line)
            if not m:
                break
            names.append(m.group(1))
    return names


def run_logged(cmd, log, cwd=None, env=None):
    """Runs cmd with its output into `log`; returns (exit status, output, seconds)."""
    t0 = time.monotonic()
    with open(log, "w") as f:
        p = subprocess.run(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        f.write(p.stdout)
    return p.returncode, p.stdout, time.monotonic() - t0


def ctest_run(args, k, out):
    cmd = ["ctest", "--test-dir", args.build, "--output-on-failure", "--no-tests=error", "-j", str(args.jobs)]
    if args.label:
        cmd += ["-L", args.label]
    if args.regex:
        cmd += ["-R", args.regex]
    # The clusters' own logs (firmware, daemons, switch), which their tests
    # copy here before they go down (cluster_case.keep_logs); kept for a
    # failed run only.
    logs = os.path.join(out, f"run-{k}-clusters")
    env = dict(os.environ, ULNIC_KEEP_LOGS=logs)
    rc, output, secs = run_logged(cmd, os.path.join(out, f"run-{k}.log"), env=env)
    if rc == 0:
        shutil.rmtree(logs, ignore_errors=True)
    last = os.path.join(args.build, "Testing", "Temporary", "LastTest.log")
    if os.path.exists(last):
        shutil.copy(last, os.path.join(out, f"run-{k}.lasttest.log"))
    return rc, output, secs


def clone_run(args, k, out):
    work = tempfile.mkdtemp(prefix="ulnic-stress-clone-")
    try:
        subprocess.run(["git", "clone", "-q", args.repo, work], check=True)
        env = dict(os.environ)
        env.pop("ULNIC_BUILD_DIR", None)
        rc, output, secs = run_logged([os.path.join(work, "toolchain", "bootstrap.sh"), "test"],
                                      os.path.join(out, f"run-{k}.log"), cwd=work, env=env)
        last = os.path.join(work, "build", "Testing", "Temporary", "LastTest.log")
        if os.path.exists(last):
            shutil.copy(last, os.path.join(out, f"run-{k}.lasttest.log"))
        return rc, output, secs
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"), help="build directory (ctest mode)")
    ap.add_argument("--label", default="integration", help="ctest -L (empty: every test)")
    ap.add_argument("-R", dest="regex", default="", help="ctest -R")
    ap.add_argument("--jobs", type=int, default=2, help="ctest -j")
    ap.add_argument("--clone", action="store_true", help="run the README's test command on fresh clones")
    ap.add_argument("--repo", default=ROOT, help="what --clone clones")
    ap.add_argument("--runs", type=int, default=None, help="runs in a row (default 20; --clone 5)")
    ap.add_argument("--burners", type=int, default=0, help="busy-loop processes running all the while")
    ap.add_argument("--out", default=None, help="log directory (default: a new one under /tmp)")
    args = ap.parse_args()
    runs = args.runs if args.runs is not None else (5 if args.clone else 20)
    if runs < 1 or args.burners < 0 or args.jobs < 1:
        ap.error("--runs and --jobs must be >= 1, --burners >= 0")
    if not args.clone and not os.path.isdir(args.build):
        ap.error(f"no build directory {args.build} (build first, or use --clone)")
    out = args.out or tempfile.mkdtemp(prefix="ulnic-stress-")
    os.makedirs(out, exist_ok=True)
    what = f"the test command on fresh clones of {args.repo}" if args.clone else \
        f"ctest -L '{args.label}'" + (f" -R '{args.regex}'" if args.regex else "") + f" -j {args.jobs} in {args.build}"
    print(f"stress: {runs} run(s) of {what}, {args.burners} CPU burner(s); logs in {out}", flush=True)
    print(f"stress: load average at start {os.getloadavg()[0]:.2f}, {os.cpu_count()} CPUs", flush=True)
    burners = start_burners(args.burners)
    failures = []
    try:
        for k in range(1, runs + 1):
            rc, output, secs = clone_run(args, k, out) if args.clone else ctest_run(args, k, out)
            names = failed_tests(output)
            verdict = "passed" if rc == 0 else "FAILED " + (", ".join(names) if names else f"(exit status {rc})")
            print(f"run {k}/{runs}: {verdict} in {secs:.0f} s", flush=True)
            if rc != 0:
                failures.append((k, names or [f"exit status {rc}"]))
    except KeyboardInterrupt:
        print("stress: interrupted", flush=True)
        failures.append((0, ["interrupted"]))
    finally:
        stop_burners(burners)
    print(f"stress: {runs - len(failures)} of {runs} run(s) passed; load average at end {os.getloadavg()[0]:.2f}")
    for k, names in failures:
        print(f"  run {k}: {', '.join(names)}: {os.path.join(out, f'run-{k}.log')}")
    return 0 if not failures else 1


if __name__ == "__main__":
    sys.exit(main())
