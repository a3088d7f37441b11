"""The command line: ``meshnb train`` (also ``python -m meshnb train``).

Exit codes: 0 done, 1 a failure while running, 2 bad arguments or bad input, 130 interrupted.
Every error is one line on stderr.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from typing import NoReturn


from .host import ClusterError, RunInterrupted, RunResult, train

_MASK32 = 0xFFFFFFFF


class UsageError(Exception):
    """Bad arguments or bad input: exit 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # one line, not argparse's usage block
        raise UsageError(message)


def _hex_u32(text: str, what: str) -> int:
    try:
        value = int(text, 16)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{what}: {text!r} is not hex") from None
    if not 0 <= value <= _MASK32 or text.strip().startswith("-"):
        raise argparse.ArgumentTypeError(f"{what}: {text!r} is not a u32 in hex")
    return value


def _count(text: str) -> int:
    try:
        value = int(text, 10)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} is negative")
    return value


def _positive_u32(text: str) -> int:
    value = _count(text)
    if not 1 <= value <= _MASK32:
        raise argparse.ArgumentTypeError(f"{text!r} must be from 1 to {_MASK32}")
    return value


def _set_lr(text: str) -> tuple[int, int]:
    step, sep, bits = text.partition(":")
    if not sep:
        raise argparse.ArgumentTypeError(f"{text!r} is not STEP:HEX")
    return _count(step), _hex_u32(bits, "f32 bits")


def _step_base(text: str) -> int:
    hi, sep, lo = text.partition(":")
    if not sep:
        raise argparse.ArgumentTypeError(f"{text!r} is not HI:LO")
    return _hex_u32(hi, "step high half") << 32 | _hex_u32(lo, "step low half")


def _systems(text: str) -> int:
    value = _count(text)
    if not 1 <= value <= 64:
        raise argparse.ArgumentTypeError(f"{text!r} must be from 1 to 64")
    return value


def _positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r} must be a positive number")
    return value


def _stall(text: str) -> tuple[int, int, int]:
    parts = text.split(":")
    if len(parts) != 3:
        raise argparse.ArgumentTypeError(f"{text!r} is not K:TASK:MS")
    k, call, ms = (_count(p) for p in parts)
    return k, call, ms


_CLUSTER_FLAGS = (("backend", "--backend"), ("timeout_ms", "--timeout-ms"), ("stall", "--stall"),
                  ("give_up", "--give-up"), ("checkpoint", "--checkpoint"), ("checkpoint_every", "--checkpoint-every"))


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="meshnb", description="The compute mesh's train program, bit-exact in float mode Z.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    t = sub.add_parser("train", help="run the train program and print params, loss and digests")
    t.add_argument("--steps", type=_count, metavar="S", help="steps to run (default 4096; with --resume, the run's)")
    t.add_argument("--steps-per-task", type=_positive_u32, metavar="K", help="STEPS_PER_TASK of the page (default 64)")
    t.add_argument(
        "--set-lr", type=_set_lr, action="append", default=[], metavar="STEP:HEX",
        help="SET_LR with f32 bits HEX before the task that starts when STEP steps are done (repeatable)",
    )
    t.add_argument("--step-base", type=_step_base, metavar="HI:LO", help="after init, set STEP_HI:NEXT_STEP (hex)")
    t.add_argument("--view-in", metavar="PATH", help="start from this raw 4096-byte page instead of init")
    t.add_argument("--view-out", metavar="PATH", help="write the final page here")
    t.add_argument("--json", action="store_true", help="print one JSON document instead of the summary")
    t.add_argument(
        "--progress", action=argparse.BooleanOptionalAction, default=None,
        help="progress bar on stderr (default: when stderr is a terminal)",
    )
    t.add_argument("--ieee", action="store_true", help="plain IEEE float32 instead of float mode Z (comparison only)")
    c = t.add_argument_group("clusters")
    c.add_argument("--systems", type=_systems, metavar="N", help="a cluster of N systems in lockstep (1 to 64)")
    c.add_argument("--backend", metavar="NAME",
                   help="threads (default), processes, fused, or mpi (under mpiexec: one system per rank)")
    c.add_argument("--timeout-ms", type=_positive, metavar="T", help="a round's timeout in ms (default 1000)")
    c.add_argument(
        "--stall", type=_stall, action="append", metavar="K:TASK:MS",
        help="system K sleeps MS ms before its TASK call number TASK (from 0, retries included; repeatable)",
    )
    c.add_argument("--give-up", type=_positive, metavar="S", help="stop when a member completes no step for S s (default 60)")
    c.add_argument("--checkpoint", metavar="PATH", help="write the whole run here at task boundaries, on Ctrl-C and at the end")
    c.add_argument("--checkpoint-every", type=_positive, metavar="S", help="seconds between checkpoints (default 5)")
    c.add_argument("--resume", metavar="PATH", help="continue the run of this checkpoint")
    b = sub.add_parser("bench", help="steps per second of each path on this machine (every figure bit-verified)")
    b.add_argument("--seconds", type=float, metavar="S", help="time budget per path (default 2; --quick 0.25)")
    b.add_argument("--quick", action="store_true", help="a ~3 s run: shorter budgets and bit checks")
    b.add_argument("--json", action="store_true", help="print one JSON document instead of the table")
    b.add_argument("--paths", type=lambda s: [p for p in s.split(",") if p], metavar="A,B", help="only these paths")
    return parser


def _read_page(path: str) -> bytes:
    try:
        with open(path, "rb") as f:
            data = f.read(4097)
    except OSError as e:
        raise UsageError(f"--view-in {path}: {e.strerror}") from None
    if len(data) != 4096:
        raise UsageError(f"--view-in {path}: a page is 4096 bytes, this file has {os.path.getsize(path)}")
    return data


def _write_page(path: str, page: bytes) -> None:
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "wb") as f:
        f.write(page)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


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
        lines.append(f"jit     {result.first_call_seconds:.3f} s before the steps (compile, or load from numba's cache)")
    return "\n".join(lines)


def _cluster_options(args: argparse.Namespace) -> dict[str, object]:
    """The library's cluster arguments from the flags (only those given: the library has the defaults)."""
    if args.systems is None and args.resume is None and args.backend != "mpi":  # mpi: N is the job's size
        for name, flag in _CLUSTER_FLAGS:
            if getattr(args, name) is not None:
                raise UsageError(f"{flag} is for clusters: give --systems N (or --resume PATH)")
        return {}
    given = {
        "systems": args.systems, "backend": args.backend, "timeout_ms": args.timeout_ms, "stalls": args.stall,
        "give_up_s": args.give_up, "checkpoint": args.checkpoint, "checkpoint_every_s": args.checkpoint_every,
        "resume": args.resume,
    }
    return {name: value for name, value in given.items() if value is not None}


def _train(args: argparse.Namespace) -> int:
    view_in = _read_page(args.view_in) if args.view_in else None
    progress = args.progress if args.progress is not None else (not args.json and sys.stderr.isatty())
    cluster = _cluster_options(args)
    try:
        result = train(
            args.steps,
            steps_per_task=args.steps_per_task,
            set_lr=args.set_lr or (None if args.resume else []),  # a resume takes the run's changes
            step_base=args.step_base,
            view_in=view_in,
            z=not args.ieee,
            progress=progress,
            **cluster,  # type: ignore[arg-type]
        )
    except RunInterrupted as stop:
        if not _prints(args):
            return 130
        saved = [f"page written to {args.view_out}"] if args.view_out else []
        if args.view_out:
            _write_page(args.view_out, stop.result.page)
        if args.checkpoint:
            saved.append(f"checkpoint written to {args.checkpoint}")
        print(f"meshnb: interrupted after {stop.result.steps} steps" + "".join(f"; {s}" for s in saved), file=sys.stderr)
        return 130
    except ValueError as e:
        raise UsageError(str(e)) from None
    if not _prints(args):
        return 0  # mpi: rank 0 prints (and writes) every rank's results
    if args.view_out:
        _write_page(args.view_out, result.page)
    if args.json:
        print(json.dumps(result.to_json()))
    else:
        print(_summary(result))
    return 0


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
    from .mpi import is_root

    return is_root()


def main(argv: Sequence[str] | None = None) -> int:
    args = None
    try:
        args = build_parser().parse_args(argv)
        if args.command == "bench":
            from . import bench  # not imported by `meshnb train`: start-up stays short

            try:
                return bench.main(args.seconds, args.quick, args.json, args.paths)
            except ValueError as e:
                raise UsageError(str(e)) from None
        return _train(args)
    except UsageError as e:
        if _prints(args, argv):
            print(f"meshnb: error: {e}", file=sys.stderr)
        return 2
    except (OSError, ClusterError) as e:
        print(f"meshnb: error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("meshnb: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
