"""Imported by the forkserver of the ``processes`` backend, so that every member process forked
from it starts with meshnb imported and the grouped step's kernels loaded from numba's cache."""

from __future__ import annotations

from . import cluster  # noqa: F401  - the members' code
from .exchange import ExchangePage, Group, PageExchange, PollingWaiter
from .program import OP_TASK, Context, init, task
from .view import View


def _warm() -> None:
    ctx = Context(View(), group=Group(0, 1), exchange=PageExchange(ExchangePage.new(1), 0, 1.0, PollingWaiter()))
    init(ctx)
    ctx.view.set_word("STEPS_PER_TASK", 1)
    task(ctx, OP_TASK, 0)


_warm()
