"""One system without a group (SPEC 10's host with one view): the task loop in numba."""

from __future__ import annotations

import time

from .. import loops
from ..host import drive, prepare, steps_shown
from ..options import RunOptions
from ..program import Context
from ..results import RunInterrupted, RunResult, system_result
from ..trace import Trace
from ..view import View


def run(opts: RunOptions) -> RunResult:
    plan = opts.plan()
    ctx = Context(View(), trace=Trace(keep=opts.keep_trace), z=opts.z)
    prepare(ctx, plan, opts.view_in)
    with steps_shown(plan.steps, opts.progress) as (show, requested):
        first_call = loops.warm_up(loops.loop_mode(opts.z))  # its JIT stays out of the timing
        start = time.perf_counter()
        done = drive(ctx, plan, show if opts.progress else None, requested)
    result = RunResult(done, (system_result(0, ctx),), time.perf_counter() - start, first_call)
    if done < plan.steps:
        raise RunInterrupted(result)
    return result
