"""What ``import meshnb``, ``meshnb --help`` and ``meshnb train`` load (issue 35, item 5: start-up).

Default-deny: a fresh interpreter runs the command and reports every module it loaded; each of
meshnb's modules must be on the command's list, and each other module must be the standard
library's or of a package on the list.  A new import on the way (the sweep's loop, the CUDA
image, MPI, the conformance checker, the benchmarks) fails here, naming it: load it inside the
command that needs it.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

# What every command may load: the standard library (sys.stdlib_module_names), and these packages.
# yaml: numba's config reads .numba_config.yaml with it; colorama: numba's coloured error messages
NUMERIC = {"numpy", "numba", "llvmlite", "yaml", "colorama"}
# the venv's .pth hooks, and the modules Cython's runtime registers for numpy's compiled parts
SITE = {"_distutils_hack", "_numba_cuda_redirector", "__editable___meshnb_0_1_0_finder", "cython_runtime"}

# The meshnb modules of `meshnb train` (the single backend) and of the parser of every command.
TRAIN = {
    "meshnb",
    "meshnb.api",
    "meshnb.atomics",
    "meshnb.backend_table",
    "meshnb.backends",
    "meshnb.backends.single",
    "meshnb.checkpoint",
    "meshnb.cli",
    "meshnb.cli.base",
    "meshnb.cli.bench",
    "meshnb.cli.conformance",
    "meshnb.cli.cuda",
    "meshnb.cli.program",
    "meshnb.cli.sweep",
    "meshnb.cli.train",
    "meshnb.conformance",  # the package's docstring only
    "meshnb.conformance.fpu",  # the names of the ops, for `meshnb ops`'s choices (no numba)
    "meshnb.cpu",
    "meshnb.driver",
    "meshnb.exchange",
    "meshnb.files",
    "meshnb.floatz",
    "meshnb.host",
    "meshnb.interrupts",
    "meshnb.jit",
    "meshnb.kernels",
    "meshnb.lazy",
    "meshnb.loops",
    "meshnb.loops.grouped",
    "meshnb.loops.single",
    "meshnb.options",
    "meshnb.program",
    "meshnb.results",
    "meshnb.runspec",
    "meshnb.sha256",
    "meshnb.sweeps",  # the package: its names load on first use
    "meshnb.sweeps.plan",  # `meshnb sweep`'s options table, for its flags
    "meshnb.trace",
    "meshnb.vec",
    "meshnb.view",
}

_REPORT = """
import json, runpy, sys
before = set(sys.modules)
sys.argv = ["meshnb"] + json.loads(sys.argv[1])
try:
    if sys.argv[1:] == ["--import"]:
        import meshnb
    else:
        runpy.run_module("meshnb", run_name="__main__")
except SystemExit:
    pass
sys.stderr.write("\\nMODULES " + json.dumps(sorted(set(sys.modules) - before)) + "\\n")
"""


def _loaded(argv: list[str]) -> set[str]:
    done = subprocess.run(
        [sys.executable, "-c", _REPORT, json.dumps(argv)], capture_output=True, text=True, timeout=300
    )
    line = done.stderr.rsplit("\nMODULES ", 1)
    assert len(line) == 2, done.stderr
    return set(json.loads(line[1]))


def _denied(loaded: set[str], meshnb_allowed: set[str], packages: set[str]) -> list[str]:
    allowed_tops = set(sys.stdlib_module_names) | packages | SITE

    def allowed(name: str) -> bool:
        top = name.split(".")[0]
        if top == "meshnb":
            return name in meshnb_allowed
        return top in allowed_tops or top.startswith("_cython_")

    return [name for name in sorted(loaded) if not allowed(name)]


def test_denied_names_what_is_not_allowed():
    # the check itself: a module of meshnb off the list, a package off the list
    loaded = {"meshnb", "meshnb.sweeps.run", "numba", "numba.cuda", "mpi4py", "os", "json.decoder"}
    assert _denied(loaded, {"meshnb"}, NUMERIC) == ["meshnb.sweeps.run", "mpi4py"]
    assert _denied(loaded, {"meshnb"}, set()) == ["meshnb.sweeps.run", "mpi4py", "numba", "numba.cuda"]


def test_import_meshnb_loads_meshnb_only():
    loaded = _loaded(["--import"])
    assert "meshnb" in loaded
    assert _denied(loaded, {"meshnb", "meshnb.lazy"}, set()) == []  # no numpy, no numba: the names load on first use


@pytest.mark.parametrize(
    "argv",
    [["--help"], ["train", "--help"], ["train", "--steps", "64", "--no-progress"]],
    ids=["help", "train-help", "train"],
)
def test_train_loads_no_other_stack(argv):
    """No sweep loop or writer, no CUDA, MPI, conformance checker, benchmarks, tqdm for --no-progress.

    (``--help`` builds the parser of every command, whose flags come from the options table, which
    still imports the program and so numba: the list is the train command's.)"""
    loaded = _loaded(argv)
    assert "meshnb.cli.program" in loaded
    assert _denied(loaded, TRAIN, NUMERIC) == []
    assert not any(m.startswith(("numba.cuda", "numba_cuda", "mpi4py", "tqdm")) for m in loaded)


@pytest.mark.parametrize("name", ["meshnb", "meshnb.sweeps", "meshnb.conformance"])
def test_a_lazy_package_serves_every_name_it_lists(name):
    """PEP 562 packages: ``__all__`` (literal, for the API reference's static reading) is the
    table's names, and each resolves to the object of the module the table names."""
    import importlib

    package = importlib.import_module(name)
    assert sorted(package.__all__) == sorted(set(package._EXPORTS) | set(getattr(package, "_MODULES", ())))
    for attr in package.__all__:
        assert getattr(package, attr) is not None
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        package.nothing  # noqa: B018


# -- two audiences: the library and the executor-checking tools (docs/architecture.md) ----------

MESHNB = Path(__file__).resolve().parent.parent / "meshnb"
# The tools' side: their package (its face is meshnb.conformance.__all__) and their commands.
TOOLS = ("meshnb.conformance", "meshnb.cli.conformance", "meshnb.cli.cuda")
# Beside both: the independent oracle, which imports nothing of meshnb and is public to both.
BESIDE = ("meshnb.testing",)
# What meshnb.conformance may import of the library (docs/architecture.md, "Two audiences"): the public
# face's modules, then the named lower layers. import-linter's contract forbids the rest by name; this
# list admits by name, so a new module of the library is refused here until it is named.
TOOLS_MAY_IMPORT = {
    "meshnb.api": "meshnb.train's home (no module imports the root package): meshnb.__all__'s names only",
    "meshnb.sweeps": "public module",
    "meshnb.view": "public module",
    "meshnb.floatz": "public module",
    "meshnb.kernels": "public module",
    "meshnb.runspec": "a run's description and the one copy of its rules",
    "meshnb.checkpoint": "MAX_SYSTEMS, a cluster's most members",
    "meshnb.backend_table": "what each backend can do",
    "meshnb.samebits": "the one same-bits comparison",
    "meshnb.lazy": "the PEP 562 lazy face its package shares",
    "meshnb.files": "user files",
    "meshnb.interrupts": "the worker pool, Ctrl-C",
    "meshnb.cuda.host": "the CUDA image's launches",
    "meshnb.cuda.compare": "the device-word rule",
    "meshnb.cuda.ptx": "meshnb's kernels as PTX",
}


def _within(module: str, prefixes: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def _side(module: str) -> str | None:
    """``"tools"``, ``"library"``, or None (the oracle beside both)."""
    if _within(module, BESIDE):
        return None
    return "tools" if _within(module, TOOLS) else "library"


def _private(dotted: str) -> bool:
    return any(part.startswith("_") and not part.startswith("__") for part in dotted.split("."))


def _is_module(dotted: str) -> bool:
    path = MESHNB.parent.joinpath(*dotted.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def _meshnb_imports(module: str, tree: ast.Module, is_package: bool) -> list[tuple[int, str, str | None, str]]:
    """Every import of meshnb in ``tree`` (function-level ones included): ``(line, the module
    imported, the name taken from it or None for a module, the name it is bound to)``."""
    package = module.split(".") if is_package else module.split(".")[:-1]
    out: list[tuple[int, str, str | None, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.split(".")[0] != "meshnb":
                continue
            for alias in node.names:
                full = f"{target}.{alias.name}"
                if _is_module(full):
                    out.append((node.lineno, full, None, alias.asname or alias.name))
                else:
                    out.append((node.lineno, target, alias.name, alias.asname or alias.name))
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "meshnb":
                    out.append((node.lineno, alias.name, None, alias.asname or alias.name))
    return out


def boundary_crossings(module: str, source: str, is_package: bool = False) -> list[str]:
    """Every private name of the other side that ``module``'s ``source`` reaches for: ``from X import
    _name``, ``import X._mod``, ``X._name`` on a module of the other side bound to a name (by ``import``
    or ``from ... import module``), anywhere in the file (function-level imports included)."""
    here = _side(module)

    def crosses(target: str) -> bool:
        there = _side(target)
        return here is not None and there is not None and there != here

    tree = ast.parse(source)
    bound: dict[str, str] = {}  # local name -> the meshnb module it holds
    found: list[str] = []
    for line, target, name, local in _meshnb_imports(module, tree, is_package):
        if name is None:
            bound[local] = target
        if crosses(target) and (_private(target) or (name is not None and _private(name))):
            said = f"import {target}" if name is None else f"from {target} import {name}"
            found.append(f"{module}:{line}: {said}")
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute) or not node.attr.startswith("_") or node.attr.startswith("__"):
            continue
        chain = ast.unparse(node.value)  # meshnb.conformance.fpu, faults, ...
        head, _, rest = chain.partition(".")
        if head in bound:
            target = bound[head] + ("." + rest if rest else "")
            if _is_module(target) and crosses(target):
                found.append(f"{module}:{node.lineno}: {chain}.{node.attr}")
    return found


def unnamed_library_imports(module: str, source: str, is_package: bool = False) -> list[str]:
    """What a module of ``meshnb.conformance`` imports of the library outside :data:`TOOLS_MAY_IMPORT`
    (and from ``meshnb.api``, a name that is not meshnb's public)."""
    import meshnb

    if not _within(module, ("meshnb.conformance",)):
        return []
    found = []
    for line, target, name, _ in _meshnb_imports(module, ast.parse(source), is_package):
        if _side(target) != "library":
            continue
        allowed = next((m for m in TOOLS_MAY_IMPORT if _within(target, (m,))), None)
        if target == "meshnb.api" and name not in meshnb.__all__:
            allowed = None
        if allowed is None:
            found.append(
                f"{module}:{line}: " + (f"import {target}" if name is None else f"from {target} import {name}")
            )
    return found


def _modules() -> dict[str, Path]:
    out = {}
    for path in sorted(MESHNB.rglob("*.py")):
        parts = list(path.relative_to(MESHNB.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def test_boundary_crossings_names_each_kind_of_reach():
    # the scan itself, on planted sources: each way of reaching a private name across, and what is fine
    tools = "from meshnb.options import _check\nfrom ..runspec import OptionError\nfrom .. import runspec\n"
    tools += "runspec._x()\n"
    assert boundary_crossings("meshnb.conformance.pack", tools) == [
        "meshnb.conformance.pack:1: from meshnb.options import _check",
        "meshnb.conformance.pack:4: runspec._x",
    ]
    library = "import meshnb.conformance.fpu as f\nf._rules\nfrom meshnb.view import _offset\nimport os\nos._exit\n"
    assert boundary_crossings("meshnb.sweeps.run", library) == ["meshnb.sweeps.run:2: f._rules"]
    package = "from . import _helpers\nfrom ..cuda.host import _launch\n"
    assert boundary_crossings("meshnb.conformance", package, is_package=True) == [
        "meshnb.conformance:2: from meshnb.cuda.host import _launch"
    ]
    assert boundary_crossings("meshnb.testing.reference", "from meshnb.view import _x\n") == []  # beside both


def test_unnamed_library_imports_names_each():
    source = (
        "from meshnb.api import train, run\nfrom ..loops import single\nfrom ..view import View\nfrom . import fpu\n"
    )
    assert unnamed_library_imports("meshnb.conformance.gpu", source) == [
        "meshnb.conformance.gpu:1: from meshnb.api import run",
        "meshnb.conformance.gpu:2: import meshnb.loops.single",
    ]
    assert unnamed_library_imports("meshnb.cli.train", source) == []  # the command line sits above both


def test_neither_audience_reaches_into_the_others_private_names():
    """The library and the tools meet only at public names: the tools' face is meshnb.conformance's
    ``__all__`` and their modules' public names, the library's its public names (import-linter's
    contracts say which modules; this says which names)."""
    found = []
    for module, path in _modules().items():
        found += boundary_crossings(module, path.read_text(encoding="utf-8"), path.name == "__init__.py")
    assert found == [], "private names across the library/tools boundary:\n" + "\n".join(found)


def test_the_tools_import_only_the_named_parts_of_the_library():
    found = []
    for module, path in _modules().items():
        found += unnamed_library_imports(module, path.read_text(encoding="utf-8"), path.name == "__init__.py")
    assert found == [], "the tools import the library outside TOOLS_MAY_IMPORT:\n" + "\n".join(found)
