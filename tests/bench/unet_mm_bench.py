#!/usr/bin/env python3
"""U-Net/MM's paging, measured (issue 23): one-way bandwidth of 16 KiB
messages sent from a working set of W bytes of the sender's own heap with at
most L bytes pinned, W/L from 1/2 to 4, each beside the same sends from an
ordinary U-Net endpoint (a segment registered in the slot: the floor) in the
same run. Per configuration, the rounds' MB/s (min/median/max) and, per
message, the NIC's TLB misses and the library's pins and evictions. Every
message is checked byte for byte by the receiver (tests/programs/unet_worker.c).

  tests/bench/unet_mm_bench.py [--build build] [--out DIR] [--quick]

Prints a table and writes DIR/unet_mm_bench.json. A benchmark, not a test:
ctest does not run it.
"""
import argparse
import json
import os
import select
import statistics
import subprocess
import sys
import time

import bench_common as bc

SIZE = 16384
PIN = 256 * 1024  # the sender's pinned limit L (64 pages)


class Worker:
    """A unet_worker on one node of the cluster, driven line by line."""

    def __init__(self, build, cluster, node):
        self.p = subprocess.Popen([os.path.join(build, "bin", "unet_worker")], env=cluster.env(node),
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                  bufsize=1)
        self.node = node
        if self.read().get("ok") != 1:
            raise RuntimeError("unet_worker did not start")

    def start(self, *words):
        self.p.stdin.write(" ".join(str(w) for w in words) + "\n")
        self.p.stdin.flush()

    def read(self, timeout=300):
        if not select.select([self.p.stdout], [], [], timeout)[0]:
            raise RuntimeError(f"unet_worker on node {self.node} said nothing for {timeout} s")
        line = self.p.stdout.readline()
        if not line:
            raise RuntimeError(f"unet_worker on node {self.node} died: {self.p.stderr.read()}")
        return json.loads(line)

    def __call__(self, *words, timeout=300):
        self.start(*words)
        return self.read(timeout)

    def close(self):
        if self.p.poll() is None:
            self.start("quit")
            self.p.wait(30)


def one_config(build, cluster, mm, regions, msgs, rounds, tag):
    """Rounds of `msgs` messages from `regions` regions of SIZE bytes: [MB/s], and the sender's stats after."""
    seg = max(regions * SIZE + 8192, 1 << 20)
    a, b = Worker(build, cluster, 0), Worker(build, cluster, 1)
    try:
        ra = a("createmm", seg, 64, 64, PIN) if mm else a("create", seg, 64, 64)
        rb = b("create", 4 << 20, 256, 128)
        if ra["st"] != 0 or rb["st"] != 0:
            raise RuntimeError(f"create: {ra} {rb}")
        ch = a("channel", 1, rb["slot"], tag + 1, tag)["ch"]
        if b("channel", 0, ra["slot"], tag, tag + 1)["st"] != 0:  # b takes tag + 1 from a
            raise RuntimeError("channel")
        if b("pushn", 128, SIZE, 0)["n"] != 128:
            raise RuntimeError("pushn")
        rates = []
        seed = 1
        for k in range(rounds + 1):  # the first round warms up (and is not counted)
            b.start("recvn", msgs, 60000)
            r = a("sendn", ch, msgs, SIZE, 100, seed, regions)  # from offset 100: pages not aligned
            got = b.read()
            if r["st"] != 0 or got["st"] != 0 or got["n"] != msgs or got["bad"] != 0:
                raise RuntimeError(f"round {k}: send {r}, receive {got}")
            if got["seeds"] != sum(range(seed, seed + msgs)):
                raise RuntimeError(f"round {k}: messages missing or repeated: {got}")
            if k:
                rates.append(msgs * SIZE / r["us"])  # bytes per microsecond = MB/s
            seed += msgs
        return rates, a("stats")
    finally:
        a.close()
        b.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=bc.default_build("unet_worker", ["build", "build-dev"]))
    ap.add_argument("--out", default=".")
    ap.add_argument("--quick", action="store_true", help="fewer messages and rounds (~30 s)")
    args = ap.parse_args()
    build = bc.check_build(args.build, ["ulnic", "unet_worker"], "unet_mm_bench")
    out = os.path.abspath(args.out)
    os.makedirs(out, exist_ok=True)
    msgs, rounds = (64, 3) if args.quick else (256, 5)
    data = bc.header("unet_mm_bench")
    data.update({"size": SIZE, "pin_limit": PIN, "messages": msgs, "rounds": rounds, "quick": args.quick})
    t0 = time.time()

    def run(cluster):
        rows = []
        # Each working set twice: from a registered segment (the floor: the
        # same sends, every page in the slot) and as U-Net/MM.
        configs = []
        for w in (PIN // 2, PIN, 2 * PIN, 4 * PIN):
            configs += [(f"registered, W = {w / PIN:g} L", False, w // SIZE), (f"U-Net/MM, W = {w / PIN:g} L", True, w // SIZE)]
        floor = None
        for i, (name, mm, regions) in enumerate(configs):
            rates, st = one_config(build, cluster, mm, regions, msgs, rounds, 100 + 10 * i)
            sent = msgs * (rounds + 1)
            row = {"config": name, "mm": mm, "working_set": regions * SIZE, "mbps": rates,
                   "min": min(rates), "median": statistics.median(rates), "max": max(rates),
                   "misses_per_msg": st.get("tlb_misses", 0) / sent, "pins_per_msg": st.get("pins", 0) / sent,
                   "evictions_per_msg": st.get("evictions", 0) / sent, "pinned_at_end": st.get("pinned", 0),
                   "stats": st}
            if not mm:
                floor = row["median"]
            row["ratio"] = row["median"] / floor if floor else None
            rows.append(row)
            print(f"{name:30} W {bc.size_name(row['working_set']):>8}  {row['min']:8.1f} {row['median']:8.1f} "
                  f"{row['max']:8.1f} MB/s  x{row['ratio']:.2f}  misses/msg {row['misses_per_msg']:.2f}  "
                  f"pins/msg {row['pins_per_msg']:.2f}  evictions/msg {row['evictions_per_msg']:.2f}", flush=True)
        data["rows"] = rows
        return 0

    print(f"== unet_mm_bench: {bc.size_name(SIZE)} messages, sender's pin limit L = {bc.size_name(PIN)}, "
          f"{msgs} messages x {rounds} rounds (min / median / max MB/s, ratio to the registered segment's median)")
    st = bc.on_private_cluster(build, "unetmm", 64, [], "unet_mm_bench", run)
    bc.finish(data, t0)
    print(bc.runtime_line(data))
    bc.write_json(data, os.path.join(out, "unet_mm_bench.json"))
    return st


if __name__ == "__main__":
    sys.exit(main())
