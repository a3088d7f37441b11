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
from ..loops import sweep as sweep_loop
from ..view import PAGE_WORDS, WORD
from .plan import LOSS


class Lanes:
    """The loop's arrays for a batch of systems (``words``: their start pages ``[n, 1024]``)."""

    def __init__(self, words: np.ndarray, z: bool, steps: int, loss_every: int, shape: sweep_loop.Shape) -> None:
        m = int(words.shape[0])
        lanes, per_call = shape.lanes, shape.lanes * shape.block
        pad = -(-m // per_call) * per_call
        self.shape = shape
        base8 = (words[:, WORD["NEXT_STEP"]] & 7).astype(np.int64)
        xy = words[:, WORD["X"] : WORD["Y"] + 256]
        ids: dict[bytes, int] = {}
        if m and (xy == xy[0]).all():  # the usual case: one page's samples (an LR sweep)
            ids[xy[0].tobytes()] = 0
            which = np.zeros(m, dtype=np.int64)
        else:
            which = np.array([ids.setdefault(row.tobytes(), len(ids)) for row in xy], dtype=np.int64)
        key = which * kernels.BATCHES + base8
        self.order = np.argsort(key, kind="stable")
        self.position = np.empty(m, dtype=np.int64)  # the lane of each system
        self.position[self.order] = np.arange(m)
        lane_sys = self.order[np.minimum(np.arange(pad), max(m - 1, 0))] if m else np.zeros(0, np.int64)
        lane_words = words[lane_sys]
        self.m, self.pad, self.groups = m, pad, pad // lanes
        self.rows = steps // loss_every if loss_every else 0
        a = sweep_loop.empty_arrays(self.groups, self.rows, 0, lanes)

        def grouped(per_lane: np.ndarray) -> np.ndarray:  # [lanes of all groups, k] -> [groups, k * lanes]
            g = per_lane.reshape(-1, lanes, per_lane.shape[1])
            return np.ascontiguousarray(np.moveaxis(g, 1, -1)).reshape(g.shape[0], per_lane.shape[1] * lanes)

        read = flush_words if z else (lambda w: w)  # in_word: ftz_from_bits in mode Z
        a["params"][:] = grouped(read(lane_words[:, :4])).view(np.float32)
        a["hyper"][:] = grouped(read(lane_words[:, [WORD["LR"], WORD["INV_BATCH"]]])).view(np.float32)
        # Sample tables [q][batch][lane], rotated so that slot j holds batch (base + j) mod 8.
        tables: dict[int, np.ndarray] = {}
        for u, row in enumerate(ids):
            page = np.zeros(PAGE_WORDS, dtype=np.uint32)  # X and Y where a page holds them, for batches()
            page[WORD["X"] : WORD["X"] + 256] = np.frombuffer(row, dtype=np.uint32, count=256)
            page[WORD["Y"] : WORD["Y"] + 256] = np.frombuffer(row, dtype=np.uint32, offset=1024)
            tab = kernels.batches(page, z).reshape(4, kernels.BATCHES, kernels.WARP)
            for r in set(base8[which == u].tolist()):
                tables[u * kernels.BATCHES + r] = np.roll(tab, -r, axis=1)
        lane_key = key[lane_sys].reshape(self.groups, lanes)
        shared = (lane_key == lane_key[:, :1]).all(axis=1)
        # The groups of a block are stepped together: a block is of shared tables only when all are.
        shared = shared.reshape(-1, shape.block).all(axis=1).repeat(shape.block)
        tab_of = np.empty(self.groups, dtype=np.int64)
        stabs: list[np.ndarray] = []
        ltabs: list[np.ndarray] = []
        shared_index: dict[int, int] = {}
        for g in range(self.groups):
            if shared[g]:  # [slot][lane][q], one value for the group's systems
                k = int(lane_key[g, 0])
                if k not in shared_index:
                    shared_index[k] = len(stabs)
                    stabs.append(tables[k].transpose(1, 2, 0).reshape(-1))
                tab_of[g] = -1 - shared_index[k]
            else:  # [slot][lane][q][system]
                tab_of[g] = len(ltabs)
                per_lane = np.stack([tables[int(k)] for k in lane_key[g]])  # [lanes, q, slot, warp lane]
                ltabs.append(np.ascontiguousarray(per_lane.transpose(2, 3, 1, 0)).reshape(-1))
        a["tab_of"] = tab_of
        a["stabs"] = np.stack(stabs) if stabs else np.zeros((1, sweep_loop.SHARED_FLOATS), dtype=np.float32)
        a["tabs"] = np.stack(ltabs) if ltabs else np.zeros((1, sweep_loop.tab_floats(lanes)), dtype=np.float32)
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


def final_pages(start: np.ndarray, base: np.ndarray, lanes: Lanes, done: int) -> np.ndarray:
    """The start pages ``[n, 1024]`` after ``done`` steps, as the TASKs leave them (SPEC 8;
    ``loops._tasks``): params, the loss ring, the next step, ERR and PENDING cleared."""
    out = start.copy()
    if done == 0:
        return out
    out[:, :4] = lanes.params_words()
    ring = lanes.ring_words()
    js = np.arange(max(0, done - 256), done, dtype=np.int64)  # the run's last 256 steps (or fewer)
    shift = (base & np.uint64(255)).astype(np.int64)
    for s in np.unique(shift):  # LOSS[(base + j) mod 256] = loss of relative step j
        rows = np.flatnonzero(shift == s)
        if js.size == 256:  # the whole ring: a rotation
            out[rows, LOSS] = np.roll(ring[rows], s, axis=1)
        else:
            out[np.ix_(rows, WORD["LOSS"] + (s + js) % 256)] = ring[rows][:, js % 256]
    kernels.end_task(out, base + np.uint64(done))
    return out
