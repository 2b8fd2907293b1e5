#!/usr/bin/env python3
"""Benchmark driver: perftest-style VIPL 1.0 figures on libvipl, beside same-run floors.

Builds nothing. With a private ULNIC_RUNTIME_DIR it brings up a two-node
cluster (`ulnic cluster up -n 2 --slot-size 64`: the 8 MiB transfers need an
8.4 MiB registration), runs `vipl_bench serve --peer 0` on node 1 and
`vipl_bench client --peer 1` on node 0, brings the cluster down, and then:

  * prints the client's tables (floors; one-way latency of send/wait,
    send/poll and RDMA-write/poll ping-pongs, 4 B .. 64 KiB; send and
    RDMA-write bandwidth, 4 B .. 8 MiB, a window of descriptors outstanding;
    send latency with 1, 16 and 63 idle VIs connected and the ratio to 1) and
    a summary;
  * writes OUT/vipl_bench.json (the client's JSON, also kept as
    OUT/vipl_bench_client.json, under "run"; the server's output; the
    cluster's status at the end; the load average) and
    OUT/latency_vs_size.png, OUT/bandwidth_vs_size.png and
    OUT/idle_vis.png (matplotlib; if this Python lacks it, the plots are
    drawn by /usr/bin/python3 with Debian's python3-matplotlib).

A default run takes about 2-3 minutes on a 2-core machine; --quick is a smoke
run of well under a minute (fewer sizes, samples and windows). Arguments
after `--` go to `vipl_bench client` as they are (e.g. -- --reliability
reception --skip poll).

  tests/bench/vipl_bench.py [--build DIR] [--out DIR] [--quick] [--cluster-arg ARG]... [-- CLIENT-ARGS...]
  tests/bench/vipl_bench.py --plot-only OUT/vipl_bench.json [--out DIR]   (redraw the PNGs)
"""
import sys

from bench_common import (err_bars, log_y, memcpy_floor_line, mode_series, of_mode, pyplot, save, size_axis,
                          size_name, subtitle, two_node_main)

CLUSTER = "viplbench"
LAT_MODES = (("send/wait", "tab:blue", "o", "send, VipRecvWait"),
             ("send/poll", "tab:orange", "s", "send, VipRecvDone polled"),
             ("rdma/poll", "tab:red", "^", "RDMA write, last byte polled"))


# ----------------------------------------------------------------- summary

def summary(data):
    run = data["run"]
    lines = []
    fl = run.get("floors", {})
    pp = fl.get("pingpong", {}).get("oneway_us")
    lat = run.get("latency", [])
    if lat:
        lines.append("== one-way latency (RTT/2), us: min / median / max"
                     + (f"; shared-memory floor median {pp['median']:.3f} us" if pp else ""))
        head = f"{'size':<9}"
        for mode, *_ in LAT_MODES:
            head += f"{mode + ' min':>15}{'median':>9}{'max':>9}"
        lines.append(head)
        by = {m: {r["size"]: r for r in of_mode(lat, m)} for m, *_ in LAT_MODES}
        for s in sorted({r["size"] for r in lat}):
            row = f"{size_name(s):<9}"
            for mode, *_ in LAT_MODES:
                r = by[mode].get(s)
                row += (f"{r['oneway_us']['min']:>15.1f}{r['oneway_us']['median']:>9.1f}{r['oneway_us']['max']:>9.1f}"
                        if r else f"{'-':>15}{'-':>9}{'-':>9}")
            lines.append(row)
        lines.append("")
    bw = run.get("bandwidth", [])
    if bw:
        mc = {x["size"]: x for x in fl.get("memcpy", [])}
        lines.append("== bandwidth, MB/s (1e6 B/s), window medians [min..max]; memcpy floor median")
        lines.append(f"{'size':<9}{'K':>4}{'send':>10}{'[min..max]':>19}{'rdma':>10}{'[min..max]':>19}{'memcpy':>10}")
        sends, rdmas = ({r["size"]: r for r in of_mode(bw, m)} for m in ("send", "rdma"))
        for s in sorted(set(sends) | set(rdmas)):
            k = (sends.get(s) or rdmas.get(s))["inflight"]
            row = f"{size_name(s):<9}{k:>4}"
            for r in (sends.get(s), rdmas.get(s)):
                if r:
                    b = r["bytes_per_s"]
                    span = f"[{b['min'] / 1e6:.1f}..{b['max'] / 1e6:.1f}]"
                    row += f"{b['median'] / 1e6:>10.2f}{span:>19}"
                else:
                    row += f"{'-':>10}{'':>19}"
            row += f"{mc[s]['bytes_per_s']['median'] / 1e6:>10.0f}" if s in mc else f"{'-':>10}"
            bad = [r for r in (sends.get(s), rdmas.get(s)) if r and not r["verified"]]
            lines.append(row + ("  NOT VERIFIED" if bad else ""))
        lines.append("")
    idle = run.get("idle_vis", {}).get("rows", [])
    if idle:
        base = run["idle_vis"]["baseline_idle"]
        lines.append(f"== send latency with N idle VIs connected, one-way us (median [min..max]); ratio to N = {base}")
        lines.append(f"  ({run['idle_vis'].get('rounds', 1)} rounds over the levels, samples pooled; rounds: each"
                     " round's median)")
        for r in idle:
            o = r["oneway_us"]
            rounds = " ".join(f"{m:.0f}" for m in r.get("round_medians_us", []))
            lines.append(f"  N={r['idle_vis']:<4}{r['mode']:<11}{size_name(r['size']):<8}"
                         f"{o['median']:>8.1f} [{o['min']:.1f}..{o['max']:.1f}]   ratio {r['ratio_to_baseline']:.3f}"
                         f"   rounds {rounds}")
        top = max(r["idle_vis"] for r in idle)
        worst = [r for r in idle if r["idle_vis"] == top]
        if worst and top != base:
            lines.append("idle-VI ratio (median with %d idle / with %d idle): %s" % (
                top, base, ", ".join(f"{r['mode']} {size_name(r['size'])} {r['ratio_to_baseline']:.3f}"
                                     for r in worst)))
        lines.append("")
    anomalies = run.get("library_anomalies", [])
    if anomalies:
        lines.append("== library behaviour noted during the run")
        lines.extend(f"  {a}" for a in anomalies)
        lines.append("")
    return "\n".join(lines)


# ----------------------------------------------------------------- plots

def plot(data, out):
    plt = pyplot()
    run = data["run"]
    fl = run.get("floors", {})
    written = []

    sub = subtitle(data, f"{run['params']['reliability']} VIs; ")

    # 1. latency vs size
    lat = run.get("latency", [])
    if lat:
        fig, ax = plt.subplots(figsize=(8.5, 5.4))
        sizes = set()
        for rows, xs, color, marker, label in mode_series(lat, LAT_MODES, sizes):
            med = [r["oneway_us"]["median"] for r in rows]
            ax.errorbar(xs, med, yerr=err_bars(med, rows, "oneway_us"), color=color, marker=marker, capsize=3,
                        label=f"{label}: median, bars min..max")
        pp = fl.get("pingpong", {}).get("oneway_us")
        if pp:
            ax.axhline(pp["median"], color="gray", ls=":", label=f"floor: host shared-memory ping-pong, one-way "
                                                                f"median ({pp['median']:.2f} us)")
        size_axis(ax, sizes, "message size (bytes, log scale)", 45)
        log_y(ax, grid_alpha=0.12)
        ax.set_ylabel("one-way latency = RTT / 2 (us, log scale)")
        ax.set_title("VIPL one-way latency vs message size (ping-pong over one VI pair)\n" + sub, fontsize=10)
        ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=2)
        save(fig, out, "latency_vs_size.png", written)

    # 2. bandwidth vs size
    bw = run.get("bandwidth", [])
    if bw:
        fig, ax = plt.subplots(figsize=(9, 6))
        sizes = set()
        modes = (("send", "tab:blue", "o", "VipPostSend into posted receives"), ("rdma", "tab:red", "^", "RDMA write"))
        for rows, xs, color, marker, label in mode_series(bw, modes, sizes):
            med = [r["bytes_per_s"]["median"] / 1e6 for r in rows]
            ax.errorbar(xs, med, yerr=err_bars(med, rows, "bytes_per_s", 1e-6), color=color, marker=marker, capsize=3,
                        label=f"{label}: median, bars min..max per window")
        memcpy_floor_line(ax, fl, sizes)
        size_axis(ax, sizes, "message size (bytes, log scale)", 45)
        log_y(ax, grid_alpha=0.12)
        ax.set_ylabel("MB/s (1e6 B/s, log scale)")
        ax.set_title(f"VIPL bandwidth vs message size (up to {run['params']['inflight']} descriptors outstanding)\n"
                     + sub, fontsize=10)
        ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=2)
        save(fig, out, "bandwidth_vs_size.png", written)

    # 3. latency vs idle VIs
    idle = run.get("idle_vis", {}).get("rows", [])
    if idle:
        fig, ax = plt.subplots(figsize=(8.5, 5.4))
        combos = sorted({(r["mode"], r["size"]) for r in idle})
        levels = sorted({r["idle_vis"] for r in idle})
        width = 0.8 / max(1, len(combos))
        for k, (mode, size) in enumerate(combos):
            rows = [next((r for r in idle if r["idle_vis"] == n and r["mode"] == mode and r["size"] == size), None)
                    for n in levels]
            xs = [i + (k - (len(combos) - 1) / 2) * width for i in range(len(levels))]
            med = [r["oneway_us"]["median"] if r else 0 for r in rows]
            lo = [m - r["oneway_us"]["min"] if r else 0 for m, r in zip(med, rows)]
            hi = [r["oneway_us"]["max"] - m if r else 0 for m, r in zip(med, rows)]
            ax.bar(xs, med, width, yerr=[lo, hi], capsize=3, label=f"{mode}, {size_name(size)}")
            for x, r in zip(xs, rows):
                if r:
                    ax.text(x, r["oneway_us"]["median"], f"{r['ratio_to_baseline']:.2f}", ha="center",
                            va="bottom", fontsize=7)
        ax.set_yscale("log")
        ax.set_xticks(range(len(levels)))
        ax.set_xticklabels([f"{n} idle VIs" for n in levels])
        ax.set_ylabel("one-way latency (us, log scale): median, bars min..max\n"
                      f"label: median / median with {run['idle_vis']['baseline_idle']} idle")
        ax.set_title(f"VIPL send latency with N idle VIs connected on the same NIC handles "
                     f"({run['idle_vis'].get('rounds', 1)} rounds, samples pooled)\n" + sub, fontsize=10)
        ax.legend(fontsize=8)
        ax.grid(True, axis="y", alpha=0.3)
        save(fig, out, "idle_vis.png", written)
    return written


def main():
    return two_node_main(__doc__, __file__, "vipl_bench", CLUSTER, build_dirs=("build", "build-lead", "build-bench"),
                         quick_help="a smoke run", slot_help="slot size in MiB (the 8.4 MiB arena needs 64)",
                         server_wait=30, summary=summary, plot=plot, verified="every pong and bandwidth row",
                         cluster_arg=True)


if __name__ == "__main__":
    sys.exit(main())
