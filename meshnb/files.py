"""The one place that reads, writes and locks the user's files; every refusal is one line naming the user's path.

Inputs must be regular files, opened non-blocking and read up to a bound (:func:`read_input`);
outputs are checked before a run (:func:`check_output`) and written under one rule
(:func:`output_kind`, :class:`Output`): atomically through ``.NAME.tmpPID``, or written through a
stream or link.  A run owns a path by a lock (:func:`hold`); stdout and stderr drop no byte
(:class:`StdSink`).  Bad input is a :class:`ValueError` (exit 2), a failed write a :class:`WriteError`.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import math
import os
import re
import select
import signal
import stat
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

PAGE_BYTES = 4096  # a view page (SPEC 7); view.py has the same number, but this module imports no meshnb

Pathish = str | os.PathLike[str]


class InputError(ValueError):
    """An input file that cannot be used: missing, not a regular file, too large, too small."""


class OutputError(ValueError):
    """An output path that cannot be written: checked before the run that would write it."""


class InUseError(ValueError):
    """A path that another live process holds (:func:`hold`); ``pid`` is the holder's, if known."""

    def __init__(self, message: str, pid: int | None) -> None:
        super().__init__(message)
        self.pid = pid


class WriteError(OSError):
    """A write that failed (a full disk, a read-only file system): one line naming the user's path."""

    def __init__(self, what: str, path: Pathish, cause: OSError) -> None:
        super().__init__(cause.errno, cause.strerror or str(cause), os.fspath(path))
        self.what = what

    def __str__(self) -> str:
        return f"{self.what} {self.filename}: {self.strerror}"


def os_error_text(e: OSError) -> str:
    """One line for an ``OSError``: the path it names and the system's words, never a class name."""
    if isinstance(e, WriteError):
        return str(e)
    words = e.strerror or str(e) or "an input/output error"
    if e.filename is not None:
        return f"{os.fsdecode(e.filename)}: {words}"
    return words


# --- inputs


_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def file_kind(mode: int) -> str:
    """What a file of ``mode`` is, for a message: "a FIFO", "a socket", "a directory", ..."""
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


@contextlib.contextmanager
def open_input(path: Pathish, what: str) -> Iterator[BinaryIO]:
    """Open a regular file for reading, or refuse it (:class:`InputError`) without blocking: a FIFO
    waits for no writer (``O_NONBLOCK``), and ``fstat`` of what was opened decides."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError as e:
        reason = e.strerror
        if e.errno == errno.ENXIO:  # a socket: name what it is rather than "No such device or address"
            with contextlib.suppress(OSError):
                reason = f"{file_kind(os.stat(path).st_mode)}, not a regular file"
        raise InputError(f"{what} {path}: {reason}") from None
    except ValueError:  # a NUL in the path
        raise InputError(f"{what} {path!r}: not a file name") from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise InputError(f"{what} {path}: {file_kind(mode)}, not a regular file")
        f = os.fdopen(fd, "rb", buffering=0)
    except BaseException:
        os.close(fd)
        raise
    with f:
        yield f  # an unbuffered FileIO is a BinaryIO for reading


def read_at_most(f: BinaryIO, limit_bytes: int, what: str, path: Pathish) -> bytes:
    """Up to ``limit_bytes`` + 1 bytes of ``f`` (the one more tells the caller the file is larger)."""
    chunks, left = [], limit_bytes + 1
    try:
        while left > 0 and (chunk := f.read(min(left, 1 << 20))):
            chunks.append(chunk)
            left -= len(chunk)
    except OSError as e:
        raise InputError(f"{what} {path}: {e.strerror}") from None
    return b"".join(chunks)


def read_input(path: Pathish, what: str, limit_bytes: int) -> bytes:
    """A regular file's bytes, at most ``limit_bytes`` of them; :class:`InputError` (one line) otherwise."""
    with open_input(path, what) as f:
        data = read_at_most(f, limit_bytes, what, path)
    if len(data) > limit_bytes:
        raise InputError(f"{what} {path}: larger than {limit_bytes} bytes")
    return data


def read_page(path: Pathish, what: str) -> bytes:
    """A raw view page: a regular file of exactly 4096 bytes; :class:`InputError` (one line) otherwise."""
    with open_input(path, what) as f:
        data = read_at_most(f, PAGE_BYTES, what, path)
        size = max(len(data), os.fstat(f.fileno()).st_size)
    if len(data) != PAGE_BYTES:
        raise InputError(f"{what} {path}: a page is {PAGE_BYTES} bytes, this file has {size}")
    return data


# --- outputs


NAME_MAX = 255  # bytes in one file name (Linux, macOS)


def temp_prefix(name: str) -> str:
    """``.NAME.tmp`` (a pid follows), or ``.meshnb-HASH.tmp`` where that would pass :data:`NAME_MAX`."""
    prefix = f".{name}.tmp"
    if len(os.fsencode(prefix)) + 10 > NAME_MAX:  # 10: the digits of any pid
        prefix = f".meshnb-{hashlib.sha256(os.fsencode(name)).hexdigest()[:16]}.tmp"
    return prefix


def _temp_name(path: Path, pid: int) -> Path:
    return path.with_name(f"{temp_prefix(path.name)}{pid}")


def _no_write_bit(mode: int) -> bool:
    """No one may write it by its mode (refused even for root, whom os.access lets)."""
    return not mode & (stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH)


# An output whose link chain passes through one of these is a stream the caller holds: never renamed over.
_STREAM_PATHS = re.compile(r"/dev/(std(in|out|err)|fd(/.*)?)|/proc/[^/]+/fd(/.*)?")
_OWN_FD = re.compile(r"/(dev|proc/self|proc/thread-self|proc/(?P<pid>\d+))/fd/(?P<fd>\d+)")
_STD_FDS = {"/dev/stdin": 0, "/dev/stdout": 1, "/dev/stderr": 2}


def _chain(path: Pathish) -> list[str]:
    """The absolute paths a name goes through: itself, then each link's target (40 at most, the kernel's limit)."""
    seen: list[str] = []
    todo = os.path.abspath(os.fspath(path))
    for _ in range(40):
        seen.append(todo)
        head, parts = "/", [c for c in todo.split("/") if c]
        for i, comp in enumerate(parts):
            nxt = os.path.join(head, comp)
            if os.path.islink(nxt):
                try:
                    target = os.readlink(nxt)
                except OSError:
                    return seen
                rest = "/".join(parts[i + 1 :])
                seen.append(nxt)
                todo = os.path.normpath(os.path.join(head, target, rest) if rest else os.path.join(head, target))
                break
            head = nxt
        else:
            return seen
    return seen


def output_kind(path: Pathish) -> str:
    """``"atomic"`` (a new name or a regular file: a temporary renamed over it), ``"stream"`` (through
    ``/dev/std*``, ``/dev/fd``, ``/proc/*/fd``, or not a regular file) or ``"link"`` (a symlink): written through."""
    chain = _chain(path)
    if any(_STREAM_PATHS.fullmatch(p) for p in chain):
        return "stream"
    with contextlib.suppress(OSError):
        if not stat.S_ISREG(os.stat(path).st_mode):
            return "stream"
    return "link" if os.path.islink(path) else "atomic"  # lstat: every directory resolved, the last name not


def check_output(path: Pathish, option: str) -> None:
    """Refuse (:class:`OutputError`) an output a run could not write at its end: an empty name, a
    missing or unwritable directory, a directory; a stream or a link passes (written through)."""
    text = os.fspath(path)
    if not text:
        raise OutputError(f"{option} '': an empty path is not a file name")
    p = Path(path)
    if not p.name or p.name in (".", ".."):
        raise OutputError(f"{option} {path}: not a file name")
    if isinstance(text, str) and text.endswith(("/", "/.")):
        raise OutputError(f"{option} {path}: ends with '/', which names a directory, not a file")
    try:
        os.stat(p)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise OutputError(f"{option} {path}: a loop of symbolic links") from None
    except ValueError:  # a NUL in the path
        raise OutputError(f"{option} {path!r}: not a file name") from None
    try:
        kind = output_kind(path)
    except ValueError:  # a NUL in the path
        raise OutputError(f"{option} {path!r}: not a file name") from None
    if kind == "stream":
        with contextlib.suppress(FileNotFoundError):
            mode = os.stat(p).st_mode
            if stat.S_ISDIR(mode):
                raise OutputError(f"{option} {path}: a directory, not a regular file")
        return
    if kind == "link":
        real = Path(os.path.realpath(p))
        try:
            if real.exists():
                if not os.access(real, os.W_OK) or _no_write_bit(os.stat(real).st_mode):
                    raise OutputError(f"{option} {path}: a link to {real}, which cannot be written")
                return
        except OSError as e:
            raise OutputError(f"{option} {path}: {e.strerror}") from None
        if not real.parent.is_dir():
            raise OutputError(f"{option} {path}: a link to {real}, whose directory does not exist")
        if not os.access(real.parent, os.W_OK | os.X_OK):
            raise OutputError(f"{option} {path}: a link to {real}, whose directory cannot be written")
        return
    check_directory(p, option, path)
    try:
        with contextlib.suppress(FileNotFoundError):
            mode = os.stat(p).st_mode
            if not stat.S_ISREG(mode):
                raise OutputError(f"{option} {path}: {file_kind(mode)}, not a regular file")
            if _no_write_bit(mode):
                raise OutputError(f"{option} {path}: a read-only file (mode {stat.S_IMODE(mode):04o}); not replaced")
    except OSError as e:  # EACCES on a component, ...
        raise OutputError(f"{option} {path}: {e.strerror}") from None


def check_directory(p: Path, option: str, path: Pathish) -> None:
    """Refuse (:class:`OutputError`) a name whose directory is missing, not one, without a write bit,
    or where ``p``'s temporary cannot be created (a read-only mount, an ACL: probed by that name)."""
    parent = p.parent
    try:
        if not parent.exists():
            raise OutputError(f"{option} {path}: directory {parent} does not exist")
        if not parent.is_dir():
            raise OutputError(f"{option} {path}: {parent} is not a directory")
        parent_mode = os.stat(parent).st_mode
    except OSError as e:  # EACCES on a component, ...
        raise OutputError(f"{option} {path}: {e.strerror}") from None
    probe = _temp_name(p, os.getpid())
    try:
        if not os.access(parent, os.W_OK | os.X_OK) or _no_write_bit(parent_mode):
            raise PermissionError(errno.EACCES, "a read-only directory")
        # the stop signals wait until the probe is gone: a Ctrl-C between the two calls would leave it
        held = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM, signal.SIGHUP})
        try:
            os.close(os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600))
            os.unlink(probe)
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, held)
    except FileExistsError:
        pass  # our own temporary file: a write of ours is under way, so the directory is writable
    except OSError as e:
        raise OutputError(f"{option} {path}: cannot write in {parent} ({e.strerror})") from None


def refuse_overwrite(option: str, path: Pathish | None, what: str, inputs: Pathish | None) -> None:
    """Refuse an output ``path`` that is one of the files of ``inputs`` (by name, link or hard link)."""
    if path is None or inputs is None or not os.fspath(path):
        return
    real, root = os.path.realpath(path), os.path.realpath(inputs)
    inside = real == root or real.startswith(root.rstrip("/") + "/")
    if not inside:
        try:
            st = os.stat(path)
        except OSError:
            return
        ident = (st.st_dev, st.st_ino)
        if os.path.isdir(root):
            for base, _, names in os.walk(root):
                for name in names:
                    with contextlib.suppress(OSError):
                        s2 = os.stat(os.path.join(base, name), follow_symlinks=False)
                        inside = inside or (s2.st_dev, s2.st_ino) == ident
        else:
            with contextlib.suppress(OSError):
                s2 = os.stat(root)
                inside = (s2.st_dev, s2.st_ino) == ident
    if inside and not os.path.isdir(root):
        raise OutputError(f"{option} {path}: the {what} file {inputs} itself, which is read, not overwritten")
    if inside:
        raise OutputError(f"{option} {path}: a file of the {what} {inputs}, which is read, not overwritten")


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` exists (a stale file's owner is not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's live process
    return True


def remove_stale_temps(path: Pathish) -> list[Path]:
    """Remove (and return) the ``.NAME.tmpPID`` files beside ``path`` whose writer is dead."""
    p = Path(path)
    pattern = re.compile(rf"{re.escape(temp_prefix(p.name))}(\d+)")
    removed: list[Path] = []
    try:
        names = os.listdir(p.parent)
    except OSError:
        return removed
    for name in names:
        m = pattern.fullmatch(name)
        if m and int(m.group(1)) != os.getpid() and not pid_alive(int(m.group(1))):
            with contextlib.suppress(FileNotFoundError):  # another run removed it first
                os.unlink(p.parent / name)
                removed.append(p.parent / name)
    return removed


def open_temp(path: Path) -> tuple[int, Path]:
    """A new ``.NAME.tmpPID`` beside ``path`` open for writing (``O_EXCL | O_NOFOLLOW``): descriptor, name."""
    remove_stale_temps(path)
    tmp = _temp_name(path, os.getpid())
    with contextlib.suppress(FileNotFoundError):
        os.unlink(tmp)
    return os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666), tmp


def _stream_fd(path: Pathish) -> int:
    """A stream output's descriptor: a dup of our own where the chain names it (``/dev/stdout``:
    the shell's offset), else the path opened for appending (never truncated)."""
    for p in _chain(path):
        fd = _STD_FDS.get(p)
        m = _OWN_FD.fullmatch(p)
        if m and (m.group("pid") is None or int(m.group("pid")) == os.getpid()):
            fd = int(m.group("fd"))
        if fd is not None:
            return os.dup(fd)
    # O_NONBLOCK: a FIFO without a reader fails at once (ENXIO); blocking again for the writes
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_NOCTTY | os.O_CLOEXEC | os.O_NONBLOCK)
    fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
    return fd


STOP_GRACE_S = 2.0  # after a stop, how long a write waits on a reader that does not read


class _FdWriter:
    """A descriptor as a binary file for writing, every write whole; into a pipe ``PIPE_BUF`` at a
    time once ``poll`` says there is room, so a stalled reader holds a stop at most :data:`STOP_GRACE_S`."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        try:
            self.pipe = stat.S_ISFIFO(os.fstat(fd).st_mode)
        except OSError:
            self.pipe = False

    def write(self, data: bytes | bytearray | memoryview) -> int:
        view = memoryview(data).cast("B")
        total = len(view)
        if self.pipe:
            self._write_pipe(view)
            return total
        while view:
            view = view[os.write(self.fd, view) :]
        return total

    def _write_pipe(self, view: memoryview) -> None:
        poller = select.poll()
        poller.register(self.fd, select.POLLOUT)
        stopped_at: float | None = None
        while view:
            if not poller.poll(100):  # no room: the reader is slow, or stalled
                if stopped_at is None and _stop_requested():
                    stopped_at = time.monotonic()
                if stopped_at is not None and time.monotonic() - stopped_at > STOP_GRACE_S:
                    raise OSError(
                        errno.ETIMEDOUT, f"its reader stopped reading; given up {STOP_GRACE_S:g} s after the stop"
                    )
                continue
            view = view[os.write(self.fd, view[: select.PIPE_BUF]) :]  # room for PIPE_BUF: no block

    def tell(self) -> int:
        return os.lseek(self.fd, 0, os.SEEK_CUR)  # ESPIPE on a pipe: zipfile then streams

    def seek(self, pos: int, whence: int = 0) -> int:
        return os.lseek(self.fd, pos, whence)

    def seekable(self) -> bool:
        try:
            self.tell()
        except OSError:
            return False
        return True

    def truncate(self) -> None:
        os.ftruncate(self.fd, self.tell())

    def flush(self) -> None:
        pass

    def fileno(self) -> int:
        return self.fd

    def close(self) -> None:
        if self.fd >= 0:
            fd, self.fd = self.fd, -1
            os.close(fd)


class Output:
    """One output under the one rule (:func:`output_kind`), or stdout (``"-"``); a failure is a
    :class:`WriteError` naming ``what`` and ``path``, and :meth:`abort` leaves the target as it was."""

    def __init__(self, path: Pathish, what: str) -> None:
        self.path, self.what = path, what
        self.tmp: Path | None = None
        self.kind = "stdout" if os.fspath(path) == "-" else output_kind(path)
        self.f: BinaryIO
        if self.kind == "stdout":
            out = sys.stdout
            if out is None:
                raise OutputError(f"{what} -: stdout is closed")
            self.f = out.buffer
            return
        try:
            if self.kind == "atomic":
                fd, self.tmp = open_temp(Path(path))
            elif self.kind == "stream":
                out = sys.stdout
                if out is not None:
                    out.flush()  # what was printed before comes first (a shared descriptor)
                fd = _stream_fd(path)
            else:  # a link: written through, never replaced
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_NOCTTY | os.O_CLOEXEC, 0o666)
        except OSError as e:
            if e.errno == errno.ENXIO:
                raise OutputError(f"{what} {path}: a FIFO with no reader (a write would block)") from None
            raise WriteError(what, path, e) from None
        self.f = _FdWriter(fd)  # type: ignore[assignment]  # closed by commit or abort

    def write(self, data: bytes | bytearray | memoryview) -> None:
        """Write all of ``data`` (BrokenPipeError goes on to the caller: the reader is gone)."""
        self._do(self.f.write, data)

    def commit(self) -> None:
        """Finish: a temporary fsynced and renamed into place, a link's file cut to what was written."""
        self._do(self._commit)

    def _commit(self) -> None:
        self.f.flush()
        if self.kind == "stdout":
            return
        if self.kind == "link":
            self.f.truncate()
        if self.kind != "stream":
            os.fsync(self.f.fileno())  # ENOSPC may only show here (delayed allocation, NFS)
        self.f.close()
        if self.tmp is not None:
            os.replace(self.tmp, self.path)
            self.tmp = None
            fsync_dir(Path(self.path).parent)  # the rename itself

    def _do(self, action: Any, *args: Any) -> None:
        """``action(*args)``; an OSError (not a reader gone) aborts the output and is a :class:`WriteError`."""
        try:
            action(*args)
        except (BrokenPipeError, StreamError):
            raise
        except OSError as e:
            self.abort()
            raise WriteError(self.what, self.path, e) from None

    def abort(self) -> None:
        """Drop a temporary (the target stays as it was); a stream or a link is closed as it is."""
        if self.kind != "stdout":
            with contextlib.suppress(OSError):
                self.f.close()
        if self.tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(self.tmp)
            self.tmp = None


def write_atomic(path: Pathish, data: bytes, what: str) -> None:
    """Write ``data`` to ``path`` under the one output rule (:class:`Output`): the old file or the new one, whole."""
    if not os.fspath(path):
        raise OutputError(f"{what} '': an empty path is not a file name")
    out = Output(path, what)
    try:
        out.write(data)
        out.commit()
    except BaseException:
        out.abort()
        raise


def fsync_dir(directory: Pathish) -> None:
    """fsync a directory: what makes a rename in it durable (OSError as the OS says)."""
    dfd = os.open(directory, os.O_RDONLY | os.O_CLOEXEC)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


# --- shared memory left by killed MPI ranks

SHM_DIR = "/dev/shm"
MPICH_SHM_PREFIX = "mpich_shm_"  # MPICH's intra-node segments; a rank killed by hydra (SIGKILL) cannot remove its own


def shm_in_use(directory: str) -> set[str]:
    """The names in ``directory`` that a live process maps or holds open (as /proc shows them)."""
    used: set[str] = set()
    head = directory.rstrip("/") + "/"
    try:
        pids = [p for p in os.listdir("/proc") if p.isdigit()]
    except OSError:
        return used
    for pid in pids:
        with contextlib.suppress(OSError), open(f"/proc/{pid}/maps", "rb") as f:
            for line in f:
                at = line.find(head.encode())
                if at >= 0:
                    used.add(os.fsdecode(line[at + len(head) :].split(b" ")[0].rstrip(b"\n")))
        with contextlib.suppress(OSError):
            for fd in os.listdir(f"/proc/{pid}/fd"):
                with contextlib.suppress(OSError):
                    target = os.readlink(f"/proc/{pid}/fd/{fd}")
                    if target.startswith(head):
                        used.add(target[len(head) :].split(" ")[0])
    return used


def remove_orphan_shm(prefix: str = MPICH_SHM_PREFIX, min_age_s: float = 60.0, directory: str = SHM_DIR) -> list[str]:
    """Remove (and return) this user's ``directory/prefix*`` segments older than ``min_age_s`` that no live
    process maps or holds open: MPICH's, left by ranks hydra killed."""
    try:
        names = [n for n in os.listdir(directory) if n.startswith(prefix)]
    except OSError:
        return []
    now, uid = time.time(), os.getuid()
    stale = []
    for name in names:
        with contextlib.suppress(OSError):
            st = os.stat(os.path.join(directory, name), follow_symlinks=False)
            if stat.S_ISREG(st.st_mode) and st.st_uid == uid and now - st.st_mtime > min_age_s:
                stale.append(name)
    if not stale:
        return []
    used = shm_in_use(directory)
    removed = []
    for name in stale:
        if name not in used:
            with contextlib.suppress(OSError):
                os.unlink(os.path.join(directory, name))
                removed.append(name)
    return removed


# --- ownership


def lock_path(path: Pathish) -> Path:
    """The lock file of ``path``: ``.NAME.lock`` beside it."""
    p = Path(path)
    return p.with_name(f".{p.name}.lock")


def _holder(lock: Path) -> int | None:
    """The pid in a held lock file (read again for a moment: the holder writes it just after locking)."""
    deadline = time.monotonic() + 0.5
    while True:
        with contextlib.suppress(OSError, ValueError):
            pid = int(lock.read_text())
            if pid > 0 and pid_alive(pid):
                return pid
        if time.monotonic() >= deadline:
            return None
        time.sleep(0.01)


@contextlib.contextmanager
def hold(path: Pathish, what: str) -> Iterator[None]:
    """Own ``path`` for a run: an exclusive lock, or :class:`InUseError` naming the live holder's pid."""
    kind = output_kind(path)
    if kind != "atomic":  # rewritten at every save: through a link or a stream a crash would leave half of one
        what_is = "a symbolic link" if kind == "link" else "a stream (a device, a FIFO, /dev/std*)"
        raise OutputError(f"{what} {path}: {what_is}; a file a run owns must be a regular file or a new name")
    lock = lock_path(path)
    while True:
        try:
            fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o644)
        except OSError as e:
            raise OutputError(f"{what} {path}: cannot create its lock file {lock} ({e.strerror})") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            pid = _holder(lock)
            held = f"pid {pid}" if pid is not None else "a process whose pid is unknown"
            raise InUseError(f"{what} {path}: in use by another run ({held}; lock {lock})", pid) from None
        except BaseException:
            os.close(fd)
            raise
        try:
            same = os.stat(lock, follow_symlinks=False).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(fd)  # the holder released (and unlinked) it between our open and our lock: again
    try:
        try:
            os.ftruncate(fd, 0)
            os.write(fd, f"{os.getpid()}\n".encode())
        except OSError:
            pass  # a full disk: the lock holds without its pid (a second run then names no pid)
        yield
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(lock)  # before the unlock
        os.close(fd)


# --- JSON

NON_FINITE = {"nan": "NaN", "inf": "Infinity", "-inf": "-Infinity"}
"""How strict JSON spells a float it has no number for (``Number()`` and ``float()`` read them back)."""


def json_safe(obj: Any) -> Any:
    """``obj`` with every non-finite float replaced by its :data:`NON_FINITE` string."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else NON_FINITE[repr(float(obj))]
    if isinstance(obj, dict):
        return {k: json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_safe(v) for v in obj]
    return obj


_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x84\x86-\x9f\ud800-\udfff\ufffe\uffff]")


def xml_text(text: str) -> str:
    """``text`` fit for XML 1.0 (a JUnit report): each character it forbids or discourages as an escape (``\\x1b``)."""
    return _NOT_XML.sub(lambda m: m.group().encode("unicode_escape", "backslashreplace").decode("ascii"), text)


def json_text(obj: Any, **kwargs: Any) -> str:
    """``json.dumps`` of ``obj`` as strict JSON (RFC 8259): NaN and the infinities as :data:`NON_FINITE`'s strings."""
    import json

    return json.dumps(json_safe(obj), allow_nan=False, **kwargs)


# --- stdout and stderr

STOP_LINE_S = 2.0
"""On Ctrl-C (SIGTERM, SIGHUP) a write under way finishes its line within this long, else is cut."""

_POLL_S = 0.1  # how often a wait on a stalled reader looks at the stop flags


class StreamError(WriteError):
    """A write to stdout or stderr that failed (a full disk): one line naming the stream."""

    def __str__(self) -> str:
        return f"{self.what}: {self.strerror}"


def _stop_requested() -> bool:
    """Whether a Ctrl-C, SIGTERM or SIGHUP came and is held as a flag (an ``InterruptFlag``'s ``hit``)."""
    return any(getattr(signal.getsignal(s), "hit", False) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP))


class StdSink:
    """A descriptor's writer that drops no byte (a slow reader is waited for with ``poll``); a stop
    during a wait finishes the line within :data:`STOP_LINE_S`, then raises KeyboardInterrupt."""

    def __init__(self, fd: int, name: str) -> None:
        self.fd, self.name = fd, name
        self.closed = False
        self._wfd, self._nonblocking, self._small = fd, False, False
        try:
            mode = os.fstat(fd).st_mode
            self._nonblocking = bool(fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_NONBLOCK)
            if stat.S_ISFIFO(mode) and not self._nonblocking:
                with contextlib.suppress(OSError):
                    self._wfd = os.open(f"/proc/self/fd/{fd}", os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC)
                    self._nonblocking = True
            # what a slow reader can stall with a blocking write: a socket, a terminal
            self._small = not self._nonblocking and (
                stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode) or (stat.S_ISCHR(mode) and os.isatty(fd))
            )
        except OSError:
            pass

    # the parts of a binary stream that TextIOWrapper and callers use
    def writable(self) -> bool:
        return True

    def readable(self) -> bool:
        return False

    seekable = readable

    def fileno(self) -> int:
        return self.fd  # the descriptor given, not the one written through

    def isatty(self) -> bool:
        return os.isatty(self.fd)

    def flush(self) -> None:
        """Nothing to do: every write is whole when it returns."""

    def close(self) -> None:
        self.closed = True  # the descriptor stays (it is the process's stdout or stderr)

    def write(self, data: bytes | bytearray | memoryview) -> int:
        """Write all of ``data``; returns its length."""
        import threading

        view = memoryview(data).cast("B")
        if not len(view):
            return 0
        main = threading.current_thread() is threading.main_thread()
        stops = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP}
        if main:
            signal.pthread_sigmask(signal.SIG_BLOCK, stops)
        try:
            stopped = self._write_all(view, main, stops)
        finally:
            if main:
                signal.pthread_sigmask(signal.SIG_UNBLOCK, stops)  # a raising handler runs here
        if stopped:
            raise KeyboardInterrupt
        return len(view)

    def _write_all(self, view: memoryview, main: bool, stops: set[signal.Signals]) -> bool:
        """The loop of :meth:`write`, stop signals held; whether a stop cut it (at a line's end)."""
        import select

        total, done = len(view), 0
        end = total  # where to stop once a stop came: the end of the current line
        deadline: float | None = None
        watch = not _stop_requested()  # a stop that came before this write (its own message) does not cut it
        poller = select.poll()
        poller.register(self._wfd, select.POLLOUT)

        def stop_came() -> bool:
            return (main and bool(signal.sigpending() & stops)) or (watch and _stop_requested())

        while done < end:
            if deadline is not None and time.monotonic() > deadline:
                break
            try:
                if self._small:  # a blocking socket or terminal: room first, then no more than it takes
                    if not poller.poll(_POLL_S * 1000):
                        if deadline is None and stop_came():
                            deadline, end = self._stopping(view, done, end)
                        continue
                    done += os.write(self._wfd, view[done : min(end, done + 4096)])
                else:
                    done += os.write(self._wfd, view[done:end])
                if done < end and deadline is None and stop_came():  # a part written: a stop since?
                    deadline, end = self._stopping(view, done, end)
            except BlockingIOError:
                if deadline is None and stop_came():
                    deadline, end = self._stopping(view, done, end)
                wait = _POLL_S if deadline is None else max(0.0, min(_POLL_S, deadline - time.monotonic()))
                poller.poll(wait * 1000)
            except BrokenPipeError:
                raise
            except OSError as e:
                raise StreamError(self.name, self.name, e) from None
        return deadline is not None

    @staticmethod
    def _stopping(view: memoryview, done: int, end: int) -> tuple[float, int]:
        """A stop came: the write goes on to the end of the current line, for at most STOP_LINE_S."""
        nl = bytes(view[done:end]).find(b"\n")
        return time.monotonic() + STOP_LINE_S, (done + nl + 1 if nl >= 0 else end)


def install_std_streams() -> None:
    """Make ``sys.stdout`` and ``sys.stderr`` writers that drop no byte (:class:`StdSink`); the program
    calls it first.  A closed descriptor 0, 1 or 2 gets ``/dev/null`` (no file the run opens takes its
    number); a closed stdout stays ``None``, a closed stderr writes nowhere."""
    import io

    closed = set()
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            closed.add(fd)
            null = os.open(os.devnull, os.O_RDWR)
            if null != fd:
                os.dup2(null, fd, inheritable=True)
                os.close(null)
    for fd, name in ((1, "stdout"), (2, "stderr")):
        old = getattr(sys, name)
        if fd in closed and fd == 1:
            setattr(sys, name, None)
            continue
        encoding = getattr(old, "encoding", None) or "utf-8"
        errors = getattr(old, "errors", None) or ("backslashreplace" if fd == 2 else "strict")
        text = io.TextIOWrapper(
            StdSink(fd, name),  # type: ignore[type-var]
            encoding=encoding,
            errors=errors,
            line_buffering=False,
            write_through=True,
        )
        setattr(sys, name, text)
