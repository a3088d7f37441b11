"""The command line: ``meshnb train``, ``sweep``, ``bench``, ``ops``/``pack``/``check`` (checking an
executor) and ``ptx``/``gpu-check`` (the CUDA image); also ``python -m meshnb``.

One module per command (its ``register``), :mod:`meshnb.cli.base` what they share,
:mod:`meshnb.cli.program` the program; nothing imported here at the top (:func:`entry`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, NoReturn

if TYPE_CHECKING:
    import argparse
    from collections.abc import Sequence

__all__ = ["build_parser", "entry", "main"]


def entry() -> NoReturn:
    """The ``meshnb`` program (console script, ``python -m meshnb``): runs ``sys.argv``, exits with its code.

    Ctrl-C, SIGTERM and SIGHUP become a flag before anything else is imported; stdout and stderr
    get writers that never drop a byte (:func:`meshnb.files.install_std_streams`).

    Raises
    ------
    SystemExit
        Always: the exit code.

    Examples
    --------
    >>> import subprocess, sys
    >>> done = subprocess.run([sys.executable, "-m", "meshnb", "train", "--steps", "x"],
    ...                       capture_output=True, text=True)
    >>> done.returncode, done.stderr
    (2, "meshnb: error: argument --steps: 'x' is not a whole number\\n")
    """
    from ..interrupts import InterruptFlag, phase, signals_left_to_main

    flag = InterruptFlag()
    flag.install()  # SIGINT, SIGTERM, SIGHUP
    phase("held")  # test hook: a Ctrl-C from here on is meshnb's (before it, the interpreter's traceback)
    with signals_left_to_main():  # numpy's BLAS threads start at its import: they inherit the mask
        import numpy  # noqa: F401
    from ..files import install_std_streams

    install_std_streams()  # stdout and stderr that never drop a byte (non-blocking pipes, PYTHONUNBUFFERED)
    from .program import entry as run

    run(flag)


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``meshnb`` with ``argv`` in this process (tests, scripts, notebooks): returns the exit code.

    Parameters
    ----------
    argv : sequence of str, optional
        The command and its flags, as after ``meshnb`` (``sys.argv[1:]`` by default): [the CLI
        reference](../reference/cli.md).

    Returns
    -------
    int
        The exit code: 0 success, 1 a run that failed, 2 bad usage (one line on stderr), 130 Ctrl-C.

    Examples
    --------
    >>> from meshnb.cli import main
    >>> main(["train", "--steps", "64", "--json"])  # doctest: +ELLIPSIS
    {"steps": 64, "systems": [{"system": 0, "params": ["bc1b2526", ...], "digest": "a52f01100995ff64...", ...}]}
    0
    """
    from .program import main as run

    return run(argv)


def build_parser() -> argparse.ArgumentParser:
    """The ``meshnb`` parser with every command (loads no numba: the docs' CLI reference uses it).

    Returns
    -------
    argparse.ArgumentParser

    Examples
    --------
    >>> from meshnb.cli import build_parser
    >>> build_parser().parse_args(["train", "--steps", "8"]).steps
    8
    """
    from .program import build_parser as build

    return build()
