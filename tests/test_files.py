"""meshnb.files: inputs that must be regular files, outputs checked up front and written
atomically (a full disk included), stale temporary files, and the lock of a run that owns a path."""

from __future__ import annotations

import errno
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from meshnb import files

from .util import meshnb_cli

QUICK_S = 2.0  # a refusal takes no longer than this, whatever the file


def _one_line(e: BaseException) -> str:
    text = str(e)
    assert "\n" not in text and text, text
    return text


def _dead_pid() -> int:
    """The pid of a process that has exited and been reaped (until the kernel reuses it)."""
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


# ---------------------------------------------------------------------------------------------
# Inputs
# ---------------------------------------------------------------------------------------------


def test_a_regular_file_is_read_within_its_bound(tmp_path):
    path = tmp_path / "in.bin"
    path.write_bytes(b"x" * 100)
    assert files.read_input(path, "--view-in", 100) == b"x" * 100
    assert files.read_input(str(path), "--view-in", 1000) == b"x" * 100
    with pytest.raises(files.InputError, match=rf"^--view-in {path}: larger than 99 bytes$"):
        files.read_input(path, "--view-in", 99)


def _fifo(tmp_path: Path) -> Path:
    path = tmp_path / "fifo"
    os.mkfifo(path)
    return path


def _special(tmp_path: Path, kind: str) -> tuple[Path, str]:
    """A path that is not a regular file, and the words that must name it."""
    if kind == "fifo":
        return _fifo(tmp_path), "a FIFO"
    if kind == "dev-zero":
        return Path("/dev/zero"), "a character device"
    if kind == "directory":
        return tmp_path, "a directory"
    if kind == "symlink-to-fifo":
        link = tmp_path / "link"
        link.symlink_to(_fifo(tmp_path))
        return link, "a FIFO"
    raise AssertionError(kind)


SPECIAL = ["fifo", "dev-zero", "directory", "symlink-to-fifo"]


@pytest.mark.parametrize("kind", SPECIAL)
@pytest.mark.parametrize(
    "read", [lambda p: files.read_input(p, "--view-in", 1 << 30), lambda p: files.read_page(p, "--view-in")]
)
def test_anything_but_a_regular_file_is_refused_at_once(tmp_path, kind, read):
    path, named = _special(tmp_path, kind)
    t = time.monotonic()
    with pytest.raises(files.InputError) as e:
        read(path)  # a FIFO without a writer would block a plain open; /dev/zero would fill memory
    assert time.monotonic() - t < QUICK_S
    assert _one_line(e.value) == f"--view-in {path}: {named}, not a regular file"


def test_a_socket_and_a_missing_file_are_refused(tmp_path):
    missing = tmp_path / "missing"
    with pytest.raises(files.InputError) as e:
        files.read_input(missing, "checkpoint", 10)
    assert _one_line(e.value) == f"checkpoint {missing}: No such file or directory"
    with pytest.raises(files.InputError, match=r"^checkpoint 'a\\x00b': not a file name$"):
        files.read_input("a\0b", "checkpoint", 10)
    path = tmp_path / "s"
    with socket.socket(socket.AF_UNIX) as s:
        s.bind(str(path))
        with pytest.raises(files.InputError) as e:
            files.read_input(path, "checkpoint", 10)
    assert _one_line(e.value) == f"checkpoint {path}: a socket, not a regular file"


@pytest.mark.parametrize("size", [0, 4095, 4097, 10_000])
def test_a_page_is_4096_bytes(tmp_path, size):
    path = tmp_path / "page.bin"
    path.write_bytes(b"\1" * size)
    with pytest.raises(files.InputError) as e:
        files.read_page(path, "--view-in")
    assert _one_line(e.value) == f"--view-in {path}: a page is 4096 bytes, this file has {size}"
    path.write_bytes(b"\1" * 4096)
    assert files.read_page(path, "--view-in") == b"\1" * 4096


# ---------------------------------------------------------------------------------------------
# Outputs checked up front
# ---------------------------------------------------------------------------------------------


def test_a_writable_output_passes_and_leaves_nothing(tmp_path):
    files.check_output(tmp_path / "page.bin", "--view-out")
    (tmp_path / "page.bin").write_bytes(b"old")
    files.check_output(tmp_path / "page.bin", "--view-out")  # an existing file will be replaced
    assert sorted(p.name for p in tmp_path.iterdir()) == ["page.bin"]


def test_unwritable_outputs_are_refused_before_the_run(tmp_path):
    (tmp_path / "afile").write_bytes(b"")
    (tmp_path / "adir").mkdir()
    cases = {
        "/nonexistent_dir/x": "directory /nonexistent_dir does not exist",
        f"{tmp_path}/afile/x": f"{tmp_path}/afile is not a directory",
        f"{tmp_path}/adir": "a directory, not a regular file",
        f"{tmp_path}/adir/": "ends with '/', which names a directory, not a file",
        f"{tmp_path}/..": "not a file name",
        "": "an empty path is not a file name",
    }
    for path, why in cases.items():
        with pytest.raises(files.OutputError) as e:
            files.check_output(path, "--checkpoint")
        assert _one_line(e.value) == f"--checkpoint {path or repr(path)}: {why}"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["adir", "afile"]  # no probe, no stray temp
    files.check_output("/dev/null", "--checkpoint")  # a device is written through as a stream


def _bad_outputs(tmp_path: Path) -> dict[str, tuple[str, str]]:
    """Outputs that no run could write as the user means, each made for real: name -> (path,
    what the one line says). Root ignores modes, so a target with no write bit is refused by its
    mode (CI runs as root)."""
    ro_file, ro_dir = tmp_path / "ro.out", tmp_path / "ro-dir"
    ro_file.write_text("mine\n")
    ro_file.chmod(0o444)
    ro_dir.mkdir()
    ro_dir.chmod(0o555)
    (tmp_path / "loop-a").symlink_to(tmp_path / "loop-b")
    (tmp_path / "loop-b").symlink_to(tmp_path / "loop-a")
    return {
        "trailing slash": (f"{tmp_path}/out/", "ends with '/', which names a directory, not a file"),
        "loop": (str(tmp_path / "loop-a"), "a loop of symbolic links"),
        "read-only file": (str(ro_file), "a read-only file (mode 0444); not replaced"),
        "read-only directory": (str(ro_dir / "x"), f"cannot write in {ro_dir} (a read-only directory)"),
    }


@pytest.mark.parametrize("bad", ["trailing slash", "loop", "read-only file", "read-only directory"])
def test_outputs_no_run_could_write_are_refused_by_the_one_rule(tmp_path, bad):
    path, why = _bad_outputs(tmp_path)[bad]
    with pytest.raises(files.OutputError) as e:
        files.check_output(path, "--csv")
    assert _one_line(e.value) == f"--csv {path}: {why}"
    assert (tmp_path / "ro.out").read_text() == "mine\n" and not (tmp_path / "out").exists()


def test_a_legal_long_name_is_written_through_a_short_temporary(tmp_path):
    """A 250-byte name is legal; its temporary ``.NAME.tmpPID`` would not be (over 255 bytes)."""
    path = tmp_path / ("n" * 250)
    files.check_output(path, "--csv")
    files.write_atomic(path, b"data", "--csv")
    assert path.read_bytes() == b"data" and sorted(p.name for p in tmp_path.iterdir()) == [path.name]
    stale = path.with_name(f"{files.temp_prefix(path.name)}999999999")
    assert len(stale.name) <= files.NAME_MAX
    stale.write_bytes(b"left by a kill")
    assert files.remove_stale_temps(path) == [stale]


def test_an_unwritable_directory_is_refused(tmp_path, monkeypatch):
    # As root, permissions do not stop a write; os.access is what reports a read-only mount.
    monkeypatch.setattr(files.os, "access", lambda path, mode: False)
    with pytest.raises(files.OutputError) as e:
        files.check_output(tmp_path / "x", "--view-out")
    assert _one_line(e.value) == f"--view-out {tmp_path / 'x'}: cannot write in {tmp_path} (a read-only directory)"


def test_a_directory_that_refuses_files_is_refused_by_the_probe(tmp_path, monkeypatch):
    real_open = os.open

    def no_create(path, flags, *a, **k):  # what a full inode table or an LSM says
        if flags & os.O_CREAT:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_open(path, flags, *a, **k)

    monkeypatch.setattr(files.os, "open", no_create)
    with pytest.raises(files.OutputError, match=r"cannot write in .*No space left on device"):
        files.check_output(tmp_path / "x", "--view-out")


# ---------------------------------------------------------------------------------------------
# Atomic writes, stale temporary files, a full disk
# ---------------------------------------------------------------------------------------------


def test_write_atomic_replaces_the_file_and_leaves_no_temp(tmp_path):
    path = tmp_path / "page.bin"
    files.write_atomic(path, b"one", "--view-out")
    files.write_atomic(str(path), b"two", "--view-out")
    assert path.read_bytes() == b"two"
    assert [p.name for p in tmp_path.iterdir()] == ["page.bin"]


@pytest.mark.parametrize("kind", ["fifo", "symlink"])
def test_what_sits_at_the_temporary_name_is_replaced_not_opened(tmp_path, kind):
    """The temporary name ``.NAME.tmpPID`` is easy to guess: a FIFO put there blocked the write
    forever (the open waits for a reader), a symbolic link was written through."""
    path, victim = tmp_path / "page.bin", tmp_path / "victim"
    victim.write_bytes(b"keep")
    code = textwrap.dedent(
        f"""
        import os
        from pathlib import Path
        from meshnb import files
        tmp = Path({str(tmp_path)!r}) / f".page.bin.tmp{{os.getpid()}}"
        if {kind!r} == "fifo":
            os.mkfifo(tmp)
        else:
            os.symlink({str(victim)!r}, tmp)
        files.write_atomic({str(path)!r}, b"whole", "--view-out")
        """
    )
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert path.read_bytes() == b"whole" and victim.read_bytes() == b"keep"
    assert sorted(x.name for x in tmp_path.iterdir()) == ["page.bin", "victim"]


def test_stale_temporary_files_of_dead_writers_are_removed(tmp_path):
    path = tmp_path / "run.ckpt"
    dead, live = _dead_pid(), os.getppid()
    stale, busy = tmp_path / f".run.ckpt.tmp{dead}", tmp_path / f".run.ckpt.tmp{live}"
    other = tmp_path / f".other.ckpt.tmp{dead}"  # another path's: not ours to judge
    for p in (stale, busy, other):
        p.write_bytes(b"half a checkpoint")
    files.write_atomic(path, b"whole", "checkpoint")
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([busy.name, other.name, "run.ckpt"])


def test_a_directory_as_target_fails_naming_the_path_and_leaves_no_temp(tmp_path):
    path = tmp_path / "adir"
    path.mkdir()
    (path / "inside").write_bytes(b"")
    with pytest.raises(files.WriteError) as e:
        files.write_atomic(path, b"page", "--view-out")
    assert _one_line(e.value) == f"--view-out {path}: Is a directory"
    assert isinstance(e.value, OSError) and e.value.errno == errno.EISDIR and e.value.filename == str(path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["adir"]


@pytest.mark.parametrize("failing", ["write", "fsync"])
def test_a_full_disk_leaves_the_previous_file_and_no_temp(tmp_path, monkeypatch, failing):
    path = tmp_path / "run.ckpt"
    files.write_atomic(path, b"previous", "checkpoint")
    written = []

    def full(*args):
        if failing == "write" and written:  # a first short write, then the disk is full
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        if failing == "fsync":
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        written.append(args)
        return real(args[0], args[1][:3]) if failing == "write" else real(*args)

    real = getattr(os, failing)
    monkeypatch.setattr(files.os, failing, full)
    with pytest.raises(files.WriteError) as e:
        files.write_atomic(path, b"the next checkpoint", "checkpoint")
    assert _one_line(e.value) == f"checkpoint {path}: No space left on device"
    assert e.value.errno == errno.ENOSPC
    assert path.read_bytes() == b"previous"
    assert [p.name for p in tmp_path.iterdir()] == ["run.ckpt"]


_FULL_DISK = textwrap.dedent("""
    import json, os, subprocess, sys
    from meshnb import files
    d, previous, data = sys.argv[1], bytes.fromhex(sys.argv[2]), bytes.fromhex(sys.argv[3])
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", d], check=True)
    path = os.path.join(d, "out.bin")
    files.write_atomic(path, previous, "--view-out")
    fd = os.open(os.path.join(d, "filler"), os.O_WRONLY | os.O_CREAT)
    try:  # fill what is left
        while True:
            os.write(fd, bytes(4096))
    except OSError:
        os.close(fd)
    try:
        files.write_atomic(path, data, "--view-out")
        error = None
    except files.WriteError as e:
        error = str(e)
    print(json.dumps({"error": error, "kept": open(path, "rb").read() == previous,
                      "names": sorted(os.listdir(d))}))
""")


def _in_mount_namespace() -> bool:
    if shutil.which("unshare") is None:
        return False
    return subprocess.run(["unshare", "-rm", "true"], check=False, capture_output=True).returncode == 0


def run_on_a_full_tmpfs(tmp_path: Path, script: str, *args: str) -> dict:
    """Run ``script`` in a user and mount namespace of its own, where it may mount a small tmpfs on
    ``tmp_path/mnt`` (gone with the namespace: nothing is left mounted)."""
    if not _in_mount_namespace():
        pytest.skip("no user and mount namespace here (unshare -rm): the simulated ENOSPC tests stand in")
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    p = subprocess.run(
        ["unshare", "-rm", sys.executable, "-c", script, str(mnt), *args],
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 0, p.stderr
    assert not any(mnt.iterdir())  # the tmpfs went with the namespace
    return json.loads(p.stdout)


def test_a_real_full_disk_leaves_the_previous_file_and_no_temp(tmp_path):
    out = run_on_a_full_tmpfs(tmp_path, _FULL_DISK, (b"p" * 4096).hex(), (b"n" * 4096).hex())
    assert out == {
        "error": f"--view-out {tmp_path / 'mnt' / 'out.bin'}: No space left on device",
        "kept": True,
        "names": ["filler", "out.bin"],
    }


# ---------------------------------------------------------------------------------------------
# The lock of a run that owns a path
# ---------------------------------------------------------------------------------------------

_HOLDER = textwrap.dedent("""
    import sys
    from meshnb import files
    with files.hold(sys.argv[1], "checkpoint"):
        print("held", flush=True)
        sys.stdin.read()
""")


def _holder(path: Path) -> subprocess.Popen:
    p = subprocess.Popen(
        [sys.executable, "-c", _HOLDER, str(path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert p.stdout is not None and p.stdout.readline() == "held\n"
    return p


def test_hold_writes_the_pid_and_removes_the_lock_file(tmp_path):
    path = tmp_path / "run.ckpt"
    with files.hold(path, "checkpoint"):
        assert files.lock_path(path).read_text() == f"{os.getpid()}\n"
        with pytest.raises(files.InUseError) as e, files.hold(path, "checkpoint"):  # in the same process too
            pass
        assert e.value.pid == os.getpid()
    assert list(tmp_path.iterdir()) == []
    with files.hold(path, "checkpoint"):  # and it can be taken again
        pass


def test_a_full_disk_does_not_stop_a_run_from_holding_its_path(tmp_path, monkeypatch):
    def full(fd, data):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    path = tmp_path / "run.ckpt"
    with monkeypatch.context() as m:
        m.setattr(files.os, "write", full)
        owner = files.hold(path, "checkpoint")
        owner.__enter__()
    try:
        assert files.lock_path(path).read_text() == ""
        monkeypatch.setattr(files, "pid_alive", lambda pid: True)
        monkeypatch.setattr(files.time, "sleep", lambda s: None)
        with pytest.raises(files.InUseError) as e, files.hold(path, "checkpoint"):
            pass
        assert e.value.pid is None and "(a process whose pid is unknown; lock" in _one_line(e.value)
    finally:
        owner.__exit__(None, None, None)
    assert list(tmp_path.iterdir()) == []


def test_a_second_process_is_refused_with_the_holders_pid(tmp_path):
    path = tmp_path / "run.ckpt"
    p = _holder(path)
    try:
        with pytest.raises(files.InUseError) as e, files.hold(path, "checkpoint"):
            pass
        assert e.value.pid == p.pid
        assert _one_line(e.value) == (
            f"checkpoint {path}: in use by another run (pid {p.pid}; lock {files.lock_path(path)})"
        )
    finally:
        p.communicate("")
    assert p.returncode == 0
    assert list(tmp_path.iterdir()) == []
    with files.hold(path, "checkpoint"):
        pass


def test_the_lock_of_a_killed_holder_is_free(tmp_path):
    path = tmp_path / "run.ckpt"
    p = _holder(path)
    p.send_signal(signal.SIGKILL)
    p.communicate()
    assert files.lock_path(path).read_text() == f"{p.pid}\n"  # left behind, but not held
    with files.hold(path, "checkpoint"):
        assert files.lock_path(path).read_text() == f"{os.getpid()}\n"
    assert list(tmp_path.iterdir()) == []


_CONTENDER = textwrap.dedent("""
    import os, sys, time
    from meshnb import files
    path, inside, end = sys.argv[1], sys.argv[2], time.monotonic() + float(sys.argv[3])
    held = 0
    while time.monotonic() < end:
        try:
            with files.hold(path, "checkpoint"):
                fd = os.open(inside, os.O_CREAT | os.O_EXCL | os.O_WRONLY)  # fails if another holds it too
                os.close(fd)
                os.unlink(inside)
                held += 1
        except files.InUseError:
            pass
    print(held)
""")


@pytest.mark.slow
def test_holders_that_come_and_go_never_overlap(tmp_path):
    """Release unlinks the lock file while another process may have it open: the inode check makes
    that process try again rather than hold a lock on a file no longer at the name."""
    path, inside = tmp_path / "run.ckpt", tmp_path / "inside"
    ps = [
        subprocess.Popen(
            [sys.executable, "-c", _CONTENDER, str(path), str(inside), "3"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(3)
    ]
    outs = [p.communicate(timeout=60) for p in ps]
    assert all(p.returncode == 0 for p in ps), [err for _, err in outs]
    assert sum(int(out) for out, _ in outs) > 30  # they did take turns
    assert list(tmp_path.iterdir()) == []


# ---------------------------------------------------------------------------------------------
# The command line's use of these (the acceptance tests of the items 3 to 5)
# ---------------------------------------------------------------------------------------------


def _cli(*argv: str) -> subprocess.Popen:
    return meshnb_cli("train", *argv)


def _exit_2_at_once(p: subprocess.Popen, *named: str) -> str:
    try:
        # the interpreter's start, not a run (or a FIFO's open, which never returns): over 10 s beside
        # two busy loops and other test runs on 2 cores, so a minute
        out, err = p.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        p.kill()
        p.communicate()
        raise AssertionError("still running after 60 s") from None
    assert p.returncode == 2 and out == "", err
    assert err.count("\n") == 1 and all(n in err for n in named), err
    return err


def _main_exit_2_at_once(argv: list[str], capsys: pytest.CaptureFixture[str], *named: str) -> str:
    """``_exit_2_at_once`` in this process (``meshnb.cli.main``, what ``python -m meshnb`` runs)."""
    from meshnb.cli import main

    t0 = time.monotonic()
    code = main(["train", *argv])
    out, err = capsys.readouterr()
    assert time.monotonic() - t0 < 10  # refused before a run
    assert code == 2 and out == "", err
    assert err.count("\n") == 1 and all(n in err for n in named), err
    return err


# A FIFO in a process of its own (were it opened, the open would block: the process is killed at 10 s).
@pytest.mark.parametrize("kind", ["fifo", "dev-zero", "directory", "symlink-to-fifo"])
def test_the_cli_refuses_a_special_view_in(tmp_path, capsys, kind):
    path, _ = _special(tmp_path, kind)
    if "fifo" in kind:
        _exit_2_at_once(_cli("--view-in", str(path)), f"--view-in {path}")
    else:
        _main_exit_2_at_once(["--view-in", str(path)], capsys, f"--view-in {path}")


@pytest.mark.parametrize("option", ["--view-out", "--checkpoint"])
@pytest.mark.parametrize("where", ["/nonexistent_dir/x", "adir"])
def test_the_cli_checks_an_output_before_the_run(tmp_path, capsys, option, where):
    (tmp_path / "adir").mkdir()
    path = where if where.startswith("/") else str(tmp_path / where)
    cluster = ["--systems", "2", "--backend", "fused"] if option == "--checkpoint" else []
    _main_exit_2_at_once(["--steps", "1000", *cluster, option, path], capsys, f"{option} {path}")  # no run
    assert sorted(p.name for p in tmp_path.iterdir()) == ["adir"]  # no stray adir.tmpPID


OUTPUT_COMMANDS = {
    "train --view-out": ["train", "--steps", "64", "--view-out"],
    "train --checkpoint": ["train", "--steps", "64", "--systems", "2", "--backend", "fused", "--checkpoint"],
    "sweep --csv": ["sweep", "--steps", "2", "--lr", "0.5", "--csv"],
    "sweep --npz": ["sweep", "--steps", "2", "--lr", "0.5", "--npz"],
    "sweep --json --out": ["sweep", "--steps", "2", "--lr", "0.5", "--json", "--out"],
    "pack": ["pack", "--quick"],
}


@pytest.mark.parametrize("bad", ["trailing slash", "loop", "read-only file", "read-only directory"])
@pytest.mark.parametrize("command", list(OUTPUT_COMMANDS))
def test_every_command_refuses_a_bad_output_up_front(tmp_path, capsys, command, bad):
    """Exit 2 and one line naming the path, before anything runs; what was there stays as it was.
    (A pack is a directory: a trailing slash is its ordinary spelling, and a read-only file is no
    pack to replace.)"""
    from meshnb.cli import main

    path, _ = _bad_outputs(tmp_path)[bad]
    if command == "pack" and bad in ("trailing slash", "read-only file"):
        pytest.skip("a pack is a directory")
    argv = [*OUTPUT_COMMANDS[command], path]
    if command == "pack":
        argv = ["pack", path, "--quick"]
    assert main(argv) == 2
    out, err = capsys.readouterr()
    assert err.startswith("meshnb: error: ") and err.count("\n") == 1 and path.rstrip("/") in err, err
    assert (tmp_path / "ro.out").read_text() == "mine\n" and (tmp_path / "ro.out").stat().st_mode & 0o777 == 0o444
    assert not (tmp_path / "out").exists() and os.listdir(tmp_path / "ro-dir") == []


def test_a_second_run_on_a_checkpoint_path_is_refused_naming_the_first(tmp_path):
    path = tmp_path / "run.ckpt"
    first = _cli("--systems", "2", "--steps", "50000000", "--checkpoint", str(path), "--checkpoint-every", "0.2")
    try:
        deadline = time.monotonic() + 60
        while not path.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        second = _cli("--systems", "2", "--backend", "fused", "--steps", "64", "--checkpoint", str(path))
        _exit_2_at_once(second, f"--checkpoint {path}", f"pid {first.pid}")
    finally:
        first.kill()
        first.communicate()


_FULL_RUN = textwrap.dedent("""
    import subprocess, sys
    d, option = sys.argv[1], sys.argv[2]
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4k", "tmpfs", d], check=True)  # less than one checkpoint
    cluster = ["--systems", "2", "--backend", "fused", "--overwrite-checkpoint"] if option == "--checkpoint" else []
    with open(d + "/out.bin", "wb") as f:
        f.write(b"previous")
    p = subprocess.run([sys.executable, "-m", "meshnb", "train", "--steps", "64", "--json", *cluster, option,
                        d + "/out.bin"], capture_output=True, text=True)
    import json, os
    print(json.dumps({"rc": p.returncode, "out": p.stdout, "err": p.stderr, "names": sorted(os.listdir(d)),
                      "previous": open(d + "/out.bin", "rb").read() == b"previous"}))
""")


@pytest.mark.parametrize("option", ["--view-out", "--checkpoint"])
def test_a_full_disk_prints_the_result_then_one_line(tmp_path, option):
    r = run_on_a_full_tmpfs(tmp_path, _FULL_RUN, option)
    path = tmp_path / "mnt" / "out.bin"
    assert r["rc"] == 1 and json.loads(r["out"])["steps"] == 64, r  # the digests come first
    assert r["err"] == f"meshnb: error: {option} {path}: No space left on device\n", r
    assert r["names"] == ["out.bin"] and r["previous"], r


# --- the one output rule (issue 24) ------------------------------------------------------------


def test_output_kinds(tmp_path):
    (tmp_path / "reg").write_bytes(b"x")
    (tmp_path / "link").symlink_to(tmp_path / "reg")
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "to-stdout").symlink_to("/dev/stdout")
    (tmp_path / "to-null").symlink_to("/dev/null")
    kinds = {
        "new": "atomic",
        "reg": "atomic",
        "link": "link",
        "dangling": "link",
        "fifo": "stream",
        "to-stdout": "stream",
        "to-null": "stream",
    }
    for name, kind in kinds.items():
        assert files.output_kind(tmp_path / name) == kind, name
    for path in ("/dev/stdout", "/dev/stderr", "/dev/fd/1", "/proc/self/fd/1", f"/proc/{os.getpid()}/fd/1"):
        assert files.output_kind(path) == "stream", path


def test_a_symlinked_output_is_written_through_and_stays_a_link(tmp_path):
    target = tmp_path / "target.csv"
    target.write_bytes(b"an old and longer content\n")
    link = tmp_path / "L"
    link.symlink_to(target.name)
    files.write_atomic(link, b"new\n", "--csv")
    assert link.is_symlink() and os.readlink(link) == target.name
    assert target.read_bytes() == b"new\n"  # cut to what was written
    dangling = tmp_path / "D"
    dangling.symlink_to("made.csv")
    files.write_atomic(dangling, b"made\n", "--csv")
    assert dangling.is_symlink() and (tmp_path / "made.csv").read_bytes() == b"made\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["D", "L", "made.csv", "target.csv"]  # no temp


def test_an_output_through_dev_stdout_reaches_the_redirected_file_and_appends(tmp_path):
    """`--junit /dev/stdout > f` put the file in place of the machine's /dev/stdout link (issue 24)."""
    code = "import sys; from meshnb import files; files.write_atomic(sys.argv[1], b'row\\n', '--csv')"
    out = tmp_path / "f.csv"
    out.write_bytes(b"kept\n")
    for path in ("/dev/stdout", "/proc/self/fd/1", "/dev/fd/1"):
        with open(out, "ab") as f:  # `>> f.csv`
            r = subprocess.run([sys.executable, "-c", code, path], stdout=f, check=False)
        assert r.returncode == 0
    assert out.read_bytes() == b"kept\nrow\nrow\nrow\n"
    assert os.path.islink("/dev/stdout")
    with open(out, "wb") as f:  # `> f.csv`
        subprocess.run([sys.executable, "-c", code, "/dev/stdout"], stdout=f, check=True)
    assert out.read_bytes() == b"row\n"


def test_a_fifo_output_is_a_stream(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(files.OutputError, match="a FIFO with no reader"):  # at once, never blocking
        files.write_atomic(fifo, b"x", "--csv")
    r = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # a reader
    try:
        files.write_atomic(fifo, b"through the fifo\n", "--csv")
        assert os.read(r, 100) == b"through the fifo\n"
    finally:
        os.close(r)
    assert stat_is_fifo(fifo)


def stat_is_fifo(path: Path) -> bool:
    import stat

    return stat.S_ISFIFO(os.lstat(path).st_mode)


def test_a_device_that_is_full_fails_naming_the_output(tmp_path):
    with pytest.raises(files.WriteError) as e:
        files.write_atomic("/dev/full", b"x" * 10000, "--junit")
    assert _one_line(e.value) == "--junit /dev/full: No space left on device"


def test_an_empty_output_path_is_a_bad_argument():
    with pytest.raises(files.OutputError, match="an empty path"):
        files.write_atomic("", b"x", "--csv")
    with pytest.raises(files.OutputError, match="an empty path"):
        files.check_output("", "--csv")


def test_an_output_inside_an_input_directory_is_refused(tmp_path):
    pack = tmp_path / "pack"
    (pack / "case").mkdir(parents=True)
    (pack / "manifest.json").write_bytes(b"{}")
    os.link(pack / "manifest.json", tmp_path / "hard")
    (tmp_path / "soft").symlink_to(pack / "case")
    for out in (pack / "manifest.json", pack / "case" / "new.xml", tmp_path / "hard", tmp_path / "soft" / "x"):
        with pytest.raises(files.OutputError) as e:
            files.refuse_overwrite("--junit", out, "pack", pack)
        assert _one_line(e.value) == f"--junit {out}: a file of the pack {pack}, which is read, not overwritten"
    files.refuse_overwrite("--junit", tmp_path / "report.xml", "pack", pack)
    files.refuse_overwrite("--junit", tmp_path / "report.xml", "pack", None)


# --- strict JSON -------------------------------------------------------------------------------


def test_json_text_is_strict():
    import numpy as np

    doc = {"a": [float("nan"), float("inf"), -float("inf"), 1.5, np.float64("nan")], "b": (1, "x")}
    text = files.json_text(doc)
    assert text == '{"a": ["NaN", "Infinity", "-Infinity", 1.5, "NaN"], "b": [1, "x"]}'
    json.loads(text, parse_constant=lambda c: pytest.fail(f"bare {c}"))
    assert float(json.loads(text)["a"][1]) == float("inf")


# --- stdout that never drops a byte --------------------------------------------------------------

_PRINTER = textwrap.dedent(
    """
    import sys
    from meshnb import files
    files.install_std_streams()
    line = ("x" * 99 + "\\n")
    for i in range(int(sys.argv[1])):
        sys.stdout.write(f"{i:08d}" + line)
    print("done", file=sys.stderr)
    """
)


def _slow_nonblocking_pipe(code: str, args: list[str], unbuffered: bool) -> tuple[int, bytes, bytes]:
    """Run ``code`` with stdout a non-blocking pipe read slowly (as CI runners' and containers' are)."""
    import fcntl

    r, w = os.pipe()
    fcntl.fcntl(w, fcntl.F_SETFL, fcntl.fcntl(w, fcntl.F_GETFL) | os.O_NONBLOCK)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    if unbuffered:
        env["PYTHONUNBUFFERED"] = "1"
    p = subprocess.Popen([sys.executable, "-c", code, *args], stdout=w, stderr=subprocess.PIPE, env=env)
    os.close(w)
    data = bytearray()
    while chunk := os.read(r, 1024):
        data += chunk
        time.sleep(0.001)
    os.close(r)
    err = p.stderr.read() if p.stderr else b""
    return p.wait(timeout=120), bytes(data), err


@pytest.mark.parametrize("unbuffered", [False, True])
def test_a_nonblocking_pipe_with_a_slow_reader_gets_every_byte(unbuffered):
    n = 3000  # 324 KB: far past a pipe's 64 KiB
    code, data, err = _slow_nonblocking_pipe(_PRINTER, [str(n)], unbuffered)
    assert code == 0 and err == b"done\n", err
    lines = data.decode().splitlines()
    assert len(lines) == n and all(line == f"{i:08d}" + "x" * 99 for i, line in enumerate(lines))


def test_the_sweep_csv_reaches_a_slow_nonblocking_reader_whole():
    """Issue 24: 390 of 20,001 lines were delivered, exit 0."""
    code, data, err = _slow_nonblocking_pipe(
        "import sys; from meshnb.cli import entry; sys.argv[0] = 'meshnb'; entry()",
        ["sweep", "--lr", "1e-3:1:3000:log", "--steps", "2", "--csv", "-", "--no-progress"],
        unbuffered=True,
    )
    assert code == 0, err
    lines = data.decode().splitlines()
    assert len(lines) == 3001 and [int(x.split(",")[0]) for x in lines[1:]] == list(range(3000))


def test_a_full_stdout_is_named(tmp_path):
    with open("/dev/full", "wb") as full:
        r = subprocess.run(
            [sys.executable, "-c", _PRINTER, "100"], stdout=full, stderr=subprocess.PIPE, text=True, check=False
        )
    assert r.returncode == 1 and "stdout: No space left on device" in r.stderr.splitlines()[-1]
    with open("/dev/full", "wb") as full:
        r = subprocess.run(
            [*meshnb_cli_args(), "train", "--steps", "2", "--json"], stdout=full, stderr=subprocess.PIPE, text=True
        )
    assert r.returncode == 1 and r.stderr == "meshnb: error: stdout: No space left on device\n"


def meshnb_cli_args() -> list[str]:
    return [sys.executable, "-m", "meshnb"]


def _queued(fd: int) -> int:
    """Bytes waiting in a pipe (FIONREAD)."""
    import fcntl
    import termios

    return int.from_bytes(fcntl.ioctl(fd, termios.FIONREAD, b"\0\0\0\0"), "little")


def test_ctrl_c_while_a_reader_stalls_finishes_the_line(tmp_path):
    """A stalled reader: a Ctrl-C ends the write at a line's end (within 2 s), then the run ends 130."""
    r, w = os.pipe()
    import fcntl

    fcntl.fcntl(w, fcntl.F_SETFL, fcntl.fcntl(w, fcntl.F_GETFL) | os.O_NONBLOCK)
    code = textwrap.dedent(
        """
        import sys, signal
        from meshnb import files
        from meshnb.interrupts import InterruptFlag
        InterruptFlag(raising=True).install()
        files.install_std_streams()
        try:
            sys.stdout.write(("y" * 999 + "\\n") * 1000)  # 1 MB: the pipe fills, the reader stalls
        except KeyboardInterrupt:
            print("stopped", file=sys.stderr)
            sys.exit(130)
        """
    )
    p = subprocess.Popen([sys.executable, "-c", code], stdout=w, stderr=subprocess.PIPE)
    os.close(w)
    first = os.read(r, 1500)  # it is writing; then the reader stalls with the pipe full
    deadline = time.monotonic() + 60
    while _queued(r) < 60000 and time.monotonic() < deadline:  # the pipe full: the writer waits on its reader
        time.sleep(0.05)
    p.send_signal(signal.SIGINT)
    data = bytearray(first)
    t0 = time.monotonic()
    import select

    while select.select([r], [], [], 60)[0] and (chunk := os.read(r, 1 << 16)):
        data += chunk
    assert p.wait(timeout=60) == 130 and p.stderr.read() == b"stopped\n"
    assert time.monotonic() - t0 < 30
    assert data.endswith(b"\n") and set(bytes(data).splitlines()) == {b"y" * 999} and len(data) < 1000 * 1000


def test_a_closed_stderr_keeps_stdout_clean():
    """With stderr closed, print(file=sys.stderr) went to stdout (sys.stderr None): stdout is the result only."""
    code = (
        "import sys; from meshnb import files; files.install_std_streams(); print('err', file=sys.stderr); print('out')"
    )
    r = subprocess.run(f"{sys.executable} -c {code!r} 2>&-", shell=True, capture_output=True, text=True, check=False)
    assert r.returncode == 0 and r.stdout == "out\n"


def test_orphan_shm_segments_are_removed_and_live_ones_kept():
    """MPICH's /dev/shm segments of ranks killed by hydra: removed at the next start once no live
    process maps or holds them (and they are not brand new)."""
    d = "/dev/shm" if os.path.isdir("/dev/shm") else None
    if d is None:
        pytest.skip("no /dev/shm")
    prefix = f"meshnb_test_shm_{os.getpid()}_"
    paths = {k: Path(d) / f"{prefix}{k}" for k in ("orphan", "mapped", "open", "new")}
    for p in paths.values():
        p.write_bytes(bytes(4096))
    old = time.time() - 3600
    for k in ("orphan", "mapped", "open"):
        os.utime(paths[k], (old, old))
    holder = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(f"""
            import mmap, sys, time
            f = open({str(paths["mapped"])!r}, "r+b"); m = mmap.mmap(f.fileno(), 4096); f.close()
            g = open({str(paths["open"])!r}, "rb")
            print("ready", flush=True); sys.stdin.read()
        """)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "ready\n"
        removed = files.remove_orphan_shm(prefix, min_age_s=60, directory=d)
        assert removed == [paths["orphan"].name]
        assert [k for k, p in paths.items() if p.exists()] == ["mapped", "open", "new"]
    finally:
        holder.communicate("")
        for p in paths.values():
            p.unlink(missing_ok=True)


@pytest.mark.parametrize("kind", ["symlink", "stream"])
def test_a_path_a_run_owns_is_no_link_and_no_stream(tmp_path, kind):
    """A checkpoint is rewritten at every save: only a rename makes that safe (never through a link)."""
    path = tmp_path / "ck"
    if kind == "symlink":
        path.symlink_to(tmp_path / "target")
    else:
        os.mkfifo(path)
    owns = "a file a run owns must be a regular file or a new name"
    with pytest.raises(files.OutputError, match=owns), files.hold(path, "checkpoint"):
        pass
    assert not files.lock_path(path).exists()


def test_a_stop_between_the_probes_calls_leaves_no_probe(tmp_path, monkeypatch):
    """check_output's probe of the directory is made and removed with the stop signals held: a Ctrl-C
    that lands right after the probe is made is raised once it is gone, not between the two calls
    (a sweep stopped there left ``.out.npz.tmpPID`` behind, 4 runs in 15 under load)."""
    real_open = os.open

    def open_then_stop(*args, **kwargs):
        fd = real_open(*args, **kwargs)
        signal.pthread_kill(threading.get_ident(), signal.SIGINT)  # the stop arrives the moment the probe exists
        return fd

    def stop(signum, frame):
        raise KeyboardInterrupt

    monkeypatch.setattr(files.os, "open", open_then_stop)
    previous = signal.signal(signal.SIGINT, stop)
    try:
        with pytest.raises(KeyboardInterrupt):
            files.check_output(tmp_path / "out.npz", "--npz")
    finally:
        signal.signal(signal.SIGINT, previous)
    assert list(tmp_path.iterdir()) == []


def test_an_os_error_is_one_line_naming_its_path() -> None:
    assert files.os_error_text(OSError(errno.EACCES, "Permission denied", "/x/y")) == "/x/y: Permission denied"
    assert files.os_error_text(OSError(errno.ENOSPC, "No space left on device")) == "No space left on device"


def test_xml_text_escapes_what_xml_forbids() -> None:
    assert files.xml_text("case\x1b[31m\x00 caf\u00e9 line\nnext") == "case\\x1b[31m\\x00 caf\u00e9 line\nnext"


def test_a_std_sink_writes_whole_and_leaves_its_descriptor_open() -> None:
    r, w = os.pipe()
    try:
        sink = files.StdSink(w, "stdout")
        assert sink.write(b"a line") == 6 and os.read(r, 100) == b"a line"
        assert (sink.writable(), sink.readable(), sink.seekable(), sink.isatty()) == (True, False, False, False)
        sink.close()
        assert sink.closed and sink.fileno() == w and os.write(w, b"still open") == 10  # the caller's descriptor
    finally:
        os.close(r)
        os.close(w)
