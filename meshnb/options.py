"""A run's options: every keyword of :func:`meshnb.train` and flag of ``meshnb train``, declared once.

:class:`RunOptions` is the one table (each field's :class:`Flag`: its flag, parser and help); a
fresh run's values are checked once, by the :class:`~meshnb.runspec.Run` they describe;
:func:`resolve` turns options into what a cluster backend starts from (fresh or a checkpoint's)."""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import re
import stat
import sys
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import MISSING, dataclass, field, fields, replace
from typing import Any

import numpy as np

from . import checkpoint, files

# What each backend can do: one table below the options, read and re-exported here.
from .backend_table import ALONE_BACKENDS as ALONE_BACKENDS
from .backend_table import BY_NAME
from .backend_table import CLUSTER_BACKENDS as CLUSTER_BACKENDS
from .checkpoint import MAX_SYSTEMS, Checkpoint, CheckpointError, RunSettings
from .runspec import (
    DEFAULT_STEPS,
    MASK32,
    MAX_STEPS,
    LrChange,
    OptionError,
    Plan,
    Run,
    check_bool,
    check_int,
    check_number,
    check_step_base,
    check_steps,
    check_steps_per_task,
    describe,
    is_int,
    lr_changes,
    parse_lr,
)

__all__ = ["DEFAULT_STEPS", "OptionError", "Plan", "is_int", "parse_lr"]  # re-exported: their home is meshnb.runspec
# The longest wait a run takes (a round's timeout, the give-up bound, the checkpoint interval, a
# stall), about 116 days: longer ones overflow the platform's timeouts (time_t, a lock's wait).
MAX_WAIT_S = 1e7


def option_error(template: str, *names: str) -> OptionError:
    """An :class:`~meshnb.runspec.OptionError` naming options of this table (keywords, or flags by ``for_cli``)."""
    return OptionError(template, *names, library=_LIBRARY_SPELLING, flags=CLI_SPELLING)


# --- parsing the command line's text (argparse ``type=`` functions) ----------------------------
def arg_type(parse: Callable[[str], Any]) -> Callable[[str], Any]:
    """An argparse ``type=`` from a parser raising ValueError, its message kept; warnings go to stderr as one line."""

    def convert(text: str) -> Any:
        try:
            with warnings.catch_warnings(record=True) as said:
                warnings.simplefilter("always")
                value = parse(text)
        except ValueError as e:
            raise argparse.ArgumentTypeError(str(e)) from None
        for w in said:
            print(f"meshnb: warning: {w.message}", file=sys.stderr, flush=True)
        return value

    convert.__name__ = getattr(parse, "__name__", "value")
    return convert


def parse_count(text: str) -> int:
    """A count as a command line writes it: ASCII digits, 0 or more (``int()`` would take ``1_0``, `` 5``, ``+5``)."""
    if not re.fullmatch(r"-?[0-9]+", text):
        raise ValueError(f"{text!r} is not a whole number")
    try:
        value = int(text, 10)
    except ValueError:  # more digits than int() converts
        raise ValueError(f"{text!r} is not a whole number") from None
    if value < 0:
        raise ValueError(f"{text!r} is negative")
    return value


def parse_hex_u32(text: str, what: str = "value") -> int:
    """A u32 written in hex, with or without ``0x`` (a ValueError naming ``what`` otherwise)."""
    if not re.fullmatch(r"-?(0[xX])?[0-9a-fA-F]+", text):
        raise ValueError(f"{what}: {text!r} is not hex")
    value = int(text, 16)  # any length: a power-of-two base has no digit limit
    if not 0 <= value <= MASK32 or text.strip().startswith("-"):
        raise ValueError(f"{what}: {text!r} is not a u32 in hex")
    return value


def parse_positive(text: str) -> float:
    """A finite number above 0, as text (a ValueError otherwise)."""
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"{text!r} is not a number") from None
    if not 0 < value < math.inf:
        raise ValueError(f"{text!r} must be a positive number")
    return value


def parse_seconds(text: str) -> float:
    """A duration in seconds: above 0, at most :data:`MAX_WAIT_S`."""
    value = parse_positive(text)
    if value > MAX_WAIT_S:
        raise ValueError(f"{text!r} is more than {MAX_WAIT_S:g} s")
    return value


def _count_from_1(top: int) -> Callable[[str], int]:
    """A parser of a count from 1 to ``top`` (:func:`parse_count`'s text)."""

    def parse(text: str) -> int:
        value = parse_count(text)
        if not 1 <= value <= top:
            raise ValueError(f"{text!r} must be from 1 to {top}")
        return value

    return parse


_parse_positive_u32 = _count_from_1(MASK32)
_parse_systems = _count_from_1(MAX_SYSTEMS)


def _parse_set_lr(text: str) -> tuple[int, np.uint32]:
    """``--set-lr STEP:LR``, the LR :func:`~meshnb.runspec.parse_lr`'s (bare hex: refused, or a number that warns)."""
    step, sep, lr = text.partition(":")
    if not sep:
        raise ValueError(f"{text!r} is not STEP:LR")
    at = parse_count(step)
    bare_hex = re.fullmatch(r"[0-9a-fA-F]{1,8}", lr) is not None  # hex without 0x
    try:
        word = parse_lr(lr, "LR")
    except ValueError as e:
        raise ValueError(f"{e}" + (f"; for the f32 word write {step}:0x{lr}" if bare_hex else "")) from None
    if bare_hex and int(lr, 16) != word:  # 1, 100: the number, with a FutureWarning
        warnings.warn(
            f"--set-lr {text}: {lr} is the number {float(lr):g} (f32 word {word:#010x}); an LR in hex "
            f"without 0x was read as an f32 word before: for the word write {step}:0x{lr}",
            FutureWarning,
            stacklevel=2,
        )
    return at, np.uint32(word)


def parse_step_base(text: str) -> int:
    """A step base as the command line writes it: ``N`` or ``0x...`` (``HI:LO``, two hex halves, deprecated)."""
    t = text.strip()
    if ":" in t:
        hi, _, lo = t.partition(":")
        value = parse_hex_u32(hi, "step high half") << 32 | parse_hex_u32(lo, "step low half")
        warnings.warn(
            f"--step-base {text}: HI:LO is deprecated: write the step as a number, {value} or {value:#x}",
            DeprecationWarning,
            stacklevel=2,
        )
    elif re.fullmatch(r"0[xX][0-9a-fA-F]+", t):
        value = int(t, 16)
    else:
        value = parse_count(t)
    return check_step_base(value)


def _parse_backend(text: str) -> str:
    if text not in CLUSTER_BACKENDS:
        raise ValueError(f"backend must be one of {', '.join(CLUSTER_BACKENDS)}, got {text!r}")
    return text


def _parse_stall(text: str) -> tuple[int, int, int]:
    parts = text.split(":")
    if len(parts) != 3:
        raise ValueError(f"{text!r} is not K:TASK:MS")
    k, call, ms = (parse_count(p) for p in parts)
    return k, call, ms


# --- the table ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class Flag:
    """How an option appears on the command line (``flag`` None: library only)."""

    flag: str | None
    help: str
    metavar: str | None = None
    parse: Callable[[str], Any] | None = None  # text -> value; None: a switch
    repeat: bool = False  # the flag may be given many times (values collected in a list)
    cluster: bool = False  # only for clusters (--systems N, --resume, or the mpi backend)
    library: str | None = None  # how the library's messages spell it, if not its keyword

    @property
    def cli_spelling(self) -> str:
        """The flag as a message names it (``--systems N``)."""
        return {"--systems": "--systems N", "--resume": "--resume PATH"}.get(self.flag or "", self.flag or "")


def option_field(default: Any, flag: Flag) -> Any:
    """A field of the options table: its default and its :class:`Flag`."""
    return field(default=default, metadata={"flag": flag})


@dataclass(frozen=True)
class RunOptions:
    """Everything a run of the train program takes; checked when made.

    Each field is a keyword of :func:`meshnb.train` and, by its :class:`Flag`, a ``meshnb train``
    flag; a bad value is an :class:`OptionError`, a wrong type a :class:`TypeError`.

    Parameters
    ----------
    steps, steps_per_task, step_base : int or None
        Steps to run (None: 4096; with ``resume``, the run's); STEPS_PER_TASK and the first step
        (0 to 2^64 - 2) written into the page (None: as it says).
    set_lr, view_in : mapping or pairs; bytes-like; or None
        ``{step: LR}``: SET_LR before the task that starts when ``step`` steps are done (kept as
        words); the start page (None: init's).
    z, keep_trace, progress, overwrite_checkpoint : bool
        Float mode Z (False: plain IEEE float32, for comparison only); keep the applied sums
        (``result.trace``); a progress bar on stderr; let ``checkpoint`` replace a file that is
        not a checkpoint of this run.
    systems, backend : int, str or None
        A cluster of this many systems (None: one alone); where it executes (the glossary's
        backends; None: ``single`` alone, ``threads`` for a cluster).
    timeout_ms, give_up_s, checkpoint_every_s : float
        A round's timeout in ms; seconds without a completed step before a cluster gives up
        (:class:`~meshnb.results.ClusterError`); seconds between checkpoints.
    stalls : sequence of (int, int, int)
        ``(system, task call, ms)``: fault injection, a member sleeping before a TASK call.
    checkpoint, resume : str or path, or None
        Where a cluster's run is written (task boundaries, Ctrl-C, the end); a checkpoint to continue.

    Examples
    --------
    >>> RunOptions(steps=10).backend_name, RunOptions(steps=10, systems=4).backend_name
    ('single', 'threads')
    >>> RunOptions(set_lr={0: 0.5}).set_lr  # an LR as its f32 word
    (LrChange(step=0, word=1056964608),)
    >>> RunOptions(backend="fused")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
        ...
    meshnb.runspec.OptionError: backend is for clusters: give systems=N (or resume=PATH), or leave it out ...
    """

    # fmt: off
    steps: int | None = option_field(None, Flag(
        "--steps", "steps to run (default 4096; with --resume, the run's)", "S", parse_count))
    steps_per_task: int | None = option_field(None, Flag(
        "--steps-per-task", "STEPS_PER_TASK of the page (default 64)", "K", _parse_positive_u32))
    set_lr: tuple[LrChange, ...] | None = option_field(None, Flag(
        "--set-lr", "SET_LR with LR before the task that starts when STEP steps of this run are done "
        "(0 = before the first; repeatable); LR a number (0.01, 1) or an f32 word in hex (0x3c23d70a)",
        "STEP:LR", _parse_set_lr, repeat=True))
    step_base: int | None = option_field(None, Flag(
        "--step-base", "after init, the first step: N or 0xHEX (0 to 2^64-2; HI:LO, two hex halves, is deprecated)",
        "N", parse_step_base))
    view_in: bytes | None = option_field(None, Flag(
        "--view-in", "start from this raw 4096-byte page instead of init", "PATH", str))
    z: bool = option_field(True, Flag("--ieee", "plain IEEE float32 instead of float mode Z (comparison only)"))
    keep_trace: bool = option_field(False, Flag(None, "keep the applied sums as result.trace ([steps, 5] uint32)"))
    progress: bool = option_field(False, Flag(None, "a progress bar on stderr"))
    systems: int | None = option_field(None, Flag(
        "--systems", "a cluster of N systems in lockstep (1 to 64)", "N", _parse_systems, cluster=True,
        library="systems=N"))
    backend: str | None = option_field(None, Flag(
        "--backend", "where the run executes: threads (a cluster's default), processes, fused, mpi (under mpiexec: "
        "one system per rank), or cuda (also one system alone); without it and --systems, one system alone",
        "{" + ",".join(CLUSTER_BACKENDS) + "}", _parse_backend, cluster=True))
    timeout_ms: float = option_field(1000.0, Flag(
        "--timeout-ms", "a round's timeout in ms (default 1000)", "T", parse_positive, cluster=True))
    stalls: tuple[tuple[int, int, int], ...] = option_field((), Flag(
        "--stall", "system K sleeps MS ms before its TASK call number TASK (from 0, retries included; repeatable)",
        "K:TASK:MS", _parse_stall, repeat=True, cluster=True))
    give_up_s: float = option_field(60.0, Flag(
        "--give-up", "stop when a member completes no step for S s (default 60)", "S", parse_positive, cluster=True))
    checkpoint: str | os.PathLike[str] | None = option_field(None, Flag(
        "--checkpoint", "write the whole run here at task boundaries, on Ctrl-C and at the end", "PATH", str,
        cluster=True))
    overwrite_checkpoint: bool = option_field(False, Flag(
        "--overwrite-checkpoint",
        "let --checkpoint replace an existing file that is not a checkpoint of this run (refused without it)",
        cluster=True, library="overwrite_checkpoint=True"))
    checkpoint_every_s: float = option_field(5.0, Flag(
        "--checkpoint-every", "seconds between checkpoints (default 5)", "S", parse_positive, cluster=True))
    resume: str | os.PathLike[str] | None = option_field(None, Flag(
        "--resume", "continue the run of this checkpoint", "PATH", str, cluster=True, library="resume=PATH"))
    # fmt: on

    def __post_init__(self) -> None:
        put = object.__setattr__  # frozen: normalise once, here
        for name in ("z", "keep_trace", "progress", "overwrite_checkpoint"):
            put(self, name, check_bool(getattr(self, name), name))
        for name in ("checkpoint", "resume"):
            path = getattr(self, name)
            if path is not None and not isinstance(os.fspath(path) if isinstance(path, os.PathLike) else path, str):
                raise TypeError(f"{name} is a path (str or os.PathLike), not {type(path).__name__}")
        run: Run | None = None
        if self.resume is None:  # a fresh run: its description, checked once (runspec.describe)
            run = self._described()
            put(self, "steps", None if self.steps is None else run.steps)
            put(self, "set_lr", None if self.set_lr is None else run.set_lr)
            put(self, "view_in", None if self.view_in is None else run.starts[0].astype("<u4").tobytes())
            put(self, "steps_per_task", run.steps_per_task)
            put(self, "step_base", run.base)
        else:  # a resumed run is its checkpoint's: what is given is compared with it (check_same_run)
            if self.steps is not None:
                put(self, "steps", check_steps(self.steps))
            if self.set_lr is not None:
                put(self, "set_lr", lr_changes(self.set_lr, MAX_STEPS if self.steps is None else self.steps))
            if self.view_in is not None:  # before the file is read
                raise option_error("a resumed run starts from its checkpoint's pages, not from {view_in}", "view_in")
            if self.steps_per_task is not None:
                put(self, "steps_per_task", check_steps_per_task(self.steps_per_task))
            if self.step_base is not None:
                put(self, "step_base", check_step_base(self.step_base))
        # The cluster options' values are checked with or without a cluster: the same value, the same answer.
        for name, top in (
            ("timeout_ms", MAX_WAIT_S * 1000),
            ("give_up_s", MAX_WAIT_S),
            ("checkpoint_every_s", MAX_WAIT_S),
        ):
            put(self, name, _positive(getattr(self, name), name, top))
        if self.backend is not None:
            if not isinstance(self.backend, str):
                raise TypeError(f"backend is a name ({', '.join(CLUSTER_BACKENDS)}), not {type(self.backend).__name__}")
            if self.backend not in CLUSTER_BACKENDS:
                raise option_error(f"backend must be one of {', '.join(CLUSTER_BACKENDS)}, got {self.backend!r}")
        if not self.is_cluster:
            for name in ("stalls", "checkpoint"):
                if getattr(self, name) not in (None, ()):
                    raise option_error(
                        f"{{{name}}} is for clusters: give {{systems}} (or {{resume}})", name, "systems", "resume"
                    )
            if self.backend is not None and self.backend not in ALONE_BACKENDS:
                raise option_error(
                    "{backend} is for clusters: give {systems} (or {resume}), "
                    f"or leave it out to run one system alone ({', '.join(ALONE_BACKENDS)} also runs one)",
                    "backend",
                    "systems",
                    "resume",
                )
            put(self, "_run", None if run is None else replace(run, backend=self.backend_name))
            return
        backend = "threads" if self.backend is None else self.backend  # a cluster's default
        put(self, "backend", backend)
        # The backend table's bound (cuda: one block of warps); mpi: as many systems as ranks
        # (checked against the job's size by the backend)
        top = BY_NAME[backend].max_systems or (1 << 31)
        if self.systems is not None:
            put(self, "systems", check_int(self.systems, "systems", 1, top))
        if self.systems is not None and self.checkpoint is not None:
            check_checkpoint_systems(self.systems)
        put(self, "stalls", check_stalls(self.stalls, self.systems))
        if not BY_NAME[backend].exchange and self.stalls:
            raise option_error(f"the {backend} backend has no exchange and no tasks to stall")
        if self.resume is not None and self.keep_trace:
            raise option_error("keep_trace cannot be resumed: a checkpoint keeps the trace's hash, not its words")
        # one group of N; mpi without systems=N: the job's size, once known (resolve: Run.grouped)
        put(self, "_run", None if run is None else replace(run, group=self.systems or 1, backend=backend))

    def _described(self) -> Run:
        """:func:`meshnb.runspec.describe` of these options, a page's errors spelled as the option."""
        try:
            return describe(
                DEFAULT_STEPS if self.steps is None else self.steps,
                view_in=self.view_in,
                step_base=self.step_base,
                z=self.z,
                steps_per_task=self.steps_per_task,
                set_lr=self.set_lr,
                one_page=True,
            )
        except OptionError as e:
            if e.names or not str(e).startswith("view_in"):
                raise
            detail = str(e).removeprefix("view_in").replace("{", "{{").replace("}", "}}")
            raise option_error("{view_in}" + detail, "view_in") from None

    def describe(self) -> Run:
        """A fresh run as a :class:`~meshnb.runspec.Run` (checked when made): one system alone, or a group.

        Returns
        -------
        Run

        Examples
        --------
        >>> RunOptions(steps=10, systems=3).describe().group
        3
        """
        run: Run | None = getattr(self, "_run", None)
        if run is None:
            raise ValueError("a resumed run is its checkpoint's: options.resolve reads it")
        return run

    @property
    def is_cluster(self) -> bool:
        """A cluster run (a group and an exchange), or one system alone (SPEC 10's host)."""
        return self.systems is not None or self.resume is not None or self.backend == "mpi"

    @property
    def backend_name(self) -> str:
        """The backend that runs these options: ``backend``, else ``single`` (alone) or ``threads`` (a cluster)."""
        return "single" if self.backend is None else self.backend

    def plan(self) -> Plan:
        """The plan of a fresh run: steps, STEPS_PER_TASK, LR changes, step base (a resumed one's: :func:`resolve`).

        Returns
        -------
        Plan

        Examples
        --------
        >>> RunOptions(steps=100, set_lr={50: 0.25}).plan()
        Plan(steps=100, steps_per_task=None, set_lr=(LrChange(step=50, word=1048576000),), step_base=None)
        """
        return self.describe().plan()

    @classmethod
    def from_keywords(cls, steps: int | None = None, **keywords: Any) -> RunOptions:
        """The options of ``meshnb.train(steps, **keywords)``; an unknown keyword is an OptionError.

        Parameters
        ----------
        steps : int or None
            ``train``'s first argument.

        Returns
        -------
        RunOptions

        Examples
        --------
        >>> RunOptions.from_keywords(10, device="cuda")
        Traceback (most recent call last):
            ...
        meshnb.runspec.OptionError: train() has no option 'device'
        """
        unknown = sorted(set(keywords) - {f.name for f in fields(cls)})
        if unknown:
            raise option_error(f"train() has no option {', '.join(map(repr, unknown))}")
        return cls(steps=steps, **keywords)


_FLAGS: dict[str, Flag] = {f.name: f.metadata["flag"] for f in fields(RunOptions)}
_LIBRARY_SPELLING: dict[str, str] = {n: fl.library for n, fl in _FLAGS.items() if fl.library}


CLI_SPELLING: dict[str, str] = {n: fl.cli_spelling for n, fl in _FLAGS.items() if fl.flag}
"""How the command line spells each option (for :meth:`OptionError.for_cli`)."""


def add_flags(
    parser: argparse.ArgumentParser | argparse._ArgumentGroup,
    table: Iterable[tuple[str, Any, Flag]],
    group_for: Callable[[str, Flag], argparse.ArgumentParser | argparse._ArgumentGroup] | None = None,
    after: Mapping[str, Callable[[], None]] | None = None,
) -> None:
    """Add a table's flags to a parser; ``group_for(name, flag)`` picks the group, ``after[name]()`` adds more."""
    for name, _, flag in table:
        if flag.flag is None:
            continue  # library only
        group = parser if group_for is None else group_for(name, flag)
        how: dict[str, Any] = {"action": "store_true"}  # a switch: --ieee, --trace
        if flag.parse is not None:
            action = "append" if flag.repeat else "store"
            how = {"type": arg_type(flag.parse), "metavar": flag.metavar, "action": action}
        group.add_argument(flag.flag, dest=name, help=flag.help, **how)
        if after and name in after:
            after[name]()


def given_options(args: argparse.Namespace, table: Iterable[tuple[str, Any, Flag]]) -> dict[str, Any]:
    """The keywords of the flags given (a flag left out is not in the dict)."""
    values = {name: getattr(args, name, None) for name, _, flag in table if flag.flag is not None}
    given = {name: value for name, value in values.items() if value is not None and value is not False}
    if given.pop("z", False):  # --ieee
        given["z"] = False
    return given


def option_fields() -> list[tuple[str, Any, Flag]]:
    """(name, default, Flag) of every option, in declaration order: for the CLI and the docs."""
    return [(f.name, f.default if f.default is not MISSING else None, f.metadata["flag"]) for f in fields(RunOptions)]


def _positive(x: Any, name: str, top: float) -> float:
    try:
        return check_number(x, name, top)
    except OptionError as e:
        raise option_error(e.template, *e.names) from None


def check_checkpoint_systems(systems: int) -> None:
    """Refuse, before any work, a checkpoint of more systems than a checkpoint holds (mpi may run more)."""
    if systems > MAX_SYSTEMS:
        raise option_error(
            f"{{checkpoint}} holds at most {MAX_SYSTEMS} systems, and this run has {systems}: "
            "run it without a checkpoint, or with fewer systems",
            "checkpoint",
        )


def check_stalls(stalls: Sequence[Sequence[int]], n: int | None) -> tuple[tuple[int, int, int], ...]:
    """The test hook ``stalls`` checked: ``(system, task call, ms)`` triples, each system one of the ``n``."""
    if isinstance(stalls, (str, bytes)) or not isinstance(stalls, Iterable):
        raise option_error(
            f"{{stalls}} is a list of (system, task call, milliseconds) triples, got {stalls!r}", "stalls"
        )
    out = []
    for s in stalls:
        triple = isinstance(s, Sequence) and not isinstance(s, (str, bytes)) and len(s) == 3
        if not triple or not all(is_int(x) and x >= 0 for x in s):
            raise option_error(f"a stall is (system, task call, milliseconds), three non-negative integers, got {s!r}")
        if s[2] > MAX_WAIT_S * 1000:
            raise option_error(f"a stall lasts at most {MAX_WAIT_S * 1000:g} ms, got {s[2]}")
        if n is not None and s[0] >= n:
            raise option_error(f"a stall names system {s[0]}, but the cluster has systems 0 to {n - 1}")
        out.append((int(s[0]), int(s[1]), int(s[2])))
    return tuple(out)


# --- where a cluster run starts ----------------------------------------------------------------
@dataclass(frozen=True)
class Start:
    """A cluster run as a backend starts it: members, this call's plan, steps before, mode, checkpoint (None: fresh)."""

    systems: int
    plan: Plan
    done_before: int
    z: bool
    checkpoint: Checkpoint | None
    run: Run | None

    @property
    def whole(self) -> Plan | None:
        """A fresh run's whole plan (None: resumed, the checkpoint's pages are its start)."""
        return None if self.run is None else self.run.plan()

    def settings(self, first_step: int) -> RunSettings:
        """The run's settings, as a checkpoint records them (``first_step``: the pages' next step)."""
        if self.checkpoint is not None:
            return self.checkpoint.run
        assert self.run is not None
        return RunSettings.of(self.run, first_step)


def resolve(
    opts: RunOptions, systems: int | None = None, load: Callable[[str | os.PathLike[str]], Checkpoint] | None = None
) -> Start:
    """Where a cluster run starts: a checkpoint's run (its options must match it) or a fresh one of ``systems``."""
    n = opts.systems if systems is None else systems
    if opts.resume is None:
        if n is None:
            raise option_error("a cluster needs {systems}", "systems")
        check_stalls(opts.stalls, n)
        fresh = opts.describe().grouped(n)  # mpi without systems=N: the job's size is known now
        return Start(n, replace(fresh.plan(), steps_per_task=None, step_base=None), 0, opts.z, None, fresh)
    ck = load(opts.resume) if load else checkpoint.load(opts.resume, "resume")
    check_same_run(ck, opts, "resume", opts.resume)
    if n is not None and ck.run.systems != n:
        raise checkpoint.named("resume", f"resume {opts.resume}: it is a run with systems = {ck.run.systems}, not {n}")
    run = ck.run
    check_stalls(opts.stalls, run.systems)
    plan = Plan(run.steps - ck.done, None, tuple((s - ck.done, b) for s, b in run.set_lr if s >= ck.done))
    return Start(run.systems, plan, ck.done, run.z, ck, None)


def refuse_foreign_checkpoint(opts: RunOptions) -> None:
    """Refuse a ``checkpoint`` that is an existing file, neither ``resume`` nor this run's (unless overwritten)."""
    path = opts.checkpoint
    if path is None or opts.overwrite_checkpoint:
        return
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            return  # a directory, a stream: files.check_output's to refuse, never read here
    except OSError:
        return  # a new name (a dangling link, a missing directory: files.check_output's)
    with contextlib.suppress(OSError, ValueError):
        if files.pid_alive(int(files.lock_path(path).read_text())):
            return  # a live run holds it: refused next, naming that run (files.hold)
    if opts.resume is not None:
        with contextlib.suppress(OSError):
            if os.path.samefile(path, opts.resume):
                return  # the run's own checkpoint, continued

    def literal(text: str) -> str:  # a path's or an error's text inside the message's template
        return text.replace("{", "{{").replace("}", "}}")

    why = ""  # a template: {resume} is spelled as the caller wrote it
    try:
        existing = checkpoint.load(path)
        if opts.resume is not None:
            if existing.run != checkpoint.load(opts.resume).run:
                why = "a checkpoint of another run than the one {resume} continues"
        else:
            check_same_run(existing, opts, "checkpoint", path)
    except (CheckpointError, OSError) as e:
        why = why or literal(str(e).split(": ", 1)[-1] if isinstance(e, CheckpointError) else os.strerror(e.errno or 0))
    if why:
        raise option_error(
            f"{{checkpoint}} {literal(os.fspath(path))}: an existing file that is not a checkpoint of this run "
            f"({why}); not replaced: give {{overwrite_checkpoint}} to replace it",
            "checkpoint",
            "overwrite_checkpoint",
            *(("resume",) if "{resume}" in why else ()),
        )


def check_same_run(ck: Checkpoint, opts: RunOptions, arg: str, path: Any) -> None:
    """Refuse a resume whose explicit options are not the checkpoint's run (``arg``: what gave ``path``)."""
    have = ck.run.to_json()
    given: dict[str, Any] = {
        "systems": opts.systems,
        "steps": opts.steps,
        "steps_per_task": opts.steps_per_task,
        "step_base": opts.step_base,
        "z": None if opts.z else False,
        "set_lr": None if opts.set_lr is None else Plan.make(ck.run.steps, None, opts.set_lr).set_lr,
    }
    for name, value in given.items():
        if value is None:
            continue
        mine = [list(p) for p in value] if name == "set_lr" else value
        if mine != have[name]:
            raise checkpoint.named(arg, f"{arg} {path}: it is a run with {name} = {have[name]!r}, not {mine!r}")
