"""A batch's result read from the sweep loop's arrays (``sweeps.finish.result_of_lanes``, issue 25
item 3): params, last loss and page digest of each system, on one thread, per system.

Run::

    python -m pytest bench/test_bench_finish.py --benchmark-only
    MESHNB_BENCH_SHORT=1 python -m pytest bench/test_bench_finish.py --benchmark-disable -q   # smoke

Paths, an LR sweep's batch (one start page, one step base):

- ``finish-lanes-16``: after 16 steps, the multi-buffer kernel (``kernel="lanes"``); 15 of the 17
  blocks of each system's 1040-byte message hold LOSS words no step wrote, the same in every lane,
  and are hashed from one precomputed schedule (``sha256.compress_lanes_shared``);
- ``finish-lanes-300``: after 300 steps, every LOSS word the run's: no block shared (the kernel's
  cost without that);
- ``finish-rows-16``: the rows path (gather each system's words, then ``digest_rows``' kernel in
  use: SHA-NI where there is no AVX-512).

Bits first: each path's result equal, field by field, to the one made from the systems' final
pages (``result_of_pages``).  CPU time per system is printed and kept in ``extra_info``.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from meshnb import cpu, sha256
from meshnb.loops import sweep as sweep_loop
from meshnb.sweeps import describe
from meshnb.sweeps.finish import result_of_lanes
from meshnb.sweeps.lanes import Lanes, final_pages
from meshnb.sweeps.run import BATCH_SYSTEMS, result_of_pages

FIELDS = ("params_words", "last_loss_words", "digest_bytes", "lr_words", "step_base", "page_index")


@pytest.mark.parametrize(("kernel", "steps"), [("lanes", 16), ("lanes", 300), ("rows", 16)])
def test_result_of_a_batch(benchmark, record, short: bool, kernel: str, steps: int) -> None:
    m = 4096 if short else BATCH_SYSTEMS
    systems = describe(steps, lrs=np.geomspace(1e-3, 1.0, m).astype(np.float32))
    lanes = Lanes.of_systems(systems, 0, m, steps, 0, sweep_loop.shape())
    rng = np.random.default_rng(steps)  # the loop's state after the steps: any words will do
    lanes.arrays["params"].view(np.uint32)[:] = rng.integers(0, 2**32, lanes.arrays["params"].shape, np.uint32)
    lanes.arrays["ring"].view(np.uint32)[:] = rng.integers(0, 2**32, lanes.arrays["ring"].shape, np.uint32)
    cpu_s: list[float] = []
    with ThreadPoolExecutor(1) as pool:
        got = result_of_lanes(systems, 0, lanes, steps, pool, 1, kernel=kernel)
        pages = final_pages(systems.words(0, m), systems.step_base(0, m), lanes, steps)
        want = result_of_pages(systems, 0, pages, steps)
        for name in FIELDS:
            assert np.array_equal(getattr(got, name), getattr(want, name)), (kernel, steps, name)

        def one() -> None:
            t = time.process_time()  # the pool's thread does the work; the process's CPU counts it
            result_of_lanes(systems, 0, lanes, steps, pool, 1, kernel=kernel)
            cpu_s.append(time.process_time() - t)

        record(benchmark, f"finish-{kernel}-{steps}", m, systems=m, unit="call")
        benchmark.extra_info.update(cpu.describe())
        benchmark.extra_info.update(lanes=sha256.LANES, rows_kernel=sha256.ROWS_KERNEL)
        benchmark.group = "finish"
        benchmark.pedantic(one, rounds=3 if short else 15, iterations=1)
    us = float(np.median(cpu_s)) / m * 1e6
    benchmark.extra_info["cpu_us_per_system"] = us
    print(f"\nfinish-{kernel}-{steps}: {us:.3f} us of CPU time per system (median of {len(cpu_s)}, {m} a batch)")
