"""Packing a batch of systems into the sweep loop's vector lanes, and reading them back.

The loop (:mod:`meshnb.loops.sweep`) holds one value of ``lanes`` systems in one vector (a *group*)
and steps ``block`` groups together; the shape is the target CPU's (:func:`meshnb.loops.sweep.shape`).
Systems are put in lanes sorted by their sample table (X, Y and ``base mod 8``), so that an LR
sweep's groups each read one shared table; lane ``i`` holds system ``order[i]``, and the lanes
past the last system (padding to a multiple of ``lanes * block``) copy the last lane.
"""

from __future__ import annotations

import numpy as np

from .. import kernels
from ..floatz import flush_words
from ..jit import jit
from ..loops import sweep as sweep_loop
from ..runspec import Systems
from ..view import PAGE_WORDS, WORD

_LOSS0 = WORD["LOSS"]


def _width(name: str, hist_rows: int, lanes: int) -> int:
    """The columns of a loop array of ``empty_arrays(groups, hist_rows, 0, lanes)``."""
    return int(sweep_loop.empty_arrays(1, hist_rows, 0, lanes)[name].shape[1])


class Lanes:
    """The loop's arrays for a batch of systems (``words``: their start pages ``[n, 1024]``)."""

    def __init__(self, words: np.ndarray, z: bool, steps: int, loss_every: int, shape: sweep_loop.Shape) -> None:
        m = int(words.shape[0])
        xy = words[:, WORD["X"] : WORD["Y"] + 256]
        if m == 0 or (xy == xy[0]).all():  # the usual case: one page's samples (an LR sweep)
            rows, which = xy[:1], np.zeros(m, dtype=np.int64)
        else:
            rows, which = np.unique(xy, axis=0, return_inverse=True)
            which = which.reshape(-1).astype(np.int64)
        head = words[:, [0, 1, 2, 3, WORD["LR"], WORD["INV_BATCH"]]]
        self._build(head, (words[:, WORD["NEXT_STEP"]] & 7).astype(np.int64), rows, which, z, steps, loss_every, shape)

    @classmethod
    def of_systems(
        cls, systems: Systems, lo: int, hi: int, steps: int, loss_every: int, shape: sweep_loop.Shape,
        reuse: dict[str, np.ndarray] | None = None,
    ) -> Lanes:  # fmt: skip
        """The lanes of systems ``lo .. hi-1`` read from the sweep's start pages, LR words and step
        bases, as :class:`Lanes` of ``systems.words(lo, hi)`` (the same arrays) without making a
        4 KiB page per system: 24 bytes a system, and each distinct start page's samples once.
        ``reuse``: an earlier batch's ``arrays``, taken where their shapes fit (its loss ring and
        history keep stale words where this batch's steps do not reach, which nothing reads; a
        fresh ring costs a page fault every 4 systems)."""
        page_of = systems.page_index(lo, hi)
        used, inverse = np.unique(page_of, return_inverse=True)
        xy = systems.starts[used, WORD["X"] : WORD["Y"] + 256]
        if used.size <= 1 or (xy == xy[0]).all():
            rows, which = xy[:1], np.zeros(hi - lo, dtype=np.int64)
        else:
            rows, which_page = np.unique(xy, axis=0, return_inverse=True)
            which = which_page.reshape(-1).astype(np.int64)[inverse.reshape(-1)]
        head = systems.starts[page_of[:, None], [0, 1, 2, 3, WORD["LR"], WORD["INV_BATCH"]]]
        head[:, 4] = start_lr_words(systems, lo, hi)
        base8 = (systems.step_base(lo, hi) & np.uint64(7)).astype(np.int64)
        lanes = cls.__new__(cls)
        lanes._build(head, base8, rows, which, systems.z, steps, loss_every, shape, reuse)
        return lanes

    def _build(
        self, head: np.ndarray, base8: np.ndarray, rows: np.ndarray, which: np.ndarray, z: bool, steps: int,
        loss_every: int, shape: sweep_loop.Shape, reuse: dict[str, np.ndarray] | None = None,
    ) -> None:  # fmt: skip
        """``head`` ``[M, 6]``: each system's params' words, LR and INV_BATCH words; ``base8`` its step
        base mod 8; ``rows`` the distinct samples (X then Y), ``which`` each system's row of them."""
        m = int(head.shape[0])
        lanes, per_call = shape.lanes, shape.lanes * shape.block
        pad = -(-m // per_call) * per_call
        self.shape = shape
        key = which * kernels.BATCHES + base8
        self.order = np.argsort(key, kind="stable")
        self.position = np.empty(m, dtype=np.int64)  # the lane of each system
        self.position[self.order] = np.arange(m)
        lane_sys = self.order[np.minimum(np.arange(pad), max(m - 1, 0))] if m else np.zeros(0, np.int64)
        self.m, self.pad, self.groups = m, pad, pad // lanes
        self.rows = steps // loss_every if loss_every else 0
        a = sweep_loop.empty_arrays(self.groups, self.rows, 0, lanes) if reuse is None else {}
        for name, kept in (reuse or {}).items():
            if name in ("params", "hyper", "ring", "hist", "trace"):
                fits = kept.shape == (self.groups, _width(name, self.rows, lanes))
                a[name] = kept if fits else np.zeros((self.groups, _width(name, self.rows, lanes)), np.float32)

        def grouped(per_lane: np.ndarray) -> np.ndarray:  # [lanes of all groups, k] -> [groups, k * lanes]
            g = per_lane.reshape(-1, lanes, per_lane.shape[1])
            return np.ascontiguousarray(np.moveaxis(g, 1, -1)).reshape(g.shape[0], per_lane.shape[1] * lanes)

        read = flush_words if z else (lambda w: w)  # in_word: ftz_from_bits in mode Z
        a["params"][:] = grouped(read(head[lane_sys, :4])).view(np.float32)
        a["hyper"][:] = grouped(read(head[lane_sys, 4:6])).view(np.float32)
        # Sample tables [q][batch][lane] of every key in use, rotated so that slot j holds batch (base + j) mod 8.
        keys = np.unique(key)
        tables = np.empty((keys.size, 4, kernels.BATCHES, kernels.WARP), dtype=np.float32)
        page = np.zeros(PAGE_WORDS, dtype=np.uint32)  # X and Y where a page holds them, for batches()
        for u in np.unique(keys // kernels.BATCHES).tolist():
            page[WORD["X"] : WORD["Y"] + 256] = rows[u]
            tab = sample_tables(page, z)
            for i in np.flatnonzero(keys // kernels.BATCHES == u).tolist():
                tables[i] = np.roll(tab, -int(keys[i] % kernels.BATCHES), axis=1)
        lane_key = np.searchsorted(keys, key[lane_sys]).reshape(self.groups, lanes)  # index into tables
        shared = (lane_key == lane_key[:, :1]).all(axis=1)
        # The groups of a block are stepped together: a block is of shared tables only when all are.
        shared = shared.reshape(-1, shape.block).all(axis=1).repeat(shape.block)
        tab_of = np.empty(self.groups, dtype=np.int64)
        used, which_shared = np.unique(lane_key[shared, 0], return_inverse=True)
        tab_of[shared] = -1 - which_shared.reshape(-1)
        own = np.flatnonzero(~shared)
        tab_of[own] = np.arange(own.size)
        # shared: [slot][lane][q], one value for the group's systems; lane tables: [slot][lane][q][system]
        stabs = tables[used].transpose(0, 2, 3, 1).reshape(used.size, sweep_loop.SHARED_FLOATS)
        ltabs = tables[lane_key[own]].transpose(0, 3, 4, 2, 1).reshape(own.size, sweep_loop.tab_floats(lanes))
        a["tab_of"] = tab_of
        a["stabs"] = stabs if used.size else np.zeros((1, sweep_loop.SHARED_FLOATS), dtype=np.float32)
        a["tabs"] = ltabs if own.size else np.zeros((1, sweep_loop.tab_floats(lanes)), dtype=np.float32)
        self.arrays = a
        self.loss_every = loss_every

    def per_system(self, lane_major: np.ndarray) -> np.ndarray:
        """``[groups, k, lanes]`` lane data -> ``[M, k]`` in system order."""
        per_lane = np.moveaxis(lane_major, 2, 1).reshape(self.pad, lane_major.shape[1])
        return per_lane[self.position]

    def _words(self, name: str, rows: int) -> np.ndarray:
        return self.per_system(self.arrays[name].view(np.uint32).reshape(self.groups, rows, self.shape.lanes))

    def ring_words(self) -> np.ndarray:
        """``[M, 256]``: the loss word of relative step r at column r mod 256."""
        return self._words("ring", sweep_loop.RING)

    def params_words(self) -> np.ndarray:
        """``[M, 4]``: the params' words (a, b, c, d) as the loop left them."""
        return self._words("params", 4)

    def history(self) -> np.ndarray:
        """``[M, H]`` float32: the loss of every ``loss_every``-th step."""
        return self._words("hist", self.rows).view(np.float32)

    def trace_rows(self, trace: np.ndarray, n: int) -> np.ndarray:
        """A chunk's trace buffer ``[groups][n][5][lanes]`` as ``[pad, n * 5]`` words, a row per lane."""
        t = trace[:, : n * sweep_loop.NSUMS * self.shape.lanes].view(np.uint32)
        t = t.reshape(self.groups, n * sweep_loop.NSUMS, self.shape.lanes)
        return np.ascontiguousarray(np.moveaxis(t, 2, 1)).reshape(self.pad, n * sweep_loop.NSUMS)


def sample_tables(words: np.ndarray, z: bool) -> np.ndarray:
    """:func:`meshnb.kernels.batches` of a page's words in numpy, ``[4, BATCHES, WARP]``: x, x^2,
    x^3 and y of sample ``g + 8 lane`` at ``[q, g, lane]``, the same float32 operations and flushes
    (the same bits; a sweep's cold start compiles no table kernel: about 1 s)."""
    f32 = np.float32

    def xy(name: str) -> np.ndarray:  # [BATCHES][WARP]: in_word of sample g + 8 lane
        u = np.ascontiguousarray(words[WORD[name] : WORD[name] + 256].reshape(kernels.WARP, kernels.BATCHES).T)
        return flush_words(u).view(f32) if z else u.view(f32)  # from_bits: the flush, NaNs canonical

    def result(r: np.ndarray) -> np.ndarray:  # kernels.result: flush_subnormal in mode Z, NaNs kept
        if not z:
            return r
        u = r.view(np.uint32)
        return np.where((u & np.uint32(0x7F800000)) == 0, u & np.uint32(0x80000000), u).view(f32)

    x = xy("X")
    with np.errstate(all="ignore"):  # NaNs and overflows are values here, as in the kernel
        x2 = result(x * x)
        return np.stack([x, x2, result(x2 * x), xy("Y")])


def start_lr_words(systems: Systems, lo: int, hi: int) -> np.ndarray:
    """Systems ``lo .. hi-1``'s LR words as their pages hold them after SET_LR (flushed in mode Z:
    ``ftz_from_bits``), the word ``systems.words(lo, hi)`` puts at LR, and the loop leaves there."""
    if systems.lr is None:
        return systems.starts[systems.page_index(lo, hi), WORD["LR"]]
    lr = systems.lr[systems.lr_index(lo, hi)]
    return flush_words(lr) if systems.z else lr


def final_pages(start: np.ndarray, base: np.ndarray, lanes: Lanes, done: int) -> np.ndarray:
    """The start pages ``[n, 1024]`` after ``done`` steps, as the TASKs leave them (SPEC 8;
    ``loops._tasks``): params, the loss ring, the next step, ERR and PENDING cleared (made in njit,
    one pass over the pages)."""
    out = np.array(start, dtype=np.uint32)  # a copy (numpy's memcpy; the njit pass fills in the run's words)
    a = lanes.arrays
    _final_pages(
        np.ascontiguousarray(start, dtype=np.uint32), out, a["params"].view(np.uint32), a["ring"].view(np.uint32),
        lanes.position, lanes.shape.lanes, np.ascontiguousarray(base, dtype=np.uint64), done,
    )  # fmt: skip
    if done:
        kernels.end_task(out, base + np.uint64(done))
    return out


@jit(nogil=True)
def _final_pages(start, out, params, ring, position, lanes, base, done):  # type: ignore[no-untyped-def]
    """``out[k]`` (a copy of ``start[k]``) with system k's params and the loss of its last ``min(done, 256)``
    steps (relative step j at LOSS[(base + j) mod 256]), read from its lane of the loop's arrays."""
    first = max(0, done - 256)
    if done == 0:
        return
    for k in range(start.shape[0]):
        pos = position[k]
        g, q = pos // lanes, pos % lanes
        for j in range(4):
            out[k, j] = params[g, j * lanes + q]
        s = np.int64(base[k] & np.uint64(255))
        for j in range(first, done):
            out[k, _LOSS0 + (s + j) % 256] = ring[g, (j % 256) * lanes + q]
