"""Packing a batch of sweep systems into the loop's lanes (``Lanes.of_systems``, issue 25 item 3):
its cost per system, once per batch of ``BATCH_SYSTEMS`` in ``Runner.run``.

Run::

    python -m pytest bench/test_bench_lanes.py --benchmark-only
    MESHNB_BENCH_SHORT=1 python -m pytest bench/test_bench_lanes.py --benchmark-disable -q   # smoke

Paths (``steps`` counts the batch's systems, so "per step" is per system):

- ``lanes-lr-sweep``: an LR sweep's batch (one start page, one step base: one sample table, the
  path without a sort), the last batch's lanes reused as ``Runner.run`` reuses them;
- ``lanes-mixed-bases``: per-system step bases in every residue mod 8 (8 tables: the sorting path);
- ``lanes-4-pages``: 4 start pages of different samples x LRs (the sorting path).

Bits first: each path's lanes equal to those of the systems' own pages (``Lanes(words)``, the
sorting path), array for array.  CPU time per system is printed and kept in ``extra_info``.
"""

from __future__ import annotations

import time

import numpy as np
import pytest

from meshnb import cpu
from meshnb.bench import varied_starts
from meshnb.loops import sweep as sweep_loop
from meshnb.sweeps import describe
from meshnb.sweeps.lanes import Lanes
from meshnb.sweeps.run import BATCH_SYSTEMS


def _systems(case: str, m: int):
    lrs = np.geomspace(1e-3, 1.0, m).astype(np.float32)
    if case == "lr-sweep":
        return describe(16, lrs=lrs)
    if case == "mixed-bases":
        return describe(16, lrs=lrs, step_base=np.arange(m, dtype=np.uint64) * 3)
    return describe(16, view_in=[s.page for s in varied_starts(4)], lrs=lrs[: m // 4])


@pytest.mark.parametrize("case", ["lr-sweep", "mixed-bases", "4-pages"])
def test_lanes_of_a_batch(benchmark, record, short: bool, case: str) -> None:
    m = 1024 if short else BATCH_SYSTEMS
    systems, sh = _systems(case, m), sweep_loop.shape()
    last = Lanes.of_systems(systems, 0, m, 16, 0, sh)
    want = Lanes(systems.words(0, m), systems.z, 16, 0, sh)
    assert (last.one_table is not None) == (case == "lr-sweep")
    assert np.array_equal(last.position, want.position) and last.arrays.keys() == want.arrays.keys()
    for k, v in want.arrays.items():
        assert np.array_equal(last.arrays[k].view(np.uint8), v.view(np.uint8)), (case, k)
    cpu_s: list[float] = []

    def one() -> None:
        t = time.process_time()
        Lanes.of_systems(systems, 0, m, 16, 0, sh, last)
        cpu_s.append(time.process_time() - t)

    record(benchmark, f"lanes-{case}", m, systems=m, unit="call")
    benchmark.extra_info.update(cpu.describe())
    benchmark.extra_info["sweep_shape"] = str(sh)
    benchmark.group = "lanes"
    benchmark.pedantic(one, rounds=3 if short else 25, iterations=1)
    us = float(np.median(cpu_s)) / m * 1e6
    benchmark.extra_info["cpu_us_per_system"] = us
    print(f"\nlanes-{case}: {us:.4f} us of CPU time per system (median of {len(cpu_s)}, {m} a batch)")
