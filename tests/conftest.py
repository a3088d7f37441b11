"""Shared fixtures: the test vectors (copied from ../shared/vectors.json) and hard pages."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from meshnb import View
from meshnb.host import Plan, prepare
from meshnb.program import Context

DATA = Path(__file__).parent / "data"


@pytest.fixture(scope="session")
def vectors() -> dict:
    return json.loads((DATA / "vectors.json").read_text())


@pytest.fixture
def fresh_page() -> bytes:
    """The page right after init, one system without a group."""
    ctx = Context(View())
    prepare(ctx, Plan(), None)
    return ctx.view.tobytes()
