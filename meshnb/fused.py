"""The fused backend: all N systems of a cluster in one njit loop, with no exchange at all.

:func:`meshnb.loops.run_fused` computes, each step, the N members' batch sums (system ``k``
takes batch offset ``t N + k``), folds them in system order and applies the fold to every
member's params: the bits of SPEC 9 without a round trip.  :func:`run` drives it over a run's
plan as the host drives TASKs: the same task boundaries, SET_LR before the task that starts at
its step, and a call back at every chunk's end (a task boundary) for progress, checkpoints and
stops.  The fastest way to run a cluster (notebooks, benchmarks); the threads and processes
backends, which run the program through a real exchange, must give the same digests.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from . import kernels, loops
from .host import Plan, check_page, next_boundary
from .program import OP_SET_LR, STEPS, Context, Trace, task
from .view import View

CHUNK_STEPS = 1 << 18  # steps x systems per njit call: tens of milliseconds, so stops stay prompt


def run(
    pages: np.ndarray,
    counters: np.ndarray,
    trace: Trace,
    plan: Plan,
    z: bool = True,
    should_stop: Callable[[], bool] = lambda: False,
    on_chunk: Callable[[int], None] = lambda done: None,
) -> int:
    """Run ``plan.steps`` steps of the cluster whose members' pages are the rows of ``pages``
    (``[N, 1024]`` uint32, C-contiguous, updated in place); ``counters`` (``[N, 3]`` uint64) count
    the steps, ``trace`` records the folds (the one trace of every member).  ``should_stop()`` is asked and
    ``on_chunk(done)`` called at task boundaries; returns the steps done."""
    n = pages.shape[0]
    views = [View(pages[k]) for k in range(n)]
    check_page(views[0], plan.steps)
    spt = views[0].word("STEPS_PER_TASK")
    if any((v.next_step, v.word("STEPS_PER_TASK")) != (views[0].next_step, spt) for v in views):
        raise ValueError("the members' pages are not at the same step with the same STEPS_PER_TASK")
    contexts = [Context(v, z=z) for v in views]  # for SET_LR, which needs no group
    mode = loops.loop_mode(z)
    # Chunks of whole tasks end at task boundaries; a task longer than a chunk runs in pieces,
    # which changes no bits (as a shortened task).
    chunk = spt * (CHUNK_STEPS // (n * spt)) if n * spt <= CHUNK_STEPS else max(1, CHUNK_STEPS // n)
    changes = list(plan.set_lr)
    done = 0
    while True:
        while changes and changes[0][0] == done:
            bits = changes.pop(0)[1]
            for ctx in contexts:
                task(ctx, OP_SET_LR, bits)
        if done >= plan.steps or should_stop():
            return done
        end = next_boundary(plan, chunk, done)  # an LR change starts a task
        words = np.empty((end - done, kernels.NSUMS), dtype=np.uint32)
        loops.run_fused(pages, end - done, words, mode)
        trace.record(words)
        counters[:, STEPS] += np.uint64(end - done)
        done = end
        on_chunk(done)
