"""The command line: the JSON contract, the human summary, pages in and out, one-line errors."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from meshnb.cli import main
from meshnb.testing import reference as ref
from meshnb.testing.pages import hard_pages

from .util import StderrWatch, meshnb_cli, some_steps_shown


def run_cli(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_json_matches_the_vectors(capsys, vectors):
    want = vectors["runs"][0]
    code, out, err = run_cli(capsys, "train", "--json")
    assert code == 0 and err == ""
    doc = json.loads(out)
    assert doc == {
        "steps": 4096,
        "systems": [
            {
                "system": 0,
                "params": want["params"],
                "digest": want["digest"],
                "trace_digest": want["trace_digest"],
                "counters": {"inits": 1, "steps": 4096, "timeouts": 0},
            }
        ],
    }


def test_human_summary_shows_params_loss_digest_and_speed(capsys, vectors):
    code, out, _ = run_cli(capsys, "train")
    assert code == 0
    assert vectors["runs"][0]["digest"] in out and " ".join(vectors["runs"][0]["params"]) in out
    assert "loss" in out and "steps/s" in out and "jit " in out


def test_options_reach_the_program(capsys, tmp_path):
    out_page = tmp_path / "page.bin"
    code, out, _ = run_cli(
        capsys,
        "train",
        "--json",
        "--steps",
        "300",
        "--steps-per-task",
        "48",
        "--set-lr",
        "0:0x3f400000",
        "--set-lr",
        "100:0x3e800000",
        "--step-base",
        "1:fffffff0",
        "--view-out",
        str(out_page),
    )
    assert code == 0
    start = bytearray(ref.init_page(1))
    start[20:24] = (48).to_bytes(4, "little")
    start[28:32] = (0xFFFFFFF0).to_bytes(4, "little")
    start[44:48] = (1).to_bytes(4, "little")
    pages, trace = ref.run([bytes(start)], 300, grouped=False, lr_changes={0: 0x3F400000, 100: 0x3E800000})
    assert out_page.read_bytes() == pages[0]
    assert json.loads(out)["systems"][0]["trace_digest"] == ref.trace_digest(trace)


@pytest.mark.parametrize(
    "name", ["tiny-samples", "overflow-then-inf-minus-inf", "inv-batch-at-flush-boundary", "subnormal-and-nan-samples"]
)
def test_a_page_from_view_in_runs_as_the_reference_says(capsys, tmp_path, name):
    page = hard_pages()[name]
    (tmp_path / "in.bin").write_bytes(page)
    code, out, _ = run_cli(
        capsys,
        "train",
        "--json",
        "--steps",
        "130",
        "--view-in",
        str(tmp_path / "in.bin"),
        "--view-out",
        str(tmp_path / "out.bin"),
    )
    pages, trace = ref.run([page], 130, grouped=False)
    doc = json.loads(out)["systems"][0]
    assert code == 0 and (tmp_path / "out.bin").read_bytes() == pages[0]
    assert doc["digest"] == ref.digest(pages[0]) and doc["trace_digest"] == ref.trace_digest(trace)
    assert doc["counters"]["inits"] == 0


@pytest.mark.parametrize(
    "argv, message",
    [
        (["train", "--steps", "-5"], "negative"),
        (["train", "--steps", "ten"], "not a whole number"),
        (["train", "--steps-per-task", "0"], "from 1 to"),
        (["train", "--set-lr", "5"], "STEP:LR"),
        (["train", "--set-lr", "5:xyz"], "neither a number (0.01) nor an f32 word in hex (0x3c23d70a)"),
        (["train", "--set-lr", "5:0x123456789"], "at most 8 hex digits"),
        (["train", "--set-lr", "5:3e800000"], "beyond float32's range (|x| <= 3.4028235e+38); to run an infinite LR"),
        (["train", "--set-lr", "5:3e800000"], "for the f32 word write 5:0x3e800000"),
        (["train", "--set-lr", "5:3f400000"], "neither a number (0.01) nor an f32 word in hex"),
        (["train", "--set-lr", "5:3f400000"], "for the f32 word write 5:0x3f400000"),
        (["train", "--set-lr", "5000:0x3f000000"], "--set-lr's step must be an integer from 0 to 4096"),
        (["train", "--step-base", "12x"], "not a whole number"),
        (["train", "--step-base", "ffffffff:ffffffff"], "step_base must be 0..2^64-2"),
        (["train", "--view-in", "/nonexistent/page"], "No such file"),
        (["train", "--bogus"], "unrecognized"),
        (["fly"], "invalid choice"),
    ],
)
def test_malformed_values_exit_2_with_one_line(capsys, argv, message):
    code, out, err = run_cli(capsys, *argv)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("meshnb: error:") and message in err


def test_a_short_view_in_page_is_refused(capsys, tmp_path):
    (tmp_path / "short.bin").write_bytes(b"\0" * 4000)
    code, _, err = run_cli(capsys, "train", "--view-in", str(tmp_path / "short.bin"))
    assert code == 2 and "4096 bytes" in err and err.count("\n") == 1


_cli = meshnb_cli


def test_python_dash_m_and_the_progress_bar():
    p = _cli("train", "--steps", "3000000", "--progress")
    out, err = p.communicate(timeout=120)
    assert p.returncode == 0, err
    assert "%|" in err and "step" in err  # tqdm's bar on stderr
    assert "digest" in out


@pytest.mark.slow
def test_ctrl_c_writes_the_page_so_nothing_is_lost(tmp_path):
    page = tmp_path / "page.bin"
    p = _cli("train", "--steps", "10000000000", "--view-out", str(page), "--progress")
    watch = StderrWatch(p)
    watch.wait_for(some_steps_shown, timeout=400)  # past the imports and the JIT: some steps done
    p.send_signal(signal.SIGINT)
    p.stdout.read()  # the summary (nothing here: interrupted); drained so the pipe never fills
    p.wait(timeout=60)
    err = watch.text()
    assert p.returncode == 130, err
    assert "interrupted after" in err and str(page) in err
    done = int(err.split("interrupted after ")[1].split()[0])
    data = page.read_bytes()
    assert int.from_bytes(data[28:32], "little") | int.from_bytes(data[44:48], "little") << 32 == done
    # Continuing from the saved page equals an uninterrupted run.
    code_env = dict(os.environ)
    more = subprocess.run(
        [sys.executable, "-m", "meshnb", "train", "--json", "--steps", "1000", "--view-in", str(page)],
        capture_output=True,
        text=True,
        env=code_env,
        timeout=120,
    )
    whole = subprocess.run(
        [sys.executable, "-m", "meshnb", "train", "--json", "--steps", str(done + 1000)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert json.loads(more.stdout)["systems"][0]["digest"] == json.loads(whole.stdout)["systems"][0]["digest"]


# --- clusters ---------------------------------------------------------------------------------


def test_systems_json_lists_every_member(capsys, vectors):
    want = vectors["runs"][1]
    code, out, err = run_cli(capsys, "train", "--systems", "2", "--json")
    assert code == 0 and err == ""
    doc = json.loads(out)
    assert doc["steps"] == 4096 and [s["system"] for s in doc["systems"]] == [0, 1]
    for s in doc["systems"]:
        assert s == {
            "system": s["system"],
            "params": want["params"],
            "digest": want["digest"],
            "trace_digest": want["trace_digest"],
            "counters": {"inits": 1, "steps": 4096, "timeouts": 0},
        }


def test_stalls_on_the_command_line_count_timeouts_and_change_no_digest(capsys):
    code, out, _ = run_cli(
        capsys,
        "train",
        "--systems",
        "4",
        "--backend",
        "processes",
        "--steps",
        "1000",
        "--timeout-ms",
        "50",
        "--stall",
        "1:3:300",
        "--json",
    )
    assert code == 0
    systems = json.loads(out)["systems"]
    clean = json.loads(run_cli(capsys, "train", "--systems", "4", "--backend", "fused", "--steps", "1000", "--json")[1])
    assert [s["digest"] for s in systems] == [s["digest"] for s in clean["systems"]]
    assert [s["trace_digest"] for s in systems] == [s["trace_digest"] for s in clean["systems"]]
    assert all(s["counters"]["timeouts"] > 0 for s in systems if s["system"] != 1), [s["counters"] for s in systems]


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--systems", "0"], "from 1 to 64"),
        (["--systems", "65"], "from 1 to 64"),
        (["--systems", "two"], "not a whole number"),
        (["--systems", "2", "--backend", "carrier-pigeon"], "backend must be one of"),
        (["--systems", "2", "--timeout-ms", "0"], "positive number"),
        (["--systems", "2", "--timeout-ms", "soon"], "not a number"),
        (["--systems", "2", "--stall", "1:3"], "K:TASK:MS"),
        (["--systems", "2", "--stall", "1:-3:5"], "negative"),
        (["--systems", "2", "--stall", "2:3:5"], "names system 2"),
        (["--systems", "2", "--backend", "fused", "--stall", "1:3:5"], "no exchange"),
        (["--systems", "2", "--give-up", "-1"], "positive number"),
        (["--stall", "1:3:5"], "--stall is for clusters"),
        (["--backend", "threads"], "--backend is for clusters"),
        (["--checkpoint", "x.ckpt"], "--checkpoint is for clusters"),
        (["--resume", "/nonexistent/run.ckpt"], "No such file"),
    ],
)
def test_malformed_cluster_values_exit_2_with_one_line(capsys, argv, message):
    code, out, err = run_cli(capsys, "train", *argv)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("meshnb: error:") and message in err


def test_a_dead_member_exits_1_naming_it():
    from .test_cluster import member_pids

    p = _cli("train", "--systems", "3", "--backend", "processes", "--steps", "100000000")
    victim = member_pids(p.pid, 3)[2]
    time.sleep(0.5)
    os.kill(victim, signal.SIGKILL)
    t0 = time.monotonic()
    out, err = p.communicate(timeout=60)
    assert time.monotonic() - t0 < 30
    assert p.returncode == 1 and out == ""
    assert (
        err.count("\n") == 1
        and f"(pid {victim}) was killed by SIGKILL" in err
        and err.startswith("meshnb: error: system ")
    )


def test_every_option_and_argument_of_every_command_says_what_it_is():
    """``meshnb COMMAND -h`` has a line for each option (the site's reference is made from them)."""
    import argparse

    from meshnb.cli import build_parser

    def empty(parser: argparse.ArgumentParser, path: str) -> list[str]:
        out = []
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    out += empty(sub, f"{path} {name}")
            elif not action.help and not isinstance(action, argparse._HelpAction):
                out.append(f"{path} {'/'.join(action.option_strings) or action.dest}")
        return out

    assert empty(build_parser(), "meshnb") == []


def test_no_module_imports_the_face() -> None:
    # meshnb/__init__ (the face) is above every layer: a module that imports it (``import meshnb``,
    # ``from meshnb import x``) points up, and import-linter's layers cannot see the root package.
    # Doctests may (they are users); gpu-check's checks did, from the CLI, before meshnb.conformance.gpu.
    import ast
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent / "meshnb"

    def submodule(name: str) -> bool:
        return (root / f"{name}.py").exists() or (root / name / "__init__.py").exists()

    up = []
    for path in sorted(root.rglob("*.py")):
        if path.name == "__init__.py" and path.parent == root:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                face = any(a.name == "meshnb" or a.name.startswith("meshnb.") for a in node.names)
            elif isinstance(node, ast.ImportFrom):  # from the root: only its modules (``from .. import files``)
                at_root = node.module == "meshnb" if not node.level else (
                    not node.module and node.level == len(path.relative_to(root).parts)
                )  # fmt: skip
                face = at_root and any(not submodule(a.name) for a in node.names)
            else:
                continue
            if face:
                up.append(f"{path.relative_to(root.parent)}:{node.lineno}")
    assert not up, up


def test_the_cli_helpers_say_what_they_do(capsys, tmp_path, monkeypatch):
    """What the cli modules' helpers promise (their one-line docstrings say it; checked here)."""
    import argparse
    import contextlib
    import csv
    import io

    import meshnb
    from meshnb.cli.base import Parser, UsageError, add_progress, error, error_line, is_mpi_run, names_stdout
    from meshnb.cli.program import build_parser
    from meshnb.cli.train import options, refuse_meaningless_timeout, summary

    parser = Parser(prog="meshnb pack")
    parser.add_argument("directory")
    with pytest.raises(UsageError, match=r"^the following arguments are required: directory$"):
        parser.parse_args([])  # one line, no usage block
    parser = argparse.ArgumentParser()
    add_progress(parser)
    assert [parser.parse_args(f).progress for f in ([], ["--progress"], ["--no-progress"])] == [None, True, False]
    assert error("--steps: '1_0' is not a whole number") == 2
    assert capsys.readouterr().err == "meshnb: error: --steps: '1_0' is not a whole number\n"
    closed = io.StringIO()
    closed.close()
    with contextlib.redirect_stderr(closed):
        error_line("lost")  # a stderr that cannot be written: nothing raised
    assert is_mpi_run(argparse.Namespace(backend="mpi")) and is_mpi_run(None, ["train", "--backend=mpi"])
    assert not is_mpi_run(None, ["train"]) and not names_stdout("/dev/null") and not names_stdout("/no/such/file")

    args = build_parser().parse_args(["train", "--steps", "16", "--systems", "2", "--backend", "fused"])
    assert (args.command, args.steps, args.systems, args.backend) == ("train", 16, 2, "fused")
    opts = options(build_parser().parse_args(["train", "--steps", "100", "--step-base", "4294967296"]))
    assert (opts.steps, opts.step_base, opts.backend) == (100, 4294967296, None)
    args = build_parser().parse_args(["train", "--systems", "2", "--backend", "fused", "--timeout-ms", "5"])
    with pytest.raises(UsageError, match=r"^--timeout-ms is a round's timeout: the fused backend has no exchange and"):
        refuse_meaningless_timeout(args, options(args))
    args = build_parser().parse_args(["bench", "--quick", "--paths", "single,fused-8"])
    assert (args.quick, args.paths) == (True, ["single", "fused-8"])
    args = build_parser().parse_args(["sweep", "--steps", "16", "--lr", "1e-4:2:8:log", "--csv", "out.csv"])
    assert (args.command, args.steps, args.csv, callable(args.handler)) == ("sweep", 16, "out.csv", True)

    first = summary(meshnb.train(16)).splitlines()[0]
    assert first == "params  a=-0.0156442709  b=0.861127973  c=-0.0175467655  d=-0.0342258587"
    assert main(["train", "--steps", "16", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["systems"][0]["digest"][:16] == "86aa8e4d23286a6e"
    assert main(["train", "--steps", "16", "--systems", "2", "--backend", "fused", "--json"]) == 0
    assert [s["trace_digest"][:16] for s in json.loads(capsys.readouterr().out)["systems"]] == ["2df9b1e6fddd7787"] * 2
    monkeypatch.chdir(tmp_path)
    assert main(["sweep", "--steps", "16", "--lr", "0.5,0.25", "--csv", "sweep.csv", "--no-progress"]) == 0
    with open("sweep.csv") as f:
        rows = [(r["lr"], r["digest"][:16]) for r in csv.DictReader(f)]
    assert rows == [("0.5", "86aa8e4d23286a6e"), ("0.25", "bd192a529a943be0")]  # LR 0.5: train(16)'s digest
    assert main(["bench", "--seconds", "0.05", "--paths", "single", "--json"]) == 0
    assert [(r["path"], r["verified"]) for r in json.loads(capsys.readouterr().out)["paths"]] == [("single", True)]


def test_a_bad_count_is_one_line_from_a_fresh_process():
    p = subprocess.run([sys.executable, "-m", "meshnb", "train", "--steps", "-5"], capture_output=True, text=True)
    assert (p.returncode, p.stderr) == (2, "meshnb: error: argument --steps: '-5' is negative\n")
