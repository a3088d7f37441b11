"""Start-up of ``meshnb train --steps 64``, this tree against another commit's, interleaved (issue 35, item 5).

    .venv/bin/python bench/startup_table.py --before 9043227 --rounds 7

The other commit is exported with ``git archive`` into a temporary directory (no worktree, no
checkout), and each round runs, in turn, both trees warm (each with a numba cache of its own,
filled first) and both cold (a new empty ``NUMBA_CACHE_DIR`` each run), so that the machine's
other load falls on both alike.  Each run's JSON is checked against the first one's, bit for bit.
Prints a Markdown table: medians of wall and CPU (user + system) seconds, with the CPU, its
vector ISA, and the load average before and after.  Python writes and reuses its bytecode caches
as an installed package does (``PYTHONDONTWRITEBYTECODE`` is dropped: with it, every run compiles
meshnb's sources again, 0.15-0.3 s of a warm start); ``--dont-write-bytecode`` keeps it.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
COMMAND = ["-m", "meshnb", "train", "--steps", "64", "--json", "--no-progress"]


def cpu_line() -> str:
    """The CPU's model name and widest vector ISA, from ``lscpu`` (where there is one)."""
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return platform.processor() or platform.machine()
    fields = dict(line.split(":", 1) for line in out.splitlines() if ":" in line)
    flags = fields.get("Flags", "").split()
    isa = "AVX-512" if "avx512f" in flags else "AVX2" if "avx2" in flags else "no AVX2"
    return f"{fields.get('Model name', '?').strip()}, {fields.get('CPU(s)', '?').strip()} CPUs, {isa}"


def run(tree: Path, cache: Path, bytecode: bool = True) -> tuple[float, float, str]:
    """One ``meshnb train --steps 64`` of ``tree`` with numba's cache in ``cache``: wall and CPU
    seconds, and its JSON output."""
    env = dict(os.environ, PYTHONPATH=str(tree), NUMBA_CACHE_DIR=str(cache))
    if bytecode:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    out = subprocess.run([sys.executable, *COMMAND], env=env, cwd=tree, capture_output=True, text=True, check=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, out.stdout


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", required=True, help="the commit to compare with (git rev)")
    parser.add_argument("--rounds", type=int, default=7, help="rounds (each runs all four), >= 5 for the docs")
    parser.add_argument("--dont-write-bytecode", action="store_true", help="keep PYTHONDONTWRITEBYTECODE")
    args = parser.parse_args()
    bytecode = not args.dont_write_bytecode
    with tempfile.TemporaryDirectory(prefix="meshnb-startup-") as tmp:
        old = Path(tmp) / "before"
        old.mkdir()
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", args.before], capture_output=True, check=True)
        subprocess.run(["tar", "-x", "-C", str(old)], input=archive.stdout, check=True)
        trees = {"before": old, "after": ROOT}
        warm = {name: Path(tmp) / f"warm-{name}" for name in trees}
        want = None
        for name, tree in trees.items():  # fill each warm cache, and check the two trees' bits
            warm[name].mkdir()
            _, _, out = run(tree, warm[name], bytecode)
            want = want or json.loads(out)
            assert json.loads(out) == want, f"{name}: other bits"
        times: dict[tuple[str, str], list[tuple[float, float]]] = {}
        load0 = os.getloadavg()
        for r in range(args.rounds):
            for cache in ("warm", "cold"):
                for name, tree in trees.items() if r % 2 == 0 else reversed(trees.items()):
                    where = warm[name] if cache == "warm" else Path(tempfile.mkdtemp(dir=tmp))
                    wall, cpu, out = run(tree, where, bytecode)
                    assert json.loads(out) == want, f"{name} {cache}: other bits"
                    times.setdefault((name, cache), []).append((wall, cpu))
        load1 = os.getloadavg()

    def med(name: str, cache: str, i: int) -> float:
        return statistics.median(t[i] for t in times[(name, cache)])

    print(f"CPU: {cpu_line()}; Python {platform.python_version()}; load average {load0[0]:.2f} -> {load1[0]:.2f}")
    pyc = "bytecode cached" if bytecode else "PYTHONDONTWRITEBYTECODE=1"
    print(f"medians of {args.rounds}, seconds (wall / CPU); before = {args.before}; {pyc}\n")
    print("| cache | before | after |")
    print("| --- | ---: | ---: |")
    for cache in ("warm", "cold"):
        cells = [f"{med(n, cache, 0):.2f} / {med(n, cache, 1):.2f}" for n in trees]
        print(f"| {cache} | {cells[0]} | {cells[1]} |")


if __name__ == "__main__":
    main()
