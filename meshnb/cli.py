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


from .host import RunInterrupted, RunResult, train

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


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="meshnb", description="The compute mesh's train program, bit-exact in float mode Z.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    t = sub.add_parser("train", help="run the train program and print params, loss and digests")
    t.add_argument("--steps", type=_count, default=4096, metavar="S", help="steps to run (default 4096)")
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
    return "\n".join(lines)


def _train(args: argparse.Namespace) -> int:
    view_in = _read_page(args.view_in) if args.view_in else None
    progress = args.progress if args.progress is not None else (not args.json and sys.stderr.isatty())
    try:
        result = train(
            args.steps,
            steps_per_task=args.steps_per_task,
            set_lr=args.set_lr,
            step_base=args.step_base,
            view_in=view_in,
            z=not args.ieee,
            progress=progress,
        )
    except RunInterrupted as stop:
        if args.view_out:
            _write_page(args.view_out, stop.result.page)
            print(f"meshnb: interrupted after {stop.result.steps} steps; page written to {args.view_out}", file=sys.stderr)
        else:
            print(f"meshnb: interrupted after {stop.result.steps} steps", file=sys.stderr)
        return 130
    except ValueError as e:
        raise UsageError(str(e)) from None
    if args.view_out:
        _write_page(args.view_out, result.page)
    if args.json:
        print(json.dumps(result.to_json()))
    else:
        print(_summary(result))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
        return _train(args)
    except UsageError as e:
        print(f"meshnb: error: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        print(f"meshnb: error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("meshnb: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
