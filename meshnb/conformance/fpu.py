"""f32 operations on uint32 words under configurable FPU rules (flush, DAZ, NaN), vectorised with numpy.

:class:`Ops` computes add, sub, mul, div, fma and from_u32 under any :class:`Rules`; :class:`Directed`
and :class:`PlusZero` are the other roundings.  A sum, difference or quotient rounded once at 53 bits
rounds correctly to f32 a second time; an FMA is summed in f64 with round-to-odd.  No numba.

Examples
--------
>>> from meshnb.conformance.fpu import Directed, Ops, PlusZero, Rules, apply_op
>>> a, b = 0x00800000, 0x3F7FFFFF
>>> hex(Ops().mul(a, b))  # mode Z: rounds up to the smallest normal, which stays
'0x800000'
>>> hex(Ops(Rules("after", daz=False, nan="x86")).mul(a, b))  # x86 FTZ: tiny before the rounding counts
'0x0'
>>> hex(Ops().add(1, 0)), hex(Ops(Rules("none", daz=False)).add(1, 0))  # a subnormal input
('0x0', '0x1')
>>> one, half_ulp = 0x3F800000, 0x33800000  # 1.0 and 2^-24
>>> hex(Directed("up").add(one, half_ulp)), hex(Directed("zero").add(one, half_ulp))
('0x3f800001', '0x3f800000')
>>> hex(Ops().mul(0x80800000, 0x3F000000)), hex(PlusZero().mul(0x80800000, 0x3F000000))
('0x80000000', '0x0')
>>> apply_op(Ops(), "pow", 1, 2)
Traceback (most recent call last):
...
ValueError: unknown op 'pow'
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

EXP = np.uint32(0x7F800000)
SIGN = np.uint32(0x80000000)
MANT = np.uint32(0x007FFFFF)
CANONICAL_NAN = 0x7FFFFFFF
ARM_DEFAULT_NAN = 0x7FC00000
TINY = 2.0**-126  # the smallest normal f32

UNDERFLOWS = ("z", "none", "before", "after")
NANS = ("canonical", "x86", "arm")
_UFUNCS = {"add": np.add, "sub": np.subtract, "mul": np.multiply}


@dataclass(frozen=True)
class Rules:
    """One FPU mode: ``underflow`` "z" (flushed after rounding), "none", "before" (tiny before rounding)
    or "after" (x86 FTZ); ``daz``: subnormal inputs read as zero; ``nan``: "canonical", "x86" or "arm"."""

    underflow: str = "z"
    daz: bool = True
    nan: str = "canonical"

    def __post_init__(self) -> None:
        if self.underflow not in UNDERFLOWS or self.nan not in NANS:
            raise ValueError(f"bad rules {self}")


MODE_Z = Rules()


def words(a: object) -> np.ndarray:
    """``a`` as a uint32 array (a copy only when needed)."""
    return np.asarray(a, dtype=np.uint32)


def is_nan(u: np.ndarray) -> np.ndarray:
    """Whether each word is a NaN, quiet or signalling."""
    return ((u & EXP) == EXP) & ((u & MANT) != 0)


def ordered(u: object) -> np.ndarray:
    """Words as int64 that order like their floats, +0 and -0 both 0 (a difference is in ulps)."""
    i = words(u).astype(np.int64)
    return np.where(i & 0x80000000, -(i & 0x7FFFFFFF), i)


def ulps(a: object, b: object) -> np.ndarray:
    """How many ulps apart the finite words ``a`` and ``b`` are."""
    return np.abs(ordered(a) - ordered(b))


def is_subnormal(u: np.ndarray) -> np.ndarray:
    """Whether each word is subnormal (exponent bits zero, fraction nonzero)."""
    return ((u & EXP) == 0) & ((u & MANT) != 0)


def _round_unbounded(r: np.ndarray) -> np.ndarray:
    """f64 values rounded to 24 significant bits, nearest even, at unbounded exponent."""
    m, e = np.frexp(r)
    return np.ldexp(np.rint(m * 2.0**24) / 2.0**24, e)


class Ops:
    """add, sub, mul, div, fma, from_u32 on uint32 words under ``rules``; ``daz=(bool, bool)`` overrides
    the input rule per operand."""

    def __init__(self, rules: Rules = MODE_Z) -> None:
        self.rules = rules

    @staticmethod
    def _in(u: np.ndarray, daz: bool) -> np.ndarray:
        """Operand words as float32 (a subnormal read as a signed zero under DAZ)."""
        u = np.asarray(u, dtype=np.uint32)
        if daz:
            u = np.where((u & EXP) == 0, u & SIGN, u)
        return u.view(np.float32)

    def _out(self, r64: np.ndarray, tiny_exact: Callable[[], np.ndarray], hw: Callable[[], np.ndarray]) -> np.ndarray:
        """f64 results as f32 words under the rules (``tiny_exact()``: the exact result is tiny; ``hw()``:
        the x86 float32 result, for its NaN bits)."""
        with np.errstate(all="ignore"):
            u = r64.astype(np.float32).view(np.uint32)
            flow = self.rules.underflow
            if flow == "z":
                u = np.where((u & EXP) == 0, u & SIGN, u)
            elif flow != "none":
                if flow == "before":
                    tiny = tiny_exact() | ((u & EXP) == 0)
                else:
                    fin = np.isfinite(r64)
                    tiny = fin & (r64 != 0) & (np.abs(_round_unbounded(np.where(fin, r64, 1.0))) < TINY)
                u = np.where(tiny, np.where(np.signbit(r64), SIGN, np.uint32(0)), u)
            nan = self.rules.nan
            if nan == "x86":
                return np.where(np.isnan(r64), words(hw()), u).astype(np.uint32)
            fill = np.uint32(CANONICAL_NAN if nan == "canonical" else ARM_DEFAULT_NAN)
            return np.where(np.isnan(r64), fill, u).astype(np.uint32)

    def _two(self, a: Any, b: Any, daz: tuple[bool, bool] | None) -> tuple[np.ndarray, np.ndarray]:
        da, db = daz if daz is not None else (self.rules.daz, self.rules.daz)
        return self._in(a, da), self._in(b, db)

    @staticmethod
    def _tiny(r: np.ndarray) -> Callable[[], np.ndarray]:
        return lambda: (r != 0) & (np.abs(r) < TINY)

    def _arith(self, kind: str, fa: np.ndarray, fb: np.ndarray) -> np.ndarray:
        """add, sub or mul of operands read as float32 (the rounding :class:`Directed` replaces)."""
        f = _UFUNCS[kind]
        with np.errstate(all="ignore"):
            r = f(fa.astype(np.float64), fb)  # a product is exact (48 bits), so is a sum near 2^-126
            return self._out(r, self._tiny(r), lambda: f(fa, fb).view(np.uint32))

    def add(self, a: object, b: object, daz: tuple[bool, bool] | None = None) -> np.ndarray:
        """``a + b`` under the rules; ``daz`` overrides the input rule per operand."""
        return self._arith("add", *self._two(a, b, daz))

    def sub(self, a: object, b: object, daz: tuple[bool, bool] | None = None) -> np.ndarray:
        """``a - b`` under the rules; ``daz`` overrides the input rule per operand."""
        return self._arith("sub", *self._two(a, b, daz))

    def mul(self, a: object, b: object, daz: tuple[bool, bool] | None = None) -> np.ndarray:
        """``a * b`` under the rules; ``daz`` overrides the input rule per operand."""
        return self._arith("mul", *self._two(a, b, daz))

    def div(self, a: object, b: object, daz: tuple[bool, bool] | None = None) -> np.ndarray:
        """``a / b`` under the rules; ``daz`` overrides the input rule per operand."""
        fa, fb = self._two(a, b, daz)
        with np.errstate(all="ignore"):
            da, db = fa.astype(np.float64), fb.astype(np.float64)
            r = da / db

            # The quotient is inexact in f64; |a/b| < 2^-126 iff |a| < 2^-126 |b| (exact scaling).
            def tiny() -> np.ndarray:
                return (da != 0) & np.isfinite(r) & (np.abs(da) < TINY * np.abs(db))

            return self._out(r, tiny, lambda: (fa / fb).view(np.uint32))

    def fma(self, a: Any, b: Any, c: Any) -> np.ndarray:
        """``a * b + c`` rounded once (every input under the DAZ rule)."""
        d = self.rules.daz
        fa, fb, fc = self._in(a, d), self._in(b, d), self._in(c, d)
        with np.errstate(all="ignore"):
            p = fa.astype(np.float64) * fb.astype(np.float64)  # exact
            cc = fc.astype(np.float64)
            s = p + cc
            bb = s - p
            err = (p - (s - bb)) + (cc - bb)  # TwoSum: s + err == p + c exactly (finite s)
            fin = np.isfinite(s)
            even = (s.view(np.uint64) & np.uint64(1)) == 0
            fix = fin & (err != 0) & even
            s = np.where(fix, np.nextafter(s, np.where(err > 0, np.inf, -np.inf)), s)  # round to odd
            tiny = self._tiny(np.where(fin, s, 1.0))  # round-to-odd keeps the order with 2^-126
            return self._out(s, tiny, lambda: (fa * fb + fc).view(np.uint32))

    def from_u32(self, u: object) -> np.ndarray:
        """The u32 ``u`` as f32 (nearest even) under the rules."""
        r = words(u).astype(np.float64)  # exact
        return self._out(r, self._tiny(r), lambda: r.astype(np.float32).view(np.uint32))

    def round64(self, r: object) -> np.ndarray:
        """f64 values rounded to f32 words under the rules (a value an executor computed in f64)."""
        r64 = np.asarray(r, dtype=np.float64)
        return self._out(r64, self._tiny(r64), lambda: r64.astype(np.float32).view(np.uint32))

    def read(self, u: object) -> np.ndarray:
        """``ftz_from_bits`` under the rules: a page word as an executor reads it."""
        u = words(u)
        if self.rules.underflow != "none":
            u = np.where((u & EXP) == 0, u & SIGN, u).astype(np.uint32)
        if self.rules.nan == "canonical":
            u = np.where(is_nan(u), np.uint32(CANONICAL_NAN), u).astype(np.uint32)
        return u


class Directed(Ops):
    """add, sub and mul rounded toward ``direction`` ("zero", "up", "down"), mode Z's flush and NaN after."""

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

    def _arith(self, kind: str, fa: np.ndarray, fb: np.ndarray) -> np.ndarray:
        with np.errstate(all="ignore"):
            if kind == "mul":
                r = fa.astype(np.float64) * fb  # exact
                return self.round64(self._directed(r, np.zeros_like(r)))
            a, b = fa.astype(np.float64), (fb if kind == "add" else -fb).astype(np.float64)
            s = a + b
            bb = s - a
            err = (a - (s - bb)) + (b - bb)  # TwoSum: s + err == a + b exactly
            err = np.where(np.isfinite(s), err, 0.0)
            return self.round64(self._directed(s, err))


class PlusZero(Ops):
    """Mode Z (or ``rules``), but a tiny nonzero result flushed to +0 whatever its sign (``r = 0.0f``)."""

    def _out(self, r64: np.ndarray, tiny_exact: Any, hw: Any) -> np.ndarray:
        u = super()._out(r64, tiny_exact, hw)
        with np.errstate(all="ignore"):
            return np.where((u == SIGN) & (r64 != 0), np.uint32(0), u).astype(np.uint32)


BINARY = ("add", "sub", "mul", "div")
OPS = BINARY + ("from_u32",)


def apply_op(ops: Ops, name: str, a: np.ndarray, b: np.ndarray | None = None) -> np.ndarray:
    """The op ``name`` of :data:`OPS` on words (``b`` not for ``from_u32``); ValueError for an unknown op."""
    if name == "from_u32":
        return ops.from_u32(a)
    if name not in BINARY:
        raise ValueError(f"unknown op {name!r}")
    return getattr(ops, name)(a, b)
