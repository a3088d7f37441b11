"""meshnb.driver: the one loop of steps around an engine, its cadence and its frame; and the
host's pieces every backend ends with (host.Checkpoints, host.end_run)."""

from __future__ import annotations

import errno
import time

import pytest

import meshnb
from meshnb import checkpoint, host
from meshnb.driver import Cadence, Steps, chunks_of, drive, frame


def _recording() -> tuple[Steps, list[tuple[int, int]]]:
    calls: list[tuple[int, int]] = []
    return Steps(lambda done, n: calls.append((done, n))), calls


def test_drive_runs_chunks_to_the_end_with_its_hooks_at_every_boundary():
    engine, calls = _recording()
    boundaries: list[int] = []
    after: list[int] = []
    saved: list[int] = []
    done = drive(
        engine, 10, chunks_of(4), at_boundary=boundaries.append, after=after.append, save=saved.append,
        cadence=Cadence(0.0),
    )  # fmt: skip
    assert done == 10 and calls == [(0, 4), (4, 4), (8, 2)]
    assert boundaries == [0, 4, 8, 10] and after == [4, 8, 10]
    assert saved == [4, 8]  # never at the end: the caller saves it with the result


def test_drive_stops_at_a_boundary_and_saves_only_when_the_cadence_is_due():
    engine, calls = _recording()
    asked = iter([False, False, True])
    saved: list[int] = []
    done = drive(engine, 100, chunks_of(10), should_stop=lambda: next(asked), save=saved.append, cadence=Cadence())
    assert done == 20 and calls == [(0, 10), (10, 10)] and saved == []
    assert drive(engine, 0, chunks_of(10)) == 0  # no steps: no call
    assert len(calls) == 2


def test_cadence_is_due_after_its_seconds_and_again_after_a_restart():
    c = Cadence(0.05)
    assert not c.due()
    time.sleep(0.06)
    assert c.due()
    c.restart()
    assert not c.due()
    assert not Cadence().due()  # infinite: never


def test_the_frame_times_the_warm_up_apart_from_the_steps():
    with frame(10, False) as f:
        f.warm(Steps(lambda done, n: None, lambda: time.sleep(0.05)))
        f.start()
        time.sleep(0.02)
        seconds = f.stop()
    assert f.first_call >= 0.05 and 0.02 <= seconds < 0.05
    assert f.stop() == seconds  # the steps end once
    assert not f.requested()


def test_end_run_saves_then_says_whether_the_run_stopped(tmp_path):
    r = meshnb.train(64)
    saved: list[bool] = []
    assert host.end_run(r, 64, lambda: saved.append(True)) is r and saved == [True]
    with pytest.raises(meshnb.RunInterrupted) as stopped:
        host.end_run(r, 65)
    assert stopped.value.result is r

    def full() -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    with pytest.raises(meshnb.SaveFailed) as failed:  # before the stop: the result is kept either way
        host.end_run(r, 65, full)
    assert failed.value.result is r


def test_checkpoints_write_the_snapshot_at_the_runs_step(tmp_path):
    """The one assembly of a checkpoint: a fused run's, written by host.Checkpoints from its
    snapshot after 64 more steps than it resumed from, loads back as the run itself wrote it."""
    path = tmp_path / "ck"
    r = meshnb.train(128, systems=2, backend="fused", checkpoint=path)
    written = checkpoint.load(path)
    again = tmp_path / "again"
    snapshot = host.Snapshot(written.pages, written.counters, written.traces)
    host.Checkpoints(again, written.run, steps_before=64).save(64, snapshot)
    assert checkpoint.load(again) == written and written.done == r.steps == 128
    host.Checkpoints(None, written.run).save(64, snapshot)  # no file: nothing written, no error


def test_drive_stops_at_a_boundary_when_asked():
    ran = []
    assert drive(Steps(lambda done, n: ran.append((done, n))), 10, chunks_of(4), should_stop=lambda: len(ran) == 2) == 8
    assert ran == [(0, 4), (4, 4)]
    assert (Cadence(0.0).due(), Cadence().due()) == (True, False)
