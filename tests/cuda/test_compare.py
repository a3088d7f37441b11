"""meshnb.cuda.compare: the device words against the CPU's; the IEEE-mode NaN rule (any NaN
equals any NaN) on the hard pages that end with NaN words, and what it still refuses."""

from __future__ import annotations

import numpy as np
import pytest

import meshnb
from meshnb.cuda.compare import is_nan_word, words_equal
from meshnb.testing.pages import hard_pages

CANONICAL = 0x7FFFFFFF  # mode Z's NaN word (ftz_bits)
GPU_NAN = 0x7FFFFFFF  # what a GPU's f32 ops return for a NaN result (its "canonical" NaN)


def words(page: bytes) -> np.ndarray:
    return np.frombuffer(page, dtype="<u4").astype(np.uint32)


def ieee_pages_with_nan() -> dict[str, np.ndarray]:
    out = {}
    for name, page in hard_pages().items():
        w = words(meshnb.train(4, view_in=page, z=False).page)
        if is_nan_word(w[:4]).any() or is_nan_word(w[528:784]).any():
            out[name] = w
    return out


def test_the_hard_pages_end_with_nan_payloads_in_ieee_mode():
    # the finding, measured: the CPU's IEEE mode keeps payloads a GPU would not
    got = ieee_pages_with_nan()
    assert got, "no hard page ends with a NaN word in IEEE mode"
    payloads = {int(x) for w in got.values() for x in w[is_nan_word(w)]}
    assert payloads - {GPU_NAN}, sorted(hex(p) for p in payloads)


def test_ieee_mode_a_nan_word_equals_any_nan_word():
    for name, w in ieee_pages_with_nan().items():
        device = w.copy()
        device[is_nan_word(device)] = GPU_NAN  # the GPU's own NaN in every NaN place
        assert words_equal(w, device, z=False), name
        assert not words_equal(w, device, z=True) or np.array_equal(w, device), name


@pytest.mark.parametrize(
    "cpu, device, z, equal",
    [
        ([0x7FC00000, 1], [0xFFC12345, 1], False, True),  # NaN vs NaN: sign and payload free
        ([0x7FC00000, 1], [0x7F800000, 1], False, False),  # NaN vs inf: no
        ([0x7FC00000, 1], [0x7FC00000, 2], False, False),  # the other words: bit for bit
        ([0x00000001], [0x00000000], False, False),  # a subnormal is no zero in IEEE mode
        ([CANONICAL], [0x7FC00000], True, False),  # mode Z: every word bit for bit
        ([CANONICAL, 5], [CANONICAL, 5], True, True),
        ([1, 2], [1, 2, 3], False, False),
    ],
)
def test_words_equal_cases(cpu, device, z, equal):
    assert words_equal(np.array(cpu, dtype=np.uint32), np.array(device, dtype=np.uint32), z) is equal


def test_is_nan_word():
    words = np.array([0x7FFFFFFF, 0xFFC00000, 0x7F800000, 0x3F800000, 0xFF800001], np.uint32)
    assert is_nan_word(words).tolist() == [True, True, False, False, True]
