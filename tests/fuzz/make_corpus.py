#!/usr/bin/env python3
"""Writes the seed corpora of the emulator-side fuzz targets (tests/fuzz):
a few valid inputs each, small. Run from anywhere; rewrites corpus/<target>/
seed-* (regression inputs, crash-*, are kept). The structures are packed
as the ABI headers (shared/include/ulnic/abi) lay them out; fuzz_fw.cpp
says how its commands are encoded."""
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


# ---------------------------------------------------------------- fuzz_fw
# Commands (fuzz_fw.cpp): a byte, kind | arg << 3, then the kind's bytes.
SQ, PACKET, CTRL, ATTACH, TIME, RING_INDEX, HEAP, PASSES = range(8)
HEAP_OFFSET = 0x10000   # where fuzz_fw's slots' heaps start
VA = 0x7F00_0000_0000   # the process's address for it
RESULT0 = 0             # with a key fixup: the first value the NIC handed out


def sqe(opcode, flags=0, dst_slot=0, length=0, user_data=0, src_addr=0, dst_addr=0, src_key=0, dst_key=0,
        access=0, src_slot=0, reg_offset=0, dst_node=0):
    return struct.pack("<BBHIQQQIIIIQII", opcode, flags, dst_slot, length, user_data, src_addr, dst_addr, src_key,
                       dst_key, access, src_slot, reg_offset, dst_node, 0)


def sq(slot, entries, keyfix=False):
    arg = slot | (len(entries) - 1) << 1 | (8 if keyfix else 0)
    return bytes([SQ | arg << 3]) + b"".join(entries)


def wire(op=0, flags=0, dst_slot=0, dst_key=0, dst_addr=0, op_id=0, op_length=0, src_slot=0, vi=0, status=0):
    # magic, type, payload_len, seq, ack, checksum, src/dst incarnations: the fixup fills them in
    return struct.pack("<IBBHHHIIIBBHIQQIIIHH", 0, 0, flags, 0, 0, 0, 0, 0, 0, op, status, dst_slot, dst_key,
                       dst_addr, op_id, 0, 0, op_length, src_slot, vi)


def packet(header, payload=b"", keyfix=False, ack=False):
    arg = 1 | (2 if keyfix else 0) | (4 if ack else 0)
    return bytes([PACKET | arg << 3]) + struct.pack("<H", len(payload)) + header + payload


def ctrl(opcode, slot=0, seq=0, host_peer=0, host_vector=0, generation=0, args=b"", keyfix=False):
    return bytes([CTRL | (8 if keyfix else 0)]) + struct.pack("<IIQIIQ", opcode, slot, seq, host_peer, host_vector, generation) + \
        args.ljust(64, b"\0") + bytes(32)


def vmmc_args(handle=0, key=0, va=0, length=0, node=0, peer_slot=0, index=0, notify=0):
    return struct.pack("<IIQQIIII", handle, key, va, length, node, peer_slot, index, notify)


def register(slot=0, offset=HEAP_OFFSET, length=0x8000, access=7, va=VA):
    return sq(slot, [sqe(2, length=length, access=access, src_addr=va, reg_offset=offset, user_data=1)])


def heap(slot, offset, data):
    return bytes([HEAP | slot << 3]) + struct.pack("<IB", offset, len(data)) + data


MEET = packet(wire())  # a sequence filler: the NIC learns node 1 and answers
FW = [
    # Local work: register, nop, copy, deregister.
    b"\0" + register() + sq(0, [sqe(0, user_data=7)]) +
    sq(0, [sqe(1, length=256, src_addr=VA, dst_addr=VA + 0x1000, src_key=RESULT0, dst_key=RESULT0)], keyfix=True) +
    sq(0, [sqe(3, src_key=RESULT0)], keyfix=True),
    # Node 1 puts 128 bytes into slot 0's registration, last packet first.
    b"\0" + register() + MEET + packet(wire(op=1, flags=1, dst_addr=VA, op_id=5, op_length=128), bytes(range(128)),
                                        keyfix=True),
    # The same through the switch: checksummed packets.
    b"\1" + register() + MEET + packet(wire(op=1, flags=1, dst_addr=VA + 64, op_id=6, op_length=64), bytes(64),
                                        keyfix=True) + bytes([TIME | 20 << 3]),
    # A put to node 1, acknowledged, then its verdict.
    b"\0" + register() + MEET +
    sq(0, [sqe(4, length=5000, src_addr=VA, dst_addr=0x1000, src_key=RESULT0, dst_key=9, dst_node=1)], keyfix=True) +
    packet(wire(), ack=True) + packet(wire(op=2, op_id=0, status=0)),
    # VMMC: an export of slot 0 through the control queue, granted to node
    # 1's slot 0; node 1 sends into it with a notification.
    b"\0" + register() +
    ctrl(4, slot=0, seq=1, args=vmmc_args(key=RESULT0, va=VA, length=0x4000, notify=1), keyfix=True) +
    bytes([PASSES]) + ctrl(6, slot=0, seq=2, args=vmmc_args(handle=1, key=1, node=1, peer_slot=0), keyfix=True) +
    MEET + packet(wire(op=3, flags=2 | 4 | 1, dst_key=1, dst_addr=0x10, op_id=7, op_length=32, src_slot=0), bytes(32),
                  keyfix=True),
    # VMMC sends of ours: an import of node 1's export, a send and an inline send.
    b"\0" + register() + ctrl(8, slot=0, seq=1, args=vmmc_args(handle=1, length=0x4000, node=1, peer_slot=0)) +
    sq(0, [sqe(5, length=100, src_addr=VA, dst_addr=0, src_key=RESULT0)], keyfix=True) +
    sq(0, [sqe(6, length=100, dst_addr=0x40), bytes(range(64)), bytes(range(64, 128))]),
    # VIs: create VI 0 (reliable delivery, RDMA both ways), post a receive
    # (its descriptor in the heap: one data segment; handle 0x42000 is the
    # key the first registration gets in fuzz_fw), connect peer-to-peer to
    # node 1 (discriminator "disc"), node 1's matching request, a send into
    # the VI and an RDMA read of its memory.
    b"\0" + register() +
    heap(0, HEAP_OFFSET, struct.pack("<QIHHIIII", 0, 0, 1, 0, 0, 0, 0, 0) + struct.pack("<QII", VA + 0x100, 0x42000, 64)) +
    sq(0, [sqe(8, dst_slot=0, access=2 | 1 << 8 | 1 << 9, length=65536)]) +
    sq(0, [sqe(11, dst_slot=0, src_addr=VA, src_key=RESULT0)], keyfix=True) +
    sq(0, [sqe(12, flags=2, dst_slot=0, dst_node=1, access=4, src_addr=VA + 0x200, src_key=RESULT0), b"disc"
           .ljust(64, b"\0")], keyfix=True) + MEET +
    packet(wire(op=9, op_id=0x80), struct.pack("<IIIIIIIIQII", 1, 0, 0, 0, 0, 2 | 1 << 8 | 1 << 9, 65536, 1, 1, 4, 0)
           + b"disc".ljust(64, b"\0")) +
    packet(wire(op=5, flags=4 | 1, dst_slot=0, vi=0, op_id=0x81, op_length=16), bytes(range(16))) +
    packet(wire(op=7, flags=1, dst_slot=0, vi=0, dst_addr=VA + 0x1000, op_id=0x82, op_length=64), keyfix=True),
    # AM: endpoint 0 of slot 0 (tag AM_ALL, a 4-entry ring at VA, no
    # segment), node 1's message into it; then a send of ours (prefix in the heap).
    b"\0" + register() +
    sq(0, [sqe(18, dst_slot=0, length=4, access=1, src_addr=VA, src_key=RESULT0, user_data=1)], keyfix=True) +
    MEET + packet(wire(op=10, flags=5, dst_slot=0, op_id=9, op_length=80), struct.pack("<QIIIB", 1, 16, 0, 0, 0)
                                                                          .ljust(80, b"\0")) +
    heap(0, HEAP_OFFSET + 0x1000, struct.pack("<QIIIB", 1, 16, 0, 0, 0).ljust(80, b"\0")) +
    sq(0, [sqe(19, length=80, src_addr=VA + 0x1000, src_key=RESULT0, dst_node=1)], keyfix=True),
    # A registration's pages moved within the heap (kOpMoveRegion), a copy
    # through its key from the new place; then a move while a put is owed
    # its completion (busy).
    b"\0" + register() + sq(0, [sqe(23, length=0x8000, reg_offset=HEAP_OFFSET, dst_addr=HEAP_OFFSET + 0x10000)]) +
    sq(0, [sqe(1, length=256, src_addr=VA, dst_addr=VA + 0x1000, src_key=RESULT0, dst_key=RESULT0)], keyfix=True) +
    MEET + sq(0, [sqe(4, length=5000, src_addr=VA, dst_addr=0x1000, src_key=RESULT0, dst_key=9, dst_node=1)],
              keyfix=True) +
    sq(0, [sqe(23, length=0x8000, reg_offset=HEAP_OFFSET + 0x10000, dst_addr=HEAP_OFFSET)]),
    # Daemon mail from node 1, and the daemon's mailbox doorbell.
    b"\0" + ctrl(3, host_peer=98, host_vector=1) + MEET + packet(wire(op=4, flags=1), struct.pack("<HHIQ", 1, 8, 0, 0) +
                                                                  b"mailmail"),
    # A hostile process: a wild SQ tail, then a detach and a fresh attach.
    b"\0" + bytes([RING_INDEX | 0 << 3]) + struct.pack("<I", 0xFFFF0000) + bytes([ATTACH | 2 << 3, ATTACH]) +
    sq(0, [sqe(0)]),
]
SEEDS["fw"] = FW


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
