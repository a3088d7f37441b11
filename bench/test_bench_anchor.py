"""The C anchor (issue 12): the single step loop in C with AVX and DAZ, beside meshnb's loop.

``bench/anchor.c`` computes the bits of ``meshnb.loops.run_tasks`` in mode ``Z_DAZ`` (8-float
AVX vectors, DAZ on and FTZ off, only output words flushed); it is built here with gcc
(skipped without gcc or off x86), checked bit for bit against meshnb on the init page, the
hard pages and the varied start pages, then timed in the same harness as meshnb's loop: one
task of ``sizes["run"]`` steps on a page's words, the trace into a buffer allocated once, so
the two figures differ only by the loop's code ("loop-steps" against "c-anchor").
"""

from __future__ import annotations

import ctypes
import itertools
import platform
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from meshnb import cpu, loops
from meshnb.testing import reference as ref
from meshnb.testing.pages import hard_pages

SOURCE = Path(__file__).with_name("anchor.c")
pytestmark = pytest.mark.skipif(
    shutil.which("gcc") is None or platform.machine().lower() not in ("x86_64", "amd64") or not cpu.HAS_DAZ,
    reason="the C anchor needs gcc on x86",
)


@pytest.fixture(scope="module")
def anchor(tmp_path_factory) -> ctypes.CDLL:
    lib = tmp_path_factory.mktemp("anchor") / "anchor.so"
    # -ffp-contract=off and no -mfma: no fused multiply-add; no -ffast-math: no reassociation.
    subprocess.run(
        ["gcc", "-O3", "-mavx2", "-ffp-contract=off", "-shared", "-fPIC", "-o", str(lib), str(SOURCE)], check=True
    )
    dll = ctypes.CDLL(str(lib))
    dll.anchor_run.argtypes = [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_void_p]
    dll.anchor_run.restype = None
    return dll


def _one_task(words: np.ndarray, n: int) -> np.ndarray:
    w = words.copy()
    w[5] = n  # STEPS_PER_TASK: the whole run is one task, as anchor_run runs it
    return w


def _c_run(dll: ctypes.CDLL, words: np.ndarray, n: int, trace: np.ndarray | None) -> None:
    dll.anchor_run(words.ctypes.data, n, None if trace is None else trace.ctypes.data)


def test_anchor_bits(anchor, sizes, starts):
    n = max(sizes["verify"], 1000)
    pages = [ref.init_page(1), *hard_pages().values(), *(s.page for s in starts)]
    for page in pages:
        words = _one_task(np.frombuffer(page, "<u4"), n)
        c_words, c_trace = words.copy(), np.zeros((n, 5), np.uint32)
        _c_run(anchor, c_words, n, c_trace)
        trace = np.zeros((n, 5), np.uint32)
        loops.run_tasks(words, n, trace, loops.Z_DAZ)
        np.testing.assert_array_equal(c_trace, trace)
        np.testing.assert_array_equal(c_words, words)


@pytest.mark.parametrize("impl", ["c-anchor", "loop-steps"])
def test_anchor_against_the_loop(benchmark, record, sizes, starts, anchor, impl):
    """One task of ``sizes["run"]`` steps with the trace, C anchor or ``loops.run_tasks``."""
    n = sizes["run"]
    trace = np.zeros((n, 5), np.uint32)
    pages = itertools.cycle([_one_task(np.frombuffer(s.page, "<u4"), n) for s in starts])
    if impl == "c-anchor":

        def run(words: np.ndarray) -> None:
            _c_run(anchor, words, n, trace)
    else:
        loops.warm_up(loops.Z_DAZ)

        def run(words: np.ndarray) -> None:
            loops.run_tasks(words, n, trace, loops.Z_DAZ)

    def setup():
        return (next(pages).copy(),), {}

    record(benchmark, impl, n)
    benchmark.group = "single loop against C"
    benchmark.pedantic(run, setup=setup, rounds=max(sizes["rounds"], 7), iterations=1)
