"""meshnb: the mesh's train program in Python, bit-exact in float mode Z, with a numba core."""

from .checkpoint import CheckpointError
from .exchange import Exchange, Group
from .host import ClusterError, Plan, RunInterrupted, RunResult, SystemResult, train
from .program import Context, Trace, init, task
from .view import LAYOUT, VIEW_BYTES, View

__all__ = [
    "LAYOUT", "VIEW_BYTES", "CheckpointError", "ClusterError", "Context", "Exchange", "Group", "Plan", "RunInterrupted",
    "RunResult", "SystemResult", "Trace", "View", "init", "task", "train",
]
__version__ = "0.1.0"
