#!/usr/bin/env python3
"""Runs one test of a sanitizer build (tests/sanitize/sanitize.cmake) and
fails it on any sanitizer report.

The test runs through that build's ctest (its command, environment and
timeout). Every instrumented process it starts, however deep (ulnicd
behind `ulnic cluster up`, forked FM ranks, AM workers), inherits the
options below and writes what it reports to a file of its own in a fresh
directory; a report fails the test even where the process that made it was
a daemon whose exit status nobody reads, and every report is printed.
A process that reports stops there (halt_on_error; the builds also pass
-fno-sanitize-recover). Suppressions: tests/sanitize/*.supp, only for what
our code cannot change or a sanitizer cannot see, each with its reason.

One gap: GCC 12's UBSan linked beside ASan ignores log_path and writes to
stderr. Its report still ends the process (exit 1): a test program's
fails its test with the report in the output; a daemon (ulnicd) dies,
and its test fails on what it then asks of it, with the report in the
daemon's log (ulnicd.log in the node's runtime directory).
"""
import argparse
import os
import re
import shutil
import subprocess
import sys

REPORT_CHARS = 20000  # of each report printed: the first frames say enough
# What marks a report, not a notice: every error report ends in a SUMMARY
# line, a UBSan one says "runtime error:", and a runtime that cannot go on
# says FATAL or ERROR. A notice alone (ASan's "doesn't fully support
# makecontext/swapcontext" for FM's handler contexts) is printed, not failed.
REPORT = re.compile(r"SUMMARY: |runtime error:|FATAL: |==ERROR: ")


def options(logs, supp_dir):
    common = {"halt_on_error": "1", "print_stacktrace": "1"}
    opts = {
        "ASAN_OPTIONS": {"detect_leaks": "1", "log_path": f"{logs}/asan"},
        "UBSAN_OPTIONS": {"log_path": f"{logs}/ubsan"},
        "LSAN_OPTIONS": {},
        "TSAN_OPTIONS": {"second_deadlock_stack": "1", "log_path": f"{logs}/tsan"},
    }
    env = dict(os.environ)
    for var, o in opts.items():
        o = dict(common, **o)
        supp = os.path.join(supp_dir, var.split("_")[0].lower() + ".supp")
        if os.path.exists(supp):
            o["suppressions"] = supp
        own = ":".join(f"{k}={v}" for k, v in o.items())
        env[var] = f"{env[var]}:{own}" if env.get(var) else own
    return env


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ctest", required=True)
    ap.add_argument("--build", required=True, help="the sanitizer build's directory")
    ap.add_argument("--test", required=True, help="the name of the test in that build")
    ap.add_argument("--suppressions", required=True, help="the directory of the *.supp files")
    a = ap.parse_args()

    logs = os.path.join(a.build, "sanitizer-logs", a.test)
    shutil.rmtree(logs, ignore_errors=True)
    os.makedirs(logs)
    p = subprocess.run([a.ctest, "--test-dir", a.build, "--output-on-failure", "--no-tests=error",
                        "-R", f"^{re.escape(a.test)}$"], env=options(logs, a.suppressions))
    reports = 0
    for name in sorted(os.listdir(logs)):
        with open(os.path.join(logs, name), errors="replace") as f:
            text = f.read()
        fails = bool(REPORT.search(text))
        reports += fails
        print(f"==== sanitizer {'report' if fails else 'notice'} {name} ({len(text)} chars) ====")
        print(text[:REPORT_CHARS])
    if reports:
        print(f"{reports} sanitizer report(s) in {logs}")
        return 1
    return p.returncode


if __name__ == "__main__":
    sys.exit(main())
