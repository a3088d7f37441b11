"""The numeric core (SPEC sections 4-6): samples, step_sums, apply, loss, and the step loops.

All kernels are pure ``@njit`` functions over arrays and scalars.  The public scalar kernels
(``step_sums``, ``apply``, ``loss``, ``fold``) follow SPEC to the letter, one mode-Z op at a time.
The step loops (``run_tasks`` for one system, ``run_fused`` for a cluster) compute the same bits fast:

- the samples are read once per call into lane-major batch tables (``batches``): lane ``l`` of
  batch ``g`` is sample ``g + 8 l``, with ``x^2`` and ``x^3`` precomputed (SPEC 5 allows it);
- a step works on two 16-lane vectors (``vec``), adds them (the butterfly's first level), then
  finishes the butterfly with shuffles, the four param sums packed into one vector, so the
  update of ``a, b, c, d`` is three 4-lane operations;
- the loop has three modes, fixed at compile time: ``Z_DAZ`` (mode Z with the x86 DAZ bit on:
  the hardware reads subnormals as zeros, so only words leaving the loop are flushed), ``Z``
  (mode Z with a flush after every operation: any CPU) and ``IEEE`` (plain float32, only for
  showing what mode Z changes).  Inside the loop NaNs are never canonicalised: an add, sub, mul
  or div with a NaN operand yields a NaN, so doing it on the words written out is enough.
"""

from __future__ import annotations

import time

import numpy as np
from numba import njit

from . import vec
from .floatz import add, bits, div, flush, flush_subnormal, from_bits, from_u32, mul, sub
from .view import FIELDS, HEADER_WORDS, VIEW_BYTES

SAMPLES = 256
WARP = 32
BATCHES = SAMPLES // WARP
NSUMS = 5  # e, e x, e x^2, e x^3, e^2

Z_DAZ, Z, IEEE = 0, 1, 2  # step-loop modes

# Word offsets of the page's fields, from the view's layout table (numba freezes module
# globals into the machine code as constants).
W_LR, W_STEPS_PER_TASK, W_INV_BATCH = FIELDS["LR"].word, FIELDS["STEPS_PER_TASK"].word, FIELDS["INV_BATCH"].word
W_NEXT_STEP, W_ERR, W_PENDING, W_STEP_HI = (FIELDS[f].word for f in ("NEXT_STEP", "ERR", "PENDING", "STEP_HI"))
W_X, W_Y, W_LOSS = FIELDS["X"].word, FIELDS["Y"].word, FIELDS["LOSS"].word

_U64_255 = np.uint64(255)
_U64_7 = np.uint64(7)
_TAB = BATCHES * WARP  # one table of the four in ``batches``


def loop_mode(z: bool) -> int:
    """The fastest step-loop mode for float mode Z (``z=True``) or plain IEEE on this CPU."""
    if not z:
        return IEEE
    return Z_DAZ if vec.HAS_DAZ else Z


# --- scalar helpers: one op in mode Z (z=True) or plain IEEE ----------------------------------


@njit(cache=True, error_model="numpy")
def _res(r: np.float32, z: bool) -> np.float32:
    """A result inside a kernel: the subnormal flush in mode Z, untouched in IEEE mode."""
    if z:
        return flush_subnormal(r)
    return r


@njit(cache=True, error_model="numpy")
def _word(f: np.float32, z: bool) -> np.uint32:
    """A word leaving a kernel (page, trace, exchange slot): ``ftz_bits`` in mode Z."""
    if z:
        return bits(f)
    return np.float32(f).view(np.uint32)


@njit(cache=True, error_model="numpy")
def _read(u: np.uint32, z: bool) -> np.float32:
    """A word entering a kernel from the page: ``ftz_from_bits`` in mode Z."""
    if z:
        return from_bits(u)
    return np.uint32(u).view(np.float32)


# --- samples ----------------------------------------------------------------------------------


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
    """Four lane-major tables, one array: x, x^2, x^3, y, each ``[BATCHES][WARP]`` (inputs flushed)."""
    tab = np.empty(4 * _TAB, dtype=np.float32)
    for g in range(BATCHES):
        for lane in range(WARP):
            i = g + BATCHES * lane
            x = flush(xs[i]) if z else xs[i]
            x2 = _res(x * x, z)
            at = g * WARP + lane
            tab[at] = x
            tab[at + _TAB] = x2
            tab[at + 2 * _TAB] = _res(x2 * x, z)
            tab[at + 3 * _TAB] = flush(ys[i]) if z else ys[i]
    return tab


# --- SPEC's kernels, one op at a time ---------------------------------------------------------


@njit(cache=True, error_model="numpy")
def step_sums(p: np.ndarray, xs: np.ndarray, ys: np.ndarray, off: np.uint32, z: bool = True) -> np.ndarray:
    """SPEC 5: the five sums of batch ``off mod 8`` for params ``p`` (float32[4]), as SPEC writes it."""
    g = np.uint32(off) % np.uint32(BATCHES)
    a, b, c, d = (flush(p[0]), flush(p[1]), flush(p[2]), flush(p[3])) if z else (p[0], p[1], p[2], p[3])
    v = np.empty((NSUMS, WARP), dtype=np.float32)
    for lane in range(WARP):
        i = g + BATCHES * lane
        x = flush(xs[i]) if z else xs[i]
        y = flush(ys[i]) if z else ys[i]
        x2 = _res(x * x, z)
        x3 = _res(x2 * x, z)
        pred = _res(_res(_res(_res(_res(_res(d * x, z) + c, z) * x, z) + b, z) * x, z) + a, z)
        e = _res(pred - y, z)
        v[0, lane] = e
        v[1, lane] = _res(e * x, z)
        v[2, lane] = _res(e * x2, z)
        v[3, lane] = _res(e * x3, z)
        v[4, lane] = _res(e * e, z)
    o = WARP // 2
    while o >= 1:  # every lane l sets v[l] = add(v[l], v[l xor o]), all from the previous level
        w = v.copy()
        for j in range(NSUMS):
            for lane in range(WARP):
                v[j, lane] = _res(w[j, lane] + w[j, lane ^ o], z)
        o //= 2
    out = np.empty(NSUMS, dtype=np.float32)
    for j in range(NSUMS):
        out[j] = np.uint32(_word(v[j, 0], z)).view(np.float32)
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


# --- the grouped step, one call per step (the exchange sits between the two halves) ----------


@njit(cache=True, error_model="numpy")
def grouped_sums(header: np.ndarray, xs: np.ndarray, ys: np.ndarray, off: np.uint32, z: bool) -> np.ndarray:
    """Own sums of a grouped step as the slot words to publish (``ftz_bits``, words 5..7 zero).

    This path follows SPEC literally (``step_sums``); the fused backend's vector loop is checked
    against it."""
    p = np.empty(4, dtype=np.float32)
    for j in range(4):
        p[j] = _read(header[j], z)
    words = np.zeros(8, dtype=np.uint32)
    words[:NSUMS] = step_sums(p, xs, ys, off, z).view(np.uint32)
    return words


@njit(cache=True, error_model="numpy")
def grouped_apply(header: np.ndarray, total: np.ndarray, loss_ring: np.ndarray, t: np.uint64,
                  trace_row: np.ndarray, z: bool) -> None:
    """Apply a cluster fold to the params words in ``header``; write step ``t``'s loss and trace row."""
    p = np.empty(4, dtype=np.float32)
    for j in range(4):
        p[j] = _read(header[j], z)
    lr = _read(header[W_LR], z)
    inv = _read(header[W_INV_BATCH], z)
    for j in range(4):
        p[j] = _res(p[j] - _res(lr * _res(total[j] * inv, z), z), z)
        header[j] = _word(p[j], z)
    loss_ring[np.uint64(t) & _U64_255] = _word(_res(total[4] * inv, z), z)
    for j in range(trace_row.shape[0]):
        trace_row[j] = _word(total[j], z)


# --- the fast step loop -----------------------------------------------------------------------


@njit(cache=True, error_model="numpy", inline="always")
def _fl(v, mode):
    """After a vector op: the subnormal flush in mode Z (DAZ does it in hardware, IEEE not at all)."""
    if mode == Z:
        return vec.flush(v)
    return v


@njit(cache=True, error_model="numpy", inline="always")
def _out(v, mode):
    """Vector lanes as the words written out: ``ftz_bits`` in both mode-Z loops."""
    if mode == IEEE:
        return v
    return vec.words(v)


@njit(cache=True, error_model="numpy", inline="always")
def _half_warp(a, b, c, d, tab, at, mode):
    """Per-lane error terms of 16 lanes (SPEC 5): e, e x, e x^2, e x^3, e^2."""
    x = vec.load16(tab, at)
    x2 = vec.load16(tab, at + _TAB)
    x3 = vec.load16(tab, at + 2 * _TAB)
    y = vec.load16(tab, at + 3 * _TAB)
    pred = _fl(vec.mul(d, x), mode)  # Horner: ((d x + c) x + b) x + a
    pred = _fl(vec.add(pred, c), mode)
    pred = _fl(vec.mul(pred, x), mode)
    pred = _fl(vec.add(pred, b), mode)
    pred = _fl(vec.mul(pred, x), mode)
    pred = _fl(vec.add(pred, a), mode)
    e = _fl(vec.sub(pred, y), mode)
    return e, _fl(vec.mul(e, x), mode), _fl(vec.mul(e, x2), mode), _fl(vec.mul(e, x3), mode), _fl(vec.mul(e, e), mode)


@njit(cache=True, error_model="numpy", inline="always")
def _step(p4, tab, at, mode):
    """One step's sums for params ``p4``: (the four param sums as a vector, the e^2 sum)."""
    a = vec.broadcast0(p4, p4)
    b = vec.broadcast1(p4, p4)
    c = vec.broadcast2(p4, p4)
    d = vec.broadcast3(p4, p4)
    l0, l1, l2, l3, l4 = _half_warp(a, b, c, d, tab, at, mode)
    h0, h1, h2, h3, h4 = _half_warp(a, b, c, d, tab, at + 16, mode)
    # Butterfly level 16: lane l + lane l + 16.
    s0 = _fl(vec.add(l0, h0), mode)
    s1 = _fl(vec.add(l1, h1), mode)
    s2 = _fl(vec.add(l2, h2), mode)
    s3 = _fl(vec.add(l3, h3), mode)
    s4 = _fl(vec.add(l4, h4), mode)
    # Levels 8, 4, 2, 1 of the four param sums, packed (see vec's shuffles).
    p01 = _fl(vec.add(vec.level8_lo(s0, s1), vec.level8_hi(s0, s1)), mode)
    p23 = _fl(vec.add(vec.level8_lo(s2, s3), vec.level8_hi(s2, s3)), mode)
    q = _fl(vec.add(vec.level4_lo(p01, p23), vec.level4_hi(p01, p23)), mode)
    r = _fl(vec.add(vec.level2_lo(q, q), vec.level2_hi(q, q)), mode)
    u = _fl(vec.add(vec.level1_lo(r, r), vec.level1_hi(r, r)), mode)
    # Levels 8, 4, 2, 1 of e^2 alone.
    e8 = _fl(vec.add(vec.half16_lo(s4, s4), vec.half16_hi(s4, s4)), mode)
    e4 = _fl(vec.add(vec.half8_lo(e8, e8), vec.half8_hi(e8, e8)), mode)
    e2 = _fl(vec.add(vec.half4_lo(e4, e4), vec.half4_hi(e4, e4)), mode)
    return u, _res(vec.lane(e2, 0) + vec.lane(e2, 1), mode == Z)


@njit(cache=True, error_model="numpy", inline="always")
def _run(header, tab, loss_ring, base, count, trace, mode):
    """``count`` steps from step ``base`` of one system without a group; PARAMS read and written
    back in ``header`` (uint32 words 0..11), losses into ``loss_ring`` (uint32[256]), the sums
    applied into ``trace`` (``[count, 5]`` uint32, or zero rows for none)."""
    z = mode != IEEE
    p = np.empty(4, dtype=np.float32)
    for j in range(4):
        p[j] = _read(header[j], z)
    lr = _read(header[W_LR], z)
    inv = _read(header[W_INV_BATCH], z)
    lr4 = vec.splat4(lr)
    inv4 = vec.splat4(inv)
    p4 = vec.load4(p, 0)
    record = trace.shape[0] > 0
    flat = trace.reshape(-1)
    t = np.uint64(base)
    for done in range(np.int64(count)):
        u, e2 = _step(p4, tab, int(t & _U64_7) * WARP, mode)
        p4 = _fl(vec.sub(p4, _fl(vec.mul(lr4, _fl(vec.mul(u, inv4), mode)), mode)), mode)
        loss_ring[t & _U64_255] = _word(_res(e2 * inv, mode == Z), z)
        if record:
            vec.store(flat, 5 * done, _out(u, mode))
            flat[5 * done + 4] = _word(e2, z)
        t += np.uint64(1)
    vec.store(header, 0, _out(p4, mode))


@njit(cache=True, error_model="numpy", inline="always")
def _tasks(words, count, trace, mode):
    """``count`` steps of one system without a group as consecutive TASKs of STEPS_PER_TASK steps
    (the last one shortened), with every task's effects on the page (SPEC 8): PARAMS written,
    ERR = 0, a pending round dropped, STEP_HI:NEXT_STEP advanced."""
    z = mode != IEEE
    tab = batches(words[W_X:W_X + SAMPLES].view(np.float32), words[W_Y:W_Y + SAMPLES].view(np.float32), z)
    loss_ring = words[W_LOSS:W_LOSS + SAMPLES]
    header = words[:HEADER_WORDS]
    spt = np.uint64(words[W_STEPS_PER_TASK])
    done = np.uint64(0)
    total = np.uint64(count)
    old = vec.daz_on() if mode == Z_DAZ else np.uint32(0)
    first = True
    while done < total or first:
        first = False
        n = min(spt, total - done)
        base = np.uint64(words[W_STEP_HI]) << np.uint64(32) | np.uint64(words[W_NEXT_STEP])
        rows = trace[np.int64(done):np.int64(done + n)] if trace.shape[0] else trace
        _run(header, tab, loss_ring, base, n, rows, mode)
        nxt = base + n
        words[W_ERR] = 0
        words[W_PENDING] = 0
        words[W_STEP_HI] = np.uint32(nxt >> np.uint64(32))
        words[W_NEXT_STEP] = np.uint32(nxt & np.uint64(0xFFFFFFFF))
        done += n
    if mode == Z_DAZ:
        vec.mxcsr_restore(old)


@njit(cache=True, error_model="numpy", inline="always")
def _fused(pages, count, trace, mode):
    """``count`` steps of a whole cluster, one system per row of ``pages`` (``[N, 1024]`` uint32
    words), as consecutive TASKs of page 0's STEPS_PER_TASK, with no exchange: each step every
    system's own sums (batch offset ``t N + k``), the fold in system order, every system's apply
    of the fold.  The pages end as the N members' would after the same tasks without timeouts."""
    n = pages.shape[0]
    z = mode != IEEE
    tabs = np.empty((n, 4 * _TAB), dtype=np.float32)
    p = np.empty((n, 4), dtype=np.float32)
    lr = np.empty(n, dtype=np.float32)
    inv = np.empty(n, dtype=np.float32)
    own = np.empty((n, 4), dtype=np.float32)
    own_e2 = np.empty(n, dtype=np.float32)
    for k in range(n):
        tabs[k] = batches(pages[k, W_X:W_X + SAMPLES].view(np.float32), pages[k, W_Y:W_Y + SAMPLES].view(np.float32), z)
    spt = np.uint64(pages[0, W_STEPS_PER_TASK])
    nsys = np.uint64(n)
    flat = trace.reshape(-1)
    record = trace.shape[0] > 0
    done = np.uint64(0)
    total = np.uint64(count)
    old = vec.daz_on() if mode == Z_DAZ else np.uint32(0)
    while done < total:
        steps = min(spt, total - done)
        base = np.uint64(pages[0, W_STEP_HI]) << np.uint64(32) | np.uint64(pages[0, W_NEXT_STEP])
        for k in range(n):
            for j in range(4):
                p[k, j] = _read(pages[k, j], z)
            lr[k] = _read(pages[k, W_LR], z)
            inv[k] = _read(pages[k, W_INV_BATCH], z)
        for i in range(np.int64(steps)):
            t = base + np.uint64(i)
            for k in range(n):  # every system's own sums, as it would publish them
                u, e2 = _step(vec.load4(p[k], 0), tabs[k], int((t * nsys + np.uint64(k)) & _U64_7) * WARP, mode)
                vec.store(own[k], 0, u)
                own_e2[k] = e2
            fold = vec.load4(own[0], 0)  # the fold, in system order
            fold_e2 = own_e2[0]
            for k in range(1, n):
                fold = _fl(vec.add(fold, vec.load4(own[k], 0)), mode)
                fold_e2 = _res(fold_e2 + own_e2[k], mode == Z)
            for k in range(n):  # every system applies the same fold to its own params
                inv4 = vec.splat4(inv[k])
                step = _fl(vec.mul(vec.splat4(lr[k]), _fl(vec.mul(fold, inv4), mode)), mode)
                vec.store(p[k], 0, _fl(vec.sub(vec.load4(p[k], 0), step), mode))
                pages[k, W_LOSS + np.int64(t & _U64_255)] = _word(_res(fold_e2 * inv[k], mode == Z), z)
            if record:
                row = 5 * np.int64(done + np.uint64(i))
                vec.store(flat, row, _out(fold, mode))
                flat[row + 4] = _word(fold_e2, z)
        nxt = base + steps
        for k in range(n):
            vec.store(pages[k], 0, _out(vec.load4(p[k], 0), mode))
            pages[k, W_ERR] = 0
            pages[k, W_PENDING] = 0
            pages[k, W_STEP_HI] = np.uint32(nxt >> np.uint64(32))
            pages[k, W_NEXT_STEP] = np.uint32(nxt & np.uint64(0xFFFFFFFF))
        done += steps
    if mode == Z_DAZ:
        vec.mxcsr_restore(old)


# One compiled entry per mode, so each loop is specialised (numba compiles each on first use).
@njit(cache=True, error_model="numpy", nogil=True)
def _tasks_z_daz(words, count, trace):
    _tasks(words, count, trace, Z_DAZ)


@njit(cache=True, error_model="numpy", nogil=True)
def _tasks_z(words, count, trace):
    _tasks(words, count, trace, Z)


@njit(cache=True, error_model="numpy", nogil=True)
def _tasks_ieee(words, count, trace):
    _tasks(words, count, trace, IEEE)


@njit(cache=True, error_model="numpy", nogil=True)
def _fused_z_daz(pages, count, trace):
    _fused(pages, count, trace, Z_DAZ)


@njit(cache=True, error_model="numpy", nogil=True)
def _fused_z(pages, count, trace):
    _fused(pages, count, trace, Z)


@njit(cache=True, error_model="numpy", nogil=True)
def _fused_ieee(pages, count, trace):
    _fused(pages, count, trace, IEEE)


_FUSED = {Z_DAZ: _fused_z_daz, Z: _fused_z, IEEE: _fused_ieee}
_TASKS = {Z_DAZ: _tasks_z_daz, Z: _tasks_z, IEEE: _tasks_ieee}


def run_tasks(words: np.ndarray, count: int, trace: np.ndarray, mode: int) -> None:
    """``count`` steps of one system without a group as consecutive TASKs, in one call.

    ``words`` is the whole page as uint32[1024]; the page ends exactly as after the TASK calls
    of SPEC 10 with ``arg = NEXT_STEP``: STEPS_PER_TASK steps each, the last one shortened
    (``count = 0`` is one task of no steps).  ``trace`` (``[count, 5]`` uint32, or no rows)
    receives the sums each step applied.  ``mode`` is ``Z_DAZ``, ``Z`` or ``IEEE`` (``loop_mode``)."""
    _TASKS[mode](words, np.uint64(count), trace)


def run_fused(pages: np.ndarray, count: int, trace: np.ndarray, mode: int) -> None:
    """``count`` steps of a cluster of ``N`` systems in one call (the ``fused`` backend).

    ``pages`` is ``[N, 1024]`` uint32, every member's page (updated in place; all at the same
    step with the same STEPS_PER_TASK); ``trace`` (``[count, 5]`` uint32, or no rows) receives
    the fold each step applied, the same for every member.  ``mode`` as in ``run_tasks``."""
    _FUSED[mode](pages, np.uint64(count), trace)


def warm_up(mode: int, fused: bool = False) -> float:
    """Compile the step loop of ``mode`` now (or load it from numba's cache), on a scratch page,
    so that a timed run measures steady steps; returns the seconds this first call took."""
    start = time.perf_counter()
    trace = np.empty((0, NSUMS), dtype=np.uint32)
    if fused:
        run_fused(np.zeros((1, VIEW_BYTES // 4), dtype=np.uint32), 0, trace, mode)
    else:
        run_tasks(np.zeros(VIEW_BYTES // 4, dtype=np.uint32), 0, trace, mode)
    return time.perf_counter() - start
