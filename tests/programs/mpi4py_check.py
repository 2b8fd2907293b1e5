#!/usr/bin/env python3
"""mpi4py_check: MPI from Python (Debian's python3-mpi4py), unchanged, every
value checked: pickled objects and buffers point to point, collectives on
objects and on NumPy arrays, wildcard receives with probes, non-blocking
requests, and one-sided puts and gets in a window when the MPI library can
run them (over Open MPI's cm PML that needs an osc component: where it has
none, MPI.Win.Create raises and this says so and goes on).

  mpirun -np N python3 mpi4py_check.py [--rounds R]

Prints "ok" on rank 0; exit status 1 and "FAIL ..." on a wrong value.
tests/integration/test_mpi.py runs it over the ulnic libfabric provider."""
import sys

import numpy as np
from mpi4py import MPI

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()


def fail(what):
    print(f"FAIL mpi4py_check: rank {rank}: {what}", flush=True)
    comm.Abort(1)


def expect(ok, what):
    if not ok:
        fail(what)


def pattern(seed, n):
    return np.random.default_rng(seed).integers(0, 256, n, dtype=np.uint8)


def one_round(r):
    right, left = (rank + 1) % size, (rank - 1) % size
    # Pickled objects round the ring.
    got = comm.sendrecv({"from": rank, "round": r, "data": list(range(rank + r))}, dest=right, source=left)
    expect(got == {"from": left, "round": r, "data": list(range(left + r))}, "sendrecv of an object")
    # Buffers of many sizes, eager and rendezvous, round the ring.
    for n in (1, 100, 4224, 4225, 70000, 1 << 20):
        out, into = pattern(r * 1000 + rank * 10 + n % 7, n), np.zeros(n, dtype=np.uint8)
        req = comm.Irecv(into, source=left, tag=n % 1000)
        comm.Send(out, dest=right, tag=n % 1000)
        req.Wait()
        expect(np.array_equal(into, pattern(r * 1000 + left * 10 + n % 7, n)), f"Send/Irecv of {n} bytes")
    # Collectives on objects and arrays.
    expect(comm.bcast({"root": 0, "r": r} if rank == 0 else None, root=0) == {"root": 0, "r": r}, "bcast")
    expect(comm.allreduce(rank + r, op=MPI.SUM) == size * (size - 1) // 2 + size * r, "allreduce")
    a = np.arange(1000, dtype=np.float64) * (rank + 1)
    s = np.empty_like(a)
    comm.Allreduce(a, s, op=MPI.SUM)
    expect(np.array_equal(s, np.arange(1000, dtype=np.float64) * (size * (size + 1) // 2)), "Allreduce of an array")
    expect(comm.allgather((rank, r)) == [(k, r) for k in range(size)], "allgather")
    expect(comm.alltoall([(rank, k, r) for k in range(size)]) == [(k, rank, r) for k in range(size)], "alltoall")
    g = comm.gather(rank * rank, root=size - 1)
    expect(rank != size - 1 or g == [k * k for k in range(size)], "gather")
    expect(comm.scatter([k + r for k in range(size)] if rank == 0 else None, root=0) == rank + r, "scatter")
    blocks = np.repeat(np.arange(size, dtype=np.int32) + rank * 100, 257)
    into = np.empty_like(blocks)
    comm.Alltoall(blocks, into)
    expect(np.array_equal(into, np.repeat(np.arange(size, dtype=np.int32) * 100 + rank, 257)), "Alltoall of arrays")
    # Everyone sends rank 0 a message; rank 0 takes them with probes, in any order.
    if rank:
        comm.send(("hello", rank, r), dest=0, tag=50 + rank)
    else:
        seen = set()
        for _ in range(size - 1):
            st = MPI.Status()
            comm.probe(source=MPI.ANY_SOURCE, tag=MPI.ANY_TAG, status=st)
            msg = comm.recv(source=st.Get_source(), tag=st.Get_tag())
            expect(msg == ("hello", st.Get_source(), r) and st.Get_tag() == 50 + st.Get_source(), "probe + recv")
            seen.add(st.Get_source())
        expect(seen == set(range(1, size)), "every sender seen once")
    comm.Barrier()


def one_sided():
    """Puts and gets in a window, if the library offers them here."""
    buf = np.zeros(size, dtype=np.int64)
    try:
        win = MPI.Win.Create(buf, disp_unit=buf.itemsize, comm=comm)
    except MPI.Exception as e:
        return f"one-sided: not available with this PML ({e.Get_error_string().strip()})"
    win.Fence()
    for k in range(size):  # rank writes its number into slot `rank` of every window
        win.Put(np.array([rank + 1], dtype=np.int64), k, target=(rank, 1, MPI.INT64_T))
    win.Fence()
    expect(np.array_equal(buf, np.arange(1, size + 1)), "MPI.Win Put")
    got = np.zeros(1, dtype=np.int64)
    win.Get(got, (rank + 1) % size, target=(0, 1, MPI.INT64_T))
    win.Fence()
    expect(got[0] == 1, "MPI.Win Get")
    win.Free()
    return "one-sided: Put/Get in a window checked"


def main():
    rounds = int(sys.argv[sys.argv.index("--rounds") + 1]) if "--rounds" in sys.argv else 2
    for r in range(rounds):
        one_round(r)
    note = one_sided()
    comm.Barrier()
    if rank == 0:
        print(f"ok: {size} ranks, {rounds} rounds; {note}", flush=True)


main()
