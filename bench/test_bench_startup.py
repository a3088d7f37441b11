"""Start-up (issue 5, item 4; issue 35, item 5): wall time of ``meshnb train --steps 64`` in a new process.

- cold: numba's cache empty (``NUMBA_CACHE_DIR`` a new empty directory each round), so every
  kernel is compiled;
- warm: numba's usual cache (beside the package, or wherever ``NUMBA_CACHE_DIR`` already
  points), filled by an earlier run: the usual case after the first run;
- cold-avx2 (x86 only): cold, with the code compiled for an AVX2 CPU (``NUMBA_CPU_NAME=haswell``),
  as on the many machines without AVX-512 (the compile differs with the target's vector ISA).

Each run's JSON output is checked against ``meshnb.train(64)`` in this process, bit for bit.

Side by side with an earlier commit: ``MESHNB_BENCH_STARTUP_BEFORE=REV`` (a git revision) adds
the same warm and cold runs of that commit's tree (``git archive``d into a temporary directory,
run with ``PYTHONPATH`` on it and a numba cache of its own) as ``startup-warm-before``,
``startup-cold-before``.  pytest-benchmark times one path after the other; for the docs' table,
``bench/startup_table.py --before REV`` interleaves the two trees' runs round by round (medians,
CPU and load average), which a shared machine needs.
The same figures from a shell, with hyperfine::

    hyperfine -N --warmup 2 'env NUMBA_CACHE_DIR=/tmp/nbwarm meshnb train --steps 64'
    hyperfine -N --runs 3 --prepare 'bash -c "rm -rf /tmp/nbcold && mkdir /tmp/nbcold"' \\
        'env NUMBA_CACHE_DIR=/tmp/nbcold meshnb train --steps 64'
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import meshnb
from meshnb import cpu

BEFORE = os.environ.get("MESHNB_BENCH_STARTUP_BEFORE", "").strip()
ROOT = Path(__file__).resolve().parent.parent


def _command(tree: Path | None) -> list[str]:
    script = Path(sys.executable).with_name("meshnb")
    prefix = [str(script)] if script.exists() and tree is None else [sys.executable, "-m", "meshnb"]
    return prefix + ["train", "--steps", "64", "--json", "--no-progress"]


def _run(cache_dir: Path | None, cpu_name: str | None = None, tree: Path | None = None) -> dict:
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # bytecode cached, as an installed package runs
    if cache_dir is not None:
        env["NUMBA_CACHE_DIR"] = str(cache_dir)
    if cpu_name is not None:  # an AVX2 target whatever the host has (the name alone keeps its features)
        env["NUMBA_CPU_NAME"] = cpu_name
        env["NUMBA_CPU_FEATURES"] = ""
    if tree is not None:
        env["PYTHONPATH"] = str(tree)
    out = subprocess.run(_command(tree), env=env, capture_output=True, text=True, check=True, timeout=300, cwd=tree)
    return json.loads(out.stdout)


@pytest.fixture(scope="module")
def before_tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tree of ``MESHNB_BENCH_STARTUP_BEFORE``, exported (no checkout, no worktree)."""
    tree = tmp_path_factory.mktemp("before")
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", BEFORE], capture_output=True, check=True)
    subprocess.run(["tar", "-x", "-C", str(tree)], input=archive.stdout, check=True)
    return tree


TREES = ["now"] + (["before"] if BEFORE else [])


@pytest.mark.parametrize("tree", TREES)
@pytest.mark.parametrize("cache", ["warm", "cold", "cold-avx2"])
def test_startup(benchmark, record, short, tmp_path, cache, tree, request):
    if cache == "cold-avx2" and not cpu.IS_X86_64:
        pytest.skip("AVX2 is an x86 ISA")
    where = request.getfixturevalue("before_tree") if tree == "before" else None
    want = meshnb.train(64).to_json()
    fresh = iter(range(10**6))
    warm = tmp_path / "warm" if tree == "before" else None  # the earlier tree's own numba cache

    def setup():
        if cache == "warm":
            return (warm, None, where), {}
        d = tmp_path / f"cold{next(fresh)}"
        d.mkdir()
        return (d, "haswell" if cache == "cold-avx2" else None, where), {}

    if cache == "warm":
        if warm is not None:
            warm.mkdir()
        assert _run(warm, None, where) == want  # fills the cache if it is not yet; the bits match
    record(benchmark, f"startup-{cache}" + ("-before" if tree == "before" else ""), 1, unit="process")
    benchmark.group = "start-up"
    rounds = 1 if short else (10 if cache == "warm" else 5)
    got = benchmark.pedantic(_run, setup=setup, rounds=rounds, iterations=1)
    assert got == want
