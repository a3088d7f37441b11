"""Float mode Z (SPEC 2): the numba ops against hand-worked cases and the numpy reference."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from numba import njit

from meshnb import floatz
from meshnb.testing import reference as ref

OPS = ("add", "sub", "mul", "div")
REF_OPS = {"add": ref.z_add, "sub": ref.z_sub, "mul": ref.z_mul, "div": ref.z_div}


@njit(error_model="numpy")
def _op(code, a, b):
    out = np.empty(a.size, dtype=np.float32)
    for i in range(a.size):
        if code == 0:
            out[i] = floatz.add(a[i], b[i])
        elif code == 1:
            out[i] = floatz.sub(a[i], b[i])
        elif code == 2:
            out[i] = floatz.mul(a[i], b[i])
        else:
            out[i] = floatz.div(a[i], b[i])
    return out


def z(op: str, a_bits, b_bits) -> np.ndarray:
    """The numba op over uint32 bit arrays, as result words."""
    a = np.asarray(a_bits, dtype=np.uint32).view(np.float32)
    b = np.asarray(b_bits, dtype=np.uint32).view(np.float32)
    return _op(OPS.index(op), a, b).view(np.uint32)


def reference(op: str, a_bits, b_bits) -> np.ndarray:
    a = np.asarray(a_bits, dtype=np.uint32).view(np.float32)
    b = np.asarray(b_bits, dtype=np.uint32).view(np.float32)
    return np.asarray(REF_OPS[op](a, b), dtype=np.float32).view(np.uint32)


# Worked by hand from the rules, independent of any implementation.
@pytest.mark.parametrize(
    "op, a, b, want",
    [
        ("mul", 0x00800000, 0x3F7FFFFF, 0x00800000),  # rounds up to the smallest normal: kept
        ("mul", 0x00800000, 0x3F000000, 0x00000000),  # 2^-127 is subnormal: flushed
        ("mul", 0x80800000, 0x3F000000, 0x80000000),  # flushed with its sign
        ("add", 0x00000001, 0x00000001, 0x00000000),  # subnormal inputs read as zero
        ("add", 0x80000001, 0x80000001, 0x80000000),  # -0 + -0 = -0
        ("sub", 0x00800001, 0x00800000, 0x00000000),  # 2^-149: subnormal result
        ("add", 0x3F800000, 0x00400000, 0x3F800000),
        ("sub", 0x7F800000, 0x7F800000, 0x7FFFFFFF),  # inf - inf: canonical NaN
        ("div", 0x00000000, 0x00000000, 0x7FFFFFFF),
        ("div", 0x3F800000, 0x00000001, 0x7F800000),  # 1 / (+subnormal = +0) = +inf
        ("div", 0x3F800000, 0x80000001, 0xFF800000),  # 1 / (-subnormal = -0) = -inf
        ("mul", 0x7F7FFFFF, 0x40000000, 0x7F800000),  # overflow to inf
        ("mul", 0x7F800000, 0x00000001, 0x7FFFFFFF),  # inf * (subnormal = 0) = NaN
        ("add", 0xFFC00000, 0x3F800000, 0x7FFFFFFF),  # x86's default NaN becomes canonical
        ("add", 0x7F800001, 0x3F800000, 0x7FFFFFFF),  # signalling NaN payload too
        ("div", 0x3F800000, 0x40400000, 0x3EAAAAAB),  # 1/3 rounded to nearest
    ],
)
def test_hand_worked_cases(op, a, b, want):
    assert z(op, [a], [b])[0] == want
    assert reference(op, [a], [b])[0] == want


SPECIAL = [
    0x00000000,
    0x80000000,
    0x00000001,
    0x80000001,
    0x007FFFFF,
    0x807FFFFF,
    0x00800000,
    0x80800000,
    0x00800001,
    0x00FFFFFF,
    0x01000000,
    0x3F7FFFFF,
    0x3F800000,
    0xBF800000,
    0x3F000000,
    0x33800000,
    0x4B800000,
    0x7F7FFFFF,
    0xFF7FFFFF,
    0x7F800000,
    0xFF800000,
    0x7FC00000,
    0xFFC00000,
    0x7F800001,
    0x7FFFFFFF,
    0xFFFFFFFF,
    0x7FA00000,
    0x1F800000,
    0x1F7FFFFF,
    0x20000000,
    0x5F800000,
    0x60000000,
]


@pytest.mark.parametrize("op", OPS)
def test_special_value_pairs_match_reference(op):
    pairs = np.array(list(itertools.product(SPECIAL, repeat=2)), dtype=np.uint32)
    np.testing.assert_array_equal(z(op, pairs[:, 0], pairs[:, 1]), reference(op, pairs[:, 0], pairs[:, 1]))


def _random_pairs(seed: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Half uniform bit patterns, half with exponents near the underflow and overflow edges."""
    rng = np.random.default_rng(seed)
    a = rng.integers(0, 1 << 32, n, dtype=np.uint32)
    b = rng.integers(0, 1 << 32, n, dtype=np.uint32)
    half = n // 2
    # Exponent pairs whose sums land near 127 (products near the smallest normal) or that are
    # equal and small (sums and differences near it).
    ea = rng.integers(0, 256, half).astype(np.uint32)
    eb = np.clip(127 - ea.astype(np.int64) + rng.integers(-3, 4, half), 0, 255).astype(np.uint32)
    same = rng.random(half) < 0.5
    eb = np.where(same, np.clip(ea.astype(np.int64) + rng.integers(-2, 3, half), 0, 255), eb).astype(np.uint32)
    ea = np.where(same, rng.integers(0, 4, half), ea).astype(np.uint32)
    eb = np.where(same, np.clip(ea.astype(np.int64) + rng.integers(-1, 2, half), 0, 255), eb).astype(np.uint32)
    keep = np.uint32(0x807FFFFF)
    a[:half] = (a[:half] & keep) | (ea << 23)
    b[:half] = (b[:half] & keep) | (eb << 23)
    return a, b


@pytest.mark.parametrize("op", OPS)
def test_a_million_random_pairs_match_reference(op):
    a, b = _random_pairs(OPS.index(op), 1_000_000)
    got, want = z(op, a, b), reference(op, a, b)
    bad = np.flatnonzero(got != want)
    assert bad.size == 0, f"{op}({a[bad[0]]:08x}, {b[bad[0]]:08x}) = {got[bad[0]]:08x}, want {want[bad[0]]:08x}"
    # The edge half must really exercise the rules: flushed results and NaNs both occur.
    assert (got == 0).sum() + (got == 0x80000000).sum() > 1000
    assert (got == 0x7FFFFFFF).sum() > 100


@njit(error_model="numpy")
def _from_u32(u):
    out = np.empty(u.size, dtype=np.float32)
    for i in range(u.size):
        out[i] = floatz.from_u32(u[i])
    return out


def test_from_u32_rounds_to_nearest_even():
    u = np.array([0, 1, 255, 16777216, 16777217, 16777219, 0xFFFFFFFF, 0x80000080, 0x80000180], dtype=np.uint32)
    want = [0x00000000, 0x3F800000, 0x437F0000, 0x4B800000, 0x4B800000, 0x4B800002, 0x4F800000, 0x4F000000, 0x4F000002]
    assert list(_from_u32(u).view(np.uint32)) == want
    rng = np.random.default_rng(7)
    r = rng.integers(0, 1 << 32, 100_000, dtype=np.uint32)
    np.testing.assert_array_equal(_from_u32(r).view(np.uint32), np.asarray(ref.z_from_u32(r)).view(np.uint32))


def test_bits_and_from_bits_apply_the_flush_and_nan_rule():
    u = np.array(SPECIAL, dtype=np.uint32)
    want = np.array([ref.py_flush(int(w)) for w in u], dtype=np.uint32)
    np.testing.assert_array_equal(floatz.from_bits_array(u).view(np.uint32), want)
    np.testing.assert_array_equal(floatz.bits_array(u.view(np.float32)), want)
    np.testing.assert_array_equal(floatz.flush_words(u), want)
    assert floatz.flush_bits(np.uint32(0x00000001)) == 0 and floatz.flush_bits(np.uint32(0x80400000)) == 0x80000000
    assert floatz.flush_bits(np.uint32(0xFF800001)) == 0x7FFFFFFF
    assert floatz.flush_bits(np.uint32(0xFF800000)) == 0xFF800000


# --- property: every op on any pair of words equals the plain-Python reference --------------

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

WORDS = st.one_of(st.integers(0, 0xFFFFFFFF), st.sampled_from(SPECIAL))
PY_OPS = {"add": ref.py_add, "sub": ref.py_sub, "mul": ref.py_mul, "div": ref.py_div}


@pytest.mark.slow
@settings(max_examples=3000, deadline=None)
@given(op=st.sampled_from(OPS), a=WORDS, b=WORDS)
def test_any_pair_matches_the_plain_python_reference(op, a, b):
    assert int(z(op, [a], [b])[0]) == PY_OPS[op](a, b)


@pytest.mark.parametrize("op", OPS)
def test_ops_refuse_float64_and_python_floats_naming_the_argument(op):
    fn = getattr(floatz, op)
    f = np.float32(1.5)
    with pytest.raises(TypeError, match=f"meshnb.floatz.{op}: argument 'a' must be a numpy float32"):
        fn(1.5, f)
    with pytest.raises(TypeError, match=f"meshnb.floatz.{op}: argument 'b' must be a numpy float32.*numpy float64"):
        fn(f, np.float64(1.5))
    assert fn(f, f) == getattr(ref, f"z_{op}")(f, f)
    assert all(str(sig) == "(float32, float32)" for sig in fn.signatures)  # no float64 variant


def test_word_ops_refuse_other_dtypes():
    with pytest.raises(TypeError, match="flush_bits: argument 'u' must be a numpy uint32"):
        floatz.flush_bits(0x7FC00000)
    with pytest.raises(TypeError, match="from_u32: argument 'u' must be a numpy uint32"):
        floatz.from_u32(np.int32(3))
    with pytest.raises(TypeError, match="bits: argument 'f' must be a numpy float32"):
        floatz.bits(np.float16(1))
    with pytest.raises(TypeError, match="bits_array: argument 'a' must be a float32 array"):
        floatz.bits_array(np.zeros(3))
    assert floatz.from_u32(np.uint32(3)) == np.float32(3)


def test_bits_refuses_a_python_float_and_flush_subnormal_keeps_the_sign():
    with pytest.raises(TypeError, match=r"meshnb.floatz.bits: argument 'f' must be a numpy float32"):
        floatz.bits(0.5)
    assert np.float32(floatz.flush_subnormal(np.float32(-1e-40))).view(np.uint32) == 0x80000000
    assert np.float32(floatz.mul(np.float32(1e-20), np.float32(1e-20))).view(np.uint32) == 0
