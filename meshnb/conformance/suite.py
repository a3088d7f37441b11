"""``meshnb check PACK --exec CMD | --outputs DIR``: a whole pack against an executor, reported for CI.

Each case's executor runs as ``CMD CASE_DIR OUT_DIR`` under :mod:`.supervise` (or its outputs are read
from ``DIR/CASE/``) and is checked as ``meshnb check CASE`` does: PASS, FAIL or ERROR.
"""

from __future__ import annotations

import contextlib
import errno
import fnmatch
import itertools
import json
import os
import shlex
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time
import xml.etree.ElementTree as ET
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, wait
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from .. import files
from ..interrupts import WorkerPool
from . import check, experiment, faults, supervise
from .pack import PackError, case_names, read_file, write_new

DEFAULT_CASE_TIMEOUT = 3600.0  # seconds an executor may take for one case
STDERR_LINES = 20  # the last lines of an executor's stderr kept for an error's report
STDERR_BYTES = 64 << 10  # at most this much of its stderr is read back


@dataclass
class CaseResult:
    """One pack case's outcome: ``verdict`` is PASS, FAIL or ERROR."""

    name: str
    systems: int
    verdict: str
    where: str = ""  # the first difference: "step T (e, e*x)", "task 0 .. 64", "page: N words"
    models: list[str] = field(default_factory=list)  # fault models that reproduce the bits
    message: str = ""  # one line: the first difference (FAIL) or what went wrong (ERROR)
    exit_code: int | None = None  # the executor's (None: not run, or --outputs)
    stderr_tail: str = ""
    seconds: float = 0.0  # the executor's wall time
    report: check.Report | None = None  # the first failing system's report
    left_running: int = 0  # processes the executor left running when it ended (killed before judging)

    def to_json(self) -> dict[str, Any]:
        """The result as JSON-ready values (the report as ``check --json`` gives it)."""
        out = {k: v for k, v in self.__dict__.items() if k != "report"}
        out["report"] = None if self.report is None else self.report.to_json()
        return out


@dataclass
class SuiteResult:
    """Every case's :class:`CaseResult`, in the pack's order, and the reports made from them.

    Parameters
    ----------
    pack : str
        The pack's directory, as the reports name it.
    cases : list of CaseResult
        Every case checked.

    Examples
    --------
    >>> from meshnb.conformance.suite import CaseResult, SuiteResult
    >>> result = SuiteResult("pack", [CaseResult("default", 1, "PASS"), CaseResult("cluster-2", 2, "FAIL")])
    >>> result.exit_code, result.count("FAIL")
    (1, 1)
    """

    pack: str
    cases: list[CaseResult]

    def count(self, verdict: str) -> int:
        """How many cases ended with ``verdict``.

        Parameters
        ----------
        verdict : {"PASS", "FAIL", "ERROR"}
            The verdict counted.

        Returns
        -------
        int
            The number of such cases.

        Examples
        --------
        >>> from meshnb.conformance.suite import CaseResult, SuiteResult
        >>> SuiteResult("pack", [CaseResult("a", 1, "PASS"), CaseResult("b", 1, "FAIL")]).count("PASS")
        1
        """
        return sum(c.verdict == verdict for c in self.cases)

    @property
    def exit_code(self) -> int:
        """0 when every case passed, 1 otherwise."""
        return 0 if all(c.verdict == "PASS" for c in self.cases) else 1

    def summary(self) -> str:
        """The summary line: cases passed, failed and in error, of how many.

        Returns
        -------
        str
            One line, without a newline.

        Examples
        --------
        >>> from meshnb.conformance.suite import CaseResult, SuiteResult
        >>> SuiteResult("pack", [CaseResult("a", 1, "PASS"), CaseResult("b", 1, "ERROR", message="exit 3")]).summary()
        '1 passed, 0 failed, 1 errors of 2 cases'
        """
        return (
            f"{self.count('PASS')} passed, {self.count('FAIL')} failed, {self.count('ERROR')} errors"
            f" of {len(self.cases)} cases"
        )

    def table(self) -> str:
        """The table (case, systems, verdict, first difference, models), then the summary line.

        Returns
        -------
        str
            The table's lines and the summary line, without a final newline.

        Examples
        --------
        >>> from meshnb.conformance.suite import run_suite
        >>> pack, outputs = getfixture("quick_pack"), getfixture("tmp_path")
        >>> (outputs / "cluster-1").mkdir()
        >>> page = bytearray((pack / "cluster-1" / "out-0.page").read_bytes())
        >>> page[0] ^= 1  # one bit of PARAMS[0]
        >>> _ = (outputs / "cluster-1" / "out-0.page").write_bytes(page)
        >>> print(run_suite(pack, outputs=outputs, cases="cluster-1").table())
        case       systems  verdict  first difference  models / error
        cluster-1  1        FAIL     page: 1 words     no fault model reproduces these bits
        0 passed, 1 failed, 0 errors of 1 cases
        """
        rows = [("case", "systems", "verdict", "first difference", "models / error")]
        for c in self.cases:
            detail = ", ".join(c.models) if c.verdict == "FAIL" else c.message if c.verdict == "ERROR" else ""
            if (
                c.verdict == "FAIL"
                and not c.models
                and c.report is not None
                and "experiment" in (c.report.diagnosis or {})
                and not ((c.report.diagnosis or {}).get("localisation") or {}).get("found")
            ):
                detail = c.message.split("; ", 1)[1] if "; " in c.message else ""
            elif c.verdict == "FAIL" and not c.models:
                made = c.report is None or not (c.report.diagnosis or {}).get("skipped")
                detail = "no fault model reproduces these bits" if made else "diagnosis not made (--json: why)"
                found = ((c.report.diagnosis or {}).get("localisation") or {}).get("found") if c.report else None
                if found:  # the op, short: the report (--json, JUnit) says it in words
                    detail += "; single op " + ", ".join(f"{f['op']}:{f['alt']} (step {f['step']})" for f in found[:2])
                    detail += ", ..." if len(found) > 2 else ""
            rows.append((check.printable(c.name), str(c.systems), c.verdict, c.where, check.printable(detail)))
        widths = [max(len(r[i]) for r in rows) for i in range(4)]
        lines = ["  ".join(r[i].ljust(widths[i]) for i in range(4)) + "  " + r[4] for r in rows]
        return "\n".join(line.rstrip() for line in lines) + "\n" + self.summary()

    def to_json(self) -> dict[str, Any]:
        """The whole result as one JSON-ready document (``check --json`` for a pack).

        Returns
        -------
        dict
            ``pack``, the ``passed``, ``failed`` and ``errors`` counts, and ``cases`` (each
            :meth:`CaseResult.to_json`).

        Examples
        --------
        >>> from meshnb.conformance.suite import CaseResult, SuiteResult
        >>> doc = SuiteResult("pack", [CaseResult("default", 1, "PASS", seconds=0.5)]).to_json()
        >>> {k: v for k, v in doc.items() if k != "cases"}, doc["cases"][0]["verdict"]
        ({'pack': 'pack', 'passed': 1, 'failed': 0, 'errors': 0}, 'PASS')
        """
        return {
            "pack": self.pack,
            "passed": self.count("PASS"),
            "failed": self.count("FAIL"),
            "errors": self.count("ERROR"),
            "cases": [c.to_json() for c in self.cases],
        }

    def junit(self) -> bytes:
        """JUnit XML: one ``testcase`` per pack case, a ``failure`` (the first difference and the
        models) or an ``error`` (the executor's exit code and its last stderr lines).

        Returns
        -------
        bytes
            The XML document, UTF-8, with its declaration.

        Examples
        --------
        >>> import xml.etree.ElementTree as ET
        >>> from meshnb.conformance.suite import CaseResult, SuiteResult
        >>> error = CaseResult("cluster-2", 2, "ERROR", message="exit 1", stderr_tail="boom")
        >>> root = ET.fromstring(SuiteResult("pack", [CaseResult("default", 1, "PASS"), error]).junit())
        >>> root.get("tests"), root.get("errors"), [tc.get("name") for tc in root.iter("testcase")]
        ('2', '1', ['default', 'cluster-2'])
        >>> root.find(".//error").text
        'boom'
        """
        total = f"{sum(c.seconds for c in self.cases):.3f}"
        counts = {
            "tests": str(len(self.cases)),
            "failures": str(self.count("FAIL")),
            "errors": str(self.count("ERROR")),
            "skipped": "0",
        }
        x = files.xml_text  # any name, message or stderr: valid XML 1.0 (ANSI colours, a NUL escaped)
        top = ET.Element("testsuites", {"name": "meshnb check", **counts, "time": total})
        suite = ET.SubElement(
            top, "testsuite", {"name": x(f"meshnb conformance pack {self.pack}"), **counts, "time": total}
        )
        for c in self.cases:
            tc = ET.SubElement(
                suite, "testcase", {"classname": "meshnb.conformance", "name": x(c.name), "time": f"{c.seconds:.3f}"}
            )
            if c.verdict == "FAIL":
                el = ET.SubElement(tc, "failure", {"message": x(c.message), "type": "bits differ"})
                el.text = x(c.report.text() if c.report is not None else c.message)
            elif c.verdict == "ERROR":
                el = ET.SubElement(tc, "error", {"message": x(c.message), "type": "executor error"})
                el.text = x(c.stderr_tail or c.message)
        ET.indent(top)
        return ET.tostring(top, encoding="utf-8", xml_declaration=True) + b"\n"


@dataclass
class _Ran:
    exit_code: int | None
    seconds: float
    stderr_tail: str
    timed_out: bool = False
    failed_to_start: str = ""
    left_running: int = 0  # processes of the executor's still running when it ended (killed)
    outputs: tuple[list[bytes], np.ndarray | None] | None = None  # read once nothing of it was alive
    unusable: str = ""  # why the outputs could not be read (a PackError's message)


SUPERVISOR = Path(__file__).with_name("supervise.py")  # run as a file around each executor


class _Executors:
    """The live executors' supervisors (:mod:`.supervise`), for a timeout or Ctrl-C to stop."""

    def __init__(self, work: Path) -> None:
        self._lock = threading.Lock()
        self._live: dict[int, subprocess.Popen[bytes]] = {}
        self.stopped = False
        self.work = work

    def run(self, cmd: list[str], i: int, source: Path, setup: check.Setup, timeout: float) -> _Ran:
        """Case ``i`` run in a new, randomly named directory, its outputs read, the directory removed."""
        try:
            return self._run(cmd, i, source, setup, timeout)
        except OSError:
            if self.work.is_dir():
                raise  # a full TMPDIR, ...: the check's own error
            why = f"the check's directory {self.work} is gone (an executor removed it?): the case could not run"
            return _Ran(None, 0.0, "", failed_to_start=why)

    def _run(self, cmd: list[str], i: int, source: Path, setup: check.Setup, timeout: float) -> _Ran:
        with self._lock:
            if self.stopped:
                return _Ran(None, 0.0, "", failed_to_start="stopped")
        try:
            own = Path(tempfile.mkdtemp(prefix=f"{i}-", dir=self.work))
        except OSError as e:
            raise files.WriteError("the case's directory in TMPDIR", self.work, e) from None
        try:
            out, case_dir, log = own / "out", own / "case" / source.name, own / "stderr"
            try:
                out.mkdir()
                dir_fd = os.open(out, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            except OSError as e:
                raise files.WriteError("the case's OUT_DIR in TMPDIR", out, e) from None
            try:
                try:
                    private_case(setup.inputs, case_dir)
                except OSError as e:  # a full TMPDIR: the copy is named, and TMPDIR
                    raise files.WriteError("the executor's private copy of the case in TMPDIR", case_dir, e) from None
                ran = self._supervise([*cmd, str(case_dir), str(out)], log, timeout)
                if not (ran.failed_to_start or ran.timed_out or ran.exit_code):
                    try:
                        ran.outputs = read_outputs(setup, out, dir_fd)
                    except PackError as e:
                        ran.unusable = str(e).replace(f"{out}/", "")
            finally:
                os.close(dir_fd)
        finally:
            remove_tree(own, warn=False)  # what is left is said once, with the check's directory
        return ran

    def _supervise(self, argv: list[str], log: Path, timeout: float) -> _Ran:
        with self._lock:
            if self.stopped:
                return _Ran(None, 0.0, "", failed_to_start="stopped")
            with open(log, "wb") as err:
                proc = subprocess.Popen(
                    [sys.executable, str(SUPERVISOR), str(os.getpid()), repr(timeout), *argv],
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.PIPE,
                    stderr=err,
                    start_new_session=True,  # out of the terminal's Ctrl-C: the checker stops it
                )
            self._live[proc.pid] = proc
        try:
            try:
                line, _ = proc.communicate(timeout=timeout + SUPERVISOR_GRACE_S)
            except subprocess.TimeoutExpired:  # a supervisor that does not end: its orphans are the reaper's
                proc.kill()
                line, _ = proc.communicate()
        finally:
            with self._lock:
                self._live.pop(proc.pid, None)
        try:
            said = json.loads(line.decode("utf-8").splitlines()[-1])
        except (ValueError, IndexError, UnicodeDecodeError):
            why = "stopped" if self.stopped else "the executor's supervisor failed"
            return _Ran(None, 0.0, _tail(log), failed_to_start=why)
        if "failed_to_start" in said:
            return _Ran(None, 0.0, "", failed_to_start=str(said["failed_to_start"]))
        return _Ran(
            said["exit"], float(said["seconds"]), _tail(log), bool(said["timed_out"]), left_running=int(said["left"])
        )

    def stop(self) -> None:
        """Start no more executors and stop the live ones with every process they started (Ctrl-C)."""
        with self._lock:
            self.stopped = True
            for proc in self._live.values():
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    proc.terminate()  # the supervisor kills its executor's processes, then exits


SUPERVISOR_GRACE_S = 60.0  # beyond --case-timeout, the longest a supervisor may take to end


def _tail(log: Path) -> str:
    try:
        with open(log, "rb") as f:
            f.seek(max(0, os.fstat(f.fileno()).st_size - STDERR_BYTES))
            data = f.read(STDERR_BYTES)
    except OSError:
        return ""
    lines = data.decode("utf-8", "replace").splitlines()[-STDERR_LINES:]
    return "\n".join(check.printable(line) for line in lines)


def read_own(dir_fd: int, name: str, limit: int) -> bytes | None:
    """An executor's output ``name`` in ``OUT_DIR`` (open as ``dir_fd``), at most ``limit`` bytes; None:
    missing.  PackError unless it is a regular file of one name, not a link."""
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
    try:
        fd = os.open(name, flags, dir_fd=dir_fd)
    except FileNotFoundError:
        return None
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise PackError(f"{name}: a symbolic link; an executor's outputs must be files it wrote") from None
        with contextlib.suppress(OSError):  # a socket gives ENXIO: say what it is, not the errno's text
            mode = os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode
            if not stat.S_ISREG(mode):
                raise PackError(f"{name}: {files.file_kind(mode)}, not a regular file") from None
        raise PackError(f"{name}: {e.strerror}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise PackError(f"{name}: not a regular file")
        if st.st_nlink != 1:
            raise PackError(f"{name}: a hard link ({st.st_nlink} names); an executor's outputs must be files it wrote")
        chunks, left = [], limit + 1
        while left > 0 and (chunk := os.read(fd, min(left, 1 << 20))):
            chunks.append(chunk)
            left -= len(chunk)
    except OSError as e:
        raise PackError(f"{name}: {e.strerror}") from None
    finally:
        os.close(fd)
    data = b"".join(chunks)
    if len(data) > limit:
        raise PackError(f"{name}: larger than {limit} bytes")
    return data


def read_outputs(setup: check.Setup, out_dir: Path, dir_fd: int | None = None) -> tuple[list[bytes], np.ndarray | None]:
    """An executor's ``out-K.page`` files and ``trace.bin`` (or None) in ``out_dir``; PackError for bad ones."""
    case = setup.case
    trace = None
    if dir_fd is not None:
        pages = []
        for k in range(case.systems):
            got = read_own(dir_fd, f"out-{k}.page", 8192)
            if got is None:
                raise PackError(f"no out-{k}.page written")
            pages.append(check.page_bytes(got, f"out-{k}.page"))
        raw = read_own(dir_fd, "trace.bin", 20 * case.steps + 20)
        if raw is not None:
            if len(raw) % 20:
                raise PackError(f"trace.bin: {len(raw)} bytes is not a whole number of 20-byte steps")
            trace = np.frombuffer(raw, dtype="<u4").astype(np.uint32).reshape(-1, 5)
    else:
        for k in range(case.systems):
            if not os.path.lexists(out_dir / f"out-{k}.page"):
                raise PackError(f"no out-{k}.page written")
        pages = [
            check.page_bytes(read_file(out_dir / f"out-{k}.page", 8192, follow=True), f"out-{k}.page")
            for k in range(case.systems)
        ]
        if (out_dir / "trace.bin").exists() or (out_dir / "trace.bin").is_symlink():
            trace = check.load_trace(out_dir / "trace.bin", limit=20 * case.steps + 20)
    if trace is not None and trace.shape != setup.trace.shape:
        raise PackError(f"trace.bin: {len(trace)} steps, the run has {len(setup.trace)}")
    return pages, trace


def check_outputs(
    setup: check.Setup,
    out_dir: Path,
    progress: Callable[[str], None] | None = None,
    name: str | None = None,
    *,
    dir_fd: int | None = None,
) -> CaseResult:
    """Checks an executor's outputs in ``out_dir`` (unreadable: an ERROR) as the case ``name``."""
    try:
        got = read_outputs(setup, out_dir, dir_fd)
    except PackError as e:
        return _unusable(setup, name, str(e).replace(f"{out_dir}/", ""))
    return judge_outputs(setup, *got, progress=progress, name=name)


def _unusable(setup: check.Setup, name: str | None, why: str) -> CaseResult:
    case = setup.case
    return CaseResult(case.name if name is None else name, case.systems, "ERROR", message=f"unusable output: {why}")


def judge_outputs(
    setup: check.Setup,
    pages: list[bytes],
    trace: np.ndarray | None,
    *,
    progress: Callable[[str], None] | None = None,
    name: str | None = None,
) -> CaseResult:
    """The verdict on outputs read: PASS, or FAIL with the first failing system's report."""
    case = setup.case
    res = CaseResult(case.name if name is None else name, case.systems, "PASS")
    trace_ok = trace is None or np.array_equal(trace, setup.trace)
    differ = [k for k in range(case.systems) if pages[k] != setup.expected[k]]
    if not differ and trace_ok:
        return res
    k = differ[0] if differ else 0
    rep = check.check(setup, pages[k], system=k, got_trace=trace, progress=progress)
    res.verdict, res.report = "FAIL", rep
    if t := rep.trace:
        res.where = f"step {t['step']} ({', '.join(t['sums'])})"
        first = f"trace parts at step {t['step']} (absolute {t['absolute_step']}): {', '.join(t['sums'])}"
    else:
        d, n = rep.diff[0], len(rep.diff)
        res.where = f"task {rep.task['from']} .. {rep.task['steps_done']}" if rep.task else f"page: {n} words"
        first = f"{n} page words differ, first {d['field']}: {d['expected']} -> {d['got']}"
    res.models = [m["name"] for m in (rep.diagnosis or {}).get("models", [])]
    res.message = f"system {k}: {first}" + (f" ({len(differ)} systems differ)" if len(differ) > 1 else "")
    skipped = (rep.diagnosis or {}).get("skipped")
    named = ", ".join(res.models) if res.models else "no fault model reproduces these bits"
    if skipped:
        named = f"diagnosis not made: {skipped}"
    loc = (rep.diagnosis or {}).get("localisation")
    if loc and not res.models and (loc["found"] or loc["page"] or loc.get("space")):
        # the op, or the page's transformation: JUnit's failure message carries it too
        named += f"; {check.printable(check.localisation_summary(loc))}"
    res.message += f"; {named}"
    return res


def select(pack_dir: Path, pattern: str | None, *, verify: bool = True) -> list[str]:
    """The pack's case names matching the shell glob ``pattern``; PackError when none do."""
    names = case_names(pack_dir, verify=verify)
    if pattern is not None:
        names = [n for n in names if fnmatch.fnmatchcase(n, pattern)]
        if not names:
            raise PackError(f"--cases {pattern!r}: no case of {pack_dir} matches")
    return names


def run_suite(
    pack_dir: str | os.PathLike[str],
    *,
    exec_cmd: str | None = None,
    outputs: str | os.PathLike[str] | None = None,
    cases: str | None = None,
    jobs: int = 1,
    case_timeout: float = DEFAULT_CASE_TIMEOUT,
    verify: bool = True,
    progress: Callable[[str], None] | None = None,
    experiments: bool = True,
    keep_experiments: str | os.PathLike[str] | None = None,
) -> SuiteResult:
    """Runs the pack's cases on an executor (``exec_cmd``) or reads the outputs made elsewhere
    (``outputs``), and checks them.  Bad input raises before any executor runs; a KeyboardInterrupt
    kills the live executors.  A failing case's cause is named only when experiments prove it.

    Parameters
    ----------
    pack_dir : path
        The pack (``meshnb pack``'s directory).
    exec_cmd : str, optional
        The executor, run as ``CMD CASE_DIR OUT_DIR`` for each case (``--exec``).
    outputs : path, optional
        Instead of ``exec_cmd``: the outputs made elsewhere, ``OUTPUTS/CASE/`` (``--outputs``).
    cases : str, optional
        A shell glob: only the cases it matches (``--cases``); None: every case.
    jobs : int, default 1
        Executors run at once, 1 to 256 (``-j``).
    case_timeout : float, default DEFAULT_CASE_TIMEOUT
        Seconds an executor may take for one case; then it is killed and the case is an ERROR.
    verify : bool, default True
        Check every file against the pack's manifest; False reads a pack without one (``--no-manifest``).
    progress : callable, optional
        Told what is being done (one line each: a case checked, a model replayed).
    experiments : bool, default True
        With ``exec_cmd``: locate each failing case by running the executor on meshnb's pages.
    keep_experiments : path, optional
        A new or empty directory where every experiment is written as a case (``--experiments``).

    Returns
    -------
    SuiteResult
        Every case's verdict, in the pack's order, with the table, JSON and JUnit reports.

    Raises
    ------
    PackError
        A pack, case or outputs directory that cannot be read, or a glob that matches no case.
    ValueError
        An executor or options that cannot be used.

    Examples
    --------
    >>> import sys
    >>> from meshnb.conformance.suite import run_suite
    >>> pack, tmp = getfixture("quick_pack"), getfixture("tmp_path")
    >>> adapter = tmp / "adapter.py"  # an executor: meshnb itself, run as the case says (CASE_DIR OUT_DIR)
    >>> _ = adapter.write_text('''
    ... import json, sys
    ... import meshnb
    ... case, out = sys.argv[1], sys.argv[2]
    ... steps = json.load(open(f"{case}/case.json"))["steps"]
    ... r = meshnb.train(steps, view_in=open(f"{case}/in-0.page", "rb").read(), keep_trace=True)
    ... open(f"{out}/out-0.page", "wb").write(r.page)
    ... open(f"{out}/trace.bin", "wb").write(r.trace.tobytes())
    ... ''')
    >>> result = run_suite(pack, exec_cmd=f"{sys.executable} {adapter}", cases="default")
    >>> result.summary()
    '1 passed, 0 failed, 0 errors of 1 cases'
    >>> try:
    ...     run_suite(pack, exec_cmd="no-such-executor", cases="default")
    ... except ValueError as e:
    ...     print(e)
    --exec: 'no-such-executor' is not a command that can be run (not found, or not executable)
    """
    root = Path(pack_dir)
    if (exec_cmd is None) == (outputs is None):
        raise ValueError("give --exec CMD or --outputs DIR, not both")
    if not isinstance(jobs, int) or isinstance(jobs, bool) or not 1 <= jobs <= 256:
        raise ValueError(f"-j {jobs!r}: a number of executors from 1 to 256")
    if not 0 < case_timeout <= 7 * 86400:
        raise ValueError(f"--case-timeout {case_timeout!r}: seconds, more than 0 and at most a week")
    cmd: list[str] = []
    if exec_cmd is not None:
        try:
            cmd = shlex.split(exec_cmd)
        except ValueError as e:
            raise ValueError(f"--exec {exec_cmd!r}: {e}") from None
        if not cmd:
            raise ValueError("--exec: an empty command")
        if shutil.which(cmd[0]) is None:
            raise ValueError(f"--exec: {cmd[0]!r} is not a command that can be run (not found, or not executable)")
    keep = Path(keep_experiments) if keep_experiments is not None else None
    if keep is not None:
        if exec_cmd is None:
            raise ValueError("--experiments DIR goes with --exec (the experiments run the executor)")
        if keep.exists() and (not keep.is_dir() or any(keep.iterdir())):
            raise ValueError(f"--experiments {keep}: not a new or empty directory")
    out_root = Path(outputs) if outputs is not None else None
    if out_root is not None and not out_root.is_dir():
        raise PackError(f"--outputs {out_root}: not a directory")
    names = select(root, cases, verify=verify)
    setups = {n: check.load_case(root / n, verify=verify) for n in names}  # every case refused up front
    results: dict[str, CaseResult] = {}
    if out_root is not None:
        for n in names:
            if progress is not None:
                progress(f"checking {check.printable(n)}")
            results[n] = check_outputs(setups[n], out_root / n, progress, n)
        return SuiteResult(str(root), [results[n] for n in names])
    try:
        work = Path(tempfile.mkdtemp(prefix="meshnb-check-"))
    except OSError as e:
        raise files.WriteError("the check's directory in TMPDIR", tempfile.gettempdir(), e) from None
    runner = _Executors(work)
    try:
        with _Reaper(), WorkerPool(jobs) as pool:
            pending: dict[Future[_Ran], str] = {}
            try:  # a stop while the cases are handed out too: the pool must not wait for live executors
                for i, n in enumerate(names):  # each case's directory is made when its executor starts
                    pending[pool.submit(runner.run, cmd, i, root / n, setups[n], case_timeout)] = n
                while pending:
                    # a bounded wait: a signal the kernel gave to another thread (a second one while
                    # the main thread had one pending) is handled only when this thread runs again
                    done, _ = wait(pending, timeout=0.25, return_when=FIRST_COMPLETED)
                    for fut in done:
                        n = pending.pop(fut)
                        results[n] = _judge(n, setups[n], fut.result(), case_timeout, progress)
                if experiments:
                    end = time.monotonic() + EXPERIMENT_SECONDS
                    _experiments(
                        [results[n] for n in names], setups, _exp_runner(runner, cmd, work, case_timeout, end), keep
                    )
            except BaseException:
                runner.stop()
                for fut in pending:
                    fut.cancel()
                raise
    finally:
        remove_tree(work)
    return SuiteResult(str(root), [results[n] for n in names])


EXPERIMENT_SECONDS = 10.0  # seconds a whole check may spend on experiments


def _exp_runner(runner: _Executors, cmd: list[str], work: Path, timeout: float, end: float) -> experiment.Runner:
    """Runs the executor on an experiment as on a case, killed at the case timeout or at ``end``."""
    count = itertools.count(1_000_000)

    def run(e: experiment.Experiment) -> tuple[list[bytes], np.ndarray | None] | str:
        assert e.sub is not None
        i = next(count)
        inputs = {"case.json": (json.dumps(e.case, indent=1, sort_keys=True) + "\n").encode()}
        inputs.update((f"in-{k}.page", page) for k, page in enumerate(e.in_pages))
        trace = e.trace if e.trace is not None else np.zeros((0, 5), np.uint32)
        limit = min(timeout, max(1.0, end - time.monotonic()))
        ran = runner.run(cmd, i, Path("case"), check.Setup(e.sub, e.in_pages, e.expected, trace, inputs=inputs), limit)
        if ran.failed_to_start:
            return ran.failed_to_start
        if ran.timed_out:
            return "ran past the case timeout"
        if ran.exit_code:
            last = ran.stderr_tail.splitlines()[-1] if ran.stderr_tail else "no stderr"
            return f"exit code {ran.exit_code}: {last}"
        return ran.outputs if ran.outputs is not None else ran.unusable

    return run


def _candidates(res: CaseResult) -> dict[str, faults.Model]:
    """The causes the diagnosis names: its fault models and its single-op changes."""
    dg = (res.report.diagnosis or {}) if res.report else {}
    out = {m["name"]: faults.model(m["name"]) for m in dg.get("models", []) if m["name"] != "executor-samples"}
    for f in (dg.get("localisation") or {}).get("found", []):
        out[f"single op {f['op']}:{f['alt']}"] = faults.single_op(f["op"], f["alt"])
    return out


def _experiments(
    cases: list[CaseResult], setups: dict[str, check.Setup], run: experiment.Runner, keep_dir: Path | None = None
) -> None:
    """Locates each failing case by experiment and keeps only the causes the experiments prove (in the
    report, message and models); with ``keep_dir``, every experiment is saved there as a case."""
    t0 = time.monotonic()
    made: list[experiment.Experiment] = []
    separate: list[experiment.Experiment] | None = None
    known_proved: set[str] = set()  # causes proved (and ruled out) by an earlier case's experiments
    known_ruled: set[str] = set()
    for res in cases:
        if res.verdict != "FAIL" or res.report is None or res.report.diagnosis is None:
            continue
        dg = dict(res.report.diagnosis)
        left = EXPERIMENT_SECONDS - (time.monotonic() - t0)
        head = res.message.split("; ", 1)[0]
        cands = _candidates(res)
        if left <= 0:
            loc = None
            dg["experiment"] = {"skipped": f"the check's {EXPERIMENT_SECONDS:g} s for experiments were spent"}
        else:
            hint = res.report.trace["step"] if res.report.trace else None
            loc = experiment.locate(setups[res.name], run, hint=hint, max_seconds=min(experiment.MAX_SECONDS, left))
            dg["experiment"] = {"location": loc.to_json()}
        proof = None
        ex: experiment.Explanation | None = None
        hx: experiment.Explanation | None = None  # the header rules' explanation, where only words differ
        page_seen: list[experiment.Experiment] = []  # the page rules' designed experiments
        if loc is not None:
            made += loc.experiments
        base = None
        if loc is not None and loc.step is not None:
            base = next((e for e in loc.experiments if (e.start, e.steps) == (loc.step, 1) and e.differs), None)
            if base is not None and isinstance(base.got, str):
                base = None
        if loc is not None and (cands or base is not None):
            if separate is None:
                separate = experiment.separating()
                experiment.run_all(separate, run)
                made += separate
            seen = loc.experiments + separate
            if base is not None:
                budget = min(experiment.DESIGN_SECONDS, max(0.0, EXPERIMENT_SECONDS - (time.monotonic() - t0)))
                every = experiment.distinct({**experiment.every_cause(), **cands})
                alias = {c: next(n for n, m in every.items() if m.assignment == cands[c].assignment) for c in cands}
                ex = experiment.explain(every, seen, run, base, max_seconds=budget)
                made += ex.designed
                if ex.verdict == "none" and base.what.startswith("system"):  # the sums right, page words not
                    hx = experiment.explain_header(loc.experiments, run, base, max_seconds=budget)
                    made += hx.designed
                    dg["experiment"]["header"] = hx.to_json()
                    if hx.verdict in ("proved", "equivalent"):
                        ex = hx
                    else:  # a step's loss written at another word: start steps part the page rules
                        px = experiment.explain_page(loc.experiments, run, base, max_seconds=budget)
                        made, page_seen = made + px.designed, px.designed
                        dg["experiment"]["page"] = px.to_json()
                        ex = px if px.verdict in ("proved", "equivalent") else ex
                dg["experiment"]["explanation"] = ex.to_json()
                named_ok = ex.survivors if ex.verdict in ("proved", "equivalent") else []
                proof = experiment.Proof(
                    [c for c in cands if alias[c] in named_ok],
                    {c: ex.ruled_out[alias[c]] for c in cands if alias[c] in ex.ruled_out},
                    len(seen) + len(ex.designed),
                )
            else:
                proof = experiment.prove(cands, seen)
            dg["experiment"]["proof"] = proof.to_json()
        page_proved: list[str] = []
        loc_d = dg.get("localisation")
        if loc is not None and loc_d and loc_d.get("page") and not loc_d.get("found"):
            page_proved = experiment.prove_page(loc_d["page"], loc.experiments + page_seen)
            dg["experiment"]["page_proved"] = page_proved
        proved = set(proof.proved) if proof else set()
        if ex is not None and ex.verdict in ("proved", "equivalent"):
            proved |= set(ex.survivors)
        if proof is not None:
            known_proved.update(proof.proved)
            known_ruled.update(proof.ruled_out)
        else:  # no experiment of its own: what earlier cases' experiments proved of the same causes
            proved = {c for c in cands if c in known_proved and c not in known_ruled}
            if proved:
                dg["experiment"]["proved_by_earlier_cases"] = sorted(proved)
        named_models = [m for m in dg.get("models", []) if m["name"] in proved or m["name"] == "executor-samples"]
        dropped = [m for m in dg.get("models", []) if m not in named_models]
        dg["models"] = named_models
        if dropped:
            dg["not_proved"] = dropped
        if loc_d and loc_d.get("page") and page_proved != loc_d["page"]:
            kept = [f for f in loc_d["page"] if f in page_proved]
            loc_d = {**loc_d, "page": kept, "not_proved": [f for f in loc_d["page"] if f not in kept]}
            dg["localisation"] = loc_d
        if loc_d and loc_d.get("found"):
            keep = [f for f in loc_d["found"] if f"single op {f['op']}:{f['alt']}" in proved]
            if len(keep) != len(loc_d["found"]):
                loc_d = {**loc_d, "found": keep, "not_proved": [f for f in loc_d["found"] if f not in keep]}
                dg["localisation"] = loc_d
        res.report.diagnosis = dg
        res.models = [m["name"] for m in named_models]
        if ex is not None and ex.verdict in ("proved", "equivalent"):
            res.models = [n for n in ex.survivors if n != "executor-samples"]
            named = ex.sentence()
        elif res.models:
            named = ", ".join(res.models)
        elif loc_d and (loc_d.get("found") or loc_d.get("page")):
            named = f"no fault model reproduces these bits; {check.printable(check.localisation_summary(loc_d))}"
            if loc is not None and not loc_d.get("found"):  # a page transformation: where it was seen too
                named += f"; seen: {check.printable(loc.where)}"
            if hx is not None and hx is not ex:
                named += f"; header rules: {hx.sentence()}"
        else:
            ruled = ", ".join(sorted(proof.ruled_out if proof else [m["name"] for m in dropped]))
            why = [f"ruled out by experiment: {ruled}"] if ruled else []
            if ex is not None:
                why.append(ex.sentence())
            if hx is not None and hx is not ex:
                why.append(f"header rules: {hx.sentence()}")
            named = "cause not proved" + (f" ({'; '.join(why)})" if why else "")
            if loc is not None:
                named += f"; seen: {check.printable(loc.where)}"
            elif loc_d:
                named += f"; {check.printable(loc_d['where'])}"
        res.message = f"{head}; {named}"
    if keep_dir is not None:
        keep_dir.mkdir(parents=True, exist_ok=True)
        experiment.save_all(made, keep_dir)


def private_case(inputs: dict[str, bytes], dest: Path) -> None:
    """The executor's copy of a case's verified inputs in a new directory ``dest``."""
    dest.mkdir(parents=True)
    for rel, data in inputs.items():
        write_new(dest / rel, data)


def remove_tree(path: Path, *, warn: bool = True) -> None:
    """Removes the checker's temporary directory whatever is left there, with stop signals held; what
    cannot be removed is said in one line (if ``warn``)."""

    def writable(func: Callable[..., Any], p: str, exc: Any) -> None:
        with contextlib.suppress(OSError):
            os.chmod(os.path.dirname(p), 0o700)
            if os.path.isdir(p) and not os.path.islink(p):
                os.chmod(p, 0o700)
                shutil.rmtree(p, ignore_errors=True)
            else:
                os.unlink(p)

    held = threading.current_thread() is threading.main_thread()
    stops = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP}
    if held:
        signal.pthread_sigmask(signal.SIG_BLOCK, stops)
    try:
        shutil.rmtree(path, onerror=writable)
        if os.path.lexists(path):
            shutil.rmtree(path, ignore_errors=True)
        if warn and os.path.lexists(path):
            with contextlib.suppress(OSError, ValueError):
                print(f"meshnb: warning: could not remove {path}", file=sys.stderr)
    finally:
        if held:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, stops)


class _Reaper:
    """This process as a child subreaper while checking: an executor's orphans become its children and
    are killed on the way out (children it had before are left alone)."""

    def __enter__(self) -> _Reaper:
        self.before = set(supervise.children())
        self.on = supervise.prctl(supervise.PR_SET_CHILD_SUBREAPER, 1)
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            supervise.kill_strays(self.before)
        finally:
            if self.on:
                supervise.prctl(supervise.PR_SET_CHILD_SUBREAPER, 0)


def _judge(
    name: str,
    setup: check.Setup,
    ran: _Ran,
    timeout: float,
    progress: Callable[[str], None] | None,
) -> CaseResult:
    case = replace(setup.case, name=name)
    code = ran.exit_code or 0
    why = ran.failed_to_start
    if not why and ran.timed_out:
        why = f"the executor ran past --case-timeout {timeout:g} s and was killed"
    elif not why and code != 0:
        last = ran.stderr_tail.splitlines()[-1] if ran.stderr_tail else "no stderr"
        why = f"the executor failed ({f'killed by signal {-code}' if code < 0 else f'exit code {code}'}): {last}"
    if why:
        return CaseResult(
            case.name, case.systems, "ERROR", message=why, exit_code=ran.exit_code, stderr_tail=ran.stderr_tail,
            seconds=ran.seconds, left_running=ran.left_running,
        )  # fmt: skip
    if progress is not None:
        progress(f"checking {check.printable(case.name)}")
    if ran.outputs is None:
        res = _unusable(setup, name, ran.unusable)
    else:
        res = judge_outputs(setup, *ran.outputs, progress=progress, name=name)
    res.exit_code, res.stderr_tail, res.seconds = ran.exit_code, ran.stderr_tail, ran.seconds
    res.left_running = ran.left_running
    return res
