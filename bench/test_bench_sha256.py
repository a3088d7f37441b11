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


@pytest.fixture(scope="module")
def pages_rows(short: bool) -> np.ndarray:
    """Rows of 260 words: what a sweep digests per system (PARAMS then LOSS, 1040 bytes)."""
    return np.random.default_rng(12).integers(0, 2**32, (2048 if short else 32768, 260), dtype=np.uint32)


@pytest.mark.parametrize("path", ["hashlib", *sha256.ROWS_KERNELS])
def test_page_digests_per_row(benchmark: Any, record: Any, pages_rows: np.ndarray, path: str) -> None:
    """The page digests of a sweep's systems on one thread, a 1040-byte row each: hashlib row by row,
    and each kernel of :func:`meshnb.sha256.digest_rows` (``lanes``: a row per vector lane;
    ``one``: the kernel in use a row at a time), per row."""
    n = pages_rows.shape[0]
    out = np.empty((n, 32), dtype=np.uint8)

    def hashlib_rows(rows: np.ndarray) -> None:
        for k in range(n):
            out[k] = np.frombuffer(hashlib.sha256(rows[k]).digest(), np.uint8)

    def kernel_rows(rows: np.ndarray) -> None:
        sha256.digest_rows(rows, 0, 260, 0, 0, out, 0, n, kernel=path)

    fn = hashlib_rows if path == "hashlib" else kernel_rows
    fn(pages_rows)  # the warm-up (a compile), then the bits
    assert all(out[k].tobytes() == hashlib.sha256(pages_rows[k]).digest() for k in range(0, n, 97))
    record(benchmark, f"sha256-rows-{path}", n, unit="row")
    benchmark.group = "sha256-rows"
    benchmark.extra_info.update(lanes=sha256.LANES, rows_kernel=sha256.ROWS_KERNEL)
    benchmark(fn, pages_rows)
