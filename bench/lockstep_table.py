"""Issue 35's table: ``meshnb train --systems N --backend B --steps S``, quiet and beside busy loops.

    .venv/bin/python bench/lockstep_table.py --runs 2
    .venv/bin/python bench/lockstep_table.py --rows threads-2 processes-2 --waits futex yield

Each row is a backend and a cluster size (``fused-N``, ``threads-N``, ``processes-N``, ``mpi-N``:
``mpiexec -n N`` beside this Python, skipped where there is none) and a round wait
(``MESHNB_ROUND_WAIT``: ``program.ROUND_WAITS``' names; ``default`` sets none).  Every run is timed
wall-clock, start-up included, as a user sees it; rows are interleaved run by run, so that the
machine's other load falls on all alike; then the same again beside ``--busy`` busy loops
(``python3 -c "while True: pass"``, killed after).  Every run's digests are checked against the
fused run's of the same N (the bits first: a faster wrong run is no figure).  Prints a Markdown
table (each run's seconds, and busy / quiet of the medians), the CPU and the load averages.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

from startup_table import cpu_line  # bench/ is on the path, as for every bench module

ROOT = Path(__file__).resolve().parent.parent
ROWS = ["threads-2", "processes-2", "threads-4", "processes-4", "fused-2", "fused-4", "mpi-2", "mpi-4"]


def command(row: str, steps: int) -> list[str]:
    backend, n = row.rsplit("-", 1)
    train = [sys.executable, "-m", "meshnb", "train", "--systems", n, "--backend", backend]
    train += ["--steps", str(steps), "--json", "--no-progress"]
    if backend == "mpi":
        mpiexec = shutil.which("mpiexec", path=str(Path(sys.executable).parent)) or shutil.which("mpiexec")
        return [str(mpiexec), "-n", n, *train]
    return train


def run(row: str, wait: str, steps: int) -> tuple[float, set[str]]:
    """One run: wall seconds and the set of its systems' digests (page and trace)."""
    env = dict(os.environ)
    env.pop("MESHNB_ROUND_WAIT", None)
    if wait != "default":
        env["MESHNB_ROUND_WAIT"] = wait
    start = time.perf_counter()
    out = subprocess.run(command(row, steps), env=env, cwd=ROOT, capture_output=True, text=True, check=True)
    wall = time.perf_counter() - start
    text = out.stdout.strip().splitlines()[-1]  # mpi: the coordinator's one line
    systems = json.loads(text)["systems"]
    return wall, {s["digest"] + s["trace_digest"] for s in systems}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", nargs="+", default=ROWS, help="backend-N rows (default: all eight)")
    parser.add_argument(
        "--waits", nargs="+", default=["default"], help="MESHNB_ROUND_WAIT names, for threads and processes"
    )
    parser.add_argument("--steps", type=int, default=60000)
    parser.add_argument("--runs", type=int, default=2, help="runs of each row, quiet and busy")
    parser.add_argument("--busy", type=int, default=2, help="busy loops beside the second column")
    args = parser.parse_args()
    have_mpi = shutil.which("mpiexec", path=str(Path(sys.executable).parent)) or shutil.which("mpiexec")
    cases = []
    for row in args.rows:
        if row.startswith("mpi") and not have_mpi:
            print(f"{row}: skipped (no mpiexec)", file=sys.stderr)
            continue
        waits = args.waits if row.split("-")[0] in ("threads", "processes") else ["default"]
        cases += [(row, w) for w in waits]
    want = {n: run(f"fused-{n}", "default", args.steps)[1] for n in {r.rsplit("-", 1)[1] for r, _ in cases}}
    times: dict[tuple[str, str, bool], list[float]] = {}
    loads: dict[bool, list[float]] = {False: [], True: []}
    for busy in (False, True):
        loops = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.busy if busy else 0)]
        try:
            time.sleep(1.0 if busy else 0.0)  # the loops running before the first run
            for _ in range(args.runs):
                for row, wait in cases:
                    loads[busy].append(os.getloadavg()[0])
                    wall, got = run(row, wait, args.steps)
                    if got != want[row.rsplit("-", 1)[1]]:
                        raise SystemExit(f"{row} {wait}: its digests are not the fused run's")
                    times.setdefault((row, wait, busy), []).append(wall)
        finally:
            for p in loops:
                p.kill()
                p.wait()
    print(f"CPU: {cpu_line()}; {args.steps} steps; {args.runs} runs each, interleaved; every digest the fused run's")
    quiet = f"quiet (load {min(loads[False]):.1f}-{max(loads[False]):.1f})"
    loaded = f"beside {args.busy} busy loops (load {min(loads[True]):.1f}-{max(loads[True]):.1f})"
    print(f"\n| N, backend | wait | {quiet} | {loaded} | busy / quiet |\n| --- | --- | ---: | ---: | ---: |")
    for row, wait in cases:
        q, b = times[(row, wait, False)], times[(row, wait, True)]
        backend, n = row.rsplit("-", 1)
        ratio = statistics.median(b) / statistics.median(q)
        cells = " | ".join(", ".join(f"{t:.2f}" for t in ts) for ts in (q, b))
        print(f"| {n}, {backend} | {wait} | {cells} | {ratio:.1f}x |")


if __name__ == "__main__":
    main()
