"""Which op: the first differing step replayed from meshnb's state by the step model
(:mod:`meshnb.conformance.model`) under every single-op change (each op of the step under each alternative
rule), the changes that give the executor's row named; where only the page differs, its first differing word
and the simple transformations that make it (a shifted ring, a sign, the byte order, a NaN's payload, a
counter off by one, the loss or the last apply otherwise).  Every change named was run and gave the
executor's bits; the search is bounded by :data:`BUDGET`, and a report says when it was cut short.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from .. import model
from ..fpu import SIGN, is_nan, ulps
from ..model import OFF_INV, OFF_LOSS, OFF_LR, OFF_NEXT, OFF_PARAMS, OFF_STEP_HI, OFF_X, OFF_Y, RING, SAMPLES, words_at
from .cases import Setup, reference_state
from .compare import page_diff
from .report import Counterfactual, Localisation

BUDGET = 1.0  # seconds a case's search may take (about 1 ms a change; the space has ~240)
HOLD = 64  # rows after the step that an executor with the change is held to (to say how far it holds)


@dataclass
class _Step:
    """meshnb's state before a step: every system's params, LR, INV_BATCH and the lanes' samples."""

    p: np.ndarray  # (N, 4)
    lr: np.ndarray  # (N, 1)
    inv: np.ndarray  # (N, 1)
    x: np.ndarray  # (N, 32)
    y: np.ndarray  # (N, 32)
    grouped: bool


def _state(setup: Setup, step: int) -> _Step:
    case = setup.case
    pages = reference_state(setup, step)
    n, t = case.systems, case.step_base + step
    p = np.stack([model.read({}, "PARAMS", words_at(pg, OFF_PARAMS, 4)) for pg in pages])
    lr = np.stack([model.read({}, "LR", words_at(pg, OFF_LR)) for pg in pages])
    for s, w in case.set_lr:
        if s == step:
            lr[:] = model.read({}, "LR", w)
    inv = np.stack([model.read({}, "INV_BATCH", words_at(pg, OFF_INV)) for pg in pages])
    xs = np.stack([words_at(pg, OFF_X, SAMPLES) for pg in pages])
    ys = np.stack([words_at(pg, OFF_Y, SAMPLES) for pg in pages])
    offs = np.array([(t * n + k) & 0xFFFFFFFF for k in range(n)], dtype=np.uint64)
    idx, rows = model.lane_samples(offs), np.arange(n)[:, None]
    return _Step(p, lr, inv, xs[rows, idx], ys[rows, idx], case.grouped)


def _sums(mut: model.Mutant | None, st: _Step, p: np.ndarray | None = None) -> np.ndarray:
    """The applied sums (N, 5) of the step (from params ``p``, default the state's)."""
    a = mut.assignment if mut is not None else {}
    own = model.sums(a, st.p if p is None else p, st.x, st.y)
    return np.broadcast_to(model.fold(a, own), own.shape) if st.grouped else own


class _Unchanged:
    """Whether a rule alternative of a per-lane or butterfly op gives mode Z's words on every lane of this step:
    then the step is mode Z's and need not be run.
    """

    def __init__(self, st: _Step) -> None:
        self.values = model.lanes({}, st.p, st.x, st.y)
        terms = np.stack([self.values[t] for t in model.TERMS], axis=1)
        self.levels: dict[int, np.ndarray] = {}
        self.z = z = model.arith("z")
        for o in model.BUTTERFLY:
            self.levels[o] = terms
            terms = z.add(terms, terms[..., model.LANES ^ o])

    def __call__(self, mut: model.Mutant) -> bool:
        if model.RULES[mut.alt].arith is None:  # a structural rule: it changes the dataflow
            return False
        op, ops = model.BY_ID[mut.op], model.arith(mut.alt)
        if op.stage == "lanes":
            a, b = (self.values[n] for n in op.args)
            return bool(np.array_equal(model.node(mut.assignment, op.id, a, b), self.values[op.id]))
        if op.stage == "butterfly" and op.id != "butterfly":
            o = int(op.id.removeprefix("butterfly"))
            v = self.levels[o]
            pair = v[..., model.LANES ^ o]
            return bool(np.array_equal(ops.add(v, pair), self.z.add(v, pair)))
        return False


def _lanes_changed(mut: model.Mutant, st: _Step, system: int) -> list[int]:
    """The lanes (of ``system``) whose per-lane value the change changes: the op's own, (fused) its consumer's,
    or the butterfly's first level.
    """
    exact, got = model.lanes({}, st.p, st.x, st.y), model.lanes(mut.assignment, st.p, st.x, st.y)
    ids = [op.id for op in model.STAGE_OPS["lanes"]]
    for op_id in ids[ids.index(mut.op) :]:
        g = got[op_id]
        if not model.is_words(g):
            continue
        diff = np.nonzero(np.asarray(g)[system] != np.asarray(exact[op_id])[system])[0]
        if len(diff):
            return [int(i) for i in diff]
    one = model.level_one(mut.assignment, [got[t] for t in model.TERMS])[system]
    base = model.level_one({}, [exact[t] for t in model.TERMS])[system]
    return [int(i) for i in np.nonzero((one != base).any(axis=0))[0]]


def _lane_text(lanes: list[int]) -> str:
    if len(lanes) == model.WARP:
        return "lanes 0 .. 31"
    return ("lane " if len(lanes) == 1 else "lanes ") + ", ".join(map(str, lanes))


def _distance(a: np.ndarray, b: np.ndarray) -> tuple[int, int]:
    """(words that differ, their ulps apart in total) of two rows."""
    d = a != b
    return int(d.sum()), int(ulps(a[d], b[d]).sum()) if d.any() else 0


def _holds(setup: Setup, mut: model.Mutant, start: int, got_trace: np.ndarray) -> int:
    """How many rows from ``start`` an executor with this one change (on every step) reproduces."""
    case = setup.case
    steps = min(case.steps - start, HOLD)
    lr = {s - start: w for s, w in case.set_lr if start <= s < start + steps}
    start_pages = reference_state(setup, start)
    from_init = case.from_init and start == 0  # the executor's own init: a samples op's change shows
    r = model.run(start_pages, steps, grouped=case.grouped, set_lr=lr, assign=mut.assignment, from_init=from_init)
    same = (r.trace == got_trace[start : start + steps]).all(axis=1)
    return int(np.argmin(same)) if not same.all() else steps


def localise_step(
    setup: Setup, system: int, step: int, got_trace: np.ndarray, budget: float | None = None
) -> Localisation:
    """The single-op changes that reproduce the executor's row at ``step`` (the first that differs): the sums'
    ops replayed at ``step`` from meshnb's state, apply's at the step before (an apply fault shows a step later),
    the samples' at step 0 of a case from init.
    """
    budget = BUDGET if budget is None else budget  # read at the call: a test may lift it
    t0 = time.monotonic()
    case = setup.case
    row = got_trace[step]
    here = _state(setup, step)
    before = _state(setup, step - 1) if step > 0 else None
    stages = ("lanes", "butterfly") + (("fold",) if case.grouped else ())
    tries: list[tuple[model.Mutant, int]] = [(m, step) for m in model.mutations(stages)]
    if before is not None:
        tries += [(m, step - 1) for m in model.mutations(("apply",))]
    if step == 0 and case.from_init:
        tries += [(m, 0) for m in model.mutations(("samples",))]
    k = system if case.systems > 1 else 0
    found: list[Counterfactual] = []
    best: tuple[tuple[int, int], str] | None = None
    searched = 0
    exact_d = _distance(_sums(None, here)[0], row)
    if exact_d[0] == 0:
        raise ValueError(f"step {step}: the executor's row is meshnb's")
    same = _Unchanged(here)
    matched: list[tuple[model.Mutant, int, str]] = []
    for mut, at in tries:
        if time.monotonic() - t0 > budget:
            break
        searched += 1
        stage = model.BY_ID[mut.op].stage
        if same(mut):
            continue  # the op gives mode Z's words on every lane: the step is mode Z's
        if stage == "apply":
            assert before is not None
            p = model.apply(
                mut.assignment,
                before.p,
                np.asarray(setup.trace[step - 1 : step]).repeat(len(before.p), 0),
                before.lr,
                before.inv,
            )
            sums = _sums(None, here, p)[0]
        elif stage == "samples":
            xs, ys = model.samples(mut.assignment)
            idx = model.lane_samples(
                np.array(
                    [(case.step_base * case.systems + j) & 0xFFFFFFFF for j in range(case.systems)], dtype=np.uint64
                )
            )
            st = _Step(here.p, here.lr, here.inv, xs[idx], ys[idx], here.grouped)
            sums = _sums(None, st)[0]
        else:
            sums = _sums(mut, here)[0]
        text = f"step {at}: mode Z except {mut.text()}"
        if stage == "apply":
            text += f" (shows in step {step}'s sums)"
        if np.array_equal(sums, row):
            matched.append((mut, at, text))
            continue
        d = _distance(sums, row)
        if d < exact_d and (best is None or d < best[0]):
            best = (d, text + f" ({d[0]} of 5 sums differ, {d[1]} ulps)")
    for mut, at, text in matched:  # each named change also run on the rows after it, while time is left
        lanes = _lanes_changed(mut, here, k) if model.BY_ID[mut.op].stage == "lanes" else []
        if lanes:
            text += f" on {_lane_text(lanes)}"
        holds = _holds(setup, mut, at, got_trace) if time.monotonic() - t0 < budget else 1
        found.append(Counterfactual(op=mut.op, alt=mut.alt, step=at, lanes=lanes, text=text, holds=holds))
    out = Localisation(
        where=f"step {step}",
        found=found,
        page=[],
        searched=searched,
        space=len(tries),
        seconds=round(time.monotonic() - t0, 3),
    )
    if not found:
        out["closest"] = (
            best[1]
            if best is not None
            else f"none nearer than mode Z ({exact_d[0]} of 5 sums differ, {exact_d[1]} ulps)"
        )
    if searched < len(tries):
        out["cut_short"] = f"{len(tries) - searched} of {len(tries)} changes not tried within {budget} s"
    # the smallest set first: the changes that hold longest on the rows after the step
    found.sort(key=lambda c: -c["holds"])
    return out


# =============================================================================================
# Only the page differs
# =============================================================================================


def _ring(page: bytes) -> np.ndarray:
    return words_at(page, OFF_LOSS, RING)


def _loss_ring(setup: Setup, system: int, write: object) -> np.ndarray:
    """The loss ring the run writes with ``write(t, loss of step t) -> index`` (its entry)."""
    case = setup.case
    ring = _ring(setup.in_pages[system]).copy()
    exp = _ring(setup.expected[system])
    for s in range(max(0, case.steps - RING), case.steps):
        t = case.step_base + s
        ring[write(t) % RING] = exp[t % RING]  # type: ignore[operator]
    return ring


def _page_findings(setup: Setup, system: int, got: bytes) -> list[str]:
    """The simple transformations of meshnb's page that give the executor's words (each checked)."""
    case = setup.case
    want = setup.expected[system]
    diff = page_diff(case, want, got)
    out: list[str] = []
    wv, gv = np.frombuffer(want, dtype="<u4").astype(np.uint32), np.frombuffer(got, dtype="<u4").astype(np.uint32)
    at = np.nonzero(wv != gv)[0]
    names = {d["offset"] // 4: d["field"] for d in diff}
    loss_lo, loss_hi = OFF_LOSS // 4, OFF_LOSS // 4 + RING
    in_loss = at[(at >= loss_lo) & (at < loss_hi)]
    if len(in_loss) and case.steps > 0:
        g = _ring(got)
        for shift in (*range(1, 256), *range(-1, -256, -1)):
            if np.array_equal(_loss_ring(setup, system, lambda t, s=shift: t + s), g):
                out.append(
                    f"LOSS: the loss of step t written at LOSS[(t {'+' if shift > 0 else '-'} {abs(shift)}) mod 256]"
                )
                break
        if not out and case.steps >= 1:
            inv = model.read({}, "INV_BATCH", words_at(want, OFF_INV))[None, :]
            rows = np.asarray(setup.trace[max(0, case.steps - RING) :])
            steps = case.step_base + np.arange(max(0, case.steps - RING), case.steps, dtype=object)
            for mut in model.mutations(("loss",)):
                ring = _ring(setup.in_pages[system]).copy()
                ring[[int(t) % RING for t in steps]] = model.loss(
                    mut.assignment, rows, np.broadcast_to(inv, (len(rows), 1))
                )
                if np.array_equal(ring, g):
                    out.append(f"LOSS: mode Z except {mut.text()} (every step's loss)")
                    break
    header = [int(i) for i in at if i < OFF_X // 4]
    step_of = {p: (int(v[OFF_STEP_HI // 4]) << 32) | int(v[OFF_NEXT // 4]) for p, v in (("want", wv), ("got", gv))}
    if any(names.get(i) in ("NEXT_STEP", "STEP_HI") for i in header):
        d = step_of["got"] - step_of["want"]
        if abs(d) <= 2:
            out.append(f"STEP_HI:NEXT_STEP: the step counter off by {d:+d} ({step_of['got']} for {step_of['want']})")
        elif step_of["got"] == step_of["want"] & 0xFFFFFFFF:
            hi = OFF_STEP_HI // 4
            out.append(f"STEP_HI:NEXT_STEP: a 32-bit step counter (STEP_HI {gv[hi]} for {wv[hi]}: the carry lost)")
    words: list[str] = []
    for i in at:
        name = names.get(int(i), f"word {int(i)}")
        explained = (
            "LOSS" if name.startswith("LOSS") else "STEP_HI" if name in ("NEXT_STEP", "STEP_HI") else "-"
        ) + ":"
        if any(f.startswith(explained) for f in out):
            continue
        w, gw = int(wv[i]), int(gv[i])
        if gw == w ^ int(SIGN):
            words.append(f"{name}: the sign flipped")
        elif gw == int.from_bytes(w.to_bytes(4, "little"), "big"):
            words.append(f"{name}: the bytes in reverse order")
        elif bool(is_nan(np.uint32(w))) and bool(is_nan(np.uint32(gw))):
            words.append(f"{name}: another NaN ({gw:08x} for {w:08x})")
        elif abs(gw - w) == 1 and name in ("ROUND", "NEXT_STEP", "STEP_HI", "ERR", "PENDING", "STEPS_PER_TASK"):
            words.append(f"{name}: off by {gw - w:+d}")
    if words:
        out.append("; ".join(words[:8]) + (f"; ... {len(words) - 8} more" if len(words) > 8 else ""))
    return out


def _last_apply(setup: Setup, system: int, got: bytes, budget: float) -> list[Counterfactual]:
    """apply's ops changed at the run's last step: the single-op changes that give the executor's PARAMS."""
    case = setup.case
    if case.steps == 0:
        return []
    t0 = time.monotonic()
    st = _state(setup, case.steps - 1)
    want = words_at(got, OFF_PARAMS, 4)
    row = np.asarray(setup.trace[-1:]).repeat(len(st.p), 0)
    k = system if case.systems > 1 else 0
    found = []
    for mut in model.mutations(("apply",)):
        if time.monotonic() - t0 > budget:
            break
        if np.array_equal(model.apply(mut.assignment, st.p, row, st.lr, st.inv)[k], want):
            text = f"step {case.steps - 1}: mode Z except {mut.text()} (the last step's apply)"
            found.append(Counterfactual(op=mut.op, alt=mut.alt, step=case.steps - 1, lanes=[], text=text, holds=1))
    return found


def localise_page(setup: Setup, system: int, got: bytes, budget: float | None = None) -> Localisation:
    """Where only the page differs: its first differing word, and the transformations of meshnb's page that
    give the executor's words.
    """
    budget = BUDGET if budget is None else budget  # read at the call: a test may lift it
    t0 = time.monotonic()
    case = setup.case
    diff = page_diff(case, setup.expected[system], got)
    first = diff[0]["field"] if diff else "none"
    region = first.split("[")[0]
    kind = {"PARAMS": "params", "LOSS": "loss", "X": "samples", "Y": "samples"}.get(region, "header")
    found: list[Counterfactual] = []
    if region == "PARAMS" and all(d["field"].startswith(("PARAMS", "NEXT", "STEP")) for d in diff):
        found = _last_apply(setup, system, got, budget)
    page = [] if found else _page_findings(setup, system, got)
    return Localisation(
        where=f"page word {first} ({kind})",
        found=found,
        page=page,
        searched=0,
        space=0,
        seconds=round(time.monotonic() - t0, 3),
    )
