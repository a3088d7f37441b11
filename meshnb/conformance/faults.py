"""Fault models: the ways an executor's bits part from float mode Z, as one registry.

A :class:`Model` (FPU rules and structural choices, or one op under one alternative) is an
assignment of :mod:`.model`'s step; :func:`run` is a simulated executor with that fault.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from . import model as step
from .fpu import Rules
from .model import Run

__all__ = ["BY_NAME", "EXACT", "MODELS", "Model", "model", "run", "single_op"]


@dataclass(frozen=True)
class Model:
    """One way of computing the program: float mode Z with at most a few rules changed.

    Parameters
    ----------
    name : str
        The model's name (``meshnb check`` reports it).
    doc : str
        What it changes, in a line.
    rules : Rules, default Rules()
        The FPU rules (float mode Z's by default).
    fma_horner, fma_apply : bool, default False
        The Horner polynomial, or apply's ``p - lr * g``, contracted into FMAs.
    lane_sum : {"butterfly", "sequential"}, default "butterfly"
        The xor butterfly over the 32 lanes, or ``((v0 + v1) + v2) + ...``.
    fold : {"system", "reverse"}, default "system"
        The cluster's fold in system order, or from the last system down.
    samples : {"exact", "naive-sin"}, default "exact"
        Y as SPEC makes it, or ``sin(pi * x)`` in f64 without the exact reduction.
    raw_lr_inv : bool, default False
        LR and INV_BATCH read without ``ftz_from_bits``.
    op, alt : str, default ""
        One op of the step under one alternative (:func:`single_op`).

    Examples
    --------
    >>> from meshnb.conformance.faults import MODELS, model, single_op
    >>> [m.name for m in MODELS][:4]
    ['gradual-underflow', 'ftz-before-rounding', 'x86-ftz', 'no-daz']
    >>> model("x86-ftz").assignment, model("fma-apply").assignment, single_op("e", "swapped").assignment
    ({'*': 'x86-ftz'}, {'lr*g': 'fused'}, {'e': 'swapped'})
    """

    name: str
    doc: str
    rules: Rules = field(default_factory=Rules)
    fma_horner: bool = False  # pred = fma(fma(fma(d, x, c), x, b), x, a)
    fma_apply: bool = False  # p = fma(-lr, mul(s, inv), p)
    lane_sum: str = "butterfly"  # or "sequential": ((v0 + v1) + v2) + ... + v31
    fold: str = "system"  # or "reverse": slot N-1 + ... + slot 0
    samples: str = "exact"  # or "naive-sin": y = f32(sin(pi * x)) in f64 without reduction
    raw_lr_inv: bool = False  # LR and INV_BATCH read without ftz_from_bits and fed to mul unflushed
    op: str = ""  # a single-op mutant: this op of mutants.SPACE ...
    alt: str = ""  # ... under this alternative

    @property
    def mutant(self) -> step.Mutant | None:
        """The one op this model changes (None: not a single-op model)."""
        return step.Mutant(self.op, self.alt) if self.op else None

    @property
    def assignment(self) -> dict[str, Any]:
        """The model as the step model's assignment ``{op id: rule}`` (``"*"``: every other op)."""
        a: dict[str, Any] = {"*": step.rule_key(self.rules)} if self.rules != Rules() else {}
        for name, on, ops in _CHOICES:
            if getattr(self, name) == on:
                a.update(ops)
        if self.op:
            a[self.op] = self.alt
        return a


_CHOICES = (  # a Model's structural choice (field, value) and the assignment it makes
    ("fma_horner", True, {"d*x": "fused", "*x": "fused", "*x'": "fused"}),
    ("fma_apply", True, {"lr*g": "fused"}),
    ("lane_sum", "sequential", {"butterfly": "sequential"}),
    ("fold", "reverse", {"fold": "reverse"}),
    ("samples", "naive-sin", {"sin": "naive-sin"}),
    ("raw_lr_inv", True, {"read LR": "raw", "read INV_BATCH": "raw"}),
)


EXACT = Model("mode-z", "float mode Z as SPEC defines it (no fault)")

# fmt: off
MODELS: tuple[Model, ...] = (
    Model("gradual-underflow", "no flush at all: IEEE gradual underflow, subnormal inputs read as they are",
          Rules(underflow="none", daz=False)),
    Model("ftz-before-rounding", "results flushed when the exact result is tiny (tininess before rounding)",
          Rules(underflow="before")),
    Model("x86-ftz", "results flushed when tiny after rounding at unbounded exponent (x86 FTZ)",
          Rules(underflow="after")),
    Model("no-daz", "subnormal inputs not flushed (no DAZ); results flushed as mode Z does", Rules(daz=False)),
    Model("fma-horner", "FMA contraction in the Horner polynomial", fma_horner=True),
    Model("fma-apply", "FMA contraction in apply (p - lr * g rounded once)", fma_apply=True),
    Model("sequential-lane-sum", "a sequential sum over the 32 lanes instead of the xor butterfly",
          lane_sum="sequential"),
    Model("fold-reverse", "the cluster's fold not in system order (N-1 down to 0)", fold="reverse"),
    Model("nan-x86", "NaNs not canonical: x86's (first NaN operand quieted, else 0xFFC00000)", Rules(nan="x86")),
    Model("nan-arm", "NaNs not canonical: ARM's default NaN 0x7FC00000", Rules(nan="arm")),
    Model("samples-naive-sin", "samples not correctly rounded: y = sin(pi * x) in f64 without the exact "
          "reduction (sin_pi(+-1) is not +-0)", samples="naive-sin"),
    Model("raw-lr-inv", "LR and INV_BATCH read without the flush (SET_LR writes the raw word; the multiplies "
          "take them unflushed)", raw_lr_inv=True),
)
# fmt: on
BY_NAME: dict[str, Model] = {m.name: m for m in MODELS}


def single_op(op: str, alt: str) -> Model:
    """The model ``op:alt``: op ``op`` under alternative ``alt``, every other op in mode Z (ValueError: unknown)."""
    mut = step.Mutant(op, alt)
    return Model(mut.name, "mode Z except " + mut.text(), op=op, alt=alt)


def model(name: str) -> Model:
    """The model called ``name`` (``mode-z`` or one of :data:`MODELS`); ValueError listing the known ones."""
    if name == EXACT.name:
        return EXACT
    try:
        return BY_NAME[name]
    except KeyError:
        raise step.unknown("fault model", name, BY_NAME) from None


def run(pages: list[bytes], steps: int, *, m: Model = EXACT, **options: Any) -> Run:
    """:func:`.model.run` under fault ``m``'s assignment (``options``: its keyword arguments but ``assign``)."""
    return step.run(pages, steps, assign=m.assignment, **options)
