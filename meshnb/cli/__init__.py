"""The command line: ``meshnb train``, ``sweep``, ``bench``, ``ops``/``pack``/``check`` (checking an
executor) and ``ptx``/``gpu-check`` (the CUDA image); also ``python -m meshnb``.

One module per command, each with its ``register``; :mod:`meshnb.cli.base` holds the exit codes
and :class:`~meshnb.cli.base.UsageError` they share, :mod:`meshnb.cli.program` the program itself.
This module stays tiny on purpose: the ``meshnb`` program holds Ctrl-C as a flag from its first
line (:func:`entry`), so nothing may be imported before that but what the flag needs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NoReturn

if TYPE_CHECKING:
    import argparse
    from collections.abc import Sequence

__all__ = ["build_parser", "entry", "main"]


def entry() -> NoReturn:
    """The ``meshnb`` program (its console script and ``python -m meshnb``): Ctrl-C, SIGTERM and
    SIGHUP become a flag before anything else is imported, stdout and stderr writers that never
    drop a byte (:func:`meshnb.files.install_std_streams`), then :func:`meshnb.cli.program.entry`
    runs the command."""
    from ..interrupts import InterruptFlag

    flag = InterruptFlag()
    flag.install()  # SIGINT, SIGTERM, SIGHUP
    from ..files import install_std_streams

    install_std_streams()  # stdout and stderr that never drop a byte (non-blocking pipes, PYTHONUNBUFFERED)
    from .program import entry as run

    run(flag)


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``meshnb`` with ``argv`` in this process (tests, scripts, notebooks): returns the exit code."""
    from .program import main as run

    return run(argv)


def build_parser() -> argparse.ArgumentParser:
    """The ``meshnb`` parser with every command (loads no numba: the docs' CLI reference uses it)."""
    from .program import build_parser as build

    return build()
