"""``meshnb.train``: the one public signature of a run.

The keywords are :class:`~meshnb.options.RunOptions`' fields, which hold every default, check and
help text once; ``train`` spells them out so that type checkers, IDEs and the API reference see
them (a test keeps the two equal), makes the options, picks the backend from the registry
(:mod:`meshnb.backends`) and runs it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from . import files
from .backends import runner
from .options import RunOptions

if TYPE_CHECKING:
    import numpy as np

    from .results import RunResult


def train(
    steps: int | None = None,
    *,
    steps_per_task: int | None = None,
    set_lr: Mapping[int, int] | Sequence[tuple[int, int]] | None = None,
    step_base: int | None = None,
    view_in: bytes | bytearray | memoryview | np.ndarray | str | os.PathLike[str] | None = None,
    z: bool = True,
    keep_trace: bool = False,
    progress: bool = False,
    systems: int | None = None,
    backend: str = "threads",
    timeout_ms: float = 1000.0,
    stalls: Sequence[tuple[int, int, int]] = (),
    give_up_s: float = 60.0,
    checkpoint: str | os.PathLike[str] | None = None,
    checkpoint_every_s: float = 5.0,
    resume: str | os.PathLike[str] | None = None,
) -> RunResult:
    """Run the train program and return every system's result.

    Without ``systems``: one system without a group (SPEC 10's host).  With ``systems=N`` (1 to
    64): a cluster in lockstep on ``backend``; ``result.systems[k]`` is system k.
    ``backend="mpi"`` in every rank of an MPI job runs one system per rank.

    Args:
        steps: steps to run (default 4096; with ``resume``, the rest of the checkpoint's run).
        steps_per_task: the page's STEPS_PER_TASK (default 64); the bits do not depend on it.
        set_lr: LR changes, ``{step: f32 bits}`` or ``(step, bits)`` pairs: SET_LR with ``bits``
            before the task that starts when ``step`` steps of this run are done (0: before the first).
        step_base: after init, the first step (STEP_HI:NEXT_STEP), 0 to 2^64 - 2.
        view_in: a start page instead of init: 4096 bytes (any buffer) or the path of a file.
        z: float mode Z (default); ``False`` runs plain IEEE float32, only to see what Z changes.
        keep_trace: keep the applied sums as ``result.trace`` (``[steps, 5]`` uint32).
        progress: a progress bar on stderr.
        systems: a cluster of this many systems (1 to 64; under MPI, the job's size).
        backend: ``"threads"`` (default), ``"processes"``, ``"fused"`` or ``"mpi"``.
        timeout_ms: a round's timeout in ms: the task stops and the round resumes later.
        stalls: fault injection, ``(system, task call, ms)``: that system sleeps before that TASK call.
        give_up_s: a member that completes no step for this many seconds stops the run.
        checkpoint: write the whole run to this path at task boundaries, on Ctrl-C and at the end.
        checkpoint_every_s: seconds between checkpoints.
        resume: continue the run of this checkpoint file.

    Returns:
        A :class:`~meshnb.results.RunResult`; its single-system attributes read system 0.

    Raises:
        ValueError: bad options (:class:`~meshnb.options.OptionError`) or a bad page or checkpoint.
        meshnb.RunInterrupted: Ctrl-C; ``.result`` holds every system as of the last completed task.
        meshnb.ClusterError: a member failed, died or made no progress.
    """
    return run(
        RunOptions(
            steps=steps,
            steps_per_task=steps_per_task,
            set_lr=set_lr,  # type: ignore[arg-type]  # normalised by RunOptions
            step_base=step_base,
            view_in=view_in,  # type: ignore[arg-type]  # read (and checked) by RunOptions
            z=z,
            keep_trace=keep_trace,
            progress=progress,
            systems=systems,
            backend=backend,
            timeout_ms=timeout_ms,
            stalls=stalls,  # type: ignore[arg-type]  # checked by RunOptions
            give_up_s=give_up_s,
            checkpoint=checkpoint,
            checkpoint_every_s=checkpoint_every_s,
            resume=resume,
        )
    )


def run(opts: RunOptions) -> RunResult:
    """Run checked options on the backend they name.  A run that writes a checkpoint owns its
    path: checked before the run, and locked while it runs (under MPI by rank 0, in the backend)."""
    if opts.checkpoint is None or opts.backend_name == "mpi":
        return runner(opts.backend_name)(opts)
    files.check_output(opts.checkpoint, "checkpoint")
    with files.hold(opts.checkpoint, "checkpoint"):
        return runner(opts.backend_name)(opts)
