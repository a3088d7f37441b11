"""Benchmarks of the single-system paths and the baselines (issue 5, item 1).

Every path is checked bit for bit before it is timed: the baselines' traces against meshnb's
over ``sizes["verify"]`` steps from each start page, the kernels against the reference's
operations.  A warm-up call keeps JIT compilation out of the timed calls.  Inputs vary from one
timed call to the next (start pages with perturbed params, LR and step base; pools of params,
offsets and sums), so no bench measures one cached trajectory.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import meshnb
from meshnb import host, kernels, program
from meshnb.bench import cluster_reference_run, cluster_run
from meshnb.options import Plan
from meshnb.program import OP_TASK, Context, Trace
from meshnb.testing import reference as ref
from meshnb.view import View


def _words(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a, dtype=np.float32).view(np.uint32)


# ---------------------------------------------------------------------------------------------
# Kernels
# ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def samples() -> tuple[np.ndarray, np.ndarray]:
    return kernels.samples()


def _param_pool(n: int, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [ref.to_bits(rng.uniform(-1.5, 1.5, 4).astype(np.float32)).view(np.float32) for _ in range(n)]


def test_step_sums(benchmark, record, sizes, samples):
    """kernels.step_sums on a pool of params and offsets (ns per call)."""
    xs, ys = samples
    pool = list(zip(_param_pool(sizes["pool"], 1), (np.uint32(o) for o in range(sizes["pool"]))))
    for p, off in pool[:16]:  # bits first (and the warm-up call)
        got = kernels.step_sums(p, xs, ys, off)
        assert np.array_equal(_words(got), _words(ref.step_sums(p, xs, ys, int(off))))

    def calls() -> None:
        for p, off in pool:
            kernels.step_sums(p, xs, ys, off)

    record(benchmark, "step_sums", len(pool), unit="call")
    benchmark.group = "kernels"
    benchmark(calls)


def test_apply_and_loss(benchmark, record, sizes, samples):
    """kernels.apply then kernels.loss on a pool of params and sums (ns per pair of calls)."""
    xs, ys = samples
    params = _param_pool(sizes["pool"], 2)
    sums = [kernels.step_sums(p, xs, ys, np.uint32(i)) for i, p in enumerate(params)]
    lr, inv = np.float32(0.5), np.float32(1 / 32)
    for p, s in list(zip(params, sums))[:16]:  # bits first (and the warm-up call)
        want_p = ref.to_bits(ref.z_sub(p, ref.z_mul(lr, ref.z_mul(s[:4], inv))))
        want_l = ref.to_bits(ref.z_mul(s[4], inv))
        q = p.copy()
        kernels.apply(q, s, lr, inv)
        assert np.array_equal(_words(q), want_p)
        assert _words(np.float32(kernels.loss(s, inv)).reshape(1))[0] == want_l
    work = [(p.copy(), s) for p, s in zip(params, sums)]  # params drift a little each round

    def calls() -> None:
        for p, s in work:
            kernels.apply(p, s, lr, inv)
            kernels.loss(s, inv)

    record(benchmark, "apply+loss", len(work), unit="call")
    benchmark.group = "kernels"
    benchmark(calls)


# ---------------------------------------------------------------------------------------------
# One task (64 steps through meshnb.task on a Context)
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("with_trace", [True, False], ids=["trace", "notrace"])
def test_task(benchmark, record, sizes, starts, with_trace):
    """One TASK of STEPS_PER_TASK = 64 steps, through ``meshnb.task``, on rotating contexts."""
    page = starts[0].page
    check = Context(View(bytearray(page)), trace=Trace(keep=True))
    for _ in range(sizes["verify"] // 64):  # bits first (and the warm-up call)
        assert program.task(check, OP_TASK, check.view.word("NEXT_STEP")) == 64
    _, want = ref.run([page], sizes["verify"], grouped=False)
    assert np.array_equal(check.trace.words, want)

    contexts = itertools.cycle(
        [Context(View(bytearray(s.page)), trace=Trace() if with_trace else None) for s in starts]
    )

    def one_task() -> int:
        ctx = next(contexts)
        return program.task(ctx, OP_TASK, ctx.view.word("NEXT_STEP"))

    record(benchmark, "task" if with_trace else "task-notrace", 64)
    benchmark.group = "task"
    assert benchmark(one_task) == 64


# ---------------------------------------------------------------------------------------------
# A long single-system run, and the baselines of the same program
# ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def meshnb_traces(sizes, starts) -> list[np.ndarray]:
    """meshnb's trace words over ``sizes["verify"]`` steps from each verified start page."""
    return [
        meshnb.train(sizes["verify"], view_in=s.page, keep_trace=True).trace for s in starts[: sizes["verify_starts"]]
    ]


def _verify_reference(impl: str, sizes, starts, meshnb_traces) -> None:
    for s, want in zip(starts, meshnb_traces):
        pages, trace = ref.run([s.page], sizes["verify"], grouped=False, impl=impl)
        assert np.array_equal(trace, want), f"{impl} baseline differs from meshnb"
        assert ref.digest(pages[0]) == meshnb.train(sizes["verify"], view_in=s.page).digest


@pytest.mark.parametrize("one_task", [False, True], ids=["spt64", "one-task"])
def test_train_single(benchmark, record, sizes, starts, meshnb_traces, one_task):
    """meshnb.train of 10^6 steps (short: 10^4), one system, at STEPS_PER_TASK 64 or in one task."""
    n = sizes["run"]
    spt = n if one_task else None
    _verify_reference("numpy", sizes, starts, meshnb_traces)  # meshnb itself against numpy
    meshnb.train(64, view_in=starts[0].page, steps_per_task=spt)  # warm-up
    pages = itertools.cycle([s.page for s in starts])

    def setup():
        return (n,), {"view_in": next(pages), "steps_per_task": spt}

    record(benchmark, "single-one-task" if one_task else "single", n)
    benchmark.group = "single system"
    result = benchmark.pedantic(meshnb.train, setup=setup, rounds=sizes["rounds"], iterations=1)
    assert result.counters["steps"] == n


def test_train_single_without_trace(benchmark, record, sizes, starts):
    """The same 10^6-step run through the host's loop with no trace: what recording costs."""
    n = sizes["run"]
    plan = Plan(n)
    pages = itertools.cycle([s.page for s in starts])

    def setup():
        ctx = Context(View.from_bytes(next(pages)))
        return (ctx, plan), {}

    ctx, _ = setup()[0]
    host.drive(ctx, Plan(64))  # warm-up
    record(benchmark, "single-notrace", n)
    benchmark.group = "single system"
    assert benchmark.pedantic(host.drive, setup=setup, rounds=sizes["rounds"], iterations=1) == n


@pytest.mark.parametrize("impl", ["numpy", "python"])
def test_baseline(benchmark, record, sizes, starts, meshnb_traces, impl):
    """The reference implementation of the same program, verified against meshnb first."""
    _verify_reference(impl, sizes, starts, meshnb_traces)
    n = sizes[impl]
    pages = itertools.cycle([s.page for s in starts])

    def setup():
        return ([next(pages)], n), {"grouped": False, "impl": impl}

    record(benchmark, impl, n)
    benchmark.group = "single system"
    out, trace = benchmark.pedantic(ref.run, setup=setup, rounds=sizes["rounds"], iterations=1)
    assert trace.shape == (n, 5)


# ---------------------------------------------------------------------------------------------
# Fused cluster of 8; threads/processes rounds: test_bench_cluster.py
# ---------------------------------------------------------------------------------------------


def test_fused_8(benchmark, record, sizes, starts):
    """meshnb.train(systems=8, backend="fused"): time per lockstep step of the 8 systems."""
    for s in starts[: sizes["verify_starts"]]:  # bits first (and the warm-up call)
        assert cluster_run(s, sizes["verify"], "fused", 8) == cluster_reference_run(s, sizes["verify"], 8)
    n = sizes["fused"]
    it = itertools.cycle(starts)

    def setup():
        s = next(it)
        return (n,), {"systems": 8, "backend": "fused", "step_base": s.step_base, "set_lr": {0: np.uint32(s.lr_bits)}}

    record(benchmark, "fused-8", n, systems=8)
    benchmark.group = "cluster"
    result = benchmark.pedantic(meshnb.train, setup=setup, rounds=sizes["rounds"], iterations=1)
    assert len(result.systems) == 8
