"""meshnb.sweeps.run: every system of a sweep is bit-equal to its own ``meshnb.train``, whatever the
loop's shape, threads, chunks and batches.

Each check runs the sweep, then every system alone through ``meshnb.train`` (same page, SET_LR
before step 0, step base, float mode) and compares the final page, digest and trace digest; a few
systems also against the numpy reference.  Steps are > 256 where the loss ring's wrap matters,
M is never a multiple of a group, and the pages include every hard page.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

import meshnb
from meshnb import loops
from meshnb.interrupts import InterruptFlag
from meshnb.loops import sweep as sweep_loop
from meshnb.sweeps import SweepInterrupted, describe, init_page, stream, sweep
from meshnb.sweeps import run as sweep_run
from meshnb.sweeps.lanes import Lanes
from meshnb.sweeps.run import Runner, make_runner, parts, run_planned
from meshnb.testing import reference as ref
from meshnb.testing.pages import hard_pages

from ..util import ctrl_c_when, phase_reported
from .helpers import LR_WORDS, ROOT, alone, check_against_train


@pytest.mark.parametrize("z", [True, False], ids=["z", "ieee"])
def test_lr_sweep_equals_train_per_system(z: bool) -> None:
    steps = 300  # the loss ring wraps
    r = sweep(steps, lrs=LR_WORDS, z=z, trace=True, threads=2)
    assert len(r) == LR_WORDS.size == 17  # one full group and one lane of the next
    check_against_train(r, steps, [None], LR_WORDS, [None] * len(r), z)
    # LR as given: SET_LR writes ftz_from_bits(word) in mode Z, the word itself in IEEE mode.
    w = r.lr_words
    assert w[6] == (0 if z else 0x00400000) and w[8] == (0x7FFFFFFF if z else 0x7FC00001)


@pytest.mark.parametrize("z", [True, False], ids=["z", "ieee"])
def test_hard_pages_times_lrs_with_step_bases(z: bool) -> None:
    pages = list(hard_pages().values())
    lrs = np.array([0x3F000000, 0x3A83126F], dtype=np.uint32)
    m = len(pages) * lrs.size
    # Step bases in every residue mod 8, across 2^32, and one near the end of the step range.
    bases = [(k * 37 + 3) % 1000 for k in range(m)]
    bases[1], bases[2], bases[-1] = (1 << 32) - 5, (1 << 40) + 7, (1 << 64) - 2 - 270
    steps = 264
    r = sweep(steps, view_in=pages, lrs=lrs, step_base=bases, z=z, trace=True, threads=2)
    assert list(r.page_index[:3]) == [0, 0, 1] and list(r.lr_index[:3]) == [0, 1, 0]  # page-major
    check_against_train(r, steps, pages, lrs, bases, z)
    assert [int(b) for b in r.step_base] == bases


@pytest.mark.parametrize("z", [True, False], ids=["z", "ieee"])
def test_against_the_numpy_reference(z: bool) -> None:
    pages = hard_pages()
    chosen = [pages["tiny-params-underflow"], pages["overflow-then-inf-minus-inf"], init_page()]
    lr = 0x3E000000
    steps = 40
    r = sweep(steps, view_in=chosen, lrs=np.array([lr], dtype=np.uint32), z=z, trace=True)
    for k, page in enumerate(chosen):
        outs, tr = ref.run([page], steps, grouped=False, lr_changes={0: lr}, mode="z" if z else "ieee")
        assert r.page(k) == outs[0]
        assert r.trace_digests[k] == ref.trace_digest(tr)
        assert r.digests[k] == ref.digest(outs[0])


def _same(a, b) -> None:
    assert np.array_equal(a.final_pages, b.final_pages)
    assert a.trace_digests == b.trace_digests and a.digests == b.digests
    assert np.array_equal(a.loss_history.view(np.uint32), b.loss_history.view(np.uint32))


@pytest.mark.slow
def test_the_per_op_flush_loop_equals_the_daz_loop() -> None:
    """The mode-Z loop for CPUs without DAZ (a flush after every op), run here on purpose."""
    pages = list(hard_pages().values())
    systems = describe(150, view_in=pages, lrs=np.array([0x3F000000, 0x00400000, 0x3A83126F], np.uint32), step_base=5)
    daz = run_planned(systems, trace=True, loss_every=7, mode=loops.Z_DAZ, keep_pages=True)
    per_op = run_planned(systems, trace=True, loss_every=7, mode=loops.Z, keep_pages=True)
    _same(daz, per_op)
    one = alone(pages[3], 150, 0x3A83126F, 5, True)
    assert per_op.page(3 * 3 + 2) == one.page and per_op.trace_digests[11] == one.trace_digest


@pytest.mark.parametrize("shape", sweep_loop.SHAPES, ids=str)
@pytest.mark.parametrize("z", [True, False], ids=["z", "ieee"])
def test_every_shape_threads_chunks_and_batches_change_no_bits(z: bool, shape: sweep_loop.Shape) -> None:
    pages = [init_page(), hard_pages()["tiny-samples"], hard_pages()["subnormal-params"]]
    lrs = np.geomspace(1e-3, 1.2, 25).astype(np.float32)  # 75 systems: never a multiple of a group
    systems = describe(200, view_in=pages, lrs=lrs, z=z)
    kinds = Lanes(systems.words(0, 75), z, 200, 0, shape).arrays["tab_of"]
    assert (kinds < 0).any() and (kinds >= 0).any(), "groups of one shared table and groups of lane tables"
    runs = [
        dict(threads=1),
        dict(threads=2),
        dict(threads=3, chunk=33),  # chunks of 33 steps
        dict(threads=2, batch=20),  # 4 batches, the last of 15
    ]
    results = [run_planned(systems, trace=True, loss_every=10, keep_pages=True, shape=shape, **kw) for kw in runs]
    for other in results[1:]:
        _same(results[0], other)
    k = 2 * 25 + 24
    one = alone(pages[2], 200, np.float32(lrs[24]).view(np.uint32), None, z)
    assert results[0].page(k) == one.page and results[0].trace_digests[k] == one.trace_digest
    reference = run_planned(systems, trace=True, loss_every=10, keep_pages=True, shape=sweep_loop.Shape(16, 2))
    _same(results[0], reference)


def test_the_shape_follows_the_target() -> None:
    from meshnb.cpu import VectorShape

    assert sweep_loop.shape(VectorShape("avx512", 16, 32)) == sweep_loop.Shape(16, 1)
    assert sweep_loop.shape(VectorShape("avx2", 8, 16)) == sweep_loop.Shape(8, 1)
    assert sweep_loop.shape(VectorShape("neon", 4, 32)) == sweep_loop.Shape(8, 1)
    assert sweep_loop.shape(VectorShape("sse", 4, 16)) == sweep_loop.Shape(8, 1)


def test_one_shape_serves_every_size() -> None:
    one = str(sweep_loop.shape())
    assert {sweep(3, lrs=LR_WORDS[:m], threads=t).shape for m in (1, 5, len(LR_WORDS)) for t in (1, 2)} == {one}


_HASWELL = """
import json, numpy as np
from meshnb import cpu
from meshnb.loops import sweep as sweep_loop
from meshnb.sweeps import describe
from meshnb.sweeps.run import run_planned
from meshnb.testing.pages import hard_pages
pages = [hard_pages()["tiny-samples"], hard_pages()["subnormal-params"]]
out = {"shape": str(sweep_loop.shape()), "isa": cpu.target_shape().isa}
for z in (True, False):
    systems = describe(70, view_in=pages, lrs=np.geomspace(1e-3, 1.2, 9).astype(np.float32), z=z)
    r = run_planned(systems, trace=True, threads=2, shape=sweep_loop.shape())
    out[str(z)] = [r.digests, r.trace_digests, r.shape]
print(json.dumps(out))
"""


@pytest.mark.slow
def test_avx2_code_compiled_for_haswell_gives_the_same_bits(tmp_path) -> None:
    """The loop compiled for an AVX2 CPU (NUMBA_CPU_NAME=haswell, an empty numba cache) in a
    fresh process: every system's digests as this process's sweep and train."""
    env = {**os.environ, "NUMBA_CPU_NAME": "haswell", "NUMBA_CPU_FEATURES": "", "NUMBA_CACHE_DIR": str(tmp_path)}
    p = subprocess.run(
        [sys.executable, "-c", _HASWELL], capture_output=True, text=True, timeout=300, env=env, cwd=ROOT, check=False
    )
    assert p.returncode == 0, p.stderr
    got = json.loads(p.stdout)
    assert got["isa"] == "avx2" and got["shape"] == "8 lanes x 1"
    pages = [hard_pages()["tiny-samples"], hard_pages()["subnormal-params"]]
    lrs = np.geomspace(1e-3, 1.2, 9).astype(np.float32)
    for z in (True, False):
        digests, traces, shape = got[str(z)]
        assert shape == "8 lanes x 1"
        for k in range(len(digests)):
            one = alone(pages[k // 9], 70, np.float32(lrs[k % 9]).view(np.uint32), None, z)
            assert (digests[k], traces[k]) == (one.digest, one.trace_digest), (z, k)


def test_loss_history_is_every_nth_steps_loss() -> None:
    steps, every = 300, 3
    lrs = np.array([0.5, 0.05, 1.5], dtype=np.float32)
    r = sweep(steps, lrs=lrs, loss_every=every)
    assert r.loss_history.shape == (3, steps // every)
    assert list(r.loss_steps[:3]) == [2, 5, 8] and r.loss_steps[-1] == 299
    for k, lr in enumerate(lrs):
        bits = int(np.float32(lr).view(np.uint32))
        late, early = meshnb.train(steps, set_lr={0: np.uint32(bits)}), meshnb.train(150, set_lr={0: np.uint32(bits)})
        for j, t in enumerate(r.loss_steps):
            source = late if t >= steps - 256 else early
            assert r.loss_history[k, j].view(np.uint32) == source.loss[t % 256].view(np.uint32), (k, t)
    assert np.array_equal(r.loss_history[:, -1].view(np.uint32), r.last_loss.view(np.uint32))


def test_zero_steps_and_the_default_page() -> None:
    r = sweep(0, lrs=[0.25, 0.125])
    for k, lr in enumerate([0.25, 0.125]):
        one = meshnb.train(0, set_lr={0: np.uint32(np.float32(lr).view(np.uint32))})
        assert r.page(k) == one.page
    d = sweep(64)  # no lrs, no pages: one system from init, as meshnb.train(64)
    assert len(d) == 1 and d.page(0) == meshnb.train(64).page


def test_a_stopped_run_is_the_run_of_the_steps_done() -> None:
    systems = describe(1000, lrs=[0.5, 0.3, 0.2])
    calls = []
    r = run_planned(systems, trace=True, chunk=100, should_stop=lambda: len(calls) >= 3, on_chunk=calls.append)
    assert r.steps == 300 and calls == [300, 600, 900]  # system-steps done
    for k, lr in enumerate([0.5, 0.3, 0.2]):
        one = alone(None, 300, np.float32(lr).view(np.uint32), None, True)
        assert r.page(k) == one.page and r.trace_digests[k] == one.trace_digest


def test_a_stop_after_the_first_batch_keeps_the_finished_batches() -> None:
    systems = describe(100, lrs=np.geomspace(0.01, 0.5, 50).astype(np.float32))
    calls = []
    r = run_planned(systems, chunk=50, batch=20, should_stop=lambda: len(calls) >= 5, on_chunk=calls.append)
    assert r.steps == 100 and len(r) == 40  # batches 0 and 1 whole, batch 2 stopped after one chunk: dropped
    k = 33
    assert r.digests[k] == meshnb.train(100, set_lr={0: systems.lr[k]}).digest


def test_a_stop_at_any_chunk_of_any_batch_keeps_every_finished_system() -> None:
    """Issue 33's promise on the one loop over batches: 3 batches of 2 chunks, a stop after each of
    the 6 chunks (the last included) keeps the first batch's steps done, else the finished batches."""
    lrs = np.geomspace(0.01, 0.5, 50).astype(np.float32)
    systems = describe(100, lrs=lrs)
    whole, half = sweep(100, lrs=lrs), sweep(50, lrs=lrs)
    kept = {1: (20, 50), 2: (20, 100), 3: (20, 100), 4: (40, 100), 5: (40, 100), 6: (50, 100)}
    for after, (m, steps) in kept.items():
        calls: list[int] = []
        r = run_planned(
            systems, chunk=50, batch=20, should_stop=lambda a=after, c=calls: len(c) >= a, on_chunk=calls.append
        )
        assert (len(r), r.steps, len(calls)) == (m, steps, after), after
        assert r.digests == (half if steps == 50 else whole).digests[:m], after


def test_the_batch_loop_counts_a_step_as_its_weight_up_to_the_total() -> None:
    """An MPI rank's progress: a step of its batch counts every rank's batch of the round, and the
    bar never passes the sweep's system-steps."""
    seen: list[int] = []
    with Runner(describe(8, lrs=[0.5, 0.25, 0.125]), threads=1, chunk=4) as runner:
        got = list(parts(runner, [(0, 2), (2, 3)], seen.append, weight=4, total=50))
    assert [len(p) for p in got] == [2, 1] and seen == [16, 32, 48, 50]
    seen.clear()
    with Runner(describe(8, lrs=[0.5, 0.25, 0.125]), threads=1, chunk=4) as runner:
        list(parts(runner, [(0, 2), (2, 3)], seen.append))
    assert seen == [8, 16, 20, 24]  # a step counts the batch's systems
    with Runner(describe(8, lrs=[0.5, 0.25, 0.125]), threads=1, chunk=4) as runner:
        got = list(parts(runner, [(0, 2), (2, 3)], should_stop=lambda: True))
    assert [(len(p), p.steps) for p in got] == [(2, 0)]  # the stopped batch ends the loop: no batch after it


def test_the_runners_run_the_steps_of_their_run() -> None:
    """Issue 32: a runner takes the run and reads its steps there, the one copy (no ``steps`` beside
    it); a stopped batch is one that ran fewer than the run's steps."""
    systems = describe(9, lrs=[0.5, 0.25, 0.125])
    assert make_runner(systems, backend="cuda").steps == 9  # the device is needed by run only
    with make_runner(systems, threads=1, chunk=4) as runner:
        assert runner.steps == 9
        assert [(len(p), p.steps) for p in parts(runner, [(0, 2), (2, 3)])] == [(2, 9), (1, 9)]
    r = run_planned(systems, threads=1)
    assert r.steps == 9 and r.digests == sweep(9, lrs=[0.5, 0.25, 0.125]).digests
    for call in (lambda: Runner(systems, 9), lambda: run_planned(systems, 9), lambda: make_runner(systems, 9)):
        with pytest.raises(TypeError):  # the parameter is gone: a caller that still gives it hears so
            call()


@pytest.fixture(params=["python", "ignored", "remembered", "raised"])
def callers_sigint(request: pytest.FixtureRequest) -> Iterator[object]:
    """The SIGINT handler a library sweep's caller has: Python's (KeyboardInterrupt), SIGINT ignored
    (a job a shell started with ``&``: the final CI run's), meshnb's flag that only remembers it, and
    the one that raises (the program's)."""
    handler: object = {
        "python": signal.default_int_handler,
        "ignored": signal.SIG_IGN,
        "remembered": InterruptFlag(),
        "raised": InterruptFlag(raising=True),
    }[request.param]
    previous = signal.signal(signal.SIGINT, handler)  # type: ignore[arg-type]
    try:
        yield handler
    finally:
        signal.signal(signal.SIGINT, previous)


def test_a_ctrl_c_after_the_last_chunk_keeps_every_system_whatever_the_callers_handler(
    monkeypatch: pytest.MonkeyPatch, callers_sigint: object
) -> None:
    """Issue 33 in the library: a Ctrl-C after the last chunk (held: no boundary came after it) is
    SweepInterrupted with every system. It was only handed on to the caller's handler at the run's
    exit, so a caller that ignores SIGINT or only remembers it got a result as if no one had asked
    for a stop (the final CI run, started in the background: DID NOT RAISE SweepInterrupted)."""
    lrs = np.geomspace(1e-3, 1, 50).astype(np.float32)
    whole = sweep(16, lrs=lrs)
    monkeypatch.setattr(sweep_run, "phase", lambda name: name == "sweep-ran" and signal.raise_signal(signal.SIGINT))
    with pytest.raises(SweepInterrupted) as stop:
        sweep(16, lrs=lrs)
    assert len(stop.value.result) == 50 and stop.value.result.steps == 16
    assert stop.value.result.digests == whole.digests
    assert signal.getsignal(signal.SIGINT) is callers_sigint  # the caller's handler, back


def test_stream_yields_the_sweep_in_parts() -> None:
    lrs = np.geomspace(1e-3, 1.0, 70).astype(np.float32)
    whole = sweep(90, lrs=lrs, trace=True, loss_every=9)
    got = list(stream(90, lrs=lrs, trace=True, loss_every=9, batch=32))
    assert [(p.first, len(p)) for p in got] == [(0, 32), (32, 32), (64, 6)]
    for p in got:
        assert p.digests == whole.digests[p.first : p.first + len(p)]
        assert p.trace_digests == whole.trace_digests[p.first : p.first + len(p)]
        assert np.array_equal(p.loss_history, whole.loss_history[p.first : p.first + len(p)])
    assert got[2].page(3) == meshnb.train(90, set_lr={0: np.uint32(np.float32(lrs[67]).view(np.uint32))}).page


def test_the_page_is_made_again_unless_kept() -> None:
    kept = sweep(300, lrs=LR_WORDS[:5], keep_pages=True)
    again = sweep(300, lrs=LR_WORDS[:5])
    assert again.final_pages is None and kept.final_pages.shape == (5, 4096)
    assert [again.page(k) for k in range(5)] == [kept.page(k) for k in range(5)]
    with pytest.raises(IndexError, match="system 5"):
        again.page(5)


def test_the_old_names_warn_and_mean_the_same() -> None:
    pages = [init_page()]
    with pytest.warns(DeprecationWarning, match="view_in"):
        a = sweep(20, pages=pages, lrs=[0.5])
    with pytest.warns(DeprecationWarning, match="step_base"):
        b = sweep(20, lrs=[0.5], step_bases=3)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert sweep(20, view_in=pages, lrs=[0.5]).digests == a.digests
        assert sweep(20, lrs=[0.5], step_base=3).digests == b.digests
    with pytest.raises(TypeError, match="not both"):
        sweep(20, view_in=pages, pages=pages)


def test_an_in_memory_result_that_would_not_fit_is_refused_up_front() -> None:
    with pytest.raises(ValueError, match=r"in-memory sweep of 3 systems needs about 12.0 PiB, more .*; stream") as e:
        sweep(1 << 50, lrs=[0.1, 0.2, 0.3], loss_every=1)  # a loss history of 2^50 steps a system
    assert "\n" not in str(e.value)


def test_interrupt_raises_with_the_finished_chunks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    log = tmp_path / "phases"  # the first chunk done is the moment the Ctrl-C waits for
    monkeypatch.setenv("MESHNB_TEST_PHASES", str(log))
    with ctrl_c_when(phase_reported(log, "stepped")), pytest.raises(SweepInterrupted) as e:
        sweep(10**9, lrs=[0.5, 0.25])
    r = e.value.result
    assert 0 < r.steps < 10**9 and len(r) == 2
    assert r.digests[1] == meshnb.train(r.steps, set_lr={0: np.uint32(0x3E800000)}).digest


def test_the_device_keyword_is_the_backend_keyword_deprecated() -> None:
    with pytest.warns(DeprecationWarning, match="backend="):
        old = sweep(5, lrs=[0.5], device="cpu")
    assert old.digests == sweep(5, lrs=[0.5], backend="cpu").digests == sweep(5, lrs=[0.5]).digests
    with pytest.warns(DeprecationWarning, match="backend 'threads' is 'cpu' now"):
        assert sweep(5, lrs=[0.5], backend="threads").digests == old.digests  # issue 23's name for the CPU
    with pytest.raises(TypeError, match="not both"):
        sweep(5, backend="cpu", device="cpu")
    with pytest.raises(meshnb.OptionError, match="backend must be one of cpu, cuda"):
        sweep(5, backend="fused")
    with pytest.raises(meshnb.OptionError, match="leave loss_every and threads out"):
        sweep(5, backend="cuda", loss_every=2)


def test_stream_takes_the_backend_and_a_progress_bar(capfd) -> None:
    parts = list(stream(40, lrs=[0.5, 0.25, 0.125], batch=2, progress=True, backend="cpu"))
    assert [len(p) for p in parts] == [2, 1]
    assert "sweep of 3" in capfd.readouterr().err
    with pytest.raises(meshnb.OptionError, match="batch must be an integer from 1"):
        stream(4, batch=0)
    with pytest.raises(TypeError, match="progress must be True or False"):
        stream(4, progress="yes")


@pytest.mark.parametrize("chunk", [7, 16, 64])  # a chunk's trace ends mid-block, on a block, over blocks
def test_trace_digests_of_a_large_batch_hashed_in_lanes_are_those_of_hashlib(chunk: int) -> None:
    """A batch of NJIT_DIGEST_ROWS systems or more, its groups the hash's lanes: the trace digests
    hashed from the loop's buffer (TraceHashes) equal those of the rows hashed with hashlib (a shape
    whose groups are not the hash's lanes), and, for a few systems, those of meshnb.train alone;
    chunks of uneven lengths, and a stop after some of them."""
    from meshnb import sha256
    from meshnb.runspec import NJIT_DIGEST_ROWS
    from meshnb.sweeps.finish import TraceHashes

    lanes_shape = sweep_loop.Shape(sha256.LANES, 1)
    other = sweep_loop.Shape(24 - sha256.LANES, 1)  # 8 where the hash has 16 lanes, 16 where it has 8
    if sha256.ROWS_KERNEL != "lanes":
        pytest.skip("the lanes kernel is not the one in use on this CPU (SHA-NI a row at a time is)")
    lrs = np.geomspace(1e-3, 1.0, NJIT_DIGEST_ROWS + 51).astype(np.float32)
    systems = describe(45, lrs=lrs)
    assert TraceHashes.fits(Lanes.of_systems(systems, 0, len(lrs), 45, 0, lanes_shape))
    assert not TraceHashes.fits(Lanes.of_systems(systems, 0, len(lrs), 45, 0, other))
    calls: list[int] = []
    stop = dict(should_stop=lambda: len(calls) >= 3, on_chunk=calls.append) if chunk == 7 else {}
    got = run_planned(systems, trace=True, threads=2, chunk=chunk, shape=lanes_shape, **stop)
    calls.clear()
    want = run_planned(systems, trace=True, threads=2, chunk=chunk, shape=other, **stop)
    assert got.steps == want.steps == (21 if chunk == 7 else 45)
    assert got.trace_digests == want.trace_digests and got.digests == want.digests
    for k in (0, 777, len(lrs) - 1):
        one = alone(None, got.steps, np.float32(lrs[k]).view(np.uint32), None, True)
        assert got.trace_digests[k] == one.trace_digest


def test_runner_parts_kept_and_interrupted() -> None:
    with Runner(describe(64, lrs=[0.5, 0.25, 0.125]), threads=1) as runner:
        part = runner.run(1, 3)
        assert runner.run(0, 2, should_stop=lambda: True).steps == 0  # stopped before the first chunk
    assert (len(part), part.first, part.steps) == (2, 1, 64)
    seen: list[int] = []
    with Runner(describe(8, lrs=[0.5, 0.25, 0.125]), threads=1) as runner:
        got = [(p.first, len(p), p.steps) for p in parts(runner, [(0, 2), (2, 3)], seen.append)]
    assert (got, seen) == ([(0, 2, 8), (2, 1, 8)], [16, 24])
    part = run_planned(describe(8), threads=1)
    kept = [sweep_run.kept(i, part, steps) for i, steps in ((0, 8), (1, 8), (0, 9), (1, 9))]
    assert kept == [True, True, True, False]
    r = sweep(8, lrs=[0.5, 0.25])
    assert sweep_run.interrupted(r, 8, 2) is r
    with pytest.raises(SweepInterrupted):
        sweep_run.interrupted(r, 9, 2)


def test_make_runner_picks_the_backend_and_refuses_cpu_options_on_cuda() -> None:
    assert type(make_runner(describe(64), backend="cuda")).__name__ == "CudaRunner"
    with pytest.raises(meshnb.OptionError, match="backend='cuda' keeps no loss history and runs no CPU threads"):
        make_runner(describe(64), backend="cuda", threads=2)
    r = run_planned(describe(64, lrs=[0.5, 0.25]), threads=1)
    assert (len(r), r.steps, r.digests == sweep(64, lrs=[0.5, 0.25]).digests) == (2, 64, True)
