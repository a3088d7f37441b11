"""Checkpoints of a whole cluster run: every member's view, counters and trace state, and the run's
settings, in one file that loads without pickle.

A checkpoint is taken at a task boundary where every member has completed the same step and no
round is pending, so the views (SPEC 7) are the members' whole state; the exchange page is not
saved, since it holds nothing a later round needs.  File format (little-endian):

| offset | bytes | content |
| --- | --- | --- |
| 0 | 8 | magic ``MESHNBCK`` |
| 8 | 4 | format version, u32 (1) |
| 12 | 4 | ``H``, the length of the header, u32 |
| 16 | H | the header: UTF-8 JSON (below) |
| 16 + H | 4096 N | the N members' view pages, system 0 first |
| end - 32 | 32 | SHA-256 of every byte before it |

The header: ``{"run": {"systems", "steps", "steps_per_task", "set_lr": [[step, bits], ...],
"step_base", "z", "first_step"}, "done": steps of the run done, "members": [{"counters":
{"inits", "steps", "timeouts"}, "trace": {"h": [8 hex words], "length": bytes hashed, "tail":
hex of the bytes after the last whole block}}, ...]}``.

The trace digest (SPEC 11) covers every step of the run, before and after a resume.  hashlib's
state cannot be saved, so a run that checkpoints hashes its trace with :class:`meshnb.sha256.Sha256`,
a SHA-256 (FIPS 180-4) whose state (chaining value, length, unfinished block) goes into the checkpoint: a
resumed run continues the very hash, per member, with nothing replayed.  Files are written
atomically: a temporary file beside the target, fsync, rename, fsync of the directory.
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .program import COUNTER_NAMES
from .sha256 import Sha256State
from .view import VIEW_BYTES, View

MAGIC = b"MESHNBCK"
VERSION = 1
_PREFIX = struct.Struct("<8sII")
_SUM_BYTES = 32

# ---------------------------------------------------------------------------------------------
# The file
# ---------------------------------------------------------------------------------------------

class CheckpointError(ValueError):
    """A checkpoint that cannot be used: unreadable, corrupt, or of another run."""


@dataclass(frozen=True)
class RunSettings:
    """What defines a cluster run: resuming with any of these different would be another run."""

    systems: int
    steps: int
    steps_per_task: int | None
    set_lr: tuple[tuple[int, int], ...]
    step_base: int | None
    z: bool
    first_step: int  # the members' next step when the run started

    def to_json(self) -> dict[str, Any]:
        return {
            "systems": self.systems, "steps": self.steps, "steps_per_task": self.steps_per_task,
            "set_lr": [list(p) for p in self.set_lr], "step_base": self.step_base, "z": self.z,
            "first_step": self.first_step,
        }

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> "RunSettings":
        return cls(
            int(doc["systems"]), int(doc["steps"]), _opt_int(doc["steps_per_task"]),
            tuple((int(s), int(b)) for s, b in doc["set_lr"]), _opt_int(doc["step_base"]),
            bool(doc["z"]), int(doc["first_step"]),
        )


def _opt_int(x: Any) -> int | None:
    return None if x is None else int(x)


@dataclass(frozen=True)
class Checkpoint:
    """A run at a task boundary: ``done`` steps of ``run``, every member's page, counters, trace."""

    run: RunSettings
    done: int
    pages: tuple[bytes, ...]
    counters: tuple[dict[str, int], ...]
    traces: tuple[Sha256State, ...]

    def __post_init__(self) -> None:
        n = self.run.systems
        if not (len(self.pages) == len(self.counters) == len(self.traces) == n):
            raise CheckpointError(f"a checkpoint of {n} systems needs {n} pages, counters and traces")
        if not 0 <= self.done <= self.run.steps:
            raise CheckpointError(f"{self.done} steps done is outside a run of {self.run.steps}")
        for k, page in enumerate(self.pages):
            if len(page) != VIEW_BYTES:
                raise CheckpointError(f"system {k}'s page is {len(page)} bytes, not {VIEW_BYTES}")
            v = View.from_bytes(page)
            if v.word("PENDING"):
                raise CheckpointError(f"system {k} has a pending round")
            if v.next_step != (self.run.first_step + self.done) % (1 << 64):
                raise CheckpointError(f"system {k} is at step {v.next_step}, not {self.run.first_step + self.done}")

    def to_bytes(self) -> bytes:
        header = json.dumps({
            "run": self.run.to_json(),
            "done": self.done,
            "members": [
                {"counters": dict(c), "trace": {"h": [f"{x:08x}" for x in t.h], "length": t.length, "tail": t.tail.hex()}}
                for c, t in zip(self.counters, self.traces)
            ],
        }, separators=(",", ":")).encode()
        body = _PREFIX.pack(MAGIC, VERSION, len(header)) + header + b"".join(self.pages)
        return body + hashlib.sha256(body).digest()

    @classmethod
    def from_bytes(cls, data: bytes, where: str = "checkpoint") -> "Checkpoint":
        if len(data) < _PREFIX.size + _SUM_BYTES or data[:8] != MAGIC:
            raise CheckpointError(f"{where}: not a meshnb checkpoint")
        _, version, hlen = _PREFIX.unpack_from(data)
        if version != VERSION:
            raise CheckpointError(f"{where}: format version {version}, this meshnb reads {VERSION}")
        body, digest = data[:-_SUM_BYTES], data[-_SUM_BYTES:]
        if hashlib.sha256(body).digest() != digest:
            raise CheckpointError(f"{where}: corrupt or truncated (its checksum does not match)")
        try:
            doc = json.loads(body[_PREFIX.size : _PREFIX.size + hlen])
            run = RunSettings.from_json(doc["run"])
            members = doc["members"]
            counters = tuple({name: int(m["counters"][name]) for name in COUNTER_NAMES} for m in members)
            traces = tuple(
                Sha256State(tuple(int(x, 16) for x in m["trace"]["h"]), int(m["trace"]["length"]), bytes.fromhex(m["trace"]["tail"]))
                for m in members
            )
            done = int(doc["done"])
        except (ValueError, KeyError, TypeError) as e:
            raise CheckpointError(f"{where}: malformed header ({e})") from None
        pages_at = _PREFIX.size + hlen
        if len(body) - pages_at != VIEW_BYTES * run.systems:
            raise CheckpointError(f"{where}: {len(body) - pages_at} bytes of pages for {run.systems} systems")
        pages = tuple(body[pages_at + VIEW_BYTES * k : pages_at + VIEW_BYTES * (k + 1)] for k in range(run.systems))
        try:
            return cls(run, done, pages, counters, traces)
        except CheckpointError as e:
            raise CheckpointError(f"{where}: {e}") from None


def save(path: str | os.PathLike[str], ckpt: Checkpoint) -> None:
    """Write ``ckpt`` to ``path`` atomically: a crash leaves the old file or the new one."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    try:
        with open(tmp, "wb") as f:
            f.write(ckpt.to_bytes())
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(fd)  # the rename itself
    finally:
        os.close(fd)


def load(path: str | os.PathLike[str]) -> Checkpoint:
    """Read a checkpoint; :class:`CheckpointError` (one line) when it cannot be used."""
    try:
        data = Path(path).read_bytes()
    except OSError as e:
        raise CheckpointError(f"checkpoint {path}: {e.strerror}") from None
    return Checkpoint.from_bytes(data, f"checkpoint {path}")
