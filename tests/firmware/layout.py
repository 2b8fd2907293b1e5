#!/usr/bin/env python3
"""firmware.layout: where the firmware's per-packet loops lie in the ELF.

QEMU chains translated blocks only within one guest page, so a loop whose
blocks straddle a page boundary goes through TCG's block lookup on every
turn (docs/platform.md). The link's burst loop did, at a cost of a lookup a
packet in every stream, until it was page-aligned (firmware/link/link.cpp).
Nothing in the compiler keeps it so as the code grows: this test does.

  layout.py ELF   (ULNIC_FIRMWARE_DIR/ulnic-fw.elf when no argument)
"""
import os
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bench"))
from cost_profile import symbols  # noqa: E402  (the ELF's functions, by llvm-nm-16)

PAGE = 4096
# Per-packet loops that must start on a page, and whether the whole
# function must fit in it (send_segments does; drain_port is larger and
# crosses once, near its end).
ALIGNED = {
    "link::send_segments(": True,
    "link::(anonymous namespace)::drain_port(": False,
}


class Layout(unittest.TestCase):
    elf = None

    def test_the_per_packet_loops_start_on_a_page(self):
        funcs = symbols(self.elf)
        for prefix, whole in ALIGNED.items():
            hits = [(start, end, name) for start, end, name in funcs if name.startswith(prefix)]
            self.assertEqual(len(hits), 1, f"{prefix}...: {len(hits)} functions in {self.elf}")
            start, end, name = hits[0]
            self.assertEqual(start % PAGE, 0, f"{name} at {start:#x}: not on a page")
            if whole:
                self.assertLessEqual(end - start, PAGE,
                                     f"{name}: {end - start} bytes, more than a page: its loop crosses one")


if __name__ == "__main__":
    Layout.elf = sys.argv.pop(1) if len(sys.argv) > 1 else os.path.join(os.environ["ULNIC_FIRMWARE_DIR"],
                                                                        "ulnic-fw.elf")
    unittest.main()
