"""meshnb.sweeps.lanes: systems packed into the loop's lanes and the final pages read back."""

from __future__ import annotations

import numpy as np
import pytest

import meshnb
from meshnb import kernels
from meshnb.floatz import flush_words
from meshnb.loops import sweep as sweep_loop
from meshnb.sweeps import describe, init_page
from meshnb.sweeps.lanes import Lanes, _flushed, distinct_rows, final_pages, sample_tables, start_lr_words
from meshnb.testing.pages import hard_pages
from meshnb.view import WORD

from .helpers import LR_WORDS


def _systems(steps: int):
    pages = [init_page(), hard_pages()["tiny-samples"], init_page()]
    lrs = np.geomspace(1e-3, 1.0, 23).astype(np.float32)
    return describe(steps, view_in=pages, lrs=lrs, step_base=[(k * 5) % 19 for k in range(69)])


def test_tables_are_the_pages_batches_and_a_block_is_of_one_kind() -> None:
    systems = _systems(10)
    words = systems.words(0, 69)
    for sh in (sweep_loop.Shape(16, 1), sweep_loop.Shape(8, 2)):
        ln = Lanes(words, True, 10, 0, sh)
        tab_of = ln.arrays["tab_of"]
        kinds = (tab_of < 0).reshape(-1, sh.block)
        assert (kinds == kinds[:, :1]).all() and kinds.any() and not kinds.all()
        for g in range(ln.groups):
            systems_of_g = ln.order[np.minimum(np.arange(g * sh.lanes, (g + 1) * sh.lanes), 68)]
            for lane, k in enumerate(systems_of_g.tolist()):
                base = int(words[k, WORD["NEXT_STEP"]])
                want = kernels.batches(words[k].copy(), True).reshape(4, 8, 32)[:, (base + np.arange(8)) % 8]
                if tab_of[g] < 0:  # [slot][warp lane][q]
                    got = ln.arrays["stabs"][-1 - tab_of[g]].reshape(8, 32, 4).transpose(2, 0, 1)
                else:  # [slot][warp lane][q][lane]
                    got = ln.arrays["tabs"][tab_of[g]].reshape(8, 32, 4, sh.lanes)[..., lane].transpose(2, 0, 1)
                assert np.array_equal(got.view(np.uint32), want.view(np.uint32)), (sh, g, lane)


def test_final_pages_put_each_systems_lane_back() -> None:
    for done in (0, 5, 300):
        systems = _systems(done)
        words = systems.words(0, 69)
        ln = Lanes(words, True, done, 0, sweep_loop.Shape(16, 1))
        rng = np.random.default_rng(done)
        ln.arrays["params"][:] = rng.random(ln.arrays["params"].shape, dtype=np.float32)
        ln.arrays["ring"][:] = rng.random(ln.arrays["ring"].shape, dtype=np.float32)
        base = systems.step_base(0, 69)
        got = final_pages(words, base, ln, done)
        want = words.copy()
        if done:
            want[:, :4] = ln.params_words()
            ring = ln.ring_words()
            for k in range(69):
                for j in range(max(0, done - 256), done):
                    want[k, WORD["LOSS"] + (int(base[k]) + j) % 256] = ring[k, j % 256]
            kernels.end_task(want, base + np.uint64(done))
        assert np.array_equal(got, want), done


def test_sample_tables_are_the_kernels_batches() -> None:
    """Random X and Y words (subnormals, NaNs, infinities among them) and the hard pages, both modes."""
    rng = np.random.default_rng(11)
    pages = [np.frombuffer(p, np.uint32).copy() for p in hard_pages().values()]
    for _ in range(20):
        w = np.frombuffer(init_page(), np.uint32).copy()
        w[WORD["X"] : WORD["Y"] + 256] = rng.integers(0, 1 << 32, 512, dtype=np.uint64).astype(np.uint32)
        w[WORD["X"] : WORD["X"] + 40] = rng.integers(0, 1 << 24, 40, dtype=np.uint32) | (
            rng.integers(0, 2, 40) << 31
        ).astype(np.uint32)  # subnormals
        pages.append(w)
    for w in pages:
        for z in (True, False):
            want = kernels.batches(w, z).reshape(4, kernels.BATCHES, kernels.WARP)
            assert np.array_equal(sample_tables(w, z).view(np.uint32), want.view(np.uint32)), z


# Pages with the init page's samples and step base: params, LR and INV_BATCH words that the flush
# changes (subnormal, NaN) or that sit at its boundary.
_SAME_SAMPLES = ("subnormal-params", "nan-payload-param", "subnormal-lr", "nan-lr", "subnormal-inv-batch",
                 "inv-batch-at-flush-boundary")  # fmt: skip


def _next_step(page: bytes, step: int) -> bytes:
    w = np.frombuffer(page, np.uint32).copy()
    w[WORD["STEP_HI"]], w[WORD["NEXT_STEP"]] = step >> 32, step & 0xFFFFFFFF
    return w.tobytes()


def _one_table_cases(z: bool):
    """(name, systems, batches) whose every batch reads one sample table: the path without a sort."""
    same = [init_page()] + [hard_pages()[k] for k in _SAME_SAMPLES]
    yield "an LR sweep", describe(10, lrs=LR_WORDS, z=z), [(0, 17), (3, 12), (16, 17)]
    yield "odd samples", describe(10, view_in=hard_pages()["subnormal-and-nan-samples"], lrs=LR_WORDS, z=z), [(0, 17)]
    yield "an int step base", describe(10, lrs=LR_WORDS, step_base=2**40 + 13, z=z), [(0, 17), (5, 6)]
    lrs3 = LR_WORDS[[6, 7, 8]]  # subnormal, negative subnormal, NaN
    yield "pages x LRs", describe(10, view_in=same, lrs=lrs3, z=z), [(0, 21), (2, 19), (4, 5), (17, 18)]
    yield "pages' own LRs", describe(10, view_in=same, z=z), [(0, 7), (1, 6)]
    bases = [3 + 8 * k + (k % 3) * 2**40 for k in range(7 * 3)]  # one per system, all 3 mod 8
    yield "bases, one mod 8", describe(10, view_in=same, lrs=lrs3, step_base=bases, z=z), [(0, 21), (9, 20)]
    own = [_next_step(p, 5 + 8 * i) for i, p in enumerate(same)]  # each page's own, all 5 mod 8
    yield "pages' own bases", describe(10, view_in=own, lrs=lrs3, z=z), [(0, 21), (1, 20)]


@pytest.mark.parametrize("shape", [sweep_loop.Shape(16, 1), sweep_loop.Shape(8, 2), sweep_loop.Shape(4, 1)], ids=str)
@pytest.mark.parametrize("z", [True, False], ids=["z", "ieee"])
def test_one_tables_lanes_are_the_sorted_lanes(z: bool, shape: sweep_loop.Shape) -> None:
    """``of_systems`` without a sort gives what the sorting path gives (``Lanes`` of the systems'
    pages always sorts), array for array, bit for bit."""
    for name, systems, batches in _one_table_cases(z):
        for lo, hi in batches:
            for every in (0, 3):
                got = Lanes.of_systems(systems, lo, hi, 10, every, shape)
                want = Lanes(systems.words(lo, hi), z, 10, every, shape)
                assert got.one_table is not None and want.one_table is None, name
                _same_lanes(got, want, (name, lo, hi, every))
                _same_read_back(got, want, (name, lo, hi, every))


def test_systems_of_several_tables_take_the_sorting_path() -> None:
    same = [init_page(), hard_pages()["subnormal-params"]]
    cases = [
        describe(10, view_in=same, lrs=LR_WORDS, step_base=[3] * 20 + [11] * 13 + [4]),  # one base differs mod 8
        describe(10, view_in=[init_page(), hard_pages()["tiny-samples"]], lrs=LR_WORDS),  # two samples
        describe(10, view_in=[init_page(), _next_step(init_page(), 1)], lrs=LR_WORDS),  # pages' own bases differ
    ]
    for systems in cases:
        n = len(systems)
        got = Lanes.of_systems(systems, 0, n, 10, 0, sweep_loop.Shape(16, 1))
        assert got.one_table is None
        _same_lanes(got, Lanes(systems.words(0, n), True, 10, 0, sweep_loop.Shape(16, 1)), n)
        one = Lanes.of_systems(systems, 0, 17, 10, 0, sweep_loop.Shape(16, 1))  # the first page's LRs alone
        assert one.one_table is not None


def test_a_batch_reuses_the_last_ones_arrays_and_table() -> None:
    sh = sweep_loop.Shape(16, 1)
    systems = describe(10, view_in=[init_page(), hard_pages()["subnormal-params"], hard_pages()["tiny-samples"]],
                   lrs=np.geomspace(1e-3, 1.0, 40).astype(np.float32))  # fmt: skip
    first = Lanes.of_systems(systems, 0, 32, 10, 3, sh)
    first.arrays["ring"][:] = first.arrays["hist"][:] = 7.0  # a run's words, which the next batch may keep
    second = Lanes.of_systems(systems, 32, 64, 10, 3, sh, first)  # the same table, the same shapes
    assert second.arrays["stabs"] is first.arrays["stabs"]
    for name in ("params", "hyper", "ring", "hist", "trace"):
        assert second.arrays[name] is first.arrays[name], name
    for lo, hi, reuse in [
        (40, 64, second),  # another page of the same samples: the same table, new params
        (64, 90, second),  # fewer groups: fresh arrays
        (80, 112, second),  # two tables: the sorting path with the one-table batch's arrays
        (80, 120, None),
        (90, 112, Lanes.of_systems(systems, 70, 100, 10, 3, sh)),  # one table after the sorting path's batch
        (90, 112, Lanes.of_systems(systems, 0, 22, 10, 3, sh, first)),  # samples that differ
        (0, 22, Lanes.of_systems(systems, 0, 22, 5, 0, sh)),  # another history length
        (0, 22, Lanes.of_systems(systems, 0, 22, 10, 3, sweep_loop.Shape(8, 2))),  # another shape
    ]:
        got = Lanes.of_systems(systems, lo, hi, 10, 3, sh, reuse)
        want = Lanes.of_systems(systems, lo, hi, 10, 3, sh)
        _same_lanes(got, want, (lo, hi), stale_ok=("ring", "hist"))
    odd = hard_pages()["subnormal-and-nan-samples"]  # mode Z's table of these samples is not IEEE's
    for z in (True, False):
        other = Lanes.of_systems(describe(10, view_in=odd, lrs=[0.5, 0.25], z=not z), 0, 2, 10, 0, sh)
        systems = describe(10, view_in=odd, lrs=[0.5, 0.25], z=z)
        got = Lanes.of_systems(systems, 0, 2, 10, 0, sh, other)
        _same_lanes(got, Lanes.of_systems(systems, 0, 2, 10, 0, sh), ("after the other mode", z))


def _same_lanes(got: Lanes, want: Lanes, what: object, stale_ok: tuple[str, ...] = ()) -> None:
    assert (got.m, got.pad, got.groups, got.rows) == (want.m, want.pad, want.groups, want.rows), what
    assert np.array_equal(got.order, want.order) and np.array_equal(got.position, want.position), what
    assert got.arrays.keys() == want.arrays.keys(), what
    for k, v in want.arrays.items():
        g = got.arrays[k]
        assert g.dtype == v.dtype and g.shape == v.shape, (what, k)
        assert k in stale_ok or np.array_equal(g.view(np.uint8), v.view(np.uint8)), (what, k)


def _same_read_back(got: Lanes, want: Lanes, what: object) -> None:
    """The same words in both lanes' loop arrays read back per system alike (lanes in system order
    against the sorting path's gather)."""
    rng = np.random.default_rng(got.m)
    for name in ("params", "ring", "hist"):
        words = rng.integers(0, 2**32, got.arrays[name].shape, dtype=np.uint64).astype(np.uint32)
        got.arrays[name] = words.view(np.float32)
        want.arrays[name] = words.copy().view(np.float32)
    assert np.array_equal(got.params_words(), want.params_words()), what
    assert np.array_equal(got.ring_words(), want.ring_words()), what
    for first in (None, got.rows // 2):
        g, w = got.history(first), want.history(first)
        assert g.shape == (got.m, got.rows if first is None else first), what
        assert np.array_equal(g.view(np.uint32), w.view(np.uint32)), what


def test_flushed_words_are_flush_words() -> None:
    rng = np.random.default_rng(5)
    normal = rng.integers(0x00800000, 0x7F800000, 1000, dtype=np.uint32) | (rng.integers(0, 2, 1000) << 31).astype(
        np.uint32
    )
    kept = (0, 0x80000000, 0x7F800000, 0xFF800000, 0x00800000, 0x807FFFFF + 1, 0x7F7FFFFF)  # the flush keeps them
    changed = (1, 0x807FFFFF, 0x007FFFFF, 0x7F800001, 0xFFFFFFFF, 0x7FC00000, 0xFF800001)
    for special in kept + changed:
        words = normal.copy()
        words[rng.integers(0, 1000)] = special
        got = _flushed(words)
        assert np.array_equal(got, flush_words(words)), hex(special)
        assert (got is words) == (special in kept), hex(special)  # no flush where no word needs one
    assert _flushed(normal) is normal and _flushed(np.zeros(0, np.uint32)).size == 0


def test_start_lr_words_are_the_pages_lr_words() -> None:
    for z in (True, False):
        systems = describe(10, view_in=[init_page(), hard_pages()["nan-lr"]], lrs=LR_WORDS, z=z)
        for lo, hi in [(0, 17), (3, 12), (10, 30), (0, 34), (20, 20)]:
            got = start_lr_words(systems, lo, hi)
            assert np.array_equal(got, systems.words(lo, hi)[:, WORD["LR"]]), (z, lo, hi)
            assert not np.shares_memory(got, systems.lr)  # a new array: a result may hold it
        own = describe(10, view_in=[init_page(), hard_pages()["nan-lr"]], z=z)
        assert np.array_equal(start_lr_words(own, 0, 2), own.words(0, 2)[:, WORD["LR"]])


def test_distinct_rows_are_np_uniques() -> None:
    rng = np.random.default_rng(3)
    some = rng.integers(0, 2**32, (20, 512), dtype=np.uint64).astype(np.uint32)
    tied = some.copy()
    tied[:, :4] = tied[0, :4]  # the leading columns tie: whole rows decide (np.unique's own sort)
    tied[5:, 300] += np.uint32(1)
    few = rng.integers(0, 2, (20, 512), dtype=np.uint32)  # ties in the leading columns, then equal rows
    few[:, 4:] = 0
    for rows in (some, tied, few, some[:1], some[:0]):
        words = rows[rng.integers(0, max(len(rows), 1), 200 if len(rows) else 0)]
        got_rows, got_which = distinct_rows(words)
        want_rows, want_which = np.unique(words, axis=0, return_inverse=True)
        assert np.array_equal(got_rows, want_rows) and got_which.dtype == np.int64
        assert np.array_equal(got_which, want_which.reshape(-1)), len(rows)


def test_run_groups_in_two_calls_is_train_of_all_the_steps() -> None:
    import meshnb
    from meshnb.loops import loop_mode

    sh = sweep_loop.shape()
    lanes = Lanes.of_systems(describe(16, lrs=[0.5, 0.25]), 0, 2, 16, 0, sh)
    a = lanes.arrays
    for first, count in ((0, 10), (10, 6)):  # 10 steps, then 6 more: the same as 16 at once
        sweep_loop.run_groups(
            a["tabs"], a["stabs"], a["tab_of"], a["params"], a["hyper"], a["ring"], a["hist"],
            np.zeros((1, 0), np.float32), first, count, 0, loop_mode(True), sh,
        )  # fmt: skip
    assert [f"{w:08x}" for w in lanes.params_words()[0]] == meshnb.train(16).params_hex


def test_the_loop_shape_of_a_cpu_and_a_shape_without_a_loop() -> None:
    from meshnb.cpu import VectorShape

    shapes = [str(sweep_loop.shape(VectorShape(isa, n, 32))) for isa, n in (("avx512", 16), ("avx2", 8), ("neon", 4))]
    assert shapes == ["16 lanes x 1", "8 lanes x 1", "8 lanes x 1"]
    with pytest.raises(ValueError, match=r"^no sweep loop for mode 2 and shape 32 lanes x 1$"):
        sweep_loop.entry(sweep_loop.IEEE, sweep_loop.Shape(32, 1))


def test_lanes_of_start_pages_run_as_train() -> None:
    from meshnb.loops import loop_mode

    sh = sweep_loop.shape()
    lanes = Lanes(describe(16, lrs=[0.5, 0.25, 0.125]).words(0, 3), True, 16, 0, sh)
    assert (lanes.m, lanes.pad, lanes.groups, lanes.order.tolist()) == (3, sh.lanes, 1, [0, 1, 2])
    a = lanes.arrays
    sweep_loop.run_groups(a["tabs"], a["stabs"], a["tab_of"], a["params"], a["hyper"], a["ring"], a["hist"],
                          np.zeros((1, 0), np.float32), 0, 16, 0, loop_mode(True), sh)  # fmt: skip
    assert [f"{w:08x}" for w in lanes.params_words()[0]] == meshnb.train(16).params_hex  # LR 0.5
