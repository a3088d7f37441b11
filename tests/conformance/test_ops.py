"""Op vectors: generation, the tininess probes, meshnb's ops against the vectors, verify's classes."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from numba import njit

from meshnb import floatz
from meshnb.cli import main
from meshnb.conformance import ops
from meshnb.conformance.fpu import OPS, Ops, Rules, apply_op
from meshnb.conformance.fpu import is_subnormal as ops_subnormal
from meshnb.testing import reference as ref


@njit(cache=False, error_model="numpy")
def _numba_ops(code: int, a: np.ndarray, fa: np.ndarray, fb: np.ndarray) -> np.ndarray:
    """meshnb.floatz's op ``code`` (0 add, 1 sub, 2 mul, 3 div, 4 from_u32) on words ``a`` (u32) or
    their float32 views ``fa``, ``fb``."""
    out = np.empty(a.size, dtype=np.uint32)
    for i in range(a.size):
        x = fa[i]
        y = fb[i]
        if code == 0:
            r = floatz.add(x, y)
        elif code == 1:
            r = floatz.sub(x, y)
        elif code == 2:
            r = floatz.mul(x, y)
        elif code == 3:
            r = floatz.div(x, y)
        else:
            r = floatz.from_u32(a[i])
        out[i] = floatz.bits(r)
    return out


def test_tininess_probes() -> None:
    a = np.array([0x3F7FFFFF, 0x3F7FFFFE], dtype=np.uint32)
    b = np.array([0x00800000, 0x00800001], dtype=np.uint32)
    assert list(ops.expected("mul", a, b)) == [0x00800000, 0x00800000]
    assert list(Ops(Rules(underflow="before")).mul(a, b)) == [0, 0]
    assert list(Ops(Rules(underflow="after")).mul(a, b)) == [0, 0x00800000]
    assert list(Ops(Rules(underflow="none")).mul(a, b)) == [0x00800000, 0x00800000]
    # the probes lead level 1
    first = ops.gen_lines("mul", 1).splitlines()[:2]
    assert first == [b"3f7fffff 00800000 00800000", b"3f7ffffe 00800001 00800000"]


@pytest.mark.parametrize("op", OPS)
def test_level1_against_numba_and_reference(op: str) -> None:
    """Level 1 (every special pair, random pairs) and a level-2 sample: meshnb's numba ops, the
    numpy reference and the plain-Python reference all give the vectors' results."""
    a, b = ops.generate(op, 1)
    a2, b2 = ops.generate(op, 2, count=200_000)
    a, b = np.concatenate([a, a2]), (None if b is None else np.concatenate([b, b2]))
    want = ops.expected(op, a, b)
    code = OPS.index(op)
    got_nb = _numba_ops(code, a, a.view(np.float32), (a if b is None else b).view(np.float32))
    assert np.array_equal(got_nb, want), np.nonzero(got_nb != want)[0][:5]
    if op == "from_u32":
        np_ref = ref.to_bits(ref.z_from_u32(a))
        py = [ref.py_from_u32(int(x)) for x in a[:30_000]]
    else:
        fa, fb = a.view(np.float32), b.view(np.float32)
        np_ref = ref.to_bits(getattr(ref, f"z_{op}")(fa, fb))
        py = [getattr(ref, f"py_{op}")(int(x), int(y)) for x, y in zip(a[:30_000], b[:30_000])]
    assert np.array_equal(np_ref, want)
    assert py == [int(w) for w in want[:30_000]]


def test_level1_covers_the_edges() -> None:
    a, b = ops.generate("mul", 1)
    r = ops.expected("mul", a, b)
    # results just below, at and above 2^-126, subnormal exact results, overflow, NaNs, signed zeros
    flush_to_zero = Ops(Rules(underflow="none")).mul(a, b)
    assert ((flush_to_zero & 0x7F800000) == 0).sum() > 100 and (flush_to_zero != r).any()
    assert (r == 0x00800000).sum() > 10 and (r == 0x7F800000).any() and (r == 0xFF800000).any()
    assert (r == 0x7FFFFFFF).sum() > 100 and (r == 0x80000000).any()
    assert len(a) == 2 + len(ops.SPECIAL) ** 2 + ops.LEVEL1_RANDOM


def test_gen_is_deterministic_and_seeded(capsysbinary: pytest.CaptureFixture[bytes]) -> None:
    assert main(["ops", "gen", "div", "--count", "50"]) == 0
    one = capsysbinary.readouterr().out
    assert main(["ops", "gen", "div", "--count", "50"]) == 0
    assert capsysbinary.readouterr().out == one
    assert main(["ops", "gen", "div", "--count", "50", "--seed", "2"]) == 0
    assert capsysbinary.readouterr().out != one
    assert main(["ops", "gen", "from_u32", "--level", "2", "--count", "1000"]) == 0
    lines = capsysbinary.readouterr().out.splitlines()
    assert len(lines) == 1000 and all(len(x.split()) == 2 for x in lines)


def _write(path: Path, op: str, a: np.ndarray, b: np.ndarray | None, r: np.ndarray) -> Path:
    path.write_bytes(ops.format_lines(a, r) if b is None else ops.format_lines(a, b, r))
    return path


def _verify_json(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, dict]:
    code = main(["ops", "verify", *argv, "--json", "--show", "100000"])
    return code, json.loads(capsys.readouterr().out)


@pytest.mark.parametrize(
    ("op", "rules", "klass"),
    [
        ("mul", Rules(underflow="none"), "subnormal-not-flushed"),
        ("mul", Rules(underflow="before"), "ftz-before-rounding"),
        ("mul", Rules(underflow="after"), "ftz-after-rounding"),
        ("add", Rules(daz=False), "subnormal-input-not-flushed"),
        ("div", Rules(nan="x86"), "nan-not-canonical"),
        ("sub", Rules(nan="arm"), "nan-not-canonical"),
    ],
)
def test_verify_classifies_an_executor_with_other_rules(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], op: str, rules: Rules, klass: str
) -> None:
    a, b = ops.generate(op, 1)
    got = apply_op(Ops(rules), op, a, b)
    code, rep = _verify_json(capsys, op, str(_write(tmp_path / "v.txt", op, a, b, got)))
    assert code == 1 and rep["checked"] == len(a)
    assert rep["wrong"] == int((got != ops.expected(op, a, b)).sum()) > 0
    assert all(klass in w["classes"] for w in rep["first"]), [w for w in rep["first"] if klass not in w["classes"]][:3]
    assert rep["classes"][klass] == rep["wrong"]


def test_verify_separates_the_two_flush_rules_on_the_probes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a = np.array([0x3F7FFFFF, 0x3F7FFFFE], dtype=np.uint32)
    b = np.array([0x00800000, 0x00800001], dtype=np.uint32)
    for rules, classes in [
        (Rules(underflow="before"), [["ftz-before-rounding", "ftz-after-rounding"], ["ftz-before-rounding"]]),
        (Rules(underflow="after"), [["ftz-before-rounding", "ftz-after-rounding"]]),
    ]:
        got = Ops(rules).mul(a, b)
        _, rep = _verify_json(capsys, "mul", str(_write(tmp_path / "p.txt", "mul", a, b, got)))
        assert [w["classes"] for w in rep["first"]] == classes


def test_verify_wrong_sign_and_rounding(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a, b = ops.generate("add", 1)
    want = ops.expected("add", a, b)
    got = want.copy()
    plain = ~(ops_subnormal(a) | ops_subnormal(b))  # a zero from subnormal inputs is also a DAZ question
    zeros = np.nonzero(((want & 0x7FFFFFFF) == 0) & plain)[0][:50]
    normal = np.nonzero(((want & 0x7F800000) != 0) & ((want & 0x7F800000) < 0x7F000000))[0][:50]
    got[zeros] ^= 0x80000000
    got[normal] += 1
    code, rep = _verify_json(capsys, "add", str(_write(tmp_path / "w.txt", "add", a, b, got)))
    assert code == 1 and rep["wrong"] == len(zeros) + len(normal) == 100
    assert rep["classes"] == {"zero-wrong-sign": 50, "rounding": 50}
    by_index = {w["line_index"]: w["classes"] for w in rep["first"]}
    assert all(by_index[int(i)] == ["zero-wrong-sign"] for i in zeros)
    assert all(by_index[int(i)] == ["rounding"] for i in normal)


def test_verify_exit_codes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good = tmp_path / "good.txt"
    good.write_bytes(b"# a comment\n\n" + ops.gen_lines("from_u32", 1, count=100))
    assert main(["ops", "verify", "from_u32", str(good)]) == 0
    assert capsys.readouterr().out.startswith("PASS: from_u32:")
    cases = {
        "garbage.txt": b"3f800000 zz 3f800000\n",
        "short.txt": b"3f800000 3f800000\n",
        "long.txt": b"3f800000 3f800000 3f800000 3f800000\n",
        "toolong.txt": b"3f8000000 3f800000 3f800000\n",
        "empty.txt": b"",
        "binary.txt": bytes(range(256)),
    }
    for name, data in cases.items():
        (tmp_path / name).write_bytes(data)
        assert main(["ops", "verify", "mul", str(tmp_path / name)]) == 2, name
        err = capsys.readouterr().err
        assert err.startswith("meshnb: error: ") and err.count("\n") == 1, (name, err)
    assert main(["ops", "verify", "mul", str(tmp_path / "missing.txt")]) == 2
    assert main(["ops", "verify", "mul", str(tmp_path)]) == 2
    assert main(["ops", "verify", "sqrt", str(good)]) == 2
    capsys.readouterr()


def test_parse_reads_any_layout_the_same() -> None:
    """The canonical layout (numpy fast path) and free layouts (comments, case, spacing) agree."""
    a, b = ops.generate("sub", 1, count=500)
    r = ops.expected("sub", a, b)
    canon = ops.format_lines(a, b, r)
    free = (
        b"# executor output\n"
        + b"\n".join(f"  {x:X}\t{y:x}   {z:08X} ".encode() for x, y, z in zip(a.tolist(), b.tolist(), r.tolist()))
        + b"\n\n"
    )
    p1, p2 = ops.parse("sub", canon), ops.parse("sub", free)
    assert ops._parse_canonical(canon, 3) is not None and ops._parse_canonical(free, 3) is None
    for x, y in zip(p1, p2):
        assert np.array_equal(x, y)
    assert np.array_equal(p1[0], a) and np.array_equal(p1[2], r)


# =============================================================================================
# Hostile input (issue 16)
# =============================================================================================


def _meshnb(*args: str, **kw: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "meshnb", *args], capture_output=True, text=True, timeout=120, **kw)  # type: ignore[call-overload,no-any-return]


def test_verify_stdin_closed_or_endless() -> None:
    closed = subprocess.run(
        [sys.executable, "-m", "meshnb", "ops", "verify", "add", "-"],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=lambda: os.close(0),
    )
    assert (
        closed.returncode == 2
        and closed.stderr == "meshnb: error: stdin is closed: give the file's name, or pipe the vectors in\n"
    )
    with open("/dev/zero", "rb") as zero:
        endless = _meshnb("ops", "verify", "add", "-", stdin=zero)
    assert endless.returncode == 2 and endless.stderr.count("\n") == 1 and "a line longer than" in endless.stderr
    endless = _meshnb("ops", "verify", "add", "/dev/zero")
    assert endless.returncode == 2 and "a character device, not a regular file" in endless.stderr


def test_verify_refuses_nul_tokens(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "v.txt"
    f.write_bytes(b"3f800000 3f800000 40000000\n\x00 00000000 00000000\n")
    assert main(["ops", "verify", "add", str(f)]) == 2
    assert capsys.readouterr().err == "meshnb: error: line 2: a NUL byte, not a hex word\n"


def test_verify_streams_in_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    """A file verified a few lines at a time gives the report of the whole, line numbers included."""
    a, b = ops.generate("mul", 1, 3, 2000)
    got = ops.expected("mul", a, b)
    got[[5, 2500, 4000]] ^= 1
    data = ops.format_lines(a, b, got)
    whole = ops.verify("mul", data, 10)
    monkeypatch.setattr(ops, "CHUNK", 1000)
    view = memoryview(data)
    pos = 0

    def read(n: int) -> bytes:
        nonlocal pos
        pos += n
        return bytes(view[pos - n : pos])

    parts = list(ops.chunks_of(read))
    assert len(parts) > 100 and b"".join(parts) == data
    assert ops.verify_chunks("mul", parts, 10) == whole
    assert whole.wrong == 3 and [w["line_index"] for w in whole.first] == [5, 2500, 4000]
    bad = data[: 27 * 3000] + b"zz 00000000 00000000\n"
    with pytest.raises(ops.BadInput, match="line 3001: 'zz'"):
        ops.verify_chunks("mul", ops.chunks_of(io.BytesIO(bad).read))


def test_gen_count_is_bounded(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["ops", "gen", "mul", "--count", str(10**12)]) == 2
    assert capsys.readouterr().err.startswith("meshnb: error: count 1000000000000: from 0 to")
    with pytest.raises(ValueError, match="count"):
        ops.generate("add", 1, 1, -1)


def test_gen_into_a_closed_pipe_is_141() -> None:
    """`meshnb ops gen mul | true`: the reader is gone, the exit is SIGPIPE's 141, quietly."""
    r, w = os.pipe()
    os.close(r)
    proc = subprocess.run(
        [sys.executable, "-m", "meshnb", "ops", "gen", "mul"], stdout=w, stderr=subprocess.PIPE, timeout=120
    )
    os.close(w)
    assert proc.returncode == 141 and proc.stderr == b""


def test_the_old_name_of_the_verify_report_warns() -> None:
    import pytest

    from meshnb.conformance import ops

    with pytest.warns(DeprecationWarning, match="ops.Report is VerifyReport now"):
        assert ops.Report is ops.VerifyReport
