"""meshnb's one numba decorator (:func:`jit`): its compile policy, its dispatcher and cache, and the door.

Every njit function is compiled with ``cache=True`` and ``error_model="numpy"`` (a division by zero
gives inf or NaN), never ``fastmath`` (contraction and reassociation change mode Z's bits), no
``inline=`` (LLVM inlines plain njit helpers) and no C-callable wrapper.  A kernel that Python calls
may declare the types it accepts (``jit(accepts=...)``): a call from Python with other types is
refused with a ``TypeError`` naming the argument, checked only where numba would compile or load a
new variant.  Its :class:`FunctionCache` loads a cached variant without refreshing numba's
registries; both hooks are numba's private methods, held by tests/test_jit.py.  Why, measured:
docs/performance.md ("Start-up", "Hand-written, measured against the library").
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np
from numba import types
from numba.core import caching
from numba.core.dispatcher import OmittedArg
from numba.core.registry import CPUDispatcher
from numba.core.runtime import rtsys  # type: ignore[attr-defined]

T = TypeVar("T")

_SCALARS: dict[str, Any] = {
    "float32": types.float32,
    "uint32": types.uint32,
    "uint64": types.uint64,
    "int64": types.int64,
    "uint8": types.uint8,
    "bool": types.boolean,
}
_SPEC = re.compile(r"^(\w+)(?:\[(.*)\])?$")


def is_int(x: Any) -> bool:
    """Whether ``x`` is an integer: ``int`` or a numpy integer, not ``bool``."""
    return isinstance(x, (int, np.integer)) and not isinstance(x, (bool, np.bool_))


@dataclass(frozen=True)
class Accepts:
    """What one argument of a checked kernel may be: a scalar (``ndim == 0``) or an array (-1: any ndim)."""

    spec: str  # as written: "float32", "bool", "uint32[:]", "uint8[::1]", "uint32[:, ::1] writeable"
    dtype: Any  # a numba scalar type
    ndim: int
    contiguous: bool
    writeable: bool = False

    @classmethod
    def parse(cls, spec: str) -> Accepts:
        """The rule of one type as ``accepts`` writes it; ``ValueError`` for one it does not know."""
        base, writeable, flag = spec.partition(" writeable")
        if flag or (writeable and "[" not in base):
            raise ValueError(f"unknown argument type {spec!r}: 'writeable' follows an array type")
        m = _SPEC.match(base.replace(" ", ""))
        if m is None or m.group(1) not in _SCALARS:
            raise ValueError(f"unknown argument type {spec!r}")
        dtype, dims = _SCALARS[m.group(1)], m.group(2)
        if dims is None or dims == "...":  # a scalar, or an array of any number of dimensions
            return cls(spec, dtype, 0 if dims is None else -1, False, bool(writeable))
        parts = dims.split(",")
        if not all(p in (":", "::1") for p in parts) or "::1" in parts[:-1]:
            raise ValueError(f"unknown array type {spec!r}: dimensions are ':' (the last may be '::1')")
        return cls(spec, dtype, len(parts), parts[-1] == "::1", bool(writeable))

    def admits(self, t: Any) -> bool:
        """Whether numba type ``t`` (a Python value's, ``numba.typeof``) is accepted."""
        if self.ndim == 0:
            return bool(t == self.dtype)
        return (
            isinstance(t, types.Array)
            and t.dtype == self.dtype
            and self.ndim in (-1, t.ndim)
            and (not self.contiguous or t.layout == "C")
            and (not self.writeable or t.mutable)
        )

    def wanted(self) -> str:
        """How a refusal names what the argument must be."""
        if self.ndim == 0:
            return "a Python bool" if self.dtype == types.boolean else f"a numpy {self.dtype} (np.{self.dtype})"
        layout = (" writeable" if self.writeable else "") + (" C-contiguous" if self.contiguous else "")
        if self.ndim < 0:
            return f"a {self.dtype} array"
        return f"a{layout} {self.dtype} array of {self.ndim} dimension{'s' if self.ndim > 1 else ''}"


def _described(value: Any, t: Any) -> str:
    if isinstance(value, np.ndarray):
        order = "C-contiguous" if value.flags.c_contiguous else "non-contiguous"
        order = order if value.flags.writeable else f"read-only {order}"
        return f"a {order} {value.dtype} array of {value.ndim} dimension{'s' if value.ndim != 1 else ''}"
    if isinstance(value, np.generic):
        return f"a numpy {value.dtype}"
    return f"a Python {type(value).__name__} (numba would type it {t})"


class FunctionCache(caching.FunctionCache):
    """numba's cache of compiled variants, loading one without refreshing numba's registries."""

    def load_overload(self, sig: Any, target_context: Any) -> Any:
        """The cached variant of ``sig``, or None: numba's private ``_load_overload`` without the
        registry refresh (loaded code needs only NRT's symbols, which ``rtsys.initialize`` adds)."""
        rtsys.initialize(target_context)
        load = getattr(self, "_load_overload", None)
        if load is None:  # a numba that renamed its hook: its own load, with the refresh
            return super().load_overload(sig, target_context)  # type: ignore[no-untyped-call]
        return load(sig, target_context)


class Dispatcher(CPUDispatcher):
    """numba's CPU dispatcher with meshnb's :class:`FunctionCache`; :func:`jit` makes every njit function one."""

    def enable_caching(self) -> None:
        """Cache compiled variants beside the module (``cache=True``), with meshnb's cache."""
        self._cache = FunctionCache(self.py_func)  # type: ignore[no-untyped-call]


class CheckedDispatcher(Dispatcher):
    """A dispatcher that refuses a call from Python whose argument types are not those declared."""

    def __init__(
        self,
        *args: Any,
        accepts: Mapping[int, tuple[str, Accepts]] | None = None,
        public_name: str | None = None,
        **kws: Any,
    ) -> None:
        super().__init__(*args, **kws)
        # (numba rebuilds a pickled dispatcher without ``accepts``: it then checks nothing)
        self._accepts = dict(accepts or {})
        self._public_name = public_name or f"{self.py_func.__module__}.{self.py_func.__qualname__}"

    # numba's private hook: where its C dispatcher goes on a miss (keywords and defaults folded in).
    def _compile_for_args(self, *args: Any, **kws: Any) -> Any:
        for i, value in enumerate(args):
            if i not in self._accepts or isinstance(value, OmittedArg):
                continue
            name, rule = self._accepts[i]
            try:
                t = self.typeof_pyval(value)
            except (ValueError, TypeError):  # a value numba cannot type at all
                t = None
            if t is None or not rule.admits(t):
                raise TypeError(
                    f"{self._public_name}: argument {name!r} must be {rule.wanted()}, not {_described(value, t)}"
                )
        return super()._compile_for_args(*args, **kws)  # type: ignore[misc]


def jit(
    accepts: Mapping[str, str] | None = None, name: str | None = None, **options: Any
) -> Callable[[Callable[..., Any]], Any]:
    """meshnb's one njit: ``cache=True`` and ``error_model="numpy"``, plus ``options``."""
    if "inline" in options:
        raise ValueError("meshnb.jit: no numba IR inlining (inline=): LLVM inlines plain njit helpers")
    targetoptions = {"nopython": True, "error_model": "numpy", "no_cfunc_wrapper": True, **options}
    if accepts is None:

        def plain(func: Callable[..., Any]) -> Any:
            disp = Dispatcher(py_func=func, locals={}, targetoptions=targetoptions)
            disp.enable_caching()
            return disp

        return plain
    rules = {arg: Accepts.parse(spec) for arg, spec in accepts.items()}

    def wrap(func: Callable[..., Any]) -> Any:
        import inspect

        params = list(inspect.signature(func).parameters)
        if set(params) != set(rules):
            raise ValueError(f"{func.__qualname__}: accepts must list exactly its arguments {params}")
        disp = CheckedDispatcher(
            py_func=func,
            locals={},
            targetoptions=targetoptions,
            accepts={i: (arg, rules[arg]) for i, arg in enumerate(params)},
            public_name=name,
        )
        disp.enable_caching()
        return disp

    return wrap


def per_mode(make: Callable[[int], T], modes: Iterable[int]) -> dict[int, T]:
    """One compiled entry per loop mode, ``{mode: make(mode)}``: numba compiles a mode's on its first call."""
    return {m: make(m) for m in modes}
