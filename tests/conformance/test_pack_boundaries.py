"""Every case whose description names a boundary crosses it, by default-deny: each boundary word of
a case's ``about`` (2^32, 2^64, STEP_HI, the flush boundary and its kin, overflow, inf, NaN, a power
of two) has a check of what the case's run does; a word the table below has no check for fails."""

from __future__ import annotations

import re
from collections.abc import Callable

import numpy as np
import pytest

from meshnb.conformance import mutation, pack
from meshnb.conformance.fpu import Ops
from meshnb.conformance.model import OFF_INV, OFF_LR, OFF_NEXT, OFF_STEP_HI, OFF_X, OFF_Y, words_at
from meshnb.conformance.pack import Case

U32 = 1 << 32
Z = Ops()


def _crosses_2_32(case: Case, t: mutation.Trajectory) -> bool:
    """Steps 2^32 - 1 and 2^32 both run (NEXT_STEP wraps to 0) and the out page has STEP_HI carried."""
    first, last = case.step_base, case.step_base + case.steps - 1
    wraps = [k for k in range(first >> 32, (last >> 32) + 1) if first <= k * U32 - 1 and k * U32 <= last and k > 0]
    end = case.step_base + case.steps
    page = t.expected[0]
    hi, nxt = (int(words_at(page, off)[0]) for off in (OFF_STEP_HI, OFF_NEXT))
    return bool(wraps) and (hi, nxt) == (end >> 32, end & 0xFFFFFFFF) and hi > first >> 32


def _last_step(case: Case, t: mutation.Trajectory) -> bool:
    """The run's last step is 2^64 - 2 and its out page says the next one is 2^64 - 1."""
    page = t.expected[0]
    hi, nxt = (int(words_at(page, off)[0]) for off in (OFF_STEP_HI, OFF_NEXT))
    return case.step_base + case.steps - 1 == (1 << 64) - 2 and (hi, nxt) == (0xFFFFFFFF, 0xFFFFFFFF)


def _off_task_boundary(case: Case, t: mutation.Trajectory) -> bool:
    """A SET_LR mid-run, between two steps of one task (its step count not a multiple of STEPS_PER_TASK)."""
    return any(0 < s < case.steps and s % case.steps_per_task for s, _ in case.set_lr)


def _words(t: mutation.Trajectory) -> np.ndarray:
    """Every float word the run reads or makes: the start page's fields, the SET_LR words, every
    step's params, LR, sums and loss."""
    page = t.pages[0]
    read = [words_at(page, off, n) for off, n in ((0, 4), (OFF_LR, 1), (OFF_INV, 1))]
    read += [words_at(page, OFF_X, 256), words_at(page, OFF_Y, 256)]
    lr = np.array([w for _, w in t.case.set_lr], dtype=np.uint32)
    inv = words_at(page, OFF_INV)
    updates = Z.mul(t.lr[:, 0, :], Z.mul(t.trace[:, :4], inv))  # apply's lr * g (system 0)
    made = (t.params.ravel(), t.trace.ravel(), t.losses.ravel(), np.asarray(updates).ravel())
    return np.concatenate([*read, lr, *made]).astype(np.uint32)


def _inputs(t: mutation.Trajectory) -> np.ndarray:
    page = t.pages[0]
    fields = ((0, 4), (OFF_LR, 1), (OFF_INV, 1), (OFF_X, 256), (OFF_Y, 256))
    lr = np.array([w for _, w in t.case.set_lr], dtype=np.uint32)
    return np.concatenate([*(words_at(page, o, n) for o, n in fields), lr]).astype(np.uint32)


def _has_inf(case: Case, t: mutation.Trajectory) -> bool:
    return bool(((_words(t) & 0x7FFFFFFF) == 0x7F800000).any())


def _has_nan(case: Case, t: mutation.Trajectory) -> bool:
    return bool(((_words(t) & 0x7FFFFFFF) > 0x7F800000).any())


def _overflows(case: Case, t: mutation.Trajectory) -> bool:
    """An inf made by the run (in its params, sums or losses) from finite inputs."""
    made = np.concatenate([t.params.ravel(), t.trace.ravel(), t.losses.ravel()])
    return bool(((made & 0x7FFFFFFF) == 0x7F800000).any())


def _flushes(case: Case, t: mutation.Trajectory) -> bool:
    """Some op of the run has a rounded result that is a nonzero subnormal (mode Z flushes it), or
    a subnormal word of the page or a SET_LR is read (and flushed to 0)."""
    w = _inputs(t)
    return bool((((w & 0x7F800000) == 0) & ((w & 0x7FFFFF) != 0)).any()) or bool(mutation.flushed_ops(t))


def _magnitude(k: int) -> Callable[[Case, mutation.Trajectory], bool]:
    """A word the run reads or makes (:func:`_words`) of magnitude 2^k: its exponent at most 2
    above k ("near 2^k") and at most 24 below (a power of two, or words scaled by it)."""

    def check(case: Case, t: mutation.Trajectory) -> bool:
        v = np.abs(_words(t).view(np.float32).astype(np.float64))
        v = v[(v > 0) & np.isfinite(v)]
        e = np.frexp(v)[1] - 1
        return bool(((e <= k + 2) & (e >= k - 24)).any())

    return check


# (pattern, check): the first that matches a word of the description takes it out; a boundary word
# that none takes fails the test
CHECKS: list[tuple[str, Callable[[int], Callable[[Case, mutation.Trajectory], bool]]]] = [
    (r"2\^32|STEP_HI", lambda _: _crosses_2_32),
    (r"2\^64 - 2|2\^64", lambda _: _last_step),
    (r"not at a task boundary", lambda _: _off_task_boundary),
    (r"boundary-params|flush[- ]boundary|flush(?:ed|es)?|underflows?|subnormal|tininess|denormal", lambda _: _flushes),
    (r"overflows?", lambda _: _overflows),
    (r"\binf\b|infinite|infinity", lambda _: _has_inf),
    (r"\bnan\b", lambda _: _has_nan),
    (r"2\^(-?\d+)", lambda k: _magnitude(k)),
]
BOUNDARY = re.compile(
    r"2\^-?\d+|STEP_HI|flush|underflow|subnormal|denormal|tininess|overflow|\binf|\bnan\b|boundary|wrap", re.I
)


def claims(about: str) -> list[tuple[str, Callable[[Case, mutation.Trajectory], bool]]]:
    """The boundary words of a description and their checks; ValueError for a word with none."""
    text, out = about, []
    for pattern, make in CHECKS:
        for mt in re.finditer(pattern, text, re.I):
            arg = int(mt.group(1)) if mt.groups() else 0
            out.append((mt.group(0), make(arg)))
        text = re.sub(pattern, " ", text, flags=re.I)
    left = BOUNDARY.findall(text)
    if left:
        raise ValueError(f"names a boundary no check covers: {left}")
    return out


@pytest.mark.parametrize("quick", [True, False], ids=["quick", "full"])
def test_every_case_crosses_the_boundaries_it_names(quick: bool) -> None:
    failed = []
    for case in pack.cases(quick):
        if case.name == "long":  # names no boundary (checked below); its run is 65536 steps
            assert not claims(case.about)
            continue
        found = claims(case.about)
        if not found:
            continue
        t = mutation.case_trajectory(case)
        failed += [f"{case.name}: {word!r}" for word, check in found if not check(case, t)]
    assert not failed, failed


def test_a_word_with_no_check_fails() -> None:
    with pytest.raises(ValueError, match="no check covers"):
        claims("a run near the wrap of the step counter")
    with pytest.raises(ValueError, match="no check covers"):
        claims("params at the boundary of the exponent range")
    assert [w for w, _ in claims("X times 2^-126: e*x at the flush boundary")] == ["flush boundary", "2^-126"]


def test_the_checks_fail_where_the_claim_is_false() -> None:
    """The quick pack's old step-base-2^32 (128 steps from 2^32 - 300, short of 2^32) fails the 2^32
    check; init's default run fails the flush, overflow, inf and NaN checks and 2^-126's."""
    short = Case("step-base-2^32", "a step base just below 2^32", 128, step_base=U32 - 300)
    assert not _crosses_2_32(short, mutation.trajectory(short))
    good = pack.BY_NAME["step-base-2^32"].sized(quick=True)
    assert _crosses_2_32(good, mutation.case_trajectory(good))
    plain = pack.BY_NAME["default"].sized(quick=True)
    t = mutation.case_trajectory(plain)
    for check in (_flushes, _overflows, _has_inf, _has_nan, _magnitude(-126)):
        assert not check(plain, t), check
    end = pack.BY_NAME["step-base-2^64-2"].sized(quick=True)
    assert _last_step(end, mutation.case_trajectory(end)) and not _last_step(plain, t)
