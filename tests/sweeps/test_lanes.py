"""meshnb.sweeps.lanes: systems packed into the loop's lanes and the final pages read back."""

from __future__ import annotations

import numpy as np

from meshnb import kernels
from meshnb.loops import sweep as sweep_loop
from meshnb.sweeps import init_page, plan
from meshnb.sweeps.lanes import Lanes, final_pages, sample_tables
from meshnb.testing.pages import hard_pages
from meshnb.view import WORD


def _systems(steps: int):
    pages = [init_page(), hard_pages()["tiny-samples"], init_page()]
    lrs = np.geomspace(1e-3, 1.0, 23).astype(np.float32)
    return plan(steps, view_in=pages, lrs=lrs, step_base=[(k * 5) % 19 for k in range(69)])


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
