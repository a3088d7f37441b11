"""``python executor.py BINARY CASE_DIR OUT_DIR``: runs a case on the seed's train.c built over this folder's
headers (``mesh/rt_wasm.h`` makes it a native executor taking the run on its command line).

Only the standard library: nothing of meshnb is imported, so the executor stays apart from what it checks.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path


def argv(binary: str, case_dir: Path, out_dir: Path) -> list[str]:
    """The executor's command line for the case in ``case_dir``: the run, the pages, then the SET_LR and
    other ``task`` calls in the order the case makes them at each step (calls before a SET_LR there)."""
    cj = json.loads((case_dir / "case.json").read_text())
    n = cj["systems"]
    calls = [f"call:{e['before_step']}:{e['op']}:{e['arg']}" for e in cj.get("calls", [])]
    calls += [f"{e['before_step']}:{e['word']}" for e in cj["set_lr"]]
    calls += [f"T:{e['system']}:{e['round']}" for e in cj.get("inject_timeouts", [])]
    return [
        binary,
        str(n),
        str(int(cj["group"])),
        str(cj["steps"]),
        str(cj["steps_per_task"]),
        str(int(cj["step_base"])),
        str(int(cj["start"] == "init")),
        str(out_dir),
        *(str(case_dir / f"in-{k}.page") for k in range(n)),
        *calls,
    ]


if __name__ == "__main__":
    binary, case_dir, out_dir = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])
    sys.exit(subprocess.run(argv(binary, case_dir, out_dir)).returncode)
