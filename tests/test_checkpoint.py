"""Checkpoints: the file format and its refusals, and whole runs stopped
(Ctrl-C, SIGKILL) and resumed to the digests of a run never interrupted."""

from __future__ import annotations

import copy
import hashlib
import json
import os
import signal
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import meshnb
from meshnb import checkpoint as ck
from meshnb.results import RunInterrupted
from meshnb.sha256 import Sha256
from meshnb.testing import reference as ref
from meshnb.testing.pages import with_words
from meshnb.view import FIELDS

from .test_cluster import member_pids
from .test_files import _special
from .util import assert_same_state, checkpoint_past_start, ctrl_c_when, meshnb_cli


def _checkpoint(tmp_path, steps=300, systems=2, **kw):
    path = tmp_path / "run.ckpt"
    r = meshnb.train(steps, systems=systems, backend="fused", checkpoint=path, **kw)
    return path, r


def test_a_finished_run_leaves_its_final_state(tmp_path):
    path, r = _checkpoint(tmp_path, set_lr={10: np.uint32(0x3F400000)})
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


@pytest.mark.parametrize(
    "damage, message",
    [
        (lambda d: d[:-1], "corrupt or truncated"),
        (lambda d: d[: len(d) // 2], "corrupt or truncated"),
        (lambda d: d[:10], "not a meshnb checkpoint"),
        (lambda d: b"", "not a meshnb checkpoint"),
        (lambda d: d[:100] + bytes([d[100] ^ 1]) + d[101:], "corrupt or truncated"),
        (lambda d: b"NOTACKPT" + d[8:], "not a meshnb checkpoint"),
        (lambda d: d[:8] + (2).to_bytes(4, "little") + d[12:], "format version 2"),
    ],
)
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


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"systems": 3}, "systems = 2, not 3"),
        ({"steps": 301}, "steps = 300, not 301"),
        ({"steps_per_task": 32}, "steps_per_task = None, not 32"),
        ({"set_lr": {5: 0.5}}, "set_lr"),
        ({"z": False}, "z = True, not False"),
    ],
)
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


def test_the_library_replaces_only_a_checkpoint_of_this_run(tmp_path):
    """``train(checkpoint=PATH)`` over an existing file that is not a checkpoint of this run (any
    file, another run's checkpoint) is an OptionError naming the keywords, one line, the file kept;
    ``overwrite_checkpoint=True`` replaces it; a checkpoint of this run, the ``resume`` file itself
    and a new name are written as before."""
    run = {"steps": 16, "systems": 2, "backend": "fused"}
    notes, other, mine = tmp_path / "notes.txt", tmp_path / "other.ck", tmp_path / "mine.ck"
    notes.write_text("my notes\n")
    meshnb.train(16, systems=3, backend="fused", checkpoint=other)
    meshnb.train(**run, checkpoint=mine)  # a new name
    for path, why in ((notes, "not a meshnb checkpoint"), (other, "it is a run with systems = 3, not 2")):
        before = path.read_bytes()
        with pytest.raises(meshnb.OptionError) as refused:
            meshnb.train(**run, checkpoint=path)
        assert str(refused.value) == (
            f"checkpoint {path}: an existing file that is not a checkpoint of this run ({why}); "
            "not replaced: give overwrite_checkpoint=True to replace it"
        )
        assert refused.value.for_cli().startswith(f"--checkpoint {path}: ")
        assert refused.value.for_cli().endswith("give --overwrite-checkpoint to replace it")
        assert path.read_bytes() == before
        meshnb.train(**run, checkpoint=path, overwrite_checkpoint=True)
        assert ck.load(path).done == 16
    meshnb.train(**run, checkpoint=mine)  # this run's own checkpoint
    meshnb.train(resume=mine, checkpoint=mine)  # the resume file itself
    with pytest.raises(TypeError, match="overwrite_checkpoint"):
        meshnb.train(**run, checkpoint=notes, overwrite_checkpoint="yes")  # type: ignore[arg-type]


def test_ctrl_c_writes_a_checkpoint_that_another_backend_resumes(tmp_path, backend="processes"):
    path, steps = tmp_path / "run.ckpt", 3_000_000
    changes = {100_000: np.uint32(0x3F400000), 2_000_000: np.uint32(0x3E800000)}
    with ctrl_c_when(checkpoint_past_start(path)), pytest.raises(RunInterrupted) as stop:
        meshnb.train(
            steps, systems=3, backend=backend, timeout_ms=200, checkpoint=path, checkpoint_every_s=0.2, set_lr=changes
        )
    done = stop.value.result.steps
    saved = ck.load(path)
    assert saved.done == done
    rest = meshnb.train(resume=path, backend="fused")
    whole = meshnb.train(steps, systems=3, backend="fused", set_lr=changes)
    assert rest.steps == steps - done
    at = FIELDS["ROUND"].offset
    for s, w, page in zip(rest.systems, whole.systems, saved.pages):
        assert_same_state(s, w, round_word=page[at : at + 4])  # a slow round's ROUND, kept by the fused rest


def _cli(*argv: str) -> subprocess.Popen:
    return meshnb_cli("train", *argv)


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["threads", "processes"])
def test_a_run_killed_with_sigkill_resumes_to_the_same_digests(tmp_path, backend):
    path, steps = tmp_path / "run.ckpt", 3_000_000
    p = _cli(
        "--systems",
        "2",
        "--backend",
        backend,
        "--steps",
        str(steps),
        "--checkpoint",
        str(path),
        "--checkpoint-every",
        "0.2",
        "--json",
    )
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
    assert not any(
        os.path.exists(f"/proc/{m}") and "Z" not in Path(f"/proc/{m}/stat").read_text().split(") ")[1][:1]
        for m in members
    )
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


# ---------------------------------------------------------------------------------------------
# A checkpoint is untrusted input, even when its checksum matches
# ---------------------------------------------------------------------------------------------

QUICK_S = 2.0  # a refusal takes no longer than this, whatever the file
SMALL_BYTES = 4 << 20  # nor more memory than this (the largest file load reads is ~1.3 MiB)


@pytest.fixture(scope="module")
def good(tmp_path_factory) -> tuple[dict, bytes]:
    """A real checkpoint's header and pages (300 steps of 2 systems, an LR change, a step base)."""
    path = tmp_path_factory.mktemp("good") / "run.ckpt"
    meshnb.train(
        300, systems=2, backend="fused", checkpoint=path, set_lr={10: np.uint32(0x3F400000)}, step_base=1 << 40
    )
    data = path.read_bytes()
    path.unlink()
    hlen = int.from_bytes(data[12:16], "little")
    return json.loads(data[16 : 16 + hlen]), data[16 + hlen : -32]


def _file(header: bytes | str, pages: bytes, hlen: int | None = None) -> bytes:
    """A checkpoint file around ``header``, with a valid checksum."""
    header = header.encode() if isinstance(header, str) else header
    body = b"MESHNBCK" + (1).to_bytes(4, "little") + (len(header) if hlen is None else hlen).to_bytes(4, "little")
    body += header + pages
    return body + hashlib.sha256(body).digest()


def _refusal(path: Path) -> str:
    """The one line with which ``ck.load`` refuses ``path``, within bounded time and memory."""
    tracemalloc.start()
    t = time.monotonic()
    try:
        with pytest.raises(ck.CheckpointError) as e:
            ck.load(path)
        seconds, peak = time.monotonic() - t, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert seconds < QUICK_S and peak < SMALL_BYTES, (seconds, peak)
    text = str(e.value)
    assert "\n" not in text and text.startswith(f"checkpoint {path}: "), text
    return text[len(f"checkpoint {path}: ") :]


def test_the_good_checkpoint_loads(tmp_path, good):
    header, pages = good
    path = tmp_path / "run.ckpt"
    path.write_bytes(_file(json.dumps(header), pages))
    c = ck.load(path)
    assert c.header() == header and c.done == 300 and c.run.step_base == c.run.first_step == 1 << 40


def _set(doc: dict, where: tuple, value) -> dict:
    doc = copy.deepcopy(doc)
    at = doc
    for k in where[:-1]:
        at = at[k]
    at[where[-1]] = value
    return doc


def _nested(depth: int) -> str:
    return "[" * depth + "]" * depth


M0 = ("members", 0)
HOSTILE = [  # (where, value or raw JSON text, the refusal after "checkpoint PATH: ")
    (("run", "steps"), "Infinity", "run.steps: must be an integer, not a number Infinity"),
    (("run", "steps"), "NaN", "run.steps: must be an integer, not a number NaN"),
    (("run", "steps"), "-Infinity", "run.steps: must be an integer, not a number -Infinity"),
    (("run", "steps"), "300.0", "run.steps: must be an integer, not a number 300.0"),
    (("run", "steps"), "1e400", "run.steps: must be an integer, not a number Infinity"),
    (("run", "steps"), "true", "run.steps: must be an integer, not a boolean true"),
    (("run", "steps"), '"300"', 'run.steps: must be an integer, not a string "300"'),
    (("run", "steps"), "9" * 5000, "run.steps: an integer of 5000 digits is outside 0..18446744073709551615"),
    (("run", "steps"), str(1 << 64), "run.steps: 18446744073709551616 is outside 0..18446744073709551615"),
    (
        ("run", "steps"),
        str(1 << 63),
        "run.steps: steps must be an integer from 0 to 9223372036854775807, got 9223372036854775808",
    ),
    ((*M0, "counters", "steps"), "-1", "members[0].counters.steps: -1 is outside 0..18446744073709551615"),
    (
        (*M0, "counters", "inits"),
        str(1 << 64),
        "members[0].counters.inits: 18446744073709551616 is outside 0..18446744073709551615",
    ),
    (
        (*M0, "trace", "length"),
        str(1 << 70),
        "members[0].trace.length: 1180591620717411303424 is outside 0..2305843009213693951",
    ),
    (
        (*M0, "trace", "length"),
        str(1 << 61),
        "members[0].trace.length: 2305843009213693952 is outside 0..2305843009213693951",
    ),
    ((*M0, "trace", "length"), "6004", "members[0].trace.length: 6004 bytes for 300 steps done, not 6000"),
    ((*M0, "trace", "tail"), '"00"', 'members[0].trace.tail: must be 48 bytes in lowercase hex, not a string "00"'),
    ((*M0, "trace", "h"), '["0"]', "members[0].trace.h: 1 words, not 8"),
    (("done",), _nested(100_000), "header: nested too deeply"),
    (("done",), "301", "done: 301 is outside 0..300"),
    (("run", "systems"), "0", "run.systems: 0 is outside 1..64"),
    (("run", "systems"), "65", "run.systems: 65 is outside 1..64"),
    (("run", "systems"), "1", "members: 2 of them for 1 systems"),
    (("run", "systems"), "3", "members: 2 of them for 3 systems"),
    (("run", "set_lr"), "[[20, 1], [10, 2]]", "run.set_lr[1][0]: step 10 after step 20: LR changes are sorted"),
    (("run", "set_lr"), "[[301, 1]]", "run.set_lr[0]: set_lr's step must be an integer from 0 to 300, got 301"),
    (
        ("run", "set_lr"),
        f"[[1, {1 << 32}]]",
        "run.set_lr[0]: set_lr[1]'s f32 word must be an integer from 0 to 4294967295, got 4294967296",
    ),
    (("run", "set_lr"), "[[1, 2, 3]]", "run.set_lr[0]: must be a [step, bits] pair, not a list"),
    (("run", "step_base"), "0", "run.first_step: 1099511627776, but a run with step_base 0 starts there"),
    (
        ("run", "first_step"),
        str((1 << 64) - 2),
        "run.steps: steps 18446744073709551614 .. 18446744073709551913 reach 2^64-1, whose round would wrap to 0",
    ),
    (("run", "z"), "1", "run.z: must be true or false, not an integer 1"),
    (
        ("run", "steps_per_task"),
        "0",
        "run.steps_per_task: steps_per_task must be an integer from 1 to 4294967295, got 0",
    ),
    (("members",), "{}", "members: must be a list, not an object"),
    (("run",), '{"systems": 2}', "run: 'steps' is missing"),
]


@pytest.mark.parametrize("where, value, why", HOSTILE, ids=[f"{'.'.join(map(str, w))}={v[:12]}" for w, v, _ in HOSTILE])
def test_a_hostile_header_is_refused_naming_the_field(tmp_path, good, where, value, why):
    header, pages = good
    marker = '"__HOSTILE__"'
    text = json.dumps(_set(header, where, "__HOSTILE__")).replace(marker, value)
    path = tmp_path / "run.ckpt"
    path.write_bytes(_file(text, pages))
    assert _refusal(path) == why


@pytest.mark.parametrize(
    "text, why",
    [
        (lambda h: h.replace('"done"', '"done": 0, "done"', 1), "header: the key 'done' twice in one object"),
        (lambda h: h.replace('"done"', '"extra": 0, "done"', 1), "header: unknown key 'extra'"),
        (lambda h: h[:-1], "header: not JSON (Expecting ',' delimiter at byte"),
        (lambda h: h.replace('"done"', '"d\\u00e9one"', 1), "header: 'done' is missing"),
    ],
)
def test_a_malformed_header_is_refused(tmp_path, good, text, why):
    header, pages = good
    path = tmp_path / "run.ckpt"
    path.write_bytes(_file(text(json.dumps(header)), pages))
    assert _refusal(path).startswith(why)
    path.write_bytes(_file(b"\xff" + json.dumps(header).encode(), pages))
    assert _refusal(path) == "header: not UTF-8 (byte 0)"


def test_a_huge_declared_header_is_refused_before_it_is_read(tmp_path, good):
    header, pages = good
    path = tmp_path / "run.ckpt"
    path.write_bytes(_file(json.dumps(header), pages, hlen=(1 << 32) - 1))
    assert _refusal(path) == "header: 4294967295 bytes, more than 1048576"
    # A header within the bound but more bytes than the file has: the size does not add up.
    path.write_bytes(_file(json.dumps(header), pages, hlen=1 << 20))
    assert _refusal(path).startswith("corrupt or truncated")


def test_no_more_is_read_than_the_header_declares(tmp_path, good):
    header, pages = good
    path = tmp_path / "run.ckpt"
    path.write_bytes(_file(json.dumps(header), pages))
    os.truncate(path, 1 << 36)  # 64 GiB, sparse: read whole, it would exhaust memory
    try:
        assert _refusal(path) == "corrupt (larger than its header declares)"
    finally:
        path.unlink()  # pytest keeps the last runs' directories: leave no 64 GiB file there


@pytest.mark.parametrize("kind", ["fifo", "dev-zero", "directory", "symlink-to-fifo"])
def test_anything_but_a_regular_file_is_refused_as_a_checkpoint(tmp_path, kind):
    path, named = _special(tmp_path, kind)
    assert _refusal(path) == f"{named}, not a regular file"


_FIELDS = st.sampled_from(
    [
        ("run",),
        ("run", "systems"),
        ("run", "steps"),
        ("run", "steps_per_task"),
        ("run", "set_lr"),
        ("run", "set_lr", 0),
        ("run", "set_lr", 0, 0),
        ("run", "set_lr", 0, 1),
        ("run", "step_base"),
        ("run", "z"),
        ("run", "first_step"),
        ("done",),
        ("members",),
        ("members", 0),
        ("members", 1),
        ("members", 1, "counters"),
        ("members", 1, "trace"),
        *[("members", 1, "counters", n) for n in ("inits", "steps", "timeouts")],
        *[("members", 1, "trace", n) for n in ("h", "length", "tail")],
        ("members", 1, "trace", "h", 7),
    ]
)
_EDGES = [
    -1,
    0,
    1,
    2,
    64,
    65,
    300,
    301,
    (1 << 32) - 1,
    1 << 32,
    (1 << 40),
    (1 << 61) - 1,
    1 << 61,
    (1 << 64) - 2,
    (1 << 64) - 1,
    1 << 64,
    1 << 70,
    -(1 << 64),
    True,
    False,
    None,
    0.0,
    1.0,
    300.0,
    1e300,
    float("inf"),
    float("-inf"),
    float("nan"),
]
_VALUES = st.recursive(
    st.one_of(
        st.sampled_from(_EDGES),
        st.integers(),
        st.floats(),
        st.booleans(),
        st.none(),
        st.text(max_size=80),
        st.sampled_from(["0" * 8, "ABCDEF01", "zz", "00" * 48, "00" * 47]),
    ),
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=3)),
    max_leaves=10,
)


@settings(max_examples=300, deadline=2000, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(where=_FIELDS, value=_VALUES, how=st.sampled_from(["set", "delete", "add"]))
def test_any_header_loads_as_written_or_is_refused_in_one_line(tmp_path, good, where, value, how):
    """Hostile values anywhere in a header whose checksum matches: a file loads only if it reads
    back exactly as written (nothing coerced: no bool for an int, no float truncated)."""
    header, pages = good
    doc = copy.deepcopy(header)
    at = doc
    for k in where[:-1]:
        at = at[k]
    if how == "set" or isinstance(at, list):
        at[where[-1]] = value
    elif how == "delete":
        del at[where[-1]]
    else:
        at[f"x{where[-1]}"] = value
    path = tmp_path / "hostile.ckpt"
    path.write_bytes(_file(json.dumps(doc), pages))
    try:
        c = ck.load(path)
    except ck.CheckpointError:
        _refusal(path)
        return
    # As JSON: in Python True == 1 == 1.0, and a coerced value must not pass for the one written.
    assert json.dumps(c.header()) == json.dumps(doc) and c.pages == (pages[:4096], pages[4096:])
    _assert_typed(c.header())


def _assert_typed(doc: dict) -> None:
    """Every value of a loaded header has its field's type: an int is never a bool (nor a float)."""

    def is_int(x) -> bool:
        return type(x) is int

    run = doc["run"]
    assert all(is_int(run[k]) for k in ("systems", "steps", "first_step")) and is_int(doc["done"])
    assert all(run[k] is None or is_int(run[k]) for k in ("steps_per_task", "step_base"))
    assert type(run["z"]) is bool and all(is_int(s) and is_int(b) for s, b in run["set_lr"])
    for m in doc["members"]:
        assert all(is_int(v) for v in m["counters"].values()) and is_int(m["trace"]["length"])


_INT_FIELDS = [
    ("run", "systems"),
    ("run", "steps"),
    ("run", "first_step"),
    ("done",),
    ("run", "set_lr", 0, 0),
    ("run", "set_lr", 0, 1),
    *[(*M0, "counters", n) for n in ("inits", "steps", "timeouts")],
    ("members", 1, "trace", "length"),
]


def _field_name(where: tuple) -> str:
    return "".join(f"[{k}]" if isinstance(k, int) else f".{k}" for k in where).lstrip(".")


@settings(max_examples=100, deadline=2000, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    where=st.sampled_from(_INT_FIELDS),
    value=st.one_of(st.booleans(), st.floats(), st.none(), st.text(max_size=8), st.lists(st.integers(), max_size=2)),
)
def test_an_integer_field_takes_nothing_but_an_integer(tmp_path, good, where, value):
    header, pages = good
    path = tmp_path / "hostile.ckpt"
    path.write_bytes(_file(json.dumps(_set(header, where, value)), pages))
    assert _refusal(path).startswith(f"{_field_name(where)}: must be an integer, not ")


@settings(max_examples=200, deadline=2000, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_any_flipped_bit_or_truncation_is_refused(tmp_path, good, data):
    header, pages = good
    whole = _file(json.dumps(header), pages)
    if data.draw(st.booleans()):
        at = data.draw(st.integers(0, len(whole) - 1))
        damaged = whole[:at] + bytes([whole[at] ^ (1 << data.draw(st.integers(0, 7)))]) + whole[at + 1 :]
    else:
        damaged = whole[: data.draw(st.integers(0, len(whole) - 1))]
    path = tmp_path / "damaged.ckpt"
    path.write_bytes(damaged)
    _refusal(path)


def test_save_refuses_to_write_what_load_would_refuse(tmp_path, good):
    header, pages = good
    path = tmp_path / "run.ckpt"
    path.write_bytes(_file(json.dumps(header), pages))
    c = ck.load(path)
    bad = ck.Checkpoint(c.run, c.done, c.pages, ({"inits": -1, "steps": 0, "timeouts": 0},) * 2, c.traces)
    with pytest.raises(ck.CheckpointError, match=rf"^checkpoint {path}: members\[0\]\.counters\.inits: -1 is outside"):
        ck.save(path, bad)
    assert ck.load(path) == c and sorted(p.name for p in tmp_path.iterdir()) == ["run.ckpt"]


@pytest.mark.parametrize("hostile", ["infinity", "length-2^61", "nested", "fifo", "dev-zero", "directory"])
def test_the_cli_refuses_a_hostile_checkpoint_with_exit_2(tmp_path, capsys, good, hostile):
    """In this process (``meshnb.cli.main``, what ``python -m meshnb`` runs); the next test runs the
    process."""
    from meshnb.cli import main

    header, pages = good
    path = tmp_path / "run.ckpt"
    if hostile == "infinity":
        path.write_bytes(_file(json.dumps(_set(header, ("run", "steps"), "X")).replace('"X"', "Infinity"), pages))
        field = "run.steps"
    elif hostile == "length-2^61":
        path.write_bytes(_file(json.dumps(_set(header, (*M0, "trace", "length"), 1 << 61)), pages))
        field = "members[0].trace.length"
    elif hostile == "nested":
        path.write_bytes(_file(json.dumps(_set(header, ("done",), "X")).replace('"X"', _nested(100_000)), pages))
        field = "header"
    else:
        path, field = _special(tmp_path, hostile)
    t = time.monotonic()
    code = main(["train", "--resume", str(path)])
    out, err = capsys.readouterr()
    assert time.monotonic() - t < 30  # refused up front, not after a run
    assert code == 2 and out == "", err
    assert err.count("\n") == 1 and err.startswith(f"meshnb: error: --resume {path}: {field}"), err


def test_the_process_refuses_a_hostile_checkpoint_with_exit_2(tmp_path, good):
    header, pages = good
    path = tmp_path / "run.ckpt"
    path.write_bytes(_file(json.dumps(_set(header, (*M0, "trace", "length"), 1 << 61)), pages))
    t = time.monotonic()
    p = _cli("--resume", str(path))
    out, err = p.communicate(timeout=60)
    assert time.monotonic() - t < 30  # the interpreter's start, not a run
    assert p.returncode == 2 and out == "", err
    want = f"meshnb: error: --resume {path}: members[0].trace.length: {1 << 61} is outside 0..{(1 << 61) - 1}\n"
    assert err == want, err


# --- more systems than a checkpoint holds (issue 16, item 3) -------------------------------------


def test_the_systems_cap_is_defined_once():
    from meshnb import options

    assert options.MAX_SYSTEMS is ck.MAX_SYSTEMS == 64


def test_a_checkpoint_of_more_systems_than_it_holds_is_refused_up_front(tmp_path):
    """Only the mpi backend runs more than 64 systems (one per rank); a checkpoint holds at most
    64, so such a run is refused before it starts, not at its first save."""
    from meshnb.options import OptionError, RunOptions

    path = tmp_path / "run.ckpt"
    with pytest.raises(OptionError, match=r"^checkpoint holds at most 64 systems, and this run has 65"):
        RunOptions(systems=65, backend="mpi", checkpoint=path)
    assert RunOptions(systems=65, backend="mpi").systems == 65  # without a checkpoint: as many as ranks
    assert RunOptions(systems=64, backend="mpi", checkpoint=path).systems == 64
    with pytest.raises(OptionError) as e:
        RunOptions(systems=100, backend="mpi", checkpoint=path)
    assert e.value.for_cli().startswith("--checkpoint holds at most 64 systems")
    assert not path.exists()


@pytest.mark.mpi
def test_an_mpi_job_of_more_ranks_than_a_checkpoint_holds_is_refused_before_any_collective(tmp_path):
    """``mpiexec -n 65 ... --checkpoint PATH`` (the job's size known only at run time): every rank
    refuses it at once.  65 real ranks are too many for a test machine, so the backend is given a
    communicator of 65 (rank 0's view) that fails the test if any collective is attempted."""
    pytest.importorskip("mpi4py")
    code = f"""
import sys
from meshnb.backends import mpi
from meshnb.options import OptionError, RunOptions


class Comm:
    def Get_rank(self): return 0
    def Get_size(self): return 65
    def __getattr__(self, name): raise AssertionError(f"a collective before the refusal: {{name}}")

try:
    mpi.run(RunOptions(backend="mpi", checkpoint={str(tmp_path / "c")!r}), comm=Comm())
except OptionError as e:
    print(e.for_cli())
"""
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith("--checkpoint holds at most 64 systems, and this run has 65"), p.stdout
    assert not (tmp_path / "c").exists()


def test_run_settings_hold_one_cluster_run():
    from meshnb.runspec import describe

    assert ck.RunSettings.of(describe(64, set_lr={0: 0.25}, group=2), 0).to_json()["set_lr"] == [[0, 1048576000]]
    with pytest.raises(ValueError, match=r"^a checkpoint holds one cluster's run, not 2 systems alone$"):
        ck.RunSettings.of(describe(64, lrs=[0.5, 0.25]), 0)
