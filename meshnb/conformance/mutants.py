"""The op space: the single-op mutants of :mod:`.model`'s step, each one op computed under one
alternative rule, every other op in float mode Z.

:data:`SPACE` is the part of :data:`.model.OPS` that has alternatives (its id, kind, operands,
stage: ``samples``, ``lanes`` (SPEC 5's per-lane ops), ``butterfly``, ``fold``, ``apply``,
``loss``), :data:`ALTS` says each alternative in words.  :func:`mutations` lists every (op,
alternative) pair; a :class:`Mutant` is the assignment ``{op: alt}`` that the model's interpreter
runs; ``faults.single_op(op, alt)`` is that mutant as a fault
:class:`~meshnb.conformance.faults.Model`, which :func:`meshnb.conformance.faults.run` runs as an
executor with that one op changed on every step and ``meshnb check`` replays at the first
differing step to find which op an executor computes otherwise.

Every alternative is a plausible executor's way: an FPU rule (no flush, flush before rounding,
x86 FTZ, no DAZ, another NaN, another rounding direction), the op fused with its consumer
(an FMA), its result kept in f64 into its consumer, its operands swapped (sub), the product
regrouped, the butterfly in another order, the fold from the last system.  The functions below
are the interpreter's, with a mutant (or None) for the assignment.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from . import model
from .fpu import Directed, Ops, PlusZero, Rules
from .model import BUTTERFLY, LANES, TERMS, WARP, Fused, Mutant, Op, Value, mutations

__all__ = [
    "ALTS",
    "BUTTERFLY",
    "BY_ID",
    "DIRECTIONS",
    "LANES",
    "PLUS_ZERO",
    "REGROUPED",
    "RULES",
    "SPACE",
    "STAGES",
    "SWAPPED",
    "TERMS",
    "WARP",
    "Directed",
    "Fused",
    "Mutant",
    "Op",
    "PlusZero",
    "Value",
    "apply",
    "arith",
    "fold",
    "lane_sum",
    "lanes",
    "level_one",
    "loss",
    "mutations",
    "node",
    "samples",
    "step_sums",
]

SPACE: tuple[Op, ...] = model.SPACE
BY_ID: dict[str, Op] = model.SPACE_BY_ID
STAGES = model.MUTANT_STAGES
# Every alternative, with the words a report says it in ("{into}": the op's consumer)
ALTS: dict[str, str] = {k: r.text for k, r in model.RULES.items() if any(k in op.alts for op in SPACE)}
RULES: dict[str, Rules] = {k: model.RULES[k].arith.rules for k in model.FPU if type(model.RULES[k].arith) is Ops}  # type: ignore[union-attr]
DIRECTIONS = {k: k.removeprefix("round-") for k in model.FPU if k.startswith("round-")}
PLUS_ZERO = "flush-to-plus-zero"  # a tiny result written +0 whatever its sign
REGROUPED = {op.id: "({}*{})*{}".format(*op.regroup) for op in SPACE if op.regroup}
SWAPPED = {op.id: op.swapped for op in SPACE if op.swapped}


def _a(mutant: Mutant | None) -> dict[str, str]:
    return mutant.assignment if mutant is not None else {}


def arith(alt: str | None) -> Ops:
    """The arithmetic of an FPU alternative (mode Z's for any other or None): :func:`.model.arith`.

    Examples
    --------
    >>> from meshnb.conformance.mutants import arith
    >>> arith("x86-ftz").rules.underflow, arith("fused").rules.underflow, type(arith("round-up")).__name__
    ('after', 'z', 'Directed')
    """
    return model.arith(alt)


def node(mutant: Mutant | None, op_id: str, a: Value, b: Value, regrouped: Any = None) -> Value:
    """Op ``op_id`` of the table on its operands, under ``mutant`` if it is that op's
    (:func:`.model.node`; ``regrouped``: the op's regrouped form, no arguments).

    Examples
    --------
    >>> from meshnb.conformance.mutants import Mutant, node
    >>> hex(node(None, "e", 0x3F800000, 0x40000000)), hex(node(Mutant("e", "swapped"), "e", 0x3F800000, 0x40000000))
    ('0xbf800000', '0x3f800000')
    """
    if regrouped is not None and mutant is not None and mutant.op == op_id and mutant.alt == "regrouped":
        return regrouped()
    return model.node(_a(mutant), op_id, a, b)


def lanes(mutant: Mutant | None, p: np.ndarray, x: np.ndarray, y: np.ndarray) -> dict[str, Value]:
    """Every per-lane op's value (:func:`.model.lanes`): p ``(B, 4)`` words, x and y ``(B, 32)``.

    Examples
    --------
    >>> import numpy as np
    >>> from meshnb.conformance.model import samples
    >>> from meshnb.conformance.mutants import Mutant, lanes
    >>> xs, ys = samples()
    >>> v = lanes(Mutant("x2", "f64"), np.zeros((1, 4), dtype=np.uint32), xs[None, :32], ys[None, :32])
    >>> v["x2"].dtype.name, v["x3"].dtype.name  # x*x kept in f64, rounded at x3
    ('float64', 'uint32')
    """
    return model.lanes(_a(mutant), p, x, y)


def lane_sum(mutant: Mutant | None, terms: list[Value]) -> np.ndarray:
    """The five sums ``(B, 5)`` of the five terms (:func:`.model.lane_sum`)."""
    return model.lane_sum(_a(mutant), terms)


def level_one(mutant: Mutant | None, terms: list[Value]) -> np.ndarray:
    """The butterfly's first level ``(B, 5, 32)`` (:func:`.model.level_one`)."""
    return model.level_one(_a(mutant), terms)


def step_sums(mutant: Mutant | None, p: np.ndarray, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Own sums ``(B, 5)`` from the lanes' samples x and y ``(B, 32)`` (:func:`.model.sums`)."""
    return model.sums(_a(mutant), p, x, y)


def fold(mutant: Mutant | None, own: np.ndarray) -> np.ndarray:
    """The fold of the members' sums ``(..., N, 5)`` -> ``(..., 5)`` (:func:`.model.fold`)."""
    return model.fold(_a(mutant), own)


def apply(mutant: Mutant | None, p: np.ndarray, s: np.ndarray, lr: np.ndarray, inv: np.ndarray) -> np.ndarray:
    """New params ``(B, 4)`` (:func:`.model.apply`)."""
    return model.apply(_a(mutant), p, s, lr, inv)


def loss(mutant: Mutant | None, s: np.ndarray, inv: np.ndarray) -> np.ndarray:
    """The step's loss words ``(B,)`` (:func:`.model.loss`)."""
    return model.loss(_a(mutant), s, inv)


def samples(mutant: Mutant | None, sin_pi: Any = None) -> tuple[np.ndarray, np.ndarray]:
    """X and Y words of init with ``mutant``'s op changed (:func:`.model.samples`; the sine is
    SPEC 4's, ``sin_pi`` is not used).

    Examples
    --------
    >>> from meshnb.conformance.mutants import Mutant, samples
    >>> hex(samples(Mutant("i*h", "fused"))[0][1])
    '0xbf7dfdfe'
    """
    return model.samples(_a(mutant))
