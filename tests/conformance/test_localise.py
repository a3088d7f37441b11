"""``meshnb check`` finds the op (:mod:`meshnb.conformance.check.localise`): single-op faults injected
through the simulated executor (:func:`faults.run` with a single-op model) are named, each named
change re-run here independently; a fault beyond the space gives "no single-op change"; the time
bound; the page-only transformations; the text, JSON and JUnit carry it."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import numpy as np
import pytest

from meshnb.conformance import check, faults, mutants, suite
from meshnb.conformance import model as step
from meshnb.conformance.check import diagnosis
from meshnb.conformance.fpu import Ops
from meshnb.testing.reference import init_page
from meshnb.view import FIELDS


@pytest.fixture(autouse=True)
def _ample_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    """The searches run to the end here (the machine may be loaded); the bound is tested on its own."""
    monkeypatch.setattr(diagnosis, "BUDGET", 60.0)


@pytest.fixture(scope="module")
def plain() -> check.Setup:
    return check.setup_from_run(init_page(), 256, set_lr={0: 0.7})  # LR 0.7: apply's roundings show


@pytest.fixture(scope="module")
def cluster() -> check.Setup:
    return check.setup_from_run(init_page(3, True), 128, systems=3, set_lr={0: 0.7})


@pytest.fixture(scope="module")
def tiny() -> check.Setup:
    """Params 0 and Y 0 but for samples 0 and 8 (lanes 0 and 1 of step 0): e = 1.5 * 2^-126 and
    -2^-126, whose sum at the butterfly's last add is subnormal (mode Z writes 0 in the trace)."""
    page = bytearray(init_page())
    y = FIELDS["Y"].offset
    page[y : y + 1024] = bytes(1024)
    page[y : y + 4] = (0x80C00000).to_bytes(4, "little")  # y_0 = -1.5 * 2^-126
    page[y + 32 : y + 36] = (0x00800000).to_bytes(4, "little")  # y_8 = 2^-126
    return check.setup_from_run(bytes(page), 32)


def _first(setup: check.Setup, trace: np.ndarray) -> int:
    d = check.first_trace_diff(setup.trace, trace)
    assert d is not None
    return d[0]


def _reproduces(setup: check.Setup, c: check.Counterfactual, got: np.ndarray) -> bool:
    """The named change re-run by :func:`faults.run` (not the search's own step) from meshnb's state at
    its step, to the first differing step: the executor's rows."""
    case, d = setup.case, _first(setup, got)
    n = d - c["step"] + 1
    lr = {s - c["step"]: w for s, w in case.set_lr if c["step"] <= s < c["step"] + n}
    r = faults.run(
        check.reference_state(setup, c["step"]),
        n,
        grouped=case.grouped,
        set_lr=lr,
        m=faults.single_op(c["op"], c["alt"]),
    )
    return bool(np.array_equal(r.trace, got[c["step"] : d + 1]))


INJECTED = [
    ("plain", "e", "swapped"),
    ("plain", "e*x3", "fused"),
    ("plain", "d*x", "fused"),
    ("plain", "+b", "round-zero"),
    ("plain", "e*e", "round-up"),
    ("plain", "butterfly8", "round-down"),
    ("plain", "butterfly", "xor-ascending"),
    ("plain", "x3", "f64"),
    ("plain", "pred", "f64"),
    ("plain", "e*x2", "regrouped"),
    ("plain", "p - lr*g", "swapped"),
    ("plain", "lr*g", "round-up"),
    ("cluster", "fold", "round-zero"),
    ("cluster", "lr*g", "regrouped"),
    ("tiny", "butterfly1", "no-flush"),
    ("hard-tiny-samples", "e*x3", "flush-to-plus-zero"),  # a pack case: its -0 products written +0
]


@pytest.mark.parametrize(("where", "op", "alt"), INJECTED)
def test_an_injected_single_op_fault_is_named(where: str, op: str, alt: str, request: pytest.FixtureRequest) -> None:
    setup: check.Setup = request.getfixturevalue("setups")[where] if "-" in where else request.getfixturevalue(where)
    got = check.executor_run(setup, faults.single_op(op, alt))
    report = check.check(setup, got.pages[0], got_trace=got.trace)
    assert report.verdict == "FAIL"
    dg = report.diagnosis or {}
    assert not dg["models"], "a whole-run model reproduces it: pick another fault"
    loc = dg["localisation"]
    named = {(c["op"], c["alt"]) for c in loc["found"]}
    assert (op, alt) in named, loc
    for c in loc["found"]:  # every change named reproduces the bits (an equivalent set)
        assert _reproduces(setup, c, got.trace), c
    first = next(c for c in loc["found"] if (c["op"], c["alt"]) == (op, alt))
    d = _first(setup, got.trace)
    assert first["step"] == (d - 1 if mutants.BY_ID[op].stage == "apply" else d)
    assert first["holds"] == min(check.localise.HOLD, setup.case.steps - first["step"])  # the executor it is
    assert f"step {first['step']}: mode Z except {mutants.Mutant(op, alt).text()}" in report.text()
    if mutants.BY_ID[op].stage == "lanes":  # the lanes named are those whose value the op changes
        assert first["lanes"] and "on lane" in first["text"]


def test_the_lanes_named_are_those_the_op_changes(plain: check.Setup) -> None:
    got = check.executor_run(plain, faults.single_op("e*x3", "fused"))
    loc = check.check(plain, got.pages[0], got_trace=got.trace).diagnosis["localisation"]
    c = next(c for c in loc["found"] if c["op"] == "e*x3")
    # independently: the butterfly's first add of e*x3, fused and not, lane by lane, at step 0
    xs, ys = step.samples()
    x, y = xs[None, 0::8], ys[None, 0::8]
    z = step.lanes({}, np.zeros((1, 4), dtype=np.uint32), x, y)
    e, x3, v3 = z["e"][0], z["x3"][0], z["e*x3"][0]
    fused = Ops().fma(e, x3, v3[np.arange(32) ^ 16])
    plain_add = Ops().add(v3, v3[np.arange(32) ^ 16])
    assert c["lanes"] == [int(i) for i in np.nonzero(fused != plain_add)[0]]
    assert 0 < len(c["lanes"]) < 32


def test_two_faults_at_once_are_no_single_op_change(plain: check.Setup) -> None:
    start = check.reference_state(plain, 100)[0]
    setup = check.setup_from_run(start, 32)
    both = faults.Model("two", "fma-horner and the sequential lane sum", fma_horner=True, lane_sum="sequential")
    got = check.executor_run(setup, both)
    report = check.check(setup, got.pages[0], got_trace=got.trace)
    loc = report.diagnosis["localisation"]
    assert loc["found"] == [] and loc["where"] == "step 0"
    assert loc["closest"].startswith("step 0: mode Z except `")
    assert "reproduced by no single-op change; closest: " in report.text()


def test_a_flipped_bit_is_no_single_op_change(plain: check.Setup) -> None:
    trace = plain.trace.copy()
    trace[40:, 4] ^= 1  # e*e of step 40 on
    report = check.check(plain, plain.expected[0], got_trace=trace)
    loc = report.diagnosis["localisation"]
    assert loc["found"] == [] and loc["where"] == "step 40" and loc["searched"] == loc["space"]
    assert "reproduced by no single-op change" in report.text()


def test_the_time_bound_cuts_the_search_short(plain: check.Setup, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(diagnosis, "BUDGET", 0.0)
    got = check.executor_run(plain, faults.single_op("e*e", "round-up"))
    report = check.check(plain, got.pages[0], got_trace=got.trace)
    loc = report.diagnosis["localisation"]
    assert loc["searched"] <= 1 < loc["space"]
    assert loc["cut_short"] == f"{loc['space'] - loc['searched']} of {loc['space']} changes not tried within 0.0 s"
    assert "the time bound cut the search short" in report.text()


def test_a_search_takes_about_a_second_at_most(plain: check.Setup, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(diagnosis, "BUDGET", 1.0)
    got = check.executor_run(plain, faults.single_op("x3", "f64"))
    loc = check.check(plain, got.pages[0], got_trace=got.trace).diagnosis["localisation"]
    assert loc["seconds"] < 1.0 + 3.0  # the bound, and the rows of the changes found held after it (wide margin)


# =============================================================================================
# Only the page differs
# =============================================================================================


def _loc_page(setup: check.Setup, page: bytes, trace: np.ndarray | None = None) -> check.Localisation:
    report = check.check(setup, page, got_trace=setup.trace if trace is None else trace)
    assert report.verdict == "FAIL"
    return report.diagnosis["localisation"]


def test_a_loss_ring_written_one_index_on(plain: check.Setup) -> None:
    setup = check.setup_from_run(init_page(), 300)
    lo = FIELDS["LOSS"].offset
    want = np.frombuffer(setup.expected[0], dtype="<u4", count=256, offset=lo)
    ring = np.zeros(256, dtype=np.uint32)
    for t in range(300):  # the executor's ring: loss(t) at (t + 1) mod 256
        ring[(t + 1) % 256] = want[t % 256]
    page = bytearray(setup.expected[0])
    page[lo : lo + 1024] = ring.astype("<u4").tobytes()
    loc = _loc_page(setup, bytes(page))
    assert loc["where"].startswith("page word LOSS[") and loc["found"] == []
    assert loc["page"] == ["LOSS: the loss of step t written at LOSS[(t + 1) mod 256]"]
    page[lo + 8] ^= 1  # one more word: no shift makes it
    assert loc["page"] != _loc_page(setup, bytes(page))["page"]


def test_words_signed_swapped_nan_and_counters(plain: check.Setup) -> None:
    page = bytearray(plain.expected[0])
    at = FIELDS["PARAMS"].offset + 8
    page[at + 3] ^= 0x80  # PARAMS[2]'s sign
    lo = FIELDS["LOSS"].offset + 4 * 5
    page[lo : lo + 4] = page[lo : lo + 4][::-1]  # LOSS[5] byte-swapped
    page[28] += 1  # NEXT_STEP one on
    loc = _loc_page(plain, bytes(page))
    assert loc["where"] == "page word PARAMS[2] (params)"
    assert "PARAMS[2]: the sign flipped" in loc["page"][-1] and "LOSS[5]: the bytes in reverse order" in loc["page"][-1]
    assert "STEP_HI:NEXT_STEP: the step counter off by +1 (257 for 256)" in loc["page"]


def test_a_nan_of_another_payload() -> None:
    setup = check.setup_from_run(init_page(), 64, set_lr={0: 1e6})  # diverges to NaN
    lo = FIELDS["LOSS"].offset + 4 * 63
    want = int.from_bytes(setup.expected[0][lo : lo + 4], "little")
    assert want == 0x7FFFFFFF
    page = bytearray(setup.expected[0])
    page[lo : lo + 4] = (0x7FC00000).to_bytes(4, "little")
    assert "LOSS[63]: another NaN (7fc00000 for 7fffffff)" in _loc_page(setup, bytes(page))["page"][-1]


def test_a_32_bit_step_counter() -> None:
    setup = check.setup_from_run(init_page(), 8, step_base=(1 << 32) - 4)
    page = bytearray(setup.expected[0])
    page[44:48] = bytes(4)  # STEP_HI not carried
    loc = _loc_page(setup, bytes(page))
    assert loc["where"] == "page word STEP_HI (header)"
    assert loc["page"] == ["STEP_HI:NEXT_STEP: a 32-bit step counter (STEP_HI 0 for 1: the carry lost)"]


def test_the_loss_computed_otherwise(cluster: check.Setup) -> None:
    got = check.executor_run(cluster, faults.single_op("loss", "round-up"))
    assert np.array_equal(got.trace, cluster.trace)  # the trace holds sums: only the page shows it
    loc = _loc_page(cluster, got.pages[0])
    assert loc["page"] == [f"LOSS: mode Z except {mutants.Mutant('loss', 'round-up').text()} (every step's loss)"]


def test_the_last_apply_computed_otherwise(plain: check.Setup) -> None:
    m = faults.single_op("lr*g", "round-down")
    last = faults.run(check.reference_state(plain, 255), 1, grouped=False, m=m)  # only the last step's apply
    page = last.pages[0]
    assert page != plain.expected[0]
    loc = _loc_page(plain, page)
    assert ("lr*g", "round-down") in {(c["op"], c["alt"]) for c in loc["found"]}
    for c in loc["found"]:  # each reproduces the page: re-run
        r = faults.run(check.reference_state(plain, 255), 1, grouped=False, m=faults.single_op(c["op"], c["alt"]))
        assert r.pages[0][:16] == page[:16]


# =============================================================================================
# JSON and JUnit carry it
# =============================================================================================


def test_json_and_junit_carry_the_localisation(plain: check.Setup) -> None:
    got = check.executor_run(plain, faults.single_op("e", "swapped"))
    res = suite.judge_outputs(plain, got.pages, got.trace, name="swapped")
    want = "step 0: mode Z except `e = pred - y` with its operands swapped (y - pred) on lanes 0 .. 31"
    assert res.message.endswith("; no fault model reproduces these bits; " + want + " (holds 64 steps)")
    doc = json.loads(json.dumps(res.report.to_json() if res.report else {}))
    assert doc["diagnosis"]["localisation"]["found"][0]["text"] == want
    table = suite.SuiteResult("pack", [res]).table()
    assert "no fault model reproduces these bits; single op e:swapped (step 0)" in table
    root = ET.fromstring(suite.SuiteResult("pack", [res]).junit())
    failure = root.find(".//failure")
    assert failure is not None and want in failure.get("message", "") and want in (failure.text or "")
