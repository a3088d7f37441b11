"""``meshnb check PACK --exec`` on executors written apart from meshnb (tests/conformance/executors/):
the correct ports pass every case of the quick pack, each faulty one fails a case (exit 1).

Only verdicts and exit codes are asserted here, never the diagnosis' wording (issue 34, item 2 changes it):
what the check says of each is measured by ``python -m tests.conformance.executors.report`` and recorded in
docs/guide/checking-an-executor.md. A faulty executor runs only on the case its mistake is known to fail
(``Executor.catches``), so the module stays short; the report runs each on every case.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from xml.etree import ElementTree

import pytest

from meshnb.conformance import pack
from tests.conformance.executors import EXECUTORS, Executor, build, command, compiler, missing_cpu, report
from tests.conformance.executors.host import argv

pytestmark = pytest.mark.slow  # about a minute: two controls on the whole quick pack, then one case each

ROOT = Path(__file__).resolve().parents[2]
CONTROLS = [e for e in EXECUTORS.values() if e.kind == "control"]
FAULTY = [e for e in EXECUTORS.values() if e.kind != "control"]


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory for the C ports' binaries (built on first use)."""
    return tmp_path_factory.mktemp("executors")


@pytest.fixture(scope="module")
def full_pack(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("pack") / "full"
    pack.write_pack(root)
    return root


def exec_command(e: Executor, into: Path) -> str:
    if e.flags is not None and compiler() is None:
        pytest.skip("no C compiler")
    if missing_cpu(e):
        pytest.skip(f"the CPU lacks {e.cpu}: {e.name} would not show its mistake")
    binary = into / f"train_port-{e.name}"
    return command(e, binary if binary.exists() else build(e, into))


def check(pack_dir: Path, cmd: str, *extra: str) -> tuple[int, dict[str, object]]:
    code, doc = report.check(pack_dir, cmd, "-j", "2", *extra)
    assert doc, f"meshnb check printed no JSON (exit {code})"
    return code, doc


@pytest.mark.parametrize("e", CONTROLS, ids=lambda e: e.name)
def test_control_passes_every_case(e: Executor, quick_pack: Path, built: Path) -> None:
    code, doc = check(quick_pack, exec_command(e, built))
    cases = doc["cases"]
    assert isinstance(cases, list)
    assert [c["name"] for c in cases if c["verdict"] != "PASS"] == []
    assert len(cases) == len(pack.cases(quick=True))
    assert code == 0


@pytest.mark.parametrize("e", FAULTY, ids=lambda e: e.name)
def test_faulty_fails_a_case(e: Executor, quick_pack: Path, built: Path, tmp_path: Path) -> None:
    junit = tmp_path / "report.xml"
    code, doc = check(quick_pack, exec_command(e, built), "--cases", e.catches, "--junit", str(junit))
    assert (doc["passed"], doc["failed"], doc["errors"]) == (0, 1, 0)  # the bits differ: no crash, no error
    assert code == 1
    # the JUnit report carries what the JSON says of the case (its first difference and diagnosis)
    cases = doc["cases"]
    assert isinstance(cases, list)
    failures = ElementTree.parse(junit).findall(".//testcase/failure")
    assert [f.get("message") for f in failures] == [cases[0]["message"]]


@pytest.mark.slow
@pytest.mark.parametrize("e", FAULTY, ids=lambda e: e.name)
def test_faulty_fails_the_same_case_of_the_full_pack(e: Executor, full_pack: Path, built: Path) -> None:
    """The quick pack's cases are the full pack's, shorter: the case that catches a mistake in the
    one catches it in the other (the quick step-base-2^32 crosses 2^32 as the full one does)."""
    code, doc = check(full_pack, exec_command(e, built), "--cases", e.catches)
    assert (doc["passed"], doc["failed"], doc["errors"]) == (0, 1, 0)
    assert code == 1


def test_every_kind_of_mistake_once() -> None:
    """Eight or more faulty executors, of different kinds, each named for one case it must fail."""
    assert len(FAULTY) >= 8
    assert len({e.kind for e in FAULTY}) >= 8
    names = {c.name for c in pack.cases(quick=True)}
    assert all(e.catches in names for e in FAULTY)


def test_host_passes_the_case_on(quick_pack: Path, tmp_path: Path) -> None:
    """The C port's command line: the systems, the group, the run, every page and SET_LR of the case."""
    cmd = argv("port", quick_pack / "cluster-3", tmp_path)
    cj = json.loads((quick_pack / "cluster-3" / "case.json").read_text())
    assert cmd[:8] == ["port", "3", "1", str(cj["steps"]), "64", "0", "1", str(tmp_path)]
    assert cmd[8:11] == [str(quick_pack / "cluster-3" / f"in-{k}.page") for k in range(3)]
    assert cmd[11:] == [f"{e['before_step']}:{e['word']}" for e in cj["set_lr"]] != []


def test_report_row() -> None:
    """A row of the docs' table: the first failing case, its difference and what the check says there."""
    cases: list[dict[str, object]] = [
        {"name": "a", "verdict": "PASS", "where": "", "models": [], "message": ""},
        {"name": "b", "verdict": "FAIL", "where": "step 3 (e)", "models": [], "message": "m; no model"},
        {"name": "c", "verdict": "FAIL", "where": "step 0 (e)", "models": ["x86-ftz"], "message": "m"},
    ]
    row = report.row(EXECUTORS["xor-order"], 1, {"cases": cases}, 2.4)
    assert row.endswith("| 1 | 2/3 | `b` | step 3 (e) | no model | 2 |")
    assert report.says(cases[2]) == "names x86-ftz"


def test_report_runs(quick_pack: Path) -> None:
    """The report script as the docs say to run it (two executors, one case, to stay short)."""
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "tests.conformance.executors.report",
            str(quick_pack),
            "--only",
            "correct,sin-f32",
            "--cases",
            "default",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
    )
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].startswith("| executor |") and len(lines) == 4
    assert "| 0 | 0/1 |" in lines[2] and "passes every case" in lines[2]
    assert "| 1 | 1/1 | `default` |" in lines[3] and "`sin-f32`" in lines[3]
