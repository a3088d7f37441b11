"""The mutation harness (:mod:`meshnb.conformance.mutation`): its induction over meshnb's states
agrees with :func:`faults.run` of the mutant, and every non-equivalent single-op mutant is killed
by each pack (the score in docs/guide/mutation-score.md, refreshed by docs/gen_mutation_score.py)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from meshnb.conformance import faults, mutants, mutation, pack

EQUIVALENT = json.loads((Path(__file__).parent / "mutation_equivalent.json").read_text())["equivalent"]


def test_meshnb_itself_is_killed_by_no_case() -> None:
    for case in pack.cases(quick=True):
        assert mutation.first_difference(mutation.case_trajectory(case), faults.EXACT) is None, case.name


@pytest.mark.parametrize(
    ("name", "case"),
    [("e*x3:fused", "default"), ("fold:reverse", "cluster-3"), ("p - lr*g:no-flush", "probe-subnormal-update")],
)
def test_the_induction_agrees_with_a_whole_run(name: str, case: str) -> None:
    """Where the induction finds the first difference, faults.run of the whole case from the start
    differs at that step's sums or later, and is meshnb's on every step before."""
    c = pack.BY_NAME[case].sized(quick=True)
    t = mutation.case_trajectory(c)
    m = faults.single_op(*name.rsplit(":", 1))
    k = mutation.first_difference(t, m)
    assert k is not None and mutation.confirm(t, m, k)
    r = faults.run(t.pages, c.steps, grouped=c.grouped, set_lr=dict(c.set_lr), m=m, from_init=c.from_init)
    assert np.array_equal(r.trace[: k.step], t.trace[: k.step])
    assert r.pages != t.expected or not np.array_equal(r.trace, t.trace)


def test_params_that_part_are_decided_by_a_whole_run() -> None:
    """An unflushed p - lr*g parts from meshnb's params at step 3 of probe-tiny-y-tiny-params (a
    subnormal a, whose later updates round to nothing): the sums stay meshnb's, the out page does not."""
    c = pack.BY_NAME["probe-tiny-y-tiny-params"].sized(quick=True)
    t = mutation.case_trajectory(c)
    m = faults.single_op("p - lr*g", "no-flush")
    k = mutation.first_difference(t, m)
    assert k == mutation.Kill(c.name, 3, "params") and mutation.confirm(t, m, k)
    r = faults.run(t.pages, c.steps, grouped=False, m=m)
    assert r.pages != t.expected and np.array_equal(r.trace, t.trace)
    assert not mutation.confirm(t, faults.EXACT, k)  # meshnb itself: nothing differs


def test_a_mutant_that_changes_nothing_is_killed_by_nothing() -> None:
    """The samples' step h = 2/255 under x86's NaN rule: no NaN, no bits change; no case, no evidence."""
    m = faults.single_op("h", "nan-x86")
    assert mutation.kill(m, quick=True) is None and mutation.witness(m) is None


def test_the_equivalent_list_names_real_mutants() -> None:
    names = {m.name for m in mutants.mutations()}
    assert set(EQUIVALENT) <= names and len(EQUIVALENT) < len(names)


@pytest.mark.slow
@pytest.mark.parametrize("quick", [True, False], ids=["quick", "full"])
def test_every_non_equivalent_mutant_is_killed(quick: bool) -> None:
    alive = []
    for mut in mutants.mutations():
        if mut.name in EQUIVALENT:
            continue
        m = faults.single_op(mut.op, mut.alt)
        k = mutation.kill(m, quick)
        if k is None:
            alive.append(mut.name)
            continue
        if k.what == "params":  # kill() confirmed it by a whole run; trace, loss, samples: exact
            t = mutation.case_trajectory(next(c for c in mutation.pack_cases(quick) if c.name == k.case))
            assert mutation.confirm(t, m, k), (mut.name, k)
    assert not alive, alive


def test_confirm_judges_a_case_with_injected_timeouts_as_the_check_does() -> None:
    """On a case whose rounds time out, the run without a fault confirms no kill: its pages are held to the
    pack's with ROUND as the timeouts leave it, not to a run that has none."""
    t = mutation.trajectory(pack.BY_NAME["state-timeout-resume"])
    found = mutation.first_difference(t, faults.single_op("e*x3", "fused"))
    assert found is not None and mutation.confirm(t, faults.single_op("e*x3", "fused"), found)
    assert not mutation.confirm(t, faults.EXACT, replace(found, step=0))
    assert not mutation.confirm(t, faults.EXACT, replace(found, step=50))
