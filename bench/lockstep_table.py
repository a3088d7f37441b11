"""Issue 35's table: ``meshnb train --systems N --backend B --steps S``, quiet and beside busy loops.

    .venv/bin/python bench/lockstep_table.py --runs 2
    .venv/bin/python bench/lockstep_table.py --rows threads-2 processes-2 --waits futex yield
    .venv/bin/python bench/lockstep_table.py --rounds --steps 600000 --rows threads-2 processes-2 --pins on off

Each row is a backend and a cluster size (``fused-N``, ``threads-N``, ``processes-N``, ``mpi-N``:
``mpiexec -n N`` beside this Python, skipped where there is none) and a round wait
(``MESHNB_ROUND_WAIT``: ``program.ROUND_WAITS``' names; ``default`` sets none).  Every run is timed
wall-clock, start-up included, as a user sees it; rows are interleaved run by run, so that the
machine's other load falls on all alike; then the same again beside ``--busy`` busy loops
(``python3 -c "while True: pass"``, killed after).  Every run's digests are checked against the
fused run's of the same N (the bits first: a faster wrong run is no figure).  Prints a Markdown
table (each run's seconds, and busy / quiet of the medians), the CPU and the load averages.

``--rounds`` times the rounds alone instead: each run is a new process that runs the cluster once
(its warm-up, 1000 steps) and then ``--steps`` steps, and reports ``RunResult.seconds`` (the steps,
without start-up and JIT) a round, in ns (not for ``mpi-N``).  ``--pins on off`` runs each
threads and processes row also with ``MESHNB_PIN_MEMBERS=0`` (the members left to the
scheduler), interleaved.
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


# --rounds: one warm run, then the timed one; the steps' own seconds a round and the digests
ROUNDS = """
import json, sys
import meshnb
if __name__ == "__main__":
    backend, n, steps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    meshnb.train(1000, systems=n, backend=backend)
    r = meshnb.train(steps, systems=n, backend=backend)
    print(json.dumps({"ns": r.seconds / steps * 1e9, "systems": [s.to_json() for s in r.systems]}))
"""


def run(row: str, wait: str, steps: int, pin: str = "on", rounds: bool = False) -> tuple[float, set[str]]:
    """One run: wall seconds (``rounds``: ns a round of the steps alone) and the set of its
    systems' digests (page and trace)."""
    env = dict(os.environ)
    env.pop("MESHNB_ROUND_WAIT", None)
    env.pop("MESHNB_PIN_MEMBERS", None)
    if wait != "default":
        env["MESHNB_ROUND_WAIT"] = wait
    if pin == "off":
        env["MESHNB_PIN_MEMBERS"] = "0"
    backend, n = row.rsplit("-", 1)
    argv = [sys.executable, "-c", ROUNDS, backend, n, str(steps)] if rounds else command(row, steps)
    start = time.perf_counter()
    out = subprocess.run(argv, env=env, cwd=ROOT, capture_output=True, text=True, check=True)
    wall = time.perf_counter() - start
    doc = json.loads(out.stdout.strip().splitlines()[-1])  # mpi: the coordinator's one line
    return (doc["ns"] if rounds else wall), {s["digest"] + s["trace_digest"] for s in doc["systems"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", nargs="+", default=ROWS, help="backend-N rows (default: all eight)")
    parser.add_argument(
        "--waits", nargs="+", default=["default"], help="MESHNB_ROUND_WAIT names, for threads and processes"
    )
    parser.add_argument("--steps", type=int, default=60000)
    parser.add_argument("--runs", type=int, default=2, help="runs of each row, quiet and busy")
    parser.add_argument("--busy", type=int, default=2, help="busy loops beside the second column")
    parser.add_argument("--rounds", action="store_true", help="ns a round of the steps alone, not a command's wall")
    parser.add_argument(
        "--pins", nargs="+", default=["on"], choices=["on", "off"], help="members pinned (threads, processes)"
    )
    args = parser.parse_args()
    have_mpi = shutil.which("mpiexec", path=str(Path(sys.executable).parent)) or shutil.which("mpiexec")
    cases = []
    for row in args.rows:
        if row.startswith("mpi") and (not have_mpi or args.rounds):
            print(f"{row}: skipped ({'--rounds' if args.rounds else 'no mpiexec'})", file=sys.stderr)
            continue
        local = row.split("-")[0] in ("threads", "processes")
        cases += [(row, w, p) for w in (args.waits if local else ["default"]) for p in (args.pins if local else ["on"])]
    sizes = {r.rsplit("-", 1)[1] for r, _, _ in cases}
    want = {n: run(f"fused-{n}", "default", args.steps, rounds=args.rounds)[1] for n in sizes}
    times: dict[tuple[str, str, str, bool], list[float]] = {}
    loads: dict[bool, list[float]] = {False: [], True: []}
    for busy in (False, True):
        loops = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.busy if busy else 0)]
        try:
            time.sleep(1.0 if busy else 0.0)  # the loops running before the first run
            for _ in range(args.runs):
                for row, wait, pin in cases:
                    loads[busy].append(os.getloadavg()[0])
                    took, got = run(row, wait, args.steps, pin, args.rounds)
                    if got != want[row.rsplit("-", 1)[1]]:
                        raise SystemExit(f"{row} {wait}: its digests are not the fused run's")
                    times.setdefault((row, wait, pin, busy), []).append(took)
        finally:
            for p in loops:
                p.kill()
                p.wait()
    what = "ns a round of the steps alone" if args.rounds else "wall seconds, start-up included"
    print(f"CPU: {cpu_line()}; {args.steps} steps, {what}; {args.runs} runs each, interleaved")
    print("every run's digests the fused run's")
    quiet = f"quiet (load {min(loads[False]):.1f}-{max(loads[False]):.1f})"
    loaded = f"beside {args.busy} busy loops (load {min(loads[True]):.1f}-{max(loads[True]):.1f})"
    print(f"\n| N, backend | wait | pinned | {quiet} | {loaded} | busy / quiet |")
    print("| --- | --- | --- | ---: | ---: | ---: |")
    for row, wait, pin in cases:
        q, b = times[(row, wait, pin, False)], times[(row, wait, pin, True)]
        backend, n = row.rsplit("-", 1)
        ratio = statistics.median(b) / statistics.median(q)
        cells = " | ".join(", ".join(f"{t:.0f}" if args.rounds else f"{t:.2f}" for t in ts) for ts in (q, b))
        print(f"| {n}, {backend} | {wait} | {pin} | {cells} | {ratio:.1f}x |")


if __name__ == "__main__":
    main()
