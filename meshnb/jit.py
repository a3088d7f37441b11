"""meshnb's one numba decorator, the one policy for compiling its kernels, and their door checks.

Every njit function of meshnb is made with :func:`jit`: machine code cached beside the package
(``cache=True``: safe, since every kernel is a pure function of its arguments and module-level
constants), and ``error_model="numpy"``, a correctness rule (IEEE: a division by zero gives inf or
NaN, never an exception).  Never ``fastmath``: it allows FMA contraction and reassociation, which
change mode Z's bits.

**Inlining** (the one policy): helpers are plain njit functions, and LLVM inlines them into their
callers when it optimises the caller with its callees.  numba's own IR inlining
(``inline="always"``) is not used by the step loops: it types and lowers the callee again inside
every caller, which multiplied the cold-start compile time and gained nothing measurable, since
LLVM inlines the small helpers anyway.  The smallest helpers (a flush of one word, a vector op)
are ``@intrinsic`` (:mod:`meshnb.vec`): they emit their few LLVM instructions straight into the
caller, with no dispatcher of their own to type, lower and optimise (each such dispatcher cost
~50 ms of a cold start).  The sweep loop (:mod:`meshnb.loops.sweep`) follows the same policy.

**Per-mode variants** (the one pattern): a loop whose float mode must be a compile-time constant
(``vec.Z_DAZ``, ``vec.Z``, ``vec.IEEE``: each mode its own straight machine code) is written as a
factory ``_make_x(mode)`` that returns an njit closure; numba reads ``mode`` as a constant, and
passes it as a literal to the helpers it calls.  :func:`per_mode` builds the table of one closure
per mode, and the Python wrapper picks one by the mode given: numba compiles a mode's variant on
its first call only.

**The door**: a public kernel that Python code may call declares the types it accepts
(``jit(accepts={...})``).  A call from Python with other types (a float64, a Python float, an
int64 array) is refused with a ``TypeError`` naming the argument, instead of compiling a variant
that computes other bits; the check runs only when numba would compile (or load from its cache) a
new variant, so a call with the right types costs nothing more, and calls from other njit code
are not checked at all (they are typed by numba).  The step loops' entries (``loops.run_tasks``,
``run_fused``, ``loops.grouped.run_page``) declare their arrays' dtype, dimensions, contiguity and
writeability the same way, and check their sizes first thing in njit (a ``ValueError``: a short
buffer would otherwise be written past its end); their Python wrappers check the scalars (counts,
the mode).  No Python-level array checks on the hot path: a checked call costs a few scalar
tests more than an unchecked one.

**Start-up** (docs/performance.md): every njit function is a :class:`Dispatcher`, numba's CPU
dispatcher with two changes for a short run's first call.  Its cache (:class:`FunctionCache`)
loads a cached variant without refreshing numba's typing and lowering registries, which a
compile needs but loaded machine code does not (0.3 s of imports and registry installs, a third
of a warm ``meshnb train --steps 64``): it initialises only numba's runtime (NRT), whose symbols
loaded code links against; a compile still refreshes them itself.  And no C-callable wrapper is
made (``no_cfunc_wrapper``): meshnb never passes a kernel as a first-class function, so the
wrapper was compiled and never called (16 ms of a cold start per function).  Neither changes a
kernel's machine code (a wrapper is a separate function beside it), nor what is cached where.
A helper that only njit code can call (its arguments are :mod:`meshnb.vec` vectors) is also made
without its CPython wrapper (``jit(no_cpython_wrapper=True)``, numba's option).
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
    """Whether ``x`` is an integer: ``int`` or a numpy integer, not ``bool``.

    The one copy of this rule: the loops' doors (below :mod:`meshnb.runspec`) use it here, every
    other module as :func:`meshnb.runspec.is_int`.

    Parameters
    ----------
    x : Any
        The value.

    Returns
    -------
    bool

    Examples
    --------
    >>> is_int(3), is_int(np.uint64(3)), is_int(True), is_int(3.0)
    (True, True, False, False)
    """
    return isinstance(x, (int, np.integer)) and not isinstance(x, (bool, np.bool_))


@dataclass(frozen=True)
class Accepts:
    """What one argument of a checked kernel may be: a scalar of ``dtype`` (``ndim == 0``) or an
    array of ``dtype`` with ``ndim`` dimensions (-1: any), C-contiguous if ``contiguous``,
    writeable if ``writeable``.

    Examples
    --------
    >>> from meshnb.jit import Accepts
    >>> rule = Accepts.parse("uint32[:, ::1] writeable")
    >>> rule.ndim, rule.contiguous, rule.writeable, str(rule.dtype)
    (2, True, True, 'uint32')
    """

    spec: str  # as written: "float32", "bool", "uint32[:]", "uint8[::1]", "uint32[:, ::1] writeable"
    dtype: Any  # a numba scalar type
    ndim: int
    contiguous: bool
    writeable: bool = False

    @classmethod
    def parse(cls, spec: str) -> Accepts:
        """The rule of one type as an entry's ``accepts`` writes it (``"float32"``, ``"uint8[::1]"``,
        ``"uint32[:] writeable"``); ``ValueError`` for one it does not know.

        Examples
        --------
        >>> from meshnb.jit import Accepts
        >>> Accepts.parse("float32[...]").ndim  # any number of dimensions
        -1
        >>> try:
        ...     Accepts.parse("float16")
        ... except ValueError as e:
        ...     print(e)
        unknown argument type 'float16'
        """
        base, _, flag = spec.partition(" writeable")
        if flag or (_ and "[" not in base):
            raise ValueError(f"unknown argument type {spec!r}: 'writeable' follows an array type")
        rule = cls._parse(spec, base)
        return cls(rule.spec, rule.dtype, rule.ndim, rule.contiguous, bool(_))

    @classmethod
    def _parse(cls, spec: str, base: str) -> Accepts:
        m = _SPEC.match(base.replace(" ", ""))
        if m is None or m.group(1) not in _SCALARS:
            raise ValueError(f"unknown argument type {spec!r}")
        dims = m.group(2)
        if dims is None:
            return cls(spec, _SCALARS[m.group(1)], 0, False)
        if dims == "...":  # any number of dimensions
            return cls(spec, _SCALARS[m.group(1)], -1, False)
        parts = dims.split(",")
        if not all(p in (":", "::1") for p in parts) or "::1" in parts[:-1]:
            raise ValueError(f"unknown array type {spec!r}: dimensions are ':' (the last may be '::1')")
        return cls(spec, _SCALARS[m.group(1)], len(parts), parts[-1] == "::1")

    def admits(self, t: Any) -> bool:
        """Whether numba type ``t`` (a Python value's, ``numba.typeof``) is accepted.

        Examples
        --------
        >>> import numba
        >>> import numpy as np
        >>> from meshnb.jit import Accepts
        >>> rule = Accepts.parse("uint8[::1]")
        >>> rule.admits(numba.typeof(np.zeros(4, np.uint8))), rule.admits(numba.typeof(np.zeros(8, np.uint8)[::2]))
        (True, False)
        """
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
        """How a refusal names what the argument must be.

        Examples
        --------
        >>> from meshnb.jit import Accepts
        >>> Accepts.parse("uint32[:, ::1] writeable").wanted(), Accepts.parse("float32").wanted()
        ('a writeable C-contiguous uint32 array of 2 dimensions', 'a numpy float32 (np.float32)')
        """
        if self.ndim == 0:
            kind = "a Python bool" if self.dtype == types.boolean else f"a numpy {self.dtype} (np.{self.dtype})"
            return kind
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
    """numba's cache of compiled variants (files beside the module), loading a variant without
    refreshing numba's registries (see the module docstring: start-up).

    Examples
    --------
    >>> from meshnb.kernels import loss
    >>> type(loss._cache).__name__, type(loss._cache).__mro__[1].__module__
    ('FunctionCache', 'numba.core.caching')
    """

    # Why numba's private ``_load_overload``: numba's public ``load_overload`` is it after a
    # ``target_context.refresh()``, which imports and installs every typing and lowering registry
    # (numba.cpython.*, numba.np.*: 0.25-0.3 s) that only a compile uses.  Loaded code needs NRT's
    # symbols (an array allocated in njit code calls it): rtsys.initialize adds them, as the
    # refresh does first.  tests/test_jit.py runs a warm start in a fresh process and fails if the
    # registries are loaded again (or if the bits differ).
    def load_overload(self, sig: Any, target_context: Any) -> Any:
        """The cached variant of ``sig``, or None (a miss: numba compiles it, refreshing then).

        Examples
        --------
        >>> from numba import types
        >>> from meshnb.kernels import loss
        >>> from numba.core.registry import cpu_target
        >>> sig = (types.float32[:], types.float32)
        >>> loss(np.zeros(5, np.float32), np.float32(1 / 32)) == 0  # compiled or loaded now
        True
        >>> cres = loss._cache.load_overload(sig, cpu_target.target_context)
        >>> cres is None or cres.signature.args == sig  # None where caching is off (a read-only tree)
        True
        """
        rtsys.initialize(target_context)
        load = getattr(self, "_load_overload", None)
        if load is None:  # a numba that renamed its hook: its own load, with the refresh
            return super().load_overload(sig, target_context)  # type: ignore[no-untyped-call]
        return load(sig, target_context)


class Dispatcher(CPUDispatcher):
    """numba's CPU dispatcher with meshnb's :class:`FunctionCache` (see the module docstring:
    start-up); :func:`jit` makes every njit function of meshnb one.

    Examples
    --------
    >>> from meshnb.jit import Dispatcher
    >>> from meshnb.floatz import flush_bits
    >>> isinstance(flush_bits, Dispatcher), flush_bits.targetoptions["no_cfunc_wrapper"]
    (True, True)
    """

    def enable_caching(self) -> None:
        """Cache compiled variants beside the module (``cache=True``), with meshnb's cache.

        Examples
        --------
        >>> from meshnb.floatz import flush_bits
        >>> type(flush_bits._cache).__module__
        'meshnb.jit'
        """
        self._cache = FunctionCache(self.py_func)  # type: ignore[no-untyped-call]


class CheckedDispatcher(Dispatcher):
    """A CPU dispatcher that refuses, with a ``TypeError`` naming the argument, a call from Python
    whose argument types are not those declared (see the module docstring: the door).

    Examples
    --------
    >>> import numpy as np
    >>> from meshnb.kernels import loss
    >>> type(loss).__name__
    'CheckedDispatcher'
    >>> try:
    ...     loss(np.zeros(5, np.float64), np.float32(1 / 32))
    ... except TypeError as e:
    ...     print(e)  # doctest: +NORMALIZE_WHITESPACE
    meshnb.kernels.loss: argument 'sums' must be a float32 array of 1 dimension,
    not a C-contiguous float64 array of 1 dimension
    """

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

    # Why numba's private hook, and nothing public (measured on the task path): the door
    # must act where numba would compile a new variant for a Python call, and only there.
    # ``_compile_for_args`` is that point (numba's C dispatcher calls it on a miss, with keywords
    # and defaults folded into ``args``); numba offers no public hook at it.  The public means
    # each fail one of the door's three promises:
    # - explicit signatures (``njit([sig, ...])``) compile every variant when the function is made:
    #   every mode of every per-mode loop at import, each array spec as up to four numba types
    #   (C or any layout, writeable or read-only), and "float32[...]" (any number of dimensions)
    #   as no finite list; and numba's own refusal ("No matching definition") names no argument;
    # - a checking wrapper in Python runs on every call: 0.75 us more a call of ``run_tasks`` (a
    #   plain wrapper 0.07 us), 11% of a task of 64 steps (``bench/test_bench_kernels.py::test_task``,
    #   6.6 us), and it is a Python function, which njit callers (every ``floatz`` helper is called
    #   from the kernels) cannot call;
    # - ``numba.extending`` (``overload``, ``typeof_impl``) types calls made inside njit code, not
    #   the dispatch of a Python call.
    # So the door overrides the one method, calls numba's own after its check, and
    # tests/test_jit.py fails (a float64 variant compiled, no TypeError) if a numba release
    # moves the hook.
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
    """meshnb's one njit: ``cache=True`` and ``error_model="numpy"``, plus ``options``.

    ``accepts`` (an entry's door) maps argument names to the types a Python caller may pass:
    ``"float32"``, ``"uint8"``, ``"uint32"``, ``"uint64"``, ``"int64"``, ``"bool"`` (exactly that
    numpy scalar type, or a Python bool), or arrays of those as ``"float32[:]"``,
    ``"uint32[:, :]"``, ``"uint8[::1]"`` (C-contiguous), ``"float32[...]"`` (any number of
    dimensions), followed by ``" writeable"`` for an array written in place.  Every argument of
    such a function must be listed.  ``name`` is how its errors name it (default: its own).
    numba's ``inline=`` is refused (the module docstring: LLVM inlines; numba's IR inlining made a
    digest kernel's first compile 3 s longer for no speed).

    Examples
    --------
    >>> from meshnb.jit import jit
    >>> from meshnb.kernels import step_sums
    >>> step_sums._cache.__class__.__name__  # cache=True: machine code kept beside the module
    'FunctionCache'
    >>> def apply_lr(p, lr):
    ...     p[:] *= lr
    >>> try:
    ...     jit(accepts=dict(p="float32[::1] writeable"))(apply_lr)  # lr is not listed
    ... except ValueError as e:
    ...     print(e)
    apply_lr: accepts must list exactly its arguments ['p', 'lr']
    >>> try:
    ...     jit(inline="always")
    ... except ValueError as e:
    ...     print(e)
    meshnb.jit: no numba IR inlining (inline=): LLVM inlines plain njit helpers
    """
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
    """One compiled entry per loop mode: ``{mode: make(mode)}`` (see the module docstring).

    Examples
    --------
    >>> from meshnb.jit import per_mode
    >>> from meshnb.vec import IEEE, MODES, Z, Z_DAZ
    >>> per_mode(lambda mode: f"loop {mode}", MODES)
    {0: 'loop 0', 1: 'loop 1', 2: 'loop 2'}
    """
    return {m: make(m) for m in modes}
