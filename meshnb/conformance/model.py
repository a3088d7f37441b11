"""The step as data: the step's ops (:data:`OPS`, SPEC 4-9 in dataflow order), the rules an op may
be computed under (:data:`RULES`), and one interpreter (:func:`run`) of the step under any assignment.

An *assignment* maps op ids to rule keys (``"*"``: every op not named; ``{}`` is float mode Z). The
fault models, the mutants and ``meshnb check``'s replay and localisation are assignments; the
references and the njit kernels are tested against it bit for bit.  Arrays are ``(B, ...)``, B
systems at once; :func:`node` is the one place an op's rule is applied.  No numba.

Examples
--------
>>> from meshnb.conformance.model import Mutant, init_page, run
>>> from meshnb.testing.reference import digest
>>> digest(run([init_page()], 64, grouped=False).pages[0])
'a52f01100995ff64880951b0bdb892f63b6f45abee87acf89c682f116a7a473d'
>>> horner = {"d*x": "fused", "*x": "fused", "*x'": "fused"}  # Horner contracted into FMAs
>>> digest(run([init_page()], 64, grouped=False, assign=horner).pages[0])[:16]
'5da8ebca145123fa'
>>> Mutant("e*x3", "fused").text()
"`e*x3` fused into the butterfly's first add (one rounding, an FMA)"
>>> Mutant("e", "swapped").text(), Mutant("e", "swapped").assignment
('`e = pred - y` with its operands swapped (y - pred)', {'e': 'swapped'})
"""

from __future__ import annotations

import math
import struct
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import reduce
from typing import Any

import numpy as np

from meshnb.view import FIELDS

from .fpu import MODE_Z, SIGN, Directed, Ops, PlusZero, Rules

SAMPLES, WARP, BATCHES = 256, 32, 8
LANES = np.arange(WARP)
BUTTERFLY = (16, 8, 4, 2, 1)
# Byte offsets of the page's fields, from the layout table (SPEC 7)
_NAMES = "PARAMS LR STEPS_PER_TASK INV_BATCH NEXT_STEP ERR PENDING STEP_HI X Y LOSS"
OFF_PARAMS, OFF_LR, OFF_SPT, OFF_INV, OFF_NEXT, OFF_ERR, OFF_PENDING, OFF_STEP_HI, OFF_X, OFF_Y, OFF_LOSS = (
    FIELDS[name].offset for name in _NAMES.split()
)
RING = FIELDS["LOSS"].count  # the loss ring's entries

Assignment = Mapping[str, Any]  # op id (or "*") -> a rule key of RULES (or an fpu.Rules)


# --- The rules


@dataclass(frozen=True)
class Rule:
    """One way an op can be computed (a row of :data:`RULES`)."""

    key: str  # its name in assignments and reports
    text: str  # what it does, as a report says it ({into}: the op's consumer)
    arith: Ops | None = None  # an FPU rule's arithmetic; None: structural (the default arithmetic)


RULES: dict[str, Rule] = {
    r.key: r
    for r in (
        Rule("z", "in float mode Z", Ops(MODE_Z)),
        Rule("no-flush", "without the flush (gradual underflow, subnormal inputs read)", Ops(Rules("none", daz=False))),
        Rule("ftz-before", "flushed when tiny before rounding", Ops(Rules("before"))),
        Rule("x86-ftz", "flushed as x86 FTZ does (tiny after rounding at unbounded exponent)", Ops(Rules("after"))),
        Rule("no-daz", "with subnormal inputs read as they are (no DAZ)", Ops(Rules(daz=False))),
        Rule("nan-x86", "with x86's NaN (first NaN operand quieted, else 0xFFC00000)", Ops(Rules(nan="x86"))),
        Rule("nan-arm", "with ARM's default NaN 0x7FC00000", Ops(Rules(nan="arm"))),
        Rule("flush-to-plus-zero", "flushed to +0 whatever its sign", PlusZero()),
        Rule("round-zero", "rounded toward zero", Directed("zero")),
        Rule("round-up", "rounded toward +inf", Directed("up")),
        Rule("round-down", "rounded toward -inf", Directed("down")),
        Rule("fused", "fused into {into} (one rounding, an FMA)"),
        Rule("f64", "computed in f64 into {into} (rounded to f32 there)"),
        Rule("swapped", "with its operands swapped"),
        Rule("regrouped", "regrouped"),
        Rule("xor-ascending", "in xor order 1, 2, 4, 8, 16"),
        Rule("sequential", "as a sequential sum of the 32 lanes"),
        Rule("reverse", "in reverse system order (the last system first)"),
        Rule("naive-sin", "as sin(pi * x) in f64 without the exact reduction (sin_pi(+-1) is not +-0)"),
        Rule("raw", "read without the flush and fed unflushed to its consumers"),
    )
}
FPU = tuple(k for k, r in RULES.items() if r.arith is not None and k != "z")  # the FPU alternatives
_FPU_RN = tuple(k for k in FPU if not k.startswith("round-"))  # no directed rounding modelled (div)
_BY_RULES: dict[Rules, str] = {r.arith.rules: k for k, r in RULES.items() if type(r.arith) is Ops}


def arith(rule: Any) -> Ops:
    """The arithmetic of a rule (a key of :data:`RULES` or a :class:`~.fpu.Rules`); mode Z's for a structural rule."""
    if isinstance(rule, Rules):
        return RULES[_BY_RULES[rule]].arith if rule in _BY_RULES else Ops(rule)  # type: ignore[return-value]
    r = RULES.get(rule) if rule is not None else None
    return r.arith if r is not None and r.arith is not None else _Z


_Z = Ops()


def rule_key(rules: Rules) -> Any:
    """The key of :data:`RULES` whose arithmetic is ``rules`` (else ``rules`` itself)."""
    return _BY_RULES.get(rules, rules)


# --- The ops

STAGES = ("samples", "init", "read", "lanes", "butterfly", "fold", "apply", "loss")  # in dataflow order


@dataclass(frozen=True)
class Op:
    """One op of the step (a row of :data:`OPS`): ``args`` are its stage's inputs or earlier ops' ids,
    ``alts`` the rules a single-op mutant may give it, ``into`` its consumer (``fused``, ``f64``),
    ``regroup`` the ``(u, v, w)`` of ``(u * v) * w``, ``swapped`` that form in words."""

    id: str
    kind: str
    args: tuple[str, ...]
    stage: str
    label: str
    alts: tuple[str, ...]
    into: str = ""
    regroup: tuple[str, ...] = ()
    swapped: str = ""


def _op(
    id: str, kind: str, args: tuple[str, ...], stage: str, label: str, extra: tuple[str, ...] = (), **kw: Any
) -> Op:
    """A row whose alternatives are the FPU rules of its kind, then ``extra``."""
    base = FPU if kind in ("add", "sub", "mul") else _FPU_RN
    return Op(id, kind, args, stage, label, base + extra, **kw)


_BFLY = "the butterfly's first add"
_FF, _FFR = ("fused", "f64"), ("fused", "f64", "regrouped")
# fmt: off
OPS: tuple[Op, ...] = (
    Op("i", "from_u32", ("0..255",), "samples", "the sample index i as f32", ()),
    Op("255", "from_u32", ("u255",), "samples", "255 as f32", ()),
    _op("h", "div", ("2", "255"), "samples", "the samples' step h = 2 / 255"),
    _op("i*h", "mul", ("i", "h"), "samples", "i * h (x's sample)", _FF, into="-1 + i*h"),
    _op("x = -1 + i*h", "add", ("-1", "i*h"), "samples", "x = -1 + i*h"),
    Op("sin", "sin", ("x = -1 + i*h",), "samples", "sin(pi x) correctly rounded to f32", ()),
    Op("y", "read", ("sin",), "samples", "y as init writes it (ftz_bits)", ()),
    Op("32N", "from_u32", ("u32N",), "init", "32 N as f32", ()),
    Op("INV_BATCH", "div", ("1", "32N"), "init", "INV_BATCH = 1 / (32 N)", ()),
    Op("read PARAMS", "read", ("PARAMS",), "read", "PARAMS as a TASK reads them (ftz_from_bits)", ()),
    Op("read LR", "read", ("LR",), "read", "LR as a TASK or SET_LR reads it (ftz_from_bits)", ()),
    Op("read INV_BATCH", "read", ("INV_BATCH",), "read", "INV_BATCH as a TASK reads it (ftz_from_bits)", ()),
    _op("x2", "mul", ("x", "x"), "lanes", "x2 = x*x", ("f64",), into="x3 and e*x2"),
    _op("x3", "mul", ("x2", "x"), "lanes", "x3 = x2*x", ("f64",), into="e*x3"),
    _op("d*x", "mul", ("d", "x"), "lanes", "Horner's d*x", _FF, into="Horner's + c"),
    _op("+c", "add", ("d*x", "c"), "lanes", "Horner's (d*x) + c", ("f64",), into="Horner's second multiply"),
    _op("*x", "mul", ("+c", "x"), "lanes", "Horner's (..)*x (second multiply)", _FF, into="Horner's + b"),
    _op("+b", "add", ("*x", "b"), "lanes", "Horner's (..) + b", ("f64",), into="Horner's third multiply"),
    _op("*x'", "mul", ("+b", "x"), "lanes", "Horner's (..)*x (third multiply)", _FF, into="Horner's + a"),
    _op("pred", "add", ("*x'", "a"), "lanes", "pred = (..) + a", ("f64",), into="e = pred - y"),
    _op("e", "sub", ("pred", "y"), "lanes", "e = pred - y", ("swapped", "f64"),
        into="the products and the butterfly", swapped="y - pred"),
    _op("e*x", "mul", ("e", "x"), "lanes", "e*x", _FF, into=_BFLY),
    _op("e*x2", "mul", ("e", "x2"), "lanes", "e*x2", _FFR, into=_BFLY, regroup=("e", "x", "x")),
    _op("e*x3", "mul", ("e", "x3"), "lanes", "e*x3", _FFR, into=_BFLY, regroup=("e", "x2", "x")),
    _op("e*e", "mul", ("e", "e"), "lanes", "e*e", _FF, into=_BFLY),
    *(_op(f"butterfly{o}", "add", (), "butterfly", f"the butterfly's add at xor {o}") for o in BUTTERFLY),
    Op("butterfly", "sum", (), "butterfly", "the lane sum's order", ("xor-ascending", "sequential")),
    Op("read slot", "read", ("slots",), "fold", "a published slot's words as the fold reads them", ()),
    _op("fold", "add", ("slots",), "fold", "the cluster's fold of the published sums", ("reverse",)),
    _op("s*inv", "mul", ("s", "inv"), "apply", "apply's g = s*inv", ("f64",), into="apply's lr*g"),
    _op("lr*g", "mul", ("lr", "s*inv"), "apply", "apply's lr*g", _FFR, into="apply's p - lr*g",
        regroup=("lr", "s", "inv")),
    _op("p - lr*g", "sub", ("p", "lr*g"), "apply", "apply's p - lr*g", ("swapped",), swapped="lr*g - p"),
    _op("loss", "mul", ("s", "inv"), "loss", "the loss s[4]*inv"),
)
# fmt: on
BY_ID: dict[str, Op] = {op.id: op for op in OPS}
TERMS = ("e", "e*x", "e*x2", "e*x3", "e*e")  # the five per-lane terms the butterfly sums, in order
SUMS = TERMS  # the five sums of a step, in order: the sums of the terms
STAGE_OPS: dict[str, tuple[Op, ...]] = {s: tuple(op for op in OPS if op.stage == s) for s in STAGES}


# The op space: the ops with alternatives, each a single-op mutant's op (:mod:`.mutants`)
SPACE: tuple[Op, ...] = tuple(op for op in OPS if op.alts)
SPACE_BY_ID: dict[str, Op] = {op.id: op for op in SPACE}
MUTANT_STAGES = ("samples", "lanes", "butterfly", "fold", "apply", "loss")


@dataclass(frozen=True)
class Mutant:
    """One op of :data:`SPACE` under one of its alternatives, every other op in float mode Z (ValueError
    for an unknown op or alternative)."""

    op: str
    alt: str

    def __post_init__(self) -> None:
        if self.op not in SPACE_BY_ID:
            raise unknown("op", self.op, SPACE_BY_ID)
        if self.alt not in SPACE_BY_ID[self.op].alts:
            raise ValueError(
                f"op {self.op!r} has no alternative {self.alt!r} (it has: {', '.join(SPACE_BY_ID[self.op].alts)})"
            )

    @property
    def name(self) -> str:
        """``op:alt``, the mutant's name (a fault model's)."""
        return f"{self.op}:{self.alt}"

    @property
    def assignment(self) -> dict[str, str]:
        """The mutant as the model's assignment: ``{op: alt}``."""
        return {self.op: self.alt}

    def text(self) -> str:
        """The change in words, as a report says it."""
        op = SPACE_BY_ID[self.op]
        how = RULES[self.alt].text.format(into=op.into)
        if self.alt == "regrouped":
            how += " as ({}*{})*{}".format(*op.regroup)
        if self.alt == "swapped":
            how += f" ({op.swapped})"
        name = f"`{op.label}`" if op.label == op.id or op.label.startswith(op.id + " = ") else f"`{op.id}` ({op.label})"
        return f"{name} {how}"


def unknown(what: str, name: object, known: Iterable[str]) -> ValueError:
    """The error for a name not in a table: ``unknown <what> 'name'; known: a, b, ...``."""
    return ValueError(f"unknown {what} {name!r}; known: {', '.join(known)}")


def mutations(stages: tuple[str, ...] = MUTANT_STAGES) -> list[Mutant]:
    """Every (op, alternative) pair of the ops in ``stages``, in the table's order."""
    return [Mutant(op.id, alt) for op in SPACE if op.stage in stages for alt in op.alts]


def rule_of(assign: Assignment, op_id: str) -> Any:
    """The rule ``assign`` gives op ``op_id``: its own, else the default ``"*"``, else ``"z"``."""
    r = assign.get(op_id)
    return r if r is not None else assign.get("*", "z")


def _ops_of(assign: Assignment, op_id: str) -> Ops:
    """The arithmetic op ``op_id`` computes in: its FPU rule's, else the default's."""
    r = rule_of(assign, op_id)
    if isinstance(r, Rules) or (r in RULES and RULES[r].arith is not None):
        return arith(r)
    return arith(assign.get("*"))


def check_assignment(assign: Assignment) -> None:
    """Refuses (ValueError) an assignment naming an unknown op or rule."""
    for op_id, r in assign.items():
        if op_id != "*" and op_id not in BY_ID:
            raise ValueError(f"unknown op {op_id!r} in an assignment")
        if not isinstance(r, Rules) and r not in RULES:
            raise ValueError(f"unknown rule {r!r} in an assignment")


# --- Values: words, f64 values (an op kept in f64), fused products, raw page words


@dataclass(frozen=True)
class Fused:
    """A product ``a * b`` left unrounded for its consumer to fuse, and the rounded value other lanes see."""

    a: np.ndarray
    b: np.ndarray
    rounded: np.ndarray


@dataclass(frozen=True)
class Raw:
    """A page word read without the flush, which its consumers take unflushed (no DAZ on it)."""

    w: np.ndarray


Value = Any  # uint32 words, float64 values (an op kept in f64), a Fused product or a Raw word


def is_words(v: Value) -> bool:
    """Whether a value is plain f32 words (not f64, fused or raw)."""
    return not isinstance(v, (Fused, Raw)) and np.asarray(v).dtype != np.float64


def f64(v: Value) -> np.ndarray:
    """A value in f64 (words read under DAZ; a fused product exact)."""
    if isinstance(v, Fused):
        return f64(v.a) * f64(v.b)
    if isinstance(v, Raw):
        return np.asarray(v.w, dtype=np.uint32).view(np.float32).astype(np.float64)
    v = np.asarray(v)
    if v.dtype == np.float64:
        return v
    u = v.astype(np.uint32)
    u = np.where((u & 0x7F800000) == 0, u & SIGN, u).astype(np.uint32)
    with np.errstate(invalid="ignore"):  # widening a signalling NaN quiets it and raises invalid: not an error here
        return u.view(np.float32).astype(np.float64)


def words(v: Value) -> np.ndarray:
    """A value as the f32 words an op that reads it rounded sees."""
    if isinstance(v, Fused):
        return v.rounded
    if isinstance(v, Raw):
        return v.w
    v = np.asarray(v)
    return _Z.round64(v) if v.dtype == np.float64 else v


_F64 = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide}  # an op kept in f64


def _binary(ops: Ops, kind: str, a: Value, b: Value) -> np.ndarray:
    """``a kind b`` rounded to f32: fused with an unrounded product, in f64 with an f64 operand, else
    ``ops``'s (a raw operand taken without DAZ)."""
    if all(type(v) is np.ndarray and v.dtype == np.uint32 for v in (a, b)):  # the common case: two arrays of words
        return np.asarray(getattr(ops, kind)(a, b), dtype=np.uint32)
    if isinstance(b, Fused) and kind == "add":
        a, b = b, a
    if isinstance(a, Fused) and kind in ("add", "sub"):
        other = words(b)
        return ops.fma(a.a, a.b, other ^ SIGN if kind == "sub" else other)
    if isinstance(b, Fused) and kind == "sub":
        return ops.fma(b.a ^ SIGN, b.b, words(a))
    if any(not isinstance(v, (Fused, Raw)) and np.asarray(v).dtype == np.float64 for v in (a, b)):
        fa, fb = f64(a), f64(b)
        with np.errstate(all="ignore"):
            r = _F64[kind](fa, fb)
        return ops.round64(r)
    if isinstance(a, Raw) or isinstance(b, Raw):
        d = ops.rules.daz
        daz = (d and not isinstance(a, Raw), d and not isinstance(b, Raw))
        return np.asarray(getattr(ops, kind)(words(a), words(b), daz=daz), dtype=np.uint32)
    return np.asarray(getattr(ops, kind)(words(a), words(b)), dtype=np.uint32)


def node(assign: Assignment, op_id: str, a: Value, b: Value = None, *, env: Mapping[str, Value] | None = None) -> Value:
    """Op ``op_id`` on its operands under the assignment (``env``: the values by name, for ``regrouped``)."""
    op = BY_ID[op_id]
    rule = rule_of(assign, op_id)
    if op.kind == "from_u32":
        return _ops_of(assign, op_id).from_u32(a)
    if op.kind == "sin":  # a sample's sine, correctly rounded (or naive, in f64)
        xf = np.asarray(words(a), dtype=np.uint32).view(np.float32).astype(np.float64)
        y = np.sin(np.pi * xf) if rule == "naive-sin" else np.array([sin_pi(float(v)) for v in xf])
        return y.astype(np.float32).view(np.uint32)
    if op.kind == "read":
        return Raw(np.asarray(a, dtype=np.uint32)) if rule == "raw" else _ops_of(assign, op_id).read(words(a))
    if rule == "swapped":
        a, b = b, a
    elif rule == "f64":
        fa, fb = f64(a), f64(b)
        with np.errstate(all="ignore"):
            return _F64[op.kind](fa, fb)
    elif rule == "fused":
        wa, wb = words(a), words(b)
        return Fused(
            np.asarray(wa, dtype=np.uint32), np.asarray(wb, dtype=np.uint32), _ops_of(assign, op_id).mul(wa, wb)
        )
    elif rule == "regrouped" and op.regroup and env is not None:
        u, v, w = (words(env[n]) for n in op.regroup)
        ops = _ops_of(assign, op_id)
        return ops.mul(ops.mul(u, v), w)
    return _binary(_ops_of(assign, op_id), op.kind, a, b)


def _stage(assign: Assignment, stage: str, env: dict[str, Value]) -> dict[str, Value]:
    """Every op of ``stage`` in table order, each from its operands in ``env`` (which it extends)."""
    for op in STAGE_OPS[stage]:
        env[op.id] = node(assign, op.id, *(env[n] for n in op.args), env=env)
    return env


# --- The interpreter: samples and init (SPEC 4, 8)


def sin_pi(x: float) -> float:
    """``sin(pi x)`` in f64 on the exactly reduced ``1 - |x|`` (``|x| > 0.5``), sign from ``x`` (SPEC 4)."""
    ax = abs(x)
    r = 1.0 - ax if ax > 0.5 else ax
    return math.copysign(math.sin(math.pi * r), x)


def samples(assign: Assignment = {}) -> tuple[np.ndarray, np.ndarray]:  # noqa: B006 (read only)
    """X and Y words as init makes them under the assignment."""
    env: dict[str, Value] = {
        "0..255": np.arange(SAMPLES, dtype=np.uint32),
        "u255": np.uint32(255),
        "2": np.uint32(0x40000000),
        "-1": np.uint32(0xBF800000),
    }
    _stage(assign, "samples", env)
    return np.asarray(words(env["x = -1 + i*h"]), dtype=np.uint32), np.asarray(words(env["y"]), dtype=np.uint32)


def inv_batch(assign: Assignment, systems: int) -> int:
    """INV_BATCH = ``div(1, from_u32(32 systems))`` under the assignment."""
    env: dict[str, Value] = {"u32N": np.uint32(WARP * systems), "1": np.uint32(0x3F800000)}
    return int(np.asarray(words(_stage(assign, "init", env)["INV_BATCH"])))


def init_page(systems: int = 1, grouped: bool = False, assign: Assignment = {}) -> bytes:  # noqa: B006
    """The page ``init`` writes under the assignment."""
    page = bytearray(4096)
    xw, yw = samples(assign)
    page[OFF_X : OFF_X + 4 * SAMPLES] = xw.astype("<u4").tobytes()
    page[OFF_Y : OFF_Y + 4 * SAMPLES] = yw.astype("<u4").tobytes()
    struct.pack_into("<I", page, OFF_LR, 0x3F000000)
    struct.pack_into("<I", page, OFF_SPT, 64)
    struct.pack_into("<I", page, OFF_INV, inv_batch(assign, systems if grouped else 1))
    return bytes(page)


def read(assign: Assignment, field: str, w: object) -> Value:
    """A page word as a TASK reads it (op ``read <field>``): words, or a :class:`Raw` under ``raw``."""
    return node(assign, "read " + field, np.asarray(w, dtype=np.uint32))


# --- The interpreter: the step (SPEC 5, 6, 9), vectorised over a leading axis of B systems


def lane_samples(offs: np.ndarray) -> np.ndarray:
    """Sample indices ``(B, 32)`` of batch offsets ``(B,)``: lane ``l`` reads ``off mod 8 + 8 l``."""
    return (np.asarray(offs, dtype=np.uint64) % BATCHES).astype(np.int64)[:, None] + BATCHES * LANES[None, :]


def lanes(assign: Assignment, p: Value, x: np.ndarray, y: np.ndarray) -> dict[str, Value]:
    """Every per-lane op's value by id, and the inputs: p ``(B, 4)``, x and y ``(B, 32)`` words."""
    env: dict[str, Value] = {"x": x, "y": y}
    env.update({name: p[:, j : j + 1] for j, name in enumerate("abcd")})
    return _stage(assign, "lanes", env)


def _level(assign: Assignment, o: int, terms: list[Value]) -> list[Value]:
    """One butterfly level: every lane ``l`` of every term: ``add(v[l], v[l xor o])``."""
    ops = _ops_of(assign, f"butterfly{o}")
    if all(is_words(t) for t in terms):  # the common case: one add over the five terms at once
        v = np.stack([np.asarray(t) for t in terms], axis=-2)
        r = ops.add(v, v[..., LANES ^ o])
        return [r[..., j, :] for j in range(len(terms))]
    out: list[Value] = []
    for t in terms:
        if isinstance(t, Fused):  # own product unrounded, the partner's rounded (it came through a shuffle)
            out.append(ops.fma(t.a, t.b, t.rounded[..., LANES ^ o]))
        elif not is_words(t):  # every lane kept it in f64, shuffled as f64
            with np.errstate(all="ignore"):
                out.append(ops.round64(t + t[..., LANES ^ o]))
        else:
            out.append(ops.add(t, t[..., LANES ^ o]))
    return out


def lane_sum(assign: Assignment, terms: list[Value]) -> np.ndarray:
    """The five sums ``(B, 5)`` of the terms ``(B, 32)`` in op ``butterfly``'s order (levels ``butterfly<o>``)."""
    order = rule_of(assign, "butterfly")
    if order == "sequential":
        ops = _ops_of(assign, "butterfly")
        ws = np.stack([words(t) for t in terms], axis=-2)
        return np.asarray(reduce(ops.add, (ws[..., lane] for lane in range(WARP))), dtype=np.uint32)
    levels = BUTTERFLY[::-1] if order == "xor-ascending" else BUTTERFLY
    if all(is_words(t) for t in terms):  # the common case: the five terms' levels as one array
        v = np.stack([np.asarray(t) for t in terms], axis=-2)
        for o in levels:
            v = _ops_of(assign, f"butterfly{o}").add(v, v[..., LANES ^ o])
        return np.asarray(v[..., 0], dtype=np.uint32)
    vals = terms
    for o in levels:
        vals = _level(assign, o, vals)
    return np.stack([np.asarray(t)[..., 0] for t in vals], axis=-1).astype(np.uint32)


def level_one(assign: Assignment, terms: list[Value]) -> np.ndarray:
    """The butterfly's first level ``(B, 5, 32)`` (what a fused or f64 product changes first)."""
    first = 1 if rule_of(assign, "butterfly") == "xor-ascending" else BUTTERFLY[0]
    return np.stack([np.asarray(words(t)) for t in _level(assign, first, terms)], axis=1).astype(np.uint32)


def sums(assign: Assignment, p: np.ndarray, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Own sums ``(B, 5)``: p ``(B, 4)``, the lanes' samples x and y ``(B, 32)``."""
    v = lanes(assign, p, x, y)
    return lane_sum(assign, [v[t] for t in TERMS])


def step_sums(assign: Assignment, p: np.ndarray, xs: np.ndarray, ys: np.ndarray, offs: np.ndarray) -> np.ndarray:
    """Own sums ``(B, 5)`` of B systems: p ``(B, 4)``, xs and ys ``(B, 256)`` words, offs ``(B,)``."""
    idx = lane_samples(offs)
    rows = np.arange(len(p))[:, None]
    return sums(assign, p, xs[rows, idx], ys[rows, idx])


def fold(assign: Assignment, own: np.ndarray) -> np.ndarray:
    """The fold ``(..., N, 5)`` -> ``(..., 5)``: each slot read (``read slot``), added in system order (``fold``)."""
    slots = words(node(assign, "read slot", own))
    n = slots.shape[-2]
    order = list(range(n - 1, -1, -1)) if rule_of(assign, "fold") == "reverse" else list(range(n))
    ops = _ops_of(assign, "fold")
    return np.asarray(reduce(ops.add, (slots[..., k, :] for k in order)), dtype=np.uint32)


def _raw_reads(assign: Assignment, lr: Value, inv: Value) -> tuple[Value, Value]:
    """LR and INV_BATCH as apply and loss take them: marked raw under a ``raw`` read."""
    if lr is not None and rule_of(assign, "read LR") == "raw" and not isinstance(lr, Raw):
        lr = Raw(np.asarray(lr, dtype=np.uint32))
    if rule_of(assign, "read INV_BATCH") == "raw" and not isinstance(inv, Raw):
        inv = Raw(np.asarray(inv, dtype=np.uint32))
    return lr, inv


def apply(assign: Assignment, p: np.ndarray, s: np.ndarray, lr: Value, inv: Value) -> np.ndarray:
    """New params ``(B, 4)``: p ``(B, 4)``, s ``(B, 5)`` applied sums, lr and inv ``(B, 1)`` words."""
    lr, inv = _raw_reads(assign, lr, inv)
    env: dict[str, Value] = {"p": p, "s": s[..., :4], "lr": lr, "inv": inv}
    return np.asarray(words(_stage(assign, "apply", env)["p - lr*g"]), dtype=np.uint32)


def loss(assign: Assignment, s: np.ndarray, inv: Value) -> np.ndarray:
    """The step's loss words ``(B,)``: s ``(B, 5)``, inv ``(B, 1)``."""
    _, inv = _raw_reads(assign, None, inv)
    env: dict[str, Value] = {"s": s[..., 4:5], "inv": inv}
    return np.asarray(words(_stage(assign, "loss", env)["loss"]), dtype=np.uint32)[..., 0]


# --- The host's run (SPEC 8-10)


@dataclass(frozen=True)
class Run:
    """Every system's final page, and system 0's trace ``(steps, 5)`` (``(steps, systems, 5)``: independent)."""

    pages: list[bytes]
    trace: np.ndarray


def words_at(page: bytes, off: int, n: int = 1) -> np.ndarray:
    """``n`` little-endian u32 words of ``page`` from byte ``off`` (a uint32 copy)."""
    return np.frombuffer(page, dtype="<u4", count=n, offset=off).astype(np.uint32)


def run(
    pages: list[bytes],
    steps: int,
    *,
    grouped: bool,
    set_lr: dict[int, int] | None = None,
    assign: Assignment = {},  # noqa: B006 (read only)
    from_init: bool = False,
    independent: bool = False,
) -> Run:
    """Runs ``steps`` steps of ``len(pages)`` systems (one group if ``grouped``) under the assignment.

    ``set_lr``: ``{step of this run: LR word}`` SET_LR writes before that step; ``from_init``: the
    executor's own samples and INV_BATCH, the pages' step base; ``independent``: systems side by side.
    Tasks change no bits and are not modelled.  ValueError for pages at different steps, a run past
    step 2^64 - 1, or independent grouped systems.
    """
    check_assignment(assign)
    set_lr = dict(set_lr or {})
    n = len(pages)
    if from_init:  # the model's own samples and INV_BATCH; the host's STEPS_PER_TASK and step base
        init = init_page(n, grouped, assign)
        pages = [
            pg[:OFF_INV] + init[OFF_INV : OFF_INV + 4] + pg[OFF_INV + 4 : OFF_X] + init[OFF_X:OFF_LOSS] + pg[OFF_LOSS:]
            for pg in pages
        ]
    bases = {int(words_at(pg, OFF_STEP_HI)[0]) << 32 | int(words_at(pg, OFF_NEXT)[0]) for pg in pages}
    if len(bases) != 1:
        raise ValueError("the systems are not at the same step")
    base = bases.pop()
    if not isinstance(steps, int) or steps < 0 or base + steps > (1 << 64) - 1:
        raise ValueError(f"steps {steps!r} from step {base}: a run ends at step 2^64 - 1 at the latest (SPEC 8)")
    p = np.stack([words(read(assign, "PARAMS", words_at(pg, OFF_PARAMS, 4))) for pg in pages])
    lr = np.stack([words(read(assign, "LR", words_at(pg, OFF_LR))) for pg in pages])
    inv = np.stack([words(read(assign, "INV_BATCH", words_at(pg, OFF_INV))) for pg in pages])
    xs = np.stack([words_at(pg, OFF_X, SAMPLES) for pg in pages])
    ys = np.stack([words_at(pg, OFF_Y, SAMPLES) for pg in pages])
    loss_ring = np.stack([words_at(pg, OFF_LOSS, RING) for pg in pages])
    lr_word: int | None = None
    if independent and grouped:
        raise ValueError("independent systems have no group")
    trace = np.zeros((steps, n, 5) if independent else (steps, 5), dtype=np.uint32)
    for s in range(steps + 1):
        if s in set_lr:
            lr_word = int(words(read(assign, "LR", set_lr[s])))
            lr[:] = lr_word
        if s == steps:
            break
        t = base + s
        if independent:
            offs = np.full(n, t & 0xFFFFFFFF, dtype=np.uint64)
        else:
            offs = np.array([(t * n + k) & 0xFFFFFFFF for k in range(n)], dtype=np.uint64)
        own = step_sums(assign, p, xs, ys, offs)
        applied = np.broadcast_to(fold(assign, own), (n, 5)) if grouped else own
        p = apply(assign, p, applied, lr, inv)
        loss_ring[:, t % RING] = loss(assign, applied, inv)
        trace[s] = applied if independent else applied[0]
    out = []
    for k, pg in enumerate(pages):
        page = bytearray(pg)
        if steps > 0:
            page[OFF_PARAMS : OFF_PARAMS + 16] = p[k].astype("<u4").tobytes()
            page[OFF_LOSS : OFF_LOSS + 4 * RING] = loss_ring[k].astype("<u4").tobytes()
            struct.pack_into("<I", page, OFF_ERR, 0)
            struct.pack_into("<I", page, OFF_PENDING, 0)  # ROUND stays
            struct.pack_into("<I", page, OFF_NEXT, (base + steps) & 0xFFFFFFFF)
            struct.pack_into("<I", page, OFF_STEP_HI, (base + steps) >> 32)
        if lr_word is not None:
            struct.pack_into("<I", page, OFF_LR, lr_word)
        out.append(bytes(page))
    return Run(out, trace)
