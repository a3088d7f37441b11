"""``meshnb.train``: the one public signature of a run.

The keywords are :class:`~meshnb.options.RunOptions`' fields (declared there once, with their
defaults, checks and help); ``train`` makes the options, picks the backend from the registry
(:mod:`meshnb.backends`) and runs it.
"""

from __future__ import annotations

import inspect
from typing import Any

from . import files
from .backends import runner
from .options import RunOptions, option_fields
from .results import RunResult


def train(steps: int | None = None, **options: Any) -> RunResult:
    return run(RunOptions.from_keywords(steps, **options))


def run(opts: RunOptions) -> RunResult:
    """Run checked options on the backend they name.  A run that writes a checkpoint owns its
    path: checked before the run, and locked while it runs (under MPI by rank 0, in the backend)."""
    if opts.checkpoint is None or opts.backend_name == "mpi":
        return runner(opts.backend_name)(opts)
    files.check_output(opts.checkpoint, "checkpoint")
    with files.hold(opts.checkpoint, "checkpoint"):
        return runner(opts.backend_name)(opts)


def _document() -> None:
    """train's signature and docstring, from the options table (for help(), IDEs and Sphinx)."""
    params = [
        inspect.Parameter("steps", inspect.Parameter.POSITIONAL_OR_KEYWORD, default=None, annotation="int | None")
    ]
    lines = []
    for name, default, flag in option_fields():
        if name != "steps":
            params.append(inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default))
        lines.append(f"    ``{name}`` (default {default!r}): {flag.help}")
    train.__signature__ = inspect.Signature(params, return_annotation="RunResult")  # type: ignore[attr-defined]
    train.__doc__ = "\n".join(
        [
            "Run the train program; returns a :class:`~meshnb.results.RunResult`.",
            "",
            "Without ``systems``: one system without a group.  With ``systems=N`` (1 to 64): a cluster in",
            'lockstep on ``backend`` (``result.systems[k]`` is system k); ``backend="mpi"`` in every rank of',
            "an MPI job runs one system per rank.  Raises ValueError for bad options,",
            ":class:`~meshnb.results.RunInterrupted` on Ctrl-C (with the state so far) and",
            ":class:`~meshnb.results.ClusterError` when a member fails.",
            "",
            "Options:",
            *lines,
        ]
    )


_document()
