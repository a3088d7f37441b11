"""The members of a ``threads`` or ``processes`` cluster: one lifecycle (:class:`Members`), two kinds.

A member is one system doing :func:`meshnb.host.drive` over a :class:`~meshnb.exchange.PageExchange`,
meeting the others at the points of :mod:`.control`: threads (:class:`ThreadMembers`) or processes of
a forkserver over a shared segment (:class:`ProcessMembers`), which exit when their coordinator dies.
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.connection
import signal
import sys
import threading
import time
from dataclasses import dataclass
from multiprocessing import reduction
from typing import Any

import numpy as np

from ..cpu import pin_member
from ..exchange import BlockingWaiter, ExchangeAborted, Group, PageExchange, PollingWaiter
from ..host import drive, stall_naps, stalled
from ..interrupts import STOP_SIGNALS, phase, signals_left_to_main
from ..options import Plan
from ..program import Context
from ..results import ClusterError
from ..trace import Trace
from .control import Control, Lock
from .memory import ClusterMemory, SegmentLock, SharedSegment, attach


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
    resumable: bool  # a trace whose state is saved (runs that checkpoint)


@dataclass(frozen=True)
class MemberOutcome:
    """What a member gives back when it finishes: its trace digest, and its trace where kept."""

    trace_digest: str
    trace: np.ndarray | None


def run_member(
    k: int, spec: MemberSpec, memory: ClusterMemory, exchange: PageExchange, control: Control
) -> MemberOutcome:
    """System ``k``: its page is already in ``memory``; drive it to the plan's end in lockstep."""
    trace = Trace(spec.keep_trace, resumable=spec.resumable, state=memory.trace_state(k) if spec.resumable else None)
    group = Group(k, spec.systems)
    ctx = Context(memory.view(k), counters=memory.counters[k], group=group, exchange=exchange, trace=trace, z=spec.z)
    stop = False

    def save() -> None:
        if spec.resumable:
            memory.save_trace_state(k, trace.state())

    def on_task(done: int) -> None:
        nonlocal stop
        control.check(k)
        if ctx.view.word("ERR") == 0:  # the task reached its planned boundary: no round pending
            stop = control.at_boundary(k, done, save)

    pin_member(k, spec.systems)  # a core of its own: two members never share one (cpu.member_cpu)
    stop = control.ready(k)
    try:
        done = drive(
            ctx, spec.plan, on_task, lambda: stop, stall_naps(spec.stalls, k), spec.give_up_s, control.pause_at
        )
    except ClusterError as e:
        if not ctx.view.word("PENDING"):
            raise
        late = (ctx.view.next_step + 1) % (1 << 64)  # the pending round: name who did not publish it
        raise stalled(k, e, late, exchange.page.behind(late)) from None
    control.finish(k, done, save)
    return MemberOutcome(trace.hexdigest(), trace.words if spec.keep_trace else None)


Report = tuple[Any, ...]
"""A member's last word: ``("done", MemberOutcome)``, ``("aborted",)`` or ``("error", system, detail)``."""


def report(k: int, spec: MemberSpec, memory: ClusterMemory, control: Control) -> Report:
    """Run member ``k`` (:func:`run_member`) over cluster memory; its last word, whatever the end."""
    try:
        exchange = PageExchange(memory.exchange, k, spec.timeout_s, control.waiter)
        return ("done", run_member(k, spec, memory, exchange, control))
    except ExchangeAborted:
        return ("aborted",)  # another member's failure is the news
    except ClusterError as e:
        return ("error", e.system, e.detail)
    except Exception as e:  # noqa: BLE001 - reported by the coordinator
        return ("error", k, f"{type(e).__name__}: {e}")


class Members:
    """N running members as the coordinator sees them (``workers``: threads or processes), the lifecycle
    both share; each kind says how its members start, report (:meth:`poll`) and are ended (:meth:`_end`)."""

    NO_OUTCOME = "gave"  # "finished but {NO_OUTCOME} no outcome": how the kind's members hand it over

    def __init__(self, spec: MemberSpec, memory: ClusterMemory, control: Control) -> None:
        self.spec, self.memory, self.control = spec, memory, control
        self.workers: list[Any] = []  # threading.Thread or multiprocessing.Process, member k's at k
        self._outcomes: dict[int, MemberOutcome] = {}
        self._reported: set[int] = set()
        self._errors: list[ClusterError] = []

    def started(self) -> None:
        """Every member is running (it has what it needs from the coordinator)."""

    def poll(self, timeout_s: float) -> None:
        """Wait up to ``timeout_s`` for news; raise :class:`ClusterError` if a member failed or died."""
        raise NotImplementedError

    def _take(self, k: int, said: Report) -> None:
        """Member ``k``'s last word: its outcome kept, its failure the run's (the page aborted)."""
        self._reported.add(k)
        if said[0] == "done":
            self._outcomes[k] = said[1]
        elif said[0] == "error":
            self._errors.append(ClusterError(said[1], said[2]))
            self.memory.exchange.abort()
            self.control.waiter.notify()

    def _raise_failure(self) -> None:
        if self._errors:
            raise self._errors[0]

    def outcomes(self) -> list[MemberOutcome]:
        """Every member's outcome, once all are FINISHED (waiting for it, bounded by ``give_up_s``)."""
        n, give_up = self.spec.systems, self.spec.give_up_s
        deadline = time.monotonic() + give_up
        while len(self._outcomes) < n:  # a FINISHED member hands its outcome over right after
            self._raise_failure()
            if time.monotonic() > deadline:
                k = min(set(range(n)) - set(self._outcomes))
                raise ClusterError(k, f"finished but {self.NO_OUTCOME} no outcome within {give_up:g} s")
            self.poll(0.05)
        return [self._outcomes[k] for k in range(n)]

    def close(self) -> None:
        """Abort the page if members still run, join them (bounded), then :meth:`_end` the rest."""
        if any(w.is_alive() for w in self.workers):
            self.memory.exchange.abort()
            self.control.waiter.notify()
        deadline = time.monotonic() + min(self.spec.give_up_s, 5.0)
        for w in self.workers:
            w.join(max(0.0, deadline - time.monotonic()))
        self._end()

    def _end(self) -> None:
        """After the bounded join: a thread cannot be killed (one still asleep in a stall is left behind)."""


class ThreadMembers(Members):
    """The ``threads`` backend: members are threads; waits block on one condition variable."""

    def __init__(self, spec: MemberSpec, memory: ClusterMemory) -> None:
        self._news = threading.Event()
        control = Control(memory, threading.Lock(), BlockingWaiter(), spec.give_up_s, wake=self._news.set)
        super().__init__(spec, memory, control)
        self.workers = [
            threading.Thread(target=self._member, args=(k,), name=f"meshnb-system-{k}", daemon=True)
            for k in range(spec.systems)
        ]
        with signals_left_to_main():  # the members inherit the mask: the main thread takes every stop signal
            for t in self.workers:
                t.start()

    def _member(self, k: int) -> None:
        try:
            said = report(k, self.spec, self.memory, self.control)
        except BaseException as e:  # noqa: BLE001 - reported by the coordinator
            said = ("error", k, f"{type(e).__name__}: {e}")
        self._take(k, said)
        self._news.set()

    def poll(self, timeout_s: float) -> None:
        """Wait up to ``timeout_s`` for news; raise the first member's :class:`ClusterError`."""
        self._news.wait(timeout_s)
        self._news.clear()
        self._raise_failure()


def _mp_context() -> Any:
    """forkserver where there is one (safe with numba and threads; members start with meshnb imported), else spawn."""
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(["meshnb.backends.preload"])
    from multiprocessing import forkserver, resource_tracker

    # The server and its children (the members) start with every stop signal blocked: the stop is
    # the coordinator's.  The tracker's start unblocks SIGINT/SIGTERM on the way out (bpo-33613), so
    # the mask is restored after each; no SIG_IGN, or a signal another thread took would be lost.
    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    try:
        resource_tracker.ensure_running()
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
    signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    try:
        phase("spawn")  # the stop signals held here: another thread takes them
        forkserver.ensure_running()  # the tracker runs: nothing unblocks them on the way
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
    phase("forkserver")
    return ctx


def refuse_unguarded_main() -> None:
    """End a member process whose import of the user's script would start the run again, in one line."""
    if getattr(multiprocessing.current_process(), "_inheriting", False):
        print(
            "meshnb: error: the processes backend starts member processes that import your script again: put "
            'the code that starts the run under `if __name__ == "__main__":`',
            file=sys.stderr,
            flush=True,
        )
        raise SystemExit(1)


def _process_member(k: int, spec: MemberSpec, name: str | None, conn: Any, lock: Lock | None) -> None:
    """A member process's main: attach to the memory (by name, or the descriptor sent first), run, report."""
    for s in STOP_SIGNALS:  # Ctrl-C, SIGTERM and SIGHUP are the coordinator's (blocked until here)
        signal.signal(s, signal.SIG_IGN)
    phase("member")
    try:
        fd = reduction.recv_handle(conn) if name is None else None
    except (EOFError, OSError):
        raise SystemExit(1) from None  # the coordinator is gone
    raw, release = attach(name, fd)
    try:
        code = _serve(k, spec, raw, conn, lock if lock is not None else SegmentLock(fd))  # type: ignore[arg-type]
    finally:
        del raw
        release()
    if code:
        raise SystemExit(code)


def _serve(k: int, spec: MemberSpec, raw: np.ndarray, conn: Any, lock: Lock) -> int:
    # The coordinator never writes to this pipe: readable means closed, the coordinator gone.  A
    # change of this member's state (ready, paused, finished) is news on it: the coordinator,
    # waiting for the members' pause at the end of a chunk, wakes at once.
    memory = ClusterMemory(raw, spec.systems)
    control = Control(
        memory, lock, PollingWaiter(), spec.give_up_s, wake=lambda: conn.send(("news",)), alive=lambda: not conn.poll()
    )
    try:
        said = report(k, spec, memory, control)
        conn.send(said)
    except (BrokenPipeError, EOFError):
        return 1  # the coordinator is gone
    return 1 if said[0] == "error" else 0


def _died(code: int | None) -> str:
    if code is None:
        return "is still running"
    if code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with code {code}"


class ProcessMembers(Members):
    """The ``processes`` backend: a process per member, every page in one shared memory segment."""

    NO_OUTCOME = "sent"

    def __init__(self, spec: MemberSpec, shared: SharedSegment, memory: ClusterMemory) -> None:
        ctx = _mp_context()
        # Named semaphores live in /dev/shm: with a memfd the lock is a record lock on it instead.
        lock: Lock = SegmentLock(shared.fd) if shared.fd is not None else ctx.Lock()
        super().__init__(spec, memory, Control(memory, lock, PollingWaiter(), spec.give_up_s))
        self._conns: list[Any] = []
        self._shared = shared
        for k in range(spec.systems):
            mine, theirs = ctx.Pipe()
            args = (k, spec, shared.name, theirs, None if shared.fd is not None else lock)
            p = ctx.Process(target=_process_member, args=args, name=f"meshnb-system-{k}", daemon=True)
            try:
                p.start()
            except (EOFError, OSError) as e:  # the forkserver is gone (killed, say): one line, not its traceback
                theirs.close()
                self.close()
                raise ClusterError(k, f"its member process could not be started ({type(e).__name__}: {e})") from None
            theirs.close()
            if shared.fd is not None:
                reduction.send_handle(mine, shared.fd, p.pid)
            self.workers.append(p)
            self._conns.append(mine)

    def started(self) -> None:
        """Every member has mapped the segment: unlink its name (nothing is left in /dev/shm if the group is killed)."""
        self._shared.unlink()

    def _read(self, k: int) -> None:
        conn = self._conns[k]
        try:
            while conn.poll():
                said = conn.recv()
                if said[0] != "news":  # news: a state changed (in memory), the wait is over
                    self._take(k, said)
                    self._raise_failure()
        except (EOFError, OSError):
            pass

    def poll(self, timeout_s: float) -> None:
        """Wait up to ``timeout_s`` for news on the pipes; raise :class:`ClusterError` for a failed or dead member."""
        waiting = [c for k, c in enumerate(self._conns) if k not in self._reported]
        waiting += [p.sentinel for k, p in enumerate(self.workers) if k not in self._reported]
        multiprocessing.connection.wait(waiting, timeout_s)
        for k, p in enumerate(self.workers):
            if k in self._reported:
                continue
            self._read(k)
            if k not in self._reported and p.exitcode is not None:
                raise ClusterError(k, f"member process (pid {p.pid}) {_died(p.exitcode)}")

    def _end(self) -> None:
        """Kill the processes still alive after the bounded join, and close their pipes."""
        for p in self.workers:
            if p.is_alive():
                p.kill()
                p.join(5.0)
        for c in self._conns:
            c.close()
