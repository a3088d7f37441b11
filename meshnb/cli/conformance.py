"""The ``ops``, ``pack`` and ``check`` commands of ``meshnb``: each handler returns 0 pass, 1 fail, 2 bad input."""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import stat
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..conformance.fpu import OPS
from .base import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, EXIT_PIPE, error, error_line, names_stdout


def _write(data: bytes) -> int:
    """Write to stdout (the text where it takes no bytes); 141 quietly when its reader is gone."""
    try:
        raw = getattr(sys.stdout, "buffer", None)
        if raw is not None:
            raw.write(data)
        else:
            sys.stdout.write(data.decode())
        sys.stdout.flush()
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # the final flush stays quiet
        return EXIT_PIPE
    return EXIT_OK


def _say(text: str, verdict: int) -> int:
    """Writes ``text`` and a newline to stdout; ``verdict``, or :func:`_write`'s code where it failed."""
    code = _write((text + "\n").encode())
    return code if code != EXIT_OK else verdict


_PATHS = {"dir": "DIR", "case": "CASE_DIR", "page": "--page", "trace": "--trace", "pages": "--pages"}
_PATHS |= {"view_in": "--view-in", "outputs": "--outputs", "experiments": "--experiments"}


def _guarded(handler: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """A command that stops on Ctrl-C, SIGTERM or SIGHUP with one line and 130, never a traceback."""

    def run(args: argparse.Namespace) -> int:
        for name, flag in _PATHS.items():  # Path('') is '.': an empty path would read the working directory
            if getattr(args, name, None) == "":
                return error(f"{flag} '': an empty path is not a file name")
        try:
            return handler(args)
        except KeyboardInterrupt:
            return _stopped()
        except Exception as e:
            # train's Ctrl-C at a task boundary: meshnb.results is loaded only by the commands that run one
            results = sys.modules.get("meshnb.results")
            if results is None or not isinstance(e, results.RunInterrupted):
                raise
            return _stopped()

    return run


def _stopped() -> int:
    from ..interrupts import installed_flag

    flag = installed_flag()
    error_line(f"meshnb: {flag.word if flag is not None else 'interrupted'}")
    return EXIT_INTERRUPTED


def _progress(asked: bool) -> Callable[[str], None] | None:
    """A progress printer to stderr: when asked (``--progress``) or when stderr is a terminal."""
    if not (asked or (sys.stderr is not None and sys.stderr.isatty())):
        return None
    return lambda text: print(f"meshnb: {text}", file=sys.stderr, flush=True)


# -- ops ------------------------------------------------------------------------------------------


def _ops_gen(args: argparse.Namespace) -> int:
    from ..conformance import ops

    try:
        data = ops.gen_lines(args.op, args.level, args.seed, args.count)
    except ValueError as e:
        return error(str(e))
    return _write(data)


def _stdin_reader() -> Callable[[int], bytes]:
    """stdin's ``read``, or BadInput when there is none to read (closed, or not a stream)."""
    from ..conformance import ops

    if sys.stdin is None:
        raise ops.BadInput("stdin is closed: give the file's name, or pipe the vectors in")
    try:
        mode = os.fstat(sys.stdin.fileno()).st_mode
    except (OSError, ValueError) as e:
        raise ops.BadInput(f"stdin cannot be read ({e})") from None
    if stat.S_ISDIR(mode):
        raise ops.BadInput("stdin is a directory")
    raw = sys.stdin.buffer

    def read(n: int) -> bytes:
        try:
            return raw.read(n)
        except OSError as e:
            raise ops.BadInput(f"stdin: {e.strerror or e}") from None

    return read


def _ops_verify(args: argparse.Namespace) -> int:
    from .. import files
    from ..conformance import ops

    whole = (args.level, args.seed, args.count) if args.whole else None
    if not args.whole and (args.level, args.seed, args.count) != (None, None, None):
        return error("--level, --seed and --count name the set --whole demands: give --whole with them")
    if whole is not None:
        whole = (whole[0] or 1, 1 if whole[1] is None else whole[1], whole[2])
        try:
            ops.generate(args.op, whole[0], whole[1], 0 if whole[2] is None else whole[2])  # the set's arguments
        except ValueError as e:
            return error(str(e))
    try:
        if args.file == "-":
            report = ops.verify_chunks(args.op, ops.chunks_of(_stdin_reader()), args.show, whole)
        else:
            with files.open_input(args.file, "vector file") as f:
                report = ops.verify_chunks(args.op, ops.chunks_of(f.read), args.show, whole)
    except (ops.BadInput, files.InputError) as e:
        return error(str(e))
    except OSError as e:
        return error(f"{args.file}: {e.strerror or e}")
    text = json.dumps(report.to_json(), indent=1) if args.json else report.text()
    return _say(text, EXIT_OK if report.passed else EXIT_FAILED)


# -- pack -----------------------------------------------------------------------------------------


def _pack(args: argparse.Namespace) -> int:
    from .. import files
    from ..conformance import pack

    try:
        if args.verify:
            n = pack.verify_pack(args.dir)
        else:
            manifest = pack.write_pack(args.dir, quick=args.quick)
    except pack.PackError as e:
        return error(str(e))
    except files.WriteError as e:
        return error(str(e), EXIT_FAILED)
    except OSError as e:
        return error(f"{args.dir}: {e.strerror or e}", EXIT_FAILED)
    # printed outside the try: a reader gone (`| head -c1`) is the program's quiet 141, not a pack error
    if args.verify:
        print(f"PASS: {n} files match {Path(args.dir) / 'manifest.json'}")
    else:
        print(f"wrote {len(manifest['cases'])} cases, {len(manifest['files'])} files to {args.dir}")
    return EXIT_OK


# -- check ----------------------------------------------------------------------------------------


def _files_of(root: str) -> set[tuple[int, int]]:
    """The (device, inode) of every file under ``root``: a file of the pack under any name."""
    owned: set[tuple[int, int]] = set()
    for base, _, names in os.walk(root):
        for name in names:
            with contextlib.suppress(OSError):
                st = os.stat(os.path.join(base, name))
                owned.add((st.st_dev, st.st_ino))
    return owned


def warn_inputs_of_the_pack(case: str, named: dict[str, str | None]) -> None:
    """Warns on stderr where ``--page`` or ``--trace`` is a file of the case's own pack under any name."""
    owned = _files_of(os.path.realpath(os.path.join(case, os.pardir)))
    for flag, path in named.items():
        with contextlib.suppress(OSError):
            if path is not None and (os.stat(path).st_dev, os.stat(path).st_ino) in owned:
                error_line(
                    f"meshnb: warning: {flag} {path} is a file of the pack the case {case} is in: "
                    "this checks the pack against itself, not an executor's output"
                )


def refuse_outputs_of_the_pack(outputs: str, pack: str) -> None:
    """Refuses (OutputError) an ``--outputs`` directory in the pack, or whose outputs are the pack's files."""
    from .. import files

    real, root = os.path.realpath(outputs), os.path.realpath(pack)
    if real == root or real.startswith(root.rstrip("/") + "/"):
        raise files.OutputError(
            f"--outputs {outputs}: the pack {pack} itself (or inside it): "
            "the pack would be judged against its own files"
        )
    owned = _files_of(root)
    with contextlib.suppress(OSError):
        for case in sorted(os.listdir(outputs)):
            case_dir = os.path.join(outputs, case)
            if not os.path.isdir(case_dir):
                continue
            for name in sorted(os.listdir(case_dir)):
                if not (name == "trace.bin" or (name.startswith("out-") and name.endswith(".page"))):
                    continue
                path = os.path.join(case_dir, name)
                try:
                    st = os.stat(path)
                except OSError:
                    continue
                target = os.path.realpath(path)
                if (st.st_dev, st.st_ino) in owned or target.startswith(root.rstrip("/") + "/"):
                    raise files.OutputError(
                        f"--outputs {outputs}: {path} is a file of the pack {pack}: "
                        "an executor's outputs must be its own"
                    )


def _suite(args: argparse.Namespace) -> int:
    from .. import files
    from ..conformance import suite
    from ..conformance.pack import PackError

    if args.case is None:
        return error("--exec and --outputs check a whole pack: give its directory")
    if args.page or args.trace or args.pages or args.view_in is not None or args.system:
        return error("--page, --trace, --pages, --system and --view-in check one case; not with --exec/--outputs")
    if args.outputs is not None:
        try:
            refuse_outputs_of_the_pack(args.outputs, args.case)
        except files.OutputError as e:
            return error(str(e))
    if args.junit is not None:
        try:
            files.refuse_overwrite("--junit", args.junit, "pack", args.case)  # first: no probe inside the pack
            files.refuse_overwrite("--junit", args.junit, "outputs directory", args.outputs)
            files.check_output(args.junit, "--junit")
        except files.OutputError as e:
            return error(str(e))
    try:
        result = suite.run_suite(
            args.case,
            exec_cmd=args.exec,
            outputs=args.outputs,
            cases=args.cases,
            jobs=args.jobs,
            case_timeout=args.case_timeout,
            verify=not args.no_manifest,
            progress=_progress(args.progress),
            keep_experiments=args.experiments,
        )
    except (PackError, ValueError) as e:
        return error(str(e))
    text = files.json_text(result.to_json(), indent=1) if args.json else result.table()
    stdout_failed: OSError | None = None
    code = EXIT_OK
    if args.junit is not None and names_stdout(args.junit):  # stdout carries one thing: the XML
        sys.stderr.write(text + "\n")
    else:
        try:
            code = _write((text + "\n").encode())  # first: a failed --junit write still shows the verdicts
        except OSError as e:  # a full stdout: the report is still written, then the error is said
            stdout_failed, code = e, EXIT_FAILED
    if args.junit is not None:
        try:
            files.write_atomic(args.junit, result.junit(), "--junit")
        except OSError as e:
            return error(str(e), EXIT_FAILED)
    if stdout_failed is not None:
        raise stdout_failed
    return code if code != EXIT_OK else result.exit_code


def _check(args: argparse.Namespace) -> int:
    from ..conformance import check
    from ..conformance.pack import PackError, read_file

    if args.exec is not None or args.outputs is not None:
        return _suite(args)
    if args.junit is not None or args.cases or args.jobs != 1 or args.experiments is not None:
        return error("--junit, --cases, --experiments and -j go with --exec or --outputs (a whole pack)")
    try:
        if (args.case is None) == (args.view_in is None):
            return error("give a CASE_DIR or --view-in IN.page (with the run options), not both")
        if args.page is None:
            return error("--page OUT.page: the executor's page (or --exec/--outputs for a whole pack)")
        if args.case is not None:
            if args.steps is not None or args.set_lr or args.step_base or args.steps_per_task or args.systems:
                return error("the run options go with --view-in; a case says them itself")
            setup = check.load_case(args.case, verify=not args.no_manifest)
            warn_inputs_of_the_pack(args.case, {"--page": args.page, "--trace": args.trace})
        else:
            setup = check.setup_from_run(  # --set-lr and --step-base parsed as train parses them
                read_file(Path(args.view_in), follow=True),
                4096 if args.steps is None else args.steps,
                systems=args.systems,
                steps_per_task=args.steps_per_task,
                set_lr=args.set_lr or (),  # (step, numpy.uint32 word) pairs, in the order given
                step_base=args.step_base,
            )
        got = check.page_bytes(read_file(Path(args.page), follow=True), f"--page {args.page}")
        trace = check.load_trace(args.trace) if args.trace else None
        if trace is not None and trace.shape != setup.trace.shape:
            return error(f"--trace {args.trace}: {len(trace)} steps, the run has {len(setup.trace)}")
        pages = check.read_pages_dir(args.pages, setup.case.steps) if args.pages else None
        report = check.check(
            setup, got, system=args.system, got_trace=trace, pages=pages, progress=_progress(args.progress)
        )
    except (PackError, ValueError) as e:
        from ..runspec import OptionError

        return error(e.for_cli() if isinstance(e, OptionError) else str(e))  # the flags as the user wrote them
    from ..files import json_text

    return _say(json_text(report.to_json(), indent=1) if args.json else report.text(), report.exit_code)


def _bounded(parse: Callable[[str], Any], low: float, high: float, what: str) -> Callable[[str], Any]:
    """An argparse type: ``parse``'s value (the options table's rule) from ``low`` to ``high``, else ``what``."""

    def arg(text: str) -> Any:
        try:
            v = parse(text)
        except ValueError:
            v = math.nan
        if not low <= v <= high:
            raise argparse.ArgumentTypeError(f"{text!r}: {what}")
        return v

    return arg


# -- wiring ---------------------------------------------------------------------------------------


def _add(parser: Any, *rows: tuple[Any, ...]) -> None:
    """Adds each row's argument to ``parser``: a row is its names, then its keyword arguments (a dict)."""
    for *names, kw in rows:
        parser.add_argument(*names, **kw)


def register(subparsers: Any) -> None:
    """Adds ``ops``, ``pack`` and ``check`` to an argparse sub-parser set (handler in ``args.handler``)."""
    from ..options import add_flags, arg_type, option_fields, parse_count, parse_positive

    p_ops = subparsers.add_parser("ops", help="float mode Z op vectors: generate, verify an executor's")
    sub = p_ops.add_subparsers(dest="ops_command", required=True)
    g = sub.add_parser("gen", help="print vectors 'A B RESULT' (hex words; from_u32: 'A RESULT')")
    v = sub.add_parser("verify", help="check an executor's lines 'A B RESULT' against mode Z (exit 0/1/2)")
    p = subparsers.add_parser("pack", help="write the conformance pack (cases, pages, traces, manifest)")
    c = subparsers.add_parser(
        "check", help="check an executor's page (and trace) against a case, or a whole pack (--exec/--outputs)"
    )
    w = c.add_argument_group("a whole pack (PACK is the pack's directory)")
    like_train = {name: flag for name, _, flag in option_fields()}  # train's flags: one parse of each value

    def train_flag(name: str, help: str) -> None:
        flag = like_train[name]
        assert flag.flag is not None and flag.parse is not None
        c.add_argument(flag.flag, dest=name, type=arg_type(flag.parse), metavar=flag.metavar, help=help)

    jobs = _bounded(parse_count, 1, 256, "a number of executors from 1 to 256")
    week = _bounded(parse_positive, 0, 7 * 86400, "seconds, more than 0 and at most a week (604800)")
    # fmt: off
    _add(g,
         ("op", dict(choices=OPS, help="the operation whose vectors to print")),
         ("--level", dict(type=int, choices=(1, 2), default=1, help="1: every pair of the special set, the tininess "
                          "probes, random pairs; 2: millions, weighted to the edges")),
         ("--seed", dict(type=int, default=1,
                         help="the random pairs' seed: the same seed, the same lines (default 1)")),
         ("--count", dict(type=int, default=None, help="random pairs (level 1: 20000, level 2: 2000000)")))
    _add(v,
         ("op", dict(choices=OPS, help="the operation of the executor's lines")),
         ("file", dict(help="the executor's vectors ('-': stdin)")),
         ("--show", dict(type=int, default=20, help="wrong lines to print (default 20)")),
         ("--json", dict(action="store_true", help="print the verdict as one JSON document")),
         ("--whole", dict(action="store_true", help="demand the whole generated set (gen's --level, --seed, --count; "
                          "default 1, 1, the level's): every vector, in order; the verdict says how much of it the "
                          "file held (exit 1 short of it)")),
         ("--level", dict(type=int, choices=(1, 2), default=None, help="with --whole: the set's level (default 1)")),
         ("--seed", dict(type=int, default=None, help="with --whole: the set's seed (default 1)")),
         ("--count", dict(type=int, default=None, help="with --whole: the set's random pairs (default: the level's)")))
    _add(p,
         ("dir", dict(help="the directory to write the pack into (with --verify: the pack to check)")),
         ("--quick", dict(action="store_true", help="shorter cases, no long run")),
         ("--verify", dict(action="store_true", help="check an existing pack against its manifest")))
    _add(c,
         ("case", dict(nargs="?", help="a case directory of a pack (with --exec or --outputs: the pack)")),
         ("--page", dict(help="the executor's view after the run (system --system)")),
         ("--trace", dict(help="the executor's applied sums (u32 little-endian, 5 words a step)")),
         ("--pages", dict(help="a directory of the executor's pages at task boundaries: N.page after N steps")),
         ("--system", dict(type=arg_type(parse_count), default=0, metavar="K",
                           help="the system whose page --page is (default 0)")),
         ("--json", dict(action="store_true", help="print the report as one JSON document")),
         ("--view-in", dict(help="instead of a case: the start page, with the run options below")))
    # fmt: on
    train_flag("steps", "with --view-in: the run's steps (default 4096)")
    train_flag("steps_per_task", "with --view-in: steps per TASK call, as train's")
    # The LR changes and the step base: train's flags (the options table), the same spellings and parsing.
    add_flags(c, [row for row in option_fields() if row[0] in ("set_lr", "step_base")])
    train_flag("systems", "with --view-in: the cluster's systems (default 1)")
    # fmt: off
    _add(c,
         ("--no-manifest", dict(action="store_true",
                                help="check a case (or pack) without its manifest.json (not verified)")),
         ("--progress", dict(action="store_true",
                             help="say on stderr what the diagnosis is doing (on a terminal: always)")))
    _add(w,
         ("--exec", dict(metavar="CMD", help="run 'CMD CASE_DIR OUT_DIR' for every case (CMD split as a shell does)")),
         ("--outputs", dict(metavar="DIR", help="the executor's results made elsewhere: DIR/CASE/out-K.page")),
         ("--junit", dict(metavar="FILE", help="also write a JUnit XML report (one test case per pack case)")),
         ("--cases", dict(metavar="GLOB", help="only the cases whose names match (a shell glob)")),
         ("--experiments", dict(metavar="DIR", help="with --exec: write every experiment run on the executor (a new or "
                                "empty DIR) as a case directory; 'check DIR --exec CMD --no-manifest' reruns them")),
         ("-j", "--jobs", dict(type=jobs, default=1, metavar="N", help="executors run at once (default 1)")),
         ("--case-timeout", dict(type=week, default=3600.0, metavar="S",
                                 help="seconds an executor may take for one case; then it is killed (default 3600)")))
    # fmt: on
    for parser, handler in ((g, _ops_gen), (v, _ops_verify), (p, _pack), (c, _check)):
        parser.set_defaults(handler=_guarded(handler))
