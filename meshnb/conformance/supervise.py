"""One executor of ``meshnb check --exec``, run to the end of every process it started.

``python supervise.py CHECKER_PID TIMEOUT CMD ARG...`` (run as a file: it imports nothing of meshnb)
runs the command in a session of its own as a child subreaper, kills every process left once it
ends or times out, and prints ``{"exit": CODE, "timed_out": BOOL, "seconds": S, "left": N}``.  A stop
signal or the checker's death does the same at once, exit 1, no line (docs/guide/checking-an-executor.md).
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import signal
import subprocess
import sys
import time

PR_SET_PDEATHSIG = 1  # linux/prctl.h
PR_SET_CHILD_SUBREAPER = 36
ROUNDS = 200  # each round kills this process's children; their orphans are its children next


def prctl(option: int, value: int) -> bool:
    """Linux's ``prctl(option, value)``; False where it fails or there is none."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return bool(libc.prctl(option, value, 0, 0, 0) == 0)
    except (OSError, AttributeError):
        return False


def children() -> list[int]:
    """This process's children, from every thread's list (a child belongs to the thread that forked it)."""
    pids: list[int] = []
    try:
        tasks = os.listdir("/proc/self/task")
    except OSError:
        return pids
    for t in tasks:
        with contextlib.suppress(OSError, ValueError), open(f"/proc/self/task/{t}/children") as f:
            pids += [int(x) for x in f.read().split()]
    return pids


def kill_strays(keep: set[int] | frozenset[int] = frozenset()) -> int:
    """Kills and reaps every child of this process but ``keep``, round by round; returns how many."""
    left: set[int] = set()
    for _ in range(ROUNDS):
        strays = [pid for pid in children() if pid not in keep]
        if not strays:
            break
        for pid in strays:
            for kill in (os.killpg, os.kill):  # a setsid child leads a group of its own
                with contextlib.suppress(OSError):
                    kill(pid, signal.SIGKILL)
        for pid in strays:
            with contextlib.suppress(OSError):
                os.waitpid(pid, 0)
            left.add(pid)
    return len(left)


def kill_all(leader: int) -> int:
    """Kills the executor's process group and every process left under this one; returns how many."""
    with contextlib.suppress(OSError):
        os.killpg(leader, signal.SIGKILL)  # the group only: the leader's pid may be reaped already
    return kill_strays()


def main(argv: list[str]) -> int:
    """Run ``argv``'s command (checker pid, timeout, command) under supervision; its exit code."""
    checker, timeout, cmd = int(argv[0]), float(argv[1]), argv[2:]
    stops = {signal.SIGTERM, signal.SIGINT, signal.SIGHUP}
    signal.pthread_sigmask(signal.SIG_UNBLOCK, stops)  # the checker's worker thread blocked them
    prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    if os.getppid() != checker:  # the checker died before the line above: stop at once
        return 1
    prctl(PR_SET_CHILD_SUBREAPER, 1)
    proc: subprocess.Popen[bytes] | None = None

    def stop(signum: int, frame: object) -> None:
        if proc is not None:
            kill_all(proc.pid)
        os._exit(1)

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, stop)
    t0 = time.monotonic()
    try:
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, start_new_session=True)
    except OSError as e:
        print(json.dumps({"failed_to_start": f"cannot start {cmd[0]}: {e.strerror or e}"}), flush=True)
        return 0
    timed_out = False
    try:
        code = proc.wait(timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
        with contextlib.suppress(OSError):
            os.killpg(proc.pid, signal.SIGKILL)
        code = proc.wait()
    seconds = time.monotonic() - t0
    left = kill_all(proc.pid)
    print(json.dumps({"exit": code, "timed_out": timed_out, "seconds": seconds, "left": left}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
