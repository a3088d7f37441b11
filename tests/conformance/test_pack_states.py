"""The pack covers the program's state machine: SPEC 8's rules for ``init`` and ``task`` (and SPEC 9's
for a pending round), one row each, each with the case that exercises it and a check, on meshnb's
answer for that case, that the case's run reaches the state the rule is about and shows its effect.
A rule the pack's protocol cannot exercise is listed apart, with the reason; a rule with neither fails."""

from __future__ import annotations

import struct
import threading
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pytest

from meshnb import Context, Group, Trace, View, program
from meshnb.conformance import pack
from meshnb.conformance.pack import Case

ERR, PENDING, ROUND, STEP_HI, NEXT, LR, SPT = 32, 36, 40, 44, 28, 16, 20


def w(page: bytes, off: int) -> int:
    return int(struct.unpack_from("<I", page, off)[0])


Check = Callable[[Case, bytes, bytes], bool]  # (case, system 0's in page, its out page)


@dataclass(frozen=True)
class Rule:
    spec: str  # the rule, as SPEC 8 (or 9) words it
    case: str  # the pack case that exercises it (in both packs)
    shows: Check  # the case's start page holds the state and meshnb's out page shows the rule


def _subnormal(u: int) -> bool:
    return (u & 0x7F800000) == 0 and (u & 0x7FFFFF) != 0


def _is_nan(u: int) -> bool:
    return (u & 0x7FFFFFFF) > 0x7F800000


RULES: list[Rule] = [
    Rule(
        "init writes X, Y, zero LOSS and PARAMS, LR 0.5, STEPS_PER_TASK 64, INV_BATCH",
        "default",
        lambda c, i, o: c.from_init and w(i, LR) == 0x3F000000 and w(i, SPT) == 64,
    ),
    Rule(
        "TASK (0) runs STEPS_PER_TASK steps from step STEP_HI:arg",
        "state-err-pending-round",
        lambda c, i, o: w(i, STEP_HI) == 3 and (w(o, STEP_HI) << 32 | w(o, NEXT)) == c.step_base + c.steps,
    ),
    Rule("STEPS_PER_TASK = 1", "steps-per-task-1", lambda c, i, o: w(i, SPT) == 1 and c.steps > 1),
    Rule(
        "STEPS_PER_TASK odd, a last task shortened",
        "steps-per-task-odd",
        lambda c, i, o: w(i, SPT) % 2 == 1 and c.steps % w(i, SPT) != 0,
    ),
    Rule(
        "STEPS_PER_TASK large: one task wraps the 256-entry loss ring",
        "steps-per-task-large",
        lambda c, i, o: min(w(i, SPT), c.steps) > 256,
    ),
    Rule(
        "SET_LR (0x10) writes LR = ftz_from_bits(arg)",
        "state-lr-words",
        lambda c, i, o: (
            any(_subnormal(x) for _, x in c.set_lr)
            and any(x >> 31 and not _is_nan(x) and x & 0x7FFFFFFF for _, x in c.set_lr)
            and w(o, LR) == 0x7FFFFFFF
        ),
    ),
    Rule(
        "any other op code does nothing (R_BAD_OP)",
        "state-lr-words",
        lambda c, i, o: (
            {op for _, op, _ in c.calls} == set(pack.BAD_OPS)
            and {s for s, _, _ in c.calls} >= {0, c.steps}
            and any(0 < s < c.steps for s, _, _ in c.calls)
        ),
    ),
    Rule(
        "a TASK reads PARAMS through ftz_from_bits",
        "hard-subnormal-params",
        lambda c, i, o: any(_subnormal(w(i, 4 * j)) for j in range(4)),
    ),
    Rule(
        "a TASK reads LR through ftz_from_bits (a subnormal)",
        "hard-subnormal-lr",
        lambda c, i, o: _subnormal(w(i, LR)) and w(o, LR) == w(i, LR),
    ),
    Rule(
        "a TASK reads a NaN LR as mode Z's NaN",
        "hard-nan-lr",
        lambda c, i, o: _is_nan(w(i, LR)) and w(i, LR) != 0x7FFFFFFF and w(o, 0) == 0x7FFFFFFF,
    ),
    Rule("a TASK reads an infinite LR", "state-lr-minus-inf", lambda c, i, o: w(i, LR) == 0xFF800000),
    Rule(
        "a TASK reads INV_BATCH through ftz_from_bits",
        "hard-subnormal-inv-batch",
        lambda c, i, o: _subnormal(w(i, 24)),
    ),
    Rule(
        "a TASK reads X and Y as they are (every op flushes its inputs)",
        "probe-subnormal-samples",
        lambda c, i, o: any(_subnormal(w(i, 64 + 4 * s)) for s in range(256)) and i[64:2112] == o[64:2112],
    ),
    Rule(
        "every TASK writes PARAMS back",
        "hard-subnormal-params",
        lambda c, i, o: not any(_subnormal(w(o, 4 * j)) for j in range(4)),
    ),
    Rule(
        "every TASK writes ERR (0 after a task that did not time out)",
        "state-err-pending-round",
        lambda c, i, o: w(i, ERR) == 1 and w(o, ERR) == 0,
    ),
    Rule(
        "STEP_HI:NEXT_STEP = first step + steps done, 64-bit with carry",
        "step-base-2^32",
        lambda c, i, o: w(i, STEP_HI) == 0 and w(o, STEP_HI) == 1,
    ),
    Rule(
        "with a group and no timeout a TASK clears PENDING",
        "state-pending-cluster-mismatch",
        lambda c, i, o: c.grouped and w(i, PENDING) == 1 and w(o, PENDING) == 0 and w(i, ERR) == 1 and w(o, ERR) == 0,
    ),
    Rule(
        "a pending round is dropped when there is no group (even with a matching arg)",
        "state-pending-alone-match",
        lambda c, i, o: (
            not c.grouped
            and w(i, PENDING) == 1
            and w(i, ROUND) == (c.step_base + 1) & 0xFFFFFFFF
            and w(o, PENDING) == 0
        ),
    ),
    Rule(
        "a pending round is dropped when there is no group (arg not matching)",
        "state-err-pending-round",
        lambda c, i, o: (
            not c.grouped
            and w(i, PENDING) == 1
            and w(i, ROUND) != (c.step_base + 1) & 0xFFFFFFFF
            and w(o, PENDING) == 0
        ),
    ),
    Rule(
        "a pending round is dropped when arg does not match (with a group)",
        "state-pending-cluster-mismatch",
        lambda c, i, o: c.grouped and w(i, PENDING) == 1 and w(i, ROUND) != (c.step_base + 1) & 0xFFFFFFFF,
    ),
    Rule(
        "ROUND is never cleared",
        "state-err-pending-round",
        lambda c, i, o: w(i, ROUND) != 0 and w(o, ROUND) == w(i, ROUND),
    ),
    Rule(
        "a timed-out TASK sets ROUND, PENDING 1, ERR 1; the next TASK with that arg resumes the round",
        "state-timeout-resume",
        lambda c, i, o: (
            c.grouped
            and c.systems > 1
            and any(at % c.steps_per_task > 0 for _, at in c.timeouts)
            and w(o, ROUND) == (c.step_base + max(at for k, at in c.timeouts if k == 0) + 1) & 0xFFFFFFFF
            and w(o, PENDING) == 0
            and w(o, ERR) == 0
        ),
    ),
    Rule(
        "a pending round with a group and a matching arg is resumed (a group of one too)",
        "state-timeout-group-of-one",
        lambda c, i, o: c.grouped and c.systems == 1 and bool(c.timeouts) and w(o, ROUND) != 0,
    ),
    Rule(
        "only a pending round is resumed (ROUND matching with PENDING 0: computed and published)",
        "state-round-match-not-pending",
        lambda c, i, o: c.grouped and w(i, PENDING) == 0 and w(i, ROUND) == (c.step_base + 1) & 0xFFFFFFFF,
    ),
    Rule(
        "a TASK writes PARAMS back even after zero steps",
        "state-timeout-resume",
        lambda c, i, o: any(at % c.steps_per_task == 0 for _, at in c.timeouts),
    ),
    Rule(
        "steps run to 2^64 - 2",
        "step-base-2^64-2",
        lambda c, i, o: c.step_base + c.steps == (1 << 64) - 1,
    ),
    Rule(
        "step t of system k of N uses batch offset (t N + k) mod 2^32",
        "cluster-3",
        lambda c, i, o: c.systems == 3,
    ),
    Rule(
        "step t writes its loss to LOSS[t mod 256]",
        "state-err-pending-round",
        lambda c, i, o: (c.step_base % 256) != 0,
    ),
]

# Rules the pack's protocol (pages in, pages out, TASK with arg = NEXT_STEP) cannot exercise, and why.
NOT_IN_THE_PACK: dict[str, str] = {
    "TASK returns the steps completed; SET_LR R_NONE; other codes R_BAD_OP": (
        "an executor reports pages, not return values (the adapter sees them: train's tests check meshnb's)"
    ),
    "a resumed round is not recomputed nor republished": (
        "in every state a run reaches, the published slot holds what recomputing the step gives (the page's"
        " params did not change since): the bits are the same either way (SPEC 11: timeouts change no bits);"
        " only a synthetic exchange page (own slot unlike the page's step) shows it, and a case carries none"
    ),
}


@pytest.fixture(scope="module")
def answers() -> dict[tuple[str, bool], tuple[Case, bytes, bytes]]:
    out = {}
    for quick in (True, False):
        for case in pack.cases(quick):
            if case.name in {r.case for r in RULES} and case.name != "long":
                out[case.name, quick] = (case, case.in_page(), pack.run_case(case).out_pages[0])
    return out


def test_every_rule_has_a_case_or_a_reason() -> None:
    names = {c.name for c in pack.cases(quick=True)} & {c.name for c in pack.cases()}
    missing = [r.spec for r in RULES if r.case not in names]
    assert not missing, f"rules whose case is not in both packs: {missing}"
    assert len({r.spec for r in RULES}) == len(RULES)
    assert all(reason for reason in NOT_IN_THE_PACK.values())
    # every state case of the pack is some rule's
    states = {c.name for c in pack.cases() if c.name.startswith("state-")}
    assert states <= {r.case for r in RULES}, states - {r.case for r in RULES}


@pytest.mark.parametrize("quick", [True, False], ids=["quick", "full"])
@pytest.mark.parametrize("rule", RULES, ids=[r.spec[:60] for r in RULES])
def test_the_case_exercises_its_rule(
    rule: Rule, quick: bool, answers: dict[tuple[str, bool], tuple[Case, bytes, bytes]]
) -> None:
    case, page_in, page_out = answers[rule.case, quick]
    assert rule.shows(case, page_in, page_out), f"{rule.case} does not exercise: {rule.spec}"


def test_a_case_that_does_not_hold_the_state_fails_its_rule(
    answers: dict[tuple[str, bool], tuple[Case, bytes, bytes]],
) -> None:
    """The checks are not vacuous: the default case (init's header) exercises none of the state rules."""
    case, page_in, page_out = answers["default", True]
    state_rules = [r for r in RULES if r.case.startswith("state-")]
    assert state_rules and not any(r.shows(case, page_in, page_out) for r in state_rules)


@pytest.mark.parametrize("op", pack.BAD_OPS, ids=[f"{op:08x}" for op in pack.BAD_OPS])
def test_meshnb_answers_an_unknown_op_with_r_bad_op_and_changes_nothing(op: int) -> None:
    for name in ("err-pending-round", "pending-cluster-mismatch"):
        page = pack.start_pages()[name]
        buf = bytearray(page)
        ctx = Context(View(buf))
        assert program.task(ctx, op, 0x3E800000) == program.R_BAD_OP
        assert bytes(buf) == page


class _Exchange:
    """An exchange page in memory for members on threads (SPEC 9), whose rounds ``inject`` (``(k, n)``:
    system k's round n) time out once: the counter is published, then the round returns false."""

    def __init__(self, n: int, inject: set[tuple[int, int]]) -> None:
        self.n, self.inject = n, set(inject)
        self.counters = [0] * n
        self.slots = np.zeros((n, 2, 8), dtype=np.uint32)
        self.cv = threading.Condition()

    def member(self, k: int) -> _Member:
        return _Member(self, k)


@dataclass
class _Member:
    page: _Exchange
    k: int

    def set_slot(self, k: int, parity: int, words: np.ndarray) -> None:
        with self.page.cv:
            self.page.slots[k, parity] = words

    def round(self, n: int) -> bool:
        pg = self.page
        with pg.cv:
            pg.counters[self.k] = n
            pg.cv.notify_all()
            if (self.k, n) in pg.inject:
                pg.inject.discard((self.k, n))
                return False
            return pg.cv.wait_for(lambda: all(c >= n for c in pg.counters), timeout=60)

    def slot(self, m: int, parity: int) -> np.ndarray:
        with self.page.cv:
            return self.page.slots[m, parity].copy()


@pytest.mark.parametrize("name", ["state-timeout-resume", "state-timeout-group-of-one"])
def test_the_program_with_injected_timeouts_gives_the_pack_answer(name: str) -> None:
    """meshnb's program (``task``, the Python loop over any exchange), its members on threads, its rounds
    timing out where the case injects them, run by a host as case.json says: each timed-out TASK leaves
    ROUND, PENDING 1, ERR 1, NEXT_STEP at the unfinished step and PARAMS as before it (after zero steps
    too); the TASK after resumes the round; the final pages and the trace are the pack's answer."""
    case = pack.BY_NAME[name]
    expected = pack.run_case(case)
    ex = _Exchange(case.systems, {(k, case.step_base + at + 1) for k, at in case.timeouts})
    views = [bytearray(case.in_page()) for _ in range(case.systems)]
    seen: list[tuple[int, int, int, tuple[int, ...]]] = []
    traces: dict[int, np.ndarray] = {}

    def host(k: int) -> None:
        ctx = Context(View(views[k]), group=Group(k, case.systems), exchange=ex.member(k), trace=Trace(keep=True))
        done = 0
        while done < case.steps:
            spt = w(views[k], SPT)
            count = min(spt, case.steps - done)
            struct.pack_into("<I", views[k], SPT, count)
            params = bytes(views[k][:16])
            got = program.task(ctx, program.OP_TASK, w(views[k], NEXT))
            struct.pack_into("<I", views[k], SPT, spt)
            if got < count:  # timed out: the round pending, the page as the step before it left it
                v = bytes(views[k])
                seen.append((k, done + got, w(v, ROUND), (w(v, PENDING), w(v, ERR), w(v, NEXT))))
                assert got > 0 or v[:16] == params
            done += got
        traces[k] = ctx.trace.words

    threads = [threading.Thread(target=host, args=(k,)) for k in range(case.systems)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    want = sorted(
        (k, at, (case.step_base + at + 1) & 0xFFFFFFFF, (1, 1, (case.step_base + at) & 0xFFFFFFFF))
        for k, at in case.timeouts
    )
    assert sorted(seen) == want
    assert [bytes(v) for v in views] == expected.out_pages
    assert all(np.array_equal(traces[k], expected.trace) for k in range(case.systems))
