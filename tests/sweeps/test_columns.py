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
        assert got["last_loss_word"] == f"{int(r.last_loss_words[k]):08x}"
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
    n = columns.SMALL_ROWS + 5  # csv_chunks formats these in njit
    rng = np.random.default_rng(3)
    word = lambda *shape: rng.integers(0, 1 << 32, shape, dtype=np.uint64).astype(np.uint32)
    edge = np.resize(np.array(EDGES, dtype=np.uint32), n)
    args = (
        12345, rng.integers(0, 3, n), names, word(n), edge, rng.integers(0, 1 << 63, n, dtype=np.uint64) * 2, 77,
        np.where(np.arange(n) % 2 == 0, word(n), edge[::-1]), word(n, 4), word(n, 8).view(np.uint8),
        word(n, 8).view(np.uint8) if trace else None,
    )  # fmt: skip
    bulk = b"".join(columns.csv_chunks(*args))
    assert columns._rows_py(*args) == bulk
    assert bulk.count(b"\n") == n
    small = b"".join(
        columns.csv_chunks(*args[:1], *(a[:9] if isinstance(a, np.ndarray) else a for a in args[1:]))
    )  # Python
    assert small == b"".join(bulk.splitlines(keepends=True)[:9])


def _broad_words() -> np.ndarray:
    """float32 words of every exponent (subnormals, powers of two, the mantissa's ends, random
    middles), decimals of 1 to 9 digits at every scale (where a short length just passes or just
    fails), both signs, NaNs, infinities and zeros."""
    rng = np.random.default_rng(11)
    ex = np.arange(256, dtype=np.uint32)[:, None] << np.uint32(23)
    mant = np.concatenate([[0, 1, 2, 3, 0x400000, 0x7FFFFE, 0x7FFFFF], rng.integers(0, 1 << 23, 25)]).astype(np.uint32)
    words = (ex | mant[None, :]).reshape(-1)
    digits = rng.integers(1, 10, 20_000)
    decimals = rng.integers(1, 10**9, 20_000) // 10 ** (9 - digits) * 10.0 ** rng.integers(-46, 39, 20_000)
    with np.errstate(over="ignore"):
        words = np.concatenate([words, decimals.astype(np.float32).view(np.uint32), np.array(EDGES, dtype=np.uint32)])
    return np.concatenate([words, words | np.uint32(0x80000000)])


def test_every_exponent_and_decimal_length_spelled_as_the_python_twin_and_read_back() -> None:
    """The njit formatter (its exponent from the bits and its filter of lengths that cannot pass)
    gives f32_text's bytes (log10 and every length's exact check), and each text reads back."""
    for u in _broad_words().tolist():
        text = float_text(u)
        assert text == columns.f32_text(u), hex(u)
        assert _reads_back(text, u), (hex(u), text)


def test_the_formatters_tables_are_numbas_own_powers() -> None:
    """_TENS and _POW10_REST (made in Python) hold what numba computes for 10^e and 10.0 ** n."""
    from numba import njit

    @njit
    def power(n):
        return 10.0**n

    assert [columns._scaled(1.0, e) for e in range(-46, 41)] == columns._TENS.tolist()
    assert [power(n) for n in range(32)] == columns._POW10_REST.tolist()


def _bulk_args(n: int, names: list[bytes] | None, trace: bool) -> tuple:
    rng = np.random.default_rng(n)
    word = lambda *shape: rng.integers(0, 1 << 32, shape, dtype=np.uint64).astype(np.uint32)
    edge = np.resize(np.array(EDGES, dtype=np.uint32), n)
    return (
        (1 << 40) - 3, rng.integers(0, 3, n), names, word(n), edge, rng.integers(0, 1 << 64, n, np.uint64), 1 << 33,
        np.where(np.arange(n) % 2 == 0, word(n), edge[::-1]), word(n, 4), word(n, 8).view(np.uint8),
        word(n, 8).view(np.uint8) if trace else None,
    )  # fmt: skip


@pytest.mark.parametrize(("threads", "names", "trace"), [(2, None, False), (3, [b'"a,b"', b"p1", b"init"], True)])
def test_a_part_on_threads_is_the_one_thread_bytes(threads: int, names: list[bytes] | None, trace: bool) -> None:
    """Slices of unequal length on a given pool or one made for the call, joined in order: the
    one-thread bytes and the Python twin's (integers of every length up to 20 digits)."""
    from concurrent.futures import ThreadPoolExecutor

    args = _bulk_args(threads * columns.SMALL_ROWS + 7, names, trace)
    whole = columns.csv_chunks(*args)
    assert len(whole) == 1 and bytes(whole[0]) == columns._rows_py(*args)
    split = columns.csv_chunks(*args, threads=threads)
    assert len(split) == threads and b"".join(split) == bytes(whole[0])
    with ThreadPoolExecutor(threads - 1) as pool:
        assert b"".join(columns.csv_chunks(*args, threads=threads, pool=pool)) == bytes(whole[0])
    fewer = (a[:-9] if isinstance(a, np.ndarray) else a for a in args[1:])  # a slice has SMALL_ROWS rows or more
    assert len(columns.csv_chunks(args[0], *fewer, threads=9)) == threads - 1


def test_a_nan_last_loss_keeps_its_word_in_csv_and_json() -> None:
    """An LR of +inf's word diverges to a NaN whose word (7fffffff in mode Z, ffc00000 in IEEE on
    x86) the text `nan` cannot tell from 7fc00000: the word column keeps it."""
    for z in (True, False):
        r = sweep(256, lrs=np.array([0x7F800000, 0x3F000000], dtype=np.uint32), z=z)
        word = int(r.last_loss_words[0])
        assert word & 0x7FFFFFFF > 0x7F800000 and word != 0x7FC00000  # a NaN text would lose
        row = next(csv.reader(io.StringIO(r.csv_lines())))
        got = dict(zip(CSV_COLUMNS, row))
        assert got["last_loss"] == "nan" and int(got["last_loss_word"], 16) == word
        assert int(r.to_json()["systems"][0]["last_loss_word"], 16) == word
