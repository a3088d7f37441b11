"""A batch of systems packed into the sweep loop's vector lanes (:mod:`meshnb.loops.sweep`), and read back.

Systems are put in lanes sorted by their sample table (X, Y and ``base mod 8``), so that an LR
sweep's groups each read one shared table; lane ``i`` holds system ``order[i]``, and the padding
lanes copy the last.
"""

from __future__ import annotations

import numpy as np

from .. import kernels
from ..floatz import flush_words
from ..jit import jit
from ..loops import sweep as sweep_loop
from ..runspec import Run
from ..view import WORD

_LOSS0 = WORD["LOSS"]


class Lanes:
    """The loop's arrays for a batch of systems (``words``: their start pages ``[n, 1024]``)."""

    arrays: dict[str, np.ndarray]
    """The loop's arrays by name (``params``, ``hyper``, ``ring``, ``hist``, ``tab_of``, ``stabs``, ...)."""
    one_table: tuple[np.ndarray, int, bool] | None
    """Where every system reads one sample table (lanes in system order): its X and Y words, base mod 8, mode Z."""

    def __init__(self, words: np.ndarray, z: bool, steps: int, loss_every: int, shape: sweep_loop.Shape) -> None:
        m = int(words.shape[0])
        xy = words[:, WORD["X"] : WORD["Y"] + 256]
        if m == 0 or (xy == xy[0]).all():  # the usual case: one page's samples (an LR sweep)
            rows, which = xy[:1], np.zeros(m, dtype=np.int64)
        else:
            rows, which = distinct_rows(xy)
        head = words[:, [0, 1, 2, 3, WORD["LR"], WORD["INV_BATCH"]]]
        self._build(head, (words[:, WORD["NEXT_STEP"]] & 7).astype(np.int64), rows, which, z, steps, loss_every, shape)

    @classmethod
    def of_systems(
        cls, systems: Run, lo: int, hi: int, steps: int, loss_every: int, shape: sweep_loop.Shape,
        reuse: Lanes | None = None,
    ) -> Lanes:  # fmt: skip
        """:class:`Lanes` of ``systems.words(lo, hi)`` without a page per system; ``reuse``: an earlier
        batch's lanes, whose arrays (stale words nothing reads) and one sample table are taken where they fit."""
        m = hi - lo
        lanes = cls.__new__(cls)
        # Page-major (system k is page k // L): the batch's pages are a run of them, with no sort.
        first = int(systems.page_index(lo, lo + 1)[0]) if m else 0
        used = systems.starts[first : int(systems.page_index(hi - 1, hi)[0]) + 1 if m else first]  # a view
        xy = used[:, WORD["X"] : WORD["Y"] + 256]
        one_row = len(used) <= 1 or bool((xy == xy[0]).all())
        head = used[:, [0, 1, 2, 3, WORD["LR"], WORD["INV_BATCH"]]]  # per page
        inverse = None if len(used) <= 1 else systems.page_index(lo, hi) - first  # each system's page
        base8 = _one_base8(systems, lo, hi, used) if m and one_row else None
        if base8 is not None:  # one sample table (an LR sweep): no sort, lanes in system order
            lanes._build_one_table(m, head, inverse, _lr_words(systems, lo, hi), xy[0], base8, systems.z, steps,
                                   loss_every, shape, reuse)  # fmt: skip
            return lanes
        if one_row:
            rows, which = xy[:1], np.zeros(m, dtype=np.int64)
        else:
            rows, which_page = distinct_rows(xy)
            which = which_page[inverse]
        head = np.take(head, np.zeros(m, np.int64) if inverse is None else inverse, axis=0)  # 4x head[...]
        head[:, 4] = start_lr_words(systems, lo, hi)
        base8s = (systems.step_base(lo, hi) & np.uint64(7)).astype(np.int64)
        lanes._build(
            head, base8s, rows, which, systems.z, steps, loss_every, shape, None if reuse is None else reuse.arrays
        )
        return lanes

    def _arrays(self, m: int, steps: int, loss_every: int, shape: sweep_loop.Shape,
                reuse: dict[str, np.ndarray] | None) -> dict[str, np.ndarray]:  # fmt: skip
        """Sets the batch's sizes; the loop's state arrays (``reuse``'s where their shapes fit)."""
        lanes, per_call = shape.lanes, shape.lanes * shape.block
        pad = -(-m // per_call) * per_call
        self.shape, self.loss_every = shape, loss_every
        self.m, self.pad, self.groups = m, pad, pad // lanes
        self.rows = steps // loss_every if loss_every else 0
        fresh = sweep_loop.empty_arrays(self.groups if reuse is None else 1, self.rows, 0, lanes)
        if reuse is None:
            return fresh
        a: dict[str, np.ndarray] = {}
        for name, one in fresh.items():  # one group's arrays: the widths
            kept = reuse.get(name)
            fit = kept is not None and kept.shape == (self.groups, one.shape[1])
            a[name] = kept if kept is not None and fit else np.zeros((self.groups, one.shape[1]), np.float32)
        return a

    def _build_one_table(
        self, m: int, head: np.ndarray, inverse: np.ndarray | None, lr: np.ndarray | None, row: np.ndarray,
        base8: int, z: bool, steps: int, loss_every: int, shape: sweep_loop.Shape, reuse: Lanes | None,
    ) -> None:  # fmt: skip
        """:meth:`_build` of systems that all read one sample table: lane ``i`` holds system ``min(i, m - 1)``;
        ``head`` per page, ``inverse`` each system's page (None: one), ``lr`` each one's LR word (None: its page's)."""
        a = self._arrays(m, steps, loss_every, shape, None if reuse is None else reuse.arrays)
        lanes, groups = shape.lanes, self.groups
        self.order = self.position = np.arange(m)  # read only, as _build's
        read = _flushed if z else (lambda w: w)  # in_word: ftz_from_bits in mode Z
        head = read(head)
        # [groups][k][lanes] views of the loop's arrays, from system order; padding lanes copy the last system
        params = a["params"].view(np.uint32).reshape(groups, 4, lanes)
        hyper = a["hyper"].view(np.uint32).reshape(groups, 2, lanes)
        full = m // lanes
        tail = np.minimum(np.arange(full * lanes, self.pad), m - 1)

        def put(dst: np.ndarray, per_sys: np.ndarray) -> None:  # [groups, k, lanes] <- [m, k]
            dst[:full] = per_sys[: full * lanes].reshape(full, lanes, dst.shape[1]).transpose(0, 2, 1)
            dst[full:] = per_sys[tail].reshape(-1, lanes, dst.shape[1]).transpose(0, 2, 1)

        if inverse is None:  # one page: its params, LR and INV_BATCH words in every lane
            params[:] = head[0, :4, None]
            hyper[:] = head[0, 4:, None]
        else:
            per_sys = np.take(head, inverse, axis=0)  # 4x faster than head[inverse]
            put(params, per_sys[:, :4])
            put(hyper, per_sys[:, 4:])
        if lr is not None:  # SET_LR's words over the pages' own
            put(hyper[:, :1], read(lr)[:, None])
        a["tab_of"] = np.full(groups, -1, dtype=np.int64)
        self.one_table = (row.copy(), base8, z)
        if reuse is not None and reuse.one_table is not None and _same_table(reuse.one_table, self.one_table):
            a["stabs"] = reuse.arrays["stabs"]  # read only
        else:
            table = _row_tables(row[None], np.array([base8]), z)[0]  # slot j holds batch (base + j) mod 8
            a["stabs"] = np.ascontiguousarray(table.transpose(1, 2, 0)).reshape(1, sweep_loop.SHARED_FLOATS)
        a["tabs"] = np.zeros((1, sweep_loop.tab_floats(lanes)), dtype=np.float32)  # no group's own
        self.arrays = a

    def _build(
        self, head: np.ndarray, base8: np.ndarray, rows: np.ndarray, which: np.ndarray, z: bool, steps: int,
        loss_every: int, shape: sweep_loop.Shape, reuse: dict[str, np.ndarray] | None = None,
    ) -> None:  # fmt: skip
        """``head`` ``[M, 6]``: each system's params, LR and INV_BATCH words; ``base8`` its step base mod 8;
        ``rows`` the distinct samples (X then Y), ``which`` each system's row of them."""
        m = int(head.shape[0])
        a = self._arrays(m, steps, loss_every, shape, reuse)
        self.one_table = None
        lanes, pad, groups = shape.lanes, self.pad, self.groups
        key = which * kernels.BATCHES + base8
        n_keys = rows.shape[0] * kernels.BATCHES
        # np.unique's keys and a stable sort without a comparison sort: a count, and a radix sort of 16-bit keys
        keys = np.flatnonzero(np.bincount(key, minlength=n_keys))
        self.order = np.argsort(key.astype(np.uint16) if n_keys <= 1 << 16 else key, kind="stable")
        self.position = np.empty(m, dtype=np.int64)  # the lane of each system
        self.position[self.order] = np.arange(m)
        lane_sys = self.order[np.minimum(np.arange(pad), max(m - 1, 0))] if m else np.zeros(0, np.int64)
        read = _flushed if z else (lambda w: w)  # in_word: ftz_from_bits in mode Z
        per_lane = np.take(read(head), lane_sys, axis=0)  # [pad, 6]; the flush commutes with the gather
        # [groups][k][lanes] views of the loop's arrays <- [groups][lanes][k]
        a["params"].view(np.uint32).reshape(groups, 4, lanes)[:] = (
            per_lane[:, :4].reshape(groups, lanes, 4).transpose(0, 2, 1)
        )
        a["hyper"].view(np.uint32).reshape(groups, 2, lanes)[:] = (
            per_lane[:, 4:].reshape(groups, lanes, 2).transpose(0, 2, 1)
        )
        # Sample tables [q][batch][lane] of every key in use, rotated so that slot j holds batch (base + j) mod 8.
        tables = np.empty((keys.size, 4, kernels.BATCHES, kernels.WARP), dtype=np.float32)
        for k0 in range(0, keys.size, _TABLES_AT_ONCE):
            ks = keys[k0 : k0 + _TABLES_AT_ONCE]
            tables[k0 : k0 + ks.size] = _row_tables(rows[ks // kernels.BATCHES], ks % kernels.BATCHES, z)
        index = np.zeros(n_keys, dtype=np.int64)
        index[keys] = np.arange(keys.size)
        lane_key = index[key[lane_sys]].reshape(groups, lanes)  # index into tables
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

    def per_system(self, lane_major: np.ndarray) -> np.ndarray:
        """``[groups, k, lanes]`` lane data -> ``[M, k]`` in system order (a new array)."""
        k = int(lane_major.shape[1])
        if self.one_table is not None:  # lane i holds system i: one transposing copy
            out = np.empty((self.pad, k), dtype=lane_major.dtype)
            out.reshape(self.groups, self.shape.lanes, k)[:] = lane_major.transpose(0, 2, 1)
            return out[: self.m]
        per_lane = np.moveaxis(lane_major, 2, 1).reshape(self.pad, k)
        return per_lane[self.position]

    def _words(self, name: str, rows: int, first: int | None = None) -> np.ndarray:
        words = self.arrays[name].view(np.uint32).reshape(self.groups, rows, self.shape.lanes)
        return self.per_system(words[:, :first])

    def ring_words(self) -> np.ndarray:
        """``[M, 256]``: the loss word of relative step r at column r mod 256."""
        return self._words("ring", sweep_loop.RING)

    def params_words(self) -> np.ndarray:
        """``[M, 4]``: the params' words (a, b, c, d) as the loop left them."""
        return self._words("params", 4)

    def history(self, first: int | None = None) -> np.ndarray:
        """``[M, H]`` float32: the loss of every ``loss_every``-th step (its ``first`` columns where given)."""
        return self._words("hist", self.rows, first).view(np.float32)

    def trace_rows(self, trace: np.ndarray, n: int) -> np.ndarray:
        """A chunk's trace buffer ``[groups][n][5][lanes]`` as ``[pad, n * 5]`` words, a row per lane."""
        t = trace[:, : n * sweep_loop.NSUMS * self.shape.lanes].view(np.uint32)
        t = t.reshape(self.groups, n * sweep_loop.NSUMS, self.shape.lanes)
        return np.ascontiguousarray(np.moveaxis(t, 2, 1)).reshape(self.pad, n * sweep_loop.NSUMS)


def sample_tables(words: np.ndarray, z: bool) -> np.ndarray:
    """:func:`meshnb.kernels.batches` in numpy (same bits, no compile): x, x^2, x^3, y of sample ``g + 8 lane``."""
    return _row_tables(words[None, WORD["X"] : WORD["Y"] + 256], np.zeros(1, np.int64), z)[0]


_TABLES_AT_ONCE = 1024
"""Sample tables made by one set of numpy calls (4 MiB of them)."""


def _row_tables(xy: np.ndarray, base8: np.ndarray, z: bool) -> np.ndarray:
    """:func:`sample_tables` of rows of X then Y words ``[K, 512]``, each rotated so that slot ``j``
    holds batch ``(base8 + j) mod 8``: ``[K, 4, BATCHES, WARP]``."""
    f32 = np.float32
    k = xy.shape[0]
    slot = (base8[:, None] + np.arange(kernels.BATCHES)) % kernels.BATCHES

    def words(at: int) -> np.ndarray:  # [K][BATCHES][WARP]: in_word of sample g + 8 lane, rotated
        u = xy[:, at : at + 256].reshape(k, kernels.WARP, kernels.BATCHES).transpose(0, 2, 1)
        u = u[np.arange(k)[:, None], slot]
        return flush_words(u).view(f32) if z else u.view(f32)  # from_bits: the flush, NaNs canonical

    def result(r: np.ndarray) -> np.ndarray:  # kernels.result: flush_subnormal in mode Z, NaNs kept
        if not z:
            return r
        u = r.view(np.uint32)
        return np.where((u & np.uint32(0x7F800000)) == 0, u & np.uint32(0x80000000), u).view(f32)

    x = words(0)
    with np.errstate(all="ignore"):  # NaNs and overflows are values here, as in the kernel
        x2 = result(x * x)
        return np.stack([x, x2, result(x2 * x), words(256)], axis=1)


def distinct_rows(words: np.ndarray, lead: int = 4) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(words, axis=0, return_inverse=True)`` of uint32 rows, sorted by the first ``lead``
    columns (np.lexsort) and whole rows compared only where those tie (8x faster on a sweep's pages)."""
    n = int(words.shape[0])
    lead = min(lead, int(words.shape[1]))
    if n < 2 or lead == 0:
        return words[:1].copy(), np.zeros(n, dtype=np.int64)
    order = np.lexsort(words[:, lead - 1 :: -1].T)  # the first column the primary key
    ranked = words[order]
    tie = (ranked[1:, :lead] == ranked[:-1, :lead]).all(axis=1)
    if tie.any() and not (ranked[1:][tie] == ranked[:-1][tie]).all():  # rows that differ further on
        rows, which = np.unique(words, axis=0, return_inverse=True)
        return rows, which.reshape(-1).astype(np.int64)
    new = np.concatenate([[True], ~tie])  # the first of each run of equal rows
    which = np.empty(n, dtype=np.int64)
    which[order] = np.cumsum(new) - 1
    return ranked[new], which


def start_lr_words(systems: Run, lo: int, hi: int) -> np.ndarray:
    """Systems ``lo .. hi-1``'s LR words as their pages hold them after SET_LR (flushed in mode Z; a new array)."""
    lr = _lr_words(systems, lo, hi)
    if lr is None:
        return systems.starts[systems.page_index(lo, hi), WORD["LR"]]
    out = _flushed(lr) if systems.z else lr
    return out.copy() if np.shares_memory(out, systems.lr) else out


def _lr_words(systems: Run, lo: int, hi: int) -> np.ndarray | None:
    """``systems.lr`` of systems ``lo .. hi-1`` (None: each page's own), a view where they are a run of it."""
    if systems.lr is None:
        return None
    k0 = int(systems.lr_index(lo, lo + 1)[0]) if hi > lo else 0
    if k0 + (hi - lo) <= systems.lr.size:
        return systems.lr[k0 : k0 + hi - lo]
    return systems.lr[systems.lr_index(lo, hi)]


def _one_base8(systems: Run, lo: int, hi: int, used: np.ndarray) -> int | None:
    """The step base mod 8 that systems ``lo .. hi-1`` (of the start pages ``used``) all share, or None."""
    base = systems.base
    if isinstance(base, np.ndarray):
        b8 = base[lo:hi] & np.uint64(7)
    elif isinstance(base, int):
        return base & 7
    else:  # each page's own: NEXT_STEP's low bits
        b8 = used[:, WORD["NEXT_STEP"]] & np.uint32(7)
    return int(b8[0]) if b8.size and bool((b8 == b8[0]).all()) else None


def _same_table(a: tuple[np.ndarray, int, bool], b: tuple[np.ndarray, int, bool]) -> bool:
    """Whether two ``Lanes.one_table`` keys (X and Y words, step base mod 8, mode Z) are one table."""
    return a[1:] == b[1:] and np.array_equal(a[0], b[0])


def _flushed(u: np.ndarray) -> np.ndarray:
    """:func:`~meshnb.floatz.flush_words` of ``u``, or ``u`` itself where it holds no subnormal or NaN."""
    mag = u & np.uint32(0x7FFFFFFF)
    if not mag.size:
        return u
    # subnormal: 0 < mag < 2^23, so mag - 1 (zero wraps round) < 2^23 - 1; NaN: mag > inf's
    if int((mag - np.uint32(1)).min()) >= 0x007FFFFF and int(mag.max()) <= 0x7F800000:
        return u
    return flush_words(u)


def final_pages(start: np.ndarray, base: np.ndarray, lanes: Lanes, done: int) -> np.ndarray:
    """The start pages ``[n, 1024]`` after ``done`` steps, as the TASKs leave them (SPEC 8)."""
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
    """``out[k]`` with system k's params and its last ``min(done, 256)`` losses, from its lane."""
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
