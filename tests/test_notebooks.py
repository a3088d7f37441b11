"""The notebooks in ``notebooks/``: paired text and outputs, and still running top to bottom.

Every notebook is a jupytext pair (``notebooks/jupytext.toml``): ``NN_name.py`` in the py:percent
format, the text that is reviewed and linted, and ``NN_name.ipynb``, the same cells with their
outputs (plots visible without running anything).  Every ``.py`` and ``.ipynb`` in the folder is
one of a pair, so a new notebook is tested as soon as it is there.

Each notebook is re-executed here on a real Jupyter kernel (nbclient, the ``python3`` kernel of
this interpreter), headless (``MPLBACKEND=Agg``; the notebooks draw with the inline backend,
which renders with Agg), with Jupyter's, IPython's and matplotlib's state directories in a
temporary folder so that nothing is written under ``~``.  The kernel's working directory is an
empty temporary folder: a notebook reads nothing relative to where it runs.  The executed copy
stays in memory: the committed files are only read, and every number the fresh run prints (its
text outputs, images excluded) must be the committed one: outputs saved from an older meshnb fail.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import re
import tempfile
import time
import unicodedata
from collections.abc import Iterator
from pathlib import Path

import jupytext
import nbformat
import numpy as np
import pytest
from jupytext.config import load_jupytext_configuration_file
from jupytext.formats import guess_format
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parent.parent
NB_DIR = ROOT / "notebooks"
PAIRING = "ipynb,py:percent"
REQUIRED = ("01_training", "02_float_mode_z", "03_clusters", "04_checking_an_executor", "05_sweeps", "06_precision")
KERNEL = "python3"
CELL_TIMEOUT_S = 300
STATE_DIRS = ("JUPYTER_DATA_DIR", "JUPYTER_CONFIG_DIR", "JUPYTER_RUNTIME_DIR", "IPYTHONDIR", "MPLCONFIGDIR")


def _public_modules() -> frozenset[str]:
    """``meshnb`` and the modules its ``__all__`` serves: a notebook imports nothing else of meshnb."""
    import meshnb

    return frozenset({"meshnb"} | {f"meshnb.{n}" for n in meshnb.__all__ if inspect.ismodule(getattr(meshnb, n))})


PUBLIC_MODULES = _public_modules()
SYNC = ".venv/bin/jupytext --sync notebooks/{name}.py"


def _stems(suffix: str) -> set[str]:
    return {p.stem for p in NB_DIR.glob(f"*{suffix}")}


NAMES = sorted(_stems(".py") | _stems(".ipynb"))


def _text(name: str) -> str:
    return (NB_DIR / f"{name}.py").read_text(encoding="utf-8")


def _committed(name: str) -> nbformat.NotebookNode:
    return nbformat.read(NB_DIR / f"{name}.ipynb", as_version=4)


def _cells(nb: nbformat.NotebookNode) -> list[tuple[str, str]]:
    return [(c.cell_type, c.source) for c in nb.cells]


def _outputs(nb: nbformat.NotebookNode) -> Iterator[nbformat.NotebookNode]:
    for cell in nb.cells:
        if cell.cell_type == "code":
            yield from cell.outputs


def _pngs(nb: nbformat.NotebookNode) -> int:
    return sum("image/png" in out.get("data", {}) for out in _outputs(nb))


def _errors(nb: nbformat.NotebookNode) -> list[str]:
    return [f"{out.ename}: {out.evalue}" for out in _outputs(nb) if out.output_type == "error"]


# What a run prints that is the machine's, not the program's: masked before the outputs are compared.
VOLATILE = (
    (re.compile(r"/tmp/[^\s/]+"), "<tmp>"),  # a temporary folder's random name
    (re.compile(r"\b\d+(?:\.\d+)? s\b"), "<seconds>"),  # a duration in seconds (check's localisation)
    (re.compile(r"^(\| \d+ \| )\d+( \|)", re.M), r"\1<timeouts>\2"),  # 03's stalled member's table
)
NUMBER = re.compile(r"[\w.+-]*\d[\w.+-]*")  # a token holding a digit: a number, a hex word, a digest
# Two printed floats are the same number within this relative distance: a float32 value moves by 6e-8 at
# least, while a float64 result may move by a few ulps with the CPU's BLAS kernel (OpenBLAS picks one
# per CPU).  A notebook prints a value that is float64 rounding noise as a bound, not as its digits.
FLOAT_TOLERANCE = 1e-9


def _printed(nb: nbformat.NotebookNode) -> list[list[str]]:
    """The tokens holding digits in each code cell's text outputs (streams, results, markdown; no images)."""
    cells = []
    for cell in (c for c in nb.cells if c.cell_type == "code"):
        text = []
        for out in cell.outputs:
            if out.output_type == "stream":
                text.append(out.text)
            elif out.output_type in ("execute_result", "display_data"):
                text += [out.data[k] for k in ("text/plain", "text/markdown") if k in out.data]
        masked = "\n".join(text)
        for pattern, mask in VOLATILE:
            masked = pattern.sub(mask, masked)
        cells.append(NUMBER.findall(masked))
    return cells


def _same(a: str, b: str) -> bool:
    """Whether two printed tokens are the same: equal text, or floats within FLOAT_TOLERANCE."""
    if a == b:
        return True
    try:
        x, y = float(a.rstrip(".,")), float(b.rstrip(".,"))
    except ValueError:
        return False
    return abs(x - y) <= FLOAT_TOLERANCE * max(abs(x), abs(y))


def _stale(committed: nbformat.NotebookNode, fresh: nbformat.NotebookNode) -> list[str]:
    """Where the committed outputs print other numbers than a fresh run: the code cell and first token."""
    found = []
    for i, (old, new) in enumerate(zip(_printed(committed), _printed(fresh), strict=True)):
        if len(old) != len(new) or not all(map(_same, old, new)):
            at = next((k for k, (a, b) in enumerate(zip(old, new)) if not _same(a, b)), min(len(old), len(new)))
            found.append(f"code cell {i + 1}: token {at}: committed {old[at : at + 1]}, fresh {new[at : at + 1]}")
    return found


def _in_public(module: str) -> bool:
    """Whether ``module`` is a public meshnb module or one of theirs (``meshnb.testing.pages``)."""
    return any(module == m or module.startswith(f"{m}.") for m in PUBLIC_MODULES if m != "meshnb") or module == "meshnb"


def _is_public(module: str, name: str) -> bool:
    """Whether ``from module import name`` takes a public name of a public meshnb module."""
    if _in_public(f"{module}.{name}"):
        return True
    exported = getattr(importlib.import_module(module), "__all__", None)
    return not name.startswith("_") and (exported is None or name in exported)


def _api_violations(source: str) -> list[str]:
    """What the Python ``source`` takes from meshnb beyond its public API, and any private attribute."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [a.name for a in node.names if a.name.split(".")[0] == "meshnb" and not _in_public(a.name)]
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if node.level:
                found.append(f"a relative import from {'.' * node.level}{module}")
            elif module.split(".")[0] == "meshnb":
                if not _in_public(module):
                    found.append(module)
                else:
                    found += [f"{module}.{a.name}" for a in node.names if not _is_public(module, a.name)]
        elif isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.endswith("__"):
            found.append(f"private attribute .{node.attr} (line {node.lineno})")
    return found


def _heading_ids(text: str) -> tuple[str, str]:
    """The id a heading's text gets from mkdocs-jupyter (python-markdown's slugify) and from GitHub."""
    plain = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)  # a link shows its text
    plain = re.sub(r"[`*]", "", plain).strip()  # code and emphasis marks are not part of the text
    ascii_text = unicodedata.normalize("NFKD", plain).encode("ascii", "ignore").decode("ascii")
    mkdocs = re.sub(r"[-\s]+", "-", re.sub(r"[^\w\s-]", "", ascii_text).strip().lower())
    github = re.sub(r"[^\w\- ]", "", plain.lower()).replace(" ", "-")
    return mkdocs, github


def _toc_problems(markdown_cells: list[str]) -> list[str]:
    """The ``](#anchor)`` links of the cells whose anchor is not a heading's id on both renderers."""
    mkdocs_ids, github_ids, links = set(), set(), []
    for source in markdown_cells:
        fenced = False
        for line in source.splitlines():
            if line.lstrip().startswith("```"):
                fenced = not fenced
            elif not fenced and (m := re.match(r"#{1,6}\s+(.*)", line)):
                mkdocs, github = _heading_ids(m.group(1))
                mkdocs_ids.add(mkdocs)
                github_ids.add(github)
        links += re.findall(r"\]\(#([^)\s]+)\)", source)
    return [f"#{link}" for link in links if link not in mkdocs_ids or link not in github_ids]


@pytest.fixture
def headless(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Kernel state in tmp_path, no GUI backend."""
    for var in STATE_DIRS:
        monkeypatch.setenv(var, str(tmp_path / var.lower()))
    monkeypatch.setenv("MPLBACKEND", "Agg")
    monkeypatch.setenv("JUPYTER_PLATFORM_DIRS", "1")
    monkeypatch.setenv("PYDEVD_DISABLE_FILE_VALIDATION", "1")


def test_every_notebook_is_a_pair() -> None:
    assert set(REQUIRED) <= set(NAMES)
    config = load_jupytext_configuration_file(str(NB_DIR / "jupytext.toml"))
    assert config.formats in (PAIRING, [PAIRING]), f"notebooks/jupytext.toml must pair {PAIRING!r}"
    assert not _stems(".py") - _stems(".ipynb"), "a .py without its .ipynb: run `jupytext --sync` on it"
    assert not _stems(".ipynb") - _stems(".py"), "an .ipynb without its .py: run `jupytext --sync` on it"


@pytest.mark.parametrize("name", NAMES)
def test_notebook_is_in_sync_with_its_text(name: str) -> None:
    py, ipynb = NB_DIR / f"{name}.py", NB_DIR / f"{name}.ipynb"
    assert py.is_file() and ipynb.is_file(), f"{name} is not a pair: run `{SYNC.format(name=name)}`"
    assert guess_format(_text(name), ".py")[0] == "percent", f"{py.name} is not in the py:percent format"
    assert _cells(jupytext.read(ipynb)) == _cells(jupytext.read(py)), (
        f"{ipynb.name} and {py.name} have different cells: run `{SYNC.format(name=name)}` (the newer file wins)"
    )


@pytest.mark.parametrize("name", NAMES)
def test_committed_notebook_has_its_outputs(name: str) -> None:
    nb = _committed(name)
    nbformat.validate(nb)
    code = [c for c in nb.cells if c.cell_type == "code"]
    # Executed once, top to bottom, on a fresh kernel.
    assert [c.execution_count for c in code] == list(range(1, len(code) + 1)), "not executed top to bottom"
    assert not _errors(nb)
    stderr = [o for o in _outputs(nb) if o.output_type == "stream" and o.name == "stderr"]
    assert not stderr, "warnings in the saved outputs"
    # The plots are visible without running anything.
    figures = sum("plt.show()" in c.source for c in code)
    assert figures > 0 and _pngs(nb) >= figures


@pytest.mark.parametrize("name", NAMES)
def test_notebook_uses_only_the_public_api(name: str) -> None:
    # The py:percent text is plain Python (jupytext comments out the magics).
    assert not _api_violations(_text(name))


@pytest.mark.parametrize("name", NAMES)
def test_table_of_contents_links_reach_headings(name: str) -> None:
    cells = [c.source for c in jupytext.read(NB_DIR / f"{name}.py").cells if c.cell_type == "markdown"]
    assert not _toc_problems(cells), f"{name}: links to no heading (ids as mkdocs-jupyter and GitHub make them)"


def test_the_toc_check_sees_a_link_to_no_heading() -> None:
    heading = "## 3. A faulty executor, and what `check` says"
    assert _heading_ids(heading[3:]) == ("3-a-faulty-executor-and-what-check-says",) * 2
    assert _toc_problems([heading, "[3](#3-a-faulty-executor-and-what-says)"]) == ["#3-a-faulty-executor-and-what-says"]
    assert not _toc_problems([heading, "see [3](#3-a-faulty-executor-and-what-check-says)"])
    assert _toc_problems(["```\n## 1. In a fence\n```", "[1](#1-in-a-fence)"])  # a fenced line is no heading


def test_the_public_api_check_sees_what_it_refuses() -> None:
    refused = (
        "import meshnb.host",
        "from meshnb import host",
        "from meshnb.view import FIELDS",
        "from meshnb import _preload",
        "from .view import View",
        "import meshnb\nmeshnb.train._private",
    )
    assert all(_api_violations(source) for source in refused)
    allowed = "import meshnb\nimport meshnb.testing\nfrom meshnb import floatz as fz, train\nmeshnb.View.__name__"
    assert not _api_violations(allowed)


@pytest.mark.notebooks
@pytest.mark.parametrize("name", NAMES)
def test_notebook_executes(name: str, headless: None, tmp_path: Path) -> None:
    nb = _committed(name)
    run_dir = tmp_path / "cwd"
    run_dir.mkdir()
    scratch = Path(tempfile.gettempdir())  # the notebooks' own scratch folders are named meshnb-nb*
    before = {p.name for p in scratch.glob("meshnb-nb*")}
    start = time.perf_counter()
    NotebookClient(
        nb,
        timeout=CELL_TIMEOUT_S,
        kernel_name=KERNEL,
        record_timing=False,
        resources={"metadata": {"path": str(run_dir)}},
    ).execute()  # raises CellExecutionError, with the cell and traceback, if a cell fails
    seconds = time.perf_counter() - start
    assert not _errors(nb)
    assert _pngs(nb) == _pngs(_committed(name)), "the run drew a different number of figures"
    print(f"{name}: executed in {seconds:.1f} s")
    left = sorted({p.name for p in scratch.glob("meshnb-nb*")} - before)
    assert not left, f"{name} left temporary files behind: {left}"
    stale = _stale(_committed(name), nb)
    assert not stale, f"{name}.ipynb's saved outputs are not a fresh run's: re-execute it ({stale[:3]})"


def test_the_output_check_sees_a_changed_number() -> None:
    def notebook(*texts: str) -> nbformat.NotebookNode:
        out = [nbformat.v4.new_output("stream", name="stdout", text=t) for t in texts]
        cells = [nbformat.v4.new_code_cell("print()", outputs=[o]) for o in out]
        return nbformat.v4.new_notebook(cells=cells)

    committed = notebook("wrote 33 cases to /tmp/meshnb-a1/pack", "digest 3ab200ba, 1.1 s")
    assert not _stale(committed, notebook("wrote 33 cases to /tmp/meshnb-b7/pack", "digest 3ab200ba, 2.0 s"))
    assert _stale(committed, notebook("wrote 38 cases to /tmp/meshnb-a1/pack", "digest 3ab200ba, 1.1 s"))
    assert _stale(committed, notebook("wrote 33 cases to /tmp/meshnb-a1/pack", "digest 3ab200bb, 1.1 s"))
    assert _stale(committed, notebook("wrote 33 cases to /tmp/meshnb-a1/pack", "digest 3ab200ba 7, 1.1 s"))
    f64, f32 = notebook("gap 0.008551902313419311"), notebook("gap 0.0013580538798123598")
    assert not _stale(f64, notebook("gap 0.008551902313419315"))  # float64 ulps: another CPU's BLAS
    assert _stale(f32, notebook(f"gap {float(np.nextafter(np.float32(0.0013580538798123598), np.float32(1)))}"))
