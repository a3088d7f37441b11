"""The ``threads`` and ``processes`` backends: N members in lockstep on this machine.

The caller's thread runs the driver (:func:`meshnb.host.train_run`) with :class:`Lockstep` as its
engine: the members (:mod:`.members`) run on the pages in cluster memory from one task boundary to
the next, where they pause with no round pending (the bar, a checkpoint, a stop).  Every wait is
bounded (docs/guide/clusters.md); a member that dies aborts the exchange page, which ends every wait."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from ..cpu import pins_members
from ..host import Checkpoints, Snapshot, checkpoints_of, member_contexts, train_run, warm_up
from ..interrupts import phase
from ..options import Plan, RunOptions, Start, resolve
from ..results import ClusterError, RunResult, SystemResult
from ..sha256 import Sha256
from .members import MemberOutcome, Members, MemberSpec, ProcessMembers, ThreadMembers, refuse_unguarded_main
from .memory import FINISHED, PAUSED, RUNNING, ClusterMemory, SharedSegment, memory_bytes

CHUNK_S = 0.25  # seconds of steps between the members' pauses: the bar's refresh, a stop's delay
POLL_S = 0.05  # the longest wait for news (a member's state changed) before the watchdog looks


@dataclass(frozen=True)
class _Run:
    """A cluster run as its engine sees it: this call's part of the run, its members, its checkpoints."""

    plan: Plan  # this call's part of the run
    spec: MemberSpec
    checkpoints: Checkpoints


def snapshot(memory: ClusterMemory) -> Snapshot:
    """Every member's state in cluster memory (the members paused at a boundary, or finished)."""
    return Snapshot.of(memory.n, lambda k: (memory.views[k].tobytes(), memory.counter_dict(k), memory.trace_state(k)))


class Lockstep:
    """The engine of the ``threads`` and ``processes`` backends: N members in lockstep, run by the
    chunk and paused at its end (:func:`meshnb.driver.drive` does the rest)."""

    def __init__(self, run: _Run, memory: ClusterMemory, shared: SharedSegment | None) -> None:
        self.run, self.memory, self.shared = run, memory, shared
        self.members: Members | None = None
        self.started = False
        self.spt = max(1, memory.view(0).word("STEPS_PER_TASK"))
        self.chunk = self.spt  # the first chunk is a task: the rate is measured from it
        every = run.checkpoints.every_s if run.checkpoints.path is not None else math.inf
        self.chunk_s = min(CHUNK_S, every)

    def _members(self) -> Members:
        assert self.members is not None, "the members start in warm_up"
        return self.members

    def warm_up(self) -> None:
        """Load the grouped step's kernels, start the members and wait until every one is ready."""
        spec, memory = self.run.spec, self.memory
        if self.shared is None:  # threads: this process's kernels are the members'
            warm_up(spec.z)
        self.members = ThreadMembers(spec, memory) if self.shared is None else ProcessMembers(spec, self.shared, memory)
        control, since = self.members.control, time.monotonic()
        while not control.all_in(RUNNING):
            self.members.poll(POLL_S)
            if time.monotonic() - since > spec.give_up_s:
                raise ClusterError(control.laggards(RUNNING)[0], f"did not start within {spec.give_up_s:g} s")
        self.members.started()

    def next_end(self, done: int, steps: int) -> int:
        """The driver's next boundary: a chunk of whole tasks on (sooner at an LR change, the end)."""
        return self.run.plan.next_boundary(self.chunk, done)

    def advance(self, done: int, n: int) -> None:
        """Let the members run from the boundary ``done`` to ``done + n`` and wait until they pause there
        (or finish, at the run's end)."""
        control, end = self._members().control, done + n
        pause = end < self.run.plan.steps
        began = time.monotonic()
        if self.started:
            control.go_on(end if pause else 0)
        else:
            control.start(end if pause else 0)
            phase("running")  # test hook: the members' lockstep has started
            self.started = True
        self._wait((lambda: control.paused_at(end)) if pause else (lambda: control.all_in(FINISHED)), end)
        # The next chunk: CHUNK_S seconds at the rate measured, growing at most 4x a chunk.
        rate = n / max(time.monotonic() - began, 1e-6)
        tasks = min(4 * (self.chunk // self.spt), int(rate * self.chunk_s) // self.spt)
        self.chunk = self.spt * max(1, tasks)

    def end(self, done: int) -> list[MemberOutcome]:
        """The members' end at the boundary ``done`` (the run's, or a stop's); their outcomes."""
        control = self._members().control
        if not self.started:
            control.start(0, stop=True)
            self.started = True
        elif not control.all_in(FINISHED):
            control.go_on(0, stop=True)
        self._wait(lambda: control.all_in(FINISHED), done)
        return self._members().outcomes()

    def close(self) -> None:
        """Join (or kill) the members, however the run ended."""
        if self.members is not None:
            self.members.close()

    def _wait(self, arrived: Callable[[], bool], end: int) -> None:
        """Wait for ``arrived()``: raise a member's failure at once; give up a cluster whose round counters
        do not move."""
        members, memory, spec = self._members(), self.memory, self.run.spec
        give_up, rounds, moved = spec.give_up_s, memory.exchange.counters.copy(), time.monotonic()
        while not arrived():
            members.poll(POLL_S)
            now = time.monotonic()
            if (memory.exchange.counters != rounds).any():
                rounds, moved = memory.exchange.counters.copy(), now
            elif (memory.state == PAUSED).any() and now - moved > give_up + spec.timeout_s:
                laggard = members.control.laggards(PAUSED)[0]
                raise ClusterError(laggard, f"did not reach the pause at step {end} within {give_up:g} s")
            elif now - moved > 2 * give_up + spec.timeout_s:
                low = int(np.argmin(rounds))
                raise ClusterError(
                    low, f"no round completed in {now - moved:.3g} s (this system is at round {rounds[low]})"
                )


def _results(memory: ClusterMemory, outcomes: Sequence[MemberOutcome]) -> tuple[SystemResult, ...]:
    return tuple(
        SystemResult(k, memory.views[k].tobytes(), memory.counter_dict(k), o.trace_digest, o.trace)
        for k, o in enumerate(outcomes)
    )


def _drive(run: _Run, memory: ClusterMemory, shared: SharedSegment | None, progress: bool) -> RunResult:
    """The run on the driver, :class:`Lockstep` its engine (the members' start-up is its warm-up,
    outside the steps' seconds)."""
    engine = Lockstep(run, memory, shared)
    try:
        return train_run(
            engine, run.plan.steps, engine.next_end, lambda done: _results(memory, engine.end(done)),
            progress=progress, checkpoints=run.checkpoints, snapshot=lambda: snapshot(memory),
        )  # fmt: skip
    finally:
        engine.close()


def run_threads(opts: RunOptions) -> RunResult:
    """The ``threads`` backend: members are threads of this process."""
    return _run(opts, processes=False)


def run_processes(opts: RunOptions) -> RunResult:
    """The ``processes`` backend: a process per member, every page in one shared memory segment."""
    return _run(opts, processes=True)


def _run(opts: RunOptions, processes: bool) -> RunResult:
    pins_members()  # junk in MESHNB_PIN_MEMBERS: one line here, before any member starts
    if processes:
        refuse_unguarded_main()
    start = resolve(opts)
    shared = SharedSegment(memory_bytes(start.systems)) if processes else None
    try:
        # No view of the segment is left here: it can be released once the run returns.
        return _drive(*_prepared(opts, start, shared), shared, opts.progress)
    finally:
        if shared is not None:
            shared.release()


def _prepared(opts: RunOptions, start: Start, shared: SharedSegment | None) -> tuple[_Run, ClusterMemory]:
    """Every member's page, counters and trace state in cluster memory, and the run."""
    n = start.systems
    memory = ClusterMemory(shared.array() if shared else np.zeros(memory_bytes(n), dtype=np.uint8), n, create=True)
    member_contexts(start, opts.view_in, memory.view, memory.counters)
    for k in range(n):
        memory.save_trace_state(k, start.checkpoint.traces[k] if start.checkpoint else Sha256().state())
    spec = MemberSpec(
        n, start.plan, start.z, opts.timeout_ms / 1000, opts.stalls, opts.give_up_s, opts.keep_trace,
        resumable=opts.checkpoint is not None or start.checkpoint is not None,
    )  # fmt: skip
    checkpoints = checkpoints_of(opts, start, memory.view(0).next_step)
    return _Run(start.plan, spec, checkpoints), memory
