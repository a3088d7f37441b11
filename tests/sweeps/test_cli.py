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

from ..util import mpi_env
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
    p = cli("--lr", "0.5:0.1:2", "--pages", str(d), "--steps", "70", "--ieee", "--csv", str(out))
    assert p.returncode == 0, p.stderr
    lines = out.read_text().splitlines()
    assert len(lines) == 1 + 6 and lines[0].startswith("system,page,lr_word,lr,")
    row = dict(zip(lines[0].split(","), lines[3].split(",")))  # system 2: page 1, LR 0.5
    one = alone(pages[names[1]], 70, 0x3F000000, None, False)
    assert row["page"] == f"{names[1]}.page" and row["digest"] == one.digest and row["a"] == one.params_hex[0]
    npz = tmp_path / "sweep.npz"
    p = cli("--lr", "0.5:0.1:2", "--pages", str(d), "--steps", "70", "--ieee", "--npz", str(npz))
    assert p.returncode == 0, p.stderr
    with np.load(npz, allow_pickle=False) as f:
        assert bytes(f["digest"][2]).hex() == one.digest and list(f["page_names"]) == [f"{n}.page" for n in names]


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
        assert row[11] == meshnb.train(3, set_lr={0: int(lrs[k].view(np.uint32))}).digest, k


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
        (["--pages", "/nonexistent/dir", "--steps", "3"], "pages"),
        (["--npz", "-"], "--npz -"),
        (["--bogus"], "unrecognized"),
    ],
)
def test_cli_bad_arguments_one_line_exit_2(args: list[str], message: str) -> None:
    p = cli(*args)
    assert p.returncode == 2, p.stderr
    lines = p.stderr.strip().splitlines()
    assert lines[-1].startswith("meshnb: error:") and message in lines[-1] and "Traceback" not in p.stderr


@pytest.mark.parametrize("kind", ["fifo", "device", "dangling", "loop", "directory"])
def test_cli_pages_dir_refuses_what_is_no_page_file(tmp_path: Path, kind: str) -> None:
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
    p = cli("--pages", str(d), "--steps", "3", timeout=30)
    assert p.returncode == 2, p.stderr
    assert p.stderr.count("\n") == 1 and "b.page" in p.stderr and p.stderr.startswith("meshnb: error: --pages")


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


@pytest.mark.parametrize("args", [["--csv", "-"], ["--json"], []], ids=["csv", "json", "summary"])
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
    sweep(1, lrs=[0.5])  # the loop compiled into numba's cache: the command below starts stepping at once
    proc = subprocess.Popen(
        [sys.executable, "-m", "meshnb", "sweep", "--lr", "0.01:1:64:log", "--steps", "100000000", "--json",
         "--out", str(out), "--no-progress"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    try:
        time.sleep(6)  # started, compiled or loaded, some chunks done
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err
    doc = json.loads(out.read_text())
    steps = doc["steps"]
    assert 0 < steps < 100000000
    one = meshnb.train(steps, set_lr={0: int(doc["systems"][5]["lr_word"], 16)})
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
