"""The op space: the single-op mutants of :mod:`.model`'s step, each one op computed under one
alternative rule, every other op in float mode Z.

:data:`SPACE` is the part of :data:`.model.OPS` that has alternatives (its id, kind, operands,
stage: ``samples``, ``lanes`` (SPEC 5's per-lane ops), ``butterfly``, ``fold``, ``apply``,
``loss``); each alternative is a rule of :data:`.model.RULES`, which says it in words.
:func:`mutations` lists every (op, alternative) pair; a :class:`Mutant` is the assignment
``{op: alt}`` that the model's interpreter (:func:`.model.run`, :func:`.model.sums`, ...) runs;
``faults.single_op(op, alt)`` is that mutant as a fault :class:`~meshnb.conformance.faults.Model`,
which :func:`meshnb.conformance.faults.run` runs as an executor with that one op changed on every
step and ``meshnb check`` replays at the first differing step to find which op an executor
computes otherwise.

Every alternative is a plausible executor's way: an FPU rule (no flush, flush before rounding,
x86 FTZ, no DAZ, another NaN, another rounding direction), the op fused with its consumer
(an FMA), its result kept in f64 into its consumer, its operands swapped (sub), the product
regrouped, the butterfly in another order, the fold from the last system.

Examples
--------
>>> from meshnb.conformance.mutants import BY_ID, Mutant, mutations
>>> BY_ID["e"].stage, Mutant("e", "swapped").assignment
('lanes', {'e': 'swapped'})
>>> len(mutations()) == sum(len(op.alts) for op in BY_ID.values())
True
"""

from __future__ import annotations

from . import model
from .model import Mutant, Op, mutations

__all__ = ["BY_ID", "SPACE", "Mutant", "Op", "mutations"]

SPACE: tuple[Op, ...] = model.SPACE
BY_ID: dict[str, Op] = model.SPACE_BY_ID
