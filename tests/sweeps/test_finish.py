"""meshnb.sweeps.finish: a batch's result from the loop's arrays equals the one from its final pages."""

from __future__ import annotations

import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from meshnb.loops import sweep as sweep_loop
from meshnb.sweeps import describe, init_page
from meshnb.sweeps.finish import result_of_lanes
from meshnb.sweeps.lanes import Lanes, final_pages
from meshnb.sweeps.run import result_of_pages
from meshnb.testing.pages import hard_pages
from meshnb.view import WORD

from .helpers import ROOT


def _systems(steps: int, m: int, lrs: bool = True, one_base: bool = False):
    pages = [init_page(), hard_pages()["tiny-samples"], init_page()]
    rng = np.random.default_rng(m)
    # LOSS words of a start page that a short run leaves in place: the digest must read them
    pages[2] = np.frombuffer(pages[2], np.uint32).copy()
    pages[2][WORD["LOSS"] : WORD["LOSS"] + 256] = rng.integers(0, 2**32, 256, dtype=np.uint32)
    pages[2] = pages[2].tobytes()
    per = -(-m // 3)
    lr = np.geomspace(1e-3, 1.0, per).astype(np.float32) if lrs else None
    n = 3 * per if lrs else 3
    base = 2**40 + 3 if one_base else [(k * 5) % 19 + (k % 7) * 2**40 for k in range(n)]
    return describe(steps, view_in=pages, lrs=lr, step_base=base)


def test_lanes_of_systems_are_the_lanes_of_their_pages() -> None:
    for lrs in (True, False):
        systems = _systems(10, 69, lrs)
        n = len(systems)
        for sh in (sweep_loop.Shape(16, 1), sweep_loop.Shape(8, 2)):
            want = Lanes(systems.words(0, n), True, 10, 3, sh)
            got = Lanes.of_systems(systems, 0, n, 10, 3, sh)
            assert np.array_equal(got.position, want.position)
            assert want.arrays.keys() == got.arrays.keys()
            for k, v in want.arrays.items():
                assert v.dtype == got.arrays[k].dtype and np.array_equal(
                    v.view(np.uint8), got.arrays[k].view(np.uint8)
                ), k


@pytest.mark.parametrize(
    ("m", "lrs", "one_base", "shape", "kernel"),
    [
        (69, True, False, (16, 1), None),
        (3, False, False, (16, 1), None),
        # the njit paths: systems in lanes of mixed step bases and pages, and of one step base
        # (a group's words whole vectors of the loop's arrays), on both kernels and both widths
        *[(2100, True, one, shape, kernel) for one in (False, True) for shape in ((16, 1), (8, 2))
          for kernel in ("lanes", "rows")],
    ],
)  # fmt: skip
def test_result_of_lanes_is_the_result_of_the_final_pages(
    m: int, lrs: bool, one_base: bool, shape: tuple[int, int], kernel: str | None
) -> None:
    with ThreadPoolExecutor(2) as pool:
        for done in (1, 5, 255, 256, 300):
            systems = _systems(done, m, lrs, one_base)
            n = len(systems)
            ln = Lanes.of_systems(systems, 0, n, done, 0, sweep_loop.Shape(*shape))
            rng = np.random.default_rng(done)
            ln.arrays["params"][:] = rng.random(ln.arrays["params"].shape, dtype=np.float32)
            ln.arrays["ring"].view(np.uint32)[:] = rng.integers(0, 2**32, ln.arrays["ring"].shape, dtype=np.uint32)
            lo = 0
            want = result_of_pages(
                systems, lo, final_pages(systems.words(0, n), systems.step_base(0, n), ln, done), done
            )
            got = result_of_lanes(systems, lo, ln, done, pool, 2, kernel=kernel)
            for name in ("page_index", "lr_index", "lr_words", "step_base", "params_words", "last_loss_words",
                         "digest_bytes"):  # fmt: skip
                a, b = getattr(want, name), getattr(got, name)
                assert a.dtype == b.dtype and np.array_equal(a, b), (name, done, m)
            assert got.steps == done and got.final_pages is None and got.starts is systems.starts


@pytest.mark.slow
def test_a_small_sweeps_cold_start_compiles_the_loop_alone_and_then_nothing(tmp_path) -> None:
    """An empty numba cache, a fresh process: the CSV of 8 systems compiles the sweep loop and no
    other kernel (tables, gather, digest and CSV rows are numpy, hashlib and Python at this size);
    a second process with that cache compiles nothing (NUMBA_DEBUG_CACHE: loads, no save)."""
    cache = tmp_path / "numba"
    env = {**os.environ, "NUMBA_CACHE_DIR": str(cache), "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "meshnb", "sweep", "--lr", "1e-3:1:8:log", "--steps", "16", "--csv"]
    p = subprocess.run(
        [*cmd, str(tmp_path / "a.csv")], capture_output=True, text=True, timeout=600, env=env, check=False
    )
    assert p.returncode == 0, p.stderr
    compiled = sorted(f.name for f in cache.rglob("*.nbi"))
    assert compiled and all(name.startswith("sweep._make_entry") for name in compiled), compiled
    env["NUMBA_DEBUG_CACHE"] = "1"
    q = subprocess.run(
        [*cmd, str(tmp_path / "b.csv")], capture_output=True, text=True, timeout=600, env=env, check=False
    )
    assert q.returncode == 0, q.stderr
    log = q.stdout + q.stderr
    assert "data loaded" in log and "data saved" not in log, log[-2000:]
    assert (tmp_path / "a.csv").read_bytes() == (tmp_path / "b.csv").read_bytes()
