"""The meeting points of a ``threads`` or ``processes`` cluster, in cluster memory (:mod:`.memory`):
the start (every member ready, then all go together), pauses at a common task boundary (the end
of each of the driver's chunks: :class:`~meshnb.backends.local.Lockstep`), a stop there, and the
end.  The members call one side of :class:`Control`, the coordinator (the driver's engine,
:mod:`.local`) the other; every wait is bounded by the run's ``give_up_s``.
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
    :class:`~meshnb.backends.memory.SegmentLock`.

    Examples
    --------
    >>> import threading
    >>> from meshnb.backends.control import Lock
    >>> lock: Lock = threading.Lock()  # a Lock, as Control takes it
    >>> lock.acquire(True, 1.0)
    True
    >>> lock.release()
    """

    def acquire(self, block: bool = ..., timeout: float = ...) -> bool:
        """Take the lock within ``timeout`` seconds; whether it was taken.

        Examples
        --------
        >>> import threading
        >>> lock = threading.Lock()
        >>> lock.acquire(True, 0.1), lock.acquire(True, 0.01)  # the second waits 10 ms and gives up
        (True, False)
        """

    def release(self) -> None:
        """Let the lock go.

        Examples
        --------
        >>> import threading
        >>> lock = threading.Lock()
        >>> _ = lock.acquire()
        >>> lock.release()
        >>> lock.locked()
        False
        """


class Control:
    """The members' and the coordinator's side of the meeting points, in cluster memory.

    ``waiter`` is how members wait (and the coordinator wakes them); ``wake`` tells the
    coordinator a member's state changed; ``alive`` says whether the coordinator still runs.

    Examples
    --------
    >>> import threading
    >>> import numpy as np
    >>> from meshnb.backends.control import Control
    >>> from meshnb.backends.memory import FINISHED, RUNNING, ClusterMemory, memory_bytes
    >>> from meshnb.exchange import BlockingWaiter
    >>> memory = ClusterMemory(np.zeros(memory_bytes(2), np.uint8), 2, create=True)
    >>> control = Control(memory, threading.Lock(), BlockingWaiter(), give_up_s=5.0)
    >>> def member(k):
    ...     control.ready(k)  # waits for the coordinator's start
    ...     control.finish(k, 64, save=lambda: None)
    >>> threads = [threading.Thread(target=member, args=(k,)) for k in range(2)]
    >>> for t in threads:
    ...     t.start()
    >>> BlockingWaiter().wait(lambda: control.all_in(RUNNING), 5.0)  # every member ready
    True
    >>> control.start()
    >>> for t in threads:
    ...     t.join()
    >>> control.all_in(FINISHED), memory.progress.tolist()
    (True, [64, 64])
    """

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
        """End this member if the run is being torn down.

        Examples
        --------
        >>> import threading
        >>> import numpy as np
        >>> from meshnb.backends.control import Control
        >>> from meshnb.backends.memory import ClusterMemory, memory_bytes
        >>> from meshnb.exchange import BlockingWaiter, ExchangeAborted
        >>> memory = ClusterMemory(np.zeros(memory_bytes(1), np.uint8), 1, create=True)
        >>> control = Control(memory, threading.Lock(), BlockingWaiter(), 1.0, alive=lambda: False)
        >>> try:
        ...     control.check(0)
        ... except ExchangeAborted as e:
        ...     print(e)
        system 0: the coordinator is gone
        """
        if self.m.exchange.aborted:
            raise ExchangeAborted(f"system {k}: the run was aborted")
        if not self.alive():
            raise ExchangeAborted(f"system {k}: the coordinator is gone")

    def ready(self, k: int) -> bool:
        """Member ``k`` is ready: say so, and wait for the coordinator's start
        (:class:`~meshnb.results.ClusterError` after ``give_up_s``); returns True to stop at
        step 0 (a stop asked for before the start).

        Examples
        --------
        >>> import threading
        >>> import numpy as np
        >>> from meshnb.backends.control import Control
        >>> from meshnb.backends.memory import ClusterMemory, memory_bytes
        >>> from meshnb.exchange import BlockingWaiter
        >>> from meshnb.results import ClusterError
        >>> memory = ClusterMemory(np.zeros(memory_bytes(1), np.uint8), 1, create=True)
        >>> control = Control(memory, threading.Lock(), BlockingWaiter(), give_up_s=0.05)
        >>> try:
        ...     control.ready(0)  # no coordinator starts the run
        ... except ClusterError as e:
        ...     print(e)
        system 0: waited 0.05 s for the other members to start
        """
        self.m.state[k] = RUNNING
        self.wake()
        self._wait(k, lambda: bool(self.m.go[0]), "the other members to start")
        return bool(self.m.stop[0])

    def at_boundary(self, k: int, done: int, save: Callable[[], None]) -> bool:
        """A member passed a task boundary with no round pending; returns True to stop there.

        Examples
        --------
        >>> import threading
        >>> import numpy as np
        >>> from meshnb.backends.control import Control
        >>> from meshnb.backends.memory import ClusterMemory, memory_bytes
        >>> from meshnb.exchange import BlockingWaiter
        >>> memory = ClusterMemory(np.zeros(memory_bytes(1), np.uint8), 1, create=True)
        >>> control = Control(memory, threading.Lock(), BlockingWaiter(), give_up_s=5.0)
        >>> control.at_boundary(0, 64, save=lambda: None), memory.progress.tolist()  # no pause asked: go on
        (False, [64])
        >>> memory.go[0], memory.target[0] = 1, 128  # started; the coordinator asks for a pause at step 128
        >>> saved = []
        >>> member = lambda: saved.append(control.at_boundary(0, 128, save=lambda: saved.append("saved")))
        >>> t = threading.Thread(target=member)
        >>> t.start()
        >>> BlockingWaiter().wait(lambda: control.paused_at(128), 5.0)
        True
        >>> control.go_on(stop=True); t.join()  # the driver stops the run there
        >>> saved  # saved at the pause, then told to stop
        ['saved', True]
        """
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
        """The task boundary after ``done`` where the coordinator pauses the members (0: none
        before the end): a member's chunk of tasks ends there.  It moves only while every member
        is paused (:meth:`go_on`), so a running member reads it once a chunk.

        Examples
        --------
        >>> import threading
        >>> import numpy as np
        >>> from meshnb.backends.control import Control
        >>> from meshnb.backends.memory import ClusterMemory, memory_bytes
        >>> from meshnb.exchange import BlockingWaiter
        >>> memory = ClusterMemory(np.zeros(memory_bytes(1), np.uint8), 1, create=True)
        >>> control = Control(memory, threading.Lock(), BlockingWaiter(), 1.0)
        >>> memory.target[0] = 128
        >>> control.pause_at(64), control.pause_at(128)
        (128, 0)
        """
        target = int(self.m.target[0])
        return target if target > done else 0

    def finish(self, k: int, done: int, save: Callable[[], None]) -> None:
        """Member ``k`` is done after ``done`` steps: save, then say FINISHED.

        Examples
        --------
        >>> import threading
        >>> import numpy as np
        >>> from meshnb.backends.control import Control
        >>> from meshnb.backends.memory import FINISHED, ClusterMemory, memory_bytes
        >>> from meshnb.exchange import BlockingWaiter
        >>> memory = ClusterMemory(np.zeros(memory_bytes(2), np.uint8), 2, create=True)
        >>> control = Control(memory, threading.Lock(), BlockingWaiter(), 1.0)
        >>> control.finish(1, 4096, save=lambda: None)
        >>> control.laggards(FINISHED), memory.progress.tolist()
        ([0], [0, 4096])
        """
        save()
        self.m.progress[k] = done
        self.m.state[k] = FINISHED
        self.wake()

    # The coordinator's side.
    def all_in(self, state: int) -> bool:
        """Whether every member is in ``state`` (``RUNNING``, ``PAUSED``, ``FINISHED``).

        Examples
        --------
        >>> import threading
        >>> import numpy as np
        >>> from meshnb.backends.control import Control
        >>> from meshnb.backends.memory import RUNNING, ClusterMemory, memory_bytes
        >>> from meshnb.exchange import BlockingWaiter
        >>> memory = ClusterMemory(np.zeros(memory_bytes(2), np.uint8), 2, create=True)
        >>> control = Control(memory, threading.Lock(), BlockingWaiter(), 1.0)
        >>> memory.state[0] = RUNNING
        >>> control.all_in(RUNNING)
        False
        >>> memory.state[1] = RUNNING
        >>> control.all_in(RUNNING)
        True
        """
        return bool((self.m.state == state).all())

    def start(self, target: int = 0, stop: bool = False) -> None:
        """Let every member that is ready go (they start together), to pause at task boundary
        ``target`` (0: none before the end; ``stop``: stop at step 0, before any step).

        Examples
        --------
        >>> import threading
        >>> import numpy as np
        >>> from meshnb.backends.control import Control
        >>> from meshnb.backends.memory import ClusterMemory, memory_bytes
        >>> from meshnb.exchange import BlockingWaiter
        >>> memory = ClusterMemory(np.zeros(memory_bytes(1), np.uint8), 1, create=True)
        >>> control = Control(memory, threading.Lock(), BlockingWaiter(), 5.0)
        >>> t = threading.Thread(target=control.ready, args=(0,))
        >>> t.start()
        >>> control.start(); t.join()
        >>> int(memory.go[0]), t.is_alive()
        (1, False)
        """
        self.go_on(target, stop)

    def paused_at(self, target: int) -> bool:
        """Whether every member is paused at task boundary ``target``.

        Examples
        --------
        >>> import threading
        >>> import numpy as np
        >>> from meshnb.backends.control import Control
        >>> from meshnb.backends.memory import PAUSED, ClusterMemory, memory_bytes
        >>> from meshnb.exchange import BlockingWaiter
        >>> memory = ClusterMemory(np.zeros(memory_bytes(2), np.uint8), 2, create=True)
        >>> control = Control(memory, threading.Lock(), BlockingWaiter(), 1.0)
        >>> memory.state[:], memory.progress[:] = PAUSED, [128, 64]  # member 1 paused at an earlier boundary
        >>> control.paused_at(128), control.paused_at(64)
        (False, False)
        """
        return self.all_in(PAUSED) and bool((self.m.progress == target).all())

    def go_on(self, target: int = 0, stop: bool = False) -> None:
        """Release the members paused at a boundary (the driver is done with it) to pause again at
        task boundary ``target`` (0: none, they run to the end), or, with ``stop``, to stop there.

        Examples
        --------
        >>> import threading
        >>> import numpy as np
        >>> from meshnb.backends.control import Control
        >>> from meshnb.backends.memory import ClusterMemory, memory_bytes
        >>> from meshnb.exchange import BlockingWaiter
        >>> memory = ClusterMemory(np.zeros(memory_bytes(1), np.uint8), 1, create=True)
        >>> control = Control(memory, threading.Lock(), BlockingWaiter(), 1.0)
        >>> memory.go[0], memory.target[0] = 1, 128  # started, paused at step 128
        >>> control.go_on(192)  # on to the next pause
        >>> int(memory.target[0]), int(memory.release[0])
        (192, 1)
        """
        with self._locked(None):
            self.m.target[0] = target
            self.m.stop[0] = int(stop)
            if self.m.go[0]:
                self.m.release[0] += 1
            else:
                self.m.go[0] = 1  # the start
        self.waiter.notify()

    def laggards(self, state: int) -> list[int]:
        """The members not yet in ``state`` (a message names them when a wait gives up).

        Examples
        --------
        >>> import threading
        >>> import numpy as np
        >>> from meshnb.backends.control import Control
        >>> from meshnb.backends.memory import FINISHED, ClusterMemory, memory_bytes
        >>> from meshnb.exchange import BlockingWaiter
        >>> memory = ClusterMemory(np.zeros(memory_bytes(3), np.uint8), 3, create=True)
        >>> memory.state[1] = FINISHED
        >>> Control(memory, threading.Lock(), BlockingWaiter(), 1.0).laggards(FINISHED)
        [0, 2]
        """
        return [k for k in range(self.m.n) if int(self.m.state[k]) != state]
