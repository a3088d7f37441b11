"""Independent reference implementation of SPEC.md (stdlib + numpy only, no numba, nothing of ``meshnb``).

The tests' oracle and the benchmarks' baselines: ``impl="numpy"`` (vectorised over lanes and
systems) or ``impl="python"`` (plain Python on uint32 words, mode Z only), in ``MODE_Z`` or
``MODE_IEEE``.  Its face is a run and its pieces; the float ops they are built from (``z_*``,
``py_*``, ``flush``, ``from_bits``, ``to_bits``) are importable from here.
"""

from __future__ import annotations

import hashlib
import math
import struct
from collections.abc import Callable

import numpy as np

__all__ = [
    "BATCHES",
    "CANONICAL_NAN",
    "EX_SLOT_WORDS",
    "LR_BITS",
    "MODE_IEEE",
    "MODE_Z",
    "SAMPLES",
    "STEPS_PER_TASK",
    "VIEW_BYTES",
    "WARP",
    "digest",
    "init_page",
    "run",
    "samples",
    "step_sums",
    "trace_digest",
]

MODE_Z = "z"
MODE_IEEE = "ieee"
IMPLS = ("numpy", "python")
MODES = (MODE_Z, MODE_IEEE)

# --- constants (SPEC section 3) -------------------------------------------------------------
SAMPLES = 256
WARP = 32
BATCHES = SAMPLES // WARP
LR_BITS = 0x3F000000  # 0.5f
STEPS_PER_TASK = 64
VIEW_BYTES = 4096
EX_SLOT_WORDS = 8

CANONICAL_NAN = 0x7FFFFFFF
_EXP = 0x7F800000
_MANT = 0x007FFFFF
_SIGN = 0x80000000
_U64 = 1 << 64
_WRAP_STEP = _U64 - 1  # step 2^64 - 1 can never run (its round would wrap to 0); the last that may is 2^64 - 2

# --- view layout (SPEC section 7), byte offsets ---------------------------------------------
OFF_PARAMS = 0
OFF_LR = 16
OFF_STEPS_PER_TASK = 20
OFF_INV_BATCH = 24
OFF_NEXT_STEP = 28
OFF_ERR = 32
OFF_PENDING = 36
OFF_ROUND = 40
OFF_STEP_HI = 44
OFF_X = 64
OFF_Y = 1088
OFF_LOSS = 2112
_LOSS_END = OFF_LOSS + 4 * 256


# --- Float mode Z, vectorised numpy ---------------------------------------------------------------


def _f32(a) -> np.ndarray:
    """``a`` as a float32 ndarray (no copy when it is one; scalars give 0-d arrays)."""
    return np.asarray(a, dtype=np.float32)


def _flush_sub_u(u: np.ndarray) -> np.ndarray:
    """uint32 words: subnormal -> zero of the same sign."""
    return np.where((u & np.uint32(_EXP)) == 0, u & np.uint32(_SIGN), u)


def _flush_u(u: np.ndarray) -> np.ndarray:
    """uint32 words: subnormal -> signed zero, any NaN -> 0x7FFFFFFF."""
    out = _flush_sub_u(u)
    out[np.isnan(u.view(np.float32))] = CANONICAL_NAN
    return out


def flush(a) -> np.ndarray:
    """Mode Z output rule on float32 values: subnormal -> same-sign zero, NaN -> canonical NaN."""
    return _flush_u(_f32(a).view(np.uint32)).view(np.float32)


def _flush_in(a) -> np.ndarray:
    """Mode Z input rule: subnormal -> same-sign zero (NaNs are left as they are)."""
    return _flush_sub_u(_f32(a).view(np.uint32)).view(np.float32)


def _z_binary(op: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> Callable[..., np.ndarray]:
    """The mode Z form of a float32 ufunc; callers silence numpy's float warnings."""

    def f(a, b) -> np.ndarray:
        return flush(op(_flush_in(a), _flush_in(b)))

    return f


def _quiet(f: Callable[..., np.ndarray], name: str) -> Callable[..., np.ndarray]:
    """``f`` under ``np.errstate(all="ignore")``, with the docstring of mode Z's ``name``."""

    def g(a, b) -> np.ndarray:
        with np.errstate(all="ignore"):
            return f(a, b)

    g.__doc__ = f"Mode Z {name} on float32 values (vectorised): flush the inputs, IEEE float32 {name}, flush."
    return g


_z_add, _z_sub = _z_binary(np.add), _z_binary(np.subtract)
_z_mul, _z_div = _z_binary(np.multiply), _z_binary(np.divide)
z_add = _quiet(_z_add, "addition")
z_sub = _quiet(_z_sub, "subtraction")
z_mul = _quiet(_z_mul, "multiplication")
z_div = _quiet(_z_div, "division")


def _u32_to_f32(u) -> np.ndarray:
    """uint32 -> float32, round to nearest even (exact in f64, then one rounding to f32)."""
    return np.asarray(u, dtype=np.uint32).astype(np.float64).astype(np.float32)


def z_from_u32(u) -> np.ndarray:
    """Mode Z conversion u32 -> f32 (round to nearest even, then flush)."""
    return flush(_u32_to_f32(u))


def from_bits(words) -> np.ndarray:
    """``ftz_from_bits``: uint32 words read as float32 through the flush/NaN rule."""
    return _flush_u(np.array(words, dtype=np.uint32, copy=True)).view(np.float32)


def to_bits(floats) -> np.ndarray:
    """``ftz_bits``: the uint32 words of the flushed float32 values."""
    return _flush_u(_f32(floats).view(np.uint32))


class _NpOps:
    """The f32 operations of one float mode, vectorised (callers silence numpy's float warnings)."""

    def __init__(self, mode: str) -> None:
        if mode == MODE_Z:
            self.add, self.sub, self.mul, self.div = _z_add, _z_sub, _z_mul, _z_div
            self.from_bits, self.to_bits = from_bits, to_bits
        elif mode == MODE_IEEE:
            self.add, self.sub, self.mul, self.div = np.add, np.subtract, np.multiply, np.divide
            self.from_bits = lambda w: np.array(w, dtype=np.uint32, copy=True).view(np.float32)
            self.to_bits = lambda f: np.array(f, dtype=np.float32, copy=True).view(np.uint32)
        else:
            raise ValueError(f"unknown mode {mode!r}")


# --- Float mode Z, plain Python scalars on bit words ----------------------------------------------

_S_U32 = struct.Struct("<I")
_S_F32 = struct.Struct("<f")


def py_flush(u: int) -> int:
    """Mode Z output rule on one word: subnormal -> signed zero, NaN -> 0x7FFFFFFF."""
    if u & _EXP == 0:
        return u & _SIGN
    if u & _EXP == _EXP and u & _MANT:
        return CANONICAL_NAN
    return u


def _py_in(u: int) -> float:
    """One word read as an operand in mode Z (subnormal -> signed zero), as a Python float."""
    if u & _EXP == 0:
        u &= _SIGN
    return _S_F32.unpack(_S_U32.pack(u))[0]


def _py_out(r: float) -> int:
    """A Python (f64) result rounded once to f32 (nearest even) and flushed: its word.

    f64 has more than 2 * 24 + 2 bits, so rounding an f32 op's f64 result again to f32 is correct.
    """
    if r != r:
        return CANONICAL_NAN
    try:
        u = _S_U32.unpack(_S_F32.pack(r))[0]
    except OverflowError:  # finite f64 rounding beyond the f32 range: infinity
        u = 0xFF800000 if r < 0 else 0x7F800000
    return py_flush(u)


def py_add(a_bits: int, b_bits: int) -> int:
    """Mode Z add on words (see :func:`_py_out`)."""
    return _py_out(_py_in(a_bits) + _py_in(b_bits))


def py_sub(a_bits: int, b_bits: int) -> int:
    """Mode Z subtract on words (see :func:`_py_out`)."""
    return _py_out(_py_in(a_bits) - _py_in(b_bits))


def py_mul(a_bits: int, b_bits: int) -> int:
    """Mode Z multiply on words (see :func:`_py_out`)."""
    return _py_out(_py_in(a_bits) * _py_in(b_bits))


def py_div(a_bits: int, b_bits: int) -> int:
    """Mode Z divide on words (IEEE division by zero: NaN or a signed infinity)."""
    a, b = _py_in(a_bits), _py_in(b_bits)
    if b == 0.0:
        if a != a or a == 0.0:
            return CANONICAL_NAN
        neg = (math.copysign(1.0, a) < 0) != (math.copysign(1.0, b) < 0)
        return 0xFF800000 if neg else 0x7F800000
    return _py_out(a / b)


def py_from_u32(u: int) -> int:
    """Mode Z u32 -> f32 conversion on words."""
    return _py_out(float(u & 0xFFFFFFFF))


# --- Samples (SPEC section 4) ---------------------------------------------------------------------


def _sin_pi(x: float) -> float:
    """sin(pi x) in f64 on the exactly reduced argument, sign from x (sin_pi(+-1) = +-0)."""
    ax = abs(x)
    r = 1.0 - ax if ax > 0.5 else ax
    return math.copysign(math.sin(math.pi * r), x)


def samples(impl: str = "numpy") -> tuple[np.ndarray, np.ndarray]:
    """The 256 samples X, Y as uint32 words (SPEC section 4).

    Parameters
    ----------
    impl : {"numpy", "python"}

    Returns
    -------
    xs, ys : numpy.ndarray

    Examples
    --------
    >>> xs, ys = samples()
    >>> hex(xs[128]), hex(ys[64])
    ('0x3b808100', '0xbf7ffec2')
    """
    if impl == "numpy":
        h = z_div(np.float32(2.0), z_from_u32(255))
        x = z_add(np.float32(-1.0), z_mul(z_from_u32(np.arange(SAMPLES, dtype=np.uint32)), h))
        y = np.array([_sin_pi(float(v)) for v in x], dtype=np.float64).astype(np.float32)
        return to_bits(x), to_bits(y)
    if impl == "python":
        h = py_div(0x40000000, py_from_u32(255))
        xw = [py_add(0xBF800000, py_mul(py_from_u32(i), h)) for i in range(SAMPLES)]
        yw = [_py_out(_sin_pi(_py_in(w))) for w in xw]
        return np.array(xw, dtype=np.uint32), np.array(yw, dtype=np.uint32)
    raise ValueError(f"unknown impl {impl!r}")


# --- The page (SPEC sections 7 and 8) -------------------------------------------------------------


def _u32_at(page: bytes, off: int) -> int:
    return _S_U32.unpack_from(page, off)[0]


def _words_at(page: bytes, off: int, n: int) -> np.ndarray:
    return np.frombuffer(page, dtype="<u4", count=n, offset=off).astype(np.uint32)


def init_page(systems: int = 1, grouped: bool = False) -> bytes:
    """The 4096-byte view after ``init`` (INV_BATCH uses N = systems if grouped else 1).

    Parameters
    ----------
    systems : int
    grouped : bool

    Returns
    -------
    bytes

    Examples
    --------
    >>> page = init_page(2, grouped=True)
    >>> len(page), page[24:28].hex()  # INV_BATCH = 1/64, little-endian
    (4096, '0000803c')
    """
    n = systems if grouped else 1
    if not 1 <= n <= 0xFFFFFFFF // WARP:
        raise ValueError(f"bad number of systems {systems}")
    page = bytearray(VIEW_BYTES)
    xw, yw = samples("numpy")
    page[OFF_X : OFF_X + 4 * SAMPLES] = xw.astype("<u4").tobytes()
    page[OFF_Y : OFF_Y + 4 * SAMPLES] = yw.astype("<u4").tobytes()
    inv = to_bits(z_div(np.float32(1.0), z_from_u32(WARP * n)))
    struct.pack_into("<IIII", page, OFF_LR, LR_BITS, STEPS_PER_TASK, int(inv), 0)
    return bytes(page)


# --- One step's sums (SPEC section 5) -------------------------------------------------------------

_LANES = np.arange(WARP)
_BUTTERFLY = (16, 8, 4, 2, 1)


def _np_sums(ops: _NpOps, p: np.ndarray, xs: np.ndarray, ys: np.ndarray) -> np.ndarray:
    """Sums of S systems at once: p (S, 4), xs and ys (S, 32) the lanes' samples -> (S, 5)."""
    a, b, c, d = (p[:, j : j + 1] for j in range(4))
    x, y = xs, ys
    x2 = ops.mul(x, x)
    x3 = ops.mul(x2, x)
    pred = ops.add(ops.mul(ops.add(ops.mul(ops.add(ops.mul(d, x), c), x), b), x), a)
    e = ops.sub(pred, y)
    v = np.stack([e, ops.mul(e, x), ops.mul(e, x2), ops.mul(e, x3), ops.mul(e, e)], axis=1)
    for o in _BUTTERFLY:  # every lane l: v[l] = add(v[l], v[l xor o]), previous round's values
        v = ops.add(v, v[..., _LANES ^ o])
    return v[..., 0]


def _lane_samples(off: np.ndarray) -> np.ndarray:
    """Sample indices (S, 32) of the batch offsets (S,): i = (off mod 8) + 8 l."""
    return (off % BATCHES)[:, None].astype(np.int64) + BATCHES * _LANES[None, :]


def _py_sums(p: list[int], xs: list[int], ys: list[int], off: int) -> list[int]:
    """One system's sums in plain Python, all words."""
    g = off % BATCHES
    a, b, c, d = p
    v: list[list[int]] = []
    for lane in range(WARP):
        i = g + BATCHES * lane
        x, y = xs[i], ys[i]
        x2 = py_mul(x, x)
        x3 = py_mul(x2, x)
        pred = py_add(py_mul(py_add(py_mul(py_add(py_mul(d, x), c), x), b), x), a)
        e = py_sub(pred, y)
        v.append([e, py_mul(e, x), py_mul(e, x2), py_mul(e, x3), py_mul(e, e)])
    for o in _BUTTERFLY:
        v = [[py_add(v[lane][j], v[lane ^ o][j]) for j in range(5)] for lane in range(WARP)]
    return v[0]


def _check(impl: str, mode: str) -> None:
    if impl not in IMPLS:
        raise ValueError(f"unknown impl {impl!r}")
    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r}")
    if impl == "python" and mode != MODE_Z:
        raise NotImplementedError("the plain Python implementation has mode Z only")


def step_sums(params_f32, xs_f32, ys_f32, off: int, impl: str = "numpy", mode: str = MODE_Z) -> np.ndarray:
    """``step_sums(p, xs, ys, off)`` of SPEC section 5: 5 float32 (p as given, X/Y all 256).

    Parameters
    ----------
    params_f32, xs_f32, ys_f32 : array_like
        The 4 params and the 256 samples X and Y, float32.
    off : int
        The batch offset (the step; taken mod 2^32).
    impl : {"numpy", "python"}
    mode : {"z", "ieee"}
        The float mode (``"python"`` has ``"z"`` only).

    Returns
    -------
    numpy.ndarray
        The 5 sums, float32.

    Examples
    --------
    >>> import numpy as np
    >>> from meshnb.testing import vectors
    >>> xs, ys = samples()
    >>> sums = step_sums(np.zeros(4, dtype=np.float32), xs.view(np.float32), ys.view(np.float32), 0)
    >>> [f"{w:08x}" for w in sums.view(np.uint32).tolist()] == vectors()["one_system_steps_0_to_7"]["sums"][0]
    True
    """
    _check(impl, mode)
    p = _f32(params_f32).reshape(4)
    xs = _f32(xs_f32).reshape(SAMPLES)
    ys = _f32(ys_f32).reshape(SAMPLES)
    off = int(off) & 0xFFFFFFFF
    if impl == "numpy":
        idx = _lane_samples(np.array([off], dtype=np.uint64))
        with np.errstate(all="ignore"):
            return _np_sums(_NpOps(mode), p[None, :], xs[idx], ys[idx])[0]
    words = _py_sums(
        [int(w) for w in p.view(np.uint32)],
        [int(w) for w in xs.view(np.uint32)],
        [int(w) for w in ys.view(np.uint32)],
        off,
    )
    return np.array(words, dtype=np.uint32).view(np.float32)


# --- The host's run (SPEC sections 6, 8, 9, 10) ---------------------------------------------------


def _validate_run(pages: list[bytes], steps: int, grouped: bool, lr_changes: dict[int, int]) -> int:
    """Checks the arguments of ``run``; returns the common first step."""
    if not pages:
        raise ValueError("no pages")
    if not grouped and len(pages) != 1:
        raise ValueError("without a group there is exactly one system")
    for page in pages:
        if len(page) != VIEW_BYTES:
            raise ValueError(f"a page is {VIEW_BYTES} bytes, not {len(page)}")
    if steps < 0:
        raise ValueError("negative step count")
    bases = {_u32_at(pg, OFF_STEP_HI) << 32 | _u32_at(pg, OFF_NEXT_STEP) for pg in pages}
    if len(bases) != 1:
        raise ValueError("the members of a cluster are not at the same step")
    base = bases.pop()
    if base >= _WRAP_STEP or base + steps > _WRAP_STEP:
        raise ValueError(f"steps {base} + {steps} reach step 2^64 - 1")
    for s, word in lr_changes.items():
        if not 0 <= s <= steps:
            raise ValueError(f"LR change after {s} steps is outside the run of {steps} steps")
        if not 0 <= word <= 0xFFFFFFFF:
            raise ValueError(f"LR word {word:#x} is not a u32")
    return base


def run(
    pages: list[bytes],
    steps: int,
    *,
    grouped: bool,
    lr_changes: dict[int, int] | None = None,
    impl: str = "numpy",
    mode: str = MODE_Z,
) -> tuple[list[bytes], np.ndarray]:
    """Runs ``steps`` steps of the cluster of ``len(pages)`` systems as the host would, without timeouts
    (a pending round's own sums depend only on PARAMS, X and Y: recomputed, they are the published bits).

    Parameters
    ----------
    pages : list of bytes
        The systems' 4096-byte views, at one step.
    steps : int
    grouped : bool
        Whether the systems form a group (False: exactly one system).
    lr_changes : dict of int to int, optional
        Steps done in this run -> the LR word SET_LR writes before that step.
    impl : {"numpy", "python"}
    mode : {"z", "ieee"}
        The float mode (``"python"`` has ``"z"`` only).

    Returns
    -------
    pages : list of bytes
    trace : numpy.ndarray
        The words of the sums each step applied, uint32, (steps, 5).

    Raises
    ------
    ValueError
        For pages of the wrong size or at different steps, a bad ``impl`` or ``mode``.

    Examples
    --------
    >>> from meshnb.testing.reference import digest, init_page, run
    >>> pages, trace = run([init_page()], 64, grouped=False)
    >>> digest(pages[0])[:16], trace.shape
    ('a52f01100995ff64', (64, 5))
    """
    _check(impl, mode)
    lr_changes = dict(lr_changes or {})
    base = _validate_run(pages, steps, grouped, lr_changes)
    if impl == "numpy":
        with np.errstate(all="ignore"):
            out, trace = _run_numpy(pages, steps, base, grouped, lr_changes, mode)
    else:
        out, trace = _run_python(pages, steps, base, grouped, lr_changes)
    if steps > 0:
        for page in out:
            struct.pack_into("<II", page, OFF_ERR, 0, 0)  # ERR, PENDING (ROUND is kept)
            struct.pack_into("<I", page, OFF_NEXT_STEP, (base + steps) & 0xFFFFFFFF)
            struct.pack_into("<I", page, OFF_STEP_HI, (base + steps) >> 32)
    return [bytes(page) for page in out], trace


def _run_numpy(
    pages: list[bytes], steps: int, base: int, grouped: bool, lr_changes: dict[int, int], mode: str
) -> tuple[list[bytearray], np.ndarray]:
    """``run`` vectorised over lanes and systems."""
    ops = _NpOps(mode)
    n = len(pages)
    p = np.stack([ops.from_bits(_words_at(pg, OFF_PARAMS, 4)) for pg in pages])  # (N, 4)
    lr = np.stack([ops.from_bits(_words_at(pg, OFF_LR, 1)) for pg in pages])  # (N, 1)
    inv = np.stack([ops.from_bits(_words_at(pg, OFF_INV_BATCH, 1)) for pg in pages])  # (N, 1)
    xs = np.stack([_words_at(pg, OFF_X, SAMPLES) for pg in pages]).view(np.float32)
    ys = np.stack([_words_at(pg, OFF_Y, SAMPLES) for pg in pages]).view(np.float32)
    loss = np.stack([_words_at(pg, OFF_LOSS, 256) for pg in pages])  # (N, 256)
    lr_word: list[int | None] = [None] * n
    rows = np.arange(n)[:, None]
    trace = np.zeros((steps, 5), dtype=np.uint32)
    for s in range(steps):
        if s in lr_changes:
            lr[:] = ops.from_bits(np.uint32(lr_changes[s]))
            lr_word = [int(ops.to_bits(lr[0, 0]))] * n
        t = base + s
        off = np.array([(t * n + k) & 0xFFFFFFFF for k in range(n)], dtype=np.uint64)
        idx = _lane_samples(off)
        own = _np_sums(ops, p, xs[rows, idx], ys[rows, idx])  # (N, 5)
        if grouped:
            slots = ops.to_bits(own)  # (N, 5) words
            fold = ops.from_bits(slots[0])
            for m in range(1, n):
                fold = ops.add(fold, ops.from_bits(slots[m]))
            applied = np.broadcast_to(fold, (n, 5))
        else:
            applied = own
        p = ops.sub(p, ops.mul(lr, ops.mul(applied[:, :4], inv)))
        loss[:, t % 256] = ops.to_bits(ops.mul(applied[:, 4:5], inv))[:, 0]
        trace[s] = ops.to_bits(applied[0])
    if steps in lr_changes:
        lr_word = [int(ops.to_bits(ops.from_bits(np.uint32(lr_changes[steps]))))] * n
    out = []
    for k, pg in enumerate(pages):
        page = bytearray(pg)
        if steps > 0:
            page[OFF_PARAMS : OFF_PARAMS + 16] = ops.to_bits(p[k]).astype("<u4").tobytes()
            page[OFF_LOSS:_LOSS_END] = loss[k].astype("<u4").tobytes()
        if lr_word[k] is not None:
            struct.pack_into("<I", page, OFF_LR, lr_word[k])
        out.append(page)
    return out, trace


def _run_python(
    pages: list[bytes], steps: int, base: int, grouped: bool, lr_changes: dict[int, int]
) -> tuple[list[bytearray], np.ndarray]:
    """``run`` in plain Python, one system after the other each step, words throughout."""
    n = len(pages)
    words = [list(struct.unpack_from("<12I", pg, 0)) for pg in pages]
    p = [[py_flush(w) for w in hdr[0:4]] for hdr in words]
    lr = [py_flush(hdr[4]) for hdr in words]
    inv = [py_flush(hdr[6]) for hdr in words]
    xs = [list(struct.unpack_from(f"<{SAMPLES}I", pg, OFF_X)) for pg in pages]
    ys = [list(struct.unpack_from(f"<{SAMPLES}I", pg, OFF_Y)) for pg in pages]
    loss = [list(struct.unpack_from("<256I", pg, OFF_LOSS)) for pg in pages]
    lr_set = False
    trace: list[list[int]] = []
    for s in range(steps):
        if s in lr_changes:
            lr = [py_flush(lr_changes[s])] * n
            lr_set = True
        t = base + s
        own = [_py_sums(p[k], xs[k], ys[k], (t * n + k) & 0xFFFFFFFF) for k in range(n)]
        if grouped:
            fold = [py_flush(w) for w in own[0]]  # slot words are ftz_bits, read by ftz_from_bits
            for m in range(1, n):
                fold = [py_add(fold[j], py_flush(own[m][j])) for j in range(5)]
            applied = [fold] * n
        else:
            applied = own
        for k in range(n):
            sk = applied[k]
            p[k] = [py_sub(p[k][j], py_mul(lr[k], py_mul(sk[j], inv[k]))) for j in range(4)]
            loss[k][t % 256] = py_mul(sk[4], inv[k])
        trace.append(applied[0])
    if steps in lr_changes:
        lr = [py_flush(lr_changes[steps])] * n
        lr_set = True
    out = []
    for k, pg in enumerate(pages):
        page = bytearray(pg)
        if steps > 0:
            struct.pack_into("<4I", page, OFF_PARAMS, *p[k])
            struct.pack_into("<256I", page, OFF_LOSS, *loss[k])
        if lr_set:
            struct.pack_into("<I", page, OFF_LR, lr[k])
        out.append(page)
    return out, np.array(trace, dtype=np.uint32).reshape(steps, 5)


# --- Digests (SPEC section 11) --------------------------------------------------------------------


def digest(page: bytes) -> str:
    """SHA-256 hex of PARAMS (bytes 0..15) followed by LOSS (bytes 2112..3135).

    Parameters
    ----------
    page : bytes

    Returns
    -------
    str

    Examples
    --------
    >>> digest(bytes(4096))[:16]
    '256fb9c4796b15a7'
    """
    return hashlib.sha256(bytes(page[0:16]) + bytes(page[OFF_LOSS:_LOSS_END])).hexdigest()


def trace_digest(trace: np.ndarray) -> str:
    """SHA-256 hex of the trace's u32 words, little-endian, row by row.

    Parameters
    ----------
    trace : numpy.ndarray

    Returns
    -------
    str

    Examples
    --------
    >>> trace_digest(run([init_page()], 64, grouped=False)[1])[:16]
    'fc7a7cc279255550'
    """
    words = np.ascontiguousarray(np.asarray(trace, dtype=np.uint32).reshape(-1, 5), dtype="<u4")
    return hashlib.sha256(words.tobytes()).hexdigest()
