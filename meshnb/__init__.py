"""meshnb: the mesh's train program in Python, bit-exact in float mode Z, with a numba core.

The public names load on first use (PEP 562), so ``import meshnb`` and the command line start
without numba until a run needs it.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

# name -> the module that holds it
_EXPORTS = {
    "train": "api",
    "CheckpointError": "checkpoint",
    "Exchange": "exchange",
    "Group": "exchange",
    "Plan": "options",
    "RunOptions": "options",
    "Context": "program",
    "init": "program",
    "task": "program",
    "ClusterError": "results",
    "RunInterrupted": "results",
    "RunResult": "results",
    "SystemResult": "results",
    "Trace": "trace",
    "LAYOUT": "view",
    "VIEW_BYTES": "view",
    "View": "view",
    "sweep": "sweeps",
    "SweepResult": "sweeps",
    "SweepInterrupted": "sweeps",
}
_SUBMODULES = {
    "api",
    "atomics",
    "backends",
    "bench",
    "checkpoint",
    "cli",
    "conformance",
    "driver",
    "exchange",
    "files",
    "floatz",
    "interrupts",
    "kernels",
    "loops",
    "options",
    "program",
    "results",
    "rounds",
    "sha256",
    "sweep_cli",
    "sweep_loop",
    "sweeps",
    "testing",
    "trace",
    "vec",
    "view",
}
__all__ = sorted(_EXPORTS) + ["testing"]


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        value = getattr(import_module(f".{_EXPORTS[name]}", __name__), name)
    elif name in _SUBMODULES:
        value = import_module(f".{name}", __name__)
    else:
        raise AttributeError(f"module 'meshnb' has no attribute {name!r}")
    globals()[name] = value  # once: the next lookup is a plain attribute
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS) | _SUBMODULES)


if TYPE_CHECKING:
    from . import testing as testing
    from .api import train as train
    from .checkpoint import CheckpointError as CheckpointError
    from .exchange import Exchange as Exchange
    from .exchange import Group as Group
    from .options import Plan as Plan
    from .options import RunOptions as RunOptions
    from .program import Context as Context
    from .program import init as init
    from .program import task as task
    from .results import (
        ClusterError as ClusterError,
    )
    from .results import (
        RunInterrupted as RunInterrupted,
    )
    from .results import (
        RunResult as RunResult,
    )
    from .results import (
        SystemResult as SystemResult,
    )
    from .sweeps import SweepInterrupted as SweepInterrupted
    from .sweeps import SweepResult as SweepResult
    from .sweeps import sweep as sweep
    from .trace import Trace as Trace
    from .view import LAYOUT as LAYOUT
    from .view import VIEW_BYTES as VIEW_BYTES
    from .view import View as View
