"""The backends: each runs a :class:`~meshnb.options.RunOptions` and returns a
:class:`~meshnb.results.RunResult`.

``BACKENDS`` maps the name a user gives (``backend=``, ``--backend``) to the module and function
that run it (from :data:`meshnb.backend_table.TABLE`), imported on first use so that a run loads
only what it needs.  Every backend runs on the driver (:mod:`meshnb.driver`,
:func:`meshnb.host.train_run`) and contributes its engine."""

from __future__ import annotations

from collections.abc import Callable
from importlib import import_module

from ..backend_table import BY_NAME, TABLE, BackendInfo
from ..options import RunOptions
from ..results import RunResult

BACKENDS: dict[str, tuple[str, str]] = {b.name: (b.module, b.function) for b in TABLE}


def info(name: str) -> BackendInfo:
    """What backend ``name`` can do (its row of the table)."""
    return BY_NAME[name]


def runner(name: str) -> Callable[[RunOptions], RunResult]:
    """The function that runs backend ``name``."""
    module, function = BACKENDS[name]
    run: Callable[[RunOptions], RunResult] = getattr(import_module(f"{__name__}.{module}"), function)
    return run
