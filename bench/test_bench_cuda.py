"""The CUDA image on a device (issue 19): M systems at once, one system, a fused cluster.

Run (on a machine with an NVIDIA GPU, the ``[cuda]`` extra installed)::

    python -m pytest bench/test_bench_cuda.py --benchmark-only
    MESHNB_BENCH_SHORT=1 python -m pytest bench/test_bench_cuda.py --benchmark-disable -q   # smoke

Skipped, with the reason, without numba-cuda, in the simulator (``NUMBA_ENABLE_CUDASIM=1``: no
device; the simulator's speed means nothing) and without a device.  Paths:

- ``cuda-sweep-M``: :func:`meshnb.cuda.host.run_systems` of M systems (one warp each), pages in
  and out included (per system-step, as the CPU's ``sweep-1024``);
- ``cuda-single``: ``meshnb.train(steps, backend="cuda")``, one system (one warp: latency-bound);
- ``cuda-fused-8``: ``meshnb.train(steps, systems=8, backend="cuda")``.

Bits first: a sample of the timed sweep's systems against the CPU sweep, trace digests included.
"""

from __future__ import annotations

import importlib
import importlib.util
import os

import numpy as np
import pytest

import meshnb


def _no_device() -> str | None:
    if importlib.util.find_spec("numba_cuda") is None:
        return "numba-cuda is not installed (the [cuda] extra)"
    if os.environ.get("NUMBA_ENABLE_CUDASIM", "0") not in ("", "0"):
        return "NUMBA_ENABLE_CUDASIM is on: the simulator is no device"
    if not importlib.import_module("numba.cuda").is_available():
        return "no CUDA device"
    return None


_REASON = _no_device()
pytestmark = pytest.mark.skipif(_REASON is not None, reason=f"the CUDA benchmarks need a device: {_REASON}")


@pytest.fixture(scope="module")
def cuda_sizes(short: bool) -> dict[str, int]:
    if short:
        return {"systems": 4096, "steps": 256, "single": 4096, "fused": 1024, "rounds": 1}
    return {"systems": 1 << 20, "steps": 4096, "single": 1 << 16, "fused": 1 << 14, "rounds": 3}


def _start(m: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    from meshnb import sweeps

    page = np.frombuffer(sweeps.init_page(), dtype="<u4").astype(np.uint32)
    lrs = sweeps.lr_words(np.geomspace(1e-4, 1.0, m).astype(np.float32))
    bases = np.arange(m, dtype=np.uint64) * np.uint64(7919)
    return np.repeat(page[None, :], m, axis=0), lrs, bases


def test_cuda_sweep_bits_before_timing() -> None:
    from meshnb.cuda import host

    pages, lrs, bases = _start(64)
    got = host.run_systems(pages, lrs, bases, 300, trace=True)
    want = meshnb.sweep(300, lrs=lrs, step_bases=bases.astype(object).tolist(), trace=True)
    assert np.array_equal(got.pages, want.words) and got.trace_digests == want.trace_digests


def test_cuda_sweep(benchmark, record, cuda_sizes) -> None:
    from meshnb.cuda import host

    m, steps = cuda_sizes["systems"], cuda_sizes["steps"]
    pages, lrs, bases = _start(m)
    host.run_systems(pages[:1], lrs[:1], bases[:1], 1)  # the compile stays out of the timing
    record(benchmark, f"cuda-sweep-{m}", m * steps, systems=m)
    benchmark.group = "cuda"
    benchmark.extra_info["device"] = host.device_name()
    benchmark.pedantic(lambda: host.run_systems(pages, lrs, bases, steps), rounds=cuda_sizes["rounds"], iterations=1)


def test_cuda_single(benchmark, record, cuda_sizes) -> None:
    steps = cuda_sizes["single"]
    meshnb.train(1, backend="cuda")
    record(benchmark, "cuda-single", steps)
    benchmark.group = "cuda"
    benchmark.pedantic(lambda: meshnb.train(steps, backend="cuda"), rounds=cuda_sizes["rounds"], iterations=1)


def test_cuda_fused_8(benchmark, record, cuda_sizes) -> None:
    steps = cuda_sizes["fused"]
    meshnb.train(1, systems=8, backend="cuda")
    record(benchmark, "cuda-fused-8", steps, systems=8)
    benchmark.group = "cuda"
    benchmark.pedantic(
        lambda: meshnb.train(steps, systems=8, backend="cuda"), rounds=cuda_sizes["rounds"], iterations=1
    )
