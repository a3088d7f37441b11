"""User files: pages and checkpoints read and written (placeholder until the hardened module lands)."""

from __future__ import annotations

import os
from pathlib import Path

PAGE_BYTES = 4096


class InputError(ValueError):
    """A file handed in that cannot be used: one line naming it."""


def read_input(path: str | os.PathLike[str], what: str, limit_bytes: int) -> bytes:
    try:
        with open(path, "rb") as f:
            data = f.read(limit_bytes + 1)
    except OSError as e:
        raise InputError(f"{what} {path}: {e.strerror}") from None
    if len(data) > limit_bytes:
        raise InputError(f"{what} {path}: larger than {limit_bytes} bytes")
    return data


def read_page(path: str | os.PathLike[str], what: str) -> bytes:
    data = read_input(path, what, PAGE_BYTES)
    if len(data) != PAGE_BYTES:
        raise InputError(f"{what} {path}: a page is {PAGE_BYTES} bytes, this file has {len(data)}")
    return data


def write_atomic(path: str | os.PathLike[str], data: bytes, what: str) -> None:
    """Write ``data`` to ``path`` atomically: a crash leaves the old file or the new one."""
    target = Path(path)
    tmp = target.with_name(f".{target.name}.tmp{os.getpid()}")
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)
    fd = os.open(target.parent, os.O_RDONLY)
    try:
        os.fsync(fd)  # the rename itself
    finally:
        os.close(fd)


def check_output(path: str | os.PathLike[str], option: str) -> None:
    """Refuse, before a run, an output path that cannot be written."""
    target = Path(path)
    parent = target.parent
    if target.is_dir():
        raise InputError(f"{option} {path}: is a directory")
    if not parent.is_dir() or not os.access(parent, os.W_OK):
        raise InputError(f"{option} {path}: its directory {parent} does not exist or is not writable")
