"""meshnb's pytest-benchmark suite (issue 5): shared sizes, start pages, and the ratio table.

Run (the ``bench/`` directory is outside ``testpaths``, so a plain ``python -m pytest`` runs only
``tests/``)::

    python -m pytest bench --benchmark-only                 # full run: timings + ratio table
    python -m pytest bench --benchmark-disable -q           # smoke (CI): every benchmark once, short sizes

Short sizes (10^4 instead of 10^6 steps, ...) are used when ``MESHNB_BENCH_SHORT=1``, with
``--bench-short``, or whenever timing is disabled (``--benchmark-disable``);
``MESHNB_BENCH_SHORT=0`` forces the full sizes.

Conventions for every benchmark of the session (any file in ``bench/``), read by the ratio table
printed at the end of the run:

- ``benchmark.extra_info["path"]``: a short unique name ("single", "numpy", "fused-8",
  "threads-2", "processes-2", "mpi-raw-2", ...);
- ``benchmark.extra_info["steps"]``: steps (cluster: lockstep steps or rounds) in one timed
  call, so that per-step time = median / steps (``record`` below sets both);
- ``benchmark.extra_info["systems"]``: systems per step (default 1);
- ``benchmark.extra_info["unit"]``: "step" (default), "round", "call" (kernel benches) or
  "process" (start-up benches: no ratio to a step).

The table gives each path's median ns/step and its ratio to "single" (meshnb.train of 10^6 steps
at the default STEPS_PER_TASK), then the issue's targets that this run can check.
"""

from __future__ import annotations

import os
from typing import Any

import pytest

from meshnb import cpu
from meshnb.bench import KNOWN_NS_PER_STEP, varied_starts

# The targets: (label, numerator path, denominator path or None, bound, "<=" | ">=");
# a bound of None only shows the figure.
TARGETS: tuple[tuple[str, str, str | None, float | None, str], ...] = (
    ("python baseline / single", "python", "single", None, ""),
    ("single system: ns/step <= 100 (goal <= 32, 2x the 16 ns C)", "single", None, 100.0, "<="),
    ("numpy baseline / single >= 1000", "numpy", "single", 1000.0, ">="),
    ("single loop steps / the C anchor in this run <= 1.25 (goal 1.1)", "loop-steps", "c-anchor", 1.25, "<="),
    ("fused N=8 step / single step <= 8", "fused-8", "single", 8.0, "<="),
    ("processes N=2 round / raw MPI collective (N=2) <= 4", "processes-2", "mpi-raw-2", 4.0, "<="),
    # issue 35, item 5: on a 2-core AVX2 machine (issue 5's bound was 1.5 s warm)
    ("warm start-up of `meshnb train --steps 64` <= 0.7 s", "startup-warm", None, 0.7e9, "<="),
    ("cold start-up (empty numba cache) <= 2.5 s", "startup-cold", None, 2.5e9, "<="),
    # SHA-256 of 20 bytes a step is ~11 ns on one core; drive_alone hashes on the second core
    # while the next chunk runs, so what is left is the trace stores and the shared core.
    ("trace recording: single with trace / without <= 1.15 (a small fraction)", "single", "single-notrace", 1.15, "<="),
    ("fused N=2 with checkpoints / without <= 1.2 (goal 1.05)", "fused-2-checkpoint", "fused-2", 1.2, "<="),
    ("threads N=2 round / processes N=2 round <= 2 (goal 1.2)", "threads-2", "processes-2", 2.0, "<="),
    # A sweep's systems are independent, so it is bound by throughput, not by one step's chain:
    # one system-step of a 1024-system sweep against one step of the single loop, same run.
    ("sweep of 1024: system-step / single step <= 1/6 (goal 1/10)", "sweep-1024", "sweep-single", 1 / 6, "<="),
    ("sweep of 1024 on one thread: system-step / single step", "sweep-1024-1thread", "sweep-single", None, ""),
    (
        "sweep of 1024: system-step / step of the single loop alone (no trace)",
        "sweep-1024",
        "sweep-single-loop",
        None,
        "",
    ),
    # A 16-step system's message shares 15 of its 17 blocks with its group's (no step wrote them).
    ("a batch's results after 16 steps / after 300 (no block shared)", "finish-lanes-16", "finish-lanes-300", None, ""),
)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--bench-short",
        action="store_true",
        default=False,
        help="meshnb benches: small sizes (also MESHNB_BENCH_SHORT=1, and implied by --benchmark-disable)",
    )


def is_short(config: pytest.Config) -> bool:
    env = os.environ.get("MESHNB_BENCH_SHORT", "").strip().lower()
    if env:
        return env not in ("0", "false", "no", "off")
    bs = getattr(config, "_benchmarksession", None)
    return bool(config.getoption("--bench-short") or (bs is not None and bs.disabled))


@pytest.fixture(scope="session")
def short(pytestconfig: pytest.Config) -> bool:
    return is_short(pytestconfig)


@pytest.fixture(scope="session")
def sizes(short: bool) -> dict[str, int]:
    """Steps per timed call and rounds of each benchmark; ``verify``: steps of every bit check."""
    if short:
        return {
            "run": 10_000,
            "fused": 1_000,
            "numpy": 8,
            "python": 2,
            "pool": 16,
            "rounds": 1,
            "verify": 256,
            "verify_starts": 2,
        }
    return {
        "run": 1_000_000,
        "fused": 100_000,
        "numpy": 200,
        "python": 40,
        "pool": 256,
        "rounds": 5,
        "verify": 256,
        "verify_starts": 4,
    }


@pytest.fixture(scope="session")
def starts(sizes: dict[str, int]) -> list:
    """Varied start pages (perturbed params, LR and step base), as ``meshnb.bench.BenchStart``."""
    return varied_starts(max(sizes["verify_starts"], 4))


_RECORDED: list[str] = []  # every labelled benchmark of the session, timed or not


def _record(benchmark: Any, path: str, steps: int, systems: int = 1, unit: str = "step") -> None:
    benchmark.extra_info.update(path=path, steps=steps, systems=systems, unit=unit)
    _RECORDED.append(path)


@pytest.fixture(scope="session")
def record() -> Any:
    """``record(benchmark, path, steps, systems=1, unit="step")``: label a benchmark for the table.

    ``unit`` names what ``steps`` counts: "step" (a lockstep step of all systems), "round" (an
    exchange round), "call" (a kernel call) or "process" (a whole run of a new process)."""
    return _record


# ---------------------------------------------------------------------------------------------
# The ratio table
# ---------------------------------------------------------------------------------------------


def _fmt_ns(ns: float) -> str:
    if ns >= 1e9:
        return f"{ns / 1e9:,.3f} s"
    if ns >= 1e6:
        return f"{ns / 1e6:,.2f} ms"
    if ns >= 1e4:
        return f"{ns / 1e3:,.1f} us"
    return f"{ns:,.1f} ns"


def per_step_medians(benchmarks: list) -> dict[str, dict[str, Any]]:
    """path -> median ns/step (and the benchmark's name) for every timed benchmark with steps."""
    out: dict[str, dict[str, Any]] = {}
    for b in benchmarks:
        info = getattr(b, "extra_info", {}) or {}
        steps = info.get("steps")
        if not steps or not b or getattr(b, "has_error", False):
            continue
        path = info.get("path") or b.name
        out[path] = {
            "ns": b.stats.median / steps * 1e9,
            "iqr_ns": b.stats.iqr / steps * 1e9,
            "rounds": b.stats.rounds,
            "systems": info.get("systems", 1),
            "unit": info.get("unit", "step"),
            "name": b.name,
            "group": b.group,
            "marginal": info.get("marginal"),
        }
    return out


def ratio_table(rows: dict[str, dict[str, Any]]) -> list[str]:
    """The lines of the ratio table (markdown)."""
    single = rows.get("single", {}).get("ns")
    lines = [
        "| path | N | per | median | IQR | rounds | vs single | vs C AVX+DAZ (16 ns/step) | benchmark |",
        "| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for path, r in sorted(rows.items(), key=lambda kv: kv[1]["ns"]):
        ratio = f"{r['ns'] / single:,.2f}x" if single and r["unit"] != "process" else "-"
        vs_c = r["ns"] / KNOWN_NS_PER_STEP["C AVX, DAZ on, outputs flushed"]
        vs_c_text = f"{vs_c:,.1f}x" if r["unit"] == "step" else "-"
        lines.append(
            f"| {path} | {r['systems']} | {r['unit']} | {_fmt_ns(r['ns'])} | {_fmt_ns(r['iqr_ns'])} | "
            f"{r['rounds']} | {ratio} | {vs_c_text} | {r['name']} |"
        )
    lines.append("")
    for label, num, den, bound, op in TARGETS:
        if num not in rows or (den is not None and den not in rows):
            missing = num if num not in rows else den
            lines.append(f"- {label}: not measured in this run (no '{missing}' benchmark)")
            continue
        value = rows[num]["ns"] / rows[den]["ns"] if den else rows[num]["ns"]
        shown = f"{value:,.2f}x" if den else _fmt_ns(value)
        if bound is None:
            lines.append(f"- {label}: {shown}")
            continue
        ok = value <= bound if op == "<=" else value >= bound
        lines.append(f"- {label}: {shown} -> {'met' if ok else 'NOT met'}")
    for path, r in sorted(rows.items()):
        m = r.get("marginal")  # a cost per system measured as the slope between two sizes (issue 25)
        if m:
            verdict = f" -> {'met' if m['ns'] <= m['target_ns'] else 'NOT met'}" if m.get("target_ns") else ""
            lines.append(
                f"- {path}: {m['label']}: {_fmt_ns(m['ns'])} a system (wall, {m['small']} -> {m['big']} systems; "
                f"target <= {_fmt_ns(m['target_ns'])}){verdict}"
            )
    lines.append(
        "- the issue's figures for this kind of machine, per step: "
        + ", ".join(f"{k} ~{_fmt_ns(v)}" for k, v in KNOWN_NS_PER_STEP.items())
    )
    return lines


def pytest_benchmark_update_machine_info(config: pytest.Config, machine_info: dict[str, Any]) -> None:
    """pytest-benchmark's machine info (its JSON, ``--benchmark-json``/``--benchmark-save``) names
    the CPU the figures come from and the vector ISA numba compiled the loops for."""
    machine_info["meshnb_cpu"] = cpu.describe()


def cpu_line() -> str:
    """One line naming the CPU and the vector ISA of the compiled loops, for every table."""
    d = cpu.describe()
    return f"CPU: {d['cpu']} ({d['machine']}, {d['host_cpu']}); loops compiled for {d['target_cpu']}: {d['vector_isa']}"


@pytest.hookimpl(trylast=True)
def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    bs = getattr(config, "_benchmarksession", None)
    if bs is None:
        return
    tr = terminalreporter
    if bs.disabled:
        if _RECORDED:
            tr.ensure_newline()
            tr.section("meshnb bench smoke")
            tr.write_line(cpu_line())
            tr.write_line(
                f"{len(_RECORDED)} benchmarks ran once each (timing disabled, "
                f"{'short' if is_short(config) else 'full'} sizes): {', '.join(_RECORDED)}"
            )
        return
    ours = [b for b in bs.benchmarks if (getattr(b, "extra_info", None) or {}).get("steps")]
    if not ours:
        return
    tr.ensure_newline()
    rows = per_step_medians(ours)
    tr.section("meshnb: median time per step and ratios")
    tr.write_line(cpu_line())
    for line in ratio_table(rows):
        tr.write_line(line)
