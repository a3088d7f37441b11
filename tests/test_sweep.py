"""meshnb.sweep (meshnb.sweeps, issue 12): every system of a sweep is bit-equal to its own ``meshnb.train``.

Each check runs the sweep, then every system alone through ``meshnb.train`` (same page, SET_LR
before step 0, step base, float mode) and compares the final page, digest and trace digest; a few
systems also against the numpy reference.  Steps are > 256 where the loss ring's wrap matters,
M is never a multiple of the 16-lane group, and the pages include every hard page.
"""

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
from meshnb import loops
from meshnb.sweeps import SweepResult, _State, init_page, plan, run, sweep
from meshnb.testing import reference as ref
from meshnb.testing.pages import hard_pages

ROOT = Path(__file__).resolve().parent.parent

# LR words: ordinary, tiny (updates that underflow), subnormal and NaN (SET_LR flushes them in
# mode Z), huge (divergence to inf and NaN), negative.
LR_WORDS = np.array(
    [
        0x3F000000,
        0x3E800000,
        0x3D4CCCCD,
        0x3A83126F,
        0x1E800000,
        0x0DA24260,
        0x00400000,
        0x80000001,
        0x7FC00001,
        0xFF800001,
        0x7E800000,
        0x40400000,
        0x3F7FFFFF,
        0xBF000000,
        0x00000000,
        0x3FC00000,
        0x3C23D70A,
    ],
    dtype=np.uint32,
)


def alone(page: bytes | None, steps: int, lr: int | None, base: int | None, z: bool):
    return meshnb.train(
        steps, view_in=page, set_lr=None if lr is None else {0: int(lr)}, step_base=base, z=z, keep_trace=True
    )


def check_against_train(
    r: SweepResult, steps: int, pages: list[bytes | None], lrs: np.ndarray | None, bases: list[int | None], z: bool
) -> None:
    assert r.steps == steps and len(r) == len(bases)
    for k in range(len(r)):
        p = pages[int(r.page_index[k])]
        lr = None if lrs is None else lrs[int(r.lr_index[k])]
        one = alone(p, steps, lr, bases[k], z)
        assert r.page(k) == one.page, f"system {k}: page differs"
        assert r.digests[k] == one.digest
        assert r.trace_digests[k] == one.trace_digest
        assert r.params_hex[k] == one.params_hex
        assert r.last_loss_words[k] == np.float32(one.last_loss).view(np.uint32)


@pytest.mark.parametrize("z", [True, False], ids=["z", "ieee"])
def test_lr_sweep_equals_train_per_system(z: bool) -> None:
    steps = 300  # the loss ring wraps
    r = sweep(steps, lrs=LR_WORDS, z=z, trace=True, threads=2)
    assert len(r) == LR_WORDS.size == 17  # one full group and one lane of the next
    check_against_train(r, steps, [None], LR_WORDS, [None] * len(r), z)
    # LR as given: SET_LR writes ftz_from_bits(word) in mode Z, the word itself in IEEE mode.
    w = r.lr_words
    assert w[6] == (0 if z else 0x00400000) and w[8] == (0x7FFFFFFF if z else 0x7FC00001)


@pytest.mark.parametrize("z", [True, False], ids=["z", "ieee"])
def test_hard_pages_times_lrs_with_step_bases(z: bool) -> None:
    pages = list(hard_pages().values())
    lrs = np.array([0x3F000000, 0x3A83126F], dtype=np.uint32)
    m = len(pages) * lrs.size
    # Step bases in every residue mod 8, across 2^32, and one near the end of the step range.
    bases = [(k * 37 + 3) % 1000 for k in range(m)]
    bases[1], bases[2], bases[-1] = (1 << 32) - 5, (1 << 40) + 7, (1 << 64) - 2 - 270
    steps = 264
    r = sweep(steps, pages=pages, lrs=lrs, step_bases=bases, z=z, trace=True, threads=2)
    assert list(r.page_index[:3]) == [0, 0, 1] and list(r.lr_index[:3]) == [0, 1, 0]  # page-major
    check_against_train(r, steps, pages, lrs, bases, z)
    assert [int(b) for b in r.step_base] == bases


@pytest.mark.parametrize("z", [True, False], ids=["z", "ieee"])
def test_against_the_numpy_reference(z: bool) -> None:
    pages = hard_pages()
    chosen = [pages["tiny-params-underflow"], pages["overflow-then-inf-minus-inf"], init_page()]
    lr = 0x3E000000
    steps = 40
    r = sweep(steps, pages=chosen, lrs=np.array([lr], dtype=np.uint32), z=z, trace=True)
    for k, page in enumerate(chosen):
        outs, tr = ref.run([page], steps, grouped=False, lr_changes={0: lr}, mode="z" if z else "ieee")
        assert r.page(k) == outs[0]
        assert r.trace_digests[k] == ref.trace_digest(tr)
        assert r.digests[k] == ref.digest(outs[0])


def test_the_per_op_flush_loop_equals_the_daz_loop() -> None:
    """The mode-Z loop for CPUs without DAZ (a flush after every op), run here on purpose."""
    pages = list(hard_pages().values())
    systems = plan(150, pages=pages, lrs=np.array([0x3F000000, 0x00400000, 0x3A83126F], dtype=np.uint32), step_bases=5)
    daz = run(systems, 150, trace=True, loss_every=7, mode=loops.Z_DAZ)
    per_op = run(systems, 150, trace=True, loss_every=7, mode=loops.Z)
    assert np.array_equal(daz.pages, per_op.pages)
    assert daz.trace_digests == per_op.trace_digests
    assert np.array_equal(daz.loss_history.view(np.uint32), per_op.loss_history.view(np.uint32))
    one = alone(pages[3], 150, 0x3A83126F, 5, True)
    assert per_op.page(3 * 3 + 2) == one.page and per_op.trace_digests[11] == one.trace_digest


@pytest.mark.parametrize("z", [True, False], ids=["z", "ieee"])
def test_threads_and_chunks_change_no_bits(z: bool) -> None:
    pages = [init_page(), hard_pages()["tiny-samples"], hard_pages()["subnormal-params"]]
    lrs = np.geomspace(1e-3, 1.2, 25).astype(np.float32)  # 75 systems: 5 groups, padded to 6
    systems = plan(200, pages=pages, lrs=lrs, z=z)
    kinds = _State(systems, 200, 0).arrays["tab_of"]
    assert (kinds < 0).any() and (kinds >= 0).any(), "groups of one shared table and groups of lane tables"
    results = [run(systems, 200, trace=True, loss_every=10, threads=t) for t in (1, 2, 3)]
    results.append(run(systems, 200, trace=True, loss_every=10, threads=3, chunk=33))  # chunks of 33 steps
    for other in results[1:]:
        assert np.array_equal(results[0].pages, other.pages)
        assert results[0].trace_digests == other.trace_digests
        assert np.array_equal(results[0].loss_history.view(np.uint32), other.loss_history.view(np.uint32))
    k = 2 * 25 + 24
    one = alone(pages[2], 200, np.float32(lrs[24]).view(np.uint32), None, z)
    assert results[0].page(k) == one.page and results[0].trace_digests[k] == one.trace_digest


def test_loss_history_is_every_nth_steps_loss() -> None:
    steps, every = 300, 3
    lrs = np.array([0.5, 0.05, 1.5], dtype=np.float32)
    r = sweep(steps, lrs=lrs, loss_every=every)
    assert r.loss_history.shape == (3, steps // every)
    assert list(r.loss_steps[:3]) == [2, 5, 8] and r.loss_steps[-1] == 299
    for k, lr in enumerate(lrs):
        bits = int(np.float32(lr).view(np.uint32))
        late, early = meshnb.train(steps, set_lr={0: bits}), meshnb.train(150, set_lr={0: bits})
        for j, t in enumerate(r.loss_steps):
            source = late if t >= steps - 256 else early
            assert r.loss_history[k, j].view(np.uint32) == source.loss[t % 256].view(np.uint32), (k, t)
    assert np.array_equal(r.loss_history[:, -1].view(np.uint32), r.last_loss.view(np.uint32))


def test_zero_steps_and_the_default_page() -> None:
    r = sweep(0, lrs=[0.25, 0.125])
    for k, lr in enumerate([0.25, 0.125]):
        one = meshnb.train(0, set_lr={0: int(np.float32(lr).view(np.uint32))})
        assert r.page(k) == one.page
    d = sweep(64)  # no lrs, no pages: one system from init, as meshnb.train(64)
    assert len(d) == 1 and d.page(0) == meshnb.train(64).page


def test_a_stopped_run_is_the_run_of_the_steps_done() -> None:
    systems = plan(1000, lrs=[0.5, 0.3, 0.2])
    calls = []
    r = run(systems, 1000, trace=True, chunk=100, should_stop=lambda: len(calls) >= 3, on_chunk=calls.append)
    assert r.steps == 300 and calls == [100, 200, 300]
    for k, lr in enumerate([0.5, 0.3, 0.2]):
        one = alone(None, 300, np.float32(lr).view(np.uint32), None, True)
        assert r.page(k) == one.page and r.trace_digests[k] == one.trace_digest


def test_result_conversions() -> None:
    r = sweep(100, lrs=[0.5, 0.25, 0.01], loss_every=10, trace=True)
    doc = r.to_json()
    assert doc["mode"] == "z" and len(doc["systems"]) == 3 and len(doc["loss_history"][0]) == 10
    assert doc["systems"][1]["lr_word"] == "3e800000" and doc["systems"][1]["digest"] == r.digests[1]
    json.dumps(doc)
    back = SweepResult.from_bytes(r.tobytes())
    assert back.digests == r.digests and back.trace_digests == r.trace_digests and np.array_equal(back.pages, r.pages)
    both = SweepResult.concat([back, r])
    assert len(both) == 6 and both.digests[3:] == r.digests
    assert r.params.dtype == np.float32 and r.params.shape == (3, 4) and r.system_steps_per_second > 0
    try:
        import pandas  # noqa: F401
    except ImportError:
        return
    frame = r.to_frame()
    assert list(frame["digest"]) == r.digests and frame["a"].dtype == np.float32


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"steps": -1}, "steps"),
        ({"steps": 1.5}, "steps"),
        ({"steps": 10, "lrs": []}, "lrs"),
        ({"steps": 10, "lrs": ["a"]}, "lrs"),
        ({"steps": 10, "pages": [b"x" * 100]}, "4096"),
        ({"steps": 10, "pages": []}, "empty"),
        ({"steps": 10, "lrs": [0.1, 0.2], "step_bases": [1, 2, 3]}, "one per system"),
        ({"steps": 10, "step_bases": -1}, "step base"),
        ({"steps": 10, "step_bases": (1 << 64) - 5}, "wrap"),
        ({"steps": 10, "loss_every": 0}, "loss_every"),
        ({"steps": 10, "threads": 0}, "threads"),
    ],
)
def test_bad_arguments(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        sweep(**kwargs)


def test_a_page_with_no_steps_per_task_is_refused() -> None:
    page = bytearray(init_page())
    page[20:24] = b"\0\0\0\0"
    with pytest.raises(ValueError, match="STEPS_PER_TASK"):
        sweep(10, pages=[bytes(page)])
    with pytest.raises(ValueError, match="STEPS_PER_TASK"):
        meshnb.train(10, view_in=bytes(page))  # as train refuses it


# --- the command line ----------------------------------------------------------------------------


def cli(*args: str, timeout: float = 120, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "meshnb", "sweep", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
        check=False,
        **kw,
    )


def test_cli_json_equals_the_library(capsys: pytest.CaptureFixture[str]) -> None:
    from meshnb.cli import main

    assert main(["sweep", "--lr", "0.001:1:5:log", "--steps", "300", "--trace", "--json", "--no-progress"]) == 0
    doc = json.loads(capsys.readouterr().out)
    lrs = np.geomspace(0.001, 1, 5).astype(np.float32)
    r = sweep(300, lrs=lrs, trace=True)
    assert doc["systems"] == r.to_records()
    one = alone(None, 300, np.float32(lrs[2]).view(np.uint32), None, True)
    assert doc["systems"][2]["digest"] == one.digest and doc["systems"][2]["trace_digest"] == one.trace_digest


def test_cli_pages_dir_ieee_and_csv(tmp_path: Path) -> None:
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


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--lr", "1:2", "--steps", "10"], "--lr"),
        (["--lr", "0:1:4:log", "--steps", "10"], "log"),
        (["--lr", "1:2:0", "--steps", "10"], "COUNT"),
        (["--steps", "-3"], "steps"),
        (["--pages", "/nonexistent/dir", "--steps", "3"], "pages"),
        (["--bogus"], "unrecognized"),
    ],
)
def test_cli_bad_arguments_one_line_exit_2(args: list[str], message: str) -> None:
    p = cli(*args)
    assert p.returncode == 2, p.stderr
    lines = p.stderr.strip().splitlines()
    assert lines[-1].startswith("meshnb: error:") and message in lines[-1] and "Traceback" not in p.stderr


def test_cli_ctrl_c_keeps_the_finished_chunks(tmp_path: Path) -> None:
    out = tmp_path / "partial.json"
    sweep(1, lrs=[0.5])  # the loop compiled into numba's cache: the command below starts stepping at once
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "meshnb",
            "sweep",
            "--lr",
            "0.01:1:64:log",
            "--steps",
            "100000000",
            "--json",
            "--out",
            str(out),
            "--no-progress",
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
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


@pytest.mark.skipif(not HAVE_MPI4PY, reason="mpi4py is not installed (pip install 'meshnb[mpi]')")
@pytest.mark.parametrize("ranks", [2, 3])
def test_mpi_ranks_split_the_systems_bit_equal(ranks: int) -> None:
    mpiexec = Path(sys.executable).with_name("mpiexec")
    env = {k: v for k, v in os.environ.items() if not k.startswith("MESHNB_MPI_TEST")}
    env.update({"MPIR_CVAR_CH4_PROGRESS_THROTTLE": "1", "MPIR_CVAR_CH4_PROGRESS_THROTTLE_NO_PROGRESS_COUNT": "1"})
    args = ["--lr", "0.0001:2:37:log", "--steps", "260", "--trace", "--json", "--loss-every", "20", "--threads", "1"]
    p = subprocess.run(
        [str(mpiexec), "-n", str(ranks), sys.executable, "-m", "meshnb", "sweep", *args],
        capture_output=True,
        text=True,
        timeout=180,
        env=env,
        cwd=ROOT,
        check=False,
    )
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert len(lines) == 1, "rank 0 prints the one document, the other ranks nothing"
    got = json.loads(lines[0])
    want = sweep(260, lrs=np.geomspace(0.0001, 2, 37).astype(np.float32), trace=True, loss_every=20).to_json()
    assert got == want
