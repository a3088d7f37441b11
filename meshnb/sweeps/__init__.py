"""Sweeps: many independent systems at once (learning rates x start pages), each bit-equal to its own run.

``sweep(steps, lrs=..., view_in=...)`` runs M systems, one per learning rate, per start page, or
per pair of the two (page-major: system ``p * len(lrs) + l``), and returns a :class:`SweepResult`;
``stream(...)`` yields the same systems in parts as their batches finish (any number of systems
in the memory of one batch).  Each system is exactly the system ``meshnb.train(steps,
view_in=page, set_lr={0: lr_bits}, step_base=base, z=z)`` runs alone: same params, loss, digest
and trace digest.

Modules: :mod:`.plan` (inputs, checks, memory estimates), :mod:`.lanes` (systems packed into the
loop's vector lanes), :mod:`.run` (batches, chunks, threads, hashing; :func:`sweep`, :func:`stream`),
:mod:`.result` (the result and its CSV/JSON/npz writers).  The step loop is :mod:`meshnb.loops.sweep`.
"""

from __future__ import annotations

from .plan import Systems, init_page, lr_words, plan
from .result import CsvWriter, JsonWriter, NpzWriter, SweepResult
from .run import (
    BATCH_SYSTEMS,
    Runner,
    SweepInterrupted,
    chunk_steps,
    default_threads,
    run_planned,
    stream,
    sweep,
    warm_up,
)

__all__ = [
    "BATCH_SYSTEMS",
    "CsvWriter",
    "JsonWriter",
    "NpzWriter",
    "Runner",
    "SweepInterrupted",
    "SweepResult",
    "Systems",
    "chunk_steps",
    "default_threads",
    "init_page",
    "lr_words",
    "plan",
    "run_planned",
    "stream",
    "sweep",
    "warm_up",
]
