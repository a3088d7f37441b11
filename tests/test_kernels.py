"""The kernels (SPEC 4-6): samples against mpmath, step_sums/apply/loss against the vectors and
the numpy reference."""

from __future__ import annotations

import hashlib

import mpmath
import numpy as np
import pytest

from meshnb import kernels
from meshnb.testing import reference as ref
from meshnb.testing.pages import hard_pages

from .util import hexes


def test_samples_match_the_spec_vectors():
    xs, ys = kernels.samples()
    xw, yw = xs.view(np.uint32), ys.view(np.uint32)
    assert hexes(xw[:4]) == ["bf800000", "bf7dfdfe", "bf7bfbfc", "bf79f9fa"] and hexes(xw[255:]) == ["3f800000"]
    assert hexes(yw[:4]) == ["80000000", "bcc9d479", "bd49c4ca", "bd973ffe"] and hexes(yw[255:]) == ["00000000"]
    digest = hashlib.sha256(xs.astype("<f4").tobytes() + ys.astype("<f4").tobytes()).hexdigest()
    assert digest == "aa85b48c7c95d13a4430b86e4435f69711f06db73c45504eb4404d7677da8f4a"


def _round_to_f32(v: mpmath.mpf) -> float:
    """Correct rounding of an mpmath value to binary32 (nearest, ties to even), as a Python float."""
    if v == 0:
        return 0.0
    m, e = mpmath.frexp(v)  # v = m 2^e, 0.5 <= |m| < 1
    scaled = mpmath.ldexp(m, 24)  # 24 significant bits
    q = int(mpmath.nint(scaled))  # mpmath.nint rounds half to even
    return float(mpmath.ldexp(q, e - 24))


def test_samples_are_sin_pi_correctly_rounded_against_mpmath():
    xs, ys = kernels.samples()
    mpmath.mp.prec = 200
    for i in range(256):
        x = mpmath.mpf(float(xs[i]))
        want = np.float32(_round_to_f32(mpmath.sinpi(x)))
        got = ys[i]
        assert got == want and np.signbit(got) == (x < 0 or (x == -1)), (i, got, want)
    # The grid itself: x_i = add(-1, mul(i, h)) in mode Z, h = div(2, 255).
    h = ref.z_div(np.float32(2), ref.z_from_u32(np.uint32(255)))
    grid = ref.z_add(np.float32(-1), ref.z_mul(ref.z_from_u32(np.arange(256, dtype=np.uint32)), h))
    np.testing.assert_array_equal(xs.view(np.uint32), np.asarray(grid, np.float32).view(np.uint32))
    assert ys.view(np.uint32)[0] == 0x80000000 and xs[255] == 1.0


def test_step_sums_apply_loss_match_vectors(vectors):
    v = vectors["one_system_steps_0_to_7"]
    xs, ys = kernels.samples()
    p = np.zeros(4, dtype=np.float32)
    inv = np.float32(1 / 32)
    for t, want in enumerate(v["sums"]):
        sums = kernels.step_sums(p, xs, ys, np.uint32(t))
        assert hexes(sums.view(np.uint32)) == want
        assert kernels.loss(sums, inv) == ref.z_mul(sums[4], inv)
        kernels.apply(p, sums, np.float32(0.5), inv)
    assert hexes(p.view(np.uint32)) == v["params_after"]


def _hard_inputs(seed: int):
    """Params and samples with awkward exponents: underflowing products, overflow, NaN, subnormals."""
    rng = np.random.default_rng(seed)
    xs, ys = kernels.samples()
    scale = np.float32(2.0) ** rng.integers(-70, 70)
    p = (rng.standard_normal(4) * scale).astype(np.float32)
    xs = (xs * np.float32(2.0) ** rng.integers(-45, 45)).astype(np.float32)
    ys = (ys * np.float32(2.0) ** rng.integers(-130, 100)).astype(np.float32)
    pick = rng.integers(0, 256, 6)
    xw, yw = xs.view(np.uint32), ys.view(np.uint32)
    xw[pick[0]] = 0x00000123  # subnormal sample x
    yw[pick[1]] = 0x80400000  # subnormal sample y
    if seed % 3 == 0:
        yw[pick[2]] = 0x7FA00001  # NaN payload
    if seed % 5 == 0:
        xw[pick[3]] = 0xFF800000  # -inf
    p.view(np.uint32)[rng.integers(0, 4)] = rng.choice([0x00000001, 0x807FFFFF, 0x00800000, 0x00800001])
    return p, xs, ys


@pytest.mark.parametrize("seed", range(60))
def test_step_sums_match_reference_on_hard_inputs(seed):
    p, xs, ys = _hard_inputs(seed)
    for off in (np.uint32(seed), np.uint32(0xFFFFFFFF - seed)):
        got = kernels.step_sums(p, xs, ys, off).view(np.uint32)
        want = np.asarray(ref.step_sums(p, xs, ys, int(off)), np.float32).view(np.uint32)
        np.testing.assert_array_equal(got, want)


def test_apply_and_loss_flush_like_the_reference():
    sums = np.array([0x00800000, 0x3F800000, 0x80000001, 0x7F7FFFFF, 0x1F800000], np.uint32).view(np.float32)
    inv = np.uint32(0x3F7FFFFF).view(np.float32)
    lr = np.float32(0.5)
    p = np.array([1.0, 0.0, -0.0, 2.0], dtype=np.float32)
    want = ref.z_sub(p, ref.z_mul(lr, ref.z_mul(sums[:4], inv)))
    kernels.apply(p, sums, lr, inv)
    np.testing.assert_array_equal(p.view(np.uint32), np.asarray(want, np.float32).view(np.uint32))
    assert np.float32(kernels.loss(sums, inv)).view(np.uint32) == np.asarray(ref.z_mul(sums[4], inv), np.float32).view(
        np.uint32
    )


def test_fold_adds_slots_in_system_order_through_ftz_from_bits():
    slots = np.zeros((3, 8), dtype=np.uint32)
    slots[:, 0] = [0x3F800000, 0x33800000, 0x33800000]  # (1 + 2^-24) + 2^-24: order matters
    slots[:, 1] = [0x00000001, 0x00000001, 0x3F800000]  # subnormal words read as zero
    slots[:, 2] = [0x7FA00000, 0x3F800000, 0x3F800000]  # NaN payload -> canonical
    slots[:, 3] = [0x7F7FFFFF, 0x7F7FFFFF, 0xFF800000]  # overflow then inf - inf
    out = kernels.fold(slots).view(np.uint32)
    assert hexes(out[:4]) == ["3f800000", "3f800000", "7fffffff", "7fffffff"]


# --- the door: public kernels refuse other types instead of compiling variants ------------------


def _f64(a):
    return np.asarray(a, dtype=np.float64)


@pytest.mark.parametrize(
    "call, name",
    [
        (lambda xs, ys: kernels.step_sums(_f64(np.zeros(4)), xs, ys, np.uint32(0)), "p"),
        (lambda xs, ys: kernels.step_sums(np.zeros(4, np.float32), _f64(xs), ys, np.uint32(0)), "xs"),
        (lambda xs, ys: kernels.step_sums(np.zeros(4, np.float32), xs, ys, 3), "off"),  # a Python int is int64
        (lambda xs, ys: kernels.step_sums(np.zeros(4, np.float32), xs, ys, np.uint32(0), 1), "z"),
        (lambda xs, ys: kernels.apply(np.zeros(4, np.float32), np.zeros(5, np.float32), 0.5, np.float32(1)), "lr"),
        (lambda xs, ys: kernels.apply(_f64(np.zeros(4)), np.zeros(5, np.float32), np.float32(0.5), np.float32(1)), "p"),
        (lambda xs, ys: kernels.loss(np.zeros(5, np.float32), np.float64(1 / 32)), "inv"),
        (lambda xs, ys: kernels.loss(np.zeros((5, 1), np.float32), np.float32(1 / 32)), "sums"),
        (lambda xs, ys: kernels.fold(np.zeros((2, 8), np.int64)), "slots"),
        (lambda xs, ys: kernels.batches(np.zeros(1024, np.float32), True), "words"),
        (lambda xs, ys: kernels.result(1e-40, True), "r"),  # a Python float is float64
        (lambda xs, ys: kernels.out_word(np.float64(-1e-40), True), "f"),
        (lambda xs, ys: kernels.in_word(1, True), "u"),
    ],
)
def test_public_kernels_refuse_other_types_naming_the_argument(call, name):
    xs, ys = kernels.samples()
    kinds = ("step_sums", "apply", "loss", "fold", "batches", "result", "out_word", "in_word")
    before = {k: len(getattr(kernels, k).signatures) for k in kinds}
    with pytest.raises(TypeError, match=f"argument '{name}' must be") as caught:
        call(xs, ys)
    assert str(caught.value).startswith("meshnb.kernels.") and "TypingError" not in str(caught.value)
    after = {k: len(getattr(kernels, k).signatures) for k in before}
    assert after == before  # no variant was compiled
    for k in before:  # only float32 / uint32 variants exist
        assert all(
            "float64" not in str(sig) and "int64" not in str(sig).replace("uint64", "")
            for sig in getattr(kernels, k).signatures
        )


def _sample_pages() -> list[np.ndarray]:
    """Pages whose X and Y words are special (signed zeros, subnormals, the smallest normal,
    infinities, quiet and signalling NaNs, x whose square or cube underflows) or random."""
    base = np.frombuffer(ref.init_page(1), "<u4").copy()
    pages = [np.frombuffer(p, "<u4").copy() for p in hard_pages().values()]
    special = [0, 0x80000000, 1, 0x807FFFFF, 0x00800000, 0x7F800000, 0xFF800000, 0x7FC00000, 0x7F800001]
    special += [0xFFC12345, 0x1F000000, 0x9F7FFFFF, 0x20000000, 0xA0800001, 0x2A000000, 0x3F800000]
    rng = np.random.default_rng(35)
    for words in (np.resize(np.array(special, np.uint32), 512), *rng.integers(0, 1 << 32, (4, 512), np.uint32)):
        page = base.copy()
        page[kernels.W_X : kernels.W_X + 256], page[kernels.W_Y : kernels.W_Y + 256] = words[:256], words[256:]
        pages.append(page)
    return pages


@pytest.mark.parametrize("z", [True, False], ids=["z", "ieee"])
def test_fill_batches_in_numpy_gives_the_njit_tables(z):
    # The single loop's tables are made in numpy (no compile at a cold start): batches' bits.
    for words in _sample_pages():
        tab = np.full(4 * kernels.TAB, np.nan, np.float32)
        kernels.fill_batches(words, z, tab)
        assert tab.view(np.uint32).tolist() == kernels.batches(words, z).view(np.uint32).tolist()


def test_fill_batches_refuses_other_arrays():
    words, tab = np.frombuffer(ref.init_page(1), "<u4").copy(), np.zeros(4 * kernels.TAB, np.float32)
    for bad_words, bad_tab in (
        (words.view(np.float32), tab),
        (words[:500], tab),
        (list(words), tab),
        (words, tab[:512]),
        (words, tab.astype(np.float64)),
        (words, np.zeros(2 * 4 * kernels.TAB, np.float32)[::2]),
    ):
        with pytest.raises(ValueError, match="fill_batches: words must hold"):
            kernels.fill_batches(bad_words, True, bad_tab)


def test_samples_are_float32_and_compile_nothing():
    xs, ys = kernels.samples()
    assert xs.dtype == ys.dtype == np.float32 and xs.shape == ys.shape == (256,)
    assert xs.flags.c_contiguous and ys.flags.c_contiguous
    assert not hasattr(kernels.samples, "signatures")  # numpy, not a compiled kernel


def test_end_task_writes_specs_end_of_task_words_with_the_carry():
    """SPEC 8: ERR, PENDING cleared, STEP_HI:NEXT_STEP (64-bit): on one page and on many at once."""
    from meshnb.kernels import end_task
    from meshnb.view import WORD

    page = np.full(1024, 7, dtype=np.uint32)
    end_task(page, np.uint64((5 << 32) | 0xFFFFFFFF) + np.uint64(1), True)
    assert [page[WORD[n]] for n in ("ERR", "PENDING", "STEP_HI", "NEXT_STEP")] == [1, 0, 6, 0]
    assert page[WORD["ROUND"]] == 7 and page[WORD["PARAMS"]] == 7  # nothing else
    pages = np.full((3, 1024), 9, dtype=np.uint32)
    end_task(pages, np.array([0, 1 << 32, 2**64 - 2], dtype=np.uint64))
    assert pages[:, WORD["STEP_HI"]].tolist() == [0, 1, 0xFFFFFFFF]
    assert pages[:, WORD["NEXT_STEP"]].tolist() == [0, 0, 0xFFFFFFFE]
    assert pages[:, WORD["ERR"]].tolist() == [0, 0, 0] and pages[:, WORD["PENDING"]].tolist() == [0, 0, 0]
