"""The train program (SPEC 8): ``init(ctx)`` and ``task(ctx, op, arg)``.

A :class:`Context` holds a system's view, counters, and optionally a group, an exchange and a
trace. A system alone runs a task in one njit call; a group's two forms of the task loop (over any
:class:`~meshnb.exchange.Exchange`, or in njit over an exchange page in memory) are the
[clusters guide](../guide/clusters.md)'s.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from . import cpu, floatz, kernels, loops
from .exchange import EX_SLOT_WORDS, BlockingWaiter, Exchange, Group, PageExchange, aborted, word_layout
from .jit import is_int
from .loops import grouped
from .trace import Trace
from .view import FIELDS, HEADER_WORDS, WORD, View

OP_TASK = 0x0
OP_SET_LR = 0x10
R_NONE = 0
R_BAD_OP = 0xFFFFFFFF

INITS, STEPS, TIMEOUTS = 0, 1, 2
COUNTER_NAMES = ("inits", "steps", "timeouts")

LR_BITS = 0x3F000000  # 0.5f
STEPS_PER_TASK = 64
LAST_STEP = (1 << 64) - 2  # the round of step 2^64 - 1 would wrap to 0

_MASK32 = 0xFFFFFFFF
_MASK64 = (1 << 64) - 1
_LOSS = slice(WORD["LOSS"], WORD["LOSS"] + FIELDS["LOSS"].count)


@dataclass
class Context:
    """One system's surroundings: view, counters (u64: INITS, STEPS, TIMEOUTS), group, exchange.

    Parameters
    ----------
    view : View
        The system's page (its whole state).
    counters : numpy.ndarray, optional
        ``[inits, steps, timeouts]``, uint64; zeros by default.
    group : Group, optional
        The system's place in a cluster; None alone.
    exchange : Exchange, optional
        The cluster's exchange (SPEC 9).
    trace : Trace, optional
        Records the sums each step applied; None records nothing.
    z : bool, default True
        Float mode Z; False: plain IEEE float32.

    Examples
    --------
    >>> from meshnb import Context, View
    >>> Context(View()).grouped
    False
    """

    view: View
    counters: np.ndarray = field(default_factory=lambda: np.zeros(3, dtype=np.uint64))
    group: Group | None = None
    exchange: Exchange | None = None
    trace: Trace | None = None
    z: bool = True

    @property
    def grouped(self) -> bool:
        """The context runs SPEC 9's grouped steps (it has a group and an exchange)."""
        return self.group is not None and self.exchange is not None

    def counter_dict(self) -> dict[str, int]:
        """SPEC 10's counters by name.

        Returns
        -------
        dict of str to int

        Examples
        --------
        >>> Context(View()).counter_dict()
        {'inits': 0, 'steps': 0, 'timeouts': 0}
        """
        return {name: int(c) for name, c in zip(COUNTER_NAMES, self.counters)}


def inv_batch(systems: int) -> np.float32:
    """INV_BATCH of a group of ``systems``: ``div(1, from_u32(32 N))``, in numpy with mode Z's flush."""
    n = np.array([kernels.WARP * systems], dtype=np.uint32)
    d = floatz.flush_words(n.astype(np.float32).view(np.uint32)).view(np.float32)
    return np.float32(floatz.flush_words((np.float32(1.0) / d).view(np.uint32)).view(np.float32)[0])


def init(ctx: Context) -> None:
    """Fresh state (SPEC 8): samples X and Y, LR = 0.5, STEPS_PER_TASK = 64, INV_BATCH, the rest zero; counts one init.

    Parameters
    ----------
    ctx : Context
        The system to initialise: its view is written in place.

    Examples
    --------
    >>> from meshnb import Context, View, init
    >>> ctx = Context(View())
    >>> init(ctx)
    >>> ctx.view.word("STEPS_PER_TASK"), float(ctx.view["INV_BATCH"]), ctx.counter_dict()["inits"]
    (64, 0.03125, 1)
    """
    v = ctx.view
    xs, ys = kernels.samples()
    v["X"] = xs
    v["Y"] = ys
    v["LOSS"] = 0
    v["PARAMS"] = 0
    v.set_word("LR", LR_BITS)
    v.set_word("STEPS_PER_TASK", STEPS_PER_TASK)
    v["INV_BATCH"] = inv_batch(ctx.group.n if ctx.group is not None else 1)
    for name in ("NEXT_STEP", "ERR", "PENDING", "ROUND", "STEP_HI"):
        v.set_word(name, 0)
    ctx.counters[INITS] += 1


def task(ctx: Context, op: int, arg: int) -> int:
    """Run one op: TASK (steps from ``STEP_HI:arg``), SET_LR (``arg`` = f32 bits), else R_BAD_OP.

    Parameters
    ----------
    ctx : Context
        The system; its view holds the state the op reads and writes.
    op : int
        ``OP_TASK`` (0x0) or ``OP_SET_LR`` (0x10); any other u32 is answered ``R_BAD_OP``.
    arg : int
        TASK: the low half of the first step; SET_LR: the LR's f32 bits.

    Returns
    -------
    int
        TASK: the steps done; SET_LR: ``R_NONE`` (0); an unknown op: ``R_BAD_OP`` (0xFFFFFFFF).

    Raises
    ------
    TypeError
        When ``op`` or ``arg`` is not an integer.
    ValueError
        When ``op`` or ``arg`` is not a u32.

    Examples
    --------
    >>> from meshnb import Context, View, init, task
    >>> ctx = Context(View())
    >>> init(ctx)
    >>> task(ctx, OP_SET_LR, 0x3E800000), task(ctx, OP_TASK, 0), hex(task(ctx, 0x99, 0))
    (0, 64, '0xffffffff')
    """
    for what, value in (("op", op), ("arg", arg)):
        if not is_int(value):
            raise TypeError(f"task {what} must be an integer u32, got {type(value).__name__}")
        if not 0 <= value <= _MASK32:
            raise ValueError(f"task {what} must be a u32 (0..0xFFFFFFFF), got {value}")
    if op == OP_TASK:
        return _run(ctx, int(arg))
    if op == OP_SET_LR:
        ctx.view.set_word("LR", int(floatz.flush_words(np.uint32(arg))) if ctx.z else int(arg))
        return R_NONE
    return R_BAD_OP


def _run(ctx: Context, s: int) -> int:
    if not ctx.grouped:
        return _run_alone(ctx, s)
    v = ctx.view
    hdr = v.words[:HEADER_WORDS].copy()
    base = int(hdr[WORD["STEP_HI"]]) << 32 | s
    steps = int(hdr[WORD["STEPS_PER_TASK"]])
    pending = int(hdr[WORD["PENDING"]])
    # A round left pending by a timed-out task is resumed, never recomputed.
    resume = pending != 0 and int(hdr[WORD["ROUND"]]) == (s + 1) & _MASK32
    if pending and not resume:
        v.set_word("PENDING", 0)
    xs, ys, loss_ring = v.array("X"), v.array("Y"), v.words[_LOSS]
    trace = np.empty((steps if ctx.trace is not None else 0, kernels.NSUMS), dtype=np.uint32)
    if ctx.z:  # PARAMS are read through ftz_from_bits, and written back even after zero steps
        hdr[:4] = floatz.flush_words(hdr[:4])
    ex = ctx.exchange
    if isinstance(ex, PageExchange) and ex.page.words64 is not None:  # the switch: see the module docstring
        done = _run_on_page(ctx, ex, hdr, loss_ring, base, steps, resume, trace)
    else:
        done = _run_grouped(ctx, hdr, xs, ys, loss_ring, base, steps, resume, trace)
    _end_task(ctx, hdr, base, done, done < steps)
    ctx.counters[STEPS] += done
    if ctx.trace is not None and done:
        ctx.trace.record(trace[:done])
    return done


def _end_task(ctx: Context, hdr: np.ndarray, base: int, done: int, timed_out: bool) -> None:
    """A grouped TASK's end on the page after ``done`` steps from ``base``; a timed-out one leaves its round pending."""
    v = ctx.view
    v.words[:4] = hdr[:4]
    kernels.end_task(v.words, np.uint64((base + done) & _MASK64), timed_out)
    if timed_out:
        v.set_word("ROUND", (base + done + 1) & _MASK32)
        v.set_word("PENDING", 1)
        ctx.counters[TIMEOUTS] += 1


def _run_alone(ctx: Context, s: int) -> int:
    """TASK of a system without a group: one njit call for the whole task."""
    v = ctx.view
    steps = v.word("STEPS_PER_TASK")
    # The task runs from STEP_HI:arg and rewrites NEXT_STEP at its end, so starting it from a
    # page whose NEXT_STEP is arg is the same task (and lets run_tasks read its base there).
    v.set_word("NEXT_STEP", s)
    return run_alone(ctx, steps)


def run_alone(ctx: Context, count: int, trace: np.ndarray | None = None) -> int:
    """``count`` steps of a system alone as TASKs, in one njit call; sums into ``trace`` or ``ctx.trace``."""
    if ctx.grouped:
        raise ValueError("run_alone is for a system without a group")
    rows = count if ctx.trace is not None else 0
    buf = np.empty((rows, kernels.NSUMS), dtype=np.uint32) if trace is None else trace[:rows]
    loops.run_tasks(ctx.view.words, count, buf, loops.loop_mode(ctx.z))
    ctx.counters[STEPS] += count
    if ctx.trace is not None and trace is None and count:
        ctx.trace.record(buf)
    return count


def _run_grouped(
    ctx: Context,
    hdr: np.ndarray,
    xs: np.ndarray,
    ys: np.ndarray,
    loss_ring: np.ndarray,
    base: int,
    steps: int,
    resume: bool,
    trace: np.ndarray,
) -> int:
    """The grouped step loop over any exchange; the steps completed (fewer than ``steps`` on a timeout)."""
    assert ctx.group is not None and ctx.exchange is not None
    k, n, ex, z = ctx.group.k, ctx.group.n, ctx.exchange, ctx.z
    slots = np.empty((n, EX_SLOT_WORDS), dtype=np.uint32)
    no_row = np.empty(0, dtype=np.uint32)
    for done in range(steps):
        t = (base + done) & _MASK64
        rnd = (t + 1) & _MASK64
        parity = rnd % 2
        if not (resume and done == 0):
            # Step t's batch: system k takes offset N t + k.
            ex.set_slot(k, parity, kernels.grouped_sums(hdr, xs, ys, np.uint32((t * n + k) & _MASK32), z))
        if not ex.round(rnd):
            return done
        for m in range(n):
            slots[m] = ex.slot(m, parity)
        total = kernels.fold(slots, z)
        row = trace[done] if trace.shape[0] else no_row
        kernels.grouped_apply(hdr, total, loss_ring, np.uint64(t), row, z)
    return steps


NAP_S = (50e-6, 2e-3)  # a slow round's naps between spins of the fast loop (YIELD): first, longest
ROUND_WAIT_ENV = "MESHNB_ROUND_WAIT"
ROUND_WAITS = {
    "futex": grouped.FUTEX | grouped.WAKE_SPIN,
    "yield": grouped.YIELD,
    "futex-spin-yields": grouped.FUTEX | grouped.SPIN_YIELDS,
    "futex-fixed": grouped.FUTEX | grouped.FIXED,
    "futex-no-wake-spin": grouped.FUTEX,
}


def round_wait() -> int:
    """``MESHNB_ROUND_WAIT``'s policy bits (unset or empty: ``futex``); a ValueError names any other value."""
    wait = os.environ.get(ROUND_WAIT_ENV, "") or "futex"
    if wait not in ROUND_WAITS:
        raise ValueError(f"{ROUND_WAIT_ENV}={wait!r}: expected one of {', '.join(map(repr, ROUND_WAITS))}")
    return ROUND_WAITS[wait]


def round_policy(threads: bool, members: int = 1) -> int:
    """A member's handover policy (``grouped.run_page``'s): FUTEX on Linux, else YIELD, or ``MESHNB_ROUND_WAIT``'s.

    ``threads`` adds PRIVATE; WAKE_SPIN is dropped where the ``members`` outnumber the usable CPUs.
    """
    asked = round_wait()
    if grouped.POLICY == grouped.YIELD or asked == grouped.YIELD:
        return grouped.YIELD
    if members > cpu.usable_cpus():
        asked &= ~grouped.WAKE_SPIN
    return asked | (grouped.PRIVATE if threads else 0)


_WORD_LAYOUT = word_layout()


def _run_on_page(
    ctx: Context,
    ex: PageExchange,
    hdr: np.ndarray,
    loss_ring: np.ndarray,
    base: int,
    steps: int,
    resume: bool,
    trace: np.ndarray,
) -> int:
    """``_run_grouped`` for an exchange page in memory: the steps in :func:`grouped.run_page`, GIL released."""
    assert ctx.group is not None and ex.page.words32 is not None and ex.page.words64 is not None
    ex32, ex64, k, n = ex.page.words32, ex.page.words64, ctx.group.k, ctx.group.n
    tab = kernels.batches(ctx.view.words, ctx.z)
    state = np.array([0, int(resume)], dtype=np.uint64)  # [steps done, next round published]
    layout, mode = _WORD_LAYOUT, loops.loop_mode(ctx.z)
    policy = round_policy(isinstance(ex.waiter, BlockingWaiter), n)

    def call(spin: int) -> int:
        return grouped.run_page(
            hdr, tab, loss_ring, ex64, ex32, layout, k, n, base, steps, state, trace, mode, spin, policy
        )

    _calls_on_page(ex, k, policy, call, lambda: base + int(state[0]))
    return int(state[0])


def run_tasks_on_page(ctx: Context, count: int, rows: np.ndarray) -> int:
    """``count`` steps of a member on an exchange page in memory, as the :func:`task` calls would; the steps done.

    A timed-out round ends its task there; ``rows`` (``[>= count, 5]`` uint32) takes the trace.
    """
    ex, v = ctx.exchange, ctx.view
    if not isinstance(ex, PageExchange) or ex.page.words64 is None or ex.page.words32 is None or ctx.group is None:
        raise ValueError("run_tasks_on_page is for a member whose exchange page is in memory")
    if v.word("PENDING"):
        raise ValueError("run_tasks_on_page: the page has a round pending (a TASK resumes it)")
    k, n = ctx.group.k, ctx.group.n
    trace = rows[:count] if ctx.trace is not None else rows[:0]
    tab = kernels.batches(v.words, ctx.z)
    state, hdr = np.zeros(4, dtype=np.uint64), np.empty(HEADER_WORDS, dtype=np.uint32)
    policy, mode = round_policy(isinstance(ex.waiter, BlockingWaiter), n), loops.loop_mode(ctx.z)
    ex32, ex64 = ex.page.words32, ex.page.words64

    def call(spin: int) -> int:
        return grouped.run_page_tasks(
            v.words, tab, ex64, ex32, _WORD_LAYOUT, k, n, count, state, hdr, trace, mode, spin, policy
        )

    if _calls_on_page(ex, k, policy, call, lambda: v.next_step + int(state[1])):
        done = int(state[0])
    else:  # the task that timed out ends there (its first step is still the page's)
        part = int(state[1])
        done = int(state[0]) + part
        _end_task(ctx, hdr, v.next_step, part, True)
    ctx.counters[STEPS] += done
    if ctx.trace is not None and done:
        ctx.trace.record(trace[:done])
    return done


def _calls_on_page(ex: PageExchange, k: int, policy: int, call: Callable[[int], int], step: Callable[[], int]) -> bool:
    """Call the njit loop ``call(spin)`` until DONE (True) or a round's timeout (False, the round pending).

    On WAITING it waits in the exchange's waiter and calls again; ``step()`` is the step awaited.
    """
    waiting, deadline, nap, spin = -1, 0.0, NAP_S[0], grouped.SPIN
    while True:
        called = time.perf_counter()
        status = call(spin)
        if status == grouped.DONE:
            return True
        t = step()
        rnd = (t + 1) & _MASK64
        if status == grouped.ABORTED:
            raise aborted(k, rnd)
        if t != waiting:  # a new slow round: its timeout counts from the call that began its wait
            waiting, deadline, nap = t, called + ex.timeout_s, NAP_S[0]
        if policy != grouped.YIELD:  # the njit wait sleeps itself (a futex): no nap, only the checks
            if not ex.wait_more(rnd, deadline, 0.0):
                return False
            spin = grouped.SPIN
            continue
        if not ex.wait_more(rnd, deadline, nap):
            return False
        nap = min(2 * nap, NAP_S[1])
        # After a nap the loop only looks (reached: on to the next steps, with a full spin).
        spin = grouped.SPIN if ex.page.reached(rnd) else 0
