"""A sweep as a job: its parts run in one process or dealt to the ranks of an MPI job, and handed
in order to one writer as they finish; what ``meshnb sweep`` runs.

Under ``mpiexec -n R`` (:func:`in_mpi_job`) the batches are dealt to the ranks in turn; after each
round rank 0 gathers the round's batches and writes them, and every rank stops at the same chunk
on Ctrl-C.  The parts are bit-equal to the same sweep in one process."""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable
from typing import Any, Protocol

from ..driver import frame
from ..host import steps_shown
from ..interrupts import deferred_interrupt, phase, signals_left_to_main
from .plan import Run, SweepOptions
from .result import SweepResult
from .run import BATCH_SYSTEMS, Runner, chunk_steps, default_threads, kept, make_runner, parts, spans

_SIZE_VARIABLES = ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "PMIX_SIZE")  # MPICH/Intel MPI, Open MPI, PMIx
GATHER_S = 600.0  # bound on rank 0's wait for the other ranks' batches


class PartWriter(Protocol):
    """Where a sweep's parts go (:class:`~meshnb.sweeps.result.CsvWriter`, ``JsonWriter``,
    ``NpzWriter``, or a command's summary): every part in order, then ``close(steps)`` (the steps
    every written system ran), or ``abort()`` on a failure."""

    def write(self, part: SweepResult) -> None: ...

    def close(self, steps: int) -> None: ...

    def abort(self) -> None: ...


class WriterThread:
    """A :class:`PartWriter` whose writes run on a daemon thread, one part behind the sweep (at most one
    part waits); a write's failure is raised by the next call, ``abort`` waits for the write in flight.
    """

    def __init__(self, writer: PartWriter) -> None:
        self.writer = writer
        self.thread: threading.Thread | None = None
        self.error: BaseException | None = None

    def _write(self, part: SweepResult) -> None:
        try:
            self.writer.write(part)
        except BaseException as e:  # noqa: BLE001 (raised again on the sweep's thread by the next call)
            self.error = e

    def _wait(self) -> None:
        if self.thread is not None:
            self.thread.join()
            self.thread = None
        if self.error is not None:
            error, self.error = self.error, None
            raise error

    def write(self, part: SweepResult) -> None:
        self._wait()
        self.thread = threading.Thread(target=self._write, args=(part,), name="meshnb-writer", daemon=True)
        with signals_left_to_main():  # the writer inherits the mask
            self.thread.start()

    def partial(self, systems: int, of_systems: int, steps: int, of_steps: int) -> None:
        """Pass on to the writer that its output is partial (:meth:`meshnb.sweeps.result.Writer.partial`)."""
        self._wait()
        mark_partial(self.writer, systems, of_systems, steps, of_steps)

    def close(self, steps: int) -> None:
        self._wait()
        self.writer.close(steps)

    def abort(self) -> None:
        if self.thread is not None:
            self.thread.join()  # the write in flight ends first; its failure, if any, is dropped with the output
            self.thread = None
        self.error = None
        self.writer.abort()


def mark_partial(writer: Any, systems: int, of_systems: int, steps: int, of_steps: int) -> None:
    """Tell ``writer`` (before its close) that it holds ``systems`` of ``of_systems`` systems run
    ``steps`` of ``of_steps`` steps, where that is less than the sweep; a writer without
    ``partial`` (a summary on stdout) is told nothing."""
    if (systems, steps) != (of_systems, of_steps) and hasattr(writer, "partial"):
        writer.partial(systems, of_systems, steps, of_steps)


def in_mpi_job() -> bool:
    """Whether this process is a rank of an MPI job of more than one rank (the launcher's variables)."""
    return any(os.environ.get(v, "").strip() not in ("", "1", "0") for v in _SIZE_VARIABLES)


def run_to(opts: SweepOptions, systems: Run, open_writer: Callable[[], PartWriter]) -> tuple[int, bool]:
    """Run ``systems`` (planned from ``opts``) and write every part in order to the writer that
    ``open_writer()`` opens (on rank 0 alone in an MPI job), closed with the steps its systems ran or
    aborted on a failure.  Returns ``(steps, stopped)``: ``stopped`` after a Ctrl-C.
    """
    if in_mpi_job():
        if opts.backend == "cuda":
            from ..runspec import OptionError

            raise OptionError("backend='cuda' runs in one process, not in an MPI job")
        from ..backends import mpi, mpi_exchange

        MPI = mpi_exchange.load()
        comm = MPI.COMM_WORLD
        try:
            return _run_rank(opts, systems, open_writer, MPI, comm)
        except BaseException as e:  # one rank failing must not leave the others waiting in a collective
            mpi.abort(comm, e)
            raise  # not reached: abort ends the job
    m, steps = len(systems), systems.steps
    writer: WriterThread | None = None
    done, stopped, ran, written = steps, False, False, 0
    try:
        with deferred_interrupt():  # a stop waits until the writer (and its temporary) has an owner to abort it
            writer = WriterThread(open_writer())
        with (
            steps_shown(m * steps, opts.progress, f"sweep of {m}") as (show, requested),
            make_runner(
                systems,
                backend=opts.backend or "cpu",
                trace=opts.trace,
                loss_every=opts.loss_every,
                threads=opts.threads,
            ) as runner,  # fmt: skip
        ):
            for k, part in enumerate(parts(runner, spans(m, runner.batch), show, should_stop=requested)):
                stopped = part.steps < steps  # the last part, then: its batch in flight at the stop
                if kept(k, part, steps):
                    writer.write(part)
                    done, written = part.steps, written + len(part)
            ran = True
            phase("sweep-ran")  # test hook: a Ctrl-C held since the last boundary comes at the exit
    except KeyboardInterrupt:
        if writer is None or not ran:  # raised inside the run: the parts written so far are no whole sweep's table
            if writer is not None:
                writer.abort()
            raise
        stopped = True  # every part is with the writer: it is written whole, and the stop is said
    except BaseException:
        if writer is not None:
            writer.abort()
        raise
    try:
        with deferred_interrupt() as requested_now:
            phase("sweep-close")  # test hook: the writer's close, Ctrl-C held (a stop here must not lose the file)
            writer.partial(written, m, done, steps)
            writer.close(done)
            stopped = requested_now() or stopped
    except BaseException:
        writer.abort()
        raise
    return done, stopped


def _local_ranks(comm: Any) -> int:
    """Ranks of this job on this host (they share its cores)."""
    MPI = sys.modules["mpi4py.MPI"]
    local = comm.Split_type(MPI.COMM_TYPE_SHARED)
    try:
        return int(local.Get_size())
    finally:
        local.Free()


def _run_rank(
    opts: SweepOptions, systems: Run, open_writer: Callable[[], PartWriter], MPI: Any, comm: Any
) -> tuple[int, bool]:
    """This rank's batches of an MPI job's sweep: the batches are dealt to the ranks in turn and
    rank 0 writes each round's batches as they are gathered."""
    from ..backends import mpi

    k, n = comm.Get_rank(), comm.Get_size()
    m, steps = len(systems), systems.steps
    batch = max(1, min(BATCH_SYSTEMS, -(-m // n)))
    batches = spans(m, batch)
    rounds = -(-len(batches) // n)
    threads = opts.threads or max(1, default_threads() // _local_ranks(comm))
    chunk = chunk_steps(steps, batch, opts.trace)
    writer: PartWriter | None = None
    done, stopped, written = steps, False, 0
    try:
        if k == 0:
            with deferred_interrupt():  # as in run_to: the temporary gets an owner before a stop is raised
                writer = open_writer()
        with (
            frame(m * steps, opts.progress and k == 0, f"sweep of {m}") as f,
            Runner(
                systems, trace=opts.trace, loss_every=opts.loss_every, threads=threads, chunk=chunk, batch=batch
            ) as runner,
        ):

            def should_stop() -> bool:  # every rank stops at the same chunk
                requested = f.requested
                stop = bool(comm.allreduce(int(requested()), op=MPI.MAX))
                requested.seen = requested.seen or stop  # another rank's stop is this one's (its signal may come later)
                return stop

            # this rank's batch of each round (none past the last batch: an empty share), on the one
            # loop over batches; a step of a round counts every rank's batch (the ranks run together)
            mine = [batches[b] if b < len(batches) else (m, m) for b in range(k, rounds * n, n)]
            for j, part in enumerate(parts(runner, mine, f.show, should_stop, weight=n * batch, total=m * steps)):
                shares = mpi.allgather_bytes(comm, part.tobytes(), GATHER_S, "the sweep's batches")
                stopped = part.steps < steps  # every rank's: they stopped at the same chunk
                if not kept(j, part, steps):
                    break
                done = part.steps
                if writer is not None:
                    for data in shares:
                        got = SweepResult.from_bytes(data)
                        if len(got):
                            writer.write(got)
                            written += len(got)
        if writer is not None:
            mark_partial(writer, written, m, done, steps)
            writer.close(done)
    except BaseException:
        if writer is not None:
            writer.abort()
        raise
    return done, stopped
