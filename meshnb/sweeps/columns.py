"""A sweep's CSV rows made in njit, by columns, in bulk (measured: docs/performance.md).

Integers in decimal, words and digests in lowercase hex, each float32 as the *shortest* text that
reads back to its bits through a float64 and through a correctly rounded float32 parse alike (the
fewest digits within 0.49 of the smaller neighbour gap); positional from 1e-4 to 1e16, else
``d.ddde±XX``, and ``nan``, ``inf``, ``-0.0`` as Python spells them.  Where the check would need a
power of ten beyond 10^22 a longer text (at most 9 digits) is written (``3e-30`` as ``3.00000001e-30``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from concurrent.futures import Executor, wait

import numpy as np
from llvmlite import ir
from numba import types
from numba.extending import intrinsic

from ..interrupts import WorkerPool
from ..jit import jit

_POW10 = np.array([10.0**k for k in range(23)], dtype=np.float64)  # exact in float64
_ROW_BYTES = 4 * 21 + 6 * 9 + 2 * 20 + 2 * 65 + 2  # integers, hex words, floats, digests, commas' slack


def _int_power(a: float, b: int) -> float:
    """``a ** b`` as numba computes it in njit (squaring; the reciprocal for b < 0)."""
    r, invert, e = 1.0, b < 0, abs(b)
    while e:
        if e & 1:
            r *= a
        e >>= 1
        a *= a
    return 1.0 / r if invert else r


def _scaled_py(x: float, k: int) -> float:
    """``x * 10^k`` in float64: one operation where 10^|k| is exact (|k| <= 22), else two."""
    if k >= 0:
        return x * _POW10_PY[k] if k <= 22 else x * _POW10_PY[22] * _int_power(10.0, k - 22)
    return x / _POW10_PY[-k] if -k <= 22 else x / _POW10_PY[22] / _int_power(10.0, -k - 22)


_POW10_PY = [float(v) for v in _POW10]
# Tables for the njit formatter, made in Python by the same float64 operations (tests check them):
_POW10_REST = np.array([_int_power(10.0, n) for n in range(32)], dtype=np.float64)  # 10.0 ** n past 10^22
_TENS = np.array([_scaled_py(1.0, e) for e in range(-46, 41)], dtype=np.float64)  # 10^e as _scaled makes it
_TENS_AT = 46  # _TENS[e + _TENS_AT] is 10^e
_POW2 = np.array([math.ldexp(1.0, ex - 150) for ex in range(256)], dtype=np.float64)  # a float32's unit
_INV10 = np.array([10.0**-k for k in range(10)], dtype=np.float64)  # near 10^-k: a filter's scale
_POW10_U = np.array([10**k for k in range(20)], dtype=np.uint64)  # every decimal length of a uint64
# Two characters as one little-endian integer (the first in the low byte): a byte's hex, a number < 100.
_HEX2 = np.array([ord(f"{b:02x}"[0]) | ord(f"{b:02x}"[1]) << 8 for b in range(256)], dtype=np.uint64)
_DEC2 = np.array([ord(f"{v:02d}"[0]) | ord(f"{v:02d}"[1]) << 8 for v in range(100)], dtype=np.uint64)
_SLACK = 8  # bytes past the text that an 8-byte store may write (overwritten by what follows, or cut)


# The formatter writes through the output's address (an array passed to a helper costs two atomics a call).


@intrinsic
def _address(typingctx, arr):
    """The address of a contiguous uint8 array's first byte (its caller keeps the array alive)."""
    if not (isinstance(arr, types.Array) and arr.dtype == types.uint8 and arr.layout == "C"):
        return None

    def codegen(context, builder, sig, args):
        ary = context.make_array(sig.args[0])(context, builder, args[0])
        return builder.ptrtoint(ary.data, ir.IntType(64))

    return types.int64(arr), codegen


def _make_poke(bits: int):
    @intrinsic
    def poke(typingctx, base, at, value):
        """The low ``bits`` of ``value`` (little-endian) at address ``base + at`` (unchecked)."""
        if not all(isinstance(t, types.Integer) for t in (base, at, value)):
            return None

        def codegen(context, builder, sig, args):
            addr = builder.add(
                context.cast(builder, args[0], sig.args[0], types.int64),
                context.cast(builder, args[1], sig.args[1], types.int64),
            )
            word = context.cast(builder, args[2], sig.args[2], types.uint64)
            if bits < 64:
                word = builder.trunc(word, ir.IntType(bits))
            builder.store(word, builder.inttoptr(addr, ir.IntType(bits).as_pointer()), align=1)
            return context.get_dummy_value()

        return types.none(base, at, value), codegen

    return poke


_poke, _poke8 = _make_poke(8), _make_poke(64)


@jit()
def _dec8(v):
    """``v`` (< 10^8) as 8 decimal digits, zero padded, the first in the low byte."""
    v = np.uint64(v)
    hi = v // np.uint64(10000)
    lo = v - hi * np.uint64(10000)
    a = hi // np.uint64(100)
    c = lo // np.uint64(100)
    return (
        _DEC2[a] | _DEC2[hi - a * np.uint64(100)] << np.uint64(16)
        | _DEC2[c] << np.uint64(32) | _DEC2[lo - c * np.uint64(100)] << np.uint64(48)
    )  # fmt: skip


@jit()
def _put_dec(base, at, v, n):
    """``v`` (< 10^n) as exactly ``n`` decimal digits at ``base + at``; the new end."""
    v = np.uint64(v)
    if n <= 8:
        _poke8(base, at, _dec8(v) >> np.uint64(8 * (8 - n)))
    elif n <= 16:
        hi = v // np.uint64(100000000)
        _poke8(base, at, _dec8(hi) >> np.uint64(8 * (16 - n)))
        _poke8(base, at + n - 8, _dec8(v - hi * np.uint64(100000000)))
    else:
        hi = v // np.uint64(10000000000000000)
        v -= hi * np.uint64(10000000000000000)
        mid = v // np.uint64(100000000)
        _poke8(base, at, _dec8(hi) >> np.uint64(8 * (24 - n)))
        _poke8(base, at + n - 16, _dec8(mid))
        _poke8(base, at + n - 8, _dec8(v - mid * np.uint64(100000000)))
    return at + n


@jit()
def _put_uint(base, at, x):
    """``x`` (a non-negative integer) in decimal at ``base + at``; the new end."""
    x = np.uint64(x)
    n = 1
    while n < 20 and x >= _POW10_U[n]:
        n += 1
    return _put_dec(base, at, x, n)


@jit()
def _hex4(w):
    """``w``'s low 32 bits as 8 hex digits, most significant first (the first in the low byte)."""
    w = np.uint64(w)
    return (
        _HEX2[(w >> np.uint64(24)) & np.uint64(255)] | _HEX2[(w >> np.uint64(16)) & np.uint64(255)] << np.uint64(16)
        | _HEX2[(w >> np.uint64(8)) & np.uint64(255)] << np.uint64(32) | _HEX2[w & np.uint64(255)] << np.uint64(48)
    )  # fmt: skip


@jit()
def _hex_bytes(a, b, c, d):
    """Four bytes in this order as 8 hex digits (the first in the low byte)."""
    return _HEX2[a] | _HEX2[b] << np.uint64(16) | _HEX2[c] << np.uint64(32) | _HEX2[d] << np.uint64(48)


@jit()
def _scaled(x, k):
    """``x * 10^k`` in float64 (:func:`_scaled_py`'s operations)."""
    if k >= 0:
        if k <= 22:
            return x * _POW10[k]
        return x * _POW10[22] * _POW10_REST[k - 22]
    if k >= -22:
        return x / _POW10[-k]
    return x / _POW10[22] / _POW10_REST[-k - 22]


@jit()
def _put_f32(base, at, u):
    """The float32 of bits ``u`` as its shortest round-tripping text at ``base + at``; the new end."""
    u = np.int64(u) & 0xFFFFFFFF
    mag = u & 0x7FFFFFFF
    if mag > 0x7F800000:
        _poke8(base, at, 0x6E616E)  # nan
        return at + 3
    if u >> 31:
        _poke(base, at, 45)
        at += 1
    if mag == 0x7F800000:
        _poke8(base, at, 0x666E69)  # inf
        return at + 3
    if mag == 0:
        _poke8(base, at, 0x302E30)  # 0.0
        return at + 3
    ex = mag >> 23
    mant = mag & 0x7FFFFF
    if ex == 0:  # subnormal: m 2^-149, 10^-46 <= x < 10^-37
        gap = _POW2[1]
        x = float(mant) * gap
        e = -46
    else:  # (2^23 + m) 2^(ex - 150), exact; the gap below a power of two is half the one above
        gap = _POW2[ex]
        x = float(mant + 8388608) * gap
        if mant == 0 and ex > 1:
            gap *= 0.5
        e = ((ex - 127) * 78913) >> 18  # floor((ex - 127) log10 2): 10^e <= x < 10^(e + 2)
    while x >= _TENS[e + 1 + _TENS_AT]:
        e += 1
    while x < _TENS[e + _TENS_AT]:
        e -= 1
    near = 0.49 * gap
    # r9 = x 10^(8 - e) filters the lengths: p digits pass only if r9 lies within `near` of a multiple
    # of 10^(9 - p) (r9's error, under 1e-6, is far inside the margin 2^-10); the exact check follows.
    r9 = _scaled(x, 8 - e)
    limit = _scaled(near, 8 - e) + 0.0009765625
    digits = 9
    d = np.int64(0)
    for p in range(1, 9):
        if abs(r9 - np.rint(r9 * _INV10[9 - p]) * _POW10[9 - p]) > limit:
            continue
        d = np.int64(np.rint(_scaled(x, p - 1 - e)))
        ee = e
        if d >= np.int64(_POW10_U[p]):  # rounded up to 10^p: one digit more in the exponent
            d //= 10
            ee = e + 1
        k = ee - p + 1
        if -22 <= k <= 22 and abs(_scaled(np.float64(d), k) - x) < near:  # |k| > 22: no exact check
            e = ee
            digits = p
            break
    if digits == 9:  # 9 digits always read back
        d = np.int64(np.rint(r9))
        if d >= np.int64(_POW10_U[9]):
            d //= 10
            e += 1
    # d holds `digits` significant digits; the decimal exponent of the first is e.
    if 0 <= e < 16:
        if digits <= e + 1:
            at = _put_dec(base, at, d, digits)
            for _ in range(e + 1 - digits):
                _poke(base, at, 48)
                at += 1
            _poke8(base, at, 0x302E)  # .0
            return at + 2
        low = digits - e - 1
        q = d // np.int64(_POW10_U[low])
        at = _put_dec(base, at, q, e + 1)
        _poke(base, at, 46)
        return _put_dec(base, at + 1, d - q * np.int64(_POW10_U[low]), low)
    if -4 <= e < 0:
        _poke8(base, at, 0x303030302E30)  # 0.000: the point and up to 3 zeros
        return _put_dec(base, at + 1 - e, d, digits)
    q = d // np.int64(_POW10_U[digits - 1])
    _poke(base, at, 48 + q)
    at += 1
    if digits > 1:
        _poke(base, at, 46)
        at = _put_dec(base, at + 1, d - q * np.int64(_POW10_U[digits - 1]), digits - 1)
    _poke(base, at, 101)
    _poke(base, at + 1, 45 if e < 0 else 43)
    return _put_dec(base, at + 2, -e if e < 0 else e, 2)  # |e| <= 46: two digits


@jit(nogil=True)
def _rows(first, page, names, name_at, lr_words, lrs, bases, steps, loss, params, digest, trace, out):
    """The CSV rows into ``out`` (large enough, with :data:`_SLACK` bytes more); the bytes written."""
    base = _address(out)
    at = 0
    for k in range(lr_words.shape[0]):
        at = _put_uint(base, at, first + k)
        _poke(base, at, 44)
        at += 1
        p = page[k]
        if name_at.shape[0] > 0:
            for i in range(name_at[p], name_at[p + 1]):
                _poke(base, at, names[i])
                at += 1
        else:
            at = _put_uint(base, at, p)
        _poke(base, at, 44)
        _poke8(base, at + 1, _hex4(lr_words[k]))
        _poke(base, at + 9, 44)
        at = _put_f32(base, at + 10, lrs[k])
        _poke(base, at, 44)
        at = _put_uint(base, at + 1, bases[k])
        _poke(base, at, 44)
        at = _put_uint(base, at + 1, steps)
        _poke(base, at, 44)
        at = _put_f32(base, at + 1, loss[k])
        _poke(base, at, 44)  # the last loss's word too: a NaN's payload and sign have no text
        _poke8(base, at + 1, _hex4(loss[k]))
        at += 9
        for j in range(4):
            _poke(base, at, 44)
            _poke8(base, at + 1, _hex4(params[k, j]))
            at += 9
        _poke(base, at, 44)
        at += 1
        for j in range(0, 32, 4):
            _poke8(base, at, _hex_bytes(digest[k, j], digest[k, j + 1], digest[k, j + 2], digest[k, j + 3]))
            at += 8
        _poke(base, at, 44)
        at += 1
        if trace.shape[0] > 0:
            for j in range(0, 32, 4):
                _poke8(base, at, _hex_bytes(trace[k, j], trace[k, j + 1], trace[k, j + 2], trace[k, j + 3]))
                at += 8
        _poke(base, at, 10)
        at += 1
    return at


def csv_chunks(
    first: int, page_index: np.ndarray, names: list[bytes] | None, lr_words: np.ndarray, lr_read: np.ndarray,
    step_base: np.ndarray, steps: int, last_loss: np.ndarray, params: np.ndarray, digest: np.ndarray,
    trace: np.ndarray | None, threads: int = 1, pool: Executor | None = None,
) -> list[memoryview]:  # fmt: skip
    """The CSV rows of systems ``first ..`` (:data:`meshnb.sweeps.result.CSV_COLUMNS`, no header) as
    consecutive pieces; ``names``: each page's field, quoted.  Below :data:`SMALL_ROWS` rows in Python
    (the same bytes, nothing to compile), else in njit, in up to ``threads`` slices on ``pool`` (None: its own)."""
    n = int(lr_words.shape[0])
    if n < SMALL_ROWS:
        args = (first, page_index, names, lr_words, lr_read, step_base, steps, last_loss, params, digest, trace)
        return [memoryview(_rows_py(*args))]
    name_bytes = b"".join(names) if names is not None else b""
    name_at = np.cumsum([0, *(len(x) for x in names)], dtype=np.int64) if names is not None else np.zeros(0, np.int64)
    row_bytes = _ROW_BYTES + (max((len(x) for x in names), default=0) if names is not None else 0)
    u32 = lambda a: np.ascontiguousarray(a, dtype=np.uint32)
    page, lw, lr = np.ascontiguousarray(page_index, dtype=np.int64), u32(lr_words), u32(lr_read)
    bases, loss = np.ascontiguousarray(step_base, dtype=np.uint64), u32(last_loss)
    par, dig = u32(params).reshape(n, 4), np.ascontiguousarray(digest, dtype=np.uint8).reshape(n, 32)
    tr = np.zeros((0, 32), np.uint8) if trace is None else np.ascontiguousarray(trace, dtype=np.uint8).reshape(n, 32)
    nb = np.frombuffer(name_bytes, dtype=np.uint8) if name_bytes else np.zeros(0, np.uint8)

    def one(lo: int, hi: int) -> memoryview:
        out = np.empty((hi - lo) * row_bytes + _SLACK, dtype=np.uint8)
        end = _rows(
            np.int64(first + lo), page[lo:hi], nb, name_at, lw[lo:hi], lr[lo:hi], bases[lo:hi], np.int64(steps),
            loss[lo:hi], par[lo:hi], dig[lo:hi], tr[lo:hi] if trace is not None else tr, out,
        )  # fmt: skip
        return out.data[:end]

    slices = max(1, min(int(threads), n // SMALL_ROWS))
    cut = [n * i // slices for i in range(slices + 1)]
    if slices == 1:
        return [one(0, n)]
    if pool is None:
        with WorkerPool(slices - 1) as own:
            return _sliced(own, one, cut)
    return _sliced(pool, one, cut)


def _sliced(pool: Executor, one: Callable[[int, int], memoryview], cut: list[int]) -> list[memoryview]:
    """``one`` of each slice, the first on this thread and the rest on ``pool``'s, in order."""
    later = [pool.submit(one, cut[i], cut[i + 1]) for i in range(1, len(cut) - 1)]
    try:
        first = one(cut[0], cut[1])
    finally:
        wait(later)  # every slice ends before this returns or raises
    return [first, *(f.result() for f in later)]


SMALL_ROWS = 2048
"""Fewer rows than this are formatted in Python (about 10 ms for 2048), more in njit."""


def _rows_py(
    first: int, page_index: np.ndarray, names: list[bytes] | None, lr_words: np.ndarray, lr_read: np.ndarray,
    step_base: np.ndarray, steps: int, last_loss: np.ndarray, params: np.ndarray, digest: np.ndarray,
    trace: np.ndarray | None,
) -> bytes:  # fmt: skip
    """The CSV rows in Python, byte for byte :func:`_rows`'s."""
    n = int(lr_words.shape[0])
    u32 = lambda a: np.asarray(a, dtype=np.uint32).reshape(-1).tolist()
    pages = [names[p] for p in np.asarray(page_index).tolist()] if names is not None else None
    lw, lr, loss, par = u32(lr_words), u32(lr_read), u32(last_loss), u32(params)
    bases = np.asarray(step_base, dtype=np.uint64).tolist()
    dig = np.ascontiguousarray(digest, dtype=np.uint8).reshape(n, 32)
    tr = None if trace is None else np.ascontiguousarray(trace, dtype=np.uint8).reshape(n, 32)
    rows = []
    for k in range(n):
        page = pages[k] if pages is not None else str(int(page_index[k])).encode()
        row = (
            f"{first + k},".encode()
            + page
            + f",{lw[k]:08x},{f32_text(lr[k])},{bases[k]},{steps},"
            f"{f32_text(loss[k])},{loss[k]:08x},"
            f"{par[4 * k]:08x},{par[4 * k + 1]:08x},{par[4 * k + 2]:08x},{par[4 * k + 3]:08x},"
            f"{dig[k].tobytes().hex()},{'' if tr is None else tr[k].tobytes().hex()}\n".encode()
        )
        rows.append(row)
    return b"".join(rows)


def f32_text(u: int) -> str:
    """:func:`_put_f32` in Python: the same steps in the same float64 operations."""
    mag = u & 0x7FFFFFFF
    if mag > 0x7F800000:
        return "nan"
    sign = "-" if u >> 31 else ""
    if mag == 0x7F800000:
        return sign + "inf"
    if mag == 0:
        return sign + "0.0"
    ex, mant = mag >> 23, mag & 0x7FFFFF
    if ex == 0:
        x, gap = math.ldexp(float(mant), -149), math.ldexp(1.0, -149)
    else:
        x = math.ldexp(float(mant + 8388608), ex - 150)
        gap = math.ldexp(1.0, ex - 150) * (0.5 if mant == 0 and ex > 1 else 1.0)
    e = math.floor(math.log10(x))
    if _scaled_py(1.0, e) > x:
        e -= 1
    elif _scaled_py(1.0, e + 1) <= x:
        e += 1
    digits, d = 9, 0
    for p in range(1, 10):
        d = round(_scaled_py(x, p - 1 - e))  # half to even, as np.rint
        ee = e
        if d >= 10**p:
            d //= 10
            ee = e + 1
        k = ee - p + 1
        if p == 9 or abs(k) > 22:
            if p < 9:
                continue
            e, digits = ee, 9
            break
        if abs(_scaled_py(float(d), k) - x) < 0.49 * gap:
            e, digits = ee, p
            break
    ds = str(d).rjust(digits, "0")[:digits]
    if -4 <= e < 16:
        if e >= 0:
            whole = (ds + "0" * (e + 1))[: e + 1]
            return sign + whole + "." + (ds[e + 1 :] if digits > e + 1 else "0")
        return sign + "0." + "0" * (-e - 1) + ds
    mant_text = ds[0] + ("." + ds[1:] if digits > 1 else "")
    return sign + mant_text + "e" + ("-" if e < 0 else "+") + f"{abs(e):02d}"


def float_text(bits: int) -> str:
    """One float32's text as the CSV writes it (tests and docs)."""
    buf = np.zeros(32, dtype=np.uint8)
    return buf[: _put_f32_py(buf, np.uint32(bits))].tobytes().decode("ascii")


@jit()
def _put_f32_py(buf, bits):
    return _put_f32(_address(buf), 0, bits)
