"""The host (SPEC section 10): makes each system's view and context, calls init, drives tasks.

``train`` is the library entry point; ``drive`` is the per-system task loop that every backend
shares: tasks with ``arg = NEXT_STEP`` until the wanted steps are done, a shortened task to end on
the exact count or to start at an LR change, and a retry after a timeout (``ERR = 1``).
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from . import loops, program
from .program import LAST_STEP, OP_SET_LR, OP_TASK, Context, Trace
from .view import View

_MASK32 = 0xFFFFFFFF


@dataclass(frozen=True)
class Plan:
    """A run's settings, validated once.

    ``set_lr`` holds ``(step, bits)`` pairs: SET_LR with ``bits`` before the task that starts
    when ``step`` steps of this run are done (``step == steps`` changes the final page only)."""

    steps: int = 4096
    steps_per_task: int | None = None
    set_lr: tuple[tuple[int, int], ...] = ()
    step_base: int | None = None

    def __post_init__(self) -> None:
        if not _is_int(self.steps) or self.steps < 0:
            raise ValueError(f"steps must be a non-negative integer, got {self.steps!r}")
        if self.steps_per_task is not None and (
            not _is_int(self.steps_per_task) or not 1 <= self.steps_per_task <= _MASK32
        ):
            raise ValueError(f"steps per task must be 1..{_MASK32}, got {self.steps_per_task!r}")
        for step, bits in self.set_lr:
            if not _is_int(step) or not 0 <= step <= self.steps:
                raise ValueError(f"an LR change must be at a step from 0 to {self.steps}, got {step!r}")
            if not _is_int(bits) or not 0 <= bits <= _MASK32:
                raise ValueError(f"an LR change takes f32 bits (a u32), got {bits!r}")
        if self.step_base is not None and (not _is_int(self.step_base) or not 0 <= self.step_base <= LAST_STEP):
            raise ValueError(f"a step base must be 0..2^64-2, got {self.step_base!r}")

    @classmethod
    def make(
        cls,
        steps: int = 4096,
        steps_per_task: int | None = None,
        set_lr: Mapping[int, int] | tuple[tuple[int, int], ...] | list[tuple[int, int]] | None = None,
        step_base: int | None = None,
    ) -> "Plan":
        pairs = tuple(set_lr.items()) if isinstance(set_lr, Mapping) else tuple(set_lr or ())
        # Stable sort: several changes at one step apply in the order given (the last one wins).
        return cls(steps, steps_per_task, tuple(sorted(pairs, key=lambda p: p[0])), step_base)


def _is_int(x: Any) -> bool:
    return isinstance(x, (int, np.integer)) and not isinstance(x, bool)


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


def check_page(view: View, steps: int) -> None:
    """Refuse a page that cannot run ``steps`` steps (SPEC 8 and 10)."""
    if steps and view.word("STEPS_PER_TASK") == 0:
        raise ValueError("the page's STEPS_PER_TASK is 0: its tasks would never progress")
    if steps and view.next_step + steps - 1 > LAST_STEP:
        raise ValueError(
            f"steps {view.next_step} .. {view.next_step + steps - 1} reach 2^64-1, whose round would wrap to 0"
        )


def next_boundary(plan: Plan, spt: int, done: int) -> int:
    """Where the task that starts when ``done`` steps of the run are done ends: ``spt`` steps
    later, or sooner at the run's end or where the next LR change must start a task."""
    end = min(done + spt, plan.steps)
    for step, _ in plan.set_lr:  # sorted
        if done < step < end:
            return step
    return end


class ClusterError(RuntimeError):
    """A member of a cluster failed, died, or made no progress: ``system`` names it (None: the
    cluster as a whole); ``detail`` is the message without the system."""

    def __init__(self, system: int | None, detail: str) -> None:
        super().__init__(detail if system is None else f"system {system}: {detail}")
        self.system, self.detail = system, detail


CHUNK_STEPS = 1 << 16  # steps per njit call of drive_alone: ~2 ms, so Ctrl-C and progress stay live


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
    between calls.  The trace of one call is hashed on a second thread while the next one runs."""
    v = ctx.view
    check_page(v, plan.steps)
    spt = v.word("STEPS_PER_TASK")
    chunk = CHUNK_STEPS // spt * spt if 0 < spt <= CHUNK_STEPS else CHUNK_STEPS  # spt 0: no steps to run
    changes = list(plan.set_lr)
    trace = ctx.trace
    buffers = [np.empty((chunk if trace is not None else 0, 5), dtype=np.uint32) for _ in range(2)]
    done = calls = 0
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="meshnb-trace") as hasher:
        hashing = None  # the last chunk's hash; buffers alternate, so at most one is in flight
        while True:
            while changes and changes[0][0] == done:
                program.task(ctx, OP_SET_LR, changes.pop(0)[1])
            if done >= plan.steps or (should_stop is not None and should_stop()):
                break
            n = next_boundary(plan, chunk, done) - done
            buf = buffers[calls % 2]
            program.run_alone(ctx, n, buf)
            calls += 1
            if trace is not None:
                if hashing is not None:
                    hashing.result()
                hashing = hasher.submit(trace.record, buf[:n])
            done += n
            if on_task is not None:
                on_task(done)
        if hashing is not None:
            hashing.result()
    return done


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

    Tasks end at the planned boundaries of :func:`next_boundary`; a task cut short by a round's
    timeout (``ERR = 1``) is followed by one that resumes it up to the same boundary, so every
    member of a cluster ends its tasks at the same steps.  ``on_task(done)`` is called after every
    task, retries included (progress, checkpoints); ``should_stop()`` is asked at each boundary
    and ends the loop there; ``before_task(call)`` runs before TASK call number ``call`` (from 0,
    retries included: fault injection).  ``give_up_s`` bounds the time without a completed step:
    past it :class:`ClusterError` names this system, so a dead or stalled peer cannot hang it."""
    if not ctx.grouped and before_task is None:
        return drive_alone(ctx, plan, on_task, should_stop)
    v = ctx.view
    check_page(v, plan.steps)
    spt = v.word("STEPS_PER_TASK")
    changes = list(plan.set_lr)
    done = end = calls = 0
    last_step = time.monotonic()
    while True:
        if done == end:  # a planned boundary
            while changes and changes[0][0] == done:
                program.task(ctx, OP_SET_LR, changes.pop(0)[1])
            if done >= plan.steps or (should_stop is not None and should_stop()):
                return done
            end = next_boundary(plan, spt, done)
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
            k = ctx.group.k if ctx.group is not None else 0
            raise ClusterError(k, f"no step completed in {give_up_s:g} s (a peer is stalled or dead)")
        if on_task is not None:
            on_task(done)


@dataclass(frozen=True)
class SystemResult:
    """One system at the end of a run: its page, counters and trace digest."""

    system: int
    page: bytes
    counters: dict[str, int]
    trace_digest: str
    trace: np.ndarray | None = field(default=None, repr=False)

    @property
    def view(self) -> View:
        return View.from_bytes(self.page)

    @property
    def params(self) -> np.ndarray:
        return self.view["PARAMS"]

    @property
    def params_hex(self) -> list[str]:
        return [f"{w:08x}" for w in self.view.array("PARAMS").view(np.uint32)]

    @property
    def loss(self) -> np.ndarray:
        """The loss ring: the loss of step t at index t mod 256."""
        return self.view["LOSS"]

    @property
    def last_loss(self) -> np.float32:
        v = self.view
        return v["LOSS"][(v.next_step - 1) % 256]

    @property
    def digest(self) -> str:
        return self.view.digest()

    def to_json(self) -> dict[str, Any]:
        return {
            "system": self.system,
            "params": self.params_hex,
            "digest": self.digest,
            "trace_digest": self.trace_digest,
            "counters": dict(self.counters),
        }


@dataclass(frozen=True)
class RunResult:
    """A run: every system's result; the single-system fields read system 0.

    ``seconds`` times the steps alone; ``first_call_seconds`` is what loading (or compiling) the
    step loop took before them, kept out of ``seconds`` and ``steps_per_second``."""

    steps: int
    systems: tuple[SystemResult, ...]
    seconds: float
    first_call_seconds: float = 0.0

    @property
    def steps_per_second(self) -> float:
        return self.steps / self.seconds if self.seconds > 0 else float("inf")

    def __getattr__(self, name: str) -> Any:
        # params, loss, page, view, counters, digest, trace_digest, trace of system 0
        if name in ("params", "params_hex", "loss", "last_loss", "page", "view", "counters", "digest", "trace_digest", "trace"):
            return getattr(self.systems[0], name)
        raise AttributeError(name)

    def to_json(self) -> dict[str, Any]:
        return {"steps": self.steps, "systems": [s.to_json() for s in self.systems]}


class RunInterrupted(Exception):
    """Ctrl-C during a run: ``result`` holds every system as of the last completed task."""

    def __init__(self, result: RunResult) -> None:
        super().__init__(f"interrupted after {result.steps} steps")
        self.result = result


@contextmanager
def deferred_interrupt() -> Iterator[Callable[[], bool]]:
    """Hold SIGINT until a task boundary: yields ``requested()``; a no-op off the main thread."""
    if threading.current_thread() is not threading.main_thread():
        yield lambda: False
        return
    hit: list[bool] = []
    previous = signal.signal(signal.SIGINT, lambda *_: hit.append(True))
    try:
        yield lambda: bool(hit)
    finally:
        signal.signal(signal.SIGINT, previous)


def system_result(system: int, ctx: Context) -> SystemResult:
    trace = ctx.trace
    return SystemResult(
        system=system,
        page=ctx.view.tobytes(),
        counters=ctx.counter_dict(),
        trace_digest=trace.hexdigest() if trace is not None else "",
        trace=trace.words if trace is not None and trace.keeps else None,
    )


def progress_bar(total: int, enabled: bool) -> Any:
    """A tqdm bar on stderr, or None."""
    if not enabled:
        return None
    from tqdm import tqdm

    return tqdm(total=total, unit="step", unit_scale=True, mininterval=0.25, smoothing=0.1, leave=False)


def train(
    steps: int | None = None,
    *,
    steps_per_task: int | None = None,
    set_lr: Mapping[int, int] | list[tuple[int, int]] | None = None,
    step_base: int | None = None,
    view_in: bytes | None = None,
    z: bool = True,
    keep_trace: bool = False,
    progress: bool = False,
    systems: int | None = None,
    backend: str = "threads",
    timeout_ms: float = 1000.0,
    stalls: Sequence[Sequence[int]] = (),
    give_up_s: float = 60.0,
    checkpoint: str | os.PathLike[str] | None = None,
    checkpoint_every_s: float = 5.0,
    resume: str | os.PathLike[str] | None = None,
) -> RunResult:
    """Run the train program; returns a :class:`RunResult` (``steps``: 4096 unless given).

    Without ``systems``: one system without a group.  ``steps_per_task`` overrides the page's
    STEPS_PER_TASK, ``set_lr`` maps a step of this run to the f32 bits SET_LR writes before the
    task starting there, ``step_base`` sets the page's next step after init, ``view_in`` starts
    from a saved page instead of init (INITS stays 0).  ``z=False`` is plain IEEE float32, for
    comparisons only.  ``keep_trace`` keeps the applied sums as ``result.trace``.

    With ``systems=N`` (1 to 64): a cluster in lockstep (``result.systems[k]`` is system k) on
    ``backend`` "threads", "processes" or "fused"; ``timeout_ms`` bounds a round's wait,
    ``stalls`` holds ``(system, task call, ms)`` faults to inject, ``give_up_s`` bounds the time
    a member may go without completing a step (:class:`ClusterError`).  ``checkpoint`` is a file
    written every ``checkpoint_every_s`` at a common task boundary, on Ctrl-C and at the end;
    ``resume`` continues the run such a file holds (see :mod:`meshnb.cluster`).

    ``backend="mpi"``, in every rank of an MPI job (``mpiexec -n N``): one system per rank,
    ``systems`` optional (the job's size); every rank gets every system's result, rank 0 writes
    the checkpoint (see :mod:`meshnb.mpi`).

    Raises :class:`RunInterrupted` on Ctrl-C, with the state so far."""
    if systems is not None or resume is not None or backend == "mpi":  # mpi: N is the MPI job's size
        options = dict(
            systems=systems, timeout_ms=timeout_ms, stalls=stalls, give_up_s=give_up_s, checkpoint=checkpoint,
            checkpoint_every_s=checkpoint_every_s, resume=resume, steps_per_task=steps_per_task, set_lr=set_lr,
            step_base=step_base, view_in=view_in, z=z, keep_trace=keep_trace, progress=progress,
        )
        if backend == "mpi":  # one system per MPI rank, across machines: meshnb.mpi drives this rank's member
            from . import mpi

            return mpi.train(steps, **options)
        from . import cluster  # the cluster machinery imports this module

        return cluster.train(steps, backend=backend, **options)
    if checkpoint is not None or stalls or backend != "threads":
        raise ValueError("backends, stalls and checkpoints are for clusters: give systems=N")
    plan = Plan.make(4096 if steps is None else steps, steps_per_task, set_lr, step_base)
    ctx = Context(View(), trace=Trace(keep=keep_trace), z=z)
    prepare(ctx, plan, view_in)
    first_call = loops.warm_up(loops.loop_mode(z))
    bar = progress_bar(plan.steps, progress)
    last = 0

    def on_task(done: int) -> None:
        nonlocal last
        bar.update(done - last)
        last = done

    start = time.perf_counter()
    try:
        with deferred_interrupt() as requested:
            done = drive(ctx, plan, on_task if bar is not None else None, requested)
    finally:
        if bar is not None:
            bar.close()
    result = RunResult(done, (system_result(0, ctx),), time.perf_counter() - start, first_call)
    if done < plan.steps:
        raise RunInterrupted(result)
    return result
