"""The notebooks in ``notebooks/``: committed with their outputs, and still running top to bottom.

Each notebook is re-executed here on a real Jupyter kernel (nbclient, the ``python3`` kernel of
this interpreter), headless (``MPLBACKEND=Agg``; the notebooks draw with the inline backend,
which renders with Agg), with Jupyter's, IPython's and matplotlib's state directories in a
temporary folder so that nothing is written under ``~``.  The executed copy stays in memory: the
committed files are only read.  ``notebooks/build.py`` holds the cells and regenerates the
committed files (``python notebooks/build.py``).
"""

from __future__ import annotations

import importlib.util
import re
import time
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parent.parent
NB_DIR = ROOT / "notebooks"
REQUIRED = ("01_training", "02_float_mode_z", "03_clusters")
KERNEL = "python3"
CELL_TIMEOUT_S = 300


def _load_build():
    spec = importlib.util.spec_from_file_location("meshnb_notebooks_build", NB_DIR / "build.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


build = _load_build()
NAMES = sorted(build.NOTEBOOKS)


def _committed(name: str) -> nbformat.NotebookNode:
    return nbformat.read(NB_DIR / f"{name}.ipynb", as_version=4)


def _outputs(nb: nbformat.NotebookNode):
    for cell in nb.cells:
        if cell.cell_type == "code":
            yield from cell.outputs


def _pngs(nb: nbformat.NotebookNode) -> int:
    return sum("image/png" in out.get("data", {}) for out in _outputs(nb))


def _errors(nb: nbformat.NotebookNode) -> list[str]:
    return [f"{out.ename}: {out.evalue}" for out in _outputs(nb) if out.output_type == "error"]


@pytest.fixture
def headless(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Kernel state in tmp_path, no GUI backend."""
    for var in build.STATE_DIRS:
        monkeypatch.setenv(var, str(tmp_path / var.lower()))
    monkeypatch.setenv("MPLBACKEND", "Agg")
    monkeypatch.setenv("JUPYTER_PLATFORM_DIRS", "1")
    monkeypatch.setenv("PYDEVD_DISABLE_FILE_VALIDATION", "1")


def test_every_notebook_is_built_and_committed() -> None:
    assert set(REQUIRED) <= set(NAMES)
    assert sorted(p.stem for p in NB_DIR.glob("*.ipynb")) == NAMES, "every notebook comes from build.py"


@pytest.mark.parametrize("name", NAMES)
def test_committed_notebook_has_its_outputs(name: str) -> None:
    nb = _committed(name)
    nbformat.validate(nb)
    expected = build.build(name)
    assert [(c.cell_type, c.source) for c in nb.cells] == [(c.cell_type, c.source) for c in expected.cells], (
        f"{name}.ipynb differs from notebooks/build.py: run `python notebooks/build.py {name}`"
    )
    code = [c for c in nb.cells if c.cell_type == "code"]
    # Executed once, top to bottom, on a fresh kernel.
    assert [c.execution_count for c in code] == list(range(1, len(code) + 1))
    assert not _errors(nb)
    assert not [o for o in _outputs(nb) if o.output_type == "stream" and o.name == "stderr"], "warnings in the saved outputs"
    # The plots are visible without running anything.
    figures = sum("plt.show()" in c.source for c in code)
    assert figures > 0 and _pngs(nb) >= figures


@pytest.mark.parametrize("name", NAMES)
def test_notebook_uses_only_the_public_api(name: str) -> None:
    source = "\n".join(c.source for c in build.build(name).cells if c.cell_type == "code")
    assert not re.findall(r"\._[A-Za-z]", source), "a private name"
    imports = re.findall(r"^\s*(?:from|import)\s+(meshnb[\w.]*)", source, flags=re.M)
    assert set(imports) <= {"meshnb", "meshnb.sweep"}, imports  # meshnb.sweep: the sweep API (issue 12)


@pytest.mark.parametrize("name", NAMES)
def test_notebook_executes(name: str, headless: None) -> None:
    nb = _committed(name)
    start = time.perf_counter()
    NotebookClient(
        nb, timeout=CELL_TIMEOUT_S, kernel_name=KERNEL, record_timing=False,
        resources={"metadata": {"path": str(NB_DIR)}},
    ).execute()  # raises CellExecutionError, with the cell and traceback, if a cell fails
    seconds = time.perf_counter() - start
    assert not _errors(nb)
    assert _pngs(nb) == _pngs(_committed(name)), "the run drew a different number of figures"
    print(f"{name}: executed in {seconds:.1f} s")
