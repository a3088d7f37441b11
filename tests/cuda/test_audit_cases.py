"""The PTX audit measured on CUDA C++ it was not tuned to (tests/cuda/cases/: NVRTC's PTX of CUDA C++
written as executor teams write it, half keeping float mode Z and half breaking it, each verdict and
its reason in manifest.json, written before the audit was changed for them).

A case's verdict is the audit's exit status on its file alone: ``clean`` (0) or ``violating`` (1).
The confusion matrix of the audit over the cases is recorded here and in docs/guide/gpu.md; a case
the audit gets wrong is an xfail (strict: the day it is fixed, the test says so)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from meshnb.cli import main
from meshnb.conformance import audit

CASES = Path(__file__).parent / "cases"
MANIFEST: dict[str, dict[str, object]] = json.loads((CASES / "manifest.json").read_text())

# the cases the audit gets wrong (each a strict xfail until the audit is fixed for it): none now
WRONG: dict[str, str] = {}

# what the audit got wrong before it judged instructions on their operands and followed or reported
# memory (the opcode allow-table, 2026-12-07), kept with the reason
BEFORE_WRONG: dict[str, str] = {
    "c_copysign": "copysign.f32 refused by opcode (it moves the sign bit only)",
    "c_double_literal_add": "add.f32 with no multiply to fuse with called unrounded",
    "c_double_literal_half": "mul.f32 with no add to fuse with called unrounded",
    "c_f64_product": "the exact f64 product of two floats, rounded once, called double rounding",
    "c_f64_product_shared": "the exact f64 product through shared memory, rounded once, called double rounding",
    "c_f64_sub": "a - b once in f64, rounded once (innocuous), called double rounding",
    "c_fma_neg_zero": "fma with the addend -0.0 (a multiply) called a contraction",
    "c_fma_one_asm": "fma with the multiplier 1.0 (an add) called a contraction",
    "c_fma_one_reg": "fma with the multiplier 1.0 in a register called a contraction",
    "c_half_sign": "neg/abs.f16 and cvt.f32.f16 (exact) refused by opcode",
    "c_half_widen": "cvt.f32.f16 (exact) refused by opcode",
    "c_plain_sum": "add.f32 with no multiply to fuse with called unrounded",
    "c_saturate": "cvt.sat.f32.f32 (a clamp) refused by opcode",
    "c_to_int": "cvt.rzi/rni.s32.f32 (exact, the same on a flushed input) refused by opcode",
    "v_bits_global_f64": "a promoted value's bits through global memory as an integer: not followed, let through",
    "v_cvta_local_f64": "a local array read through a generic pointer in a function: not followed, let through",
    "v_generic_func_f64": "a store through a generic pointer in a function into shared memory: not followed",
    "v_global_scratch_f64": "a global scratch buffer given as an argument: not followed, let through",
}

# the audit's confusion matrix over the cases: violating files found / let through, clean files
# flagged / passed (docs/guide/gpu.md); before, the opcode table's
MATRIX = {"violating found": 26, "violating let through": 0, "clean flagged": 0, "clean passed": 26}
BEFORE = {"violating found": 22, "violating let through": 4, "clean flagged": 14, "clean passed": 12}


def verdict(name: str) -> str:
    return "violating" if audit.audit_file(CASES / f"{name}.ptx") else "clean"


def test_the_cases_are_half_clean_half_violating_and_compiled():
    verdicts = [c["verdict"] for c in MANIFEST.values()]
    assert len(verdicts) >= 40 and verdicts.count("clean") == verdicts.count("violating")
    assert sorted(p.stem for p in CASES.glob("*.ptx")) == sorted(MANIFEST) == sorted(p.stem for p in CASES.glob("*.cu"))
    assert set(WRONG) <= set(MANIFEST) and set(BEFORE_WRONG) <= set(MANIFEST)
    wrong = [MANIFEST[n]["verdict"] for n in BEFORE_WRONG]
    assert BEFORE["violating let through"] == wrong.count("violating")
    assert BEFORE["clean flagged"] == wrong.count("clean")


@pytest.mark.parametrize(
    "name",
    [
        pytest.param(n, marks=pytest.mark.xfail(strict=True, reason=WRONG[n])) if n in WRONG else n
        for n in sorted(MANIFEST)
    ],
)
def test_each_case_gets_its_verdict(name, capsys):
    expected = MANIFEST[name]["verdict"]
    code = main(["ptx", "audit", str(CASES / f"{name}.ptx")])
    out = capsys.readouterr().out
    assert code == (1 if expected == "violating" else 0), out


def test_the_confusion_matrix():
    got = dict.fromkeys(MATRIX, 0)
    for name, case in MANIFEST.items():
        v = verdict(name)
        if case["verdict"] == "violating":
            got["violating found" if v == "violating" else "violating let through"] += 1
        else:
            got["clean flagged" if v == "violating" else "clean passed"] += 1
    assert got == MATRIX


def test_no_violating_file_passes_and_a_flagged_clean_file_says_why(capsys):
    # the goal: no violating file exits 0; at most one clean file in twenty flagged, with its reason
    assert MATRIX["violating let through"] == 0
    assert MATRIX["clean flagged"] * 20 <= MATRIX["clean flagged"] + MATRIX["clean passed"]
    for name, case in MANIFEST.items():
        found = audit.audit_file(CASES / f"{name}.ptx")
        if case["verdict"] == "clean" and found:
            assert all(v.why for v in found), name


def test_the_cases_compiled_now_get_their_verdicts():
    # the installed NVRTC compiles every case again: a new compiler that changes a verdict is seen
    import importlib.util
    import sys

    spec = importlib.util.spec_from_file_location("make_cases", CASES / "make_cases.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("make_cases", mod)
    spec.loader.exec_module(mod)
    lib = mod._make_nvrtc().libnvrtc()
    if lib is None:
        pytest.skip("NVRTC is not installed (cuda-toolkit[nvrtc], the [cuda] extra)")
    wrong = []
    for name, case in MANIFEST.items():
        try:
            text = mod.compile_case(lib, name, list(case["options"]))
        except RuntimeError as e:  # cooperative groups need CCCL's <nv/target>
            assert "nv/target" in str(e), name
            continue
        if ("violating" if audit.audit_text(text) else "clean") != case["verdict"]:
            wrong.append(name)
    assert wrong == []
