"""``meshnb sweep``: many independent systems, one table.

Its flags are :class:`~meshnb.sweeps.plan.SweepOptions`'s, spelled as ``meshnb train``'s (``--pages``
and ``--device`` warn); :func:`meshnb.sweeps.job.run_to` runs it, this module parses and prints."""

from __future__ import annotations

import argparse
import errno
import os
import sys
from pathlib import Path
from typing import Any

from ..files import WriteError, check_output, os_error_text, read_page, refuse_overwrite
from ..sweeps.plan import check_fits
from .base import EXIT_FAILED, EXIT_INTERRUPTED, UsageError, add_progress, error, error_line, wants_progress

SUMMARY_ROWS = 12  # the summary shows the first and the last this many systems


class _Deprecated(argparse.Action):
    """An old flag: says so on stderr (one line) and stores its value as the new flag's."""

    def __init__(self, *args: Any, new: str, convert: Any = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.new, self.convert = new, convert

    def __call__(self, parser: Any, namespace: argparse.Namespace, values: Any, option: str | None = None) -> None:
        error_line(f"meshnb: warning: {option} is deprecated: use {self.new}")
        setattr(namespace, self.dest, self.convert(values) if self.convert else values)


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Add the sweep's flags (the table of :func:`meshnb.sweeps.plan.sweep_option_fields` and the outputs) to ``p``."""
    from ..options import add_flags
    from ..sweeps.plan import sweep_option_fields

    add_flags(p, sweep_option_fields())
    p.add_argument(
        "--pages", dest="view_in", metavar="DIR", action=_Deprecated, new="--view-in", help=argparse.SUPPRESS
    )
    p.add_argument(
        "--device", dest="backend", choices=("cpu", "cuda"), action=_Deprecated, new="--backend {cpu,cuda}",
        help=argparse.SUPPRESS,
    )  # fmt: skip
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
        description="Many independent systems (learning rates x pages), one table.",
    )
    add_arguments(p)
    p.set_defaults(handler=handle)
    return p


def _read_pages(path: str) -> tuple[list[bytes], list[str]]:
    """The start pages of ``--view-in PATH``: the page file, or each entry of the directory by name, hidden
    names (``.page.swp``) skipped; an entry that is no regular 4096-byte file is refused (a ValueError), never read."""
    if not path:  # Path('') is '.', the working directory
        raise UsageError("--view-in '': an empty path is not a file name")
    d = Path(path)
    if not d.is_dir():
        return [read_page(d, "--view-in")], [d.name]
    try:
        entries = os.listdir(d)
    except OSError as e:
        raise UsageError(f"--view-in {path}: {e.strerror}") from None
    names = sorted(name for name in entries if not name.startswith("."))
    if not names:
        hidden = f" (only names starting with '.', which are skipped: {len(entries)})" if entries else ""
        raise UsageError(f"--view-in {path}: no files{hidden}")
    check_fits(4096 * len(names), f"--view-in {path}: {len(names)} pages", "split the directory")
    return [read_page(d / name, "--view-in") for name in names], names


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
        if len(self.head) < SUMMARY_ROWS:
            self.head.extend(part.to_records(self.names)[: SUMMARY_ROWS - len(self.head)])
        last = part[max(0, len(part) - SUMMARY_ROWS) :].to_records(self.names)  # the part's last systems only
        self.tail = (self.tail + last)[-SUMMARY_ROWS:]
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


def _writer(args: argparse.Namespace, z: bool, names: list[str] | None, threads: int, rows: int) -> Any:
    from ..sweeps.result import CsvWriter, JsonWriter, NpzWriter

    if args.csv is not None:
        return CsvWriter(args.csv, names, threads)  # the rows of a part formatted on the sweep's threads
    if args.json:
        return JsonWriter("-" if args.out is None else args.out, z, names)
    if args.npz is not None:
        return NpzWriter(args.npz, names, rows)  # the rows known: each column written in place
    return _Summary(names)


def _check_args(args: argparse.Namespace) -> None:
    if args.out is not None and not args.json:
        raise UsageError("--out goes with --json")
    for option, path in (("--out", args.out), ("--csv", args.csv), ("--npz", args.npz)):
        if path is not None and path != "-":
            check_output(path, option)  # before the run, not after it
            given = "--view-in directory" if args.view_in and os.path.isdir(args.view_in) else "--view-in"
            refuse_overwrite(option, path, given, args.view_in)
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
    """Run the sweep of ``args`` (split across an MPI job's ranks), its table written as it goes."""
    from ..options import given_options
    from ..sweeps.job import run_to
    from ..sweeps.plan import SweepOptions, sweep_option_fields
    from ..sweeps.run import default_threads

    _check_args(args)
    given = given_options(args, sweep_option_fields())
    if callable(given.get("lrs")):  # a range: made here, where a Ctrl-C stops it at once
        given["lrs"] = given["lrs"]()
    path = given.pop("view_in", None)
    pages, names = _read_pages(path) if path is not None else (None, None)
    progress = wants_progress(args)
    opts = SweepOptions(**given, view_in=pages, progress=progress)  # an OptionError: handle spells it as flags
    systems = opts.describe()
    threads = opts.threads or default_threads()
    made: list[Any] = []

    def open_writer() -> Any:
        made.append(_writer(args, systems.z, names, threads, len(systems)))
        return made[-1]

    _, stopped = run_to(opts, systems, open_writer)
    if stopped:
        beside = getattr(made[0], "diverted", None) if made else None
        where = f" to {beside}, marked partial; {beside.removesuffix('.partial')} kept" if beside else ""
        error_line(f"meshnb: interrupted (the finished systems were written{where})", root_only=True)
        return EXIT_INTERRUPTED
    return 0


def handle(args: argparse.Namespace) -> int:
    """Run ``meshnb sweep``: write the result; returns the exit code."""
    try:
        return _run(args)
    except BrokenPipeError:
        raise  # the reader of stdout is gone: the command line ends quietly with 141
    except WriteError as e:
        if e.errno == errno.EPIPE:  # --npz /dev/stdout | head: the reader is gone, as for --csv -
            raise BrokenPipeError(e.errno, e.strerror) from None
        # a stream whose reader stopped reading was given up on because of a stop: the stop's exit
        return error(str(e), EXIT_INTERRUPTED if e.errno == errno.ETIMEDOUT else EXIT_FAILED, root_only=True)
    except (UsageError, ValueError) as e:
        from ..sweeps.plan import sweep_option_fields  # loaded by register

        flags = {name: flag.flag for name, _, flag in sweep_option_fields() if flag.flag}
        option_error = getattr(sys.modules.get("meshnb.runspec"), "OptionError", ())
        return error(e.for_cli(flags) if isinstance(e, option_error) else str(e), root_only=True)
    except OSError as e:
        return error(os_error_text(e), EXIT_FAILED, root_only=True)
    except KeyboardInterrupt:  # outside the chunks (start-up): nothing done yet
        return error("interrupted", EXIT_INTERRUPTED, root_only=True)
