"""The driver around an engine: the loop over chunks of steps, the progress bar, stops (Ctrl-C,
SIGTERM: held to the next boundary), the checkpoints' cadence and the timers.

An *engine* is all a backend contributes: :class:`Engine`, whose ``warm_up()`` loads (or
compiles) its kernels and whose ``advance(done, n)`` runs the next ``n`` steps of its members or
systems (``done`` are done).  :func:`drive` owns the rest: at every boundary (the start, and after
each chunk) ``at_boundary(done)`` (SPEC 10's SET_LRs), then the end or a stop, else the next
chunk, then ``after(done)`` (progress) and, when the :class:`Cadence` says so, ``save(done)``.
:class:`Frame` is what surrounds a run: its bar, its stop request, and its two timers (the first
call's seconds, kept out of the steps' seconds).

When it saves and stops is a :class:`Policy`: a stop request and a :class:`Deadline` (a
:class:`Cadence`, or one the members agree on: the mpi backend's flags).

The loops of steps that are this one: every train backend's (:func:`meshnb.host.train_run`: the
single, fused and CUDA backends on SPEC 10's host loop, the threads and processes backends'
lockstep paused at each chunk's end, :class:`meshnb.backends.local.Lockstep`, and an MPI rank's
tasks), each cluster member's tasks (:func:`meshnb.host.run_steps`), and each batch of a sweep
(its chunks on the CPU, on the CUDA image, on an MPI rank).  A sweep's batches run in turn in the
one loop over them, :func:`meshnb.sweeps.run.parts` (its progress, a stop held to a chunk
boundary), with one ending (:func:`meshnb.sweeps.run.kept`, :func:`meshnb.sweeps.run.interrupted`).
This module sits in the base layer (it imports only :mod:`.interrupts`) so that the CUDA image's
host code, on the program's level, drives its launches with it too.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Protocol

from .interrupts import StopRequest, deferred_interrupt, phase


class Engine(Protocol):
    """What a backend contributes to the driver: its steps.

    Examples
    --------
    >>> ran = []
    >>> drive(Steps(lambda done, n: ran.append((done, n))), 10, chunks_of(4))
    10
    >>> ran
    [(0, 4), (4, 4), (8, 2)]
    """

    def warm_up(self) -> object:
        """Load (or compile) the engine's kernels, so that their JIT stays out of the timing."""

    def advance(self, done: int, n: int) -> None:
        """Run the next ``n`` steps (``done`` steps are done: a boundary) and count them."""


@dataclass(frozen=True)
class Steps:
    """An :class:`Engine` made of two functions (most engines are a closure over their arrays).

    Parameters
    ----------
    step : callable
        ``step(done, n)``: the engine's ``advance``.
    warm : callable, default none
        The engine's ``warm_up`` (nothing to load by default).

    Examples
    --------
    >>> Steps(lambda done, n: None).warm_up() is None
    True
    """

    step: Callable[[int, int], None]
    warm: Callable[[], object] = lambda: None

    def warm_up(self) -> object:
        """Call ``warm``."""
        return self.warm()

    def advance(self, done: int, n: int) -> None:
        """Call ``step``."""
        self.step(done, n)


def chunks_of(chunk: int) -> Callable[[int, int], int]:
    """``next_end`` for chunks of ``chunk`` steps, the last one cut at the end.

    Examples
    --------
    >>> [chunks_of(4)(done, 10) for done in (0, 4, 8)]
    [4, 8, 10]
    """

    def next_end(done: int, steps: int) -> int:
        return min(done + chunk, steps)

    return next_end


class Cadence:
    """A deadline that comes back every ``every_s`` seconds from its last :meth:`restart` (the
    checkpoints'); ``every_s`` infinite: never due.

    Examples
    --------
    >>> Cadence(0.0).due(), Cadence().due()
    (True, False)
    """

    def __init__(self, every_s: float = math.inf) -> None:
        self.every_s = every_s
        self.at = math.inf
        self.restart()

    def restart(self) -> None:
        """Count ``every_s`` again from now."""
        self.at = time.monotonic() + self.every_s

    def due(self) -> bool:
        """Whether ``every_s`` has passed since the last restart."""
        return time.monotonic() >= self.at


class Deadline(Protocol):
    """When :func:`drive` saves: a :class:`Cadence`, or a deadline the members agreed on (the mpi
    backend's: a checkpoint flag seen in a round by every rank).

    Examples
    --------
    >>> deadline: Deadline = Cadence(0.0)
    >>> deadline.due()
    True
    """

    def due(self) -> bool:
        """Whether a save is due at this boundary."""

    def restart(self) -> None:
        """A save was written: count again from now."""


@dataclass(frozen=True)
class Policy:
    """When a run's :func:`drive` stops and saves, and what it does after each chunk.

    Parameters
    ----------
    should_stop : callable
        Asked at each boundary (before the end): whether to stop there (Ctrl-C, held to it).
    cadence : Deadline
        When a checkpoint is due.
    after : callable, default none
        ``after(done)``, after each chunk, before the progress bar moves (the mpi backend raises
        its flags there).

    Examples
    --------
    >>> Policy(lambda: False, Cadence()).cadence.due()
    False
    """

    should_stop: Callable[[], bool]
    cadence: Deadline
    after: Callable[[int], None] | None = None


def drive(
    engine: Engine,
    steps: int,
    next_end: Callable[[int, int], int],
    *,
    at_boundary: Callable[[int], None] | None = None,
    after: Callable[[int], None] | None = None,
    should_stop: Callable[[], bool] | None = None,
    save: Callable[[int], None] | None = None,
    cadence: Deadline | None = None,
) -> int:
    """The one loop of steps: run ``engine`` from step 0 to ``steps`` in chunks; returns the steps done.

    At every boundary (the start, and after each chunk) ``at_boundary(done)`` runs, then the loop
    ends at ``steps`` or when ``should_stop()`` says so; otherwise ``engine.advance`` runs up to
    ``next_end(done, steps)``, then ``after(done)`` (progress) and, if ``cadence`` is due,
    ``save(done)`` (a checkpoint; never at the end, which the caller saves with the result).

    Parameters
    ----------
    engine : Engine
        The steps.
    steps : int
        The steps to run.
    next_end : callable
        ``next_end(done, steps)``: the next boundary, after ``done`` and at most ``steps``.
    at_boundary, after, should_stop, save : callable or None
        The hooks above.
    cadence : Deadline or None
        When ``save`` is due (None: never): a :class:`Cadence`, or a deadline agreed otherwise.

    Returns
    -------
    int
        The steps done: ``steps``, or fewer after a stop.

    Examples
    --------
    >>> seen = []
    >>> drive(Steps(lambda done, n: None), 10, chunks_of(3), after=seen.append, should_stop=lambda: len(seen) == 2)
    6
    >>> seen
    [3, 6]
    """
    done = 0
    while True:
        if at_boundary is not None:
            at_boundary(done)
        if done >= steps or (should_stop is not None and should_stop()):
            return done
        end = next_end(done, steps)
        engine.advance(done, end - done)
        if done == 0 < end:
            phase("stepped")  # test hook: the first chunk is done (a Ctrl-C from here stops a run past step 0)
        done = end
        if after is not None:
            after(done)
        if save is not None and cadence is not None and done < steps and cadence.due():
            save(done)
            cadence.restart()


def progress_bar(total: int, enabled: bool, desc: str | None = None) -> Any:
    """A tqdm bar on stderr counting steps (``desc`` before it), or None.

    Examples
    --------
    >>> progress_bar(10, False) is None
    True
    """
    if not enabled:
        return None
    from tqdm import tqdm

    return tqdm(total=total, unit="step", unit_scale=True, mininterval=0.25, smoothing=0.1, leave=False, desc=desc)


class Frame:
    """What surrounds a run's steps: a progress bar, the stop request, and the timers.

    Made by :func:`frame`.  ``show(done)`` moves the bar to ``done`` (nothing without one);
    ``requested()`` says whether a stop was asked for; :meth:`warm` times an engine's warm-up
    (``first_call``), :meth:`start` and :meth:`stop` the steps (``seconds``).

    Examples
    --------
    >>> with frame(10, False) as f:
    ...     _ = f.warm(Steps(lambda done, n: None))
    ...     f.start()
    ...     f.show(10)
    >>> f.first_call >= 0.0 and f.stop() >= 0.0, f.requested()
    (True, False)
    """

    def __init__(self, bar: Any, requested: StopRequest) -> None:
        self.bar, self.requested = bar, requested
        self.first_call = 0.0
        self.began = 0.0
        self.ended: float | None = None

    def show(self, done: int) -> None:
        """Move the bar to ``done`` steps."""
        if self.bar is not None:
            self.bar.update(done - self.bar.n)

    def warm(self, engine: Engine) -> float:
        """Warm ``engine`` up; the seconds it took (its JIT, kept out of the steps' time)."""
        began = time.perf_counter()
        engine.warm_up()
        self.first_call = time.perf_counter() - began
        return self.first_call

    def start(self) -> None:
        """The steps start now."""
        self.began, self.ended = time.perf_counter(), None

    def stop(self) -> float:
        """The steps ended now (the first call only: a frame's steps end once); their seconds."""
        if self.ended is None:
            self.ended = time.perf_counter()
        return self.ended - self.began


@contextmanager
def frame(total: int, enabled: bool, desc: str | None = None) -> Iterator[Frame]:
    """The :class:`Frame` of a run of ``total`` steps: a bar (shown if ``enabled``, closed however
    the steps end) and Ctrl-C held to the next boundary (:func:`~meshnb.interrupts.deferred_interrupt`).

    Examples
    --------
    >>> with frame(10, False) as f:
    ...     f.requested()
    False
    """
    bar = progress_bar(total, enabled, desc)
    try:
        with deferred_interrupt() as requested:
            yield Frame(bar, requested)
    finally:
        if bar is not None:
            bar.close()
