"""The host's task loop (SPEC 10) on the driver, shared by every backend: a member's page prepared,
its tasks and their retries, every backend's train run (:func:`train_run`), its checkpoints
(:class:`Checkpoints`) and ending (:func:`end_run`), and the rules of a stalled round."""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np

from . import checkpoint, program
from .checkpoint import Checkpoint, RunSettings
from .driver import Cadence, Engine, Frame, Policy, Steps, frame
from .driver import drive as drive_chunks
from .exchange import ExchangePage, Group, PageExchange, PollingWaiter
from .kernels import NSUMS
from .options import Plan, RunOptions, Start
from .program import COUNTER_NAMES, OP_SET_LR, OP_TASK, Context
from .results import ClusterError, RunInterrupted, RunResult, SaveFailed, SystemResult, system_result
from .runspec import check_view_can_run
from .sha256 import Sha256State
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


def member_contexts(
    start: Start, view_in: bytes | None, page: Callable[[int], View], counters: np.ndarray
) -> list[Context]:
    """Every member's context over ``page(k)`` and ``counters[k]``, prepared (:func:`prepare_member`)."""
    n = start.systems
    contexts = [Context(page(k), counters=counters[k], group=Group(k, n), z=start.z) for k in range(n)]
    for k, ctx in enumerate(contexts):
        prepare_member(ctx, k, start, view_in)
    return contexts


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
    """Steps per engine call: whole tasks of ``spt`` steps up to ``limit`` (a longer task in pieces of ``limit``)."""
    return limit // spt * spt if 0 < spt <= limit else limit


def host_loop(
    plan: Plan, contexts: Sequence[Context], chunk: int, step: StepEngine, trace: Trace | None = None
) -> tuple[Steps, Callable[[int, int], int], Callable[[int], None]]:
    """SPEC 10's host loop for the driver: the engine (``step`` a chunk a call, rows to ``trace``), the next
    boundary (:meth:`Plan.next_boundary`) and the SET_LRs due at each."""
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

    return Steps(advance), lambda done, steps: plan.next_boundary(chunk, done), at_boundary


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
    """:func:`host_loop` on the driver's loop; the steps done."""
    engine, next_end, at_boundary = host_loop(plan, contexts, chunk, step, trace)
    return drive_chunks(
        engine, plan.steps, next_end, at_boundary=at_boundary, after=after, should_stop=should_stop, save=save,
        cadence=Cadence(every_s) if save is not None else None,
    )  # fmt: skip


def drive_alone(
    ctx: Context,
    plan: Plan,
    on_task: Callable[[int], None] | None = None,
    should_stop: Callable[[], bool] | None = None,
) -> int:
    """:func:`drive` for a system alone: whole tasks up to ``CHUNK_STEPS`` steps a :func:`~meshnb.program.run_alone`."""
    check_view_can_run(ctx.view, plan.steps)
    chunk = chunk_of_tasks(ctx.view.word("STEPS_PER_TASK"), CHUNK_STEPS)  # spt 0: no steps to run
    return run_steps(plan, (ctx,), chunk, alone_engine(ctx), ctx.trace, on_task, should_stop)


def alone_engine(ctx: Context) -> StepEngine:
    """A system alone's step engine: :func:`~meshnb.program.run_alone`, many tasks to a call."""

    def step(done: int, n: int, rows: np.ndarray) -> None:
        program.run_alone(ctx, n, rows)

    return step


def member_task(
    ctx: Context,
    plan: Plan,
    on_task: Callable[[int], None] | None = None,
    before_task: Callable[[int], None] | None = None,
    give_up_s: float | None = None,
) -> StepEngine:
    """A grouped system's step engine: each planned task resumed after a timeout until whole."""
    v = ctx.view
    spt = v.word("STEPS_PER_TASK")
    calls = 0
    last_step = time.monotonic()

    def task(done: int, steps: int, rows: np.ndarray) -> None:
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

    return task


def drive(
    ctx: Context,
    plan: Plan,
    on_task: Callable[[int], None] | None = None,
    should_stop: Callable[[], bool] | None = None,
    stalls: Mapping[int, float] | None = None,
    give_up_s: float | None = None,
    pause_at: Callable[[int], int] | None = None,
) -> int:
    """Run ``plan.steps`` steps of one system with TASK calls; returns the steps done."""
    naps = dict(stalls or {})
    if not ctx.grouped and not naps:
        return drive_alone(ctx, plan, on_task, should_stop)
    check_view_can_run(ctx.view, plan.steps)
    ex = ctx.exchange
    if ctx.grouped and isinstance(ex, PageExchange) and ex.page.words64 is not None:
        return drive_on_page(ctx, plan, on_task, should_stop, naps, give_up_s, pause_at)
    task = member_task(ctx, plan, on_task, _sleeper(naps, [0]), give_up_s)
    return run_steps(plan, (ctx,), ctx.view.word("STEPS_PER_TASK"), task, None, None, should_stop)


def drive_on_page(
    ctx: Context,
    plan: Plan,
    on_task: Callable[[int], None] | None,
    should_stop: Callable[[], bool] | None,
    naps: Mapping[int, float],
    give_up_s: float | None,
    pause_at: Callable[[int], int] | None,
) -> int:
    """:func:`drive` for a member on an exchange page in memory: the planned tasks many to a
    :func:`~meshnb.program.run_tasks_on_page` call, up to ``CHUNK_STEPS``, the boundaries, ``pause_at``
    and a stalled call (``naps``); a timed-out task is finished as :func:`member_task` does."""
    v = ctx.view
    spt = v.word("STEPS_PER_TASK")
    most = chunk_of_tasks(spt, CHUNK_STEPS)
    # Two buffers in turn: the trace hashes one on its own thread while the next call runs.
    buffers = [np.empty((most if ctx.trace is not None else 0, NSUMS), dtype=np.uint32) for _ in range(2)]
    calls = [0]  # TASK calls begun, as member_task counts them: a stall names one
    before_task = _sleeper(naps, calls)
    fast = 0  # the fast calls: their buffer

    def step(done: int, n: int, _: np.ndarray) -> None:
        nonlocal fast
        end = done + n
        while done < end:
            ahead = min((c - calls[0] for c in naps if c >= calls[0]), default=-1)  # calls before a stall
            if ahead == 0 or v.word("PENDING"):  # one planned task by TASK calls
                task_end = min(done + spt, end)
                member_task(ctx, plan, on_task, before_task, give_up_s)(done, task_end - done, buffers[0][:0])
                done = task_end
                continue
            count = end - done if ahead < 0 else min(end - done, ahead * spt)
            ran = program.run_tasks_on_page(ctx, count, buffers[fast % 2])
            fast += 1
            calls[0] += -(-count // spt) if ran == count else ran // spt + 1  # the timed-out task begun
            done += ran
            if on_task is not None:
                on_task(done)
            if ran < count:  # the rest of the timed-out task, its round resumed by TASK calls
                task_end = min(done - ran + (ran // spt + 1) * spt, end)
                member_task(ctx, plan, on_task, before_task, give_up_s)(done, task_end - done, buffers[0][:0])
                done = task_end

    def next_end(done: int, steps: int) -> int:
        target = pause_at(done) if pause_at is not None else 0
        return plan.next_boundary(min(most, target - done) if target > done else most, done)

    engine, _, at_boundary = host_loop(plan, (ctx,), most, step)
    return drive_chunks(engine, plan.steps, next_end, at_boundary=at_boundary, should_stop=should_stop)


def stall_naps(stalls: Sequence[tuple[int, int, int]], k: int) -> dict[int, float]:
    """Fault injection for system ``k``: ``{TASK call: seconds}`` of the sleeps before the TASK
    calls that ``stalls`` (``(system, call, ms)``) name."""
    return {call: ms / 1000 for system, call, ms in stalls if system == k}


def _sleeper(naps: Mapping[int, float], calls: list[int]) -> Callable[[int], None]:
    """``before_task`` of :func:`member_task` for ``naps``, counting TASK calls in ``calls[0]``
    (shared with the fast loop's count, which runs many to a call)."""

    def before_task(_: int) -> None:
        nap = naps.get(calls[0])
        calls[0] += 1
        if nap:
            time.sleep(nap)

    return before_task


def stall_hook(stalls: Sequence[tuple[int, int, int]], k: int) -> Callable[[int], None]:
    """Fault injection for system ``k``: sleep before the TASK calls that ``stalls`` name."""
    return _sleeper(stall_naps(stalls, k), [0])


def stalled(k: int, e: ClusterError, late: int, behind: Sequence[int]) -> ClusterError:
    """The one wording of a member that gave up on round ``late``, naming who did not reach it."""
    others = [m for m in behind if m != k]
    who = f", not reached by system{'s' * (len(others) > 1)} {', '.join(map(str, others))}" if others else ""
    return ClusterError(k, f"{e.detail}; waiting for round {late}{who}")


def warm_up(z: bool) -> float:
    """Load (or compile) the grouped step's kernels now, so no member's first round waits on its JIT; its seconds."""
    began = time.perf_counter()
    ctx = Context(View(), group=Group(0, 1), exchange=PageExchange(ExchangePage.new(1), 0, 1.0, PollingWaiter()), z=z)
    program.init(ctx)
    ctx.view.set_word("STEPS_PER_TASK", 1)
    program.task(ctx, OP_TASK, 0)  # a TASK call's loop (grouped.run_page)
    program.run_tasks_on_page(ctx, 1, np.empty((0, NSUMS), dtype=np.uint32))  # and many tasks' (run_page_tasks)
    return time.perf_counter() - began


@contextmanager
def steps_shown(
    total: int, enabled: bool, desc: str | None = None
) -> Iterator[tuple[Callable[[int], None], Callable[[], bool]]]:
    """The driver's :func:`~meshnb.driver.frame` as ``show(done)`` (its progress bar) and ``requested()`` (Ctrl-C)."""
    with frame(total, enabled, desc) as f:
        yield f.show, f.requested


@dataclass(frozen=True)
class Snapshot:
    """Every member's state at a task boundary with no round pending: what a checkpoint keeps."""

    pages: tuple[bytes, ...]
    counters: tuple[dict[str, int], ...]
    traces: tuple[Sha256State, ...]

    @classmethod
    def of(cls, n: int, member: Callable[[int], tuple[bytes, dict[str, int], Sha256State]]) -> Snapshot:
        """The snapshot of ``n`` members, ``member(k)`` giving member ``k``'s page, counters and trace state."""
        states = [member(k) for k in range(n)]
        return cls(tuple(p for p, _, _ in states), tuple(c for _, c, _ in states), tuple(t for _, _, t in states))


@dataclass(frozen=True)
class Checkpoints:
    """A run's checkpoints: the file (None: none), the run's settings, the steps before this call, how often."""

    path: str | os.PathLike[str] | None
    settings: RunSettings
    steps_before: int = 0
    every_s: float = math.inf

    def cadence(self) -> Cadence:
        """When the next checkpoint is due (never without a file)."""
        return Cadence(self.every_s if self.path is not None else math.inf)

    def save(self, done: int, snapshot: Snapshot) -> None:
        """Write the run's checkpoint after ``done`` steps of this call."""
        if self.path is not None:
            checkpoint.save(
                self.path,
                Checkpoint(self.settings, self.steps_before + done, snapshot.pages, snapshot.counters, snapshot.traces),
            )

    def saver(self, snapshot: Callable[[], Snapshot]) -> Callable[[int], None] | None:
        """The driver's ``save(done)``: ``snapshot()`` written after ``done`` steps (None without a file)."""
        if self.path is None:
            return None
        return lambda done: self.save(done, snapshot())


def checkpoints_of(opts: RunOptions, start: Start, next_step: int, writes: bool = True) -> Checkpoints:
    """The run's :class:`Checkpoints` (``writes``: this process writes them) from a page at ``next_step``."""
    path = opts.checkpoint if writes else None
    return Checkpoints(path, start.settings(next_step), start.done_before, opts.checkpoint_every_s)


def end_run(result: RunResult, planned: int, final_save: Callable[[], None] | None = None) -> RunResult:
    """A train run's end: ``final_save()`` (OSError: SaveFailed), RunInterrupted short of ``planned``, else it."""
    if final_save is not None:
        try:
            final_save()
        except OSError as e:
            raise SaveFailed(result, e) from None
    if result.steps < planned:
        raise RunInterrupted(result)
    return result


def train_run(
    engine: Engine,
    steps: int,
    next_end: Callable[[int, int], int],
    systems: Callable[[int], tuple[SystemResult, ...]],
    *,
    at_boundary: Callable[[int], None] | None = None,
    progress: bool = False,
    checkpoints: Checkpoints | None = None,
    snapshot: Callable[[], Snapshot] | None = None,
    save: Callable[[int], None] | None = None,
    ready: Callable[[], None] | None = None,
    policy: Callable[[Frame], Policy] | None = None,
) -> RunResult:
    """A train run around ``engine``, every backend's: the driver's frame and loop, the checkpoints, :func:`end_run`."""
    if save is None and checkpoints is not None and snapshot is not None:
        save = checkpoints.saver(snapshot)
    with frame(steps, progress) as f:
        f.warm(engine)  # the first call's JIT (a cluster's start-up) stays out of the timing
        if ready is not None:
            ready()
        cadence = checkpoints.cadence() if checkpoints is not None else Cadence()
        rules = policy(f) if policy is not None else Policy(f.requested, cadence)
        f.start()

        def after(done: int) -> None:
            if rules.after is not None:
                rules.after(done)
            f.show(done)

        done = drive_chunks(
            engine, steps, next_end, at_boundary=at_boundary, after=after,
            should_stop=rules.should_stop, save=save, cadence=rules.cadence,
        )  # fmt: skip
        results = systems(done)
    steps_before = checkpoints.steps_before if checkpoints is not None else 0
    result = RunResult(done, results, f.stop(), f.first_call, steps_before)
    last = save
    return end_run(result, steps, (lambda: last(done)) if last is not None else None)


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
    """:func:`train_run` on :func:`host_loop` (``chunk`` steps a ``step`` call); ``systems()``: the results."""
    engine, next_end, at_boundary = host_loop(plan, contexts, chunk, step, trace)
    return train_run(
        Steps(engine.advance, warm_up), plan.steps, next_end, lambda done: systems(),
        at_boundary=at_boundary, progress=progress, checkpoints=checkpoints, snapshot=snapshot,
    )  # fmt: skip


def run_alone(
    opts: RunOptions, step_of: Callable[[Context], StepEngine], warm_up: Callable[[], object], chunk_steps: int
) -> RunResult:
    """One system without a group on the driver (``step_of(ctx)`` its engine, whole tasks up to
    ``chunk_steps`` a call): the ``single`` backend, and ``cuda``'s without ``systems``."""
    plan = opts.plan()
    ctx = Context(View(), trace=Trace(keep=opts.keep_trace), z=opts.z)
    prepare(ctx, plan, opts.view_in)
    check_view_can_run(ctx.view, plan.steps)
    chunk = chunk_of_tasks(ctx.view.word("STEPS_PER_TASK"), chunk_steps)  # spt 0: no steps to run
    return run_engine(
        plan, (ctx,), chunk, step_of(ctx), warm_up, lambda: (system_result(0, ctx),),
        trace=ctx.trace, progress=opts.progress,
    )  # fmt: skip
