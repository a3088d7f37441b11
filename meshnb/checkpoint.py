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
state cannot be saved, so a run that checkpoints hashes its trace with :class:`Sha256`, a SHA-256
(FIPS 180-4) whose state (chaining value, length, unfinished block) goes into the checkpoint: a
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
from .floatz import jit

from .program import COUNTER_NAMES
from .view import VIEW_BYTES, View

MAGIC = b"MESHNBCK"
VERSION = 1
_PREFIX = struct.Struct("<8sII")
_SUM_BYTES = 32

# ---------------------------------------------------------------------------------------------
# A SHA-256 whose state can be saved
# ---------------------------------------------------------------------------------------------

_K = np.array([
    0x428A2F98, 0x71374491, 0xB5C0FBCF, 0xE9B5DBA5, 0x3956C25B, 0x59F111F1, 0x923F82A4, 0xAB1C5ED5,
    0xD807AA98, 0x12835B01, 0x243185BE, 0x550C7DC3, 0x72BE5D74, 0x80DEB1FE, 0x9BDC06A7, 0xC19BF174,
    0xE49B69C1, 0xEFBE4786, 0x0FC19DC6, 0x240CA1CC, 0x2DE92C6F, 0x4A7484AA, 0x5CB0A9DC, 0x76F988DA,
    0x983E5152, 0xA831C66D, 0xB00327C8, 0xBF597FC7, 0xC6E00BF3, 0xD5A79147, 0x06CA6351, 0x14292967,
    0x27B70A85, 0x2E1B2138, 0x4D2C6DFC, 0x53380D13, 0x650A7354, 0x766A0ABB, 0x81C2C92E, 0x92722C85,
    0xA2BFE8A1, 0xA81A664B, 0xC24B8B70, 0xC76C51A3, 0xD192E819, 0xD6990624, 0xF40E3585, 0x106AA070,
    0x19A4C116, 0x1E376C08, 0x2748774C, 0x34B0BCB5, 0x391C0CB3, 0x4ED8AA4A, 0x5B9CCA4F, 0x682E6FF3,
    0x748F82EE, 0x78A5636F, 0x84C87814, 0x8CC70208, 0x90BEFFFA, 0xA4506CEB, 0xBEF9A3F7, 0xC67178F2,
], dtype=np.uint64)
_H0 = (0x6A09E667, 0xBB67AE85, 0x3C6EF372, 0xA54FF53A, 0x510E527F, 0x9B05688C, 0x1F83D9AB, 0x5BE0CD19)
_M32 = np.uint64(0xFFFFFFFF)


@jit()
def _rotr(x: np.uint64, r: int) -> np.uint64:
    return ((x >> np.uint64(r)) | (x << np.uint64(32 - r))) & _M32


@jit()
def _compress(h: np.ndarray, data: np.ndarray, k: np.ndarray) -> None:
    """Fold the whole 64-byte blocks of ``data`` (uint8) into the chaining value ``h`` (uint64[8],
    32-bit values: numba's uint32 arithmetic widens, so the words are kept masked in uint64)."""
    w = np.empty(64, dtype=np.uint64)
    for b in range(data.shape[0] // 64):
        for i in range(16):
            j = 64 * b + 4 * i
            w[i] = (np.uint64(data[j]) << np.uint64(24)) | (np.uint64(data[j + 1]) << np.uint64(16)) \
                | (np.uint64(data[j + 2]) << np.uint64(8)) | np.uint64(data[j + 3])
        for i in range(16, 64):
            s0 = _rotr(w[i - 15], 7) ^ _rotr(w[i - 15], 18) ^ (w[i - 15] >> np.uint64(3))
            s1 = _rotr(w[i - 2], 17) ^ _rotr(w[i - 2], 19) ^ (w[i - 2] >> np.uint64(10))
            w[i] = (w[i - 16] + s0 + w[i - 7] + s1) & _M32
        a, b_, c, d, e, f, g, hh = h[0], h[1], h[2], h[3], h[4], h[5], h[6], h[7]
        for i in range(64):
            t1 = (hh + (_rotr(e, 6) ^ _rotr(e, 11) ^ _rotr(e, 25)) + ((e & f) ^ (~e & _M32 & g)) + k[i] + w[i]) & _M32
            t2 = ((_rotr(a, 2) ^ _rotr(a, 13) ^ _rotr(a, 22)) + ((a & b_) ^ (a & c) ^ (b_ & c))) & _M32
            hh, g, f, e = g, f, e, (d + t1) & _M32
            d, c, b_, a = c, b_, a, (t1 + t2) & _M32
        h[0] = (h[0] + a) & _M32
        h[1] = (h[1] + b_) & _M32
        h[2] = (h[2] + c) & _M32
        h[3] = (h[3] + d) & _M32
        h[4] = (h[4] + e) & _M32
        h[5] = (h[5] + f) & _M32
        h[6] = (h[6] + g) & _M32
        h[7] = (h[7] + hh) & _M32


@dataclass(frozen=True)
class Sha256State:
    """What a resumed hash needs: the chaining value, the bytes hashed, the unfinished block."""

    h: tuple[int, ...]
    length: int
    tail: bytes

    def __post_init__(self) -> None:
        if len(self.h) != 8 or not all(isinstance(x, int) and 0 <= x <= 0xFFFFFFFF for x in self.h):
            raise ValueError("a SHA-256 state has 8 u32 words")
        if not isinstance(self.length, int) or self.length < 0 or len(self.tail) != self.length % 64:
            raise ValueError(f"a SHA-256 state of {self.length} bytes has {self.length % 64} tail bytes, not {len(self.tail)}")


class Sha256:
    """SHA-256 with ``update`` and ``hexdigest`` like hashlib's, and a state to save and resume."""

    def __init__(self, state: Sha256State | None = None) -> None:
        state = state or Sha256State(_H0, 0, b"")
        self._h = np.array(state.h, dtype=np.uint64)
        self._length = state.length
        self._tail = state.tail

    def update(self, data: bytes | bytearray | memoryview) -> None:
        data = bytes(data)
        self._length += len(data)
        buf = self._tail + data
        whole = len(buf) - len(buf) % 64
        if whole:
            _compress(self._h, np.frombuffer(buf, dtype=np.uint8, count=whole), _K)
        self._tail = buf[whole:]

    def state(self) -> Sha256State:
        return Sha256State(tuple(int(x) for x in self._h), self._length, self._tail)

    def hexdigest(self) -> str:
        h = self._h.copy()
        pad = b"\x80" + b"\0" * ((55 - self._length) % 64) + struct.pack(">Q", 8 * self._length)
        _compress(h, np.frombuffer(self._tail + pad, dtype=np.uint8), _K)
        return "".join(f"{int(x):08x}" for x in h)


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
