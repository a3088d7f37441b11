"""Clusters (issue 3): rounds per second of N = 2 and 4 systems on the threads, processes and fused
backends.  A round is one lockstep step of the whole cluster (for fused: a step, no exchange).

Each timed call is one ``meshnb.train(R, systems=N, backend=...)``; the pytest-benchmark median
covers the whole call (members' start-up included: a forkserver already running, as after the
first run).  ``extra_info["rounds_per_s"]`` is the lockstep alone (``RunResult.steps_per_second``,
from the moment every member is ready), the median over the rounds.  Bits are checked first:
every backend's trace digest equals the fused backend's and the numpy reference's.

    python -m pytest bench/test_bench_cluster.py --benchmark-only
"""

from __future__ import annotations

import statistics

import pytest

import meshnb
from meshnb.backend_table import local_cluster_backends
from meshnb.testing import reference as ref

# rounds per timed call of 2 systems (full, short), halved for 4: under a second each on 2 cores
ROUNDS = {"threads": (60_000, 256), "processes": (60_000, 256), "fused": (1_000_000, 1_000)}


@pytest.fixture(scope="module")
def verified() -> set[tuple[str, int]]:
    return set()


@pytest.mark.parametrize("n", [2, 4])
@pytest.mark.parametrize("backend", local_cluster_backends())
def test_cluster_rounds(benchmark, record, short, verified, backend, n):
    if (backend, n) not in verified:  # the bits first (also the warm-up: JIT cache, forkserver)
        _, trace = ref.run([ref.init_page(n, grouped=True)] * n, 256, grouped=True)
        r = meshnb.train(256, systems=n, backend=backend)
        assert {s.trace_digest for s in r.systems} == {ref.trace_digest(trace)}
        verified.add((backend, n))
    rounds = ROUNDS[backend][1 if short else 0] * 2 // n
    rates: list[float] = []

    def once() -> None:
        r = meshnb.train(rounds, systems=n, backend=backend)
        assert len({s.digest for s in r.systems}) == 1
        rates.append(r.steps_per_second)

    record(benchmark, f"{backend}-{n}", rounds, systems=n, unit="round")
    benchmark.group = f"cluster, {n} systems (per round)"
    benchmark.pedantic(once, rounds=1 if short else 5, iterations=1)
    benchmark.extra_info["rounds_per_s"] = statistics.median(rates)


def test_fused_with_checkpoint(benchmark, record, short, verified, tmp_path):
    """fused N = 2 writing checkpoints (every second): its trace is hashed with the resumable
    SHA-256, whose state each checkpoint saves, on the trace's own thread.  Against fused-2."""
    n, path = 2, tmp_path / "run.ckpt"
    _, trace = ref.run([ref.init_page(n, grouped=True)] * n, 256, grouped=True)
    r = meshnb.train(256, systems=n, backend="fused", checkpoint=path)  # bits first, and the warm-up
    assert {s.trace_digest for s in r.systems} == {ref.trace_digest(trace)}
    rounds = ROUNDS["fused"][1 if short else 0] * 2 // n
    rates: list[float] = []

    def once() -> None:
        r = meshnb.train(  # each round replaces the last run's checkpoint, on purpose
            rounds, systems=n, backend="fused", checkpoint=path, checkpoint_every_s=1.0, overwrite_checkpoint=True
        )
        rates.append(r.steps_per_second)

    record(benchmark, f"fused-{n}-checkpoint", rounds, systems=n, unit="round")
    benchmark.group = f"cluster, {n} systems (per round)"
    benchmark.pedantic(once, rounds=1 if short else 5, iterations=1)
    benchmark.extra_info["rounds_per_s"] = statistics.median(rates)
