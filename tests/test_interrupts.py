"""Ctrl-C as a flag: a real SIGINT sets it, the previous handler comes back, an existing flag is
reused, and off the main thread nothing is installed."""

from __future__ import annotations

import os
import signal
import threading

import pytest

from meshnb.interrupts import InterruptFlag, deferred_interrupt


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
