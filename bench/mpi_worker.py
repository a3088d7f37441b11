"""The MPI job behind ``bench/test_bench_mpi.py``: ``mpiexec -n N python bench/mpi_worker.py``.

Rank 0 reads one command a line on stdin, broadcasts it, every rank runs it, and rank 0 answers
one JSON line on stdout (its own wall time of the command, in seconds).  Commands:

- ``verify STEPS``: ``meshnb.train(STEPS, backend="mpi")`` from init; answers every system's digests.
- ``train R``: ``meshnb.train(R, backend="mpi")``, the mpi backend itself (R lockstep steps: R rounds).
- ``exchange R``: R rounds of :class:`meshnb.backends.mpi_exchange.MpiExchange` (``set_slot`` + ``round``) alone.
- ``raw R``: R rounds of the very collective the exchange uses (a persistent allgather of its
  12-word message, or Iallgather), started and polled with the exchange's poll loop.
- ``allgather R``: R blocking ``MPI_Allgather`` of the same 12 words.
- ``quit``.

The MPI environment is the backend's (``meshnb.backends.mpi_exchange.load`` sets MPICH's progress throttle), so
the raw figures are those of the collective the backend runs, in the same job.
"""

from __future__ import annotations

import json
import sys
import time

import numpy as np

import meshnb
from meshnb.backends import mpi_exchange as mpi

MPI = mpi.load()


def main() -> None:
    comm = MPI.COMM_WORLD
    k, n = comm.Get_rank(), comm.Get_size()
    ex = mpi.MpiExchange(comm, timeout_s=60.0)
    send = np.zeros(mpi.MSG_WORDS, dtype=np.uint32)
    recv = np.zeros((n, mpi.MSG_WORDS), dtype=np.uint32)
    try:
        raw = comm.Allgather_init([send, MPI.UINT32_T], [recv, MPI.UINT32_T])
    except (AttributeError, NotImplementedError, MPI.Exception):
        raw = None
    words = np.zeros(8, dtype=np.uint32)
    rnd = 0
    while True:
        line = sys.stdin.readline() if k == 0 else None
        what, _, arg = (comm.bcast(line or "quit", root=0)).strip().partition(" ")
        if what == "quit":
            break
        count = int(arg or 0)
        comm.Barrier()
        began = time.perf_counter()
        answer: dict = {}
        if what == "verify" or what == "train":
            r = meshnb.train(count, backend="mpi")
            if what == "verify":
                answer["systems"] = [s.to_json() for s in r.systems]
        elif what == "exchange":
            for _ in range(count):
                rnd += 1
                words[0] = rnd
                ex.set_slot(k, rnd & 1, words)
                if not ex.round(rnd):
                    raise RuntimeError(f"round {rnd} timed out")
        elif what == "raw":
            for i in range(count):
                send[0] = i
                if raw is not None:
                    raw.Start()
                    mpi.poll(raw, 60.0)
                else:
                    mpi.poll(comm.Iallgather([send, MPI.UINT32_T], [recv, MPI.UINT32_T]), 60.0)
        elif what == "allgather":
            for i in range(count):
                send[0] = i
                comm.Allgather([send, MPI.UINT32_T], [recv, MPI.UINT32_T])
        else:
            raise ValueError(f"unknown command {what!r}")
        seconds = time.perf_counter() - began
        if k == 0:
            answer.update(ok=what, count=count, seconds=seconds, persistent=raw is not None)
            print(json.dumps(answer), flush=True)
    if raw is not None:
        raw.Free()
    ex.close(10.0)


if __name__ == "__main__":
    main()
