"""The reference implementation (meshnb.testing.reference) against SPEC.md's vectors, and its two
implementations (numpy, plain Python) against each other."""

from __future__ import annotations

import hashlib
import struct

import mpmath
import numpy as np
import pytest

from meshnb.testing import reference as R
from meshnb.testing import vectors
from meshnb.testing.pages import hard_pages
from meshnb.testing.pages import with_words as set_words

from .util import words

VECTORS = vectors()

NAN = 0x7FFFFFFF


def params_of(page: bytes) -> np.ndarray:
    return np.frombuffer(page, dtype="<u4", count=4).astype(np.uint32)


@pytest.fixture(scope="module")
def page1() -> bytes:
    return R.init_page()


# --- samples and the initial page ------------------------------------------------------------


@pytest.mark.parametrize("impl", ["numpy", "python"])
def test_sample_vectors(impl: str) -> None:
    x, y = R.samples(impl)
    assert x.dtype == np.uint32 and x.shape == (256,)
    assert list(x[:4]) == [0xBF800000, 0xBF7DFDFE, 0xBF7BFBFC, 0xBF79F9FA]
    assert x[255] == 0x3F800000
    assert list(y[:4]) == [0x80000000, 0xBCC9D479, 0xBD49C4CA, 0xBD973FFE]
    assert y[255] == 0x00000000


def test_samples_impls_agree() -> None:
    xn, yn = R.samples("numpy")
    xp, yp = R.samples("python")
    assert np.array_equal(xn, xp) and np.array_equal(yn, yp)


def test_y_correctly_rounded_mpmath() -> None:
    """Each y_i is the f32 nearest to sin(pi x_i), checked against its two neighbours."""
    x, y = R.samples("numpy")
    assert y[0] == 0x80000000 and y[255] == 0
    with mpmath.workdps(50):
        for i in range(1, 255):
            exact = mpmath.sin(mpmath.pi * mpmath.mpf(float(x.view(np.float32)[i])))
            got = y.view(np.float32)[i]
            err = abs(mpmath.mpf(float(got)) - exact)
            for nb in (np.nextafter(got, np.float32(np.inf)), np.nextafter(got, np.float32(-np.inf))):
                assert err < abs(mpmath.mpf(float(nb)) - exact), i


def test_init_page(page1: bytes) -> None:
    assert len(page1) == 4096
    assert hashlib.sha256(page1[64:2112]).hexdigest() == (
        "aa85b48c7c95d13a4430b86e4435f69711f06db73c45504eb4404d7677da8f4a"
    )
    hdr = struct.unpack_from("<12I", page1, 0)
    assert hdr[:4] == (0, 0, 0, 0)
    assert hdr[4] == 0x3F000000 and hdr[5] == 64
    assert hdr[6] == 0x3D000000  # 1/32
    assert hdr[7:] == (0, 0, 0, 0, 0)
    assert page1[2112:] == bytes(4096 - 2112) and page1[48:64] == bytes(16)
    for n, inv in [(2, 0x3C800000), (4, 0x3C000000), (3, int(R.to_bits(np.float32(1 / 96))))]:
        page = R.init_page(n, grouped=True)
        assert struct.unpack_from("<I", page, 24)[0] == inv
        assert page[28:] == page1[28:] and page[:24] == page1[:24]
    assert R.init_page(4, grouped=False) == page1


# --- the vectors of SPEC section 12 -----------------------------------------------------------


@pytest.mark.parametrize("impl", ["numpy", "python"])
def test_first_eight_steps(page1: bytes, impl: str) -> None:
    v = VECTORS["one_system_steps_0_to_7"]
    out, trace = R.run([page1], 8, grouped=False, impl=impl)
    assert trace.shape == (8, 5) and trace.dtype == np.uint32
    assert np.array_equal(trace, np.stack([words(r) for r in v["sums"]]))
    assert np.array_equal(params_of(out[0]), words(v["params_after"]))
    hdr = struct.unpack_from("<12I", out[0], 0)
    assert hdr[7] == 8 and hdr[8] == 0 and hdr[9] == 0 and hdr[11] == 0


@pytest.mark.parametrize("impl", ["numpy", "python"])
def test_step_sums_direct(page1: bytes, impl: str) -> None:
    """step_sums with the page's samples and zero params is step 0's sums."""
    v = VECTORS["one_system_steps_0_to_7"]
    xs = np.frombuffer(page1, "<u4", 256, 64).view(np.float32)
    ys = np.frombuffer(page1, "<u4", 256, 1088).view(np.float32)
    s = R.step_sums(np.zeros(4, np.float32), xs, ys, 0, impl=impl)
    assert s.dtype == np.float32 and s.shape == (5,)
    assert np.array_equal(s.view(np.uint32), words(v["sums"][0]))
    # offsets are taken mod 8 (of the u32)
    s8 = R.step_sums(np.zeros(4, np.float32), xs, ys, 8 * 12345, impl=impl)
    assert np.array_equal(s8, s)


@pytest.mark.parametrize("run_vec", VECTORS["runs"], ids=lambda r: f"N{r['systems']}")
def test_4096_step_runs(run_vec: dict) -> None:
    n, grouped = run_vec["systems"], run_vec["grouped"]
    pages = [R.init_page(n, grouped)] * n
    out, trace = R.run(pages, run_vec["steps"], grouped=grouped)
    assert trace.shape == (run_vec["steps"], 5)
    for page in out:
        assert np.array_equal(params_of(page), words(run_vec["params"]))
        assert R.digest(page) == run_vec["digest"]
        assert page == out[0]
        assert struct.unpack_from("<I", page, 28)[0] == run_vec["steps"]
    assert R.trace_digest(trace) == run_vec["trace_digest"]


def test_split_run_equals_whole(page1: bytes) -> None:
    """A run resumed from a saved page continues bit for bit (its trace is its own steps)."""
    whole, tw = R.run([page1], 200, grouped=False)
    mid, t1 = R.run([page1], 77, grouped=False)
    end, t2 = R.run(mid, 123, grouped=False)
    assert end == whole
    assert np.array_equal(np.concatenate([t1, t2]), tw)


# --- the two implementations agree ------------------------------------------------------------


@pytest.mark.parametrize("n,grouped,steps", [(1, False, 300), (2, True, 150), (4, True, 75)])
def test_python_impl_matches_numpy(n: int, grouped: bool, steps: int) -> None:
    pages = [R.init_page(n, grouped)] * n
    lr = {37: 0x3E800000, 60: 0x3F400000}
    a, ta = R.run(pages, steps, grouped=grouped, lr_changes=lr, impl="numpy")
    b, tb = R.run(pages, steps, grouped=grouped, lr_changes=lr, impl="python")
    assert a == b
    assert np.array_equal(ta, tb)


HARD = hard_pages()
FLUSH_PAGES = ["tiny-params-zero-y", "boundary-params-zero-y", "tiny-samples", "tiny-samples-big-params"]


def test_flush_pages_exercise_mode_z() -> None:
    """On these pages every step meets subnormal intermediates: mode Z and IEEE part each step."""
    for name in FLUSH_PAGES:
        _, tz = R.run([HARD[name]], 20, grouped=False)
        _, ti = R.run([HARD[name]], 20, grouped=False, mode="ieee")
        assert (tz != ti).any(axis=1).all(), name


@pytest.mark.parametrize("name", sorted(HARD))
def test_hard_pages_impls_agree(name: str) -> None:
    a, ta = R.run([HARD[name]], 40, grouped=False, impl="numpy")
    b, tb = R.run([HARD[name]], 40, grouped=False, impl="python")
    assert a == b and np.array_equal(ta, tb)
    for w in list(ta.ravel()) + list(params_of(a[0])):
        assert (w & 0x7F800000) != 0 or (w & 0x7FFFFFFF) == 0  # never a subnormal word
        assert (w & 0x7F800000) != 0x7F800000 or (w & 0x7FFFFF) == 0 or w == NAN


def test_hard_pages_grouped_impls_agree() -> None:
    names = ["tiny-params-zero-y", "tiny-params-underflow", "boundary-params-zero-y", "tiny-samples-big-params"]
    pages = [set_words(HARD[name], 24, [0x3C000000]) for name in names]
    a, ta = R.run(pages, 30, grouped=True, impl="numpy")
    b, tb = R.run(pages, 30, grouped=True, impl="python")
    assert a == b and np.array_equal(ta, tb)


def test_run_reads_page_through_flush() -> None:
    """PARAMS/LR/INV_BATCH are read through ftz_from_bits; PARAMS written back flushed."""
    base = R.init_page()
    sub = set_words(base, 0, [0x00000001, 0x80000002, 0x007FFFFF, 0x807FFFFF])
    a, ta = R.run([sub], 5, grouped=False)
    z, tz = R.run([set_words(base, 0, [0, 0x80000000, 0, 0x80000000])], 5, grouped=False)
    assert a == z and np.array_equal(ta, tz)
    nan = set_words(base, 0, [0xFFC00000, 0, 0, 0])
    a, ta = R.run([nan], 3, grouped=False)
    assert params_of(a[0])[0] == NAN and (ta[:, 0] == NAN).all()


# --- host semantics ---------------------------------------------------------------------------


def test_run_header_effects(page1: bytes) -> None:
    page = set_words(page1, 28, [0xFFFFFFF0, 1, 1, 0x1234, 7])  # NEXT_STEP, ERR, PENDING, ROUND, HI
    out, trace = R.run([page], 40, grouped=False)
    hdr = struct.unpack_from("<12I", out[0], 0)
    nxt = (7 << 32 | 0xFFFFFFF0) + 40
    assert hdr[7] == nxt & 0xFFFFFFFF and hdr[11] == nxt >> 32
    assert hdr[8] == 0 and hdr[9] == 0 and hdr[10] == 0x1234
    assert hdr[4:7] == struct.unpack_from("<3I", page1, 16)
    # the batch offset is the low 32 bits of t: same sums as from step 0xFFFFFFF0 with HI = 0
    lo, tlo = R.run([set_words(page1, 28, [0xFFFFFFF0])], 40, grouped=False)
    assert np.array_equal(trace, tlo)
    # zero steps: unchanged
    same, t0 = R.run([page], 0, grouped=False)
    assert same == [page] and t0.shape == (0, 5)


def test_loss_slots(page1: bytes) -> None:
    out, trace = R.run([page1], 300, grouped=False)
    loss = np.frombuffer(out[0], "<u4", 256, 2112)
    inv = np.float32(1 / 32)
    for t in range(300 - 256, 300):
        want = R.to_bits(R.z_mul(trace[t].view(np.float32)[4], inv))
        assert loss[t % 256] == want


def test_lr_changes(page1: bytes) -> None:
    out, t = R.run([page1], 20, grouped=False, lr_changes={10: 0x3E800000})
    a, ta = R.run([page1], 10, grouped=False)
    a = set_words(a[0], 16, [0x3E800000])
    b, tb = R.run([a], 10, grouped=False)
    assert out == b and np.array_equal(t, np.concatenate([ta, tb]))
    assert struct.unpack_from("<I", out[0], 16)[0] == 0x3E800000
    # the LR word is stored as ftz_from_bits reads it
    out, _ = R.run([page1], 3, grouped=False, lr_changes={0: 0x00000123})
    assert struct.unpack_from("<I", out[0], 16)[0] == 0
    out, _ = R.run([page1], 3, grouped=False, lr_changes={3: 0xFFC00001})
    assert struct.unpack_from("<I", out[0], 16)[0] == NAN


def test_run_refusals(page1: bytes) -> None:
    last = (1 << 64) - 1
    near = set_words(page1, 28, [(last - 5) & 0xFFFFFFFF, 0, 0, 0, (last - 5) >> 32])
    R.run([near], 5, grouped=False)  # last step run is 2^64 - 2
    with pytest.raises(ValueError):
        R.run([near], 6, grouped=False)
    with pytest.raises(ValueError):
        R.run([page1, page1], 1, grouped=False)
    with pytest.raises(ValueError):
        R.run([page1], 3, grouped=False, lr_changes={4: 0})
    with pytest.raises(ValueError):
        R.run([page1, set_words(page1, 28, [1])], 3, grouped=True)
    with pytest.raises(NotImplementedError):
        R.run([page1], 3, grouped=False, impl="python", mode="ieee")


def test_ieee_mode_differs_only_where_z_matters(page1: bytes) -> None:
    a, ta = R.run([page1], 100, grouped=False, mode="ieee")
    z, tz = R.run([page1], 100, grouped=False)
    assert a == z and np.array_equal(ta, tz)  # the default trajectory never meets a subnormal
    # 0x00800000 * 0x3F7FFFFF rounds (tie to even) to the min normal in both modes (hardware FTZ
    # would give 0); an exact subnormal result or a subnormal input is where they part
    s = np.array([0x00800000], np.uint32).view(np.float32)
    m = np.array([0x3F7FFFFF], np.uint32).view(np.float32)
    h = np.array([0x3F000000], np.uint32).view(np.float32)
    sub = np.array([0x00400000], np.uint32).view(np.float32)
    assert R.z_mul(s, m).view(np.uint32)[0] == 0x00800000
    with np.errstate(all="ignore"):
        assert (s * m).view(np.uint32)[0] == 0x00800000
        assert (s * h).view(np.uint32)[0] == 0x00400000
        assert (sub + np.float32(0)).view(np.uint32)[0] == 0x00400000
    assert R.z_mul(s, h).view(np.uint32)[0] == 0
    assert R.z_add(sub, np.float32(0)).view(np.uint32)[0] == 0
    # and a page with subnormal params runs differently in the two modes
    # (Y = 0 and a = 2^-66: e = 2^-66, e * e = 2^-132 is subnormal)
    page = set_words(set_words(page1, 1088, [0] * 256), 0, [0x1E800000, 0, 0, 0])
    a, ta = R.run([page], 1, grouped=False, mode="ieee")
    z, tz = R.run([page], 1, grouped=False)
    assert tz[0, 4] == 0 and ta[0, 4] == 0x00400000  # 32 * 2^-132 = 2^-127, a subnormal
    assert np.array_equal(ta[0, :4], tz[0, :4]) and ta[0, 4] != tz[0, 4]


# --- mode Z operations: special values and random words ----------------------------------------

Z_OPS = {
    "add": (R.z_add, R.py_add),
    "sub": (R.z_sub, R.py_sub),
    "mul": (R.z_mul, R.py_mul),
    "div": (R.z_div, R.py_div),
}


def np_op(name: str, a: int, b: int) -> int:
    f = Z_OPS[name][0]
    r = f(np.array([a], np.uint32).view(np.float32), np.array([b], np.uint32).view(np.float32))
    return int(np.asarray(r, np.float32).view(np.uint32).ravel()[0])


@pytest.mark.parametrize(
    "name,a,b,want",
    [
        ("mul", 0x00800000, 0x3F7FFFFF, 0x00800000),  # rounds up to the min normal: kept
        ("mul", 0x00800000, 0x3F000000, 0x00000000),  # exact subnormal result flushed
        ("mul", 0x80800000, 0x3F000000, 0x80000000),  # with its sign
        ("mul", 0x00800000, 0xBF000000, 0x80000000),
        ("div", 0x00800000, 0x40000000, 0x00000000),
        ("sub", 0x00800000, 0x00800001, 0x80000000),  # -2^-149: subnormal, flushed to -0
        ("add", 0x7F800000, 0xFF800000, NAN),  # inf - inf
        ("sub", 0x7F800000, 0x7F800000, NAN),
        ("mul", 0x7F800000, 0x00000000, NAN),  # inf * 0
        ("mul", 0x7F800000, 0x00000001, NAN),  # inf * subnormal (read as 0)
        ("div", 0x00000000, 0x80000000, NAN),  # 0 / -0
        ("div", 0x00000003, 0x00000001, NAN),  # subnormal / subnormal = 0 / 0
        ("div", 0x3F800000, 0x80000001, 0xFF800000),  # 1 / (-subnormal) = 1 / -0 = -inf
        ("div", 0xBF800000, 0x00000000, 0xFF800000),
        ("add", 0x7FC12345, 0x3F800000, NAN),  # NaN payload input
        ("add", 0xFF800001, 0x3F800000, NAN),  # signalling NaN input
        ("mul", 0xFFC00000, 0x00000000, NAN),
        ("add", 0x00000001, 0x00000000, 0x00000000),  # subnormal inputs read as signed zeros
        ("add", 0x80000001, 0x80000000, 0x80000000),  # -0 + -0 = -0
        ("add", 0x80000001, 0x00000001, 0x00000000),  # -0 + +0 = +0
        ("sub", 0x807FFFFF, 0x007FFFFF, 0x80000000),  # -0 - +0 = -0
        ("mul", 0x007FFFFF, 0x7F7FFFFF, 0x00000000),  # subnormal * max = 0, not ~1
        ("mul", 0x807FFFFF, 0x7F7FFFFF, 0x80000000),
        ("add", 0x3F800000, 0x007FFFFF, 0x3F800000),
        ("mul", 0x7F7FFFFF, 0x40000000, 0x7F800000),  # overflow to inf
        ("mul", 0xFF7FFFFF, 0x40000000, 0xFF800000),
        ("add", 0x7F7FFFFF, 0x73000000, 0x7F800000),  # max + half ulp: ties to even -> inf
        ("add", 0x7F7FFFFF, 0x72FFFFFF, 0x7F7FFFFF),  # just under half ulp: stays max
        ("div", 0x00800000, 0x3F800001, 0x00000000),  # just under the min normal: flushed
        ("div", 0x3F800000, 0x40400000, 0x3EAAAAAB),  # 1/3 round to nearest
        ("add", 0x3F800000, 0x33800000, 0x3F800000),  # 1 + 2^-24: tie to even (down)
        ("add", 0x3F800001, 0x33800000, 0x3F800002),  # tie to even (up)
    ],
)
def test_z_special_values(name: str, a: int, b: int, want: int) -> None:
    assert Z_OPS[name][1](a, b) == want
    assert np_op(name, a, b) == want


def _random_words(rng: np.random.Generator, n: int) -> np.ndarray:
    """Words biased towards the edges: zero/subnormal/max exponents, small mantissas."""
    w = rng.integers(0, 1 << 32, n, dtype=np.uint64).astype(np.uint32)
    kind = rng.integers(0, 6, n)
    exps = np.array([0, 0xFF, 1, 0xFE, 0x7F, 0x80], np.uint32)
    pick = kind < 3
    e = exps[rng.integers(0, 6, n)]
    w[pick] = (w[pick] & 0x807FFFFF) | (e[pick] << 23)
    # operands near the flush boundary: exponents 1..40
    near = kind == 3
    w[near] = (w[near] & 0x807FFFFF) | (rng.integers(1, 40, near.sum()).astype(np.uint32) << 23)
    return w


@pytest.mark.parametrize("name", sorted(Z_OPS))
def test_z_ops_random_numpy_equals_python(name: str) -> None:
    rng = np.random.default_rng(1234 + len(name))
    n = 3000
    a, b = _random_words(rng, n), _random_words(rng, n)
    # pair some operands so results land near the flush boundary
    b[: n // 4] = (b[: n // 4] & 0x807FFFFF) | (rng.integers(0x70, 0x86, n // 4).astype(np.uint32) << 23)
    f_np, f_py = Z_OPS[name]
    with np.errstate(all="ignore"):
        got = np.asarray(f_np(a.view(np.float32), b.view(np.float32))).view(np.uint32)
    want = np.array([f_py(int(x), int(y)) for x, y in zip(a, b)], dtype=np.uint32)
    assert np.array_equal(got, want), np.flatnonzero(got != want)[:5]
    # and the mode Z output rule holds
    assert not (((got & 0x7F800000) == 0) & ((got & 0x7FFFFFFF) != 0)).any()
    isnan = ((got & 0x7F800000) == 0x7F800000) & ((got & 0x7FFFFF) != 0)
    assert (got[isnan] == NAN).all()


def test_z_ops_scalars_and_shapes() -> None:
    r = R.z_add(np.float32(1.0), np.float32(2.0))
    assert isinstance(r, np.ndarray) and r.dtype == np.float32 and float(r) == 3.0
    r = R.z_mul(np.ones((3, 4), np.float32), np.float32(2.0))
    assert r.shape == (3, 4) and (r == 2.0).all()


def test_from_u32() -> None:
    rng = np.random.default_rng(7)
    u = np.concatenate(
        [
            rng.integers(0, 1 << 32, 3000, dtype=np.uint64).astype(np.uint32),
            np.array(
                [
                    0,
                    1,
                    255,
                    (1 << 24) + 1,
                    (1 << 24) + 3,
                    0xFFFFFFFF,
                    0xFFFFFF7F,
                    0xFFFFFF80,
                    0xFFFFFF81,
                    0x7FFFFFBF,
                    0x7FFFFFC0,
                    0x7FFFFFC1,
                ],
                np.uint32,
            ),
        ]
    )
    got = R.z_from_u32(u).view(np.uint32)
    want = np.array([R.py_from_u32(int(x)) for x in u], np.uint32)
    assert np.array_equal(got, want)
    # exact rounding, checked with integers: nearest f32, ties to even
    for x, w in zip(u[-12:], got[-12:]):
        v = int(np.uint32(w).view(np.float32))
        assert abs(v - int(x)) <= abs(int(np.nextafter(np.float32(v), np.float32(np.inf))) - int(x))
    assert R.py_from_u32(0xFFFFFF7F) == 0x4F7FFFFF  # 2^32 - 129 -> 2^32 - 256
    assert R.py_from_u32(0xFFFFFF80) == 0x4F800000  # tie: to even, 2^32
    assert R.py_from_u32((1 << 24) + 1) == 0x4B800000  # tie: to even, 2^24
    assert R.py_from_u32((1 << 24) + 3) == 0x4B800002
    assert R.py_from_u32(255) == 0x437F0000


def test_flush_bits_round_trip() -> None:
    w = np.array(
        [
            0x00000001,
            0x807FFFFF,
            0x00800000,
            0x7F800000,
            0xFF800000,
            0x7F800001,
            0xFFC00000,
            0x7FC00000,
            0x3F800000,
            0x80000000,
        ],
        np.uint32,
    )
    want = np.array(
        [0, 0x80000000, 0x00800000, 0x7F800000, 0xFF800000, NAN, NAN, NAN, 0x3F800000, 0x80000000], np.uint32
    )
    assert np.array_equal(R.from_bits(w).view(np.uint32), want)
    assert np.array_equal(R.to_bits(w.view(np.float32)), want)
    assert np.array_equal(R.flush(w.view(np.float32)).view(np.uint32), want)
    assert [R.py_flush(int(x)) for x in w] == list(want)


def test_digests() -> None:
    page = bytes(range(256)) * 16
    assert R.digest(page) == hashlib.sha256(page[:16] + page[2112:3136]).hexdigest()
    t = np.arange(15, dtype=np.uint32).reshape(3, 5)
    assert R.trace_digest(t) == hashlib.sha256(struct.pack("<15I", *range(15))).hexdigest()
    assert R.trace_digest(np.zeros((0, 5), np.uint32)) == hashlib.sha256(b"").hexdigest()


# --- the step model (meshnb.conformance.model) against this oracle, and the njit core against the model


def _random_page(seed: int) -> tuple[bytes, dict[int, int]]:
    """init's page with params, LR and INV_BATCH words of every kind (ordinary, near the flush
    boundary, subnormal, NaN) and some Y words changed; an LR change of the same kinds."""
    rng = np.random.default_rng(seed)

    def word() -> int:
        kind = rng.integers(0, 8)
        if kind < 4:
            return int(np.float32(rng.uniform(-2, 2)).view(np.uint32))
        if kind < 6:
            return int(np.float32(rng.uniform(-2, 2) * 2.0**-120).view(np.uint32))
        if kind < 7:
            return int(rng.integers(1, 1 << 23)) | int(rng.choice([0, 0x80000000]))
        return 0x7FC00001

    page = set_words(R.init_page(), 0, [word() for _ in range(4)])
    page = set_words(page, 16, [word()])
    page = set_words(page, 24, [int(np.float32(rng.uniform(0, 0.1)).view(np.uint32)) if seed % 2 else word()])
    ys = rng.integers(0, 256, 8)
    for i in ys:
        page = set_words(page, 1088 + 4 * int(i), [word()])
    return page, {int(rng.integers(1, 30)): word()}


MODEL_PAGES = {f"hard-{k}": (v, {}) for k, v in HARD.items()} | {f"random-{s}": _random_page(s) for s in range(6)}


@pytest.mark.parametrize("run_vec", VECTORS["runs"], ids=lambda r: f"N{r['systems']}")
def test_the_step_model_gives_the_vectors(run_vec: dict) -> None:
    from meshnb.conformance import model

    n, grouped = run_vec["systems"], run_vec["grouped"]
    r = model.run([model.init_page(n, grouped)] * n, run_vec["steps"], grouped=grouped)
    assert all(R.digest(page) == run_vec["digest"] for page in r.pages)
    assert R.trace_digest(r.trace) == run_vec["trace_digest"]


@pytest.mark.parametrize("name", sorted(MODEL_PAGES))
def test_the_step_model_is_the_reference(name: str) -> None:
    """The model's interpreter with no rule changed and both references: the same pages and traces."""
    from meshnb.conformance import model

    page, lr = MODEL_PAGES[name]
    r = model.run([page], 40, grouped=False, set_lr=lr)
    out, trace = R.run([page], 40, grouped=False, lr_changes=lr)
    assert r.pages == out and np.array_equal(r.trace, trace)
    out, trace = R.run([page], 8, grouped=False, lr_changes={s: w for s, w in lr.items() if s <= 8}, impl="python")
    r8 = model.run([page], 8, grouped=False, set_lr={s: w for s, w in lr.items() if s <= 8})
    assert r8.pages == out and np.array_equal(r8.trace, trace)


def test_the_step_model_is_the_reference_grouped() -> None:
    from meshnb.conformance import model

    names = ["tiny-params-zero-y", "tiny-params-underflow", "boundary-params-zero-y", "tiny-samples-big-params"]
    pages = [set_words(HARD[name], 24, [0x3C000000]) for name in names] + [_random_page(1)[0]]
    r = model.run(pages, 30, grouped=True, set_lr={3: 0x3F333333})
    out, trace = R.run(pages, 30, grouped=True, lr_changes={3: 0x3F333333})
    assert r.pages == out and np.array_equal(r.trace, trace)


@pytest.mark.parametrize("name", sorted(MODEL_PAGES))
def test_the_njit_core_is_the_step_model(name: str) -> None:
    """meshnb's numba program (train) against the model's interpreter: pages and traces, bit for bit."""
    from meshnb import train
    from meshnb.conformance import model

    page, lr = MODEL_PAGES[name]
    page = set_words(page, 20, [1])  # STEPS_PER_TASK 1: an LR change lands between any two steps
    got = train(40, steps_per_task=1, view_in=page, keep_trace=True, set_lr={s: np.uint32(w) for s, w in lr.items()})
    want = model.run([page], 40, grouped=False, set_lr=lr)
    assert got.page == want.pages[0] and np.array_equal(got.trace, want.trace)


def test_the_njit_kernels_are_the_step_model() -> None:
    """meshnb.kernels' step_sums, apply, loss and fold (SPEC's kernels, one op at a time) against the
    model's interpreter on words of every kind, a batch offset each."""
    from meshnb import kernels
    from meshnb.conformance import model

    rng = np.random.default_rng(11)
    xs0, ys0 = model.samples()
    for k in range(64):
        page, lr = _random_page(100 + k)
        p = model.read({}, "PARAMS", np.frombuffer(page, dtype="<u4", count=4).astype(np.uint32))
        ys = np.frombuffer(page, dtype="<u4", count=256, offset=1088).astype(np.uint32)
        if k % 4 == 0:  # tiny samples too: products near the flush boundary
            ys = (ys.view(np.float32) * np.float32(2.0**-100)).view(np.uint32)
        off = int(rng.integers(0, 1 << 32))
        want = model.step_sums({}, p[None], xs0[None], ys[None], np.array([off]))[0]
        got = kernels.step_sums(p.view(np.float32), xs0.view(np.float32), ys.view(np.float32), np.uint32(off))
        assert np.array_equal(np.asarray(got, dtype=np.float32).view(np.uint32), want), k
        lrw, invw = (int(model.read({}, f, w)) for f, w in (("LR", next(iter(lr.values()))), ("INV_BATCH", 0x3D000000)))
        new = np.array(p).view(np.float32).copy()
        kernels.apply(new, got, np.uint32(lrw).view(np.float32), np.uint32(invw).view(np.float32))
        want_p = model.apply(
            {}, p[None], want[None], np.array([[lrw]], dtype=np.uint32), np.array([[invw]], dtype=np.uint32)
        )
        assert np.array_equal(new.view(np.uint32), want_p[0]), k
        loss = kernels.loss(got, np.uint32(invw).view(np.float32))
        assert int(np.float32(loss).view(np.uint32)) == int(
            model.loss({}, want[None], np.array([[invw]], dtype=np.uint32))[0]
        )
    slots = rng.integers(0, 1 << 32, (5, 8), dtype=np.uint64).astype(np.uint32)
    slots[:, :5] = np.array(
        [
            model.step_sums({}, np.zeros((1, 4), dtype=np.uint32), xs0[None], ys0[None], np.array([j]))[0]
            for j in range(5)
        ]
    )
    slots[1, 2] = 0x00000003  # a subnormal slot word, read as zero
    got = np.asarray(kernels.fold(slots), dtype=np.float32).view(np.uint32)
    assert np.array_equal(got[:5], model.fold({}, slots[:, :5]))
