"""The CUDA image in numba-cuda's simulator, bit for bit against the CPU (meshnb.train, the fused
loop, meshnb.testing.reference): hard pages, step bases, LR edge cases, independent systems.

The simulator runs every thread as a Python thread: a few steps each, a few systems.  What it
cannot show: the device's own arithmetic (libdevice's ``*_rn`` are stubs there, numpy float32
stands in: the PTX audit checks what the device runs instead), ``shfl_xor_sync`` (a shared-memory
butterfly with the same pairs stands in), the device's ``sin`` in init (compared here with the
simulator's libm), and launch sizes beyond a few blocks."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

import meshnb
from meshnb.runspec import describe
from meshnb.testing import reference as ref
from meshnb.testing.pages import hard_pages
from meshnb.view import VIEW_BYTES

from .conftest import needs_numba_cuda

pytestmark = needs_numba_cuda
WORDS = VIEW_BYTES // 4


@pytest.fixture(scope="module")
def host():
    from meshnb.cuda import host

    assert host.simulated()
    return host


def page_words(page: bytes) -> np.ndarray:
    return np.frombuffer(page, dtype="<u4").astype(np.uint32)


def cpu(steps: int, page: bytes, lr: int | None = None, base: int | None = None, z: bool = True):
    return meshnb.train(
        steps, view_in=page, set_lr=None if lr is None else {0: np.uint32(lr)}, step_base=base, z=z, keep_trace=True
    )


def test_init_kernel_writes_the_cpus_samples(host, fresh_page):
    assert np.array_equal(host.init_samples(), page_words(fresh_page)[16 : 16 + 512])


def test_hard_pages_bit_equal_to_train(host):
    # every hard page in one launch (a warp each), across a task boundary (STEPS_PER_TASK 2)
    pages = {name: bytearray(p) for name, p in hard_pages().items()}
    for p in pages.values():
        p[20:24] = (2).to_bytes(4, "little")
    words = np.stack([page_words(bytes(p)) for p in pages.values()])
    got = host.run_systems(describe(3, view_in=words), trace=True)
    for k, (name, p) in enumerate(pages.items()):
        want = cpu(3, bytes(p))
        assert got.pages[k].tobytes() == want.page, name
        assert got.trace_digests[k] == want.trace_digest, name
        assert got.last_loss_words[k] == page_words(want.page)[528 + 2], name


LR_EDGES = [0x3F000000, 0x00000001, 0x80400000, 0x7FC00001, 0xFF800000, 0x7F7FFFFF, 0xBF800000, 0x00000000]


def test_lr_edge_cases_and_step_bases(host, fresh_page):
    bases = [0, 0xFFFFFFFF, (1 << 32) + 5, 1 << 63, (1 << 64) - 4, 255, 7, 1 << 40]
    run = describe(3, view_in=fresh_page, lrs=np.array(LR_EDGES, dtype=np.uint32), step_base=np.array(bases, np.uint64))
    got = host.run_systems(run, trace=True)
    for k, (lr, base) in enumerate(zip(LR_EDGES, bases)):
        want = cpu(3, fresh_page, lr, base)
        assert got.pages[k].tobytes() == want.page, hex(lr)
        assert got.trace_digests[k] == want.trace_digest, hex(lr)


def test_systems_match_the_reference_oracle(host):
    page = hard_pages()["subnormal-and-nan-samples"]
    got = host.run_systems(describe(2, view_in=page), trace=True)
    pages, trace = ref.run([page], 2, grouped=False)
    assert got.pages[0].tobytes() == pages[0]
    assert got.trace_digests[0] == ref.trace_digest(trace)


def test_blocks_of_several_systems_and_launches_in_chunks(host, fresh_page):
    # 3 systems in blocks of 2 (a padding row), 5 steps in launches of 2: tasks cut, no bits changed
    lrs = np.array([0x3F000000, 0x3E000000, 0x3D000000], dtype=np.uint32)
    got = host.run_systems(describe(5, view_in=fresh_page, lrs=lrs, step_base=9), trace=True, chunk=2, per_block=2)
    for k in range(3):
        want = cpu(5, fresh_page, int(lrs[k]), 9)
        assert got.pages[k].tobytes() == want.page and got.trace_digests[k] == want.trace_digest


def test_ieee_mode(host):
    page = hard_pages()["tiny-samples"]
    got = host.run_systems(describe(2, view_in=page, z=False), trace=True)
    want = cpu(2, page, z=False)
    assert got.pages[0].tobytes() == want.page and got.trace_digests[0] == want.trace_digest
    assert got.pages[0].tobytes() != cpu(2, page).page  # mode Z matters on this page


def test_zero_steps_run_nothing_as_train(host):
    page = bytearray(hard_pages()["subnormal-params"])
    page[36:40] = (1).to_bytes(4, "little")  # PENDING: a task would drop it; no task runs
    got = host.run_systems(describe(0, view_in=bytes(page), step_base=5))
    assert got.steps == 0 and got.pages[0].tobytes() == cpu(0, bytes(page), base=5).page


def test_a_launch_of_no_steps_is_one_task_of_none(host):
    # the kernel's count = 0 (the backends' warm-up): PARAMS through the flush, PENDING dropped
    page = bytearray(hard_pages()["subnormal-params"])
    page[36:40] = (1).to_bytes(4, "little")
    got = page_words(bytes(page))[None, :].copy()
    want = got[0].copy()
    host.run_cluster(got, 0, np.empty((0, 5), np.uint32))
    meshnb.loops.run_tasks(want, 0, np.empty((0, 5), np.uint32), meshnb.loops.Z)
    assert np.array_equal(got[0], want) and got[0][0] == 0  # the subnormal param flushed


def test_a_stop_between_launches_gives_the_steps_done(host, fresh_page):
    seen: list[int] = []
    got = host.run_systems(
        describe(5, view_in=fresh_page),
        trace=True,
        chunk=2,
        on_chunk=seen.append,
        should_stop=lambda: len(seen) == 2,
    )
    want = cpu(4, fresh_page)
    assert seen == [2, 4] and got.steps == 4
    assert got.pages[0].tobytes() == want.page and got.trace_digests[0] == want.trace_digest


def test_runs_continue_across_cpu_and_device(host, fresh_page):
    whole = cpu(7, fresh_page)
    first = host.run_systems(describe(4, view_in=fresh_page))
    assert cpu(3, first.pages[0].tobytes()).page == whole.page
    second = host.run_systems(describe(3, view_in=cpu(4, fresh_page).page))
    assert second.pages[0].tobytes() == whole.page


def test_run_cluster_matches_the_fused_loop(host):
    n = 3
    pages = np.stack([page_words(ref.init_page(n, grouped=True))] * n)
    pages[:, 5] = 2  # STEPS_PER_TASK
    want, got = pages.copy(), pages.copy()
    tw, tg = np.empty((5, 5), np.uint32), np.empty((5, 5), np.uint32)
    meshnb.loops.run_fused(want, 5, tw, meshnb.loops.Z)
    host.run_cluster(got, 5, tg)
    assert np.array_equal(got, want) and np.array_equal(tg, tw)


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda h, p: h.run_systems(describe(1, view_in=p), per_block=33), "per_block must be"),
        (lambda h, p: h.run_systems(describe(1, view_in=p), 1), "lo must be an integer from 0 to 0, got 1"),
        (lambda h, p: h.run_systems(describe(1, lrs=[0.5, 0.25]), 1, 1), "hi must be an integer from 2 to 2, got 1"),
        (
            lambda h, p: h.run_systems(describe(1, group=2)),
            r"run_systems runs systems alone \(a run of group 0\), not clusters of 2: ",
        ),
        (lambda h, p: h.run_systems(describe(9, set_lr={4: 0.5})), "no set_lr during the run"),
        (lambda h, p: h.run_cluster(np.repeat(p, 33, axis=0), 1, np.empty((0, 5), np.uint32)), "1 to 32 systems"),
    ],
)
def test_bad_arguments_are_value_errors(host, fresh_page, call, match):
    with pytest.raises(ValueError, match=match):
        call(host, page_words(fresh_page)[None, :].copy())


def test_the_host_takes_a_run_not_pages(host, fresh_page):
    with pytest.raises(TypeError, match=r"run must be a meshnb\.runspec\.Run"):
        host.run_systems(page_words(fresh_page)[None, :])


@pytest.mark.parametrize(
    "keywords",
    [
        {"view_in": np.zeros((1, 10), np.uint32)},  # a page of 10 words
        {"lrs": [1e40]},  # beyond float32
        {"step_base": -1},
        {"steps": -1},
        {"step_base": (1 << 64) - 3, "steps": 3},  # the step counter's wrap
        {"step_base": [0, 1]},  # two bases for one system
    ],
)
def test_the_devices_run_is_refused_as_the_sweeps(host, keywords):
    """Issue 32: the CUDA host takes the run, no arrays of its own to check: a bad value is refused
    where the run is described, the same answer for the device's run and the CPU sweep's (which
    are one value), before the device is asked for."""
    keywords = {"steps": 3, **keywords}
    with pytest.raises((TypeError, ValueError)) as sweep_said:
        meshnb.sweep(**keywords)
    with pytest.raises(type(sweep_said.value)) as device_said:
        host.run_systems(describe(**keywords))
    assert str(device_said.value) == str(sweep_said.value)


def test_the_host_runs_the_runs_slice_as_the_sweep(host, fresh_page):
    """A slice of a run (a sweep's batch: ``lo .. hi-1``) is those systems of the whole run."""
    lrs = np.array([0x3F000000, 0x3E800000, 0x3E000000, 0x3D800000], dtype=np.uint32)
    run = describe(3, view_in=[fresh_page, cpu(2, fresh_page).page], lrs=lrs, step_base=[5, 6, 7, 8, 9, 10, 11, 12])
    part, whole = (
        host.run_systems(run, 3, 6, trace=True),
        meshnb.sweep(3, view_in=run.starts, lrs=lrs, step_base=run.base, trace=True, keep_pages=True),
    )
    assert part.steps == 3 and [p.tobytes() for p in part.pages] == [whole.page(k) for k in range(3, 6)]
    assert part.trace_digests == whole.trace_digests[3:6]


def test_a_page_with_no_steps_per_task_is_refused(host, fresh_page):
    p = page_words(fresh_page)[None, :].copy()
    p[0, 5] = 0
    with pytest.raises(ValueError, match="STEPS_PER_TASK is 0"):
        host.run_systems(describe(1, view_in=p))


def test_missing_numba_cuda_or_device_is_one_line(host, monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "numba_cuda" else real(name, *a))
    with pytest.raises(host.CudaUnavailable, match=r"^the CUDA image needs numba-cuda: pip install 'meshnb\[cuda\]'$"):
        host.require()
    monkeypatch.setattr(importlib.util, "find_spec", real)
    monkeypatch.setattr(host, "simulated", lambda: False)
    monkeypatch.setattr(host.numba_cuda(), "is_available", lambda: False)
    with pytest.raises(host.CudaUnavailable, match=r"^no CUDA device found"):
        host.require()


def test_trace_digest_is_sha256_of_the_words(host, fresh_page):
    got = host.run_systems(describe(2, view_in=fresh_page), trace=True)
    r = cpu(2, fresh_page)
    assert got.trace_digests[0] == hashlib.sha256(np.asarray(r.trace, "<u4").tobytes()).hexdigest()
