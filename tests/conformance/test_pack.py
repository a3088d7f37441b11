"""The conformance pack: deterministic, guarded by its manifest, passed by the reference."""

from __future__ import annotations

import filecmp
import hashlib
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from meshnb.cli import main
from meshnb.conformance import check, faults, pack
from meshnb.testing import reference as ref


def test_pack_is_deterministic(quick_pack: Path, tmp_path: Path) -> None:
    again = tmp_path / "again"
    assert main(["pack", str(again), "--quick"]) == 0
    names = sorted(p.relative_to(quick_pack).as_posix() for p in quick_pack.rglob("*") if p.is_file())
    assert names == sorted(p.relative_to(again).as_posix() for p in again.rglob("*") if p.is_file())
    match, mismatch, errors = filecmp.cmpfiles(quick_pack, again, names, shallow=False)
    assert not mismatch and not errors and len(match) == len(names)
    manifest = json.loads((quick_pack / "manifest.json").read_text())
    assert sorted(manifest["files"]) == sorted(n for n in names if n != "manifest.json")
    assert manifest["pack_version"] == pack.PACK_VERSION and manifest["cases"] == [c.name for c in pack.cases(True)]


def test_pack_has_the_cases_the_issue_asks_for() -> None:
    full = {c.name: c for c in pack.cases(quick=False)}
    assert full["default"].steps == 4096 and full["long"].steps >= 65536
    assert {c.systems for c in full.values() if c.grouped} >= {2, 3, 8}
    assert {c.steps_per_task for c in full.values()} >= {1, 37, 64}
    assert any(c.step_base < 1 << 32 < c.step_base + c.steps for c in full.values())
    assert any(c.step_base + c.steps == (1 << 64) - 1 for c in full.values())
    assert {"hard-" + n for n in pack.hard.hard_pages()} <= set(full)
    lr = full["lr-changes"]
    assert [s for s, _ in lr.set_lr] == [0, lr.steps // 2, lr.steps]
    assert any(c.steps % c.steps_per_task for c in full.values())


@pytest.mark.parametrize("case", [c.name for c in pack.cases(quick=True)])
def test_reference_is_an_executor_that_passes(case: str, setups: dict[str, check.Setup]) -> None:
    """meshnb.testing.reference, run as the case says, passes it (pages, trace, digests); it has no timeouts,
    and an injected one, resumed, changes no bit but ROUND (test_pack_states runs meshnb's program with them)."""
    s = setups[case]
    c = s.case
    outs, trace = ref.run(s.in_pages, c.steps, grouped=c.grouped, lr_changes=dict(c.set_lr))
    outs = pack.mark_timeouts(c, outs)
    for k in range(c.systems):
        rep = check.check(s, outs[k], system=k, got_trace=trace)
        assert rep.verdict == "PASS" and rep.exit_code == 0, rep.text()
    assert [ref.digest(p) for p in outs] == [ref.digest(p) for p in s.expected]


def test_digests_and_trace_files_agree(quick_pack: Path) -> None:
    for c in pack.cases(True):
        exp = json.loads((quick_pack / c.name / "expected.json").read_text())
        outs = [(quick_pack / c.name / f"out-{k}.page").read_bytes() for k in range(c.systems)]
        assert exp["digests"] == [ref.digest(p) for p in outs]
        trace = np.frombuffer((quick_pack / c.name / "trace.bin").read_bytes(), "<u4").reshape(-1, 5)
        assert exp["trace_digest"] == ref.trace_digest(trace) and len(trace) == c.steps
        assert json.loads((quick_pack / c.name / "case.json").read_text())["steps"] == c.steps


def test_divergent_lr_ends_in_nan_and_underflow_lr_never_moves(setups: dict[str, check.Setup]) -> None:
    nan = setups["lr-divergent-nan"].expected[0]
    assert np.frombuffer(nan, "<u4", 4).tolist() == [0x7FFFFFFF] * 4
    still = setups["lr-underflow"]
    assert still.expected[0][:16] == still.in_pages[0][:16]


def test_a_flipped_bit_anywhere_is_caught(quick_pack: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import shutil

    copy = tmp_path / "p"
    shutil.copytree(quick_pack, copy)
    rng = np.random.Generator(np.random.PCG64(3))
    files = sorted(p for p in (copy / "cluster-3").iterdir())
    assert len(files) == 9  # case.json, expected.json, trace.bin, in-0..2, out-0..2
    good = (copy / "cluster-3" / "out-0.page").read_bytes()
    for f in files:
        data = bytearray(f.read_bytes())
        i = int(rng.integers(0, len(data)))
        data[i] ^= 1 << int(rng.integers(0, 8))
        original = f.read_bytes()
        f.write_bytes(bytes(data))
        page = tmp_path / "exec.page"
        page.write_bytes(good)
        assert main(["check", str(copy / "cluster-3"), "--page", str(page)]) == 2, f.name
        err = capsys.readouterr().err
        assert "manifest" in err and f.name in err
        with pytest.raises(pack.PackError):
            pack.verify_pack(copy)
        assert main(["pack", str(copy), "--verify"]) == 2
        capsys.readouterr()
        f.write_bytes(original)
    assert main(["pack", str(copy), "--verify"]) == 0
    assert pack.verify_pack(copy) == len(json.loads((copy / "manifest.json").read_text())["files"])


def test_simulated_executor_without_fault_is_meshnb(setups: dict[str, check.Setup]) -> None:
    """faults.run with no fault gives the pack's bits on every quick case (the hard ones side by side)."""
    hard = [n for n, s in setups.items() if not s.case.from_init and s.case.steps == 64]
    for n, s in setups.items():  # the probes of one and two steps and the state cases, each alone
        if not s.case.from_init and s.case.steps != 64:
            one = faults.run(s.in_pages, s.case.steps, grouped=s.case.grouped, set_lr=dict(s.case.set_lr))
            assert one.pages == s.expected and np.array_equal(one.trace, s.trace), n
    pages = [setups[n].in_pages[0] for n in hard]
    r = faults.run(pages, 64, grouped=False, independent=True)
    for k, n in enumerate(hard):
        assert r.pages[k] == setups[n].expected[0] and np.array_equal(r.trace[:, k], setups[n].trace), n
    for n in ("default", "cluster-3", "lr-changes", "step-base-2^64-2", "steps-per-task-odd", "state-lr-words"):
        s = setups[n]
        r = faults.run(s.in_pages, s.case.steps, grouped=s.case.grouped, set_lr=dict(s.case.set_lr), from_init=True)
        assert r.pages == s.expected and np.array_equal(r.trace, s.trace), n


@pytest.mark.skipif(not os.environ.get("MESHNB_SLOW"), reason="slow (about a minute): MESHNB_SLOW=1")
def test_full_pack(tmp_path: Path) -> None:
    """The full pack (the long run included): written, verified, and passed by the reference."""
    root = tmp_path / "full"
    assert main(["pack", str(root)]) == 0
    assert pack.verify_pack(root) > 0
    for c in pack.cases(False):
        s = check.load_case(root / c.name)
        outs, trace = ref.run(s.in_pages, c.steps, grouped=c.grouped, lr_changes=dict(c.set_lr))
        outs = pack.mark_timeouts(c, outs)  # the reference has no timeouts: ROUND as the injected ones leave it
        assert check.check(s, outs[-1], system=c.systems - 1, got_trace=trace).verdict == "PASS", c.name


# =============================================================================================
# Writing a pack: a whole directory, never through a link (issue 16)
# =============================================================================================


def _pack_cmd(target: Path) -> list[str]:
    return [sys.executable, "-m", "meshnb", "pack", str(target), "--quick"]


def _leftovers(parent: Path) -> list[str]:
    return sorted(n for n in os.listdir(parent) if ".tmp" in n or ".old" in n)


def test_pack_replaces_a_pack_and_never_writes_through_a_link(quick_pack: Path, tmp_path: Path) -> None:
    target = tmp_path / "p"
    shutil.copytree(quick_pack, target)
    victim = tmp_path / "victim.txt"
    victim.write_text("mine\n")
    (target / "default" / "case.json").unlink()
    (target / "default" / "case.json").symlink_to(victim)
    (target / "default" / "trace.bin").unlink()
    os.mkfifo(target / "default" / "trace.bin")
    assert main(["pack", str(target), "--quick"]) == 0
    assert victim.read_text() == "mine\n"
    assert not (target / "default" / "case.json").is_symlink() and (target / "default" / "trace.bin").is_file()
    assert pack.verify_pack(target) > 0 and _leftovers(tmp_path) == []


def test_pack_refuses_what_is_not_a_pack(quick_pack: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    extra = tmp_path / "extra"
    shutil.copytree(quick_pack, extra)
    (extra / "notes.txt").write_text("keep me\n")
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep me\n")
    link = tmp_path / "link"
    link.symlink_to(mine)
    fifo_pack = tmp_path / "fifo"
    fifo_pack.mkdir()
    os.mkfifo(fifo_pack / "manifest.json")
    for target, says in [
        (extra, "not the pack's ('notes.txt')"),
        (mine, "is not a pack"),
        (link, "symbolic link"),
        (fifo_pack, "a FIFO"),
    ]:
        assert main(["pack", str(target), "--quick"]) == 2
        err = capsys.readouterr().err
        assert err.startswith("meshnb: error: ") and err.count("\n") == 1 and says in err, err
    assert (mine / "notes.txt").read_text() == "keep me\n"


@pytest.mark.parametrize(
    ("foreign", "named"),
    [
        ("default/MY-NOTES.txt", "'default/MY-NOTES.txt'"),
        ("default/results/run1.page", "'default/results'"),
        ("default/out-0.page.bak", "'default/out-0.page.bak'"),
        ("stray-case/out-0.page", "'stray-case'"),
    ],
)
def test_pack_never_deletes_what_it_did_not_write(
    foreign: str, named: str, quick_pack: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A user's file anywhere inside an old pack (notes in a case, an executor's results): refused
    up front, exit 2, the file and the old pack as they were (pack --quick deleted them)."""
    old = tmp_path / "old"
    shutil.copytree(quick_pack, old)
    mine = old / foreign
    mine.parent.mkdir(parents=True, exist_ok=True)
    mine.write_text("keep me\n")
    assert main(["pack", str(old), "--quick"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"meshnb: error: {old}: holds files that are not the pack's (") and err.count("\n") == 1
    assert named in err, err
    assert mine.read_text() == "keep me\n" and pack.verify_pack(old) > 0 and _leftovers(tmp_path) == []


def test_a_pack_whose_manifest_lists_a_users_file_is_still_refused(
    quick_pack: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The manifest is the user's file too: listing notes in it does not make them the pack's."""
    old = tmp_path / "old"
    shutil.copytree(quick_pack, old)
    (old / "default" / "notes.txt").write_text("keep me\n")
    manifest = json.loads((old / "manifest.json").read_text())
    manifest["files"]["default/notes.txt"] = hashlib.sha256(b"keep me\n").hexdigest()
    (old / "manifest.json").write_text(json.dumps(manifest))
    assert main(["pack", str(old), "--quick"]) == 2
    assert "'default/notes.txt'" in capsys.readouterr().err
    assert (old / "default" / "notes.txt").read_text() == "keep me\n"


def test_a_failed_write_names_the_file_and_leaves_nothing(tmp_path: Path) -> None:
    """A write that fails (the file size limit here, a full disk alike): exit 1, the file named."""

    def small_files() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # EFBIG instead of the signal
        resource.setrlimit(resource.RLIMIT_FSIZE, (3000, 3000))

    target = tmp_path / "p"
    r = subprocess.run(_pack_cmd(target), capture_output=True, text=True, timeout=300, preexec_fn=small_files)
    assert r.returncode == 1 and r.stderr.count("\n") == 1, r.stderr
    assert r.stderr.startswith(f"meshnb: error: pack file {target}/default/in-0.page: File too large")
    assert not target.exists() and _leftovers(tmp_path) == []


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGKILL])
def test_an_interrupted_pack_leaves_the_old_one(sig: int, quick_pack: Path, tmp_path: Path) -> None:
    """Ctrl-C: exit 130, one line, the old pack as it was; SIGKILL: the old pack too, and the
    temporary directory left behind is removed by the next pack."""
    target = tmp_path / "p"
    shutil.copytree(quick_pack, target)
    for _ in range(5):  # a loaded machine may let a pack finish before the signal: then again
        proc = subprocess.Popen(_pack_cmd(target), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            deadline = time.monotonic() + 60
            while not _leftovers(tmp_path) and time.monotonic() < deadline:  # the new pack is being written
                time.sleep(0.005)
            time.sleep(0.05)
            finished = proc.poll() is not None
            proc.send_signal(sig)
            out, err = proc.communicate(timeout=60)
        finally:
            proc.kill()
        if not finished:
            break
    else:
        pytest.fail("the pack always finished before the signal")
    assert pack.verify_pack(target) > 0
    if sig == signal.SIGINT:
        assert proc.returncode == 130 and err == "meshnb: interrupted\n" and out == ""
        assert _leftovers(tmp_path) == []
    else:
        assert _leftovers(tmp_path) != []
        pack._stale_temp_dirs(target)
        assert _leftovers(tmp_path) == []


def test_the_hard_pages_offsets_are_the_layout_tables() -> None:
    """meshnb.testing.pages keeps its own offsets (an independent oracle): they are SPEC 7's."""
    from meshnb.view import FIELDS

    assert tuple(FIELDS[n].offset for n in ("PARAMS", "LR", "INV_BATCH", "X", "Y")) == (
        pack.hard.PARAMS,
        pack.hard.LR,
        pack.hard.INV,
        pack.hard.X,
        pack.hard.Y,
    )


def test_a_reader_sees_a_whole_pack_during_a_rewrite(quick_pack: Path, tmp_path: Path) -> None:
    """While a pack is rewritten, a reader finds every time a whole pack: the old one or the new."""
    import threading

    target = tmp_path / "p"
    shutil.copytree(quick_pack, target)
    done = threading.Event()
    seen: list[str] = []

    def read() -> None:
        while not done.is_set():
            try:
                names = sorted(os.listdir(target / "default"))
                sizes = [os.path.getsize(target / "default" / n) for n in names]
                seen.append("ok" if len(names) == 5 and all(sizes) else f"partial {names} {sizes}")
            except OSError as e:
                seen.append(f"{type(e).__name__}")

    reader = threading.Thread(target=read)
    reader.start()
    try:
        assert main(["pack", str(target), "--quick"]) == 0
    finally:
        done.set()
        reader.join()
    assert len(seen) > 10 and set(seen) == {"ok"}, sorted(set(seen))
    assert pack.verify_pack(target) > 0 and _leftovers(tmp_path) == []


def test_exchange_swaps_two_directories(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    (a / "from-a").touch()
    (b / "from-b").touch()
    if not pack._exchange(a, b):
        pytest.skip("no renameat2 RENAME_EXCHANGE here (the pack is replaced by two renames)")
    assert os.listdir(a) == ["from-b"] and os.listdir(b) == ["from-a"]
    with pytest.raises(FileNotFoundError):
        pack._exchange(tmp_path / "missing", b)


def test_verify_into_a_closed_pipe_is_141_quietly(quick_pack: Path) -> None:
    """`meshnb pack --verify PACK | head -c1` was exit 1 "Broken pipe" (the CSV's and JSON's end 141)."""
    p = subprocess.run(f"{sys.executable} -m meshnb pack --verify {quick_pack} | true; echo ${{PIPESTATUS[0]}} >&2",
                       shell=True, executable="/bin/bash", capture_output=True, text=True, timeout=120)  # fmt: skip
    assert p.stderr == "141\n", p.stderr


def test_the_case_table_and_its_pages() -> None:
    """What a case says of itself: its sizes, start pages, timeouts' ROUND, case.json and meshnb's answer."""
    default = pack.BY_NAME["default"]
    assert (default.steps, default.sized(quick=True).steps, default.from_init) == (4096, 256, True)
    assert (len(pack.cases()), len(pack.cases(quick=True)), pack.cases(quick=True)[0].steps) == (48, 47, 256)
    page = pack.BY_NAME["step-base-2^32"].in_page()
    hi, lo = int.from_bytes(page[44:48], "little"), int.from_bytes(page[28:32], "little")  # STEP_HI:NEXT_STEP
    assert hi << 32 | lo == (1 << 32) - 300
    pages = pack.mark_timeouts(pack.BY_NAME["state-timeout-resume"], [bytes(4096)] * 2)
    assert [int.from_bytes(p[40:44], "little") for p in pages] == [91, 65]  # ROUND: the last timed-out round
    assert sorted(pack.probe_pages()) == [
        "subnormal-samples-huge-params",
        "subnormal-update",
        "tininess-probes",
        "tiny-x-huge-params",
        "tiny-y",
        "tiny-y-tiny-params",
    ]
    assert np.frombuffer(pack.state_pages()["pending-alone-match"], "<u4", 3, 32).tolist() == [0, 1, 1]
    start = pack.start_pages()
    assert len(start) == 27 and {"nan-lr", "tininess-probes", "err-pending-round"} <= set(start)
    doc = pack.case_json(pack.BY_NAME["step-base-2^32"])
    assert (doc["step_base_hex"], doc["start"], doc["files"]["in"]) == ("00000000:fffffed4", "init", ["in-0.page"])
    result = pack.run_case(default.sized(quick=True))  # meshnb's answer is the independent reference's
    assert len(result.out_pages) == 1 and result.trace.shape == (256, 5)
    assert result.digests[0] == "1ccb2a2d0f0e1a3600bb81932fba995a8bb32dfecc16ffd2f9bb12ecbd43c736"
    outs, trace = ref.run([ref.init_page()], 256, grouped=False)
    assert (ref.digest(outs[0]), ref.trace_digest(trace)) == (result.digests[0], result.trace_digest)


def test_the_manifest_helpers_on_a_hand_made_pack(tmp_path: Path) -> None:
    """A pack of one case and one file, by hand: every reader of a manifest, and what each refuses."""
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "case.json").write_bytes(b'{"steps": 64}')
    files = {"a/case.json": hashlib.sha256(b'{"steps": 64}').hexdigest()}
    assert not pack.has_manifest(tmp_path)
    (tmp_path / "manifest.json").write_text(json.dumps({"pack_version": 2, "cases": ["a"], "files": files}))
    manifest = pack.load_manifest(tmp_path)
    assert pack.has_manifest(tmp_path) and manifest["cases"] == pack.case_names(tmp_path) == ["a"]
    assert pack.load_json(tmp_path / "a" / "case.json", 1000) == {"steps": 64}
    assert len(pack.read_file(tmp_path / "a" / "case.json")) == 13
    assert pack.verify_files(tmp_path, manifest, "a/") == 1 and pack.verify_files(tmp_path, manifest, "b/") == 0
    pack.check_sha(tmp_path, manifest, "a/case.json", b'{"steps": 64}')
    with pytest.raises(pack.PackError, match=r"^pack/a/case.json: does not match the pack's manifest \(SHA-256"):
        pack.check_sha(Path("pack"), manifest, "a/case.json", b"{ }")
    with pytest.raises(pack.PackError, match=r"^x.json: not JSON \(NaN is not a number JSON allows\)$"):
        pack.parse_json(b"[1, NaN]", Path("x.json"))
    assert pack.manifest_path("default/out-0.page") == "default/out-0.page"
