"""The fast step loops: the bits of :mod:`meshnb.kernels`, at a few dozen vector ops a step.

``run_tasks`` runs one system's TASKs, ``run_fused`` a whole cluster's steps without an exchange;
how a step maps onto 8-lane vectors is docs/guide/float-mode-z.md's.  Each
mode's loop compiles on first use; the two entries check every argument (the door), the loop trusts them.
"""

from __future__ import annotations

import platform
import threading
import time

import numpy as np

from .. import cpu, vec
from ..jit import is_int, jit, per_mode
from ..kernels import (
    NSUMS,
    SAMPLES,
    TAB,
    U64_7,
    U64_255,
    W_INV_BATCH,
    W_LOSS,
    W_LR,
    W_NEXT_STEP,
    W_STEP_HI,
    W_STEPS_PER_TASK,
    W_X,
    W_Y,
    WARP,
    batches,
    end_task,
    fill_batches,
)
from ..vec import IEEE, MODES, Z_DAZ, Z
from ..view import PAGE_WORDS

__all__ = [
    "IEEE", "MODES", "Z_DAZ", "Z", "check_count", "check_mode", "loop_mode", "own_sums", "run_fused", "run_tasks",
    "warm_up",
]  # fmt: skip


def loop_mode(z: bool) -> int:
    """The fastest step-loop mode for float mode Z (``z=True``) or plain IEEE on this CPU."""
    if not z:
        return IEEE
    return Z_DAZ if cpu.HAS_DAZ else Z


# --- one step ---------------------------------------------------------------------------------
# ``vec.after(r, mode)`` follows every vector op. The helpers take vectors, which only njit code
# passes: they get no CPython wrapper, which a cold start would compile for each.


@jit(no_cpython_wrapper=True)
def _lanes(a, b, c, d, tab, at, mode):
    """Per-lane error terms of 8 lanes (SPEC 5): e, e x, e x^2, e x^3, e^2."""
    x = vec.load8(tab, at)
    x2 = vec.load8(tab, at + TAB)
    x3 = vec.load8(tab, at + 2 * TAB)
    y = vec.load8(tab, at + 3 * TAB)
    pred = vec.after(vec.mul(d, x), mode)  # Horner: ((d x + c) x + b) x + a
    pred = vec.after(vec.add(pred, c), mode)
    pred = vec.after(vec.mul(pred, x), mode)
    pred = vec.after(vec.add(pred, b), mode)
    pred = vec.after(vec.mul(pred, x), mode)
    pred = vec.after(vec.add(pred, a), mode)
    e = vec.after(vec.sub(pred, y), mode)
    ex = vec.after(vec.mul(e, x), mode)
    ex2 = vec.after(vec.mul(e, x2), mode)
    return e, ex, ex2, vec.after(vec.mul(e, x3), mode), vec.after(vec.mul(e, e), mode)


@jit(no_cpython_wrapper=True)
def _total(q0, q1, q2, q3, mode):
    """The butterfly of one sum held in four 8-lane vectors, as SPEC writes it; every lane ends with the sum.

    Levels 16 and 8 add whole vectors; levels 4, 2, 1 add lane ``l xor o`` within one vector.
    """
    s = vec.after(vec.add(vec.after(vec.add(q0, q2), mode), vec.after(vec.add(q1, q3), mode)), mode)
    s = vec.after(vec.add(s, vec.xor4(s, s)), mode)
    s = vec.after(vec.add(s, vec.xor2(s, s)), mode)
    return vec.after(vec.add(s, vec.xor1(s, s)), mode)


@jit(no_cpython_wrapper=True)
def _step(a, b, c, d, tab, at, mode):
    """One step's sums for splat params ``a, b, c, d``: the four param sums, splat, and the e^2 sum as a float32."""
    v0, v1, v2, v3, v4 = _lanes(a, b, c, d, tab, at, mode)
    w0, w1, w2, w3, w4 = _lanes(a, b, c, d, tab, at + 8, mode)
    x0, x1, x2, x3, x4 = _lanes(a, b, c, d, tab, at + 16, mode)
    y0, y1, y2, y3, y4 = _lanes(a, b, c, d, tab, at + 24, mode)
    # The param sums are on the chain from one step's params to the next: finishing each in
    # its own vector costs more adds than packing them but no shuffle across vectors, and
    # leaves the sums splat, which is what the next step's lanes need.
    s0 = _total(v0, w0, x0, y0, mode)
    s1 = _total(v1, w1, x1, y1, mode)
    s2 = _total(v2, w2, x2, y2, mode)
    s3 = _total(v3, w3, x3, y3, mode)
    # e^2 is off that chain (only its words leave): levels 16 and 8, then halve it to one lane.
    s4 = vec.after(vec.add(vec.after(vec.add(v4, x4), mode), vec.after(vec.add(w4, y4), mode)), mode)
    e4 = vec.after(vec.add(vec.half8_lo(s4, s4), vec.half8_hi(s4, s4)), mode)
    e2 = vec.after(vec.add(vec.half4_lo(e4, e4), vec.half4_hi(e4, e4)), mode)
    return s0, s1, s2, s3, vec.after(vec.lane(e2, 0) + vec.lane(e2, 1), mode)


@jit()
def own_sums(p4, tab, at, mode):
    """One step's sums for the params in the 4-lane ``p4`` (batch at ``at``): what a cluster member publishes."""
    a, b, c, d = vec.bcast8_0(p4, p4), vec.bcast8_1(p4, p4), vec.bcast8_2(p4, p4), vec.bcast8_3(p4, p4)
    s0, s1, s2, s3, e2 = _step(a, b, c, d, tab, at, mode)
    return vec.first_lanes(s0, s1, s2, s3), e2


@jit(no_cpython_wrapper=True)
def _apply(p, s, lr, inv, mode):
    """SPEC 6 on splat lanes: ``p - lr (s inv)``."""
    return vec.after(vec.sub(p, vec.after(vec.mul(lr, vec.after(vec.mul(s, inv), mode)), mode)), mode)


# --- the loops ----------------------------------------------------------------------------------


# The door of the loops (meshnb.jit): the arrays' types, checked when a variant is compiled.
_TASKS_ACCEPTS = {
    "words": "uint32[::1] writeable",
    "count": "uint64",
    "trace": "uint32[:, ::1] writeable",
    "tab": "float32[::1]",
    "made": "uint32[::1]",
}
_FUSED_ACCEPTS = {"pages": "uint32[:, ::1] writeable", "count": "uint64", "trace": "uint32[:, ::1] writeable"}


def _make_tasks(mode: int):
    """The TASK loop of one mode, compiled on its first call: a closure, so ``mode`` is a constant in its code."""

    @jit(accepts=_TASKS_ACCEPTS, name="meshnb.loops.run_tasks", nogil=True)
    def tasks(words, count, trace, tab, made):
        """``count`` steps of one system as consecutive TASKs, with every task's effects on the page (SPEC 8).

        Losses go into the page's ring, the sums into ``trace`` (``[count, 5]``, or no rows). ``tab``
        holds the batch tables and ``made`` what they were made from: returns False, having changed
        nothing, when they are not this page's samples in this mode, for the caller to make them again.
        """
        # The door's sizes (its types were checked when this compiled): nothing below checks.
        if words.shape[0] != PAGE_WORDS:
            raise ValueError("run_tasks: words must be a whole page, 1024 uint32 words")
        if trace.shape[1] != NSUMS or (trace.shape[0] != 0 and np.uint64(trace.shape[0]) < count):
            raise ValueError("run_tasks: trace must be [count, 5] (a row per step) or have no rows")
        if tab.shape[0] != 4 * TAB or made.shape[0] != _MADE + 1:
            raise ValueError("run_tasks: tab must be 1024 float32 (the batch tables), made 513 uint32")
        # The callers refuse such a page first (meshnb.runspec.check_can_run, with the wrap of the step
        # counter): this is the loop's own safety net, for a direct call (it would never end).
        if count != 0 and words[W_STEPS_PER_TASK] == 0:
            raise ValueError("run_tasks: the page's STEPS_PER_TASK is 0: its tasks would never progress")
        z = mode != IEEE
        # The tables' samples against the page's, all words (no early exit: a few vector ops).
        diff = made[_MADE] ^ np.uint32(_Z_MADE if z else _IEEE_MADE)
        for i in range(SAMPLES):
            diff |= (words[W_X + i] ^ made[i]) | (words[W_Y + i] ^ made[SAMPLES + i])
        if diff != 0:
            return False
        loss_ring = words[W_LOSS : W_LOSS + SAMPLES]
        record = trace.shape[0] > 0
        spt = np.uint64(words[W_STEPS_PER_TASK])
        done = np.uint64(0)
        total = np.uint64(count)
        old = vec.daz_on() if mode == Z_DAZ else np.uint32(0)
        first = True
        while done < total or first:
            first = False
            n = spt if total - done > spt else total - done
            base = np.uint64(words[W_STEP_HI]) << np.uint64(32) | np.uint64(words[W_NEXT_STEP])
            a = vec.splat8(vec.in_word(words[0], mode))  # each param in all 8 lanes
            b = vec.splat8(vec.in_word(words[1], mode))
            c = vec.splat8(vec.in_word(words[2], mode))
            d = vec.splat8(vec.in_word(words[3], mode))
            inv = vec.in_word(words[W_INV_BATCH], mode)
            lr8 = vec.splat8(vec.in_word(words[W_LR], mode))
            inv8 = vec.splat8(inv)
            row = np.int64(done)
            t = base
            for _ in range(np.int64(n)):
                s0, s1, s2, s3, e2 = _step(a, b, c, d, tab, np.int64(t & U64_7) * WARP, mode)
                a = _apply(a, s0, lr8, inv8, mode)
                b = _apply(b, s1, lr8, inv8, mode)
                c = _apply(c, s2, lr8, inv8, mode)
                d = _apply(d, s3, lr8, inv8, mode)
                loss_ring[t & U64_255] = vec.out_word(vec.after(e2 * inv, mode), mode)
                if record:
                    vec.store(trace[row], 0, vec.out(vec.first_lanes(s0, s1, s2, s3), mode))
                    trace[row, 4] = vec.out_word(e2, mode)
                    row += 1
                t += np.uint64(1)
            vec.store(words, 0, vec.out(vec.first_lanes(a, b, c, d), mode))
            end_task(words, base + n)
            done += n
        if mode == Z_DAZ:
            vec.mxcsr_restore(old)
        return True

    return tasks


def _make_fused(mode: int):
    """The cluster loop of one mode (a closure, as ``_make_tasks``)."""

    @jit(accepts=_FUSED_ACCEPTS, name="meshnb.loops.run_fused", nogil=True)
    def fused(pages, count, trace):
        """``count`` steps of a cluster, one system per row of ``pages``, as TASKs of page 0's STEPS_PER_TASK.

        No exchange: each step every system's own sums (batch ``t N + k``), the fold in system order, every
        system's apply of it; the pages end as the members' would without timeouts.
        """
        if pages.shape[0] == 0 or pages.shape[1] != PAGE_WORDS:
            raise ValueError("run_fused: pages must be [N, 1024] uint32 words, N >= 1")
        if trace.shape[1] != NSUMS or (trace.shape[0] != 0 and np.uint64(trace.shape[0]) < count):
            raise ValueError("run_fused: trace must be [count, 5] (a row per step) or have no rows")
        # The loop's own safety net, as in run_tasks (the callers refuse such pages with runspec's rules).
        if count != 0 and pages[0, W_STEPS_PER_TASK] == 0:
            raise ValueError("run_fused: page 0's STEPS_PER_TASK is 0: its tasks would never progress")
        n = pages.shape[0]
        z = mode != IEEE
        tabs = np.empty((n, 4 * TAB), dtype=np.float32)
        p = np.empty((n, 4), dtype=np.float32)
        lr = np.empty(n, dtype=np.float32)
        inv = np.empty(n, dtype=np.float32)
        own = np.empty((n, 4), dtype=np.float32)
        own_e2 = np.empty(n, dtype=np.float32)
        for k in range(n):
            tabs[k] = batches(pages[k], z)
        spt = np.uint64(pages[0, W_STEPS_PER_TASK])
        nsys = np.uint64(n)
        record = trace.shape[0] > 0
        done = np.uint64(0)
        total = np.uint64(count)
        old = vec.daz_on() if mode == Z_DAZ else np.uint32(0)
        while done < total:
            steps = spt if total - done > spt else total - done
            base = np.uint64(pages[0, W_STEP_HI]) << np.uint64(32) | np.uint64(pages[0, W_NEXT_STEP])
            for k in range(n):
                for j in range(4):
                    p[k, j] = vec.in_word(pages[k, j], mode)
                lr[k] = vec.in_word(pages[k, W_LR], mode)
                inv[k] = vec.in_word(pages[k, W_INV_BATCH], mode)
            for i in range(np.int64(steps)):
                t = base + np.uint64(i)
                for k in range(n):  # every system's own sums, as it would publish them
                    at = np.int64((t * nsys + np.uint64(k)) & U64_7) * WARP  # batch offset t N + k
                    u, e2 = own_sums(vec.load4(p[k], 0), tabs[k], at, mode)
                    vec.store(own[k], 0, u)
                    own_e2[k] = e2
                fold = vec.load4(own[0], 0)  # the fold, in system order
                fold_e2 = own_e2[0]
                for k in range(1, n):
                    fold = vec.after(vec.add(fold, vec.load4(own[k], 0)), mode)
                    fold_e2 = vec.after(fold_e2 + own_e2[k], mode)
                for k in range(n):  # every system applies the same fold to its own params
                    step = _apply(vec.load4(p[k], 0), fold, vec.splat4(lr[k]), vec.splat4(inv[k]), mode)
                    vec.store(p[k], 0, step)
                    pages[k, W_LOSS + np.int64(t & U64_255)] = vec.out_word(vec.after(fold_e2 * inv[k], mode), mode)
                if record:
                    row = np.int64(done + np.uint64(i))
                    vec.store(trace[row], 0, vec.out(fold, mode))
                    trace[row, 4] = vec.out_word(fold_e2, mode)
            for k in range(n):
                vec.store(pages[k], 0, vec.out(vec.load4(p[k], 0), mode))
                end_task(pages[k], base + steps)
            done += steps
        if mode == Z_DAZ:
            vec.mxcsr_restore(old)

    return fused


# One compiled entry per mode (Python calls do not pass literals: the pattern of meshnb.jit);
# each compiles on its first call, with the helpers it needs for that mode only.
_TASKS = per_mode(_make_tasks, MODES)
_FUSED = per_mode(_make_fused, MODES)

_U64_LIMIT = 1 << 64

# Each thread's batch tables for run_tasks, and ``made``: the X and Y words they were made from
# and at ``_MADE`` their kind (0: not made, ``_IEEE_MADE`` or ``_Z_MADE``). The loop checks them
# against the page; other samples, another ``z`` or a first call has them made again in numpy
# (25 us, where a task of 64 steps takes 2.3 us: hence kept).
_SCRATCH = threading.local()
_MADE, _IEEE_MADE, _Z_MADE = 2 * SAMPLES, 1, 2


def _tables() -> tuple[np.ndarray, np.ndarray]:
    tables = getattr(_SCRATCH, "tables", None)
    if tables is None:
        tables = _SCRATCH.tables = (np.empty(4 * TAB, dtype=np.float32), np.zeros(_MADE + 1, dtype=np.uint32))
    return tables


def _make_tables(words: np.ndarray, z: bool, tab: np.ndarray, made: np.ndarray) -> None:
    """The batch tables of the page ``words`` into ``tab``, and what they were made from into ``made``."""
    fill_batches(words, z, tab)
    made[:SAMPLES] = words[W_X : W_X + SAMPLES]
    made[SAMPLES:_MADE] = words[W_Y : W_Y + SAMPLES]
    made[_MADE] = _Z_MADE if z else _IEEE_MADE


def check_mode(mode: int) -> None:
    """The door for a loop mode: one of ``MODES``, and ``Z_DAZ`` only where the CPU has DAZ."""
    if type(mode) is int and (mode in (Z, IEEE) or (mode == Z_DAZ and cpu.HAS_DAZ)):
        return  # the usual case, in a few bytecodes (this runs once per njit call)
    if not is_int(mode) or mode not in MODES:
        raise ValueError(f"mode must be loops.Z_DAZ ({Z_DAZ}), Z ({Z}) or IEEE ({IEEE}), not {mode!r}")
    if mode == Z_DAZ and not cpu.HAS_DAZ:
        raise ValueError(f"mode Z_DAZ needs the x86 DAZ bit, which this CPU ({platform.machine()}) lacks: use Z")


def check_count(name: str, count: int, limit: int = _U64_LIMIT) -> None:
    """The door for a count of steps: an integer in ``0 .. limit - 1``."""
    if type(count) is int and 0 <= count < limit:
        return  # the usual case
    if not is_int(count):
        raise TypeError(f"{name} must be an integer, not {type(count).__name__}")
    if not 0 <= int(count) < limit:
        raise ValueError(f"{name} must be in 0 .. {limit - 1}, not {count}")


def run_tasks(words: np.ndarray, count: int, trace: np.ndarray, mode: int) -> None:
    """``count`` steps of one system alone as TASK calls (``arg = NEXT_STEP``, the last shortened), in one call.

    ``trace`` (``[count, 5]`` uint32, or no rows) takes the sums; ``mode`` is :func:`loop_mode`'s.
    """
    check_count("count", count)
    check_mode(mode)
    tab, made = _tables()
    while not _TASKS[mode](words, np.uint64(count), trace, tab, made):  # after the door's checks
        _make_tables(words, mode != IEEE, tab, made)  # (again only if a signal handler ran a page between)


def run_fused(pages: np.ndarray, count: int, trace: np.ndarray, mode: int) -> None:
    """``count`` steps of a cluster (``pages`` ``[N, 1024]``, at one step) in one call: the ``fused`` backend."""
    check_count("count", count)
    check_mode(mode)
    _FUSED[mode](pages, np.uint64(count), trace)


def warm_up(mode: int, fused: bool = False) -> float:
    """Compile (or load) the step loop of ``mode`` now, on a scratch page; the seconds the call took."""
    start = time.perf_counter()
    trace = np.empty((0, NSUMS), dtype=np.uint32)
    if fused:
        run_fused(np.zeros((1, PAGE_WORDS), dtype=np.uint32), 0, trace, mode)
    else:
        run_tasks(np.zeros(PAGE_WORDS, dtype=np.uint32), 0, trace, mode)
    return time.perf_counter() - start
