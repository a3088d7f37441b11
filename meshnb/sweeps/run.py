"""Running a sweep: batches of systems on a pool of threads, in chunks of steps; the public
:func:`sweep` (an in-memory result) and :func:`stream` (parts as their batches finish).

A sweep runs in batches of :data:`BATCH_SYSTEMS` systems, one after the other, each batch in
chunks of steps (so progress and Ctrl-C stay live), a chunk being one loop call per thread on its
slice of groups.  Systems share nothing, so the bits depend on neither the split nor the batch.
Every caller runs the batches through one loop, :func:`parts`; on Ctrl-C a run stops at the end
of the chunk in flight, keeps what :func:`kept` says and ends through :func:`interrupted`."""

from __future__ import annotations

import hashlib
import time
import warnings
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import numpy as np

from .. import cpu, loops
from ..driver import Steps, chunks_of, drive
from ..host import steps_shown
from ..interrupts import WorkerPool, phase
from ..loops import sweep as sweep_loop
from ..runspec import OptionError, check_int
from ..view import WORD
from .finish import TraceHashes, result_of_lanes
from .lanes import Lanes, final_pages
from .plan import (
    LRs,
    Pages,
    Run,
    StepBases,
    SweepOptions,
    check_backend,
    check_backend_options,
    check_fits,
    check_options,
    result_bytes,
)
from .result import SweepResult, digest_of

CHUNK_SYSTEM_STEPS = 1 << 24  # system-steps per chunk: ~0.1 s on 2 cores, so Ctrl-C and progress stay live
TRACE_CHUNK_SYSTEM_STEPS = 1 << 20  # with a trace: 20 MiB of trace words per chunk
BATCH_SYSTEMS = 1 << 14
"""Systems per batch: 16 MiB of loss rings, 64 MiB of final pages while a batch ends."""


class SweepInterrupted(Exception):
    """Ctrl-C during a sweep.

    Parameters
    ----------
    result : SweepResult
        The systems of the finished batches, or, when the first batch was in flight, that batch
        after the steps of its finished chunks (each bit-equal to ``train`` of that many steps).

    Examples
    --------
    >>> import meshnb
    >>> e = SweepInterrupted(meshnb.sweep(64, lrs=[0.5, 0.25]))
    >>> str(e), len(e.result)
    ('interrupted: 2 systems after 64 steps', 2)
    """

    def __init__(self, result: SweepResult) -> None:
        super().__init__(f"interrupted: {len(result)} systems after {result.steps} steps")
        self.result = result


def default_threads() -> int:
    """The cores this process may run on (a sweep's default ``threads``, at least 1)."""
    return cpu.usable_cpus()


def chunk_steps(steps: int, systems: int, trace: bool, shape: sweep_loop.Shape | None = None) -> int:
    """Steps per loop call for a batch of ``systems`` (alike on every MPI rank): 1 to ``steps``, shorter with a trace.

    >>> chunk_steps(10, 1024, trace=False)
    10
    """
    sh = shape or sweep_loop.shape()
    budget = TRACE_CHUNK_SYSTEM_STEPS if trace else CHUNK_SYSTEM_STEPS
    per_call = sh.lanes * sh.block
    padded = -(-max(systems, 1) // per_call) * per_call
    return max(1, min(steps, budget // padded))


def warm_up(mode: int, shape: sweep_loop.Shape | None = None) -> float:
    """Compile (or load from numba's cache) the sweep loop of ``mode`` and ``shape``; the seconds it took."""
    sh = shape or sweep_loop.shape()
    start = time.perf_counter()
    a = sweep_loop.empty_arrays(0, 0, 0, sh.lanes)
    tabs = np.zeros((1, sweep_loop.tab_floats(sh.lanes)), dtype=np.float32)
    stabs = np.zeros((1, sweep_loop.SHARED_FLOATS), dtype=np.float32)
    sweep_loop.run_groups(
        tabs, stabs, np.zeros(0, np.int64), a["params"], a["hyper"], a["ring"], a["hist"], a["trace"], 0, 0, 0, mode, sh
    )
    return time.perf_counter() - start


def spans(m: int, batch: int) -> list[tuple[int, int]]:
    """Systems ``0 .. m-1`` in batches of ``batch``: ``[(lo, hi), ...]``."""
    return [(lo, min(m, lo + batch)) for lo in range(0, m, batch)]


class Runner:
    """Runs batches of one planned sweep on its own thread pool (a context manager); options as ``sweep``'s."""

    def __init__(
        self,
        systems: Run,
        *,
        trace: bool = False,
        loss_every: int | None = None,
        threads: int | None = None,
        chunk: int | None = None,
        mode: int | None = None,
        shape: sweep_loop.Shape | None = None,
        keep_pages: bool = False,
        batch: int = BATCH_SYSTEMS,
    ) -> None:
        check_options(loss_every, threads, trace=trace, keep_pages=keep_pages)
        self.mode = loops.loop_mode(systems.z) if mode is None else mode
        if (self.mode == loops.IEEE) == systems.z:
            raise ValueError("the IEEE loop is for z=False, the mode-Z loops for z=True")
        self.threads = threads or default_threads()
        # one shape for every size of sweep: a group is one vector register (16 or 8 systems), so
        # a small sweep already leaves each thread a group (narrower shapes would be a compile each)
        self.shape = shape or sweep_loop.shape()
        self.systems, self.steps, self.trace, self.every = systems, systems.steps, trace, int(loss_every or 0)
        self.keep_pages, self.batch = keep_pages, batch
        self.spare: Lanes | None = None
        self.trace_buf = np.empty((0, 0), dtype=np.float32)  # a chunk's trace sums, kept for the next batch
        self.chunk = chunk or chunk_steps(self.steps, min(batch, len(systems)), trace, self.shape)
        self.first_call = warm_up(self.mode, self.shape)
        self.pool = WorkerPool(max_workers=self.threads, thread_name_prefix="meshnb-sweep")

    def __enter__(self) -> Runner:
        return self

    def __exit__(self, *exc: object) -> None:
        self.pool.shutdown()  # the run's own threads: nothing outlives it

    def run(
        self,
        lo: int,
        hi: int,
        on_chunk: Callable[[int], None] | None = None,
        should_stop: Callable[[], bool] | None = None,
    ) -> SweepResult:
        """Systems ``lo .. hi-1``, every step (fewer on ``should_stop()``); ``on_chunk(done)`` after each."""
        sh, steps, every, trace = self.shape, self.steps, self.every, self.trace
        lanes = Lanes.of_systems(self.systems, lo, hi, steps, every, sh, self.spare)  # no page per system
        self.spare = lanes  # the next batch's loop arrays (one batch's memory, no fresh pages to fault in), table
        m, groups = lanes.m, lanes.groups
        n_threads = min(self.threads, groups // sh.block)  # 0 for no systems (an MPI rank's empty share)
        blocks = groups // sh.block
        cuts = [sh.block * (blocks * i // n_threads) for i in range(n_threads + 1)] if n_threads else [0]
        per_call = self.chunk
        lanes_trace = TraceHashes(groups) if trace and TraceHashes.fits(lanes) else None
        hashers = [hashlib.sha256() for _ in range(m)] if trace and lanes_trace is None else []
        a = lanes.arrays
        width = per_call * sweep_loop.NSUMS * sh.lanes if trace else 0
        if self.trace_buf.shape != (groups, width):  # a fresh 20 MiB buffer a batch: a page fault per 4 KiB
            self.trace_buf = np.empty((groups, width), dtype=np.float32)
        trace_buf = self.trace_buf

        def call(g0: int, g1: int, first: int, count: int) -> None:
            sweep_loop.run_groups(
                a["tabs"], a["stabs"], a["tab_of"][g0:g1], a["params"][g0:g1], a["hyper"][g0:g1], a["ring"][g0:g1],
                a["hist"][g0:g1], trace_buf[g0:g1], first, count, every, self.mode, sh,
            )  # fmt: skip

        def hash_rows(rows: np.ndarray, k0: int, k1: int) -> None:
            for k in range(k0, k1):
                hashers[k].update(rows[lanes.position[k]])  # hashlib releases the GIL on large buffers

        def advance(done: int, n: int) -> None:
            """The engine: ``n`` steps of every system of the batch, on the pool's threads."""
            for f in [self.pool.submit(call, cuts[i], cuts[i + 1], done, n) for i in range(n_threads)]:
                f.result()
            if lanes_trace is not None:
                lanes_trace.update(trace_buf, n, self.pool, cuts)
            elif trace and m:
                rows = lanes.trace_rows(trace_buf, n)
                parts = [(m * i // n_threads, m * (i + 1) // n_threads) for i in range(n_threads)]
                for f in [self.pool.submit(hash_rows, rows, k0, k1) for k0, k1 in parts]:
                    f.result()

        start = time.perf_counter()
        done = drive(Steps(advance), steps, chunks_of(per_call), after=on_chunk, should_stop=should_stop)
        seconds = time.perf_counter() - start
        hist_rows = done // every if every else 0
        trace_digests = None
        if lanes_trace is not None:
            trace_digests = lanes_trace.digests(lanes.order, m, self.pool, cuts)
        elif trace:
            trace_digests = np.frombuffer(b"".join(h.digest() for h in hashers), np.uint8).reshape(m, 32).copy()
        extra: dict[str, Any] = dict(
            trace_digest_bytes=trace_digests,
            loss_history=lanes.history(hist_rows) if every else None,
            loss_steps=np.arange(every - 1, hist_rows * every, every or 1, dtype=np.int64) if every else None,
            seconds=seconds, first_call_seconds=self.first_call, shape=str(sh),
        )  # fmt: skip
        if done and not self.keep_pages:  # params, last loss and digests from the loop's arrays
            if extra["loss_steps"] is None:
                del extra["loss_steps"]
            return result_of_lanes(self.systems, lo, lanes, done, self.pool, max(n_threads, 1), **extra)
        words = self.systems.words(lo, hi)
        pages = final_pages(words, self.systems.step_base(lo, hi), lanes, done)
        del words
        return result_of_pages(self.systems, lo, pages, done, keep_pages=self.keep_pages, **extra)


def result_of_pages(
    systems: Run,
    lo: int,
    pages: np.ndarray,
    done: int,
    *,
    trace_digest_bytes: np.ndarray | None = None,
    loss_history: np.ndarray | None = None,
    loss_steps: np.ndarray | None = None,
    keep_pages: bool = False,
    seconds: float = 0.0,
    first_call_seconds: float = 0.0,
    shape: str = "",
) -> SweepResult:
    """The result of systems ``lo ..`` from their final pages ``[n, 1024]`` after ``done`` steps."""
    n = pages.shape[0]
    nxt = pages[:, WORD["NEXT_STEP"]].astype(np.int64)
    return SweepResult(
        steps=done,
        z=systems.z,
        page_index=systems.page_index(lo, lo + n),
        lr_index=systems.lr_index(lo, lo + n),
        lr_words=pages[:, WORD["LR"]].copy(),
        step_base=systems.step_base(lo, lo + n),
        params_words=pages[:, :4].copy(),
        last_loss_words=pages[np.arange(n), WORD["LOSS"] + (nxt - 1) % 256].copy(),
        digest_bytes=digest_of(pages),
        trace_digest_bytes=trace_digest_bytes,
        loss_history=loss_history,
        loss_steps=np.zeros(0, np.int64) if loss_steps is None else loss_steps,
        final_pages=pages.view(np.uint8).copy() if keep_pages else None,
        starts=systems.starts,
        first=lo,
        seconds=seconds,
        first_call_seconds=first_call_seconds,
        shape=shape,
    )


CUDA_BATCH = 1 << 17  # systems per device run (512 MiB of pages): a GPU's worth, memory bounded


class CudaRunner:
    """Batches of a sweep's systems on the CUDA image, as :class:`Runner` runs them on the CPU."""

    def __init__(self, systems: Run, *, trace: bool = False, keep_pages: bool = False, batch: int = CUDA_BATCH) -> None:
        self.systems, self.trace, self.keep_pages, self.batch = systems, trace, keep_pages, batch
        self.steps = systems.steps

    def __enter__(self) -> CudaRunner:
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def run(
        self, lo: int, hi: int, on_chunk: Callable[[int], None] | None = None,
        should_stop: Callable[[], bool] | None = None,
    ) -> SweepResult:  # fmt: skip
        """Systems ``lo .. hi-1`` on the device (:func:`run_on_cuda`), bit-equal to the CPU's."""
        return run_on_cuda(
            self.systems, lo, hi, trace=self.trace, keep_pages=self.keep_pages, on_chunk=on_chunk,
            should_stop=should_stop,
        )  # fmt: skip


def make_runner(
    systems: Run,
    *,
    backend: str = "cpu",
    trace: bool = False,
    loss_every: int | None = None,
    threads: int | None = None,
    chunk: int | None = None,
    mode: int | None = None,
    shape: sweep_loop.Shape | None = None,
    keep_pages: bool = False,
    batch: int | None = None,
) -> Runner | CudaRunner:
    """A :class:`Runner` (``"cpu"``) or a :class:`CudaRunner` (``"cuda"``: ``trace`` and ``keep_pages`` only)."""
    check_options(loss_every, threads, trace=trace, keep_pages=keep_pages)
    check_backend_options(backend, loss_every, threads)
    if backend == "cuda":
        if mode is not None or shape is not None:
            raise OptionError("backend='cuda' runs the CUDA image: no CPU loop mode or shape")
        return CudaRunner(systems, trace=trace, keep_pages=keep_pages, batch=batch or CUDA_BATCH)
    return Runner(
        systems, trace=trace, loss_every=loss_every, threads=threads, chunk=chunk, mode=mode, shape=shape,
        keep_pages=keep_pages, batch=batch or BATCH_SYSTEMS,
    )  # fmt: skip


def run_on_cuda(
    systems: Run, lo: int, hi: int, *, trace: bool = False, keep_pages: bool = False,
    on_chunk: Callable[[int], None] | None = None, should_stop: Callable[[], bool] | None = None,
) -> SweepResult:  # fmt: skip
    """Systems ``lo .. hi-1`` of a sweep on the CUDA image, one warp per system, the same bits."""
    from ..cuda import host

    got = host.run_systems(systems, lo, hi, trace=trace, on_chunk=on_chunk, should_stop=should_stop)
    digests = np.frombuffer(b"".join(bytes.fromhex(d) for d in got.trace_digests), np.uint8) if trace else None
    return result_of_pages(
        systems, lo, got.pages, got.steps,
        trace_digest_bytes=digests.reshape(-1, 32).copy() if digests is not None else None,
        keep_pages=keep_pages, seconds=got.seconds, shape="cuda: one warp per system",
    )  # fmt: skip


def parts(
    runner: Runner | CudaRunner,
    batches: Iterable[tuple[int, int]],
    on_progress: Callable[[int], None] | None = None,
    should_stop: Callable[[], bool] | None = None,
    *,
    weight: int | None = None,
    total: int | None = None,
) -> Iterator[SweepResult]:
    """The one loop over a sweep's batches: yields each batch's result, after a stop the batch in flight, then ends."""
    so_far = 0
    for lo, hi in batches:
        last, per_step = 0, (hi - lo) if weight is None else weight

        def on_chunk(done: int, per_step: int = per_step) -> None:
            nonlocal last, so_far
            so_far += (done - last) * per_step
            last = done
            if on_progress is not None:
                on_progress(so_far if total is None else min(total, so_far))

        part = runner.run(lo, hi, on_chunk, should_stop)
        yield part
        if part.steps < runner.steps:
            return


def kept(index: int, part: SweepResult, steps: int) -> bool:
    """Whether a sweep keeps its ``index``-th part: a finished batch, or a stopped one that is the first."""
    return part.steps >= steps or index == 0


def interrupted(result: SweepResult, steps: int, m: int, stopped: bool = False) -> SweepResult:
    """``result`` when its ``m`` systems ran every step and no stop was asked, else :class:`SweepInterrupted`."""
    if stopped or result.steps < steps or len(result) < m:
        raise SweepInterrupted(result)
    return result


def _aliases(view_in: Any, pages: Any, step_base: Any, step_bases: Any) -> tuple[Any, Any]:
    """The deprecated spellings ``pages=`` and ``step_bases=``."""
    if pages is not None:
        if view_in is not None:
            raise TypeError("give view_in or its old name pages, not both")
        warnings.warn("sweep(pages=...) is now view_in=... (as train)", DeprecationWarning, stacklevel=3)
        view_in = pages
    if step_bases is not None:
        if step_base is not None:
            raise TypeError("give step_base or its old name step_bases, not both")
        warnings.warn("sweep(step_bases=...) is now step_base=... (as train)", DeprecationWarning, stacklevel=3)
        step_base = step_bases
    return view_in, step_base


def run_planned(
    systems: Run,
    *,
    trace: bool = False,
    loss_every: int | None = None,
    threads: int | None = None,
    chunk: int | None = None,
    on_chunk: Callable[[int], None] | None = None,
    should_stop: Callable[[], bool] | None = None,
    mode: int | None = None,
    shape: sweep_loop.Shape | None = None,
    keep_pages: bool = False,
    batch: int | None = None,
    backend: str = "cpu",
) -> SweepResult:
    """Run planned systems on ``backend``, in memory; ``on_chunk(system-steps)`` after a chunk, ``should_stop()``."""
    with make_runner(
        systems, backend=backend, trace=trace, loss_every=loss_every, threads=threads, chunk=chunk, mode=mode,
        shape=shape, keep_pages=keep_pages, batch=batch,
    ) as runner:  # fmt: skip
        got = [
            p
            for k, p in enumerate(parts(runner, spans(len(systems), runner.batch), on_chunk, should_stop))
            if kept(k, p, systems.steps)
        ]
        if not got:
            got = [runner.run(0, 0)]
    return SweepResult.concat(got)


def sweep(
    steps: int,
    *,
    lrs: LRs | None = None,
    view_in: Pages | None = None,
    step_base: StepBases | None = None,
    z: bool = True,
    trace: bool = False,
    loss_every: int | None = None,
    threads: int | None = None,
    keep_pages: bool = False,
    progress: bool = False,
    backend: str | None = None,
    device: str | None = None,
    pages: Pages | None = None,
    step_bases: StepBases | None = None,
) -> SweepResult:
    """Run M independent systems ``steps`` steps each and return them in memory.

    System k is bit-equal to ``meshnb.train(steps, view_in=page, set_lr={0: lr}, step_base=base,
    z=z)``: the same params, loss, digest and trace digest.

    Parameters
    ----------
    steps : int
        Steps of every system, 0 to 2^63 - 1.
    lrs : sequence of float, or uint32 array, optional
        Learning rates, one system each, set with SET_LR before the first step: numbers are
        rounded to float32, a ``np.uint32`` array (or ``"0x..."`` text) gives the words themselves,
        as ``train``'s ``set_lr``.  Default: each page's own LR.
    view_in : bytes, path, sequence of bytes, or array, optional
        Start pages: a page (or a page file's path), a sequence of them, or a ``[P, 4096]`` uint8 /
        ``[P, 1024]`` uint32 array; default the init page.  With ``lrs`` too, one system per (page,
        LR) pair, page-major: system ``p * len(lrs) + l``.
    step_base : int or sequence of int, optional
        The first step (0 to 2^64 - 2) of every system, or one per system.
    z : bool
        Float mode Z (default); False runs plain IEEE float32.
    trace : bool
        Compute each system's trace digest.
    loss_every : int, optional
        Keep the loss of every ``loss_every``-th step (``result.loss_history``).
    threads : int, optional
        CPU threads (default: the usable cores).
    keep_pages : bool
        Keep every final page (4 KiB a system); without it ``result.page(k)`` runs system k again.
    progress : bool
        A progress bar on stderr.
    backend : {"cpu", "cuda"}, optional
        The CPU (default) or the CUDA image, one warp per system (the same bits; no
        ``loss_every`` or ``threads`` there).
    device, pages, step_bases
        Deprecated names of ``backend``, ``view_in`` and ``step_base`` (a DeprecationWarning).

    Returns
    -------
    SweepResult
        Every system's inputs, params, last loss and digests.

    Raises
    ------
    OptionError
        A bad value, one line naming the argument; also when the result would not fit in memory
        (use :func:`stream` or ``meshnb sweep --csv``).
    TypeError
        A wrong type (``sweep("10")``).
    SweepInterrupted
        Ctrl-C; ``.result`` holds the systems finished.

    Examples
    --------
    >>> import meshnb
    >>> r = meshnb.sweep(10, lrs=[0.5, 0.25])
    >>> len(r), r.steps
    (2, 10)
    >>> r.digests[1] == meshnb.train(10, set_lr={0: 0.25}).digest
    True
    >>> meshnb.sweep(-1)
    Traceback (most recent call last):
        ...
    meshnb.runspec.OptionError: steps must be an integer from 0 to 9223372036854775807, got -1
    """
    view_in, step_base = _aliases(view_in, pages, step_base, step_bases)
    backend = check_backend(backend, device)
    opts = SweepOptions(
        steps=steps, lrs=lrs, view_in=view_in, step_base=step_base, z=z, trace=trace, loss_every=loss_every,
        threads=threads, keep_pages=keep_pages, progress=progress, backend=backend,
    )  # fmt: skip
    systems = opts.describe()
    steps = systems.steps
    need = result_bytes(len(systems), steps, trace=trace, loss_every=loss_every, keep_pages=keep_pages)
    check_fits(need, f"an in-memory sweep of {len(systems)} systems", "stream it (meshnb.sweeps.stream, --csv)")
    result, stopped = None, False
    try:
        with steps_shown(len(systems) * steps, progress, f"sweep of {len(systems)}") as (show, requested):
            result = run_planned(
                systems, trace=trace, loss_every=loss_every, threads=threads, keep_pages=keep_pages,
                on_chunk=show, should_stop=requested, backend=backend,
            )  # fmt: skip
            phase("sweep-ran")  # test hook: every step ran; a Ctrl-C held since the last boundary comes now
            # a Ctrl-C in the last chunk, asked for here: handed on at the exit it would be lost where the
            # caller's handler ignores SIGINT (a shell's background job) or only remembers it (a held flag)
            stopped = requested()
    except KeyboardInterrupt:
        if result is None:
            raise
        stopped = True  # a Ctrl-C in the last chunk (or just after the ask): every system is finished, none lost
    return interrupted(result, steps, len(systems), stopped)


def stream(
    steps: int,
    *,
    lrs: LRs | None = None,
    view_in: Pages | None = None,
    step_base: StepBases | None = None,
    z: bool = True,
    trace: bool = False,
    loss_every: int | None = None,
    threads: int | None = None,
    keep_pages: bool = False,
    progress: bool = False,
    backend: str | None = None,
    batch: int | None = None,
) -> Iterator[SweepResult]:
    """The sweep of :func:`sweep`'s arguments as parts, one per batch of ``batch`` systems, in order.

    A sweep of any size runs in the memory of one batch; the arguments are checked when ``stream``
    is called.

    Parameters
    ----------
    steps, lrs, view_in, step_base, z, trace, loss_every, threads, keep_pages, progress, backend
        As :func:`sweep`'s.
    batch : int, optional
        Systems per part (default the backend's).

    Yields
    ------
    SweepResult
        The parts in order (``part.first`` is its first system's index).

    Raises
    ------
    SweepInterrupted
        Ctrl-C, after the finished parts; ``.result`` is the batch in flight after its finished chunks.

    Examples
    --------
    >>> from meshnb.sweeps import stream
    >>> [(p.first, len(p)) for p in stream(5, lrs=[0.5, 0.25, 0.125], batch=2)]
    [(0, 2), (2, 1)]
    """
    opts = SweepOptions(
        steps=steps, lrs=lrs, view_in=view_in, step_base=step_base, z=z, trace=trace, loss_every=loss_every,
        threads=threads, keep_pages=keep_pages, progress=progress, backend=backend,
    )  # fmt: skip
    systems = opts.describe()
    if batch is not None:
        batch = check_int(batch, "batch", 1, 1 << 62)

    def runner() -> Runner | CudaRunner:  # made when the first part is asked for: its threads, its compile
        backend = opts.backend or "cpu"
        return make_runner(
            systems, backend=backend, trace=trace, loss_every=loss_every, threads=threads, keep_pages=keep_pages,
            batch=batch,
        )  # fmt: skip

    return _stream(runner, systems, progress)


def _stream(make: Callable[[], Runner | CudaRunner], systems: Run, progress: bool) -> Iterator[SweepResult]:
    m, steps = len(systems), systems.steps
    with steps_shown(m * steps, progress, f"sweep of {m}") as (show, requested), make() as runner:
        for part in parts(runner, spans(m, runner.batch), show, should_stop=requested):
            yield interrupted(part, steps, len(part))  # a stopped part: the batch in flight, raised
