"""Where the bits part, seen by running the executor: experiments from meshnb's own pages.

A page is a system's whole state at a task boundary (SPEC 7), so the executor can be started from
meshnb's page after any step ``s`` of a case and run for ``n`` steps; if its pages (and trace) after
them equal meshnb's, those steps are right, whatever the executor did before in the case.
:func:`locate` bisects the case this way: first over the case's own tasks (each experiment runs
whole tasks of the case, as its host does), then inside the first task that differs with
STEPS_PER_TASK set to the experiment's count, down to one step run as a one-step task. What it
reports was seen in an experiment, not inferred: the first task and step whose run from meshnb's
state gives other bits, which words of the page or sums of the trace that step writes wrong, or
that the executor's ``init`` (a case from init that passes when started from meshnb's page at step
0) or its state kept between tasks (a span that differs while every part of it alone does not) is
where the bits part.

Every experiment is a case directory (``case.json``, ``in-K.page`` and meshnb's ``out-K.page`` and
``trace.bin``) that ``meshnb check`` replays; :func:`save` writes them. The search is bounded by
:data:`MAX_RUNS` executor runs and :data:`MAX_SECONDS` a case.
"""

from __future__ import annotations

import json
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from . import faults
from .check.cases import Setup, reference_state
from .check.compare import first_trace_diff, page_diff
from .pack import Case, case_json

MAX_RUNS = 14  # executor runs a case's search may make
MAX_SECONDS = 10.0  # and seconds it may take (checked before each run)

Outputs = tuple[list[bytes], np.ndarray | None]
Runner = Callable[["Experiment"], "Outputs | str"]
"""Runs the executor on an experiment (its ``case`` document and ``in_pages``) -> its out pages and
trace (None if it wrote none), or why it gave no outputs (an error)."""

_SPT, _NEXT, _STEP_HI = 20, 28, 44


@dataclass
class Experiment:
    """One run of the executor from meshnb's page after ``start`` steps of the case: ``steps`` steps,
    STEPS_PER_TASK ``steps_per_task``; whether its outputs differed from meshnb's, and how."""

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
    """The steps of the case at which a task starts, and its end: the host's tasks (STEPS_PER_TASK
    steps, a task ended early at a SET_LR), as the pack's ``host`` says.

    Examples
    --------
    >>> from meshnb.conformance.experiment import boundaries
    >>> from meshnb.conformance.pack import Case
    >>> boundaries(Case("c", "", 10, steps_per_task=4, set_lr=((6, 0x3F000000),)))
    [0, 4, 6, 10]
    """
    out, done = [0], 0
    stops = sorted({s for s, _ in case.set_lr if 0 < s < case.steps} | {case.steps})
    for stop in stops:
        while done < stop:
            done = min(stop, done + case.steps_per_task)
            out.append(done)
    return out


def experiment(setup: Setup, start: int, steps: int, steps_per_task: int) -> Experiment:
    """The experiment that runs steps ``start`` .. ``start + steps`` of the case from meshnb's pages
    after ``start`` steps, with its case.json and meshnb's answer."""
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
    """Whether the executor's outputs differ from meshnb's: the trace first (a step's sums are made
    before the page's words of that step), then the pages."""
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
    max_seconds: float = MAX_SECONDS,
) -> Location:
    """Bisects the case by running the executor from meshnb's pages (see the module's docstring).

    With ``hint`` (the step where the executor's trace first differs), step ``hint`` is run alone
    first, as a one-step task from meshnb's page: if it differs, that is the location (one run).

    Examples
    --------
    An executor whose task that runs absolute step 137 writes a wrong word of PARAMS (meshnb's run
    otherwise), in a case of 200 steps:

    >>> from meshnb.conformance.check import setup_from_run
    >>> from meshnb.conformance.experiment import locate, reference_runner
    >>> from meshnb.testing.reference import init_page
    >>> setup = setup_from_run(init_page(), 200)
    >>> def faulty(e):
    ...     pages, trace = reference_runner(e)
    ...     first = int(e.case["step_base"])
    ...     if first <= 137 < first + e.steps:
    ...         pages = [bytes([pages[0][0] ^ 1]) + pages[0][1:]]
    ...     return pages, trace
    >>> loc = locate(setup, faulty)
    >>> print(loc.where)
    step 137: its run from meshnb's page (one step, STEPS_PER_TASK 1) writes PARAMS[0] wrong
    >>> len(loc.experiments), loc.task
    (11, (128, 192))
    """
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
    r = faults.run(e.in_pages, e.steps, grouped=e.sub.grouped, set_lr=dict(e.sub.set_lr), m=m)
    return list(r.pages), np.asarray(r.trace, dtype=np.uint32).reshape(-1, 5)


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
    """The experiments every candidate cause is held to besides a case's own: 4 steps from each of
    the pack's probe pages (:func:`meshnb.conformance.pack.probe_pages`) and
    :data:`SEPARATING_PAGES`, each a case directory (:func:`save`)."""
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
    """Which candidate causes survived every experiment (``proved``: each reproduces the executor's
    outputs on every one, so they give the same bits on each), which were ruled out and by which."""

    proved: list[str]
    ruled_out: dict[str, str]
    experiments: int

    def to_json(self) -> dict[str, Any]:
        return {"proved": self.proved, "ruled_out": self.ruled_out, "experiments": self.experiments}


def prove(candidates: dict[str, faults.Model], experiments: list[Experiment]) -> Proof:
    """Replays each candidate on every experiment the executor ran (of at most :data:`PROVE_STEPS`
    steps) and keeps those whose outputs are the executor's on every one; none is kept when no
    experiment showed a difference (nothing a cause must explain was seen).

    Examples
    --------
    >>> from meshnb.conformance import faults
    >>> from meshnb.conformance.experiment import model_runner, prove, run_all, separating
    >>> tries = separating()
    >>> run_all(tries, model_runner(faults.model("x86-ftz")))  # the executor: x86's FTZ
    >>> cands = {n: faults.model(n) for n in ("x86-ftz", "ftz-before-rounding", "gradual-underflow")}
    >>> proof = prove(cands, tries)
    >>> proof.proved, sorted(proof.ruled_out)
    (['x86-ftz'], ['ftz-before-rounding', 'gradual-underflow'])
    """
    tried = [e for e in experiments if e.steps <= PROVE_STEPS and e.got is not None and not isinstance(e.got, str)]
    proved, ruled = [], {}
    for name, m in candidates.items():
        why = ""
        for e in tried:
            pages, trace = _predict(m, e)
            got = e.got
            assert got is not None and not isinstance(got, str)
            got_pages, got_trace = got
            if pages != got_pages or (got_trace is not None and not np.array_equal(trace, got_trace)):
                why = f"{e.case['name']} ({e.case['about']})"
                break
        if why:
            ruled[name] = why
        else:
            proved.append(name)
    if not any(e.differs for e in tried):
        proved = []
    return Proof(proved, ruled, len(tried))


def prove_page(findings: list[str], experiments: list[Experiment]) -> list[str]:
    """The page transformations of ``findings`` (:func:`~.check.localise.localise_page`'s words) that
    every experiment whose pages differ confirms: the same transformation (its words up to the first
    parenthesis) is found on its first differing page (none without such an experiment, or when one
    differs in its trace only)."""
    from .check.localise import localise_page

    tried = [e for e in experiments if e.steps and e.got is not None and not isinstance(e.got, str)]
    if not tried:
        return []
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
    return [f for f in findings if all(f.split(" (")[0] in s for s in seen)]


def save(loc: Location, root: Path) -> list[Path]:
    """Writes every experiment of ``loc`` as a case directory under ``root`` (``case.json``,
    ``in-K.page``, meshnb's ``out-K.page`` and ``trace.bin``) that ``meshnb check`` replays; the
    directories."""
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
