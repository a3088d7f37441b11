"""A batch's result read straight from the sweep loop's arrays: each system's params, last loss and
page digest (SPEC 11: SHA-256 of PARAMS then LOSS) without making its 4 KiB final page.

A final page differs from its start page only in PARAMS, the LOSS words of the last
``min(steps, 256)`` steps, STEP_HI:NEXT_STEP, ERR and PENDING (``lanes.final_pages``); the digest
reads PARAMS and LOSS alone.  So one njit pass puts each system's 260 digested words (its params
from its lane, its start page's LOSS with the run's steps written over) in a row, 1040 bytes a
system, and :func:`meshnb.sha256.digest_rows` hashes the rows on the runner's threads; the
final pages are made only when asked for (``keep_pages=True``, or a run of no steps).
"""

from __future__ import annotations

import hashlib
from concurrent.futures import Executor
from typing import Any

import numpy as np

from .. import sha256
from ..jit import jit
from ..runspec import NJIT_DIGEST_ROWS, Systems
from ..view import WORD
from .lanes import Lanes, start_lr_words
from .result import SweepResult

_LOSS0 = WORD["LOSS"]
MSG_WORDS = 4 + 256
"""The digested words of a page: PARAMS (4) then LOSS (256)."""


@jit(nogil=True)
def _gather(start_loss, page_of, params, ring, position, lanes, base, done, out_params, out_last, msg, first, last):  # type: ignore[no-untyped-def]
    """Rows ``first .. last - 1``: system k's params and last loss into ``out_params[k]`` and
    ``out_last[k]``, its final page's PARAMS then LOSS into ``msg[k]`` (``done`` >= 1 steps,
    relative step j at LOSS[(base + j) mod 256], as ``lanes._final_pages`` writes them)."""
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


def digests(msg: np.ndarray, pool: Executor, threads: int) -> np.ndarray:
    """SHA-256 of each row of ``msg`` ``[n, 260]`` (its words' little-endian bytes), ``[n, 32]``:
    hashlib below :data:`~meshnb.runspec.NJIT_DIGEST_ROWS` rows (a small sweep's cold start
    compiles no SHA-256 kernel), else :func:`meshnb.sha256.digest_rows` on ``threads`` of ``pool``."""
    n = int(msg.shape[0])
    if n < NJIT_DIGEST_ROWS:
        rows = np.ascontiguousarray(msg, dtype="<u4")
        return np.frombuffer(b"".join([hashlib.sha256(r).digest() for r in rows]), np.uint8).reshape(n, 32).copy()
    out = np.empty((n, 32), dtype=np.uint8)
    cuts = [n * i // threads for i in range(threads + 1)]
    for f in [
        pool.submit(sha256.digest_rows, msg, 0, 4, 4, MSG_WORDS, out, cuts[i], cuts[i + 1]) for i in range(threads)
    ]:
        f.result()
    return out


def result_of_lanes(
    systems: Systems, lo: int, lanes: Lanes, done: int, pool: Executor, threads: int, **extra: Any
) -> SweepResult:
    """The result of systems ``lo .. lo + lanes.m - 1`` after ``done`` >= 1 steps, read from the
    loop's arrays (what ``result_of_pages`` of their final pages gives, bit for bit); ``extra``:
    the rest of :class:`SweepResult`'s fields (trace digests, history, timings)."""
    assert done >= 1, "no steps: the final pages are the start pages (result_of_pages)"
    n, hi = lanes.m, lo + lanes.m
    page_of = systems.page_index(lo, hi)
    base = systems.step_base(lo, hi)
    a = lanes.arrays
    params = np.empty((n, 4), dtype=np.uint32)
    last = np.empty(n, dtype=np.uint32)
    msg = np.empty((n, MSG_WORDS), dtype=np.uint32)
    start_loss = np.ascontiguousarray(systems.starts[:, WORD["LOSS"] : WORD["LOSS"] + 256])
    cuts = [n * i // threads for i in range(threads + 1)]
    ring = a["ring"].view(np.uint32)

    if n < NJIT_DIGEST_ROWS:  # a small batch: numpy, so a small sweep's cold start compiles no _gather
        _gather_np(start_loss, page_of, a["params"].view(np.uint32), ring, lanes, base, done, params, last, msg)
        cuts = []

    def part(i: int) -> None:  # nogil: the threads run at once
        _gather(start_loss, page_of, a["params"].view(np.uint32), ring, lanes.position, lanes.shape.lanes, base, done,
                params, last, msg, cuts[i], cuts[i + 1])  # fmt: skip

    for f in [pool.submit(part, i) for i in range(len(cuts) - 1)]:
        f.result()
    return SweepResult(
        steps=done,
        z=systems.z,
        page_index=page_of,
        lr_index=systems.lr_index(lo, hi),
        lr_words=start_lr_words(systems, lo, hi),
        step_base=base,
        params_words=params,
        last_loss_words=last,
        digest_bytes=digests(msg, pool, threads),
        starts=systems.starts,
        first=lo,
        **extra,
    )
