"""The members of a ``threads`` or ``processes`` cluster.

A member is one system doing :func:`meshnb.host.drive` over a
:class:`~meshnb.exchange.PageExchange`, so the program's grouped task loop (publish, round,
fold, apply; a timed-out round left pending and resumed) is what runs; it meets the others and
the coordinator at the points of :mod:`.control`.  :class:`ThreadMembers` runs members as threads (the
meeting points block on a condition variable); :class:`ProcessMembers` as processes of a
forkserver, the memory in a shared segment (the meeting points poll).  Either way a round's wait
spins in njit with the GIL released (:mod:`meshnb.loops.grouped`), then naps in the same waiter.
Member processes whose coordinator dies see their pipe close and exit.
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
from typing import Any, Protocol

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

# ---------------------------------------------------------------------------------------------
# One member
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class MemberSpec:
    """What every member needs (picklable: it goes to member processes).

    Examples
    --------
    >>> import numpy as np
    >>> from meshnb.backends.members import MemberSpec, ThreadMembers
    >>> from meshnb.backends.memory import FINISHED, RUNNING, ClusterMemory, memory_bytes
    >>> from meshnb.options import Plan
    >>> from meshnb.sha256 import Sha256
    >>> from meshnb.testing.reference import init_page
    >>> memory = ClusterMemory(np.zeros(memory_bytes(2), np.uint8), 2, create=True)
    >>> for k in range(2):  # two members' pages after init, as the backend prepares them
    ...     memory.views[k] = np.frombuffer(init_page(2, grouped=True), np.uint8)
    ...     memory.save_trace_state(k, Sha256().state())
    >>> spec = MemberSpec(2, Plan(steps=16), True, timeout_s=1.0, stalls=(), give_up_s=10.0, keep_trace=False,
    ...                   resumable=False)
    >>> spec.systems, spec.plan.steps, spec.z
    (2, 16, True)
    """

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
    """What a member gives back when it finishes: its trace digest, and its trace where kept.

    Examples
    --------
    >>> import numpy as np
    >>> from meshnb.backends.members import MemberSpec, ThreadMembers
    >>> from meshnb.backends.memory import FINISHED, RUNNING, ClusterMemory, memory_bytes
    >>> from meshnb.options import Plan
    >>> from meshnb.sha256 import Sha256
    >>> from meshnb.testing.reference import init_page
    >>> memory = ClusterMemory(np.zeros(memory_bytes(2), np.uint8), 2, create=True)
    >>> for k in range(2):  # two members' pages after init, as the backend prepares them
    ...     memory.views[k] = np.frombuffer(init_page(2, grouped=True), np.uint8)
    ...     memory.save_trace_state(k, Sha256().state())
    >>> spec = MemberSpec(2, Plan(steps=16), True, timeout_s=1.0, stalls=(), give_up_s=10.0, keep_trace=False,
    ...                   resumable=False)
    >>> members = ThreadMembers(spec, memory)
    >>> members.started()
    >>> while not members.control.all_in(RUNNING):
    ...     members.poll(0.1)
    >>> members.control.start()
    >>> while not members.control.all_in(FINISHED):
    ...     members.poll(0.1)
    >>> outcome = members.outcomes()[0]
    >>> members.close()
    >>> outcome.trace_digest[:16], outcome.trace is None  # keep_trace=False: the digest only
    ('2df9b1e6fddd7787', True)
    """

    trace_digest: str
    trace: np.ndarray | None


def run_member(
    k: int, spec: MemberSpec, memory: ClusterMemory, exchange: PageExchange, control: Control
) -> MemberOutcome:
    """System ``k``: its page is already in ``memory``; drive it to the plan's end in lockstep.

    Examples
    --------
    >>> import numpy as np
    >>> from meshnb.backends.members import MemberSpec, ThreadMembers
    >>> from meshnb.backends.memory import FINISHED, RUNNING, ClusterMemory, memory_bytes
    >>> from meshnb.options import Plan
    >>> from meshnb.sha256 import Sha256
    >>> from meshnb.testing.reference import init_page
    >>> memory = ClusterMemory(np.zeros(memory_bytes(2), np.uint8), 2, create=True)
    >>> for k in range(2):  # two members' pages after init, as the backend prepares them
    ...     memory.views[k] = np.frombuffer(init_page(2, grouped=True), np.uint8)
    ...     memory.save_trace_state(k, Sha256().state())
    >>> spec = MemberSpec(2, Plan(steps=16), True, timeout_s=1.0, stalls=(), give_up_s=10.0, keep_trace=False,
    ...                   resumable=False)
    >>> import meshnb
    >>> members = ThreadMembers(spec, memory)  # a thread per member, each in run_member
    >>> members.started()
    >>> while not members.control.all_in(RUNNING):
    ...     members.poll(0.1)
    >>> members.control.start()
    >>> while not members.control.all_in(FINISHED):
    ...     members.poll(0.1)
    >>> digests = [o.trace_digest for o in members.outcomes()]
    >>> members.close()
    >>> digests == [s.trace_digest for s in meshnb.train(16, systems=2, backend="threads").systems]
    True
    """
    trace = Trace(spec.keep_trace, resumable=spec.resumable, state=memory.trace_state(k) if spec.resumable else None)
    ctx = Context(
        memory.view(k),
        counters=memory.counters[k],
        group=Group(k, spec.systems),
        exchange=exchange,
        trace=trace,
        z=spec.z,
    )
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


# ---------------------------------------------------------------------------------------------
# Members as threads or processes
# ---------------------------------------------------------------------------------------------


class Members(Protocol):
    """N running members, as the coordinator sees them.

    Examples
    --------
    >>> import numpy as np
    >>> from meshnb.backends.members import MemberSpec, ThreadMembers
    >>> from meshnb.backends.memory import FINISHED, RUNNING, ClusterMemory, memory_bytes
    >>> from meshnb.options import Plan
    >>> from meshnb.sha256 import Sha256
    >>> from meshnb.testing.reference import init_page
    >>> memory = ClusterMemory(np.zeros(memory_bytes(2), np.uint8), 2, create=True)
    >>> for k in range(2):  # two members' pages after init, as the backend prepares them
    ...     memory.views[k] = np.frombuffer(init_page(2, grouped=True), np.uint8)
    ...     memory.save_trace_state(k, Sha256().state())
    >>> spec = MemberSpec(2, Plan(steps=16), True, timeout_s=1.0, stalls=(), give_up_s=10.0, keep_trace=False,
    ...                   resumable=False)
    >>> from meshnb.backends.members import Members
    >>> members: Members = ThreadMembers(spec, memory)  # what the coordinator drives
    >>> members.started()
    >>> while not members.control.all_in(RUNNING):
    ...     members.poll(0.1)
    >>> members.control.start()
    >>> while not members.control.all_in(FINISHED):
    ...     members.poll(0.1)
    >>> len(members.outcomes()), memory.progress.tolist()
    (2, [16, 16])
    >>> members.close()
    """

    control: Control

    def started(self) -> None:
        """Every member is running (it has what it needs from the coordinator).

        Examples
        --------
        >>> import numpy as np
        >>> from meshnb.backends.members import MemberSpec, ThreadMembers
        >>> from meshnb.backends.memory import FINISHED, RUNNING, ClusterMemory, memory_bytes
        >>> from meshnb.options import Plan
        >>> from meshnb.sha256 import Sha256
        >>> from meshnb.testing.reference import init_page
        >>> memory = ClusterMemory(np.zeros(memory_bytes(2), np.uint8), 2, create=True)
        >>> for k in range(2):  # two members' pages after init, as the backend prepares them
        ...     memory.views[k] = np.frombuffer(init_page(2, grouped=True), np.uint8)
        ...     memory.save_trace_state(k, Sha256().state())
        >>> spec = MemberSpec(2, Plan(steps=16), True, timeout_s=1.0, stalls=(), give_up_s=10.0, keep_trace=False,
        ...                   resumable=False)
        >>> members = ThreadMembers(spec, memory)
        >>> members.started()  # threads share the memory already; processes get theirs first
        >>> members.close()  # never started: the members are aborted
        >>> memory.exchange.aborted
        True
        """

    def poll(self, timeout_s: float) -> None:
        """Wait up to ``timeout_s`` for news; raise :class:`ClusterError` if a member failed or died.

        Examples
        --------
        >>> import numpy as np
        >>> from meshnb.backends.members import MemberSpec, ThreadMembers
        >>> from meshnb.backends.memory import FINISHED, RUNNING, ClusterMemory, memory_bytes
        >>> from meshnb.options import Plan
        >>> from meshnb.sha256 import Sha256
        >>> from meshnb.testing.reference import init_page
        >>> memory = ClusterMemory(np.zeros(memory_bytes(2), np.uint8), 2, create=True)
        >>> for k in range(2):  # two members' pages after init, as the backend prepares them
        ...     memory.views[k] = np.frombuffer(init_page(2, grouped=True), np.uint8)
        ...     memory.save_trace_state(k, Sha256().state())
        >>> spec = MemberSpec(2, Plan(steps=16), True, timeout_s=1.0, stalls=(), give_up_s=10.0, keep_trace=False,
        ...                   resumable=False)
        >>> from meshnb.results import ClusterError
        >>> spec = MemberSpec(2, Plan(steps=16), True, 1.0, (), give_up_s=0.2, keep_trace=False, resumable=False)
        >>> members = ThreadMembers(spec, memory)
        >>> try:
        ...     for _ in range(50):  # the coordinator never starts the run: the members give up
        ...         members.poll(0.1)
        ... except ClusterError as e:
        ...     print(str(e).split(": ", 1)[1])  # "system K: ...", the first member to give up
        waited 0.2 s for the other members to start
        >>> members.close()
        """

    def outcomes(self) -> list[MemberOutcome]:
        """Every member's outcome, once all are FINISHED (waiting, bounded, for it to arrive).

        Examples
        --------
        >>> import numpy as np
        >>> from meshnb.backends.members import MemberSpec, ThreadMembers
        >>> from meshnb.backends.memory import FINISHED, RUNNING, ClusterMemory, memory_bytes
        >>> from meshnb.options import Plan
        >>> from meshnb.sha256 import Sha256
        >>> from meshnb.testing.reference import init_page
        >>> memory = ClusterMemory(np.zeros(memory_bytes(2), np.uint8), 2, create=True)
        >>> for k in range(2):  # two members' pages after init, as the backend prepares them
        ...     memory.views[k] = np.frombuffer(init_page(2, grouped=True), np.uint8)
        ...     memory.save_trace_state(k, Sha256().state())
        >>> spec = MemberSpec(2, Plan(steps=16), True, timeout_s=1.0, stalls=(), give_up_s=10.0, keep_trace=False,
        ...                   resumable=False)
        >>> members = ThreadMembers(spec, memory)
        >>> members.started()
        >>> while not members.control.all_in(RUNNING):
        ...     members.poll(0.1)
        >>> members.control.start()
        >>> while not members.control.all_in(FINISHED):
        ...     members.poll(0.1)
        >>> [o.trace_digest[:16] for o in members.outcomes()]
        ['2df9b1e6fddd7787', '2df9b1e6fddd7787']
        >>> members.close()
        """

    def close(self) -> None:
        """End the members (abort the page if they still run), bounded; release what they hold.

        Examples
        --------
        >>> import numpy as np
        >>> from meshnb.backends.members import MemberSpec, ThreadMembers
        >>> from meshnb.backends.memory import FINISHED, RUNNING, ClusterMemory, memory_bytes
        >>> from meshnb.options import Plan
        >>> from meshnb.sha256 import Sha256
        >>> from meshnb.testing.reference import init_page
        >>> memory = ClusterMemory(np.zeros(memory_bytes(2), np.uint8), 2, create=True)
        >>> for k in range(2):  # two members' pages after init, as the backend prepares them
        ...     memory.views[k] = np.frombuffer(init_page(2, grouped=True), np.uint8)
        ...     memory.save_trace_state(k, Sha256().state())
        >>> spec = MemberSpec(2, Plan(steps=16), True, timeout_s=1.0, stalls=(), give_up_s=10.0, keep_trace=False,
        ...                   resumable=False)
        >>> members = ThreadMembers(spec, memory)
        >>> members.started()
        >>> while not members.control.all_in(RUNNING):
        ...     members.poll(0.1)
        >>> members.control.start()
        >>> while not members.control.all_in(FINISHED):
        ...     members.poll(0.1)
        >>> members.close()
        >>> memory.exchange.aborted  # finished members: nothing to abort
        False
        """


class ThreadMembers:
    """The ``threads`` backend: members are threads; waits block on one condition variable.

    Examples
    --------
    >>> import numpy as np
    >>> from meshnb.backends.members import MemberSpec, ThreadMembers
    >>> from meshnb.backends.memory import FINISHED, RUNNING, ClusterMemory, memory_bytes
    >>> from meshnb.options import Plan
    >>> from meshnb.sha256 import Sha256
    >>> from meshnb.testing.reference import init_page
    >>> memory = ClusterMemory(np.zeros(memory_bytes(2), np.uint8), 2, create=True)
    >>> for k in range(2):  # two members' pages after init, as the backend prepares them
    ...     memory.views[k] = np.frombuffer(init_page(2, grouped=True), np.uint8)
    ...     memory.save_trace_state(k, Sha256().state())
    >>> spec = MemberSpec(2, Plan(steps=16), True, timeout_s=1.0, stalls=(), give_up_s=10.0, keep_trace=False,
    ...                   resumable=False)
    >>> members = ThreadMembers(spec, memory)  # two threads, in lockstep on the exchange page in memory
    >>> members.started()
    >>> while not members.control.all_in(RUNNING):
    ...     members.poll(0.1)
    >>> members.control.start()
    >>> while not members.control.all_in(FINISHED):
    ...     members.poll(0.1)
    >>> len(members.outcomes()), memory.progress.tolist()
    (2, [16, 16])
    >>> members.close()
    """

    def __init__(self, spec: MemberSpec, memory: ClusterMemory) -> None:
        self.spec, self.memory = spec, memory
        self._news = threading.Event()
        waiter = BlockingWaiter()
        self.control = Control(memory, threading.Lock(), waiter, spec.give_up_s, wake=self._news.set)
        self._outcomes: list[MemberOutcome | None] = [None] * spec.systems
        self._errors: list[ClusterError] = []
        self._threads = [
            threading.Thread(
                target=self._member,
                args=(k, PageExchange(memory.exchange, k, spec.timeout_s, waiter)),
                name=f"meshnb-system-{k}",
                daemon=True,
            )
            for k in range(spec.systems)
        ]
        with signals_left_to_main():  # the members inherit the mask: the main thread takes every stop signal
            for t in self._threads:
                t.start()

    def started(self) -> None:
        """Nothing to hand over: the threads share the memory from the start.

        Examples
        --------
        >>> import numpy as np
        >>> from meshnb.backends.members import MemberSpec, ThreadMembers
        >>> from meshnb.backends.memory import FINISHED, RUNNING, ClusterMemory, memory_bytes
        >>> from meshnb.options import Plan
        >>> from meshnb.sha256 import Sha256
        >>> from meshnb.testing.reference import init_page
        >>> memory = ClusterMemory(np.zeros(memory_bytes(2), np.uint8), 2, create=True)
        >>> for k in range(2):  # two members' pages after init, as the backend prepares them
        ...     memory.views[k] = np.frombuffer(init_page(2, grouped=True), np.uint8)
        ...     memory.save_trace_state(k, Sha256().state())
        >>> spec = MemberSpec(2, Plan(steps=16), True, timeout_s=1.0, stalls=(), give_up_s=10.0, keep_trace=False,
        ...                   resumable=False)
        >>> members = ThreadMembers(spec, memory)
        >>> members.started()  # threads share the memory already; processes get theirs first
        >>> members.close()  # never started: the members are aborted
        >>> memory.exchange.aborted
        True
        """

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
        """Wait up to ``timeout_s`` for news (a member's state changed); raise the first member's :class:`ClusterError`.

        Examples
        --------
        >>> import numpy as np
        >>> from meshnb.backends.members import MemberSpec, ThreadMembers
        >>> from meshnb.backends.memory import FINISHED, RUNNING, ClusterMemory, memory_bytes
        >>> from meshnb.options import Plan
        >>> from meshnb.sha256 import Sha256
        >>> from meshnb.testing.reference import init_page
        >>> memory = ClusterMemory(np.zeros(memory_bytes(2), np.uint8), 2, create=True)
        >>> for k in range(2):  # two members' pages after init, as the backend prepares them
        ...     memory.views[k] = np.frombuffer(init_page(2, grouped=True), np.uint8)
        ...     memory.save_trace_state(k, Sha256().state())
        >>> spec = MemberSpec(2, Plan(steps=16), True, timeout_s=1.0, stalls=(), give_up_s=10.0, keep_trace=False,
        ...                   resumable=False)
        >>> from meshnb.results import ClusterError
        >>> spec = MemberSpec(2, Plan(steps=16), True, 1.0, (), give_up_s=0.2, keep_trace=False, resumable=False)
        >>> members = ThreadMembers(spec, memory)
        >>> try:
        ...     for _ in range(50):  # the coordinator never starts the run: the members give up
        ...         members.poll(0.1)
        ... except ClusterError as e:
        ...     print(str(e).split(": ", 1)[1])  # "system K: ...", the first member to give up
        waited 0.2 s for the other members to start
        >>> members.close()
        """
        self._news.wait(timeout_s)
        self._news.clear()
        if self._errors:
            raise self._errors[0]

    def outcomes(self) -> list[MemberOutcome]:
        """Every member's outcome, joining the threads (bounded by ``give_up_s``).

        Examples
        --------
        >>> import numpy as np
        >>> from meshnb.backends.members import MemberSpec, ThreadMembers
        >>> from meshnb.backends.memory import FINISHED, RUNNING, ClusterMemory, memory_bytes
        >>> from meshnb.options import Plan
        >>> from meshnb.sha256 import Sha256
        >>> from meshnb.testing.reference import init_page
        >>> memory = ClusterMemory(np.zeros(memory_bytes(2), np.uint8), 2, create=True)
        >>> for k in range(2):  # two members' pages after init, as the backend prepares them
        ...     memory.views[k] = np.frombuffer(init_page(2, grouped=True), np.uint8)
        ...     memory.save_trace_state(k, Sha256().state())
        >>> spec = MemberSpec(2, Plan(steps=16), True, timeout_s=1.0, stalls=(), give_up_s=10.0, keep_trace=False,
        ...                   resumable=False)
        >>> members = ThreadMembers(spec, memory)
        >>> members.started()
        >>> while not members.control.all_in(RUNNING):
        ...     members.poll(0.1)
        >>> members.control.start()
        >>> while not members.control.all_in(FINISHED):
        ...     members.poll(0.1)
        >>> [o.trace_digest[:16] for o in members.outcomes()]
        ['2df9b1e6fddd7787', '2df9b1e6fddd7787']
        >>> members.close()
        """
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
        """Abort the page if members still run and join them, bounded (a thread asleep in a stall is left behind).

        Examples
        --------
        >>> import numpy as np
        >>> from meshnb.backends.members import MemberSpec, ThreadMembers
        >>> from meshnb.backends.memory import FINISHED, RUNNING, ClusterMemory, memory_bytes
        >>> from meshnb.options import Plan
        >>> from meshnb.sha256 import Sha256
        >>> from meshnb.testing.reference import init_page
        >>> memory = ClusterMemory(np.zeros(memory_bytes(2), np.uint8), 2, create=True)
        >>> for k in range(2):  # two members' pages after init, as the backend prepares them
        ...     memory.views[k] = np.frombuffer(init_page(2, grouped=True), np.uint8)
        ...     memory.save_trace_state(k, Sha256().state())
        >>> spec = MemberSpec(2, Plan(steps=16), True, timeout_s=1.0, stalls=(), give_up_s=10.0, keep_trace=False,
        ...                   resumable=False)
        >>> members = ThreadMembers(spec, memory)
        >>> members.started()
        >>> while not members.control.all_in(RUNNING):
        ...     members.poll(0.1)
        >>> members.control.start()
        >>> while not members.control.all_in(FINISHED):
        ...     members.poll(0.1)
        >>> members.close()
        >>> memory.exchange.aborted  # finished members: nothing to abort
        False
        """
        if any(t.is_alive() for t in self._threads):
            self.memory.exchange.abort()
            self.control.waiter.notify()
        deadline = time.monotonic() + min(self.spec.give_up_s, 5.0)
        for t in self._threads:  # a thread cannot be killed: one still asleep in a stall is left behind
            t.join(max(0.0, deadline - time.monotonic()))


def _mp_context() -> Any:
    """forkserver where there is one (a fork of a clean server: safe with numba and threads,
    and members start with meshnb imported), else spawn."""
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(["meshnb.backends.preload"])
    from multiprocessing import forkserver, resource_tracker

    # The server must never see a stop signal: its preload (numba) takes a second, and a
    # KeyboardInterrupt there kills it, and the run with it; a SIGTERM or SIGHUP to the whole
    # process group (a scheduler's cancel, `kill -- -PGID`, a closed terminal) killed it outright,
    # and every member it had forked was then reported "exited with code 255".  It starts with
    # every stop signal (SIGINT, SIGTERM, SIGHUP) blocked (a mask, this thread's, survives fork and
    # exec; Python leaves it as it is; the server never unblocks them) and its children, the
    # members, inherit the mask and ignore them: the stop is the coordinator's, which stops the
    # members at a task boundary.  The resource tracker starts first, under the same mask (it
    # ignores SIGINT and SIGTERM itself, and SIGHUP stays blocked there): its start unblocks
    # SIGINT and SIGTERM here on the way out (bpo-33613's mask, for the tracker), so the mask is
    # restored after each.  No SIG_IGN here: a stop signal that another thread of this process (a
    # BLAS pool) took while it was ignored would be lost, and a blocked one only waits.
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
    """A member process imports the user's script again (as ``__mp_main__``); a script that
    starts the run at its top level would start it again there.  Say so in one line and end the
    member (the coordinator then reports it), instead of multiprocessing's page of traceback.

    Examples
    --------
    >>> from meshnb.backends.members import refuse_unguarded_main
    >>> refuse_unguarded_main()  # in the coordinator (or any process that is no member): nothing to refuse
    """
    if getattr(multiprocessing.current_process(), "_inheriting", False):
        print(
            "meshnb: error: the processes backend starts member processes that import your script again: put "
            'the code that starts the run under `if __name__ == "__main__":`',
            file=sys.stderr,
            flush=True,
        )
        raise SystemExit(1)


def _process_member(k: int, spec: MemberSpec, name: str | None, conn: Any, lock: Lock | None) -> None:
    """A member process's main: attach to the memory (by name, or the descriptor the coordinator
    sends first), run, report through ``conn``."""
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
    memory = ClusterMemory(raw, spec.systems)
    waiter = PollingWaiter()
    # The coordinator never writes to this pipe: readable means closed, the coordinator gone.  A
    # change of this member's state (ready, paused, finished) is news on it: the coordinator,
    # waiting for the members' pause at the end of a chunk, wakes at once.
    control = Control(
        memory, lock, waiter, spec.give_up_s, wake=lambda: conn.send(("news",)), alive=lambda: not conn.poll()
    )
    try:
        try:
            conn.send(
                ("done", run_member(k, spec, memory, PageExchange(memory.exchange, k, spec.timeout_s, waiter), control))
            )
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
    """The ``processes`` backend: a process per member, every page in one shared memory segment.

    Examples
    --------
    >>> import numpy as np
    >>> from meshnb.backends.members import MemberSpec, ProcessMembers
    >>> from meshnb.backends.memory import FINISHED, RUNNING, ClusterMemory, SharedSegment, memory_bytes
    >>> from meshnb.options import Plan
    >>> from meshnb.sha256 import Sha256
    >>> from meshnb.testing.reference import init_page
    >>> shared = SharedSegment(memory_bytes(2))  # the memory the member processes map
    >>> memory = ClusterMemory(shared.array(), 2, create=True)
    >>> for k in range(2):
    ...     memory.views[k] = np.frombuffer(init_page(2, grouped=True), np.uint8)
    ...     memory.save_trace_state(k, Sha256().state())
    >>> spec = MemberSpec(2, Plan(steps=16), True, 1.0, (), give_up_s=30.0, keep_trace=False, resumable=False)
    >>> members = ProcessMembers(spec, shared, memory)  # two processes of a forkserver
    >>> members.started()
    >>> while not members.control.all_in(RUNNING):
    ...     members.poll(0.1)
    >>> members.control.start()
    >>> while not members.control.all_in(FINISHED):
    ...     members.poll(0.1)
    >>> import meshnb
    >>> digests = [o.trace_digest for o in members.outcomes()]
    >>> members.close()
    >>> del memory; shared.release()
    >>> digests == [s.trace_digest for s in meshnb.train(16, systems=2, backend="threads").systems]
    True
    """

    def __init__(self, spec: MemberSpec, shared: SharedSegment, memory: ClusterMemory) -> None:
        self.spec = spec
        ctx = _mp_context()
        # Named semaphores live in /dev/shm: with a memfd the lock is a record lock on it instead.
        lock: Lock = SegmentLock(shared.fd) if shared.fd is not None else ctx.Lock()
        self.control = Control(memory, lock, PollingWaiter(), spec.give_up_s)
        self._procs: list[Any] = []
        self._conns: list[Any] = []
        self._outcomes: dict[int, MemberOutcome] = {}
        self._reported: set[int] = set()
        self._shared = shared
        for k in range(spec.systems):
            mine, theirs = ctx.Pipe()
            p = ctx.Process(
                target=_process_member,
                args=(k, spec, shared.name, theirs, None if shared.fd is not None else lock),
                name=f"meshnb-system-{k}",
                daemon=True,
            )
            try:
                p.start()
            except (EOFError, OSError) as e:  # the forkserver is gone (killed, say): one line, not its traceback
                theirs.close()
                self.close()
                raise ClusterError(k, f"its member process could not be started ({type(e).__name__}: {e})") from None
            theirs.close()
            if shared.fd is not None:
                reduction.send_handle(mine, shared.fd, p.pid)
            self._procs.append(p)
            self._conns.append(mine)

    def started(self) -> None:
        """Every member has mapped the segment: unlink its name now (the mappings stay), so that
        nothing is left in /dev/shm even if the whole process group is killed.

        Examples
        --------
        >>> import numpy as np
        >>> from meshnb.backends.members import MemberSpec, ProcessMembers
        >>> from meshnb.backends.memory import FINISHED, RUNNING, ClusterMemory, SharedSegment, memory_bytes
        >>> from meshnb.options import Plan
        >>> from meshnb.sha256 import Sha256
        >>> from meshnb.testing.reference import init_page
        >>> shared = SharedSegment(memory_bytes(2))  # the memory the member processes map
        >>> memory = ClusterMemory(shared.array(), 2, create=True)
        >>> for k in range(2):
        ...     memory.views[k] = np.frombuffer(init_page(2, grouped=True), np.uint8)
        ...     memory.save_trace_state(k, Sha256().state())
        >>> spec = MemberSpec(2, Plan(steps=16), True, 1.0, (), give_up_s=30.0, keep_trace=False, resumable=False)
        >>> members = ProcessMembers(spec, shared, memory)  # two processes of a forkserver
        >>> members.started()  # every member has mapped the memory: a named segment's name is gone now
        >>> shared.name is None or not shared._linked
        True
        >>> members.close()
        >>> del memory; shared.release()
        """
        self._shared.unlink()

    def _read(self, k: int) -> None:
        conn = self._conns[k]
        try:
            while conn.poll():
                msg = conn.recv()
                if msg[0] == "news":
                    continue  # a state changed (in memory): the wait is over, nothing more to read
                self._reported.add(k)
                if msg[0] == "done":
                    self._outcomes[k] = msg[1]
                elif msg[0] == "error":
                    raise ClusterError(msg[1], msg[2])
        except (EOFError, OSError):
            pass

    def poll(self, timeout_s: float) -> None:
        """Wait up to ``timeout_s`` for news on the members' pipes; raise :class:`ClusterError` for a
        member that failed or died.

        Examples
        --------
        >>> import numpy as np
        >>> from meshnb.backends.members import MemberSpec, ProcessMembers
        >>> from meshnb.backends.memory import FINISHED, RUNNING, ClusterMemory, SharedSegment, memory_bytes
        >>> from meshnb.options import Plan
        >>> from meshnb.sha256 import Sha256
        >>> from meshnb.testing.reference import init_page
        >>> shared = SharedSegment(memory_bytes(2))  # the memory the member processes map
        >>> memory = ClusterMemory(shared.array(), 2, create=True)
        >>> for k in range(2):
        ...     memory.views[k] = np.frombuffer(init_page(2, grouped=True), np.uint8)
        ...     memory.save_trace_state(k, Sha256().state())
        >>> spec = MemberSpec(2, Plan(steps=16), True, 1.0, (), give_up_s=30.0, keep_trace=False, resumable=False)
        >>> members = ProcessMembers(spec, shared, memory)  # two processes of a forkserver
        >>> members.started()
        >>> while not members.control.all_in(RUNNING):
        ...     members.poll(0.1)
        >>> members.control.start()
        >>> while not members.control.all_in(FINISHED):
        ...     members.poll(0.1)
        >>> members.poll(0.01)  # no news, no failure: returns after the timeout
        >>> memory.progress.tolist()
        [16, 16]
        >>> members.close()
        >>> del memory; shared.release()
        """
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
        """Every member's outcome, read from its pipe (bounded by ``give_up_s``).

        Examples
        --------
        >>> import numpy as np
        >>> from meshnb.backends.members import MemberSpec, ProcessMembers
        >>> from meshnb.backends.memory import FINISHED, RUNNING, ClusterMemory, SharedSegment, memory_bytes
        >>> from meshnb.options import Plan
        >>> from meshnb.sha256 import Sha256
        >>> from meshnb.testing.reference import init_page
        >>> shared = SharedSegment(memory_bytes(2))  # the memory the member processes map
        >>> memory = ClusterMemory(shared.array(), 2, create=True)
        >>> for k in range(2):
        ...     memory.views[k] = np.frombuffer(init_page(2, grouped=True), np.uint8)
        ...     memory.save_trace_state(k, Sha256().state())
        >>> spec = MemberSpec(2, Plan(steps=16), True, 1.0, (), give_up_s=30.0, keep_trace=False, resumable=False)
        >>> members = ProcessMembers(spec, shared, memory)  # two processes of a forkserver
        >>> members.started()
        >>> while not members.control.all_in(RUNNING):
        ...     members.poll(0.1)
        >>> members.control.start()
        >>> while not members.control.all_in(FINISHED):
        ...     members.poll(0.1)
        >>> [o.trace_digest[:16] for o in members.outcomes()]
        ['2df9b1e6fddd7787', '2df9b1e6fddd7787']
        >>> members.close()
        >>> del memory; shared.release()
        """
        deadline = time.monotonic() + self.spec.give_up_s
        while len(self._outcomes) < self.spec.systems:  # a FINISHED member sends its outcome right after
            if time.monotonic() > deadline:
                k = min(set(range(self.spec.systems)) - set(self._outcomes))
                raise ClusterError(k, f"finished but sent no outcome within {self.spec.give_up_s:g} s")
            self.poll(0.05)
        return [self._outcomes[k] for k in range(self.spec.systems)]

    def close(self) -> None:
        """Abort the page if members still run, end the processes (bounded) and close their pipes.

        Examples
        --------
        >>> import numpy as np
        >>> from meshnb.backends.members import MemberSpec, ProcessMembers
        >>> from meshnb.backends.memory import FINISHED, RUNNING, ClusterMemory, SharedSegment, memory_bytes
        >>> from meshnb.options import Plan
        >>> from meshnb.sha256 import Sha256
        >>> from meshnb.testing.reference import init_page
        >>> shared = SharedSegment(memory_bytes(2))  # the memory the member processes map
        >>> memory = ClusterMemory(shared.array(), 2, create=True)
        >>> for k in range(2):
        ...     memory.views[k] = np.frombuffer(init_page(2, grouped=True), np.uint8)
        ...     memory.save_trace_state(k, Sha256().state())
        >>> spec = MemberSpec(2, Plan(steps=16), True, 1.0, (), give_up_s=30.0, keep_trace=False, resumable=False)
        >>> members = ProcessMembers(spec, shared, memory)  # two processes of a forkserver
        >>> members.started()
        >>> members.close()  # before the start: the page is aborted, the processes end
        >>> memory.exchange.aborted
        True
        >>> del memory; shared.release()
        """
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
