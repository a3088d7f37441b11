"""CI runs what a new user runs: the README's two commands, as printed, first (``.ci/run``, which
reads them from README.md through ``.ci/readme_commands.py``); Getting started prints the same two."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CI = ROOT / ".ci" / "run"


def _readme_commands():
    spec = importlib.util.spec_from_file_location("readme_commands", ROOT / ".ci" / "readme_commands.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_readme_has_the_two_commands_a_new_user_copies() -> None:
    main, tests = _readme_commands().commands((ROOT / "README.md").read_text(encoding="utf-8"))
    assert main.startswith("python3 -m venv .venv && ") and main.endswith(" && .venv/bin/meshnb train"), main
    assert ' .venv/bin/pip install -e ".[test]" && ' in tests, tests  # the test extra, not dev
    assert tests.endswith(" && .venv/bin/python -m pytest"), tests


def test_getting_started_prints_the_readmes_two_commands() -> None:
    rc = _readme_commands()
    readme = rc.commands((ROOT / "README.md").read_text(encoding="utf-8"))
    text = (ROOT / "docs" / "getting-started.md").read_text(encoding="utf-8")
    block = re.search(r"^```sh\n(.*?)^```", text, re.MULTILINE | re.DOTALL)
    assert block is not None
    shown = [line for line in block.group(1).splitlines() if line.strip() and not line.startswith("#")]
    assert shown == readme


def test_ci_runs_the_readmes_two_commands_first_as_printed() -> None:
    """Before anything installs or tests, ``.ci/run`` runs README command 1, then command 2, each
    as the text ``readme_commands.py`` prints from README.md, in the clone's directory."""
    lines = [line.strip() for line in CI.read_text(encoding="utf-8").splitlines()]
    body = [line for line in lines if line and not line.startswith("#")]
    runs = [i for i, line in enumerate(body) if re.fullmatch(r"readme [12]", line)]
    assert [body[i] for i in runs] == ["readme 1", "readme 2"], runs
    before = body[: runs[0]]
    doing = re.compile(r"(pip|pytest|meshnb|ruff|mypy|mkdocs|lint-imports|venv)\b")
    assert not [line for line in before if doing.search(line) and "readme_commands.py" not in line], before
    # the function `readme` runs the printed text itself
    func = CI.read_text(encoding="utf-8").split("readme() {", 1)[1].split("\n}", 1)[0]
    assert 'cmd="$(python3 .ci/readme_commands.py "$1")"' in func and 'bash -c "$cmd"' in func, func


@pytest.mark.parametrize("n", ["1", "2"])
def test_the_ci_helper_prints_each_command_as_printed(n: str) -> None:
    want = _readme_commands().commands((ROOT / "README.md").read_text(encoding="utf-8"))[int(n) - 1]
    proc = subprocess.run(
        [sys.executable, str(ROOT / ".ci" / "readme_commands.py"), n], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0 and proc.stdout == want + "\n", proc.stderr


def test_the_ci_helper_refuses_a_readme_without_two_commands() -> None:
    rc = _readme_commands()
    for text in ("# meshnb\n", "## Set-up and the two commands\n\n```sh\n# one\nonly-one\n```\n"):
        with pytest.raises(ValueError):
            rc.commands(text)


def _default_and_ci_marker_sets() -> tuple[set[str], set[str], set[str]]:
    """The markers the default run leaves out (addopts' ``-m "not a and not b"``), the markers
    ``.ci/run``'s slow-matrix step selects (``-m "a or b"``), and the markers pyproject registers."""
    options = (ROOT / "pyproject.toml").read_text("utf-8").split("[tool.pytest.ini_options]")[1]
    addopts = re.search(r"^addopts = '(.*)'$", options, re.MULTILINE)
    assert addopts, "pyproject's addopts is no longer one single-quoted string"
    default = re.search(r'-m "([^"]*)"', addopts.group(1))
    assert default, addopts.group(1)
    left_out = re.fullmatch(r"not (\w+)((?: and not \w+)*)", default.group(1))
    assert left_out, default.group(1)
    excluded = set(re.findall(r"not (\w+)", default.group(1)))
    ci = re.findall(r'python -m pytest -m "([^"]*)"', CI.read_text(encoding="utf-8"))
    assert len(ci) == 1 and re.fullmatch(r"\w+(?: or \w+)*", ci[0]), ci
    registered = set(re.findall(r'^\s+"(\w+): ', options.split("markers = [", 1)[1].split("]", 1)[0], re.MULTILINE))
    return excluded, set(ci[0].split(" or ")), registered


def test_the_default_run_and_ci_s_slow_matrix_together_run_every_test_once() -> None:
    """The README's command runs the default suite (pyproject's addopts leaves the slow matrix out by
    marker); ``.ci/run`` then runs exactly the complement, so CI runs every test, each once, and a newly
    registered marker must be placed on one side."""
    excluded, ci, registered = _default_and_ci_marker_sets()
    assert excluded == ci == registered, (excluded, ci, registered)
