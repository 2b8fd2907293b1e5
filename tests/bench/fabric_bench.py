#!/usr/bin/env python3
"""Benchmark driver: remote puts over the direct fabric, the switch and a lossy switch.

Builds nothing. In one invocation, with a private ULNIC_RUNTIME_DIR, it brings
up (`ulnic cluster up -n 2 --slot-size 16`) and down one cluster per
configuration and runs fabric_bench between node 0 (client) and node 1 (serve):

  direct         the shared-memory fabric, NIC to NIC: floors, put latency
                 8 B .. 64 KiB, bandwidth 4 KiB .. 1 MiB (8 in flight), goodput
  switch         the same through ulnic-switch (--switch, no faults)
  drop=R         through the switch with --faults drop=R,seed=SEED for each R of
                 --drops: put latency (16 KiB, one at a time) and goodput
                 (--goodput-puts puts of 16 KiB, 8 in flight, time-capped)

It prints each fabric_bench run, then summary tables (direct vs switch and
"goodput vs drop rate"), and writes OUT/fabric_bench.json (every run's JSON,
the sweep, the switch's counters) and OUT/*.png (matplotlib; if this Python
lacks it, the plots are drawn by /usr/bin/python3, Debian's python3-matplotlib).

  tests/bench/fabric_bench.py [--build DIR] [--out DIR] [--drops 0,0.05,0.1,0.2,0.3] [--seed S]
                              [--goodput-puts N] [--iters N] [--quick] [--sweep-only] [--firmware ELF]

--firmware boots every cluster with another firmware image (to compare two
builds of the firmware in one sitting); --sweep-only runs the drop sweep alone.
  tests/bench/fabric_bench.py --plot-only OUT/fabric_bench.json   (redraw the PNGs)
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

from bench_common import (ROOT, Cluster, check_build, draw, finish, header, log_y, out_dir, output_of, pyplot,
                          remove_runtime, runtime_line, runtime_parent, save, size_axis, size_name, start, stop,
                          write_json)


class Runner:
    def __init__(self, build, runtime, work, timeout):
        self.build = build
        self.bench = os.path.join(build, "bin", "fabric_bench")
        self.runtime, self.work, self.timeout = runtime, work, timeout
        self.clusters = []  # every cluster started (down_all brings down those still up)

    def down_all(self):
        for c in self.clusters:
            c.down()

    def switch_stats(self, cluster):
        path = os.path.join(self.runtime, cluster.name, "fabric", "switch.json")
        try:
            with open(path) as f:
                return json.load(f)
        except (OSError, ValueError):
            return None

    def run(self, name, extra_up, client_args):
        """One configuration: cluster up, serve on node 1, client on node 0, cluster down."""
        cluster = Cluster(self.build, self.runtime, "fb-" + re.sub(r"[^A-Za-z0-9_-]", "", name), 16, extra_up,
                          prog="fabric_bench.py")
        self.clusters.append(cluster)
        info = os.path.join(self.work, f"{cluster.name}.info")
        out_json = os.path.join(self.work, f"{cluster.name}.json")
        print(f"\n######## {name}: ulnic cluster up -n 2 --slot-size 16 {' '.join(extra_up)}".rstrip(), flush=True)
        cluster.up()
        server = None
        try:
            server = start([self.bench, "serve", "--info", info], cluster.env(1))
            deadline = time.time() + 30
            while not os.path.exists(info) and server.poll() is None and time.time() < deadline:
                time.sleep(0.02)
            if not os.path.exists(info):
                out = server.stdout.read() if server.poll() is not None else "no info file after 30 s"
                raise RuntimeError(f"{name}: fabric_bench serve did not start: {out}")
            cmd = [self.bench, "client", "--info", info, "--dst-node", "1", "--json", out_json, "--label", name,
                   *client_args]
            client = subprocess.run(cmd, env=cluster.env(0), stdout=subprocess.PIPE,
                                    stderr=subprocess.STDOUT, text=True, timeout=self.timeout)
            sys.stdout.write(client.stdout)
            sys.stdout.write(output_of(server, 30))
            sys.stdout.flush()
            if client.returncode != 0 or not os.path.exists(out_json):
                raise RuntimeError(f"{name}: fabric_bench client exited {client.returncode}")
            with open(out_json) as f:
                result = json.load(f)
            result["server_exit"] = server.returncode
            if "--switch" in extra_up:
                time.sleep(1.2)  # the switch rewrites its counters every second
                result["switch"] = self.switch_stats(cluster)
            return result
        finally:
            stop(server)
            cluster.down()


def fmt_ms_or_us(us):
    return f"{us / 1000:.2f} ms" if us >= 10000 else f"{us:.0f} us"


def direct_vs_switch(d, s, section, key, div=1):
    """Table rows: min/median/max of d[section][..][key] (divided by div) beside s's, for the sizes both have."""
    lines = [f"{'size':<10}{'direct min':>12}{'median':>10}{'max':>10}{'switch min':>13}{'median':>10}"
             f"{'max':>10}{'sw/dir med':>12}"]
    sb = {x["size"]: x for x in s[section]}
    for x in d[section]:
        y = sb.get(x["size"])
        if not y:
            continue
        a, b = x[key], y[key]
        ratio = b["median"] / a["median"] if a["median"] else 0
        lines.append(f"{size_name(x['size']):<10}{a['min'] / div:>12.1f}{a['median'] / div:>10.1f}"
                     f"{a['max'] / div:>10.1f}{b['min'] / div:>13.1f}{b['median'] / div:>10.1f}"
                     f"{b['max'] / div:>10.1f}{ratio:>12.2f}")
    return lines


def summary_tables(data):
    lines = []
    runs = data["runs"]
    d, s = runs.get("direct"), runs.get("switch")
    if d and s:
        lines.append("== direct fabric vs switch: remote put latency, us (one at a time)")
        lines += direct_vs_switch(d, s, "latency", "us")
        lines.append("")
        inflight = d["params"]["inflight"]
        lines.append(f"== direct fabric vs switch: remote put bandwidth, MB/s (1e6 B/s), {inflight} in flight, "
                     "per-window min/median/max")
        lines += direct_vs_switch(d, s, "bandwidth", "bytes_per_s", 1e6)
        fl = d.get("floors")
        if fl:
            rtt = fl["pingpong"]["rtt_us"]
            big = max(fl["memcpy"], key=lambda m: m["size"])
            lines.append(f"floors (direct run): shared-memory ping-pong RTT median {rtt['median']:.3f} us; "
                         f"memcpy {size_name(big['size'])} median {big['gbps']['median']:.1f} GB/s")
        lines.append("")
    sweep = data.get("sweep", [])
    if sweep:
        g0 = sweep[0]
        lines.append(f"== goodput vs drop rate (through the switch, seed {data['params']['seed']}): "
                     f"{g0['goodput_puts']} puts of {size_name(g0['size'])}, {g0['inflight']} in flight; "
                     f"latency: one {size_name(g0['size'])} put at a time")
        lines.append(f"{'drop':>6}{'dropped':>9}{'puts ok':>9}{'failed':>8}{'seconds':>9}{'goodput MB/s':>14}"
                     f"{'vs 0':>7}{'win min':>9}{'win max':>9}{'lat min':>10}{'lat med':>10}{'lat max':>10}"
                     f"{'retx':>7}{'retx/tx':>9}")
        base = sweep[0]["goodput_bps"] or 1
        for r in sweep:
            dropped = f"{r['switch_drop_fraction'] * 100:.1f}%" if r.get("switch_drop_fraction") is not None else "-"
            lat = r["latency_us"]
            retx_ratio = f"{r['retx'] / r['tx']:.2f}" if r.get("tx") else "-"
            lines.append(f"{r['drop']:>6.2f}{dropped:>9}{r['ok']:>9}{r['failed']:>8}{r['seconds']:>9.2f}"
                         f"{r['goodput_bps'] / 1e6:>14.2f}{r['goodput_bps'] / base:>7.2f}"
                         f"{r['window_min_bps'] / 1e6:>9.2f}{r['window_max_bps'] / 1e6:>9.2f}"
                         f"{fmt_ms_or_us(lat['min']):>10}{fmt_ms_or_us(lat['median']):>10}"
                         f"{fmt_ms_or_us(lat['max']):>10}{r.get('retx', '-'):>7}{retx_ratio:>9}")
        lines.append("  (dropped: the switch's measured drop fraction over all links and both phases; vs 0: goodput"
                     " / goodput at the first rate;\n   win: per-window goodput; retx/tx: the sender's link"
                     " retransmissions per data packet sent, goodput phase)")
    return "\n".join(lines)


def sweep_row(drop, r):
    gp = r["goodput"]
    lat = r["latency"][0]["us"] if r["latency"] else {"min": 0, "median": 0, "max": 0}
    snd = gp["counters"]["sender"]
    row = {"drop": drop, "size": gp["size"], "inflight": gp["inflight"], "goodput_puts": gp["target_puts"],
           "ok": gp["ok"], "failed": gp["failed"], "seconds": gp["seconds"], "budget_hit": gp["budget_hit"],
           "goodput_bps": gp["bytes_per_s"], "window_min_bps": gp["window_bytes_per_s"]["min"],
           "window_median_bps": gp["window_bytes_per_s"]["median"], "window_max_bps": gp["window_bytes_per_s"]["max"],
           "put_us_inflight": gp["put_us_inflight"], "latency_us": lat,
           "latency_failed": r["latency"][0]["failed"] if r["latency"] else 0,
           "tx": snd.get("link_tx_data"), "retx": snd.get("link_retransmits"), "sacked": snd.get("link_sacked"),
           "verified": r["verified"]}
    sw = r.get("switch")
    if sw and sw.get("links"):
        fwd = sum(l.get("forwarded", 0) for l in sw["links"])
        dropped = sum(l.get("dropped", 0) for l in sw["links"])
        row["switch_forwarded"], row["switch_dropped"] = fwd, dropped
        row["switch_drop_fraction"] = dropped / (fwd + dropped) if fwd + dropped else 0.0
    return row


# ----------------------------------------------------------------- plots

def plot(data, out):
    plt = pyplot()
    written = []
    runs = data["runs"]
    styles = {"direct": ("tab:blue", "o", "direct fabric (NIC to NIC)"),
              "switch": ("tab:orange", "s", "through ulnic-switch")}

    # 1. latency vs size
    fig, ax = plt.subplots(figsize=(8, 5.2))
    sizes = set()
    for name, (color, marker, label) in styles.items():
        r = runs.get(name)
        if not r or not r["latency"]:
            continue
        xs = [x["size"] for x in r["latency"]]
        sizes.update(xs)
        med = [x["us"]["median"] for x in r["latency"]]
        lo = [x["us"]["min"] for x in r["latency"]]
        ax.plot(xs, med, color=color, marker=marker, label=f"{label}: median")
        ax.plot(xs, lo, color=color, marker=marker, ls="--", lw=1, ms=4, alpha=0.7, label=f"{label}: min")
    fl = runs.get("direct", {}).get("floors")
    if sizes:
        size_axis(ax, sizes, "put size (bytes, log scale)")
    log_y(ax, minor_labels=True, grid_alpha=0.15)
    ax.set_ylabel("post -> completion latency (us, log scale)")
    title = "Remote put latency, one at a time, spin-polled (completion = receiver placed every byte)"
    if fl:
        title += (f"\nhost floor, same run: shared-memory ping-pong RTT median "
                  f"{fl['pingpong']['rtt_us']['median']:.2f} us (off the chart)")
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.13), ncol=2)
    save(fig, out, "latency_vs_size.png", written)

    # 2. bandwidth vs size
    fig, ax = plt.subplots(figsize=(8, 5.2))
    sizes = set()
    for name, (color, marker, label) in styles.items():
        r = runs.get(name)
        if not r or not r["bandwidth"]:
            continue
        xs = [x["size"] for x in r["bandwidth"]]
        sizes.update(xs)
        med = [x["bytes_per_s"]["median"] / 1e6 for x in r["bandwidth"]]
        lo = [m - x["bytes_per_s"]["min"] / 1e6 for m, x in zip(med, r["bandwidth"])]
        hi = [x["bytes_per_s"]["max"] / 1e6 - m for m, x in zip(med, r["bandwidth"])]
        inflight = r["params"]["inflight"]
        ax.errorbar(xs, med, yerr=[lo, hi], color=color, marker=marker, capsize=4,
                    label=f"{label}: median, bars min..max per window ({inflight} in flight)")
    ax.set_ylim(bottom=0)
    if sizes:
        size_axis(ax, sizes, "put size (bytes, log scale)")
    ax.set_ylabel("remote put bandwidth (MB/s = 1e6 B/s)")
    title = "Remote put bandwidth"
    if fl:
        mc = {m["size"]: m["gbps"]["median"] for m in fl["memcpy"]}
        if sizes:
            big = max(s for s in sizes if s in mc) if any(s in mc for s in sizes) else None
            if big:
                title += f"\n(host memcpy floor, same run: {mc[big] * 1000:.0f} MB/s at {size_name(big)}, off the chart)"
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.13), ncol=1)
    save(fig, out, "bandwidth_vs_size.png", written)

    # 3. goodput vs drop rate
    sweep = data.get("sweep", [])
    if sweep:
        fig, ax = plt.subplots(figsize=(8, 5.2))
        xs = [r["drop"] * 100 for r in sweep]
        gp = [r["goodput_bps"] / 1e6 for r in sweep]
        lo = [g - r["window_min_bps"] / 1e6 for g, r in zip(gp, sweep)]
        hi = [max(0.0, r["window_max_bps"] / 1e6 - g) for g, r in zip(gp, sweep)]
        l1 = ax.errorbar(xs, gp, yerr=[lo, hi], color="tab:green", marker="o", capsize=4,
                         label=f"goodput ({sweep[0]['goodput_puts']} puts of {size_name(sweep[0]['size'])}, "
                               f"{sweep[0]['inflight']} in flight; bars: per-window min..max)")
        ax.set_xlabel("switch drop rate per packet, each link (%)")
        ax.set_ylabel("goodput (MB/s of delivered payload)", color="tab:green")
        ax.set_ylim(bottom=0)
        ax.set_xticks(xs)
        ax.grid(True, alpha=0.35)
        ax2 = ax.twinx()
        lat = [r["latency_us"]["median"] / 1000 for r in sweep]
        l2, = ax2.plot(xs, lat, color="tab:red", marker="s", ls="--",
                       label=f"put latency median ({size_name(sweep[0]['size'])}, one at a time)")
        if min(lat) > 0 and max(lat) / min(lat) > 20:  # spans decades
            log_y(ax2, minor_labels=True)
            ax2.set_ylabel("put latency median (ms, log scale)", color="tab:red")
        else:
            ax2.set_ylim(bottom=0, top=max(lat) * 1.1 if lat else 1)
            ax2.set_ylabel("put latency median (ms)", color="tab:red")
        ax.set_title("Goodput and latency vs packet loss, through ulnic-switch (go-back-N link)", fontsize=10)
        ax.legend(handles=[l1, l2], fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.13), ncol=1)
        save(fig, out, "goodput_vs_drop.png", written)
    return written


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"), help="build directory (bin/ulnic, bin/fabric_bench)")
    ap.add_argument("--out", default="fabric_bench_out", help="output directory for JSON and PNGs")
    ap.add_argument("--drops", default="0,0.05,0.1,0.2,0.3", help="switch drop rates for the sweep")
    ap.add_argument("--seed", type=int, default=1, help="fault seed")
    ap.add_argument("--iters", type=int, default=1000, help="latency samples per size (direct, switch)")
    ap.add_argument("--goodput-puts", type=int, default=2000, help="puts per goodput measurement")
    ap.add_argument("--goodput-seconds", type=float, default=20, help="time cap per goodput measurement")
    ap.add_argument("--quick", action="store_true", help="fewer samples (a smoke run)")
    ap.add_argument("--sweep-only", action="store_true", help="only the drop sweep (no direct/switch runs)")
    ap.add_argument("--firmware", metavar="ELF", help="boot every cluster with this firmware image")
    ap.add_argument("--plot-only", metavar="JSON", help="redraw the PNGs from a fabric_bench.json and exit")
    args = ap.parse_args()

    out = out_dir(args, plot, __file__)
    build = check_build(args.build, ("ulnic", "fabric_bench"), "fabric_bench.py")
    drops = [float(x) for x in args.drops.split(",") if x.strip()]
    iters = 100 if args.quick else args.iters
    gputs = 300 if args.quick else args.goodput_puts

    t0 = time.time()
    runtime = tempfile.mkdtemp(prefix="ulnic-fabricbench-", dir=runtime_parent())
    work = tempfile.mkdtemp(prefix="ulnic-fabricbench-work-", dir="/tmp")
    r = Runner(build, runtime, work, timeout=300)
    data = {**header("fabric_bench.py"),
            "params": {"drops": drops, "seed": args.seed, "iters": iters, "goodput_puts": gputs,
                       "goodput_seconds": args.goodput_seconds, "quick": args.quick, "firmware": args.firmware},
            "runs": {}, "sweep": []}
    common = ["--iters", str(iters), "--warmup", str(max(10, iters // 10)), "--goodput-size", "16K",
              "--goodput-puts", str(gputs), "--goodput-seconds", str(args.goodput_seconds)]
    rc = 0
    try:
        fw = ["--firmware", os.path.abspath(args.firmware)] if args.firmware else []
        if not args.sweep_only:
            data["runs"]["direct"] = r.run("direct", fw, common + ["--lat-seconds", "3", "--bw-seconds", "1"])
            data["runs"]["switch"] = r.run("switch", fw + ["--switch"],
                                           common + ["--lat-seconds", "3", "--bw-seconds", "1"])
        for drop in drops:
            name = f"drop={drop:g}"
            res = r.run(name, fw + ["--switch", "--faults", f"drop={drop:g},seed={args.seed}"],
                        ["--no-floors", "--lat-sizes", "16K", "--iters", str(min(iters, 300)), "--warmup", "10",
                         "--lat-seconds", "6", "--bw-sizes", "none", "--goodput-size", "16K",
                         "--goodput-puts", str(gputs), "--goodput-seconds", str(args.goodput_seconds)])
            data["runs"][name] = res
            data["sweep"].append(sweep_row(drop, res))
    except (RuntimeError, subprocess.TimeoutExpired) as e:
        print(f"fabric_bench.py: {e}", file=sys.stderr)
        rc = 1
    finally:
        r.down_all()
        left = remove_runtime(runtime)
        shutil.rmtree(work, ignore_errors=True)
        if left:
            print(f"fabric_bench.py: warning: cluster down left {left} in the runtime directory", file=sys.stderr)

    finish(data, t0)
    print()
    print(summary_tables(data))
    bad = [n for n, x in data["runs"].items() if not x.get("verified")]
    print(f"\ndata verified by the receiver in every run: {'yes' if not bad else 'NO: ' + ', '.join(bad)}")
    print(runtime_line(data))
    json_path = os.path.join(out, "fabric_bench.json")
    write_json(data, json_path)
    if data["runs"] and not draw(json_path, out, plot, __file__):
        rc = rc or 1
    return rc or (1 if bad else 0)


if __name__ == "__main__":
    sys.exit(main())
