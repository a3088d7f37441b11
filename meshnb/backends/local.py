"""The ``threads`` and ``processes`` backends: N members in lockstep on this machine.

The caller's thread coordinates: it prepares every member's page in cluster memory (``init``, or
a checkpoint's pages), starts the members together, watches them, and when a checkpoint is due
or Ctrl-C asks for a stop, names a task boundary that no member has passed (``TARGET``, under a
lock every member takes at its boundaries); the members pause there with no round pending, and
the coordinator writes the checkpoint and lets them go on (or stop).

Bounds, so that nothing hangs: a round waits ``timeout_ms`` and the program leaves it pending; a
member that completes no step for ``give_up_s`` stops with :class:`~meshnb.results.ClusterError`
(naming the systems that did not reach the round); every other wait (the start, a pause, the
lock, the join at the end) is bounded by ``give_up_s`` too, and the coordinator stops a cluster
whose round counters have not moved for twice that (every member frozen).  A member process
that dies is seen at once (its sentinel): the exchange page is aborted, which ends every wait,
the others are joined, killed if they linger, and the shared memory is released (a ``memfd`` on Linux,
unlinked elsewhere).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..driver import Cadence, Frame, frame
from ..exchange import Group
from ..host import Checkpoints, Snapshot, end_run, prepare_member
from ..interrupts import phase
from ..options import Plan, RunOptions, resolve
from ..program import Context
from ..results import ClusterError, RunResult, SystemResult
from ..sha256 import Sha256
from .members import MemberOutcome, Members, MemberSpec, ProcessMembers, ThreadMembers, refuse_unguarded_main
from .memory import FINISHED, PAUSED, RUNNING, ClusterMemory, SharedSegment, memory_bytes


@dataclass(frozen=True)
class _Run:
    """A cluster run as the coordinator sees it: this call's part of the run, its members, its
    checkpoints."""

    plan: Plan  # this call's part of the run
    spec: MemberSpec
    checkpoints: Checkpoints
    progress: bool


def _snapshot(memory: ClusterMemory) -> Snapshot:
    """Every member's state in cluster memory (the members paused at a boundary, or finished)."""
    n = memory.n
    return Snapshot(
        tuple(memory.views[k].tobytes() for k in range(n)),
        tuple(memory.counter_dict(k) for k in range(n)),
        tuple(memory.trace_state(k) for k in range(n)),
    )


def _coordinate(run: _Run, members: Members, memory: ClusterMemory, f: Frame) -> tuple[int, list[MemberOutcome]]:
    """Start the members together, serve checkpoints and a stop (the driver's frame ``f``: its
    bar, its stop request, its timer from the start, members ready, to the end); returns the
    steps done and the outcomes."""
    control, plan, give_up = members.control, run.plan, run.spec.give_up_s
    spt = memory.view(0).word("STEPS_PER_TASK")
    since = time.monotonic()
    while not control.all_in(RUNNING):
        members.poll(0.02)
        if time.monotonic() - since > give_up:
            raise ClusterError(control.laggards(RUNNING)[0], f"did not start within {give_up:g} s")
    members.started()
    control.start()
    phase("running")
    f.start()
    target: int | None = None
    stop = stopping = False
    cadence = run.checkpoints.cadence()
    # The watchdog of last resort (say, every member stopped by SIGSTOP): the round counters.
    rounds, moved = memory.exchange.counters.copy(), time.monotonic()
    while not control.all_in(FINISHED):
        members.poll(0.05)
        now = time.monotonic()
        if (memory.exchange.counters != rounds).any():
            rounds, moved = memory.exchange.counters.copy(), now
        elif target is None and now - moved > 2 * give_up + run.spec.timeout_s:
            low = int(np.argmin(rounds))
            raise ClusterError(
                low, f"no round completed in {now - moved:.3g} s (this system is at round {rounds[low]})"
            )
        f.show(int(memory.progress.min()))
        if target is None and not stopping:
            stop = f.requested()
            if stop or cadence.due():
                target = control.request(plan, spt, stop)
                since = now
                if target is None:  # the run's end comes first: it is the stop and the checkpoint
                    stopping, cadence = stop, Cadence()
                    if stop:
                        f.requested.declined()  # the run ends all the same: the Ctrl-C is the caller's
        elif target is not None and control.paused_at(target):
            run.checkpoints.save(target, _snapshot(memory))
            control.go_on()
            target, stopping = None, stop
            cadence.restart()
        elif target is not None and now - since > give_up + run.spec.timeout_s:
            raise ClusterError(
                control.laggards(PAUSED)[0], f"did not reach the pause at step {target} within {give_up:g} s"
            )
    done = int(memory.progress.min())
    f.stop()
    return done, members.outcomes()


def _results(memory: ClusterMemory, outcomes: Sequence[MemberOutcome]) -> tuple[SystemResult, ...]:
    return tuple(
        SystemResult(k, memory.views[k].tobytes(), memory.counter_dict(k), o.trace_digest, o.trace)
        for k, o in enumerate(outcomes)
    )


def _run_members(
    run: _Run, memory: ClusterMemory, shared: SharedSegment | None
) -> tuple[int, tuple[SystemResult, ...], float]:
    members: Members
    with frame(run.plan.steps, run.progress) as f:
        members = ThreadMembers(run.spec, memory) if shared is None else ProcessMembers(run.spec, shared, memory)
        try:
            done, outcomes = _coordinate(run, members, memory, f)
        finally:
            members.close()
    return done, _results(memory, outcomes), f.stop()


def run_threads(opts: RunOptions) -> RunResult:
    """The ``threads`` backend: members are threads of this process."""
    return _run(opts, processes=False)


def run_processes(opts: RunOptions) -> RunResult:
    """The ``processes`` backend: a process per member, every page in one shared memory segment."""
    return _run(opts, processes=True)


def _run(opts: RunOptions, processes: bool) -> RunResult:
    if processes:
        refuse_unguarded_main()
    start = resolve(opts)
    n = start.systems
    shared = SharedSegment(memory_bytes(n)) if processes else None
    try:
        memory = ClusterMemory(shared.array() if shared else np.zeros(memory_bytes(n), dtype=np.uint8), n, create=True)
        for k in range(n):
            ctx = Context(memory.view(k), counters=memory.counters[k], group=Group(k, n), z=start.z)
            prepare_member(ctx, k, start, opts.view_in)
            memory.save_trace_state(k, start.checkpoint.traces[k] if start.checkpoint else Sha256().state())
        spec = MemberSpec(
            n,
            start.plan,
            start.z,
            opts.timeout_ms / 1000,
            opts.stalls,
            opts.give_up_s,
            opts.keep_trace,
            resumable=opts.checkpoint is not None or start.checkpoint is not None,
        )
        checkpoints = Checkpoints(
            opts.checkpoint, start.settings(memory.view(0).next_step), start.done_before, opts.checkpoint_every_s
        )
        run = _Run(start.plan, spec, checkpoints, opts.progress)
        # The seconds of the lockstep itself: not the pages' preparation nor the members' start-up.
        done, results, seconds = _run_members(run, memory, shared)
        result = RunResult(done, results, seconds, steps_before=start.done_before)
        # A stop's checkpoint was written at its pause; the end's is written from this snapshot.
        last = _snapshot(memory) if done == start.plan.steps and opts.checkpoint is not None else None
        del memory  # no view of the segment left: it can be released
    finally:
        if shared is not None:
            shared.release()
    return end_run(result, start.plan.steps, (lambda: checkpoints.save(done, last)) if last is not None else None)
