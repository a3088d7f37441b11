"""Ctrl-C (and SIGTERM, SIGHUP) as a flag read at task boundaries, never an exception in the middle of a step.

A run installs :class:`InterruptFlag` as the SIGINT handler (:func:`deferred_interrupt`) and asks
``requested()`` at each task boundary, where the state is whole.  The command line installs it
first thing, before the heavy imports, so that a Ctrl-C at any moment (while numba loads, or
inside one of its ctypes callbacks, which would swallow a KeyboardInterrupt) is seen by the run.

:func:`phase` is a test hook: with ``MESHNB_TEST_PHASES=FILE`` in the environment, the command
line (``held``: Ctrl-C is its flag from here; ``done``: the command is over) and the start-up of a
run append their phases there, so that a test can aim a Ctrl-C at each of them rather than at
fixed delays from the process's start.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from types import FrameType
from typing import Any, TypeVar

T = TypeVar("T")

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
"""The signals that stop a command as Ctrl-C does (exit 128 + the signal: 130, 143, 129)."""


class InterruptFlag:
    """A handler of the stop signals (:data:`STOP_SIGNALS`) that remembers: ``hit`` turns True and
    ``signum`` is the first signal's.  With ``raising`` (the commands that stop where they are) the
    first signal also raises KeyboardInterrupt; the next ones are only remembered, so that a second
    Ctrl-C cannot break the cleanup the first one started.

    Examples
    --------
    >>> import signal
    >>> from meshnb.interrupts import InterruptFlag
    >>> flag = InterruptFlag()
    >>> flag.hit, flag.exit_code
    (False, 130)
    >>> flag(signal.SIGTERM, None)  # as the OS would call it
    >>> flag.hit, flag.exit_code, flag.word
    (True, 143, 'terminated')
    >>> raising = InterruptFlag(raising=True)
    >>> try:
    ...     raising(signal.SIGINT, None)
    ... except KeyboardInterrupt:
    ...     print("stopped where it was")
    stopped where it was
    >>> raising(signal.SIGINT, None)  # a second Ctrl-C is only remembered
    """

    def __init__(self, raising: bool = False) -> None:
        self.hit = False
        self.signum: int | None = None
        self.raising = raising
        self.raised = False

    def __call__(self, signum: int, frame: FrameType | None) -> None:
        self.hit = True
        self.signum = self.signum or signum
        if self.raising and not self.raised:
            self.raised = True
            raise KeyboardInterrupt

    def install(self, signals: tuple[int, ...] = STOP_SIGNALS) -> dict[int, object]:  # (no typing: a light import)
        """Make this flag the handler of ``signals`` (main thread only); the previous handlers.

        Examples
        --------
        >>> import signal
        >>> from meshnb.interrupts import InterruptFlag
        >>> flag = InterruptFlag()
        >>> previous = flag.install((signal.SIGUSR1,))
        >>> signal.raise_signal(signal.SIGUSR1)
        >>> flag.hit, flag.signum == signal.SIGUSR1
        (True, True)
        >>> _ = signal.signal(signal.SIGUSR1, previous[signal.SIGUSR1])
        """
        return {s: signal.signal(s, self) for s in signals}

    @property
    def exit_code(self) -> int:
        """128 + the signal that stopped the run (130 for Ctrl-C, 143 SIGTERM, 129 SIGHUP)."""
        return 128 + (self.signum or signal.SIGINT)

    @property
    def word(self) -> str:
        """How the run's one-line message names the stop."""
        words = {int(signal.SIGTERM): "terminated", int(signal.SIGHUP): "hung up"}
        return words.get(int(self.signum or signal.SIGINT), "interrupted")


@contextmanager
def signals_left_to_main() -> Iterator[None]:
    """Block the stop signals in this thread while other threads are started (a library's: numpy's
    BLAS pool starts at ``import numpy``; a ``threading.Thread``; a :class:`WorkerPool`'s): they
    inherit the mask, so they never take one.  A stop signal that comes meanwhile waits and is
    handled on the way out.

    Examples
    --------
    >>> import signal
    >>> from meshnb.interrupts import signals_left_to_main
    >>> with signals_left_to_main():
    ...     signal.SIGHUP in signal.pthread_sigmask(signal.SIG_BLOCK, [])
    True
    >>> signal.SIGHUP in signal.pthread_sigmask(signal.SIG_BLOCK, [])
    False
    """
    before = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, before)


class WorkerPool(ThreadPoolExecutor):
    """A :class:`~concurrent.futures.ThreadPoolExecutor` whose threads leave every stop signal
    (:data:`STOP_SIGNALS`) to the main thread, from the moment they are born: the pool starts its
    threads inside ``submit``, which runs here under :func:`signals_left_to_main`, so that they
    inherit the blocked mask.  (An ``initializer`` that blocks them leaves a window between a
    thread's start and its first line: a loaded machine put a SIGHUP there.)

    A signal the kernel gives another thread has its C handler run there, and a thread that the
    machine's load delays between taking the signal and running that handler lets a later signal,
    taken by the main thread, be handled first: a SIGHUP then five Ctrl-C ended 130, not 129.  The
    main thread takes pending signals lowest-numbered first, so with every other thread blocking
    them the first of a burst is the one that is handled first.  Every pool of meshnb is one of
    these.

    Examples
    --------
    >>> import signal
    >>> from meshnb.interrupts import STOP_SIGNALS, WorkerPool
    >>> with WorkerPool(2) as pool:
    ...     masks = list(pool.map(lambda _: signal.pthread_sigmask(signal.SIG_BLOCK, []), range(4)))
    >>> all(set(STOP_SIGNALS) <= m for m in masks)
    True
    >>> signal.SIGINT in signal.pthread_sigmask(signal.SIG_BLOCK, [])  # the main thread's unchanged
    False
    """

    def submit(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> Future[T]:
        """Submit ``fn(*args, **kwargs)``; a thread this starts is born with the stop signals blocked."""
        with signals_left_to_main():
            return super().submit(fn, *args, **kwargs)


def installed_flag() -> InterruptFlag | None:
    """The :class:`InterruptFlag` that handles SIGINT (the ``meshnb`` program's), if any.

    Examples
    --------
    >>> import signal
    >>> from meshnb.interrupts import InterruptFlag, installed_flag
    >>> installed_flag() is None  # Python's default handler
    True
    >>> previous = InterruptFlag().install((signal.SIGINT,))
    >>> isinstance(installed_flag(), InterruptFlag)
    True
    >>> _ = signal.signal(signal.SIGINT, previous[signal.SIGINT])
    """
    handler = signal.getsignal(signal.SIGINT)
    return handler if isinstance(handler, InterruptFlag) else None


class StopRequest:
    """``requested()`` as a run asks it at its task boundaries: True once Ctrl-C came.  A run that
    saw it but ends anyway (no boundary left before its end) calls :meth:`declined`, so that the
    Ctrl-C goes on to the caller (:func:`deferred_interrupt`).

    Examples
    --------
    >>> import signal
    >>> from meshnb.interrupts import InterruptFlag, StopRequest
    >>> flag = InterruptFlag()
    >>> requested = StopRequest(flag)
    >>> requested()
    False
    >>> flag(signal.SIGINT, None)
    >>> requested(), requested.seen
    (True, True)
    """

    def __init__(self, flag: InterruptFlag | None) -> None:
        self.flag = flag
        self.seen = False

    def __call__(self) -> bool:
        self.seen = self.seen or (self.flag is not None and self.flag.hit)
        return self.seen

    def declined(self) -> None:
        """The run ends at its planned end all the same: the Ctrl-C was not honoured.

        Examples
        --------
        >>> import signal
        >>> from meshnb.interrupts import InterruptFlag, StopRequest
        >>> flag = InterruptFlag()
        >>> requested = StopRequest(flag)
        >>> flag(signal.SIGINT, None)
        >>> requested()  # seen at a boundary, but the run was at its end anyway
        True
        >>> requested.declined()
        >>> requested.seen
        False
        """
        self.seen = False


@contextmanager
def deferred_interrupt() -> Iterator[StopRequest]:
    """Hold SIGINT until a task boundary: yields ``requested()`` (a :class:`StopRequest`).  Where a
    flag is already the handler (the CLI's), it is reused; off the main thread (which alone gets
    signals) nothing.  A Ctrl-C that the run did not stop for (it came after its last boundary)
    goes to the caller's handler on the way out (``KeyboardInterrupt`` for Python's default),
    rather than being lost.

    Examples
    --------
    >>> import signal
    >>> from meshnb.interrupts import deferred_interrupt
    >>> with deferred_interrupt() as requested:
    ...     signal.raise_signal(signal.SIGINT)  # no KeyboardInterrupt here: held for the boundary
    ...     print("at the boundary:", requested())
    at the boundary: True
    """
    if threading.current_thread() is not threading.main_thread():
        yield StopRequest(None)
        return
    previous = signal.getsignal(signal.SIGINT)
    if isinstance(previous, InterruptFlag):  # the program's: SIGTERM and SIGHUP are held as well
        raising, previous.raising = previous.raising, False
        request = StopRequest(previous)
        try:
            yield request
        finally:
            previous.raising = raising
        if raising and not previous.raised and (previous.hit or request.seen):
            previous.raised = True  # the stop is taken: later signals (another rank's, a second) only remembered
            if not request.seen:
                raise KeyboardInterrupt  # the caller's, not lost
        return
    flag = InterruptFlag()
    request = StopRequest(flag)
    signal.signal(signal.SIGINT, flag)
    try:
        yield request
    finally:
        signal.signal(signal.SIGINT, previous)
    if flag.hit and not request.seen:  # the caller's, not lost
        signal.raise_signal(signal.SIGINT)


def forget_handled_interrupt() -> None:
    """Clear CPython's note that a Ctrl-C went unhandled, once a command has handled it.

    A KeyboardInterrupt that leaves code run by ``exec`` of a string (``dataclasses`` builds every
    ``__init__`` so: an import that a Ctrl-C stops there) sets the interpreter's "unhandled
    KeyboardInterrupt" flag, even when a caller catches it.  Under ``python -m`` the interpreter
    then ends the process by SIGINT at exit (returncode -2), whatever ``sys.exit`` said.  Every
    ``exec`` of a string clears that flag as it starts, and an empty one leaves it clear.

    Examples
    --------
    >>> from meshnb.interrupts import forget_handled_interrupt
    >>> try:
    ...     exec("raise KeyboardInterrupt")
    ... except KeyboardInterrupt:
    ...     pass
    >>> forget_handled_interrupt()  # this process now ends by its exit code, not by SIGINT
    """
    exec("")


PHASES_ENV = "MESHNB_TEST_PHASES"


def phase(name: str) -> None:
    """Test hook: append ``name PID MONOTONIC`` to the file named by ``MESHNB_TEST_PHASES`` (the
    monotonic clock is the system's, comparable between processes); nothing without it.  With
    ``MESHNB_TEST_PHASE_PAUSE=NAME:SECONDS`` too, phase ``NAME`` then lasts that much longer (a
    window of a few ms that a test must hit).

    Examples
    --------
    >>> from meshnb.interrupts import phase
    >>> mp = getfixture("monkeypatch")
    >>> phases = getfixture("tmp_path") / "phases"
    >>> phase("held")  # no MESHNB_TEST_PHASES: nothing
    >>> mp.setenv("MESHNB_TEST_PHASES", str(phases))
    >>> phase("held"); phase("done")
    >>> [line.split()[0] for line in phases.read_text().splitlines()]
    ['held', 'done']
    """
    path = os.environ.get(PHASES_ENV)
    if not path:
        return
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, f"{name} {os.getpid()} {time.monotonic():.6f}\n".encode())  # one write: whole lines
    finally:
        os.close(fd)
    paused, _, seconds = os.environ.get(PHASES_ENV + "_PAUSE", "").partition(":")
    if paused == name:
        time.sleep(float(seconds))
