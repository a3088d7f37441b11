"""meshnb.sweeps.job: a sweep's parts to one writer, in order, in one process (the MPI job's ranks
are tested through the command: tests/sweeps/test_cli.py, marked mpi)."""

from __future__ import annotations

import pytest

from meshnb.runspec import OptionError
from meshnb.sweeps import SweepOptions, SweepResult, sweep
from meshnb.sweeps import job as job_module
from meshnb.sweeps.job import run_to


class Collect:
    def __init__(self) -> None:
        self.parts: list[SweepResult] = []
        self.closed: int | None = None
        self.aborted = False

    def write(self, part: SweepResult) -> None:
        self.parts.append(part)

    def close(self, steps: int) -> None:
        self.closed = steps

    def abort(self) -> None:
        self.aborted = True


def test_run_to_writes_every_part_in_order_and_closes_with_the_steps() -> None:
    opts = SweepOptions(steps=30, lrs=[0.5, 0.25, 0.125], trace=True)
    out = Collect()
    assert run_to(opts, opts.describe(), lambda: out) == (30, False)
    whole = SweepResult.concat(out.parts)
    assert out.closed == 30 and not out.aborted
    assert whole.digests == sweep(30, lrs=[0.5, 0.25, 0.125]).digests and whole.trace_digests[0]


def test_run_to_runs_the_steps_of_its_run() -> None:
    """Issue 32: the steps are the run's (``systems.steps``), not a second copy in the options."""
    opts = SweepOptions(steps=64, lrs=[0.5, 0.25])
    out = Collect()
    assert run_to(opts, SweepOptions(steps=9, lrs=[0.5, 0.25]).describe(), lambda: out) == (9, False)
    assert out.closed == 9 and SweepResult.concat(out.parts).digests == sweep(9, lrs=[0.5, 0.25]).digests


def test_a_failing_writer_is_aborted() -> None:
    class Fails(Collect):
        def write(self, part: SweepResult) -> None:
            raise OSError("disk full")

    out = Fails()
    opts = SweepOptions(steps=3)
    with pytest.raises(OSError, match="disk full"):
        run_to(opts, opts.describe(), lambda: out)
    assert out.aborted and out.closed is None


def test_cuda_is_refused_in_an_mpi_job(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PMI_SIZE", "2")
    assert job_module.in_mpi_job()
    opts = SweepOptions(steps=3, backend="cuda")
    with pytest.raises(OptionError, match="one process"):
        run_to(opts, opts.describe(), Collect)


def test_writer_thread_raises_a_writes_failure_on_the_next_call_and_aborts_once() -> None:
    """A part is written on the writer's thread while the sweep goes on: its failure comes back on
    the sweep's thread by the next write or close, and abort waits for the write in flight."""
    import threading

    from meshnb.sweeps.job import WriterThread

    class Failing:
        def __init__(self) -> None:
            self.parts: list[str] = []
            self.aborted = 0
            self.threads: set[str] = set()

        def write(self, part: str) -> None:
            self.threads.add(threading.current_thread().name)
            if part == "bad":
                raise OSError(28, "No space left on device")
            self.parts.append(part)

        def close(self, steps: int) -> None:
            self.parts.append(f"closed {steps}")

        def abort(self) -> None:
            self.aborted += 1

    for then in ("write", "close"):
        inner = Failing()
        w = WriterThread(inner)  # type: ignore[arg-type]
        w.write("a")  # type: ignore[arg-type]
        w.write("bad")  # type: ignore[arg-type]
        with pytest.raises(OSError, match="No space left"):
            w.write("c") if then == "write" else w.close(3)  # type: ignore[arg-type,func-returns-value]
        w.abort()
        assert inner.parts == ["a"] and inner.aborted == 1 and inner.threads == {"meshnb-writer"}
    inner = Failing()
    w = WriterThread(inner)  # type: ignore[arg-type]
    w.write("a")  # type: ignore[arg-type]
    w.close(5)
    assert inner.parts == ["a", "closed 5"] and inner.aborted == 0
