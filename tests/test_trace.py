"""The trace recorder: the digest of SPEC 11 whatever the records' sizes, hashed at once or on the
trace's own thread, resumable from a saved state, and its words kept on request."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

from meshnb.trace import ASYNC_BYTES, Trace

ROWS = ASYNC_BYTES // 20  # a record of this many rows or more is hashed on the trace's thread


def _rows(n: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 1 << 32, size=(n, 5), dtype=np.uint32)


@pytest.mark.parametrize("resumable", [False, True])
def test_the_digest_is_sha256_of_every_row_in_order_small_and_large_records(resumable):
    records = [_rows(n, i) for i, n in enumerate([3, ROWS + 7, 1, 2 * ROWS, 0, 64])]
    t = Trace(keep=True, resumable=resumable)
    for r in records:
        t.record(r)
    every = np.concatenate(records)
    assert t.hexdigest() == hashlib.sha256(every.astype("<u4").tobytes()).hexdigest()
    assert t.steps == every.shape[0]
    np.testing.assert_array_equal(t.words, every)


def test_a_saved_state_continues_the_same_hash():
    first, rest = _rows(ROWS + 3, 1), _rows(2 * ROWS + 1, 2)
    t = Trace(resumable=True)
    t.record(first)
    resumed = Trace(state=t.state())
    resumed.record(rest)
    assert resumed.hexdigest() == hashlib.sha256(np.concatenate([first, rest]).tobytes()).hexdigest()


def test_records_after_a_digest_go_on_hashing():
    a, b = _rows(2 * ROWS, 3), _rows(2 * ROWS, 4)
    t = Trace()
    t.record(a)
    assert t.hexdigest() == hashlib.sha256(a.tobytes()).hexdigest()
    t.record(b)  # the hashing thread ended with the digest; another starts
    assert t.hexdigest() == hashlib.sha256(np.concatenate([a, b]).tobytes()).hexdigest()


def test_what_a_trace_refuses():
    t = Trace()
    with pytest.raises(ValueError, match=r"\[steps, 5\]"):
        t.record(np.zeros((4, 4), dtype=np.uint32))
    with pytest.raises(ValueError, match="cannot be saved"):
        t.state()
    with pytest.raises(ValueError, match="keep=False"):
        _ = t.words


def test_an_error_while_hashing_reaches_the_caller():
    class Broken:
        def update(self, data):
            raise RuntimeError("disk on fire")

    t = Trace()
    t._sha = Broken()  # the hash behind the recorder fails on its thread
    t.record(_rows(2 * ROWS, 5))
    with pytest.raises(RuntimeError, match="disk on fire"):
        t.hexdigest()
