"""The op space: the single-op mutants of :mod:`.model`'s step, each one op under one alternative
rule, every other op in float mode Z.

:data:`SPACE` is the part of :data:`.model.OPS` with alternatives; :func:`mutations` lists every
(op, alternative) pair; a :class:`Mutant` is the assignment ``{op: alt}``, and
``faults.single_op(op, alt)`` the same as a fault model, which ``meshnb check`` replays to find
which op an executor computes otherwise.  Every alternative is a plausible executor's way: an
FPU rule, the op fused with its consumer, kept in f64, its operands swapped, regrouped, another
sum or fold order.

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
