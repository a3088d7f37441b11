"""The documentation: the site builds with ``mkdocs build --strict``; its API reference covers every
public name, its CLI reference every command and option; the notebooks render with their plots; the
README stays a summary (at most 250 lines) whose relative links resolve."""

from __future__ import annotations

import argparse
import html
import os
import re
import subprocess
import sys
import zlib
from pathlib import Path

import pytest

import meshnb
from meshnb.cli import build_parser

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"


def test_readme_is_a_summary() -> None:
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 250, f"README.md has {len(lines)} lines: move the detail into docs/"


def test_readme_relative_links_resolve() -> None:
    targets = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", README.read_text(encoding="utf-8"))
    local = [t for t in targets if not re.match(r"[a-z]+:", t)]
    assert local, "the README links into docs/"
    missing = [t for t in local if not (ROOT / t).exists()]
    assert not missing, f"README.md links to missing files: {missing}"


def _commands(parser: argparse.ArgumentParser, path: str = "meshnb") -> list[tuple[str, list[str]]]:
    """``(command, its option strings)`` of every sub-command, nested ones (``meshnb ops gen``) too."""
    out = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                options = [s for a in sub._actions for s in a.option_strings if s not in ("-h", "--help")]
                out.append((f"{path} {name}", options))
                out += _commands(sub, f"{path} {name}")
    return out


def _inventory(site: Path) -> list[tuple[str, str]]:
    """``(name, uri)`` of each object of the site's ``objects.inv`` (Sphinx's format, written by mkdocstrings)."""
    data = (site / "objects.inv").read_bytes()
    body = zlib.decompress(data.split(b"zlib.\n", 1)[1]).decode()
    rows = [line.split(" ", 4) for line in body.splitlines() if line.strip()]
    return [(row[0], row[3]) for row in rows]


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    for plugin in ("mkdocs", "material", "mkdocstrings_handlers.python", "mkdocs_jupyter", "mkdocs_gen_files"):
        pytest.importorskip(plugin, reason="the docs extra: pip install -e '.[docs]'")
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1", "DISABLE_MKDOCS_2_WARNING": "true"}
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, f"mkdocs build --strict failed:\n{proc.stderr[-6000:]}"
    return out


@pytest.mark.docs
@pytest.mark.slow
def test_api_reference_documents_every_public_name(site: Path) -> None:
    page = (site / "api" / "meshnb" / "index.html").read_text(encoding="utf-8")
    ids = set(re.findall(r'id="(meshnb\.[^"]+)"', page))
    for public in meshnb.__all__:
        # meshnb.NAME, or NAME where its module defines it (meshnb.MODULE.NAME)
        found = {i for i in ids if i == f"meshnb.{public}" or re.fullmatch(rf"meshnb\.[a-z_.]+\.{public}", i)}
        assert found, f"meshnb.{public} is not in the API reference"
    names = {name for name, _ in _inventory(site)}
    assert {"meshnb.kernels", "meshnb.kernels.step_sums", "meshnb.testing.reference"} <= names


@pytest.mark.docs
@pytest.mark.slow
def test_api_reference_renders_docstrings_without_sphinx_roles(site: Path) -> None:
    for page in (site / "api").rglob("*.html"):
        text = page.read_text(encoding="utf-8")
        assert not re.search(r":(func|class|mod|meth|data|attr):`", text), f"{page}: a Sphinx role left as text"
    kernels = (site / "api" / "kernels" / "index.html").read_text(encoding="utf-8")
    assert 'id="meshnb.kernels.step_sums"' in kernels  # an njit kernel, documented from its source


@pytest.mark.docs
@pytest.mark.slow
def test_cli_reference_lists_every_command_and_option(site: Path) -> None:
    text = html.unescape(re.sub(r"<[^>]+>", "", (site / "reference" / "cli" / "index.html").read_text("utf-8")))
    commands = _commands(build_parser())
    assert {c for c, _ in commands} >= {"meshnb train", "meshnb sweep", "meshnb bench", "meshnb pack", "meshnb check"}
    for command, options in commands:
        assert command in text, f"{command} is not in the CLI reference"
        for option in options:
            assert option in text, f"{command} {option} is not in the CLI reference"


@pytest.mark.docs
@pytest.mark.slow
def test_notebooks_render_with_their_plots(site: Path) -> None:
    notebooks = sorted((ROOT / "notebooks").glob("*.ipynb"))
    assert notebooks
    for notebook in notebooks:
        page = site / "notebooks" / notebook.stem / "index.html"
        assert page.is_file(), f"{notebook.name} is not rendered"
        assert "data:image/png;base64," in page.read_text(encoding="utf-8"), f"{notebook.name}: no plot rendered"
