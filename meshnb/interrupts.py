"""Ctrl-C (and SIGTERM, SIGHUP) as a flag read at task boundaries, never an exception mid-step.

A run installs :class:`InterruptFlag` as the SIGINT handler (:func:`deferred_interrupt`) and asks
``requested()`` at each task boundary, where the state is whole. The command line installs it
before the heavy imports, so that a Ctrl-C while numba loads (or inside a ctypes callback, which
would swallow a KeyboardInterrupt) is seen by the run. :func:`phase` is a test hook.
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
    """A handler of :data:`STOP_SIGNALS` that remembers (``hit``, the first ``signum``); with ``raising``
    the first signal also raises KeyboardInterrupt, later ones only remembered (a cleanup is not broken)."""

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

    def install(self, signals: tuple[int, ...] = STOP_SIGNALS) -> dict[int, object]:
        """Make this flag the handler of ``signals`` (main thread only); the previous handlers."""
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
    """Block the stop signals in this thread while other threads start (they inherit the mask); one
    that comes meanwhile is handled on the way out."""
    before = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, before)


class WorkerPool(ThreadPoolExecutor):
    """A ``ThreadPoolExecutor`` whose threads are born with :data:`STOP_SIGNALS` blocked (started in
    ``submit``, under :func:`signals_left_to_main`): every pool of meshnb."""

    def submit(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> Future[T]:
        """Submit ``fn(*args, **kwargs)``; a thread this starts is born with the stop signals blocked."""
        with signals_left_to_main():
            return super().submit(fn, *args, **kwargs)


def installed_flag() -> InterruptFlag | None:
    """The :class:`InterruptFlag` that handles SIGINT (the ``meshnb`` program's), if any."""
    handler = signal.getsignal(signal.SIGINT)
    return handler if isinstance(handler, InterruptFlag) else None


class StopRequest:
    """``requested()`` as a run asks it at its task boundaries: True once Ctrl-C came (:meth:`declined`:
    the run ends anyway, and the Ctrl-C goes on to the caller)."""

    def __init__(self, flag: InterruptFlag | None) -> None:
        self.flag = flag
        self.seen = False

    def __call__(self) -> bool:
        self.seen = self.seen or (self.flag is not None and self.flag.hit)
        return self.seen

    def declined(self) -> None:
        """The run ends at its planned end all the same: the Ctrl-C was not honoured."""
        self.seen = False


@contextmanager
def deferred_interrupt() -> Iterator[StopRequest]:
    """Hold SIGINT until a task boundary, yielding ``requested()`` (a :class:`StopRequest`); the CLI's flag
    is reused, off the main thread nothing installed, and a Ctrl-C not stopped for goes to the caller."""
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
    """Clear CPython's note that a Ctrl-C went unhandled (set by one leaving ``exec``'d code, such as
    ``dataclasses``' ``__init__``s, even when caught: ``python -m`` would end by SIGINT); an empty ``exec`` does."""
    exec("")


PHASES_ENV = "MESHNB_TEST_PHASES"


def phase(name: str) -> None:
    """Test hook: append ``name PID MONOTONIC`` to the file ``MESHNB_TEST_PHASES`` names (nothing without it);
    ``MESHNB_TEST_PHASES_PAUSE=NAME:SECONDS`` makes phase ``NAME`` last that much longer."""
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
