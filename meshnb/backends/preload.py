"""Imported by the forkserver of the ``processes`` backend, so that every member process forked
from it starts with meshnb imported and the grouped step's kernels loaded from numba's cache."""

from __future__ import annotations

from ..host import warm_grouped
from . import members  # noqa: F401  - the members' code

warm_grouped(True)
