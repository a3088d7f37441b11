"""One description of a run: these systems, from these pages, with these LRs and step bases, for
these steps, and the one copy of the rules that make it valid.

Every entry point (:func:`meshnb.train`, :func:`meshnb.sweep` and :func:`meshnb.sweeps.stream`, the
CUDA host, the checker) checks its arguments here, so the same bad value gets the same error
everywhere:

- a wrong *type* is a :class:`TypeError`; a bad *value* an :class:`OptionError` (a
  :class:`ValueError`), one line that names the argument as the library spells it;
- any integer type is an integer (``int``, numpy's integers), ``bool`` is not;
- a run is at most :data:`MAX_STEPS` steps; a step base is 0 to :data:`~meshnb.program.LAST_STEP`
  (2^64 - 2); a page can run ``n`` more steps when its STEPS_PER_TASK is not 0 and its steps
  ``first .. first + n - 1`` stay at or below 2^64 - 2 (the round of step 2^64 - 1 would wrap to 0);
- an LR is a number (a float: rounded to float32, as the CPU rounds it) or an f32 word (an
  integer 0 to 2^32 - 1, or numpy ``uint32``): ``0.01`` and ``0x3C23D70A`` are the same LR.

It also writes the LR and step-base words into pages (as ``SET_LR`` and ``train``'s step base
set them), and hashes many rows' spans at once (:func:`row_digests`: hashlib for a few, njit on
every core for many, the same bits); it re-exports two rules defined lower because lower layers
use them: the page digest (SPEC 11) :func:`meshnb.view.page_digests` (:meth:`View.digest
<meshnb.view.View.digest>` uses it) and :func:`is_int`, :mod:`meshnb.jit`'s (the loops' doors).
:class:`Systems` is the typed model of a sweep's systems (the P start pages times the L LRs, with their step bases).

Examples
--------
>>> from meshnb import runspec
>>> runspec.check_steps(10)
10
>>> runspec.check_steps(-1)
Traceback (most recent call last):
    ...
meshnb.runspec.OptionError: steps must be an integer from 0 to 9223372036854775807, got -1
>>> hex(runspec.lr_word(0.5, "lr"))
'0x3f000000'
>>> runspec.can_run(2**64 - 3, 2)
True
>>> runspec.can_run(2**64 - 3, 3)
False
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Mapping, Sequence
from concurrent.futures import Executor, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeAlias

import numpy as np
from numpy.typing import NDArray

from . import program
from .floatz import flush_words
from .jit import is_int as is_int  # re-exported: the rule lives below the loops, whose doors use it too
from .program import LAST_STEP
from .view import PAGE_WORDS, VIEW_BYTES, WORD, View, span_digests
from .view import page_digests as page_digests  # SPEC 11 of pages: defined once, in view

MASK32 = 0xFFFFFFFF
MAX_STEPS = (1 << 63) - 1
"""The most steps one run (or one call) takes: the step loops count in int64."""
LOSS = slice(WORD["LOSS"], WORD["LOSS"] + 256)
"""The LOSS ring's words in a page."""
_F32_MAX = float(np.finfo(np.float32).max)

Words: TypeAlias = NDArray[np.uint32]
"""Pages as ``[n, 1024]`` uint32 words (or one LR word per system, ``[n]``)."""
LRs: TypeAlias = Sequence[float] | NDArray[Any]
"""Learning rates: numbers (floats, rounded to float32) or f32 words (integers 0 to 2^32 - 1, or a
numpy ``uint32`` array); plain integers given as numbers are deprecated."""
Pages: TypeAlias = bytes | bytearray | memoryview | Sequence[bytes | bytearray | memoryview] | NDArray[Any]
"""Start pages: a 4096-byte page, a sequence of them, or a ``[P, 4096]`` uint8 / ``[P, 1024]``
uint32 array."""
StepBases: TypeAlias = int | Sequence[int] | NDArray[np.integer[Any]]
"""A step base (the first step, 0 to 2^64 - 2) for every system, or one per system."""


class OptionError(ValueError):
    """A bad value for an argument: one line that names the argument as the caller spelled it.

    ``template`` holds ``{name}`` placeholders for argument names: ``str(e)`` spells them as the
    library's keywords (or as ``library`` maps them), :meth:`for_cli` as the command line's flags.

    Parameters
    ----------
    template : str
        The message, with a ``{name}`` placeholder for each argument name it names (given after
        it, as further positional arguments).
    library : mapping or None, default None
        How the library spells a name where not as its keyword (``systems`` as ``systems=N``).
    flags : mapping or None, default None
        How the command line spells each name (:meth:`for_cli`'s default).

    Examples
    --------
    >>> e = OptionError("{step_base} must be at most 2^64 - 2", "step_base")
    >>> str(e)
    'step_base must be at most 2^64 - 2'
    >>> e.for_cli({"step_base": "--step-base"})
    '--step-base must be at most 2^64 - 2'
    >>> isinstance(e, ValueError)
    True
    """

    def __init__(
        self,
        template: str,
        *names: str,
        library: Mapping[str, str] | None = None,
        flags: Mapping[str, str] | None = None,
    ) -> None:
        self.template, self.names, self.flags = template, names, flags
        spell = library or {}
        super().__init__(template.format(**{n: spell.get(n, n) for n in names}) if names else template)

    def for_cli(self, flags: Mapping[str, str] | None = None) -> str:
        """The message with the argument names spelled as the command line's flags.

        Parameters
        ----------
        flags : mapping or None, default None
            A name's flag (None: the mapping the error was made with); a name it lacks is spelled
            ``--name-with-dashes``.

        Returns
        -------
        str
            The one-line message a command prints.

        Examples
        --------
        >>> OptionError("{steps_per_task} must be at least 1", "steps_per_task").for_cli()
        '--steps-per-task must be at least 1'
        """
        if not self.names:
            return self.template
        spell = flags or self.flags or {}
        return self.template.format(**{n: spell.get(n, "--" + n.replace("_", "-")) for n in self.names})


# --- values ------------------------------------------------------------------------------------


def _shown(x: Any) -> str:
    """A value as a message shows it: a numpy integer as the plain number (not ``np.int64(2)``)."""
    return str(int(x)) if is_int(x) else repr(x)


def check_int(x: Any, name: str, lo: int, hi: int) -> int:
    """``x`` as an ``int`` from ``lo`` to ``hi``: a TypeError for a non-integer, an
    :class:`OptionError` outside the range, each naming ``name``.

    >>> check_int(np.int64(2), "systems", 1, 64)
    2
    >>> check_int(True, "systems", 1, 64)
    Traceback (most recent call last):
        ...
    TypeError: systems must be an integer from 1 to 64, got bool True
    """
    if not is_int(x):
        raise TypeError(f"{name} must be an integer from {lo} to {hi}, got {type(x).__name__} {x!r}")
    if not lo <= x <= hi:
        raise OptionError(f"{name} must be an integer from {lo} to {hi}, got {_shown(x)}")
    return int(x)


def check_bool(x: Any, name: str) -> bool:
    """``x`` as a ``bool`` (``True``/``False`` or numpy's): a TypeError otherwise (``None`` or
    ``"no"`` would pass as false or true)."""
    if not isinstance(x, (bool, np.bool_)):
        raise TypeError(f"{name} must be True or False, got {type(x).__name__} {x!r}")
    return bool(x)


def check_number(x: Any, name: str, top: float) -> float:
    """``x`` as a float above 0 and at most ``top`` (a TypeError for a non-number)."""
    if isinstance(x, (bool, np.bool_)) or not isinstance(x, (int, float, np.integer, np.floating)):
        raise TypeError(f"{name} must be a number above 0 and at most {top:g}, got {type(x).__name__} {x!r}")
    if not 0 < x <= top:
        raise OptionError(f"{{{name}}} must be a number above 0 and at most {top:g}, got {x!r}", name)
    return float(x)


def check_steps(steps: Any, name: str = "steps") -> int:
    """The steps of a run: an integer from 0 to :data:`MAX_STEPS`."""
    return check_int(steps, name, 0, MAX_STEPS)


def check_steps_per_task(spt: Any, name: str = "steps_per_task") -> int:
    """A page's STEPS_PER_TASK: 1 to 2^32 - 1."""
    return check_int(spt, name, 1, MASK32)


def check_step_base(base: Any, name: str = "step_base") -> int:
    """A step base (the page's next step before the run): 0 to 2^64 - 2."""
    if not is_int(base):
        raise TypeError(f"{name} must be an integer (or one integer per system), got {type(base).__name__} {base!r}")
    if not 0 <= base <= LAST_STEP:
        raise OptionError(f"{name} must be 0..2^64-2, got {_shown(base)}")
    return int(base)


def step_bases(bases: Any, m: int, name: str = "step_base") -> int | NDArray[np.uint64]:
    """One step base for all ``m`` systems (an int), or one per system (uint64 ``[m]``)."""
    if is_int(bases):
        return check_step_base(bases, name)
    if isinstance(bases, np.ndarray) and bases.dtype.kind in "iu" and bases.ndim == 1:
        if bases.size != m:
            raise OptionError(f"{name} must be one integer or one per system ({m}), got {bases.size}")
        if bases.dtype.kind == "i" and (bases < 0).any():
            raise OptionError(f"{name} must be 0..2^64-2, got {int(bases[np.argmax(bases < 0)])}")
        b = bases.astype(np.uint64)
        if (b > np.uint64(LAST_STEP)).any():
            raise OptionError(f"{name} must be 0..2^64-2, got 2^64-1")
        return b
    if isinstance(bases, (str, bytes)) or not hasattr(bases, "__len__"):
        raise TypeError(f"{name} must be an integer or one integer per system, got {type(bases).__name__}")
    if len(bases) != m:
        raise OptionError(f"{name} must be one integer or one per system ({m}), got {len(bases)}")
    for b in bases:
        if not is_int(b):
            raise TypeError(f"{name} must be integers, got {type(b).__name__} {b!r}")
        if not 0 <= b <= LAST_STEP:
            raise OptionError(f"{name} must be 0..2^64-2, got {_shown(b)}")
    return np.array([int(b) for b in bases], dtype=np.uint64)


# --- the step counter ----------------------------------------------------------------------------


def can_run(first: int, steps: int) -> bool:
    """Whether steps ``first .. first + steps - 1`` stay at or below 2^64 - 2 (the round of step
    2^64 - 1 would wrap to 0): the 64-bit step counter's one rule."""
    return steps == 0 or first + steps - 1 <= LAST_STEP


def wrap_message(first: int, steps: int) -> str:
    """Why a page whose next step is ``first`` cannot run ``steps`` more steps."""
    return f"steps {first} .. {first + steps - 1} reach 2^64-1, whose round would wrap to 0"


SPT_ZERO = "the page's STEPS_PER_TASK is 0: its tasks would never progress"


def check_can_run(first: int, steps: int, steps_per_task: int) -> None:
    """Refuse (:class:`OptionError`) a page that cannot run ``steps`` more steps: its
    STEPS_PER_TASK is 0, or its steps would reach 2^64 - 1 (SPEC 8 and 10)."""
    if steps and steps_per_task == 0:
        raise OptionError(SPT_ZERO)
    if not can_run(first, steps):
        raise OptionError(wrap_message(first, steps))


def check_run(
    steps: Any, steps_per_task: Any, first_step: Any, set_lr: Mapping[Any, Any] | Sequence[Sequence[Any]] = ()
) -> tuple[tuple[int, int], ...]:
    """Refuse a run that cannot be made, naming the value: ``steps`` (0 to :data:`MAX_STEPS`),
    the page's STEPS_PER_TASK (1 to 2^32 - 1), its first step (a step base, 0 to 2^64 - 2) and
    that the run stays below step 2^64 - 1, LR changes at steps 0 .. ``steps`` with an LR each
    (:func:`lr_word`).  Returns the LR changes as ``(step, word)`` pairs, in the order given.
    (What a checker of an executor's run asks before comparing: one rule with ``train``'s.)

    >>> check_run(10, 64, 0, {0: 0.5})
    ((0, 1056964608),)
    >>> check_run(3, 64, 2**64 - 3)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
        ...
    meshnb.runspec.OptionError: steps 18446744073709551613 .. ... reach 2^64-1, whose round would wrap to 0
    """
    steps = check_steps(steps)
    spt = check_steps_per_task(steps_per_task)
    first = check_step_base(first_step)
    check_can_run(first, steps, spt)
    pairs = list(set_lr.items()) if isinstance(set_lr, Mapping) else [tuple(p) for p in set_lr]
    changes = []
    for pair in pairs:
        if len(pair) != 2:
            raise TypeError(f"set_lr maps a step of the run to an LR: (step, lr) pairs, got {pair!r}")
        step = check_int(pair[0], "set_lr's step", 0, steps)
        changes.append((step, lr_word(pair[1], f"set_lr[{step}]")))
    return tuple(changes)


def check_view_can_run(view: View, steps: int) -> None:
    """:func:`check_can_run` of a page as a :class:`~meshnb.view.View`."""
    check_can_run(view.next_step, steps, view.word("STEPS_PER_TASK"))


def next_steps(words: Words) -> NDArray[np.uint64]:
    """Each page's next step (``STEP_HI:NEXT_STEP``) of ``[n, 1024]`` words, uint64 ``[n]``."""
    return words[:, WORD["STEP_HI"]].astype(np.uint64) << np.uint64(32) | words[:, WORD["NEXT_STEP"]]


def check_words_can_run(words: Words, steps: int, stride: int = 1) -> None:
    """:func:`check_can_run` of every page of ``[n, 1024]`` words; page ``i`` stands for systems
    ``i * stride ..``, and the message names the first bad system."""
    if not steps:
        return
    zero = words[:, WORD["STEPS_PER_TASK"]] == 0
    if zero.any():
        raise OptionError(f"system {int(np.argmax(zero)) * stride}: {SPT_ZERO}")
    check_first_steps(next_steps(words), steps, stride)


def check_first_steps(first: NDArray[np.uint64], steps: int, stride: int = 1) -> None:
    """:func:`can_run` of every first step of ``first`` (one per ``stride`` systems)."""
    if not steps or not first.size:
        return
    late = first > np.uint64(LAST_STEP - (steps - 1)) if steps - 1 <= LAST_STEP else np.ones(first.shape, bool)
    if late.any():
        i = int(np.argmax(late))
        raise OptionError(f"system {i * stride}: {wrap_message(int(first[i]), steps)}")


# --- LRs ---------------------------------------------------------------------------------------


def lr_word(lr: Any, name: str = "lr") -> int:
    """One LR as its f32 word: a float is a number (rounded to float32; beyond float32's range
    refused), an integer the word itself (0 to 2^32 - 1).

    >>> hex(lr_word(0.01)), hex(lr_word(0x3C23D70A)), hex(lr_word(np.float32(0.01)))
    ('0x3c23d70a', '0x3c23d70a', '0x3c23d70a')
    """
    if is_int(lr):
        if not 0 <= lr <= MASK32:
            raise OptionError(f"{name}: an f32 word is 0 to 2^32-1 (0xFFFFFFFF), got {_shown(lr)}")
        return int(lr)
    if isinstance(lr, (float, np.floating)):
        return int(_float_words(np.array([lr]), name)[0])
    raise TypeError(f"{name} is an LR: a number (float) or an f32 word (integer), got {type(lr).__name__} {lr!r}")


def _float_words(arr: NDArray[Any], name: str) -> Words:
    if arr.dtype == np.float32:  # already float32: nothing can overflow (an inf was given as such)
        return arr.view(np.uint32).copy()
    with np.errstate(over="ignore", invalid="ignore"):
        words = arr.astype(np.float32)
        wide = arr.astype(np.float64)
    overflow = np.isinf(words) & np.isfinite(wide)
    if overflow.any():
        k = int(np.argmax(overflow))
        where = f"{name}[{k}]" if arr.ndim else name
        raise OptionError(
            f"{where} = {float(arr.reshape(-1)[k])!r} is beyond float32's range (|x| <= {_F32_MAX:.8g}); "
            "to run an infinite LR give its word (0x7f800000)"
        )
    return words.view(np.uint32)


def lr_words(lrs: Any, name: str = "lrs") -> Words:
    """LRs as f32 words ``[L]``: a uint32 array is the words themselves (any word, NaN and inf
    included), floats are numbers rounded to float32.  A sequence of plain integers is still read
    as numbers, with a DeprecationWarning (an integer LR is an f32 word, as in ``set_lr``).

    Parameters
    ----------
    lrs : LRs
        The LRs: a sequence of floats, or a uint32 array of words.
    name : str, default "lrs"
        The argument's name, for messages.

    Returns
    -------
    numpy.ndarray
        ``[L]`` uint32.

    Examples
    --------
    >>> lr_words([0.5, 0.25]).tolist()
    [1056964608, 1048576000]
    >>> lr_words(np.array([0x3F000000], np.uint32)).tolist()
    [1056964608]
    """
    if isinstance(lrs, (str, bytes)) or not hasattr(lrs, "__len__"):
        raise TypeError(f"{name} must be a sequence or array of learning rates, got {type(lrs).__name__}")
    arr = np.asarray(lrs)
    if arr.ndim != 1 or arr.size == 0:
        raise OptionError(f"{name} must be a non-empty 1-D sequence, got shape {arr.shape}")
    if arr.dtype == np.uint32:
        return arr.copy()
    if arr.dtype.kind in "iu":
        warnings.warn(
            f"{name}: integers read as numbers are deprecated (an integer LR is an f32 word, as in set_lr); "
            "give floats (1.0) for numbers, or a np.uint32 array of words",
            DeprecationWarning,
            stacklevel=5,  # the caller of sweep() (through SweepOptions.systems and describe)
        )
        return _float_words(arr, name)
    if arr.dtype.kind != "f":
        raise OptionError(f"{name} must be numbers (or a uint32 array of f32 words), got dtype {arr.dtype}")
    return _float_words(arr, name)


# --- pages -------------------------------------------------------------------------------------


def init_page() -> bytes:
    """The page of one system without a group right after ``init`` (SPEC 8).

    Returns
    -------
    bytes
        4096 bytes.

    Examples
    --------
    >>> View.from_bytes(init_page()).word("STEPS_PER_TASK")
    64
    """
    ctx = program.Context(View())
    program.init(ctx)
    return ctx.view.tobytes()


def page_words(pages: Any, name: str = "view_in") -> Words:
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
            raise OptionError(f"{name} must be [P, 4096] uint8 or [P, 1024] uint32, got {raw.dtype} {raw.shape}")
        if raw.shape[0] == 0:
            raise OptionError(f"{name} is empty (no pages)")
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
            raise OptionError(f"{name}[{i}] has {len(b)} bytes, a page has {VIEW_BYTES}")
        out.append(np.frombuffer(b, dtype="<u4"))
    if not out:
        raise OptionError(f"{name} is empty (no pages)")
    return np.stack(out).astype(np.uint32)


def write_lr(words: Words, lr: Words, z: bool) -> None:
    """Put LR words into pages ``[n, 1024]`` as SET_LR does before the first task (in mode Z the
    word is flushed: ``ftz_from_bits``)."""
    words[:, WORD["LR"]] = flush_words(lr) if z else lr


def write_step_base(words: Words, bases: int | NDArray[np.uint64]) -> None:
    """Put step bases (one for all, or one per page) into pages ``[n, 1024]``: STEP_HI:NEXT_STEP."""
    b = np.broadcast_to(np.asarray(bases, dtype=np.uint64), (words.shape[0],))
    words[:, WORD["STEP_HI"]] = (b >> np.uint64(32)).astype(np.uint32)
    words[:, WORD["NEXT_STEP"]] = (b & np.uint64(MASK32)).astype(np.uint32)


NJIT_DIGEST_ROWS = 2048  # below this many pages hashlib's per-row call costs less than a first compile


def row_digests(
    words: Words, spans: Sequence[tuple[int, int]], pool: Executor | None = None, threads: int | None = None
) -> NDArray[np.uint8]:
    """The SHA-256 of each row's word ``spans`` (at most two; their little-endian bytes one after
    the other), ``[n, 32]`` uint8: hashlib for fewer than :data:`NJIT_DIGEST_ROWS` rows
    (:func:`meshnb.view.span_digests`), more in njit (:func:`meshnb.sha256.digest_rows`) on
    ``threads`` threads of ``pool`` (None: every usable core, on threads of its own), a slice
    each: the same bits (a test holds the two paths equal).

    Parameters
    ----------
    words : numpy.ndarray
        ``[n, k]`` uint32.
    spans : sequence of (int, int)
        One or two ``[lo, hi)`` word ranges of a row.
    pool : Executor or None, default None
        Threads to hash on.
    threads : int or None, default None
        Slices to cut the rows into (None: the usable cores, at most one per 1024 rows).

    Returns
    -------
    numpy.ndarray
        ``[n, 32]`` uint8.

    Examples
    --------
    >>> w = np.arange(12, dtype=np.uint32).reshape(2, 6)
    >>> row_digests(w, [(0, 2), (4, 6)]).shape
    (2, 32)
    """
    if not 1 <= len(spans) <= 2:  # the njit kernel hashes two spans: both paths take the same
        raise ValueError(f"row_digests hashes one or two spans of a row, not {len(spans)}")
    w = np.ascontiguousarray(words, dtype=np.uint32)
    n = w.shape[0]
    if n < NJIT_DIGEST_ROWS:  # a small sweep's cold start compiles no SHA-256 kernel (about 3 s of it)
        return span_digests(w, spans)
    from .sha256 import digest_rows  # numba on use only

    (p0, p1), (l0, l1) = (*spans, (0, 0))[:2]
    out = np.empty((n, 32), dtype=np.uint8)
    threads = threads or min(_cores(), max(1, n // 1024))  # a thread's start costs about one page's hash
    cuts = [n * i // threads for i in range(threads + 1)]

    def part(i: int) -> None:
        digest_rows(w, p0, p1, l0, l1, out, cuts[i], cuts[i + 1])

    if threads == 1:
        part(0)
    elif pool is not None:
        for f in [pool.submit(part, i) for i in range(threads)]:
            f.result()
    else:
        with ThreadPoolExecutor(max_workers=threads) as own:
            list(own.map(part, range(threads)))
    return out


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


# --- the model of many systems ----------------------------------------------------------------


@dataclass(frozen=True)
class Systems:
    """Systems before their first step, as inputs (their pages made per batch).

    ``starts`` ``[P, 1024]`` uint32: the distinct start pages; ``lr`` the L LR words as given (None:
    each page's own LR, L = 1); ``base`` the step base of every system (None: each page's own; an
    int; or uint64 ``[M]``); ``z`` float mode Z.  System ``k`` is page ``k // L`` with LR ``k % L``:
    ``P * L`` systems, page-major.

    Parameters
    ----------
    starts : numpy.ndarray
        ``[P, 1024]`` uint32: the distinct start pages.
    lr : numpy.ndarray or None
        ``[L]`` uint32 LR words (None: each page's own LR).
    base : int, numpy.ndarray or None
        The step base of every system, or uint64 ``[M]`` one each (None: each page's own).
    z : bool
        Float mode Z.

    Examples
    --------
    >>> s = describe(10, lrs=[0.5, 0.25])
    >>> len(s), s.n_lrs, s.step_base(0, 2).tolist()
    (2, 2, [0, 0])
    """

    starts: Words
    lr: Words | None
    base: int | NDArray[np.uint64] | None
    z: bool

    @property
    def n_lrs(self) -> int:
        """L: the LRs per page (1 without ``lrs``)."""
        return 1 if self.lr is None else int(self.lr.size)

    def __len__(self) -> int:
        return int(self.starts.shape[0]) * self.n_lrs

    def page_index(self, lo: int, hi: int) -> NDArray[np.int64]:
        """Which start page each of systems ``lo .. hi-1`` starts from.

        Parameters
        ----------
        lo, hi : int
            The systems ``lo .. hi-1``.

        Returns
        -------
        numpy.ndarray
            int64 ``[hi - lo]``: indexes of ``starts``.

        Examples
        --------
        >>> describe(10, lrs=[0.5, 0.25], view_in=[init_page()] * 2).page_index(0, 4).tolist()
        [0, 0, 1, 1]
        """
        return np.arange(lo, hi, dtype=np.int64) // self.n_lrs

    def lr_index(self, lo: int, hi: int) -> NDArray[np.int64]:
        """Which LR of ``lrs`` each of systems ``lo .. hi-1`` runs (-1: its page's own).

        Parameters
        ----------
        lo, hi : int
            The systems ``lo .. hi-1``.

        Returns
        -------
        numpy.ndarray
            int64 ``[hi - lo]``.

        Examples
        --------
        >>> describe(10, lrs=[0.5, 0.25], view_in=[init_page()] * 2).lr_index(0, 4).tolist()
        [0, 1, 0, 1]
        """
        if self.lr is None:
            return np.full(hi - lo, -1, dtype=np.int64)
        return np.arange(lo, hi, dtype=np.int64) % self.n_lrs

    def words(self, lo: int, hi: int) -> Words:
        """Systems ``lo .. hi-1``'s start pages, SET_LR and the step base applied as ``train``
        applies them.

        Parameters
        ----------
        lo, hi : int
            The systems ``lo .. hi-1``.

        Returns
        -------
        numpy.ndarray
            ``[hi - lo, 1024]`` uint32 (a new array).

        Examples
        --------
        >>> w = describe(10, lrs=[0.5, 0.25], step_base=7).words(1, 2)
        >>> hex(int(w[0, WORD["LR"]])), int(w[0, WORD["NEXT_STEP"]])
        ('0x3e800000', 7)
        """
        out = self.starts[self.page_index(lo, hi)]
        if self.lr is not None:
            write_lr(out, self.lr[self.lr_index(lo, hi)], self.z)  # this batch's words only
        if self.base is not None:
            write_step_base(out, self.base if isinstance(self.base, int) else self.base[lo:hi])
        return out

    def step_base(self, lo: int, hi: int) -> NDArray[np.uint64]:
        """Systems ``lo .. hi-1``'s first steps.

        Parameters
        ----------
        lo, hi : int
            The systems ``lo .. hi-1``.

        Returns
        -------
        numpy.ndarray
            uint64 ``[hi - lo]``.

        Examples
        --------
        >>> describe(10, lrs=[0.5, 0.25], step_base=[5, 2**40]).step_base(0, 2).tolist()
        [5, 1099511627776]
        """
        if isinstance(self.base, np.ndarray):
            return self.base[lo:hi].copy()
        if isinstance(self.base, int):
            return np.full(hi - lo, self.base, np.uint64)
        return next_steps(self.starts)[self.page_index(lo, hi)]

    def check_can_run(self, steps: int) -> None:
        """Refuse (:class:`OptionError`) systems that cannot run ``steps`` steps, naming the
        first, at a cost per start page or per step base, never a page per system.

        Parameters
        ----------
        steps : int
            The steps every system would run.

        Examples
        --------
        >>> systems = describe(0, step_base=2**64 - 3)
        >>> systems.check_can_run(2)
        >>> systems.check_can_run(3)  # doctest: +ELLIPSIS
        Traceback (most recent call last):
            ...
        meshnb.runspec.OptionError: system 0: steps 18446744073709551613 .. ... reach 2^64-1, whose round ...
        """
        if not steps:
            return
        zero = self.starts[:, WORD["STEPS_PER_TASK"]] == 0
        if zero.any():
            raise OptionError(f"system {int(np.argmax(zero)) * self.n_lrs}: {SPT_ZERO}")
        if isinstance(self.base, np.ndarray):
            check_first_steps(self.base, steps, 1)
        elif isinstance(self.base, int):
            if not can_run(self.base, steps):
                raise OptionError(f"system 0: {wrap_message(self.base, steps)}")
        else:
            check_first_steps(next_steps(self.starts), steps, self.n_lrs)


def describe(steps: Any, *, lrs: Any = None, view_in: Any = None, step_base: Any = None, z: Any = True) -> Systems:
    """The systems of a sweep (``view_in``'s pages, or the init page, times ``lrs``), checked for
    ``steps`` steps as ``train`` checks a run: TypeError/:class:`OptionError` naming the argument.

    >>> len(describe(5, lrs=[0.1, 0.2, 0.3], view_in=[init_page()] * 2))
    6
    >>> describe(5, step_base=2**64 - 3)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
        ...
    meshnb.runspec.OptionError: system 0: steps 18446744073709551613 .. ... reach 2^64-1, whose round would wrap to 0
    """
    steps = check_steps(steps)
    z = check_bool(z, "z")
    starts = (
        np.frombuffer(init_page(), dtype="<u4")[None, :].astype(np.uint32) if view_in is None else page_words(view_in)
    )
    lr = None if lrs is None else lr_words(lrs)
    m = starts.shape[0] * (1 if lr is None else lr.size)
    base = None if step_base is None else step_bases(step_base, m)
    systems = Systems(starts, lr, base, z)
    systems.check_can_run(steps)
    return systems
