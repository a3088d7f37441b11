"""The ``mpi`` backend: a cluster across machines, one system per MPI rank (through mpi4py).

``mpiexec -n N meshnb train --backend mpi`` runs system ``k = rank`` of ``N = size`` in each
rank: the same program (:mod:`meshnb.program`'s grouped task loop, driven by
:func:`meshnb.driver.drive`) over an :class:`MpiExchange`, so every rank ends with the bits of the
threads backend.  Rank 0 gathers every rank's page, counters and trace digest; the command line
prints them there only.

The round (SPEC 9) over MPI
---------------------------
The exchange page's round is one collective: ``round(n)`` starts an allgather of this rank's
message for parity ``n mod 2`` (a persistent ``MPI_Allgather_init`` request started again, or an
``Iallgather`` where the MPI library predates MPI 4) and polls it until it completes or the
round's timeout passes.  The message is 12 u32 words: the 8 slot words, the round number (two
words), the run's control flags and the sender's rank.  ``slot(m, par)`` reads rank ``m``'s slot
from parity ``par``'s receive buffer, which rank order fills: the fold is in rank order.

- *Counters*: an MPI collective matches the i-th call of every rank, so the page's counters are
  implicit: a completed allgather means every rank published the same round.  Every message
  carries its round number and a completed round whose numbers differ stops the run (the ranks
  run different plans), instead of folding the wrong sums.
- *Timeout and resume*: a collective cannot be cancelled.  On a timeout the request is kept and
  ``round`` returns False; the program leaves the round pending (PENDING, ROUND, ERR, TIMEOUTS),
  and the next TASK, whose ``arg`` is the pending step, calls ``round(n)`` again for the same
  ``n``: that tests the very same request, it never starts another.  A new round asked while one
  is outstanding (a dropped pending round) is an error, since it cannot be made to match.
- *Two parities*: only one round is ever outstanding, so two receive buffers (the page's two
  slots) are enough; a completed round's slots stay readable until round ``n + 2``.
- *Polling* (:func:`poll`): tests back to back for 20 ms, then naps growing to 1 ms (a peer that
  is seconds late does not cost a core).  Polling from more ranks than cores is pathological
  unless a failed test yields the core: when MPI is not yet initialised, :func:`load` sets
  MPICH's progress throttle (``MPIR_CVAR_CH4_PROGRESS_THROTTLE=1``,
  ``..._NO_PROGRESS_COUNT=1``, unless the environment says otherwise), with which MPICH's ch4
  yields by itself; with any other MPI, :func:`poll` calls ``os.sched_yield()`` after each failed
  test.

Bounds, so that nothing hangs
-----------------------------
A round waits ``timeout_ms``.  A rank that completes no step for ``give_up_s`` stops with
:class:`~meshnb.results.ClusterError` naming the ranks that did not reach the round: a rank whose
round times out tells the others so (a small point-to-point notice on a duplicate communicator,
once a round), and the ranks that sent no notice for the round are the suspects.  Every other
collective (the start, the gathers at checkpoints and at the end) is non-blocking and polled
with a deadline.  A failure after the start ends the whole job: the message (one line, on the
rank that saw it) and ``MPI_Abort(1)``, since a communicator with an outstanding collective
cannot be used again.  A rank process that dies is usually seen by the launcher first (MPICH's
hydra and Open MPI's mpirun kill the other ranks); if not, the others give up as above.

Checkpoints and Ctrl-C
----------------------
Ranks agree on a task boundary through the round messages themselves: rank 0 raises
``FLAG_CHECKPOINT`` when a checkpoint is due, any rank raises ``FLAG_STOP`` on Ctrl-C; every rank
sees the OR of the flags of a round when it completes, so all see them in the same round, and
act at the first planned task boundary after it (no round pending there): gather every rank's
page, counters and trace state to rank 0, which writes the checkpoint
(:mod:`meshnb.checkpoint`'s format: a file any backend resumes), then go on or stop.

Test hook: ``MESHNB_MPI_TEST_SIGNAL=K:CALL:NAME`` sends signal ``NAME`` (``SIGKILL``: a rank that
dies; ``SIGINT``: Ctrl-C on one rank) to rank ``K`` itself before its TASK call ``CALL``; only the
tests use it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import struct
import sys
import time
from collections.abc import Callable
from types import ModuleType
from typing import Any

import numpy as np

from .. import checkpoint, files
from ..checkpoint import Checkpoint
from ..driver import drive, member_trace, prepare_member, progress_bar, stall_hook, stalled, warm_grouped
from ..exchange import EX_SLOT_WORDS, Group
from ..floatz import jit
from ..interrupts import deferred_interrupt
from ..options import RunOptions, resolve
from ..program import COUNTER_NAMES, Context
from ..results import ClusterError, RunInterrupted, RunResult, SaveFailed, SystemResult
from ..sha256 import Sha256State
from ..view import VIEW_BYTES, View

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
    """``mpi4py.MPI``, initialising MPI on first use; :class:`MpiUnavailable` with the install
    hint when mpi4py or its MPI library is missing."""
    if "mpi4py.MPI" not in sys.modules:
        try:
            import mpi4py  # noqa: F401
        except ImportError as e:
            raise MpiUnavailable(f"the mpi backend needs mpi4py and an MPI library ({e}): {INSTALL_HINT}") from None
        for name, value in THROTTLE_CVARS.items():
            os.environ.setdefault(name, value)  # read by MPICH's MPI_Init; ignored by other MPIs
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


def available() -> bool:
    """mpi4py and an MPI library can be loaded (this initialises MPI)."""
    try:
        load()
    except MpiUnavailable:
        return False
    return True


_RANK_VARIABLES = ("PMI_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK")  # MPICH/Intel MPI, Open MPI, PMIx


def is_root() -> bool:
    """This process is rank 0 of MPI_COMM_WORLD, or not a rank at all: the one that prints.

    Before MPI is initialised (an error in the arguments), the launcher's rank variable says."""
    mod = sys.modules.get("mpi4py.MPI")
    if mod is not None and mod.Is_initialized() and not mod.Is_finalized():
        return mod.COMM_WORLD.Get_rank() == 0
    for name in _RANK_VARIABLES:
        value = os.environ.get(name, "").strip()
        if value.isdigit():
            return int(value) == 0
    return True


def poll(req: Any, seconds: float, spin_s: float = 20e-3, max_nap_s: float = 1e-3) -> bool:
    """Test ``req`` until it completes or ``seconds`` pass; returns whether it completed.

    For ``spin_s`` tests back to back, yielding the core after every failed one (unless the MPI
    library does, :func:`library_yields`), then naps, doubling from 50 us up to ``max_nap_s``.
    The spin is long (20 ms) on purpose: a nap does not progress the collective, so naps within
    ordinary rounds would feed on themselves on an oversubscribed machine.  A request that did not
    complete is still active: test it again later."""
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
def _completed(recv: np.ndarray, lo: np.uint32, hi: np.uint32) -> tuple[int, int]:
    """A completed round's messages ``[N, MSG_WORDS]``: (the first rank whose message is of
    another round, or -1; the OR of every rank's flags)."""
    flags = np.int64(0)
    for m in range(recv.shape[0]):
        if recv[m, W_ROUND_LO] != lo or recv[m, W_ROUND_HI] != hi:
            return m, np.int64(0)
        flags |= np.int64(recv[m, W_FLAGS])
    return -1, flags


class MpiExchange:
    """This rank's :class:`~meshnb.exchange.Exchange` on an MPI communicator (see the module
    docstring).  Creating one is collective over ``comm``; so is :meth:`close`.

    ``flags`` are sent with every round this rank starts; ``seen`` accumulates the OR of every
    rank's flags over completed rounds (the caller clears it).  ``persistent=None`` uses a
    persistent allgather where the library has one."""

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
        """Publish this rank's slot of parity ``n mod 2`` for round ``n`` and wait for every rank's,
        at most ``timeout_s``; on a timeout the collective stays outstanding and a later
        ``round(n)`` resumes it."""
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
        bad, flags = _completed(self._recv[n & 1], np.uint32(n & _MASK32), np.uint32(n >> 32))
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
        """Collective: receive every timeout notice sent to this rank, complete the sends, and
        free the requests and the notices' communicator.  No round may be outstanding."""
        if self._active is not None:
            raise ClusterError(self.k, f"the exchange was closed with round {self._active_round} outstanding")
        MPI = self._mpi
        expect = np.zeros(self.n, dtype=np.int64)
        req = self._notes.Ialltoall([self._note_sent, MPI.INT64_T], [expect, MPI.INT64_T])
        _complete(req, seconds, self.k, "the end of the run")
        deadline = time.monotonic() + seconds
        while (self._note_got < expect).any():
            self._drain()
            if time.monotonic() > deadline:
                raise ClusterError(self.k, f"timeout notices still missing after {seconds:g} s")
            os.sched_yield()
        for r, _ in self._note_out:
            _complete(r, seconds, self.k, "a timeout notice's send")
        self._note_out = []
        if self._preqs is not None:
            for r in self._preqs:
                r.Free()
            self._preqs = None
        self._notes.Free()

    def __repr__(self) -> str:
        return f"MpiExchange(k={self.k}, n={self.n}, timeout_s={self.timeout_s}, persistent={self.persistent})"


# ---------------------------------------------------------------------------------------------
# Bounded collectives of bytes
# ---------------------------------------------------------------------------------------------


def _complete(req: Any, seconds: float, k: int, what: str) -> None:
    if not poll(req, seconds):
        raise ClusterError(k, f"waited {seconds:g} s for {what}: a rank is stalled or dead")


def allgather_bytes(comm: Any, data: bytes, seconds: float, what: str) -> list[bytes]:
    """Every rank's ``data``, in rank order, on every rank; each collective bounded by ``seconds``."""
    MPI = load()
    k, n = comm.Get_rank(), comm.Get_size()
    sizes = np.zeros(n, dtype=np.int64)
    _complete(
        comm.Iallgather([np.array([len(data)], dtype=np.int64), MPI.INT64_T], [sizes, MPI.INT64_T]), seconds, k, what
    )
    displs = np.zeros(n, dtype=np.int64)
    displs[1:] = np.cumsum(sizes)[:-1]
    buf = np.empty(int(sizes.sum()), dtype=np.uint8)
    mine = np.frombuffer(data, dtype=np.uint8) if data else np.empty(0, dtype=np.uint8)
    req = comm.Iallgatherv([mine, MPI.BYTE], [buf, (sizes.tolist(), displs.tolist()), MPI.BYTE])
    _complete(req, seconds, k, what)
    return [buf[d : d + s].tobytes() for d, s in zip(displs.tolist(), sizes.tolist())]


def share(comm: Any, produce: Callable[[], bytes], seconds: float, what: str) -> bytes:
    """Rank 0 calls ``produce`` and every rank gets its bytes; a ``ValueError`` or ``OSError`` of
    ``produce`` is raised as a ValueError on every rank (so all exit alike)."""
    MPI = load()
    k = comm.Get_rank()
    data, error = b"", ""
    if k == 0:
        try:
            data = produce()
        except (ValueError, OSError) as e:
            error = str(e) if isinstance(e, ValueError) else f"{what}: {e.strerror or e}"
    payload = error.encode() if error else data
    head = np.array([len(payload), 1 if error else 0], dtype=np.int64)
    _complete(comm.Ibcast([head, MPI.INT64_T], root=0), seconds, k, what)
    buf = np.frombuffer(bytearray(payload), dtype=np.uint8) if k == 0 else np.empty(int(head[0]), dtype=np.uint8)
    if head[0]:
        _complete(comm.Ibcast([buf, MPI.BYTE], root=0), seconds, k, what)
    if head[1]:
        raise ValueError(buf.tobytes().decode())
    return buf.tobytes()


# ---------------------------------------------------------------------------------------------
# What a rank sends to the others: its page, counters, trace digest and state (and trace words)
# ---------------------------------------------------------------------------------------------

_RECORD = struct.Struct("<Q3Q32s8IQB63s")


def _record(done: int, ctx: Context, with_words: bool) -> bytes:
    trace = ctx.trace
    assert trace is not None
    state = trace.state() if trace.resumable else Sha256State(tuple([0] * 8), 0, b"")
    head = _RECORD.pack(
        done,
        *(int(c) for c in ctx.counters),
        bytes.fromhex(trace.hexdigest()),
        *state.h,
        state.length,
        len(state.tail),
        state.tail,
    )
    words = trace.words.astype("<u4").tobytes() if with_words and trace.keeps else b""
    return head + ctx.view.tobytes() + words


def _unrecord(data: bytes) -> tuple[int, dict[str, int], str, Sha256State, bytes, np.ndarray | None]:
    """(done, counters, trace digest, trace state, page, trace words or None)."""
    f = _RECORD.unpack_from(data)
    done, counters, digest = f[0], dict(zip(COUNTER_NAMES, f[1:4])), f[4].hex()
    h, length, tail_len, tail = f[5:13], f[13], f[14], f[15]
    state = Sha256State(tuple(h), length, tail[:tail_len])
    page = data[_RECORD.size : _RECORD.size + VIEW_BYTES]
    rest = data[_RECORD.size + VIEW_BYTES :]
    words = np.frombuffer(rest, dtype="<u4").reshape(-1, 5).astype(np.uint32) if rest else None
    return done, counters, digest, state, page, words


# ---------------------------------------------------------------------------------------------
# A rank's run
# ---------------------------------------------------------------------------------------------


def _warm(z: bool) -> None:
    """Load (or compile) the grouped step's kernels before the start, so that no rank's first
    round waits on another rank's JIT."""
    warm_grouped(z)
    _completed(np.zeros((1, MSG_WORDS), dtype=np.uint32), np.uint32(0), np.uint32(0))


def _test_signal(k: int) -> tuple[int, int] | None:
    """The test hook ``MESHNB_MPI_TEST_SIGNAL=K:CALL:NAME``: (call, signal) for rank ``k``, or None."""
    spec = os.environ.get("MESHNB_MPI_TEST_SIGNAL", "")
    if not spec:
        return None
    rank, call, name = spec.split(":")
    return (int(call), int(signal.Signals[name])) if int(rank) == k else None


def abort(comm: Any, e: BaseException) -> None:
    """One line on stderr, then ``MPI_Abort``: the end of every rank of the job."""
    code = 130 if isinstance(e, KeyboardInterrupt) else 1
    text = (
        "interrupted"
        if isinstance(e, KeyboardInterrupt)
        else (str(e) if isinstance(e, ClusterError) else f"system {comm.Get_rank()}: {type(e).__name__}: {e}")
    )
    try:
        print(f"meshnb: error: {text}", file=sys.stderr, flush=True)
    finally:
        try:
            comm.Abort(code)
        finally:
            os._exit(code)  # MPI_Abort does not return; should it, this rank still ends here


def run(opts: RunOptions, comm: Any = None, abort_on_failure: bool = True) -> RunResult:
    """Run this rank's system of a cluster of one system per rank of ``comm`` (MPI_COMM_WORLD);
    every rank must call it with the same options.  Returns every system's result, on every
    rank.  ``systems``, when given, must be the number of ranks.  ``checkpoint`` is written by
    rank 0; ``resume`` is read by rank 0.

    Bad options raise ValueError on every rank alike.  A failure once the run has started
    (a rank gave up on a stalled or dead peer, an error on one rank) prints one line and calls
    ``MPI_Abort`` (exit code 1, 130 for Ctrl-C), unless ``abort_on_failure=False``: then it raises
    and the caller must abort, since the communicator may have a collective outstanding."""
    MPI = load()
    comm = MPI.COMM_WORLD if comm is None else comm
    k, n = comm.Get_rank(), comm.Get_size()
    if opts.systems is not None:
        if n == 1 and opts.systems > 1:
            raise ValueError(
                f"the mpi backend runs one system per MPI rank, and this process is alone (not under "
                f"mpiexec): start it as `mpiexec -n {opts.systems} meshnb train --backend mpi ...`"
            )
        if opts.systems != n:
            raise ValueError(f"{opts.systems} systems asked for, but the MPI job has {n} ranks (one system per rank)")

    def load_shared(path: Any) -> Checkpoint:  # rank 0 reads the file; every rank gets its bytes
        where = f"checkpoint {path}"
        ck = Checkpoint.from_bytes(share(comm, lambda: checkpoint.load(path).to_bytes(), START_S, where), where)
        if ck.run.systems != n:
            raise ValueError(f"{where} is a run of {ck.run.systems} systems: start it with mpiexec -n {ck.run.systems}")
        return ck

    start = resolve(opts, n, load_shared)
    plan, give_up_s = start.plan, opts.give_up_s
    # The page is prepared before the exchange exists, so that a bad page is refused on every
    # rank before any collective.
    ctx = Context(
        View(), group=Group(k, n), trace=member_trace(start, k, opts.keep_trace, opts.checkpoint is not None), z=start.z
    )
    prepare_member(ctx, k, start, opts.view_in)
    settings = start.settings(ctx.view.next_step)
    hook = _test_signal(k)
    stall = stall_hook(opts.stalls, k)

    def write_checkpoint(done: int, records: list[bytes] | None = None) -> None:
        """Collective (unless given the records): rank 0 writes every rank's state at this
        common boundary."""
        if records is None:
            records = allgather_bytes(
                comm, _record(done, ctx, False), give_up_s, f"the checkpoint at step {start.done_before + done}"
            )
        if k == 0 and opts.checkpoint is not None:
            got = [_unrecord(r) for r in records]
            checkpoint.save(
                opts.checkpoint,
                Checkpoint(
                    settings,
                    start.done_before + done,
                    tuple(g[4] for g in got),
                    tuple(g[1] for g in got),
                    tuple(g[3] for g in got),
                ),
            )

    owner = contextlib.ExitStack()  # rank 0 owns the checkpoint's path while the run lasts
    if opts.checkpoint is not None:

        def take() -> bytes:
            files.check_output(opts.checkpoint, "checkpoint")  # type: ignore[arg-type]
            owner.enter_context(files.hold(opts.checkpoint, "checkpoint"))  # type: ignore[arg-type]
            return b""

        share(comm, take, START_S, "the checkpoint's lock")  # a refusal is every rank's ValueError
    try:
        with owner, deferred_interrupt() as requested:
            exchange = MpiExchange(comm, opts.timeout_ms / 1000)
            ctx.exchange = exchange
            _warm(start.z)
            _complete(comm.Ibarrier(), max(give_up_s, START_S), k, "the other ranks to start")
            bar = progress_bar(plan.steps, opts.progress and k == 0)
            shown = 0
            stop = False
            every = opts.checkpoint_every_s
            next_ckpt = time.monotonic() + every if opts.checkpoint is not None else float("inf")

            def on_task(done: int) -> None:
                nonlocal shown, stop, next_ckpt
                if bar is not None:
                    bar.update(done - shown)
                    shown = done
                if ctx.view.word("ERR"):
                    return  # a timed-out task: not a boundary, the retry follows
                if k == 0 and time.monotonic() >= next_ckpt:
                    exchange.flags |= FLAG_CHECKPOINT
                if requested():
                    exchange.flags |= FLAG_STOP
                seen, exchange.seen = exchange.seen, 0
                if seen & (FLAG_CHECKPOINT | FLAG_STOP) and opts.checkpoint is not None and done < plan.steps:
                    write_checkpoint(done)
                    exchange.flags &= ~FLAG_CHECKPOINT
                    next_ckpt = time.monotonic() + every
                if seen & FLAG_STOP:
                    stop = True

            def before_task(call: int) -> None:
                if hook is not None and hook[0] == call:
                    os.kill(os.getpid(), hook[1])
                stall(call)

            began = time.perf_counter()
            try:
                done = drive(ctx, plan, on_task, lambda: stop, before_task, give_up_s)
            except ClusterError as e:
                late = exchange.outstanding or (ctx.view.next_step + 1) % (1 << 64)
                raise stalled(k, e, late, exchange.behind(late)) from None
            finally:
                if bar is not None:
                    bar.close()
            seconds = time.perf_counter() - began
            exchange.close(give_up_s)
            records = allgather_bytes(comm, _record(done, ctx, opts.keep_trace), give_up_s, "the results")
            unsaved: OSError | None = None
            if opts.checkpoint is not None and done == plan.steps:
                try:
                    write_checkpoint(done, records)
                except OSError as e:  # rank 0's: reported with the results, after them
                    unsaved = e
    except BaseException as e:
        if abort_on_failure and not isinstance(e, SystemExit):
            abort(comm, e)
        raise
    systems_out = []
    for m, r in enumerate(records):
        _, counters, digest, _, page, words = _unrecord(r)
        systems_out.append(SystemResult(m, page, counters, digest, words if opts.keep_trace else None))
    result = RunResult(done, tuple(systems_out), seconds, steps_before=start.done_before)
    if unsaved is not None:
        raise SaveFailed(result, unsaved)
    if done < plan.steps:
        raise RunInterrupted(result)
    return result


def world_size() -> int:
    """MPI_COMM_WORLD's size (initialising MPI)."""
    return load().COMM_WORLD.Get_size()
