"""The driver around an engine: the loop over chunks of steps, progress, stops and the checkpoints' cadence.

:func:`drive` is the one loop of steps of every train backend, cluster member and sweep batch; an
engine (:class:`Engine`) brings the steps.  It imports only :mod:`.interrupts` (the CUDA host uses it too).
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
    """What a backend contributes to the driver: its steps."""

    def warm_up(self) -> object:
        """Load (or compile) the engine's kernels, so that their JIT stays out of the timing."""

    def advance(self, done: int, n: int) -> None:
        """Run the next ``n`` steps (``done`` steps are done: a boundary) and count them."""


@dataclass(frozen=True)
class Steps:
    """An :class:`Engine` made of two functions: ``step(done, n)`` and an optional ``warm()``."""

    step: Callable[[int, int], None]
    warm: Callable[[], object] = lambda: None

    def warm_up(self) -> object:
        """Call ``warm``."""
        return self.warm()

    def advance(self, done: int, n: int) -> None:
        """Call ``step``."""
        self.step(done, n)


def chunks_of(chunk: int) -> Callable[[int, int], int]:
    """``next_end`` for chunks of ``chunk`` steps, the last one cut at the end."""

    def next_end(done: int, steps: int) -> int:
        return min(done + chunk, steps)

    return next_end


class Cadence:
    """A deadline that comes back every ``every_s`` seconds from its last :meth:`restart` (infinite: never due)."""

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
    """When :func:`drive` saves: a :class:`Cadence`, or a deadline the members agreed on (the mpi backend's)."""

    def due(self) -> bool:
        """Whether a save is due at this boundary."""

    def restart(self) -> None:
        """A save was written: count again from now."""


@dataclass(frozen=True)
class Policy:
    """When a run stops (``should_stop()``) and saves (``cadence``), and ``after(done)`` each chunk."""

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
    """The one loop of steps: ``engine`` in chunks to ``next_end(done, steps)`` until ``steps`` or ``should_stop()``.

    ``at_boundary(done)`` at each boundary, ``after(done)`` after each chunk, ``save(done)`` when ``cadence`` is
    due (never at the end: the caller saves with the result); returns the steps done.
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
    """A tqdm bar on stderr counting steps (``desc`` before it), or None."""
    if not enabled:
        return None
    from tqdm import tqdm

    return tqdm(total=total, unit="step", unit_scale=True, mininterval=0.25, smoothing=0.1, leave=False, desc=desc)


class Frame:
    """What surrounds a run's steps (made by :func:`frame`): a progress bar, the stop request, and the timers.

    ``show(done)`` moves the bar; ``requested()`` says whether a stop was asked for; :meth:`warm`
    times an engine's warm-up (``first_call``), :meth:`start` and :meth:`stop` the steps.
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
        """The steps ended now (the first call only); their seconds."""
        if self.ended is None:
            self.ended = time.perf_counter()
        return self.ended - self.began


@contextmanager
def frame(total: int, enabled: bool, desc: str | None = None) -> Iterator[Frame]:
    """The :class:`Frame` of a run of ``total`` steps: a bar (if ``enabled``, closed however it ends), Ctrl-C held."""
    bar = progress_bar(total, enabled, desc)
    try:
        with deferred_interrupt() as requested:
            yield Frame(bar, requested)
    finally:
        if bar is not None:
            bar.close()
