"""meshnb.sweeps.columns: the CSV rows made in bulk read back to the result's every bit."""

from __future__ import annotations

import csv
import io

import numpy as np
import pytest

from meshnb.sweeps import columns, sweep
from meshnb.sweeps.columns import float_text
from meshnb.sweeps.result import CSV_COLUMNS

EDGES = [
    0x00000000, 0x80000000, 0x00000001, 0x80000001, 0x007FFFFF, 0x00800000, 0x00800001, 0x7F7FFFFF, 0xFF7FFFFF,
    0x7F800000, 0xFF800000, 0x7FC00000, 0xFFC00001, 0x7F800001, 0x3F800000, 0x3A83126F, 0x38D1B717, 0x3DCCCCCD,
    0x4B800000, 0x5A0E1BCA, 0x5A0E1BC9, 0x501502F9, 0x4CBEBC20, 0x33D6BF95, 0x2B8CBCCC, 0x0DA24260,
]  # fmt: skip


def _reads_back(text: str, u: int) -> bool:
    f = np.float32(float(text))
    if np.isnan(np.uint32(u).view(np.float32)):
        return text == "nan"
    return int(f.view(np.uint32)) == u


@pytest.mark.parametrize("seed", [1, 2])
def test_every_float32_reads_back_to_its_bits(seed: int) -> None:
    """Random words of every exponent, the edges (subnormals, the largest, powers of ten near
    the positional/scientific switch): Python's reading (float64, then float32) gives the bits."""
    words = np.random.default_rng(seed).integers(0, 1 << 32, 20_000, dtype=np.uint64).astype(np.uint32)
    for u in [*EDGES, *words.tolist()]:
        text = float_text(u)
        assert _reads_back(text, u), (hex(u), text)
        assert float(text) == 0 or len(text.lstrip("-").replace(".", "").lstrip("0").split("e")[0].rstrip("0")) <= 9


def test_the_shortest_text_where_a_short_one_reads_back() -> None:
    assert [float_text(int(np.float32(x).view(np.uint32))) for x in (0.001, 0.1, 1.0, 1e-4, 1e16, 123456.7)] == [
        "0.001", "0.1", "1.0", "0.0001", "1e+16", "123456.7",
    ]  # fmt: skip
    assert [float_text(u) for u in (0, 0x80000000, 0x7FC00000, 0x7F800000, 0xFF800000)] == [
        "0.0", "-0.0", "nan", "inf", "-inf",
    ]  # fmt: skip


def test_csv_rows_are_the_results_columns() -> None:
    lrs = np.array([*EDGES, 0x3F000000, 0x3E800000], dtype=np.uint32)
    r = sweep(20, lrs=lrs, trace=True)
    rows = list(csv.reader(io.StringIO(r.csv_lines(names=['init "page", one']))))
    assert len(rows) == len(r) and all(len(row) == len(CSV_COLUMNS) for row in rows)
    for k, row in enumerate(rows):
        got = dict(zip(CSV_COLUMNS, row))
        assert int(got["system"]) == k and got["page"] == 'init "page", one'
        assert got["lr_word"] == f"{int(r.lr_words[k]):08x}" and int(got["step_base"]) == int(r.step_base[k])
        assert _reads_back(got["lr"], int(r.lrs.view(np.uint32)[k]))
        assert _reads_back(got["last_loss"], int(r.last_loss_words[k]))
        assert [got[c] for c in "abcd"] == r.params_hex[k] and int(got["steps"]) == 20
        assert got["digest"] == r.digests[k] and got["trace_digest"] == r.trace_digests[k]
    plain = r.csv_lines().splitlines()[3].split(",")
    assert plain[1] == "0" and plain[-1] == r.trace_digests[3]


def test_the_python_spelling_is_the_njit_one_to_the_byte() -> None:
    """f32_text (small outputs, Python) spells every float32 as _put_f32 (njit) does: random words
    of every exponent (a quarter of them past 10^22 either way, where the powers are squared out)
    and the edges."""
    words = np.random.default_rng(7).integers(0, 1 << 32, 100_000, dtype=np.uint64).astype(np.uint32)
    for u in [*EDGES, *words.tolist()]:
        assert columns.f32_text(u) == float_text(u), hex(u)


@pytest.mark.parametrize(("names", "trace"), [(None, False), ([b'"a,b"', b"p1", b"init"], True)])
def test_small_rows_in_python_are_the_bulk_rows(names: list[bytes] | None, trace: bool) -> None:
    n = columns.SMALL_ROWS + 5  # csv_rows formats these in njit
    rng = np.random.default_rng(3)
    word = lambda *shape: rng.integers(0, 1 << 32, shape, dtype=np.uint64).astype(np.uint32)
    edge = np.resize(np.array(EDGES, dtype=np.uint32), n)
    args = (
        12345, rng.integers(0, 3, n), names, word(n), edge, rng.integers(0, 1 << 63, n, dtype=np.uint64) * 2, 77,
        np.where(np.arange(n) % 2 == 0, word(n), edge[::-1]), word(n, 4), word(n, 8).view(np.uint8),
        word(n, 8).view(np.uint8) if trace else None,
    )  # fmt: skip
    bulk = columns.csv_rows(*args)
    assert columns._rows_py(*args) == bulk
    assert bulk.count(b"\n") == n
    small = columns.csv_rows(*args[:1], *(a[:9] if isinstance(a, np.ndarray) else a for a in args[1:]))  # Python
    assert small == b"".join(bulk.splitlines(keepends=True)[:9])
