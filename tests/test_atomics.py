"""meshnb.atomics, what the grouped loop waits with: acquire loads and release stores of page
words from njit code, seen across threads; the pause and the yield are callable and return."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from numba import njit

from meshnb.atomics import cpu_relax, fetch_add, futex_wait, futex_wake, load_acquire, store_release, yield_cpu


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


@njit(nogil=True)
def _sleep(words, expected, ns, private):
    return futex_wait(words, 0, expected, ns, private)


@njit(nogil=True)
def _wake(words, private):
    return futex_wake(words, 0, private)


@pytest.mark.parametrize("private", [True, False])
def test_a_futex_sleeper_is_woken_by_its_publisher_long_before_its_timeout(private):
    """A thread asleep on a word (10 s timeout) wakes when another stores the word and wakes it;
    a wake with nobody asleep wakes nobody."""
    import time

    from meshnb.atomics import HAS_FUTEX

    if not HAS_FUTEX:
        pytest.skip("no futexes on this platform: the grouped loop yields instead")
    words = np.zeros(1, dtype=np.uint32)
    assert _wake(words, private) == 0  # compiled, and nobody asleep
    got: list[tuple[int, float]] = []

    def sleeper() -> None:
        t0 = time.monotonic()
        got.append((int(_sleep(words, np.uint32(0), 10_000_000_000, private)), time.monotonic() - t0))

    t = threading.Thread(target=sleeper)
    t.start()
    woken = 0
    deadline = time.monotonic() + 30
    while not woken and time.monotonic() < deadline:  # until the sleeper is asleep: a wake counts it
        time.sleep(0.01)
        words[0] = 0
        woken = _wake(words, private)
    words[0] = 1
    t.join(30)
    assert woken == 1 and got and got[0][0] == 0 and got[0][1] < 9


def test_a_futex_wait_on_a_changed_word_returns_at_once():
    import time

    words = np.array([3], dtype=np.uint32)
    _sleep(words, np.uint32(2), 1000, True)  # compiled
    t0 = time.monotonic()
    assert _sleep(words, np.uint32(2), 10_000_000_000, True) == -1  # 3 != 2: no sleep (EAGAIN)
    assert time.monotonic() - t0 < 5


def test_fetch_add_is_atomic_across_threads():
    words = np.zeros(1, dtype=np.uint32)
    bump = njit(nogil=True)(lambda w, n: [fetch_add(w, 0, np.uint32(1)) for _ in range(n)][-1])
    bump(words, 1)
    words[0] = 0
    threads = [threading.Thread(target=bump, args=(words, 200_000)) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert int(words[0]) == 800_000
