"""Locating by experiment (issue 47 items 1 and 3): the executor is run from meshnb's pages, and a cause
is named only when it reproduces the executor's outputs on every experiment."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from meshnb.conformance import check, experiment, faults, mutants, pack, suite
from meshnb.conformance.check import setup_from_run
from meshnb.testing.reference import init_page
from tests.conformance.executors import EXECUTORS, build, command

HERE = Path(__file__).resolve().parent


def _faulty_at(step: int, word: int = 0) -> experiment.Runner:
    """meshnb's run, except that the task that runs absolute step ``step`` flips a bit of page word ``word``."""

    def run(e: experiment.Experiment) -> experiment.Outputs:
        pages, trace = experiment.reference_runner(e)
        first = int(e.case["step_base"])
        if first <= step < first + e.steps:
            b = bytearray(pages[0])
            b[4 * word] ^= 1
            pages = [bytes(b)]
        return pages, trace

    return run


@pytest.mark.parametrize(("step", "word", "field"), [(0, 0, "PARAMS[0]"), (150, 10, "ROUND"), (199, 600, "LOSS")])
def test_locate_finds_the_step_and_the_word_by_running_the_executor(step: int, word: int, field: str) -> None:
    setup = setup_from_run(init_page(), 200)
    loc = experiment.locate(setup, _faulty_at(step, word))
    assert loc.step == step and loc.words and loc.words[0].startswith(field), loc.where
    assert len(loc.experiments) <= experiment.MAX_RUNS and not loc.cut_short
    assert all(e.steps >= 1 for e in loc.experiments)


def test_locate_says_init_when_the_run_from_meshnbs_page_passes() -> None:
    setup = setup_from_run(init_page(), 64)
    loc = experiment.locate(setup, experiment.reference_runner)
    assert loc.step is None and loc.where.startswith("not reproduced")
    init_case = setup_from_run(init_page(), 64)
    init_case.case = init_case.case.__class__(**{**init_case.case.__dict__, "page": None})
    assert experiment.locate(init_case, experiment.reference_runner).where.startswith("init:")


def test_locate_is_bounded() -> None:
    setup = setup_from_run(init_page(), 4000)
    loc = experiment.locate(setup, _faulty_at(3999, 0), max_runs=3)
    assert len(loc.experiments) == 3 and loc.cut_short and loc.step is None


def test_the_experiments_are_cases_that_check_replays(tmp_path: Path) -> None:
    setup = setup_from_run(init_page(), 100)
    loc = experiment.locate(setup, _faulty_at(70, 0))
    dirs = experiment.save(loc, tmp_path)
    assert len(dirs) == len(loc.experiments)
    for d, e in zip(dirs, loc.experiments, strict=True):
        s = check.load_case(d, verify=False)  # no manifest: the case's own files
        assert s.expected == e.expected and json.loads((d / "case.json").read_text())["steps"] == e.steps
        got = e.got
        assert got is not None and not isinstance(got, str)
        assert check.check(s, got[0][0], got_trace=got[1]).verdict == ("FAIL" if e.differs else "PASS")


# single-op mutants as executors: the proved cause is the mutant, or one with the same bits on every page tried
SINGLE_OPS = [("e*x3", "fused"), ("e*e", "fused"), ("e", "round-up"), ("butterfly", "xor-ascending")]


@pytest.mark.parametrize(("op", "alt"), SINGLE_OPS, ids=[f"{o}:{a}" for o, a in SINGLE_OPS])
def test_a_single_op_mutant_is_proved_or_not_named(op: str, alt: str) -> None:
    assert (op, alt) in {(m.op, m.alt) for m in mutants.mutations()}
    _proved_or_not_named(op, alt)


EVERY = sorted({(m.op, m.alt) for m in mutants.mutations()})


@pytest.mark.slow
@pytest.mark.parametrize(("op", "alt"), EVERY, ids=[f"{o}:{a}" for o, a in EVERY])
def test_every_single_op_mutant_is_proved_or_not_named(op: str, alt: str) -> None:
    _proved_or_not_named(op, alt)


def _runs() -> list[check.Setup]:
    """init's run of 64 steps, then 16 steps from each page of the separating experiments."""
    pages = pack.start_pages()
    return [setup_from_run(init_page(), 64)] + [
        setup_from_run(pages[n], 16) for n in [*pack.probe_pages(), *experiment.SEPARATING_PAGES]
    ]


def _first_failing_run(truth: faults.Model) -> tuple[experiment.Runner, check.Setup, check.Report]:
    """The mutant ``truth`` as an executor, the first run of :func:`_runs` whose bits it changes, and
    check's report on it; the test is skipped where it changes none."""
    run = experiment.model_runner(truth)
    for setup in _runs():
        got = run(experiment.experiment(setup, 0, setup.case.steps, setup.case.steps_per_task))
        assert not isinstance(got, str)
        rep = check.check(setup, got[0][0], got_trace=got[1])
        if rep.verdict == "FAIL":
            return run, setup, rep
    pytest.skip("the mutant gives meshnb's bits on every run tried")


def _proved_or_not_named(op: str, alt: str) -> None:
    """The mutant as the executor of the first run of :func:`_runs` whose bits it changes: the check's
    candidates, the experiments, the proof; every proved cause gives the mutant's bits on every
    experiment, and the mutant itself, when a candidate, is proved."""
    truth = faults.single_op(op, alt)
    run, setup, rep = _first_failing_run(truth)
    res = suite.CaseResult("c", 1, "FAIL", report=rep)
    cands = suite._candidates(res)
    loc = experiment.locate(setup, run, hint=rep.trace["step"] if rep.trace else None)
    tries = experiment.separating()
    experiment.run_all(tries, run)
    proof = experiment.prove(cands, loc.experiments + tries)
    for name in proof.proved:  # each proved cause gives the mutant's bits on every experiment
        m = cands[name]
        for e in [*loc.experiments, *tries]:
            a, b = experiment._predict(m, e), experiment._predict(truth, e)
            assert a[0] == b[0] and np.array_equal(a[1], b[1]), (name, e.case["name"])
    if f"single op {op}:{alt}" in cands:
        assert f"single op {op}:{alt}" in proof.proved


@pytest.mark.slow
def test_an_executor_beyond_the_op_space_gets_no_wrong_cause(quick_pack: Path) -> None:
    """The f64 port (each step in float64, rounded where stored): the single-op changes of `e*e` that
    reproduce its first row are ruled out by experiment, and the line says where, not a cause."""
    cmd = command(EXECUTORS["f64-at-stores"], None)
    res = suite.run_suite(quick_pack, exec_cmd=cmd, cases="default").cases[0]
    assert res.verdict == "FAIL" and "; cause not proved (ruled out by experiment: single op e*e:" in res.message
    assert not res.models and "seen: step 0" in res.message
    dg = res.report.diagnosis if res.report else None
    assert dg is not None and not dg["localisation"]["found"] and dg["localisation"]["not_proved"]
    assert dg["experiment"]["location"]["step"] == 0 and dg["experiment"]["proof"]["ruled_out"]
    assert res.report is not None and "ruled out by experiment: single op e*e:" in res.report.text()


# designed experiments (issue 47 item 2): a page that separates the survivors, and the explanation
SEPARATE = [("gradual-underflow", "no-daz"), ("x86-ftz", "ftz-before-rounding"), ("nan-x86", "nan-arm")]


@pytest.mark.parametrize(("a", "b"), SEPARATE, ids=[f"{a}|{b}" for a, b in SEPARATE])
def test_a_designed_page_separates_two_candidates(a: str, b: str) -> None:
    """Two causes that give the same bits on one step of init's page: the designed page's step
    parts them, as the model predicts and as an executor of each (meshnb's check of it) shows."""
    base = experiment.experiment(setup_from_run(init_page(), 4), 0, 1, 1)
    ma, mb = faults.model(a), faults.model(b)
    d = experiment.design({a: ma, b: mb}, base)
    assert d is not None
    e = experiment.designed(base, d[0], d[1], 1)
    pa, pb = experiment._predict(ma, e), experiment._predict(mb, e)
    assert pa[0] != pb[0] or not np.array_equal(pa[1], pb[1]), d[0]
    # the executor with cause a keeps a and drops b
    e.got = experiment.model_runner(ma)(e)
    kept, ruled = experiment.consistent({a: ma, b: mb}, [e])
    assert list(kept) == [a] and list(ruled) == [b]


def test_the_explanation_says_equivalent_proved_or_none() -> None:
    run = experiment.model_runner(faults.single_op("*x'", "fused"))
    loc = experiment.locate(setup_from_run(init_page(), 64), run)
    assert loc.step is not None
    base = next(e for e in loc.experiments if (e.start, e.steps) == (loc.step, 1))
    causes = experiment.every_cause()
    ex = experiment.explain(causes, loc.experiments, run, base)
    # fused and computed in f64 into the next add: no page tried parts them
    assert ex.verdict in ("proved", "equivalent") and "single op *x':fused" in ex.survivors
    for e in ex.designed:
        assert all(experiment._agrees(causes[n], e) for n in ex.survivors)
    assert len(ex.designed) <= experiment.DESIGN_RUNS
    # an executor no candidate is: its step run from meshnb's page flips a bit of PARAMS[0]
    base = experiment.experiment(setup_from_run(init_page(), 4), 0, 1, 1)
    experiment.run_all([base], _faulty_at(0, 0))
    ex = experiment.explain(causes, [base], _faulty_at(0, 0), base)
    assert ex.verdict == "none" and ex.survivors == [] and "none of these" in ex.sentence()


def test_the_designed_experiments_are_cases_that_check_replays(tmp_path: Path) -> None:
    base = experiment.experiment(setup_from_run(init_page(), 4), 0, 1, 1)
    run = experiment.model_runner(faults.model("no-daz"))
    experiment.run_all([base], run)
    ex = experiment.explain({n: faults.model(n) for n in ("no-daz", "gradual-underflow")}, [base], run, base)
    assert ex.verdict == "proved" and ex.survivors == ["no-daz"] and ex.designed
    for d, e in zip(experiment.save_all(ex.designed, tmp_path), ex.designed, strict=True):
        s = check.load_case(d, verify=False)
        got = e.got
        assert got is not None and not isinstance(got, str)
        assert check.check(s, got[0][0], got_trace=got[1]).verdict == ("FAIL" if e.differs else "PASS")


EXPLAIN_SAMPLE = [("e*x3", "fused"), ("x3", "round-up"), ("*x'", "fused"), ("p - lr*g", "nan-arm"), ("e", "swapped")]


@pytest.mark.parametrize(("op", "alt"), EXPLAIN_SAMPLE, ids=[f"{o}:{a}" for o, a in EXPLAIN_SAMPLE])
def test_a_single_op_mutant_is_explained_by_designed_experiments(op: str, alt: str) -> None:
    _explained(op, alt)


@pytest.mark.slow
@pytest.mark.parametrize(("op", "alt"), EVERY, ids=[f"{o}:{a}" for o, a in EVERY])
def test_every_single_op_mutant_is_explained_by_designed_experiments(op: str, alt: str) -> None:
    _explained(op, alt)


def _explained(op: str, alt: str) -> None:
    """The mutant as the executor of the first run of :func:`_runs` whose bits it changes, located,
    then explained among every cause: the mutant survives, the verdict is "proved" (the mutant
    alone) or "equivalent" (each survivor gives the mutant's bits on every experiment, designed
    ones included), within the bound."""
    truth = faults.single_op(op, alt)
    run, setup, rep = _first_failing_run(truth)
    loc = experiment.locate(setup, run, hint=rep.trace["step"] if rep.trace else None)
    if loc.step is None:
        pytest.skip(f"not located at a step: {loc.where}")
    base = next(e for e in loc.experiments if (e.start, e.steps) == (loc.step, 1))
    tries = experiment.separating()
    experiment.run_all(tries, run)
    causes = experiment.every_cause()
    ex = experiment.explain(causes, loc.experiments + tries, run, base, max_seconds=60.0)
    name = next(n for n, m in causes.items() if m.assignment == truth.assignment)  # fma-apply for lr*g:fused
    assert name in ex.survivors and ex.verdict in ("proved", "equivalent"), (ex.verdict, ex.survivors)
    if ex.verdict == "proved":
        assert ex.survivors == [name]
    assert len(ex.designed) <= experiment.DESIGN_RUNS
    for n in ex.survivors:
        for e in [*loc.experiments, *tries, *ex.designed]:
            a, b = experiment._predict(causes[n], e), experiment._predict(truth, e)
            assert a[0] == b[0] and np.array_equal(a[1], b[1]), (n, e.case["name"])


@pytest.mark.slow
def test_check_keeps_the_experiments_and_replays_them(quick_pack: Path, tmp_path: Path) -> None:
    """`meshnb check PACK --exec CMD --experiments DIR`: the cause proved by designed experiments on the
    CI line, every experiment a case in DIR, and `check DIR --exec CMD --no-manifest` gives each the
    verdict the experiment saw."""
    import subprocess
    import sys

    cmd = f"{sys.executable} {HERE / 'fault_executor.py'} x86-ftz"
    keep = tmp_path / "exp"
    base = [sys.executable, "-m", "meshnb", "check"]
    r = subprocess.run(
        [*base, str(quick_pack), "--exec", cmd, "--cases", "probe-tininess", "--experiments", str(keep), "--json"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert r.returncode == 1, r.stderr
    case = json.loads(r.stdout)["cases"][0]
    assert case["message"].endswith("; cause proved by experiment: x86-ftz") and case["models"] == ["x86-ftz"]
    ex = case["report"]["diagnosis"]["experiment"]
    assert ex["explanation"]["verdict"] == "proved" and ex["explanation"]["candidates"] > 290
    made = sorted(p.name for p in keep.iterdir())
    assert any("-design-" in n for n in made) and any(n.startswith("separate-") for n in made)
    r = subprocess.run(
        [*base, str(keep), "--exec", cmd, "--no-manifest", "--json"], capture_output=True, text=True, check=False
    )
    verdicts = {c["name"]: c["verdict"] for c in json.loads(r.stdout)["cases"]}
    differs = {e["name"]: e["differs"] for e in ex["explanation"]["experiments"]}
    assert set(verdicts) == set(made) and all(verdicts[n] == ("FAIL" if d else "PASS") for n, d in differs.items())
    r = subprocess.run(
        [*base, str(quick_pack), "--exec", cmd, "--experiments", str(keep)], capture_output=True, text=True
    )
    assert r.returncode == 2 and "not a new or empty directory" in r.stderr


# header rules (issue 47 item 2): a page word written otherwise, explained by start headers
def _header_runner(rule: str) -> experiment.Runner:
    """meshnb's run, its header words written as ``rule`` says (:data:`experiment.HEADER_RULES`)."""

    def run(e: experiment.Experiment) -> experiment.Outputs:
        return experiment.header_predict(rule, e), e.trace

    return run


@pytest.mark.parametrize("rule", ["header: a 16-bit step counter", "header: STEP_HI not carried"])
def test_a_header_rule_is_proved_by_a_start_header(rule: str, unhurried: None) -> None:
    """At step 2^32 - 1 a 16-bit and a 32-bit step counter write the same words; the start header of step
    2^16 - 1 parts them, and the executor's run there proves the one it follows."""
    setup = setup_from_run(init_page(), 2, step_base=(1 << 32) - 1)
    base = experiment.experiment(setup, 0, 1, 1)
    run = _header_runner(rule)
    experiment.run_all([base], run)
    assert base.differs
    ex = experiment.explain_header([base], run, base, max_seconds=60.0)
    assert ex.verdict == "proved" and ex.survivors == [rule], ex.ruled_out
    assert ex.designed and "2^16 - 1" in ex.designed[0].case["about"]
    other = next(r for r in ("header: a 16-bit step counter", "header: STEP_HI not carried") if r != rule)
    assert ex.ruled_out[other].startswith(ex.designed[0].case["name"])


def test_a_header_word_no_rule_gives_is_not_proved(unhurried: None) -> None:
    """An executor that writes ERR 2 after a task: no header rule gives it, and every one is ruled out."""
    setup = setup_from_run(init_page(), 2)
    base = experiment.experiment(setup, 0, 1, 1)

    def run(e: experiment.Experiment) -> experiment.Outputs:
        pages = [bytearray(p) for p in e.expected]
        for p in pages:
            p[32] = 2
        return [bytes(p) for p in pages], e.trace

    experiment.run_all([base], run)
    ex = experiment.explain_header([base], run, base, max_seconds=60.0)
    assert ex.verdict == "none" and not ex.survivors and set(ex.ruled_out) == set(experiment.HEADER_RULES)
    assert ex.sentence().startswith("none of these")


@pytest.mark.slow
def test_the_check_proves_a_step_counter_kept_in_32_bits(quick_pack: Path, tmp_path: Path, unhurried: None) -> None:
    """The C port whose step counter has 32 bits, on the quick pack's step-base-2^32: the CI line names the
    header rule, proved by experiment."""
    e = EXECUTORS["step-hi-no-carry"]
    binary = build(e, tmp_path)
    res = suite.run_suite(quick_pack, exec_cmd=command(e, binary), cases="step-base-2^32").cases[0]
    assert res.verdict == "FAIL" and res.message.endswith("; cause proved by experiment: header: STEP_HI not carried")
    assert res.models == ["header: STEP_HI not carried"]


# page rules (issue 47 item 2): a step's loss written at another word, parted by designed start steps
_MOD128 = "LOSS: the loss of step t written at LOSS[t mod 128] (a ring of 128)"
_SHIFT128 = "LOSS: the loss of step t written at LOSS[(t + 128) mod 256]"
_UNWRAPPED = "LOSS: the loss of step t written at LOSS[t mod 256 + 1] (a step 255 mod 256 writes past the ring)"
_SHIFT1 = "LOSS: the loss of step t written at LOSS[(t + 1) mod 256]"


def _page_runner(rule: str) -> experiment.Runner:
    """meshnb's run, each step's loss written where page rule ``rule`` says (:data:`experiment.PAGE_RULES`)."""

    def run(e: experiment.Experiment) -> experiment.Outputs:
        return experiment.page_predict(rule, e), e.trace

    return run


@pytest.mark.parametrize(
    ("rule", "other", "step"),
    [(_MOD128, _SHIFT128, 200), (_SHIFT128, _MOD128, 200), (_UNWRAPPED, _SHIFT1, 10), (_SHIFT1, _UNWRAPPED, 10)],
)
def test_a_page_rule_is_proved_by_a_designed_start_step(rule: str, other: str, step: int, unhurried: None) -> None:
    """At the located step two page rules write the same words (a ring of 128 and one shifted by 128 at
    t mod 256 >= 128; LOSS[t mod 256 + 1] and LOSS[(t + 1) mod 256] below 255); a start step parts them,
    and the executor's run there proves the one it follows and rules the other out."""
    setup = setup_from_run(init_page(), step + 1)
    base = experiment.experiment(setup, step, 1, 1)
    run = _page_runner(rule)
    experiment.run_all([base], run)
    assert base.differs and experiment.page_predict(other, base) == base.got[0]  # type: ignore[index]
    ex = experiment.explain_page([base], run, base)
    assert ex.verdict == "proved" and ex.survivors == [rule], ex.survivors
    assert len(ex.designed) == 1 and ex.ruled_out[other].startswith(ex.designed[0].case["name"])
    assert ex.note == f"ruled out by a designed page: {other}" and ex.sentence().endswith(f"({ex.note})")
    assert experiment.prove_page([other, rule], [base, *ex.designed]) == [rule]


def test_no_page_is_designed_at_a_step_that_cannot_run(unhurried: None) -> None:
    """Located at step 2^64 - 3, the start step 255 that alone parts LOSS[t mod 256 + 1] from LOSS[(t + 1) mod
    256] would be 2^64 - 1, whose round wraps (SPEC): it is not designed, the two stay unseparated, and the
    check goes on (the run it would have asked for ended the whole check in an error)."""
    words = np.frombuffer(init_page(), dtype="<u4").copy()
    start = (1 << 64) - 13  # steps start .. start + 10: the located step is 2^64 - 3 (t mod 256 = 253)
    words[7], words[11] = start & 0xFFFFFFFF, start >> 32  # NEXT_STEP, STEP_HI
    setup = setup_from_run(words.tobytes(), 11)
    base = experiment.experiment(setup, 10, 1, 1)
    run = _page_runner(_UNWRAPPED)
    experiment.run_all([base], run)
    ex = experiment.explain_page([base], run, base)
    assert ex.verdict == "equivalent" and {_UNWRAPPED, _SHIFT1} <= set(ex.survivors), (ex.verdict, ex.survivors)


def test_no_page_rule_is_named_for_other_faults_or_none(unhurried: None) -> None:
    """The correct executor, a header rule, a flipped PARAMS bit and an op fault: every page rule is ruled
    out (none is named), and no page is designed."""
    setup = setup_from_run(init_page(), 200)
    runs = {
        "mode Z": experiment.reference_runner,
        "header": _header_runner("header: ROUND cleared"),
        "a PARAMS bit": _faulty_at(150, 0),
        "an op": experiment.model_runner(faults.single_op("e*x3", "fused")),
    }
    for what, run in runs.items():
        base = experiment.experiment(setup, 150, 1, 1)
        experiment.run_all([base], run)
        ex = experiment.explain_page([base], run, base)
        assert ex.verdict == "none" and not ex.survivors and not ex.designed, what
        assert set(ex.ruled_out) == set(experiment.PAGE_RULES), what


@pytest.mark.slow
@pytest.mark.parametrize(("mode", "rule", "other"), [("unwrapped", _UNWRAPPED, _SHIFT1), ("+1", _SHIFT1, _UNWRAPPED)])
def test_the_check_proves_a_page_rule_by_a_designed_page(
    mode: str, rule: str, other: str, quick_pack: Path, tmp_path: Path, unhurried: None
) -> None:
    """An executor that writes the loss of step t at LOSS[t mod 256 + 1], or at LOSS[(t + 1) mod 256], on a
    case of steps 0 .. 63 (where the two write the same words): the CI line names the executor's rule,
    proved by a designed start step (255), and says which rule that page ruled out; the page is kept as
    a case that ``meshnb check`` replays with the verdict the experiment saw."""
    import sys

    cmd = f"{sys.executable} {HERE / 'fault_executor.py'} loss-at={mode}"
    keep = tmp_path / "exp"
    res = suite.run_suite(quick_pack, exec_cmd=cmd, cases="hard-subnormal-params", keep_experiments=keep).cases[0]
    assert res.verdict == "FAIL", res.message
    assert res.message.endswith(f"; cause proved by experiment: {rule} (ruled out by a designed page: {other})")
    assert res.models == [rule]
    page = [p for p in keep.iterdir() if "-page-" in p.name]
    assert len(page) == 1 and "t mod 256 = 255" in json.loads((page[0] / "case.json").read_text())["about"]
    again = suite.run_suite(keep, exec_cmd=cmd, cases=page[0].name, verify=False, experiments=False).cases[0]
    assert again.verdict == "FAIL"  # both write the loss of step 255 elsewhere than meshnb


# LR read from the wrong word (issue 47 leftover): a neighbour of LR in the view page, proved by experiment
@pytest.mark.parametrize("word", list(experiment.LR_WORDS))
def test_lr_read_from_a_neighbouring_word_is_proved(word: str, unhurried: None) -> None:
    """An executor that reads its LR from PARAMS[3], STEPS_PER_TASK or INV_BATCH: located at step 0, and
    among every candidate cause the experiments leave that one alone."""
    name = f"LR read from {word}"
    setup = setup_from_run(init_page(), 200)
    run = experiment.model_runner(experiment.lr_from()[name])
    loc = experiment.locate(setup, run)
    base = next(e for e in loc.experiments if (e.start, e.steps) == (loc.step, 1) and e.differs)
    tries = experiment.separating()
    experiment.run_all(tries, run)
    causes = experiment.every_cause()
    assert set(experiment.lr_from()) <= set(causes)
    ex = experiment.explain(causes, loc.experiments + tries, run, base)
    assert ex.verdict == "proved" and ex.survivors == [name], (ex.verdict, ex.survivors)


@pytest.mark.parametrize(
    "truth",
    [faults.model("x86-ftz"), faults.model("fma-apply"), faults.model("nan-arm"), faults.single_op("lr*g", "fused")],
    ids=lambda m: m.name,
)
def test_lr_from_a_neighbour_is_ruled_out_for_other_faults(truth: faults.Model, unhurried: None) -> None:
    """For other faults every "LR read from" candidate is ruled out by experiment (never named), and for the
    correct executor no experiment differs, so none is proved."""
    tries = experiment.separating()
    run = experiment.model_runner(truth)
    experiment.run_all(tries, run)
    proof = experiment.prove({**experiment.lr_from(), truth.name: truth}, tries)
    assert proof.proved == [truth.name] and set(proof.ruled_out) == set(experiment.lr_from())
    right = experiment.separating()
    experiment.run_all(right, experiment.reference_runner)
    assert experiment.prove(experiment.lr_from(), right).proved == []


@pytest.mark.slow
def test_the_check_proves_lr_read_from_params_3(quick_pack: Path, unhurried: None) -> None:
    """The executor that reads its LR from PARAMS[3], on the quick pack's lr-changes: the CI line names it,
    proved by experiment."""
    import sys

    cmd = f"{sys.executable} {HERE / 'fault_executor.py'} lr-from=PARAMS[3]"
    res = suite.run_suite(quick_pack, exec_cmd=cmd, cases="lr-changes").cases[0]
    assert res.verdict == "FAIL" and res.message.endswith("; cause proved by experiment: LR read from PARAMS[3]")
    assert res.models == ["LR read from PARAMS[3]"]


def test_no_header_rule_is_named_without_a_difference_to_explain(unhurried: None) -> None:
    """Where no one-task experiment seen differs (the one that did ran with a timeout, or none did), the rules
    that change nothing there would all agree: none is kept, none designed for, none named."""
    setup = setup_from_run(init_page(), 2)
    base = experiment.experiment(setup, 0, 1, 1)
    experiment.run_all([base], experiment.reference_runner)
    ex = experiment.explain_header([base], experiment.reference_runner, base)
    assert ex.verdict == "none" and not ex.survivors and not ex.designed


def test_the_experiments_parts_as_their_docstrings_showed_them() -> None:
    assert experiment.boundaries(pack.Case("c", "", 10, steps_per_task=4, set_lr=((6, 0x3F000000),))) == [0, 4, 6, 10]
    setup = setup_from_run(init_page(), 200)
    loc = experiment.locate(setup, _faulty_at(137))  # the task that runs absolute step 137 writes PARAMS[0] wrong
    assert loc.where == "step 137: its run from meshnb's page (one step, STEPS_PER_TASK 1) writes PARAMS[0] wrong"
    assert (len(loc.experiments), loc.task) == (11, (128, 192))
    tries = experiment.separating()
    experiment.run_all(tries, experiment.model_runner(faults.model("x86-ftz")))  # the executor: x86's FTZ
    proof = experiment.prove(
        {n: faults.model(n) for n in ("x86-ftz", "ftz-before-rounding", "gradual-underflow")}, tries
    )
    assert (proof.proved, sorted(proof.ruled_out)) == (["x86-ftz"], ["ftz-before-rounding", "gradual-underflow"])
    causes = experiment.every_cause()
    assert len(causes) > 290 and "x86-ftz" in causes and "single op e*x3:fused" in causes
    assert "single op fold:reverse" not in causes  # it is fold-reverse
    both = {"fma-apply": faults.model("fma-apply"), "lr": faults.single_op("lr*g", "fused")}
    assert list(experiment.distinct(both)) == ["fma-apply"]
    made = experiment.variants([init_page()], np.random.default_rng(0))
    assert (len(made), made[0][0]) == (110, "PARAMS[0] = 00000001 (the least subnormal)")
    explanation = experiment.Explanation("equivalent", ["a", "b"], {}, 9, [], 200, 0.5)
    assert explanation.sentence() == "cause one of a, b (equivalent on the 200 pages tried)"


def test_a_design_parts_two_rules_that_agree_on_inits_page() -> None:
    base = experiment.experiment(setup_from_run(init_page(), 4), 0, 1, 1)
    d = experiment.design({n: faults.model(n) for n in ("gradual-underflow", "no-daz")}, base)
    assert d is not None and d[2] == 2
    run = experiment.model_runner(faults.single_op("e*x3", "fused"))
    experiment.run_all([base], run)
    ex = experiment.explain(experiment.every_cause(), [base], run, base, max_seconds=60.0)
    assert (ex.verdict, ex.survivors) == ("proved", ["single op e*x3:fused"]) and len(ex.designed) <= 6


def test_the_time_bounds_are_read_at_the_call(monkeypatch: pytest.MonkeyPatch) -> None:
    """locate's and explain's wall-clock bounds are the module's constants when the call is made, so that a
    test (the ``unhurried`` fixture) or a caller can lift them: with no time left both stop at once."""
    both = {
        k: v for k, v in experiment.lr_from().items() if k in ("LR read from PARAMS[2]", "LR read from STEPS_PER_TASK")
    }
    setup = setup_from_run(init_page(), 200)
    run = experiment.model_runner(both["LR read from STEPS_PER_TASK"])
    loc = experiment.locate(setup, run)
    base = next(e for e in loc.experiments if (e.start, e.steps) == (loc.step, 1) and e.differs)
    assert experiment.explain(both, loc.experiments, run, base).verdict == "proved"
    monkeypatch.setattr(experiment, "DESIGN_SECONDS", -1.0)
    assert experiment.explain(both, loc.experiments, run, base).verdict == "cut short"
    monkeypatch.setattr(experiment, "MAX_SECONDS", -1.0)
    assert experiment.locate(setup, run).cut_short
