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

Bits first: a sample of the timed sweep's systems against the CPU sweep, trace digests included
(:func:`sweep_matches_cpu`, itself tested in the simulator).  The PTX audit's speed (linear in its
input) is timed here too: it needs no device.
"""

from __future__ import annotations

import importlib
import importlib.util
import os

import numpy as np
import pytest

import meshnb
from meshnb.backend_table import BY_NAME
from meshnb.runspec import Run
from meshnb.samebits import array_bits, differences

CUDA = BY_NAME["cuda"]  # the backend table's row: its name, and the fused cluster timed within its block
FUSED_SYSTEMS = 8
assert CUDA.max_systems is not None and CUDA.max_systems >= FUSED_SYSTEMS


def _no_device() -> str | None:
    if importlib.util.find_spec("numba_cuda") is None:
        return "numba-cuda is not installed (the [cuda] extra)"
    if os.environ.get("NUMBA_ENABLE_CUDASIM", "0") not in ("", "0"):
        return "NUMBA_ENABLE_CUDASIM is on: the simulator is no device"
    if not importlib.import_module("numba.cuda").is_available():
        return "no CUDA device"
    return None


_REASON = _no_device()
needs_device = pytest.mark.skipif(_REASON is not None, reason=f"the CUDA benchmarks need a device: {_REASON}")


@pytest.fixture(scope="module")
def cuda_sizes(short: bool) -> dict[str, int]:
    if short:
        return {"systems": 4096, "steps": 256, "single": 4096, "fused": 1024, "rounds": 1}
    return {"systems": 1 << 20, "steps": 4096, "single": 1 << 16, "fused": 1 << 14, "rounds": 3}


def _start(m: int, steps: int) -> tuple[Run, np.ndarray, np.ndarray]:
    """The sweep's run (one page x M LRs, a step base each), its LR words and step bases."""
    from meshnb import sweeps

    lrs = sweeps.lr_words(np.geomspace(1e-4, 1.0, m).astype(np.float32))
    bases = np.arange(m, dtype=np.uint64) * np.uint64(7919)
    return sweeps.describe(steps, lrs=lrs, step_base=bases), lrs, bases


def sweep_matches_cpu(m: int, steps: int) -> bool:
    """M systems on the device against the CPU sweep: final pages and trace digests, bit for bit
    (tests/cuda/test_bench_cuda_compare.py runs this in the simulator)."""
    from meshnb.cuda import host

    run, lrs, bases = _start(m, steps)
    got = host.run_systems(run, trace=True)
    want = meshnb.sweep(steps, lrs=lrs, step_base=bases.astype(object).tolist(), trace=True, keep_pages=True)
    if want.final_pages is None:
        return False
    systems = range(m)
    return not differences(  # samebits: the comparison every harness shares
        array_bits(systems, page=got.pages, trace_digest=got.trace_digests),
        array_bits(systems, page=want.final_pages, trace_digest=want.trace_digests),
    )


@needs_device
def test_cuda_sweep_bits_before_timing() -> None:
    assert sweep_matches_cpu(64, 300)


@needs_device
def test_cuda_sweep(benchmark, record, cuda_sizes) -> None:
    from meshnb.cuda import host

    m, steps = cuda_sizes["systems"], cuda_sizes["steps"]
    run, lrs, bases = _start(m, steps)
    host.run_systems(_start(1, 1)[0])  # the compile stays out of the timing
    record(benchmark, f"cuda-sweep-{m}", m * steps, systems=m)
    benchmark.group = "cuda"
    benchmark.extra_info["device"] = host.device_name()
    benchmark.pedantic(lambda: host.run_systems(run), rounds=cuda_sizes["rounds"], iterations=1)


@needs_device
def test_cuda_single(benchmark, record, cuda_sizes) -> None:
    steps = cuda_sizes["single"]
    meshnb.train(1, backend=CUDA.name)
    record(benchmark, "cuda-single", steps)
    benchmark.group = "cuda"
    benchmark.pedantic(lambda: meshnb.train(steps, backend=CUDA.name), rounds=cuda_sizes["rounds"], iterations=1)


@needs_device
def test_cuda_fused_8(benchmark, record, cuda_sizes) -> None:
    steps = cuda_sizes["fused"]
    meshnb.train(1, systems=FUSED_SYSTEMS, backend=CUDA.name)
    record(benchmark, f"cuda-fused-{FUSED_SYSTEMS}", steps, systems=FUSED_SYSTEMS)
    benchmark.group = "cuda"
    benchmark.pedantic(
        lambda: meshnb.train(steps, systems=FUSED_SYSTEMS, backend=CUDA.name), rounds=cuda_sizes["rounds"], iterations=1
    )


AUDIT_BODY = ".version 8.0\n.target sm_90\n.address_size 64\n.visible .entry k()\n{\n%s\n}\n"


@pytest.mark.parametrize("shape", ["50MB-file", "300KB-line"])
def test_audit_speed(benchmark, shape: str) -> None:
    # linear in the input: a 50 MB module of instructions, a 300 KB line of spaces
    from meshnb.conformance import audit

    if shape == "50MB-file":
        text = AUDIT_BODY % ("\tadd.rn.f32 \t%f2, %f1, %f1;\n\tcvt.f64.f32 %fd1, %f2;\n" * 900_000)
    else:
        text = AUDIT_BODY % (" " * 300_000 + "fma.rn.f32 %f1, %f2, %f3, %f4;")
    benchmark.group = "ptx-audit"
    benchmark.extra_info["bytes"] = len(text)
    benchmark.pedantic(lambda: audit.audit_text(text), rounds=1, iterations=1)
