"""The sweep's step loop: many independent systems, one system per SIMD lane.

A vector of ``lanes`` floats holds one value of ``lanes`` systems (a *group*, :func:`shape`); a
step is SPEC 5's per-lane program for the 32 warp lanes in turn, each op one vector op, and the
butterfly an add tree: ``T(l, 16) = v[l] + v[l + 16]``, ``T(l, o) = T(l, 2o) + T(l + o, 2o)``,
the sum ``T(0, 1)``. :class:`_Emit` writes the step as LLVM IR in :data:`_SCHEDULE`'s order, state
in registers, no call in the loop; the modes are :mod:`meshnb.loops`'. The entries release the
GIL (MXCSR is per thread). ``bench/sweep_anchor.c`` is the same loop in C.

Slot ``j`` of a system's sample table holds its batch ``(base + j) mod 8``, so relative step
``r`` reads slot ``r mod 8``. Groups sharing X, Y and ``base mod 8`` read a *shared* table
``stabs[u]`` (``[8][32][x, x^2, x^3, y]``, splat to the lanes); others a *lane* table ``tabs[t]``
(``[8][32][4][lanes]``). ``tab_of[g]`` is ``t`` or ``-1 - u``; a block is all of one kind.

Per-group float32 arrays (words as the float lanes that carry their bits): ``params[g]``
``[a, b, c, d][lanes]``, ``hyper[g]`` ``[lr, inv][lanes]``, ``ring[g]`` ``[256][lanes]`` losses
(step ``r`` at row ``r mod 256``), ``hist[g]`` ``[H][lanes]`` the losses of steps
``k loss_every - 1``, ``trace[g]`` ``[count][5][lanes]`` (or no columns).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from llvmlite import ir
from numba import types
from numba.core import cgutils
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


SHAPES = (Shape(16, 1), Shape(8, 1), Shape(16, 2), Shape(8, 2), Shape(4, 1))
"""Every shape the loop compiles for (tests and benchmarks may ask for any)."""


def shape(target: cpu.VectorShape | None = None) -> Shape:
    """The shape for the CPU numba compiles for: one group (16 systems on AVX-512, 8 elsewhere) a vector register."""
    t = cpu.target_shape() if target is None else target
    return Shape(16 if t.floats >= 16 else 8, 1)


def tab_floats(lanes: int) -> int:
    """Floats of one lane table (``[8 slots][32 warp lanes][4][lanes]``)."""
    return BATCHES * WARP * Q * lanes


_F32 = ir.FloatType()
_I32 = ir.IntType(32)
_I64 = ir.IntType(64)

# The step's schedule: quarters of 8 lanes (quarter ``l0`` holds lanes ``l0 + 4k``), each op issued
# for a quarter's 8 lanes before the next, the next quarter's Horner ("h") before this quarter's
# terms and tree ("t"). Quarter ``l0`` yields ``T(l0, 4)``; ``T(0, 1) = (T(0, 4) + T(2, 4)) + (T(1, 4) + T(3, 4))``.
_QUARTERS = (0, 2, 1, 3)
_SCHEDULE = (("h", 0), ("h", 1), ("t", 0), ("h", 2), ("t", 1), ("h", 3), ("t", 2), ("t", 3))


class _Emit:
    """Emits one block's ops as LLVM IR: vectors of ``n`` floats, float ``mode`` a constant."""

    def __init__(self, builder: ir.IRBuilder, n: int, mode: int, shared: bool) -> None:
        self.b, self.n, self.mode, self.shared = builder, n, mode, shared
        self.vty = ir.VectorType(_F32, n)
        self.stride = Q if shared else Q * n  # floats per warp lane in a slot

    def fl(self, v: ir.Value) -> ir.Value:
        """After an op: mode Z's flush (DAZ does it in hardware, IEEE not at all)."""
        return vec._flush_ir(self.b, v, self.n, canonical_nan=False) if self.mode == Z else v

    def add(self, x: ir.Value, y: ir.Value) -> ir.Value:
        return self.fl(self.b.fadd(x, y))

    def sub(self, x: ir.Value, y: ir.Value) -> ir.Value:
        return self.fl(self.b.fsub(x, y))

    def mul(self, x: ir.Value, y: ir.Value) -> ir.Value:
        return self.fl(self.b.fmul(x, y))

    def out(self, v: ir.Value) -> ir.Value:
        """Lanes as the words written out: ``ftz_bits`` in both mode-Z loops."""
        return v if self.mode == IEEE else vec._flush_ir(self.b, v, self.n, canonical_nan=True)

    def sample(self, tab: ir.Value, lane: int, q: int) -> ir.Value:
        """Sample value ``q`` of warp lane ``lane`` for the group (``tab``: its slot's first float)."""
        b = self.b
        if self.shared:  # one float for the group's systems, splat
            x = b.load(b.gep(tab, [ir.Constant(_I64, lane * Q + q)]), align=4)
            one = b.insert_element(ir.Constant(self.vty, ir.Undefined), x, ir.Constant(_I32, 0))
            return b.shuffle_vector(one, one, ir.Constant(ir.VectorType(_I32, self.n), [0] * self.n))
        ptr = b.gep(tab, [ir.Constant(_I64, lane * self.stride + q * self.n)])
        return b.load(b.bitcast(ptr, self.vty.as_pointer()), align=4)

    def horner(self, tab: ir.Value, p: list[ir.Value], l0: int) -> list[ir.Value]:
        """The 8 errors ``e = ((d x + c) x + b) x + a - y`` of quarter ``l0``, op by op across its lanes."""
        lanes = [l0 + 4 * k for k in range(8)]
        xs = [self.sample(tab, lane, 0) for lane in lanes]
        h = [self.mul(p[3], x) for x in xs]
        h = [self.add(v, p[2]) for v in h]
        h = [self.mul(v, x) for v, x in zip(h, xs)]
        h = [self.add(v, p[1]) for v in h]
        h = [self.mul(v, x) for v, x in zip(h, xs)]
        h = [self.add(v, p[0]) for v in h]
        return [self.sub(v, self.sample(tab, lane, 3)) for v, lane in zip(h, lanes)]

    def tree8(self, t: list[ir.Value]) -> ir.Value:
        """``T(l0, 4)`` from the 8 leaves of quarter ``l0`` (``t[k]``: lane ``l0 + 4k``)."""
        return self.add(
            self.add(self.add(t[0], t[4]), self.add(t[2], t[6])), self.add(self.add(t[1], t[5]), self.add(t[3], t[7]))
        )

    def terms(self, tab: ir.Value, e: list[ir.Value], l0: int) -> list[ir.Value]:
        """The five sums' ``T(l0, 4)`` of quarter ``l0``: e, e x, e x^2, e x^3, e^2, each summed as it is made."""
        lanes = [l0 + 4 * k for k in range(8)]
        out = [self.tree8(e)]
        for q in range(3):
            out.append(self.tree8([self.mul(v, self.sample(tab, lane, q)) for v, lane in zip(e, lanes)]))
        out.append(self.tree8([self.mul(v, v) for v in e]))
        return out

    def steps(self, tabs: list[ir.Value], ps: list[list[ir.Value]]) -> list[list[ir.Value]]:
        """The five sums of each group of a block, the groups' ops interleaved phase by phase."""
        es: list[dict[int, list[ir.Value]]] = [{} for _ in ps]
        parts: list[dict[int, list[ir.Value]]] = [{} for _ in ps]
        for kind, q in _SCHEDULE:
            for j, (tab, p) in enumerate(zip(tabs, ps)):
                if kind == "h":
                    es[j][q] = self.horner(tab, p, _QUARTERS[q])
                else:
                    parts[j][q] = self.terms(tab, es[j].pop(q), _QUARTERS[q])
        sums = []
        for part in parts:
            sums.append(
                [self.add(self.add(part[0][s], part[1][s]), self.add(part[2][s], part[3][s])) for s in range(NSUMS)]
            )
        return sums

    def apply(self, p: ir.Value, s: ir.Value, lr: ir.Value, inv: ir.Value) -> ir.Value:
        """SPEC 6: ``p = sub(p, mul(lr, mul(s, inv)))``."""
        return self.sub(p, self.mul(lr, self.mul(s, inv)))


def _rows(context, builder, aryty, ary) -> tuple[ir.Value, ir.Value]:
    """A C-contiguous 2-D float32 array's data pointer and floats per row."""
    a = context.make_array(aryty)(context, builder, ary)
    return a.data, cgutils.unpack_tuple(builder, a.shape, aryty.ndim)[1]


def _literal(t) -> int | None:
    return int(t.literal_value) if isinstance(t, (types.IntegerLiteral, types.BooleanLiteral)) else None


@intrinsic
def _run_block(typingctx, tabs, tab_of, params, hyper, ring, hist, trace, g, first, count, loss_every, shape):
    """``count`` steps of one block of groups, all of shared or all of lane tables, as LLVM IR.

    ``shape`` is a literal tuple ``(mode, n, block, shared)``: one intrinsic at module level, so the
    entries that call it are closures of plain ints, which numba caches across processes.
    """
    arrays = (tabs, params, hyper, ring, hist, trace)
    if not all(isinstance(a, types.Array) and a.ndim == 2 and a.layout == "C" for a in arrays):
        return None
    if not isinstance(shape, types.BaseTuple) or len(shape) != 4:
        return None
    consts = [_literal(t) for t in shape]
    if any(c is None for c in consts):
        return None
    mode, n, block, shared_int = (int(c) for c in consts)  # type: ignore[arg-type]
    shared = bool(shared_int)
    sig = types.none(tabs, tab_of, params, hyper, ring, hist, trace, g, first, count, loss_every, shape)

    def codegen(context, builder, sig, args):
        tabs_v, tab_of_v, params_v, hyper_v, ring_v, hist_v, trace_v, g_v, first_v, count_v, every_v, _ = args
        em = _Emit(builder, n, mode, shared)
        vty = em.vty
        vptr = vty.as_pointer()
        tab_data, tab_row = _rows(context, builder, sig.args[0], tabs_v)
        tab_of_a = context.make_array(sig.args[1])(context, builder, tab_of_v)
        rows = {
            name: _rows(context, builder, sig.args[i], args[i])
            for name, i in (("params", 2), ("hyper", 3), ("ring", 4), ("hist", 5), ("trace", 6))
        }

        def at(name: str, j: int, offset: ir.Value) -> ir.Value:  # row g + j, float offset: a vector pointer
            data, width = rows[name]
            row = builder.mul(builder.add(g_v, ir.Constant(_I64, j)), width)
            return builder.bitcast(builder.gep(data, [builder.add(row, offset)]), vptr)

        c = lambda k: ir.Constant(_I64, k)
        tab0 = []
        for j in range(block):
            t = builder.load(builder.gep(tab_of_a.data, [builder.add(g_v, c(j))]))
            row = builder.sub(c(-1), t) if shared else t
            tab0.append(builder.gep(tab_data, [builder.mul(row, tab_row)]))
        state = [[cgutils.alloca_once(builder, vty) for _ in range(4)] for _ in range(block)]
        lr = [builder.load(at("hyper", j, c(0)), align=4) for j in range(block)]
        inv = [builder.load(at("hyper", j, c(n)), align=4) for j in range(block)]
        for j in range(block):
            for k in range(4):
                builder.store(builder.load(at("params", j, c(k * n)), align=4), state[j][k])
        every_pos = builder.icmp_signed(">", every_v, c(0))
        every_safe = builder.select(every_pos, every_v, c(1))
        keep_trace = builder.icmp_signed(">", rows["trace"][1], c(0))
        slot_floats = WARP * em.stride
        with cgutils.for_range(builder, count_v) as loop:
            i = loop.index
            r = builder.add(first_v, i)
            slot = builder.and_(r, c(BATCHES - 1))
            tabs_now = [builder.gep(t, [builder.mul(slot, c(slot_floats))]) for t in tab0]
            ps = [[builder.load(s) for s in st] for st in state]
            sums = em.steps(tabs_now, ps)
            row = builder.mul(builder.and_(r, c(RING - 1)), c(n))
            r1 = builder.add(r, c(1))
            keep_hist = builder.and_(every_pos, builder.icmp_signed("==", builder.srem(r1, every_safe), c(0)))
            h = builder.mul(builder.sub(builder.sdiv(r1, every_safe), c(1)), c(n))
            for j in range(block):
                s = sums[j]
                for k in range(4):
                    builder.store(em.apply(ps[j][k], s[k], lr[j], inv[j]), state[j][k])
                loss = em.out(em.mul(s[4], inv[j]))
                builder.store(loss, at("ring", j, row), align=4)
                with builder.if_then(keep_hist, likely=False):
                    builder.store(loss, at("hist", j, h), align=4)
                with builder.if_then(keep_trace, likely=False):
                    base = builder.mul(i, c(NSUMS * n))
                    for k in range(NSUMS):
                        builder.store(em.out(s[k]), at("trace", j, builder.add(base, c(k * n))), align=4)
        for j in range(block):
            for k in range(4):
                builder.store(em.out(builder.load(state[j][k])), at("params", j, c(k * n)), align=4)
        return context.get_dummy_value()

    return sig, codegen


def _make_entry(mode: int, lanes: int, block: int):
    """The compiled loop of one mode and shape: ``count`` steps of every group from relative step ``first``.

    ``loss_every`` > 0 samples the loss of relative steps ``k loss_every - 1`` into ``hist`` row ``k - 1``.
    """
    shared_shape = (mode, lanes, block, 1)  # constants of the closure: literals where _run_block reads them
    lane_shape = (mode, lanes, block, 0)

    @jit(nogil=True)
    def entry(tabs, stabs, tab_of, params, hyper, ring, hist, trace, first, count, loss_every):
        old = vec.daz_on() if mode == Z_DAZ else np.uint32(0)
        for g in range(0, params.shape[0], block):
            if tab_of[g] < 0:
                _run_block(stabs, tab_of, params, hyper, ring, hist, trace, g, first, count, loss_every, shared_shape)
            else:
                _run_block(tabs, tab_of, params, hyper, ring, hist, trace, g, first, count, loss_every, lane_shape)
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
    """Step every group ``count`` steps from relative step ``first``, GIL released (arrays: :func:`empty_arrays`)."""
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
