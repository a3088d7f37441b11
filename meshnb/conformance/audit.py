"""The PTX audit: every instruction of a PTX module that can break float mode Z (SPEC 2), by
default-deny: what mode Z's table (:data:`MODE_Z`) does not allow on a float value is a finding
(:class:`Violation`), of a class in :data:`CLASSES` (``unverified``: no row allows it).  Pure Python
over the text, linear in its size (UTF-8, at most :data:`MAX_BYTES`, no NUL byte).

f32 values promoted to f64 are followed over the whole module (moves, exact operations, calls,
memory by an address-symbol model) until ``cvt.rn.f32.f64`` ends them; f64 arithmetic on them is
``double-rounding`` unless the sin_pi rule or the one-rounding rule accepts it.  The classes, the
table, the rules and the model's limits: docs/guide/gpu.md ("The PTX audit").
"""

from __future__ import annotations

import functools
import gc
import os
import re
import stat
from collections import Counter, deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from itertools import chain
from pathlib import Path
from typing import TypeVar


def _words(text: str) -> tuple[str, ...]:
    return tuple(text.split())


CLASSES = _words("contraction unrounded flush approximate directed-rounding double-rounding unverified")
MAX_BYTES = 256 << 20  # a kernel's PTX is kilobytes to a few MB: more is not a module to audit here
PI_F64 = "0d400921FB54442D18"
TWO_OVER_PI_F64 = "0d3FE45F306DC9C883"  # libdevice's sin/cos quadrant reduction: x * 2/pi
ONE_F64 = "0d3FF0000000000000"
ZERO_F64 = ("0d0000000000000000", "0d8000000000000000")
_F32 = {"f32", "f32x2"}
_DIRECTED = {"rz", "rm", "rp"}
_ROUNDING = {"rn"} | _DIRECTED
_ROUNDED_OPS = {"add", "sub", "mul", "fma", "mad", "div", "rcp", "sqrt"}
_APPROX_OPS = {"div", "rcp", "sqrt", "rsqrt", "ex2", "lg2", "sin", "cos", "tanh"}
_F64_ARITH = {"add", "sub", "mul", "div", "fma", "mad", "rcp", "sqrt", "rsqrt"}
_PASS = set(_words("mov abs neg selp min max cvt ld ldu st shfl"))  # exact: a value stays what it was
_BITS_PASS = {"and", "or", "xor", "not", "prmt", "slct"}  # on a promoted value's words: still promoted
_PASS |= _BITS_PASS
_WRITES = ("st", "atom", "red", "sust", "sured", "stmatrix")  # what writes registers' values to memory

# promoted-value flags
_F = 1  # an f32 value in f64 (or f64 arithmetic on one)
_A = 2  # pi * r: a sine's argument if it reaches one
_S = 4  # derived from a sine's quadrant reduction: the sine's own code
_P = 8  # exactly an f32 value (with _F): promoted, through exact moves only
_X = 16  # an f32 operation done once in f64 (an exact product, a sum of two floats): Z's if rounded once
_ONCE_OPS = ("add", "sub", "mul")  # on two f32 values in f64: RN64 of it rounded once to f32 is RN32


_PROMOTES = re.compile(r"cvt(?:\.ftz)?\.f64\.f32")  # an f32 value into f64 (with .ftz: --ftz=true's form)


def _f32_exact(constant: str) -> bool:
    """Whether an f64 constant (``0d...``) is exactly an f32 value (NaN and infinity included)."""
    try:
        bits = int(constant[2:], 16)
    except ValueError:
        return False
    exp = (bits >> 52) & 0x7FF
    if bits & ((1 << 29) - 1):
        return False  # more than 24 significant bits
    return exp == 0x7FF or (bits << 1) & ((1 << 64) - 1) == 0 or 1023 - 149 <= exp <= 1023 + 127


_FLOAT_TYPE = re.compile(r"(?:b?f|tf)\d+(?:x\d+)?|u?e\d+m\d+(?:x\d+)?")  # f16 f16x2 bf16 f32 f32x2 f64 tf32 e4m3x2 ...
_CMP = ("eq", "ne", "lt", "le", "gt", "ge", "equ", "neu", "ltu", "leu", "gtu", "geu", "num", "nan")
_SPACES = _words("global local shared param const shared::cta shared::cluster param::entry param::func")
_MEMORY: tuple[str, ...] = ("nc", "ca", "cg", "cs", "lu", "cv", "wb", "wt", "volatile", "weak", "relaxed", "acquire")
_MEMORY += ("release", "cta", "cluster", "gpu", "sys", "v2", "v4", "v8")  # and any L1::/L2:: cache hint
_WIDTH = {"f16": 16, "bf16": 16, "f32": 32, "f64": 64}
_CLASSES_TESTED = ("finite", "infinite", "number", "notanumber", "normal", "subnormal")
_EXACT_INTS = ("u8", "u16", "s8", "s16")  # every value exact in f32
_ROUNDED_INTS = ("u32", "s32")  # SPEC 2's u32 -> f32 conversion, rounded to nearest even


@dataclass(frozen=True)
class Allowed:
    """One row of mode Z's table: opcodes ``ops`` on the float ``types`` listed, with every
    modifier in ``required`` and no other than ``optional`` (integer types for a conversion
    included); ``rule`` says why the row keeps mode Z's bits."""

    ops: tuple[str, ...]
    types: tuple[str, ...]
    required: tuple[str, ...]
    optional: tuple[str, ...]
    rule: str


_SETS = {  # named word sets a row's optional modifiers may include
    "CMP": _CMP + ("and", "or", "xor"),
    "MEMORY": _SPACES + _MEMORY,
    "INTS": _EXACT_INTS + _ROUNDED_INTS + ("u64", "s64"),
    "CLASSES": _CLASSES_TESTED,
}
# ops | float types | required modifiers | optional modifiers | the rule that keeps mode Z's bits
_TABLE = """
add sub mul | f32 f32x2 | rn | | IEEE binary32 rounded to nearest even; meshnb flushes the result with bit \\
operations (SPEC 2)
div sqrt | f32 | rn | | correctly rounded to nearest even (SPEC 2)
mov abs neg selp | f32 f64 | | | exact: the value's bits, or its sign bit changed
min max | f32 f64 | | | exact: one of the operands
setp | f32 f64 | | CMP | a comparison: a predicate, no float result
ld ldu st | f32 f64 | | MEMORY | a move to or from memory (followed through local, shared and param space)
cvt | f32 | rn | INTS | an integer into f32, rounded to nearest even once (SPEC 2's u32 -> f32; a 64-bit one \\
the same way)
cvt | f32 f64 | | | f32 -> f64 (cvt.f64.f32) is exact: the value is followed as promoted
cvt | f32 f64 | rn | | f64 -> f32 (cvt.rn.f32.f64): the one rounding of SPEC 4's sine (promoted values: the sin_pi rule)
cvt | f64 | rn | s32 u32 | a 32-bit integer into f64: exact (the sine's quadrant)
cvt | f64 | rni | s32 | f64 to the nearest integer: the sine's quadrant
add sub mul fma div rcp sqrt | f64 | | rn | f64 arithmetic: SPEC 4's sine; on a promoted value the sin_pi rule \\
decides (double-rounding)
copysign | f32 f64 | | | exact: the first operand's bits with the second's sign bit
setp | f16 bf16 f16x2 bf16x2 | | CMP | a comparison of halves (no .ftz): a predicate, no float result
testp | f32 f64 | | CLASSES | a class test: a predicate, no float result
neg abs | f16 bf16 f16x2 bf16x2 | | | exact: a half's sign bit changed (no .ftz: subnormal halves kept)
cvt | f32 f64 f16 bf16 | | | a half widened to f32 or f64 (cvt.f32.f16): exact
cvt | f32 | sat | | cvt.sat.f32.f32: a clamp to [0, 1] (NaN to 0): one of three exact values
cvt | f32 | | rzi rni INTS | f32 to an integer (or an integral f32) toward zero or to nearest: exact, and 0 for a \
subnormal input whether flushed or not (.rmi/.rpi are not: floor(-subnormal) is -1, floor(-0) is -0)
"""


def _row(line: str) -> Allowed:
    ops, types, required, optional, rule = (f.strip() for f in line.split("|", 4))
    opt = tuple(w for word in optional.split() for w in _SETS.get(word, (word,)))
    return Allowed(tuple(ops.split()), tuple(types.split()), tuple(required.split()), opt, rule)


MODE_Z: tuple[Allowed, ...] = tuple(_row(r) for r in _TABLE.replace("\\\n", "").strip().split("\n"))
"""Mode Z's table: an instruction on a float type in no row is a finding.  A new form is a row here
and in docs/guide/gpu.md, with why it keeps mode Z's bits, and a test in tests/cuda/test_audit.py."""

# Opcodes of no float type that may take a float register (bit-typed: ``mov.b32 %f1, %r1``, the
# flush's ``and.b32``, the butterfly's ``shfl``): exact on the bits.  Any other opcode of no float
# type with a register declared of a float type as an operand is unverified.
BIT_OPS = frozenset(
    _words(
        "mov ld ldu st and or xor not cnot lop3 selp slct shfl prmt setp set cvt cvta bfe bfi brev popc clz "
        "shl shr bar barrier bra call ret exit membar fence"
    )
)
# integer and control opcodes: their operands cannot be float registers in valid PTX (integer types)
INT_OPS = BIT_OPS | frozenset(
    _words(
        "add addc sub subc mul mul24 mad mad24 madc sad div rem abs neg min max dp4a dp2a bfind fns "
        "activemask vote match redux elect nanosleep pmevent trap brkpt getctarank isspacep mapa prefetch "
        "prefetchu cp discard applypriority createpolicy griddepcontrol mbarrier setmaxnreg istypep"
    )
)


def _float_types(parts: list[str]) -> list[str]:
    return [p for p in parts if _FLOAT_TYPE.fullmatch(p)]


def unverified(opcode: str) -> str:
    """Why an opcode that names a float type is in no row of :data:`MODE_Z` ("" if it is in one)."""
    parts = opcode.split(".")
    base, mods = parts[0], parts[1:]
    floats = _float_types(mods)
    if not floats:
        return ""
    if base == "cvt" and len(floats) == 2 and floats[0] not in ("f32", "f64"):  # bf16 -> f16 rounds too
        return f"cvt into .{floats[0]}: a float rounded to a narrower format; mode Z keeps f32"
    widths = [_WIDTH[f] for f in floats if f in _WIDTH]
    if base == "cvt" and len(widths) == 2 and widths[0] < widths[1] and not set(mods) & _ROUNDING:
        return f"cvt{''.join('.' + f for f in floats)}: a narrowing with no rounding modifier"
    rows = [r for r in MODE_Z if base in r.ops]
    if not rows:
        return f"{base} on {'/'.join('.' + t for t in dict.fromkeys(floats))}: no such entry in mode Z's table"
    typed = [r for r in rows if all(t in r.types for t in floats)]
    if not typed:
        allowed = "/".join("." + t for t in dict.fromkeys(t for r in rows for t in r.types))
        bad = [t for t in floats if not any(t in r.types for r in rows)]
        if not bad:  # each type has a row, but none has them together (setp.lt.f16.f32)
            together = "".join("." + t for t in dict.fromkeys(floats))
            return f"{base}{together}: mode Z's table has no row with these types together"
        return f".{bad[0]}: mode Z's table allows {base} on {allowed} only"
    whys: list[tuple[int, str]] = []  # the row that misses least says why
    for r in typed:
        missing = [m for m in r.required if m not in mods]
        other = [m for m in mods if m not in r.types and m not in r.required and m not in r.optional]
        other = [m for m in other if not (base in ("ld", "ldu", "st") and m.startswith(("L1::", "L2::")))]
        if not missing and not other:
            return ""
        if other:
            why = f"{''.join('.' + m for m in other)}: not allowed on {base} by mode Z's table"
        else:
            why = f"no .{missing[0]}: mode Z's table allows {base} rounded to nearest (.{missing[0]}) only"
        whys.append((len(missing) + len(other), why))
    return min(whys, key=lambda w: w[0])[1]


_HEADER = re.compile(
    r"\s*(?:\.(?:visible|extern|weak)\s+)*\.(entry|func)\s*(?:\(([^)]*)\)\s*)?([\w$.]+)\s*(?:\(([^)]*)\))?"
)
_OPCODE = re.compile(r"(?:@!?%?[\w$.]+\s+)?([a-z](?:[\w.]|::)*)")
_LABEL = re.compile(r"\s*[\w$.]+\s*:(?!:)")
_LABELS_ONLY = re.compile(r"(?:\s*[\w$.]+\s*:)*\s*")
_ONE_DIRECTIVE = re.compile(r"\s*(\.(?:version|target|address_size|file|loc)\b[^\n]*)(?=\n)")
_DIRECTIVES = re.compile(r"(?:\s*\.(?:version|target|address_size|file|loc)\b[^\n]*\n)*")
_SPACE = re.compile(r"\s*")
_HEADER_START = re.compile(r"\s*(?:\.(?:visible|extern|weak)\s+)*\.(?:entry|func)\b")
_COMMENT = re.compile(r'"(?:[^"\\\n]|\\.)*"|//[^\n]*|/\*.*?\*/', re.S)
_DELIM = re.compile(r"[;{}]")
_REG_DECL = re.compile(r"(%?[\w$]+)\s*(?:<\s*(\d+)\s*>)?\s*(?:\[\s*\d*\s*\])?\s*$")
_COMPLEX_OPERAND = re.compile(r"[{}\[\]|!-]")  # vectors, addresses, a|b, negation: _names reads them
_NAME_START = "%_$"
_CALL_PARTS = re.compile(r"\(([^)]*)\)|([\w$.]+)")
_ADDR = re.compile(r"\[\s*([%\w$.]+)")
# The scan's alternatives: 1. (audit only) a run of statements of _BORING opcodes (integer, bit or
# control, no finding, no promoted value through them); 2. a whole statement: guard, opcode (group
# 2), operands (group 3) and ";"; 3. the same after labels (groups 4, 5); 4. the text up to the next
# ";", "{" or "}"; 5. the rest.  Each repeat ends at a character it cannot take: linear in the text.
_BORING_PART = r"(?:b64|u64|s64|param|ftz|approx|full|rz|rm|rp|(?:b?f|tf)\d+(?:x\d+)?|u?e\d+m\d+(?:x\d+)?)"
_BORING = (
    r"(?:"
    + "|".join(sorted(INT_OPS - {"call", "cvt", "shfl", "ld", "ldu", "st"} - _BITS_PASS, key=lambda o: (-len(o), o)))
    + r")(?![\w:])"
    rf"(?:\.(?!{_BORING_PART}(?![\w:]))(?:[\w]|::)+)*(?![\w.:])"
)
_GUARD = r"(?:@!?%?[\w$.]+\s+)?"
_PIECES = (
    rf"\s*{_GUARD}([a-z](?:[\w.]|::)*)(?![\w.:])([^;{{}}:]*);"
    rf"|\s*(?:[\w$][\w$.]*\s*:(?!:)\s*)+{_GUARD}([a-z](?:[\w.]|::)*)(?![\w.:])([^;{{}}:]*);"
    r"|[^;{}]*[;{}]|[^;{}]+\Z"
)
_SCAN_AUDIT = re.compile(rf"((?:\s*{_GUARD}{_BORING}[^;{{}}:]*;)+)|{_PIECES}")
_SCAN = re.compile(rf"((?!))|{_PIECES}")  # every statement: no run is skipped


@dataclass(frozen=True)
class Violation:
    """One finding of the PTX audit: an instruction that can break float mode Z, and why.

    Parameters
    ----------
    line : int
        The line of the instruction's opcode, 1-based.
    function : str
        The ``.entry`` or ``.func`` it sits in.
    instruction : str
        Its opcode with modifiers (``fma.rn.f32``).
    kind : str
        Its class (``contraction``, ``unrounded``, ``flush``, ``approximate``, ``directed-rounding``,
        ``double-rounding``, ``unverified``: the module's docstring); ``"class"`` in JSON.
    why : str, default ""
        The rule that decided it (what mode Z's table does not allow, for an ``unverified`` one).
    source : str, default ""
        The CUDA source line of the PTX's ``.loc`` before it (``file:line``, and where it was
        inlined); "" when the PTX has none.

    Examples
    --------
    >>> from meshnb.conformance.audit import Violation
    >>> v = Violation(7, "k", "fma.rn.f32", "contraction")
    >>> v.to_json()
    {'line': 7, 'function': 'k', 'instruction': 'fma.rn.f32', 'class': 'contraction'}
    """

    line: int
    function: str
    instruction: str
    kind: str
    why: str = ""
    source: str = ""

    def to_json(self) -> dict[str, object]:
        """The finding as ``meshnb ptx audit --json`` writes it: ``kind`` as ``"class"``, ``why`` and
        ``source`` only when not empty.

        Returns
        -------
        dict
            ``line``, ``function``, ``instruction``, ``class``, and ``why`` and ``source`` when set.

        Examples
        --------
        >>> from meshnb.conformance.audit import Violation
        >>> Violation(3, "k", "ex2.approx.f32", "approximate", why="not correctly rounded").to_json()["why"]
        'not correctly rounded'
        """
        d: dict[str, object] = {"line": self.line, "function": self.function, "instruction": self.instruction}
        d["class"] = self.kind
        return d | {k: v for k, v in (("why", self.why), ("source", self.source)) if v}


class PtxError(ValueError):
    """Input that is not PTX, or cannot be read (one line).

    Examples
    --------
    >>> from meshnb.conformance.audit import PtxError, audit_text
    >>> try:
    ...     audit_text("hello")
    ... except PtxError as e:
    ...     print(e)
    not PTX: no .version, .target, .entry or .func directive
    """


@dataclass(slots=True)
class Instruction:
    """One PTX instruction: its line, function, opcode and operands (registers resolved to names
    unique in the module: ``function:scope:register``; constants and symbols as written)."""

    line: int
    function: str
    opcode: str
    operands: list[str]
    dests: list[str] = field(default_factory=list)
    srcs: list[str] = field(default_factory=list)
    callee: str = ""
    floats: str = ""  # an opcode of no float type and no row: the float register it reads or writes
    source: str = ""  # the .loc before it, as file:line


@dataclass
class Module:
    """A parsed PTX module: its instructions in order and each function's parameter names."""

    instructions: list[Instruction]
    params: dict[str, list[str]]  # function -> its resolved parameter names (return values first)
    returns: dict[str, list[str]]
    symbols: set[str] = field(default_factory=set)  # .local, .shared and .global variables, as written
    escaped: set[str] = field(default_factory=set)  # "mem:" places whose address leaves its function


def shown(name: str) -> str:
    """A file name as printed: itself when printable, else quoted with escapes (no raw control
    characters reach a terminal)."""
    return name if name.isprintable() and name.strip() == name and name else repr(name)


# -- parsing ---------------------------------------------------------------------------------


def _uncomment(m: re.Match[str]) -> str:
    t = m.group()
    return t if t[0] == '"' else "\n" * t.count("\n")  # a comment's lines stay lines


class _Lines:
    """Line numbers of positions in a text, asked in increasing order: each newline counted once."""

    __slots__ = ("at", "line", "text")

    def __init__(self, text: str) -> None:
        self.text, self.at, self.line = text, 0, 1

    def of(self, pos: int) -> int:
        self.line += self.text.count("\n", self.at, pos)
        self.at = pos
        return self.line


def _statements(
    text: str, lines: list[_Lines], wanted: dict[str, bool] | None, values: bool = True, addresses: bool = False
) -> Iterator[tuple[int, str, str, str]]:
    """``(line, kind, text, opcode)`` per statement: kind ``;``, ``{`` (``text``: "" or a header),
    ``}``, or ``i`` (an instruction read whole: ``text`` its operands, the number its opcode's
    position); ``wanted`` (opcode -> kept, filled in as met) drops the ``i`` ones not kept."""
    if "/" in text or '"' in text:
        text = _COMMENT.sub(_uncomment, text)
    counter = _Lines(text)
    lines.append(counter)
    line_of = counter.of  # positions asked in increasing order
    start = 0  # where the pending statement starts
    depth = 0  # braces inside a statement's operands ({%r1, %r2}, initialisers)
    decided = False  # the pending statement's first "{" was an operand's

    def pieces(body: str, pos: int) -> Iterator[tuple[int, str, str, str]]:
        p = 0
        while True:  # .version, .target, .loc ... end at their line's end, not at a ";"
            d = _ONE_DIRECTIVE.match(body, p)
            if d is None:
                break
            yield line_of(pos + d.start(1)), ";", d.group(1), ""
            p = d.end()
        q = _SPACE.match(body, p).end()  # type: ignore[union-attr]  # \s* always matches
        if q < len(body):
            yield line_of(pos + q), ";", body[q:], ""

    m: re.Match[str] | None = None
    for m in (_SCAN if wanted is None or addresses else _SCAN_AUDIT).finditer(text):
        li = m.lastindex
        if li == 1:  # a run of statements the audit does not read
            if depth or not decided:
                continue  # inside an operand's braces, or statements of their own
            tok, at = ";", text.index(";", m.start())  # its first ";" ends the pending statement
        elif li:  # a whole instruction (its ";" ends it)
            if not depth and not decided:  # a statement of its own
                op = m.group(li - 1)
                if wanted is not None:
                    keep = wanted.get(op)
                    if keep is None:
                        info = _info(op)
                        keep = wanted[op] = (
                            (info.flows and values)
                            or bool(info.classes)
                            or info.regs
                            or info.judged
                            or (addresses and _addressing(op))
                        )
                    if not keep:
                        continue
                yield m.start(li - 1), "i", m.group(li), op
                continue
            tok, at = ";", m.end() - 1  # inside an operand's braces: only its ";" counts
        else:
            if not depth and not decided:
                start = m.start()  # the pieces before were whole statements
            at = m.end() - 1
            tok = text[at]
            if tok not in ";{}":
                break  # the text after the last delimiter: the tail below
        if depth:
            depth += 1 if tok == "{" else -1 if tok == "}" else 0
            continue
        if tok == ";":
            yield from pieces(text[start:at], start)
            start, decided = at + 1, False
        elif tok == "{":
            if decided:
                depth = 1
                continue
            body = text[start:at]
            cut = _DIRECTIVES.match(body).end()  # type: ignore[union-attr]  # line directives before a header
            stripped = body[cut:].strip()
            labels = len(stripped) < 4096 and _LABELS_ONLY.fullmatch(stripped)
            if not stripped or _HEADER_START.match(stripped) or labels:
                if cut:
                    yield from pieces(body[:cut], start)
                head = _HEADER_START.match(stripped) is not None if stripped else False
                yield line_of(at), "{", stripped if head else "", ""
                start = at + 1
            else:
                decided, depth = True, 1
        else:  # "}" closing a block
            body = text[start:at]
            if body.strip():
                yield from pieces(body, start)
            yield line_of(at), "}", "", ""
            start, decided = at + 1, False
    else:
        if m is not None and not depth and not decided:
            start = m.end()  # the last piece was a whole statement
    tail = text[start:]
    if tail.strip():
        yield from pieces(tail, start)


def _split_operands(s: str) -> list[str]:
    parts = s.split(",")
    if "{" not in s:
        return [p.strip() for p in parts if p.strip()]
    out: list[str] = []
    acc: list[str] = []
    depth = 0
    for p in parts:  # rejoin the pieces of a {a, b} vector operand
        acc.append(p)
        depth += p.count("{") - p.count("}")
        if depth <= 0:
            out.append(",".join(acc).strip())
            acc, depth = [], 0
    if acc:
        out.append(",".join(acc).strip())
    return [o for o in out if o]


def _names(operand: str) -> list[str]:
    """The register or symbol names one operand reads or writes: ``%f1``, ``{%a, %b}``, ``[p+8]``,
    ``%r5|%p2``, ``-%f1`` (negated source)."""
    o = operand.strip().lstrip("-!")
    if o.startswith("{"):
        return [n for p in o.strip("{}").split(",") for n in _names(p)]
    if o.startswith("["):
        m = _ADDR.match(o)
        return [m.group(1)] if m else []
    if "|" in o:
        return [n for p in o.split("|") for n in _names(p)]
    return [o] if o and (o[0] == "%" or o[0].isalpha() or o[0] in "_$") else []


def _declared(name: str, exact: set[str], ranges: list[tuple[str, int]]) -> str | tuple[str, int] | None:
    """The declaration of one block that declares register ``name`` (``%f1`` or ``%f<4>``), if any."""
    if name in exact:
        return name
    for prefix, n in ranges:
        tail = name[len(prefix) :]
        if name.startswith(prefix) and tail.isdigit() and int(tail) < n:
            return prefix, n
    return None


class _Scopes:
    """Register and .param names declared per ``{ }`` block: a block's own shadow the outer ones."""

    def __init__(self) -> None:
        # per block: its number, its names, its ranges (%f<4>) and those of a float type
        self.stack: list[tuple[int, set[str], list[tuple[str, int]], set[str | tuple[str, int]]]] = []
        self.counter = 0
        self.function = ""
        self.cache: dict[str, str] = {}  # names resolved in the current scopes

    def push(self) -> None:
        self.counter += 1
        self.stack.append((self.counter, set(), [], set()))
        self.cache.clear()

    def pop(self) -> None:
        if self.stack:
            self.stack.pop()
        self.cache.clear()

    def declare(self, decl: str, is_float: bool = False) -> None:
        self.cache.clear()
        if not self.stack:
            return
        _, exact, ranges, floats = self.stack[-1]
        for piece in decl.split(","):
            m = _REG_DECL.search(piece.strip())
            if m is None:
                continue
            key = m.group(1) if m.group(2) is None else (m.group(1), int(m.group(2)))
            exact.add(key) if isinstance(key, str) else ranges.append(key)
            if is_float:
                floats.add(key)

    def is_float(self, name: str) -> bool:
        """Whether the innermost declaration of register ``name`` has a float type (``.f32``, ...)."""
        for _, exact, ranges, floats in reversed(self.stack):
            key = _declared(name, exact, ranges)
            if key is not None:
                return key in floats
        return False

    def resolve(self, name: str) -> str:
        got = self.cache.get(name)
        if got is None:
            got = self.cache[name] = self._resolve(name)
        return got

    def _resolve(self, name: str) -> str:
        if name[:1].isdigit():  # a constant: 0d3FF0000000000000, 0f3F800000, 42
            return name
        for sid, exact, ranges, _ in reversed(self.stack[1:]):  # the function's own block: level 0
            if _declared(name, exact, ranges) is not None:
                return f"{self.function}:{sid}:{name}"
        return f"{self.function}:0:{name}"


def _param_names(decl: str | None) -> list[str]:
    return [m.group(1) for piece in (decl or "").split(",") if (m := _REG_DECL.search(piece.strip()))]


_DECL_PREFIX = re.compile(r"(?:\s*\.\w+(?:\s+\d+)?)*\s*")


def _flowing(line: int, scopes: _Scopes, opcode: str, tail: str, info: _OpInfo) -> Instruction:
    """An instruction a promoted value may pass through: its operands read, registers resolved."""
    base = info.base
    if base != "call" and base != "st" and not _COMPLEX_OPERAND.search(tail):  # "%fd2, %fd1, 0d3FF0..."
        ops = [o.strip() for o in tail.split(",")]
        if "" in ops:
            ops = [o for o in ops if o]
        if not ops:
            return Instruction(line, scopes.function, opcode, ops)
        cache, resolve = scopes.cache, scopes._resolve
        srcs: list[str] = []
        for o in ops:  # a name resolved (scopes.resolve, inlined), a constant as written
            if o[0] in _NAME_START or o[0].isalpha():
                r = cache.get(o)
                if r is None:
                    r = cache[o] = resolve(o)
                srcs.append(r)
            else:
                srcs.append(o)
        first = ops[0][0]
        dests = srcs[:1] if first in _NAME_START or first.isalpha() else []
        return Instruction(line, scopes.function, opcode, ops, dests, srcs[1:])
    ins = Instruction(line, scopes.function, opcode, _split_operands(tail))
    if base == "call":  # call.uni (ret), name, (a, b);  call name, (a);
        callee = ""
        for paren, word in _CALL_PARTS.findall(tail):
            names = [n.strip() for n in paren.split(",") if n.strip()]
            if word and not callee:
                callee = word
            elif not word and callee:
                ins.srcs = [scopes.resolve(n) for n in names]
            elif not word:
                ins.dests = [scopes.resolve(n) for n in names]
        ins.callee = callee
    elif ins.operands:  # st.param.f64 [p+0], %fd1 too: the address names where the value goes
        ins.dests = [scopes.resolve(n) for n in _names(ins.operands[0])]
        each = ([scopes.resolve(n) for n in _names(o)] or [o.strip().lstrip("-")] for o in ins.operands[1:])
        ins.srcs = list(chain.from_iterable(each))  # a constant as written
    return ins


def parse(text: str) -> Module:
    """The instructions of PTX ``text``; :class:`PtxError` if it is not PTX (a NUL byte, or no
    PTX directive)."""
    return _parse(text, every=True, values=True)


_ADDRESS_OPS = frozenset({"mov", "cvta", "add", "sub", "mad", "selp", "slct", "and", "or", "xor", "min", "max"})
# how an address into a variable is made: an op of no float type taking one as an operand keeps it
_MEMORY_SPACE = re.compile(r"\.(?:local|shared|global)\b")
_VARIABLE = re.compile(r"(?:\.(?:extern|visible|weak)\s+)*\.(?:local|shared|global)\s")


def _addressing(opcode: str) -> bool:
    """An integer instruction that may make an address (``mov.u64 %rd1, __local_depot0``,
    ``cvta.local.u64``, ``add.s64 %rd2, %rd1, %rd3``): read when values go through memory."""
    parts = opcode.split(".")
    return parts[0] in _ADDRESS_OPS and not _float_types(parts[1:])


def _mem(name: str) -> str:
    """A resolved name as written (``f:0:%rd1`` -> ``%rd1``): a variable's name is the module's."""
    return name.rsplit(":", 1)[-1]


def _follow_memory(module: Module) -> None:
    """The address-symbol model: each register's *bases*, the variables its value may point into
    (flow-insensitive); a store through one writes the whole variable (a ``mem:`` name), a load
    from it reads it, so a value stored and loaded back stays what it was."""
    if not module.symbols:
        return
    ins_list = module.instructions
    bases: dict[str, set[str]] = {}
    edges: dict[str, list[str]] = {}  # a register -> the registers made from it
    for ins in ins_list:
        if not ins.dests or not _addressing(ins.opcode):
            continue
        for src in ins.srcs:
            if _mem(src) in module.symbols:
                for d in ins.dests:
                    bases.setdefault(d, set()).add(src)
            else:
                edges.setdefault(src, []).extend(ins.dests)
    _spread(bases, edges, lambda got, new: None if got is not None and new <= got else new | (got or set()))

    for ins in ins_list:  # an address stored (st.param into a call, st into memory): the variable leaves
        if ins.opcode.startswith("st.") and ins.srcs:
            for src in ins.srcs:
                module.escaped.update("mem:" + _mem(b) for b in bases.get(src, ()))
                if _mem(src) in module.symbols:
                    module.escaped.add("mem:" + _mem(src))

    def places(names: list[str]) -> list[str]:
        out: list[str] = []
        for n in names:
            if _mem(n) in module.symbols:
                out.append("mem:" + _mem(n))  # a variable is the module's, whichever function names it
            elif n in bases:
                out += sorted({"mem:" + _mem(b) for b in bases[n]})
            else:
                out.append(n)  # no variable known: the register itself (a store and a load through it)
        return out

    for ins in ins_list:
        parts = ins.opcode.split(".")
        if parts[0] not in ("ld", "st", "ldu") or "param" in parts:
            continue
        if parts[0] == "st":
            ins.dests = places(ins.dests)
        else:
            ins.srcs = places(ins.srcs[:1]) + ins.srcs[1:]


_FILE = re.compile(r'\s*(\d+)\s+"((?:[^"\\]|\\.)*)"')
_LOC = re.compile(r"\s*(\d+)\s+(\d+)(?:.*?inlined_at\s+(\d+)\s+(\d+))?")


def _sources_of(instructions: list[Instruction], locs: list[tuple[int, str]], files: dict[str, str]) -> None:
    """Each instruction's ``source``: the last ``.loc`` before it (``file:line``, and ``inlined at
    file:line`` for a ``.loc`` of inlined code); line 0 (no source line) leaves it empty."""
    for n, (at, rest) in enumerate(locs):
        end = locs[n + 1][0] if n + 1 < len(locs) else len(instructions)
        m = _LOC.match(rest)
        if m is None or m.group(2) == "0":
            continue
        where = f"{files.get(m.group(1), m.group(1))}:{m.group(2)}"
        if m.group(3):
            where += f", inlined at {files.get(m.group(3), m.group(3))}:{m.group(4)}"
        for ins in instructions[at:end]:
            ins.source = where


def _parse(text: str, every: bool, values: bool) -> Module:
    """:func:`parse`; ``every=False`` keeps only what :func:`audit_module` reads, ``values=False``
    (no value is ever promoted) only the instructions of an f32 class, their operands unread."""
    if "\0" in text:
        raise PtxError(f"not PTX: a NUL byte on line {text.count(chr(10), 0, text.index(chr(0))) + 1}")
    instructions: list[Instruction] = []
    params: dict[str, list[str]] = {}
    returns: dict[str, list[str]] = {}
    scopes = _Scopes()
    directives = False
    lines: list[_Lines] = []
    infos: dict[str, _OpInfo] = {}
    append = instructions.append
    addresses = values and _MEMORY_SPACE.search(text) is not None  # values may go through memory
    symbols: set[str] = set()
    locs: list[tuple[int, str]] = []  # (index of the next instruction, a .loc's operands)
    files: dict[str, str] = {}

    def signature(header: re.Match[str], put: Callable[[dict[str, list[str]], str, list[str]], object]) -> None:
        for into, group in ((returns, 2), (params, 4)):  # a function's return values and parameters, resolved
            put(into, scopes.function, [scopes.resolve(n) for n in _param_names(header.group(group))])

    def read(line: int, opcode: str, tail: str) -> None:
        info = infos.get(opcode)
        if info is None:
            info = infos[opcode] = _info(opcode)
        if info.regs:  # an opcode the table does not know: the first register declared of a float type
            ins = _flowing(line, scopes, opcode, tail, info)
            ins.floats = next((n for o in ins.operands for n in _names(o) if scopes.is_float(n)), "")
            append(ins)
        elif info.judged or (info.flows and values) or (addresses and _addressing(opcode)):
            append(_flowing(line, scopes, opcode, tail, info))
        elif every or info.classes:  # f32 arithmetic, integers, control: no promoted value passes
            append(Instruction(line, scopes.function, opcode, []))

    for line, kind, body, opcode in _statements(text, lines, None if every else {}, values, addresses):
        if kind == "i":  # the common statement, read whole: its opcode and operands (line: a position)
            read(lines[0].of(line), opcode, body)
            continue
        if kind == "{":
            header = _HEADER.match(body) if body.strip() and not scopes.stack else None
            scopes.push()
            if header:
                directives = True
                scopes.function = header.group(3)
                signature(header, dict.__setitem__)
            continue
        if kind == "}":
            scopes.pop()
            if not scopes.stack:
                scopes.function = ""
            continue
        s = body.strip()
        m = _LABEL.match(s) if ":" in s else None
        while m is not None:  # labels ("$L__BB0_3:") before the statement
            rest = s[m.end() :]
            stripped = rest.lstrip()
            line += s.count("\n", 0, m.end()) + rest.count("\n", 0, len(rest) - len(stripped))
            s = stripped
            m = _LABEL.match(s)
        if not s:
            continue
        if s.startswith("."):
            word = s.split(None, 1)
            rest = word[1] if len(word) > 1 else ""
            if word[0] in (".version", ".target"):
                directives = True
            elif word[0] == ".loc":
                locs.append((len(instructions), rest))
            elif word[0] == ".file":
                named = _FILE.match(rest)
                if named:
                    files[named.group(1)] = named.group(2).rsplit("/", 1)[-1]
            elif _VARIABLE.match(s):  # a variable: ".local .align 8 .b8 __local_depot0[40]", ".extern .shared"
                decl = _REG_DECL.search(s.split("=")[0].strip())
                if decl:
                    symbols.add(decl.group(1))
            elif word[0] in (".reg", ".param") and scopes.stack:
                prefix = _DECL_PREFIX.match(rest)  # type, .align N ...: then the names
                words = prefix.group().split() if prefix else []
                scopes.declare(rest[prefix.end() if prefix else 0 :], any(_FLOAT_TYPE.fullmatch(w[1:]) for w in words))
            elif _HEADER_START.match(s):  # a prototype: ".func (...) name(...);"
                directives = True
                header = _HEADER.match(s)
                if header:
                    saved, scopes.function = scopes.function, header.group(3)
                    scopes.push()
                    signature(header, dict.setdefault)
                    scopes.pop()
                    scopes.function = saved
            continue
        m = _OPCODE.match(s)
        if m is None:
            continue
        opcode = m.group(1)
        if m.start(1):
            line += s.count("\n", 0, m.start(1))
        read(line, opcode, s[m.end(1) :])
    if not directives:
        raise PtxError("not PTX: no .version, .target, .entry or .func directive")
    _sources_of(instructions, locs, files)
    module = Module(instructions, params, returns, symbols)
    _follow_memory(module)
    return module


# -- the f32 classes, instruction by instruction ---------------------------------------------


@dataclass(frozen=True)
class _OpInfo:
    base: str
    classes: tuple[str, ...]
    flows: bool  # a promoted value may pass through or be computed on: operands are parsed
    opclass: str  # "end", "arith" (f64), "pass", "other"
    why: str = ""  # unverified: why mode Z's table does not allow it (no named class covers it)
    regs: bool = False  # an opcode of no float type the table does not know: its registers are read
    judged: bool = False  # f32 arithmetic judged on its operands (fma by 1.0, an unrounded op with no pair)


_FLOWS = frozenset(("call", "cvt", "shfl", "ld", "ldu", *_WRITES)) | _BITS_PASS


@functools.lru_cache(maxsize=4096)
def _info(opcode: str) -> _OpInfo:
    parts = opcode.split(".")
    types = set(parts[1:])
    if parts[0] == "cvt" and len(parts) >= 3 and parts[-2] in _F32:
        opclass = "end"  # back to f32: a promoted value ends here
    elif parts[0] in _F64_ARITH and parts[-1] == "f64":
        opclass = "arith"
    else:
        opclass = "pass" if parts[0] in _PASS else "other"
    flows = parts[0] in _FLOWS or bool(types & {"f64", "b64"})
    named = classes(opcode)
    why = "" if named and named != ["unverified"] else unverified(opcode)
    regs = parts[0] not in INT_OPS and not _float_types(parts[1:])
    f32_judged = "contraction" in named or "unrounded" in named or (parts[0] == "setp" and "flush" in named)
    f32_judged |= parts[0] in ("mov", "neg", "selp") and len(parts) == 2
    judged = (bool(types & _F32) and f32_judged) or opcode in _NARROW or parts[0] in ("ld", "ldu", "st")
    return _OpInfo(parts[0], tuple(named), flows, opclass, why, regs, judged)


def classes(opcode: str) -> list[str]:
    """The classes of one opcode (``fma.rn.ftz.f32`` -> contraction, flush), in CLASSES order:
    ``unverified`` alone when it names a float type, no named class covers it and no row of
    :data:`MODE_Z` allows it (:func:`unverified` says why)."""
    parts = opcode.split(".")
    op, mods = parts[0], set(parts[1:])
    out: list[str] = []
    f32 = bool(mods & _F32)
    into_f32 = op == "cvt" and len(parts) >= 3 and parts[-2] in _F32
    if f32 and op in ("fma", "mad"):
        out.append("contraction")
    if f32 and op in ("add", "sub", "mul") and not (mods & _ROUNDING):
        out.append("unrounded")
    if f32 and "ftz" in mods:
        out.append("flush")
    if (op in _APPROX_OPS and "approx" in mods) or (op == "div" and "full" in mods):
        out.append("approximate")
    if mods & _DIRECTED and ((f32 and op in _ROUNDED_OPS) or into_f32):
        out.append("directed-rounding")
    if not out and unverified(opcode):
        out.append("unverified")
    return out


# -- promoted values: the whole module's dataflow ----------------------------------------------


@dataclass
class _Taint:
    flags: int = 0
    cands: frozenset[int] = frozenset()
    once: frozenset[int] = frozenset()  # the f32 operations done in f64 (_X) this value comes from

    def join(self, other: _Taint) -> bool:
        changed = False
        flags = self.flags | other.flags
        if flags != self.flags:
            self.flags, changed = flags, True
        cands = other.cands
        if cands and not cands <= self.cands:  # a new set only when it grows
            self.cands, changed = self.cands | cands, True
        once = other.once
        if once and not once <= self.once:
            self.once, changed = self.once | once, True
        return changed


def _constants(ins_list: list[Instruction], moves: Callable[[str], bool], prefix: str) -> dict[str, str]:
    """Registers whose one definition is a move (an opcode ``moves`` accepts) of a constant starting
    ``prefix`` (1.0, pi, 2/pi are often moved into a register first)."""
    defs = Counter(chain.from_iterable(ins.dests for ins in ins_list))
    return {
        d: ins.srcs[0]
        for ins in ins_list
        if ins.dests and moves(ins.opcode) and len(ins.srcs) == 1 and ins.srcs[0].startswith(prefix)
        for d in ins.dests
        if defs[d] == 1
    }


def _kind(ins: Instruction, consts: list[str]) -> str:
    """What an f64 arithmetic instruction is to the sin_pi rule: ``"two-over-pi"`` (a sine's
    quadrant reduction), ``"pi"`` (pi r), ``"one-minus"`` (1 - |x|), ``"zero"`` (exact), or ``""``."""
    op = ins.opcode.split(".")[0]
    if op == "mul" and any(c in ZERO_F64 for c in consts):
        return "zero"
    if op == "mul" and TWO_OVER_PI_F64 in consts:
        return "two-over-pi"
    if op == "mul" and PI_F64 in consts:
        return "pi"
    if op == "sub" and len(consts) == 2 and consts[0] == ONE_F64:
        return "one-minus"
    return ""


class _Flow:
    """Promoted values over the whole module: a worklist over a def-use graph (each register's
    taint only grows, so the time is linear in the instructions times the few flags)."""

    def __init__(self, module: Module) -> None:
        self.module = module
        self.consts = _constants(module.instructions, lambda op: op.startswith("mov."), "0d")
        self.readers: dict[str, list[int]] = {}
        calls: dict[str, list[int]] = {}
        for i, ins in enumerate(module.instructions):
            for s in ins.srcs:
                self.readers.setdefault(s, []).append(i)
            if ins.callee:
                calls.setdefault(ins.callee, []).append(i)
        for f, names in module.returns.items():
            for n in names:  # a return value written: each call of f reads it
                self.readers.setdefault(n, []).extend(calls.get(f, []))
        self.kinds = {
            i: _kind(ins, [self.consts.get(s, s) for s in ins.srcs])
            for i, ins in enumerate(module.instructions)
            if ins.srcs and _info(ins.opcode).opclass == "arith"
        }

    def run(self, seeds: dict[int, _Taint], transfer: Callable[[int, list[_Taint]], _Taint]) -> dict[str, _Taint]:
        ins_list = self.module.instructions
        taint: dict[str, _Taint] = {}
        readers = self.readers
        none = _Taint()  # what an untainted register holds (read, never written)

        def write(name: str, t: _Taint) -> Iterable[int]:
            if not t.flags:
                return ()
            cur = taint.get(name)
            if cur is None:
                cur = taint[name] = _Taint()
            return readers.get(name, ()) if cur.join(t) else ()

        def step(i: int) -> Iterable[int]:
            ins = ins_list[i]
            srcs = [taint.get(s) or none for s in ins.srcs]
            if ins.callee:  # arguments into the callee's parameters, its return values out
                into = zip(self.module.params.get(ins.callee, []), srcs)
                back = ((d, taint.get(r) or none) for d, r in zip(ins.dests, self.module.returns.get(ins.callee, [])))
                return [r for name, t in chain(into, back) for r in write(name, t)]
            if i in seeds:
                return ()
            out = transfer(i, srcs)
            dests = ins.dests
            return write(dests[0], out) if len(dests) == 1 else [r for d in dests for r in write(d, out)]

        _walk([r for i, t in seeds.items() for d in ins_list[i].dests for r in write(d, t)], step)
        return taint


def _sine_code(ins: Instruction, srcs: list[_Taint], sine: set[str]) -> bool | None:
    """None: no operand from a sine's quadrant reduction; True: the sine's own code (other operands
    constants, the sine's, or the argument as an fma's addend); False: a promoted value, or the
    argument as a factor, mixed in (``fma(p, p, sin p)``)."""
    if not any(s in sine for s in ins.srcs):
        return None
    fma = ins.opcode.split(".")[0] in ("fma", "mad")
    for pos, (name, t) in enumerate(zip(ins.srcs, srcs)):
        if name in sine:
            continue
        if t.flags & (_F | _X) or (t.flags & _A and not (fma and pos == 2)):
            return False
    return True


def _joined(srcs: list[_Taint]) -> int:
    """The operands' flags together (an f32 operation done in f64, _X, is a promoted value, _F, too)."""
    flags = 0
    for t in srcs:
        flags |= t.flags
    return flags | _F if flags & _X else flags


def _promoted(module: Module) -> list[tuple[int, str, str]]:
    """``(index, class, why)`` of the f64 arithmetic on promoted values no rule accepts, and of the
    stores :func:`_unfollowed` finds.  Three passes: promoted values, the sine's code, promoted again."""
    flow = _Flow(module)
    ins_list = module.instructions
    flowing = [i for i, ins in enumerate(ins_list) if ins.dests or ins.srcs]
    opclass = {i: _info(ins_list[i].opcode).opclass for i in flowing}
    seed = _Taint(_F | _P)  # read only: a seed's taint is joined into its registers', never changed
    origins = {i: seed for i in flowing if _PROMOTES.fullmatch(ins_list[i].opcode)}
    if not origins:
        return []  # no f32 value is ever promoted
    sine: set[str] = set()

    def once(i: int, srcs: list[_Taint]) -> bool:
        """An add, sub or mul of two f32 values (promoted, or f64 constants exactly f32): rounded
        once to f32 it is RN32 (the product is exact; 53 >= 2 * 24 + 2 for the sum)."""
        ins = ins_list[i]
        if ins.opcode.split(".")[0] not in _ONCE_OPS or len(srcs) != 2:
            return False
        some = False
        for name, t in zip(ins.srcs, srcs):
            if t.flags:
                if t.flags != _F | _P:
                    return False
                some = True
            elif not _f32_exact(flow.consts.get(name, name)):
                return False
        return some

    def promoted(i: int, srcs: list[_Taint]) -> _Taint:
        c = opclass[i]
        out = _Taint()
        if c == "pass":
            for t in srcs:
                out.join(t)
            return out
        if c != "arith" or (sine and _sine_code(ins_list[i], srcs, sine)):  # no sine: no sine's code
            return out  # an integer op, the end of a promoted value, or the sine's own code
        k = flow.kinds.get(i, "")
        if k in ("", "one-minus") and once(i, srcs):
            return _Taint(_X, frozenset([i]) if k else frozenset(), frozenset([i]))
        flags, cands = _joined(srcs), frozenset[int]().union(*(t.cands for t in srcs))
        if flags & _F:
            if k == "pi":
                out.join(_Taint(_A, cands | {i}))
            elif k == "one-minus":
                out.join(_Taint(_F, cands | {i}))
            elif k != "zero":
                out.join(_Taint(_F))
        if flags & _A and k not in ("two-over-pi", "zero"):
            out.join(_Taint(_F))
        return out

    first = flow.run(origins, promoted)
    starts = {
        i: _Taint(_S)
        for i, k in flow.kinds.items()
        if k == "two-over-pi" and any((first.get(s) or _Taint()).flags & _A for s in ins_list[i].srcs)
    }

    def sine_code(i: int, srcs: list[_Taint]) -> _Taint:
        return _Taint(_S) if opclass[i] in ("pass", "arith") and any(t.flags for t in srcs) else _Taint()

    sine = set(flow.run(starts, sine_code)) | {d for i in starts for d in ins_list[i].dests} if starts else set()
    final = flow.run(origins, promoted) if sine else first
    confirmed: set[int] = set()
    found: list[int] = []
    escaped = _escapes(module, final)
    for i, k in flow.kinds.items():
        ins = ins_list[i]
        srcs = [final.get(s) or _Taint() for s in ins.srcs]
        flags = _joined(srcs)
        if not flags:
            continue
        if k in ("", "one-minus") and once(i, srcs):
            if i not in escaped:
                continue  # rounded once to f32: mode Z's operation
            if not k:
                found.append(i)
                continue
        in_sine = _sine_code(ins, srcs, sine) if sine else None
        if k == "two-over-pi" and flags & _A:
            for t in srcs:
                confirmed |= t.cands
        if in_sine is True:
            continue
        if in_sine is False:
            found.append(i)  # a promoted value, or the argument as a factor, mixed into the sine's code
        elif k == "two-over-pi":
            if flags & _F:
                found.append(i)
        elif k == "zero":
            continue
        elif k in ("pi", "one-minus") and not flags & _A:
            found.append(-1 - i)  # a candidate: a finding unless a sine confirms it
        else:
            found.append(i)
    out = sorted(i if i >= 0 else -1 - i for i in found if i >= 0 or -1 - i not in confirmed)
    return [(i, "double-rounding", escaped.get(i, "")) for i in out] + _unfollowed(module, final)


_CONSUMERS = frozenset(["mov", "abs", "neg", "selp", "min", "max", "ld", "ldu", "st", "call", "shfl"])


def _escapes(module: Module, taint: dict[str, _Taint]) -> dict[int, str]:
    """The f32 operations done in f64 (_X) whose value is used before its one rounding to f32, each
    with where: anything but moves, sign operations, selections, memory and ``cvt.rn.f32.f64``."""
    out: dict[int, str] = {}
    for ins in module.instructions:
        parts = ins.opcode.split(".")
        if parts[0] in _CONSUMERS or (parts[0] == "cvt" and parts[1:2] == ["rn"] and parts[-2] in _F32):
            continue
        for s in ins.srcs:
            t = taint.get(s)
            if t is not None and t.once:
                for i in t.once:
                    out.setdefault(
                        i, f"its f64 result is used by {ins.opcode} on line {ins.line} before its one rounding"
                    )
    return out


def _unfollowed(module: Module, taint: dict[str, _Taint]) -> list[tuple[int, str, str]]:
    """Stores of a promoted value whose loads the audit cannot match (through an address made from
    no variable, into a variable whose address leaves its function, by an atomic): ``unverified``.
    An exact f32 value stored as 64 bits, in a module that loads no such word back, is output."""
    out: list[tuple[int, str, str]] = []
    wide = {"f64", "b64", "u64", "s64", "v2", "v4", "v8"}
    loads_back = any(
        (
            ins.opcode.startswith(("ld.", "ldu."))
            and "param" not in ins.opcode.split(".")
            and bool(wide & set(ins.opcode.split(".")[1:]))
            and not (ins.srcs[:1] and ins.srcs[0].startswith("mem:"))
        )
        or ins.opcode.startswith("atom.")
        for ins in module.instructions
    )
    for i, ins in enumerate(module.instructions):
        parts = ins.opcode.split(".")
        if parts[0] not in _WRITES or "param" in parts:
            continue
        values, places = (ins.srcs[1:], ins.srcs[:1]) if parts[0] == "atom" else (ins.srcs, ins.dests)
        if not any((taint.get(s) or _Taint()).flags for s in values):
            continue
        unknown = [p for p in places if not p.startswith("mem:")]
        leaving = [p for p in places if p in module.escaped]
        exact = all((taint.get(s) or _Taint()).flags in (0, _F | _P) for s in values)
        if parts[0] == "st" and exact and not loads_back and {"f64", "b64", "u64", "s64"} & set(parts[1:]):
            continue  # an f32 value widened and written out: nothing in the module reads it back
        if parts[0] != "st":
            why = f"{parts[0]} on a promoted f64 value: a memory operation the audit does not follow"
        elif unknown:
            why = (
                "a promoted f64 value stored through an address made from no variable of the module "
                "(global or generic memory): its loads cannot be matched"
            )
        elif leaving:
            why = (
                f"a promoted f64 value stored into {leaving[0][4:]}, whose address leaves "
                "the function: its loads cannot be matched"
            )
        else:
            continue
        out.append((i, "unverified", why))
    return out


# -- the audit ---------------------------------------------------------------------------------


RULES = {  # the rule behind a finding of a named class, when no rule of its operands says more
    "contraction": "a product and a sum rounded once where mode Z rounds each: no multiplier 1.0, no addend -0.0",
    "unrounded": "no rounding modifier: ptxas may fuse it with its partner into an fma",
    "flush": ".ftz flushes subnormal inputs and results around the rounding; mode Z flushes the rounded result",
    "approximate": "not correctly rounded",
    "directed-rounding": "rounds toward zero or an infinity; mode Z rounds to nearest even",
    "double-rounding": "f32 values computed on in f64 and rounded again: neither the sin_pi rule nor one rounding",
}


def _normal_f32(constant: str) -> bool:
    """Whether an f32 constant (``0f...``) is normal, infinite or NaN (not a zero, not subnormal)."""
    try:
        return constant[:2] == "0f" and (int(constant[2:], 16) >> 23) & 0xFF != 0
    except ValueError:
        return False


_ONE_F32 = ("0f3F800000", "0fBF800000")
_ZERO_F32 = ("0f00000000", "0f80000000")
# f32 values widened from narrow formats: their significant bits (a half: 11; integers: their width)
_NARROW = {"cvt.f32.f16": 11} | {f"cvt.rn.f32.{t}": int(t[1:]) for t in _EXACT_INTS}
_NEG_ZERO_F32 = "0f80000000"  # fma(a, b, -0) = RN(a b), a zero product's sign included


def _f32_judged(module: Module) -> dict[int, tuple[set[str], str]]:
    """The f32 arithmetic its operands decide: index -> (classes it does *not* have, the rule).  An
    fma by exactly +-1.0, or of addend -0.0, or of an exact product is no contraction; an unrounded
    add/sub/mul is ``unrounded`` only with a partner ptxas could fuse it with."""
    ins_list = module.instructions
    consts = {d: c.upper().replace("0F", "0f", 1) for d, c in _constants(ins_list, "mov.f32".__eq__, "0f").items()}

    def value(name: str) -> str:
        return name.upper().replace("0F", "0f", 1) if name[:2] in ("0f", "0F") else consts.get(name, "")

    narrow: dict[str, int] = {}  # a register whose every definition makes a float of few significant bits
    for ins in ins_list:
        bits = _NARROW.get(ins.opcode, 0)
        for d in ins.dests:  # 99: defined otherwise too, not known
            narrow[d] = bits if bits and narrow.get(d, bits) == bits else 99
    narrow = {d: b for d, b in narrow.items() if b != 99}

    def exact_product(a: str, b: str) -> bool:
        """A factor 0.0, or both widened from halves or small integers, 24 significant bits at most."""
        if value(a) in _ZERO_F32 or value(b) in _ZERO_F32:
            return True
        return a in narrow and b in narrow and narrow[a] + narrow[b] <= 24

    products: dict[str, int] = {}  # a register holding an unrounded product (through moves) -> a mul
    muls_of: dict[str, list[int]] = {}  # a mul's register -> every unrounded mul that writes it
    copies: dict[str, list[str]] = {}
    out: dict[int, tuple[set[str], str]] = {}
    for i, ins in enumerate(ins_list):
        parts = ins.opcode.split(".")
        if parts[0] in ("mov", "neg") and len(parts) == 2 and ins.srcs and ins.dests:
            copies.setdefault(ins.srcs[0], []).extend(ins.dests)
        elif ins.opcode in ("selp.f32", "selp.f32x2") and ins.dests:  # a choice ptxas may turn back into branches
            for r in ins.srcs[:2]:
                copies.setdefault(r, []).extend(ins.dests)
        elif (
            parts[0] == "mul"
            and "unrounded" in _info(ins.opcode).classes
            and not (len(ins.srcs) >= 2 and exact_product(ins.srcs[0], ins.srcs[1]))
        ):
            for d in ins.dests:
                products[d] = i
                muls_of.setdefault(d, []).append(i)
        elif parts[0] in ("fma", "mad") and len(ins.srcs) == 3:
            a, b, c = (value(x) for x in ins.srcs)
            if exact_product(ins.srcs[0], ins.srcs[1]):
                rule = "fma whose product is exact (halves or small integers widened, or a factor 0): "
                rule += "mode Z's multiply and add"
            elif a in _ONE_F32 or b in _ONE_F32:
                rule = "fma with the multiplier exactly 1.0 is a rounded add (fma(1, a, b) = RN(a + b))"
            elif c == _NEG_ZERO_F32:
                rule = "fma with the addend exactly -0.0 is a rounded multiply (a b + -0 = RN(a b))"
            else:
                continue
            out[i] = ({"contraction"}, rule)
        elif parts[0] == "setp" and "ftz" in parts:  # a compare with .ftz that a flush cannot change
            if "nan" in parts or "num" in parts:
                out[i] = ({"flush"}, "setp.nan/num: a flushed subnormal is as much a number as before")
            elif any(_normal_f32(value(x)) for x in ins.srcs[:2]):
                out[i] = (
                    {"flush"},
                    "a compare with a normal, infinite or NaN constant: a subnormal orders as its zero",
                )
    _spread(products, copies, _first)  # the product's registers through moves and negations
    # a product stored to memory may come back through any load (the places of f32 values are not
    # told apart): each unrounded add of a loaded value is its partner
    stored = sorted(
        {products[r] for ins in ins_list if ins.opcode.startswith("st.") for r in ins.srcs if r in products}
    )
    loaded: dict[str, int] = {}
    if stored:
        for i, ins in enumerate(ins_list):
            if ins.opcode.startswith(("ld.", "ldu.")):
                for d in ins.dests:
                    loaded[d] = i
        _spread(loaded, copies, _first)
    paired: dict[int, str] = {}
    through_memory = False
    for i, ins in enumerate(ins_list):
        parts = ins.opcode.split(".")
        if parts[0] in ("add", "sub") and "unrounded" in _info(ins.opcode).classes:
            if any(s in loaded for s in ins.srcs):
                if not through_memory:  # once (the first such add named): linear in the module
                    through_memory = True
                    for m in stored:
                        paired[m] = paired.get(m) or (
                            f"its product is stored, and may come back through the load on line "
                            f"{ins_list[next(loaded[s] for s in ins.srcs if s in loaded)].line} into the unrounded "
                            f"{parts[0]} on line {ins.line}: ptxas may fuse them"
                        )
                paired[i] = (
                    f"an operand is loaded from memory an unrounded product (line {ins_list[stored[0]].line}) "
                    "is stored to: ptxas may fuse them"
                )
            muls = sorted({products[s] for s in ins.srcs if s in products})
            for m in muls:
                paired[m] = f"its product reaches the unrounded {parts[0]} on line {ins.line}: ptxas may fuse them"
            if muls:
                paired[i] = f"an operand is the unrounded product of line {ins_list[muls[0]].line}: ptxas may fuse them"
    for m in list(paired):  # every mul writing a paired mul's register is paired (a register defined again)
        if ins_list[m].opcode.startswith("mul"):
            for d in ins_list[m].dests:
                for other in muls_of.pop(d, ()):
                    paired.setdefault(other, paired[m])
    for i, ins in enumerate(ins_list):
        if "unrounded" in _info(ins.opcode).classes:
            out[i] = (set(), paired[i]) if i in paired else ({"unrounded"}, "")
    return out


_V = TypeVar("_V")
_K = TypeVar("_K")


def _walk(start: Iterable[_K], step: Callable[[_K], Iterable[_K]]) -> None:
    """The one worklist of the value passes, to a fixpoint: ``step(k)`` applies the pass's rule at
    ``k`` and yields the nodes whose input changed (each queued once at a time, in order)."""
    work: deque[_K] = deque()
    queued: set[_K] = set()
    nodes = start
    while True:
        for n in nodes:
            if n not in queued:
                queued.add(n)
                work.append(n)
        if not work:
            return
        k = work.popleft()
        queued.discard(k)
        nodes = step(k)


def _spread(values: dict[str, _V], edges: dict[str, list[str]], merge: Callable[[_V | None, _V], _V | None]) -> None:
    """The registers' ``values`` carried along ``edges`` (a register -> those made from it):
    ``merge(held, arriving)`` is a register's new value, or None when it does not change."""

    def step(r: str) -> Iterator[str]:
        for d in edges.get(r, ()):
            got = merge(values.get(d), values[r])
            if got is not None:
                values[d] = got
                yield d

    _walk(list(values), step)


def _first(held: _V | None, arriving: _V) -> _V | None:
    return arriving if held is None else None


def audit_module(module: Module, allow_f64: Iterable[str] = ()) -> list[Violation]:
    """The findings of a parsed module, in line order; ValueError if ``allow_f64`` names a function
    the module neither declares nor defines (a typo would allow nothing)."""
    allowed = set(allow_f64)
    unknown = sorted(allowed - module.params.keys())
    if unknown:
        raise ValueError(f"allow_f64 names no function of the module: {', '.join(map(repr, unknown))}")
    found: list[Violation] = []
    judged = _f32_judged(module)
    for n, ins in enumerate(module.instructions):
        info = _info(ins.opcode)
        kinds = info.classes
        rule = ""
        if n in judged:
            dropped, rule = judged[n]
            kinds = tuple(k for k in kinds if k not in dropped)
        if ins.floats:
            why = f"{info.base} on float register {ins.floats.rsplit(':', 1)[-1]}: no such entry in mode Z's table"
            found.append(Violation(ins.line, ins.function, ins.opcode, "unverified", why, ins.source))
            continue
        for k in kinds:  # in CLASSES order
            why = info.why if k == "unverified" else rule or RULES[k]
            found.append(Violation(ins.line, ins.function, ins.opcode, k, why, ins.source))
    for i, kind, why in _promoted(module):
        ins = module.instructions[i]
        if ins.function not in allowed or kind != "double-rounding":
            found.append(Violation(ins.line, ins.function, ins.opcode, kind, why or RULES[kind], ins.source))
    rank = {c: n for n, c in enumerate(CLASSES)}
    return sorted(found, key=lambda v: (v.line, rank[v.kind], v.instruction))


def functions(text: str) -> set[str]:
    """The names of the functions PTX ``text`` declares or defines; :class:`PtxError` if it is not PTX."""
    return set(_parse(text, every=False, values=False).params)


def audit_text(text: str, allow_f64: Iterable[str] = ()) -> list[Violation]:
    """The findings in a PTX module: every instruction that can break float mode Z, in line order.

    Parameters
    ----------
    text : str
        The PTX module's text.
    allow_f64 : iterable of str, default ()
        Functions of the module that may compute in f64: their double-rounding findings are dropped.

    Returns
    -------
    list of Violation
        The findings; empty when the module keeps mode Z's bits.

    Raises
    ------
    PtxError
        When ``text`` is not PTX.
    ValueError
        When ``allow_f64`` names a function the module neither declares nor defines.

    Examples
    --------
    >>> from meshnb.conformance.audit import audit_text
    >>> ptx = (
    ...     ".version 8.0\\n.target sm_90\\n.address_size 64\\n.visible .entry k()\\n{\\n"
    ...     "\\t.reg .f32 %f<5>;\\n\\tfma.rn.f32 %f1, %f2, %f3, %f4;\\n\\tadd.rn.f32 %f1, %f1, %f2;\\n}\\n"
    ... )
    >>> [(v.line, v.instruction, v.kind) for v in audit_text(ptx)]  # the add is rounded on its own
    [(7, 'fma.rn.f32', 'contraction')]
    """
    was = gc.isenabled()  # the cyclic collector off, as timeit does: a large module's millions of objects
    gc.disable()  # have no cycle, and its passes would cost a third of the audit's time
    try:
        return audit_module(_parse(text, every=False, values=".f64.f32" in text), allow_f64)
    finally:
        if was:
            gc.enable()


def read_ptx(path: str | Path) -> str:
    """The text of a PTX file: a regular file of at most :data:`MAX_BYTES`, UTF-8; :class:`PtxError`
    (one line, the name quoted) otherwise, never blocking on a FIFO or reading a device."""
    name = repr(str(path))
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except OSError as e:
        raise PtxError(f"cannot read {name}: {e.strerror or e}") from None
    try:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            raise PtxError(f"cannot read {name}: a directory, not a PTX file")
        if not stat.S_ISREG(st.st_mode):
            device = stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode)
            what = "a FIFO" if stat.S_ISFIFO(st.st_mode) else "a device" if device else "not a regular file"
            raise PtxError(f"cannot read {name}: {what}, not a PTX file (give a regular file)")
        if st.st_size > MAX_BYTES:
            raise PtxError(f"{name}: {st.st_size} bytes, over the audit's limit of {MAX_BYTES >> 20} MiB")
        with os.fdopen(fd, "rb", closefd=False) as f:  # the size may change under us: read to the end, bounded
            data = f.read(MAX_BYTES + 1)
    except OSError as e:
        raise PtxError(f"cannot read {name}: {e.strerror or e}") from None
    finally:
        os.close(fd)
    if len(data) > MAX_BYTES:
        raise PtxError(f"{name}: over the audit's limit of {MAX_BYTES >> 20} MiB")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise PtxError(f"{name}: not PTX (not UTF-8 text at byte {e.start})") from None


def audit_file(path: str | Path, allow_f64: Iterable[str] = ()) -> list[Violation]:
    """The findings in a PTX file: :func:`audit_text` of the file :func:`read_ptx` reads.

    Parameters
    ----------
    path : str or Path
        A regular file of PTX (UTF-8, at most :data:`MAX_BYTES`).
    allow_f64 : iterable of str, default ()
        Functions that may compute in f64: their double-rounding findings are dropped.

    Returns
    -------
    list of Violation
        The findings, in line order.

    Raises
    ------
    PtxError
        One line, the file named, when it cannot be read or is not PTX.

    Examples
    --------
    >>> import tempfile
    >>> from pathlib import Path
    >>> from meshnb.conformance.audit import PtxError, audit_file
    >>> with tempfile.TemporaryDirectory() as d:
    ...     try:
    ...         audit_file(d)
    ...     except PtxError as e:
    ...         print(str(e).replace(d, "DIR"))
    cannot read 'DIR': a directory, not a PTX file
    """
    text = read_ptx(path)
    try:
        return audit_text(text, allow_f64)
    except PtxError as e:
        raise PtxError(f"{str(path)!r}: {e}") from None
