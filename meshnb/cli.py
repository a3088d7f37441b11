"""The command line: ``meshnb train``, ``sweep``, ``bench``, and ``ops``/``pack``/``check`` (checking
an executor, :mod:`meshnb.conformance`); also ``python -m meshnb``.

``train``'s flags are made from the options table (:class:`~meshnb.options.RunOptions`): names,
parsing and help in one place.  Exit codes: 0 done, 1 a failure while running, 2 bad arguments
or bad input, 130 interrupted, 141 stdout closed early (as a Unix tool killed by SIGPIPE, but
quietly).  Every error is one line on stderr.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NoReturn

from . import files
from .interrupts import InterruptFlag

if TYPE_CHECKING:
    from .options import RunOptions
    from .results import RunResult

# Light imports only up here: numba loads inside main(), after Ctrl-C is held (interrupts.py).

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INTERRUPTED, EXIT_PIPE = 0, 1, 2, 130, 141


class UsageError(Exception):
    """Bad arguments or bad input: exit 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # one line, not argparse's usage block
        raise UsageError(message)


def _add_train(sub: Any) -> None:
    from .options import arg_type, option_fields

    t = sub.add_parser("train", help="run the train program and print params, loss and digests")
    clusters = t.add_argument_group("clusters")
    for name, _, flag in option_fields():
        if flag.flag is None:
            continue  # library only
        group = clusters if flag.cluster else t
        if flag.parse is None:  # a switch: --ieee
            group.add_argument(flag.flag, dest=name, action="store_true", help=flag.help)
        else:
            group.add_argument(
                flag.flag,
                dest=name,
                type=arg_type(flag.parse),
                metavar=flag.metavar,
                help=flag.help,
                action="append" if flag.repeat else "store",
            )
        if name == "view_in":  # the CLI's own flags sit beside the options they go with
            t.add_argument("--view-out", metavar="PATH", help="write the final page here (atomically)")
            t.add_argument("--json", action="store_true", help="print one JSON document instead of the summary")
            t.add_argument(
                "--progress",
                action=argparse.BooleanOptionalAction,
                default=None,
                help="progress bar on stderr (default: when stderr is a terminal)",
            )


def _parse_paths(text: str) -> list[str]:
    names = [p for p in text.split(",") if p]
    if not names:
        raise ValueError(f"{text!r} names no path")
    return names


def build_parser() -> argparse.ArgumentParser:
    from .options import arg_type, parse_seconds

    parser = _Parser(prog="meshnb", description="The compute mesh's train program, bit-exact in float mode Z.")
    sub = parser.add_subparsers(dest="command", parser_class=_Parser, metavar="COMMAND")
    _add_train(sub)
    b = sub.add_parser("bench", help="steps per second of each path on this machine (every figure bit-verified)")
    b.add_argument(
        "--seconds", type=arg_type(parse_seconds), metavar="S", help="time budget per path (default 2; --quick 0.25)"
    )
    b.add_argument("--quick", action="store_true", help="a ~3 s run: shorter budgets and bit checks")
    b.add_argument("--json", action="store_true", help="print one JSON document instead of the table")
    b.add_argument("--paths", type=arg_type(_parse_paths), metavar="A,B", help="only these paths")
    from .conformance.cli import register as add_conformance  # ops, pack, check: each sets its handler
    from .sweep_cli import register as add_sweep

    add_sweep(sub)
    add_conformance(sub)
    return parser


def _glue_values(argv: Sequence[str], parser: argparse.ArgumentParser) -> list[str]:
    """``--flag -1:0:0`` -> ``--flag=-1:0:0``: argparse would take a value that starts with ``-``
    for an option and say "expected one argument"; glued, the value reaches its own check."""
    takes_value = {
        s for action in _all_actions(parser) for s in action.option_strings if action.nargs is None and action.type
    }
    out: list[str] = []
    args = list(argv)
    i = 0
    while i < len(args):
        if args[i] in takes_value and i + 1 < len(args) and args[i + 1].startswith("-") and args[i + 1] != "--":
            out.append(f"{args[i]}={args[i + 1]}")
            i += 2
        else:
            out.append(args[i])
            i += 1
    return out


def _all_actions(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    actions = list(parser._actions)
    for a in parser._actions:
        if isinstance(a, argparse._SubParsersAction):
            for p in a.choices.values():
                actions += _all_actions(p)
    return actions


def _summary(result: RunResult) -> str:
    lines = []
    for s in result.systems:
        head = f"system {s.system}: " if len(result.systems) > 1 else ""
        params = "  ".join(f"{name}={float(p):.9g}" for name, p in zip("abcd", s.params))
        lines += [
            f"{head}params  {params}",
            f"{head}hex     {' '.join(s.params_hex)}",
            f"{head}loss    {float(s.last_loss):.9g} (last step)" if result.steps else f"{head}loss    (no step run)",
            f"{head}digest  {s.digest}",
            f"{head}trace   {s.trace_digest}",
        ]
        if s.counters.get("timeouts"):
            lines.append(f"{head}timeouts {s.counters['timeouts']}")
    rate = result.steps_per_second
    per = 1e9 / rate if rate and rate != float("inf") else 0.0
    lines.append(f"speed   {rate:,.0f} steps/s ({per:.1f} ns/step), {result.steps} steps in {result.seconds:.3f} s")
    if result.first_call_seconds:
        lines.append(
            f"jit     {result.first_call_seconds:.3f} s before the steps (compile, or load from numba's cache)"
        )
    return "\n".join(lines)


def _options(args: argparse.Namespace) -> RunOptions:
    """The run's options from the flags given (the table has the defaults)."""
    from .options import RunOptions, option_fields

    given: dict[str, Any] = {}
    for name, _, flag in option_fields():
        value = getattr(args, name, None)
        if flag.flag is None or value is None or value is False:
            continue
        given[name] = value
    if given.pop("z", False):  # --ieee
        given["z"] = False
    if "stalls" in given:
        given["stalls"] = tuple(given["stalls"])
    given["progress"] = args.progress if args.progress is not None else (not args.json and sys.stderr.isatty())
    opts = RunOptions.from_keywords(**given)
    if not opts.is_cluster:
        for name, _, flag in option_fields():
            if flag.cluster and name in given:
                raise UsageError(f"{flag.flag} is for clusters: give --systems N (or --resume PATH)")
    return opts


def _train(args: argparse.Namespace) -> int:
    from .api import run
    from .results import RunInterrupted, SaveFailed

    opts = _options(args)
    if args.view_out:
        files.check_output(args.view_out, "--view-out")
        for flag, path in (("--checkpoint", opts.checkpoint), ("--resume", opts.resume)):
            if path is not None and os.path.realpath(path) == os.path.realpath(args.view_out):
                raise UsageError(f"--view-out {args.view_out} is the {flag} file: the page would replace the run")
    if opts.checkpoint is not None:
        files.check_output(opts.checkpoint, "--checkpoint")
    try:
        result = run(opts)
    except SaveFailed as failed:  # the run is done: its result first, then why the file is not
        if _prints(args):
            print(json.dumps(failed.result.to_json()) if args.json else _summary(failed.result), flush=True)
        raise
    except RunInterrupted as stop:
        if not _prints(args):
            return EXIT_INTERRUPTED
        saved = []
        if args.view_out:
            files.write_atomic(args.view_out, stop.result.page, "--view-out")
            saved.append(f"page written to {args.view_out}")
        if opts.checkpoint:
            saved.append(f"checkpoint written to {opts.checkpoint}")
        print(
            f"meshnb: interrupted after {stop.result.steps} steps" + "".join(f"; {s}" for s in saved), file=sys.stderr
        )
        return EXIT_INTERRUPTED
    if not _prints(args):
        return EXIT_OK  # mpi: rank 0 prints (and writes) every rank's results
    print(json.dumps(result.to_json()) if args.json else _summary(result), flush=True)
    if args.view_out:
        files.write_atomic(args.view_out, result.page, "--view-out")
    return EXIT_OK


def _prints(args: argparse.Namespace | None, argv: Sequence[str] | None = None) -> bool:
    """False on the MPI ranks other than 0 (--backend mpi): they print nothing but their own
    failures, and an error in the arguments is every rank's, printed once by rank 0."""
    if args is not None:
        mpi = getattr(args, "backend", None) == "mpi"
    else:  # the arguments did not parse: look for the flag itself
        a = list(sys.argv[1:] if argv is None else argv)
        mpi = "--backend=mpi" in a or any(x == "--backend" and y == "mpi" for x, y in zip(a, a[1:]))
    if not mpi:
        return True
    from .backends.mpi_exchange import is_root

    return is_root()


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``meshnb`` with ``argv`` in this process (tests, scripts): returns the exit code.  Ctrl-C
    from here on is a flag: a run stops at its next task boundary; before a run starts it ends the
    command at the next check, never with a traceback from an import.  The caller's handler is
    restored on return."""
    flag = InterruptFlag()
    on_main = signal.getsignal(signal.SIGINT) is not None and _is_main_thread()
    previous = signal.signal(signal.SIGINT, flag) if on_main else None
    try:
        return _main(argv, flag)
    finally:
        if on_main:
            signal.signal(signal.SIGINT, previous)


def entry() -> NoReturn:
    """The ``meshnb`` program (its console script and ``python -m meshnb``): as :func:`main`, but a
    Ctrl-C that comes once the command is done changes nothing.  Its handler is then SIGINT's
    ignore, which the interpreter's shutdown keeps (it resets a Python handler to the default,
    which would end the process by SIGINT after the result was printed)."""
    flag = InterruptFlag()
    signal.signal(signal.SIGINT, flag)
    code = _main(None, flag)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    sys.exit(code)


def _is_main_thread() -> bool:
    import threading

    return threading.current_thread() is threading.main_thread()


def _main(argv: Sequence[str] | None, flag: InterruptFlag) -> int:
    args = None
    try:
        from .options import OptionError
        from .results import ClusterError, RunInterrupted

        parser = build_parser()
        args = parser.parse_args(_glue_values(sys.argv[1:] if argv is None else argv, parser))
        if args.command is None:  # bare `meshnb`: what it can do
            parser.print_help(sys.stderr)
            return EXIT_USAGE
        if args.command in ("train", "bench") and sys.stdout is None and _prints(args):
            raise UsageError("stdout is closed (>&-): the result would have nowhere to go")
        if args.command == "bench":
            from . import bench  # not imported by `meshnb train`: start-up stays short

            signal.signal(signal.SIGINT, signal.default_int_handler)  # bench stops where it is
            if flag.hit:  # a Ctrl-C while it loaded
                raise KeyboardInterrupt
            return bench.main(args.seconds, args.quick, args.json, args.paths)
        if hasattr(args, "handler"):  # a command that runs itself (ops, pack, check, sweep)
            signal.signal(signal.SIGINT, signal.default_int_handler)
            if flag.hit:
                raise KeyboardInterrupt
            return int(args.handler(args))
        if flag.hit:
            raise KeyboardInterrupt
        return _train(args)
    except KeyboardInterrupt:
        print("meshnb: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        # The reader of stdout is gone (`meshnb train --json | head -c1`): end quietly; point
        # stdout at /dev/null so that the interpreter's final flush does not complain.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_PIPE
    except Exception as e:
        if isinstance(e, RunInterrupted):  # a run inside a command (bench's cluster paths) saw the Ctrl-C
            print("meshnb: interrupted", file=sys.stderr)
            return EXIT_INTERRUPTED
        if isinstance(e, OptionError):
            text, code = e.for_cli(), EXIT_USAGE
        elif isinstance(e, (UsageError, ValueError)):
            text, code = str(e), EXIT_USAGE
        elif isinstance(e, (OSError, ClusterError)):
            text, code = str(e), EXIT_FAILED
        else:
            raise
        if code != EXIT_USAGE or _prints(args, argv):
            print(f"meshnb: error: {text}", file=sys.stderr)
        return code


if __name__ == "__main__":
    entry()
