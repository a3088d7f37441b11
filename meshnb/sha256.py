"""SHA-256 (FIPS 180-4) in njit: a hash whose state a checkpoint saves, and many short messages at once.

hashlib's state cannot be saved, so a run that checkpoints hashes its trace with :class:`Sha256`,
whose state (chaining value, bytes hashed, unfinished block) goes into the checkpoint.  Its kernel
:data:`compress` (``compress(h, data)``: the whole 64-byte blocks of C-contiguous uint8 ``data``
folded into uint32[8] ``h``) is ``"sha-ni"`` (the x86 SHA extensions) where the CPU has them, else
``"scalar"``; ``MESHNB_SHA256=scalar`` forces the scalar one, ``MESHNB_SHA256=sha-ni`` demands
SHA-NI (a ``ValueError`` at import where the CPU lacks it).  The kernels release the GIL.  A
sweep's digests hash :data:`LANES` messages at once, one per 32-bit vector lane
(:func:`compress_lanes`, :func:`digest_rows`).  Why this stays beside hashlib, measured:
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

# ---------------------------------------------------------------------------------------------

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
_K32 = np.array(_K_WORDS, dtype=np.uint32)  # SHA-NI kernel: loaded four at a time
_H0 = (0x6A09E667, 0xBB67AE85, 0x3C6EF372, 0xA54FF53A, 0x510E527F, 0x9B05688C, 0x1F83D9AB, 0x5BE0CD19)
_H0_WORDS = np.array(_H0, dtype=np.uint32)


HAS_SHA_NI: bool = cpu.HAS_SHA_NI
"""Whether the host CPU has the x86 SHA extensions (``meshnb.cpu.HAS_SHA_NI``, the one place that
decides it)."""

# ---------------------------------------------------------------------------------------------
# Scalar kernel
# ---------------------------------------------------------------------------------------------

_I8, _I32, _I64 = ir.IntType(8), ir.IntType(32), ir.IntType(64)
_M32 = np.uint64(0xFFFFFFFF)  # a uint64: numba types uint64 & int64 (or +) as int64 or float64


@intrinsic
def _rotr(typingctx, x, r):
    """The 32-bit rotation right by a literal ``r`` of a word held in a uint64: one funnel shift."""
    if not (x == types.uint64 and isinstance(r, types.IntegerLiteral)):
        return None
    n = r.literal_value

    def codegen(context, builder, sig, args):
        fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(_I32, [_I32] * 3), "llvm.fshr.i32")
        w = builder.trunc(args[0], _I32)
        return builder.zext(builder.call(fn, [w, w, ir.Constant(_I32, n)]), _I64)

    return types.uint64(x, r), codegen


def _is_c_array(arr: Any, dtype: Any) -> bool:
    return isinstance(arr, types.Array) and arr.dtype == dtype and arr.layout == "C" and arr.ndim == 1


@intrinsic
def _be32(typingctx, data, j):
    """The big-endian word at ``data[j : j + 4]`` of a uint8 array (unchecked), zero-extended."""
    if not (_is_c_array(data, types.uint8) and isinstance(j, types.Integer)):
        return None  # the address is data + j: contiguous bytes only

    def codegen(context, builder, sig, args):
        ary = context.make_array(sig.args[0])(context, builder, args[0])
        base = builder.gep(ary.data, [args[1]])
        word = ir.Constant(_I64, 0)
        for i in range(4):
            byte = builder.zext(builder.load(builder.gep(base, [ir.Constant(_I64, i)])), _I64)
            word = builder.or_(word, builder.shl(byte, ir.Constant(_I64, 24 - 8 * i)))
        return word

    return types.uint64(data, j), codegen


@jit()
def _sched(w16: np.uint64, w15: np.uint64, w7: np.uint64, w2: np.uint64) -> np.uint64:
    """W[t] from W[t-16], W[t-15], W[t-7], W[t-2]."""
    s0 = _rotr(w15, 7) ^ _rotr(w15, 18) ^ (w15 >> 3)
    s1 = _rotr(w2, 17) ^ _rotr(w2, 19) ^ (w2 >> 10)
    return (w16 + s0 + w7 + s1) & _M32


@jit()
def _rnd(
    a: np.uint64,
    b: np.uint64,
    c: np.uint64,
    d: np.uint64,
    e: np.uint64,
    f: np.uint64,
    g: np.uint64,
    h: np.uint64,
    wk: np.uint64,
) -> tuple[np.uint64, np.uint64]:
    """One round; returns the new ``d`` and ``h`` (the caller renames the other six).
    ``wk`` is W[t] + K[t], unmasked: the sums stay far below 2^64, so one mask per result."""
    t1 = h + (_rotr(e, 6) ^ _rotr(e, 11) ^ _rotr(e, 25)) + (g ^ (e & (f ^ g))) + wk
    t2 = (_rotr(a, 2) ^ _rotr(a, 13) ^ _rotr(a, 22)) + ((a & b) | (c & (a | b)))
    return (d + t1) & _M32, (t1 + t2) & _M32


@jit(accepts=dict(h="uint32[::1]", data="uint8[::1]"), nogil=True)
def compress_scalar(h: np.ndarray, data: np.ndarray) -> None:
    """Fold the whole 64-byte blocks of ``data`` (uint8) into ``h`` (uint32[8]), portable code."""
    k = _K
    h0, h1, h2, h3 = np.uint64(h[0]), np.uint64(h[1]), np.uint64(h[2]), np.uint64(h[3])
    h4, h5, h6, h7 = np.uint64(h[4]), np.uint64(h[5]), np.uint64(h[6]), np.uint64(h[7])
    for o in range(0, data.shape[0] - 63, 64):
        w0, w1, w2, w3 = _be32(data, o), _be32(data, o + 4), _be32(data, o + 8), _be32(data, o + 12)
        w4, w5, w6, w7 = _be32(data, o + 16), _be32(data, o + 20), _be32(data, o + 24), _be32(data, o + 28)
        w8, w9, w10, w11 = _be32(data, o + 32), _be32(data, o + 36), _be32(data, o + 40), _be32(data, o + 44)
        w12, w13, w14, w15 = _be32(data, o + 48), _be32(data, o + 52), _be32(data, o + 56), _be32(data, o + 60)
        a, b, c, d, e, f, g, hh = h0, h1, h2, h3, h4, h5, h6, h7
        for r in range(0, 64, 16):
            if r:  # the schedule in place: slot j holds W[t] with t = j mod 16
                w0 = _sched(w0, w1, w9, w14)
                w1 = _sched(w1, w2, w10, w15)
                w2 = _sched(w2, w3, w11, w0)
                w3 = _sched(w3, w4, w12, w1)
                w4 = _sched(w4, w5, w13, w2)
                w5 = _sched(w5, w6, w14, w3)
                w6 = _sched(w6, w7, w15, w4)
                w7 = _sched(w7, w8, w0, w5)
                w8 = _sched(w8, w9, w1, w6)
                w9 = _sched(w9, w10, w2, w7)
                w10 = _sched(w10, w11, w3, w8)
                w11 = _sched(w11, w12, w4, w9)
                w12 = _sched(w12, w13, w5, w10)
                w13 = _sched(w13, w14, w6, w11)
                w14 = _sched(w14, w15, w7, w12)
                w15 = _sched(w15, w0, w8, w13)
            # The eight working variables rotate one name per round instead of being moved.
            d, hh = _rnd(a, b, c, d, e, f, g, hh, w0 + k[r])
            c, g = _rnd(hh, a, b, c, d, e, f, g, w1 + k[r + 1])
            b, f = _rnd(g, hh, a, b, c, d, e, f, w2 + k[r + 2])
            a, e = _rnd(f, g, hh, a, b, c, d, e, w3 + k[r + 3])
            hh, d = _rnd(e, f, g, hh, a, b, c, d, w4 + k[r + 4])
            g, c = _rnd(d, e, f, g, hh, a, b, c, w5 + k[r + 5])
            f, b = _rnd(c, d, e, f, g, hh, a, b, w6 + k[r + 6])
            e, a = _rnd(b, c, d, e, f, g, hh, a, w7 + k[r + 7])
            d, hh = _rnd(a, b, c, d, e, f, g, hh, w8 + k[r + 8])
            c, g = _rnd(hh, a, b, c, d, e, f, g, w9 + k[r + 9])
            b, f = _rnd(g, hh, a, b, c, d, e, f, w10 + k[r + 10])
            a, e = _rnd(f, g, hh, a, b, c, d, e, w11 + k[r + 11])
            hh, d = _rnd(e, f, g, hh, a, b, c, d, w12 + k[r + 12])
            g, c = _rnd(d, e, f, g, hh, a, b, c, w13 + k[r + 13])
            f, b = _rnd(c, d, e, f, g, hh, a, b, w14 + k[r + 14])
            e, a = _rnd(b, c, d, e, f, g, hh, a, w15 + k[r + 15])
        h0, h1, h2, h3 = (h0 + a) & _M32, (h1 + b) & _M32, (h2 + c) & _M32, (h3 + d) & _M32
        h4, h5, h6, h7 = (h4 + e) & _M32, (h5 + f) & _M32, (h6 + g) & _M32, (h7 + hh) & _M32
    h[0], h[1], h[2], h[3] = np.uint32(h0), np.uint32(h1), np.uint32(h2), np.uint32(h3)
    h[4], h[5], h[6], h[7] = np.uint32(h4), np.uint32(h5), np.uint32(h6), np.uint32(h7)


# ---------------------------------------------------------------------------------------------
# SHA-NI kernel: one LLVM <4 x i32> per four words, the x86 SHA intrinsics on them
# ---------------------------------------------------------------------------------------------

_V4 = ir.VectorType(_I32, 4)


class U32x4(types.Type):
    """The numba type of an LLVM ``<4 x i32>``: four SHA-256 words in an xmm register."""

    def __init__(self) -> None:
        super().__init__(name="u32x4")


u32x4 = U32x4()


@register_model(U32x4)
class _U32x4Model(models.PrimitiveModel):
    def __init__(self, dmm, fe_type):
        super().__init__(dmm, fe_type, _V4)


def _mask(lanes: list[int]) -> ir.Constant:
    return ir.Constant(ir.VectorType(_I32, len(lanes)), lanes)


def _need_sha_ni() -> None:
    # Typing fails here, before any code is generated, on a CPU that could not run the result.
    if not HAS_SHA_NI:
        raise TypingError("the SHA-NI SHA-256 kernel needs the x86 'sha' CPU feature, which this host lacks")


def _x86_call(builder: ir.IRBuilder, name: str, args: list[ir.Value]) -> ir.Value:
    fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(_V4, [_V4] * len(args)), name)
    return builder.call(fn, args)


@intrinsic
def _clean_upper(typingctx):
    """``vzeroupper`` where the target has AVX: the SHA instructions are legacy SSE, which
    ran 100x slower after AVX code inlined into the same function left the upper halves dirty."""

    def codegen(context, builder, sig, args):
        if "avx" in cpu.target_features():
            fn = cgutils.get_or_insert_function(
                builder.module, ir.FunctionType(ir.VoidType(), []), "llvm.x86.avx.vzeroupper"
            )
            builder.call(fn, [])
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


@intrinsic
def _load4(typingctx, arr, index):
    """``arr[index : index + 4]`` of a uint32 array, as one vector (unchecked)."""
    _need_sha_ni()
    if not (_is_c_array(arr, types.uint32) and isinstance(index, types.Integer)):
        return None

    def codegen(context, builder, sig, args):
        ary = context.make_array(sig.args[0])(context, builder, args[0])
        return builder.load(builder.bitcast(builder.gep(ary.data, [args[1]]), _V4.as_pointer()), align=4)

    return u32x4(arr, index), codegen


@intrinsic
def _store4(typingctx, arr, index, v):
    """Write ``v`` to ``arr[index : index + 4]`` of a uint32 array (unchecked)."""
    _need_sha_ni()
    if not (_is_c_array(arr, types.uint32) and isinstance(index, types.Integer) and v == u32x4):
        return None

    def codegen(context, builder, sig, args):
        ary = context.make_array(sig.args[0])(context, builder, args[0])
        builder.store(args[2], builder.bitcast(builder.gep(ary.data, [args[1]]), _V4.as_pointer()), align=4)
        return context.get_dummy_value()

    return types.none(arr, index, v), codegen


def _make_shuffle(name: str, lanes: list[int]):
    """An intrinsic picking ``lanes`` of the eight words of two vectors (first one: lanes 0-3)."""

    @intrinsic
    def shuffle(typingctx, a, b):
        _need_sha_ni()
        if not (a == u32x4 and b == u32x4):
            return None

        def codegen(context, builder, sig, args):
            return builder.shuffle_vector(args[0], args[1], _mask(lanes))

        return u32x4(a, b), codegen

    shuffle.__name__ = name
    return shuffle


# The SHA-NI state is two vectors, ABEF and CDGH, highest lane first: lanes [F, E, B, A] and
# [H, G, D, C] of the words loaded as [A, B, C, D] and [E, F, G, H].
_abef = _make_shuffle("_abef", [5, 4, 1, 0])
_cdgh = _make_shuffle("_cdgh", [7, 6, 3, 2])
_abcd = _make_shuffle("_abcd", [3, 2, 7, 6])  # back from (ABEF, CDGH)
_efgh = _make_shuffle("_efgh", [1, 0, 5, 4])
# palignr(hi, lo, 4) as _alignr4(lo, hi): words 1-3 of lo, then word 0 of hi (W[t-7] for four t).
_alignr4 = _make_shuffle("_alignr4", [1, 2, 3, 4])
# pshufd 0x0E: the upper two words down, for the second sha256rnds2 of a group of four rounds.
_upper = _make_shuffle("_upper", [2, 3, 2, 3])


@intrinsic
def _add(typingctx, a, b):
    """Lane-wise 32-bit sum (paddd, wrapping)."""
    _need_sha_ni()
    if not (a == u32x4 and b == u32x4):
        return None

    def codegen(context, builder, sig, args):
        return builder.add(args[0], args[1])

    return u32x4(a, b), codegen


@intrinsic
def _rnds2(typingctx, cdgh, abef, wk):
    """sha256rnds2: two rounds with W+K in the low two words of ``wk``; returns the new ABEF."""
    _need_sha_ni()
    if not (cdgh == u32x4 and abef == u32x4 and wk == u32x4):
        return None

    def codegen(context, builder, sig, args):
        return _x86_call(builder, "llvm.x86.sha256rnds2", list(args))

    return u32x4(cdgh, abef, wk), codegen


def _make_msg(name: str, llvm_name: str):
    @intrinsic
    def msg(typingctx, a, b):
        _need_sha_ni()
        if not (a == u32x4 and b == u32x4):
            return None

        def codegen(context, builder, sig, args):
            return _x86_call(builder, llvm_name, list(args))

        return u32x4(a, b), codegen

    msg.__name__ = name
    return msg


# sha256msg1(a, b): a + sigma0 of the next words; sha256msg2(a, b): a + sigma1 of b's, in order.
_msg1 = _make_msg("_msg1", "llvm.x86.sha256msg1")
_msg2 = _make_msg("_msg2", "llvm.x86.sha256msg2")


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
    lo = _load4(h, 0)
    hi = _load4(h, 4)
    abef = _abef(lo, hi)
    cdgh = _cdgh(lo, hi)
    for o in range(0, data.shape[0] - 63, 64):
        abef0, cdgh0 = abef, cdgh
        w0 = _load_be(data, o)
        abef, cdgh = _rounds4(abef, cdgh, w0, 0)
        w1 = _load_be(data, o + 16)
        abef, cdgh = _rounds4(abef, cdgh, w1, 4)
        w2 = _load_be(data, o + 32)
        abef, cdgh = _rounds4(abef, cdgh, w2, 8)
        w3 = _load_be(data, o + 48)
        abef, cdgh = _rounds4(abef, cdgh, w3, 12)
        for t in range(16, 64, 4):
            # W[t..t+3] = sigma1(W[t-2..]) + W[t-7..] + sigma0(W[t-15..]) + W[t-16..]:
            # msg1 adds sigma0, msg2 adds sigma1 (its last two words from its own first two).
            w4 = _msg2(_add(_msg1(w0, w1), _alignr4(w2, w3)), w3)
            abef, cdgh = _rounds4(abef, cdgh, w4, t)
            w0, w1, w2, w3 = w1, w2, w3, w4
        abef = _add(abef, abef0)
        cdgh = _add(cdgh, cdgh0)
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

LANES: int = 16 if cpu.target_shape().floats >= 16 else 8
"""Messages :func:`compress_lanes` hashes at once, one per 32-bit lane of a vector: 16 where the
target has 512-bit vectors, else 8 (as the sweep loop's groups: :func:`meshnb.loops.sweep.shape`)."""

_VL = ir.VectorType(_I32, LANES)


class U32Lanes(types.Type):
    """The numba type of an LLVM ``<LANES x i32>``: one SHA-256 word of each of LANES messages."""

    def __init__(self) -> None:
        super().__init__(name=f"u32x{LANES}")


u32lanes = U32Lanes()


@register_model(U32Lanes)
class _U32LanesModel(models.PrimitiveModel):
    def __init__(self, dmm, fe_type):
        super().__init__(dmm, fe_type, _VL)


def _lanes_of(n: int) -> ir.Constant:
    return ir.Constant(_VL, [n] * LANES)


def _vector_ptr(context, builder, arrty, arr, index):  # type: ignore[no-untyped-def]
    ary = context.make_array(arrty)(context, builder, arr)
    return builder.bitcast(builder.gep(ary.data, [index]), _VL.as_pointer())


@intrinsic
def lanes_load(typingctx, arr, index):
    """``arr[index : index + LANES]`` of a C-contiguous uint32 array, as one vector (unchecked)."""
    if not (_is_c_array(arr, types.uint32) and isinstance(index, types.Integer)):
        return None

    def codegen(context, builder, sig, args):
        return builder.load(_vector_ptr(context, builder, sig.args[0], args[0], args[1]), align=4)

    return u32lanes(arr, index), codegen


@intrinsic
def lanes_store(typingctx, arr, index, v):
    """Write ``v`` to ``arr[index : index + LANES]`` of a C-contiguous uint32 array (unchecked)."""
    if not (_is_c_array(arr, types.uint32) and isinstance(index, types.Integer) and v == u32lanes):
        return None

    def codegen(context, builder, sig, args):
        builder.store(args[2], _vector_ptr(context, builder, sig.args[0], args[0], args[1]), align=4)
        return context.get_dummy_value()

    return types.none(arr, index, v), codegen


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
        fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(_VL, [_VL]), f"llvm.bswap.v{LANES}i32")
        return builder.call(fn, [args[0]])

    return u32lanes(x), codegen


@intrinsic
def bswap32(typingctx, x):
    """A uint32's bytes reversed (one ``bswap``, or a ``movbe`` load)."""
    if x != types.uint32:
        return None

    def codegen(context, builder, sig, args):
        fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(_I32, [_I32]), "llvm.bswap.i32")
        return builder.call(fn, [args[0]])

    return types.uint32(x), codegen


def _lanes_op(name: str, build: Any) -> Any:
    @intrinsic
    def op(typingctx, a, b):
        if not (a == u32lanes and b == u32lanes):
            return None

        def codegen(context, builder, sig, args):
            return build(builder, args[0], args[1])

        return u32lanes(a, b), codegen

    op.__name__ = name
    return op


_vadd = _lanes_op("_vadd", lambda b, x, y: b.add(x, y))  # wrapping, as SHA-256 adds
_vxor = _lanes_op("_vxor", lambda b, x, y: b.xor(x, y))
_vand = _lanes_op("_vand", lambda b, x, y: b.and_(x, y))
_vor = _lanes_op("_vor", lambda b, x, y: b.or_(x, y))


def _overload_operator(op: Any, impl: Any) -> None:
    @overload(op)
    def lanes_operator(a, b):  # type: ignore[no-untyped-def]
        if a == u32lanes and b == u32lanes:
            return lambda a, b: impl(a, b)
        return None


for _op, _impl in ((operator.add, _vadd), (operator.xor, _vxor), (operator.and_, _vand), (operator.or_, _vor)):
    _overload_operator(_op, _impl)


@intrinsic
def _vrotr(typingctx, x, r):
    """Each lane rotated right by ``r`` (a literal): LLVM's funnel shift (one vprord on AVX-512)."""
    if not (x == u32lanes and isinstance(r, types.IntegerLiteral)):
        return None
    n = r.literal_value

    def codegen(context, builder, sig, args):
        fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(_VL, [_VL] * 3), f"llvm.fshr.v{LANES}i32")
        return builder.call(fn, [args[0], args[0], _lanes_of(n)])

    return u32lanes(x, r), codegen


@intrinsic
def _vshr(typingctx, x, r):
    """Each lane shifted right by ``r`` (a literal), zeros in."""
    if not (x == u32lanes and isinstance(r, types.IntegerLiteral)):
        return None
    n = r.literal_value

    def codegen(context, builder, sig, args):
        return builder.lshr(args[0], _lanes_of(n))

    return u32lanes(x, r), codegen


@jit()
def _vsched(w16: Any, w15: Any, w7: Any, w2: Any) -> Any:
    """W[t] of every lane from W[t-16], W[t-15], W[t-7], W[t-2]."""
    s0 = _vrotr(w15, 7) ^ _vrotr(w15, 18) ^ _vshr(w15, 3)
    s1 = _vrotr(w2, 17) ^ _vrotr(w2, 19) ^ _vshr(w2, 10)
    return w16 + s0 + w7 + s1


@jit()
def _vrnd(a: Any, b: Any, c: Any, d: Any, e: Any, f: Any, g: Any, h: Any, wk: Any) -> tuple[Any, Any]:
    """One round of every lane; the new ``d`` and ``h`` (as :func:`_rnd`: the caller renames)."""
    t1 = h + (_vrotr(e, 6) ^ _vrotr(e, 11) ^ _vrotr(e, 25)) + (g ^ (e & (f ^ g))) + wk
    t2 = (_vrotr(a, 2) ^ _vrotr(a, 13) ^ _vrotr(a, 22)) + ((a & b) | (c & (a | b)))
    return d + t1, t1 + t2


@jit()
def _vrounds8(a, b, c, d, e, f, g, hh, x0, x1, x2, x3, x4, x5, x6, x7):  # type: ignore[no-untyped-def]
    """Eight rounds of every lane, ``x0 .. x7`` their W[t] + K[t]: the working variables after
    them, in the same order (the names rotate one per round instead of being moved, and come back
    after eight)."""
    d, hh = _vrnd(a, b, c, d, e, f, g, hh, x0)
    c, g = _vrnd(hh, a, b, c, d, e, f, g, x1)
    b, f = _vrnd(g, hh, a, b, c, d, e, f, x2)
    a, e = _vrnd(f, g, hh, a, b, c, d, e, x3)
    hh, d = _vrnd(e, f, g, hh, a, b, c, d, x4)
    g, c = _vrnd(d, e, f, g, hh, a, b, c, x5)
    f, b = _vrnd(c, d, e, f, g, hh, a, b, x6)
    e, a = _vrnd(b, c, d, e, f, g, hh, a, x7)
    return a, b, c, d, e, f, g, hh


@jit(nogil=True)
def compress_lanes(h, w, blocks, s):  # type: ignore[no-untyped-def]
    """Fold ``blocks`` 64-byte blocks of each of :data:`LANES` messages into their chaining values,
    one message per vector lane.  Word-major, lane-minor: ``h`` uint32 ``[8 * LANES]`` (word j of lane
    q at ``j * LANES + q``), ``w`` uint32 ``[blocks * 16 * LANES]`` the messages' SHA-256 words
    (big-endian readings), ``s`` uint32 ``[64 * LANES]`` scratch.  Unchecked: callers size them."""
    k = _K32
    n = LANES
    h0, h1, h2, h3 = lanes_load(h, 0), lanes_load(h, n), lanes_load(h, 2 * n), lanes_load(h, 3 * n)
    h4, h5, h6, h7 = lanes_load(h, 4 * n), lanes_load(h, 5 * n), lanes_load(h, 6 * n), lanes_load(h, 7 * n)
    for blk in range(blocks):
        o = blk * 16 * n
        for t in range(16):
            lanes_store(s, t * n, lanes_load(w, o + t * n))
        a, b, c, d, e, f, g, hh = h0, h1, h2, h3, h4, h5, h6, h7
        for t in range(0, 64, 8):
            if t < 48:  # W[t+16 .. t+23] while rounds t .. t+7 run: independent work for the core
                for u in range(t + 16, t + 24):
                    wu = _vsched(
                        lanes_load(s, (u - 16) * n), lanes_load(s, (u - 15) * n),
                        lanes_load(s, (u - 7) * n), lanes_load(s, (u - 2) * n),
                    )  # fmt: skip
                    lanes_store(s, u * n, wu)
            a, b, c, d, e, f, g, hh = _vrounds8(
                a, b, c, d, e, f, g, hh,
                lanes_load(s, t * n) + lanes_splat(k[t]), lanes_load(s, (t + 1) * n) + lanes_splat(k[t + 1]),
                lanes_load(s, (t + 2) * n) + lanes_splat(k[t + 2]), lanes_load(s, (t + 3) * n) + lanes_splat(k[t + 3]),
                lanes_load(s, (t + 4) * n) + lanes_splat(k[t + 4]), lanes_load(s, (t + 5) * n) + lanes_splat(k[t + 5]),
                lanes_load(s, (t + 6) * n) + lanes_splat(k[t + 6]), lanes_load(s, (t + 7) * n) + lanes_splat(k[t + 7]),
            )  # fmt: skip
        h0, h1, h2, h3 = h0 + a, h1 + b, h2 + c, h3 + d
        h4, h5, h6, h7 = h4 + e, h5 + f, h6 + g, h7 + hh
    lanes_store(h, 0, h0)
    lanes_store(h, n, h1)
    lanes_store(h, 2 * n, h2)
    lanes_store(h, 3 * n, h3)
    lanes_store(h, 4 * n, h4)
    lanes_store(h, 5 * n, h5)
    lanes_store(h, 6 * n, h6)
    lanes_store(h, 7 * n, h7)


@jit(nogil=True)
def compress_lanes_shared(h, w, blocks, s, shared, wk):  # type: ignore[no-untyped-def]
    """:func:`compress_lanes`, where a block ``blk`` with ``shared[blk]`` holds the same words in
    every lane: its rounds take ``wk[64 * blk : 64 * blk + 64]`` (:func:`schedule_wk`), no schedule."""
    n = LANES
    for blk in range(blocks):
        if not shared[blk]:
            compress_lanes(h, w[blk * 16 * n : (blk + 1) * 16 * n], 1, s)
            continue
        h0, h1, h2, h3 = lanes_load(h, 0), lanes_load(h, n), lanes_load(h, 2 * n), lanes_load(h, 3 * n)
        h4, h5, h6, h7 = lanes_load(h, 4 * n), lanes_load(h, 5 * n), lanes_load(h, 6 * n), lanes_load(h, 7 * n)
        a, b, c, d, e, f, g, hh = h0, h1, h2, h3, h4, h5, h6, h7
        o = 64 * blk
        for t in range(o, o + 64, 8):  # each round's W + K a broadcast of the one word every lane shares
            a, b, c, d, e, f, g, hh = _vrounds8(
                a, b, c, d, e, f, g, hh,
                lanes_splat(wk[t]), lanes_splat(wk[t + 1]), lanes_splat(wk[t + 2]), lanes_splat(wk[t + 3]),
                lanes_splat(wk[t + 4]), lanes_splat(wk[t + 5]), lanes_splat(wk[t + 6]), lanes_splat(wk[t + 7]),
            )  # fmt: skip
        lanes_store(h, 0, h0 + a)
        lanes_store(h, n, h1 + b)
        lanes_store(h, 2 * n, h2 + c)
        lanes_store(h, 3 * n, h3 + d)
        lanes_store(h, 4 * n, h4 + e)
        lanes_store(h, 5 * n, h5 + f)
        lanes_store(h, 6 * n, h6 + g)
        lanes_store(h, 7 * n, h7 + hh)


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
def lanes_digest_out(h, q, out, k):  # type: ignore[no-untyped-def]
    """Lane ``q``'s digest (``h`` as :func:`compress_lanes` left it) into ``out[k]`` (32 uint8)."""
    n = LANES
    for j in range(8):
        x = h[j * n + q]
        out[k, 4 * j] = np.uint8(x >> np.uint32(24))
        out[k, 4 * j + 1] = np.uint8((x >> np.uint32(16)) & np.uint32(0xFF))
        out[k, 4 * j + 2] = np.uint8((x >> np.uint32(8)) & np.uint32(0xFF))
        out[k, 4 * j + 3] = np.uint8(x & np.uint32(0xFF))


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
        for j in range(8):
            x = h[j]
            out[k, 4 * j] = np.uint8(x >> np.uint32(24))
            out[k, 4 * j + 1] = np.uint8((x >> np.uint32(16)) & np.uint32(0xFF))
            out[k, 4 * j + 2] = np.uint8((x >> np.uint32(8)) & np.uint32(0xFF))
            out[k, 4 * j + 3] = np.uint8(x & np.uint32(0xFF))


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
