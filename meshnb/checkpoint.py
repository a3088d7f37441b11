"""Checkpoints of a whole cluster run: every member's view, counters and trace state, and the run's
settings, in one file that loads without pickle (format and checks: docs/guide/checkpoints.md).

Taken at a task boundary, so the views (SPEC 7) are the members' whole state.  The trace hash is a
:class:`meshnb.sha256.Sha256` whose state goes into the file: a resumed run continues the very hash.
A checkpoint is untrusted input even when its checksum matches: :func:`load` reads a bounded prefix
of a regular file, parses the header only after its size is checked, and checks every field's type
and range; every refusal is one :class:`CheckpointError` line ``checkpoint PATH: FIELD: what is
wrong``.  Not safetensors: it would check only the pages, carry the rest as strings still parsed
here, have no checksum, and add a compiled dependency.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from . import files
from .program import COUNTER_NAMES
from .runspec import (
    LrChange,
    OptionError,
    Run,
    check_can_run,
    check_changes,
    check_step_base,
    check_steps,
    check_steps_per_task,
    is_int,
)
from .sha256 import Sha256State
from .view import VIEW_BYTES, View

MAGIC = b"MESHNBCK"
VERSION = 1
_PREFIX = struct.Struct("<8sII")
_SUM_BYTES = 32
MAX_SYSTEMS = 64  # the most members a checkpoint holds (load reads no more), and the local backends' cap
MAX_HEADER_BYTES = 1 << 20  # a header of 64 members is ~25 KiB, with room for thousands of LR changes
_U64 = (1 << 64) - 1
_T = TypeVar("_T")
_TRACE_STEP_BYTES = 20  # a step's trace row: 5 u32 words (program.Trace)
_SHA256_MAX_BYTES = (1 << 61) - 1  # SHA-256 hashes messages of fewer than 2^64 bits
_HEX8 = re.compile(r"[0-9a-f]{8}")
_HEX = re.compile(r"(?:[0-9a-f]{2})*")

# ---------------------------------------------------------------------------------------------
# The file
# ---------------------------------------------------------------------------------------------


class CheckpointError(OptionError):
    """A checkpoint that cannot be used: unreadable, corrupt, hostile, or of another run.

    A ``ValueError``; its message is one line, ``WHERE: FIELD: what is wrong``, where ``WHERE`` names
    the argument that gave the file as the caller wrote it (``resume PATH``; ``--resume PATH`` on
    the command line, :meth:`~meshnb.runspec.OptionError.for_cli`).

    Parameters
    ----------
    template, library, flags
        As :class:`~meshnb.runspec.OptionError`'s: the message, and how its argument is spelled.

    See Also
    --------
    load : raises it for a file that cannot be used.

    Examples
    --------
    >>> from meshnb.checkpoint import Checkpoint
    >>> Checkpoint.from_bytes(b"hello")
    Traceback (most recent call last):
    ...
    meshnb.checkpoint.CheckpointError: checkpoint: not a meshnb checkpoint
    """


def named(arg: str, text: str) -> CheckpointError:
    """The error ``text`` (``ARG PATH: ...``), its leading ``arg`` spelled as a flag on the command line."""
    return CheckpointError("{" + arg + "}" + text.removeprefix(arg).replace("{", "{{").replace("}", "}}"), arg)


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

    @classmethod
    def of(cls, run: Run, first_step: int) -> RunSettings:
        """The settings of a fresh cluster run's description (one group; ``first_step``: the
        pages' next step once prepared), as its checkpoints record them."""
        if run.groups != 1 or not run.is_cluster:
            what = f"{run.groups} groups of {run.group}" if run.is_cluster else f"{len(run)} systems alone"
            raise ValueError(f"a checkpoint holds one cluster's run, not {what}")
        plan = run.plan()
        return cls(run.group, plan.steps, plan.steps_per_task, plan.set_lr, plan.step_base, run.z, first_step)

    def to_json(self) -> dict[str, Any]:
        """The header's ``run`` object (JSON types: lists, ints, bools, None)."""
        return {
            "systems": self.systems,
            "steps": self.steps,
            "steps_per_task": self.steps_per_task,
            "set_lr": [list(p) for p in self.set_lr],
            "step_base": self.step_base,
            "z": self.z,
            "first_step": self.first_step,
        }

    @classmethod
    def from_json(cls, doc: Any, field: str = "run") -> RunSettings:
        """The settings of a header's ``run`` object, every field checked (:class:`CheckpointError`
        ``FIELD: what is wrong``, without the file's name)."""
        d = _object(doc, field, ("systems", "steps", "steps_per_task", "set_lr", "step_base", "z", "first_step"))
        systems = _int(d["systems"], f"{field}.systems", 1, MAX_SYSTEMS)  # the file's own bound: load reads no more
        # The JSON's types and how the fields agree are checked here; each value's rule is runspec's
        # (train's), its refusal naming the field (_by_rule); the page's rule covers first_step's wrap
        first = _by_rule(f"{field}.first_step", check_step_base, _int(d["first_step"], f"{field}.first_step"))
        steps = _by_rule(f"{field}.steps", check_steps, _int(d["steps"], f"{field}.steps"))
        _by_rule(f"{field}.steps", check_can_run, first, steps)
        spt = None
        if d["steps_per_task"] is not None:
            where = f"{field}.steps_per_task"
            spt = _by_rule(where, check_steps_per_task, _int(d["steps_per_task"], where))
        base = None
        if d["step_base"] is not None:
            base = _by_rule(f"{field}.step_base", check_step_base, _int(d["step_base"], f"{field}.step_base"))
        if base is not None and base != first:
            raise CheckpointError(f"{field}.first_step: {first}, but a run with step_base {base} starts there")
        if not isinstance(d["z"], bool):
            raise CheckpointError(f"{field}.z: must be true or false, not {_what(d['z'])}")
        pairs = _list(d["set_lr"], f"{field}.set_lr")
        set_lr: list[LrChange] = []
        for i, pair in enumerate(pairs):
            where = f"{field}.set_lr[{i}]"
            if not isinstance(pair, list) or len(pair) != 2:
                raise CheckpointError(f"{where}: must be a [step, bits] pair, not {_what(pair)}")
            change = (_int(pair[0], f"{where}[0]"), _int(pair[1], f"{where}[1]"))
            if set_lr and change[0] < set_lr[-1].step:
                raise CheckpointError(
                    f"{where}[0]: step {change[0]} after step {set_lr[-1].step}: LR changes are sorted"
                )
            set_lr += _by_rule(where, check_changes, [change], steps)  # train's pair rule: a step of the run, a word
        return cls(systems, steps, spt, tuple(set_lr), base, d["z"], first)


def _what(x: Any) -> str:
    """A value as an error line shows it: short, whatever it is."""
    if isinstance(x, _Huge):
        return f"an integer of {len(x.lstrip('-'))} digits"
    name = {
        bool: "a boolean",
        int: "an integer",
        float: "a number",
        str: "a string",
        list: "a list",
        dict: "an object",
        type(None): "null",
    }.get(type(x), type(x).__name__)
    return f"{name} {json.dumps(x)[:40]}" if isinstance(x, (bool, int, float, str)) else name


def _by_rule(field: str, rule: Callable[..., _T], *args: Any) -> _T:
    """``rule(*args)``, a :mod:`meshnb.runspec` rule, its refusal a :class:`CheckpointError` naming the field."""
    try:
        return rule(*args)
    except (OptionError, TypeError) as e:
        raise CheckpointError(f"{field}: {e}") from None


def _int(x: Any, field: str, lo: int = 0, hi: int = (1 << 64) - 1) -> int:
    if isinstance(x, _Huge):
        raise CheckpointError(f"{field}: {_what(x)} is outside {lo}..{hi}")
    if not is_int(x):
        raise CheckpointError(f"{field}: must be an integer, not {_what(x)}")
    if not lo <= x <= hi:
        raise CheckpointError(f"{field}: {x} is outside {lo}..{hi}")
    return x


def _list(x: Any, field: str) -> list[Any]:
    if not isinstance(x, list):
        raise CheckpointError(f"{field}: must be a list, not {_what(x)}")
    return x


def _object(x: Any, field: str, keys: tuple[str, ...]) -> dict[str, Any]:
    if not isinstance(x, dict):
        raise CheckpointError(f"{field}: must be an object, not {_what(x)}")
    missing = [k for k in keys if k not in x]
    if missing:
        raise CheckpointError(f"{field}: {missing[0]!r} is missing")
    extra = [k for k in x if k not in keys]
    if extra:
        raise CheckpointError(f"{field}: unknown key {extra[0][:40]!r}")
    return x


def _trace(x: Any, field: str, done: int) -> Sha256State:
    d = _object(x, field, ("h", "length", "tail"))
    words = _list(d["h"], f"{field}.h")
    if len(words) != 8:
        raise CheckpointError(f"{field}.h: {len(words)} words, not 8")
    for i, w in enumerate(words):
        if not (isinstance(w, str) and _HEX8.fullmatch(w)):
            raise CheckpointError(f"{field}.h[{i}]: must be 8 lowercase hex digits, not {_what(w)}")
    length = _int(d["length"], f"{field}.length", 0, _SHA256_MAX_BYTES)
    if length != _TRACE_STEP_BYTES * done:
        raise CheckpointError(f"{field}.length: {length} bytes for {done} steps done, not {_TRACE_STEP_BYTES * done}")
    tail = d["tail"]
    if not (isinstance(tail, str) and len(tail) == 2 * (length % 64) and _HEX.fullmatch(tail)):
        raise CheckpointError(f"{field}.tail: must be {length % 64} bytes in lowercase hex, not {_what(tail)}")
    return Sha256State(tuple(int(w, 16) for w in words), length, bytes.fromhex(tail))


def parse_header(doc: Any) -> tuple[RunSettings, int, tuple[dict[str, int], ...], tuple[Sha256State, ...]]:
    """A header's run, steps done, counters and trace states, every field checked
    (:class:`CheckpointError` ``FIELD: what is wrong``).
    """
    d = _object(doc, "header", ("run", "done", "members"))
    run = RunSettings.from_json(d["run"])
    done = _int(d["done"], "done", 0, run.steps)
    members = _list(d["members"], "members")
    if len(members) != run.systems:
        raise CheckpointError(f"members: {len(members)} of them for {run.systems} systems")
    counters, traces = [], []
    for k, m in enumerate(members):
        m = _object(m, f"members[{k}]", ("counters", "trace"))
        c = _object(m["counters"], f"members[{k}].counters", COUNTER_NAMES)
        counters.append({name: _int(c[name], f"members[{k}].counters.{name}", 0, _U64) for name in COUNTER_NAMES})
        traces.append(_trace(m["trace"], f"members[{k}].trace", done))
    return run, done, tuple(counters), tuple(traces)


class _Huge(str):
    """An integer of more than 40 digits, kept as text: no field holds one (2^64 has 20 digits), and
    int() of thousands of digits is slow (quadratic), so a header full of them could be an attack."""


def _short_int(text: str) -> int | _Huge:
    return int(text) if len(text.lstrip("-")) <= 40 else _Huge(text)


def _unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    d = dict(pairs)
    if len(d) != len(pairs):
        seen: set[str] = set()
        dup = next(k for k, _ in pairs if k in seen or seen.add(k))  # type: ignore[func-returns-value]
        raise CheckpointError(f"header: the key {dup[:40]!r} twice in one object")
    return d


def _json(raw: bytes) -> Any:
    """The header's JSON, strictly: UTF-8, no duplicate keys, bounded nesting.  A number with a
    fraction, ``NaN`` or ``Infinity`` parses as a float and a long integer as :class:`_Huge`, so that
    the field's own check refuses it by name (every field is checked; none takes a float)."""
    try:
        return json.loads(raw.decode("utf-8"), parse_int=_short_int, object_pairs_hook=_unique)
    except RecursionError:
        raise CheckpointError("header: nested too deeply") from None
    except UnicodeDecodeError as e:
        raise CheckpointError(f"header: not UTF-8 (byte {e.start})") from None
    except json.JSONDecodeError as e:
        raise CheckpointError(f"header: not JSON ({e.msg} at byte {e.pos})") from None


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

    def header(self) -> dict[str, Any]:
        """The file's JSON header (the module docstring's format)."""
        return {
            "run": self.run.to_json(),
            "done": self.done,
            "members": [
                {
                    "counters": dict(c),
                    "trace": {"h": [f"{x:08x}" for x in t.h], "length": t.length, "tail": t.tail.hex()},
                }
                for c, t in zip(self.counters, self.traces)
            ],
        }

    def to_bytes(self) -> bytes:
        """The file's bytes; :class:`CheckpointError` where :func:`load` would refuse them."""
        doc = self.header()
        parse_header(doc)  # never write a file that load would refuse
        header = json.dumps(doc, separators=(",", ":")).encode()
        if len(header) > MAX_HEADER_BYTES:
            raise CheckpointError(f"header: {len(header)} bytes, more than {MAX_HEADER_BYTES}")
        body = _PREFIX.pack(MAGIC, VERSION, len(header)) + header + b"".join(self.pages)
        return body + hashlib.sha256(body).digest()

    @classmethod
    def from_bytes(cls, data: bytes, where: str = "checkpoint") -> Checkpoint:
        """A checkpoint from a file's bytes; :class:`CheckpointError` ``WHERE: FIELD: what is wrong``."""
        try:
            return cls._from_bytes(data)
        except CheckpointError as e:
            raise CheckpointError(f"{where}: {e}") from None

    @classmethod
    def _from_bytes(cls, data: bytes) -> Checkpoint:
        if len(data) < _PREFIX.size + _SUM_BYTES or data[:8] != MAGIC:
            raise CheckpointError("not a meshnb checkpoint")
        hlen = _check_prefix(data[: _PREFIX.size])
        pages_bytes = len(data) - _PREFIX.size - hlen - _SUM_BYTES
        if pages_bytes < VIEW_BYTES or pages_bytes % VIEW_BYTES:
            raise CheckpointError(f"corrupt or truncated ({len(data)} bytes: not a {hlen}-byte header and whole pages)")
        body, digest = data[:-_SUM_BYTES], data[-_SUM_BYTES:]
        if hashlib.sha256(body).digest() != digest:
            raise CheckpointError("corrupt or truncated (its checksum does not match)")
        run, done, counters, traces = parse_header(_json(body[_PREFIX.size : _PREFIX.size + hlen]))
        if pages_bytes != VIEW_BYTES * run.systems:
            raise CheckpointError(f"pages: {pages_bytes // VIEW_BYTES} pages for {run.systems} systems")
        at = _PREFIX.size + hlen
        pages = tuple(body[at + VIEW_BYTES * k : at + VIEW_BYTES * (k + 1)] for k in range(run.systems))
        try:
            return cls(run, done, pages, counters, traces)
        except CheckpointError as e:
            raise CheckpointError(f"pages: {e}") from None


def _check_prefix(prefix: bytes) -> int:
    """The header length of a 16-byte prefix whose magic is checked; refuses another version or a
    header larger than :data:`MAX_HEADER_BYTES`."""
    _, version, hlen = _PREFIX.unpack(prefix)
    if version != VERSION:
        raise CheckpointError(f"format version {version}, this meshnb reads {VERSION}")
    if hlen > MAX_HEADER_BYTES:
        raise CheckpointError(f"header: {hlen} bytes, more than {MAX_HEADER_BYTES}")
    return hlen


def save(path: str | os.PathLike[str], ckpt: Checkpoint) -> None:
    """Write ``ckpt`` to ``path`` atomically: a crash leaves the old file or the new one
    (:func:`meshnb.files.write_atomic`; a failed write is a one-line :class:`meshnb.files.WriteError`,
    a checkpoint that :func:`load` would refuse a :class:`CheckpointError`)."""
    try:
        data = ckpt.to_bytes()
    except CheckpointError as e:
        raise named("checkpoint", f"checkpoint {path}: {e}") from None
    files.write_atomic(path, data, "checkpoint")


def hold(path: str | os.PathLike[str]) -> contextlib.ExitStack:
    """Own ``path`` for the run that writes its checkpoints there (:func:`meshnb.files.hold`): the
    held lock, released on leaving the returned stack; a refusal (in use by another run, a link or a
    stream) is a :class:`CheckpointError` naming ``checkpoint``."""
    owner = contextlib.ExitStack()
    try:
        owner.enter_context(files.hold(path, "checkpoint"))
    except (files.InUseError, files.OutputError) as e:
        raise named("checkpoint", str(e)) from None
    return owner


def load(path: str | os.PathLike[str], arg: str = "checkpoint") -> Checkpoint:
    """Read a checkpoint; :class:`CheckpointError` (one line naming ``arg``, the argument that gave
    ``path``) when it cannot be used."""
    try:
        with files.open_input(path, arg) as f:
            data = files.read_at_most(f, _PREFIX.size - 1, arg, path)
            if len(data) == _PREFIX.size and data[:8] == MAGIC:  # else from_bytes names what is wrong
                limit = _check_prefix(data) + VIEW_BYTES * MAX_SYSTEMS + _SUM_BYTES
                data += files.read_at_most(f, limit, arg, path)
                if len(data) > _PREFIX.size + limit:
                    raise CheckpointError("corrupt (larger than its header declares)")
        return Checkpoint._from_bytes(data)
    except files.InputError as e:
        raise named(arg, str(e)) from None
    except CheckpointError as e:
        raise named(arg, f"{arg} {path}: {e}") from None
