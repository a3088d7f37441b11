"""The sweep's step loop: many independent systems, one system per SIMD lane.

A sweep's systems share no data, so it is bound by throughput, not by one step's dependency
chain.  Here a 16-lane vector holds one value of 16 *systems* (a *group*), and a step of a group
is SPEC 5's per-lane program done for the 32 warp lanes one after another, each op a 16-wide
vector op: no shuffles, no lane extraction.  The butterfly becomes an add tree over the 32 warp
lanes: lane 0 of SPEC 5's butterfly ends with ``T(0, 1)`` where ``T(l, 16) = v[l] + v[l + 16]``
and ``T(l, o) = T(l, 2o) + T(l + o, 2o)`` (level ``o`` adds lane ``l xor o = l + o`` to lane ``l``,
lower lane first), which is the tree written out below.

Each call steps ``count`` steps of a run of groups; two groups are stepped together so the tail
of one group's step (the tree's last levels and the update, a short serial chain) overlaps the
other group's independent work.  The same three modes as :mod:`meshnb.loops`: ``Z_DAZ`` (the
x86 DAZ bit on, FTZ off: the hardware does mode Z, only words written out are flushed), ``Z``
(a flush after every op) and ``IEEE``.  The functions release the GIL; :mod:`meshnb.sweeps` runs
the groups of a sweep on several threads, each thread its own slice of groups (MXCSR is per
thread: each call sets DAZ on its own thread and restores it).

Sample tables: slot ``j`` of a system holds its batch ``(base + j) mod 8``, so relative step ``r``
of every system reads slot ``r mod 8`` even when the systems' step bases differ.  A group whose 16
systems share X, Y and ``base mod 8`` (an LR sweep from one page) reads one *shared* table,
``stabs[u]``: ``[8 slots][32 lanes][x, x^2, x^3, y]``, each value broadcast to the 16 lanes (4 KiB,
at home in L1); any other group reads a *lane* table, ``tabs[t]``: ``[8 slots][32 lanes][x, x^2,
x^3, y][16 systems]`` (64 KiB, so its loads come from L2).  ``tab_of[g]`` is ``t`` (a lane table)
or ``-1 - u`` (a shared one).

Per-group arrays (float32; words are stored as the float lanes that carry their bits):

- ``params[g]``: ``[a, b, c, d][16]`` as the page's words (``ftz_bits`` in mode Z);
- ``hyper[g]``: ``[lr, inv][16]``, read through ``ftz_from_bits`` (mode Z);
- ``ring[g]``: ``[256][16]`` loss words, relative step ``r`` at row ``r mod 256``;
- ``hist[g]``: ``[H][16]`` loss words of relative steps ``loss_every - 1, 2 loss_every - 1, ...``;
- ``trace[g]``: ``[count][5][16]`` the sums each step applied (or no columns for none).
"""

from __future__ import annotations

import numpy as np

from .. import vec
from ..jit import jit
from ..kernels import BATCHES, WARP
from .single import IEEE, Z_DAZ, Z

LANES = 16  # systems per group (one 16-float vector)
BLOCK = 2  # groups stepped together
Q = 4  # x, x^2, x^3, y
LANE_STRIDE = Q * LANES  # floats per warp lane in a slot
SLOT = WARP * LANE_STRIDE  # floats per slot (one batch of 16 systems)
TAB_FLOATS = BATCHES * SLOT
SHARED_SLOT = WARP * Q  # floats per slot of a shared table
SHARED_FLOATS = BATCHES * SHARED_SLOT
RING = 256
NSUMS = 5


@jit(inline="always")
def _fl(v, mode):
    """After a vector op: the subnormal flush in mode Z (DAZ does it in hardware, IEEE not at all)."""
    if mode == Z:
        return vec.flush(v)
    return v


@jit(inline="always")
def _out(v, mode):
    """Lanes as the words written out: ``ftz_bits`` in both mode-Z loops."""
    if mode == IEEE:
        return v
    return vec.words(v)


@jit(inline="always")
def _terms(pa, pb, pc, pd, x, x2, x3, y, mode):
    """Warp lane terms of 16 systems (SPEC 5): e, e x, e x^2, e x^3, e^2."""
    pred = _fl(vec.mul(pd, x), mode)  # Horner: ((d x + c) x + b) x + a
    pred = _fl(vec.add(pred, pc), mode)
    pred = _fl(vec.mul(pred, x), mode)
    pred = _fl(vec.add(pred, pb), mode)
    pred = _fl(vec.mul(pred, x), mode)
    pred = _fl(vec.add(pred, pa), mode)
    e = _fl(vec.sub(pred, y), mode)
    return e, _fl(vec.mul(e, x), mode), _fl(vec.mul(e, x2), mode), _fl(vec.mul(e, x3), mode), _fl(vec.mul(e, e), mode)


@jit(inline="always")
def _lane(pa, pb, pc, pd, tab, at, mode, shared):
    """The terms of warp lane ``at`` (its offset in the table) of 16 systems."""
    if shared:  # one value for the 16 systems
        return _terms(
            pa,
            pb,
            pc,
            pd,
            vec.splat16(tab[at]),
            vec.splat16(tab[at + 1]),
            vec.splat16(tab[at + 2]),
            vec.splat16(tab[at + 3]),
            mode,
        )
    return _terms(
        pa,
        pb,
        pc,
        pd,
        vec.load16(tab, at),
        vec.load16(tab, at + LANES),
        vec.load16(tab, at + 2 * LANES),
        vec.load16(tab, at + 3 * LANES),
        mode,
    )


@jit(inline="always")
def _add5(u, v, mode):
    """One butterfly add of all five sums: the lower lane's value first, as SPEC 5 adds them."""
    return (
        _fl(vec.add(u[0], v[0]), mode),
        _fl(vec.add(u[1], v[1]), mode),
        _fl(vec.add(u[2], v[2]), mode),
        _fl(vec.add(u[3], v[3]), mode),
        _fl(vec.add(u[4], v[4]), mode),
    )


@jit(inline="always")
def _zero5():
    z = vec.splat16(np.float32(0.0))
    return z, z, z, z, z


def _make_sums(mode: int, shared: bool):
    """``sums(pa, pb, pc, pd, tab, slot)`` for one mode and table kind: a function of its own (not
    inlined into the loop, which keeps numba's compile time down), with both constants in it."""
    stride = Q if shared else LANE_STRIDE
    slot_floats = SHARED_SLOT if shared else SLOT

    @jit()
    def sums(pa, pb, pc, pd, tab, slot):
        return _sums(pa, pb, pc, pd, tab, slot * slot_floats, stride, mode, shared)

    return sums


@jit(inline="always")
def _sums(pa, pb, pc, pd, tab, at, stride, mode, shared):
    """The five sums of a step for 16 systems: lane 0 of SPEC 5's butterfly, ``T(0, 1)``.

    Leaf ``j`` (0..15) is ``T(l, 16)`` for ``l`` = ``j`` bit-reversed (0, 8, 4, 12, 2, ...), so
    consecutive leaves pair up as the butterfly pairs them: leaves 2i and 2i+1 give ``T(l, 8)``,
    two of those ``T(l, 4)``, and so on, like a binary counter (the lower lane's value first).
    Turn ``jj`` does leaves 2 jj and 2 jj + 1 (lanes ``l`` and ``l + 8``, ``l`` = ``jj`` bit-reversed
    in 3 bits): four warp lanes' chains in flight, about 5% faster than two (measured)."""
    s8 = s4 = s2 = _zero5()
    total = s2
    for jj in range(8):  # two leaves a turn (j = 2 jj and 2 jj + 1: lanes l and l + 8), more work in flight
        lane = ((jj & 1) << 2) | (jj & 2) | ((jj & 4) >> 2)
        lo = _add5(
            _lane(pa, pb, pc, pd, tab, at + lane * stride, mode, shared),
            _lane(pa, pb, pc, pd, tab, at + (lane + 16) * stride, mode, shared),
            mode,
        )
        hi = _add5(
            _lane(pa, pb, pc, pd, tab, at + (lane + 8) * stride, mode, shared),
            _lane(pa, pb, pc, pd, tab, at + (lane + 24) * stride, mode, shared),
            mode,
        )
        x = _add5(lo, hi, mode)  # T(l, 8)
        if jj & 1 == 0:
            s8 = x
            continue
        x = _add5(s8, x, mode)  # T(l, 4)
        if jj & 2 == 0:
            s4 = x
            continue
        x = _add5(s4, x, mode)  # T(l, 2)
        if jj & 4 == 0:
            s2 = x
            continue
        total = _add5(s2, x, mode)  # T(0, 1)
    return total


@jit(inline="always")
def _apply(p, s, lr, inv, mode):
    """SPEC 6: ``p = sub(p, mul(lr, mul(s, inv)))`` for one param of 16 systems."""
    return _fl(vec.sub(p, _fl(vec.mul(lr, _fl(vec.mul(s, inv), mode)), mode)), mode)


@jit(inline="always")
def _record(g, s, loss, ring, hist, trace, i, r, h, keep_hist, mode):
    """Write one step's words of group ``g``: loss ring row, history row, trace row."""
    lw = _out(loss, mode)
    vec.store(ring[g], (r & (RING - 1)) * LANES, lw)
    if keep_hist:
        vec.store(hist[g], h * LANES, lw)
    if trace.shape[1] > 0:
        tr = trace[g]
        at = i * NSUMS * LANES
        vec.store(tr, at, _out(s[0], mode))
        vec.store(tr, at + LANES, _out(s[1], mode))
        vec.store(tr, at + 2 * LANES, _out(s[2], mode))
        vec.store(tr, at + 3 * LANES, _out(s[3], mode))
        vec.store(tr, at + 4 * LANES, _out(s[4], mode))


@jit(inline="always")
def _sweep(tabs, stabs, tab_of, params, hyper, ring, hist, trace, first, count, loss_every, mode, lsums, ssums):
    """``count`` steps of every group (``params.shape[0]``, a multiple of BLOCK), from relative step
    ``first``.  ``loss_every`` > 0 samples the loss of relative steps ``k loss_every - 1`` into
    ``hist`` row ``k - 1``."""
    old = vec.daz_on() if mode == Z_DAZ else np.uint32(0)
    for g in range(0, params.shape[0], BLOCK):
        t0, t1 = tab_of[g], tab_of[g + 1]
        ta = tabs[t0] if t0 >= 0 else stabs[-1 - t0]
        tb = tabs[t1] if t1 >= 0 else stabs[-1 - t1]
        pa = params[g]
        pb = params[g + 1]
        a0, b0, c0, d0 = vec.load16(pa, 0), vec.load16(pa, 16), vec.load16(pa, 32), vec.load16(pa, 48)
        a1, b1, c1, d1 = vec.load16(pb, 0), vec.load16(pb, 16), vec.load16(pb, 32), vec.load16(pb, 48)
        lr0, inv0 = vec.load16(hyper[g], 0), vec.load16(hyper[g], LANES)
        lr1, inv1 = vec.load16(hyper[g + 1], 0), vec.load16(hyper[g + 1], LANES)
        for i in range(count):
            r = first + i
            slot = r & (BATCHES - 1)
            s = ssums(a0, b0, c0, d0, ta, slot) if t0 < 0 else lsums(a0, b0, c0, d0, ta, slot)
            u = ssums(a1, b1, c1, d1, tb, slot) if t1 < 0 else lsums(a1, b1, c1, d1, tb, slot)
            a0, b0 = _apply(a0, s[0], lr0, inv0, mode), _apply(b0, s[1], lr0, inv0, mode)
            c0, d0 = _apply(c0, s[2], lr0, inv0, mode), _apply(d0, s[3], lr0, inv0, mode)
            a1, b1 = _apply(a1, u[0], lr1, inv1, mode), _apply(b1, u[1], lr1, inv1, mode)
            c1, d1 = _apply(c1, u[2], lr1, inv1, mode), _apply(d1, u[3], lr1, inv1, mode)
            keep_hist = loss_every > 0 and (r + 1) % loss_every == 0
            h = (r + 1) // loss_every - 1 if keep_hist else 0
            _record(g, s, _fl(vec.mul(s[4], inv0), mode), ring, hist, trace, i, r, h, keep_hist, mode)
            _record(g + 1, u, _fl(vec.mul(u[4], inv1), mode), ring, hist, trace, i, r, h, keep_hist, mode)
        vec.store(pa, 0, _out(a0, mode))
        vec.store(pa, 16, _out(b0, mode))
        vec.store(pa, 32, _out(c0, mode))
        vec.store(pa, 48, _out(d0, mode))
        vec.store(pb, 0, _out(a1, mode))
        vec.store(pb, 16, _out(b1, mode))
        vec.store(pb, 32, _out(c1, mode))
        vec.store(pb, 48, _out(d1, mode))
    if mode == Z_DAZ:
        vec.mxcsr_restore(old)


_lsums_z_daz, _lsums_z, _lsums_ieee = _make_sums(Z_DAZ, False), _make_sums(Z, False), _make_sums(IEEE, False)
_ssums_z_daz, _ssums_z, _ssums_ieee = _make_sums(Z_DAZ, True), _make_sums(Z, True), _make_sums(IEEE, True)


# One compiled entry per mode (each specialised; numba compiles a mode on its first use).
@jit(nogil=True)
def _sweep_z_daz(tabs, stabs, tab_of, params, hyper, ring, hist, trace, first, count, loss_every):
    _sweep(
        tabs,
        stabs,
        tab_of,
        params,
        hyper,
        ring,
        hist,
        trace,
        first,
        count,
        loss_every,
        Z_DAZ,
        _lsums_z_daz,
        _ssums_z_daz,
    )


@jit(nogil=True)
def _sweep_z(tabs, stabs, tab_of, params, hyper, ring, hist, trace, first, count, loss_every):
    _sweep(tabs, stabs, tab_of, params, hyper, ring, hist, trace, first, count, loss_every, Z, _lsums_z, _ssums_z)


@jit(nogil=True)
def _sweep_ieee(tabs, stabs, tab_of, params, hyper, ring, hist, trace, first, count, loss_every):
    _sweep(
        tabs, stabs, tab_of, params, hyper, ring, hist, trace, first, count, loss_every, IEEE, _lsums_ieee, _ssums_ieee
    )


_SWEEP = {Z_DAZ: _sweep_z_daz, Z: _sweep_z, IEEE: _sweep_ieee}


def run_groups(
    tabs: np.ndarray,
    stabs: np.ndarray,
    tab_of: np.ndarray,
    params: np.ndarray,
    hyper: np.ndarray,
    ring: np.ndarray,
    hist: np.ndarray,
    trace: np.ndarray,
    first: int,
    count: int,
    loss_every: int,
    mode: int,
) -> None:
    """Step every group of these arrays ``count`` steps from relative step ``first`` (module
    docstring for the layouts; the group count must be a multiple of ``BLOCK``).  Releases the GIL."""
    _SWEEP[mode](
        tabs, stabs, tab_of, params, hyper, ring, hist, trace, np.int64(first), np.int64(count), np.int64(loss_every)
    )


def empty_arrays(groups: int, hist_rows: int, trace_steps: int) -> dict[str, np.ndarray]:
    """Zeroed per-group state arrays for ``groups`` groups (see the module docstring)."""
    return {
        "params": np.zeros((groups, 4 * LANES), dtype=np.float32),
        "hyper": np.zeros((groups, 2 * LANES), dtype=np.float32),
        "ring": np.zeros((groups, RING * LANES), dtype=np.float32),
        "hist": np.zeros((groups, hist_rows * LANES), dtype=np.float32),
        "trace": np.zeros((groups, trace_steps * NSUMS * LANES), dtype=np.float32),
    }
