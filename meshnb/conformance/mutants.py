"""The op space: every op of a step's dataflow, the alternative rules each can be computed under,
and a step with one op changed (a *mutant*).

:data:`SPACE` is the table: one :class:`Op` a row (its id, its kind, its operands, where it sits
in the dataflow: ``samples``, ``lanes`` (SPEC 5's per-lane ops), ``butterfly``, ``fold``,
``apply``, ``loss``) and the alternatives (:data:`ALTS`) that apply to it.  :func:`mutations`
lists every (op, alternative) pair; ``faults.single_op(op, alt)`` is that mutant as a fault
:class:`~meshnb.conformance.faults.Model`, which :func:`meshnb.conformance.faults.run` runs as an
executor with that one op changed on every step and ``meshnb check`` replays at the first
differing step to find which op an executor computes otherwise.  The step here is written
apart from :mod:`~meshnb.conformance.faults`' (a small dataflow evaluator over the table), and
the tests check that with no mutant it gives the same bits.

Every alternative is a plausible executor's way: an FPU rule (no flush, flush before rounding,
x86 FTZ, no DAZ, another NaN, another rounding direction), the op fused with its consumer
(an FMA), its result kept in f64 into its consumer, its operands swapped (sub), the product
regrouped, the butterfly in another order, the fold from the last system.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from .fpu import MODE_Z, SIGN, Ops, Rules

WARP = 32
LANES = np.arange(WARP)
BUTTERFLY = (16, 8, 4, 2, 1)


@dataclass(frozen=True)
class Op:
    """One op of the step's dataflow (a row of :data:`SPACE`).

    Parameters
    ----------
    id : str
        Its name in reports (``e*x3``, ``butterfly16``, ``apply.sub``).
    kind : str
        ``add``, ``sub``, ``mul``, ``div``, ``sin`` or ``sum`` (a whole lane sum's order).
    args : tuple of str
        The operands: inputs (``x``, ``y``, ``a`` .. ``d``, ``lr``, ``inv``, ``s``, ``p``) or ops' ids.
    stage : str
        Where in the dataflow: ``samples``, ``lanes``, ``butterfly``, ``fold``, ``apply``, ``loss``.
    label : str
        What it computes, for a report.
    alts : tuple of str
        The alternatives (keys of :data:`ALTS`) it can be computed under.
    into : str, default ""
        Its consumer, named for ``fused`` and ``f64`` ("the butterfly's first add").

    Examples
    --------
    >>> from meshnb.conformance.mutants import BY_ID
    >>> op = BY_ID["e*x3"]
    >>> op.kind, op.args, op.stage, "fused" in op.alts, op.into
    ('mul', ('e', 'x3'), 'lanes', True, "the butterfly's first add")
    """

    id: str
    kind: str
    args: tuple[str, ...]
    stage: str
    label: str
    alts: tuple[str, ...]
    into: str = ""


RULES: dict[str, Rules] = {
    "no-flush": Rules("none", daz=False),
    "ftz-before": Rules("before"),
    "x86-ftz": Rules("after"),
    "no-daz": Rules(daz=False),
    "nan-x86": Rules(nan="x86"),
    "nan-arm": Rules(nan="arm"),
}
DIRECTIONS = {"round-zero": "zero", "round-up": "up", "round-down": "down"}
PLUS_ZERO = "flush-to-plus-zero"  # a tiny result written +0 whatever its sign

# Every alternative, with the words a report says it in ("{into}": the op's consumer)
ALTS: dict[str, str] = {
    "no-flush": "without the flush (gradual underflow, subnormal inputs read)",
    "ftz-before": "flushed when tiny before rounding",
    "x86-ftz": "flushed as x86 FTZ does (tiny after rounding at unbounded exponent)",
    "no-daz": "with subnormal inputs read as they are (no DAZ)",
    "flush-to-plus-zero": "flushed to +0 whatever its sign",
    "nan-x86": "with x86's NaN (first NaN operand quieted, else 0xFFC00000)",
    "nan-arm": "with ARM's default NaN 0x7FC00000",
    "round-zero": "rounded toward zero",
    "round-up": "rounded toward +inf",
    "round-down": "rounded toward -inf",
    "fused": "fused into {into} (one rounding, an FMA)",
    "f64": "computed in f64 into {into} (rounded to f32 there)",
    "swapped": "with its operands swapped",
    "regrouped": "regrouped",
    "xor-ascending": "in xor order 1, 2, 4, 8, 16",
    "sequential": "as a sequential sum of the 32 lanes",
    "reverse": "in reverse system order (the last system first)",
}
_FPU = (*RULES, PLUS_ZERO, *DIRECTIONS)
_FPU_RN = (*RULES, PLUS_ZERO)  # where no directed rounding is modelled (div)


def _op(
    id: str, kind: str, args: tuple[str, ...], stage: str, label: str, extra: tuple[str, ...] = (), into: str = ""
) -> Op:
    base = _FPU if kind in ("add", "sub", "mul") else _FPU_RN
    return Op(id, kind, args, stage, label, base + extra, into)


_BFLY = "the butterfly's first add"
SPACE: tuple[Op, ...] = (
    _op("h", "div", ("2", "255"), "samples", "the samples' step h = 2 / 255"),
    _op("i*h", "mul", ("i", "h"), "samples", "i * h (x's sample)", ("fused", "f64"), "-1 + i*h"),
    _op("x = -1 + i*h", "add", ("-1", "i*h"), "samples", "x = -1 + i*h"),
    _op("x2", "mul", ("x", "x"), "lanes", "x2 = x*x", ("f64",), "x3 and e*x2"),
    _op("x3", "mul", ("x2", "x"), "lanes", "x3 = x2*x", ("f64",), "e*x3"),
    _op("d*x", "mul", ("d", "x"), "lanes", "Horner's d*x", ("fused", "f64"), "Horner's + c"),
    _op("+c", "add", ("d*x", "c"), "lanes", "Horner's (d*x) + c", ("f64",), "Horner's second multiply"),
    _op("*x", "mul", ("+c", "x"), "lanes", "Horner's (..)*x (second multiply)", ("fused", "f64"), "Horner's + b"),
    _op("+b", "add", ("*x", "b"), "lanes", "Horner's (..) + b", ("f64",), "Horner's third multiply"),
    _op("*x'", "mul", ("+b", "x"), "lanes", "Horner's (..)*x (third multiply)", ("fused", "f64"), "Horner's + a"),
    _op("pred", "add", ("*x'", "a"), "lanes", "pred = (..) + a", ("f64",), "e = pred - y"),
    _op("e", "sub", ("pred", "y"), "lanes", "e = pred - y", ("swapped", "f64"), "the products and the butterfly"),
    _op("e*x", "mul", ("e", "x"), "lanes", "e*x", ("fused", "f64"), _BFLY),
    _op("e*x2", "mul", ("e", "x2"), "lanes", "e*x2", ("fused", "f64", "regrouped"), _BFLY),
    _op("e*x3", "mul", ("e", "x3"), "lanes", "e*x3", ("fused", "f64", "regrouped"), _BFLY),
    _op("e*e", "mul", ("e", "e"), "lanes", "e*e", ("fused", "f64"), _BFLY),
    *(_op(f"butterfly{o}", "add", (), "butterfly", f"the butterfly's add at xor {o}") for o in BUTTERFLY),
    Op("butterfly", "sum", (), "butterfly", "the lane sum's order", ("xor-ascending", "sequential")),
    _op("fold", "add", ("slots",), "fold", "the cluster's fold of the published sums", ("reverse",)),
    _op("s*inv", "mul", ("s", "inv"), "apply", "apply's g = s*inv", ("f64",), "apply's lr*g"),
    _op("lr*g", "mul", ("lr", "s*inv"), "apply", "apply's lr*g", ("fused", "f64", "regrouped"), "apply's p - lr*g"),
    _op("p - lr*g", "sub", ("p", "lr*g"), "apply", "apply's p - lr*g", ("swapped",)),
    _op("loss", "mul", ("s", "inv"), "loss", "the loss s[4]*inv"),
)
BY_ID: dict[str, Op] = {op.id: op for op in SPACE}
STAGES = ("samples", "lanes", "butterfly", "fold", "apply", "loss")
REGROUPED = {"e*x2": "(e*x)*x", "e*x3": "(e*x2)*x", "lr*g": "(lr*s)*inv"}
SWAPPED = {"e": "y - pred", "p - lr*g": "lr*g - p"}


@dataclass(frozen=True)
class Mutant:
    """One op computed under one alternative, every other op in float mode Z.

    Parameters
    ----------
    op : str
        An op's id (:data:`BY_ID`).
    alt : str
        One of its alternatives.

    Raises
    ------
    ValueError
        For an unknown op, or an alternative the op does not have.

    Examples
    --------
    >>> from meshnb.conformance.mutants import Mutant
    >>> Mutant("e*x3", "fused").text()
    "`e*x3` fused into the butterfly's first add (one rounding, an FMA)"
    >>> Mutant("e", "swapped").text()
    '`e = pred - y` with its operands swapped (y - pred)'
    >>> Mutant("e", "fused")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: op 'e' has no alternative 'fused' (it has: no-flush, ftz-before, ..., swapped, f64)
    """

    op: str
    alt: str

    def __post_init__(self) -> None:
        if self.op not in BY_ID:
            raise ValueError(f"unknown op {self.op!r}; known: {', '.join(BY_ID)}")
        if self.alt not in BY_ID[self.op].alts:
            raise ValueError(
                f"op {self.op!r} has no alternative {self.alt!r} (it has: {', '.join(BY_ID[self.op].alts)})"
            )

    @property
    def name(self) -> str:
        """``op:alt``, the mutant's name (a fault model's)."""
        return f"{self.op}:{self.alt}"

    def text(self) -> str:
        """The change in words, as a report says it.

        Examples
        --------
        >>> from meshnb.conformance.mutants import Mutant
        >>> print(Mutant("butterfly4", "x86-ftz").text())
        `butterfly4` (the butterfly's add at xor 4) flushed as x86 FTZ does (tiny after rounding at unbounded exponent)
        """
        op = BY_ID[self.op]
        how = ALTS[self.alt].format(into=op.into)
        if self.alt == "regrouped":
            how += f" as {REGROUPED[self.op]}"
        if self.alt == "swapped":
            how += f" ({SWAPPED[self.op]})"
        name = f"`{op.label}`" if op.label == op.id or op.label.startswith(op.id + " = ") else f"`{op.id}` ({op.label})"
        return f"{name} {how}"


def mutations(stages: tuple[str, ...] = STAGES) -> list[Mutant]:
    """Every (op, alternative) pair of the ops in ``stages``, in the table's order.

    Parameters
    ----------
    stages : tuple of str, default all
        The stages (:data:`STAGES`).

    Returns
    -------
    list of Mutant
        The mutants.

    Examples
    --------
    >>> from meshnb.conformance.mutants import mutations
    >>> len(mutations()) > 200, mutations(("loss",))[:2]
    (True, [Mutant(op='loss', alt='no-flush'), Mutant(op='loss', alt='ftz-before')])
    """
    return [Mutant(op.id, alt) for op in SPACE if op.stage in stages for alt in op.alts]


# =============================================================================================
# The arithmetic of an alternative
# =============================================================================================


class Directed(Ops):
    """add, sub, mul, fma rounded toward zero, +inf or -inf (mode Z's flush and NaN after).

    Parameters
    ----------
    direction : {"zero", "up", "down"}
        The rounding direction.

    Examples
    --------
    >>> from meshnb.conformance.mutants import Directed
    >>> one, tiny = 0x3F800000, 0x33800000  # 1.0 and 2^-24 (half an ulp of 1.0)
    >>> hex(Directed("up").add(one, tiny)), hex(Directed("zero").add(one, tiny))
    ('0x3f800001', '0x3f800000')
    >>> hex(Directed("down").sub(one, 0x2F800000))  # 1 - 2^-32
    '0x3f7fffff'
    """

    def __init__(self, direction: str) -> None:
        super().__init__(MODE_Z)
        self.direction = direction

    def _directed(self, r: np.ndarray, err: np.ndarray) -> np.ndarray:
        """The exact value ``r + err`` (``r`` its f64 rounding) rounded to f32 in the direction."""
        with np.errstate(all="ignore"):
            f = r.astype(np.float32)
            rest = (r - f.astype(np.float64)) + err  # the exact value minus f, its sign right
            if self.direction == "up":
                step = rest > 0
                to = np.float32(np.inf)
            elif self.direction == "down":
                step = rest < 0
                to = np.float32(-np.inf)
            else:  # toward zero: where f is further from zero than the exact value
                step = ((f > 0) & (rest < 0)) | ((f < 0) & (rest > 0))
                to = np.float32(0.0)
            moved = np.nextafter(f, np.broadcast_to(to, f.shape).astype(np.float32))
            return np.where(step, moved, f).astype(np.float64)

    def _sum(self, fa: np.ndarray, fb: np.ndarray) -> np.ndarray:
        with np.errstate(all="ignore"):
            a, b = fa.astype(np.float64), fb.astype(np.float64)
            s = a + b
            bb = s - a
            err = (a - (s - bb)) + (b - bb)  # TwoSum: s + err == a + b exactly
            err = np.where(np.isfinite(s), err, 0.0)
            return self.round64(self._directed(s, err))

    def add(self, a: object, b: object, daz: tuple[bool, bool] | None = None) -> np.ndarray:
        """``a + b`` rounded in the direction (``daz`` as for :meth:`Ops.add`)."""
        fa, fb = self._two(a, b, daz)
        return self._sum(fa, fb)

    def sub(self, a: object, b: object, daz: tuple[bool, bool] | None = None) -> np.ndarray:
        """``a - b`` rounded in the direction (``daz`` as for :meth:`Ops.add`)."""
        fa, fb = self._two(a, b, daz)
        return self._sum(fa, -fb)

    def mul(self, a: object, b: object, daz: tuple[bool, bool] | None = None) -> np.ndarray:
        """``a * b`` rounded in the direction (``daz`` as for :meth:`Ops.add`)."""
        fa, fb = self._two(a, b, daz)
        with np.errstate(all="ignore"):
            r = fa.astype(np.float64) * fb  # exact
            return self.round64(self._directed(r, np.zeros_like(r)))


class PlusZero(Ops):
    """Mode Z, but a tiny nonzero result is flushed to +0 whatever its sign (a flush written as
    ``r = 0.0f``).

    Examples
    --------
    >>> from meshnb.conformance.fpu import Ops
    >>> from meshnb.conformance.mutants import PlusZero
    >>> tiny = 0x80800000  # -2^-126, times 0.5: a negative subnormal
    >>> hex(Ops().mul(tiny, 0x3F000000)), hex(PlusZero().mul(tiny, 0x3F000000))
    ('0x80000000', '0x0')
    >>> hex(PlusZero().mul(0x80000000, 0x3F800000))  # -0 * 1 is -0 exactly: no flush
    '0x80000000'
    """

    def _out(self, r64: np.ndarray, tiny_exact: Any, hw: Any) -> np.ndarray:
        u = super()._out(r64, tiny_exact, hw)
        with np.errstate(all="ignore"):
            return np.where((u == SIGN) & (r64 != 0), np.uint32(0), u).astype(np.uint32)


def arith(alt: str | None) -> Ops:
    """The arithmetic of an FPU alternative (mode Z's for any other or None).

    Parameters
    ----------
    alt : str or None
        An alternative's key.

    Returns
    -------
    Ops
        Its ops.

    Examples
    --------
    >>> from meshnb.conformance.mutants import arith
    >>> arith("x86-ftz").rules.underflow, arith("fused").rules.underflow, type(arith("round-up")).__name__
    ('after', 'z', 'Directed')
    """
    if alt in RULES:
        return Ops(RULES[alt])
    if alt in DIRECTIONS:
        return Directed(DIRECTIONS[alt])
    if alt == PLUS_ZERO:
        return PlusZero()
    return _Z


_Z = Ops()


@dataclass(frozen=True)
class Fused:
    """A product left unrounded for its consumer to fuse (an FMA): ``a * b``, and its rounded
    value, which other lanes see through a shuffle.

    Examples
    --------
    >>> from meshnb.conformance.mutants import Fused, Mutant, node
    >>> f = node(Mutant("e*x", "fused"), "e*x", 0x3F800800, 0x3F800800)  # (1 + 2^-12)^2, unrounded
    >>> isinstance(f, Fused), hex(f.rounded)  # rounded: 1 + 2^-11 (the 2^-24 lost)
    (True, '0x3f801000')
    >>> hex(node(None, "e", f, 0x3F800000)), hex(node(None, "e", f.rounded, 0x3F800000))  # - 1, fused or not
    ('0x3a000400', '0x3a000000')
    """

    a: np.ndarray
    b: np.ndarray
    rounded: np.ndarray


Value = Any  # uint32 words, float64 values (an op kept in f64) or a Fused product


def _f64(v: Value) -> np.ndarray:
    if isinstance(v, Fused):
        return _f64(v.a) * _f64(v.b)
    v = np.asarray(v)
    if v.dtype == np.float64:
        return v
    u = v.astype(np.uint32)
    return np.where((u & 0x7F800000) == 0, u & SIGN, u).astype(np.uint32).view(np.float32).astype(np.float64)


def _words(v: Value) -> np.ndarray:
    """A value as the f32 words an op that reads it rounded sees."""
    if isinstance(v, Fused):
        return v.rounded
    v = np.asarray(v)
    return _Z.round64(v) if v.dtype == np.float64 else v


def _binary(ops: Ops, kind: str, a: Value, b: Value) -> np.ndarray:
    """``a kind b`` rounded to f32: fused where an operand is an unrounded product, in f64 where
    one is kept in f64, else the op of ``ops``."""
    if isinstance(b, Fused) and kind == "add":
        a, b = b, a
    if isinstance(a, Fused) and kind in ("add", "sub"):
        other = _words(b)
        return _Z.fma(a.a, a.b, other ^ SIGN if kind == "sub" else other)
    if isinstance(b, Fused) and kind == "sub":
        return _Z.fma(b.a ^ SIGN, b.b, _words(a))
    wide = any(np.asarray(v).dtype == np.float64 for v in (a, b) if not isinstance(v, Fused))
    if wide:
        fa, fb = _f64(a), _f64(b)
        with np.errstate(all="ignore"):
            r = fa + fb if kind == "add" else fa - fb if kind == "sub" else fa * fb if kind == "mul" else fa / fb
        return _Z.round64(r)
    return np.asarray(getattr(ops, kind)(_words(a), _words(b)), dtype=np.uint32)


def node(mutant: Mutant | None, op_id: str, a: Value, b: Value, regrouped: Any = None) -> Value:
    """Op ``op_id`` of the table on its operands, under ``mutant`` if it is that op's.

    Parameters
    ----------
    mutant : Mutant or None
        The one changed op (None: mode Z).
    op_id : str
        The op.
    a, b : Value
        Its operands (words, f64 values or a fused product).
    regrouped : callable, optional
        The op's regrouped form (no arguments), for the ``regrouped`` alternative.

    Returns
    -------
    Value
        Words; f64 values for ``f64``; a :class:`Fused` for ``fused`` (its consumer rounds).

    Examples
    --------
    >>> from meshnb.conformance.mutants import Mutant, node
    >>> hex(node(None, "e", 0x3F800000, 0x40000000)), hex(node(Mutant("e", "swapped"), "e", 0x3F800000, 0x40000000))
    ('0xbf800000', '0x3f800000')
    """
    op = BY_ID[op_id]
    alt = mutant.alt if mutant is not None and mutant.op == op_id else None
    if alt == "swapped":
        a, b = b, a
    elif alt == "f64":
        fa, fb = _f64(a), _f64(b)
        with np.errstate(all="ignore"):
            return (
                fa * fb
                if op.kind == "mul"
                else fa + fb
                if op.kind == "add"
                else fa - fb
                if op.kind == "sub"
                else fa / fb
            )
    elif alt == "fused":
        wa, wb = _words(a), _words(b)
        return Fused(np.asarray(wa, dtype=np.uint32), np.asarray(wb, dtype=np.uint32), _Z.mul(wa, wb))
    elif alt == "regrouped" and regrouped is not None:
        return regrouped()
    return _binary(arith(alt), op.kind, a, b)


# =============================================================================================
# The step (SPEC 5 and 6), vectorised over a leading axis of B systems
# =============================================================================================

TERMS = ("e", "e*x", "e*x2", "e*x3", "e*e")


def lanes(mutant: Mutant | None, p: np.ndarray, x: np.ndarray, y: np.ndarray) -> dict[str, Value]:
    """Every per-lane op's value: p ``(B, 4)`` words, x and y ``(B, 32)``.

    Parameters
    ----------
    mutant : Mutant or None
        The changed op.
    p : numpy.ndarray
        Params words ``(B, 4)``.
    x, y : numpy.ndarray
        The lanes' sample words ``(B, 32)``.

    Returns
    -------
    dict of str to Value
        Each op's value by id (and ``x``, ``y``), the five terms under :data:`TERMS`' ids.

    Examples
    --------
    >>> import numpy as np
    >>> from meshnb.conformance import faults
    >>> from meshnb.conformance.fpu import Ops
    >>> from meshnb.conformance.mutants import lanes
    >>> xs, ys = faults.samples()
    >>> p = np.array([[0x3E000000, 0xBF000000, 0x3D000000, 0x3F000000]], dtype=np.uint32)
    >>> mine = lanes(None, p, xs[None, :32], ys[None, :32])
    >>> theirs = faults.lanes(Ops(), faults.EXACT, p, xs[None, :32], ys[None, :32])  # faults' step, written apart
    >>> bool((mine["pred"] == theirs["pred"]).all()), bool((mine["e*x3"] == theirs["v"][:, 3]).all())
    (True, True)
    """
    a, b, c, d = (p[:, j : j + 1] for j in range(4))
    m = mutant
    v: dict[str, Value] = {"x": x, "y": y}
    v["x2"] = node(m, "x2", x, x)
    v["x3"] = node(m, "x3", v["x2"], x)
    v["d*x"] = node(m, "d*x", d, x)
    v["+c"] = node(m, "+c", v["d*x"], c)
    v["*x"] = node(m, "*x", v["+c"], x)
    v["+b"] = node(m, "+b", v["*x"], b)
    v["*x'"] = node(m, "*x'", v["+b"], x)
    v["pred"] = node(m, "pred", v["*x'"], a)
    v["e"] = node(m, "e", v["pred"], y)
    e = v["e"]
    v["e*x"] = node(m, "e*x", e, x)
    v["e*x2"] = node(m, "e*x2", e, v["x2"], lambda: _Z.mul(_Z.mul(_words(e), x), x))
    v["e*x3"] = node(m, "e*x3", e, v["x3"], lambda: _Z.mul(_Z.mul(_words(e), _words(v["x2"])), x))
    v["e*e"] = node(m, "e*e", e, e)
    return v


def _level(mutant: Mutant | None, o: int, terms: list[Value]) -> list[Value]:
    """One butterfly level: every lane ``l`` of every term: ``add(v[l], v[l xor o])``."""
    ops = arith(mutant.alt if mutant is not None and mutant.op == f"butterfly{o}" else None)
    out: list[Value] = []
    for t in terms:
        if isinstance(t, Fused):  # own product unrounded, the partner's rounded (it came through a shuffle)
            out.append(_Z.fma(t.a, t.b, t.rounded[..., LANES ^ o]))
        elif np.asarray(t).dtype == np.float64:  # every lane kept it in f64, shuffled as f64
            with np.errstate(all="ignore"):
                out.append(_Z.round64(t + t[..., LANES ^ o]))
        else:
            out.append(ops.add(t, t[..., LANES ^ o]))
    return out


def lane_sum(mutant: Mutant | None, terms: list[Value]) -> np.ndarray:
    """The five sums ``(B, 5)`` of the five terms (each ``(B, 32)``).

    Parameters
    ----------
    mutant : Mutant or None
        The changed op.
    terms : list of Value
        The terms e, e*x, e*x2, e*x3, e*e.

    Returns
    -------
    numpy.ndarray
        uint32 ``(B, 5)``.

    Examples
    --------
    >>> import numpy as np
    >>> from meshnb.conformance.mutants import Mutant, lane_sum
    >>> t = [np.full((1, 32), 0x3F800000, dtype=np.uint32)] * 5
    >>> hex(lane_sum(None, t)[0, 0]), hex(lane_sum(Mutant("butterfly", "sequential"), t)[0, 0])
    ('0x42000000', '0x42000000')
    """
    order = mutant.alt if mutant is not None and mutant.op == "butterfly" else None
    if order == "sequential":
        ws = [_words(t) for t in terms]
        acc = [w[..., 0] for w in ws]
        for lane in range(1, WARP):
            acc = [_Z.add(s, w[..., lane]) for s, w in zip(acc, ws)]
        return np.stack(acc, axis=-1).astype(np.uint32)
    levels = BUTTERFLY[::-1] if order == "xor-ascending" else BUTTERFLY
    vals = terms
    for o in levels:
        vals = _level(mutant, o, vals)
    return np.stack([np.asarray(t)[..., 0] for t in vals], axis=-1).astype(np.uint32)


def level_one(mutant: Mutant | None, terms: list[Value]) -> np.ndarray:
    """The butterfly's first level ``(B, 5, 32)`` (what a fused or f64 product changes first).

    Parameters
    ----------
    mutant : Mutant or None
        The changed op.
    terms : list of Value
        The five terms.

    Returns
    -------
    numpy.ndarray
        uint32 ``(B, 5, 32)``.

    Examples
    --------
    >>> import numpy as np
    >>> from meshnb.conformance.mutants import level_one
    >>> level_one(None, [np.full((1, 32), 0x3F800000, dtype=np.uint32)] * 5).shape
    (1, 5, 32)
    """
    order = mutant.alt if mutant is not None and mutant.op == "butterfly" else None
    first = 1 if order == "xor-ascending" else BUTTERFLY[0]
    return np.stack([np.asarray(_words(t)) for t in _level(mutant, first, terms)], axis=1).astype(np.uint32)


def step_sums(mutant: Mutant | None, p: np.ndarray, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Own sums ``(B, 5)``: p ``(B, 4)``, the lanes' samples x and y ``(B, 32)``.

    Parameters
    ----------
    mutant : Mutant or None
        The changed op.
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
    >>> from meshnb.conformance import faults
    >>> from meshnb.conformance.mutants import step_sums
    >>> xs, ys = faults.samples()
    >>> [hex(w) for w in step_sums(None, np.zeros((1, 4), dtype=np.uint32), xs[None, 0::8], ys[None, 0::8])[0].tolist()]
    ['0xbc30adce', '0xc121fb5c', '0xbc2b185b', '0xc07d262c', '0x417f022c']
    """
    v = lanes(mutant, p, x, y)
    return lane_sum(mutant, [v[t] for t in TERMS])


def fold(mutant: Mutant | None, own: np.ndarray) -> np.ndarray:
    """The fold of the members' published sums ``(..., N, 5)`` -> ``(..., 5)``.

    Parameters
    ----------
    mutant : Mutant or None
        The changed op.
    own : numpy.ndarray
        Every member's sums, systems on the second axis from the end.

    Returns
    -------
    numpy.ndarray
        uint32 ``(..., 5)``.

    Examples
    --------
    >>> import numpy as np
    >>> from meshnb.conformance.mutants import fold
    >>> hex(fold(None, np.array([[0x3F800000] * 5, [0x40000000] * 5], dtype=np.uint32))[0])
    '0x40400000'
    """
    alt = mutant.alt if mutant is not None and mutant.op == "fold" else None
    ops = arith(alt)
    slots = _Z.read(own)
    n = slots.shape[-2]
    order = list(range(n - 1, -1, -1)) if alt == "reverse" else list(range(n))
    acc = slots[..., order[0], :]
    for k in order[1:]:
        acc = ops.add(acc, slots[..., k, :])
    return np.asarray(acc, dtype=np.uint32)


def apply(mutant: Mutant | None, p: np.ndarray, s: np.ndarray, lr: np.ndarray, inv: np.ndarray) -> np.ndarray:
    """New params ``(B, 4)``: p ``(B, 4)``, s ``(B, 5)``, lr and inv ``(B, 1)`` words.

    Parameters
    ----------
    mutant : Mutant or None
        The changed op.
    p : numpy.ndarray
        Params words.
    s : numpy.ndarray
        The applied sums.
    lr, inv : numpy.ndarray
        LR and INV_BATCH words.

    Returns
    -------
    numpy.ndarray
        uint32 ``(B, 4)``.

    Examples
    --------
    >>> import numpy as np
    >>> from meshnb.conformance.mutants import Mutant, apply
    >>> p, s = np.zeros((1, 4), dtype=np.uint32), np.full((1, 5), 0x3F800000, dtype=np.uint32)
    >>> lr, inv = np.array([[0x3F000000]], dtype=np.uint32), np.array([[0x3D000000]], dtype=np.uint32)
    >>> hex(apply(None, p, s, lr, inv)[0, 0]), hex(apply(Mutant("p - lr*g", "swapped"), p, s, lr, inv)[0, 0])
    ('0xbc800000', '0x3c800000')
    """
    m = mutant
    sums = s[..., :4]
    g = node(m, "s*inv", sums, inv)
    u = node(m, "lr*g", lr, g, lambda: _Z.mul(_Z.mul(lr, sums), inv))
    return np.asarray(node(m, "p - lr*g", p, u), dtype=np.uint32)


def loss(mutant: Mutant | None, s: np.ndarray, inv: np.ndarray) -> np.ndarray:
    """The step's loss words ``(B,)``: s ``(B, 5)``, inv ``(B, 1)``.

    Parameters
    ----------
    mutant : Mutant or None
        The changed op.
    s : numpy.ndarray
        The applied sums.
    inv : numpy.ndarray
        INV_BATCH words.

    Returns
    -------
    numpy.ndarray
        uint32 ``(B,)``.

    Examples
    --------
    >>> import numpy as np
    >>> from meshnb.conformance.mutants import loss
    >>> hex(loss(None, np.full((1, 5), 0x40000000, dtype=np.uint32), np.array([[0x3F000000]], dtype=np.uint32))[0])
    '0x3f800000'
    """
    return np.asarray(node(mutant, "loss", s[..., 4:5], inv), dtype=np.uint32)[..., 0]


def samples(mutant: Mutant | None, sin_pi: Any) -> tuple[np.ndarray, np.ndarray]:
    """X and Y words of init with ``mutant``'s op changed (``sin_pi``: the exact sine of a float).

    Parameters
    ----------
    mutant : Mutant or None
        The changed op.
    sin_pi : callable
        ``sin(pi x)`` of an f64 ``x``, rounded as SPEC 4 says (f64).

    Returns
    -------
    tuple of numpy.ndarray
        ``(xs, ys)``, uint32 ``[256]``.

    Examples
    --------
    >>> import math
    >>> from meshnb.conformance import faults
    >>> from meshnb.conformance.mutants import Mutant, samples
    >>> xs, _ = samples(None, lambda x: math.sin(math.pi * x))
    >>> bool((xs == faults.samples()[0]).all()), hex(samples(Mutant("i*h", "fused"), math.sin)[0][1])
    (True, '0xbf7dfdfe')
    """
    m = mutant
    i = _Z.from_u32(np.arange(256, dtype=np.uint32))
    h = node(m, "h", 0x40000000, _Z.from_u32(255))
    if isinstance(h, np.ndarray) and h.dtype == np.float64:
        h = _Z.round64(h)
    xw = np.asarray(_words(node(m, "x = -1 + i*h", 0xBF800000, node(m, "i*h", i, h))), dtype=np.uint32)
    xf = xw.view(np.float32).astype(np.float64)
    y = np.array([sin_pi(float(v)) for v in xf])
    return xw, _Z.read(y.astype(np.float32).view(np.uint32))
