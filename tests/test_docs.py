"""The documentation: the site builds with ``mkdocs build --strict``; its API reference covers every
public name, with cross-reference links and signatures a user calls, its CLI reference every command
and option; the notebooks render with their plots; the README stays a summary (at most 250 lines)
whose relative links resolve; every public function and class has a numpydoc docstring with a
runnable ``Examples`` section (run by ``python -m pytest`` through ``--doctest-modules``)."""

from __future__ import annotations

import argparse
import ast
import html
import importlib
import importlib.util
import inspect
import os
import pkgutil
import re
import subprocess
import sys
import zlib
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

import meshnb
from meshnb import conformance
from meshnb.cli import build_parser

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"

# The public modules besides meshnb itself: their __all__, or else every name they define without a
# leading underscore (meshnb/__init__.py's docstring; the API pages render each).
# The two public faces (architecture, "Two audiences"): the library's public modules beside meshnb's
# __all__, and the tools' names in meshnb.conformance's __all__ (_public_objects adds both).  Internal
# modules' names say what they are in a line or three; only the faces carry numpydoc with examples.
PUBLIC_MODULES = (
    "meshnb.floatz",
    "meshnb.kernels",
    "meshnb.sweeps",
    "meshnb.testing",
    "meshnb.testing.reference",
    "meshnb.testing.pages",
    "meshnb.cli",
)

_SECTION = re.compile(r"^([A-Z][A-Za-z ]+)\n-{3,}[ \t]*$", re.MULTILINE)


def _defined_in(obj: Any) -> str:
    """The module that defines ``obj`` (an njit dispatcher's Python function's module)."""
    return str(getattr(getattr(obj, "py_func", obj), "__module__", ""))


def _public_objects() -> dict[str, Any]:
    """``{path: object}`` of every public function and class (``meshnb.__all__`` and the public
    modules' public names), each under the path of the module that defines it, and every public
    method a class defines (properties are attributes: their docstring says what they hold)."""
    found: dict[str, Any] = {}

    def add(module: ModuleType, names: list[str]) -> None:
        for name in names:
            obj = getattr(module, name)
            if inspect.ismodule(obj) or not (
                callable(obj) and (inspect.isclass(obj) or hasattr(obj, "__code__") or hasattr(obj, "py_func"))
            ):
                continue  # a constant (LAYOUT, VIEW_BYTES): documented by its module
            found[f"{_defined_in(obj)}.{name}"] = obj

    add(meshnb, list(meshnb.__all__))
    add(conformance, [n for n in conformance.__all__ if not inspect.ismodule(getattr(conformance, n))])
    for path in PUBLIC_MODULES:
        module = importlib.import_module(path)
        names = getattr(module, "__all__", None)
        if names is None:
            names = [n for n, o in vars(module).items() if not n.startswith("_") and _defined_in(o) == path]
        add(module, list(names))
    for path, obj in list(found.items()):
        if inspect.isclass(obj):
            for name, member in vars(obj).items():
                function = getattr(member, "__func__", member)  # a classmethod's or staticmethod's
                if not name.startswith("_") and inspect.isfunction(function):
                    found[f"{path}.{name}"] = function
    return found


def _parameters(obj: Any) -> list[str]:
    """The names a caller passes to ``obj`` (a class: its constructor), ``*args``/``**kwargs`` aside."""
    try:
        signature = inspect.signature(getattr(obj, "py_func", obj))
    except ValueError:  # a builtin without a signature
        return []
    kinds = (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
    return [p.name for p in signature.parameters.values() if p.kind not in kinds and p.name not in ("self", "cls")]


def _returns_something(obj: Any) -> bool:
    if inspect.isclass(obj):
        return False
    annotation = inspect.signature(getattr(obj, "py_func", obj)).return_annotation
    return annotation not in (inspect.Signature.empty, None, "None", "NoReturn", "Never")


def docstring_findings(obj: Any) -> list[str]:
    """What ``obj``'s docstring lacks of numpydoc's sections: an ``Examples`` section with at least
    one ``>>>``; ``Parameters`` naming exactly what a caller passes; ``Returns`` (or ``Yields``)
    where a function returns something.  (``Raises`` and ``See Also`` are written where they say
    something.)"""
    doc = inspect.cleandoc(getattr(obj, "__doc__", None) or "")
    if not doc:
        return ["no docstring"]
    parts = _SECTION.split(doc)
    sections = {parts[i]: parts[i + 1] for i in range(1, len(parts) - 1, 2)}
    findings = []
    if ">>>" not in sections.get("Examples", ""):
        findings.append("no Examples section with a >>> example")
    expected = _parameters(obj)
    if expected:
        heads = re.findall(r"^(\S[^:\n]*?)(?:\s*:.*)?$", sections.get("Parameters", ""), re.MULTILINE)
        documented = [name.strip().lstrip("*") for head in heads for name in head.split(",")]
        if "Parameters" not in sections:
            findings.append(f"no Parameters section (takes {', '.join(expected)})")
        elif set(documented) != set(expected):
            findings.append(f"Parameters documents {sorted(documented)}, the signature takes {sorted(expected)}")
    if _returns_something(obj) and not ({"Returns", "Yields"} & set(sections)):
        findings.append("no Returns section")
    unknown = set(sections) - {
        "Parameters",
        "Other Parameters",
        "Attributes",
        "Methods",
        "Returns",
        "Yields",
        "Receives",
        "Raises",
        "Warns",
        "Warnings",
        "See Also",
        "Notes",
        "References",
        "Examples",
    }
    if unknown:
        findings.append(f"sections numpydoc does not know: {sorted(unknown)}")
    return findings


def every_module() -> dict[str, Path]:
    """``{name: source file}`` of every module of the package, found by walking it
    (``pkgutil.walk_packages``), ``meshnb`` itself first."""
    found = {"meshnb": ROOT / "meshnb" / "__init__.py"}
    for info in pkgutil.walk_packages(meshnb.__path__, "meshnb."):
        spec = importlib.util.find_spec(info.name)
        assert spec is not None and spec.origin is not None
        found[info.name] = Path(spec.origin)
    return found


def _top_level(body: list[ast.stmt]) -> list[ast.stmt]:
    """A module's or class's statements, with those of its top-level ``if`` and ``try`` blocks
    (a definition made only on some platforms or versions)."""
    out: list[ast.stmt] = []
    for node in body:
        if isinstance(node, ast.If):
            out += _top_level(node.body + node.orelse)
        elif isinstance(node, ast.Try):
            out += _top_level(node.body + node.orelse + node.finalbody)
        else:
            out.append(node)
    return out


def every_public_name() -> dict[str, tuple[str, bool]]:
    """``{path: (module, has a docstring)}`` of every function and class without a leading underscore
    that a module of the package defines at its top level, read from the source (nothing is imported,
    so the CUDA modules count without numba-cuda).  Methods may inherit what their base class says."""
    found: dict[str, tuple[str, bool]] = {}
    defs = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
    for module, source in every_module().items():
        tree = ast.parse(source.read_text(encoding="utf-8"))
        for node in _top_level(tree.body):
            if isinstance(node, defs) and not node.name.startswith("_"):
                found[f"{module}.{node.name}"] = (module, bool(ast.get_docstring(node)))
    return found


def test_every_name_says_what_it_is() -> None:
    found = every_public_name()
    modules = {m for m, _ in found.values()}
    assert {"meshnb.runspec", "meshnb.host", "meshnb.samebits", "meshnb.loops.single", "meshnb.cuda.ptx"} <= modules
    assert {"meshnb.view.View", "meshnb.kernels.step_sums", "meshnb.api.train"} <= set(found)
    missing = sorted(path for path, (_, has) in found.items() if not has)
    assert not missing, "names without a docstring: " + ", ".join(missing)


def test_public_names_have_numpydoc_docstrings_with_examples() -> None:
    objects = _public_objects()
    assert len(objects) > 120
    assert {
        "meshnb.view.View.digest",
        "meshnb.floatz.flush",
        "meshnb.sweeps.run.sweep",
        "meshnb.testing.reference.run",
    } <= set(objects)
    missing = {}
    for path, obj in sorted(objects.items()):
        if findings := docstring_findings(obj):
            missing[path] = findings
    assert not missing, "public names without a numpydoc docstring with examples:\n" + "\n".join(
        f"  {path}: {'; '.join(f)}" for path, f in missing.items()
    )


def test_the_docstring_check_finds_what_is_missing() -> None:
    def bare(a: int, b: int) -> int:
        """Adds."""
        return a + b

    def documented(a: int, b: int) -> int:
        """Adds.

        Parameters
        ----------
        a, b : int
            What to add.

        Returns
        -------
        int

        Examples
        --------
        >>> documented(1, 2)
        3
        """
        return a + b

    def stale(a: int) -> None:
        """Does nothing.

        Parameters
        ----------
        b : int
            A parameter it no longer takes.

        Example
        -------
        >>> stale(1)
        """

    assert docstring_findings(bare) == [
        "no Examples section with a >>> example",
        "no Parameters section (takes a, b)",
        "no Returns section",
    ]
    assert docstring_findings(stale) == [
        "no Examples section with a >>> example",
        "Parameters documents ['b'], the signature takes ['a']",
        "sections numpydoc does not know: ['Example']",
    ]
    assert docstring_findings(documented) == []


def test_pytest_runs_the_docstring_examples_with_the_tests() -> None:
    # the README's test command, `python -m pytest` with no arguments, collects the package's doctests
    pytest_options = (ROOT / "pyproject.toml").read_text("utf-8").split("[tool.pytest.ini_options]")[1]
    testpaths = re.search(r"^testpaths = (.*)$", pytest_options, re.MULTILINE)
    addopts = re.search(r"^addopts = (.*)$", pytest_options, re.MULTILINE)
    assert testpaths and '"meshnb"' in testpaths.group(1)
    assert addopts and "--doctest-modules" in addopts.group(1)


def test_doctest_collection_leaves_out_what_cannot_be_imported(monkeypatch: pytest.MonkeyPatch) -> None:
    spec = importlib.util.spec_from_file_location("root_conftest", ROOT / "conftest.py")
    assert spec is not None and spec.loader is not None
    conftest = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(conftest)
    ignore = conftest.pytest_ignore_collect
    assert ignore(ROOT / "tests" / "mpi_exchange_check.py")  # runs MPI on import
    assert ignore(ROOT / "tests" / "util.py") and ignore(ROOT / "tests" / "cuda" / "ptx" / "make_fixtures.py")
    assert ignore(ROOT / "bench" / "mpi_worker.py") and ignore(ROOT / "bench" / "test_bench_kernels.py") is None
    assert ignore(ROOT / "tests" / "test_docs.py") is None and ignore(ROOT / "tests" / "conftest.py") is None
    assert ignore(ROOT / "meshnb" / "floatz.py") is None
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "numba_cuda" else real(name, *a))
    assert ignore(ROOT / "meshnb" / "cuda" / "image.py")  # without the cuda extra
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: object() if name == "numba_cuda" else real(name, *a)
    )
    assert ignore(ROOT / "meshnb" / "cuda" / "image.py") is None


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


def _docs_module(name: str) -> ModuleType:
    """A griffe extension of the docs build (docs/NAME.py), loaded by path."""
    pytest.importorskip("griffe", reason="the docs extra: pip install -e '.[docs]'")
    spec = importlib.util.spec_from_file_location(f"docs_{name}", ROOT / "docs" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_roles_and_see_also_entries_become_cross_references() -> None:
    roles = _docs_module("griffe_roles")
    paths = {"flush": "meshnb.floatz.flush", "init": "meshnb.program.init", "prepare": "meshnb.host.prepare"}
    text = (
        "Uses :func:`flush`, :func:`~meshnb.floatz.bits`, :func:`prepare` and :class:`numpy.ndarray`.\n\n"
        "See Also\n--------\ninit, flush : the program,\n    and its flush.\nprepare\n\n"
        "Examples\n--------\n>>> 1\n1\n"
    )
    out = roles.rewrite(
        text, lambda t: paths.get(t, t if t.startswith("meshnb.") else None), lambda p: not p.startswith("meshnb.host")
    )
    assert out.startswith("Uses [`flush`][meshnb.floatz.flush], [`bits`][meshnb.floatz.bits], ")
    # not on the API pages: a link only where some page renders it, never a broken one
    optional = '<autoref identifier="meshnb.host.prepare" optional><code>prepare</code></autoref>'
    assert f"{optional} and `numpy.ndarray`." in out
    assert "- [`init`][meshnb.program.init], [`flush`][meshnb.floatz.flush]: the program, and its flush.\n" in out
    assert f"- {optional}\n" in out and out.endswith("Examples\n--------\n>>> 1\n1\n")


def test_dataclass_signatures_show_the_default_a_caller_gets() -> None:
    signatures = _docs_module("griffe_signatures")
    import griffe

    def default(source: str) -> str:
        return str(
            signatures.user_default(
                griffe.get_expression(ast.parse(source).body[0].value, griffe.Module("m"), parse_strings=False)
            )
        )  # type: ignore[attr-defined]

    assert default('_opt(None, Flag("--steps", "steps to run", "S", parse_count))') == "None"
    assert default('option_field(4096, Flag("--steps", "steps to run", "S", parse_count))') == "4096"  # the tables'
    assert default("field(default=5, metadata={'flag': 1})") == "5"
    assert default("field(default_factory=list)") == "list()"
    assert default("Flag('--x')") == "Flag('--x')"  # a public call is what the caller gets


@pytest.mark.docs
@pytest.mark.slow
def test_api_pages_link_and_every_link_resolves(site: Path) -> None:
    floatz = (site / "api" / "floatz" / "index.html").read_text(encoding="utf-8")
    assert 'class="autorefs autorefs-internal" title="flush" href="#meshnb.floatz.flush"' in floatz
    checked = 0
    for page in (site / "api").rglob("*.html"):
        text = page.read_text(encoding="utf-8")
        assert "[`" not in html.unescape(re.sub(r"<code>.*?</code>", "", text, flags=re.S)), (
            f"{page}: an unresolved cross-reference"
        )
        for href in re.findall(r'class="autorefs autorefs-internal"[^>]* href="([^"]*)"', text):
            where, _, anchor = href.partition("#")
            target = (page.parent / where / "index.html") if where else page
            assert f'id="{anchor}"' in target.resolve().read_text(encoding="utf-8"), f"{page}: {href} goes nowhere"
            checked += 1
    assert checked > 100


@pytest.mark.docs
@pytest.mark.slow
def test_run_options_signature_is_what_a_user_writes(site: Path) -> None:
    page = (site / "api" / "options" / "index.html").read_text(encoding="utf-8")
    start = page.index('id="meshnb.options.RunOptions"')
    signature = page[page.index("doc-signature", start) : page.index("</code></pre>", start)]
    text = html.unescape(re.sub(r"<[^>]+>", "", signature))
    assert "steps: int | None = None" in text and "backend: str | None = None" in text
    assert "Flag(" not in text and "option_field(" not in text and len(text) < 1200, text


HISTORY = re.compile(r"\b[Ii]ssues? \d+|\b20\d\d-\d\d-\d\d\b|\b[Bb]efore issue\b")


def test_the_package_carries_no_change_history() -> None:
    """Docstrings and comments say what a thing is and does: an issue number or a date (history)
    belongs in docs/changelog.md and git, not in meshnb/."""
    found = [
        f"{path.relative_to(ROOT)}:{n}: {line.strip()}"
        for path in sorted((ROOT / "meshnb").rglob("*.py"))
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if HISTORY.search(line)
    ]
    assert found == [], found
