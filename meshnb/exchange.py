"""The exchange page (SPEC 9): per system a round counter and two slots of 8 u32 words.

The program talks to any transport through :class:`Exchange`. :class:`ExchangePage` lays the page
out in any buffer by ``EXCHANGE_LAYOUT``; :class:`PageExchange` is a member's handle on it, waiting
by a :class:`Waiter` (:class:`BlockingWaiter` for threads, :class:`PollingWaiter` for processes).
Memory order: a member writes its slot, then its counter; a reader checks the counters, then reads
the slots (the fast loop with release/acquire atomics; numpy's writes here under the GIL, or as
aligned stores seen in program order, x86-64's total store order).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np

EX_SLOT_WORDS = 8


@dataclass(frozen=True)
class Group:
    """This system ``k`` of a cluster of ``n``.

    Parameters
    ----------
    k : int
        The system's index, 0 to ``n - 1``.
    n : int
        The systems of the cluster, at least 1.

    Examples
    --------
    >>> from meshnb import Group
    >>> Group(1, 4)
    Group(k=1, n=4)
    """

    k: int
    n: int

    def __post_init__(self) -> None:
        if not (isinstance(self.n, int) and self.n >= 1):
            raise ValueError(f"a group has at least one system, got n={self.n!r}")
        if not (isinstance(self.k, int) and 0 <= self.k < self.n):
            raise ValueError(f"system k={self.k!r} is not in a group of {self.n}")


@runtime_checkable
class Exchange(Protocol):
    """What the program needs of a transport (SPEC 9's ``exchange``): any object with these three
    methods (a ``typing.Protocol``, checkable with ``isinstance``).

    Examples
    --------
    >>> from meshnb import Exchange
    >>> from meshnb.exchange import BlockingWaiter, ExchangePage, PageExchange
    >>> isinstance(PageExchange(ExchangePage.new(1), 0, 1.0, BlockingWaiter()), Exchange)
    True
    """

    def set_slot(self, k: int, parity: int, words: np.ndarray) -> None:
        """Write system ``k``'s slot for ``parity``.

        Parameters
        ----------
        k, parity : int
            This system, and the round's parity (0 or 1).
        words : numpy.ndarray
            8 uint32 words: the five sums (``ftz_bits``), then zeros.

        Examples
        --------
        >>> member = PageExchange(ExchangePage.new(1), 0, 1.0, BlockingWaiter())
        >>> member.set_slot(0, 1, np.arange(8, dtype=np.uint32))
        """

    def round(self, n: int) -> bool:
        """Publish this system's counter = ``n`` and wait, bounded, until every counter is >= ``n``.

        Parameters
        ----------
        n : int
            The round (a step's ``t + 1``).

        Returns
        -------
        bool
            Every member reached it; False on a timeout (call again to resume).

        Examples
        --------
        >>> PageExchange(ExchangePage.new(1), 0, 1.0, BlockingWaiter()).round(1)  # a cluster of one
        True
        """

    def slot(self, m: int, parity: int) -> np.ndarray:
        """A copy of system ``m``'s slot for ``parity`` (0 or 1): its 8 uint32 words.

        Parameters
        ----------
        m, parity : int

        Returns
        -------
        numpy.ndarray

        Examples
        --------
        >>> PageExchange(ExchangePage.new(1), 0, 1.0, BlockingWaiter()).slot(0, 0).tolist()
        [0, 0, 0, 0, 0, 0, 0, 0]
        """


class ExchangeAborted(Exception):
    """The run is being torn down (a member failed): a wait ended without its round."""


def aborted(k: int, n: int) -> ExchangeAborted:
    """The error of system ``k``'s wait for round ``n``, ended by an abort."""
    return ExchangeAborted(f"system {k}: the run was aborted while waiting for round {n}")


@dataclass(frozen=True)
class PageField:
    """A field of the exchange page: ``scope`` "page" (once) or "system" (every system's block), ``offset`` in bytes."""

    name: str
    scope: str
    offset: int
    dtype: str  # "u8", "u32" or "u64"
    count: int
    meaning: str


EXCHANGE_LAYOUT: tuple[PageField, ...] = (
    PageField("SYSTEMS", "page", 0, "u32", 1, "N, the systems of the cluster"),
    PageField("ABORT", "page", 4, "u32", 1, "nonzero: the run is torn down, every wait ends at once"),
    PageField("COUNTER", "system", 0, "u64", 1, "the last round this system published (0 at first)"),
    PageField("SLOT0", "system", 8, "u32", EX_SLOT_WORDS, "this system's words for even rounds"),
    PageField("SLOT1", "system", 40, "u32", EX_SLOT_WORDS, "this system's words for odd rounds"),
    # Not SPEC 9's: how members wait on this page in memory (meshnb.loops.grouped), no bits of a run.
    PageField("WAITERS", "system", 72, "u32", 1, "members asleep on this system's counter (its publisher wakes them)"),
    PageField("SPIN_NS", "system", 76, "u32", 1, "this system's learnt spin before it sleeps (ns; 0: not yet)"),
    PageField("WOKE_NS", "system", 80, "u32", 1, "its learnt spin after it woke a peer (ns; 0: not yet)"),
)
HEADER_BYTES = 64
SYSTEM_BYTES = 128  # two cache lines a system: writers never share a line
_EX = {f.name: f for f in EXCHANGE_LAYOUT}
_DTYPES = {"u8": "u1", "u32": "<u4", "u64": "<u8"}


def field_array(raw: np.ndarray, start: int, stride: int, n: int, f: PageField) -> np.ndarray:
    """A live ``[n]`` (or ``[n, count]``) array of field ``f`` of ``n`` blocks ``stride`` bytes apart from ``start``."""
    dt = np.dtype(_DTYPES[f.dtype])
    shape: tuple[int, ...] = (n,) if f.count == 1 else (n, f.count)
    strides: tuple[int, ...] = (stride,) if f.count == 1 else (stride, dt.itemsize)
    return np.ndarray(shape, dtype=dt, buffer=raw, offset=start + f.offset, strides=strides)


def exchange_bytes(n: int) -> int:
    """Bytes of the exchange page of ``n`` systems: a 64-byte header, then two cache lines a system."""
    return HEADER_BYTES + n * SYSTEM_BYTES


def word_layout() -> np.ndarray:
    """The page's layout as int64 word indices for njit code: ABORT, COUNTER, stride, SLOT0, stride, SLOT1 - SLOT0."""
    assert _EX["ABORT"].scope == "page" and _EX["COUNTER"].dtype == "u64"
    # grouped finds WAITERS, SPIN_NS and WOKE_NS as the words after SLOT1
    assert _EX["WAITERS"].offset == _EX["SLOT1"].offset + 4 * EX_SLOT_WORDS == _EX["SPIN_NS"].offset - 4
    assert _EX["WOKE_NS"].offset == _EX["SPIN_NS"].offset + 4
    return np.array(
        [
            _EX["ABORT"].offset // 4,
            (HEADER_BYTES + _EX["COUNTER"].offset) // 8,
            SYSTEM_BYTES // 8,
            (HEADER_BYTES + _EX["SLOT0"].offset) // 4,
            SYSTEM_BYTES // 4,
            (_EX["SLOT1"].offset - _EX["SLOT0"].offset) // 4,
        ],
        dtype=np.int64,
    )


class ExchangePage:
    """The exchange page of ``n`` systems over ``raw`` (uint8): fresh with ``create``, else it must say ``n``."""

    def __init__(self, raw: np.ndarray, n: int, create: bool = False) -> None:
        if raw.nbytes < exchange_bytes(n):
            raise ValueError(f"an exchange page of {n} systems needs {exchange_bytes(n)} bytes, got {raw.nbytes}")
        self.n = n
        # The page as words, for the fast step loop (``meshnb.loops.grouped``): only where the page is
        # aligned for atomic 8-byte access (always so for numpy's and mmap's memory).
        self.words32: np.ndarray | None = None
        self.words64: np.ndarray | None = None
        if raw.ctypes.data % 8 == 0 and raw.flags.c_contiguous:
            self.words32 = raw[: exchange_bytes(n)].view("<u4")
            self.words64 = raw[: exchange_bytes(n)].view("<u8")
        self._systems = field_array(raw, 0, 0, 1, _EX["SYSTEMS"])
        self._abort = field_array(raw, 0, 0, 1, _EX["ABORT"])
        self.counters = field_array(raw, HEADER_BYTES, SYSTEM_BYTES, n, _EX["COUNTER"])
        # slots[k, parity]: SLOT1 follows SLOT0, so parity is a stride of one slot.
        s0 = field_array(raw, HEADER_BYTES, SYSTEM_BYTES, n, _EX["SLOT0"])
        assert _EX["SLOT1"].offset == _EX["SLOT0"].offset + 4 * EX_SLOT_WORDS
        self.slots = np.lib.stride_tricks.as_strided(
            s0, shape=(n, 2, EX_SLOT_WORDS), strides=(SYSTEM_BYTES, 4 * EX_SLOT_WORDS, 4), writeable=True
        )
        if create:
            raw[: exchange_bytes(n)] = 0
            self._systems[0] = n
        elif int(self._systems[0]) != n:
            raise ValueError(f"this exchange page is for {int(self._systems[0])} systems, not {n}")

    @classmethod
    def new(cls, n: int) -> ExchangePage:
        """A fresh page of ``n`` systems in process memory."""
        return cls(np.zeros(exchange_bytes(n), dtype=np.uint8), n, create=True)

    def reached(self, n: int) -> bool:
        """Every system's counter is >= ``n``."""
        return int(self.counters.min()) >= n

    def behind(self, n: int) -> list[int]:
        """The systems whose counter is below ``n``."""
        return [m for m in range(self.n) if int(self.counters[m]) < n]

    @property
    def aborted(self) -> bool:
        """The page was aborted: every wait on it ends."""
        return bool(self._abort[0])

    def abort(self) -> None:
        """End every wait on this page (a member failed or the run is torn down)."""
        self._abort[0] = 1


class Waiter(Protocol):
    """How a member of an exchange page waits for the others (a ``typing.Protocol``)."""

    def wait(self, ready: Callable[[], bool], timeout_s: float) -> bool:
        """Wait until ``ready()``, at most ``timeout_s``; returns its last value."""

    def notify(self) -> None:
        """Something ``ready`` reads may have changed: wake the waiters."""

    def nap(self, ready: Callable[[], bool], timeout_s: float) -> bool:
        """Sleep up to ``timeout_s`` without spinning (woken early where the waiter can be); returns ``ready()``."""


class BlockingWaiter:
    """For members that are threads of one process: a condition variable, no busy core."""

    def __init__(self) -> None:
        self._cond = threading.Condition()

    def wait(self, ready: Callable[[], bool], timeout_s: float) -> bool:
        """:meth:`Waiter.wait` on a condition variable."""
        with self._cond:
            return self._cond.wait_for(ready, timeout_s)

    def notify(self) -> None:
        """:meth:`Waiter.notify`: wakes every thread waiting here."""
        with self._cond:
            self._cond.notify_all()

    def nap(self, ready: Callable[[], bool], timeout_s: float) -> bool:
        """:meth:`Waiter.nap`: a wait on the condition variable, which a notify ends at once."""
        return self.wait(ready, timeout_s)  # an abort's notify ends it at once


@dataclass(frozen=True)
class PollingWaiter:
    """For members in other processes: re-read the page, yielding for ``spin_s``, then sleeps up to ``max_sleep_s``."""

    spin_s: float = 200e-6
    min_sleep_s: float = 50e-6
    max_sleep_s: float = 2e-3

    def wait(self, ready: Callable[[], bool], timeout_s: float) -> bool:
        """:meth:`Waiter.wait` by re-reading: a spin that yields the core, then growing sleeps."""
        if ready():
            return True
        now = time.perf_counter()
        deadline, spin_end, nap = now + timeout_s, now + self.spin_s, self.min_sleep_s
        while now < deadline:
            if now < spin_end:
                os.sched_yield()
            else:
                time.sleep(min(nap, deadline - now))
                nap = min(2 * nap, self.max_sleep_s)
            if ready():
                return True
            now = time.perf_counter()
        return ready()

    def notify(self) -> None:
        """:meth:`Waiter.notify`: nothing (pollers look for themselves)."""

    def nap(self, ready: Callable[[], bool], timeout_s: float) -> bool:
        """:meth:`Waiter.nap`: one sleep of ``timeout_s`` unless ``ready()`` already."""
        if not ready():
            time.sleep(timeout_s)
        return ready()


class PageExchange:
    """System ``k``'s :class:`Exchange` on an :class:`ExchangePage`: a round waits ``timeout_s`` in ``waiter``."""

    def __init__(self, page: ExchangePage, k: int, timeout_s: float, waiter: Waiter) -> None:
        if not 0 <= k < page.n:
            raise ValueError(f"system {k} is not on a page of {page.n} systems")
        self.page, self.k, self.timeout_s, self.waiter = page, k, timeout_s, waiter

    def set_slot(self, k: int, parity: int, words: np.ndarray) -> None:
        """:meth:`Exchange.set_slot` on the page."""
        self.page.slots[k, parity] = words

    def slot(self, m: int, parity: int) -> np.ndarray:
        """:meth:`Exchange.slot` on the page: a copy."""
        return self.page.slots[m, parity].copy()

    def round(self, n: int) -> bool:
        """:meth:`Exchange.round` on the page: publish the counter, then wait in the waiter."""
        page = self.page
        page.counters[self.k] = n  # after the slot: see the module docstring on order
        if page.reached(n):
            self.waiter.notify()  # this member completed the round: wake the others
            return True
        page_ready: Callable[[], bool] = lambda: page.aborted or page.reached(n)
        ok = self.waiter.wait(page_ready, self.timeout_s)
        if page.aborted:
            raise aborted(self.k, n)
        return ok

    def wait_more(self, n: int, deadline: float, nap_s: float) -> bool:
        """Nap up to ``nap_s`` (not past ``deadline``) after the fast loop's spin: True: spin again, False: timeout."""
        page = self.page
        left = deadline - time.perf_counter()
        if left > 0:
            self.waiter.nap(lambda: page.aborted or page.reached(n), min(nap_s, left))
        if page.aborted:
            raise aborted(self.k, n)
        return page.reached(n) or time.perf_counter() < deadline

    def __repr__(self) -> str:
        return f"PageExchange(k={self.k}, n={self.page.n}, timeout_s={self.timeout_s})"
