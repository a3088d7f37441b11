"""meshnb.conformance.sass: the machine code ptxas makes of committed PTX, mapped back to its lines.

Needs ptxas and nvdisasm (the [cuda] extra's nvidia-cuda-nvcc and nvidia-cuda-nvdisasm wheels);
skipped with that reason without them.  No GPU: ptxas assembles for any architecture."""

from __future__ import annotations

import collections
import os
import subprocess
import sys
from pathlib import Path

import pytest

from meshnb.conformance import sass

from .conftest import needs_numba_cuda

HERE = Path(__file__).parent


def _missing() -> str | None:
    try:
        sass.find_tools()
    except sass.SassUnavailable as e:
        return str(e)
    return None


needs_tools = pytest.mark.skipif(_missing() is not None, reason=f"{_missing()}")


def findings(name: str) -> dict[str, list[tuple[str, str]]]:
    out: dict[str, list[tuple[str, str]]] = collections.defaultdict(list)
    for f in sass.audit_sass((HERE / name).read_text()):
        out[f.function].append((f.sass, f.kind))
    return {k: sorted(v) for k, v in out.items()}


@needs_tools
def test_an_unrounded_pair_fused_by_ptxas_is_a_contraction():
    got = sass.audit_sass((HERE / "ptx" / "fuse.ptx").read_text())
    # one FFMA, on the mul's or the add's line; the .rn pair stays FMUL + FADD; div.rn's
    # MUFU.RCP + FFMA expansion (and its slow path) is no finding
    assert [(f.sass, f.kind) for f in got] == [("FFMA", "contraction")]
    assert got[0].line in (14, 15) and got[0].ptx in ("mul.f32", "add.f32") and got[0].function == "fuse"


@needs_tools
@pytest.mark.parametrize("name", ["variants_sm80.ptx", "variants_sm90.ptx"])
def test_nvrtc_variants_in_machine_code(name):
    got = findings(f"nvrtc/{name}")
    # by hand: the approximate intrinsics run on MUFU; the f64 work runs on the f64 units (ptxas
    # inlines the __noinline__ Horner into its caller and fuses pi r - r into a DFMA); naive's
    # FFMA comes from an fma.rn.f32 line (the PTX audit's finding), not from a fused pair;
    # spec4_sin_pi, per_op (div.rn, sqrt.rn expansions) and directed (no MUFU, no FTZ) are clean
    assert got == {
        "approx": [("MUFU.RCP", "approximate"), ("MUFU.SIN", "approximate")],
        "horner_f64_call": [("DFMA", "double-rounding")] * 3,
        "pi_r_squared": [("DADD", "double-rounding"), ("DMUL", "double-rounding"), ("DMUL", "double-rounding")],
        "pi_no_sine": [("DADD", "double-rounding"), ("DFMA", "double-rounding")],
        "pi_r_squared_and_sine": [("DFMA", "double-rounding")],  # p * p + sin p: the sine's own DFMAs are not
    }


@needs_tools
def test_fast_math_in_machine_code():
    assert findings("nvrtc/fast_sm80.ptx") == {
        "fast_math": [("FFMA.FTZ", "flush"), ("FMUL.FTZ", "flush"), ("MUFU.RCP", "approximate")]
    }


@needs_tools
def test_cli_sass_and_a_ptx_ptxas_refuses(capsys, tmp_path):
    from meshnb.cli import main

    assert main(["ptx", "audit", "--sass", str(HERE / "ptx" / "fuse.ptx")]) == 1
    out = capsys.readouterr().out.splitlines()
    assert [line.split(": ", 1)[1].split(" (")[0] for line in out[:2]] == [
        "fuse: mul.f32: unrounded",
        "fuse: add.f32: unrounded",
    ]
    assert out[2].split(": ", 1)[1] in ("fuse: FFMA <- mul.f32: contraction", "fuse: FFMA <- add.f32: contraction")
    assert out[3] == "3 findings (PTX and SASS) in 1 PTX module"
    bad = tmp_path / "new.ptx"
    bad.write_text(".version 99.0\n.target sm_80\n.address_size 64\n.visible .entry k()\n{\n\tret;\n}\n")
    assert main(["ptx", "audit", "--sass", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("meshnb: error: ptxas (sm_80) refused the PTX:") and err.count("\n") == 1


def test_without_the_tools_one_line(capsys, monkeypatch):
    from meshnb.cli import main

    monkeypatch.setattr(sass.shutil, "which", lambda name: None)
    monkeypatch.setattr(sass.sys, "path", [])
    with pytest.raises(sass.SassUnavailable, match="needs ptxas and nvdisasm"):
        sass.find_tools()
    assert main(["ptx", "audit", "--sass", str(HERE / "ptx" / "fuse.ptx")]) == 2
    assert capsys.readouterr().err == (
        "meshnb: error: the SASS audit needs ptxas and nvdisasm (CUDA toolkit): "
        "pip install 'meshnb[cuda]' (nvidia-cuda-nvcc, nvidia-cuda-nvdisasm)\n"
    )


@pytest.mark.slow
@needs_numba_cuda
@needs_tools
def test_meshnb_kernels_pass_the_sass_audit():
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    done = subprocess.run(
        [sys.executable, "-m", "meshnb", "ptx", "audit", "--meshnb", "--sass"],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stdout + done.stderr[-2000:]
    assert done.stdout == "0 findings (PTX and SASS) in 4 PTX modules\n"


@needs_tools
def test_a_tool_that_runs_too_long_is_one_line(monkeypatch):
    def too_long(cmd, **kw):
        raise subprocess.TimeoutExpired(cmd, kw.get("timeout"))

    monkeypatch.setattr(sass.subprocess, "run", too_long)
    with pytest.raises(RuntimeError, match=r"^ptxas ran over 600 s on this PTX$"):
        sass.audit_sass((HERE / "ptx" / "fuse.ptx").read_text())


def test_arch_of_reads_the_target():
    assert sass.arch_of(".version 8.5\n.target sm_90a\n.address_size 64\n") == "sm_90a"
    with pytest.raises(ValueError, match=r"^no \.target sm_XX in the PTX: ptxas needs an architecture$"):
        sass.arch_of(".version 8.5\n")
