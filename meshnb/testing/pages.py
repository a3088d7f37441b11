"""Pages built to stress float mode Z, shared by the tests of every layer.

Each is an init page (from the reference) with words overwritten: tiny samples and params whose
products underflow, subnormal words in X, Y and PARAMS, huge values that overflow to inf and make
NaN, NaN payloads and infinities in the samples, values at the flush boundary.

The byte offsets below are this module's own literals, not ``meshnb.view.LAYOUT``, so that it stays
independent of the package it checks (tests/conformance/test_pack.py holds them against the layout)."""

from __future__ import annotations

import struct
from collections.abc import Sequence

import numpy as np

from . import reference as ref

__all__ = ["hard_pages", "with_words"]

PARAMS, LR, INV, X, Y = 0, 16, 24, 64, 1088


def with_words(page: bytes, offset: int, words: Sequence[int] | np.ndarray) -> bytes:
    """``page`` with u32 ``words`` written from byte ``offset`` (little-endian).

    Parameters
    ----------
    page : bytes
    offset : int
    words : sequence of int or numpy.ndarray

    Returns
    -------
    bytes

    Examples
    --------
    >>> with_words(bytes(8), 4, [0xDEADBEEF]).hex()
    '00000000efbeadde'
    """
    out = bytearray(page)
    struct.pack_into(f"<{len(words)}I", out, offset, *(int(w) for w in words))
    return bytes(out)


def _scaled_x(page: bytes, down: int) -> list[int]:
    """X with every exponent lowered by ``down`` (subnormal where it falls below 1)."""
    xw = np.frombuffer(page, "<u4", 256, X).astype(np.int64)
    e = (xw >> 23) & 0xFF
    return list(np.where(e > down, (xw & 0x807FFFFF) | ((e - down) << 23), xw & 0x80000000))


def hard_pages() -> dict[str, bytes]:
    """Every hard page by name (init pages with stressing words written over them).

    Returns
    -------
    dict of str to bytes
        The 16 pages, 4096 bytes each.

    Examples
    --------
    >>> pages = hard_pages()
    >>> len(pages), pages["nan-lr"][16:20].hex()  # LR = 0xFF800001, a signalling NaN
    (16, '010080ff')
    """
    base = ref.init_page(1)
    y0 = with_words(base, Y, [0] * 256)
    return {
        "overflow-then-inf-minus-inf": with_words(base, PARAMS, [0x7F000000, 0, 0, 0x7F000000]),
        "subnormal-params": with_words(base, PARAMS, [0x00000001, 0x80400000, 0x00800000, 0x3F800000]),
        "nan-payload-param": with_words(base, PARAMS, [0x7FC12345, 0, 0, 0]),
        "tiny-params-underflow": with_words(base, PARAMS, [0x1E800000, 0x9E800000, 0x1F000000, 0x1E000000]),
        "tiny-params-zero-y": with_words(y0, PARAMS, [0x1E800000, 0x1E900000, 0x9EA00000, 0x1EB00000]),
        "boundary-params-zero-y": with_words(y0, PARAMS, [0x20000000, 0xA0123456, 0x1FFFFFFF, 0x20000001]),
        "tiny-samples": with_words(base, X, _scaled_x(base, 42)),
        "tiny-samples-big-params": with_words(
            with_words(base, X, _scaled_x(base, 40)), PARAMS, [0x3F000000, 0x3F800000, 0xBF800000, 0x40000000]
        ),
        "subnormal-lr": with_words(base, LR, [0x00400000]),
        "nan-lr": with_words(base, LR, [0xFF800001]),
        "huge-lr": with_words(base, LR, [0x7E800000]),
        "inv-batch-at-flush-boundary": with_words(base, INV, [0x00800001]),
        "subnormal-inv-batch": with_words(base, INV, [0x007FFFFF]),
        "subnormal-and-nan-samples": with_words(
            with_words(base, X, [0x00000005, 0x80700000, 0x00800000]), Y + 16, [0x7FA00001, 0x00012345]
        ),
        "infinite-samples": with_words(with_words(base, X + 40, [0x7F800000]), Y + 80, [0xFF800000]),
        "huge-samples": with_words(base, Y, [0x7F000000 | (i & 0xFF) for i in range(256)]),
    }
