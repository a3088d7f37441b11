"""float32 vectors for the step loops (numba intrinsics, plain IEEE ops, never an FMA) and x86's DAZ switch.

:func:`daz_on` and :func:`mxcsr_restore` are compiler barriers: LLVM may move a float op across
``ldmxcsr``, so a loop loads its operands after one and stores its results before the other; a
value held in a register across either end is flushed explicitly, and no loop computes a float
from constants alone (LLVM folds those under IEEE rules).
"""

from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic, models, register_model

from . import cpu

HAS_DAZ: bool = cpu.HAS_DAZ
"""The host has MXCSR's DAZ bit (:mod:`meshnb.cpu` decides it)."""
_F32 = ir.FloatType()
_I32 = ir.IntType(32)


class F32xN(types.Type):
    """The numba type of an LLVM ``<n x float>`` value."""

    def __init__(self, n: int) -> None:
        self.n = n
        super().__init__(name=f"f32x{n}")


f32x2, f32x4, f32x8 = (F32xN(n) for n in (2, 4, 8))
_BY_WIDTH = {t.n: t for t in (f32x2, f32x4, f32x8)}


@register_model(F32xN)
class _F32xNModel(models.PrimitiveModel):
    def __init__(self, dmm, fe_type):
        super().__init__(dmm, fe_type, ir.VectorType(_F32, fe_type.n))


def _iconst(value: int, n: int) -> ir.Constant:
    """``value`` as an i32 (``n == 0``) or in every lane of an ``<n x i32>``."""
    v = value - (1 << 32) if value >= 1 << 31 else value
    return ir.Constant(_I32, v) if n == 0 else ir.Constant(ir.VectorType(_I32, n), [v] * n)


def _flush_words_ir(builder: ir.IRBuilder, u: ir.Value, n: int, canonical_nan: bool) -> ir.Value:
    """On i32 words (``n == 0``) or ``<n x i32>``: a zero exponent makes a signed zero; optionally NaN -> 0x7FFFFFFF."""
    tiny = builder.icmp_unsigned("==", builder.and_(u, _iconst(0x7F800000, n)), _iconst(0, n))
    u = builder.select(tiny, builder.and_(u, _iconst(0x80000000, n)), u)
    if canonical_nan:
        nan = builder.icmp_unsigned(">", builder.and_(u, _iconst(0x7FFFFFFF, n)), _iconst(0x7F800000, n))
        u = builder.select(nan, _iconst(0x7FFFFFFF, n), u)
    return u


def _flush_ir(builder: ir.IRBuilder, v: ir.Value, n: int, canonical_nan: bool) -> ir.Value:
    """:func:`_flush_words_ir` of float lanes (``n == 0``: a scalar float)."""
    ity, fty = (_I32, _F32) if n == 0 else (ir.VectorType(_I32, n), ir.VectorType(_F32, n))
    return builder.bitcast(_flush_words_ir(builder, builder.bitcast(v, ity), n, canonical_nan), fty)


def _is_f32_array(arr) -> bool:
    return isinstance(arr, types.Array) and arr.dtype in (types.float32, types.uint32) and arr.layout == "C"


def _lane_ptr(context, builder, arrty, arr, start, n):
    ary = context.make_array(arrty)(context, builder, arr)
    ptr = builder.gep(ary.data, [start])
    return builder.bitcast(ptr, ir.VectorType(_F32, n).as_pointer())


def _make_load(n: int):
    @intrinsic
    def load(typingctx, arr, start):
        """``arr[start : start + n]`` of a contiguous float32 array, as one vector (unchecked)."""
        if not (_is_f32_array(arr) and arr.dtype == types.float32 and isinstance(start, types.Integer)):
            return None

        def codegen(context, builder, sig, args):
            vty = ir.VectorType(_F32, n)
            ptr = _lane_ptr(context, builder, sig.args[0], args[0], args[1], n)
            return builder.load(ptr, align=4, typ=vty)

        return _BY_WIDTH[n](arr, start), codegen

    return load


load4, load8 = _make_load(4), _make_load(8)


@intrinsic
def store(typingctx, arr, start, v):
    """Write the lanes of ``v`` to ``arr[start:]`` (float32 values, or their bits in a uint32 array)."""
    if not (_is_f32_array(arr) and isinstance(v, F32xN) and isinstance(start, types.Integer)):
        return None

    def codegen(context, builder, sig, args):
        ptr = _lane_ptr(context, builder, sig.args[0], args[0], args[1], sig.args[2].n)
        builder.store(args[2], ptr, align=4)
        return context.get_dummy_value()

    return types.none(arr, start, v), codegen


def _make_splat(n: int):
    @intrinsic
    def splat(typingctx, x):
        """A vector with ``x`` in every one of its ``n`` lanes."""
        if x != types.float32:
            return None

        def codegen(context, builder, sig, args):
            vty = ir.VectorType(_F32, n)
            one = builder.insert_element(ir.Constant(vty, ir.Undefined), args[0], ir.Constant(_I32, 0))
            return builder.shuffle_vector(one, one, ir.Constant(ir.VectorType(_I32, n), [0] * n))

        return _BY_WIDTH[n](types.float32), codegen

    return splat


splat4, splat8 = _make_splat(4), _make_splat(8)


def _make_binary(op: str):
    @intrinsic
    def binary(typingctx, a, b):
        if not (isinstance(a, F32xN) and a == b):
            return None

        def codegen(context, builder, sig, args):
            return getattr(builder, op)(args[0], args[1])

        return a(a, b), codegen

    return binary


add, sub, mul = _make_binary("fadd"), _make_binary("fsub"), _make_binary("fmul")


# The step loops' float modes (:mod:`meshnb.loops`): mode Z with the x86 DAZ bit on (only the
# words leaving the loop flushed), mode Z with a flush after every op (any CPU), plain IEEE.
Z_DAZ, Z, IEEE = 0, 1, 2
MODES = (Z_DAZ, Z, IEEE)


def _mode(mode) -> int | None:
    """The value of a literal loop mode, else None (each mode's loop is its own machine code)."""
    if isinstance(mode, types.IntegerLiteral) and mode.literal_value in (Z_DAZ, Z, IEEE):
        return mode.literal_value
    return None


@intrinsic
def after(typingctx, v, mode):
    """``v`` (a vector or a float32) as an op's result in loop ``mode``: flushed in mode Z, as it is under DAZ, IEEE."""
    m = _mode(mode)
    if not (isinstance(v, F32xN) or v == types.float32) or m is None:
        return None
    n = v.n if isinstance(v, F32xN) else 0

    def codegen(context, builder, sig, args):
        return _flush_ir(builder, args[0], n, canonical_nan=False) if m == Z else args[0]

    return v(v, mode), codegen


# A step loop's words in and out, by the loop's mode: intrinsics, so that a first compile types
# no dispatcher for them (kernels.in_word and out_word are four dispatchers each).


@intrinsic
def in_word(typingctx, u, mode):
    """The float32 of word ``u`` in loop mode ``mode``: ``ftz_from_bits`` in both mode-Z loops, the bits in IEEE."""
    m = _mode(mode)
    if u != types.uint32 or m is None:
        return None

    def codegen(context, builder, sig, args):
        w = args[0] if m == IEEE else _flush_words_ir(builder, args[0], 0, canonical_nan=True)
        return builder.bitcast(w, _F32)

    return types.float32(u, mode), codegen


@intrinsic
def out_word(typingctx, f, mode):
    """The word written out for float32 ``f`` in loop ``mode``: ``ftz_bits`` in both mode-Z loops, the bits in IEEE."""
    m = _mode(mode)
    if f != types.float32 or m is None:
        return None

    def codegen(context, builder, sig, args):
        w = builder.bitcast(args[0], _I32)
        return w if m == IEEE else _flush_word_branches_ir(builder, w)

    return types.uint32(f, mode), codegen


def _flush_word_branches_ir(builder: ir.IRBuilder, w: ir.Value) -> ir.Value:
    """``floatz.flush_bits`` of one i32 as branches, not selects: LLVM keeps it off the step chain (4-7% faster)."""
    special, tiny_check, tiny, plain, done = (builder.append_basic_block() for _ in range(5))
    exp = builder.and_(w, _iconst(0x7F800000, 0))
    builder.cbranch(builder.icmp_unsigned("==", exp, _iconst(0x7F800000, 0)), special, tiny_check)
    builder.position_at_end(special)  # NaN -> canonical, infinity as it is
    nan = builder.icmp_unsigned("!=", builder.and_(w, _iconst(0x007FFFFF, 0)), _iconst(0, 0))
    builder.cbranch(nan, done, plain)
    builder.position_at_end(tiny_check)
    builder.cbranch(builder.icmp_unsigned("==", exp, _iconst(0, 0)), tiny, plain)
    builder.position_at_end(tiny)  # zero or subnormal -> the zero of its sign
    signed_zero = builder.and_(w, _iconst(0x80000000, 0))
    builder.branch(done)
    builder.position_at_end(plain)
    builder.branch(done)
    builder.position_at_end(done)
    word = builder.phi(_I32)
    word.add_incoming(_iconst(0x7FFFFFFF, 0), special)
    word.add_incoming(signed_zero, tiny)
    word.add_incoming(w, plain)
    return word


@intrinsic
def out(typingctx, v, mode):
    """Lanes as the words written out in loop mode ``mode``: ``ftz_bits`` in both mode-Z loops, as they are in IEEE."""
    m = _mode(mode)
    if not isinstance(v, F32xN) or m is None:
        return None

    def codegen(context, builder, sig, args):
        return args[0] if m == IEEE else _flush_ir(builder, args[0], sig.args[0].n, canonical_nan=True)

    return v(v, mode), codegen


@intrinsic
def flush(typingctx, v):
    """Mode Z's subnormal flush in every lane (NaNs kept), for loops that choose their mode at run time."""
    if not isinstance(v, F32xN):
        return None

    def codegen(context, builder, sig, args):
        return _flush_ir(builder, args[0], sig.args[0].n, canonical_nan=False)

    return v(v), codegen


@intrinsic
def lane(typingctx, v, i):
    """Lane ``i`` of ``v`` as a float32."""
    if not (isinstance(v, F32xN) and isinstance(i, types.Integer)):
        return None

    def codegen(context, builder, sig, args):
        return builder.extract_element(args[0], args[1])

    return types.float32(v, i), codegen


def _make_shuffle(name: str, n_in: int, mask: list[int]):
    """An intrinsic picking lanes ``mask`` of the concatenation of two ``n_in``-lane vectors."""

    @intrinsic
    def shuffle(typingctx, a, b):
        if not (isinstance(a, F32xN) and a.n == n_in and a == b):
            return None

        def codegen(context, builder, sig, args):
            return builder.shuffle_vector(args[0], args[1], ir.Constant(ir.VectorType(_I32, len(mask)), mask))

        return _BY_WIDTH[len(mask)](a, b), codegen

    shuffle.__name__ = name
    return shuffle


# Halving shuffles for a sum reduced alone to one lane (lanes l and l + n/2).
half8_lo = _make_shuffle("half8_lo", 8, list(range(4)))
half8_hi = _make_shuffle("half8_hi", 8, list(range(4, 8)))
half4_lo = _make_shuffle("half4_lo", 4, [0, 1])
half4_hi = _make_shuffle("half4_hi", 4, [2, 3])
# The butterfly's own form on one 8-lane vector: lane l gets lane l xor o (o = 4, 2, 1), so
# after the three levels every lane holds the sum, already splat for the next step's params.
xor4 = _make_shuffle("xor4", 8, [4, 5, 6, 7, 0, 1, 2, 3])
xor2 = _make_shuffle("xor2", 8, [2, 3, 0, 1, 6, 7, 4, 5])
xor1 = _make_shuffle("xor1", 8, [1, 0, 3, 2, 5, 4, 7, 6])
# Lane j of a 4-lane vector in all 8 lanes (the params a, b, c, d for the lanes).
bcast8_0 = _make_shuffle("bcast8_0", 4, [0] * 8)
bcast8_1 = _make_shuffle("bcast8_1", 4, [1] * 8)
bcast8_2 = _make_shuffle("bcast8_2", 4, [2] * 8)
bcast8_3 = _make_shuffle("bcast8_3", 4, [3] * 8)


@intrinsic
def first_lanes(typingctx, a, b, c, d):
    """Lane 0 of four 8-lane vectors as one 4-lane vector (splat sums as the words written out)."""
    if not all(v == f32x8 for v in (a, b, c, d)):
        return None

    def codegen(context, builder, sig, args):
        pair = ir.Constant(ir.VectorType(_I32, 2), [0, 8])
        ab = builder.shuffle_vector(args[0], args[1], pair)
        cd = builder.shuffle_vector(args[2], args[3], pair)
        return builder.shuffle_vector(ab, cd, ir.Constant(ir.VectorType(_I32, 4), [0, 1, 2, 3]))

    return f32x4(a, b, c, d), codegen


def _mxcsr_call(builder: ir.IRBuilder, name: str, ptr: ir.Value) -> None:
    fnty = ir.FunctionType(ir.VoidType(), [ir.IntType(8).as_pointer()])
    fn = cgutils.get_or_insert_function(builder.module, fnty, name)
    builder.call(fn, [builder.bitcast(ptr, ir.IntType(8).as_pointer())])


def _barrier(builder: ir.IRBuilder) -> None:
    """A compiler barrier: no load or store moves across it, so no float op of the loop does."""
    builder.asm(ir.FunctionType(ir.VoidType(), []), "", "~{memory}", [], side_effect=True)


@intrinsic
def daz_on(typingctx):
    """Set MXCSR's DAZ bit and clear FTZ; returns the old MXCSR (0 and no effect off x86)."""

    def codegen(context, builder, sig, args):
        if not HAS_DAZ:
            return ir.Constant(_I32, 0)
        slot = cgutils.alloca_once(builder, _I32)
        _mxcsr_call(builder, "llvm.x86.sse.stmxcsr", slot)
        old = builder.load(slot)
        new = builder.and_(builder.or_(old, ir.Constant(_I32, 0x0040)), ir.Constant(_I32, ~0x8000))
        builder.store(new, slot)
        _mxcsr_call(builder, "llvm.x86.sse.ldmxcsr", slot)
        _barrier(builder)
        return old

    return types.uint32(), codegen


@intrinsic
def mxcsr_restore(typingctx, old):
    """Put back the MXCSR that :func:`daz_on` returned."""
    if not isinstance(old, types.Integer):
        return None

    def codegen(context, builder, sig, args):
        if HAS_DAZ:
            _barrier(builder)
            slot = cgutils.alloca_once(builder, _I32)
            builder.store(builder.trunc(args[0], _I32) if args[0].type != _I32 else args[0], slot)
            _mxcsr_call(builder, "llvm.x86.sse.ldmxcsr", slot)
        return context.get_dummy_value()

    return types.none(old), codegen
