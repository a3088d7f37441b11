"""meshnb.vec, the loops' building blocks, one by one in small njit functions: vector ops are plain
IEEE lane by lane, the flush is mode Z's rule, and DAZ is switched on and restored."""

from __future__ import annotations

import numpy as np
import pytest
from numba import njit

from meshnb import cpu, kernels, vec
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


def _scalar_words(mode: int):
    """The loops' scalar word ops (in_word, after, out_word) of one literal mode on every word,
    and the kernels' njit helpers they stand for (in njit too: a float32 NaN boxed into Python
    may lose its signalling bit)."""
    z, flush = mode != vec.IEEE, mode == vec.Z

    @njit
    def run(u, f, got, want, written, want_written):
        for i in range(u.shape[0]):
            got[0, i] = vec.in_word(u[i], mode)
            got[1, i] = vec.after(f[i], mode)
            written[i] = vec.out_word(f[i], mode)
            want[0, i] = kernels.in_word(u[i], z)
            want[1, i] = kernels.result(f[i], flush)
            want_written[i] = kernels.out_word(f[i], z)

    return run


@pytest.mark.parametrize("mode", vec.MODES, ids=["daz", "z", "ieee"])
def test_scalar_word_ops_are_the_kernels_helpers_of_the_mode(mode):
    # The single and fused loops read and write words with them, for kernels.in_word, result and
    # out_word of z = mode != IEEE (result flushes only in mode Z: under DAZ the next op does).
    rng = np.random.default_rng(35)
    u = np.concatenate([WORDS, rng.integers(0, 1 << 32, 200, dtype=np.uint32)])
    u = np.concatenate([u, u & 0x807FFFFF, u | 0x7F800000])  # and each one's subnormal and NaN or inf
    got, want = np.empty((2, u.size), np.float32), np.empty((2, u.size), np.float32)
    written, want_written = np.empty_like(u), np.empty_like(u)
    _scalar_words(mode)(u, u.view(np.float32), got, want, written, want_written)
    assert got.view(np.uint32).tolist() == want.view(np.uint32).tolist()
    assert written.tolist() == want_written.tolist()
