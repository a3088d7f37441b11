"""Float mode Z (SPEC section 2): IEEE binary32, round to nearest even, subnormals flushed.

Every operation reads a subnormal input as a zero of the same sign, rounds the exact result as
ordinary IEEE float32 arithmetic does (gradual underflow included), then writes a subnormal result
as a zero of the same sign and any NaN as the canonical NaN ``0x7FFFFFFF``.  The flush is done on
the uint32 bits of ordinary float32 results: no fastmath (which would allow FMA contraction and
reassociation) and no hardware FTZ (which decides underflow before rounding, so
``0x00800000 * 0x3F7FFFFF`` would give 0 instead of ``0x00800000``).  Kernels compile with
``error_model="numpy"`` so that a division by zero gives inf or NaN, as IEEE says, not an exception.

Two flushes are offered: :func:`flush` applies the whole rule, :func:`flush_subnormal` only the
subnormal part.  Inside a kernel whose inputs were flushed once, ``flush_subnormal`` after each
operation gives the same bits as ``flush``: an add, sub, mul or div with a NaN operand always
yields a NaN, so canonicalising NaNs where words leave the kernel (:func:`bits`) is enough.
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
    """The word of the mode-Z value read from word ``u`` (subnormal -> signed zero, NaN -> canonical).

    Parameters
    ----------
    u : numpy.uint32
        A float32's bits.

    Returns
    -------
    numpy.uint32
        ``u`` itself for a zero, a normal number or an infinity; the zero of ``u``'s sign for a
        subnormal; ``0x7FFFFFFF`` for any NaN.

    Raises
    ------
    TypeError
        When ``u`` is not a ``numpy.uint32`` (a Python int would compile an int64 variant).

    See Also
    --------
    flush_words : the same rule on a whole array, in numpy.
    bits : the same rule from a float32.

    Examples
    --------
    >>> import numpy as np
    >>> from meshnb.floatz import flush_bits
    >>> hex(flush_bits(np.uint32(0x80000001)))  # the smallest negative subnormal
    '0x80000000'
    >>> hex(flush_bits(np.uint32(0xFFC00000)))  # a NaN
    '0x7fffffff'
    >>> hex(flush_bits(np.uint32(0x3F800000)))  # 1.0
    '0x3f800000'
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
        A float32's bits.

    Returns
    -------
    numpy.float32
        The mode-Z value: a subnormal reads as a signed zero, a NaN as the canonical NaN.

    Raises
    ------
    TypeError
        When ``u`` is not a ``numpy.uint32``.

    See Also
    --------
    bits : the other way.
    from_bits_array : of a whole array.

    Examples
    --------
    >>> import numpy as np
    >>> from meshnb.floatz import from_bits
    >>> float(from_bits(np.uint32(0x3F800000)))
    1.0
    >>> float(from_bits(np.uint32(0x00000001)))  # the smallest subnormal
    0.0
    """
    return np.uint32(flush_bits(u)).view(np.float32)


@jit(accepts=dict(f="float32"))
def bits(f: np.float32) -> np.uint32:
    """``ftz_bits``: the word of the flushed value of ``f``.

    Parameters
    ----------
    f : numpy.float32
        A value.

    Returns
    -------
    numpy.uint32
        The bits of its mode-Z value (a NaN's are ``0x7FFFFFFF``).

    Raises
    ------
    TypeError
        When ``f`` is not a ``numpy.float32`` (a Python float is a float64).

    See Also
    --------
    from_bits : the other way.
    bits_array : of a whole array.

    Examples
    --------
    >>> import numpy as np
    >>> from meshnb.floatz import bits
    >>> hex(bits(np.float32(-1e-40)))  # a subnormal: the zero of its sign
    '0x80000000'
    >>> hex(bits(np.float32("nan")))
    '0x7fffffff'
    >>> bits(0.5)  # a Python float would compile a float64 variant: refused  # doctest: +IGNORE_EXCEPTION_DETAIL
    Traceback (most recent call last):
    ...
    TypeError: meshnb.floatz.bits: argument 'f' must be a numpy float32 (np.float32), not a Python float
    """
    return flush_bits(np.float32(f).view(np.uint32))


@jit(accepts=dict(f="float32"))
def flush(f: np.float32) -> np.float32:
    """The mode-Z value of ``f``.

    Parameters
    ----------
    f : numpy.float32
        A value.

    Returns
    -------
    numpy.float32
        ``f``, except a subnormal (a zero of the same sign) and a NaN (the canonical NaN).

    Raises
    ------
    TypeError
        When ``f`` is not a ``numpy.float32``.

    See Also
    --------
    flush_subnormal : the subnormal part of the rule only.

    Examples
    --------
    >>> import numpy as np
    >>> from meshnb.floatz import flush
    >>> float(flush(np.float32(2.5))), float(flush(np.float32(1e-40)))
    (2.5, 0.0)
    """
    return from_bits(np.float32(f).view(np.uint32))


@jit(accepts=dict(f="float32"))
def flush_subnormal(f: np.float32) -> np.float32:
    """Subnormal -> zero of the same sign; NaNs left as they are (see the module docstring).

    Parameters
    ----------
    f : numpy.float32
        A value.

    Returns
    -------
    numpy.float32
        ``f``, or the zero of its sign where it is subnormal.

    Raises
    ------
    TypeError
        When ``f`` is not a ``numpy.float32``.

    See Also
    --------
    flush : the whole rule (NaNs canonical too).

    Examples
    --------
    >>> import numpy as np
    >>> from meshnb.floatz import flush_subnormal
    >>> hex(np.float32(flush_subnormal(np.float32(-1e-40))).view(np.uint32))
    '0x80000000'
    >>> hex(np.float32(flush_subnormal(np.float32("nan"))).view(np.uint32))  # the NaN stays
    '0x7fc00000'
    """
    u = np.float32(f).view(np.uint32)
    if (u & EXP_MASK) == 0:
        return np.uint32(u & SIGN_MASK).view(np.float32)
    return np.float32(f)


@jit(accepts=dict(a="float32", b="float32"))
def add(a: np.float32, b: np.float32) -> np.float32:
    """``a + b`` in float mode Z: the inputs flushed, the IEEE result rounded to nearest even, then flushed.

    Parameters
    ----------
    a, b : numpy.float32
        The operands.

    Returns
    -------
    numpy.float32
        ``flush(flush(a) + flush(b))``.

    Raises
    ------
    TypeError
        When an operand is not a ``numpy.float32``.

    Examples
    --------
    >>> import numpy as np
    >>> from meshnb.floatz import add
    >>> float(add(np.float32(1.0), np.float32(2.0)))
    3.0
    >>> float(add(np.float32(1e-40), np.float32(1e-40)))  # subnormal inputs read as zeros
    0.0
    """
    return flush(np.float32(flush(a) + flush(b)))


@jit(accepts=dict(a="float32", b="float32"))
def sub(a: np.float32, b: np.float32) -> np.float32:
    """``a - b`` in float mode Z: the inputs flushed, the IEEE result rounded to nearest even, then flushed.

    Parameters
    ----------
    a, b : numpy.float32
        The operands.

    Returns
    -------
    numpy.float32
        ``flush(flush(a) - flush(b))``.

    Raises
    ------
    TypeError
        When an operand is not a ``numpy.float32``.

    Examples
    --------
    >>> import numpy as np
    >>> from meshnb.floatz import sub
    >>> float(sub(np.float32(1.0), np.float32(1e-40)))
    1.0
    """
    return flush(np.float32(flush(a) - flush(b)))


@jit(accepts=dict(a="float32", b="float32"))
def mul(a: np.float32, b: np.float32) -> np.float32:
    """``a * b`` in float mode Z: the inputs flushed, the IEEE result rounded to nearest even, then flushed.

    Parameters
    ----------
    a, b : numpy.float32
        The operands.

    Returns
    -------
    numpy.float32
        ``flush(flush(a) * flush(b))``; underflow is decided after rounding, so a product that
        rounds up to the smallest normal stays normal.

    Raises
    ------
    TypeError
        When an operand is not a ``numpy.float32``.

    Examples
    --------
    >>> import numpy as np
    >>> from meshnb.floatz import mul
    >>> hex(np.float32(mul(np.float32(1e-20), np.float32(1e-20))).view(np.uint32))  # underflow: zero
    '0x0'
    >>> a, b = np.uint32(0x00800000).view(np.float32), np.uint32(0x3F7FFFFF).view(np.float32)
    >>> hex(np.float32(mul(a, b)).view(np.uint32))  # rounds up to the smallest normal (hardware FTZ gives 0)
    '0x800000'
    """
    return flush(np.float32(flush(a) * flush(b)))


@jit(accepts=dict(a="float32", b="float32"))
def div(a: np.float32, b: np.float32) -> np.float32:
    """``a / b`` in float mode Z: the inputs flushed, the IEEE result rounded to nearest even, then flushed.

    Parameters
    ----------
    a, b : numpy.float32
        The operands.

    Returns
    -------
    numpy.float32
        ``flush(flush(a) / flush(b))``; a zero divisor gives an infinity or the canonical NaN,
        as IEEE says.

    Raises
    ------
    TypeError
        When an operand is not a ``numpy.float32``.

    Examples
    --------
    >>> import numpy as np
    >>> from meshnb.floatz import div
    >>> float(div(np.float32(1.0), np.float32(0.0)))
    inf
    >>> hex(np.float32(div(np.float32(0.0), np.float32(0.0))).view(np.uint32))
    '0x7fffffff'
    """
    # float32 / float32 stays float32 in numba; a zero divisor gives inf or NaN as IEEE says.
    return flush(np.float32(flush(a) / flush(b)))


@jit(accepts=dict(u="uint32"))
def from_u32(u: np.uint32) -> np.float32:
    """u32 -> f32, round to nearest even (LLVM ``uitofp``), then the flush rule.

    Parameters
    ----------
    u : numpy.uint32
        An unsigned integer.

    Returns
    -------
    numpy.float32
        The float32 nearest ``u`` (ties to even).

    Raises
    ------
    TypeError
        When ``u`` is not a ``numpy.uint32``.

    Examples
    --------
    >>> import numpy as np
    >>> from meshnb.floatz import from_u32
    >>> float(from_u32(np.uint32(16777217)))  # 2**24 + 1: a tie, to even
    16777216.0
    """
    return flush(np.float32(np.uint32(u)))


@jit(accepts=dict(a="float32[...]"))
def bits_array(a: np.ndarray) -> np.ndarray:
    """``bits`` of every element of a float32 array, as a new uint32 array.

    Parameters
    ----------
    a : numpy.ndarray
        float32, any shape.

    Returns
    -------
    numpy.ndarray
        uint32, ``a``'s shape.

    Raises
    ------
    TypeError
        When ``a`` is not a float32 array.

    Examples
    --------
    >>> import numpy as np
    >>> from meshnb.floatz import bits_array
    >>> [hex(w) for w in bits_array(np.array([1.0, 1e-40, np.nan], dtype=np.float32)).tolist()]
    ['0x3f800000', '0x0', '0x7fffffff']
    """
    out = np.empty(a.shape, dtype=np.uint32)
    for i in range(a.size):
        out.flat[i] = bits(a.flat[i])
    return out


@jit(accepts=dict(u="uint32[...]"))
def from_bits_array(u: np.ndarray) -> np.ndarray:
    """``from_bits`` of every element of a uint32 array, as a new float32 array.

    Parameters
    ----------
    u : numpy.ndarray
        uint32, any shape.

    Returns
    -------
    numpy.ndarray
        float32, ``u``'s shape.

    Raises
    ------
    TypeError
        When ``u`` is not a uint32 array.

    Examples
    --------
    >>> import numpy as np
    >>> from meshnb.floatz import from_bits_array
    >>> from_bits_array(np.array([0x3F800000, 0x00000001], dtype=np.uint32)).tolist()
    [1.0, 0.0]
    """
    out = np.empty(u.shape, dtype=np.float32)
    for i in range(u.size):
        out.flat[i] = from_bits(u.flat[i])
    return out


def flush_words(u: np.ndarray) -> np.ndarray:
    """``flush_bits`` of every word of a uint32 array (any shape), as a new array: numpy masks, for
    the Python layer (no kernel calls it).

    Parameters
    ----------
    u : array_like
        Words (converted to uint32).

    Returns
    -------
    numpy.ndarray
        uint32, ``u``'s shape.

    See Also
    --------
    flush_bits : one word, in njit code.

    Examples
    --------
    >>> import numpy as np
    >>> from meshnb.floatz import flush_words
    >>> words = np.array([0x80000001, 0xFFC00000, 0x3F800000], dtype=np.uint32)
    >>> [hex(w) for w in flush_words(words).tolist()]
    ['0x80000000', '0x7fffffff', '0x3f800000']
    """
    u = np.asarray(u, dtype=np.uint32)
    e = u & EXP_MASK
    out = np.where(e == 0, u & SIGN_MASK, u)
    return np.where((e == EXP_MASK) & ((u & MANT_MASK) != 0), CANONICAL_NAN, out).astype(np.uint32)
