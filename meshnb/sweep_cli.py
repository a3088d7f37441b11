"""``meshnb sweep``: many independent systems, one table.

    meshnb sweep --lr START:STOP:COUNT[:log] [--pages DIR] --steps S [--ieee] [--trace]
                 [--loss-every N] [--step-base N] [--threads T] [--csv OUT | --json [--out PATH]]

Under ``mpiexec -n R`` the systems are split across the ranks (contiguous shares, each run on
the rank's own threads); every rank stops at the same chunk on Ctrl-C, rank 0 gathers the shares
and writes the result, bit-equal to the same sweep on one machine.

Exit codes: 0 done, 1 a failure while running, 2 bad arguments or input (one line on stderr),
130 interrupted (the finished chunks are written first, as with ``meshnb train``).
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import os
import sys
from pathlib import Path
from typing import Any

import numpy as np

from .files import check_output, read_page, write_atomic
from .host import progress_bar
from .interrupts import deferred_interrupt
from .options import arg_type, parse_count

_SIZE_VARIABLES = ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "PMIX_SIZE")  # MPICH/Intel MPI, Open MPI, PMIx
GATHER_S = 600.0  # bound on rank 0's wait for the other ranks' shares


class UsageError(Exception):
    """Bad arguments or bad input: exit 2."""


def lr_range(text: str) -> np.ndarray:
    """``START:STOP:COUNT[:log]`` -> COUNT float32 LRs from START to STOP (both included),
    evenly spaced, or evenly spaced in log with ``:log``."""
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
    if len(parts) == 4:
        if start <= 0 or stop <= 0:
            raise argparse.ArgumentTypeError(f"--lr {text!r}: a log range needs START and STOP > 0")
        return np.geomspace(start, stop, count).astype(np.float32)
    return np.linspace(start, stop, count).astype(np.float32)


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
    out = p.add_mutually_exclusive_group()
    out.add_argument("--csv", metavar="OUT", help="write one CSV row per system to OUT ('-': stdout)")
    out.add_argument("--json", action="store_true", help="print one JSON document (or write it to --out)")
    p.add_argument("--out", metavar="PATH", help="with --json: write the document here instead of stdout")
    p.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="progress bar on stderr (default: when stderr is a terminal)",
    )


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
    d = Path(directory)
    if not d.is_dir():
        raise UsageError(f"--pages {directory}: not a directory")
    files = sorted(f for f in d.iterdir() if f.is_file())
    if not files:
        raise UsageError(f"--pages {directory}: no files")
    try:  # each a regular 4096-byte file (a FIFO or a device there is refused, never read)
        pages = [read_page(f, "--pages") for f in files]
    except ValueError as e:
        raise UsageError(str(e)) from None
    return pages, [f.name for f in files]


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


def _run(args: argparse.Namespace) -> tuple[Any, int, list[str] | None]:
    """The sweep of ``args`` (split across the ranks of an MPI job): (result or None off rank 0, exit
    code, page names)."""
    from . import sweeps as sw

    if args.out and not args.json:
        raise UsageError("--out goes with --json")
    for option, path in (("--out", args.out), ("--csv", args.csv)):
        if path and path != "-":
            check_output(path, option)  # before the run, not after it
    pages, names = _read_pages(args.pages) if args.pages else (None, None)
    try:
        systems = sw.plan(args.steps, lrs=args.lr, pages=pages, step_bases=args.step_base, z=not args.ieee)
    except ValueError as e:
        raise UsageError(str(e)) from None
    progress = sys.stderr.isatty() if args.progress is None else args.progress
    if not _in_mpi_job():
        bar = progress_bar(args.steps, progress, f"sweep of {len(systems)}")
        try:
            with deferred_interrupt() as requested:
                r = sw.run(
                    systems,
                    args.steps,
                    trace=args.trace,
                    loss_every=args.loss_every,
                    threads=args.threads,
                    on_chunk=(lambda d: bar.update(d - bar.n)) if bar is not None else None,
                    should_stop=requested,
                )
        finally:
            if bar is not None:
                bar.close()
        return r, (130 if r.steps < args.steps else 0), names
    from .backends import mpi, mpi_exchange

    MPI = mpi_exchange.load()
    comm = MPI.COMM_WORLD
    try:
        return _run_rank(args, systems, progress, names, MPI, comm)
    except BaseException as e:  # one rank failing must not leave the others waiting in a collective
        mpi.abort(comm, e)
        raise  # not reached: abort ends the job


def _run_rank(
    args: argparse.Namespace, systems: Any, progress: bool, names: list[str] | None, MPI: Any, comm: Any
) -> tuple[Any, int, list[str] | None]:
    """This rank's share of an MPI job's sweep; rank 0 returns the gathered result, the others None."""
    from . import sweeps as sw
    from .backends import mpi

    k, n = comm.Get_rank(), comm.Get_size()
    m = len(systems)
    share = systems[m * k // n : m * (k + 1) // n]
    threads = args.threads or max(1, sw.default_threads() // _local_ranks(comm))
    bar = progress_bar(args.steps, progress and k == 0, f"sweep of {m}")
    with deferred_interrupt() as requested:

        def should_stop() -> bool:  # every rank stops at the same chunk
            return bool(comm.allreduce(int(requested()), op=MPI.MAX))

        try:
            r = sw.run(
                share,
                args.steps,
                trace=args.trace,
                loss_every=args.loss_every,
                threads=threads,
                chunk=sw.chunk_steps(args.steps, m, args.trace),
                should_stop=should_stop,
                on_chunk=(lambda d: bar.update(d - bar.n)) if bar is not None else None,
            )
        finally:
            if bar is not None:
                bar.close()
    parts = mpi.allgather_bytes(comm, r.tobytes(), GATHER_S, "the sweep's shares")
    if k != 0:
        return None, (130 if r.steps < args.steps else 0), names
    whole = sw.SweepResult.concat([sw.SweepResult.from_bytes(p) for p in parts])
    return whole, (130 if whole.steps < args.steps else 0), names


def _records(r: Any, names: list[str] | None) -> list[dict[str, Any]]:
    records = r.to_records()
    if names is not None:
        for rec in records:
            rec["page"] = names[rec["page"]]
    return records


def _csv_text(r: Any, names: list[str] | None) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(
        [
            "system",
            "page",
            "lr_word",
            "lr",
            "step_base",
            "steps",
            "last_loss",
            "a",
            "b",
            "c",
            "d",
            "digest",
            "trace_digest",
        ]
    )
    for rec in _records(r, names):
        w.writerow(
            [
                rec["system"],
                rec["page"],
                rec["lr_word"],
                repr(rec["lr"]),
                rec["step_base"],
                r.steps,
                repr(rec["last_loss"]),
                *rec["params"],
                rec["digest"],
                rec["trace_digest"],
            ]
        )
    return buf.getvalue()


def _summary(r: Any, names: list[str] | None) -> str:
    mode = "float mode Z" if r.z else "IEEE float32"
    head = (
        f"sweep: {len(r)} systems x {r.steps} steps ({mode}): {r.system_steps_per_second:,.0f} system-steps/s "
        f"({r.seconds:.3f} s; first call {r.first_call_seconds:.2f} s)"
    )
    lines = [head, f"{'system':>6}  {'page':>12}  {'lr':>12}  {'last loss':>12}  digest"]
    shown = list(range(len(r))) if len(r) <= 24 else [*range(12), *range(len(r) - 12, len(r))]
    recs = _records(r, names)
    for i, k in enumerate(shown):
        if i and k != shown[i - 1] + 1:
            lines.append(f"{'...':>6}")
        rec = recs[k]
        lines.append(
            f"{k:>6}  {str(rec['page'])[-12:]:>12}  {rec['lr']:>12.6g}  {rec['last_loss']:>12.6g}  {rec['digest']}"
        )
    return "\n".join(lines)


def _write(r: Any, args: argparse.Namespace, names: list[str] | None) -> None:
    if args.json:
        doc = r.to_json()
        doc["systems"] = _records(r, names)
        text = json.dumps(doc)
        if args.out:
            write_atomic(args.out, (text + "\n").encode(), "--out")
        else:
            print(text, flush=True)
    elif args.csv:
        text = _csv_text(r, names)
        if args.csv == "-":
            sys.stdout.write(text)
            sys.stdout.flush()
        else:
            write_atomic(args.csv, text.encode(), "--csv")
    else:
        print(_summary(r, names), flush=True)


def _error(text: str) -> None:
    from .backends.mpi_exchange import is_root

    if is_root():  # every rank of a job sees the same bad argument: one line, from rank 0
        print(f"meshnb: error: {text}", file=sys.stderr, flush=True)


def handle(args: argparse.Namespace) -> int:
    """Run ``meshnb sweep``: write the result; returns the exit code."""
    try:
        r, code, names = _run(args)
        if r is not None:
            _write(r, args, names)
        if code == 130 and r is not None:
            print(f"meshnb: interrupted after {r.steps} steps (the result so far was written)", file=sys.stderr)
        return code
    except UsageError as e:
        _error(str(e))
        return 2
    except ValueError as e:
        _error(str(e))
        return 2
    except OSError as e:
        _error(f"{type(e).__name__}: {e}")
        return 1
    except KeyboardInterrupt:  # outside the chunks (start-up): nothing done yet
        _error("interrupted")
        return 130
