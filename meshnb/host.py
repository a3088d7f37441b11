"""The host's task loop (SPEC 10), shared by every backend: prepare a system's page, then TASK
with ``arg = NEXT_STEP`` until the plan's steps are done; a task shortened to end the run or to
start at an LR change, a retry after a timeout (``ERR = 1``), on the driver's loop
(:func:`meshnb.driver.drive`); a train run around a backend's step engine (:func:`run_engine`),
every checkpoint's assembly (:class:`Checkpoints`) and the interrupted-run ending
(:func:`end_run`); the rules every cluster member follows (stalls, the give-up bound, the
wording of a stalled round).
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np

from . import checkpoint, program
from .checkpoint import Checkpoint, RunSettings
from .driver import Cadence, Steps, frame, progress_bar
from .driver import drive as drive_chunks
from .exchange import ExchangePage, Group, PageExchange, PollingWaiter
from .kernels import NSUMS
from .options import Plan, Start
from .program import COUNTER_NAMES, OP_SET_LR, OP_TASK, Context
from .results import ClusterError, RunInterrupted, RunResult, SaveFailed, SystemResult
from .runspec import check_view_can_run
from .sha256 import Sha256State
from .trace import Trace
from .view import View

__all__ = [
    "CHUNK_STEPS",
    "Checkpoints",
    "Snapshot",
    "StepEngine",
    "chunk_of_tasks",
    "drive",
    "drive_alone",
    "end_run",
    "member_trace",
    "prepare",
    "prepare_member",
    "progress_bar",
    "refuse_pending_round",
    "run_engine",
    "run_steps",
    "set_lr",
    "stall_hook",
    "stalled",
    "steps_shown",
    "warm_up",
]


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
    """The host loop (SPEC 10) of every backend, on the driver's loop
    (:func:`meshnb.driver.drive`); returns the steps done.

    At every boundary (the start, and after each engine call) the SET_LRs due there go to every
    context's page, then the loop ends at the plan's end or when ``should_stop()`` says so;
    otherwise ``step`` runs up to the next boundary (:meth:`Plan.next_boundary`: ``chunk`` steps
    on, sooner at the end or where an LR change starts a task), its rows go to ``trace`` (two
    buffers in turn: the trace hashes one on its own thread while the next call runs), and
    ``after(done)`` follows (progress), then ``save(done)`` if ``every_s`` has passed since the
    last save (checkpoints; never at the plan's end, which the backend saves itself)."""
    rows = chunk if trace is not None else 0
    buffers = [np.empty((rows, NSUMS), dtype=np.uint32) for _ in range(2)]
    calls = 0

    def advance(done: int, n: int) -> None:
        nonlocal calls
        buf = buffers[calls % 2][: n if trace is not None else 0]
        calls += 1
        step(done, n, buf)
        if trace is not None:
            trace.record(buf)

    def at_boundary(done: int) -> None:
        for ctx in contexts:
            set_lr(ctx, plan, done)

    return drive_chunks(
        Steps(advance),
        plan.steps,
        lambda done, steps: plan.next_boundary(chunk, done),
        at_boundary=at_boundary,
        after=after,
        should_stop=should_stop,
        save=save,
        cadence=Cadence(every_s) if save is not None else None,
    )


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


@contextmanager
def steps_shown(
    total: int, enabled: bool, desc: str | None = None
) -> Iterator[tuple[Callable[[int], None], Callable[[], bool]]]:
    """The driver's :func:`~meshnb.driver.frame` as two functions: ``show(done)`` moves its
    progress bar of ``total`` steps (nothing shown unless ``enabled``), ``requested()`` says
    whether Ctrl-C asked for a stop (held to the next boundary); the bar is closed however the
    steps end."""
    with frame(total, enabled, desc) as f:
        yield f.show, f.requested


@dataclass(frozen=True)
class Snapshot:
    """Every member's state at a task boundary with no round pending: what a checkpoint keeps.

    Parameters
    ----------
    pages : tuple of bytes
        Every member's view page, system 0 first.
    counters : tuple of dict
        Every member's counters.
    traces : tuple of Sha256State
        Every member's trace hash state.
    """

    pages: tuple[bytes, ...]
    counters: tuple[dict[str, int], ...]
    traces: tuple[Sha256State, ...]


@dataclass(frozen=True)
class Checkpoints:
    """A run's checkpoints: the file (None: the run writes none), what each says of the run, the
    steps done before this call (a resumed run's), and how often the driver saves one.

    Examples
    --------
    >>> from meshnb.checkpoint import RunSettings
    >>> run = RunSettings(systems=2, steps=64, steps_per_task=None, set_lr=(), step_base=None, z=True, first_step=0)
    >>> ck = Checkpoints(None, run)
    >>> ck.save(64, Snapshot((), (), ()))  # no file: nothing written
    >>> ck.cadence().due()
    False
    """

    path: str | os.PathLike[str] | None
    settings: RunSettings
    steps_before: int = 0
    every_s: float = math.inf

    def cadence(self) -> Cadence:
        """When the next checkpoint is due (never without a file)."""
        return Cadence(self.every_s if self.path is not None else math.inf)

    def save(self, done: int, snapshot: Snapshot) -> None:
        """Write the checkpoint of the run after ``done`` steps of this call (the one assembly of
        a checkpoint, for every backend)."""
        if self.path is not None:
            checkpoint.save(
                self.path,
                Checkpoint(self.settings, self.steps_before + done, snapshot.pages, snapshot.counters, snapshot.traces),
            )


def end_run(result: RunResult, planned: int, final_save: Callable[[], None] | None = None) -> RunResult:
    """The one ending of a train run, for every backend: ``final_save()`` (the last checkpoint;
    its OSError is :class:`~meshnb.results.SaveFailed`, with the result), then
    :class:`~meshnb.results.RunInterrupted` if the run stopped before its ``planned`` steps, else
    the result.

    Examples
    --------
    >>> import meshnb
    >>> r = meshnb.train(64)
    >>> end_run(r, 64) is r
    True
    >>> end_run(r, 128)
    Traceback (most recent call last):
        ...
    meshnb.results.RunInterrupted: interrupted after 64 steps
    """
    if final_save is not None:
        try:
            final_save()
        except OSError as e:
            raise SaveFailed(result, e) from None
    if result.steps < planned:
        raise RunInterrupted(result)
    return result


def run_engine(
    plan: Plan,
    contexts: Sequence[Context],
    chunk: int,
    step: StepEngine,
    warm_up: Callable[[], object],
    systems: Callable[[], tuple[SystemResult, ...]],
    *,
    trace: Trace | None = None,
    progress: bool = False,
    checkpoints: Checkpoints | None = None,
    snapshot: Callable[[], Snapshot] | None = None,
) -> RunResult:
    """A train run of the contexts' systems with ``step`` as its engine: the driver's frame (a
    progress bar, Ctrl-C held to a boundary, ``warm_up`` timed apart from the steps), the host
    loop (:func:`run_steps`, ``chunk`` steps a call), checkpoints every ``checkpoints.every_s``
    and at the end or the stop (``snapshot()``), then :func:`end_run`.  ``systems()`` gives the
    results once the steps are done (its wait for the trace counts in the steps' seconds)."""
    save: Callable[[int], None] | None = None
    if checkpoints is not None and checkpoints.path is not None and snapshot is not None:
        ck, snap = checkpoints, snapshot

        def save(done: int) -> None:
            ck.save(done, snap())

    with frame(plan.steps, progress) as f:
        f.warm(Steps(lambda done, n: None, warm_up))  # the first call's JIT stays out of the timing
        f.start()
        every = checkpoints.every_s if checkpoints is not None else math.inf
        done = run_steps(plan, contexts, chunk, step, trace, f.show if progress else None, f.requested, save, every)
    results = systems()
    steps_before = checkpoints.steps_before if checkpoints is not None else 0
    result = RunResult(done, results, f.stop(), f.first_call, steps_before)
    return end_run(result, plan.steps, (lambda: save(done)) if save is not None else None)
