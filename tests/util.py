"""Small helpers shared by the tests."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable
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
