"""``meshnb sweep``: many independent systems, one table.

    meshnb sweep --lr START:STOP:COUNT[:log] [--pages DIR] --steps S [--ieee] [--trace]
                 [--loss-every N] [--step-base N] [--threads T]
                 [--csv OUT | --json [--out PATH] | --npz PATH]

The table is written as the sweep goes, batch by batch (a file under a temporary name, renamed
into place when whole), so any number of systems runs in the memory of one batch.  Under
``mpiexec -n R`` the batches are dealt to the ranks in turn (each run on the rank's own threads);
after each round rank 0 gathers the round's batches and writes them, so the ranks stream too;
every rank stops at the same chunk on Ctrl-C.  The result is bit-equal to the same sweep on one
machine.

Exit codes: 0 done, 1 a failure while running, 2 bad arguments or input (one line on stderr),
130 interrupted (the finished chunks are written first, as with ``meshnb train``).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from ..files import WriteError, check_output, read_page, refuse_overwrite
from ..host import progress_bar, steps_shown
from ..interrupts import deferred_interrupt, phase
from ..options import arg_type, parse_count
from ..sweeps.plan import check_fits, lr_values
from .base import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_USAGE, UsageError, add_progress

_SIZE_VARIABLES = ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "PMIX_SIZE")  # MPICH/Intel MPI, Open MPI, PMIx
GATHER_S = 600.0  # bound on rank 0's wait for the other ranks' batches
_F32_MAX = float(np.finfo(np.float32).max)
SUMMARY_ROWS = 12  # the summary shows the first and the last this many systems


def lr_range(text: str) -> Callable[[], np.ndarray]:
    """``START:STOP:COUNT[:log]`` -> what makes COUNT float32 LRs from START to STOP (both
    included), evenly spaced, or evenly spaced in log with ``:log`` (:func:`lr_values`)."""
    parts = text.split(":")
    if len(parts) not in (3, 4) or (len(parts) == 4 and parts[3] != "log"):
        raise argparse.ArgumentTypeError(f"--lr {text!r} is not START:STOP:COUNT[:log]")
    try:
        start, stop = float(parts[0]), float(parts[1])
        count = int(parts[2])
    except ValueError:
        raise argparse.ArgumentTypeError(f"--lr {text!r}: START and STOP are numbers, COUNT a whole number") from None
    if count < 1:
        raise argparse.ArgumentTypeError(f"--lr {text!r}: COUNT must be at least 1")
    if not (np.isfinite(start) and np.isfinite(stop)):
        raise argparse.ArgumentTypeError(f"--lr {text!r}: START and STOP must be finite")
    if max(abs(start), abs(stop)) > _F32_MAX:
        raise argparse.ArgumentTypeError(f"--lr {text!r}: START and STOP must be within float32's range (3.4028235e38)")
    try:  # numpy's ranges take 8 bytes an LR, the float32 result 4 more
        check_fits(12 * count, f"--lr {text!r}: {count} learning rates", "sweep fewer at a time")
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    if len(parts) == 4 and (start <= 0 or stop <= 0):
        raise argparse.ArgumentTypeError(f"--lr {text!r}: a log range needs START and STOP > 0")
    return functools.partial(lr_values, start, stop, count, len(parts) == 4)  # made in the run: Ctrl-C is seen


_count = arg_type(parse_count)  # the same whole-number check as meshnb train's


def _positive(text: str) -> int:
    value = int(_count(text))
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} must be at least 1")
    return value


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--lr", type=lr_range, metavar="START:STOP:COUNT[:log]", help="one system per LR (default: each page's own LR)"
    )
    p.add_argument(
        "--pages",
        metavar="DIR",
        help="one system per 4096-byte page file in DIR (sorted by name; "
        "with --lr, one per page and LR); default: the init page",
    )
    p.add_argument("--steps", type=_count, default=4096, metavar="S", help="steps of every system (default 4096)")
    p.add_argument("--step-base", type=_count, metavar="N", help="every system's first step (as train's step base)")
    p.add_argument("--ieee", action="store_true", help="plain IEEE float32 instead of float mode Z (comparison only)")
    p.add_argument("--trace", action="store_true", help="compute every system's trace digest")
    p.add_argument("--loss-every", type=_positive, metavar="N", help="keep the loss of every N-th step (JSON)")
    p.add_argument(
        "--threads",
        type=_positive,
        metavar="T",
        help="threads (default: the usable cores, shared between the ranks of an MPI job on one host)",
    )
    p.add_argument(
        "--device",
        choices=("cpu", "cuda"),
        default="cpu",
        help="cpu (default) or cuda: one warp per system on the CUDA image (the cuda extra and a GPU)",
    )
    out = p.add_mutually_exclusive_group()
    out.add_argument("--csv", metavar="OUT", help="write one CSV row per system to OUT ('-': stdout)")
    out.add_argument("--json", action="store_true", help="print one JSON document (or write it to --out)")
    out.add_argument(
        "--npz", metavar="PATH", help="write the table's columns to PATH (numpy .npz: np.load reads it; no pickles)"
    )
    p.add_argument("--out", metavar="PATH", help="with --json: write the document here instead of stdout")
    add_progress(p)


def register(subparsers: Any) -> argparse.ArgumentParser:
    """Add the ``sweep`` sub-command to ``meshnb``'s sub-parsers (its handler: ``args.handler(args)``)."""
    p = subparsers.add_parser(
        "sweep",
        help="run many independent systems (LRs x pages) and tabulate them",
        description=__doc__.splitlines()[0],
    )
    add_arguments(p)
    p.set_defaults(handler=handle)
    return p


def _read_pages(directory: str) -> tuple[list[bytes], list[str]]:
    """Every entry of ``directory`` as a page, sorted by name: anything that is not a regular
    4096-byte file (a FIFO, a device behind a symlink, a dangling symlink, a loop, a directory)
    is refused in one line, never skipped or read."""
    d = Path(directory)
    if not d.is_dir():
        raise UsageError(f"--pages {directory}: not a directory")
    try:
        names = sorted(os.listdir(d))
    except OSError as e:
        raise UsageError(f"--pages {directory}: {e.strerror}") from None
    if not names:
        raise UsageError(f"--pages {directory}: no files")
    try:
        check_fits(4096 * len(names), f"--pages {directory}: {len(names)} pages", "split the directory")
        pages = [read_page(d / name, "--pages") for name in names]
    except ValueError as e:
        raise UsageError(str(e)) from None
    return pages, names


def _local_ranks(comm: Any) -> int:
    """Ranks of this job on this host (they share its cores)."""
    MPI = sys.modules["mpi4py.MPI"]
    local = comm.Split_type(MPI.COMM_TYPE_SHARED)
    try:
        return int(local.Get_size())
    finally:
        local.Free()


def _in_mpi_job() -> bool:
    return any(os.environ.get(v, "").strip() not in ("", "1", "0") for v in _SIZE_VARIABLES)


class _Summary:
    """The summary printed without ``--csv``/``--json``/``--npz``: the first and last systems."""

    def __init__(self, names: list[str] | None) -> None:
        self.names = names
        self.head: list[dict[str, Any]] = []
        self.tail: list[dict[str, Any]] = []
        self.count, self.seconds, self.first_call, self.z = 0, 0.0, 0.0, True

    def write(self, part: Any) -> None:
        if not len(part):
            return
        want = SUMMARY_ROWS - len(self.head)
        if want > 0:
            self.head.extend(part.to_records(self.names)[:want])
        if len(part) > SUMMARY_ROWS:  # the records of the part's last systems only
            k = len(part) - SUMMARY_ROWS
            tail_part = _slice(part, k)
            self.tail = tail_part.to_records(self.names)
        else:
            self.tail = (self.tail + part.to_records(self.names))[-SUMMARY_ROWS:]
        self.count += len(part)
        self.seconds += part.seconds
        self.first_call = max(self.first_call, part.first_call_seconds)
        self.z = part.z

    def close(self, steps: int) -> None:
        mode = "float mode Z" if self.z else "IEEE float32"
        rate = steps * self.count / self.seconds if self.seconds > 0 else float("inf")
        lines = [
            f"sweep: {self.count} systems x {steps} steps ({mode}): {rate:,.0f} system-steps/s "
            f"({self.seconds:.3f} s; first call {self.first_call:.2f} s)",
            f"{'system':>6}  {'page':>12}  {'lr':>12}  {'last loss':>12}  digest",
        ]
        rows = list({r["system"]: r for r in self.head + self.tail}.values())  # head and tail may overlap
        for i, rec in enumerate(rows):
            if i and rec["system"] != rows[i - 1]["system"] + 1:
                lines.append(f"{'...':>6}")
            lines.append(
                f"{rec['system']:>6}  {str(rec['page'])[-12:]:>12}  {rec['lr']:>12.6g}  "
                f"{rec['last_loss']:>12.6g}  {rec['digest']}"
            )
        out = sys.stdout
        assert out is not None  # refused before the run
        out.write("\n".join(lines) + "\n")
        out.flush()

    def abort(self) -> None:
        pass


def _slice(part: Any, k: int) -> Any:
    """Systems ``k ..`` of a part, as a result of their own (for the summary's tail)."""
    from dataclasses import fields, replace

    changes: dict[str, Any] = {}
    for f in fields(part):
        v = getattr(part, f.name)
        if isinstance(v, np.ndarray) and f.name not in ("loss_steps", "starts") and v.shape[:1] == (len(part),):
            changes[f.name] = v[k:]
    return replace(part, first=part.first + k, **changes)


def _writer(args: argparse.Namespace, z: bool, names: list[str] | None) -> Any:
    from ..sweeps.result import CsvWriter, JsonWriter, NpzWriter

    if args.csv is not None:
        return CsvWriter(args.csv, names)
    if args.json:
        return JsonWriter("-" if args.out is None else args.out, z, names)
    if args.npz is not None:
        return NpzWriter(args.npz, names)
    return _Summary(names)


def _check_args(args: argparse.Namespace) -> None:
    if args.out is not None and not args.json:
        raise UsageError("--out goes with --json")
    for option, path in (("--out", args.out), ("--csv", args.csv), ("--npz", args.npz)):
        if path is not None and path != "-":
            check_output(path, option)  # before the run, not after it
            refuse_overwrite(option, path, "--pages directory", args.pages)
    if args.npz == "-":
        raise UsageError("--npz -: the npz is a file (give a path)")
    to_stdout = (
        args.csv == "-" or (args.json and args.out is None) or (args.csv is None and not args.json and args.npz is None)
    )
    if to_stdout and sys.stdout is None:
        raise UsageError(
            "stdout is closed: nothing could be written (give --csv PATH, --json --out PATH or --npz PATH)"
        )


def _run(args: argparse.Namespace) -> int:
    """Run the sweep of ``args`` (split across the ranks of an MPI job), writing its table as it
    goes; the exit code."""
    from .. import sweeps as sw
    from ..sweeps.run import CudaRunner, parts, spans

    _check_args(args)
    pages, names = _read_pages(args.pages) if args.pages else (None, None)
    try:
        phase("sweep-lrs")  # test hook: the LR list is made from here (a Ctrl-C then is seen at once)
        lrs = None if args.lr is None else args.lr()
        systems = sw.plan(args.steps, lrs=lrs, view_in=pages, step_base=args.step_base, z=not args.ieee)
    except ValueError as e:
        raise UsageError(str(e)) from None
    progress = sys.stderr.isatty() if args.progress is None else args.progress
    if args.device == "cuda" and (args.loss_every or args.threads or _in_mpi_job()):
        raise UsageError("--device cuda: one process, no --loss-every, no --threads (the CPU's)")
    if _in_mpi_job():
        from ..backends import mpi, mpi_exchange

        MPI = mpi_exchange.load()
        comm = MPI.COMM_WORLD
        try:
            return _run_rank(args, systems, progress, names, MPI, comm)
        except BaseException as e:  # one rank failing must not leave the others waiting in a collective
            mpi.abort(comm, e)
            raise  # not reached: abort ends the job
    m = len(systems)
    writer = _writer(args, systems.z, names)
    try:
        with (
            steps_shown(m * args.steps, progress, f"sweep of {m}") as (show, requested),
            (
                contextlib.nullcontext(CudaRunner(systems, args.steps, trace=args.trace))
                if args.device == "cuda"
                else sw.Runner(systems, args.steps, trace=args.trace, loss_every=args.loss_every, threads=args.threads)
            ) as runner,
        ):
            steps, code = args.steps, 0
            for k, part in enumerate(parts(runner, spans(m, runner.batch), show, should_stop=requested)):
                if part.steps < args.steps:  # stopped: a first batch's partial result, or the finished batches
                    code = EXIT_INTERRUPTED
                    if k == 0:
                        writer.write(part)
                        steps = part.steps
                    break
                writer.write(part)
        writer.close(steps)
    except BaseException:
        writer.abort()
        raise
    return code


def _run_rank(
    args: argparse.Namespace, systems: Any, progress: bool, names: list[str] | None, MPI: Any, comm: Any
) -> int:
    """This rank's batches of an MPI job's sweep: the batches are dealt to the ranks in turn and
    rank 0 writes each round's batches as they are gathered."""
    from .. import sweeps as sw
    from ..backends import mpi
    from ..sweeps.run import spans

    k, n = comm.Get_rank(), comm.Get_size()
    m = len(systems)
    batch = max(1, min(sw.BATCH_SYSTEMS, -(-m // n)))
    batches = spans(m, batch)
    rounds = -(-len(batches) // n)
    threads = args.threads or max(1, sw.default_threads() // _local_ranks(comm))
    chunk = sw.chunk_steps(args.steps, batch, args.trace)
    writer = _writer(args, systems.z, names) if k == 0 else None
    bar = progress_bar(m * args.steps, progress and k == 0, f"sweep of {m}")
    steps, code = args.steps, 0
    try:
        with (
            deferred_interrupt() as requested,
            sw.Runner(
                systems,
                args.steps,
                trace=args.trace,
                loss_every=args.loss_every,
                threads=threads,
                chunk=chunk,
                batch=batch,
            ) as runner,
        ):

            def should_stop() -> bool:  # every rank stops at the same chunk
                stop = bool(comm.allreduce(int(requested()), op=MPI.MAX))
                requested.seen = requested.seen or stop  # another rank's stop is this one's (its signal may come later)
                return stop

            for j in range(rounds):
                b = j * n + k
                lo, hi = batches[b] if b < len(batches) else (m, m)
                round_steps = j * n * batch * args.steps  # this round's start, in system-steps
                on_chunk = (
                    (lambda d, r=round_steps: bar.update(min(m * args.steps, r + d * n * batch) - bar.n))
                    if bar is not None
                    else None
                )
                part = runner.run(lo, hi, on_chunk, should_stop)
                shares = mpi.allgather_bytes(comm, part.tobytes(), GATHER_S, "the sweep's batches")
                stopped = part.steps < args.steps
                if writer is not None and (not stopped or j == 0):
                    for data in shares:
                        got = sw.SweepResult.from_bytes(data)
                        if len(got):
                            writer.write(got)
                if stopped:
                    code = EXIT_INTERRUPTED
                    steps = part.steps if j == 0 else args.steps
                    break
        if writer is not None:
            writer.close(steps)
    except BaseException:
        if writer is not None:
            writer.abort()
        raise
    finally:
        if bar is not None:
            bar.close()
    return code


def _error_line(line: str) -> None:
    from ..backends.mpi_exchange import is_root

    if is_root():  # every rank of a job sees the same: one line, from rank 0
        print(line, file=sys.stderr, flush=True)


def _error(text: str) -> None:
    _error_line(f"meshnb: error: {text}")


def handle(args: argparse.Namespace) -> int:
    """Run ``meshnb sweep``: write the result; returns the exit code."""
    try:
        code = _run(args)
        if code == EXIT_INTERRUPTED:
            _error_line("meshnb: interrupted (the finished systems were written)")
        return code
    except BrokenPipeError:
        raise  # the reader of stdout is gone: the command line ends quietly with 141
    except (UsageError, ValueError) as e:
        _error(str(e))
        return EXIT_USAGE
    except OSError as e:
        _error(str(e) if isinstance(e, WriteError) else f"{type(e).__name__}: {e}")  # WriteError names its file
        return EXIT_FAILED
    except KeyboardInterrupt:  # outside the chunks (start-up): nothing done yet
        _error("interrupted")
        return EXIT_INTERRUPTED
