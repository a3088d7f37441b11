"""What each backend can do: one table, below everything that asks.

A row per backend (the name a user gives): where its engine is registered
(``meshnb.backends.<module>.<function>``, imported on first use) and its capabilities. The
options' checks, the backend registry, the tests' backend lists, ``meshnb bench`` and the GPU
check read them here. It imports nothing, so the options (below the backends) can read it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

MAX_LOCAL_SYSTEMS = 64  # checkpoint.MAX_SYSTEMS: a checkpoint holds at most this many members
CUDA_BLOCK_SYSTEMS = 32  # one warp a system, one block of at most 1024 threads (meshnb.cuda.host)


@dataclass(frozen=True)
class BackendInfo:
    """One backend's row: its name, its engine's module and function, what it can do."""

    name: str
    module: str  # meshnb.backends.<module>
    function: str  # the function there that runs a RunOptions
    clusters: bool  # runs ``systems=N`` (a group: SPEC 8-10)
    alone: bool  # runs one system without a group (no ``systems``)
    exchange: bool  # its members meet through an exchange page (stalls and timeouts apply)
    mpi: bool  # runs as an MPI job (under mpiexec), one system a rank
    device: Literal["cpu", "cuda"]
    max_systems: int | None  # None: as many as the job has ranks
    bench_systems: int | None = None  # the systems ``meshnb bench`` and the benches time it with (None: not here)

    @property
    def runs_here(self) -> bool:
        """A cluster backend on this machine's CPU in one process tree (no MPI job, no GPU)."""
        return self.clusters and not self.mpi and self.device == "cpu"


TABLE: tuple[BackendInfo, ...] = (
    BackendInfo("single", "single", "run", False, True, False, False, "cpu", 1),
    BackendInfo("threads", "local", "run_threads", True, False, True, False, "cpu", MAX_LOCAL_SYSTEMS, 2),
    BackendInfo("processes", "local", "run_processes", True, False, True, False, "cpu", MAX_LOCAL_SYSTEMS, 2),
    BackendInfo("fused", "fused", "run", True, False, False, False, "cpu", MAX_LOCAL_SYSTEMS, 8),
    BackendInfo("mpi", "mpi", "run", True, False, True, True, "cpu", None),
    BackendInfo("cuda", "cuda", "run", True, True, False, False, "cuda", CUDA_BLOCK_SYSTEMS),
)
BY_NAME: dict[str, BackendInfo] = {b.name: b for b in TABLE}

# The names a user gives for a cluster, and those that also run one system alone when given
# without ``systems`` (the default for one system is ``single``).
CLUSTER_BACKENDS = tuple(b.name for b in TABLE if b.clusters)
ALONE_BACKENDS = tuple(b.name for b in TABLE if b.clusters and b.alone)


def local_cluster_backends() -> tuple[str, ...]:
    """The cluster backends this machine's CPU runs in one process tree (no MPI job, no GPU)."""
    return tuple(b.name for b in TABLE if b.runs_here)
