"""Regenerate the numba-cuda PTX fixtures of tests/cuda/test_audit.py (run once, output committed).

    python tests/cuda/ptx/make_fixtures.py

Needs numba-cuda and the toolkit wheels (no GPU).  The expected findings live in the tests: a
changed compiler may change these files, and the tests then say what moved."""

from pathlib import Path

from numba import cuda

HERE = Path(__file__).parent


def horner(out, p2, p3, x):
    # p3 * x + p2 on float32: numba-cuda contracts it into fma.rn.f32 (fma.rn.ftz.f32 with fastmath)
    out[0] = p3[0] * x[0] + p2[0]


def promoted(out, s, inv):
    # a Python float constant promotes the arithmetic to f64: cvt.f64.f32, rcp.rn.f64, ...
    out[0] = s[0] * (1.0 / inv[0])


SIG = "(float32[::1], float32[::1], float32[::1], float32[::1])"
SIG2 = "(float32[::1], float32[::1], float32[::1])"

if __name__ == "__main__":
    for name, fn, sig, opts in (
        ("horner_default", horner, SIG, {}),
        ("horner_fastmath", horner, SIG, {"fastmath": True}),
        ("promoted_f64", promoted, SIG2, {}),
    ):
        ptx, _ = cuda.compile_ptx(fn, sig, cc=(9, 0), **opts)
        (HERE / f"{name}.ptx").write_text(ptx)
