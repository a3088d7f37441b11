"""What ``import meshnb``, ``meshnb --help`` and ``meshnb train`` load (issue 35, item 5: start-up).

Default-deny: a fresh interpreter runs the command and reports every module it loaded; each of
meshnb's modules must be on the command's list, and each other module must be the standard
library's or of a package on the list.  A new import on the way (the sweep's loop, the CUDA
image, MPI, the conformance checker, the benchmarks) fails here, naming it: load it inside the
command that needs it.
"""

from __future__ import annotations

import json
import subprocess
import sys

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
    assert _denied(loaded, {"meshnb"}, set()) == []  # no numpy, no numba: the names load on first use


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


@pytest.mark.parametrize("name", ["meshnb", "meshnb.sweeps"])
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
