"""meshnb's mode-Z ops against MPFR (gmpy2): an oracle that shares no hardware path with numba.

A binary32 context (precision 24, the binary32 exponent range, subnormalize, nearest-even) rounds
each exact result as IEEE does; SPEC's rules are then applied on the word: subnormal inputs read
as zeros of their sign, a subnormal result written as a zero of its sign, any NaN 0x7FFFFFFF.

CI checks level 1 (every special pair, the probes, 20000 random pairs) and 200,000 level-2 pairs
per op; ``MESHNB_MPFR_PAIRS=2000000`` runs millions (a few minutes).
"""

from __future__ import annotations

import os
import struct

import numpy as np
import pytest

from meshnb.conformance import ops
from meshnb.conformance.fpu import OPS, Ops, Rules

gmpy2 = pytest.importorskip("gmpy2")

PAIRS = int(os.environ.get("MESHNB_MPFR_PAIRS", "200000"))
CTX = gmpy2.ieee(32)


def _f32_of_word(w: int) -> float:
    if w & 0x7F800000 == 0:  # mode Z reads a subnormal input as a zero of its sign
        w &= 0x80000000
    return struct.unpack("<f", struct.pack("<I", w))[0]


def _word_of_mpfr(r) -> int:
    if gmpy2.is_nan(r):
        return 0x7FFFFFFF
    w = struct.unpack("<I", struct.pack("<f", float(r)))[0]  # r is a binary32 value: exact
    if w & 0x7F800000 == 0:
        w &= 0x80000000
    return w


def mpfr_op(op: str, a: int, b: int) -> int:
    """Mode Z ``op`` on words, computed by MPFR."""
    if op == "from_u32":
        return _word_of_mpfr(CTX.add(gmpy2.mpfr(a), 0))  # mpfr(a) is exact at 53 bits; the add rounds
    x, y = gmpy2.mpfr(_f32_of_word(a)), gmpy2.mpfr(_f32_of_word(b))  # exact
    return _word_of_mpfr(getattr(CTX, op)(x, y))


@pytest.mark.parametrize("op", OPS)
def test_mode_z_ops_equal_mpfr(op: str) -> None:
    a1, b1 = ops.generate(op, 1)
    a2, b2 = ops.generate(op, 2, seed=7, count=PAIRS)
    a = np.concatenate([a1, a2])
    b = None if b1 is None else np.concatenate([b1, b2])
    want = ops.expected(op, a, b)
    bb = a if b is None else b
    got = [mpfr_op(op, int(x), int(y)) for x, y in zip(a.tolist(), bb.tolist())]
    bad = np.nonzero(np.array(got, dtype=np.uint32) != want)[0]
    assert len(bad) == 0, [(f"{a[i]:08x}", f"{bb[i]:08x}", f"{want[i]:08x}", f"{got[i]:08x}") for i in bad[:5]]


def test_fma_equals_mpfr() -> None:
    """The fault models' fused multiply-add (f64 round-to-odd) is the correctly rounded a * b + c."""
    rng = np.random.Generator(np.random.PCG64(5))
    n = 50_000
    a = rng.integers(0, 1 << 32, n, dtype=np.uint64).astype(np.uint32)
    b = rng.integers(0, 1 << 32, n, dtype=np.uint64).astype(np.uint32)
    # c near -a*b, so the sum cancels and the rounding of the exact value matters
    with np.errstate(all="ignore"):
        prod = (a.view(np.float32).astype(np.float64) * b.view(np.float32)).astype(np.float32)
    c = np.where(
        rng.integers(0, 2, n) == 1,
        (prod.view(np.uint32) ^ np.uint32(0x80000000)) + rng.integers(-3, 4, n).astype(np.uint32),
        rng.integers(0, 1 << 32, n, dtype=np.uint64).astype(np.uint32),
    )
    c = c.astype(np.uint32)
    got = Ops(Rules()).fma(a, b, c)
    want = [
        _word_of_mpfr(
            CTX.fma(
                gmpy2.mpfr(_f32_of_word(int(x))), gmpy2.mpfr(_f32_of_word(int(y))), gmpy2.mpfr(_f32_of_word(int(z)))
            )
        )
        for x, y, z in zip(a.tolist(), b.tolist(), c.tolist())
    ]
    assert np.array_equal(got, np.array(want, dtype=np.uint32))


@pytest.mark.parametrize("underflow", ["before", "after", "none"])
def test_flush_rule_variants_equal_mpfr(underflow: str) -> None:
    """The rule variants ``ops verify`` classifies with, against MPFR: tininess before rounding is the
    exact product below 2^-126; after rounding, the product rounded to 24 bits at unbounded exponent."""
    a, b = ops.generate("mul", 1)
    got = Ops(Rules(underflow=underflow)).mul(a, b)
    big = gmpy2.context(precision=24, emin=-10_000, emax=10_000)  # unbounded exponent, 24 bits
    exact = gmpy2.context(precision=200, emin=-10_000, emax=10_000)
    want = []
    for x, y in zip(a.tolist(), b.tolist()):
        fx, fy = _f32_of_word(x), _f32_of_word(y)
        r = CTX.mul(gmpy2.mpfr(fx), gmpy2.mpfr(fy))
        w = 0x7FFFFFFF if gmpy2.is_nan(r) else struct.unpack("<I", struct.pack("<f", float(r)))[0]
        e = exact.mul(gmpy2.mpfr(fx), gmpy2.mpfr(fy))
        u = big.mul(gmpy2.mpfr(fx), gmpy2.mpfr(fy))
        tiny = {
            "before": gmpy2.is_finite(e) and e != 0 and abs(e) < 2.0**-126,
            "after": gmpy2.is_finite(u) and u != 0 and abs(u) < 2.0**-126,
            "none": False,
        }[underflow]
        if tiny:
            w &= 0x80000000
        want.append(w)
    assert np.array_equal(got, np.array(want, dtype=np.uint32))
