"""The ``ops``, ``pack`` and ``check`` commands of ``meshnb`` (``register`` adds them to its parser).

Every handler returns the exit code: 0 pass, 1 fail, 2 bad input (one line on stderr, never a
traceback).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from .fpu import OPS

EXIT_PASS, EXIT_FAIL, EXIT_BAD = 0, 1, 2


def _error(msg: str) -> int:
    print(f"meshnb: error: {msg}", file=sys.stderr)
    return EXIT_BAD


def _write(data: bytes) -> None:
    try:
        sys.stdout.buffer.write(data)
        sys.stdout.flush()
    except BrokenPipeError:  # `meshnb ops gen mul | head`
        pass


# -- ops ------------------------------------------------------------------------------------------


def _ops_gen(args: argparse.Namespace) -> int:
    from . import ops

    try:
        _write(ops.gen_lines(args.op, args.level, args.seed, args.count))
    except ValueError as e:
        return _error(str(e))
    return EXIT_PASS


def _ops_verify(args: argparse.Namespace) -> int:
    from . import ops
    from .pack import PackError, read_file

    try:
        data = sys.stdin.buffer.read() if args.file == "-" else read_file(Path(args.file), 1 << 31)
        report = ops.verify(args.op, data, args.show)
    except (ops.BadInput, PackError) as e:
        return _error(str(e))
    if args.json:
        print(json.dumps(report.to_json(), indent=1))
    else:
        print(report.text())
    return EXIT_PASS if report.wrong == 0 else EXIT_FAIL


# -- pack -----------------------------------------------------------------------------------------


def _pack(args: argparse.Namespace) -> int:
    from . import pack

    try:
        if args.verify:
            n = pack.verify_pack(args.dir)
            print(f"PASS: {n} files match {Path(args.dir) / 'manifest.json'}")
            return EXIT_PASS
        target = Path(args.dir)
        if target.exists() and not target.is_dir():
            return _error(f"{target}: exists and is not a directory")
        manifest = pack.write_pack(target, quick=args.quick)
    except pack.PackError as e:
        return _error(str(e))
    except OSError as e:
        return _error(f"{args.dir}: {e.strerror or e}")
    print(f"wrote {len(manifest['cases'])} cases, {len(manifest['files'])} files to {args.dir}")
    return EXIT_PASS


# -- check ----------------------------------------------------------------------------------------


def _u32(text: str) -> int:
    v = int(text, 16)
    if not 0 <= v <= 0xFFFFFFFF:
        raise ValueError(f"{text} is not a u32")
    return v


def _check(args: argparse.Namespace) -> int:
    from . import check
    from .pack import PackError, read_file

    try:
        if (args.case is None) == (args.view_in is None):
            return _error("give a CASE_DIR or --view-in IN.page (with the run options), not both")
        if args.case is not None:
            if args.steps is not None or args.set_lr or args.step_base or args.steps_per_task or args.systems:
                return _error("the run options go with --view-in; a case says them itself")
            setup = check.load_case(args.case)
        else:
            lr: dict[int, int] = {}
            for item in args.set_lr:
                step, _, word = item.partition(":")
                lr[int(step)] = _u32(word)
            base = None
            if args.step_base:
                hi, _, lo = args.step_base.partition(":")
                base = (_u32(hi) << 32 | _u32(lo)) if lo else int(hi, 0)
            setup = check.setup_from_run(
                read_file(Path(args.view_in)),
                4096 if args.steps is None else args.steps,
                systems=args.systems,
                steps_per_task=args.steps_per_task,
                set_lr=lr,
                step_base=base,
            )
        got = read_file(Path(args.page))
        trace = check.load_trace(args.trace) if args.trace else None
        pages = check.read_pages_dir(args.pages, setup.case.steps) if args.pages else None
        report = check.check(setup, got, system=args.system, got_trace=trace, pages=pages)
    except (PackError, ValueError) as e:
        return _error(str(e))
    if args.json:
        print(json.dumps(report.to_json(), indent=1))
    else:
        print(report.text())
    return report.exit_code


# -- wiring ---------------------------------------------------------------------------------------


def register(subparsers: Any) -> None:
    """Adds ``ops``, ``pack`` and ``check`` to an argparse sub-parser set (handler in ``args.handler``)."""
    p_ops = subparsers.add_parser("ops", help="float mode Z op vectors: generate, verify an executor's")
    sub = p_ops.add_subparsers(dest="ops_command", required=True)
    g = sub.add_parser("gen", help="print vectors 'A B RESULT' (hex words; from_u32: 'A RESULT')")
    g.add_argument("op", choices=OPS)
    g.add_argument(
        "--level",
        type=int,
        choices=(1, 2),
        default=1,
        help="1: every pair of the special set, the tininess probes, random pairs; 2: millions, weighted to the edges",
    )
    g.add_argument("--seed", type=int, default=1)
    g.add_argument("--count", type=int, default=None, help="random pairs (level 1: 20000, level 2: 2000000)")
    g.set_defaults(handler=_ops_gen)
    v = sub.add_parser("verify", help="check an executor's lines 'A B RESULT' against mode Z (exit 0/1/2)")
    v.add_argument("op", choices=OPS)
    v.add_argument("file", help="the executor's vectors ('-': stdin)")
    v.add_argument("--show", type=int, default=20, help="wrong lines to print (default 20)")
    v.add_argument("--json", action="store_true")
    v.set_defaults(handler=_ops_verify)

    p = subparsers.add_parser("pack", help="write the conformance pack (cases, pages, traces, manifest)")
    p.add_argument("dir")
    p.add_argument("--quick", action="store_true", help="shorter cases, no long run")
    p.add_argument("--verify", action="store_true", help="check an existing pack against its manifest")
    p.set_defaults(handler=_pack)

    c = subparsers.add_parser("check", help="check an executor's page (and trace) against a case; diagnose")
    c.add_argument("case", nargs="?", help="a case directory of a pack")
    c.add_argument("--page", required=True, help="the executor's view after the run (system --system)")
    c.add_argument("--trace", help="the executor's applied sums (u32 little-endian, 5 words a step)")
    c.add_argument("--pages", help="a directory of the executor's pages at task boundaries: N.page after N steps")
    c.add_argument("--system", type=int, default=0)
    c.add_argument("--json", action="store_true")
    c.add_argument("--view-in", help="instead of a case: the start page, with the run options below")
    c.add_argument("--steps", type=int)
    c.add_argument("--steps-per-task", type=int)
    c.add_argument("--set-lr", action="append", default=[], metavar="STEP:HEX")
    c.add_argument("--step-base", metavar="HI:LO")
    c.add_argument("--systems", type=int)
    c.set_defaults(handler=_check)
