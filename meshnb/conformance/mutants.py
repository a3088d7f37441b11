"""The op space: the single-op mutants of :mod:`.model`'s step, each one op under one alternative
rule, every other op in float mode Z (:data:`SPACE`, :func:`mutations`, a :class:`Mutant`; as a
fault model ``faults.single_op(op, alt)``, which ``meshnb check`` replays to find which op an executor
computes otherwise).  Every alternative is a plausible executor's way: an FPU rule, the op fused
with its consumer, kept in f64, its operands swapped, regrouped, another sum or fold order.
"""

from __future__ import annotations

from . import model
from .model import Mutant, Op, mutations

__all__ = ["BY_ID", "SPACE", "Mutant", "Op", "mutations"]

SPACE: tuple[Op, ...] = model.SPACE
BY_ID: dict[str, Op] = model.SPACE_BY_ID
