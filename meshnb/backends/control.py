"""The meeting points of a ``threads`` or ``processes`` cluster, in cluster memory (:mod:`.memory`):
the start, the pauses at a common task boundary, a stop there, and the end; every wait bounded by
``give_up_s``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Protocol

from ..exchange import ExchangeAborted, Waiter
from ..results import ClusterError
from .memory import FINISHED, PAUSED, RUNNING, ClusterMemory


class Lock(Protocol):
    """What :class:`Control` locks with: a ``threading.Lock``, a ``multiprocessing`` lock, or a
    :class:`~meshnb.backends.memory.SegmentLock`."""

    def acquire(self, block: bool = ..., timeout: float = ...) -> bool:
        """Take the lock within ``timeout`` seconds; whether it was taken."""

    def release(self) -> None:
        """Let the lock go."""


class Control:
    """The members' and the coordinator's side of the meeting points, in cluster memory."""

    def __init__(
        self,
        memory: ClusterMemory,
        lock: Lock,
        waiter: Waiter,
        give_up_s: float,
        wake: Callable[[], None] = lambda: None,
        alive: Callable[[], bool] = lambda: True,
    ) -> None:
        self.m, self.lock, self.waiter, self.give_up_s = memory, lock, waiter, give_up_s
        self.wake, self.alive = wake, alive

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

    def ready(self, k: int) -> bool:
        """Member ``k`` is ready: say so and wait (bounded) for the start; True to stop at step 0."""
        self.m.state[k] = RUNNING
        self.wake()
        self._wait(k, lambda: bool(self.m.go[0]), "the other members to start")
        return bool(self.m.stop[0])

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

    def pause_at(self, done: int) -> int:
        """The task boundary after ``done`` where the members pause (0: none); it moves only while all are paused."""
        target = int(self.m.target[0])
        return target if target > done else 0

    def finish(self, k: int, done: int, save: Callable[[], None]) -> None:
        """Member ``k`` is done after ``done`` steps: save, then say FINISHED."""
        save()
        self.m.progress[k] = done
        self.m.state[k] = FINISHED
        self.wake()

    # The coordinator's side.
    def all_in(self, state: int) -> bool:
        """Whether every member is in ``state`` (``RUNNING``, ``PAUSED``, ``FINISHED``)."""
        return bool((self.m.state == state).all())

    def start(self, target: int = 0, stop: bool = False) -> None:
        """Let the ready members go together, to pause at ``target`` (0: none; ``stop``: stop at step 0)."""
        self.go_on(target, stop)

    def paused_at(self, target: int) -> bool:
        """Whether every member is paused at task boundary ``target``."""
        return self.all_in(PAUSED) and bool((self.m.progress == target).all())

    def go_on(self, target: int = 0, stop: bool = False) -> None:
        """Release the paused members to pause again at ``target`` (0: none), or, with ``stop``, to stop there."""
        with self._locked(None):
            self.m.target[0] = target
            self.m.stop[0] = int(stop)
            if self.m.go[0]:
                self.m.release[0] += 1
            else:
                self.m.go[0] = 1  # the start
        self.waiter.notify()

    def laggards(self, state: int) -> list[int]:
        """The members not yet in ``state`` (a message names them when a wait gives up)."""
        return [k for k in range(self.m.n) if int(self.m.state[k]) != state]
