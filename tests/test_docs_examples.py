"""Every example of README.md and docs/ runs as written (Sybil), so that a guide cannot drift.

Each page is one test: its ``python`` blocks run in order in one namespace, its ``sh`` blocks in
bash (``set -e``), in a temporary directory that the page's blocks share, where ``.venv`` is the
venv of this Python, as in the README's set-up; the blocks of the README's two commands
themselves are CI's first step (``.ci/run``, and ``tests/test_readme_commands.py``).  A block
that cannot run here says why in an HTML comment before it, which the site and GitHub do not
show: ``<!-- skip: next "why" -->``, or ``<!-- skip: next if(not mpi, reason="...") -->`` with
the names ``mpi`` (mpi4py and the venv's mpiexec), ``gpu`` (an NVIDIA driver: ``nvidia-smi``) and
``pandas`` of ``_CAN``.  ``sh`` blocks need the ``meshnb`` command beside this Python.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
import unittest
from pathlib import Path
from typing import Any

import pytest

sybil = pytest.importorskip("sybil", reason="Sybil runs the docs' examples (the test extra)")
from sybil.evaluators.skip import Skipper  # noqa: E402
from sybil.parsers.markdown import CodeBlockParser, PythonCodeBlockParser, SkipParser  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
PAGES = [  # the pages with examples
    p
    for p in sorted([ROOT / "README.md", *(ROOT / "docs").glob("*.md"), *(ROOT / "docs").glob("*/*.md")])
    if re.search(r"^```(python|sh)\b", p.read_text(encoding="utf-8"), re.MULTILINE)
]
BIN = Path(sys.executable).parent
SLOW_PAGES = {"docs/guide/sweeps.md", "README.md"}  # the sweep loop's compile, a cluster of 8, a full pack


def _can() -> dict[str, bool]:
    """What a block may need that an install may lack: the names its skip conditions use."""
    return {
        "mpi": importlib.util.find_spec("mpi4py") is not None and (BIN / "mpiexec").exists(),  # .venv/bin/mpiexec
        "gpu": shutil.which("nvidia-smi") is not None,
        "pandas": importlib.util.find_spec("pandas") is not None,
    }


def _run_sh(example: Any) -> None:
    """A ``sh`` block: bash -e in the page's directory, ``.venv`` this Python's venv."""
    where = example.namespace["_cwd"]
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
    proc = subprocess.run(
        ["bash", "-e", "-o", "pipefail", "-c", example.parsed],
        cwd=where,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, (
        f"{example.path}:{example.line}: exit {proc.returncode}\n{example.parsed}\n"
        f"stdout: {proc.stdout[-2000:]}\nstderr: {proc.stderr[-3000:]}"
    )


_SYBIL = sybil.Sybil(parsers=[PythonCodeBlockParser(), CodeBlockParser(language="sh", evaluator=_run_sh), SkipParser()])


def _page_id(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


@pytest.mark.parametrize(
    "page",
    [pytest.param(p, id=_page_id(p), marks=[pytest.mark.slow] if _page_id(p) in SLOW_PAGES else []) for p in PAGES],
)
def test_the_examples_run_as_written(page: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    if not (BIN / "meshnb").exists():
        pytest.skip(f"no meshnb command beside {sys.executable} (pip install -e .)")
    (tmp_path / ".venv").symlink_to(Path(sys.prefix), target_is_directory=True)
    monkeypatch.chdir(tmp_path)  # a Python block that writes a file writes it here
    document = _SYBIL.parse(page)
    document.namespace.update(_can(), _cwd=tmp_path)
    ran, skipped = 0, []
    for example in document:
        try:
            example.evaluate()
        except unittest.SkipTest as e:
            skipped.append(f"line {example.line}: {e}")
            continue
        ran += not isinstance(example.region.evaluator, Skipper)
    if not ran and skipped:
        pytest.skip(f"{_page_id(page)}: every example skipped here ({'; '.join(skipped)})")


def _shape(line: str) -> str:
    """A summary line with its machine-dependent figures (speed, times) made a pattern."""
    if line.startswith(("speed", "jit")):
        return re.sub(r"[0-9][0-9,.]*", "N", line)
    return line


def test_getting_started_shows_the_summary_the_command_prints() -> None:
    """The summary block of Getting started is the one ``meshnb train`` prints: the same bits,
    the speed and JIT lines worded alike (their figures are the machine's)."""
    text = (ROOT / "docs" / "getting-started.md").read_text(encoding="utf-8")
    shown = text.split("The first prints a summary like this", 1)[1].split("```\n", 2)[1].splitlines()
    proc = subprocess.run(
        [sys.executable, "-m", "meshnb", "train"], capture_output=True, text=True, timeout=300, cwd=ROOT
    )
    assert proc.returncode == 0, proc.stderr
    printed = proc.stdout.splitlines()
    if not any(line.startswith("        a run this short") for line in printed):  # a slow machine's run
        shown = [line for line in shown if not line.startswith("        a run this short")]
    assert [_shape(line) for line in printed] == [_shape(line) for line in shown]
