"""``meshnb check``: every fault model, injected into a simulated executor, is caught and named.

The executor with a fault is :func:`meshnb.conformance.check.executor_run` (meshnb's bits up to the
step where the model first parts from them, then the model's own numpy run; the hard pages run
side by side in one :func:`faults.run`); ``test_fast_executor_is_the_plain_run`` checks that it
equals the plain :func:`faults.run` from the start.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from meshnb.cli import main
from meshnb.conformance import check, faults, pack
from meshnb.conformance.model import OFF_LOSS

from ..util import wait_for_phase
from . import fault_table
from .conftest import edit_json

ALL = [c.name for c in pack.cases(quick=True)]

# The quick pack's cases whose bits each fault changes: the computed record (fault_table.py), the guide's table.
EXPOSED: dict[str, set[str]] = fault_table.exposed()
GUIDE = Path(__file__).resolve().parents[2] / "docs" / "guide" / "checking-an-executor.md"


def test_every_model_is_in_the_table() -> None:
    assert list(EXPOSED) == list(faults.BY_NAME)
    assert fault_table.load()["cases"] == ALL, "stale: python -m tests.conformance.fault_table --record"


def test_the_guide_shows_the_records_fault_model_table() -> None:
    assert fault_table.table(fault_table.load()) in GUIDE.read_text(), "paste `python -m tests.conformance.fault_table`"


@pytest.mark.slow
@pytest.mark.parametrize("name", list(faults.BY_NAME))
def test_check_names_every_injected_fault(name: str, setups: dict[str, check.Setup]) -> None:
    """On every case where the fault changes the bits, check fails the executor and names the model;
    on the others it passes it.  The cases that expose each fault are the table above."""
    m = faults.model(name)
    exposed = set()
    page_only = 0
    runs = fault_table.executor_runs(setups, m)
    for case in sorted(runs, key=lambda n: setups[n].case.steps * setups[n].case.systems):  # shortest first
        run = runs[case]
        s = setups[case]
        k = s.case.systems - 1  # the last member: its own page and the common trace
        rep = check.check(s, run.pages[k], system=k, got_trace=run.trace)
        changed = run.pages != s.expected or not np.array_equal(run.trace, s.trace)
        assert (rep.verdict == "FAIL") == changed, (case, rep.text())
        if not changed:
            continue
        exposed.add(case)
        named = [d["name"] for d in rep.diagnosis["models"]]
        assert name in named, (case, rep.text())
        if page_only < 1 and run.pages[k] != s.expected[k]:  # the page alone (the shortest case), replayed whole
            page_only += 1
            rep = check.check(s, run.pages[k], system=k)
            assert name in [d["name"] for d in rep.diagnosis["models"]], (case, "page only", rep.text())
    assert exposed == EXPOSED[name]


def test_the_probes_tell_the_flush_rules_apart(setups: dict[str, check.Setup]) -> None:
    s = setups["probe-tininess"]
    named = {}
    for name in ("ftz-before-rounding", "x86-ftz", "gradual-underflow"):
        run = faults.run(s.in_pages, 64, grouped=False, m=faults.model(name))
        rep = check.check(s, run.pages[0], got_trace=run.trace)
        named[name] = {d["name"] for d in rep.diagnosis["models"]}
    assert named == {
        "ftz-before-rounding": {"ftz-before-rounding"},
        "x86-ftz": {"x86-ftz"},
        "gradual-underflow": {"gradual-underflow"},
    }


@pytest.mark.parametrize("case", ["lr-changes", "lr-subnormal", "cluster-3", "lr-tiny-updates", "state-lr-words"])
def test_fast_executor_is_the_plain_run(case: str, setups: dict[str, check.Setup]) -> None:
    s = setups[case]
    for m in faults.MODELS:
        fast = check.executor_run(s, m)
        plain = faults.run(
            s.in_pages, s.case.steps, grouped=s.case.grouped, set_lr=dict(s.case.set_lr), m=m, from_init=True
        )
        assert fast.pages == plain.pages and np.array_equal(fast.trace, plain.trace), m.name


def test_report_names_fields_and_samples(setups: dict[str, check.Setup]) -> None:
    s = setups["step-base-2^32"]
    run = check.executor_run(s, faults.model("samples-naive-sin"))
    rep = check.check(s, run.pages[0], got_trace=run.trace)
    fields = {d["field"]: d for d in rep.diff}
    assert {"Y[0]", "Y[255]"} <= set(fields) and fields["Y[0]"]["sample"] == 0
    assert {d["field"] for d in rep.samples} == {"Y[0]", "Y[255]"}
    assert all(d["ulps"] > 1000 for d in rep.samples)  # sin(pi) is 1.2e-16, not 0
    names = {d["name"] for d in rep.diagnosis["models"]}
    assert {"samples-naive-sin", "executor-samples"} <= names
    text = rep.text()
    assert text.startswith("FAIL: case step-base-2^32") and "Y[0]" in text and "reproduced by samples-naive-sin" in text


def test_report_maps_loss_entries_to_steps(setups: dict[str, check.Setup]) -> None:
    s = setups["step-base-2^32"]
    run = check.executor_run(s, faults.model("fma-horner"))
    rep = check.check(s, run.pages[0], got_trace=run.trace)
    loss = [d for d in rep.diff if d["field"].startswith("LOSS[")]
    base, steps = s.case.step_base, s.case.steps
    assert loss and rep.trace is not None
    for d in loss:
        i = int(d["field"][5:-1])
        assert d["step"] % 256 == i and base <= d["step"] < base + steps and d["step"] + 256 >= base + steps
    t = rep.trace["step"]
    assert rep.trace["absolute_step"] == base + t and np.array_equal(run.trace[:t], s.trace[:t])
    assert "loss of step" in rep.text()


def test_no_model_reproduces_a_stray_bit(
    setups: dict[str, check.Setup], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    s = setups["default"]
    trace = s.trace.copy()
    trace[100, 2] ^= 1
    page = bytearray(s.expected[0])
    page[0] ^= 1
    rep = check.check(s, bytes(page), got_trace=trace)
    assert rep.verdict == "FAIL" and rep.trace["step"] == 100 and rep.trace["sums"] == ["e*x2"]
    assert rep.diagnosis["models"] == [] and "lane sample x" in rep.diagnosis["lanes"]
    assert "no fault model reproduces" in rep.text()
    (tmp_path / "t.bin").write_bytes(trace.astype("<u4").tobytes())
    (tmp_path / "o.page").write_bytes(bytes(page))
    assert (
        main(
            [
                "check",
                str(_case_dir(s)),
                "--page",
                str(tmp_path / "o.page"),
                "--trace",
                str(tmp_path / "t.bin"),
                "--json",
            ]
        )
        == 1
    )
    out = json.loads(capsys.readouterr().out)
    assert out["verdict"] == "FAIL" and out["diff"][0]["field"] == "PARAMS[0]" and out["trace"]["step"] == 100


def _case_dir(s: check.Setup) -> Path:
    return _ROOT[0] / s.case.name  # the quick pack's root, set by the fixture below


_ROOT: list[Path] = []


@pytest.fixture(autouse=True)
def _root(quick_pack: Path) -> None:
    _ROOT[:] = [quick_pack]


def test_pages_at_task_boundaries(
    setups: dict[str, check.Setup], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Without a trace, boundary pages give the first differing task; its replay names the fault."""
    s = setups["lr-changes"]
    m = faults.model("fma-apply")
    full = check.executor_run(s, m)
    d = tmp_path / "pages"
    d.mkdir()
    for n in range(64, s.case.steps, 64):
        r = faults.run(s.in_pages, n, grouped=False, set_lr={k: w for k, w in s.case.set_lr if k < n}, m=m)
        (d / f"{n:08d}.page").write_bytes(r.pages[0])
    (d / f"{s.case.steps}.page").write_bytes(full.pages[0])
    (tmp_path / "o.page").write_bytes(full.pages[0])
    code = main(["check", str(_case_dir(s)), "--page", str(tmp_path / "o.page"), "--pages", str(d)])
    out = capsys.readouterr().out
    assert code == 1 and "pages: the first differing task" in out and "reproduced by fma-apply" in out
    first = check.first_divergence(s, m)
    rep = check.check(s, full.pages[0], pages=check.read_pages_dir(d, s.case.steps))
    assert rep.task["from"] <= first < rep.task["steps_done"]


def test_view_in_instead_of_a_case(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    page = pack.start_pages()["hard-nan-lr".removeprefix("hard-")]
    (tmp_path / "in.page").write_bytes(page)
    run = faults.run([page], 50, grouped=False, set_lr={10: 0x3F400000}, m=faults.model("nan-x86"))
    (tmp_path / "o.page").write_bytes(run.pages[0])
    (tmp_path / "t.bin").write_bytes(run.trace.astype("<u4").tobytes())
    argv = [
        "check",
        "--view-in",
        str(tmp_path / "in.page"),
        "--steps",
        "50",
        "--set-lr",
        "10:0x3f400000",
        "--page",
        str(tmp_path / "o.page"),
    ]
    assert main([*argv, "--trace", str(tmp_path / "t.bin")]) == 1
    out = capsys.readouterr().out
    assert out.startswith("FAIL: case view-in") and "reproduced by nan-x86" in out
    good = faults.run([page], 50, grouped=False, set_lr={10: 0x3F400000})
    (tmp_path / "g.page").write_bytes(good.pages[0])
    assert main([*argv[:-1], str(tmp_path / "g.page")]) == 0
    assert capsys.readouterr().out.startswith("PASS")


@pytest.mark.parametrize(
    ("set_lr", "step_base", "deprecated"),
    [
        ("10:0x3f400000", "4294967296", []),
        ("10:0.75", "0x100000000", []),
        ("10:0x3f400000", "1:0", ["HI:LO is deprecated"]),
    ],
)
def test_view_in_run_options_are_trains_spellings(
    set_lr: str, step_base: str, deprecated: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``check --view-in`` reads ``--set-lr`` and ``--step-base`` as ``train`` does: an LR a number or
    a 0x word, a step N or 0x...; the old HI:LO still works, with its one-line warning."""
    import meshnb

    page = pack.start_pages()["tiny-params-underflow"]
    (tmp_path / "in.page").write_bytes(page)
    want = meshnb.train(50, view_in=page, set_lr={10: np.uint32(0x3F400000)}, step_base=1 << 32).page  # train's own run
    (tmp_path / "o.page").write_bytes(want)
    argv = ["check", "--view-in", str(tmp_path / "in.page"), "--steps", "50", "--set-lr", set_lr]
    assert main([*argv, "--step-base", step_base, "--page", str(tmp_path / "o.page")]) == 0
    captured = capsys.readouterr()
    assert captured.out.startswith("PASS")
    warned = [line for line in captured.err.splitlines() if line.startswith("meshnb: warning: ")]
    assert len(warned) == len(deprecated) and all(d in w for d, w in zip(deprecated, warned, strict=True)), warned
    # and the step base is the run's: another one is a different run, which the page fails
    assert main([*argv, "--step-base", "0", "--page", str(tmp_path / "o.page")]) == 1


def test_bad_input_exits_2(quick_pack: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    case = str(quick_pack / "default")
    good = tmp_path / "good.page"
    good.write_bytes((quick_pack / "default" / "out-0.page").read_bytes())
    assert main(["check", case, "--page", str(good)]) == 0
    (tmp_path / "short.page").write_bytes(b"\0" * 4095)
    (tmp_path / "odd.bin").write_bytes(b"\0" * 21)
    (tmp_path / "few.bin").write_bytes(b"\0" * 40)
    bad_case = tmp_path / "case"
    bad_case.mkdir()
    (bad_case / "case.json").write_text("{not json")
    calls = [
        ["check", case, "--page", str(tmp_path / "short.page")],
        ["check", case, "--page", str(tmp_path / "missing.page")],
        ["check", case, "--page", str(tmp_path)],
        ["check", case, "--page", "/dev/null"],
        ["check", case, "--page", str(good), "--trace", str(tmp_path / "odd.bin")],
        ["check", case, "--page", str(good), "--trace", str(tmp_path / "few.bin")],
        ["check", case, "--page", str(good), "--system", "1"],
        ["check", case, "--page", str(good), "--steps", "5"],
        ["check", str(tmp_path / "nowhere"), "--page", str(good)],
        ["check", str(bad_case), "--page", str(good)],
        ["check", "--page", str(good)],
        ["check", "--view-in", str(tmp_path / "short.page"), "--page", str(good)],
        ["check", "--view-in", str(good), "--steps", "10", "--set-lr", "3:xyz", "--page", str(good)],
        ["check", case, "--page", str(good), "--pages", str(tmp_path / "nowhere")],
        ["pack", str(good)],
        ["pack", str(tmp_path), "--verify"],
    ]
    for argv in calls:
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert err.startswith("meshnb: error: ") and err.count("\n") == 1 and "Traceback" not in err, (argv, err)


def test_python_m_from_another_directory(quick_pack: Path, tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    good = quick_pack / "hard-nan-lr" / "out-0.page"
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "meshnb",
            "check",
            str(quick_pack / "hard-nan-lr"),
            "--page",
            str(good),
            "--trace",
            str(quick_pack / "hard-nan-lr" / "trace.bin"),
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert r.returncode == 0 and r.stdout.startswith("PASS: case hard-nan-lr"), r.stderr
    r = subprocess.run(
        [sys.executable, "-m", "meshnb", "ops", "gen", "mul", "--count", "3"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert r.returncode == 0 and r.stdout.splitlines()[0] == "3f7fffff 00800000 00800000"


def test_a_set_lr_after_the_last_step_is_diagnosed(tmp_path: Path) -> None:
    """A fault that shows only in the LR word SET_LR writes after the last step (trace equal)."""
    page = pack.start_pages()["tiny-params-underflow"]
    s = check.setup_from_run(page, 20, set_lr={20: np.uint32(0x00400000)})
    run = faults.run([page], 20, grouped=False, set_lr={20: 0x00400000}, m=faults.model("raw-lr-inv"))
    for trace in (run.trace, None):
        rep = check.check(s, run.pages[0], got_trace=trace)
        assert rep.trace is None and [d["field"] for d in rep.diff] == ["LR"]
        assert "raw-lr-inv" in [m["name"] for m in rep.diagnosis["models"]]


# =============================================================================================
# Hostile input (issue 16): one line and exit 2, never a traceback; bounded; stoppable
# =============================================================================================


def _one_line_exit_2(argv: list[str], capsys: pytest.CaptureFixture[str], says: str = "") -> str:
    assert main(argv) == 2, argv
    err = capsys.readouterr().err
    assert err.startswith("meshnb: error: ") and err.count("\n") == 1 and "Traceback" not in err, (argv, err)
    assert says in err, (argv, err)
    return err


@pytest.mark.parametrize(
    "flags",
    [
        ["--steps-per-task=-1"],
        [f"--steps-per-task={2**40}"],
        ["--steps-per-task=0"],
        ["--step-base=-1"],
        [f"--step-base={2**70}"],
        [f"--step-base={2**64 - 2}"],  # 10 steps from there run past the last step
        ["--steps=-3"],
        ["--set-lr=-1:0x3f000000"],
        ["--set-lr=11:0x3f000000"],
        ["--systems=0"],
        ["--set-lr=5"],
        ["--step-base=0x"],
        ["--steps=100000000"],
    ],
)
def test_view_in_run_options_out_of_range(
    flags: list[str], quick_pack: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    page = str(quick_pack / "default" / "in-0.page")
    steps = [] if any(f.startswith("--steps=") for f in flags) else ["--steps", "10"]
    _one_line_exit_2(["check", "--view-in", page, *steps, *flags, "--page", page], capsys)


@pytest.mark.parametrize(
    ("values", "says"),
    [
        ({"steps": "RAW:Infinity"}, "not JSON"),
        ({"steps": "RAW:1e400"}, "steps must be an integer from 0 to 4194304, got float inf"),
        ({"steps": -1}, "steps must be an integer from 0 to 4194304, got -1"),
        ({"steps": True}, "got bool True"),
        ({"steps_per_task": 0}, "steps_per_task must be an integer from 1 to 4294967295, got 0"),
        ({"step_base": "-1"}, "step_base must be an integer, got str '-1'"),
        ({"step_base": -1}, "step_base must be 0..2^64-2, got -1"),
        ({"step_base": str(2**64 - 2)}, "reach 2^64-1, whose round would wrap to 0"),
        ({"set_lr": [{"before_step": 0, "word": "-1"}]}, "set_lr word '-1'"),
        (
            {"set_lr": [{"before_step": -5, "word": "3f000000"}]},
            "before_step must be an integer from 0 to 18446744073709551615, got -5",
        ),
        ({"set_lr": [{"before_step": 2**70, "word": "3f000000"}]}, "before_step"),
        (
            {"set_lr": [{"before_step": 500, "word": "3f000000"}]},
            "set_lr's step must be an integer from 0 to 256, got 500",
        ),
        ({"group": False}, "group must be true"),
        ({"group": "yes"}, "group 'yes'"),
        ({"systems": 65}, "systems must be an integer from 1 to 64, got 65"),
        ({"name": 5}, "strings"),
    ],
)
def test_hostile_case_values(
    values: dict[str, object],
    says: str,
    edited_case: Callable[[str, Callable[[Path], None]], Path],
    capsys: pytest.CaptureFixture[str],
) -> None:
    name = "cluster-2" if "group" in values else "default"
    case = edited_case(name, lambda d: edit_json(d, **values))
    page = str(case / "out-0.page")
    _one_line_exit_2(["check", str(case), "--page", page, "--system", "0"], capsys, says)


def test_a_start_page_past_the_last_step(
    edited_case: Callable[[str, Callable[[Path], None]], Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """An in page whose step is 2^64 - 2 (or all 0xFF) is not the case's step base: refused; and the
    simulated executor refuses a run past the last step rather than fail in struct."""
    at_end = bytearray(pack.BY_NAME["default"].in_page())
    at_end[28:32] = b"\xfe\xff\xff\xff"  # NEXT_STEP
    at_end[44:48] = b"\xff\xff\xff\xff"  # STEP_HI: step 2^64 - 2
    for page in (b"\xff" * 4096, bytes(at_end)):

        def put(d: Path, page: bytes = page) -> None:
            (d / "in-0.page").write_bytes(page)

        case = edited_case("default", put)
        _one_line_exit_2(
            ["check", str(case), "--page", str(case / "out-0.page")], capsys, "is not the case's step_base"
        )
        with pytest.raises(ValueError, match="2\\^64 - 1 at the latest"):
            faults.run([page], 5, grouped=False)


def test_symlinks_and_manifests_are_not_trusted(
    quick_pack: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A case behind a symbolic link, a case file that is one, a manifest that is a loop, a pack
    without its manifest, a manifest nested 100,000 deep or of version true: refused, one line."""
    root = tmp_path / "p"
    shutil.copytree(quick_pack, root)
    bad = tmp_path / "elsewhere" / "default"
    shutil.copytree(quick_pack / "default", bad)
    out = bytearray((bad / "out-0.page").read_bytes())
    out[0] ^= 1
    (bad / "out-0.page").write_bytes(bytes(out))
    (root / "evil").symlink_to(bad)
    _one_line_exit_2(["check", str(root / "evil"), "--page", str(bad / "out-0.page")], capsys, "symbolic link")
    (root / "default" / "out-0.page").unlink()
    (root / "default" / "out-0.page").symlink_to(bad / "out-0.page")
    _one_line_exit_2(["check", str(root / "default"), "--page", str(bad / "out-0.page")], capsys, "symbolic link")
    _one_line_exit_2(["pack", str(root), "--verify"], capsys, "symbolic link")
    shutil.copy(quick_pack / "default" / "out-0.page", root / "default" / "out-0.page.x")
    (root / "default" / "out-0.page").unlink()
    (root / "default" / "out-0.page.x").rename(root / "default" / "out-0.page")
    good = str(root / "default" / "out-0.page")
    assert main(["check", str(root / "default"), "--page", good]) == 0
    capsys.readouterr()
    manifest = (root / "manifest.json").read_text()
    for content, says in [
        ("[" * 100_000 + "]" * 100_000, "not JSON"),
        (manifest.replace('"pack_version": 2', '"pack_version": true'), "not a version 2"),
        (manifest.replace('"pack_version": 2', '"pack_version": 1.0'), "not a version 2"),
        (manifest.replace('"pack_version": 2', '"pack_version": 1'), "not a version 2"),  # before inject_timeouts
    ]:
        assert content != manifest
        (root / "manifest.json").write_text(content)
        _one_line_exit_2(["check", str(root / "default"), "--page", good], capsys, says)
        _one_line_exit_2(["pack", str(root), "--verify"], capsys, says)
    (root / "manifest.json").unlink()
    (root / "manifest.json").symlink_to(root / "manifest.json")  # a loop
    _one_line_exit_2(["check", str(root / "default"), "--page", good], capsys, "symbolic link")
    (root / "manifest.json").unlink()
    _one_line_exit_2(["check", str(root / "default"), "--page", good], capsys, "FAIL to verify")
    assert main(["check", str(root / "default"), "--page", good, "--no-manifest"]) == 0
    assert "its files were not verified" in capsys.readouterr().out


def test_a_case_name_is_printed_escaped(
    edited_case: Callable[[str, Callable[[Path], None]], Path], capsys: pytest.CaptureFixture[str]
) -> None:
    case = edited_case("default", lambda d: edit_json(d, name="x\x1b[1A\rPASS: case default\nsystem"))
    page = bytearray((case / "out-0.page").read_bytes())
    page[0] ^= 1
    (case.parent / "bad.page").write_bytes(bytes(page))
    assert main(["check", str(case), "--page", str(case.parent / "bad.page"), "--trace", str(case / "trace.bin")]) == 1
    out = capsys.readouterr().out
    assert out.startswith("FAIL: case x\\x1b[1A\\rPASS: case default\\nsystem, system 0") and "\x1b" not in out


def test_page_only_diagnosis_is_bounded(quick_pack: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """100,000 steps without a trace: the verdict at once, the diagnosis not made (and why)."""
    page = str(quick_pack / "default" / "in-0.page")
    wrong = tmp_path / "w.page"
    wrong.write_bytes(bytes(4096))
    assert main(["check", "--view-in", page, "--steps", "100000", "--page", str(wrong)]) == 1
    out = capsys.readouterr().out
    assert out.startswith("FAIL: case view-in") and "diagnosis not made: without a trace or task pages" in out


@pytest.mark.parametrize(
    ("sig", "code", "line"), [(signal.SIGINT, 130, "interrupted"), (signal.SIGTERM, 143, "terminated")]
)
def test_a_long_diagnosis_shows_progress_and_stops(
    sig: int, code: int, line: str, quick_pack: Path, tmp_path: Path
) -> None:
    wrong = tmp_path / "w.page"
    wrong.write_bytes(bytes(4096))
    page = str(quick_pack / "default" / "in-0.page")
    cmd = [sys.executable, "-m", "meshnb", "check", "--view-in", page, "--steps", "4096", "--page", str(wrong)]
    proc = subprocess.Popen([*cmd, "--progress"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stderr is not None
        first = proc.stderr.readline()
        assert first.startswith("meshnb: diagnosis: model 1 of "), first
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == code and out == ""
    assert err.splitlines()[-1] == f"meshnb: {line}" and "Traceback" not in err


@pytest.mark.slow
@pytest.mark.parametrize(
    "moment, code",
    [("held", 130), ("stepped", 130), ("done", 1)],
    ids=["while-it-imports", "in-its-run", "after-the-verdict"],
)
def test_ctrl_c_at_each_moment_of_a_check(quick_pack: Path, tmp_path: Path, moment: str, code: int) -> None:
    """SIGINT (a terminal's Ctrl-C, to the process group) once the command reports a moment: while
    check imports (``held``), inside its meshnb.train (``stepped``: its RunInterrupted, or a
    KeyboardInterrupt in the diff after it) ends 130 with one line; once it is ``done`` the verdict
    stands.  Never a traceback, never death by the signal (-2).  Aimed at reported phases, not
    delays, so that a loaded machine cannot move the Ctrl-C to another moment."""
    wrong = tmp_path / "w.page"
    wrong.write_bytes(bytes(4096))
    page = str(quick_pack / "default" / "in-0.page")
    log = tmp_path / "phases"
    cmd = [sys.executable, "-m", "meshnb", "check", "--view-in", page, "--steps", "4000000", "--page", str(wrong)]
    env = dict(os.environ, MESHNB_TEST_PHASES=str(log))
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True, env=env
    )
    try:
        wait_for_phase(log, moment, proc, seconds=300)
        os.killpg(proc.pid, signal.SIGINT)  # (a zombie's group, once it is done: still there to signal)
        out, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    if code == 130:
        assert (proc.returncode, out, err) == (130, "", "meshnb: interrupted\n")
    else:
        assert proc.returncode == 1 and out.startswith("FAIL: case view-in") and err == "", (proc.returncode, err)


def test_a_long_run_is_diagnosed_near_its_first_difference(quick_pack: Path, tmp_path: Path) -> None:
    """A million steps with a trace that parts at step 100: the diagnosis follows the run only to
    the part it replays (not the million steps), so it is done in seconds."""
    import meshnb

    page = (quick_pack / "default" / "in-0.page").read_bytes()
    r = meshnb.train(1_000_000, view_in=page, keep_trace=True)
    trace = np.asarray(r.trace, dtype="<u4").reshape(-1, 5).copy()
    trace[100, 1] ^= 1
    setup = check.setup_from_run(page, 1_000_000)
    rep = check.check(setup, r.page, got_trace=trace)
    assert rep.verdict == "FAIL" and rep.trace is not None and rep.trace["step"] == 100
    assert rep.diagnosis is not None and "and on to step 164" in rep.diagnosis["how"]
    assert setup.per_step is not None and len(setup.per_step[1]) <= 102  # followed to just past step 100


def test_a_model_that_parts_long_before_the_part_compared_is_not_replayed(quick_pack: Path) -> None:
    """A page whose loss ring alone differs (the trace is meshnb's): a model that parts from meshnb
    at step 0 (its own samples) would be replayed over the whole run to compare the final page; past
    ``replay_steps`` it is named as not replayed instead (the 65536-step ``long`` case took 90 s of
    CPU so), and within the bound it is replayed as before."""
    from meshnb.conformance.check.diagnosis import diagnose

    setup = check.load_case(quick_pack / "default")  # from init: a model's own samples part at step 0
    got = bytearray(setup.expected[0])
    off = OFF_LOSS + 4 * 5
    got[off : off + 4] = (int.from_bytes(got[off : off + 4], "little") ^ 1).to_bytes(4, "little")
    bounded = diagnose(setup, 0, bytes(got), setup.trace, None, replay_steps=16)
    assert "samples-naive-sin" in [m["name"] for m in bounded.get("not_replayed", [])]
    unbounded = diagnose(setup, 0, bytes(got), setup.trace, None)
    assert "not_replayed" not in unbounded and unbounded["models"] == []


# =============================================================================================
# The library's own words (issue 23): its errors name its arguments, never the command's flags
# =============================================================================================


def test_library_errors_name_arguments_not_flags() -> None:
    page = pack.start_pages()["tiny-params-underflow"]
    calls: list[tuple[Callable[[], object], str]] = [
        (lambda: check.setup_from_run(page[:100], 10), "view_in has 100 bytes, a page is 4096 bytes"),
        (lambda: check.setup_from_run(page, 10, systems=65), "systems must be an integer from 1 to 64, got 65"),
        (lambda: check.setup_from_run(page, 10, steps_per_task=0), "steps_per_task must be an integer from 1 to"),
        (lambda: check.setup_from_run(page, 10, step_base=-1), r"step_base must be 0..2\^64-2, got -1"),
    ]
    setup = check.setup_from_run(page, 10)
    calls += [
        (lambda: check.check(setup, page[:10]), "got_page: a page is 4096 bytes"),
        (lambda: check.check(setup, page, got_trace=np.zeros((3, 5), np.uint32)), "got_trace: 3 steps"),
    ]
    for call, says in calls:
        with pytest.raises(ValueError, match=says) as caught:
            call()
        assert "--" not in str(caught.value), caught.value


def test_a_run_from_view_in_is_trains_description_of_it() -> None:
    """setup_from_run (meshnb check --view-in) builds its run as train's options do
    (runspec.describe): the same page, STEPS_PER_TASK, step base, LR changes and group."""
    from meshnb.options import RunOptions
    from meshnb.view import View

    page = pack.start_pages()["tiny-params-underflow"]
    keywords = {"systems": 2, "steps_per_task": 4, "step_base": 5, "set_lr": {3: 0.5}}
    setup = check.setup_from_run(page, 8, **keywords)
    run = RunOptions(steps=8, view_in=page, **keywords).describe()
    case = setup.case
    assert (case.systems, case.steps_per_task, case.step_base, case.set_lr) == (
        run.group,
        run.steps_per_task,
        int(run.step_base(0, 1)[0]),
        run.set_lr,
    )
    assert setup.in_pages == [run.words(0, 1)[0].astype("<u4").tobytes()] * 2
    assert View.from_bytes(setup.in_pages[0]).next_step == 5 != View.from_bytes(page).next_step
    with pytest.raises(ValueError, match=r"^the run cannot be made: system 0: steps 18446744073709551613 \.\."):
        check.setup_from_run(page, 8, step_base=2**64 - 3)


def test_the_report_is_typed_and_its_json_is_its_fields() -> None:
    page = pack.start_pages()["tiny-params-underflow"]
    setup = check.setup_from_run(page, 20)
    trace = setup.trace.copy()
    trace[5, 2] ^= 1  # a sum no fault model makes: the diagnosis names none and shows the lanes
    rep = check.check(setup, setup.expected[0], got_trace=trace)
    assert rep.verdict == "FAIL" and rep.exit_code == 1 and rep.diagnosis is not None
    assert rep.trace is not None and rep.trace["step"] == 5 and "lanes" in rep.diagnosis
    doc = json.loads(json.dumps(rep.to_json()))
    assert set(doc) == {"verdict", "case", "system", "diff", "trace", "task", "samples", "diagnosis", "notes"}
    assert doc["diff"] == [dict(d) for d in rep.diff] and doc["diagnosis"]["models"] == list(rep.diagnosis["models"])
    ok = check.check(setup, setup.expected[0], got_trace=setup.trace)
    assert ok.verdict == "PASS" and ok.exit_code == 0 and ok.diagnosis is None and ok.text().startswith("PASS")


def test_nothing_below_the_command_line_imports_the_package_face() -> None:
    """``import meshnb`` (the face, which names this code) only from the command line above it."""
    import ast

    import meshnb

    root = Path(meshnb.__file__).parent
    offenders = []
    for path in root.rglob("*.py"):
        rel = path.relative_to(root).as_posix()
        if rel.startswith(("cli/", "__main__", "__init__")):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import) and any(a.name == "meshnb" for a in node.names):
                offenders.append(rel)
            if (
                isinstance(node, ast.ImportFrom)
                and (node.module, node.level) == ("meshnb", 0)
                and any(a.name in meshnb.__all__ for a in node.names)
            ):
                offenders.append(rel)
    assert offenders == []


def test_a_page_of_the_pack_itself_is_said_to_judge_the_pack_against_itself(
    quick_pack: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`check CASE --page CASE/out-0.page` (or a hard link to it, or its trace) checks the pack against
    itself: the verdict is as before (PASS), and stderr says so, one line a flag; an executor's own copy
    of the same bytes is checked without a word."""
    case = quick_pack / "default"
    own = tmp_path / "out.page"
    shutil.copyfile(case / "out-0.page", own)
    assert main(["check", str(case), "--page", str(own)]) == 0
    assert capsys.readouterr().err == ""
    os.link(case / "trace.bin", tmp_path / "trace.bin")
    assert main(["check", str(case), "--page", str(case / "out-0.page"), "--trace", str(tmp_path / "trace.bin")]) == 0
    err = capsys.readouterr().err.splitlines()
    assert [line.split(" ", 3)[2] for line in err] == ["--page", "--trace"], err
    assert all(line.startswith("meshnb: warning: ") and "against itself" in line for line in err), err


# The report's parts and lines, as their docstrings showed them (one setup for all)
def test_the_report_parts_as_the_check_gives_them() -> None:
    from meshnb.testing.reference import init_page
    from meshnb.view import FIELDS

    setup = check.setup_from_run(init_page(), 16)
    assert check.printable("case\x1b[2Jname\n") == "case\\x1b[2Jname\\n" and check.printable("plain") == "plain"
    got = bytearray(setup.expected[0])
    at = FIELDS["LOSS"].offset + 4  # LOSS[1]
    got[at : at + 4] = bytes(4)
    assert sorted(check.page_diff(setup.case, setup.expected[0], bytes(got))[0].items()) == [
        ("expected", "3eca6cc7"),
        ("expected_f32", "0.39536115527153015"),
        ("field", "LOSS[1]"),
        ("got", "00000000"),
        ("got_f32", "0.0"),
        ("offset", 2116),
        ("step", 1),
    ]
    got = bytearray(setup.expected[0])
    at = FIELDS["X"].offset + 4 * 3  # X[3], one ulp up
    got[at : at + 4] = (int.from_bytes(got[at : at + 4], "little") + 1).to_bytes(4, "little")
    assert check.compare(setup, bytes(got), 0, None, None)[0].samples == [{"field": "X[3]", "ulps": 1}]
    seq = check.executor_run(setup, faults.model("sequential-lane-sum"))
    part = check.compare(setup, seq.pages[0], 0, seq.trace, None)[0].trace
    assert part is not None and (part["step"], part["absolute_step"], part["sums"]) == (
        0,
        0,
        ["e", "e*x", "e*x2", "e*x3"],
    )
    fma = check.executor_run(setup, faults.model("fma-horner"))
    assert check.check(setup, fma.pages[0], got_trace=fma.trace).diagnosis["models"] == [  # type: ignore[index]
        {"name": "fma-horner", "doc": "FMA contraction in the Horner polynomial"}
    ]
    swapped = check.executor_run(setup, faults.single_op("e", "swapped"))  # y - pred
    rep = check.check(setup, swapped.pages[0], got_trace=swapped.trace)
    found = rep.diagnosis["localisation"]["found"][0]  # type: ignore[index]
    assert (found["op"], found["alt"], found["step"], found["text"]) == (
        "e",
        "swapped",
        0,
        "step 0: mode Z except `e = pred - y` with its operands swapped (y - pred) on lanes 0 .. 31",
    )
    got = bytearray(setup.expected[0])
    got[28] += 1  # NEXT_STEP one on
    loc = check.check(setup, bytes(got)).diagnosis["localisation"]  # type: ignore[index]
    assert (loc["where"], loc["found"], loc["page"]) == (
        "page word NEXT_STEP (header)",
        [],
        ["STEP_HI:NEXT_STEP: the step counter off by +1 (17 for 16)"],
    )
    got = bytearray(setup.expected[0])
    got[0] ^= 1  # a bit no fault model explains
    found = check.check(setup, bytes(got)).diagnosis
    assert found is not None and found["models"] == [] and sorted(found) == ["how", "localisation", "models"]


def test_the_report_lines_of_experiments_and_localisation() -> None:
    from meshnb.conformance.check.report import experiment_lines, localisation_lines

    loc = {"where": "step 3: ...", "runs": 2, "seconds": 0.5, "cut_short": False}
    assert experiment_lines({"location": loc, "proof": {"proved": [], "ruled_out": {"m": "e1"}}}) == [
        "  seen by experiment (2 executor runs from meshnb's pages, 0.5 s): step 3: ...",
        "  cause not proved",
        "  ruled out by experiment: m (e1)",
    ]
    ex = {"candidates": 9, "ruled_out": 8, "runs": 1, "seconds": 0.7, "sentence": "proved: a"}
    ex["experiments"] = [{"name": "c-design-1", "about": "PARAMS[0] = 0", "differs": True, "what": "w"}]
    assert experiment_lines({"location": loc, "explanation": ex})[1:] == [
        "  designed experiments (9 candidate causes, 8 ruled out, 1 executor runs on designed pages, 0.7 s): proved: a",
        "    c-design-1: PARAMS[0] = 0 (differs: w)",
    ]
    px = {"candidates": 257, "ruled_out": 257, "runs": 0, "seconds": 0.1, "sentence": "none of these"}
    assert experiment_lines({"location": loc, "explanation": ex, "page": px})[3:] == [
        "  page rules (257 candidates, 257 ruled out, 0 executor runs on designed pages, 0.1 s): none of these"
    ]
    one = {"where": "step 3", "found": [], "page": [], "searched": 10, "space": 10, "seconds": 0.1, "closest": "C"}
    assert localisation_lines(one) == [
        "  localisation (step 3, 10 of 10 single-op changes tried, 0.1 s): reproduced by no single-op change;"
        " closest: C"
    ]
    summary = check.localisation_summary({"where": "step 3", "found": [], "page": [], "space": 9, "closest": "x"})
    assert summary == "step 3: reproduced by no single-op change; closest: x"


def test_the_checks_parts_as_their_docstrings_showed_them(tmp_path: Path) -> None:
    from meshnb.conformance.check.cases import run_bounds
    from meshnb.conformance.check.compare import rows_hex
    from meshnb.runspec import OptionError
    from meshnb.testing.reference import init_page

    setup = check.setup_from_run(init_page(), 16)
    assert (setup.case.steps, setup.case.systems, len(setup.in_pages), len(setup.expected)) == (16, 1, 1, 1)
    assert setup.trace.shape == (16, 5)
    case300 = check.setup_from_run(init_page(), 300).case  # steps 0 .. 299: LOSS[i] holds the last step t = i mod 256
    assert (check.loss_step(case300, 10), check.loss_step(case300, 50), check.loss_step(setup.case, 16)) == (
        266,
        50,
        None,
    )
    got = bytearray(setup.expected[0])
    got[0:4] = bytes.fromhex("00008040")  # PARAMS[0] = 4.0
    diff = check.page_diff(setup.case, setup.expected[0], bytes(got))
    assert [(d["field"], d["offset"], d["got"], d.get("got_f32")) for d in diff] == [
        ("PARAMS[0]", 0, "40800000", "4.0")
    ]
    want = np.zeros((3, 5), np.uint32)
    row = want.copy()
    row[2, [0, 4]] = 1
    assert check.first_trace_diff(want, row) == (2, ["e", "e*e"]) and check.first_trace_diff(want, want) is None
    assert rows_hex(np.array([0x3F800000, 7], np.uint32)) == ["3f800000", "00000007"]
    fma = check.executor_run(setup, faults.model("fma-horner"))
    report, task = check.compare(setup, fma.pages[0], 0, fma.trace, None)
    assert (report.verdict, task, report.diagnosis) == ("FAIL", None, None)  # no diagnosis: check() makes it
    assert [d["field"] for d in report.diff] == ["PARAMS[0]", "PARAMS[3]", "LOSS[2]", "LOSS[8]", "LOSS[11]", "LOSS[13]"]
    assert len(check.page_bytes(bytes(4096), "out.page")) == 4096
    with pytest.raises(pack.PackError, match=r"^out.page: a page is 4096 bytes, this has 10$"):
        check.page_bytes(bytes(10), "out.page")
    assert run_bounds(100, 64, 0, {50: 0.25}) == ((50, 1048576000),)
    with pytest.raises(OptionError, match=r"^steps must be an integer from 0 to 4194304, got 4194305$"):
        run_bounds(check.MAX_CHECK_STEPS + 1, 64, 0, {})
    for n in (0, 8, 16):
        (tmp_path / f"{n}.page").write_bytes(bytes(4096))
    assert [n for n, _ in check.read_pages_dir(tmp_path, 16)] == [0, 8, 16]
    (tmp_path / "trace.bin").write_bytes(np.arange(10, dtype="<u4").tobytes())  # two steps of five sums
    assert check.load_trace(tmp_path / "trace.bin").tolist() == [[0, 1, 2, 3, 4], [5, 6, 7, 8, 9]]
    assert check.reference_state(setup, 16) == setup.expected and check.reference_state(setup, 0) == setup.in_pages


def test_load_case_reads_a_case_of_the_pack(quick_pack: Path) -> None:
    setup = check.load_case(quick_pack / "lr-changes")  # every file checked against the pack's manifest
    assert (setup.case.name, setup.case.steps, setup.trace.shape) == ("lr-changes", 100, (100, 5)) and setup.case.set_lr
    with pytest.raises(pack.PackError, match=r"not a case directory$"):
        check.load_case(quick_pack / "no-such-case")


def test_the_diagnosis_parts_as_their_docstrings_showed_them() -> None:
    from meshnb.testing.reference import init_page

    setup = check.setup_from_run(init_page(), 16)
    exact = check.replay(setup, 8, 8, faults.EXACT)  # steps 8 .. 15 from meshnb's state at step 8
    assert exact.pages[0] == setup.expected[0] and bool((exact.trace == setup.trace[8:]).all())
    assert check.replay(setup, 8, 8, faults.model("fma-horner")).pages[0] != setup.expected[0]
    table = check.lane_table(check.setup_from_run(init_page(), 4), 1, 0).splitlines()
    assert table[:3] == [
        "meshnb's lanes at step 1 (absolute 1), system 0, batch 1, params 3930adce 3e21fb5c 392b185b 3d7d262c",
        "  lane sample x        y        pred     e        e*x      e*x2     e*x3     e*e",
        "     0      1 bf7dfdfe bcc9d479 be5e2f2a be44f49b 3e436926 be41e0cc 3e405b85 3d178777",
    ]
    seq = check.executor_run(setup, faults.model("sequential-lane-sum"))  # the batch summed in lane order
    assert [m["name"] for m in check.diagnose(setup, 0, seq.pages[0], seq.trace, None)["models"]] == [
        "sequential-lane-sum"
    ]
    parts = {m.name: check.first_divergence(setup, m) for m in faults.MODELS}
    assert {k: v for k, v in parts.items() if v is not None} == {"fma-horner": 1, "sequential-lane-sum": 0}


def test_the_localisation_as_its_docstrings_showed_it() -> None:
    from meshnb.testing.reference import init_page
    from meshnb.view import FIELDS

    setup = check.setup_from_run(init_page(), 16)
    got = check.executor_run(setup, faults.single_op("p - lr*g", "swapped"))  # lr*g - p in apply
    assert [c["text"] for c in check.localise_step(setup, 0, 1, got.trace, budget=60.0)["found"]] == [
        "step 0: mode Z except `p - lr*g` (apply's p - lr*g) with its operands swapped (lr*g - p)"
        " (shows in step 1's sums)"
    ]
    page = bytearray(setup.expected[0])
    lo = FIELDS["LOSS"].offset
    page[lo : lo + 1024] = np.roll(np.frombuffer(page[lo : lo + 1024], dtype="<u4"), 1).tobytes()  # one index on
    loc = check.localise_page(setup, 0, bytes(page))
    assert (loc["where"], loc["page"]) == (
        "page word LOSS[0] (loss)",
        ["LOSS: the loss of step t written at LOSS[(t + 1) mod 256]"],
    )
