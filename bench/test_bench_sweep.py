"""The sweep (issues 12, 17): M independent systems against the single loop, in one run; the
result's output paths at 10^3 .. 10^5 systems.

Run::

    python -m pytest bench/test_bench_sweep.py --benchmark-only     # 1024 systems x 4096 steps
    MESHNB_BENCH_SHORT=1 python -m pytest bench/test_bench_sweep.py --benchmark-disable -q   # smoke
    NUMBA_CPU_NAME=haswell NUMBA_CPU_FEATURES="" NUMBA_CACHE_DIR=$(mktemp -d) python -m pytest \
        bench/test_bench_sweep.py --benchmark-only                  # real AVX2 code (8 lanes x 1), on any x86

(``NUMBA_CPU_NAME`` alone keeps the host's features: AVX-512 code on an AVX-512 host, and the
shape printed says so.)  The loop against its C anchor is ``bench/test_bench_sweep_anchor.py``.

Every figure carries the CPU and the vector ISA the loops were compiled for (``meshnb.cpu.describe``)
and the sweep loop's shape in ``extra_info``.

Paths (per *system-step* for the sweeps: ``steps`` is systems x steps, so the table's "per step"
is the cost of one step of one system, directly comparable with the single loop's step):

- ``sweep-single``: ``meshnb.train(2^20)`` from varied start pages (the single loop, this run's
  baseline);
- ``sweep-single-loop``: ``loops.run_tasks`` alone (no trace digest, no host loop);
- ``sweep-1024``: ``meshnb.sweep(4096, lrs=<1024 LRs>)``, the whole call (planning,
  sample tables, the loop on every core, final pages and digests);
- the step loop alone (``result.seconds`` of the same calls) is printed and kept in ``extra_info``;
- ``sweep-1024-1thread``: the whole call on one thread (the per-core rate);
- ``sweep-csv-rows-{1,2}thread``: the CSV rows of a 16384-system part (``CsvWriter.write``'s
  formatting, no file) per row, on one thread and on two (bits first: the Python twin's bytes);
- ``sweep-out-{records,csv,json}-{10^3,10^4,10^5}``: a result's table as records, CSV text and the
  JSON document (per system: ``steps`` is the systems), which must grow linearly;
- ``sweep-cli-npz``, ``sweep-cli-csv``: ``meshnb sweep --lr 1e-3:1:N:log --steps 16 --npz/--csv OUT``
  in child processes at two sizes (10^5 and 10^6 systems), interleaved: the wall time per system
  beyond the fixed start-up, the slope between the two sizes (``extra_info["marginal"]``; issue
  25's targets on 2 cores: 0.6 us with ``--npz``, 1.2 us with ``--csv``, its 16 steps included);
- ``sweep-csv-1000000``: ``meshnb sweep`` of 10^6 systems x 64 steps to a CSV file in a child
  process, its peak RSS in ``extra_info["peak_rss_bytes"]`` (target: under 1 GiB).

Bits first: every system of a smaller sweep (varied start pages x LRs, step bases in every
residue mod 8) against its own ``meshnb.train``, trace digests included, and one against the
numpy reference.  The LRs vary from one timed call to the next.  The first call of the sweep's
loop (a compile, or numba's cache) is kept out of every timed call and printed.
"""

from __future__ import annotations

import io
import itertools
import json
import time

import numpy as np
import pytest

import meshnb
from meshnb import cpu, loops
from meshnb import sweeps as sw
from meshnb.bench import varied_starts
from meshnb.loops import sweep as sweep_loop
from meshnb.sweeps.run import warm_up
from meshnb.testing import reference as ref


@pytest.fixture(scope="module")
def sweep_sizes(short: bool) -> dict[str, int]:
    if short:
        return {"systems": 64, "steps": 256, "single": 10_000, "rounds": 1}
    return {"systems": 1024, "steps": 4096, "single": 1 << 20, "rounds": 7}


@pytest.fixture(scope="module")
def first_call() -> float:
    seconds = warm_up(loops.loop_mode(True))
    print(f"\nsweep loop {sweep_loop.shape()}, first call (compile or numba cache): {seconds:.2f} s")
    print(f"CPU: {cpu.describe()}")
    return seconds


def _where(benchmark) -> None:
    """The CPU, the ISA compiled for and the loop's shape, in every figure."""
    benchmark.extra_info.update(cpu.describe())
    benchmark.extra_info["sweep_shape"] = str(sweep_loop.shape())


def _lrs(m: int, round_: int) -> np.ndarray:
    """m LRs over a wide log range, shifted a little each round so no two calls run the same systems."""
    return (np.geomspace(1e-4, 1.0, m) * (1.0 - 1e-3 * round_)).astype(np.float32)


def test_sweep_bits_before_timing(first_call: float) -> None:
    starts = varied_starts(4)
    pages = [s.page for s in starts]
    lrs = np.array([0x3F000000, 0x3E000000, 0x3B000000, 0x3F400000, 0x3A000000], dtype=np.uint32)
    bases = [s.step_base + k for s in starts for k in range(lrs.size)]  # every residue mod 8 across the systems
    r = sw.sweep(256, view_in=pages, lrs=lrs, step_base=bases, trace=True)
    for k in range(len(r)):
        one = meshnb.train(
            256, view_in=pages[k // lrs.size], set_lr={0: lrs[k % lrs.size]}, step_base=bases[k], keep_trace=True
        )
        assert (r.page(k), r.trace_digests[k]) == (one.page, one.trace_digest), f"system {k}"
    page = bytearray(pages[0])  # the reference reads the step base from the page
    page[28:32] = (bases[0] & 0xFFFFFFFF).to_bytes(4, "little")
    page[44:48] = (bases[0] >> 32).to_bytes(4, "little")
    outs, tr = ref.run([bytes(page)], 256, grouped=False, lr_changes={0: int(lrs[0])})
    assert r.page(0) == outs[0] and r.trace_digests[0] == ref.trace_digest(tr)


def test_single(benchmark, record, sweep_sizes) -> None:
    """The single loop, this run's baseline: meshnb.train from varied start pages."""
    steps = sweep_sizes["single"]
    pages = itertools.cycle([s.page for s in varied_starts(8)])
    meshnb.train(64)  # the loop's first call out of the timing
    cpu: list[float] = []

    def one() -> None:
        c0 = time.process_time()
        meshnb.train(steps, view_in=next(pages))
        cpu.append(time.process_time() - c0)

    record(benchmark, "sweep-single", steps)
    _where(benchmark)
    benchmark.group = "sweep"
    benchmark.pedantic(one, rounds=sweep_sizes["rounds"], iterations=1)
    _cpu_note(benchmark, "sweep-single", cpu, steps)


def test_single_loop(benchmark, record, sweep_sizes) -> None:
    """The single loop alone (``loops.run_tasks``, no trace, no host): the chain the sweep is set against."""
    steps = sweep_sizes["single"]
    pages = itertools.cycle([np.frombuffer(s.page, dtype="<u4").copy() for s in varied_starts(8)])
    mode = loops.loop_mode(True)
    no_trace = np.empty((0, 5), dtype=np.uint32)
    loops.run_tasks(next(pages).copy(), 64, no_trace, mode)  # the loop's first call out of the timing
    cpu: list[float] = []

    def one() -> None:
        words = next(pages).copy()
        c0 = time.process_time()
        loops.run_tasks(words, steps, no_trace, mode)
        cpu.append(time.process_time() - c0)

    record(benchmark, "sweep-single-loop", steps)
    _where(benchmark)
    benchmark.group = "sweep"
    benchmark.pedantic(one, rounds=sweep_sizes["rounds"], iterations=1)
    _cpu_note(benchmark, "sweep-single-loop", cpu, steps)


def _cpu_note(benchmark, name: str, cpu: list[float], steps: int) -> None:
    """CPU time (all threads) per step: what a shared machine's other load does not inflate."""
    ns = float(np.median(cpu)) / steps * 1e9
    benchmark.extra_info["cpu_ns_per_step"] = ns
    print(f"\n{name}: {ns:.2f} ns of CPU time per (system-)step (median of {len(cpu)})")


@pytest.mark.parametrize("threads", [None, 1], ids=["all-cores", "1thread"])
def test_sweep(benchmark, record, sweep_sizes, first_call, threads) -> None:
    m, steps = sweep_sizes["systems"], sweep_sizes["steps"]
    rounds = iter(range(10**6))
    loop_seconds: list[float] = []

    cpu: list[float] = []

    def one() -> None:
        c0 = time.process_time()
        r = sw.sweep(steps, lrs=_lrs(m, next(rounds)), threads=threads)
        cpu.append(time.process_time() - c0)
        loop_seconds.append(r.seconds)

    name = f"sweep-{m}" if threads is None else f"sweep-{m}-1thread"
    record(benchmark, name, m * steps, systems=m)
    _where(benchmark)
    benchmark.group = "sweep"
    benchmark.extra_info["first_call_s"] = first_call
    benchmark.pedantic(one, rounds=sweep_sizes["rounds"], iterations=1)
    loop_ns = float(np.median(loop_seconds)) / (m * steps) * 1e9
    benchmark.extra_info["loop_ns_per_system_step"] = loop_ns
    print(f"\n{name}: step loop alone {loop_ns:.2f} ns per system-step (median of {len(loop_seconds)})")
    _cpu_note(benchmark, name, cpu, m * steps)


@pytest.fixture(scope="module")
def big_results(short: bool) -> dict[int, sw.SweepResult]:
    """Real results of 10^3, 10^4, 10^5 systems (a few steps each, trace digests on)."""
    sizes = (1000, 10_000) if short else (1000, 10_000, 100_000)
    return {m: sw.sweep(4, lrs=np.geomspace(1e-4, 1.0, m).astype(np.float32), trace=True) for m in sizes}


def _csv(r: sw.SweepResult) -> None:
    out = io.StringIO()
    out.write(r.csv_lines())


def _json(r: sw.SweepResult) -> None:
    json.dumps(r.to_json())


_OUTPUTS = {"records": lambda r: r.to_records(), "csv": _csv, "json": _json}


@pytest.mark.parametrize("m", [1000, 10_000, 100_000])
@pytest.mark.parametrize("what", sorted(_OUTPUTS))
def test_output_paths_are_linear(benchmark, record, big_results, what: str, m: int) -> None:
    """A result's table (fresh each call: no cached column helps) per system, at three sizes."""
    if m not in big_results:
        pytest.skip("short sizes")
    base = big_results[m]
    fresh = iter(range(10**6))

    def one() -> None:
        next(fresh)
        r = sw.SweepResult.concat([base])  # a new result: its cached digests and hex words made again
        _OUTPUTS[what](r)

    record(benchmark, f"sweep-out-{what}-{m}", m, unit="call")
    _where(benchmark)
    benchmark.group = f"sweep-out-{what}"
    benchmark.pedantic(one, rounds=5, iterations=1)


@pytest.fixture(scope="module")
def csv_part(short: bool) -> sw.SweepResult:
    """One part as ``meshnb sweep --csv`` formats it (16384 systems: a batch; 4096 in the smoke run)."""
    m = 4096 if short else 16384
    return sw.sweep(4, lrs=np.geomspace(1e-3, 1.0, m).astype(np.float32))


def _csv_rows_bits(part: sw.SweepResult, threads: int) -> None:
    """The njit rows of the part, on ``threads`` threads, are the Python twin's to the byte."""
    from meshnb.sweeps import columns, result

    r = part
    args = (r.first, r.page_index, None, r.lr_words, r.lrs.view(np.uint32), r.step_base, r.steps)
    rows = columns._rows_py(*args, r.last_loss_words, r.params_words, r.digest_bytes, None)
    assert b"".join(result._csv_chunks(r, None, threads)) == rows


@pytest.mark.parametrize("threads", [1, 2])
def test_csv_rows(benchmark, record, csv_part: sw.SweepResult, threads: int) -> None:
    """The CSV rows of one part per row (what ``CsvWriter.write`` formats, without the file), on
    ``threads`` threads (a pool kept across calls, as the writer keeps one); CPU time (all
    threads) per row in ``extra_info["cpu_ns_per_row"]``."""
    from concurrent.futures import ThreadPoolExecutor

    from meshnb.sweeps import result

    _csv_rows_bits(csv_part, threads)  # bits first (also under --benchmark-only)
    m = len(csv_part)
    cpu: list[float] = []
    with ThreadPoolExecutor(max(1, threads - 1)) as pool:

        def one() -> None:
            c0 = time.process_time()
            result._csv_chunks(csv_part, None, threads, pool)
            cpu.append(time.process_time() - c0)

        one()  # the formatter's first call (a compile, or numba's cache) out of the timing
        cpu.clear()
        record(benchmark, f"sweep-csv-rows-{threads}thread", m, unit="call")
        _where(benchmark)
        benchmark.group = "sweep-csv-rows"
        benchmark.pedantic(one, rounds=15, iterations=1)
    ns = float(np.median(cpu)) / m * 1e9
    benchmark.extra_info["cpu_ns_per_row"] = ns
    print(f"\nsweep-csv-rows-{threads}thread: {ns:.1f} ns of CPU time per row (median of {len(cpu)})")


def test_csv_of_many_systems_peak_memory(benchmark, record, short: bool, tmp_path) -> None:
    """``meshnb sweep --lr 1e-4:1:10^6:log --steps 64 --csv OUT`` in a child process: its peak RSS
    (``ru_maxrss`` of the children) in ``extra_info``; the target is under 1 GiB."""
    import resource
    import subprocess
    import sys

    m = 10_000 if short else 1_000_000
    out = tmp_path / "sweep.csv"
    cmd = [sys.executable, "-m", "meshnb", "sweep", "--lr", f"1e-4:1:{m}:log", "--steps", "64", "--csv", str(out)]

    def one() -> None:
        subprocess.run([*cmd, "--no-progress"], check=True, capture_output=True, timeout=3600)

    record(benchmark, f"sweep-csv-{m}", m * 64, systems=m)
    _where(benchmark)
    benchmark.pedantic(one, rounds=1, iterations=1)
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024  # the largest child so far
    benchmark.extra_info["peak_rss_bytes"] = peak
    with open(out, "rb") as f:
        rows = sum(1 for _ in f) - 1
    print(f"\nsweep-csv-{m}: peak RSS of the children {peak / 2**20:.0f} MiB, {rows} rows")
    assert rows == m


MARGINAL_TARGET_NS = {"npz": 600.0, "csv": 1200.0}
"""Issue 25: a system's cost beyond its 16 steps, marginal wall time on 2 cores."""


@pytest.mark.parametrize("fmt", sorted(MARGINAL_TARGET_NS))
def test_cost_per_system_of_the_command(benchmark, record, short: bool, tmp_path, fmt: str) -> None:
    """``meshnb sweep`` to a file at two sizes in child processes, a small run before each timed
    large one (pytest-benchmark's setup, untimed by it): the slope (large - small) / (systems
    between) of the medians is the cost per system; the files are checked to hold every system."""
    import subprocess
    import sys

    small, big = (2_000, 12_000) if short else (100_000, 1_000_000)
    out = tmp_path / f"sweep.{fmt}"
    walls: dict[int, list[float]] = {small: [], big: []}

    def run(m: int) -> None:
        cmd = [
            sys.executable,
            "-m",
            "meshnb",
            "sweep",
            "--lr",
            f"1e-3:1:{m}:log",
            "--steps",
            "16",
            f"--{fmt}",
            str(out),
        ]
        t = time.perf_counter()
        subprocess.run([*cmd, "--no-progress"], check=True, capture_output=True, timeout=600)
        walls[m].append(time.perf_counter() - t)

    run(small)  # the numba cache is loaded (or filled) before any timed run
    walls[small].clear()
    record(benchmark, f"sweep-cli-{fmt}", big, systems=big, unit="system")
    _where(benchmark)
    benchmark.group = "sweep-cli"
    benchmark.pedantic(run, args=(big,), setup=lambda: run(small), rounds=1 if short else 5, iterations=1)
    if fmt == "npz":
        with np.load(out) as f:
            assert f["digest"].shape == (big, 32)
    else:
        with open(out, "rb") as f:
            assert sum(1 for _ in f) == big + 1
    med = {m: float(np.median(w)) for m, w in walls.items()}
    ns = (med[big] - med[small]) / (big - small) * 1e9
    benchmark.extra_info["marginal"] = {
        "label": f"`meshnb sweep --steps 16 --{fmt}`, cost per system",
        "ns": ns, "target_ns": MARGINAL_TARGET_NS[fmt], "small": small, "big": big,
        "wall_small_s": med[small], "wall_big_s": med[big],
    }  # fmt: skip
    sizes = f"{small} -> {big} systems: {med[small]:.2f} -> {med[big]:.2f} s"
    print(f"\nsweep-cli-{fmt}: {ns / 1e3:.3f} us a system ({sizes})")
