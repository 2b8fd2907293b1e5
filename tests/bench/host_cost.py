#!/usr/bin/env python3
"""Benchmark driver: the host's instructions per send call -- the host half of the papers' overhead breakdowns
(issue 22) -- counted by valgrind's callgrind on the host libraries, beside the NIC's (tests/bench/cost.py).

Builds nothing. Brings up a private two-node cluster (`ulnic cluster up -n 2 --slot-size 64`) and per protocol
runs a ping-pong whose measuring side runs under `valgrind --tool=callgrind` while its peer runs natively:

  vipl  vipl_tight client (64 B sends): VipPostSend, which posts a descriptor and rings the doorbell;
  vmmc  vmmc_bench client --skip everything but the send-overhead section: vmmc_send_async of 4 B (inline);
  am    am_tight with `ulnic run -n 2 --transport T` (T: native and vipl), each rank under callgrind:
        AM_Request4, i.e. AMUDP_Request (it polls the network while it waits for credit, as AM-2 allows: what it
        finds to do is counted too).

From each callgrind file it reads the function's calls and inclusive instructions (every call site, every
thread) and which functions those instructions were spent in (self cost inside the call, from callgrind's call
graph). Each protocol runs twice, N and 2N round trips: the difference is N calls in the steady state (what only
the first calls pay -- connecting, registering buffers -- cancels), hence instructions per call and the top
functions by share. Instruction counts are the program's own
(user-space x86-64; the kernel's share of a doorbell's syscall is not counted). A count per call that is not an
integer means the calls did not all cost the same (a full queue, a poll that found work).

Prints a table and writes OUT/host_cost.json:

  tests/bench/host_cost.py [--build DIR] [--out DIR] [--rounds N] [--protocols vipl,vmmc,am_native,am_vipl]
"""
import argparse
import glob
import os
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_common import (check_build, default_build, on_private_cluster, protocols_of, run_together,  # noqa: E402
                          write_json)

PROG = "host_cost.py"
CLUSTER = "hostcost"
PROTOCOLS = ("vipl", "vmmc", "am_native", "am_vipl")
# AM_Request4 is AMUDP's macro for AMUDP_Request(..., 4, ...), the function callgrind sees.
FUNCTION = {"vipl": "VipPostSend", "vmmc": "vmmc_send_async", "am_native": "AMUDP_Request", "am_vipl": "AMUDP_Request"}
LIMIT = 600  # seconds per run (callgrind runs a program some 50x slower)
VMMC_BYTES = 4  # vmmc_send_async of 4 B: the VMMC paper's smallest message, inline


# --------------------------------------------------------------- callgrind's file

def parse_callgrind(path):
    """A callgrind output file -> {"self": {fn: Ir}, "calls": {fn: [calls, inclusive Ir]},
    "callees": {caller: {callee: inclusive Ir}}} (Ir: the first event; names with callgrind's compression
    undone)."""
    names, self_ir, calls, callees = {}, {}, {}, {}
    fn = cfn = None
    pending = None  # a "calls=" line: its cost line follows

    def name(spec):
        m = re.match(r"\((\d+)\)(?:\s+(.*))?", spec)
        if not m:
            return spec
        if m.group(2):
            names[m.group(1)] = m.group(2)
        return names.get(m.group(1), spec)

    with open(path, errors="replace") as f:
        for line in f:
            line = line.rstrip("\n")
            if not line or line[0] == "#":
                continue
            if line.startswith("fn="):
                fn = name(line[3:])
            elif line.startswith("cfn="):
                cfn = name(line[4:])
            elif line.startswith("calls="):
                pending = int(line[6:].split()[0])
            elif line[0].isdigit() or line[0] in "+-*":
                parts = line.split()
                ir = int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else 0
                if pending is not None:
                    c = calls.setdefault(cfn, [0, 0])
                    c[0] += pending
                    c[1] += ir
                    callees.setdefault(fn, {})
                    callees[fn][cfn] = callees[fn].get(cfn, 0) + ir
                    pending = None
                elif fn is not None:
                    self_ir[fn] = self_ir.get(fn, 0) + ir
            # else: fl=, fi=, fe=, ob=, cfi=, cob=, positions:, events:, summary:, totals:
    return {"self": self_ir, "calls": calls, "callees": callees}


def merge(parsed):
    out = {"self": {}, "calls": {}, "callees": {}}
    for p in parsed:
        for k, v in p["self"].items():
            out["self"][k] = out["self"].get(k, 0) + v
        for k, (n, ir) in p["calls"].items():
            c = out["calls"].setdefault(k, [0, 0])
            c[0] += n
            c[1] += ir
        for caller, d in p["callees"].items():
            dst = out["callees"].setdefault(caller, {})
            for k, v in d.items():
                dst[k] = dst.get(k, 0) + v
    return out


def inside(prof, root, limit=8):
    """Where the instructions of calls to `root` went: the self cost of `root` and of every function it reaches,
    each callee's inclusive cost split down the call graph (a callee's self share = its self Ir x the share of its
    inclusive Ir that came from below root). -> [(function, Ir)] the top `limit`, largest first."""
    got = {}

    def walk(fn, weight, depth):
        total = prof["calls"].get(fn, [0, 0])[1] or 1
        below = sum(prof["callees"].get(fn, {}).values())
        got[fn] = got.get(fn, 0) + weight * max(0, total - below) / total
        if depth > 12:
            return
        for callee, ir in prof["callees"].get(fn, {}).items():
            if callee != fn:
                walk(callee, weight * ir / total, depth + 1)

    n, ir = prof["calls"].get(root, [0, 0])
    if ir:
        walk(root, ir, 0)
    return sorted(((k, v) for k, v in got.items() if v > 0), key=lambda kv: -kv[1])[:limit]  # limit None: all


def short(fn):
    """A readable function name: no argument list, no namespace ulnic, no anonymous namespace."""
    fn = fn.replace("(anonymous namespace)::", "").split("'")[0]
    fn = fn.split("(")[0].replace("ulnic::", "").split("@@")[0]
    return fn if len(fn) < 60 else fn[:57] + "..."


# ----------------------------------------------------------------------- runs

def valgrind(out_pattern):
    return ["valgrind", "--tool=callgrind", "--quiet", f"--callgrind-out-file={out_pattern}", "--dump-instr=no",
            "--collect-jumps=no", "--separate-threads=no"]


def profile(proto, build, env, rounds, work):
    """One run of `rounds` round trips (vmmc: overhead samples) with the measuring side under callgrind -> its
    merged call graph."""
    b = lambda name: os.path.join(build, "bin", name)  # noqa: E731
    tag = f"{proto}-{rounds}"
    vg = valgrind(os.path.join(work, f"{tag}.cg.%p"))
    n = str(rounds)
    on = lambda node: dict(env, ULNIC_NODE=node)  # noqa: E731
    if proto == "vipl":
        cmds = [([b("vipl_tight"), "server", "nic1", "--rounds", n, "--bytes", "64"], on("1")),
                ([*vg, b("vipl_tight"), "client", "nic0", "node1", "--rounds", n, "--bytes", "64"], on("0"))]
    elif proto == "vmmc":
        cmds = [([b("vmmc_bench"), "serve", "--peer", "0", "--idle-timeout", "300"], on("1")),
                ([*vg, b("vmmc_bench"), "client", "--peer", "1", "--skip", "lat,poll,bw,bidir,cross,nic",
                  "--no-floors", "--ovh-sizes", str(VMMC_BYTES), "--ovh-samples", n, "--json",
                  os.path.join(work, f"{tag}.json")], on("0"))]
    else:
        transport = proto.split("_")[1]
        # The workers start under callgrind: on a loaded host that took past
        # the master's 30 s for AMUDP_SPMDStartup (issue 20's stress); give
        # them the run's own limit.
        cmds = [([os.path.join(build, "bin", "ulnic"), "run", "-n", "2", "--transport", transport, "-c",
                  env["ULNIC_CLUSTER"], *vg, b("am_tight"), "--requests", n, "--xfers", "0"],
                 dict(on("0"), ULNIC_AM_STARTUP_TIMEOUT_MS=str(LIMIT * 1000)))]
    out = "".join(run_together(cmds, LIMIT, proto))
    files = sorted(glob.glob(os.path.join(work, f"{tag}.cg.*")))
    if not files:
        raise RuntimeError(f"{proto}: no callgrind file\n{out}")
    return merge([parse_callgrind(f) for f in files])


def measure(proto, build, env, rounds, work):
    """Runs of N and 2N round trips; the difference is N steady-state calls (what only a first call pays --
    connecting, registering buffers -- cancels) -> the protocol's result."""
    fn = FUNCTION[proto]
    small, big = profile(proto, build, env, rounds, work), profile(proto, build, env, 2 * rounds, work)
    (c1, ir1), (c2, ir2) = small["calls"].get(fn, [0, 0]), big["calls"].get(fn, [0, 0])
    if c2 <= c1:
        raise RuntimeError(f"{proto}: callgrind saw {c1} then {c2} calls to {fn}")
    calls = c2 - c1
    w1, w2 = dict(inside(small, fn, None)), dict(inside(big, fn, None))
    where = sorted(((k, v - w1.get(k, 0)) for k, v in w2.items()), key=lambda kv: -kv[1])
    top = [{"function": short(k), "instructions_per_call": v / calls} for k, v in where[:8] if v > 0]
    return {"protocol": proto, "function": fn, "calls": calls, "instructions": ir2 - ir1,
            "per_call": (ir2 - ir1) / calls, "first_run_per_call": ir1 / c1 if c1 else None, "where": top}


def print_table(results):
    print("\n== host instructions per send call (callgrind, user space)")
    print(f"  {'protocol':<11}{'function':<18}{'calls':>8}{'per call':>11}   where they went (per call)")
    for r in results:
        where = ", ".join(f"{w['function']} {w['instructions_per_call']:.0f}" for w in r["where"][:4])
        print(f"  {r['protocol']:<11}{r['function']:<18}{r['calls']:>8}{r['per_call']:>11.1f}   {where}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=default_build("ulnic", ["build"]))
    ap.add_argument("--out", default=".", help="where host_cost.json goes (default: here)")
    ap.add_argument("--rounds", type=int, default=200, help="N: runs of N and 2N round trips (vmmc: sends)")
    ap.add_argument("--protocols", default=",".join(PROTOCOLS))
    a = ap.parse_args()
    protos = protocols_of(ap, a.protocols, PROTOCOLS)
    if subprocess.run(["valgrind", "--version"], capture_output=True).returncode != 0:
        sys.exit(f"{PROG}: valgrind not found (Debian: valgrind; toolchain/install-deps.sh installs it)")
    build = check_build(a.build, ["ulnic", "vipl_tight", "vmmc_bench", "am_tight"], PROG)
    out = os.path.abspath(a.out)
    os.makedirs(out, exist_ok=True)

    def go(cluster):
        results, rc = [], 0
        for p in protos:
            with tempfile.TemporaryDirectory(prefix=f"ulnic-hostcost-{p}-") as work:
                try:
                    results.append(measure(p, build, cluster.env(0), a.rounds, work))
                except (RuntimeError, OSError) as e:
                    print(f"{PROG}: {p}: {e}", file=sys.stderr)
                    rc = 1
        print_table(results)
        write_json({"benchmark": "host_cost", "rounds": a.rounds, "results": results},
                   os.path.join(out, "host_cost.json"))
        return rc

    return on_private_cluster(build, CLUSTER, 64, (), PROG, go)


if __name__ == "__main__":
    sys.exit(main())
