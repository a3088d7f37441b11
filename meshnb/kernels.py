"""The numeric core (SPEC sections 4-6): samples, step_sums, apply, loss, and the step loop.

All kernels are pure ``@njit`` functions over arrays and scalars.  ``z`` selects float mode Z
(the product) or plain IEEE float32 (``z=False``: only for showing what mode Z changes).

The step loop reads the samples once per task into lane-major batch tables (``batches``): lane
``l`` of batch ``g`` is sample ``g + 8 l``, with ``x^2`` and ``x^3`` precomputed (SPEC 5 allows
it).  Since every value inside the loop is then a flushed result, each operation needs only the
subnormal flush; NaNs are canonicalised where words leave the kernel (see ``floatz``).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from .floatz import add, bits, div, flush, flush_subnormal, from_bits, from_u32, mul, sub

SAMPLES = 256
WARP = 32
BATCHES = SAMPLES // WARP
NSUMS = 5  # e, e x, e x^2, e x^3, e^2

_U64_255 = np.uint64(255)
_U64_7 = np.uint64(7)
_U64_MASK32 = np.uint64(0xFFFFFFFF)


@njit(cache=True, error_model="numpy")
def _res(r: np.float32, z: bool) -> np.float32:
    """A result inside the loop: subnormal flush in mode Z, untouched in IEEE mode."""
    if z:
        return flush_subnormal(r)
    return r


@njit(cache=True, error_model="numpy")
def _word(f: np.float32, z: bool) -> np.uint32:
    """A word leaving the kernel (page, trace, exchange slot)."""
    if z:
        return bits(f)
    return np.float32(f).view(np.uint32)


@njit(cache=True, error_model="numpy")
def _read(u: np.uint32, z: bool) -> np.float32:
    """A word entering the kernel from the page (``ftz_from_bits`` in mode Z)."""
    if z:
        return from_bits(u)
    return np.uint32(u).view(np.float32)


@njit(cache=True, error_model="numpy")
def sin_pi_f32(x: np.float32) -> np.float32:
    """sin(pi x) rounded to f32: f64 sin on the exactly reduced argument, sign from x (SPEC 4)."""
    ax = abs(np.float64(x))
    r = 1.0 - ax if ax > 0.5 else ax  # exact: x is an f32 in [-1, 1]
    y = np.float32(np.sin(np.pi * r))
    if np.float32(x).view(np.uint32) & np.uint32(0x80000000):
        return -y
    return y


@njit(cache=True, error_model="numpy")
def samples() -> tuple[np.ndarray, np.ndarray]:
    """X and Y of SPEC section 4 (256 float32 each)."""
    xs = np.empty(SAMPLES, dtype=np.float32)
    ys = np.empty(SAMPLES, dtype=np.float32)
    h = div(np.float32(2.0), from_u32(np.uint32(255)))
    for i in range(SAMPLES):
        x = add(np.float32(-1.0), mul(from_u32(np.uint32(i)), h))
        xs[i] = x
        ys[i] = sin_pi_f32(x)
    return xs, ys


@njit(cache=True, error_model="numpy")
def batches(xs: np.ndarray, ys: np.ndarray, z: bool) -> np.ndarray:
    """Lane-major tables ``[4, BATCHES, WARP]`` of x, x^2, x^3 and y (inputs flushed once)."""
    tab = np.empty((4, BATCHES, WARP), dtype=np.float32)
    for g in range(BATCHES):
        for lane in range(WARP):
            i = g + BATCHES * lane
            x = flush(xs[i]) if z else xs[i]
            x2 = _res(x * x, z)
            tab[0, g, lane] = x
            tab[1, g, lane] = x2
            tab[2, g, lane] = _res(x2 * x, z)
            tab[3, g, lane] = flush(ys[i]) if z else ys[i]
    return tab


@njit(cache=True, error_model="numpy")
def _sums_into(p: np.ndarray, tab: np.ndarray, g: int, z: bool, v: np.ndarray, out: np.ndarray) -> None:
    """step_sums of batch ``g`` into ``out[5]``; ``v`` is a ``[5, WARP]`` scratch."""
    a = p[0]
    b = p[1]
    c = p[2]
    d = p[3]
    xb = tab[0, g]
    x2b = tab[1, g]
    x3b = tab[2, g]
    yb = tab[3, g]
    for lane in range(WARP):
        x = xb[lane]
        pred = _res(_res(_res(_res(_res(_res(d * x, z) + c, z) * x, z) + b, z) * x, z) + a, z)
        e = _res(pred - yb[lane], z)
        v[0, lane] = e
        v[1, lane] = _res(e * x, z)
        v[2, lane] = _res(e * x2b[lane], z)
        v[3, lane] = _res(e * x3b[lane], z)
        v[4, lane] = _res(e * e, z)
    # Butterfly, levels 16, 8, 4, 2, 1.  Lane l and lane l ^ o end each level with the same sum
    # (add is commutative bit for bit, NaNs aside, and those are canonicalised on output), so
    # lane 0's value needs only the lower half of each level.
    o = WARP // 2
    while o >= 1:
        for j in range(NSUMS):
            for lane in range(o):
                v[j, lane] = _res(v[j, lane] + v[j, lane + o], z)
        o //= 2
    for j in range(NSUMS):
        out[j] = v[j, 0]


@njit(cache=True, error_model="numpy")
def _apply(p: np.ndarray, sums: np.ndarray, lr: np.float32, inv: np.float32, z: bool) -> None:
    for j in range(4):
        p[j] = _res(p[j] - _res(lr * _res(sums[j] * inv, z), z), z)


@njit(cache=True, error_model="numpy")
def step_sums(p: np.ndarray, xs: np.ndarray, ys: np.ndarray, off: np.uint32, z: bool = True) -> np.ndarray:
    """SPEC 5: the five sums of batch ``off mod 8`` for params ``p`` (float32[4])."""
    tab = batches(xs, ys, z)
    q = np.empty(4, dtype=np.float32)
    for j in range(4):
        q[j] = flush(p[j]) if z else p[j]
    v = np.empty((NSUMS, WARP), dtype=np.float32)
    out = np.empty(NSUMS, dtype=np.float32)
    _sums_into(q, tab, int(np.uint32(off) % np.uint32(BATCHES)), z, v, out)
    for j in range(NSUMS):
        out[j] = np.uint32(_word(out[j], z)).view(np.float32)
    return out


@njit(cache=True, error_model="numpy")
def apply(p: np.ndarray, sums: np.ndarray, lr: np.float32, inv: np.float32) -> None:
    """SPEC 6, in place: ``p[j] = sub(p[j], mul(lr, mul(sums[j], inv)))``."""
    for j in range(4):
        p[j] = sub(p[j], mul(lr, mul(sums[j], inv)))


@njit(cache=True, error_model="numpy")
def loss(sums: np.ndarray, inv: np.float32) -> np.float32:
    """SPEC 6: ``mul(sums[4], inv)``, the step's mean squared error before the update."""
    return mul(sums[4], inv)


@njit(cache=True, error_model="numpy")
def fold(slots: np.ndarray, z: bool = True) -> np.ndarray:
    """The cluster total: slot words ``[N, >=5]`` read with ``ftz_from_bits``, added in system order."""
    out = np.empty(NSUMS, dtype=np.float32)
    for j in range(NSUMS):
        acc = _read(slots[0, j], z)
        for m in range(1, slots.shape[0]):
            acc = _res(acc + _read(slots[m, j], z), z)
        out[j] = np.uint32(_word(acc, z)).view(np.float32)
    return out


@njit(cache=True, error_model="numpy")
def run_steps(
    header: np.ndarray,
    xs: np.ndarray,
    ys: np.ndarray,
    loss_ring: np.ndarray,
    base: np.uint64,
    count: np.uint32,
    trace: np.ndarray,
    z: bool,
) -> None:
    """``count`` steps of one system without a group, from step ``base`` (64-bit, wrapping).

    ``header`` is the page's uint32 words 0..11 (PARAMS is read and written back as words,
    LR and INV_BATCH are read); ``loss_ring`` is the page's LOSS as uint32 words.  Step ``t``
    uses batch ``t mod 8`` (offset ``t * 1 + 0``) and writes its loss word at ``t mod 256``.
    ``trace`` (``[count, 5]`` uint32, or zero rows for none) receives the sums applied.
    """
    p = np.empty(4, dtype=np.float32)
    for j in range(4):
        p[j] = _read(header[j], z)
    lr = _read(header[4], z)
    inv = _read(header[6], z)
    tab = batches(xs, ys, z)
    v = np.empty((NSUMS, WARP), dtype=np.float32)
    sums = np.empty(NSUMS, dtype=np.float32)
    record = trace.shape[0] > 0
    t = np.uint64(base)
    for done in range(count):
        _sums_into(p, tab, int(t & _U64_7), z, v, sums)
        _apply(p, sums, lr, inv, z)
        loss_ring[t & _U64_255] = _word(_res(sums[4] * inv, z), z)
        if record:
            for j in range(NSUMS):
                trace[done, j] = _word(sums[j], z)
        t += np.uint64(1)
    for j in range(4):
        header[j] = _word(p[j], z)


@njit(cache=True, error_model="numpy")
def grouped_sums(header: np.ndarray, tab: np.ndarray, off: np.uint32, z: bool) -> np.ndarray:
    """Own sums of a grouped step as the slot words to publish (``ftz_bits``, words 5..7 zero)."""
    p = np.empty(4, dtype=np.float32)
    for j in range(4):
        p[j] = _read(header[j], z)
    v = np.empty((NSUMS, WARP), dtype=np.float32)
    sums = np.empty(NSUMS, dtype=np.float32)
    _sums_into(p, tab, int(np.uint32(off) % np.uint32(BATCHES)), z, v, sums)
    words = np.zeros(8, dtype=np.uint32)
    for j in range(NSUMS):
        words[j] = _word(sums[j], z)
    return words


@njit(cache=True, error_model="numpy")
def grouped_apply(header: np.ndarray, total: np.ndarray, loss_ring: np.ndarray, t: np.uint64, trace_row: np.ndarray, z: bool) -> None:
    """Apply a cluster fold to the params words in ``header``; write step ``t``'s loss and trace row."""
    p = np.empty(4, dtype=np.float32)
    for j in range(4):
        p[j] = _read(header[j], z)
    lr = _read(header[4], z)
    inv = _read(header[6], z)
    _apply(p, total, lr, inv, z)
    for j in range(4):
        header[j] = _word(p[j], z)
    loss_ring[np.uint64(t) & _U64_255] = _word(_res(total[4] * inv, z), z)
    for j in range(trace_row.shape[0]):
        trace_row[j] = _word(total[j], z)
