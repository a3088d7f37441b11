"""The CUDA image's tests run in numba-cuda's simulator (``NUMBA_ENABLE_CUDASIM=1``): no GPU needed.

The variable must be set before ``numba.cuda`` is first imported, so it is set here, at
collection.  Tests that need numba-cuda skip without it (the ``[cuda]`` extra); the audit's
tests on committed PTX need nothing but meshnb.
"""

from __future__ import annotations

import importlib.util
import os

import pytest

os.environ["NUMBA_ENABLE_CUDASIM"] = "1"

HAS_NUMBA_CUDA = importlib.util.find_spec("numba_cuda") is not None
needs_numba_cuda = pytest.mark.skipif(not HAS_NUMBA_CUDA, reason="numba-cuda is not installed (the [cuda] extra)")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = os.path.dirname(__file__)
    for item in items:
        if str(item.fspath).startswith(here):
            item.add_marker(pytest.mark.cuda)
