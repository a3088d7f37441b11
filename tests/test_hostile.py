"""Hostile use, by class (issue 51): a scheduler's signal to the whole process group or to one of
its processes, paths through symlinked directories, outputs that alias inputs or what was there
before, arrays of LR words of any byte order and width, results that are partial.  Each test
covers the class of a defect a careless or hostile user found, not the one probe that found it:
property-based (hypothesis) where the cases are cheap, random moments after a reported phase
where they are runs.

The signal tests aim at phases the command reports (``MESHNB_TEST_PHASES``), never at fixed delays:
a phase is drawn at random, the signal goes as soon as the process reports it.
"""

from __future__ import annotations

import functools
import json
import os
import random
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from meshnb import files

from .util import meshnb_cli, reported_phases, run_meshnb, shm_left, shm_names, wait_for_phase

LONG = os.environ.get("MESHNB_SLOW", "") not in ("", "0")
TRIALS = 8 if LONG else 2

# --- signals the way schedulers send them -------------------------------------------------------

# Runs that last a second or more on a loaded 2-core machine; their stop is taken at a task boundary.
GROUP_RUNS = {
    "threads": ["--systems", "3", "--backend", "threads", "--steps", "20000"],
    "processes": ["--systems", "3", "--backend", "processes", "--steps", "200000"],
    "fused": ["--systems", "3", "--backend", "fused", "--steps", "20000000"],
}
WORDS = {"SIGTERM": "terminated", "SIGHUP": "hung up", "SIGINT": "interrupted"}
STOPS = {"SIGTERM": (signal.SIGTERM, 143), "SIGHUP": (signal.SIGHUP, 129), "SIGINT": (signal.SIGINT, 130)}


def _logged(log: Path, *argv: str) -> subprocess.Popen:
    """``meshnb ARGV`` in a session of its own (its process group is the test's to signal), its phases in ``log``."""
    return meshnb_cli(*argv, start_new_session=True, env={**os.environ, "MESHNB_TEST_PHASES": str(log)})


@functools.cache
def _clean(backend: str, where: str) -> tuple[list[str], list[tuple[str, str]]]:
    """A clean run of ``GROUP_RUNS[backend]``: the phases it reports (in order, ``done`` left out)
    and its systems' digests."""
    log = Path(where) / f"clean-{backend}.log"
    p = _logged(log, "train", *GROUP_RUNS[backend], "--json")
    out, err = p.communicate(timeout=600)
    assert p.returncode == 0, err
    seen = reported_phases(log)
    log.unlink()
    order = sorted((moments[0], name) for name, moments in seen.items() if name != "done")
    return [name for _, name in order], [(s["digest"], s["trace_digest"]) for s in json.loads(out)["systems"]]


def _resumed_digests(ckpt: Path) -> list[tuple[str, str]]:
    rest = run_meshnb("train", "--resume", str(ckpt), "--backend", "fused", "--json")
    assert rest.returncode == 0, rest.stderr
    return [(s["digest"], s["trace_digest"]) for s in json.loads(rest.stdout)["systems"]]


def _group(pid: int) -> list[int]:
    """Every process of the process group ``pid`` leads (the coordinator first)."""
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[2]) == pid:  # pgrp
                pids.append(int(entry))
    return sorted(pids, key=lambda p: p != pid)


@pytest.mark.slow
@pytest.mark.parametrize("stop", sorted(STOPS))
@pytest.mark.parametrize("backend", sorted(GROUP_RUNS))
def test_a_stop_signal_to_the_whole_group_ends_the_run_as_the_coordinators_would(tmp_path, backend, stop):
    """systemd, a CI job's cancel and ``kill -- -PGID`` signal every process of the group: the
    members, the forkserver, the resource tracker.  A SIGTERM or SIGHUP that reached the processes
    backend's forkserver ended the run 1 ("member process exited with code 255") with no page and
    no checkpoint.  At a phase drawn at random from those a clean run reports, the group is
    signalled: the run ends 128 + the signal with one line, its page and checkpoint (which resumes
    to the clean run's digests), nothing left in /dev/shm; or 0 and whole where it had ended first."""
    sig, code = STOPS[stop]
    phases, want = _clean(backend, str(tmp_path))
    rng = random.Random(f"group-{backend}-{stop}")
    stopped = 0
    for k in range(TRIALS):
        at = rng.choice(phases)
        log, page, ckpt = tmp_path / f"{k}.log", tmp_path / f"{k}.page", tmp_path / f"{k}.ckpt"
        before = shm_names()
        argv = ["train", *GROUP_RUNS[backend], "--view-out", str(page), "--checkpoint", str(ckpt), "--json"]
        p = _logged(log, *argv)
        try:
            wait_for_phase(log, at, p)
            os.killpg(p.pid, sig)
            out, err = p.communicate(timeout=300)
        finally:
            p.kill()
        assert "Traceback" not in err, (at, err)
        if p.returncode == 0:  # the run had ended first
            assert [(s["digest"], s["trace_digest"]) for s in json.loads(out)["systems"]] == want, at
            continue
        assert p.returncode == code and out == "" and err.count("\n") == 1, (at, p.returncode, err)
        if err == f"meshnb: {WORDS[stop]}\n":  # stopped before the run began (its imports): nothing written
            assert not page.exists() and not ckpt.exists(), at
            continue
        assert err.startswith("meshnb: interrupted after ") and "page written to" in err, (at, err)
        assert len(page.read_bytes()) == 4096
        assert _resumed_digests(ckpt) == want, at
        assert not (left := shm_left(before)), left
        stopped += 1
    assert stopped or not LONG, "no trial stopped the run"


@pytest.mark.slow
@pytest.mark.parametrize("stop", ["SIGTERM", "SIGHUP"])
def test_a_stop_signal_to_one_process_of_the_group(tmp_path, stop):
    """One process of a processes run signalled alone, drawn at random once the members run: the
    coordinator stops the run (128 + the signal, page and checkpoint written); a member, the
    forkserver or the resource tracker leaves the stop to the coordinator and the run goes on to
    its clean digests (a member's SIGTERM ended the run 1 before)."""
    sig, code = STOPS[stop]
    _, want = _clean("processes", str(tmp_path))
    rng = random.Random(f"one-{stop}")
    for k in range(TRIALS):
        log, page, ckpt = tmp_path / f"{k}.log", tmp_path / f"{k}.page", tmp_path / f"{k}.ckpt"
        argv = ["train", *GROUP_RUNS["processes"], "--view-out", str(page), "--checkpoint", str(ckpt), "--json"]
        p = _logged(log, *argv)
        try:
            wait_for_phase(log, "running", p)
            group = _group(p.pid)
            target = group[0] if k == 0 else rng.choice(group[1:])  # the coordinator, then others
            os.kill(target, sig)
            out, err = p.communicate(timeout=300)
        finally:
            p.kill()
        assert "Traceback" not in err, err
        if target != p.pid or p.returncode == 0:
            assert p.returncode == 0 and err == "", (target == p.pid, p.returncode, err)
            assert [(s["digest"], s["trace_digest"]) for s in json.loads(out)["systems"]] == want
            continue
        assert p.returncode == code and err.startswith("meshnb: interrupted after "), err
        assert _resumed_digests(ckpt) == want


# --- paths through symlinked directories ---------------------------------------------------------

_links = st.lists(st.tuples(st.booleans(), st.booleans()), min_size=1, max_size=4)


def _linked_dir(root: Path, links: list[tuple[bool, bool]]) -> tuple[Path, Path]:
    """A real directory and a name for it through ``len(links)`` symbolic links to directories,
    each absolute or relative, each to the real directory itself or to a subdirectory through it."""
    real = root / "real"
    real.mkdir()
    through, here = root, real
    for k, (absolute, nested) in enumerate(links):
        if nested:
            here = here / f"sub{k}"
            here.mkdir()
        link = root / f"link{k}"
        link.symlink_to(here if absolute else os.path.relpath(here, root))
        through = link
    return here, through


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(links=_links, existing=st.booleans(), final_link=st.booleans())
def test_a_file_through_symlinked_directories_is_written_as_through_its_real_path(
    tmp_path_factory, links, existing, final_link
):
    """``linkdir/res.csv`` was written in place (a kill left a truncated file where the complete one
    was) and a new checkpoint under a symlinked directory was refused as "a symbolic link".  A
    name through any number of directory links is written as through its real path: a temporary
    renamed over it, the old file whole until then (an aborted write leaves it), a checkpoint
    accepted.  Only a last component that is a link is a link: written through, the link kept."""
    root = tmp_path_factory.mktemp("links")
    real, through = _linked_dir(root, links)
    target = real / "res.csv"
    if existing:
        target.write_bytes(b"old, complete\n")
    name = through / "res.csv"
    if final_link:
        (real / "final").symlink_to("res.csv")
        name = through / "final"
    assert files.output_kind(name) == ("link" if final_link else "atomic")
    files.check_output(name, "--csv")
    half = files.Output(name, "--csv")
    half.write(b"half")
    half.abort()
    if not final_link:  # a link's file is written through: only an atomic write keeps the old one
        assert (target.read_bytes() if existing else None) == (b"old, complete\n" if existing else None)
        assert not target.exists() or existing
    files.write_atomic(name, b"new\n", "--csv")
    assert target.read_bytes() == b"new\n"
    assert sorted(p.name for p in real.iterdir() if p.name.startswith(".")) == []  # no temporary left
    if final_link:
        assert (real / "final").is_symlink()
        with pytest.raises(files.OutputError, match="a symbolic link"), files.hold(name, "checkpoint"):
            pass
    else:
        with files.hold(through / "run.ckpt", "checkpoint"):  # a new checkpoint here is accepted
            pass


# --- outputs that are inputs, or that were there before -------------------------------------------


def _sh(cmd: str, cwd: Path) -> subprocess.CompletedProcess:
    """``cmd`` in a shell (for its redirections), ``meshnb`` the command line of this tree."""
    env = {**os.environ, "M": f"{sys.executable} -m meshnb"}
    return subprocess.run(
        ["bash", "-o", "pipefail", "-c", cmd], cwd=cwd, env=env, capture_output=True, text=True, timeout=300
    )


@pytest.mark.parametrize(
    "shell",
    [
        "$M train --steps 16 --view-out /dev/stdout",
        "$M train --steps 16 --view-out /dev/fd/1 --json",
        "$M train --steps 16 --view-out /proc/self/fd/1",
        "$M train --steps 16 --view-out out.txt > out.txt",
        "$M train --steps 16 --view-out link --json > out.txt",  # link -> out.txt
        "$M train --steps 16 --view-out to-stdout",  # to-stdout -> /dev/stdout
    ],
)
def test_stdout_carries_one_thing(tmp_path, shell):
    """``train --view-out /dev/stdout`` interleaved the page with the summary (or the JSON).  A
    --view-out that is the very file stdout writes to, under any name, is refused (exit 2, one
    line); what stdout or the file held is left as it was."""
    (tmp_path / "link").symlink_to("out.txt")
    (tmp_path / "to-stdout").symlink_to("/dev/stdout")
    done = _sh(shell + " | cat > piped.txt", tmp_path) if ">" not in shell else _sh(shell, tmp_path)
    assert done.returncode == 2, (done.returncode, done.stderr)
    assert done.stderr.startswith("meshnb: error: --view-out ") and done.stderr.count("\n") == 1, done.stderr
    assert "stdout" in done.stderr
    for name in ("piped.txt", "out.txt"):
        assert not (tmp_path / name).exists() or (tmp_path / name).read_bytes() == b""


def test_a_page_to_stdout_alone_and_to_dev_null_pass(tmp_path):
    """The clean uses stay: stdout sent elsewhere, the page to /dev/stdout; /dev/null both."""
    done = _sh(
        "$M train --steps 16 --view-out /dev/stdout > /dev/null && $M train --steps 16 --view-out /dev/null", tmp_path
    )
    assert done.returncode == 0, done.stderr


CHECKPOINT_OVER = ["notes", "another-run", "same-run", "resume-itself", "resume-elsewhere-same", "overwrite"]


@pytest.mark.slow
@pytest.mark.parametrize("case", CHECKPOINT_OVER)
def test_a_new_checkpoint_replaces_only_what_it_may(tmp_path, case):
    """``--checkpoint`` over another run's checkpoint or over any file replaced it without a word.
    An existing file is replaced only when it is a checkpoint of this run (the same settings, or
    the --resume file itself) or with ``--overwrite-checkpoint``; else exit 2, one line, the file
    as it was."""
    base = ["train", "--systems", "2", "--steps", "64", "--backend", "fused", "--json"]
    first = run_meshnb(*base, "--checkpoint", str(tmp_path / "mine.ck"))
    assert first.returncode == 0, first.stderr
    target = tmp_path / "target"
    argv = [*base, "--checkpoint", str(target)]
    if case == "notes":
        target.write_text("my notes\n")
    elif case == "another-run":
        assert run_meshnb("train", "--systems", "3", "--steps", "64", "--checkpoint", str(target)).returncode == 0
    elif case == "same-run":
        target.write_bytes((tmp_path / "mine.ck").read_bytes())
    elif case == "resume-itself":
        target = tmp_path / "mine.ck"
        argv = ["train", "--resume", str(target), "--checkpoint", str(target), "--json"]
    elif case == "resume-elsewhere-same":
        target.write_bytes((tmp_path / "mine.ck").read_bytes())
        argv = ["train", "--resume", str(tmp_path / "mine.ck"), "--checkpoint", str(target), "--json"]
    else:
        target.write_text("my notes\n")
        argv.append("--overwrite-checkpoint")
    before = target.read_bytes()
    done = run_meshnb(*argv)
    if case in ("notes", "another-run"):
        assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
        assert done.stderr.startswith(
            f"meshnb: error: --checkpoint {target}: an existing file that is not a checkpoint"
        )
        assert "--overwrite-checkpoint" in done.stderr
        assert target.read_bytes() == before
    else:
        assert done.returncode == 0, done.stderr
        assert target.read_bytes()[:8] == b"MESHNBCK"


@pytest.fixture(scope="module")
def small_pack(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("pack")
    done = run_meshnb("pack", str(root / "pack"), "--quick")
    assert done.returncode == 0, done.stderr
    return root / "pack"


@pytest.mark.slow
@pytest.mark.parametrize("alias", ["pack", "inside", "dir-link", "file-link", "hard-link"])
def test_a_pack_is_never_judged_against_itself(small_pack, tmp_path, alias):
    """``meshnb check PACK --outputs PACK`` passed 38/38, and links into the pack were accepted as
    an executor's outputs.  An --outputs that is the pack, inside it, or whose outputs are the
    pack's files under other names is refused up front (exit 2, one line)."""
    outputs = tmp_path / "results"
    if alias == "pack":
        outputs = small_pack
    elif alias == "inside":
        outputs = small_pack / "default"
    elif alias == "dir-link":
        outputs.symlink_to(small_pack)
    else:
        (outputs / "default").mkdir(parents=True)
        src = small_pack / "default" / "out-0.page"
        dst = outputs / "default" / "out-0.page"
        if alias == "file-link":
            dst.symlink_to(src)
        else:
            try:
                os.link(src, dst)
            except OSError:
                pytest.skip("no hard links here")
    done = run_meshnb("check", str(small_pack), "--outputs", str(outputs))
    assert done.returncode == 2 and done.stderr.count("\n") == 1, (done.returncode, done.stderr, done.stdout[-300:])
    assert done.stderr.startswith(f"meshnb: error: --outputs {outputs}: "), done.stderr


# --- values with two readings: arrays of LR words of any byte order and width -------------------

_word_lists = st.lists(st.integers(0, 2**32 - 1), min_size=1, max_size=20)


@settings(max_examples=200, deadline=None)
@given(words=_word_lists, order=st.sampled_from("<>=|"))
def test_an_array_of_words_is_the_words_in_any_byte_order(words, order):
    """A big-endian uint32 array of LR words (``np.fromfile(f, '>u4')``, HDF5, FITS) was read as
    numbers, the native one as words: every uint32 array is the words, whatever its byte order."""
    from meshnb.runspec import lr_words

    dtype = np.dtype("u4").newbyteorder(order) if order != "|" else np.dtype("u4")
    got = lr_words(np.array(words, dtype=dtype))
    assert got.dtype == np.uint32 and got.dtype.isnative and got.tolist() == words


@settings(max_examples=200, deadline=None)
@given(
    values=st.lists(st.floats(allow_nan=False, allow_infinity=False, width=32), min_size=1, max_size=10),
    kind=st.sampled_from(["f2", "f4", "f8", "i2", "i4", "i8"]),
    order=st.sampled_from("<>="),
)
def test_an_array_of_numbers_is_the_numbers_in_any_byte_order_and_width(values, kind, order):
    """Floats and signed integers of any width and byte order are numbers, each rounded to float32
    once: the same words as the same values in a native array, or in a list."""
    from meshnb.runspec import OptionError, lr_words

    with np.errstate(over="ignore"):
        native = np.array(values).astype(kind) if kind[0] == "f" else np.array([int(v) % 30000 for v in values], kind)
        swapped = native.astype(native.dtype.newbyteorder(order))
    try:
        want = lr_words(native.tolist())
    except OptionError:  # beyond float32 (never here: the values are floats of width 32)
        with pytest.raises(OptionError):
            lr_words(swapped)
        return
    assert lr_words(swapped).tolist() == want.tolist() == lr_words(native).tolist()


@pytest.mark.parametrize("dtype", ["<u2", ">u2", "|u1", "<u8", ">u8", "?"])
def test_an_array_of_another_unsigned_width_is_refused_in_one_line(dtype):
    """Neither words (a word is 32 bits) nor numbers (unsigned integers were words once): refused."""
    from meshnb.runspec import lr_words

    with pytest.raises(TypeError) as e:
        lr_words(np.array([1, 0], dtype))
    assert "\n" not in str(e.value) and "lrs[0]" in str(e.value)


def test_a_sweep_of_big_endian_words_is_the_sweep_of_the_words():
    import meshnb

    words = np.array([0x3F000000, 0x3E800000, 0x7F800000], np.uint32)
    want = meshnb.sweep(16, lrs=words)
    got = meshnb.sweep(16, lrs=words.astype(">u4"))
    assert [s.digest for s in got.systems] == [s.digest for s in want.systems]


# --- results that look finished --------------------------------------------------------------------


def _partial_note(path: Path, fmt: str) -> list[int] | None:
    """What a sweep's output says of itself: ``[systems, of_systems, steps, of_steps]`` if partial."""
    if fmt == "csv":
        last = path.read_text().splitlines()[-1]
        if not last.startswith("# partial: "):
            return None
        words = last.split()
        return [int(words[2]), int(words[4]), int(words[6]), int(words[8])]
    if fmt == "json":
        doc = json.loads(path.read_text())
        note = doc.get("partial")
        return None if note is None else [note["systems"], note["of_systems"], note["steps"], note["of_steps"]]
    with np.load(path) as f:
        return f["partial"].tolist() if "partial" in f.files else None


def _rows(path: Path, fmt: str) -> int:
    if fmt == "csv":
        return sum(1 for line in path.read_text().splitlines()[1:] if not line.startswith("#"))
    if fmt == "json":
        return len(json.loads(path.read_text())["systems"])
    with np.load(path) as f:
        return len(f["system"])


@pytest.mark.slow
@pytest.mark.parametrize("existing", [False, True], ids=["new", "over-a-complete-file"])
@pytest.mark.parametrize("fmt", ["csv", "json", "npz"])
def test_a_stopped_sweep_says_it_is_partial_and_never_replaces_a_file(tmp_path, fmt, existing):
    """An interrupted sweep left 32768 of 40000 systems under the final name, nothing in the file
    saying so, over the complete table of an earlier run.  Stopped once its temporary holds rows:
    the file says how much it holds (CSV: a last ``# partial:`` line; JSON: ``"partial"``; npz:
    ``partial``), and where a file had the name, it is kept and the partial one is ``NAME.partial``."""
    out = tmp_path / f"out.{fmt}"
    if existing:
        out.write_bytes(b"the complete table of an earlier run\n")
    n, steps = 1 << 19, 300
    flag = ["--json", "--out", str(out)] if fmt == "json" else [f"--{fmt}", str(out)]
    p = meshnb_cli("sweep", "--lr", f"0.01:1:{n}:log", "--steps", str(steps), *flag, "--no-progress")
    tmp = tmp_path / f".out.{fmt}.tmp{p.pid}"
    try:
        while not (tmp.exists() and tmp.stat().st_size > 1000):  # rows written: a state the run reports
            assert p.poll() is None, p.communicate()
            time.sleep(0.005)  # polled: the signal goes once the rows are there, not after a delay
        p.send_signal(signal.SIGTERM)
        _, err = p.communicate(timeout=120)
    finally:
        p.kill()
    assert p.returncode in (143, 0) and "Traceback" not in err, err
    if p.returncode == 0:  # a fast machine finished first: whole, not partial
        assert _partial_note(out, fmt) is None and _rows(out, fmt) == n
        return
    written = tmp_path / f"out.{fmt}.partial" if existing else out
    if existing:
        assert out.read_bytes() == b"the complete table of an earlier run\n"
        assert (
            err == f"meshnb: interrupted (the finished systems were written to {written}, marked partial; {out} kept)\n"
        )
    else:
        assert err == "meshnb: interrupted (the finished systems were written)\n", err
    note = _partial_note(written, fmt)
    assert note is not None and note[0] == _rows(written, fmt) and note[1] == n and note[3] == steps, note
    assert note[0] < n or note[2] < steps
    assert sorted(q.name for q in tmp_path.iterdir()) == sorted({out.name, written.name})


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    hidden=st.lists(
        st.sampled_from([".b.page.swp", ".a.page.tmp4242", ".c.page.lock", ".#a.page", ".DS_Store", ".x"]),
        unique=True,
    )
)
def test_a_view_in_directory_skips_hidden_names(tmp_path_factory, hidden):
    """``sweep --view-in DIR`` ran dotfiles (an editor's backup, a writer's leftover temporary) as
    systems, or refused them: names starting with '.' are skipped, the others are the systems."""
    from meshnb.cli.sweep import _read_pages
    from meshnb.testing.reference import init_page

    d = tmp_path_factory.mktemp("pages")
    for name in ("a.page", "b.page"):
        (d / name).write_bytes(init_page())
    for name in hidden:
        (d / name).write_bytes(init_page() if name.endswith("tmp4242") else b"half")
    pages, names = _read_pages(str(d))
    assert names == ["a.page", "b.page"] and len(pages) == 2


@functools.cache
def _set_lines(op: str) -> list[bytes]:
    from meshnb.conformance.ops import gen_lines

    return gen_lines(op, 1, 3, 50).splitlines(keepends=True)


@settings(max_examples=40, deadline=None)
@given(
    op=st.sampled_from(["mul", "add", "from_u32"]),
    cut=st.sampled_from(["whole", "truncated", "dropped", "one", "extra"]),
    at=st.floats(0, 1),
)
def test_ops_verify_can_demand_the_whole_set_and_says_how_much_it_checked(op, cut, at):
    """``ops verify`` passed a file of one vector (a harness that crashed, or one that dropped the
    tininess probes).  With the set demanded (level, seed, count), a file short of it, with a line
    dropped or one too many, fails and says how many of the set's vectors it held in order."""
    from meshnb.conformance.ops import verify_chunks

    lines = list(_set_lines(op))
    k = int(at * (len(lines) - 1))
    if cut == "truncated":
        lines = lines[: max(1, k)]
    elif cut == "dropped":
        del lines[k]
    elif cut == "one":
        lines = lines[k : k + 1]
    elif cut == "extra":
        lines.append(lines[k])
    report = verify_chunks(op, [b"".join(lines)], whole=(1, 3, 50))
    assert report.wrong == 0 and report.set_size == len(_set_lines(op)) and report.checked == len(lines)
    assert report.passed == (cut == "whole") and report.complete == (cut == "whole")
    want = {"whole": len(lines), "truncated": len(lines), "dropped": k, "one": int(k == 0), "extra": len(lines) - 1}
    assert report.set_matched == want[cut]
    assert report.text().startswith("PASS" if cut == "whole" else "FAIL")
    assert f"{report.set_size}" in report.text().splitlines()[0]
    assert verify_chunks(op, [b"".join(lines)]).passed  # without the demand: every line right is a pass


def test_ops_verify_whole_on_the_command_line(tmp_path, capsys):
    """In this process (``meshnb.cli.main``, what ``python -m meshnb`` runs)."""
    from meshnb.cli import main
    from meshnb.conformance.ops import gen_lines

    (tmp_path / "one.txt").write_bytes(gen_lines("mul").splitlines(keepends=True)[0])
    code = main(["ops", "verify", "mul", str(tmp_path / "one.txt"), "--whole"])
    out, _ = capsys.readouterr()
    assert code == 1 and out.startswith("FAIL: mul: 1 checked, 0 wrong; 1 of the "), out
    code = main(["ops", "verify", "mul", str(tmp_path / "one.txt"), "--seed", "2"])
    _, err = capsys.readouterr()
    assert code == 2 and "--whole" in err and err.count("\n") == 1, err


@settings(max_examples=100, deadline=None)
@given(name=st.text(min_size=1, max_size=20), message=st.text(max_size=20), stderr=st.text(max_size=40))
def test_a_junit_report_is_valid_xml_for_any_name(name, message, stderr):
    """A JUnit report became invalid XML when a case's name held a control character (an
    executor's stderr does, with ANSI colours): every name, message and stderr gives valid XML
    1.0, the printable text as it was."""
    import xml.etree.ElementTree as ET

    from meshnb.conformance.suite import CaseResult, SuiteResult

    cases = [CaseResult(name, 1, "PASS"), CaseResult(name + "-e", 1, "ERROR", message=message, stderr_tail=stderr)]
    root = ET.fromstring(SuiteResult("pack", cases).junit())
    names = [tc.get("name") for tc in root.iter("testcase")]
    assert len(names) == 2
    if name.isprintable():
        assert names[0] == name


@pytest.mark.parametrize(
    ("argv", "flag"),
    [
        (["train", "--steps", str(2**63)], "--steps must be"),
        (["train", "--steps", "100", "--set-lr", "200:0.5"], "--set-lr's step must be"),
        (["train", "--systems", "2", "--steps", "64", "--set-lr", "65:0.5"], "--set-lr's step must be"),
        (["sweep", "--steps", str(2**63), "--lr", "0.5"], "--steps must be"),
        (["check", "--view-in", "PAGE", "--page", "PAGE", "--steps", "10", "--set-lr", "99:0.5"], "--set-lr's step"),
        (["check", "--view-in", "PAGE", "--page", "PAGE", "--steps", str(2**40)], "--steps must be"),
    ],
)
def test_an_error_names_the_flag_as_the_user_wrote_it(tmp_path, capsys, argv, flag):
    """Some errors named the library's parameter (``steps``, ``set_lr's step``) where the docs
    promise the flag: on a command line every range error names the flag.  In this process
    (``meshnb.cli.main``, what ``python -m meshnb`` runs; tests/test_faults.py runs the process)."""
    from meshnb.cli import main

    (tmp_path / "p.page").write_bytes(bytes(4096))
    code = main([str(tmp_path / "p.page") if a == "PAGE" else a for a in argv])
    _, err = capsys.readouterr()
    assert code == 2 and err.count("\n") == 1, err
    assert flag in err and " steps must" not in err and "set_lr" not in err, err


@pytest.mark.parametrize(
    ("argv", "refused"),
    [
        (["--timeout-ms", "5"], True),  # one system alone: no rounds
        (["--systems", "2", "--backend", "fused", "--timeout-ms", "5"], True),  # no exchange
        (["--systems", "2", "--backend", "threads", "--timeout-ms", "50"], False),
        (["--systems", "2", "--timeout-ms", "50"], False),
    ],
)
def test_timeout_ms_is_refused_where_it_means_nothing(capsys, argv, refused):
    """In this process (``meshnb.cli.main``, what ``python -m meshnb`` runs)."""
    from meshnb.cli import main

    code = main(["train", "--steps", "16", *argv, "--json"])
    _, err = capsys.readouterr()
    if refused:
        assert code == 2 and err.startswith("meshnb: error: --timeout-ms is a round's timeout"), err
    else:
        assert code == 0, err


COMMANDS = {
    "sweep": (["sweep", "--lr", "0.01:1:200000:log", "--steps", "300", "--csv", "OUT", "--no-progress"],
              ["held", "sweep-lrs"]),
    "pack": (["pack", "OUT", "--quick"], ["held"]),
    "check": (["check", "PACK", "--exec", f"{sys.executable} -c 'import time; time.sleep(0.2)'", "--junit", "OUT"],
              ["held"]),
}  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize("stop", ["SIGTERM", "SIGHUP"])
@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_command_stops_as_one_when_its_group_is_signalled(tmp_path, small_pack, command, stop):
    """A scheduler's signal to the whole group of sweep, pack and check (its executors' supervisors
    included): 128 + the signal and one line, no traceback, no temporary left beside the output,
    as when the command alone is signalled (or 0 where it had ended first)."""
    sig, code = STOPS[stop]
    argv, phases = COMMANDS[command]
    rng = random.Random(f"{command}-{stop}")
    for k in range(TRIALS):
        work = tmp_path / str(k)
        work.mkdir()
        out = work / ("out" if command == "pack" else "out.file")
        log = tmp_path / f"{k}.log"
        p = _logged(log, *[str(out) if a == "OUT" else str(small_pack) if a == "PACK" else a for a in argv])
        try:
            wait_for_phase(log, rng.choice(phases), p)
            os.killpg(p.pid, sig)
            _, err = p.communicate(timeout=300)
        finally:
            p.kill()
        assert "Traceback" not in err, err
        assert p.returncode in (code, 0, 1) and err.count("\n") <= 1, (p.returncode, err)  # 1: check's verdicts
        if p.returncode == code:
            assert err.startswith("meshnb: "), err
        assert [q.name for q in work.iterdir() if ".tmp" in q.name] == []


_REMOVER = """
import os, shutil, sys
shutil.rmtree(os.path.dirname(os.path.dirname(sys.argv[2].rstrip("/"))), ignore_errors=True)
"""


@pytest.mark.slow
def test_a_check_whose_executor_removes_its_directory_still_reports_every_case(tmp_path, small_pack):
    """An executor that deleted the check's work directory ended the check with one error line,
    no table and no JUnit for the cases judged.  Every case is judged (those that could not run
    are ERRORs saying why), the table and the JUnit report hold them all."""
    import xml.etree.ElementTree as ET

    (tmp_path / "remover.py").write_text(_REMOVER)
    junit = tmp_path / "report.xml"
    done = run_meshnb(
        "check", str(small_pack), "--exec", f"{sys.executable} {tmp_path / 'remover.py'}", "--cases", "cluster-*",
        "--junit", str(junit),
    )  # fmt: skip
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    cases = [tc.get("name") for tc in ET.parse(junit).getroot().iter("testcase")]
    assert len(cases) == 4 and done.stdout.splitlines()[-1] == "0 passed, 0 failed, 4 errors of 4 cases"
    assert "is gone (an executor removed it?)" in done.stdout


# --- a fresh user's arguments: empty paths, files of the wrong size -------------------------------


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["train", "--steps", "8", "--view-out", ""], "--view-out ''"),  # ran, wrote the page nowhere, exit 0
        (["sweep", "--steps", "8", "--lr", "0.5", "--view-in", ""], "--view-in ''"),  # read the directory '.'
    ],
)
def test_an_empty_path_is_refused_naming_the_flag(tmp_path, capsys, monkeypatch, argv, named):
    """An empty path is no file: refused in one line naming the flag as written, before any run, and
    nothing is read from or written to the working directory in its place."""
    from meshnb.cli import main

    monkeypatch.chdir(tmp_path)
    (tmp_path / "d").mkdir()  # '' read as '.' found this directory among the pages
    code = main(argv)
    out, err = capsys.readouterr()
    assert code == 2 and err.count("\n") == 1 and named in err and not out, (code, err)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d"]


@pytest.mark.parametrize(
    ("flag", "size", "said"),
    [("--page", 100, "a page is 4096 bytes, this has 100"), ("--trace", 20, "1 steps, the run has 64")],
)
def test_check_names_the_flag_of_a_file_of_the_wrong_size(tmp_path, capsys, flag, size, said):
    """A page or trace of the wrong size was named by the library's parameter (``got_page``,
    ``got_trace``); on the command line the error names the flag and the file as written."""
    import meshnb
    from meshnb.cli import main

    start, page, bad = tmp_path / "in.page", tmp_path / "out.page", tmp_path / "bad.bin"
    start.write_bytes(meshnb.train(0).page)
    page.write_bytes(bytes(4096))
    bad.write_bytes(bytes(size))
    argv = ["check", "--view-in", str(start), "--steps", "64", "--page", str(page)]
    argv += [flag, str(bad)] if flag == "--trace" else []
    if flag == "--page":
        argv[-1] = str(bad)
    code = main(argv)
    _, err = capsys.readouterr()
    assert code == 2 and err.count("\n") == 1, err
    assert f"{flag} {bad}: {said}" in err and "got_" not in err, err


def test_every_help_is_plain_text():
    """``meshnb sweep -h`` began with the module's reST (```` ``meshnb sweep`` ````); a newcomer reads
    every command's and subcommand's help as plain text: no reST literals or roles."""
    import argparse

    from meshnb.cli import build_parser

    def helps(p: argparse.ArgumentParser):
        yield p.prog, p.format_help()
        for a in p._actions:
            if isinstance(a, argparse._SubParsersAction):
                for sub in a.choices.values():
                    yield from helps(sub)

    seen = dict(helps(build_parser()))
    assert len(seen) >= 10, sorted(seen)
    bad = {prog: text for prog, text in seen.items() if "``" in text or ":class:" in text or ":func:" in text}
    assert not bad, bad


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["pack", ""], "DIR ''"),  # said ': not a directory name'
        (["pack", "", "--verify"], "DIR ''"),  # verified the working directory's manifest.json
        (["check", "CASE", "--page", ""], "--page ''"),  # '.: a directory'
        (["check", "CASE", "--page", "PAGE", "--trace", ""], "--trace ''"),
        (["check", "CASE", "--page", "PAGE", "--pages", ""], "--pages ''"),
        (["check", "--view-in", "", "--page", "PAGE"], "--view-in ''"),
        (["check", "", "--page", "PAGE"], "CASE_DIR ''"),
        (["check", "PACK", "--outputs", ""], "--outputs ''"),  # checked the working directory as outputs
        (["check", "PACK", "--exec", "true", "--experiments", ""], "--experiments ''"),
    ],
)
def test_an_empty_path_is_refused_by_the_conformance_commands(tmp_path, capsys, monkeypatch, argv, named):
    """``pack``'s and ``check``'s paths: an empty one is refused up front in one line naming it (exit
    2), never read as '.', the working directory."""
    from meshnb.cli import main

    monkeypatch.chdir(tmp_path)
    (tmp_path / "p.page").write_bytes(bytes(4096))
    fill = {"CASE": str(tmp_path / "case"), "PACK": str(tmp_path / "pack"), "PAGE": str(tmp_path / "p.page")}
    code = main([fill.get(a, a) for a in argv])
    out, err = capsys.readouterr()
    assert code == 2 and err.count("\n") == 1 and named in err and not out, (code, err)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p.page"]


@pytest.mark.parametrize("argv", [["--help"], ["train", "--help"], ["ops", "gen", "-h"]])
def test_help_to_a_full_disk_is_a_failure_said_in_one_line(argv):
    """``meshnb -h > /dev/full`` lost the help and exited 0; as every command's output, a help that
    cannot be written is exit 1 with one line on stderr."""
    with open("/dev/full", "w") as full:
        done = subprocess.run(
            [sys.executable, "-m", "meshnb", *argv], stdout=full, stderr=subprocess.PIPE, text=True, timeout=120
        )
    assert done.returncode == 1 and done.stderr == "meshnb: error: stdout: No space left on device\n", done


def test_a_manifest_that_lists_a_case_twice_is_refused(tmp_path, capsys):
    """A manifest (its checksums matching) that lists ``default`` twice ran the case twice into one
    report; it is refused up front, before any case is read, in one line naming the case (exit 2)."""
    import hashlib

    from meshnb.cli import main

    pack, outputs = tmp_path / "pack", tmp_path / "outputs"
    (pack / "default").mkdir(parents=True)
    (pack / "default" / "case.json").write_bytes(b"{}")
    files = {"default/case.json": hashlib.sha256(b"{}").hexdigest()}
    manifest = {"pack_version": 2, "cases": ["default", "default"], "files": files}
    (pack / "manifest.json").write_text(json.dumps(manifest))
    outputs.mkdir()
    code = main(["check", str(pack), "--outputs", str(outputs)])
    out, err = capsys.readouterr()
    assert code == 2 and err.count("\n") == 1 and "'default' is listed twice" in err and not out, (code, err, out)


@pytest.mark.parametrize("name", ["../../etc", "a/b", "..", ""])
def test_a_case_name_that_is_a_path_is_refused(small_pack, tmp_path, capsys, name):
    """A case.json (its checksum matching) whose name was ``../../etc`` made ``check --exec CMD
    --experiments DIR`` write its experiments' directories outside DIR (``DIR/../../etc-exp-0-1-1``):
    a case's name is a plain name, refused otherwise in one line (exit 2) as the case is read."""
    code, err = _check_changed_case(small_pack, tmp_path, capsys, {"name": name})
    assert code == 2 and err.count("\n") == 1 and "is not a case name" in err, (code, err)


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["--systems", str(2**40)], "--systems 1099511627776 needs about"),  # a MemoryError's traceback
        (["--systems", str(2**64)], "--systems 18446744073709551616 needs about"),  # 'Maximum allowed size'
        (["--steps", str(2**64)], "--steps must be"),
    ],
)
def test_gpu_check_refuses_what_cannot_run_before_the_device(capsys, argv, named):
    """``gpu-check --systems 2^40`` ran the pack and the IEEE check on the device for minutes, then
    ended in numpy's MemoryError (a traceback); the bounds are refused up front, on any machine."""
    from meshnb.cli import main

    code = main(["gpu-check", *argv])
    _, err = capsys.readouterr()
    assert code == 2 and err.count("\n") == 1 and named in err, (code, err)


@pytest.mark.parametrize(
    "change",
    [
        {"calls": [{"before_step": 0, "op": "zz", "arg": "0"}]},
        {"calls": [{"before_step": -5, "op": "00000099", "arg": "00000000"}]},
        {"calls": [{"before_step": 10**9, "op": "00000099", "arg": "00000000"}]},
        {"calls": "x"},
        {"start": "bogus"},
    ],
)
def test_hostile_calls_and_start_of_a_case_are_refused(small_pack, tmp_path, capsys, change):
    """``calls`` (the task calls an executor makes with unknown op codes) and ``start`` went to the
    executor unread: a case whose checksum matches but whose calls are not hex words at steps of the
    run, or whose start is neither ``init`` nor a page, is refused in one line (exit 2), as its
    other values are."""
    code, err = _check_changed_case(small_pack, tmp_path, capsys, change)
    assert code == 2 and err.count("\n") == 1 and "not a case description" in err, (code, err)
    assert next(iter(change)) in err, err


def test_a_view_out_fifo_with_no_reader_is_refused_before_the_run(tmp_path, capsys):
    """In this process (``meshnb.cli.main``): the run never starts, so no page is lost after it."""
    from meshnb import train
    from meshnb.cli import main

    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    code = main(["train", "--steps", "3", "--view-out", str(fifo)])
    out, err = capsys.readouterr()
    assert (code, out) == (2, "")  # no summary: the run never ran
    assert err == f"meshnb: error: --view-out {fifo}: a FIFO with no reader (a write would block)\n"
    r = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # with a reader, the page goes through it
    try:
        assert main(["train", "--steps", "3", "--view-out", str(fifo)]) == 0
        assert os.read(r, 1 << 16) == train(steps=3).page
    finally:
        os.close(r)


def _check_changed_case(small_pack: Path, tmp_path: Path, capsys, change: dict) -> tuple[int, str]:
    """``meshnb check`` (in this process) of the pack's ``default`` case with ``change`` made to its
    case.json and the manifest's checksum made to match: the exit code and stderr."""
    import hashlib
    import shutil

    from meshnb.cli import main

    pack = tmp_path / "pack"
    shutil.copytree(small_pack, pack)
    cj = pack / "default" / "case.json"
    cj.write_text(json.dumps({**json.loads(cj.read_text()), **change}))
    manifest = json.loads((pack / "manifest.json").read_text())
    manifest["files"]["default/case.json"] = hashlib.sha256(cj.read_bytes()).hexdigest()
    (pack / "manifest.json").write_text(json.dumps(manifest))
    shutil.copy(pack / "default" / "out-0.page", tmp_path / "out.page")
    code = main(["check", str(pack / "default"), "--page", str(tmp_path / "out.page")])
    return code, capsys.readouterr().err


def test_a_bad_round_wait_is_one_line_naming_the_variable_and_its_choices(monkeypatch, capsys):
    """``MESHNB_ROUND_WAIT=bogus``: refused before any member starts (the library and the command line)."""
    from meshnb import train
    from meshnb.cli import main

    monkeypatch.setenv("MESHNB_ROUND_WAIT", "bogus")
    choices = "'futex', 'yield', 'futex-spin-yields', 'futex-fixed', 'futex-no-wake-spin'"
    line = f"MESHNB_ROUND_WAIT='bogus': expected one of {choices}"
    with pytest.raises(ValueError) as e:
        train(3, systems=2, backend="threads")
    assert str(e.value) == line
    assert main(["train", "--steps", "3", "--systems", "2", "--backend", "processes"]) == 2
    assert capsys.readouterr() == ("", f"meshnb: error: {line}\n")


def test_junk_in_meshnb_pin_members_is_one_line_naming_the_variable(monkeypatch, capsys):
    """MESHNB_PIN_MEMBERS takes 0 or 1: anything else is refused in one line (exit 2), not read as the default."""
    from meshnb.cli import main

    monkeypatch.setenv("MESHNB_PIN_MEMBERS", "bogus")
    for backend in ("threads", "processes"):
        code = main(["train", "--steps", "3", "--systems", "2", "--backend", backend])
        out, err = capsys.readouterr()
        assert (code, out) == (2, "")
        assert err == (
            "meshnb: error: MESHNB_PIN_MEMBERS='bogus': expected '1' (a CPU for each member, the default) "
            "or '0' (the scheduler places them)\n"
        )
    monkeypatch.setenv("MESHNB_PIN_MEMBERS", "1")
    assert main(["train", "--steps", "3", "--systems", "2", "--backend", "threads"]) == 0


def _step_base_refusal(call: str) -> str:
    """The TypeError's message of one entry point given a step base that is no integer."""
    import meshnb
    from meshnb.conformance.check import setup_from_run
    from meshnb.runspec import Plan, init_page

    calls = {
        "train": lambda: meshnb.train(1, step_base=[0, 5]),
        "train-str": lambda: meshnb.train(1, step_base="5"),
        "plan": lambda: Plan(1, step_base=1.0),
        "check": lambda: setup_from_run(init_page(), 1, step_base=[0, 5]),  # type: ignore[arg-type]
        "sweep": lambda: meshnb.sweep(1, step_base="5"),
        "sweep-each": lambda: meshnb.sweep(1, lrs=[0.5, 0.25], step_base=[0, "5"]),
    }
    with pytest.raises(TypeError) as e:
        calls[call]()
    return str(e.value)


@pytest.mark.parametrize("call", ["train", "train-str", "plan", "check", "sweep", "sweep-each"])
def test_step_base_refusal_offers_what_its_entry_point_takes(call: str) -> None:
    """A step base that is no integer: each entry point's message offers one per system only where
    it takes one per system (sweep), never where it takes one base (train, a plan, a check's run)."""
    said = _step_base_refusal(call)
    assert said.startswith("step_base must be an integer")
    assert ("one integer per system" in said) == call.startswith("sweep"), said


def test_checkpoint_refusals_name_the_argument_as_written(tmp_path, capsys):
    """A refused ``--resume PATH`` said ``checkpoint PATH: ...``: the command line names the flag
    the user wrote (``--resume``), the library the keyword (``resume``), the same words after it."""
    from meshnb import CheckpointError, train
    from meshnb.cli import main

    junk = tmp_path / "junk.ck"
    junk.write_bytes(b"x" * 100)
    ck = tmp_path / "run.ck"
    assert main(["train", "--systems", "2", "--steps", "20", "--checkpoint", str(ck)]) == 0
    capsys.readouterr()
    for argv, said in [
        (["--resume", str(tmp_path / "nope")], f"--resume {tmp_path / 'nope'}: No such file or directory"),
        (["--resume", str(junk)], f"--resume {junk}: not a meshnb checkpoint"),
        (["--resume", str(ck), "--steps", "10"], f"--resume {ck}: it is a run with steps = 20, not 10"),
        (["--resume", str(ck), "--systems", "3"], f"--resume {ck}: it is a run with systems = 2, not 3"),
        (["--systems", "2", "--steps", "30", "--checkpoint", str(junk)], f"--checkpoint {junk}: an existing file"),
    ]:
        assert main(["train", *argv]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"meshnb: error: {said}") and err.count("\n") == 1, err
    with pytest.raises(CheckpointError, match=f"^resume {junk}: not a meshnb checkpoint$"):
        train(resume=junk)
    with pytest.raises(CheckpointError, match=f"^resume {ck}: it is a run with steps = 20, not 10$"):
        train(10, resume=ck)


def test_check_outputs_refuses_a_manifest_entry_outside_the_pack(small_pack, tmp_path, capsys):
    """A manifest entry ``../x`` (the rest of the pack intact) is refused by ``pack --verify``; ``check
    --outputs`` read the pack past it and passed: both refuse it in one line, in the same words (exit 2)."""
    import shutil

    from meshnb.cli import main

    pack, outputs = tmp_path / "pack", tmp_path / "outputs"
    shutil.copytree(small_pack, pack)
    manifest = json.loads((pack / "manifest.json").read_text())
    manifest["files"]["../x"] = "0" * 64
    (pack / "manifest.json").write_text(json.dumps(manifest))
    (outputs / "default").mkdir(parents=True)
    shutil.copy(pack / "default" / "out-0.page", outputs / "default")
    said = []
    check = ["check", str(pack), "--outputs", str(outputs), "--cases", "default"]
    for argv in (["pack", str(pack), "--verify"], check):
        code = main(argv)
        out, err = capsys.readouterr()
        assert code == 2 and err.count("\n") == 1 and not out, (argv, code, err, out)
        said.append(err)
    assert said[0] == said[1] == "meshnb: error: manifest names a path outside the pack: '../x'\n", said


_FULL_CHECKPOINT = """
import json, subprocess, sys
d = sys.argv[1]
subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4k", "tmpfs", d], check=True)  # less than one checkpoint
cli = subprocess.run([sys.executable, "-m", "meshnb", "train", "--systems", "2", "--steps", "20", "--checkpoint",
                      d + "/cli.ck"], capture_output=True, text=True)
import meshnb
try:
    meshnb.train(20, systems=2, checkpoint=d + "/lib.ck")
    lib = ""
except OSError as e:
    lib = f"{type(e).__name__}: {e}"
print(json.dumps({"rc": cli.returncode, "err": cli.stderr, "lib": lib}))
"""


def test_checkpoint_writes_and_locks_name_the_argument_as_written(tmp_path, capsys):
    """The rest of ``checkpoint PATH: ...`` on the command line: a path in use by another run and a
    checkpoint the disk has no room for say ``--checkpoint PATH: ...`` there, ``checkpoint PATH:
    ...`` from ``train(checkpoint=...)``, every other word as before."""
    from meshnb import CheckpointError, train
    from meshnb.cli import main

    from .test_files import run_on_a_full_tmpfs

    path = tmp_path / "run.ck"
    lock = files.lock_path(path)
    with files.hold(path, "checkpoint"):  # the lock a first run holds while it runs
        held = f"{path}: in use by another run (pid {os.getpid()}; lock {lock})"
        assert main(["train", "--systems", "2", "--steps", "20", "--checkpoint", str(path)]) == 2
        assert capsys.readouterr().err == f"meshnb: error: --checkpoint {held}\n"
        with pytest.raises(CheckpointError, match=f"^{re.escape(f'checkpoint {held}')}$"):
            train(20, systems=2, checkpoint=path)
    r = run_on_a_full_tmpfs(tmp_path, _FULL_CHECKPOINT)
    mnt = tmp_path / "mnt"
    assert r["rc"] == 1 and r["err"] == f"meshnb: error: --checkpoint {mnt / 'cli.ck'}: No space left on device\n", r
    assert r["lib"] == f"SaveFailed: checkpoint {mnt / 'lib.ck'}: No space left on device", r


@pytest.mark.mpi
def test_the_mpi_backends_checkpoint_refusals_name_the_argument_as_written(tmp_path):
    """Under mpiexec rank 0 reads ``--resume`` and locks ``--checkpoint``, and every rank raises its
    refusal: named as the flag the user wrote, as the other backends' are."""
    from .util import mpi_env, mpiexec

    junk, good, path = tmp_path / "junk.ck", tmp_path / "good.ck", tmp_path / "held.ck"
    junk.write_bytes(b"x" * 100)
    train_cli = [mpiexec(), "-n", "1", sys.executable, "-m", "meshnb", "train", "--backend", "mpi"]
    assert run_meshnb("train", "--systems", "2", "--steps", "20", "--checkpoint", str(good)).returncode == 0
    with files.hold(path, "checkpoint"):
        for argv, said in [
            (["--resume", str(junk)], f"--resume {junk}: not a meshnb checkpoint"),
            (["--resume", str(good)], f"--resume {good} is a run of 2 systems: start it with mpiexec -n 2"),
            (
                ["--steps", "20", "--checkpoint", str(path)],
                f"--checkpoint {path}: in use by another run (pid {os.getpid()};",
            ),
        ]:
            p = subprocess.run([*train_cli, *argv], capture_output=True, text=True, timeout=180, env=mpi_env())
            assert p.returncode == 2 and p.stderr.startswith(f"meshnb: error: {said}"), p.stderr
            assert p.stderr.count("\n") == 1, p.stderr


def test_ptx_audit_refuses_an_allow_f64_name_of_no_audited_function(tmp_path, capsys):
    """``--allow-f64`` with a name no audited module declares (a typo) is a usage error naming it,
    not a flag that silently allows nothing; the library refuses it as well."""
    from meshnb.cli import main
    from meshnb.conformance import audit

    ptx = ".version 8.0\n.target sm_90\n.address_size 64\n.visible .func h()\n{\nret;\n}\n"
    (tmp_path / "a.ptx").write_text(ptx)
    (tmp_path / "b.ptx").write_text(ptx.replace("func h(", "entry k("))
    files = [str(tmp_path / "a.ptx"), str(tmp_path / "b.ptx")]
    assert main(["ptx", "audit", *files, "--allow-f64", "h", "--allow-f64", "k"]) == 0  # each in one module
    capsys.readouterr()
    assert main(["ptx", "audit", *files, "--allow-f64", "k", "--allow-f64", "hh", "--allow-f64", "j"]) == 2
    out, err = capsys.readouterr()
    assert (out, err) == (
        "",
        "meshnb: error: ptx audit: --allow-f64 names no function of the audited modules: 'hh', 'j'\n",
    )
    with pytest.raises(ValueError, match=r"^allow_f64 names no function of the module: 'k'$"):
        audit.audit_text(ptx, allow_f64=["h", "k"])
