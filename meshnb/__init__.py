"""meshnb: the mesh's train program in Python, bit-exact in float mode Z, with a numba core."""

from . import testing
from .api import train
from .checkpoint import CheckpointError
from .exchange import Exchange, Group
from .options import Plan, RunOptions
from .program import Context, init, task
from .results import ClusterError, RunInterrupted, RunResult, SystemResult
from .trace import Trace
from .view import LAYOUT, VIEW_BYTES, View

__all__ = [
    "LAYOUT", "VIEW_BYTES", "CheckpointError", "ClusterError", "Context", "Exchange", "Group", "Plan", "RunInterrupted",
    "RunOptions", "RunResult", "SystemResult", "Trace", "View", "init", "task", "testing", "train",
]
__version__ = "0.1.0"
