"""``meshnb check PACK --exec CMD | --outputs DIR``: a whole pack against an executor.

The executors are ``fault_executor.py`` (beside this file): a fault model of
:mod:`meshnb.conformance.faults` run as the case says, or one that crashes, hangs, writes nothing,
a short page or garbage.  The cases each model changes are test_check's table (``EXPOSED``).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from meshnb.cli import main
from meshnb.conformance import pack, suite

from ..util import threads_taking_stop_signals
from .test_check import EXPOSED

EXECUTOR = Path(__file__).with_name("fault_executor.py")
ROOT = Path(__file__).resolve().parents[2]


def executor(mode: str) -> str:
    return f"{shlex.quote(sys.executable)} {shlex.quote(str(EXECUTOR))} {mode}"


def run_check(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(["check", *args])
    out, err = capsys.readouterr()
    return code, out, err


def junit(path: Path) -> ET.Element:
    top = ET.parse(path).getroot()
    assert top.tag == "testsuites"
    return top


@pytest.mark.slow
def test_fault_free_executor_passes_every_case(
    quick_pack: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    report = tmp_path / "junit.xml"
    code, out, err = run_check(
        [str(quick_pack), "--exec", executor("mode-z"), "-j", "2", "--junit", str(report)], capsys
    )
    n = len(pack.cases(quick=True))
    assert code == 0, out + err
    assert out.splitlines()[-1] == f"{n} passed, 0 failed, 0 errors of {n} cases"
    assert sum(" PASS" in line for line in out.splitlines()) == n and err == ""
    top = junit(report)
    assert (top.get("tests"), top.get("failures"), top.get("errors")) == (str(n), "0", "0")
    cases = top.findall("./testsuite/testcase")
    assert [c.get("name") for c in cases] == [c.name for c in pack.cases(quick=True)]
    assert not top.findall(".//failure") and not top.findall(".//error")


# (model, cases picked): a few cases each, among them those the model changes and some it does not.
# The default run checks two (a cluster fault, a probe fault: 15-20 s on 2 cores); the rest are slow.
SLOW = pytest.mark.slow
PICKS = [
    ("fold-reverse", "cluster-*"),
    pytest.param("raw-lr-inv", "*subnormal*", marks=SLOW),
    ("ftz-before-rounding", "probe-*"),
    pytest.param("x86-ftz", "probe-*", marks=SLOW),
    pytest.param("no-daz", "probe-*", marks=SLOW),
    pytest.param("nan-arm", "hard-*n*", marks=SLOW),
    pytest.param("fma-apply", "lr-*", marks=SLOW),
]


@pytest.mark.parametrize(("model", "glob"), PICKS)
@pytest.mark.usefixtures("unhurried")  # the causes named, whatever the machine's load
def test_each_faulty_executor_fails_exactly_its_cases(
    model: str, glob: str, quick_pack: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    report = tmp_path / "junit.xml"
    code, out, err = run_check(
        [str(quick_pack), "--exec", executor(model), "--cases", glob, "-j", "2", "--json", "--junit", str(report)],
        capsys,
    )
    doc = json.loads(out)
    picked = suite.select(quick_pack, glob)
    want = EXPOSED[model] & set(picked)
    assert want and set(picked) - want, "the pick must hold cases the model changes and cases it does not"
    failed = {c["name"] for c in doc["cases"] if c["verdict"] == "FAIL"}
    assert failed == want, doc
    assert code == 1 and doc["errors"] == 0 and doc["passed"] == len(picked) - len(want)
    for c in doc["cases"]:
        if c["verdict"] == "FAIL":
            assert model in c["models"], c["report"]
            assert model in c["message"]
    top = junit(report)
    assert (top.get("tests"), top.get("failures"), top.get("errors")) == (str(len(picked)), str(len(want)), "0")
    for tc in top.findall("./testsuite/testcase"):
        failure = tc.find("failure")
        assert (failure is not None) == (tc.get("name") in want)
        if failure is not None:
            assert model in (failure.get("message") or "") and "FAIL: case" in (failure.text or "")


@pytest.mark.parametrize(
    ("mode", "says"),
    [
        ("crash", "the executor failed (exit code 3): executor: device lost"),
        ("nothing", "unusable output: no out-0.page written"),
        ("short", "unusable output: out-0.page: a page is 4096 bytes, this has 100"),
        ("garbage", "unusable output: out-0.page: a page is 4096 bytes, this has 11"),
    ],
)
def test_misbehaving_executors_are_errors(
    mode: str, says: str, quick_pack: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    report = tmp_path / "junit.xml"
    code, out, err = run_check(
        [str(quick_pack), "--exec", executor(mode), "--cases", "hard-nan-*", "-j", "2", "--junit", str(report)], capsys
    )
    assert code == 1 and err == "", err
    assert out.splitlines()[-1] == "0 passed, 0 failed, 2 errors of 2 cases"
    assert sum(says in line for line in out.splitlines()) == 2, out
    top = junit(report)
    assert (top.get("tests"), top.get("failures"), top.get("errors")) == ("2", "0", "2")
    errors = top.findall(".//error")
    assert len(errors) == 2 and all(says in (e.get("message") or "") for e in errors)
    if mode == "crash":
        assert all("device lost" in (e.text or "") for e in errors)


def test_a_trace_of_the_wrong_length_is_an_error(
    quick_pack: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    outs = tmp_path / "outs"
    (outs / "probe-tininess").mkdir(parents=True)
    shutil.copy(quick_pack / "probe-tininess" / "out-0.page", outs / "probe-tininess")
    (outs / "probe-tininess" / "trace.bin").write_bytes(bytes(20 * 63))
    code, out, err = run_check([str(quick_pack), "--outputs", str(outs), "--cases", "probe-*"], capsys)
    assert code == 1 and err == ""
    assert "trace.bin: 63 steps, the run has 64" in out and "no out-0.page written" in out  # probe-subnormal-samples


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as f:  # a zombie of ours is dead too
        return f.read().split(")")[-1].split()[0] != "Z"


@pytest.mark.slow
def test_a_hanging_executor_is_killed_with_its_children(
    quick_pack: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    pids = tmp_path / "pids"
    monkeypatch.setenv("FAULT_EXECUTOR_PIDS", str(pids))
    t0 = time.monotonic()
    code, out, err = run_check(
        [str(quick_pack), "--exec", executor("hang"), "--cases", "cluster-1", "--case-timeout", "3"], capsys
    )
    assert time.monotonic() - t0 < 60
    assert code == 1 and err == "" and "ran past --case-timeout 3 s and was killed" in out
    ran = [int(p) for p in pids.read_text().split()]
    assert len(ran) == 2 and not any(_alive(p) for p in ran)


# SIGINT in the default run; SIGTERM and SIGHUP slow (their codes and lines: tests/test_faults.py's sweep
# and bench in the default run).
@pytest.mark.parametrize(
    ("sig", "code", "line"),
    [
        (signal.SIGINT, 130, "interrupted"),
        pytest.param(signal.SIGTERM, 143, "terminated", marks=SLOW),
        pytest.param(signal.SIGHUP, 129, "hung up", marks=SLOW),
    ],
)
def test_ctrl_c_and_sigterm_kill_the_executors(
    sig: int, code: int, line: str, quick_pack: Path, tmp_path: Path
) -> None:
    """Executors run in their own process groups, out of the terminal's reach: meshnb kills them."""
    pids = tmp_path / "pids"
    cmd = [sys.executable, "-m", "meshnb", "check", str(quick_pack), "--exec", executor("hang"), "-j", "2"]
    env = {**os.environ, "FAULT_EXECUTOR_PIDS": str(pids)}
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=ROOT, text=True)
    try:
        deadline = time.monotonic() + 60
        while not (pids.exists() and len(pids.read_text().split()) == 4) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(pids.read_text().split()) == 4  # two executors, each with a child
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == code and err == f"meshnb: {line}\n" and out == ""
    time.sleep(0.2)
    assert not any(_alive(int(p)) for p in pids.read_text().split())


def test_outputs_made_elsewhere(quick_pack: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    outs = tmp_path / "outs"
    for name in ("cluster-2", "cluster-3"):
        (outs / name).mkdir(parents=True)
        r = subprocess.run(
            [*shlex.split(executor("fold-reverse")), str(quick_pack / name), str(outs / name)], check=False
        )
        assert r.returncode == 0
    code, out, err = run_check([str(quick_pack), "--outputs", str(outs), "--cases", "cluster-[23]", "--json"], capsys)
    doc = json.loads(out)
    assert code == 1 and err == ""
    assert [(c["name"], c["verdict"]) for c in doc["cases"]] == [("cluster-2", "PASS"), ("cluster-3", "FAIL")]
    assert doc["cases"][1]["models"] == ["fold-reverse"] and doc["cases"][1]["exit_code"] is None


def test_bad_input_is_one_line_and_exit_2(quick_pack: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bare = tmp_path / "bare"
    shutil.copytree(quick_pack / "cluster-1", bare / "cluster-1")
    ok = executor("mode-z")
    for args, says in [
        ([str(quick_pack), "--exec", ok, "--outputs", str(tmp_path)], "not both"),
        ([str(quick_pack), "--exec", ok, "--cases", "nothing-*"], "no case of"),
        ([str(quick_pack), "--exec", ok, "-j", "0"], "-j"),
        ([str(quick_pack), "--exec", ok, "--case-timeout", "0"], "--case-timeout"),
        ([str(quick_pack), "--exec", ok, "--case-timeout", "nan"], "--case-timeout"),
        ([str(quick_pack), "--exec", ""], "empty command"),
        ([str(quick_pack), "--exec", "python 'unbalanced"], "No closing quotation"),
        ([str(quick_pack), "--exec", str(tmp_path / "no-such-executor")], "not a command that can be run"),
        ([str(quick_pack), "--exec", ok, "--page", "x.page"], "check one case"),
        ([str(quick_pack), "--outputs", str(tmp_path / "missing")], "not a directory"),
        ([str(bare), "--exec", ok], "no manifest.json"),
        ([str(quick_pack / "cluster-1"), "--page", "x", "--junit", "r.xml"], "go with --exec"),
        ([str(quick_pack), "--exec", ok, "--junit", str(tmp_path / "no" / "r.xml")], "--junit"),
    ]:
        code, out, err = run_check(args, capsys)
        assert code == 2 and len(err.splitlines()) == 1 and says in err, (args, err)
        assert err.startswith("meshnb: error: ") or err.startswith("usage") is False
    # told to, a pack without its manifest is checked (and says so)
    code, out, err = run_check([str(bare), "--exec", ok, "--no-manifest"], capsys)
    assert code == 0 and "1 passed" in out


def test_case_names_are_printed_escaped(quick_pack: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A case named to forge a line on the terminal (a newline, ANSI escapes) is printed escaped."""
    evil = "x\x1b[2K\rPASS\nall"
    root = tmp_path / "pk"
    shutil.copytree(quick_pack / "cluster-1", root / evil)
    manifest = json.loads((quick_pack / "manifest.json").read_text())
    files = {f"{evil}/{k.split('/', 1)[1]}": v for k, v in manifest["files"].items() if k.startswith("cluster-1/")}
    (root / "manifest.json").write_text(json.dumps({**manifest, "cases": [evil], "files": files}))
    code, out, err = run_check([str(root), "--exec", executor("nothing")], capsys)
    assert code == 1 and "\x1b" not in out and "\r" not in out
    assert "x\\x1b[2K\\rPASS\\nall" in out and len(out.splitlines()) == 3


def test_special_files_as_outputs_are_errors(
    quick_pack: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A FIFO (without a writer) or /dev/zero as an output: an error at once, never a hang."""
    outs = tmp_path / "outs"
    for name in ("probe-tininess", "probe-subnormal-samples"):
        (outs / name).mkdir(parents=True)
    os.mkfifo(outs / "probe-tininess" / "out-0.page")
    (outs / "probe-subnormal-samples" / "out-0.page").symlink_to("/dev/zero")
    code, out, err = run_check([str(quick_pack), "--outputs", str(outs), "--cases", "probe-*"], capsys)
    assert code == 1 and err == ""
    assert "out-0.page: a FIFO, not a regular file" in out and "a character device, not a regular file" in out


def test_the_junit_report_is_written_when_stdout_is_full(quick_pack: Path, tmp_path: Path) -> None:
    report = tmp_path / "j.xml"
    args = [str(quick_pack), "--exec", executor("mode-z"), "--cases", "cluster-1", "--junit", str(report)]
    with open("/dev/full", "wb") as full:
        r = subprocess.run([sys.executable, "-m", "meshnb", "check", *args], stdout=full, stderr=subprocess.PIPE,
                           text=True, cwd=ROOT, timeout=300)  # fmt: skip
    assert r.returncode == 1 and r.stderr == "meshnb: error: stdout: No space left on device\n", r.stderr
    assert junit(report).get("tests") == "1" and junit(report).get("failures") == "0"


def test_a_junit_inside_the_pack_is_refused_without_touching_it(quick_pack: Path, tmp_path: Path) -> None:
    """The refusal used to come after a probe file was created and removed in the pack."""
    before = sorted(os.listdir(quick_pack / "cluster-1")), os.stat(quick_pack / "cluster-1").st_mtime_ns
    code = main(
        ["check", str(quick_pack), "--outputs", str(tmp_path), "--junit", str(quick_pack / "cluster-1" / "r.xml")]
    )
    assert code == 2
    assert (sorted(os.listdir(quick_pack / "cluster-1")), os.stat(quick_pack / "cluster-1").st_mtime_ns) == before


def test_a_socket_left_as_an_output_is_named_a_socket(quick_pack: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_check([str(quick_pack), "--exec", executor("socket"), "--cases", "cluster-1"], capsys)
    assert code == 1 and err == "" and "unusable output: out-0.page: a socket, not a regular file" in out, out


def test_a_diagnosis_not_made_is_said(
    quick_pack: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past the diagnosis's bound (lowered here) the verdict stands and the report says why."""
    from meshnb.conformance import check

    monkeypatch.setattr(check, "REPLAY_STEPS", 10)
    outs = tmp_path / "outs" / "cluster-3"
    outs.mkdir(parents=True)
    r = subprocess.run([*shlex.split(executor("fold-reverse")), str(quick_pack / "cluster-3"), str(outs)], check=False)
    assert r.returncode == 0
    (outs / "trace.bin").unlink()  # the page alone: the whole run would be replayed
    code, out, err = run_check([str(quick_pack), "--outputs", str(outs.parent), "--cases", "cluster-3"], capsys)
    assert code == 1 and "diagnosis not made (--json: why)" in out
    code, out, err = run_check(
        [str(quick_pack), "--outputs", str(outs.parent), "--cases", "cluster-3", "--json"], capsys
    )
    assert (
        "diagnosis not made: without a trace or task pages it would replay 96 steps"
        in json.loads(out)["cases"][0]["message"]
    )


# --- issue 24: a checker an executor cannot fool, signals, outputs ---------------------------------


def test_an_executor_gets_its_case_inputs_only(
    quick_pack: Path, setups: dict, capsys: pytest.CaptureFixture[str]
) -> None:
    """Never the expected pages, trace or digests: a copy holding case.json and in-K.page."""
    code, out, err = run_check(
        [str(quick_pack), "--exec", executor("listing"), "--cases", "cluster-*", "--json"], capsys
    )
    doc = json.loads(out)
    assert code == 1 and doc["cases"]
    for c in doc["cases"]:
        systems = setups[c["name"]].case.systems
        assert c["stderr_tail"] == " ".join(sorted(["case.json", *(f"in-{k}.page" for k in range(systems))]))


@pytest.mark.parametrize(("how", "says"), [("symlink", "a symbolic link"), ("hardlink", "a hard link (2 names)")])
def test_linked_outputs_are_errors_naming_the_file(
    how: str, says: str, quick_pack: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """An executor that links its outputs (to the pack's expected page, say) never passes."""
    monkeypatch.setenv("FAULT_EXECUTOR_OUTPUTS", how)
    code, out, err = run_check([str(quick_pack), "--exec", executor("mode-z"), "--cases", "cluster-1"], capsys)
    assert code == 1 and err == ""
    assert "ERROR" in out and f"unusable output: out-0.page: {says}" in out, out


def test_an_executor_writing_in_its_case_leaves_the_pack_whole(
    quick_pack: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    copy = tmp_path / "pack"
    shutil.copytree(quick_pack, copy)
    monkeypatch.setenv("FAULT_EXECUTOR_OUTPUTS", "scribble")
    code, out, err = run_check([str(copy), "--exec", executor("mode-z"), "--cases", "cluster-1"], capsys)
    assert code == 0 and "1 passed" in out, out + err
    assert pack.verify_pack(copy) > 0  # every file as the manifest says


def test_setsid_children_of_executors_are_killed(
    quick_pack: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    pids = tmp_path / "pids"
    monkeypatch.setenv("FAULT_EXECUTOR_PIDS", str(pids))
    code, out, err = run_check(
        [str(quick_pack), "--exec", executor("setsid"), "--cases", "cluster-[12]", "-j", "2"], capsys
    )
    assert code == 1 and out.count("ERROR") == 2
    ran = [int(p) for p in pids.read_text().split()]
    assert len(ran) == 4 and not any(_alive(p) for p in ran)


@pytest.mark.slow
def test_one_executor_cannot_write_the_other_cases_outputs(
    quick_pack: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every case's OUT_DIR used to exist before the first executor ran: the first one wrote them
    all and every case passed though the others wrote nothing. A case's directory is made when its
    executor starts, so the first one finds only its own (with -j 1: executors that run at once
    can reach each other's, docs/guide/executor-ci.md)."""
    seen = tmp_path / "seen"
    monkeypatch.setenv("FAULT_EXECUTOR_SEEN", str(seen))
    code, out, err = run_check([str(quick_pack), "--exec", executor("siblings"), "--cases", "cluster-[123]"], capsys)
    assert code == 1 and err == "", out + err
    assert "1 passed, 0 failed, 2 errors of 3 cases" in out and out.count("no out-0.page written") == 2, out
    found = seen.read_text().splitlines()
    assert len(found) == 1 and found[0].endswith(" True"), found  # its own case only


@pytest.mark.slow
def test_a_lingering_grandchild_cannot_change_the_next_cases_verdicts(
    quick_pack: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A setsid grandchild of one case's executor lived on through the later cases and zeroed
    their pages: cases whose own executor was right failed. Each case is judged once nothing of its
    executor is alive, before the next case starts; the one left running is reported on its case."""
    pids, seen = tmp_path / "pids", tmp_path / "seen"
    monkeypatch.setenv("FAULT_EXECUTOR_PIDS", str(pids))
    monkeypatch.setenv("FAULT_EXECUTOR_SEEN", str(seen))
    code, out, err = run_check(
        [str(quick_pack), "--exec", executor("lingering"), "--cases", "cluster-[123]", "--json"], capsys
    )
    doc = json.loads(out)
    assert code == 0 and err == "" and doc["passed"] == 3, out + err
    assert [c["left_running"] for c in doc["cases"]] == [1, 1, 1]
    assert not seen.exists()  # no grandchild lived to see another case's page
    ran = [int(p) for p in pids.read_text().split()]
    assert len(ran) == 6 and not any(_alive(p) for p in ran)


def test_sighup_and_repeated_signals_leave_no_process_and_no_temporary(quick_pack: Path, tmp_path: Path) -> None:
    """SIGHUP to `check --exec -j 4` orphaned the executors and their children and left
    /tmp/meshnb-check-*; so did five Ctrl-C in a row."""
    pids, tmp = tmp_path / "pids", tmp_path / "tmp"
    tmp.mkdir()
    cmd = [sys.executable, "-m", "meshnb", "check", str(quick_pack), "--exec", executor("setsid"), "-j", "4"]
    env = {**os.environ, "FAULT_EXECUTOR_PIDS": str(pids), "FAULT_EXECUTOR_HANG": "1", "TMPDIR": str(tmp)}
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=ROOT, text=True)
    try:
        deadline = time.monotonic() + 60
        while not (pids.exists() and len(pids.read_text().split()) == 8) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(pids.read_text().split()) == 8  # four executors, each with a setsid child
        # the main thread alone may take them (a BLAS or worker thread that took the SIGHUP ran its
        # handler after the main thread's Ctrl-C on a busy machine: 130)
        assert threads_taking_stop_signals(proc.pid) == []
        proc.send_signal(signal.SIGHUP)
        for _ in range(5):
            proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 129 and err == "meshnb: hung up\n" and out == ""
    assert not any(_alive(int(p)) for p in pids.read_text().split())
    assert list(tmp.iterdir()) == []


def test_junit_may_not_overwrite_the_pack_and_may_not_be_empty(
    quick_pack: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = (quick_pack / "manifest.json").read_bytes()
    for junit_path, says in [
        (str(quick_pack / "manifest.json"), "a file of the pack"),
        (str(quick_pack / "cluster-1" / "report.xml"), "a file of the pack"),
        ("", "an empty path"),
    ]:
        code, out, err = run_check([str(quick_pack), "--exec", executor("crash"), "--junit", junit_path], capsys)
        assert code == 2 and out == "" and len(err.splitlines()) == 1 and says in err, err
    assert (quick_pack / "manifest.json").read_bytes() == before


def test_a_junit_write_that_fails_still_prints_the_table(quick_pack: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_check(
        [str(quick_pack), "--exec", executor("crash"), "--cases", "cluster-1", "--junit", "/dev/full"], capsys
    )
    assert code == 1 and "0 passed, 0 failed, 1 errors of 1 cases" in out
    assert err == "meshnb: error: --junit /dev/full: No space left on device\n"


def test_junit_through_dev_stdout_reaches_the_redirected_file(quick_pack: Path, tmp_path: Path) -> None:
    """`--junit /dev/stdout > f` replaced the machine's /dev/stdout link with a regular file; and stdout
    carries one thing: the XML alone there, the table on stderr."""
    out = tmp_path / "all.txt"
    with open(out, "wb") as f:
        r = subprocess.run(
            [sys.executable, "-m", "meshnb", "check", str(quick_pack), "--exec", executor("crash"),
             "--cases", "cluster-1", "--junit", "/dev/stdout"],
            stdout=f, stderr=subprocess.PIPE, text=True, cwd=ROOT, check=False,
        )  # fmt: skip
    assert r.returncode == 1 and "1 errors of 1 cases" in r.stderr, r.stderr
    text = out.read_text()
    assert text.startswith("<?xml") and os.path.islink("/dev/stdout"), text[:200]
    ET.fromstring(text)  # the whole file is the report


@pytest.mark.parametrize("args", [[], ["--json"]])
def test_closed_stdout_is_refused_before_any_executor_runs(args: list[str], quick_pack: Path, tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    r = subprocess.run(
        f"{shlex.quote(sys.executable)} -m meshnb check {shlex.quote(str(quick_pack))} --exec "
        f"{shlex.quote(executor('hang'))} {' '.join(args)} >&-",
        shell=True, capture_output=True, text=True, cwd=ROOT, check=False,
        env={**os.environ, "FAULT_EXECUTOR_PIDS": str(pids)}, timeout=120,
    )  # fmt: skip
    assert (
        r.returncode == 2 and r.stderr == "meshnb: error: stdout is closed (>&-): the result would have nowhere to go\n"
    )
    assert not pids.exists()


def test_closed_stderr_leaves_the_json_clean(quick_pack: Path) -> None:
    """With stderr closed, progress and error lines went to stdout and broke `check --json`."""
    r = subprocess.run(
        f"{shlex.quote(sys.executable)} -m meshnb check {shlex.quote(str(quick_pack))} --exec "
        f"{shlex.quote(executor('crash'))} --cases cluster-1 --json --progress 2>&-",
        shell=True, capture_output=True, text=True, cwd=ROOT, check=False, timeout=120,
    )  # fmt: skip
    assert r.returncode == 1 and json.loads(r.stdout)["errors"] == 1


def test_an_undeletable_file_in_out_dir_still_gives_the_table_and_the_junit(
    quick_pack: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """An executor leaving an undeletable file: exit 1, no table and no JUnit though every case passed."""
    import tempfile

    stuck = tmp_path / "stuck"
    monkeypatch.setenv("FAULT_EXECUTOR_STUCK", str(stuck))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    report = tmp_path / "junit.xml"
    try:
        code, out, err = run_check(
            [str(quick_pack), "--exec", executor("mode-z"), "--cases", "cluster-1", "--junit", str(report)], capsys
        )
        path, chattr = stuck.read_text().split()
        if chattr != "0":
            pytest.skip("chattr +i is not allowed here: no undeletable file to leave")
        assert code == 0 and "1 passed" in out and junit(report).get("tests") == "1"
        assert err.startswith("meshnb: warning: could not remove ") and len(err.splitlines()) == 1
    finally:
        if stuck.exists():
            for line in stuck.read_text().splitlines():
                subprocess.run(["chattr", "-i", line.split()[0]], check=False)


def test_a_full_tmpdir_names_the_private_copy_and_tmpdir(
    quick_pack: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`check --exec` with a full TMPDIR said `[Errno 28] No space left on device`, naming nothing.
    Simulated: the copy of the case's inputs finds no room."""
    import errno

    def full(inputs: dict[str, bytes], dest: Path) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(suite, "private_case", full)
    code, out, err = run_check([str(quick_pack), "--exec", executor("mode-z"), "--cases", "cluster-1"], capsys)
    assert code == 1 and out == "" and err.count("\n") == 1, err
    assert err.startswith("meshnb: error: the executor's private copy of the case in TMPDIR /")
    assert err.endswith("/case/cluster-1: No space left on device\n"), err


def test_the_executor_gets_the_bytes_that_were_verified(
    quick_pack: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A pack changed during a check (here by the executor itself, at each start: every case's
    in-0.page and case.json grow a byte) changes nothing the executor gets: each case's inputs are
    the bytes verified against the manifest up front, so a correct executor passes every case."""
    pack = tmp_path / "pack"
    shutil.copytree(quick_pack, pack)
    spoil = (
        f"for f in {shlex.quote(str(pack))}/*/in-0.page {shlex.quote(str(pack))}/*/case.json;"
        ' do printf x >> "$f"; done; exec "$@"'
    )
    cmd = f"sh -c {shlex.quote(spoil)} sh {executor('mode-z')}"
    code, out, err = run_check([str(pack), "--exec", cmd, "--cases", "cluster-*", "-j", "1"], capsys)
    assert (pack / "cluster-1" / "in-0.page").stat().st_size > 4096  # the pack was changed
    assert code == 0, (out, err)
    assert re.fullmatch(r"(\d+) passed, 0 failed, 0 errors of \1 cases", out.splitlines()[-1]), out


def test_the_outputs_readers_and_judges(quick_pack: Path, tmp_path: Path) -> None:
    """What each reader of an executor's outputs refuses, and the verdicts and messages made of them."""
    from meshnb.conformance.check import load_case

    out = tmp_path / "out"
    out.mkdir()
    (out / "out-0.page").write_bytes(bytes(4096))
    os.link(out / "out-0.page", out / "out-1.page")  # a second name for the same file
    fd = os.open(out, os.O_RDONLY | os.O_DIRECTORY)
    try:
        assert suite.read_own(fd, "missing.page", 8192) is None
        with pytest.raises(pack.PackError, match=r"^out-1.page: a hard link \(2 names\); an executor's outputs must"):
            suite.read_own(fd, "out-1.page", 8192)
    finally:
        os.close(fd)
    two = load_case(quick_pack / "cluster-2")
    got = tmp_path / "two"
    got.mkdir()
    shutil.copyfile(quick_pack / "cluster-2" / "out-0.page", got / "out-0.page")
    with pytest.raises(pack.PackError, match=r"^no out-1.page written$"):
        suite.read_outputs(two, got, None)
    shutil.copyfile(quick_pack / "cluster-2" / "out-1.page", got / "out-1.page")
    pages, trace = suite.read_outputs(two, got, None)
    assert len(pages) == 2 and trace is None  # no trace.bin written: the pages alone are checked
    (got / "trace.bin").write_bytes(b"\x00" * 21)
    res = suite.check_outputs(two, got)
    assert (res.verdict, res.message) == (
        "ERROR",
        "unusable output: trace.bin: 21 bytes is not a whole number of 20-byte steps",
    )
    one = load_case(quick_pack / "cluster-1")
    assert suite.judge_outputs(one, list(one.expected), one.trace).verdict == "PASS"
    bad = one.trace.copy()
    bad[3, 4] ^= 1  # the e^2 sum of step 3
    assert (suite.judge_outputs(one, list(one.expected), bad).where) == "step 3 (e*e)"
    page = bytearray(one.expected[0])
    page[2052] ^= 1  # one bit of the page
    res = suite.judge_outputs(one, [bytes(page)], None)
    assert (res.verdict, res.where, res.models) == ("FAIL", "page: 1 words", [])
    assert res.message == (
        "system 0: 1 page words differ, first Y[241]: 3ead2308 -> 3ead2309; no fault model reproduces these bits"
    )
    doc = suite.check_outputs(one, tmp_path / "nothing").to_json()
    assert (doc["verdict"], doc["message"], doc["report"]) == ("ERROR", "unusable output: no out-0.page written", None)
    assert suite.select(quick_pack, "cluster-*") == ["cluster-2", "cluster-3", "cluster-8", "cluster-1"]
    with pytest.raises(pack.PackError, match=r"^--cases 'gpu-\*': no case of .* matches$"):
        suite.select(quick_pack, "gpu-*")


def test_the_checkers_own_directories(quick_pack: Path, tmp_path: Path) -> None:
    """An executor's private copy holds the case's inputs only; the checker's directory goes whatever is left."""
    from meshnb.conformance.check import load_case

    suite.private_case(load_case(quick_pack / "cluster-2").inputs, tmp_path / "cluster-2")
    assert sorted(os.listdir(tmp_path / "cluster-2")) == ["case.json", "in-0.page", "in-1.page"]
    work = tmp_path / "work"
    (work / "locked").mkdir(parents=True)
    (work / "locked" / "left.page").write_bytes(b"x")
    os.chmod(work / "locked", 0o500)  # an executor left a directory without write permission
    suite.remove_tree(work)
    assert not work.exists()


def test_outputs_that_are_the_packs_own_files_are_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from meshnb.cli.conformance import refuse_outputs_of_the_pack
    from meshnb.files import OutputError

    monkeypatch.chdir(tmp_path)
    os.makedirs("pack/default")
    os.makedirs("results/default")
    Path("pack/default/out-0.page").write_bytes(bytes(4096))
    refuse_outputs_of_the_pack("results", "pack")  # the executor's own directory: passes
    os.symlink(os.path.abspath("pack/default/out-0.page"), "results/default/out-0.page")
    said = []
    for outputs in ("pack", "results"):
        with pytest.raises(OutputError) as e:
            refuse_outputs_of_the_pack(outputs, "pack")
        said.append(str(e.value))
    assert said == [
        "--outputs pack: the pack pack itself (or inside it): the pack would be judged against its own files",
        "--outputs results: results/default/out-0.page is a file of the pack pack: an executor's outputs must be"
        " its own",
    ]
