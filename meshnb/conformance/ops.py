"""Op vectors for float mode Z, in the manner of Berkeley TestFloat: generate, verify, classify.

A vector is a line ``A B RESULT`` of 8-digit hex words (``A RESULT`` for ``from_u32``); expected
results are :class:`~.fpu.Ops`' under mode Z.  The tininess probes :data:`PROBES` name an executor's
underflow rule (docs/guide/checking-an-executor.md)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

import numpy as np

from .fpu import CANONICAL_NAN, EXP, MANT, OPS, SIGN, Ops, Rules, apply_op, is_nan, ulps

# fmt: off
_POS = [
    0x00000000,  # zero
    0x00000001, 0x00000002, 0x00400000, 0x007FFFFE, 0x007FFFFF,  # subnormals
    0x00800000, 0x00800001, 0x00800002, 0x00FFFFFF, 0x01000000, 0x01000001,  # smallest normals
    0x1F000000, 0x1EFFFFFF, 0x1F000001, 0x1F7FFFFF,  # 2^-65 ..: products with 2^-61 near 2^-126
    0x20000000, 0x1FFFFFFF, 0x20000001, 0x21000000,  # 2^-63 and neighbours: squares at, below, above 2^-126
    0x33800000, 0x34000000,  # half and one ulp of 1
    0x3F7FFFFE, 0x3F7FFFFF, 0x3F800000, 0x3F800001, 0x3F800002,  # 1 and its neighbours
    0x3F000000, 0x40000000, 0x40400000, 0x3FC00000, 0x3EAAAAAB,  # 0.5, 2, 3, 1.5, 1/3
    0x4B800000, 0x4B800001,  # 2^24, 2^24 + 2
    0x5F000000, 0x5F7FFFFF, 0x5F800000, 0x5F800001,  # 2^63, 2^64: products near the overflow threshold
    0x72FFFFFF, 0x73000000, 0x73000001,  # just below, at and above half an ulp of the max
    0x7F000000, 0x7F7FFFFE, 0x7F7FFFFF,  # the largest finite
    0x7F800000,  # infinity
    0x7FC00000, 0x7FFFFFFF, 0x7FC12345,  # quiet NaNs (several payloads)
    0x7F800001, 0x7FA00000, 0x7FBFFFFF,  # signalling NaNs
]
SPECIAL: tuple[int, ...] = tuple(_POS + [w | 0x80000000 for w in _POS])

PROBES: tuple[tuple[int, int], ...] = ((0x3F7FFFFF, 0x00800000), (0x3F7FFFFE, 0x00800001))

# u32 operands of from_u32: exact, halfway and just-off-halfway cases, the extremes.
SPECIAL_U32: tuple[int, ...] = tuple(sorted({
    0, 1, 2, 3, 32, 64, 96, 128, 255, 256, 2048, 0xFFFFFF,
    0x1000000, 0x1000001, 0x1000002, 0x1000003, 0x2000001, 0x2000002, 0x2000003, 0x2000006,
    0x7FFFFFBF, 0x7FFFFFC0, 0x7FFFFFC1, 0x7FFFFFFF, 0x80000000, 0x80000001, 0x80000080, 0x80000081,
    0x80000180, 0xFFFFFF7F, 0xFFFFFF80, 0xFFFFFF81, 0xFFFFFFFE, 0xFFFFFFFF,
}))
# fmt: on

LEVEL1_RANDOM = 20_000
LEVEL2_COUNT = 2_000_000
MAX_COUNT = 10_000_000  # pairs one gen makes in memory (about 1 GB at the peak); run several seeds for more


def _check_op(op: str, error: type[ValueError]) -> None:
    """Raises ``error`` for an op not in :data:`~.fpu.OPS`."""
    if op not in OPS:
        raise error(f"unknown op {op!r}; one of {', '.join(OPS)}")


def _rng(seed: int) -> np.random.Generator:
    """The random pairs' generator (PCG64: the same seed, the same vectors on every platform)."""
    return np.random.Generator(np.random.PCG64(seed))


def _edge_words(rng: np.random.Generator, n: int) -> np.ndarray:
    """Words weighted to the edges: exponents near 0 and 255, mantissas near all zeros/ones."""
    kind = rng.integers(0, 4, n)
    sign = rng.integers(0, 2, n).astype(np.uint32) << np.uint32(31)
    exp_edge = rng.choice(np.array([0, 1, 2, 3, 125, 126, 127, 128, 252, 253, 254, 255]), n)
    exp_any = rng.integers(0, 256, n)
    exp = np.where(kind < 2, exp_edge, exp_any).astype(np.uint32)
    k = rng.integers(0, 24, n).astype(np.uint32)
    low = (np.uint32(1) << k) - np.uint32(1)
    mant = np.select(
        [kind == 0, kind == 2, kind == 3], [low, MANT - low, rng.integers(0, 1 << 23, n)], rng.integers(0, 1 << 23, n)
    ).astype(np.uint32)
    return sign | (exp << np.uint32(23)) | (mant & MANT)


def _pairs_near_tiny(rng: np.random.Generator, op: str, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Pairs whose exact result lies near 2^-126 (or the overflow threshold) for ``op``."""
    a = rng.integers(0, 1 << 32, n, dtype=np.uint64).astype(np.uint32)
    ea = ((a >> np.uint32(23)) & np.uint32(0xFF)).astype(np.int64)
    ea = np.clip(ea, 1, 254)
    target = rng.choice(np.array([0, 1, 2, 253, 254]), n)  # result exponent field wanted
    if op == "mul":
        eb = target - ea + 127 + rng.integers(-1, 2, n)
    elif op == "div":
        eb = ea - target + 127 + rng.integers(-1, 2, n)
    else:  # add/sub: a near the boundary, b close to -a or tiny
        eb = ea + rng.integers(-2, 3, n)
    eb = np.clip(eb, 0, 255).astype(np.uint32)
    a = (a & ~EXP) | (ea.astype(np.uint32) << np.uint32(23))
    b = rng.integers(0, 1 << 32, n, dtype=np.uint64).astype(np.uint32)
    b = (b & ~EXP) | (eb << np.uint32(23))
    if op in ("add", "sub"):  # make b's mantissa close to a's so the result cancels to near 2^-126
        b = np.where(
            rng.integers(0, 2, n) == 1, (b & ~MANT) | ((a & MANT) ^ rng.integers(0, 16, n).astype(np.uint32)), b
        )
    return a, b.astype(np.uint32)


def generate(op: str, level: int = 1, seed: int = 1, count: int | None = None) -> tuple[np.ndarray, np.ndarray | None]:
    """Operands of ``op``'s vectors.

    Parameters
    ----------
    op : str
        ``"add"``, ``"sub"``, ``"mul"``, ``"div"`` or ``"from_u32"``.
    level : {1, 2}, default 1
        1: every pair of the special words, the probes and ``count`` random pairs; 2: ``count``
        pairs weighted to the edges.
    seed, count : int, default 1, None
        The random pairs' seed (the same seed, the same vectors) and number (at most ``MAX_COUNT``;
        None: the level's default).

    Returns
    -------
    tuple
        ``(A, B)``: uint32 arrays; ``B`` is None for ``from_u32``.

    Raises
    ------
    ValueError
        For an unknown op or level, or a count out of range.

    Examples
    --------
    >>> from meshnb.conformance.ops import generate
    >>> a, b = generate("mul", count=4)
    >>> [hex(w) for w in a[:2].tolist()], [hex(w) for w in b[:2].tolist()]  # the tininess probes first
    (['0x3f7fffff', '0x3f7ffffe'], ['0x800000', '0x800001'])
    """
    _check_op(op, ValueError)
    if level not in (1, 2):
        raise ValueError("level is 1 or 2")
    rng = _rng(seed * 8 + OPS.index(op) + 16 * level)
    n = count if count is not None else (LEVEL1_RANDOM if level == 1 else LEVEL2_COUNT)
    if type(n) is not int or not 0 <= n <= MAX_COUNT:
        raise ValueError(f"count {n!r}: from 0 to {MAX_COUNT} pairs (run several seeds for more)")
    if op == "from_u32":
        spec = np.array(SPECIAL_U32 + SPECIAL if level == 1 else (), dtype=np.uint32)
        near = (np.uint32(1) << rng.integers(24, 32, n).astype(np.uint32)) + rng.integers(-64, 64, n).astype(np.uint32)
        rand = rng.integers(0, 1 << 32, n, dtype=np.uint64).astype(np.uint32)
        pick = rng.integers(0, 2, n) == 1
        return np.concatenate([spec, np.where(pick, near, rand)]).astype(np.uint32), None
    if level == 1:
        s = np.array(SPECIAL, dtype=np.uint32)
        a0, b0 = np.repeat(s, len(s)), np.tile(s, len(s))
        pa, pb = (np.array(x, dtype=np.uint32) for x in zip(*PROBES))
        a1, b1 = _pairs_near_tiny(rng, op, n // 2)
        r = rng.integers(0, 1 << 32, (2, n - n // 2), dtype=np.uint64).astype(np.uint32)
        return np.concatenate([pa, a0, a1, r[0]]), np.concatenate([pb, b0, b1, r[1]])
    q = n // 4
    a1, b1 = _pairs_near_tiny(rng, op, q)
    a2, b2 = _edge_words(rng, q), _edge_words(rng, q)
    a3, b3 = _edge_words(rng, q), rng.integers(0, 1 << 32, q, dtype=np.uint64).astype(np.uint32)
    r = rng.integers(0, 1 << 32, (2, n - 3 * q), dtype=np.uint64).astype(np.uint32)
    return np.concatenate([a1, a2, a3, r[0]]), np.concatenate([b1, b2, b3, r[1]])


def expected(op: str, a: np.ndarray, b: np.ndarray | None = None) -> np.ndarray:
    """Mode Z results of ``op`` on word arrays (``b`` not for ``from_u32``)."""
    return apply_op(Ops(), op, a, b)


_HEX = np.array([ord(c) for c in "0123456789abcdef"], dtype=np.uint8)


def format_lines(*cols: np.ndarray) -> bytes:
    """Word columns of one length as lines of space-separated 8-digit lowercase hex (vectorised)."""
    n = len(cols[0])
    width = 9 * len(cols)
    out = np.empty((n, width), dtype=np.uint8)
    for c, col in enumerate(cols):
        w = np.asarray(col, dtype=np.uint32)
        for d in range(8):
            out[:, 9 * c + d] = _HEX[(w >> np.uint32(28 - 4 * d)) & np.uint32(0xF)]
        out[:, 9 * c + 8] = ord(" ")
    out[:, -1] = ord("\n")
    return out.tobytes()


def gen_lines(op: str, level: int = 1, seed: int = 1, count: int | None = None) -> bytes:
    """The text of ``meshnb ops gen`` (:func:`generate`'s arguments): one vector a line."""
    a, b = generate(op, level, seed, count)
    r = expected(op, a, b)
    return format_lines(a, r) if b is None else format_lines(a, b, r)


class BadInput(ValueError):
    """An executor's vector file that cannot be read (exit 2)."""


_HEXVAL = np.full(256, -1, dtype=np.int64)  # a byte's hex digit value, -1 for no digit
_HEXVAL[np.frombuffer(b"0123456789abcdefABCDEF", np.uint8)] = [*range(16), *range(10, 16)]


def _hex_tokens(tokens: list[bytes], first_line: list[int]) -> np.ndarray:
    """Tokens of 1 to 8 hex digits as uint32 (vectorised); BadInput naming the first bad one."""
    arr = np.array(tokens, dtype="S9")
    raw = arr.view(np.uint8).reshape(len(tokens), 9)
    length = (raw != 0).sum(axis=1)
    vals = _HEXVAL[raw]
    bad = (length > 8) | ((vals < 0) & (raw != 0)).any(axis=1)
    if bad.any():
        i = int(np.argmax(bad))
        raise BadInput(f"line {first_line[i]}: {tokens[i][:20].decode('ascii', 'replace')!r} is not a hex word")
    out = np.zeros(len(tokens), dtype=np.uint64)
    for d in range(8):
        present = d < length
        out = np.where(present, out * np.uint64(16) + np.maximum(vals[:, d], 0).astype(np.uint64), out)
    return out.astype(np.uint32)


def _parse_canonical(data: bytes, want: int) -> np.ndarray | None:
    """The words of a file in exactly ``ops gen``'s layout, at numpy speed; None when laid out otherwise."""
    width = 9 * want
    if not data or len(data) % width:
        return None
    raw = np.frombuffer(data, dtype=np.uint8).reshape(-1, width)
    seps = raw[:, 8::9]
    if (seps[:, :-1] != ord(" ")).any() or (seps[:, -1] != ord("\n")).any():
        return None
    digits = np.delete(raw, np.s_[8::9], axis=1).reshape(-1, want, 8)
    vals = _HEXVAL[digits]
    if (vals < 0).any():
        return None
    out = np.zeros(digits.shape[:2], dtype=np.uint32)
    for d in range(8):
        out = (out << np.uint32(4)) | vals[:, :, d].astype(np.uint32)
    return out


def parse(
    op: str, data: bytes, first_line: int = 1, allow_empty: bool = False
) -> tuple[np.ndarray, np.ndarray | None, np.ndarray]:
    """An executor's lines ``A B RESULT`` (``A RESULT`` for from_u32) as word arrays ``(A, B, RESULT)``;
    blank and ``#`` lines skipped, any other non-vector a :class:`BadInput` naming its line."""
    _check_op(op, BadInput)
    nul = data.find(b"\0")
    if nul >= 0:
        at = first_line + data.count(b"\n", 0, nul)
        raise BadInput(f"line {at}: a NUL byte, not a hex word")
    want = 2 if op == "from_u32" else 3
    arr = _parse_canonical(data, want)
    if arr is None:  # not in ``ops gen``'s exact layout: line by line
        tokens: list[bytes] = []
        where: list[int] = []
        for no, line in enumerate(data.splitlines(), first_line):
            parts = line.split()
            if not parts or parts[0].startswith(b"#"):
                continue
            if len(parts) != want:
                shown = line.strip()[:60].decode("ascii", "replace")
                raise BadInput(f"line {no}: expected {want} hex words, got {shown!r}")
            tokens.extend(parts)
            where.extend((no,) * want)
        if not tokens:
            if allow_empty:
                empty = np.zeros(0, np.uint32)
                return empty, (None if want == 2 else empty), empty
            raise BadInput("no vectors in the input")
        arr = _hex_tokens(tokens, where).reshape(-1, want)
    return (arr[:, 0], None, arr[:, 1]) if want == 2 else (arr[:, 0], arr[:, 1], arr[:, 2])


# Classes of a wrong result, in the order they are tried; a result may fit several.
CLASSES: tuple[tuple[str, str], ...] = (
    ("subnormal-not-flushed", "subnormal result not flushed"),
    ("ftz-before-rounding", "flushed by tininess before rounding"),
    ("ftz-after-rounding", "flushed by tininess after rounding with unbounded exponent (x86 FTZ)"),
    ("subnormal-input-not-flushed", "subnormal input not flushed (no DAZ)"),
    ("nan-not-canonical", "NaN not canonical"),
    ("zero-wrong-sign", "zero of the wrong sign"),
    ("rounding", "rounding (off by one ulp)"),
    ("other", "none of the above"),
)
CLASS_TEXT = dict(CLASSES)

_VARIANTS = {
    "subnormal-not-flushed": Rules(underflow="none"),
    "ftz-before-rounding": Rules(underflow="before"),
    "ftz-after-rounding": Rules(underflow="after"),
    "subnormal-input-not-flushed": Rules(daz=False),
}


def classify(op: str, a: np.ndarray, b: np.ndarray | None, got: np.ndarray, want: np.ndarray) -> list[list[str]]:
    """The classes (names of :data:`CLASSES`) of each wrong result (``["other"]`` where none fits)."""
    a, got, want = (np.asarray(x, dtype=np.uint32) for x in (a, got, want))
    match: dict[str, np.ndarray] = {}
    for name, rules in _VARIANTS.items():
        v = apply_op(Ops(rules), op, a, b)
        if name == "subnormal-not-flushed":
            match[name] = (v == got) & (got & EXP == 0) & (got & MANT != 0)
        else:
            match[name] = (v == got) & (v != want)
    match["nan-not-canonical"] = is_nan(got) & (want == CANONICAL_NAN)
    match["zero-wrong-sign"] = ((want & ~SIGN) == 0) & (got == (want ^ SIGN))
    finite = ((got & EXP) != EXP) & ((want & EXP) != EXP)
    match["rounding"] = finite & (ulps(got, want) == 1)
    out: list[list[str]] = []
    for i in range(len(got)):
        names = [n for n, _ in CLASSES[:-1] if match[n][i]]
        if "subnormal-not-flushed" in names and "rounding" in names:
            names.remove("rounding")
        out.append(names or ["other"])
    return out


@dataclass
class VerifyReport:
    """The outcome of ``ops verify``: the vectors checked and wrong, the first wrong ones, the classes'
    counts; where a set was demanded (``whole_set``), its size and how many of the file's first vectors are its."""

    op: str
    checked: int
    wrong: int
    first: list[dict[str, object]]
    classes: dict[str, int]
    whole_set: str | None = None
    set_size: int = 0
    set_matched: int = 0

    @property
    def complete(self) -> bool:
        """Whether the file holds the whole set demanded (True where none was)."""
        return self.whole_set is None or (self.set_matched == self.set_size == self.checked)

    @property
    def passed(self) -> bool:
        """No wrong result, and the whole set where one was demanded."""
        return self.wrong == 0 and self.complete

    def text(self) -> str:
        """The report as ``ops verify`` prints it: the verdict line, the classes, the first wrong lines."""
        verdict = "PASS" if self.passed else "FAIL"
        lines = [f"{verdict}: {self.op}: {self.checked} checked, {self.wrong} wrong"]
        if self.whole_set is not None:
            if self.complete:
                lines[0] += f"; the whole set of `{self.whole_set}` ({self.set_size} vectors)"
            else:
                lines[0] += (
                    f"; {self.set_matched} of the {self.set_size} vectors of `{self.whole_set}` in order, "
                    f"then {self._set_break()}"
                )
        for name, count in self.classes.items():
            lines.append(f"  {count:9d}  {name}: {CLASS_TEXT[name]}")
        if self.first:
            lines.append(f"first {len(self.first)} wrong:")
        for w in self.first:
            ops_text = " ".join(str(x) for x in w["operands"])  # type: ignore[attr-defined]
            lines.append(f"  {self.op}({ops_text}) = {w['got']}, expected {w['expected']}: {', '.join(w['classes'])}")  # type: ignore[arg-type]
        return "\n".join(lines)

    def _set_break(self) -> str:
        """Where the file leaves the demanded set."""
        if self.set_matched < min(self.checked, self.set_size):
            return f"line {self.set_matched + 1} is not the set's (other operands)"
        if self.checked < self.set_size:
            return f"the file ends: {self.set_size - self.checked} vectors missing"
        return f"{self.checked - self.set_size} vectors more than the set"

    def to_json(self) -> dict[str, object]:
        """The report as JSON-ready values (``ops verify --json``)."""
        doc: dict[str, object] = {k: getattr(self, k) for k in ("op", "checked", "wrong", "classes", "first")}
        if self.whole_set is not None:
            doc["whole_set"] = {"set": self.whole_set, "vectors": self.set_size, "matched": self.set_matched,
                                "complete": self.complete}  # fmt: skip
        return doc


def verify(op: str, data: bytes, show: int = 20) -> VerifyReport:
    """Checks an executor's vector lines against mode Z.

    Parameters
    ----------
    op, data : str, bytes
        The op's name; the executor's lines (:func:`parse`).
    show : int, default 20
        The wrong results to list.

    Returns
    -------
    VerifyReport
        The verdict, the classes of the wrong results, the first of them.

    Raises
    ------
    BadInput
        For a line that is not a vector, or no vector at all.

    Examples
    --------
    >>> print(verify("mul", b"3f7fffff 00800000 00000000\\n").text())
    FAIL: mul: 1 checked, 1 wrong
              1  ftz-before-rounding: flushed by tininess before rounding
              1  ftz-after-rounding: flushed by tininess after rounding with unbounded exponent (x86 FTZ)
    first 1 wrong:
      mul(3f7fffff 00800000) = 00000000, expected 00800000: ftz-before-rounding, ftz-after-rounding
    """
    return verify_chunks(op, [data], show)


CHUNK = 8 << 20  # bytes of lines verified at a time: memory stays a small multiple of it
MAX_LINE = 1 << 16  # a line longer than this is not a vector


def chunks_of(read: Callable[[int], bytes]) -> Iterator[bytes]:
    """Whole lines of a stream (``read(n)``), about :data:`CHUNK` bytes at a time (BadInput past :data:`MAX_LINE`)."""
    rest = b""
    while True:
        block = read(CHUNK)
        if not block:
            if rest:
                yield rest
            return
        data = rest + block
        cut = data.rfind(b"\n") + 1
        if len(data) - cut > MAX_LINE:  # the tail after the last newline (all of it when none)
            raise BadInput(f"a line longer than {MAX_LINE} bytes: not a vector file")
        rest = data[cut:]
        if cut:
            yield data[:cut]


def verify_chunks(
    op: str, chunks: Iterable[bytes], show: int = 20, whole: tuple[int, int, int | None] | None = None
) -> VerifyReport:
    """:func:`verify` over chunks of whole lines (:func:`chunks_of`), one in memory at a time; with
    ``whole=(level, seed, count)`` the file must also be that generated set, every vector in order."""
    set_a: np.ndarray | None = None
    set_b: np.ndarray | None = None
    set_name, matched, broken = None, 0, False
    if whole is not None:
        level, seed, count = whole
        set_a, set_b = generate(op, level, seed, count)
        set_name = f"gen {op} --level {level} --seed {seed}" + ("" if count is None else f" --count {count}")
    checked, wrong, line = 0, 0, 1
    first: list[dict[str, object]] = []
    tally: Counter[str] = Counter()
    for data in chunks:
        a, b, got = parse(op, data, line, allow_empty=True)
        line += data.count(b"\n")
        want = expected(op, a, b)
        bad = np.nonzero(got != want)[0]
        classes = classify(op, a[bad], None if b is None else b[bad], got[bad], want[bad])
        for names in classes:
            tally.update(names)
        for j, i in enumerate(bad[: max(0, show - len(first))]):
            operands = [f"{int(a[i]):08x}"] + ([] if b is None else [f"{int(b[i]):08x}"])
            shown = {"got": f"{int(got[i]):08x}", "expected": f"{int(want[i]):08x}", "classes": classes[j]}
            first.append({"line_index": checked + int(i), "operands": operands, **shown})
        if set_a is not None and not broken:
            lo = checked
            hi = min(len(set_a), lo + len(a))
            same = a[: hi - lo] == set_a[lo:hi]
            if b is not None and set_b is not None:
                same &= b[: hi - lo] == set_b[lo:hi]
            run = int(np.argmin(same)) if not same.all() else hi - lo
            matched += run
            broken = run < len(a)
        checked += len(got)
        wrong += len(bad)
    if checked == 0:
        raise BadInput("no vectors in the input")
    ordered = {n: tally[n] for n, _ in CLASSES if tally[n]}
    size = 0 if set_a is None else len(set_a)
    return VerifyReport(op, checked, wrong, first, ordered, set_name, size, matched)


# deprecated aliases (a check's Report is meshnb.conformance.check.Report)
_RENAMED = {"Report": "VerifyReport"}


def __getattr__(name: str) -> object:
    """The renamed names, deprecated (``Report`` is :class:`VerifyReport`)."""
    if name in _RENAMED:
        import warnings

        warnings.warn(f"{__name__}.{name} is {_RENAMED[name]} now", DeprecationWarning, stacklevel=2)
        return globals()[_RENAMED[name]]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
