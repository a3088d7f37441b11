"""SHA-256 (FIPS 180-4) in njit: a hash whose state a checkpoint saves, and many short messages at once.

:class:`Sha256`'s state (hashlib's cannot be saved) goes into a checkpoint.  :data:`compress` is
``"sha-ni"`` where the CPU has the x86 SHA extensions, else ``"scalar"`` (``MESHNB_SHA256=scalar`` or
``sha-ni`` forces one: a ValueError where the CPU lacks it); :func:`compress_lanes` hashes
:data:`LANES` messages at once, one per vector lane.  Why this stays beside hashlib:
docs/performance.md, "Hand-written, measured against the library".
"""

from __future__ import annotations

import operator
import os
import struct
from dataclasses import dataclass
from typing import Any

import numpy as np
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.core.errors import TypingError
from numba.extending import intrinsic, models, overload, register_model

from . import cpu
from .jit import jit

# fmt: off
_K_WORDS = (
    0x428A2F98, 0x71374491, 0xB5C0FBCF, 0xE9B5DBA5, 0x3956C25B, 0x59F111F1, 0x923F82A4, 0xAB1C5ED5,
    0xD807AA98, 0x12835B01, 0x243185BE, 0x550C7DC3, 0x72BE5D74, 0x80DEB1FE, 0x9BDC06A7, 0xC19BF174,
    0xE49B69C1, 0xEFBE4786, 0x0FC19DC6, 0x240CA1CC, 0x2DE92C6F, 0x4A7484AA, 0x5CB0A9DC, 0x76F988DA,
    0x983E5152, 0xA831C66D, 0xB00327C8, 0xBF597FC7, 0xC6E00BF3, 0xD5A79147, 0x06CA6351, 0x14292967,
    0x27B70A85, 0x2E1B2138, 0x4D2C6DFC, 0x53380D13, 0x650A7354, 0x766A0ABB, 0x81C2C92E, 0x92722C85,
    0xA2BFE8A1, 0xA81A664B, 0xC24B8B70, 0xC76C51A3, 0xD192E819, 0xD6990624, 0xF40E3585, 0x106AA070,
    0x19A4C116, 0x1E376C08, 0x2748774C, 0x34B0BCB5, 0x391C0CB3, 0x4ED8AA4A, 0x5B9CCA4F, 0x682E6FF3,
    0x748F82EE, 0x78A5636F, 0x84C87814, 0x8CC70208, 0x90BEFFFA, 0xA4506CEB, 0xBEF9A3F7, 0xC67178F2,
)
# fmt: on
_K = np.array(_K_WORDS, dtype=np.uint64)  # scalar kernel: words in uint64 (no widening per use)
_K32 = np.array(_K_WORDS, dtype=np.uint32)  # SHA-NI and lanes kernels
_H0 = (0x6A09E667, 0xBB67AE85, 0x3C6EF372, 0xA54FF53A, 0x510E527F, 0x9B05688C, 0x1F83D9AB, 0x5BE0CD19)
_H0_WORDS = np.array(_H0, dtype=np.uint32)
_M32 = np.uint64(0xFFFFFFFF)  # a uint64: numba types uint64 & int64 (or +) as int64 or float64

HAS_SHA_NI: bool = cpu.HAS_SHA_NI
"""Whether the host CPU has the x86 SHA extensions (``meshnb.cpu.HAS_SHA_NI``, the one place that
decides it)."""

LANES: int = 16 if cpu.target_shape().floats >= 16 else 8
"""Messages :func:`compress_lanes` hashes at once, one per 32-bit lane of a vector: 16 where the
target has 512-bit vectors, else 8 (as the sweep loop's groups: :func:`meshnb.loops.sweep.shape`)."""

_I8, _I32, _I64 = ir.IntType(8), ir.IntType(32), ir.IntType(64)
_V4, _VL = ir.VectorType(_I32, 4), ir.VectorType(_I32, LANES)


class U32x4(types.Type):
    """The numba type of an LLVM ``<4 x i32>``: four SHA-256 words in an xmm register."""

    def __init__(self) -> None:
        super().__init__(name="u32x4")


class U32Lanes(types.Type):
    """The numba type of an LLVM ``<LANES x i32>``: one SHA-256 word of each of LANES messages."""

    def __init__(self) -> None:
        super().__init__(name=f"u32x{LANES}")


u32x4, u32lanes = U32x4(), U32Lanes()


@register_model(U32x4)
class _U32x4Model(models.PrimitiveModel):
    def __init__(self, dmm, fe_type):
        super().__init__(dmm, fe_type, _V4)


@register_model(U32Lanes)
class _U32LanesModel(models.PrimitiveModel):
    def __init__(self, dmm, fe_type):
        super().__init__(dmm, fe_type, _VL)


def _is_c_array(arr: Any, dtype: Any) -> bool:
    return isinstance(arr, types.Array) and arr.dtype == dtype and arr.layout == "C" and arr.ndim == 1


def _lanes_of(n: int) -> ir.Constant:
    return ir.Constant(_VL, [n] * LANES)


def _call(builder: ir.IRBuilder, name: str, ret: ir.Type, args: list[ir.Value]) -> ir.Value:
    fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(ret, [a.type for a in args]), name)
    return builder.call(fn, args)


# --- One round and one schedule, for a word in a uint64 (scalar) or a vector of words (lanes)


@intrinsic
def _rotr(typingctx, x, r):
    """The 32-bit rotation right by a literal ``r`` of a word in a uint64, or of each lane: one funnel shift."""
    if not (x in (types.uint64, u32lanes) and isinstance(r, types.IntegerLiteral)):
        return None
    n = r.literal_value

    def codegen(context, builder, sig, args):
        if sig.args[0] == u32lanes:
            return _call(builder, f"llvm.fshr.v{LANES}i32", _VL, [args[0], args[0], _lanes_of(n)])
        w = builder.trunc(args[0], _I32)
        return builder.zext(_call(builder, "llvm.fshr.i32", _I32, [w, w, ir.Constant(_I32, n)]), _I64)

    return x(x, r), codegen


@intrinsic
def _shr(typingctx, x, r):
    """``x`` (a uint64, or each lane) shifted right by a literal ``r``, zeros in."""
    if not (x in (types.uint64, u32lanes) and isinstance(r, types.IntegerLiteral)):
        return None
    n = r.literal_value

    def codegen(context, builder, sig, args):
        return builder.lshr(args[0], _lanes_of(n) if sig.args[0] == u32lanes else ir.Constant(_I64, n))

    return x(x, r), codegen


@intrinsic
def _wrap(typingctx, x):
    """A sum mod 2^32: a uint64's low word (vector lanes wrap by themselves)."""
    if x not in (types.uint64, u32lanes):
        return None

    def codegen(context, builder, sig, args):
        return args[0] if sig.args[0] == u32lanes else builder.and_(args[0], ir.Constant(_I64, 0xFFFFFFFF))

    return x(x), codegen


@jit()
def _sched(w16: Any, w15: Any, w7: Any, w2: Any) -> Any:
    """W[t] from W[t-16], W[t-15], W[t-7], W[t-2]."""
    s0 = _rotr(w15, 7) ^ _rotr(w15, 18) ^ _shr(w15, 3)
    s1 = _rotr(w2, 17) ^ _rotr(w2, 19) ^ _shr(w2, 10)
    return _wrap(w16 + s0 + w7 + s1)


@jit()
def _round(s: Any, wk: Any) -> Any:
    """One round on the working variables ``s`` = (a, ..., h), ``wk`` = W[t] + K[t] (unmasked: the
    sums of words in uint64 stay far below 2^64, so one mask per result)."""
    a, b, c, d, e, f, g, h = s
    t1 = h + (_rotr(e, 6) ^ _rotr(e, 11) ^ _rotr(e, 25)) + (g ^ (e & (f ^ g))) + wk
    t2 = (_rotr(a, 2) ^ _rotr(a, 13) ^ _rotr(a, 22)) + ((a & b) | (c & (a | b)))
    return (_wrap(t1 + t2), a, b, c, _wrap(d + t1), e, f, g)


@jit()
def _add8(s: Any, x: Any) -> Any:
    """The chaining value ``s`` plus a block's working variables ``x``, word by word."""
    return (
        _wrap(s[0] + x[0]), _wrap(s[1] + x[1]), _wrap(s[2] + x[2]), _wrap(s[3] + x[3]),
        _wrap(s[4] + x[4]), _wrap(s[5] + x[5]), _wrap(s[6] + x[6]), _wrap(s[7] + x[7]),
    )  # fmt: skip


@intrinsic
def _be32(typingctx, data, j):
    """The big-endian word at ``data[j : j + 4]`` of a uint8 array (unchecked), zero-extended."""
    if not (_is_c_array(data, types.uint8) and isinstance(j, types.Integer)):
        return None  # the address is data + j: contiguous bytes only

    def codegen(context, builder, sig, args):
        ary = context.make_array(sig.args[0])(context, builder, args[0])
        ptr = builder.bitcast(builder.gep(ary.data, [args[1]]), _I32.as_pointer())
        return builder.zext(_call(builder, "llvm.bswap.i32", _I32, [builder.load(ptr, align=1)]), _I64)

    return types.uint64(data, j), codegen


@jit(accepts=dict(h="uint32[::1]", data="uint8[::1]"), nogil=True)
def compress_scalar(h: np.ndarray, data: np.ndarray) -> None:
    """Fold the whole 64-byte blocks of ``data`` (uint8) into ``h`` (uint32[8]), portable code."""
    w = np.empty(64, dtype=np.uint64)
    s = (
        np.uint64(h[0]), np.uint64(h[1]), np.uint64(h[2]), np.uint64(h[3]),
        np.uint64(h[4]), np.uint64(h[5]), np.uint64(h[6]), np.uint64(h[7]),
    )  # fmt: skip
    for o in range(0, data.shape[0] - 63, 64):
        for t in range(16):
            w[t] = _be32(data, o + 4 * t)
        x = s
        for t in range(0, 64, 2):  # two rounds a step: as fast as the 64 written out
            if t < 48:  # W[t+16], W[t+17] while rounds t, t+1 run: independent work for the core
                w[t + 16] = _sched(w[t], w[t + 1], w[t + 9], w[t + 14])
                w[t + 17] = _sched(w[t + 1], w[t + 2], w[t + 10], w[t + 15])
            x = _round(_round(x, w[t] + _K[t]), w[t + 1] + _K[t + 1])
        s = _add8(s, x)
    for j in range(8):
        h[j] = np.uint32(s[j])


# --- SHA-NI kernel: one LLVM <4 x i32> per four words, the x86 SHA intrinsics on them


def _mask(lanes: list[int]) -> ir.Constant:
    return ir.Constant(ir.VectorType(_I32, len(lanes)), lanes)


def _need_sha_ni() -> None:
    # Typing fails here, before any code is generated, on a CPU that could not run the result.
    if not HAS_SHA_NI:
        raise TypingError("the SHA-NI SHA-256 kernel needs the x86 'sha' CPU feature, which this host lacks")


@intrinsic
def _clean_upper(typingctx):
    """``vzeroupper`` where the target has AVX: the SHA instructions are legacy SSE, slow after AVX code
    left the upper halves dirty (docs/performance.md)."""

    def codegen(context, builder, sig, args):
        if "avx" in cpu.target_features():
            _call(builder, "llvm.x86.avx.vzeroupper", ir.VoidType(), [])
        return context.get_dummy_value()

    return types.none(), codegen


@intrinsic
def _load_be(typingctx, data, offset):
    """Bytes ``data[offset : offset + 16]`` as four big-endian words (unaligned, unchecked)."""
    _need_sha_ni()
    if not (_is_c_array(data, types.uint8) and isinstance(offset, types.Integer)):
        return None

    def codegen(context, builder, sig, args):
        ary = context.make_array(sig.args[0])(context, builder, args[0])
        ptr = builder.bitcast(builder.gep(ary.data, [args[1]]), ir.VectorType(_I8, 16).as_pointer())
        v = builder.load(ptr, align=1)
        # pshufb: reverse the bytes of each word (SHA-256 reads words big-endian)
        v = builder.shuffle_vector(v, v, _mask([3, 2, 1, 0, 7, 6, 5, 4, 11, 10, 9, 8, 15, 14, 13, 12]))
        return builder.bitcast(v, _V4)

    return u32x4(data, offset), codegen


def _vector_op(name: str, vec: Any, arity: int, build: Any, sha_ni: bool = True) -> Any:
    """An intrinsic on ``arity`` vectors of numba type ``vec``, ``build(builder, *args)`` its code."""

    def typer(*vecs: Any) -> Any:
        if sha_ni:
            _need_sha_ni()
        if not all(v == vec for v in vecs):
            return None
        return vec(*vecs), lambda context, builder, sig, args: build(builder, *args)

    def op2(typingctx, a, b):  # type: ignore[no-untyped-def]
        return typer(a, b)

    def op3(typingctx, a, b, c):  # type: ignore[no-untyped-def]
        return typer(a, b, c)

    op = op2 if arity == 2 else op3
    op.__name__ = name
    return intrinsic(op)


def _memory_op(name: str, vec: Any, store: bool, doc: str) -> Any:
    """An intrinsic loading (or storing) ``arr[index : index + w]`` of a C-contiguous uint32 array as
    one vector of numba type ``vec`` (``w`` words), unaligned and unchecked; SHA-NI's need the CPU feature."""
    llvm_vec = _V4 if vec == u32x4 else _VL

    def typer(arr: Any, index: Any, *v: Any) -> Any:
        if vec == u32x4:
            _need_sha_ni()
        if not (_is_c_array(arr, types.uint32) and isinstance(index, types.Integer) and all(x == vec for x in v)):
            return None

        def codegen(context, builder, sig, args):  # type: ignore[no-untyped-def]
            ary = context.make_array(sig.args[0])(context, builder, args[0])
            ptr = builder.bitcast(builder.gep(ary.data, [args[1]]), llvm_vec.as_pointer())
            if not store:
                return builder.load(ptr, align=4)
            builder.store(args[2], ptr, align=4)
            return context.get_dummy_value()

        return (types.none(arr, index, *v) if store else vec(arr, index)), codegen

    def load(typingctx, arr, index):  # type: ignore[no-untyped-def]
        return typer(arr, index)

    def store_(typingctx, arr, index, v):  # type: ignore[no-untyped-def]
        return typer(arr, index, v)

    op = store_ if store else load
    op.__name__, op.__doc__ = name, doc
    return intrinsic(op)


_load4 = _memory_op("_load4", u32x4, False, "``arr[index : index + 4]`` of a uint32 array, as one vector (unchecked).")
_store4 = _memory_op("_store4", u32x4, True, "Write ``v`` to ``arr[index : index + 4]`` of a uint32 array (unchecked).")


def _shuffle(name: str, lanes: list[int]) -> Any:
    """Picks ``lanes`` of the eight words of two vectors (the first one: lanes 0-3)."""
    return _vector_op(name, u32x4, 2, lambda b, x, y: b.shuffle_vector(x, y, _mask(lanes)))


def _sha(name: str, llvm_name: str, arity: int = 2) -> Any:
    return _vector_op(name, u32x4, arity, lambda b, *args: _call(b, llvm_name, _V4, list(args)))


# The SHA-NI state is two vectors, ABEF and CDGH, highest lane first: lanes [F, E, B, A] and
# [H, G, D, C] of the words loaded as [A, B, C, D] and [E, F, G, H].
_abef = _shuffle("_abef", [5, 4, 1, 0])
_cdgh = _shuffle("_cdgh", [7, 6, 3, 2])
_abcd = _shuffle("_abcd", [3, 2, 7, 6])  # back from (ABEF, CDGH)
_efgh = _shuffle("_efgh", [1, 0, 5, 4])
# palignr(hi, lo, 4) as _alignr4(lo, hi): words 1-3 of lo, then word 0 of hi (W[t-7] for four t).
_alignr4 = _shuffle("_alignr4", [1, 2, 3, 4])
# pshufd 0x0E: the upper two words down, for the second sha256rnds2 of a group of four rounds.
_upper = _shuffle("_upper", [2, 3, 2, 3])
_add = _vector_op("_add", u32x4, 2, lambda b, x, y: b.add(x, y))  # paddd, wrapping
# sha256rnds2(cdgh, abef, wk): two rounds with W+K in the low two words of wk; the new ABEF.
_rnds2 = _sha("_rnds2", "llvm.x86.sha256rnds2", 3)
# sha256msg1(a, b): a + sigma0 of the next words; sha256msg2(a, b): a + sigma1 of b's, in order.
_msg1 = _sha("_msg1", "llvm.x86.sha256msg1")
_msg2 = _sha("_msg2", "llvm.x86.sha256msg2")


@jit()
def _rounds4(abef: Any, cdgh: Any, w: Any, t: int) -> tuple[Any, Any]:
    """Rounds t..t+3 on (ABEF, CDGH), ``w`` holding W[t..t+3]."""
    wk = _add(w, _load4(_K32, t))
    cdgh = _rnds2(cdgh, abef, wk)  # now the new ABEF; the old ABEF is the CDGH of the next two
    abef = _rnds2(abef, cdgh, _upper(wk, wk))
    return abef, cdgh


@jit(accepts=dict(h="uint32[::1]", data="uint8[::1]"), nogil=True)
def compress_sha_ni(h: np.ndarray, data: np.ndarray) -> None:
    """Fold the whole 64-byte blocks of ``data`` (uint8) into ``h`` (uint32[8]) with SHA-NI."""
    _clean_upper()
    lo, hi = _load4(h, 0), _load4(h, 4)
    abef, cdgh = _abef(lo, hi), _cdgh(lo, hi)
    for o in range(0, data.shape[0] - 63, 64):
        abef0, cdgh0 = abef, cdgh
        w0, w1, w2, w3 = _load_be(data, o), _load_be(data, o + 16), _load_be(data, o + 32), _load_be(data, o + 48)
        for t in range(0, 64, 4):
            abef, cdgh = _rounds4(abef, cdgh, w0, t)
            # W[t+16..t+19] = sigma1(W[t+14..]) + W[t+9..] + sigma0(W[t+1..]) + W[t..]:
            # msg1 adds sigma0, msg2 adds sigma1 (its last two words from its own first two).
            w0, w1, w2, w3 = w1, w2, w3, _msg2(_add(_msg1(w0, w1), _alignr4(w2, w3)), w3)
        abef, cdgh = _add(abef, abef0), _add(cdgh, cdgh0)
    _store4(h, 0, _abcd(abef, cdgh))
    _store4(h, 4, _efgh(abef, cdgh))


# ---------------------------------------------------------------------------------------------

KERNELS: dict[str, Any] = {"scalar": compress_scalar}
if HAS_SHA_NI:
    KERNELS["sha-ni"] = compress_sha_ni

_FORCED = os.environ.get("MESHNB_SHA256", "").strip().lower()
if _FORCED not in ("", "scalar", "sha-ni"):
    raise ValueError(f"MESHNB_SHA256={_FORCED!r}: expected 'scalar' or 'sha-ni'")
if _FORCED == "sha-ni" and not HAS_SHA_NI:  # asked for, and absent: an error, not a quiet fallback
    raise ValueError(
        "MESHNB_SHA256=sha-ni: this CPU has no SHA extensions (x86 feature 'sha'): unset it or use 'scalar'"
    )
IMPLEMENTATION: str = "scalar" if _FORCED == "scalar" or not HAS_SHA_NI else "sha-ni"
"""The kernel in use: ``"sha-ni"`` where the CPU has the SHA extensions, else ``"scalar"``."""
compress = KERNELS[IMPLEMENTATION]


def _as_bytes(data: Any) -> np.ndarray:
    """A read-only uint8 view of ``data``'s bytes, without a copy (one signature for the kernels)."""
    if isinstance(data, np.ndarray):
        if not data.flags.c_contiguous:
            raise ValueError(f"Sha256.update needs C-contiguous data, not an array of strides {data.strides}")
        out = data.reshape(-1).view(np.uint8)
    else:
        mv = memoryview(data)
        if not mv.c_contiguous:
            raise ValueError("Sha256.update needs C-contiguous data, not a strided memoryview")
        out = np.frombuffer(mv, dtype=np.uint8) if mv.nbytes else np.empty(0, dtype=np.uint8)
    if out.flags.writeable:
        out = out.view()
        out.flags.writeable = False
    return out


@dataclass(frozen=True)
class Sha256State:
    """What a resumed hash needs: the chaining value, the bytes hashed, the unfinished block."""

    h: tuple[int, ...]
    length: int
    tail: bytes

    def __post_init__(self) -> None:
        if len(self.h) != 8 or not all(isinstance(x, int) and 0 <= x <= 0xFFFFFFFF for x in self.h):
            raise ValueError("a SHA-256 state has 8 u32 words")
        if not isinstance(self.length, int) or self.length < 0 or len(self.tail) != self.length % 64:
            raise ValueError(
                f"a SHA-256 state of {self.length} bytes has {self.length % 64} tail bytes, not {len(self.tail)}"
            )


class Sha256:
    """SHA-256 with ``update`` and ``hexdigest`` like hashlib's, and a state to save and resume."""

    _kernel = staticmethod(compress)  # a subclass may pick another of KERNELS (the tests do)

    def __init__(self, state: Sha256State | None = None) -> None:
        state = state or Sha256State(_H0, 0, b"")
        self._h = np.array(state.h, dtype=np.uint32)
        self._length = state.length
        self._tail = state.tail

    def update(self, data: bytes | bytearray | memoryview | np.ndarray) -> None:
        """Hash ``data``'s bytes (any C-contiguous buffer; a numpy array in memory order)."""
        buf = _as_bytes(data)
        n = buf.shape[0]
        self._length += n
        if self._tail:
            need = 64 - len(self._tail)
            if n < need:
                self._tail += buf.tobytes()
                return
            self._kernel(self._h, _as_bytes(self._tail + buf[:need].tobytes()))
            buf = buf[need:]
            n -= need
        whole = n - n % 64
        if whole:
            self._kernel(self._h, buf[:whole])
        self._tail = buf[whole:].tobytes()

    def state(self) -> Sha256State:
        """The state to resume from (:class:`Sha256State`)."""
        return Sha256State(tuple(int(x) for x in self._h), self._length, self._tail)

    def hexdigest(self) -> str:
        """The digest of the bytes hashed so far, as 64 hex digits; the hash can go on after it."""
        h = self._h.copy()
        pad = b"\x80" + b"\0" * ((55 - self._length) % 64) + struct.pack(">Q", 8 * self._length)
        self._kernel(h, _as_bytes(self._tail + pad))
        return "".join(f"{int(x):08x}" for x in h)


# --- many short messages at once: one message per vector lane ---------------------------------


lanes_load = _memory_op("lanes_load", u32lanes, False, "``arr[index : index + LANES]`` as one vector (unchecked).")
lanes_store = _memory_op("lanes_store", u32lanes, True, "Write ``v`` to ``arr[index : index + LANES]`` (unchecked).")


@intrinsic
def lanes_gather(typingctx, arr, index, offsets):
    """Lane q: ``arr[index + offsets[q]]`` of a C-contiguous uint32 array (one gather, unchecked)."""
    if not (_is_c_array(arr, types.uint32) and isinstance(index, types.Integer) and offsets == u32lanes):
        return None

    def codegen(context, builder, sig, args):
        ary = context.make_array(sig.args[0])(context, builder, args[0])
        i64s = ir.VectorType(_I64, LANES)
        base = builder.ptrtoint(builder.gep(ary.data, [args[1]]), _I64)
        start = builder.insert_element(ir.Constant(i64s, ir.Undefined), base, ir.Constant(_I32, 0))
        start = builder.shuffle_vector(start, start, ir.Constant(_VL, [0] * LANES))
        at = builder.add(start, builder.shl(builder.sext(args[2], i64s), ir.Constant(i64s, [2] * LANES)))
        ptrs = builder.inttoptr(at, ir.VectorType(_I32.as_pointer(), LANES))
        fn = cgutils.get_or_insert_function(
            builder.module,
            ir.FunctionType(_VL, [ptrs.type, _I32, ir.VectorType(ir.IntType(1), LANES), _VL]),
            f"llvm.masked.gather.v{LANES}i32.v{LANES}p0i32",
        )
        every = ir.Constant(ir.VectorType(ir.IntType(1), LANES), [1] * LANES)
        return builder.call(fn, [ptrs, ir.Constant(_I32, 4), every, ir.Constant(_VL, ir.Undefined)])

    return u32lanes(arr, index, offsets), codegen


@intrinsic
def lanes_splat(typingctx, x):
    """Every lane ``x`` (an integer, as uint32)."""
    if not isinstance(x, types.Integer):
        return None

    def codegen(context, builder, sig, args):
        w = context.cast(builder, args[0], sig.args[0], types.uint32)
        v = builder.insert_element(ir.Constant(_VL, ir.Undefined), w, ir.Constant(_I32, 0))
        return builder.shuffle_vector(v, v, ir.Constant(_VL, [0] * LANES))

    return u32lanes(x), codegen


@intrinsic
def lanes_bswap(typingctx, x):
    """Each lane's bytes reversed: a little-endian word's SHA-256 (big-endian) reading."""
    if x != u32lanes:
        return None

    def codegen(context, builder, sig, args):
        return _call(builder, f"llvm.bswap.v{LANES}i32", _VL, [args[0]])

    return u32lanes(x), codegen


@intrinsic
def bswap32(typingctx, x):
    """A uint32's bytes reversed (one ``bswap``, or a ``movbe`` load)."""
    if x != types.uint32:
        return None

    def codegen(context, builder, sig, args):
        return _call(builder, "llvm.bswap.i32", _I32, [args[0]])

    return types.uint32(x), codegen


def _lanes_op(name: str, build: Any) -> Any:
    return _vector_op(name, u32lanes, 2, build, sha_ni=False)


def _overload_operator(op: Any, impl: Any) -> None:
    @overload(op)
    def lanes_operator(a, b):  # type: ignore[no-untyped-def]
        if a == u32lanes and b == u32lanes:
            return lambda a, b: impl(a, b)
        return None


for _op, _name in ((operator.add, "add"), (operator.xor, "xor"), (operator.and_, "and_"), (operator.or_, "or_")):
    # wrapping, as SHA-256 adds
    _overload_operator(_op, _lanes_op(f"_v{_name}", lambda b, x, y, _name=_name: getattr(b, _name)(x, y)))


@jit()
def _lanes_get8(h):  # type: ignore[no-untyped-def]
    """The eight chaining words of every lane, from ``h`` (uint32 ``[8 * LANES]``, word-major)."""
    n = LANES
    return (
        lanes_load(h, 0), lanes_load(h, n), lanes_load(h, 2 * n), lanes_load(h, 3 * n),
        lanes_load(h, 4 * n), lanes_load(h, 5 * n), lanes_load(h, 6 * n), lanes_load(h, 7 * n),
    )  # fmt: skip


@jit()
def _lanes_put8(h, s):  # type: ignore[no-untyped-def]
    """Store :func:`_lanes_get8`'s words back."""
    for j in range(8):
        lanes_store(h, j * LANES, s[j])


@jit(nogil=True)
def compress_lanes(h, w, blocks, s):  # type: ignore[no-untyped-def]
    """Fold ``blocks`` 64-byte blocks of each of :data:`LANES` messages into their chaining values,
    one message per vector lane.  Word-major, lane-minor: ``h`` uint32 ``[8 * LANES]`` (word j of lane
    q at ``j * LANES + q``), ``w`` uint32 ``[blocks * 16 * LANES]`` the messages' SHA-256 words
    (big-endian readings), ``s`` uint32 ``[64 * LANES]`` scratch.  Unchecked: callers size them."""
    n = LANES
    hs = _lanes_get8(h)
    for blk in range(blocks):
        for t in range(16):
            lanes_store(s, t * n, lanes_load(w, (blk * 16 + t) * n))
        x = hs
        for t in range(64):
            if t < 48:  # W[t+16] while round t runs: independent work for the core
                w16, w15 = lanes_load(s, t * n), lanes_load(s, (t + 1) * n)
                w7, w2 = lanes_load(s, (t + 9) * n), lanes_load(s, (t + 14) * n)
                lanes_store(s, (t + 16) * n, _sched(w16, w15, w7, w2))
            x = _round(x, lanes_load(s, t * n) + lanes_splat(_K32[t]))
        hs = _add8(hs, x)
    _lanes_put8(h, hs)


@jit(nogil=True)
def compress_lanes_shared(h, w, blocks, s, shared, wk):  # type: ignore[no-untyped-def]
    """:func:`compress_lanes`, where a block ``blk`` with ``shared[blk]`` holds the same words in
    every lane: its rounds take ``wk[64 * blk : 64 * blk + 64]`` (:func:`schedule_wk`), no schedule."""
    n = LANES
    for blk in range(blocks):
        if not shared[blk]:
            compress_lanes(h, w[blk * 16 * n : (blk + 1) * 16 * n], 1, s)
            continue
        hs = _lanes_get8(h)
        x = hs
        for t in range(64 * blk, 64 * blk + 64):  # each round's W + K a broadcast of the one word every lane shares
            x = _round(x, lanes_splat(wk[t]))
        _lanes_put8(h, _add8(hs, x))


@jit(nogil=True)
def schedule_wk(words, wk, at):  # type: ignore[no-untyped-def]
    """W[t] + K[t] (mod 2^32), t < 64, of one block's 16 SHA-256 words into ``wk[at : at + 64]``."""
    x = np.empty(64, dtype=np.uint64)
    for t in range(16):
        x[t] = np.uint64(words[t])
    for t in range(16, 64):
        x[t] = _sched(x[t - 16], x[t - 15], x[t - 7], x[t - 2])
    for t in range(64):
        wk[at + t] = np.uint32((x[t] + _K[t]) & _M32)


@jit()
def padding_word(t, nbytes, words):  # type: ignore[no-untyped-def]
    """Word ``t`` (from ``nbytes // 4`` on) of a message of ``nbytes`` bytes (a multiple of 4) padded
    to ``words`` words: 0x80, zeros, the length in bits."""
    bits = np.uint64(8 * nbytes)
    if t == words - 2:
        return np.uint32(bits >> np.uint64(32))
    if t == words - 1:
        return np.uint32(bits & np.uint64(0xFFFFFFFF))
    return np.uint32(0x80000000) if t == nbytes // 4 else np.uint32(0)


def message_blocks(nbytes: int) -> int:
    """64-byte blocks of a padded message of ``nbytes`` bytes."""
    return (nbytes + 9 + 63) // 64


@jit(nogil=True)
def lanes_init(h):  # type: ignore[no-untyped-def]
    """The initial hash value in every lane of ``h`` (uint32 ``[8 * LANES]``)."""
    for j in range(8):
        lanes_store(h, j * LANES, lanes_splat(_H0_WORDS[j]))


@jit(nogil=True)
def lanes_start(h, w, nbytes):  # type: ignore[no-untyped-def]
    """The initial hash value in every lane of ``h``, and the padding words in every lane of ``w``
    from word ``nbytes // 4`` on (the message words are the caller's)."""
    n = LANES
    lanes_init(h)
    words = w.shape[0] // n
    for t in range(nbytes // 4, words):
        lanes_store(w, t * n, lanes_splat(padding_word(t, nbytes, words)))


@jit()
def _digest_out(h, at, stride, out, k):  # type: ignore[no-untyped-def]
    """The digest whose word j is ``h[at + j * stride]`` into ``out[k]`` (32 uint8, big-endian words)."""
    for j in range(8):
        x = h[at + j * stride]
        for i in range(4):
            out[k, 4 * j + i] = np.uint8((x >> np.uint32(24 - 8 * i)) & np.uint32(0xFF))


@jit()
def lanes_digest_out(h, q, out, k):  # type: ignore[no-untyped-def]
    """Lane ``q``'s digest (``h`` as :func:`compress_lanes` left it) into ``out[k]`` (32 uint8)."""
    _digest_out(h, q, LANES, out, k)


@jit(nogil=True)
def lanes_update(h, tail, ntail, src, nwords, s):  # type: ignore[no-untyped-def]
    """Append ``nwords`` words to each of :data:`LANES` streamed messages: word i of lane q is
    ``src[i * LANES + q]`` (hashed as its little-endian bytes); ``tail`` uint32 ``[16 * LANES]`` holds
    the unfinished block's ``ntail`` words, ``(ntail + nwords) % 16`` after the call."""
    n = LANES
    pos = ntail
    for i in range(nwords):
        lanes_store(tail, pos * n, lanes_bswap(lanes_load(src, i * n)))
        pos += 1
        if pos == 16:
            compress_lanes(h, tail, 1, s)
            pos = 0


@jit(nogil=True)
def lanes_finish(h, tail, ntail, nbytes, s):  # type: ignore[no-untyped-def]
    """End :func:`lanes_update`'s messages of ``nbytes`` bytes each: ``h`` then holds their digests."""
    n = LANES
    pos = ntail
    lanes_store(tail, pos * n, lanes_splat(0x80000000))
    pos += 1
    if pos > 14:  # no room for the length: a block of its own
        for t in range(pos, 16):
            lanes_store(tail, t * n, lanes_splat(0))
        compress_lanes(h, tail, 1, s)
        pos = 0
    for t in range(pos, 14):
        lanes_store(tail, t * n, lanes_splat(0))
    bits = np.uint64(8 * nbytes)
    lanes_store(tail, 14 * n, lanes_splat(np.uint32(bits >> np.uint64(32))))
    lanes_store(tail, 15 * n, lanes_splat(np.uint32(bits & np.uint64(0xFFFFFFFF))))
    compress_lanes(h, tail, 1, s)


ROWS_KERNEL: str = "lanes" if cpu.target_shape().isa == "avx512" or IMPLEMENTATION != "sha-ni" else "one"
"""The kernel of :data:`ROWS_KERNELS` that :func:`digest_rows` uses: ``"lanes"`` where the target has
AVX-512 or there is no SHA-NI, else ``"one"`` (SHA-NI a row at a time: as fast as 8 lanes of AVX2)."""


@jit(nogil=True)
def _digest_rows_lanes(words, lo0, hi0, lo1, hi1, out, first, last):  # type: ignore[no-untyped-def]
    n0, n1 = hi0 - lo0, hi1 - lo1
    nbytes = 4 * (n0 + n1)
    blocks = (nbytes + 9 + 63) // 64
    n = LANES
    h = np.empty(8 * n, dtype=np.uint32)
    w = np.empty(blocks * 16 * n, dtype=np.uint32)
    s = np.empty(64 * n, dtype=np.uint32)
    rows = np.empty(n, dtype=np.uint32)
    stride = words.shape[1]
    flat = words.reshape(-1)
    for k0 in range(first, last, n):
        lanes_start(h, w, nbytes)
        for q in range(n):  # the last batch's spare lanes hash its last row again
            rows[q] = np.uint32((min(k0 + q, last - 1) - k0) * stride)
        at = lanes_load(rows, 0)
        for j in range(n0):
            lanes_store(w, j * n, lanes_bswap(lanes_gather(flat, k0 * stride + lo0 + j, at)))
        for j in range(n1):
            lanes_store(w, (n0 + j) * n, lanes_bswap(lanes_gather(flat, k0 * stride + lo1 + j, at)))
        compress_lanes(h, w, blocks, s)
        for q in range(min(n, last - k0)):
            lanes_digest_out(h, q, out, k0 + q)


@jit(nogil=True)
def _digest_rows_one(words, lo0, hi0, lo1, hi1, out, first, last):  # type: ignore[no-untyped-def]
    n0, n1 = hi0 - lo0, hi1 - lo1
    nbytes = 4 * (n0 + n1)
    blocks = (nbytes + 9 + 63) // 64
    msg = np.zeros(blocks * 16, dtype=np.uint32)  # the padded message, one row at a time
    buf = msg.view(np.uint8)
    buf[nbytes] = 0x80
    bits = np.uint64(8 * nbytes)
    for j in range(8):
        buf[blocks * 64 - 1 - j] = np.uint8((bits >> np.uint64(8 * j)) & np.uint64(0xFF))
    h = np.empty(8, dtype=np.uint32)
    for k in range(first, last):
        for j in range(n0):
            msg[j] = words[k, lo0 + j]
        for j in range(n1):
            msg[n0 + j] = words[k, lo1 + j]
        h[:] = _H0_WORDS
        compress(h, buf)
        _digest_out(h, 0, 1, out, k)


ROWS_KERNELS: dict[str, Any] = {"lanes": _digest_rows_lanes, "one": _digest_rows_one}
""":func:`digest_rows`' kernels by name (the tests run each): ``"one"`` is :data:`compress` a row at a time."""


def digest_rows(
    words: np.ndarray, lo0: int, hi0: int, lo1: int, hi1: int, out: np.ndarray, first: int, last: int,
    kernel: str | None = None,
) -> None:  # fmt: skip
    """The SHA-256 of ``words[k, lo0:hi0]`` then ``words[k, lo1:hi1]`` (little-endian bytes) of rows
    ``first .. last - 1`` of a uint32 ``[n, k]`` array into ``out[k]`` (uint8 ``[n, 32]``), with
    :data:`ROWS_KERNEL` or ``kernel``; releases the GIL."""
    if last > first:
        ROWS_KERNELS[kernel or ROWS_KERNEL](words, lo0, hi0, lo1, hi1, out, first, last)
