"""``meshnb bench``: steps per second of each path on this machine, every figure verified.

Each path's first call is timed apart, its trace digest checked (a differing path gets no figure,
``MISMATCH``), then the median ns/step of calls from varied start pages (docs/performance.md)."""

from __future__ import annotations

import os
import platform
import statistics
import struct
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np

from . import cpu
from .backend_table import BY_NAME, local_cluster_backends
from .samebits import differences
from .testing import reference as ref

DEFAULT_SECONDS = 2.0  # per path: ~10-20 s in all
QUICK_SECONDS = 0.25  # --quick: ~3 s in all
VERIFY_STEPS = 256
QUICK_VERIFY_STEPS = 64
MAX_STEPS_PER_CALL = 10_000_000

# The figures for this kind of machine (2-core AMD Zen 4), ns per step, for scale.
KNOWN_NS_PER_STEP: dict[str, float] = {
    "plain Python": 266_000.0,
    "numpy, one op per lane array": 126_000.0,
    "C gcc -O2 straightforward": 1_800.0,
    "numba, flush via a 1-element view": 8_400.0,
    "C AVX2, every op flushed": 85.0,
    "C AVX, DAZ on, outputs flushed": 16.0,
    "latency bound of one step": 13.0,
}


# --- Varied inputs --------------------------------------------------------------------------------


@dataclass(frozen=True)
class BenchStart:
    """Where a benchmarked run starts."""

    page: bytes
    step_base: int
    lr_bits: int


def varied_starts(count: int, seed: int = 5) -> list[BenchStart]:
    """``count`` start pages: params uniform in (-1, 1), LR in [0.469, 0.5], step base < 2^40."""
    rng = np.random.default_rng(seed)
    base_page = ref.init_page()
    starts = []
    for _ in range(count):
        page = bytearray(base_page)
        params = ref.to_bits(rng.uniform(-1.0, 1.0, 4).astype(np.float32))
        lr_bits = 0x3F000000 - int(rng.integers(0, 1 << 19))  # 0.5 down to ~0.469
        step_base = int(rng.integers(0, 1 << 40))
        struct.pack_into("<4I", page, ref.OFF_PARAMS, *(int(w) for w in params))
        struct.pack_into("<I", page, ref.OFF_LR, lr_bits)
        struct.pack_into("<I", page, ref.OFF_NEXT_STEP, step_base & 0xFFFFFFFF)
        struct.pack_into("<I", page, ref.OFF_STEP_HI, step_base >> 32)
        starts.append(BenchStart(bytes(page), step_base, lr_bits))
    return starts


# --- The runs being measured; each returns the trace digest of the steps it ran -------------------


def meshnb_run(start: BenchStart, steps: int, steps_per_task: int | None = None) -> str:
    """meshnb's single-system path from ``start.page``."""
    from .api import train

    return train(steps, view_in=start.page, steps_per_task=steps_per_task).trace_digest


def reference_run(start: BenchStart, steps: int, impl: str = "numpy") -> str:
    """The reference implementation (``impl`` "numpy" or "python") from ``start.page``."""
    _, trace = ref.run([start.page], steps, grouped=False, impl=impl)
    return ref.trace_digest(trace)


def _cluster_kwargs(start: BenchStart | None) -> dict[str, Any]:
    if start is None:
        return {}
    return {"step_base": start.step_base, "set_lr": {0: np.uint32(start.lr_bits)}}


def cluster_run(start: BenchStart, steps: int, backend: str, systems: int) -> str:
    """A cluster of ``systems`` on ``backend``; every member must have the same trace digest."""
    from .api import train

    r = train(steps, systems=systems, backend=backend, **_cluster_kwargs(start))
    digests = {s.trace_digest for s in r.systems}
    if len(digests) != 1:
        return "members differ: " + ",".join(sorted(digests))
    return r.systems[0].trace_digest


def cluster_reference_run(start: BenchStart, steps: int, systems: int) -> str:
    """The numpy reference's grouped run of ``systems`` from the same step base and LR."""
    page = bytearray(ref.init_page(systems, grouped=True))
    struct.pack_into("<I", page, ref.OFF_NEXT_STEP, start.step_base & 0xFFFFFFFF)
    struct.pack_into("<I", page, ref.OFF_STEP_HI, start.step_base >> 32)
    _, trace = ref.run([bytes(page)] * systems, steps, grouped=True, lr_changes={0: start.lr_bits})
    return ref.trace_digest(trace)


@lru_cache(maxsize=64)
def meshnb_digest(start: BenchStart, steps: int) -> str:
    """meshnb's single-system trace digest (the digest every single-system path must match)."""
    return meshnb_run(start, steps)


@lru_cache(maxsize=64)
def reference_digest(start: BenchStart, steps: int, impl: str = "numpy", systems: int = 0) -> str:
    """The reference's digest: single system (``systems=0``) or a grouped cluster of ``systems``."""
    if systems:
        return cluster_reference_run(start, steps, systems)
    return reference_run(start, steps, impl)


# --- Paths ----------------------------------------------------------------------------------------


@dataclass
class BenchPath:
    """A way of running the program: ``run(start, steps) -> trace digest``."""

    name: str
    description: str
    run: Callable[[BenchStart, int], str]
    probe_steps: int  # the first call's size (and the minimum call)
    systems: int = 1
    expected: Callable[[BenchStart, int], str] = meshnb_digest  # the digest it must match
    checked_against: str = "meshnb single system"
    unavailable: str | None = None  # a reason: the path is listed but not run
    max_steps: int = MAX_STEPS_PER_CALL


def _single_expected(start: BenchStart, steps: int) -> str:
    # meshnb's own path is cross-checked with the independent numpy implementation.
    return reference_digest(start, steps, "numpy")


def default_paths(clusters: bool = True, names: Sequence[str] | None = None) -> list[BenchPath]:
    """Every path, single system first (so its first call carries the JIT).  ``names``: only
    these cluster paths are run (the others are listed as not asked for)."""
    paths = [
        BenchPath("single", "meshnb.train, one system, STEPS_PER_TASK 64", meshnb_run, 4096,
                  expected=_single_expected, checked_against="numpy reference"),
        BenchPath("single-one-task", "meshnb.train, one system, the whole run in one task",
                  lambda s, n: meshnb_run(s, n, steps_per_task=max(n, 1)), 4096, max_steps=0xFFFFFFFF),
        BenchPath("numpy", "reference.run impl='numpy' (vectorised over lanes)",
                  lambda s, n: reference_run(s, n, "numpy"), 16),
        BenchPath("python", "reference.run impl='python' (plain Python scalars)",
                  lambda s, n: reference_run(s, n, "python"), 4),
    ]  # fmt: skip
    paths.extend(_sweep_anchor_paths())
    if not clusters:
        return paths
    paths.extend(_round_floor_paths())
    # The table's cluster backends of this machine's CPU, at its systems for benches (mpi runs
    # under mpiexec: bench/test_bench_mpi.py; cuda on a GPU: bench/test_bench_cuda.py and gpu-check).
    for backend in local_cluster_backends():
        systems = BY_NAME[backend].bench_systems or 2
        name = f"{backend}-{systems}"
        desc = f"meshnb.train(systems={systems}, backend={backend!r}), per lockstep step"
        asked = not names or name in names

        def run(s: BenchStart, n: int, backend: str = backend, systems: int = systems) -> str:
            return cluster_run(s, n, backend, systems)

        def expected(s: BenchStart, n: int, systems: int = systems) -> str:
            return reference_digest(s, n, "numpy", systems)

        probe, against = 1024 if backend == "fused" else 256, f"numpy reference, {systems} systems grouped"
        paths.append(BenchPath(name, desc, run, probe, systems, expected, against, None if asked else "not asked for"))
    return paths


def _checkout_module(name: str) -> Any:
    """``bench/NAME.py`` of a source checkout, loaded; None where it is not there."""
    import importlib.util

    src = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bench", f"{name}.py")
    spec = importlib.util.spec_from_file_location(f"meshnb_{name}", src) if os.path.isfile(src) else None
    if spec is None or spec.loader is None:
        return None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _sweep_anchor_paths() -> list[BenchPath]:
    """The sweep loop and its C anchor (``bench/sweep_anchor.py`` of a source checkout), 1024 LR systems,
    one thread, both checked against ``meshnb.sweep``; not run without the checkout, gcc or x86."""
    desc = ("meshnb's sweep loop, 1024 LR systems, one thread", "the sweep loop's C anchor (bench/sweep_anchor.c)")
    mod = _checkout_module("sweep_anchor")
    if mod is None:
        why = "bench/sweep_anchor.py is not here (a source checkout has it)"
        return [
            BenchPath(n, d, meshnb_run, 1, 1024, unavailable=why)
            for n, d in zip(("sweep-1024", "sweep-c-anchor"), desc)
        ]

    def expected(s: BenchStart, n: int) -> str:
        return str(mod.library_run(s.page, n))

    why = mod.unavailable()
    built: list[Callable[[bytes, int], str]] = []  # the C is built on the path's first run

    def c_run(s: BenchStart, n: int) -> str:
        if not built:
            built.append(mod.c_runner(2 if mod.lanes_of_target() == 16 else 1))  # the faster blocking here
        return str(built[0](s.page, n))

    common = dict(systems=mod.BENCH_SYSTEMS, expected=expected, checked_against="meshnb.sweep", max_steps=1 << 20)
    return [
        BenchPath("sweep-1024", desc[0], lambda s, n: str(mod.meshnb_run(s.page, n)), 256, **common),
        BenchPath("sweep-c-anchor", desc[1], c_run, 256, unavailable=why, **common),
    ]


def _round_floor_paths() -> list[BenchPath]:
    """The C floor of a lockstep round (``bench/round_floor.py``: 2 threads, the round alone, its spin,
    yield and futex policies; a "step" is a round), checked against numpy; not run without the
    checkout, gcc, Linux or x86."""
    mod = _checkout_module("round_floor")
    names = [f"round-c-floor-2-{p}" for p in ("spin", "yield", "futex")]
    desc = "the round's C floor (bench/round_floor.c), 2 threads, policy "
    if mod is None:
        why = "bench/round_floor.py is not here (a source checkout has it)"
        return [BenchPath(n, desc + n.rsplit("-", 1)[1], meshnb_run, 1, 2, unavailable=why) for n in names]
    built: list[Any] = []  # the C is built on the first run

    def runner(policy: str) -> Callable[[BenchStart, int], str]:
        def run(s: BenchStart, n: int) -> str:
            if not built:  # a scratch folder removed with the process (TemporaryDirectory's finalizer)
                scratch = tempfile.TemporaryDirectory(prefix="meshnb-round-floor-")
                built.extend([mod.build(scratch.name), scratch])
            return ",".join(str(d) for d in mod.run(built[0], 2, max(n, 1), policy, "threads")[1])

        return run

    def expected(s: BenchStart, n: int) -> str:
        return ",".join([str(mod.expected_digest(2, max(n, 1)))] * 2)

    return [
        BenchPath(
            name, desc + policy, runner(policy), 4096, 2, expected, "numpy (the fold of every round)",
            mod.unavailable(), 1 << 22,
        )
        for name, policy in zip(names, ("spin", "yield", "futex"))
    ]  # fmt: skip


# --- Measuring ------------------------------------------------------------------------------------


def _timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def measure(path: BenchPath, starts: Sequence[BenchStart], seconds: float, verify_steps: int) -> dict[str, Any]:
    """First call, bit check, then steady-state timing of one path (see the module doc)."""
    row: dict[str, Any] = {
        "path": path.name, "description": path.description, "systems": path.systems,
        "available": path.unavailable is None, "reason": path.unavailable, "verified": None,
        "verify_steps": verify_steps, "verify_starts": len(starts), "checked_against": path.checked_against,
        "mismatches": [], "first_call_s": None, "jit_s": None, "steps_per_call": None, "calls": 0,
        **dict.fromkeys(("ns_per_step", "steps_per_s", "ratio_vs_single", "marginal_ns_per_step", "fixed_s_per_call")),
    }  # fmt: skip
    if path.unavailable is not None:
        return row
    probe = path.probe_steps
    first_s, _ = _timed(lambda: path.run(starts[0], probe))
    # Bits first: a path whose digest differs gets no figure.
    for i, start in enumerate(starts):
        got = path.run(start, verify_steps)
        want = path.expected(start, verify_steps)
        if differences({"trace digest": got}, {"trace digest": want}):
            row["mismatches"].append({"start": i, "got": got, "expected": want})
    row["verified"] = not row["mismatches"]
    row["first_call_s"] = first_s
    if not row["verified"]:
        return row
    same = [_timed(lambda i=i: path.run(starts[i % len(starts)], probe))[0] for i in range(3)]  # type: ignore[misc]
    t_probe = statistics.median(same)
    row["jit_s"] = max(0.0, first_s - t_probe)
    steps = _call_size(path, starts[0], probe, t_probe, seconds)
    times: list[float] = []
    deadline = time.perf_counter() + seconds
    i = 0
    while len(times) < 3 or (time.perf_counter() < deadline and len(times) < 50):
        dt, _ = _timed(lambda i=i: path.run(starts[i % len(starts)], steps))  # type: ignore[misc]
        times.append(dt)
        i += 1
    t_big = statistics.median(times)
    ns = t_big / steps * 1e9
    row.update(
        steps_per_call=steps,
        calls=len(times),
        ns_per_step=ns,
        steps_per_s=1e9 / ns,
        ns_min=min(times) / steps * 1e9,
        ns_max=max(times) / steps * 1e9,
    )
    if steps > probe:  # two sizes: the cost of one more step, and what a call costs besides
        slope = max(0.0, (t_big - t_probe) / (steps - probe))
        row.update(marginal_ns_per_step=slope * 1e9, fixed_s_per_call=max(0.0, t_probe - probe * slope))
    else:
        row.update(marginal_ns_per_step=None, fixed_s_per_call=None)
    return row


def _call_size(path: BenchPath, start: BenchStart, probe: int, t_probe: float, seconds: float) -> int:
    """Steps per timed call: a call of about a fifth of the budget, grown further while a
    fixed per-call cost (workers' start-up, say) still outweighs the steps themselves."""
    target = seconds / 5
    steps, t = probe, t_probe
    deadline = time.perf_counter() + seconds
    while steps < path.max_steps and time.perf_counter() < deadline:
        if t >= target and steps > probe:
            slope = (t - t_probe) / (steps - probe)
            if slope * steps >= t_probe - probe * slope:  # the steps dominate the call
                break
        factor = 16.0 if t < target / 10 else max(2.0, target / max(t, 1e-9))
        steps = min(path.max_steps, max(64, int(steps * factor) // 64 * 64))
        t, _ = _timed(lambda steps=steps: path.run(start, steps))  # type: ignore[misc]
    return steps


def run_bench(
    seconds_per_path: float = DEFAULT_SECONDS,
    *,
    quick: bool = False,
    paths: Sequence[str] | None = None,
    extra_paths: Sequence[BenchPath] = (),
    clusters: bool = True,
    verify_steps: int | None = None,
    progress: Callable[[dict[str, Any]], None] | None = None,
) -> list[dict[str, Any]]:
    """Measure every path (or those named in ``paths``); one dict per path, in order."""
    if verify_steps is None:
        verify_steps = QUICK_VERIFY_STEPS if quick else VERIFY_STEPS
    starts = varied_starts(2 if quick else 3)
    every = default_paths(clusters, paths) + list(extra_paths)
    if paths:
        known = {p.name for p in every}
        unknown = [p for p in paths if p not in known]
        if unknown:
            raise ValueError(f"unknown path(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
        every = [p for p in every if p.name in paths]
    rows = []
    for path in every:
        row = measure(path, starts, seconds_per_path, verify_steps)
        rows.append(row)
        if progress is not None:
            progress(row)
    single = next((r["ns_per_step"] for r in rows if r["path"] == "single"), None)
    for r in rows:
        if single and r["ns_per_step"] is not None:
            r["ratio_vs_single"] = r["ns_per_step"] / single
    return rows


def machine_info() -> dict[str, Any]:
    """The versions, and the CPU every figure was measured on: its model, the CPU numba compiled
    for and that target's vector ISA (``meshnb.cpu.describe``)."""
    import numba

    facts = cpu.describe()
    return {
        "python": platform.python_version(), "numpy": np.__version__, "numba": numba.__version__,
        "machine": platform.machine(), "processor": facts["cpu"], "host_cpu": facts["host_cpu"],
        "target_cpu": facts["target_cpu"], "vector_isa": facts["vector_isa"], "cpus": os.cpu_count(),
        "date": time.strftime("%Y-%m-%d"),
    }  # fmt: skip


# --- Output ---------------------------------------------------------------------------------------


def _ns(ns: float) -> str:
    if ns >= 1e6:
        return f"{ns / 1e6:,.2f} ms"
    if ns >= 1e4:
        return f"{ns / 1e3:,.1f} us"
    return f"{ns:,.1f} ns"


def format_table(rows: Sequence[dict[str, Any]], info: dict[str, Any] | None = None) -> str:
    """A human table of ``run_bench``'s rows."""
    head = ("path", "N", "steps/s", "per step", "vs single", "fixed/call", "first call", "JIT/first", "bits")
    lines = []
    if info:
        lines.append(
            f"meshnb bench: {info['processor']}, {info['cpus']} CPUs, loops compiled for {info['target_cpu']}: "
            f"{info['vector_isa']}; Python {info['python']}, numba {info['numba']}, numpy {info['numpy']}, "
            f"{info['date']}"
        )
    table = [head]
    notes = []
    for r in rows:
        if not r["available"]:
            table.append((r["path"], str(r["systems"]), "-", "-", "-", "-", "-", "-", "not run"))
            notes.append(f"{r['path']}: {r['reason']}")
            continue
        first = f"{r['first_call_s']:.3f} s" if r["first_call_s"] is not None else "-"
        if not r["verified"]:
            m = r["mismatches"][0]
            table.append((r["path"], str(r["systems"]), "-", "-", "-", "-", first, "-", "MISMATCH"))
            notes.append(
                f"{r['path']}: trace digest differs from {r['checked_against']} on start {m['start']} "
                f"({m['got'][:16]}... != {m['expected'][:16]}...): no figure"
            )
            continue
        ratio = f"{r['ratio_vs_single']:,.2f}x" if r["ratio_vs_single"] is not None else "-"
        fixed = _ns(r["fixed_s_per_call"] * 1e9) if r.get("fixed_s_per_call") is not None else "-"
        table.append(
            (r["path"], str(r["systems"]), f"{r['steps_per_s']:,.0f}", _ns(r["ns_per_step"]), ratio, fixed, first,
             f"{r['jit_s']:.3f} s", f"ok ({r['verify_starts']}x{r['verify_steps']} steps)")
        )  # fmt: skip
    widths = [max(len(row[i]) for row in table) for i in range(len(head))]
    right = {1, 2, 3, 4, 5, 6, 7}
    for k, row in enumerate(table):
        cells = [c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(row, widths))]
        lines.append("  ".join(cells).rstrip())
        if k == 0:
            lines.append("  ".join("-" * w for w in widths))
    lines.append("per step: median wall time of a whole call / its steps (clusters: one lockstep step of all N)")
    lines.append("fixed/call: what a call costs besides its steps (from two call sizes)")
    lines.append(
        "first call: this process's first call (JIT compile or cache load, start-up); "
        "JIT/first: first call - a steady call of the same size"
    )
    lines.extend(notes)
    return "\n".join(lines)


def main(seconds: float | None, quick: bool, as_json: bool, paths: Sequence[str] | None) -> int:
    """The ``meshnb bench`` command (parsing is in :mod:`meshnb.cli`)."""
    import json

    if seconds is None:
        seconds = QUICK_SECONDS if quick else DEFAULT_SECONDS
    info = machine_info()

    def progress(row: dict[str, Any]) -> None:
        if not as_json and sys.stderr.isatty():
            state = "done" if row["available"] else "not run"
            print(f"  {row['path']}: {state}", file=sys.stderr)

    rows = run_bench(seconds, quick=quick, paths=paths, progress=progress)
    if as_json:
        print(json.dumps({"machine": info, "seconds_per_path": seconds, "quick": quick, "paths": rows}))
    else:
        print(format_table(rows, info))
    return 0 if all(r["verified"] is not False for r in rows) else 1


# The old name had two roles (a file's path is pathlib.Path): it still works this release, with a warning.
_RENAMED = {"Path": "BenchPath"}


def __getattr__(name: str) -> object:
    """The renamed names, deprecated (``Path`` is :class:`BenchPath`)."""
    if name in _RENAMED:
        import warnings

        warnings.warn(f"{__name__}.{name} is {_RENAMED[name]} now", DeprecationWarning, stacklevel=2)
        return globals()[_RENAMED[name]]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
