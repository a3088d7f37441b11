"""meshnb.cuda.audit on committed PTX: numba-cuda's output (make_fixtures.py) and hand-written PTX,
each with the exact findings it must produce; meshnb's own kernels audit clean."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from meshnb.cuda import audit

from .conftest import needs_numba_cuda

PTX = Path(__file__).parent / "ptx"


def found(name: str) -> list[tuple[int, str, str, str]]:
    return [(v.line, v.function, v.instruction, v.kind) for v in audit.audit_file(PTX / name)]


def short(name: str) -> list[tuple[int, str, str]]:
    return [(line, instr, kind) for line, _, instr, kind in found(name)]


def test_default_numba_cuda_contracts_horner_into_an_fma():
    assert short("horner_default.ptx") == [(62, "fma.rn.f32", "contraction")]
    assert "horner" in found("horner_default.ptx")[0][1]


def test_fastmath_adds_the_hardware_flush():
    assert short("horner_fastmath.ptx") == [(62, "fma.rn.ftz.f32", "contraction"), (62, "fma.rn.ftz.f32", "flush")]


def test_a_python_float_constant_promotes_to_f64():
    # cvt.f64.f32 (line 53/55) is no finding by itself: the f64 arithmetic on the promoted values is
    assert short("promoted_f64.ptx") == [(54, "rcp.rn.f64", "double-rounding"), (56, "mul.f64", "double-rounding")]


HANDWRITTEN = [
    (45, "bad_ops", "add.f32", "unrounded"),
    (46, "bad_ops", "mul.f32", "unrounded"),  # predicated
    (47, "bad_ops", "sub.f32", "unrounded"),
    (48, "bad_ops", "mad.rn.f32", "contraction"),
    (49, "bad_ops", "fma.rn.f32", "contraction"),
    (50, "bad_ops", "add.rn.ftz.f32", "flush"),
    (51, "bad_ops", "div.approx.f32", "approximate"),
    (52, "bad_ops", "div.full.f32", "approximate"),
    (53, "bad_ops", "rcp.approx.ftz.f32", "flush"),
    (53, "bad_ops", "rcp.approx.ftz.f32", "approximate"),
    (54, "bad_ops", "sqrt.approx.f32", "approximate"),
    (55, "bad_ops", "ex2.approx.f32", "approximate"),
    (56, "bad_ops", "lg2.approx.f32", "approximate"),
    (57, "bad_ops", "sin.approx.f32", "approximate"),
    (58, "bad_ops", "cos.approx.f32", "approximate"),
    (59, "bad_ops", "setp.lt.ftz.f32", "flush"),
    (84, "f64_ops", "add.f64", "double-rounding"),
    (86, "f64_ops", "div.rn.f64", "double-rounding"),
    (90, "f64_ops", "sub.f64", "double-rounding"),
]


def test_handwritten_ptx_gives_exactly_its_marked_findings():
    assert found("handwritten.ptx") == HANDWRITTEN
    marked = [n for n, line in enumerate((PTX / "handwritten.ptx").read_text().splitlines(), 1) if "// F " in line]
    assert sorted({v[0] for v in HANDWRITTEN}) == marked


def test_clean_ops_bit_operations_and_sin_pi_are_no_findings():
    # clean_ops: .rn arithmetic, the flush's bit operations, shfl, abs/neg, cvt.rn, integer mad;
    # f64_ops lines 68-76: init's sin_pi (1 - |x| through a register constant, pi r)
    assert not [v for v in found("handwritten.ptx") if v[1] == "clean_ops" or 60 < v[0] < 80]


def test_sin_pi_reduction_is_a_finding_when_it_is_not_sin_pis():
    text = (PTX / "handwritten.ptx").read_text().replace("0d400921FB54442D18", "0d4000000000000000")  # 2 r, not pi r
    lines = [(v.line, v.instruction) for v in audit.audit_text(text) if v.kind == "double-rounding"]
    # 1 - |x|, 2 r and the square of 2 r are now f64 arithmetic on an f32 value, as the rest
    assert lines == [
        (76, "sub.f64"),
        (78, "mul.f64"),
        (79, "mul.rn.f64"),
        (84, "add.f64"),
        (86, "div.rn.f64"),
        (90, "sub.f64"),
    ]


@pytest.mark.parametrize(
    "data, match",
    [(b"int main() { return 0; }\n", "not PTX: no .version"), (b"\xff\xfe.version 8.0\n", "not ASCII")],
)
def test_not_ptx_is_one_line(tmp_path, data, match):
    p = tmp_path / "x.ptx"
    p.write_bytes(data)
    with pytest.raises(audit.PtxError, match=match):
        audit.audit_file(p)


def run_cli(capsys, *argv: str) -> tuple[int, str, str]:
    from meshnb.cli import main

    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_cli_exit_codes_and_json(capsys, tmp_path):
    code, out, err = run_cli(capsys, "ptx", "audit", str(PTX / "horner_default.ptx"), "--json")
    assert code == 1 and err == ""
    doc = json.loads(out)
    assert [{k: v[k] for k in ("line", "instruction", "class")} for v in doc["violations"]] == [
        {"line": 62, "instruction": "fma.rn.f32", "class": "contraction"}
    ]
    assert set(doc["violations"][0]) == {"file", "line", "function", "instruction", "class"}
    clean = tmp_path / "clean.ptx"
    clean.write_text(".version 8.0\n.visible .entry k()\n{\n\tadd.rn.f32 %f1, %f2, %f3;\n\tret;\n}\n")
    code, out, err = run_cli(capsys, "ptx", "audit", str(clean))
    assert (code, out, err) == (0, "0 findings in 1 PTX module\n", "")
    code, out, err = run_cli(capsys, "ptx", "audit", str(PTX / "handwritten.ptx"))
    assert code == 1 and out.count("\n") == len(HANDWRITTEN) + 1 and ":45: bad_ops: add.f32: unrounded" in out


@pytest.mark.parametrize(
    "argv, message",
    [
        (["ptx", "audit"], "give PTX files, or --meshnb"),
        (["ptx", "audit", "/nonexistent/x.ptx"], "FileNotFoundError"),
        (["ptx", "audit", str(Path(__file__).parent / "conftest.py")], "not PTX"),
    ],
)
def test_cli_bad_input_is_one_line_exit_2(capsys, argv, message):
    code, out, err = run_cli(capsys, *argv)
    assert code == 2 and out == "" and err.count("\n") == 1 and message in err and err.startswith("meshnb: error:")


@pytest.mark.slow
@needs_numba_cuda
def test_meshnb_kernels_audit_clean_for_sm80_and_sm90():
    # A process of its own: compile_ptx needs the simulator off, and these tests run with it on.
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    script = (
        "import json, re\n"
        "from meshnb.cuda import audit, ptx\n"
        "out = {}\n"
        "for cc in ptx.TARGETS:\n"
        "    for name, text in ptx.compile_meshnb(cc).items():\n"
        "        ops = re.findall(r'^\\s+([a-z][\\w.]*)', text, re.M)\n"
        "        out[f'{name}:{cc[0]}{cc[1]}'] = [len(audit.audit_text(text)), sorted(set(ops))]\n"
        "print(json.dumps(out))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    got = json.loads(done.stdout)
    assert set(got) == {"steps_kernel:80", "steps_kernel:90", "init_kernel:80", "init_kernel:90"}
    for name, (findings, ops) in got.items():
        assert findings == 0, name
        assert "add.rn.f32" in ops and "mul.rn.f32" in ops  # the arithmetic is there, explicitly rounded
        assert not [o for o in ops if o.endswith(".f32") and o.split(".")[0] in ("fma", "mad")]
        if name.startswith("steps"):
            assert "sub.rn.f32" in ops and "shfl.sync.bfly.b32" in ops
        else:  # the legitimate f64 of sin_pi is there, and known
            assert "div.rn.f32" in ops and "cvt.f64.f32" in ops and "sub.f64" in ops and "mul.f64" in ops
    code = subprocess.run(
        [sys.executable, "-m", "meshnb", "ptx", "audit", "--meshnb"], env=env, capture_output=True, text=True
    )
    assert code.returncode == 0 and code.stdout == "0 findings in 4 PTX modules\n"


def test_meshnb_without_numba_cuda_is_one_line(capsys, monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "numba_cuda" else real(name, *a))
    code, out, err = run_cli(capsys, "ptx", "audit", "--meshnb")
    assert (code, out) == (2, "")
    assert err == "meshnb: error: compiling meshnb's kernels needs numba-cuda: pip install 'meshnb[cuda]'\n"
