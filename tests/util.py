"""Small helpers shared by the tests."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from meshnb.program import OP_TASK, Context, task


def words(hexes: list[str]) -> np.ndarray:
    """Hex strings -> uint32 words."""
    return np.array([int(h, 16) for h in hexes], dtype=np.uint32)


def hexes(ws) -> list[str]:
    """uint32 words -> 8-digit hex strings."""
    return [f"{int(w):08x}" for w in ws]


def tasks_in_turn(ctxs: list[Context], steps: int) -> None:
    """Drive the members of a cluster on one thread, a task each in turn (a timed-out round is
    retried by the next), until every one has done ``steps`` steps with no round pending."""
    while any(c.view.next_step < steps or c.view.word("PENDING") for c in ctxs):
        for ctx in ctxs:
            v = ctx.view
            if v.next_step < steps or v.word("PENDING"):
                v.set_word("STEPS_PER_TASK", max(1, steps - v.next_step))
                task(ctx, OP_TASK, v.word("NEXT_STEP"))


def meshnb_cli(*argv: str, **popen: Any) -> subprocess.Popen:
    """``python -m meshnb ARGV`` in a new process, text pipes for stdout and stderr (the one way
    the tests start the command; ``popen`` passes cwd, env, start_new_session ...)."""
    return subprocess.Popen(
        [sys.executable, "-m", "meshnb", *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **popen
    )


def run_meshnb(*argv: str, timeout: float = 300, **run: Any) -> subprocess.CompletedProcess:
    """``python -m meshnb ARGV`` to its end: the completed process, output captured as text."""
    return subprocess.run(
        [sys.executable, "-m", "meshnb", *argv], capture_output=True, text=True, timeout=timeout, **run
    )


def run_python(code: str, timeout: float = 300, **run: Any) -> subprocess.CompletedProcess:
    """``python -c CODE`` in a fresh interpreter (nothing of this process imported)."""
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout, **run)


SHM = Path("/dev/shm")


def shm_names() -> set[str]:
    """What is in /dev/shm, less MPICH's segments (an MPI job's, never a meshnb run's)."""
    return {p.name for p in SHM.iterdir() if not p.name.startswith("mpich_shm_")} if SHM.is_dir() else set()


def shm_left(before: set[str], seconds: float = 10) -> set[str]:
    """The names in /dev/shm that were not in ``before`` and that no live process maps or holds
    open, once they have had ``seconds`` to go: what this test's ended processes left behind.  A
    segment another test holds meanwhile (the other pytest worker's, another run on the machine) is
    in use by its live process, so it is not counted."""
    from meshnb.files import shm_in_use

    deadline = time.monotonic() + seconds
    while (left := (shm_names() - before) - shm_in_use(str(SHM))) and time.monotonic() < deadline:
        time.sleep(0.05)
    return left


def mpi_env(**extra: str) -> dict[str, str]:
    """The environment of an MPI job in the tests: this one, less the tests' fault hooks, with
    MPICH's progress throttle (ranks that yield: 2 cores, more ranks) and ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MESHNB_MPI_TEST")}
    env.update({"MPIR_CVAR_CH4_PROGRESS_THROTTLE": "1", "MPIR_CVAR_CH4_PROGRESS_THROTTLE_NO_PROGRESS_COUNT": "1"})
    env.update(extra)
    return env


def mpiexec() -> str:
    """The ``mpiexec`` beside this Python (the venv's, from the mpich wheel), else the one on PATH."""
    beside = Path(sys.executable).with_name("mpiexec")
    found = str(beside) if beside.exists() else shutil.which("mpiexec")
    if found is None:
        pytest.fail("mpi4py is installed but no mpiexec was found (beside python or on PATH)")
    return found


class StderrWatch:
    """Reads a process's stderr on a thread as it comes, so that a test can wait for an event the
    process reports there (``wait_for``) instead of sleeping a fixed time, and still gets the whole
    text at the end (``text()``)."""

    def __init__(self, proc: subprocess.Popen) -> None:
        assert proc.stderr is not None
        self._stream = proc.stderr
        self._chunks: list[str] = []
        self._changed = threading.Condition()
        self._done = False
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        while chunk := self._stream.read(1):  # unbuffered enough: tqdm redraws with '\r', not lines
            with self._changed:
                self._chunks.append(chunk)
                self._changed.notify_all()
        with self._changed:
            self._done = True
            self._changed.notify_all()

    def wait_for(self, seen: Callable[[str], bool], timeout: float) -> str:
        """Block until ``seen(stderr so far)``; fail the test (with the text) at ``timeout`` s or at
        the end of the stream."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while not seen(text := "".join(self._chunks)):
                left = deadline - time.monotonic()
                if self._done or left <= 0:
                    pytest.fail(f"not seen on stderr within {timeout} s (ended: {self._done}): {text[-2000:]!r}")
                self._changed.wait(left)
            return text

    def text(self, timeout: float = 60) -> str:
        """All of stderr, once the stream has ended."""
        self._thread.join(timeout)
        with self._changed:
            return "".join(self._chunks)


_BAR_COUNT = re.compile(r"\|\s*([0-9.]+)([kMGTP]?)/")


def some_steps_shown(err: str) -> bool:
    """Whether a tqdm bar of ``--progress`` on stderr has counted some steps (``| 4.19M/6.40G``): the
    command is past its start-up and the compiler, and has finished a task or chunk."""
    return any(float(n) > 0 for n, _ in _BAR_COUNT.findall(err))


def threads_taking_stop_signals(pid: int) -> list[str]:
    """The threads of process ``pid`` other than its main thread that do not block SIGINT, SIGTERM
    and SIGHUP (``SigBlk`` in /proc): those the kernel may give a stop signal to (``name tid``)."""
    stops = sum(1 << (int(s) - 1) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP))
    found = []
    for tid in os.listdir(f"/proc/{pid}/task"):
        if int(tid) == pid:
            continue
        try:
            status = Path(f"/proc/{pid}/task/{tid}/status").read_text()
        except OSError:  # the thread ended meanwhile
            continue
        fields = dict(line.split(":\t", 1) for line in status.splitlines() if ":\t" in line)
        if int(fields["SigBlk"], 16) & stops != stops:
            found.append(f"{fields['Name'].strip()} {tid}")
    return found


def watch_threads(proc: subprocess.Popen, until: Callable[[], bool] = lambda: False) -> tuple[set[str], int]:
    """Sample :func:`threads_taking_stop_signals` of ``proc`` every few ms while it runs (or until
    ``until()``): the threads seen taking them, and how many samples saw more than the main thread."""
    seen: set[str] = set()
    busy = 0
    while proc.poll() is None and not until():
        try:
            seen.update(threads_taking_stop_signals(proc.pid))
            busy += len(os.listdir(f"/proc/{proc.pid}/task")) > 1
        except (OSError, KeyError):  # the process ended meanwhile
            break
        time.sleep(0.005)
    return seen, busy


@contextlib.contextmanager
def ctrl_c_when(ready: Callable[[], bool], poll_s: float = 0.02) -> Iterator[None]:
    """Send this process one SIGINT, from a thread, once ``ready()`` (a moment the run reports: a
    checkpoint past its first boundary), never after a fixed delay: on a loaded machine a run's
    start-up can outlast any delay, and a Ctrl-C before the run holds it is a KeyboardInterrupt."""
    done = threading.Event()

    def watch() -> None:
        while not done.wait(poll_s):
            if ready():
                os.kill(os.getpid(), signal.SIGINT)
                return

    sender = threading.Thread(target=watch, daemon=True)
    sender.start()
    try:
        yield
    finally:
        done.set()
        sender.join()


def checkpoint_past_start(path: Path) -> Callable[[], bool]:
    """``ready`` for :func:`ctrl_c_when`: the checkpoint at ``path`` has steps done."""
    from meshnb import checkpoint

    def ready() -> bool:
        try:
            return checkpoint.load(path).done > 0
        except (OSError, checkpoint.CheckpointError):  # none yet (or being replaced)
            return False

    return ready


def assert_same_state(got: Any, want: Any, round_word: bytes | None = None) -> None:
    """A system's result ``got`` is ``want``'s, a run without timeouts: the same page, digests and
    counters, but for what a slow round leaves (SPEC 8-9): TIMEOUTS counted, and ROUND (the last
    timed-out round's, never cleared), which is ``round_word`` where a page it came from had it."""
    from meshnb.view import FIELDS

    at = FIELDS["ROUND"].offset
    if round_word is None:
        round_word = got.page[at : at + 4] if got.counters["timeouts"] else want.page[at : at + 4]
    assert got.page == want.page[:at] + round_word + want.page[at + 4 :]
    assert got.digest == want.digest and got.trace_digest == want.trace_digest
    assert {**got.counters, "timeouts": 0} == {**want.counters, "timeouts": 0}


def phase_reported(log: Path, name: str) -> Callable[[], bool]:
    """``ready`` for :func:`ctrl_c_when`: phase ``name`` is in the ``MESHNB_TEST_PHASES`` file ``log``."""
    return lambda: name in reported_phases(log)


def reported_phases(path: Path) -> dict[str, list[float]]:
    """Every moment of each phase (the system's monotonic clock), in order, in a MESHNB_TEST_PHASES file."""
    seen: dict[str, list[float]] = {}
    if path.exists():
        for line in path.read_text().splitlines():
            name, _, when = line.split()
            seen.setdefault(name, []).append(float(when))
    return seen


def wait_for_phase(log: Path, name: str, proc: subprocess.Popen, seconds: float = 120, poll: float = 0.001) -> float:
    """The first moment of phase ``name``, waited for (looked for every ``poll`` s): a bounded wait
    on what the process reports, which fails the test, saying so, if the process ends first or
    ``seconds`` pass."""
    deadline = time.monotonic() + seconds
    while name not in (seen := reported_phases(log)):
        if proc.poll() is not None and name not in (seen := reported_phases(log)):
            pytest.fail(f"the process ended (exit {proc.returncode}) without phase {name!r}; phases: {sorted(seen)}")
        if time.monotonic() > deadline:
            pytest.fail(f"phase {name!r} not reported within {seconds} s; phases so far: {sorted(seen)}")
        time.sleep(poll)
    return reported_phases(log)[name][0]
