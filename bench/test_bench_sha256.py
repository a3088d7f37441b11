"""Throughput of the trace hash: hashlib.sha256 against meshnb.sha256.Sha256 on each kernel.

The input is what a run hashes: trace rows of 20 bytes (uint32 [rows, 5]), about 1 MiB per timed
call (64 KiB in a short run).  Each path is checked against hashlib before it is timed, which is
also its warm-up call (JIT compilation stays out of the timed region).  ``extra_info["steps"]``
counts rows, so the ratio table's per-"row" median is the hash's cost per training step;
``extra_info["mb_per_s"]`` is filled in after the timing (MB = 10^6 bytes).

    python -m pytest bench/test_bench_sha256.py --benchmark-only
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from meshnb import sha256

ROW = 20  # bytes of trace per step


@pytest.fixture(scope="module")
def rows(short: bool) -> np.ndarray:
    n = (2**16 if short else 2**20) // ROW
    return np.random.default_rng(11).integers(0, 2**32, (n, ROW // 4), dtype=np.uint32)


def _kernel_hexdigest(kernel: str) -> Callable[[np.ndarray], str]:
    if kernel not in sha256.KERNELS:
        pytest.skip(f"no {kernel} kernel on this CPU (llvmlite host feature 'sha' is off)")
    cls = type(f"Sha256_{kernel}", (sha256.Sha256,), {"_kernel": staticmethod(sha256.KERNELS[kernel])})

    def hexdigest(data: np.ndarray) -> str:
        h = cls()
        h.update(data)
        return h.hexdigest()

    return hexdigest


def _hashlib_hexdigest(data: np.ndarray) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.mark.parametrize("path", ["hashlib", "sha-ni", "scalar"])
def test_sha256_throughput(benchmark: Any, record: Any, rows: np.ndarray, path: str) -> None:
    """One hash of ``rows`` (update + hexdigest on a new object), MB/s in extra_info."""
    fn = _hashlib_hexdigest if path == "hashlib" else _kernel_hexdigest(path)
    assert fn(rows) == hashlib.sha256(rows.tobytes()).hexdigest()  # bits first, and the warm-up
    record(benchmark, f"sha256-{path}", rows.shape[0], unit="row")
    benchmark.group = "sha256"
    benchmark.extra_info["bytes"] = rows.nbytes
    benchmark(fn, rows)
    if benchmark.stats is not None:  # None when timing is disabled (the smoke run)
        benchmark.extra_info["mb_per_s"] = round(rows.nbytes / benchmark.stats.stats.median / 1e6, 1)
