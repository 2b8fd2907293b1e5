#!/usr/bin/env python3
"""Benchmark: what an idle NIC costs the host.

Starts N nodes (default 1) in a private cluster, lets them settle, then
samples each QEMU's CPU time (utime+stime from /proc/PID/stat) over
consecutive windows and reports the share of one core as min/median/max,
beside the same figures for the fabric server. The floor is 0% (a process
that sleeps); DESIGN §7.5 sets the budget: an idle node < 5% of a core.

  tests/bench/idle_cpu.py [--nodes N] [--windows K] [--seconds S] [--json FILE]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

from bench_common import runtime_parent

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, default=1)
    ap.add_argument("--windows", type=int, default=5)
    ap.add_argument("--seconds", type=float, default=2.0, help="length of one window")
    ap.add_argument("--json", default="idle_cpu.json")
    ap.add_argument("--ulnic", default=os.path.join(ROOT, "build", "bin", "ulnic"))
    args = ap.parse_args()

    env = dict(os.environ, ULNIC_RUNTIME_DIR=tempfile.mkdtemp(prefix="ulnic-bench-", dir=runtime_parent()))
    cluster = "idlebench"
    pids = {}
    try:
        for n in range(args.nodes):
            subprocess.run([args.ulnic, "node", "start", "-c", cluster, "-n", str(n)], env=env, check=True,
                           stdout=subprocess.DEVNULL)
            st = json.loads(subprocess.run([args.ulnic, "node", "status", "-c", cluster, "-n", str(n), "--json"],
                                           env=env, capture_output=True, text=True).stdout)
            pids[f"qemu node{n}"] = st["pid"]
            with open(os.path.join(env["ULNIC_RUNTIME_DIR"], cluster, f"node{n}", "ulnicd.pid")) as f:
                pids[f"ulnicd node{n}"] = int(f.read())
        with open(os.path.join(env["ULNIC_RUNTIME_DIR"], cluster, "fabric", "fabricd.pid")) as f:
            pids["fabric server"] = int(f.read())
        time.sleep(1.0)  # let boot work drain
        shares = {name: [] for name in pids}
        for _ in range(args.windows):
            before = {name: cpu_seconds(pid) for name, pid in pids.items()}
            t0 = time.monotonic()
            time.sleep(args.seconds)
            dt = time.monotonic() - t0
            for name, pid in pids.items():
                shares[name].append(100.0 * (cpu_seconds(pid) - before[name]) / dt)
    finally:
        for n in range(args.nodes):
            subprocess.run([args.ulnic, "node", "stop", "-c", cluster, "-n", str(n)], env=env,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    print(f"idle CPU, % of one core, {args.windows} windows of {args.seconds:.1f} s "
          f"(floor: 0%, budget: 5%)")
    print(f"{'process':<16}{'min':>8}{'median':>8}{'max':>8}")
    result = {"nodes": args.nodes, "window_s": args.seconds, "windows": args.windows, "floor_pct": 0.0,
              "budget_pct": 5.0, "processes": {}}
    for name, xs in shares.items():
        row = {"min": min(xs), "median": statistics.median(xs), "max": max(xs), "samples": xs}
        result["processes"][name] = row
        print(f"{name:<16}{row['min']:>8.2f}{row['median']:>8.2f}{row['max']:>8.2f}")
    with open(args.json, "w") as f:
        json.dump(result, f, indent=2)
    print(f"wrote {args.json}")
    worst = max(r["median"] for r in result["processes"].values())
    return 0 if worst < 5.0 else 1


if __name__ == "__main__":
    sys.exit(main())
