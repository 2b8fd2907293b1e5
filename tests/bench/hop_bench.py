#!/usr/bin/env python3
"""Benchmark driver: the one-way latency of one small message, hop by hop, for VMMC, VIPL, native AM, FM and U-Net.

Builds nothing. With a private ULNIC_RUNTIME_DIR (under /dev/shm where it
holds 1 GiB) it brings up a two-node cluster (`ulnic cluster up -n 2
--slot-size 16`), runs `hop_bench floors` (host only: a shared-memory
ping-pong and a blocking eventfd ping-pong, one-way = RTT/2; and a NOP
posted to node 0 and spin-polled, round trip), then `hop_bench PROTOCOL` for
each protocol (the client on node 0 forks the server on node 1; both wait
styles: "wait", the API's blocking wait on both sides, and "poll", a tight
loop on its non-blocking call), brings the cluster down (also when a run
failed or was interrupted), and then:

  * prints one table per direction (ping: node 0 -> node 1; pong: back),
    a row per protocol/style: RTT/2 and the five hops of one message --
    1 post -> NIC (host t0 just before the send call -> the NIC took it),
    2 sending NIC (-> last packet in the fabric ring), 3 fabric (-> the
    other NIC began on it; two NIC clocks, each calibrated against the
    host's), 4 receiving NIC (-> data and completion / ring entry / event
    written), 5 NIC -> host (-> the receiving program saw it) -- medians,
    their sum beside the one-way time on the host clock, and how many
    messages had consistent stamps; the floors beside them;
  * writes OUT/hop_bench.json (every row with min / median / p99 / max of
    each hop, the floors, each program's output, the cluster's status at the
    end) and OUT/hops.png (stacked bars of the median hops per
    protocol/style, RTT/2 marked, the floors as reference lines; matplotlib,
    else drawn by /usr/bin/python3 with Debian's python3-matplotlib).

--quick: 300 measured rounds per row (well under two minutes in all); the
default is 3000. A pong that does not carry its ping's bytes back, or a
program stuck for 30 s, fails that protocol's run (exit status 1 at the end;
the other protocols still run).

  tests/bench/hop_bench.py [--build DIR] [--out DIR] [--quick] [--protocols vmmc,vipl,am,fm,unet] [--iters N]
                           [--ping-only]
  tests/bench/hop_bench.py --plot-only OUT/hop_bench.json [--out DIR]   (redraw the PNG)
"""
import argparse
import json
import os
import sys
import time

from bench_common import (check_build, default_build, draw, finish, header, on_private_cluster, out_dir, pyplot,
                          runtime_line, save, start, stop, stream_output, write_json)

PROG = "hop_bench.py"
CLUSTER = "hopbench"
PROTOCOLS = ("vmmc", "vipl", "am", "fm", "unet")
HOPS = (("post_to_nic", "1 post>NIC", "tab:blue"), ("nic_tx", "2 send NIC", "tab:orange"),
        ("fabric", "3 fabric", "tab:green"), ("nic_rx", "4 recv NIC", "tab:red"),
        ("to_host", "5 NIC>host", "tab:purple"))
DIRECTIONS = (("ping", "ping: client, node 0 -> server, node 1"), ("pong", "pong: server, node 1 -> client, node 0"))


# ------------------------------------------------------------------- runs

def run_program(cmd, env, out_json, timeout):
    """One hop_bench run, its output streamed -> (exit status, output, its JSON or None)."""
    if os.path.exists(out_json):
        os.remove(out_json)
    print("$ " + " ".join(cmd), flush=True)
    proc = start(cmd, env)
    try:
        rc, text = stream_output(proc, timeout)
    finally:
        stop(proc)
    result = None
    if rc == 0 and os.path.exists(out_json):
        with open(out_json) as f:
            result = json.load(f)
    return rc, text, result


def measure(args, build, out, data):
    """The floors and every protocol on a private cluster, into data; -> the exit status."""
    bench = os.path.join(build, "bin", "hop_bench")
    limit = 120 if args.quick else 900

    def run(cluster):
        path = os.path.join(out, "hop_floors.json")
        frc, text, floors = run_program([bench, "floors", "--json", path, *(["--quick"] if args.quick else [])],
                                        cluster.env(0), path, limit)
        data["floors"] = (floors or {}).get("floors") or {"failed": f"exit {frc}", "output": text}
        rc = 0 if floors else 1
        for proto in data["params"]["protocols"]:
            print(f"######## {proto}", flush=True)
            path = os.path.join(out, f"hop_{proto}.json")
            cmd = [bench, proto, "--json", path, "--iters", str(data["params"]["iters"])]
            prc, text, result = run_program(cmd + (["--ping-only"] if args.ping_only else []), cluster.env(0), path,
                                            limit)
            if result is None:
                print(f"{PROG}: {proto}: hop_bench exited {prc}", file=sys.stderr)
                data["runs"][proto] = {"failed": f"exit {prc}", "output": text}
                rc = 1
            else:
                data["runs"][proto] = {**result, "output": text}
                data["rows"].extend(result["rows"])
        status = cluster.status()
        if status:
            data["cluster_status_at_end"] = status
        return rc

    return on_private_cluster(build, CLUSTER, args.slot_size, (), PROG, run)


# ---------------------------------------------------------------- tables

def floor_lines(fl):
    if not fl or "failed" in fl:
        return ["floors: not measured" + (f" ({fl['failed']})" if fl else "")]
    pp, efd, nop = fl["pingpong"]["oneway_us"], fl["eventfd_pingpong"]["oneway_us"], fl["nic_nop_rtt_us"]
    return [f"floors (same run), us, median [min]: shared-memory ping-pong one-way {pp['median']:.2f} "
            f"[{pp['min']:.2f}]; blocking eventfd ping-pong one-way {efd['median']:.1f} [{efd['min']:.1f}]; "
            f"NOP post -> spinning NIC -> poll, round trip {nop['median']:.2f} [{nop['min']:.2f}]"]


def summary(data):
    rows = data["rows"]
    lines = [""]
    for key, title in DIRECTIONS:
        have = [r for r in rows if key in r]
        if not have:
            continue
        lines.append(f"== one-way latency by hop, us, medians ({title}); min / p99 / max in the JSON")
        lines.append(f"{'row':<11}{'RTT/2':>8}" + "".join(f"{label:>12}" for _, label, _ in HOPS)
                     + f"{'sum':>9}{'one-way':>9}{'stamps':>12}")
        for r in have:
            d = r[key]
            cells = "".join(f"{d['hops_us'][h]['median']:>12.2f}" for h, _, _ in HOPS)
            dropped = sum(d["dropped"].values())
            lines.append(f"{r['protocol'] + '/' + r['style']:<11}{r['rtt_half_us']['median']:>8.2f}{cells}"
                         f"{d['hop_median_sum_us']:>9.2f}{d['oneway_us']['median']:>9.2f}"
                         f"{str(d['used']) + '/' + str(r['measured']):>12}" + (f"  ({dropped} dropped)" if dropped
                                                                                else ""))
        lines.append("")
    lines.append("RTT/2 = ping one-way + server turnaround + pong one-way, halved; sum = sum of the hop medians "
                 "(the one-way column is the median of the per-message sums, host clock only)")
    lines.extend(floor_lines(data.get("floors")))
    for proto, run in data["runs"].items():
        if "failed" in run:
            lines.append(f"{proto}: FAILED ({run['failed']})")
    return "\n".join(lines)


# ----------------------------------------------------------------- plot

def plot(data, out):
    plt = pyplot()
    rows = data["rows"]
    written = []
    if not rows:
        return written
    dirs = [(k, t) for k, t in DIRECTIONS if any(k in r for r in rows)]
    fig, axes = plt.subplots(1, len(dirs), figsize=(7.5 * len(dirs), 0.55 * len(rows) + 2.6), squeeze=False,
                             sharex=True, sharey=True)
    names = [f"{r['protocol']}/{r['style']}" for r in rows]
    fl = data.get("floors") or {}
    refs = []
    if "pingpong" in fl:
        refs = [(fl["pingpong"]["oneway_us"]["median"], "gray", ":", "shared-memory ping-pong, one-way"),
                (fl["eventfd_pingpong"]["oneway_us"]["median"], "black", "--", "blocking eventfd ping-pong, one-way"),
                (fl["nic_nop_rtt_us"]["median"], "tab:brown", "-.", "NOP through a spinning NIC, round trip")]
    clamped = False
    for ax, (key, title) in zip(axes[0], dirs):
        ys = range(len(rows))
        left = [0.0] * len(rows)
        for h, label, color in HOPS:
            w = [max(0.0, r[key]["hops_us"][h]["median"]) if key in r else 0.0 for r in rows]
            clamped = clamped or any(key in r and r[key]["hops_us"][h]["median"] < 0 for r in rows)
            ax.barh(ys, w, left=left, color=color, height=0.6, label=label)
            left = [a + b for a, b in zip(left, w)]
        ax.scatter([r["rtt_half_us"]["median"] for r in rows], ys, marker="D", color="black", zorder=3, s=18,
                   label="RTT/2 median")
        for x, color, ls, label in refs:
            ax.axvline(x, color=color, ls=ls, lw=1.2, label=f"floor: {label} ({x:.2f} us)")
        ax.set_yticks(list(ys))
        ax.set_yticklabels(names)
        ax.set_xlabel("us (medians of each hop, stacked)")
        ax.set_title(title, fontsize=10)
        ax.grid(True, axis="x", alpha=0.3)
    axes[0][0].invert_yaxis()  # (the axis is shared: once) the first row on top
    note = "; negative medians (clock calibration error) drawn as 0" if clamped else ""
    fig.suptitle("one-way latency of one small message by hop (VMMC/VIPL 64 B, AM/FM 16 B), two nodes\n"
                 f"{data.get('host', '')}; load average at start {' '.join(data.get('loadavg_at_start', []))}{note}",
                 fontsize=10)
    axes[0][0].legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5 * len(dirs), -0.12), ncol=3)
    save(fig, out, "hops.png", written)
    return written


# ------------------------------------------------------------------ main

def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=default_build("hop_bench", ("build", "build-hop")),
                    help="build directory (bin/ulnic, bin/hop_bench)")
    ap.add_argument("--out", default="hop_bench_out", help="output directory for the JSON and the PNG")
    ap.add_argument("--quick", action="store_true", help="300 measured rounds per row (default 3000)")
    ap.add_argument("--protocols", default=",".join(PROTOCOLS), help="comma-separated of " + ",".join(PROTOCOLS))
    ap.add_argument("--iters", type=int, help="measured rounds per row (overrides --quick)")
    ap.add_argument("--ping-only", action="store_true", help="trace the pings only (not the pongs)")
    ap.add_argument("--slot-size", type=int, default=16, help="slot size in MiB for `ulnic cluster up`")
    ap.add_argument("--plot-only", metavar="JSON", help="redraw the PNG from a hop_bench.json and exit")
    args = ap.parse_args()
    out = out_dir(args, plot, __file__)
    protocols = [p for p in args.protocols.split(",") if p]
    bad = [p for p in protocols if p not in PROTOCOLS]
    if bad or not protocols:
        ap.error(f"--protocols: one or more of {','.join(PROTOCOLS)} (not {','.join(bad)})")
    build = check_build(args.build, ("ulnic", "hop_bench"), PROG)
    iters = args.iters or (300 if args.quick else 3000)

    t0 = time.time()
    data = {**header(PROG), "params": {"quick": args.quick, "protocols": protocols, "iters": iters,
                                       "ping_only": args.ping_only, "slot_size_mib": args.slot_size},
            "floors": None, "runs": {}, "rows": []}
    rc = measure(args, build, out, data)
    finish(data, t0)
    print(summary(data))
    print(runtime_line(data))
    json_path = os.path.join(out, "hop_bench.json")
    write_json(data, json_path)
    if data["rows"] and not draw(json_path, out, plot, __file__):
        rc = rc or 1
    return rc


if __name__ == "__main__":
    sys.exit(main())
