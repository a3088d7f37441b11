"""``meshnb bench``: structure of its report, and no figure for a path whose bits differ."""

from __future__ import annotations

import json

import pytest

from meshnb import bench, cpu
from meshnb.cli import main

CORE_PATHS = ("single", "single-one-task", "numpy", "python")


@pytest.fixture(scope="module")
def quick_report() -> dict:
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(["bench", "--quick", "--json"])
    assert code == 0
    return json.loads(out.getvalue())


@pytest.mark.slow
def test_quick_json_reports_every_path_verified(quick_report):
    assert quick_report["quick"] is True
    assert {"python", "numba", "numpy", "cpus", "processor", "date"} <= set(quick_report["machine"])
    # Every figure names the CPU and the vector ISA the loops were compiled for.
    facts = cpu.describe()
    machine = quick_report["machine"]
    assert machine["processor"] == facts["cpu"] and machine["vector_isa"] == facts["vector_isa"]
    assert machine["target_cpu"] == facts["target_cpu"] and machine["host_cpu"] == facts["host_cpu"]
    rows = {r["path"]: r for r in quick_report["paths"]}
    assert set(CORE_PATHS) <= set(rows)
    assert {"fused-8", "threads-2", "processes-2"} <= set(rows)  # every cluster backend of the registry
    for name, r in rows.items():
        assert r["available"], (name, r["reason"])
        assert r["verified"] is True, (name, r["mismatches"])
        assert r["verify_steps"] > 0 and r["verify_starts"] >= 1
        assert r["ns_per_step"] > 0 and r["steps_per_s"] == pytest.approx(1e9 / r["ns_per_step"])
        assert r["first_call_s"] >= 0 and r["jit_s"] >= 0
        assert r["calls"] >= 3 and r["steps_per_call"] >= 1
        assert r["ratio_vs_single"] > 0
    assert rows["single"]["ratio_vs_single"] == pytest.approx(1.0)
    assert rows["single"]["checked_against"] == "numpy reference"
    # The baselines are far slower than meshnb (a loose bound: the machine may be busy).
    assert rows["numpy"]["ns_per_step"] > 10 * rows["single"]["ns_per_step"]


def test_a_path_whose_bits_differ_gets_no_figure(capsys):
    broken = bench.BenchPath("broken", "a path that gets the bits wrong", lambda s, n: "0" * 64, 4)
    rows = bench.run_bench(0.05, quick=True, paths=["single", "broken"], extra_paths=[broken], clusters=False)
    assert [r["path"] for r in rows] == ["single", "broken"]
    bad = rows[1]
    assert bad["verified"] is False and bad["mismatches"]
    assert bad["ns_per_step"] is None and bad["steps_per_s"] is None and bad["ratio_vs_single"] is None
    table = bench.format_table(rows)
    line = next(line for line in table.splitlines() if line.startswith("broken"))
    assert "MISMATCH" in line and "ns" not in line and "us" not in line
    assert "broken: trace digest differs" in table


def test_human_table_and_bad_path_name(capsys):
    assert main(["bench", "--seconds", "0.05", "--quick", "--paths", "single,numpy"]) == 0
    out = capsys.readouterr().out
    assert "steps/s" in out and "JIT/first" in out
    head = out.splitlines()[0]
    assert cpu.model_name() in head and f"loops compiled for {cpu.target_name()}: {cpu.target_shape()}" in head
    assert any(line.startswith("single ") and "ok (" in line for line in out.splitlines())
    assert main(["bench", "--paths", "nosuch"]) == 2
    assert "unknown path" in capsys.readouterr().err


def test_the_old_name_of_a_bench_path_warns() -> None:
    import pytest

    from meshnb import bench

    with pytest.warns(DeprecationWarning, match="bench.Path is BenchPath now"):
        assert bench.Path is bench.BenchPath
    with pytest.raises(AttributeError, match="no attribute 'Nothing'"):
        bench.Nothing  # noqa: B018


def test_varied_starts_are_seeded_pages_and_measure_checks_bits_first():
    a, b = bench.varied_starts(2)
    assert (len(a.page), hex(a.lr_bits), a.step_base < 2**40, a.page != b.page) == (4096, "0x3ef829f0", True, True)
    assert bench.varied_starts(2)[0] == a  # seeded
    single = bench.default_paths(clusters=False)[0]
    row = bench.measure(single, bench.varied_starts(1), 0.05, 16)  # bits first (16 steps), then 0.05 s of timing
    assert (row["path"], row["verified"], row["steps_per_s"] > 0) == ("single", True, True)
