"""Sweeps: many independent systems at once (learning rates x start pages), each bit-equal to its own run.

``sweep(steps, lrs=..., pages=...)`` runs M systems, one per learning rate, per start page, or per
pair of the two (page-major: system ``p * len(lrs) + l``).  Each system is exactly the system
``meshnb.train(steps, view_in=page, set_lr={0: lr_bits}, step_base=base, z=z)`` runs alone: its
final page, params, digest and trace digest are the same bits.  The step loop
(:mod:`meshnb.loops.sweep`) puts one system in each lane of a 16-float vector, so a sweep is
bound by the machine's throughput rather than by one step's dependency chain; the groups of 16
systems are split across threads (each call releases the GIL and sets the DAZ bit on its own
thread), and since systems share nothing, the bits do not depend on the split.

Runs go in chunks of steps (so that progress and Ctrl-C stay live): on Ctrl-C the sweep stops
at the end of the chunk in flight and :class:`SweepInterrupted` carries the result of the steps
done, every system as ``train`` would leave it after that many steps.
"""

from __future__ import annotations

import hashlib
import io
import os
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from . import kernels, loops, program
from .floatz import flush_words
from .host import progress_bar
from .interrupts import deferred_interrupt
from .loops import sweep as sweep_loop
from .options import is_int
from .view import FIELDS, VIEW_BYTES, View

WORDS = VIEW_BYTES // 4
_W = {name: f.word for name, f in FIELDS.items()}
_LOSS = slice(_W["LOSS"], _W["LOSS"] + 256)
PER_CALL = sweep_loop.LANES * sweep_loop.BLOCK  # systems are padded to a multiple of this
CHUNK_SYSTEM_STEPS = 1 << 24  # system-steps per chunk: ~0.1 s on 2 cores, so Ctrl-C and progress stay live
TRACE_CHUNK_SYSTEM_STEPS = 1 << 20  # with a trace: 20 MiB of trace words per chunk
MAX_STEPS = (1 << 63) - 1


@dataclass(frozen=True)
class Systems:
    """A sweep's systems before their first step: start pages (``[M, 1024]`` uint32 words, SET_LR
    and the step base applied as ``train`` applies them), and where each came from."""

    pages: np.ndarray
    page_index: np.ndarray  # which start page (0 for the init page)
    lr_index: np.ndarray  # which LR of ``lrs`` (-1: the page's own)
    z: bool

    def __len__(self) -> int:
        return int(self.pages.shape[0])

    def __getitem__(self, s: slice) -> Systems:
        return Systems(self.pages[s], self.page_index[s], self.lr_index[s], self.z)

    @property
    def step_base(self) -> np.ndarray:
        return self.pages[:, _W["STEP_HI"]].astype(np.uint64) << np.uint64(32) | self.pages[:, _W["NEXT_STEP"]]


def init_page() -> bytes:
    """The page of one system without a group right after ``init`` (SPEC 8)."""
    ctx = program.Context(View())
    program.init(ctx)
    return ctx.view.tobytes()


def lr_words(lrs: Any) -> np.ndarray:
    """LRs as f32 words: a uint32 array is taken as the words themselves, anything else as values
    rounded to float32."""
    arr = np.asarray(lrs)
    if arr.ndim != 1 or arr.size == 0:
        raise ValueError(f"lrs must be a non-empty 1-D sequence, got shape {arr.shape}")
    if arr.dtype == np.uint32:
        return arr.copy()
    if arr.dtype.kind not in "iuf":
        raise ValueError(f"lrs must be numbers (or a uint32 array of f32 words), got dtype {arr.dtype}")
    with np.errstate(over="ignore"):
        return arr.astype(np.float32).view(np.uint32)


def _page_words(pages: Any) -> np.ndarray:
    """Start pages as ``[P, 1024]`` uint32 words (bytes-likes of 4096 bytes, or an array)."""
    if isinstance(pages, (bytes, bytearray, memoryview)):
        pages = [pages]
    if isinstance(pages, np.ndarray):
        raw = np.ascontiguousarray(pages)
        if raw.ndim == 2 and raw.dtype == np.uint32 and raw.shape[1] == WORDS:
            return raw.copy()
        if raw.ndim == 2 and raw.dtype == np.uint8 and raw.shape[1] == VIEW_BYTES:
            return raw.view("<u4").copy()
        raise ValueError(f"pages must be [P, 4096] uint8 or [P, 1024] uint32, got {raw.dtype} {raw.shape}")
    out = []
    for i, p in enumerate(pages):
        try:
            b = bytes(p)
        except TypeError:
            raise ValueError(f"page {i} is not bytes ({type(p).__name__})") from None
        if len(b) != VIEW_BYTES:
            raise ValueError(f"page {i} has {len(b)} bytes, a page has {VIEW_BYTES}")
        out.append(np.frombuffer(b, dtype="<u4"))
    if not out:
        raise ValueError("pages is empty")
    return np.stack(out).astype(np.uint32)


def plan(steps: int, *, lrs: Any = None, pages: Any = None, step_bases: Any = None, z: bool = True) -> Systems:
    """The systems of a sweep, checked as ``train`` checks a run (ValueError otherwise)."""
    if not is_int(steps) or not 0 <= steps <= MAX_STEPS:
        raise ValueError(f"steps must be a non-negative integer below 2^63, got {steps!r}")
    starts = np.frombuffer(init_page(), dtype="<u4")[None, :].astype(np.uint32) if pages is None else _page_words(pages)
    n_pages = starts.shape[0]
    lr = None if lrs is None else lr_words(lrs)
    n_lrs = 1 if lr is None else lr.size
    m = n_pages * n_lrs
    words = np.repeat(starts, n_lrs, axis=0)
    page_index = np.repeat(np.arange(n_pages), n_lrs)
    lr_index = np.tile(np.arange(n_lrs), n_pages) if lr is not None else np.full(m, -1)
    if lr is not None:  # SET_LR before the first task: LR = ftz_from_bits(bits) in mode Z
        words[:, _W["LR"]] = np.tile(flush_words(lr) if z else lr, n_pages)
    if step_bases is not None:
        bases = [step_bases] * m if is_int(step_bases) else list(step_bases)
        if len(bases) != m:
            raise ValueError(f"step_bases must be one integer or one per system ({m}), got {len(bases)}")
        for b in bases:
            if not is_int(b) or not 0 <= b <= program.LAST_STEP:
                raise ValueError(f"a step base must be 0..2^64-2, got {b!r}")
        b64 = np.array([int(b) for b in bases], dtype=np.uint64)
        words[:, _W["STEP_HI"]] = (b64 >> np.uint64(32)).astype(np.uint32)
        words[:, _W["NEXT_STEP"]] = (b64 & np.uint64(0xFFFFFFFF)).astype(np.uint32)
    systems = Systems(words, page_index, lr_index, bool(z))
    if steps:
        if np.any(words[:, _W["STEPS_PER_TASK"]] == 0):
            k = int(np.argmax(words[:, _W["STEPS_PER_TASK"]] == 0))
            raise ValueError(f"system {k}: the page's STEPS_PER_TASK is 0: its tasks would never progress")
        last = [int(b) + steps - 1 for b in systems.step_base]
        for k, end in enumerate(last):
            if end > program.LAST_STEP:
                raise ValueError(
                    f"system {k}: steps {end - steps + 1} .. {end} reach 2^64-1, whose round would wrap to 0"
                )
    return systems


@dataclass
class SweepResult:
    """M systems after a sweep: arrays indexed by system (pandas-free; see :meth:`to_frame`).

    ``params_words`` ``[M, 4]`` uint32 and ``params`` float32 (a, b, c, d); ``last_loss`` (the
    loss of each system's last step, read from its page as ``train``'s result does), ``digests``
    and ``trace_digests`` (SPEC 11; empty strings without ``trace=True``), ``loss_history``
    ``[M, H]`` float32 (the loss of the run's steps ``loss_steps``) or None, ``pages`` ``[M, 4096]``
    uint8, the final pages.  ``lr_words`` is each system's LR word as its page holds it."""

    steps: int
    z: bool
    pages: np.ndarray
    page_index: np.ndarray
    lr_index: np.ndarray
    trace_digests: list[str]
    loss_history: np.ndarray | None
    loss_steps: np.ndarray
    seconds: float = 0.0
    first_call_seconds: float = 0.0
    digests: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not self.digests:
            self.digests = digests(self.words)

    @property
    def words(self) -> np.ndarray:
        """The final pages as ``[M, 1024]`` uint32 words."""
        return self.pages.view("<u4")

    def __len__(self) -> int:
        return int(self.pages.shape[0])

    @property
    def systems(self) -> int:
        return len(self)

    @property
    def params_words(self) -> np.ndarray:
        return self.words[:, :4].copy()

    @property
    def params(self) -> np.ndarray:
        return self.params_words.view(np.float32)

    @property
    def params_hex(self) -> list[list[str]]:
        return [[f"{int(w):08x}" for w in row] for row in self.params_words]

    @property
    def lr_words(self) -> np.ndarray:
        return self.words[:, _W["LR"]].copy()

    @property
    def lrs(self) -> np.ndarray:
        """Each system's LR as the steps read it (``ftz_from_bits`` in mode Z)."""
        w = self.lr_words
        return (flush_words(w) if self.z else w).view(np.float32)

    @property
    def step_base(self) -> np.ndarray:
        """Each system's first step (uint64)."""
        nxt = self.words[:, _W["STEP_HI"]].astype(np.uint64) << np.uint64(32) | self.words[:, _W["NEXT_STEP"]]
        return nxt - np.uint64(self.steps)

    @property
    def last_loss_words(self) -> np.ndarray:
        nxt = self.words[:, _W["NEXT_STEP"]].astype(np.int64)
        return self.words[np.arange(len(self)), _W["LOSS"] + (nxt - 1) % 256].copy()

    @property
    def last_loss(self) -> np.ndarray:
        return self.last_loss_words.view(np.float32)

    @property
    def system_steps_per_second(self) -> float:
        return self.steps * len(self) / self.seconds if self.seconds > 0 else float("inf")

    def page(self, k: int) -> bytes:
        """System ``k``'s final page."""
        return self.pages[k].tobytes()

    def to_records(self) -> list[dict[str, Any]]:
        """One dict per system: its inputs, params (hex words), last loss, digests."""
        lw, lr, base, last = self.lr_words, self.lrs, self.step_base, self.last_loss
        return [
            {
                "system": k,
                "page": int(self.page_index[k]),
                "lr_word": f"{int(lw[k]):08x}",
                "lr": float(lr[k]),
                "step_base": int(base[k]),
                "params": self.params_hex[k],
                "last_loss": float(last[k]),
                "digest": self.digests[k],
                "trace_digest": self.trace_digests[k],
            }
            for k in range(len(self))
        ]

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"steps": self.steps, "mode": "z" if self.z else "ieee", "systems": self.to_records()}
        if self.loss_history is not None:
            doc["loss_steps"] = self.loss_steps.tolist()
            doc["loss_history"] = [[f"{int(w):08x}" for w in row] for row in self.loss_history.view(np.uint32)]
        return doc

    def to_frame(self) -> Any:
        """A pandas DataFrame, one row per system (ImportError without pandas)."""
        import pandas as pd

        frame = pd.DataFrame.from_records(self.to_records())
        p = self.params
        for j, name in enumerate("abcd"):
            frame[name] = p[:, j]
        return frame

    def tobytes(self) -> bytes:
        """The result as bytes (``from_bytes`` reads it back): what MPI ranks send to rank 0."""
        buf = io.BytesIO()
        hist = self.loss_history if self.loss_history is not None else np.zeros((0, 0), dtype=np.float32)
        np.savez(
            buf,
            steps=self.steps,
            z=self.z,
            pages=self.pages,
            page_index=self.page_index,
            lr_index=self.lr_index,
            trace_digests=np.array(self.trace_digests, dtype="U64"),
            has_hist=self.loss_history is not None,
            loss_history=hist,
            loss_steps=self.loss_steps,
            seconds=self.seconds,
            first_call_seconds=self.first_call_seconds,
        )
        return buf.getvalue()

    @classmethod
    def from_bytes(cls, data: bytes) -> SweepResult:
        with np.load(io.BytesIO(data), allow_pickle=False) as f:
            return cls(
                steps=int(f["steps"]),
                z=bool(f["z"]),
                pages=f["pages"],
                page_index=f["page_index"],
                lr_index=f["lr_index"],
                trace_digests=[str(s) for s in f["trace_digests"]],
                loss_history=f["loss_history"] if bool(f["has_hist"]) else None,
                loss_steps=f["loss_steps"],
                seconds=float(f["seconds"]),
                first_call_seconds=float(f["first_call_seconds"]),
            )

    @classmethod
    def concat(cls, parts: Sequence[SweepResult]) -> SweepResult:
        """The parts' systems in order, as one result (the parts of one sweep, same steps)."""
        first = parts[0]
        hist = None if first.loss_history is None else np.concatenate([p.loss_history for p in parts])
        return replace(
            first,
            pages=np.concatenate([p.pages for p in parts]),
            page_index=np.concatenate([p.page_index for p in parts]),
            lr_index=np.concatenate([p.lr_index for p in parts]),
            trace_digests=[d for p in parts for d in p.trace_digests],
            loss_history=hist,
            seconds=max(p.seconds for p in parts),
            first_call_seconds=max(p.first_call_seconds for p in parts),
            digests=[d for p in parts for d in p.digests],
        )


def digests(words: np.ndarray) -> list[str]:
    """SPEC 11's digest of every page of ``[M, 1024]`` words: SHA-256 of PARAMS then LOSS."""
    hashed = np.ascontiguousarray(np.concatenate((words[:, :4], words[:, _LOSS]), axis=1), dtype="<u4")
    return [hashlib.sha256(row).hexdigest() for row in hashed]


class SweepInterrupted(Exception):
    """Ctrl-C during a sweep: ``result`` holds every system after the steps of the finished chunks."""

    def __init__(self, result: SweepResult) -> None:
        super().__init__(f"interrupted after {result.steps} steps")
        self.result = result


def default_threads() -> int:
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def chunk_steps(steps: int, systems: int, trace: bool) -> int:
    """Steps per chunk for a sweep of ``systems`` systems (the same on every MPI rank)."""
    budget = TRACE_CHUNK_SYSTEM_STEPS if trace else CHUNK_SYSTEM_STEPS
    padded = -(-max(systems, 1) // PER_CALL) * PER_CALL
    return max(1, min(steps, budget // padded))


def warm_up(mode: int) -> float:
    """Compile (or load from numba's cache) the sweep loop of ``mode``; the seconds this call took
    (the first call's compile or cache load, microseconds after)."""
    start = time.perf_counter()
    a = sweep_loop.empty_arrays(0, 0, 0)
    tabs = np.zeros((1, sweep_loop.TAB_FLOATS), dtype=np.float32)
    stabs = np.zeros((1, sweep_loop.SHARED_FLOATS), dtype=np.float32)
    sweep_loop.run_groups(
        tabs,
        stabs,
        np.zeros(0, dtype=np.int64),
        a["params"],
        a["hyper"],
        a["ring"],
        a["hist"],
        a["trace"],
        0,
        0,
        0,
        mode,
    )
    return time.perf_counter() - start


class _State:
    """The loop's arrays for a set of systems, in groups of 16 lanes.

    Systems are put in lanes sorted by their sample table (X, Y and ``base mod 8``), so that an
    LR sweep's groups each read one shared table; lane ``i`` holds system ``order[i]``, and the
    lanes past the last system (padding to a multiple of ``PER_CALL``) copy the last lane."""

    def __init__(self, systems: Systems, steps: int, loss_every: int) -> None:
        m = len(systems)
        pad = -(-m // PER_CALL) * PER_CALL
        lanes = sweep_loop.LANES
        z = systems.z
        base8 = (systems.pages[:, _W["NEXT_STEP"]] & 7).astype(np.int64)
        xy = systems.pages[:, _W["X"] : _W["Y"] + 256]
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
        words = systems.pages[lane_sys]
        self.m, self.pad, self.groups = m, pad, pad // lanes
        self.rows = steps // loss_every if loss_every else 0
        a = sweep_loop.empty_arrays(self.groups, self.rows, 0)

        def grouped(per_lane: np.ndarray) -> np.ndarray:  # [lanes of all groups, ...] -> [groups, ..., 16]
            g = per_lane.reshape(-1, lanes, *per_lane.shape[1:])
            return np.ascontiguousarray(np.moveaxis(g, 1, -1)).reshape(g.shape[0], -1)

        read = flush_words if z else (lambda w: w)  # in_word: ftz_from_bits in mode Z
        a["params"][:] = grouped(read(words[:, :4])).view(np.float32)
        a["hyper"][:] = grouped(read(words[:, [_W["LR"], _W["INV_BATCH"]]])).view(np.float32)
        # Sample tables [q][batch][lane], rotated so that slot j holds batch (base + j) mod 8.
        tables: dict[int, np.ndarray] = {}
        for u, row in enumerate(ids):
            page = np.zeros(WORDS, dtype=np.uint32)  # X and Y where a page holds them, for batches()
            page[_W["X"] : _W["X"] + 256] = np.frombuffer(row, dtype=np.uint32, count=256)
            page[_W["Y"] : _W["Y"] + 256] = np.frombuffer(row, dtype=np.uint32, offset=1024)
            tab = kernels.batches(page, z).reshape(4, kernels.BATCHES, kernels.WARP)
            for r in set(base8[which == u].tolist()):
                tables[u * kernels.BATCHES + r] = np.roll(tab, -r, axis=1)
        lane_key = key[lane_sys].reshape(self.groups, lanes)
        shared = (lane_key == lane_key[:, :1]).all(axis=1)
        tab_of = np.empty(self.groups, dtype=np.int64)
        stabs: list[np.ndarray] = []
        ltabs: list[np.ndarray] = []
        shared_index: dict[int, int] = {}
        for g in range(self.groups):
            if shared[g]:  # [slot][lane][q], one value for the group's 16 systems
                k = int(lane_key[g, 0])
                if k not in shared_index:
                    shared_index[k] = len(stabs)
                    stabs.append(tables[k].transpose(1, 2, 0).reshape(-1))
                tab_of[g] = -1 - shared_index[k]
            else:  # [slot][lane][q][system]
                tab_of[g] = len(ltabs)
                per_lane = np.stack([tables[int(k)] for k in lane_key[g]])  # [16, q, slot, lane]
                ltabs.append(np.ascontiguousarray(per_lane.transpose(2, 3, 1, 0)).reshape(-1))
        a["tab_of"] = tab_of
        a["stabs"] = np.stack(stabs) if stabs else np.zeros((1, sweep_loop.SHARED_FLOATS), dtype=np.float32)
        a["tabs"] = np.stack(ltabs) if ltabs else np.zeros((1, sweep_loop.TAB_FLOATS), dtype=np.float32)
        self.arrays = a
        self.loss_every = loss_every

    def per_system(self, lane_major: np.ndarray) -> np.ndarray:
        """``[groups, k, 16]`` lane data -> ``[M, k]`` in system order."""
        per_lane = np.moveaxis(lane_major, 2, 1).reshape(self.pad, -1)
        return per_lane[self.position]

    def ring_words(self) -> np.ndarray:
        """``[M, 256]``: the loss word of relative step r at column r mod 256."""
        return self.per_system(self.arrays["ring"].view(np.uint32).reshape(self.groups, 256, sweep_loop.LANES))

    def params_words(self) -> np.ndarray:
        return self.per_system(self.arrays["params"].view(np.uint32).reshape(self.groups, 4, sweep_loop.LANES))

    def history(self) -> np.ndarray:
        h = self.arrays["hist"].view(np.uint32).reshape(self.groups, self.rows, sweep_loop.LANES)
        return self.per_system(h).view(np.float32)


def _final_pages(systems: Systems, state: _State, done: int) -> np.ndarray:
    """The start pages after ``done`` steps, as the TASKs leave them (SPEC 8; ``loops._tasks``)."""
    out = systems.pages.copy()
    if done == 0:
        return out
    base = systems.step_base
    out[:, :4] = state.params_words()
    ring = state.ring_words()
    js = np.arange(max(0, done - 256), done, dtype=np.int64)  # the run's last 256 steps (or fewer)
    shift = (base & np.uint64(255)).astype(np.int64)
    for s in np.unique(shift):  # LOSS[(base + j) mod 256] = loss of relative step j
        rows = np.flatnonzero(shift == s)
        if js.size == 256:  # the whole ring: a rotation
            out[rows, _LOSS] = np.roll(ring[rows], s, axis=1)
        else:
            out[np.ix_(rows, _W["LOSS"] + (s + js) % 256)] = ring[rows][:, js % 256]
    nxt = base + np.uint64(done)
    out[:, _W["STEP_HI"]] = (nxt >> np.uint64(32)).astype(np.uint32)
    out[:, _W["NEXT_STEP"]] = (nxt & np.uint64(0xFFFFFFFF)).astype(np.uint32)
    out[:, _W["ERR"]] = 0
    out[:, _W["PENDING"]] = 0
    return out


def run(
    systems: Systems,
    steps: int,
    *,
    trace: bool = False,
    loss_every: int | None = None,
    threads: int | None = None,
    chunk: int | None = None,
    on_chunk: Callable[[int], None] | None = None,
    should_stop: Callable[[], bool] | None = None,
    mode: int | None = None,
) -> SweepResult:
    """Run planned systems ``steps`` steps (``chunk`` steps per loop call; default
    :func:`chunk_steps`); ``on_chunk(done)`` after each chunk, ``should_stop()`` before each: a
    stop gives the result of the steps done (``result.steps`` < ``steps``).  ``mode`` forces a
    step-loop mode of :mod:`meshnb.loops` (default: ``loop_mode(z)``; the tests run ``Z`` on x86)."""
    if loss_every is not None and (not is_int(loss_every) or loss_every < 1):
        raise ValueError(f"loss_every must be a positive integer, got {loss_every!r}")
    if threads is not None and (not is_int(threads) or threads < 1):
        raise ValueError(f"threads must be a positive integer, got {threads!r}")
    mode = loops.loop_mode(systems.z) if mode is None else mode
    if (mode == loops.IEEE) == systems.z:
        raise ValueError("the IEEE loop is for z=False, the mode-Z loops for z=True")
    first_call = warm_up(mode)
    every = int(loss_every or 0)
    state = _State(systems, steps, every)
    m, groups = state.m, state.groups
    n_threads = min(
        threads or default_threads(), groups // sweep_loop.BLOCK
    )  # 0 for no systems (an MPI rank's empty share)
    blocks = groups // sweep_loop.BLOCK
    cuts = [sweep_loop.BLOCK * (blocks * i // n_threads) for i in range(n_threads + 1)]
    per_call = chunk or chunk_steps(steps, m, trace)
    hashers = [hashlib.sha256() for _ in range(m)] if trace else []
    a = state.arrays
    trace_buf = np.empty((groups, per_call * sweep_loop.NSUMS * sweep_loop.LANES if trace else 0), dtype=np.float32)
    done = 0
    start = time.perf_counter()
    pool = ThreadPoolExecutor(max_workers=max(n_threads, 1), thread_name_prefix="meshnb-sweep")

    def call(lo: int, hi: int, first: int, count: int) -> None:
        sweep_loop.run_groups(
            a["tabs"],
            a["stabs"],
            a["tab_of"][lo:hi],
            a["params"][lo:hi],
            a["hyper"][lo:hi],
            a["ring"][lo:hi],
            a["hist"][lo:hi],
            trace_buf[lo:hi],
            first,
            count,
            every,
            mode,
        )

    def hash_rows(rows: np.ndarray, lo: int, hi: int) -> None:
        for k in range(lo, hi):
            hashers[k].update(rows[state.position[k]])  # hashlib releases the GIL on large buffers

    try:
        while done < steps and not (should_stop is not None and should_stop()):
            n = min(per_call, steps - done)
            for f in [pool.submit(call, cuts[i], cuts[i + 1], done, n) for i in range(n_threads)]:
                f.result()
            if trace and m:  # [groups][n][5][16] -> per system [n][5], contiguous
                t = trace_buf[:, : n * sweep_loop.NSUMS * sweep_loop.LANES].view(np.uint32)
                t = t.reshape(groups, n * sweep_loop.NSUMS, sweep_loop.LANES)
                rows = np.ascontiguousarray(np.moveaxis(t, 2, 1)).reshape(state.pad, -1)
                parts = [(m * i // n_threads, m * (i + 1) // n_threads) for i in range(n_threads)]
                for f in [pool.submit(hash_rows, rows, lo, hi) for lo, hi in parts]:
                    f.result()
            done += n
            if on_chunk is not None:
                on_chunk(done)
    finally:
        pool.shutdown()  # the run's own threads: nothing outlives it
    seconds = time.perf_counter() - start
    every_rows = done // every if every else 0
    return SweepResult(
        steps=done,
        z=systems.z,
        pages=_final_pages(systems, state, done).view(np.uint8),
        page_index=systems.page_index.copy(),
        lr_index=systems.lr_index.copy(),
        trace_digests=[h.hexdigest() for h in hashers] if trace else [""] * m,
        loss_history=state.history()[:, :every_rows] if every else None,
        loss_steps=np.arange(every - 1, every_rows * every, every or 1, dtype=np.int64)
        if every
        else np.zeros(0, np.int64),
        seconds=seconds,
        first_call_seconds=first_call,
    )


def sweep(
    steps: int,
    *,
    lrs: Any = None,
    pages: Any = None,
    step_bases: Any = None,
    z: bool = True,
    trace: bool = False,
    loss_every: int | None = None,
    threads: int | None = None,
    progress: bool = False,
) -> SweepResult:
    """Run M independent systems ``steps`` steps each; returns a :class:`SweepResult`.

    ``lrs``: learning rates (floats, rounded to float32; a uint32 array gives the f32 words), one
    system each, set with SET_LR before the first step.  ``pages``: start pages (4096-byte
    bytes-likes, or a ``[P, 4096]`` uint8 / ``[P, 1024]`` uint32 array; default the init page),
    one system each; with both, one system per (page, LR) pair, page-major.  ``step_bases``: one
    integer, or one per system: the page's next step before the run (as ``train``'s
    ``step_base``).  System k is bit-equal to ``meshnb.train(steps, view_in=page,
    set_lr={0: word}, step_base=base, z=z)``.  ``trace`` computes each system's trace digest,
    ``loss_every`` keeps the loss of every ``loss_every``-th step (``result.loss_history``),
    ``threads`` sets the threads (default: the usable cores), ``progress`` shows a bar on stderr.

    Raises ValueError for bad arguments and :class:`SweepInterrupted` on Ctrl-C (with the
    result of the finished chunks)."""
    systems = plan(steps, lrs=lrs, pages=pages, step_bases=step_bases, z=z)
    if loss_every is not None and (not is_int(loss_every) or loss_every < 1):
        raise ValueError(f"loss_every must be a positive integer, got {loss_every!r}")
    if threads is not None and (not is_int(threads) or threads < 1):
        raise ValueError(f"threads must be a positive integer, got {threads!r}")
    bar = progress_bar(steps, progress, f"sweep of {len(systems)}")
    last = 0

    def on_chunk(done: int) -> None:
        nonlocal last
        if bar is not None:
            bar.update(done - last)
        last = done

    try:
        with deferred_interrupt() as requested:
            result = run(
                systems,
                steps,
                trace=trace,
                loss_every=loss_every,
                threads=threads,
                on_chunk=on_chunk,
                should_stop=requested,
            )
    finally:
        if bar is not None:
            bar.close()
    if result.steps < steps:
        raise SweepInterrupted(result)
    return result
