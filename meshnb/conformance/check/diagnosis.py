"""Why the bits part: the first differing part replayed from meshnb's state before it under every fault model
of :mod:`meshnb.conformance.faults`, each model that reproduces the executor's bits named; where none does,
meshnb's lane values of the first differing sum.  Also a faulty executor's whole run (:func:`executor_run`).
"""

from __future__ import annotations

import struct
from collections.abc import Callable

import numpy as np

from .. import faults, model
from ..fpu import Ops
from ..pack import mark_timeouts
from .cases import SAMPLES_SPAN, Setup, reference_state
from .compare import first_trace_diff, rows_hex
from .localise import localise_page, localise_step
from .report import Diagnosis, Localisation, ModelNote

EXTEND = 64  # rows after the first differing one that a model must reproduce too
BUDGET = 1.0  # seconds the single-op search of a case may take (localise.BUDGET; read at the call)
WINDOW = 4  # steps replayed before the first differing step (an apply fault shows a step later)


def replay(setup: Setup, start: int, steps: int, m: faults.Model, pages: list[bytes] | None = None) -> model.Run:
    """Steps ``start`` .. ``start + steps`` under model ``m``, from meshnb's state at ``start`` (or ``pages``)."""
    case = setup.case
    end = start + steps
    # a SET_LR at the end of the part is made after it only when that is the end of the run (a page at
    # a task boundary is the view before the next task's SET_LR)
    lr = {s - start: w for s, w in case.set_lr if start <= s < end or s == end == case.steps}
    state = reference_state(setup, start, m) if pages is None else pages
    r = model.run(state, steps, grouped=case.grouped, set_lr=lr, assign=m.assignment)
    return model.Run(mark_timeouts(case, r.pages, start, steps), r.trace) if case.timeouts else r


def lane_table(setup: Setup, step: int, system: int) -> str:
    """meshnb's lane values at ``step`` of the run (system ``system``), as a text table."""
    case = setup.case
    state = reference_state(setup, step)
    n = case.systems
    t = case.step_base + step
    p, xs, ys, offs = _step_inputs(state, t, n, Ops())
    idx = model.lane_samples(offs)
    rows = np.arange(n)[:, None]
    lv = model.lanes({}, p, xs[rows, idx], ys[rows, idx])
    k = system if n > 1 else 0
    head = f"meshnb's lanes at step {step} (absolute {t}), system {k}, batch {int(offs[k]) % 8}, params " + " ".join(
        rows_hex(p[k])
    )
    lines = [head, "  lane sample x        y        pred     e        e*x      e*x2     e*x3     e*e"]
    for lane in range(32):
        vals = [lv[name][k, lane] for name in ("x", "y", "pred", *model.TERMS)]
        lines.append(f"  {lane:4d} {int(idx[k, lane]):6d} " + " ".join(f"{int(v):08x}" for v in vals))
    own = model.lane_sum({}, [lv[name] for name in model.TERMS])
    for m in range(n):
        lines.append(f"  own sums of system {m}: " + " ".join(rows_hex(own[m])))
    if case.grouped:
        lines.append("  fold: " + " ".join(rows_hex(model.fold({}, own))))
    return "\n".join(lines)


def _step_inputs(pages: list[bytes], t: int, n: int, ops: Ops) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The params (read by ``ops``), samples and sample offsets (``n`` systems) of step ``t`` from ``pages``."""
    p = np.stack([ops.read(model.words_at(pg, model.OFF_PARAMS, 4)) for pg in pages])
    xs = np.stack([model.words_at(pg, model.OFF_X, model.SAMPLES) for pg in pages])
    ys = np.stack([model.words_at(pg, model.OFF_Y, model.SAMPLES) for pg in pages])
    return p, xs, ys, np.array([(t * n + k) & 0xFFFFFFFF for k in range(n)], dtype=np.uint64)


def _candidates(setup: Setup, got_page: bytes) -> list[faults.Model]:
    """Every registered model, plus one that takes the executor's own samples when they differ."""
    models = list(faults.MODELS)
    exp = setup.expected[0]
    if got_page[SAMPLES_SPAN] != exp[SAMPLES_SPAN]:
        models.append(
            faults.Model(
                "executor-samples", "the executor's own samples (X, Y as in its page): samples not correctly rounded"
            )
        )
    return models


DIAG_STEPS = 1 << 17  # the diagnosis reads meshnb's run up to its part: this many steps at most
REPLAY_STEPS = 4096  # and replays at most this many steps under each model (numpy, ~0.3 ms a step)


def _too_long(end: int, replayed: int, diag_steps: int, replay_steps: int) -> str:
    """Why the diagnosis is not made ("" if it is): a part too far into the run or too long."""
    if end > diag_steps:
        return (
            f"the first difference is {end} steps into the run, past the {diag_steps} steps the diagnosis"
            " follows; check a shorter run, or give task-boundary pages with one near it"
        )
    if replayed > replay_steps:
        return (
            f"without a trace or task pages it would replay {replayed} steps under each model (at most"
            f" {replay_steps}); give the executor's trace or task-boundary pages"
        )
    return ""


def _note(m: faults.Model) -> ModelNote:
    return ModelNote(name=m.name, doc=m.doc)


def _with_samples(pages: list[bytes], got_page: bytes) -> list[bytes]:
    return [pg[: SAMPLES_SPAN.start] + got_page[SAMPLES_SPAN] + pg[SAMPLES_SPAN.stop :] for pg in pages]


def diagnose(
    setup: Setup,
    system: int,
    got_page: bytes,
    got_trace: np.ndarray | None,
    task: tuple[int, int, bytes] | None,
    progress: Callable[[str], None] | None = None,
    *,
    diag_steps: int = DIAG_STEPS,
    replay_steps: int = REPLAY_STEPS,
) -> Diagnosis:
    """Replays the first differing part under every model and names those that reproduce the bits.

    A model's replay starts ``WINDOW`` steps before the first differing step, or earlier where the model first
    parts from meshnb (a fault can change the params long before the sums show it); a model that never parts is
    skipped, and one whose replay would exceed ``replay_steps`` is named under ``not_replayed`` (a check's time
    stays bounded).
    """
    case = setup.case
    found: list[faults.Model] = []
    lanes_at: int | None = None
    diff_t = first_trace_diff(setup.trace, got_trace) if got_trace is not None else None
    if diff_t is not None:
        end = diff_t[0] + 1
        window = max(0, diff_t[0] - WINDOW)
        how = (
            f"from meshnb's state at step {window} (or earlier, where the model first parts from meshnb), "
            f"the trace rows to step {diff_t[0]}"
        )
        lanes_at = diff_t[0]
    elif task is not None:
        window, end = task[0], task[1]
        how = f"the task of steps {window} .. {end} from meshnb's page after {window} steps, the pages"
        lanes_at = window
    elif got_trace is not None:
        window, end = max(0, case.steps - WINDOW), case.steps
        how = f"the trace matches: the last {case.steps - window} steps from meshnb's state, the final pages"
    else:
        window, end = 0, case.steps
        how = "no trace: the whole run from the start pages, the final pages"
    # With a trace, a model that reproduces the first differing step is also held to the rows after
    # it (up to EXTEND steps): two flush rules can agree on one step and part on the next.
    far = min(case.steps, end + EXTEND) if diff_t is not None else end
    skip = _too_long(end, far - window, diag_steps, replay_steps)
    if skip:
        out = Diagnosis(how="not made", models=[], skipped=skip)
        out["localisation"] = _localise(setup, system, got_page, got_trace, diff_t)
        return out
    first_only: list[faults.Model] = []
    not_replayed: list[faults.Model] = []
    candidates = _candidates(setup, got_page)
    for i, m in enumerate(candidates):
        if progress is not None:
            progress(f"diagnosis: model {i + 1} of {len(candidates)}, {m.name}")
        if m.name == "executor-samples":
            start = 0 if diff_t is None and task is None else window
            r = replay(setup, start, far - start, m, _with_samples(reference_state(setup, start), got_page))
        else:
            d = first_divergence(setup, m, upto=end + 1)  # only a divergence up to the part's end counts
            final = diff_t is None and task is None  # the final page: a SET_LR after the last step counts
            if d is None or d > end or (d == end and not (final and end == case.steps)):
                continue  # the model gives meshnb's bits over the part compared
            if diff_t is None and got_trace is not None and _sums_part_at(setup, m, d):
                continue  # its trace parts from meshnb's at d, and the executor's does not: not replayed
            start = min(window, d)
            if far - start > replay_steps:  # parts from meshnb long before the part compared
                not_replayed.append(m)
                continue
            r = replay(setup, start, far - start, m)
        if diff_t is not None:
            assert got_trace is not None  # a differing step comes from a trace
            ok = np.array_equal(r.trace[: end - start], got_trace[start:end])
            if ok and not np.array_equal(r.trace, got_trace[start:far]):
                first_only.append(m)
                continue
        elif task is not None:
            ok = r.pages[system] == task[2]
        else:
            ok = r.pages[system] == got_page
        if ok:
            found.append(m)
    if diff_t is not None:
        how += f" and on to step {far - 1}"
    out = Diagnosis(how="replayed " + how + " compared", models=[_note(m) for m in found])
    if first_only:
        out["first_step_only"] = [_note(m) for m in first_only]
    if not_replayed:
        out["not_replayed"] = [_note(m) for m in not_replayed]
    if not found and lanes_at is not None and lanes_at < case.steps:
        out["lanes"] = lane_table(setup, lanes_at, system)
    if not found:  # the whole-run models first; where none reproduces the bits, the op
        if progress is not None:
            progress("diagnosis: single-op changes")
        out["localisation"] = _localise(setup, system, got_page, got_trace, diff_t)
    return out


def _localise(
    setup: Setup, system: int, got_page: bytes, got_trace: np.ndarray | None, diff_t: tuple[int, list[str]] | None
) -> Localisation:
    """The single op at the first differing step (:mod:`.localise`), or the page's first word."""
    if diff_t is not None and got_trace is not None:
        return localise_step(setup, system, diff_t[0], got_trace, BUDGET)
    return localise_page(setup, system, got_page, BUDGET)


def _sums_part_at(setup: Setup, m: faults.Model, d: int) -> bool:
    """Whether model ``m``'s applied sums at step ``d`` (from meshnb's state, where it first parts) differ from
    meshnb's trace row: then no replay of it reproduces a trace equal to meshnb's.
    """
    case = setup.case
    if d >= case.steps:
        return False
    pages = reference_state(setup, d, m)
    p, xs, ys, offs = _step_inputs(pages, case.step_base + d, case.systems, Ops(m.rules))
    own = model.step_sums(m.assignment, p, xs, ys, offs)
    applied = model.fold(m.assignment, own) if case.grouped else own[0]
    return not np.array_equal(applied, setup.trace[d])


def _params_per_step(setup: Setup, upto: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """meshnb's params before each step (upto + 1, 4) and the LR at each step (upto,), rebuilt from the trace
    with the plain-Python reference ops.
    """
    from meshnb.testing import reference as ref

    case = setup.case
    n = case.steps if upto is None else min(case.steps, upto)
    if setup.per_step is not None and len(setup.per_step[1]) >= n:
        return setup.per_step[0][: n + 1], setup.per_step[1][:n]
    page = setup.in_pages[0]
    p = [ref.py_flush(w) for w in struct.unpack_from("<4I", page, model.OFF_PARAMS)]
    lr = ref.py_flush(struct.unpack_from("<I", page, model.OFF_LR)[0])
    inv = ref.py_flush(struct.unpack_from("<I", page, model.OFF_INV)[0])
    changes = dict(case.set_lr)
    ps = np.zeros((n + 1, 4), dtype=np.uint32)
    lrs = np.zeros(n, dtype=np.uint32)
    ps[0] = p
    for s in range(n):
        if s in changes:
            lr = ref.py_flush(changes[s])
        row = [int(w) for w in setup.trace[s]]
        p = [ref.py_sub(p[j], ref.py_mul(lr, ref.py_mul(row[j], inv))) for j in range(4)]
        ps[s + 1] = p
        lrs[s] = lr
    setup.per_step = (ps, lrs)
    return ps, lrs


DIVERGENCE_BLOCK = 4096  # steps evaluated at once by first_divergence (memory: ~10 KB a step and system)


def first_divergence(setup: Setup, m: faults.Model, upto: int | None = None) -> int | None:
    """The first step at which model ``m`` computes other bits than meshnb (sums, params or loss), evaluated a
    block of steps at once on meshnb's trajectory (up to it the model's run is meshnb's); None if none within
    ``upto`` steps (default: the whole run).
    """
    case = setup.case
    a, z = m.assignment, Ops()
    start = setup.in_pages if not case.from_init else reference_state(setup, 0, m)
    pg = start[0]
    params = model.words_at(pg, model.OFF_PARAMS, 4)
    lr_word, inv_word = (int(model.words_at(pg, off)[0]) for off in (model.OFF_LR, model.OFF_INV))
    if (
        not np.array_equal(_read(a, "PARAMS", params), z.read(params))
        or not np.array_equal(_read(a, "LR", lr_word), z.read(lr_word))
        or not np.array_equal(_read(a, "INV_BATCH", inv_word), z.read(inv_word))
        or any(pg[SAMPLES_SPAN] != p0[SAMPLES_SPAN] for p0 in setup.in_pages)
    ):
        return 0
    # a SET_LR word read otherwise parts there, unless a step before it already parts
    lr_part = next((s for s, w in case.set_lr if int(_read(a, "LR", w)) != int(z.read(w))), None)
    if case.steps == 0:
        return lr_part
    steps = case.steps if upto is None else max(0, min(case.steps, upto))
    if lr_part is not None:
        steps = min(steps, lr_part)
    ps, lrs = _params_per_step(setup, steps)
    xs = model.words_at(pg, model.OFF_X, model.SAMPLES)
    ys = model.words_at(pg, model.OFF_Y, model.SAMPLES)
    inv_m = int(_read(a, "INV_BATCH", inv_word))
    inv_z = int(z.read(inv_word))
    for lo in range(0, steps, DIVERGENCE_BLOCK):
        hi = min(steps, lo + DIVERGENCE_BLOCK)
        hit = _divergence_in(setup, a, (xs, ys, inv_m, inv_z), ps[lo : hi + 1], lrs[lo:hi], lo)
        if hit is not None:
            return hit
    return lr_part


def _read(a: model.Assignment, field: str, w: object) -> np.ndarray:
    """Page word(s) ``w`` of ``field`` as a TASK under assignment ``a`` reads them, as words."""
    return np.asarray(model.words(model.read(a, field, w)), dtype=np.uint32)


def _divergence_in(
    setup: Setup,
    a: model.Assignment,
    page: tuple[np.ndarray, np.ndarray, int, int],
    ps: np.ndarray,
    lrs: np.ndarray,
    lo: int,
) -> int | None:
    """:func:`first_divergence` of assignment ``a`` over steps ``lo`` .. ``lo + len(lrs)``, from meshnb's params
    ``ps`` and LRs ``lrs`` and the start page's samples and INV_BATCH reads.
    """
    case = setup.case
    xs, ys, inv_m, inv_z = page
    n, steps = case.systems, len(lrs)
    t = case.step_base + lo + np.arange(steps, dtype=object)
    offs = np.array([(int(tt) * n + k) & 0xFFFFFFFF for tt in t for k in range(n)], dtype=np.uint64)
    idx = model.lane_samples(offs)
    p_rep = np.repeat(ps[:-1], n, axis=0)
    own = model.sums(a, p_rep, xs[idx], ys[idx])  # (steps*n, 5)
    applied = model.fold(a, own.reshape(steps, n, 5)) if case.grouped else own
    trace = setup.trace[lo : lo + steps]
    inv = np.full((steps, 1), inv_m, dtype=np.uint32)
    newp = model.apply(a, ps[:-1], applied, lrs[:, None], inv)
    loss_m = model.loss(a, applied, inv)
    loss_z = model.loss({}, trace, np.full((steps, 1), inv_z, dtype=np.uint32))
    bad = (applied != trace).any(axis=1) | (newp != ps[1:]).any(axis=1) | (loss_m != loss_z)
    hits = np.nonzero(bad)[0]
    return lo + int(hits[0]) if len(hits) else None


def executor_run(setup: Setup, m: faults.Model) -> model.Run:
    """What an executor with fault ``m`` gives for this setup: :func:`meshnb.conformance.model.run`
    of its assignment from the step where ``m`` first parts from meshnb (:func:`first_divergence`),
    meshnb's bits before it.  The tests check that it equals the plain :func:`faults.run` from the
    start.

    Parameters
    ----------
    setup : Setup
        The case, its start pages and meshnb's expected pages and trace.
    m : faults.Model
        The fault model the executor is taken to have.

    Returns
    -------
    model.Run
        Every system's out page and the run's trace, as that executor gives them.

    Examples
    --------
    >>> from meshnb.conformance import faults
    >>> from meshnb.conformance.check import executor_run, setup_from_run
    >>> from meshnb.testing.reference import init_page
    >>> setup = setup_from_run(init_page(), 16)
    >>> model = faults.model("fma-horner")
    >>> plain = faults.run(setup.in_pages, 16, grouped=False, m=model)  # the whole run under the model
    >>> executor_run(setup, model).pages == plain.pages, executor_run(setup, faults.EXACT).pages == setup.expected
    (True, True)
    """
    case = setup.case
    d = first_divergence(setup, m)
    if d is None:
        return model.Run(list(setup.expected), setup.trace.copy())
    if d == 0:
        set_lr = dict(case.set_lr)
        r = model.run(
            setup.in_pages,
            case.steps,
            grouped=case.grouped,
            set_lr=set_lr,
            assign=m.assignment,
            from_init=case.from_init,
        )
        return model.Run(mark_timeouts(case, r.pages), r.trace)
    r = replay(setup, d, case.steps - d, m)
    return model.Run(r.pages, np.concatenate([setup.trace[:d], r.trace]))
