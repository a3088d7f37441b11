"""The host side of the CUDA image: pages to the device, launches, pages and trace digests back.

:func:`run_systems` runs M independent systems (a grid of warps, what ``meshnb.sweep(...,
device="cuda")`` calls); :func:`run_cluster` runs the steps of one fused cluster of N systems (N
warps of one block, the fold through shared memory: the ``cuda`` backend).  Pages are the CPU's
``[M, 1024]`` uint32 words in and out; a launch runs whole TASKs on the device.

Without numba-cuda, or with no device outside the simulator, :func:`require` raises
:class:`CudaUnavailable` (a ``RuntimeError``) with one line that says what is missing.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import numpy as np

from .. import runspec
from ..backend_table import CUDA_BLOCK_SYSTEMS
from ..driver import Steps, chunks_of, drive
from ..kernels import NSUMS, WARP
from ..view import PAGE_WORDS, WORD

MAX_BLOCK_WARPS = CUDA_BLOCK_SYSTEMS  # 1024 threads: the largest cluster a block holds
TRACE_WORDS_PER_CHUNK = 1 << 26  # 256 MiB of trace words per launch at most


class CudaUnavailable(RuntimeError, ValueError):
    """The CUDA image cannot run here: numba-cuda is missing, or there is no device (outside the
    simulator).  Its message is one line.  A RuntimeError, and a ValueError so that the commands
    treat it as the bad input it is for them (``--backend cuda`` on a machine without one: exit 2)."""


def numba_cuda() -> Any:
    """``numba.cuda`` (numba-cuda's, untyped for mypy)."""
    return importlib.import_module("numba.cuda")


def simulated() -> bool:
    """Whether numba-cuda's simulator is on (``NUMBA_ENABLE_CUDASIM=1``: kernels run on the CPU)."""
    return os.environ.get("NUMBA_ENABLE_CUDASIM", "0") not in ("", "0")


def require() -> ModuleType:
    """The kernels module (:mod:`meshnb.cuda.image`), once numba-cuda and a device (or the
    simulator) are known to be there; :class:`CudaUnavailable` otherwise."""
    if importlib.util.find_spec("numba_cuda") is None:
        raise CudaUnavailable("the CUDA image needs numba-cuda: pip install 'meshnb[cuda]'")
    if not simulated() and not numba_cuda().is_available():
        raise CudaUnavailable("no CUDA device found (NUMBA_ENABLE_CUDASIM=1 runs the image in numba-cuda's simulator)")
    from . import image

    return image


def device_name() -> str:
    """The device the image runs on, in words (``simulator`` in the simulator)."""
    require()
    if simulated():
        return "numba-cuda simulator (CPU)"
    dev = numba_cuda().get_current_device()
    name = dev.name.decode() if isinstance(dev.name, bytes) else str(dev.name)
    return f"{name} (sm_{dev.compute_capability[0]}{dev.compute_capability[1]})"


def _launch(image: ModuleType, d_pages: Any, count: int, n: int, per_block: int, record: bool, z: bool) -> Any:
    """One launch of ``count`` steps over every row of ``d_pages``; the trace's device array, or None."""
    cuda = numba_cuda()
    rows = d_pages.shape[0]
    warps = n * per_block
    d_trace = cuda.device_array((rows, count, NSUMS) if record and count else (1, 1, NSUMS), dtype=np.uint32)
    image.steps_kernel[rows // warps, WARP * warps](d_pages, count, n, d_trace, record and count > 0, z)
    return d_trace if record and count else None


@dataclass(frozen=True)
class SystemsResult:
    """M systems after :func:`run_systems`: ``steps`` (the steps done: fewer than asked after a
    stop), ``pages`` ``[M, 1024]`` uint32 (the final pages, the CPU's format), ``last_loss_words``
    ``[M]`` uint32 (each system's last step's loss, read from its page), ``trace_digests`` (SPEC 11;
    empty strings without ``trace=True``), ``seconds`` (the launches and copies, without the first
    compile)."""

    steps: int
    pages: np.ndarray
    last_loss_words: np.ndarray
    trace_digests: list[str]
    seconds: float


def run_systems(
    pages: np.ndarray,
    lr_words: np.ndarray | None,
    step_bases: int | np.ndarray | None,
    steps: int,
    z: bool = True,
    *,
    trace: bool = False,
    chunk: int | None = None,
    per_block: int | None = None,
    on_chunk: Callable[[int], None] | None = None,
    should_stop: Callable[[], bool] | None = None,
) -> SystemsResult:
    """Run M independent systems ``steps`` steps each on the device, one warp per system.

    ``pages`` ``[M, 1024]`` uint32 (start pages, not modified); ``lr_words`` ``[M]`` uint32 or
    None: each system's SET_LR before its first step (``ftz_from_bits`` in mode Z, as SET_LR);
    ``step_bases`` one integer, ``[M]`` integers or None: the next step before the run.  System k
    ends bit-equal to ``meshnb.train(steps, view_in=pages[k], set_lr={0: lr_words[k]},
    step_base=step_bases[k], z=z)``: pages, last loss, and with ``trace=True`` the trace digest
    (the trace words come back per launch and are hashed on the host).  ``chunk`` steps per launch
    (default all, or what keeps a launch's trace under 256 MiB): launches cut tasks, which changes
    no bits.  ``per_block`` systems per block (default 4; 1 in the simulator).  ``on_chunk(done)``
    is called after each launch and ``should_stop()`` before each (as :func:`meshnb.sweeps.run`):
    a stop gives the result of the steps done (``result.steps``), every system as ``train`` would
    leave it after that many steps.  ``steps = 0`` runs nothing (as ``train(0)``).

    Raises TypeError/:class:`~meshnb.runspec.OptionError` (:mod:`meshnb.runspec`'s rules) for bad
    arguments, :class:`CudaUnavailable` without numba-cuda or a device."""
    image = require()
    p = np.array(pages, dtype=np.uint32, copy=True)
    if p.ndim != 2 or p.shape[1] != PAGE_WORDS or p.shape[0] == 0:
        raise runspec.OptionError(f"pages must be [M, {PAGE_WORDS}] uint32 with M >= 1, got shape {p.shape}")
    m = p.shape[0]
    steps = runspec.check_steps(steps)
    if lr_words is not None:
        lw = np.asarray(lr_words)
        if lw.dtype != np.uint32 or lw.shape != (m,):
            raise runspec.OptionError(f"lr_words must be [{m}] uint32, got {lw.dtype} {lw.shape}")
        runspec.write_lr(p, lw, z)
    if step_bases is not None:
        runspec.write_step_base(p, runspec.step_bases(step_bases, m, "step_bases"))
    runspec.check_words_can_run(p, steps)
    per_block = per_block or (1 if simulated() else 4)
    if not 1 <= per_block <= MAX_BLOCK_WARPS:
        raise runspec.OptionError(f"per_block must be 1 to {MAX_BLOCK_WARPS}, got {per_block}")
    pad = -m % per_block  # whole blocks: the padding rows are copies of page 0, dropped after
    rows = np.concatenate([p, np.repeat(p[:1], pad, axis=0)]) if pad else p
    most = max(1, TRACE_WORDS_PER_CHUNK // (rows.shape[0] * NSUMS)) if trace else max(steps, 1)
    per_call = max(1, min(chunk or most, most))
    cuda = numba_cuda()
    hashers = [hashlib.sha256() for _ in range(m)] if trace else []
    start = time.perf_counter()
    d_pages = cuda.to_device(rows)

    def advance(done: int, n: int) -> None:
        """The engine: a launch of ``n`` steps of every system; its trace words hashed here."""
        d_trace = _launch(image, d_pages, n, 1, per_block, trace, z)
        if d_trace is not None:
            t_host = d_trace.copy_to_host()
            for k in range(m):
                hashers[k].update(t_host[k].tobytes())

    done = drive(Steps(advance), steps, chunks_of(per_call), after=on_chunk, should_stop=should_stop)
    out = d_pages.copy_to_host()[:m]
    seconds = time.perf_counter() - start
    nxt = out[:, WORD["NEXT_STEP"]].astype(np.int64)
    last = out[np.arange(m), WORD["LOSS"] + (nxt - 1) % 256].copy()
    return SystemsResult(done, out, last, [h.hexdigest() for h in hashers] if trace else [""] * m, seconds)


def run_cluster(pages: np.ndarray, count: int, trace: np.ndarray, z: bool = True) -> None:
    """``count`` steps of one fused cluster of N systems (``pages`` ``[N, 1024]`` uint32, updated in
    place; every member at the same step with the same STEPS_PER_TASK) on the device, N warps of
    one block, the fold in system order through shared memory; ``trace`` (``[count, 5]`` uint32,
    or no rows) receives the fold each step applied.  The same effects as
    :func:`meshnb.loops.run_fused` (``N = 1``: :func:`meshnb.loops.run_tasks`)."""
    image = require()
    n = pages.shape[0]
    if not 1 <= n <= MAX_BLOCK_WARPS:
        raise runspec.OptionError(
            f"the cuda backend runs clusters of 1 to {MAX_BLOCK_WARPS} systems (one block), got {n}"
        )
    runspec.check_words_can_run(pages, count)  # STEPS_PER_TASK = 0 would wrap the kernel's task counter
    cuda = numba_cuda()
    d_pages = cuda.to_device(np.ascontiguousarray(pages))
    d_trace = _launch(image, d_pages, count, n, 1, trace.shape[0] > 0, z)
    pages[:] = d_pages.copy_to_host()
    if d_trace is not None:
        trace[:count] = d_trace.copy_to_host()[0]


def init_samples() -> np.ndarray:
    """SPEC 4's X then Y words (``[512]`` uint32) computed on the device (:func:`image.init_kernel`)."""
    image = require()
    cuda = numba_cuda()
    d = cuda.to_device(np.zeros(512, dtype=np.uint32))
    image.init_kernel[1 if simulated() else 2, 256 if simulated() else 128](d)
    return d.copy_to_host()
