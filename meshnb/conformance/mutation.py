"""The mutation harness: every single-op mutant (:mod:`~meshnb.conformance.mutants`' op space) run
through the full and the quick pack in-process, and the mutation score of each pack.

A mutant is *killed* by a pack when at least one case fails it as ``meshnb check`` would: an out
page or the trace differs from meshnb's.  Running 264 mutants through 80 000 steps of simulated
executor would take hours, so the harness goes by induction over meshnb's own trajectory: while a
mutant's state equals meshnb's, its next step is the mutant's step from meshnb's state, and every
step of a case is evaluated at once (one vectorised step over all the case's states, from
:class:`Trajectory`).  The first step whose sums differ is a trace that differs (a kill); a loss
that differs in the ring's last writes is a page that differs (a kill); where only the params
part first, the model's run (:func:`~meshnb.conformance.model.run`) of the mutant from meshnb's
state at that step to the case's end decides (:func:`confirm`: params that part may meet again, a
subnormal param flushed where it is read and overwritten later).  A mutant no case kills is
*equivalent* when it changes no bits on any evidence page either (:func:`evidence_pages`: the hard
pages, the pack's probes and pages made for the alternatives: samples, errors and params scaled
into the subnormal range and to the flush boundary); one that changes bits there but that no
case kills is a *survivor*, a hole in the pack.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace
from functools import cache

import numpy as np

from meshnb.testing import pages as hard
from meshnb.testing import reference as ref

from . import faults, model
from .fpu import Ops
from .pack import Case, _scaled, cases, mark_timeouts, run_case, start_pages

Z = Ops()
CHUNK = 4096  # states evaluated at once (memory: CHUNK x 256 words a system)


@dataclass(frozen=True)
class Trajectory:
    """meshnb's run of a case, every step's state: what a mutant's step is evaluated from.

    Parameters
    ----------
    case : Case
        The case, sized.
    pages : list of bytes
        Every system's start page as the executor is given it.
    expected : list of bytes
        meshnb's out pages.
    trace : numpy.ndarray
        meshnb's applied sums ``(steps, 5)``.
    params : numpy.ndarray
        Every system's params before each step and after the last ``(steps + 1, n, 4)``.
    lr : numpy.ndarray
        The LR word each step reads ``(steps, n, 1)``.
    losses : numpy.ndarray
        Every step's loss ``(steps, n)``.
    """

    case: Case
    pages: list[bytes]
    expected: list[bytes]
    trace: np.ndarray
    params: np.ndarray
    lr: np.ndarray
    losses: np.ndarray

    @property
    def base(self) -> int:
        """The run's first step."""
        return self.case.step_base


def trajectory(case: Case, pages: list[bytes] | None = None) -> Trajectory:
    """meshnb's run of ``case`` (numba) and its states, rebuilt from the trace by mode Z's apply
    and checked against meshnb's out pages (params, LR) before use.

    Parameters
    ----------
    case : Case
        A case as a pack runs it.
    pages : list of bytes, optional
        A start page instead of the case's own (every system's).

    Returns
    -------
    Trajectory
        The states.

    Raises
    ------
    AssertionError
        When the rebuilt states do not end in meshnb's params (they always do).

    Examples
    --------
    >>> from meshnb.conformance.mutation import trajectory
    >>> from meshnb.conformance.pack import BY_NAME
    >>> t = trajectory(BY_NAME["cluster-3"].sized(quick=True))
    >>> t.params.shape, t.trace.shape
    ((97, 3, 4), (96, 5))
    """
    pages = [case.in_page() if pages is None else pages[0]] * case.systems  # the pack gives every system the same page
    res = run_case(case, pages)
    n, steps = len(pages), case.steps
    p = np.stack([Z.read(model.words_at(pg, model.OFF_PARAMS, 4)) for pg in pages])
    lr = np.stack([Z.read(model.words_at(pg, model.OFF_LR)) for pg in pages])
    inv = np.stack([Z.read(model.words_at(pg, model.OFF_INV)) for pg in pages])
    changes = dict(case.set_lr)
    params = np.zeros((steps + 1, n, 4), dtype=np.uint32)
    lrs = np.zeros((steps, n, 1), dtype=np.uint32)
    trace = res.trace
    for s in range(steps):
        if s in changes:
            lr[:] = Z.read(changes[s])
        params[s], lrs[s] = p, lr
        applied = np.broadcast_to(trace[s], (n, 5))
        p = model.apply({}, p, applied, lr, inv)
    params[steps] = p
    for k, pg in enumerate(res.out_pages):
        assert np.array_equal(model.words_at(pg, model.OFF_PARAMS, 4), p[k]), case.name
    sums = trace[:, None, :].repeat(n, axis=1).reshape(-1, 5)
    losses = model.loss({}, sums, np.repeat(inv, steps, axis=0)).reshape(steps, n)
    return Trajectory(case, pages, res.out_pages, trace, params, lrs, losses)


def pack_cases(quick: bool) -> list[Case]:
    """The cases of the quick or the full pack, cheapest first (steps times systems), so that a
    mutant is killed after as few steps as may be.

    Parameters
    ----------
    quick : bool
        The quick pack.

    Returns
    -------
    list of Case
        The cases, sized.
    """
    return sorted(cases(quick), key=lambda c: c.steps * c.systems)


@cache
def case_trajectory(case: Case) -> Trajectory:
    """:func:`trajectory` of a pack's case, cached (built when a mutant first gets that far)."""
    return trajectory(case)


@dataclass(frozen=True)
class Kill:
    """Where a case fails a mutant: the case, the step, and what differs first.

    Parameters
    ----------
    case : str
        The case's name.
    step : int
        The steps of the run done before the differing one.
    what : str
        ``trace`` (the step's sums), ``loss`` (a loss the ring keeps), ``samples`` (init's X or
        Y), ``params`` (the step's new params, the sums alike).
    """

    case: str
    step: int
    what: str


def _inv(t: Trajectory) -> np.ndarray:
    """Every system's INV_BATCH, read as the step reads it ``(n, 1)``."""
    return np.stack([Z.read(model.words_at(pg, model.OFF_INV)) for pg in t.pages])


def _chunks(t: Trajectory) -> Iterator[tuple[int, int, np.ndarray, np.ndarray, np.ndarray]]:
    """meshnb's trajectory of ``t``'s case by :data:`CHUNK` steps: ``lo``, ``hi``, every state's
    params ``((hi - lo) * n, 4)`` and the x and y of the lanes its batch reads ``((hi - lo) * n, 32)``
    (a group's members take batches ``t N + k``, single systems batch ``t``)."""
    case, n = t.case, len(t.pages)
    xs = np.stack([model.words_at(pg, model.OFF_X, model.SAMPLES) for pg in t.pages])
    ys = np.stack([model.words_at(pg, model.OFF_Y, model.SAMPLES) for pg in t.pages])
    for lo in range(0, case.steps, CHUNK):
        hi = min(case.steps, lo + CHUNK)
        k = hi - lo
        p = t.params[lo:hi].reshape(-1, 4)
        step = t.base + np.arange(lo, hi, dtype=np.uint64)[:, None]
        if case.grouped:
            offs = (step * np.uint64(n) + np.arange(n, dtype=np.uint64)[None, :]) & np.uint64(0xFFFFFFFF)
        else:
            offs = np.broadcast_to(step & np.uint64(0xFFFFFFFF), (k, n))
        idx = model.lane_samples(offs.reshape(-1))
        sysk = np.tile(np.arange(n), k)[:, None]
        yield lo, hi, p, xs[sysk, idx], ys[sysk, idx]


def first_difference(t: Trajectory, m: faults.Model) -> Kill | None:
    """The first step of ``t``'s case where mutant ``m`` parts from meshnb, by induction over
    meshnb's states (None: the mutant's run of the case is meshnb's, bit for bit).

    Parameters
    ----------
    t : Trajectory
        The case's states.
    m : faults.Model
        A single-op model (:func:`faults.single_op`), or :data:`faults.EXACT`.

    Returns
    -------
    Kill or None
        Where it differs first.

    Examples
    --------
    >>> from meshnb.conformance import faults
    >>> from meshnb.conformance.mutation import first_difference, trajectory
    >>> from meshnb.conformance.pack import BY_NAME
    >>> t = trajectory(BY_NAME["default"].sized(quick=True))
    >>> first_difference(t, faults.EXACT) is None
    True
    >>> first_difference(t, faults.single_op("e*x3", "fused"))
    Kill(case='default', step=0, what='trace')
    """
    case, n = t.case, len(t.pages)
    a = m.assignment
    pages = t.pages
    if m.op and model.BY_ID[m.op].stage == "samples":
        if not case.from_init:
            return None  # the executor loads X and Y; its samples are never made
        init = model.init_page(case.systems, case.grouped, a)
        if init[model.OFF_X : model.OFF_LOSS] != pages[0][model.OFF_X : model.OFF_LOSS]:
            return Kill(case.name, 0, "samples")
        return None
    inv = _inv(t)
    ring_from = case.steps - model.RING  # a loss written from here on is in the out page
    for lo, hi, p, x, y in _chunks(t):
        k = hi - lo
        own = model.sums(a, p, x, y).reshape(k, n, 5)
        if case.grouped:
            folded = model.fold(a, own)
            applied = np.broadcast_to(folded[:, None, :], (k, n, 5))
        else:
            applied = own
        invs = np.tile(inv, (k, 1))
        new = model.apply(a, p, applied.reshape(-1, 5), t.lr[lo:hi].reshape(-1, 1), invs).reshape(k, n, 4)
        lossw = model.loss(a, applied.reshape(-1, 5), invs).reshape(k, n)
        if t.trace.ndim == 3:  # independent systems side by side (the evidence): each its own sums
            bad_sums = (applied != t.trace[lo:hi]).any(axis=(1, 2))
        else:  # the trace is system 0's; every member of a group applies the same sums
            bad_sums = (applied[:, 0, :] != t.trace[lo:hi]).any(axis=1) | (applied != applied[:, :1]).any(axis=(1, 2))
        bad_params = (new != t.params[lo + 1 : hi + 1]).any(axis=(1, 2))
        bad_loss = (lossw != t.losses[lo:hi]).any(axis=1) & (np.arange(lo, hi) >= ring_from)
        hits = np.nonzero(bad_sums | bad_params | bad_loss)[0]
        if len(hits):
            s = int(hits[0])
            what = "trace" if bad_sums[s] else "params" if bad_params[s] else "loss"
            return Kill(case.name, lo + s, what)
    return None


def confirm(t: Trajectory, m: faults.Model, kill: Kill) -> bool:
    """Whether the model's run (:func:`~meshnb.conformance.model.run`) of mutant ``m``, from meshnb's
    state before the kill's step to the case's end (from init where the case starts there), fails
    the case as the check compares: an out page or the trace differs (one run: params kept between
    steps as the executor keeps them, not reloaded from a page).

    Parameters
    ----------
    t : Trajectory
        The case.
    m : faults.Model
        The mutant.
    kill : Kill
        Where :func:`first_difference` found it differs.

    Returns
    -------
    bool
        The run fails the case.

    Examples
    --------
    >>> from meshnb.conformance import faults
    >>> from meshnb.conformance.mutation import confirm, first_difference, trajectory
    >>> from meshnb.conformance.pack import BY_NAME
    >>> t = trajectory(BY_NAME["default"].sized(quick=True))
    >>> m = faults.single_op("e*x3", "fused")
    >>> confirm(t, m, first_difference(t, m))
    True
    """
    case, s = t.case, kill.step
    if s == 0:
        state, from_init = t.pages, case.from_init
    else:
        sub = replace(case, steps=s, quick_steps=s, set_lr=tuple((a, w) for a, w in case.set_lr if a < s))
        state, from_init = run_case(sub, t.pages).out_pages, False
    rest = {a - s: w for a, w in case.set_lr if a >= s}
    # one run to the end: a chained run would reload its params from the page (flushed as read)
    r = model.run(
        list(state), case.steps - s, grouped=case.grouped, set_lr=rest, assign=m.assignment, from_init=from_init
    )
    return mark_timeouts(case, list(r.pages), s) != t.expected or not np.array_equal(r.trace, t.trace[s:])


def kill(m: faults.Model, quick: bool) -> Kill | None:
    """The first case of the quick or full pack (cheapest first) that kills mutant ``m``.

    Parameters
    ----------
    m : faults.Model
        The mutant.
    quick : bool
        The quick pack.

    Returns
    -------
    Kill or None
        None: no case of the pack fails it.
    """
    for case in pack_cases(quick):
        t = case_trajectory(case)
        k = first_difference(t, m)
        if k is not None and (k.what != "params" or confirm(t, m, k)):
            return k
    return None


X_SCALES = (0, -10, -20, -30, -42, -43, -63, -64, -126, -130)  # powers of two: x, x2, x3 across the flush boundary
Y_SCALES = (
    0,
    -20,
    -40,
    -60,
    -66,
    -70,
    -80,
    -100,
    -126,
    -127,
    -130,
    -149,
    60,
    120,
)  # e = pred - y from ordinary to subnormal and huge
PARAMS = {  # a, b, c, d: init's, zero, tiny, huge
    "init": None,
    "zero": [0, 0, 0, 0],
    "tiny": [0x03000000, 0x83000000, 0x02800000, 0x02000000],
    "huge": [0x3F800000, 0x72000000, 0x00000000, 0x7A000000],
}


@cache
def made_pages() -> dict[str, bytes]:
    """Pages made for the alternatives: X and Y scaled by powers of two across the flush
    boundary, with init's, zero, tiny and huge params, so that every op's operands and result
    reach the subnormal range, the flush boundary and overflow on some page.

    Returns
    -------
    dict of str to bytes
        4096-byte pages, by name (``made-xS-yT-P``: X times 2^S, Y times 2^T, params P).

    Examples
    --------
    >>> from meshnb.conformance.mutation import made_pages
    >>> pages = made_pages()
    >>> len(pages), "made-x0-y-130-zero" in pages
    (560, True)
    """
    base = ref.init_page(1)
    out = {}
    for sx in X_SCALES:
        for sy in Y_SCALES:
            for name, words in PARAMS.items():
                pg = hard.with_words(base, hard.X, _scaled(base, hard.X, 2.0**sx))
                pg = hard.with_words(pg, hard.Y, _scaled(base, hard.Y, 2.0**sy))
                if words is not None:
                    pg = hard.with_words(pg, hard.PARAMS, words)
                out[f"made-x{sx}-y{sy}-{name}"] = pg
    return out


EVIDENCE_STEPS = 16


def side_by_side(name: str, pages: list[bytes], steps: int) -> Trajectory:
    """Independent single systems at step 0 run side by side (no group) by the model's run
    (:func:`~meshnb.conformance.model.run`) without a fault, as one :class:`Trajectory` whose trace
    is every system's ``(steps, n, 5)``.

    Parameters
    ----------
    name : str
        The batch's name.
    pages : list of bytes
        The start pages (each loaded as it is: X, Y and the header are the page's).
    steps : int
        The steps.

    Returns
    -------
    Trajectory
        The states.
    """
    case = Case(name, "evidence", steps, steps, page=name)
    r = model.run(pages, steps, grouped=False, independent=True)
    n = len(pages)
    p = np.stack([Z.read(model.words_at(pg, model.OFF_PARAMS, 4)) for pg in pages])
    lr = np.stack([Z.read(model.words_at(pg, model.OFF_LR)) for pg in pages])
    inv = np.stack([Z.read(model.words_at(pg, model.OFF_INV)) for pg in pages])
    params = np.zeros((steps + 1, n, 4), dtype=np.uint32)
    for s in range(steps):
        params[s] = p
        p = model.apply({}, p, r.trace[s], lr, inv)
    params[steps] = p
    losses = np.stack([model.loss({}, r.trace[s], inv) for s in range(steps)])
    lrs = np.broadcast_to(lr, (steps, n, 1)).copy()
    return Trajectory(case, list(pages), r.pages, r.trace, params, lrs, losses)


@cache
def evidence() -> tuple[Trajectory, ...]:
    """The evidence cases, :data:`EVIDENCE_STEPS` steps each: every start page of the pack (the
    hard pages, the probes) and the made pages side by side, init with LRs whose updates reach the
    flush boundary (2^-120, 2^-100, 2^-126 + 1 ulp), and init as a cluster of 3 (for the fold).

    Returns
    -------
    tuple of Trajectory
        The cases' runs.
    """
    named = {**start_pages(), **made_pages()}
    out = [side_by_side("evidence-pages", list(named.values()), EVIDENCE_STEPS)]
    for w in (0x03800000, 0x0D800000, 0x00800001):
        out.append(trajectory(Case(f"evidence-lr-{w:08x}", "evidence", EVIDENCE_STEPS, set_lr=((0, w),))))
    out.append(trajectory(Case("evidence-cluster-3", "evidence", EVIDENCE_STEPS, systems=3, grouped=True)))
    return tuple(out)


def witness(m: faults.Model) -> Kill | None:
    """An evidence case on which mutant ``m`` changes any bits (None: on none of them).

    Parameters
    ----------
    m : faults.Model
        The mutant.

    Returns
    -------
    Kill or None
        The first evidence case that tells it from meshnb.
    """
    for t in evidence():
        k = first_difference(t, m)
        if k is not None and (k.what != "params" or t.case.name.startswith("evidence-pages") or confirm(t, m, k)):
            return k
    return None


@dataclass(frozen=True)
class Verdict:
    """One mutant's standing against both packs.

    Parameters
    ----------
    name : str
        ``op:alt``.
    text : str
        The change in words.
    quick, full : Kill or None
        The first case of each pack that kills it.
    witness : Kill or None
        For a mutant neither pack kills: an evidence case where it changes bits (None: equivalent).
    """

    name: str
    text: str
    quick: Kill | None
    full: Kill | None
    witness: Kill | None

    @property
    def equivalent(self) -> bool:
        """No pack kills it and it changes no bits on any evidence case (nor on the quick pack)."""
        return self.quick is None and self.full is None and self.witness is None


def verdicts() -> list[Verdict]:
    """Every mutant of :func:`~meshnb.conformance.model.mutations` against the quick and the full pack (minutes).

    A mutant the quick pack does not kill is tried on the evidence cases; one that changes no
    bits there either is taken as equivalent without running it through the full pack's longer
    cases (they start from the pages the quick pack's cases start from).

    Returns
    -------
    list of Verdict
        In the op table's order.
    """
    out = []
    for mut in model.mutations():
        m = faults.single_op(mut.op, mut.alt)
        quick = kill(m, quick=True)
        wit = witness(m) if quick is None else None
        full = kill(m, quick=False) if quick is not None or wit is not None else None
        out.append(Verdict(mut.name, mut.text(), quick, full, wit))
    return out


_GRADUAL = model.arith("no-flush")


def flushed_ops(t: Trajectory) -> set[str]:
    """The ops of the per-lane dataflow and of apply and the loss whose rounded result is a
    nonzero subnormal on some step of ``t``'s run (and which mode Z therefore flushes): each op
    recomputed with gradual underflow from mode Z's operands.

    Parameters
    ----------
    t : Trajectory
        The case's run.

    Returns
    -------
    set of str
        Op ids (:data:`meshnb.conformance.model.SPACE_BY_ID`).

    Examples
    --------
    >>> from meshnb.conformance.mutation import flushed_ops, trajectory
    >>> from meshnb.conformance.pack import BY_NAME
    >>> sorted(flushed_ops(trajectory(BY_NAME["lr-underflow"].sized(quick=True))))
    ['lr*g']
    >>> flushed_ops(trajectory(BY_NAME["default"].sized(quick=True)))
    set()
    """
    n = len(t.pages)
    inv = _inv(t)
    found: set[str] = set()

    def tiny(op: str, w: np.ndarray) -> None:
        w = np.asarray(w, dtype=np.uint32)
        if (((w & 0x7F800000) == 0) & ((w & 0x7FFFFF) != 0)).any():
            found.add(op)

    for lo, hi, p, x, y in _chunks(t):
        k = hi - lo
        v = model.lanes({}, p, x, y)
        v.update({name: p[:, j : j + 1] for j, name in enumerate("abcd")})
        for op in model.SPACE:
            if op.stage == "lanes":
                a, b = (v[arg] for arg in op.args)
                tiny(op.id, getattr(_GRADUAL, op.kind)(a, b))
        s = np.repeat(t.trace[lo:hi], n, axis=0)
        invs, lr = np.tile(inv, (k, 1)), t.lr[lo:hi].reshape(-1, 1)
        tiny("s*inv", _GRADUAL.mul(s[:, :4], invs))
        g = Z.mul(s[:, :4], invs)
        tiny("lr*g", _GRADUAL.mul(lr, g))
        tiny("p - lr*g", _GRADUAL.sub(p, Z.mul(lr, g)))
        tiny("loss", _GRADUAL.mul(s[:, 4:5], invs))
    return found
