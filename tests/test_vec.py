"""meshnb.vec, the loops' building blocks, one by one in small njit functions: vector ops are plain
IEEE lane by lane, the flush is mode Z's rule, and DAZ is switched on and restored."""

from __future__ import annotations

import numpy as np
import pytest
from numba import njit

from meshnb import cpu, vec
from meshnb.testing import reference as ref

WORDS = np.array(
    [0x00000001, 0x807FFFFF, 0x00800000, 0x3F800000, 0x7F800000, 0xFFC00000, 0x7FC00001, 0x80000000],
    dtype=np.uint32,
)  # subnormals of both signs, the smallest normal, 1, inf, NaNs, -0


@njit
def _add_mul(a, b, out):
    vec.store(out, 0, vec.add(vec.load8(a, 0), vec.load8(b, 0)))
    vec.store(out, 8, vec.mul(vec.load8(a, 0), vec.load8(b, 0)))


@njit
def _flushed(a, out):
    vec.store(out, 0, vec.flush(vec.load8(a, 0)))


@njit
def _daz_round_trip():
    old = vec.daz_on()
    vec.mxcsr_restore(old)
    return old


def test_vector_ops_are_ieee_lane_by_lane():
    rng = np.random.default_rng(5)
    a = rng.standard_normal(8).astype(np.float32)
    b = rng.standard_normal(8).astype(np.float32)
    out = np.empty(16, dtype=np.float32)
    _add_mul(a, b, out)
    assert out[:8].tobytes() == (a + b).tobytes() and out[8:].tobytes() == (a * b).tobytes()


def test_flush_is_mode_zs_subnormal_rule_on_every_lane():
    """Subnormals become zeros of their sign (the reference's rule); NaNs pass as they are (they
    are made canonical where words leave a loop)."""
    out = np.empty(8, dtype=np.float32)
    _flushed(WORDS.view(np.float32), out)
    want = ref.flush(WORDS.view(np.float32)).view(np.uint32)
    nan = np.isnan(WORDS.view(np.float32))
    assert out.view(np.uint32)[~nan].tolist() == want[~nan].tolist()
    assert out.view(np.uint32)[nan].tolist() == WORDS[nan].tolist()


@pytest.mark.skipif(not cpu.HAS_DAZ, reason="DAZ is an x86 bit")
def test_daz_is_switched_and_restored():
    before = _daz_round_trip()
    assert _daz_round_trip() == before  # what daz_on found the second time is what it found the first
    assert int(before) & 0x0040 == 0  # DAZ was off outside the loops
