"""Small helpers shared by the tests."""

from __future__ import annotations

import numpy as np


def words(hexes: list[str]) -> np.ndarray:
    """Hex strings -> uint32 words."""
    return np.array([int(h, 16) for h in hexes], dtype=np.uint32)


def hexes(ws) -> list[str]:
    """uint32 words -> 8-digit hex strings."""
    return [f"{int(w):08x}" for w in ws]
