"""Shared by the benchmark drivers (fabric_bench.py, vmmc_bench.py, slot_bench.py).

A private cluster in its own ULNIC_RUNTIME_DIR, the server/client processes
of a run, the result file's header and last lines, and the plotting
scaffolding (matplotlib with the Agg backend; where this Python lacks it, the
driver is run again under /usr/bin/python3 with --plot-only). The drivers
import it from their own directory.
"""
import json
import math
import os
import platform
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
SYSTEM_PYTHON = "/usr/bin/python3"


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


def stop(proc):
    """Kills proc (if any) if it still runs."""
    if proc is not None and proc.poll() is None:
        proc.kill()
        proc.wait()


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
