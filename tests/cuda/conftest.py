"""The CUDA image's tests run in numba-cuda's simulator (``NUMBA_ENABLE_CUDASIM=1``): no GPU needed.

The variable must be seen before ``numba.cuda`` is first imported: it is set here, at collection,
and numba's configuration (read when the root conftest imported meshnb, hence numba) is read again.
Nothing outside tests/cuda imports ``numba.cuda``.  Tests that need numba-cuda skip without it
(the ``[cuda]`` extra); the audit's tests on committed PTX need nothing but meshnb.
"""

from __future__ import annotations

import importlib.util
import os
import sys

import pytest

os.environ["NUMBA_ENABLE_CUDASIM"] = "1"
if "numba.cuda" not in sys.modules:
    from numba.core import config

    config.reload_config()

HAS_NUMBA_CUDA = importlib.util.find_spec("numba_cuda") is not None
needs_numba_cuda = pytest.mark.skipif(not HAS_NUMBA_CUDA, reason="numba-cuda is not installed (the [cuda] extra)")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = os.path.dirname(__file__)
    for item in items:
        if str(item.fspath).startswith(here):
            item.add_marker(pytest.mark.cuda)


@pytest.fixture(autouse=True)
def _quiet_float_warnings():
    # numpy float32 scalars warn on overflow and invalid results, which the hard pages make on
    # purpose (IEEE gives inf and NaN, as on the device)
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        yield
