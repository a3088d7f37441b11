"""Clusters (SPEC 8-10): N systems in lockstep on one machine.

A backend runs N members; each member is one system doing :func:`meshnb.host.drive` over an
:class:`~meshnb.exchange.Exchange`, so the program's grouped task loop (publish, round, fold,
apply; a timed-out round left pending and resumed) is what runs:

- ``threads``: N threads of this process, the exchange page in process memory, blocking waits.
- ``processes``: one OS process per system (forkserver start: safe with numba and threads), the
  exchange page and every member's view in one ``multiprocessing.shared_memory`` segment,
  polling waits (a short spin, then sleeps).
- ``fused``: no members at all: :mod:`meshnb.fused` runs the whole cluster in one njit loop.

The caller's thread coordinates (:func:`train`): it prepares every member's page in cluster memory
(``init``, or a checkpoint's pages), starts the members together, watches them, and when a
checkpoint is due or Ctrl-C asks for a stop, names a task boundary that no member has passed
(``TARGET``, under a lock every member takes at its boundaries); the members pause there with no
round pending, and the coordinator writes the checkpoint and lets them go on (or stop).

Bounds, so that nothing hangs: a round waits ``timeout_ms`` and the program leaves it pending; a
member that completes no step for ``give_up_s`` stops with :class:`~meshnb.host.ClusterError`
(naming the systems that did not publish); every other wait (the start, a pause, the lock, the
join at the end) is bounded by ``give_up_s`` too, and the coordinator stops a cluster whose round
counters have not moved for twice that (every member frozen).  A member process that dies is
seen at once (its sentinel): the exchange page is aborted, which ends every wait, the others are
joined, killed if they linger, and the shared memory is unlinked.  Member processes whose
coordinator dies see their pipe close and exit.
"""

from __future__ import annotations

import math
import multiprocessing
import multiprocessing.connection
import os
import secrets
import signal
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from multiprocessing.shared_memory import SharedMemory
from typing import Any, Protocol

import numpy as np

from . import checkpoint as ckpt_io
from . import fused, loops
from .checkpoint import Checkpoint, CheckpointError, RunSettings
from .sha256 import Sha256, Sha256State
from .exchange import (
    BlockingWaiter, ExchangeAborted, ExchangePage, Group, PageExchange, PageField, PollingWaiter, Waiter,
    exchange_bytes, field_array,
)
from .host import (
    ClusterError, Plan, RunInterrupted, RunResult, SystemResult, check_page, deferred_interrupt, drive,
    next_boundary, prepare, progress_bar,
)
from .program import COUNTER_NAMES, Context, Trace
from .view import VIEW_BYTES, View

BACKENDS = ("threads", "processes", "fused")
MAX_SYSTEMS = 64

# ---------------------------------------------------------------------------------------------
# Cluster memory: the exchange page, then the control block, then one block per member.
# ---------------------------------------------------------------------------------------------

CONTROL_LAYOUT: tuple[PageField, ...] = (
    PageField("GO", "page", 0, "u32", 1, "1 once every member is ready: they start together"),
    PageField("STOP", "page", 4, "u32", 1, "1: the members stop at TARGET instead of pausing"),
    PageField("RELEASE", "page", 8, "u32", 1, "bumped to let the members paused at TARGET go on"),
    PageField("TARGET", "page", 16, "u64", 1, "the task boundary where every member pauses (0: none)"),
    PageField("VIEW", "system", 0, "u8", VIEW_BYTES, "the system's view page"),
    PageField("COUNTERS", "system", 4096, "u64", 3, "INITS, STEPS, TIMEOUTS"),
    PageField("STATE", "system", 4120, "u32", 1, "0 starting, 1 running, 2 paused at TARGET, 3 finished"),
    PageField("PROGRESS", "system", 4128, "u64", 1, "the last task boundary passed (steps of this call)"),
    PageField("TRACE_LENGTH", "system", 4136, "u64", 1, "trace bytes hashed (runs that checkpoint)"),
    PageField("TRACE_H", "system", 4144, "u32", 8, "the trace hash's chaining value"),
    PageField("TRACE_TAIL", "system", 4176, "u8", 64, "trace bytes after the last whole block"),
)
CONTROL_BYTES = 64
MEMBER_BYTES = 4352
STARTING, RUNNING, PAUSED, FINISHED = 0, 1, 2, 3


def memory_bytes(n: int) -> int:
    return exchange_bytes(n) + CONTROL_BYTES + n * MEMBER_BYTES


class ClusterMemory:
    """Live arrays over one buffer (process memory or shared memory) laid out as above."""

    def __init__(self, raw: np.ndarray, n: int, create: bool = False) -> None:
        self.n = n
        self.exchange = ExchangePage(raw, n, create)
        start = exchange_bytes(n)
        members = start + CONTROL_BYTES
        a: dict[str, np.ndarray] = {}
        for f in CONTROL_LAYOUT:
            a[f.name] = (field_array(raw, start, 0, 1, f) if f.scope == "page"
                         else field_array(raw, members, MEMBER_BYTES, n, f))
        self.go, self.stop, self.release, self.target = a["GO"], a["STOP"], a["RELEASE"], a["TARGET"]
        self.views, self.counters, self.state, self.progress = a["VIEW"], a["COUNTERS"], a["STATE"], a["PROGRESS"]
        self._trace_length, self._trace_h, self._trace_tail = a["TRACE_LENGTH"], a["TRACE_H"], a["TRACE_TAIL"]
        if create:
            raw[start : memory_bytes(n)] = 0

    def view(self, k: int) -> View:
        return View(self.views[k])

    def trace_state(self, k: int) -> Sha256State:
        length = int(self._trace_length[k])
        return Sha256State(tuple(int(x) for x in self._trace_h[k]), length, self._trace_tail[k, : length % 64].tobytes())

    def save_trace_state(self, k: int, s: Sha256State) -> None:
        self._trace_h[k] = s.h
        self._trace_tail[k, : len(s.tail)] = np.frombuffer(s.tail, dtype=np.uint8)
        self._trace_length[k] = s.length

    def counter_dict(self, k: int) -> dict[str, int]:
        return {name: int(c) for name, c in zip(COUNTER_NAMES, self.counters[k])}


# ---------------------------------------------------------------------------------------------
# Meeting points: the start, pauses at a common task boundary, the end
# ---------------------------------------------------------------------------------------------

class Lock(Protocol):
    def acquire(self, block: bool = ..., timeout: float = ...) -> bool: ...
    def release(self) -> None: ...


class Control:
    """The members' and the coordinator's side of the meeting points, in cluster memory.

    ``waiter`` is how members wait (and the coordinator wakes them); ``wake`` tells the
    coordinator a member's state changed; ``alive`` says whether the coordinator still runs."""

    def __init__(self, memory: ClusterMemory, lock: Lock, waiter: Waiter, give_up_s: float,
                 wake: Callable[[], None] = lambda: None, alive: Callable[[], bool] = lambda: True) -> None:
        self.m, self.lock, self.waiter, self.give_up_s, self.wake, self.alive = memory, lock, waiter, give_up_s, wake, alive

    @contextmanager
    def _locked(self, system: int | None) -> Iterator[None]:
        if not self.lock.acquire(True, self.give_up_s):
            raise ClusterError(system, f"the cluster's lock was held for {self.give_up_s:g} s (its holder died?)")
        try:
            yield
        finally:
            self.lock.release()

    def _wait(self, k: int, ready: Callable[[], bool], what: str) -> None:
        m = self.m
        if not self.waiter.wait(lambda: ready() or m.exchange.aborted or not self.alive(), self.give_up_s):
            raise ClusterError(k, f"waited {self.give_up_s:g} s for {what}")
        self.check(k)

    # The members' side.
    def check(self, k: int) -> None:
        """End this member if the run is being torn down."""
        if self.m.exchange.aborted:
            raise ExchangeAborted(f"system {k}: the run was aborted")
        if not self.alive():
            raise ExchangeAborted(f"system {k}: the coordinator is gone")

    def ready(self, k: int) -> None:
        self.m.state[k] = RUNNING
        self.wake()
        self._wait(k, lambda: bool(self.m.go[0]), "the other members to start")

    def at_boundary(self, k: int, done: int, save: Callable[[], None]) -> bool:
        """A member passed a task boundary with no round pending; returns True to stop there."""
        m = self.m
        with self._locked(k):
            m.progress[k] = done
            paused = int(m.target[0]) == done
        if not paused:
            return False
        released = int(m.release[0])  # before saying PAUSED: the release may come at once
        save()
        m.state[k] = PAUSED
        self.wake()
        self._wait(k, lambda: int(m.release[0]) != released, f"the pause at step {done} to end")
        m.state[k] = RUNNING
        return bool(m.stop[0])

    def finish(self, k: int, done: int, save: Callable[[], None]) -> None:
        save()
        self.m.progress[k] = done
        self.m.state[k] = FINISHED
        self.wake()

    # The coordinator's side.
    def all_in(self, state: int) -> bool:
        return bool((self.m.state == state).all())

    def start(self) -> None:
        self.m.go[0] = 1
        self.waiter.notify()

    def request(self, plan: Plan, spt: int, stop: bool) -> int | None:
        """Ask every member to pause at the first boundary none of them has passed; returns it, or
        None when that is the run's end (which needs no pause)."""
        m = self.m
        with self._locked(None):
            target = max(next_boundary(plan, spt, int(p)) for p in m.progress)
            if target >= plan.steps:
                return None
            m.stop[0] = int(stop)
            m.target[0] = target
        return target

    def paused_at(self, target: int) -> bool:
        return self.all_in(PAUSED) and bool((self.m.progress == target).all())

    def go_on(self) -> None:
        with self._locked(None):
            self.m.target[0] = 0
            self.m.release[0] += 1
        self.waiter.notify()

    def laggards(self, state: int) -> list[int]:
        return [k for k in range(self.m.n) if int(self.m.state[k]) != state]


# ---------------------------------------------------------------------------------------------
# One member
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class MemberSpec:
    """What every member needs (picklable: it goes to member processes)."""

    systems: int
    plan: Plan  # the steps of this call (the rest of the run when resuming)
    z: bool
    timeout_s: float
    stalls: tuple[tuple[int, int, int], ...]
    give_up_s: float
    keep_trace: bool
    resumable: bool  # hash the trace with sha256.Sha256, whose state is saved


@dataclass(frozen=True)
class MemberOutcome:
    trace_digest: str
    trace: np.ndarray | None


def run_member(k: int, spec: MemberSpec, memory: ClusterMemory, exchange: PageExchange, control: Control) -> MemberOutcome:
    """System ``k``: its page is already in ``memory``; drive it to the plan's end in lockstep."""
    hasher = Sha256(memory.trace_state(k)) if spec.resumable else None
    ctx = Context(memory.view(k), counters=memory.counters[k], group=Group(k, spec.systems), exchange=exchange,
                  trace=Trace(spec.keep_trace, hasher), z=spec.z)
    assert ctx.trace is not None
    naps = {call: ms / 1000 for system, call, ms in spec.stalls if system == k}
    stop = False

    def save() -> None:
        if spec.resumable:
            memory.save_trace_state(k, ctx.trace.hasher.state())

    def on_task(done: int) -> None:
        nonlocal stop
        control.check(k)
        if ctx.view.word("ERR") == 0:  # the task reached its planned boundary: no round pending
            stop = control.at_boundary(k, done, save)

    def before_task(call: int) -> None:
        if call in naps:
            time.sleep(naps[call])

    control.ready(k)
    try:
        done = drive(ctx, spec.plan, on_task, lambda: stop, before_task, spec.give_up_s)
    except ClusterError as e:
        if not ctx.view.word("PENDING"):
            raise
        late = (ctx.view.next_step + 1) % (1 << 64)  # the pending round: name who did not publish it
        behind = [str(m) for m in exchange.page.behind(late) if m != k]
        who = f", not published by system{'s' * (len(behind) > 1)} {', '.join(behind)}" if behind else ""
        raise ClusterError(k, f"{e.detail}; waiting for round {late}{who}") from None
    control.finish(k, done, save)
    return MemberOutcome(ctx.trace.hexdigest(), ctx.trace.words if spec.keep_trace else None)


# ---------------------------------------------------------------------------------------------
# Backends that run members
# ---------------------------------------------------------------------------------------------

class Members(Protocol):
    """N running members, as the coordinator sees them."""

    control: Control

    def poll(self, timeout_s: float) -> None:
        """Wait up to ``timeout_s`` for news; raise :class:`ClusterError` if a member failed or died."""

    def outcomes(self) -> list[MemberOutcome]:
        """Every member's outcome, once all are FINISHED (waiting, bounded, for it to arrive)."""

    def close(self) -> None:
        """End the members (abort the page if they still run), bounded; release what they hold."""


class ThreadMembers:
    """The ``threads`` backend: members are threads; waits block on one condition variable."""

    def __init__(self, spec: MemberSpec, memory: ClusterMemory) -> None:
        self.spec, self.memory = spec, memory
        self._news = threading.Event()
        waiter = BlockingWaiter()
        self.control = Control(memory, threading.Lock(), waiter, spec.give_up_s, wake=self._news.set)
        self._outcomes: list[MemberOutcome | None] = [None] * spec.systems
        self._errors: list[ClusterError] = []
        self._threads = [
            threading.Thread(target=self._member, args=(k, PageExchange(memory.exchange, k, spec.timeout_s, waiter)),
                             name=f"meshnb-system-{k}", daemon=True)
            for k in range(spec.systems)
        ]
        for t in self._threads:
            t.start()

    def _member(self, k: int, exchange: PageExchange) -> None:
        try:
            self._outcomes[k] = run_member(k, self.spec, self.memory, exchange, self.control)
        except ExchangeAborted:
            pass  # another member's failure is the news
        except ClusterError as e:
            self._fail(e)
        except BaseException as e:  # noqa: BLE001 - reported by the coordinator
            self._fail(ClusterError(k, f"{type(e).__name__}: {e}"))

    def _fail(self, e: ClusterError) -> None:
        self._errors.append(e)
        self.memory.exchange.abort()
        self.control.waiter.notify()
        self._news.set()

    def poll(self, timeout_s: float) -> None:
        self._news.wait(timeout_s)
        self._news.clear()
        if self._errors:
            raise self._errors[0]

    def outcomes(self) -> list[MemberOutcome]:
        deadline = time.monotonic() + self.spec.give_up_s
        for t in self._threads:  # a FINISHED member returns its outcome right after
            t.join(max(0.0, deadline - time.monotonic()))
        if self._errors:
            raise self._errors[0]
        missing = [k for k, o in enumerate(self._outcomes) if o is None]
        if missing:
            raise ClusterError(missing[0], f"finished but gave no outcome within {self.spec.give_up_s:g} s")
        return [o for o in self._outcomes if o is not None]

    def close(self) -> None:
        if any(t.is_alive() for t in self._threads):
            self.memory.exchange.abort()
            self.control.waiter.notify()
        deadline = time.monotonic() + min(self.spec.give_up_s, 5.0)
        for t in self._threads:  # a thread cannot be killed: one still asleep in a stall is left behind
            t.join(max(0.0, deadline - time.monotonic()))


def _mp_context() -> Any:
    """forkserver where there is one (a fork of a clean server: safe with numba and threads,
    and members start with meshnb imported), else spawn."""
    if "forkserver" in multiprocessing.get_all_start_methods():
        ctx = multiprocessing.get_context("forkserver")
        ctx.set_forkserver_preload(["meshnb._preload"])
        return ctx
    return multiprocessing.get_context("spawn")


class _Shared:
    """A shared memory segment the coordinator creates, and unlinks however the run ends."""

    def __init__(self, size: int) -> None:
        self.shm = SharedMemory(name=f"meshnb_{os.getpid()}_{secrets.token_hex(6)}", create=True, size=size)
        self.name = self.shm.name

    def array(self) -> np.ndarray:
        return np.frombuffer(self.shm.buf, dtype=np.uint8)

    def release(self) -> None:
        self.shm.unlink()
        _close(self.shm)


def _close(shm: SharedMemory) -> None:
    """Close a segment even while a numpy view of it lives on (say, in an error's traceback):
    the mapping then goes with the view, and SharedMemory's own ``__del__`` has nothing left to
    close (it would complain about the view)."""
    try:
        shm.close()
    except BufferError:
        shm._buf = shm._mmap = None  # type: ignore[attr-defined]
        shm.close()


def _process_member(k: int, spec: MemberSpec, name: str, conn: Any, lock: Lock) -> None:
    """A member process's main: attach to the segment, run, report through ``conn``."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the coordinator's to handle
    # Attaching registers the name with the resource tracker this process shares with the
    # coordinator; the coordinator's unlink unregisters it (the tracker keeps a set), and if the
    # coordinator is killed, the tracker unlinks the segment once every member has exited.
    shm = SharedMemory(name=name)
    try:
        code = _serve(k, spec, np.frombuffer(shm.buf, dtype=np.uint8), conn, lock)
    finally:
        _close(shm)
    if code:
        raise SystemExit(code)


def _serve(k: int, spec: MemberSpec, raw: np.ndarray, conn: Any, lock: Lock) -> int:
    memory = ClusterMemory(raw, spec.systems)
    waiter = PollingWaiter()
    # The coordinator never writes to this pipe: readable means closed, the coordinator gone.
    control = Control(memory, lock, waiter, spec.give_up_s, alive=lambda: not conn.poll())
    try:
        try:
            conn.send(("done", run_member(k, spec, memory, PageExchange(memory.exchange, k, spec.timeout_s, waiter), control)))
        except ExchangeAborted:
            conn.send(("aborted",))
        except ClusterError as e:
            conn.send(("error", e.system, e.detail))
            return 1
        except Exception as e:  # noqa: BLE001 - reported by the coordinator
            conn.send(("error", k, f"{type(e).__name__}: {e}"))
            return 1
    except (BrokenPipeError, EOFError):
        return 1  # the coordinator is gone
    return 0


def _died(code: int | None) -> str:
    if code is None:
        return "is still running"
    if code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with code {code}"


class ProcessMembers:
    """The ``processes`` backend: a process per member, every page in one shared memory segment."""

    def __init__(self, spec: MemberSpec, shared: _Shared, memory: ClusterMemory) -> None:
        self.spec = spec
        ctx = _mp_context()
        lock = ctx.Lock()
        self.control = Control(memory, lock, PollingWaiter(), spec.give_up_s)
        self._procs: list[Any] = []
        self._conns: list[Any] = []
        self._outcomes: dict[int, MemberOutcome] = {}
        self._reported: set[int] = set()
        for k in range(spec.systems):
            mine, theirs = ctx.Pipe()
            p = ctx.Process(target=_process_member, args=(k, spec, shared.name, theirs, lock),
                            name=f"meshnb-system-{k}", daemon=True)
            p.start()
            theirs.close()
            self._procs.append(p)
            self._conns.append(mine)

    def _read(self, k: int) -> None:
        conn = self._conns[k]
        try:
            while conn.poll():
                msg = conn.recv()
                self._reported.add(k)
                if msg[0] == "done":
                    self._outcomes[k] = msg[1]
                elif msg[0] == "error":
                    raise ClusterError(msg[1], msg[2])
        except (EOFError, OSError):
            pass

    def poll(self, timeout_s: float) -> None:
        waiting = [c for k, c in enumerate(self._conns) if k not in self._reported]
        waiting += [p.sentinel for k, p in enumerate(self._procs) if k not in self._reported]
        multiprocessing.connection.wait(waiting, timeout_s)
        for k, p in enumerate(self._procs):
            if k in self._reported:
                continue
            self._read(k)
            if k not in self._reported and p.exitcode is not None:
                raise ClusterError(k, f"member process (pid {p.pid}) {_died(p.exitcode)}")

    def outcomes(self) -> list[MemberOutcome]:
        deadline = time.monotonic() + self.spec.give_up_s
        while len(self._outcomes) < self.spec.systems:  # a FINISHED member sends its outcome right after
            if time.monotonic() > deadline:
                k = min(set(range(self.spec.systems)) - set(self._outcomes))
                raise ClusterError(k, f"finished but sent no outcome within {self.spec.give_up_s:g} s")
            self.poll(0.05)
        return [self._outcomes[k] for k in range(self.spec.systems)]

    def close(self) -> None:
        if any(p.is_alive() for p in self._procs):
            self.control.m.exchange.abort()
        deadline = time.monotonic() + min(self.spec.give_up_s, 5.0)
        for p in self._procs:
            p.join(max(0.0, deadline - time.monotonic()))
        for p in self._procs:
            if p.is_alive():
                p.kill()
                p.join(5.0)
        for c in self._conns:
            c.close()


# ---------------------------------------------------------------------------------------------
# The coordinator
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class _Run:
    """A cluster run as the coordinator sees it: the whole run, and where this call starts."""

    settings: RunSettings
    plan: Plan  # this call's part of the run
    start: int  # steps of the run done before this call
    spec: MemberSpec
    checkpoint: str | os.PathLike[str] | None
    checkpoint_every_s: float
    progress: bool


def _write_checkpoint(run: _Run, memory: ClusterMemory, done: int) -> None:
    if run.checkpoint is None:
        return
    n = memory.n
    ckpt_io.save(run.checkpoint, Checkpoint(
        run.settings, run.start + done,
        tuple(memory.views[k].tobytes() for k in range(n)),
        tuple(memory.counter_dict(k) for k in range(n)),
        tuple(memory.trace_state(k) for k in range(n)),
    ))


def _coordinate(run: _Run, members: Members, memory: ClusterMemory, requested: Callable[[], bool]) -> tuple[int, list[MemberOutcome], float]:
    """Start the members together, serve checkpoints and a stop; returns the steps done, the
    outcomes, and the seconds from the start (members ready) to the end."""
    control, plan, give_up = members.control, run.plan, run.spec.give_up_s
    spt = memory.view(0).word("STEPS_PER_TASK")
    since = time.monotonic()
    while not control.all_in(RUNNING):
        members.poll(0.02)
        if time.monotonic() - since > give_up:
            raise ClusterError(control.laggards(RUNNING)[0], f"did not start within {give_up:g} s")
    control.start()
    began = time.perf_counter()
    bar = progress_bar(plan.steps, run.progress)
    shown = 0
    target: int | None = None
    stop = stopping = False
    next_ckpt = time.monotonic() + run.checkpoint_every_s if run.checkpoint is not None else math.inf
    # The watchdog of last resort (say, every member stopped by SIGSTOP): the round counters.
    rounds, moved = memory.exchange.counters.copy(), time.monotonic()
    try:
        while not control.all_in(FINISHED):
            members.poll(0.05)
            now = time.monotonic()
            if (memory.exchange.counters != rounds).any():
                rounds, moved = memory.exchange.counters.copy(), now
            elif target is None and now - moved > 2 * give_up + run.spec.timeout_s:
                low = int(np.argmin(rounds))
                raise ClusterError(low, f"no round completed in {now - moved:.3g} s (this system is at round {rounds[low]})")
            if bar is not None:
                low = int(memory.progress.min())
                bar.update(low - shown)
                shown = low
            if target is None and not stopping:
                stop = requested()
                if stop or now >= next_ckpt:
                    target = control.request(plan, spt, stop)
                    since = now
                    if target is None:  # the run's end comes first: it is the stop and the checkpoint
                        stopping, next_ckpt = stop, math.inf
            elif target is not None and control.paused_at(target):
                _write_checkpoint(run, memory, target)
                control.go_on()
                target, stopping = None, stop
                next_ckpt = time.monotonic() + run.checkpoint_every_s if run.checkpoint is not None else math.inf
            elif target is not None and now - since > give_up + run.spec.timeout_s:
                raise ClusterError(control.laggards(PAUSED)[0], f"did not reach the pause at step {target} within {give_up:g} s")
        done = int(memory.progress.min())
        seconds = time.perf_counter() - began
    finally:
        if bar is not None:
            bar.close()
    if done == plan.steps:
        _write_checkpoint(run, memory, done)
    return done, members.outcomes(), seconds


def _results(memory: ClusterMemory, outcomes: Sequence[MemberOutcome]) -> tuple[SystemResult, ...]:
    return tuple(
        SystemResult(k, memory.views[k].tobytes(), memory.counter_dict(k), o.trace_digest, o.trace)
        for k, o in enumerate(outcomes)
    )


def _run_members(run: _Run, memory: ClusterMemory, shared: _Shared | None) -> tuple[int, tuple[SystemResult, ...], float]:
    members: Members
    with deferred_interrupt() as requested:
        members = ThreadMembers(run.spec, memory) if shared is None else ProcessMembers(run.spec, shared, memory)
        try:
            done, outcomes, seconds = _coordinate(run, members, memory, requested)
        finally:
            members.close()
    return done, _results(memory, outcomes), seconds


def _run_fused(run: _Run, memory: ClusterMemory) -> tuple[int, tuple[SystemResult, ...], float]:
    """The fused backend: :func:`meshnb.fused.run` on a contiguous copy of the members' pages.

    Its members apply one fold per step: they have one trace, whose digest each reports."""
    n, spec = memory.n, run.spec
    words = np.stack([memory.views[k] for k in range(n)]).view("<u4")
    states = {memory.trace_state(k) for k in range(n)}
    if len(states) != 1:
        raise ValueError("the members' trace hashes differ: the fused backend runs one trace for all")
    trace = Trace(spec.keep_trace, Sha256(states.pop()) if spec.resumable else None)
    bar = progress_bar(run.plan.steps, run.progress)
    next_ckpt = time.monotonic() + run.checkpoint_every_s

    def sync(done: int) -> None:  # cluster memory as the members' would be
        memory.views[:] = words.view(np.uint8)
        memory.progress[:] = done
        if spec.resumable:
            for k in range(n):
                memory.save_trace_state(k, trace.hasher.state())

    def on_chunk(done: int) -> None:
        nonlocal next_ckpt
        if bar is not None:
            bar.update(done - bar.n)
        if run.checkpoint is not None and time.monotonic() >= next_ckpt and done < run.plan.steps:
            sync(done)
            _write_checkpoint(run, memory, done)
            next_ckpt = time.monotonic() + run.checkpoint_every_s

    loops.warm_up(loops.loop_mode(spec.z), fused=True)  # the first call's JIT stays out of the timing
    began = time.perf_counter()
    try:
        with deferred_interrupt() as requested:
            done = fused.run(words, memory.counters, trace, run.plan, spec.z, requested, on_chunk)
    finally:
        if bar is not None:
            bar.close()
    seconds = time.perf_counter() - began
    sync(done)
    _write_checkpoint(run, memory, done)  # the end, or the stop: both are task boundaries
    outcome = MemberOutcome(trace.hexdigest(), trace.words if spec.keep_trace else None)
    return done, _results(memory, [outcome] * n), seconds


# ---------------------------------------------------------------------------------------------
# The entry point
# ---------------------------------------------------------------------------------------------

def _number(x: Any, what: str, low: float) -> float:
    if isinstance(x, bool) or not isinstance(x, (int, float, np.integer, np.floating)) or not math.isfinite(x) or x <= low:
        raise ValueError(f"{what} must be a number above {low:g}, got {x!r}")
    return float(x)


def _stalls(stalls: Sequence[Sequence[int]], n: int) -> tuple[tuple[int, int, int], ...]:
    out = []
    for s in stalls:
        if len(s) != 3 or not all(isinstance(x, (int, np.integer)) and not isinstance(x, bool) and x >= 0 for x in s):
            raise ValueError(f"a stall is (system, task call, milliseconds), three non-negative integers, got {s!r}")
        if s[0] >= n:
            raise ValueError(f"a stall names system {s[0]}, but the cluster has systems 0 to {n - 1}")
        out.append((int(s[0]), int(s[1]), int(s[2])))
    return tuple(out)


def _check_same_run(ck: Checkpoint, given: dict[str, Any], where: str) -> None:
    """Refuse a resume whose explicit settings are not the checkpoint's run."""
    have = ck.run.to_json()
    for name, value in given.items():
        if value is None:
            continue
        mine = [list(p) for p in value] if name == "set_lr" else value
        if mine != have[name]:
            raise CheckpointError(f"{where}: it is a run with {name} = {have[name]!r}, not {mine!r}")


def _fill(memory: ClusterMemory, whole: Plan | None, ck: Checkpoint | None, view_in: bytes | None, z: bool) -> None:
    """Every member's page in cluster memory: ``prepare`` (init or ``view_in``), or the checkpoint's."""
    n = memory.n
    for k in range(n):
        if ck is not None:
            memory.views[k] = np.frombuffer(ck.pages[k], dtype=np.uint8)
            memory.counters[k] = [ck.counters[k][name] for name in COUNTER_NAMES]
            memory.save_trace_state(k, ck.traces[k])
            continue
        assert whole is not None
        memory.save_trace_state(k, Sha256().state())
        ctx = Context(memory.view(k), counters=memory.counters[k], group=Group(k, n),
                      exchange=PageExchange(memory.exchange, k, 1.0, PollingWaiter()), z=z)
        prepare(ctx, whole, view_in)
        v = ctx.view
        if v.word("PENDING") and v.word("ROUND") == (v.word("NEXT_STEP") + 1) & 0xFFFFFFFF:
            raise ValueError("this page has a pending round, whose slots were on an exchange page a new run does not have")


def train(
    steps: int | None = None,
    *,
    systems: int | None = None,
    backend: str = "threads",
    timeout_ms: float = 1000.0,
    stalls: Sequence[Sequence[int]] = (),
    give_up_s: float = 60.0,
    checkpoint: str | os.PathLike[str] | None = None,
    checkpoint_every_s: float = 5.0,
    resume: str | os.PathLike[str] | None = None,
    steps_per_task: int | None = None,
    set_lr: Any = None,
    step_base: int | None = None,
    view_in: bytes | None = None,
    z: bool = True,
    keep_trace: bool = False,
    progress: bool = False,
) -> RunResult:
    """Run a cluster of ``systems`` members (see :func:`meshnb.train`)."""
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {', '.join(BACKENDS)} or mpi, got {backend!r}")
    timeout_s = _number(timeout_ms, "timeout_ms", 0) / 1000
    give_up_s = _number(give_up_s, "give_up_s", 0)
    checkpoint_every_s = _number(checkpoint_every_s, "checkpoint_every_s", 0)
    ck: Checkpoint | None = None
    if resume is not None:
        if view_in is not None:
            raise ValueError("a resumed run starts from its checkpoint's pages, not from view_in")
        if keep_trace:
            raise ValueError("keep_trace cannot be resumed: a checkpoint keeps the trace's hash, not its words")
        ck = ckpt_io.load(resume)
        given = {"systems": systems, "steps": steps, "steps_per_task": steps_per_task, "step_base": step_base, "z": z,
                 "set_lr": None if set_lr is None else Plan.make(ck.run.steps, None, set_lr).set_lr}
        _check_same_run(ck, given, f"checkpoint {resume}")
        systems = ck.run.systems
    if isinstance(systems, bool) or not isinstance(systems, (int, np.integer)) or not 1 <= systems <= MAX_SYSTEMS:
        raise ValueError(f"systems must be 1 to {MAX_SYSTEMS}, got {systems!r}")
    n = int(systems)
    stall_list = _stalls(stalls, n)
    if backend == "fused" and stall_list:
        raise ValueError("the fused backend has no exchange and no tasks to stall")
    whole = None if ck is not None else Plan.make(4096 if steps is None else steps, steps_per_task, set_lr, step_base)

    shared = _Shared(memory_bytes(n)) if backend == "processes" else None
    try:
        memory = ClusterMemory(shared.array() if shared else np.zeros(memory_bytes(n), dtype=np.uint8), n, create=True)
        _fill(memory, whole, ck, view_in, z)
        if ck is None:
            assert whole is not None
            settings = RunSettings(n, whole.steps, whole.steps_per_task, whole.set_lr, whole.step_base, z, memory.view(0).next_step)
            start, plan = 0, replace(whole, steps_per_task=None, step_base=None)  # both are in the pages now
        else:
            settings, start = ck.run, ck.done
            plan = Plan(settings.steps - start, None, tuple((s - start, b) for s, b in settings.set_lr if s >= start))
        for k in range(n):  # a page that cannot run the plan is bad input, refused before any member starts
            check_page(memory.view(k), plan.steps)
        spec = MemberSpec(n, plan, settings.z, timeout_s, stall_list, give_up_s, keep_trace,
                          resumable=checkpoint is not None or ck is not None)
        run = _Run(settings, plan, start, spec, checkpoint, checkpoint_every_s, progress)
        # The seconds of the lockstep itself: not the pages' preparation nor the members' start-up.
        done, results, seconds = _run_fused(run, memory) if backend == "fused" else _run_members(run, memory, shared)
        del memory
    finally:
        if shared is not None:
            shared.release()
    result = RunResult(done, results, seconds)
    if done < plan.steps:
        raise RunInterrupted(result)
    return result
