"""What an executor's developer checks against, standing beside meshnb's layers.

- :mod:`~meshnb.testing.reference`: an independent numpy and plain-Python implementation of
  SPEC.md (no numba): the tests' oracle and the benchmarks' baselines;
- :mod:`~meshnb.testing.pages`: pages built to hit every rule of float mode Z;
- :func:`vectors`: the spec's test vectors (``vectors.json``, shipped with the package).

Nothing here imports the rest of meshnb, so it stays independent of what it checks.
"""

from __future__ import annotations

import json
from functools import cache
from importlib import resources
from typing import Any

from . import pages, reference

__all__ = ["pages", "reference", "vectors"]


@cache
def _vectors_text() -> str:
    return resources.files(__name__).joinpath("vectors.json").read_text(encoding="utf-8")


def vectors() -> dict[str, Any]:
    """The spec's test vectors (SPEC section 12): a fresh dict each call.

    Returns
    -------
    dict
        ``note``, ``one_system_steps_0_to_7`` (the sums, params and losses of a fresh system's
        first steps) and ``runs`` (params and digests of whole runs); words in hex.

    Examples
    --------
    >>> import meshnb
    >>> from meshnb.testing import vectors
    >>> first = vectors()["runs"][0]
    >>> first["systems"], first["grouped"], first["steps"]
    (1, False, 4096)
    >>> meshnb.train(4096).digest == first["digest"]
    True
    """
    result: dict[str, Any] = json.loads(_vectors_text())
    return result
