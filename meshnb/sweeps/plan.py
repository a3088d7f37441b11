"""A sweep's inputs, checked and planned: LRs, start pages, step bases, and what holding a result costs.

A sweep of P start pages and L learning rates is ``P * L`` systems, page-major (system
``p * L + l``).  Its run is :mod:`meshnb.runspec`'s :class:`~meshnb.runspec.Run`, the type of
``train``'s (the distinct start pages, the LR words and the step bases: planning 10^8 systems
costs their LR words, not their pages); this module adds the sweep's own options."""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ..interrupts import phase
from ..options import Flag, option_field, parse_count, parse_step_base
from ..runspec import (
    DEFAULT_STEPS,
    MAX_STEPS,
    LRs,
    OptionError,
    Pages,
    Run,
    StepBases,
    Systems,
    check_bool,
    check_fits,
    check_int,
    check_steps,
    describe,
    init_page,
    lr_words,
    parse_lr,
    parse_lr_number,
)
from ..view import VIEW_BYTES

__all__ = ["LRs", "Pages", "Run", "StepBases", "Systems", "check_fits", "describe", "init_page", "lr_words"]


def check_options(loss_every: Any, threads: Any, **flags: Any) -> None:
    """The run options every sweep form takes: one line naming the bad one."""
    if loss_every is not None:
        check_int(loss_every, "loss_every", 1, MAX_STEPS)
    if threads is not None:
        check_int(threads, "threads", 1, 4096)
    for name, value in flags.items():
        check_bool(value, name)


SWEEP_BACKENDS = ("cpu", "cuda")
"""Where a sweep runs: the CPU (its cores, on a pool of threads; the default) or the CUDA image
(one warp per system).  ``"threads"`` is a cluster's backend (members in lockstep on threads),
so the sweep's CPU is ``"cpu"``: a sweep's ``"threads"`` still works this release, with a warning."""


def check_backend(backend: Any, device: Any = None) -> str:
    """The sweep's ``backend`` (None: cpu), or the deprecated ``device=`` (the same names)."""
    if device is not None:
        if backend is not None:
            raise TypeError("give backend or its old name device, not both")
        warnings.warn(
            "sweep(device=...) is now backend=... (as train): backend='cpu' or 'cuda'", DeprecationWarning, 3
        )  # the caller of sweep()
        backend = device
    if backend is None:
        return "cpu"
    if backend == "threads":  # the sweep's old name for its CPU backend: deprecated (changelog)
        warnings.warn(
            "a sweep's backend 'threads' is 'cpu' now ('threads' is a cluster's backend)", DeprecationWarning, 3
        )
        return "cpu"
    if not isinstance(backend, str):
        raise TypeError(f"backend is a name ({', '.join(SWEEP_BACKENDS)}), not {type(backend).__name__}")
    if backend not in SWEEP_BACKENDS:
        raise OptionError(f"a sweep's backend must be one of {', '.join(SWEEP_BACKENDS)}, got {backend!r}")
    return backend


def check_backend_options(backend: str, loss_every: int | None, threads: int | None) -> None:
    """Refuse the CPU's options on the CUDA image."""
    if backend == "cuda" and (loss_every is not None or threads is not None):
        raise OptionError(
            "backend='cuda' keeps no loss history and runs no CPU threads: leave loss_every and threads out"
        )


# --- the command line's text -------------------------------------------------------------------


def parse_lr_range(text: str) -> Callable[[], NDArray[np.uint32]]:
    """``START:STOP:COUNT[:log]`` -> what makes COUNT float32 LR words from START to STOP, evenly spaced (in log)."""
    parts = text.split(":")
    if len(parts) not in (3, 4) or (len(parts) == 4 and parts[3] != "log"):
        raise ValueError(f"{text!r} is not START:STOP:COUNT[:log]")
    try:
        count = parse_count(parts[2])
    except ValueError:
        raise ValueError(f"{text!r}: START and STOP are numbers, COUNT a whole number") from None
    start, stop = (parse_lr_number(t, what) for t, what in zip(parts, ("START", "STOP"), strict=False))
    if count < 1:
        raise ValueError(f"{text!r}: COUNT must be at least 1")
    if not (np.isfinite(start) and np.isfinite(stop)):
        raise ValueError(f"{text!r}: START and STOP must be finite")
    check_fits(12 * count, f"{text!r}: {count} learning rates", "sweep fewer at a time")  # float64 + float32
    if len(parts) == 4 and (start <= 0 or stop <= 0):
        raise ValueError(f"{text!r}: a log range needs START and STOP > 0")
    return functools.partial(_lr_range_words, start, stop, count, len(parts) == 4)


def _lr_range_words(start: float, stop: float, count: int, log: bool) -> NDArray[np.uint32]:
    phase("sweep-lrs")  # test hook: the LR list is made from here, in chunks (a Ctrl-C then is seen at once)
    return lr_values(start, stop, count, log).view(np.uint32)


def parse_lrs(text: str) -> NDArray[np.uint32] | Callable[[], NDArray[np.uint32]]:
    """The command line's LRs as f32 words: a range (:func:`parse_lr_range`) or ``LR[,LR...]`` (:func:`parse_lr`)."""
    if ":" in text:
        return parse_lr_range(text)
    return np.array([parse_lr(t, "LR") for t in text.split(",")], dtype=np.uint32)


def _parse_positive(text: str) -> int:
    value = parse_count(text)
    if value < 1:
        raise ValueError(f"{text!r} must be at least 1")
    return value


def _parse_backend(text: str) -> str:
    return check_backend(text)


# --- the table ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class SweepOptions:
    """Everything a sweep takes, as :class:`~meshnb.options.RunOptions` is ``train``'s: each field's
    :class:`~meshnb.options.Flag` gives the ``meshnb sweep`` flag, its parser and help.  Made, it
    checks the options; :meth:`describe` checks the systems.

    Parameters
    ----------
    steps, lrs, view_in, step_base, z, trace, loss_every, threads, keep_pages, progress, backend
        As :func:`meshnb.sweep` takes them (``backend`` None: ``"cpu"``).

    Examples
    --------
    >>> SweepOptions(steps=10, lrs=[0.5]).backend
    'cpu'
    >>> SweepOptions(steps=10, threads=0)
    Traceback (most recent call last):
        ...
    meshnb.runspec.OptionError: threads must be an integer from 1 to 4096, got 0
    """

    steps: int = option_field(DEFAULT_STEPS, Flag("--steps", "steps of every system (default 4096)", "S", parse_count))
    lrs: LRs | None = option_field(
        None,
        Flag(
            "--lr",
            "one system per LR: START:STOP:COUNT[:log] (COUNT numbers from START to STOP, evenly or log spaced) "
            "or LR[,LR...] (a number, 0.01, or an f32 word, 0x3c23d70a); default: each page's own LR",
            "LRS",
            parse_lrs,
        ),
    )
    view_in: Pages | None = option_field(
        None,
        Flag(
            "--view-in",
            "start pages: a 4096-byte page file, or a directory of them (one system per file, sorted by name, "
            "names starting with '.' skipped; with --lr, one per page and LR); default: the init page",
            "PATH",
            str,
        ),
    )
    step_base: StepBases | None = option_field(
        None,
        Flag(
            "--step-base",
            "every system's first step: N or 0xHEX (0 to 2^64-2; HI:LO, two hex halves, is deprecated)",
            "N",
            parse_step_base,
        ),
    )
    z: bool = option_field(True, Flag("--ieee", "plain IEEE float32 instead of float mode Z (comparison only)"))
    trace: bool = option_field(False, Flag("--trace", "compute every system's trace digest"))
    loss_every: int | None = option_field(
        None, Flag("--loss-every", "keep the loss of every N-th step (JSON, npz)", "N", _parse_positive)
    )
    threads: int | None = option_field(
        None,
        Flag(
            "--threads",
            "CPU threads (default: the usable cores, shared between the ranks of an MPI job on one host)",
            "T",
            _parse_positive,
        ),
    )
    keep_pages: bool = option_field(False, Flag(None, "keep every final page (4 KiB a system)"))
    progress: bool = option_field(False, Flag(None, "a progress bar on stderr"))
    backend: str | None = option_field(
        None,
        Flag(
            "--backend",
            "where the sweep runs: cpu (default: the CPU's cores) or cuda (one warp per system on the CUDA image: "
            "the cuda extra and a GPU)",
            "{" + ",".join(SWEEP_BACKENDS) + "}",
            _parse_backend,
        ),
    )

    def __post_init__(self) -> None:
        put = object.__setattr__  # frozen: normalise once, here
        put(self, "steps", check_steps(self.steps))
        check_options(self.loss_every, self.threads, z=self.z, trace=self.trace, keep_pages=self.keep_pages,
                      progress=self.progress)  # fmt: skip
        for name in ("z", "trace", "keep_pages", "progress"):
            put(self, name, bool(getattr(self, name)))
        backend = check_backend(self.backend)
        put(self, "backend", backend)
        check_backend_options(backend, self.loss_every, self.threads)

    def describe(self) -> Run:
        """The run of these options (:func:`meshnb.runspec.describe`): the start pages times the LRs, with
        their step bases, every system alone (``group`` 0).

        Returns
        -------
        Run
            The sweep's systems, checked.

        Examples
        --------
        >>> run = SweepOptions(steps=10, lrs=[0.5, 0.25, 0.125]).describe()
        >>> len(run), run.steps, run.group, run.backend
        (3, 10, 0, 'cpu')
        """
        return describe(
            self.steps, lrs=self.lrs, view_in=self.view_in, step_base=self.step_base, z=self.z, backend=self.backend
        )


def sweep_option_fields() -> list[tuple[str, Any, Flag]]:
    """(name, default, Flag) of every sweep option, in declaration order: for the CLI and the docs."""
    return [(f.name, f.default, f.metadata["flag"]) for f in fields(SweepOptions)]


# --- memory ---------------------------------------------------------------------------------------

RESULT_BYTES = 8 + 4 + 16 + 4 + 32  # per system: step base, LR word, params, last loss, digest
"""Bytes an in-memory result holds per system, before the trace digest, history and pages."""


def result_bytes(systems: int, steps: int, *, trace: bool, loss_every: int | None, keep_pages: bool) -> int:
    """What an in-memory :class:`~meshnb.sweeps.SweepResult` of ``systems`` systems holds (bytes)."""
    per = RESULT_BYTES + (32 if trace else 0) + (4 * (steps // loss_every) if loss_every else 0)
    per += VIEW_BYTES if keep_pages else 0
    return systems * per


LR_CHUNK = 1 << 20  # LRs made at a time: a Ctrl-C between two chunks is seen at once


def lr_values(start: float, stop: float, count: int, log: bool = False) -> np.ndarray:
    """``count`` float32 LRs, bit-equal to ``np.linspace`` (``log``: ``np.geomspace``), :data:`LR_CHUNK` at a time."""
    out = np.empty(count, dtype=np.float32)
    sign = 1.0
    if log:
        sign = float(np.sign(start))
        a, b = float(np.log10(start / sign)), float(np.log10(stop / sign))
    else:
        a, b = float(start), float(stop)
    div = count - 1
    step = (b - a) / div if div > 0 else float("nan")
    for lo in range(0, count, LR_CHUNK):
        hi = min(count, lo + LR_CHUNK)
        y = np.arange(lo, hi, dtype=np.float64)
        if div > 0 and step == 0:  # as linspace: a zero step scales by the whole delta
            y = y / div * (b - a)
        elif div > 0:
            y = y * step
        else:
            y = y * (b - a)
        y += a
        if div > 0 and hi == count:
            y[-1] = b
        if log:
            y = np.power(10.0, y)
            if lo == 0:
                y[0] = start / sign
            if div > 0 and hi == count:
                y[-1] = stop / sign
            y *= sign
        out[lo:hi] = y.astype(np.float32)
    return out
