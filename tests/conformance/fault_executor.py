"""An executor for ``meshnb check PACK --exec``, made from the fault models: ``python fault_executor.py
MODE CASE_DIR OUT_DIR``.

MODE is a fault model's name (``mode-z``: none) run by :func:`meshnb.conformance.faults.run` as the
case says, or a way to misbehave: ``crash`` (a message on stderr, exit 3), ``hang`` (starts a child
that sleeps too, writes the child's pid to ``$FAULT_EXECUTOR_PIDS`` and sleeps), ``nothing`` (exit 0,
no output), ``short`` (a 100-byte page), ``garbage`` (a text page and a 7-byte trace), ``no-trace``
(mode Z's pages without the trace).  Run with the page and trace of system 0 as the pack has them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path


def run(mode: str, case_dir: Path, out: Path) -> int:
    if mode == "crash":
        print("executor: device lost", file=sys.stderr)
        return 3
    if mode == "hang":
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        with open(os.environ["FAULT_EXECUTOR_PIDS"], "a") as f:
            f.write(f"{os.getpid()} {child.pid}\n")
        time.sleep(600)
        return 0
    if mode == "nothing":
        return 0
    if mode == "short":
        (out / "out-0.page").write_bytes(bytes(100))
        return 0
    if mode == "garbage":
        (out / "out-0.page").write_text("not a page\n")
        (out / "trace.bin").write_bytes(b"garbage")
        return 0
    from meshnb.conformance import faults  # here: the misbehaving modes start at once

    cj = json.loads((case_dir / "case.json").read_text())
    m = faults.model("mode-z" if mode == "no-trace" else mode)
    pages = [(case_dir / f"in-{k}.page").read_bytes() for k in range(cj["systems"])]
    r = faults.run(
        pages,
        cj["steps"],
        grouped=cj["group"],
        set_lr={e["before_step"]: int(e["word"], 16) for e in cj["set_lr"]},
        m=m,
        from_init=cj["start"] == "init",
    )
    for k, page in enumerate(r.pages):
        (out / f"out-{k}.page").write_bytes(page)
    if mode != "no-trace":
        (out / "trace.bin").write_bytes(r.trace.astype("<u4").tobytes())
    return 0


if __name__ == "__main__":
    sys.exit(run(sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])))
