"""The hand-written pieces against the library that would replace them, side by side in one run
(docs/performance.md, "Hand-written, measured against the library").

- ``lib-csv-rows-{njit,python}``: a 16384-system part's CSV rows, per row: meshnb's njit formatter
  (:mod:`meshnb.sweeps.columns`) against its Python twin (f-strings and ``f32_text``: the same
  bytes, which neither the ``csv`` module nor numpy's float repr writes); bits first;
- ``lib-npz-{in-place,zipfile}``: :class:`meshnb.sweeps.result.NpzWriter` of a part of N systems,
  written and closed, per system: told its rows (the columns written where their members lie, the
  headers and the ZIP64 directory by hand) against not told (spools, then ``zipfile`` with
  ``force_zip64``); both read back to the same arrays;
- ``lib-startup-warm-{meshnb,numba}-loader``: a warm ``meshnb train --steps 64`` in a new
  process, loading numba's cache through :class:`meshnb.jit.FunctionCache` against numba's own
  ``load_overload`` (the registries refreshed first); each run's JSON checked;
- the SHA-256 pairs are ``bench/test_bench_sha256.py`` (hashlib against the kernels): run both
  files in one command.

    python -m pytest bench/test_bench_libraries.py bench/test_bench_sha256.py --benchmark-only -s
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from typing import Any

import numpy as np
import pytest

import meshnb
from meshnb import cpu
from meshnb import sweeps as sw


@pytest.fixture(scope="module")
def part(short: bool) -> sw.SweepResult:
    """One part as ``meshnb sweep`` writes it (16384 systems: a batch; 2048 in the smoke run)."""
    m = 2048 if short else 16384
    return sw.sweep(4, lrs=np.geomspace(1e-3, 1.0, m).astype(np.float32), trace=True)


def _cpu_time(benchmark: Any, cpu_s: list[float], per: int) -> None:
    ns = float(np.median(cpu_s)) / per * 1e9 if cpu_s else float("nan")
    benchmark.extra_info["cpu_ns_per_item"] = ns
    benchmark.extra_info.update(cpu.describe())
    print(f"\n{benchmark.extra_info['path']}: {ns:,.1f} ns of CPU a {benchmark.extra_info['unit']} (median)")


@pytest.mark.parametrize("impl", ["njit", "python"])
def test_csv_rows(benchmark: Any, record: Any, part: sw.SweepResult, impl: str) -> None:
    """A part's CSV rows, one thread, per row."""
    from meshnb.sweeps import columns, result

    r = part
    args = (r.first, r.page_index, None, r.lr_words, r.lrs.view(np.uint32), r.step_base, r.steps)
    tail = (r.last_loss_words, r.params_words, r.digest_bytes, r.trace_digest_bytes)

    def njit() -> bytes:
        return b"".join(result._csv_chunks(r, None, 1))

    def python() -> bytes:
        return columns._rows_py(*args, *tail)

    fn = njit if impl == "njit" else python
    assert fn() == python()  # the bits first, and the warm-up (a compile or numba's cache)
    cpu_s: list[float] = []

    def timed() -> None:
        c0 = time.process_time()
        fn()
        cpu_s.append(time.process_time() - c0)

    record(benchmark, f"lib-csv-rows-{impl}", len(r), unit="row")
    benchmark.group = "lib-csv-rows"
    benchmark.pedantic(timed, rounds=1 if benchmark.disabled else 9, iterations=1)
    _cpu_time(benchmark, cpu_s, len(r))


@pytest.mark.parametrize("how", ["in-place", "zipfile"])
def test_npz(benchmark: Any, record: Any, part: sw.SweepResult, tmp_path: Any, how: str) -> None:
    """An npz of the part, written and closed (fsync and rename included), per system."""
    from meshnb.sweeps.result import NpzWriter

    path = tmp_path / f"{how}.npz"
    rows = len(part) if how == "in-place" else None
    cpu_s: list[float] = []

    def one() -> None:
        c0 = time.process_time()
        w = NpzWriter(str(path), rows=rows)
        w.write(part)
        w.close(part.steps)
        cpu_s.append(time.process_time() - c0)

    one()
    with np.load(path) as f:
        assert all(np.array_equal(f[k], col) for k, col in part.columns().items())
    cpu_s.clear()
    record(benchmark, f"lib-npz-{how}", len(part), unit="system")
    benchmark.group = "lib-npz"
    benchmark.pedantic(one, rounds=1 if benchmark.disabled else 9, iterations=1)
    _cpu_time(benchmark, cpu_s, len(part))


_NUMBA_LOADER = "from numba.core import caching; from meshnb import jit; "
_NUMBA_LOADER += "jit.FunctionCache.load_overload = caching.FunctionCache.load_overload; "
_RUN = "import runpy, sys; sys.argv = ['meshnb', 'train', '--steps', '64', '--json', '--no-progress']; "
_RUN += "runpy.run_module('meshnb', run_name='__main__', alter_sys=True)"


def _train(loader: str) -> tuple[dict, float]:
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # bytecode cached, as an installed package runs
    code = (_NUMBA_LOADER if loader == "numba" else "") + _RUN
    before = os.times()
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True, timeout=300)
    after = os.times()
    spent = (after.children_user - before.children_user) + (after.children_system - before.children_system)
    return json.loads(out.stdout), spent


@pytest.mark.parametrize("loader", ["meshnb", "numba"])
def test_startup_warm(benchmark: Any, record: Any, loader: str) -> None:
    """A warm start (numba's cache filled first), meshnb's cache loader against numba's own."""
    want = meshnb.train(64).to_json()
    assert _train(loader)[0] == want  # fills the cache if it is not yet; the bits match
    cpu_s: list[float] = []

    def one() -> None:
        got, spent = _train(loader)
        assert got == want
        cpu_s.append(spent)

    record(benchmark, f"lib-startup-warm-{loader}-loader", 1, unit="process")
    benchmark.group = "lib-startup-warm"
    benchmark.pedantic(one, rounds=1 if benchmark.disabled else 10, iterations=1)
    _cpu_time(benchmark, cpu_s, 1)
