"""How device words are compared with the CPU's (pure numpy: no numba-cuda needed).

Float mode Z (``z=True``): every word bit for bit; NaNs leave both sides as the canonical
``0x7FFFFFFF`` (``ftz_bits``), so there is nothing to relax.

IEEE mode (``z=False``) passes NaN words through raw.  The CPU keeps a NaN operand's payload
(``0xffc00000``, ``0x7fc12345`` end 4 of the 16 hard pages), while a GPU's f32 operations return
their own NaN: which NaN comes out is the hardware's, not the program's.  The rule, decided for the
device (docs/guide/gpu.md): in IEEE mode, a NaN word equals any NaN word (sign and payload free);
every other word, and the position of every NaN, is compared bit for bit.
"""

from __future__ import annotations

import numpy as np

EXP = np.uint32(0x7F800000)
MANT = np.uint32(0x007FFFFF)


def is_nan_word(words: np.ndarray) -> np.ndarray:
    """Where ``words`` (uint32) are f32 NaNs.

    Examples
    --------
    >>> import numpy as np
    >>> from meshnb.cuda.compare import is_nan_word
    >>> is_nan_word(np.array([0x7FFFFFFF, 0xFFC00000, 0x7F800000, 0x3F800000], np.uint32)).tolist()
    [True, True, False, False]
    """
    w = np.asarray(words, dtype=np.uint32)
    return ((w & EXP) == EXP) & ((w & MANT) != 0)


def words_equal(cpu: np.ndarray, device: np.ndarray, z: bool = True) -> bool:
    """Whether the device's words are the CPU's: bit for bit in mode Z; in IEEE mode with NaN
    words equal to any NaN word.  Arrays of different shapes are not equal.

    Examples
    --------
    >>> import numpy as np
    >>> from meshnb.cuda.compare import words_equal
    >>> cpu = np.array([0x3F800000, 0x7FC12345], np.uint32)  # the CPU kept a NaN operand's payload
    >>> device = np.array([0x3F800000, 0x7FFFFFFF], np.uint32)  # the GPU returned its own NaN
    >>> words_equal(cpu, device, z=False), words_equal(cpu, device, z=True)
    (True, False)
    >>> words_equal(cpu, device[:1], z=False)
    False
    """
    a, b = np.asarray(cpu, dtype=np.uint32), np.asarray(device, dtype=np.uint32)
    if a.shape != b.shape:
        return False
    if z:
        return bool(np.array_equal(a, b))
    na, nb = is_nan_word(a), is_nan_word(b)
    return bool(np.array_equal(na, nb) and np.array_equal(a[~na], b[~nb]))
