"""The ``cuda`` backend (meshnb.train(..., backend="cuda"), meshnb train --backend cuda) in the
simulator: one system and fused clusters of 1 to 3, digests and trace digests equal to the CPU's."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

import meshnb
from meshnb.cli import main
from meshnb.options import OptionError
from meshnb.testing import reference as ref
from meshnb.testing.pages import hard_pages

from .conftest import needs_numba_cuda

pytestmark = needs_numba_cuda
LR = np.uint32(0x3E800000)  # 0.25


def same(a: meshnb.RunResult, b: meshnb.RunResult) -> None:
    assert a.steps == b.steps and len(a.systems) == len(b.systems)
    for x, y in zip(a.systems, b.systems):
        assert x.page == y.page and x.digest == y.digest and x.trace_digest == y.trace_digest
        assert x.counters == y.counters
        np.testing.assert_array_equal(x.trace, y.trace)


def test_one_system_equals_the_cpu_host():
    kw = dict(view_in=hard_pages()["nan-lr"], set_lr={3: LR}, steps_per_task=4, step_base=(1 << 32) - 2)
    same(meshnb.train(7, backend="cuda", keep_trace=True, **kw), meshnb.train(7, keep_trace=True, **kw))


@pytest.mark.parametrize("n", [1, 2, 3])
def test_clusters_equal_the_fused_loop_and_the_reference(n):
    kw = dict(set_lr={2: LR}, steps_per_task=2, keep_trace=True, systems=n)
    got = meshnb.train(5, backend="cuda", **kw)
    same(got, meshnb.train(5, backend="fused", **kw))
    pages, trace = ref.run([ref.init_page(n, grouped=True)] * n, 2, grouped=True)
    first = meshnb.train(2, backend="cuda", systems=n, keep_trace=True)
    assert [s.page for s in first.systems] == pages
    assert first.systems[0].trace_digest == ref.trace_digest(trace)


def test_cluster_from_a_hard_page_and_zero_steps():
    page = hard_pages()["subnormal-inv-batch"]
    same(
        meshnb.train(3, backend="cuda", systems=2, view_in=page, keep_trace=True),
        meshnb.train(3, backend="fused", systems=2, view_in=page, keep_trace=True),
    )
    same(meshnb.train(0, backend="cuda", keep_trace=True), meshnb.train(0, keep_trace=True))


def test_checkpoint_and_resume_through_the_fused_run(tmp_path):
    ck = tmp_path / "run.ckpt"
    whole = meshnb.train(4, backend="cuda", systems=2)
    meshnb.train(4, backend="cuda", systems=2, checkpoint=ck)
    again = meshnb.train(4, backend="fused", resume=ck)  # a finished run resumes to its end: no steps
    assert [s.page for s in again.systems] == [s.page for s in whole.systems]


def test_options_refused_as_for_fused():
    with pytest.raises(OptionError, match="the cuda backend has no exchange"):
        meshnb.train(3, systems=2, backend="cuda", stalls=[(1, 0, 5)])
    with pytest.raises(ValueError, match="systems must be an integer from 1 to 32, got 33"):  # the backend table's
        meshnb.train(3, systems=33, backend="cuda")


def run_cli(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_cli_train_backend_cuda(capsys):
    for extra in ([], ["--systems", "2"]):
        code, out, err = run_cli(capsys, "train", "--steps", "3", "--backend", "cuda", "--json", *extra)
        assert code == 0, err
        backend = ["--backend", "fused"] if extra else []
        code, want, _ = run_cli(capsys, "train", "--steps", "3", "--json", *extra, *backend)
        strip = lambda doc: [{k: s[k] for k in ("params", "digest", "trace_digest")} for s in doc["systems"]]
        assert strip(json.loads(out)) == strip(json.loads(want))
    code, out, err = run_cli(capsys, "train", "--steps", "3", "--backend", "cuda", "--systems", "40")
    assert code == 2 and err.startswith("meshnb: error:") and err.count("\n") == 1


def test_gpu_check_refuses_the_simulator(capsys):
    code, out, err = run_cli(capsys, "gpu-check")
    assert code == 2 and out == "" and "gpu-check needs a device" in err and err.count("\n") == 1


@pytest.mark.skipif(bool(os.environ.get("MESHNB_TEST_HAS_GPU")), reason="this machine has a GPU")
def test_without_a_device_one_line_exit_2():
    # outside the simulator, on a machine with no GPU (CI): one line, no traceback
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    for argv in (["train", "--steps", "3", "--backend", "cuda"], ["gpu-check"]):
        done = subprocess.run([sys.executable, "-m", "meshnb", *argv], env=env, capture_output=True, text=True)
        assert done.returncode == 2 and done.stdout == ""
        assert (
            done.stderr
            == "meshnb: error: no CUDA device found (NUMBA_ENABLE_CUDASIM=1 runs the image in numba-cuda's simulator)\n"
        )
