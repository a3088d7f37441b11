"""meshnb.conformance.audit on committed PTX: numba-cuda's output (make_fixtures.py) and hand-written PTX,
each with the exact findings it must produce; meshnb's own kernels audit clean."""

from __future__ import annotations

import itertools
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from meshnb.conformance import audit

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
    (76, "f64_ops", "sub.f64", "double-rounding"),  # 1 - |x|, pi r and (pi r)^2: no sine follows
    (78, "f64_ops", "mul.f64", "double-rounding"),
    (79, "f64_ops", "mul.rn.f64", "double-rounding"),
    (84, "f64_ops", "add.f64", "double-rounding"),
    (86, "f64_ops", "div.rn.f64", "double-rounding"),
]


def test_handwritten_ptx_gives_exactly_its_marked_findings():
    assert found("handwritten.ptx") == HANDWRITTEN
    marked = [n for n, line in enumerate((PTX / "handwritten.ptx").read_text().splitlines(), 1) if "// F " in line]
    assert sorted({v[0] for v in HANDWRITTEN}) == marked


def test_clean_ops_and_bit_operations_are_no_findings():
    # clean_ops: .rn arithmetic, the flush's bit operations, shfl, abs/neg, cvt.rn, integer mad
    assert not [v for v in found("handwritten.ptx") if v[1] == "clean_ops"]


@pytest.mark.parametrize(
    "data, match",
    [
        (b"int main() { return 0; }\n", "not PTX: no .version"),
        (b"\xff\xfe.version 8.0\n", "not UTF-8"),
        (b".version 8.0\n.visible .entry k()\n{\n\0fma.rn.f32 %f1, %f2, %f3, %f4;\n}\n", "NUL byte on line 4"),
    ],
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
    assert set(doc["violations"][0]) == {"file", "line", "function", "instruction", "class", "why"}
    clean = tmp_path / "clean.ptx"
    clean.write_text(".version 8.0\n.visible .entry k()\n{\n\tadd.rn.f32 %f1, %f2, %f3;\n\tret;\n}\n")
    code, out, err = run_cli(capsys, "ptx", "audit", str(clean))
    assert (code, out, err) == (0, "0 findings in 1 PTX module\n", "")
    code, out, err = run_cli(capsys, "ptx", "audit", str(PTX / "handwritten.ptx"))
    assert (
        code == 1
        and out.count("\n") == len(HANDWRITTEN) + 1
        and ":46: bad_ops: mul.f32: unrounded (its product reaches the unrounded sub on line 47" in out
    )


@pytest.mark.parametrize(
    "argv, message",
    [
        (["ptx", "audit"], "give PTX files, or --meshnb"),
        (["ptx", "audit", "/nonexistent/x.ptx"], "cannot read '/nonexistent/x.ptx': No such file or directory"),
        (["ptx", "audit", "/dev/zero"], "cannot read '/dev/zero': a device, not a PTX file"),
        (["ptx", "audit", "/tmp"], "a directory"),
        (["ptx", "audit", str(Path(__file__).parent / "conftest.py")], "not PTX"),
    ],
)
def test_cli_bad_input_is_one_line_exit_2(capsys, argv, message):
    code, out, err = run_cli(capsys, *argv)
    assert code == 2 and out == "" and err.count("\n") == 1 and message in err and err.startswith("meshnb: error:")
    assert "Errno" not in err and "Error:" not in err


@pytest.mark.slow
@needs_numba_cuda
def test_meshnb_kernels_audit_clean_for_sm80_and_sm90():
    # A process of its own: compile_ptx needs the simulator off, and these tests run with it on.
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    script = (
        "import json, re\n"
        "from meshnb.conformance import audit\nfrom meshnb.cuda import ptx\n"
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
        assert not [o for o in ops if o.split(".")[1:2] in (["rz"], ["rm"], ["rp"])]
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


# -- parsing: instructions, not lines --------------------------------------------------------

HEAD = ".version 8.0\n.target sm_90\n.address_size 64\n"


def body(text: str, name: str = "k") -> str:
    return HEAD + f".visible .entry {name}()\n{{\n{text}\n}}\n"


def kinds(text: str, **kw) -> list[tuple[int, str, str]]:
    return [(v.line, v.instruction, v.kind) for v in audit.audit_text(text, **kw)]


def test_several_instructions_a_line_blocks_and_inline_asm():
    # NVRTC's inline asm: a { } block of its own on one line, its own .reg; the fma is the third
    text = body(
        "\tmov.f32 %f1, 0f3F800000; add.rn.f32 %f2, %f1, %f1; mul.f32 %f3, %f2, %f2;\n"
        "\t{ .reg .f32 t; mov.f32 t, %f1; fma.rn.f32 %f2, t, %f3, %f4; }\n"
        "\t{\n\t.reg .f32 u;\n\tsub.f32 u, %f3, %f2;\n\t}\n"
        "$L__BB0_1: add.f32 %f5, %f3, /* a comment ; { */ %f2;\n"
        "\tadd.rn.f32 %f6,\n\t\t%f1,\n\t\t%f2; mad.rn.f32 %f7, %f5, %f2, %f3;"
    )
    assert kinds(text) == [
        (6, "mul.f32", "unrounded"),
        (7, "fma.rn.f32", "contraction"),
        (10, "sub.f32", "unrounded"),
        (12, "add.f32", "unrounded"),
        (15, "mad.rn.f32", "contraction"),
    ]


def test_directed_rounding_is_its_own_class():
    text = body(
        "\tmul.rz.f32 %f1, %f2, %f3;\n\tsub.rm.f32 %f1, %f2, %f3;\n\tdiv.rp.f32 %f1, %f2, %f3;\n"
        "\tcvt.rz.f32.u32 %f1, %r1;\n\tcvt.rm.f32.f64 %f1, %fd1;\n\tfma.rp.f32 %f1, %f2, %f3, %f4;\n"
        "\tcvt.rn.f32.u32 %f1, %r1;\n\tcvt.rzi.s32.f32 %r1, %f1;\n"
        "\tcvt.rz.f64.f32 %fd1, %f1;\n\tadd.rz.f64 %fd1, %fd2, %fd3;"
    )
    assert kinds(text) == [
        (6, "mul.rz.f32", "directed-rounding"),
        (7, "sub.rm.f32", "directed-rounding"),
        (8, "div.rp.f32", "directed-rounding"),
        (9, "cvt.rz.f32.u32", "directed-rounding"),
        (10, "cvt.rm.f32.f64", "directed-rounding"),
        (11, "fma.rp.f32", "contraction"),
        (11, "fma.rp.f32", "directed-rounding"),
        # cvt.rzi.s32.f32 (line 13): exact, 0 for a subnormal flushed or not
        (14, "cvt.rz.f64.f32", "unverified"),
        (15, "add.rz.f64", "unverified"),
    ]


def test_packed_f32x2_ops_are_audited_as_scalar_ones():
    text = body(
        "\tfma.rn.f32x2 %rd1, %rd2, %rd3, %rd4;\n\tadd.f32x2 %rd1, %rd2, %rd3;\n\tmul.ftz.f32x2 %rd2, %rd2, %rd3;\n"
        "\tadd.rn.f32x2 %rd1, %rd2, %rd3;\n\tsub.rz.f32x2 %rd1, %rd2, %rd3;"
    )
    assert kinds(text) == [
        (6, "fma.rn.f32x2", "contraction"),
        (7, "add.f32x2", "unrounded"),
        (8, "mul.ftz.f32x2", "unrounded"),
        (8, "mul.ftz.f32x2", "flush"),
        (10, "sub.rz.f32x2", "directed-rounding"),
    ]


def test_utf8_comments_are_accepted_and_nul_bytes_refused(tmp_path):
    p = tmp_path / "u.ptx"
    p.write_bytes(body("\t// π r: a comment in UTF-8 — accepted\n\tfma.rn.f32 %f1, %f2, %f3, %f4;").encode())
    assert [(v.line, v.kind) for v in audit.audit_file(p)] == [(7, "contraction")]
    # a NUL before an fma on its line would hide it from a line reader: refused, not skipped
    p.write_bytes(body("\tadd.rn.f32 %f1, %f1, %f1;\0 fma.rn.f32 %f1, %f2, %f3, %f4;").encode())
    with pytest.raises(audit.PtxError, match="NUL byte on line 6"):
        audit.audit_file(p)


def test_a_300_kb_line_and_a_long_file_are_read(tmp_path):
    # the old line regex was quadratic in a line's spaces (40k spaces: 4.8 s); this is linear
    # (timed in bench/test_bench_cuda.py::test_audit_speed, not here)
    text = body(" " * 300_000 + "fma.rn.f32 %f1, %f2, %f3, %f4;" + " " * 300_000)
    assert kinds(text) == [(6, "fma.rn.f32", "contraction")]
    many = body("\tadd.rn.f32 %f1, %f2, %f3;\n" * 100_000 + "\tfma.rn.f32 %f1, %f2, %f3, %f4;")
    assert kinds(many) == [(100_006, "fma.rn.f32", "contraction")]


def test_the_scan_skips_only_opcodes_the_audit_never_reads():
    # audit_text's scan passes over runs of _BORING opcodes without reading them: each must have
    # no f32 class and let no promoted value through (what _info says), and the common ones pass
    bases = ["add", "sub", "mul", "fma", "mad", "div", "rcp", "sqrt", "ex2", "sin", "tanh", "cvt", "call"]
    bases += ["ld", "st", "mov", "setp", "selp", "abs", "neg", "min", "max", "and", "shfl", "bra", "ret"]
    parts = ["rn", "rz", "rm", "rp", "rni", "ftz", "sat", "approx", "full", "f32", "f32x2", "f64", "b64"]
    parts += ["b32", "u32", "s32", "u64", "param", "global", "wide", "lo", "gt", "uni", ""]
    boring = re.compile(audit._BORING)
    skipped = set()
    for base in bases:
        for n in range(4):
            for combo in itertools.product(parts, repeat=n) if n < 3 else zip(parts, parts[3:], parts[7:]):
                op = ".".join((base, *combo))
                if boring.fullmatch(op):
                    info = audit._info(op)
                    assert not info.classes and not info.flows and not info.regs, op
                    skipped.add(op)
    assert {"mov.u32", "add.s32", "bra.uni", "setp.gt.s32"} <= skipped
    assert not {"add.f32", "add.rn.f64", "ld.param.f32", "cvt.rn.f32.u32", "mul.rn.ftz.f32", "add.rn.f32"} & skipped
    assert not {"ld.global.u32", "st.global.u32", "and.b32", "shfl.sync.bfly.b32"} & skipped  # a promoted value's words


TRICKY = [
    "\tadd.rn.f32 %f1, %f2, %f3;\n\tmov.u32 %r1, %r2;\n\tadd.f32 %f1, %f2, %f3;\n" * 3,
    "L1: L2 : $L3:\n add.f32 %f1, %f2, %f3; L4: .reg .f32 x; L5: ;\n\t$L6:\n\tfma.rn.f32 %f1, %f1, %f1, %f1;",
    "\tmov.b64 %rd1, {%r1, %r2}; add.rn.f32 %f1, %f1, %f1; add.f32 %f1 , %f2,%f3 ;\n\tst.global.f32 [%rd1], %f1;",
    "\t{ .reg .f32 t; mov.f32 t, %f1; add.rn.f32 t, t, t; fma.rn.f32 %f2, t, %f3, %f4; }\n\tmul.ftz.f32 %f1, %f1, %f1;",
    "\t@%p1 add.rn.f32 %f1, %f1, %f1;\n\t@!%p1 bra $L1;\n\tcvt.f64.f32 %fd1, %f1;\n\tadd.f64 %fd2, %fd1, %fd1;",
    "\tadd.rn.f32 %f1, %f1, %f1; mul.f32 " + "a" * 3000 + "\n\tsub.f32 %f1, %f1, %f1",
]


@pytest.mark.parametrize(
    "path", sorted(p for d in (PTX, PTX.parent / "nvrtc", PTX.parent / "cases") for p in d.glob("*.ptx"))
)
def test_the_audits_lean_reading_finds_what_the_full_parse_finds(path):
    # audit_text reads only what it needs (runs of skipped statements, no operands without a
    # cvt.f64.f32); the full parse (the SASS audit's) must give the same findings, in order
    text = path.read_text(encoding="utf-8")
    assert audit.audit_text(text) == audit.audit_module(audit.parse(text))
    for piece in TRICKY:
        t = body(piece)
        assert audit.audit_text(t) == audit.audit_module(audit.parse(t)), piece


def test_over_the_size_limit_fifos_and_devices_are_refused(tmp_path, monkeypatch):
    p = tmp_path / "big.ptx"
    p.write_text(body("\tret;"))
    monkeypatch.setattr(audit, "MAX_BYTES", 16)
    with pytest.raises(audit.PtxError, match="over the audit's limit of 0 MiB"):
        audit.audit_file(p)
    monkeypatch.undo()
    fifo = tmp_path / "f.ptx"
    os.mkfifo(fifo)  # nothing writes it: reading would block
    with pytest.raises(audit.PtxError, match="a FIFO, not a PTX file"):
        audit.audit_file(fifo)
    with pytest.raises(audit.PtxError, match="a device"):
        audit.audit_file("/dev/zero")


def test_a_file_name_with_escapes_is_quoted(capsys, tmp_path):
    name = str(tmp_path / "a\x1b[31mred.ptx")
    code, out, err = run_cli(capsys, "ptx", "audit", name)
    assert code == 2 and "\x1b" not in err and "\\x1b" in err
    Path(name).write_text(body("\tfma.rn.f32 %f1, %f2, %f3, %f4;"))
    code, out, err = run_cli(capsys, "ptx", "audit", name)
    assert code == 1 and "\x1b" not in out and "\\x1b[31mred.ptx':6: k: fma.rn.f32: contraction" in out


# -- promoted values: through registers, .param and calls ----------------------------------

CALL = (
    HEAD
    + """
.func  (.param .b64 func_retval0) h(
	.param .b64 h_param_0
)
{
	.reg .f64 	%fd<4>;
	ld.param.f64 	%fd1, [h_param_0];
	fma.rn.f64 	%fd2, %fd1, %fd1, 0d3FF0000000000000;
	st.param.f64 	[func_retval0+0], %fd2;
	ret;
}
.visible .entry k()
{
	.reg .f32 	%f<4>;
	.reg .f64 	%fd<4>;
	cvt.f64.f32 	%fd1, %f1;
	{ // callseq 0, 0
	.reg .b32 temp_param_reg;
	.param .b64 param0;
	st.param.f64 	[param0+0], %fd1;
	.param .b64 retval0;
	call.uni (retval0),
	h,
	(
	param0
	);
	ld.param.f64 	%fd2, [retval0+0];
	} // callseq 0
	add.rn.f64 	%fd3, %fd2, 0d3FF0000000000000;
	cvt.rn.f32.f64 	%f2, %fd3;
	add.rn.f64 	%fd3, %fd3, %fd3;
	ret;
}
"""
)


def test_a_promoted_value_is_followed_through_a_call_and_back():
    # the .func's fma, then the caller's add on the returned value; the f64 add after the
    # cvt.rn.f32.f64 is on the same register, still promoted (flow-insensitive)
    assert kinds(CALL) == [
        (11, "fma.rn.f64", "double-rounding"),
        (32, "add.rn.f64", "double-rounding"),
        (34, "add.rn.f64", "double-rounding"),
    ]
    # the same function with no promoted argument: nothing
    clean = CALL.replace("cvt.f64.f32 \t%fd1, %f1;", "mov.f64 \t%fd1, 0d4000000000000000;")
    assert kinds(clean) == []
    # --allow-f64 h: its own f64 is declared legitimate, the caller's is still found
    assert [f for _, f, _ in kinds(CALL, allow_f64=["h"])] == ["add.rn.f64", "add.rn.f64"]


def test_a_register_declared_in_a_block_is_the_blocks_own():
    # %fd1 in the inner block is another register: the outer, promoted %fd1 is not read by the add
    text = body(
        "\t.reg .f64 %fd<4>;\n\tcvt.f64.f32 %fd1, %f1;\n\tcvt.rn.f32.f64 %f2, %fd1;\n"
        "\t{\n\t.reg .f64 %fd1;\n\tmov.f64 %fd1, 0d4000000000000000;\n\tadd.rn.f64 %fd2, %fd1, %fd1;\n\t}\n"
        "\tsqrt.rn.f64 %fd3, %fd1;"
    )
    assert kinds(text) == [(14, "sqrt.rn.f64", "double-rounding")]


# -- NVRTC: CUDA C++ from another front end, the truth by hand ----------------------------

NVRTC = Path(__file__).parent / "nvrtc"
NVRTC_TRUTH = {  # kernel -> its findings (instruction, class), from what the source asks for
    "spec4_sin_pi": [],  # SPEC 4's sample: 1 - |x|, pi r, libdevice's sine inlined
    "pi_no_sine": [("mul.f64", "double-rounding"), ("sub.f64", "double-rounding"), ("sub.f64", "double-rounding")],
    "pi_r_squared": [("mul.f64", "double-rounding"), ("mul.f64", "double-rounding"), ("sub.f64", "double-rounding")],
    "pi_r_squared_and_sine": [("fma.rn.f64", "double-rounding")],
    "_Z8horner64ddddd": [("fma.rn.f64", "double-rounding")] * 3,  # in the __noinline__ .func
    "horner_f64_call": [],  # promotes and calls: the f64 arithmetic is in the callee
    "directed": [
        ("cvt.rz.f32.u32", "directed-rounding"),
        ("div.rp.f32", "directed-rounding"),
        ("mul.rz.f32", "directed-rounding"),
        ("sub.rm.f32", "directed-rounding"),
    ],
    "inline_asm_fma": [("fma.rn.f32", "contraction")],
    "naive": [("fma.rn.f32", "contraction")],  # the sub alone (no product feeds it): to nearest
    "per_op": [],
    "approx": [("div.approx.f32", "approximate"), ("sin.approx.f32", "approximate")],
}
FAST_TRUTH = {
    "fast_math": [
        ("div.approx.ftz.f32", "approximate"),
        ("div.approx.ftz.f32", "flush"),
        ("fma.rn.ftz.f32", "contraction"),
        ("fma.rn.ftz.f32", "flush"),
    ]
}


PACKED_TRUTH = {"packed": [("fma.rn.f32x2", "contraction"), ("mul.rz.f32x2", "directed-rounding")]}
U = "unverified"
UNNAMED_TRUTH = {  # unnamed.cu: violations of no named class, written from the source, and clean kernels
    "half_add": [("add.f16", U)],
    "bf16_mul": [("fma.rn.bf16", U)],  # __hmul on bf16: NVRTC's fma with -0
    "via_half": [("cvt.rn.f16.f32", U)],  # widening back (cvt.f32.f16) is exact
    "atomic_sum": [("atom.global.add.f32", U)],
    "to_int": [],  # truncation: exact, 0 for a subnormal flushed or not
    "sign_tests": [],  # copysign moves a sign bit; isfinite is abs and setp: exact
    "texture_read": [("tex.1d.v4.f32.s32", U)],
    "saturated": [],  # a clamp to [0, 1]: one of three exact values
    "reciprocal": [("rcp.rn.f32", U)],
    "tensor_core": [
        ("wmma.load.a.sync.aligned.row.m16n16k16.global.f16", U),
        ("wmma.load.b.sync.aligned.col.m16n16k16.global.f16", U),
        ("wmma.mma.sync.aligned.row.col.m16n16k16.f32.f32", U),
        ("wmma.store.d.sync.aligned.row.m16n16k16.global.f32", U),
    ],
    "local_f64": [],  # through __local_depot: the exact product of two floats, rounded once
    "shared_f64": [],  # through the __shared__ array: a sum of two floats once in f64, rounded once
    "local_f32": [],
    "clean_ops": [],  # div/mul/add/sub/sqrt .rn, the flush's bit operations, fabs, fmax, shfl, ld.v4.f32, u32 -> f32
}
TRUTHS = {"variants.cu": NVRTC_TRUTH, "fast.cu": FAST_TRUTH, "packed.cu": PACKED_TRUTH, "unnamed.cu": UNNAMED_TRUTH}


def by_function(violations: list[audit.Violation], names) -> dict[str, list[tuple[str, str]]]:
    out: dict[str, list[tuple[str, str]]] = {n: [] for n in names}
    for v in violations:
        out.setdefault(v.function, []).append((v.instruction, v.kind))
    return {k: sorted(x) for k, x in out.items()}


@pytest.mark.parametrize("name", ["variants_sm80.ptx", "variants_sm90.ptx"])
def test_nvrtc_variants_give_their_findings(name):
    assert by_function(audit.audit_file(NVRTC / name), NVRTC_TRUTH) == NVRTC_TRUTH


def test_nvrtc_fast_math_gives_its_findings():
    assert by_function(audit.audit_file(NVRTC / "fast_sm80.ptx"), FAST_TRUTH) == FAST_TRUTH


def test_nvrtc_packed_f32x2_gives_its_findings():
    assert by_function(audit.audit_file(NVRTC / "packed_sm100a.ptx"), PACKED_TRUTH) == PACKED_TRUTH


def test_nvrtc_unnamed_violations_are_unverified():
    got = audit.audit_file(NVRTC / "unnamed_sm80.ptx")
    assert by_function(got, UNNAMED_TRUTH) == UNNAMED_TRUTH
    assert all(v.why for v in got if v.kind == U)  # each says why the table does not allow it
    why = {v.instruction: v.why for v in got}
    assert why["add.f16"] == ".f16: mode Z's table allows add on .f32/.f32x2/.f64 only"
    assert why["cvt.rn.f16.f32"] == "cvt into .f16: a float rounded to a narrower format; mode Z keeps f32"


def test_promoted_values_are_followed_through_local_and_shared_memory():
    # the store and the load go through different address registers made from one variable
    # (%rd5 = %SPL + 0 and %rd9 = %rd5 + 8k; %r4 and %r6 from the shared array's address): the
    # register alone would not join them
    text = (NVRTC / "unnamed_sm80.ptx").read_text()
    module = audit.parse(text)
    stores = [i for i in module.instructions if i.opcode.startswith(("st.local", "st.shared")) and "f64" in i.opcode]
    assert stores and all(d.startswith("mem:") for i in stores for d in i.dests)
    cases = Path(__file__).parent / "cases"
    for name, at in (("v_local_vec_f64", "fma.rn.f64"), ("v_extern_shared_f64", "mul.f64")):
        followed = audit.audit_file(cases / f"{name}.ptx")
        assert {(v.instruction, v.kind) for v in followed} == {(at, "double-rounding")}, name
        with pytest.MonkeyPatch.context() as mp:  # the model off: the stores are reported instead
            mp.setattr(audit, "_follow_memory", lambda module: None)
            off = audit.audit_file(cases / f"{name}.ptx")
        stores = [v for v in off if v.kind == "unverified"]
        assert stores and all(v.instruction.startswith("st.") for v in stores), name


def test_the_sine_rule_both_ways():
    # SPEC 4's sample passes because pi r reaches libdevice's quadrant reduction (x 2/pi); with
    # that product gone (2/pi made 2/e), the same reduction and product are findings, and so is
    # the sine's polynomial, which no sine now explains
    text = (NVRTC / "variants_sm80.ptx").read_text()
    assert by_function(audit.audit_text(text), NVRTC_TRUTH)["spec4_sin_pi"] == []
    broken = text.replace(audit.TWO_OVER_PI_F64, "0d3FE78B56362CEF38")
    got = by_function(audit.audit_text(broken), NVRTC_TRUTH)["spec4_sin_pi"]
    assert ("sub.f64", "double-rounding") in got and ("mul.f64", "double-rounding") in got
    assert got.count(("fma.rn.f64", "double-rounding")) >= 8
    # declared: the function's f64 is accepted
    assert by_function(audit.audit_text(broken, allow_f64=["spec4_sin_pi"]), NVRTC_TRUTH)["spec4_sin_pi"] == []


def _nvrtc():
    import importlib.util
    import sys

    spec = importlib.util.spec_from_file_location("make_nvrtc", NVRTC / "make_nvrtc.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("make_nvrtc", mod)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("src, out, options", _nvrtc().BUILDS)
def test_nvrtc_compiled_now_gives_the_same_findings(src, out, options):
    mod = _nvrtc()
    lib = mod.libnvrtc()
    if lib is None:
        pytest.skip("NVRTC is not installed (cuda-toolkit[nvrtc], the [cuda] extra)")
    text = mod.compile_cuda(lib, (NVRTC / src).read_text(), src, options)
    truth = TRUTHS[src]
    assert by_function(audit.audit_text(text), truth) == truth


def test_the_collector_is_left_as_it_was():
    # audit_text pauses the cyclic collector while it reads (no cycles among its objects)
    import gc

    text = body("\tfma.rn.f32 %f1, %f2, %f3, %f4;")
    assert gc.isenabled()
    assert kinds(text) == [(6, "fma.rn.f32", "contraction")]
    assert gc.isenabled()
    gc.disable()
    try:
        assert kinds(text) == [(6, "fma.rn.f32", "contraction")]
        assert not gc.isenabled()
    finally:
        gc.enable()
    with pytest.raises(audit.PtxError):
        audit.audit_text("not ptx")
    assert gc.isenabled()


# -- default-deny: what mode Z's table does not name is unverified --------------------------


def test_a_new_opcode_modifier_or_type_on_a_float_is_unverified():
    text = body(
        "\t.reg .f32 %f<4>;\n\t.reg .b32 %r<4>;\n"
        "\tadd.rn.f32 %f1, %f2, %f3;\n"  # in the table
        "\tfrob.b32 %f1, %f2;\n"  # an opcode no one has seen, on a float register
        "\tfrob.b32 %r1, %r2;\n"  # the same on integer registers: no float is touched
        "\tadd.rn.qz.f32 %f1, %f2, %f3;\n"  # a new modifier on a row's opcode
        "\tadd.rn.f24 %f1, %f2, %f3;\n"  # a new float type
        "\tfrob.rn.f32 %f1, %f2;\n"  # a new opcode of a float type
        "\tmov.b32 %r1, %f1;\n\tand.b32 %r1, %r1, -2147483648;\n\tmov.b32 %f1, %r1;"  # bit operations
    )
    got = audit.audit_text(text)
    assert [(v.line, v.instruction, v.kind, v.why) for v in got] == [
        (9, "frob.b32", U, "frob on float register %f1: no such entry in mode Z's table"),
        (11, "add.rn.qz.f32", U, ".qz: not allowed on add by mode Z's table"),
        (12, "add.rn.f24", U, ".f24: mode Z's table allows add on .f32/.f32x2/.f64 only"),
        (13, "frob.rn.f32", U, "frob on .f32: no such entry in mode Z's table"),
    ]
    assert got == audit.audit_module(audit.parse(text))  # the lean reading and the full parse agree
    # a row added on purpose allows it (and only it)
    row = audit.Allowed(("add",), ("f32",), ("rn", "qz"), (), "a test's row")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(audit, "MODE_Z", (*audit.MODE_Z, row))
        audit._info.cache_clear()
        assert [v.instruction for v in audit.audit_text(text)] == ["frob.b32", "add.rn.f24", "frob.rn.f32"]
    audit._info.cache_clear()


def test_types_that_each_have_a_row_but_none_together_are_unverified_not_a_crash():
    # each of .f16 and .f32 has a setp row, none has both: this raised StopIteration (a RuntimeError
    # out of audit_text) on 1,364 of 213,749 synthetic opcodes
    text = body("\t.reg .pred %p<2>;\n\t.reg .b16 %h<2>;\n\t.reg .f32 %f<2>;\n\tsetp.lt.f16.f32 %p1, %h1, %f1;")
    got = audit.audit_text(text)
    assert [(v.instruction, v.kind, v.why) for v in got] == [
        ("setp.lt.f16.f32", U, "setp.f16.f32: mode Z's table has no row with these types together")
    ]


@pytest.mark.parametrize("opcode", ["cvt.f16.bf16", "cvt.bf16.f16", "cvt.f16.f16"])
def test_a_cvt_into_a_half_from_a_half_is_unverified(opcode):
    # the widening row (cvt.f32.f16) lists the halves among its types; a cvt into a half is no widening
    # (bf16 -> f16 overflows above 65504 and rounds small values), whatever its source
    assert (
        audit.unverified(opcode)
        == f"cvt into .{opcode.split('.')[1]}: a float rounded to a narrower format; mode Z keeps f32"
    )


@pytest.mark.parametrize(
    "opcode, allowed",
    [
        ("add.rn.f32", True),
        ("div.rn.f32", True),
        ("sqrt.rn.f32", True),
        ("add.rn.f32x2", True),
        ("mov.f32", True),
        ("selp.f64", True),
        ("setp.ltu.f64", True),
        ("ld.global.nc.v4.f32", True),
        ("ld.global.L1::evict_last.f32", True),
        ("cvt.rn.f32.u32", True),
        ("cvt.rn.f32.s16", True),
        ("cvt.f64.f32", True),
        ("cvt.rn.f32.f64", True),
        ("cvt.rni.s32.f64", True),
        ("fma.rn.f64", True),  # f64: the sin_pi rule decides
        ("sqrt.rn.f64", True),
        ("cvt.rn.f32.s64", True),  # one rounding to nearest, as u32 -> f32
        ("cvt.rz.f32.s64", False),
        ("setp.lt.f16", True),
        ("setp.lt.ftz.f16", False),
        ("cvt.f32.f16", True),
        ("cvt.f16.f32", False),  # a narrowing with no rounding modifier
        ("cvt.sat.f32.f32", True),
        ("cvt.rzi.s32.f32", True),
        ("cvt.rmi.s32.f32", False),  # floor(-subnormal) is -1, floor(-0) is -0
        ("neg.f16", True),
        ("abs.ftz.f16", False),
        ("cvt.rn.f32.f16", False),
        ("min.NaN.f32", False),
        ("add.rn.sat.f32", False),
        ("add.rz.f64", False),
        ("testp.finite.f32", True),
        ("copysign.f32", True),
        ("ld.global.f16", False),
        ("st.global.bf16x2", False),
        ("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32", False),
        ("cvt.rn.satfinite.e4m3x2.f32", False),
        ("red.global.add.f32", False),
        ("rcp.rn.f32", False),
    ],
)
def test_the_tables_rows(opcode, allowed):
    assert (audit.unverified(opcode) == "") is allowed, audit.unverified(opcode)


def test_a_large_module_of_unverified_instructions_is_read_in_linear_time():
    # 50k findings: every one read and explained (the reason made once per opcode)
    n = 50_000
    text = body("\t.reg .f32 %f<4>;\n" + "\tadd.rn.f16 %rs1, %rs2, %rs3;\n\tfrob.b32 %f1, %f2;\n" * (n // 2))
    got = audit.audit_text(text)
    assert len(got) == n and got[-1].line == 6 + n and {v.kind for v in got} == {U}


def test_cli_gives_an_unverified_findings_reason(capsys):
    code, out, err = run_cli(capsys, "ptx", "audit", str(NVRTC / "unnamed_sm80.ptx"))
    assert code == 1 and err == ""
    assert ": half_add: add.f16: unverified (.f16: mode Z's table allows add on .f32/.f32x2/.f64 only)\n" in out
    assert ": local_f64: " not in out  # the exact product of two floats, rounded once
    code, out, err = run_cli(capsys, "ptx", "audit", str(NVRTC / "unnamed_sm80.ptx"), "--json")
    doc = json.loads(out)["violations"]
    assert all("why" in v for v in doc if v["class"] == "unverified")


def test_every_finding_names_its_rule_and_its_source_line(capsys, tmp_path):
    # the .loc before an instruction (a .file's name, where inlined code was inlined); line 0 is none
    text = (
        HEAD.replace(".target", '.file 1 "/src/k.cu"\n.file 2 "h.h"\n.target')
        + ".visible .entry k()\n{\n"
        + "\t.loc 1 7 3\n\tfma.rn.f32 %f1, %f2, %f3, %f4;\n"
        + "\t.loc 2 3 1, function_name $L__info_string0, inlined_at 1 9 2\n\tdiv.approx.f32 %f1, %f2, %f3;\n"
        + "\t.loc 1 0 0\n\tadd.rn.ftz.f32 %f1, %f2, %f3;\n}\n"
    )
    got = audit.audit_text(text)
    assert [(v.instruction, v.source) for v in got] == [
        ("fma.rn.f32", "k.cu:7"),
        ("div.approx.f32", "h.h:3, inlined at k.cu:9"),
        ("add.rn.ftz.f32", ""),
    ]
    assert all(v.why for v in got)
    p = tmp_path / "k.ptx"
    p.write_text(text)
    code, out, err = run_cli(capsys, "ptx", "audit", str(p))
    assert code == 1 and out.splitlines()[0].endswith(
        ": k: fma.rn.f32: contraction (" + audit.RULES["contraction"] + ") [k.cu:7]"
    )
    # NVRTC's -lineinfo: every finding in the measured cases has its rule and its CUDA line
    cases = Path(__file__).parent / "cases"
    found = [v for f in sorted(cases.glob("v_*.ptx")) for v in audit.audit_file(f)]
    assert found and all(v.why and re.fullmatch(r"\S+\.(cu|h):\d+(, inlined at \S+:\d+)?", v.source) for v in found)


def test_addresses_made_by_selp_and_or_are_followed():
    # a load through selp or or of a variable's addresses reads the variable: its promoted value is
    # found in the f64 arithmetic after (the model once knew mov, cvta, add, sub, mad only: 0 findings)
    assert short("address_forms.ptx") == [
        (22, "fma.rn.f64", "double-rounding"),
        (23, "mul.f64", "double-rounding"),  # the exact product, used by the add before its rounding
        (24, "add.f64", "double-rounding"),
    ]


def test_a_promoted_store_the_model_cannot_match_is_unverified():
    # through a pointer given as an argument, and into a variable whose address is stored: reported at
    # the store, not let through; a store into a variable no address of which leaves is followed
    head = "\t.local .align 8 .b8 d[16];\n\t.reg .b64 %rd<6>;\n\t.reg .f64 %fd<4>;\n\tcvt.f64.f32 %fd1, %f1;\n"
    text = body(
        head + "\tld.param.u64 %rd1, [k_param_0];\n\tst.global.f64 [%rd1], %fd1;\n\tld.global.f64 %fd2, [%rd4];"
    )
    assert [(v.instruction, v.kind) for v in audit.audit_text(text)] == [("st.global.f64", U)]
    assert "no variable of the module" in audit.audit_text(text)[0].why
    # a float widened and written out, in a module that reads no 64-bit word back: an output
    assert audit.audit_text(text.replace("\tld.global.f64 %fd2, [%rd4];", "")) == []
    # but its words written out (32-bit loads are everywhere), or an f64 result, are reported
    words = text.replace("\tld.global.f64 %fd2, [%rd4];", "\tmov.b64 {%r1, %r2}, %fd1;\n\tst.global.u32 [%rd1], %r1;")
    assert [(v.instruction, v.kind) for v in audit.audit_text(words)] == [("st.global.u32", U)]
    text = body(
        head + "\tmov.u64 %rd2, d;\n\tst.local.f64 [%rd2], %fd1;\n\tst.global.u64 [%rd3], %rd2;\n\tld.f64 %fd3, [%rd5];"
    )
    got = audit.audit_text(text)
    assert [(v.instruction, v.kind) for v in got] == [("st.local.f64", U)] and "leaves the function" in got[0].why
    assert audit.audit_text(body(head + "\tmov.u64 %rd2, d;\n\tst.local.f64 [%rd2], %fd1;")) == []


def test_a_promoted_values_words_are_followed_or_reported():
    # its words through a local variable and a sign flip (xor) are still the promoted value; its
    # words stored to global memory or a surface are reported at the store
    assert [(v.line, v.instruction, v.kind) for v in audit.audit_file(PTX / "words.ptx")] == [
        (22, "mul.f64", "double-rounding"),
        (23, "add.f64", "double-rounding"),
        (26, "st.global.u32", U),
        (27, "sust.b.1d.b32.trap", U),
    ]


def test_a_compare_a_flush_cannot_change_is_no_finding():
    # .ftz on a compare with a normal, infinite or NaN constant (or a register moved from one), and
    # on setp.nan/num, cannot change the predicate; against zero or another register it can
    text = body(
        "\tsetp.lt.ftz.f32 %p1, %f1, 0f3F800000;\n\tsetp.lt.ftz.f32 %p1, %f1, 0f00000000;\n"
        "\tsetp.nan.ftz.f32 %p1, %f1, %f2;\n\tsetp.gt.ftz.f32 %p1, %f1, %f2;\n"
        "\tmov.f32 %f3, 0f7F800000;\n\tsetp.eq.ftz.f32 %p1, %f3, %f1;\n\tsetp.lt.ftz.f32 %p1, %f1, 0f00000001;"
    )
    assert kinds(text) == [
        (7, "setp.lt.ftz.f32", "flush"),
        (9, "setp.gt.ftz.f32", "flush"),
        (12, "setp.lt.ftz.f32", "flush"),
    ]


def test_an_fma_is_judged_on_its_operands():
    text = body(
        "\tfma.rn.f32 %f1, 0f3F800000, %f2, %f3;\n\tfma.rn.f32 %f1, %f2, 0fBF800000, %f3;\n"
        "\tfma.rn.f32 %f1, %f2, %f3, 0f80000000;\n\tfma.rn.f32 %f1, %f2, %f3, 0f00000000;\n"
        "\tfma.rn.f32 %f1, 0f40000000, %f2, %f3;\n\tmov.f32 %f5, 0f3F800000;\n\tfma.rn.f32 %f1, %f5, %f2, %f3;\n"
        "\tmov.f32 %f6, 0f3F800000;\n\tmov.f32 %f6, %f2;\n\tfma.rn.f32 %f1, %f6, %f2, %f3;\n"
        "\tfma.rn.ftz.f32 %f1, 0f3F800000, %f2, %f3;"
    )
    # +0.0 as the addend is not a multiply (-0 + +0 is +0); 2.0 is not 1.0; a register defined twice
    # is not known; .ftz stays a flush
    assert kinds(text) == [
        (9, "fma.rn.f32", "contraction"),
        (10, "fma.rn.f32", "contraction"),
        (15, "fma.rn.f32", "contraction"),
        (16, "fma.rn.ftz.f32", "flush"),
    ]


def test_an_unrounded_product_through_memory_keeps_its_partner():
    # a product stored and an unrounded add of a loaded value: places are not told apart for f32,
    # so they are a pair; an add of registers no product reaches stays alone (computed to nearest)
    text = body(
        "\t.local .align 4 .b8 t[32];\n\tmul.f32 %f3, %f1, %f2;\n\tmov.u64 %rd1, t;\n\tst.local.f32 [%rd1], %f3;\n"
        "\tld.local.f32 %f4, [%rd1+4];\n\tadd.f32 %f5, %f4, %f1;\n\tadd.f32 %f6, %f1, %f2;"
    )
    assert kinds(text) == [(7, "mul.f32", "unrounded"), (11, "add.f32", "unrounded")]
    assert kinds(text.replace("\tst.local.f32 [%rd1], %f3;\n", "\n")) == []


def test_an_unrounded_product_through_a_select_keeps_its_partner():
    text = body("\tmul.f32 %f3, %f1, %f2;\n\tselp.f32 %f4, %f3, %f1, %p1;\n\tadd.f32 %f5, %f4, %f2;")
    assert kinds(text) == [(6, "mul.f32", "unrounded"), (8, "add.f32", "unrounded")]


def test_a_register_written_by_several_products_pairs_each():
    text = body("\tmul.f32 %f3, %f1, %f2;\n\tadd.f32 %f4, %f3, %f1;\n" * 2 + "\tmul.f32 %f3, %f1, %f1;")
    assert [line for line, _, _ in kinds(text)] == [6, 7, 8, 9, 10]


def test_an_fma_whose_product_is_exact_is_mode_zs_multiply_and_add():
    # halves widened (11 bits each), bytes (8), a factor 0: the product is exact in f32, so the one
    # rounding is mode Z's add's; a half by a 16-bit integer (27 bits) or by a register defined twice
    # is not known exact
    text = body(
        "\tcvt.f32.f16 %f1, %rs1;\n\tcvt.f32.f16 %f2, %rs2;\n\tcvt.rn.f32.u8 %f3, %rs3;\n"
        "\tcvt.rn.f32.u16 %f4, %rs4;\n"
        "\tfma.rn.f32 %f9, %f1, %f2, %f8;\n\tfma.rn.f32 %f9, %f1, %f3, %f8;\n\tfma.rn.f32 %f9, %f7, 0f80000000, %f8;\n"
        "\tfma.rn.f32 %f9, %f1, %f4, %f8;\n\tmov.f32 %f2, %f7;\n\tmul.f32 %f10, %f1, %f3;\n\tadd.f32 %f11, %f10, %f8;"
    )
    # (%f2, defined again by the mov, is not known: the fma of line 10 is one too; the exact
    # product of line 15 makes the unrounded pair harmless)
    assert kinds(text) == [(10, "fma.rn.f32", "contraction"), (13, "fma.rn.f32", "contraction")]


def test_a_promotion_with_ftz_is_followed():
    # --ftz=true's cvt.ftz.f64.f32 promotes as cvt.f64.f32 does: the f64 arithmetic after is found
    text = body("\tcvt.ftz.f64.f32 %fd1, %f1;\n\tfma.rn.f64 %fd2, %fd1, %fd1, %fd1;\n\tcvt.rn.f32.f64 %f2, %fd2;")
    assert kinds(text) == [(6, "cvt.ftz.f64.f32", "flush"), (7, "fma.rn.f64", "double-rounding")]
