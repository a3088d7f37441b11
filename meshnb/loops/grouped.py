"""The grouped step loop of a member whose exchange page is in memory, with the GIL released.

The ``threads`` and ``processes`` backends' members share the exchange page as memory (one
process's, or a shared segment).  :func:`run_page` runs many grouped steps of one member in one
njit call (``nogil``), each exactly as the program's Python loop does it over
:class:`~meshnb.exchange.Exchange` (SPEC 9):

1. own sums (the vector step of :mod:`meshnb.loops`, the bits of ``kernels.grouped_sums``),
   published as the slot of parity ``(t + 1) mod 2`` (``ftz_bits``, words 5..7 zero) unless the
   round is already published (a resumed round is never recomputed nor republished);
2. the counter = ``t + 1`` (a release store: after the slot's words);
3. a wait until every counter is >= ``t + 1`` (acquire loads): ``pause`` a while, then
   ``sched_yield``, so that members on busy cores, or more members than cores, do not starve
   the one they wait for; the page's ABORT word ends it at once;
4. the fold of the slots in system order (``kernels.fold``) and its apply (``kernels.grouped_apply``:
   PARAMS in the header words, the loss ring, the trace row).

It returns to Python after the task's steps (``DONE``), on an abort (``ABORTED``), or when one
wait has spun ``spin`` times (``WAITING``): Python keeps the round's timeout, the give-up bound and
Ctrl-C, and calls again to go on waiting for the same round (``state`` says where it stands).
"""

from __future__ import annotations

import numpy as np

from .. import kernels, vec
from ..atomics import cpu_relax, load_acquire, monotonic_ns, store_release, yield_cpu
from ..jit import jit, per_mode
from ..kernels import NSUMS, SAMPLES, TAB, U64_7, WARP, in_word, out_word
from ..view import HEADER_WORDS
from .single import IEEE, MODES, Z_DAZ, check_count, check_mode, own_sums

DONE, WAITING, ABORTED = 0, 1, 2  # what run_page returns
PAUSES = 8  # spins with the pause hint before each one yields the core instead (more: slower on busy cores)
SPIN = 4096  # spins of one wait before it returns to Python (~1-2 ms of yields on an idle core)
# ... or this long, whichever comes first: on a busy machine one yield may give the core away for a
# time slice, and Python, which keeps the round's timeout, must see a slow round within a bounded
# time, not after 4096 time slices (seconds: a stall absorbed, no timeout counted).
SPIN_NS = 1_000_000

# word_layout's entries (meshnb.exchange.word_layout)
_ABORT, _COUNTER0, _COUNTER_STRIDE, _SLOT0, _SLOT_STRIDE, _PARITY_STRIDE = range(6)


@jit()
def _wait(ex64, ex32, lay, n, rnd, spin):
    """Spin until every counter is >= ``rnd``: DONE, or ABORTED, or WAITING after ``spin`` spins
    or :data:`SPIN_NS` of yields, whichever comes first."""
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
def _page_steps(hdr, tab, loss_ring, ex64, ex32, lay, k, n, base, steps, state, trace, spin, mode):
    """Steps ``state[0]`` .. ``steps - 1`` of a task from step ``base`` of member ``k`` of ``n``;
    ``state[1]`` != 0: the round of step ``state[0]`` is already published.  Updates ``state``."""
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
    state[0] = done
    state[1] = 1 if published else 0
    return status


# The door (meshnb.jit): the arrays' types, checked when a variant is compiled; sizes in the entry.
_PAGE_ACCEPTS = {
    "hdr": "uint32[::1] writeable", "tab": "float32[::1]", "loss_ring": "uint32[::1] writeable",
    "ex64": "uint64[::1] writeable", "ex32": "uint32[::1] writeable", "lay": "int64[::1]", "k": "int64",
    "n": "int64", "base": "uint64", "steps": "int64", "state": "uint64[::1] writeable",
    "trace": "uint32[:, ::1] writeable", "spin": "int64",
}  # fmt: skip
_LAYOUT_ENTRIES = 6
_SLOT_WORDS = 8  # a slot's words: the five sums, three zeros (exchange.EX_SLOT_WORDS)


def _make_page(mode: int):
    """The grouped loop of one mode: a closure with ``mode`` a constant (meshnb.jit's pattern)."""

    @jit(accepts=_PAGE_ACCEPTS, name="meshnb.loops.grouped.run_page", nogil=True)
    def page(hdr, tab, loss_ring, ex64, ex32, lay, k, n, base, steps, state, trace, spin):
        # The door's sizes and indices (nothing in the loop checks them).
        if hdr.shape[0] != HEADER_WORDS or tab.shape[0] != 4 * TAB or loss_ring.shape[0] != SAMPLES:
            raise ValueError("run_page: hdr, tab and loss_ring must be uint32[12], float32[1024] and uint32[256]")
        if n < 1 or k < 0 or k >= n or steps < 0 or spin < 0:
            raise ValueError("run_page: needs 0 <= k < n, steps >= 0 and spin >= 0")
        if lay.shape[0] != _LAYOUT_ENTRIES or lay.min() < 0:
            raise ValueError("run_page: layout must be the 6 entries of exchange.word_layout()")
        last_slot = lay[_SLOT0] + (n - 1) * lay[_SLOT_STRIDE] + lay[_PARITY_STRIDE] + _SLOT_WORDS - 1
        if (
            lay[_COUNTER0] + (n - 1) * lay[_COUNTER_STRIDE] >= ex64.shape[0]
            or max(lay[_ABORT], last_slot) >= ex32.shape[0]
        ):
            raise ValueError("run_page: the exchange page is too small for n systems in this layout")
        if state.shape[0] != 2 or state[0] > np.uint64(steps):
            raise ValueError("run_page: state must be [steps done <= steps, published]")
        if trace.shape[1] != NSUMS or (trace.shape[0] != 0 and trace.shape[0] < steps):
            raise ValueError("run_page: trace must be [steps, 5] (a row per step) or have no rows")
        return _page_steps(hdr, tab, loss_ring, ex64, ex32, lay, k, n, base, steps, state, trace, spin, mode)

    return page


_PAGE = per_mode(_make_page, MODES)


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
) -> int:
    """Run grouped steps of member ``k`` of ``n`` on an exchange page in memory; returns DONE,
    WAITING or ABORTED.

    ``hdr`` is the task's header words (uint32[12]: PARAMS read and written, LR, INV_BATCH),
    ``tab`` the batch tables (``kernels.batches``), ``loss_ring`` the page's LOSS words,
    ``ex64``/``ex32`` the exchange page as uint64 and uint32 words and ``layout`` its
    ``exchange.word_layout()``; the task runs ``steps`` steps from step ``base``; ``state``
    (uint64[2]) is [steps done, 1 if the round of the next step is already published], read and
    updated; ``trace`` is ``[steps, 5]`` uint32 (row ``i``: step ``base + i``'s fold) or has no
    rows; ``mode`` is a ``meshnb.loops`` loop mode; ``spin`` bounds the first wait before WAITING
    (0: look once), ``SPIN`` the later ones.  Every argument is checked first
    (``TypeError``/``ValueError``): the loop itself trusts them.

    Examples
    --------
    >>> import numpy as np
    >>> from meshnb import kernels
    >>> from meshnb.exchange import ExchangePage, word_layout
    >>> from meshnb.loops import grouped, loop_mode
    >>> from meshnb.testing import reference
    >>> from meshnb.view import WORD
    >>> start = reference.init_page(1, grouped=True)  # a group of one member
    >>> words = np.frombuffer(start, np.uint32).copy()
    >>> hdr, ring = words[:12].copy(), words[WORD["LOSS"] : WORD["LOSS"] + 256].copy()
    >>> ex, state, trace = ExchangePage.new(1), np.zeros(2, np.uint64), np.zeros((4, kernels.NSUMS), np.uint32)
    >>> args = (kernels.batches(words, True), ring, ex.words64, ex.words32, word_layout())
    >>> grouped.run_page(hdr, *args, 0, 1, 0, 4, state, trace, loop_mode(True)) == grouped.DONE
    True
    >>> pages, want = reference.run([start], 4, grouped=True)
    >>> hdr[:4].tolist() == np.frombuffer(pages[0], np.uint32)[:4].tolist(), bool((trace == want).all()), state.tolist()
    (True, True, [4, 0])
    """
    for name, value in (("k", k), ("n", n), ("steps", steps), ("spin", spin)):
        check_count(name, value, 1 << 63)
    check_count("base", base)
    check_mode(mode)
    return int(
        _PAGE[mode](
            hdr, tab, loss_ring, ex64, ex32, layout, np.int64(k), np.int64(n), np.uint64(base), np.int64(steps),
            state, trace, np.int64(spin),
        )
    )  # fmt: skip
