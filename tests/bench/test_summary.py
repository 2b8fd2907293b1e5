#!/usr/bin/env python3
"""bench.summary: summary.py's stream table prints every bandwidth row that metered its parts, and each
target's ratio comes with its spread over the rounds.

The unmet bulk rows of a default run (native AM, AM over VIPL, FM, MP) are streams shorter than half a second:
the machine's busy CPUs, counted in 10 ms ticks, are missing for them, but each process's and each NIC's share
is not, and those shares are what says where an unmet row's time went. No cluster needed.
"""
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from summary import SHARE_PARTS, ratio_span, stream_lines  # noqa: E402

FIGURES = {
    # a long row: every part and the machine
    "bw.vmmc.65536": 3754.0, "share.vmmc.65536.host_client": 0.21, "share.vmmc.65536.nic_client": 0.77,
    "share.vmmc.65536.nic_server": 0.96, "share.vmmc.65536.host_server": 0.0, "share.vmmc.65536.machine": 1.94,
    # a short row: the parts only
    "bw.am_native.65536": 1303.0, "share.am_native.65536.host_client": 0.12,
    "share.am_native.65536.nic_client": 0.48, "share.am_native.65536.nic_server": 0.47,
    "share.am_native.65536.host_server": 0.15,
    # a bandwidth with no meter at all (an older program's JSON)
    "bw.fm.65536": 1975.0,
}


def row(lines, name, size):
    hits = [x.split() for x in lines if x.strip().startswith(name) and size in x]
    return hits[0] if len(hits) == 1 else None


class StreamLines(unittest.TestCase):
    def setUp(self):
        self.lines = stream_lines(FIGURES.get)

    def test_a_row_with_the_machine_share_prints_all_five(self):
        r = row(self.lines, "VMMC one-way", "64 KiB")
        self.assertIsNotNone(r)
        self.assertEqual(r[-len(SHARE_PARTS):], ["0.21", "0.77", "0.96", "0.00", "1.94"])
        self.assertIn("3,754", r)

    def test_a_short_row_prints_its_parts_and_a_dash_for_the_machine(self):
        r = row(self.lines, "native AM_RequestXfer", "64 KiB")
        self.assertIsNotNone(r, "\n".join(self.lines))
        self.assertEqual(r[-len(SHARE_PARTS):], ["0.12", "0.48", "0.47", "0.15", "-"])
        self.assertIn("1,303", r)

    def test_a_row_that_metered_nothing_is_left_out(self):
        self.assertFalse(any(x.strip().startswith("FM stream") for x in self.lines))
        self.assertFalse(any("1 MiB" in x for x in self.lines[2:]))


class RatioSpan(unittest.TestCase):
    ROW = {"figure": "lat.vmmc.wait", "reference_figure": "floor.efd_oneway"}

    def test_each_round_is_set_against_the_same_rounds_reference(self):
        figs = {"lat.vmmc.wait": {"rounds": [30.0, 24.0, 40.0]}, "floor.efd_oneway": {"rounds": [10.0, 12.0, 8.0]}}
        self.assertEqual(ratio_span(figs, self.ROW), (2.0, 5.0))  # 3.0, 2.0, 5.0: not 24/12 .. 40/8 by accident

    def test_a_round_without_a_value_or_a_zero_reference_is_skipped(self):
        figs = {"lat.vmmc.wait": {"rounds": [30.0, None, 40.0]}, "floor.efd_oneway": {"rounds": [10.0, 12.0, 0.0]}}
        self.assertEqual(ratio_span(figs, self.ROW), (3.0, 3.0))

    def test_no_spread_without_rounds_of_both(self):
        self.assertIsNone(ratio_span({"lat.vmmc.wait": {"rounds": [30.0]}}, self.ROW))
        self.assertIsNone(ratio_span({}, {"figure": "fm.n_half", "reference_figure": None}))
        figs = {"lat.vmmc.wait": {"rounds": [30.0, 31.0]}, "floor.efd_oneway": {"rounds": [10.0]}}
        self.assertIsNone(ratio_span(figs, self.ROW))  # rounds that do not pair up


if __name__ == "__main__":
    unittest.main()
