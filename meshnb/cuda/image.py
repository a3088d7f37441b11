"""The CUDA image of the train program (numba-cuda): one warp per system, the bits of SPEC 4-8.

Lane ``l`` takes sample ``g + 8 l`` of batch ``g``; the warp sums the five error terms with the xor
butterfly; a cluster's members (warps of one block) fold their words in system order through
shared memory.  The page format is the CPU's (:data:`meshnb.view.LAYOUT`).  Every f32 operation
goes through a helper chosen once at import: libdevice's ``fadd_rn`` and friends on a device (PTX
``add.rn.f32``, never contracted), numpy float32 in the simulator (whose libdevice is stubs and
which has no ``shfl_xor_sync``: a shared-memory butterfly with the same pairs).  No Python float
literal appears in a kernel (it would promote to f64).  docs/guide/gpu.md says the rest.
"""

from __future__ import annotations

import math

import numpy as np
from numba import cuda, float32, float64, int32, uint32, uint64
from numba.cuda import libdevice

from ..floatz import EXP_MASK, MANT_MASK, SIGN_MASK
from ..kernels import (
    NSUMS,
    W_ERR,
    W_INV_BATCH,
    W_LOSS,
    W_LR,
    W_NEXT_STEP,
    W_PENDING,
    W_STEP_HI,
    W_STEPS_PER_TASK,
    W_X,
    W_Y,
    WARP,
)

SIM = bool(cuda.config.ENABLE_CUDASIM)
MAX_WARPS = 32  # warps in a block (1024 threads): the largest cluster one block holds
FULL_MASK = 0xFFFFFFFF

CANONICAL_NAN = np.uint32(0x7FFFFFFF)
U32_ZERO = np.uint32(0)
U64_7 = np.uint64(7)
U64_255 = np.uint64(255)
U64_32 = np.uint64(32)
U64_LOW = np.uint64(0xFFFFFFFF)
PI = np.float64(math.pi)
HALF64 = np.float64(0.5)
ONE64 = np.float64(1.0)
MAX_THREADS = WARP * MAX_WARPS
# The register budget of steps_kernel: a 32-system cluster is one 1024-thread block, which fits an
# SM only at <= 64 registers a thread (65536 / 1024).  Launch bounds of 1024 threads make ptxas
# (and a driver's JIT) keep to that, or fail to compile, rather than fail the launch;
# tests/cuda/test_ptx_budget.py reads ptxas' report.  The simulator's jit takes no launch bounds.
REGISTER_BUDGET = 65536 // MAX_THREADS
STEPS_JIT = {} if SIM else {"launch_bounds": (MAX_THREADS,)}
# The simulator's butterfly buffer: [warp, sum, lane]; on a device a placeholder (shfl is used).
BUF_SHAPE = (MAX_WARPS, NSUMS, WARP) if SIM else (1, 1, 1)


# --- one f32 op, rounded on its own; the two sets, chosen once ----------------------------------


def _sim_add(a, b):  # numpy float32 scalars: IEEE binary32, round to nearest even
    return np.float32(a) + np.float32(b)


def _sim_sub(a, b):
    return np.float32(a) - np.float32(b)


def _sim_mul(a, b):
    return np.float32(a) * np.float32(b)


def _sim_div(a, b):
    return np.float32(a) / np.float32(b)


def _sim_f2u(f):
    return np.float32(f).view(np.uint32)


def _sim_u2f(u):
    return np.uint32(u).view(np.float32)


@cuda.jit(device=True)
def _dev_f2u(f):
    return uint32(libdevice.float_as_int(f))


@cuda.jit(device=True)
def _dev_u2f(u):
    return libdevice.int_as_float(int32(u))


if SIM:
    fadd, fsub, fmul, fdiv, f2u, u2f = _sim_add, _sim_sub, _sim_mul, _sim_div, _sim_f2u, _sim_u2f
else:
    fadd, fsub, fmul, fdiv = libdevice.fadd_rn, libdevice.fsub_rn, libdevice.fmul_rn, libdevice.fdiv_rn
    f2u, u2f = _dev_f2u, _dev_u2f


# --- float mode Z on the bits -----------------------------------------------------------------


@cuda.jit(device=True)
def flush_bits(u):
    """``ftz_from_bits``'s word: subnormal -> signed zero, NaN -> ``0x7FFFFFFF``."""
    e = uint32(u) & EXP_MASK
    if e == U32_ZERO:
        return uint32(u) & SIGN_MASK
    if e == EXP_MASK and (uint32(u) & MANT_MASK) != U32_ZERO:
        return CANONICAL_NAN
    return uint32(u)


@cuda.jit(device=True)
def res(r, z):
    """A result in mode Z (``z``): a subnormal written as a zero of the same sign; NaNs are made
    canonical where words leave (an op with a NaN operand gives a NaN: :mod:`meshnb.floatz`)."""
    if z:
        u = f2u(r)
        if (u & EXP_MASK) == U32_ZERO:
            return u2f(u & SIGN_MASK)
    return r


@cuda.jit(device=True)
def in_word(u, z):
    """A word entering the kernel: ``ftz_from_bits`` in mode Z, the plain bits otherwise."""
    if z:
        return u2f(flush_bits(u))
    return u2f(u)


@cuda.jit(device=True)
def out_word(f, z):
    """A word leaving the kernel: ``ftz_bits`` in mode Z, the plain bits otherwise."""
    if z:
        return flush_bits(f2u(f))
    return f2u(f)


# --- the butterfly: 5 sums over the warp ------------------------------------------------------


@cuda.jit(device=True)
def _butterfly_shfl(v0, v1, v2, v3, v4, buf, w, lane, z):
    o = 16
    while o >= 1:
        v0 = res(fadd(v0, cuda.shfl_xor_sync(FULL_MASK, v0, o)), z)
        v1 = res(fadd(v1, cuda.shfl_xor_sync(FULL_MASK, v1, o)), z)
        v2 = res(fadd(v2, cuda.shfl_xor_sync(FULL_MASK, v2, o)), z)
        v3 = res(fadd(v3, cuda.shfl_xor_sync(FULL_MASK, v3, o)), z)
        v4 = res(fadd(v4, cuda.shfl_xor_sync(FULL_MASK, v4, o)), z)
        o >>= 1
    return v0, v1, v2, v3, v4


@cuda.jit(device=True)
def _butterfly_shared(v0, v1, v2, v3, v4, buf, w, lane, z):
    # The simulator has no shfl_xor_sync: each round every lane publishes its values, the block
    # syncs, every lane reads lane l xor o's, the block syncs again (before the next round's
    # writes).  The same pairs as the shuffle, so the same adds and bits.
    o = 16
    while o >= 1:
        buf[w, 0, lane] = v0
        buf[w, 1, lane] = v1
        buf[w, 2, lane] = v2
        buf[w, 3, lane] = v3
        buf[w, 4, lane] = v4
        cuda.syncthreads()
        other = lane ^ o
        u0, u1, u2, u3, u4 = buf[w, 0, other], buf[w, 1, other], buf[w, 2, other], buf[w, 3, other], buf[w, 4, other]
        cuda.syncthreads()
        v0 = res(fadd(v0, u0), z)
        v1 = res(fadd(v1, u1), z)
        v2 = res(fadd(v2, u2), z)
        v3 = res(fadd(v3, u3), z)
        v4 = res(fadd(v4, u4), z)
        o >>= 1
    return v0, v1, v2, v3, v4


butterfly = _butterfly_shared if SIM else _butterfly_shfl


# --- one step's lane terms and the apply ------------------------------------------------------


@cuda.jit(device=True)
def lane_terms(a, b, c, d, x, y, z):
    """SPEC 5 for one lane, op for op: e, e x, e x^2, e x^3, e^2."""
    x2 = res(fmul(x, x), z)
    x3 = res(fmul(x2, x), z)
    pred = res(fmul(d, x), z)  # Horner: ((d x + c) x + b) x + a
    pred = res(fadd(pred, c), z)
    pred = res(fmul(pred, x), z)
    pred = res(fadd(pred, b), z)
    pred = res(fmul(pred, x), z)
    pred = res(fadd(pred, a), z)
    e = res(fsub(pred, y), z)
    return e, res(fmul(e, x), z), res(fmul(e, x2), z), res(fmul(e, x3), z), res(fmul(e, e), z)


@cuda.jit(device=True)
def apply1(p, s, lr, inv, z):
    """SPEC 6 for one param: ``sub(p, mul(lr, mul(s, inv)))``."""
    return res(fsub(p, res(fmul(lr, res(fmul(s, inv), z)), z)), z)


@cuda.jit(device=True)
def _end_task(pages, row, lane, a, b, c, d, t, z):
    """A task's end on the page (lane 0 writes): PARAMS, ERR = 0, PENDING = 0, STEP_HI:NEXT_STEP."""
    if lane == 0:
        pages[row, 0] = out_word(a, z)
        pages[row, 1] = out_word(b, z)
        pages[row, 2] = out_word(c, z)
        pages[row, 3] = out_word(d, z)
        pages[row, W_ERR] = U32_ZERO
        pages[row, W_PENDING] = U32_ZERO
        pages[row, W_STEP_HI] = uint32(t >> U64_32)
        pages[row, W_NEXT_STEP] = uint32(t & U64_LOW)


# --- the kernels ------------------------------------------------------------------------------


@cuda.jit(**STEPS_JIT)
def steps_kernel(pages, count, n, trace, record, z):
    """``count`` steps of clusters of ``n`` systems, one warp per system, as consecutive TASKs.

    ``pages`` ``[rows, 1024]`` uint32, a block holding whole clusters; with ``record``, ``trace``
    (``[rows, count, 5]``, else a placeholder) receives the sums each step applied.  A cluster's
    members are at one step with one STEPS_PER_TASK (the host checks)."""
    slots = cuda.shared.array((MAX_WARPS, NSUMS), dtype=uint32)
    buf = cuda.shared.array(BUF_SHAPE, dtype=float32)
    tid = cuda.threadIdx.x
    lane = tid % WARP
    w = tid // WARP
    k = w % n  # member k of its cluster
    first = w - k  # the cluster's first warp in the block
    row = cuda.blockIdx.x * (cuda.blockDim.x // WARP) + w
    a = in_word(pages[row, 0], z)
    b = in_word(pages[row, 1], z)
    c = in_word(pages[row, 2], z)
    d = in_word(pages[row, 3], z)
    lr = in_word(pages[row, W_LR], z)
    inv = in_word(pages[row, W_INV_BATCH], z)
    spt = uint64(pages[row, W_STEPS_PER_TASK])
    t = (uint64(pages[row, W_STEP_HI]) << U64_32) | uint64(pages[row, W_NEXT_STEP])
    nn = uint64(n)
    kk = uint64(k)
    if count == 0:
        _end_task(pages, row, lane, a, b, c, d, t, z)
    left = uint64(0)
    for i in range(count):
        if left == uint64(0):  # a task starts (its params are the last task's, through the page's words)
            rest = uint64(count - i)
            left = spt if rest > spt else rest
        i_s = int32((t * nn + kk) & U64_7) + 8 * lane  # batch g = (t N + k) mod 8; lane l takes sample g + 8 l
        x = in_word(pages[row, W_X + i_s], z)
        y = in_word(pages[row, W_Y + i_s], z)
        v0, v1, v2, v3, v4 = lane_terms(a, b, c, d, x, y, z)
        v0, v1, v2, v3, v4 = butterfly(v0, v1, v2, v3, v4, buf, w, lane, z)
        if n == 1:  # no group: the own sums, as the words they leave as
            s0, s1, s2, s3, s4 = (
                in_word(out_word(v0, z), z),
                in_word(out_word(v1, z), z),
                in_word(out_word(v2, z), z),
                in_word(out_word(v3, z), z),
                in_word(out_word(v4, z), z),
            )
        else:  # publish the slot words, fold the cluster's in system order (SPEC 9)
            if lane == 0:
                slots[w, 0] = out_word(v0, z)
                slots[w, 1] = out_word(v1, z)
                slots[w, 2] = out_word(v2, z)
                slots[w, 3] = out_word(v3, z)
                slots[w, 4] = out_word(v4, z)
            cuda.syncthreads()
            s0 = in_word(slots[first, 0], z)
            s1 = in_word(slots[first, 1], z)
            s2 = in_word(slots[first, 2], z)
            s3 = in_word(slots[first, 3], z)
            s4 = in_word(slots[first, 4], z)
            for m in range(1, n):
                s0 = res(fadd(s0, in_word(slots[first + m, 0], z)), z)
                s1 = res(fadd(s1, in_word(slots[first + m, 1], z)), z)
                s2 = res(fadd(s2, in_word(slots[first + m, 2], z)), z)
                s3 = res(fadd(s3, in_word(slots[first + m, 3], z)), z)
                s4 = res(fadd(s4, in_word(slots[first + m, 4], z)), z)
            cuda.syncthreads()  # every member has read the slots before the next step's writes
        a = apply1(a, s0, lr, inv, z)
        b = apply1(b, s1, lr, inv, z)
        c = apply1(c, s2, lr, inv, z)
        d = apply1(d, s3, lr, inv, z)
        if lane == 0:
            pages[row, W_LOSS + int32(t & U64_255)] = out_word(res(fmul(s4, inv), z), z)
            if record:
                trace[row, i, 0] = out_word(s0, z)
                trace[row, i, 1] = out_word(s1, z)
                trace[row, i, 2] = out_word(s2, z)
                trace[row, i, 3] = out_word(s3, z)
                trace[row, i, 4] = out_word(s4, z)
        t += uint64(1)
        left -= uint64(1)
        if left == uint64(0):  # the task's end: the params continue through their words
            _end_task(pages, row, lane, a, b, c, d, t, z)
            a = in_word(out_word(a, z), z)
            b = in_word(out_word(b, z), z)
            c = in_word(out_word(c, z), z)
            d = in_word(out_word(d, z), z)


@cuda.jit(device=True)
def sin_pi(x):
    """sin(pi x) rounded to f32 (SPEC 4): f64 sin on the exactly reduced argument, sign from x
    (the construct :mod:`meshnb.conformance.audit`'s sin_pi rule accepts)."""
    ax = abs(float64(x))
    r = ONE64 - ax if ax > HALF64 else ax
    y = float32(math.sin(PI * r))
    if f2u(x) & SIGN_MASK:
        return -y
    return y


@cuda.jit
def init_kernel(xy):
    """SPEC 4's samples into ``xy`` (``[512]`` uint32: X then Y words), one thread per sample:
    ``h = div(2, from_u32(255))``, ``x_i = add(-1, mul(from_u32(i), h))``, ``y_i = sin_pi(x_i)``."""
    i = cuda.grid(1)
    if i < 256:
        h = res(fdiv(float32(2), res(float32(uint32(255)), True)), True)
        x = res(fadd(float32(-1), res(fmul(res(float32(uint32(i)), True), h), True)), True)
        xy[i] = out_word(x, True)
        xy[256 + i] = out_word(sin_pi(x), True)
