"""meshnb's own CUDA kernels as PTX, compiled without a GPU (numba-cuda and the toolkit wheels),
for :mod:`meshnb.conformance.audit`.  With no driver, the compile stands in a device of the
capability asked for (numba-cuda compiles device functions for the current device's).
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import types
from collections.abc import Iterator
from typing import Any

from .host import CudaUnavailable, numba_cuda

TARGETS = ((8, 0), (9, 0))
STEPS_SIG = "(uint32[:, ::1], int64, int64, uint32[:, :, ::1], boolean, boolean)"
INIT_SIG = "(uint32[::1],)"


@contextlib.contextmanager
def _stand_in_device(cc: tuple[int, int]) -> Iterator[None]:
    dispatcher: Any = importlib.import_module("numba.cuda.dispatcher")
    if numba_cuda().is_available():
        yield
        return
    real = dispatcher.get_current_device
    dispatcher.get_current_device = lambda: types.SimpleNamespace(compute_capability=cc)
    try:
        yield
    finally:
        dispatcher.get_current_device = real


def compile_meshnb(cc: tuple[int, int]) -> dict[str, str]:
    """PTX of meshnb's kernels for ``cc``: ``{"steps_kernel": ..., "init_kernel": ...}``;
    :class:`~meshnb.cuda.host.CudaUnavailable` without numba-cuda, or in the simulator."""
    if importlib.util.find_spec("numba_cuda") is None:
        raise CudaUnavailable("compiling meshnb's kernels needs numba-cuda: pip install 'meshnb[cuda]'")
    from .host import simulated

    if simulated():
        raise CudaUnavailable("the simulator compiles no PTX: unset NUMBA_ENABLE_CUDASIM")
    from . import image

    out: dict[str, str] = {}
    with _stand_in_device(cc):
        for name, kernel, sig, options in (
            ("steps_kernel", image.steps_kernel, STEPS_SIG, image.STEPS_JIT),
            ("init_kernel", image.init_kernel, INIT_SIG, {}),
        ):
            ptx, _ = numba_cuda().compile_ptx(kernel.py_func, sig, cc=cc, **options)
            out[name] = ptx
    return out
