"""Imported by the forkserver of the ``processes`` backend, so that every member process forked
from it starts with meshnb imported and the grouped step's kernels loaded from numba's cache."""

from __future__ import annotations

from ..interrupts import phase

phase("preload")  # before the heavy imports: the window a Ctrl-C must not reach

from ..host import warm_up  # noqa: E402
from . import members  # noqa: E402, F401  - the members' code

warm_up(True)
phase("preloaded")
