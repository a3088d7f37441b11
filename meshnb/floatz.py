"""Float mode Z (SPEC 2; the rules in the [float mode Z guide](../guide/float-mode-z.md)): IEEE
binary32 ops on flushed inputs, the rounded result flushed, any NaN as ``0x7FFFFFFF``.

The flush works on the bits of plain float32 results (no fastmath, no hardware FTZ): :func:`flush`
applies the whole rule, :func:`flush_subnormal` the subnormal part.  The njit functions take numpy
scalars of their exact type and raise TypeError for anything else.
"""

from __future__ import annotations

import numpy as np

from .jit import jit

EXP_MASK = np.uint32(0x7F800000)
SIGN_MASK = np.uint32(0x80000000)
MANT_MASK = np.uint32(0x007FFFFF)
CANONICAL_NAN = np.uint32(0x7FFFFFFF)


@jit(accepts=dict(u="uint32"))
def flush_bits(u: np.uint32) -> np.uint32:
    """The word of the mode-Z value read from word ``u``: subnormal -> signed zero, NaN -> ``0x7FFFFFFF``.

    Parameters
    ----------
    u : numpy.uint32

    Returns
    -------
    numpy.uint32

    Examples
    --------
    >>> hex(flush_bits(np.uint32(0x80000001))), hex(flush_bits(np.uint32(0xFFC00000)))
    ('0x80000000', '0x7fffffff')
    """
    u = np.uint32(u)
    e = u & EXP_MASK
    if e == 0:
        return np.uint32(u & SIGN_MASK)
    if e == EXP_MASK and (u & MANT_MASK) != 0:
        return CANONICAL_NAN
    return u


@jit(accepts=dict(u="uint32"))
def from_bits(u: np.uint32) -> np.float32:
    """``ftz_from_bits``: read a word as f32 through the flush/NaN rule.

    Parameters
    ----------
    u : numpy.uint32

    Returns
    -------
    numpy.float32

    Examples
    --------
    >>> float(from_bits(np.uint32(0x3F800000))), float(from_bits(np.uint32(0x00000001)))
    (1.0, 0.0)
    """
    return np.uint32(flush_bits(u)).view(np.float32)


@jit(accepts=dict(f="float32"))
def bits(f: np.float32) -> np.uint32:
    """``ftz_bits``: the word of the flushed value of ``f``.

    Parameters
    ----------
    f : numpy.float32

    Returns
    -------
    numpy.uint32

    Examples
    --------
    >>> hex(bits(np.float32(-1e-40))), hex(bits(np.float32("nan")))
    ('0x80000000', '0x7fffffff')
    """
    return flush_bits(np.float32(f).view(np.uint32))


@jit(accepts=dict(f="float32"))
def flush(f: np.float32) -> np.float32:
    """The mode-Z value of ``f``: a subnormal as the zero of its sign, a NaN as the canonical NaN.

    Parameters
    ----------
    f : numpy.float32

    Returns
    -------
    numpy.float32

    Examples
    --------
    >>> float(flush(np.float32(2.5))), float(flush(np.float32(1e-40)))
    (2.5, 0.0)
    """
    return from_bits(np.float32(f).view(np.uint32))


@jit(accepts=dict(f="float32"))
def flush_subnormal(f: np.float32) -> np.float32:
    """A subnormal as the zero of its sign; NaNs left as they are.

    Parameters
    ----------
    f : numpy.float32

    Returns
    -------
    numpy.float32

    Examples
    --------
    >>> hex(np.float32(flush_subnormal(np.float32("nan"))).view(np.uint32))  # the NaN stays
    '0x7fc00000'
    """
    u = np.float32(f).view(np.uint32)
    if (u & EXP_MASK) == 0:
        return np.uint32(u & SIGN_MASK).view(np.float32)
    return np.float32(f)


@jit(accepts=dict(a="float32", b="float32"))
def add(a: np.float32, b: np.float32) -> np.float32:
    """``a + b`` in float mode Z: ``flush(flush(a) + flush(b))``.

    Parameters
    ----------
    a, b : numpy.float32

    Returns
    -------
    numpy.float32

    Examples
    --------
    >>> float(add(np.float32(1.0), np.float32(2.0))), float(add(np.float32(1e-40), np.float32(1e-40)))
    (3.0, 0.0)
    """
    return flush(np.float32(flush(a) + flush(b)))


@jit(accepts=dict(a="float32", b="float32"))
def sub(a: np.float32, b: np.float32) -> np.float32:
    """``a - b`` in float mode Z: ``flush(flush(a) - flush(b))``.

    Parameters
    ----------
    a, b : numpy.float32

    Returns
    -------
    numpy.float32

    Examples
    --------
    >>> float(sub(np.float32(1.0), np.float32(1e-40)))
    1.0
    """
    return flush(np.float32(flush(a) - flush(b)))


@jit(accepts=dict(a="float32", b="float32"))
def mul(a: np.float32, b: np.float32) -> np.float32:
    """``a * b`` in float mode Z: ``flush(flush(a) * flush(b))``, underflow decided after rounding.

    Parameters
    ----------
    a, b : numpy.float32

    Returns
    -------
    numpy.float32

    Examples
    --------
    >>> a, b = np.uint32(0x00800000).view(np.float32), np.uint32(0x3F7FFFFF).view(np.float32)
    >>> hex(np.float32(mul(a, b)).view(np.uint32))  # rounds up to the smallest normal (hardware FTZ gives 0)
    '0x800000'
    """
    return flush(np.float32(flush(a) * flush(b)))


@jit(accepts=dict(a="float32", b="float32"))
def div(a: np.float32, b: np.float32) -> np.float32:
    """``a / b`` in float mode Z: ``flush(flush(a) / flush(b))``; a zero divisor gives inf or the canonical NaN.

    Parameters
    ----------
    a, b : numpy.float32

    Returns
    -------
    numpy.float32

    Examples
    --------
    >>> zero = np.float32(0.0)
    >>> float(div(np.float32(1.0), zero)), hex(np.float32(div(zero, zero)).view(np.uint32))
    (inf, '0x7fffffff')
    """
    # float32 / float32 stays float32 in numba; a zero divisor gives inf or NaN as IEEE says.
    return flush(np.float32(flush(a) / flush(b)))


@jit(accepts=dict(u="uint32"))
def from_u32(u: np.uint32) -> np.float32:
    """u32 -> f32, round to nearest even (LLVM ``uitofp``), then the flush rule.

    Parameters
    ----------
    u : numpy.uint32

    Returns
    -------
    numpy.float32

    Examples
    --------
    >>> float(from_u32(np.uint32(16777217)))  # 2**24 + 1: a tie, to even
    16777216.0
    """
    return flush(np.float32(np.uint32(u)))


@jit(accepts=dict(a="float32[...]"))
def bits_array(a: np.ndarray) -> np.ndarray:
    """``bits`` of every element of a float32 array (any shape), as a new uint32 array.

    Parameters
    ----------
    a : numpy.ndarray

    Returns
    -------
    numpy.ndarray

    Examples
    --------
    >>> [hex(w) for w in bits_array(np.array([1.0, 1e-40, np.nan], dtype=np.float32)).tolist()]
    ['0x3f800000', '0x0', '0x7fffffff']
    """
    out = np.empty(a.shape, dtype=np.uint32)
    for i in range(a.size):
        out.flat[i] = bits(a.flat[i])
    return out


@jit(accepts=dict(u="uint32[...]"))
def from_bits_array(u: np.ndarray) -> np.ndarray:
    """``from_bits`` of every element of a uint32 array (any shape), as a new float32 array.

    Parameters
    ----------
    u : numpy.ndarray

    Returns
    -------
    numpy.ndarray

    Examples
    --------
    >>> from_bits_array(np.array([0x3F800000, 0x00000001], dtype=np.uint32)).tolist()
    [1.0, 0.0]
    """
    out = np.empty(u.shape, dtype=np.float32)
    for i in range(u.size):
        out.flat[i] = from_bits(u.flat[i])
    return out


def flush_words(u: np.ndarray) -> np.ndarray:
    """``flush_bits`` of every word of an array (any shape), in numpy (for Python callers).

    Parameters
    ----------
    u : array_like

    Returns
    -------
    numpy.ndarray

    Examples
    --------
    >>> words = np.array([0x80000001, 0xFFC00000, 0x3F800000], dtype=np.uint32)
    >>> [hex(w) for w in flush_words(words).tolist()]
    ['0x80000000', '0x7fffffff', '0x3f800000']
    """
    u = np.asarray(u, dtype=np.uint32)
    e = u & EXP_MASK
    out = np.where(e == 0, u & SIGN_MASK, u)
    return np.where((e == EXP_MASK) & ((u & MANT_MASK) != 0), CANONICAL_NAN, out).astype(np.uint32)
