#!/usr/bin/env python3
"""Benchmark summary: every protocol against its reference and the floors, in one run and one table.

Builds nothing. Brings up one private two-node cluster (`ulnic cluster up -n 2
--slot-size 64` in its own ULNIC_RUNTIME_DIR; bench_common.on_private_cluster)
and runs the benchmark programs against it, client on node 0 and server on
node 1, in rounds (--quick: 3 of fewer samples each; default: 6): each
figure is the median of its rounds' medians, and every ratio is of two such
figures of the same run:

  floors     hop_bench floors (shared-memory and blocking eventfd ping-pongs,
             one-way = RTT/2; a NOP through a spinning NIC), slot_bench
             --sections floors,wake (an eventfd round trip after the same idle
             pause as the wake-ups; section 4: a NOP posted to a dormant slot
             whose NIC sleeps in WFI, reaped by spin-polling and by a blocking
             Nic::wait), vmmc_bench's memcpy and NIC copy floors;
  latency    hop_bench vmmc|vipl|am|fm|unet: RTT/2 of one small message (VMMC
             and VIPL 64 B, native AM and FM 16 B, U-Net 40 B) with the API's
             blocking wait and with a tight poll loop; am_logp over UDP:
             AM_Request4's RTT/2;
  rate       hop_bench vmmc|vipl|fm|unet --rate (depth 16: VMMC 64 B inline
             notifying sends, VIPL 64 B sends, FM 16 B messages, U-Net 40 B
             inline sends; a message counts once the receiver checked it),
             am_logp's depth section at depth 16 with AM_Request4 over UDP,
             natively (with am_logp.py's poll back-off, and with AM_Poll
             called back to back as AM-2 programs spin) and over VIPL;
  bandwidth  hop_bench unet --rate --bytes 65536 (a depth-16 stream of 64 KiB
             messages into free buffers, blocking wait: msgs/s x 64 KiB),
             vmmc_bench one-way, vipl_bench send and RDMA write, am_logp
             AM_RequestXfer (native and over VIPL), fm_bench fm and mp at
             64 KiB and 1 MiB; fm_bench gm get and put at 64 KiB (K = 32
             issued, then gm_sync: 64 KiB / time per operation); FM's N1/2
             from fm_bench's bandwidth against size (the size at which FM
             reaches half its 1 MiB rate, interpolated on log2 size).

AM over UDP needs no emulator; it runs while the cluster is up (and idle), as
every other figure does. Every program's own data verification stays on.

It prints a table, one row per target: the protocol, the measure, its value,
the reference (which, and its value), the ratio, the ratio's spread over the
rounds (min..max of each round's value over the same round's reference), the
target and whether it is met; then where a one-way message's time goes
(hop_bench's hops) and where a message's CPU goes at depth 16 (hop_bench --rate and am_logp's depth section
meter both processes, both NICs' QEMUs and the machine's busy time over
their measured runs: bench_common.h CpuMeter; a NIC polls until its spin
window ends, so a busy machine is not always a saturated one); then where
a stream's CPU goes at 64 KiB and 1 MiB (vmmc_bench, vipl_bench, am_logp's
bulk section and fm_bench meter the same parts over each bandwidth row: the
share of a CPU each kept busy; a part near 1 was busy or spinning -- a NIC
polls between bursts -- and none near it means the hand-offs bound it);
then the floors, the machine, the date and the mode. Targets (medians,
this run): one-way latency <= 1.5x the blocking eventfd one-way floor
(stretch: below AM over UDP's RTT/2); waking a sleeping NIC <= 2x the eventfd
floor (spin-poll: the NIC alone sleeps, against the one-way floor; blocking
wait: the NIC and the host sleep, against the round trip); small messages at
depth 16 >= 3x AM over UDP's msgs/s; >= 64 KiB >= 80% of VMMC's one-way rate
at the same size; FM's N1/2 <= 1 KiB; VMMC one-way at 1 MiB >= 90% of the NIC
copy floor. Rows marked info have no target. Last, the link's counters over
the whole run (summary.json "link"): the direct fabric drops nothing (a full
ring holds the sender back), so every retransmission is spurious, a timeout
that fired while a NIC was descheduled; target under 1% of data packets.

Writes OUT/summary.json (every figure with each round's value and where it
came from: program, arguments, section, row; the runs, their exit status and
seconds), OUT/summary.png (latency against the floors, message rate against
3x UDP, bandwidth as a fraction of VMMC's one-way rate with the 0.8 line;
matplotlib, else drawn by /usr/bin/python3), OUT/summary.log (everything the
programs printed) and OUT/raw/rN/*.json (each program's JSON). A benchmark,
not a test: the exit status is 0 when every run completed and every data
check passed, whatever the targets say; 1 otherwise.

A quick run (--quick) takes about a minute on a 2-core machine, a default run
about five.

  tests/bench/summary.py [--build DIR] [--out DIR] [--quick] [--rounds N] [--verbose]
  tests/bench/summary.py --plot-only OUT/summary.json [--out DIR]   (redraw the PNG)
"""
import argparse
import contextlib
import json
import os
import shutil
import statistics
import sys
import tempfile
import time

from am_logp import Runner
from bench_common import (check_build, default_build, draw, finish, half_size, header, on_private_cluster, out_dir,
                          pyplot, run_client_server, runtime_line, save, size_name, write_json)
from fm_bench import Jobs, stats
from hop_bench import run_program

PROG = "summary.py"
CLUSTER = "summary"
PROGRAMS = ("ulnic", "hop_bench", "slot_bench", "am_logp", "vmmc_bench", "vipl_bench", "fm_bench")
KIB64, MIB = 64 << 10, 1 << 20
BW_SIZES = (KIB64, MIB)
FM_SIZES = (64, 256, 512, 1024, 2048, 4096, 16384, KIB64, MIB)  # FM against size: N1/2
NIC_POLL = ["--poll-yield", "50", "--poll-sleep-us", "20"]      # am_logp.py's back-off for the NIC runs
TIGHT_POLL = ["--poll-yield", "4000000000"]                     # AM_Poll back to back, as AM-2 programs spin
PROTOS = (("vmmc", "VMMC"), ("vipl", "VIPL"), ("am", "native AM"), ("fm", "FM"), ("unet", "U-Net"))
STYLES = (("wait", "blocking wait"), ("poll", "tight poll"))


def sizes_arg(sizes):
    return ",".join(str(s) for s in sizes)


# --------------------------------------------------------------- the runs
#
# A run: its name, how it runs, its arguments, and what it gives: (key,
# value, unit, section, row) for each figure, from its JSON.

def pick(rows, **want):
    """The first row with every key = value; KeyError if none."""
    for r in rows:
        if all(r.get(k) == v for k, v in want.items()):
            return r
    raise KeyError(f"no row {want}")


def mbps(row):
    """A row's median bytes_per_s as MB/s."""
    return row["bytes_per_s"]["median"] / 1e6


def from_hop_floors(res):
    fl, efd = res["floors"], res["floors"]["eventfd_pingpong"]
    yield "floor.pp_oneway", fl["pingpong"]["oneway_us"]["median"], "us", "floors", "pingpong.oneway_us"
    yield "floor.efd_oneway", efd["oneway_us"]["median"], "us", "floors", "eventfd_pingpong.oneway_us"
    yield "floor.efd_oneway_min", efd["oneway_us"]["min"], "us", "floors", "eventfd_pingpong.oneway_us (min)"
    yield "floor.efd_rtt", efd["rtt_us"]["median"], "us", "floors", "eventfd_pingpong.rtt_us"
    yield "floor.nop_rtt", fl["nic_nop_rtt_us"]["median"], "us", "floors", "nic_nop_rtt_us"


def from_slot(res):
    efd = res["floors"]["eventfd_pingpong"]
    yield "floor.efd_idle_rtt", efd["idle_rtt_us"]["median"], "us", "1. floors", \
        f"eventfd_pingpong.idle_rtt_us (after {efd['idle_ms']} ms idle)"
    for key, mode in (("wake.spin", "spin-poll"), ("wake.block", "blocking wait (spin 0)")):
        yield key, pick(res["wakeup"], mode=mode)["us"]["median"], "us", "4. wake-up", f"wakeup: {mode}"


HOPS = (("post_to_nic", "post -> NIC"), ("nic_tx", "sending NIC"), ("fabric", "fabric"),
        ("nic_rx", "receiving NIC"), ("to_host", "NIC -> host"))


def from_hop(proto):
    def get(res):
        for style, _ in STYLES:
            row = pick(res["rows"], style=style)
            yield f"lat.{proto}.{style}", row["rtt_half_us"]["median"], "us", "rows", f"{proto}/{style}: rtt_half_us"
            yield f"hop.{proto}.{style}.oneway", row["ping"]["oneway_us"]["median"], "us", "rows", \
                f"{proto}/{style}: ping.oneway_us"
            for hop, _ in HOPS:  # a hop a round's stamps could not give is left out, not zero
                if hop in row["ping"].get("hops_us", {}):
                    yield f"hop.{proto}.{style}.{hop}", row["ping"]["hops_us"][hop]["median"], "us", "rows", \
                        f"{proto}/{style}: ping.hops_us.{hop}"
    return get


CPU_PARTS = ("host_client", "nic_client", "nic_server", "host_server", "other", "machine")


# The rate rows whose CPU is broken down, by their figure key: AM over UDP first, the reference.
CPU_ROWS = (("am_udp", "AM over UDP"), ("am_native", "native AM, back-off poll"),
            ("am_native.tight", "native AM, tight AM_Poll"), ("am_vipl", "AM over VIPL"),
            ("vmmc.wait", "VMMC inline, blocking wait"), ("vmmc.poll", "VMMC inline, tight poll"),
            ("vipl.wait", "VIPL send, blocking wait"), ("vipl.poll", "VIPL send, tight poll"),
            ("fm.wait", "FM, blocking wait"), ("fm.poll", "FM, tight poll"),
            ("unet.wait", "U-Net, blocking wait"), ("unet.poll", "U-Net, tight poll"))


def metered(kind, key, row, section, where):
    """A row's CpuMeter figures, if it has them: kind "cpu" (a rate row: us of CPU per message of the hosts,
    the NICs' QEMUs, the rest and the machine; its busy CPUs) or "share" (a bulk row: the CPUs each kept busy)."""
    field, parts, unit = ("cpu_us_per_msg", CPU_PARTS, "us") if kind == "cpu" else ("cpu_shares", SHARE_PARTS, "CPUs")
    for part in parts:
        if part in row.get(field, {}):
            yield f"{kind}.{key}.{part}", row[field][part], unit, section, f"{where}: {field}.{part}"
    if kind == "cpu" and "busy_cpus" in row:
        yield f"cpu.{key}.busy_cpus", row["busy_cpus"], "CPUs", section, f"{where}: busy_cpus"


SHARE_PARTS = ("host_client", "nic_client", "nic_server", "host_server", "machine")

# The bandwidth rows whose CPU is broken down (the share of a CPU each part kept busy), by their figure key.
SHARE_ROWS = (("vmmc", "VMMC one-way"), ("vipl_send", "VIPL send"), ("vipl_rdma", "VIPL RDMA write"),
              ("am_native", "native AM_RequestXfer"), ("am_vipl", "AM over VIPL AM_RequestXfer"),
              ("fm", "FM stream"), ("mp", "MP over FM, MP_Isend window"))


def from_rate(proto):
    def get(res):
        for style, _ in STYLES:
            row = pick(res["rows"], style=style)
            yield f"rate.{proto}.{style}", row["msgs_per_s"]["median"], "msgs/s", "rows (--rate)", \
                f"{proto}/{style}: msgs_per_s"
            yield from metered("cpu", f"{proto}.{style}", row, "rows (--rate)", f"{proto}/{style}")
    return get


def from_unet_stream(res):
    rate = pick(res["rows"], style="wait")["msgs_per_s"]["median"]
    yield f"bw.unet.{KIB64}", rate * KIB64 / 1e6, "MB/s", "rows (--rate --bytes 65536)", \
        "unet/wait: msgs_per_s (MB/s = msgs/s x 65536 B)"


def from_am(transport, tight=False):
    def get(res):
        row = pick(res["depth"], depth=16)
        if tight:
            yield f"rate.am_{transport}.tight", row["msgs_per_s"]["median"], "msgs/s", \
                "depth", "depth 16 (AM_Request4), AM_Poll in a tight loop: msgs_per_s"
            yield from metered("cpu", f"am_{transport}.tight", row, "depth", "depth 16 (AM_Request4), tight AM_Poll")
            return
        if transport == "udp":
            yield "lat.udp", pick(res["short"], args=4)["rtt_half_us"]["median"], "us", "short", \
                "AM_Request4: rtt_half_us"
        yield f"rate.am_{transport}", row["msgs_per_s"]["median"], "msgs/s", "depth", \
            "depth 16 (AM_Request4): msgs_per_s"
        yield from metered("cpu", f"am_{transport}", row, "depth", "depth 16 (AM_Request4)")
        for s in BW_SIZES if transport != "udp" else ():
            bulk = pick(res["bulk"], size=s)
            yield f"bw.am_{transport}.{s}", mbps(bulk), "MB/s", "bulk", f"AM_RequestXfer {size_name(s)}: bytes_per_s"
            yield from metered("share", f"am_{transport}.{s}", bulk, "bulk", f"AM_RequestXfer {size_name(s)}")
    return get


def from_vmmc(res):
    fl = res["floors"]
    for s in BW_SIZES:
        yield f"floor.memcpy.{s}", mbps(pick(fl["memcpy"], size=s)), "MB/s", "0. floors", f"memcpy {size_name(s)}"
        yield f"floor.nic_copy.{s}", mbps(pick(fl["nic_copy"], size=s)), "MB/s", "0. floors", \
            f"nic_copy {size_name(s)}"
        row = pick(res["bandwidth"], mode="oneway", size=s)
        yield f"bw.vmmc.{s}", mbps(row), "MB/s", "2. bandwidth", f"oneway {size_name(s)}"
        if row.get("cross_core_gbps", 0) > 0:  # (0: one CPU, or run with --no-floors)
            yield f"floor.xcore.{s}", row["cross_core_gbps"] * 1e3, "MB/s", "2. bandwidth", \
                f"oneway {size_name(s)}: cross_core_gbps"
        yield from metered("share", f"vmmc.{s}", row, "2. bandwidth", f"oneway {size_name(s)}")


def from_vipl(res):
    for s in BW_SIZES:
        for mode in ("send", "rdma"):
            row = pick(res["bandwidth"], mode=mode, size=s)
            yield f"bw.vipl_{mode}.{s}", mbps(row), "MB/s", "2. bandwidth", f"{mode} {size_name(s)}"
            yield from metered("share", f"vipl_{mode}.{s}", row, "2. bandwidth", f"{mode} {size_name(s)}")


def from_fm(layer, sizes):
    def get(res):
        for s in sizes:
            row = pick(res["bandwidth"], size=s)
            yield f"bw.{layer}.{s}", mbps(row), "MB/s", "bandwidth", f"{layer} {size_name(s)}"
            yield from metered("share", f"{layer}.{s}", row, "bandwidth", f"{layer} {size_name(s)}")
    return get


def from_gm(res):
    for op in ("get", "put"):
        us = pick(res["gm"], op=op, size=KIB64)["us_per_op"]["median"]
        yield f"bw.gm_{op}.{KIB64}", KIB64 / us, "MB/s", "gm", f"{op} 64 KiB: us_per_op (MB/s = 65536 B / us)"


def plan(quick):
    """The runs of a round, in order: (name, kind, program, arguments, extractor)."""
    q = ["--quick"] if quick else []
    hop_iters = ["--iters", "1000" if quick else "3000"]
    rate = ["--samples", "6", "--msgs", "2000"] if quick else ["--samples", "10", "--msgs", "4000"]
    am = ["--args", "4", "--depths", "16", "--depth-args", "4", *q]
    am_nic = [*am, "--sections", "depth,bulk", "--bulk-sizes", sizes_arg(BW_SIZES), "--no-floors", *NIC_POLL]
    runs = [("hop_floors", "hop", "hop_bench", ["floors"], from_hop_floors),
            ("slot_wake", "hop", "slot_bench", ["--sections", "floors,wake", "--wake-samples", "40" if quick else "100"],
             from_slot)]
    runs += [(f"hop_{p}", "hop", "hop_bench", [p, *hop_iters], from_hop(p)) for p, _ in PROTOS]
    runs += [(f"rate_{p}", "hop", "hop_bench", [p, "--rate", *rate], from_rate(p))
             for p in ("vmmc", "vipl", "fm", "unet")]
    runs += [("stream_unet", "hop", "hop_bench", ["unet", "--rate", "--bytes", str(KIB64), "--styles", "wait", *rate],
              from_unet_stream)]
    runs += [("am_udp", "am", "udp", [*am, "--sections", "rtt,depth", "--no-floors"], from_am("udp")),
             ("am_native", "am", "native", am_nic, from_am("native")),
             ("am_native_tight", "am", "native", [*am, "--sections", "depth", "--no-floors", *TIGHT_POLL],
              from_am("native", tight=True)),
             ("am_vipl", "am", "vipl", am_nic, from_am("vipl")),
             ("vmmc_bench", "client_server", "vmmc_bench",
              [*q, "--bw-sizes", sizes_arg(BW_SIZES), "--lat-sizes", "none", "--skip", "lat,poll,bidir,ovh,cross"],
              from_vmmc),
             ("vipl_bench", "client_server", "vipl_bench",
              [*q, "--bw-sizes", sizes_arg(BW_SIZES), "--skip", "lat,poll,rdma,idle", "--no-floors"], from_vipl),
             ("fm_fm", "fm", "fm", [*q, "--bw-sizes", sizes_arg(FM_SIZES), "--lat-sizes", "none"],
              from_fm("fm", FM_SIZES)),
             ("fm_mp", "fm", "mp", [*q, "--bw-sizes", sizes_arg(BW_SIZES), "--lat-sizes", "none"],
              from_fm("mp", BW_SIZES)),
             ("fm_gm", "fm", "gm", [*q, "--gm-sizes", "64K"], from_gm)]
    return runs


@contextlib.contextmanager
def printing_to(log, verbose):
    """Within: what is printed to stdout goes to the log file (and, verbose, to the terminal too)."""
    real = sys.stdout

    class Both:
        def write(self, s):
            log.write(s)
            return real.write(s) if verbose else len(s)

        def flush(self):
            log.flush()
            real.flush()

    sys.stdout = Both()
    try:
        yield
    finally:
        sys.stdout.flush()
        sys.stdout = real


class Measure:
    """The rounds of runs on one cluster; each figure's values by round, with where they came from."""

    def __init__(self, build, out, args, data):
        self.build, self.out, self.args, self.data = build, out, args, data
        self.log = open(os.path.join(out, "summary.log"), "w")
        self.work = tempfile.mkdtemp(prefix="ulnic-summary-work-", dir="/tmp")
        self.figures, self.runs, self.failed = data["figures"], data["runs"], []

    def one(self, cluster, rnd, name, kind, program, args):
        """One run -> its JSON (a dict), or None if it failed."""
        timeout = self.args.timeout
        raw = os.path.join(self.out, "raw", f"r{rnd}")
        os.makedirs(raw, exist_ok=True)
        if kind == "hop":
            path = os.path.join(raw, f"{name}.json")
            rc, text, res = run_program([os.path.join(self.build, "bin", program), *args, "--json", path],
                                        cluster.env(0), path, timeout)
            return res if rc == 0 and res else None
        if kind == "am":
            res = Runner(self.build, self.work, timeout, False).am(f"{name}_r{rnd}", program, cluster.env(0),
                                                                    cluster.env(1), args)
            ok = "failed" not in res and "unavailable" not in res
        elif kind == "client_server":
            res, crc, src, _ = run_client_server(self.build, self.work, cluster, program, args, timeout, 30)
            ok = crc == 0 and src == 0 and res.get("verified")
        else:  # fm
            res = Jobs(self.build, cluster, tempfile.mkdtemp(dir=self.work), timeout, {}).run(
                program, args, f"fm_bench {program}")
            ok = res is not None
        if res:
            with open(os.path.join(raw, f"{name}.json"), "w") as f:
                json.dump(res, f, indent=1)
        return res if ok else None

    def round(self, cluster, rnd, rounds):
        runs = plan(self.args.quick)
        for k, (name, kind, program, args, extract) in enumerate(runs):
            label = f"[round {rnd}/{rounds}, {k + 1}/{len(runs)}] {name}"
            print(f"{label} ...", end="", flush=True)
            t0 = time.time()
            with printing_to(self.log, self.args.verbose):
                print(f"\n######## {label}: {program} {' '.join(args)}", flush=True)
                try:
                    res = self.one(cluster, rnd, name, kind, program, args)
                except (RuntimeError, OSError, ValueError) as e:
                    print(f"{PROG}: {name}: {e}", file=sys.stderr)
                    res = None
            run = {"round": rnd, "name": name, "program": "am_logp" if kind == "am" else
                   "fm_bench" if kind == "fm" else program, "args": ([program] if kind in ("am", "fm") else []) + args,
                   "seconds": round(time.time() - t0, 1), "completed": res is not None}
            if kind == "am":
                run["env"] = {"ULNIC_AM_TRANSPORT": program}
            self.runs.append(run)
            if res is None:
                self.failed.append(f"round {rnd}: {name}")
                print(f" FAILED after {run['seconds']} s (see {self.log.name})", flush=True)
                continue
            try:
                for key, value, unit, section, row in extract(res):
                    fig = self.figures.setdefault(key, {"unit": unit, "rounds": [], "source": {
                        "program": run["program"], "args": run["args"], **({"env": run["env"]} if "env" in run else {}),
                        "section": section, "row": row, "files": []}})
                    fig["rounds"].append(value)
                    fig["source"]["files"].append(f"raw/r{rnd}/{name}.json")
            except (KeyError, TypeError, ZeroDivisionError) as e:
                self.failed.append(f"round {rnd}: {name}: its JSON lacks a figure ({e})")
                run["completed"] = False
                print(f" its JSON lacks a figure: {e}", flush=True)
                continue
            print(f" ok, {run['seconds']} s", flush=True)

    def __call__(self, cluster):
        rounds = self.data["params"]["rounds"]
        for rnd in range(1, rounds + 1):
            self.round(cluster, rnd, rounds)
        status = cluster.status()
        if status:
            self.data["cluster_status_at_end"] = status
        return 1 if self.failed else 0

    def close(self):
        self.log.close()
        shutil.rmtree(self.work, ignore_errors=True)


# ------------------------------------------------------------ the targets

def lat_targets():
    for proto, name in PROTOS:
        size = "16 B" if proto in ("am", "fm") else "40 B" if proto == "unet" else "64 B"
        for style, how in STYLES:
            yield ("latency", name, f"one-way {size} (RTT/2), {how}", f"lat.{proto}.{style}", "us",
                   "floor.efd_oneway", "eventfd one-way", "le", 1.5)
    yield ("latency", "NIC wake-up", "NOP to a NIC in WFI, spin-poll", "wake.spin", "us",
           "floor.efd_oneway", "eventfd one-way", "le", 2.0)
    yield ("latency", "NIC wake-up", "NOP to a NIC in WFI, blocking wait", "wake.block", "us",
           "floor.efd_rtt", "eventfd RTT", "le", 2.0)


def rate_targets():
    yield ("rate", "native AM", "AM_Request4 (16 B), depth 16, back-off poll", "rate.am_native", "msgs/s",
           "rate.am_udp", "AM/UDP depth 16", "ge", 3.0)
    yield ("rate", "native AM", "AM_Request4 (16 B), depth 16, tight AM_Poll", "rate.am_native.tight", "msgs/s",
           "rate.am_udp", "AM/UDP depth 16", "ge", 3.0)
    yield ("rate", "AM over VIPL", "AM_Request4 (16 B), depth 16", "rate.am_vipl", "msgs/s", "rate.am_udp",
           "AM/UDP depth 16", "info", 3.0)
    for proto, name, what in (("vipl", "VIPL", "64 B sends"), ("fm", "FM", "16 B messages"),
                              ("vmmc", "VMMC", "64 B inline sends"), ("unet", "U-Net", "40 B inline sends")):
        for style, how in STYLES:
            yield ("rate", name, f"{what}, depth 16, {how}", f"rate.{proto}.{style}", "msgs/s", "rate.am_udp",
                   "AM/UDP depth 16", "ge", 3.0)


def bw_targets():
    rows = (("VIPL", "RDMA write", "vipl_rdma"), ("VIPL", "send", "vipl_send"),
            ("native AM", "AM_RequestXfer", "am_native"), ("AM over VIPL", "AM_RequestXfer", "am_vipl"),
            ("FM", "stream", "fm"), ("MP over FM", "MP_Isend window", "mp"))
    for s in BW_SIZES:
        for name, what, key in rows:
            yield ("bandwidth", name, f"{what} {size_name(s)}", f"bw.{key}.{s}", "MB/s", f"bw.vmmc.{s}",
                   f"VMMC one-way {size_name(s)}", "ge", 0.8)
    yield ("bandwidth", "U-Net", f"{size_name(KIB64)} messages, depth 16 stream", f"bw.unet.{KIB64}", "MB/s",
           f"bw.vmmc.{KIB64}", f"VMMC one-way {size_name(KIB64)}", "ge", 0.8)
    for op in ("get", "put"):
        yield ("bandwidth", "GM over FM", f"gm_{op} {size_name(KIB64)} (K = 32, then gm_sync)",
               f"bw.gm_{op}.{KIB64}", "MB/s", f"bw.vmmc.{KIB64}", f"VMMC one-way {size_name(KIB64)}", "ge", 0.8)
    yield ("bandwidth", "FM", "N1/2 (half its 1 MiB rate)", "fm.n_half", "B", None, "1 KiB", "le", 1.0)
    yield ("no regression", "VMMC", "one-way 1 MiB", f"bw.vmmc.{MIB}", "MB/s", f"floor.nic_copy.{MIB}",
           "NIC copy 1 MiB", "ge", 0.9)
    yield ("no regression", "VMMC", "one-way 64 KiB", f"bw.vmmc.{KIB64}", "MB/s", f"floor.nic_copy.{KIB64}",
           "NIC copy 64 KiB", "info", 0.9)
    # The NIC copy floor is one core's memcpy (the board's copy engine); a
    # transfer between two NICs moves every byte from one core's cache to the
    # other's, which the cross-core copy measures just before the row (4 KiB
    # chunks through a ring shaped like the fabric's, bench_common.h).
    for s in BW_SIZES:
        yield ("no regression", "VMMC", f"one-way {size_name(s)}", f"bw.vmmc.{s}", "MB/s", f"floor.xcore.{s}",
               f"cross-core copy ({size_name(s)} row)", "info", 0.9)


def n_half(figs):
    """FM's N1/2 (bench_common.half_size) against its 1 MiB rate; None if it is not reached (or FM_SIZES are
    missing)."""
    pts = [(s, figs.get(f"bw.fm.{s}", {}).get("value")) for s in FM_SIZES]
    if any(v is None for _, v in pts):
        return None
    return half_size(pts)


def evaluate(data):
    """Each figure's value (the median of its rounds), FM's N1/2, and the rows of the table."""
    figs = data["figures"]
    for f in figs.values():
        f["value"] = statistics.median(f["rounds"])
        f["rounds_stats"] = stats(f["rounds"])
    nh = n_half(figs)
    if nh is not None:
        figs["fm.n_half"] = {"unit": "B", "value": nh, "rounds": [], "source": {
            "program": "fm_bench", "derived_from": [f"bw.fm.{s}" for s in FM_SIZES],
            "how": "the size at which FM's bandwidth reaches half its 1 MiB rate, linear in log2(size)"}}
    rows = []
    for group, proto, measure, key, unit, ref, ref_name, kind, factor in (*lat_targets(), *rate_targets(),
                                                                         *bw_targets()):
        v = figs.get(key, {}).get("value")
        r = 1024.0 if key == "fm.n_half" else figs.get(ref, {}).get("value")
        row = {"group": group, "protocol": proto, "measure": measure, "figure": key, "value": v, "unit": unit,
               "reference": ref_name, "reference_figure": ref, "reference_value": r, "kind": kind, "factor": factor}
        row["ratio"] = v / r if v is not None and r else None
        if row["ratio"] is None:
            row["status"] = "missing"
        elif kind == "info":
            row["status"] = "info"
        else:
            met = row["ratio"] <= factor if kind == "le" else row["ratio"] >= factor
            row["status"] = "met" if met else "NOT met"
        udp = figs.get("lat.udp", {}).get("value")
        if group == "latency" and key.startswith("lat.") and v is not None and udp:
            row["stretch"] = {"what": "below AM over UDP's RTT/2", "reference_value": udp, "met": v < udp}
        rows.append(row)
    data["table"] = rows


# ---------------------------------------------------------------- output

def num(v, unit=""):
    if v is None:
        return "-"
    if unit == "msgs/s" or abs(v) >= 1000:
        return f"{v:,.0f}"
    return f"{v:.3g}" if abs(v) < 10 else f"{v:.1f}"


def share(v):
    """A share of a CPU, to the hundredth."""
    return "-" if v is None else f"{v:.2f}"


def machine_line(m):
    return (f"machine: nproc {m.get('nproc')} (affinity {m.get('affinity_cpus')}), {m.get('cpu_model')}, "
            f"hypervisor {m.get('hypervisor')}, {m.get('kernel')}")


LINK_KEYS = ("link_tx_data", "link_retransmits", "link_duplicates", "link_held", "link_sacked")


def link_totals(status):
    """The link counters summed over the nodes: the whole run's, as the cluster was booted for it."""
    nodes = [n for n in status or [] if isinstance(n, dict) and isinstance(n.get("counters"), dict)]
    if not nodes:
        return None
    return {k: sum(int(n["counters"].get(k, 0)) for n in nodes) for k in LINK_KEYS}


def link_line(link):
    if not link:
        return "link: no counters (the cluster's status at the end could not be read)"
    sent, retx = link["link_tx_data"], link["link_retransmits"]
    share = f"{100.0 * retx / sent:.3f}%" if sent else "-"
    return (f"link over the whole run (both nodes, direct fabric, nothing dropped): {retx:,} retransmissions of "
            f"{sent:,} data packets sent ({share}; target < 1%), {link['link_duplicates']:,} duplicates received")


def stream_lines(val):
    """Where a stream's CPU went: per bandwidth row that metered any part, each part's share of a CPU.
    The machine's share is counted in 10 ms ticks and is missing for a row shorter than half a second; the
    parts' (the processes' and the QEMUs' own run times) are not, so such a row is printed with '-' there."""
    lines = ["where a stream's CPU goes (the share of a CPU each part kept busy over the row, medians of the "
             "rounds; a part near 1 was busy or spinning -- a NIC polls between bursts; none near it: the hand-offs "
             "between them bound it; machine: its busy CPUs, counted in 10 ms ticks, so '-' for a row shorter than "
             "half a second):",
             f"  {'protocol':<32}{'size':>8}{'MB/s':>10}" + "".join(f"{h:>13}" for h in SHARE_PARTS)]
    for key, name in SHARE_ROWS:
        for s in BW_SIZES:
            if all(val(f"share.{key}.{s}.{part}") is None for part in SHARE_PARTS):
                continue
            lines.append(f"  {name:<32}{size_name(s):>8}{num(val(f'bw.{key}.{s}'), 'MB/s'):>10}"
                         + "".join(f"{share(val(f'share.{key}.{s}.{part}')):>13}" for part in SHARE_PARTS))
    return lines


def ratio_span(figs, row):
    """The row's ratio round by round (each round's value over the same round's reference) as (min, max), or
    None: the spread behind the median ratio the table prints."""
    a = figs.get(row["figure"], {}).get("rounds") or []
    b = figs.get(row.get("reference_figure") or "", {}).get("rounds") or []
    q = [x / y for x, y in zip(a, b) if x is not None and y]
    return (min(q), max(q)) if len(a) == len(b) and q else None


def ratio_text(x):
    return f"{x:.2f}" if x < 100 else f"{x:.0f}"


def summary(data):
    rows, figs = data["table"], data["figures"]
    val = lambda k: figs.get(k, {}).get("value")  # noqa: E731
    p = data["params"]
    lines = [f"== ulnic benchmark summary: {p['mode']} mode, {p['rounds']} round(s) (each figure: the median of the "
             f"rounds' medians), 2 nodes, {data['date']}"]
    head = (f"{'protocol':<13}{'measure':<44}{'value':>11} {'unit':<7}{'reference':<22}{'ref value':>11}{'ratio':>8}"
            f"{'by round':>15}  {'target':<8}{'':<8}")
    group = None
    for r in rows:
        if r["group"] != group:
            group = r["group"]
            lines += ["", f"-- {group}", head]
        target = "-" if r["kind"] == "info" else ("<= " if r["kind"] == "le" else ">= ") + f"{r['factor']:g}x"
        ratio = "-" if r["ratio"] is None else ratio_text(r["ratio"]) + "x"
        span = ratio_span(figs, r)
        span = "-" if span is None else f"{ratio_text(span[0])}..{ratio_text(span[1])}"
        line = (f"{r['protocol']:<13}{r['measure']:<44}{num(r['value'], r['unit']):>11} {r['unit']:<7}"
                f"{r['reference']:<22}{num(r['reference_value'], r['unit']):>11}{ratio:>8}{span:>15}  {target:<8}"
                f"{r['status']}")
        if "stretch" in r:
            line += f"; stretch (< AM/UDP RTT/2): {'met' if r['stretch']['met'] else 'not met'}"
        lines.append(line)
    met = sum(r["status"] == "met" for r in rows)
    judged = sum(r["status"] in ("met", "NOT met") for r in rows)
    lines += ["", f"targets met: {met} of {judged}" + (f"; {sum(r['status'] == 'missing' for r in rows)} missing"
                                                       if any(r["status"] == "missing" for r in rows) else "")]
    noisy = [f"{k} {num(min(f['rounds']), f['unit'])} .. {num(max(f['rounds']), f['unit'])} {f['unit']}"
             for k, f in figs.items() if not k.startswith("cpu.") and len(f["rounds"]) > 1 and min(f["rounds"]) > 0
             and max(f["rounds"]) > 2 * min(f["rounds"])]
    if noisy:
        lines.append("figures whose rounds differ by more than 2x (min .. max; each in summary.json): "
                     + "; ".join(noisy))

    def fl(label, key, unit, extra=""):
        return f"  {label:<46}{num(val(key), unit):>11} {unit:<7}{extra}"
    lines += ["", "where a one-way small message's time goes (the ping's hops, us, medians; hop_bench on one clock):",
              f"  {'protocol':<11}{'style':<15}" + "".join(f"{h:>14}" for _, h in HOPS) + f"{'one-way':>10}"
              f"{'RTT/2':>9}"]
    for proto, name in PROTOS:
        for style, how in STYLES:
            lines.append(f"  {name:<11}{how:<15}" + "".join(f"{num(val(f'hop.{proto}.{style}.{h}')):>14}"
                                                            for h, _ in HOPS)
                         + f"{num(val(f'hop.{proto}.{style}.oneway')):>10}{num(val(f'lat.{proto}.{style}')):>9}")
    lines += ["", "where a message's CPU goes at depth 16 (us of CPU per message, medians of the rounds; the NICs: "
              "their QEMUs; other: the rest of the machine's busy time; busy: the machine's busy CPUs of "
              f"{(data.get('machine') or {}).get('nproc', '?')}):",
              f"  {'protocol':<32}" + "".join(f"{h:>12}" for h in ("msgs/s", *CPU_PARTS, "busy"))]
    for key, name in CPU_ROWS:
        if val(f"cpu.{key}.machine") is None:
            continue
        lines.append(f"  {name:<32}{num(val(f'rate.{key}'), 'msgs/s'):>12}"
                     + "".join(f"{num(val(f'cpu.{key}.{part}')):>12}" for part in CPU_PARTS)
                     + f"{num(val(f'cpu.{key}.busy_cpus')):>12}")
    lines += ["", *stream_lines(val)]
    lines += ["", "floors and references (this run, medians):",
              fl("shared-memory ping-pong, one-way", "floor.pp_oneway", "us", "hop_bench floors"),
              fl("blocking eventfd ping-pong, one-way", "floor.efd_oneway", "us",
                 f"hop_bench floors (min {num(val('floor.efd_oneway_min'))} us: the two processes on one CPU)"),
              fl("blocking eventfd ping-pong, round trip", "floor.efd_rtt", "us", "hop_bench floors"),
              fl("  the same after an idle pause", "floor.efd_idle_rtt", "us", "slot_bench section 1"),
              fl("NOP post -> spinning NIC -> poll, round trip", "floor.nop_rtt", "us", "hop_bench floors"),
              fl("NIC wake-up from WFI, spin-poll", "wake.spin", "us", "slot_bench section 4"),
              fl("NIC wake-up from WFI, blocking wait", "wake.block", "us", "slot_bench section 4"),
              fl("AM over UDP, AM_Request4 RTT/2", "lat.udp", "us", "am_logp (ULNIC_AM_TRANSPORT=udp)"),
              fl("AM over UDP, AM_Request4 at depth 16", "rate.am_udp", "msgs/s", "am_logp depth section")]
    for s in BW_SIZES:
        lines.append(fl(f"memcpy {size_name(s)}", f"floor.memcpy.{s}", "MB/s", "vmmc_bench floors"))
        lines.append(fl(f"NIC copy {size_name(s)}", f"floor.nic_copy.{s}", "MB/s", "vmmc_bench floors"))
        lines.append(fl(f"cross-core copy before VMMC {size_name(s)}", f"floor.xcore.{s}", "MB/s",
                        "vmmc_bench section 2 (4 KiB chunks, two threads on the two CPUs)"))
        lines.append(fl(f"VMMC one-way {size_name(s)}", f"bw.vmmc.{s}", "MB/s", "vmmc_bench section 2"))
    lines += ["", link_line(data.get("link"))]
    lines += [f"NIC affinity (ULNIC_NIC_AFFINITY): {data['params'].get('nic_affinity', 'off')}"]
    if data.get("machine"):
        lines += ["", machine_line(data["machine"])]
    return "\n".join(lines)


def plot(data, out):
    plt = pyplot()
    rows = [r for r in data["table"] if r["value"] is not None and r["figure"] != "fm.n_half"]
    panels = [("latency", [r for r in rows if r["group"] == "latency"]),
              ("rate", [r for r in rows if r["group"] == "rate"]),
              ("bandwidth", [r for r in rows if r["group"] in ("bandwidth", "no regression") and r["ratio"]])]
    panels = [(g, rs) for g, rs in panels if rs]
    written = []
    if not panels:
        return written
    fig, axes = plt.subplots(len(panels), 1, figsize=(11, 2.2 + 0.33 * len(rows) + 1.2 * len(panels)), squeeze=False,
                             gridspec_kw={"height_ratios": [len(rs) + 2 for _, rs in panels]})
    figs = data["figures"]
    val = lambda k: figs.get(k, {}).get("value")  # noqa: E731
    colors = {"met": "tab:green", "NOT met": "tab:red", "info": "tab:gray", "missing": "white"}
    for ax, (group, rs) in zip(axes[:, 0], panels):
        ys = range(len(rs))
        frac = group == "bandwidth"  # as a fraction of the reference
        xs = [r["ratio"] if frac else r["value"] for r in rs]
        ax.barh(ys, xs, color=[colors[r["status"]] for r in rs], height=0.6)
        for y, x, r in zip(ys, xs, rs):
            ax.annotate(f" {num(r['value'], r['unit'])} {r['unit']}", (x, y), va="center", fontsize=7)
            if r["reference_value"] and r["kind"] != "info":  # each row's target
                t = r["factor"] if frac else r["factor"] * r["reference_value"]
                ax.plot([t, t], [y - 0.4, y + 0.4], color="black", lw=1.6)
        ax.set_yticks(list(ys))
        ax.set_yticklabels([f"{r['protocol']}: {r['measure']}" + (f" / {r['reference']}" if r["group"] == "no regression"
                                                                  else "") for r in rs], fontsize=7)
        ax.invert_yaxis()
        ax.grid(True, axis="x", alpha=0.3)
        if group == "latency":
            ax.set_xscale("log")
            for key, color, ls, label in (("floor.pp_oneway", "gray", ":", "shared-memory ping-pong one-way"),
                                          ("floor.efd_oneway", "black", "--", "blocking eventfd one-way"),
                                          ("floor.nop_rtt", "tab:brown", "-.", "NOP through a spinning NIC, RTT"),
                                          ("lat.udp", "tab:blue", "--", "AM over UDP RTT/2 (stretch)")):
                if val(key):
                    ax.axvline(val(key), color=color, ls=ls, lw=1.1, label=f"{label} ({val(key):.3g} us)")
            ax.set_xlabel("us, median (log); black ticks: each row's target (1.5x or 2x its eventfd floor)")
            ax.set_title("latency against the floors", fontsize=10)
        elif group == "rate":
            ax.set_xscale("log")
            if val("rate.am_udp"):
                u = val("rate.am_udp")
                ax.axvline(u, color="tab:blue", ls=":", lw=1.1, label=f"AM over UDP, depth 16 ({u:,.0f} msgs/s)")
                ax.axvline(3 * u, color="black", ls="--", lw=1.1, label=f"3x AM over UDP ({3 * u:,.0f} msgs/s)")
            ax.set_xlabel("messages/s, median (log)")
            ax.set_title("message rate, depth 16, against 3x AM over UDP", fontsize=10)
        else:
            ax.axvline(0.8, color="black", ls="--", lw=1.1, label="0.8 of VMMC one-way")
            ax.set_xlim(0, min(2.0, 1.15 * max([1.0, *xs])))  # a ratio beyond 2 (a reference that collapsed): clipped
            ax.axvline(1.0, color="gray", ls=":", lw=1.0)
            ax.set_xlabel("fraction of the reference (VMMC one-way at the same size; VMMC rows: the NIC copy floor or the cross-core copy)")
            nh = val("fm.n_half")
            ax.set_title("bandwidth as a fraction of VMMC's one-way rate" +
                         (f"; FM N1/2 = {size_name(round(nh))} (target <= 1 KiB)" if nh else ""), fontsize=10)
        ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.16 * 12 / (len(rs) + 2)), ncol=2)
    m = data.get("machine", {})
    fig.suptitle(f"ulnic summary, {data['params']['mode']} mode, {data['date']}\n{m.get('nproc')} CPUs, "
                 f"{m.get('cpu_model')}, {m.get('kernel')}; green: met, red: NOT met, gray: info", fontsize=10)
    fig.tight_layout(rect=(0, 0, 1, 0.97))
    save(fig, out, "summary.png", written)
    return written


# ------------------------------------------------------------------ main

def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=default_build("hop_bench", ("build",)), help="build directory (bin/...)")
    ap.add_argument("--out", default="summary_out", help="output directory for the JSON, the PNG and the log")
    ap.add_argument("--quick", action="store_true", help="3 rounds of fewer samples (about a minute)")
    ap.add_argument("--rounds", type=int, help="rounds of runs (default 6, --quick 3)")
    ap.add_argument("--slot-size", type=int, default=64, help="slot size in MiB (vmmc_bench and vipl_bench need 64)")
    ap.add_argument("--timeout", type=int, default=300, help="give up on a run after this many seconds")
    ap.add_argument("--verbose", action="store_true", help="the programs' output on the terminal too")
    ap.add_argument("--plot-only", metavar="JSON", help="redraw the PNG from a summary.json and exit")
    args = ap.parse_args()
    out = out_dir(args, plot, __file__)
    build = check_build(args.build, PROGRAMS, PROG)
    rounds = max(1, args.rounds or (3 if args.quick else 6))

    t0 = time.time()
    data = {**header(PROG), "params": {"mode": "quick" if args.quick else "default", "quick": args.quick,
                                        "rounds": rounds, "slot_size_mib": args.slot_size, "build": build},
            "figures": {}, "runs": []}
    # ULNIC_NIC_AFFINITY=node: each node's QEMU and its processes on one CPU (emulator/board/node.h).
    data["params"]["nic_affinity"] = os.environ.get("ULNIC_NIC_AFFINITY") or "off"
    shutil.rmtree(os.path.join(out, "raw"), ignore_errors=True)
    m = Measure(build, out, args, data)
    try:
        rc = on_private_cluster(build, CLUSTER, args.slot_size, (), PROG, m)
    finally:
        m.close()
    floors = os.path.join(out, "raw", "r1", "hop_floors.json")
    if os.path.exists(floors):
        with open(floors) as f:
            data["machine"] = json.load(f).get("machine")
    evaluate(data)
    data["link"] = link_totals(data.get("cluster_status_at_end"))
    finish(data, t0)
    data["failed"] = m.failed
    data["completed_and_verified"] = rc == 0 and not m.failed
    print()
    print(summary(data))
    print(f"mode {data['params']['mode']}; every run completed and every data check passed: "
          + ("yes" if data["completed_and_verified"] else "NO: " + "; ".join(m.failed or ["see above"])))
    print(runtime_line(data))
    json_path = os.path.join(out, "summary.json")
    write_json(data, json_path)
    if data["table"] and not draw(json_path, out, plot, __file__):
        rc = rc or 1
    return 0 if data["completed_and_verified"] and rc == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
