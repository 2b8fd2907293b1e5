#!/usr/bin/env python3
"""Soak: every protocol at once on a 4-node cluster behind a faulty switch,
a node killed and restarted every few minutes, for as long as asked.

  tests/stress/soak.py --build build [--minutes 60] [--kill-every 180]
                       [--faults drop=0.01,dup=0.005,reorder=0.01] [--out DIR] [--firmware ELF]

Brings up a private cluster (`ulnic cluster up -n 4 --switch --faults SPEC`)
and keeps eight jobs going, each restarted as soon as it ends, every one of
which checks its own data (tests/programs):
  puts     put_worker, node 2 -> node 3, checked byte for byte by the server
  vmmc     vmmc_tight, nodes 3 <-> 2, notified ping-pongs, spinning on vmmc_poll
  vipl     vipl_tight, nodes 2 -> 3 (reliable delivery), spinning on VipRecvDone
  am       am_tight under `ulnic run -n 2 --transport native` (nodes 0, 1)
  am_vipl  am_tight under `ulnic run -n 2 --transport vipl` (nodes 0, 1)
  fm       fm_tight under `ulnic fmrun -n 2 --nodes 2` (nodes 0, 1)
  puts_b   put_worker, node 1 -> node 0
  vmmc_b   vmmc_tight, nodes 0 <-> 3
Every --kill-every seconds the next node in turn (1, 2, 3, 0, ...) is stopped
(`ulnic node stop`: QEMU and daemon killed) and started again. A job that
ran on that node while it was down may fail (it must end, not hang: each job
has a deadline); it is counted as ended by the kill. Any other failure --
a job that fails with its nodes up, a wrong byte, a hang -- is a loss, and
a reliable path must have none. Every 10 s it samples the resident memory
of the long-lived processes (each node's QEMU and daemon, the fabric server,
the switch); at the end it prints per job the runs, the messages and bytes
checked and the failures, per node the link counters (retransmissions,
duplicates, restarts), and each process's memory first, last and largest.
Exit 0 only with no loss and no process whose memory grew more than 25%
between its second sample and its last (a leak). After a loss, the
cluster's logs (daemons, QEMU consoles, switch) are kept in OUT/logs.
--firmware boots (and restarts) every node with another firmware image.

The suite runs a 2-minute form (ctest stress.soak_short: --minutes 2
--kill-every 50); the 1-hour form is for the issue notes.
"""
import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CLUSTER = "soak"
NODES = 4
JOB_LIMIT = 120  # seconds: a job still running after this is a hang


def total(n, lo, hi):
    """Bytes of prog_size() messages i = 0..n-1 (tests/programs/prog_common.h)."""
    def size(i):
        if n < 2 or i == 0:
            return lo
        if i + 1 >= n:
            return hi
        return max(lo, lo + (hi - lo) * i // (n - 1) - i % 3)
    return sum(size(i) for i in range(n))


class Soak:
    def __init__(self, args):
        self.args = args
        self.bin = os.path.join(args.build, "bin")
        self.ulnic_bin = os.path.join(self.bin, "ulnic")
        self.rundir = tempfile.mkdtemp(prefix="ulnic-soak-", dir="/tmp")
        self.work = tempfile.mkdtemp(prefix="ulnic-soak-work-", dir="/tmp")
        self.env = dict(os.environ, ULNIC_RUNTIME_DIR=self.rundir, ULNIC_CLUSTER=CLUSTER)
        self.firmware = ["--firmware", os.path.abspath(args.firmware)] if args.firmware else []
        for k in [k for k in self.env if k.startswith(("ULNIC_AM_", "ULNIC_FM_", "ULNIC_NODE"))]:
            del self.env[k]
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.down = {}       # node -> (time stopped, time up again or None)
        self.outages = []    # (node, t_stop, t_up)
        self.jobs = {}       # name -> stats
        self.losses = []     # descriptions
        self.memory = {}     # process label -> [kB, ...]
        self.link = {n: {} for n in range(NODES)}  # counters accumulated over restarts

    def ulnic(self, *a, timeout=180):
        return subprocess.run([self.ulnic_bin, *a], env=self.env, capture_output=True, text=True, timeout=timeout)

    def prog(self, name):
        return os.path.join(self.bin, name)

    # ---- jobs

    def run_procs(self, cmds):
        """Starts commands (argv, extra env) together; -> [(exit, output)], killing all after JOB_LIMIT."""
        ps = [subprocess.Popen(c, env=dict(self.env, **e), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True, start_new_session=True) for c, e in cmds]
        out, deadline = [], time.monotonic() + JOB_LIMIT
        for p in ps:
            try:
                o, _ = p.communicate(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                o, _ = p.communicate()
                o += "\nHUNG: killed after the job's deadline"
            out.append((p.returncode, o))
        return out

    def job_puts(self, src, dst, tag):
        info = os.path.join(self.work, f"{tag}-{time.monotonic_ns()}.info")
        server = subprocess.Popen([self.prog("put_worker"), "serve", "--info", info, "--size", str(2 << 20)],
                                  env=dict(self.env, ULNIC_NODE=str(dst)), stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, text=True, start_new_session=True)
        until = time.monotonic() + 30
        while not os.path.exists(info) and server.poll() is None and time.monotonic() < until:
            time.sleep(0.05)
        ops = 2000
        if not os.path.exists(info):
            os.killpg(server.pid, signal.SIGKILL)
            return False, 0, 0, "the put server never started: " + (server.communicate()[0] or "")
        (prc, pout), = self.run_procs([([self.prog("put_worker"), "put", "--info", info, "--dst-node", str(dst),
                                         "--ops", str(ops), "--max-size", "65536"], {"ULNIC_NODE": str(src)})])
        try:
            sout, _ = server.communicate(timeout=JOB_LIMIT)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            sout = server.communicate()[0] + "\nHUNG"
        m = re.search(r"(\d+) puts checked, (\d+) bad bytes", sout)
        ok = prc == 0 and server.returncode == 0 and m and m[1] == str(ops) and m[2] == "0"
        return bool(ok), ops if ok else 0, 0, f"put: exit {prc}\n{pout}\nserve: exit {server.returncode}\n{sout}"

    def job_vmmc(self, a, b):
        rounds = 300
        res = self.run_procs([([self.prog("vmmc_tight"), "serve", str(b), "--rounds", str(rounds)],
                               {"ULNIC_NODE": str(a)}),
                              ([self.prog("vmmc_tight"), "send", str(a), "--rounds", str(rounds)],
                               {"ULNIC_NODE": str(b)})])
        data = total(rounds, 4, 4096)
        ok = all(rc == 0 for rc, _ in res) and f"{rounds} round trips, {2 * data} bytes verified" in res[1][1]
        return ok, 2 * rounds, 2 * data if ok else 0, "\n".join(o for _, o in res)

    def job_vipl(self, server, client):
        rounds = 200
        res = self.run_procs([([self.prog("vipl_tight"), "server", f"nic{server}", "--rounds", str(rounds)], {}),
                              ([self.prog("vipl_tight"), "client", f"nic{client}", f"node{server}", "--rounds",
                                str(rounds)], {})])
        data = total(rounds, 8, 4096)
        ok = all(rc == 0 for rc, _ in res) and f"{rounds} round trips, {2 * data} bytes verified" in res[1][1]
        return ok, 2 * rounds, 2 * data if ok else 0, "\n".join(o for _, o in res)

    def job_am(self, transport):
        reqs, xfers = 500, 2
        (rc, out), = self.run_procs([([self.ulnic_bin, "run", "-n", "2", "--transport", transport, "--nodes", "2",
                                       "-c", CLUSTER, self.prog("am_tight"), "--requests", str(reqs), "--xfers",
                                       str(xfers)], {})])
        data = total(xfers, 64 * 1024, 1024 * 1024)
        ok = rc == 0 and f"{reqs} requests and {xfers} xfers verified ({data} bytes)" in out
        return ok, 2 * reqs + xfers, data if ok else 0, out

    def job_fm(self):
        msgs = 300
        (rc, out), = self.run_procs([([self.ulnic_bin, "fmrun", "-n", "2", "--nodes", "2", "-c", CLUSTER,
                                       self.prog("fm_tight"), "--messages", str(msgs)], {})])
        data = total(msgs, 8, 512) + 8 * msgs
        ok = rc == 0 and out.count(f"{msgs} messages each way, {data} bytes verified") == 2
        return ok, 4 * msgs, 4 * data if ok else 0, out

    def loop(self, name, nodes, fn):
        st = self.jobs.setdefault(name, {"nodes": nodes, "runs": 0, "ok": 0, "ended_by_kill": 0, "lost": 0,
                                         "messages": 0, "bytes": 0})
        while not self.stop.is_set():
            t0 = time.time()
            try:
                ok, msgs, nbytes, out = fn()
            except Exception as e:  # a job that cannot even run is a loss too
                ok, msgs, nbytes, out = False, 0, 0, f"{type(e).__name__}: {e}"
            t1 = time.time()
            with self.lock:
                st["runs"] += 1
                if ok:
                    st["ok"] += 1
                    st["messages"] += msgs
                    st["bytes"] += nbytes
                elif self.overlaps_outage(nodes, t0, t1):
                    st["ended_by_kill"] += 1
                else:
                    st["lost"] += 1
                    self.losses.append(f"{name} (nodes {nodes}) failed at {t1 - self.t_start:.0f} s with its "
                                       f"nodes up:\n{out[-3000:]}")
            if not ok:
                time.sleep(1)

    def overlaps_outage(self, nodes, t0, t1):
        grace = 10  # a node back up needs a moment before its peers see it again
        for n, down, up in self.outages + [(n, d, u) for n, (d, u) in self.down.items()]:
            if n in nodes and t0 <= (up or time.time()) + grace and t1 >= down:
                return True
        return False

    # ---- faults and observation

    def counters(self, n):
        """Node n's counters, with its links' retransmission timeouts summed as link_timeouts."""
        p = self.ulnic("node", "status", "-c", CLUSTER, "-n", str(n), "--json", timeout=60)
        try:
            status = json.loads(p.stdout)
            c = status["counters"]
            c["link_timeouts"] = sum(l["timeouts"] for l in status["links"])
            return c
        except (ValueError, KeyError, TypeError):
            return None

    def fold_link(self, n):
        """Adds node n's link counters so far to the totals (before it restarts and they start over)."""
        c = self.counters(n)
        if c:
            for k, v in c.items():
                if k.startswith("link_") and isinstance(v, int):
                    self.link[n][k] = self.link[n].get(k, 0) + v

    def killer(self):
        turn = 0
        while not self.stop.wait(self.args.kill_every):
            n = (1 + turn) % NODES
            turn += 1
            self.fold_link(n)
            t_stop = time.time()
            with self.lock:
                self.down[n] = (t_stop, None)
            p = self.ulnic("node", "stop", "-c", CLUSTER, "-n", str(n))
            time.sleep(2)
            q = self.ulnic("node", "start", "-c", CLUSTER, "-n", str(n), "--slot-size", "16", *self.firmware)
            with self.lock:
                self.outages.append((n, t_stop, time.time()))
                del self.down[n]
            print(f"[{time.time() - self.t_start:6.0f} s] node {n} stopped ({p.returncode}) and started again "
                  f"({q.returncode})", flush=True)
            if q.returncode != 0:
                with self.lock:
                    self.losses.append(f"node {n} did not start again: {q.stdout}{q.stderr}")

    def processes(self):
        """label -> pid of the long-lived processes (QEMUs and daemons per node, fabric server, switch)."""
        out, base = {}, os.path.join(self.rundir, CLUSTER)
        for n in range(NODES):
            for what, f in (("qemu", "qemu.pid"), ("ulnicd", "ulnicd.pid")):
                try:
                    with open(os.path.join(base, f"node{n}", f)) as fh:
                        out[f"node{n} {what}"] = int(fh.read().split()[0])
                except (OSError, ValueError, IndexError):
                    pass
        for label, f in (("fabricd", os.path.join(base, "fabric", "fabricd.pid")),):
            try:
                with open(f) as fh:
                    out[label] = int(fh.read().split()[0])
            except (OSError, ValueError, IndexError):
                pass
        p = subprocess.run(["pgrep", "-f", f"ulnic-switch --fabric {base}"], capture_output=True, text=True)
        if p.stdout.split():
            out["switch"] = int(p.stdout.split()[0])
        return out

    def sampler(self):
        while not self.stop.wait(10):
            for label, pid in self.processes().items():
                try:
                    with open(f"/proc/{pid}/status") as fh:
                        kb = int(re.search(r"VmRSS:\s+(\d+)", fh.read())[1])
                except (OSError, TypeError):
                    continue
                # By pid: a restarted node's new process starts a series of its own.
                self.memory.setdefault(f"{label} (pid {pid})", []).append(kb)

    # ---- the run

    def run(self):
        faults = self.args.faults + f",seed={self.args.seed}"
        names = ",".join(f"node{n}" for n in range(NODES))
        p = self.ulnic("cluster", "up", "-n", str(NODES), "-c", CLUSTER, "--slot-size", "16", "--switch",
                       "--faults", faults, "--names", names, *self.firmware, timeout=300)
        if p.returncode != 0:
            print(f"soak: cluster up failed:\n{p.stdout}{p.stderr}", file=sys.stderr)
            return 1
        print(f"soak: 4 nodes behind a switch ({faults}), {self.args.minutes} min, a node restarted every "
              f"{self.args.kill_every} s", flush=True)
        self.t_start = time.time()
        specs = [("puts", [2, 3], lambda: self.job_puts(2, 3, "a")),
                 ("vmmc", [2, 3], lambda: self.job_vmmc(3, 2)),
                 ("vipl", [2, 3], lambda: self.job_vipl(3, 2)),
                 ("am", [0, 1], lambda: self.job_am("native")),
                 ("am_vipl", [0, 1], lambda: self.job_am("vipl")),
                 ("fm", [0, 1], self.job_fm),
                 ("puts_b", [0, 1], lambda: self.job_puts(1, 0, "b")),
                 ("vmmc_b", [0, 3], lambda: self.job_vmmc(0, 3))]
        threads = [threading.Thread(target=self.loop, args=s, daemon=True) for s in specs]
        threads += [threading.Thread(target=self.killer, daemon=True), threading.Thread(target=self.sampler,
                                                                                         daemon=True)]
        for t in threads:
            t.start()
        try:
            self.stop.wait(self.args.minutes * 60)
        finally:
            self.stop.set()
            for t in threads[:len(specs)]:
                t.join(JOB_LIMIT * 3)
            for n in range(NODES):
                self.fold_link(n)
            if self.losses and self.args.out:
                self.keep_logs(os.path.join(self.args.out, "logs"))
            self.ulnic("cluster", "down", "-c", CLUSTER)
            shutil.rmtree(self.rundir, ignore_errors=True)
            shutil.rmtree(self.work, ignore_errors=True)
        return self.report()

    def keep_logs(self, dest):
        for top, _, files in os.walk(self.rundir):
            for name in files:
                if name.endswith(".log"):
                    src = os.path.join(top, name)
                    to = os.path.join(dest, os.path.relpath(src, self.rundir))
                    os.makedirs(os.path.dirname(to), exist_ok=True)
                    shutil.copyfile(src, to)

    def report(self):
        secs = time.time() - self.t_start
        print(f"\n== soak: {secs / 60:.1f} min, {len(self.outages)} node restarts")
        print(f"{'job':<9}{'nodes':<8}{'runs':>6}{'ok':>6}{'killed':>8}{'lost':>6}{'messages':>12}{'MB checked':>12}")
        for name, s in self.jobs.items():
            print(f"{name:<9}{str(s['nodes']):<8}{s['runs']:>6}{s['ok']:>6}{s['ended_by_kill']:>8}{s['lost']:>6}"
                  f"{s['messages']:>12,}{s['bytes'] / 1e6:>12.1f}")
        print("\nlink counters per node (summed over restarts):")
        keys = ("link_tx_data", "link_retransmits", "link_timeouts", "link_duplicates", "link_out_of_order",
                "link_bad_packets", "link_restarts", "link_unreachable")
        print(f"{'node':<6}" + "".join(f"{k[5:]:>15}" for k in keys) + f"{'resent %':>10}")
        for n in range(NODES):
            c = self.link[n]
            resent = 100 * c.get("link_retransmits", 0) / max(1, c.get("link_tx_data", 0))
            print(f"{n:<6}" + "".join(f"{c.get(k, 0):>15,}" for k in keys) + f"{resent:>10.2f}")
        leaks = []
        print("\nresident memory, kB (first, second, last, largest sample):")
        for label, s in sorted(self.memory.items()):
            line = f"  {label:<28}{s[0]:>9}{(s[1] if len(s) > 1 else s[0]):>9}{s[-1]:>9}{max(s):>9}  ({len(s)} samples)"
            if len(s) >= 4 and s[-1] > 1.25 * s[1]:
                leaks.append(label)
                line += "  GREW"
            print(line)
        for l in self.losses:
            print(f"\nLOSS: {l}")
        data = {"minutes": secs / 60, "restarts": len(self.outages), "jobs": self.jobs, "link": self.link,
                "memory_kb": self.memory, "losses": self.losses, "grew": leaks, "faults": self.args.faults}
        if self.args.out:
            os.makedirs(self.args.out, exist_ok=True)
            with open(os.path.join(self.args.out, "soak.json"), "w") as f:
                json.dump(data, f, indent=1)
        ok = not self.losses and not leaks and all(s["ok"] > 0 for s in self.jobs.values())
        print(f"\nsoak: {'ok' if ok else 'FAILED'}: {len(self.losses)} losses, {len(leaks)} processes grew"
              + "".join(f"; {n} never completed a run" for n, s in self.jobs.items() if s["ok"] == 0))
        return 0 if ok else 1


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--minutes", type=float, default=60)
    ap.add_argument("--kill-every", type=float, default=180)
    ap.add_argument("--faults", default="drop=0.01,dup=0.005,reorder=0.01")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--out", default=None)
    ap.add_argument("--firmware", metavar="ELF", help="boot every node with this firmware image")
    args = ap.parse_args()
    return Soak(args).run()


if __name__ == "__main__":
    sys.exit(main())
