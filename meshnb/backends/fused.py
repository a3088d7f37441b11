"""The ``fused`` backend: all N systems of a cluster in one njit loop, with no exchange at all.

:func:`meshnb.loops.run_fused` folds the N members' batch sums in system order each step: SPEC 9's
bits without a round trip, on the driver (:func:`meshnb.host.run_engine`).  The fastest way to run a
cluster; the backends with a real exchange must give the same digests.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from .. import loops
from ..host import Snapshot, checkpoints_of, member_contexts, member_trace, run_engine
from ..options import RunOptions, resolve
from ..program import COUNTER_NAMES, STEPS
from ..results import RunResult, SystemResult
from ..view import PAGE_WORDS, View

CHUNK_STEPS = 1 << 18  # steps x systems per njit call: tens of milliseconds, so stops stay prompt


# Another engine for the same steps (the cuda backend's): ``engine(z)`` gives ``step(pages, count,
# trace_words)``, as ``loops.run_fused`` in the run's mode, and ``warm_up()`` -> its first call's seconds.
Engine = Callable[[bool], tuple[Callable[[np.ndarray, int, np.ndarray], None], Callable[[], float]]]


def run(opts: RunOptions, engine: Engine | None = None) -> RunResult:
    """Run ``opts``' cluster with every member in one njit loop and return its result."""
    start = resolve(opts)
    n, plan = start.systems, start.plan
    pages = np.zeros((n, PAGE_WORDS), dtype=np.uint32)  # every member's page, a row each
    counters = np.zeros((n, len(COUNTER_NAMES)), dtype=np.uint64)
    contexts = member_contexts(start, opts.view_in, lambda k: View(pages[k]), counters)
    views = [ctx.view for ctx in contexts]
    spt = views[0].word("STEPS_PER_TASK")
    if any((v.next_step, v.word("STEPS_PER_TASK")) != (views[0].next_step, spt) for v in views):
        raise ValueError("the members' pages are not at the same step with the same STEPS_PER_TASK")
    if start.checkpoint is not None and len(set(start.checkpoint.traces)) != 1:
        raise ValueError("the members' trace hashes differ: the fused backend runs one trace for all")
    # The members apply one fold per step: they share one trace, whose digest each reports.
    trace = member_trace(start, 0, opts.keep_trace, opts.checkpoint is not None)

    mode = loops.loop_mode(start.z)
    if engine is not None:
        run_fused, warm_up = engine(start.z)
    else:
        run_fused, warm_up = (lambda p, c, w: loops.run_fused(p, c, w, mode)), (lambda: loops.warm_up(mode, True))

    def step(done: int, count: int, rows: np.ndarray) -> None:
        run_fused(pages, count, rows)
        counters[:, STEPS] += np.uint64(count)

    def snapshot() -> Snapshot:
        return Snapshot.of(n, lambda k: (views[k].tobytes(), contexts[k].counter_dict(), trace.state()))

    def systems() -> tuple[SystemResult, ...]:
        digest = trace.hexdigest()
        words_kept = trace.words if opts.keep_trace else None
        return tuple(
            SystemResult(k, views[k].tobytes(), contexts[k].counter_dict(), digest, words_kept) for k in range(n)
        )

    # Chunks of whole tasks end at task boundaries; a task longer than a chunk runs in pieces,
    # which changes no bits (as a shortened task).
    chunk = spt * (CHUNK_STEPS // (n * spt)) if n * spt <= CHUNK_STEPS else max(1, CHUNK_STEPS // n)
    checkpoints = checkpoints_of(opts, start, views[0].next_step)
    return run_engine(
        plan, contexts, chunk, step, warm_up, systems,
        trace=trace, progress=opts.progress, checkpoints=checkpoints, snapshot=snapshot,
    )  # fmt: skip
