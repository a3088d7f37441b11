"""The numeric core (SPEC 4-6), literal: samples, step_sums, apply, loss, fold.

Pure njit functions that follow SPEC one mode-Z op at a time (``z=False``: plain IEEE float32);
the fast loops of :mod:`meshnb.loops` compute the same bits, and the tests hold them to these.
"""

from __future__ import annotations

import math

import numpy as np
from numba.extending import register_jitable

from .floatz import EXP_MASK, SIGN_MASK, bits, flush, flush_subnormal, flush_words, from_bits, mul, sub
from .jit import jit
from .view import FIELDS

SAMPLES = 256
WARP = 32
BATCHES = SAMPLES // WARP
NSUMS = 5  # e, e x, e x^2, e x^3, e^2

# Word offsets of the page's fields, from the view's layout table (numba freezes module
# globals into the machine code as constants).
W_LR, W_STEPS_PER_TASK, W_INV_BATCH = FIELDS["LR"].word, FIELDS["STEPS_PER_TASK"].word, FIELDS["INV_BATCH"].word
W_NEXT_STEP, W_ERR, W_PENDING, W_STEP_HI = (FIELDS[f].word for f in ("NEXT_STEP", "ERR", "PENDING", "STEP_HI"))
W_X, W_Y, W_LOSS = FIELDS["X"].word, FIELDS["Y"].word, FIELDS["LOSS"].word

U64_255 = np.uint64(255)
U64_7 = np.uint64(7)
TAB = BATCHES * WARP  # one table of the four in ``batches``


# --- scalar helpers: one op in mode Z (z=True) or plain IEEE, for the literal kernels -----------


@jit(accepts=dict(r="float32", z="bool"))
def result(r: np.float32, z: bool) -> np.float32:
    """An op's result inside a kernel: ``flush_subnormal`` in mode Z (``z``), untouched in IEEE mode.

    Parameters
    ----------
    r : numpy.float32
    z : bool

    Returns
    -------
    numpy.float32

    Examples
    --------
    >>> float(result(np.float32(1e-40), True)), float(result(np.float32(1e-40), False))
    (0.0, 9.99994610111476e-41)
    """
    if z:
        return flush_subnormal(r)
    return r


@jit(accepts=dict(f="float32", z="bool"))
def out_word(f: np.float32, z: bool) -> np.uint32:
    """A word leaving a kernel (page, trace, exchange slot): ``ftz_bits`` in mode Z (``z``).

    Parameters
    ----------
    f : numpy.float32
    z : bool

    Returns
    -------
    numpy.uint32

    Examples
    --------
    >>> hex(out_word(np.float32(-1e-40), True))
    '0x80000000'
    """
    if z:
        return bits(f)
    return np.float32(f).view(np.uint32)


@jit(accepts=dict(u="uint32", z="bool"))
def in_word(u: np.uint32, z: bool) -> np.float32:
    """A word entering a kernel from the page: ``ftz_from_bits`` in mode Z (``z``).

    Parameters
    ----------
    u : numpy.uint32
    z : bool

    Returns
    -------
    numpy.float32

    Examples
    --------
    >>> float(in_word(np.uint32(0x3F800000), True)), float(in_word(np.uint32(1), True))
    (1.0, 0.0)
    """
    if z:
        return from_bits(u)
    return np.uint32(u).view(np.float32)


@register_jitable
def end_task(page: np.ndarray, next_step: np.uint64, timed_out: bool = False) -> None:
    """SPEC 8's end of a TASK beside PARAMS: ERR = ``timed_out``, PENDING cleared, STEP_HI:NEXT_STEP = ``next_step``.

    Parameters
    ----------
    page : numpy.ndarray
        A page's uint32 words ``[1024]`` (or ``[n, 1024]``), written in place.
    next_step : numpy.uint64
    timed_out : bool, default False

    Examples
    --------
    >>> from meshnb.view import View
    >>> view = View()
    >>> end_task(view.words, np.uint64(3 << 32 | 5))
    >>> view.word("STEP_HI"), view.word("NEXT_STEP")
    (3, 5)
    """
    page[..., W_ERR] = np.uint32(1) if timed_out else np.uint32(0)
    page[..., W_PENDING] = np.uint32(0)
    page[..., W_STEP_HI] = np.uint32(next_step >> np.uint64(32))
    page[..., W_NEXT_STEP] = np.uint32(next_step & np.uint64(0xFFFFFFFF))


# --- samples ----------------------------------------------------------------------------------


def sin_pi_f32(x: np.ndarray) -> np.ndarray:
    """sin(pi x) rounded to f32 for float32 ``x`` in [-1, 1] (SPEC 4): libm's f64 sine of the exactly reduced argument.

    Parameters
    ----------
    x : array_like

    Returns
    -------
    numpy.ndarray
        float32, ``x``'s shape.

    Examples
    --------
    >>> sin_pi_f32(np.array([0.5, -0.25, 1.0], dtype=np.float32)).tolist()
    [1.0, -0.7071067690849304, 0.0]
    """
    x = np.asarray(x, dtype=np.float32)
    ax = np.abs(x.astype(np.float64))
    r = np.where(ax > 0.5, 1.0 - ax, ax)  # exact: x is an f32 in [-1, 1]
    # math.sin per value, not np.sin: numpy's vectorised sine may differ from libm in the last
    # bit, which could change a rounding to f32; numba's np.sin on a scalar calls libm's sin.
    y = np.array([math.sin(math.pi * float(v)) for v in r], dtype=np.float64).astype(np.float32)
    return np.where(np.signbit(x), -y, y).astype(np.float32)


def samples() -> tuple[np.ndarray, np.ndarray]:
    """X and Y of SPEC 4, in numpy (no compiled kernel): each f32 op on whole arrays, then mode Z's flush.

    Returns
    -------
    tuple of numpy.ndarray
        ``(xs, ys)``, 256 float32 each: x from -1 to 1 in 255 equal steps, and sin(pi x).

    Examples
    --------
    >>> xs, ys = samples()
    >>> xs.shape, float(xs[0]), float(xs[255]), hex(xs[128].view("uint32"))
    ((256,), -1.0, 1.0, '0x3b808100')
    """
    f32 = np.float32

    def z(a: np.ndarray) -> np.ndarray:  # mode Z's flush of f32 results (inputs here are normal)
        return flush_words(np.asarray(a, dtype=f32).view(np.uint32)).view(f32)

    h = z(np.array([f32(2.0)], dtype=f32) / z(np.array([255], dtype=np.uint32).astype(f32)))[0]
    i = z(np.arange(SAMPLES, dtype=np.uint32).astype(f32))  # u32 -> f32: exact below 2^24
    xs = z(f32(-1.0) + z(i * h))
    return np.ascontiguousarray(xs), np.ascontiguousarray(sin_pi_f32(xs))


@jit(accepts=dict(words="uint32[:]", z="bool"))
def batches(words: np.ndarray, z: bool) -> np.ndarray:
    """Four lane-major tables in one array: x, x^2, x^3, y, each ``[BATCHES][WARP]``, from a page's words.

    Parameters
    ----------
    words : numpy.ndarray
        The page as uint32 words ``[1024]``.
    z : bool

    Returns
    -------
    numpy.ndarray
        float32 ``[1024]``: sample ``g + 8 lane`` of batch ``g`` at ``g * 32 + lane`` of each table.

    Examples
    --------
    >>> from meshnb import Context, View, init
    >>> ctx = Context(View())
    >>> init(ctx)
    >>> tab = batches(ctx.view.words, True)
    >>> tab[:2].tolist()  # x of batch 0, lanes 0 and 1: samples 0 and 8
    [-1.0, -0.9372549057006836]
    """
    if words.shape[0] < W_Y + SAMPLES:
        raise ValueError("batches: words must hold a page's X and Y")
    tab = np.empty(4 * TAB, dtype=np.float32)
    for g in range(BATCHES):
        for lane in range(WARP):
            i = g + BATCHES * lane
            x = in_word(words[W_X + i], z)
            x2 = result(x * x, z)
            at = g * WARP + lane
            tab[at] = x
            tab[at + TAB] = x2
            tab[at + 2 * TAB] = result(x2 * x, z)
            tab[at + 3 * TAB] = in_word(words[W_Y + i], z)
    return tab


def fill_batches(words: np.ndarray, z: bool, tab: np.ndarray) -> None:
    """:func:`batches` into ``tab`` (float32 ``[1024]``), in numpy: a cold start compiles nothing for it.

    Parameters
    ----------
    words : numpy.ndarray
    z : bool
    tab : numpy.ndarray

    Examples
    --------
    >>> fill_batches(np.zeros(1024, np.uint32), True, np.empty(1024, np.float32))
    """
    if not (
        isinstance(words, np.ndarray) and words.dtype == np.uint32 and words.ndim == 1
        and words.shape[0] >= W_Y + SAMPLES and isinstance(tab, np.ndarray) and tab.dtype == np.float32
        and tab.shape == (4 * TAB,) and tab.flags.c_contiguous
    ):  # fmt: skip
        raise ValueError("fill_batches: words must hold a page's X and Y (uint32), tab must be 1024 float32")
    f32 = np.float32
    # sample g + 8 lane at [g, lane]: the samples as [lane, g], read across
    xw = words[W_X : W_X + SAMPLES].reshape(WARP, BATCHES).T
    yw = words[W_Y : W_Y + SAMPLES].reshape(WARP, BATCHES).T
    t = tab.reshape(4, BATCHES, WARP)
    x = flush_words(xw).view(f32) if z else xw.view(f32)
    with np.errstate(all="ignore"):  # IEEE's results, overflows and NaNs included, are the point
        x2 = _results(x * x, z)
        x3 = _results(x2 * x, z)
    t[0], t[1], t[2] = x, x2, x3
    t[3] = flush_words(yw).view(f32) if z else yw.view(f32)


def _results(r: np.ndarray, z: bool) -> np.ndarray:
    """:func:`result` of every element of a float32 array (in numpy)."""
    if not z:
        return r
    u = r.view(np.uint32)
    return np.where((u & EXP_MASK) == 0, u & SIGN_MASK, u).view(np.float32)


# --- SPEC's kernels, one op at a time ---------------------------------------------------------


@jit(accepts=dict(p="float32[:]", xs="float32[:]", ys="float32[:]", off="uint32", z="bool"))
def step_sums(p: np.ndarray, xs: np.ndarray, ys: np.ndarray, off: np.uint32, z: bool = True) -> np.ndarray:
    """SPEC 5: the five sums of batch ``off mod 8`` for params ``p`` (float32 ``[4]``), as SPEC writes it.

    Parameters
    ----------
    p, xs, ys : numpy.ndarray
        The params a, b, c, d and the samples (float32 ``[256]``).
    off : numpy.uint32
        The step's batch offset (the step number of a system alone).
    z : bool, default True

    Returns
    -------
    numpy.ndarray
        float32 ``[5]``: the sums of e, e x, e x^2, e x^3, e^2, through ``ftz_bits``.

    Examples
    --------
    >>> xs, ys = samples()
    >>> sums = step_sums(np.zeros(4, dtype=np.float32), xs, ys, np.uint32(0))
    >>> hex(np.float32(loss(sums, np.float32(1 / 32))).view(np.uint32))  # step 0's loss
    '0x3eff022c'
    """
    g = np.uint32(off) % np.uint32(BATCHES)
    a, b, c, d = (flush(p[0]), flush(p[1]), flush(p[2]), flush(p[3])) if z else (p[0], p[1], p[2], p[3])
    v = np.empty((NSUMS, WARP), dtype=np.float32)
    for lane in range(WARP):
        i = g + BATCHES * lane
        x = flush(xs[i]) if z else xs[i]
        y = flush(ys[i]) if z else ys[i]
        x2 = result(x * x, z)
        x3 = result(x2 * x, z)
        pred = result(result(result(result(result(result(d * x, z) + c, z) * x, z) + b, z) * x, z) + a, z)
        e = result(pred - y, z)
        v[0, lane] = e
        v[1, lane] = result(e * x, z)
        v[2, lane] = result(e * x2, z)
        v[3, lane] = result(e * x3, z)
        v[4, lane] = result(e * e, z)
    o = WARP // 2
    while o >= 1:  # every lane l sets v[l] = add(v[l], v[l xor o]), all from the previous level
        w = v.copy()
        for j in range(NSUMS):
            for lane in range(WARP):
                v[j, lane] = result(w[j, lane] + w[j, lane ^ o], z)
        o //= 2
    out = np.empty(NSUMS, dtype=np.float32)
    for j in range(NSUMS):
        out[j] = np.uint32(out_word(v[j, 0], z)).view(np.float32)
    return out


@jit(accepts=dict(p="float32[:]", sums="float32[:]", lr="float32", inv="float32"))
def apply(p: np.ndarray, sums: np.ndarray, lr: np.float32, inv: np.float32) -> None:
    """SPEC 6, in place: ``p[j] = sub(p[j], mul(lr, mul(sums[j], inv)))`` for the four params.

    Parameters
    ----------
    p, sums : numpy.ndarray
        The params (float32 ``[4]``, updated) and the step's sums (float32 ``[5]``).
    lr, inv : numpy.float32
        The learning rate and INV_BATCH.

    Examples
    --------
    >>> p = np.ones(4, dtype=np.float32)
    >>> apply(p, np.array([2, 4, 8, 16, 0], dtype=np.float32), np.float32(0.5), np.float32(0.25))
    >>> p.tolist()
    [0.75, 0.5, 0.0, -1.0]
    """
    for j in range(4):
        p[j] = sub(p[j], mul(lr, mul(sums[j], inv)))


@jit(accepts=dict(sums="float32[:]", inv="float32"))
def loss(sums: np.ndarray, inv: np.float32) -> np.float32:
    """SPEC 6: ``mul(sums[4], inv)``, the step's mean squared error before the update (the LOSS ring's entry).

    Parameters
    ----------
    sums : numpy.ndarray
    inv : numpy.float32

    Returns
    -------
    numpy.float32

    Examples
    --------
    >>> float(loss(np.array([0, 0, 0, 0, 3], dtype=np.float32), np.float32(0.5)))
    1.5
    """
    return mul(sums[4], inv)


@jit(accepts=dict(slots="uint32[:, :]", z="bool"))
def fold(slots: np.ndarray, z: bool = True) -> np.ndarray:
    """The cluster total: slot words (uint32 ``[N, >= 5]``, system 0 first) read with ``ftz_from_bits``,
    added in system order.

    Parameters
    ----------
    slots : numpy.ndarray
    z : bool, default True

    Returns
    -------
    numpy.ndarray
        float32 ``[5]``: each sum's total, through ``ftz_bits``.

    Examples
    --------
    >>> slots = np.zeros((2, 8), dtype=np.uint32)
    >>> slots[:, :5] = np.float32(1.5).view(np.uint32)
    >>> fold(slots).tolist()
    [3.0, 3.0, 3.0, 3.0, 3.0]
    """
    out = np.empty(NSUMS, dtype=np.float32)
    for j in range(NSUMS):
        acc = in_word(slots[0, j], z)
        for m in range(1, slots.shape[0]):
            acc = result(acc + in_word(slots[m, j], z), z)
        out[j] = np.uint32(out_word(acc, z)).view(np.float32)
    return out


# --- the grouped step, one call per step (the exchange sits between the two halves) ----------


@jit(accepts=dict(header="uint32[:]", xs="float32[:]", ys="float32[:]", off="uint32", z="bool"))
def grouped_sums(header: np.ndarray, xs: np.ndarray, ys: np.ndarray, off: np.uint32, z: bool) -> np.ndarray:
    """A grouped step's own sums as the slot words to publish (``ftz_bits``, words 5..7 zero).

    Parameters
    ----------
    header : numpy.ndarray
        The page's first words (uint32, at least PARAMS).
    xs, ys : numpy.ndarray
    off : numpy.uint32
        ``t * N + k``: system ``k``'s batch of step ``t`` in a group of ``N``.
    z : bool

    Returns
    -------
    numpy.ndarray

    Examples
    --------
    >>> from meshnb import Context, View, init
    >>> ctx = Context(View())
    >>> init(ctx)
    >>> xs, ys = samples()
    >>> words = grouped_sums(ctx.view.words[:12], xs, ys, np.uint32(0), True)
    >>> hex(words[4]), words[5:].tolist()
    ('0x417f022c', [0, 0, 0])
    """
    p = np.empty(4, dtype=np.float32)
    for j in range(4):
        p[j] = in_word(header[j], z)
    words = np.zeros(8, dtype=np.uint32)
    words[:NSUMS] = step_sums(p, xs, ys, off, z).view(np.uint32)
    return words


@jit(
    accepts=dict(
        header="uint32[:]", total="float32[:]", loss_ring="uint32[:]", t="uint64", trace_row="uint32[:]", z="bool"
    )
)
def grouped_apply(
    header: np.ndarray, total: np.ndarray, loss_ring: np.ndarray, t: np.uint64, trace_row: np.ndarray, z: bool
) -> None:
    """Apply a cluster's folded sums to the PARAMS words of ``header``; write step ``t``'s loss and trace row.

    Parameters
    ----------
    header, total, loss_ring : numpy.ndarray
        The page's first 12 words, the folded sums (float32 ``[5]``), the LOSS words.
    t : numpy.uint64
    trace_row : numpy.ndarray
        uint32 ``[5]`` for the step's trace words, or ``[0]`` for none.
    z : bool

    Examples
    --------
    >>> from meshnb import Context, View, init
    >>> ctx = Context(View())
    >>> init(ctx)
    >>> header, row = ctx.view.words[:12].copy(), np.zeros(5, dtype=np.uint32)
    >>> total = np.array([1, 1, 1, 1, 2], dtype=np.float32)
    >>> grouped_apply(header, total, ctx.view.array("LOSS").view(np.uint32), np.uint64(0), row, True)
    >>> float(header[:4].view(np.float32)[0]), float(ctx.view["LOSS"][0])  # 0 - 0.5 * (1 / 32)
    (-0.015625, 0.0625)
    """
    p = np.empty(4, dtype=np.float32)
    for j in range(4):
        p[j] = in_word(header[j], z)
    lr = in_word(header[W_LR], z)
    inv = in_word(header[W_INV_BATCH], z)
    for j in range(4):
        p[j] = result(p[j] - result(lr * result(total[j] * inv, z), z), z)
        header[j] = out_word(p[j], z)
    loss_ring[np.uint64(t) & U64_255] = out_word(result(total[4] * inv, z), z)
    for j in range(trace_row.shape[0]):
        trace_row[j] = out_word(total[j], z)
