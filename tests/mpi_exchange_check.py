"""Run by tests/test_mpi.py under ``mpiexec -n 2``: MpiExchange's round, timeout and resume.

Prints ``ok`` on rank 0 when every check passed; any failure raises (and the job aborts).
"""

from __future__ import annotations

import time

import numpy as np

from meshnb.backends import mpi_exchange as mpi
from meshnb.results import ClusterError

MPI = mpi.load()
comm = MPI.COMM_WORLD
k, n = comm.Get_rank(), comm.Get_size()
assert n == 2, "run with mpiexec -n 2"


def words(r: int) -> np.ndarray:
    w = np.zeros(8, dtype=np.uint32)
    w[:5] = [r, 10 * r + k, k, 0xFFFFFFFF, 7]
    return w


ex = mpi.MpiExchange(comm, timeout_s=0.05)

# Round 1 completes; slots in rank order, parity 1.
ex.set_slot(k, 1, words(1))
assert ex.round(1)
for m in range(n):
    assert ex.slot(m, 1)[1] == 10 + m and ex.slot(m, 1)[2] == m and ex.slot(m, 1)[5:].tolist() == [0, 0, 0]
assert ex.round(1), "asking again for a completed round returns True at once"

# Round 2: rank 1 is late; rank 0 times out, keeps the collective, and resumes the same round.
ex.set_slot(k, 0, words(2))
if k == 1:
    time.sleep(0.4)
    assert ex.round(2)
else:
    assert not ex.round(2), "rank 0 should time out: rank 1 publishes 0.4 s late"
    assert ex.outstanding == 2
    try:
        ex.round(3)
    except ClusterError as e:
        assert "outstanding" in str(e)
    else:
        raise AssertionError("a new round while one is outstanding must fail")
    try:
        ex.set_slot(k, 0, words(4))
    except ClusterError:
        pass
    else:
        raise AssertionError("rewriting the outstanding round's slot must fail")
    assert ex.behind(2) == [1], "rank 1 has not said it waits for round 2"
    ex.timeout_s = 30.0
    assert ex.round(2), "the resumed round completes"
    assert ex.timeouts == 1
assert [int(ex.slot(m, 0)[1]) for m in range(n)] == [20, 21]
assert [int(ex.slot(m, 1)[1]) for m in range(n)] == [10, 11], "round 1's slots stay readable"

# Flags: the OR of every rank's, seen by every rank in the same round.
ex.timeout_s = 30.0
ex.flags = mpi.FLAG_CHECKPOINT if k == 1 else 0
ex.set_slot(k, 1, words(3))
assert ex.round(3)
assert ex.seen == mpi.FLAG_CHECKPOINT
ex.flags = ex.seen = 0

ex.close(30.0)

# Rounds that do not match (the ranks run different steps) stop the run instead of folding.
ex2 = mpi.MpiExchange(comm, timeout_s=30.0)
ex2.set_slot(k, 1, words(5))
try:
    ex2.round(5 if k == 0 else 7)
except ClusterError as e:
    assert "round" in str(e) and "same steps" in str(e), str(e)
else:
    raise AssertionError("mismatched rounds must fail")
ex2.close(30.0)

comm.Barrier()
if k == 0:
    print("ok", flush=True)
