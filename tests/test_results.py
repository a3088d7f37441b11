"""What a run gives back: every field read from the page as SPEC 7 and 11 say (checked against the
independent reference), the JSON the command prints, and the errors that carry a result."""

from __future__ import annotations

import errno
import hashlib

import numpy as np
import pytest

import meshnb
from meshnb.results import RunInterrupted, RunResult, SaveFailed, SystemResult
from meshnb.testing import reference as ref


@pytest.fixture(scope="module")
def result() -> RunResult:
    return meshnb.train(300, step_base=1000)


def test_fields_are_read_from_the_page(result):
    s = result.systems[0]
    words = np.frombuffer(s.page, dtype="<u4")
    assert s.params.tobytes() == s.page[:16] and s.params_hex == [f"{w:08x}" for w in words[:4]]
    assert s.loss.tobytes() == s.page[2112:3136]
    # the last step run is 1299: its loss is at 1299 mod 256
    assert s.last_loss.tobytes() == s.page[2112 + 4 * (1299 % 256) : 2112 + 4 * (1299 % 256) + 4]
    assert s.digest == hashlib.sha256(s.page[0:16] + s.page[2112:3136]).hexdigest()


def test_the_run_is_the_references(result):
    start = bytearray(ref.init_page(1))
    start[28:32] = (1000).to_bytes(4, "little")
    pages, trace = ref.run([bytes(start)], 300, grouped=False)
    assert result.page == pages[0] and result.trace_digest == ref.trace_digest(trace)


def test_json_is_what_the_command_prints(result):
    doc = result.to_json()
    assert doc == {"steps": 300, "systems": [result.systems[0].to_json()]}
    resumed = RunResult(10, result.systems, 1.0, steps_before=20)
    assert resumed.to_json()["run_steps"] == 30 and resumed.run_steps == 30


def test_rates_without_time_are_infinite_not_an_error(result):
    assert RunResult(0, result.systems, 0.0).steps_per_second == float("inf")


def test_errors_carry_the_result(result):
    stop = RunInterrupted(result)
    assert stop.result is result and "300 steps" in str(stop)
    failed = SaveFailed(result, OSError(errno.ENOSPC, "No space left on device: 'x'"))
    assert failed.result is result and failed.errno == errno.ENOSPC and "No space" in str(failed)


def test_a_system_without_a_kept_trace_has_none():
    s = SystemResult(0, bytes(4096), {"inits": 0, "steps": 0, "timeouts": 0}, "")
    assert s.trace is None and s.params_hex == ["00000000"] * 4
