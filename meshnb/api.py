"""``meshnb.train``: the public signature of a run of one system or a cluster.

The keywords are :class:`~meshnb.options.RunOptions`' fields, which hold every default, check and
help text once; ``train`` spells them out for type checkers and the API reference (a test keeps
the two equal) and runs the backend the options pick.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from . import files
from .backends import runner
from .checkpoint import hold
from .options import RunOptions, refuse_foreign_checkpoint
from .program import round_wait

if TYPE_CHECKING:
    import numpy as np

    from .results import RunResult


def train(
    steps: int | None = None,
    *,
    steps_per_task: int | None = None,
    set_lr: Mapping[int, float | str | np.uint32] | Sequence[tuple[int, float | str | np.uint32]] | None = None,
    step_base: int | None = None,
    view_in: bytes | bytearray | memoryview | np.ndarray | str | os.PathLike[str] | None = None,
    z: bool = True,
    keep_trace: bool = False,
    progress: bool = False,
    systems: int | None = None,
    backend: str | None = None,
    timeout_ms: float = 1000.0,
    stalls: Sequence[tuple[int, int, int]] = (),
    give_up_s: float = 60.0,
    checkpoint: str | os.PathLike[str] | None = None,
    overwrite_checkpoint: bool = False,
    checkpoint_every_s: float = 5.0,
    resume: str | os.PathLike[str] | None = None,
) -> RunResult:
    """Run the train program and return every system's result.

    Without ``systems``: one system alone (SPEC 10's host); with ``systems=N``: a cluster of N in
    lockstep on ``backend``, ``result.systems[k]`` being system k.

    Parameters
    ----------
    steps : int, optional
        Steps to run, 0 to 2^63 - 1 (default 4096; with ``resume``, the rest of the run).
    steps_per_task : int, optional
        STEPS_PER_TASK, 1 to 2^32 - 1 (default 64); no bit depends on it.
    set_lr : dict or sequence of (step, lr) pairs, optional
        SET_LR with ``lr`` (a number or an f32 word ``"0x..."``) once ``step`` steps are done.
    step_base : int, optional
        The first step after init, 0 to 2^64 - 2.
    view_in : bytes or path, optional
        A start page instead of init (4096 bytes, a page array or a file's path).
    z : bool
        Float mode Z (default); False: plain IEEE float32.
    keep_trace : bool
        Keep the applied sums as ``result.trace`` (``[steps, 5]`` uint32).
    progress : bool
        A progress bar on stderr.
    systems : int, optional
        A cluster of this many systems (1 to 64; under MPI, the job's size).
    backend : {"threads", "processes", "fused", "mpi", "cuda"}, optional
        Where the run executes (default: one system alone, or ``"threads"`` with ``systems``).
    timeout_ms : float
        A round's timeout in ms: the task stops and the round resumes later.
    stalls : sequence of (system, task call, ms)
        Fault injection: that system sleeps before that TASK call.
    give_up_s : float
        A member that completes no step for this many seconds stops the run.
    checkpoint : path, optional
        Write the run here at task boundaries, on Ctrl-C and at the end.
    overwrite_checkpoint : bool
        Let ``checkpoint`` replace a file that is not a checkpoint of this run.
    checkpoint_every_s : float
        Seconds between checkpoints.
    resume : path, optional
        Continue the run of this checkpoint file.

    Returns
    -------
    RunResult
        Every system's result; its single-system attributes read system 0.

    Raises
    ------
    OptionError
        A bad value (one line naming the option), page or checkpoint.
    TypeError
        A wrong type (``train("100")``).
    RunInterrupted
        Ctrl-C; ``.result`` holds every system as of the last completed task.
    ClusterError
        A member failed, died or made no progress.

    Examples
    --------
    >>> import meshnb
    >>> meshnb.train(4096).digest[:16]  # vectors.json's one system
    'c5cf4d840d78008f'
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
            overwrite_checkpoint=overwrite_checkpoint,
            checkpoint_every_s=checkpoint_every_s,
            resume=resume,
        )
    )


def run(opts: RunOptions) -> RunResult:
    """Run checked options on the backend they name.  A run that writes a checkpoint owns its
    path: checked before the run (an existing file not of this run is refused unless
    ``overwrite_checkpoint``: :func:`~meshnb.options.refuse_foreign_checkpoint`), and locked while
    it runs (under MPI by rank 0, in the backend)."""
    round_wait()  # a bad MESHNB_ROUND_WAIT is refused here, not in a member process
    if opts.checkpoint is None:
        return runner(opts.backend_name)(opts)
    if opts.backend_name == "mpi":
        refuse_foreign_checkpoint(opts)
        return runner(opts.backend_name)(opts)
    files.check_output(opts.checkpoint, "checkpoint")
    refuse_foreign_checkpoint(opts)
    with hold(opts.checkpoint):
        return runner(opts.backend_name)(opts)
