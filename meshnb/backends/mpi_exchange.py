"""The round of the ``mpi`` backend (SPEC 9) as an MPI collective (:class:`MpiExchange`), and how MPI
is loaded and polled.

A round is an allgather of each rank's 12-word message (slot words, round number, flags, rank), a
persistent request per parity where MPI 4 has them.  A collective cannot be cancelled: a round
that times out stays outstanding and the next TASK resumes it.  :func:`poll` spins 20 ms, then naps;
:func:`load` turns on MPICH's progress throttle so that a failed test yields the core."""

from __future__ import annotations

import os
import sys
import time
from types import ModuleType
from typing import Any

import numpy as np

from ..exchange import EX_SLOT_WORDS
from ..files import remove_orphan_shm
from ..jit import jit
from ..results import ClusterError

INSTALL_HINT = "pip install 'meshnb[mpi]' (mpi4py and the mpich wheel), or mpi4py built against the system's MPI"
THROTTLE_CVARS = {
    "MPIR_CVAR_CH4_PROGRESS_THROTTLE": "1",
    "MPIR_CVAR_CH4_PROGRESS_THROTTLE_NO_PROGRESS_COUNT": "1",
}
START_S = 120.0  # the start waits at least this long: a cold numba cache compiles for seconds a rank

MSG_WORDS = 12
W_ROUND_LO, W_ROUND_HI, W_FLAGS, W_SENDER = 8, 9, 10, 11
FLAG_CHECKPOINT = 1
FLAG_STOP = 2
_NOTE_TAG = 7
_MASK32 = 0xFFFFFFFF


class MpiUnavailable(ValueError):
    """The mpi backend was asked for where mpi4py or an MPI library is missing."""


def load() -> ModuleType:
    """``mpi4py.MPI``, initialising MPI on first use; :class:`MpiUnavailable` where it is missing."""
    if "mpi4py.MPI" not in sys.modules:
        try:
            import mpi4py  # noqa: F401
        except ImportError as e:
            raise MpiUnavailable(f"the mpi backend needs mpi4py and an MPI library ({e}): {INSTALL_HINT}") from None
        for name, value in THROTTLE_CVARS.items():
            os.environ.setdefault(name, value)  # read by MPICH's MPI_Init; ignored by other MPIs
        remove_orphan_shm()  # segments of jobs whose ranks were killed (before MPI_Init makes ours)
    try:
        from mpi4py import MPI
    except (ImportError, RuntimeError, OSError) as e:
        raise MpiUnavailable(f"mpi4py is installed but its MPI library does not load ({e}): {INSTALL_HINT}") from None
    global _SELF_YIELD
    _SELF_YIELD = not library_yields(MPI)
    return MPI


_SELF_YIELD = True  # poll() yields the core itself; not where the MPI library's progress does


def library_yields(MPI: ModuleType) -> bool:
    """The MPI library yields the core itself when a test finds no progress: MPICH's ch4 device
    with its progress throttle on (then a second yield in :func:`poll` only costs)."""
    return "ch4" in MPI.Get_library_version() and all(os.environ.get(k) == v for k, v in THROTTLE_CVARS.items())


_RANK_VARIABLES = ("PMI_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK")  # MPICH/Intel MPI, Open MPI, PMIx


def is_root() -> bool:
    """This process is rank 0 of MPI_COMM_WORLD, or not a rank at all: the one that prints."""
    mod = sys.modules.get("mpi4py.MPI")
    if mod is not None and mod.Is_initialized() and not mod.Is_finalized():
        return mod.COMM_WORLD.Get_rank() == 0
    for name in _RANK_VARIABLES:
        value = os.environ.get(name, "").strip()
        if value.isdigit():
            return int(value) == 0
    return True


def poll(req: Any, seconds: float, spin_s: float = 20e-3, max_nap_s: float = 1e-3) -> bool:
    """Test ``req`` until it completes or ``seconds`` pass; returns whether it completed."""
    test = req.Test
    if test():
        return True
    now = time.perf_counter()
    deadline, spin_end, nap = now + seconds, now + spin_s, 50e-6
    yields = _SELF_YIELD
    while True:
        if now < spin_end:
            if yields:
                os.sched_yield()
        else:
            time.sleep(min(nap, max(0.0, deadline - now)))
            nap = min(2 * nap, max_nap_s)
        if test():
            return True
        now = time.perf_counter()
        if now >= deadline:
            return False


@jit()
def read_round(recv: np.ndarray, lo: np.uint32, hi: np.uint32) -> tuple[int, int]:
    """A completed round's messages ``[N, MSG_WORDS]``: (the first rank whose message is of
    another round, or -1; the OR of every rank's flags)."""
    flags = np.int64(0)
    for m in range(recv.shape[0]):
        if recv[m, W_ROUND_LO] != lo or recv[m, W_ROUND_HI] != hi:
            return m, np.int64(0)
        flags |= np.int64(recv[m, W_FLAGS])
    return -1, flags


class MpiExchange:
    """This rank's :class:`~meshnb.exchange.Exchange` on an MPI communicator; made and closed collectively."""

    def __init__(self, comm: Any, timeout_s: float, persistent: bool | None = None, start_s: float = START_S) -> None:
        MPI = load()
        self._mpi = MPI
        self.comm = comm
        self.k, self.n = comm.Get_rank(), comm.Get_size()
        self.timeout_s = float(timeout_s)
        self.flags = 0
        self.seen = 0
        self.completed = 0  # the last round completed (0: none yet)
        self.timeouts = 0  # rounds this rank timed out on (each counted once)
        self._send = np.zeros((2, MSG_WORDS), dtype=np.uint32)
        self._send[:, W_SENDER] = self.k
        self._recv = np.zeros((2, self.n, MSG_WORDS), dtype=np.uint32)
        self._active: Any = None  # the outstanding request, if any
        self._active_round = 0
        self._noted = False  # the outstanding round's timeout was told to the others
        # Timeout notices: a duplicate communicator, so that they never match a round.
        self._notes, req = comm.Idup()
        if not poll(req, start_s):
            raise ClusterError(self.k, f"the other ranks did not set up the exchange within {start_s:g} s")
        self._note_out: list[tuple[Any, np.ndarray]] = []
        self._note_sent = np.zeros(self.n, dtype=np.int64)
        self._note_got = np.zeros(self.n, dtype=np.int64)
        self._waiting = np.zeros(self.n, dtype=np.uint64)  # the latest round each rank said it waits for
        self._preqs: list[Any] | None = None
        if persistent is None or persistent:
            try:
                self._preqs = [
                    comm.Allgather_init([self._send[p], MPI.UINT32_T], [self._recv[p], MPI.UINT32_T]) for p in (0, 1)
                ]
            except (AttributeError, NotImplementedError, MPI.Exception):
                if persistent:
                    raise
                self._preqs = None
        self.persistent = self._preqs is not None

    # -- the Exchange protocol --------------------------------------------------------------
    def set_slot(self, k: int, parity: int, words: np.ndarray) -> None:
        if k != self.k:
            raise ValueError(f"rank {self.k} publishes its own slot, not system {k}'s")
        if self._active is not None and self._active_round % 2 == parity:
            raise ClusterError(
                self.k,
                f"the slot of round {self._active_round} was rewritten while that round is "
                "outstanding (an MPI collective cannot be cancelled)",
            )
        self._send[parity, :EX_SLOT_WORDS] = words

    def round(self, n: int) -> bool:
        """Publish this rank's slot for round ``n`` and wait for every rank's, at most ``timeout_s``
        (a timed-out collective stays outstanding: a later ``round(n)`` resumes it)."""
        if self._active is None:
            if n == self.completed:
                return True  # already complete: every rank reached n
            p = n & 1
            s = self._send[p]
            s[W_ROUND_LO], s[W_ROUND_HI], s[W_FLAGS] = n & _MASK32, n >> 32, self.flags
            if self._preqs is not None:
                req = self._preqs[p]
                req.Start()
            else:
                MPI = self._mpi
                req = self.comm.Iallgather([s, MPI.UINT32_T], [self._recv[p], MPI.UINT32_T])
            self._active, self._active_round, self._noted = req, n, False
        elif n != self._active_round:
            raise ClusterError(
                self.k,
                f"round {n} was asked while round {self._active_round} is outstanding: "
                "an MPI collective cannot be cancelled, so a pending round cannot be dropped",
            )
        if not poll(self._active, self.timeout_s):
            self._timed_out(n)
            return False
        self._active = None
        self.completed = n
        bad, flags = read_round(self._recv[n & 1], np.uint32(n & _MASK32), np.uint32(n >> 32))
        if bad >= 0:
            r = self._recv[n & 1, bad]
            other = int(r[W_ROUND_HI]) << 32 | int(r[W_ROUND_LO])
            raise ClusterError(
                self.k,
                f"round {n} completed with system {bad}'s message of round {other}: "
                "the ranks do not run the same steps (same options on every rank?)",
            )
        self.seen |= flags
        return True

    def slot(self, m: int, parity: int) -> np.ndarray:
        return self._recv[parity, m, :EX_SLOT_WORDS].copy()

    # -- who is behind ------------------------------------------------------------------------
    def _timed_out(self, n: int) -> None:
        if self._noted:
            self._drain()
            return
        self._noted = True
        self.timeouts += 1
        MPI = self._mpi
        note = np.array([n], dtype=np.uint64)
        for m in range(self.n):
            if m != self.k:
                self._note_out.append((self._notes.Isend([note, MPI.UINT64_T], dest=m, tag=_NOTE_TAG), note))
                self._note_sent[m] += 1
        self._note_out = [(r, b) for r, b in self._note_out if not r.Test()]
        self._drain()

    def _drain(self) -> None:
        """Receive the timeout notices that have arrived."""
        MPI = self._mpi
        status = MPI.Status()
        buf = np.zeros(1, dtype=np.uint64)
        while self._notes.Iprobe(source=MPI.ANY_SOURCE, tag=_NOTE_TAG, status=status):
            src = status.Get_source()
            self._notes.Recv([buf, MPI.UINT64_T], source=src, tag=_NOTE_TAG)
            self._note_got[src] += 1
            self._waiting[src] = max(self._waiting[src], buf[0])

    def behind(self, n: int) -> list[int]:
        """The other ranks that have not said they wait for round ``n`` (or later): the suspects
        when round ``n`` does not complete (stalled, dead, or not yet timed out)."""
        self._drain()
        return [m for m in range(self.n) if m != self.k and int(self._waiting[m]) < n]

    @property
    def outstanding(self) -> int:
        """The round whose collective is outstanding (0: none)."""
        return self._active_round if self._active is not None else 0

    def close(self, seconds: float) -> None:
        """Collective: take every timeout notice, complete the sends, free the requests (no round outstanding)."""
        if self._active is not None:
            raise ClusterError(self.k, f"the exchange was closed with round {self._active_round} outstanding")
        MPI = self._mpi
        expect = np.zeros(self.n, dtype=np.int64)
        req = self._notes.Ialltoall([self._note_sent, MPI.INT64_T], [expect, MPI.INT64_T])
        wait_for(req, seconds, self.k, "the end of the run")
        deadline = time.monotonic() + seconds
        while (self._note_got < expect).any():
            self._drain()
            if time.monotonic() > deadline:
                raise ClusterError(self.k, f"timeout notices still missing after {seconds:g} s")
            os.sched_yield()
        for r, _ in self._note_out:
            wait_for(r, seconds, self.k, "a timeout notice's send")
        self._note_out = []
        if self._preqs is not None:
            for r in self._preqs:
                r.Free()
            self._preqs = None
        self._notes.Free()

    def __repr__(self) -> str:
        return f"MpiExchange(k={self.k}, n={self.n}, timeout_s={self.timeout_s}, persistent={self.persistent})"


def wait_for(req: Any, seconds: float, k: int, what: str) -> None:
    """Wait up to ``seconds`` for the request ``req``, or raise :class:`ClusterError` for member ``k``."""
    if not poll(req, seconds):
        raise ClusterError(k, f"waited {seconds:g} s for {what}: a rank is stalled or dead")
