"""One system without a group (SPEC 10's host with one view): the task loop in numba.

Its engine, all it contributes to the driver (:func:`meshnb.host.run_engine`): whole tasks of
STEPS_PER_TASK steps, many to an njit call (:func:`meshnb.program.run_alone`)."""

from __future__ import annotations

import numpy as np

from .. import loops, program
from ..host import CHUNK_STEPS, chunk_of_tasks, prepare, run_engine
from ..options import RunOptions
from ..program import Context
from ..results import RunResult, system_result
from ..runspec import check_view_can_run
from ..trace import Trace
from ..view import View


def run(opts: RunOptions) -> RunResult:
    """Run ``opts``' one system, task by task in numba, and return its result."""
    plan = opts.plan()
    ctx = Context(View(), trace=Trace(keep=opts.keep_trace), z=opts.z)
    prepare(ctx, plan, opts.view_in)
    check_view_can_run(ctx.view, plan.steps)
    chunk = chunk_of_tasks(ctx.view.word("STEPS_PER_TASK"), CHUNK_STEPS)  # spt 0: no steps to run
    mode = loops.loop_mode(opts.z)

    def step(done: int, n: int, rows: np.ndarray) -> None:
        program.run_alone(ctx, n, rows)

    return run_engine(
        plan,
        (ctx,),
        chunk,
        step,
        lambda: loops.warm_up(mode),
        lambda: (system_result(0, ctx),),
        trace=ctx.trace,
        progress=opts.progress,
    )
