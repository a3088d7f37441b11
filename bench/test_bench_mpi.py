"""The mpi backend (issue 4): rounds per second with 2 and 4 ranks, next to the raw latency of the
same collective, measured in the same MPI job of the same benchmark run.

One ``mpiexec -n N python bench/mpi_worker.py`` job per N stays up for the module; each timed
call sends it one command and waits for rank 0's answer, so a timing is R rounds of every rank
plus one pipe round trip (tens of microseconds against R rounds of several microseconds).  Paths
(per round; ``steps`` = R):

- ``mpi-N``: ``meshnb.train(R, backend="mpi")`` on every rank, the backend itself (the grouped task loop, the
  exchange, the start and the final gather);
- ``mpi-exchange-N``: ``MpiExchange.set_slot`` + ``round`` alone;
- ``mpi-raw-N``: the exchange's collective alone (a persistent allgather of its 12-word message,
  started and polled as the exchange does);
- ``mpi-allgather-N``: blocking ``MPI_Allgather`` of the same words.

Before any timing, the job's ``verify`` run (256 steps from init) must give the digests and trace
digests of the threads backend.  ``python -m pytest bench -k mpi --benchmark-only`` runs these
alone; with more ranks than cores (4 on 2) the figures are those of an oversubscribed machine.
"""

from __future__ import annotations

import importlib.util
import json
import os
import select
import subprocess
import sys
from pathlib import Path

import pytest

import meshnb

# Not imported here: importing mpi4py.MPI would initialise MPI in the pytest process.
HAVE_MPI = importlib.util.find_spec("mpi4py") is not None

pytestmark = pytest.mark.skipif(not HAVE_MPI, reason="mpi4py is not installed (pip install 'meshnb[mpi]')")

WORKER = Path(__file__).with_name("mpi_worker.py")


def _mpiexec() -> str:
    here = Path(sys.executable).with_name("mpiexec")
    return str(here) if here.exists() else "mpiexec"


class Job:
    """An MPI job of ``n`` ranks running the worker; ``call`` sends a command, returns the answer."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.proc = subprocess.Popen(
            [_mpiexec(), "-n", str(n), sys.executable, str(WORKER)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            bufsize=1,
        )

    def call(self, command: str, timeout_s: float = 120.0) -> dict:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout_s)
        line = self.proc.stdout.readline() if ready else ""
        if not line:
            self.close()
            err = self.proc.stderr.read() if self.proc.stderr else ""
            raise RuntimeError(f"mpi job of {self.n} ranks: no answer to {command!r}: {err[-2000:]}")
        return json.loads(line)

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                assert self.proc.stdin is not None
                self.proc.stdin.write("quit\n")
                self.proc.stdin.flush()
                self.proc.wait(20)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait(10)


@pytest.fixture(scope="module")
def jobs():
    started: dict[int, Job] = {}

    def get(n: int) -> Job:
        if n not in started:
            job = Job(n)
            got = job.call("verify 256", timeout_s=300.0)
            want = meshnb.train(256, systems=n, backend="threads").to_json()["systems"]
            assert got["systems"] == want, f"the mpi backend's {n}-rank run differs from the threads backend's"
            started[n] = job
        return started[n]

    yield get
    for job in started.values():
        job.close()


# rounds per timed call: full, short
ROUNDS = {"train": (20_000, 256), "exchange": (20_000, 256), "raw": (20_000, 256), "allgather": (20_000, 256)}
ROUNDS_4 = {"train": (4_000, 128), "exchange": (4_000, 128), "raw": (4_000, 128), "allgather": (4_000, 128)}


@pytest.mark.parametrize("n", [2, 4])
@pytest.mark.parametrize("what", ["train", "exchange", "raw", "allgather"])
def test_mpi(benchmark, record, short, jobs, n, what):
    job = jobs(n)
    r = (ROUNDS if n == 2 else ROUNDS_4)[what][1 if short else 0]
    path = f"mpi-{n}" if what == "train" else f"mpi-{what}-{n}"
    record(benchmark, path, r, systems=n, unit="step" if what == "train" else "round")
    benchmark.group = f"mpi, {n} ranks (per round)"
    answers: list[dict] = []

    def once() -> None:
        answers.append(job.call(f"{what} {r}"))

    job.call(f"{what} {min(r, 256)}")  # warm: first calls, page faults, the MPI's connections
    benchmark.pedantic(once, rounds=1 if short else 5, iterations=1)
    inside = sorted(a["seconds"] for a in answers)
    median_inside = inside[len(inside) // 2]
    benchmark.extra_info.update(
        rounds_per_s_rank0=r / median_inside,
        us_per_round_rank0=median_inside / r * 1e6,
        persistent=answers[-1]["persistent"],
        ranks=n,
        cores=os.cpu_count(),
    )
