"""``meshnb.sweep(..., backend="cuda")`` and ``meshnb sweep --backend cuda``: the CUDA image (in the
simulator) gives every system the CPU sweep's bits: params, digests, trace digests, final pages."""

from __future__ import annotations

import numpy as np
import pytest

import meshnb
from meshnb.cli import main
from meshnb.testing.pages import hard_pages

from .conftest import needs_numba_cuda

pytestmark = needs_numba_cuda
STEPS = 3  # the simulator runs Python per thread: a few steps


def test_a_sweep_on_cuda_is_the_cpu_sweep():
    page = hard_pages()["tiny-samples"]
    kw = {
        "lrs": [0.5, 1e-3],
        "view_in": [meshnb.testing.reference.init_page(), page],
        "step_base": [0, 7, 1 << 32, 255],
    }
    cpu = meshnb.sweep(STEPS, trace=True, keep_pages=True, **kw)
    gpu = meshnb.sweep(STEPS, trace=True, keep_pages=True, backend="cuda", **kw)
    assert gpu.digests == cpu.digests and gpu.trace_digests == cpu.trace_digests
    assert np.array_equal(gpu.final_pages, cpu.final_pages) and np.array_equal(gpu.params_words, cpu.params_words)
    assert gpu.page(3) == cpu.page(3)  # a kept page; the CPU reruns none


def test_the_command_on_cuda_writes_the_cpus_table(capsys):
    argv = ["sweep", "--lr", "0.1:0.5:2", "--steps", str(STEPS), "--trace", "--csv", "-"]
    assert main(argv) == 0
    cpu = capsys.readouterr().out
    assert main([*argv, "--backend", "cuda"]) == 0
    assert capsys.readouterr().out == cpu


@pytest.mark.parametrize(
    ("kw", "message"), [({"loss_every": 1}, "loss_every"), ({"threads": 2}, "threads"), ({"backend": "tpu"}, "backend")]
)
def test_what_cuda_does_not_do_is_refused_by_name(kw, message):
    with pytest.raises(ValueError, match=message):
        meshnb.sweep(STEPS, lrs=[0.5], **({"backend": "cuda"} | kw))
