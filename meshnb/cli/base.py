"""What every ``meshnb`` command shares: the exit codes, :class:`UsageError`, the one-line parser,
the ``--progress`` flag, and who prints under MPI.

Exit codes, for every command: 0 done (or pass), 1 a failure while running (or a check that
fails), 2 bad arguments or bad input (one line on stderr, ``meshnb: error: ...``), 130
interrupted by Ctrl-C, 141 stdout closed early (as a Unix tool killed by SIGPIPE, but quietly),
143 stopped by SIGTERM, 129 by SIGHUP (every command treats them as Ctrl-C: the finished work
written, temporaries removed, executors killed)."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, NoReturn

if TYPE_CHECKING:
    from _typeshed import SupportsWrite

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
EXIT_INTERRUPTED, EXIT_PIPE, EXIT_TERMINATED, EXIT_HANGUP = 130, 141, 143, 129


class UsageError(Exception):
    """Bad arguments or bad input: one line on stderr, exit 2."""


class Parser(argparse.ArgumentParser):
    """argparse's parser, but an error is one line (:class:`UsageError`), not a usage block."""

    def error(self, message: str) -> NoReturn:
        """Raise :class:`UsageError` with argparse's message: one line, exit 2, no usage block."""
        raise UsageError(message)

    def _print_message(self, message: str, file: SupportsWrite[str] | None = None) -> None:
        """argparse's, but a help that cannot be written to stdout (a full disk) raises, not dropped."""
        out = sys.stdout
        if message and out is not None and id(file) == id(out):  # (id: `is` would narrow out to file's type)
            out.write(message)
            out.flush()
        else:
            super()._print_message(message, file)


def add_progress(parser: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    """The ``--progress/--no-progress`` flag: a bar on stderr, by default when stderr is a terminal."""
    parser.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="progress bar on stderr (default: when stderr is a terminal)",
    )


def wants_progress(args: argparse.Namespace, quiet: bool = False) -> bool:
    """The ``--progress`` flag's value: as given, else a terminal on stderr (and not ``quiet``)."""
    given: bool | None = getattr(args, "progress", None)
    return given if given is not None else (not quiet and sys.stderr.isatty())


def error(text: str, code: int = EXIT_USAGE, *, root_only: bool = False) -> int:
    """Say ``meshnb: error: {text}``, the one line of a failed command (:func:`error_line`); returns ``code``."""
    error_line(f"meshnb: error: {text}", root_only=root_only)
    return code


def error_line(line: str, *, root_only: bool = False) -> None:
    """One line on stderr (``root_only``: from an MPI job's rank 0 alone); nothing where it cannot be written."""
    import contextlib

    if root_only:
        from ..backends.mpi_exchange import is_root

        if not is_root():  # every rank of a job sees the same: one line, from rank 0
            return
    with contextlib.suppress(OSError, ValueError):
        print(line, file=sys.stderr, flush=True)


def is_mpi_run(args: argparse.Namespace | None, argv: Sequence[str] | None = None) -> bool:
    """The command runs on MPI ranks (``--backend mpi``); with ``args`` None (no parse), as ``argv`` says."""
    if args is not None:
        return getattr(args, "backend", None) == "mpi"
    a = list(sys.argv[1:] if argv is None else argv)
    return "--backend=mpi" in a or any(x == "--backend" and y == "mpi" for x, y in zip(a, a[1:]))


def prints(args: argparse.Namespace | None, argv: Sequence[str] | None = None) -> bool:
    """False on the MPI ranks other than 0: they print nothing but their own failures."""
    if not is_mpi_run(args, argv):
        return True
    from ..backends.mpi_exchange import is_root

    return is_root()


def names_stdout(path: str) -> bool:
    """Whether ``path`` is the very file stdout writes to (same device and inode; ``/dev/null`` never)."""
    try:
        out, st = os.fstat(1), os.stat(path)
        return (out.st_dev, out.st_ino) == (st.st_dev, st.st_ino) and not os.path.samefile(path, os.devnull)
    except OSError:
        return False  # a new name, or no stdout: nothing shared
