"""The host side of the CUDA image: pages to the device, launches, pages and trace digests back.

:func:`run_systems` runs a run's independent systems (one warp each: ``meshnb.sweep(...,
backend="cuda")``); :func:`run_cluster` runs one fused cluster (warps of one block: the ``cuda``
backend).  Pages are the CPU's ``[M, 1024]`` uint32 words.  Without numba-cuda, or with no device
outside the simulator, :func:`require` raises :class:`CudaUnavailable`.
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
from ..view import WORD

MAX_BLOCK_WARPS = CUDA_BLOCK_SYSTEMS  # 1024 threads: the largest cluster a block holds
TRACE_WORDS_PER_CHUNK = 1 << 26  # 256 MiB of trace words per launch at most


class CudaUnavailable(RuntimeError, ValueError):
    """The CUDA image cannot run here (no numba-cuda, or no device outside the simulator); one
    line.  Also a ValueError: to the commands it is bad input (exit 2)."""


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
    """M systems after :func:`run_systems`: the steps done (fewer after a stop), the final pages,
    each system's last loss word, trace digests ("" without ``trace``) and the seconds of the
    launches and copies."""

    steps: int
    pages: np.ndarray
    last_loss_words: np.ndarray
    trace_digests: list[str]
    seconds: float


def run_systems(
    run: runspec.Run,
    lo: int = 0,
    hi: int | None = None,
    *,
    trace: bool = False,
    chunk: int | None = None,
    per_block: int | None = None,
    on_chunk: Callable[[int], None] | None = None,
    should_stop: Callable[[], bool] | None = None,
) -> SystemsResult:
    """Run systems ``lo .. hi-1`` of ``run`` (:func:`meshnb.runspec.describe`'s, systems alone, no
    ``set_lr``) on the device, one warp per system, ``per_block`` (4; 1 in the simulator) a block,
    ``chunk`` steps a launch (default: all, or a trace under 256 MiB a launch); system k ends
    bit-equal to ``meshnb.train`` of it.  ``on_chunk`` and ``should_stop`` are
    :func:`meshnb.driver.drive`'s ``after`` and ``should_stop``."""
    if not isinstance(run, runspec.Run):
        raise TypeError(f"run must be a meshnb.runspec.Run (describe's), got {type(run).__name__}")
    if run.is_cluster:
        raise runspec.OptionError(
            f"run_systems runs systems alone (a run of group 0), not clusters of {run.group}: "
            "a cluster is run_cluster's (the cuda backend)"
        )
    if run.set_lr:
        raise runspec.OptionError(
            "run_systems sets each system's LR before its first step only: no set_lr during the run"
        )
    lo = runspec.check_int(lo, "lo", 0, len(run) - 1)
    hi = runspec.check_int(len(run) if hi is None else hi, "hi", lo + 1, len(run))
    per_block = per_block or (1 if simulated() else 4)
    if not 1 <= per_block <= MAX_BLOCK_WARPS:
        raise runspec.OptionError(f"per_block must be 1 to {MAX_BLOCK_WARPS}, got {per_block}")
    image = require()
    p = run.words(lo, hi)  # a new array: SET_LR, the step base and STEPS_PER_TASK applied, as train applies them
    m, steps, z = p.shape[0], run.steps, run.z
    pad = -m % per_block  # whole blocks: the padding rows are copies of page 0, dropped after
    rows = np.concatenate([p, np.repeat(p[:1], pad, axis=0)]) if pad else p
    most = max(1, TRACE_WORDS_PER_CHUNK // (rows.shape[0] * NSUMS)) if trace else max(steps, 1)
    per_call = max(1, min(chunk or most, most))
    cuda = numba_cuda()
    hashers = [hashlib.sha256() for _ in range(m)] if trace else []
    start = time.perf_counter()
    d_pages = cuda.to_device(rows)

    def advance(done: int, n: int) -> None:
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
    """``count`` steps of one fused cluster (``pages`` ``[N, 1024]``, updated in place) on the
    device, N warps of one block; ``trace`` (``[count, 5]``, or no rows) receives each step's fold.
    The effects of :func:`meshnb.loops.run_fused`."""
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
