"""How device words are compared with the CPU's (pure numpy): bit for bit in float mode Z; in IEEE
mode a NaN word equals any NaN word (which NaN a GPU returns is the hardware's: docs/guide/gpu.md).
"""

from __future__ import annotations

import numpy as np

EXP = np.uint32(0x7F800000)
MANT = np.uint32(0x007FFFFF)


def is_nan_word(words: np.ndarray) -> np.ndarray:
    """Where ``words`` (uint32) are f32 NaNs."""
    w = np.asarray(words, dtype=np.uint32)
    return ((w & EXP) == EXP) & ((w & MANT) != 0)


def words_equal(cpu: np.ndarray, device: np.ndarray, z: bool = True) -> bool:
    """Whether the device's words are the CPU's (different shapes are not; ``z=False``: a NaN word
    equals any NaN word)."""
    a, b = np.asarray(cpu, dtype=np.uint32), np.asarray(device, dtype=np.uint32)
    if a.shape != b.shape:
        return False
    if z:
        return bool(np.array_equal(a, b))
    na, nb = is_nan_word(a), is_nan_word(b)
    return bool(np.array_equal(na, nb) and np.array_equal(a[~na], b[~nb]))
