#!/usr/bin/env python3
"""Writes the seed corpora of the emulator-side fuzz targets (tests/fuzz):
a few valid inputs each, small. Run from anywhere; rewrites corpus/<target>/
seed-* (regression inputs, crash-*, are kept). The firmware target's seeds
come from its own generator (fw_seeds, see CMakeLists.txt)."""
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))


def gdb_frame(payload):
    return b"$" + payload + b"#%02x" % (sum(payload) & 0xFF)


def elf(segments, entry=0x8000_0000, note=True):
    """A RISC-V 64 ELF executable: `segments` are (paddr, flags, bytes, memsz)."""
    phdrs, blobs = [], b""
    nph = len(segments) + (1 if note else 0)
    data_off = 64 + 56 * nph
    for paddr, flags, body, memsz in segments:
        phdrs.append(struct.pack("<IIQQQQQQ", 1, flags, data_off + len(blobs), paddr, paddr, len(body), memsz, 4))
        blobs += body
    if note:
        build_id = bytes(range(20))
        n = struct.pack("<III", 4, len(build_id), 3) + b"GNU\0" + build_id
        phdrs.append(struct.pack("<IIQQQQQQ", 4, 4, data_off + len(blobs), 0, 0, len(n), len(n), 4))
        blobs += n
    ident = b"\x7fELF" + bytes([2, 1, 1]) + bytes(9)
    ehdr = ident + struct.pack("<HHIQQQIHHHHHH", 2, 243, 1, entry, 64, 0, 0, 64, 56, nph, 64, 0, 0)
    return ehdr + b"".join(phdrs) + blobs


SEEDS = {
    "json": [
        b'{"QMP": {"version": {"qemu": {"micro": 0, "minor": 2, "major": 7}}, "capabilities": ["oob"]}}',
        b'{"return": {"status": "running", "singlestep": false, "running": true}}',
        b'{"timestamp": {"seconds": 1700000000, "microseconds": 5}, "event": "STOP"}',
        b'{"error": {"class": "GenericError", "desc": "No \\"such\\" thing \\u00e9\\n"}}',
        b'[1, -2.5e3, true, null, "x", [], {}, [{"a": [0.1]}]]',
    ],
    "qmp": [
        b'{"QMP": {"version": {}, "capabilities": []}}\n{"return": {}}\n'
        b'{"return": {"status": "running", "running": true}}\n{"return": {}}\n{"return": {}}\n',
        b'{"QMP": {}}\r\n{"event": "RESET"}\n{"return": {}}\n{"event": "STOP", "data": {}}\n'
        b'{"return": {"status": "paused"}}\n{"error": {"class": "GenericError", "desc": "no"}}\n',
        b'{"QMP": {}}\n{"error": {"desc": "capabilities"}}\n',
    ],
    "gdb": [
        b"+" + gdb_frame(b"PacketSize=1000;qXfer:features:read+;vContSupported+") + b"+" + gdb_frame(b"OK")
        + b"+" + gdb_frame(b"OK"),
        b"+" + gdb_frame(b"PacketSize=40") + (b"+" + gdb_frame(b"OK")) * 20,
        b"noise+" + gdb_frame(b"") + b"+" + gdb_frame(b"E01"),
        b"+-",
    ],
    "switch_options": [
        b"drop=0.3,corrupt=0.01,dup=0.01,reorder=0.01,delay=200us,seed=7\n127.0.0.1:9000=2-3",
        b"delay=2ms,duplicate=1\n10.0.0.1:1=0-0",
        b"\n",
    ],
    "elf": [
        elf([(0x8000_0000, 5, b"\x13\x00\x00\x00" * 8, 32), (0x8001_0000, 6, b"\x01\x02", 0x1000)]),
        elf([(0x8000_0000, 7, b"\x6f\x00\x00\x00", 4)], note=False),
    ],
}


def main():
    for target, seeds in SEEDS.items():
        d = os.path.join(HERE, "corpus", target)
        os.makedirs(d, exist_ok=True)
        for name in os.listdir(d):
            if name.startswith("seed-"):
                os.remove(os.path.join(d, name))
        for i, s in enumerate(seeds):
            with open(os.path.join(d, "seed-%d" % i), "wb") as f:
                f.write(s)
    print("wrote", sum(len(s) for s in SEEDS.values()), "seeds")


if __name__ == "__main__":
    main()
