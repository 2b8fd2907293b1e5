#!/usr/bin/env python3
"""How the NICs' QEMUs and the processes share the CPUs during a run: a scheduler trace, summed up.

On a 2-CPU machine two emulated NICs and their processes are four busy threads on two CPUs, and a stream's
rate can be set by how they take turns rather than by what any of them does (docs/performance.md: an FM
stream's receiving NIC and its process took turns on one CPU 14,000 times a second). This records the
kernel's context switches and wake-ups for a few seconds while something runs, and prints per thread its
share of a CPU, how often it was switched in, how long it ran each time and on which CPU; and, for each
NIC (a QEMU vCPU thread, "CPU 0/TCG") that woke a process, how often the woken process then ran on the
NIC's own CPU -- where it takes the NIC's turn.

  sched_turns.py record --seconds 2 --out FILE.data    (root: perf and the kernel's sched tracepoints)
  sched_turns.py report FILE.data [--top 8] [--json OUT]

Start the run first, then `record` during it. `report` reads `perf sched timehist -w` of the recording.
Needs perf (Debian's linux-perf; toolchain/install-deps.sh does not install it: this tool is run by hand, and
its test reads a canned trace) and tracefs (mounted at /sys/kernel/tracing if it is not).
"""
import argparse
import collections
import json
import os
import re
import subprocess
import sys

# "   27699.701964 [0001]  CPU 0/TCG[16706/16703]    0.015      0.000      0.040"
RUN = re.compile(r"^\s*([\d.]+)\s+\[(\d+)\]\s+(\S.*?)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s*$")
# "   27699.701960 [0001]  CPU 0/TCG[16706/16703]              awakened: fm_bench[16873]"
WAKE = re.compile(r"^\s*([\d.]+)\s+\[(\d+)\]\s+(\S.*?)\s+awakened: (\S.*?)\s*$")


def is_nic(task):
    return "/TCG[" in task


def summarize(lines):
    """Per-thread turns and the NICs' wake-ups from `perf sched timehist -w` lines."""
    first = last = None
    turns = collections.Counter()
    by_cpu = collections.defaultdict(collections.Counter)  # thread -> CPU -> ms run there
    woken = {}  # wakee -> (waker, the waker's CPU), until the wakee's next turn
    wakes = collections.defaultdict(lambda: [0, 0])  # (NIC, wakee) -> [on the NIC's CPU, elsewhere]
    for line in lines:
        m = WAKE.match(line)
        if m:
            _, cpu, waker, wakee = m.groups()
            if is_nic(waker) and not is_nic(wakee):
                woken[wakee] = (waker, int(cpu))
            continue
        m = RUN.match(line)
        if not m:
            continue
        t, cpu, task, _wait, _delay, run = m.groups()
        t, cpu, run = float(t), int(cpu), float(run)
        first = t - run / 1000 if first is None else first
        last = t
        turns[task] += 1
        by_cpu[task][cpu] += run
        if task in woken:
            waker, waker_cpu = woken.pop(task)
            wakes[(waker, task)][0 if cpu == waker_cpu else 1] += 1
    span_s = (last - first) if first is not None and last > first else 0.0
    threads = []
    run_ms = {task: sum(cpus.values()) for task, cpus in by_cpu.items()}
    for task, ms in sorted(run_ms.items(), key=lambda kv: -kv[1]):
        if task.startswith("<idle>"):
            continue
        threads.append({
            "thread": task,
            "cpu_share": ms / 1000 / span_s if span_s else 0.0,
            "turns_per_s": turns[task] / span_s if span_s else 0.0,
            "mean_turn_us": ms * 1000 / turns[task],
            "share_by_cpu": {str(c): v / 1000 / span_s for c, v in sorted(by_cpu[task].items())} if span_s else {},
        })
    woke = [{"nic": nic, "woken": wakee, "on_the_nics_cpu": same, "elsewhere": other}
            for (nic, wakee), (same, other) in sorted(wakes.items(), key=lambda kv: -sum(kv[1]))]
    return {"span_s": span_s, "threads": threads, "nic_wakeups": woke}


def print_report(r, top):
    print(f"== threads over {r['span_s']:.2f} s (share of a CPU; turns: times switched in)")
    print(f"{'thread':<34} {'share':>6} {'turns/s':>9} {'us/turn':>8}  by CPU")
    for t in r["threads"][:top]:
        cpus = " ".join(f"{c}:{v:.2f}" for c, v in t["share_by_cpu"].items())
        print(f"{t['thread'][:34]:<34} {t['cpu_share']:6.2f} {t['turns_per_s']:9,.0f} {t['mean_turn_us']:8.1f}  {cpus}")
    if r["nic_wakeups"]:
        print("== processes a NIC woke: where they ran next")
        for w in r["nic_wakeups"][:top]:
            n = w["on_the_nics_cpu"] + w["elsewhere"]
            print(f"{w['nic'][:30]:<30} woke {w['woken'][:24]:<24} {n:8,} times, "
                  f"{w['on_the_nics_cpu'] / n:6.1%} on the NIC's CPU")


def record(seconds, out):
    if not os.path.isdir("/sys/kernel/tracing/events/sched"):
        subprocess.run(["mount", "-t", "tracefs", "nodev", "/sys/kernel/tracing"], check=False)
    cmd = ["perf", "record", "-q", "-e", "sched:sched_switch", "-e", "sched:sched_wakeup", "-a", "-o", out,
           "--", "sleep", str(seconds)]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"sched_turns: {' '.join(cmd)} failed ({p.returncode}): {p.stderr.strip()}")
    print(f"recorded {seconds} s into {out}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    rec = sub.add_parser("record", help="record the scheduler's switches and wake-ups")
    rec.add_argument("--seconds", type=float, default=2.0)
    rec.add_argument("--out", required=True)
    rep = sub.add_parser("report", help="sum up a recording")
    rep.add_argument("data")
    rep.add_argument("--top", type=int, default=8)
    rep.add_argument("--json")
    a = ap.parse_args()
    if a.cmd == "record":
        record(a.seconds, a.out)
        return
    p = subprocess.run(["perf", "sched", "timehist", "-w", "-i", a.data], capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"sched_turns: perf sched timehist failed ({p.returncode}): {p.stderr.strip()[-300:]}")
    r = summarize(p.stdout.splitlines())
    if not r["threads"]:
        sys.exit("sched_turns: no context switches in " + a.data)
    print_report(r, a.top)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(r, f, indent=1)


if __name__ == "__main__":
    main()
