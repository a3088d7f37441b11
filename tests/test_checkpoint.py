"""Checkpoints: the file format and its refusals, and whole runs stopped
(Ctrl-C, SIGKILL) and resumed to the digests of a run never interrupted."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

import meshnb
from meshnb import checkpoint as ck
from meshnb.sha256 import Sha256
from meshnb.testing import reference as ref
from meshnb.results import RunInterrupted

from meshnb.testing.pages import with_words
from .test_cluster import member_pids


def _checkpoint(tmp_path, steps=300, systems=2, **kw):
    path = tmp_path / "run.ckpt"
    r = meshnb.train(steps, systems=systems, backend="fused", checkpoint=path, **kw)
    return path, r


def test_a_finished_run_leaves_its_final_state(tmp_path):
    path, r = _checkpoint(tmp_path, set_lr={10: 0x3F400000})
    c = ck.load(path)
    assert c.done == 300 and c.run.systems == 2 and c.run.set_lr == ((10, 0x3F400000),)
    assert c.pages == tuple(s.page for s in r.systems)
    assert c.counters == tuple(s.counters for s in r.systems)
    assert [Sha256(t).hexdigest() for t in c.traces] == [s.trace_digest for s in r.systems]
    assert list(tmp_path.iterdir()) == [path]  # the temporary file was renamed
    # The documented layout: magic, version, header length, JSON header, pages, SHA-256.
    data = path.read_bytes()
    assert data[:8] == b"MESHNBCK" and int.from_bytes(data[8:12], "little") == 1
    hlen = int.from_bytes(data[12:16], "little")
    header = json.loads(data[16 : 16 + hlen])
    assert header["done"] == 300 and header["run"]["systems"] == 2
    assert data[16 + hlen : 16 + hlen + 4096] == r.systems[0].page
    assert data[-32:] == hashlib.sha256(data[:-32]).digest()
    # Resuming a finished run changes nothing.
    again = meshnb.train(resume=path)
    assert again.steps == 0 and [s.digest for s in again.systems] == [s.digest for s in r.systems]


@pytest.mark.parametrize("damage, message", [
    (lambda d: d[:-1], "corrupt or truncated"),
    (lambda d: d[: len(d) // 2], "corrupt or truncated"),
    (lambda d: d[:10], "not a meshnb checkpoint"),
    (lambda d: b"", "not a meshnb checkpoint"),
    (lambda d: d[:100] + bytes([d[100] ^ 1]) + d[101:], "corrupt or truncated"),
    (lambda d: b"NOTACKPT" + d[8:], "not a meshnb checkpoint"),
    (lambda d: d[:8] + (2).to_bytes(4, "little") + d[12:], "format version 2"),
])
def test_a_damaged_checkpoint_is_refused(tmp_path, damage, message):
    path, _ = _checkpoint(tmp_path)
    path.write_bytes(damage(path.read_bytes()))
    with pytest.raises(ck.CheckpointError, match=message):
        meshnb.train(resume=path)


def test_an_inconsistent_checkpoint_is_refused():
    page = ref.init_page(2, grouped=True)
    run = ck.RunSettings(2, 100, None, (), None, True, 0)
    state = Sha256().state()
    with pytest.raises(ck.CheckpointError, match="pending round"):
        ck.Checkpoint(run, 0, (page, with_words(page, 36, [1])), ({},) * 2, (state,) * 2)
    with pytest.raises(ck.CheckpointError, match="at step 0, not 5"):
        ck.Checkpoint(run, 5, (page, page), ({},) * 2, (state,) * 2)
    with pytest.raises(ck.CheckpointError, match="needs 2 pages"):
        ck.Checkpoint(run, 0, (page,), ({},), (state,))


@pytest.mark.parametrize("kwargs, message", [
    ({"systems": 3}, "systems = 2, not 3"),
    ({"steps": 301}, "steps = 300, not 301"),
    ({"steps_per_task": 32}, "steps_per_task = None, not 32"),
    ({"set_lr": {5: 0x3F000000}}, "set_lr"),
    ({"z": False}, "z = True, not False"),
])
def test_a_checkpoint_of_another_run_is_refused(tmp_path, kwargs, message):
    path, _ = _checkpoint(tmp_path)
    with pytest.raises(ck.CheckpointError, match=message):
        meshnb.train(resume=path, **kwargs)


def test_resume_refuses_a_start_page_and_kept_traces(tmp_path):
    path, _ = _checkpoint(tmp_path)
    with pytest.raises(ValueError, match="not from view_in"):
        meshnb.train(resume=path, view_in=ref.init_page(2, grouped=True))
    with pytest.raises(ValueError, match="keep_trace"):
        meshnb.train(resume=path, keep_trace=True)
    with pytest.raises(ck.CheckpointError, match="No such file"):
        meshnb.train(resume=path.with_name("missing"))


def test_ctrl_c_writes_a_checkpoint_that_another_backend_resumes(tmp_path, backend="processes"):
    path, steps = tmp_path / "run.ckpt", 3_000_000
    changes = {100_000: 0x3F400000, 2_000_000: 0x3E800000}
    timer = threading.Timer(1.5, lambda: os.kill(os.getpid(), signal.SIGINT))
    timer.start()
    with pytest.raises(RunInterrupted) as stop:
        meshnb.train(steps, systems=3, backend=backend, timeout_ms=200, checkpoint=path, checkpoint_every_s=0.2,
                     set_lr=changes)
    timer.cancel()
    done = stop.value.result.steps
    assert ck.load(path).done == done
    rest = meshnb.train(resume=path, backend="fused")
    whole = meshnb.train(steps, systems=3, backend="fused", set_lr=changes)
    assert rest.steps == steps - done
    for s, w in zip(rest.systems, whole.systems):
        assert s.page == w.page and s.trace_digest == w.trace_digest and s.counters == w.counters


def _cli(*argv: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "meshnb", "train", *argv], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


@pytest.mark.parametrize("backend", ["threads", "processes"])
def test_a_run_killed_with_sigkill_resumes_to_the_same_digests(tmp_path, backend):
    path, steps = tmp_path / "run.ckpt", 3_000_000
    p = _cli("--systems", "2", "--backend", backend, "--steps", str(steps), "--checkpoint", str(path),
             "--checkpoint-every", "0.2", "--json")
    try:
        members = member_pids(p.pid, 2) if backend == "processes" else []
        deadline = time.monotonic() + 60
        while not (path.exists() and ck.load(path).done > 0) and time.monotonic() < deadline:
            time.sleep(0.05)
        p.kill()
    finally:
        p.communicate(timeout=30)
    assert p.returncode == -signal.SIGKILL
    # The members notice that their coordinator is gone and exit (the tracker then unlinks the segment).
    deadline = time.monotonic() + 15
    while any(os.path.exists(f"/proc/{m}") for m in members) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(os.path.exists(f"/proc/{m}") and "Z" not in open(f"/proc/{m}/stat").read().split(") ")[1][:1]
                   for m in members)
    done = ck.load(path).done
    assert 0 < done < steps
    rest = _cli("--resume", str(path), "--backend", "fused", "--json")
    out, err = rest.communicate(timeout=120)
    assert rest.returncode == 0, err
    doc = json.loads(out)
    whole = meshnb.train(steps, systems=2, backend="fused")
    assert doc["steps"] == steps - done
    assert [s["digest"] for s in doc["systems"]] == [s.digest for s in whole.systems]
    assert [s["trace_digest"] for s in doc["systems"]] == [s.trace_digest for s in whole.systems]


def test_a_truncated_checkpoint_is_refused_by_the_cli(tmp_path):
    path, _ = _checkpoint(tmp_path)
    path.write_bytes(path.read_bytes()[:5000])
    p = _cli("--resume", str(path))
    out, err = p.communicate(timeout=60)
    assert p.returncode == 2 and out == ""
    assert err.count("\n") == 1 and "corrupt or truncated" in err and str(path) in err
