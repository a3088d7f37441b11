"""The host's task loop (SPEC 10), shared by every backend: prepare a system's page, then TASK
with ``arg = NEXT_STEP`` until the plan's steps are done; a task shortened to end the run or to
start at an LR change, a retry after a timeout (``ERR = 1``); a progress bar; the rules every
cluster member follows (stalls, the give-up bound, the wording of a stalled round).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np

from . import program
from .exchange import ExchangePage, Group, PageExchange, PollingWaiter
from .interrupts import deferred_interrupt
from .kernels import NSUMS
from .options import Plan, Start
from .program import COUNTER_NAMES, OP_SET_LR, OP_TASK, Context
from .results import ClusterError
from .runspec import check_view_can_run
from .trace import Trace
from .view import View


def prepare(ctx: Context, plan: Plan, view_in: bytes | None) -> None:
    """Put a fresh system's page in place: ``init`` (or a given page), then the plan's overrides."""
    if view_in is None:
        program.init(ctx)
    else:
        ctx.view.words[:] = View.from_bytes(bytes(view_in)).words
    if plan.step_base is not None:
        ctx.view.next_step = plan.step_base
    if plan.steps_per_task is not None:
        ctx.view.set_word("STEPS_PER_TASK", plan.steps_per_task)


def refuse_pending_round(view: View) -> None:
    """A cluster cannot start from a page with a round pending: its slots were on an exchange
    page that a new run does not have."""
    if view.word("PENDING") and view.word("ROUND") == (view.word("NEXT_STEP") + 1) & 0xFFFFFFFF:
        raise ValueError("this page has a pending round, whose slots were on an exchange page a new run does not have")


def prepare_member(ctx: Context, k: int, start: Start, view_in: bytes | None) -> None:
    """Member ``k``'s page and counters: the checkpoint's, or a fresh run's (init or ``view_in``,
    then the whole plan's overrides); refused here, before any member starts, if it cannot run."""
    ck = start.checkpoint
    if ck is not None:
        ctx.view.words[:] = View.from_bytes(ck.pages[k]).words
        ctx.counters[:] = [ck.counters[k][name] for name in COUNTER_NAMES]
    else:
        assert start.whole is not None
        prepare(ctx, start.whole, view_in)
        refuse_pending_round(ctx.view)
    check_view_can_run(ctx.view, start.plan.steps)


def member_trace(start: Start, k: int, keep: bool, checkpointing: bool) -> Trace:
    """Member ``k``'s trace: resumable (its state saved in checkpoints) when the run writes or
    resumes one, continuing the checkpoint's hash."""
    ck = start.checkpoint
    return Trace(keep, resumable=checkpointing or ck is not None, state=ck.traces[k] if ck is not None else None)


def set_lr(ctx: Context, plan: Plan, done: int) -> None:
    """The SET_LRs due at the boundary where ``done`` steps of the plan are done."""
    for bits in plan.lr_changes_at(done):
        program.task(ctx, OP_SET_LR, bits)


# Steps per njit call of drive_alone (~0.6 ms): Ctrl-C and progress stay live, and a call's trace
# rows (640 KiB) stay in cache for the core that hashes them (2^17 rows: 1.3x the cost).
CHUNK_STEPS = 1 << 15

# A backend's step engine, all it contributes to the loop: ``step(done, n, rows)`` runs the next
# ``n`` steps of the run's systems (``done`` steps are done: a task boundary), counts them in
# their counters, and writes the sums each step applied into ``rows`` (``[n, 5]`` uint32, or no
# rows when the loop keeps no trace: the engine records its own, or none).
StepEngine = Callable[[int, int, np.ndarray], None]


def chunk_of_tasks(spt: int, limit: int) -> int:
    """Steps per engine call: whole tasks of ``spt`` steps up to ``limit`` steps (a task longer
    than ``limit`` runs in pieces of ``limit``, which changes no bits, as a shortened task)."""
    return limit // spt * spt if 0 < spt <= limit else limit


def run_steps(
    plan: Plan,
    contexts: Sequence[Context],
    chunk: int,
    step: StepEngine,
    trace: Trace | None = None,
    after: Callable[[int], None] | None = None,
    should_stop: Callable[[], bool] | None = None,
    save: Callable[[int], None] | None = None,
    every_s: float = math.inf,
) -> int:
    """SPEC 10's host loop around a step engine (every member of every backend runs its tasks
    here; threads, processes and MPI keep progress, checkpoints and stops in loops of their own);
    returns the steps done.

    At every boundary (the start, and after each engine call) the SET_LRs due there go to every
    context's page, then the loop ends at the plan's end or when ``should_stop()`` says so;
    otherwise ``step`` runs up to the next boundary (:meth:`Plan.next_boundary`: ``chunk`` steps
    on, sooner at the end or where an LR change starts a task), its rows go to ``trace`` (two
    buffers in turn: the trace hashes one on its own thread while the next call runs), and
    ``after(done)`` follows (progress), then ``save(done)`` if ``every_s`` has passed since the
    last save (checkpoints; never at the plan's end, which the backend saves itself)."""
    rows = chunk if trace is not None else 0
    buffers = [np.empty((rows, NSUMS), dtype=np.uint32) for _ in range(2)]
    next_save = time.monotonic() + every_s if save is not None else math.inf
    done = calls = 0
    while True:
        for ctx in contexts:
            set_lr(ctx, plan, done)
        if done >= plan.steps or (should_stop is not None and should_stop()):
            return done
        end = plan.next_boundary(chunk, done)
        n = end - done
        buf = buffers[calls % 2][: n if trace is not None else 0]
        calls += 1
        step(done, n, buf)
        if trace is not None:
            trace.record(buf)
        done = end
        if after is not None:
            after(done)
        if save is not None and done < plan.steps and time.monotonic() >= next_save:
            save(done)
            next_save = time.monotonic() + every_s


def drive_alone(
    ctx: Context,
    plan: Plan,
    on_task: Callable[[int], None] | None = None,
    should_stop: Callable[[], bool] | None = None,
) -> int:
    """:func:`drive` for a system without a group: the same TASKs (``arg = NEXT_STEP``,
    STEPS_PER_TASK steps each, shortened to end the run or to start at an LR change), run many
    to an njit call (:func:`meshnb.program.run_alone`), with the same page effects at every task
    boundary.  A call covers whole tasks, up to ``CHUNK_STEPS`` steps (a longer task is run in
    pieces of that size, which changes no bits).  ``on_task`` and ``should_stop`` are called
    between calls."""
    check_view_can_run(ctx.view, plan.steps)
    chunk = chunk_of_tasks(ctx.view.word("STEPS_PER_TASK"), CHUNK_STEPS)  # spt 0: no steps to run

    def step(done: int, n: int, rows: np.ndarray) -> None:
        program.run_alone(ctx, n, rows)

    return run_steps(plan, (ctx,), chunk, step, ctx.trace, on_task, should_stop)


def drive(
    ctx: Context,
    plan: Plan,
    on_task: Callable[[int], None] | None = None,
    should_stop: Callable[[], bool] | None = None,
    before_task: Callable[[int], None] | None = None,
    give_up_s: float | None = None,
) -> int:
    """Run ``plan.steps`` steps of one system with TASK calls; returns the steps done.

    A system without a group (and no fault injection) takes :func:`drive_alone`, the same
    tasks with the loop over them in numba.

    Tasks end at the planned boundaries of :meth:`Plan.next_boundary` (:func:`run_steps`, whose
    engine here is one planned task); a task cut short by a round's timeout (``ERR = 1``) is
    followed by one that resumes it up to the same boundary, so every member of a cluster ends its
    tasks at the same steps.  ``on_task(done)`` is called after every task, retries included
    (progress, checkpoints); ``should_stop()`` is asked at each boundary and ends the loop there;
    ``before_task(call)`` runs before TASK call number ``call`` (from 0, retries included: fault
    injection).  ``give_up_s`` bounds the time without a completed step: past it
    :class:`ClusterError` names this system, so a dead or stalled peer cannot hang it."""
    if not ctx.grouped and before_task is None:
        return drive_alone(ctx, plan, on_task, should_stop)
    v = ctx.view
    check_view_can_run(v, plan.steps)
    spt = v.word("STEPS_PER_TASK")
    calls = 0
    last_step = time.monotonic()

    def task(done: int, steps: int, rows: np.ndarray) -> None:
        """One planned task of ``steps`` steps, resumed after each timeout until it is whole (the
        program records the trace and counts the steps)."""
        nonlocal calls, last_step
        end = done + steps
        while done < end:
            n = end - done
            if before_task is not None:
                before_task(calls)
            calls += 1
            if n != spt:
                v.set_word("STEPS_PER_TASK", n)
            try:
                ran = program.task(ctx, OP_TASK, v.word("NEXT_STEP"))
            finally:
                if n != spt:
                    v.set_word("STEPS_PER_TASK", spt)
            done += ran
            if ran:
                last_step = time.monotonic()
            elif give_up_s is not None and time.monotonic() - last_step > give_up_s:
                raise ClusterError(
                    ctx.group.k if ctx.group is not None else 0,
                    f"no step completed in {give_up_s:g} s (a peer is stalled or dead)",
                )
            if on_task is not None:
                on_task(done)

    return run_steps(plan, (ctx,), spt, task, None, None, should_stop)


def stall_hook(stalls: Sequence[tuple[int, int, int]], k: int) -> Callable[[int], None]:
    """Fault injection for system ``k``: sleep before the TASK calls that ``stalls`` name."""
    naps = {call: ms / 1000 for system, call, ms in stalls if system == k}

    def before_task(call: int) -> None:
        if call in naps:
            time.sleep(naps[call])

    return before_task


def stalled(k: int, e: ClusterError, late: int, behind: Sequence[int]) -> ClusterError:
    """The one wording of a member that gave up on round ``late``, naming who did not reach it."""
    others = [m for m in behind if m != k]
    who = f", not reached by system{'s' * (len(others) > 1)} {', '.join(map(str, others))}" if others else ""
    return ClusterError(k, f"{e.detail}; waiting for round {late}{who}")


def warm_up(z: bool) -> float:
    """Load (or compile) the grouped step's kernels now, so that no member's first round waits
    on its own JIT while the others wait on it; its seconds.  (Every warm-up is a ``warm_up``
    returning its seconds, in the module of the engine it warms: :func:`meshnb.loops.warm_up`,
    :func:`meshnb.sweeps.run.warm_up`, :func:`meshnb.backends.mpi.warm_up`,
    :func:`meshnb.backends.cuda.warm_up`.)"""
    began = time.perf_counter()
    ctx = Context(View(), group=Group(0, 1), exchange=PageExchange(ExchangePage.new(1), 0, 1.0, PollingWaiter()), z=z)
    program.init(ctx)
    ctx.view.set_word("STEPS_PER_TASK", 1)
    program.task(ctx, OP_TASK, 0)
    return time.perf_counter() - began


def progress_bar(total: int, enabled: bool, desc: str | None = None) -> Any:
    """A tqdm bar on stderr counting steps (``desc`` before it), or None."""
    if not enabled:
        return None
    from tqdm import tqdm

    return tqdm(total=total, unit="step", unit_scale=True, mininterval=0.25, smoothing=0.1, leave=False, desc=desc)


@contextmanager
def steps_shown(
    total: int, enabled: bool, desc: str | None = None
) -> Iterator[tuple[Callable[[int], None], Callable[[], bool]]]:
    """The frame of a run's steps, for every backend and sweep: a progress bar of ``total`` steps
    (``show(done)`` moves it to ``done``; nothing shown unless ``enabled``) and Ctrl-C held to the
    next boundary (``requested()``, :func:`~meshnb.interrupts.deferred_interrupt`); the bar is
    closed however the steps end."""
    bar = progress_bar(total, enabled, desc)

    def show(done: int) -> None:
        if bar is not None:
            bar.update(done - bar.n)

    try:
        with deferred_interrupt() as requested:
            yield show, requested
    finally:
        if bar is not None:
            bar.close()
