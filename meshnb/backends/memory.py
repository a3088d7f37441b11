"""Cluster memory of the ``threads`` and ``processes`` backends, laid out by :data:`CONTROL_LAYOUT`: the
exchange page, a control block, a block per member, in process memory or one :class:`SharedSegment`.
"""

from __future__ import annotations

import errno
import fcntl
import math
import mmap
import os
import secrets
import time
from collections.abc import Callable
from multiprocessing.shared_memory import SharedMemory

import numpy as np

from ..exchange import ExchangePage, PageField, exchange_bytes, field_array
from ..files import SHM_DIR, pid_alive
from ..program import COUNTER_NAMES
from ..sha256 import Sha256State
from ..view import VIEW_BYTES, View

CONTROL_LAYOUT: tuple[PageField, ...] = (
    PageField("GO", "page", 0, "u32", 1, "1 once every member is ready: they start together"),
    PageField("STOP", "page", 4, "u32", 1, "1: the members stop at TARGET instead of pausing"),
    PageField("RELEASE", "page", 8, "u32", 1, "bumped to let the members paused at TARGET go on"),
    PageField("TARGET", "page", 16, "u64", 1, "the task boundary where every member pauses (0: none)"),
    PageField("VIEW", "system", 0, "u8", VIEW_BYTES, "the system's view page"),
    PageField("COUNTERS", "system", 4096, "u64", 3, "INITS, STEPS, TIMEOUTS"),
    PageField("STATE", "system", 4120, "u32", 1, "0 starting, 1 running, 2 paused at TARGET, 3 finished"),
    PageField("PROGRESS", "system", 4128, "u64", 1, "the last task boundary passed (steps of this call)"),
    PageField("TRACE_LENGTH", "system", 4136, "u64", 1, "trace bytes hashed (runs that checkpoint)"),
    PageField("TRACE_H", "system", 4144, "u32", 8, "the trace hash's chaining value"),
    PageField("TRACE_TAIL", "system", 4176, "u8", 64, "trace bytes after the last whole block"),
)
CONTROL_BYTES = 64
MEMBER_BYTES = 4352
STARTING, RUNNING, PAUSED, FINISHED = 0, 1, 2, 3


def memory_bytes(n: int) -> int:
    """The bytes of cluster memory for ``n`` members: the exchange page, the control block, a block a member."""
    return exchange_bytes(n) + CONTROL_BYTES + n * MEMBER_BYTES


class ClusterMemory:
    """Live arrays over one buffer (process memory or shared memory) laid out as above."""

    def __init__(self, raw: np.ndarray, n: int, create: bool = False) -> None:
        self.n = n
        self.exchange = ExchangePage(raw, n, create)
        start = exchange_bytes(n)
        members = start + CONTROL_BYTES
        a: dict[str, np.ndarray] = {}
        for f in CONTROL_LAYOUT:
            a[f.name] = (
                field_array(raw, start, 0, 1, f) if f.scope == "page" else field_array(raw, members, MEMBER_BYTES, n, f)
            )
        self.go, self.stop, self.release, self.target = a["GO"], a["STOP"], a["RELEASE"], a["TARGET"]
        self.views, self.counters, self.state, self.progress = a["VIEW"], a["COUNTERS"], a["STATE"], a["PROGRESS"]
        self._trace_length, self._trace_h, self._trace_tail = a["TRACE_LENGTH"], a["TRACE_H"], a["TRACE_TAIL"]
        if create:
            raw[start : memory_bytes(n)] = 0

    def view(self, k: int) -> View:
        """Member ``k``'s view page, over its block of the memory (no copy)."""
        return View(self.views[k])

    def trace_state(self, k: int) -> Sha256State:
        """Member ``k``'s trace hash as saved in the memory (:class:`~meshnb.sha256.Sha256State`)."""
        length = int(self._trace_length[k])
        return Sha256State(
            tuple(int(x) for x in self._trace_h[k]), length, self._trace_tail[k, : length % 64].tobytes()
        )

    def save_trace_state(self, k: int, s: Sha256State) -> None:
        """Save member ``k``'s trace hash into the memory (a checkpoint reads it from there)."""
        self._trace_h[k] = s.h
        self._trace_tail[k, : len(s.tail)] = np.frombuffer(s.tail, dtype=np.uint8)
        self._trace_length[k] = s.length

    def counter_dict(self, k: int) -> dict[str, int]:
        """Member ``k``'s counters by name (SPEC 8's INITS, STEPS, TIMEOUTS)."""
        return {name: int(c) for name, c in zip(COUNTER_NAMES, self.counters[k])}


SEGMENT_PREFIX = "meshnb_"  # meshnb_<coordinator pid>_<random>


class SharedSegment:
    """The memory the coordinator shares with its member processes, released however the run ends."""

    def __init__(self, size: int) -> None:
        self.fd: int | None = None
        self.shm: SharedMemory | None = None
        if hasattr(os, "memfd_create"):
            self.fd = os.memfd_create("meshnb-cluster", os.MFD_CLOEXEC)
            os.ftruncate(self.fd, size)
            self._map: mmap.mmap | None = mmap.mmap(self.fd, size)
        else:
            remove_stale_segments()
            self.shm = SharedMemory(
                name=f"{SEGMENT_PREFIX}{os.getpid()}_{secrets.token_hex(6)}", create=True, size=size
            )
            self._map = None
        self._linked = self.shm is not None

    @property
    def name(self) -> str | None:
        return self.shm.name if self.shm is not None else None

    def array(self) -> np.ndarray:
        """The segment's bytes as a uint8 array (no copy)."""
        if self._map is not None:
            return np.frombuffer(self._map, dtype=np.uint8)
        assert self.shm is not None and self.shm.buf is not None
        return np.frombuffer(self.shm.buf, dtype=np.uint8)

    def unlink(self) -> None:
        """Remove a named segment's name once every member has mapped it (at most once; a memfd has none)."""
        if self._linked and self.shm is not None:
            self._linked = False
            self.shm.unlink()

    def release(self) -> None:
        """Let the memory go: unlink its name, close the mapping and the descriptor."""
        self.unlink()
        if self.shm is not None:
            close(self.shm)
        if self._map is not None:
            _close_map(self._map)
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


class SegmentLock:
    """A POSIX record lock on the memfd: nothing named, released by the kernel when its holder dies."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def acquire(self, block: bool = True, timeout: float = -1) -> bool:
        """Take the lock, waiting at most ``timeout`` s (-1: no bound) where ``block``; whether it was taken."""
        deadline = time.monotonic() + (timeout if timeout >= 0 else math.inf)
        nap = 20e-6
        while True:
            try:
                fcntl.lockf(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return True
            except OSError as e:
                if e.errno not in (errno.EAGAIN, errno.EACCES) or not block or time.monotonic() >= deadline:
                    if e.errno in (errno.EAGAIN, errno.EACCES):
                        return False
                    raise
            time.sleep(nap)  # held for a moment at a task boundary: a short nap, growing
            nap = min(2 * nap, 1e-3)

    def release(self) -> None:
        """Let the lock go (the kernel does so too when its holder dies)."""
        fcntl.lockf(self.fd, fcntl.LOCK_UN)


def attach(name: str | None, fd: int | None) -> tuple[np.ndarray, Callable[[], None]]:
    """A member's side of :class:`SharedSegment`: the memory as uint8, and how to let it go
    (the descriptor ``fd``, if given, stays open for :class:`SegmentLock` until then)."""
    if fd is not None:
        mapped = mmap.mmap(fd, 0)

        def release() -> None:
            _close_map(mapped)
            os.close(fd)

        return np.frombuffer(mapped, dtype=np.uint8), release
    # Attaching registers the name with the resource tracker this process shares with the
    # coordinator; the coordinator's unlink unregisters it (the tracker keeps a set).
    shm = SharedMemory(name=name)
    assert shm.buf is not None
    return np.frombuffer(shm.buf, dtype=np.uint8), lambda: close(shm)


def _close_map(mapped: mmap.mmap) -> None:
    try:
        mapped.close()
    except BufferError:
        pass  # a numpy view still holds it: it goes with the view


def remove_stale_segments(directory: str = SHM_DIR) -> list[str]:
    """Unlink the meshnb segments whose coordinator is no longer alive; returns their names."""
    removed: list[str] = []
    try:
        names = os.listdir(directory)
    except OSError:
        return removed  # no /dev/shm on this system: segments live elsewhere, the tracker owns them
    for name in names:
        pid_text = name[len(SEGMENT_PREFIX) :].partition("_")[0]
        if not name.startswith(SEGMENT_PREFIX) or not pid_text.isdigit() or pid_alive(int(pid_text)):
            continue
        try:
            os.unlink(os.path.join(directory, name))
            removed.append(name)
        except OSError:
            pass  # another run removed it first, or it is not ours to remove
    return removed


def close(shm: SharedMemory) -> None:
    """Close a segment even while a numpy view of it lives on (the mapping then goes with the view)."""
    try:
        shm.close()
    except BufferError:
        shm._buf = shm._mmap = None  # type: ignore[attr-defined]
        shm.close()
