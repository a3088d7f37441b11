"""The command line: ``meshnb train``, ``sweep``, ``bench``, and ``ops``/``pack``/``check`` (checking
an executor); also ``python -m meshnb``.  One module per command, each with its ``register``;
:mod:`meshnb.cli.base` holds the exit codes and :class:`~meshnb.cli.base.UsageError` they share,
:mod:`meshnb.cli.main` the program itself."""

from .main import build_parser, entry, main

__all__ = ["build_parser", "entry", "main"]
