"""meshnb.sweeps.result: the result's conversions and writers, each the same table in linear time."""

from __future__ import annotations

import csv
import io
import json
import os
import sys
from pathlib import Path

import numpy as np
import pytest

from meshnb.files import WriteError
from meshnb.results import SystemColumns, shared_columns
from meshnb.sweeps import CsvWriter, JsonWriter, NpzWriter, SweepResult, init_page, stream, sweep
from meshnb.sweeps.result import CSV_COLUMNS, hex_digests, hex_words
from meshnb.view import View


def test_vectorised_formatting_is_the_per_value_formatting() -> None:
    w = np.array([0, 1, 0xDEADBEEF, 0x7FFFFFFF, 0xFFFFFFFF], dtype=np.uint32)
    assert hex_words(w) == [f"{int(x):08x}" for x in w]
    d = np.arange(64, dtype=np.uint8).reshape(2, 32)
    assert hex_digests(d) == [bytes(row).hex() for row in d]


def test_result_conversions() -> None:
    r = sweep(100, lrs=[0.5, 0.25, 0.01], loss_every=10, trace=True)
    doc = r.to_json()
    assert doc["mode"] == "z" and len(doc["systems"]) == 3 and len(doc["loss_history"][0]) == 10
    assert doc["systems"][1]["lr_word"] == "3e800000" and doc["systems"][1]["digest"] == r.digests[1]
    rec = doc["systems"][2]
    assert rec["lr"] == float(np.float32(0.01)) and rec["last_loss"] == float(r.last_loss[2])
    assert rec["params"] == [f"{int(x):08x}" for x in r.params_words[2]]
    json.dumps(doc)
    back = SweepResult.from_bytes(r.tobytes(), r.starts)
    assert back.digests == r.digests and back.trace_digests == r.trace_digests and back.to_json() == doc
    assert back.page(1) == r.page(1)
    both = SweepResult.concat([back, r])
    assert len(both) == 6 and both.digests[3:] == r.digests
    assert r.params.dtype == np.float32 and r.params.shape == (3, 4) and r.system_steps_per_second > 0
    try:
        import pandas  # noqa: F401
    except ImportError:
        return
    frame = r.to_frame()
    assert list(frame["digest"]) == r.digests and frame["a"].dtype == np.float32


def _write_all(writer, parts) -> None:
    for p in parts:
        writer.write(p)
    writer.close(parts[0].steps)


@pytest.fixture(scope="module")
def parts() -> list[SweepResult]:
    return list(stream(50, lrs=np.geomspace(1e-3, 1, 40).astype(np.float32), trace=True, loss_every=7, batch=16))


def test_writers_write_the_whole_table_part_by_part(tmp_path: Path, parts: list[SweepResult]) -> None:
    whole = SweepResult.concat(parts)
    _write_all(CsvWriter(str(tmp_path / "t.csv")), parts)
    rows = list(csv.DictReader(io.StringIO((tmp_path / "t.csv").read_text())))
    assert list(rows[0]) == list(CSV_COLUMNS) and len(rows) == 40
    assert [r["digest"] for r in rows] == whole.digests and [r["trace_digest"] for r in rows] == whole.trace_digests
    # the shortest text that reads back (float64, then float32) to the same bits
    assert [int(np.float32(float(r["last_loss"])).view(np.uint32)) for r in rows] == whole.last_loss_words.tolist()
    assert [r["a"] for r in rows] == [p[0] for p in whole.params_hex] and rows[39]["system"] == "39"
    _write_all(JsonWriter(str(tmp_path / "t.json"), True), parts)
    assert json.loads((tmp_path / "t.json").read_text()) == whole.to_json()
    _write_all(NpzWriter(str(tmp_path / "t.npz")), parts)
    with np.load(tmp_path / "t.npz", allow_pickle=False) as f:
        assert int(f["steps"]) == 50 and str(f["mode"]) == "z"
        assert np.array_equal(f["params_words"], whole.params_words)
        assert hex_digests(f["digest"]) == whole.digests and hex_digests(f["trace_digest"]) == whole.trace_digests
        assert np.array_equal(f["loss_history_words"], whole.loss_history.view(np.uint32))
        assert np.array_equal(f["loss_steps"], whole.loss_steps) and list(f["system"]) == list(range(40))


def test_an_aborted_write_leaves_the_old_file(tmp_path: Path, parts: list[SweepResult]) -> None:
    out = tmp_path / "t.csv"
    out.write_text("old\n")
    w = CsvWriter(str(out))
    w.write(parts[0])
    w.abort()
    assert out.read_text() == "old\n" and [p.name for p in tmp_path.iterdir()] == ["t.csv"]


@pytest.fixture(scope="module")
def big() -> SweepResult:
    """A part the CSV writer splits across threads (2 x columns.SMALL_ROWS systems or more)."""
    return sweep(2, lrs=np.geomspace(1e-3, 1, 4200).astype(np.float32), trace=True)


@pytest.mark.parametrize("threads", [2, 3])
def test_the_csv_writer_on_threads_writes_the_one_thread_file(tmp_path: Path, big: SweepResult, threads: int) -> None:
    """A large part's rows formatted on a pool of the writer's, small parts on the calling thread:
    the bytes of one thread, and the pool gone at close."""
    one, many = tmp_path / "one.csv", tmp_path / "many.csv"
    _write_all(CsvWriter(str(one), ["p,0"]), [big[:5], big[5:]])
    w = CsvWriter(str(many), ["p,0"], threads=threads)
    w.write(big[:5])
    assert w.pool is None  # a small part: no thread made
    w.write(big[5:])
    assert w.pool is not None
    w.close(2)
    assert w.pool is None and many.read_bytes() == one.read_bytes()
    assert many.read_bytes().count(b"\n") == len(big) + 1


def test_an_aborted_write_on_threads_stops_its_pool(tmp_path: Path, big: SweepResult) -> None:
    out = tmp_path / "t.csv"
    out.write_text("old\n")
    w = CsvWriter(str(out), threads=2)
    w.write(big)
    pool = w.pool
    w.abort()
    assert w.pool is None and pool is not None and pool._shutdown  # no thread left running
    assert out.read_text() == "old\n" and [p.name for p in tmp_path.iterdir()] == ["t.csv"]


@pytest.mark.parametrize("threads", [0, -1, 1.5, "2", True])
def test_the_csv_writer_refuses_a_bad_thread_count_before_it_opens(tmp_path: Path, threads) -> None:
    with pytest.raises(ValueError, match="threads must be an integer >= 1"):
        CsvWriter(str(tmp_path / "t.csv"), threads=threads)
    assert list(tmp_path.iterdir()) == []


def test_page_names_are_quoted_in_csv(tmp_path: Path, parts: list[SweepResult]) -> None:
    names = ['a,"b"']
    w = CsvWriter(str(tmp_path / "n.csv"), names)
    _write_all(w, parts[:1])
    rows = list(csv.DictReader(io.StringIO((tmp_path / "n.csv").read_text())))
    assert rows[0]["page"] == names[0]


def test_a_streamed_table_never_writes_through_what_sits_at_its_temporary_name(tmp_path):
    """The writers open their temporary as write_atomic does (files.open_temp): a symbolic link
    planted at the guessable ``.NAME.tmpPID`` is replaced, never written through."""
    import os

    from meshnb import sweep
    from meshnb.sweeps import CsvWriter

    victim = tmp_path / "victim"
    victim.write_text("keep me")
    out = tmp_path / "out.csv"
    (tmp_path / f".out.csv.tmp{os.getpid()}").symlink_to(victim)
    w = CsvWriter(str(out))
    w.write(sweep(2, lrs=[0.5]))
    w.close(2)
    assert victim.read_text() == "keep me" and out.read_text().count("\n") == 2


def test_a_sweeps_system_answers_what_a_clusters_member_answers() -> None:
    import meshnb

    r = sweep(300, lrs=[0.5, 0.25, 0.125], trace=True)
    run = meshnb.train(300, set_lr={0: 0.25}, keep_trace=False)
    member = run.systems[0]
    s = r[1]
    for name in ("params_hex", "digest", "trace_digest", "page"):
        assert getattr(s, name) == getattr(member, name), name
    assert np.array_equal(s.params, member.params) and s.last_loss == member.last_loss
    assert np.array_equal(s.loss, member.loss) and s.view.next_step == member.view.next_step
    assert s.system == 1 and s.lr_word == 0x3E800000 and s.step_base == 0 and s.page_index == 0
    assert [x.digest for x in r.systems] == r.digests and len(r.systems) == 3 and r[-1].system == 2


def test_slicing_a_result_keeps_its_systems() -> None:
    r = sweep(20, lrs=[0.5, 0.25, 0.125, 0.0625], loss_every=5, keep_pages=True)
    tail = r[1:3]
    assert len(tail) == 2 and tail.first == 1 and tail.digests == r.digests[1:3]
    assert tail.to_records() == r.to_records()[1:3] and tail.page(0) == r.page(1)
    assert np.array_equal(tail.loss_history, r.loss_history[1:3]) and np.array_equal(tail.loss_steps, r.loss_steps)
    with pytest.raises(ValueError, match="steps of 1"):
        r[::2]
    with pytest.raises(IndexError, match="system 4 is not in this result of 4"):
        r[4]


def test_systems_are_no_count_and_the_old_use_warns() -> None:
    r = sweep(5, lrs=[0.5, 0.25])
    with pytest.warns(DeprecationWarning, match="not their count: use len\\(result\\)"):
        assert (r.systems == 2) is False and (r.systems != 2) is True
    with pytest.warns(DeprecationWarning, match="len\\(result\\)"):
        assert int(r.systems) == 2 and list(range(r.systems)) == [0, 1]  # the old form, for this release
    systems = r.systems
    assert systems == systems and systems != r.systems and len({systems}) == 1  # a sequence: equal to itself


def _columns_bits(s: SystemColumns) -> dict[str, bytes]:
    """The shared columns but ``system`` as bytes (arrays and floats by their bits)."""
    out = {}
    for name, v in shared_columns(s).items():
        if name == "system":
            continue
        if isinstance(v, (np.ndarray, np.generic)):
            out[name] = v.dtype.str.encode() + v.tobytes()
        elif isinstance(v, View):
            out[name] = v.tobytes()
        else:
            out[name] = repr(v).encode()
    return out


# The same system run by train and by sweep: (train's keywords, sweep's keywords, the sweep's system)
SAME_SYSTEM = {
    "init page, an LR": ({"set_lr": {0: 0.25}}, {"lrs": [0.5, 0.25]}, 1),
    "a start page, a step base": (
        {"view_in": "run 100", "set_lr": {0: 0.125}, "step_base": 5000},
        {"view_in": ["init", "run 100"], "lrs": [0.5, 0.125], "step_base": 5000},
        3,
    ),
    "IEEE, the page's own LR, kept pages": (
        {"view_in": "run 100", "z": False},
        {"view_in": ["run 100"], "z": False, "keep_pages": True},
        0,
    ),
}


@pytest.mark.parametrize("case", SAME_SYSTEM)
def test_a_train_member_and_the_same_system_by_sweep_give_equal_columns(case: str) -> None:
    import meshnb

    pages = {"init": init_page(), "run 100": meshnb.train(100).page}
    kw_train, kw_sweep, k = SAME_SYSTEM[case]
    view_in = kw_train.get("view_in", "init")  # a sweep starts from a page: train too (inits 0 both)
    member = meshnb.train(300, **{**kw_train, "view_in": pages[view_in]}).systems[0]
    views = [pages[p] for p in kw_sweep.pop("view_in", ["init"])]
    s = sweep(300, view_in=views, trace=True, **kw_sweep).systems[k]
    assert _columns_bits(s) == _columns_bits(member)
    assert s.system == k and member.system == 0


def test_reprs_are_short_and_hold_no_page_bytes() -> None:
    import meshnb

    r = sweep(5, lrs=[0.5, 0.25], keep_pages=True, trace=True)
    assert len(repr(r)) < 300 and "keep_pages=True" in repr(r) and "systems 0..1" in repr(r)
    assert len(repr(r[0])) < 200 and len(repr(r.systems)) < 400
    run = meshnb.train(5, systems=2, backend="fused")
    assert len(repr(run)) < 300 and len(repr(run.systems)) < 600 and "\\x" not in repr(run.systems)


def test_to_frame_without_pandas_says_what_it_needs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pandas", None)  # an import of pandas raises ImportError
    with pytest.raises(ImportError, match="to_frame needs pandas, which meshnb does not install: pip install pandas"):
        sweep(8, lrs=[0.5]).to_frame()


def test_page_digests_are_the_same_on_both_paths() -> None:
    """digest_of hashes small batches with hashlib and large ones in njit on every core: same bits."""
    from meshnb.runspec import NJIT_DIGEST_ROWS as _NJIT_DIGEST_ROWS
    from meshnb.sweeps.result import digest_of

    rng = np.random.default_rng(11)
    words = rng.integers(0, 1 << 32, size=(_NJIT_DIGEST_ROWS + 5, 1024), dtype=np.uint64).astype(np.uint32)
    big = digest_of(words)
    small = np.concatenate([digest_of(words[i : i + 1000]) for i in range(0, words.shape[0], 1000)])
    assert big.shape == (words.shape[0], 32) and np.array_equal(big, small)


@pytest.mark.parametrize("told", [37, 40, 25, None])  # the rows; more (a Ctrl-C); fewer; unknown
def test_npz_written_in_place_reads_as_the_one_zipfile_writes(tmp_path, told) -> None:
    """An npz whose columns were written in place (the rows told) holds the arrays and CRCs of one
    zipped by zipfile, and is an archive zipfile checks whole (every member's CRC-32) and np.load
    reads; told more rows than come (a Ctrl-C) or fewer, it is read back and zipped by zipfile."""
    import shutil
    import subprocess
    import zipfile

    r = sweep(64, lrs=np.geomspace(1e-3, 0.5, 37).astype(np.float32), trace=True, loss_every=16)
    path = tmp_path / "placed.npz"
    w = NpzWriter(str(path), ["init"], rows=told)
    w.write(r[:20])
    assert bool(w.placed) == (told is not None and told >= 20)
    w.write(r[20:])
    w.close(64)
    base = tmp_path / "zipfile.npz"
    w = NpzWriter(str(base), ["init"])
    w.write(r)
    w.close(64)
    with zipfile.ZipFile(path) as z, zipfile.ZipFile(base) as zb:
        assert z.testzip() is None
        assert sorted((i.filename, i.CRC, i.file_size) for i in z.infolist()) == sorted(
            (i.filename, i.CRC, i.file_size) for i in zb.infolist()
        )
        assert all(i.compress_type == zipfile.ZIP_STORED for i in z.infolist())
    with np.load(path) as got, np.load(base) as want:
        assert sorted(got.files) == sorted(want.files)
        for k in want.files:
            assert got[k].dtype == want[k].dtype and np.array_equal(got[k], want[k]), k
    in_place = told == 37
    assert path.read_bytes().count(b"PK\x06\x06") == int(in_place)  # the hand path's ZIP64 end record
    if in_place and shutil.which("unzip"):  # another reader than Python's
        assert subprocess.run(["unzip", "-tq", str(path)], capture_output=True).returncode == 0
    assert not list(tmp_path.glob(".*tmp*"))  # no temporary left beside them


def test_the_npz_writers_crc32_is_zlibs() -> None:
    """The in-place npz's CRC-32 (ISA-L's where installed) is zlib's, chained part by part, on
    sizes about its vector widths; without isal the writer takes zlib's."""
    import subprocess
    import sys
    import zlib

    from meshnb.sweeps.result import _crc32

    data = np.random.default_rng(5).integers(0, 256, 1 << 20, dtype=np.uint8).tobytes()
    for cuts in ([0, 1 << 20], [0, 1, 15, 16, 17, 63, 64, 65, 255, 256, 4097, 1 << 20], list(range(0, 1 << 20, 99991))):
        crc = want = 0
        for lo, hi in zip(cuts, [*cuts[1:], 1 << 20]):
            crc, want = _crc32(data[lo:hi], crc), zlib.crc32(data[lo:hi], want)
        assert crc == want == zlib.crc32(data)
    code = "import sys, zlib; sys.modules['isal'] = None\nfrom meshnb.sweeps import result\n"
    code += "print(result._crc32 is zlib.crc32)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0 and out.stdout.split() == ["True"], out.stderr


def test_a_full_tmpdir_names_the_spool_and_tmpdir(tmp_path: Path, parts: list[SweepResult], monkeypatch) -> None:
    """A spool in a full TMPDIR said 'OSError: [Errno 28] No space left on device' (a class name,
    no path, TMPDIR not named). Simulated: the spool's file refuses every byte."""
    import errno
    import tempfile

    class Full:
        def write(self, data: bytes) -> int:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

        def close(self) -> None:
            pass

    monkeypatch.setattr(tempfile, "TemporaryFile", lambda *a, **k: Full())
    monkeypatch.setattr(tempfile, "gettempdir", lambda: "/full/tmp")
    for writer, spool in [
        (JsonWriter(str(tmp_path / "t.json"), True), "the loss history's spool"),
        (NpzWriter(str(tmp_path / "t.npz")), "the npz's spool"),
    ]:
        with pytest.raises(WriteError) as e:
            writer.write(parts[0])
        writer.abort()
        assert str(e.value) == f"{spool} in TMPDIR /full/tmp: No space left on device"
    assert sorted(os.listdir(tmp_path)) == []
