"""The grouped loop on an exchange page in memory (meshnb.loops.grouped, GIL released): the same bits as
the per-step loop over any Exchange, a timed-out round resumed without republishing, an abort
ending a wait at once, more members than cores."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

import meshnb
from meshnb import loops
from meshnb.exchange import (
    EX_SLOT_WORDS,
    BlockingWaiter,
    ExchangeAborted,
    ExchangePage,
    Group,
    PageExchange,
    PollingWaiter,
)
from meshnb.loops import grouped as rounds
from meshnb.program import OP_TASK, STEPS, TIMEOUTS, Context, Trace, init, task
from meshnb.testing import reference as ref
from meshnb.testing.pages import hard_pages
from meshnb.view import View

from .util import tasks_in_turn


class PlainExchange:
    """A PageExchange that is not one: the program takes its per-step loop (``_run_grouped``)."""

    def __init__(self, inner: PageExchange) -> None:
        self.inner = inner

    def set_slot(self, k, parity, words):
        self.inner.set_slot(k, parity, words)

    def round(self, n):
        return self.inner.round(n)

    def slot(self, m, parity):
        return self.inner.slot(m, parity)


def run_cluster(page: bytes, n: int, z: bool, fast: bool, tasks: tuple[int, ...]) -> list[Context]:
    """``n`` members from ``page``, as threads, each running TASKs of ``tasks`` steps."""
    xpage, waiter = ExchangePage.new(n), BlockingWaiter()
    ctxs = []
    for k in range(n):
        ex = PageExchange(xpage, k, 30.0, waiter)
        ctxs.append(Context(View(bytearray(page)), group=Group(k, n), exchange=ex if fast else PlainExchange(ex), z=z))
        ctxs[-1].trace = Trace(keep=True)
    errors: list[BaseException] = []

    def member(ctx: Context) -> None:
        try:
            for steps in tasks:
                ctx.view.set_word("STEPS_PER_TASK", steps)
                assert task(ctx, OP_TASK, ctx.view.word("NEXT_STEP")) == steps
        except BaseException as e:  # noqa: BLE001 - re-raised below
            errors.append(e)
            xpage.abort()
            waiter.notify()

    threads = [threading.Thread(target=member, args=(c,)) for c in ctxs]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    return ctxs


@pytest.mark.slow
@pytest.mark.parametrize("z", [True, False, "flush"], ids=["z", "ieee", "z-without-daz"])
@pytest.mark.parametrize("n", [2, 3])
def test_the_fast_loop_gives_the_per_step_loops_bits_on_hard_pages(n, z, monkeypatch):
    if z == "flush":  # mode Z as on a CPU without DAZ: a flush after every op
        monkeypatch.setattr(loops, "loop_mode", lambda z: loops.Z if z else loops.IEEE)
        z = True
    calls = []
    run_page = rounds.run_page
    monkeypatch.setattr(rounds, "run_page", lambda *a: calls.append(1) or run_page(*a))
    tasks = (0, 37, 64, 1)  # a task of no steps writes PARAMS back too
    for name, page in hard_pages().items():
        page = bytes(page)
        fast = run_cluster(page, n, z, True, tasks)
        slow = run_cluster(page, n, z, False, tasks)
        for f, s in zip(fast, slow):
            assert f.view.tobytes() == s.view.tobytes(), name
            assert list(f.counters) == list(s.counters), name
            assert np.array_equal(f.trace.words, s.trace.words), name
        assert len({c.view.digest() for c in fast}) == 1, name
    assert len(calls) >= n * len(tasks) * len(hard_pages())  # the fast runs took the fast loop


def test_a_round_times_out_mid_task_and_resumes_without_republishing():
    """Two members on one page driven in turn on one thread: member 1 completes round 1 (member 0
    published it) and times out on round 2, mid-task; its retry waits for round 2 again."""
    steps, xpage = 8, ExchangePage.new(2)
    ctxs = [
        Context(View(), group=Group(k, 2), exchange=PageExchange(xpage, k, 0.02, BlockingWaiter()), trace=Trace())
        for k in range(2)
    ]
    for ctx in ctxs:
        init(ctx)
        ctx.view.set_word("STEPS_PER_TASK", steps)
    v0, v1 = ctxs[0].view, ctxs[1].view
    assert task(ctxs[0], OP_TASK, 0) == 0  # round 1 published, nobody else: a timeout
    assert (v0.word("ERR"), v0.word("PENDING"), v0.word("ROUND"), v0.next_step) == (1, 1, 1, 0)
    assert task(ctxs[1], OP_TASK, 0) == 1  # round 1 complete, round 2 published alone
    assert (v1.word("ERR"), v1.word("PENDING"), v1.word("ROUND"), v1.next_step) == (1, 1, 2, 1)
    assert ctxs[1].counters[TIMEOUTS] == 1 and ctxs[1].counters[STEPS] == 1
    assert list(xpage.counters) == [1, 2]
    # Member 1's published slot of round 2: its retry must not write it again.
    published = xpage.slots[1, 0].copy()
    assert published[5:].tolist() == [0] * (EX_SLOT_WORDS - 5)
    xpage.slots[1, 0] = 0xDEADBEEF
    v1.set_word("STEPS_PER_TASK", 1)
    assert task(ctxs[1], OP_TASK, 1) == 0  # the same round, still alone: not republished
    assert xpage.slots[1, 0].tolist() == [0xDEADBEEF] * EX_SLOT_WORDS
    assert (v1.word("PENDING"), v1.word("ROUND"), ctxs[1].counters[TIMEOUTS]) == (1, 2, 2)
    xpage.slots[1, 0] = published
    v1.set_word("STEPS_PER_TASK", steps)
    tasks_in_turn(ctxs, steps)
    pages, trace = ref.run([ref.init_page(2, grouped=True)] * 2, steps, grouped=True)
    for ctx, want in zip(ctxs, pages):
        assert ctx.view.word("ERR") == 0 and ctx.view.word("PENDING") == 0 and ctx.counters[STEPS] == steps
        assert ctx.view.digest() == ref.digest(want) and ctx.trace.hexdigest() == ref.trace_digest(trace)


@pytest.mark.parametrize("waiter", ["blocking", "polling"])
def test_an_abort_ends_a_wait_at_once(waiter):
    xpage = ExchangePage.new(2)
    w = BlockingWaiter() if waiter == "blocking" else PollingWaiter()
    ctx = Context(View(), group=Group(0, 2), exchange=PageExchange(xpage, 0, 30.0, w))
    init(ctx)
    ended: list[float] = []

    def member() -> None:
        with pytest.raises(ExchangeAborted):
            task(ctx, OP_TASK, 0)
        ended.append(time.monotonic())

    t = threading.Thread(target=member)
    t.start()
    time.sleep(0.3)  # past the spin: member 0 naps between looks at round 1
    assert t.is_alive() and int(xpage.counters[0]) == 1
    aborted = time.monotonic()
    xpage.abort()  # no notify: a nap ends within its bound (2 ms) either way
    t.join(5)
    assert ended and ended[0] - aborted < 0.1
    assert ctx.view.word("PENDING") == 0  # the task did not finish: the page was not written


def test_more_members_than_cores_finish_in_bounded_time():
    clean = meshnb.train(1000, systems=8, backend="fused")
    t0 = time.monotonic()
    r = meshnb.train(1000, systems=8, backend="threads")
    assert time.monotonic() - t0 < 20
    assert [s.digest for s in r.systems] == [s.digest for s in clean.systems]
    assert {s.trace_digest for s in r.systems} == {clean.systems[0].trace_digest}


# --- the door: run_page checks every argument before the loop trusts it ------------------------


def _page_args(n: int = 2, steps: int = 4) -> dict:
    """A valid run_page call for member 0 of ``n`` (keyword form), from a fresh exchange page."""
    from meshnb import kernels
    from meshnb.exchange import word_layout

    xpage = ExchangePage.new(n)
    words = np.frombuffer(ref.init_page(n, grouped=True), "<u4").copy()
    return dict(
        hdr=words[:12].copy(), tab=kernels.batches(words, True), loss_ring=words[kernels.W_LOSS : kernels.W_LOSS + 256],
        ex64=xpage.words64, ex32=xpage.words32, layout=word_layout(), k=0, n=n, base=0, steps=steps,
        state=np.zeros(2, dtype=np.uint64), trace=np.zeros((steps, 5), dtype=np.uint32), mode=loops.Z, spin=0,
    )  # fmt: skip


def test_run_page_runs_with_checked_arguments():
    args = _page_args()
    assert rounds.run_page(**args) == rounds.WAITING  # member 1 never publishes: the first wait gives up
    assert args["state"].tolist() == [0, 1]  # round 1 published


def test_run_page_refuses_a_short_trace_instead_of_writing_past_it():
    args = _page_args(n=1, steps=6)  # one member: no waiting, every step runs
    block = np.zeros((10, 5), dtype=np.uint32)
    args["trace"] = block[:5]
    with pytest.raises(ValueError, match=r"trace must be \[steps, 5\]"):
        rounds.run_page(**args)
    assert not block.any()
    args["trace"] = block[:6]
    assert rounds.run_page(**args) == rounds.DONE and block[:6].any() and not block[6:].any()


@pytest.mark.parametrize(
    "change, error, message",
    [
        ({"hdr": np.zeros(8, np.uint32)}, ValueError, "hdr, tab and loss_ring must be uint32.12."),
        ({"hdr": np.zeros(12, np.float32)}, TypeError, "'hdr' must be a writeable C-contiguous uint32 array"),
        ({"tab": np.zeros(100, np.float32)}, ValueError, "hdr, tab and loss_ring must be"),
        ({"loss_ring": np.zeros(512, np.uint32)[::2]}, TypeError, "'loss_ring' must be a writeable C-contiguous"),
        ({"k": 2}, ValueError, "needs 0 <= k < n"),
        ({"n": 0}, ValueError, "needs 0 <= k < n"),
        ({"k": -1}, ValueError, "k must be in 0"),
        ({"n": 40}, ValueError, "the exchange page is too small for n systems"),  # counters and slots past it
        ({"ex32": np.zeros(40, np.uint32)}, ValueError, "the exchange page is too small"),  # slots of system 1 past it
        ({"layout": np.zeros(5, np.int64)}, ValueError, "layout must be the 6 entries"),
        ({"layout": np.full(6, -1, np.int64)}, ValueError, "layout must be the 6 entries"),
        ({"state": np.zeros(3, np.uint64)}, ValueError, r"state must be \[steps done"),
        ({"state": np.array([9, 0], np.uint64)}, ValueError, r"state must be \[steps done <= steps"),
        ({"steps": -1}, ValueError, "steps must be in 0"),
        ({"trace": np.zeros((4, 6), np.uint32)}, ValueError, r"trace must be \[steps, 5\]"),
        ({"mode": 5}, ValueError, "mode must be"),
        ({"spin": 1.5}, TypeError, "spin must be an integer"),
        ({"policy": 16}, ValueError, "policy must be YIELD or FUTEX"),
        ({"policy": rounds.PRIVATE}, ValueError, "policy must be YIELD or FUTEX"),  # a private what?
    ],
    ids=lambda c: "-".join(c) if isinstance(c, dict) else None,
)
def test_run_page_refuses_bad_arguments(change, error, message):
    args = _page_args()
    args.update(change)
    before = args["ex32"].copy()
    with pytest.raises(error, match=message):
        rounds.run_page(**args)
    assert np.array_equal(args["ex32"], before)  # nothing published


def test_a_forced_z_daz_page_loop_is_refused_without_daz(monkeypatch):
    from meshnb import cpu

    monkeypatch.setattr(cpu, "HAS_DAZ", False)
    with pytest.raises(ValueError, match="Z_DAZ needs the x86 DAZ bit"):
        rounds.run_page(**{**_page_args(), "mode": loops.Z_DAZ})


@pytest.mark.parametrize("wait", ["yield", "futex", "futex-spin-yields", "futex-fixed", "futex-no-wake-spin"])
@pytest.mark.parametrize("backend", ["threads", "processes"])
def test_every_handover_policy_gives_the_fused_bits(monkeypatch, backend, wait):
    """MESHNB_ROUND_WAIT's candidates (docs/performance.md) wait differently and change no bit."""
    from meshnb.program import ROUND_WAIT_ENV, round_policy

    monkeypatch.setenv(ROUND_WAIT_ENV, wait)
    if wait != "yield" and rounds.POLICY == rounds.FUTEX:
        assert round_policy(backend == "threads") & rounds.FUTEX
    clean = meshnb.train(600, systems=3, backend="fused")
    r = meshnb.train(600, systems=3, backend=backend)
    assert [s.digest for s in r.systems] == [s.digest for s in clean.systems]
    assert {s.trace_digest for s in r.systems} == {clean.systems[0].trace_digest}


def test_a_spin_after_a_wake_is_learnt_apart_from_a_running_peers_pace():
    """Caught by the spin: up to twice the wait, at most WOKE_MAX_NS; missed: half, at least WOKE_MIN_NS."""
    assert rounds._learn_woke(50_000, 4_000) == 50_000
    assert rounds._learn_woke(50_000, 40_000) == 80_000
    assert rounds._learn_woke(150_000, 140_000) == rounds.WOKE_MAX_NS
    assert rounds._learn_woke(80_000, 90_000) == 40_000
    assert rounds._learn_woke(30_000, 900_000) == rounds.WOKE_MIN_NS


@pytest.mark.skipif(rounds.POLICY != rounds.FUTEX, reason="futexes are Linux's")
@pytest.mark.parametrize("sleeper", [False, True])
def test_a_member_that_wakes_a_sleeper_spins_its_wake_budget_and_keeps_its_pace(sleeper):
    """Member 0 of 2, its peer already far ahead (every wait ends at once): with a sleeper announced
    on member 0's counter each round wakes it, so the rounds teach WOKE_NS, not SPIN_NS."""
    from meshnb.exchange import word_layout

    args = _page_args(n=2, steps=4)
    lay, ex32, ex64 = args["layout"], args["ex32"], args["ex64"]
    ex64[lay[rounds._COUNTER0] + lay[rounds._COUNTER_STRIDE]] = np.uint64(1 << 40)  # member 1's: every round reached
    ex32[rounds._learnt(lay, 0)], ex32[rounds._woke(lay, 0)] = 5_000, 150_000
    ex32[rounds._waiters(lay, 0)] = 1 if sleeper else 0
    assert (lay == word_layout()).all()
    policy = rounds.FUTEX | rounds.PRIVATE | rounds.WAKE_SPIN
    status = rounds.run_page(**{**args, "spin": rounds.SPIN, "policy": policy})
    assert status == rounds.DONE and args["state"].tolist() == [4, 0]
    if sleeper:
        assert (ex32[rounds._learnt(lay, 0)], ex32[rounds._woke(lay, 0)]) == (5_000, 150_000)
    else:
        assert ex32[rounds._learnt(lay, 0)] < 5_000 and ex32[rounds._woke(lay, 0)] == 150_000


def test_run_page_tasks_runs_tasks_of_the_page_as_the_oracle():
    from meshnb import kernels
    from meshnb.exchange import word_layout
    from meshnb.view import WORD

    page = np.frombuffer(ref.init_page(1, grouped=True), np.uint32).copy()  # a group of one
    page[WORD["STEPS_PER_TASK"]] = 3  # tasks of 3 steps: 3 + 3 + 2
    words = page.copy()
    ex, state, trace = ExchangePage.new(1), np.zeros(4, np.uint64), np.zeros((8, kernels.NSUMS), np.uint32)
    args = (kernels.batches(words, True), ex.words64, ex.words32, word_layout(), 0, 1, 8, state)
    assert rounds.run_page_tasks(words, *args, np.zeros(12, np.uint32), trace, loops.loop_mode(True)) == rounds.DONE
    pages, want = ref.run([page.tobytes()], 8, grouped=True)
    assert words.tobytes() == pages[0] and (trace == want).all() and state.tolist() == [8, 0, 0, 0]
