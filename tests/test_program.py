"""The program (SPEC 8): init, the ops, counters, 64-bit steps, the grouped loop with a page."""

from __future__ import annotations

import numpy as np
import pytest

from meshnb.exchange import Group
from meshnb.program import (
    INITS,
    OP_SET_LR,
    OP_TASK,
    R_BAD_OP,
    R_NONE,
    STEPS,
    TIMEOUTS,
    Context,
    Trace,
    init,
    task,
)
from meshnb.testing import reference as ref
from meshnb.view import View

from .util import hexes


def fresh(**kw) -> Context:
    ctx = Context(View(), **kw)
    init(ctx)
    return ctx


class OneSystemPage:
    """An exchange page for a group of one: a round completes at once, unless told to time out."""

    def __init__(self, fail_rounds: set[int] = frozenset()):
        self.slots = np.zeros((2, 8), dtype=np.uint32)
        self.counter = 0
        self.fail_rounds = set(fail_rounds)
        self.calls: list[tuple] = []

    def set_slot(self, k, parity, words):
        self.calls.append(("set_slot", parity))
        self.slots[parity] = words

    def round(self, n):
        self.calls.append(("round", n))
        if n in self.fail_rounds:
            self.fail_rounds.discard(n)
            return False
        self.counter = n
        return True

    def slot(self, m, parity):
        return self.slots[parity].copy()


def test_init_matches_reference_page_and_counts():
    ctx = fresh()
    assert ctx.view.tobytes() == ref.init_page(1)
    assert ctx.counter_dict() == {"inits": 1, "steps": 0, "timeouts": 0}
    grouped = fresh(group=Group(1, 4), exchange=OneSystemPage())
    assert grouped.view.tobytes() == ref.init_page(4, grouped=True)
    assert grouped.view.word("INV_BATCH") == 0x3C000000  # 1/128


def test_task_runs_steps_per_task_and_counts():
    ctx = fresh(trace=Trace())
    assert task(ctx, OP_TASK, 0) == 64
    assert ctx.view.next_step == 64 and ctx.counters[STEPS] == 64 and ctx.counters[INITS] == 1
    pages, trace = ref.run([ref.init_page(1)], 64, grouped=False)
    assert ctx.view.tobytes() == pages[0]
    assert ctx.trace.hexdigest() == ref.trace_digest(trace)


@pytest.mark.parametrize(
    "arg, stored",
    [
        (0x3F000000, 0x3F000000),
        (0x3A83126F, 0x3A83126F),
        (0x00400000, 0x00000000),
        (0x80000001, 0x80000000),  # subnormal -> signed zero
        (0x7FA00001, 0x7FFFFFFF),
        (0xFFC00000, 0x7FFFFFFF),  # NaN -> canonical
    ],
)
def test_set_lr_writes_ftz_from_bits(arg, stored):
    ctx = fresh()
    before = ctx.view.tobytes()
    assert task(ctx, OP_SET_LR, arg) == R_NONE
    assert ctx.view.word("LR") == stored
    after = ctx.view.tobytes()
    assert after[:16] + after[20:] == before[:16] + before[20:]


@pytest.mark.parametrize("op", [1, 2, 0xF, 0x11, 0xFFFFFFFF])
def test_unknown_op_returns_bad_op_and_changes_nothing(op):
    ctx = fresh()
    before, counters = ctx.view.tobytes(), ctx.counters.copy()
    assert task(ctx, op, 12345) == R_BAD_OP == 0xFFFFFFFF
    assert ctx.view.tobytes() == before and (ctx.counters == counters).all()


@pytest.mark.parametrize(
    "op, arg, error",
    [
        (-1, 0, ValueError),
        (1 << 32, 0, ValueError),
        (0, -5, ValueError),
        (0, 1 << 32, ValueError),
        ("0", 0, TypeError),
        (0, 1.0, TypeError),
        (True, 0, TypeError),
    ],
)
def test_malformed_op_or_arg_is_a_clear_error(op, arg, error):
    ctx = fresh()
    before = ctx.view.tobytes()
    with pytest.raises(error, match="u32"):
        task(ctx, op, arg)
    assert ctx.view.tobytes() == before


def test_step_base_across_two_to_the_32():
    ctx = fresh()
    ctx.view.next_step = (1 << 32) - 40
    ctx.view.set_word("LOSS", 0)
    for _ in range(2):
        task(ctx, OP_TASK, ctx.view.word("NEXT_STEP"))
    v = ctx.view
    assert v.word("STEP_HI") == 1 and v.word("NEXT_STEP") == 88 and v.next_step == (1 << 32) + 88
    # Step t writes LOSS[t mod 256]: steps 2^32-40 .. 2^32+87 cover indices 216..255 and 0..87.
    loss = v.array("LOSS")
    assert (loss[88:216] == 0).all() and (loss[:88] != 0).all() and (loss[216:] != 0).all()
    start = bytearray(ref.init_page(1))
    start[44:48] = (0).to_bytes(4, "little")
    start[28:32] = ((1 << 32) - 40).to_bytes(4, "little")
    pages, _ = ref.run([bytes(start)], 128, grouped=False)
    assert v.tobytes() == pages[0]


def test_step_hi_is_the_high_half_of_the_step_the_batch_uses():
    # Step 2^32 + 3 uses batch 3, like step 3, but the params differ from a run at step 3 only
    # through history; from the same page the two runs must give the same bits.
    a, b = fresh(), fresh()
    b.view.next_step = 5 << 32
    task(a, OP_TASK, 0)
    task(b, OP_TASK, 0)
    assert a.view.digest() == b.view.digest() and b.view.word("STEP_HI") == 5


def test_zero_step_task_writes_flushed_params_and_clears_err():
    ctx = fresh()
    v = ctx.view
    v.words[0:4] = [0x00000001, 0x807FFFFF, 0x7FA00000, 0x3F800000]
    v.set_word("STEPS_PER_TASK", 0)
    v.set_word("ERR", 1)
    assert task(ctx, OP_TASK, 0) == 0
    assert hexes(v.words[0:4]) == ["00000000", "80000000", "7fffffff", "3f800000"]
    assert v.word("ERR") == 0 and v.next_step == 0


def test_pending_round_is_dropped_without_a_group():
    ctx = fresh()
    ctx.view.set_word("PENDING", 1)
    ctx.view.set_word("ROUND", 1)
    task(ctx, OP_TASK, 0)
    assert ctx.view.word("PENDING") == 0 and ctx.view.word("ROUND") == 1


def test_group_of_one_matches_ungrouped_bits():
    page = OneSystemPage()
    g = fresh(group=Group(0, 1), exchange=page, trace=Trace())
    u = fresh(trace=Trace())
    for _ in range(3):
        task(g, OP_TASK, g.view.word("NEXT_STEP"))
        task(u, OP_TASK, u.view.word("NEXT_STEP"))
    assert g.view.tobytes() == u.view.tobytes()
    assert g.trace.hexdigest() == u.trace.hexdigest()
    assert page.calls[:2] == [("set_slot", 1), ("round", 1)]


def test_timed_out_round_stays_pending_and_resumes_without_recomputing():
    page = OneSystemPage(fail_rounds={11})  # the round of step 10
    ctx = fresh(group=Group(0, 1), exchange=page, trace=Trace())
    assert task(ctx, OP_TASK, 0) == 10
    v = ctx.view
    assert (v.word("ERR"), v.word("PENDING"), v.word("ROUND"), v.next_step) == (1, 1, 11, 10)
    assert ctx.counters[TIMEOUTS] == 1 and ctx.counters[STEPS] == 10
    page.calls.clear()
    assert task(ctx, OP_TASK, 10) == 64
    assert page.calls[0] == ("round", 11)  # waits again for the same round, publishes nothing
    assert page.calls[1] == ("set_slot", 0)  # then step 11 goes on as usual
    assert (v.word("ERR"), v.word("PENDING"), v.word("ROUND")) == (0, 0, 11)
    assert task(ctx, OP_TASK, 74) == 64
    # The same 138 steps without a timeout give the same bits.
    clean = fresh(group=Group(0, 1), exchange=OneSystemPage(), trace=Trace())
    for arg, n in ((0, 64), (64, 64), (128, 10)):
        clean.view.set_word("STEPS_PER_TASK", n)
        task(clean, OP_TASK, arg)
    assert ctx.view.digest() == clean.view.digest()
    assert ctx.trace.hexdigest() == clean.trace.hexdigest()
    assert ctx.view.next_step == clean.view.next_step == 138 and ctx.counters[STEPS] == 138


def test_pending_round_with_another_arg_is_dropped():
    page = OneSystemPage(fail_rounds={3})
    ctx = fresh(group=Group(0, 1), exchange=page)
    task(ctx, OP_TASK, 0)
    assert ctx.view.word("PENDING") == 1
    page.calls.clear()
    task(ctx, OP_TASK, 0)  # arg 0 does not match round 3: start again from step 0
    assert page.calls[0] == ("set_slot", 1) and ctx.view.word("PENDING") == 0


def test_run_tasks_on_page_is_the_task_calls_of_the_same_steps():
    from meshnb.exchange import ExchangePage, PageExchange, PollingWaiter
    from meshnb.program import run_tasks_on_page

    def member() -> Context:
        ex = PageExchange(ExchangePage.new(1), 0, 1.0, PollingWaiter())
        return fresh(group=Group(0, 1), exchange=ex, trace=Trace())

    fast, slow = member(), member()
    assert run_tasks_on_page(fast, 200, np.empty((200, 5), np.uint32)) == 200
    for spt in (64, 64, 64, 8):  # the TASK calls of the same steps
        slow.view.set_word("STEPS_PER_TASK", spt)
        task(slow, OP_TASK, slow.view.word("NEXT_STEP"))
    slow.view.set_word("STEPS_PER_TASK", 64)
    assert fast.view.words.tobytes() == slow.view.words.tobytes()
    assert fast.trace.hexdigest() == slow.trace.hexdigest()


def test_run_alone_and_inv_batch_and_round_policy():
    from meshnb.loops import grouped
    from meshnb.program import inv_batch, round_policy, run_alone

    ctx = fresh(trace=Trace())
    assert (run_alone(ctx, 100), ctx.view.next_step, ctx.trace.steps) == (100, 100, 100)
    assert (float(inv_batch(1)), hex(int(inv_batch(3).view("uint32")))) == (0.03125, "0x3c2aaaab")  # 1/96, to even
    assert round_policy(True, 10**6) & grouped.WAKE_SPIN == 0  # more members than CPUs
