"""bench/test_bench_cuda.py's bit comparison (sweep_matches_cpu) run in the simulator, small: it
passes on the image and fails on a wrong bit (the bench itself needs a device)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np

from .conftest import needs_numba_cuda

pytestmark = needs_numba_cuda


def bench_module():
    path = Path(__file__).parents[2] / "bench" / "test_bench_cuda.py"
    spec = importlib.util.spec_from_file_location("meshnb_bench_cuda", path)
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_bench_comparison_passes_the_image_and_fails_a_wrong_bit(monkeypatch):
    from meshnb.cuda import host

    bench = bench_module()
    assert bench.sweep_matches_cpu(2, 3) is True
    real = host.run_systems

    def one_bit_off(*a, **kw):
        r = real(*a, **kw)
        r.pages[1, 2] ^= np.uint32(1)
        return r

    monkeypatch.setattr(host, "run_systems", one_bit_off)
    assert bench.sweep_matches_cpu(2, 3) is False


def test_a_zero_steps_per_task_is_refused_by_run_cluster():
    from meshnb.cuda import host
    from meshnb.sweeps import init_page
    from meshnb.view import WORD

    pages = np.frombuffer(init_page(), dtype="<u4").astype(np.uint32)[None, :].repeat(2, axis=0)
    pages[:, WORD["STEPS_PER_TASK"]] = 0
    trace = np.zeros((0, 5), dtype=np.uint32)
    import pytest

    with pytest.raises(ValueError, match="STEPS_PER_TASK is 0"):
        host.run_cluster(pages, 3, trace)
    host.run_cluster(pages, 0, trace)  # no steps: nothing to wrap, one task of none
