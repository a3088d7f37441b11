"""meshnb.jit: the one decorator's door (``accepts``) and the per-mode table."""

from __future__ import annotations

import numpy as np
import pytest
from numba import njit

from meshnb.jit import Accepts, jit, per_mode


@jit(accepts={"a": "float32[::1] writeable", "x": "float32", "flag": "bool"})
def _scale(a, x, flag=True):
    for i in range(a.shape[0]):
        a[i] = a[i] * x if flag else a[i]
    return a.shape[0]


@njit
def _scale_from_njit(a, x):
    return _scale(a, x, True)  # njit to njit: typed by numba, not by the door


def test_the_door_admits_the_declared_types_and_names_the_argument_otherwise():
    a = np.ones(3, np.float32)
    assert _scale(a, np.float32(2)) == 3 and a.tolist() == [2, 2, 2]
    assert _scale(a, np.float32(2), False) == 3 and a.tolist() == [2, 2, 2]
    cases = [
        ((a, 2.0), "'x' must be a numpy float32 .np.float32., not a Python float"),
        ((a, np.float64(2)), "'x' must be a numpy float32 .np.float32., not a numpy float64"),
        ((a.astype(np.float64), np.float32(2)), "'a' must be a writeable C-contiguous float32 array of 1 dimension"),
        ((np.ones(6, np.float32)[::2], np.float32(2)), "not a non-contiguous float32 array"),
        ((a, np.float32(2), 1), "'flag' must be a Python bool"),
        (("abc", np.float32(2)), "'a' must be .*, not a Python str"),
    ]
    frozen = np.ones(3, np.float32)
    frozen.flags.writeable = False
    cases.append(((frozen, np.float32(2)), "not a read-only C-contiguous float32 array"))
    for args, message in cases:
        with pytest.raises(TypeError, match=message) as caught:
            _scale(*args)
        assert str(caught.value).startswith("tests.test_jit._scale: argument")
    assert len(_scale.signatures) == 2  # (flag omitted, flag given): no variant for what was refused


def test_calls_from_njit_code_are_numba_typed():
    a = np.ones(2, np.float32)
    assert _scale_from_njit(a, np.float32(3)) == 2 and a.tolist() == [3, 3]


def test_accepts_specs():
    assert Accepts.parse("uint32[:, ::1] writeable") == Accepts(
        "uint32[:, ::1] writeable", Accepts.parse("uint32").dtype, 2, True, True
    )
    assert Accepts.parse("float32[...]").ndim == -1
    for bad in ("float16", "float32 writeable", "uint32[::1, :]", "uint32[1:]"):
        with pytest.raises(ValueError, match="unknown"):
            Accepts.parse(bad)
    with pytest.raises(ValueError, match="accepts must list exactly its arguments"):
        jit(accepts={"a": "float32"})(lambda a, b: a)


def test_per_mode_builds_one_entry_per_mode():
    made: list[int] = []
    table = per_mode(lambda m: made.append(m) or m * 10, (0, 1, 2))
    assert table == {0: 0, 1: 10, 2: 20} and made == [0, 1, 2]


def test_numba_ir_inlining_is_refused():
    """The one inlining policy (plain njit helpers, inlined by LLVM) is the decorator's rule."""
    with pytest.raises(ValueError, match="no numba IR inlining"):
        jit(inline="always")
