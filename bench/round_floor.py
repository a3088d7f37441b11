"""The C floor of a lockstep round (issue 35): build ``round_floor.c``, check every member's fold
digest against numpy's, and time its rounds beside meshnb's threads and processes rounds.

Used by ``bench/test_bench_round_floor.py`` and by ``meshnb bench`` (paths ``round-c-floor-*``,
found when the source checkout's ``bench/`` is beside the package).  The C runs only the round:
the exchange page's counters and slots (meshnb's layout, 128 bytes a system), a release store,
acquire loads, the fold of the slots in system order; no step.  Its policies are meshnb's
(``spin``: pause only, the floor; ``yield``: pause then ``sched_yield``; ``futex``: a learnt spin,
then a futex sleep its publisher wakes), for members that are threads or processes.

meshnb's round is timed as a marginal time a round,
from two run lengths in one process (the difference of their step times over the difference of
their rounds: start-up, warm-up and the trace's digest cancel).
"""

from __future__ import annotations

import platform
import shutil
import statistics
import subprocess
from collections.abc import Callable
from pathlib import Path

import numpy as np

SOURCE = Path(__file__).with_name("round_floor.c")
POLICIES = ("spin", "yield", "futex")
MEMBERS = ("threads", "processes")


def unavailable() -> str | None:
    """Why the floor cannot run here (None when it can)."""
    if platform.machine().lower() not in ("x86_64", "amd64"):
        return "the C round floor needs an x86-64 CPU (the pause hint)"
    if platform.system() != "Linux":
        return "the C round floor needs Linux (futexes)"
    if shutil.which("gcc") is None:
        return "no C compiler (gcc) found"
    if not SOURCE.is_file():
        return f"{SOURCE} is not here (a source checkout has it)"
    return None


def build(out_dir: str | Path) -> Path:
    """Compile the floor (``gcc -O2 -pthread``) into ``out_dir`` (the caller removes it); the program's path."""
    folder = Path(out_dir)
    exe = folder / "round_floor"
    subprocess.run(["gcc", "-O2", "-pthread", "-o", str(exe), str(SOURCE)], check=True, capture_output=True)
    return exe


def expected_digest(n: int, rounds: int) -> int:
    """Every member's digest, in numpy: the fold of the N members' sums of each round in system
    order (float32 adds), its words summed with weights (r + 1)(j + 1), mod 2^64.

    Examples
    --------
    >>> hex(expected_digest(2, 200000))
    '0xf56c856df026c000'
    """
    r = np.arange(rounds, dtype=np.int64)
    total = np.zeros(rounds, dtype=np.uint64)
    for j in range(5):
        fold = ((1 * (j + 1) + (r & 255)).astype(np.float32) / np.float32(8)).astype(np.float32)
        for k in range(1, n):
            fold = (fold + ((k + 1) * (j + 1) + (r & 255)).astype(np.float32) / np.float32(8)).astype(np.float32)
        weight = (r.astype(np.uint64) + np.uint64(1)) * np.uint64(j + 1)
        total += weight * fold.view(np.uint32).astype(np.uint64)  # uint64 arithmetic wraps: mod 2^64
    return int(total.sum(dtype=np.uint64))


def run(exe: Path, n: int, rounds: int, policy: str, members: str) -> tuple[float, list[int]]:
    """One run of the floor: (ns a round, every member's digest)."""
    out = subprocess.run(
        [str(exe), str(n), str(rounds), policy, members], check=True, capture_output=True, text=True, timeout=600
    ).stdout.split()
    return int(out[0]) / rounds, [int(d, 16) for d in out[1:]]


def checked_run(exe: Path, n: int, rounds: int, policy: str, members: str) -> float:
    """:func:`run`, every member's digest checked against numpy's first; ns a round."""
    ns, digests = run(exe, n, rounds, policy, members)
    want = expected_digest(n, rounds)
    if digests != [want] * n:
        raise AssertionError(f"round floor {policy}/{members} N={n}: digests {digests} != {want:#x}")
    return ns


def marginal_round_ns(backend: str, n: int, short: int, long: int, repeats: int = 3) -> float:
    """meshnb's marginal time of a round on ``backend`` with ``n`` members: the median over
    ``repeats`` of (seconds of ``long`` steps - seconds of ``short`` steps) / (long - short),
    both runs in this process (``RunResult.seconds``: the steps alone), bits checked by every run
    (all members' trace digests equal)."""
    import meshnb

    got = []
    for _ in range(repeats):
        secs = []
        for steps in (short, long):
            r = meshnb.train(steps, systems=n, backend=backend)
            if len({s.trace_digest for s in r.systems}) != 1:
                raise AssertionError(f"{backend}-{n}: the members' trace digests differ")
            secs.append(r.seconds)
        got.append((secs[1] - secs[0]) / (long - short) * 1e9)
    return statistics.median(got)


def interleaved(fns: dict[str, Callable[[], float]], repeats: int) -> dict[str, float]:
    """Median of each of ``fns`` (ns a round), called in turn ``repeats`` times, so that a shared
    machine's load falls on all alike."""
    got: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(repeats):
        for k, fn in fns.items():
            got[k].append(fn())
    return {k: statistics.median(v) for k, v in got.items()}


def load_average() -> float:
    """The one-minute load average (what a figure was measured beside)."""
    try:
        return float(Path("/proc/loadavg").read_text().split()[0])
    except OSError:
        return float("nan")
