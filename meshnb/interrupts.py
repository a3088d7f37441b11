"""Ctrl-C as a flag read at task boundaries, never an exception in the middle of a step.

A run installs :class:`InterruptFlag` as the SIGINT handler (:func:`deferred_interrupt`) and asks
``requested()`` at each task boundary, where the state is whole.  The command line installs it
first thing, before the heavy imports, so that a Ctrl-C at any moment (while numba loads, or
inside one of its ctypes callbacks, which would swallow a KeyboardInterrupt) is seen by the run.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType


class InterruptFlag:
    """A SIGINT handler that only remembers: ``hit`` turns True."""

    def __init__(self) -> None:
        self.hit = False

    def __call__(self, signum: int, frame: FrameType | None) -> None:
        self.hit = True


@contextmanager
def deferred_interrupt() -> Iterator[Callable[[], bool]]:
    """Hold SIGINT until a task boundary: yields ``requested()``.  Where a flag is already the
    handler (the CLI's), it is reused; off the main thread (which alone gets signals) nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield lambda: False
        return
    previous = signal.getsignal(signal.SIGINT)
    if isinstance(previous, InterruptFlag):
        yield lambda: previous.hit
        return
    flag = InterruptFlag()
    signal.signal(signal.SIGINT, flag)
    try:
        yield lambda: flag.hit
    finally:
        signal.signal(signal.SIGINT, previous)
