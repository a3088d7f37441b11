"""One system without a group (SPEC 10's host with one view): the task loop in numba.

Its engine, all it contributes to the driver (:func:`meshnb.host.run_alone`): whole tasks of
STEPS_PER_TASK steps, many to an njit call (:func:`meshnb.program.run_alone`)."""

from __future__ import annotations

from .. import loops
from ..host import CHUNK_STEPS, alone_engine, run_alone
from ..options import RunOptions
from ..results import RunResult


def run(opts: RunOptions) -> RunResult:
    """Run ``opts``' one system, task by task in numba, and return its result."""
    mode = loops.loop_mode(opts.z)
    return run_alone(opts, alone_engine, lambda: loops.warm_up(mode), CHUNK_STEPS)
