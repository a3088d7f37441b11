"""``meshnb bench``: steps per second of every path on this machine, each figure bit-verified first."""

from __future__ import annotations

import argparse
from typing import Any


def _parse_paths(text: str) -> list[str]:
    """``--paths A,B`` as names (at least one)."""
    names = [p for p in text.split(",") if p]
    if not names:
        raise ValueError(f"{text!r} names no path")
    return names


def register(sub: Any) -> None:
    """Add ``bench`` to the ``meshnb`` parser's subcommands."""
    from ..options import arg_type, parse_seconds

    b = sub.add_parser("bench", help="steps per second of each path on this machine (every figure bit-verified)")
    b.add_argument(
        "--seconds", type=arg_type(parse_seconds), metavar="S", help="time budget per path (default 2; --quick 0.25)"
    )
    b.add_argument("--quick", action="store_true", help="a ~3 s run: shorter budgets and bit checks")
    b.add_argument("--json", action="store_true", help="print one JSON document instead of the table")
    b.add_argument("--paths", type=arg_type(_parse_paths), metavar="A,B", help="only these paths")
    b.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Run ``meshnb bench``; returns the exit code."""
    from .. import bench  # not imported by `meshnb train`: start-up stays short

    return bench.main(args.seconds, args.quick, args.json, args.paths)
