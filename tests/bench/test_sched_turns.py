#!/usr/bin/env python3
"""bench.sched_turns: sched_turns.py sums up `perf sched timehist -w` output as it says it does.

A canned excerpt in the format perf 6.x prints (header lines, wake-up lines, one line per switch-out: time,
[CPU], thread, wait, scheduling delay, run time in ms), so that the arithmetic is checked without perf, root
or a cluster.
"""
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sched_turns import summarize  # noqa: E402

EXCERPT = """\
Samples of sched_switch event do not have callchains.
           time    cpu  task name                       wait time  sch delay   run time
                        [tid/pid]                          (msec)     (msec)     (msec)
--------------- ------  ------------------------------  ---------  ---------  ---------
     100.000000 [0001]  CPU 0/TCG[20/19]                                            awakened: fm_bench[31]
     100.000010 [0001]  CPU 0/TCG[20/19]                     0.015      0.000      0.050
     100.000030 [0001]  fm_bench[31]                         0.050      0.002      0.020
     100.000080 [0001]  CPU 0/TCG[20/19]                                            awakened: fm_bench[31]
     100.000090 [0001]  CPU 0/TCG[20/19]                     0.020      0.000      0.060
     100.000200 [0000]  fm_bench[31]                         0.060      0.100      0.010
     100.000300 [0000]  CPU 0/TCG[12/11]                                            awakened: CPU 0/TCG[20/19]
     100.000400 [0000]  CPU 0/TCG[12/11]                     0.000      0.000      0.400
     100.000500 [0001]  CPU 0/TCG[20/19]                                            awakened: fm_bench[31]
     100.000510 [0001]  CPU 0/TCG[20/19]                     0.100      0.000      0.040
     100.000530 [0001]  fm_bench[31]                         0.300      0.003      0.020
     100.001000 [0001]  <idle>                               0.000      0.000      0.100
"""


class Summarize(unittest.TestCase):
    def setUp(self):
        self.r = summarize(EXCERPT.splitlines())
        self.by = {t["thread"]: t for t in self.r["threads"]}

    def test_the_span_runs_from_the_first_turns_start_to_the_last_switch(self):
        # The first line that ends a turn (100.000010, 0.050 ms) began at 99.999960.
        self.assertAlmostEqual(self.r["span_s"], 100.001000 - 99.999960, places=9)

    def test_each_threads_turns_run_time_and_cpus(self):
        nic = self.by["CPU 0/TCG[20/19]"]
        self.assertAlmostEqual(nic["mean_turn_us"], 50.0)  # 0.050, 0.060 and 0.040 ms
        self.assertAlmostEqual(nic["turns_per_s"], 3 / self.r["span_s"])
        self.assertAlmostEqual(nic["cpu_share"], 0.150e-3 / self.r["span_s"])
        self.assertEqual(list(nic["share_by_cpu"]), ["1"])
        proc = self.by["fm_bench[31]"]
        self.assertEqual(sorted(proc["share_by_cpu"]), ["0", "1"])
        self.assertAlmostEqual(proc["share_by_cpu"]["1"] / proc["share_by_cpu"]["0"], 4.0)
        # Biggest first; the idle task is no thread.
        self.assertEqual(self.r["threads"][0]["thread"], "CPU 0/TCG[12/11]")
        self.assertNotIn("<idle>", self.by)

    def test_where_a_process_a_nic_woke_ran_next(self):
        woke = self.r["nic_wakeups"]
        # Twice on the NIC's CPU 1, once on CPU 0; a NIC that woke a NIC is not a process woken.
        self.assertEqual(woke, [{"nic": "CPU 0/TCG[20/19]", "woken": "fm_bench[31]", "on_the_nics_cpu": 2,
                                 "elsewhere": 1}])

    def test_nothing_parsable_is_an_empty_summary(self):
        r = summarize(["Samples of sched_switch event do not have callchains.", ""])
        self.assertEqual((r["span_s"], r["threads"], r["nic_wakeups"]), (0.0, [], []))


if __name__ == "__main__":
    unittest.main(verbosity=2)
