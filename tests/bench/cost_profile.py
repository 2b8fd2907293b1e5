#!/usr/bin/env python3
"""Where the NIC's instructions go, by firmware function: reads the cost plugin's block profiles and names them.

A board started with `--cost` while $ULNIC_COST_PROFILE names a directory has its cost plugin count, per
translated block, the instructions retired inside the firmware's work items (a phase marker open when the block
started: what cost.py budgets) and outside them (idle polling), and write DIR/<cluster>-node<k>.prof when its QEMU
exits (`ulnic cluster down`). This script maps each block's address to the firmware function that holds it (the
ELF's symbols, llvm-nm-16) and prints the functions by instructions, summed over the files given:

  ULNIC_COST_PROFILE=/tmp/prof ulnic cluster up -n 2 --cost -c prof
  ... run a ping-pong of N rounds ...
  ulnic cluster down -c prof
  tests/bench/cost_profile.py --elf build/firmware/ulnic-fw.elf /tmp/prof/prof-node*.prof [--per N] [--top K]

--per N divides by N (the rounds the run made: instructions per message). Blocks are counted where they start, so
a block that opens a work item counts as idle and one that closes it as work: within a few instructions per item.
The exact per-phase counts are cost.py's; this is the profile behind them.
"""
import argparse
import bisect
import collections
import subprocess
import sys


def symbols(elf):
    """Sorted [(start, end, name)] of the ELF's functions."""
    out = subprocess.run(["llvm-nm-16", "--print-size", "--defined-only", "-C", elf], capture_output=True,
                         text=True, check=True).stdout
    found = []
    for line in out.splitlines():
        parts = line.split(None, 3)
        # (an assembler's local labels, .L*, are not functions)
        if len(parts) == 4 and parts[2] in "tTwW" and not parts[3].startswith((".L", "$")):
            found.append((int(parts[0], 16), int(parts[1], 16), parts[3]))
    found.sort()
    syms = []
    for k, (start, size, name) in enumerate(found):
        # An unsized symbol (assembly) runs to the next one.
        end = start + size if size else (found[k + 1][0] if k + 1 < len(found) else start + 1)
        syms.append((start, end, name))
    return syms


def read_profile(path):
    """[(vaddr, insns per execution, work insns, idle insns)] of one .prof file."""
    rows = []
    with open(path) as f:
        for line in f:
            addr, insns, work, idle = line.split()
            rows.append((int(addr, 16), int(insns), int(work), int(idle)))
    return rows


def by_function(syms, rows):
    starts = [s[0] for s in syms]
    work, idle = collections.Counter(), collections.Counter()
    for addr, _, w, i in rows:
        k = bisect.bisect_right(starts, addr) - 1
        name = syms[k][2] if k >= 0 and addr < syms[k][1] else f"?{addr:#x}"
        work[name] += w
        idle[name] += i
    return work, idle


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--elf", required=True, help="the firmware ELF the boards ran")
    ap.add_argument("--per", type=float, default=1.0, help="divide by this (e.g. the messages the run sent)")
    ap.add_argument("--top", type=int, default=40)
    ap.add_argument("profiles", nargs="+")
    a = ap.parse_args()
    syms = symbols(a.elf)
    work, idle = collections.Counter(), collections.Counter()
    for path in a.profiles:
        w, i = by_function(syms, read_profile(path))
        work.update(w)
        idle.update(i)
    total = sum(work.values())
    if not total:
        sys.exit("cost_profile.py: no instructions inside work items in these profiles")
    print(f"instructions inside work items{' per ' + format(a.per, 'g') if a.per != 1 else ''}: "
          f"{total / a.per:,.1f} (outside: {sum(idle.values()) / a.per:,.1f})")
    print(f"{'work':>10} {'%':>6}  {'idle':>10}  function")
    for name, n in work.most_common(a.top):
        print(f"{n / a.per:>10,.1f} {100 * n / total:>5.1f}%  {idle[name] / a.per:>10,.1f}  {name}")


if __name__ == "__main__":
    main()
