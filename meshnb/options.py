"""A run's options: every keyword of :func:`meshnb.train` and every flag of ``meshnb train``,
declared once, with its default, its check and its help.

:class:`RunOptions` is the one table: each field's metadata (:class:`Flag`) gives the command
line's flag, how a flag's text is parsed, and the help text; the library's signature, the CLI's
parser and the error messages are made from it.  :class:`Plan` is the part of a run that the
task loop follows (steps, task length, LR changes, step base); :func:`resolve` turns options
into what a cluster backend starts from (a fresh run or a checkpoint's), in one place for all.
"""

from __future__ import annotations

import argparse
import math
import os
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import MISSING, dataclass, field, fields, replace
from typing import Any

import numpy as np

from . import checkpoint, files

# What each backend can do: one table below the options, read here (and named here, as before).
from .backend_table import ALONE_BACKENDS as ALONE_BACKENDS
from .backend_table import BY_NAME
from .backend_table import CLUSTER_BACKENDS as CLUSTER_BACKENDS
from .checkpoint import MAX_SYSTEMS, Checkpoint, CheckpointError, RunSettings
from .program import LAST_STEP

MASK32 = 0xFFFFFFFF
DEFAULT_STEPS = 4096
# The longest wait a run takes (a round's timeout, the give-up bound, the checkpoint interval, a
# stall), about 116 days: longer ones overflow the platform's timeouts (time_t, a lock's wait).
MAX_WAIT_S = 1e7


class OptionError(ValueError):
    """A bad option: one line that names the option as the caller spelled it.

    ``template`` holds ``{name}`` placeholders for option names: ``str(e)`` spells them as the
    library's keywords, :meth:`for_cli` as the command line's flags."""

    def __init__(self, template: str, *names: str) -> None:
        self.template, self.names = template, names
        super().__init__(template.format(**{n: _LIBRARY_SPELLING.get(n, n) for n in names}))

    def for_cli(self) -> str:
        """The message with the option names spelled as the command line's flags."""
        return self.template.format(**{n: _FLAGS[n].cli_spelling for n in self.names})


# --- parsing the command line's text (argparse ``type=`` functions) ----------------------------


def arg_type(parse: Callable[[str], Any]) -> Callable[[str], Any]:
    """An argparse ``type=`` from a parser raising ValueError, its message kept (argparse words
    a plain ValueError as "invalid value")."""

    def convert(text: str) -> Any:
        try:
            return parse(text)
        except ValueError as e:
            raise argparse.ArgumentTypeError(str(e)) from None

    convert.__name__ = getattr(parse, "__name__", "value")
    return convert


def parse_count(text: str) -> int:
    # ASCII digits only: int() would also take "1_000", " 5", "+5" and other scripts' digits ("٥").
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
    if not re.fullmatch(r"-?(0[xX])?[0-9a-fA-F]+", text):
        raise ValueError(f"{what}: {text!r} is not hex")
    try:
        value = int(text, 16)
    except ValueError:
        raise ValueError(f"{what}: {text!r} is not hex") from None
    if not 0 <= value <= MASK32 or text.strip().startswith("-"):
        raise ValueError(f"{what}: {text!r} is not a u32 in hex")
    return value


def parse_positive(text: str) -> float:
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


def _parse_positive_u32(text: str) -> int:
    value = parse_count(text)
    if not 1 <= value <= MASK32:
        raise ValueError(f"{text!r} must be from 1 to {MASK32}")
    return value


def _parse_set_lr(text: str) -> tuple[int, int]:
    step, sep, bits = text.partition(":")
    if not sep:
        raise ValueError(f"{text!r} is not STEP:HEX")
    return parse_count(step), parse_hex_u32(bits, "f32 bits")


def _parse_step_base(text: str) -> int:
    hi, sep, lo = text.partition(":")
    if not sep:
        raise ValueError(f"{text!r} is not HI:LO")
    return parse_hex_u32(hi, "step high half") << 32 | parse_hex_u32(lo, "step low half")


def _parse_systems(text: str) -> int:
    value = parse_count(text)
    if not 1 <= value <= MAX_SYSTEMS:
        raise ValueError(f"{text!r} must be from 1 to {MAX_SYSTEMS}")
    return value


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
        return {"--systems": "--systems N", "--resume": "--resume PATH"}.get(self.flag or "", self.flag or "")


def _opt(default: Any, flag: Flag) -> Any:
    return field(default=default, metadata={"flag": flag})


@dataclass(frozen=True)
class RunOptions:
    """Everything a run of the train program takes; checked when made (:class:`OptionError`)."""

    steps: int | None = _opt(
        None, Flag("--steps", "steps to run (default 4096; with --resume, the run's)", "S", parse_count)
    )
    steps_per_task: int | None = _opt(
        None, Flag("--steps-per-task", "STEPS_PER_TASK of the page (default 64)", "K", _parse_positive_u32)
    )
    set_lr: tuple[tuple[int, int], ...] | None = _opt(
        None,
        Flag(
            "--set-lr",
            "SET_LR with f32 bits HEX before the task that starts when STEP steps of this run are done "
            "(0 = before the first; repeatable)",
            "STEP:HEX",
            _parse_set_lr,
            repeat=True,
        ),
    )
    step_base: int | None = _opt(
        None, Flag("--step-base", "after init, set STEP_HI and NEXT_STEP (hex)", "HI:LO", _parse_step_base)
    )
    view_in: bytes | None = _opt(
        None, Flag("--view-in", "start from this raw 4096-byte page instead of init", "PATH", str)
    )
    z: bool = _opt(True, Flag("--ieee", "plain IEEE float32 instead of float mode Z (comparison only)"))
    keep_trace: bool = _opt(False, Flag(None, "keep the applied sums as result.trace ([steps, 5] uint32)"))
    progress: bool = _opt(False, Flag(None, "a progress bar on stderr"))
    systems: int | None = _opt(
        None,
        Flag(
            "--systems",
            "a cluster of N systems in lockstep (1 to 64)",
            "N",
            _parse_systems,
            cluster=True,
            library="systems=N",
        ),
    )
    backend: str = _opt(
        "threads",
        Flag(
            "--backend",
            "threads (default), processes, fused, mpi (under mpiexec: one system per rank), or cuda (also one system)",
            "{" + ",".join(CLUSTER_BACKENDS) + "}",
            _parse_backend,
            cluster=True,
        ),
    )
    timeout_ms: float = _opt(
        1000.0, Flag("--timeout-ms", "a round's timeout in ms (default 1000)", "T", parse_positive, cluster=True)
    )
    stalls: tuple[tuple[int, int, int], ...] = _opt(
        (),
        Flag(
            "--stall",
            "system K sleeps MS ms before its TASK call number TASK (from 0, retries included; repeatable)",
            "K:TASK:MS",
            _parse_stall,
            repeat=True,
            cluster=True,
        ),
    )
    give_up_s: float = _opt(
        60.0,
        Flag(
            "--give-up", "stop when a member completes no step for S s (default 60)", "S", parse_positive, cluster=True
        ),
    )
    checkpoint: str | os.PathLike[str] | None = _opt(
        None,
        Flag(
            "--checkpoint",
            "write the whole run here at task boundaries, on Ctrl-C and at the end",
            "PATH",
            str,
            cluster=True,
        ),
    )
    checkpoint_every_s: float = _opt(
        5.0, Flag("--checkpoint-every", "seconds between checkpoints (default 5)", "S", parse_positive, cluster=True)
    )
    resume: str | os.PathLike[str] | None = _opt(
        None, Flag("--resume", "continue the run of this checkpoint", "PATH", str, cluster=True, library="resume=PATH")
    )

    def __post_init__(self) -> None:
        put = object.__setattr__  # frozen: normalise once, here
        for name in ("z", "keep_trace", "progress"):
            if not isinstance(getattr(self, name), (bool, np.bool_)):  # None or "no" would pass as false or true
                raise TypeError(f"{name} must be True or False, not {getattr(self, name)!r}")
            put(self, name, bool(getattr(self, name)))
        for name in ("checkpoint", "resume"):
            path = getattr(self, name)
            if path is not None and not isinstance(os.fspath(path) if isinstance(path, os.PathLike) else path, str):
                raise TypeError(f"{name} is a path (str or os.PathLike), not {type(path).__name__}")
        if self.set_lr is not None:
            put(self, "set_lr", _lr_changes(self.set_lr))
        if self.resume is not None and self.view_in is not None:  # before the file is read
            raise OptionError("a resumed run starts from its checkpoint's pages, not from {view_in}", "view_in")
        if self.view_in is not None:
            put(self, "view_in", _page_bytes(self.view_in))
        if not self.is_cluster:
            for name in ("stalls", "checkpoint"):
                if getattr(self, name) not in (None, ()):
                    raise OptionError(
                        f"{{{name}}} is for clusters: give {{systems}} (or {{resume}})", name, "systems", "resume"
                    )
            if self.backend not in ("threads", *ALONE_BACKENDS):
                raise OptionError(
                    "{backend} is for clusters: give {systems} (or {resume})", "backend", "systems", "resume"
                )
            return
        if self.backend not in CLUSTER_BACKENDS:
            raise OptionError(f"backend must be one of {', '.join(CLUSTER_BACKENDS)}, got {self.backend!r}")
        for name, top in (
            ("timeout_ms", MAX_WAIT_S * 1000),
            ("give_up_s", MAX_WAIT_S),
            ("checkpoint_every_s", MAX_WAIT_S),
        ):
            put(self, name, _positive(getattr(self, name), name, top))
        # mpi: as many systems as ranks (checked against the job's size by the backend)
        top = math.inf if BY_NAME[self.backend].max_systems is None else MAX_SYSTEMS
        if self.systems is not None and (not is_int(self.systems) or not 1 <= self.systems <= top):
            raise OptionError(f"systems must be 1 to {MAX_SYSTEMS}, got {self.systems!r}")
        if self.systems is not None and self.checkpoint is not None:
            check_checkpoint_systems(self.systems)
        put(self, "stalls", check_stalls(self.stalls, self.systems))
        if not BY_NAME[self.backend].exchange and self.stalls:
            raise OptionError(f"the {self.backend} backend has no exchange and no tasks to stall")
        if self.resume is not None and self.keep_trace:
            raise OptionError("keep_trace cannot be resumed: a checkpoint keeps the trace's hash, not its words")
        if self.steps is not None:
            Plan(self.steps)  # the steps' own check, before anything runs

    @property
    def is_cluster(self) -> bool:
        """A cluster run (a group and an exchange), or one system alone (SPEC 10's host)."""
        return self.systems is not None or self.resume is not None or self.backend == "mpi"

    @property
    def backend_name(self) -> str:
        """The registry's name of the backend that runs these options."""
        return self.backend if self.is_cluster or self.backend in ALONE_BACKENDS else "single"

    def plan(self) -> Plan:
        """The plan of a fresh run (not a resumed one: :func:`resolve`)."""
        return Plan(
            DEFAULT_STEPS if self.steps is None else self.steps, self.steps_per_task, self.set_lr or (), self.step_base
        )

    @classmethod
    def from_keywords(cls, steps: int | None = None, **keywords: Any) -> RunOptions:
        """The options of ``meshnb.train(steps, **keywords)``; an unknown keyword is an OptionError."""
        unknown = sorted(set(keywords) - {f.name for f in fields(cls)})
        if unknown:
            raise OptionError(f"train() has no option {', '.join(map(repr, unknown))}")
        return cls(steps=steps, **keywords)


_FLAGS: dict[str, Flag] = {f.name: f.metadata["flag"] for f in fields(RunOptions)}
_LIBRARY_SPELLING: dict[str, str] = {n: fl.library for n, fl in _FLAGS.items() if fl.library}


def option_fields() -> list[tuple[str, Any, Flag]]:
    """(name, default, Flag) of every option, in declaration order: for the CLI and the docs."""
    return [(f.name, f.default if f.default is not MISSING else None, f.metadata["flag"]) for f in fields(RunOptions)]


def is_int(x: Any) -> bool:
    return isinstance(x, (int, np.integer)) and not isinstance(x, bool)


def _positive(x: Any, name: str, top: float) -> float:
    if isinstance(x, bool) or not isinstance(x, (int, float, np.integer, np.floating)) or not 0 < x <= top:
        raise OptionError(f"{{{name}}} must be a number above 0 and at most {top:g}, got {x!r}", name)
    return float(x)


def check_checkpoint_systems(systems: int) -> None:
    """Refuse, before any work, a checkpoint of more systems than a checkpoint holds (the mpi
    backend alone runs more than :data:`MAX_SYSTEMS`: one per rank)."""
    if systems > MAX_SYSTEMS:
        raise OptionError(
            f"{{checkpoint}} holds at most {MAX_SYSTEMS} systems, and this run has {systems}: "
            "run it without a checkpoint, or with fewer systems",
            "checkpoint",
        )


def check_stalls(stalls: Sequence[Sequence[int]], n: int | None) -> tuple[tuple[int, int, int], ...]:
    if isinstance(stalls, (str, bytes)) or not isinstance(stalls, Iterable):
        raise OptionError(
            f"{{stalls}} is a list of (system, task call, milliseconds) triples, got {stalls!r}", "stalls"
        )
    out = []
    for s in stalls:
        if (
            isinstance(s, (str, bytes))
            or not isinstance(s, Sequence)
            or len(s) != 3
            or not all(is_int(x) and x >= 0 for x in s)
        ):
            raise OptionError(f"a stall is (system, task call, milliseconds), three non-negative integers, got {s!r}")
        if s[2] > MAX_WAIT_S * 1000:
            raise OptionError(f"a stall lasts at most {MAX_WAIT_S * 1000:g} ms, got {s[2]}")
        if n is not None and s[0] >= n:
            raise OptionError(f"a stall names system {s[0]}, but the cluster has systems 0 to {n - 1}")
        out.append((int(s[0]), int(s[1]), int(s[2])))
    return tuple(out)


def _lr_changes(set_lr: Mapping[int, int] | Sequence[Sequence[int]]) -> tuple[tuple[int, int], ...]:
    def pair(p: Any) -> tuple[Any, ...]:
        if isinstance(p, (str, bytes)) or not isinstance(p, Iterable):
            raise OptionError("set_lr maps a step of the run to f32 bits: a dict or (step, bits) pairs")
        return tuple(p)

    pairs = list(set_lr.items()) if isinstance(set_lr, Mapping) else [pair(p) for p in pair(set_lr)]
    if not all(len(p) == 2 for p in pairs):
        raise OptionError("set_lr maps a step of the run to f32 bits: a dict or (step, bits) pairs")
    # Stable sort: several changes at one step apply in the order given (the last one wins).
    return tuple(sorted(((p[0], p[1]) for p in pairs), key=lambda p: p[0] if is_int(p[0]) else 0))


def _page_bytes(view_in: Any) -> bytes:
    """A start page: bytes-like, or a path to a 4096-byte file (:func:`files.page_from`), its
    errors named as the caller spells the option."""
    try:
        return files.page_from(view_in, "view_in")
    except ValueError as e:
        detail = str(e).removeprefix("view_in").replace("{", "{{").replace("}", "}}")
        raise OptionError("{view_in}" + detail, "view_in") from None
    except TypeError:
        raise OptionError(f"view_in is a page (bytes) or a path to one, not {type(view_in).__name__}") from None


@dataclass(frozen=True)
class Plan:
    """What the task loop follows: ``steps`` of this call, the page's STEPS_PER_TASK and next step
    to set first (None: as the page says), and ``set_lr``: ``(step, bits)`` pairs, SET_LR with
    ``bits`` before the task that starts when ``step`` steps of this call are done
    (``step == steps`` changes the final page only)."""

    steps: int = DEFAULT_STEPS
    steps_per_task: int | None = None
    set_lr: tuple[tuple[int, int], ...] = ()
    step_base: int | None = None

    def __post_init__(self) -> None:
        if not is_int(self.steps) or self.steps < 0:
            raise OptionError(f"steps must be a non-negative integer, got {self.steps!r}")
        if self.steps_per_task is not None and (
            not is_int(self.steps_per_task) or not 1 <= self.steps_per_task <= MASK32
        ):
            raise OptionError(f"steps per task must be 1..{MASK32}, got {self.steps_per_task!r}")
        for step, bits in self.set_lr:
            if not is_int(step) or not 0 <= step <= self.steps:
                raise OptionError(f"an LR change must be at a step from 0 to {self.steps}, got {step!r}")
            if not is_int(bits) or not 0 <= bits <= MASK32:
                raise OptionError(f"an LR change takes f32 bits (a u32), got {bits!r}")
        if self.step_base is not None and (not is_int(self.step_base) or not 0 <= self.step_base <= LAST_STEP):
            raise OptionError(f"a step base must be 0..2^64-2, got {self.step_base!r}")

    @classmethod
    def make(
        cls,
        steps: int = DEFAULT_STEPS,
        steps_per_task: int | None = None,
        set_lr: Mapping[int, int] | Sequence[Sequence[int]] | None = None,
        step_base: int | None = None,
    ) -> Plan:
        """A plan from ``train``-style arguments (``set_lr`` a dict or pairs, normalised and sorted)."""
        return cls(steps, steps_per_task, _lr_changes(set_lr or ()), step_base)

    def lr_changes_at(self, done: int) -> list[int]:
        """The f32 bits of the SET_LRs due before the task that starts at ``done``, in order."""
        return [bits for step, bits in self.set_lr if step == done]

    def next_boundary(self, spt: int, done: int) -> int:
        """Where the task that starts when ``done`` steps are done ends: ``spt`` steps later, or
        sooner at the run's end or where the next LR change must start a task."""
        end = min(done + spt, self.steps)
        for step, _ in self.set_lr:  # sorted
            if done < step < end:
                return step
        return end


# --- where a cluster run starts ----------------------------------------------------------------


@dataclass(frozen=True)
class Start:
    """A cluster run as a backend starts it: ``systems`` members, this call's plan, the steps of
    the run done before it, the float mode, and the checkpoint resumed (None: a fresh run,
    whose pages the backend prepares from ``whole``, the whole run's plan, which sets their
    STEPS_PER_TASK and step first)."""

    systems: int
    plan: Plan
    done_before: int
    z: bool
    checkpoint: Checkpoint | None
    whole: Plan | None

    def settings(self, first_step: int) -> RunSettings:
        """The run's settings, as a checkpoint records them (``first_step``: the pages' next step
        once prepared)."""
        if self.checkpoint is not None:
            return self.checkpoint.run
        assert self.whole is not None
        w = self.whole
        return RunSettings(self.systems, w.steps, w.steps_per_task, w.set_lr, w.step_base, self.z, first_step)


def resolve(
    opts: RunOptions, systems: int | None = None, load: Callable[[str | os.PathLike[str]], Checkpoint] | None = None
) -> Start:
    """Where a cluster run starts: a checkpoint's run (``load`` reads it, by default from the
    file; the options that define the run must match it) or a fresh one of ``systems`` members
    (default: ``opts.systems``)."""
    n = opts.systems if systems is None else systems
    if opts.resume is None:
        if n is None:
            raise OptionError("a cluster needs {systems}", "systems")
        check_stalls(opts.stalls, n)
        whole = opts.plan()
        return Start(n, replace(whole, steps_per_task=None, step_base=None), 0, opts.z, None, whole)
    ck = (load or checkpoint.load)(opts.resume)
    where = f"checkpoint {opts.resume}"
    check_same_run(ck, opts, where)
    if n is not None and ck.run.systems != n:
        raise CheckpointError(f"{where}: it is a run with systems = {ck.run.systems}, not {n}")
    run = ck.run
    check_stalls(opts.stalls, run.systems)
    plan = Plan(run.steps - ck.done, None, tuple((s - ck.done, b) for s, b in run.set_lr if s >= ck.done))
    return Start(run.systems, plan, ck.done, run.z, ck, None)


def check_same_run(ck: Checkpoint, opts: RunOptions, where: str) -> None:
    """Refuse a resume whose explicit options are not the checkpoint's run."""
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
            raise CheckpointError(f"{where}: it is a run with {name} = {have[name]!r}, not {mine!r}")
