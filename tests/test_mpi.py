"""The mpi backend (issue 4): ``mpiexec -n N meshnb train --backend mpi`` as a user runs it.

Every MPI run is a subprocess with a timeout.  ``mpiexec`` is the one beside this Python (the
mpich wheel's, from ``pip install 'meshnb[mpi]'``), else the one on PATH.  With more ranks than
cores, MPICH's progress throttle (``MPIR_CVAR_CH4_PROGRESS_THROTTLE=1``,
``..._NO_PROGRESS_COUNT=1``) keeps polling ranks from starving each other: ``meshnb.backends.mpi`` sets
it unless the environment does, and these runs set it too.
"""

from __future__ import annotations

import importlib.util
import json
import re
import select
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import meshnb
from meshnb import checkpoint as ckpt_io

from .util import mpi_env, mpiexec

HAVE_MPI4PY = importlib.util.find_spec("mpi4py") is not None  # not imported: it would start MPI here
pytestmark = [
    pytest.mark.mpi,
    pytest.mark.skipif(not HAVE_MPI4PY, reason="mpi4py is not installed (pip install 'meshnb[mpi]')"),
]

HERE = Path(__file__).parent
RUN_S = 180  # the limit of one MPI run (cold numba caches compile in every rank at once)


_mpiexec = mpiexec
_env = mpi_env


def mpirun(
    n: int, *args: str, timeout: float = RUN_S, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    cmd = [_mpiexec(), "-n", str(n), sys.executable, "-m", "meshnb", "train", "--backend", "mpi", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env or _env(), cwd=HERE.parent)


def doc(p: subprocess.CompletedProcess) -> dict:
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert len(lines) == 1, f"rank 0 prints one JSON document, the others nothing: {p.stdout!r}"
    return json.loads(lines[0])


def without_timeouts(d: dict) -> dict:
    """The document with the timeouts counters left out (they depend on the machine's load)."""
    d = json.loads(json.dumps(d))
    for s in d["systems"]:
        s["counters"].pop("timeouts")
    return d


@pytest.fixture(scope="module", autouse=True)
def warm_caches(tmp_path_factory):
    """Compile (or load) the grouped kernels and the checkpoint hash into numba's cache here, once,
    rather than in every rank at once."""
    meshnb.train(64, systems=2, backend="threads", checkpoint=tmp_path_factory.mktemp("warm") / "ck")


def test_two_ranks_equal_the_threads_backend_and_the_vectors(vectors):
    got = doc(mpirun(2, "--json"))
    want = meshnb.train(4096, systems=2, backend="threads").to_json()
    assert without_timeouts(got) == without_timeouts(want)
    v = next(r for r in vectors["runs"] if r["systems"] == 2)
    for s in got["systems"]:
        assert (s["params"], s["digest"], s["trace_digest"]) == (v["params"], v["digest"], v["trace_digest"])
        assert s["counters"]["inits"] == 1 and s["counters"]["steps"] == 4096


def test_three_ranks_with_options_equal_the_threads_backend():
    args = dict(
        steps=1000,
        steps_per_task=48,
        set_lr=[(0, np.uint32(0x3F400000)), (500, np.uint32(0x3E800000))],
        step_base=(1 << 32) - 300,
    )
    got = doc(
        mpirun(
            3,
            "--steps",
            "1000",
            "--steps-per-task",
            "48",
            "--set-lr",
            "0:0x3f400000",
            "--set-lr",
            "500:0x3e800000",
            "--step-base",
            str((1 << 32) - 300),
            "--systems",
            "3",
            "--json",
        )
    )
    want = meshnb.train(systems=3, backend="threads", **args).to_json()
    assert without_timeouts(got) == without_timeouts(want)
    assert len({s["digest"] for s in got["systems"]}) == 1


def test_rank_0_prints_the_summary_of_every_rank():
    p = mpirun(2, "--steps", "256")
    assert p.returncode == 0, p.stderr
    out = p.stdout
    want = meshnb.train(256, systems=2, backend="threads")
    for s in want.systems:
        assert out.count(f"system {s.system}: digest  {s.digest}") == 1
        assert out.count(f"system {s.system}: trace   {s.trace_digest}") == 1
    assert out.count("speed") == 1
    assert p.stderr == ""


def test_a_stall_forces_timeouts_on_the_others_and_changes_no_bits():
    got = doc(mpirun(3, "--steps", "512", "--timeout-ms", "20", "--stall", "1:2:300", "--json"))
    want = meshnb.train(512, systems=3, backend="threads").to_json()
    assert without_timeouts(got) == without_timeouts(want)
    timeouts = [s["counters"]["timeouts"] for s in got["systems"]]
    assert timeouts[0] > 0 and timeouts[2] > 0, timeouts  # 300 ms at 20 ms a round


def test_the_exchange_round_times_out_resumes_and_checks_rounds():
    p = subprocess.run(
        [_mpiexec(), "-n", "2", sys.executable, str(HERE / "mpi_exchange_check.py")],
        capture_output=True,
        text=True,
        timeout=RUN_S,
        env=_env(),
    )
    assert p.returncode == 0 and p.stdout.strip() == "ok", p.stdout + p.stderr
    assert "MPICH" not in p.stderr, p.stderr  # nothing left outstanding at MPI_Finalize


@pytest.fixture
def aborted_job_segments():
    """A job ended by MPI_Abort or a killed rank leaves MPICH's shared-memory segment behind
    (``/dev/shm/mpich_shm_*``: the launcher does not unlink it); the tests that end a job so
    remove the segments that appeared while they ran."""
    before = set(Path("/dev/shm").glob("mpich_shm_*"))
    yield
    for seg in set(Path("/dev/shm").glob("mpich_shm_*")) - before:
        seg.unlink(missing_ok=True)


@pytest.mark.usefixtures("aborted_job_segments")
def test_a_stalled_rank_stops_the_others_within_the_give_up_bound(tmp_path):
    phases = tmp_path / "phases"
    p = mpirun(
        3,
        "--steps",
        "1000000",
        "--timeout-ms",
        "50",
        "--give-up",
        "2",
        "--stall",
        "1:1:600000",
        timeout=RUN_S,
        env=_env(MESHNB_TEST_PHASES=str(phases)),
    )
    ended = time.monotonic()
    assert p.returncode == 1, (p.returncode, p.stderr)
    assert "no step completed in 2 s" in p.stderr, p.stderr
    # The suspects are the ranks that had not said they wait for the round: the stalled one, and on
    # a loaded machine perhaps a rank that was only late to say so ("systems 1, 2").
    named = re.search(r"not reached by systems? ([\d, ]+)", p.stderr)
    assert named is not None and "1" in named.group(1).replace(" ", "").split(","), p.stderr
    # From the last rank past the start (the start itself, imports and caches, is load's to take):
    # 2 s of give-up, the abort, and wide margins for a loaded machine.
    running = [
        float(t) for name, _, t in (line.split() for line in phases.read_text().splitlines()) if name == "running"
    ]
    assert len(running) == 3, phases.read_text()
    assert ended - max(running) < 30, ended - max(running)


def test_an_aborting_rank_waits_until_its_error_line_has_left_the_pipe():
    """MPICH's mpiexec exits on the first MPI_Abort without reading what its proxy has not yet
    read from a rank's stderr: abort() waits for the pipe to be empty first (the line was lost so
    on a loaded machine).  Here nobody reads the child's stderr until the test says so."""
    code = (
        "import sys\n"
        "from meshnb.backends.mpi import _drain_stderr\n"
        "print('meshnb: error: the line', file=sys.stderr, flush=True)\n"
        "print('written', flush=True)\n"
        "_drain_stderr(120)\n"
        "print('drained', flush=True)\n"
    )
    # Unbuffered: a readline takes one line, so that select() sees what is left in the pipe.
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, bufsize=0)
    try:
        assert p.stdout.readline() == b"written\n"
        ready, _, _ = select.select([p.stdout], [], [], 1.0)
        assert not ready, "drained while the line still sat in the pipe"
        assert p.stderr.readline() == b"meshnb: error: the line\n"
        assert p.stdout.readline() == b"drained\n"  # the wait ended with the read
    finally:
        p.kill()
        p.communicate()


@pytest.mark.usefixtures("aborted_job_segments")
def test_a_rank_that_dies_stops_the_others_with_a_message():
    began = time.monotonic()
    p = mpirun(
        3,
        "--steps",
        "1000000",
        "--timeout-ms",
        "50",
        "--give-up",
        "5",
        timeout=120,
        env=_env(MESHNB_MPI_TEST_SIGNAL="1:3:SIGKILL"),
    )
    took = time.monotonic() - began
    assert p.returncode != 0
    # MPICH's hydra sees the death and ends the job ("BAD TERMINATION ... Killed (signal 9)");
    # a launcher that does not leaves the others to give up with meshnb's message.
    assert "signal 9" in p.stdout + p.stderr or "not reached by system 1" in p.stderr, p.stdout + p.stderr
    assert took < 60, took


def test_ctrl_c_on_one_rank_stops_all_at_a_boundary_with_a_checkpoint_that_resumes(tmp_path):
    ck = tmp_path / "run.ck"
    p = mpirun(2, "--steps", "3000", "--checkpoint", str(ck), "--json", env=_env(MESHNB_MPI_TEST_SIGNAL="1:10:SIGINT"))
    assert p.returncode == 130, p.stderr
    assert p.stdout == ""
    assert p.stderr.count("interrupted after") == 1 and f"checkpoint written to {ck}" in p.stderr, p.stderr
    saved = ckpt_io.load(ck)
    assert 0 < saved.done < 3000 and saved.done % 64 == 0
    want = without_timeouts(meshnb.train(3000, systems=2, backend="threads").to_json())["systems"]
    resumed = without_timeouts(doc(mpirun(2, "--resume", str(ck), "--json")))
    assert resumed["steps"] == 3000 - saved.done and resumed["systems"] == want
    assert without_timeouts(meshnb.train(resume=ck).to_json())["systems"] == want  # any backend resumes it


@pytest.mark.usefixtures("aborted_job_segments")
def test_checkpoints_agreed_through_the_rounds_flags_resume_after_a_rank_dies(tmp_path):
    """The driver's deadline on mpi is the checkpoint flag every rank saw: with checkpoints due
    at every boundary, a job whose rank 1 is killed before its 40th task has left one of a step
    before it, which resumes to a clean run's digests."""
    ck = tmp_path / "run.ck"
    p = mpirun(
        2, "--steps", "3000", "--checkpoint", str(ck), "--checkpoint-every", "0.001", "--give-up", "5",
        timeout=120, env=_env(MESHNB_MPI_TEST_SIGNAL="1:40:SIGKILL"),
    )  # fmt: skip
    assert p.returncode != 0, p.stderr
    saved = ckpt_io.load(ck)
    assert 0 < saved.done <= 40 * 64 and saved.done % 64 == 0, saved.done  # calls count from 0
    want = without_timeouts(meshnb.train(3000, systems=2, backend="threads").to_json())["systems"]
    assert without_timeouts(meshnb.train(resume=ck).to_json())["systems"] == want


def test_the_final_checkpoint_is_the_threads_backends(tmp_path):
    doc(mpirun(2, "--steps", "300", "--steps-per-task", "50", "--checkpoint", str(tmp_path / "mpi.ck"), "--json"))
    meshnb.train(300, systems=2, steps_per_task=50, checkpoint=tmp_path / "threads.ck")
    a, b = ckpt_io.load(tmp_path / "mpi.ck"), ckpt_io.load(tmp_path / "threads.ck")
    assert (a.run, a.done, a.pages, a.traces) == (b.run, b.done, b.pages, b.traces)


def test_clear_errors():
    # Outside mpiexec, a cluster of more than one system.
    p = subprocess.run(
        [sys.executable, "-m", "meshnb", "train", "--backend", "mpi", "--systems", "2"],
        capture_output=True,
        text=True,
        timeout=RUN_S,
        env=_env(),
    )
    assert p.returncode == 2 and "mpiexec -n 2" in p.stderr, p.stderr
    # --systems that is not the job's size: one line, from rank 0 only.
    p = mpirun(2, "--systems", "3")
    assert p.returncode == 2 and p.stderr.count("meshnb: error:") == 1 and "2 ranks" in p.stderr, p.stderr
    # No mpi4py.
    code = (
        "import sys; sys.modules['mpi4py'] = None; from meshnb.cli import main; "
        "sys.exit(main(['train', '--backend', 'mpi']))"
    )
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=RUN_S, env=_env())
    assert p.returncode == 2 and "pip install 'meshnb[mpi]'" in p.stderr, p.stderr
