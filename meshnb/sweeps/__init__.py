"""Sweeps: many independent systems at once (learning rates x start pages), each bit-equal to its own run.

``sweep(steps, lrs=..., view_in=...)`` runs M systems, one per learning rate, per start page, or
per pair of the two (page-major: system ``p * len(lrs) + l``), and returns a :class:`SweepResult`;
``stream(...)`` yields the same systems in parts as their batches finish (any number of systems
in the memory of one batch).  Each system is exactly the system ``meshnb.train(steps,
view_in=page, set_lr={0: lr_bits}, step_base=base, z=z)`` runs alone: same params, loss, digest
and trace digest.

Modules: :mod:`.plan` (the options table :class:`SweepOptions`, the inputs as
:mod:`meshnb.runspec` models them, memory estimates), :mod:`.lanes` (systems packed into the
loop's vector lanes), :mod:`.run` (batches, chunks, threads, hashing, the CPU and CUDA runners;
:func:`sweep`, :func:`stream`), :mod:`.result` (the result, its systems as :class:`SweepSystem`,
and its CSV/JSON/npz writers), :mod:`.job` (a sweep's parts to a writer, in one process or the
ranks of an MPI job: what ``meshnb sweep`` runs).  The step loop is :mod:`meshnb.loops.sweep`.
"""

from __future__ import annotations

from .job import run_to
from .plan import SweepOptions, Systems, describe, init_page, lr_words
from .result import CsvWriter, JsonWriter, NpzWriter, SweepResult, SweepSystem
from .run import (
    BATCH_SYSTEMS,
    CudaRunner,
    Runner,
    SweepInterrupted,
    chunk_steps,
    default_threads,
    make_runner,
    run_planned,
    stream,
    sweep,
    warm_up,
)

__all__ = [
    "BATCH_SYSTEMS",
    "CsvWriter",
    "CudaRunner",
    "JsonWriter",
    "NpzWriter",
    "Runner",
    "SweepInterrupted",
    "SweepOptions",
    "SweepResult",
    "SweepSystem",
    "Systems",
    "chunk_steps",
    "default_threads",
    "describe",
    "init_page",
    "lr_words",
    "make_runner",
    "run_planned",
    "run_to",
    "stream",
    "sweep",
    "warm_up",
]
