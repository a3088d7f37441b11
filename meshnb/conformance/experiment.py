"""Where the bits part, seen by running the executor: experiments from meshnb's own pages.

A page is a system's whole state at a task boundary (SPEC 7): the executor started from meshnb's page after
step ``s`` and run ``n`` steps gives meshnb's outputs exactly when those steps are right.  :func:`locate`
bisects a case this way (over its tasks, then inside the first that differs, down to one step); the
explanations keep the candidate causes every experiment agrees with and run designed pages that part the
survivors.  Every experiment is a case directory ``meshnb check`` replays (:func:`save`); each search is bounded.
"""

from __future__ import annotations

import json
import struct
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from . import faults
from .check.cases import Setup, reference_state
from .check.compare import first_trace_diff, page_diff
from .pack import Case, case_json, mark_timeouts

MAX_RUNS = 14  # executor runs a case's search may make
MAX_SECONDS = 10.0  # and seconds it may take (checked before each run)

Outputs = tuple[list[bytes], np.ndarray | None]
Runner = Callable[["Experiment"], "Outputs | str"]
"""Runs the executor on an experiment (its ``case`` document and ``in_pages``) -> its out pages and
trace (None if it wrote none), or why it gave no outputs (an error)."""
Predict = Callable[[str, "Experiment"], list[bytes]]  # a header or page rule's out pages of an experiment

_SPT, _NEXT, _STEP_HI = 20, 28, 44


@dataclass
class Experiment:
    """One run of the executor from meshnb's page after ``start`` steps of the case: ``steps`` steps, STEPS_PER_TASK
    ``steps_per_task``; whether its outputs differed from meshnb's, and how.
    """

    start: int
    steps: int
    steps_per_task: int
    differs: bool = False
    what: str = ""  # the first difference, in words ("" when none)
    case: dict[str, Any] = field(default_factory=dict)
    sub: Case | None = None
    in_pages: list[bytes] = field(default_factory=list)
    expected: list[bytes] = field(default_factory=list)
    trace: np.ndarray | None = None
    got: Outputs | str | None = None  # what the executor gave

    def to_json(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in ("start", "steps", "steps_per_task", "differs", "what")}


@dataclass
class Location:
    """What :func:`locate` saw: ``where`` in words, the step (of the run) or None, the experiments."""

    where: str
    step: int | None
    task: tuple[int, int] | None
    words: list[str]
    sums: list[str]
    experiments: list[Experiment]
    seconds: float
    cut_short: bool

    def to_json(self) -> dict[str, Any]:
        return {
            "where": self.where,
            "step": self.step,
            "task": list(self.task) if self.task else None,
            "words": self.words,
            "sums": self.sums,
            "runs": len(self.experiments),
            "seconds": round(self.seconds, 3),
            "cut_short": self.cut_short,
            "experiments": [e.to_json() for e in self.experiments],
        }


def boundaries(case: Case) -> list[int]:
    """The steps of the case at which a task starts, and its end (the host's tasks, a task ended early at a SET_LR)."""
    return [0, *_task_ends(case.steps, case.steps_per_task, dict(case.set_lr))]


def experiment(setup: Setup, start: int, steps: int, steps_per_task: int) -> Experiment:
    """The experiment of steps ``start`` .. ``start + steps`` from meshnb's pages after ``start`` steps."""
    case = setup.case
    end = start + steps
    pages = reference_state(setup, start)
    ins = []
    for pg in pages:
        b = bytearray(pg)
        struct.pack_into("<I", b, _SPT, steps_per_task)
        ins.append(bytes(b))
    last = end == case.steps
    lr = tuple((s - start, w) for s, w in case.set_lr if start <= s < end or (last and s == end))
    sub = replace(
        case,
        name=f"{case.name}-exp-{start}-{steps}-{steps_per_task}",
        about=f"experiment: steps {start} .. {end - 1} of {case.name} from meshnb's page after {start} steps",
        steps=steps,
        quick_steps=steps,
        steps_per_task=steps_per_task,
        set_lr=lr,
        step_base=case.step_base + start,
        page="experiment",
        timeouts=tuple((k, at - start) for k, at in case.timeouts if start <= at < end),
    )
    sub_setup = Setup(sub, ins, [], setup.trace[start:end])
    expected = setup.expected if last else reference_state(sub_setup, steps)
    # the pages after the experiment hold its STEPS_PER_TASK (the host restores it after a shortened task)
    expected = [pg[:_SPT] + struct.pack("<I", steps_per_task) + pg[_SPT + 4 :] for pg in expected]
    doc = case_json(sub)
    return Experiment(
        start, steps, steps_per_task, case=doc, sub=sub, in_pages=ins, expected=expected, trace=sub_setup.trace
    )


def _compare(e: Experiment, got: Outputs | str) -> None:
    """Whether the executor's outputs differ from meshnb's: the trace first (a step's sums come before its words)."""
    if isinstance(got, str):
        e.differs, e.what = True, f"the executor gave no outputs: {got}"
        return
    pages, trace = got
    if trace is not None and e.trace is not None:
        if trace.shape != e.trace.shape:
            e.differs, e.what = True, f"trace: {len(trace)} steps written for {len(e.trace)}"
            return
        t = first_trace_diff(e.trace, trace)
        if t is not None:
            e.differs, e.what = True, f"trace: step {e.start + t[0]} ({', '.join(t[1])})"
            return
    for k, (g, w) in enumerate(zip(pages, e.expected, strict=False)):
        if g != w:
            assert e.sub is not None
            d = page_diff(e.sub, w, g)
            e.differs = True
            e.what = f"system {k}: {len(d)} page words differ, first {d[0]['field']}" if d else f"system {k}: page"
            return
    if len(pages) != len(e.expected):
        e.differs, e.what = True, f"{len(pages)} pages written for {len(e.expected)} systems"


def locate(
    setup: Setup,
    run: Runner,
    *,
    hint: int | None = None,
    max_runs: int = MAX_RUNS,
    max_seconds: float | None = None,
) -> Location:
    """Bisects the case by running the executor from meshnb's pages (the module's docstring); with ``hint`` (the
    step where the executor's trace first differs) that step is run alone first, as a one-step task.
    """
    max_seconds = MAX_SECONDS if max_seconds is None else max_seconds  # read at the call: a test may lift it
    t0 = time.monotonic()
    case = setup.case
    done: list[Experiment] = []

    def trial(start: int, steps: int, spt: int) -> Experiment | None:
        if len(done) >= max_runs or time.monotonic() - t0 > max_seconds:
            return None
        e = experiment(setup, start, steps, spt)
        e.got = run(e)
        _compare(e, e.got)
        done.append(e)
        return e

    def result(where: str, step: int | None, task: tuple[int, int] | None, e: Experiment | None, cut: bool) -> Location:
        words: list[str] = []
        sums: list[str] = []
        if e is not None and e.differs:
            if e.what.startswith("trace"):
                sums = e.what.split("(", 1)[1].rstrip(")").split(", ")
            elif "page words" in e.what:
                words = [e.what.rsplit("first ", 1)[1]]
        return Location(where, step, task, words, sums, done, time.monotonic() - t0, cut)

    b = boundaries(case)
    if not case.steps:
        return result("the run has no steps", None, None, None, False)
    if hint is not None and 0 <= hint < case.steps:
        e = trial(hint, 1, 1)
        if e is not None and e.differs:
            return result(_step_text(hint, e), hint, None, e, False)
    whole = trial(0, case.steps, case.steps_per_task)
    if whole is None:
        return result("not located (no executor run within the bound)", None, None, None, True)
    if not whole.differs:
        if case.from_init:
            return result(
                "init: started from meshnb's page at step 0 the executor gives meshnb's bits", 0, None, whole, False
            )
        return result("not reproduced: the case run from its own page passes now", None, None, whole, False)
    # the first task (of the case's own tasks) that differs, from meshnb's page before it
    lo, hi = 0, len(b) - 1  # a span of tasks b[lo] .. b[hi] known to differ
    cut = False
    while hi - lo > 1:
        mid = (lo + hi) // 2
        e = trial(b[lo], b[mid] - b[lo], case.steps_per_task)
        if e is None:
            cut = True
            break
        if e.differs:
            hi = mid
        else:
            lo = mid
    a, z = b[lo], b[hi]
    if cut:
        return result(f"steps {a} .. {z - 1} (search cut short)", None, (a, z), None, True)
    single = trial(a, z - a, case.steps_per_task) if hi - lo == 1 and (a, z) != (0, case.steps) else whole
    if single is None:
        return result(f"steps {a} .. {z - 1} (search cut short)", None, (a, z), None, True)
    if not single.differs:
        return result(
            f"steps {a} .. {z - 1}: the span differs and no task of it alone does (state kept between tasks, "
            "outside the page)",
            None,
            (a, z),
            single,
            False,
        )
    # inside the task: one task of k steps from meshnb's page at a; the first step that differs
    lo_s, hi_s = a, z  # steps a .. hi_s - 1 differ as one task
    last: Experiment = single
    while hi_s - lo_s > 1:
        mid = (lo_s + hi_s) // 2
        e = trial(lo_s, mid - lo_s, mid - lo_s)
        if e is None:
            cut = True
            break
        if e.differs:
            hi_s, last = mid, e
        else:
            lo_s = mid
    if cut:
        return result(
            f"steps {lo_s} .. {hi_s - 1} of the task {a} .. {z - 1} (search cut short)", None, (a, z), last, True
        )
    one = trial(lo_s, 1, 1) if (last.start, last.steps) != (lo_s, 1) else last
    if one is None:
        return result(f"step {lo_s} (search cut short before its one-step run)", lo_s, (a, z), last, True)
    if not one.differs:
        return result(
            f"steps {lo_s} .. {hi_s - 1}: as one task they differ and step {lo_s} alone does not "
            f"(the fault needs a task of {hi_s - lo_s} steps)",
            None,
            (a, z),
            last,
            False,
        )
    return result(_step_text(lo_s, one), lo_s, (a, z), one, False)


def _step_text(step: int, one: Experiment) -> str:
    """What a one-step experiment that differs showed, in words."""
    head = f"step {step}: its run from meshnb's page (one step, STEPS_PER_TASK 1)"
    if one.what.startswith("trace: step"):
        return f"{head} applies other sums ({one.what.split('(', 1)[1]}"
    what = one.what.split(": ", 1)[1] if one.what.startswith("system") else one.what
    if "first " in what:
        return f"{head} writes {what.rsplit('first ', 1)[1]} wrong"
    return f"{head}: {what}"


def reference_runner(e: Experiment) -> Outputs:
    """meshnb as the executor of an experiment (for tests and examples): its pages and trace."""
    from .pack import run_case

    assert e.sub is not None
    r = run_case(e.sub, e.in_pages)
    return r.out_pages, r.trace


def model_runner(m: faults.Model) -> Runner:
    """An executor with fault model ``m`` (:func:`faults.run` from the experiment's pages)."""

    def run(e: Experiment) -> Outputs | str:
        return _predict(m, e)

    return run


def _predict(m: faults.Model, e: Experiment) -> tuple[list[bytes], np.ndarray]:
    assert e.sub is not None
    pages, trace = run_model(
        m, e.in_pages, e.steps, grouped=e.sub.grouped, set_lr=dict(e.sub.set_lr), steps_per_task=e.steps_per_task
    )
    return mark_timeouts(e.sub, pages), trace.reshape(-1, 5)


@dataclass(frozen=True)
class LrFrom(faults.Model):
    """An executor that reads its LR from page word ``word`` (:data:`LR_WORDS`) once a task; SET_LR still writes LR,
    every other op is mode Z's.
    """

    word: str = "STEPS_PER_TASK"


LR_WORDS = {"PARAMS[0]": 0, "PARAMS[1]": 1, "PARAMS[2]": 2, "PARAMS[3]": 3, "STEPS_PER_TASK": 5, "INV_BATCH": 6}
"""The page words around LR (SPEC 7: LR is word 4; an index off by one or a few) and their word indices."""


def lr_from() -> dict[str, LrFrom]:
    """The candidate causes "LR read from the wrong word": one for each word of :data:`LR_WORDS`."""
    return {
        f"LR read from {w}": LrFrom(f"LR read from {w}", f"LR read from the page word {w}, not LR", word=w)
        for w in LR_WORDS
    }


def _task_ends(steps: int, steps_per_task: int, set_lr: dict[int, int]) -> list[int]:
    """The steps at which the host's tasks end (STEPS_PER_TASK steps, a task ended early at a SET_LR)."""
    out, done = [], 0
    for stop in sorted({s for s in set_lr if 0 < s < steps} | {steps}):
        while done < stop:
            done = min(stop, done + max(1, steps_per_task))
            out.append(done)
    return out


def run_model(
    m: faults.Model,
    pages: list[bytes],
    steps: int,
    *,
    grouped: bool,
    set_lr: dict[int, int] | None = None,
    steps_per_task: int | None = None,
    independent: bool = False,
) -> tuple[list[bytes], np.ndarray]:
    """The pages and trace of :func:`faults.run` under model ``m``; an :class:`LrFrom` runs task by task, LR replaced
    by the word it reads and put back after (SET_LR's word where one was set).
    """
    if not isinstance(m, LrFrom):
        r = faults.run(pages, steps, grouped=grouped, set_lr=set_lr, m=m, independent=independent)
        return list(r.pages), np.asarray(r.trace, dtype=np.uint32)
    set_lr = set_lr or {}
    lr, at = _W["LR"], LR_WORDS[m.word]
    cur, traces, done = list(pages), [], 0
    for end in _task_ends(steps, steps_per_task or steps, set_lr):
        ws = [_words(p).copy() for p in cur]
        for w in ws:
            w[lr] = set_lr.get(done, w[lr])
        kept = [int(w[lr]) for w in ws]
        for w in ws:
            w[lr] = w[at]
        r = faults.run([w.astype("<u4").tobytes() for w in ws], end - done, grouped=grouped, independent=independent)
        cur = []
        for k, p in enumerate(r.pages):
            w = _words(p).copy()
            w[lr] = kept[k]
            cur.append(w.astype("<u4").tobytes())
        traces.append(np.asarray(r.trace, dtype=np.uint32))
        done = end
    if steps in set_lr:
        cur = [_with_word(p, lr, set_lr[steps]) for p in cur]
    return cur, np.concatenate(traces) if traces else np.zeros((0, 5), np.uint32)


def _with_word(page: bytes, word: int, value: int) -> bytes:
    b = bytearray(page)
    struct.pack_into("<I", b, 4 * word, value)
    return bytes(b)


SEPARATING = 8  # experiments of separating() (the probe pages first): each is an executor run
PROVE_STEPS = 512  # a candidate is replayed on the experiments of at most this many steps
SEPARATING_PAGES = (
    "subnormal-params",
    "nan-payload-param",
    "huge-lr",
    "subnormal-inv-batch",
    "subnormal-and-nan-samples",
    "overflow-then-inf-minus-inf",
)
"""Hard pages (besides the pack's probe pages) whose runs meet a flush, a NaN, an infinity or a huge product."""


def separating() -> list[Experiment]:
    """The experiments every candidate cause is held to besides a case's own: 4 steps from each of the pack's probe
    pages and :data:`SEPARATING_PAGES`.
    """
    from .pack import probe_pages, run_case

    out = []
    for name in [*probe_pages(), *SEPARATING_PAGES][:SEPARATING]:
        case = Case(f"separate-{name}", f"experiment: 4 steps from the page {name!r}", 4, 4, page=name)
        pages = [case.in_page()]
        r = run_case(case, pages)
        e = experiment(Setup(case, pages, r.out_pages, r.trace), 0, 4, case.steps_per_task)
        e.case["name"], e.case["about"] = case.name, case.about
        out.append(e)
    return out


def run_all(experiments: list[Experiment], run: Runner) -> None:
    """Runs the executor on each experiment not yet run, and compares."""
    for e in experiments:
        if e.got is None:
            e.got = run(e)
            _compare(e, e.got)


@dataclass
class Proof:
    """The candidate causes that reproduce the executor on every experiment, and those ruled out (by which)."""

    proved: list[str]
    ruled_out: dict[str, str]
    experiments: int

    def to_json(self) -> dict[str, Any]:
        return {"proved": self.proved, "ruled_out": self.ruled_out, "experiments": self.experiments}


def prove(candidates: dict[str, faults.Model], experiments: list[Experiment]) -> Proof:
    """Replays each candidate on every experiment run (of at most :data:`PROVE_STEPS` steps) and keeps those that give
    the executor's outputs on every one; none where no experiment differs.
    """
    tried = [e for e in experiments if e.steps <= PROVE_STEPS and e.got is not None and not isinstance(e.got, str)]
    keep, ruled = consistent(candidates, tried, ordered=False)
    proved = list(keep) if any(e.differs for e in tried) else []
    return Proof(proved, ruled, len(tried))


def prove_page(findings: list[str], experiments: list[Experiment]) -> list[str]:
    """The page transformations of ``findings`` (:func:`~.check.localise.localise_page`'s) that every differing
    experiment confirms on its first differing page; a page rule's only if it gives every experiment's outputs.
    """
    from .check.localise import localise_page

    tried = [e for e in experiments if e.steps and e.got is not None and not isinstance(e.got, str)]
    if not tried:
        return []
    rules = [f for f in findings if f in PAGE_RULES and all(_rule_agrees(page_predict, f, e) for e in tried)]
    findings = [f for f in findings if f not in PAGE_RULES]
    seen: list[set[str]] = []
    for e in tried:
        got = e.got
        assert got is not None and not isinstance(got, str) and e.sub is not None
        if not e.differs:
            continue
        k = next((i for i, (g, w) in enumerate(zip(got[0], e.expected, strict=False)) if g != w), None)
        if k is None:  # only the trace differs: no page transformation explains it
            return []
        setup = Setup(e.sub, e.in_pages, e.expected, e.trace if e.trace is not None else np.zeros((0, 5), np.uint32))
        seen.append({f.split(" (")[0] for f in localise_page(setup, k, got[0][k])["page"]})
    if not seen:
        return []
    return [f for f in findings if all(f.split(" (")[0] in s for s in seen)] + rules


def save(loc: Location, root: Path) -> list[Path]:
    """Writes every experiment of ``loc`` under ``root`` as a case directory that ``meshnb check`` replays."""
    out = []
    for e in loc.experiments:
        d = root / e.case["name"]
        d.mkdir(parents=True, exist_ok=True)
        (d / "case.json").write_text(json.dumps(e.case, indent=1, sort_keys=True) + "\n")
        for k, (i, o) in enumerate(zip(e.in_pages, e.expected, strict=True)):
            (d / f"in-{k}.page").write_bytes(i)
            (d / f"out-{k}.page").write_bytes(o)
        if e.trace is not None:
            (d / "trace.bin").write_bytes(np.ascontiguousarray(e.trace, dtype="<u4").tobytes())
        out.append(d)
    return out


# =============================================================================================
# Designed experiments: pages that separate the causes still consistent with what was seen
# =============================================================================================

DESIGN_RUNS = 6  # designed experiments (executor runs) a case's explanation may make
DESIGN_SECONDS = 8.0  # and seconds it may take (checked before each design)
DESIGN_RANDOM = 24  # random pages besides the structured ones, each design
DESIGN_AMONG = 48  # a design separates at most this many of the candidates left (every_cause order)

_SPECIAL = (
    (0x00000001, "the least subnormal"),
    (0x00400000, "a subnormal"),
    (0x80400000, "a negative subnormal"),
    (0x00800000, "the least normal"),
    (0x00800001, "one ulp above the least normal"),
    (0x1F800000, "2^-64: tiny products"),
    (0x5F800000, "2^64: huge products"),
    (0x7F000000, "2^127: overflow"),
    (0xFF7FFFFF, "the most negative finite"),
    (0x7F800000, "+inf"),
    (0x7FA00001, "a signalling NaN with a payload"),
    (0xFFC00001, "a negative quiet NaN with a payload"),
)
"""Words a designed page gives one param or LR: each meets a subnormal, an overflow or a NaN."""


def every_cause() -> dict[str, faults.Model]:
    """Every candidate cause of a step's bits: each fault model, each op of the step under each alternative rule
    (``single op OP:ALT``) and each :func:`lr_from`, without repeats (:func:`distinct`).
    """
    from .mutants import mutations

    out: dict[str, faults.Model] = {m.name: m for m in faults.MODELS}
    for mut in mutations():
        out[f"single op {mut.op}:{mut.alt}"] = faults.single_op(mut.op, mut.alt)
    return distinct({**out, **lr_from()})


def distinct(causes: dict[str, faults.Model]) -> dict[str, faults.Model]:
    """``causes`` without those whose assignment an earlier one has (the same computation under two names)."""
    seen: set[str] = set()
    out: dict[str, faults.Model] = {}
    for name, m in causes.items():
        key = repr(sorted((k, repr(v)) for k, v in m.assignment.items())) + (m.word if isinstance(m, LrFrom) else "")
        if key not in seen:
            seen.add(key)
            out[name] = m
    return out


def _agrees(m: faults.Model, e: Experiment) -> bool:
    """Whether model ``m`` gives the executor's outputs of ``e`` (its pages, and its trace where it wrote one)."""
    got = e.got
    assert got is not None and not isinstance(got, str)
    pages, trace = _predict(m, e)
    return pages == got[0] and (got[1] is None or np.array_equal(trace, got[1]))


def consistent(
    candidates: dict[str, faults.Model], experiments: list[Experiment], *, ordered: bool = True
) -> tuple[dict[str, faults.Model], dict[str, str]]:
    """The candidates that reproduce the executor on every experiment run (of at most :data:`PROVE_STEPS` steps),
    and the others with the first experiment (``ordered``: those that differ first, then the cheapest) against each.
    """
    tried = [e for e in experiments if e.steps <= PROVE_STEPS and e.got is not None and not isinstance(e.got, str)]
    if ordered:  # those that differ rule most out
        tried.sort(key=lambda e: (not e.differs, e.steps * len(e.in_pages)))
    keep: dict[str, faults.Model] = {}
    ruled: dict[str, str] = {}
    for name, m in candidates.items():
        bad = next((e for e in tried if not _agrees(m, e)), None)
        if bad is None:
            keep[name] = m
        else:
            ruled[name] = f"{bad.case['name']} ({bad.case['about']})"
    return keep, ruled


def variants(
    pages: list[bytes], rng: np.random.Generator, random: int = DESIGN_RANDOM
) -> list[tuple[str, list[bytes]]]:
    """Pages made from ``pages`` toward where an op meets a subnormal, a halfway case, an overflow or a NaN: a param
    or LR set to each of :data:`_SPECIAL`, params or samples scaled by powers of two, INV_BATCH extreme, and
    ``random`` pages of random params; each with what it changes, in words.
    """
    from meshnb.testing import pages as hard

    from .model import OFF_INV, OFF_LR, OFF_PARAMS, OFF_X, OFF_Y

    out: list[tuple[str, list[bytes]]] = []

    def put(what: str, off: int, ws: np.ndarray | list[int]) -> None:
        out.append((what, [hard.with_words(p, off, [int(w) for w in ws]) for p in pages]))

    def scaled(off: int, n: int, k: int) -> np.ndarray:
        with np.errstate(all="ignore"):
            v = np.frombuffer(pages[0], "<f4", n, off).astype(np.float64) * 2.0**k
            return v.astype(np.float32).view(np.uint32)

    params = np.frombuffer(pages[0], "<u4", 4, OFF_PARAMS).astype(np.uint32)
    for k in range(4):
        for w, why in _SPECIAL:
            new = params.copy()
            new[k] = w
            put(f"PARAMS[{k}] = {w:08x} ({why})", OFF_PARAMS, new)
    for w, why in _SPECIAL:
        put(f"LR = {w:08x} ({why})", OFF_LR, [w])
    for k in (-149, -140, -130, -126, -120, -64, 32, 64, 100, 120):
        put(f"PARAMS times 2^{k}", OFF_PARAMS, scaled(OFF_PARAMS, 4, k))
    for k in (-149, -130, -126, -100):
        put(f"X times 2^{k}", OFF_X, scaled(OFF_X, 256, k))
        put(f"Y times 2^{k}", OFF_Y, scaled(OFF_Y, 256, k))
    for k in (-126, -130, -140):  # params 0: pred 0, e = -y tiny (a subnormal difference, or one flushed)
        put(f"PARAMS 0, Y times 2^{k}", OFF_Y, scaled(OFF_Y, 256, k))
        out[-1] = (out[-1][0], [hard.with_words(p, OFF_PARAMS, [0] * 4) for p in out[-1][1]])
    for w, why in ((0x00000001, "the least subnormal"), (0x00800000, "the least normal"), (0x7F000000, "2^127")):
        put(f"INV_BATCH = {w:08x} ({why})", OFF_INV, [w])
    # e = -y at the least normal, x one or two ulps below 1: e*x is tiny before rounding, and on the
    # samples of one parity rounds to the least normal (tininess before and after rounding part)
    for par in (0, 1):
        xs = [0x3F7FFFFF if i % 2 == par else 0x3F7FFFFE for i in range(256)]
        ys = [0x80800000 if i % 2 == par else 0x80800001 for i in range(256)]
        put(f"X 1 - 2^-24 or 1 - 2^-23, Y near -2^-126, PARAMS 0 (parity {par})", OFF_X, xs)
        out[-1] = (
            out[-1][0],
            [hard.with_words(hard.with_words(p, OFF_Y, ys), OFF_PARAMS, [0] * 4) for p in out[-1][1]],
        )
    for i in range(random):
        if i % 2 == 0:
            sign = rng.integers(0, 2, 4, dtype=np.uint32) << 31
            exp = rng.integers(0, 255, 4, dtype=np.uint32) << 23
            ws = sign | exp | rng.integers(0, 1 << 23, 4, dtype=np.uint32)
            put("PARAMS = " + " ".join(f"{w:08x}" for w in ws) + " (random)", OFF_PARAMS, ws)
        else:
            near = params ^ rng.integers(0, 1 << 16, 4, dtype=np.uint32)
            put("PARAMS = " + " ".join(f"{w:08x}" for w in near) + " (low mantissa bits random)", OFF_PARAMS, near)
    return out


def _outcomes(cands: dict[str, faults.Model], made: list[tuple[str, list[bytes]]], grouped: bool) -> list[list[bytes]]:
    """For each page of ``made``, each candidate's outputs of one step from it, as one key a candidate."""
    n = len(made[0][1])
    keys: list[list[bytes]] = [[] for _ in made]
    for m in cands.values():
        if n == 1 and not grouped:  # every page side by side: one run a candidate
            pages, trace = run_model(m, [pg[0] for _, pg in made], 1, grouped=False, independent=True)
            for i in range(len(made)):
                keys[i].append(pages[i] + trace[0, i].tobytes())
        else:
            for i, (_, pg) in enumerate(made):
                pages, trace = run_model(m, pg, 1, grouped=grouped)
                keys[i].append(b"".join(pages) + trace.tobytes())
    return keys


_STRUCTURED = 5 * len(_SPECIAL) + 10 + 8 + 3 + 3 + 2  # the pages of variants() besides the random ones


def _random(survivors: int) -> int:
    """The random pages a design tries among ``survivors`` candidates (fewer among many: each costs a run of each)."""
    return DESIGN_RANDOM if survivors <= 16 else 4


def design(
    cands: dict[str, faults.Model], base: Experiment, rng: np.random.Generator | None = None
) -> tuple[str, list[bytes], int] | None:
    """The page of :func:`variants` of ``base``'s pages on which one step splits the candidates into the most classes
    (ties: the smallest largest class): what it changes, its pages and the classes; None if no page parts two.
    """
    assert base.sub is not None
    rng = rng if rng is not None else np.random.default_rng(0)
    made = variants(base.in_pages, rng, _random(len(cands)))
    with np.errstate(all="ignore"):  # infinities and NaNs are what these pages are for
        keys = _outcomes(cands, made, base.sub.grouped)
    best: tuple[int, int, int] | None = None
    for i, k in enumerate(keys):
        counts: dict[bytes, int] = {}
        for v in k:
            counts[v] = counts.get(v, 0) + 1
        score = (len(counts), -max(counts.values()), -i)
        if best is None or score > best:
            best = score
    if best is None or best[0] < 2:
        return None
    i = -best[2]
    return made[i][0], made[i][1], best[0]


def designed(base: Experiment, what: str, pages: list[bytes], index: int) -> Experiment:
    """The one-step experiment (STEPS_PER_TASK 1) from ``pages``, ``base``'s pages changed as ``what`` says."""
    return _one_step(base, "design", what, pages, index)


def _one_step(base: Experiment, kind: str, what: str, pages: list[bytes], index: int, **words: int) -> Experiment:
    """The designed experiment ``{case}-{kind}-{index}``: one step (no SET_LR, call or timeout) from ``pages`` with
    header ``words`` set (then its step base is the first page's, else ``base``'s), and meshnb's answer.
    """
    from .pack import run_case

    assert base.sub is not None
    ins = []
    for pg in pages:
        b = bytearray(pg)
        for name, value in words.items():
            struct.pack_into("<I", b, 4 * _W[name], value)
        struct.pack_into("<I", b, _SPT, 1)
        ins.append(bytes(b))
    first = _words(ins[0])
    step_base = int(first[_W["STEP_HI"]]) << 32 | int(first[_W["NEXT_STEP"]]) if words else base.sub.step_base
    sub = replace(
        base.sub,
        name=f"{base.sub.name}-{kind}-{index}",
        about=f"designed experiment: one step from meshnb's page before step {base.start}, {what}",
        steps=1,
        quick_steps=1,
        steps_per_task=1,
        set_lr=(),
        calls=(),
        timeouts=(),
        page="experiment",
        step_base=step_base,
    )
    r = run_case(sub, ins)
    return Experiment(
        base.start, 1, 1, case=case_json(sub), sub=sub, in_pages=ins, expected=list(r.out_pages), trace=r.trace
    )


@dataclass
class Explanation:
    """What the designed experiments left: ``verdict`` "proved" (one candidate reproduces every experiment),
    "equivalent" (several, alike on every page tried), "none", or "cut short" (by the bound); the survivors,
    those ruled out (each with the experiment) and the designed experiments.
    """

    verdict: str
    survivors: list[str]
    ruled_out: dict[str, str]
    candidates: int
    designed: list[Experiment]
    pages_tried: int
    seconds: float
    note: str = ""  # said after the sentence (the candidates a designed page ruled out, where told)

    def sentence(self) -> str:
        """The result in words (the CI line's)."""
        note = f" ({self.note})" if self.note else ""
        if self.verdict == "proved":
            return f"cause proved by experiment: {self.survivors[0]}{note}"
        if self.verdict == "equivalent":
            return f"cause one of {', '.join(self.survivors)} (equivalent on the {self.pages_tried} pages tried){note}"
        if self.verdict == "none":
            return f"none of these: no candidate cause of {self.candidates} reproduces every experiment{note}"
        return f"{len(self.survivors)} candidate causes left when the bound ended the search{note}"

    def to_json(self) -> dict[str, Any]:
        return {
            "verdict": self.verdict,
            "sentence": self.sentence(),
            "survivors": self.survivors,
            "candidates": self.candidates,
            "ruled_out": len(self.ruled_out),
            "runs": len(self.designed),
            "pages_tried": self.pages_tried,
            "seconds": round(self.seconds, 3),
            "experiments": [{**e.to_json(), "name": e.case["name"], "about": e.case["about"]} for e in self.designed],
        }


def explain(
    candidates: dict[str, faults.Model],
    seen: list[Experiment],
    run: Runner,
    base: Experiment,
    *,
    max_runs: int = DESIGN_RUNS,
    max_seconds: float | None = None,
    seed: int = 0,
) -> Explanation:
    """Keeps the candidates consistent with every experiment ``seen``, then, while two or more are left and the
    bound allows, runs the executor one step from a page that parts them (:func:`design` from ``base``'s pages),
    dropping every candidate the result contradicts.
    """
    max_seconds = DESIGN_SECONDS if max_seconds is None else max_seconds  # read at the call: a test may lift it
    t0 = time.monotonic()
    rng = np.random.default_rng(seed)
    left, ruled = consistent(candidates, seen)
    made: list[Experiment] = []
    tried = 0
    cut = False
    while len(left) > 1:
        if len(made) >= max_runs or time.monotonic() - t0 > max_seconds:
            cut = True
            break
        some = dict(list(left.items())[:DESIGN_AMONG])  # a design's cost grows with the candidates it predicts
        tried += _STRUCTURED + _random(len(some))
        d = design(some, base, rng)
        if d is None:
            break
        e = designed(base, d[0], d[1], len(made) + 1)
        e.got = run(e)
        _compare(e, e.got)
        made.append(e)
        if isinstance(e.got, str):  # no outputs: every candidate gives some
            ruled.update(dict.fromkeys(left, f"{e.case['name']} ({e.got})"))
            left = {}
            break
        left, out = consistent(left, [e])
        ruled.update(out)
    verdict = "proved" if len(left) == 1 else "none" if not left else "cut short" if cut else "equivalent"
    pages = len({id(e) for e in seen}) + tried
    return Explanation(verdict, sorted(left), ruled, len(candidates), made, pages, time.monotonic() - t0)


def save_all(experiments: list[Experiment], root: Path) -> list[Path]:
    """Writes each experiment as a case directory under ``root`` (see :func:`save`); the directories."""
    loc = Location("", None, None, [], [], experiments, 0.0, False)
    return save(loc, root)


# =============================================================================================
# Header rules: a page word written otherwise, separated by start headers
# =============================================================================================

_W = {"LR": 4, "NEXT_STEP": 7, "ERR": 8, "PENDING": 9, "ROUND": 10, "STEP_HI": 11}  # SPEC 7's header words (u32 index)


def _words(page: bytes) -> np.ndarray:
    return np.frombuffer(page, dtype="<u4").astype(np.uint32)


def _step_hi_kept(i: np.ndarray, o: np.ndarray) -> None:  # a 32-bit step counter
    o[_W["STEP_HI"]] = i[_W["STEP_HI"]]


def _counter16(i: np.ndarray, o: np.ndarray) -> None:  # the step counter in 16 bits
    o[_W["NEXT_STEP"]] = o[_W["NEXT_STEP"]] & 0xFFFF
    o[_W["STEP_HI"]] = i[_W["STEP_HI"]]


def _counter_off(d: int) -> Callable[[np.ndarray, np.ndarray], None]:
    def f(i: np.ndarray, o: np.ndarray) -> None:
        n = ((int(o[_W["STEP_HI"]]) << 32 | int(o[_W["NEXT_STEP"]])) + d) % (1 << 64)
        o[_W["STEP_HI"]], o[_W["NEXT_STEP"]] = n >> 32, n & 0xFFFFFFFF

    return f


def _kept(word: str) -> Callable[[np.ndarray, np.ndarray], None]:
    def f(i: np.ndarray, o: np.ndarray) -> None:
        o[_W[word]] = i[_W[word]]

    return f


def _cleared(word: str) -> Callable[[np.ndarray, np.ndarray], None]:
    def f(i: np.ndarray, o: np.ndarray) -> None:
        o[_W[word]] = 0

    return f


def _round_off(i: np.ndarray, o: np.ndarray) -> None:  # a timed-out round written as its step
    if o[_W["ROUND"]] != i[_W["ROUND"]]:
        o[_W["ROUND"]] = (int(o[_W["ROUND"]]) - 1) & 0xFFFFFFFF


HEADER_RULES: dict[str, tuple[str, Callable[[np.ndarray, np.ndarray], None]]] = {
    "header: STEP_HI not carried": ("a 32-bit step counter: STEP_HI never moves", _step_hi_kept),
    "header: a 16-bit step counter": ("NEXT_STEP kept in 16 bits, STEP_HI never moves", _counter16),
    "header: the step counter off by +1": ("STEP_HI:NEXT_STEP one past the next step", _counter_off(1)),
    "header: the step counter off by -1": ("STEP_HI:NEXT_STEP the last step done", _counter_off(-1)),
    "header: ERR not written": ("a TASK leaves ERR as it found it", _kept("ERR")),
    "header: PENDING not cleared": ("a TASK leaves PENDING as it found it", _kept("PENDING")),
    "header: ROUND cleared": ("a TASK writes ROUND 0 (SPEC 8: never cleared)", _cleared("ROUND")),
    "header: ROUND not written on a timeout": ("a timed-out TASK leaves ROUND as it found it", _kept("ROUND")),
    "header: ROUND the step, not its round": ("a timed-out TASK writes ROUND = the step, not the step + 1", _round_off),
}
"""Ways a TASK can write SPEC 8's header words otherwise (the sums and every other word kept): name ->
(what the executor does, the change of meshnb's out page given the in page's words)."""


def header_predict(rule: str, e: Experiment) -> list[bytes]:
    """The out pages of ``e`` by an executor that follows header rule ``rule`` (a run of one task)."""
    change = HEADER_RULES[rule][1]
    out = []
    for pin, pout in zip(e.in_pages, e.expected, strict=True):
        i, o = _words(pin), _words(pout).copy()
        change(i, o)
        out.append(o.astype("<u4").tobytes())
    return out


def _rule_agrees(predict: Predict, rule: str, e: Experiment) -> bool:
    """Whether an executor following header or page rule ``rule`` (its pages by ``predict``) gives ``e``'s outputs."""
    got = e.got
    assert got is not None and not isinstance(got, str)
    if got[1] is not None and e.trace is not None and not np.array_equal(got[1], e.trace):
        return False  # a header or page rule changes no sums
    return predict(rule, e) == got[0]


def _rules_kept(rules: Iterable[str], predict: Predict, tried: list[Experiment]) -> tuple[list[str], dict[str, str]]:
    """The ``rules`` that give every experiment ``tried``'s outputs, and for each other the first experiment
    against it; none is kept where no experiment differs.
    """
    differs = any(e.differs for e in tried)
    left = [r for r in rules if differs and all(_rule_agrees(predict, r, e) for e in tried)]
    first = {r: next((e for e in tried if not _rule_agrees(predict, r, e)), None) for r in rules if r not in left}
    ruled = {r: f"{e.case['name']} ({e.case['about']})" if e else "no difference" for r, e in first.items()}
    return left, ruled


def _run_designed(e: Experiment, run: Runner, left: list[str], ruled: dict[str, str], predict: Predict) -> list[str]:
    """Runs designed experiment ``e`` and drops from ``left`` every rule its result contradicts (each where the
    executor failed), saying why in ``ruled``; returns those dropped.
    """
    e.got = run(e)
    _compare(e, e.got)
    if isinstance(e.got, str):
        gone, why = list(left), f"{e.case['name']} ({e.got})"
    else:
        gone, why = [r for r in left if not _rule_agrees(predict, r, e)], f"{e.case['name']} ({e.case['about']})"
    for r in gone:
        left.remove(r)
        ruled[r] = why
    return gone


HEADER_STARTS: tuple[tuple[str, dict[str, int]], ...] = (
    ("the step 2^32 - 1 (STEP_HI carried after it)", {"STEP_HI": 0, "NEXT_STEP": 0xFFFFFFFF}),
    ("the step 2^16 - 1 (a 16-bit counter's carry)", {"STEP_HI": 0, "NEXT_STEP": 0xFFFF}),
    ("ERR 1, PENDING 1 and another step's ROUND", {"ERR": 1, "PENDING": 1, "ROUND": 0xDEADBEEF}),
    ("the step 2^33 + 5, ERR 1", {"STEP_HI": 2, "NEXT_STEP": 5, "ERR": 1}),
)
"""Start headers of the designed experiments for header rules: each exercises a state rule of SPEC 8."""


def _explain_rules(
    rules: dict[str, Any],
    predict: Predict,
    kind: str,
    tried: list[Experiment],
    starts: list[tuple[str, dict[str, int]]],
    split: Callable[[list[str], str, dict[str, int]], int],
    run: Runner,
    base: Experiment,
    bound: tuple[int, float | None],
    note: str = "",
) -> Explanation:
    """Keeps the ``rules`` that give every experiment ``tried``'s outputs, then, while two or more are left and
    the bound (runs, seconds: :data:`DESIGN_SECONDS` when None, read at the call) allows, runs the executor one
    step from ``base``'s pages with the start header of ``starts`` that ``split``s the survivors into the most
    classes, dropping every rule its result contradicts. ``note``: what the rules ruled out by a designed page
    (with outputs) are said as."""
    t0 = time.monotonic()
    max_runs, max_seconds = bound[0], DESIGN_SECONDS if bound[1] is None else bound[1]
    left, ruled = _rules_kept(rules, predict, tried)
    made: list[Experiment] = []
    separated: list[str] = []
    cut = False
    while len(left) > 1 and starts:
        if len(made) >= max_runs or time.monotonic() - t0 > max_seconds:
            cut = True
            break
        classes = [split(left, what, words) for what, words in starts]
        j = int(np.argmax(classes))
        if classes[j] < 2:
            break
        what, words = starts.pop(j)
        e = _one_step(base, kind, what, base.in_pages, len(made) + 1, **words)
        gone = _run_designed(e, run, left, ruled, predict)
        made.append(e)
        if not isinstance(e.got, str):
            separated += gone
    verdict = "proved" if len(left) == 1 else "none" if not left else "cut short" if cut else "equivalent"
    said = f"{note}: {', '.join(separated)}" if note and separated else ""
    pages = len(tried) + len(made)
    return Explanation(verdict, sorted(left), ruled, len(rules), made, pages, time.monotonic() - t0, said)


def _outputs(rules: list[str], predict: Predict, e: Experiment) -> int:
    """How many classes of outputs the ``rules`` give on experiment ``e``."""
    return len({b"".join(predict(r, e)) for r in rules})


def explain_header(
    seen: list[Experiment],
    run: Runner,
    base: Experiment,
    *,
    max_runs: int = DESIGN_RUNS,
    max_seconds: float | None = None,
) -> Explanation:
    """Where only page words differ: keeps the header rules (:data:`HEADER_RULES`) that give the executor's outputs
    on every one-task experiment ``seen``, then parts the survivors by start headers (:data:`HEADER_STARTS`).
    """
    tried = [e for e in seen if e.got is not None and not isinstance(e.got, str) and e.sub is not None]
    tried = [e for e in tried if e.sub is not None and e.steps <= e.steps_per_task and not e.sub.timeouts]  # one task

    def split(left: list[str], what: str, words: dict[str, int]) -> int:
        return _outputs(left, header_predict, _one_step(base, "header", what, base.in_pages, 0, **words))

    starts = list(HEADER_STARTS)
    return _explain_rules(
        HEADER_RULES, header_predict, "header", tried, starts, split, run, base, (max_runs, max_seconds)
    )


# =============================================================================================
# Page rules: the loss of a step written at another word, separated by start steps
# =============================================================================================

_LOSS, _RING = 2112 // 4, 256  # SPEC 7: LOSS's first word, and the ring's length


def _shift(s: int) -> Callable[[np.ndarray], np.ndarray]:
    return lambda r: _LOSS + (r + s) % _RING


PAGE_RULES: dict[str, tuple[str, Callable[[np.ndarray], np.ndarray]]] = {
    **{
        f"LOSS: the loss of step t written at LOSS[(t + {s}) mod 256]": ("a ring index shifted", _shift(s))
        for s in range(1, _RING)
    },
    "LOSS: the loss of step t written at LOSS[t mod 256 + 1] (a step 255 mod 256 writes past the ring)": (
        "the index wrapped before the + 1: LOSS[0] never written, the word after the ring written instead",
        lambda r: _LOSS + r % _RING + 1,
    ),
    "LOSS: the loss of step t written at LOSS[t mod 128] (a ring of 128)": (
        "the ring taken as 128 words long",
        lambda r: _LOSS + r % 128,
    ),
}
"""Ways a TASK can write a step's loss at another page word (the sums, the loss and every other word
kept): name -> (what the executor does, the page word of the loss of step t given ``t mod 256``). The
shifts' names are :func:`~.check.localise.localise_page`'s findings."""


def page_predict(rule: str, e: Experiment) -> list[bytes]:
    """The out pages of ``e`` by an executor that follows page rule ``rule``: each step's loss (meshnb's) written
    where the rule says, on the in page's ring.
    """
    where = PAGE_RULES[rule][1]
    out = []
    for pin, pout in zip(e.in_pages, e.expected, strict=True):
        i, want = _words(pin), _words(pout)
        o = want.copy()
        o[_LOSS : _LOSS + _RING] = i[_LOSS : _LOSS + _RING]
        first = (int(i[_W["STEP_HI"]]) << 32 | int(i[_W["NEXT_STEP"]])) % _RING
        r = first + np.arange(max(0, e.steps - _RING), e.steps, dtype=np.int64)  # the steps whose loss is kept
        at = where(r)
        last = len(at) - 1 - np.unique(at[::-1], return_index=True)[1]  # the last write to each word
        o[at[last]] = want[_LOSS + r[last] % _RING]
        out.append(o.astype("<u4").tobytes())
    return out


PAGE_STARTS = (255, 0, 127, 128, 1, 254, 129, 126)
"""The residues ``t mod 256`` of the start steps of the designed experiments for page rules (each NEXT_STEP's
low byte set to one): a ring's ends and middle, where an index wrapped otherwise writes elsewhere."""


def explain_page(
    seen: list[Experiment],
    run: Runner,
    base: Experiment,
    *,
    max_runs: int = DESIGN_RUNS,
    max_seconds: float | None = None,
) -> Explanation:
    """Where only page words differ: keeps the page rules (:data:`PAGE_RULES`) that give the executor's outputs on
    every experiment ``seen``, then parts the survivors by start steps (:data:`PAGE_STARTS`).
    """
    tried = [e for e in seen if e.got is not None and not isinstance(e.got, str) and e.sub is not None]
    first = _words(base.in_pages[0])
    step, high = int(first[_W["NEXT_STEP"]]) & ~0xFF, int(first[_W["STEP_HI"]]) << 32
    # one step from residue r: a rule's outcome is the word it writes; a start at 2^64 - 1 runs no step (its
    # round would wrap to 0: SPEC): never designed
    starts = [
        (f"NEXT_STEP's low byte {r} (t mod 256 = {r})", {"NEXT_STEP": step | r})
        for r in PAGE_STARTS
        if high | step | r <= (1 << 64) - 2
    ]

    def split(left: list[str], what: str, words: dict[str, int]) -> int:
        return len({int(PAGE_RULES[x][1](np.array([words["NEXT_STEP"] & 0xFF]))[0]) for x in left})

    bound = (max_runs, max_seconds)
    return _explain_rules(
        PAGE_RULES, page_predict, "page", tried, starts, split, run, base, bound, "ruled out by a designed page"
    )
