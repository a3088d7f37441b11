"""A sweep's CSV rows made in njit, by columns, in bulk: no Python per system.

Numbers are written as: integers in decimal, words and digests in lowercase hex, and each float32
(the LR and the last loss) as the *shortest* decimal text that reads back to the same float32
bits through a float64 (``np.float32(float(text))``, what Python, numpy and pandas do) and through
a correctly rounded float32 parse alike: the fewest significant digits (1 to 9) whose value lies
within 0.49 of the value's smaller neighbour gap, so both reading paths give it back.  Positional
from 1e-4 up to 1e16, else ``d.ddde±XX`` (as Python's ``repr`` spells a float); ``nan``, ``inf``,
``-inf``, ``0.0`` and ``-0.0`` as Python spells them.
"""

from __future__ import annotations

import math

import numpy as np

from ..jit import jit

_HEX = np.frombuffer(b"0123456789abcdef", dtype=np.uint8).copy()
_POW10 = np.array([10.0**k for k in range(23)], dtype=np.float64)  # exact in float64
_ROW_BYTES = 4 * 21 + 5 * 9 + 2 * 20 + 2 * 65 + 2  # integers, hex words, floats, digests, commas' slack


@jit()
def _put_uint(buf, at, x):
    """``x`` (a non-negative integer) in decimal at ``buf[at:]``; the new end."""
    x = np.uint64(x)
    n = 1
    y = x // np.uint64(10)
    while y:
        n += 1
        y //= np.uint64(10)
    for i in range(n - 1, -1, -1):
        buf[at + i] = np.uint8(48 + x % np.uint64(10))
        x //= np.uint64(10)
    return at + n


@jit()
def _put_hex(buf, at, x, digits):
    x = np.uint64(x)
    for i in range(digits - 1, -1, -1):
        buf[at + i] = _HEX[x & np.uint64(15)]
        x >>= np.uint64(4)
    return at + digits


@jit()
def _scaled(x, k):
    """``x * 10^k`` in float64: one correctly rounded operation where 10^|k| is exact (|k| <= 22)."""
    if k >= 0:
        if k <= 22:
            return x * _POW10[k]
        return x * _POW10[22] * 10.0 ** (k - 22)
    if -k <= 22:
        return x / _POW10[-k]
    return x / _POW10[22] / 10.0 ** (-k - 22)


@jit()
def _put_f32(buf, at, u):
    """The float32 of bits ``u`` as its shortest round-tripping text (module docstring); the new end."""
    u = np.uint32(u)
    neg = (u >> np.uint32(31)) != np.uint32(0)
    mag = u & np.uint32(0x7FFFFFFF)
    if mag > np.uint32(0x7F800000):
        buf[at], buf[at + 1], buf[at + 2] = 110, 97, 110  # nan
        return at + 3
    if neg:
        buf[at] = 45
        at += 1
    if mag == np.uint32(0x7F800000):
        buf[at], buf[at + 1], buf[at + 2] = 105, 110, 102  # inf
        return at + 3
    if mag == np.uint32(0):
        buf[at], buf[at + 1], buf[at + 2] = 48, 46, 48  # 0.0
        return at + 3
    ex = int(mag >> np.uint32(23))
    mant = int(mag & np.uint32(0x7FFFFF))
    if ex == 0:  # subnormal: m 2^-149
        x = math.ldexp(float(mant), -149)
        gap = math.ldexp(1.0, -149)
    else:  # (2^23 + m) 2^(e - 150), exact in float64; the gap below a power of two is half the one above
        x = math.ldexp(float(mant + 8388608), ex - 150)
        gap = math.ldexp(1.0, ex - 150) * (0.5 if mant == 0 and ex > 1 else 1.0)
    e = int(np.floor(np.log10(x)))
    if _scaled(1.0, e) > x:
        e -= 1
    elif _scaled(1.0, e + 1) <= x:
        e += 1
    digits = 9
    d = np.int64(0)
    for p in range(1, 10):
        d = np.int64(np.rint(_scaled(x, p - 1 - e)))
        ee = e
        if d >= np.int64(_POW10[p]):  # rounded up to 10^p: one digit more in the exponent
            d //= 10
            ee = e + 1
        k = ee - p + 1
        if p == 9 or abs(k) > 22:  # 9 digits always read back; |k| > 22: no exact check, take 9
            if p < 9:
                continue
            e = ee
            digits = 9
            break
        if abs(_scaled(np.float64(d), k) - x) < 0.49 * gap:
            e = ee
            digits = p
            break
    # d holds `digits` significant digits; the decimal exponent of the first is e.
    ds = np.empty(9, dtype=np.uint8)
    for i in range(digits - 1, -1, -1):
        ds[i] = np.uint8(48 + d % 10)
        d //= 10
    if -4 <= e < 16:
        if e >= 0:
            for i in range(e + 1):
                buf[at] = ds[i] if i < digits else 48
                at += 1
            buf[at] = 46
            at += 1
            if digits > e + 1:
                for i in range(e + 1, digits):
                    buf[at] = ds[i]
                    at += 1
            else:
                buf[at] = 48
                at += 1
        else:
            buf[at], buf[at + 1] = 48, 46
            at += 2
            for _ in range(-e - 1):
                buf[at] = 48
                at += 1
            for i in range(digits):
                buf[at] = ds[i]
                at += 1
        return at
    buf[at] = ds[0]
    at += 1
    if digits > 1:
        buf[at] = 46
        at += 1
        for i in range(1, digits):
            buf[at] = ds[i]
            at += 1
    buf[at] = 101
    buf[at + 1] = 45 if e < 0 else 43
    at += 2
    ae = -e if e < 0 else e
    if ae < 10:
        buf[at] = 48
        at += 1
    return _put_uint(buf, at, ae)


@jit(nogil=True)
def _rows(first, page, names, name_at, lr_words, lrs, bases, steps, loss, params, digest, trace, out):
    """The CSV rows into ``out`` (large enough: :func:`csv_rows`); the bytes written."""
    at = 0
    for k in range(lr_words.shape[0]):
        at = _put_uint(out, at, first + k)
        out[at] = 44
        at += 1
        p = page[k]
        if name_at.shape[0] > 0:
            for i in range(name_at[p], name_at[p + 1]):
                out[at] = names[i]
                at += 1
        else:
            at = _put_uint(out, at, p)
        out[at] = 44
        at = _put_hex(out, at + 1, lr_words[k], 8)
        out[at] = 44
        at = _put_f32(out, at + 1, lrs[k])
        out[at] = 44
        at = _put_uint(out, at + 1, bases[k])
        out[at] = 44
        at = _put_uint(out, at + 1, steps)
        out[at] = 44
        at = _put_f32(out, at + 1, loss[k])
        for j in range(4):
            out[at] = 44
            at = _put_hex(out, at + 1, params[k, j], 8)
        out[at] = 44
        at += 1
        for j in range(32):
            at = _put_hex(out, at, digest[k, j], 2)
        out[at] = 44
        at += 1
        if trace.shape[0] > 0:
            for j in range(32):
                at = _put_hex(out, at, trace[k, j], 2)
        out[at] = 10
        at += 1
    return at


def csv_rows(
    first: int,
    page_index: np.ndarray,
    names: list[bytes] | None,
    lr_words: np.ndarray,
    lr_read: np.ndarray,
    step_base: np.ndarray,
    steps: int,
    last_loss: np.ndarray,
    params: np.ndarray,
    digest: np.ndarray,
    trace: np.ndarray | None,
) -> bytes:
    """The CSV rows of systems ``first ..`` (no header), each ending in a newline: the columns of
    :data:`meshnb.sweeps.result.CSV_COLUMNS`; ``names``: each page's field, already quoted.  Below
    :data:`SMALL_ROWS` rows in Python (the same bytes: a small sweep's cold start compiles no
    formatter), else in njit."""
    n = int(lr_words.shape[0])
    if n < SMALL_ROWS:
        return _rows_py(first, page_index, names, lr_words, lr_read, step_base, steps, last_loss, params, digest, trace)
    name_bytes = b"".join(names) if names is not None else b""
    name_at = np.cumsum([0, *(len(x) for x in names)], dtype=np.int64) if names is not None else np.zeros(0, np.int64)
    longest = max((len(x) for x in names), default=0) if names is not None else 0
    out = np.empty(n * (_ROW_BYTES + longest), dtype=np.uint8)
    u32 = lambda a: np.ascontiguousarray(a, dtype=np.uint32)
    end = _rows(
        np.int64(first), np.ascontiguousarray(page_index, dtype=np.int64),
        np.frombuffer(name_bytes, dtype=np.uint8) if name_bytes else np.zeros(0, np.uint8), name_at,
        u32(lr_words), u32(lr_read), np.ascontiguousarray(step_base, dtype=np.uint64), np.int64(steps), u32(last_loss),
        u32(params).reshape(n, 4), np.ascontiguousarray(digest, dtype=np.uint8).reshape(n, 32),
        np.zeros((0, 32), np.uint8) if trace is None else np.ascontiguousarray(trace, dtype=np.uint8).reshape(n, 32),
        out,
    )  # fmt: skip
    return out[:end].tobytes()


SMALL_ROWS = 2048
"""Fewer rows than this are formatted in Python (about 10 ms for 2048), more in njit."""


def _rows_py(
    first: int,
    page_index: np.ndarray,
    names: list[bytes] | None,
    lr_words: np.ndarray,
    lr_read: np.ndarray,
    step_base: np.ndarray,
    steps: int,
    last_loss: np.ndarray,
    params: np.ndarray,
    digest: np.ndarray,
    trace: np.ndarray | None,
) -> bytes:
    """:func:`csv_rows` in Python, byte for byte :func:`_rows`'s."""
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
            f"{f32_text(loss[k])},{par[4 * k]:08x},{par[4 * k + 1]:08x},{par[4 * k + 2]:08x},{par[4 * k + 3]:08x},"
            f"{dig[k].tobytes().hex()},{'' if tr is None else tr[k].tobytes().hex()}\n".encode()
        )
        rows.append(row)
    return b"".join(rows)


def _int_power(a: float, b: int) -> float:
    """``a ** b`` as numba computes a float to an integer power in njit (squaring, then the
    reciprocal for b < 0), so that :func:`f32_text` makes :func:`_put_f32`'s every digit."""
    r, invert, e = 1.0, b < 0, abs(b)
    while e:
        if e & 1:
            r *= a
        e >>= 1
        a *= a
    return 1.0 / r if invert else r


def _scaled_py(x: float, k: int) -> float:
    if k >= 0:
        return x * _POW10_PY[k] if k <= 22 else x * _POW10_PY[22] * _int_power(10.0, k - 22)
    return x / _POW10_PY[-k] if -k <= 22 else x / _POW10_PY[22] / _int_power(10.0, -k - 22)


_POW10_PY = [float(v) for v in _POW10]


def f32_text(u: int) -> str:
    """The float32 of bits ``u`` as its shortest round-tripping text, in Python: :func:`_put_f32`'s
    steps in the same float64 operations (module docstring)."""
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
    return buf[: _put_f32_py(buf, bits)].tobytes().decode("ascii")


@jit()
def _put_f32_py(buf, bits):
    return _put_f32(buf, 0, np.uint32(bits))
