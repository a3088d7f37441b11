"""The one description of a run (:class:`Run`, made by :func:`describe`) and the rules that make it valid.

A wrong type is a :class:`TypeError`, a bad value an :class:`OptionError` naming the argument as
the caller spelled it; ``bool`` is no integer; an LR is a number (rounded to float32) or an f32
word asked for explicitly (a numpy ``uint32`` or text ``0x...``)."""

from __future__ import annotations

import functools
import math
import os
import re
import sys
import warnings
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass, fields, replace
from typing import Any, NamedTuple, TypeAlias

import numpy as np
from numpy.typing import NDArray

from . import cpu, files, program
from .floatz import flush_words
from .interrupts import WorkerPool
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
LRs: TypeAlias = Sequence[float | int | str | np.uint32] | NDArray[Any]
"""Learning rates: numbers or f32 words, :func:`lr_word`'s rule for each."""
Pages: TypeAlias = (
    bytes | bytearray | memoryview | str | os.PathLike[str] | Sequence[bytes | bytearray | memoryview] | NDArray[Any]
)
"""Start pages: a page, a page file's path, a sequence of pages, or a ``[P, 4096]``/``[P, 1024]`` array."""
StepBases: TypeAlias = int | Sequence[int] | NDArray[np.integer[Any]]
"""A step base (the first step, 0 to 2^64 - 2) for every system, or one per system."""


class OptionError(ValueError):
    """A bad value for an argument: one line that names the argument as the caller spelled it.

    Parameters
    ----------
    template : str
        The message, a ``{name}`` placeholder for each of ``names``: ``str(e)`` spells them as
        the library's keywords, :meth:`for_cli` as command-line flags.
    library, flags : mapping or None, default None
        How the library and the command line spell a name (where not as its keyword).

    Examples
    --------
    >>> e = OptionError("{step_base} must be at most 2^64 - 2", "step_base")
    >>> str(e), e.for_cli({"step_base": "--step-base"})
    ('step_base must be at most 2^64 - 2', '--step-base must be at most 2^64 - 2')
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
            A name's flag (None: the error's own); else ``--name-with-dashes``.

        Returns
        -------
        str

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
    """A value as a message shows it: a numpy integer as the plain number."""
    return str(int(x)) if is_int(x) else repr(x)


def _wrong_type(x: Any, name: str, rule: str) -> TypeError:
    """``{name} must be {rule}, got {type} {x!r}``: the one shape of a value of the wrong type."""
    return TypeError(f"{name} must be {rule}, got {type(x).__name__} {x!r}")


def _out_of_range(name: str, rule: str, shown: str, whole: bool = False) -> OptionError:
    """``{name} must be {rule}, got {shown}``, the argument (``set_lr`` of ``set_lr's step``; ``whole``:
    only a name that is all identifier) a placeholder, spelled as a flag on a command line."""
    base = re.match(r"[A-Za-z_]\w*", name)
    if base is None or (whole and not name.isidentifier()):
        return OptionError(f"{name} must be {rule}, got {shown}")
    rest = name[base.end() :].replace("{", "{{").replace("}", "}}")
    return OptionError(f"{{{base.group()}}}{rest} must be {rule}, got {shown}", base.group())


def check_int(x: Any, name: str, lo: int, hi: int) -> int:
    """``x`` as an ``int`` from ``lo`` to ``hi`` (a bool is no integer)."""
    if not is_int(x):
        raise _wrong_type(x, name, f"an integer from {lo} to {hi}")
    if not lo <= x <= hi:
        raise _out_of_range(name, f"an integer from {lo} to {hi}", _shown(x))
    return int(x)


def check_bool(x: Any, name: str) -> bool:
    """``x`` as a ``bool`` (``True``/``False`` or numpy's)."""
    if not isinstance(x, (bool, np.bool_)):
        raise _wrong_type(x, name, "True or False")
    return bool(x)


def check_number(x: Any, name: str, top: float) -> float:
    """``x`` as a float above 0 and at most ``top``."""
    rule = f"a number above 0 and at most {top:g}"
    if isinstance(x, (bool, np.bool_)) or not isinstance(x, (int, float, np.integer, np.floating)):
        raise _wrong_type(x, name, rule)
    if not 0 < x <= top:
        raise _out_of_range(name, rule, repr(x))
    return float(x)


def check_steps(steps: Any, name: str = "steps") -> int:
    """The steps of a run: an integer from 0 to :data:`MAX_STEPS`."""
    return check_int(steps, name, 0, MAX_STEPS)


def check_steps_per_task(spt: Any, name: str = "steps_per_task") -> int:
    """A page's STEPS_PER_TASK: 1 to 2^32 - 1."""
    return check_int(spt, name, 1, MASK32)


def check_step_base(base: Any, name: str = "step_base", *, each: bool = False) -> int:
    """A step base (the page's next step before the run): 0 to 2^64 - 2 (``each``: one of one per system)."""
    if not is_int(base):
        raise _wrong_type(base, name, "an integer" + (" (or one integer per system)" if each else ""))
    if not 0 <= base <= LAST_STEP:
        raise _out_of_range(name, "0..2^64-2", _shown(base), whole=True)
    return int(base)


def step_bases(bases: Any, m: int, name: str = "step_base") -> int | NDArray[np.uint64]:
    """One step base for all ``m`` systems (an int), or one per system (uint64 ``[m]``)."""
    if is_int(bases):
        return check_step_base(bases, name)
    if isinstance(bases, np.ndarray) and bases.dtype.kind in "iu" and bases.ndim == 1:
        if bases.size != m:
            raise OptionError(f"{name} must be one integer or one per system ({m}), got {bases.size}")
        bad = bases < 0 if bases.dtype.kind == "i" else bases > np.uint64(LAST_STEP)
        if bad.any():
            check_step_base(bases[int(np.argmax(bad))], name)  # the one message, of the first bad base
        return bases.astype(np.uint64)
    if isinstance(bases, (str, bytes)) or not hasattr(bases, "__len__"):
        raise TypeError(f"{name} must be an integer or one integer per system, got {type(bases).__name__}")
    if len(bases) != m:
        raise OptionError(f"{name} must be one integer or one per system ({m}), got {len(bases)}")
    return np.array([check_step_base(b, name, each=True) for b in bases], dtype=np.uint64)


# --- the step counter ----------------------------------------------------------------------------
def can_run(first: int, steps: int) -> bool:
    """Whether steps ``first .. first + steps - 1`` stay at or below 2^64 - 2 (the next round would wrap to 0)."""
    return steps == 0 or first + steps - 1 <= LAST_STEP


def _refuse_first(bad: NDArray[np.bool_], why: str, stride: int | None) -> None:
    """Refuse the first page of ``bad`` (page ``i``: systems ``i * stride ..``; None: one page, no system named)."""
    if bad.any():
        raise OptionError(why if stride is None else f"system {int(np.argmax(bad)) * stride}: {why}")


def check_tasks_progress(spt: NDArray[np.uint32], steps: int, stride: int | None = None) -> None:
    """Refuse pages (``spt`` one word each) whose STEPS_PER_TASK is 0 (SPEC 8)."""
    if steps:
        _refuse_first(np.asarray(spt) == 0, "the page's STEPS_PER_TASK is 0: its tasks would never progress", stride)


def check_first_steps(first: NDArray[np.uint64], steps: int, stride: int | None = 1) -> None:
    """Refuse the first of ``first`` (one next step a page) that cannot run ``steps`` more steps."""
    if not steps or not first.size:
        return
    late = first > np.uint64(LAST_STEP - (steps - 1)) if steps - 1 <= LAST_STEP else np.ones(first.shape, bool)
    if late.any():
        at = int(first[int(np.argmax(late))])
        _refuse_first(late, f"steps {at} .. {at + steps - 1} reach 2^64-1, whose round would wrap to 0", stride)


def check_can_run(first: int, steps: int, steps_per_task: int | None = None) -> None:
    """Refuse a page that cannot run ``steps`` more steps from ``first`` (the message names no system)."""
    if steps_per_task is not None:
        check_tasks_progress(np.array([steps_per_task]), steps)
    check_first_steps(np.array([first], dtype=np.uint64), steps, None)


def check_run(steps: Any, steps_per_task: Any, first_step: Any, set_lr: Any = ()) -> tuple[LrChange, ...]:
    """Refuse one system's run that cannot be made (:func:`describe`'s rules); its LR changes, sorted by step."""
    if steps_per_task is None:  # describe's None is the page's own: a case always says it
        check_steps_per_task(steps_per_task)
    run = describe(steps, steps_per_task=steps_per_task, step_base=first_step, set_lr=set_lr, one_page=True)
    return run.set_lr


def check_view_can_run(view: View, steps: int) -> None:
    """:func:`check_can_run` of a page as a :class:`~meshnb.view.View`."""
    check_can_run(view.next_step, steps, view.word("STEPS_PER_TASK"))


def next_steps(words: Words) -> NDArray[np.uint64]:
    """Each page's next step (``STEP_HI:NEXT_STEP``) of ``[n, 1024]`` words, uint64 ``[n]``."""
    return words[:, WORD["STEP_HI"]].astype(np.uint64) << np.uint64(32) | words[:, WORD["NEXT_STEP"]]


def check_words_can_run(words: Words, steps: int, stride: int = 1) -> None:
    """:func:`check_can_run` of every page of ``[n, 1024]`` words; page ``i`` stands for systems ``i * stride ..``."""
    check_tasks_progress(words[:, WORD["STEPS_PER_TASK"]], steps, stride)
    check_first_steps(next_steps(words), steps, stride)


# --- LRs ---------------------------------------------------------------------------------------
class LrChange(NamedTuple):
    """One checked LR change: SET_LR with the f32 ``word`` before the task that starts when ``step`` steps are done."""

    step: int
    word: int


_HEX_WORD = re.compile(r"0[xX][0-9a-fA-F]{1,8}")
_DECIMAL = re.compile(r"[-+]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][-+]?[0-9]+)?|[-+]?(?:inf|infinity|nan)", re.I)
_LR_KINDS = "a number (int or float) or an f32 word (numpy.uint32, or text '0x...')"


def _beyond(name: str, x: Any) -> OptionError:
    return OptionError(
        f"{name} = {x!r} is beyond float32's range (|x| <= {_F32_MAX:.8g}); "
        "to run an infinite LR give its word (numpy.uint32(0x7f800000) or '0x7f800000')"
    )


def parse_lr_number(text: str, name: str = "lr") -> float:
    """An LR number as text: ASCII decimal only (``float`` would take ``1_0``), within float32's range."""
    t = text.strip()
    if not _DECIMAL.fullmatch(t):
        raise OptionError(f"{name} = {text!r} is neither a number (0.01) nor an f32 word in hex (0x3c23d70a)")
    number = float(t)
    if math.isinf(number) and "inf" not in t.lower():  # 1e400: finite as written, beyond float64 too
        raise _beyond(name, text)
    _float_word(number, name)  # 1e40: beyond float32's range
    return number


def parse_lr(text: str, name: str = "lr") -> int:
    """One LR as text, as its f32 word: a number (``0.01``, rounded to float32) or a word in hex (``0x3c23d70a``)."""
    t = text.strip()
    if _HEX_WORD.fullmatch(t):
        return int(t, 16)
    if re.fullmatch(r"0[xX][0-9a-fA-F]+", t):
        raise OptionError(f"{name} = {text!r}: an f32 word has at most 8 hex digits (0xFFFFFFFF)")
    return _float_word(parse_lr_number(t, name), name)


def _float_word(x: float | np.floating[Any], name: str) -> int:
    if isinstance(x, np.float32):
        return int(np.array(x).view(np.uint32))  # already float32: nothing can overflow
    with np.errstate(over="ignore", invalid="ignore"):
        word = np.float32(x)
    if np.isinf(word) and math.isfinite(float(x)):
        raise _beyond(name, float(x))
    return int(np.array(word).view(np.uint32))


def _int_word(x: int, name: str) -> int:
    """An integer LR as its f32 word, rounded once (to nearest, ties to even) as numpy's int64 -> float32."""
    n = abs(x)
    shift = n.bit_length() - 24
    if shift > 0:  # keep 24 significant bits: float64 holds the result exactly
        q, r = divmod(n, 1 << shift)
        half = 1 << (shift - 1)
        q += r > half or (r == half and q & 1)
        n = q << shift
    if n > _F32_MAX:
        raise _beyond(name, x)
    return int(np.array(np.float32(math.copysign(float(n), x))).view(np.uint32))


def lr_word(lr: Any, name: str = "lr") -> int:
    """One LR as its f32 word: a number rounded to float32, a numpy ``uint32`` the word, text :func:`parse_lr`'s."""
    if isinstance(lr, np.uint32):
        return int(lr)
    if isinstance(lr, str):
        return parse_lr(lr, name)
    if isinstance(lr, np.unsignedinteger):
        raise TypeError(
            f"{name} = {int(lr)} is a numpy.{type(lr).__name__}: an LR is {_LR_KINDS}; "
            f"give numpy.uint32(...) for a word or float(...) for a number"
        )
    if is_int(lr):
        return _int_word(int(lr), name)
    if isinstance(lr, (float, np.floating)):
        return _float_word(lr, name)
    raise TypeError(f"{name} is an LR: {_LR_KINDS}, got {type(lr).__name__} {lr!r}")


def _user_stacklevel() -> int:
    """The stacklevel of the first frame outside meshnb, so that a warning points at the caller's line."""
    frame, level = sys._getframe(1), 1
    while frame is not None and frame.f_globals.get("__name__", "").startswith("meshnb"):
        frame, level = frame.f_back, level + 1  # type: ignore[assignment]
    return level


def warn_int_was_word(where: str, x: int) -> None:
    """Warn (FutureWarning) that an integer LR is read as the number, not as an f32 word."""
    hint = f": for the word {x:#x} give numpy.uint32({x:#x}) or '{x:#x}'" if 0 <= x <= MASK32 else ""
    warnings.warn(
        f"{where} = {x} is the number {float(x)!r} (f32 word {_int_word(x, where):#010x}); an integer LR "
        f"was read as an f32 word before{hint}",
        FutureWarning,
        stacklevel=_user_stacklevel(),
    )


def check_changes(changes: Iterable[Any], steps: int, name: str = "set_lr") -> tuple[LrChange, ...]:
    """LR changes already made words (a checkpoint's, a case file's), checked: steps 0 to ``steps``, words 32-bit."""
    out = []
    for step, word in changes:
        step = check_int(step, f"{name}'s step", 0, steps)
        out.append(LrChange(step, check_int(word, f"{name}[{step}]'s f32 word", 0, MASK32)))
    return tuple(out)


def lr_changes(set_lr: Any, steps: int, name: str = "set_lr") -> tuple[LrChange, ...]:
    """``set_lr`` (``{step: LR}`` or pairs) as changes sorted by step (stable), each LR :func:`lr_word`'s."""
    if isinstance(set_lr, Mapping):
        pairs: list[Any] = list(set_lr.items())
    elif isinstance(set_lr, (str, bytes)) or not isinstance(set_lr, Iterable):
        raise TypeError(
            f"{name} maps a step of the run to an LR: a dict or (step, lr) pairs, got {type(set_lr).__name__}"
        )
    else:
        pairs = list(set_lr)
    out: list[LrChange] = []
    warned = False
    for pair in pairs:
        if isinstance(pair, LrChange):
            out += check_changes([pair], steps, name)
            continue
        if isinstance(pair, (str, bytes)) or not isinstance(pair, Iterable) or len(pair := tuple(pair)) != 2:
            raise TypeError(f"{name} maps a step of the run to an LR: (step, lr) pairs, got {pair!r}")
        step = check_int(pair[0], f"{name}'s step", 0, steps)
        lr = pair[1]
        word = lr_word(lr, f"{name}[{_shown(pair[0])}]")
        if not warned and is_int(lr) and not isinstance(lr, np.uint32) and word != lr:
            warn_int_was_word(f"{name}[{_shown(pair[0])}]", int(lr))
            warned = True  # once a call
        out.append(LrChange(step, word))
    return tuple(sorted(out, key=lambda c: c.step))


def lr_words(lrs: Any, name: str = "lrs") -> Words:
    """LRs as f32 words ``[L]``, each by :func:`lr_word`'s rule; messages name ``lrs[k]``.

    Parameters
    ----------
    lrs : LRs
        A sequence of numbers, words or text, or an array (``uint32`` of either byte order: the words).
    name : str, default "lrs"
        The argument's name, for messages.

    Returns
    -------
    numpy.ndarray

    Examples
    --------
    >>> lr_words([1, np.uint32(1), "0x3f000000"]).tolist()  # the number 1, the word 1, a word
    [1065353216, 1, 1056964608]
    >>> lr_words(np.array([0x3F000000], ">u4")).tolist()
    [1056964608]
    """
    if isinstance(lrs, (str, bytes)) or not hasattr(lrs, "__len__"):
        raise TypeError(f"{name} must be a sequence or array of learning rates, got {type(lrs).__name__}")
    if not isinstance(lrs, np.ndarray) and not set(map(type, lrs)) <= {float, int}:  # C speed: ~15 ns an LR
        return np.array([lr_word(x, f"{name}[{k}]") for k, x in enumerate(lrs)], dtype=np.uint32).reshape(-1)
    try:
        arr = np.asarray(lrs)
    except OverflowError:  # an int beyond int64 beside others
        arr = np.asarray(lrs, dtype=object)
    if arr.ndim != 1 or arr.size == 0:
        raise OptionError(f"{name} must be a non-empty 1-D sequence, got shape {arr.shape}")
    # the words and a float64 copy on the way (a broadcast view holds no memory itself)
    check_fits(arr.size * 12, f"{name}: {arr.size} learning rates", "sweep fewer at a time")
    if arr.dtype.kind == "u" and arr.dtype.itemsize == 4:  # any byte order ('>u4' of a file, HDF5, FITS): words
        return arr.astype(np.uint32)  # a copy in native order, the same values
    if arr.dtype.kind == "b" or (arr.dtype.kind == "u"):
        lr_word(arr[0], f"{name}[0]")  # the TypeError of a bool or another unsigned integer
    if arr.dtype.kind not in "if":
        return np.array([lr_word(x, f"{name}[{k}]") for k, x in enumerate(arr.tolist())], dtype=np.uint32)
    return _float_words(arr, name)


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
    """Refuse (:class:`OptionError`) what would take more than 80% of the memory available now."""
    have = available_bytes()
    if need > 0.8 * have:
        raise OptionError(f"{what} needs about {_size(need)}, more than this machine has free ({_size(have)}); {hint}")


def _size(n: int) -> str:
    units = ["KiB", "MiB", "GiB", "TiB", "PiB", "EiB"]
    e = min(len(units), max(1, int(math.log(max(n, 1), 1024))))
    return f"{n / 1024**e:.1f} {units[e - 1]}"


def _float_words(arr: NDArray[Any], name: str) -> Words:
    if arr.dtype == np.float32:  # already float32: nothing can overflow (an inf was given as such)
        return arr.view(np.uint32).copy()
    with np.errstate(over="ignore", invalid="ignore"):
        words = arr.astype(np.float32)
        wide = arr.astype(np.float64)
    overflow = np.isinf(words) & np.isfinite(wide)
    if overflow.any():
        k = int(np.argmax(overflow))
        raise _beyond(f"{name}[{k}]", arr[k].item())
    return words.view(np.uint32)


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


@functools.cache
def _init_words() -> Words:
    """The init page as read-only ``[1, 1024]`` words, made once."""
    words = np.frombuffer(init_page(), dtype="<u4")[None, :].astype(np.uint32)
    words.flags.writeable = False
    return words


def page_words(pages: Any, name: str = "view_in") -> Words:
    """Start pages (:data:`Pages`) as ``[P, 1024]`` uint32 words: the one page rule of ``train`` and ``sweep``."""
    if isinstance(pages, (str, os.PathLike)):
        try:
            pages = files.read_page(pages, name)
        except files.InputError as e:
            raise OptionError(str(e)) from None
    if isinstance(pages, (bytes, bytearray, memoryview)):
        return np.frombuffer(_one_page(pages, name), dtype="<u4")[None, :].astype(np.uint32)
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
    if not hasattr(pages, "__iter__"):
        raise TypeError(
            f"{name} is a page (4096 bytes, or a page file's path), a sequence or an array of pages, "
            f"not {type(pages).__name__}"
        )
    out = []
    for i, p in enumerate(pages):
        try:
            b = bytes(memoryview(p))
        except TypeError:
            raise TypeError(f"{name}[{i}] is not bytes ({type(p).__name__})") from None
        out.append(np.frombuffer(_one_page(b, f"{name}[{i}]"), dtype="<u4"))
    if not out:
        raise OptionError(f"{name} is empty (no pages)")
    return np.stack(out).astype(np.uint32)


def _one_page(data: bytes | bytearray | memoryview, name: str) -> bytes:
    b = bytes(memoryview(data))
    if len(b) != VIEW_BYTES:
        raise OptionError(f"{name} has {len(b)} bytes, a page is {VIEW_BYTES} bytes")
    return b


def start_page(view_in: Any, name: str = "view_in") -> bytes:
    """One start page (``train``'s ``view_in``): :func:`page_words`'s rule, for exactly one page."""
    words = page_words(view_in, name)
    if words.shape[0] != 1:
        raise OptionError(f"{name} is one page (a run's members start alike), got {words.shape[0]}")
    return words[0].astype("<u4").tobytes()


def write_lr(words: Words, lr: Words, z: bool) -> None:
    """Put LR words into pages ``[n, 1024]`` as SET_LR does (in mode Z flushed: ``ftz_from_bits``)."""
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
    """The SHA-256 of each row's one or two word ``spans``, ``[n, 32]`` uint8: hashlib for few rows, else njit."""
    if not 1 <= len(spans) <= 2:  # the njit kernel hashes two spans: both paths take the same
        raise ValueError(f"row_digests hashes one or two spans of a row, not {len(spans)}")
    w = np.ascontiguousarray(words, dtype=np.uint32)
    n = w.shape[0]
    if n < NJIT_DIGEST_ROWS:  # a small sweep's cold start compiles no SHA-256 kernel (about 3 s of it)
        return span_digests(w, spans)
    from .sha256 import digest_rows  # numba on use only

    (p0, p1), (l0, l1) = (*spans, (0, 0))[:2]
    out = np.empty((n, 32), dtype=np.uint8)
    threads = threads or min(cpu.usable_cpus(), max(1, n // 1024))  # a thread's start costs about one page's hash
    cuts = [n * i // threads for i in range(threads + 1)]

    def part(i: int) -> None:
        digest_rows(w, p0, p1, l0, l1, out, cuts[i], cuts[i + 1])

    if threads == 1:
        part(0)
    elif pool is not None:
        for f in [pool.submit(part, i) for i in range(threads)]:
            f.result()
    else:
        with WorkerPool(max_workers=threads) as own:
            list(own.map(part, range(threads)))
    return out


# --- the model of a run ------------------------------------------------------------------------

DEFAULT_STEPS = 4096
"""The steps of a run that names none (``train()``, ``meshnb train``, ``sweep``'s default)."""


@dataclass(frozen=True)
class Plan:
    """What the task loop follows: the steps of this call, what to set first, and the LR changes.

    Parameters
    ----------
    steps : int, default 4096
        The steps of this call.
    steps_per_task, step_base : int or None, default None
        STEPS_PER_TASK and the next step to set first (None: as the page says).
    set_lr : tuple of (int, int), default ()
        ``(step, f32 word)`` in step order: SET_LR before the task that starts when ``step`` steps are done.

    Examples
    --------
    >>> plan = Plan.make(200, None, {150: np.uint32(0x3F000000), 100: 0.5})
    >>> [plan.next_boundary(64, done) for done in (0, 64, 100, 128, 150)]
    [64, 100, 150, 150, 200]
    """

    steps: int = DEFAULT_STEPS
    steps_per_task: int | None = None
    set_lr: tuple[tuple[int, int], ...] = ()
    step_base: int | None = None

    def __post_init__(self) -> None:
        put = object.__setattr__  # frozen: normalise once, here
        put(self, "steps", check_steps(self.steps))
        if self.steps_per_task is not None:
            put(self, "steps_per_task", check_steps_per_task(self.steps_per_task))
        put(self, "set_lr", check_changes(self.set_lr, self.steps))  # words: LR changes at steps of this run
        if self.step_base is not None:
            put(self, "step_base", check_step_base(self.step_base))

    @classmethod
    def make(
        cls,
        steps: int = DEFAULT_STEPS,
        steps_per_task: int | None = None,
        set_lr: Mapping[int, Any] | Sequence[Sequence[Any]] | None = None,
        step_base: int | None = None,
    ) -> Plan:
        """A plan from ``train``-style arguments, its LR changes sorted by step.

        Parameters
        ----------
        steps, steps_per_task, step_base : int or None
            As :class:`Plan`'s.
        set_lr : mapping or sequence of pairs, or None
            ``{step: LR}`` or ``(step, LR)`` pairs, each LR as ``train`` reads it.

        Returns
        -------
        Plan

        Examples
        --------
        >>> Plan.make(100, set_lr=[(80, 0.5), (20, 0.25)]).set_lr
        (LrChange(step=20, word=1048576000), LrChange(step=80, word=1056964608))
        """
        return cls(steps, steps_per_task, lr_changes(set_lr or (), check_steps(steps)), step_base)

    def lr_changes_at(self, done: int) -> list[int]:
        """The f32 words of the SET_LRs due before the task that starts when ``done`` steps are done.

        Parameters
        ----------
        done : int
            The steps of this call done.

        Returns
        -------
        list of int

        Examples
        --------
        >>> [hex(w) for w in Plan.make(100, set_lr={50: 0.5}).lr_changes_at(50)]
        ['0x3f000000']
        """
        return [bits for step, bits in self.set_lr if step == done]

    def next_boundary(self, spt: int, done: int) -> int:
        """Where the task starting at ``done`` ends: ``spt`` steps later, or sooner at the end or an LR change.

        Parameters
        ----------
        spt, done : int
            The page's STEPS_PER_TASK; the steps of this call done.

        Returns
        -------
        int
            The steps done at the task's end.

        Examples
        --------
        >>> plan = Plan.make(100, set_lr={50: 0.5})
        >>> plan.next_boundary(64, 0), plan.next_boundary(64, 50)
        (50, 100)
        """
        end = min(done + spt, self.steps)
        for step, _ in self.set_lr:  # sorted
            if done < step < end:
                return step
        return end


@dataclass(frozen=True, eq=False)
class Run:
    """One run, as ``train`` and ``sweep`` both describe it before their first step; made by :func:`describe`.

    The P start pages times the L LR words (page-major), in clusters of ``group`` (0: each alone).

    Parameters
    ----------
    starts, lr : numpy.ndarray
        ``[P, 1024]`` uint32 start pages; ``[L]`` uint32 LR words set first (None: each page's own).
    base : int, numpy.ndarray or None
        The step base of every system, or uint64 ``[M]`` (None: each page's own).
    z : bool
        Float mode Z.
    steps_per_task : int or None, default None
        STEPS_PER_TASK written into every page (None: each page's own).
    steps, set_lr : default 4096, ()
        The steps of every system; its SET_LR (:class:`LrChange`), sorted by step.
    group, backend : default 0, None
        Members of a cluster (0: every system alone); where the run executes (None: not chosen).

    Examples
    --------
    >>> sweep = describe(10, lrs=[0.5, 0.25], view_in=[init_page()] * 2, step_base=7)
    >>> len(sweep), sweep.page_index(0, 4).tolist(), sweep.lr_index(0, 4).tolist()
    (4, [0, 0, 1, 1], [0, 1, 0, 1])
    >>> cluster = describe(10, group=4, backend="threads")
    >>> len(cluster), cluster.groups
    (4, 1)
    """

    starts: Words
    lr: Words | None
    base: int | NDArray[np.uint64] | None
    z: bool
    steps_per_task: int | None = None
    steps: int = DEFAULT_STEPS
    set_lr: tuple[LrChange, ...] = ()
    group: int = 0
    backend: str | None = None

    def __eq__(self, other: object) -> bool:
        """The same run: the same arrays (by value) and the same settings."""
        if not isinstance(other, Run):
            return NotImplemented

        def same(a: Any, b: Any) -> bool:
            if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
                return isinstance(a, np.ndarray) and isinstance(b, np.ndarray) and np.array_equal(a, b)
            return bool(a == b)

        return all(same(getattr(self, f.name), getattr(other, f.name)) for f in fields(self))

    __hash__ = None  # type: ignore[assignment]  # arrays: no hash

    @property
    def n_lrs(self) -> int:
        """L: the LRs per page (1 without ``lrs``)."""
        return 1 if self.lr is None else int(self.lr.size)

    @property
    def members(self) -> int:
        """The systems each (page, LR) pair stands for: a cluster's members, 1 where alone."""
        return self.group or 1

    @property
    def groups(self) -> int:
        """The clusters (a system alone counts as one): M / ``members``."""
        return int(self.starts.shape[0]) * self.n_lrs

    @property
    def is_cluster(self) -> bool:
        """Whether the systems run in clusters (a group and an exchange), not each alone."""
        return self.group > 0

    def __len__(self) -> int:
        return self.groups * self.members

    def grouped(self, group: int) -> Run:
        """This run with clusters of ``group`` members (MPI: the job's size, known at its start).

        Parameters
        ----------
        group : int
            Members of each cluster, 1 to 2^31.

        Returns
        -------
        Run

        Examples
        --------
        >>> len(describe(10).grouped(3))
        3
        """
        return replace(self, group=check_int(group, "systems", 1, 1 << 31))

    def page_index(self, lo: int, hi: int) -> NDArray[np.int64]:
        """Which start page each of systems ``lo .. hi-1`` starts from.

        Parameters
        ----------
        lo, hi : int
            Systems ``lo .. hi-1``.

        Returns
        -------
        numpy.ndarray
            int64 indexes of ``starts``.

        Examples
        --------
        >>> describe(10, lrs=[0.5, 0.25], view_in=[init_page()] * 2).page_index(0, 4).tolist()
        [0, 0, 1, 1]
        """
        return np.arange(lo, hi, dtype=np.int64) // (self.n_lrs * self.members)

    def lr_index(self, lo: int, hi: int) -> NDArray[np.int64]:
        """Which LR each of systems ``lo .. hi-1`` runs (-1: its page's own).

        Parameters
        ----------
        lo, hi : int
            Systems ``lo .. hi-1``.

        Returns
        -------
        numpy.ndarray
            int64 indexes of ``lr``.

        Examples
        --------
        >>> describe(10).lr_index(0, 1).tolist()
        [-1]
        """
        if self.lr is None:
            return np.full(hi - lo, -1, dtype=np.int64)
        return np.arange(lo, hi, dtype=np.int64) // self.members % self.n_lrs

    def words(self, lo: int, hi: int) -> Words:
        """Systems ``lo .. hi-1``'s start pages, SET_LR and the step base applied as ``train`` applies them.

        Parameters
        ----------
        lo, hi : int
            Systems ``lo .. hi-1``.

        Returns
        -------
        numpy.ndarray
            ``[hi - lo, 1024]`` uint32, a new array.

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
        if self.steps_per_task is not None:
            out[:, WORD["STEPS_PER_TASK"]] = self.steps_per_task
        return out

    def step_base(self, lo: int, hi: int) -> NDArray[np.uint64]:
        """Systems ``lo .. hi-1``'s first steps.

        Parameters
        ----------
        lo, hi : int
            Systems ``lo .. hi-1``.

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

    def plan(self) -> Plan:
        """What the task loop follows for the whole run (one step base for all systems, or none).

        Returns
        -------
        Plan

        Examples
        --------
        >>> describe(100, set_lr={50: 0.25}, step_base=3).plan()
        Plan(steps=100, steps_per_task=None, set_lr=(LrChange(step=50, word=1048576000),), step_base=3)
        """
        if isinstance(self.base, np.ndarray):
            raise ValueError("a plan has one step base: this run has one per system")
        return Plan(self.steps, self.steps_per_task, self.set_lr, self.base)

    def check_can_run(self, steps: int | None = None) -> None:
        """Refuse systems that cannot run ``steps`` steps (None: the run's), at a cost per start page or step base.

        Parameters
        ----------
        steps : int or None, default None

        Examples
        --------
        >>> describe(0, step_base=2**64 - 3).check_can_run(3)  # doctest: +ELLIPSIS
        Traceback (most recent call last):
            ...
        meshnb.runspec.OptionError: system 0: steps 18446744073709551613 .. ... reach 2^64-1, whose round ...
        """
        steps = self.steps if steps is None else steps
        stride = self.n_lrs * self.members  # systems per start page
        if self.steps_per_task is None:
            check_tasks_progress(self.starts[:, WORD["STEPS_PER_TASK"]], steps, stride)
        else:
            check_tasks_progress(np.array([self.steps_per_task]), steps)
        if self.base is None:
            check_first_steps(next_steps(self.starts), steps, stride)
        else:  # one per system, or one for all (the first names system 0)
            check_first_steps(np.atleast_1d(np.asarray(self.base, dtype=np.uint64)), steps, 1)


Systems = Run
"""Another name of :class:`Run` (a sweep's systems)."""


def describe(
    steps: Any,
    *,
    lrs: Any = None,
    view_in: Any = None,
    step_base: Any = None,
    z: Any = True,
    steps_per_task: Any = None,
    set_lr: Any = None,
    group: Any = 0,
    backend: str | None = None,
    one_page: bool = False,
) -> Run:
    """A :class:`Run` from the values a caller gave, each checked by this module's rule, then whether it can run.

    Parameters
    ----------
    steps : int
        Steps of every system.
    lrs, view_in : LRs, Pages or None
        One system per LR (:func:`lr_words`; None: each page's own) and start page
        (:func:`page_words`; None: the init page).
    step_base, steps_per_task : StepBases, int or None
        The first step of every system, or one per system; STEPS_PER_TASK (None: each page's own).
    z : bool, default True
        Float mode Z.
    set_lr : mapping or pairs, or None
        LR changes during the run, :func:`lr_changes`' rule.
    group, backend : int, str or None
        Members of a cluster (0: every system alone); where it runs (the caller's table checks it).
    one_page : bool, default False
        ``view_in`` is exactly one page and ``step_base`` one integer (``train``'s).

    Returns
    -------
    Run
        The run, its systems page-major.

    Examples
    --------
    >>> describe(5, set_lr={6: 0.5})
    Traceback (most recent call last):
        ...
    meshnb.runspec.OptionError: set_lr's step must be an integer from 0 to 5, got 6
    """
    steps = check_steps(steps)
    z = check_bool(z, "z")
    changes = () if set_lr is None else lr_changes(set_lr, steps)
    if view_in is None:
        starts = _init_words()
    elif one_page:
        starts = np.frombuffer(start_page(view_in), dtype="<u4")[None, :].astype(np.uint32)
    else:
        starts = page_words(view_in)
    lr = None if lrs is None else lr_words(lrs)
    spt = None if steps_per_task is None else check_steps_per_task(steps_per_task)
    m = starts.shape[0] * (1 if lr is None else lr.size) * (group or 1)
    if step_base is None:
        base: int | NDArray[np.uint64] | None = None
    else:  # train's one page takes one step base; a sweep's systems one each, or one for all
        base = check_step_base(step_base) if one_page else step_bases(step_base, m)
    run = Run(starts, lr, base, z, spt, steps, changes, int(group), backend)
    run.check_can_run()
    return run
