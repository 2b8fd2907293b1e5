"""Shared by the benchmark drivers (fabric_bench.py, vmmc_bench.py, vipl_bench.py, slot_bench.py, hop_bench.py, ...).

A private cluster in its own ULNIC_RUNTIME_DIR, the server/client processes
of a run, the whole run of a driver whose program serves on one node of a
private two-node cluster and measures from the other (two_node_main), the
result file's header and last lines, and the plotting scaffolding
(matplotlib with the Agg backend; where this Python lacks it, the driver is
run again under /usr/bin/python3 with --plot-only). The drivers import it
from their own directory.
"""
import argparse
import json
import math
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
SYSTEM_PYTHON = "/usr/bin/python3"


def half_size(pts):
    """N1/2 of [(size, rate)] sorted by size: the size at which the rate first reaches half the largest size's,
    linear in log2(size) between the sizes around it; None if it is not reached."""
    half = pts[-1][1] / 2
    for (s0, v0), (s1, v1) in zip(pts, pts[1:]):
        if v0 >= half:
            return s0
        if v1 >= half:
            return 2 ** (math.log2(s0) + (half - v0) / (v1 - v0) * (math.log2(s1) - math.log2(s0)))
    return None


def size_name(b):
    b = int(b)
    if b >= 1 << 20 and b % (1 << 20) == 0:
        return f"{b >> 20} MiB"
    if b >= 1024 and b % 1024 == 0:
        return f"{b >> 10} KiB"
    return f"{b} B"


def loadavg():
    with open("/proc/loadavg") as f:
        return f.read().split()[:3]


def check_build(build, programs, prog):
    """The build directory, absolute; exits with a hint if bin/<program> is missing for any of `programs`."""
    path = os.path.abspath(build)
    for f in programs:
        if not os.access(os.path.join(path, "bin", f), os.X_OK):
            sys.exit(f"{prog}: {path}/bin/{f} not found: build first (cmake --build {build})")
    return path


def runtime_parent():
    """Where a private runtime directory goes: /dev/shm where it holds at least 1 GiB, else /tmp -- the rule
    the tools follow (common/include/ulnic/util/runtime_dir.h). Slot, SRAM and fabric files are shared memory; on a /tmp
    over disk the kernel writes the NICs' dirty pages back while they run, which cost a VMMC stream up to 4x
    its bandwidth in some runs (issue 5)."""
    try:
        st = os.statvfs("/dev/shm")
        if st.f_blocks * st.f_frsize >= 1 << 30:
            return "/dev/shm"
    except OSError:
        pass
    return "/tmp"


def remove_runtime(runtime):
    """Removes a private runtime directory; returns what cluster down had left in it."""
    left = os.listdir(runtime) if os.path.isdir(runtime) else []
    shutil.rmtree(runtime, ignore_errors=True)
    return left


class Cluster:
    """`ulnic cluster up -n NODES -c NAME --slot-size MIB [EXTRA...]` in a private runtime directory."""

    def __init__(self, build, runtime, name, slot_mib, extra=(), nodes=2, prog="bench", down_label=None):
        self.ulnic = os.path.join(build, "bin", "ulnic")
        self.runtime, self.name, self.slot_mib, self.extra, self.nodes = runtime, name, slot_mib, list(extra), nodes
        self.prog = prog
        self.down_label = down_label or f"cluster down -c {name}"
        self.is_up = False

    def env(self, node):
        return dict(os.environ, ULNIC_RUNTIME_DIR=self.runtime, ULNIC_CLUSTER=self.name, ULNIC_NODE=str(node))

    def up(self):
        cmd = [self.ulnic, "cluster", "up", "-n", str(self.nodes), "-c", self.name, "--slot-size", str(self.slot_mib),
               *self.extra]
        self.is_up = True  # even on failure: down cleans up what did start
        p = subprocess.run(cmd, env=self.env(0), capture_output=True, text=True, timeout=180)
        if p.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} -> {p.returncode}\n{p.stdout}{p.stderr}")

    def boosts(self):
        """The node daemons' priority boosts so far (daemon/priority_guard.h): their log lines, each node's."""
        lines = []
        for k in range(self.nodes):
            try:
                with open(os.path.join(self.runtime, self.name, f"node{k}", "ulnicd.log")) as f:
                    lines += [l.rstrip() for l in f if "the host starves the NIC" in l]
            except OSError:
                pass
        return lines

    def status(self):
        p = subprocess.run([self.ulnic, "cluster", "status", "-c", self.name, "--json"], env=self.env(0),
                           capture_output=True, text=True, timeout=60)
        try:
            return json.loads(p.stdout)
        except ValueError:
            return None

    def down(self):
        if not self.is_up:
            return
        p = subprocess.run([self.ulnic, "cluster", "down", "-c", self.name], env=self.env(0), capture_output=True,
                           text=True, timeout=180)
        self.is_up = False
        if p.returncode != 0:
            print(f"{self.prog}: warning: {self.down_label}: {p.stdout}{p.stderr}", file=sys.stderr)


def start(cmd, env):
    """A benchmark process, stdout and stderr together as text."""
    return subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def output_of(proc, timeout):
    """What proc printed until it exited; killed after `timeout` seconds."""
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, _ = proc.communicate()
    return out


def stream_output(proc, timeout):
    """Copies what proc prints to our stdout as it comes, killing it after `timeout` seconds (even if it prints
    nothing) -> (its exit status, all it printed)."""
    timer = threading.Timer(timeout, proc.kill)
    timer.start()
    lines = []
    try:
        for line in proc.stdout:
            sys.stdout.write(line)
            sys.stdout.flush()
            lines.append(line)
        return proc.wait(), "".join(lines)
    finally:
        timer.cancel()


def stop(proc):
    """Kills proc (if any) if it still runs."""
    if proc is not None and proc.poll() is None:
        proc.kill()
        proc.wait()


def run_together(cmds, limit, what, failed=lambda out: False):
    """[(argv, env)] started together and waited for, the last first (the measuring side, listed last, lets its
    peers end) -> their outputs, in the order given. RuntimeError, with every process killed, if one is still
    running `limit` seconds after the start, exits nonzero, or failed(its output) says so; its message ends with
    what the others printed (a peer that died first is often the cause)."""
    procs = [start(argv, env) for argv, env in cmds]
    outs, deadline = {}, time.monotonic() + limit

    def others(p):
        text = ""
        for q in procs:
            if q is not p:
                rc = q.poll()
                out = outs[q] if q in outs else output_of(q, 0)
                text += f"\n[{' '.join(q.args)} -> {'still running: killed' if rc is None else rc}]\n{out}"
        return text

    try:
        for p in reversed(procs):
            try:
                outs[p] = p.communicate(timeout=max(1, deadline - time.monotonic()))[0]
            except subprocess.TimeoutExpired:
                raise RuntimeError(f"{what}: no end within {limit} s{others(p)}") from None
            if p.returncode != 0 or failed(outs[p]):
                raise RuntimeError(f"{what}: {' '.join(p.args)} -> {p.returncode}\n{outs[p]}{others(p)}")
    finally:
        for p in procs:
            stop(p)
    return [outs[p] for p in procs]


def protocols_of(ap, text, choices):
    """A --protocols list (comma-separated), each one of `choices`; an argparse error otherwise."""
    protos = [p for p in text.split(",") if p]
    for p in protos:
        if p not in choices:
            ap.error(f"--protocols: one or more of {', '.join(choices)}")
    return protos


def on_private_cluster(build, name, slot_mib, extra, prog, run):
    """`ulnic cluster up -n 2 -c NAME --slot-size MIB EXTRA...` in a fresh runtime directory (runtime_parent()),
    then run(cluster); the cluster is brought down and the directory removed however that ends. An error of the
    run (RuntimeError, TimeoutExpired, OSError, ValueError) is printed. -> run's exit status, or 1 after an error."""
    runtime = tempfile.mkdtemp(prefix=f"ulnic-{name}-", dir=runtime_parent())
    nodes = Cluster(build, runtime, name, slot_mib, extra, prog=prog, down_label="cluster down")
    try:
        up = " ".join(["ulnic cluster up -n 2 -c", name, "--slot-size", str(slot_mib), *extra])
        print(f"######## {up} (runtime {runtime})", flush=True)
        nodes.up()
        return run(nodes)
    except (RuntimeError, subprocess.TimeoutExpired, OSError, ValueError) as e:
        print(f"{prog}: {e}", file=sys.stderr)
        return 1
    finally:
        boosts = nodes.boosts()
        # A boost means the host starved a NIC meanwhile: the figures were
        # taken on a loaded machine (and partly at another priority).
        print(f"{prog}: the NICs' priority was raised {len(boosts)} time(s) during the run"
              + "".join("\n  " + l for l in boosts), flush=True)
        nodes.down()
        left = remove_runtime(runtime)
        if left:
            print(f"{prog}: note: cluster down left {left} in the runtime directory (removed)", file=sys.stderr)


# --------------------------------- a server and a client on a two-node cluster

def default_build(program, dirs):
    """The first ROOT/DIR (DIR in dirs) that holds bin/<program>; else ROOT/build."""
    for d in dirs:
        if os.access(os.path.join(ROOT, d, "bin", program), os.X_OK):
            return os.path.join(ROOT, d)
    return os.path.join(ROOT, "build")


def two_node_args(doc, program, build_dirs, quick_help, slot_help, cluster_arg):
    """The command line of a two-node driver: (its options, the arguments after `--`, which go to the client).
    cluster_arg: with --cluster-arg (more arguments for `ulnic cluster up`)."""
    argv = sys.argv[1:]
    client_args = []
    if "--" in argv:
        k = argv.index("--")
        argv, client_args = argv[:k], argv[k + 1:]
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=default_build(program, build_dirs),
                    help=f"build directory (bin/ulnic, bin/{program})")
    ap.add_argument("--out", default=f"{program}_out", help="output directory for JSON and PNGs")
    ap.add_argument("--quick", action="store_true", help=quick_help)
    ap.add_argument("--slot-size", type=int, default=64, help=slot_help)
    ap.add_argument("--timeout", type=int, default=900, help="give up on the client after this many seconds")
    if cluster_arg:
        ap.add_argument("--cluster-arg", action="append", default=[], metavar="ARG",
                        help="one more argument for `ulnic cluster up` (repeatable: --cluster-arg=--switch, "
                             "--cluster-arg=--firmware --cluster-arg=ELF)")
    ap.add_argument("--plot-only", metavar="JSON", help=f"redraw the PNGs from a {program}.json and exit")
    return ap.parse_args(argv), client_args


def run_client_server(build, out, cluster, program, client_args, timeout, server_wait):
    """`PROGRAM serve --peer 0` on node 1 and `PROGRAM client --peer 1 --json OUT/PROGRAM_client.json CLIENT_ARGS`
    on node 0, the client's tables streamed as they come and the server's output after them (waited for up to
    server_wait seconds once the client is done) -> (the client's JSON, client exit, server exit, server output)."""
    bench = os.path.join(build, "bin", program)
    out_json = os.path.join(out, f"{program}_client.json")
    if os.path.exists(out_json):
        os.remove(out_json)
    server = start([bench, "serve", "--peer", "0", "--idle-timeout", str(timeout)], cluster.env(1))
    try:
        cmd = [bench, "client", "--peer", "1", "--json", out_json, *client_args]
        print("$ " + " ".join(cmd), flush=True)
        client = start(cmd, cluster.env(0))
        deadline = time.time() + timeout
        for line in client.stdout:  # stream the tables as they come
            sys.stdout.write(line)
            sys.stdout.flush()
            if time.time() > deadline:
                client.kill()
                raise RuntimeError(f"{program} client still running after {timeout} s")
        rc = client.wait()
        sout = output_of(server, server_wait)
        sys.stdout.write(sout)
        if rc != 0 and not os.path.exists(out_json):
            raise RuntimeError(f"{program} client exited {rc}")
        with open(out_json) as f:
            result = json.load(f)
        return result, rc, server.returncode, sout
    finally:
        stop(server)


def two_node_main(doc, script, program, cluster, build_dirs, quick_help, slot_help, server_wait, summary, plot,
                  verified, cluster_arg=False):
    """The whole of a driver whose PROGRAM serves on node 1 and measures from node 0 of a private two-node cluster
    (`ulnic cluster up -n 2 -c CLUSTER --slot-size MIB`, in its own ULNIC_RUNTIME_DIR): its command line (see
    two_node_args), the run (see run_client_server; the client gets --quick with --quick), the cluster down;
    then summary(data) and "data verified (VERIFIED): yes/NO" printed, OUT/PROGRAM.json written (the client's JSON
    under "run") and plot(data, out) drawn. -> the exit code."""
    prog = f"{program}.py"
    args, client_args = two_node_args(doc, program, build_dirs, quick_help, slot_help, cluster_arg)
    cluster_args = args.cluster_arg if cluster_arg else None

    out = out_dir(args, plot, script)
    build = check_build(args.build, ("ulnic", program), prog)

    t0 = time.time()
    params = {"quick": args.quick, "slot_size_mib": args.slot_size}
    if cluster_args is not None:
        params["cluster_args"] = cluster_args
    params["client_args"] = client_args
    data = {**header(prog), "params": params}

    def run(nodes):
        cargs = (["--quick"] if args.quick else []) + client_args
        result, crc, src, sout = run_client_server(build, out, nodes, program, cargs, args.timeout, server_wait)
        data["run"] = result
        data["client_exit"], data["server_exit"], data["server_output"] = crc, src, sout
        status = nodes.status()
        if status:
            data["cluster_status_at_end"] = status
        return crc or src or 0

    rc = on_private_cluster(build, cluster, args.slot_size, cluster_args or (), prog, run)

    finish(data, t0)
    if "run" not in data:
        return rc or 1
    print()
    print(summary(data))
    print(f"data verified ({verified}): {'yes' if data['run'].get('verified') else 'NO'}")
    print(runtime_line(data))
    json_path = os.path.join(out, f"{program}.json")
    write_json(data, json_path)
    if not draw(json_path, out, plot, script):
        rc = rc or 1
    return rc


def of_mode(rows, mode):
    """The rows of one mode, by size."""
    return sorted((r for r in rows if r["mode"] == mode), key=lambda r: r["size"])


# ----------------------------------------------------------- the result file

def header(benchmark):
    """The first keys of a driver's JSON."""
    return {"benchmark": benchmark, "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "host": platform.node(),
            "loadavg_at_start": loadavg()}


def finish(data, t0):
    """Sets runtime_s and loadavg_at_end."""
    data["runtime_s"] = time.time() - t0
    data["loadavg_at_end"] = loadavg()


def runtime_line(data):
    return (f"total runtime {data['runtime_s']:.0f} s; load average at start {' '.join(data['loadavg_at_start'])}, "
            f"at end {' '.join(data['loadavg_at_end'])}")


def write_json(data, path):
    with open(path, "w") as f:
        json.dump(data, f, indent=1)
    print(f"wrote {path}")


# ----------------------------------------------------------------- plots

def out_dir(args, plot, script):
    """args.out, made absolute and created; with --plot-only JSON, redraws its PNGs there and exits."""
    out = os.path.abspath(args.out)
    os.makedirs(out, exist_ok=True)
    if args.plot_only:
        sys.exit(0 if draw(os.path.abspath(args.plot_only), out, plot, script) else 1)
    return out


def draw(json_path, out, plot, script):
    """plot(data, out) -> the PNGs written, with this Python if it has matplotlib, else by running
    `script --plot-only` with the system one."""
    prog = os.path.basename(script)
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        if os.path.realpath(sys.executable) != os.path.realpath(SYSTEM_PYTHON) and os.access(SYSTEM_PYTHON, os.X_OK):
            p = subprocess.run([SYSTEM_PYTHON, os.path.abspath(script), "--plot-only", json_path, "--out", out])
            return p.returncode == 0
        print(f"{prog}: matplotlib missing: apt-get install python3-matplotlib (plots skipped)", file=sys.stderr)
        return False
    with open(json_path) as f:
        data = json.load(f)
    for p in plot(data, out):
        print(f"wrote {p}")
    return True


def subtitle(data, middle=""):
    """A plot's second title line: the client's machine (data["run"]["machine"]), `middle`, the load average."""
    m = data["run"]["machine"]
    load = " ".join(data.get("loadavg_at_start", []))
    return f"{m['nproc']} CPUs, {m['cpu_model']}; {middle}load average at start {load}"


def mode_series(rows, modes, sizes):
    """(the rows of the mode by size, their sizes, *style) for each (mode, *style) in modes that has rows;
    adds their sizes to the set `sizes`."""
    for mode, *style in modes:
        of = of_mode(rows, mode)
        if of:
            xs = [r["size"] for r in of]
            sizes.update(xs)
            yield (of, xs, *style)


def err_bars(meds, rows, key, k=1.0):
    """Error bars from each median in meds down to its row's row[key]["min"] * k and up to its ["max"] * k."""
    lo = [m - r[key]["min"] * k for m, r in zip(meds, rows)]
    hi = [r[key]["max"] * k - m for m, r in zip(meds, rows)]
    return [lo, hi]


def memcpy_floor_line(ax, floors, sizes):
    """The run's host memcpy floor (floors["memcpy"], bytes_per_s medians, as MB/s) at those of `sizes` it has."""
    mc = sorted((r for r in floors.get("memcpy", []) if r["size"] in sizes), key=lambda r: r["size"])
    if mc:
        ax.plot([r["size"] for r in mc], [r["bytes_per_s"]["median"] / 1e6 for r in mc], color="gray",
                marker=".", ls=":", label="floor: host memcpy, median")


def pyplot():
    """matplotlib.pyplot, drawing to files."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def save(fig, out, name, written):
    """Writes fig to OUT/name, closes it and adds the path to `written`."""
    p = os.path.join(out, name)
    fig.savefig(p, dpi=120, bbox_inches="tight")
    pyplot().close(fig)
    written.append(p)


def minor_label(suffix=""):
    """A formatter that labels the 2s and 5s of a log axis."""
    from matplotlib.ticker import FuncFormatter

    def label(v, _):
        if v <= 0:
            return ""
        m = v / 10 ** math.floor(math.log10(v) + 1e-9)
        return f"{v:g}{suffix}" if round(m) in (2, 5) and abs(m - round(m)) < 1e-6 else ""
    return FuncFormatter(label)


def log_y(ax, suffix="", minor_labels=False, grid_alpha=None):
    """A log y axis with plain numbers (and `suffix`); minor_labels: the 2s and 5s too; grid_alpha: a minor grid."""
    from matplotlib.ticker import FuncFormatter
    ax.set_yscale("log")
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}{suffix}"))
    if minor_labels:
        ax.yaxis.set_minor_formatter(minor_label(suffix))
    if grid_alpha:
        ax.grid(True, which="minor", axis="y", alpha=grid_alpha)


def size_axis(ax, sizes, label, rotation=0):
    """A log2 x axis of message sizes, one label per size (of two within 1.3x, like 128 and 129 B, the first)."""
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator
    ax.set_xscale("log", base=2)
    ticks = []
    for v in sorted(sizes):
        if not ticks or v >= ticks[-1] * 1.3:
            ticks.append(v)
    ax.xaxis.set_major_locator(FixedLocator(ticks))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: size_name(v)))
    if rotation:
        for t in ax.get_xticklabels():
            t.set_rotation(rotation)
    ax.set_xlabel(label)
    ax.grid(True, which="major", alpha=0.35)
