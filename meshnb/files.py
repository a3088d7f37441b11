"""The one place that reads, writes and locks the user's files (pages, checkpoints).

Every refusal is one line that names the user's path and what it is (``--view-in``, ``checkpoint``),
never a temporary name:

* inputs (:func:`read_input`, :func:`read_page`) must be regular files: a FIFO, a device
  (``/dev/zero``), a directory or a socket is refused before a byte is read (the open is
  non-blocking, so a FIFO without a writer cannot hang it), and no more than the caller's bound is
  ever read;
* outputs are checked before a run (:func:`check_output`) and written atomically
  (:func:`write_atomic`): a temporary file ``.NAME.tmpPID`` beside the target, fsync, rename,
  fsync of the directory; a failed write (a full disk) removes its temporary file and leaves the
  previous file as it was;
* a run that owns a path (a checkpoint) holds an exclusive lock on it (:func:`hold`).

The refusals of bad input are :class:`ValueError` (the command line's exit 2); a write that fails
is :class:`WriteError`, an :class:`OSError`.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import re
import stat
import time
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

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


# ---------------------------------------------------------------------------------------------
# Inputs
# ---------------------------------------------------------------------------------------------

_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def _kind(mode: int) -> str:
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


@contextlib.contextmanager
def open_input(path: Pathish, what: str) -> Iterator[BinaryIO]:
    """Open a regular file for reading, or refuse it (:class:`InputError`) without blocking."""
    try:
        # O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer; it is refused
        # below by fstat, which sees the file actually opened (no race with a rename of the path).
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError as e:
        reason = e.strerror
        if e.errno == errno.ENXIO:  # a socket: name what it is rather than "No such device or address"
            with contextlib.suppress(OSError):
                reason = f"{_kind(os.stat(path).st_mode)}, not a regular file"
        raise InputError(f"{what} {path}: {reason}") from None
    except ValueError:  # a NUL in the path
        raise InputError(f"{what} {path!r}: not a file name") from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise InputError(f"{what} {path}: {_kind(mode)}, not a regular file")
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


def page_from(source: bytes | bytearray | memoryview | Pathish, what: str) -> bytes:
    """A page given as bytes (any buffer) or as the path of a file (:func:`read_page`): what
    ``train(view_in=...)`` takes.  Bytes of another length are left to the page's own check."""
    if isinstance(source, (str, os.PathLike)):
        return read_page(source, what)
    return bytes(memoryview(source))  # a TypeError for what is no buffer (bytes(1234) would be 1234 zeros)


# ---------------------------------------------------------------------------------------------
# Outputs
# ---------------------------------------------------------------------------------------------


def _temp_name(path: Path, pid: int) -> Path:
    return path.with_name(f".{path.name}.tmp{pid}")


def check_output(path: Pathish, option: str) -> None:
    """Refuse (:class:`OutputError`, one line naming ``option`` and ``path``) an output that a run
    could not write at its end: a missing or unwritable directory, a directory or a device as target.

    A symbolic link to a regular file passes: the atomic rename replaces the link with the file."""
    p = Path(path)
    if not p.name or p.name in (".", ".."):
        raise OutputError(f"{option} {path}: not a file name")
    parent = p.parent
    try:
        if not parent.exists():
            raise OutputError(f"{option} {path}: directory {parent} does not exist")
        if not parent.is_dir():
            raise OutputError(f"{option} {path}: {parent} is not a directory")
        with contextlib.suppress(FileNotFoundError):
            mode = os.stat(p).st_mode
            if not stat.S_ISREG(mode):
                raise OutputError(f"{option} {path}: {_kind(mode)}, not a regular file")
    except OSError as e:  # EACCES on a component, ELOOP, ...
        raise OutputError(f"{option} {path}: {e.strerror}") from None
    # os.access says no for a read-only mount or missing permissions; the probe also catches what
    # it cannot see (root on a directory it may not write, ACLs, a full inode table).  The probe has
    # the temporary file's name, so one left by a kill is cleared as stale by the next write.
    probe = _temp_name(p, os.getpid())
    try:
        if not os.access(parent, os.W_OK | os.X_OK):
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES))
        os.close(os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600))
        os.unlink(probe)
    except FileExistsError:
        pass  # our own temporary file: a write of ours is under way, so the directory is writable
    except OSError as e:
        raise OutputError(f"{option} {path}: cannot write in {parent} ({e.strerror})") from None


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
    """Remove the ``.NAME.tmpPID`` files beside ``path`` whose writer is dead (killed mid-write);
    returns them.  A live pid's file is left alone: it may be that process's write under way (or a
    reused pid's, which errs on the side of keeping a file)."""
    p = Path(path)
    pattern = re.compile(rf"\.{re.escape(p.name)}\.tmp(\d+)")
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
    """A new temporary file ``.NAME.tmpPID`` beside ``path`` for an atomic write, open for writing:
    its descriptor and name (OSError as the OS says).  Stale temporaries of dead writers at this
    path are removed first.  Always a new file, never what is at the name: a FIFO there (its name
    is easy to guess) would block the open, a symbolic link would be written through."""
    remove_stale_temps(path)
    tmp = _temp_name(path, os.getpid())
    with contextlib.suppress(FileNotFoundError):
        os.unlink(tmp)
    return os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666), tmp


def write_atomic(path: Pathish, data: bytes, what: str) -> None:
    """Write ``data`` to ``path`` atomically (a crash leaves the old file or the new one, whole).

    A temporary file ``.NAME.tmpPID`` beside ``path``, write, fsync, rename, fsync of the directory
    (the rename itself).  On any error the temporary file is removed, the previous file is as it
    was, and :class:`WriteError` names ``path`` (e.g. ``checkpoint /x/run.ckpt: No space left on
    device``).  Stale temporary files of dead writers at this path are removed first."""
    p = Path(path)
    try:
        fd, tmp = open_temp(p)
    except OSError as e:
        raise WriteError(what, path, e) from None
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]  # a short write (a signal, a nearly full disk) goes on
            os.fsync(fd)  # ENOSPC may only show here (delayed allocation, NFS)
        finally:
            os.close(fd)
        os.replace(tmp, p)
    except OSError as e:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise WriteError(what, path, e) from None
    try:
        fsync_dir(p.parent)
    except OSError as e:
        raise WriteError(what, path, e) from None


def fsync_dir(directory: Pathish) -> None:
    """fsync a directory: what makes a rename in it durable (OSError as the OS says)."""
    dfd = os.open(directory, os.O_RDONLY | os.O_CLOEXEC)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


# ---------------------------------------------------------------------------------------------
# Ownership
# ---------------------------------------------------------------------------------------------


def lock_path(path: Pathish) -> Path:
    """The lock file of ``path``: ``.NAME.lock`` beside it."""
    p = Path(path)
    return p.with_name(f".{p.name}.lock")


def _holder(lock: Path) -> int | None:
    """The pid written in a held lock file.  The holder writes it just after locking (over a dead
    run's pid), so an empty file or a dead pid is read again for a moment."""
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
    """Own ``path`` for a run: an exclusive lock, or :class:`InUseError` (one line naming the
    holder's pid) when another live process holds it.

    The lock is ``fcntl.flock`` on ``.NAME.lock`` beside ``path``, which holds the owner's pid.  The
    kernel releases it when the owner dies (SIGKILL included), so a lock file left by a dead run
    does not block the next one.  On release the file is unlinked *while still locked*, and a
    taker checks after locking that the file it locked is still the one at the name (same inode):
    a process that opened the old file just before the unlink then finds it gone and tries again,
    so two runs can never each hold a lock on a different file of the same name.  flock is
    per open file description, so a second ``hold`` in the same process is refused too.  (flock
    on NFS is emulated with byte-range locks on recent Linux; a local file system is assumed.)"""
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
            os.unlink(lock)  # before the unlock: see the docstring
        os.close(fd)
