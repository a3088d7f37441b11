"""Fault models: the ways an executor's bits part from float mode Z, as one registry.

A :class:`Model` is a set of FPU rules (:class:`~.fpu.Rules`) plus structural choices (FMA
contraction, the lane sum, the fold order, how samples are made, how LR and INV_BATCH are read).
:func:`run` is a simulated executor: the whole host protocol of SPEC sections 8-10 (SET_LR,
step bases, clusters and their fold), vectorised over lanes and systems with numpy on uint32
words, written apart from meshnb's numba loops.  With :data:`EXACT` (no fault) it gives meshnb's
bits; with a model it gives the bits an executor with that fault would give.  ``meshnb check``
replays a step (or a task, or a run) under every model to name those that reproduce an
executor's bits, and the tests inject each model as an executor.
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass, field

import numpy as np

from meshnb.view import FIELDS

from . import mutants
from .fpu import SIGN, Ops, Rules

SAMPLES, WARP, BATCHES = 256, 32, 8
# Byte offsets of the page's fields, from the layout table (SPEC 7)
OFF_PARAMS, OFF_LR, OFF_SPT, OFF_INV, OFF_NEXT, OFF_ERR, OFF_STEP_HI, OFF_X, OFF_Y, OFF_LOSS = (
    FIELDS[name].offset
    for name in ("PARAMS", "LR", "STEPS_PER_TASK", "INV_BATCH", "NEXT_STEP", "ERR", "STEP_HI", "X", "Y", "LOSS")
)
OFF_PENDING = FIELDS["PENDING"].offset
RING = FIELDS["LOSS"].count  # the loss ring's entries
LANES = np.arange(WARP)
BUTTERFLY = (16, 8, 4, 2, 1)
SUMS = ("e", "e*x", "e*x2", "e*x3", "e*e")  # the five sums of a step, in order


@dataclass(frozen=True)
class Model:
    """One way of computing the program: float mode Z with at most a few rules changed.

    Parameters
    ----------
    name : str
        The model's name (``meshnb check`` reports it).
    doc : str
        What it changes, in a line.
    rules : Rules, default Rules()
        The FPU rules (float mode Z's by default).
    fma_horner : bool, default False
        The Horner polynomial contracted into FMAs.
    fma_apply : bool, default False
        ``p - lr * g`` rounded once (an FMA) in apply.
    lane_sum : {"butterfly", "sequential"}, default "butterfly"
        The xor butterfly over the 32 lanes, or ``((v0 + v1) + v2) + ...``.
    fold : {"system", "reverse"}, default "system"
        The cluster's fold in system order, or from the last system down.
    samples : {"exact", "naive-sin"}, default "exact"
        Y as SPEC makes it, or ``sin(pi * x)`` in f64 without the exact reduction.
    raw_lr_inv : bool, default False
        LR and INV_BATCH read without ``ftz_from_bits``.
    op, alt : str, default ""
        One op of the step's dataflow computed under one alternative rule, every other op in
        mode Z (:mod:`~meshnb.conformance.mutants`; made by :func:`single_op`).

    See Also
    --------
    model : a model of the registry by name.
    run : a simulated executor with a model.

    Examples
    --------
    >>> from meshnb.conformance.faults import MODELS, model
    >>> [m.name for m in MODELS][:4]
    ['gradual-underflow', 'ftz-before-rounding', 'x86-ftz', 'no-daz']
    >>> model("fma-horner").fma_horner
    True
    """

    name: str
    doc: str
    rules: Rules = field(default_factory=Rules)
    fma_horner: bool = False  # pred = fma(fma(fma(d, x, c), x, b), x, a)
    fma_apply: bool = False  # p = fma(-lr, mul(s, inv), p)
    lane_sum: str = "butterfly"  # or "sequential": ((v0 + v1) + v2) + ... + v31
    fold: str = "system"  # or "reverse": slot N-1 + ... + slot 0
    samples: str = "exact"  # or "naive-sin": y = f32(sin(pi * x)) in f64 without reduction
    raw_lr_inv: bool = False  # LR and INV_BATCH read without ftz_from_bits and fed to mul unflushed
    op: str = ""  # a single-op mutant: this op of mutants.SPACE ...
    alt: str = ""  # ... under this alternative

    @property
    def mutant(self) -> mutants.Mutant | None:
        """The one op this model changes (None: not a single-op model)."""
        return mutants.Mutant(self.op, self.alt) if self.op else None


EXACT = Model("mode-z", "float mode Z as SPEC defines it (no fault)")

MODELS: tuple[Model, ...] = (
    Model(
        "gradual-underflow",
        "no flush at all: IEEE gradual underflow, subnormal inputs read as they are",
        Rules(underflow="none", daz=False),
    ),
    Model(
        "ftz-before-rounding",
        "results flushed when the exact result is tiny (tininess before rounding)",
        Rules(underflow="before"),
    ),
    Model(
        "x86-ftz", "results flushed when tiny after rounding at unbounded exponent (x86 FTZ)", Rules(underflow="after")
    ),
    Model("no-daz", "subnormal inputs not flushed (no DAZ); results flushed as mode Z does", Rules(daz=False)),
    Model("fma-horner", "FMA contraction in the Horner polynomial", fma_horner=True),
    Model("fma-apply", "FMA contraction in apply (p - lr * g rounded once)", fma_apply=True),
    Model(
        "sequential-lane-sum", "a sequential sum over the 32 lanes instead of the xor butterfly", lane_sum="sequential"
    ),
    Model("fold-reverse", "the cluster's fold not in system order (N-1 down to 0)", fold="reverse"),
    Model("nan-x86", "NaNs not canonical: x86's (first NaN operand quieted, else 0xFFC00000)", Rules(nan="x86")),
    Model("nan-arm", "NaNs not canonical: ARM's default NaN 0x7FC00000", Rules(nan="arm")),
    Model(
        "samples-naive-sin",
        "samples not correctly rounded: y = sin(pi * x) in f64 without the exact reduction (sin_pi(+-1) is not +-0)",
        samples="naive-sin",
    ),
    Model(
        "raw-lr-inv",
        "LR and INV_BATCH read without the flush (SET_LR writes the raw word; the multiplies take them unflushed)",
        raw_lr_inv=True,
    ),
)
BY_NAME: dict[str, Model] = {m.name: m for m in MODELS}


def single_op(op: str, alt: str) -> Model:
    """The model of an executor that computes op ``op`` of the step under alternative ``alt``
    (:mod:`~meshnb.conformance.mutants`), every other op in mode Z, on every step.

    Parameters
    ----------
    op : str
        An op's id (``mutants.BY_ID``).
    alt : str
        One of its alternatives.

    Returns
    -------
    Model
        The model, named ``op:alt``.

    Raises
    ------
    ValueError
        For an unknown op or an alternative it does not have.

    Examples
    --------
    >>> from meshnb.conformance.faults import init_page, model, run, single_op
    >>> m = single_op("lr*g", "fused")  # apply's lr*g fused into its subtraction: fma-apply
    >>> mine, theirs = (run([init_page()], 16, grouped=False, m=k).pages for k in (m, model("fma-apply")))
    >>> m.name, mine == theirs
    ('lr*g:fused', True)
    """
    mut = mutants.Mutant(op, alt)
    return Model(mut.name, "mode Z except " + mut.text(), op=op, alt=alt)


def model(name: str) -> Model:
    """The model called ``name`` (``mode-z`` is the fault-free one).

    Parameters
    ----------
    name : str
        ``mode-z`` or the name of one of ``MODELS``.

    Returns
    -------
    Model
        The model.

    Raises
    ------
    ValueError
        For an unknown name (the message lists the known ones).

    Examples
    --------
    >>> from meshnb.conformance.faults import model
    >>> model("x86-ftz").rules
    Rules(underflow='after', daz=True, nan='canonical')
    >>> model("mode-z").name
    'mode-z'
    """
    if name == EXACT.name:
        return EXACT
    try:
        return BY_NAME[name]
    except KeyError:
        raise ValueError(f"unknown fault model {name!r}; known: {', '.join(BY_NAME)}") from None


# =============================================================================================
# Samples (SPEC section 4)
# =============================================================================================


def _sin_pi_exact(x: float) -> float:
    ax = abs(x)
    r = 1.0 - ax if ax > 0.5 else ax
    return math.copysign(math.sin(math.pi * r), x)


def samples(m: Model = EXACT) -> tuple[np.ndarray, np.ndarray]:
    """X and Y words as the model's init makes them.

    Parameters
    ----------
    m : Model, default EXACT
        The model.

    Returns
    -------
    tuple of numpy.ndarray
        ``(xs, ys)``, uint32 ``[256]`` each.

    Examples
    --------
    >>> from meshnb.conformance.faults import model, samples
    >>> xs, ys = samples()
    >>> hex(ys[255]), hex(samples(model("samples-naive-sin"))[1][255])  # sin(pi) is +0, or not
    ('0x0', '0x250d3132')
    """
    mut = m.mutant
    if mut is not None:
        if mutants.BY_ID[mut.op].stage == "samples":
            return mutants.samples(mut, _sin_pi_exact)
        return samples()
    ops = Ops(m.rules)
    h = ops.div(0x40000000, ops.from_u32(255))
    xw = ops.add(0xBF800000, ops.mul(ops.from_u32(np.arange(SAMPLES, dtype=np.uint32)), h))
    xf = xw.view(np.float32).astype(np.float64)
    if m.samples == "naive-sin":
        y = np.sin(np.pi * xf)
    else:
        y = np.array([_sin_pi_exact(float(v)) for v in xf])
    return xw, ops.read(y.astype(np.float32).view(np.uint32))


def init_page(systems: int = 1, grouped: bool = False, m: Model = EXACT) -> bytes:
    """The page ``init`` writes under model ``m``.

    Parameters
    ----------
    systems : int, default 1
        The group's systems.
    grouped : bool, default False
        A member of a group (INV_BATCH = 1 / (32 systems)).
    m : Model, default EXACT
        The model.

    Returns
    -------
    bytes
        The 4096-byte page.

    Examples
    --------
    >>> from meshnb.conformance.faults import init_page
    >>> from meshnb.testing import reference
    >>> init_page() == reference.init_page()
    True
    """
    ops = Ops(m.rules)
    page = bytearray(4096)
    xw, yw = samples(m)
    page[OFF_X : OFF_X + 4 * SAMPLES] = xw.astype("<u4").tobytes()
    page[OFF_Y : OFF_Y + 4 * SAMPLES] = yw.astype("<u4").tobytes()
    inv = int(ops.div(0x3F800000, ops.from_u32(WARP * (systems if grouped else 1))))
    struct.pack_into("<I", page, OFF_LR, 0x3F000000)
    struct.pack_into("<I", page, OFF_SPT, 64)
    struct.pack_into("<I", page, OFF_INV, inv)
    return bytes(page)


# =============================================================================================
# A step (SPEC sections 5 and 6), vectorised over a leading batch axis
# =============================================================================================


def lane_samples(offs: np.ndarray) -> np.ndarray:
    """Sample indices (B, 32) of the batch offsets (B,).

    Parameters
    ----------
    offs : numpy.ndarray
        Batch offsets (B,).

    Returns
    -------
    numpy.ndarray
        int64 ``(B, 32)``: lane ``l`` of offset ``off`` reads sample ``off mod 8 + 8 l``.

    Examples
    --------
    >>> import numpy as np
    >>> from meshnb.conformance.faults import lane_samples
    >>> lane_samples(np.array([0, 9]))[:, :3].tolist()
    [[0, 8, 16], [1, 9, 17]]
    """
    return (np.asarray(offs, dtype=np.uint64) % BATCHES).astype(np.int64)[:, None] + BATCHES * LANES[None, :]


def lanes(ops: Ops, m: Model, p: np.ndarray, x: np.ndarray, y: np.ndarray) -> dict[str, np.ndarray]:
    """Per-lane values of a step: p (B, 4) words, x and y (B, 32) -> x2, x3, pred, e, v (B, 5, 32).

    Parameters
    ----------
    ops : Ops
        The arithmetic (the model's rules).
    m : Model
        The model.
    p : numpy.ndarray
        Params words ``(B, 4)``.
    x, y : numpy.ndarray
        The lanes' sample words ``(B, 32)``.

    Returns
    -------
    dict of str to numpy.ndarray
        ``x``, ``y``, ``x2``, ``x3``, ``pred``, ``e`` ``(B, 32)`` and the terms ``v`` ``(B, 5, 32)``.

    Examples
    --------
    >>> import numpy as np
    >>> from meshnb.conformance.faults import EXACT, lanes, samples
    >>> from meshnb.conformance.fpu import Ops
    >>> xs, ys = samples()
    >>> values = lanes(Ops(), EXACT, np.zeros((1, 4), dtype=np.uint32), xs[None, :32], ys[None, :32])
    >>> sorted(values), values["v"].shape
    (['e', 'pred', 'v', 'x', 'x2', 'x3', 'y'], (1, 5, 32))
    """
    a, b, c, d = (p[:, j : j + 1] for j in range(4))
    x2 = ops.mul(x, x)
    x3 = ops.mul(x2, x)
    if m.fma_horner:
        pred = ops.fma(ops.fma(ops.fma(d, x, c), x, b), x, a)
    else:
        pred = ops.add(ops.mul(ops.add(ops.mul(ops.add(ops.mul(d, x), c), x), b), x), a)
    e = ops.sub(pred, y)
    v = np.stack([e, ops.mul(e, x), ops.mul(e, x2), ops.mul(e, x3), ops.mul(e, e)], axis=1)
    return {"x": x, "y": y, "x2": x2, "x3": x3, "pred": pred, "e": e, "v": v}


def lane_sum(ops: Ops, m: Model, v: np.ndarray) -> np.ndarray:
    """The sums (B, 5) of the lanes' terms v (B, 5, 32).

    Parameters
    ----------
    ops : Ops
        The arithmetic.
    m : Model
        The model (its ``lane_sum``).
    v : numpy.ndarray
        The terms' words ``(B, 5, 32)``.

    Returns
    -------
    numpy.ndarray
        uint32 ``(B, 5)``.

    Examples
    --------
    >>> import numpy as np
    >>> from meshnb.conformance.faults import EXACT, lane_sum
    >>> from meshnb.conformance.fpu import Ops
    >>> ones = np.full((1, 5, 32), 0x3F800000, dtype=np.uint32)
    >>> hex(lane_sum(Ops(), EXACT, ones)[0, 0])  # 32.0
    '0x42000000'
    """
    if m.lane_sum == "sequential":
        acc = v[..., 0]
        for lane in range(1, WARP):
            acc = ops.add(acc, v[..., lane])
        return acc
    for o in BUTTERFLY:  # every lane l: v[l] = add(v[l], v[l xor o]), from the previous round
        v = ops.add(v, v[..., LANES ^ o])
    return v[..., 0]


def step_sums(ops: Ops, m: Model, p: np.ndarray, xs: np.ndarray, ys: np.ndarray, offs: np.ndarray) -> np.ndarray:
    """Own sums (B, 5) of B systems: p (B, 4) words, xs/ys (B, 256) words, offs (B,) batch offsets.

    Parameters
    ----------
    ops : Ops
        The arithmetic.
    m : Model
        The model.
    p : numpy.ndarray
        Params words ``(B, 4)``.
    xs, ys : numpy.ndarray
        Sample words ``(B, 256)``.
    offs : numpy.ndarray
        Batch offsets ``(B,)``.

    Returns
    -------
    numpy.ndarray
        uint32 ``(B, 5)``.

    Examples
    --------
    >>> import numpy as np
    >>> from meshnb.conformance.faults import EXACT, samples, step_sums
    >>> from meshnb.conformance.fpu import Ops
    >>> xs, ys = samples()
    >>> sums = step_sums(Ops(), EXACT, np.zeros((1, 4), dtype=np.uint32), xs[None], ys[None], np.array([0]))
    >>> [hex(w) for w in sums[0].tolist()]  # step 0 of a fresh system, as the spec's vectors say
    ['0xbc30adce', '0xc121fb5c', '0xbc2b185b', '0xc07d262c', '0x417f022c']
    """
    idx = lane_samples(offs)
    rows = np.arange(len(p))[:, None]
    return lane_sums(ops, m, p, xs[rows, idx], ys[rows, idx])


def lane_sums(ops: Ops, m: Model, p: np.ndarray, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Own sums (B, 5) of the lanes' samples x, y (B, 32): :func:`lanes` and :func:`lane_sum`
    (a single-op model's step from :mod:`~meshnb.conformance.mutants`).

    Parameters
    ----------
    ops : Ops
        The arithmetic.
    m : Model
        The model.
    p : numpy.ndarray
        Params words ``(B, 4)``.
    x, y : numpy.ndarray
        The lanes' sample words ``(B, 32)``.

    Returns
    -------
    numpy.ndarray
        uint32 ``(B, 5)``.

    Examples
    --------
    >>> import numpy as np
    >>> from meshnb.conformance.faults import EXACT, lane_sums, samples, single_op
    >>> from meshnb.conformance.fpu import Ops
    >>> xs, ys = samples()
    >>> p = np.zeros((1, 4), dtype=np.uint32)
    >>> [hex(w) for w in lane_sums(Ops(), single_op("e", "swapped"), p, xs[None, ::8], ys[None, ::8])[0].tolist()]
    ['0x3c30adce', '0x4121fb5c', '0x3c2b185b', '0x407d262c', '0x417f022c']
    """
    mut = m.mutant
    if mut is not None:
        return mutants.step_sums(mut, p, x, y)
    return lane_sum(ops, m, lanes(ops, m, p, x, y)["v"])


def fold(ops: Ops, m: Model, own: np.ndarray) -> np.ndarray:
    """The fold (5,) of the members' published sums (N, 5) (slots are ftz_bits words).

    Parameters
    ----------
    ops : Ops
        The arithmetic.
    m : Model
        The model (its ``fold`` order).
    own : numpy.ndarray
        Every member's sums ``(N, 5)``.

    Returns
    -------
    numpy.ndarray
        uint32 ``(5,)``.

    Examples
    --------
    >>> import numpy as np
    >>> from meshnb.conformance.faults import EXACT, fold
    >>> from meshnb.conformance.fpu import Ops
    >>> own = np.array([[0x3F800000] * 5, [0x40000000] * 5], dtype=np.uint32)  # 1.0 and 2.0
    >>> hex(fold(Ops(), EXACT, own)[0])
    '0x40400000'
    """
    if m.op:
        return mutants.fold(m.mutant, own)
    slots = ops.read(own)
    order = list(range(len(slots) - 1, -1, -1) if m.fold == "reverse" else range(len(slots)))
    acc = ops.read(slots[order[0]])
    for k in order[1:]:
        acc = ops.add(acc, ops.read(slots[k]))
    return acc


def apply(ops: Ops, m: Model, p: np.ndarray, s: np.ndarray, lr: np.ndarray, inv: np.ndarray) -> np.ndarray:
    """New params (B, 4): p (B, 4), s (B, 5) applied sums, lr and inv (B, 1) words.

    Parameters
    ----------
    ops : Ops
        The arithmetic.
    m : Model
        The model.
    p : numpy.ndarray
        Params words ``(B, 4)``.
    s : numpy.ndarray
        The applied sums ``(B, 5)``.
    lr, inv : numpy.ndarray
        LR and INV_BATCH words ``(B, 1)``.

    Returns
    -------
    numpy.ndarray
        uint32 ``(B, 4)``.

    Examples
    --------
    >>> import numpy as np
    >>> from meshnb.conformance.faults import EXACT, apply
    >>> from meshnb.conformance.fpu import Ops
    >>> p, s = np.zeros((1, 4), dtype=np.uint32), np.full((1, 5), 0x3F800000, dtype=np.uint32)
    >>> lr, inv = np.array([[0x3F000000]], dtype=np.uint32), np.array([[0x3D000000]], dtype=np.uint32)
    >>> hex(apply(Ops(), EXACT, p, s, lr, inv)[0, 0])  # 0 - 0.5 * (1 * 1/32)
    '0xbc800000'
    """
    if m.op:
        return mutants.apply(m.mutant, p, s, lr, inv)
    d = m.rules.daz
    g = ops.mul(s[:, :4], inv, daz=(d, False) if m.raw_lr_inv else None)
    if m.fma_apply:
        return ops.fma(lr ^ SIGN, g, p)
    return ops.sub(p, ops.mul(lr, g, daz=(False, d) if m.raw_lr_inv else None))


def loss(ops: Ops, m: Model, s: np.ndarray, inv: np.ndarray) -> np.ndarray:
    """The step's loss words (B,).

    Parameters
    ----------
    ops : Ops
        The arithmetic.
    m : Model
        The model.
    s : numpy.ndarray
        The applied sums ``(B, 5)``.
    inv : numpy.ndarray
        INV_BATCH words ``(B, 1)``.

    Returns
    -------
    numpy.ndarray
        uint32 ``(B,)``.

    Examples
    --------
    >>> import numpy as np
    >>> from meshnb.conformance.faults import EXACT, loss
    >>> from meshnb.conformance.fpu import Ops
    >>> s = np.full((1, 5), 0x40000000, dtype=np.uint32)  # e*e summed: 2.0
    >>> hex(loss(Ops(), EXACT, s, np.array([[0x3F000000]], dtype=np.uint32))[0])  # 2.0 * 0.5
    '0x3f800000'
    """
    if m.op:
        return mutants.loss(m.mutant, s, inv)
    return ops.mul(s[:, 4:5], inv, daz=(m.rules.daz, False) if m.raw_lr_inv else None)[:, 0]


def read_word(ops: Ops, m: Model, w: object) -> np.ndarray:
    """How the model's TASK reads LR or INV_BATCH from the page.

    Parameters
    ----------
    ops : Ops
        The arithmetic.
    m : Model
        The model (its ``raw_lr_inv``).
    w : array_like
        The word(s).

    Returns
    -------
    numpy.ndarray
        uint32.

    Examples
    --------
    >>> from meshnb.conformance.faults import EXACT, model, read_word
    >>> from meshnb.conformance.fpu import Ops
    >>> int(read_word(Ops(), EXACT, 1)), int(read_word(Ops(), model("raw-lr-inv"), 1))  # a subnormal LR
    (0, 1)
    """
    return np.asarray(w, dtype=np.uint32) if m.raw_lr_inv else ops.read(w)


# =============================================================================================
# The host's run (SPEC sections 8-10)
# =============================================================================================


@dataclass(frozen=True)
class Run:
    """What an executor produced: one final page per system and the trace (steps, 5) of system 0.

    Parameters
    ----------
    pages : list of bytes
        Every system's final page.
    trace : numpy.ndarray
        uint32 ``(steps, 5)``; ``(steps, systems, 5)`` for independent systems.

    Examples
    --------
    >>> from meshnb.conformance.faults import init_page, run
    >>> result = run([init_page()], 8, grouped=False)
    >>> len(result.pages), result.trace.shape
    (1, (8, 5))
    """

    pages: list[bytes]
    trace: np.ndarray


def words_at(page: bytes, off: int, n: int = 1) -> np.ndarray:
    """``n`` little-endian u32 words of ``page`` from byte ``off`` (a copy, uint32).

    Parameters
    ----------
    page : bytes
        A page.
    off : int
        The first byte.
    n : int, default 1
        The words.

    Returns
    -------
    numpy.ndarray
        uint32 ``(n,)``.

    Examples
    --------
    >>> from meshnb.conformance.faults import init_page, words_at
    >>> [hex(w) for w in words_at(init_page(), 16, 2).tolist()]  # LR, STEPS_PER_TASK
    ['0x3f000000', '0x40']
    """
    return np.frombuffer(page, dtype="<u4", count=n, offset=off).astype(np.uint32)


_u32 = words_at


def run(
    pages: list[bytes],
    steps: int,
    *,
    grouped: bool,
    set_lr: dict[int, int] | None = None,
    m: Model = EXACT,
    from_init: bool = False,
    independent: bool = False,
) -> Run:
    """Runs ``steps`` steps of the cluster of ``len(pages)`` systems as an executor with model ``m``.

    ``set_lr`` maps a count of steps of this run to the word SET_LR writes before that step (at
    ``steps``: after the last).  ``from_init``: the executor runs init itself (its own samples
    and INV_BATCH), keeping the pages' step base, instead of loading the given pages' X, Y and
    header.  STEPS_PER_TASK and timeouts change no bits, so tasks are not modelled.
    ``independent``: the pages are separate single systems without a group run side by side (one
    vectorised run of many cases; ``trace`` is then (steps, systems, 5)).

    Parameters
    ----------
    pages : list of bytes
        The systems' start pages, all at the same step.
    steps : int
        The steps to run.
    grouped : bool
        The pages are the members of one group (their sums folded each step).
    set_lr : dict of int to int, optional
        ``{steps of this run: LR word}``.
    m : Model, default EXACT
        The executor's fault (none by default).
    from_init : bool, default False
        The executor runs init itself, keeping the pages' step base.
    independent : bool, default False
        The pages are separate systems without a group, run side by side.

    Returns
    -------
    Run
        The final pages and the trace.

    Raises
    ------
    ValueError
        For pages at different steps, steps past step 2^64 - 1, or independent grouped systems.

    See Also
    --------
    meshnb.testing.reference.run : the independent oracle's run.

    Examples
    --------
    Without a fault the simulated executor gives meshnb's bits; with FMA contraction, others:

    >>> from meshnb.conformance.faults import init_page, model, run
    >>> from meshnb.testing.reference import digest
    >>> digest(run([init_page()], 64, grouped=False).pages[0])
    'a52f01100995ff64880951b0bdb892f63b6f45abee87acf89c682f116a7a473d'
    >>> digest(run([init_page()], 64, grouped=False, m=model("fma-horner")).pages[0])[:16]
    '5da8ebca145123fa'
    """
    ops = Ops(m.rules)
    set_lr = dict(set_lr or {})
    n = len(pages)
    if from_init:  # the model's own samples and INV_BATCH; the host's STEPS_PER_TASK and step base
        init = init_page(n, grouped, m)
        pages = [
            pg[:OFF_INV] + init[OFF_INV : OFF_INV + 4] + pg[OFF_INV + 4 : OFF_X] + init[OFF_X:OFF_LOSS] + pg[OFF_LOSS:]
            for pg in pages
        ]
    bases = {int(_u32(pg, OFF_STEP_HI)[0]) << 32 | int(_u32(pg, OFF_NEXT)[0]) for pg in pages}
    if len(bases) != 1:
        raise ValueError("the systems are not at the same step")
    base = bases.pop()
    if not isinstance(steps, int) or steps < 0 or base + steps > (1 << 64) - 1:
        raise ValueError(f"steps {steps!r} from step {base}: a run ends at step 2^64 - 1 at the latest (SPEC 8)")
    p = np.stack([ops.read(_u32(pg, OFF_PARAMS, 4)) for pg in pages])
    lr = np.stack([read_word(ops, m, _u32(pg, OFF_LR)) for pg in pages])
    inv = np.stack([read_word(ops, m, _u32(pg, OFF_INV)) for pg in pages])
    xs = np.stack([_u32(pg, OFF_X, SAMPLES) for pg in pages])
    ys = np.stack([_u32(pg, OFF_Y, SAMPLES) for pg in pages])
    loss_ring = np.stack([_u32(pg, OFF_LOSS, RING) for pg in pages])
    lr_word: int | None = None
    if independent and grouped:
        raise ValueError("independent systems have no group")
    trace = np.zeros((steps, n, 5) if independent else (steps, 5), dtype=np.uint32)
    for s in range(steps + 1):
        if s in set_lr:
            lr_word = int(read_word(ops, m, set_lr[s]))
            lr[:] = lr_word
        if s == steps:
            break
        t = base + s
        if independent:
            offs = np.full(n, t & 0xFFFFFFFF, dtype=np.uint64)
        else:
            offs = np.array([(t * n + k) & 0xFFFFFFFF for k in range(n)], dtype=np.uint64)
        own = step_sums(ops, m, p, xs, ys, offs)
        applied = np.broadcast_to(fold(ops, m, own), (n, 5)) if grouped else own
        p = apply(ops, m, p, applied, lr, inv)
        loss_ring[:, t % RING] = loss(ops, m, applied, inv)
        trace[s] = applied if independent else applied[0]
    out = []
    for k, pg in enumerate(pages):
        page = bytearray(pg)
        if steps > 0:
            page[OFF_PARAMS : OFF_PARAMS + 16] = p[k].astype("<u4").tobytes()
            page[OFF_LOSS : OFF_LOSS + 4 * RING] = loss_ring[k].astype("<u4").tobytes()
            struct.pack_into("<I", page, OFF_ERR, 0)
            struct.pack_into("<I", page, OFF_PENDING, 0)  # ROUND stays
            struct.pack_into("<I", page, OFF_NEXT, (base + steps) & 0xFFFFFFFF)
            struct.pack_into("<I", page, OFF_STEP_HI, (base + steps) >> 32)
        if lr_word is not None:
            struct.pack_into("<I", page, OFF_LR, lr_word)
        out.append(bytes(page))
    return Run(out, trace)
