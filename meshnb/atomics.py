"""Shared-memory words for njit code: acquire loads, release stores, futexes and polite waits.

Members whose exchange page is in memory publish and read it from njit code with the GIL released
(:mod:`meshnb.loops.grouped`), ordered by :func:`load_acquire` and :func:`store_release` alone.
libc's ``sched_yield``, ``clock_gettime`` and ``syscall`` are bound by name, so the code that calls
them is cached like the rest.
"""

from __future__ import annotations

import ctypes
import platform
import sys

import llvmlite.binding as llvm
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from . import cpu

_X86 = cpu.IS_X86  # the host has ``pause`` (the one place that decides it: meshnb.cpu)
_YIELD, _CLOCK, _SYSCALL = "meshnb_sched_yield", "meshnb_clock_gettime", "meshnb_syscall"
_CLOCK_MONOTONIC = 1  # Linux's (and the BSDs' differ: there the clock reads 0, and waits count spins only)
_LINUX = sys.platform.startswith("linux")


def _bind(name: str, symbol: str) -> bool:
    """Bind libc's ``name`` as ``symbol`` for njit code; whether libc has it."""
    try:
        fn = getattr(ctypes.CDLL(None), name)
    except (OSError, AttributeError):
        return False
    llvm.add_symbol(symbol, ctypes.cast(fn, ctypes.c_void_p).value)
    return True


HAS_YIELD = _bind("sched_yield", _YIELD)
HAS_CLOCK = _bind("clock_gettime", _CLOCK) and _LINUX


def _is_word_array(arr, words=(types.uint32, types.uint64)) -> bool:
    return isinstance(arr, types.Array) and arr.ndim == 1 and arr.layout == "C" and arr.dtype in words


def _ptr(context, builder, arrty, arr, index):
    ary = context.make_array(arrty)(context, builder, arr)
    return builder.gep(ary.data, [index])


@intrinsic
def load_acquire(typingctx, arr, index):
    """``arr[index]`` (uint32 or uint64, unchecked) as an atomic acquire load."""
    if not (_is_word_array(arr) and isinstance(index, types.Integer)):
        return None

    def codegen(context, builder, sig, args):
        ptr = _ptr(context, builder, sig.args[0], args[0], args[1])
        return builder.load_atomic(ptr, "acquire", align=sig.args[0].dtype.bitwidth // 8)

    return arr.dtype(arr, index), codegen


@intrinsic
def store_release(typingctx, arr, index, value):
    """``arr[index] = value`` (uint32 or uint64, unchecked) as an atomic release store."""
    if not (_is_word_array(arr) and isinstance(index, types.Integer) and isinstance(value, types.Integer)):
        return None

    def codegen(context, builder, sig, args):
        arrty = sig.args[0]
        ptr = _ptr(context, builder, arrty, args[0], args[1])
        v = context.cast(builder, args[2], sig.args[2], arrty.dtype)
        builder.store_atomic(v, ptr, "release", align=arrty.dtype.bitwidth // 8)
        return context.get_dummy_value()

    return types.none(arr, index, value), codegen


def _pause(builder: ir.IRBuilder) -> None:
    fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(ir.VoidType(), []), "llvm.x86.sse2.pause")
    builder.call(fn, [])


@intrinsic
def cpu_relax(typingctx):
    """The spin-loop hint (x86 ``pause``); a compiler barrier elsewhere."""

    def codegen(context, builder, sig, args):
        if _X86:
            _pause(builder)
        else:
            builder.asm(ir.FunctionType(ir.VoidType(), []), "", "~{memory}", [], side_effect=True)
        return context.get_dummy_value()

    return types.none(), codegen


@intrinsic
def yield_cpu(typingctx):
    """``sched_yield()``: let another thread or process run on this core (a pause where absent)."""

    def codegen(context, builder, sig, args):
        if HAS_YIELD:
            fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(ir.IntType(32), []), _YIELD)
            builder.call(fn, [])
        elif _X86:
            _pause(builder)
        return context.get_dummy_value()

    return types.none(), codegen


@intrinsic
def monotonic_ns(typingctx):
    """``clock_gettime(CLOCK_MONOTONIC)`` in nanoseconds (int64; 0 where the clock is not bound): a wait
    in njit code bounds itself in wall time, which counting spins cannot do on a busy machine."""

    def codegen(context, builder, sig, args):
        i64 = ir.IntType(64)
        if not HAS_CLOCK:
            return ir.Constant(i64, 0)
        timespec = ir.LiteralStructType([i64, i64])  # tv_sec, tv_nsec: two longs on 64-bit Linux
        fnty = ir.FunctionType(ir.IntType(32), [ir.IntType(32), timespec.as_pointer()])
        fn = cgutils.get_or_insert_function(builder.module, fnty, _CLOCK)
        ts = cgutils.alloca_once(builder, timespec)
        builder.call(fn, [ir.Constant(ir.IntType(32), _CLOCK_MONOTONIC), ts])
        sec = builder.load(cgutils.gep_inbounds(builder, ts, 0, 0))
        nsec = builder.load(cgutils.gep_inbounds(builder, ts, 0, 1))
        return builder.add(builder.mul(sec, ir.Constant(i64, 1_000_000_000)), nsec)

    return types.int64(), codegen


# --- Futexes (Linux): a waiter sleeps in the kernel on a word until its publisher wakes it

_SYS_FUTEX = {"x86_64": 202, "amd64": 202, "aarch64": 98, "arm64": 98}  # the syscall's number per machine
FUTEX_WAIT, FUTEX_WAKE, FUTEX_PRIVATE_FLAG = 0, 1, 128  # linux/futex.h
_EAGAIN, _ETIMEDOUT, _EINTR = 11, 110, 4


_FUTEX_NR = _SYS_FUTEX.get(platform.machine().lower(), 0) if _LINUX else 0  # 0: no futexes here
_FUTEX_NR = _FUTEX_NR if _FUTEX_NR and _bind("syscall", _SYSCALL) else 0
HAS_FUTEX = _FUTEX_NR != 0


def _syscall6(builder: ir.IRBuilder, args: list) -> ir.Value:
    i64 = ir.IntType(64)
    fnty = ir.FunctionType(i64, [i64], var_arg=True)  # long syscall(long number, ...)
    fn = cgutils.get_or_insert_function(builder.module, fnty, _SYSCALL)
    return builder.call(fn, [ir.Constant(i64, _FUTEX_NR), *args])


@intrinsic
def futex_wait(typingctx, arr, index, expected, timeout_ns, private):
    """Sleep while ``arr[index]`` (uint32, unchecked) is ``expected``, at most ``timeout_ns``
    (``FUTEX_WAIT``; ``private``: the word is in this process's memory only); returns 0 when woken,
    -1 when the word had changed, the timeout passed or a signal came (all: look again), and -1 at
    once where there are no futexes (:data:`HAS_FUTEX` false)."""
    ints = all(isinstance(a, types.Integer) for a in (index, expected, timeout_ns))
    if not (_is_word_array(arr, (types.uint32,)) and ints and isinstance(private, (types.Boolean, types.Integer))):
        return None

    def codegen(context, builder, sig, args):
        i64, i32 = ir.IntType(64), ir.IntType(32)
        if not HAS_FUTEX:
            return ir.Constant(i64, -1)
        ptr = _ptr(context, builder, sig.args[0], args[0], args[1])
        want = context.cast(builder, args[2], sig.args[2], types.uint32)
        ns = context.cast(builder, args[3], sig.args[3], types.int64)
        flag = context.cast(builder, args[4], sig.args[4], types.boolean)
        op = builder.select(flag, ir.Constant(i32, FUTEX_WAIT | FUTEX_PRIVATE_FLAG), ir.Constant(i32, FUTEX_WAIT))
        timespec = ir.LiteralStructType([i64, i64])
        ts = cgutils.alloca_once(builder, timespec)
        billion = ir.Constant(i64, 1_000_000_000)
        builder.store(builder.sdiv(ns, billion), cgutils.gep_inbounds(builder, ts, 0, 0))
        builder.store(builder.srem(ns, billion), cgutils.gep_inbounds(builder, ts, 0, 1))
        null = ir.Constant(ir.IntType(8).as_pointer(), None)
        r = _syscall6(
            builder,
            [builder.ptrtoint(ptr, i64), builder.zext(op, i64), builder.zext(want, i64),
             builder.ptrtoint(ts, i64), builder.ptrtoint(null, i64), ir.Constant(i64, 0)],
        )  # fmt: skip
        return builder.select(builder.icmp_signed("==", r, ir.Constant(i64, 0)), r, ir.Constant(i64, -1))

    return types.int64(arr, index, expected, timeout_ns, private), codegen


@intrinsic
def futex_wake(typingctx, arr, index, private):
    """Wake every thread or process asleep on ``arr[index]`` (uint32, unchecked) in
    :func:`futex_wait` (``FUTEX_WAKE``); returns how many woke (0 without futexes)."""
    if not (_is_word_array(arr, (types.uint32,)) and isinstance(index, types.Integer)):
        return None
    if not isinstance(private, (types.Boolean, types.Integer)):
        return None

    def codegen(context, builder, sig, args):
        i64, i32 = ir.IntType(64), ir.IntType(32)
        if not HAS_FUTEX:
            return ir.Constant(i64, 0)
        ptr = _ptr(context, builder, sig.args[0], args[0], args[1])
        flag = context.cast(builder, args[2], sig.args[2], types.boolean)
        op = builder.select(flag, ir.Constant(i32, FUTEX_WAKE | FUTEX_PRIVATE_FLAG), ir.Constant(i32, FUTEX_WAKE))
        zero = ir.Constant(i64, 0)
        return _syscall6(
            builder, [builder.ptrtoint(ptr, i64), builder.zext(op, i64), ir.Constant(i64, 0x7FFFFFFF), zero, zero, zero]
        )

    return types.int64(arr, index, private), codegen


@intrinsic
def fetch_add(typingctx, arr, index, delta):
    """``arr[index] += delta`` as one atomic read-modify-write (sequentially consistent; uint32 or
    uint64, unchecked); returns the old value."""
    if not (_is_word_array(arr) and isinstance(index, types.Integer) and isinstance(delta, types.Integer)):
        return None

    def codegen(context, builder, sig, args):
        arrty = sig.args[0]
        ptr = _ptr(context, builder, arrty, args[0], args[1])
        v = context.cast(builder, args[2], sig.args[2], arrty.dtype)
        return builder.atomic_rmw("add", ptr, v, "seq_cst")

    return arr.dtype(arr, index, delta), codegen


@intrinsic
def fence(typingctx):
    """A sequentially consistent fence: a store before it is visible before any load after it
    (``mfence`` on x86)."""

    def codegen(context, builder, sig, args):
        builder.fence("seq_cst")
        return context.get_dummy_value()

    return types.none(), codegen
