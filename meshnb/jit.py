"""meshnb's one numba decorator, and the one policy for compiling its kernels.

Every njit function of meshnb is made with :func:`jit`: machine code cached beside the package
(``cache=True``: safe, since every kernel is a pure function of its arguments and module-level
constants), and ``error_model="numpy"``, a correctness rule (IEEE: a division by zero gives inf or
NaN, never an exception).  Never ``fastmath``: it allows FMA contraction and reassociation, which
change mode Z's bits.

Inlining policy: helpers are plain njit functions that LLVM inlines (numba's own IR inlining,
``inline="always"``, is not used: it recompiles the callee into every caller, which multiplied
the cold-start compile time without a measured gain).  Per-mode variants of a loop are made by
passing the mode as a literal argument (``numba.literally``) or by one closure per mode, built
once by a factory: numba then compiles only the modes a run uses.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from numba import njit


def jit(**options: Any) -> Callable[[Callable[..., Any]], Any]:
    """meshnb's one njit: ``cache=True`` and ``error_model="numpy"``, plus ``options``."""
    return njit(cache=True, error_model="numpy", **options)
