#!/usr/bin/env python3
"""Benchmark driver: the NIC's exact instruction cost of one short message, per side and per firmware phase, for
VMMC, VIPL and native AM (issue 22).

Builds nothing. Brings up a private two-node cluster with `ulnic cluster up -n 2 --cost` (the cost plugin counts
every instruction each NIC retires and charges it to the firmware's phase markers, shared/include/ulnic/abi/cost.h),
then per protocol runs a ping-pong of short messages between node 0 and node 1 -- each round one message each way:

  vmmc  vmmc_tight --bytes 64: a 64 B vmmc_send with VMMC_NOTIFY (inline in the send queue), answered the same way;
  vipl  vipl_tight --bytes 64: a 64 B VipPostSend on a reliable VI into a preposted receive, answered the same way;
  am    am_tight --xfers 0 (`ulnic run -n 2 --transport native`): AM_Request4, answered by AM_Reply4.

It reads both NICs' cost blocks (`ulnic node status --json`) before and after each run: a warm-up run, then N,
N again and 2N rounds. The exact cost of one message is the last message of a run (the plugin keeps each
operation's latest work item by phase); it must be the same after all three runs (else the script says NOT
DETERMINISTIC and exits 1). Beside it, the average over the N extra rounds of the 2N run (the difference of the
two runs' totals: setup -- attach, export/import, connect, SPMD start and exit -- cancels). A protocol's sides:

  send  the sender's NIC: <proto>_send work items (send-queue descriptor, transmit) plus the verdict that
        completes the operation (`verdict_taken`);
  recv  the receiver's NIC: <proto>_recv work items (the packet, placement, completion or ring entry, the
        verdict sent back; VIPL also the receive descriptor the program posts for each message).

The budgeted count of a side is every phase but ack and ring (link ACK upkeep, fabric ring head re-reads and
doorbells), which depend on when the peers acted and are shown as averages. Link ACKs sent alone are work items
of no operation ("other"), in the JSON with the runs' setup. am_tight's replier leaves right after its last reply, whose
verdict may then find no operation to complete: the reply's last-message send side leaves its verdict out
(EXIT_RACE). Prints a table per protocol (phase x direction and side) with the wall-clock round trip the programs
measured beside it (never modelled time), and writes OUT/cost.json.

With --bytes B (up to 4096, one packet) VMMC and VIPL send B-byte messages instead: above 128 B a VMMC message is
fetched by DMA, not carried inline; tests/bench/papers.py takes a full packet's cost from it for its cost model.

  tests/bench/cost.py [--build DIR] [--out DIR] [--rounds N] [--protocols vmmc,vipl,am] [--bytes B] [--firmware ELF]
"""
import argparse
import json
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_common import (check_build, default_build, on_private_cluster, protocols_of, run_together,  # noqa: E402
                          write_json)

PROG = "cost.py"
CLUSTER = "costbench"
PROTOCOLS = ("vmmc", "vipl", "am")
BYTES = 64  # default: a short message, inline for VMMC (<= 128 B), one packet everywhere
MAX_BYTES = 4096  # --bytes: up to one full packet (kMtu); VMMC fetches a message > 128 B by DMA
AM_BYTES = 16  # am_tight's AM_Request4: 16 B of arguments, whatever --bytes says
# The phases a message's budget counts; ack and ring (link ACKs, ring head re-reads, doorbells) depend on when the
# peers acted, so they are reported beside, as an average.
PHASES = ("sq_scan", "decode", "translate", "header", "transmit", "rx_check", "placement", "completion", "verdict")
TIMED = ("ack", "ring")
SIDES = {
    "vmmc": {"send": ("vmmc_send", "verdict_taken"), "recv": ("vmmc_recv",)},
    "vipl": {"send": ("vi_send", "verdict_taken"), "recv": ("vi_recv",)},
    "am": {"send": ("am_send", "verdict_taken"), "recv": ("am_recv",)},
}
# Operations whose last work item a run's end may cut short, by protocol and node: am_tight's replier sends its
# last reply and leaves (AM has no send completion to wait for), so the reply's verdict may reach its NIC after
# the slot is gone, with no operation left to complete. Left out of that side's last-message count.
EXIT_RACE = {"am": {1: ("verdict_taken",)}}
LIMIT = 180  # seconds per program run


def node_cost(ulnic, env, node):
    """Node `node`'s cost block (the "cost" object of `ulnic node status --json`), with the passes of its loop so
    far under "passes" (its loop_iterations counter)."""
    p = subprocess.run([ulnic, "node", "status", "-c", env["ULNIC_CLUSTER"], "-n", str(node), "--json"], env=env,
                       capture_output=True, text=True, timeout=60)
    status = json.loads(p.stdout)
    cost = status.get("cost")
    if cost is None:
        raise RuntimeError(f"node {node} has no cost block: is the cluster up with --cost?")
    cost["passes"] = status["counters"]["loop_iterations"]
    return cost


def ops_of(cost):
    """{op: {phase: instructions, "spans": n}} of one node's cost block."""
    return {op: {k: v for k, v in row.items() if k != "last"} for op, row in cost["ops"].items()}


def lasts_of(cost):
    """{op: {phase: instructions}}: each operation's latest work item per phase (one message's worth)."""
    return {op: dict(row["last"]) for op, row in cost["ops"].items()}


def diff(after, before):
    return {op: {k: v - before[op].get(k, 0) for k, v in row.items()} for op, row in after.items()}


def commands(proto, rounds, bin_dir, ulnic, nbytes):
    """The processes of one run: [(argv, node)]; node None: `ulnic run` places its ranks itself (rank r on node
    r, rank 0 the requester)."""
    prog = lambda name: os.path.join(bin_dir, name)  # noqa: E731
    n, b = str(rounds), str(nbytes)
    if proto == "vmmc":
        return [([prog("vmmc_tight"), "serve", "0", "--rounds", n, "--bytes", b], 1),
                ([prog("vmmc_tight"), "send", "1", "--rounds", n, "--bytes", b], 0)]
    if proto == "vipl":
        return [([prog("vipl_tight"), "server", "nic1", "--rounds", n, "--bytes", b], 1),
                ([prog("vipl_tight"), "client", "nic0", "node1", "--rounds", n, "--bytes", b], 0)]
    return [([ulnic, "run", "-n", "2", "--transport", "native", "-c", CLUSTER, prog("am_tight"), "--requests", n,
              "--xfers", "0"], None)]


def run_once(ulnic, bin_dir, env, proto, rounds, nbytes):
    """One run of `rounds` rounds -> ([ops delta of node 0, of node 1], [the last message's ops of node 0, of
    node 1], (idle instructions, loop passes) of both nodes, the programs' output)."""
    before = [node_cost(ulnic, env, k) for k in (0, 1)]
    outs = run_together([(argv, dict(env, ULNIC_NODE=str(node if node is not None else 0)))
                         for argv, node in commands(proto, rounds, bin_dir, ulnic, nbytes)], LIMIT, proto,
                        failed=lambda out: "FAIL" in out)
    after = [node_cost(ulnic, env, k) for k in (0, 1)]
    idle = (sum(a["phases"]["idle"]["insns"] - b["phases"]["idle"]["insns"] for a, b in zip(after, before)),
            sum(a["passes"] - b["passes"] for a, b in zip(after, before)))
    return ([diff(ops_of(a), ops_of(b)) for a, b in zip(after, before)], [lasts_of(a) for a in after], idle,
            "".join(outs))


def per_message(small, big, rounds):
    """The N extra rounds' cost on each node, per message (each node sends one message a round and takes one) ->
    ([{op: {phase: instructions}} of node 0, of node 1], problems): a problem is a budgeted count that does not
    divide (it was not the same every message)."""
    out, problems = [], []
    for node, (s, b) in enumerate(zip(small, big)):
        m = {}
        for op, row in b.items():
            m[op] = {}
            for k, v in row.items():
                extra = v - s.get(op, {}).get(k, 0)
                if op != "other" and k in PHASES and extra % rounds:
                    problems.append(f"node {node} {op}.{k}: {extra} instructions over {rounds} messages do not divide")
                m[op][k] = extra / rounds
        out.append(m)
    return out, problems


def unequal(runs, ops, proto):
    """The budgeted counts of the last message of each run (each [node 0, node 1]) that differ between runs."""
    out = []
    for n in (0, 1):
        for op in ops:
            if op in EXIT_RACE.get(proto, {}).get(n, ()):
                continue
            for k in PHASES:
                seen = [r[n][op][k] for r in runs]
                if len(set(seen)) > 1:
                    out.append(f"node {n} {op}.{k}: {' then '.join(map(str, seen))}")
    return out


def side(msg, ops):
    """{phase: instructions} of one side of one message (the sum over its operations), with "total"."""
    row = {ph: sum(msg.get(op, {}).get(ph, 0) for op in ops) for ph in PHASES}
    row["total"] = sum(row.values())
    for ph in TIMED:
        row[ph] = sum(msg.get(op, {}).get(ph, 0) for op in ops)
    return row


def sides(proto, msg, last=False):
    """{direction: {side: row}}: ping = node 0 -> node 1 (AM: the request), pong = back (AM: the reply). last: msg
    is each run's last message (EXIT_RACE left out)."""
    ops = SIDES[proto]
    skip = EXIT_RACE.get(proto, {}) if last else {}
    send = [tuple(op for op in ops["send"] if op not in skip.get(n, ())) for n in (0, 1)]
    return {"ping": {"send": side(msg[0], send[0]), "recv": side(msg[1], ops["recv"])},
            "pong": {"send": side(msg[1], send[1]), "recv": side(msg[0], ops["recv"])}}


def measure(ulnic, bin_dir, env, proto, rounds, nbytes=BYTES):
    """A warm-up run, then N, N again and 2N rounds -> a result dict (raises RuntimeError). The warm-up takes
    what only a fresh NIC pays (a peer's first packet, tables never used)."""
    run_once(ulnic, bin_dir, env, proto, rounds, nbytes)
    first, last1, idle1, out1 = run_once(ulnic, bin_dir, env, proto, rounds, nbytes)
    again, last2, _, _ = run_once(ulnic, bin_dir, env, proto, rounds, nbytes)
    double, last3, idle2, out2 = run_once(ulnic, bin_dir, env, proto, 2 * rounds, nbytes)
    msg, problems = per_message(first, double, rounds)
    all_ops = [op for ops in SIDES[proto].values() for op in ops]
    return {"protocol": proto, "bytes": AM_BYTES if proto == "am" else nbytes, "rounds": rounds,
            "runs": {"n": first, "n_again": again, "2n": double},
            "last": {"n": last1, "n_again": last2, "2n": last3}, "sides": sides(proto, last1, last=True),
            "average": sides(proto, msg), "unequal_runs": unequal([last1, last2, last3], all_ops, proto),
            "indivisible": problems,
            "idle_insns": {"n": idle1[0], "2n": idle2[0]}, "passes": {"n": idle1[1], "2n": idle2[1]},
            # What a pass of the NIC's loop costs outside the work items it runs (its looks at every source of
            # work, most of which find none), both NICs over the 2N run: the idle polling a message's gaps cost.
            "idle_per_pass": idle2[0] / idle2[1] if idle2[1] else None, "output": out1 + out2}


def wall_us(output):
    """The client's "X us per round trip" from a program's output, or None."""
    m = re.search(r"([0-9.]+) us per round trip", output)
    return float(m.group(1)) if m else None


def print_table(r):
    s, avg = r["sides"], r["average"]
    names = ("request", "reply") if r["protocol"] == "am" else ("ping", "pong")
    cols = [(d, sd) for d in ("ping", "pong") for sd in ("send", "recv")]
    print(f"\n{r['protocol']}: {r['bytes']} B, NIC instructions per message and side: the last message of a run, "
          f"exact")
    print(f"  {'phase':<12}" + "".join(f"{n + ' ' + sd:>14}" for n in names for sd in ("send", "recv")))
    for ph in PHASES + ("total",):
        print(f"  {ph:<12}" + "".join(f"{s[d][sd][ph]:>14}" for d, sd in cols)
              + ("   the budgeted count" if ph == "total" else ""))
    for n, ops in EXIT_RACE.get(r["protocol"], {}).items():
        print(f"  ({names[n]} send: without {', '.join(ops)}, which the run's end may cut short; see the average)")
    print(f"  averages over the {r['rounds']} extra rounds of a {2 * r['rounds']}-round run:")
    for ph in ("total",) + TIMED:
        note = "" if ph == "total" else "   timing dependent"
        print(f"  {ph:<12}" + "".join(f"{avg[d][sd][ph]:>14.1f}" for d, sd in cols) + note)
    for p in r["unequal_runs"]:
        print(f"  NOT DETERMINISTIC: the last message of three runs: {p}")
    for p in r["indivisible"]:
        print(f"  note: not every message of a run cost the same: {p}")
    if r["idle_per_pass"] is not None:
        print(f"  the NIC's loop: {r['idle_per_pass']:.0f} instructions per pass outside work items (both NICs, "
              f"{r['passes']['2n']:,} passes of the 2N run; timing dependent)")
    w = wall_us(r["output"])
    if w is not None:
        print(f"  wall clock: {w:.1f} us per round trip (this machine, TCG, the plugin loaded)")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=default_build("ulnic", ["build"]))
    ap.add_argument("--out", default=".", help="where cost.json goes (default: here)")
    ap.add_argument("--rounds", type=int, default=50, help="N: runs of N and 2N rounds (default 50)")
    ap.add_argument("--protocols", default=",".join(PROTOCOLS))
    ap.add_argument("--bytes", type=int, default=BYTES,
                    help=f"VMMC and VIPL message size, 8 .. {MAX_BYTES} (default {BYTES}; AM: always AM_Request4)")
    ap.add_argument("--firmware", metavar="ELF",
                    help="boot the NICs with this firmware instead of the build's (an A/B of two firmware builds)")
    a = ap.parse_args()
    if not 8 <= a.bytes <= MAX_BYTES:
        ap.error(f"--bytes: 8 .. {MAX_BYTES}")
    protos = protocols_of(ap, a.protocols, PROTOCOLS)
    build = check_build(a.build, ["ulnic", "vmmc_tight", "vipl_tight", "am_tight"], PROG)
    out = os.path.abspath(a.out)
    os.makedirs(out, exist_ok=True)
    ulnic, bin_dir = os.path.join(build, "bin", "ulnic"), os.path.join(build, "bin")

    def run(cluster):
        env = cluster.env(0)
        results, rc = [], 0
        for p in protos:
            try:
                r = measure(ulnic, bin_dir, env, p, a.rounds, a.bytes)
            except RuntimeError as e:
                print(f"{PROG}: {p}: {e}", file=sys.stderr)
                rc = 1
                continue
            print_table(r)
            results.append(r)
            if r["unequal_runs"]:
                rc = 1
        write_json({"benchmark": "cost", "results": results}, os.path.join(out, "cost.json"))
        return rc

    extra = ["--firmware", os.path.abspath(a.firmware)] if a.firmware else []
    return on_private_cluster(build, CLUSTER, 64, ["--cost"] + extra, PROG, run)


if __name__ == "__main__":
    sys.exit(main())
