"""The ``cuda`` backend: the CUDA image (:mod:`meshnb.cuda`) runs the steps, one warp per system.

With ``systems=N`` it is the fused backend's run (the same task boundaries, SET_LRs, progress,
checkpoints and stops: :func:`meshnb.backends.fused.run`) with the steps on the device: N warps of
one block, the fold in system order through shared memory (:func:`meshnb.cuda.host.run_cluster`).
Without ``systems`` it runs one system without a group on the driver
(:func:`meshnb.host.run_engine`, as the ``single`` backend: SPEC 10's TASKs of STEPS_PER_TASK
steps, ``arg = NEXT_STEP``), with the device as its step engine.  Digests and trace digests equal the
CPU's; pages are the CPU's, so a run continues on either side.  Without numba-cuda, or without a
device outside the simulator, :class:`meshnb.cuda.host.CudaUnavailable` says so in one line.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np

from ..cuda import host
from ..host import chunk_of_tasks, prepare, run_engine
from ..kernels import NSUMS
from ..options import RunOptions
from ..program import STEPS, Context
from ..results import RunResult, system_result
from ..runspec import check_view_can_run
from ..trace import Trace
from ..view import PAGE_WORDS, View
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
    return _run_alone(opts)


def _engine(z: bool) -> tuple[Callable[[np.ndarray, int, np.ndarray], None], Callable[[], float]]:
    """The fused backend's engine on the device, in mode Z (``z``) or IEEE."""

    def step(pages: np.ndarray, count: int, words: np.ndarray) -> None:
        host.run_cluster(pages, count, words, z)

    return step, lambda: warm_up(z)


def _run_alone(opts: RunOptions) -> RunResult:
    plan = opts.plan()
    ctx = Context(View(), trace=Trace(keep=opts.keep_trace), z=opts.z)
    prepare(ctx, plan, opts.view_in)
    check_view_can_run(ctx.view, plan.steps)
    pages = ctx.view.words.reshape(1, -1)  # the page itself, as a cluster of one row

    def step(done: int, count: int, rows: np.ndarray) -> None:
        host.run_cluster(pages, count, rows, opts.z)
        ctx.counters[STEPS] += count

    chunk = chunk_of_tasks(ctx.view.word("STEPS_PER_TASK"), CHUNK_STEPS)
    return run_engine(
        plan, (ctx,), chunk, step, lambda: warm_up(opts.z), lambda: (system_result(0, ctx),),
        trace=ctx.trace, progress=opts.progress,
    )  # fmt: skip
