"""The papers' experiments (issue 22): `ulnic paper all --quick` (tests/bench/papers.py) runs every benchmark driver the five
papers need on private clusters and writes a complete report; the cost model's arithmetic; the published values
are only sourced ones.

The run (about 2 minutes): every driver exits 0 (each verifies its data), every paper has its rows, every row a
wall-clock value, the rows the model covers a modelled one (from the exact instruction counts: the same on both
runs of cost.py that feed it), every published value in a row is the one tests/bench/published.py holds for it,
report.html has every paper's table and every PNG inline, and every PNG papers.json names exists. Needs ULNIC_BIN
(the build's ulnic: its programs are beside it).
"""
import base64
import html
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

BENCH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bench")
sys.path.insert(0, BENCH)
import cost_model as cm  # noqa: E402
import host_cost  # noqa: E402
import papers  # noqa: E402
from published import HARDWARE, PUBLISHED, SOURCES  # noqa: E402

ULNIC = os.path.abspath(os.environ.get("ULNIC_BIN", "build/bin/ulnic"))


class CostModel(unittest.TestCase):
    def setUp(self):
        self.p = cm.preset("lanai4")

    def test_every_preset_has_every_parameter_with_its_source(self):
        for name in cm.PRESETS:
            p = cm.preset(name)
            for k in cm.PARAMS:
                self.assertGreater(p[k], 0, f"{name}.{k}")
                self.assertTrue(p["sources"][k].strip(), f"{name}.{k} has no source")

    def test_nic_time_is_instructions_at_the_clock(self):
        self.assertAlmostEqual(cm.t_nic(33, self.p), 1.0)  # 33 instructions at 33 MHz, one per cycle
        p7 = cm.preset("lanai7")
        self.assertAlmostEqual(cm.t_nic(1000, p7), 1000 / 66.0)

    def test_one_way_adds_the_stages(self):
        p = self.p
        inline = cm.oneway_us(4, 100, 200, p, inline=True)
        want = (64 + 4) / p["pio_mbps"] + 100 / 33 + p["link_start_us"] + (4 + 64) / p["link_mbps"] + 200 / 33 \
            + p["dma_start_us"] + 4 / p["dma_mbps"]
        self.assertAlmostEqual(inline, want)
        fetched = cm.oneway_us(4, 100, 200, p, inline=False)
        self.assertAlmostEqual(fetched - inline, p["dma_start_us"] + 4 / p["dma_mbps"] - 4 / p["pio_mbps"])
        self.assertLess(cm.oneway_us(64, 100, 200, p, False), cm.oneway_us(4096, 100, 200, p, False))

    def test_a_long_message_streams_at_its_slowest_stage(self):
        p = self.p
        for send, recv in ((100, 100), (10000, 100), (100, 20000)):
            stage = max(cm.t_nic(send, p), cm.t_dma(cm.MTU, p), cm.t_link(cm.MTU, p), cm.t_nic(recv, p))
            big = 1 << 26
            self.assertAlmostEqual(cm.bandwidth_mbps(big, (send, recv), (send, recv), p), cm.MTU / stage, delta=0.5)
            # one packet more costs exactly one stage
            t1, t2 = (cm.stream_us(k * cm.MTU, (send, recv), (send, recv), p) for k in (3, 4))
            self.assertAlmostEqual(t2 - t1, stage)
        self.assertEqual(cm.n_half((100, 100), (100, 100), p, [64, 4096]), 4096)
        sizes = [2 ** k for k in range(6, 21)]
        nh = cm.n_half((100, 100), (100, 100), p, sizes)
        self.assertIn(nh, sizes)
        self.assertLess(nh, max(sizes))


CALLGRIND = """# callgrind format
version: 1
positions: line
events: Ir
fl=(1) lib.c
fn=(1) main
10 5
cfn=(2) send
calls=3 20
11 300
cfn=(3) poll
calls=7 30
12 70
fn=(2)
20 240
cfn=(4) memcpy
calls=3 40
21 60
fn=(4)
40 60
fn=(3)
30 70
totals: 435
"""


class Callgrind(unittest.TestCase):
    def test_calls_and_inclusive_cost_from_every_call_site(self):
        with tempfile.NamedTemporaryFile("w", suffix=".cg") as f:
            f.write(CALLGRIND)
            f.flush()
            prof = host_cost.parse_callgrind(f.name)
        self.assertEqual(prof["calls"]["send"], [3, 300])
        self.assertEqual(prof["calls"]["poll"], [7, 70])
        self.assertEqual(prof["calls"]["memcpy"], [3, 60])
        self.assertEqual(prof["self"], {"main": 5, "send": 240, "memcpy": 60, "poll": 70})
        two = host_cost.merge([prof, prof])
        self.assertEqual(two["calls"]["send"], [6, 600])
        where = dict(host_cost.inside(prof, "send"))
        self.assertEqual(where, {"send": 240, "memcpy": 60})  # poll is not called from send

    def test_names_are_short(self):
        self.assertEqual(host_cost.short("ulnic::vipl::(anonymous namespace)::post(ulnic::Vi&, int) const"),
                         "vipl::post")
        self.assertEqual(host_cost.short("pthread_mutex_lock@@GLIBC_2.2.5"), "pthread_mutex_lock")


class Published(unittest.TestCase):
    def test_entries_are_complete_and_a_value_has_its_source(self):
        for paper, entries in PUBLISHED.items():
            self.assertIn(paper, SOURCES)
            for key, e in entries.items():
                self.assertEqual(set(e), {"value", "unit", "what", "where", "note"}, f"{paper}.{key}")
                if e["value"] is None:
                    self.assertTrue(e["note"], f"{paper}.{key}: no value and no reason")
                else:
                    self.assertNotIn(e["where"].strip(), ("", "-"), f"{paper}.{key}: a value without a source")
        for preset, entries in HARDWARE.items():
            for key, e in entries.items():
                self.assertTrue(e["value"] is None or e["where"].strip() not in ("", "-"), f"{preset}.{key}")

    def test_every_key_the_tables_name_exists(self):
        with open(os.path.join(BENCH, "papers.py")) as f:
            src = f.read()
        keys = re.findall(r'pub\("(\w+)", (?:f?)"([^"]+)"\)', src)
        self.assertGreater(len(keys), 8)
        for paper, key in keys:
            if "{" in key:  # an f-string: every key it can make
                keys_of = [key.format(sys_key=s, pkey=p) for s in ("raw_vi", "am_vi") for _, _, p in papers.LOGP]
            else:
                keys_of = [key]
            for k in keys_of:
                self.assertIn(k, PUBLISHED[paper], f"papers.py names {paper}.{k}, which published.py lacks")


class PapersAll(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.out = tempfile.mkdtemp(prefix="ulnic-papers-")
        # `ulnic paper` runs tests/bench/papers.py against the build ulnic belongs to.
        cls.proc = subprocess.run([ULNIC, "paper", "all", "--quick", "--out", cls.out], capture_output=True, text=True,
                                  timeout=1500)
        path = os.path.join(cls.out, "papers.json")
        cls.data = None
        if os.path.exists(path):
            with open(path) as f:
                cls.data = json.load(f)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.out, ignore_errors=True)

    def setUp(self):
        self.assertIsNotNone(self.data, self.proc.stdout[-3000:] + self.proc.stderr[-3000:])

    def test_every_driver_ran_and_verified_its_data(self):
        self.assertEqual(self.proc.returncode, 0, self.proc.stdout[-4000:] + self.proc.stderr[-4000:])
        self.assertTrue(self.data["completed_and_verified"])
        names = {r["name"] for r in self.data["runs"]}
        self.assertEqual(names, set(papers.drivers(papers.PAPERS, True)))
        for r in self.data["runs"]:
            self.assertEqual(r["exit"], 0, r)
            self.assertTrue(os.path.exists(os.path.join(self.out, r["json"])), r)

    def test_every_row_has_its_wall_clock_value_and_the_model_covers_its_rows(self):
        self.assertEqual(list(self.data["papers"]), list(papers.PAPERS))
        for paper, sec in self.data["papers"].items():
            self.assertGreaterEqual(len(sec["rows"]), 5, paper)
            for r in sec["rows"]:
                self.assertIsNotNone(r["wall"], f"{paper}: {r['measure']}")
            modelled = [r for r in sec["rows"] if r["modelled"] is not None]
            if sec["preset"] is None:
                self.assertEqual(modelled, [], paper)
        rows = {(p, r["measure"]): r for p, sec in self.data["papers"].items() for r in sec["rows"]}
        for key in (("vmmc", "one-way latency 4 B (inline), poll"), ("vmmc", "one-way latency 4 KiB (DMA), poll"),
                    ("vmmc", "one-way bandwidth 1 MiB"), ("via", "raw VI (16 B send/echo): L"),
                    ("fm", "FM one-way latency 16 B")):
            self.assertIn(key, rows)
            self.assertGreater(rows[key]["modelled"], 0, key)
        # the DMA path costs more than the inline one, and a long message streams faster than a short one
        self.assertGreater(rows[("vmmc", "one-way latency 4 KiB (DMA), poll")]["modelled"],
                           rows[("vmmc", "one-way latency 4 B (inline), poll")]["modelled"])
        self.assertGreater(rows[("vmmc", "one-way bandwidth 1 MiB")]["modelled"],
                           rows[("vmmc", "one-way bandwidth 64 B")]["modelled"])

    def test_the_host_half_counts_each_send_call(self):
        for paper, protos in papers.HOST_PROTOS.items():
            host = {h["protocol"]: h for h in self.data["papers"][paper]["host"]}
            self.assertEqual(set(host), set(protos), paper)
            for h in host.values():
                self.assertGreater(h["calls"], 0, h)
                self.assertGreater(h["per_call"], 50, h)  # a send call is more than a few instructions
                self.assertGreater(h["modelled_us"], 0, h)
                self.assertTrue(h["where"], h)
        rows = {r["measure"]: r for r in self.data["papers"]["via"]["rows"]}
        self.assertIsNotNone(rows["delta: AM over VI - raw VI, RTT/2"]["modelled"])
        self.assertIsNotNone(rows["raw VI (16 B send/echo): o_s"]["modelled"])

    def test_the_model_charges_the_exact_counts(self):
        sec = self.data["papers"]["vmmc"]
        send = next(b for b in sec["breakdown"] if b["side"] == "send")
        self.assertEqual(send["total"], sum(send["phases"].values()))
        p = cm.preset("lanai4")
        self.assertAlmostEqual(sum(send["modelled_us"].values()), cm.t_nic(send["total"], p))
        cost = json.load(open(os.path.join(self.out, "raw", "cost_short", "cost.json")))
        vmmc = next(r for r in cost["results"] if r["protocol"] == "vmmc")
        self.assertEqual(vmmc["unequal_runs"], [], "the counts the model charges were not deterministic")
        self.assertEqual(send["total"], vmmc["sides"]["ping"]["send"]["total"])

    def test_a_published_value_is_the_sourced_one(self):
        shown = 0
        for paper, sec in self.data["papers"].items():
            for r in sec["rows"]:
                if r["published"] is not None:
                    shown += 1
                    match = [e for e in PUBLISHED[paper].values() if json.loads(json.dumps(e)) == r["published"]]
                    self.assertTrue(match, f"{paper}: {r['measure']}: {r['published']}")
                    self.assertIsNotNone(r["published"]["value"])
        self.assertGreaterEqual(shown, 5)

    def test_the_report_has_every_table_and_every_plot(self):
        with open(os.path.join(self.out, "report.html")) as f:
            page = f.read()
        for paper in papers.PAPERS:
            self.assertTrue(f"<h2 id='{paper}'>" in page, paper)
        self.assertEqual(page.count("<h2 id="), len(papers.PAPERS))
        self.assertTrue(f"commit {self.data['commit']}," in page)
        self.assertGreaterEqual(len(self.data["floors"]), 3)
        for label in self.data["floors"]:
            self.assertTrue(html.escape(label) in page, label)
        images = re.findall(r"src='data:image/png;base64,([A-Za-z0-9+/=]+)'", page)
        want = sum(len(sec["pngs"]) for sec in self.data["papers"].values())
        self.assertEqual(len(images), want)
        for b64 in images:
            self.assertEqual(base64.b64decode(b64)[:8], b"\x89PNG\r\n\x1a\n")
        for paper, sec in self.data["papers"].items():
            self.assertGreaterEqual(len(sec["pngs"]), 1, paper)
            if paper != "amudp":
                self.assertIn(f"{paper}/{paper}_model.png", sec["pngs"])
            for png in sec["pngs"]:
                self.assertGreater(os.path.getsize(os.path.join(self.out, png)), 1000, png)


if __name__ == "__main__":
    unittest.main(verbosity=2)
