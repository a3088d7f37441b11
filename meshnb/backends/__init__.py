"""The backends: each runs a :class:`~meshnb.options.RunOptions` and returns a
:class:`~meshnb.results.RunResult`.

``BACKENDS`` is the registry, made from :data:`meshnb.backend_table.TABLE` (what each backend
can do, one row each): the name a user gives (``backend=``, ``--backend``) -> the module and
function that run it, imported on first use so that a run loads only what it needs (one system
never imports multiprocessing or mpi4py).  ``single`` is one system without a group (no
``systems``); the others run clusters.  Every backend runs on the driver (:mod:`meshnb.driver`:
the loop, progress, stops, the checkpoints' cadence, the timers; :func:`meshnb.host.train_run`,
:class:`meshnb.host.Checkpoints`, :func:`meshnb.host.end_run`) and contributes its engine:
``single`` the njit task loop, ``fused`` the fused cluster loop, ``cuda`` the device,
``threads`` and ``processes`` the members in lockstep run by the chunk
(:class:`~meshnb.backends.local.Lockstep`), ``mpi`` a rank's tasks over the exchange, with
stops and checkpoints agreed through the rounds' flags.
"""

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
