"""Sweeps: many independent systems at once (learning rates x start pages), each bit-equal to its own run.

:func:`sweep` runs M systems, one per learning rate, per start page, or per pair of the two
(page-major: system ``p * len(lrs) + l``), and returns a :class:`SweepResult`; :func:`stream`
yields the same systems in parts as their batches finish.  System k is the system
``meshnb.train(steps, view_in=page, set_lr={0: lr}, step_base=base, z=z)`` runs alone: the same
params, loss, digest and trace digest.

Modules: :mod:`.plan` (options, inputs, memory estimates), :mod:`.lanes` (systems packed into the
loop's vector lanes), :mod:`.run` (batches, chunks, threads; the CPU and CUDA runners),
:mod:`.result` (the result and its writers), :mod:`.job` (what ``meshnb sweep`` runs, in one
process or an MPI job).  The names load on first use (PEP 562).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..lazy import lazy_face

# public name -> the module of the package that holds it
_EXPORTS = {
    "SweepOptions": "plan",
    "Run": "plan",
    "Systems": "plan",
    "describe": "plan",
    "init_page": "plan",
    "lr_words": "plan",
    "CsvWriter": "result",
    "JsonWriter": "result",
    "NpzWriter": "result",
    "SweepResult": "result",
    "SweepSystem": "result",
    "SweepInterrupted": "run",
    "stream": "run",
    "sweep": "run",
}
__all__ = [  # literal, for the API reference's static reading (griffe); the same names as _EXPORTS
    "CsvWriter",
    "JsonWriter",
    "NpzWriter",
    "Run",
    "SweepInterrupted",
    "SweepOptions",
    "SweepResult",
    "SweepSystem",
    "Systems",
    "describe",
    "init_page",
    "lr_words",
    "stream",
    "sweep",
]


__getattr__, __dir__ = lazy_face(__name__, _EXPORTS)

if TYPE_CHECKING:
    from .plan import Run as Run
    from .plan import SweepOptions as SweepOptions
    from .plan import Systems as Systems
    from .plan import describe as describe
    from .plan import init_page as init_page
    from .plan import lr_words as lr_words
    from .result import CsvWriter as CsvWriter
    from .result import JsonWriter as JsonWriter
    from .result import NpzWriter as NpzWriter
    from .result import SweepResult as SweepResult
    from .result import SweepSystem as SweepSystem
    from .run import SweepInterrupted as SweepInterrupted
    from .run import stream as stream
    from .run import sweep as sweep
