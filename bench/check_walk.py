"""The walk of ``meshnb check``'s setup through the conformance code: ``setup_from_run`` then
``check`` of a single-op faulty executor (``faults.single_op("e", "swapped")``), traced with
``sys.setprofile``.  Each distinct function of ``meshnb/conformance`` is listed in the order it is
first entered; consecutive ones of the same file make one stay; a return is a stay in a file
already left.  Prints the stays, the returns and the files in order.

    PYTHONPATH=$PWD python bench/check_walk.py [--steps 16] [--no-trace] [-v]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from types import FrameType
from typing import Any

from meshnb.conformance import faults
from meshnb.conformance.check import check, executor_run, setup_from_run
from meshnb.testing.reference import init_page

ROOT = Path(__file__).resolve().parents[1] / "meshnb" / "conformance"


def walk(steps: int, with_trace: bool) -> list[tuple[str, str]]:
    """The distinct conformance functions (file, name) in order of first entry."""
    setup0 = setup_from_run(init_page(), steps)
    got = executor_run(setup0, faults.single_op("e", "swapped"))
    seen: dict[Any, tuple[str, str]] = {}

    def prof(frame: FrameType, event: str, arg: object) -> None:
        if event != "call":
            return
        code = frame.f_code
        if code in seen:
            return
        path = Path(code.co_filename)
        if path.is_relative_to(ROOT):
            seen[code] = (str(path.relative_to(ROOT)), code.co_qualname)

    sys.setprofile(prof)
    try:
        setup = setup_from_run(init_page(), steps)
        rep = check(setup, got.pages[0], got_trace=got.trace if with_trace else None)
    finally:
        sys.setprofile(None)
    assert rep.verdict == "FAIL"
    return list(seen.values())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=16)
    ap.add_argument("--no-trace", action="store_true")
    ap.add_argument("-v", action="store_true", help="list the functions of each stay")
    a = ap.parse_args()
    fns = walk(a.steps, not a.no_trace)
    stays: list[tuple[str, list[str]]] = []
    for f, name in fns:
        if stays and stays[-1][0] == f:
            stays[-1][1].append(name)
        else:
            stays.append((f, [name]))
    left: set[str] = set()
    returns = 0
    for i, (f, _) in enumerate(stays):
        returns += f in left
        if i:
            left.add(stays[i - 1][0])
    print(f"functions {len(fns)}, stays {len(stays)}, returns {returns}, files {len({f for f, _ in stays})}")
    for f, names in stays:
        print(f"  {f}" + (": " + ", ".join(names) if a.v else f" ({len(names)})"))


if __name__ == "__main__":
    main()
