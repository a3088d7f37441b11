"""The grouped step loop of a member whose exchange page is in memory, with the GIL released.

:func:`run_page` runs many grouped steps of one member (the ``threads`` and ``processes``
backends) in one njit call, each as the program's Python loop does (SPEC 9; docs/guide/clusters.md).
It returns after the steps (``DONE``), on an abort (``ABORTED``), or when a wait has spun ``spin``
times or ``SPIN_NS`` (``WAITING``): Python keeps the timeouts and Ctrl-C and calls again for the
same round. The wait follows ``policy``: ``YIELD``, or ``FUTEX``, a learnt spin and then a sleep on
the awaited counter, announced in its WAITERS word (docs/performance.md, "Lockstep rounds on a
shared machine"); ABORT ends any wait (a sleep lasts at most ``SLEEP_NS``).
"""

from __future__ import annotations

import numpy as np

from .. import kernels, vec
from ..atomics import (
    HAS_FUTEX,
    cpu_relax,
    fence,
    fetch_add,
    futex_wait,
    futex_wake,
    load_acquire,
    monotonic_ns,
    store_release,
    yield_cpu,
)
from ..floatz import flush_bits
from ..jit import jit, per_mode
from ..kernels import (
    NSUMS,
    SAMPLES,
    TAB,
    U64_7,
    W_LOSS,
    W_NEXT_STEP,
    W_STEP_HI,
    W_STEPS_PER_TASK,
    WARP,
    end_task,
    in_word,
    out_word,
)
from ..view import HEADER_WORDS, PAGE_WORDS
from .single import IEEE, MODES, Z_DAZ, check_count, check_mode, own_sums

DONE, WAITING, ABORTED = 0, 1, 2  # what run_page returns
PAUSES = 8  # spins with the pause hint before each one yields the core instead (more: slower on busy cores)
SPIN = 4096  # spins of one wait before it returns to Python (~1-2 ms of yields on an idle core)
# ... or this long, whichever comes first: on a busy machine one yield may give the core away for a
# time slice, and Python, which keeps the round's timeout, must see a slow round in bounded time.
SPIN_NS = 1_000_000

# The handover policies (``run_page``'s ``policy``: bits). YIELD: pause, then sched_yield; FUTEX:
# spin a learnt bound, then sleep on a futex its publisher wakes; PRIVATE: threads of one process;
# SPIN_YIELDS, FIXED: the candidates docs/performance.md measured (yield while spinning; a fixed
# bound); WAKE_SPIN: a member that has just woken a peer spins WOKE_NS (where members have a core each).
YIELD, FUTEX, PRIVATE, SPIN_YIELDS, FIXED, WAKE_SPIN = 0, 1, 2, 4, 8, 16
POLICY_BITS = 31
POLICY = FUTEX if HAS_FUTEX else YIELD  # the default here
SLEEP_NS = 1_000_000  # one futex sleep's bound: an ABORT (or a lost wake-up) is seen within it
SPIN_MIN_NS, SPIN_START_NS, SPIN_MAX_NS = 1_000, 20_000, 50_000  # the learnt spin's range, its start
# ... and the spin of a member that has just woken a sleeping peer (its range, its start): a woken
# peer takes a wake-up to come back (docs/performance.md), and sleeping sooner starts a ping-pong.
WOKE_MIN_NS, WOKE_START_NS, WOKE_MAX_NS = 20_000, 50_000, 200_000
_CLOCK_EVERY = 16  # pauses between looks at the clock (one look costs about as much as a pause)

# word_layout's entries (meshnb.exchange.word_layout)
_ABORT, _COUNTER0, _COUNTER_STRIDE, _SLOT0, _SLOT_STRIDE, _PARITY_STRIDE = range(6)
_SLOT_WORDS = 8  # a slot's words: the five sums, three zeros (exchange.EX_SLOT_WORDS)


@jit()
def _waiters(lay, m):
    """The u32 index of system ``m``'s WAITERS word: the word after its SLOT1."""
    return lay[_SLOT0] + m * lay[_SLOT_STRIDE] + lay[_PARITY_STRIDE] + _SLOT_WORDS


@jit()
def _learnt(lay, m):
    """The u32 index of system ``m``'s SPIN_NS word (its learnt spin, kept across calls), after WAITERS."""
    return _waiters(lay, m) + 1


@jit()
def _woke(lay, m):
    """The u32 index of system ``m``'s WOKE_NS word (its learnt spin after a wake), after SPIN_NS."""
    return _learnt(lay, m) + 1


@jit()
def _futex_word(lay, m):
    """The u32 index of the low half of system ``m``'s counter: what a sleeper waits on."""
    return 2 * (lay[_COUNTER0] + m * lay[_COUNTER_STRIDE])


@jit()
def _sleep_on(ex64, ex32, lay, m, rnd, ns, private):
    """Sleep up to ``ns`` while system ``m``'s counter is below ``rnd``, announced in its WAITERS word first.

    The announcement, then the counter read again: a publisher either sees it and wakes, or published
    before the read and the sleep does not begin.
    """
    w = _waiters(lay, m)
    fetch_add(ex32, w, np.uint32(1))
    c = load_acquire(ex64, lay[_COUNTER0] + m * lay[_COUNTER_STRIDE])
    if c < rnd and load_acquire(ex32, lay[_ABORT]) == 0:
        futex_wait(ex32, _futex_word(lay, m), np.uint32(c & np.uint64(0xFFFFFFFF)), ns, private)
    fetch_add(ex32, w, np.uint32(0xFFFFFFFF))  # - 1


@jit()
def _wait_futex(ex64, ex32, lay, n, rnd, spin, policy, budget, t0):
    """:func:`_wait` by FUTEX: pause (or yield) for ``budget`` ns from ``t0``, then sleep, up to :data:`SPIN_NS`."""
    private = (policy & PRIVATE) != 0
    m = 0
    spins = 0
    while m < n:
        if load_acquire(ex64, lay[_COUNTER0] + m * lay[_COUNTER_STRIDE]) >= rnd:
            m += 1
            continue
        if load_acquire(ex32, lay[_ABORT]) != 0:
            return ABORTED
        if spin == 0:
            return WAITING
        spins += 1
        if spins % _CLOCK_EVERY != 0:
            if policy & SPIN_YIELDS:
                yield_cpu()
            else:
                cpu_relax()
            continue
        now = monotonic_ns() - t0
        if now > SPIN_NS:
            return WAITING
        if now >= budget:
            _sleep_on(ex64, ex32, lay, m, rnd, min(SLEEP_NS, SPIN_NS - now + 1), private)
    return DONE


@jit()
def _wait(ex64, ex32, lay, n, rnd, spin):
    """Spin until every counter is >= ``rnd``: DONE, ABORTED, or WAITING after ``spin`` spins or :data:`SPIN_NS`."""
    m = 0
    spins = 0
    t0 = 0
    while m < n:
        if load_acquire(ex64, lay[_COUNTER0] + m * lay[_COUNTER_STRIDE]) >= rnd:
            m += 1
            continue
        if load_acquire(ex32, lay[_ABORT]) != 0:
            return ABORTED
        spins += 1
        if spins > spin:
            return WAITING
        if spins <= PAUSES:
            cpu_relax()
        else:
            if spins == PAUSES + 1:
                t0 = monotonic_ns()
            elif monotonic_ns() - t0 > SPIN_NS:
                return WAITING
            yield_cpu()
    return DONE


@jit()
def _learn(budget, waited):
    """The next spin bound (ns) from this round's wait: a margin over a caught wait, longer for a near miss.

    The shortest where the peer came only after a wake-up's worth (it was not running).
    """
    if waited <= budget:
        target = 4 * waited
    elif waited < SPIN_MAX_NS:
        target = 2 * waited
    else:
        target = SPIN_MIN_NS
    return min(max((3 * budget + target) >> 2, SPIN_MIN_NS), SPIN_MAX_NS)


@jit()
def _learn_woke(budget, waited):
    """The next spin after a wake (ns): up to twice a caught wait, else half, never below ``WOKE_MIN_NS``."""
    if waited <= budget:
        return min(max(budget, 2 * waited), WOKE_MAX_NS)
    return max(budget >> 1, WOKE_MIN_NS)


@jit()
def _page_steps(hdr, tab, loss_ring, ex64, ex32, lay, k, n, base, steps, state, trace, spin, policy, mode):
    """Steps ``state[0]`` .. ``steps - 1`` of a task from ``base``, member ``k`` of ``n`` (``state[1]``: published)."""
    futex = (policy & FUTEX) != 0
    private = (policy & PRIVATE) != 0
    learnt, learnt_woke = _learnt(lay, k), _woke(lay, k)
    budget = np.int64(ex32[learnt]) if ex32[learnt] != 0 else np.int64(SPIN_START_NS)
    woke_budget = np.int64(ex32[learnt_woke]) if ex32[learnt_woke] != 0 else np.int64(WOKE_START_NS)
    z = mode != IEEE
    done = np.int64(state[0])
    published = state[1] != 0
    slots = np.empty((n, 8), dtype=np.uint32)
    no_row = np.empty(0, dtype=np.uint32)
    p = np.empty(4, dtype=np.float32)
    status = DONE
    old = vec.daz_on() if mode == Z_DAZ else np.uint32(0)
    while done < steps:
        t = np.uint64(base) + np.uint64(done)
        rnd = t + np.uint64(1)
        parity = np.int64(rnd & np.uint64(1))
        mine = lay[_SLOT0] + k * lay[_SLOT_STRIDE] + parity * lay[_PARITY_STRIDE]
        if not published:  # step t's batch: system k takes offset N t + k
            for j in range(4):
                p[j] = in_word(hdr[j], z)
            u, e2 = own_sums(vec.load4(p, 0), tab, np.int64((t * np.uint64(n) + np.uint64(k)) & U64_7) * WARP, mode)
            vec.store(ex32, mine, vec.out(u, mode))
            ex32[mine + 4] = out_word(e2, z)
            ex32[mine + 5] = 0
            ex32[mine + 6] = 0
            ex32[mine + 7] = 0
            published = True
        store_release(ex64, lay[_COUNTER0] + k * lay[_COUNTER_STRIDE], rnd)
        if futex:
            fence()  # the counter before the look at WAITERS (a sleeper announces, then reads it)
            sleeper = load_acquire(ex32, _waiters(lay, k)) != 0
            if sleeper:
                futex_wake(ex32, _futex_word(lay, k), private)
            woke = sleeper and (policy & WAKE_SPIN) != 0
            t0 = monotonic_ns()
            spin_ns = max(budget, woke_budget) if woke else budget
            status = _wait_futex(ex64, ex32, lay, n, rnd, spin, policy, spin_ns, t0)
            if status == DONE and not policy & FIXED:
                waited = monotonic_ns() - t0
                if woke:  # a wake-up's wait says nothing of a running peer's pace
                    woke_budget = _learn_woke(spin_ns, waited)
                else:
                    budget = _learn(budget, waited)
        else:
            status = _wait(ex64, ex32, lay, n, rnd, spin)
        if status != DONE:
            break
        spin = SPIN  # ``spin`` bounds the first wait only
        for m in range(n):
            at = lay[_SLOT0] + m * lay[_SLOT_STRIDE] + parity * lay[_PARITY_STRIDE]
            for j in range(8):
                slots[m, j] = ex32[at + j]
        total = kernels.fold(slots, z)
        row = trace[done] if trace.shape[0] else no_row
        kernels.grouped_apply(hdr, total, loss_ring, t, row, z)
        done += 1
        published = False
    if mode == Z_DAZ:
        vec.mxcsr_restore(old)
    if futex:
        ex32[learnt] = np.uint32(budget)  # this member's alone: the next call starts from them
        ex32[learnt_woke] = np.uint32(woke_budget)
    state[0] = done
    state[1] = 1 if published else 0
    return status


@jit()
def _page_tasks(words, tab, ex64, ex32, lay, k, n, count, state, hdr, trace, spin, policy, mode):
    """``count`` steps of member ``k`` as consecutive TASKs from the page's next step, each with a TASK's effects.

    ``state`` is [steps of ended tasks, steps done in the current task, its round published, its
    steps (0: none begun)], and ``hdr`` the current task's header: both kept across calls.
    """
    z = mode != IEEE
    loss_ring = words[W_LOSS : W_LOSS + SAMPLES]
    spt = np.uint64(words[W_STEPS_PER_TASK])
    sub = np.empty(2, dtype=np.uint64)
    total = np.uint64(count)
    while state[0] < total:
        if state[3] == 0:  # a task begins: the page is at its first step, with no round pending
            if load_acquire(ex32, lay[_ABORT]) != 0:  # seen at every task even when no wait spins
                return ABORTED
            state[3] = min(spt, total - state[0])
            state[1] = 0
            state[2] = 0
            for j in range(HEADER_WORDS):
                hdr[j] = words[j]
            if z:
                for j in range(4):
                    hdr[j] = flush_bits(hdr[j])
        base = np.uint64(words[W_STEP_HI]) << np.uint64(32) | np.uint64(words[W_NEXT_STEP])
        rows = trace[np.int64(state[0]) :] if trace.shape[0] else trace
        sub[0] = state[1]
        sub[1] = state[2]
        status = _page_steps(
            hdr, tab, loss_ring, ex64, ex32, lay, k, n, base, np.int64(state[3]), sub, rows, spin, policy, mode
        )
        state[1] = sub[0]
        state[2] = sub[1]
        if status != DONE:
            return status
        spin = SPIN  # ``spin`` bounds the first wait only
        for j in range(4):
            words[j] = hdr[j]
        end_task(words, base + state[3])
        state[0] += state[3]
        state[1] = 0
        state[3] = 0
    return DONE


# The door (meshnb.jit): the arrays' types, checked when a variant is compiled; sizes in the entry.
_PAGE_ACCEPTS = {
    "hdr": "uint32[::1] writeable", "tab": "float32[::1]", "loss_ring": "uint32[::1] writeable",
    "ex64": "uint64[::1] writeable", "ex32": "uint32[::1] writeable", "lay": "int64[::1]", "k": "int64",
    "n": "int64", "base": "uint64", "steps": "int64", "state": "uint64[::1] writeable",
    "trace": "uint32[:, ::1] writeable", "spin": "int64", "policy": "int64",
}  # fmt: skip
_LAYOUT_ENTRIES = 6


def _make_page(mode: int):
    """The grouped loop of one mode: a closure with ``mode`` a constant (meshnb.jit's pattern)."""

    @jit(accepts=_PAGE_ACCEPTS, name="meshnb.loops.grouped.run_page", nogil=True)
    def page(hdr, tab, loss_ring, ex64, ex32, lay, k, n, base, steps, state, trace, spin, policy):
        # The door's sizes and indices (nothing in the loop checks them).
        if hdr.shape[0] != HEADER_WORDS or tab.shape[0] != 4 * TAB or loss_ring.shape[0] != SAMPLES:
            raise ValueError("run_page: hdr, tab and loss_ring must be uint32[12], float32[1024] and uint32[256]")
        if n < 1 or k < 0 or k >= n or steps < 0 or spin < 0:
            raise ValueError("run_page: needs 0 <= k < n, steps >= 0 and spin >= 0")
        if policy < 0 or policy > POLICY_BITS or (policy != YIELD and not policy & FUTEX):
            raise ValueError("run_page: policy must be YIELD or FUTEX with PRIVATE, SPIN_YIELDS, FIXED, WAKE_SPIN bits")
        if lay.shape[0] != _LAYOUT_ENTRIES or lay.min() < 0:
            raise ValueError("run_page: layout must be the 6 entries of exchange.word_layout()")
        last_slot = _woke(lay, n - 1)  # the last system's WOKE_NS word, after its SLOT1, WAITERS, SPIN_NS
        if (
            lay[_COUNTER0] + (n - 1) * lay[_COUNTER_STRIDE] >= ex64.shape[0]
            or max(lay[_ABORT], last_slot) >= ex32.shape[0]
        ):
            raise ValueError("run_page: the exchange page is too small for n systems in this layout")
        if state.shape[0] != 2 or state[0] > np.uint64(steps):
            raise ValueError("run_page: state must be [steps done <= steps, published]")
        if trace.shape[1] != NSUMS or (trace.shape[0] != 0 and trace.shape[0] < steps):
            raise ValueError("run_page: trace must be [steps, 5] (a row per step) or have no rows")
        return _page_steps(hdr, tab, loss_ring, ex64, ex32, lay, k, n, base, steps, state, trace, spin, policy, mode)

    return page


_PAGE = per_mode(_make_page, MODES)

_TASKS_ACCEPTS = {
    "words": "uint32[::1] writeable", "tab": "float32[::1]", "ex64": "uint64[::1] writeable",
    "ex32": "uint32[::1] writeable", "lay": "int64[::1]", "k": "int64", "n": "int64", "count": "int64",
    "state": "uint64[::1] writeable", "hdr": "uint32[::1] writeable", "trace": "uint32[:, ::1] writeable",
    "spin": "int64", "policy": "int64",
}  # fmt: skip


def _make_tasks(mode: int):
    """The grouped TASK loop of one mode (a closure, as ``_make_page``)."""

    @jit(accepts=_TASKS_ACCEPTS, name="meshnb.loops.grouped.run_page_tasks", nogil=True)
    def tasks(words, tab, ex64, ex32, lay, k, n, count, state, hdr, trace, spin, policy):
        # The door's sizes and indices, as run_page's (nothing in the loop checks them).
        if words.shape[0] != PAGE_WORDS or tab.shape[0] != 4 * TAB or hdr.shape[0] != HEADER_WORDS:
            raise ValueError("run_page_tasks: words, tab and hdr must be uint32[1024], float32[1024] and uint32[12]")
        if n < 1 or k < 0 or k >= n or count < 0 or spin < 0:
            raise ValueError("run_page_tasks: needs 0 <= k < n, count >= 0 and spin >= 0")
        if count != 0 and words[W_STEPS_PER_TASK] == 0:
            raise ValueError("run_page_tasks: the page's STEPS_PER_TASK is 0: its tasks would never progress")
        if policy < 0 or policy > POLICY_BITS or (policy != YIELD and not policy & FUTEX):
            raise ValueError("run_page_tasks: policy must be YIELD or FUTEX with policy bits")
        if lay.shape[0] != _LAYOUT_ENTRIES or lay.min() < 0:
            raise ValueError("run_page_tasks: layout must be the 6 entries of exchange.word_layout()")
        if (
            lay[_COUNTER0] + (n - 1) * lay[_COUNTER_STRIDE] >= ex64.shape[0]
            or max(lay[_ABORT], _woke(lay, n - 1)) >= ex32.shape[0]
        ):
            raise ValueError("run_page_tasks: the exchange page is too small for n systems in this layout")
        if state.shape[0] != 4 or state[0] > np.uint64(count) or state[0] + state[3] > np.uint64(count):
            raise ValueError("run_page_tasks: state must be [steps ended, steps in task, published, task steps]")
        if state[1] > state[3] or (state[3] != 0 and state[3] > words[W_STEPS_PER_TASK]):
            raise ValueError("run_page_tasks: state's current task is not one of this page's tasks")
        if trace.shape[1] != NSUMS or (trace.shape[0] != 0 and trace.shape[0] < count):
            raise ValueError("run_page_tasks: trace must be [count, 5] (a row per step) or have no rows")
        return _page_tasks(words, tab, ex64, ex32, lay, k, n, count, state, hdr, trace, spin, policy, mode)

    return tasks


_TASKS = per_mode(_make_tasks, MODES)


def run_page(
    hdr: np.ndarray,
    tab: np.ndarray,
    loss_ring: np.ndarray,
    ex64: np.ndarray,
    ex32: np.ndarray,
    layout: np.ndarray,
    k: int,
    n: int,
    base: int,
    steps: int,
    state: np.ndarray,
    trace: np.ndarray,
    mode: int,
    spin: int = SPIN,
    policy: int = YIELD,
) -> int:
    """Run grouped steps of member ``k`` of ``n`` on an exchange page in memory; returns DONE, WAITING or ABORTED.

    ``hdr`` is the task's header words (uint32[12]), ``tab`` the batch tables, ``loss_ring`` the
    page's LOSS words, ``ex64``/``ex32`` the exchange page as words and ``layout`` its
    ``exchange.word_layout()``; ``steps`` steps from step ``base``; ``state`` (uint64[2]: [steps done,
    next round published]) is read and updated; ``trace`` is ``[steps, 5]`` uint32 or has no rows.
    ``spin`` bounds the first wait (0: look once), ``policy`` how a member waits (``POLICY`` is this
    machine's default). Every argument is checked first (TypeError/ValueError).
    """
    for name, value in (("k", k), ("n", n), ("steps", steps), ("spin", spin), ("policy", policy)):
        check_count(name, value, 1 << 63)
    check_count("base", base)
    check_mode(mode)
    return int(
        _PAGE[mode](
            hdr, tab, loss_ring, ex64, ex32, layout, np.int64(k), np.int64(n), np.uint64(base), np.int64(steps),
            state, trace, np.int64(spin), np.int64(policy),
        )
    )  # fmt: skip


def run_page_tasks(
    words: np.ndarray,
    tab: np.ndarray,
    ex64: np.ndarray,
    ex32: np.ndarray,
    layout: np.ndarray,
    k: int,
    n: int,
    count: int,
    state: np.ndarray,
    hdr: np.ndarray,
    trace: np.ndarray,
    mode: int,
    spin: int = SPIN,
    policy: int = YIELD,
) -> int:
    """Run ``count`` grouped steps of member ``k`` of ``n`` as TASKs (``arg = NEXT_STEP``); DONE, WAITING or ABORTED.

    ``state`` (uint64[4], zeros to begin) and ``hdr`` (uint32[12]) carry over a WAITING; the rest as :func:`run_page`.
    """
    for name, value in (("k", k), ("n", n), ("count", count), ("spin", spin), ("policy", policy)):
        check_count(name, value, 1 << 63)
    check_mode(mode)
    return int(
        _TASKS[mode](
            words, tab, ex64, ex32, layout, np.int64(k), np.int64(n), np.int64(count), state, hdr, trace,
            np.int64(spin), np.int64(policy),
        )
    )  # fmt: skip
