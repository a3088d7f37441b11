"""Cluster memory of the ``threads`` and ``processes`` backends: the exchange page, then a control
block, then one block per member (its view, counters, state, and its trace hash's state), laid
out by one table, in process memory or in one shared segment (:class:`SharedSegment`: an anonymous
``memfd`` on Linux, a named ``multiprocessing.shared_memory`` segment elsewhere).
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
from ..files import pid_alive
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
    """The bytes of cluster memory for ``n`` members: the exchange page, the control block, a block a member.

    Examples
    --------
    >>> from meshnb.backends.memory import CONTROL_BYTES, MEMBER_BYTES, memory_bytes
    >>> from meshnb.exchange import exchange_bytes
    >>> memory_bytes(2), memory_bytes(2) == exchange_bytes(2) + CONTROL_BYTES + 2 * MEMBER_BYTES
    (9088, True)
    """
    return exchange_bytes(n) + CONTROL_BYTES + n * MEMBER_BYTES


class ClusterMemory:
    """Live arrays over one buffer (process memory or shared memory) laid out as above.

    Examples
    --------
    >>> import numpy as np
    >>> from meshnb.backends.memory import ClusterMemory, memory_bytes
    >>> raw = np.full(memory_bytes(2), 0xFF, np.uint8)
    >>> m = ClusterMemory(raw, 2, create=True)  # zeroed, laid out by CONTROL_LAYOUT
    >>> m.views.shape, m.state.tolist(), m.exchange.counters.tolist(), int(m.go[0])
    ((2, 4096), [0, 0], [0, 0], 0)
    >>> m.state[1] = 3  # member 1 finished: the word in raw, where every process sees it
    >>> ClusterMemory(raw, 2).state.tolist()
    [0, 3]
    """

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
        """Member ``k``'s view page, over its block of the memory (no copy).

        Examples
        --------
        >>> import numpy as np
        >>> from meshnb.backends.memory import ClusterMemory, memory_bytes
        >>> m = ClusterMemory(np.zeros(memory_bytes(2), np.uint8), 2, create=True)
        >>> m.view(1).set_word("LR", 0x3F000000)
        >>> hex(m.view(1).word("LR")), hex(m.view(0).word("LR"))
        ('0x3f000000', '0x0')
        """
        return View(self.views[k])

    def trace_state(self, k: int) -> Sha256State:
        """Member ``k``'s trace hash as saved in the memory (:class:`~meshnb.sha256.Sha256State`).

        Examples
        --------
        >>> import numpy as np
        >>> from meshnb.backends.memory import ClusterMemory, memory_bytes
        >>> m = ClusterMemory(np.zeros(memory_bytes(1), np.uint8), 1, create=True)
        >>> m.trace_state(0).length, m.trace_state(0).tail
        (0, b'')
        """
        length = int(self._trace_length[k])
        return Sha256State(
            tuple(int(x) for x in self._trace_h[k]), length, self._trace_tail[k, : length % 64].tobytes()
        )

    def save_trace_state(self, k: int, s: Sha256State) -> None:
        """Save member ``k``'s trace hash into the memory (a checkpoint reads it from there).

        Examples
        --------
        >>> import hashlib
        >>> import numpy as np
        >>> from meshnb.backends.memory import ClusterMemory, memory_bytes
        >>> from meshnb.sha256 import Sha256
        >>> m = ClusterMemory(np.zeros(memory_bytes(2), np.uint8), 2, create=True)
        >>> hasher = Sha256()
        >>> hasher.update(bytes(100))
        >>> m.save_trace_state(1, hasher.state())
        >>> resumed = Sha256(m.trace_state(1))  # another process, reading the same memory
        >>> resumed.update(b"more")
        >>> resumed.hexdigest() == hashlib.sha256(bytes(100) + b"more").hexdigest()
        True
        """
        self._trace_h[k] = s.h
        self._trace_tail[k, : len(s.tail)] = np.frombuffer(s.tail, dtype=np.uint8)
        self._trace_length[k] = s.length

    def counter_dict(self, k: int) -> dict[str, int]:
        """Member ``k``'s counters by name (SPEC 8's INITS, STEPS, TIMEOUTS).

        Examples
        --------
        >>> import numpy as np
        >>> from meshnb.backends.memory import ClusterMemory, memory_bytes
        >>> m = ClusterMemory(np.zeros(memory_bytes(1), np.uint8), 1, create=True)
        >>> m.counters[0] = [1, 4096, 0]
        >>> m.counter_dict(0)
        {'inits': 1, 'steps': 4096, 'timeouts': 0}
        """
        return {name: int(c) for name, c in zip(COUNTER_NAMES, self.counters[k])}


SEGMENT_PREFIX = "meshnb_"  # meshnb_<coordinator pid>_<random>
SHM_DIR = "/dev/shm"


class SharedSegment:
    """The memory the coordinator shares with its member processes, released however the run ends.

    On Linux it is an anonymous ``memfd``: it has no name, the members get its file descriptor
    over their pipe, and it is gone with the last process that maps it, so nothing can be left
    behind, even by a SIGKILL of the whole process group.  Elsewhere it is a named
    ``multiprocessing.shared_memory`` segment, unlinked as soon as every member has mapped it
    (:meth:`unlink`), else at :meth:`release`; creating one first removes the segments of
    coordinators that died before they could.

    Examples
    --------
    >>> import os
    >>> from meshnb.backends.memory import SharedSegment, attach
    >>> segment = SharedSegment(4096)
    >>> mine = segment.array()
    >>> theirs, let_go = attach(segment.name, os.dup(segment.fd))  # as a member attaches: its own descriptor
    >>> mine[0] = 7
    >>> int(theirs[0]), segment.name is None  # a memfd on Linux: no name to leave behind
    (7, True)
    >>> del mine, theirs
    >>> let_go(); segment.release()
    """

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
        """The segment's bytes as a uint8 array (no copy).

        Examples
        --------
        >>> from meshnb.backends.memory import SharedSegment
        >>> segment = SharedSegment(8192)
        >>> a = segment.array()
        >>> a.shape, a.dtype.name, int(a.sum())
        ((8192,), 'uint8', 0)
        >>> del a
        >>> segment.release()
        """
        if self._map is not None:
            return np.frombuffer(self._map, dtype=np.uint8)
        assert self.shm is not None and self.shm.buf is not None
        return np.frombuffer(self.shm.buf, dtype=np.uint8)

    def unlink(self) -> None:
        """Remove a named segment's name once every member has mapped it (a memfd has none: nothing to do).

        Examples
        --------
        >>> from meshnb.backends.memory import SharedSegment
        >>> segment = SharedSegment(4096)
        >>> segment.unlink(); segment.unlink()  # at most once, and harmless without a name
        >>> segment.release()
        """
        if self._linked and self.shm is not None:
            self._linked = False
            self.shm.unlink()

    def release(self) -> None:
        """Let the memory go: unlink its name, close the mapping and the descriptor.

        Examples
        --------
        >>> import os
        >>> from meshnb.backends.memory import SharedSegment
        >>> segment = SharedSegment(4096)
        >>> fd = segment.fd
        >>> segment.release()
        >>> segment.fd is None, fd is None or not os.path.exists(f"/proc/self/fd/{fd}")
        (True, True)
        """
        self.unlink()
        if self.shm is not None:
            close(self.shm)
        if self._map is not None:
            try:
                self._map.close()
            except BufferError:
                pass  # a numpy view still holds it (an error's traceback): it goes with the view
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


class SegmentLock:
    """A lock between the coordinator and its member processes with nothing named: a POSIX
    record lock on the memfd (per process; the kernel releases it when its holder dies).

    Examples
    --------
    >>> import os
    >>> from meshnb.backends.memory import SegmentLock
    >>> fd = os.memfd_create("example")
    >>> os.ftruncate(fd, 4096)
    >>> lock = SegmentLock(fd)
    >>> lock.acquire(), lock.acquire(False)  # a record lock is per process: this one holds it already
    (True, True)
    >>> lock.release(); os.close(fd)
    """

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def acquire(self, block: bool = True, timeout: float = -1) -> bool:
        """Take the lock, waiting at most ``timeout`` seconds (-1: as long as it takes) where
        ``block``; whether it was taken.

        Examples
        --------
        >>> import os, subprocess, sys
        >>> from meshnb.backends.memory import SegmentLock
        >>> fd = os.memfd_create("example")
        >>> lock = SegmentLock(fd)
        >>> lock.acquire()
        True
        >>> take = "import fcntl, sys; fcntl.lockf(int(sys.argv[1]), fcntl.LOCK_EX | fcntl.LOCK_NB)"
        >>> other = subprocess.run([sys.executable, "-c", take, str(fd)], pass_fds=[fd], capture_output=True, text=True)
        >>> other.returncode, other.stderr.splitlines()[-1]  # another process is refused while this one holds it
        (1, 'BlockingIOError: [Errno 11] Resource temporarily unavailable')
        >>> lock.release(); os.close(fd)
        """
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
        """Let the lock go (the kernel does so too when its holder dies).

        Examples
        --------
        >>> import os
        >>> from meshnb.backends.memory import SegmentLock
        >>> fd = os.memfd_create("example")
        >>> lock = SegmentLock(fd)
        >>> lock.acquire()
        True
        >>> lock.release()
        >>> lock.acquire(False)  # free again
        True
        >>> lock.release(); os.close(fd)
        """
        fcntl.lockf(self.fd, fcntl.LOCK_UN)


def attach(name: str | None, fd: int | None) -> tuple[np.ndarray, Callable[[], None]]:
    """A member's side of :class:`SharedSegment`: the memory as uint8, and how to let it go
    (the descriptor ``fd``, if given, stays open for :class:`SegmentLock` until then).

    Examples
    --------
    >>> from meshnb.backends.memory import SharedSegment, attach
    >>> segment = SharedSegment(4096)
    >>> segment.array()[:4] = [1, 2, 3, 4]
    >>> import os
    >>> seen, let_go = attach(segment.name, os.dup(segment.fd))  # the member's copy of the descriptor
    >>> seen[:4].tolist()
    [1, 2, 3, 4]
    >>> del seen
    >>> let_go(); segment.release()
    """
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
    """Unlink the meshnb segments whose coordinator is no longer alive; returns their names.

    Examples
    --------
    >>> import os
    >>> from meshnb.backends.memory import remove_stale_segments
    >>> shm = getfixture("tmp_path")
    >>> dead = 2**22 + 1  # no process has this pid
    >>> for name in (f"meshnb_{dead}_abc", f"meshnb_{os.getpid()}_def", "other"):
    ...     _ = (shm / name).write_bytes(b"")
    >>> remove_stale_segments(str(shm)), len(os.listdir(shm))  # the live coordinator's and the other name stay
    (['meshnb_4194305_abc'], 2)
    """
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
    """Close a segment even while a numpy view of it lives on (say, in an error's traceback):
    the mapping then goes with the view, and SharedMemory's own ``__del__`` has nothing left to
    close (it would complain about the view).

    Examples
    --------
    >>> import numpy as np
    >>> from multiprocessing.shared_memory import SharedMemory
    >>> from meshnb.backends.memory import close
    >>> shm = SharedMemory(create=True, size=4096)
    >>> view = np.frombuffer(shm.buf, np.uint8)  # still alive: SharedMemory.close alone would raise BufferError
    >>> close(shm)
    >>> shm.unlink()
    """
    try:
        shm.close()
    except BufferError:
        shm._buf = shm._mmap = None  # type: ignore[attr-defined]
        shm.close()
