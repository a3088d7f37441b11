"""Ctrl-C as a flag: a real SIGINT sets it, the previous handler comes back, an existing flag is
reused, and off the main thread nothing is installed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from meshnb.interrupts import InterruptFlag, StopRequest, deferred_interrupt, phase

from .util import meshnb_cli, watch_threads

ROOT = Path(__file__).resolve().parents[1]


def test_a_real_sigint_sets_the_flag_and_the_handler_is_restored():
    before = signal.getsignal(signal.SIGINT)
    with deferred_interrupt() as requested:
        assert not requested()
        os.kill(os.getpid(), signal.SIGINT)  # delivered to the main thread: no KeyboardInterrupt
        assert requested()
    assert signal.getsignal(signal.SIGINT) is before


def test_a_flag_already_installed_is_reused():
    flag = InterruptFlag()
    previous = signal.signal(signal.SIGINT, flag)
    try:
        with deferred_interrupt() as requested:
            assert signal.getsignal(signal.SIGINT) is flag
            flag.hit = True
            assert requested()
    finally:
        signal.signal(signal.SIGINT, previous)


def test_off_the_main_thread_nothing_is_installed():
    seen: list[object] = []

    def member() -> None:
        with deferred_interrupt() as requested:
            seen.append((requested(), signal.getsignal(signal.SIGINT)))

    before = signal.getsignal(signal.SIGINT)
    t = threading.Thread(target=member)
    t.start()
    t.join()
    assert seen == [(False, before)]


# --- SIGTERM and SIGHUP as Ctrl-C (issue 24) ----------------------------------------------------


def _installed(flag: InterruptFlag):
    return flag.install()


def _restore(previous) -> None:
    for s, h in previous.items():
        signal.signal(s, h)


def test_sigterm_and_sighup_are_held_as_ctrl_c_with_their_exit_codes():
    for sig, code, word in [
        (signal.SIGINT, 130, "interrupted"),
        (signal.SIGTERM, 143, "terminated"),
        (signal.SIGHUP, 129, "hung up"),
    ]:
        flag = InterruptFlag()
        previous = _installed(flag)
        try:
            with deferred_interrupt() as requested:
                os.kill(os.getpid(), sig)
                assert requested()
        finally:
            _restore(previous)
        assert (flag.signum, flag.exit_code, flag.word) == (sig, code, word)


def test_a_raising_flag_raises_once_and_then_only_remembers():
    """A second Ctrl-C (five in a row) must not break the cleanup the first one started."""
    flag = InterruptFlag(raising=True)
    previous = _installed(flag)
    try:
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGTERM)
            for _ in range(100):  # the handler runs between bytecodes
                pass
        for _ in range(4):
            os.kill(os.getpid(), signal.SIGINT)  # no exception
        assert flag.signum == signal.SIGTERM and flag.exit_code == 143
    finally:
        _restore(previous)


def test_a_raising_flag_is_held_inside_a_run_and_raised_after_it():
    flag = InterruptFlag(raising=True)
    previous = _installed(flag)
    try:
        with pytest.raises(KeyboardInterrupt), deferred_interrupt() as requested:
            os.kill(os.getpid(), signal.SIGHUP)  # held: the run sees it at its next boundary
            assert flag.hit and not flag.raised
            del requested  # this run ends without asking: the stop goes on to the caller
        assert flag.raising and flag.signum == signal.SIGHUP
    finally:
        _restore(previous)


@pytest.mark.slow
@pytest.mark.parametrize(
    "argv",
    [
        ["train", "--steps", "400000"],  # the trace's hashing thread
        ["train", "--systems", "2", "--backend", "threads", "--steps", "100000"],  # the members
        ["sweep", "--steps", "4096", "--lr", "1e-4:2:20000:log", "--threads", "2", "--csv", "OUT"],  # pool, writer
    ],
    ids=["trace", "members", "sweep"],
)
def test_only_the_main_thread_takes_a_stop_signal(argv: list[str], tmp_path: Path) -> None:
    """A stop signal that another thread took (numpy's BLAS pool, a member, a worker) had its
    handler run late on a busy machine: a SIGHUP then Ctrl-C ended 130, not 129.  Every thread of
    the command but its main one blocks them, for all of the run."""
    argv = [str(tmp_path / "out.csv") if a == "OUT" else a for a in argv]
    proc = meshnb_cli(*argv, cwd=ROOT)
    try:
        seen, busy = watch_threads(proc)
        out, err = proc.communicate(timeout=300)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    assert busy > 0  # other threads were there to be looked at
    assert seen == set()


def test_the_suite_runs_with_pythons_sigint_handler_whatever_launched_it():
    """The root conftest's rule: a background job started with SIGINT ignored (``nohup pytest &``)
    would pass the ignore to every process a test starts, and the Ctrl-C tests would judge that."""
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


_SIGINT_INSIDE_EXEC = '''
import importlib.abc, sys


class _Hook(importlib.abc.MetaPathFinder):
    """A real Ctrl-C taken inside code run by exec of a string, as dataclasses builds __init__:
    the import of the check command's module is where a loaded machine put it."""

    def find_spec(self, name, path, target=None):
        if name == "meshnb.conformance.check":
            sys.meta_path.remove(self)
            exec("import signal; signal.raise_signal(signal.SIGINT)")
        return None


sys.meta_path.insert(0, _Hook())
'''


@pytest.mark.parametrize("caller", ["program", "library"])
def test_a_ctrl_c_handled_inside_execd_code_ends_by_the_exit_code_not_by_sigint(caller: str, tmp_path: Path) -> None:
    """CPython notes a KeyboardInterrupt that leaves an ``exec``'d string as unhandled, though
    ``meshnb`` catches it, and ``python -m`` then ended the process by SIGINT (-2) after
    ``meshnb: interrupted`` (the check Ctrl-C test, 3 runs in 80 at load 5): it ends 130."""
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(_SIGINT_INSIDE_EXEC)
    argv = ["check", "--view-in", "in.page", "--page", "out.page"]
    if caller == "library":  # meshnb.cli.main in the caller's own `python -m` program
        (hook / "caller.py").write_text(f"import sys\nfrom meshnb.cli import main\nsys.exit(main({argv!r}))\n")
        cmd = [sys.executable, "-m", "caller"]
    else:
        cmd = [sys.executable, "-m", "meshnb", *argv]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (str(hook), os.environ.get("PYTHONPATH")) if p))
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=tmp_path, env=env)
    assert (done.returncode, done.stderr) == (130, "meshnb: interrupted\n")


def test_a_declined_stop_request_is_no_longer_seen():
    flag = InterruptFlag()
    requested = StopRequest(flag)
    flag(signal.SIGINT, None)  # as the OS would call it
    assert requested() and requested.seen
    requested.declined()
    assert not requested.seen


def test_phase_appends_one_line_per_phase(tmp_path, monkeypatch):
    phases = tmp_path / "phases"
    monkeypatch.setenv("MESHNB_TEST_PHASES", str(phases))
    phase("held")
    phase("done")
    assert [line.split()[0] for line in phases.read_text().splitlines()] == ["held", "done"]
    assert phases.read_text().split()[1] == str(os.getpid())
