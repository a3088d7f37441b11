"""The sweep's step loop: many independent systems, one system per SIMD lane.

A sweep's systems share no data, so it is bound by throughput, not by one step's dependency
chain.  Here a vector of ``lanes`` floats holds one value of ``lanes`` *systems* (a *group*; 16 on
AVX-512, 8 on AVX2, see :func:`shape`), and a step of a group
is SPEC 5's per-lane program done for the 32 warp lanes one after another, each op a 16-wide
vector op: no shuffles, no lane extraction.  The butterfly becomes an add tree over the 32 warp
lanes: lane 0 of SPEC 5's butterfly ends with ``T(0, 1)`` where ``T(l, 16) = v[l] + v[l + 16]``
and ``T(l, o) = T(l, 2o) + T(l + o, 2o)`` (level ``o`` adds lane ``l xor o = l + o`` to lane ``l``,
lower lane first), which is the tree written out below.

Each call steps ``count`` steps of a run of groups; with ``block`` = 2, two groups are stepped
together so the tail of one group's step (the tree's last levels and the update, a short serial
chain) overlaps the other group's independent work: that takes twice the registers, so it is
chosen only where the ISA has 32 of them.  The same three modes as :mod:`meshnb.loops`: ``Z_DAZ`` (the
x86 DAZ bit on, FTZ off: the hardware does mode Z, only words written out are flushed), ``Z``
(a flush after every op) and ``IEEE``.  The functions release the GIL; :mod:`meshnb.sweeps` runs
the groups of a sweep on several threads, each thread its own slice of groups (MXCSR is per
thread: each call sets DAZ on its own thread and restores it).

Sample tables: slot ``j`` of a system holds its batch ``(base + j) mod 8``, so relative step ``r``
of every system reads slot ``r mod 8`` even when the systems' step bases differ.  A group whose 16
systems share X, Y and ``base mod 8`` (an LR sweep from one page) reads one *shared* table,
``stabs[u]``: ``[8 slots][32 lanes][x, x^2, x^3, y]``, each value broadcast to the group's lanes (4 KiB,
at home in L1); any other group reads a *lane* table, ``tabs[t]``: ``[8 slots][32 lanes][x, x^2,
x^3, y][lanes]`` (64 KiB for 16 lanes, so its loads come from L2).  ``tab_of[g]`` is ``t`` (a lane table)
or ``-1 - u`` (a shared one).

Per-group arrays (float32; words are stored as the float lanes that carry their bits):

- ``params[g]``: ``[a, b, c, d][lanes]`` as the page's words (``ftz_bits`` in mode Z);
- ``hyper[g]``: ``[lr, inv][lanes]``, read through ``ftz_from_bits`` (mode Z);
- ``ring[g]``: ``[256][lanes]`` loss words, relative step ``r`` at row ``r mod 256``;
- ``hist[g]``: ``[H][lanes]`` loss words of relative steps ``loss_every - 1, 2 loss_every - 1, ...``;
- ``trace[g]``: ``[count][5][lanes]`` the sums each step applied (or no columns for none).

Helpers are plain njit functions (the project's policy, :mod:`meshnb.jit`): the vector width
comes from the types of their vector arguments (:func:`_load_as`, :func:`_splat_as`), the mode
is a constant of each entry that LLVM folds once it inlines the helpers.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from llvmlite import ir
from numba import types
from numba.extending import intrinsic

from .. import cpu, vec
from ..jit import jit
from ..kernels import BATCHES, WARP
from ..kernels import NSUMS as NSUMS  # the one definition; sweeps.lanes and sweeps.run read it here
from .single import IEEE, Z_DAZ, Z

Q = 4  # x, x^2, x^3, y
SHARED_SLOT = WARP * Q  # floats per slot of a shared table
SHARED_FLOATS = BATCHES * SHARED_SLOT
RING = 256


@dataclass(frozen=True)
class Shape:
    """The loop's shape: systems per group (one vector of ``lanes`` floats) and groups stepped together."""

    lanes: int
    block: int

    def __str__(self) -> str:
        return f"{self.lanes} lanes x {self.block}"


SHAPES = (
    Shape(32, 2), Shape(32, 1), Shape(16, 2), Shape(16, 1), Shape(8, 2), Shape(8, 1), Shape(4, 2), Shape(4, 1),
)  # fmt: skip
"""Every shape the loop compiles for (tests and benchmarks may ask for any)."""


def shape(target: cpu.VectorShape | None = None) -> Shape:
    """The shape for the CPU numba compiles for (:func:`meshnb.cpu.target_shape`).

    A group is 32 systems where a register holds 8 or 16 floats (a value in 2 AVX-512 or 4 AVX2
    registers) and 16 where it holds 4 (NEON, SSE), and two groups interleave.  Measured with 1024
    systems on one core (AVX-512 and AVX2 code, README "Sweeps"): wider groups win on both ISAs
    although the AVX2 shape spills a group's state (6 values) from its 16 registers, because
    what limits a step is the work in flight (each warp lane is a chain of about 10 dependent
    operations), and the spilled state is read-only within a step (a load per use, and loads have
    ports to spare).  8 lanes x 1, the shape that fits AVX2's registers, was 1.8x slower there."""
    t = cpu.target_shape() if target is None else target
    return Shape(32 if t.floats >= 8 else 16, 2)


def tab_floats(lanes: int) -> int:
    """Floats of one lane table (``[8 slots][32 warp lanes][4][lanes]``)."""
    return BATCHES * WARP * Q * lanes


_F32 = ir.FloatType()
_I32 = ir.IntType(32)
_WIDTHS = {**vec._BY_WIDTH, 32: vec.F32xN(32)}  # 32 lanes: a value in two AVX-512 registers (or four AVX2)


@intrinsic
def _load_as(typingctx, like, arr, start):
    """``arr[start : start + n]`` as one vector as wide as ``like`` (unchecked)."""
    if not (isinstance(like, vec.F32xN) and vec._is_f32_array(arr) and arr.dtype == types.float32):
        return None
    if not isinstance(start, types.Integer):
        return None

    def codegen(context, builder, sig, args):
        n = sig.args[0].n
        ptr = vec._lane_ptr(context, builder, sig.args[1], args[1], args[2], n)
        return builder.load(ptr, align=4, typ=ir.VectorType(_F32, n))

    return like(like, arr, start), codegen


@intrinsic
def _splat_as(typingctx, like, x):
    """A vector as wide as ``like`` with ``x`` in every lane."""
    if not (isinstance(like, vec.F32xN) and x == types.float32):
        return None

    def codegen(context, builder, sig, args):
        n = sig.args[0].n
        vty = ir.VectorType(_F32, n)
        one = builder.insert_element(ir.Constant(vty, ir.Undefined), args[1], ir.Constant(_I32, 0))
        return builder.shuffle_vector(one, one, ir.Constant(ir.VectorType(_I32, n), [0] * n))

    return like(like, x), codegen


@intrinsic
def _zeros(typingctx, n):
    """A vector of ``n`` (a literal) zeros: the entry's prototype of its width."""
    if not isinstance(n, types.IntegerLiteral) or n.literal_value not in _WIDTHS:
        return None
    width = n.literal_value

    def codegen(context, builder, sig, args):
        return ir.Constant(ir.VectorType(_F32, width), [0.0] * width)

    return _WIDTHS[width](n), codegen


@jit()
def _fl(v, mode):
    """After a vector op: the subnormal flush in mode Z (DAZ does it in hardware, IEEE not at all)."""
    if mode == Z:
        return vec.flush(v)
    return v


@jit()
def _out(v, mode):
    """Lanes as the words written out: ``ftz_bits`` in both mode-Z loops."""
    if mode == IEEE:
        return v
    return vec.words(v)


@jit()
def _terms(pa, pb, pc, pd, x, x2, x3, y, mode):
    """Warp lane terms of a group (SPEC 5): e, e x, e x^2, e x^3, e^2."""
    pred = _fl(vec.mul(pd, x), mode)  # Horner: ((d x + c) x + b) x + a
    pred = _fl(vec.add(pred, pc), mode)
    pred = _fl(vec.mul(pred, x), mode)
    pred = _fl(vec.add(pred, pb), mode)
    pred = _fl(vec.mul(pred, x), mode)
    pred = _fl(vec.add(pred, pa), mode)
    e = _fl(vec.sub(pred, y), mode)
    return e, _fl(vec.mul(e, x), mode), _fl(vec.mul(e, x2), mode), _fl(vec.mul(e, x3), mode), _fl(vec.mul(e, e), mode)


@jit()
def _lane_shared(pa, pb, pc, pd, tab, at, mode):
    """The terms of warp lane ``at`` (its offset in a shared table): one sample for the group."""
    return _terms(
        pa,
        pb,
        pc,
        pd,
        _splat_as(pa, tab[at]),
        _splat_as(pa, tab[at + 1]),
        _splat_as(pa, tab[at + 2]),
        _splat_as(pa, tab[at + 3]),
        mode,
    )


@jit()
def _lane_own(pa, pb, pc, pd, tab, at, stride, mode):
    """The terms of warp lane ``at`` (its offset in a lane table): a sample per system."""
    return _terms(
        pa,
        pb,
        pc,
        pd,
        _load_as(pa, tab, at),
        _load_as(pa, tab, at + stride),
        _load_as(pa, tab, at + 2 * stride),
        _load_as(pa, tab, at + 3 * stride),
        mode,
    )


@jit()
def _add5(u, v, mode):
    """One butterfly add of all five sums: the lower lane's value first, as SPEC 5 adds them."""
    return (
        _fl(vec.add(u[0], v[0]), mode),
        _fl(vec.add(u[1], v[1]), mode),
        _fl(vec.add(u[2], v[2]), mode),
        _fl(vec.add(u[3], v[3]), mode),
        _fl(vec.add(u[4], v[4]), mode),
    )


def _make_sums(mode: int, shared: bool, lanes: int):
    """``sums(pa, pb, pc, pd, tab, slot)`` for one mode, table kind and width: a function of its
    own (not inlined into the loop by numba), with its constants in it.

    The five sums of a step for a group: lane 0 of SPEC 5's butterfly, ``T(0, 1)``.  Leaf ``j``
    (0..15) is ``T(l, 16)`` for ``l`` = ``j`` bit-reversed (0, 8, 4, 12, 2, ...), so consecutive
    leaves pair up as the butterfly pairs them: leaves 2i and 2i+1 give ``T(l, 8)``, two of those
    ``T(l, 4)``, and so on, like a binary counter (the lower lane's value first).  Turn ``jj``
    does leaves 2 jj and 2 jj + 1 (lanes ``l`` and ``l + 8``, ``l`` = ``jj`` bit-reversed in 3
    bits): four warp lanes' chains in flight, about 5% faster than two (measured)."""
    stride = Q if shared else Q * lanes  # floats per warp lane in a slot
    slot_floats = WARP * stride

    if shared:

        @jit()
        def four(pa, pb, pc, pd, tab, at, lane):
            lo = _add5(
                _lane_shared(pa, pb, pc, pd, tab, at + lane * stride, mode),
                _lane_shared(pa, pb, pc, pd, tab, at + (lane + 16) * stride, mode),
                mode,
            )
            hi = _add5(
                _lane_shared(pa, pb, pc, pd, tab, at + (lane + 8) * stride, mode),
                _lane_shared(pa, pb, pc, pd, tab, at + (lane + 24) * stride, mode),
                mode,
            )
            return _add5(lo, hi, mode)  # T(l, 8)

    else:

        @jit()
        def four(pa, pb, pc, pd, tab, at, lane):
            lo = _add5(
                _lane_own(pa, pb, pc, pd, tab, at + lane * stride, lanes, mode),
                _lane_own(pa, pb, pc, pd, tab, at + (lane + 16) * stride, lanes, mode),
                mode,
            )
            hi = _add5(
                _lane_own(pa, pb, pc, pd, tab, at + (lane + 8) * stride, lanes, mode),
                _lane_own(pa, pb, pc, pd, tab, at + (lane + 24) * stride, lanes, mode),
                mode,
            )
            return _add5(lo, hi, mode)  # T(l, 8)

    @jit()
    def sums(pa, pb, pc, pd, tab, slot):
        at = slot * slot_floats
        t0 = four(pa, pb, pc, pd, tab, at, 0)  # lanes bit-reversed: 0, 4, 2, 6, 1, 5, 3, 7
        t1 = four(pa, pb, pc, pd, tab, at, 4)
        t2 = four(pa, pb, pc, pd, tab, at, 2)
        t3 = four(pa, pb, pc, pd, tab, at, 6)
        t4 = four(pa, pb, pc, pd, tab, at, 1)
        t5 = four(pa, pb, pc, pd, tab, at, 5)
        t6 = four(pa, pb, pc, pd, tab, at, 3)
        t7 = four(pa, pb, pc, pd, tab, at, 7)
        return _add5(
            _add5(_add5(t0, t1, mode), _add5(t2, t3, mode), mode),
            _add5(_add5(t4, t5, mode), _add5(t6, t7, mode), mode),
            mode,
        )  # T(0, 1)

    return sums


@jit()
def _apply(p, s, lr, inv, mode):
    """SPEC 6: ``p = sub(p, mul(lr, mul(s, inv)))`` for one param of a group."""
    return _fl(vec.sub(p, _fl(vec.mul(lr, _fl(vec.mul(s, inv), mode)), mode)), mode)


@jit()
def _record(g, s, loss, ring, hist, trace, i, r, h, keep_hist, mode, lanes):
    """Write one step's words of group ``g``: loss ring row, history row, trace row."""
    lw = _out(loss, mode)
    vec.store(ring[g], (r & (RING - 1)) * lanes, lw)
    if keep_hist:
        vec.store(hist[g], h * lanes, lw)
    if trace.shape[1] > 0:
        tr = trace[g]
        at = i * NSUMS * lanes
        vec.store(tr, at, _out(s[0], mode))
        vec.store(tr, at + lanes, _out(s[1], mode))
        vec.store(tr, at + 2 * lanes, _out(s[2], mode))
        vec.store(tr, at + 3 * lanes, _out(s[3], mode))
        vec.store(tr, at + 4 * lanes, _out(s[4], mode))


@jit()
def _store4(p, a, b, c, d, mode, lanes):
    vec.store(p, 0, _out(a, mode))
    vec.store(p, lanes, _out(b, mode))
    vec.store(p, 2 * lanes, _out(c, mode))
    vec.store(p, 3 * lanes, _out(d, mode))


def _make_entry(mode: int, lanes: int, block: int):
    """The compiled loop of one mode and shape: ``count`` steps of every group (``params.shape[0]``,
    a multiple of ``block``) from relative step ``first``.  ``loss_every`` > 0 samples the loss of
    relative steps ``k loss_every - 1`` into ``hist`` row ``k - 1``."""
    lsums, ssums = _make_sums(mode, False, lanes), _make_sums(mode, True, lanes)

    @jit(nogil=True)
    def entry(tabs, stabs, tab_of, params, hyper, ring, hist, trace, first, count, loss_every):
        proto = _zeros(lanes)
        old = vec.daz_on() if mode == Z_DAZ else np.uint32(0)
        for g in range(0, params.shape[0], block):
            t0 = tab_of[g]
            ta = tabs[t0] if t0 >= 0 else stabs[-1 - t0]
            pa = params[g]
            a0, b0 = _load_as(proto, pa, 0), _load_as(proto, pa, lanes)
            c0, d0 = _load_as(proto, pa, 2 * lanes), _load_as(proto, pa, 3 * lanes)
            lr0, inv0 = _load_as(proto, hyper[g], 0), _load_as(proto, hyper[g], lanes)
            if block == 2:
                t1 = tab_of[g + 1]
                tb = tabs[t1] if t1 >= 0 else stabs[-1 - t1]
                pb = params[g + 1]
                a1, b1 = _load_as(proto, pb, 0), _load_as(proto, pb, lanes)
                c1, d1 = _load_as(proto, pb, 2 * lanes), _load_as(proto, pb, 3 * lanes)
                lr1, inv1 = _load_as(proto, hyper[g + 1], 0), _load_as(proto, hyper[g + 1], lanes)
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
                    loss0 = _fl(vec.mul(s[4], inv0), mode)
                    loss1 = _fl(vec.mul(u[4], inv1), mode)
                    _record(g, s, loss0, ring, hist, trace, i, r, h, keep_hist, mode, lanes)
                    _record(g + 1, u, loss1, ring, hist, trace, i, r, h, keep_hist, mode, lanes)
                _store4(pb, a1, b1, c1, d1, mode, lanes)
            else:
                for i in range(count):
                    r = first + i
                    slot = r & (BATCHES - 1)
                    s = ssums(a0, b0, c0, d0, ta, slot) if t0 < 0 else lsums(a0, b0, c0, d0, ta, slot)
                    a0, b0 = _apply(a0, s[0], lr0, inv0, mode), _apply(b0, s[1], lr0, inv0, mode)
                    c0, d0 = _apply(c0, s[2], lr0, inv0, mode), _apply(d0, s[3], lr0, inv0, mode)
                    keep_hist = loss_every > 0 and (r + 1) % loss_every == 0
                    h = (r + 1) // loss_every - 1 if keep_hist else 0
                    _record(g, s, _fl(vec.mul(s[4], inv0), mode), ring, hist, trace, i, r, h, keep_hist, mode, lanes)
            _store4(pa, a0, b0, c0, d0, mode, lanes)
        if mode == Z_DAZ:
            vec.mxcsr_restore(old)

    return entry


_ENTRIES: dict[tuple[int, Shape], object] = {}


def entry(mode: int, sh: Shape):
    """The loop of ``mode`` and shape ``sh`` (made once; numba compiles it on its first call)."""
    key = (mode, sh)
    if key not in _ENTRIES:
        if sh not in SHAPES or mode not in (Z_DAZ, Z, IEEE):
            raise ValueError(f"no sweep loop for mode {mode} and shape {sh}")
        _ENTRIES[key] = _make_entry(mode, sh.lanes, sh.block)
    return _ENTRIES[key]


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
    sh: Shape,
) -> None:
    """Step every group of these arrays ``count`` steps from relative step ``first`` (module
    docstring for the layouts; the group count must be a multiple of ``sh.block``, every array
    float32 and C-contiguous, as :func:`empty_arrays` makes them).  Releases the GIL."""
    groups = params.shape[0]
    if groups % sh.block or params.shape[1:] != (4 * sh.lanes,) or hyper.shape != (groups, 2 * sh.lanes):
        raise ValueError(f"sweep loop: params/hyper do not hold {groups} groups of shape {sh}")
    if ring.shape != (groups, RING * sh.lanes) or tab_of.shape != (groups,):
        raise ValueError(f"sweep loop: ring/tab_of do not hold {groups} groups of shape {sh}")
    if trace.shape[0] != groups or (trace.shape[1] != 0 and trace.shape[1] < count * NSUMS * sh.lanes):
        raise ValueError("sweep loop: the trace buffer is shorter than the steps")
    entry(mode, sh)(
        tabs, stabs, tab_of, params, hyper, ring, hist, trace, np.int64(first), np.int64(count), np.int64(loss_every)
    )


def empty_arrays(groups: int, hist_rows: int, trace_steps: int, lanes: int) -> dict[str, np.ndarray]:
    """Zeroed per-group state arrays for ``groups`` groups of ``lanes`` systems (module docstring)."""
    return {
        "params": np.zeros((groups, 4 * lanes), dtype=np.float32),
        "hyper": np.zeros((groups, 2 * lanes), dtype=np.float32),
        "ring": np.zeros((groups, RING * lanes), dtype=np.float32),
        "hist": np.zeros((groups, hist_rows * lanes), dtype=np.float32),
        "trace": np.zeros((groups, trace_steps * NSUMS * lanes), dtype=np.float32),
    }
