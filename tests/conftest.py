"""Shared fixtures: the test vectors (meshnb.testing, copied from ../shared/vectors.json) and fresh pages."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from meshnb import View, testing
from meshnb.files import pid_alive
from meshnb.host import prepare
from meshnb.options import Plan
from meshnb.program import Context


@pytest.fixture(scope="session")
def vectors() -> dict:
    return testing.vectors()


@pytest.fixture
def fresh_page() -> bytes:
    """The page right after init, one system without a group."""
    ctx = Context(View())
    prepare(ctx, Plan(), None)
    return ctx.view.tobytes()


SHM = Path("/dev/shm")


def _meshnb_segments() -> set[str]:
    """meshnb's shared memory segments (named ``meshnb_<pid>_<random>``; other programs' are not
    ours to judge) whose coordinator is this process or has ended: a live coordinator elsewhere (a
    run of the other pytest worker's test, another run on the machine) answers for its own."""
    if not SHM.is_dir():
        return set()
    names = {p.name for p in SHM.glob("meshnb_*")}
    live = {n for n in names if (pid := n.split("_")[1]).isdigit() and int(pid) != os.getpid() and pid_alive(int(pid))}
    return names - live


@pytest.fixture(autouse=True)
def no_shared_memory_left_behind():
    """Every test leaves /dev/shm as it found it.  A run whose coordinator was killed leaves its
    segment to the resource tracker, which unlinks it once the last member exits: wait for that."""
    before = _meshnb_segments()
    yield
    deadline = time.monotonic() + 15
    while (left := _meshnb_segments() - before) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not left, f"shared memory segments left behind: {sorted(left)}"
