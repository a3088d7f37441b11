"""The ``cuda`` backend: the CUDA image (:mod:`meshnb.cuda`) runs the steps, one warp per system.

A cluster is the fused backend's run with the steps on the device (:func:`meshnb.cuda.host.run_cluster`);
one system runs as the ``single`` backend does (:func:`meshnb.host.run_alone`).  Digests and pages
equal the CPU's; without numba-cuda or a device, :class:`meshnb.cuda.host.CudaUnavailable` says so.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np

from ..cuda import host
from ..host import StepEngine, run_alone
from ..kernels import NSUMS
from ..options import RunOptions
from ..program import STEPS, Context
from ..results import RunResult
from ..view import PAGE_WORDS
from . import fused

CHUNK_STEPS = 1 << 15  # steps per launch for one system: Ctrl-C and progress stay live


def warm_up(z: bool) -> float:
    """Compile the kernel now (a launch of no steps on a scratch page); its seconds."""
    began = time.perf_counter()
    host.run_cluster(np.zeros((1, PAGE_WORDS), dtype=np.uint32), 0, np.empty((0, NSUMS), np.uint32), z)
    return time.perf_counter() - began


def run(opts: RunOptions) -> RunResult:
    """Run ``opts`` on the CUDA image (one system, or a fused cluster of 1 to 32 systems)."""
    host.require()  # one line if it cannot run here, before any page is made
    if opts.is_cluster:
        return fused.run(opts, _engine)
    return run_alone(opts, _alone, lambda: warm_up(opts.z), CHUNK_STEPS)


def _engine(z: bool) -> tuple[Callable[[np.ndarray, int, np.ndarray], None], Callable[[], float]]:
    """The fused backend's engine on the device, in mode Z (``z``) or IEEE."""

    def step(pages: np.ndarray, count: int, words: np.ndarray) -> None:
        host.run_cluster(pages, count, words, z)

    return step, lambda: warm_up(z)


def _alone(ctx: Context) -> StepEngine:
    """One system's engine on the device: its page itself as a cluster of one row."""
    pages = ctx.view.words.reshape(1, -1)

    def step(done: int, count: int, rows: np.ndarray) -> None:
        host.run_cluster(pages, count, rows, ctx.z)
        ctx.counters[STEPS] += count

    return step
