"""The exchange page (SPEC section 9): per system a round counter and two slots of 8 u32 words.

The program talks to any transport through :class:`Exchange` alone, as the seed's ``exchange``
does: ``set_slot`` publishes this system's words for a round parity, ``round(n)`` publishes the
counter and waits (bounded) for every member to reach ``n``, ``slot(m, par)`` reads member ``m``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np

EX_SLOT_WORDS = 8


@dataclass(frozen=True)
class Group:
    """This system ``k`` of a cluster of ``n``."""

    k: int
    n: int

    def __post_init__(self) -> None:
        if not (isinstance(self.n, int) and self.n >= 1):
            raise ValueError(f"a group has at least one system, got n={self.n!r}")
        if not (isinstance(self.k, int) and 0 <= self.k < self.n):
            raise ValueError(f"system k={self.k!r} is not in a group of {self.n}")


@runtime_checkable
class Exchange(Protocol):
    def set_slot(self, k: int, parity: int, words: np.ndarray) -> None:
        """Write system ``k``'s slot for ``parity`` (8 uint32 words)."""

    def round(self, n: int) -> bool:
        """Publish this system's counter = ``n`` and wait, bounded, until every counter is >= n.

        Returns False on timeout; the caller may call ``round(n)`` again later to resume."""

    def slot(self, m: int, parity: int) -> np.ndarray:
        """System ``m``'s slot for ``parity`` (8 uint32 words)."""
