"""Ctrl-C as a flag: a real SIGINT sets it, the previous handler comes back, an existing flag is
reused, and off the main thread nothing is installed."""

from __future__ import annotations

import os
import signal
import threading

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
