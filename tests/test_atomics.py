"""meshnb.atomics, what the grouped loop waits with: acquire loads and release stores of page
words from njit code, seen across threads; the pause and the yield are callable and return."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from numba import njit

from meshnb.atomics import cpu_relax, load_acquire, store_release, yield_cpu


@njit(nogil=True)
def _publish(words, value):
    words[1] = value  # the slot, then the counter: a reader that sees the counter sees the slot
    store_release(words, 0, np.uint64(1))


@njit(nogil=True)
def _wait(words, spins):
    for i in range(spins):
        if load_acquire(words, 0) == 1:
            return words[1]
        cpu_relax()
        if i % 64 == 63:
            yield_cpu()
    return np.uint64(0)


def test_a_release_store_is_seen_by_an_acquire_load_on_another_thread():
    words = np.zeros(2, dtype=np.uint64)
    got: list[int] = []
    reader = threading.Thread(target=lambda: got.append(int(_wait(words, 50_000_000))))
    reader.start()
    _publish(words, np.uint64(0xDEADBEEF))
    reader.join(timeout=60)
    assert got == [0xDEADBEEF]


def test_a_wait_whose_counter_never_comes_gives_up_after_its_spins():
    words = np.array([7, 5], dtype=np.uint64)  # a counter of 7, never 1
    assert _wait(words, 1000) == 0


def test_monotonic_ns_reads_the_monotonic_clock():
    """The njit clock a wait bounds itself by (``clock_gettime(CLOCK_MONOTONIC)``): between two
    reads of Python's own monotonic clock, and advancing across a sleep."""
    import time

    from numba import njit

    from meshnb.atomics import HAS_CLOCK, monotonic_ns

    if not HAS_CLOCK:
        pytest.skip("no clock_gettime bound on this platform: waits count spins only")
    read = njit(lambda: monotonic_ns())
    read()  # compiled first
    before = time.monotonic_ns()
    got = read()
    after = time.monotonic_ns()
    assert before <= got <= after
    time.sleep(0.05)
    assert read() - got >= 50_000_000
