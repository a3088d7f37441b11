"""The public API: ``meshnb.__all__`` is what is public, ``train``'s signature is the options table's,
every public name is documented, and a type checker sees the types a user gets."""

from __future__ import annotations

import inspect
import os
import re
import subprocess
import sys
import textwrap
from importlib.metadata import version
from pathlib import Path

import pytest

import meshnb
from meshnb.options import option_fields
from meshnb.results import RunResult

from .util import run_python


def test_train_signature_is_the_options_table():
    params = list(inspect.signature(meshnb.train).parameters.values())
    assert [(p.name, p.default) for p in params] == [(n, d) for n, d, _ in option_fields()]
    assert params[0].kind is inspect.Parameter.POSITIONAL_OR_KEYWORD  # train(4096)
    assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in params[1:])


def test_train_documents_every_option():
    doc = inspect.getdoc(meshnb.train) or ""
    missing = [n for n, _, _ in option_fields() if not re.search(rf"^{n} : ", doc, re.M)]
    assert not missing, f"train's docstring has no Parameters entry for {missing}"  # numpydoc


def test_train_refuses_an_unknown_keyword_by_name():
    with pytest.raises(TypeError, match="step_bse"):
        meshnb.train(10, step_bse=3)  # type: ignore[call-arg]


@pytest.mark.parametrize("name", meshnb.__all__)
def test_every_public_name_resolves_and_is_documented(name):
    value = getattr(meshnb, name)
    if inspect.ismodule(value) or callable(value):
        assert (inspect.getdoc(value) or "").strip(), f"meshnb.{name} has no docstring"


def test_public_classes_document_their_public_members():
    undocumented = []
    for name in meshnb.__all__:
        cls = getattr(meshnb, name)
        if not inspect.isclass(cls) or not cls.__module__.startswith("meshnb"):
            continue
        for attr, member in vars(cls).items():
            if attr.startswith("_") or not (inspect.isfunction(member) or isinstance(member, (property, classmethod))):
                continue
            func = member.fget if isinstance(member, property) else getattr(member, "__func__", member)
            if not (func.__doc__ or "").strip():
                undocumented.append(f"{name}.{attr}")
    assert not undocumented


def test_run_result_serves_system_zero_as_attributes():
    r = meshnb.train(64)
    names = ("params", "params_hex", "loss", "last_loss", "page", "counters", "digest", "trace_digest", "trace")
    for name in names:
        assert isinstance(inspect.getattr_static(RunResult, name), property), name
        assert name in dir(r)
    assert r.digest == r.systems[0].digest and r.page == r.systems[0].page
    with pytest.raises(AttributeError):
        r.no_such_field  # type: ignore[attr-defined]  # noqa: B018


def test_version_is_the_package_metadata():
    assert meshnb.__version__ == version("meshnb")


def test_internals_are_not_package_attributes():
    code = (
        "import meshnb; print(sorted(n for n in ('loops', 'rounds', 'atomics', 'driver', 'vec') if hasattr(meshnb, n)))"
    )
    assert run_python(code).stdout.strip() == "[]"
    assert set(dir(meshnb)) >= set(meshnb.__all__)


@pytest.mark.slow
def test_a_type_checker_sees_the_api(tmp_path: Path):
    """mypy on a user's script: typos in keywords are errors, results are typed.  (An editable
    install is an import hook mypy cannot follow, so the source tree is named by MYPYPATH; an
    installed wheel carries py.typed: the next test.)"""
    pytest.importorskip("mypy", reason="mypy is not installed (the test extra has it)")
    script = tmp_path / "user.py"
    script.write_text(
        textwrap.dedent(
            """
            import meshnb
            r = meshnb.train(10)
            reveal_type(r.params)
            reveal_type(r.digest)
            meshnb.train(10, step_bse=3)
            """
        )
    )
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--no-incremental",
            "--follow-imports=silent",
            "--cache-dir",
            str(tmp_path / "c"),
            str(script),
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=600,
        env={**os.environ, "MYPYPATH": str(Path(meshnb.__file__).parent.parent)},
    ).stdout
    assert 'Revealed type is "numpy.ndarray' in out, out
    assert re.search(r'Revealed type is "(builtins\.)?str"', out), out
    assert 'Unexpected keyword argument "step_bse"' in out, out


def test_the_package_says_it_is_typed():
    assert (Path(meshnb.__file__).parent / "py.typed").is_file()
    pyproject = (Path(meshnb.__file__).parent.parent / "pyproject.toml").read_text()
    assert '"meshnb" = ["py.typed"]' in pyproject  # shipped in the wheel
