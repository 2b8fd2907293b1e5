#!/usr/bin/env python3
"""Benchmark driver: slot latency, bandwidth and wake-up on a private node.

Starts one node with 64 MiB slots in a private runtime directory, runs
slot_bench against it (extra arguments are passed through, e.g. --skip-slots 1
or --iters 500), prints its tables, and stops the node. slot_bench writes the
JSON (--json, default slot_bench.json).

  tests/bench/slot_bench.py [--build DIR] [--slot-size MIB] [slot_bench args...]
"""
import argparse
import os
import subprocess
import sys
import tempfile

from bench_common import ROOT, check_build, remove_runtime, runtime_parent


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"), help="build directory (bin/ulnic, bin/slot_bench)")
    ap.add_argument("--slot-size", type=int, default=64, help="slot size in MiB")
    args, rest = ap.parse_known_args()
    build = check_build(args.build, ("ulnic", "slot_bench"), "slot_bench.py")
    ulnic = os.path.join(build, "bin", "ulnic")
    bench = os.path.join(build, "bin", "slot_bench")

    runtime = tempfile.mkdtemp(prefix="ulnic-slotbench-", dir=runtime_parent())
    cluster = "slotbench"
    env = dict(os.environ, ULNIC_RUNTIME_DIR=runtime, ULNIC_CLUSTER=cluster, ULNIC_NODE="0")
    try:
        subprocess.run([ulnic, "node", "start", "-c", cluster, "--slot-size", str(args.slot_size)], env=env,
                       check=True, stdout=subprocess.DEVNULL)
        return subprocess.run([bench] + rest, env=env).returncode
    finally:
        subprocess.run([ulnic, "node", "stop", "-c", cluster], env=env, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)
        remove_runtime(runtime)


if __name__ == "__main__":
    sys.exit(main())
