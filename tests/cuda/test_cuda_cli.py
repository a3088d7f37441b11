"""gpu-check: its checks (meshnb.conformance.gpu), run small in the simulator, and the command
(meshnb.cli.cuda) that parses and prints them (it refuses the simulator itself:
tests/cuda/test_backend_cuda.py); the ptx audit command: tests/cuda/test_audit.py."""

from __future__ import annotations

import json

import numpy as np
import pytest

from meshnb.conformance import gpu, pack

from .conftest import needs_numba_cuda

pytestmark = needs_numba_cuda


def test_sweep_check_compares_a_sample_with_the_cpu_sweep():
    got = gpu.sweep_check(systems=3, steps=2, sample=2)
    assert got["pages_equal"] is True and got["trace_digests_equal"] is True
    assert (got["systems"], got["steps"], got["sampled"]) == (3, 2, 2)
    assert got["gpu_system_steps_per_s"] > 0 and got["cpu_system_steps_per_s"] > 0


QUICK = [pack.BY_NAME[n].sized(True) for n in ("steps-per-task-odd", "cluster-2")]
SHORT = [pack.Case(c.name, c.about, 6, 6, c.systems, c.grouped, 4, c.set_lr, c.step_base, c.page) for c in QUICK]


def test_pack_check_passes_the_image():
    assert gpu.pack_check(SHORT) == [("steps-per-task-odd", "PASS"), ("cluster-2", "PASS")]


def test_pack_check_fails_a_wrong_bit(monkeypatch):
    from meshnb.cuda import host

    real = host.run_cluster

    def one_bit_off(pages: np.ndarray, count: int, trace: np.ndarray, z: bool = True) -> None:
        real(pages, count, trace, z)
        pages[:, 1] ^= np.uint32(1)  # param b, one ulp

    monkeypatch.setattr(host, "run_cluster", one_bit_off)
    assert gpu.pack_check(SHORT[:1]) == [("steps-per-task-odd", "FAIL")]


@pytest.mark.parametrize(
    "argv",
    [
        ["gpu-check", "--systems", "x"],
        ["gpu-check", "--steps", "-1"],
        ["gpu-check", "--steps", "0"],
        ["gpu-check", "--systems", "0"],
        ["gpu-check", "--sample", "0"],
    ],
)
def test_gpu_check_bad_counts_exit_2(capsys, monkeypatch, argv):
    from meshnb.cli import main

    # refused up front: no pack runs (it would run for minutes on a device before the error)
    monkeypatch.setattr(gpu, "pack_check", lambda: pytest.fail("the pack ran"))
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("meshnb: error:") and err.count("\n") == 1 and "Traceback" not in err
    if argv[-1] == "0":
        assert err == f"meshnb: error: gpu-check: {argv[1]} must be at least 1, got 0\n"


@pytest.mark.parametrize("as_json", [False, True])
def test_gpu_check_output_as_on_a_device(capsys, monkeypatch, as_json):
    # The command as a device would run it, the device stood in by the simulator: its output and
    # exit code (the pack stood in by its result; pack_check itself is tested above).
    from meshnb.cli import main
    from meshnb.cuda import host

    monkeypatch.setattr(host, "simulated", lambda: False)
    monkeypatch.setattr(host.numba_cuda(), "is_available", lambda: True)
    monkeypatch.setattr(host, "device_name", lambda: "Stand-in GPU (sm_90)")
    monkeypatch.setattr(gpu, "pack_check", lambda: [("default", "PASS"), ("cluster-2", "PASS")])
    monkeypatch.setattr(gpu, "ieee_check", lambda: [("tiny-samples", "PASS"), ("nan-params", "PASS")])
    argv = ["gpu-check", "--systems", "3", "--steps", "2", "--sample", "2"] + ["--json"] * as_json
    assert main(argv) == 0
    out = capsys.readouterr().out
    if as_json:
        doc = json.loads(out.splitlines()[-1])
        assert doc["ok"] is True and doc["device"] == "Stand-in GPU (sm_90)"
        assert doc["sweep"]["pages_equal"] and doc["sweep"]["cpu_systems_timed"] == 3
        assert doc["ieee"] == {"tiny-samples": "PASS", "nan-params": "PASS"}
    else:
        lines = out.splitlines()
        assert lines[:3] == ["device: Stand-in GPU (sm_90)", "pack default: PASS", "pack cluster-2: PASS"]
        assert lines[3] == "ieee mode, 2 hard pages, NaN words as any NaN: PASS"
        assert lines[4] == "sweep: 3 systems x 2 steps; 2 sampled: pages equal, trace digests equal"
        assert lines[5] == "speed (system-steps per second):"
        assert lines[6].split()[:5] == ["gpu", "sweep", "3", "systems", "x"] and float(lines[6].split()[-1]) > 0
        assert lines[7].split()[:5] == ["cpu", "sweep", "3", "systems", "x"] and float(lines[7].split()[-1]) > 0
        assert lines[8].startswith("  gpu / cpu ") and lines[8].endswith("x")
        assert lines[9].startswith("gpu-check: PASS in ")


def test_ieee_check_nan_words_as_any_nan(monkeypatch):
    # two hard pages that end with NaN words in IEEE mode (the CPU keeps payloads): the device's
    # words pass with its own NaN in their places, and fail on a wrong bit elsewhere
    from meshnb.cuda import compare, host
    from meshnb.testing.pages import hard_pages

    pages = {n: p for n, p in hard_pages().items() if n in ("nan-payload-param", "nan-lr")}
    assert len(pages) == 2
    real = host.run_systems

    def gpu_nan(*a, **kw):
        r = real(*a, **kw)
        r.pages[compare.is_nan_word(r.pages)] = np.uint32(0x7FFFFFFF)
        return r

    monkeypatch.setattr(host, "run_systems", gpu_nan)
    assert gpu.ieee_check(2, pages) == [(n, "PASS") for n in pages]

    def wrong_bit(*a, **kw):
        r = gpu_nan(*a, **kw)
        r.pages[0, 16] ^= np.uint32(1)  # sample X[0]
        return r

    monkeypatch.setattr(host, "run_systems", wrong_bit)
    assert [v for _, v in gpu.ieee_check(2, pages)] == ["FAIL", "PASS"]
