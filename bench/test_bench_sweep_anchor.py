"""The sweep loop against its C anchor (issue 25), side by side in one run.

``bench/sweep_anchor.c`` is an LR sweep as an expert writes it in C (SoA across systems, GCC
vector extensions, DAZ on and FTZ off with the written words flushed by bit tests, SPEC 5's tree,
the step issued level by level); it is built here for the ISA numba compiles for, its bits checked
against ``meshnb.sweep`` (108 systems, NaN, infinite, subnormal and FTZ-band LR words), then
timed beside meshnb's sweep loop: one thread, M = 1024 systems, CPU time of the loop's thread,
rounds interleaved (C with 1 and 2 groups a block, meshnb), medians.  The anchor's figure is its
faster blocking.  Skipped with a reason without gcc or off x86.

Run::

    python -m pytest bench/test_bench_sweep_anchor.py --benchmark-only -s          # AVX-512 code here
    NUMBA_CPU_NAME=haswell NUMBA_CPU_FEATURES="" NUMBA_CACHE_DIR=$(mktemp -d) \\
        python -m pytest bench/test_bench_sweep_anchor.py --benchmark-only -s      # AVX2 code

The AVX2 run checks that meshnb's compiled loop holds no zmm register before timing it.
"""

from __future__ import annotations

import numpy as np
import pytest
import sweep_anchor as anchor  # bench/ is on the path, as for every bench module

from meshnb import cpu
from meshnb.loops import sweep as sweep_loop

pytestmark = pytest.mark.skipif(anchor.unavailable() is not None, reason=str(anchor.unavailable()))


@pytest.fixture(scope="module")
def dlls(tmp_path_factory) -> dict[int, object]:
    folder = tmp_path_factory.mktemp("sweep-anchor")
    return {block: anchor.build(block, folder) for block in (1, 2)}


def test_anchor_bits(dlls) -> None:
    for dll in dlls.values():
        anchor.check_bits(dll)


def test_the_loop_is_the_isa_asked_for() -> None:
    """AVX2 code holds no zmm register (numba keeps the host's features unless NUMBA_CPU_FEATURES
    is set: such a figure would be AVX-512 code); AVX-512 code uses them."""
    evex = anchor.loop_avx512_lines()
    if cpu.target_shape().isa == "avx512":
        assert any("zmm" in line for line in evex), cpu.describe()
    else:
        assert not evex, f"AVX2 asked for, AVX-512 code compiled: {evex[:3]} ({cpu.describe()})"


def test_sweep_loop_against_the_c_anchor(benchmark, record, short: bool, dlls) -> None:
    test_the_loop_is_the_isa_asked_for()  # no figure of another ISA's code
    m, steps, rounds = (256, 256, 3) if short else (1024, 16384, 5)
    lrs = np.geomspace(1e-4, 1.0, m).astype(np.float32).view(np.uint32)
    page = np.frombuffer(anchor.sw.init_page(), "<u4").copy()
    loop = anchor.meshnb_loop(lrs, steps)
    fns = {f"c-{b}": (lambda dll=dll: anchor.c_run(dll, page, lrs, steps)) for b, dll in dlls.items()}
    fns["meshnb"] = loop
    ghz = anchor.clock_ghz(dlls[1])
    got = anchor.interleaved(fns, rounds, m * steps)
    med = {k: anchor.median(v) for k, v in got.items()}
    c_best = min(med["c-1"], med["c-2"])
    floor_ns = anchor.floor_cycles(anchor.lanes_of_target()) / ghz
    record(benchmark, "sweep-loop-1thread", m * steps, systems=m)
    benchmark.extra_info.update(
        cpu.describe(),
        shape=str(sweep_loop.shape()),
        ns_c_block1=med["c-1"],
        ns_c_block2=med["c-2"],
        ns_meshnb=med["meshnb"],
        ratio=med["meshnb"] / c_best,
        clock_ghz=ghz,
        floor_ns=floor_ns,
    )
    print(
        f"\n{cpu.target_shape().isa} code, loop {sweep_loop.shape()}, M={m} S={steps}, {rounds} interleaved rounds, "
        f"thread CPU ns per system-step: C (1 group a block) {med['c-1']:.2f}, C (2) {med['c-2']:.2f}, "
        f"meshnb {med['meshnb']:.2f}; meshnb / C {med['meshnb'] / c_best:.3f}; clock {ghz:.2f} GHz, op-count floor "
        f"{floor_ns:.2f} ns (C at {c_best / floor_ns:.2f}x, meshnb at {med['meshnb'] / floor_ns:.2f}x of it)"
    )
    benchmark.group = "sweep loop against C"
    benchmark.pedantic(loop, rounds=1, iterations=1)
