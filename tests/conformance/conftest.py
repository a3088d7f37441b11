"""Shared fixtures of the conformance tests: one quick pack per session, its cases loaded."""

from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Callable
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


Editor = Callable[[Path], None]


@pytest.fixture
def edited_case(quick_pack: Path, tmp_path: Path) -> Callable[[str, Editor], Path]:
    """A copy of one case of the quick pack, changed by ``edit(case_dir)``, in a pack of its own
    whose manifest holds the changed files' digests (so that only the change is refused)."""

    def make(name: str, edit: Editor) -> Path:
        root = tmp_path / f"edited-{len(list(tmp_path.iterdir()))}"
        case_dir = root / name
        shutil.copytree(quick_pack / name, case_dir)
        edit(case_dir)
        manifest = json.loads((quick_pack / "manifest.json").read_text())
        digests = {
            f"{name}/{p.name}": hashlib.sha256(p.read_bytes()).hexdigest()
            for p in case_dir.iterdir()
            if p.is_file() and not p.is_symlink()
        }
        (root / "manifest.json").write_text(json.dumps({**manifest, "cases": [name], "files": digests}))
        return case_dir

    return make


def edit_json(case_dir: Path, **values: object) -> None:
    """Set keys of a case's case.json; a string value ``"RAW:text"`` is written as the raw JSON text
    (``Infinity``, ``1e400``: what json.dumps would not write)."""
    cj = json.loads((case_dir / "case.json").read_text())
    raw = {k: v.removeprefix("RAW:") for k, v in values.items() if isinstance(v, str) and v.startswith("RAW:")}
    cj.update({k: (f"@@{k}@@" if k in raw else v) for k, v in values.items()})
    out = json.dumps(cj)
    for k, v in raw.items():
        out = out.replace(f'"@@{k}@@"', v)
    (case_dir / "case.json").write_text(out)


@pytest.fixture
def unhurried(monkeypatch: pytest.MonkeyPatch) -> None:
    """The check's wall-clock bounds (its experiments', its designs', a case's single-op search) out of
    the way, so that a test's verdicts and named causes are the same on a busy machine: only the
    bounds by count (executor runs, designs) still apply, and they do not depend on the machine."""
    from meshnb.conformance import experiment, suite
    from meshnb.conformance.check import diagnosis, localise

    monkeypatch.setattr(suite, "EXPERIMENT_SECONDS", 3600.0)
    monkeypatch.setattr(experiment, "MAX_SECONDS", 3600.0)
    monkeypatch.setattr(experiment, "DESIGN_SECONDS", 3600.0)
    monkeypatch.setattr(diagnosis, "BUDGET", 3600.0)
    monkeypatch.setattr(localise, "BUDGET", 3600.0)
