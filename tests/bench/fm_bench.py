#!/usr/bin/env python3
"""Benchmark driver: Fast Messages 2.x, the MP layer over it (layering efficiency) and the GM operations.

Builds nothing. With a private ULNIC_RUNTIME_DIR it brings up a two-node
cluster (`ulnic cluster up -n 2 --slot-size 16`) and runs tests/bench/fm_bench
as two-rank FM jobs (rank 0 on node 0 measures, rank 1 on node 1 serves; each
job gets a fresh ULNIC_FM_DIR). A process uses one layer (MP and GM each call
FM_initialize), so every measurement is a job of its own:

  * floors: `fm_bench floors` (host only: shared-memory ping-pong, memcpy at
    the bandwidth sizes), once, with the cluster up and idle;
  * rounds (30; --quick 4) of an `fm` job and an `mp` job, back to back (the order swapped
    every round, so drift and load hit both alike): one-way bandwidth,
    16 B .. 1 MiB, 4256 B (one FM packet) and 4232 B (MP's largest message
    in one packet, with its 24-byte envelope), end to end (rank 1 acknowledges
    each repetition of M messages; M is the same for both layers), and
    ping-pong latency (RTT/2) up to 64 KiB. FM: FM_begin_message /
    FM_send_piece / FM_end_message, the handler FM_receive's the message;
    MP: a window of 16 MP_Irecv posted at rank 1, windows of 16 MP_Isend +
    MP_Waitall at rank 0; MP_Send / MP_Recv ping-pong;
  * a `gm` job: gm_read, gm_write (one by one), gm_get and gm_put (K = 32
    issued, then gm_sync) and gm_store (K issued, then gm_all_store_sync),
    per operation, 8 B (scalar calls), 64 B, 4 KiB, 64 KiB.

The samples of every round are pooled per layer and size (min / median /
max); MP as a percentage of FM (the FM 2.x paper's Figure 6, "layering
efficiency", claimed >= 90%) is from the pooled medians, with the spread of
the per-round ratios (each round's MP median over the same round's FM median).
It prints the tables beside the floors, writes OUT/fm_bench.json (every row,
the jobs' counters and exit codes, the load average) and OUT/bandwidth.png,
OUT/efficiency.png, OUT/latency.png and OUT/gm_ops.png (matplotlib; else drawn
by /usr/bin/python3). A job that fails or hangs (rank 0's watchdog: 45 s
without progress) is reported with its output and the run goes on; a layer
that fails twice is not run again.

A default run takes about 6 minutes on a 2-core machine; --quick (fewer
sizes, samples and rounds) about 20 seconds.

  tests/bench/fm_bench.py [--build DIR] [--out DIR] [--quick] [--rounds N] [--modes fm,mp,gm]
                          [--bw-sizes LIST] [--lat-sizes LIST] [--gm-sizes LIST] [--eager-limit B]
  tests/bench/fm_bench.py --plot-only OUT/fm_bench.json [--out DIR]   (redraw the PNGs)
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from am_logp import run_pair
from bench_common import (Cluster, check_build, default_build, draw, err_bars, finish, header, log_y,
                          memcpy_floor_line, mode_series, of_mode, out_dir, pyplot, remove_runtime, runtime_line,
                          runtime_parent, save,
                          size_axis, size_name, subtitle, write_json)

PROG = "fm_bench.py"
CLUSTER = "fmbench"
LAYERS = (("fm", "tab:blue", "o", "FM 2.x (begin/send_piece/end, handler FM_receive)"),
          ("mp", "tab:red", "s", "MP over FM (Isend window / pre-posted Irecv)"))
GM_OPS = ("read", "write", "get", "put", "store")
QUICK_SIZES = {"bw": "16,256,4K,4232,4256,64K,1M", "lat": "16,4K,64K", "gm": "8,4K"}


# ------------------------------------------------------------------- jobs

class Tee:
    """Within `with`: what is printed to stdout is also kept (text())."""

    def __enter__(self):
        self.real, self.parts = sys.stdout, []
        sys.stdout = self
        return self

    def __exit__(self, *exc):
        sys.stdout = self.real

    def write(self, s):
        self.parts.append(s)
        return self.real.write(s)

    def flush(self):
        self.real.flush()

    def text(self):
        return "".join(self.parts)


class Jobs:
    """fm_bench jobs on the two nodes of a cluster; failures are kept, not raised."""

    def __init__(self, build, cluster, work, timeout, env_extra):
        self.bench = os.path.join(build, "bin", "fm_bench")
        self.cluster, self.work, self.timeout, self.env_extra = cluster, work, timeout, env_extra
        self.failures, self.jobs, self.count = [], [], 0

    def env(self, rank, job_dir):
        return dict(self.cluster.env(rank), ULNIC_FM_RANK=str(rank), ULNIC_FM_NPROCS="2", ULNIC_FM_DIR=job_dir,
                    **self.env_extra)

    def run(self, mode, args, label):
        """One job -> rank 0's JSON, or None if it failed; its exit codes and both ranks' counters go to self.jobs."""
        self.count += 1
        job_dir = os.path.join(self.work, f"job{self.count}")
        os.mkdir(job_dir)
        rendezvous = os.path.join(job_dir, "fm")
        os.mkdir(rendezvous)
        r0, r1 = os.path.join(job_dir, "rank0.json"), os.path.join(job_dir, "rank1.json")
        print(f"\n######## {label}", flush=True)
        with Tee() as rank0_out:
            rc, rc1, out1, res = run_pair([self.bench, mode, "--json", r0, *args],
                                          [self.bench, mode, "--json", r1, "--idle-timeout", str(self.timeout)],
                                          self.env(0, rendezvous), self.env(1, rendezvous), r0, self.timeout)
        rank1 = None
        if os.path.exists(r1):
            with open(r1) as f:
                rank1 = json.load(f)
        job = {"label": label, "mode": mode, "rank0_exit": rc, "rank1_exit": rc1,
               "verified": bool(res and res.get("verified"))}
        for key in ("fm_stats", "mp_stats", "gm_stats"):
            if res and key in res:
                job[key] = res[key]
        if rank1:
            job["rank1"] = {k: v for k, v in rank1.items() if k.endswith("_stats")}
        self.jobs.append(job)
        if rc != 0 or rc1 != 0 or not job["verified"]:
            why = f"rank 0 exit {rc}, rank 1 exit {rc1}" + ("" if res else ", no JSON") + \
                ("" if job["verified"] else ", not verified")
            print(f"{PROG}: {label}: {why}", file=sys.stderr)
            self.failures.append({"label": label, "mode": mode, "why": why, "rank0_output": rank0_out.text()[-3000:],
                                  "rank1_output": out1[-3000:]})
            return None
        return res

    def failed(self, mode):
        return sum(1 for f in self.failures if f["mode"] == mode)


# ----------------------------------------------------------------- pooling

def stats(samples):
    s = sorted(samples)
    return {"min": s[0], "median": statistics.median(s), "max": s[-1], "mean": statistics.fmean(s), "n": len(s)}


def pool(results, section, key, ident=("mode", "size")):
    """Rows of one section ("bandwidth", "latency", "gm") pooled over jobs [(mode, result)]: {ident: row} with the
    samples' stats under `key` and each job's median under "round_medians"."""
    acc = {}
    for mode, res in results:
        for r in res.get(section, []):
            r = {"mode": mode, **r}
            a = acc.setdefault(tuple(r[i] for i in ident), {**{i: r[i] for i in ident}, "samples": [], "rounds": [],
                                                            "verified": True})
            a["samples"] += r[f"samples_{key}"]
            a["rounds"].append(r[key]["median"])
            a["verified"] = a["verified"] and r["verified"]
            for extra in ("msgs_per_rep", "ops_per_sample"):
                if extra in r:
                    a[extra] = r[extra]
    for a in acc.values():
        a[key] = stats(a.pop("samples"))
        a["round_medians"] = a.pop("rounds")
    return acc


def efficiency(bw, pairs):
    """MP / FM bandwidth, %, per size: pooled medians; the spread: each round's MP median / its FM median."""
    out = []
    for size in sorted({s for m, s in bw if m == "mp" and ("fm", s) in bw}):
        fm, mp = bw[("fm", size)]["bytes_per_s"], bw[("mp", size)]["bytes_per_s"]
        per_round = [100 * p[size]["mp"] / p[size]["fm"] for p in pairs if size in p and len(p[size]) == 2]
        row = {"size": size, "percent": 100 * mp["median"] / fm["median"], "round_percent": per_round}
        if per_round:
            row["round_percent_stats"] = stats(per_round)
            q = statistics.quantiles(per_round, n=4) if len(per_round) > 1 else [per_round[0]] * 3
            row["round_percent_stats"].update(p25=q[0], p75=q[2])
        out.append(row)
    return out


def round_pairs(rounds_by_index):
    """Per round: {size: {mode: that round's median bytes/s}}."""
    pairs = []
    for results in rounds_by_index:
        p = {}
        for mode, res in results:
            for r in res.get("bandwidth", []):
                p.setdefault(r["size"], {})[mode] = r["bytes_per_s"]["median"]
        pairs.append(p)
    return pairs


# ----------------------------------------------------------------- summary

def cell(s, k=1.0, f="{:.2f}"):
    return f"{f.format(s['median'] * k)} [{f.format(s['min'] * k)}..{f.format(s['max'] * k)}]" if s else "-"


def summary(data):
    run = data["run"]
    lines = []
    fl = run.get("floors", {})
    pp = fl.get("pingpong", {}).get("oneway_us")
    mc = {x["size"]: x for x in fl.get("memcpy", [])}
    if pp:
        lines.append(f"== floors (host only, this run): shared-memory ping-pong one-way {cell(pp, 1, '{:.3f}')} us")
    eager = run.get("eager_limit")
    bw = run.get("bandwidth", [])
    if bw:
        eff = {r["size"]: r for r in run.get("efficiency", [])}
        fm, mp = {r["size"]: r for r in of_mode(bw, "fm")}, {r["size"]: r for r in of_mode(bw, "mp")}
        lines.append(f"== one-way bandwidth, MB/s (1e6 B/s per repetition, {run['rounds']} rounds pooled): median "
                     f"[min..max]; MP/FM % from the pooled medians; per round: median [min..max] of each round's MP/FM"
                     + (f"; MP eager up to {eager} B" if eager else ""))
        lines.append(f"{'size':<10}{'msgs':>6}{'FM':>28}{'MP':>28}{'MP/FM %':>9}{'rounds %':>20}{'memcpy':>9}")
        for s in sorted(set(fm) | set(mp)):
            a, b, e = fm.get(s), mp.get(s), eff.get(s)
            rp = e.get("round_percent_stats") if e else None
            span = f"{rp['median']:.0f} [{rp['min']:.0f}..{rp['max']:.0f}]" if rp else "-"
            msgs = (a or b).get("msgs_per_rep", "")
            floor = f"{mc[s]['bytes_per_s']['median'] / 1e6:>9.0f}" if s in mc else f"{'-':>9}"
            bad = [r for r in (a, b) if r and not r["verified"]]
            pc = f"{e['percent']:.1f}" if e else "-"
            lines.append(f"{size_name(s):<10}{msgs:>6}{cell(a and a['bytes_per_s'], 1e-6):>28}"
                         f"{cell(b and b['bytes_per_s'], 1e-6):>28}{pc:>9}"
                         f"{span:>20}{floor}" + ("  NOT VERIFIED" if bad else ""))
        pct = [r["percent"] for r in run.get("efficiency", [])]
        if pct:
            below = [size_name(r["size"]) for r in run["efficiency"] if r["percent"] < 90]
            lines.append(f"layering efficiency (MP/FM, medians): {min(pct):.1f} .. {max(pct):.1f} %; below 90 %: "
                         + (", ".join(below) if below else "none"))
        lines.append("")
    lat = run.get("latency", [])
    if lat:
        fm, mp = {r["size"]: r for r in of_mode(lat, "fm")}, {r["size"]: r for r in of_mode(lat, "mp")}
        lines.append("== ping-pong one-way latency (RTT/2), us: median [min..max]"
                     + (f"; floor: shared-memory ping-pong {pp['median']:.3f} us" if pp else ""))
        lines.append(f"{'size':<10}{'FM':>30}{'MP':>30}{'MP - FM':>10}")
        for s in sorted(set(fm) | set(mp)):
            a, b = fm.get(s), mp.get(s)
            d = f"{b['oneway_us']['median'] - a['oneway_us']['median']:+.1f}" if a and b else "-"
            lines.append(f"{size_name(s):<10}{cell(a and a['oneway_us'], 1, '{:.1f}'):>30}"
                         f"{cell(b and b['oneway_us'], 1, '{:.1f}'):>30}{d:>10}"
                         + ("" if all(r['verified'] for r in (a, b) if r) else "  NOT VERIFIED"))
        lines.append("")
    gm = run.get("gm", [])
    if gm:
        k = max(r["ops_per_sample"] for r in gm)
        lines.append(f"== GM, us per operation ({len(gm[0]['round_medians'])} jobs pooled): median [min..max]; get/put: "
                     f"{k} issued then gm_sync, store: {k} issued then gm_all_store_sync, per operation")
        sizes = sorted({r["size"] for r in gm})
        lines.append(f"{'op':<8}" + "".join(f"{size_name(s):>26}" for s in sizes))
        for op in GM_OPS:
            row = f"{op:<8}"
            for s in sizes:
                r = next((x for x in gm if x["op"] == op and x["size"] == s), None)
                row += f"{cell(r and r['us_per_op'], 1, '{:.1f}') + ('' if not r or r['verified'] else ' BAD'):>26}"
            lines.append(row)
        lines.append("")
    if run.get("failures"):
        lines.append("== failed jobs (library behaviour; the rank 1 output is in the JSON)")
        for f in run["failures"]:
            lines.append(f"  {f['label']}: {f['why']}")
            for rank in ("rank0", "rank1"):
                tail = [x for x in f.get(f"{rank}_output", "").splitlines() if x.strip()][-3:]
                lines.extend(f"    {rank}: {x}" for x in tail)
        lines.append("")
    return "\n".join(lines)


# ----------------------------------------------------------------- plots

def eager_line(ax, run):
    e = run.get("eager_limit")
    if e:
        ax.axvline(e, color="gray", ls="--", lw=0.8, label=f"MP eager limit ({size_name(e)}; rendezvous above)")


def plot(data, out):
    plt = pyplot()
    run = data["run"]
    fl = run.get("floors", {})
    written = []
    sub = subtitle(data, f"{run['rounds']} rounds of alternating FM / MP jobs, pooled; ")

    bw = run.get("bandwidth", [])
    if bw:
        fig, ax = plt.subplots(figsize=(9, 6))
        sizes = set()
        for rows, xs, color, marker, label in mode_series(bw, LAYERS, sizes):
            med = [r["bytes_per_s"]["median"] / 1e6 for r in rows]
            ax.errorbar(xs, med, yerr=err_bars(med, rows, "bytes_per_s", 1e-6), color=color, marker=marker,
                        capsize=3, label=f"{label}: median, bars min..max")
        memcpy_floor_line(ax, fl, sizes)
        eager_line(ax, run)
        size_axis(ax, sizes, "message size (bytes, log scale)", 45)
        log_y(ax, grid_alpha=0.12)
        ax.set_ylabel("one-way bandwidth, MB/s (1e6 B/s, log scale)")
        ax.set_title("FM and MP one-way bandwidth vs message size (end to end: each repetition acknowledged)\n"
                     + sub, fontsize=10)
        ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=2)
        save(fig, out, "bandwidth.png", written)

    eff = run.get("efficiency", [])
    if eff:
        fig, ax = plt.subplots(figsize=(9, 5.4))
        xs = [r["size"] for r in eff]
        ys = [r["percent"] for r in eff]
        rps = [r.get("round_percent_stats") for r in eff]

        def bars(lo_key, hi_key):
            return [[max(y - p.get(lo_key, y), 0) if p else 0 for y, p in zip(ys, rps)],
                    [max(p.get(hi_key, y) - y, 0) if p else 0 for y, p in zip(ys, rps)]]
        ax.errorbar(xs, ys, yerr=bars("min", "max"), color="tab:purple", alpha=0.35, ls="none", capsize=2,
                    label="per-round MP/FM ratios: min..max")
        ax.errorbar(xs, ys, yerr=bars("p25", "p75"), color="tab:purple", marker="o", capsize=4, elinewidth=2.5,
                    label="MP / FM bandwidth from the pooled medians; thick bars: per-round ratios' quartiles")
        for x, y in zip(xs, ys):  # sizes between the labelled powers of two (4232, 4256 B) get their name
            odd = x & (x - 1)
            ax.annotate(f"{y:.0f}%" + (f" ({size_name(x)})" if odd else ""), (x, y), textcoords="offset points",
                        xytext=(6, -12 if odd else 4), fontsize=7, color="tab:purple")
        ax.axhline(90, color="tab:green", ls="--", label="90 % (the FM 2.x paper's claim)")
        ax.axhline(100, color="gray", ls=":", lw=0.8)
        eager_line(ax, run)
        size_axis(ax, set(xs), "message size (bytes, log scale)", 45)
        ax.set_ylabel("MP bandwidth as % of FM bandwidth")
        ax.set_ylim(bottom=0, top=min(250, max([120] + [p["max"] + 5 for p in rps if p])))  # min..max may go off
        ax.set_title("Layering efficiency: MP over FM (FM 2.x paper, Figure 6)\n" + sub, fontsize=10)
        ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=1)
        save(fig, out, "efficiency.png", written)

    lat = run.get("latency", [])
    if lat:
        fig, ax = plt.subplots(figsize=(8.5, 5.4))
        sizes = set()
        for rows, xs, color, marker, label in mode_series(lat, LAYERS, sizes):
            med = [r["oneway_us"]["median"] for r in rows]
            ax.errorbar(xs, med, yerr=err_bars(med, rows, "oneway_us"), color=color, marker=marker, capsize=3,
                        label=f"{label.split(' (')[0]}: median, bars min..max")
        pp = fl.get("pingpong", {}).get("oneway_us")
        if pp:
            ax.axhline(pp["median"], color="gray", ls=":", label=f"floor: host shared-memory ping-pong, one-way "
                                                                f"median ({pp['median']:.2f} us)")
        eager_line(ax, run)
        size_axis(ax, sizes, "message size (bytes, log scale)", 45)
        log_y(ax, grid_alpha=0.12)
        ax.set_ylabel("one-way latency = RTT / 2 (us, log scale)")
        ax.set_title("FM (and MP) ping-pong latency vs message size (waiting in FM_wait)\n" + sub, fontsize=10)
        ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=2)
        save(fig, out, "latency.png", written)

    gm = run.get("gm", [])
    if gm:
        fig, ax = plt.subplots(figsize=(9, 5.4))
        sizes = sorted({r["size"] for r in gm})
        w = 0.8 / len(sizes)
        for n, s in enumerate(sizes):
            rows = [next((r for r in gm if r["op"] == op and r["size"] == s), None) for op in GM_OPS]
            xs = [i + (n - (len(sizes) - 1) / 2) * w for i in range(len(GM_OPS))]
            med = [r["us_per_op"]["median"] if r else 0 for r in rows]
            lo = [m - r["us_per_op"]["min"] if r else 0 for m, r in zip(med, rows)]
            hi = [r["us_per_op"]["max"] - m if r else 0 for m, r in zip(med, rows)]
            ax.bar(xs, med, w, yerr=[lo, hi], capsize=2, label=size_name(s))
            for x, m in zip(xs, med):
                if m:
                    ax.text(x, m, f"{m:.0f}", ha="center", va="bottom", fontsize=7)
        k = max(r["ops_per_sample"] for r in gm)
        ax.set_xticks(range(len(GM_OPS)))
        ax.set_xticklabels(["read\n(blocking)", "write\n(blocking)", f"get\n({k} + gm_sync)", f"put\n({k} + gm_sync)",
                            f"store\n({k} + all_store_sync)"])
        log_y(ax)
        ax.set_ylabel("us per operation (log): median, bars min..max")
        ax.set_title("GM (Split-C style global memory over FM): time per operation\n" + subtitle(data), fontsize=10)
        ax.legend(fontsize=8, title="bytes")
        ax.grid(True, axis="y", alpha=0.3)
        save(fig, out, "gm_ops.png", written)
    return written


# ------------------------------------------------------------------ main

def parse_args():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=default_build("fm_bench", ("build", "build-lead", "build-bench")),
                    help="build directory (bin/ulnic, bin/fm_bench)")
    ap.add_argument("--out", default="fm_bench_out", help="output directory for JSON and PNGs")
    ap.add_argument("--quick", action="store_true", help="a smoke run: fewer sizes, samples and rounds")
    ap.add_argument("--rounds", type=int, help="rounds of an fm and an mp job (default 30, quick 4)")
    ap.add_argument("--modes", default="fm,mp,gm", help="which jobs to run: fm, mp, gm")
    ap.add_argument("--bw-sizes", help="bandwidth sizes (fm_bench's LIST: 16,4K,1M)")
    ap.add_argument("--lat-sizes", help="ping-pong sizes")
    ap.add_argument("--gm-sizes", help="GM operation sizes")
    ap.add_argument("--eager-limit", type=int, help="ULNIC_MP_EAGER_LIMIT for the mp jobs")
    ap.add_argument("--slot-size", type=int, default=16, help="slot size in MiB for `ulnic cluster up`")
    ap.add_argument("--timeout", type=int, default=300, help="give up on a job after this many seconds")
    ap.add_argument("--plot-only", metavar="JSON", help="redraw the PNGs from an fm_bench.json and exit")
    return ap.parse_args()


def measure(jobs, args, modes, run):
    """The floors, the rounds of fm / mp jobs and the gm job, into run."""
    quick = ["--quick"] if args.quick else []
    bw = args.bw_sizes or (QUICK_SIZES["bw"] if args.quick else None)
    lat = args.lat_sizes or (QUICK_SIZES["lat"] if args.quick else None)
    gms = args.gm_sizes or (QUICK_SIZES["gm"] if args.quick else None)
    sizes = (["--bw-sizes", bw] if bw else []) + (["--lat-sizes", lat] if lat else [])
    floors_json = os.path.join(jobs.work, "floors.json")
    print("######## floors (host only)", flush=True)
    subprocess.run([jobs.bench, "floors", "--json", floors_json, *quick, *sizes], check=True, timeout=300)
    with open(floors_json) as f:
        fl = json.load(f)
    run["machine"], run["floors"] = fl["machine"], fl["floors"]

    rounds, gm_results = [], []
    layers = [m for m in ("fm", "mp") if m in modes]
    # the gm jobs: after the first round, (default run) one in the middle, and after the last
    gm_after = ({0, run["rounds"] // 2, run["rounds"] - 1} if not args.quick else {run["rounds"] - 1}) \
        if "gm" in modes else set()
    for k in range(run["rounds"]):
        results = []
        for mode in (layers if k % 2 == 0 else layers[::-1]):
            if jobs.failed(mode) >= 2:
                continue
            res = jobs.run(mode, [*quick, *sizes], f"round {k + 1}/{run['rounds']}: {mode}")
            if res:
                results.append((mode, res))
                if mode == "mp":
                    run["eager_limit"] = res["params"]["eager_limit"]
        rounds.append(results)
        if k in gm_after and jobs.failed("gm") < 2:
            gm_results.append(jobs.run("gm", [*quick, *(["--gm-sizes", gms] if gms else [])],
                                       f"gm ({len(gm_results) + 1}/{len(gm_after)})"))
    flat = [x for r in rounds for x in r]
    bwrows, latrows = pool(flat, "bandwidth", "bytes_per_s"), pool(flat, "latency", "oneway_us")
    run["bandwidth"] = sorted(bwrows.values(), key=lambda r: (r["mode"], r["size"]))
    run["latency"] = sorted(latrows.values(), key=lambda r: (r["mode"], r["size"]))
    run["efficiency"] = efficiency(bwrows, round_pairs(rounds))

    gm = [("gm", res) for res in gm_results if res]
    if gm:
        run["gm"] = sorted(pool(gm, "gm", "us_per_op", ("op", "size")).values(),
                           key=lambda r: (r["size"], GM_OPS.index(r["op"])))


def main():
    args = parse_args()
    out = out_dir(args, plot, __file__)
    build = check_build(args.build, ("ulnic", "fm_bench"), PROG)
    modes = [m for m in args.modes.split(",") if m]
    t0 = time.time()
    runtime = tempfile.mkdtemp(prefix=f"ulnic-{CLUSTER}-", dir=runtime_parent())
    work = tempfile.mkdtemp(prefix="ulnic-fmbench-work-", dir="/tmp")
    cluster = Cluster(build, runtime, CLUSTER, args.slot_size, prog=PROG)
    env_extra = {"ULNIC_MP_EAGER_LIMIT": str(args.eager_limit)} if args.eager_limit is not None else {}
    jobs = Jobs(build, cluster, work, args.timeout, env_extra)
    rounds = args.rounds or (4 if args.quick else 30)
    data = {**header(PROG), "params": {"quick": args.quick, "rounds": rounds, "modes": modes,
                                        "slot_size_mib": args.slot_size, "env": env_extra,
                                        "sizes": {"bw": args.bw_sizes, "lat": args.lat_sizes, "gm": args.gm_sizes}}}
    run = data["run"] = {"rounds": rounds}
    ok = True
    try:
        print(f"######## ulnic cluster up -n 2 -c {CLUSTER} --slot-size {args.slot_size} (runtime {runtime})",
              flush=True)
        cluster.up()
        measure(jobs, args, modes, run)
        status = cluster.status()
        if status:
            data["cluster_status_at_end"] = status
    except (RuntimeError, subprocess.SubprocessError, OSError, ValueError, KeyError) as e:
        print(f"{PROG}: {e!r}", file=sys.stderr)
        ok = False
    finally:
        cluster.down()
        left = remove_runtime(runtime)
        if left:
            print(f"{PROG}: note: cluster down left {left} in the runtime directory (removed)", file=sys.stderr)
        shutil.rmtree(work, ignore_errors=True)
    run["jobs"], run["failures"] = jobs.jobs, jobs.failures
    run["verified"] = ok and not jobs.failures and bool(jobs.jobs)
    finish(data, t0)
    print()
    print(summary(data))
    print(f"data verified (every ACK count, pong and checked message; every GM value read and area written): "
          f"{'yes' if run['verified'] else 'NO'}")
    print(runtime_line(data))
    json_path = os.path.join(out, "fm_bench.json")
    write_json(data, json_path)
    if "machine" in run and not draw(json_path, out, plot, __file__):
        ok = False
    return 0 if run["verified"] and ok else 1


if __name__ == "__main__":
    sys.exit(main())
