"""The fast step loops (meshnb.loops): every mode against the reference, on stress pages."""

from __future__ import annotations

import functools
import hashlib

import numpy as np
import pytest
from numba import njit

from meshnb import kernels, loops, vec
from meshnb.loops import single
from meshnb.testing import reference as ref
from meshnb.testing.pages import hard_pages, with_words

HARD = hard_pages()
Z_MODES = [loops.Z, loops.Z_DAZ] if vec.HAS_DAZ else [loops.Z]


def _run_tasks(page: bytes, count: int, mode: int) -> tuple[bytes, np.ndarray]:
    words = np.frombuffer(page, "<u4").copy()
    trace = np.zeros((count, 5), dtype=np.uint32)
    loops.run_tasks(words, count, trace, mode)
    return words.tobytes(), trace


@functools.cache
def _reference_300(name: str) -> tuple[list[bytes], np.ndarray]:
    """The reference's 300 steps of hard page ``name`` (one run for every mode the loops take)."""
    out, trace = ref.run([HARD[name]], 300, grouped=False)
    trace.setflags(write=False)
    return out, trace


@pytest.mark.parametrize("mode", Z_MODES, ids=lambda m: {0: "daz", 1: "z"}[m])
@pytest.mark.parametrize("name", sorted(HARD))
def test_run_tasks_matches_reference_on_hard_pages(name, mode):
    page, trace = _run_tasks(HARD[name], 300, mode)
    want, want_trace = _reference_300(name)
    np.testing.assert_array_equal(trace, want_trace)
    assert page == want[0]


@pytest.mark.parametrize("name", ["tiny-params-zero-y", "tiny-samples", "huge-lr", "subnormal-and-nan-samples"])
def test_run_tasks_ieee_mode_matches_reference(name):
    page, trace = _run_tasks(HARD[name], 100, loops.IEEE)
    want, want_trace = ref.run([HARD[name]], 100, grouped=False, mode="ieee")
    np.testing.assert_array_equal(trace, want_trace)
    assert page == want[0]


def test_run_tasks_makes_its_tables_again_for_other_samples_and_modes():
    # A thread's batch tables are kept between calls (made in numpy when the page's samples or
    # the mode's z differ from theirs): pages one X or Y word apart, and IEEE after mode Z.
    one_x = bytearray(HARD["tiny-samples"])
    one_x[4 * kernels.W_X + 40 : 4 * kernels.W_X + 44] = (0x3F000000).to_bytes(4, "little")
    one_y = bytearray(HARD["tiny-samples"])
    one_y[4 * (kernels.W_Y + 255) : 4 * (kernels.W_Y + 256)] = (0x00000001).to_bytes(4, "little")
    runs = [(HARD["tiny-samples"], loops.Z), (bytes(one_x), loops.Z), (bytes(one_y), loops.Z)]
    runs += [(bytes(one_y), loops.IEEE), (bytes(one_y), loops.Z), (HARD["tiny-samples"], loops.Z)]
    runs += [(HARD["tiny-samples"], loops.IEEE), (HARD["subnormal-and-nan-samples"], Z_MODES[-1])]
    for page, mode in runs:
        got, trace = _run_tasks(page, 40, mode)
        want, want_trace = ref.run([page], 40, grouped=False, mode="ieee" if mode == loops.IEEE else ref.MODE_Z)
        np.testing.assert_array_equal(trace, want_trace)
        assert got == want[0]


def test_run_tasks_default_trajectory_in_every_mode_matches_vectors(vectors):
    want = vectors["runs"][0]
    for mode in Z_MODES:
        page, trace = _run_tasks(ref.init_page(1), 4096, mode)
        assert hashlib.sha256(trace.tobytes()).hexdigest() == want["trace_digest"]
        assert ref.digest(page) == want["digest"]


@pytest.mark.parametrize("mode", Z_MODES, ids=lambda m: {0: "daz", 1: "z"}[m])
@pytest.mark.parametrize(
    "n, names",
    [
        (2, ["tiny-samples", "tiny-samples"]),
        (3, ["subnormal-and-nan-samples", "tiny-params-zero-y", "huge-samples"]),
        (4, ["boundary-params-zero-y"] * 4),
    ],
)
def test_run_fused_matches_reference_cluster(n, names, mode):
    inv = {2: 0x3C800000, 3: 0x3C2AAAAB, 4: 0x3C000000}[n]  # div(1, 32 N)
    pages = [bytearray(HARD[name]) for name in names]
    for p in pages:
        p[24:28] = inv.to_bytes(4, "little")
    words = np.stack([np.frombuffer(bytes(p), "<u4") for p in pages]).copy()
    trace = np.zeros((150, 5), dtype=np.uint32)
    loops.run_fused(words, 150, trace, mode)
    want, want_trace = ref.run([bytes(p) for p in pages], 150, grouped=True)
    np.testing.assert_array_equal(trace, want_trace)
    for k in range(n):
        assert words[k].tobytes() == want[k]


@njit
def _mxcsr() -> int:
    old = vec.daz_on()
    vec.mxcsr_restore(old)
    return old


@pytest.mark.skipif(not vec.HAS_DAZ, reason="DAZ is an x86 bit")
def test_the_daz_loop_restores_the_callers_float_mode():
    before = _mxcsr()
    assert before & 0x8040 == 0  # Python runs with DAZ and FTZ off
    _run_tasks(HARD["tiny-samples"], 10, loops.Z_DAZ)
    control = ~0x3F  # the low six bits are sticky exception flags that any float op may set
    assert _mxcsr() & control == before & control
    # Ordinary float32 arithmetic afterwards still sees subnormals.
    tiny = np.array([0x00000001], dtype=np.uint32).view(np.float32)
    assert (tiny + tiny).view(np.uint32)[0] == 2
    assert loops.loop_mode(True) == loops.Z_DAZ and loops.loop_mode(False) == loops.IEEE


# --- the 8-lane step alone, against the literal kernel ------------------------------------------


def _step_entry(mode: int):
    """One step of the loop's code path (``single._step`` on 8-lane vectors, then the words it
    writes out) for one literal mode, with DAZ on around it in ``Z_DAZ``."""

    @njit
    def step(words, at):
        z = mode != loops.IEEE
        old = vec.daz_on() if mode == loops.Z_DAZ else np.uint32(0)
        tab = kernels.batches(words, z)
        a = vec.splat8(kernels.in_word(words[0], z))
        b = vec.splat8(kernels.in_word(words[1], z))
        c = vec.splat8(kernels.in_word(words[2], z))
        d = vec.splat8(kernels.in_word(words[3], z))
        s0, s1, s2, s3, e2 = single._step(a, b, c, d, tab, at, mode)
        out = np.empty(5, dtype=np.uint32)
        vec.store(out, 0, vec.out(vec.first_lanes(s0, s1, s2, s3), mode))
        out[4] = kernels.out_word(e2, z)
        lanes = np.empty((4, 8), dtype=np.float32)  # every lane of each param sum, as computed
        vec.store(lanes[0], 0, s0)
        vec.store(lanes[1], 0, s1)
        vec.store(lanes[2], 0, s2)
        vec.store(lanes[3], 0, s3)
        if mode == loops.Z_DAZ:
            vec.mxcsr_restore(old)
        return out, lanes

    return step


_STEPS = {m: _step_entry(m) for m in (loops.Z_DAZ, loops.Z, loops.IEEE)}
_MODES = [*Z_MODES, loops.IEEE]


def _pages_for_step() -> list[bytes]:
    rng = np.random.default_rng(12)
    base = ref.init_page(1)
    pages = list(HARD.values())
    for _ in range(24):  # random params over many binades, both signs, some tiny
        words = (rng.integers(0, 2, 4) << 31) | (rng.integers(0x00000001, 0x7F800000, 4) >> rng.integers(0, 3, 4))
        pages.append(with_words(base, 0, words.astype(np.uint32)))
    return pages


@pytest.mark.parametrize("mode", _MODES, ids=lambda m: {0: "daz", 1: "z", 2: "ieee"}[m])
def test_the_8_lane_step_matches_the_literal_step_sums(mode):
    z = mode != loops.IEEE
    for page in _pages_for_step():
        words = np.frombuffer(page, "<u4").copy()
        xs, ys = words[16:272].view(np.float32), words[272:528].view(np.float32)
        p = words[:4].view(np.float32).copy()
        for g in range(8):
            got, lanes = _STEPS[mode](words, g * 32)
            want = kernels.step_sums(p, xs, ys, np.uint32(g), z).view(np.uint32)
            np.testing.assert_array_equal(got, want)
            # SPEC 5: every lane ends with the same sum (a NaN's payload may differ by lane).
            for row in lanes:
                assert np.all(np.isnan(row)) or len(set(row.view(np.uint32).tolist())) == 1


# --- the door: run_tasks and run_fused check their arguments before the loop trusts them --------


def _page() -> np.ndarray:
    return np.frombuffer(ref.init_page(1), "<u4").copy()


def test_a_short_trace_buffer_is_refused_not_written_past():
    # Rows past the buffer's end are guard rows of the same allocation: without the check the loop
    # wrote step 9's sums into the first of them.
    for run, pages in ((loops.run_tasks, _page()), (loops.run_fused, _page()[None, :].copy())):
        block = np.zeros((14, 5), dtype=np.uint32)
        short = block[:9]  # 9 rows for 10 steps
        with pytest.raises(ValueError, match=r"trace must be \[count, 5\]"):
            run(pages, 10, short, loops.Z)
        assert not block.any(), run.__name__
    words = _page()
    loops.run_tasks(words, 10, np.zeros((0, 5), dtype=np.uint32), loops.Z)  # no rows: nothing recorded
    loops.run_tasks(words, 10, np.zeros((12, 5), dtype=np.uint32), loops.Z)  # more rows than steps: fine


def _bad_arguments():
    """(what, words, count, trace, mode, error, message) of run_tasks calls the door refuses."""
    ok, trace = _page(), np.zeros((4, 5), dtype=np.uint32)
    zero_spt = _page()
    zero_spt[kernels.W_STEPS_PER_TASK] = 0
    frozen = _page()
    frozen.flags.writeable = False
    z = loops.Z
    return [
        ("float words", ok.view(np.float32), 4, trace, z, TypeError, "'words' must be a writeable C-contiguous uint32"),
        ("short page", ok[:1023].copy(), 4, trace, z, ValueError, "words must be a whole page, 1024"),
        ("2-d words", ok.reshape(2, 512), 4, trace, z, TypeError, "'words' must be .* of 1 dimension"),
        ("strided words", np.repeat(ok, 2)[::2], 4, trace, z, TypeError, "not a non-contiguous uint32 array"),
        ("read-only words", frozen, 4, trace, z, TypeError, "not a read-only C-contiguous uint32 array"),
        ("a list", list(ok), 4, trace, z, TypeError, "'words' must be .*, not a Python list"),
        ("negative count", ok, -1, trace, z, ValueError, "count must be in 0"),
        ("float count", ok, 4.0, trace, z, TypeError, "count must be an integer"),
        ("int64 trace", ok, 4, trace.astype(np.int64), z, TypeError, "'trace' must be a writeable C-contiguous uint32"),
        ("trace of 4 words", ok, 4, trace[:, :4].copy(), z, ValueError, r"trace must be \[count, 5\]"),
        ("Fortran trace", ok, 4, np.asfortranarray(np.zeros((4, 5), np.uint32)), z, TypeError, "non-contiguous"),
        ("unknown mode", ok, 4, trace, 3, ValueError, "mode must be"),
        ("bool mode", ok, 4, trace, True, ValueError, "mode must be"),
        ("STEPS_PER_TASK 0", zero_spt, 4, trace, z, ValueError, "STEPS_PER_TASK is 0"),  # never ended before
    ]


@pytest.mark.parametrize("case", _bad_arguments(), ids=lambda c: c[0])
def test_run_tasks_refuses_bad_arguments_with_one_clear_error(case):
    _, words, count, trace, mode, error, message = case
    before = None if not isinstance(words, np.ndarray) else words.copy()
    with pytest.raises(error, match=message) as caught:
        loops.run_tasks(words, count, trace, mode)
    assert "numba" not in str(caught.value).lower() or "numba would type" in str(caught.value)
    if before is not None:
        assert np.array_equal(words, before)  # refused before the loop ran


def test_run_fused_refuses_bad_pages():
    trace = np.zeros((4, 5), dtype=np.uint32)
    with pytest.raises(ValueError, match=r"pages must be \[N, 1024\] uint32 words, N >= 1"):
        loops.run_fused(np.zeros((0, 1024), dtype=np.uint32), 4, trace, loops.Z)
    with pytest.raises(ValueError, match=r"pages must be \[N, 1024\]"):
        loops.run_fused(np.zeros((2, 1000), dtype=np.uint32), 4, trace, loops.Z)
    with pytest.raises(TypeError, match="'pages' must be a writeable C-contiguous uint32 array of 2 dimensions"):
        loops.run_fused(_page(), 4, trace, loops.Z)
    pages = np.stack([_page(), _page()])
    pages[0, kernels.W_STEPS_PER_TASK] = 0
    with pytest.raises(ValueError, match="page 0's STEPS_PER_TASK is 0"):
        loops.run_fused(pages, 4, trace, loops.Z)


def test_a_forced_z_daz_loop_is_refused_where_the_cpu_has_no_daz(monkeypatch):
    from meshnb import cpu

    monkeypatch.setattr(cpu, "HAS_DAZ", False)
    assert loops.loop_mode(True) == loops.Z and loops.loop_mode(False) == loops.IEEE
    trace = np.zeros((0, 5), dtype=np.uint32)
    with pytest.raises(ValueError, match="Z_DAZ needs the x86 DAZ bit"):
        loops.run_tasks(_page(), 4, trace, loops.Z_DAZ)
    with pytest.raises(ValueError, match="Z_DAZ needs the x86 DAZ bit"):
        loops.run_fused(_page()[None, :].copy(), 4, trace, loops.Z_DAZ)
    loops.run_tasks(_page(), 4, trace, loops.Z)  # the flush-every-op loop runs on any CPU
