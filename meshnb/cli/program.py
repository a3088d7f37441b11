"""The ``meshnb`` program: its parser, Ctrl-C, SIGTERM and SIGHUP held as a flag (exit 130, 143, 129),
and every error one line with :mod:`meshnb.cli.base`'s exit codes."""

from __future__ import annotations

import argparse
import errno
import os
import signal
import sys
import threading
from collections.abc import Sequence
from typing import NoReturn

from ..interrupts import STOP_SIGNALS, InterruptFlag, forget_handled_interrupt, phase
from .base import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_PIPE, EXIT_USAGE, Parser, UsageError, error, error_line, prints

# Light imports only up here: numba loads inside a command, after Ctrl-C is held (interrupts.py).


def build_parser() -> argparse.ArgumentParser:
    """The ``meshnb`` parser with every command (loads no numba: the docs' CLI reference uses it)."""
    from . import bench, train
    from .conformance import register as add_conformance  # ops, pack, check
    from .cuda import register as add_cuda  # ptx audit, gpu-check
    from .sweep import register as add_sweep

    parser = Parser(prog="meshnb", description="The compute mesh's train program, bit-exact in float mode Z.")
    sub = parser.add_subparsers(dest="command", parser_class=Parser, metavar="COMMAND")
    train.register(sub)
    add_sweep(sub)
    bench.register(sub)
    add_conformance(sub)
    add_cuda(sub)
    return parser


def _glue_values(argv: Sequence[str], parser: argparse.ArgumentParser) -> list[str]:
    """``--flag -1:0:0`` -> ``--flag=-1:0:0``, so that a value starting with ``-`` reaches its own check
    (argparse: "expected one argument"); a known option after a flag (``--csv --json``) is not glued."""
    actions = _all_actions(parser)
    takes_value = {
        s
        for action in actions
        for s in action.option_strings
        if action.nargs is None and type(action) in (argparse._StoreAction, argparse._AppendAction)
    }
    known = {s for action in actions for s in action.option_strings}  # `--csv --json`: no value given
    out: list[str] = []
    for arg in argv:
        if out and out[-1] in takes_value and arg.startswith("-") and arg != "--" and arg.split("=")[0] not in known:
            out[-1] += "=" + arg
        else:
            out.append(arg)
    return out


def _all_actions(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    """The parser's actions and its sub-parsers', recursively."""
    actions = list(parser._actions)
    for a in parser._actions:
        if isinstance(a, argparse._SubParsersAction):
            for p in a.choices.values():
                actions += _all_actions(p)
    return actions


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``meshnb`` with ``argv`` in this process: the exit code (Ctrl-C a flag, the caller's handler restored)."""
    flag = InterruptFlag()
    on_main = signal.getsignal(signal.SIGINT) is not None and threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGINT, flag) if on_main else None
    try:
        return _main(argv, flag)
    finally:
        if on_main:
            signal.signal(signal.SIGINT, previous)
        forget_handled_interrupt()  # the caller's process ends by its own exit code


def entry(flag: InterruptFlag) -> NoReturn:
    """The ``meshnb`` program, its SIGINT handler already ``flag``: as :func:`main`, but a Ctrl-C once the
    command is done changes nothing (a handled one ends the process by its exit code)."""
    code = _main(None, flag)
    for s in STOP_SIGNALS:
        signal.signal(s, signal.SIG_IGN)
    forget_handled_interrupt()  # a Ctrl-C handled inside an exec'd string must not end the process by SIGINT
    phase("done")  # test hook: the command is over, a Ctrl-C from here on changes nothing
    sys.exit(code)


def _main(argv: Sequence[str] | None, flag: InterruptFlag) -> int:
    """Parse and run the command; every error one line with its exit code."""
    args = None
    try:
        from .. import options, results  # noqa: F401 - their error types are caught below

        parser = build_parser()
        args = parser.parse_args(_glue_values(sys.argv[1:] if argv is None else argv, parser))
        if args.command is None:  # bare `meshnb`: what it can do
            parser.print_help(sys.stderr)
            return EXIT_USAGE
        if args.command != "sweep" and sys.stdout is None and prints(args):  # sweep: when it prints there
            raise UsageError("stdout is closed (>&-): the result would have nowhere to go")
        # train holds Ctrl-C (SIGTERM, SIGHUP) to a task boundary; the others stop where they are,
        # a long run inside them (a sweep's chunks) holds it to its own boundaries
        flag.raising = args.command != "train"
        if flag.hit:  # a Ctrl-C while the command loaded
            raise KeyboardInterrupt
        code = int(args.handler(args))
        return flag.exit_code if code == EXIT_INTERRUPTED and flag.signum else code
    except KeyboardInterrupt:
        error_line(f"meshnb: {flag.word}")
        return flag.exit_code
    except Exception as e:
        run_interrupted = getattr(sys.modules.get("meshnb.results"), "RunInterrupted", ())
        if isinstance(e, run_interrupted):  # a run inside a command (bench's cluster paths) saw the Ctrl-C
            error_line(f"meshnb: {flag.word}")
            return flag.exit_code
        # (an error while importing them, e.g. MESHNB_SHA256=sha-ni on a CPU without SHA-NI, leaves
        # their names unbound: take them from the modules that did load)
        option_error = getattr(sys.modules.get("meshnb.options"), "OptionError", ())
        cluster_error = getattr(sys.modules.get("meshnb.results"), "ClusterError", ())
        if isinstance(e, option_error):
            text, code = e.for_cli(), EXIT_USAGE
        elif isinstance(e, (UsageError, ValueError)):
            text, code = str(e), EXIT_USAGE
        elif isinstance(e, BrokenPipeError) or (isinstance(e, OSError) and e.errno == errno.EPIPE):
            # the reader of stdout is gone (`meshnb train --json | head -c1`): end quietly, stdout at
            # /dev/null so that the interpreter's final flush does not complain
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            return EXIT_PIPE
        elif isinstance(e, OSError):
            from ..files import os_error_text

            text, code = os_error_text(e), EXIT_FAILED
        elif isinstance(e, cluster_error):
            text, code = str(e), EXIT_FAILED
        else:
            raise
        if code != EXIT_USAGE or prints(args, argv):
            error(text)
        return code
