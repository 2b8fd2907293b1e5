#!/usr/bin/env python3
"""Benchmark driver: the LogP parameters of AM-2 and of raw VIPL, and what AM costs over raw VIPL.

Builds nothing. Runs tests/bench/am_logp (two processes, `ping` and `pong`,
which exchange their endpoint names through a private directory) and
tests/bench/vipl_logp:

  * AM over UDP (ULNIC_AM_TRANSPORT=udp; no emulator): LogP (RTT/2, o_s,
    o_r, g, L; Culler et al. 1996) of AM_Request0 .. 4 with their replies,
    ping latency and messages/s against the network depth (1 .. 16), medium
    (AM_RequestI) and bulk (AM_RequestXfer) bandwidth; and a latency sweep
    over ULNIC_AM_UDP_DROP = 0, 0.01, 0.05, 0.1, 0.3 (RTT/2 of AM_Request0);
  * on a private two-node cluster (`ulnic cluster up -n 2 --slot-size 64` in
    its own ULNIC_RUNTIME_DIR, as vipl_bench.py): raw VIPL (vipl_logp: one
    VI pair, 16 B sends), then AM over VIPL and native AM (am_logp with
    ULNIC_AM_TRANSPORT=vipl / native, ranks on nodes 0 and 1). A transport
    whose AM_Init fails (am_logp exits 3) is reported as not available and
    skipped.

It prints a table of the LogP parameters of every system (AM: AM_Request4,
16 B of arguments, against raw VIPL's 16 B messages), the mapping cost Δ as in
Begel, Buonadonna, Culler and Gay's Table 2 (AM over VIPL − raw VIPL; native
AM − raw VIPL; for each of min, median, max), the depth, bandwidth and drop
tables, beside the floors of the UDP run (host_floors: a shared-memory
ping-pong and memcpy), and writes OUT/am_logp.json and OUT/logp.png,
OUT/depth.png, OUT/bandwidth.png and OUT/drop.png (matplotlib; else drawn by
/usr/bin/python3). Both NIC sides poll with the back-off vipl_bench uses
(--nic-poll: 50 looks, then 20 us naps: two spinning processes starve the
QEMU vCPUs on a 2-core machine); the UDP runs spin, yielding after 20 looks.

A quick run (--quick) takes about a minute without the cluster; a default run
a few minutes. Programs, not tests: nothing is asserted about speed; the exit
status is nonzero if a run failed or its data did not verify.

  tests/bench/am_logp.py [--build DIR] [--out DIR] [--quick] [--transports udp,vipl,native] [--drops LIST]
  tests/bench/am_logp.py --plot-only OUT/am_logp.json [--out DIR]   (redraw the PNGs)
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time

from bench_common import (Cluster, check_build, default_build, draw, finish, header, log_y, out_dir, output_of,
                          pyplot, remove_runtime, runtime_line, runtime_parent, save, size_axis, size_name, start, stop,
                          write_json)

PROG = "am_logp.py"
CLUSTER = "amlogp"
UNAVAILABLE = 3  # am_logp's exit status when AM_Init fails
PARAMS = (("rtt_half_us", "RTT/2"), ("os_us", "o_s"), ("or_us", "o_r"), ("g_us", "g"), ("L_us", "L"))
DELTA_ARGS = 4   # AM_Request4 (16 B of arguments) against raw VIPL 16 B messages
SYSTEMS = (("udp", "AM over UDP"), ("vipl", "AM over VIPL"), ("native", "native AM"), ("raw_vipl", "raw VIPL"))
COLORS = {"udp": "tab:green", "vipl": "tab:blue", "native": "tab:red", "raw_vipl": "tab:gray"}


# ------------------------------------------------------------------- runs

def run_pair(ping_cmd, pong_cmd, env0, env1, out_json, timeout):
    """pong_cmd (env1) and ping_cmd (env0), the ping side's output streamed -> (ping exit, pong exit, pong output,
    the ping side's JSON or None)."""
    if os.path.exists(out_json):
        os.remove(out_json)
    pong = start(pong_cmd, env1)
    ping = None
    try:
        print("$ " + " ".join(ping_cmd), flush=True)
        ping = start(ping_cmd, env0)
        timer = threading.Timer(timeout, ping.kill)  # a ping side that hangs is killed (exit -9)
        timer.start()
        for line in ping.stdout:
            sys.stdout.write(line)
            sys.stdout.flush()
        rc = ping.wait()
        timer.cancel()
        pout = output_of(pong, 15 if rc == 0 else 1)
        if rc != UNAVAILABLE:
            sys.stdout.write(pout)
        result = None
        if os.path.exists(out_json):
            with open(out_json) as f:
                result = json.load(f)
        return rc, pong.returncode, pout, result
    finally:
        stop(ping)
        stop(pong)


def poll_args(args):
    """The --poll-* options (and their values) among a ping side's arguments: the pong side gets them too."""
    return [x for i, a in enumerate(args) if a.startswith("--poll") for x in (a, args[i + 1])]


class Runner:
    def __init__(self, build, work, timeout, quick):
        self.build, self.work, self.timeout, self.quick = build, work, timeout, quick
        self.failed = []

    def am(self, name, transport, env0, env1, args):
        """am_logp ping (env0) and pong (env1) with ULNIC_AM_TRANSPORT=transport -> its JSON, or
        {"unavailable": why} / {"failed": why}."""
        bench = os.path.join(self.build, "bin", "am_logp")
        rdv = tempfile.mkdtemp(prefix=f"{name}-", dir=self.work)
        env0, env1 = dict(env0, ULNIC_AM_TRANSPORT=transport), dict(env1, ULNIC_AM_TRANSPORT=transport)
        out_json = os.path.join(self.work, f"{name}.json")
        rc, prc, pout, res = run_pair(
            [bench, "ping", "--rendezvous", rdv, "--json", out_json, *(["--quick"] if self.quick else []), *args],
            [bench, "pong", "--rendezvous", rdv, "--idle-timeout", str(self.timeout), *poll_args(args)], env0, env1,
            out_json,
            self.timeout)
        if rc == UNAVAILABLE:
            print(f"==> AM transport '{transport}' not available (AM_Init failed): skipped")
            return {"unavailable": f"AM_Init failed for transport {transport}"}
        return self.check(name, rc, prc, pout, res)

    def vipl(self, cluster, args):
        bench = os.path.join(self.build, "bin", "vipl_logp")
        out_json = os.path.join(self.work, "raw_vipl.json")
        rc, prc, pout, res = run_pair(
            [bench, "ping", "--peer", "1", "--json", out_json, *(["--quick"] if self.quick else []), *args],
            [bench, "pong", "--peer", "0", "--idle-timeout", str(self.timeout), *poll_args(args)], cluster.env(0),
            cluster.env(1), out_json, self.timeout)
        return self.check("raw_vipl", rc, prc, pout, res)

    def check(self, name, rc, prc, pout, res):
        if rc != 0 or prc != 0 or res is None or not res.get("verified"):
            self.failed.append(name)
            why = f"ping exit {rc}, pong exit {prc}" + ("" if res else ", no JSON")
            print(f"{PROG}: {name}: {why}", file=sys.stderr)
            return {**(res or {}), "failed": why, "pong_output": pout}
        return {**res, "pong_output": pout}


# ---------------------------------------------------------------- tables

def available(run):
    return run and "unavailable" not in run and "failed" not in run


def logp_of(run):
    """The LogP figures of a run: raw VIPL's, or AM's for DELTA_ARGS arguments."""
    if not available(run):
        return None
    if "logp" in run:
        return run["logp"]
    return next((r for r in run.get("short", []) if r["args"] == DELTA_ARGS and "os_us" in r), None)


def cell(s, f="{:.2f}"):
    return f"{f.format(s['median'])} [{f.format(s['min'])}..{f.format(s['max'])}]" if s else "-"


def why_missing(run):
    if not run:
        return "not run"
    return "not available" if "unavailable" in run else "failed" if "failed" in run else "-"


def delta(a, b):
    return {k: a[k] - b[k] for k in ("min", "median", "max")}


def deltas(runs):
    """{"vipl": {param: {min, median, max}}, "native": ...}: AM over the transport minus raw VIPL."""
    raw = logp_of(runs.get("raw_vipl"))
    out = {}
    for t in ("vipl", "native"):
        am = logp_of(runs.get(t))
        out[t] = {k: delta(am[k], raw[k]) for k, _ in PARAMS} if am and raw else None
    return out


def summary(data):
    runs = data["runs"]
    lines = []
    fl = runs.get("udp", {}).get("floors", {})
    pp = fl.get("pingpong", {}).get("oneway_us")
    floor = f"; floor: shared-memory ping-pong one-way median {pp['median']:.3f} us (same run)" if pp else ""
    lines.append(f"== LogP, us: median [min..max]; AM: AM_Request{DELTA_ARGS} with its reply, raw VIPL: "
                 f"{runs.get('raw_vipl', {}).get('params', {}).get('size', 16)} B send/echo{floor}")
    lines.append(f"{'':<8}" + "".join(f"{label:>28}" for _, label in SYSTEMS))
    figs = {k: logp_of(runs.get(k)) for k, _ in SYSTEMS}
    for key, name in PARAMS:
        lines.append(f"{name:<8}" + "".join(f"{cell(figs[k][key]) if figs[k] else why_missing(runs.get(k)):>28}"
                                            for k, _ in SYSTEMS))
    for k, label in SYSTEMS[:3]:
        if available(runs.get(k)):
            rtts = "  ".join(f"Request{r['args']} {r['rtt_half_us']['median']:.2f}" for r in runs[k]["short"])
            lines.append(f"  {label}: RTT/2 median by arguments, us: {rtts}")
    lines.append("")
    lines.append("== Δ: the mapping cost over raw VIPL (Begel et al., Table 2), us: median (min, max) of the "
                 "difference")
    d = data.get("delta", {})
    lines.append(f"{'':<8}{'AM over VIPL - raw VIPL':>32}{'native AM - raw VIPL':>32}")
    for key, name in PARAMS:
        row = f"{name:<8}"
        for t in ("vipl", "native"):
            x = (d.get(t) or {}).get(key)
            if x:
                row += f"{x['median']:+.2f} ({x['min']:+.2f}, {x['max']:+.2f})".rjust(32)
            else:
                raw = runs.get("raw_vipl")
                row += f"{why_missing(runs.get(t) if available(raw) else raw):>32}"
        lines.append(row)
    lines.append("")
    for k, label in SYSTEMS[:3]:
        run = runs.get(k)
        if available(run) and run.get("depth"):
            lines.append(f"== {label}: AM_Request0 against the network depth: RTT/2 us, msgs/s (median [min..max])")
            for r in run["depth"]:
                lines.append(f"  depth {r['depth']:<4}{cell(r['oneway_us']):>26}{cell(r['msgs_per_s'], '{:.0f}'):>30}")
            lines.append("")
    mc = {x["size"]: x for x in fl.get("memcpy", [])}
    for k, label in SYSTEMS[:3]:
        run = runs.get(k)
        if not available(run):
            continue
        for sec, what in (("medium", "AM_RequestI"), ("bulk", "AM_RequestXfer")):
            if run.get(sec):
                lines.append(f"== {label}: {what} MB/s (1e6 B/s per burst), median [min..max]; memcpy floor median")
                for r in run[sec]:
                    b = {q: v / 1e6 for q, v in r["bytes_per_s"].items()}
                    m = f"{mc[r['size']]['bytes_per_s']['median'] / 1e6:>10.0f}" if r["size"] in mc else f"{'-':>10}"
                    lines.append(f"  {size_name(r['size']):<9}{cell(b, '{:.1f}'):>28}{m}"
                                 + ("" if r["verified"] else "  NOT VERIFIED"))
                lines.append("")
    sweep = data.get("drop_sweep", [])
    if sweep:
        lines.append("== AM over UDP, AM_Request0 RTT/2 against ULNIC_AM_UDP_DROP (retransmission first after 20 ms)")
        lines.append(f"  {'drop':<8}{'median us':>12}{'max us':>12}{'n':>8}")
        for r in sweep:
            s = r.get("rtt_half_us")
            lines.append(f"  {r['drop']:<8g}" + (f"{s['median']:>12.2f}{s['max']:>12.1f}{s['n']:>8}" if s
                                                  else f"{'failed':>12}"))
        lines.append("")
    return "\n".join(lines)


# ----------------------------------------------------------------- plots

def plot(data, out):
    plt = pyplot()
    runs = data["runs"]
    written = []
    sub = f"{data.get('host', '')}; load average at start {' '.join(data.get('loadavg_at_start', []))}"

    figs = [(k, label, logp_of(runs.get(k))) for k, label in SYSTEMS]
    figs = [f for f in figs if f[2]]
    if figs:
        fig, ax = plt.subplots(figsize=(9, 5.4))
        w = 0.8 / len(figs)
        for n, (k, label, p) in enumerate(figs):
            for i, (key, _) in enumerate(PARAMS):
                x, st = i + (n - (len(figs) - 1) / 2) * w, p[key]
                if st["median"] <= 0:  # L can come out negative (UDP: the send call delivers)
                    ax.text(x, 0.02, f"{st['median']:.1f}", ha="center", va="bottom", fontsize=7, color=COLORS[k])
                    continue
                lo, hi = st["median"] - max(st["min"], 0.01), max(st["max"] - st["median"], 0)
                ax.bar(x, st["median"], w, yerr=[[max(lo, 0)], [hi]], capsize=3, color=COLORS[k],
                       label=label if i == 0 else None)
                ax.text(x, st["median"], f"{st['median']:.2g}", ha="center", va="bottom", fontsize=7)
        ax.set_xticks(range(len(PARAMS)))
        ax.set_xticklabels([name for _, name in PARAMS])
        log_y(ax)
        ax.set_ylim(bottom=0.01)
        ax.set_ylabel("us (log): median, bars min..max (L = RTT/2 - o_s - o_r)")
        ax.set_title(f"LogP: AM_Request{DELTA_ARGS} with its reply, raw VIPL 16 B send/echo\n{sub}", fontsize=10)
        ax.legend(fontsize=8)
        ax.grid(True, axis="y", alpha=0.3)
        save(fig, out, "logp.png", written)

    depth_runs = [(k, label, runs[k]["depth"]) for k, label in SYSTEMS[:3] if available(runs.get(k))
                  and runs[k].get("depth")]
    if depth_runs:
        fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 4.6))
        for k, label, rows in depth_runs:
            xs = [r["depth"] for r in rows]
            for ax, key in ((a1, "oneway_us"), (a2, "msgs_per_s")):
                med = [r[key]["median"] for r in rows]
                ax.errorbar(xs, med, yerr=[[m - r[key]["min"] for m, r in zip(med, rows)],
                                           [r[key]["max"] - m for m, r in zip(med, rows)]],
                            color=COLORS[k], marker="o", capsize=3, label=label)
        for ax, yl in ((a1, "ping latency RTT/2 (us, log)"), (a2, "messages/s (log)")):
            ax.set_xscale("log", base=2)
            ax.set_xticks(xs)
            ax.set_xticklabels([str(x) for x in xs])
            ax.set_xlabel("network depth (AM_SetExpectedResources)")
            log_y(ax)
            ax.set_ylabel(yl)
            ax.grid(True, alpha=0.3)
            ax.legend(fontsize=8)
        fig.suptitle(f"AM_Request0 against the network depth: median, bars min..max\n{sub}", fontsize=10)
        save(fig, out, "depth.png", written)

    bw = [(k, label, sec, runs[k][sec]) for k, label in SYSTEMS[:3] if available(runs.get(k))
          for sec in ("medium", "bulk") if runs[k].get(sec)]
    if bw:
        fig, ax = plt.subplots(figsize=(9, 5.4))
        sizes = set()
        for k, label, sec, rows in bw:
            xs = [r["size"] for r in rows]
            sizes.update(xs)
            med = [r["bytes_per_s"]["median"] / 1e6 for r in rows]
            ax.errorbar(xs, med, yerr=[[m - r["bytes_per_s"]["min"] / 1e6 for m, r in zip(med, rows)],
                                       [r["bytes_per_s"]["max"] / 1e6 - m for m, r in zip(med, rows)]],
                        color=COLORS[k], marker="o" if sec == "bulk" else "s", ls="-" if sec == "bulk" else "--",
                        capsize=3, label=f"{label}: {'AM_RequestXfer' if sec == 'bulk' else 'AM_RequestI'}")
        mc = sorted((r for r in runs.get("udp", {}).get("floors", {}).get("memcpy", []) if r["size"] in sizes),
                    key=lambda r: r["size"])
        if mc:
            ax.plot([r["size"] for r in mc], [r["bytes_per_s"]["median"] / 1e6 for r in mc], color="gray",
                    marker=".", ls=":", label="floor: host memcpy, median")
        size_axis(ax, sizes, "message size (bytes, log scale)", 45)
        log_y(ax, grid_alpha=0.12)
        ax.set_ylabel("MB/s (1e6 B/s per burst, log): median, bars min..max")
        ax.set_title(f"AM medium and bulk bandwidth (bursts of requests, each answered)\n{sub}", fontsize=10)
        ax.legend(fontsize=8)
        save(fig, out, "bandwidth.png", written)

    sweep = [r for r in data.get("drop_sweep", []) if r.get("rtt_half_us")]
    if sweep:
        fig, ax = plt.subplots(figsize=(8, 5))
        xs = [r["drop"] for r in sweep]
        ax.plot(xs, [r["rtt_half_us"]["median"] for r in sweep], marker="o", label="median")
        ax.plot(xs, [r["rtt_half_us"]["max"] for r in sweep], marker="^", ls="--", label="max")
        ax.set_xlabel("ULNIC_AM_UDP_DROP (fraction of datagrams dropped at each sender)")
        log_y(ax)
        ax.set_ylabel("AM_Request0 RTT/2 (us, log)")
        ax.set_title(f"AM over UDP: latency against datagram loss\n{sub}", fontsize=10)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
        save(fig, out, "drop.png", written)
    return written


# ------------------------------------------------------------------ main

def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=default_build("am_logp", ("build", "build-lead", "build-bench")),
                    help="build directory (bin/ulnic, bin/am_logp, bin/vipl_logp)")
    ap.add_argument("--out", default="am_logp_out", help="output directory for JSON and PNGs")
    ap.add_argument("--quick", action="store_true", help="a short run (fewer samples and sizes)")
    ap.add_argument("--transports", default="udp,vipl,native",
                    help="which to run: udp (with the drop sweep), vipl (with raw VIPL), native")
    ap.add_argument("--drops", default="0,0.01,0.05,0.1,0.3", help="ULNIC_AM_UDP_DROP values of the sweep")
    ap.add_argument("--nic-poll", default="50,20", metavar="LOOKS,US",
                    help="the NIC runs' poll back-off: looks, then naps of US microseconds (0: sched_yield)")
    ap.add_argument("--slot-size", type=int, default=64, help="slot size in MiB for `ulnic cluster up`")
    ap.add_argument("--cluster-arg", action="append", default=[], metavar="ARG",
                    help="one more argument for `ulnic cluster up` (repeatable)")
    ap.add_argument("--timeout", type=int, default=900, help="give up on a run after this many seconds")
    ap.add_argument("--plot-only", metavar="JSON", help="redraw the PNGs from an am_logp.json and exit")
    args = ap.parse_args()

    out = out_dir(args, plot, __file__)
    transports = [t for t in args.transports.split(",") if t]
    nic = "vipl" in transports or "native" in transports
    build = check_build(args.build, ("am_logp", "vipl_logp") + (("ulnic",) if nic else ()), PROG)
    drops = [float(x) for x in args.drops.split(",") if x.strip()]
    looks, nap = args.nic_poll.split(",")
    nic_poll = ["--poll-yield", looks, "--poll-sleep-us", nap]

    t0 = time.time()
    work = tempfile.mkdtemp(prefix="ulnic-amlogp-work-", dir="/tmp")
    r = Runner(build, work, args.timeout, args.quick)
    data = {**header(PROG), "params": {"quick": args.quick, "transports": transports, "drops": drops,
                                        "nic_poll": nic_poll, "slot_size_mib": args.slot_size,
                                        "cluster_args": args.cluster_arg, "delta_args": DELTA_ARGS},
            "runs": {}, "drop_sweep": []}
    runs = data["runs"]
    try:
        if "udp" in transports:
            print("######## AM over UDP", flush=True)
            runs["udp"] = r.am("udp", "udp", dict(os.environ), dict(os.environ), [])
            iters = "200" if args.quick else "1000"
            for k, p in enumerate(drops):
                print(f"\n######## AM over UDP, ULNIC_AM_UDP_DROP={p:g}", flush=True)
                env = dict(os.environ, ULNIC_AM_UDP_DROP=f"{p:g}", ULNIC_AM_UDP_SEED=str(k + 1))
                res = r.am(f"udp_drop{p:g}", "udp", env, env,
                           ["--sections", "rtt", "--args", "0", "--no-floors", "--iters", iters])
                row = next(iter(res.get("short", [])), {})
                data["drop_sweep"].append({"drop": p, "rtt_half_us": row.get("rtt_half_us"),
                                           "verified": bool(res.get("verified")), "failed": res.get("failed")})
        if nic:
            runtime = tempfile.mkdtemp(prefix=f"ulnic-{CLUSTER}-", dir=runtime_parent())
            cluster = Cluster(build, runtime, CLUSTER, args.slot_size, args.cluster_arg, prog=PROG)
            try:
                print(f"\n######## ulnic cluster up -n 2 -c {CLUSTER} --slot-size {args.slot_size} "
                      f"{' '.join(args.cluster_arg)} (runtime {runtime})", flush=True)
                cluster.up()
                if "vipl" in transports or "native" in transports:
                    print("\n######## raw VIPL (vipl_logp), nodes 0 and 1", flush=True)
                    runs["raw_vipl"] = r.vipl(cluster, nic_poll)
                for t in ("vipl", "native"):
                    if t in transports:
                        print(f"\n######## AM over {t}, nodes 0 and 1", flush=True)
                        runs[t] = r.am(t, t, cluster.env(0), cluster.env(1), nic_poll)
                status = cluster.status()
                if status:
                    data["cluster_status_at_end"] = status
            finally:
                cluster.down()
                left = remove_runtime(runtime)
                if left:
                    print(f"{PROG}: note: cluster down left {left} in the runtime directory (removed)",
                          file=sys.stderr)
    except (RuntimeError, subprocess.TimeoutExpired, OSError, ValueError) as e:
        print(f"{PROG}: {e}", file=sys.stderr)
        r.failed.append(str(e))
    finally:
        shutil.rmtree(work, ignore_errors=True)

    data["delta"] = deltas(runs)
    finish(data, t0)
    print()
    print(summary(data))
    ok = not r.failed
    print(f"data verified (reply arguments, medium payloads, last bulk transfers, every raw VIPL echo) in every run "
          f"that ran: {'yes' if ok else 'NO: ' + ', '.join(r.failed)}")
    print(runtime_line(data))
    json_path = os.path.join(out, "am_logp.json")
    write_json(data, json_path)
    if runs and not draw(json_path, out, plot, __file__):
        ok = False
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
