"""The mutation harness: every single-op mutant run through the full and the quick pack in-process.

A mutant is *killed* by a pack when a case fails it as ``meshnb check`` would.  The harness goes by
induction over meshnb's own trajectory: while a mutant's state equals meshnb's, its next step is
evaluated from meshnb's state, every step of a case at once.  Where only the params part first, a
run to the case's end decides (:func:`confirm`).  A mutant no case kills is *equivalent* when it
changes no bits on any evidence page either, else a *survivor* (docs/guide/mutation-score.md).

Examples
--------
>>> from meshnb.conformance import faults
>>> from meshnb.conformance.mutation import first_difference, flushed_ops, trajectory
>>> from meshnb.conformance.pack import BY_NAME
>>> t = trajectory(BY_NAME["default"].sized(quick=True))
>>> first_difference(t, faults.EXACT) is None, flushed_ops(t)
(True, set())
>>> first_difference(t, faults.single_op("e*x3", "fused"))
Kill(case='default', step=0, what='trace')
>>> sorted(flushed_ops(trajectory(BY_NAME["lr-underflow"].sized(quick=True))))
['lr*g']
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace
from functools import cache

import numpy as np

from meshnb.testing import pages as hard
from meshnb.testing import reference as ref

from . import faults, model
from .fpu import Ops, is_subnormal
from .pack import HUGE_PARAMS, TINY_PARAMS, Case, _scaled, cases, mark_timeouts, run_case, start_pages

Z = Ops()
CHUNK = 4096  # states evaluated at once (memory: CHUNK x 256 words a system)


@dataclass(frozen=True)
class Trajectory:
    """meshnb's run of a case and every step's state: what a mutant's step is evaluated from."""

    case: Case  # sized
    pages: list[bytes]  # every system's start page as the executor is given it
    expected: list[bytes]  # meshnb's out pages
    trace: np.ndarray  # meshnb's applied sums (steps, 5)
    params: np.ndarray  # every system's params before each step and after the last (steps + 1, n, 4)
    lr: np.ndarray  # the LR word each step reads (steps, n, 1)
    losses: np.ndarray  # every step's loss (steps, n)

    @property
    def base(self) -> int:
        """The run's first step."""
        return self.case.step_base


def trajectory(case: Case, pages: list[bytes] | None = None) -> Trajectory:
    """meshnb's run of ``case`` (from ``pages[0]`` if given) and its states, rebuilt from the trace."""
    pages = [case.in_page() if pages is None else pages[0]] * case.systems  # the pack gives every system the same page
    res = run_case(case, pages)
    t = _states(case, pages, res.out_pages, res.trace, dict(case.set_lr))
    for k, pg in enumerate(res.out_pages):
        assert np.array_equal(model.words_at(pg, model.OFF_PARAMS, 4), t.params[-1, k]), case.name
    return t


def _states(case: Case, pages: list[bytes], out: list[bytes], trace: np.ndarray, set_lr: dict[int, int]) -> Trajectory:
    """The :class:`Trajectory` of ``pages`` whose applied sums are ``trace``, rebuilt by mode Z's apply."""
    n, steps = len(pages), case.steps
    p, lr, inv = _reads(pages)
    params = np.zeros((steps + 1, n, 4), dtype=np.uint32)
    lrs = np.zeros((steps, n, 1), dtype=np.uint32)
    applied = np.broadcast_to(trace[:, None] if trace.ndim == 2 else trace, (steps, n, 5))
    for s in range(steps):
        if s in set_lr:
            lr[:] = Z.read(set_lr[s])
        params[s], lrs[s] = p, lr
        p = model.apply({}, p, applied[s], lr, inv)
    params[steps] = p
    losses = model.loss({}, applied.reshape(-1, 5), np.tile(inv, (steps, 1))).reshape(steps, n)
    return Trajectory(case, list(pages), out, trace, params, lrs, losses)


def pack_cases(quick: bool) -> list[Case]:
    """The cases of the quick or the full pack, cheapest first (steps times systems)."""
    return sorted(cases(quick), key=lambda c: c.steps * c.systems)


@cache
def case_trajectory(case: Case) -> Trajectory:
    """:func:`trajectory` of a pack's case, cached (built when a mutant first gets that far)."""
    return trajectory(case)


@dataclass(frozen=True)
class Kill:
    """Where a case fails a mutant: the case, the steps before the differing one, and what differs first
    (``trace``, ``loss``, ``samples`` or ``params``)."""

    case: str
    step: int
    what: str


def _reads(pages: list[bytes]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every system's PARAMS ``(n, 4)``, LR and INV_BATCH ``(n, 1)`` as a step reads them."""
    return tuple(  # type: ignore[return-value]
        np.stack([Z.read(model.words_at(pg, off, k)) for pg in pages])
        for off, k in ((model.OFF_PARAMS, 4), (model.OFF_LR, 1), (model.OFF_INV, 1))
    )


def _chunks(t: Trajectory) -> Iterator[tuple[int, int, np.ndarray, np.ndarray, np.ndarray]]:
    """``t``'s states by :data:`CHUNK` steps: ``lo``, ``hi``, the params and the x and y the lanes read."""
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
    """The first step of ``t``'s case where mutant ``m`` parts from meshnb; None: none does."""
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
    inv = _reads(t.pages)[2]
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
    """Whether mutant ``m`` run from meshnb's state before the kill's step fails the case."""
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
    """The first case of the quick or full pack (cheapest first) that kills mutant ``m``; None: none does."""
    for case in pack_cases(quick):
        t = case_trajectory(case)
        k = first_difference(t, m)
        if k is not None and (k.what != "params" or confirm(t, m, k)):
            return k
    return None


X_SCALES = (0, -10, -20, -30, -42, -43, -63, -64, -126, -130)  # powers of two: x, x2, x3 across the flush boundary
# e = pred - y from ordinary to subnormal and huge
Y_SCALES = (0, -20, -40, -60, -66, -70, -80, -100, -126, -127, -130, -149, 60, 120)
PARAMS = {"init": None, "zero": [0, 0, 0, 0], "tiny": TINY_PARAMS, "huge": HUGE_PARAMS}  # a, b, c, d


@cache
def made_pages() -> dict[str, bytes]:
    """Pages ``made-xS-yT-P`` (X times 2^S, Y times 2^T, params P): every op at the flush boundary."""
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


@cache
def evidence() -> tuple[Trajectory, ...]:
    """The evidence cases: every start page and made page, init with tiny LRs, init as a cluster of 3."""
    pages, n = list({**start_pages(), **made_pages()}.values()), EVIDENCE_STEPS
    r = model.run(pages, n, grouped=False, independent=True)  # every page side by side, in mode Z
    out = [_states(Case("evidence-pages", "evidence", n, n, page="evidence-pages"), pages, r.pages, r.trace, {})]
    for w in (0x03800000, 0x0D800000, 0x00800001):
        out.append(trajectory(Case(f"evidence-lr-{w:08x}", "evidence", EVIDENCE_STEPS, set_lr=((0, w),))))
    out.append(trajectory(Case("evidence-cluster-3", "evidence", EVIDENCE_STEPS, systems=3, grouped=True)))
    return tuple(out)


def witness(m: faults.Model) -> Kill | None:
    """The first evidence case on which mutant ``m`` changes any bits (None: none)."""
    for t in evidence():
        k = first_difference(t, m)
        if k is not None and (k.what != "params" or t.case.name.startswith("evidence-pages") or confirm(t, m, k)):
            return k
    return None


@dataclass(frozen=True)
class Verdict:
    """One mutant against both packs (the first case that kills it), and its ``witness``."""

    name: str
    text: str
    quick: Kill | None
    full: Kill | None
    witness: Kill | None

    @property
    def equivalent(self) -> bool:
        """No pack kills it and it changes no bits on any evidence case."""
        return self.quick is None and self.full is None and self.witness is None


def verdicts() -> list[Verdict]:
    """Every mutant against the quick and the full pack (minutes), in table order."""
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
    """The ops whose result (with gradual underflow) is subnormal on some step of ``t``'s run."""
    n = len(t.pages)
    inv = _reads(t.pages)[2]
    found: set[str] = set()

    def tiny(op: str, w: np.ndarray) -> None:
        if is_subnormal(np.asarray(w, dtype=np.uint32)).any():
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
