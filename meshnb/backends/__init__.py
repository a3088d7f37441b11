"""The backends: each runs a :class:`~meshnb.options.RunOptions` and returns a
:class:`~meshnb.results.RunResult`.

``BACKENDS`` is the registry: the name a user gives (``backend=``, ``--backend``) -> the module
and function that run it, imported on first use so that a run loads only what it needs (one
system never imports multiprocessing or mpi4py).  ``single`` is one system without a group
(no ``systems``); the others run clusters.
"""

from __future__ import annotations

from collections.abc import Callable
from importlib import import_module

from ..options import RunOptions
from ..results import RunResult

BACKENDS: dict[str, tuple[str, str]] = {
    "single": ("single", "run"),
    "threads": ("local", "run_threads"),
    "processes": ("local", "run_processes"),
    "fused": ("fused", "run"),
    "mpi": ("mpi", "run"),
    "cuda": ("cuda", "run"),
}


def runner(name: str) -> Callable[[RunOptions], RunResult]:
    """The function that runs backend ``name``."""
    module, function = BACKENDS[name]
    run: Callable[[RunOptions], RunResult] = getattr(import_module(f"{__name__}.{module}"), function)
    return run
