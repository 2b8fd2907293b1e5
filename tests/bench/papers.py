#!/usr/bin/env python3
"""The seed papers' experiments, reproduced by one command (issue 22): each paper's headline table beside the
values it published, in wall-clock time on this machine and in modelled time on the paper's NIC.

  tests/bench/papers.py NAME [--build DIR] [--out DIR] [--quick]     NAME: via, vmmc, fm, amudp, unet or all

Builds nothing. Runs the project's benchmark drivers, each on its own private cluster as it always does, and
reads their JSON:

  via    Begel, Buonadonna, Culler, Gay (AM over VIA): am_logp.py --transports vipl,native (LogP of raw VIPL and
         of AM over VIPL, the mapping cost delta, AM bulk bandwidth), vipl_bench.py (VIPL bandwidth against size),
         cost.py (the NIC's instructions per phase) and host_cost.py (the host's instructions per send call:
         VipPostSend, AM_Request4 over VIPL and natively): the overhead breakdowns;
  vmmc   Dubnicki, Bilas, Li, Philbin (VMMC on Myrinet): vmmc_bench.py (one-way latency against size, short
         inline path <= 128 B against the DMA path; one-way and bidirectional bandwidth as a fraction of the NIC's
         own copy rate; send overhead), cost.py, host_cost.py (vmmc_send_async);
  fm     Lauria, Pakin, Chien (FM 2.x): fm_bench.py --modes fm,mp (latency and bandwidth against size, N1/2, the
         MP layer's share of FM's bandwidth), cost.py;
  amudp  Bonachea (AM over UDP): am_logp.py --transports udp (LogP, latency and rate against the network depth,
         bulk bandwidth, latency against the drop rate 0 .. 30%);
  unet   von Eicken, Basu, Buch, Vogels (U-Net) and Welsh, Basu, von Eicken (U-Net/MM): hop_bench unet on a
         private cluster (round trip of a 40 B message; bandwidth of a depth-16 stream against size) and
         unet_mm_bench.py (registered segment against U-Net/MM's paged memory, by working set).

`all` runs each driver once (am_logp with all three transports) and writes OUT/report.html: one self-contained
page (every table, every PNG inline, the machine, the date, the commit and the floors of the same run).

Three value columns per row: published (tests/bench/published.py: only values found in a source, with the source;
"-" where none was found), ulnic wall-clock (this run's median on this machine: an emulated NIC, QEMU's TCG on a
shared core, so microseconds of scheduling, not of a LANai) and ulnic modelled (tests/bench/cost_model.py: the
firmware's exact instruction counts and the bytes moved, charged at the paper's NIC, preset lanai4 or lanai7;
"-" where the model has no counts for it, e.g. AM over UDP, which has no NIC). Modelled time is beside wall-clock
time, never instead of it.

Writes OUT/papers.json (every row, each driver's exit status and where its JSON is), OUT/<paper>/*.png (the
drivers' own plots, in the paper's layout, and one per paper with the modelled curves and the published points)
and OUT/raw/<driver>/ (each driver's JSON and log). A benchmark, not a test: the exit status says whether every
driver ran and verified its data, not whether a value came near the paper's. A quick run takes about 3 minutes on
a 2-core machine; a default run about 15.
"""
import argparse
import base64
import contextlib
import html
import json
import os
import re
import shutil
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cost  # noqa: E402
import cost_model as cm  # noqa: E402
import host_cost  # noqa: E402
from bench_common import (ROOT, check_build, default_build, draw, half_size, header, on_private_cluster,  # noqa: E402
                          out_dir, pyplot, save, size_axis, size_name, write_json)
from hop_bench import run_program  # noqa: E402
from published import PUBLISHED, SOURCES  # noqa: E402

PROG = "papers.py"
# The lines of a failed driver's log that say why: a program's own message
# ("am_logp: no reply after 30 s (...)", "am_logp.py: udp: ping exit 1, ..."),
# an exit status, a verdict.
WHY = re.compile(r"^[\w.]+( \w+)?: |exit -?\d|FAILED|NOT VERIFIED|Traceback|Error")
HERE = os.path.dirname(os.path.abspath(__file__))
PAPERS = ("via", "vmmc", "fm", "amudp", "unet")
TITLES = {
    "via": "VIA / AM over VIA (Begel, Buonadonna, Culler, Gay)",
    "vmmc": "VMMC on Myrinet (Dubnicki, Bilas, Li, Philbin)",
    "fm": "Fast Messages 2.x (Lauria, Pakin, Chien)",
    "amudp": "AMUDP: Active Messages over UDP (Bonachea)",
    "unet": "U-Net and U-Net/MM (von Eicken, Basu, Buch, Vogels; Welsh, Basu, von Eicken)",
}
# The modelled NIC of each paper: the VMMC paper's LANai 4 (PCI, 1.28 Gb/s Myrinet), the VIA paper's LANai 7.
# FM 2.x ran on Myrinet of the same years as VMMC (its LANai was not found: lanai4 is the nearer guess). AMUDP
# has no NIC; U-Net's was an ATM card (FORE SBA-200), for which there is no preset.
PRESET_OF = {"via": "lanai7", "vmmc": "lanai4", "fm": "lanai4", "amudp": None, "unet": None}
SHORT, PACKET = 64, cm.MTU  # cost.py's sizes: a short message, a full packet
UNET_SIZES = (1024, 4096, 16384, 65536)
LIMIT = 1800  # seconds per driver


# ------------------------------------------------------------------ the runs

def drivers(papers, quick):
    """{name: argv after the script} of the drivers the papers need, in the order they run."""
    q = ["--quick"] if quick else []
    out = {}
    transports = [t for t, p in (("udp", "amudp"), ("vipl", "via"), ("native", "via")) if p in papers]
    if transports:
        out["am_logp"] = ["am_logp.py", *q, "--transports", ",".join(transports)]
    if "via" in papers:
        out["vipl_bench"] = ["vipl_bench.py", *q]
    if "vmmc" in papers:
        out["vmmc_bench"] = ["vmmc_bench.py", *q]
    if "fm" in papers:
        out["fm_bench"] = ["fm_bench.py", *q, "--modes", "fm,mp"]
    if "unet" in papers:
        out["unet_mm_bench"] = ["unet_mm_bench.py", *q]
        out["unet_hop"] = None  # hop_bench on a private cluster, below
    if {"via", "vmmc", "fm"} & set(papers):
        rounds = ["--rounds", "10" if quick else "50"]
        out["cost_short"] = ["cost.py", *rounds, "--protocols", "vmmc,vipl,am", "--bytes", str(SHORT)]
        if {"via", "vmmc"} & set(papers):
            out["cost_packet"] = ["cost.py", *rounds, "--protocols", "vmmc,vipl", "--bytes", str(PACKET)]
    host = [p for paper in papers for p in HOST_PROTOS.get(paper, ())]
    if host:
        out["host_cost"] = ["host_cost.py", "--rounds", "50" if quick else "200", "--protocols", ",".join(host)]
    return out


def json_name(name):
    return {"unet_hop": "unet_hop.json", "cost_short": "cost.json", "cost_packet": "cost.json",
            "host_cost": "host_cost.json"}.get(
        name, f"{name}.json")


def run_unet_hop(build, out, quick, log):
    """hop_bench unet on a private two-node cluster: the latency rows, then a depth-16 stream per size ->
    exit status; writes OUT/unet_hop.json {"latency": hop_bench's JSON, "stream": [{bytes, msgs_per_s...}]}."""
    bench = os.path.join(build, "bin", "hop_bench")
    data = {"latency": None, "stream": []}
    rate = ["--samples", "4", "--msgs", "400"] if quick else ["--samples", "10", "--msgs", "2000"]

    def run(cluster):
        path = os.path.join(out, "hop_unet_latency.json")
        rc, text, res = run_program([bench, "unet", "--json", path, "--iters", "300" if quick else "3000"],
                                    cluster.env(0), path, 300)
        log.write(text)
        if res is None:
            return rc or 1
        data["latency"] = res
        for size in UNET_SIZES:
            path = os.path.join(out, f"hop_unet_stream_{size}.json")
            rc, text, res = run_program([bench, "unet", "--rate", "--bytes", str(size), "--styles", "wait", *rate,
                                         "--json", path], cluster.env(0), path, 300)
            log.write(text)
            if res is None:
                return rc or 1
            row = next(r for r in res["rows"] if r["style"] == "wait")
            data["stream"].append({"bytes": size, "msgs_per_s": row["msgs_per_s"],
                                   "mbps": row["msgs_per_s"]["median"] * size / 1e6})
        return 0

    rc = on_private_cluster(build, "papersunet", 16, (), PROG, run)
    with open(os.path.join(out, "unet_hop.json"), "w") as f:
        json.dump(data, f, indent=1)
    return rc


def run_all(build, out, papers, quick):
    """Every driver the papers need -> ({name: its JSON or None}, [{name, argv, exit, seconds, log}])."""
    res, runs = {}, []
    for name, argv in drivers(papers, quick).items():
        d = os.path.join(out, "raw", name)
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(d)
        log_path = os.path.join(d, "log.txt")
        t0 = time.time()
        print(f"{PROG}: {name} ...", end="", flush=True)
        with open(log_path, "w") as log:
            if argv is None:
                with contextlib.redirect_stdout(log), contextlib.redirect_stderr(log):
                    rc = run_unet_hop(build, d, quick, log)
            else:
                cmd = [sys.executable, os.path.join(HERE, argv[0]), "--build", build, "--out", d, *argv[1:]]
                log.write("$ " + " ".join(cmd) + "\n")
                log.flush()
                try:
                    rc = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, timeout=LIMIT).returncode
                except subprocess.TimeoutExpired:
                    rc = "timeout"
        path = os.path.join(d, json_name(name))
        res[name] = None
        if os.path.exists(path):
            with open(path) as f:
                res[name] = json.load(f)
        secs = round(time.time() - t0, 1)
        runs.append({"name": name, "argv": argv or ["hop_bench unet"], "exit": rc, "seconds": secs,
                     "json": os.path.relpath(path, out), "log": os.path.relpath(log_path, out)})
        print(f" exit {rc}, {secs} s" + ("" if rc == 0 else f" (see {log_path})"), flush=True)
    return res, runs


# ----------------------------------------------------------------- the model

def counts(res):
    """{(protocol, bytes): (send, recv)}: the NIC instructions of one message's ping, sending and receiving side
    (cost.py's budgeted totals of the last message of a run, exact)."""
    out = {}
    for name in ("cost_short", "cost_packet"):
        for r in (res.get(name) or {}).get("results", []):
            s = r["sides"]["ping"]
            out[(r["protocol"], SHORT if name == "cost_short" else PACKET)] = (s["send"]["total"], s["recv"]["total"])
    return out


def presets():
    """{name: parameters} of the cost model's presets."""
    return {name: cm.preset(name) for name in cm.PRESETS}


class Model:
    """The modelled times of one paper's preset, from the run's counts; None where a count is missing."""

    def __init__(self, paper, res):
        self.name = PRESET_OF[paper]
        self.p = presets().get(self.name) if self.name else None
        self.c = counts(res)
        self.host = {r["protocol"]: r for r in (res.get("host_cost") or {}).get("results", [])}

    def oneway(self, proto, size, inline):
        short = self.c.get((proto, SHORT if size <= cm.INLINE_MAX or proto == "am" else PACKET))
        if not self.p or not short:
            return None
        return cm.oneway_us(size, *short, self.p, inline)

    def host_us(self, proto):
        """The paper's host running one send call of `proto` (host_cost.py's instructions per call)."""
        r = self.host.get(proto)
        return cm.t_host(r["per_call"], self.p) if self.p and r else None

    def bandwidth(self, proto, size):
        first = self.c.get((proto, SHORT if size <= cm.INLINE_MAX else PACKET))
        packet = self.c.get((proto, PACKET))
        if not self.p or not first or not packet:
            return None
        return cm.bandwidth_mbps(size, first, packet, self.p)


# ------------------------------------------------------------------ the rows

def pub(paper, key):
    """The published entry, or None where no value was found (its note says why)."""
    e = PUBLISHED.get(paper, {}).get(key)
    return e if e and e.get("value") is not None else None


def row(measure, unit, wall, published=None, modelled=None, note=""):
    return {"measure": measure, "unit": unit, "wall": wall, "published": published, "modelled": modelled,
            "note": note}


def med(stat):
    return stat["median"] if stat else None


def pick(rows, **want):
    return next((r for r in rows or [] if all(r.get(k) == v for k, v in want.items())), None)


def am_run(res, transport):
    run = ((res.get("am_logp") or {}).get("runs") or {}).get(transport)
    return run if run and "failed" not in run and "unavailable" not in run else None


def logp(run):
    """LogP of an am_logp run (AM_Request4) or of raw VIPL."""
    if not run:
        return None
    return run.get("logp") or next((r for r in run.get("short", []) if r["args"] == 4 and "os_us" in r), None)


LOGP = (("rtt_half_us", "RTT/2", "rtt_half"), ("os_us", "o_s", "os"), ("or_us", "o_r", "or"), ("g_us", "g", "g"),
        ("L_us", "L", "L"))


def rows_via(res, m):
    out = []
    raw, amv = logp(am_run(res, "raw_vipl")), logp(am_run(res, "vipl"))
    l_model = m.oneway("vipl", 16, inline=False)
    notes = {"L": "modelled: the NICs and the wire (the NIC path of AM over VI is raw VI's)",
             "os": "modelled: the send call's host instructions (host_cost.py) at the paper's host clock"}
    for sys_key, label, lp, host in (("raw_vi", "raw VI (16 B send/echo)", raw, "vipl"),
                                     ("am_vi", "AM over VI (AM_Request4)", amv, "am_vipl")):
        for key, name, pkey in LOGP:
            modelled = l_model if pkey == "L" else m.host_us(host) if pkey == "os" else None
            out.append(row(f"{label}: {name}", "us", med(lp[key]) if lp else None, pub("via", f"{sys_key}.{pkey}"),
                           modelled, notes.get(pkey, "")))
    d = (res.get("am_logp") or {}).get("delta", {})
    hv, ha = m.host_us("vipl"), m.host_us("am_vipl")
    out.append(row("delta: AM over VI - raw VI, RTT/2", "us", med((d.get("vipl") or {}).get("rtt_half_us")),
                   pub("via", "delta"), ha - hv if hv is not None and ha is not None else None,
                   "modelled: the send call's extra host instructions only (the receive side's are not counted)"))
    out.append(row("native AM - raw VI, RTT/2 (ulnic's firmware AM)", "us",
                   med((d.get("native") or {}).get("rtt_half_us"))))
    bulk = am_run(res, "vipl")
    top = max((r for r in (bulk or {}).get("bulk", [])), key=lambda r: r["size"], default=None)
    if top:
        out.append(row(f"AM over VI bulk (AM_RequestXfer {size_name(top['size'])})", "MB/s",
                       top["bytes_per_s"]["median"] / 1e6, pub("via", "bulk.peak_mbps"),
                       m.bandwidth("vipl", top["size"]), "modelled: the VI data path at that size"))
    vb = (res.get("vipl_bench") or {}).get("run", {})
    for mode in ("send", "rdma"):
        r = max((x for x in vb.get("bandwidth", []) if x["mode"] == mode), key=lambda x: x["size"], default=None)
        if r:
            out.append(row(f"raw VI {mode} bandwidth {size_name(r['size'])}", "MB/s", r["bytes_per_s"]["median"] / 1e6,
                           None, m.bandwidth("vipl", r["size"])))
    return out


def rows_vmmc(res, m):
    out = []
    run = (res.get("vmmc_bench") or {}).get("run", {})
    lat = run.get("latency", [])
    for size in sorted({r["size"] for r in lat}):
        inline = size <= cm.INLINE_MAX
        for mode in ("poll", "notify"):
            r = pick(lat, mode=mode, size=size)
            first = size == min(x["size"] for x in lat) and mode == "poll"
            out.append(row(f"one-way latency {size_name(size)} ({'inline' if inline else 'DMA'}), {mode}", "us",
                           med(r["oneway_us"]) if r else None, pub("vmmc", "oneway_latency_short_us") if first else None,
                           m.oneway("vmmc", size, inline),
                           "published: the smallest message (one word); how its host waited is not in the text found"
                           if first else ""))
    bw = run.get("bandwidth", [])
    nic = {r["size"]: r["bytes_per_s"]["median"] for r in run.get("floors", {}).get("nic_copy", [])}
    top = max((r["size"] for r in bw), default=None)
    for mode in ("oneway", "bidir"):
        for r in sorted((x for x in bw if x["mode"] == mode), key=lambda x: x["size"]):
            p = None
            if r["size"] == top:
                p = pub("vmmc", "bandwidth_peak_mbps" if mode == "oneway" else "bandwidth_bidir_mbps")
            out.append(row(f"{'one-way' if mode == 'oneway' else 'bidirectional'} bandwidth {size_name(r['size'])}",
                           "MB/s", r["bytes_per_s"]["median"] / 1e6, p,
                           m.bandwidth("vmmc", r["size"]) if mode == "oneway" else None))
    r = pick(bw, mode="oneway", size=top)
    if r and nic.get(top) and m.p:
        out.append(row(f"one-way {size_name(top)} as a fraction of the copy/DMA limit", "x",
                       r["bytes_per_s"]["median"] / nic[top], pub("vmmc", "bandwidth_hw_fraction"),
                       m.bandwidth("vmmc", top) / m.p["dma_mbps"],
                       "wall: of the NIC's own node-local copy rate (same run); modelled: of the preset's DMA rate"))
    host = m.host_us("vmmc")  # host_cost.py counts 4 B sends
    for r in run.get("overhead", []):
        if r["size"] in (4, 4096):
            counted = r["size"] == host_cost.VMMC_BYTES and host is not None
            out.append(row(f"send overhead {size_name(r['size'])}, vmmc_send_async", "us", med(r["async_us"]),
                           pub("vmmc", "send_overhead_us") if r["size"] == 4 else None, host if counted else None,
                           "modelled: host_cost.py's instructions per 4 B vmmc_send_async at the paper's host clock"
                           if counted else ""))
    return out


def fm_n_half(bw):
    """FM's N1/2 against its largest size's rate (bench_common.half_size); None if not reached."""
    pts = sorted((r["size"], r["bytes_per_s"]["median"]) for r in bw if r["mode"] == "fm")
    return half_size(pts) if len(pts) > 1 else None


def rows_fm(res, m):
    out = []
    run = (res.get("fm_bench") or {}).get("run", {})
    lat, bw = run.get("latency", []), run.get("bandwidth", [])
    for r in sorted((x for x in lat if x["mode"] == "fm"), key=lambda x: x["size"]):
        out.append(row(f"FM one-way latency {size_name(r['size'])}", "us", med(r["oneway_us"]),
                       pub("fm", "latency_min_us") if r["size"] == min(x["size"] for x in lat) else None,
                       m.oneway("am", r["size"], inline=True) if r["size"] <= cm.INLINE_MAX else None,
                       "modelled: FM's packets are AM messages on the NIC (am_send/am_recv counts)"
                       if r["size"] <= cm.INLINE_MAX else ""))
    fm_bw = sorted((x for x in bw if x["mode"] == "fm"), key=lambda x: x["size"])
    for r in fm_bw:
        out.append(row(f"FM bandwidth {size_name(r['size'])}", "MB/s", r["bytes_per_s"]["median"] / 1e6,
                       pub("fm", "bandwidth_peak_mbps") if r is fm_bw[-1] else None))
    out.append(row("FM N1/2 (half of its largest size's rate)", "B", fm_n_half(bw), pub("fm", "n_half_bytes")))
    eff = sorted(run.get("efficiency", []), key=lambda x: x["size"])
    for r in eff:
        out.append(row(f"MP's share of FM's bandwidth, {size_name(r['size'])}", "x", r["percent"] / 100,
                       pub("fm", "mpi.share_of_fm") if r is eff[-1] else None,
                       note="published: 0.70-0.90 for the APIs layered on FM 2.x" if r is eff[-1] else ""))
    return out


def rows_amudp(res, m):
    out = []
    run = am_run(res, "udp")
    lp = logp(run)
    for key, name, pkey in LOGP:
        out.append(row(f"AM_Request4 over UDP: {name}", "us", med(lp[key]) if lp else None))
    for r in (run or {}).get("depth", []):
        out.append(row(f"network depth {r['depth']}: one-way latency (AM_Request{r['args']})", "us",
                       med(r["oneway_us"])))
        out.append(row(f"network depth {r['depth']}: msgs/s (AM_Request{r['args']})", "msgs/s",
                       med(r["msgs_per_s"])))
    for r in (run or {}).get("bulk", []):
        out.append(row(f"bulk AM_RequestXfer {size_name(r['size'])}", "MB/s", r["bytes_per_s"]["median"] / 1e6,
                       pub("amudp", "bulk_peak_mbps") if r is run["bulk"][-1] else None))
    for r in (res.get("am_logp") or {}).get("drop_sweep", []):
        out.append(row(f"RTT/2 of AM_Request0 at {r['drop'] * 100:g}% drop", "us",
                       med(r["rtt_half_us"]) if not r.get("failed") else None))
    return out


def rows_unet(res, m):
    out = []
    hop = (res.get("unet_hop") or {})
    lat = (hop.get("latency") or {}).get("rows", [])
    for style in ("poll", "wait"):
        r = pick(lat, style=style)
        out.append(row(f"round trip, 40 B message ({style})", "us", 2 * med(r["rtt_half_us"]) if r else None,
                       pub("unet", "rtt_us") if style == "poll" else None))
    stream = hop.get("stream", [])
    for r in stream:
        out.append(row(f"bandwidth, depth-16 stream of {size_name(r['bytes'])} messages", "MB/s", r["mbps"],
                       pub("unet", "bandwidth_peak_mbps") if r is stream[-1] else None))
    for r in (res.get("unet_mm_bench") or {}).get("rows", []):
        out.append(row(f"16 KiB sends, {r['config']}", "MB/s", r["median"],
                       note=f"{r['misses_per_msg']:.2f} NIC TLB misses per message" if r["mm"] else ""))
    return out


ROWS = {"via": rows_via, "vmmc": rows_vmmc, "fm": rows_fm, "amudp": rows_amudp, "unet": rows_unet}
# Whose overhead breakdowns each paper shows: cost.py's protocols (the NIC's phases) and host_cost.py's (the host's
# send calls).
NIC_PROTOS = {"via": ("vipl", "am"), "vmmc": ("vmmc",), "fm": ("am",)}
HOST_PROTOS = {"via": ("vipl", "am_vipl", "am_native"), "vmmc": ("vmmc",)}


def breakdown(res, m, protos):
    """The NIC's instructions per phase of one short message (cost.py, exact), per protocol and side, with the
    modelled microseconds at the paper's preset: the papers' overhead breakdowns, NIC half."""
    out = []
    for r in (res.get("cost_short") or {}).get("results", []):
        if r["protocol"] not in protos:
            continue
        for side in ("send", "recv"):
            s = r["sides"]["ping"][side]
            phases = {ph: s[ph] for ph in cost.PHASES if s.get(ph)}
            out.append({"protocol": r["protocol"], "side": side, "bytes": r["bytes"], "phases": phases,
                        "total": s["total"], "modelled_us": {ph: cm.t_nic(n, m.p) for ph, n in phases.items()}
                        if m.p else None,
                        "completion_share": (s.get("completion", 0) + s.get("verdict", 0)) / s["total"]
                        if s["total"] else None})
    return out


def host_breakdown(m, paper):
    """The host's instructions per send call (host_cost.py), with the modelled microseconds at the paper's host:
    the papers' overhead breakdowns, host half."""
    out = []
    for proto in HOST_PROTOS.get(paper, ()):
        r = m.host.get(proto)
        if r:
            out.append({"protocol": proto, "function": r["function"], "calls": r["calls"],
                        "per_call": r["per_call"], "modelled_us": m.host_us(proto), "where": r["where"]})
    return out


# ---------------------------------------------------------------- the plots

def curve(ax, xs, ys, *fmt, **kw):
    pts = [(x, y) for x, y in zip(xs, ys) if y is not None]
    if pts:
        ax.plot([p[0] for p in pts], [p[1] for p in pts], *fmt, **kw)


def bw_panel(ax, sizes, published, what):
    """A bandwidth-against-size panel's finish: the published value as a line (if any), log axes, the legend."""
    if published:
        ax.axhline(published["value"], color="black", ls="--", label=f"published {what} {published['value']} MB/s")
    ax.set_yscale("log")
    size_axis(ax, sizes, "message size")
    ax.set_ylabel("MB/s (log)")
    ax.legend(fontsize=8)


def plot_paper(paper, res, m, out):
    """One PNG per paper: the run's medians against size, the modelled curve and the published points."""
    plt = pyplot()
    written = []
    label = f"modelled ({m.name})" if m.name else None
    if paper == "vmmc":
        run = (res.get("vmmc_bench") or {}).get("run", {})
        fig, (a, b) = plt.subplots(1, 2, figsize=(12, 4.5))
        sizes = sorted({r["size"] for r in run.get("latency", [])})
        for mode, style in (("poll", "o-"), ("notify", "s--")):
            rs = [pick(run.get("latency"), mode=mode, size=s) for s in sizes]
            curve(a, sizes, [med(r["oneway_us"]) if r else None for r in rs], style, label=f"ulnic {mode}")
        grid = sorted(set(sizes) | {2 ** k for k in range(2, 13)})
        curve(a, grid, [m.oneway("vmmc", s, s <= cm.INLINE_MAX) for s in grid], color="tab:green", label=label)
        pp = pub("vmmc", "oneway_latency_short_us")
        if pp and sizes:
            a.plot([sizes[0]], [pp["value"]], "k*", ms=12, label="published")
        a.set_yscale("log")
        size_axis(a, grid, "message size")
        a.set_ylabel("one-way latency, us (log)")
        a.legend(fontsize=8)
        bws = sorted({r["size"] for r in run.get("bandwidth", [])})
        for mode in ("oneway", "bidir"):
            rs = [pick(run.get("bandwidth"), mode=mode, size=s) for s in bws]
            curve(b, bws, [r["bytes_per_s"]["median"] / 1e6 if r else None for r in rs], marker="o",
                  label=f"ulnic {mode}")
        grid = sorted(set(bws) | {4 ** k for k in range(3, 11)})
        curve(b, grid, [m.bandwidth("vmmc", s) for s in grid], color="tab:green", label=label)
        bw_panel(b, grid, pub("vmmc", "bandwidth_peak_mbps"), "peak")
    elif paper == "fm":
        run = (res.get("fm_bench") or {}).get("run", {})
        fig, (a, b) = plt.subplots(1, 2, figsize=(12, 4.5))
        for mode in ("fm", "mp"):
            rs = sorted((r for r in run.get("bandwidth", []) if r["mode"] == mode), key=lambda r: r["size"])
            curve(a, [r["size"] for r in rs], [r["bytes_per_s"]["median"] / 1e6 for r in rs], marker="o",
                  label=f"ulnic {mode.upper()}")
        bw_panel(a, {r["size"] for r in run.get("bandwidth", [])}, pub("fm", "bandwidth_peak_mbps"), "FM 2.x peak")
        eff = sorted(run.get("efficiency", []), key=lambda r: r["size"])
        curve(b, [r["size"] for r in eff], [r["percent"] / 100 for r in eff], marker="o", label="ulnic MP / FM")
        pp = pub("fm", "mpi.share_of_fm")
        if pp:
            b.axhspan(*pp["value"], color="gray", alpha=0.25, label="published: 0.70-0.90")
        size_axis(b, {r["size"] for r in eff} or {16}, "message size")
        b.set_ylabel("share of FM's bandwidth")
        b.legend(fontsize=8)
    elif paper == "via":
        bd = breakdown(res, m, ("vipl", "am"))
        if not bd:
            return written
        fig, (a, b) = plt.subplots(1, 2, figsize=(12, 4.5))
        phases = cost.PHASES
        names = [f"{r['protocol']} {r['side']}" for r in bd]
        left = [0.0] * len(bd)
        for ph in phases:
            xs = [r["phases"].get(ph, 0) for r in bd]
            if any(xs):
                a.barh(names, xs, left=left, label=ph)
                left = [x + y for x, y in zip(left, xs)]
        a.set_xlabel(f"NIC instructions per {bd[0]['bytes']} B message (exact)" +
                     (f"; x {1 / m.p['clock_mhz'] * m.p['cpi']:.4f} us each at {m.name}" if m.p else ""))
        a.legend(fontsize=7, ncol=5, loc="upper center", bbox_to_anchor=(0.5, -0.15))
        am = am_run(res, "vipl")
        for lbl, r in (("AM over VI", am), ("native AM", am_run(res, "native"))):
            rs = sorted((r or {}).get("bulk", []), key=lambda x: x["size"])
            curve(b, [x["size"] for x in rs], [x["bytes_per_s"]["median"] / 1e6 for x in rs], marker="o",
                  label=f"ulnic {lbl} bulk")
        grid = [4 ** k for k in range(6, 11)]
        curve(b, grid, [m.bandwidth("vipl", s) for s in grid], color="tab:green", label=f"{label}, VI data path")
        bw_panel(b, grid, pub("via", "bulk.peak_mbps"), "plateau")
    elif paper == "unet":
        hop = res.get("unet_hop") or {}
        mm = (res.get("unet_mm_bench") or {}).get("rows", [])
        fig, (a, b) = plt.subplots(1, 2, figsize=(12, 4.5))
        st = hop.get("stream", [])
        curve(a, [r["bytes"] for r in st], [r["mbps"] for r in st], marker="o", label="ulnic U-Net, depth 16")
        bw_panel(a, {r["bytes"] for r in st} or {1024}, pub("unet", "bandwidth_peak_mbps"), "(ATM)")
        if mm:
            b.barh([r["config"] for r in mm], [r["median"] for r in mm],
                   color=["tab:orange" if r["mm"] else "tab:blue" for r in mm])
            b.invert_yaxis()
            b.set_xlabel("MB/s, 16 KiB sends (median)")
    else:
        return written
    fig.suptitle(TITLES[paper], fontsize=10)
    fig.tight_layout()
    save(fig, out, f"{paper}_model.png", written)
    return written


# The drivers' own PNGs that show each paper's figures.
DRIVER_PNGS = {
    "via": (("am_logp", "logp.png"), ("am_logp", "bandwidth.png"), ("vipl_bench", "bandwidth_vs_size.png")),
    "vmmc": (("vmmc_bench", "latency_vs_size.png"), ("vmmc_bench", "bandwidth_vs_size.png"),
             ("vmmc_bench", "overhead_vs_size.png")),
    "fm": (("fm_bench", "latency.png"), ("fm_bench", "bandwidth.png"), ("fm_bench", "efficiency.png")),
    "amudp": (("am_logp", "depth.png"), ("am_logp", "drop.png"), ("am_logp", "bandwidth.png")),
    "unet": (),
}


def load_raw(data, out):
    """{driver: its JSON or None}, read again from OUT (papers.json names each run's file)."""
    res = {}
    for r in data["runs"]:
        path = os.path.join(out, r["json"])
        res[r["name"]] = None
        if os.path.exists(path):
            with open(path) as f:
                res[r["name"]] = json.load(f)
    return res


def plot(data, out):
    """Each paper's own PNG (OUT/<paper>/<paper>_model.png) from the runs' JSON: bench_common.draw's plot."""
    res, written = load_raw(data, out), []
    for paper in data["papers"]:
        d = os.path.join(out, paper)
        os.makedirs(d, exist_ok=True)
        written += plot_paper(paper, res, Model(paper, res), d)
    return written


def copy_driver_pngs(paper, out):
    """The drivers' own plots of the paper into OUT/<paper>/ -> every PNG there, relative to OUT (its own first)."""
    d = os.path.join(out, paper)
    os.makedirs(d, exist_ok=True)
    for driver, name in DRIVER_PNGS[paper]:
        src = os.path.join(out, "raw", driver, name)
        if os.path.exists(src):
            shutil.copyfile(src, os.path.join(d, f"{driver}_{name}"))
    names = sorted(os.listdir(d), key=lambda n: (n != f"{paper}_model.png", n))
    return [os.path.join(paper, n) for n in names if n.endswith(".png")]


# ---------------------------------------------------------------- output

def num(v, unit=""):
    if v is None:
        return "-"
    if isinstance(v, (tuple, list)):
        return "..".join(num(x) for x in v)
    if unit == "msgs/s" or abs(v) >= 1000:
        return f"{v:,.0f}"
    return f"{v:.3g}" if abs(v) < 10 else f"{v:.1f}"


def pub_cell(p):
    return num(p["value"]) if p else "-"


def table_text(paper, section):
    lines = [f"== {TITLES[paper]}", f"   {SOURCES.get(paper, {}).get('cite', '')}"]
    model = section["preset"] or "none"
    lines.append(f"{'measure':<58}{'unit':<7}{'published':>11}{'wall-clock':>12}{'modelled':>10}  "
                 f"(modelled: {model})")
    for r in section["rows"]:
        lines.append(f"{r['measure']:<58}{r['unit']:<7}{pub_cell(r['published']):>11}{num(r['wall'], r['unit']):>12}"
                     f"{num(r['modelled'], r['unit']):>10}" + (f"  {r['note']}" if r["note"] else ""))
    for h in section.get("host", []):
        where = ", ".join(f"{w['function']} {w['instructions_per_call']:.0f}" for w in h["where"][:4])
        mod = f" = {h['modelled_us']:.2f} us" if h["modelled_us"] is not None else ""
        lines.append(f"   host: {h['protocol']:<10}{h['function']:<17}{h['per_call']:>8.0f} instructions per call{mod}"
                     f"   ({where})")
    if section["breakdown"]:
        lines.append("   NIC instructions per phase of one short message (exact), modelled us at the preset:")
        for b in section["breakdown"]:
            parts = "  ".join(f"{ph} {n}" for ph, n in b["phases"].items())
            mod = f" = {sum(b['modelled_us'].values()):.2f} us" if b["modelled_us"] else ""
            lines.append(f"   {b['protocol']:<5}{b['side']:<5}{b['total']:>6}{mod}   ({parts}); completion and "
                         f"verdict {100 * b['completion_share']:.0f}%")
    return "\n".join(lines)


def git_commit():
    try:
        return subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              timeout=10).stdout.strip() or None
    except OSError:
        return None


def floors_of(res):
    """The host floors the drivers measured in this run: {label: (value, unit)}."""
    out = {}
    udp = am_run(res, "udp") or am_run(res, "vipl") or {}
    pp = (udp.get("floors") or {}).get("pingpong", {}).get("oneway_us")
    if pp:
        out["shared-memory ping-pong, one-way (am_logp)"] = (pp["median"], "us")
    fl = ((res.get("vmmc_bench") or {}).get("run") or {}).get("floors", {})
    for key, label in (("memcpy", "host memcpy"), ("nic_copy", "NIC's own node-local copy")):
        rs = fl.get(key, [])
        if rs:
            top = max(rs, key=lambda r: r["size"])
            out[f"{label}, {size_name(top['size'])} (vmmc_bench)"] = (top["bytes_per_s"]["median"] / 1e6, "MB/s")
    return out


def machine_of(res):
    for name in ("vmmc_bench", "vipl_bench", "fm_bench"):
        m = ((res.get(name) or {}).get("run") or {}).get("machine")
        if m:
            return m
    for t in ("udp", "vipl", "native"):
        m = (am_run(res, t) or {}).get("machine")
        if m:
            return m
    return None


def report_html(data, out):
    """OUT/report.html: self-contained (the PNGs inline)."""
    e = html.escape
    parts = ["<!doctype html><html><head><meta charset='utf-8'><title>ulnic: the papers' experiments</title>",
             "<style>body{font-family:sans-serif;max-width:1200px;margin:auto}table{border-collapse:collapse}"
             "td,th{border:1px solid #ccc;padding:2px 6px;font-size:13px}td.n{text-align:right}"
             "img{max-width:100%}.note{color:#555;font-size:12px}</style></head><body>",
             "<h1>ulnic: the seed papers' experiments</h1>",
             f"<p>{e(data['date'])}, commit {e(str(data.get('commit')))}, mode {e(data['mode'])}; "
             f"host {e(data['host'])}.</p>"]
    m = data.get("machine") or {}
    parts.append(f"<p>Machine: {e(str(m.get('nproc')))} CPUs, {e(str(m.get('cpu_model')))}, "
                 f"{e(str(m.get('kernel')))}; load average at start {e(' '.join(data['loadavg_at_start']))}.</p>")
    parts.append("<h3>Floors measured in the same run</h3><table><tr><th>floor</th><th>value</th></tr>")
    for label, (v, unit) in data["floors"].items():
        parts.append(f"<tr><td>{e(label)}</td><td class=n>{e(num(v, unit))} {e(unit)}</td></tr>")
    parts.append("</table><p class=note>Columns: <b>published</b>, the paper's value where a source was found "
                 "(tests/bench/published.py names it); <b>wall-clock</b>, this run's median on an emulated NIC; "
                 "<b>modelled</b>, the firmware's exact instruction counts and the bytes moved charged at the "
                 "paper's NIC (tests/bench/cost_model.py, docs/papers.md). Modelled time is shown beside "
                 "wall-clock time, never instead of it.</p>")
    for name, preset in data["presets"].items():
        parts.append(f"<p class=note>preset {e(name)}: " + ", ".join(
            f"{k} {v:g}" for k, v in preset.items() if isinstance(v, float)) + "</p>")
    for paper, sec in data["papers"].items():
        src = SOURCES.get(paper, {})
        parts.append(f"<h2 id='{paper}'>{e(TITLES[paper])}</h2><p class=note>{e(src.get('cite', ''))} "
                     f"Source of the published values: {e(src.get('found', ''))}.</p>")
        parts.append(f"<table><tr><th>measure</th><th>unit</th><th>published</th><th>wall-clock</th>"
                     f"<th>modelled ({e(sec['preset'] or 'none')})</th><th>note</th></tr>")
        for r in sec["rows"]:
            p = r["published"]
            ptitle = e(f"{p['where']}; {p['note']}") if p else ""
            parts.append(f"<tr><td>{e(r['measure'])}</td><td>{e(r['unit'])}</td>"
                         f"<td class=n title='{ptitle}'>{e(pub_cell(p))}</td>"
                         f"<td class=n>{e(num(r['wall'], r['unit']))}</td>"
                         f"<td class=n>{e(num(r['modelled'], r['unit']))}</td><td class=note>{e(r['note'])}</td></tr>")
        parts.append("</table>")
        if sec.get("host"):
            parts.append("<p>Host instructions per send call (callgrind, user space):</p><table><tr><th>protocol"
                         "</th><th>function</th><th>per call</th><th>modelled us</th><th>where they went</th></tr>")
            for h in sec["host"]:
                where = ", ".join(f"{w['function']} {w['instructions_per_call']:.0f}" for w in h["where"])
                mod = num(h["modelled_us"]) if h["modelled_us"] is not None else "-"
                parts.append(f"<tr><td>{e(h['protocol'])}</td><td>{e(h['function'])}</td>"
                             f"<td class=n>{h['per_call']:.0f}</td><td class=n>{e(mod)}</td><td>{e(where)}</td></tr>")
            parts.append("</table>")
        if sec["breakdown"]:
            parts.append("<p>NIC instructions per phase of one short message (exact):</p><table><tr><th>protocol"
                         "</th><th>side</th><th>total</th><th>modelled us</th><th>phases</th>"
                         "<th>completion + verdict</th></tr>")
            for b in sec["breakdown"]:
                mod = num(sum(b["modelled_us"].values())) if b["modelled_us"] else "-"
                parts.append(f"<tr><td>{e(b['protocol'])}</td><td>{e(b['side'])}</td><td class=n>{b['total']}</td>"
                             f"<td class=n>{e(mod)}</td><td>{e(', '.join(f'{k} {v}' for k, v in b['phases'].items()))}"
                             f"</td><td class=n>{100 * b['completion_share']:.0f}%</td></tr>")
            parts.append("</table>")
        for png in sec["pngs"]:
            with open(os.path.join(out, png), "rb") as f:
                b64 = base64.b64encode(f.read()).decode()
            parts.append(f"<p><img alt='{e(png)}' src='data:image/png;base64,{b64}'></p>")
    parts.append("<h3>Runs</h3><table><tr><th>driver</th><th>exit</th><th>seconds</th></tr>")
    for r in data["runs"]:
        parts.append(f"<tr><td>{e(' '.join(r['argv']))}</td><td>{e(str(r['exit']))}</td>"
                     f"<td class=n>{r['seconds']}</td></tr>")
    parts.append("</table></body></html>")
    path = os.path.join(out, "report.html")
    with open(path, "w") as f:
        f.write("\n".join(parts))
    return path


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("paper", nargs="?", choices=(*PAPERS, "all"))
    ap.add_argument("--build", default=default_build("ulnic", ("build",)))
    ap.add_argument("--out", default="papers_out", help="output directory")
    ap.add_argument("--quick", action="store_true", help="the drivers' quick runs (about 3 minutes in all)")
    ap.add_argument("--plot-only", metavar="JSON", help="redraw the papers' own PNGs from a papers.json and exit")
    a = ap.parse_args()
    out = out_dir(a, plot, __file__)
    if not a.paper:
        ap.error("which paper: one of " + ", ".join((*PAPERS, "all")))
    papers = PAPERS if a.paper == "all" else (a.paper,)
    build = check_build(a.build, ("ulnic", "hop_bench", "am_logp", "vipl_logp", "vmmc_bench", "vipl_bench",
                                  "fm_bench", "unet_worker", "vmmc_tight", "vipl_tight", "am_tight"), PROG)
    for paper in papers:
        shutil.rmtree(os.path.join(out, paper), ignore_errors=True)
    t0 = time.time()
    data = {**header(PROG), "mode": "quick" if a.quick else "default", "commit": git_commit(),
            "papers": {}, "presets": presets()}
    res, data["runs"] = run_all(build, out, papers, a.quick)
    data["machine"] = machine_of(res)
    data["floors"] = {k: list(v) for k, v in floors_of(res).items()}
    for paper in papers:
        m = Model(paper, res)
        data["papers"][paper] = {"preset": m.name, "rows": ROWS[paper](res, m),
                                 "breakdown": breakdown(res, m, NIC_PROTOS.get(paper, ())),
                                 "host": host_breakdown(m, paper), "pngs": []}
    json_path = os.path.join(out, "papers.json")
    write_json(data, json_path)
    drawn = draw(json_path, out, plot, __file__)
    for paper, sec in data["papers"].items():
        sec["pngs"] = copy_driver_pngs(paper, out)
        print()
        print(table_text(paper, sec))
    data["runtime_s"] = round(time.time() - t0, 1)
    failed = [r["name"] for r in data["runs"] if r["exit"] != 0]
    data["completed_and_verified"] = not failed
    write_json(data, json_path)
    if a.paper == "all":
        print(f"wrote {report_html(data, out)}")
    print(f"{PROG}: {len(data['runs'])} driver runs in {data['runtime_s']:.0f} s; "
          + ("every one completed and verified its data" if not failed else f"FAILED: {', '.join(failed)}"))
    # A failed driver's own words, where they outlive OUT (a test's assertion shows the end of stderr).
    for r in data["runs"]:
        if r["exit"] != 0:
            with open(os.path.join(out, r["log"]), errors="replace") as f:
                text = f.read()
            why = [ln for ln in text.splitlines() if WHY.search(ln)][-20:]
            # The why last: a test's assertion shows the end of stderr.
            print(f"{PROG}: {r['name']} exited {r['exit']}; the end of its log:\n{text[-1500:]}\n"
                  f"{PROG}: the lines of {r['name']}'s log that say why:\n" + "\n".join(why), file=sys.stderr)
    return 0 if not failed and drawn else 1


if __name__ == "__main__":
    sys.exit(main())
