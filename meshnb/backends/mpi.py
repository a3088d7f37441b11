"""The ``mpi`` backend: a cluster across machines, one system per MPI rank (through mpi4py).

``mpiexec -n N meshnb train --backend mpi`` runs system ``k = rank`` of ``N = size`` on the driver
over an :class:`~meshnb.backends.mpi_exchange.MpiExchange`, with the bits of the threads backend.
Every collective is non-blocking and polled with a deadline; a failure after the start prints one
line and calls ``MPI_Abort(1)``.  Checkpoints and stops are agreed through the rounds' flags, and
rank 0 writes the checkpoint (docs/guide/clusters.md).  Test hook:
``MESHNB_MPI_TEST_SIGNAL=K:CALL:NAME`` sends signal ``NAME`` to rank ``K`` before its TASK call ``CALL``."""

from __future__ import annotations

import contextlib
import os
import signal
import stat
import struct
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from .. import checkpoint, files, host
from ..checkpoint import Checkpoint
from ..driver import Frame, Policy, Steps
from ..exchange import Group
from ..host import (
    Checkpoints,
    Snapshot,
    StepEngine,
    checkpoints_of,
    host_loop,
    member_task,
    member_trace,
    prepare_member,
    stall_hook,
    stalled,
    train_run,
)
from ..interrupts import phase
from ..options import Plan, RunOptions, check_checkpoint_systems, resolve
from ..program import COUNTER_NAMES, Context
from ..results import ClusterError, RunInterrupted, RunResult, SaveFailed, SystemResult
from ..sha256 import Sha256State
from ..view import VIEW_BYTES, View
from .mpi_exchange import FLAG_CHECKPOINT, FLAG_STOP, MSG_WORDS, START_S, MpiExchange, load, read_round, wait_for

# --- Bounded collectives of bytes -----------------------------------------------------------------


def allgather_bytes(comm: Any, data: bytes, seconds: float, what: str) -> list[bytes]:
    """Every rank's ``data``, in rank order, on every rank; each collective bounded by ``seconds``."""
    MPI = load()
    k, n = comm.Get_rank(), comm.Get_size()
    sizes = np.zeros(n, dtype=np.int64)
    wait_for(
        comm.Iallgather([np.array([len(data)], dtype=np.int64), MPI.INT64_T], [sizes, MPI.INT64_T]), seconds, k, what
    )
    displs = np.zeros(n, dtype=np.int64)
    displs[1:] = np.cumsum(sizes)[:-1]
    buf = np.empty(int(sizes.sum()), dtype=np.uint8)
    mine = np.frombuffer(data, dtype=np.uint8) if data else np.empty(0, dtype=np.uint8)
    req = comm.Iallgatherv([mine, MPI.BYTE], [buf, (sizes.tolist(), displs.tolist()), MPI.BYTE])
    wait_for(req, seconds, k, what)
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
    wait_for(comm.Ibcast([head, MPI.INT64_T], root=0), seconds, k, what)
    buf = np.frombuffer(bytearray(payload), dtype=np.uint8) if k == 0 else np.empty(int(head[0]), dtype=np.uint8)
    if head[0]:
        wait_for(comm.Ibcast([buf, MPI.BYTE], root=0), seconds, k, what)
    if head[1]:
        raise ValueError(buf.tobytes().decode())
    return buf.tobytes()


def shared_file(comm: Any, produce: Callable[[], bytes], arg: str, what: str) -> bytes:
    """:func:`share` of rank 0's work on the file the argument ``arg`` gives: its refusal (``ARG
    PATH: ...``) is every rank's :class:`~meshnb.checkpoint.CheckpointError`, naming ``arg`` as
    the caller wrote it."""
    try:
        return share(comm, produce, START_S, what)
    except ValueError as e:
        if str(e).startswith(f"{arg} "):
            raise checkpoint.named(arg, str(e)) from None
        raise


# --- What a rank sends to the others: its page, counters, trace digest and state (and trace words) ---

_RECORD = struct.Struct("<Q3Q32s8IQB63s")


def _record(done: int, ctx: Context, with_words: bool) -> bytes:
    trace = ctx.trace
    assert trace is not None
    state = trace.state() if trace.resumable else Sha256State(tuple([0] * 8), 0, b"")
    digest = bytes.fromhex(trace.hexdigest())
    counters = (int(c) for c in ctx.counters)
    head = _RECORD.pack(done, *counters, digest, *state.h, state.length, len(state.tail), state.tail)
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


# --- A rank's run ---------------------------------------------------------------------------------


def warm_up(z: bool) -> float:
    """Load the grouped step's kernels and the round's reader before the start, so no rank waits on
    another's JIT; its seconds."""
    began = time.perf_counter()
    host.warm_up(z)
    read_round(np.zeros((1, MSG_WORDS), dtype=np.uint32), np.uint32(0), np.uint32(0))
    return time.perf_counter() - began


def _test_signal(k: int) -> tuple[int, int] | None:
    """The test hook ``MESHNB_MPI_TEST_SIGNAL=K:CALL:NAME``: (call, signal) for rank ``k``, or None."""
    spec = os.environ.get("MESHNB_MPI_TEST_SIGNAL", "")
    if not spec:
        return None
    rank, call, name = spec.split(":")
    return (int(call), int(signal.Signals[name])) if int(rank) == k else None


STDERR_DRAIN_S = 10.0  # the most abort() waits for its line to leave the pipe (a loaded machine's launcher)


def _drain_stderr(bound_s: float) -> None:
    """Wait (at most ``bound_s``) until the launcher has read what this rank wrote to its stderr pipe."""
    try:
        import fcntl
        import termios

        if not stat.S_ISFIFO(os.fstat(2).st_mode):
            return
        deadline = time.monotonic() + bound_s
        while time.monotonic() < deadline:
            unread = struct.unpack("i", fcntl.ioctl(2, termios.FIONREAD, b"\0\0\0\0"))[0]
            if unread == 0:
                return
            time.sleep(0.002)
    except (ImportError, OSError):  # not POSIX, no stderr, no FIONREAD: the line is as delivered as it can be
        return


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
        _drain_stderr(STDERR_DRAIN_S)
    finally:
        try:
            comm.Abort(code)
        finally:
            os._exit(code)  # MPI_Abort does not return; should it, this rank still ends here


def run(opts: RunOptions, comm: Any = None, abort_on_failure: bool = True) -> RunResult:
    """Run this rank's system of a cluster of one per rank of ``comm`` (MPI_COMM_WORLD), every rank with
    the same options; every system's result, on every rank.  Rank 0 writes ``checkpoint``, reads ``resume``."""
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

    if opts.checkpoint is not None:
        check_checkpoint_systems(n)  # every rank alike, before any collective

    def load_shared(path: Any) -> Checkpoint:  # rank 0 reads the file; every rank gets its bytes
        where = f"resume {path}"
        data = shared_file(comm, lambda: checkpoint.load(path, "resume").to_bytes(), "resume", where)
        ck = Checkpoint.from_bytes(data, where)
        if ck.run.systems != n:
            raise checkpoint.named(
                "resume", f"{where} is a run of {ck.run.systems} systems: start it with mpiexec -n {ck.run.systems}"
            )
        return ck

    start = resolve(opts, n, load_shared)
    plan, give_up_s = start.plan, opts.give_up_s
    # The page is prepared before the exchange exists, so that a bad page is refused on every
    # rank before any collective.
    ctx = Context(
        View(), group=Group(k, n), trace=member_trace(start, k, opts.keep_trace, opts.checkpoint is not None), z=start.z
    )
    prepare_member(ctx, k, start, opts.view_in)
    hook = _test_signal(k)
    stall = stall_hook(opts.stalls, k)
    checkpoints = checkpoints_of(opts, start, ctx.view.next_step, writes=k == 0)  # rank 0 writes them
    rank = _Rank(comm, ctx, plan, give_up_s, checkpoints, start.done_before)

    def before_task(call: int) -> None:
        if hook is not None and hook[0] == call:
            os.kill(os.getpid(), hook[1])
        stall(call)

    engine, next_end, at_boundary = host_loop(plan, (ctx,), ctx.view.word("STEPS_PER_TASK"), rank.task(before_task))

    owner = contextlib.ExitStack()  # rank 0 owns the checkpoint's path while the run lasts
    if opts.checkpoint is not None:

        def take() -> bytes:
            files.check_output(opts.checkpoint, "checkpoint")  # type: ignore[arg-type]
            owner.enter_context(checkpoint.hold(opts.checkpoint))  # type: ignore[arg-type]
            return b""

        shared_file(comm, take, "checkpoint", "the checkpoint's lock")  # a refusal is every rank's CheckpointError
    try:
        with owner:
            return train_run(
                Steps(engine.advance, lambda: rank.warm_up(opts.timeout_ms / 1000, start.z)),
                plan.steps, next_end, lambda done: rank.results(done, opts.keep_trace),
                at_boundary=at_boundary, progress=opts.progress and k == 0, checkpoints=checkpoints,
                save=rank.save if opts.checkpoint is not None else None, ready=rank.ready, policy=rank.policy,
            )  # fmt: skip
    except (RunInterrupted, SaveFailed):
        raise  # every rank's stop, or rank 0's checkpoint that could not be written: after the results
    except BaseException as e:
        if abort_on_failure and not isinstance(e, SystemExit):
            abort(comm, e)
        raise


class _Agreed:
    """When the ranks save (the driver's deadline): a checkpoint flag seen in a round, so at the
    same boundary on every rank (a stop's checkpoint is the run's ending)."""

    def __init__(self, restart: Callable[[], None]) -> None:
        self.seen, self._restart = 0, restart

    def due(self) -> bool:
        return bool(self.seen & FLAG_CHECKPOINT) and not self.seen & FLAG_STOP

    def restart(self) -> None:
        self._restart()


class _Rank:
    """This rank's engine: its tasks over the exchange, the flags that decide when every rank saves and
    stops (:meth:`policy`), and the gathers of every rank's record (a checkpoint's, the results)."""

    def __init__(
        self, comm: Any, ctx: Context, plan: Plan, give_up_s: float, checkpoints: Checkpoints, steps_before: int
    ) -> None:
        self.comm, self.ctx, self.plan, self.give_up_s = comm, ctx, plan, give_up_s
        self.checkpoints, self.steps_before = checkpoints, steps_before
        self.k = comm.Get_rank()
        self.exchange: MpiExchange | None = None
        self.final: list[bytes] | None = None  # every rank's record at the end
        self.frame: Frame | None = None

    def _exchange(self) -> MpiExchange:
        assert self.exchange is not None, "the exchange is made in warm_up"
        return self.exchange

    def warm_up(self, timeout_s: float, z: bool) -> float:
        """The exchange, and the kernels loaded (:func:`warm_up`)."""
        self.exchange = self.ctx.exchange = MpiExchange(self.comm, timeout_s)
        return warm_up(z)

    def ready(self) -> None:
        """Every rank starts together (a bounded barrier)."""
        wait_for(self.comm.Ibarrier(), max(self.give_up_s, START_S), self.k, "the other ranks to start")
        phase("running")  # test hook: the give-up bound counts from here

    def task(self, before_task: Callable[[int], None]) -> StepEngine:
        """A planned task and its retries (:func:`meshnb.host.member_task`); a rank that gives up
        names the ranks that did not reach the round."""
        task = member_task(self.ctx, self.plan, None, before_task, self.give_up_s)

        def step(done: int, n: int, rows: np.ndarray) -> None:
            try:
                task(done, n, rows)
            except ClusterError as e:
                exchange, view = self._exchange(), self.ctx.view
                late = exchange.outstanding or (view.next_step + 1) % (1 << 64)
                raise stalled(self.k, e, late, exchange.behind(late)) from None

        return step

    def policy(self, f: Frame) -> Policy:
        """The driver's stops and saves, agreed through the rounds' flags: after each task rank 0
        raises FLAG_CHECKPOINT when its cadence is due and any rank FLAG_STOP on Ctrl-C; the
        flags every rank saw by that boundary decide."""
        self.frame = f
        cadence = self.checkpoints.cadence()  # due on rank 0 only: it raises the flag for all
        exchange = self._exchange()

        def restart() -> None:
            exchange.flags &= ~FLAG_CHECKPOINT
            cadence.restart()

        agreed = _Agreed(restart)

        def after(done: int) -> None:
            if cadence.due():
                exchange.flags |= FLAG_CHECKPOINT
            if f.requested():
                exchange.flags |= FLAG_STOP
            agreed.seen, exchange.seen = exchange.seen, 0

        return Policy(lambda: bool(agreed.seen & FLAG_STOP), agreed, after)

    def _gather(self, done: int, with_words: bool, what: str) -> list[bytes]:
        return allgather_bytes(self.comm, _record(done, self.ctx, with_words), self.give_up_s, what)

    def save(self, done: int) -> None:
        """The checkpoint at this boundary (collective: rank 0 writes every rank's record)."""
        records = self.final or self._gather(done, False, f"the checkpoint at step {self.steps_before + done}")
        got = [_unrecord(r) for r in records]
        self.checkpoints.save(done, Snapshot.of(len(got), lambda m: (got[m][4], got[m][1], got[m][3])))

    def results(self, done: int, keep_trace: bool) -> tuple[SystemResult, ...]:
        """Every rank's result, on every rank (the gather is kept out of the steps' seconds)."""
        if self.frame is not None:
            self.frame.stop()
        self._exchange().close(self.give_up_s)
        self.final = self._gather(done, keep_trace, "the results")
        systems = []
        for m, r in enumerate(self.final):
            _, counters, digest, _, page, words = _unrecord(r)
            systems.append(SystemResult(m, page, counters, digest, words if keep_trace else None))
        return tuple(systems)
