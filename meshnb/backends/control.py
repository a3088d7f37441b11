"""The meeting points of a ``threads`` or ``processes`` cluster, in cluster memory (:mod:`.memory`):
the start (every member ready, then all go together), pauses at a common task boundary (a
checkpoint, or Ctrl-C's stop), and the end.  The members call one side of :class:`Control`, the
coordinator (:mod:`.local`) the other; every wait is bounded by the run's ``give_up_s``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Protocol

from ..exchange import ExchangeAborted, Waiter
from ..options import Plan
from ..results import ClusterError
from .memory import FINISHED, PAUSED, RUNNING, ClusterMemory


class Lock(Protocol):
    def acquire(self, block: bool = ..., timeout: float = ...) -> bool: ...
    def release(self) -> None: ...


class Control:
    """The members' and the coordinator's side of the meeting points, in cluster memory.

    ``waiter`` is how members wait (and the coordinator wakes them); ``wake`` tells the
    coordinator a member's state changed; ``alive`` says whether the coordinator still runs."""

    def __init__(
        self,
        memory: ClusterMemory,
        lock: Lock,
        waiter: Waiter,
        give_up_s: float,
        wake: Callable[[], None] = lambda: None,
        alive: Callable[[], bool] = lambda: True,
    ) -> None:
        self.m, self.lock, self.waiter, self.give_up_s, self.wake, self.alive = (
            memory,
            lock,
            waiter,
            give_up_s,
            wake,
            alive,
        )

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
            target = max(plan.next_boundary(spt, int(p)) for p in m.progress)
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
