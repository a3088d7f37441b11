"""``meshnb sweep`` (meshnb.cli.sweep): the table written as the sweep goes, bad input in one line
(exit 2), Ctrl-C (130), a closed or broken stdout, MPI ranks."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import meshnb
from meshnb.sweeps import sweep
from meshnb.testing.pages import hard_pages

from ..util import StderrWatch, mpi_env, some_steps_shown
from ..util import mpiexec as util_mpiexec
from .helpers import ROOT, alone, cli


def test_cli_json_equals_the_library(capsys: pytest.CaptureFixture[str]) -> None:
    from meshnb.cli import main

    assert main(["sweep", "--lr", "0.001:1:5:log", "--steps", "300", "--trace", "--json", "--no-progress"]) == 0
    doc = json.loads(capsys.readouterr().out)
    lrs = np.geomspace(0.001, 1, 5).astype(np.float32)
    r = sweep(300, lrs=lrs, trace=True)
    assert doc == r.to_json()
    one = alone(None, 300, np.float32(lrs[2]).view(np.uint32), None, True)
    assert doc["systems"][2]["digest"] == one.digest and doc["systems"][2]["trace_digest"] == one.trace_digest


def test_cli_pages_dir_ieee_csv_and_npz(tmp_path: Path) -> None:
    pages = hard_pages()
    d = tmp_path / "pages"
    d.mkdir()
    names = sorted(pages)[:3]
    for name in names:
        (d / f"{name}.page").write_bytes(pages[name])
    out = tmp_path / "sweep.csv"
    p = cli("--lr", "0.5:0.1:2", "--view-in", str(d), "--steps", "70", "--ieee", "--csv", str(out))
    assert p.returncode == 0, p.stderr
    lines = out.read_text().splitlines()
    assert len(lines) == 1 + 6 and lines[0].startswith("system,page,lr_word,lr,")
    row = dict(zip(lines[0].split(","), lines[3].split(",")))  # system 2: page 1, LR 0.5
    one = alone(pages[names[1]], 70, 0x3F000000, None, False)
    assert row["page"] == f"{names[1]}.page" and row["digest"] == one.digest and row["a"] == one.params_hex[0]
    npz = tmp_path / "sweep.npz"
    p = cli("--lr", "0.5:0.1:2", "--pages", str(d), "--steps", "70", "--ieee", "--npz", str(npz))
    assert p.returncode == 0, p.stderr
    assert p.stderr == "meshnb: warning: --pages is deprecated: use --view-in\n"  # the old name, one release
    with np.load(npz, allow_pickle=False) as f:
        assert bytes(f["digest"][2]).hex() == one.digest and list(f["page_names"]) == [f"{n}.page" for n in names]


@pytest.mark.slow
def test_cli_streams_batches_into_one_table(tmp_path: Path) -> None:
    """40000 systems: three batches written one after the other, one table."""
    out = tmp_path / "big.csv"
    p = cli("--lr", "0.001:1:40000:log", "--steps", "3", "--csv", str(out), "--no-progress")
    assert p.returncode == 0, p.stderr
    lines = out.read_text().splitlines()
    assert len(lines) == 40001 and lines[-1].startswith("39999,0,")
    lrs = np.geomspace(0.001, 1, 40000).astype(np.float32)
    for k in (0, 16383, 16384, 39999):
        row = lines[1 + k].split(",")
        assert row[12] == meshnb.train(3, set_lr={0: np.uint32(lrs[k].view(np.uint32))}).digest, k


def test_cli_summary_shows_the_first_and_last_systems() -> None:
    p = cli("--lr", "0.001:1:40:log", "--steps", "20", "--no-progress")
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert lines[0].startswith("sweep: 40 systems x 20 steps (float mode Z)")
    shown = [int(line.split()[0]) for line in lines[2:] if line.strip() != "..."]
    assert shown == [*range(12), *range(28, 40)] and any(line.strip() == "..." for line in lines)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--lr", "1:2", "--steps", "10"], "--lr"),
        (["--lr", "0:1:4:log", "--steps", "10"], "log"),
        (["--lr", "1:2:0", "--steps", "10"], "COUNT"),
        (["--lr", "1e39:1e39:2", "--steps", "10"], "float32's range"),
        (["--lr", "0.1:1:1000000000000", "--steps", "10"], "learning rates needs about"),
        (["--steps", "-3"], "steps"),
        (["--view-in", "/nonexistent/dir", "--steps", "3"], "--view-in"),
        (["--step-base", "-1"], "--step-base"),
        (["--step-base", str(2**64 - 1)], "step_base must be 0..2^64-2"),
        (["--lr", "0.5,0xZZ"], "--lr"),
        (["--backend", "fused"], "--backend"),
        (["--backend", "cuda", "--loss-every", "2"], "leave loss_every and threads out"),
        (["--npz", "-"], "--npz -"),
        (["--bogus"], "unrecognized"),
    ],
)
def test_cli_bad_arguments_one_line_exit_2(args: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    """In this process (``meshnb.cli.main``, what ``python -m meshnb`` runs); the next test runs the
    process."""
    from meshnb.cli import main

    code = main(["sweep", *args])
    out, err = capsys.readouterr()
    assert code == 2, err
    lines = err.strip().splitlines()
    assert lines[-1].startswith("meshnb: error:") and message in lines[-1] and "Traceback" not in err


def test_cli_a_bad_argument_ends_the_process_with_2_and_one_line() -> None:
    p = cli("--lr", "1:2:0", "--steps", "10")
    assert p.returncode == 2 and p.stdout == "", p.stderr
    assert p.stderr.count("\n") == 1 and p.stderr.startswith("meshnb: error:") and "COUNT" in p.stderr, p.stderr


@pytest.mark.parametrize("kind", ["fifo", "device", "dangling", "loop", "directory"])
def test_cli_pages_dir_refuses_what_is_no_page_file(
    tmp_path: Path, kind: str, capsys: pytest.CaptureFixture[str]
) -> None:
    d = tmp_path / "pages"
    d.mkdir()
    (d / "a.page").write_bytes(hard_pages()["tiny-samples"])
    bad = d / "b.page"
    if kind == "fifo":
        os.mkfifo(bad)
    elif kind == "device":
        bad.symlink_to("/dev/zero")
    elif kind == "dangling":
        bad.symlink_to(tmp_path / "nowhere")
    elif kind == "loop":
        bad.symlink_to(bad)
    else:
        bad.mkdir()
    from meshnb.cli import main  # in this process: what ``python -m meshnb`` runs

    t0 = time.monotonic()
    code = main(["sweep", "--view-in", str(d), "--steps", "3"])
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.count("\n") == 1 and "b.page" in err and err.startswith("meshnb: error: --view-in")
    assert time.monotonic() - t0 < 30  # refused at once (a FIFO is never opened)


def test_cli_outputs_are_never_a_fifo_it_blocks_on(tmp_path: Path) -> None:
    """A FIFO is written through as a stream (issue 24), but one without a reader is refused at once."""
    fifo = tmp_path / "out.csv"
    os.mkfifo(fifo)
    p = cli("--steps", "3", "--csv", str(fifo), timeout=30)
    assert p.returncode == 2 and "a FIFO with no reader" in p.stderr and p.stderr.count("\n") == 1


@pytest.mark.parametrize("args", [["--csv", "-"], ["--json"], []], ids=["csv", "json", "summary"])
def test_cli_closed_stdout_is_refused_in_one_line(args: list[str]) -> None:
    p = subprocess.run(
        [sys.executable, "-m", "meshnb", "sweep", "--steps", "8", *args],
        stdout=None,
        stderr=subprocess.PIPE,
        text=True,
        timeout=60,
        cwd=ROOT,
        check=False,
        preexec_fn=lambda: os.close(1),
    )
    assert p.returncode == 2 and "stdout is closed" in p.stderr and "Traceback" not in p.stderr, p.stderr


@pytest.mark.parametrize(
    "args", [["--csv", "-"], ["--json"], [], ["--npz", "/dev/stdout"]], ids=["csv", "json", "summary", "npz"]
)
def test_cli_broken_pipe_is_141_quietly(args: list[str]) -> None:
    p = subprocess.run(
        f"{sys.executable} -m meshnb sweep --lr 0.001:1:3000:log --steps 8 {' '.join(args)} | true; "
        "echo ${PIPESTATUS[0]} >&2",
        shell=True,
        executable="/bin/bash",
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
        check=False,
    )
    assert p.stderr.strip().splitlines()[-1] == "141" and "Traceback" not in p.stderr and "Error" not in p.stderr


@pytest.mark.slow
def test_cli_ctrl_c_keeps_the_finished_chunks(tmp_path: Path) -> None:
    out = tmp_path / "partial.json"
    proc = subprocess.Popen(
        [sys.executable, "-m", "meshnb", "sweep", "--lr", "0.01:1:64:log", "--steps", "100000000", "--json",
         "--out", str(out), "--progress"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    try:
        watch = StderrWatch(proc)
        # Ctrl-C once the bar has counted a finished chunk (after the start-up and the compiler, which
        # take seconds on a quiet machine and far longer on a loaded one), not after a fixed sleep.
        watch.wait_for(some_steps_shown, timeout=400)
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=60)
        err = watch.text()
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err
    doc = json.loads(out.read_text())
    steps = doc["steps"]
    assert 0 < steps < 100000000
    one = meshnb.train(steps, set_lr={0: "0x" + doc["systems"][5]["lr_word"]})
    assert doc["systems"][5]["digest"] == one.digest


# --- MPI -----------------------------------------------------------------------------------------

HAVE_MPI4PY = __import__("importlib.util").util.find_spec("mpi4py") is not None


def _mpi_sweep(ranks: int, *args: str) -> subprocess.CompletedProcess:
    """``mpiexec -n RANKS python -m meshnb sweep ARGS`` from the repository, output captured."""
    cmd = [util_mpiexec(), "-n", str(ranks), sys.executable, "-m", "meshnb", "sweep", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=180, env=mpi_env(), cwd=ROOT, check=False)


@pytest.mark.mpi
@pytest.mark.skipif(not HAVE_MPI4PY, reason="mpi4py is not installed (pip install 'meshnb[mpi]')")
@pytest.mark.parametrize("ranks", [2, 3])
def test_mpi_ranks_split_the_systems_bit_equal(ranks: int) -> None:
    args = ["--lr", "0.0001:2:37:log", "--steps", "260", "--trace", "--json", "--loss-every", "20", "--threads", "1"]
    p = _mpi_sweep(ranks, *args)
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert len(lines) == 1, "rank 0 prints the one document, the other ranks nothing"
    got = json.loads(lines[0])
    want = sweep(260, lrs=np.geomspace(0.0001, 2, 37).astype(np.float32), trace=True, loss_every=20).to_json()
    assert got == want


@pytest.mark.mpi
@pytest.mark.skipif(not HAVE_MPI4PY, reason="mpi4py is not installed (pip install 'meshnb[mpi]')")
def test_mpi_rounds_of_batches_stream_the_same_table(tmp_path: Path) -> None:
    """40000 systems on 2 ranks: batches of 16384 dealt in two rounds (rank 1 idle in the second)."""
    args = ["--lr", "0.001:1:40000:log", "--steps", "3", "--threads", "1", "--no-progress"]
    p = _mpi_sweep(2, *args, "--csv", str(tmp_path / "mpi.csv"))
    assert p.returncode == 0, p.stderr
    alone_ = cli(*args, "--csv", str(tmp_path / "one.csv"))
    assert alone_.returncode == 0, alone_.stderr
    assert (tmp_path / "mpi.csv").read_text() == (tmp_path / "one.csv").read_text()


def test_cli_one_spelling_for_one_idea(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The start page, the step base, an LR and the backend are spelled as ``meshnb train``'s."""
    from meshnb.cli import main

    page = tmp_path / "start.page"
    page.write_bytes(meshnb.train(5).page)
    base = (1 << 32) + 3
    want = meshnb.train(7, view_in=page.read_bytes(), set_lr={0: 0.25}, step_base=base)
    for step_base in (str(base), hex(base)):
        argv = ["sweep", "--view-in", str(page), "--lr", "0.25,0x3e800000", "--step-base", step_base]
        assert main([*argv, "--steps", "7", "--json", "--backend", "cpu", "--no-progress"]) == 0
        doc = json.loads(capsys.readouterr().out)
        assert [s["digest"] for s in doc["systems"]] == [want.digest] * 2
        argv = ["train", "--view-in", str(page), "--set-lr", "0:0.25", "--step-base", step_base, "--steps", "7"]
        assert main([*argv, "--json"]) == 0
        assert json.loads(capsys.readouterr().out)["systems"][0]["digest"] == want.digest


@pytest.mark.parametrize("command", ["train", "sweep"])
def test_cli_the_old_step_base_spelling_works_in_both_with_a_warning(command: str, capsys) -> None:
    from meshnb.cli import main

    assert main([command, "--step-base", "1:3", "--steps", "2", "--json", "--no-progress"]) == 0
    captured = capsys.readouterr()
    assert "meshnb: warning: --step-base 1:3: HI:LO is deprecated" in captured.err
    doc = json.loads(captured.out)
    assert doc["systems"][0]["digest"] == meshnb.train(2, step_base=(1 << 32) + 3).digest


def test_cli_the_old_device_flag_is_the_backend_with_a_warning(capsys) -> None:
    from meshnb.cli import main

    assert main(["sweep", "--device", "cpu", "--steps", "2", "--json", "--no-progress"]) == 0
    captured = capsys.readouterr()
    assert captured.err == "meshnb: warning: --device is deprecated: use --backend {cpu,cuda}\n"
    assert json.loads(captured.out) == sweep(2).to_json()


def test_cli_a_sweeps_threads_backend_is_cpu_with_a_warning(capsys) -> None:
    from meshnb.cli import main

    assert main(["sweep", "--backend", "threads", "--steps", "2", "--json", "--no-progress"]) == 0
    captured = capsys.readouterr()
    assert (
        captured.err == "meshnb: warning: a sweep's backend 'threads' is 'cpu' now ('threads' is a cluster's backend)\n"
    )
    assert json.loads(captured.out) == sweep(2).to_json()


@pytest.mark.parametrize("option", ["--csv", "--npz", "--view-out"])
def test_an_output_named_with_a_leading_dash_is_a_path(
    option: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`--csv -dash.out` was "expected one argument" while `--csv=-dash.out` worked; `--csv --json`
    still says its value is missing (no file named --json).  In this process (``meshnb.cli.main``,
    what ``python -m meshnb`` runs)."""
    from meshnb.cli import main

    monkeypatch.chdir(tmp_path)
    argv = ["--lr", "0.5", "--steps", "4", option, "-dash.out"]
    if option == "--view-out":
        argv = ["--steps", "4", option, "-dash.out"]
    cmd = "train" if option == "--view-out" else "sweep"
    code = main([cmd, *argv])
    assert code == 0 and (tmp_path / "-dash.out").is_file(), capsys.readouterr().err
    capsys.readouterr()
    code = main(["sweep", "--lr", "0.5", "--csv", "--json"])
    err = capsys.readouterr().err
    assert code == 2 and "--csv: expected one argument" in err and not (tmp_path / "--json").exists()
