"""The trace digest (SPEC 11): SHA-256 over the sums each step applied, 5 little-endian u32 words a step.

One recorder serves every path. A large record is hashed on the trace's own thread while the step
loop goes on (SHA-256 releases the GIL); small ones at once. At most one record is in flight: the
next record, :meth:`Trace.hexdigest` and :meth:`Trace.state` wait for it.
"""

from __future__ import annotations

import hashlib
from concurrent.futures import Future
from typing import Any

import numpy as np

from .interrupts import WorkerPool
from .kernels import NSUMS
from .sha256 import Sha256, Sha256State

ASYNC_BYTES = 1 << 16  # below this a record is hashed at once


class Trace:
    """A run's trace digest, as the steps are recorded.

    Parameters
    ----------
    keep : bool, default False
        Also keep the words (:attr:`words`, ``[steps, 5]``) for study.
    resumable : bool, default False
        Hash with :class:`~meshnb.sha256.Sha256`, whose state a checkpoint saves (:meth:`state`).
    state : Sha256State, optional
        A saved state to continue from (makes the trace resumable).

    Examples
    --------
    >>> from meshnb import Trace
    >>> trace = Trace(keep=True, resumable=True)
    >>> trace.record(np.arange(10, dtype=np.uint32).reshape(2, 5))
    >>> trace.steps, trace.words.shape
    (2, (2, 5))
    >>> Trace(state=trace.state()).hexdigest()[:16]  # SHA-256 of the 10 words, little-endian
    '10b4796eac59c7d8'
    """

    def __init__(self, keep: bool = False, resumable: bool = False, state: Sha256State | None = None) -> None:
        self.resumable = resumable or state is not None
        self._sha: Any = Sha256(state) if self.resumable else hashlib.sha256()
        self._kept: list[np.ndarray] | None = [] if keep else None
        self._worker: WorkerPool | None = None  # one thread, started by the first large record
        self._hashing: Future[None] | None = None
        self.steps = 0

    def record(self, words: np.ndarray) -> None:
        """Add ``[steps, 5]`` u32 words, hashed in place, perhaps after this returns (unchanged until the next call).

        Parameters
        ----------
        words : numpy.ndarray
            The sums each step applied, in step order (a ValueError for another shape).

        Examples
        --------
        >>> trace = Trace()
        >>> trace.record(np.zeros((3, 5), dtype=np.uint32))
        >>> trace.steps
        3
        """
        words = np.ascontiguousarray(words, dtype="<u4")
        if words.ndim != 2 or words.shape[1] != NSUMS:
            raise ValueError(f"a trace records [steps, 5] words, got shape {words.shape}")
        self._wait()
        self.steps += words.shape[0]
        if self._kept is not None:
            self._kept.append(words.copy())
        if words.nbytes < ASYNC_BYTES:
            self._sha.update(words)
            return
        if self._worker is None:
            self._worker = WorkerPool(max_workers=1, thread_name_prefix="meshnb-trace")
        self._hashing = self._worker.submit(self._sha.update, words)

    def _wait(self) -> None:
        """The record in flight is hashed (its error, if any, raised here)."""
        if self._hashing is not None:
            hashing, self._hashing = self._hashing, None
            hashing.result()

    def hexdigest(self) -> str:
        """The digest (64 hex digits) of the steps recorded so far; the hashing thread ends here.

        Returns
        -------
        str

        Examples
        --------
        >>> Trace().hexdigest()[:16]  # no step: the hash of nothing
        'e3b0c44298fc1c14'
        """
        self._wait()
        if self._worker is not None:
            self._worker.shutdown()
            self._worker = None
        return str(self._sha.hexdigest())

    def state(self) -> Sha256State:
        """The hash's state, for a checkpoint (a ValueError unless the trace is resumable).

        Returns
        -------
        Sha256State
            What ``Trace(state=...)`` continues from.

        Examples
        --------
        >>> Trace(resumable=True).state() is not None
        True
        """
        if not self.resumable:
            raise ValueError("this trace hashes with hashlib, whose state cannot be saved: make it resumable")
        self._wait()
        state: Sha256State = self._sha.state()
        return state

    @property
    def keeps(self) -> bool:
        """The trace keeps its rows (made with ``keep=True``), not only their hash."""
        return self._kept is not None

    @property
    def words(self) -> np.ndarray:
        """The kept rows, ``[steps, 5]`` uint32 (a ValueError when the trace keeps none)."""
        if self._kept is None:
            raise ValueError("this trace was made with keep=False")
        if not self._kept:
            return np.zeros((0, NSUMS), dtype=np.uint32)
        return np.concatenate(self._kept)
