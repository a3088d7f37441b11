"""meshnb: the mesh's train program in Python, bit-exact in float mode Z, with a numba core.

``__all__`` is the library's public API (the architecture page's "Two audiences"): the names below
and the public modules; ``meshnb.conformance`` is the executor-checking tools' face.  The names
load on first use (PEP 562), so ``import meshnb`` starts without numba.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .lazy import lazy_face

# public name -> the module that holds it
_EXPORTS = {
    "train": "api",
    "sweep": "sweeps",
    "CheckpointError": "checkpoint",
    "Exchange": "exchange",
    "Group": "exchange",
    "OptionError": "runspec",
    "Plan": "options",
    "RunOptions": "options",
    "Context": "program",
    "init": "program",
    "task": "program",
    "ClusterError": "results",
    "RunInterrupted": "results",
    "RunResult": "results",
    "SaveFailed": "results",
    "SystemResult": "results",
    "SweepInterrupted": "sweeps",
    "SweepResult": "sweeps",
    "Trace": "trace",
    "LAYOUT": "view",
    "VIEW_BYTES": "view",
    "View": "view",
}
_MODULES = ("cli", "conformance", "floatz", "kernels", "sweeps", "testing")
__all__ = sorted(_EXPORTS) + list(_MODULES)


def _version() -> str:
    """The installed version (importlib.metadata is not light, so it is read on first use)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("meshnb")
    except PackageNotFoundError:  # a source tree that was never installed
        return "0+unknown"


__getattr__, __dir__ = lazy_face(__name__, _EXPORTS, _MODULES, {"__version__": _version})

if TYPE_CHECKING:
    __version__: str
    from . import cli as cli
    from . import conformance as conformance
    from . import floatz as floatz
    from . import kernels as kernels
    from . import sweeps as sweeps
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
    from .results import ClusterError as ClusterError
    from .results import RunInterrupted as RunInterrupted
    from .results import RunResult as RunResult
    from .results import SaveFailed as SaveFailed
    from .results import SystemResult as SystemResult
    from .runspec import OptionError as OptionError
    from .sweeps import SweepInterrupted as SweepInterrupted
    from .sweeps import SweepResult as SweepResult
    from .sweeps import sweep as sweep
    from .trace import Trace as Trace
    from .view import LAYOUT as LAYOUT
    from .view import VIEW_BYTES as VIEW_BYTES
    from .view import View as View
