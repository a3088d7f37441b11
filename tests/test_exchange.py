"""The exchange page (SPEC 9): its layout, rounds and slots on both waiters, timeouts, the abort,
and the program's resume path over a real page."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from meshnb.exchange import (
    EX_SLOT_WORDS,
    EXCHANGE_LAYOUT,
    HEADER_BYTES,
    SYSTEM_BYTES,
    BlockingWaiter,
    Exchange,
    ExchangeAborted,
    ExchangePage,
    Group,
    PageExchange,
    PollingWaiter,
    exchange_bytes,
)
from meshnb.program import OP_TASK, TIMEOUTS, Context, Trace, init, task
from meshnb.testing import reference as ref
from meshnb.view import View

from .util import tasks_in_turn

WAITERS = {"blocking": BlockingWaiter, "polling": PollingWaiter}


def test_the_layout_table_fits_and_does_not_overlap():
    for scope, size in (("page", HEADER_BYTES), ("system", SYSTEM_BYTES)):
        width = {"u8": 1, "u32": 4, "u64": 8}
        spans = sorted((f.offset, f.offset + width[f.dtype] * f.count) for f in EXCHANGE_LAYOUT if f.scope == scope)
        assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:])) and spans[-1][1] <= size
    fields = {f.name: f for f in EXCHANGE_LAYOUT}
    assert fields["COUNTER"].dtype == "u64" and fields["SLOT0"].count == fields["SLOT1"].count == EX_SLOT_WORDS
    assert exchange_bytes(3) == HEADER_BYTES + 3 * SYSTEM_BYTES


def test_a_page_writes_where_the_table_says():
    raw = np.zeros(exchange_bytes(2), dtype=np.uint8)
    page = ExchangePage(raw, 2, create=True)
    page.counters[1] = (1 << 64) - 2
    page.slots[1, 1] = np.arange(8, dtype=np.uint32) + 100
    at = HEADER_BYTES + SYSTEM_BYTES
    assert raw[at : at + 8].view("<u8")[0] == (1 << 64) - 2
    assert list(raw[at + 40 : at + 72].view("<u4")) == list(range(100, 108))
    assert raw[:4].view("<u4")[0] == 2
    with pytest.raises(ValueError, match="for 2 systems, not 3"):
        ExchangePage(np.concatenate([raw, np.zeros(SYSTEM_BYTES, dtype=np.uint8)]), 3)
    with pytest.raises(ValueError, match="needs"):
        ExchangePage(raw[:100], 2)
    assert isinstance(PageExchange(page, 0, 1.0, BlockingWaiter()), Exchange)


@pytest.mark.parametrize("waiter", sorted(WAITERS))
def test_members_in_lockstep_read_every_slot_of_every_round(waiter):
    n, rounds = 3, 300
    page = ExchangePage.new(n)
    w = WAITERS[waiter]()
    seen: list[list[int]] = [[] for _ in range(n)]
    completed: list[list[bool]] = [[] for _ in range(n)]  # asserted here: a thread's assert only warns

    def member(k: int) -> None:
        ex = PageExchange(page, k, 5.0, w)
        for r in range(1, rounds + 1):
            ex.set_slot(k, r % 2, np.array([k, r, 0, 0, 0, 0, 0, 0], dtype=np.uint32))
            completed[k].append(ex.round(r))
            # Two slots suffice: no member republishes this parity before every member read it.
            seen[k].append(sum(int(ex.slot(m, r % 2)[1]) == r for m in range(n)))

    threads = [threading.Thread(target=member, args=(k,)) for k in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not any(t.is_alive() for t in threads)
    assert completed == [[True] * rounds] * n
    assert seen == [[n] * rounds] * n
    assert list(page.counters) == [rounds] * n


@pytest.mark.parametrize("waiter", sorted(WAITERS))
def test_a_round_times_out_within_its_bound_and_completes_when_called_again(waiter):
    page = ExchangePage.new(2)
    w = WAITERS[waiter]()
    a, b = PageExchange(page, 0, 0.05, w), PageExchange(page, 1, 0.05, w)
    t0 = time.monotonic()
    assert a.round(1) is False
    assert 0.04 < time.monotonic() - t0 < 1.0
    assert b.round(1) is True  # a's counter is already 1
    assert a.round(1) is True  # the same round again: now complete
    assert page.behind(2) == [0, 1] and page.behind(1) == []


@pytest.mark.parametrize("waiter", sorted(WAITERS))
def test_an_abort_ends_a_wait_at_once(waiter):
    page = ExchangePage.new(2)
    ex = PageExchange(page, 0, 30.0, WAITERS[waiter]())
    threading.Timer(0.1, lambda: (page.abort(), ex.waiter.notify())).start()
    t0 = time.monotonic()
    with pytest.raises(ExchangeAborted, match="aborted while waiting for round 1"):
        ex.round(1)
    assert time.monotonic() - t0 < 2.0


@pytest.mark.parametrize("waiter", sorted(WAITERS))
def test_waiting_uses_no_core(waiter):
    page = ExchangePage.new(2)
    ex = PageExchange(page, 0, 0.5, WAITERS[waiter]())
    cpu = time.thread_time()
    assert ex.round(1) is False
    assert time.thread_time() - cpu < 0.1  # of 0.5 s waited


class RecordingExchange:
    """A member's exchange that records what the program asks of it."""

    def __init__(self, inner: PageExchange) -> None:
        self.inner, self.calls = inner, []

    def set_slot(self, k, parity, words):
        self.calls.append(("set_slot", parity))
        self.inner.set_slot(k, parity, words)

    def round(self, n):
        self.calls.append(("round", n))
        return self.inner.round(n)

    def slot(self, m, parity):
        return self.inner.slot(m, parity)


def test_the_program_times_out_once_then_resumes_the_round_on_a_real_page():
    """Two systems on one page, driven in turn on one thread: each task's round times out when
    the other has not published yet, stays pending, and the next task resumes it."""
    steps, page = 10, ExchangePage.new(2)
    exchanges = [RecordingExchange(PageExchange(page, k, 0.02, BlockingWaiter())) for k in range(2)]
    ctxs = [Context(View(), group=Group(k, 2), exchange=exchanges[k], trace=Trace()) for k in range(2)]
    for ctx in ctxs:
        init(ctx)
    v0 = ctxs[0].view
    assert task(ctxs[0], OP_TASK, 0) == 0  # round 1 published, nobody else there: timeout
    assert (v0.word("ERR"), v0.word("PENDING"), v0.word("ROUND"), v0.next_step) == (1, 1, 1, 0)
    assert ctxs[0].counters[TIMEOUTS] == 1
    exchanges[0].calls.clear()
    tasks_in_turn(ctxs, steps)
    # System 0's retry waited again for round 1 without publishing anything.
    assert exchanges[0].calls[0] == ("round", 1)
    for ctx in ctxs:
        assert ctx.counters[TIMEOUTS] >= 1 and ctx.view.word("ERR") == 0 and ctx.view.word("PENDING") == 0
    pages, trace = ref.run([ref.init_page(2, grouped=True)] * 2, steps, grouped=True)
    for ctx, want in zip(ctxs, pages):
        assert ctx.view.digest() == ref.digest(want) and ctx.view.next_step == steps
        assert ctx.trace.hexdigest() == ref.trace_digest(trace)


def test_exchange_page_counts_rounds_and_refuses_a_short_buffer():
    page = ExchangePage.new(2)
    assert page.counters.tolist() == [0, 0] and page.slots.shape == (2, 2, 8)
    page.counters[:] = [3, 2]
    assert (page.reached(2), page.reached(3), page.behind(3)) == (True, False, [1])
    with pytest.raises(ValueError, match="an exchange page of 3 systems needs 448 bytes, got 320"):
        ExchangePage(page.words32.view("uint8"), 3)


def test_an_abort_ends_a_wait_and_waiters_time_out():
    page = ExchangePage.new(2)
    member = PageExchange(page, 0, 1.0, BlockingWaiter())
    assert member.wait_more(1, time.perf_counter(), 0.001) is False  # the deadline has passed: a timeout
    assert BlockingWaiter().wait(lambda: False, 0.01) is False
    assert (PollingWaiter().wait(lambda: False, 0.01), PollingWaiter().nap(lambda: True, 1.0)) == (False, True)
    page.abort()
    with pytest.raises(ExchangeAborted, match=r"^system 0: the run was aborted while waiting for round 1$"):
        member.round(1)


def test_a_group_refuses_a_system_outside_it():
    from meshnb import Group

    with pytest.raises(ValueError, match=r"^system k=4 is not in a group of 4$"):
        Group(4, 4)
    with pytest.raises(ValueError, match=r"^a group has at least one system, got n=0$"):
        Group(0, 0)


def test_the_page_is_a_header_and_two_cache_lines_a_system_and_njit_reads_its_words():
    from meshnb.exchange import exchange_bytes, word_layout

    assert exchange_bytes(2) == 320
    assert word_layout().tolist() == [1, 8, 16, 18, 32, 8]  # ABORT, COUNTER, stride, SLOT0, stride, SLOT1 - SLOT0
