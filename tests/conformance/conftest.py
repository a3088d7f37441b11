"""Shared fixtures of the conformance tests: one quick pack per session, its cases loaded."""

from __future__ import annotations

from pathlib import Path

import pytest

from meshnb.conformance import check, pack


@pytest.fixture(scope="session")
def quick_pack(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("pack") / "quick"
    pack.write_pack(root, quick=True)
    return root


@pytest.fixture(scope="session")
def setups(quick_pack: Path) -> dict[str, check.Setup]:
    """Every case of the quick pack, loaded (and verified against the manifest) once."""
    return {c.name: check.load_case(quick_pack / c.name) for c in pack.cases(quick=True)}
