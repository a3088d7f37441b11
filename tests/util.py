"""Small helpers shared by the tests."""

from __future__ import annotations

import numpy as np

from meshnb.program import OP_TASK, Context, task


def words(hexes: list[str]) -> np.ndarray:
    """Hex strings -> uint32 words."""
    return np.array([int(h, 16) for h in hexes], dtype=np.uint32)


def hexes(ws) -> list[str]:
    """uint32 words -> 8-digit hex strings."""
    return [f"{int(w):08x}" for w in ws]


def tasks_in_turn(ctxs: list[Context], steps: int) -> None:
    """Drive the members of a cluster on one thread, a task each in turn (a timed-out round is
    retried by the next), until every one has done ``steps`` steps with no round pending."""
    while any(c.view.next_step < steps or c.view.word("PENDING") for c in ctxs):
        for ctx in ctxs:
            v = ctx.view
            if v.next_step < steps or v.word("PENDING"):
                v.set_word("STEPS_PER_TASK", max(1, steps - v.next_step))
                task(ctx, OP_TASK, v.word("NEXT_STEP"))
