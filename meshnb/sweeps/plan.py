"""A sweep's inputs, checked and planned: LRs, start pages, step bases, the systems they make, and
what holding them costs.

A sweep of P start pages and L learning rates is ``P * L`` systems, page-major (system
``p * L + l``).  :class:`Systems` holds only the P distinct start pages, the L LR words and the
step bases (one, or one per system when given so): a system's start page is made when its batch
runs (:meth:`Systems.words`), so planning 10^8 systems costs their LR words, not 400 GB of pages.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TypeAlias

import numpy as np

from .. import program
from ..floatz import flush_words
from ..options import is_int
from ..view import PAGE_WORDS, VIEW_BYTES, WORD, View

LRs: TypeAlias = Sequence[float] | np.ndarray
"""Learning rates: numbers (rounded to float32), or a uint32 array of f32 words."""
Pages: TypeAlias = bytes | bytearray | memoryview | Sequence[bytes | bytearray | memoryview] | np.ndarray
"""Start pages: a 4096-byte page, a sequence of them, or a ``[P, 4096]`` uint8 / ``[P, 1024]`` uint32 array."""
StepBases: TypeAlias = int | Sequence[int] | np.ndarray
"""One step base for every system, or one per system."""

"""The word index of each page field (SPEC 7)."""
LOSS = slice(WORD["LOSS"], WORD["LOSS"] + 256)
MAX_STEPS = (1 << 63) - 1


def init_page() -> bytes:
    """The page of one system without a group right after ``init`` (SPEC 8)."""
    ctx = program.Context(View())
    program.init(ctx)
    return ctx.view.tobytes()


def lr_words(lrs: Any) -> np.ndarray:
    """LRs as f32 words: a uint32 array is taken as the words themselves (any word, NaN and inf
    included), anything else as numbers rounded to float32; a finite number that float32 cannot
    hold (``1e39``) is refused rather than run as an infinite LR."""
    if isinstance(lrs, (str, bytes)) or not hasattr(lrs, "__len__"):
        raise TypeError(f"lrs must be a sequence or array of learning rates, got {type(lrs).__name__}")
    arr = np.asarray(lrs)
    if arr.ndim != 1 or arr.size == 0:
        raise ValueError(f"lrs must be a non-empty 1-D sequence, got shape {arr.shape}")
    if arr.dtype == np.uint32:
        return arr.copy()
    if arr.dtype == np.float32:  # already float32: nothing can overflow (an inf was given as such)
        return arr.view(np.uint32).copy()
    if arr.dtype.kind not in "iuf":
        raise ValueError(f"lrs must be numbers (or a uint32 array of f32 words), got dtype {arr.dtype}")
    with np.errstate(over="ignore", invalid="ignore"):
        words = arr.astype(np.float32)
        wide = arr.astype(np.float64)
    overflow = np.isinf(words) & np.isfinite(wide)
    if overflow.any():
        k = int(np.argmax(overflow))
        raise ValueError(
            f"lrs[{k}] = {float(arr[k])!r} is beyond float32's range (|x| <= 3.4028235e38); "
            "to run an infinite LR give its word (a uint32 array)"
        )
    return words.view(np.uint32)


def page_words(pages: Any, name: str = "view_in") -> np.ndarray:
    """Start pages as ``[P, 1024]`` uint32 words: one page (a 4096-byte bytes-like), a sequence of
    them, or a ``[P, 4096]`` uint8 / ``[P, 1024]`` uint32 array (``[4096]``/``[1024]``: one page)."""
    if isinstance(pages, (bytes, bytearray, memoryview)):
        pages = [pages]
    if isinstance(pages, np.ndarray):
        raw = np.ascontiguousarray(pages)
        if raw.ndim == 1:
            raw = raw[None, :]
        ok = raw.ndim == 2 and (
            (raw.dtype == np.uint32 and raw.shape[1] == PAGE_WORDS)
            or (raw.dtype == np.uint8 and raw.shape[1] == VIEW_BYTES)
        )
        if not ok:
            raise ValueError(f"{name} must be [P, 4096] uint8 or [P, 1024] uint32, got {raw.dtype} {raw.shape}")
        if raw.shape[0] == 0:
            raise ValueError(f"{name} is empty (no pages)")
        return (raw.view("<u4") if raw.dtype == np.uint8 else raw).astype(np.uint32)
    if isinstance(pages, str) or not hasattr(pages, "__iter__"):
        raise TypeError(
            f"{name} must be a page (4096 bytes) or a sequence or array of pages, got {type(pages).__name__}"
        )
    out = []
    for i, p in enumerate(pages):
        try:
            b = bytes(memoryview(p))
        except TypeError:
            raise TypeError(f"{name}[{i}] is not bytes ({type(p).__name__})") from None
        if len(b) != VIEW_BYTES:
            raise ValueError(f"{name}[{i}] has {len(b)} bytes, a page has {VIEW_BYTES}")
        out.append(np.frombuffer(b, dtype="<u4"))
    if not out:
        raise ValueError(f"{name} is empty (no pages)")
    return np.stack(out).astype(np.uint32)


def _bases(step_base: Any, m: int) -> int | np.ndarray:
    """One step base for every system, or a uint64 array of one per system."""
    if is_int(step_base):
        if not 0 <= step_base <= program.LAST_STEP:
            raise ValueError(f"step_base must be 0..2^64-2, got {step_base!r}")
        return int(step_base)
    if isinstance(step_base, np.ndarray) and step_base.dtype.kind in "iu" and step_base.ndim == 1:
        if step_base.size != m:
            raise ValueError(f"step_base must be one integer or one per system ({m}), got {step_base.size}")
        if step_base.dtype.kind == "i" and (step_base < 0).any():
            raise ValueError(f"step_base must be 0..2^64-2, got {int(step_base[np.argmax(step_base < 0)])}")
        b = step_base.astype(np.uint64)
        if (b > np.uint64(program.LAST_STEP)).any():
            raise ValueError("step_base must be 0..2^64-2, got 2^64-1")
        return b
    if isinstance(step_base, (str, bytes)) or not hasattr(step_base, "__len__"):
        raise TypeError(f"step_base must be an integer or one integer per system, got {type(step_base).__name__}")
    if len(step_base) != m:
        raise ValueError(f"step_base must be one integer or one per system ({m}), got {len(step_base)}")
    for b in step_base:
        if not is_int(b):
            raise TypeError(f"step_base must be integers, got {type(b).__name__} {b!r}")
        if not 0 <= b <= program.LAST_STEP:
            raise ValueError(f"step_base must be 0..2^64-2, got {b!r}")
    return np.array([int(b) for b in step_base], dtype=np.uint64)


@dataclass(frozen=True)
class Systems:
    """A sweep's systems before their first step, as inputs (pages made per batch).

    ``starts`` ``[P, 1024]`` uint32: the distinct start pages; ``lr`` the L LR words as given (None:
    each page's own LR, L = 1); ``base`` the step base of every system (None: each page's own; an
    int; or uint64 ``[M]``); ``z`` float mode Z.  System ``k`` is page ``k // L`` with LR ``k % L``."""

    starts: np.ndarray
    lr: np.ndarray | None
    base: int | np.ndarray | None
    z: bool

    @property
    def n_lrs(self) -> int:
        """L: the LRs per page (1 without ``lrs``)."""
        return 1 if self.lr is None else int(self.lr.size)

    def __len__(self) -> int:
        return int(self.starts.shape[0]) * self.n_lrs

    def page_index(self, lo: int, hi: int) -> np.ndarray:
        """Which start page each of systems ``lo .. hi-1`` starts from."""
        return np.arange(lo, hi, dtype=np.int64) // self.n_lrs

    def lr_index(self, lo: int, hi: int) -> np.ndarray:
        """Which LR of ``lrs`` each of systems ``lo .. hi-1`` runs (-1: its page's own)."""
        if self.lr is None:
            return np.full(hi - lo, -1, dtype=np.int64)
        return np.arange(lo, hi, dtype=np.int64) % self.n_lrs

    def words(self, lo: int, hi: int) -> np.ndarray:
        """Systems ``lo .. hi-1``'s start pages ``[n, 1024]``, SET_LR and the step base applied as
        ``train`` applies them."""
        out = self.starts[self.page_index(lo, hi)]
        if self.lr is not None:  # SET_LR before the first task: LR = ftz_from_bits(bits) in mode Z
            lr = self.lr[self.lr_index(lo, hi)]  # this batch's words only: a batch costs its own size
            out[:, WORD["LR"]] = flush_words(lr) if self.z else lr
        if self.base is not None:
            b = np.full(hi - lo, self.base, np.uint64) if isinstance(self.base, int) else self.base[lo:hi]
            out[:, WORD["STEP_HI"]] = (b >> np.uint64(32)).astype(np.uint32)
            out[:, WORD["NEXT_STEP"]] = (b & np.uint64(0xFFFFFFFF)).astype(np.uint32)
        return out

    def step_base(self, lo: int, hi: int) -> np.ndarray:
        """Systems ``lo .. hi-1``'s first steps (uint64)."""
        if isinstance(self.base, np.ndarray):
            return self.base[lo:hi].copy()
        if isinstance(self.base, int):
            return np.full(hi - lo, self.base, np.uint64)
        p = self.starts[:, WORD["STEP_HI"]].astype(np.uint64) << np.uint64(32) | self.starts[:, WORD["NEXT_STEP"]]
        return p[self.page_index(lo, hi)]


def check_steps(steps: Any) -> int:
    """``steps`` as an int 0..2^63-1 (TypeError/ValueError naming it otherwise)."""
    if not is_int(steps):
        raise TypeError(f"steps must be a non-negative integer below 2^63, got {type(steps).__name__} {steps!r}")
    if not 0 <= steps <= MAX_STEPS:
        raise ValueError(f"steps must be a non-negative integer below 2^63, got {steps!r}")
    return int(steps)


def check_options(loss_every: Any, threads: Any, **flags: Any) -> None:
    """The run options every sweep form takes: one line naming the bad one."""
    if loss_every is not None:
        if not is_int(loss_every):
            raise TypeError(f"loss_every must be a positive integer, got {type(loss_every).__name__} {loss_every!r}")
        if not 1 <= loss_every <= MAX_STEPS:
            raise ValueError(f"loss_every must be a positive integer below 2^63, got {loss_every!r}")
    if threads is not None:
        if not is_int(threads):
            raise TypeError(f"threads must be a positive integer, got {type(threads).__name__} {threads!r}")
        if not 1 <= threads <= 4096:
            raise ValueError(f"threads must be 1..4096, got {threads!r}")
    for name, value in flags.items():
        if not isinstance(value, (bool, np.bool_)):
            raise TypeError(f"{name} must be True or False, got {type(value).__name__} {value!r}")


def plan(steps: int, *, lrs: Any = None, view_in: Any = None, step_base: Any = None, z: bool = True) -> Systems:
    """The systems of a sweep, checked as ``train`` checks a run (ValueError/TypeError otherwise)."""
    steps = check_steps(steps)
    if not isinstance(z, (bool, np.bool_)):
        raise TypeError(f"z must be True or False, got {type(z).__name__} {z!r}")
    if view_in is None:
        starts = np.frombuffer(init_page(), dtype="<u4")[None, :].astype(np.uint32)
    else:
        starts = page_words(view_in)
    lr = None if lrs is None else lr_words(lrs)
    m = starts.shape[0] * (1 if lr is None else lr.size)
    base = None if step_base is None else _bases(step_base, m)
    systems = Systems(starts, lr, base, bool(z))
    if steps:
        zero = starts[:, WORD["STEPS_PER_TASK"]] == 0
        if zero.any():
            k = int(np.argmax(zero)) * systems.n_lrs
            raise ValueError(f"system {k}: the page's STEPS_PER_TASK is 0: its tasks would never progress")
        first, stride = _first_steps(systems)
        late = first > np.uint64(program.LAST_STEP - (steps - 1))
        if late.any():
            k = int(np.argmax(late)) * stride
            start = int(first[k // stride])
            raise ValueError(
                f"system {k}: steps {start} .. {start + steps - 1} reach 2^64-1, whose round would wrap to 0"
            )
    return systems


def _first_steps(systems: Systems) -> tuple[np.ndarray, int]:
    """The first steps to check, and how many systems each stands for in a row: one per system,
    one for all, or one per start page (its L systems), so a check never costs a word a system."""
    if isinstance(systems.base, np.ndarray):
        return systems.base, 1
    if isinstance(systems.base, int):
        return np.array([systems.base], dtype=np.uint64), len(systems)
    s = systems.starts
    return s[:, WORD["STEP_HI"]].astype(np.uint64) << np.uint64(32) | s[:, WORD["NEXT_STEP"]], systems.n_lrs


# --- memory ---------------------------------------------------------------------------------------

RESULT_BYTES = 8 + 4 + 16 + 4 + 32  # per system: step base, LR word, params, last loss, digest
"""Bytes an in-memory result holds per system, before the trace digest, history and pages."""


def result_bytes(systems: int, steps: int, *, trace: bool, loss_every: int | None, keep_pages: bool) -> int:
    """What an in-memory :class:`~meshnb.sweeps.SweepResult` of ``systems`` systems holds (bytes)."""
    per = RESULT_BYTES + (32 if trace else 0) + (4 * (steps // loss_every) if loss_every else 0)
    per += VIEW_BYTES if keep_pages else 0
    return systems * per


def available_bytes() -> int:
    """Memory this process may still take: MemAvailable (Linux), else the physical memory."""
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return 1 << 62


def check_fits(need: int, what: str, hint: str) -> None:
    """Refuse (ValueError, one line with the estimate) what would take more than 80% of the
    memory available now: the run would otherwise end in a MemoryError after work was done."""
    have = available_bytes()
    if need > 0.8 * have:
        raise ValueError(f"{what} needs about {_size(need)}, more than this machine has free ({_size(have)}); {hint}")


def _size(n: int) -> str:
    units = ["KiB", "MiB", "GiB", "TiB", "PiB", "EiB"]
    e = min(len(units), max(1, int(math.log(max(n, 1), 1024))))
    return f"{n / 1024**e:.1f} {units[e - 1]}"


LR_CHUNK = 1 << 20  # LRs made at a time: a Ctrl-C between two chunks is seen at once


def lr_values(start: float, stop: float, count: int, log: bool = False) -> np.ndarray:
    """``count`` float32 LRs from ``start`` to ``stop``, bit-equal to ``np.linspace(start, stop,
    count)`` (``np.geomspace`` with ``log``) cast to float32, made :data:`LR_CHUNK` at a time in
    float64 (not the whole float64 range at once), so that a huge list costs 4 bytes an LR and a
    Ctrl-C (a KeyboardInterrupt, raised between chunks) is seen while it is made."""
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
