"""``meshnb train``: run the train program and print its params, loss and digests.

Its flags are made from the options table (:class:`~meshnb.options.RunOptions`): names, parsing
and help in one place.  Ctrl-C is held as a flag from the command's first line (:func:`meshnb.cli.entry`)
and ends the run at its next task boundary: ``--view-out`` and ``--checkpoint`` are written first."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .. import files
from .base import EXIT_INTERRUPTED, EXIT_OK, UsageError, add_progress, names_stdout, prints, wants_progress

if TYPE_CHECKING:
    from ..options import RunOptions
    from ..results import RunResult


def register(sub: Any) -> None:
    """Add ``train`` to the ``meshnb`` parser's subcommands (``--ieee`` is kept in ``z``: see :func:`options`)."""
    from ..options import add_flags, option_fields

    t = sub.add_parser("train", help="run the train program and print params, loss and digests")
    clusters = t.add_argument_group("clusters")

    def own_flags() -> None:  # the CLI's own flags sit beside the options they go with
        t.add_argument("--view-out", metavar="PATH", help="write the final page here (atomically)")
        t.add_argument("--json", action="store_true", help="print one JSON document instead of the summary")
        add_progress(t)

    add_flags(t, option_fields(), lambda _, flag: clusters if flag.cluster else t, {"view_in": own_flags})
    t.set_defaults(handler=run)


_SHORT_RUN_S = 0.05  # a run's fixed costs are ~1 ms: below this its per-step figure is mostly them


def summary(result: RunResult) -> str:
    """The human summary of a run: each system's params, last loss, digests; the speed."""
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
    took = f"{result.seconds * 1e3:.3f} ms" if result.seconds < 1 else f"{result.seconds:.3f} s"
    lines.append(
        f"speed   {rate:,.0f} steps/s ({per:.1f} ns/step): {result.steps} steps in {took}, the whole run "
        "(steps, host loop, trace digest; JIT apart)"
    )
    if result.steps and result.seconds < _SHORT_RUN_S:  # fixed costs (buffers, the trace's thread) dominate
        lines.append("        a run this short is mostly fixed costs: the step loop's own rate is `meshnb bench`'s")
    if result.first_call_seconds:
        lines.append(
            f"jit     {result.first_call_seconds:.3f} s before the steps (compile, or load from numba's cache)"
        )
    return "\n".join(lines)


def options(args: argparse.Namespace) -> RunOptions:
    """The run's options from the flags given (the table has the defaults)."""
    from ..options import RunOptions, given_options, option_fields

    given = given_options(args, option_fields())
    if "stalls" in given:
        given["stalls"] = tuple(given["stalls"])
    given["progress"] = wants_progress(args, quiet=args.json)
    # The flags mean what their keywords mean: RunOptions refuses what train() refuses (--stall,
    # --checkpoint, a cluster's --backend without --systems) and accepts what it accepts
    # (--timeout-ms, --give-up, --checkpoint-every without a cluster: checked, and nothing to time).
    return RunOptions.from_keywords(**given)


def refuse_meaningless_timeout(args: argparse.Namespace, opts: RunOptions) -> None:
    """Refuse (:class:`UsageError`) a ``--timeout-ms`` given where there is no round to time out: one
    system alone, or a backend with no exchange page (the library's ``timeout_ms=`` is accepted)."""
    from ..backend_table import BY_NAME

    if getattr(args, "timeout_ms", None) is None:
        return
    if not opts.is_cluster:
        raise UsageError("--timeout-ms is a round's timeout: one system alone has no rounds (give --systems N)")
    if not BY_NAME[opts.backend_name].exchange:
        raise UsageError(
            f"--timeout-ms is a round's timeout: the {opts.backend_name} backend has no exchange "
            "and no rounds to time out"
        )


def run(args: argparse.Namespace) -> int:
    """Run ``meshnb train``; returns the exit code (errors are raised for :mod:`meshnb.cli.program`)."""
    from ..api import run

    opts = options(args)
    refuse_meaningless_timeout(args, opts)
    if args.view_out is not None:  # '' included: check_output refuses it
        files.check_output(args.view_out, "--view-out")
        if names_stdout(args.view_out):  # the very file stdout writes to (/dev/null passes)
            raise UsageError(
                f"--view-out {args.view_out}: the file stdout writes to, which carries "
                f"{'the JSON document' if args.json else 'the summary'}: one thing on stdout; "
                "write the page to a file of its own (or redirect stdout elsewhere)"
            )
        for flag, path in (("--checkpoint", opts.checkpoint), ("--resume", opts.resume)):
            if path is not None and os.path.realpath(path) == os.path.realpath(args.view_out):
                raise UsageError(f"--view-out {args.view_out} is the {flag} file: the page would replace the run")
    if opts.checkpoint is not None:
        files.check_output(opts.checkpoint, "--checkpoint")  # a file kept from another run: api.run refuses it
    # A stream (a FIFO, a pipe, a device) is opened before the run, as sweep's outputs are: a FIFO
    # with no reader is refused now, not after the run, whose page it would lose.
    early = None
    if args.view_out and prints(args) and files.output_kind(args.view_out) == "stream":
        early = files.Output(args.view_out, "--view-out")

    def save(page: bytes) -> None:
        if early is None:
            files.write_atomic(args.view_out, page, "--view-out")
        else:
            early.write(page)
            early.commit()

    try:
        return _run_and_report(args, opts, run, save)
    except OSError as e:
        flagged = checkpoint_write_as_flag(e)
        if flagged is e:
            raise
        raise flagged from None
    finally:
        if early is not None:
            early.abort()  # closes a stream not yet committed (a failed or stopped run); else a no-op


def checkpoint_write_as_flag(e: OSError) -> OSError:
    """A checkpoint the run could not write (a :class:`~meshnb.files.WriteError`, or the
    :class:`~meshnb.results.SaveFailed` around one) naming ``--checkpoint PATH``, as the user wrote
    it (the library's says ``checkpoint PATH``); any other error as it is."""
    from ..results import SaveFailed

    inner = e.error if isinstance(e, SaveFailed) else e
    if not isinstance(inner, files.WriteError) or inner.what != "checkpoint":
        return e
    flagged = files.WriteError("--checkpoint", inner.filename, inner)
    return SaveFailed(e.result, flagged) if isinstance(e, SaveFailed) else flagged


def _run_and_report(
    args: argparse.Namespace, opts: RunOptions, run: Callable[[RunOptions], RunResult], save: Callable[[bytes], None]
) -> int:
    """Run ``opts`` and print its summary (or JSON); ``save`` writes the page to ``--view-out``."""
    from ..results import RunInterrupted, SaveFailed

    try:
        result = run(opts)
    except SaveFailed as failed:  # the run is done: its result first, then why the file is not
        if prints(args):
            print(json.dumps(failed.result.to_json()) if args.json else summary(failed.result), flush=True)
        raise
    except RunInterrupted as stop:
        if not prints(args):
            return EXIT_INTERRUPTED
        saved = []
        if args.view_out:
            save(stop.result.page)
            saved.append(f"page written to {args.view_out}")
        if opts.checkpoint:
            saved.append(f"checkpoint written to {opts.checkpoint}")
        print(
            f"meshnb: interrupted after {stop.result.steps} steps" + "".join(f"; {s}" for s in saved), file=sys.stderr
        )
        return EXIT_INTERRUPTED
    if not prints(args):
        return EXIT_OK  # mpi: rank 0 prints (and writes) every rank's results
    print(json.dumps(result.to_json()) if args.json else summary(result), flush=True)
    if args.view_out:
        save(result.page)
    return EXIT_OK
