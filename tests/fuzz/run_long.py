#!/usr/bin/env python3
"""Runs the fuzz targets (tests/fuzz) long, one at a time on one core at the
lowest priority (--nice 0: an ordinary one, e.g. in place of one of
tests/stress/stress.py's CPU burners), and prints per target the
executions, the coverage libFuzzer reports at the end (cov: edges, ft:
features) and what it found.

  tests/fuzz/run_long.py BUILD_DIR [--runs N] [--max-time S] [--nice N] [TARGET ...]

BUILD_DIR is the top-level build (its fuzz/ sub-build holds the targets).
Each target starts from its seed corpus (tests/fuzz/corpus/<t>) and keeps
what it learns in BUILD_DIR/fuzz/long/<t>; crashes go to
BUILD_DIR/fuzz/long/<t>-crash-*. A finding ends that target's run (exit 1
at the end)."""
import argparse
import os
import re
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def targets():
    with open(os.path.join(HERE, "targets.cmake")) as f:
        text = f.read()
    names = []
    for var in ("ULNIC_FUZZ_EMULATOR_TARGETS", "ULNIC_FUZZ_FIRMWARE_TARGETS"):
        m = re.search(r"set\(%s([^)]*)\)" % var, text)
        names += m.group(1).split() if m else []
    return names


def run(build, t, runs, max_time, nice):
    fuzz_dir = os.path.join(build, "fuzz")
    work = os.path.join(fuzz_dir, "long", t)
    os.makedirs(work, exist_ok=True)
    cmd = ["nice", "-n", str(nice), os.path.join(fuzz_dir, "fuzz_" + t), "-runs=%d" % runs,
           "-max_total_time=%d" % max_time, "-print_final_stats=1",
           "-artifact_prefix=" + os.path.join(fuzz_dir, "long", t + "-")]
    d = os.path.join(HERE, "dict", t + ".dict")
    if os.path.exists(d):
        cmd.append("-dict=" + d)
    cmd += [work, os.path.join(HERE, "corpus", t)]
    env = dict(os.environ, UBSAN_OPTIONS="print_stacktrace=1", ASAN_OPTIONS="detect_leaks=1")
    start = time.time()
    p = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, errors="replace", env=env)
    log = p.stderr
    with open(os.path.join(fuzz_dir, "long", t + ".log"), "w") as f:
        f.write(log)
    execs = re.findall(r"stat::number_of_executed_units:\s*(\d+)", log)
    covs = re.findall(r"cov: (\d+) ft: (\d+)", log)
    found = re.findall(r"(ERROR: \w+Sanitizer: [^\n]*|runtime error: [^\n]*|invariant violated: [^\n]*|"
                       r"ERROR: libFuzzer: [^\n]*)", log)
    return {
        "target": t,
        "execs": int(execs[-1]) if execs else 0,
        "cov": int(covs[-1][0]) if covs else 0,
        "ft": int(covs[-1][1]) if covs else 0,
        "seconds": time.time() - start,
        # libFuzzer exits 72 when interrupted (SIGINT): stopped early, found nothing.
        "found": found[0] if found else ("exit %d" % p.returncode if p.returncode not in (0, 72) else ""),
        "interrupted": p.returncode == 72,
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build")
    ap.add_argument("--runs", type=int, default=1_000_000)
    ap.add_argument("--max-time", type=int, default=3600, help="seconds per target at most")
    ap.add_argument("--nice", type=int, default=19, help="niceness of the fuzzers (default 19: the lowest priority)")
    ap.add_argument("targets", nargs="*")
    a = ap.parse_intermixed_args()  # (the usage line puts TARGETs after the options)
    names = a.targets or targets()
    print("%-16s %12s %7s %8s %8s  %s" % ("target", "executions", "cov", "ft", "seconds", "found"), flush=True)
    bad = False
    for t in names:
        r = run(a.build, t, a.runs, a.max_time, a.nice)
        bad |= bool(r["found"])
        print("%-16s %12d %7d %8d %8.0f  %s" % (t, r["execs"], r["cov"], r["ft"], r["seconds"],
                                                 r["found"] or ("(interrupted)" if r["interrupted"] else "-")), flush=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
