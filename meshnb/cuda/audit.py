"""The PTX audit: every f32 instruction in a PTX file that can break float mode Z (SPEC 2).

Pure Python over the text (no numba-cuda, no GPU): an executor team's PTX or meshnb's own
(:mod:`meshnb.cuda.ptx`).  Each finding has the line (1-based), the function (the ``.entry`` or
``.func`` it sits in), the instruction (its opcode with modifiers, e.g. ``fma.rn.f32``) and a class:

``contraction``
    ``fma.*.f32`` / ``mad.*.f32``: a multiply and an add with one rounding (the ``fma-horner``
    fault).  Mode Z rounds every operation on its own.
``unrounded``
    ``add.f32`` / ``sub.f32`` / ``mul.f32`` with no rounding modifier: the PTX ISA lets ptxas
    fuse such a mul and add into an fma.  An operation written ``.rn`` (libdevice's
    ``fadd_rn`` and friends) is never fused.
``flush``
    any ``.ftz`` f32 instruction: the hardware flushes subnormal *inputs and results before
    rounding*, while mode Z flushes the rounded result (``0x00800000 * 0x3F7FFFFF`` is
    ``0x00800000`` in mode Z, 0 with ``.ftz``).
``approximate``
    ``div.approx`` / ``div.full`` / ``rcp.approx`` / ``sqrt.approx`` / ``rsqrt.approx`` /
    ``ex2.approx`` / ``lg2.approx`` / ``sin.approx`` / ``cos.approx`` / ``tanh.approx``: not
    correctly rounded.
``double-rounding``
    f64 arithmetic (``add``/``sub``/``mul``/``div``/``fma``/``rcp``/``sqrt`` ``.f64``) on a value
    promoted from f32 (``cvt.f64.f32``, followed through ``mov``/``abs``/``neg``/``selp``/f64
    arithmetic): an f32 operation computed in f64 and rounded twice (a Python float constant in a
    numba kernel does this: ``1.0 / inv`` becomes ``rcp.rn.f64`` of ``cvt.f64.f32 inv``).

What the audit knows to be legitimate, and why (by the construct, never by skipping a function):

- bit operations on f32 words (``and``/``or``/``xor``/``selp``/``mov.b32``/``shfl.sync``): the
  mode-Z flush and the canonical NaN are written that way, and the butterfly moves words;
- moves, loads, stores, comparisons (``setp``), ``abs.f32``/``neg.f32``/``min``/``max``
  without ``.ftz``, and conversions with a rounding (``cvt.rn.f32.u32``): exact, or one IEEE
  rounding as SPEC defines it;
- init's ``sin_pi`` (SPEC 4), which is f64 by definition: the reduction of an f32 ``x`` to
  ``r = 1 - |x|`` (exact for ``|x| > 0.5``, Sterbenz) and the product ``pi * r`` (an f64 value,
  the argument of an f64 sine, not an f32 operation).  The audit accepts a ``sub.f64`` from the
  constant 1.0 and a ``mul.f64`` by the f64 constant pi (``0d400921FB54442D18``) on a promoted
  value when its result reaches that ``mul.f64`` by pi (the argument of sin); anything else
  computed in f64 from an f32 value is a finding.  The sine's own f64 arithmetic works on
  ``pi r``, which is no promoted f32 value.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from pathlib import Path

CLASSES = ("contraction", "unrounded", "flush", "approximate", "double-rounding")
PI_F64 = "0d400921FB54442D18"
ONE_F64 = "0d3FF0000000000000"
_ROUNDING = {"rn", "rz", "rm", "rp"}
_APPROX_OPS = {"div", "rcp", "sqrt", "rsqrt", "ex2", "lg2", "sin", "cos", "tanh"}
_F64_ARITH = {"add", "sub", "mul", "div", "fma", "mad", "rcp", "sqrt"}
_F64_PASS = {"mov", "abs", "neg", "selp"}  # a promoted value stays one through these

_FUNC = re.compile(r"^\s*(?:\.visible\s+|\.extern\s+|\.weak\s+)*\.(entry|func)\s+(?:\([^)]*\)\s*)?([\w$.]+)")
_INSTR = re.compile(r"^\s*(?:@!?%\w+\s+)?([a-z][\w.]*)\s*(.*?);?\s*$")


@dataclass(frozen=True)
class Violation:
    """One finding: ``line`` (1-based), ``function``, ``instruction`` (opcode and modifiers), ``class``."""

    line: int
    function: str
    instruction: str
    kind: str

    def to_json(self) -> dict[str, object]:
        d = asdict(self)
        d["class"] = d.pop("kind")
        return d


class PtxError(ValueError):
    """Input that is not PTX (one line)."""


def _operands(rest: str) -> list[str]:
    return [o.strip().strip("{}[]") for o in rest.split(",") if o.strip()]


def _classes(parts: list[str]) -> list[str]:
    """The f32 classes of one instruction's opcode parts (``["fma", "rn", "ftz", "f32"]``)."""
    op, mods = parts[0], set(parts[1:])
    out: list[str] = []
    f32 = "f32" in mods
    if f32 and op in ("fma", "mad"):
        out.append("contraction")
    if f32 and op in ("add", "sub", "mul") and not (mods & _ROUNDING):
        out.append("unrounded")
    if f32 and "ftz" in mods:
        out.append("flush")
    if (op in _APPROX_OPS and "approx" in mods) or (op == "div" and "full" in mods):
        out.append("approximate")
    return out


def audit_text(text: str) -> list[Violation]:
    """The findings in PTX ``text``, in line order; PtxError if it is not PTX."""
    if ".version" not in text and ".entry" not in text and ".func" not in text:
        raise PtxError("not PTX: no .version, .entry or .func directive")
    found: list[Violation] = []
    promoted: set[str] = set()  # f64 registers holding an f32 value (or an f64 op on one)
    reduced: dict[str, int] = {}  # sin_pi's reduction 1 - |x|: register -> its index in f64_ops
    f64_ops: list[tuple[int, str, str, list[str], bool]] = []  # line, function, instruction, operands, legit
    consts: dict[str, str] = {}  # registers holding an f64 constant
    function = ""
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.split("//", 1)[0]
        m = _FUNC.match(line)
        if m:
            function = m.group(2)
            promoted.clear()
            reduced.clear()
            consts.clear()
            continue
        body = line.strip().lstrip("{}").strip()
        if not body or body.startswith((".", "$")):  # directives, labels, braces
            continue
        mi = _INSTR.match(body)
        if mi is None:
            continue
        opcode, ops = mi.group(1), _operands(mi.group(2))
        parts = opcode.split(".")
        for kind in _classes(parts):
            found.append(Violation(number, function, opcode, kind))
        op, mods = parts[0], parts[1:]
        dest, srcs = (ops[0], [consts.get(o, o) for o in ops[1:]]) if ops else ("", [])
        if op == "mov" and "f64" in mods and len(srcs) == 1 and srcs[0].startswith("0d"):
            consts[dest] = srcs[0]  # an f64 constant in a register: 1.0 and pi are often moved first
            continue
        consts.pop(dest, None)
        if op == "cvt" and len(mods) >= 2 and mods[-2] == "f64" and mods[-1] == "f32":
            promoted.add(dest)
        elif op in _F64_PASS and "f64" in mods and any(s in promoted for s in srcs):
            promoted.add(dest)
            if any(s in reduced for s in srcs):
                reduced[dest] = next(reduced[s] for s in srcs if s in reduced)
        elif op in _F64_ARITH and "f64" in mods and any(s in promoted for s in srcs):
            if op == "sub" and srcs and srcs[0] == ONE_F64:
                # 1 - |x|: legitimate only if it reaches the product by pi (checked there)
                reduced[dest] = len(f64_ops)
                f64_ops.append((number, function, opcode, ops, False))
                promoted.add(dest)
            elif op == "mul" and PI_F64 in srcs:
                for s in srcs:  # sin_pi's argument: the reduction that led here is legitimate
                    if s in reduced:
                        ln, fn, ins, o, _ = f64_ops[reduced[s]]
                        f64_ops[reduced[s]] = (ln, fn, ins, o, True)
            else:
                f64_ops.append((number, function, opcode, ops, False))
                promoted.add(dest)
    found += [Violation(ln, fn, ins, "double-rounding") for ln, fn, ins, _, legit in f64_ops if not legit]
    return sorted(found, key=lambda v: (v.line, CLASSES.index(v.kind)))


def audit_file(path: str | Path) -> list[Violation]:
    """:func:`audit_text` of a file; OSError if it cannot be read, PtxError if it is not PTX text."""
    data = Path(path).read_bytes()
    try:
        text = data.decode("ascii")
    except UnicodeDecodeError:
        raise PtxError(f"{path}: not PTX (not ASCII text)") from None
    try:
        return audit_text(text)
    except PtxError as e:
        raise PtxError(f"{path}: {e}") from None
