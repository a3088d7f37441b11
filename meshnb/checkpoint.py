"""Checkpoints of a whole cluster run: every member's view, counters and trace state, and the run's
settings, in one file that loads without pickle.

A checkpoint is taken at a task boundary where every member has completed the same step and no
round is pending, so the views (SPEC 7) are the members' whole state; the exchange page is not
saved, since it holds nothing a later round needs.  File format (little-endian):

| offset | bytes | content |
| --- | --- | --- |
| 0 | 8 | magic ``MESHNBCK`` |
| 8 | 4 | format version, u32 (1) |
| 12 | 4 | ``H``, the length of the header, u32 (at most 1 MiB) |
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
atomically (:func:`meshnb.files.write_atomic`): a temporary file beside the target, fsync, rename,
fsync of the directory.

**A checkpoint is untrusted input, even when its checksum matches** (the SHA-256 guards against
damage, not against a file made to be read).  :func:`load` reads only a regular file, and no more
than its prefix declares (16 + H + 64 pages + 32 bytes); the header is parsed only after its size is
checked (1 MiB), with no duplicate or unknown key, bounded nesting and no integer of more than
40 digits converted; then every field is checked for its type (an ``int`` that is not a ``bool``:
so no float, ``NaN`` or ``Infinity``) and range (u32 and u64 where the page holds them, 1 to 64 systems,
steps that stay below 2^64 - 1, sorted LR changes within the run, ``done`` within ``steps``, a
trace of 20 bytes per step done whose tail is ``length % 64`` bytes), and the file's size must be
exactly what the header declares.  Every refusal is one :class:`CheckpointError` line
``checkpoint PATH: FIELD: what is wrong``.

Not safetensors: it would check only the easy part (N pages at ``16 + H + 4096 k``), carry the
settings, counters and SHA-256 states as strings still parsed here, have no checksum, need a second
reader for version 1's files, and add a compiled dependency.
"""

from __future__ import annotations

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


class CheckpointError(ValueError):
    """A checkpoint that cannot be used: unreadable, corrupt, hostile, or of another run.

    A ``ValueError``; its message is one line, ``WHERE: FIELD: what is wrong``.

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


@dataclass(frozen=True)
class RunSettings:
    """What defines a cluster run: resuming with any of these different would be another run.

    Parameters
    ----------
    systems : int
        The cluster's systems (1 to 64).
    steps : int
        The steps of the whole run.
    steps_per_task : int or None
        STEPS_PER_TASK written into the pages, or None for the program's 64.
    set_lr : tuple of (int, int)
        ``(step, f32 bits)``: SET_LR before the task that starts when ``step`` steps of the run are
        done, sorted by step.
    step_base : int or None
        The 64-bit step the run started from where it set one (``train(step_base=...)``).
    z : bool
        Float mode Z (False: plain IEEE float32).
    first_step : int
        The members' next step when the run started.

    Examples
    --------
    >>> from meshnb.checkpoint import RunSettings
    >>> run = RunSettings(systems=2, steps=64, steps_per_task=None, set_lr=((0, 0x3E800000),),
    ...                   step_base=None, z=True, first_step=0)
    >>> run.to_json()["set_lr"]
    [[0, 1048576000]]
    >>> RunSettings.from_json(run.to_json()) == run
    True
    """

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
        pages' next step once prepared), as its checkpoints record them.

        Parameters
        ----------
        run : Run
            The run (:func:`meshnb.runspec.describe`), one group of its members.
        first_step : int
            The members' next step when the run started.

        Returns
        -------
        RunSettings
            The header's ``run`` settings.

        Examples
        --------
        >>> from meshnb.checkpoint import RunSettings
        >>> from meshnb.runspec import describe
        >>> RunSettings.of(describe(64, set_lr={0: 0.25}, group=2), 0).to_json()["set_lr"]
        [[0, 1048576000]]
        >>> RunSettings.of(describe(64, lrs=[0.5, 0.25]), 0)
        Traceback (most recent call last):
        ...
        ValueError: a checkpoint holds one cluster's run, not 2 systems alone
        """
        if run.groups != 1 or not run.is_cluster:
            what = f"{run.groups} groups of {run.group}" if run.is_cluster else f"{len(run)} systems alone"
            raise ValueError(f"a checkpoint holds one cluster's run, not {what}")
        plan = run.plan()
        return cls(run.group, plan.steps, plan.steps_per_task, plan.set_lr, plan.step_base, run.z, first_step)

    def to_json(self) -> dict[str, Any]:
        """The header's ``run`` object (JSON types: lists, ints, bools, None).

        Returns
        -------
        dict
            The fields by name; ``set_lr`` as ``[[step, bits], ...]``.

        Examples
        --------
        >>> from meshnb.checkpoint import RunSettings
        >>> RunSettings(1, 64, None, ((0, 0x3E800000),), None, True, 0).to_json()["set_lr"]
        [[0, 1048576000]]
        """
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
        ``FIELD: what is wrong``, without the file's name).

        Parameters
        ----------
        doc : object
            The ``run`` object as JSON decoded it (untrusted).
        field : str, default "run"
            Its name, for messages.

        Returns
        -------
        RunSettings
            The settings.

        Raises
        ------
        CheckpointError
            Naming the first bad field.

        Examples
        --------
        >>> from meshnb.checkpoint import RunSettings
        >>> doc = RunSettings(1, 64, None, (), None, True, 0).to_json()
        >>> RunSettings.from_json({**doc, "z": 1})
        Traceback (most recent call last):
        ...
        meshnb.checkpoint.CheckpointError: run.z: must be true or false, not an integer 1
        """
        d = _object(doc, field, ("systems", "steps", "steps_per_task", "set_lr", "step_base", "z", "first_step"))
        systems = _int(d["systems"], f"{field}.systems", 1, MAX_SYSTEMS)  # the file's own bound: load reads no more
        # The file reads the JSON's types (integers of 64 bits: no bools, no huge numbers; true or
        # false; [step, bits] pairs in order) and how the header's fields agree; the run's rules
        # are runspec's, train's, none written here: each value's by its rule, its refusal naming
        # the field (_by_rule), and the run's (the step counter's wrap of the members' page, which
        # starts at first_step) by runspec's rule of a page
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

    Parameters
    ----------
    doc : object
        The header as JSON decoded it (untrusted: anything).

    Returns
    -------
    tuple
        ``(RunSettings, steps done, counters by member, trace states by member)``.

    Raises
    ------
    CheckpointError
        Naming the first field that is missing, of the wrong type or out of range.

    Examples
    --------
    >>> from meshnb.checkpoint import parse_header
    >>> parse_header({"run": {}, "done": 0, "members": []})
    Traceback (most recent call last):
    ...
    meshnb.checkpoint.CheckpointError: run: 'systems' is missing
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
    """A run at a task boundary: ``done`` steps of ``run``, every member's page, counters, trace.

    Parameters
    ----------
    run : RunSettings
        What defines the run.
    done : int
        The steps of the run done.
    pages : tuple of bytes
        Every member's view page (4096 bytes), system 0 first.
    counters : tuple of dict
        Every member's ``{"inits", "steps", "timeouts"}``.
    traces : tuple of Sha256State
        Every member's trace hash state (:meth:`meshnb.trace.Trace.state`).

    Raises
    ------
    CheckpointError
        When the members do not match the run (their number, a pending round, a page at another
        step).

    See Also
    --------
    save, load : the file.

    Examples
    --------
    A checkpoint of a run that has not started (every member just initialised):

    >>> from meshnb import Context, Trace, View, init
    >>> from meshnb.checkpoint import Checkpoint, RunSettings
    >>> ctx = Context(View())
    >>> init(ctx)
    >>> run = RunSettings(1, 64, None, (), None, True, first_step=0)
    >>> ckpt = Checkpoint(run, 0, (ctx.view.tobytes(),), (ctx.counter_dict(),), (Trace(resumable=True).state(),))
    >>> len(ckpt.to_bytes())  # prefix, header, one page, checksum
    4445
    >>> Checkpoint.from_bytes(ckpt.to_bytes()) == ckpt
    True
    """

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
        """The file's JSON header (the module docstring's format).

        Returns
        -------
        dict
            ``run``, ``done``, ``members`` (counters and trace states).

        Examples
        --------
        >>> from meshnb import Context, Trace, View, init
        >>> from meshnb.checkpoint import Checkpoint, RunSettings
        >>> ctx = Context(View())
        >>> init(ctx)
        >>> run = RunSettings(1, 64, None, (), None, True, first_step=0)
        >>> ckpt = Checkpoint(run, 0, (ctx.view.tobytes(),), (ctx.counter_dict(),), (Trace(resumable=True).state(),))
        >>> sorted(ckpt.header()), ckpt.header()["members"][0]["counters"]
        (['done', 'members', 'run'], {'inits': 1, 'steps': 0, 'timeouts': 0})
        """
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
        """The file's bytes; :class:`CheckpointError` where :func:`load` would refuse them.

        Returns
        -------
        bytes
            The magic, the version, the header, the pages, the SHA-256 of all of them.

        Raises
        ------
        CheckpointError
            When the header is too large.

        Examples
        --------
        >>> from meshnb import Context, Trace, View, init
        >>> from meshnb.checkpoint import Checkpoint, RunSettings
        >>> ctx = Context(View())
        >>> init(ctx)
        >>> run = RunSettings(1, 64, None, (), None, True, first_step=0)
        >>> ckpt = Checkpoint(run, 0, (ctx.view.tobytes(),), (ctx.counter_dict(),), (Trace(resumable=True).state(),))
        >>> ckpt.to_bytes()[:8]
        b'MESHNBCK'
        """
        doc = self.header()
        parse_header(doc)  # never write a file that load would refuse
        header = json.dumps(doc, separators=(",", ":")).encode()
        if len(header) > MAX_HEADER_BYTES:
            raise CheckpointError(f"header: {len(header)} bytes, more than {MAX_HEADER_BYTES}")
        body = _PREFIX.pack(MAGIC, VERSION, len(header)) + header + b"".join(self.pages)
        return body + hashlib.sha256(body).digest()

    @classmethod
    def from_bytes(cls, data: bytes, where: str = "checkpoint") -> Checkpoint:
        """A checkpoint from a file's bytes; :class:`CheckpointError` ``WHERE: FIELD: what is wrong``.

        Parameters
        ----------
        data : bytes
            A checkpoint file's bytes (untrusted).
        where : str, default "checkpoint"
            What to call it in messages.

        Returns
        -------
        Checkpoint
            Every field checked.

        Raises
        ------
        CheckpointError
            When the bytes are not a usable checkpoint.

        Examples
        --------
        >>> from meshnb import Context, Trace, View, init
        >>> from meshnb.checkpoint import Checkpoint, RunSettings
        >>> ctx = Context(View())
        >>> init(ctx)
        >>> run = RunSettings(1, 64, None, (), None, True, first_step=0)
        >>> ckpt = Checkpoint(run, 0, (ctx.view.tobytes(),), (ctx.counter_dict(),), (Trace(resumable=True).state(),))
        >>> data = bytearray(ckpt.to_bytes())
        >>> data[-1] ^= 1  # one bit of damage
        >>> Checkpoint.from_bytes(bytes(data), "run.ckpt")
        Traceback (most recent call last):
        ...
        meshnb.checkpoint.CheckpointError: run.ckpt: corrupt or truncated (its checksum does not match)
        """
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
    a checkpoint that :func:`load` would refuse a :class:`CheckpointError`).

    Parameters
    ----------
    path : str or os.PathLike
        The file; its directory must exist.
    ckpt : Checkpoint
        The run to save.

    Raises
    ------
    CheckpointError
        When the checkpoint could not be read back (its header too large).
    meshnb.files.WriteError
        When the file cannot be written (one line: the path and the reason).

    Examples
    --------
    >>> import os, tempfile
    >>> from meshnb import Context, Trace, View, init
    >>> from meshnb.checkpoint import Checkpoint, RunSettings, load, save
    >>> ctx = Context(View())
    >>> init(ctx)
    >>> run = RunSettings(1, 64, None, (), None, True, first_step=0)
    >>> ckpt = Checkpoint(run, 0, (ctx.view.tobytes(),), (ctx.counter_dict(),), (Trace(resumable=True).state(),))
    >>> path = os.path.join(tempfile.mkdtemp(), "run.ckpt")
    >>> save(path, ckpt)
    >>> load(path) == ckpt
    True
    """
    try:
        data = ckpt.to_bytes()
    except CheckpointError as e:
        raise CheckpointError(f"checkpoint {path}: {e}") from None
    files.write_atomic(path, data, "checkpoint")


def load(path: str | os.PathLike[str]) -> Checkpoint:
    """Read a checkpoint; :class:`CheckpointError` (one line) when it cannot be used.

    Only a regular file is read, and no more of it than its prefix declares: at most the header's
    declared length, 64 pages and the checksum past the 16-byte prefix.

    Parameters
    ----------
    path : str or os.PathLike
        The checkpoint file (untrusted input).

    Returns
    -------
    Checkpoint
        Every field checked.

    Raises
    ------
    CheckpointError
        When the file cannot be read or used: ``checkpoint PATH: FIELD: what is wrong``.

    See Also
    --------
    save : writes one.
    meshnb.train : ``train(resume=path)`` continues the run of a checkpoint.

    Examples
    --------
    >>> import os, tempfile
    >>> from meshnb.checkpoint import load
    >>> path = os.path.join(tempfile.mkdtemp(), "empty.ckpt")
    >>> _ = open(path, "wb").write(b"MESHNBCK")
    >>> load(path)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    meshnb.checkpoint.CheckpointError: checkpoint .../empty.ckpt: not a meshnb checkpoint
    """
    where = f"checkpoint {path}"
    try:
        with files.open_input(path, "checkpoint") as f:
            data = files.read_at_most(f, _PREFIX.size - 1, "checkpoint", path)
            if len(data) == _PREFIX.size and data[:8] == MAGIC:  # else from_bytes names what is wrong
                try:
                    limit = _check_prefix(data) + VIEW_BYTES * MAX_SYSTEMS + _SUM_BYTES
                except CheckpointError as e:
                    raise CheckpointError(f"{where}: {e}") from None
                data += files.read_at_most(f, limit, "checkpoint", path)
                if len(data) > _PREFIX.size + limit:
                    raise CheckpointError(f"{where}: corrupt (larger than its header declares)")
    except files.InputError as e:
        raise CheckpointError(str(e)) from None
    return Checkpoint.from_bytes(data, where)
