"""A batch's result read from the sweep loop's arrays: params, last loss and digest (SPEC 11) without a final page.

The digest's 260 words a system are hashed from the loop's arrays by the multi-buffer SHA-256 (one
system a vector lane) where :data:`meshnb.sha256.ROWS_KERNEL` is ``"lanes"``, else as rows."""

from __future__ import annotations

from concurrent.futures import Executor
from typing import Any

import numpy as np

from .. import sha256
from ..jit import jit
from ..loops.sweep import NSUMS
from ..runspec import NJIT_DIGEST_ROWS, Run, row_digests
from ..view import WORD
from .lanes import Lanes, start_lr_words
from .result import SweepResult

_LOSS0 = WORD["LOSS"]
MSG_WORDS = 4 + 256
"""The digested words of a page: PARAMS (4) then LOSS (256)."""
MSG_SPANS = ((0, 4), (4, MSG_WORDS))
_BLOCKS = sha256.message_blocks(4 * MSG_WORDS)  # 17: 1040 bytes, the 0x80 and the length


@jit(nogil=True)
def _gather(start_loss, page_of, params, ring, position, lanes, base, done, out_params, out_last, msg, first, last):  # type: ignore[no-untyped-def]
    """Rows ``first .. last - 1``: system k's params, last loss, and its final page's PARAMS then LOSS in ``msg[k]``."""
    lo_step = max(0, done - 256)
    for k in range(first, last):
        pos = position[k]
        g, q = pos // lanes, pos % lanes
        for j in range(4):
            w = params[g, j * lanes + q]
            out_params[k, j] = w
            msg[k, j] = w
        if done < 256:  # else every LOSS word is the run's
            p = page_of[k]
            for j in range(256):
                msg[k, 4 + j] = start_loss[p, j]
        s = np.int64(base[k] & np.uint64(255))
        for j in range(lo_step, done):
            msg[k, 4 + (s + j) % 256] = ring[g, (j % 256) * lanes + q]
        out_last[k] = ring[g, ((done - 1) % 256) * lanes + q]


def _gather_np(
    start_loss: np.ndarray, page_of: np.ndarray, params: np.ndarray, ring: np.ndarray, lanes: Lanes, base: np.ndarray,
    done: int, out_params: np.ndarray, out_last: np.ndarray, msg: np.ndarray,
) -> None:  # fmt: skip
    """:func:`_gather` of every row in numpy (a loop over the last ``min(done, 256)`` steps)."""
    width = lanes.shape.lanes
    g, q = lanes.position // width, lanes.position % width
    for j in range(4):
        out_params[:, j] = params[g, j * width + q]
    msg[:, :4] = out_params
    if done < 256:
        msg[:, 4:] = start_loss[page_of]
    s = (base & np.uint64(255)).astype(np.int64)
    rows = np.arange(msg.shape[0])
    for j in range(max(0, done - 256), done):
        msg[rows, 4 + (s + j) % 256] = ring[g, (j % 256) * width + q]
    out_last[:] = ring[g, ((done - 1) % 256) * width + q]


@jit(nogil=True)
def _shared_blocks(start_loss, pg, s0, done, shared, wk):  # type: ignore[no-untyped-def]
    """The blocks of a one-vector batch that no step wrote (start page words or padding): ``shared[blk]``,
    and their W[t] + K[t] in ``wk``."""
    words = np.empty(16 * _BLOCKS, dtype=np.uint32)  # one system's padded message, its SHA-256 words
    for blk in range(_BLOCKS):
        shared[blk] = blk > 0  # block 0 holds PARAMS
        for i in range(max(16 * blk, 4), 16 * blk + 16):
            if i >= MSG_WORDS:
                words[i] = sha256.padding_word(i, 4 * MSG_WORDS, 16 * _BLOCKS)
                continue
            words[i] = sha256.bswap32(start_loss[pg, i - 4])
            if done >= 256 or ((i - 4 - s0) & 255) < done:  # a LOSS word a step wrote
                shared[blk] = False
        if shared[blk]:
            sha256.schedule_wk(words[16 * blk : 16 * blk + 16], wk, 64 * blk)


@jit(nogil=True)
def _digest_lanes(  # type: ignore[no-untyped-def]
    start_loss, page_of, base, params, ring, order, m, lanes, done, out_params, out_last, out_digest, b0, b1
):
    """Batches ``b0 .. b1 - 1`` of :data:`~meshnb.sha256.LANES` lane positions: each system's params, last
    loss and digest, its words read into the hash's vector lanes; a batch of one vector skips the
    blocks its systems share (:func:`_shared_blocks`)."""
    n = sha256.LANES
    blocks = _BLOCKS
    h = np.empty(8 * n, dtype=np.uint32)
    w = np.empty(blocks * 16 * n, dtype=np.uint32)
    s = np.empty(64 * n, dtype=np.uint32)
    shared = np.zeros(blocks, dtype=np.bool_)
    mixed = np.zeros(blocks, dtype=np.bool_)  # a batch of mixed lanes shares no block
    wk = np.empty(64 * blocks, dtype=np.uint32)
    known_pg, known_s0 = np.int64(-1), np.int64(-1)  # whose blocks ``shared`` and ``wk`` hold
    sys_of = np.empty(n, dtype=np.int64)
    pflat, rflat = params.reshape(-1), ring.reshape(-1)
    prow, rrow = params.shape[1], ring.shape[1]
    pad = params.shape[0] * lanes
    mask = np.uint64(255)
    for b in range(b0, b1):
        p0 = b * n
        for q in range(n):
            sys_of[q] = order[min(min(p0 + q, pad - 1), m - 1)]  # a padding lane holds the last system
        s0 = np.int64(base[sys_of[0]] & mask)
        pg = np.int64(page_of[sys_of[0]])
        one_vector = n == lanes  # this batch is group p0 // lanes: its words are vectors of the loop's arrays
        for q in range(n):
            k = sys_of[q]
            if np.int64(base[k] & mask) != s0 or (done < 256 and page_of[k] != pg):
                one_vector = False
        sha256.lanes_start(h, w, 4 * MSG_WORDS)  # the initial hash value and the padding words
        if one_vector:
            if pg != known_pg or s0 != known_s0:
                _shared_blocks(start_loss, pg, s0, done, shared, wk)
                known_pg, known_s0 = pg, s0
            g = p0 // lanes
            for j in range(4):
                sha256.lanes_store(w, j * n, sha256.lanes_bswap(sha256.lanes_load(pflat, g * prow + j * n)))
            for i in range(256):  # LOSS[i] holds relative step j = (i - s) mod 256 if the run reached it
                if shared[(4 + i) // 16]:
                    continue
                slot = (i - s0) & 255
                if done >= 256 or slot < done:
                    v = sha256.lanes_load(rflat, g * rrow + slot * n)
                else:
                    v = sha256.lanes_splat(start_loss[pg, i])
                sha256.lanes_store(w, (4 + i) * n, sha256.lanes_bswap(v))
            sha256.compress_lanes_shared(h, w, blocks, s, shared, wk)
        else:
            for q in range(n):
                p = min(p0 + q, pad - 1)
                g, lane, k = p // lanes, p % lanes, sys_of[q]
                for j in range(4):
                    w[j * n + q] = sha256.bswap32(params[g, j * lanes + lane])
                sk = np.int64(base[k] & mask)
                for i in range(256):
                    slot = (i - sk) & 255
                    x = ring[g, slot * lanes + lane] if done >= 256 or slot < done else start_loss[page_of[k], i]
                    w[(4 + i) * n + q] = sha256.bswap32(x)
            sha256.compress_lanes_shared(h, w, blocks, s, mixed, wk)
        last_slot = (done - 1) % 256
        for q in range(min(n, m - p0)):
            p = p0 + q
            g, lane, k = p // lanes, p % lanes, order[p]
            for j in range(4):
                out_params[k, j] = params[g, j * lanes + lane]
            out_last[k] = ring[g, last_slot * lanes + lane]
            sha256.lanes_digest_out(h, q, out_digest, k)


def _on_slices(pool: Executor, cuts: list[int], fn: Any, *args: Any) -> None:
    """``fn(*args, cuts[i], cuts[i + 1])`` for each slice on ``pool``'s threads (nogil kernels: at once)."""
    for f in [pool.submit(fn, *args, cuts[i], cuts[i + 1]) for i in range(len(cuts) - 1)]:
        f.result()


def result_of_lanes(
    systems: Run, lo: int, lanes: Lanes, done: int, pool: Executor, threads: int, kernel: str | None = None,
    **extra: Any,
) -> SweepResult:  # fmt: skip
    """The result of systems ``lo .. lo + lanes.m - 1`` after ``done`` >= 1 steps (``result_of_pages``' bits);
    ``extra``: :class:`SweepResult`'s other fields; ``kernel``: ``"lanes"`` or ``"rows"`` (None: the default)."""
    assert done >= 1, "no steps: the final pages are the start pages (result_of_pages)"
    n, hi = lanes.m, lo + lanes.m
    page_of = systems.page_index(lo, hi)
    base = systems.step_base(lo, hi)
    a = lanes.arrays
    params = np.empty((n, 4), dtype=np.uint32)
    last = np.empty(n, dtype=np.uint32)
    start_loss = np.ascontiguousarray(systems.starts[:, WORD["LOSS"] : WORD["LOSS"] + 256])

    params_u, ring_u = a["params"].view(np.uint32), a["ring"].view(np.uint32)
    if n < NJIT_DIGEST_ROWS:  # a small batch: numpy and hashlib, so a small sweep's cold start compiles nothing here
        msg = np.empty((n, MSG_WORDS), dtype=np.uint32)
        _gather_np(start_loss, page_of, params_u, ring_u, lanes, base, done, params, last, msg)
        digest = row_digests(msg, MSG_SPANS)
    elif (kernel == "lanes") if kernel else (sha256.ROWS_KERNEL == "lanes"):
        digest = np.empty((n, 32), dtype=np.uint8)
        batches = -(-lanes.pad // sha256.LANES)
        _on_slices(pool, [batches * i // threads for i in range(threads + 1)], _digest_lanes, start_loss, page_of,
                   base, params_u, ring_u, lanes.order, n, lanes.shape.lanes, done, params, last, digest)  # fmt: skip
    else:  # rows of words, then the SHA-256 of the rows (SHA-NI where there is no AVX-512)
        msg = np.empty((n, MSG_WORDS), dtype=np.uint32)
        _on_slices(pool, [n * i // threads for i in range(threads + 1)], _gather, start_loss, page_of, params_u,
                   ring_u, lanes.position, lanes.shape.lanes, base, done, params, last, msg)  # fmt: skip
        digest = row_digests(msg, MSG_SPANS, pool, threads)
    return SweepResult(
        steps=done,
        z=systems.z,
        page_index=page_of,
        lr_index=systems.lr_index(lo, hi),
        lr_words=start_lr_words(systems, lo, hi),
        step_base=base,
        params_words=params,
        last_loss_words=last,
        digest_bytes=digest,
        starts=systems.starts,
        first=lo,
        **extra,
    )


class TraceHashes:
    """A batch's trace digests, hashed chunk by chunk from the loop's trace buffer by the multi-buffer
    SHA-256 (a group's systems in its lanes), for loops whose groups fit (:meth:`fits`)."""

    def __init__(self, groups: int) -> None:
        n = sha256.LANES
        self.h = np.empty((groups, 8 * n), dtype=np.uint32)
        self.tail = np.empty((groups, 16 * n), dtype=np.uint32)
        self.ntail = 0  # words in the unfinished block: the same for every system (they grow together)
        self.words = 0
        _trace_init(self.h)

    @staticmethod
    def fits(lanes: Lanes) -> bool:
        """Whether a batch's trace is hashed here: a large batch whose groups are the hash's lanes."""
        return lanes.m >= NJIT_DIGEST_ROWS and lanes.shape.lanes == sha256.LANES and sha256.ROWS_KERNEL == "lanes"

    def update(self, trace: np.ndarray, steps: int, pool: Executor, cuts: list[int]) -> None:
        """Hash a chunk's ``steps`` steps of trace, groups ``cuts[i] .. cuts[i + 1] - 1`` on a thread each."""
        words = steps * NSUMS
        t = trace.view(np.uint32)
        _on_slices(pool, cuts, _trace_update, self.h, self.tail, self.ntail, t, words)
        self.ntail = (self.ntail + words) % 16
        self.words += words

    def digests(self, order: np.ndarray, m: int, pool: Executor, cuts: list[int]) -> np.ndarray:
        """``[m, 32]``: each system's trace digest (of the steps hashed), in system order."""
        out = np.empty((m, 32), dtype=np.uint8)
        nbytes = 4 * self.words
        _on_slices(pool, cuts, _trace_finish, self.h, self.tail, self.ntail, nbytes, order, m, out)
        return out


@jit(nogil=True)
def _trace_init(h):  # type: ignore[no-untyped-def]
    for g in range(h.shape[0]):
        sha256.lanes_init(h[g])


@jit(nogil=True)
def _trace_update(h, tail, ntail, trace, words, g0, g1):  # type: ignore[no-untyped-def]
    s = np.empty(64 * sha256.LANES, dtype=np.uint32)
    for g in range(g0, g1):
        sha256.lanes_update(h[g], tail[g], ntail, trace[g], words, s)


@jit(nogil=True)
def _trace_finish(h, tail, ntail, nbytes, order, m, out, g0, g1):  # type: ignore[no-untyped-def]
    n = sha256.LANES
    s = np.empty(64 * n, dtype=np.uint32)
    for g in range(g0, g1):
        sha256.lanes_finish(h[g], tail[g], ntail, nbytes, s)
        for q in range(min(n, m - g * n)):
            sha256.lanes_digest_out(h[g], q, out, order[g * n + q])
