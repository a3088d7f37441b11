"""What a run gives back: every field read from the page as SPEC 7 and 11 say (checked against the
independent reference), the JSON the command prints, and the errors that carry a result."""

from __future__ import annotations

import errno
import hashlib

import numpy as np
import pytest

import meshnb
from meshnb.results import (
    SHARED_COLUMNS,
    SYSTEM_COLUMNS,
    RunInterrupted,
    RunResult,
    SaveFailed,
    SystemColumns,
    SystemResult,
    shared_columns,
)
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


# --- the column model: a cluster's member and a sweep's system answer the same columns ----------

# Every kind of system's result a user gets, by the kind of run that made it: (kind, the system)
KINDS = {
    "train alone": ("cluster", lambda: meshnb.train(300, step_base=1000).systems[0]),
    "cluster member": ("cluster", lambda: meshnb.train(64, systems=2, backend="fused").systems[1]),
    "member with its trace": ("cluster", lambda: meshnb.train(64, keep_trace=True).systems[0]),
    "sweep system": ("sweep", lambda: meshnb.sweep(64, lrs=[0.5, 0.25]).systems[1]),
    "sweep system, pages and trace kept": (
        "sweep",
        lambda: meshnb.sweep(64, lrs=[0.5], trace=True, keep_pages=True, z=False).systems[0],
    ),
    "sweep system by r[k] of a slice": ("sweep", lambda: meshnb.sweep(64, lrs=[0.5, 0.25, 0.125])[1:][1]),
}


@pytest.mark.parametrize("name", KINDS)
def test_every_kind_answers_the_columns_of_the_table(name: str) -> None:
    kind, make = KINDS[name]
    s = make()
    assert isinstance(s, SystemColumns)
    for col in SYSTEM_COLUMNS:
        if col.only in (None, kind):
            value = getattr(s, col.name)
            assert col.conforms(value), f"{name}: {col.name} is {type(value).__name__} {value!r:.60}"
        else:  # a column of the other kind alone: not here, not even as something else
            assert not hasattr(s, col.name), f"{name} has {col.name}, a {col.only} column"
    assert s.to_json() == {
        "system": s.system, "params": s.params_hex, "digest": s.digest, "trace_digest": s.trace_digest,
        "counters": s.counters,
    }  # fmt: skip


def test_the_table_is_the_protocol() -> None:
    members = [n for n, v in vars(SystemColumns).items() if isinstance(v, property)]
    assert members == list(SHARED_COLUMNS)  # the same names in the same order
    assert callable(vars(SystemColumns)["to_json"])
    assert len({c.name for c in SYSTEM_COLUMNS}) == len(SYSTEM_COLUMNS)
    assert {c.name for c in SYSTEM_COLUMNS if c.only} == {"trace", "lr", "lr_word", "step_base", "page_index"}


@pytest.mark.parametrize(
    "value, conforms",
    [
        (np.zeros(4, np.float32), True),
        (np.zeros(4, np.float64), False),  # another dtype
        (np.zeros(5, np.float32), False),  # another shape
        (np.zeros((1, 4), np.float32), False),  # another rank
        ([0.0] * 4, False),  # not an array
        (None, False),  # not optional
    ],
)
def test_a_column_checks_type_dtype_and_shape(value: object, conforms: bool) -> None:
    params = next(c for c in SYSTEM_COLUMNS if c.name == "params")
    assert params.conforms(value) is conforms


@pytest.mark.parametrize(
    "name, value, conforms",
    [
        ("last_loss", np.float32(1.0), True),
        ("last_loss", 1.0, False),  # a Python float
        ("last_loss", np.float64(1.0), False),
        ("system", 1, True),
        ("system", True, False),  # a bool is no system number
        ("system", np.int64(1), False),
        ("counters", {"inits": 0, "steps": 1, "timeouts": 0}, True),
        ("counters", {"steps": 1, "inits": 0, "timeouts": 0}, False),  # SPEC 8's order
        ("counters", {"inits": 0, "steps": np.uint64(1), "timeouts": 0}, False),
        ("trace", None, True),  # optional: no keep_trace
        ("trace", np.zeros((3, 5), np.uint32), True),
        ("trace", np.zeros((3, 4), np.uint32), False),
    ],
)
def test_columns_refuse_near_misses(name: str, value: object, conforms: bool) -> None:
    col = next(c for c in SYSTEM_COLUMNS if c.name == name)
    assert col.conforms(value) is conforms


def test_shared_columns_are_the_tables(result) -> None:
    cols = shared_columns(result.systems[0])
    assert list(cols) == list(SHARED_COLUMNS) and cols["page"] == result.page and cols["counters"] == result.counters


def test_a_column_checks_type_dtype_and_shape_exactly():
    from meshnb.results import Column

    c = Column("params", np.ndarray, "the params", "float32", (4,))
    assert (c.conforms(np.zeros(4, np.float32)), c.conforms(np.zeros(4, np.float64)), c.conforms([0.0] * 4)) == (
        True, False, False,
    )  # fmt: skip
    assert isinstance(meshnb.train(64).systems[0], SystemColumns)
    assert isinstance(meshnb.sweep(64).systems[0], SystemColumns)


def test_a_clusters_own_error_names_no_system_and_a_runs_repr_holds_no_page(result):
    from meshnb.results import ClusterError

    assert str(ClusterError(None, "the job has 3 ranks, the run 4 systems")) == "the job has 3 ranks, the run 4 systems"
    assert result.digest == result.systems[0].digest and len(repr(result)) < 300
    two = meshnb.train(64, systems=2, backend="fused")
    assert sorted(two.systems[1].to_json()) == ["counters", "digest", "params", "system", "trace_digest"]
