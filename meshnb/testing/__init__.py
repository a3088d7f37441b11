"""What an executor's developer checks against, independent of the rest of meshnb (it imports none of it).

- :mod:`~meshnb.testing.reference`: an independent numpy and plain-Python implementation of
  SPEC.md, written differently (no numba): the tests' oracle and the benchmarks' baselines;
- :mod:`~meshnb.testing.pages`: pages built to hit every rule of float mode Z;
- :func:`vectors`: the spec's test vectors (``vectors.json``, shipped with the package).

Examples
--------
>>> from meshnb.testing import pages, reference, vectors
>>> _, trace = reference.run([reference.init_page()], 8, grouped=False)
>>> [[f"{int(w):08x}" for w in sums] for sums in trace] == vectors()["one_system_steps_0_to_7"]["sums"]
True
>>> len(pages.hard_pages())
16
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
    """The spec's test vectors (SPEC section 12), a fresh dict each call; words in hex.

    Returns
    -------
    dict
        The parsed ``vectors.json``.

    Examples
    --------
    >>> first = vectors()["runs"][0]
    >>> first["systems"], first["grouped"], first["steps"]
    (1, False, 4096)
    """
    result: dict[str, Any] = json.loads(_vectors_text())
    return result
